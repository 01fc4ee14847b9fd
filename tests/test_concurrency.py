"""Several processes on one results folder: every run computed once and recorded once; dead
processes' claims taken over; an unwritable folder refused before any training."""
import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import fedlib.run
from fedlib import claims, records
from fedlib import experiment as X
from fedlib import grid as G

FL = {"rounds": 3, "local_epochs": 1}


def specs(n=16):
    return [X.RunSpec("adult", "dirichlet", 0.5, 10, s, "fedavg", fl=FL, n_train=2000) for s in range(n)]


WORKER = """
import json, sys, time
from pathlib import Path
from fedlib import experiment as X
folder, go, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
specs = [X.RunSpec('adult', 'dirichlet', 0.5, 10, s, 'fedavg', fl={fl!r}, n_train=2000) for s in range(n)]
import fedlib.run; fedlib.run._load('adult', 2000)  # data loaded before the start signal
trained = []
real_run = fedlib.run.run
def run(spec, device='auto'):
    trained.append(spec.seed)
    return real_run(spec, device)
fedlib.run.run = run
(Path(sys.argv[4])).write_text('ready')
while not go.exists():
    time.sleep(0.01)
records = X.run_grid(specs, folder, progress=False)
print(json.dumps({{"trained": trained, "returned": [r["spec"]["seed"] for r in records]}}))
""".format(fl=FL)


def test_two_processes_on_one_grid_compute_and_record_every_run_once(tmp_path):
    folder, go, n = tmp_path / "results", tmp_path / "go", 16
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(folder), str(go), str(n), str(tmp_path / f"ready{i}")],
                              stdout=subprocess.PIPE, text=True) for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
            time.sleep(0.05)
        go.write_text("go")  # both start the grid at the same instant
        outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    a, b = (set(o["trained"]) for o in outs)
    assert not a & b, f"runs computed twice: {sorted(a & b)}"
    assert a | b == set(range(n))
    assert all(o["returned"] == list(range(n)) for o in outs)  # each process returns the whole grid
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(X.record_path(folder, s).name for s in specs(n))  # no claims, no temporaries
    for name in files:
        assert json.loads((folder / name).read_text())["status"] == "ok"


@pytest.mark.cross_cpu
def test_a_dead_process_claim_is_taken_over(tmp_path):
    s = specs(1)[0]
    path = X.record_path(tmp_path, s)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid of this host that no longer exists
    claims.claim_path(path).write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "time": 0}))
    assert claims.is_stale(path)
    (rec,) = X.run_grid([s], tmp_path, progress=False)
    assert rec["status"] == "ok" and not claims.claim_path(path).exists()


@pytest.mark.cross_cpu
def test_a_live_claim_is_waited_for_and_taken_over_when_its_process_dies(tmp_path, monkeypatch):
    s = specs(1)[0]
    path = X.record_path(tmp_path, s)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    reaper = threading.Thread(target=holder.wait)
    reaper.start()  # reaps the holder when it exits, so its pid really disappears
    claims.claim_path(path).write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid,
                                                   "time": time.time()}))
    assert not claims.is_stale(path)
    monkeypatch.setattr(G, "_POLL_SECONDS", 0.05)
    t0 = time.monotonic()
    (rec,) = X.run_grid([s], tmp_path, progress=False)
    reaper.join()
    assert rec["status"] == "ok" and time.monotonic() - t0 >= 1.0  # it waited for the holder
    assert not claims.claim_path(path).exists()


@pytest.mark.cross_cpu
def test_a_claim_from_another_host_is_honoured_until_it_is_old(tmp_path, monkeypatch):
    s = specs(1)[0]
    path = X.record_path(tmp_path, s)
    claims.claim_path(path).write_text(json.dumps({"host": "elsewhere", "pid": 1, "time": time.time() - 7200}))
    assert not claims.is_stale(path)  # 2 h old, under the default 24 h
    monkeypatch.setenv("FEDLIB_CLAIM_TIMEOUT", "3600")
    assert claims.is_stale(path)
    (rec,) = X.run_grid([s], tmp_path, progress=False)
    assert rec["status"] == "ok"


def test_finished_statuses_are_never_recomputed(tmp_path, monkeypatch):
    s = specs(1)[0]
    records.write(X.record_path(tmp_path, s), {"record_version": records.RECORD_VERSION, "status": "failed",
                                               "error": "diverged", "key": s.key(), "spec": s.to_dict()})
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("a finished run was recomputed"))
    (rec,) = X.run_grid([s], tmp_path, progress=False)
    assert rec["status"] == "failed"


def test_an_unwritable_results_folder_fails_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("trained before checking the folder"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=r"results_dir '.*a-file/results' is not writable .*choose another"):
        X.run_grid(specs(1), blocker / "results", progress=False)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(G.tempfile, "mkstemp", read_only)
    with pytest.raises(ValueError, match="is not writable \\(Read-only file system\\)"):
        X.run_grid(specs(1), tmp_path / "ro", progress=False)
