"""Label non-IID metrics over a K×C matrix of per-client label counts.

Client level (Clust-PSI-PFL Eqs. 1–3, with the authors' epsilon rule):
    psi_per_class(counts) -> (K, C)   PSI_{i,c} = (obs − exp) · ln(obs / exp),
                                      obs = P_i(c) + ε, exp = P(c) + ε, no renormalisation
    psi(counts)           -> (K,)     PSI_i = Σ_c PSI_{i,c}  (= Jeffreys divergence)
    wpsi(counts)          -> float    Σ_i n_i PSI_i / Σ_i n_i
P is the sample-weighted global pmf (pooled counts / total), P_i the client's label
proportions over all C classes (0 for absent classes). Compute these on the clients'
train splits, as the authors do.

Federation level, as FedArtML computes them (among the clients' distributions
p_1..p_K, unweighted by client size, not against the global distribution):
    jensen_shannon(counts) -> float   sqrt(JS_K), log base 2, /log2(K) if K > 2, clip 1
    hellinger(counts)      -> float   root-mean-square pairwise Hellinger distance, clip 1
    earth_movers(counts, variant='faithful'|'corrected') -> float
        faithful: FedArtML's definition, which passes the probability vectors to
        ``scipy.stats.wasserstein_distance`` as sample *values*, so it ignores which
        class is which (two disjoint one-class clients give 0). This reproduces the
        papers' "EMD is non-monotone" finding (Fig. 3).
        corrected: the class positions 0..C-1 are the support and the proportions the
        weights; each pairwise distance is divided by C−1 so it lies in [0, 1].
        Both: mean over pairs i<j, then square root, clipped at 1.

Beyond label skew (issue 44; Clust-PSI-PFL §V's "discretized attributes, marginals, or joint
label–attribute bins"), over a (K, F, B) array of per-client, per-feature bin counts:
    quantile_bins(values, B) -> (N, F)     bins of each feature's pooled marginal (quantiles)
    image_summaries(x)       -> (N, 6)     images: mean, s.d., four quadrant means (the features)
    attribute_counts(bins, parts, B) -> (K, F, B);  joint_counts(...) -> (K, F, C·B)
    psi_per_feature(counts)  -> (K, F)     PSI_{i,f}: Eq. 1 over the bins of feature f
    attribute_psi(counts)    -> (K,)       mean_f PSI_{i,f}
    wapsi(counts)            -> float      Σ_i n_i APSI_i / Σ_i n_i (as WPSI)
Departure: the papers define no attribute PSI; the bins, the image summaries and the mean over
features are this workbook's choices (see the functions).
"""
from __future__ import annotations

import numpy as np

from .validation import check_choice, check_int, check_number, fail

__all__ = [
    "EPS",
    "psi_per_class",
    "psi",
    "wpsi",
    "jensen_shannon",
    "hellinger",
    "earth_movers",
    "federation_metrics",
    "METRIC_NAMES",
    "IMAGE_SUMMARIES",
    "image_summaries", "psi_per_bin",
    "quantile_bins",
    "attribute_counts",
    "joint_counts",
    "psi_per_feature",
    "attribute_psi",
    "wapsi",
]

EPS = 1e-6
"""The authors' epsilon, added to both the client and the global pmf."""

METRIC_NAMES = ("wpsi", "hellinger", "jensen_shannon", "emd", "emd_corrected")


def _check_counts(counts) -> np.ndarray:
    """Validate a (K, C) non-negative count matrix with no empty client; return float64."""
    a = np.asarray(counts)
    if a.ndim != 2:
        raise ValueError(
            f"counts must be a 2-D (K clients × C classes) matrix of label counts, got shape {a.shape}; "
            "build it with fedlib.partition.label_counts(labels, parts)"
        )
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"counts needs at least one client and one class, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise ValueError(f"counts must be numeric label counts, got dtype {a.dtype}: {_short(counts)}")
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError("counts contains NaN or infinite values")
    if np.any(a < 0):
        raise ValueError("counts must be non-negative label counts; found negative entries")
    empty = np.flatnonzero(a.sum(axis=1) == 0)
    if empty.size:
        raise ValueError(
            f"clients {empty[:10].tolist()} have no samples (all-zero rows in counts); "
            "drop them or fix the partition"
        )
    return a


def _short(value) -> str:
    """``repr`` of a value, cut to one readable line for the error messages."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _client_pmfs(a: np.ndarray) -> np.ndarray:
    return a / a.sum(axis=1, keepdims=True)


# ----------------------------------------------------------------------------- PSI
def psi_per_class(counts, eps: float = EPS) -> np.ndarray:
    """Per-class PSI (Eq. 2), shape (K, C); every entry ≥ 0."""
    a = _check_counts(counts)
    check_number(eps, "eps", 0)
    obs = _client_pmfs(a) + eps
    exp = a.sum(axis=0) / a.sum() + eps
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = (obs - exp) * np.log(obs / exp)
    # with eps=0 a class absent from the client but present globally is +inf (as the math says);
    # a class absent everywhere contributes 0.
    return np.where((obs == 0) & (exp == 0), 0.0, terms)


def psi(counts, eps: float = EPS) -> np.ndarray:
    """Client-level PSI (Eq. 1), shape (K,); equals the Jeffreys (symmetric KL)
    divergence between the client's and the global label pmf."""
    return psi_per_class(counts, eps).sum(axis=1)


def wpsi(counts, eps: float = EPS) -> float:
    """Sample-size weighted PSI of the federation (Eq. 3)."""
    a = _check_counts(counts)
    n = a.sum(axis=1)
    return float(np.dot(n, psi(a, eps)) / n.sum())


# ----------------------------------------------------------------------------- federation level
def _entropy2(p: np.ndarray) -> np.ndarray:
    """Shannon entropy in bits along the last axis, zero terms skipped."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log2(p), 0.0).sum(axis=-1)


def jensen_shannon(counts) -> float:
    """Generalised Jensen–Shannon distance among the K client pmfs (FedArtML).

    JS = H(mean_i p_i) − mean_i H(p_i) in bits, divided by log2(K) when K > 2, then
    the square root, clipped at 1. One client ⇒ 0.
    """
    p = _client_pmfs(_check_counts(counts))
    k = p.shape[0]
    js = _entropy2(p.mean(axis=0)) - _entropy2(p).mean()
    if k > 2:
        js /= np.log2(k)
    return float(min(1.0, np.sqrt(max(js, 0.0))))


def hellinger(counts) -> float:
    """Root-mean-square of the pairwise Hellinger distances among client pmfs (FedArtML).

    sqrt( Σ_{i≠j} ‖√p_i − √p_j‖² / (2K(K−1)) ), clipped at 1. One client ⇒ 0.
    """
    p = _client_pmfs(_check_counts(counts))
    k = p.shape[0]
    if k < 2:
        return 0.0
    r = np.sqrt(p)
    sq = (r * r).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * r @ r.T, 0.0)  # ‖√p_i − √p_j‖², (K, K)
    np.fill_diagonal(d2, 0.0)
    return float(min(1.0, np.sqrt(d2.sum() / (2.0 * k * (k - 1)))))


def _pairwise_mean(values: np.ndarray) -> float:
    """Mean over pairs i<j of mean_c |values_i,c − values_j,c| (values: (K, M))."""
    k = values.shape[0]
    total = 0.0
    for i in range(k - 1):  # row-wise to keep memory O(K·M) for large K
        total += np.abs(values[i + 1:] - values[i]).mean(axis=1).sum()
    return total / (k * (k - 1) / 2)


def earth_movers(counts, variant: str = "faithful") -> float:
    """Earth mover's distance among client pmfs (``counts`` (K, C)), FedArtML-style aggregation.

    ``variant`` 'faithful' reproduces FedArtML (pmf entries used as sample values: class identity
    is ignored); 'corrected' uses class positions as support and the pmf as weights, normalised
    by C−1. Returns sqrt(mean over pairs i<j of W1(p_i, p_j)) in [0, 1], clipped at 1; one client ⇒ 0.
    """
    check_choice(variant, "variant", ("faithful", "corrected"))
    p = _client_pmfs(_check_counts(counts))
    k, c = p.shape
    if k < 2:
        return 0.0
    if variant == "faithful":
        # W1 between two empirical distributions of C equally weighted values each
        # = mean |sorted(u) − sorted(v)|: exactly scipy.stats.wasserstein_distance(p_i, p_j).
        w = _pairwise_mean(np.sort(p, axis=1))
    else:
        if c < 2:
            return 0.0
        # W1 on the support 0..C-1 = Σ_c |CDF_i(c) − CDF_j(c)| over unit gaps.
        cdf = np.cumsum(p, axis=1)[:, :-1]
        w = _pairwise_mean(cdf)  # mean over the C−1 gaps = W1 / (C−1)
    return float(min(1.0, np.sqrt(max(w, 0.0))))


def federation_metrics(counts) -> dict[str, float]:
    """All federation-level metrics at once: keys of :data:`METRIC_NAMES`."""
    a = _check_counts(counts)
    return {
        "wpsi": wpsi(a),
        "hellinger": hellinger(a),
        "jensen_shannon": jensen_shannon(a),
        "emd": earth_movers(a, "faithful"),
        "emd_corrected": earth_movers(a, "corrected"),
    }


# ----------------------------------------------------------------------------- beyond label skew (issue 44)
# Clust-PSI-PFL §V: "the PSI machinery can be extended to discretized attributes, marginals, or joint
# label–attribute bins". PSI over any histogram is Eq. 2 with the histogram's cells in place of the
# classes; these functions build the histograms and aggregate the per-feature PSI per client as PSI_i
# aggregates classes.
IMAGE_SUMMARIES = ("mean", "std", "q_top_left", "q_top_right", "q_bottom_left", "q_bottom_right")
"""The summary statistics of :func:`image_summaries`, in column order."""


def image_summaries(x) -> np.ndarray:
    """A few summary statistics per image, shape (N, 6): the mean intensity, the standard deviation
    of the intensities, and the mean intensity of each fixed quadrant (top-left, top-right,
    bottom-left, bottom-right; rows [:H//2] / [H//2:], columns [:W//2] / [W//2:]).

    The choice: the mean sees brightness, the s.d. additive noise, and the quadrants rotation —
    a quarter turn permutes the quadrants, so an upright and a turned client differ in which
    quadrant carries the ink although their mean and s.d. are equal. Channels are averaged first.
    ``x``: float (N, C, H, W) or (N, H, W), H, W ≥ 2.
    """
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        fail("x", "a numeric (N, C, H, W) or (N, H, W) image array", x)
    if a.ndim == 3:
        a = a[:, None]
    if a.ndim != 4 or a.shape[0] < 1 or a.shape[2] < 2 or a.shape[3] < 2:
        fail("x", "an (N, C, H, W) or (N, H, W) image array with N ≥ 1 and H, W ≥ 2 (its shape is shown)", a.shape)
    g = a.mean(axis=1)  # (N, H, W)
    h, w = g.shape[1] // 2, g.shape[2] // 2
    quads = [g[:, :h, :w], g[:, :h, w:], g[:, h:, :w], g[:, h:, w:]]
    flat = g.reshape(g.shape[0], -1)
    return np.column_stack([flat.mean(1), flat.std(1)] + [q.reshape(q.shape[0], -1).mean(1) for q in quads])


def quantile_bins(values, n_bins: int = 10) -> np.ndarray:
    """Bin of every row and column, shape (N, F) int64 in 0..n_bins−1: the quantile bins of the
    *pooled* marginal of each column (inner edges at its j/n_bins quantiles, duplicates merged;
    a value equal to an edge goes to the lower bin). A column with ties (a one-hot column) gets
    fewer non-empty bins. ``values``: (N, F) or (N,)."""
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        fail("values", "a finite numeric (N, F) or (N,) array", values)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2 or v.shape[0] < 1 or not np.all(np.isfinite(v)):
        fail("values", "a finite numeric (N, F) or (N,) array with N ≥ 1", values)
    n_bins = check_int(n_bins, "n_bins", 1)
    out = np.empty(v.shape, dtype=np.int64)
    for f in range(v.shape[1]):
        edges = np.unique(np.quantile(v[:, f], np.arange(1, n_bins) / n_bins))
        out[:, f] = np.searchsorted(edges, v[:, f], side="left")
    return out


def _check_parts_into(parts, n: int) -> list[np.ndarray]:
    if isinstance(parts, (str, bytes, dict)) or not hasattr(parts, "__len__") or len(parts) == 0:
        fail("parts", "a non-empty sequence of K index arrays (one per client)", parts)
    out = []
    for i, p in enumerate(parts):
        a = np.asarray(p)
        if a.ndim != 1 or a.size == 0 or a.dtype.kind not in "iu" or a.min() < 0 or a.max() >= n:
            fail(f"parts[{i}]", f"a non-empty 1-D array of indices in 0..{n - 1}", p)
        out.append(a.astype(np.int64))
    return out


def attribute_counts(bins, parts, n_bins: int) -> np.ndarray:
    """Per-client, per-feature bin counts, shape (K, F, B): entry (i, f, b) counts client i's
    samples whose feature f falls in bin b. ``bins``: (N, F) from :func:`quantile_bins` (bins of
    the pooled marginal); ``parts``: K index arrays into its rows; B = ``n_bins``."""
    n_bins = check_int(n_bins, "n_bins", 1)
    b = _check_bins(bins, n_bins)
    parts = _check_parts_into(parts, b.shape[0])
    out = np.zeros((len(parts), b.shape[1], n_bins), dtype=np.int64)
    for i, p in enumerate(parts):
        for f in range(b.shape[1]):
            out[i, f] = np.bincount(b[p, f], minlength=n_bins)
    return out


def joint_counts(labels, bins, parts, n_classes: int, n_bins: int) -> np.ndarray:
    """Per-client joint label–attribute counts, shape (K, F, C·B): entry (i, f, c·B + b) counts
    client i's samples of class c whose feature f falls in bin b. ``labels``: (N,) ints 0..C−1;
    ``bins``: (N, F) as in :func:`attribute_counts`."""
    n_classes = check_int(n_classes, "n_classes", 1)
    n_bins = check_int(n_bins, "n_bins", 1)
    b = _check_bins(bins, n_bins)
    y = np.asarray(labels)
    if y.ndim != 1 or y.dtype.kind not in "iu" or y.size != b.shape[0] or (y.size and (y.min() < 0 or y.max() >= n_classes)):
        fail("labels", f"(N={b.shape[0]},) integer class ids in 0..n_classes−1 = {n_classes - 1}", labels)
    return attribute_counts(y[:, None] * n_bins + b, parts, n_classes * n_bins)


def _check_bins(bins, n_bins: int) -> np.ndarray:
    b = np.asarray(bins)
    if b.ndim != 2 or b.dtype.kind not in "iu" or (b.size and (b.min() < 0 or b.max() >= n_bins)):
        fail("bins", f"an (N, F) integer array of bin ids in 0..n_bins−1 = {n_bins - 1} (fedlib.noniid.quantile_bins)",
             bins)
    return b


def _check_counts3(counts) -> np.ndarray:
    a = np.asarray(counts)
    if a.ndim != 3 or 0 in a.shape:
        fail("counts", "a (K clients × F features × B bins) array of bin counts (fedlib.noniid.attribute_counts "
             "or joint_counts)", counts)
    for f in range(a.shape[1]):  # every feature's (K, B) slice is a valid histogram (noisy ones need not
        _check_counts(a[:, f, :])  # sum to the same n_i across features)
    return a.astype(np.float64)


def psi_per_feature(counts, eps: float = EPS) -> np.ndarray:
    """Attribute PSI per feature, shape (K, F): PSI_{i,f} = Σ_b (obs − exp)·ln(obs / exp), obs =
    client i's pmf over the bins of feature f + ε, exp = the pooled pmf over those bins + ε — Eq. 1
    with bins in place of classes (:func:`psi` of the (K, B) slice). ``counts``: (K, F, B)."""
    a = _check_counts3(counts)
    return np.column_stack([psi(a[:, f, :], eps) for f in range(a.shape[1])])


def psi_per_bin(counts, eps: float = EPS) -> np.ndarray:
    """Signed attribute PSI terms per (feature, bin), shape (K, F·B), feature-major: entry
    (i, f·B + b) is sign(obs − exp)·(obs − exp)·ln(obs / exp) for bin b of feature f — the term of
    :func:`psi_per_class` (each feature's (K, B) slice, bins in place of classes) with the sign of
    the deviation. Its absolute values sum to the feature's PSI (:func:`psi_per_feature`); the sign
    says whether the client over-holds (+) or under-holds (−) the bin. PSI's terms alone are ≥ 0
    both ways, so a client that over-holds the young and one that over-holds the old get near-equal
    terms; the sign tells them apart. ``counts``: (K, F, B)."""
    a = _check_counts3(counts)
    cols = []
    for f in range(a.shape[1]):
        obs = _client_pmfs(a[:, f, :])
        exp = a[:, f, :].sum(axis=0) / a[:, f, :].sum()
        cols.append(np.sign(obs - exp) * psi_per_class(a[:, f, :], eps))
    return np.column_stack(cols)


def attribute_psi(counts, eps: float = EPS) -> np.ndarray:
    """Client-level attribute PSI, shape (K,): the mean over features of :func:`psi_per_feature`
    (a mean, not a sum, so that data sets with many features stay on the scale of label PSI;
    PSI_i sums its classes because they partition one variable, the features do not)."""
    return psi_per_feature(counts, eps).mean(axis=1)


def wapsi(counts, eps: float = EPS) -> float:
    """Sample-size weighted attribute PSI of the federation, as :func:`wpsi`: Σ_i n_i APSI_i / Σ_i n_i,
    n_i the client's sample count (the sum of its first feature's bins). ``counts``: (K, F, B)
    (attribute or joint counts)."""
    a = _check_counts3(counts)
    n = a[:, 0, :].sum(axis=1)
    return float(np.dot(n, attribute_psi(a, eps)) / n.sum())
