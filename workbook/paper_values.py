"""The seed papers' published values and headline claims, read from data files.

One YAML file per paper under ``workbook/papers/`` (package data): ``clust_psi_pfl.yaml``,
``psi_pfl.yaml``, ``cafa.yaml``, ``fedprism.yaml``, ``pfedlia.yaml``. Each holds

* ``paper`` (the file's own key), ``title`` and ``text``: the paper's machine-converted text in
  ``../shared/seeds`` (:data:`workbook.paper_claims.SEED_FILES`), whose line numbers ``line`` cites;
* ``tables``: name -> a block of the paper's values, each with its ``source``: ``ref`` (the table,
  figure or section), ``page`` (the PDF page, or null: the seed texts are conversions without page
  breaks, and no page is ever guessed) and ``line`` (the line of the seed text, or null for a
  value from outside the paper, which ``ref`` then names). A block is ``columns`` (one label each)
  and ``rows``: each row a ``key`` (a string, number or list: a list becomes a tuple), the
  paper's ``row`` label, its own ``line`` where the text has one, and ``values``, one cell per
  column: a number, a list of numbers (mean and sd) or null (the paper's "–");
* ``claims``: the paper's headline claims (:mod:`workbook.paper_claims` builds and tests them):
  ``short``, ``quote``, ``source``, ``statement``, ``kind`` and the report readings ``a`` and
  ``b`` (``table``, ``row``, ``column``, ``reading``; ``b`` null: A against the paper's value).

:func:`load` reads a file with ``yaml.safe_load`` (data only: a tag such as ``!!python/object``
is refused, nothing is ever executed) and checks its whole schema before anything uses it: every
key known and present, every number finite, every type as above. A bad file is a ValueError
(:func:`fedlib.validation.fail`) naming the file, the key, what is allowed (the fix) and the value.
The studies turn the blocks into their constants (:func:`rows`, :func:`column_labels`) with the
shapes they always had (tuples, tuple keys, float vs int as written in the file).
"""
from __future__ import annotations

import copy
import math
from functools import lru_cache
from pathlib import Path

from fedlib.validation import fail

__all__ = ["PAPERS_DIR", "PAPER_FILES", "path_of", "check", "load", "block", "rows", "column_labels", "source_of", "claims",
           "spread_of", "runs_of"]

PAPERS_DIR = Path(__file__).resolve().parent / "papers"
"""The folder of the paper files (shipped as package data)."""
PAPER_FILES = ("clust_psi_pfl", "psi_pfl", "cafa", "fedprism", "pfedlia")
"""The paper keys, one file ``<key>.yaml`` each."""

_TOP = {"paper": str, "title": str, "text": str, "tables": dict, "claims": list}
_SOURCE_REQUIRED, _SOURCE_OPTIONAL = ("ref", "page"), ("line", "note")
_BLOCK_REQUIRED, _BLOCK_OPTIONAL = ("source", "columns", "rows"), ("unit", "key", "note", "spread", "runs")
_ROW_REQUIRED, _ROW_OPTIONAL = ("key", "values"), ("row", "line", "note")
_CLAIM_REQUIRED, _CLAIM_OPTIONAL = ("short", "quote", "source", "statement", "kind", "a"), ("b", "cases")
_READING = ("table", "row", "column", "reading")
_B_OPTIONAL = ("kind",)
_CASE_REQUIRED, _CASE_OPTIONAL = ("column",), ("table",)
_SPREAD, _RUNS = ("sd", "line"), ("n", "line")


# ----------------------------------------------------------------------------- checks
def _where(file: str, key: str) -> str:
    return f"{file}: {key}" if key else file


def _fix(what: str, file: str) -> str:
    return f"{what} (fix it in {file})"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _keys(d, file: str, key: str, required, optional=()) -> dict:
    """``d`` a mapping with every key of ``required`` and no key outside ``required + optional``."""
    if not isinstance(d, dict):
        fail(_where(file, key), _fix(f"a mapping with keys {list(required)}", file), d)
    for k in required:
        if k not in d:
            fail(_where(file, f"{key}.{k}" if key else k), _fix("present (a required key)", file), None)
    for k in d:
        if k not in required and k not in optional:
            fail(_where(file, f"{key}.{k}" if key else str(k)),
                 _fix(f"one of the known keys {list(required) + list(optional)}", file), k)
    return d


def _string(v, file: str, key: str) -> str:
    if not isinstance(v, str) or not v.strip():
        fail(_where(file, key), _fix("a non-empty string", file), v)
    return v


def _line(v, file: str, key: str, name: str) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        fail(_where(file, key), _fix(f"an integer ≥ 1 ({name}) or null where none can be given; never guessed", file),
             v)


def _source(s, file: str, key: str) -> None:
    _keys(s, file, key, _SOURCE_REQUIRED, _SOURCE_OPTIONAL)
    _string(s["ref"], file, f"{key}.ref")
    _line(s["page"], file, f"{key}.page", "the PDF page")
    _line(s.get("line"), file, f"{key}.line", "the line of the seed text")
    if "note" in s:
        _string(s["note"], file, f"{key}.note")


def _scalar_or_list(v, file: str, key: str) -> None:
    """A column label or row key: a string, a finite number, or a non-empty list of those."""
    items = v if isinstance(v, list) and v else [v]
    for x in items:
        if not (isinstance(x, str) and x) and not _is_number(x):
            fail(_where(file, key), _fix("a string, a finite number or a list of them", file), v)


def _cell(v, file: str, key: str) -> None:
    """A value: a finite number, a non-empty list of finite numbers (mean, sd) or null ("–")."""
    if v is None or _is_number(v):
        return
    if isinstance(v, list) and v and all(_is_number(x) for x in v):
        return
    fail(_where(file, key), _fix("a finite number, a list of finite numbers (e.g. [mean, sd]) or null for the "
                                 "paper's '–' (YAML reads 1e-5 as a string: write 1.0e-05)", file), v)


def _block(b, file: str, key: str) -> None:
    _keys(b, file, key, _BLOCK_REQUIRED, _BLOCK_OPTIONAL)
    _source(b["source"], file, f"{key}.source")
    for k in ("unit", "note"):
        if k in b and not isinstance(b[k], str):
            fail(_where(file, f"{key}.{k}"), _fix("a string", file), b[k])
    if "key" in b:
        _scalar_or_list(b["key"], file, f"{key}.key")
    if "spread" in b:
        _keys(b["spread"], file, f"{key}.spread", _SPREAD, ("note",))
        if not _is_number(b["spread"]["sd"]) or b["spread"]["sd"] <= 0:
            fail(_where(file, f"{key}.spread.sd"), _fix("a finite number > 0 (the printed sd)", file), b["spread"]["sd"])
        _line(b["spread"]["line"], file, f"{key}.spread.line", "the line of the seed text")
    if "runs" in b:
        _keys(b["runs"], file, f"{key}.runs", _RUNS, ("note",))
        n = b["runs"]["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            fail(_where(file, f"{key}.runs.n"), _fix("an integer ≥ 1 (the runs each cell averages)", file), n)
        _line(b["runs"]["line"], file, f"{key}.runs.line", "the line of the seed text")
    cols = b["columns"]
    if not isinstance(cols, list) or not cols:
        fail(_where(file, f"{key}.columns"), _fix("a non-empty list of column labels", file), cols)
    for i, c in enumerate(cols):
        _scalar_or_list(c, file, f"{key}.columns[{i}]")
    if not isinstance(b["rows"], list) or not b["rows"]:
        fail(_where(file, f"{key}.rows"), _fix("a non-empty list of rows", file), b["rows"])
    seen = set()
    for i, r in enumerate(b["rows"]):
        rk = f"{key}.rows[{i}]"
        _keys(r, file, rk, _ROW_REQUIRED, _ROW_OPTIONAL)
        _scalar_or_list(r["key"], file, f"{rk}.key")
        hashable = _hashable(r["key"])
        if hashable in seen:
            fail(_where(file, f"{rk}.key"), _fix("a key no other row of the block has", file), r["key"])
        seen.add(hashable)
        if "row" in r:
            _string(r["row"], file, f"{rk}.row")
        _line(r.get("line"), file, f"{rk}.line", "the line of the seed text")
        vals = r["values"]
        if not isinstance(vals, list) or len(vals) != len(cols):
            fail(_where(file, f"{rk}.values"), _fix(f"a list of {len(cols)} cells, one per column", file), vals)
        for j, v in enumerate(vals):
            _cell(v, file, f"{rk}.values[{j}]")


def _reading(r, file: str, key: str, optional=()) -> None:
    _keys(r, file, key, _READING, optional)
    for k in _READING + tuple(optional):
        if k in r:
            _string(r[k], file, f"{key}.{k}")


def _claim(c, file: str, key: str) -> None:
    _keys(c, file, key, _CLAIM_REQUIRED, _CLAIM_OPTIONAL)
    for k in ("short", "quote", "statement", "kind"):
        _string(c[k], file, f"{key}.{k}")
    _source(c["source"], file, f"{key}.source")
    _reading(c["a"], file, f"{key}.a")
    b = c.get("b")
    if isinstance(b, list):
        if not b:
            fail(_where(file, f"{key}.b"), _fix("null, one reading or a non-empty list of readings", file), b)
        for i, r in enumerate(b):
            _reading(r, file, f"{key}.b[{i}]", _B_OPTIONAL)
    elif b is not None:
        _reading(b, file, f"{key}.b", _B_OPTIONAL)
    if "cases" in c:
        if not isinstance(c["cases"], list) or not c["cases"]:
            fail(_where(file, f"{key}.cases"), _fix("a non-empty list of {table, column}", file), c["cases"])
        for i, case in enumerate(c["cases"]):
            _keys(case, file, f"{key}.cases[{i}]", _CASE_REQUIRED, _CASE_OPTIONAL)
            for k in case:
                _string(case[k], file, f"{key}.cases[{i}].{k}")


def check(data, file: str, paper: str | None = None) -> dict:
    """``data`` (a parsed paper file, ``file`` its name in messages) if its whole schema holds
    (module docstring), else ValueError naming the file, the key, the fix and the value; ``paper``:
    the key the file's ``paper`` must be (a shipped file's own name)."""
    _keys(data, file, "", tuple(_TOP))
    for k, t in _TOP.items():
        if not isinstance(data[k], t):
            fail(_where(file, k), _fix(f"a {t.__name__}", file), data[k])
    for k in ("paper", "title", "text"):
        _string(data[k], file, k)
    if paper is not None and data["paper"] != paper:
        fail(_where(file, "paper"), _fix(f"the file's own key {paper!r}", file), data["paper"])
    for name, b in data["tables"].items():
        _string(name, file, "tables")
        _block(b, file, f"tables.{name}")
    for i, c in enumerate(data["claims"]):
        _claim(c, file, f"claims[{i}]")
    return data


# ----------------------------------------------------------------------------- reading
def path_of(paper) -> Path:
    """The file of ``paper``: a key of :data:`PAPER_FILES`, or a path to a ``.yaml`` file."""
    if isinstance(paper, Path) or (isinstance(paper, str) and paper.endswith((".yaml", ".yml"))):
        return Path(paper)
    if paper not in PAPER_FILES:
        fail("paper", f"one of {list(PAPER_FILES)} or a path to a paper file", paper)
    return PAPERS_DIR / f"{paper}.yaml"


@lru_cache(maxsize=None)
def _load(path: str) -> dict:
    import yaml

    p = Path(path)
    if not p.is_file():
        fail("paper file", "an existing file (workbook/papers/<paper>.yaml, shipped with the package)", path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:  # a !!python/object tag, a syntax error: data only, nothing executed
        fail(_display(p), _fix("plain YAML data (no tags such as !!python/object, valid syntax)", _display(p)),
             " ".join(str(e).split()))
    return check(data, _display(p), p.stem if _shipped(p) else None)


def _shipped(p: Path) -> bool:
    return p.resolve().parent == PAPERS_DIR


def _display(p: Path) -> str:
    """How messages name a file: ``workbook/papers/cafa.yaml`` for a shipped one, else its path."""
    return f"workbook/papers/{p.name}" if _shipped(p) else str(p)


def load(paper) -> dict:
    """The checked contents of ``paper``'s file (:func:`path_of`), read once per file (a copy:
    callers may change it)."""
    return copy.deepcopy(_load(str(path_of(paper).resolve())))


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def _cell_value(v):
    return tuple(v) if isinstance(v, list) else v


def block(paper, name: str) -> dict:
    """The block ``tables.<name>`` of ``paper``'s file."""
    tables = load(paper)["tables"]
    if name not in tables:
        where = _display(path_of(paper))
        fail(f"{where}: tables", _fix(f"a file with the block {name!r} (it has {sorted(tables)})", where), name)
    return tables[name]


def rows(paper, name: str) -> dict:
    """Block ``name`` of ``paper`` as {row key: tuple of its cells}, in the file's order: a list
    key becomes a tuple, a list cell (mean, sd) a tuple, null stays None."""
    return {_hashable(r["key"]): tuple(_cell_value(v) for v in r["values"]) for r in block(paper, name)["rows"]}


def column_labels(paper, name: str) -> list:
    """Block ``name``'s column labels, a list label as a tuple."""
    return [_hashable(c) for c in block(paper, name)["columns"]]


def source_of(paper, name: str) -> dict:
    """Block ``name``'s ``source`` (ref, page, line)."""
    return block(paper, name)["source"]


def claims(paper) -> list[dict]:
    """The ``claims`` of ``paper``'s file, in order."""
    return load(paper)["claims"]


def spread_of(paper, name: str) -> float | None:
    """Block ``name``'s ``spread.sd`` (the sd its caption prints for every cell), or None."""
    sp = block(paper, name).get("spread")
    return None if sp is None else float(sp["sd"])


def runs_of(paper, name: str) -> int | None:
    """Block ``name``'s ``runs.n`` (the runs each of its cells averages), or None (not stated)."""
    r = block(paper, name).get("runs")
    return None if r is None else int(r["n"])
