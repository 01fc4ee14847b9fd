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
"""
from __future__ import annotations

import numpy as np

from .validation import check_choice, check_number

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
    """Earth mover's distance among client pmfs, FedArtML-style aggregation.

    Parameters
    ----------
    counts : array, shape (K, C)
    variant : {'faithful', 'corrected'}
        'faithful' reproduces FedArtML (pmf entries used as sample values: class identity
        is ignored); 'corrected' uses class positions as support and the pmf as weights,
        normalised by C−1.

    Returns
    -------
    float in [0, 1]: sqrt(mean over pairs i<j of W1(p_i, p_j)), clipped at 1. One client ⇒ 0.
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
