"""Finding a spec's record in a folder by the fields of the spec it ran, never by file name.

A record's file name is its spec's key (:meth:`fedlib.spec.RunSpec.key`), a hash that includes
fedlib's version, so a lookup by file name finds nothing after a version bump. Every reader and
writer of a records folder (``run_grid`` and ``--list`` deciding what is recorded, the report,
the notebooks, a grid's ``present_records``) finds a spec's record here instead:

* :func:`spec_fields` — the fields that identify a run, normalised for comparison;
* :func:`where` — each spec's record file in a folder (None: not recorded);
* :func:`find` — each spec's finished record in a folder;
* :func:`load` — every finished record in a folder (:func:`refused`: the files it leaves out).

Layers: above :mod:`fedlib.spec` (the fields' defaults) and :mod:`fedlib.records` (reading).
"""
from __future__ import annotations

from pathlib import Path

from .records import FINISHED, RECORD_VERSION, RecordError, normalised_fields, read, read_strict, read_valid, warn
from .spec import RunSpec
from .validation import fail

__all__ = ["spec_fields", "where", "find", "load", "refused"]


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

_SEEN: dict = {}  # str(path) -> ((mtime_ns, size, inode), the record's _key or None, why it was refused or None)

def _key_of(path: Path) -> tuple:
    """(the :func:`_key` of the finished record in ``path``, None) — (None, why) for a file that
    fails :func:`read_strict` (named on stderr) and is a record (it has a ``spec``, ``status`` or
    ``record_version``) or no JSON at all; (None, None) for anything else (a manifest, a benchmark's
    timings, a file that is gone)."""
    try:
        return _key(read_strict(path)["spec"]), None
    except FileNotFoundError:
        return None, None
    except RecordError as err:
        raw = read(path)  # None: not JSON (truncated)
        if raw is None or {"spec", "status", "record_version"} & set(raw):
            warn(err, "skipped, not used")
            return None, err.problem
        return None, None

def _scan(folder: Path) -> list:
    """(path, :func:`_key` or None, why refused or None) of every ``*.json`` in ``folder``, in
    file-name order. A file is read again only once it changed (mtime, size, inode): a grid asking
    before every run costs a directory listing."""
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            st = path.stat()
        except OSError:
            continue
        stamp, hit = (st.st_mtime_ns, st.st_size, st.st_ino), _SEEN.get(str(path))
        if hit is None or hit[0] != stamp:
            hit = _SEEN[str(path)] = (stamp, *_key_of(path))
        out.append((path, *hit[1:]))
    return out

def _index(folder: Path) -> dict:
    """:func:`_key` -> [path, …] of every finished record in ``folder``."""
    index: dict = {}
    for path, key, _ in _scan(folder):
        if key is not None:
            index.setdefault(key, []).append(path)
    return index

def refused(folder) -> list:
    """(file, why) of every file in ``folder`` that is a record and fails :func:`read_strict`:
    what :func:`load`, :func:`where` and :func:`find` leave out, for a page to say."""
    return [(path, why) for path, _, why in _scan(Path(folder)) if why is not None]

def _describe(fields_: dict) -> str:
    keys = ("dataset", "protocol", "level", "n_clients", "seed", "method", "reproduction")
    return ", ".join(f"{k}={fields_[k]!r}" for k in keys if k in fields_)

def where(specs, folder) -> list:
    """Each spec's record file in ``folder`` (a Path; None where it has none), in the order of
    ``specs`` (RunSpecs or records' spec dicts): a finished record's (status in :data:`FINISHED`,
    ``record_version`` :data:`RECORD_VERSION`, passing :func:`read_strict`), matched by
    :func:`spec_fields`, never by file name: a record written under another fedlib version
    (another :meth:`RunSpec.key`) is found. Raises ValueError (:func:`fedlib.validation.fail`)
    naming the folder and both files where two records in ``folder`` match one of ``specs``."""
    folder = Path(folder)
    index, out = _index(folder), []
    for spec in specs:
        hits = index.get(_key(spec), [])
        _one(hits, spec, folder)
        out.append(hits[0] if hits else None)
    return out

def _one(hits: list, spec, folder) -> None:
    """ValueError (:func:`fedlib.validation.fail`) naming the folder and the files where ``hits``,
    the records of ``spec``'s run in ``folder``, are more than one."""
    if len(hits) > 1:
        names, fields_, n = [p.name for p in hits], spec_fields(spec), {2: "two"}.get(len(hits), len(hits))
        fail("folder", f"a folder of at most one record per run, but {', '.join(names[:-1])} and {names[-1]} "
             f"{'both' if n == 'two' else 'all'} match the spec ({_describe(fields_)}): {n} records of seed "
             f"{fields_.get('seed')} of one run (e.g. written under two fedlib versions); keep one", str(folder))

def load(folder, consequence: str = "skipped, not used", *, restore_nonfinite: bool = True) -> list[dict]:
    """Every finished record in ``folder`` (passing :func:`read_strict`), in file-name order: the
    one reader of a records folder (the grid's ``load_records``, the report, the notebooks). A file
    that fails the checks is named on stderr with ``consequence`` and left out (:func:`refused`
    lists it); two records of one run are refused, a ValueError naming both files, as by :func:`where`."""
    folder, paths = Path(folder), []
    for path, why in refused(folder):
        warn(RecordError(path, why), consequence)
    for hits in _index(folder).values():
        if len(hits) > 1:  # the spec only names the run in the error
            _one(hits, read(hits[0])["spec"], folder)
        paths += hits
    got = [read_valid(p, consequence=consequence, restore_nonfinite=restore_nonfinite) for p in sorted(paths)]
    return [r for r in got if r is not None]

def find(specs, folder, *, restore_nonfinite: bool = True) -> tuple[list[dict], list]:
    """Each spec's finished record in ``folder`` (:func:`where`; ``restore_nonfinite``:
    :func:`read_strict`'s): (the records found, the specs without one), both in the order of
    ``specs``. Raises ValueError naming both files of a duplicate, as :func:`where` does."""
    specs = list(specs)
    got = [path and read_valid(path, consequence="skipped, not used", restore_nonfinite=restore_nonfinite)
           for path in where(specs, folder)]
    return [r for r in got if r is not None], [s for s, r in zip(specs, got) if r is None]
