"""What a ranking of notebook 11 can support (issue 58): when training stopped, which metric ranks,
how many blocks it rests on. Pure functions over per-run records and score tables; the study
modules (:mod:`workbook.cross_paper`) build the tables, this module measures them.

**Convergence** (:func:`plateau_round`). The rule, with its two parameters explicit
(:data:`PLATEAU_WINDOW`, :data:`PLATEAU_TOLERANCE_PP`): a run's accuracy has *plateaued at round r*
when, over the evaluated rounds r, …, r + w (w = ``window`` rounds, at least two evaluations in it,
r + w no later than the last evaluated round), it moves by less than ``tolerance`` percentage
points (max − min < tolerance). The plateau round is the first such r. A run whose history ends
before any window holds is **not converged by R** (its last round): no plateau is invented for it.
With R = 10 and w = 5 only r ≤ 5 can qualify.

**Rankings** (:func:`mean_ranks`): blocks are the columns of a methods × blocks score table (higher
is better), each block ranked 1 = best with ties sharing their mean rank (Friedman's ranks, as
autorank computes them); a method without a score on every block is left out. Rankings are
compared by Kendall's τ-b (:func:`kendall_tau`) on the mean ranks of the methods both rank.
:func:`leave_one_block_out` recomputes the mean ranks without each block in turn: how much one
partition decides the order.

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

__all__ = ["PLATEAU_WINDOW", "PLATEAU_TOLERANCE_PP", "PLATEAU_RULE", "plateau_round", "history_of", "score_at_round",
           "convergence_table", "mean_ranks", "kendall_tau", "leave_one_block_out", "nemenyi_q", "nemenyi_cd",
           "RankingPower", "ranking_power", "ties_per_block", "cost_per_run", "design_cost", "client_blocks",
           "score_table_records", "choose_rounds"]

PLATEAU_WINDOW = 5
"""w: the rounds over which a plateau is judged."""
PLATEAU_TOLERANCE_PP = 0.5
"""The percentage points within which accuracy must stay over w rounds."""
PLATEAU_RULE = (f"plateau round: the first round r after which the accuracy moves by less than "
                f"{PLATEAU_TOLERANCE_PP:g} pp (max − min) over the evaluated rounds r … r + {PLATEAU_WINDOW} "
                f"(at least two evaluations in the window, r + {PLATEAU_WINDOW} ≤ the last evaluated round); "
                "a run without such an r is 'not converged by R'")


def plateau_round(rounds, accuracy_pp, *, window: int = PLATEAU_WINDOW,
                  tolerance: float = PLATEAU_TOLERANCE_PP) -> int | None:
    """The first round r whose window r … r + ``window`` holds the accuracy within ``tolerance`` pp.

    Parameters
    ----------
    rounds : (T,) increasing evaluated round numbers (e.g. 1 … R, or 5, 10, … with eval_every 5)
    accuracy_pp : (T,) accuracy at those rounds, in percentage points
    window, tolerance : the rule's parameters (module docstring)

    Returns
    -------
    r, or None when no window of the history qualifies ("not converged by R").
    """
    check_int(window, "window", 1)
    check_number(tolerance, "tolerance", 0, low_open=True)
    r = np.asarray(rounds, dtype=np.float64)
    a = np.asarray(accuracy_pp, dtype=np.float64)
    if r.ndim != 1 or a.shape != r.shape:
        fail("rounds, accuracy_pp", "two 1-d arrays of the same length", (r.shape, a.shape))
    if r.size > 1 and np.any(np.diff(r) <= 0):
        fail("rounds", "strictly increasing round numbers", r.tolist())
    for i, start in enumerate(r):
        end = start + window
        if end > r[-1]:
            break
        inside = (r >= start) & (r <= end)
        if inside.sum() >= 2 and a[inside].max() - a[inside].min() < tolerance:
            return int(start)
    return None


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
                      window: int = PLATEAU_WINDOW, tolerance: float = PLATEAU_TOLERANCE_PP) -> pd.DataFrame:
    """One row per finished run (of ``methods``, None: all): ``block``, ``method``, ``seed``, ``R``
    (last evaluated round), ``evaluations`` (how many rounds were evaluated), ``plateau`` (the round
    of :func:`plateau_round`, NaN if none), ``reading`` ("plateau at r" or "not converged by R"),
    ``last_step_pp`` (|accuracy at the last evaluated round − the one before|, pp)."""
    rows = []
    for rec in _finished(records):
        if methods is not None and rec["spec"]["method"] not in methods:
            continue
        r, a = history_of(rec, value)
        if r.size == 0:
            continue
        p = plateau_round(r, a, window=window, tolerance=tolerance)
        sparse = r.size < 2 or np.all(np.diff(r) > window)  # no window can hold two evaluations
        reading = (f"plateau at {p}" if p is not None
                   else f"one evaluation only (round {int(r[-1])}): no history" if r.size == 1
                   else f"history too sparse for w = {window} (evaluated every {int(np.diff(r).min())} rounds)"
                   if sparse and r.size > 1 else f"not converged by R = {int(r[-1])}")
        rows.append({"block": block_of(rec), "method": rec["spec"]["method"], "seed": rec["spec"]["seed"],
                     "R": int(r[-1]), "evaluations": int(r.size), "plateau": np.nan if p is None else p,
                     "reading": reading,
                     "last_step_pp": float(abs(a[-1] - a[-2])) if a.size > 1 else np.nan})
    return pd.DataFrame(rows, columns=["block", "method", "seed", "R", "evaluations", "plateau", "reading",
                                       "last_step_pp"])


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
    ``cpu_seconds``; records without it: the labelled fallback of wall seconds × host threads),
    divided by the group's rounds (``spec.fl.rounds``, else the record's ``fl.rounds``; a group of
    mixed rounds is a ValueError: add the rounds to ``key``). Records without rounds or any time
    are left out. The Series' ``attrs['basis']`` maps each key to the
    estimate's basis (:class:`fedlib.cost.Estimate`), so a fallback is never silent."""
    from fedlib import cost

    groups: dict = {}
    for r in records:
        if r.get("status") != "ok" or cost.run_cost(r) is None:
            continue
        rounds = ((r.get("spec") or {}).get("fl") or {}).get("rounds") or (r.get("fl") or {}).get("rounds")
        if rounds:
            groups.setdefault(key(r), []).append((r, float(rounds)))
    per, basis = {}, {}
    for k, rs in groups.items():
        rounds = sorted({n for _, n in rs})
        if len(rounds) > 1:
            fail("key", f"a grouping whose every group ran one number of rounds (group {k!r} ran {rounds}); "
                 "add the rounds to the key", k)
        est = cost.measured([r for r, _ in rs])
        per[k], basis[k] = est.seconds / rounds[0], est.basis
    out = pd.Series(per, dtype=float).sort_index()
    out.attrs["basis"] = basis
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
