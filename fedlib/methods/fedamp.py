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
``attention: heurfedamp`` (7 partitions, seed 0) ran HeurFedAMP, and notebook 11 reads those.
FedPrism Table 1 has no HeurFedAMP record yet (its runs need a GPU).

Evaluation: each client its own w_i (``assignment`` = 0 … K−1); a client never selected
keeps the initial model. FedAMP forms no clusters: ``info['cluster_of_client']`` is every
client in its own group (0 … K−1).

Departures and defaults:

* σ = 1, λ = 1, α = 1: PFLlib's defaults (``--sigma``, ``--lamda``, ``--alphaK``), so μ = 1;
  one σ for every rule, as the paper names it in both (a distance scale in A′, a sharpness of
  the cosine weights in HeurFedAMP; FLGo's HeurFedAMP defaults to σ = 25 and ξ = 1/N). The self
  weight ξ = 0.5 is the workbook's choice (the paper makes it a hyperparameter). Attention only
  among the round's selected clients (the paper's clients all take part).
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
GRID = {}  # PFLlib's defaults; FedPrism tunes nothing for its baselines

__all__ = ["NAME", "GRID", "ATTENTIONS", "Hyper", "heur_attention", "attention", "cloud_models", "run"]


@dataclass(frozen=True)
class Hyper:
    sigma: float = 1.0        # σ, attention scale (PFLlib)
    self_weight: float = 0.5  # ξ_ii of 'heurfedamp' and 'softmax' (the workbook's choice)
    lam: float = 1.0          # λ, proximal strength (PFLlib)
    alpha: float = 1.0        # α_k, the paper's server step; the prox is (λ/(2α))‖w − u‖² (PFLlib)
    attention: str = "heurfedamp"  # 'heurfedamp' (paper, deep nets), 'paper' (A′) or 'softmax' (old default)

    def __post_init__(self):
        check_choice(self.attention, "attention", ATTENTIONS)
        check_number(self.sigma, "sigma", 0, low_open=True)
        check_number(self.self_weight, "self_weight", 0, 1)
        check_number(self.lam, "lam", 0)
        check_number(self.alpha, "alpha", 0, low_open=True)


def heur_attention(cosines, sigma: float, self_weight: float) -> np.ndarray:
    """HeurFedAMP's weights from the pairwise cosine similarities (Huang et al., AAAI 2021):
    ξ_ii = ``self_weight``, ξ_ij = (1 − ξ_ii)·exp(σ·cos_ij) / Σ_{h≠i} exp(σ·cos_ih) for j ≠ i.

    Parameters
    ----------
    cosines : array-like, shape (M, M) — cos(w_i, w_j), finite (the diagonal is not read).
    sigma : float > 0 — σ, the sharpness of the weights.
    self_weight : float in [0, 1] — ξ_ii.

    Returns
    -------
    ndarray, shape (M, M), float64; every row sums to 1 (M = 1: [[1]]). The exponentials are
    max-shifted per row, so no row underflows.
    """
    check_number(sigma, "sigma", 0, low_open=True)
    check_number(self_weight, "self_weight", 0, 1)
    c = np.asarray(cosines, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] == 0 or not np.isfinite(c).all():
        fail("cosines", "a finite (M, M) matrix with M ≥ 1", cosines)
    m = len(c)
    xi = np.eye(m)
    if m == 1:
        return xi
    for i in range(m):
        peers = np.arange(m) != i
        z = sigma * c[i, peers]
        e = np.exp(z - z.max())
        xi[i, peers] = (1.0 - self_weight) * e / e.sum()
        xi[i, i] = self_weight
    return xi


def attention(weights_flat, sigma: float, self_weight: float, rule: str = "heurfedamp",
              alpha: float = 1.0) -> np.ndarray:
    """FedAMP's message-passing weights ξ (M, M) among M models.

    Parameters
    ----------
    weights_flat : Tensor or array-like, shape (M, D)
        The models' trainable weights, one row each.
    sigma : float > 0
        σ: off-diagonal weights ∝ exp(σ·cos(w_i, w_j)) ('heurfedamp'), ∝ exp(−‖w_i − w_j‖²/σ)
        ('paper', 'softmax').
    self_weight : float in [0, 1]
        ξ_ii; the peers share 1 − ξ_ii ('heurfedamp' and 'softmax'; 'paper' ignores it).
    rule : 'heurfedamp', 'paper' or 'softmax'
        'heurfedamp': HeurFedAMP (:func:`heur_attention`, the paper's rule for deep networks);
        'paper': ξ_ij = α·e^{−‖w_i − w_j‖²/σ}/σ, ξ_ii = 1 − Σ_{j≠i} ξ_ij (Huang et al.'s FedAMP);
        'softmax': the fixed self weight and a softmax over −‖w_i − w_j‖²/σ (the workbook's
        earlier default, module docstring).
    alpha : float > 0
        α_k of the 'paper' rule.

    Returns
    -------
    ndarray, shape (M, M), float64; every row sums to 1 (M = 1: [[1]]).
    """
    check_number(sigma, "sigma", 0, low_open=True)
    check_number(self_weight, "self_weight", 0, 1)
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
        cos = to_host((w @ w.T) / (norms[:, None] * norms[None, :]).clamp_min(torch.finfo(torch.float64).tiny),
                      np.float64)
        return heur_attention(np.clip(cos, -1.0, 1.0), sigma, self_weight)
    d2 = to_host(torch.stack([((w - w[i]) ** 2).sum(1) for i in range(m)]), np.float64)
    xi = np.zeros((m, m))
    if m == 1:
        xi[0, 0] = 1.0
        return xi
    if rule == "paper":
        xi = alpha * np.exp(-d2 / sigma) / sigma
        np.fill_diagonal(xi, 0.0)
        np.fill_diagonal(xi, 1.0 - xi.sum(1))
        return xi
    for i in range(m):
        peers = np.arange(m) != i
        z = -d2[i, peers] / sigma
        e = np.exp(z - z.max())
        xi[i, peers] = (1.0 - self_weight) * e / e.sum()
        xi[i, i] = self_weight
    return xi


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
        local, rng, selected = state
        clients = sample_clients(rng, everyone, ctx.cfg.fraction)
        w = take(local, clients)
        xi = attention(flatten_params(w, names), hp.sigma, hp.self_weight, hp.attention, hp.alpha)
        u = cloud_models(xi, w)
        check_finite_models(u, t, "after the attention step", ctx.cfg)
        res = ctx.train(u, clients, t, prox_center=u, prox_mu=mu)
        for name, value in res.params.items():
            local[name][torch.as_tensor(clients, device=value.device)] = value
        ctx.log_round(t, local, everyone)
        return local, rng, [*selected, clients.tolist()]

    local, _, selected = run_rounds(ctx, range(ctx.cfg.rounds), (local, ctx.rng("selection/group0"), []), step)
    trained = np.unique(np.concatenate([np.asarray(s, dtype=np.int64) for s in selected]))
    info = {"mu": mu, "selected": selected, "cluster_of_client": everyone.tolist(),
            "never_selected": np.setdiff1d(everyone, trained).tolist()}
    return Outcome(local, everyone.copy(), info)


INFO = MethodInfo(NAME, "FedAMP", Hyper, run, grid=GRID, resumable=True,
                  recorded_defaults={"attention": "softmax"})  # every FedAMP record before issue 57 without the key
