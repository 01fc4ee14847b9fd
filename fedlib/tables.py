"""The paper-table registry: what the grid command (``python -m fedlib.grid``) runs, in one place.

A paper table is one :class:`PaperTable` entry: its name on the command line, what it
reproduces, its notebook, its default params file, the committed records folder the report
reads, the filters the command accepts, and the two functions the command calls — ``grid``
(params -> RunSpecs) and ``label`` (RunSpec -> the row its progress lines print). Packages
register their tables under the entry-point group :data:`GROUP` (each entry point an iterable
of PaperTable); :func:`load_tables` reads them all, so the core imports nothing of the packages
that define tables (the workbook's: ``workbook.paper_tables``, declared in ``pyproject.toml``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .validation import fail

__all__ = ["PaperTable", "GROUP", "FILTERS", "load_tables"]

GROUP = "fedlib.tables"
"""The entry-point group of the paper tables: each entry point names an iterable of PaperTable."""

FILTERS = ("seeds", "methods", "alphas", "levels", "settings", "iid_fractions", "datasets", "n_clients",
           "reproductions")
"""The filters the grid command knows (``--seeds`` … ``--reproductions``): a table accepts a subset
(:attr:`PaperTable.filters`); ``alphas``, ``levels`` and ``iid_fractions`` read the spec's level,
``settings`` its protocol."""


@dataclass(frozen=True)
class PaperTable:
    """One paper table's registry entry.

    name : its name on the command line, e.g. ``'psi-pfl'``, ``'clust-psi-pfl-table3'``.
    paper : one line, what it reproduces and what its grid crosses.
    notebook : the notebook that reads its records, e.g. ``'07_psi_pfl'`` (``notebooks/<notebook>.ipynb``).
    params : its default params file, relative to the checkout, e.g. ``'params/paper/07_psi_pfl.yaml'``.
    records : the committed records folder (relative to the checkout) its notebook and the report
        read, or None (none is committed).
    filters : the names of :data:`FILTERS` the command accepts for it, e.g. ``('seeds', 'methods')``.
    grid : ``grid(params) -> list[RunSpec]``: its runs from a params dict (holding ``grid_params``).
    label : ``label(spec) -> str``: a run's row as the progress lines print it, e.g. ``'fedprism (full)'``.
    grid_params : the params keys ``grid`` reads (a params file lacking one is refused).
    paper_values : the path of the paper's data file, e.g. ``'workbook/papers/cafa.yaml'``, or None
        (a table of the workbook's own study).
    cells : ``cells() -> list``: the table's cells that a report reads, each with its readings and
        the reasons a row may differ (the workbook's ``report_cells.Cell``); None: no cell.
    """

    name: str
    paper: str
    notebook: str
    params: str
    records: str | None
    filters: tuple[str, ...]
    grid: Callable[[dict], list]
    label: Callable[[Any], str]
    grid_params: tuple[str, ...]
    paper_values: str | None = None
    cells: Callable[[], list] | None = None

    def __post_init__(self):
        for field in ("name", "paper", "notebook", "params"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip():
                fail(f"PaperTable.{field}", "a non-empty str", value)
        for field in ("records", "paper_values"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                fail(f"PaperTable.{field} of {self.name!r}", "a non-empty path relative to the checkout, or None",
                     value)
        if not isinstance(self.filters, tuple) or not self.filters or any(f not in FILTERS for f in self.filters):
            fail(f"PaperTable.filters of {self.name!r}", f"a non-empty tuple of names of {list(FILTERS)}",
                 self.filters)
        for field in ("grid", "label", "cells"):
            if not callable(getattr(self, field)) and not (field == "cells" and self.cells is None):
                fail(f"PaperTable.{field} of {self.name!r}", "a callable", getattr(self, field))
        if (not isinstance(self.grid_params, tuple) or not self.grid_params
                or not all(isinstance(k, str) and k for k in self.grid_params)):
            fail(f"PaperTable.grid_params of {self.name!r}", "a non-empty tuple of params keys", self.grid_params)


@functools.lru_cache(maxsize=1)
def _registered() -> tuple[tuple[str, tuple], ...]:
    """(where, its entries) of each entry point of :data:`GROUP`, looked up and loaded once per
    process: ``importlib.metadata.entry_points`` reads every installed distribution's metadata on
    each call (about 30 ms), and the report and the plan ask for the tables once per row."""
    from importlib.metadata import entry_points as _entry_points

    return tuple((f"entry point {ep.name} = {ep.value}", tuple(ep.load())) for ep in _entry_points(group=GROUP))


def load_tables(extra: Iterable[PaperTable] = (), *, entry_points: bool = True) -> dict[str, PaperTable]:
    """Every registered paper table, name -> :class:`PaperTable`, in registration order: those of
    each entry point of :data:`GROUP` (if ``entry_points``; read once per process), then ``extra`` (e.g. a test's toy
    table). A name registered twice, or an entry that is not a PaperTable, is a ValueError naming
    both places."""
    sources: list[tuple[str, Iterable]] = list(_registered()) if entry_points else []
    sources.append(("extra=", extra))
    tables: dict[str, PaperTable] = {}
    where: dict[str, str] = {}
    for source, entries in sources:
        for table in entries:
            if not isinstance(table, PaperTable):
                fail(f"a table of {source}", "a fedlib.tables.PaperTable", table)
            if table.name in tables:
                fail(f"table {table.name!r} of {source}",
                     f"a name no other table has (it is also registered by {where[table.name]})", table.name)
            tables[table.name] = table
            where[table.name] = source
    return tables
