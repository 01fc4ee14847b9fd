"""Evaluation metrics over per-client results (pure functions).

Definitions (Clust-PSI-PFL Sec. IV-A; PSI-PFL Sec. 4). One name for each quantity; where a paper
calls it otherwise, its tables show the paper's name with this definition beside it:
    local accuracy   A_k = CC_k / n_k on client k's own test split, with the model client k uses
    weighted local accuracy
                     Σ_k n_k A_k / Σ_k n_k = Σ CC_k / Σ n_k; record field ``global_accuracy``,
                     because Clust-PSI-PFL and PSI-PFL call it "global accuracy" (their tables
                     keep that name); ``run_grid``'s progress lines print it under this name
    mean local accuracy
                     (1/K) Σ_k A_k, unweighted (FedPrism's "local accuracy", pFedLIA's accuracy)
    official-test accuracy
                     mean over clients of each client's model on the data set's official test
                     set; record field ``global_test_accuracy`` (FedPrism's "global accuracy")
    global-model accuracy
                     one global model (FedPrism's backbone G alone) on the official test set;
                     ``info['global_model_accuracy']``
    parameter-average accuracy
                     the uniform parameter average of the distinct models the clients use (G
                     cluster models, or K client models) on the official test set; record field
                     ``param_average_accuracy``. How public code by one of FedPrism's authors
                     scored a clustered method's "global accuracy" (Table 1's 10.00 % for FedClust
                     and CFL); for a one-model method it is that model's official-test accuracy
    AD, SDAD         mean and population std of |A_k − target|; target = 1.0 (Clust-PSI-PFL,
                     "distance from the perfect model") or the CL accuracy (PSI-PFL)
    CP               client parity, PSI-PFL §4.1's "maximum relative performance difference between
                     clients": max_{i,j} (A_i − A_j) / A_j = (A_max − A_min) / A_min. The formula
                     is lost in the text; this reading fits its values 2.2 and 3.7 (> 1 rules
                     out dividing by A_max). The paper is silent on a client at A = 0,
                     where (A_i − 0) / 0 is undefined: ``client_parity(zero='inf')`` (record
                     field ``cp``) gives inf; ``zero='exclude'`` (``cp_nonzero``, what the PSI-PFL
                     study compares with the paper's values) leaves the clients at 0 out and
                     their number is shown beside it (``n_zero``); 0 when all score 0.
    cluster recovery the adjusted Rand index between a method's client grouping and the true
                     groups of a planted partition (1 = recovered up to relabelling, ≈ 0 = chance)
"""
from __future__ import annotations

import numpy as np

from .validation import check_choice, check_number, fail

__all__ = ["local_accuracy", "global_accuracy", "average_distance", "CP_ZERO_RULES", "client_parity",
           "summarise_clients", "cluster_recovery"]


def _as_1d(name, v) -> np.ndarray:
    """``v`` as a float64 (K,) array of real numbers (NaN allowed); strings and booleans refused."""
    a = np.asarray(v)
    if a.dtype.kind not in "iuf":
        fail(name, "a non-empty 1-D array of numbers (one entry per client)", v)
    a = a.astype(np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array (one entry per client), got shape {a.shape}")
    return a


def _check_counts(correct, n) -> tuple[np.ndarray, np.ndarray]:
    """Per-client correct counts and test sizes, (K,) each: finite, 0 ≤ correct ≤ n."""
    c, m = _as_1d("correct", correct), _as_1d("n", n)
    if c.shape != m.shape:
        raise ValueError(f"correct and n must have the same shape, got {c.shape} and {m.shape}")
    if not (np.all(np.isfinite(m)) and np.all(m >= 0)):
        fail("n", "finite test-sample counts ≥ 0 (one per client)", n)
    if not (np.all(np.isfinite(c)) and np.all(c >= 0) and np.all(c <= m)):
        fail("correct", "finite counts with 0 ≤ correct ≤ n (one per client)", correct)
    return c, m


def _check_acc(acc) -> np.ndarray:
    """Local accuracies, (K,): each in [0, 1], or NaN for a client without a test split."""
    a = _as_1d("acc", acc)
    if not np.all(np.isnan(a) | ((a >= 0) & (a <= 1))):
        fail("acc", "local accuracies in [0, 1] (NaN for a client without a test split)", acc)
    return a


def local_accuracy(correct, n) -> np.ndarray:
    """A_k = correct_k / n_k, shape (K,); NaN for a client with an empty test split."""
    c, m = _check_counts(correct, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m > 0, c / np.where(m > 0, m, 1), np.nan)


def global_accuracy(correct, n) -> float:
    """Σ correct / Σ n: the sample-weighted mean of the local accuracies."""
    c, m = _check_counts(correct, n)
    if m.sum() <= 0:
        raise ValueError("no test samples: every client's test split is empty")
    return float(c.sum() / m.sum())


def average_distance(acc, target=1.0) -> tuple[float, float]:
    """(AD, SDAD): mean and population std of |A_k − target| over clients with a test split.

    ``target`` is 1.0 (Clust-PSI-PFL) or the CL accuracy (PSI-PFL): a scalar, or an array
    of per-client targets of shape (K,).
    """
    a = _check_acc(acc)
    t = np.asarray(target)
    if t.dtype.kind not in "iuf" or t.ndim > 1 or (t.ndim == 1 and t.shape != a.shape):
        fail("target", f"a number or an array of shape {a.shape} (one per client)", target)
    d = np.abs(a - t.astype(np.float64))
    d = d[~np.isnan(d)]
    if d.size == 0:
        raise ValueError("no client has a defined local accuracy")
    return float(d.mean()), float(d.std())


CP_ZERO_RULES = ("inf", "exclude")
"""What :func:`client_parity` does with a client at accuracy 0, on which PSI-PFL is silent."""


def client_parity(acc, zero: str = "inf") -> float:
    """CP = max_{i,j} (A_i − A_j) / A_j = (A_max − A_min) / A_min (PSI-PFL §4.1; 0 = perfect parity).

    ``acc`` (K,) in [0, 1], NaN (no test split) left out. A client at A = 0 makes the ratio
    undefined and the paper is silent: ``zero='inf'`` takes the limit (inf when another client
    is above 0; the record's ``cp``), ``'exclude'`` leaves the clients at 0 out. Returns a float
    ≥ 0, 0 when every (remaining) client has the same accuracy, including all at 0.
    """
    a = _check_acc(acc)
    check_choice(zero, "zero", CP_ZERO_RULES)
    a = a[~np.isnan(a)]
    if a.size == 0:
        fail("acc", "local accuracies with at least one defined (non-NaN) entry", acc)
    if zero == "exclude":
        a = a[a > 0]
        if a.size == 0:  # every client at 0: equal accuracies
            return 0.0
    lo, hi = float(a.min()), float(a.max())
    if lo == 0:
        return float("inf") if hi > 0 else 0.0
    return (hi - lo) / lo


def summarise_clients(correct, n, cl_accuracy: float | None = None) -> dict:
    """All run-level metrics from per-client correct counts and test sizes: global_accuracy,
    ad, sdad (target 1.0), ad_cl, sdad_cl (target CL accuracy, NaN when ``cl_accuracy`` is
    None), cp, and local_accuracy (list, one per client)."""
    check_number(cl_accuracy, "cl_accuracy", 0, 1, optional=True)
    acc = local_accuracy(correct, n)
    ad, sdad = average_distance(acc, 1.0)
    if cl_accuracy is None:
        ad_cl = sdad_cl = float("nan")
    else:
        ad_cl, sdad_cl = average_distance(acc, cl_accuracy)
    return {
        "global_accuracy": global_accuracy(correct, n),
        "ad": ad,
        "sdad": sdad,
        "ad_cl": ad_cl,
        "sdad_cl": sdad_cl,
        "cp": client_parity(acc),
        "local_accuracy": acc.tolist(),
    }


def cluster_recovery(assignment, truth) -> float:
    """Adjusted Rand index between a grouping ``assignment`` (K,) of the clients and their true
    groups ``truth`` (K,) (any integer labels): in [-0.5, 1], 1 when equal up to relabelling,
    ≈ 0 for a random grouping."""

    from sklearn.metrics import adjusted_rand_score

    a, t = np.asarray(assignment), np.asarray(truth)
    for name, v, raw in (("assignment", a, assignment), ("truth", t, truth)):
        if v.dtype.kind not in "iu" or v.ndim != 1 or v.size == 0:
            fail(name, "a non-empty 1-D array of integer group labels (one per client)", raw)
    if a.shape != t.shape:
        fail("truth", f"one label per client like assignment (length {a.size})", truth)
    return float(adjusted_rand_score(t, a))
