"""FedAMP — Federated Attentive Message Passing (Huang et al., AAAI 2021).

Every client i keeps a personalised model w_i (all K start from the run's initial model).
Each round t, with S_t the m = max(1, ⌊q·K⌋) clients drawn uniformly from the stream
``"selection/group0"`` (the same clients as FedAvg):

1. attention over the selected clients' current models (trainable weights, flattened;
   :func:`attention`); by default (``attention='softmax'``)
       ξ_ii = s (``self_weight``),
       ξ_ij = (1 − s) · exp(−‖w_i − w_j‖²/σ) / Σ_{h∈S_t, h≠i} exp(−‖w_i − w_h‖²/σ),  j ≠ i,
   so every row sums to 1 and a closer peer gets more weight; squared distances are exact
   sums of squared differences in float64 and the softmax is max-shifted, so large
   distances never underflow to an all-zero row. With one selected client ξ = [[1]].
   ``attention='paper'`` is Huang et al.'s own rule (and PFLlib's ``serveramp.py``):
       ξ_ij = α_k · A′(‖w_i − w_j‖²),  A′(x) = e^{−x/σ}/σ,  j ≠ i;   ξ_ii = 1 − Σ_{j≠i} ξ_ij,
   which underflows to ξ = I (each client alone) once ‖w_i − w_j‖² ≫ σ, and makes ξ_ii negative
   when the peers are close enough that their weights sum past 1 (kept as the paper has it);
2. the personalised cloud model u_i = Σ_{j∈S_t} ξ_ij w_j (:func:`cloud_models`);
3. client i trains from u_i on F_i(w) + (λ/(2α))‖w − u_i‖² — the engine's proximal term
   (μ/2)‖w − c‖² with c = u_i and μ = λ/α, squared and with its gradient μ(w − u_i) in every
   local step — and w_i ← its trained model.

Evaluation: each client its own w_i (``assignment`` = 0 … K−1); a client never selected
keeps the initial model. FedAMP forms no clusters: ``info['cluster_of_client']`` is every
client in its own group (0 … K−1).

Departures and defaults:

* The attention. The paper's ξ_ij = α_k·A′(‖w_i − w_j‖²), A′(x) = e^{−x/σ}/σ, with
  ξ_ii = 1 − Σ_{j≠i} ξ_ij, makes every off-diagonal weight vanish once ‖w_i − w_j‖² ≫ σ (real
  networks, σ = 1): FedAMP then trains each client alone. It is selectable
  (``attention='paper'``); by default the workbook uses the fixed self
  weight and a softmax over the peers (the form of the paper's heuristic HeurFedAMP, whose
  softmax is over cosine similarities; here over −‖w_i − w_j‖²/σ as FedPrism Sec. 4.4
  describes). s = 0.5 is the workbook's choice (neither the paper nor PFLlib fixes one).
* σ = 1, λ = 1, α = 1: PFLlib's defaults (``--sigma``, ``--lamda``, ``--alphaK``), so μ = 1.
  Attention only among the round's selected clients (the paper's clients all take part).
* PFLlib's client adds 0.5·λ/α·‖w − u‖ — the norm not squared, and computed on ``.data``
  so it contributes no gradient (training ignores it); here the term is squared and its
  gradient is applied.
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
ATTENTIONS = ("softmax", "paper")
GRID = {}  # PFLlib's defaults; FedPrism tunes nothing for its baselines

__all__ = ["NAME", "GRID", "Hyper", "attention", "cloud_models", "run"]


@dataclass(frozen=True)
class Hyper:
    sigma: float = 1.0        # σ, attention scale (PFLlib)
    self_weight: float = 0.5  # ξ_ii (the workbook's choice)
    lam: float = 1.0          # λ, proximal strength (PFLlib)
    alpha: float = 1.0        # α_k, the paper's server step; the prox is (λ/(2α))‖w − u‖² (PFLlib)
    attention: str = "softmax"  # 'softmax' (the workbook's default) or 'paper' (Huang et al.'s A′)

    def __post_init__(self):
        check_choice(self.attention, "attention", ATTENTIONS)
        check_number(self.sigma, "sigma", 0, low_open=True)
        check_number(self.self_weight, "self_weight", 0, 1)
        check_number(self.lam, "lam", 0)
        check_number(self.alpha, "alpha", 0, low_open=True)


def attention(weights_flat, sigma: float, self_weight: float, rule: str = "softmax",
              alpha: float = 1.0) -> np.ndarray:
    """FedAMP's message-passing weights ξ (M, M) among M models.

    Parameters
    ----------
    weights_flat : Tensor or array-like, shape (M, D)
        The models' trainable weights, one row each.
    sigma : float > 0
        σ: off-diagonal weights ∝ exp(−‖w_i − w_j‖²/σ).
    self_weight : float in [0, 1]
        ξ_ii; the peers share 1 − ξ_ii (``rule='softmax'`` only).
    rule : 'softmax' or 'paper'
        'softmax': the fixed self weight and a softmax over the peers (module docstring);
        'paper': ξ_ij = α·e^{−‖w_i − w_j‖²/σ}/σ, ξ_ii = 1 − Σ_{j≠i} ξ_ij (Huang et al.).
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


INFO = MethodInfo(NAME, "FedAMP", Hyper, run, grid=GRID, param_average=True, resumable=True)
