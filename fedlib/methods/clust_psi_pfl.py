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

Beyond label skew (issue 44; Clust-PSI-PFL §V's extensions, options of the clustering step, τ by
the silhouette as before). What the server learns, per option:

* ``features='label'`` (default, the paper): client i's label histogram (C counts).
* ``features='attribute'``: client i's attribute histograms — for each feature f (tabular: every
  input column; images: the six summaries of :func:`fedlib.noniid.image_summaries`) the counts of
  its train samples in each of ``n_bins`` quantile bins of the pooled marginal (F·B counts); no
  label histogram. Descriptors [APSI_i, PSI_{i,1..F}] (:func:`fedlib.clustering.attribute_features`),
  or with ``attribute_terms='bin'`` the signed per-(feature, bin) terms [APSI_i, ±PSI_{i,f,b} …]
  (:func:`fedlib.noniid.psi_per_bin`) in place of the per-feature sums — what the server learns is
  the same histograms either way.
* ``features='joint'``: per feature, the counts in each (class, bin) cell (F·C·B counts) — which
  also reveal the label histogram and the attribute histograms (their margins).
* ``size_feature=True``: ln n_i appended to the descriptors; n_i is read off the histograms sent
  (nothing more is sent, but the server now uses the client's size).
* ``downweight_small=True``: K-means and the silhouette weigh client i by min(1, n_i / median n)
  (:func:`fedlib.clustering.small_client_weights`); again n_i from the histograms.
* ``standardize=False`` (any features; nothing more is learnt): K-means on the descriptors as they
  are, skipping Algorithm 1's step 4. Standardising gives every descriptor column unit variance,
  so columns that carry only sampling noise (classes all clients share, the mean-intensity and s.d.
  summaries under rotation, the ln n_i column beside 10 noise columns) weigh as much as the
  informative ones; unstandardised, PSI's own scale keeps the large divergences in front.

``dp_epsilon`` applies to every option: Laplace noise on whatever histogram is sent, of scale 1/ε for
the label histogram and F/ε for the F attribute or joint histograms (sensitivity F:
:func:`fedlib.privacy.server_attribute_histograms`), so each client's message is ε-DP; n_i from the
noisy histograms is post-processing. The quantile bin edges are treated as public (module
docstring of :mod:`fedlib.privacy`). The attribute histograms need the clients' inputs, so
:func:`run` computes them from ``ctx.fed`` (:func:`attribute_histograms`); fedlib.flower's strategy
supports ``features='label'`` only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..clustering import (ATTRIBUTE_TERMS, attribute_features, kmeans_labels, psi_features, select_n_clusters,
                          small_client_weights, standardise, with_size_feature)
from ..noniid import attribute_counts, image_summaries, joint_counts, quantile_bins
from ..privacy import POSTPROCESS, server_attribute_histograms, server_histograms
from ..validation import check_choice, check_int, check_number, check_seed, fail
from .base import Context, Outcome, federated_averaging
from .contract import MethodInfo

NAME = "clust_psi_pfl"
FEATURES = ("label", "attribute", "joint")
"""What the clustering step computes PSI over (module docstring: what the server learns)."""


@dataclass(frozen=True)
class Hyper:
    tau: int | None = None          # None: Algorithm 1 chooses
    kmeans_seed: int = 42           # the authors' KMeans random_state
    n_init: int | str = "auto"      # the authors' library default (one k-means++ init)
    nonpositive_silhouette: str = "argmax"  # every silhouette ≤ 0: "argmax" (Algorithm 1) or "fedavg" (τ = 1)
    dp_epsilon: float | None = None  # None: exact label counts; ε > 0: ε-DP Laplace noise on them (fedlib.privacy)
    dp_seed: int = 0                # the noise seed (client i draws from default_rng([dp_seed, i]))
    dp_postprocess: str = "clip"    # the server's post-processing of noisy counts: "clip" (as received) or "round"
    features: str = "label"         # PSI over "label" histograms (the paper), "attribute" or "joint" label–attribute bins
    n_bins: int = 10                # quantile bins per attribute ("attribute", "joint")
    size_feature: bool = False      # append ln n_i to the descriptors
    downweight_small: bool = False  # weigh client i by min(1, n_i / median n) in K-means and the silhouette
    standardize: bool = True        # Algorithm 1's step 4; False: K-means on the descriptors as they are
    attribute_terms: str = "feature"  # "attribute"/"joint" descriptors: PSI per feature, or per (feature, bin)

    def __post_init__(self):
        check_int(self.tau, "tau", 1, optional=True)
        check_number(self.dp_epsilon, "dp_epsilon", 0, low_open=True, optional=True)
        check_seed(self.dp_seed, "dp_seed")
        check_choice(self.dp_postprocess, "dp_postprocess", POSTPROCESS)
        check_choice(self.nonpositive_silhouette, "nonpositive_silhouette", ("argmax", "fedavg"))
        check_seed(self.kmeans_seed, "kmeans_seed")
        check_choice(self.features, "features", FEATURES)
        check_int(self.n_bins, "n_bins", 2)
        check_choice(self.size_feature, "size_feature", (False, True))
        check_choice(self.downweight_small, "downweight_small", (False, True))
        check_choice(self.standardize, "standardize", (False, True))
        check_choice(self.attribute_terms, "attribute_terms", ATTRIBUTE_TERMS)
        if self.n_init != "auto":
            check_int(self.n_init, "n_init", 1)


def attribute_histograms(x, y, parts, kind: str, n_bins: int, n_classes: int) -> np.ndarray:
    """The histograms each client sends under ``features=kind``, shape (K, F, B) ('attribute') or
    (K, F, C·B) ('joint'), from its train inputs.

    ``x``: (N, …) inputs — images (N, C, H, W) are summarised by
    :func:`fedlib.noniid.image_summaries` (F = 6), tabular rows (N, F) used as they are; ``y``:
    (N,) labels; ``parts``: K non-empty train index arrays; the quantile bins are those of the
    pooled train samples (:func:`fedlib.noniid.quantile_bins`).
    """
    check_choice(kind, "kind", FEATURES[1:])
    a = np.asarray(x)
    if a.ndim == 4:
        a = image_summaries(a)
    elif a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
        fail("x", "float images (N, C, H, W) or tabular rows (N, F) (attribute PSI does not bin token ids)",
             getattr(a, "shape", a))
    rows = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    local = np.split(np.arange(rows.size), np.cumsum([len(p) for p in parts])[:-1])
    bins = quantile_bins(a[rows], n_bins)
    if kind == "attribute":
        return attribute_counts(bins, local, n_bins)
    return joint_counts(np.asarray(y)[rows], bins, local, n_classes, n_bins)


def cluster_clients(counts_train, hp: Hyper, histograms=None) -> tuple[np.ndarray, dict]:
    """Cluster assignment (K,) and a JSON-able info dict from train-split label counts (or, with
    ``hp.features`` 'attribute' / 'joint', from ``histograms`` (K, F, B), :func:`attribute_histograms`).

    ``counts_train`` (K, C) are the clients' true counts; with ``hp.dp_epsilon`` set, the PSI
    features and Algorithm 1 use :func:`fedlib.privacy.server_histograms` (counts_train,
    hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess) — what the server receives, post-processed —
    and ``info['dp_epsilon']`` says so (with ``info['dp_postprocess']`` when it is not 'clip').
    (A caller whose counts are noisy already, e.g. fedlib.flower, passes ``dp_epsilon=None``.)
    """
    dp = {} if hp.dp_epsilon is None else {"dp_epsilon": float(hp.dp_epsilon)}
    if hp.dp_epsilon is not None and hp.dp_postprocess != "clip":
        dp["dp_postprocess"] = hp.dp_postprocess
    if hp.features == "label":
        counts_train = server_histograms(counts_train, hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess)
        feats = psi_features(counts_train)
        sizes = np.asarray(counts_train, dtype=np.float64).sum(axis=1)
    else:
        if histograms is None:
            fail("histograms", f"the clients' (K, F, B) {hp.features} histograms (attribute_histograms) for "
                 f"features={hp.features!r}", None)
        hist = server_attribute_histograms(histograms, hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess)
        feats = attribute_features(hist, terms=hp.attribute_terms)
        sizes = hist.sum(axis=2).mean(axis=1)  # n_i, averaged over the features (they differ under noise)
        dp["features"] = hp.features
        if hp.attribute_terms != "feature":
            dp["attribute_terms"] = hp.attribute_terms
    if hp.size_feature:
        feats = with_size_feature(feats, np.maximum(sizes, 1e-12))
    weights = small_client_weights(np.maximum(sizes, 1e-12)) if hp.downweight_small else None
    if hp.size_feature or hp.downweight_small:
        dp.update({"size_feature": hp.size_feature, "downweight_small": hp.downweight_small})
    if not hp.standardize:
        dp["standardize"] = False
    if hp.tau is not None:
        k = len(feats)
        if not 1 <= hp.tau <= k:
            raise ValueError(f"tau must be in 1..K={k}, got {hp.tau}")
        labels = (np.zeros(k, np.int64) if hp.tau == 1
                  else kmeans_labels(standardise(feats) if hp.standardize else feats, hp.tau, hp.kmeans_seed,
                                     hp.n_init, weights))
        return labels, {"tau": int(labels.max() + 1), "tau_fixed": True, **dp}
    sel = select_n_clusters(feats, seed=hp.kmeans_seed, n_init=hp.n_init, standardize=hp.standardize,
                            sample_weight=weights)
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
    histograms = None
    if hp.features != "label":  # each client bins its own train inputs (the server receives the counts only)
        fed = ctx.fed
        histograms = attribute_histograms(fed.x.cpu().numpy(), fed.y.cpu().numpy(), fed.train_parts, hp.features,
                                          hp.n_bins, fed.n_classes)
    labels, info = cluster_clients(ctx.counts_train, hp, histograms)
    groups = [np.flatnonzero(labels == c) for c in range(int(labels.max()) + 1)]
    out = federated_averaging(ctx, groups)
    out.info.update(info)
    out.info["assignment"] = labels.tolist()
    return out


# all its training goes through federated_averaging (FLConfig.stream_average)
INFO = MethodInfo(NAME, "Clust-PSI-PFL", Hyper, run, streams_average=True,
                  resumable=True)
