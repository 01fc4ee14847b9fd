"""Laplace noise on the label histograms that PSI-based methods send to the server.

What the server learns. Clust-PSI-PFL and PSI-PFL need, from every client i, only its label
histogram n_i = (n_{i,1} … n_{i,C}) (the counts of its train split): PSI, PSI per class and
Algorithm 1 are computed from these. The histogram says how many examples of each label the
client holds — e.g. that a hospital has 37 positive cases — which is itself sensitive. The
papers claim compatibility with differential privacy but never measure it; this module makes
it measurable.

The mechanism (local DP, each client perturbs its own histogram before sending it):

    ñ_{i,c} = max(0, n_{i,c} + Lap(0, 1/ε))        c = 1 … C

Neighbouring data sets differ by adding or removing one example, which changes one count by
one: the histogram's L1 sensitivity is 1, so Laplace noise of scale 1/ε on every count is
ε-differentially private for the client's data (Dwork & Roth 2014, Thm. 3.6); clipping at
zero is post-processing and keeps the guarantee. Under the replace-one neighbourhood the
sensitivity is 2: pass ε/2 for the same guarantee.

What the server does with them (post-processing, which keeps the guarantee): ``'clip'`` uses
the histograms as received; ``'round'`` rounds every count to the nearest integer first — a
count is an integer, and with little noise (ε ≳ 3: |Lap(1/ε)| < 0.5 with probability
1 − e^{−ε/2}) rounding returns most counts exactly, above all the zero counts on which PSI's
1e-6 smoothing is most sensitive (notebook 04 measures both).

Attribute and joint label–attribute histograms (issue 44, :func:`server_attribute_histograms`): a
client sends F histograms, one per feature (attribute bins, or label × attribute-bin cells), each
counting all its examples; adding or removing one example changes one count in each, so the
(F, B) collection has L1 sensitivity F and Laplace noise of scale F/ε on every count is ε-DP
(equivalently ε/F per feature, by composition). The client's size n_i, which the size feature
and the down-weighting use, is then read off the noisy histograms (post-processing: free). The
bin edges (the pooled quantiles) are treated as public, agreed before training; computed from
the pooled data, as the workbook's simulation does, they are not covered by ε.

Every client draws from its own generator, ``numpy.random.default_rng([seed, client_id])``,
so a client's noise depends only on (seed, its id, ε): fedlib's methods and the Flower
strategies (:mod:`fedlib.flower`), where each client adds its own noise, send the same noisy
histograms for the same seed.
"""
from __future__ import annotations

import numpy as np

from .validation import check_choice, check_int, check_number, check_seed, fail

__all__ = ["laplace_counts", "noisy_label_counts", "postprocess_counts", "server_histograms", "SENSITIVITY",
           "POSTPROCESS", "server_attribute_histograms"]

POSTPROCESS = ("clip", "round")
"""The server's post-processing of the received histograms (module docstring)."""

SENSITIVITY = 1.0
"""L1 sensitivity of a label histogram under add/remove-one neighbouring data sets."""


def _check_counts(counts, name: str, ndim: int) -> np.ndarray:
    try:
        a = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError):
        fail(name, f"a {ndim}-D array of non-negative label counts", counts)
    if a.ndim != ndim or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
        fail(name, f"a non-empty {ndim}-D array of finite non-negative label counts"
             + (" (K clients × C classes)" if ndim == 2 else " (C classes)"), counts)
    return a


def laplace_counts(counts, epsilon: float, seed: int, client_id: int) -> np.ndarray:
    """One client's ε-DP label histogram.

    Parameters
    ----------
    counts : array-like, shape (C,), non-negative — the client's label counts
    epsilon : float > 0 — the privacy budget (noise scale SENSITIVITY/ε)
    seed : int ≥ 0 — the run's noise seed
    client_id : int ≥ 0 — the client's id (its own generator: ``default_rng([seed, client_id])``)

    Returns
    -------
    ndarray, shape (C,), float64, ≥ 0 — ``max(0, counts + Lap(0, 1/ε))``; a row clipped to
    all zeros becomes uniform 1/C (post-processing: the guarantee holds; PSI needs a non-empty
    histogram)
    """
    c = _check_counts(counts, "counts", 1)
    eps = check_number(epsilon, "epsilon", 0, low_open=True)
    rng = np.random.default_rng([check_seed(seed), check_int(client_id, "client_id", 0)])
    noisy = np.maximum(c + rng.laplace(0.0, SENSITIVITY / eps, size=c.shape), 0.0)
    if noisy.sum() == 0:  # every count clipped: one example spread evenly (PSI needs a non-empty row)
        noisy = np.full(c.shape, 1.0 / c.size)
    return noisy


def noisy_label_counts(counts, epsilon: float | None, seed: int) -> np.ndarray:
    """Every client's histogram as the server receives it, shape (K, C).

    ``epsilon=None`` returns the counts unchanged (no noise, as float64); otherwise row i is
    :func:`laplace_counts` (counts[i], ε, seed, i) — what client i sends.
    """
    c = _check_counts(counts, "counts", 2)
    check_seed(seed)
    if epsilon is None:
        return c.copy()
    check_number(epsilon, "epsilon", 0, low_open=True)
    return np.stack([laplace_counts(row, epsilon, seed, i) for i, row in enumerate(c)])


def postprocess_counts(counts, rule: str = "clip") -> np.ndarray:
    """The server's post-processing of the received histograms, shape (K, C) → (K, C) float64.

    ``'clip'``: as received (every client clipped its counts at 0 already). ``'round'``: every
    count rounded to the nearest integer (``np.rint``); a row that rounds to all zeros becomes
    uniform 1/C (PSI needs a non-empty histogram). Post-processing: the ε-DP guarantee holds.
    """
    c = _check_counts(counts, "counts", 2)
    check_choice(rule, "rule", POSTPROCESS)
    if rule == "clip":
        return c
    out = np.rint(c)
    empty = out.sum(axis=1) == 0
    out[empty] = 1.0 / c.shape[1]
    return out


def server_histograms(counts, epsilon: float | None, seed: int, postprocess: str = "clip") -> np.ndarray:
    """What the server computes PSI from, shape (K, C): the exact ``counts`` when ``epsilon`` is
    None (returned as given), else :func:`postprocess_counts` (:func:`noisy_label_counts`
    (counts, ε, seed), ``postprocess``) — the methods' ``dp_epsilon``, ``dp_seed`` and
    ``dp_postprocess``."""
    check_choice(postprocess, "postprocess", POSTPROCESS)
    if epsilon is None:
        return counts
    return postprocess_counts(noisy_label_counts(counts, epsilon, seed), postprocess)


def server_attribute_histograms(counts, epsilon: float | None, seed: int, postprocess: str = "clip") -> np.ndarray:
    """What the server computes attribute PSI from, shape (K, F, B): the exact ``counts`` when
    ``epsilon`` is None (as float64), else every client's (F, B) histograms with Laplace noise of scale
    F/ε on each count (sensitivity F, module docstring) — :func:`laplace_counts` of the flattened row
    at ε/F, client i from ``default_rng([seed, i])`` — then ``postprocess`` per feature
    (:func:`postprocess_counts`). ``counts``: (K, F, B) from :func:`fedlib.noniid.attribute_counts`
    or :func:`fedlib.noniid.joint_counts`."""
    try:
        a = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError):
        fail("counts", "a (K, F, B) array of non-negative bin counts", counts)
    if a.ndim != 3 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
        fail("counts", "a non-empty (K clients × F features × B bins) array of finite non-negative counts", counts)
    check_seed(seed)
    check_choice(postprocess, "postprocess", POSTPROCESS)
    if epsilon is None:
        return a
    eps = check_number(epsilon, "epsilon", 0, low_open=True)
    k, f, b = a.shape
    noisy = np.stack([laplace_counts(row.ravel(), eps / f, seed, i) for i, row in enumerate(a)]).reshape(k, f, b)
    for j in range(f):  # a feature whose noisy histogram clipped to all zeros: uniform (PSI needs a non-empty row)
        empty = noisy[:, j, :].sum(axis=1) == 0
        noisy[empty, j, :] = 1.0 / b
        noisy[:, j, :] = postprocess_counts(noisy[:, j, :], postprocess)
    return noisy
