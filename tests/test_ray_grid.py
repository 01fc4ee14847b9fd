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

from fedlib import experiment as X

FL = {"rounds": 3, "local_epochs": 1}
TASK_TITLE = "ray::fedlib_run"  # the process title Ray gives a worker while it runs a grid task


def specs(n, fl=FL):
    return [X.RunSpec("adult", "dirichlet", 0.5, 10, s, "fedavg", fl=fl, n_train=2000) for s in range(n)]


def running_task_pids() -> list[int]:
    """Pids of the Ray workers now running a grid task (their /proc cmdline is the title)."""
    pids = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith(TASK_TITLE):
            pids.append(int(path.split("/")[2]))
    return pids


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
        pids = running_task_pids()
        if pids:
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)  # the worker dies mid-run, as on a lost node or OOM kill
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
        assert err.count(f"{X._describe(s)}:") == 1
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
