"""Run records as one pandas DataFrame: the one reader every table builds on.

A run record (:func:`fedlib.run.run` writes it) is a nested dict — ``spec`` (what was run),
``status``, metrics, per-client lists, ``info`` (method-specific) and ``history``.
:func:`records_frame` flattens a list of them once, one row per record, with stable column
names (FL-bench's ``metrics.csv`` idea), so a table is a column selection of it rather than a
loop over dicts; the record itself stays reachable in the ``record`` column for the builders
that need per-client lists, ``info`` lists or the ``history``.

Columns, in this order:

* the Table III frame (column names unchanged since ``workbook.tables.records_frame``):
  ``dataset``, ``protocol``, ``level``, ``n_clients``, ``seed``, ``method`` (spec), ``status``,
  ``paper_name``, ``reproduction`` (spec; ``'paper_text'`` where absent), ``error`` (failed runs
  only), and for a finished run ``global_accuracy``, ``ad``, ``sdad``, ``cp``, ``wpsi``,
  ``reported_accuracy`` (``global_accuracy`` where absent), ``reported_rule``
  (``'last_round'`` where absent), ``tau`` (``info['tau']``), ``local_accuracy`` (per-client
  list) — in the order the records first show them, as ``pd.DataFrame(rows)`` puts them —
  then ``ad_cl``, ``sdad_cl``: AD and SDAD of the run's local accuracies against the CL run of
  the same setting and seed (``paper_text``; PSI-PFL's CL target), NaN without one or with
  several (records of one setting and seed differing elsewhere in their spec);
* ``seconds``, ``cpu_seconds``: wall and CPU time (NaN where a record lacks them);
* every other top-level numeric field of a record (``global_test_accuracy``,
  ``param_average_accuracy``, ``val_accuracy``, …), sorted by name; NaN where absent;
* ``spec.<key>``: the spec's other scalar fields (``spec.test_fraction``, ``spec.arch``, …);
* ``hyper.<key>``, ``fl.<key>``: the scalar entries of the spec's ``hyper`` and ``fl`` dicts;
* ``info.<key>``: the scalar entries of the record's ``info`` (``info.tau``,
  ``info.n_clusters``, ``info.selected_on``, …); lists and dicts there stay in ``record``;
* ``record``: the record (dict), its non-finite values restored (:mod:`fedlib.strict_json`).

The prefixed groups are each sorted by key; a key a record lacks is NaN in its row (a failed
or infeasible record has no metrics and no ``info``). An empty list of records gives an empty
frame without columns.
"""
from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

from fedlib.strict_json import NONFINITE_KEY, restore
from fedlib.validation import fail

__all__ = ["records_frame", "SPEC_COLUMNS", "METRIC_COLUMNS"]

SPEC_COLUMNS = ("dataset", "protocol", "level", "n_clients", "seed", "method")
"""The spec fields every run record has, the first columns of the frame (None where a spec lacks one)."""
METRIC_COLUMNS = ("global_accuracy", "ad", "sdad", "cp", "wpsi")
"""A finished run's scalar metrics of Table III's frame (NaN where a record lacks one)."""
_SETTING = ["dataset", "protocol", "level", "n_clients"]
_TIMES = ("seconds", "cpu_seconds")
_NOT_METRICS = {"record_version", "ad_cl", "sdad_cl", "tau", "reported_accuracy", "reported_rule", "reproduction",
                "status", "paper_name", "error", "local_accuracy", "record", *METRIC_COLUMNS, *_TIMES, *SPEC_COLUMNS}
"""Top-level numbers that are not extra metric columns: bookkeeping, the Table III columns and
the record's own ``ad_cl``/``sdad_cl`` (null in a single run; the frame computes them)."""


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, (str, bool, numbers.Number, np.generic))


def _is_number(value) -> bool:
    return isinstance(value, (numbers.Real, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _checked(record) -> dict:
    """``record`` with its non-finite values restored; ValueError for anything but a run record."""
    if not isinstance(record, dict) or not isinstance(record.get("spec"), dict) or "status" not in record:
        fail("records entries", "run records (dicts with 'spec' and 'status')", type(record).__name__
             if not isinstance(record, dict) else sorted(record)[:8])
    return restore(record) if NONFINITE_KEY in record else record


def _table_row(r: dict) -> dict:
    """The Table III columns of one record (``workbook.tables.records_frame``'s row)."""
    s = r["spec"]
    row = {k: s.get(k) for k in SPEC_COLUMNS}  # None where a (made-up) spec lacks one
    row.update(status=r["status"], paper_name=r.get("paper_name"), reproduction=s.get("reproduction", "paper_text"))
    if r["status"] == "failed":
        row["error"] = r.get("error")
    if r["status"] == "ok":
        row.update({k: r.get(k, np.nan) for k in METRIC_COLUMNS})
        row["reported_accuracy"] = r.get("reported_accuracy", r.get("global_accuracy", np.nan))
        row["reported_rule"] = r.get("reported_rule", "last_round")
        row["tau"] = (r.get("info") or {}).get("tau")
        row["local_accuracy"] = r.get("local_accuracy")  # None in a made-up record without it
    return row


def _extra_row(r: dict) -> dict:
    """The flattened columns after Table III's of one record: times, other numeric fields,
    ``spec.*``, ``hyper.*``, ``fl.*``, ``info.*`` (scalars only)."""
    s = r["spec"]
    row = {k: r[k] for k in _TIMES if _is_number(r.get(k))}
    row.update({k: v for k, v in r.items() if k not in _NOT_METRICS and _is_number(v)})
    row.update({f"spec.{k}": v for k, v in s.items()
                if k not in SPEC_COLUMNS and k != "reproduction" and _is_scalar(v)})
    for group in ("hyper", "fl"):
        row.update({f"{group}.{k}": v for k, v in (s.get(group) or {}).items() if _is_scalar(v)})
    row.update({f"info.{k}": v for k, v in (r.get("info") or {}).items() if _is_scalar(v)})
    return row


def _extra_order(rows: list[dict]) -> list[str]:
    """The extra columns present in ``rows``: times, then metrics, then each prefixed group, each sorted."""
    present = set().union(*rows) if rows else set()
    times = list(_TIMES)
    groups = [sorted(k for k in present if "." not in k and k not in _TIMES)]
    groups += [sorted(k for k in present if k.startswith(p + ".")) for p in ("spec", "hyper", "fl", "info")]
    return times + [k for g in groups for k in g]


def _distance_to_cl(df: pd.DataFrame) -> tuple[list, list]:
    """AD and SDAD (mean and population std over clients of |A_k − CL's global accuracy|) of each
    row against the ``paper_text`` CL run of its setting and seed; NaN where there is none, or
    more than one (runs of one setting that differ elsewhere in their spec: no single target)."""
    cl = df[(df.method == "cl") & (df.status == "ok") & (df.reproduction == "paper_text")].set_index(
        _SETTING + ["seed"])["global_accuracy"]
    cl = cl[~cl.index.duplicated(keep=False)]  # two CL runs of one setting and seed (e.g. other splits): no target
    ad_cl, sdad_cl = [], []
    keys = zip(*(df[k] for k in _SETTING + ["seed"]))
    local = df["local_accuracy"] if "local_accuracy" in df else [None] * len(df)
    for key, status, acc in zip(keys, df.status, local):
        if status != "ok" or acc is None or key not in cl.index:
            ad_cl.append(np.nan)
            sdad_cl.append(np.nan)
            continue
        d = np.abs(np.asarray(acc, float) - float(cl.loc[key]))
        d = d[~np.isnan(d)]
        ad_cl.append(d.mean())
        sdad_cl.append(d.std())
    return ad_cl, sdad_cl


def records_frame(records) -> pd.DataFrame:
    """One row per run record (module docstring for the columns), in the records' order.

    ``records``: run records (dicts as :func:`fedlib.experiment.load_records` returns them);
    strict-JSON ones (a ``"nonfinite"`` field) have their NaN/±inf restored. A failed run has
    its ``error`` and no metrics, an infeasible one neither; both have NaN in the metric and
    ``info.*`` columns. ValueError for an entry that is not a run record.

    Returns a DataFrame of shape (len(records), columns); empty (no columns) for no records.
    """
    recs = [_checked(r) for r in records]
    df = pd.DataFrame([_table_row(r) for r in recs])
    if df.empty:
        return df
    for col in (*METRIC_COLUMNS, "tau"):
        if col not in df:
            df[col] = np.nan
    df["ad_cl"], df["sdad_cl"] = _distance_to_cl(df)
    extra = [_extra_row(r) for r in recs]
    cols = _extra_order(extra)
    flat = pd.DataFrame(extra, columns=cols, index=df.index)
    for col in _TIMES:
        flat[col] = flat[col].astype(float)
    df = pd.concat([df, flat], axis=1)
    df["record"] = recs
    return df
