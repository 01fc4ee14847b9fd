"""fedlib.grid: claims that go stale by age and by start token, a worker killed under
``paper_grid.py --workers`` (run_grid's pool) recomputed without hanging the grid, and every data set a grid
needs checked before its first run."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedlib.run
from fedlib import claims, records
from fedlib import experiment as X
from fedlib import grid as G

import record_fakes

ROOT = Path(__file__).resolve().parent.parent
SMOKE09 = ROOT / "params" / "smoke" / "09_fedprism.yaml"


def spec(seed=0, dataset="adult"):
    return X.RunSpec(dataset, "dirichlet", 0.5, 10, seed, "fedavg", fl={"rounds": 2, "local_epochs": 1},
                     n_train=2000)


def _claim(path, **fields):
    info = {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(),
            "start": claims.start_token(os.getpid()), **fields}
    claims.claim_path(path).write_text(json.dumps(info))


def test_a_claim_of_a_live_but_foreign_pid_older_than_its_stale_age_is_taken_over(tmp_path, monkeypatch):
    """This process's own pid, but another process's start token (a reused pid, a restarted
    container), written before the stale age: stale, and taken over."""
    monkeypatch.setenv("FEDLIB_CLAIM_TIMEOUT", "3600")
    path = X.record_path(tmp_path, spec())
    _claim(path, start="another-boot:12345", time=time.time() - 7200)
    assert claims.is_stale(path)
    assert claims.take_over(path)
    owner = json.loads(claims.claim_path(path).read_text())
    assert owner["pid"] == os.getpid() and owner["start"] == claims.start_token(os.getpid())


def test_a_reused_pid_is_stale_and_a_live_owner_is_not_until_its_stale_age(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_CLAIM_TIMEOUT", "3600")
    path = X.record_path(tmp_path, spec())
    _claim(path, start="another-boot:12345")  # young, but the pid is another process's now
    assert claims.is_stale(path)
    _claim(path)  # this very process, young: live
    assert not claims.is_stale(path) and not claims.take_over(path)
    _claim(path, time=time.time() - 7200)  # this very process, older than the stale age
    assert claims.is_stale(path)
    _claim(path, start=None)  # a claim without a token (an older fedlib): its pid decides
    assert not claims.is_stale(path)


def test_run_grid_takes_over_a_claim_held_by_a_reused_pid(tmp_path, monkeypatch):
    s = spec()
    path = X.record_path(tmp_path, s)
    _claim(path, start="another-boot:12345")
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": record_fakes.record(s))
    (rec,) = G.run_grid([s], tmp_path, progress=False)
    assert rec["status"] == "ok" and records.read_strict(path, s)
    assert not claims.claim_path(path).exists()


def test_a_mixed_grid_with_a_missing_data_set_fails_before_any_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_DATA", str(tmp_path / "no-data"))
    monkeypatch.delenv("FEDLIB_ALLOW_DOWNLOAD", raising=False)
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("a run trained before the data was checked"))
    from fedlib.datasets import DataUnavailableError

    with pytest.raises(DataUnavailableError, match=r"(?s)not here; no run was started.*- fmnist: .*Fix|make data"
                       ) as err:
        G.run_grid([spec(0, "adult"), spec(1, "adult"), spec(0, "fmnist")], tmp_path / "out", progress=False)
    assert "fmnist" in str(err.value)
    assert not list((tmp_path / "out").glob("*.json"))


def test_check_data_names_nothing_when_every_data_set_is_here():
    G.check_data([spec(0, "adult")])  # the shared test data has adult
    G.check_data([])


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_a_worker_killed_under_workers_2_is_recomputed_and_the_grid_ends(tmp_path):
    """The first run's worker SIGKILLs itself (as the OOM killer would): the pool breaks instead
    of hanging, the lost run is computed again, and the command ends with every run recorded
    once. A hang fails the test through the subprocess timeout."""
    out, flag = tmp_path / "t1", tmp_path / "killed"
    env = {**os.environ, "PAPER_GRID_TEST_KILL_ONCE": str(flag), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "paper_grid.py"), "fedprism-table1", "--out", str(out),
           "--params", str(SMOKE09), "--seeds", "0", "--alphas", "0.1", "--methods", "fedavg", "local", "fedprism",
           "--device", "cpu", "--workers", "2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert flag.exists()  # a worker was killed
    assert "a worker process died" in done.stderr  # run_grid's pool (--workers) says so
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 3 and all(f.endswith(".json") and not f.startswith(".") for f in files), files
    for p in out.iterdir():
        assert records.read_strict(p)["status"] == "ok"


def _paper_grid():
    import importlib.util

    spec_ = importlib.util.spec_from_file_location("paper_grid", ROOT / "benchmarks" / "paper_grid.py")
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text", ['{"record_version": 1, "sta', "", '{"record_version": 1, "status": "ok"}'])
def test_paper_grid_counts_a_damaged_record_as_to_compute_and_lists_it_by_name(tmp_path, text):
    pg = _paper_grid()
    (s,) = pg.select("fedprism-table1", pg.load_params("fedprism-table1", str(SMOKE09)), seeds=[0], methods=["fedavg"],
                     alphas=[0.1])
    path = X.record_path(tmp_path, s)
    path.write_text(text)
    assert not G._recorded(tmp_path, s)
    assert pg.run_state(tmp_path, s).startswith(f"to compute (invalid record {path.name}: ")
    records.write(path, record_fakes.record(s))
    assert G._recorded(tmp_path, s) and pg.run_state(tmp_path, s) == "recorded (ok)"


def test_a_run_another_process_claims_first_is_left_for_last_not_waited_on(tmp_path, monkeypatch):
    """Two processes on one folder start together and both pick the first run: the one that loses
    the claim goes on to the next run instead of idling until the winner's record lands (issue 67's
    two background processes: one sat idle 27 minutes on a 1,600 s run)."""
    a, b = spec(0), spec(1)
    calls = []

    def fake_one_run(s, results_dir, device, deadline, folders, mode, wait=True):
        calls.append((s.seed, wait))
        path = G.record_path(Path(results_dir), s)
        if s.seed == 0 and not wait:  # the other process claimed it first, while this one prepared it
            _claim(path)
            return s, None, True, None
        claims.claim_path(path).unlink(missing_ok=True)
        rec = {"spec": s.to_dict(), "status": "ok"}
        return s, rec, False, None

    monkeypatch.setattr(G, "_one_run", fake_one_run)
    done = []
    G._run_each([a, b], tmp_path, "cpu", None, (), "off", 1, lambda s, r, e, est: done.append(s.seed), print)
    assert calls == [(0, False), (1, False), (0, True)]  # b computed while a was held elsewhere; a waited on last
    assert done == [1, 0]
