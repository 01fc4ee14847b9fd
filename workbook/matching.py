"""Which committed records answer a cell of a paper's table, and the value each gives: the
records of a folder (:func:`_load`), the ones a reading matches (:func:`matches`,
:func:`matched_records`), a record's value for a metric (:func:`record_value`), and the anchor
of a row of docs/findings.md (:func:`anchor_slug`).

Layers: below :mod:`workbook.report` (the rows, verdicts and pages) and
:mod:`workbook.paper_claims` (the papers' claims), which both read records through it.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from fedlib import lookup, records
from fedlib.evaluation import client_parity
from fedlib.paths import ROOT
from fedlib.validation import fail
from .psi_pfl_study import paper_variant_records
from .report_cells import METRICS
from .tables import records_frame

__all__ = ["RECORDS", "DERIVATIONS", "matches", "cl_distance", "record_value", "matched_records", "seed_files",
           "anchor_slug", "partition_cell", "partition_statuses", "drawn_seeds"]

RECORDS = ROOT / "benchmarks" / "records"
"""The committed paper-protocol records (present in a project checkout)."""

@lru_cache(maxsize=None)
def _load(directory: str) -> tuple:
    """Every valid finished record (a dict) in ``directory``, sorted by file name; () if absent.
    Read by :func:`fedlib.lookup.load`: a file that fails its checks (NaN, truncated, no metrics, a
    value out of range, a spec not its key's) is named on stderr and skipped, never used (the page
    lists it, :func:`workbook.report.refused_lines`); two records of one run are refused, a
    ValueError naming both files."""
    d = Path(directory)
    return tuple(lookup.load(d, "skipped by the report, not used")) if d.is_dir() else ()


def seed_files(reading, root: Path, recs, seed) -> str:
    """The file names of the ``ok`` records among ``recs`` (the records :func:`matched_records`
    gave for ``reading``) of ``seed``, joined by "and", as an error names them: each found again in
    the folder by its spec (a derived record, ``reading.derive``, by its ``key``)."""
    files = [(p.name, records.read(p) or {}) for p in sorted((Path(root) / reading.records).glob("*.json"))]
    names = [next((n for n, f in files if f.get("spec") == r["spec"] or (r.get("key") and f.get("key") == r["key"])),
                  "a derived record")
             for r in recs if r.get("status") == "ok" and r["spec"].get("seed", 0) == seed]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


DERIVATIONS = {"psi_pfl_paper_variant": paper_variant_records}
"""Transforms a :class:`report_cells.Reading` may name (``derive``): name -> function of a
folder's records returning the records the reading matches. ``psi_pfl_paper_variant``: the
run PSI-PFL's paper reports (ζ chosen on the test set as the authors' ``main.py``: one
percentile per setting by the best mean over its seeds) for every validation-selected
``psi_pfl`` record (:func:`workbook.psi_pfl_study.paper_variant_records`)."""


@lru_cache(maxsize=None)
def _derived(directory: str, derive: str) -> tuple:
    if derive not in DERIVATIONS:
        fail("derive", f"one of {sorted(DERIVATIONS)}", derive)
    return tuple(DERIVATIONS[derive](list(_load(directory))))


def _field(spec: dict, path: str):
    v = spec
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return _MISSING
        v = v[part]
    return v


_MISSING = object()


def matches(spec: dict, match: tuple) -> bool:
    """Whether a record's ``spec`` has every (field, value) of ``match``; dotted fields reach into
    nested dicts (``hyper.eta``); value None requires the field absent (``reproduction``:
    absent or ``"paper_text"``); ``level="most_heterogeneous"`` matches any level (the caller
    keeps the smallest that ran). The spec is read as the configuration it ran
    (:func:`fedlib.records.with_recorded_defaults`: a hyperparameter whose default moved after
    the record was written holds the value it ran with)."""
    spec = records.with_recorded_defaults(spec)
    for key, want in match:
        got = _field(spec, key)
        if key == "level" and want == "most_heterogeneous":
            continue
        if want is None:
            if not (got is _MISSING or got is None or (key == "reproduction" and got == "paper_text")):
                return False
        elif got is _MISSING or (got != want and not (isinstance(want, float) and isinstance(got, (int, float))
                                                      and float(got) == want)):
            return False
    return True


def cl_distance(record: dict, records, metric: str) -> float:
    """AD or SDAD (``metric``: ``ad_cl``/``sdad_cl``) of ``record`` against the CL run of the same
    setting and seed among ``records``, as a fraction, by the workbook's tables' rule
    (:func:`workbook.tables.records_frame`); NaN where ``records`` hold no such CL run
    (a single run has no CL accuracy: its own ``ad_cl`` is null)."""
    s = record["spec"]
    keys = ("dataset", "protocol", "level", "n_clients", "seed")
    cl = [r for r in records if r.get("spec", {}).get("method") == "cl" and r.get("status") == "ok"
          and all(r["spec"].get(k) == s.get(k) for k in keys)]
    if not cl:
        return np.nan
    df = records_frame([record, *cl])
    return float(df[metric].iloc[0])


def record_value(record: dict, metric: str, window: tuple | None = None, records=()) -> float:
    """One record's value of ``metric`` (:data:`report_cells.METRICS`), in the report's unit (%
    for accuracies and distances; NaN where the record lacks it). ``records``: its folder's
    records, where AD/SDAD against CL find the CL run (:func:`cl_distance`)."""
    if metric not in METRICS:
        fail("metric", f"one of {sorted(METRICS)}", metric)
    pct = 100.0
    if metric == "cp_nonzero":
        return client_parity(np.asarray(record["local_accuracy"], float), zero="exclude")
    if metric in ("ad_cl", "sdad_cl") and (record.get(metric) is None or np.isnan(float(record[metric]))):
        return pct * cl_distance(record, records, metric)  # a single run's own is null/NaN
    if metric == "mean_local_accuracy":
        return pct * float(np.nanmean(np.asarray(record["local_accuracy"], float)))
    if metric in ("window_mean", "best_round"):
        hist = [h.get("global_test_accuracy", np.nan) for h in record.get("history", [])]
        rounds = [h.get("round", i) for i, h in enumerate(record.get("history", []))]
        vals = np.asarray([v for r, v in zip(rounds, hist) if window is None or window[0] <= r <= window[1]], float)
        if vals.size == 0 or np.all(np.isnan(vals)):
            return np.nan
        return pct * float(np.nanmean(vals) if metric == "window_mean" else np.nanmax(vals))
    if metric in ("reported_accuracy",):
        v = record.get("reported_accuracy", record.get("global_accuracy"))
    else:
        v = record.get(metric, record.get("info", {}).get(metric))
    if v is None:
        return np.nan
    scale = pct if metric in ("global_accuracy", "reported_accuracy", "global_test_accuracy",
                              "param_average_accuracy", "ad_cl", "sdad_cl") else 1.0
    return scale * float(v)


def matched_records(reading, root: Path) -> tuple[tuple, list]:
    """(the folder's records, the records answering ``reading``; for ``level="most_heterogeneous"``
    those of the smallest level that ran)."""
    directory = str(Path(root) / reading.records)
    return _load(directory), list(_matched(directory, reading.derive, reading.match))


@lru_cache(maxsize=None)
def _matched(directory: str, derive, match: tuple) -> tuple:
    """The records of ``directory`` (``derive``'s derived ones where given) answering ``match``,
    :func:`matched_records`' rule; once per process and folder read (:func:`clear_caches`)."""
    pool = _derived(directory, derive) if derive else _load(directory)
    recs = [r for r in pool if matches(r.get("spec", {}), match)]
    ran = [r for r in recs if r.get("status") == "ok"]
    if _asks_most_heterogeneous(match) and ran:
        lowest = min(float(r["spec"]["level"]) for r in ran)  # an infeasible smaller level is passed over
        recs = [r for r in recs if float(r["spec"]["level"]) == lowest]
    return tuple(recs)


def clear_caches() -> None:
    """Forget the records read (:func:`_load`) and what was computed of them: the next reading
    reads the folders again (the report's and the claims' frames start with it)."""
    for f in (_load, _derived, _matched):
        f.cache_clear()


def partition_cell(spec: dict) -> tuple | None:
    """(dataset, protocol, level, n_clients) of a record's spec: what its partition depends on
    besides the seed (not the method); None where a field is missing."""
    try:
        return spec["dataset"], spec["protocol"], float(spec["level"]), int(spec["n_clients"])
    except (KeyError, TypeError, ValueError):
        return None


def partition_statuses(directory: str) -> dict:
    """partition cell (:func:`partition_cell`) -> {seed: "infeasible" if any of its records is, else
    "ok"} over the records in ``directory`` (a partition's feasibility depends on its seed, not on
    the method that drew it)."""
    out: dict = {}
    for r in _load(directory):
        cell = partition_cell(r.get("spec") or {})
        if cell is None:
            continue
        seeds = out.setdefault(cell, {})
        if r.get("status") == "infeasible" or seeds.get(r["spec"].get("seed")) != "infeasible":
            seeds[r["spec"].get("seed")] = "infeasible" if r.get("status") == "infeasible" else "ok"
    return out


def drawn_seeds(reading, root: Path) -> list:
    """The seeds at which the partitions of ``reading``'s infeasible records *were* drawn by some
    other record of its folder (a run of another method), ascending: a row whose own seeds were all
    infeasible is still runnable at those."""
    folder = str(Path(root) / reading.records)
    statuses = partition_statuses(folder)
    cells = {partition_cell(r.get("spec") or {}) for r in matched_records(reading, root)[1]
             if r.get("status") == "infeasible"}
    return sorted({seed for c in cells if c is not None for seed, st in statuses.get(c, {}).items() if st == "ok"})


def _asks_most_heterogeneous(match: tuple) -> bool:
    return any(k == "level" and v == "most_heterogeneous" for k, v in match)


def _most_heterogeneous(reading) -> bool:
    return _asks_most_heterogeneous(reading.match)


def anchor_slug(*parts) -> str:
    """The anchor of a section or row of docs/findings.md: ``parts`` joined by "-", lower case,
    α, η and § spelt out, every other run of characters but a-z and 0-9 one "-"."""
    s = "-".join(str(p) for p in parts).lower()
    s = s.replace("α", "alpha").replace("η", "eta").replace("§", "s")
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-")
