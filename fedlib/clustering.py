"""PSI-based selection of the number of clusters (Clust-PSI-PFL, Algorithm 1).

Each client i is described by x_i = [PSI_i, PSI_{i,1} … PSI_{i,C}] (Eqs. 1–2, computed on
the clients' train splits); the features are standardised (zero mean, unit variance);
for every candidate j = 2 … K−1, K-means with k-means++ initialisation gives a candidate
clustering z^(j) whose mean (Euclidean) silhouette is s(j); τ = argmax_j s(j), the
smallest j among ties ("choose the smallest τ at the maximum").

Faithful to the authors' code: ``KMeans(n_clusters=j, random_state=42)`` with the library
default ``n_init='auto'`` (one k-means++ initialisation). ``n_init`` is exposed because a
single initialisation makes τ seed-sensitive.

Degenerate inputs never crash (the authors' code did): with fewer than three clients, or
fewer than two distinct feature rows (e.g. all clients identical), no silhouette is
defined and τ = 1 (a single cluster) with an explanatory ``note``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .noniid import EPS, attribute_psi, psi, psi_per_bin, psi_per_class, psi_per_feature
from .validation import check_choice, check_int, check_number, check_seed, fail

__all__ = ["psi_features", "ATTRIBUTE_TERMS", "attribute_features", "with_size_feature", "small_client_weights", "standardise",
           "ClusterSelection", "select_n_clusters", "kmeans_labels"]

TIE_TOL = 1e-9
"""Silhouettes within this of the maximum count as tied (float noise); the smallest j wins."""


def psi_features(counts, eps: float = EPS) -> np.ndarray:
    """Client descriptors [PSI_i, PSI_{i,1}, …, PSI_{i,C}], shape (K, C+1)."""
    return np.column_stack([psi(counts, eps), psi_per_class(counts, eps)])


ATTRIBUTE_TERMS = ("feature", "bin")
"""The descriptor columns of :func:`attribute_features` after APSI_i."""


def attribute_features(counts, eps: float = EPS, terms: str = "feature") -> np.ndarray:
    """Client descriptors from attribute (or joint label–attribute) histograms ``counts`` (K, F, B).

    * ``terms='feature'``: shape (K, F+1), [APSI_i, PSI_{i,1}, …, PSI_{i,F}]
      (:func:`fedlib.noniid.attribute_psi`, :func:`fedlib.noniid.psi_per_feature`) — the features in
      place of the classes. A feature's PSI is a magnitude: clients skewed towards different bins
      of the same feature (young vs old) get the same value.
    * ``terms='bin'``: shape (K, F·B+1), [APSI_i, ±PSI_{i,f,b} …] (:func:`fedlib.noniid.psi_per_bin`) —
      every bin's PSI term, signed by whether the client over- or under-holds the bin, so that
      clients skewed towards different bins of one feature differ.
    """
    check_choice(terms, "terms", ATTRIBUTE_TERMS)
    cols = psi_per_feature(counts, eps) if terms == "feature" else psi_per_bin(counts, eps)
    return np.column_stack([attribute_psi(counts, eps), cols])


def with_size_feature(features, sizes) -> np.ndarray:
    """``features`` (K, F) with ln n_i appended as one more column, (K, F+1) (Clust-PSI-PFL §V:
    "append n_i as an auxiliary clustering feature"; the logarithm because client sizes span orders
    of magnitude, and Algorithm 1 standardises every column afterwards). ``sizes``: (K,) > 0."""
    x = _as_matrix(features, "features")
    n = _check_sizes(sizes, x.shape[0])
    return np.column_stack([x, np.log(n)])


def small_client_weights(sizes, reference=None) -> np.ndarray:
    """Clustering weights that down-weight small clients, shape (K,): w_i = min(1, n_i / n_ref),
    n_ref = ``reference`` or the median client size (Clust-PSI-PFL §V: "down-weight such clients
    during clustering"). A client at or above n_ref weighs 1; a 5-sample client among 500-sample
    ones weighs 0.01. ``sizes``: (K,) > 0."""
    n = _check_sizes(sizes, None)
    ref = float(np.median(n)) if reference is None else check_number(reference, "reference", 0, low_open=True)
    return np.minimum(1.0, n / ref)


def _check_sizes(sizes, k) -> np.ndarray:
    try:
        n = np.asarray(sizes, dtype=np.float64)
    except (TypeError, ValueError):
        fail("sizes", "a (K,) array of client sample counts > 0", sizes)
    if n.ndim != 1 or n.size == 0 or (k is not None and n.size != k) or not np.all(np.isfinite(n)) or np.any(n <= 0):
        fail("sizes", f"a ({'K' if k is None else k},) array of client sample counts > 0", sizes)
    return n


def _as_matrix(x, name: str) -> np.ndarray:
    """``x`` as a float64 (K clients × F features) matrix, or a ValueError naming ``name``."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        fail(name, "a numeric (K clients × F features) matrix", x)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"{name} must be a (K clients × F features) matrix, got shape {a.shape}")
    return a


def _check_n_init(n_init):
    """K-means restarts: 'auto' or an integer ≥ 1."""
    if isinstance(n_init, str):
        return check_choice(n_init, "n_init", ("auto",))
    return check_int(n_init, "n_init", 1)


def standardise(x) -> np.ndarray:
    """Zero mean, unit variance per column; a constant column becomes all zeros. (K, F)."""
    x = _as_matrix(x, "x")
    sd = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


@dataclass(frozen=True)
class ClusterSelection:
    """Outcome of Algorithm 1.

    Attributes
    ----------
    tau : int
        Selected number of clusters (1 when degenerate).
    labels : ndarray of int, shape (K,)
        Cluster of each client, values 0..tau-1.
    candidates : ndarray of int, shape (J,)
        The j values tried (2..K-1).
    silhouettes : ndarray of float, shape (J,)
        s(j) per candidate (NaN where undefined, e.g. K-means found fewer than 2 clusters).
    degenerate : bool
        True when no silhouette was defined and tau=1 was returned.
    note : str
        Human-readable explanation for degenerate or tied outcomes.
    """

    tau: int
    labels: np.ndarray
    candidates: np.ndarray
    silhouettes: np.ndarray
    degenerate: bool = False
    note: str = ""
    cluster_sizes: tuple = field(default=())


def kmeans_labels(x: np.ndarray, n_clusters: int, seed: int, n_init="auto", sample_weight=None) -> np.ndarray:
    """k-means++ K-means labels, shape (K,), relabelled in order of first appearance.

    ``x``: (K, F); ``n_clusters`` in 1..K; ``seed`` ≥ 0; ``n_init``: 'auto' or an int ≥ 1;
    ``sample_weight``: optional (K,) weights > 0 of the clients in the centroids
    (:func:`small_client_weights`).
    """
    x = _as_matrix(x, "x")
    check_int(n_clusters, "n_clusters", 1, x.shape[0])
    check_seed(seed)
    _check_n_init(n_init)
    w = None if sample_weight is None else _check_weights(sample_weight, x.shape[0])
    from sklearn.cluster import KMeans  # imported here: importing the method registry stays light
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # duplicate points: fewer distinct clusters
        raw = KMeans(n_clusters=n_clusters, init="k-means++", n_init=n_init,
                     random_state=seed).fit_predict(x, sample_weight=w)
    _, first = np.unique(raw, return_index=True)
    order = np.argsort(first)
    remap = np.empty(raw.max() + 1, dtype=np.int64)
    remap[np.unique(raw)[order]] = np.arange(order.size)
    return remap[raw]


def _check_weights(weights, k: int) -> np.ndarray:
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        fail("sample_weight", f"None or a ({k},) array of client weights > 0", weights)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        fail("sample_weight", f"None or a ({k},) array of client weights > 0", weights)
    return w


def _check_candidates(candidates) -> np.ndarray:
    """Sorted distinct cluster counts, (J,) int64, from an iterable of integers."""
    if isinstance(candidates, (str, bytes, dict)) or not hasattr(candidates, "__iter__"):
        fail("candidates", "an iterable of integers (cluster counts to try)", candidates)
    values = list(candidates)  # a generator is read once
    for j in values:
        check_int(j, "candidates", 2)
    return np.asarray(sorted(set(int(j) for j in values)), dtype=np.int64)


def select_n_clusters(
    features,
    *,
    candidates=None,
    seed: int = 42,
    n_init="auto",
    standardize: bool = True,
    sample_weight=None,
) -> ClusterSelection:
    """Algorithm 1: choose τ by the mean silhouette of K-means clusterings.

    Parameters
    ----------
    features : array, shape (K, F)
        Client descriptors, usually :func:`psi_features` of the train-split label counts.
    candidates : iterable of int, optional
        Cluster counts to try; default 2 … K−1 (the paper's range).
    seed : int, default 42
        K-means ``random_state`` (42 in the authors' code).
    n_init : int or 'auto', default 'auto'
        K-means restarts ('auto' = one k-means++ init, as the authors ran).
    standardize : bool, default True
        Standardise the features first (step 4 of Algorithm 1).
    sample_weight : array (K,) of weights > 0, optional
        Down-weights clients (:func:`small_client_weights`): K-means centroids are weighted means
        and s(j) the weighted mean of the clients' silhouettes. None: Algorithm 1 as printed.

    Returns
    -------
    ClusterSelection
    """
    x = _as_matrix(features, "features")
    check_seed(seed)
    _check_n_init(n_init)
    check_choice(standardize, "standardize", (True, False))
    w = None if sample_weight is None else _check_weights(sample_weight, x.shape[0])
    if not np.all(np.isfinite(x)):
        raise ValueError("features contain NaN/inf: compute PSI with eps > 0 (the default)")
    k = x.shape[0]
    if standardize:
        x = standardise(x)
    cand = np.arange(2, k) if candidates is None else _check_candidates(candidates)
    if cand.size and (cand.min() < 2 or cand.max() > k - 1):
        raise ValueError(f"candidates must lie in 2..K-1 = 2..{k - 1}, got {cand.tolist()}")
    n_distinct = np.unique(np.round(x, 12), axis=0).shape[0]
    if cand.size == 0 or n_distinct < 2:
        why = (f"K={k} clients leave no candidate j in 2..K-1" if cand.size == 0
               else "all clients have identical PSI features (silhouette undefined)")
        return ClusterSelection(1, np.zeros(k, np.int64), cand, np.full(cand.size, np.nan), True,
                                f"{why}: a single cluster (tau=1), i.e. plain FedAvg.", (k,))
    from sklearn.metrics import silhouette_samples, silhouette_score  # imported here, as in kmeans_labels

    sil = np.full(cand.size, np.nan)
    labels_by_j = {}
    for i, j in enumerate(cand):
        lab = kmeans_labels(x, int(j), seed, n_init, w)
        n_lab = np.unique(lab).size
        if 2 <= n_lab <= k - 1:
            sil[i] = (silhouette_score(x, lab, metric="euclidean") if w is None
                      else float(np.average(silhouette_samples(x, lab, metric="euclidean"), weights=w)))
            labels_by_j[int(j)] = lab
    if np.all(np.isnan(sil)):
        return ClusterSelection(1, np.zeros(k, np.int64), cand, sil, True,
                                "K-means found no clustering with a defined silhouette: tau=1.", (k,))
    best = np.nanmax(sil)
    tied = cand[np.flatnonzero(sil >= best - TIE_TOL)]
    tau = int(tied[0])
    note = ""
    if tied.size > 1:
        shown = tied.tolist() if tied.size <= 6 else tied[:5].tolist() + ["…"]
        note = f"silhouette tied at {best:.4f} for j in {shown}: smallest chosen."
    if best <= 0:
        note = (note + " " if note else "") + f"max silhouette {best:.4f} ≤ 0: no clear cluster structure."
    lab = labels_by_j[tau]
    if np.unique(lab).size < tau:  # duplicate feature rows: K-means left clusters empty
        note = (note + " " if note else "") + f"j={tau} gave {np.unique(lab).size} non-empty clusters."
        tau = int(np.unique(lab).size)
    return ClusterSelection(tau, lab, cand, sil, False, note, tuple(np.bincount(lab).tolist()))
