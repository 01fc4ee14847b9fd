"""Power-of-Choice (Cho, Wang & Joshi, 2020): biased client selection toward high local loss.

Each round t, with m = max(1, ⌊q·K⌋) (FedAvg's count):

1. draw a candidate set A of d clients without replacement, client k with probability
   ∝ its data share p_k = n_k / N (:func:`candidate_distribution`, :func:`draw_candidates`);
2. every candidate computes its local loss F_k(w_t) — the mean cross-entropy of the current
   global model on its train split (one vectorised engine evaluation over A);
3. the m candidates with the highest loss train (:func:`top_m`); the server takes the
   sample-weighted FedAvg of their weights (:func:`fedlib.methods.base.global_model_rounds`).

Deviations from Cho et al., and why:

* **d < m.** The paper requires m ≤ d ≤ K; Table II's grid d ∈ {6, 8, 10, 16} is below
  m = 50 for K = 100, q = 0.5, so every Table III cell at K = 100 meets the case. Two readings,
  ``Hyper.d_policy`` (:func:`round_sizes`):

  - ``"raise"`` (default): d is raised to m (and capped at K), so m clients train each round,
    as in every other method. With d = m PoC degenerates to data-share-weighted sampling.
  - ``"min"`` (the authors' code, reference-notes "What produced Table III"): d candidates are
    drawn and the first min(d, m) by loss train — with d = 8 < m only the 8 candidates train,
    a fraction d/K of the clients per round instead of q.

  The values used are recorded in ``info["d_effective"]`` and ``info["m_trained"]``.
* **Aggregation.** Cho et al. average the selected clients' models with equal weights
  (1/m; the sampling ∝ p_k already accounts for data size). This module uses the
  sample-weighted FedAvg of the selected clients by default (``aggregation='samples'``, as
  Table II's FedAvg family); ``'uniform'`` is the plain mean, which is also what the PSI
  papers' FedLab code computed.
* **Loss.** F_k(w) is the mean cross-entropy on the client's train split (``loss='mean'``).
  The PSI papers' code ranked by FedLab's summed batch losses (``loss='fedlab'``:
  :func:`fedlib.methods.base.fedlab_losses`, Σ of ⌈n_k/64⌉ batch means), which favours
  large clients.

The PSI papers' code (``paper_code`` reproduction): ``d_policy='min'``, ``aggregation='uniform'``,
``loss='fedlab'``, plain SGD lr 0.001, batch 64, no shuffling.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import check_choice, check_int
from .base import (AGGREGATIONS, Context, Outcome, State, fedlab_losses, global_model_rounds, local_losses,
                   round_size)
from .contract import MethodInfo

NAME = "poc"
GRID = {"d": (6, 8, 10, 16)}  # Clust-PSI-PFL Table II


D_POLICIES = ("raise", "min")


@dataclass(frozen=True)
class Hyper:
    d: int = 8                   # candidate-set size (Table II)
    d_policy: str = "raise"      # d < m: "raise" d to m, or train "min"(d, m) clients (the authors' code)
    aggregation: str = "samples"  # "samples" (n_k-weighted) or "uniform" (plain mean; the authors' code)
    loss: str = "mean"           # ranking loss: "mean" cross-entropy or "fedlab" (summed batch means)

    def __post_init__(self):
        check_int(self.d, "d", 1)
        check_choice(self.d_policy, "d_policy", D_POLICIES)
        check_choice(self.aggregation, "aggregation", AGGREGATIONS)
        check_choice(self.loss, "loss", ("mean", "fedlab"))



def candidate_distribution(n) -> np.ndarray:
    """Data shares p_k = n_k / Σ_j n_j, (K,) float64 from train samples ``n`` (K,) (positive sum)."""
    n = np.asarray(n, dtype=np.float64)
    if n.ndim != 1 or np.any(n < 0) or not n.sum() > 0:
        raise ValueError(f"n must be a 1-D array of non-negative counts with a positive sum, got {n!r}")
    return n / n.sum()


def effective_d(d: int, m: int, n_clients: int) -> int:
    """The candidate-set size used: d raised to m (PoC needs d ≥ m) and capped at K."""
    return min(n_clients, max(d, m))


def round_sizes(d: int, m: int, n_clients: int, policy: str = "raise") -> tuple[int, int]:
    """(candidates drawn, clients trained) per round under ``policy``.

    ``"raise"``: (min(K, max(d, m)), m); ``"min"`` (the authors' code): (min(K, d), min(K, d, m)).
    """
    check_choice(policy, "d_policy", D_POLICIES)
    if policy == "raise":
        return effective_d(d, m, n_clients), m
    return min(n_clients, d), min(n_clients, d, m)


def draw_candidates(rng: np.random.Generator, p, d: int) -> np.ndarray:
    """d distinct client ids drawn without replacement with probabilities ``p`` (shape (d,))."""
    return rng.choice(len(p), size=d, replace=False, p=p)


def top_m(losses, m: int) -> np.ndarray:
    """Positions (m,) int64 of the m largest of ``losses`` (d,), largest first (ties: earlier first)."""
    losses = np.asarray(losses, dtype=np.float64)
    if not 1 <= m <= losses.size:
        raise ValueError(f"m must be in 1..{losses.size}, got {m}")
    return np.argsort(-losses, kind="stable")[:m].astype(np.int64)


def select(ctx: Context, rng: np.random.Generator, global_state: State, d: int, m: int,
           loss: str = "mean") -> np.ndarray:
    """One round's PoC selection: d candidates ∝ data share, the m with the highest loss ((m,))."""
    candidates = draw_candidates(rng, candidate_distribution(ctx.fed.n_train), d)
    scores = (local_losses if loss == "mean" else fedlab_losses)(ctx, global_state, candidates)
    return candidates[top_m(scores, m)]



def run(ctx: Context, hp: Hyper) -> Outcome:
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    d, trained = round_sizes(hp.d, m, ctx.n_clients, hp.d_policy)
    out = global_model_rounds(ctx, choose=lambda t, w, rng, memo: select(ctx, rng, w, d, trained, hp.loss),
                              selection_stream="selection/poc", weights=hp.aggregation)
    out.info.update({"d": hp.d, "d_effective": d, "m": m, "m_trained": trained, "d_policy": hp.d_policy,
                     "aggregation": hp.aggregation, "loss": hp.loss})
    return out


# all its training goes through global_model_rounds (FLConfig.stream_average)
INFO = MethodInfo(NAME, "PoC", Hyper, run, grid=GRID, streams_average=True, resumable=True)
