"""benchmarks/host_speed.py: a committed record's per-round CPU cost against its spec's here,
computed by hand on fake probe runs (no training: the probes' CPU-seconds are made up), and its
bad inputs refused before any run."""
import importlib.util

import pytest
import torch

import record_fakes
from fedlib import experiment as X
from fedlib import records
from fedlib.paths import ROOT

FL = {"rounds": 3, "local_epochs": 1}


def bench():
    loader = importlib.util.spec_from_file_location("host_speed", ROOT / "benchmarks" / "host_speed.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def committed(tmp_path, **extra):
    """A record of a 3-round run that took 60 CPU-s on an AVX512 host."""
    s = X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", fl=FL, n_train=2000)
    rec = record_fakes.record(s, cpu_seconds=60.0, fl=FL, host={"cpu": "X", "cpu_capability": "AVX512", "threads": 1},
                              **extra)
    path = X.record_path(tmp_path, s)
    records.write(path, rec)
    return path


def test_the_ratio_is_the_per_round_cost_here_over_the_recorded_one(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_run(spec, device="auto"):  # 2 CPU-s of fixed costs, then 5 a round
        calls.append((spec.fl["rounds"], device))
        return {"status": "ok", "cpu_seconds": 2.0 + 5.0 * spec.fl["rounds"]}

    monkeypatch.setattr(X, "run", fake_run)
    b = bench()
    p = b.probe(committed(tmp_path), (1, 3))
    assert calls == [(1, "cpu"), (3, "cpu")]
    assert p["here"] == 5.0 and p["recorded"] == 20.0 and p["ratio"] == 0.25 and p["probes"] == {1: 7.0, 3: 17.0}
    b.main(["--record", str(committed(tmp_path)), "--rounds", "1", "2"])
    out = capsys.readouterr().out
    assert "recorded: 60.0 CPU-s, 20.00 a round (fixed costs in it), on X (AVX512), 1 thread(s)" in out
    assert "here: 7.0 CPU-s at R = 1, 12.0 at R = 2: 5.00 a round, on " in out
    assert f"({torch.backends.cpu.get_cpu_capability()})" in out and "ratio here / recorded: 0.25" in out


@pytest.mark.parametrize("rounds, extra, match", [
    ((3, 1), {}, r"rounds must be two round counts R1 < R2 ≤ the record's 3, got \[3, 1\]"),
    ((1, 4), {}, r"rounds must be two round counts R1 < R2 ≤ the record's 3, got \[1, 4\]"),
    ((1,), {}, r"rounds must be two round counts R1 < R2, got \[1\]"),
    ((0, 2), {}, r"rounds must be an integer ≥ 1, got 0"),
    ((1, 3), {"device": "cuda:0"}, r"record must be a finished ok CPU record with cpu_seconds"),
])
def test_bad_inputs_are_refused_before_any_run(tmp_path, monkeypatch, rounds, extra, match):
    monkeypatch.setattr(X, "run", lambda *a, **k: pytest.fail("a probe ran"))
    with pytest.raises(ValueError, match=match):
        bench().probe(committed(tmp_path, **extra), rounds)
