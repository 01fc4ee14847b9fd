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

* ``"psi_code"``: what the PSI papers' public code ran (reference-notes "What produced
  Table III"; the ``paper_code`` reproduction), once, before training: OPTICS on the Hellinger
  matrix with its parameters chosen by the silhouette of the non-noise points over
  min_samples ∈ {2, 3}, max_eps ∈ {0.2, 0.8}, ξ ∈ {0.05, 0.8} among the settings with 2–49
  clusters and more than ⌊0.7·K⌋ non-noise clients (:func:`optics_by_silhouette`; none valid:
  the first setting, where their code was undefined), noise clients as singletons. Each
  round: every client's FedLab loss under the global model
  (:func:`fedlib.methods.base.fedlab_losses`) and a latency from a four-class device mixture
  (network + CPU, :func:`mixture_latencies`); cluster scores θ_c = ρ(1 − ℓ̄_c/max_k ℓ_k) +
  (1 − ρ)·L̄_c/Σ L̄ (loss linear, :func:`code_cluster_probabilities`); ``clusters_per_round``
  (their d/2 = 5) clusters drawn without replacement ∝ θ; the lowest-id member of each (their
  sort key was the cluster's mean latency, equal for all members); the round filled to
  max(1, ⌊q·K⌋) clients by data share without replacement (:func:`select_code`). The paper_code
  reproduction adds their plain mean aggregation and plain SGD (lr 0.001, batch 64, no
  shuffling).

Both use sklearn's OPTICS defaults besides the metric (``min_samples=5``, ξ = 0.05), with
min_samples capped at K. How several clients are taken when m exceeds the number of
clusters (the round-robin passes of step 3) is this module's reading: the paper selects the
fastest device of each sampled cluster.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..engine.host import to_host
from ..validation import check_choice, check_int, check_number
from .base import (AGGREGATIONS, Context, Outcome, cluster_means, fedlab_losses, global_model_rounds, local_losses,
                   round_robin, round_size)
from .contract import MethodInfo

NAME = "haccs"
GRID = {"rho": (0.1, 0.5, 0.95)}  # Clust-PSI-PFL Table II
VARIANTS = ("psi", "original", "psi_code")
LATENCY_RANGE = (1.0, 10.0)  # per-round client latencies ~ U(LATENCY_RANGE)
# The PSI papers' code ("psi_code"): its OPTICS grid and validity rule, and its device mixture
OPTICS_GRID = {"min_samples": (2, 3), "max_eps": (0.2, 0.8), "xi": (0.05, 0.8)}
MIN_NON_NOISE = 0.7                    # valid only with more than ⌊0.7·K⌋ non-noise clients
MAX_CLUSTERS = 50                      # ... and 2 ≤ clusters < 50
DEVICE_CLASSES = (0.6, 0.2, 0.14, 0.06)  # fast, medium, slow, very slow (network and CPU alike)
BANDWIDTH_MBPS = ((75.0, 100.0), (50.0, 75.0), (25.0, 50.0), (1.0, 25.0))
LINK_SECONDS = (0.02, 0.2)
MODEL_MEGABITS = 80.0                  # a 10 MB model
CPU_FACTOR = ((0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0))
EPOCH_SECONDS = 10.0


@dataclass(frozen=True)
class Hyper:
    rho: float = 0.95         # latency-vs-loss mix (Table II)
    variant: str = "psi"      # "psi" (the PSI papers' Hellinger distance), "original" (Euclidean), "psi_code"
    min_samples: int = 5      # OPTICS min_samples (sklearn's default), capped at K ("psi", "original")
    aggregation: str = "samples"  # "samples" (n_k-weighted) or "uniform" (plain mean; the authors' code)
    clusters_per_round: int = 5   # "psi_code": clusters drawn per round (their w = d/2, d = 10)

    def __post_init__(self):
        check_number(self.rho, "rho", 0, 1)
        check_choice(self.variant, "variant", VARIANTS)
        check_int(self.min_samples, "min_samples", 2)
        check_choice(self.aggregation, "aggregation", AGGREGATIONS)
        check_int(self.clusters_per_round, "clusters_per_round", 1)


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
    from sklearn.cluster import OPTICS  # imported here: importing the registry stays light

    with np.errstate(divide="ignore", invalid="ignore"):  # zero reachabilities of identical rows
        fit = OPTICS(min_samples=min(min_samples, len(x)), metric=metric).fit(x)
    return noise_to_singletons(fit.labels_)


def optics_by_silhouette(dist) -> tuple[np.ndarray, dict]:
    """The PSI papers' code's OPTICS: the :data:`OPTICS_GRID` setting whose non-noise points
    have the best silhouette (first maximum in grid order) among the valid ones (2 ≤ clusters
    < :data:`MAX_CLUSTERS`, non-noise clients > ⌊:data:`MIN_NON_NOISE`·K⌋); no valid setting:
    the first one. Noise clients become singletons.

    ``dist`` (K, K): precomputed (Hellinger) distances. Returns (labels (K,) int64, info: the chosen
    ``min_samples``, ``max_eps``, ``xi``, its ``silhouette`` (None if none valid), ``n_valid``).
    """
    from sklearn.cluster import OPTICS  # imported here: importing the registry stays light
    from sklearn.metrics import silhouette_score

    dist = np.asarray(dist, dtype=np.float64)
    k = len(dist)
    best, n_valid = None, 0
    for ms in OPTICS_GRID["min_samples"]:
        for max_eps in OPTICS_GRID["max_eps"]:
            for xi in OPTICS_GRID["xi"]:
                with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "All reachability values are inf")  # all noise: invalid
                    lab = OPTICS(min_samples=min(ms, k), max_eps=max_eps, metric="precomputed",
                                 cluster_method="xi", xi=xi).fit(dist).labels_
                keep = lab >= 0
                n_clusters = np.unique(lab[keep]).size
                valid = (2 <= n_clusters < MAX_CLUSTERS and keep.sum() > int(MIN_NON_NOISE * k)
                         and n_clusters < keep.sum())
                score = silhouette_score(dist[keep][:, keep], lab[keep], metric="precomputed") if valid else None
                n_valid += valid
                entry = (score, lab, {"min_samples": ms, "max_eps": max_eps, "xi": xi})
                if best is None or (score is not None and (best[0] is None or score > best[0])):
                    best = entry
    score, lab, params = best
    return noise_to_singletons(lab), {**params, "silhouette": None if score is None else float(score),
                                      "n_valid": int(n_valid)}


def cluster_clients(counts, variant: str = "psi", min_samples: int = 5) -> np.ndarray:
    """HACCS clusters (K,) from train label counts (K, C): see the module docstring."""
    p = label_pmfs(counts)
    if variant == "psi":
        return optics_labels(hellinger_matrix(p), min_samples, "precomputed")
    if variant == "original":
        return optics_labels(p, min_samples, "euclidean")
    if variant == "psi_code":
        return optics_by_silhouette(hellinger_matrix(p))[0]
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def cluster_probabilities(latency, loss, rho: float) -> np.ndarray:
    """P(c) = ρ·(1/ℓ_c)/Σ(1/ℓ) + (1−ρ)·L_c²/ΣL² (uniform loss term when every L_c = 0).

    ``latency`` (G,) positive, ``loss`` (G,) non-negative, ρ in [0, 1]; returns (G,) summing to 1.
    """
    speed = 1.0 / np.asarray(latency, dtype=np.float64)
    sq = np.asarray(loss, dtype=np.float64) ** 2
    loss_share = sq / sq.sum() if sq.sum() > 0 else np.full(sq.size, 1.0 / sq.size)
    return rho * speed / speed.sum() + (1.0 - rho) * loss_share


def weighted_order(rng: np.random.Generator, p) -> np.ndarray:
    """A random order (a permutation (G,) int64) of all G items, drawn like sampling without
    replacement with probabilities ``p`` (Efraimidis–Spirakis keys u^(1/p)); zero-probability items last.
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


# ----------------------------------------------------------------------------- the PSI papers' code
def mixture_latencies(rng: np.random.Generator, n: int) -> np.ndarray:
    """n client latencies (seconds) from the PSI papers' device mixture: a network delay
    U(:data:`LINK_SECONDS`) + :data:`MODEL_MEGABITS` / bandwidth, and a CPU delay
    :data:`EPOCH_SECONDS` × a factor, the bandwidth and the factor each from a class drawn with
    :data:`DEVICE_CLASSES` (independently). Shape (n,)."""
    p = np.asarray(DEVICE_CLASSES)
    net, cpu = rng.choice(len(p), size=n, p=p), rng.choice(len(p), size=n, p=p)
    bw = np.asarray(BANDWIDTH_MBPS)[net]
    factor = np.asarray(CPU_FACTOR)[cpu]
    network = rng.uniform(*LINK_SECONDS, size=n) + MODEL_MEGABITS / rng.uniform(bw[:, 0], bw[:, 1])
    return network + EPOCH_SECONDS * rng.uniform(factor[:, 0], factor[:, 1])


def code_cluster_probabilities(latency, loss, labels, rho: float) -> np.ndarray:
    """The PSI papers' code's cluster scores, normalised: θ_c = ρ(1 − ℓ̄_c / max_k ℓ_k) +
    (1 − ρ)·L̄_c / Σ_c' L̄_c' (linear in the loss; uniform loss term when every L̄ = 0).

    ``latency``, ``loss`` (K,) per client (the max is over clients); ``labels`` (K,) cluster ids
    0..G−1; ρ in [0, 1]. Returns (G,) summing to 1.
    """
    latency = np.asarray(latency, dtype=np.float64)
    mean_latency, mean_loss = cluster_means(latency, labels), cluster_means(loss, labels)
    loss_share = (mean_loss / mean_loss.sum() if mean_loss.sum() > 0
                  else np.full(mean_loss.size, 1.0 / mean_loss.size))
    theta = rho * (1.0 - mean_latency / latency.max()) + (1.0 - rho) * loss_share
    if not theta.sum() > 0:  # ρ = 1 and every cluster as slow as the slowest client
        return np.full(theta.size, 1.0 / theta.size)
    return theta / theta.sum()


def select_code(rng: np.random.Generator, labels, losses, n_train, rho: float, w: int, m: int) -> np.ndarray:
    """One round of the PSI papers' HACCS: min(w, G) clusters drawn without replacement ∝ θ,
    the lowest-id member of each, then clients by data share (without replacement) until m.
    Returns (max(m, clusters drawn),) int64: distinct clients, in selection order.
    """
    labels = np.asarray(labels, dtype=np.int64)
    p = code_cluster_probabilities(mixture_latencies(rng, labels.size), losses, labels, rho)
    drawn = rng.choice(p.size, size=min(w, np.count_nonzero(p)), replace=False, p=p)
    chosen = [int(np.flatnonzero(labels == c)[0]) for c in drawn]
    rest = np.setdiff1d(np.arange(labels.size), chosen)
    if len(chosen) < m and rest.size:
        share = np.asarray(n_train, dtype=np.float64)[rest]
        extra = rng.choice(rest, size=min(m - len(chosen), rest.size), replace=False, p=share / share.sum())
        chosen += [int(c) for c in extra]
    return np.asarray(chosen, dtype=np.int64)


def run(ctx: Context, hp: Hyper) -> Outcome:
    if hp.variant == "psi_code":
        return _run_code(ctx, hp)
    labels = cluster_clients(ctx.counts_train, hp.variant, hp.min_samples)
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    losses = local_losses(ctx, ctx.init_state(), np.arange(ctx.n_clients))  # (K,) each client's last loss

    def observe(clients, res, memo):
        memo[clients] = to_host(res.mean_loss)

    out = global_model_rounds(ctx, choose=lambda t, w, rng, memo: select(rng, labels, memo, hp.rho, m),
                              observe=observe, selection_stream="selection/haccs", memo=losses,
                              weights=hp.aggregation)
    out.info.update({"variant": hp.variant, "clusters": labels.tolist(),
                     "n_clusters": int(labels.max() + 1), "m": m})
    return out


def _run_code(ctx: Context, hp: Hyper) -> Outcome:
    """The ``psi_code`` variant: clusters once, then :func:`select_code` on FedLab losses every round."""
    labels, optics = optics_by_silhouette(hellinger_matrix(label_pmfs(ctx.counts_train)))
    m = round_size(ctx.n_clients, ctx.cfg.fraction)
    everyone = np.arange(ctx.n_clients)
    choose = lambda t, w, rng, memo: select_code(rng, labels, fedlab_losses(ctx, w, everyone),  # noqa: E731
                                                 ctx.fed.n_train, hp.rho, hp.clusters_per_round, m)
    out = global_model_rounds(ctx, choose=choose, selection_stream="selection/haccs", weights=hp.aggregation)
    out.info.update({"variant": hp.variant, "clusters": labels.tolist(), "n_clusters": int(labels.max() + 1),
                     "m": m, "optics": optics})
    return out


# all its training goes through global_model_rounds (FLConfig.stream_average)
INFO = MethodInfo(NAME, "HACCS", Hyper, run, grid=GRID, streams_average=True, resumable=True)
