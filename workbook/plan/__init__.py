"""What to run next: the runs that would change the report's answer, by value per CPU-hour.

``python -m workbook.plan`` prints the plan; ``python -m workbook.plan --run --budget SECONDS
[--workers N] [--device cuda]`` computes it in that order. (The issue asked for ``python -m
fedlib.grid plan``; the plan reads the report, :mod:`workbook.report`, and :mod:`fedlib` never
imports :mod:`workbook`, so the command lives here.)

**What a run is worth** (:func:`row_value`, :func:`study_values`), in expected rows decided, by
the report's own verdict rule (:func:`workbook.verdicts.verdict`):

* a row **not run** (the data available): its first seed is worth **1** — one run turns "not
  run" into a verdict with its interval, which is what the row lacks most, even where that one
  seed leaves it "undecided" (P(decided at n = 1) would need a mean we do not have);
* an **undecided** row: its next seed is worth **P_k / k** for the k ≤ :data:`LOOKAHEAD` more seeds
  that decide most rows per seed (:func:`best_bundle`): P_k = P(decided after k more seeds), by
  simulation from the seed noise model — per draw (:data:`DRAWS` of them, a fixed generator,
  :data:`SEED`: the plan is reproducible) the row's true mean μ ~ Normal(our mean, s²/n) and the k new
  values ~ Normal(μ, s), s the row's own sample sd (n ≥ 2) or the seed sd the report pooled for it
  (n = 1: :func:`workbook.verdicts.seed_sd_pools`, the report's rule and scopes) — and the verdict recomputed with
  them appended; P_k is the share of draws that read *reproduced* or *differs*. Looking k seeds
  ahead matters under a verdict rule with a margin: a row at n = 3 whose interval straddles a bound
  is rarely decided by a 4th seed, often by a 6th. A one-seed row with no pooled sd is worth
  :data:`UNKNOWN_P` (nothing to draw from); a row no :data:`LOOKAHEAD` more seeds would likely
  decide (value < :data:`MIN_VALUE`) is not planned, counted by why;
* a row a paper's headline **claim** reads (:func:`claim_rows`: every reading of a cell a claim
  reads) counts :data:`CLAIM_WEIGHT` rows: its verdict and the claim's comparison, which the
  report's first screen shows;
* a cell whose partition was **infeasible** for some seeds (a Dirichlet draw at small α that gives
  some client too few samples) has each value scaled by the share of its next seeds expected to be
  feasible, :func:`feasible_share` (1 where another method's record already drew the run's seed:
  :func:`seed_feasible_share`);
* a seed at which a run the row reads **failed** (diverged: CAFA's authors' FedAvg at SGD lr 0.1)
  never enters the row (the report reads the seeds every run it compares finished), so the plan
  skips it for the row, and values the runs of the next seed times the share of each one's seeds
  expected to finish, :func:`finish_share` (Laplace's rule over its recorded outcomes);
* a **decided** row (reproduced, differs): never planned — one more seed would only confirm it
  at the same level; *infeasible* rows and rows whose data have no offline source
  (``no_offline_data``) neither; nor a row no run of its command answers (counted by
  :func:`plan_notes`);
* a **study block** (notebook 11's cross-paper grid and the designs of :data:`PLANNED_DESIGNS`,
  notebook 12's beyond-label grid, partitioned by partition: one block each): each missing run of
  a block is worth 1 / (runs missing in that block) of "one block completed". ``--only FOLDER``
  keeps one folder's runs (a core given to the pre-registered design while the other follows the
  plan's head).

A row's seed that needs k runs (a reading over seeds every method of its table finished,
``shared_with``) gives each of them value / k. One run that serves several rows (or a row and a
block) is planned once, its values summed, the rows it decides listed together.

**Order**: value / estimated CPU-hours, descending, ties by cost (cheaper first); runs that no
comparable record prices (:func:`fedlib.cost.estimate` returns None) come after every priced
one, by value. Each run's cost is the one estimator's (:func:`fedlib.cost.estimate` over
:func:`fedlib.grid.timing_records` of its folder and the records root, as the report prices its
"not run" lists), in CPU-seconds of a :data:`fedlib.cost.REFERENCE_CAPABILITY` host
(:func:`fedlib.cost.on_reference_host`); ``--device cuda`` prices GPU-seconds.

**Running it** (:func:`run_plan`): the plan's runs are handed to :func:`fedlib.grid.run_grid`
in plan order (a window of ``4 × workers`` runs at a time, grouped by records folder), each with
what is left of the budget: a run starts only if it is estimated to end before the budget does
(on this host: the records of slower or faster hosts scaled by their measured ratio, :func:`fedlib.cost.on_host`),
a resumable method's run stops at a round boundary with a checkpoint; runs with no estimate are
never started (the budget could not protect them). One torch thread a process
(``torch.set_num_threads(1)``; ``--workers N`` computes N runs at once, each in its own process).
Every background computation takes its work from here: two ``python -m workbook.plan --run
--budget S`` processes on one checkout share it through the grid's claims
(:mod:`fedlib.claims`: a run is claimed with ``O_EXCL`` before it is computed, so each run is
computed once); each skips the runs another live process holds when it builds a window, so
neither waits on the other's runs.

Pure functions over the report's frame (:func:`plan`), I/O at the edges (:func:`run_plan`, and the
command, ``workbook/plan/__main__.py``, which imports the report and hands it in: the report
imports the plan, so the plan imports no report).
"""
from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from fedlib import cost, lookup
from fedlib.validation import check_choice, check_int, check_number, fail
from .. import verdicts as V
from ..matching import RECORDS, _load, anchor_slug, matches, partition_statuses
from ..report_cells import GRID_VARIANTS, PAPERS, RECORD_COMMANDS, cells, grid_tables, group_of, record_command

__all__ = ["DRAWS", "SEED", "MAX_SEEDS", "UNKNOWN_P", "LOOKAHEAD", "MIN_VALUE", "CLAIM_WEIGHT", "claim_rows", "p_decided", "best_bundle", "row_value", "feasible_share", "finish_share", "seed_feasible_share", "study_values", "plan", "plan_notes", "run_line",
           "plan_markdown", "head_markdown", "run_plan"]

DRAWS = 2000
"""Draws of the next seed's value per undecided row (:func:`p_decided`)."""
SEED = 67
"""The simulation's generator seed: the plan is the same on every call."""
MAX_SEEDS = 12
"""The seeds 0 … MAX_SEEDS − 1 among which a row's next seed is looked for."""
UNKNOWN_P = 0.5
"""The value of a one-seed undecided row's next seed where no comparable row gives a pooled sd."""
LOOKAHEAD = 6
"""The most seeds ahead a row's value looks (:func:`best_bundle`)."""
CLAIM_WEIGHT = 2.0
"""A row a paper's headline claim reads (:data:`workbook.paper_claims.CLAIMS`) counts this many rows:
deciding it decides its verdict and feeds the claim's comparison, the report's first screen."""
MIN_VALUE = 0.01
"""A run worth less (expected rows decided) is not planned: no affordable number of seeds decides its row."""
COMMAND = "python -m workbook.plan"
#: The designs the plan schedules as study blocks beside notebooks 11 and 12's grids (issue 70: the
#: pre-registered comparison and the small-client seeds are computed through the plan): command
#: group -> (notebook, params file, records folder under the records root). Until a run of its R
#: is recorded, a design's run is priced per round from records at another R (:func:`_per_round_estimate`).
PLANNED_DESIGNS = {
    "cross_paper_preregistered": ("11_cross_paper", "params/designs/11_cross_paper_preregistered.yaml",
                                  "cross_paper_preregistered"),
    "beyond_label:small_seeds": ("12_beyond_label_skew", "params/designs/12_beyond_label_skew_small_clients_seeds.yaml", "beyond_label"),
}
_GRID_OF = {"11_cross_paper": "cross-paper", "12_beyond_label_skew": "beyond-label"}


# ----------------------------------------------------------------------------- values (pure)
def _decided(paper_mean, paper_sd, paper_n, values, tolerance, alpha=V.ALPHA) -> np.ndarray:
    """For each row of ``values`` (draws × seeds, n ≥ 2 each), whether :func:`workbook.verdicts.verdict`
    reads it reproduced or differs: its own sample sd, Welch's se and df (:func:`workbook.verdicts.delta_se`,
    here over arrays), the margin (:func:`workbook.verdicts.margin_of`) and the interval's test, vectorised
    over the draws (``tests/test_plan.py`` checks it against the verdict itself)."""
    values = np.asarray(values, dtype=float)
    n = values.shape[1]
    p_sd = 0.0 if paper_sd is None or not np.isfinite(paper_sd) else float(paper_sd)
    margin = V.margin_of(tolerance, paper_sd)
    delta = values.mean(axis=1) - float(paper_mean)
    a = p_sd ** 2 / paper_n if p_sd > 0 else 0.0
    b = values.var(axis=1, ddof=1) / n
    se = np.sqrt(a + b)
    denominator = (a * a / (paper_n - 1) if a and paper_n > 1 else 0.0) + b * b / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denominator > 0, (a + b) ** 2 / np.where(denominator > 0, denominator, 1.0), np.inf)
        half = np.where(se > 0, V.t_quantile(1 - alpha, df) * se, 0.0)
    low, high = delta - half, delta + half
    return ((-margin < low) & (high < margin)) | (low > margin) | (high < -margin)


def p_decided(paper_mean: float, paper_sd: float | None, paper_n: int, values, tolerance: float,
              pooled_sd: float | None = None, draws: int = DRAWS, seed: int = SEED, extra: int = 1) -> float:
    """P(the row is decided after ``extra`` more seeds), by simulation from the seed noise model: per
    draw, the row's true mean μ ~ Normal(mean of ``values``, s²/n) (today's mean is itself an estimate),
    then the ``extra`` new values ~ Normal(μ, s) — s the values' sample sd (two or more), else
    ``pooled_sd`` — and the verdict recomputed with them appended; the share of ``draws`` decided."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if not len(v):
        fail("values", "at least one finite seed value", values)
    check_int(extra, "extra", 1)
    s = float(np.std(v, ddof=1)) if len(v) >= 2 else pooled_sd
    if s is None or not np.isfinite(s) or s < 0:
        fail("pooled_sd", "the pooled seed sd (≥ 0) of a one-seed row", pooled_sd)
    rng = np.random.default_rng(seed)
    mu = rng.normal(v.mean(), s / np.sqrt(len(v)), draws)
    x = rng.normal(mu[:, None], s, (draws, extra))
    both = np.column_stack([np.broadcast_to(v, (draws, len(v))), x])
    return float(np.mean(_decided(paper_mean, paper_sd, paper_n, both, tolerance)))


def best_bundle(paper_mean: float, paper_sd: float | None, paper_n: int, values, tolerance: float,
                pooled_sd: float | None = None, lookahead: int = LOOKAHEAD) -> tuple[int, float]:
    """(k, P_k): the number k ≤ ``lookahead`` of more seeds with the most rows decided per seed,
    P_k / k, P_k = :func:`p_decided` after k more. A row one seed cannot decide but three would is
    worth P_3 / 3 a seed, not 0 (a one-step look-ahead would never plan it); each of the k seeds is
    planned one at a time, the next first, and the row is valued again when it lands."""
    best = (1, p_decided(paper_mean, paper_sd, paper_n, values, tolerance, pooled_sd))
    for k in range(2, lookahead + 1):
        pk = p_decided(paper_mean, paper_sd, paper_n, values, tolerance, pooled_sd, extra=k)
        if pk / k > best[1] / best[0]:
            best = (k, pk)
    return best


def _reading(row) -> SimpleNamespace:
    """What :func:`workbook.verdicts.pool_keys` reads of a row of the frame."""
    return SimpleNamespace(records=row["records"], metric=row["metric"], name=row["reading"], match=row["match"])


def _paper_n(row) -> int:
    n = row.get("paper_n")
    return 1 if n is None or (isinstance(n, float) and not np.isfinite(n)) else int(n)


def row_value(row, pools: dict) -> tuple[float | None, str, float]:
    """(value of the row's next run, what it is, P) for one row (a dict) of :func:`workbook.report.frame`,
    ``pools`` :func:`workbook.verdicts.seed_sd_pools` over the frame: (1, "first
    seed", NaN) for a row not run; for an undecided one (P_k / k, "next seed" or "next of k seeds", P_k)
    by :func:`best_bundle`; (None, why, NaN) for a row never planned — decided, infeasible, no offline
    data, or no affordable number of seeds likely to decide it (value < :data:`MIN_VALUE`)."""
    if row.get("reason") == "no_offline_data":
        return None, "no offline data", np.nan
    verdict = row["verdict"]
    if verdict == "not run":
        return 1.0, "first seed", np.nan
    if verdict != "undecided":
        return None, "decided" if verdict in ("reproduced", "differs") else verdict, np.nan
    values = list(row["values"])
    pooled = None
    if len(values) == 1:
        pool = next((pools[k] for k in V.pool_keys(_reading(row)) if k in pools), None)
        if pool is None:
            return UNKNOWN_P, "next seed (no pooled sd: value assumed)", np.nan
        pooled = pool[0]
    k, pk = best_bundle(row["paper_value"], row["spread"], _paper_n(row), values, row["tolerance"], pooled)
    if pk / k < MIN_VALUE:
        return None, f"no {LOOKAHEAD} more seeds likely decide it", np.nan
    return pk / k, "next seed" if k == 1 else f"next of {k} seeds", pk


@lru_cache(maxsize=1)
def claim_rows() -> frozenset:
    """The ids of the report rows of the cells the papers' headline claims read (either side of a
    comparison), in every reading of the cell: a claim reads one reading of its method's cell (the
    paper's text), and the cell's other reading (what the authors' code computes, which produced the
    paper's numbers) says whether the claim's outcome depends on the reading."""
    from .. import paper_claims as C

    cells = [C._owner(r) for c in C.CLAIMS for comp in c.comparisons for r in (comp.a, comp.b) if r is not None]
    return frozenset(i for cell in cells if cell is not None for r in cell.readings for i in [C._row_id(r)] if i)


def feasible_share(statuses) -> float:
    """The expected share of a cell's next seeds whose partition can be drawn: (ok + 1) / (tried + 2)
    over the statuses of its seeds tried so far (Laplace's rule; 1 where none was infeasible) —
    a Dirichlet partition at small α may have no draw giving every client enough samples, by seed."""
    statuses = list(statuses)
    bad = sum(st == "infeasible" for st in statuses)
    return 1.0 if not bad else (len(statuses) - bad + 1) / (len(statuses) + 2)


def finish_share(statuses) -> float:
    """The expected share of a run's next seeds that finish (``ok``), given the statuses of the same
    run at the seeds tried so far ("ok" or "failed": a run that diverged): (ok + 1) / (tried + 2)
    (Laplace's rule, as :func:`feasible_share`); 1 where none failed — CAFA's authors' FedAvg (SGD,
    lr 0.1) diverges at some seeds, and a seed where a run a row compares failed never enters it."""
    statuses = [st for st in statuses if st in ("ok", "failed")]
    bad = sum(st == "failed" for st in statuses)
    return 1.0 if not bad else (len(statuses) - bad + 1) / (len(statuses) + 2)


def seed_feasible_share(by_seed: dict, seed) -> float:
    """The chance that ``seed``'s partition can be drawn, given ``by_seed`` (seed -> "ok" or
    "infeasible", :func:`_statuses_by_partition`'s cell): 1 where a record (of any method) already
    drew it, 0 where one found it infeasible, else :func:`feasible_share` over the seeds tried."""
    st = by_seed.get(seed)
    return 1.0 if st == "ok" else 0.0 if st == "infeasible" else feasible_share(by_seed.values())


def study_values(missing_by_block: dict) -> list[tuple]:
    """``(block, spec, value)`` for each missing run of each study block (``block -> specs``): 1 / (runs
    missing in the block)."""
    return [(block, s, 1.0 / len(specs)) for block, specs in missing_by_block.items() for s in specs]


# ----------------------------------------------------------------------------- runs and commands
def _params_path(key: str) -> tuple[str, str]:
    """(the shell prefix writing the group's params file, or "", the params file) of command group ``key``."""
    if key in GRID_VARIANTS:
        _, write, path = GRID_VARIANTS[key]
        return write, path
    return "", grid_tables()[key.split(":")[0]].params


def _with_seeds(key: str, seeds) -> tuple[str, str]:
    """(prefix, params option) for a grid command of group ``key`` over ``seeds`` (None: the params
    file's own): a ``sed`` rewriting the params file's ``seeds:`` line where they differ."""
    write, path = _params_path(key)
    if seeds is None:
        return (f"{write} && " if write else ""), (f" --params {path}" if write else "")
    script = f"'s/^seeds: .*/seeds: [{', '.join(map(str, seeds))}]/'"
    if write:  # the variant's own sed: one more script before its others
        rest = write[4:]
        write = f"sed -e {script} " + (rest if rest.startswith("-e ") else f"-e {rest}")
        return f"{write} && ", f" --params {path}"
    table = key.split(":")[0].replace("/", "_")
    out = f"/tmp/plan_{table}_seeds.yaml"
    return f"sed {script} {path} > {out} && ", f" --params {out}"


def run_command(key: str, spec, own_seeds: tuple) -> str:
    """The command that computes ``spec`` (of command group ``key``, :func:`workbook.report_cells.group_of`):
    the table's grid command with each of its filters at ``spec``'s value (the params file's
    ``seeds:`` rewritten by a ``sed`` where the seed is not among ``own_seeds``), or the folder's
    script (:data:`workbook.report_cells.RECORD_COMMANDS`) for that method, setting and seed."""
    from fedlib.grid_cli import _value

    folder = key.split(":")[0]
    t = grid_tables().get(folder)
    if t is None:
        if key not in RECORD_COMMANDS:
            return ""
        return record_command(key, {"settings": [f"{spec.protocol}:{float(spec.level):g}"], "methods": [spec.method],
                                    "seeds": [str(spec.seed)]})
    prefix, params = _with_seeds(key, None if spec.seed in own_seeds else [spec.seed])
    flags = " ".join(f"--{f.replace('_', '-')} {_fmt(_value(spec, f))}" for f in t.filters)
    return f"{prefix}python -m fedlib.grid {t.name}{params} --out {t.records} {flags}"


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@lru_cache(maxsize=None)
def _group(key: str, root: str, R) -> tuple:
    """(candidate specs over seeds 0 … MAX_SEEDS − 1, keys of those without a record in ``root``, the
    params file's seeds, method -> [(spec, its dict)]) of command group ``key``."""
    from fedlib import __version__
    from fedlib.records import key_of

    specs, own, by_method = _group_specs(key, R)
    done = _recorded(str(Path(root) / key.split(":")[0]))
    # each spec's dict (RunSpec.to_dict) once: its record key (RunSpec.key) and identity (_rkey) read it
    return specs, frozenset(key_of(d, __version__) for pairs in by_method.values() for _, d in pairs
                            if _rkey(d) not in done), own, by_method


@lru_cache(maxsize=None)
def _group_specs(key: str, R) -> tuple:
    """(candidate specs over seeds 0 … MAX_SEEDS − 1, the params file's seeds, method -> [(spec, its
    dict)]) of command group ``key``: its grid (or script) built by a command of the form the plan
    prints (:func:`workbook.report.command_specs`), once per process."""
    folder = key.split(":")[0]
    seeds = list(range(MAX_SEEDS))
    t = grid_tables().get(folder)
    if t is None:
        if key not in RECORD_COMMANDS:
            return (), (), {}
        from .. import like_for_like  # the script's own methods: every one of the table

        command = record_command(key, {"settings": _script_settings(), "methods": list(like_for_like.METHODS),
                                       "seeds": list(map(str, seeds))})
        own = tuple(seeds)
    else:
        from fedlib.grid_cli import load_params

        own = tuple(load_params(t.name)["seeds"])
        prefix, params = _with_seeds(key, seeds)
        command = f"{prefix}python -m fedlib.grid {t.name}{params} --out {t.records}"
    specs, _ = R.command_specs(command)
    by_method: dict = {}
    for s in specs:
        by_method.setdefault(s.method, []).append((s, s.to_dict()))
    return tuple(specs), own, by_method


def _rkey(spec, seed: bool = True) -> str:
    """A run's identity as :func:`fedlib.lookup.find` matches records: its spec fields (with
    ``seed=False``, all but the seed: the same run at every seed)."""
    import json

    fields = dict(lookup.spec_fields(spec))
    if not seed:
        fields.pop("seed", None)
    return json.dumps(fields, sort_keys=True, default=str)


@lru_cache(maxsize=None)
def _recorded(folder: str) -> frozenset:
    """The identities (:func:`_rkey`) of the finished records in ``folder``: those the report read
    (:func:`workbook.matching._load`, cached while the report's frame is built)."""
    from fedlib.records import FINISHED, RECORD_VERSION

    return frozenset(_rkey(r["spec"]) for r in _load(folder)
                     if r.get("status") in FINISHED and r.get("record_version", RECORD_VERSION) == RECORD_VERSION)


@lru_cache(maxsize=None)
def _statuses_by_partition(folder: str) -> dict:
    """:func:`workbook.matching.partition_statuses` of ``folder``, once per process."""
    return partition_statuses(folder)


def _seed_statuses(folder: str, spec) -> dict:
    """seed -> "ok" / "infeasible" for ``spec``'s partition cell in ``folder``."""
    return _statuses_by_partition(folder).get((spec.dataset, spec.protocol, float(spec.level), int(spec.n_clients)), {})


def _script_settings() -> list[str]:
    from .. import like_for_like

    return [f"{p}:{float(level):g}" for p, levels in like_for_like.SETTINGS.items() for level in levels]


@lru_cache(maxsize=None)
def _timings(folder: str, root: str) -> tuple:
    from fedlib.grid import timing_records

    return tuple(cost.on_reference_host(timing_records(Path(root) / folder, Path(root))))


def _row_runs(row, reading, root: str, R) -> list:
    """The runs of the row's next seed: the smallest seed at which a run the row reads (its own
    match, and each of ``shared_with``) has no record and whose partition is not recorded
    infeasible (:func:`_known_infeasible`), those runs (at the level that answered a "most
    heterogeneous" row, else the smallest)."""
    key = group_of(row["records"], row["match"])
    _, todo, _, by_method = _group(key, root, R)
    wanted = [row["match"], *reading.shared_with]
    if reading.metric in ("ad_cl", "sdad_cl"):  # AD and SDAD read the CL run of the same seed too
        wanted.append(tuple((k, "cl" if k == "method" else v) for k, v in row["match"] if k != "reproduction"))
    mine = []
    for i, m in enumerate(wanted):
        method = dict(m).get("method")
        pairs = by_method.get(method, []) if method is not None else [x for v in by_method.values() for x in v]
        mine += [s for s, d in pairs if matches(d, m) and s not in mine]
        if i == 0 and not mine:  # no run of the command is the row's own (e.g. a derived reading's)
            return []
    if any(k == "level" and v == "most_heterogeneous" for k, v in row["match"]):
        from ..matching import matched_records

        ran = [float(r["spec"]["level"]) for r in matched_records(reading, Path(root))[1] if r.get("status") == "ok"]
        level = min(ran) if ran else min((float(s.level) for s in mine), default=None)
        mine = [s for s in mine if float(s.level) == float(level)]
    folder = str(Path(root) / row["records"])
    dead = _failed_seeds(folder, tuple(wanted))
    for seed in sorted({s.seed for s in mine} - dead):
        need = [s for s in mine if s.seed == seed and s.key() in todo]
        if need and not any(_known_infeasible(folder, s) for s in need):
            return need
    return []


def _failed_seeds(folder: str, wanted: tuple) -> set:
    """The seeds at which a run answering one of ``wanted`` (the row's own match and those it is
    read with, ``shared_with``) has a ``failed`` record in ``folder``: the row never reads that seed
    (:func:`workbook.report.row_values` reads only the seeds every one of them finished), so no other
    run at it can decide the row."""
    return {r["spec"].get("seed", 0) for r in _load(folder)
            if r.get("status") == "failed" and any(matches(r.get("spec", {}), m) for m in wanted)}


def _statuses_less_seed(folder: str, spec) -> list:
    """The statuses of ``folder``'s records of ``spec``'s run at every seed (its fields but the seed)."""
    return _outcomes(folder).get(_rkey(spec, seed=False), [])


@lru_cache(maxsize=None)
def _outcomes(folder: str) -> dict:
    """A run's identity less its seed -> the statuses of its records in ``folder``, once per process."""
    out: dict = {}
    for r in _load(folder):
        out.setdefault(_rkey(r["spec"], seed=False), []).append(r.get("status"))
    return out


def _known_infeasible(folder: str, spec) -> bool:
    """Whether ``spec``'s partition (data set, protocol, level, K, seed: the method does not enter
    it) is recorded infeasible in ``folder``: its run would only record that again, so the plan
    skips to the next seed."""
    cell = (spec.dataset, spec.protocol, float(spec.level), int(spec.n_clients))
    return _statuses_by_partition(folder).get(cell, {}).get(spec.seed) == "infeasible"


def _entries(df: pd.DataFrame, root: str, studies: bool, R) -> tuple[list[dict], dict]:
    """The plan's runs before dedupe: dicts of folder, key (command group), spec, value, decides,
    basis; and the rows not planned counted by why."""
    readings = {anchor_slug(PAPERS[c.paper], c.table, c.row, c.column, rd.name): rd for c in cells() for rd in c.readings}
    pools = V.seed_sd_pools((_reading(r), list(r["values"])) for r in df.to_dict("records"))
    claimed = claim_rows()
    out, why = [], {}
    for row in df.to_dict("records"):
        value, basis, p_k = row_value(row, pools)
        if value is None:
            why[basis] = why.get(basis, 0) + 1
            continue
        need = _row_runs(row, readings[row["id"]], root, R)
        if not need:
            key = group_of(row["records"], row["match"])
            what = "no command computes its folder" if not _group(key, root, R)[0] else "no run of its command answers it"
            why[what] = why.get(what, 0) + 1
            continue
        folder = str(Path(root) / row["records"])
        share = min(seed_feasible_share(_seed_statuses(folder, s), s.seed) for s in need)
        finish = float(np.prod([finish_share(_statuses_less_seed(folder, s)) for s in need]))
        if row["id"] in claimed:
            value, basis = CLAIM_WEIGHT * value, f"{basis}, read by a claim"
        if share != 1:
            basis = f"{basis}, {share:.2f} of seeds feasible"
        if finish != 1:
            basis = f"{basis}, {finish:.2f} expected to finish"
        for s in need:
            out.append({"folder": row["records"], "group": group_of(row["records"], row["match"]), "spec": s,
                        "value": share * finish * value / len(need), "p": p_k, "decides": row["id"], "basis": basis})
    if studies:
        for group, folder, block_of, missing in _study_missing(root, R):
            by_block: dict = {}
            for s in missing:
                by_block.setdefault(f"{group} block {block_of(s)}", []).append(s)
            for block, s, v in study_values(by_block):
                out.append({"folder": folder, "group": group, "spec": s, "value": v, "p": np.nan, "decides": block,
                            "basis": f"1/{len(by_block[block])} of a block"})
    return out, why


def _study_missing(root: str, R) -> list[tuple]:
    """(command group, records folder, block of a spec, the specs without a record) of notebooks 11
    and 12's grids and of :data:`PLANNED_DESIGNS`."""
    from fedlib import notebook_params
    from .. import beyond_label as B, cross_paper as X

    p11 = notebook_params.load(R.CROSS_PAPER_PARAMS, "11_cross_paper")
    p12 = notebook_params.load(R.BEYOND_LABEL_PARAMS, "12_beyond_label_skew")
    cross = X.notebook_grid(**{k: p11[k] for k in X.GRID_PARAMS})["cross"]
    beyond = B.notebook_grid(**{k: p12[k] for k in B.GRID_PARAMS})["study"]
    def missing(specs, folder):  # as present_records finds them (by spec fields), from the records the report read
        done = _recorded(str(Path(root) / folder))
        return [s for s in specs if _rkey(s) not in done]

    def cross_block(s):
        return X.partition_of(s.protocol, s.level)

    def beyond_block(s):
        return B.partition_of_spec(s.to_dict())
    block_of = {"11_cross_paper": cross_block, "12_beyond_label_skew": beyond_block}
    return [("cross_paper", "cross_paper", cross_block, missing(cross, "cross_paper")),
            ("beyond_label", "beyond_label", beyond_block, missing(beyond, "beyond_label")),
            *[(group, folder, block_of[nb], missing(_design_specs(group), folder))
              for group, (nb, _, folder) in PLANNED_DESIGNS.items()]]


def _design_specs(group: str) -> list:
    """The runs of the planned design ``group`` (:data:`PLANNED_DESIGNS`)."""
    from fedlib import notebook_params
    from fedlib.paths import ROOT
    from .. import beyond_label as B, cross_paper as X

    nb, params, _ = PLANNED_DESIGNS[group]
    p = notebook_params.load(ROOT / params, nb)
    if nb == "11_cross_paper":
        return X.notebook_grid(**{k: p[k] for k in X.GRID_PARAMS})["cross"]
    return B.notebook_grid(**{k: p[k] for k in B.GRID_PARAMS})["study"]


def _design_command(group: str, spec) -> str:
    """The command that computes ``spec``'s run of the planned design ``group`` (with the other runs
    of its protocol in that design: the grid filters by protocol, not level; each is computed once)."""
    nb, params, folder = PLANNED_DESIGNS[group]
    return (f"python -m fedlib.grid {_GRID_OF[nb]} --params {params} --out benchmarks/records/{folder} "
            f"--seeds {spec.seed} --methods {spec.method} --settings {spec.protocol}")


def _per_round_estimate(spec, root: str, device: str) -> float | None:
    """``spec``'s cost from the records of its data set, ``n_train`` and method at another number of
    rounds R₀ (the smallest that prices it, an R₀ with a record of its own method and K first — a
    cost probe of other K at a smaller R₀ does not price it): :func:`fedlib.cost.estimate` at R₀ × R /
    R₀ (linear in R; a run's fixed costs make it an upper bound for R > R₀). None when no R₀ prices it."""
    import dataclasses

    from fedlib.methods import FLConfig

    rounds = FLConfig.from_dict(spec.effective()[1]).rounds
    records = _timings(".", root)
    same = [r for r in records if (r.get("spec") or {}).get("dataset") == spec.dataset
            and (r.get("spec") or {}).get("n_train") == spec.n_train]
    own = {(r.get("fl") or {}).get("rounds") for r in same
           if (r.get("spec") or {}).get("method") == spec.method and (r.get("spec") or {}).get("n_clients") == spec.n_clients}
    others = sorted({(r.get("fl") or {}).get("rounds") for r in same} - {None, rounds}, key=lambda r0: (r0 not in own, r0))
    for r0 in others:
        est = cost.estimate(dataclasses.replace(spec, fl={**spec.fl, "rounds": r0}), records, device).seconds
        if est is not None:
            return float(est) * rounds / r0
    return None


def _describe(spec) -> str:
    reading = f" ({spec.reproduction})" if getattr(spec, "reproduction", "paper_text") != "paper_text" else ""
    from fedlib.partition import partition_name

    return (f"{spec.method}{reading} {spec.dataset} ({partition_name(spec.protocol, spec.level)}) "
            f"K={spec.n_clients} seed {spec.seed}")


def run_line(spec, record, elsewhere: bool, estimate, echo=print) -> None:
    """Echo what became of one run of :func:`run_plan` (``run_grid``'s ``on_run`` arguments), in
    :func:`fedlib.grid_cli`'s words: computed here (status, seconds, accuracy), recorded by another
    process, being computed by another process (never waited for: the plan's processes each take
    other runs), stopped by the budget at a round boundary (its checkpoint resumes it), or not
    started (its reserve, :func:`fedlib.grid.reserve_seconds`, would not end before the budget does). The run is named by
    :func:`_describe` and its record's file name (``<key>.json``), so two runs of one row that
    differ in a field the description leaves out (a params variant) stay apart."""
    from fedlib.checkpoint import checkpoint_path, saved_round
    from fedlib.grid import why_left
    from fedlib.grid_cli import _line

    def name(s):
        return f"{_describe(s)} [{s.key()}.json]"

    if record is not None:
        echo(f"{name(spec)}: {record['status']}, recorded by another process" if elsewhere else
             _line(name, spec, record))
    elif elsewhere:
        echo(f"{name(spec)}: another process is computing it (not waited for)")
    elif (resumes := saved_round(spec.key())) is not None:
        echo(f"{name(spec)}: stopped by the budget before round {resumes + 1}; its checkpoint "
             f"({checkpoint_path(spec.key())}) resumes it in a later call")
    else:
        echo(f"{name(spec)}: left for a later call ({why_left(estimate)})")


def plan(df: pd.DataFrame, root: Path | str = RECORDS, device: str = "cpu", studies: bool = True, *,
         report=None) -> pd.DataFrame:
    """The plan over the report's frame ``df`` (:func:`workbook.report.frame` of ``root``): one row
    per run, in order (the module's docstring): rank, decides (row ids or study blocks, "; "-joined),
    basis (first seed / next seed / share of a block), p (P(decided) of the row's next seed, NaN for a
    block), value (expected rows decided), run, folder (the records folder), group (its command group,
    or a :data:`PLANNED_DESIGNS` key), seconds (the estimate on ``device``, NaN
    where none), cum_hours, cum_value, command, spec; ``attrs['not_planned']``: the rows not planned,
    counted by why. ``report``: the module :mod:`workbook.report`, passed in (the report imports the
    plan, so the plan imports no report; its command specs and params files are the report's; the pooled
    seed sds are :func:`workbook.verdicts.seed_sd_pools`, the report's too)."""
    R = _report(report)
    check_choice(device, "device", ("cpu", "cuda"))
    root = str(Path(root))
    _recorded.cache_clear()  # the records may have changed since the last plan (not the grids)
    _group.cache_clear()
    _timings.cache_clear()
    _statuses_by_partition.cache_clear()
    entries, not_planned = _entries(df, root, studies, R)
    merged: dict = {}
    for e in entries:
        k = (e["folder"], e["spec"].key())
        if k in merged:
            m = merged[k]
            m["value"] += e["value"]
            m["decides"] += f"; {e['decides']}"
            m["basis"] = "; ".join(dict.fromkeys([*m["basis"].split("; "), e["basis"]]))  # each basis once
            m["p"] = e["p"] if np.isnan(m["p"]) else m["p"] if np.isnan(e["p"]) else max(m["p"], e["p"])
        else:
            merged[k] = dict(e)
    rows = []
    for e in merged.values():
        est = cost.estimate(e["spec"], _timings(e["folder"], root), device).seconds
        if est is None and e["group"] in PLANNED_DESIGNS:
            est = _per_round_estimate(e["spec"], root, device)
        rows.append({**e, "seconds": np.nan if est is None else float(est)})
    d = pd.DataFrame(rows, columns=["folder", "group", "spec", "value", "p", "decides", "basis", "seconds"])
    if d.empty:
        d = d.assign(rank=[], run=[], cum_hours=[], cum_value=[], command=[])
        d.attrs["not_planned"] = not_planned
        return d
    d["priced"] = d.seconds.notna()
    d["rate"] = d.value / (d.seconds.fillna(np.inf) / 3600.0)
    d = d.sort_values(["priced", "rate", "seconds", "value"], ascending=[False, False, True, False],
                      kind="stable").reset_index(drop=True)
    d["rank"] = np.arange(1, len(d) + 1)
    d["run"] = [_describe(s) for s in d.spec]
    d["cum_hours"] = d.seconds.fillna(0).cumsum() / 3600.0
    d["cum_value"] = d.value.cumsum()
    d.attrs["not_planned"] = not_planned
    d["command"] = [_design_command(g, s) if g in PLANNED_DESIGNS else
                    run_command(g, s, _group(g, root, R)[2] if g not in ("cross_paper", "beyond_label") else
                                _study_seeds(g)) for g, s in zip(d.group, d.spec)]
    return d[["rank", "decides", "basis", "p", "value", "run", "folder", "group", "seconds", "cum_hours", "cum_value",
              "command", "spec"]]


def _study_seeds(folder: str) -> tuple:
    from fedlib.grid_cli import load_params

    return tuple(load_params(grid_tables()[folder].name)["seeds"])


def plan_notes(p: pd.DataFrame) -> dict:
    """The rows the plan ``p`` does not schedule, counted by why (decided, infeasible, no offline
    data, no command, no run of its command answering it)."""
    return dict(p.attrs.get("not_planned", {}))


def _report(report):
    if report is None:
        fail("report", "the module workbook.report (the report imports the plan and passes itself; the plan "
                       "imports no report)", report)
    return report


# ----------------------------------------------------------------------------- rendering
def _hours(seconds: float) -> str:
    return "—" if not np.isfinite(seconds) else f"{seconds:.0f}"


def plan_markdown(p: pd.DataFrame, top: int | None = None) -> list[str]:
    """The plan (its first ``top`` runs) as lines: rank, what it decides, basis and value, the run, est.
    seconds, cumulative CPU-hours, cumulative expected rows decided, then its command."""
    out = []
    for r in (p if top is None else p.head(top)).itertuples():
        pv = "" if not np.isfinite(r.p) else f", P(decided by then) {r.p:.2f}"
        out += [f"{r.rank:>4}. {r.run} → {r.decides} [{r.basis}{pv}; value {r.value:.2f}] "
                f"est. {_hours(r.seconds)} s, cum. {r.cum_hours:.2f} CPU-h, cum. {r.cum_value:.2f} rows decided",
                f"      {r.command or '(no command is known for this folder)'}"]
    return out


def head_markdown(df: pd.DataFrame, hours: float = 10.0, root: Path | str = RECORDS, p: pd.DataFrame | None = None,
                  top: int = 15, *, report=None) -> list[str]:
    """The report's lines on the plan's head: "the next ``hours`` CPU-hours would decide these rows",
    the rows and blocks of the runs within that many cumulative CPU-hours (their first ``top`` runs
    listed), and the command that computes them in order."""
    p = plan(df, root, report=report) if p is None else p
    within = p[p.seconds.notna() & (p.cum_hours <= hours)]
    rows = list(dict.fromkeys(x for d in within.decides for x in d.split("; ")))
    out = ["## What to run next", "",
           f"The next {hours:g} CPU-hours would decide these rows: {len(within)} runs of the plan "
           f"(`{COMMAND}`: each run valued by the rows it would decide, per CPU-hour — a row not run counts 1 for "
           "its first seed; an undecided row P_k / k, P_k the probability that k more seeds decide it, simulated from "
           f"its seed sd, for the k ≤ {LOOKAHEAD} that decides most per seed; a row a headline claim reads counts "
           f"{CLAIM_WEIGHT:g}; a cell whose partition is infeasible for "
           "some seeds, that times the share expected feasible; a seed where a run the row compares failed "
           "(diverged) is skipped, and the next seed's runs count times the share of each expected to finish; "
           "decided rows are never planned; a study block's missing "
           "runs share 1), expected to decide "
           f"{within.value.sum():.1f} rows ({len(rows)} rows or blocks touched). "
           f"`{COMMAND} --run --budget {int(hours * 3600)}` computes them in this order, resumably. Seconds and "
           f"hours are an {cost.REFERENCE_CAPABILITY} host's CPU time: the records of other hosts count at their "
           "measured ratio (`fedlib.cost:on_reference_host`); a budget on a slower host reserves more.", ""]
    if within.empty:
        return out + ["No priced run fits (the plan is empty, or its first run is longer)."]
    out += ["| # | run | decides | basis | P(decided by then) | est. s | cum. CPU-h | cum. rows |",
            "|---|---|---|---|---|---|---|---|"]
    for r in within.head(top).itertuples():
        pv = "—" if not np.isfinite(r.p) else f"{r.p:.2f}"
        ids = r.decides.split("; ")
        decides = ids[0] + (f" (+ {len(ids) - 1} more)" if len(ids) > 1 else "")
        out.append(f"| {r.rank} | {r.run} | {decides} | {r.basis} | {pv} | {r.seconds:.0f} | {r.cum_hours:.2f} | {r.cum_value:.2f} |")
    if len(within) > top:
        out += ["", f"… and {len(within) - top} more runs (`{COMMAND}` lists them all, each with its command)."]
    return out


# ----------------------------------------------------------------------------- running it
def _held(folder: Path, spec) -> bool:
    """Whether another live process holds the claim on ``spec``'s run in ``folder`` (:mod:`fedlib.claims`)."""
    from fedlib import claims
    from fedlib.spec import record_path

    path = record_path(folder, spec)
    return claims.claim_path(path).exists() and not claims.is_stale(path)


def run_plan(p: pd.DataFrame, budget: float, root: Path | str = RECORDS, workers: int = 1, device: str = "cpu",
             echo=print, together: bool = False) -> dict:
    """Compute the priced runs of plan ``p`` in its order with :func:`fedlib.grid.run_grid`, a window of
    ``4 × workers`` runs at a time grouped by records folder, each call under what is left of ``budget``
    seconds (a run starts only if it is estimated to end in time; with ``$FEDLIB_WHOLE_RUNS`` 0, a
    resumable one starts on its first rounds and stops at a round boundary: ``python -m
    workbook.plan --run`` sets it to 1 unless it is set). Runs another live process holds are left to it, also those it claims while this
    process reaches them (never waited for: processes racing down one plan each take other runs). ``together``: the runs of a window that
    may train together (:func:`fedlib.together.group_specs`) do, in one engine call per round. Returns ``computed`` (records) and
    ``left`` (specs not computed here)."""
    check_number(budget, "--budget", 0, low_open=True)
    check_int(workers, "--workers", 1)
    from fedlib import grid

    deadline = time.time() + budget
    todo = [(r.folder, r.spec) for r in p.itertuples() if np.isfinite(r.seconds)]
    computed, left = [], [s for r in p.itertuples() if not np.isfinite(r.seconds) for s in [r.spec]]
    if left:
        echo(f"plan: {len(left)} runs without a comparable record to price them are not started (the budget could "
             "not protect them)")
    if todo and (line := grid.host_line(grid.timing_records(Path(root)), device)) is not None:
        echo(f"plan: {line}")
    window = 4 * workers
    for i in range(0, len(todo), window):
        by_folder: dict = {}
        for folder, s in todo[i:i + window]:
            by_folder.setdefault(folder, []).append(s)
        for folder, specs in by_folder.items():
            remaining = deadline - time.time()
            where = Path(root) / folder
            mine = [s for s in specs if not _held(where, s)]
            left += [s for s in specs if s not in mine]
            if remaining <= 0 or not mine:
                left += mine if remaining <= 0 else []
                continue
            got = {}

            def on_run(spec, record, elsewhere, estimate, got=got):
                got[spec.key()] = record
                run_line(spec, record, elsewhere, estimate, echo)
            grid.run_grid(mine, where, device=device, progress="off", budget=remaining, estimate_from=[Path(root)],
                          workers=workers, on_run=on_run, together=together, wait=False)
            computed += [r for r in got.values() if r is not None]
            left += [s for s in mine if got.get(s.key()) is None]
    return {"computed": computed, "left": left}
