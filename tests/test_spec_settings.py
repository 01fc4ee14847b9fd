"""Specs and settings checked at the start, as a user meets them (issue 68 parts 5-7): numpy
numbers in a spec, a seed beyond the generators' range, the environment's settings
(``$FEDLIB_CHECKPOINTS``, ``$FEDLIB_CLAIM_TIMEOUT``), ``--out`` and ``--estimate-from`` of
``python -m fedlib.grid``, a wait on another process's claim, and a misspelt notebook parameter
(the ``make`` path's params-file check and papermill's injected cell)."""
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

import fedlib.run
from fedlib import claims, grid_cli, notebook_params
from fedlib import experiment as X
from fedlib import grid as G

import record_fakes

SMOKE09 = Path(__file__).resolve().parent.parent / "params" / "smoke" / "09_fedprism.yaml"


def spec(seed=0, **kw):
    return X.RunSpec("adult", "dirichlet", 0.5, 10, seed, "fedavg", fl={"rounds": 2, "local_epochs": 1},
                     n_train=2000, **kw)


def _no_training(monkeypatch):
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("trained before the check"))


def test_a_spec_of_numpy_numbers_has_the_python_specs_key_and_its_record_is_written(tmp_path, monkeypatch):
    py = spec()
    npy = X.RunSpec("adult", "dirichlet", np.float64(0.5), np.int64(10), np.int32(0), "fedavg",
                    fl={"rounds": np.int64(2), "local_epochs": np.int8(1)}, n_train=np.int64(2000),
                    test_fraction=np.float32(0.2), global_test=np.bool_(False))
    assert npy == py and npy.key() == py.key()
    assert type(npy.seed) is int and type(npy.fl["rounds"]) is int and type(npy.test_fraction) is float
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": record_fakes.record(s))
    (rec,) = X.run_grid([npy], tmp_path, progress=False)
    assert rec["status"] == "ok" and json.loads(X.record_path(tmp_path, py).read_text())["key"] == py.key()


@pytest.mark.parametrize("seed", [2**70, 2**32, -1])
def test_a_seed_beyond_the_generators_range_is_refused_before_work(tmp_path, monkeypatch, seed):
    _no_training(monkeypatch)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 4294967295\], got "):
        X.run_grid([spec(seed)], tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"seeds must be an integer in \[0, 4294967295\]"):
        X.grid_specs(["adult"], {"dirichlet": [0.5]}, [10], [seed], ["fedavg"])
    spec(2**32 - 1).validate()  # the largest seed passes


def test_a_checkpoints_folder_that_is_a_file_or_under_one_is_refused_before_any_run(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for value, why in ((blocker, "a folder, not a file"), (blocker / "sub", "a folder path not under a file")):
        monkeypatch.setenv("FEDLIB_CHECKPOINTS", str(value))
        with pytest.raises(ValueError, match=rf"\$FEDLIB_CHECKPOINTS .*must be {why}.*choose another path, got "
                                             rf"'{value}'"):
            X.run_grid([spec()], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # nothing created


@pytest.mark.parametrize("value", ["abc", "1", "0", "-5", "inf", "nan"])
def test_a_claim_timeout_that_is_not_a_number_or_would_take_over_a_live_claim_is_refused(tmp_path, monkeypatch,
                                                                                         value):
    _no_training(monkeypatch)
    monkeypatch.setenv("FEDLIB_CLAIM_TIMEOUT", value)
    with pytest.raises(ValueError, match=rf"\$FEDLIB_CLAIM_TIMEOUT must be a number of seconds ≥ 3600 .*got "
                                         rf"'{value}'"):
        X.run_grid([spec()], tmp_path, progress=False)
    monkeypatch.setenv("FEDLIB_CLAIM_TIMEOUT", "7200")
    assert claims.timeout() == 7200.0


def _table(tmp_path, out, **kw):
    return grid_cli.run_table("fedprism-table1", out, params=str(SMOKE09), seeds=[0], methods=["fedavg"],
                              alphas=[0.1], device="cpu", echo=print, **kw)


def test_out_that_is_a_file_under_a_file_or_empty_is_refused_naming_out(tmp_path, monkeypatch, capsys):
    _no_training(monkeypatch)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = ((str(blocker), "a folder, not a file: choose another path"),
             (str(blocker / "t1"), rf"a folder path not under a file \({blocker} is a file\): choose another path"),
             ("", r"a folder path \(not empty: '.' names the current folder\)"))
    for out, why in cases:
        with pytest.raises(ValueError, match=rf"--out must be {why}, got '{out}'"):
            _table(tmp_path, out)
        with pytest.raises(SystemExit) as exc:  # the command line: argparse's error, exit 2
            grid_cli.main(["fedprism-table1", "--out", out, "--params", str(SMOKE09), "--seeds", "0"])
        assert exc.value.code == 2 and "--out must be" in capsys.readouterr().err


def test_out_under_an_unwritable_folder_is_refused(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root may write anywhere, so os.access grants it: the OS answer for another user, here
        from fedlib import validation

        real = os.access
        monkeypatch.setattr(validation.os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    with pytest.raises(ValueError, match=r"--out must be a folder this user can write"):
        _table(tmp_path, locked / "t1")


def test_estimate_from_without_budget_is_refused(tmp_path, monkeypatch, capsys):
    _no_training(monkeypatch)
    with pytest.raises(ValueError, match=r"--estimate-from must be given only with --budget .*add --budget SECONDS"):
        _table(tmp_path, tmp_path / "t1", estimate_from=[str(tmp_path)])
    assert not (tmp_path / "t1").exists()
    with pytest.raises(SystemExit):
        grid_cli.main(["fedprism-table1", "--out", str(tmp_path / "t1"), "--estimate-from", str(tmp_path)])
    assert "--estimate-from must be given only with --budget" in capsys.readouterr().err


def test_a_wait_on_another_process_claim_says_who_holds_it_each_minute(tmp_path, monkeypatch, capsys):
    s = spec()
    path = X.record_path(tmp_path, s)
    claims.claim_path(path).write_text(json.dumps({"host": "node7", "pid": 4242, "time": time.time() - 600}))
    clock = [0.0]
    monkeypatch.setattr(G.time, "monotonic", lambda: clock[0])

    def sleep(seconds):  # a minute passes each poll; the owner writes its record after three
        clock[0] += 60
        if clock[0] >= 180:
            from fedlib import records
            records.write(path, record_fakes.record(s))
            claims.claim_path(path).unlink()

    monkeypatch.setattr(G.time, "sleep", sleep)
    _no_training(monkeypatch)
    (rec,) = X.run_grid([s], tmp_path, progress="lines")
    assert rec["status"] == "ok"
    notes = [line for line in capsys.readouterr().err.splitlines() if "is claimed by" in line]
    assert len(notes) == 2 and notes[0].startswith("run_grid: waiting for 1 run(s) other processes hold: ")
    assert "claimed by host node7 pid 4242, for 10 min (taken over if that process dies, or after " \
           "$FEDLIB_CLAIM_TIMEOUT = 86400 s)" in notes[0]


def test_a_misspelt_parameter_is_refused_on_the_make_path_and_in_the_kernel(tmp_path):
    params = tmp_path / "09_fedprism.yaml"
    params.write_text("seeds: [0]\nmethds: [fedavg]\n")
    assert notebook_params.main([str(params)]) == 1  # `make workbook` runs this before papermill
    with pytest.raises(ValueError, match=r"params file .* key must be a parameter of notebook 09_fedprism .*got 'methds'"):
        notebook_params.load(params)
    cell = "# Parameters (defaults)\ntable_n_clients: list = [5]\nseed = 0\n"
    notebook_params.check_injected(["", cell, "# Parameters\ntable_n_clients = [10]\n"])  # known: passes
    notebook_params.check_injected(["", "import fedlib"])  # no injected cell (nbval, JupyterLab)
    with pytest.raises(ValueError, match=r"papermill parameter \(-p/-f\) must be a parameter of this notebook's "
                                         r"parameters cell \(one of table_n_clients, seed\): check its spelling, "
                                         r"got 'table_n_clinets'"):
        notebook_params.check_injected(["", cell, "# Parameters\ntable_n_clinets = [10]\n"])


def test_plain_papermill_stops_a_notebook_at_a_misspelt_parameter(tmp_path):
    """papermill itself only warns "Passed unknown parameter"; the notebook's first import of fedlib
    stops it (exit status 1, the message in the executed copy)."""
    import subprocess
    import sys

    import nbformat

    params = nbformat.v4.new_code_cell("# Parameters (defaults)\ntable_n_clients: list = [5]\n")
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell("import fedlib\nprint(table_n_clients)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "t.ipynb")
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    for name, rc in (("table_n_clinets", 1), ("table_n_clients", 0)):
        done = subprocess.run([sys.executable, "-m", "papermill", str(tmp_path / "t.ipynb"), str(tmp_path / "o.ipynb"),
                               "-k", "python3", "-p", name, "[10]"], env=env, capture_output=True, text=True)
        assert done.returncode == rc, done.stderr[-2000:]
    assert "papermill parameter (-p/-f) must be" not in (tmp_path / "o.ipynb").read_text()


def test_every_notebook_lets_fedlib_check_papermills_parameters():
    """check_injected runs at the notebook's first import of fedlib (workbook imports it): the cell
    after ``parameters`` imports one of them, and no ``parameters`` cell opens with papermill's bare
    ``# Parameters`` line (it would be taken for papermill's cell)."""
    root = Path(__file__).resolve().parent.parent / "notebooks"
    for path in sorted(root.glob("[0-9][0-9]_*.ipynb")):
        code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        assert "parameters" in code[0]["metadata"].get("tags", []), path.name
        assert "".join(code[0]["source"]).split("\n", 1)[0].strip() != "# Parameters", path.name
        assert any(f"from {m}" in "".join(code[1]["source"]) for m in ("fedlib", "workbook")), path.name
