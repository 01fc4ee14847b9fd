"""The paper-table registry (fedlib.tables, workbook.paper_tables): a toy table registered as one
entry is listed, filtered and run by the grid command's own code path; every registered table
names files that exist; Table III's grid finds the committed records; fedlib imports nothing of
workbook."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
from pathlib import Path

import pytest
import yaml

import record_fakes
from fedlib import grid_cli
from fedlib.spec import RunSpec
from fedlib.tables import PaperTable, load_tables

ROOT = Path(__file__).resolve().parents[1]


def _toy_grid(params: dict) -> list:
    """Two tiny runs on adult: FedAvg at each of the params' seeds."""
    return [RunSpec(dataset="adult", protocol="dirichlet", level=0.5, n_clients=4, seed=s, method="fedavg",
                    n_train=200, fl={"rounds": 1, "local_epochs": 1}) for s in params["seeds"]]


TOY = PaperTable(name="toy", paper="a toy table: FedAvg × seeds", notebook="05_training", params="params/toy.yaml",
                 records=None, filters=("seeds", "methods"), grid=_toy_grid, label=lambda spec: f"toy-{spec.method}",
                 grid_params=("seeds",))


@pytest.fixture
def toy_params(tmp_path) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump({"seeds": [0, 1], "device": "cpu"}))
    return path


def test_a_toy_table_is_listed_selected_and_named_by_the_command(tmp_path, toy_params, capsys):
    tables = load_tables(extra=[TOY], entry_points=False)
    assert list(tables) == ["toy"]
    grid_cli.main(["--tables"], tables=tables)
    out = capsys.readouterr().out
    assert "  toy\n" in out and "a toy table" in out and "notebooks/05_training.ipynb" in out
    specs = grid_cli.select("toy", grid_cli.load_params("toy", toy_params, tables), seeds=[1], tables=tables)
    assert [s.seed for s in specs] == [1]
    grid_cli.main(["toy", "--out", str(tmp_path / "r"), "--params", str(toy_params), "--list"], tables=tables)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("adult (Dirichlet α = 0.5) K=4 toy-fedavg seed=0: to compute")
    assert lines[-1].startswith("totals: 2 runs, 0 recorded, 0 running elsewhere, 2 to compute")
    with pytest.raises(ValueError, match=r"--alphas must be left out for toy \(its filters: --seeds, --methods\)"):
        grid_cli.select(TOY, {"seeds": [0]}, alphas=[0.5])
    with pytest.raises(ValueError, match=r"params must be a params file of table toy \(it lacks \['seeds'\]\)"):
        bad = tmp_path / "bad.yaml"
        bad.write_text("device: cpu\n")
        grid_cli.load_params(TOY, bad)


def test_a_toy_table_runs_through_run_table(tmp_path, toy_params, monkeypatch):
    run = importlib.import_module("fedlib.run")
    monkeypatch.setattr(run, "run", lambda spec, device="auto": record_fakes.record(spec))
    lines = []
    result = grid_cli.run_table(TOY, tmp_path / "r", params=toy_params, device="cpu", echo=lines.append,
                                progress="off")
    assert len(result["computed"]) == 2 and lines[0] == f"toy: 2 runs, 0 already recorded in {tmp_path / 'r'}, 2 to compute"
    assert lines[1].startswith("adult (Dirichlet α = 0.5) K=4 toy-fedavg seed=0: ok in ")
    grid_cli._PROGRESS = "rounds"


def test_a_name_registered_twice_and_a_bad_entry_are_refused():
    with pytest.raises(ValueError, match=r"table 'toy' of extra= must be a name no other table has \(it is also "
                                         r"registered by extra=\)"):
        load_tables(extra=[TOY, TOY], entry_points=False)
    with pytest.raises(ValueError, match=r"a table of extra= must be a fedlib.tables.PaperTable, got 'toy'"):
        load_tables(extra=["toy"], entry_points=False)
    fields = dict(name="x", paper="p", notebook="05_training", params="params/x.yaml", records=None,
                  filters=("seeds",), grid=_toy_grid, label=str, grid_params=("seeds",))
    with pytest.raises(ValueError, match=r"PaperTable.filters of 'x' must be a non-empty tuple of names of .*, got "
                                         r"\('seed',\)"):
        PaperTable(**{**fields, "filters": ("seed",)})
    with pytest.raises(ValueError, match=r"PaperTable.grid of 'x' must be a callable, got 1"):
        PaperTable(**{**fields, "grid": 1})
    with pytest.raises(ValueError, match=r"PaperTable.name must be a non-empty str, got ''"):
        PaperTable(**{**fields, "name": ""})


def _workbook_tables() -> dict:
    from workbook.paper_tables import TABLES

    return {t.name: t for t in TABLES}


@pytest.mark.parametrize("name", list(_workbook_tables()))
def test_every_registered_table_names_files_that_exist(name):
    t = _workbook_tables()[name]
    assert t.records is None or (ROOT / t.records).is_dir(), t.records
    assert (ROOT / "notebooks" / f"{t.notebook}.ipynb").is_file(), t.notebook
    assert (ROOT / t.params).is_file(), t.params
    assert t.paper_values is None or (t.paper_values.startswith("workbook/papers/") and t.paper_values.endswith(".yaml"))
    study = importlib.import_module(f"workbook.{t.grid.__self__.module}")  # its study module
    assert t.grid_params == study.GRID_PARAMS and callable(study.grid_label)
    keywords = [k for k, v in inspect.signature(study.notebook_grid).parameters.items() if v.kind is v.KEYWORD_ONLY]
    assert sorted(keywords) == sorted(t.grid_params)
    assert set(t.grid_params) <= set(yaml.safe_load((ROOT / t.params).read_text()))


def test_the_registry_is_the_workbook_entry_point():
    registered = grid_cli.registry()
    assert list(_workbook_tables()) == [n for n in registered if n in _workbook_tables()]
    assert "clust-psi-pfl-table3" in registered


def test_table3_grid_holds_the_scripts_runs_and_finds_every_committed_record():
    """clust-psi-pfl-table3's grid holds benchmarks/table3_like_for_like.py's default runs, key for
    key, at all nine FMNIST settings of Table III; the committed records are found by it."""
    from fedlib.grid import present_records
    from fedlib.spec import grid_specs
    from workbook import like_for_like, paper_table3

    t = _workbook_tables()["clust-psi-pfl-table3"]
    params = grid_cli.load_params(t)
    specs = grid_cli.select(t, params)
    assert {(s.protocol, s.level) for s in specs} == set(paper_table3.SETTINGS)
    default = grid_specs(["fmnist"], {"similarity": [0.0, 1.0], "dirichlet": [0.3]}, [100], [0],
                         list(like_for_like.METHODS), fl={"rounds": 40, "local_epochs": 5, "fraction": 0.5},
                         reproductions=["paper_text", "paper_code"])
    part = grid_cli.select(t, params, seeds=[0], settings=["similarity", "dirichlet"], levels=[0.0, 1.0, 0.3])
    assert sorted(s.key() for s in part) == sorted(s.key() for s in default)
    found, _ = present_records(specs, ROOT / t.records)
    committed = [json.loads(p.read_text()) for p in (ROOT / t.records).glob("*.json")]
    assert len(found) == len(committed) > 0


def _imported_names(tree) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            names.append(str(node.args[0].value))
        elif isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and str(v.value).startswith("workbook.")
                                                     for v in node.values):
            names.append("workbook (an f-string module name)")
    return names


def test_fedlib_imports_nothing_of_workbook():
    offenders = {}
    for path in sorted((ROOT / "fedlib").rglob("*.py")):
        bad = [n for n in _imported_names(ast.parse(path.read_text())) if n.split(".")[0] == "workbook"
               or n.startswith("workbook ")]
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert not offenders, offenders


def test_a_table_whose_study_lacks_the_workbooks_extra_names_the_install(monkeypatch):
    """The grid command is the core's; a workbook table's grid imports its study, whose plotting
    dependencies are the workbook extra's: a missing one is named with the install that fixes it."""
    import importlib

    from workbook import paper_tables

    real = importlib.import_module

    def without_matplotlib(name, *a, **k):
        if name.startswith("workbook.") and name != "workbook.paper_tables":
            raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
        return real(name, *a, **k)

    monkeypatch.setattr(paper_tables.importlib, "import_module", without_matplotlib)
    table = next(t for t in paper_tables.TABLES if t.name == "psi-pfl")
    with pytest.raises(ModuleNotFoundError, match=r"'matplotlib'.*pip install 'fedlib\[workbook\]'"):
        table.grid({})


def test_the_reports_cells_come_from_the_registry_in_the_papers_order():
    """Each paper table's entry holds its report cells; the report reads them from the registry,
    Clust-PSI-PFL's Table III first (the report's paper order), every cell once."""
    from fedlib.tables import load_tables
    from workbook import report_cells

    tables = {name: t for name, t in load_tables().items() if t.cells is not None}
    assert set(tables) == {"clust-psi-pfl-table3", "psi-pfl", "cafa-table4", "fedprism-table1", "fedprism-table9",
                           "pfedlia-table1"}
    cells = report_cells.cells()
    assert [c.paper for c in cells] == sorted((c.paper for c in cells), key=list(report_cells.PAPERS).index)
    assert len(cells) == sum(len(t.cells()) for t in tables.values())
    assert {c.table for c in tables["fedprism-table9"].cells()} == {"Table 9"}
    with pytest.raises(ValueError, match="PaperTable.cells"):
        dataclasses.replace(tables["psi-pfl"], cells="not a function")
