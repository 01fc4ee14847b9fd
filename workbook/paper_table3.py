"""Clust-PSI-PFL's Table III as published (K = 100, mean ± sd over five seeds): the FMNIST and
ACSIncome columns, for printing the paper's value beside ours (notebook 06,
``benchmarks/table3_like_for_like.py``, ``benchmarks/fmnist_trends.py``).

Transcribed from the paper (``../shared/seeds``, Table III: "Global test accuracy … for K = 100")
into ``workbook/papers/clust_psi_pfl.yaml`` (blocks table3_fmnist, table3_acs_income, table3_cl;
read by :mod:`workbook.paper_values`); settings are (protocol, level). ACSIncome has six values
per row: its three most skewed Dirichlet settings (α ≤ 0.2) are the table's "—" (infeasible for
two classes; null in the file), so its columns are α ∈ {50, 0.7, 0.3} and S ∈ {1, 0.03, 0}. The workbook's offline stand-in for ACSIncome is
``adult`` (:data:`STAND_INS`): its numbers are printed beside ACSIncome's, labelled as such.
"""
from __future__ import annotations

from . import paper_values

__all__ = ["SETTINGS", "TABLE3", "TABLE3_SD", "STAND_INS", "paper_value"]

SETTINGS = tuple(paper_values.column_labels("clust_psi_pfl", "table3_fmnist"))
"""Table III's columns, (protocol, level), in the paper's order."""


def _column(block: str, cl_column: str) -> tuple[dict, dict]:
    """Block ``block`` of clust_psi_pfl.yaml as (means, sds): method -> {(protocol, level): value}
    over the settings the column has a value at (ACSIncome: no "—"), then "cl" (the table's one
    CL value per data set, block table3_cl, column ``cl_column``) at each of those settings."""
    cells = paper_values.rows("clust_psi_pfl", block)
    settings = paper_values.column_labels("clust_psi_pfl", block)
    present = [s for j, s in enumerate(settings) if any(v[j] is not None for v in cells.values())]
    mean = {m: {s: c[0] for s, c in zip(settings, v) if c is not None} for m, v in cells.items()}
    sd = {m: {s: c[1] for s, c in zip(settings, v) if c is not None} for m, v in cells.items()}
    cl = dict(zip(paper_values.column_labels("clust_psi_pfl", "table3_cl"),
                  paper_values.rows("clust_psi_pfl", "table3_cl")["cl"]))[cl_column]
    mean["cl"], sd["cl"] = {s: cl[0] for s in present}, {s: cl[1] for s in present}
    return mean, sd


_FMNIST, _FMNIST_SD = _column("table3_fmnist", "fmnist")
_ACS, _ACS_SD = _column("table3_acs_income", "acs_income")

TABLE3 = {"fmnist": _FMNIST, "acs_income": _ACS}
"""paper data set → method → {(protocol, level): the paper's mean global accuracy at K = 100}."""

TABLE3_SD = {"fmnist": _FMNIST_SD, "acs_income": _ACS_SD}
"""paper data set → method → {(protocol, level): the "±" Table III prints beside that mean (the
standard deviation over its five seeds; CL: 0.02 in both columns)}."""

STAND_INS = {"fmnist": "fmnist", "adult": "acs_income"}
"""Workbook data set → the paper's data set whose Table III column it is compared with."""


def paper_value(dataset: str, method: str, protocol: str, level: float) -> float | None:
    """The paper's K = 100 value for the workbook data set ``dataset`` (through
    :data:`STAND_INS`), or None where the table has none."""
    column = TABLE3.get(STAND_INS.get(dataset, dataset), {})
    return column.get(method, {}).get((protocol, float(level)))
