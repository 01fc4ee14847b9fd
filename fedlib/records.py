"""Run records: their schema, writing them and reading them back checked.

A record (:func:`fedlib.experiment.run`) is one JSON file named by its spec's key
(:meth:`fedlib.experiment.RunSpec.key`), a hash that includes fedlib's version; grids and readers
find a spec's record by the spec's fields instead (:func:`fedlib.lookup.where`, a module above
:mod:`fedlib.spec`, which this one is below): the same record whatever version is installed.

* :func:`write` — one record, atomically (temporary + fsync + rename + fsync of the folder),
  every error naming the path;
* :func:`read_strict` — one record, checked (strict JSON, schema version, status, metrics, and
  its spec and file name against the spec it should be): :class:`RecordError` naming the file
  and what is wrong;
* :func:`read` — one record file (None for a half-written temporary).

The record's schema (what :func:`fedlib.experiment.run` writes): ``record_version``
(:data:`RECORD_VERSION`), ``key``, ``spec``, ``versions``, ``host``, ``status`` (one of
:data:`FINISHED`) and, for ``status: ok``, the metrics :data:`OK_METRICS`. CAFA's CBCC records
(benchmarks/cafa_cbcc.py) share the envelope with their own metrics (:data:`CBCC_METRICS`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import json
import math
import os
import sys
import tempfile
from dataclasses import MISSING, fields
from functools import lru_cache
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from . import __version__, strict_json
from .strict_json import NONFINITE_KEY, loads_strict, restore, restore_parsed
from .validation import fail

__all__ = ["read", "read_strict", "write", "check", "RecordError", "RecordWriteError", "normalised_fields",
           "with_recorded_defaults", "with_current_defaults", "RECORD_VERSION",
           "FINISHED", "OK_METRICS"]

#: The record schema's version (part of every record and of its key, :meth:`RunSpec.key`).
RECORD_VERSION = 1

#: A record's ``status`` once its run has finished: ``ok`` (with metrics), ``infeasible`` (the
#: partition cannot be made) or ``failed`` (training diverged; no metrics). A failed run fails
#: again: delete its record to retry.
FINISHED = ("ok", "infeasible", "failed")

#: The metrics of a ``status: ok`` run record (:func:`fedlib.experiment.run`): scalars that
#: must be finite numbers and per-client lists of finite numbers (``local_accuracy`` may hold
#: NaN for a client with no test sample, written as null and listed in ``nonfinite``).
#: ``global_accuracy`` (in [0, 1]) is required; the others are checked where present (records
#: of analyses and tests carry a subset).
OK_REQUIRED = ("global_accuracy",)
OK_SCALARS = ("global_accuracy", "ad", "sdad", "seconds", "cpu_seconds")
OK_LISTS = ("correct", "n_test", "n_train", "local_accuracy")
OK_METRICS = OK_SCALARS + OK_LISTS

#: CAFA's CBCC clustering records (benchmarks/cafa_cbcc.py: a spec with a ``generator``, no
#: ``method``): their ``status: ok`` metrics.
CBCC_METRICS = ("acc", "precision", "recall", "f1")


class RecordError(ValueError):
    """A file that is not a valid record (of the spec it should hold): the message names the
    file and what is wrong with it."""

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"record {self.path}: {problem}")


class RecordWriteError(OSError):
    """A record that could not be written (a full disk, a read-only folder): the message names
    the file and the cause; ``errno`` is the cause's; ``path`` the file; ``record`` the record
    itself, still whole in memory (nothing of it was lost: write it elsewhere with :func:`write`)."""

    def __init__(self, path, cause: OSError, record: dict | None):
        why = cause.strerror or str(cause) or type(cause).__name__
        message = (f"cannot write the record {path}: {why}. The record is not lost: it is kept in "
                   "this error's .record (fedlib.records.write(other_path, err.record) saves it)"
                   if record is not None else f"cannot write {path}: {why}")
        super().__init__(cause.errno, message) if cause.errno is not None else super().__init__(message)
        self.path, self.record = str(path), record

    def __str__(self) -> str:
        return self.args[-1]


def write(path, record: dict) -> None:
    """Write ``record`` to ``path`` as strict JSON (:mod:`fedlib.strict_json`: NaN/±inf become
    null and are listed in ``"nonfinite"`` with their reason), atomically: a temporary file in
    the same folder, flushed and fsynced, renamed over ``path`` (``os.replace``), then the
    folder fsynced, so that after a crash or power loss ``path`` holds the old file or the whole
    new one.

    The temporary file is ``.tmp-*.json.part``: a process killed while writing leaves it
    behind, and a name ending in ``.json`` would be taken for a record by any ``*.json``
    pattern (``pathlib`` matches names that start with a dot).

    Every error names ``path``: an OSError becomes :class:`RecordWriteError` (an OSError with
    the same errno, e.g. ENOSPC for a full disk) that carries ``record``; the temporary is
    removed. Anything non-finite that sanitise cannot reach fails before any file exists.
    """
    path = Path(path)
    try:
        clean = strict_json.sanitise(record)
        text = json.dumps(clean, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise type(err)(f"record {path} cannot be written as strict JSON: {err}") from err
    del text  # checked only: json.dump below writes it
    def fill(f) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8")
        json.dump(clean, text)
        text.flush()
        text.detach()

    _replace_atomically(path, fill, ".json.part", record)


def write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` as :func:`write` writes a record: a temporary file
    (``.tmp-*.part``), fsynced, renamed over ``path``, the folder fsynced; every error names
    ``path`` (:class:`RecordWriteError`). Checkpoints (:mod:`fedlib.checkpoint`) use it."""
    _replace_atomically(Path(path), lambda f: f.write(data), ".part", None)


def _replace_atomically(path: Path, fill, suffix: str, record) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=suffix)
    except OSError as err:
        raise RecordWriteError(path, err, record) from err
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise RecordWriteError(path, err, record) from err
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """fsync ``folder`` so a rename into it survives a crash (a no-op where folders cannot be
    opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _finite_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(float(value)))


#: The fields of a record that may hold null (a RunSpec field such as ``arch``, a method's
#: diagnostics, an unknown fact of a divergence): any other null is refused unless ``nonfinite``
#: lists it (then it is NaN or ±inf, restored).
MAY_BE_NULL = ("spec", "fl", "info", "divergence", "reproduction_settings", "host", "versions", "error")
#: Accuracies (fractions in [0, 1]) a ``status: ok`` run record may hold besides ``global_accuracy``.
ACCURACIES = ("global_accuracy", "val_accuracy", "global_test_accuracy", "param_average_accuracy",
              "reported_accuracy")
#: Per-client counts, each within [0, its total]: count -> total (a list of them, or a scalar).
COUNTS = {"correct": "n_test", "val_correct": "n_val", "global_test_correct": "n_global_test"}


def key_of(spec: dict, fedlib_version: str) -> str:
    """The key (the file name, less ``.json``) of the record of the spec dict ``spec`` written by
    fedlib ``fedlib_version``: :meth:`fedlib.spec.RunSpec.key`'s hash, from the record's own fields."""
    blob = json.dumps({**spec, "fedlib": fedlib_version, "record_version": RECORD_VERSION}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def cbcc_name(spec: dict) -> str:
    """The file name of a CBCC record of the spec dict ``spec`` (benchmarks/cafa_cbcc.py)."""
    return f"{spec['generator']}_iid{spec['n_iid']}_noniid{spec['n_noniid']}_seed{spec['seed']}.json"


#: The types of a list's items that :func:`_null` and :func:`_fractions` check at C speed.
_SCALARS, _NUMBERS = frozenset((int, float, str, bool)), frozenset((int, float))


def _null(value, where: str):
    """The path of the first null in ``value`` (``where`` its own), depth first, else None. A
    list of scalars only (a per-client list, the common case) is cleared without a Python loop."""
    if value is None:
        return where
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        if _SCALARS.issuperset(map(type, value)):
            return None
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        if v is None or isinstance(v, (dict, list)):
            path = _null(v, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]")
            if path:
                return path
    return None


def _fraction(value, nan: bool = False) -> bool:
    """Whether ``value`` is a number in [0, 1] (or, with ``nan``, NaN: a client with no sample)."""
    return _finite_number(value) and 0 <= value <= 1 or nan and isinstance(value, float) and math.isnan(value)


def _fractions(values: list, nan: bool = False) -> bool:
    """Whether every item of ``values`` is :func:`_fraction` (``nan`` as there); a list of plain
    ints and floats, the common case, is checked by one comparison an item."""
    if not _NUMBERS.issuperset(map(type, values)):
        return all(_fraction(x, nan) for x in values)
    outside = [x for x in values if not 0 <= x <= 1]  # ±inf and NaN among them
    return not outside or nan and all(x != x for x in outside)  # x != x: NaN only


def _values(record: dict, path) -> None:
    """Refuse (:class:`RecordError`) a finished record whose values no run can produce: an
    undeclared null, an accuracy or a history entry outside [0, 1], a count outside its range
    (``correct`` in [0, ``n_test``], …; CBCC's ``k`` in [1, n_iid + n_noniid]),
    ``global_accuracy`` ≠ Σ correct / Σ n_test, and a ``key`` or file name that is not its spec's."""
    def bad(why):
        raise RecordError(path, why)
    null = next((p for k, v in record.items() if k not in MAY_BE_NULL and (p := _null(v, k))), None)
    if null:
        bad(f"{null} is null and not listed in {NONFINITE_KEY!r} (nulls are declared only in {', '.join(MAY_BE_NULL)})")
    spec, name = record["spec"], Path(path).name
    if "key" in record:
        key = key_of(spec, (record.get("versions") or {}).get("fedlib", __version__))
        if record["key"] != key:
            bad(f"its key {record['key']!r} is not its spec's ({key}): the spec or the key was changed after the run")
        if name.endswith(".json") and name != f"{key}.json":
            bad(f"the file name is not the spec's key ({key}.json)")
    elif "generator" in spec and name.endswith(".json") and name != cbcc_name(spec):
        bad(f"the file name is not its spec's ({cbcc_name(spec)})")
    for h in ("history", "history_before_divergence"):
        for i, entry in enumerate(record.get(h) or []):
            for k, v in entry.items() if isinstance(entry, dict) else [("", entry)]:
                ok = (isinstance(v, int) and v >= 0 if k == "round" else
                      _fractions(v, True) if isinstance(v, list) else _fraction(v))
                if not ok:
                    bad(f"{h}[{i}].{k} is {v!r}, not {'a round' if k == 'round' else 'an accuracy in [0, 1]'}")
    if record["status"] != "ok":
        return
    if "generator" in spec and "method" not in spec:
        n = spec.get("n_iid", 0) + spec.get("n_noniid", 0)
        if not (isinstance(record.get("k"), int) and 1 <= record["k"] <= n):
            bad(f"k is {record.get('k')!r}, not a cluster count in [1, {n}] (n_iid + n_noniid)")
        wrong = [k for k in CBCC_METRICS if not _fraction(record[k])]
        if wrong:
            bad(f"{wrong[0]} is {record[wrong[0]]!r}, not a score in [0, 1]")
        return
    for k in ACCURACIES:
        if k in record and not _fraction(record[k]):
            bad(f"{k} {record[k]!r} is not in [0, 1]")
    local = record.get("local_accuracy", ())
    wrong = [] if isinstance(local, list) and _fractions(local, True) else [v for v in local if not _fraction(v, True)]
    if wrong:
        bad(f"local_accuracy holds {wrong[0]!r}, not an accuracy in [0, 1]")
    for k in ("n_train", "n_test", "n_val"):
        if any(not (isinstance(v, int) and v >= 0) for v in record.get(k) or ()):
            bad(f"{k} holds {next(v for v in record[k] if not (isinstance(v, int) and v >= 0))!r}, not a count")
    for k, total in COUNTS.items():
        if k in record and total in record:
            totals = record[total] if isinstance(record[total], list) else [record[total]] * len(record[k])
            over = [(c, t) for c, t in zip(record[k], totals) if not (isinstance(c, int) and 0 <= c <= t)]
            if over:
                bad(f"{k} holds {over[0][0]!r} where {total} is {over[0][1]!r}: not a count in [0, {total}]")
    if "correct" in record and "n_test" in record and sum(record["n_test"]) > 0:
        want = sum(record["correct"]) / sum(record["n_test"])
        if not math.isclose(record["global_accuracy"], want, rel_tol=1e-9):
            bad(f"global_accuracy {record['global_accuracy']!r} is not correct / n_test ({want!r})")


def check(record, path="<record>", spec=None) -> dict:
    """``record`` (a parsed record, non-finite values already restored) if it is a valid
    record (of ``spec``, when given); else :class:`RecordError` naming ``path`` and the first
    problem found. See :func:`read_strict`."""
    if not isinstance(record, dict):
        raise RecordError(path, f"not a record: a JSON {type(record).__name__}, not an object")
    version = record.get("record_version")
    if version != RECORD_VERSION:
        raise RecordError(path, f"record_version {version!r} is unknown (this fedlib reads {RECORD_VERSION})")
    status = record.get("status")
    if status not in FINISHED:
        raise RecordError(path, f"status {status!r} is not one of {list(FINISHED)}")
    if not isinstance(record.get("spec"), dict):
        raise RecordError(path, "no spec (a dict of the run's fields)")
    if status == "ok":
        cbcc = "generator" in record["spec"] and "method" not in record["spec"]
        required, scalars, lists = (CBCC_METRICS, CBCC_METRICS, ()) if cbcc else (OK_REQUIRED, OK_SCALARS, OK_LISTS)
        missing = [k for k in required if k not in record]
        if missing:
            raise RecordError(path, f"status ok but no {', '.join(missing)}")
        for k in scalars:
            if k in record and not _finite_number(record[k]):
                raise RecordError(path, f"{k} is {record[k]!r}, not a finite number")
        for k in lists:
            if k not in record:
                continue
            values = record[k]
            if not isinstance(values, list):
                raise RecordError(path, f"{k} is {values!r}, not a list of per-client numbers")
            plain = _NUMBERS.issuperset(map(type, values))  # then only NaN and ±inf are looked at
            bad = [v for v in (itertools.filterfalse(math.isfinite, values) if plain else values)
                   if not (_finite_number(v) or (k == "local_accuracy" and isinstance(v, float) and math.isnan(v)))]
            if bad:
                raise RecordError(path, f"{k} holds {bad[0]!r}, not a finite number")
    if spec is not None:
        if not dataclasses.is_dataclass(spec):
            fail("spec", "a RunSpec (the run the record should hold)", spec)
        want, got = normalised_fields(spec, type(spec)), normalised_fields(record["spec"], type(spec))
        if want != got:
            diff = [k for k in sorted(set(want) | set(got)) if want.get(k, MISSING) != got.get(k, MISSING)]
            shown = ", ".join(f"{k}={got.get(k)!r} (expected {want.get(k)!r})" for k in diff[:4])
            raise RecordError(path, f"holds another run's record: {shown}")
        key = spec.key() if hasattr(spec, "key") else None
        if key is not None and Path(path).name != f"{key}.json":
            raise RecordError(path, f"the file name is not the spec's key ({key}.json)")
    _values(record, path)
    return record


def read_strict(path, spec=None, *, restore_nonfinite: bool = True) -> dict:
    """The record in ``path``, checked; else :class:`RecordError` naming ``path`` and what is
    wrong (FileNotFoundError if there is no file):

    * strict JSON (:func:`fedlib.strict_json.loads_strict`: a ``NaN`` token is refused; values
      this project wrote as null and listed in ``nonfinite`` are restored) holding an object;
    * ``record_version`` is :data:`RECORD_VERSION`, ``status`` one of :data:`FINISHED`, a
      ``spec`` dict;
    * a ``status: ok`` record holds ``global_accuracy`` in [0, 1], and every metric a run
      writes (:data:`OK_METRICS`) that it holds is a finite number (a list of them;
      ``local_accuracy`` may be NaN where it was listed as such); CBCC's records
      (:data:`CBCC_METRICS`) their own metrics;
    * with ``spec`` (a RunSpec): the record's spec equals it (:func:`spec_fields`) and the
      file is named by its key (:meth:`fedlib.experiment.RunSpec.key`).
    * its values are ones a run can write (:func:`_values`): no null but where declared
      (:data:`MAY_BE_NULL`, ``nonfinite``), accuracies and history entries in [0, 1], counts in
      range, ``global_accuracy`` = Σ correct / Σ n_test, its ``key``, spec and file name agreeing.

    ``restore_nonfinite``: return the record with its non-finite values restored (NaN, ±inf);
    False returns it as stored (null, with its ``nonfinite`` list), as ``run_grid`` and
    ``load_records`` always have. The checks see the restored values either way.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as err:
        raise RecordError(path, f"cannot be read ({err})") from err
    if not text.strip():
        raise RecordError(path, "empty file (a write that never finished)")
    try:
        record = loads_strict(text)
    except ValueError as err:
        raise RecordError(path, f"not valid strict JSON (truncated or corrupt): {err}") from err
    stored = record
    if isinstance(record, dict) and NONFINITE_KEY in record:
        try:  # restored in place: ``stored`` is then parsed again, where it is asked for
            record = restore_parsed(record)
            stored = record if restore_nonfinite else loads_strict(text)
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise RecordError(path, f"its {NONFINITE_KEY!r} list does not match the record: {err}") from err
    check(record, path, spec)
    return record if restore_nonfinite else stored


_WARNED: set = set()


def warn(err: RecordError, consequence: str) -> None:
    """Name a refused record on stderr, once per file, problem and consequence in a process (a
    grid asks about one file several times)."""
    if (err.path, err.problem, consequence) not in _WARNED:
        _WARNED.add((err.path, err.problem, consequence))
        print(f"fedlib: {err}; {consequence}", file=sys.stderr, flush=True)


def read_valid(path, spec=None, consequence: str = "not used", *, restore_nonfinite: bool = True) -> dict | None:
    """:func:`read_strict`, or None where there is no file or it fails its checks (then named
    on stderr by :func:`warn`, never used)."""
    try:
        return read_strict(path, spec, restore_nonfinite=restore_nonfinite)
    except FileNotFoundError:
        return None
    except RecordError as err:
        warn(err, consequence)
        return None


def read(path) -> dict | None:
    """The record in the file ``path``, or None where it is not one (a half-written or otherwise
    unparsable temporary, a file that is gone, JSON that is not an object). Non-finite values
    that were written as null (:mod:`fedlib.strict_json`) are restored."""
    try:
        record = json.loads(Path(path).read_text())
    except (ValueError, OSError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(record, dict):
        return None
    return restore_parsed(record) if NONFINITE_KEY in record else record

@lru_cache(maxsize=8)
def _defaults_of(spec_class) -> tuple:
    """(name, default) of every field of the dataclass ``spec_class`` that has one, normalised."""
    out = []
    for f in fields(spec_class):
        if f.default is not MISSING:
            out.append((f.name, _plain(f.default)))
        elif f.default_factory is not MISSING:
            out.append((f.name, _plain(f.default_factory())))
    return tuple(out)


def _plain(value):
    """``value`` with numbers as plain Python numbers, a float of integral value as an int (so
    ``1`` and ``1.0`` are one value), bools kept bools, and dicts and lists normalised inside."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        v = float(value)
        return int(v) if v.is_integer() else v
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def normalised_fields(spec, spec_class) -> dict:
    """The fields of ``spec`` (a ``spec_class`` instance or a record's ``spec`` dict) that
    identify a run, normalised so that equal runs give equal dicts: every field of the dataclass
    ``spec_class`` that has a default present, at its default where absent; numbers as plain
    Python numbers (:func:`_plain`); a method's moved defaults as its records ran them
    (:func:`with_recorded_defaults`). :func:`fedlib.lookup.spec_fields` is this with
    :class:`fedlib.spec.RunSpec`; the class is an argument so that this module stays below the
    spec's."""
    d = spec.to_dict() if hasattr(spec, "to_dict") else spec
    if not isinstance(d, dict):
        fail("spec", "a RunSpec or a record's spec dict", spec)
    out = dict(_defaults_of(spec_class))
    out.update(_plain(with_recorded_defaults(d)))
    return out


def _recorded_defaults(method) -> dict:
    """The method's :attr:`fedlib.methods.contract.MethodInfo.recorded_defaults` ({} for an
    unknown method: validation names that elsewhere)."""
    from .methods import REGISTRY  # lazily: the methods import torch

    info = REGISTRY.get(method) if isinstance(method, str) else None
    return dict(info.recorded_defaults) if info is not None else {}


def with_recorded_defaults(spec: dict) -> dict:
    """A record's ``spec`` dict read as the configuration it was produced with: each of its
    method's hyperparameters whose default changed after records were committed
    (``MethodInfo.recorded_defaults``), where the spec lacks it, filled with the value those
    records ran (e.g. FeSEM's ``init`` → ``'clients'``, FedAMP's ``attention`` →
    ``'softmax'``). A spec written since states these keys unless it runs that very value
    (:func:`with_current_defaults`). Returns a new dict (``spec`` itself when nothing is
    filled)."""
    if not isinstance(spec, dict):
        return spec
    legacy = _recorded_defaults(spec.get("method"))
    hyper = spec.get("hyper") or {}
    if not legacy or not isinstance(hyper, dict) or set(legacy) <= set(hyper):
        return spec
    return {**spec, "hyper": {**legacy, **hyper}}


def with_current_defaults(method, hyper: dict) -> dict:
    """``hyper`` in the one form a spec is written in for each of the method's
    ``recorded_defaults`` keys: absent when the run uses the value the committed records ran
    (so its record, its file name and an old record are one and the same run), stated otherwise
    — today's default (its ``Hyper`` field's) where ``hyper`` lacks the key. A spec written now
    is thus never read as an old record's configuration (:func:`with_recorded_defaults`), and
    the old configuration asked for explicitly finds the old records."""
    from .methods import REGISTRY

    info = REGISTRY.get(method) if isinstance(method, str) else None
    if info is None or not info.recorded_defaults or not isinstance(hyper, dict):
        return hyper
    today = {f.name: f.default for f in fields(info.hyper)}
    out = {**{k: today[k] for k in info.recorded_defaults}, **hyper}
    return {k: v for k, v in out.items() if not (k in info.recorded_defaults and v == info.recorded_defaults[k])}
