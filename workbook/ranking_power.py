"""What a ranking of notebook 11 can support (issue 58): when training stopped, which metric ranks,
how many blocks it rests on. Pure functions over per-run records and score tables; the study
modules (:mod:`workbook.cross_paper`) build the tables, this module measures them.

**Convergence** (:func:`plateau_round`; issue 70). The rule, its parameters explicit
(:data:`PLATEAU_WINDOW` w, :data:`PLATEAU_TOLERANCE_PP`, :data:`PLATEAU_MIN_EVALUATIONS`,
:data:`DEGENERATE_PP`): a run has *plateaued at round r* when the mean accuracy over the evaluated
rounds in (r, r + w] differs from the mean over (r − w, r] by less than ``tolerance`` pp, each
window holding at least three evaluations and r + w no later than the last evaluated round; the
plateau round is the first such r. Means of windows, not the range of one: a personalised or a
label-skewed FedAvg run jitters by several pp round to round and its range never falls under a
fraction of a pp, while its level stops moving. A window pair in which every accuracy lies within
:data:`DEGENERATE_PP` of chance (100 / C) or of 100 % is a constant, not a plateau (an S = 0 run at
chance, or one at 100 %): :func:`degenerate`. A run whose history ends before any pair of windows
holds is **not converged by R**: no plateau is invented for it. Before issue 70 the rule was the
range of one window (< 0.5 pp over r … r + 5, two evaluations enough): it fired on constants and by
coincidence, and never for label-skewed FedAvg.

**Scores** (:func:`last_mean`): each run is scored by the mean of its last :data:`SCORE_LAST` (3)
evaluations, not by its last one: the ranking of one round measures that round's jitter.

**Rankings** (:func:`mean_ranks`): blocks are the columns of a methods × blocks score table (higher
is better), each block ranked 1 = best with ties sharing their mean rank (Friedman's ranks, as
autorank computes them); a method without a score on every block is left out. Rankings are
compared by Kendall's τ-b (:func:`kendall_tau`) on the mean ranks of the methods both rank.
:func:`leave_one_block_out` recomputes the mean ranks without each block in turn (kept for
comparison: with no signal at all its minimum τ is already high). **Split-half τ**
(:func:`split_half_tau`, issue 70): τ between the mean ranks of two disjoint halves of the blocks,
over every split (⌊N/2⌋ against ⌈N/2⌉ blocks); :func:`split_half_null` is its distribution when
every block ranks the methods at random (same k and N), so the observed τ reads against chance.

**Pre-registered comparisons** (:func:`preregistered`, :func:`holm`): each method against each
reference (FedAvg, Local) by the Wilcoxon signed-rank test over the blocks (two-sided, scipy's
exact null where it applies), the p-values adjusted together by Holm's step-down correction —
beside, not instead of, the Friedman / Nemenyi picture.

**Power** (:func:`nemenyi_cd`): the Nemenyi critical difference CD = q_α · sqrt(k (k + 1) / (6 N))
for k methods and N blocks, q_α the studentized range quantile for k groups and infinite degrees of
freedom divided by √2 (Demšar 2006, Table 5: q_0.05 = 1.960, 2.343, 2.569, 2.728, 2.850, 2.949,
3.031 for k = 2 … 8).

**Cost** (:func:`cost_per_run`, :func:`design_cost`): CPU-seconds from committed records by the one
estimator, :mod:`fedlib.cost` (``cpu_seconds``: process CPU time, every thread summed; a labelled
fallback for records without it), per round, scaled linearly in the rounds — the
training part of a run grows with R; evaluation and loading do not, so a linear scaling is an
upper bound for R above the records' and a lower one below.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from fedlib.frame import records_frame
from fedlib.validation import check_int, check_number, fail

__all__ = ["PLATEAU_WINDOW", "PLATEAU_TOLERANCE_PP", "PLATEAU_MIN_EVALUATIONS", "DEGENERATE_PP", "SCORE_LAST",
           "PLATEAU_RULE", "plateau_round", "degenerate", "chance_pp", "last_mean", "split_half_tau", "split_half_null",
           "tau_b_rows", "holm", "preregistered", "history_of", "score_at_round",
           "convergence_table", "mean_ranks", "kendall_tau", "leave_one_block_out", "nemenyi_q", "nemenyi_cd",
           "RankingPower", "ranking_power", "ties_per_block", "cost_per_run", "design_cost", "client_blocks",
           "score_table_records", "choose_rounds"]

PLATEAU_WINDOW = 5
"""w: the rounds of each of the two windows compared."""
PLATEAU_TOLERANCE_PP = 1.0
"""The percentage points within which the two windows' means must agree."""
PLATEAU_MIN_EVALUATIONS = 3
"""The evaluations each window must hold."""
DEGENERATE_PP = 1.0
"""A window pair within this many pp of chance or of 100 % throughout is a constant, not a plateau."""
SCORE_LAST = 3
"""A run's score: the mean of its last this-many evaluations (:func:`last_mean`)."""
PLATEAU_RULE = (f"plateau round: the first round r at which the mean accuracy over the evaluated rounds in "
                f"(r, r + {PLATEAU_WINDOW}] differs from the mean over (r − {PLATEAU_WINDOW}, r] by less than "
                f"{PLATEAU_TOLERANCE_PP:g} pp, each window holding ≥ {PLATEAU_MIN_EVALUATIONS} evaluations; a pair "
                f"of windows within {DEGENERATE_PP:g} pp of chance (100/C) or of 100 % throughout is a constant, "
                "not a plateau; a run without such an r is 'not converged by R'")


def degenerate(accuracy_pp, chance: float | None, margin: float = DEGENERATE_PP) -> str | None:
    """"chance" when every value of ``accuracy_pp`` lies within ``margin`` pp of ``chance`` (pp,
    100 / C; None: not checked), "100 %" when every one lies within ``margin`` of 100, else None."""
    a = np.asarray(accuracy_pp, dtype=np.float64)
    if a.size and chance is not None and np.all(np.abs(a - chance) <= margin):
        return "chance"
    if a.size and np.all(a >= 100 - margin):
        return "100 %"
    return None


def plateau_round(rounds, accuracy_pp, *, window: int = PLATEAU_WINDOW, tolerance: float = PLATEAU_TOLERANCE_PP,
                  min_evaluations: int = PLATEAU_MIN_EVALUATIONS, chance: float | None = None) -> int | None:
    """The first round r at which the windows (r − w, r] and (r, r + w] agree in mean within
    ``tolerance`` pp (module docstring).

    Parameters
    ----------
    rounds : (T,) increasing evaluated round numbers (e.g. 1 … R, or 5, 10, … with eval_every 5)
    accuracy_pp : (T,) accuracy at those rounds, in percentage points
    window, tolerance, min_evaluations : the rule's parameters (module docstring)
    chance : 100 / C in pp (None: the constant-at-chance check is off; the 100 % check stays)

    Returns
    -------
    r, or None when no pair of windows qualifies ("not converged by R", or a constant).
    """
    check_int(window, "window", 1)
    check_number(tolerance, "tolerance", 0, low_open=True)
    check_int(min_evaluations, "min_evaluations", 1)
    r = np.asarray(rounds, dtype=np.float64)
    a = np.asarray(accuracy_pp, dtype=np.float64)
    if r.ndim != 1 or a.shape != r.shape:
        fail("rounds, accuracy_pp", "two 1-d arrays of the same length", (r.shape, a.shape))
    if r.size > 1 and np.any(np.diff(r) <= 0):
        fail("rounds", "strictly increasing round numbers", r.tolist())
    for mid in r:
        if mid + window > r[-1]:
            break
        before = (r > mid - window) & (r <= mid)
        after = (r > mid) & (r <= mid + window)
        if before.sum() < min_evaluations or after.sum() < min_evaluations:
            continue
        if degenerate(a[before | after], chance) is not None:
            continue
        if abs(a[after].mean() - a[before].mean()) < tolerance:
            return int(mid)
    return None


def chance_pp(record: dict) -> float | None:
    """100 / C of a record's data set (:data:`fedlib.datasets.DATASETS`), None if unknown."""
    from fedlib.datasets import DATASETS

    ds = DATASETS.get((record.get("spec") or {}).get("dataset"))
    return 100.0 / ds.n_classes if ds is not None else None


def last_mean(record: dict, last: int = SCORE_LAST, value: str = "global_accuracy") -> float:
    """The mean of the last ``last`` evaluations of a finished record's ``history`` for ``value``
    (pp); NaN when it holds fewer than ``last`` (e.g. Local before issue 70: its last round only)."""
    check_int(last, "last", 1)
    _, a = history_of(record, value)
    return float(a[-last:].mean()) if a.size >= last else np.nan


def history_of(record: dict, value: str = "global_accuracy") -> tuple[np.ndarray, np.ndarray]:
    """(rounds, accuracy in pp) of a finished record's per-round ``history`` for ``value``
    (``global_accuracy``: weighted local accuracy; ``global_test_accuracy``: official test), the
    rounds where it was evaluated."""
    rows = [h for h in record.get("history", []) if h.get(value) is not None]
    return (np.array([h["round"] for h in rows], dtype=np.int64),
            100 * np.array([h[value] for h in rows], dtype=np.float64))


def _finished(records) -> list[dict]:
    """The finished (``ok``) records among ``records``, in their order: the ``record`` column of
    :func:`fedlib.frame.records_frame`'s ok rows."""
    f = records_frame(records)
    return f[f.status == "ok"].record.tolist() if len(f) else []


def score_at_round(records, round_: int, block_of, *, value: str = "global_accuracy") -> pd.DataFrame:
    """Methods × blocks of ``value`` (pp) at round ``round_`` of each finished record's history,
    mean over the seeds of a block; NaN where any seed's run has no evaluation at that round.
    ``block_of(record) -> str``: the block (e.g. the partition) of a record."""
    check_int(round_, "round_", 1)
    rows = []
    for rec in _finished(records):
        r, a = history_of(rec, value)
        at = a[r == round_]
        rows.append({"method": rec["spec"]["method"], "block": block_of(rec),
                     "score": float(at[0]) if at.size else np.nan})
    if not rows:
        return pd.DataFrame()
    return (pd.DataFrame(rows).groupby(["method", "block"]).score
            .agg(lambda v: v.mean() if v.notna().all() else np.nan).unstack("block"))


def score_table_records(records, block_of, score) -> pd.DataFrame:
    """Methods × blocks of ``score(record)`` (a float), mean over the seeds of a block (finished runs)."""
    rows = [{"method": rec["spec"]["method"], "block": block_of(rec), "score": float(score(rec))}
            for rec in _finished(records)]
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).groupby(["method", "block"]).score.mean().unstack("block")


def convergence_table(records, block_of, *, methods=None, value: str = "global_accuracy",
                      window: int = PLATEAU_WINDOW, tolerance: float = PLATEAU_TOLERANCE_PP,
                      min_evaluations: int = PLATEAU_MIN_EVALUATIONS) -> pd.DataFrame:
    """One row per finished run (of ``methods``, None: all): ``block``, ``method``, ``seed``, ``R``
    (last evaluated round), ``evaluations`` (how many rounds were evaluated), ``plateau`` (the round
    of :func:`plateau_round`, NaN if none), ``reading`` ("plateau at r", "constant at chance" /
    "constant at 100 %", "not converged by R", or why the history cannot tell), ``last_step_pp``
    (|accuracy at the last evaluated round − the one before|, pp) and ``last_range_pp`` (max − min
    of the last 2w rounds' evaluations, pp)."""
    rows = []
    for rec in _finished(records):
        if methods is not None and rec["spec"]["method"] not in methods:
            continue
        r, a = history_of(rec, value)
        if r.size == 0:
            continue
        chance = chance_pp(rec)
        p = plateau_round(r, a, window=window, tolerance=tolerance, min_evaluations=min_evaluations, chance=chance)
        step = int(np.diff(r).min()) if r.size > 1 else 0
        sparse = r.size > 1 and window // step < min_evaluations  # no window can hold min_evaluations
        const = degenerate(a[r > r[-1] - 2 * window], chance)
        reading = (f"plateau at {p}" if p is not None
                   else f"one evaluation only (round {int(r[-1])}): no history" if r.size == 1
                   else f"history too sparse for w = {window} (evaluated every {step} rounds)" if sparse
                   else f"constant at {const}" if const is not None
                   else f"not converged by R = {int(r[-1])}")
        tail = a[r > r[-1] - 2 * window]
        rows.append({"block": block_of(rec), "method": rec["spec"]["method"], "seed": rec["spec"]["seed"],
                     "R": int(r[-1]), "evaluations": int(r.size), "plateau": np.nan if p is None else p,
                     "reading": reading,
                     "last_step_pp": float(abs(a[-1] - a[-2])) if a.size > 1 else np.nan,
                     "last_range_pp": float(tail.max() - tail.min())})
    return pd.DataFrame(rows, columns=["block", "method", "seed", "R", "evaluations", "plateau", "reading",
                                       "last_step_pp", "last_range_pp"])


def choose_rounds(table: pd.DataFrame, *, window: int = PLATEAU_WINDOW, step: int = 10) -> tuple[int | None, str]:
    """R from a :func:`convergence_table` (e.g. a pilot's FedAvg and Local runs): the latest
    plateau round plus the window (the plateau must be seen to hold), rounded up to a multiple of
    ``step``; (None, why) when a run did not plateau (its R is too short to choose from)."""
    check_int(step, "step", 1)
    if table.empty:
        return None, "no run"
    bad = table[table.plateau.isna()]
    if len(bad):
        return None, (f"{len(bad)} of {len(table)} runs without a plateau ("
                      + "; ".join(sorted(set(bad.reading))) + ")")
    last = int(table.plateau.max())
    R = int(-(-(last + window) // step) * step)
    return R, f"latest plateau at round {last} of {len(table)} runs, + w = {window}, rounded up to {step}"


# ----------------------------------------------------------------------------- rankings
def _complete(scores: pd.DataFrame, exclude=()) -> pd.DataFrame:
    """``scores`` (methods × blocks) without ``exclude``, the blocks with no score, and the methods
    missing a score on any remaining block."""
    s = scores.drop(index=[m for m in exclude if m in scores.index]).dropna(axis=1, how="all")
    return s.dropna(axis=0, how="any")


def mean_ranks(scores: pd.DataFrame, *, exclude=()) -> pd.Series:
    """Mean rank (1 = best, higher score better; ties share their mean rank) of each method of
    ``scores`` (methods × blocks) scored on every block, ``exclude`` left out; ascending."""
    s = _complete(scores, exclude)
    if s.shape[0] < 2 or s.shape[1] < 1:
        fail("scores", "≥ 2 methods scored on ≥ 1 common block", s.shape)
    ranks = s.rank(axis=0, ascending=False, method="average")
    return ranks.mean(axis=1).sort_values()


def kendall_tau(a: pd.Series, b: pd.Series) -> float:
    """Kendall's τ-b between two rankings (Series indexed by method) on the methods both hold."""
    common = [m for m in a.index if m in b.index]
    if len(common) < 2:
        fail("a, b", "two rankings sharing ≥ 2 methods", common)
    return float(stats.kendalltau(a[common].to_numpy(), b[common].to_numpy()).statistic)


def leave_one_block_out(scores: pd.DataFrame, *, exclude=()) -> pd.DataFrame:
    """Per block of ``scores`` (methods × blocks): Kendall's τ between the mean ranks without that
    block and with all; one row per block (``block``, ``tau``), lowest τ first (NaN — the reduced
    ranking ties every method — last)."""
    s = _complete(scores, exclude)
    if s.shape[1] < 2:
        fail("scores", "≥ 2 blocks with every method scored", s.shape)
    full = mean_ranks(s)
    rows = [{"block": b, "tau": kendall_tau(full, mean_ranks(s.drop(columns=[b])))} for b in s.columns]
    return pd.DataFrame(rows).sort_values("tau", kind="stable").reset_index(drop=True)


def tau_b_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall's τ-b between the rows of ``a`` and ``b`` (S, k): per row, Σ sign(aᵢ − aⱼ) sign(bᵢ − bⱼ)
    over the pairs, over √(pairs untied in a · pairs untied in b); NaN where a row ties every pair.
    Returns (S,)."""
    a, b = np.atleast_2d(np.asarray(a, np.float64)), np.atleast_2d(np.asarray(b, np.float64))
    if a.shape != b.shape:
        fail("a, b", "two arrays of the same shape (S, k)", (a.shape, b.shape))
    i, j = np.triu_indices(a.shape[1], 1)
    sa, sb = np.sign(a[:, i] - a[:, j]), np.sign(b[:, i] - b[:, j])
    den = np.sqrt((sa != 0).sum(1) * (sb != 0).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (sa * sb).sum(1) / np.where(den > 0, den, 1), np.nan)


def _halves(n: int, max_splits: int, seed: int) -> np.ndarray:
    """(S, n) bool: the splits of n blocks into ⌊n/2⌋ (True) and the rest, each split once
    (for even n, the halves holding block 0); more than ``max_splits``: that many drawn from
    ``default_rng(seed)`` without replacement."""
    from itertools import combinations
    from math import comb

    h = n // 2
    total = comb(n, h) // (2 if n % 2 == 0 else 1)
    if total <= max_splits:
        pool = combinations(range(n), h) if n % 2 else ((0, *c) for c in combinations(range(1, n), h - 1))
        out = np.zeros((total, n), bool)
        for s, c in enumerate(pool):
            out[s, list(c)] = True
        return out
    rng = np.random.default_rng(seed)
    seen, out = set(), []
    while len(out) < max_splits:
        c = tuple(sorted(rng.choice(n, h, replace=False).tolist()))
        key = c if n % 2 else min(c, tuple(sorted(set(range(n)) - set(c))))
        if key not in seen:
            seen.add(key)
            m = np.zeros(n, bool)
            m[list(c)] = True
            out.append(m)
    return np.array(out)


def _split_taus(ranks: np.ndarray, halves: np.ndarray) -> np.ndarray:
    """τ-b between the two halves' mean ranks, per split: ``ranks`` (k, N) of one table, ``halves`` (S, N)."""
    w = halves.astype(np.float64)
    a = ranks @ w.T / w.sum(1)          # (k, S)
    b = ranks @ (1 - w).T / (1 - w).sum(1)
    return tau_b_rows(a.T, b.T)


def split_half_tau(scores: pd.DataFrame, *, exclude=(), max_splits: int = 5000, seed: int = 0) -> np.ndarray:
    """Kendall's τ-b between the mean ranks on one half of the blocks and on the other, for every
    split of the N blocks of ``scores`` (methods × blocks, higher better) into ⌊N/2⌋ and ⌈N/2⌉
    (35 splits for N = 7; above ``max_splits`` splits, that many drawn with ``seed``). Returns (S,)."""
    s = _complete(scores, exclude)
    if s.shape[0] < 2 or s.shape[1] < 2:
        fail("scores", "≥ 2 methods scored on ≥ 2 common blocks", s.shape)
    ranks = s.rank(axis=0, ascending=False, method="average").to_numpy()
    return _split_taus(ranks, _halves(s.shape[1], max_splits, seed))


def split_half_null(k: int, n: int, *, n_sim: int = 1000, seed: int = 0, max_splits: int = 500) -> pd.DataFrame:
    """The split-half τ when every one of ``n`` blocks ranks ``k`` methods at random (a uniform
    permutation each, from ``default_rng(seed)``): one row per simulated table, the ``median`` and
    the ``min`` of its split-half τ's — what :func:`split_half_tau` gives with no signal."""
    check_int(k, "k", 2)
    check_int(n, "n", 2)
    check_int(n_sim, "n_sim", 1)
    rng = np.random.default_rng(seed)
    halves = _halves(n, max_splits, seed)
    rows = []
    for _ in range(n_sim):
        ranks = np.argsort(rng.random((n, k)), axis=1).argsort(axis=1).T + 1.0  # (k, n)
        t = _split_taus(ranks, halves)
        rows.append({"median": float(np.nanmedian(t)), "min": float(np.nanmin(t))})
    return pd.DataFrame(rows)


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values of ``pvalues`` (m,): sorted ascending, the i-th (from 0)
    times (m − i), made non-decreasing by a running maximum, capped at 1; NaN stays NaN."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adj
    return out


def preregistered(scores: pd.DataFrame, methods, references=("fedavg", "local"), *, alpha: float = 0.05) -> pd.DataFrame:
    """The pre-registered comparisons: each of ``methods`` against each of ``references`` over the
    blocks of ``scores`` (methods × blocks, higher better; the blocks where both are scored) by the
    two-sided Wilcoxon signed-rank test (:func:`scipy.stats.wilcoxon`, zero differences dropped),
    the p-values Holm-adjusted together (:func:`holm`). One row per pair: ``method``,
    ``reference``, ``n`` blocks, ``wins`` (blocks where the method scores higher), ``median_diff_pp``,
    ``p``, ``p_holm``, ``significant`` (p_holm < ``alpha``)."""
    check_number(alpha, "alpha", 0, 1, low_open=True, high_open=True)
    missing = [m for m in (*methods, *references) if m not in scores.index]
    if missing:
        fail("methods, references", f"methods of the score table ({sorted(scores.index)})", missing)
    rows = []
    for m in methods:
        for ref in references:
            if m == ref:
                continue
            d = (scores.loc[m] - scores.loc[ref]).dropna().to_numpy()
            p = float(stats.wilcoxon(d).pvalue) if np.any(d != 0) and d.size >= 2 else np.nan
            rows.append({"method": m, "reference": ref, "n": int(d.size), "wins": int((d > 0).sum()),
                         "median_diff_pp": float(np.median(d)) if d.size else np.nan, "p": p})
    out = pd.DataFrame(rows, columns=["method", "reference", "n", "wins", "median_diff_pp", "p"])
    out["p_holm"] = holm(out.p.to_numpy())
    out["significant"] = out.p_holm < alpha
    return out


def ties_per_block(scores: pd.DataFrame, *, exclude=(), decimals: int = 6) -> pd.Series:
    """Per block, how many methods share their score with another method (rounded to ``decimals``)."""
    s = _complete(scores, exclude).round(decimals)
    return s.apply(lambda col: int(col.duplicated(keep=False).sum()), axis=0)


def nemenyi_q(k: int, alpha: float = 0.05) -> float:
    """q_α of the Nemenyi test for k methods: the studentized range quantile (k groups, ∞ degrees
    of freedom) at 1 − α, over √2 (Demšar 2006, Table 5a)."""
    check_int(k, "k", 2)
    check_number(alpha, "alpha", 0, 1, low_open=True, high_open=True)
    return float(stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2))


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """The Nemenyi critical difference q_α · sqrt(k (k + 1) / (6 N)) for ``k`` methods on ``n`` blocks."""
    check_int(n, "n", 1)
    return nemenyi_q(k, alpha) * float(np.sqrt(k * (k + 1) / (6.0 * n)))


@dataclass(frozen=True)
class RankingPower:
    """What a ranking rests on: ``n`` blocks, ``k`` methods, Friedman's ``p``, the Nemenyi ``cd``
    at ``alpha``, the post-hoc ``test``, and how many methods are within CD of the best."""
    n: int
    k: int
    p: float
    cd: float
    alpha: float
    test: str
    within_cd_of_best: int

    def line(self) -> str:
        return (f"N = {self.n} blocks, k = {self.k} methods; Friedman p = {self.p:.3g}; {self.test} "
                f"CD = {self.cd:.2f} ranks at α = {self.alpha:g} (of a possible {self.k - 1}); "
                f"{self.within_cd_of_best} methods within CD of the best")


def ranking_power(scores: pd.DataFrame, *, exclude=(), alpha: float = 0.05) -> RankingPower:
    """:class:`RankingPower` of ``scores`` (methods × blocks, higher better): Friedman's χ² test
    (scipy) and the Nemenyi CD (:func:`nemenyi_cd`) on the methods scored on every block."""
    s = _complete(scores, exclude)
    if s.shape[0] < 3 or s.shape[1] < 2:
        fail("scores", "≥ 3 methods scored on ≥ 2 common blocks", s.shape)
    p = float(stats.friedmanchisquare(*s.to_numpy()).pvalue)
    ranks = mean_ranks(s)
    cd = nemenyi_cd(s.shape[0], s.shape[1], alpha)
    return RankingPower(int(s.shape[1]), int(s.shape[0]), p, cd, alpha, "Nemenyi",
                        int((ranks - ranks.iloc[0] <= cd).sum()))


def client_blocks(records, methods, value: str = "local") -> pd.DataFrame:
    """Rows (seed, client), columns ``methods``: each client's accuracy under every method, from
    the records of one partition — ``value`` 'local' (CC_k / n_k on its own test split, the record's
    ``local_accuracy``) or 'official_test' (client k's model on the official test set,
    ``global_test_correct[k] / n_global_test``). Rows with a missing value are dropped."""
    if value not in ("local", "official_test"):
        fail("value", "'local' or 'official_test'", value)
    cols = {}
    for m in methods:
        recs = sorted([r for r in records if r["spec"]["method"] == m and r.get("status") == "ok"],
                      key=lambda r: r["spec"]["seed"])
        parts = []
        for r in recs:
            if value == "local":
                parts.append(np.asarray(r["local_accuracy"], dtype=np.float64))
            else:
                parts.append(np.asarray(r["global_test_correct"], dtype=np.float64) / float(r["n_global_test"]))
        cols[m] = np.concatenate(parts) if parts else np.array([])
    lengths = {len(v) for v in cols.values()}
    if len(lengths) > 1:
        fail("records", "the same seeds and clients for every method", {m: len(v) for m, v in cols.items()})
    return pd.DataFrame(cols).dropna().reset_index(drop=True)


# ----------------------------------------------------------------------------- cost
def cost_per_run(records, key) -> pd.Series:
    """CPU-seconds per round of the finished ``records``, grouped by ``key(record)`` (e.g. the
    method): each group's cost by the one estimator, :func:`fedlib.cost.measured` (the median
    ``cpu_seconds``, in a :data:`fedlib.cost.REFERENCE_CAPABILITY` host's: :func:`fedlib.cost.on_reference_host`;
    records without it: the labelled fallback of wall seconds × host threads),
    divided by the group's rounds (``spec.fl.rounds``, else the record's ``fl.rounds``; a group of
    mixed rounds is a ValueError: add the rounds to ``key``). Records without rounds or any time
    are left out. The Series' ``attrs['basis']`` maps each key to the
    estimate's basis (:class:`fedlib.cost.Estimate`), so a fallback is never silent, and
    ``attrs['rounds']`` each key to the rounds its records ran (a run's fixed costs are spread over
    them: fewer rounds, a higher cost a round)."""
    from fedlib import cost

    groups: dict = {}
    for r in cost.on_reference_host(records):  # CPU-seconds of the reference host, as every printed estimate
        if r.get("status") != "ok" or cost.run_cost(r) is None:
            continue
        rounds = ((r.get("spec") or {}).get("fl") or {}).get("rounds") or (r.get("fl") or {}).get("rounds")
        if rounds:
            groups.setdefault(key(r), []).append((r, float(rounds)))
    per, basis, ran = {}, {}, {}
    for k, rs in groups.items():
        rounds = sorted({n for _, n in rs})
        if len(rounds) > 1:
            fail("key", f"a grouping whose every group ran one number of rounds (group {k!r} ran {rounds}); "
                 "add the rounds to the key", k)
        est = cost.measured([r for r, _ in rs])
        per[k], basis[k], ran[k] = est.seconds / rounds[0], est.basis, int(rounds[0])
    out = pd.Series(per, dtype=float).sort_index()
    out.attrs["basis"], out.attrs["rounds"] = basis, ran
    return out


def design_cost(per_round: pd.Series, methods, blocks: int, seeds: int, rounds: int, *,
                scale: float = 1.0) -> dict:
    """CPU-hours of a design: ``methods`` × ``blocks`` × ``seeds`` runs of ``rounds`` rounds, each
    method at its measured CPU seconds a round (``per_round``, :func:`cost_per_run`) × ``scale``
    (e.g. a data-size ratio). A method without a measured cost raises (no guess)."""
    check_int(blocks, "blocks", 1)
    check_int(seeds, "seeds", 1)
    check_int(rounds, "rounds", 1)
    missing = [m for m in methods if m not in per_round.index]
    if missing:
        fail("methods", f"methods with a measured cost among {sorted(per_round.index)}", missing)
    per_block_seed = float(sum(per_round[m] for m in methods)) * rounds * scale
    runs = len(methods) * blocks * seeds
    return {"runs": runs, "cpu_hours": per_block_seed * blocks * seeds / 3600.0,
            "cpu_seconds_per_block_and_seed": per_block_seed}
