"""The workbook's paper tables: one :class:`fedlib.tables.PaperTable` each, what
``python -m fedlib.grid`` runs (registered under the entry-point group ``fedlib.tables`` in
``pyproject.toml``: ``workbook = "workbook.paper_tables:TABLES"``).

Each entry names its study module's grid and label (``notebook_grid``'s part and
``grid_label``); the module is imported only when the command builds or names that table's runs
(importing every study costs seconds), so listing the tables stays cheap. ``grid_params`` is the
study's ``GRID_PARAMS`` (``tests/test_paper_tables.py`` checks they agree).
"""
from __future__ import annotations

import importlib

from fedlib.tables import PaperTable

__all__ = ["TABLES"]


class _Study:
    """The grid and label of one part of a study module's grid, imported on first call:
    ``grid(params) -> list[RunSpec]`` (``notebook_grid(**params[GRID_PARAMS])[part]``) and
    ``label(spec) -> str`` (the module's ``grid_label``)."""

    def __init__(self, module: str, part: str):
        self.module, self.part = module, part

    def _study(self):
        try:
            return importlib.import_module(f"workbook.{self.module}")
        except ModuleNotFoundError as err:  # the workbook's own dependencies are its extra's
            raise ModuleNotFoundError(f"the paper tables' grids import workbook.{self.module}, which needs "
                                      f"{err.name!r}: install the workbook's extra, pip install 'fedlib[workbook]' "
                                      "(or make setup in a clone)", name=err.name) from err

    def grid(self, params: dict) -> list:
        study = self._study()
        return study.notebook_grid(**{k: params[k] for k in study.GRID_PARAMS})[self.part]

    def label(self, spec) -> str:
        return self._study().grid_label(spec)


def _cells(builder: str):
    """``cells() -> list[Cell]``: the report's cells of one table (with their readings and the
    reasons a row may differ), built by ``workbook.report_cells.<builder>`` on first call."""
    def cells() -> list:
        return getattr(importlib.import_module("workbook.report_cells"), builder)()
    return cells


def _table(name: str, module: str, part: str, grid_params: tuple, **fields) -> PaperTable:
    study = _Study(module, part)
    return PaperTable(name=name, grid=study.grid, label=study.label, grid_params=grid_params, **fields)


_PSI_PFL = ("datasets", "alphas", "n_clients", "seeds", "baselines", "hyper", "fl", "n_train", "val_fraction",
            "reproductions")
_CAFA = ("dataset", "n_train", "iid_fractions", "n_clients", "seeds", "methods", "hyper", "fl", "val_fraction",
         "n_global_test", "arch", "reproductions")
_FEDPRISM = ("dataset", "n_train", "n_global_test", "alphas", "partition", "n_clients", "seeds", "methods", "fl",
             "hyper", "cfl_variants", "fedamp_variants", "ablation_alpha", "components", "global_weights",
             "alpha_clips")
_PFEDLIA = ("dataset", "n_train", "settings", "n_clusters", "n_clients", "seeds", "methods", "fl", "hyper",
            "cfl_variants", "arch", "data_split")
_CROSS = ("dataset", "n_train", "n_global_test", "partitions", "n_clients", "seeds", "methods", "fl", "hyper",
          "val_fraction", "arch")
_BEYOND = ("partitions", "small_shares", "n_clients", "seeds", "variants", "fl", "hyper", "n_train", "val_fraction")
_TABLE3 = ("dataset", "settings", "n_clients", "seeds", "methods", "fl", "hyper", "reproductions")

_FEDPRISM_FIELDS = dict(notebook="09_fedprism", params="params/paper/09_fedprism.yaml",
                        filters=("seeds", "methods", "alphas"), paper_values="workbook/papers/fedprism.yaml")

TABLES = (
    _table("psi-pfl", "psi_pfl_study", "comparison", _PSI_PFL,
           paper="PSI-PFL Figs. 5-7 and §4.3: psi_pfl and the baselines × data sets × Dirichlet α × K × seeds",
           notebook="07_psi_pfl", params="params/paper/07_psi_pfl.yaml",
           records="benchmarks/records/psi_pfl/comparison",
           filters=("seeds", "methods", "alphas", "datasets", "n_clients"), paper_values="workbook/papers/psi_pfl.yaml",
           cells=_cells("_psi_pfl_cells")),
    _table("cafa-table4", "cafa_study", "table4", _CAFA,
           paper="CAFA Tables IV–V and Fig. 6: FedAvg, FedProx, CAFA × IID shares × seeds (authors' protocol)",
           notebook="08_cafa", params="params/paper/08_cafa.yaml", records="benchmarks/records/cafa/training",
           filters=("seeds", "methods", "iid_fractions"), paper_values="workbook/papers/cafa.yaml",
           cells=_cells("_cafa_cells")),
    _table("fedprism-table1", "fedprism_study", "table1", _FEDPRISM,
           paper="FedPrism Tables 1, 6, 7: methods × Dirichlet α × seeds, CFL's extra thresholds",
           records="benchmarks/records/fedprism/table1", cells=_cells("_fedprism_cells"), **_FEDPRISM_FIELDS),
    _table("fedprism-table9", "fedprism_study", "table9", _FEDPRISM,
           paper="FedPrism Table 9: the components ablations (FedPrism at the ablation α)",
           records="benchmarks/records/fedprism/table9", cells=_cells("_fedprism_table9_cells"), **_FEDPRISM_FIELDS),
    _table("fedprism-table11", "fedprism_study", "table11", _FEDPRISM,
           paper="FedPrism Table 11: the initial global weights (FedPrism at the ablation α)",
           records=None, **_FEDPRISM_FIELDS),
    _table("pfedlia-table1", "pfedlia_study", "table1", _PFEDLIA,
           paper="pFedLIA Table I and the cluster-recovery table: methods × settings × seeds",
           notebook="10_pfedlia", params="params/paper/10_pfedlia.yaml", records="benchmarks/records/pfedlia/table1",
           filters=("seeds", "methods", "settings"), paper_values="workbook/papers/pfedlia.yaml",
           cells=_cells("_pfedlia_cells")),
    _table("cross-paper", "cross_paper", "cross", _CROSS,
           paper="this workbook's study: every method on every seed paper's partition × seeds "
                 "(--settings: protocols)",
           notebook="11_cross_paper", params="params/paper/11_cross_paper.yaml",
           records="benchmarks/records/cross_paper", filters=("seeds", "methods", "settings")),
    _table("beyond-label", "beyond_label", "study", _BEYOND,
           paper="this workbook's study: the variants × the partitions beyond label skew × seeds "
                 "(--settings: protocols)",
           notebook="12_beyond_label_skew", params="params/paper/12_beyond_label_skew.yaml",
           records="benchmarks/records/beyond_label", filters=("seeds", "methods", "settings", "datasets")),
    _table("clust-psi-pfl-table3", "like_for_like", "table3", _TABLE3,
           paper="Clust-PSI-PFL Table III, FMNIST column like for like: methods × settings × readings "
                 "paper_text/paper_code × seeds (--settings: protocols, --levels: S or α)",
           notebook="06_tables_and_ecdfs", params="params/tables/clust_psi_pfl_table3.yaml",
           records="benchmarks/records/clust_psi_pfl/table3_like_for_like",
           filters=("seeds", "methods", "settings", "levels", "reproductions"),
           paper_values="workbook/papers/clust_psi_pfl.yaml", cells=_cells("_table3_cells")),
)
"""The workbook's paper tables, in the order the grid command lists them."""
