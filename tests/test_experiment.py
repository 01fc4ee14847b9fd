"""fedlib.experiment: records carry their configuration; grids resume; crashes lose nothing."""
import json
import re

import numpy as np
import pytest
import torch

import os
import fedlib.run
from fedlib import experiment as X, records
from workbook.tables import records_frame, setting_name, table3, table4, to_markdown

FAST = {"rounds": 2, "local_epochs": 1}


def spec(method="fedavg", seed=0, level=0.5, protocol="dirichlet", **kw):
    return X.RunSpec("adult", protocol, level, 10, seed, method, fl=FAST, n_train=2000, **kw)


@pytest.mark.cross_cpu
def test_record_has_full_configuration_and_metrics():
    rec = X.run(spec("clust_psi_pfl"))
    assert rec["status"] == "ok"
    assert rec["spec"]["dataset"] == "adult" and rec["spec"]["method"] == "clust_psi_pfl"
    assert rec["fl"]["rounds"] == 2 and rec["fl"]["lr"] == 1e-3 and rec["fl"]["batch_size"] == 32
    assert {"torch", "numpy", "sklearn", "fedlib"} <= set(rec["versions"])
    host = rec["host"]  # where it trained: the last bits depend on it
    assert host["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert host["threads"] == torch.get_num_threads() and host["cpu"] and "gpu" not in host
    assert "gpu_kernels" not in host
    assert "UCI Adult" in rec["paper_name"]
    assert len(rec["local_accuracy"]) == 10 and len(rec["history"]) == 2
    assert rec["global_accuracy"] == pytest.approx(sum(rec["correct"]) / sum(rec["n_test"]))
    assert rec["info"]["tau"] >= 1 and len(rec["info"]["assignment"]) == 10
    json.dumps(rec)  # JSON-serialisable


def test_a_gpu_records_host_says_how_its_kernels_computed(monkeypatch):
    """On CUDA the record keeps the GPU's name and the engine's kernel policy (IEEE FP32 and
    deterministic unless a gpu_kernels block loosened it). No GPU here: its name is faked."""
    from fedlib.engine import gpu_kernels

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    cuda = torch.device("cuda")
    assert fedlib.run.host_of(cuda)["gpu"] == "Fake GPU"
    assert fedlib.run.host_of(cuda)["gpu_kernels"] == {"tf32": False, "deterministic": True}
    with gpu_kernels(tf32=True, deterministic=False):
        assert fedlib.run.host_of(cuda)["gpu_kernels"] == {"tf32": True, "deterministic": False}
    json.dumps(fedlib.run.host_of(cuda))


@pytest.mark.cross_cpu
def test_same_spec_same_numbers():
    a, b = X.run(spec()), X.run(spec())
    assert a["correct"] == b["correct"] and a["history"] == b["history"]


def test_infeasible_partition_is_a_record_not_a_crash():
    rec = X.run(X.RunSpec("adult", "dirichlet", 1e-4, 10, 0, "fedavg", fl=FAST, n_train=200))
    assert rec["status"] == "infeasible" and "alpha=0.0001" in rec["error"]


def test_a_setting_without_test_samples_is_an_infeasible_record(tmp_path, monkeypatch):
    """Shards of one sample each (K = 20 of n_train = 30): no client has a test split, so no
    accuracy exists — an infeasible record saying why, written once and not retried."""
    s = X.RunSpec("adult", "shards", 1, 20, 0, "fedavg", fl=FAST, n_train=30)
    rec = X.run(s)
    assert rec["status"] == "infeasible" and "metrics" not in rec and "global_accuracy" not in rec
    assert "test split is empty" in rec["error"] and "K=20" in rec["error"] and "each holds 1 sample " in rec["error"]
    (first,) = X.run_grid([s], tmp_path, progress=False)
    assert first["status"] == "infeasible"
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("an infeasible setting was retried"))
    (again,) = X.run_grid([s], tmp_path, progress=False)
    assert again["error"] == rec["error"]


@pytest.mark.parametrize("bad, match", [
    (dict(level=0.0), "alpha"),
    (dict(protocol="similarity", level=1.5), r"level must be a number in \[0, 1\] for the similarity protocol \(its s\)"),
    (dict(method="fedmagic"), "unknown method"),
    (dict(hyper={"tau": 2, "oops": 1}, method="clust_psi_pfl"), "no hyperparameter"),
])
def test_bad_specs_fail_before_any_work(tmp_path, bad, match):
    good = spec(seed=5)
    kwargs = {**dict(method="fedavg", level=0.5, protocol="dirichlet"), **bad}
    with pytest.raises(ValueError, match=match):
        X.run_grid([good, spec(**kwargs)], tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []  # validated first: nothing ran


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'"):
        X.RunSpec("mnist", "dirichlet", 0.5, 10, 0, "fedavg").validate()


@pytest.mark.cross_cpu
def test_interrupted_grid_resumes_without_recomputing_or_duplicating(tmp_path, monkeypatch):
    specs = [spec(seed=s) for s in range(4)]
    real_run = X.run
    calls = []

    def crashing(s, device="auto"):
        calls.append(s.seed)
        if s.seed == 2:
            raise KeyboardInterrupt  # the user stops the grid midway
        return real_run(s, device)

    monkeypatch.setattr(fedlib.run, "run", crashing)
    with pytest.raises(KeyboardInterrupt):
        X.run_grid(specs, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(X.record_path(tmp_path, s).name for s in specs[:2])
    assert not list(tmp_path.glob(".tmp-*"))  # nothing half-written
    first = {p.name: p.read_text() for p in tmp_path.glob("*.json")}

    calls.clear()
    monkeypatch.setattr(fedlib.run, "run", real_run)
    counted = []
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": counted.append(s.seed) or real_run(s, device))
    recs = X.run_grid(specs + specs[:1], tmp_path, progress=False)  # a duplicate spec too
    assert counted == [2, 3]  # finished runs reused, not recomputed
    assert len(recs) == 4 and len(list(tmp_path.glob("*.json"))) == 4
    assert all(first[n] == (tmp_path / n).read_text() for n in first)  # never overwritten


@pytest.mark.cross_cpu
def test_crash_while_writing_leaves_no_partial_record(tmp_path, monkeypatch):
    def broken_dump(obj, f):
        f.write('{"half": ')
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(OSError):
        X.run_grid([spec()], tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.cross_cpu
def test_tables_rebuild_from_records_with_infeasible_cells(tmp_path):
    specs = [spec(m, seed=s) for m in ("cl", "fedavg") for s in (0, 1)]
    specs.append(X.RunSpec("adult", "dirichlet", 1e-4, 10, 0, "fedavg", fl=FAST, n_train=200))
    X.run_grid(specs, tmp_path, progress=False)
    df = records_frame(X.load_records(tmp_path))
    t3 = table3(df)
    row = t3[(t3.method == "fedavg") & (t3.level == 0.5)].iloc[0]
    accs = df[(df.method == "fedavg") & (df.level == 0.5)].global_accuracy
    assert row["n_seeds"] == 2 and row["mean"] == pytest.approx(accs.mean())
    assert row["std"] == pytest.approx(np.std(accs))
    inf = t3[t3.level == 1e-4].iloc[0]
    assert inf["n_seeds"] == 0 and inf["n_infeasible"] == 1
    t4 = table4(df)
    fed = df[(df.method == "fedavg") & (df.level == 0.5) & (df.seed == 0)].iloc[0]
    cl = df[(df.method == "cl") & (df.level == 0.5) & (df.seed == 0)].iloc[0]
    assert fed.ad_cl == pytest.approx(np.mean(np.abs(np.array(fed.local_accuracy) - cl.global_accuracy)))
    assert t4[(t4.method == "fedavg") & (t4.level == 0.5)].iloc[0]["ad"] == pytest.approx(
        df[(df.method == "fedavg") & (df.level == 0.5)].ad.mean())
    md = to_markdown(t3)
    assert "| FedAvg |" in md and "—" in md and "α=0.5, K=10" in md


def test_setting_name_writes_settings_as_the_paper_does():
    assert setting_name("dirichlet", 0.3) == "α=0.3"
    assert setting_name("similarity", 1.0, " = ") == "S = 1"
    assert setting_name("similarity", 0.25) == "S=0.25"
    assert setting_name("shards", 2) == "shards=2"  # a protocol without a symbol keeps its name


@pytest.mark.cross_cpu
def test_load_grid_reports_missing_runs(tmp_path):
    specs = [spec(seed=s) for s in range(2)]
    X.write_manifest(tmp_path, specs)
    X.run_grid(specs[:1], tmp_path, progress=False)
    with pytest.raises(FileNotFoundError, match="1 of 2 runs"):
        X.load_grid(tmp_path)


@pytest.mark.cross_cpu
def test_grid_killed_by_sigkill_resumes_with_no_lost_or_duplicated_records(tmp_path):
    """A real kill (SIGKILL of the process running the grid, no cleanup possible), then a
    rerun: every run recorded exactly once, finished records untouched, none half-written."""
    import os
    import signal
    import subprocess
    import sys
    import time

    n, fl = 30, {"rounds": 10, "local_epochs": 1}  # ~30 × 50 ms: the kill lands mid-grid
    script = (
        "import sys; from fedlib import experiment as X\n"
        f"specs = [X.RunSpec('adult', 'dirichlet', 0.5, 10, s, 'fedavg', fl={fl!r}, n_train=2000)"
        f" for s in range({n})]\n"
        "X.run_grid(specs, sys.argv[1], progress=False)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*.json"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "the grid finished before it could be killed; make it longer"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    done = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    assert 2 <= len(done) < n
    assert all(json.loads(text)["status"] == "ok" for text in done.values())  # complete, never partial

    specs = [X.RunSpec("adult", "dirichlet", 0.5, 10, s, "fedavg", fl=fl, n_train=2000) for s in range(n)]
    assert {X.record_path(tmp_path, s).name for s in specs} >= set(done)  # same keys as the killed grid
    recs = X.run_grid(specs, tmp_path, progress=False)
    assert [r["spec"]["seed"] for r in recs] == list(range(n))
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(X.record_path(tmp_path, s).name for s in specs)
    assert all((tmp_path / name).read_text() == text for name, text in done.items())  # reused, not rerun
    assert len(X.load_records(tmp_path)) == n


@pytest.mark.cross_cpu
def test_a_write_cut_short_leaves_no_file_that_looks_like_a_record(tmp_path, monkeypatch):
    """A process killed between writing a record's temporary file and renaming it leaves the
    temporary behind; its name does not match ``*.json`` (pathlib's patterns match names that
    start with a dot: a ``.tmp-*.json`` was read as a half-written record by the SIGKILL test
    above), and a rerun records the run and ignores it."""
    monkeypatch.setattr(os, "replace", lambda src, dst: None)  # the kill lands before the rename
    records.write(tmp_path / "run.json", {"status": "ok"})
    assert list(tmp_path.glob("*.json")) == [] and len(list(tmp_path.glob(".tmp-*"))) == 1
    monkeypatch.undo()
    X.run_grid([spec("local")], tmp_path, progress=False)
    assert len(list(tmp_path.glob("*.json"))) == 1 and len(X.load_records(tmp_path)) == 1


@pytest.mark.cross_cpu
def test_progress_lines_one_per_trained_run(tmp_path, capsys, monkeypatch):
    """'lines' (what make workbook shows through papermill's log) prints a summary, then one
    line per trained run with its accuracy; a rerun trains nothing and says so."""
    monkeypatch.delenv("FEDLIB_PROGRESS", raising=False)
    specs = [spec("local", seed=s) for s in range(2)]
    X.run_grid(specs, tmp_path, progress="lines")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "run_grid: 2 runs, 0 already recorded, 2 to train"
    assert [line.split(":")[0] for line in err[1:]] == [
        "run_grid [1/2] adult (Dirichlet α = 0.5) K=10 local seed=0",
        "run_grid [2/2] adult (Dirichlet α = 0.5) K=10 local seed=1"]
    assert all(re.search(r": weighted local accuracy \d+\.\d\d% in ", line) for line in err[1:]), err
    monkeypatch.setenv("FEDLIB_PROGRESS", "lines")  # progress=True follows the environment
    X.run_grid(specs, tmp_path)
    assert capsys.readouterr().err.splitlines() == ["run_grid: 2 runs, 2 already recorded, 0 to train"]


def test_bad_progress_fails_before_any_work(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"progress='loud'.*'bar', 'lines', 'rounds', 'off'"):
        X.run_grid([spec()], tmp_path, progress="loud")
    monkeypatch.setenv("FEDLIB_PROGRESS", "verbose")
    with pytest.raises(ValueError, match=r"FEDLIB_PROGRESS"):
        X.run_grid([spec()], tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["satellite", "shuttle"])
@pytest.mark.cross_cpu
def test_every_registered_tabular_stand_in_trains(name):
    """satellite and shuttle passed validation and then crashed (no architecture mapped)."""
    rec = X.run(X.RunSpec(name, "dirichlet", 1.0, 5, 0, "fedavg", fl={"rounds": 1, "local_epochs": 1},
                          n_train=600))
    assert rec["status"] == "ok" and len(rec["local_accuracy"]) == 5


def test_dataset_without_architecture_fails_at_validation(monkeypatch):
    from fedlib import models

    monkeypatch.delitem(models.ARCH_FOR_DATASET, "letter")
    with pytest.raises(ValueError, match="dataset='letter' has no default architecture; pass arch="):
        X.RunSpec("letter", "dirichlet", 1.0, 5, 0, "fedavg").validate()
    X.RunSpec("letter", "dirichlet", 1.0, 5, 0, "fedavg", arch="mlp").validate()  # an explicit arch is fine
    with pytest.raises(ValueError, match="arch='resnet99' is unknown"):
        X.RunSpec("letter", "dirichlet", 1.0, 5, 0, "fedavg", arch="resnet99").validate()


def test_manifest_writers_never_share_a_temporary_file(tmp_path, monkeypatch):
    """Machines sharing one results folder write the manifest at the same time: each writer
    uses its own temporary file, so one can never rename another's half-written file."""
    import os

    sources = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (sources.append(str(src)), real_replace(src, dst)))
    specs = [spec(seed=s) for s in range(3)]
    X.write_manifest(tmp_path, specs)
    X.write_manifest(tmp_path, specs)
    assert len(sources) == 2 and sources[0] != sources[1]
    assert json.loads((tmp_path / "manifest.json").read_text())["keys"] == [s.key() for s in specs]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
