"""run_grid on Ray: the same records as the local backend, written once by the driver, resumed
without recomputation, and a worker killed mid-run retried until the grid completes."""
import glob
import json
import os
import signal
import threading
import time

import pytest
import ray  # the optional extra .[ray]; make setup installs it

import fedlib.grid
from fedlib import experiment as X

FL = {"rounds": 3, "local_epochs": 1}
TASK_TITLE = "ray::fedlib_run"  # the process title Ray gives a worker while it runs a grid task


def specs(n, fl=FL):
    return [X.RunSpec("adult", "dirichlet", 0.5, 10, s, "fedavg", fl=fl, n_train=2000) for s in range(n)]


def untitled_worker(cmdline: str) -> bool:
    """``python [flags] …/default_worker.py …``, not the raylet, whose flags name that script too."""
    argv = cmdline.split(" ")
    return "python" in argv[0].rsplit("/", 1)[-1] and any(a.endswith("/default_worker.py") for a in argv[1:4])


def ray_workers() -> dict[int, str]:
    """pid -> /proc cmdline of Ray's worker processes (not its agents, whose death takes the raylet
    down). Where Ray can set process titles a worker's cmdline is its title (``ray::IDLE``,
    ``ray::fedlib_run``); where it cannot, or before it has, it is ``python …/default_worker.py …``."""
    workers = {}
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith(("ray::IDLE", TASK_TITLE)) or untitled_worker(cmdline):
            workers[int(path.split("/")[2])] = cmdline
    return workers


def running_task_pids(workers: dict[int, str], runs_recorded: int) -> list[int]:
    """The workers to kill to interrupt a run: the one titled as running a grid task; where none is
    titled so, the untitled ones once a first run is recorded (num_cpus=1 runs one task at a time,
    and the next starts as the last is returned; the CI machine of 2026-11-28 showed no titles)."""
    titled = [pid for pid, cmdline in workers.items() if cmdline.startswith(TASK_TITLE)]
    if titled or not runs_recorded:
        return titled
    return sorted(pid for pid, cmdline in workers.items() if untitled_worker(cmdline))


def comparable(record: dict) -> dict:
    """A record without what legitimately differs between two executions (time, versions, host)."""
    return {k: v for k, v in record.items() if k not in ("seconds", "cpu_seconds", "versions", "host")}


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_ray_backend_records_equal_the_local_ones_and_resume(tmp_path, capsys):
    grid = specs(3)
    local = X.run_grid(grid, tmp_path / "local", progress=False)
    on_ray = X.run_grid(grid, tmp_path / "ray", progress="lines", backend="ray", num_cpus=1)
    assert [comparable(r) for r in on_ray] == [comparable(r) for r in local]
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == sorted(f"{s.key()}.json" for s in grid)
    assert not ray.is_initialized()  # the local instance run_grid started is shut down
    err = capsys.readouterr().err
    assert "3 to train on Ray" in err and err.count("run_grid [") == 3
    # finished runs are never recomputed: no task is submitted, no Ray started
    again = X.run_grid(grid, tmp_path / "ray", progress="lines", backend="ray")
    assert again == on_ray and "0 to train" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_a_worker_killed_mid_run_is_retried_and_every_record_written_once(tmp_path, capsys):
    grid = specs(4, {**FL, "rounds": 200})  # ≈ 0.5 s a run in a warm worker (3 rounds: 10 ms, less than the poll)
    out: dict = {}

    def driver():
        try:
            out["records"] = X.run_grid(grid, tmp_path, progress="lines", backend="ray", num_cpus=1, max_retries=2)
        except BaseException as err:  # reported by the main thread
            out["error"] = err

    thread = threading.Thread(target=driver)
    thread.start()
    killed, deadline = None, time.monotonic() + 180
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        recorded = len(list(tmp_path.glob("*.json")))
        workers = ray_workers()
        pids = running_task_pids(workers, recorded)
        if pids:
            if not any(cmdline.startswith(TASK_TITLE) for cmdline in workers.values()):
                time.sleep(0.1)  # untitled workers: let the next run get going (≥ 0.5 s a run)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)  # the worker dies mid-run, as on a lost node or OOM kill
            killed = pids[0]
        time.sleep(0.02)
    thread.join(timeout=300)
    assert killed is not None, "no Ray worker was seen running a grid task"
    assert not thread.is_alive() and "error" not in out, out.get("error")
    with pytest.raises(OSError):
        os.kill(killed, 0)  # that worker is gone: its run was recomputed by another
    records = out["records"]
    assert [r["key"] for r in records] == [s.key() for s in grid] and all(r["status"] == "ok" for r in records)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{s.key()}.json" for s in grid)  # one record per run, no temporaries left
    err = capsys.readouterr().err
    for s in grid:  # each run reported finished exactly once
        assert err.count(f"{fedlib.grid._describe(s)}:") == 1
    # the retried run's record is the run's record: equal to computing it here
    local = X.run(grid[0])
    on_disk = json.loads((tmp_path / f"{grid[0].key()}.json").read_text())
    assert comparable(on_disk)["correct"] == comparable(local)["correct"]


def test_ray_options_are_checked_before_any_work(tmp_path):
    grid = specs(1)
    with pytest.raises(ValueError, match=r"backend must be one of \['local', 'ray'\], got 'spark'"):
        X.run_grid(grid, tmp_path, backend="spark")
    with pytest.raises(ValueError, match="num_cpus must be a finite number > 0, got 0"):
        X.run_grid(grid, tmp_path, backend="ray", num_cpus=0)
    with pytest.raises(ValueError, match="max_retries must be an integer ≥ 0"):
        X.run_grid(grid, tmp_path, backend="ray", max_retries=-1)
    with pytest.raises(ValueError, match="ray_address must be None unless backend='ray'"):
        X.run_grid(grid, tmp_path, ray_address="auto")
    assert not any(tmp_path.iterdir()) and not ray.is_initialized()
