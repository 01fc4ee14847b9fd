"""A row's verdict as a test: reproduced, differs or undecided, from standard errors.

One row of the report compares our mean over n seeds with the paper's mean over its n_p runs.
The gap Δ = ours − paper is uncertain through both means, so its standard error is

    se(Δ) = √(s_p² / n_p + s² / n)                                     (Welch)

with s_p the paper's sd over its runs (0 where it prints none: its mean is then taken as
exact, and the row says so) and s our sample sd over our seeds. A row of one seed has no sd of
its own: it borrows ``pooled_sd``, the seed sd pooled over comparable rows (same method, data
set and protocol; :func:`pooled_sd`), stated on the row and never 0. The degrees of freedom
are Welch–Satterthwaite's.

The interval is Δ ± t(1 − α, df) · se(Δ), a 1 − 2α interval (90 % at α = 5 %), and the margin
m is the least gap that counts as a difference (:func:`margin_of`). Then (two one-sided tests,
TOST, for equivalence; its mirror image for a difference):

* **reproduced**: the interval lies inside (−m, m): the gap is smaller than m, at level α;
* **differs**: the interval lies wholly outside [−m, m]: the gap exceeds m, at level α;
* **undecided**: otherwise, with the number of our seeds that would likely decide it
  (:func:`seeds_to_decide`), or none where the paper's own standard error leaves the interval
  wider than any number of our seeds can make up for.

So a cell whose true gap is 0 reads "differs" at most α of the time, and one whose true gap is
2m reads "reproduced" at most α of the time (``tests/test_verdicts.py`` simulates both).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from fedlib.validation import check_int, check_number, fail

__all__ = ["ALPHA", "OUTCOMES", "MARGIN_SDS", "Verdict", "margin_of", "pooled_sd", "pool_keys", "POOL_SCOPES", "seed_sd_pools", "delta_se", "verdict", "seeds_to_decide"]

ALPHA = 0.05
"""Each one-sided test's level: the interval is a 1 − 2α = 90 % interval."""
OUTCOMES = ("reproduced", "differs", "undecided")
MAX_SEEDS = 50
"""The most seeds :func:`seeds_to_decide` looks for; a row that needs more reads "none"."""


@dataclass(frozen=True)
class Verdict:
    """One row's test.

    outcome : one of :data:`OUTCOMES`
    delta : Δ = our mean − the paper's
    se, df : se(Δ) and its Welch–Satterthwaite degrees of freedom
    low, high : the 1 − 2α interval of Δ
    margin : m, the least gap that counts (:func:`margin_of`)
    our_sd : the seed sd used for our mean (ours, or the pooled one for one seed)
    pooled : whether ``our_sd`` is the pooled seed sd (a one-seed row)
    seeds_to_decide : for an undecided row, our seeds (in all) that would likely decide it at
        today's Δ and sd; None where no number up to :data:`MAX_SEEDS` does (or the row is decided)
    """

    outcome: str
    delta: float
    se: float
    df: float
    low: float
    high: float
    margin: float
    our_sd: float
    pooled: bool
    seeds_to_decide: int | None


MARGIN_SDS = 2.0
"""The margin in the paper's own seed sds (:func:`margin_of`)."""


def margin_of(tolerance: float, paper_sd: float | None) -> float:
    """m = max(tolerance, :data:`MARGIN_SDS` × the paper's own seed sd). A rerun of the paper's
    own protocol lands within about two of its seed sds of the printed mean, so a gap that small
    is no difference a reproduction can be blamed for; the tolerance (1 pp for an accuracy, a
    count's or score's step) is the least the table's precision resolves. With m = the paper's
    sd alone, a cell printed as 0.82 ± 0.01 over five runs could never read "reproduced": the
    paper's own standard error (0.45 pp) would fill the margin by itself."""
    check_number(tolerance, "tolerance", 0, low_open=True)
    sd = 0.0 if paper_sd is None or not np.isfinite(paper_sd) else float(paper_sd)
    return max(float(tolerance), MARGIN_SDS * sd)


def pooled_sd(groups) -> tuple[float, int]:
    """(s, df): the seed sd pooled over ``groups`` (lists of one row's seed values each; rows of
    fewer than two seeds add nothing), s² = Σ (n_i − 1) s_i² / Σ (n_i − 1), df = Σ (n_i − 1).
    (nan, 0) where no group has two seeds."""
    ss, df = 0.0, 0
    for g in groups:
        v = np.asarray([x for x in g if np.isfinite(x)], dtype=float)
        if len(v) >= 2:
            ss += float(np.sum((v - v.mean()) ** 2))
            df += len(v) - 1
    return (math.sqrt(ss / df), df) if df else (float("nan"), 0)


def pool_keys(rd) -> tuple:
    """The scopes a one-seed row borrows its seed sd from, narrowest first: the same records
    folder, metric, reading, method, data set and protocol (other levels); the same but every
    method; the same folder, metric and data set. ``rd``: a report reading (its ``records``,
    ``metric``, ``name`` and ``match``, :class:`workbook.report_cells.Reading`, or a row of the
    report's frame read the same way)."""
    m = dict(rd.match)
    return ((rd.records, rd.metric, rd.name, m.get("method"), m.get("dataset"), m.get("protocol")),
            (rd.records, rd.metric, rd.name, m.get("dataset"), m.get("protocol")),
            (rd.records, rd.metric, m.get("dataset")))


POOL_SCOPES = ("its method, data set and protocol at other levels",
               "every method read this way, same data set and protocol",
               "its records folder, same data set and metric")
"""What each scope of :func:`pool_keys` is, as a row states its borrowed sd."""


def seed_sd_pools(entries) -> dict:
    """Scope key (:func:`pool_keys`) -> (s, df, rows, scope text): the seed sd pooled
    (:func:`pooled_sd`) over ``entries``' rows (reading, values) of two seeds or more; a scope
    whose pooled sd is 0 gives none (a row never borrows 0). The report's and the plan's."""
    groups: dict = {}
    for rd, values in entries:
        if len(values) >= 2:
            for i, key in enumerate(pool_keys(rd)):
                groups.setdefault(key, (i, []))[1].append(values)
    out = {}
    for key, (i, rows) in groups.items():
        s, df = pooled_sd(rows)
        if df and s > 0:
            out[key] = (s, df, len(rows), POOL_SCOPES[i])
    return out


def delta_se(paper_sd: float, paper_n: int, our_sd: float, n: int, our_df: float) -> tuple[float, float]:
    """(se(Δ), Welch–Satterthwaite df) for the paper's sd over ``paper_n`` runs and ours over
    ``n`` seeds (``our_df``: the df of ``our_sd``, n − 1 for our own, the pooled df otherwise). A
    paper sd of 0 (none printed) contributes nothing; its df then does not enter."""
    a = paper_sd ** 2 / paper_n if paper_sd > 0 else 0.0
    b = our_sd ** 2 / n
    se = math.sqrt(a + b)
    if se == 0:
        return 0.0, math.inf
    denominator = (a * a / (paper_n - 1) if a and paper_n > 1 else 0.0) + (b * b / our_df if b and our_df else 0.0)
    return se, ((a + b) ** 2 / denominator if denominator else math.inf)


def t_quantile(p, df):
    """Student's t quantile t(p, df) (scalars or arrays; df = inf gives the normal's):
    ``scipy.stats.t.ppf(p, df)``'s very values, from the ufunc it calls (``scipy.special.stdtrit``)
    without the distribution's argument handling, which costs ~170 µs a scalar call (the report
    and the error-rate simulations call it tens of thousands of times)."""
    return special.stdtrit(df, p)


def _decide(delta: float, se: float, df: float, margin: float, alpha: float) -> tuple[str, float, float]:
    half = float(t_quantile(1 - alpha, df)) * se if se > 0 else 0.0
    low, high = delta - half, delta + half
    if -margin < low and high < margin:
        return "reproduced", low, high
    if low > margin or high < -margin:
        return "differs", low, high
    return "undecided", low, high


def verdict(paper_mean: float, paper_sd: float | None, paper_n: int, values, tolerance: float,
            pooled: tuple[float, int] | None = None, alpha: float = ALPHA) -> Verdict:
    """The row's :class:`Verdict`: ``values`` our seeds' values (finite; at least one), the
    paper's mean, sd (None: not printed) over ``paper_n`` runs, the cell's ``tolerance``, and
    ``pooled`` = (s, df) of :func:`pooled_sd` for a one-seed row (required then)."""
    v = [float(x) for x in values if np.isfinite(x)]
    if not v:
        fail("values", "at least one finite seed value", values)
    check_int(paper_n, "paper_n", 1)
    check_number(alpha, "alpha", 0, 0.5, low_open=True, high_open=True)
    n = len(v)
    if n >= 2:
        s, s_df, is_pooled = float(np.std(v, ddof=1)), n - 1, False
    else:
        if pooled is None or not np.isfinite(pooled[0]) or pooled[0] <= 0 or pooled[1] < 1:
            fail("pooled", "the (sd > 0, df ≥ 1) pooled over comparable rows for a one-seed row "
                 "(workbook.verdicts.pooled_sd)", pooled)
        s, s_df, is_pooled = float(pooled[0]), pooled[1], True
    p_sd = 0.0 if paper_sd is None or not np.isfinite(paper_sd) else float(paper_sd)
    margin = margin_of(tolerance, paper_sd)
    delta = float(np.mean(v)) - float(paper_mean)
    se, df = delta_se(p_sd, paper_n, s, n, s_df)
    outcome, low, high = _decide(delta, se, df, margin, alpha)
    more = seeds_to_decide(delta, margin, p_sd, paper_n, s, n, alpha) if outcome == "undecided" else None
    return Verdict(outcome, delta, se, df, low, high, margin, s, is_pooled, more)


def seeds_to_decide(delta: float, margin: float, paper_sd: float, paper_n: int, seed_sd: float, n: int,
                    alpha: float = ALPHA) -> int | None:
    """The fewest seeds N > n (up to :data:`MAX_SEEDS`) at which a row with today's Δ and seed sd
    would be decided (its interval then inside or outside the margin; df n − 1 of its own
    sd); None where none does — |Δ| at the margin itself, or the paper's standard error alone
    too wide."""
    for total in range(max(n + 1, 2), MAX_SEEDS + 1):
        se, df = delta_se(paper_sd, paper_n, seed_sd, total, total - 1)
        if _decide(delta, se, df, margin, alpha)[0] != "undecided":
            return total
    return None
