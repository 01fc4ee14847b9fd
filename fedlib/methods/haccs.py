"""HACCS (Wolfrath et al., 2022): heterogeneity-aware clustered client selection.

Once, before training, the server clusters the clients by their label distributions with
OPTICS (:func:`cluster_clients`); OPTICS noise points (label −1) become singleton clusters
(:func:`noise_to_singletons`). Each round t, with m = max(1, ⌊q·K⌋):

1. every client k gets a latency ℓ_k ~ U(1, 10) drawn afresh from the seeded stream
   ``selection/haccs`` (the simulation has no real devices to measure);
2. cluster c gets probability (:func:`cluster_probabilities`)

       P(c) = ρ · (1/ℓ̄_c) / Σ_c' (1/ℓ̄_c')  +  (1 − ρ) · L̄_c² / Σ_c' L̄_c'²,

   ℓ̄_c the mean latency and L̄_c the mean last-known loss of its members: ρ → 1 favours fast
   clusters, ρ → 0 clusters with high (squared) loss. A client's loss is its mean training
   loss of the last round it trained (before it first trains: the initial global model's
   mean train-split loss, one evaluation at the start);
3. the clusters are ordered by weighted sampling without replacement with P
   (:func:`weighted_order`), and the round is filled by going through that order, one
   client per cluster per pass, each time the lowest-latency member not yet selected
   (:func:`fedlib.methods.base.round_robin`), until m distinct clients are chosen;
4. the server takes the sample-weighted FedAvg of their weights.

Variants (``Hyper.variant``):

* ``"psi"`` (default): OPTICS on the precomputed matrix of Hellinger distances
  H(p_i, p_j) = ‖√p_i − √p_j‖₂ / √2 between the clients' train label pmfs; ρ = 0.95
  (Table II); per-round random latencies. Only the distance is what the PSI papers ran; the
  rest of this variant follows Wolfrath et al. as described above.
* ``"original"`` (Wolfrath et al.): OPTICS with the Euclidean metric on the clients'
  label-frequency histograms P(y) (the same pmfs). The paper uses measured device
  latencies; none exist here, so this variant draws them per round exactly as ``"psi"``.

What the PSI papers' public code ran (reference-notes "What produced Table III"), none of it in
this module: OPTICS parameters chosen by silhouette over min_samples ∈ {2, 3}, max_eps ∈
{0.2, 0.8}, ξ ∈ {0.05, 0.8} with at most 30 % noise points; latencies from a four-class
CPU/bandwidth mixture; cluster scores θ_c = ρ(1 − ℓ̄_c/ℓ_max) + (1 − ρ)·L̄_c/Σ L̄ (the loss linear,
not squared); only d/2 clusters drawn, the fastest client of each, the round then filled to
⌊q·K⌋ by data share; plain SGD (lr 0.001, batch 64, no shuffling).

Both use sklearn's OPTICS defaults besides the metric (``min_samples=5``, ξ = 0.05), with
min_samples capped at K. How several clients are taken when m exceeds the number of
clusters (the round-robin passes of step 3) is this module's reading: the paper selects the
fastest device of each sampled cluster.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.cluster import OPTICS

from ..engine.host import to_host
from ..validation import check_choice, check_int, check_number
from .base import Context, Outcome, global_model_rounds, local_losses, round_robin, round_size

NAME = "haccs"
GRID = {"rho": (0.1, 0.5, 0.95)}  # Clust-PSI-PFL Table II
VARIANTS = ("psi", "original")
LATENCY_RANGE = (1.0, 10.0)  # per-round client latencies ~ U(LATENCY_RANGE)


@dataclass(frozen=True)
class Hyper:
    rho: float = 0.95         # latency-vs-loss mix (Table II)
    variant: str = "psi"      # "psi" (the PSI papers' Hellinger distance) or "original" (Euclidean)
    min_samples: int = 5      # OPTICS min_samples (sklearn's default), capped at K

    def __post_init__(self):
        check_number(self.rho, "rho", 0, 1)
        check_choice(self.variant, "variant", VARIANTS)
        check_int(self.min_samples, "min_samples", 2)


def label_pmfs(counts) -> np.ndarray:
    """Rows of ``counts`` (K, C) normalised to label pmfs (K, C); every row needs a positive sum."""
    counts = np.asarray(counts, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    if counts.ndim != 2 or np.any(counts < 0) or np.any(totals <= 0):
        raise ValueError("counts must be a (K, C) array of non-negative counts with positive row sums")
    return counts / totals


def hellinger_matrix(p) -> np.ndarray:
    """Pairwise Hellinger distances ‖√p_i − √p_j‖₂ / √2 between the rows of p (K, C) → (K, K)."""
    r = np.sqrt(np.asarray(p, dtype=np.float64))
    diff = r[:, None, :] - r[None, :, :]
    return np.sqrt(0.5 * (diff * diff).sum(-1))


def noise_to_singletons(labels) -> np.ndarray:
    """OPTICS labels (K,) with noise (−1) → each noise point its own new cluster id (K,)."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    noise = np.flatnonzero(labels < 0)
    labels[noise] = labels.max(initial=-1) + 1 + np.arange(noise.size)
    return labels


def optics_labels(x, min_samples: int, metric: str) -> np.ndarray:
    """OPTICS cluster ids (K,) with noise as singletons; ``x`` is (K, C) or, with
    ``metric="precomputed"``, a (K, K) distance matrix. Fewer than 2 points: one cluster."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return np.zeros(len(x), dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):  # zero reachabilities of identical rows
        fit = OPTICS(min_samples=min(min_samples, len(x)), metric=metric).fit(x)
    return noise_to_singletons(fit.labels_)


def cluster_clients(counts, variant: str = "psi", min_samples: int = 5) -> np.ndarray:
    """HACCS clusters (K,) from train label counts (K, C): see the module docstring."""
    p = label_pmfs(counts)
    if variant == "psi":
        return optics_labels(hellinger_matrix(p), min_samples, "precomputed")
    if variant == "original":
        return optics_labels(p, min_samples, "euclidean")
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def cluster_means(values, labels) -> np.ndarray:
    """Mean of ``values`` (K,) over each cluster of ``labels`` (K,; ids 0..G−1) → (G,)."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.bincount(labels, weights=values) / np.bincount(labels)


def cluster_probabilities(latency, loss, rho: float) -> np.ndarray:
    """P(c) = ρ·(1/ℓ_c)/Σ(1/ℓ) + (1−ρ)·L_c²/ΣL² (uniform loss term when every L_c = 0).

    Parameters
    ----------
    latency : array-like, shape (G,), positive
    loss : array-like, shape (G,), non-negative
    rho : float in [0, 1]

    Returns
    -------
    ndarray, shape (G,), summing to 1.
    """
    speed = 1.0 / np.asarray(latency, dtype=np.float64)
    sq = np.asarray(loss, dtype=np.float64) ** 2
    loss_share = sq / sq.sum() if sq.sum() > 0 else np.full(sq.size, 1.0 / sq.size)
    return rho * speed / speed.sum() + (1.0 - rho) * loss_share


def weighted_order(rng: np.random.Generator, p) -> np.ndarray:
    """A random order of all G items, drawn like sampling without replacement with
    probabilities ``p`` (Efraimidis–Spirakis keys u^(1/p)); zero-probability items come last.

    Returns
    -------
    ndarray, shape (G,), int64 — a permutation of 0..G−1.
    """
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        keys = np.log(rng.random(p.size)) / p  # −inf where p = 0
    return np.argsort(-keys, kind="stable").astype(np.int64)


def select(rng: np.random.Generator, labels, losses, rho: float, m: int) -> np.ndarray:
    """One round's HACCS selection (m distinct clients) from clusters ``labels`` (K,) and the
    clients' last-known losses (K,), drawing this round's latencies from ``rng``."""
    labels = np.asarray(labels, dtype=np.int64)
    latency = rng.uniform(*LATENCY_RANGE, size=labels.size)
    p = cluster_probabilities(cluster_means(latency, labels), cluster_means(losses, labels), rho)
    fastest_first = np.argsort(latency, kind="stable")
    ranked = [fastest_first[labels[fastest_first] == c] for c in range(p.size)]
    return round_robin(weighted_order(rng, p), ranked, m)


def run(ctx: Context, hp: Hyper) -> Outcome:
    labels = cluster_clients(ctx.counts_train, hp.variant, hp.min_samples)
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    losses = local_losses(ctx, ctx.init_state(), np.arange(ctx.n_clients))
    rng = ctx.rng("selection/haccs")

    def observe(clients, res):
        losses[clients] = to_host(res.mean_loss)

    out = global_model_rounds(ctx, choose=lambda t, w: select(rng, labels, losses, hp.rho, m), observe=observe)
    out.info.update({"variant": hp.variant, "clusters": labels.tolist(),
                     "n_clusters": int(labels.max() + 1), "m": m})
    return out
