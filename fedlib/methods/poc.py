"""Power-of-Choice (Cho, Wang & Joshi, 2020): biased client selection toward high local loss.

Each round t, with m = max(1, ⌊q·K⌋) (FedAvg's count):

1. draw a candidate set A of d clients without replacement, client k with probability
   ∝ its data share p_k = n_k / N (:func:`candidate_distribution`, :func:`draw_candidates`);
2. every candidate computes its local loss F_k(w_t) — the mean cross-entropy of the current
   global model on its train split (one vectorised engine evaluation over A);
3. the m candidates with the highest loss train (:func:`top_m`); the server takes the
   sample-weighted FedAvg of their weights (:func:`fedlib.methods.base.global_model_rounds`).

Deviations from Cho et al., and why:

* **d < m.** The paper requires m ≤ d ≤ K. Here d is clamped to min(K, max(d, m))
  (:func:`effective_d`) and the value used is recorded in ``info["d_effective"]``. With d = m
  PoC degenerates to data-share-weighted random sampling. Note that Table II's grid
  d ∈ {6, 8, 10, 16} is below m = 50 for K = 100, q = 0.5: the clamp is active in every
  Table III cell at K = 100; the paper does not say how its code handled this.
* **Aggregation.** Cho et al. average the selected clients' models with equal weights
  (1/m; the sampling ∝ p_k already accounts for data size). As the PSI papers' Flower
  code, this module uses the sample-weighted FedAvg of the selected clients.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import broadcast, evaluate
from ..engine.host import to_host
from ..validation import check_int
from .base import Context, Outcome, State, global_model_rounds, round_size

NAME = "poc"
GRID = {"d": (6, 8, 10, 16)}  # Clust-PSI-PFL Table II


@dataclass(frozen=True)
class Hyper:
    d: int = 8  # candidate-set size (Table II)

    def __post_init__(self):
        check_int(self.d, "d", 1)



def candidate_distribution(n) -> np.ndarray:
    """Data shares p_k = n_k / Σ_j n_j.

    Parameters
    ----------
    n : array-like, shape (K,)
        Train samples per client (non-negative, positive sum).

    Returns
    -------
    ndarray, shape (K,), float64, summing to 1.
    """
    n = np.asarray(n, dtype=np.float64)
    if n.ndim != 1 or np.any(n < 0) or not n.sum() > 0:
        raise ValueError(f"n must be a 1-D array of non-negative counts with a positive sum, got {n!r}")
    return n / n.sum()


def effective_d(d: int, m: int, n_clients: int) -> int:
    """The candidate-set size used: d raised to m (PoC needs d ≥ m) and capped at K."""
    return min(n_clients, max(d, m))


def draw_candidates(rng: np.random.Generator, p, d: int) -> np.ndarray:
    """d distinct client ids drawn without replacement with probabilities ``p`` (shape (d,))."""
    return rng.choice(len(p), size=d, replace=False, p=p)


def top_m(losses, m: int) -> np.ndarray:
    """Positions of the m largest losses, largest first (ties: earlier position first).

    Parameters
    ----------
    losses : array-like, shape (d,)
    m : int, 1 ≤ m ≤ d

    Returns
    -------
    ndarray, shape (m,), int64
    """
    losses = np.asarray(losses, dtype=np.float64)
    if not 1 <= m <= losses.size:
        raise ValueError(f"m must be in 1..{losses.size}, got {m}")
    return np.argsort(-losses, kind="stable")[:m].astype(np.int64)


def local_losses(ctx: Context, global_state: State, clients) -> np.ndarray:
    """F_k(w): mean train-split cross-entropy of the global model on each of ``clients`` ((d,))."""
    clients = np.asarray(clients, dtype=np.int64)
    res = evaluate(ctx.model, broadcast(global_state, len(clients)), ctx.fed, clients,
                   split="train", path=ctx.cfg.path)
    return to_host(res.mean_loss)


def select(ctx: Context, rng: np.random.Generator, global_state: State, d: int, m: int) -> np.ndarray:
    """One round's PoC selection: d candidates ∝ data share, the m with the highest loss ((m,))."""
    candidates = draw_candidates(rng, candidate_distribution(ctx.fed.n_train), d)
    return candidates[top_m(local_losses(ctx, global_state, candidates), m)]



def run(ctx: Context, hp: Hyper) -> Outcome:
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    d = effective_d(hp.d, m, ctx.n_clients)
    rng = ctx.rng("selection/poc")
    out = global_model_rounds(ctx, choose=lambda t, w: select(ctx, rng, w, d, m))
    out.info.update({"d": hp.d, "d_effective": d, "m": m})
    return out
