"""Clust-PSI-PFL (the headline method).

1. The server computes each client's PSI features [PSI_i, PSI_{i,1..C}] from the label
   counts of the clients' train splits (Eqs. 1–2).
2. Algorithm 1 selects τ (silhouette over j = 2..K−1, smallest j at the maximum) and the
   cluster assignment (:func:`fedlib.clustering.select_n_clusters`).
3. One FedAvg federation per cluster, each sampling max(1, ⌊q·|cluster|⌋) of its own
   clients per round; every client is evaluated with its cluster's model.

Differences from the authors' code (documented, not copied): their Flower workaround that
replicated a cluster's client list ×4 when it had ≤ 2 clients is unnecessary here (a
cluster always samples at least one client); a degenerate feature matrix gives τ=1 (plain
FedAvg) with a note instead of a crash. ``tau`` fixes the number of clusters (skipping
the silhouette search) for ablations.

When every silhouette is ≤ 0 (no clear cluster structure), Algorithm 1 as printed still takes
the argmax j ≥ 2 (``nonpositive_silhouette='argmax'``, the default); the authors' code falls
back to τ = 1, plain FedAvg (``'fedavg'``; the ``paper_code`` reproduction). Flower's FedAvg
inside each cluster sampled max(⌊q·n⌋, 2) clients (``FLConfig.min_clients=2`` in
``paper_code``); this module's default is at least one.

What the server learns. Steps 1–2 need, from every client, only its label histogram (the
counts of its train split, ``ctx.counts_train``); τ, the silhouettes and the assignment are
functions of these histograms alone, and training (step 3) uses the clients' data locally.
A histogram is itself sensitive (how many examples of each label a client holds). With
``dp_epsilon`` = ε > 0 every client sends an ε-DP histogram instead — Laplace(1/ε) noise on each
count, clipped at zero, client i's noise from ``default_rng([dp_seed, i])``
(:func:`fedlib.privacy.noisy_label_counts`) — and steps 1–2 run on those noisy counts
(:func:`cluster_clients`), post-processed by the server as ``dp_postprocess`` says ('clip': as
received; 'round': rounded to integers, :func:`fedlib.privacy.postprocess_counts`); ``info``
then records ``dp_epsilon`` (and ``dp_postprocess``) and only what was derived from the noisy
histograms. ``dp_epsilon=None`` (the default) adds no noise: results are identical,
bit for bit, to a run without the option.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..clustering import kmeans_labels, psi_features, select_n_clusters, standardise
from ..privacy import POSTPROCESS, server_histograms
from ..validation import check_choice, check_int, check_number, check_seed
from .base import Context, Outcome, federated_averaging

NAME = "clust_psi_pfl"
STREAMS_AVERAGE = True  # all its training goes through federated_averaging (FLConfig.stream_average)


@dataclass(frozen=True)
class Hyper:
    tau: int | None = None          # None: Algorithm 1 chooses
    kmeans_seed: int = 42           # the authors' KMeans random_state
    n_init: int | str = "auto"      # the authors' library default (one k-means++ init)
    nonpositive_silhouette: str = "argmax"  # every silhouette ≤ 0: "argmax" (Algorithm 1) or "fedavg" (τ = 1)
    dp_epsilon: float | None = None  # None: exact label counts; ε > 0: ε-DP Laplace noise on them (fedlib.privacy)
    dp_seed: int = 0                # the noise seed (client i draws from default_rng([dp_seed, i]))
    dp_postprocess: str = "clip"    # the server's post-processing of noisy counts: "clip" (as received) or "round"

    def __post_init__(self):
        check_int(self.tau, "tau", 1, optional=True)
        check_number(self.dp_epsilon, "dp_epsilon", 0, low_open=True, optional=True)
        check_seed(self.dp_seed, "dp_seed")
        check_choice(self.dp_postprocess, "dp_postprocess", POSTPROCESS)
        check_choice(self.nonpositive_silhouette, "nonpositive_silhouette", ("argmax", "fedavg"))
        check_seed(self.kmeans_seed, "kmeans_seed")
        if self.n_init != "auto":
            check_int(self.n_init, "n_init", 1)


def cluster_clients(counts_train, hp: Hyper) -> tuple[np.ndarray, dict]:
    """Cluster assignment (K,) and a JSON-able info dict from train-split label counts.

    ``counts_train`` (K, C) are the clients' true counts; with ``hp.dp_epsilon`` set, the PSI
    features and Algorithm 1 use :func:`fedlib.privacy.server_histograms` (counts_train,
    hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess) — what the server receives, post-processed —
    and ``info['dp_epsilon']`` says so (with ``info['dp_postprocess']`` when it is not 'clip').
    (A caller whose counts are noisy already, e.g. fedlib.flower, passes ``dp_epsilon=None``.)
    """
    counts_train = server_histograms(counts_train, hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess)
    dp = {} if hp.dp_epsilon is None else {"dp_epsilon": float(hp.dp_epsilon)}
    if hp.dp_epsilon is not None and hp.dp_postprocess != "clip":
        dp["dp_postprocess"] = hp.dp_postprocess
    feats = psi_features(counts_train)
    if hp.tau is not None:
        k = len(feats)
        if not 1 <= hp.tau <= k:
            raise ValueError(f"tau must be in 1..K={k}, got {hp.tau}")
        labels = (np.zeros(k, np.int64) if hp.tau == 1
                  else kmeans_labels(standardise(feats), hp.tau, hp.kmeans_seed, hp.n_init))
        return labels, {"tau": int(labels.max() + 1), "tau_fixed": True, **dp}
    sel = select_n_clusters(feats, seed=hp.kmeans_seed, n_init=hp.n_init)
    info = {**dp,
        "tau": sel.tau,
        "silhouette_candidates": sel.candidates.tolist(),
        "silhouettes": [None if np.isnan(s) else float(s) for s in sel.silhouettes],
        "cluster_sizes": list(sel.cluster_sizes),
        "degenerate": sel.degenerate,
        "note": sel.note,
    }
    sil = np.asarray(sel.silhouettes, dtype=np.float64)
    if (hp.nonpositive_silhouette == "fedavg" and not sel.degenerate and np.all(np.isnan(sil) | (sil <= 0))):
        info.update({"tau": 1, "cluster_sizes": [len(feats)], "tau_argmax": sel.tau,
                     "note": (sel.note + " " if sel.note else "") + "every silhouette ≤ 0: tau=1 (plain FedAvg), "
                     "as the authors' code falls back."})
        return np.zeros(len(feats), np.int64), info
    return sel.labels, info


def run(ctx: Context, hp: Hyper) -> Outcome:
    labels, info = cluster_clients(ctx.counts_train, hp)
    groups = [np.flatnonzero(labels == c) for c in range(int(labels.max()) + 1)]
    out = federated_averaging(ctx, groups)
    out.info.update(info)
    out.info["assignment"] = labels.tolist()
    return out
