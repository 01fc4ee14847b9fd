"""Taking over a dead process's claim is atomic: processes that find the same stale claim at the
same instant compute the run exactly once, and a taker that dies mid-takeover blocks nobody."""
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time

import pytest

from fedlib import claims
import fedlib.run
from fedlib import experiment as X
from fedlib import grid as G

import record_fakes

TRIALS = 40  # stale claims raced for, one after another, by the same processes


def spec(seed):
    return X.RunSpec("adult", "dirichlet", 0.5, 10, seed, "fedavg", fl={"rounds": 1}, n_train=2000)


def dead_pid() -> int:
    """A pid of this host that no longer exists."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def stale_claim(folder, seed, pid) -> None:
    path = claims.claim_path(X.record_path(folder, spec(seed)))
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "time": time.time()}))
    assert claims.is_stale(X.record_path(folder, spec(seed)))


def jitter(seed) -> None:
    """Every file-system call a claim is made of (open, stat, rename, replace, link, unlink) pauses
    0–3 ms before and after it, at random: the gaps between a takeover's steps, in which another process
    may act, become wide enough to be hit, whatever the steps are."""
    import random

    rng = random.Random(seed)
    for name in ("open", "stat", "rename", "replace", "link", "unlink"):
        real = getattr(os, name)

        def slowed(*args, _real=real, **kwargs):
            time.sleep(rng.uniform(0, 0.003))
            try:
                return _real(*args, **kwargs)
            finally:
                time.sleep(rng.uniform(0, 0.003))

        setattr(os, name, slowed)


def contender(folder, seeds, barrier, log, rank) -> None:
    """One process of the race: for each seed, wait for the others, then run the one-run grid
    whose claim is stale. Computing a run only appends "seed pid" to ``log``."""
    def run(s, device="auto"):
        with open(log, "a") as f:  # O_APPEND: whole lines from every process
            f.write(f"{s.seed} {os.getpid()}\n")
        time.sleep(0.02)  # long enough for a slower contender to meet the live claim
        return record_fakes.record(s)

    fedlib.run.run = run
    G._POLL_SECONDS = 0.005
    jitter(rank)
    for seed in seeds:
        barrier.wait(timeout=120)  # all contenders leave together: the takeovers race
        X.run_grid([spec(seed)], folder, progress=False)


@pytest.mark.parametrize("n_processes", [2, 4])
def test_processes_taking_over_one_stale_claim_at_once_compute_it_once(tmp_path, n_processes):
    """Two processes, and four: a takeover that moved the claim aside to look at it left the run
    unclaimed for that moment, and a third process polling for the record claimed it then
    (with the jitter, 8 of 100 stale claims computed twice by four processes; none by two)."""
    folder, log = tmp_path / "results", tmp_path / "computed.log"
    folder.mkdir()
    pid = dead_pid()
    for seed in range(TRIALS):
        stale_claim(folder, seed, pid)
    ctx = multiprocessing.get_context("fork")  # the contenders inherit fedlib, imported once
    barrier = ctx.Barrier(n_processes)
    procs = [ctx.Process(target=contender, args=(folder, list(range(TRIALS)), barrier, log, rank))
             for rank in range(n_processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    computed = [line.split() for line in log.read_text().splitlines()]
    seeds = sorted(int(seed) for seed, _ in computed)
    assert seeds == list(range(TRIALS)), f"runs computed more than once or never: {seeds}"
    files = sorted(p.name for p in folder.iterdir())  # no claims, tokens or temporaries left
    assert files == sorted(X.record_path(folder, spec(s)).name for s in range(TRIALS))


DIES_MID_TAKEOVER = """
import os, sys
from pathlib import Path
from fedlib import claims
claims.os.replace = lambda *a: os._exit(3)  # killed after taking the token, before the claim
claims.take_over(Path(sys.argv[1]))
"""


def test_a_taker_that_died_holding_the_token_blocks_nobody(tmp_path):
    record = X.record_path(tmp_path, spec(0))
    stale_claim(tmp_path, 0, dead_pid())
    died = subprocess.run([sys.executable, "-c", DIES_MID_TAKEOVER, str(record)])
    assert died.returncode == 3
    left = sorted(p.suffix for p in tmp_path.iterdir())
    assert left == [".claim", ".part", ".takeover"]  # its token and half-made claim stay behind
    assert claims.is_stale(record)
    assert claims.take_over(record)  # taken over through the dead taker's token
    assert json.loads(claims.claim_path(record).read_text())["pid"] == os.getpid()
    assert not claims.take_over(record)  # now live: ours
    claims.release(record)
    assert list(tmp_path.iterdir()) == []


def test_a_live_claim_is_never_taken_over_and_a_missing_one_is_claimed(tmp_path):
    record = X.record_path(tmp_path, spec(0))
    assert claims.try_claim(record)
    assert not claims.take_over(record)  # this process is alive
    claims.release(record)
    assert claims.take_over(record)  # no claim: a plain claim
    claims.release(record)
    assert list(tmp_path.iterdir()) == []
