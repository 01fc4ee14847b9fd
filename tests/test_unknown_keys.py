"""Issue 60, item 5: a key that names nothing is an error, never a silent default."""
from pathlib import Path

import pytest
import yaml

from fedlib import experiment as X
from fedlib import notebook_params

ROOT = Path(__file__).resolve().parent.parent
GRID = (["adult"], {"dirichlet": [0.5]}, [4], [0])


def test_a_typo_in_hyper_is_refused():
    with pytest.raises(ValueError, match=r"hyper key must be a known method .*fedprox.*, got 'fedprx'"):
        X.grid_specs(*GRID, ["fedprox"], hyper={"fedprx": {"mu": 0.1}})


def test_a_typo_in_n_train_is_refused():
    with pytest.raises(ValueError, match=r"n_train key must be a known data set .*adult.*, got 'adlt'"):
        X.grid_specs(*GRID, ["fedprox"], n_train={"adlt": 2000})


def test_the_issues_probe_is_refused():
    with pytest.raises(ValueError, match="fedprx"):
        X.grid_specs(*GRID, ["fedprox"], hyper={"fedprx": {"mu": 0.1}}, n_train={"adlt": 2000})


def test_a_typo_in_val_fraction_is_refused():
    with pytest.raises(ValueError, match=r"val_fraction key must be a known method .*, got 'psi_pfI'"):
        X.grid_specs(*GRID, ["psi_pfl"], val_fraction={"psi_pfI": 0.1})


def test_a_bad_n_train_value_in_a_dict_is_refused():
    with pytest.raises(ValueError, match=r"n_train\['adult'\] must be an integer ≥ 1"):
        X.grid_specs(*GRID, ["fedavg"], n_train={"adult": 0})


def test_an_empty_method_list_is_refused():
    with pytest.raises(ValueError, match=r"methods must be a non-empty list of methods .*fedavg.*, got \[\]"):
        X.grid_specs(*GRID, [])


def test_known_keys_still_apply():
    (spec,) = X.grid_specs(*GRID, ["fedprox"], hyper={"fedprox": {"mu": 0.1}, "cfl": {"eps1": 0.4}},
                           n_train={"adult": 2000, "fmnist": 1000}, val_fraction={"fedprox": 0.1})
    assert (spec.hyper, spec.n_train, spec.val_fraction) == ({"mu": 0.1}, 2000, 0.1)


@pytest.mark.parametrize("path", sorted((ROOT / "params").glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_committed_params_file_loads(path):
    if path.parent.name == "tables":  # a paper table's own params (workbook.paper_tables): the grid command's reader
        from fedlib import grid_cli

        (table,) = [t for t in grid_cli.registry().values() if t.params == f"params/tables/{path.name}"]
        assert grid_cli.load_params(table) == yaml.safe_load(path.read_text())
        return
    if path.parent.name == "designs":  # a design of a notebook's grid: <notebook>_<design>.yaml
        notebook = next(n.stem for n in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                        if path.stem.startswith(n.stem + "_"))
        p = notebook_params.load(path, notebook=notebook)
    else:
        p = notebook_params.load(path)
    assert p == yaml.safe_load(path.read_text())


def test_an_unknown_params_key_is_refused(tmp_path):
    p = yaml.safe_load((ROOT / "params" / "smoke" / "09_fedprism.yaml").read_text())
    p["methds"] = ["fedavg"]
    f = tmp_path / "09_fedprism.yaml"
    f.write_text(yaml.safe_dump(p))
    with pytest.raises(ValueError, match=r"params file .*09_fedprism.yaml key must be a parameter of notebook "
                                         r"09_fedprism \(one of dataset, .*methods.*\), got 'methds'"):
        notebook_params.load(f)
    assert notebook_params.main([str(f)]) == 1
    assert notebook_params.main([str(ROOT / "params" / "smoke" / "09_fedprism.yaml")]) == 0


def test_paper_grid_refuses_an_unknown_params_key(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("paper_grid", ROOT / "benchmarks" / "paper_grid.py")
    pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pg)
    p = yaml.safe_load((ROOT / "params" / "smoke" / "10_pfedlia.yaml").read_text())
    p["hyperr"] = {}
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump(p))
    with pytest.raises(ValueError, match=r"key must be a parameter of notebook 10_pfedlia .*, got 'hyperr'"):
        pg.load_params("pfedlia-table1", f)
    assert pg.load_params("pfedlia-table1") == yaml.safe_load((ROOT / "params" / "paper" / "10_pfedlia.yaml").read_text())


def test_a_params_file_that_is_not_a_mapping_is_refused(tmp_path):
    f = tmp_path / "05_training.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="must be a mapping of notebook 05_training's parameters"):
        notebook_params.load(f)
