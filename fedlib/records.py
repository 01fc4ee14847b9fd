"""Run records: reading the committed run records and finding them by their spec's fields.

A record (:func:`fedlib.experiment.run`) is one JSON file; its file name is the spec's key
(:meth:`fedlib.experiment.RunSpec.key`), a hash that includes fedlib's version, so a lookup by
file name finds nothing after a version bump. Readers of committed records (the report, the
notebooks) find a spec's record here instead, by the fields of the spec it ran
(:func:`spec_fields`): the same record whatever version is installed.

* :func:`read` — one record file (None for a half-written temporary);
* :func:`spec_fields` — the fields that identify a run, normalised for comparison;
* :func:`find` — each spec's finished record in a folder.

This module is the home that the project's one typed record will grow into.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, fields
from functools import lru_cache
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from .strict_json import NONFINITE_KEY, restore
from .validation import fail

__all__ = ["read", "spec_fields", "find"]


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
    return restore(record) if NONFINITE_KEY in record else record


@lru_cache(maxsize=1)
def _defaults() -> tuple:
    """(name, default) of every RunSpec field that has one, normalised."""
    from .experiment import RunSpec  # lazily: experiment imports torch

    out = []
    for f in fields(RunSpec):
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


def spec_fields(spec) -> dict:
    """The fields that identify a run, from a :class:`fedlib.experiment.RunSpec` or a record's
    ``spec`` dict, normalised so that equal runs give equal dicts:

    * every RunSpec field that has a default is present, at its default where absent: a
      record written before a field existed (or by ``RunSpec.to_dict``, which leaves fields
      added later out at their defaults) equals a spec with that field at its default;
    * numbers are plain Python numbers and a float of integral value is an int (``level``
      ``1`` and ``1.0``, ``n_clients`` from YAML or numpy, are one value), inside ``hyper`` and
      ``fl`` too; booleans stay booleans.

    Nothing version-dependent enters (unlike the record's file name, :meth:`RunSpec.key`).
    """
    d = spec.to_dict() if hasattr(spec, "to_dict") else spec
    if not isinstance(d, dict):
        fail("spec", "a RunSpec or a record's spec dict", spec)
    out = dict(_defaults())
    out.update(_plain(d))
    return out


def _hashable(value):
    """A hashable form of a normalised value; bools tagged, so that True and 1 stay apart."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _hashable(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    return value


def _key(spec) -> tuple:
    return _hashable(spec_fields(spec))


def _index(folder: Path) -> dict:
    """Hashable spec fields -> [(path, record), …] of every finished record in ``folder``."""
    from .experiment import FINISHED, RECORD_VERSION

    index: dict = {}
    if not folder.is_dir():
        return index
    for path in sorted(folder.glob("*.json")):
        record = read(path)
        if (record is None or not isinstance(record.get("spec"), dict)
                or record.get("record_version", RECORD_VERSION) != RECORD_VERSION
                or record.get("status") not in FINISHED):
            continue  # not a record (a temporary, a manifest), one of another record format, or unfinished
        index.setdefault(_key(record["spec"]), []).append((path, record))
    return index


def _describe(fields_: dict) -> str:
    keys = ("dataset", "protocol", "level", "n_clients", "seed", "method", "reproduction")
    return ", ".join(f"{k}={fields_[k]!r}" for k in keys if k in fields_)


def find(specs, folder) -> tuple[list[dict], list]:
    """Each spec's finished record in ``folder`` (status in :data:`fedlib.experiment.FINISHED`),
    matched by :func:`spec_fields`, never by file name: (the records found, the specs without
    one), both in the order of ``specs``. The folder is read once. Files that are not finished
    records are ignored, and so are records that name another ``record_version`` than
    :data:`fedlib.experiment.RECORD_VERSION`; an absent folder holds no record.

    Raises ValueError (:func:`fedlib.validation.fail`) naming the folder and the files where
    two records in ``folder`` match one of ``specs``.
    """
    folder = Path(folder)
    index = _index(folder)
    found, missing = [], []
    for spec in specs:
        hits = index.get(_key(spec))
        if not hits:
            missing.append(spec)
            continue
        if len(hits) > 1:
            names = [p.name for p, _ in hits]
            fail("folder", f"a folder of at most one record per run, but {', '.join(names[:-1])} and {names[-1]} "
                 f"{'both' if len(names) == 2 else 'all'} match the spec ({_describe(spec_fields(spec))})",
                 str(folder))
        found.append(hits[0][1])
    return found, missing
