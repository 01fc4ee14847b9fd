"""Finding a spec's record in a folder by the fields of the spec it ran, never by file name.

A record's file name is its spec's key (:meth:`fedlib.spec.RunSpec.key`), a hash that includes
fedlib's version, so a lookup by file name finds nothing after a version bump. Readers of
committed records (the report, the notebooks, a grid's ``present_records``) find a spec's record
here instead:

* :func:`spec_fields` — the fields that identify a run, normalised for comparison;
* :func:`find` — each spec's finished record in a folder.

Layers: above :mod:`fedlib.spec` (the fields' defaults) and :mod:`fedlib.records` (reading).
"""
from __future__ import annotations

from pathlib import Path

from .records import FINISHED, RECORD_VERSION, RecordError, normalised_fields, read, read_strict, warn
from .spec import RunSpec
from .validation import fail

__all__ = ["spec_fields", "find"]


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
    return normalised_fields(spec, RunSpec)

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
    index: dict = {}
    if not folder.is_dir():
        return index
    for path in sorted(folder.glob("*.json")):
        raw = read(path)
        if raw is not None and (not isinstance(raw.get("spec"), dict)
                                or raw.get("record_version", RECORD_VERSION) != RECORD_VERSION
                                or raw.get("status") not in FINISHED):
            continue  # not a record (a manifest), one of another record format, or unfinished
        try:
            record = read_strict(path)
        except FileNotFoundError:
            continue
        except RecordError as err:  # truncated, NaN, no metrics: named, never used
            warn(err, "skipped, not used")
            continue
        index.setdefault(_key(record["spec"]), []).append((path, record))
    return index

def _describe(fields_: dict) -> str:
    keys = ("dataset", "protocol", "level", "n_clients", "seed", "method", "reproduction")
    return ", ".join(f"{k}={fields_[k]!r}" for k in keys if k in fields_)

def find(specs, folder) -> tuple[list[dict], list]:
    """Each spec's finished record in ``folder`` (status in :data:`FINISHED`),
    matched by :func:`spec_fields`, never by file name: (the records found, the specs without
    one), both in the order of ``specs``. The folder is read once. Files that are not finished
    records are ignored, and so are records that name another ``record_version`` than
    :data:`RECORD_VERSION`; an absent folder holds no record. A file that is a record of this
    format but fails :func:`read_strict` (truncated, NaN, no metrics) is named on stderr and
    skipped, never used.

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
