"""FedAMP — Federated Attentive Message Passing (Huang et al., AAAI 2021).

Every client i keeps a personalised model w_i (all K start from the run's initial model).
Each round t, with S_t the m = max(1, ⌊q·K⌋) clients drawn uniformly from the stream
``"selection/group0"`` (the same clients as FedAvg):

1. attention ξ (M, M) over the selected clients' current models (trainable weights,
   flattened; :func:`attention`), by the rule ``attention``:

   * ``'heurfedamp'`` — the default: the paper's HeurFedAMP, the rule Huang et al. run on deep
     networks (:func:`heur_attention`):
         ξ_ii = ξ (``self_weight``),
         ξ_ij = (1 − ξ) · exp(σ·cos(w_i, w_j)) / Σ_{h∈S_t, h≠i} exp(σ·cos(w_i, w_h)),  j ≠ i,
     cos the cosine similarity of the flattened weights; every row sums to 1.
   * ``'paper'`` — the paper's FedAMP rule (and PFLlib's ``serveramp.py``):
         ξ_ij = α_k · A′(‖w_i − w_j‖²),  A′(x) = e^{−x/σ}/σ,  j ≠ i;   ξ_ii = 1 − Σ_{j≠i} ξ_ij,
     which underflows to ξ = I (each client alone) once ‖w_i − w_j‖² ≫ σ (real networks, σ = 1),
     and makes ξ_ii negative when the peers are close enough that their weights sum past 1
     (kept as the paper has it). The paper keeps it for convex models; for deep networks it
     proposes HeurFedAMP.
   * ``'softmax'`` — the workbook's own rule, neither paper's (the default until issue 57):
     ξ_ii = ξ, ξ_ij = (1 − ξ)·softmax_{j≠i}(−‖w_i − w_j‖²/σ). It was credited to FedPrism §4.4,
     which says only "pairwise model similarity"; at σ = 1 it is a hard nearest neighbour.

   Squared distances are exact sums of squared differences in float64; both softmaxes are
   max-shifted, so no row underflows to zeros. With one selected client ξ = [[1]];
2. the personalised cloud model u_i = Σ_{j∈S_t} ξ_ij w_j (:func:`cloud_models`);
3. client i trains from u_i on F_i(w) + (λ/(2α))‖w − u_i‖² — the engine's proximal term
   (μ/2)‖w − c‖² with c = u_i and μ = λ/α, squared and with its gradient μ(w − u_i) in every
   local step — and w_i ← its trained model.

Which records used which rule (``MethodInfo.recorded_defaults``: a committed spec without
``attention`` ran ``'softmax'``, and reads so in :func:`fedlib.records.with_recorded_defaults`):
the cross-paper FedAMP records written before issue 57 (``benchmarks/records/cross_paper``, 7,
spec without ``attention``) and FedPrism Table 1's main FedAMP rows
(``benchmarks/records/fedprism/table1``, spec without ``attention``) ran ``'softmax'``; FedPrism
Table 1's ``{'attention': 'paper'}`` rows ran Huang et al.'s A′; the cross-paper records with
``attention: heurfedamp`` (7 partitions, seed 0) ran HeurFedAMP at σ = 1 (a spec without ``sigma``
ran σ = 1: the near-uniform reading, issue 69), and notebook 11 reads those.
FedPrism Table 1 has no HeurFedAMP record yet (its runs need a GPU).

Evaluation: each client its own w_i (``assignment`` = 0 … K−1); a client never selected
keeps the initial model. FedAMP forms no clusters: ``info['cluster_of_client']`` is every
client in its own group (0 … K−1). ``info['attention_spread']``: per round, ``round`` (from 1),
``sigma`` (σ_t) and :func:`attention_spread` of ξ.

Departures and defaults:

* σ (issue 69). HeurFedAMP's exp(σ·cos) needs σ on the scale of 1/(1 − cos): after one round
  of 5 SGD epochs from a common start on FMNIST the models' pairwise cosines are
  0.99954–0.9999995, and at σ = 1 every peer weight is uniform to 4 digits (0.026314–0.026325
  against 1/38 = 0.026316): FedAMP is then "ξ self, 1 − ξ the plain average of the peers", and
  FLGo's σ = 25 barely moves it (0.02627–0.02655). The default ``sigma='median'`` chooses σ
  each round from that round's models: σ_t = 1 / median_{i<j∈S_t} (1 − cos(w_i, w_j)) over the
  pairs with 1 − cos > 1e-12 (:func:`median_sigma`; σ_t = 1 when there is none, the weights
  then uniform whatever σ). Then exp(σ_t·cos_ij) ∝ exp(−(1 − cos_ij)/median), a peer at the
  round's median dissimilarity weighs e^{−1} of an identical peer, and the weights do not move
  when every (1 − cos) is multiplied by one constant (scale-free: the same rule at round 1 and
  round 100, for any model size). For 'softmax' 'median' sets σ_t = the median ‖w_i − w_j‖²
  (σ divides there). 'paper' keeps σ = 1 under 'median': A′(x) = e^{−x/σ}/σ is not normalised,
  and its 1/σ factor at σ = the median distance makes the peers' weights sum far above 1 (the
  self weight negative; the smoke runs diverged), so the rule is scale-free only through σ. Labelled readings (:data:`READINGS`): ``sigma=1`` (PFLlib's
  ``--sigma``; every FedAMP record before issue 69 ran it: ``recorded_defaults``) and FLGo's
  HeurFedAMP ``sigma=25, self_weight='1/N'`` (ξ_ii = 1/M). λ = 1, α = 1: PFLlib's defaults
  (``--lamda``, ``--alphaK``), so μ = 1. The self weight ξ = 0.5 is the workbook's choice (the
  paper makes it a hyperparameter).
* Participation. The attention runs over the round's selected clients S_t only (M = |S_t|,
  ⌊q·K⌋ of the K): ξ, σ_t, '1/N' and the cloud models u_i are computed among them, and a
  client not selected neither sends nor receives messages that round. The paper's clients all
  take part every round, and FLGo's FedAMP runs full participation (its N is every client); at
  q < 1 the peers a client attends to are a random subset of the federation each round.
* Spread. Each round's σ_t and how far the weights are from uniform are in
  ``info['attention_spread']`` (:func:`attention_spread`: the mean and minimum over clients of
  the entropy of the peer weights over log(M − 1), and the mean and largest of (M − 1)·the
  largest peer weight; 1 and 1 are a plain average).
* PFLlib's client adds 0.5·λ/α·‖w − u‖ — the norm not squared, and computed on ``.data``
  so it contributes no gradient (training ignores it); here the term is squared and its
  gradient is applied. PFLlib's FedAMP attention differs from both of the paper's rules.
* The protocol's optimiser replaces the paper's plain gradient steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine import broadcast, flatten_params
from ..engine.host import to_host
from ..validation import check_choice, check_number, fail
from .base import Context, Outcome, State, check_finite_models, run_rounds, sample_clients, take
from .contract import MethodInfo

NAME = "fedamp"
ATTENTIONS = ("heurfedamp", "paper", "softmax")
SIGMA_MEDIAN = "median"  # σ chosen each round from the round's models (median_sigma)
SELF_WEIGHT_1_N = "1/N"  # ξ_ii = 1/M, M the clients the attention runs over (FLGo's ξ = 1/N)
GRID = {}  # PFLlib's defaults; FedPrism tunes nothing for its baselines

__all__ = ["NAME", "GRID", "ATTENTIONS", "SIGMA_MEDIAN", "SELF_WEIGHT_1_N", "READINGS", "Hyper", "median_sigma",
           "heur_attention", "attention", "attention_spread", "cloud_models", "run"]


@dataclass(frozen=True)
class Hyper:
    sigma: float | str = "median"  # σ: 'median' per round (:func:`median_sigma`), or a number (1: PFLlib; 25: FLGo)
    self_weight: float | str = 0.5  # ξ_ii of 'heurfedamp' and 'softmax' (workbook's choice); '1/N': 1/M (FLGo)
    lam: float = 1.0          # λ, proximal strength (PFLlib)
    alpha: float = 1.0        # α_k, the paper's server step; the prox is (λ/(2α))‖w − u‖² (PFLlib)
    attention: str = "heurfedamp"  # 'heurfedamp' (paper, deep nets), 'paper' (A′) or 'softmax' (old default)

    def __post_init__(self):
        check_choice(self.attention, "attention", ATTENTIONS)
        _check_sigma(self.sigma)
        _check_self_weight(self.self_weight)
        check_number(self.lam, "lam", 0)
        check_number(self.alpha, "alpha", 0, low_open=True)


def _check_sigma(sigma) -> None:
    if not (isinstance(sigma, str) and sigma == SIGMA_MEDIAN):
        if isinstance(sigma, str):
            fail("sigma", f"a number > 0 or {SIGMA_MEDIAN!r} (σ chosen each round, median_sigma)", sigma)
        check_number(sigma, "sigma", 0, low_open=True)


def _check_self_weight(self_weight) -> None:
    if not (isinstance(self_weight, str) and self_weight == SELF_WEIGHT_1_N):
        if isinstance(self_weight, str):
            fail("self_weight", f"a number in [0, 1] or {SELF_WEIGHT_1_N!r} (1/M, FLGo's ξ = 1/N)", self_weight)
        check_number(self_weight, "self_weight", 0, 1)


def median_sigma(dissimilarity) -> float:
    """σ for ``sigma='median'``: 1 / the median of the positive off-diagonal entries (i < j) of
    ``dissimilarity`` — (1 − cos(w_i, w_j)) for HeurFedAMP, ‖w_i − w_j‖² for 'paper' and
    'softmax' — so that a peer at the round's median dissimilarity weighs e^{−1} of an identical
    peer (HeurFedAMP's exp(σ·cos_ij) ∝ exp(−(1 − cos_ij)/median)). The weights are then unchanged
    when every dissimilarity is multiplied by one constant (scale-free). Pairs at 0 (clients
    that have not trained yet, still the initial model; values ≤ 1e-12 count as 0) are left
    out of the median; with no positive pair (M ≤ 1, or every model equal) σ = 1, and the
    weights are uniform whatever σ.

    Parameters
    ----------
    dissimilarity : array-like, shape (M, M), finite, ≥ 0 off the diagonal (the diagonal is not read).

    Returns
    -------
    float > 0
    """
    d = np.asarray(dissimilarity, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or not np.isfinite(d).all():
        fail("dissimilarity", "a finite (M, M) matrix", dissimilarity)
    upper = d[np.triu_indices(len(d), 1)]
    upper = upper[upper > 1e-12]
    return 1.0 / float(np.median(upper)) if upper.size else 1.0


def _sigma(sigma, dissimilarity) -> float:
    return median_sigma(dissimilarity) if isinstance(sigma, str) else float(sigma)


def _self_weight(self_weight, m: int) -> float:
    return 1.0 / m if isinstance(self_weight, str) else float(self_weight)


def heur_attention(cosines, sigma, self_weight) -> np.ndarray:
    """HeurFedAMP's weights from the pairwise cosine similarities (Huang et al., AAAI 2021):
    ξ_ii = ``self_weight``, ξ_ij = (1 − ξ_ii)·exp(σ·cos_ij) / Σ_{h≠i} exp(σ·cos_ih) for j ≠ i.

    Parameters
    ----------
    cosines : array-like, shape (M, M) — cos(w_i, w_j), finite (the diagonal is not read).
    sigma : float > 0 or 'median' — σ, the sharpness of the weights; 'median': σ =
        :func:`median_sigma` of (1 − cos).
    self_weight : float in [0, 1] or '1/N' — ξ_ii ('1/N': 1/M, FLGo's ξ = 1/N).

    Returns
    -------
    ndarray, shape (M, M), float64; every row sums to 1 (M = 1: [[1]]). The exponentials are
    max-shifted per row, so no row underflows.
    """
    _check_sigma(sigma)
    _check_self_weight(self_weight)
    c = np.asarray(cosines, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] == 0 or not np.isfinite(c).all():
        fail("cosines", "a finite (M, M) matrix with M ≥ 1", cosines)
    m = len(c)
    xi = np.eye(m)
    if m == 1:
        return xi
    sigma, self_weight = _sigma(sigma, 1.0 - c), _self_weight(self_weight, m)
    for i in range(m):
        peers = np.arange(m) != i
        z = sigma * c[i, peers]
        e = np.exp(z - z.max())
        xi[i, peers] = (1.0 - self_weight) * e / e.sum()
        xi[i, i] = self_weight
    return xi


def attention(weights_flat, sigma, self_weight, rule: str = "heurfedamp",
              alpha: float = 1.0, *, return_sigma: bool = False):
    """FedAMP's message-passing weights ξ (M, M) among M models.

    Parameters
    ----------
    weights_flat : Tensor or array-like, shape (M, D)
        The models' trainable weights, one row each.
    sigma : float > 0 or 'median'
        σ: off-diagonal weights ∝ exp(σ·cos(w_i, w_j)) ('heurfedamp'), ∝ exp(−‖w_i − w_j‖²/σ)
        ('paper', 'softmax'). 'median' (the default of :class:`Hyper`): chosen from these
        models by :func:`median_sigma` — 1/median(1 − cos) for 'heurfedamp', the median
        ‖w_i − w_j‖² itself for 'softmax' (σ divides there); 'paper' keeps σ = 1 (its A′ is
        not normalised: the module's docstring).
    self_weight : float in [0, 1] or '1/N'
        ξ_ii; the peers share 1 − ξ_ii ('heurfedamp' and 'softmax'; 'paper' ignores it).
        '1/N': 1/M (FLGo's ξ = 1/N, its N the clients taking part).
    rule : 'heurfedamp', 'paper' or 'softmax'
        'heurfedamp': HeurFedAMP (:func:`heur_attention`, the paper's rule for deep networks);
        'paper': ξ_ij = α·e^{−‖w_i − w_j‖²/σ}/σ, ξ_ii = 1 − Σ_{j≠i} ξ_ij (Huang et al.'s FedAMP);
        'softmax': the fixed self weight and a softmax over −‖w_i − w_j‖²/σ (the workbook's
        earlier default, module docstring).
    alpha : float > 0
        α_k of the 'paper' rule.
    return_sigma : bool
        Also return the σ used (the number, after 'median' is resolved).

    Returns
    -------
    ndarray, shape (M, M), float64; every row sums to 1 (M = 1: [[1]]); with ``return_sigma``
    the pair (ξ, σ).
    """
    _check_sigma(sigma)
    _check_self_weight(self_weight)
    check_choice(rule, "rule", ATTENTIONS)
    check_number(alpha, "alpha", 0, low_open=True)
    w = weights_flat.detach().double() if torch.is_tensor(weights_flat) else torch.as_tensor(
        np.asarray(weights_flat, dtype=np.float64))
    if w.ndim != 2 or len(w) == 0:
        fail("weights_flat", "an (M, D) matrix with M ≥ 1", weights_flat)
    m = len(w)
    if rule == "heurfedamp":
        norms = torch.linalg.vector_norm(w, dim=1)
        if m > 1 and bool((norms == 0).any()):
            fail("weights_flat", "models with nonzero weights (the cosine similarity of a zero vector is undefined)",
                 f"row {int(torch.nonzero(norms == 0)[0])} all zeros")
        cos = np.clip(to_host((w @ w.T) / (norms[:, None] * norms[None, :]).clamp_min(
            torch.finfo(torch.float64).tiny), np.float64), -1.0, 1.0)
        s = _sigma(sigma, 1.0 - cos)
        xi = heur_attention(cos, s, self_weight)
        return (xi, s) if return_sigma else xi
    d2 = to_host(torch.stack([((w - w[i]) ** 2).sum(1) for i in range(m)]), np.float64)
    s = (1.0 if rule == "paper" else 1.0 / median_sigma(d2)) if isinstance(sigma, str) else float(sigma)
    xi = np.zeros((m, m))
    if m == 1:
        xi[0, 0] = 1.0
        return (xi, s) if return_sigma else xi
    if rule == "paper":
        xi = alpha * np.exp(-d2 / s) / s
        np.fill_diagonal(xi, 0.0)
        np.fill_diagonal(xi, 1.0 - xi.sum(1))
        return (xi, s) if return_sigma else xi
    own = _self_weight(self_weight, m)
    for i in range(m):
        peers = np.arange(m) != i
        z = -d2[i, peers] / s
        e = np.exp(z - z.max())
        xi[i, peers] = (1.0 - own) * e / e.sum()
        xi[i, i] = own
    return (xi, s) if return_sigma else xi


def attention_spread(xi) -> dict:
    """How far each client's peer weights are from uniform: p_ij = ξ_ij / Σ_{h≠i} ξ_ih (j ≠ i),
    over the rows with M − 1 ≥ 2 peers and a positive peer total.

    Parameters
    ----------
    xi : array-like, shape (M, M) — attention weights (:func:`attention`).

    Returns
    -------
    dict of floats (None where no row qualifies): ``entropy_ratio_mean`` / ``_min`` — the
    rows' H(p_i) / log(M − 1) (1: uniform, 0: one peer takes all); ``max_over_uniform_mean``
    / ``_max`` — the rows' (M − 1)·max_j p_ij (1: uniform, M − 1: one peer takes all).
    """
    x = np.asarray(xi, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != x.shape[1] or not np.isfinite(x).all():
        fail("xi", "a finite (M, M) matrix", xi)
    m = len(x)
    ent, top = [], []
    for i in range(m if m >= 3 else 0):
        p = np.clip(np.delete(x[i], i), 0.0, None)
        if p.sum() <= 0:
            continue
        p = p / p.sum()
        nz = p[p > 0]
        ent.append(float(-(nz * np.log(nz)).sum() / np.log(m - 1)))
        top.append(float((m - 1) * p.max()))
    pick = lambda f, v: float(f(v)) if v else None  # noqa: E731
    return {"entropy_ratio_mean": pick(np.mean, ent), "entropy_ratio_min": pick(min, ent),
            "max_over_uniform_mean": pick(np.mean, top), "max_over_uniform_max": pick(max, top)}


def cloud_models(xi, stacked: State) -> State:
    """u_i = Σ_j ξ_ij w_j for every row i: (M, M) weights and a stacked state (M, ...) → (M, ...).

    Computed in float64, returned in each tensor's dtype and device.
    """
    x = torch.as_tensor(np.asarray(xi, dtype=np.float64))
    rows = {len(v) for v in stacked.values()}
    if x.ndim != 2 or x.shape[0] != x.shape[1] or rows != {x.shape[1]}:
        fail("xi", f"an (M, M) matrix with M = the stacked rows {sorted(rows)}", xi)
    return {k: torch.tensordot(x.to(v.device), v.double(), dims=1).to(v.dtype) for k, v in stacked.items()}


def run(ctx: Context, hp: Hyper) -> Outcome:
    """FedAMP over ``ctx.cfg.rounds`` rounds; K personalised models, each client its own."""
    everyone = np.arange(ctx.n_clients)
    names = [name for name, _ in ctx.model.named_parameters()]
    local = broadcast(ctx.init_state(), ctx.n_clients)
    mu = hp.lam / hp.alpha

    def step(t: int, state: tuple) -> tuple:  # one round; everything it carries is in `state`
        local, rng, selected, spread = state  # spread: per round, σ used and attention_spread(ξ)
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)
        w = take(local, clients)
        xi, sigma = attention(flatten_params(w, names), hp.sigma, hp.self_weight, hp.attention, hp.alpha,
                              return_sigma=True)
        u = cloud_models(xi, w)
        check_finite_models(u, t, "after the attention step", ctx.cfg)
        res = ctx.train(u, clients, t, prox_center=u, prox_mu=mu)
        for name, value in res.params.items():
            local[name][torch.as_tensor(clients, device=value.device)] = value
        ctx.log_round(t, local, everyone)
        return local, rng, [*selected, clients.tolist()], [*spread, {"round": t + 1, "sigma": sigma,
                                                                      **attention_spread(xi)}]

    local, _, selected, spread = run_rounds(ctx, range(ctx.cfg.rounds), (local, ctx.rng("selection/group0"), [], []),
                                            step)
    trained = np.unique(np.concatenate([np.asarray(s, dtype=np.int64) for s in selected]))
    info = {"mu": mu, "selected": selected, "attention_spread": spread, "cluster_of_client": everyone.tolist(),
            "never_selected": np.setdiff1d(everyone, trained).tolist()}
    return Outcome(local, everyone.copy(), info)


READINGS = {  # labelled readings of σ and ξ (hyperparameters a spec states); the default is Hyper()'s
    "sigma_median": {},  # σ = 1/median(1 − cos) each round, ξ = 0.5 (issue 69)
    "sigma_1": {"sigma": 1.0},  # PFLlib's σ = 1: every FedAMP record before issue 69 (a plain peer average)
    "flgo": {"sigma": 25.0, "self_weight": SELF_WEIGHT_1_N},  # FLGo's HeurFedAMP: σ = 25, ξ = 1/N
}

INFO = MethodInfo(NAME, "FedAMP", Hyper, run, grid=GRID, resumable=True,
                  recorded_defaults={"attention": "softmax",  # every FedAMP record before issue 57 without the key
                                     "sigma": 1.0})  # every FedAMP record before issue 69 ran σ = 1
