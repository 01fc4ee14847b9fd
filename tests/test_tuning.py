"""fedlib.tuning (Table II's grids, selected on the validation split) and the RunSpec fields
behind it: val_fraction and global_test."""
import json

import numpy as np
import pytest

import fedlib.run
from fedlib import experiment as X
from fedlib.tuning import best_point, grid_points, method_grid, tune

FAST = {"rounds": 2, "local_epochs": 1, "lr": 0.01}


def spec(method="fedprox", **kw):
    return X.RunSpec("adult", "dirichlet", 0.5, 6, 0, method, fl=FAST, n_train=1200, **kw)


def test_grid_points_in_key_then_value_order():
    assert grid_points({"a": (1, 2), "b": ("x", "y")}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]
    with pytest.raises(ValueError, match=r"grid\['a'\] must be a non-empty sequence"):
        grid_points({"a": ()})


def test_best_point_first_on_ties_and_never_nan():
    assert best_point([0.5, 0.7, 0.7, 0.1]) == 1
    assert best_point([float("nan"), 0.2, None]) == 1
    with pytest.raises(ValueError, match="scores must be at least one finite"):
        best_point([None, float("nan")])


def test_every_method_grid_is_table_ii():
    assert method_grid("fedprox") == {"mu": (0.001, 0.01, 0.1)}
    assert method_grid("fedavgm") == {"momentum": (0.7, 0.9, 0.99)}
    assert method_grid("fedavg") == {}
    for name in ("fedprox", "fedavgm", "fedadam", "poc", "haccs", "fedcls", "cfl", "fedsoft"):
        for point in grid_points(method_grid(name))[:3]:  # every grid value is a valid Hyper
            X.RunSpec("adult", "dirichlet", 0.5, 6, 0, name, hyper=point).validate()


def test_new_spec_fields_keep_old_record_keys():
    """val_fraction / global_test at their defaults leave the key (and so the records) as before."""
    s = spec()
    d = s.to_dict()
    assert "val_fraction" not in d and "global_test" not in d
    assert spec(val_fraction=0.1).key() != s.key() and spec(global_test=True).key() != s.key()
    with pytest.raises(ValueError, match="val_fraction must be a finite number in \\[0, 1\\), got 1.5"):
        spec(val_fraction=1.5).validate()
    with pytest.raises(ValueError, match="test_fraction \\+ val_fraction must be < 1"):
        spec(val_fraction=0.85).validate()


@pytest.mark.cross_cpu
def test_validation_and_global_test_are_recorded_and_test_split_is_unchanged():
    plain, held = X.run(spec()), X.run(spec(val_fraction=0.2, global_test=True))
    assert plain["n_test"] == held["n_test"]  # the same test split
    assert sum(held["n_train"]) + sum(held["n_val"]) == sum(plain["n_train"])
    assert held["val_accuracy"] == pytest.approx(sum(held["val_correct"]) / sum(held["n_val"]))
    assert held["n_global_test"] == 16281  # adult's official test file
    acc = np.array(held["global_test_correct"]) / held["n_global_test"]
    assert held["global_test_accuracy"] == pytest.approx(acc.mean()) and 0.5 < acc.mean() <= 1
    assert "val_accuracy" not in plain and "global_test_accuracy" not in plain



def test_global_test_needs_an_official_test_set(monkeypatch):
    import dataclasses
    ds = fedlib.run._load("adult", 1200)
    monkeypatch.setattr(fedlib.run, "_load", lambda name, n, n_test=None, pool_test=False: dataclasses.replace(ds, x_test=None, y_test=None))
    with pytest.raises(ValueError, match="global_test=True but dataset 'adult' has no official test set"):
        X.build_federation(spec(global_test=True))


@pytest.mark.cross_cpu
def test_tune_chooses_the_best_validation_accuracy_and_resumes(tmp_path):
    grid = {"mu": (0.0, 0.5, 5.0)}
    out = tune(spec(), tmp_path, grid=grid, val_fraction=0.2)
    scores = [t["val_accuracy"] for t in out["trials"]]
    assert [t["hyper"] for t in out["trials"]] == grid_points(grid)
    assert out["chosen"] == out["trials"][int(np.argmax(scores))]["hyper"]
    assert out["record"]["spec"]["hyper"] == out["chosen"] and out["record"]["spec"]["val_fraction"] == 0.2
    assert len(set(scores)) > 1  # the grid points really trained differently
    files = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.json")}
    assert len(files) == 3
    again = tune(spec(), tmp_path, grid=grid, val_fraction=0.2)  # every trial is reused
    assert again["chosen"] == out["chosen"]
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.json")} == files
    json.dumps({k: v for k, v in out.items() if k != "record"})


def test_tune_refuses_before_training(tmp_path):
    with pytest.raises(ValueError, match="method 'fedavg' declares none"):
        tune(spec("fedavg"), tmp_path)
    with pytest.raises(ValueError, match="mu must be a finite number ≥ 0, got -1"):
        tune(spec(), tmp_path, grid={"mu": (0.1, -1)})
    assert not list(tmp_path.iterdir())
