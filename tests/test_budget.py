"""run_grid's budget: a run starts only if the median of comparable records says it ends in time
(fedlib.experiment.estimate_seconds, fits_budget); the rest are left, unclaimed, for a later call."""
from __future__ import annotations

import json

import pytest

import fedlib.grid
import fedlib.run
from fedlib import claims
from fedlib import experiment as X

import record_fakes

FAST = {"rounds": 2, "local_epochs": 1}


def spec(method="fedavg", **kw):
    return X.RunSpec("adult", "dirichlet", 0.5, 10, 0, method, fl=FAST, n_train=2000, **kw)


def rec(seconds, method="fedavg", dataset="adult", n_clients=10, device="cpu", processes=None, n_train=2000,
        rounds=2, local_epochs=1, status="ok"):
    """A record as estimate_seconds reads it (the fields a real one has)."""
    host = {"cpu": "x", "threads": 1, **({} if processes is None else {"processes": processes})}
    return {"status": status, "seconds": seconds, "device": device, "host": host,
            "spec": {"dataset": dataset, "method": method, "n_clients": n_clients, "n_train": n_train},
            "fl": {"rounds": rounds, "local_epochs": local_epochs}}


# ----------------------------------------------------------------------------- the estimate
def test_the_estimate_is_the_median_of_the_same_method_data_set_and_k():
    records = [rec(10), rec(30), rec(20), rec(1000, method="cl"), rec(5000, n_clients=100)]
    assert fedlib.grid.estimate_seconds(spec(), records, "cpu") == 20.0
    assert fedlib.grid.estimate_seconds(spec(), records + [rec(40)], "cpu") == 25.0  # an even count: the middle two's mean


def test_cpu_and_gpu_records_never_mix():
    records = [rec(100, device="cpu"), rec(7, device="cuda:0"), rec(9, device="cuda:1"), rec(8, device="cuda")]
    assert fedlib.grid.estimate_seconds(spec(), records, "cpu") == 100.0
    assert fedlib.grid.estimate_seconds(spec(), records, "cuda") == 8.0
    assert fedlib.grid.estimate_seconds(spec(), [rec(7, device="cuda:0")], "cpu") is None
    assert fedlib.grid.device_kind_of("cuda:3") == "cuda" and fedlib.grid.device_kind_of("cpu") == "cpu" and fedlib.grid.device_kind_of(None) is None


def test_without_the_same_method_and_k_the_data_set_is_the_fallback_then_none():
    other = [rec(10, method="cl"), rec(50, method="fedprox", n_clients=20), rec(90, method="ifca")]
    unrelated = [rec(1, dataset="fmnist"), rec(1, n_train=None), rec(1, rounds=40), rec(1, local_epochs=5),
                 rec(1, status="failed"), rec(1, status="infeasible"), rec(None), rec(float("nan"))]
    assert fedlib.grid.estimate_seconds(spec("clust_psi_pfl"), other + unrelated, "cpu") == 50.0  # any method on adult
    assert fedlib.grid.estimate_seconds(spec("clust_psi_pfl"), unrelated, "cpu") is None  # nothing comparable
    assert fedlib.grid.estimate_seconds(spec(), [], "cuda") is None


def test_the_effective_training_length_is_matched_defaults_included():
    """A spec that leaves rounds and epochs to FLConfig's defaults (T = 40, E = 5) matches
    records that ran those, not the CI-sized ones."""
    paper = X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", n_train=2000)
    assert fedlib.grid.estimate_seconds(paper, [rec(3), rec(300, rounds=40, local_epochs=5)], "cpu") == 300.0
    assert fedlib.grid.estimate_seconds(paper, [rec(3)], "cpu") is None


def test_records_measured_under_the_same_sharing_come_first_a_different_one_never():
    records = [rec(100, processes=16), rec(120, processes=16), rec(10, processes=1), rec(30)]
    assert fedlib.grid.estimate_seconds(spec(), records, "cuda") is None  # all CPU
    gpu = [{**r, "device": "cuda:0"} for r in records]
    assert fedlib.grid.estimate_seconds(spec(), gpu, "cuda", processes=16) == 110.0  # the same sharing
    assert fedlib.grid.estimate_seconds(spec(), gpu, "cuda", processes=8) == 30.0  # unknown sharing beats a different one
    assert fedlib.grid.estimate_seconds(spec(), gpu[:3], "cuda", processes=8) is None  # 16 and 1 are not 8
    assert fedlib.grid.estimate_seconds(spec(), gpu, "cuda") == 30.0  # unknown here: the records that do not say first
    assert fedlib.grid.estimate_seconds(spec(), gpu[:3], "cuda") == 100.0  # then any (median of 100, 120, 10)
    # the sharing rule holds within the method tier before the data-set fallback is tried
    assert fedlib.grid.estimate_seconds(spec(), [gpu[2], {**gpu[0], "spec": {**gpu[0]["spec"], "method": "cl"}}],
                              "cuda", processes=16) == 100.0


def test_bad_estimate_arguments_are_refused():
    with pytest.raises(ValueError, match=r"device_kind must be one of \['cpu', 'cuda'\], got 'cuda:0'"):
        fedlib.grid.estimate_seconds(spec(), [], "cuda:0")
    with pytest.raises(ValueError, match=r"processes must be an integer ≥ 1 \(or None for the default\), got 0"):
        fedlib.grid.estimate_seconds(spec(), [], "cuda", processes=0)


def test_fits_budget_applies_the_safety_factor_and_nothing_starts_after_the_deadline():
    assert fedlib.grid.SAFETY_FACTOR == 1.15
    assert fedlib.grid.fits_budget(100, deadline=1115, now=1000)
    assert not fedlib.grid.fits_budget(100, deadline=1114, now=1000)
    assert fedlib.grid.fits_budget(None, deadline=1001, now=1000)  # no estimate: started, unprotected
    assert not fedlib.grid.fits_budget(None, deadline=1000, now=1000) and not fedlib.grid.fits_budget(0, deadline=999, now=1000)


def test_the_reserve_covers_the_longest_comparable_run_as_well_as_the_safety_factor():
    """Comparable runs of 100, 110 and 1000 s: the estimate is the median (110 s), the reserve 1000 / 1.15,
    so that 1.15 × reserve is the longest; where the longest is within 1.15 × the median, the median."""
    three = [rec(100), rec(110), rec(1000)]
    assert fedlib.grid.estimate_seconds(spec(), three, "cpu") == 110.0
    assert fedlib.grid.reserve_seconds(spec(), three, "cpu") == pytest.approx(1000 / 1.15)
    assert fedlib.grid.reserve_seconds(spec(), [rec(100), rec(110), rec(120)], "cpu") == 110.0
    assert fedlib.grid.reserve_seconds(spec(), [rec(7, device="cuda:0")], "cpu") is None


@pytest.mark.parametrize("longest, started", [(1000.0, False), (500.0, True)])
def test_a_run_starts_only_if_the_longest_comparable_run_would_end_in_time(tmp_path, monkeypatch, capsys,
                                                                         longest, started):
    """Under a 600 s budget a run whose comparable runs took 100, 110 and ``longest`` s: 1.15 × the
    median (126.5 s) fits either way; a longest of 1000 s does not, 500 s does."""
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "1")
    out = tmp_path / "results"
    for i, seconds in enumerate((100.0, 110.0, longest)):
        _fake(out, seconds, name=f"fake{i}.json")
    ran = []
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": ran.append(s) or record_fakes.record(s))
    recs = X.run_grid([spec()], out, device="cpu", progress="lines", budget=600)
    assert (len(ran), len(recs)) == ((1, 1) if started else (0, 0))
    err = capsys.readouterr().err
    assert ("run_grid: budget: 1 runs left for a later call, reserving 870 s of runs" in err) is not started


@pytest.mark.parametrize("here, started", [("AVX512", True), ("AVX2", False)])
def test_a_budget_on_a_slower_host_reserves_the_other_hosts_runs_times_their_measured_ratio(
        tmp_path, monkeypatch, capsys, here, started):
    """The run's comparable records were measured on AVX-512 hosts at 100 and 110 s; CL, measured on
    both, took 3 × as long on AVX2. Under a 200 s budget an AVX-512 host starts the run (1.15 × 105 s
    fits); an AVX2 host reserves 315 s and leaves it, and says why."""
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "1")
    out = tmp_path / "results"
    for i, (cap, seconds, method) in enumerate([("AVX512", 100.0, "fedavg"), ("AVX512", 110.0, "fedavg"),
                                                ("AVX512", 40.0, "cl"), ("AVX2", 120.0, "cl")]):
        r = rec(seconds, method=method)
        r["cpu_seconds"], r["host"]["cpu_capability"] = seconds, cap
        out.mkdir(parents=True, exist_ok=True)
        (out / f"fake{i}.json").write_text(json.dumps(r))
    records = fedlib.grid.timing_records(out)
    assert fedlib.grid.reserve_seconds(spec(), records, "cpu", here="AVX2") == pytest.approx(315.0)
    assert fedlib.grid.reserve_seconds(spec(), records, "cpu", here="AVX512") == 105.0
    assert fedlib.grid.reserve_seconds(spec(), records, "cpu") == 105.0  # as measured
    assert fedlib.grid.reserve_seconds(spec(), records, "cuda", here="AVX2") is None  # CPU records never price a GPU
    monkeypatch.setattr(fedlib.grid, "cpu_capability", lambda: here)
    ran = []
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": ran.append(s) or record_fakes.record(s))
    recs = X.run_grid([spec()], out, device="cpu", progress="lines", budget=200)
    assert (len(ran), len(recs)) == ((1, 1) if started else (0, 0))
    err = capsys.readouterr().err
    assert ("1 runs left for a later call, reserving 315 s of runs" in err) is not started
    line = {"AVX2": "a run on this host (AVX2) costs 3.00 × its CPU-seconds on an AVX512 host (the median over 1 "
                    "setting measured on both)",
            "AVX512": "a run on this host (AVX512) costs 0.33 × its CPU-seconds on an AVX2 host"}[here]
    assert line in err
    assert fedlib.grid.host_line(records, "cuda") is None and fedlib.grid.host_line(records, "cpu", "NEON") is None


def test_a_resumable_run_needs_its_first_rounds_unless_whole_runs_are_asked(monkeypatch):
    """FedAvg is resumable: at T = 40 rounds it starts on 2/40 of its estimate; CL is not: all of it.
    $FEDLIB_WHOLE_RUNS=1 (the GPU lease's setting) asks all of it of both."""
    fedavg = X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", fl={"rounds": 40, "local_epochs": 1}, n_train=2000)
    cl = X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "cl", fl={"rounds": 40, "local_epochs": 1}, n_train=2000)
    monkeypatch.delenv(fedlib.grid.ENV_WHOLE_RUNS, raising=False)
    assert fedlib.grid.seconds_to_start(fedavg, 400.0) == 20.0 and fedlib.grid.seconds_to_start(cl, 400.0) == 400.0
    assert "first 2 rounds" in fedlib.grid.budget_rule()
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "1")
    assert fedlib.grid.seconds_to_start(fedavg, 400.0) == 400.0 and fedlib.grid.seconds_to_start(cl, 400.0) == 400.0
    assert fedlib.grid.budget_rule() == "($FEDLIB_WHOLE_RUNS=1: all of it, resumable runs too)"
    assert fedlib.grid.seconds_to_start(fedavg, None) is None
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "yes")
    with pytest.raises(ValueError, match=r"\$FEDLIB_WHOLE_RUNS must be 1 \(a run starts only if all of it fits the "
                                         r"budget\), 0 or unset, got 'yes'"):
        fedlib.grid.check_settings()


def test_fitting_prefix_keeps_the_leading_runs_whose_summed_estimate_ends_in_time():
    f = fedlib.grid.fitting_prefix
    assert f([100.0, 100.0, 100.0], 345.0) == 3  # 1.15 × 300 = 345
    assert f([100.0, 100.0, 100.0], 344.0) == 2  # 1.15 × 200 = 230 ≤ 344 < 345
    assert f([100.0, 50.0, 400.0, 10.0], 200.0) == 2  # a prefix: the run after the first misfit waits too
    assert f([100.0, 100.0], 114.0) == 0 and f([], 10.0) == 0
    assert f([100.0, None, 5.0], 1.0) == 3  # an unknown estimate: the budget cannot protect the group


def test_a_group_trained_together_is_trimmed_to_what_ends_in_time_and_the_rest_run_alone(tmp_path, monkeypatch):
    """Three FedAvg runs estimated at 100 s each under a 300 s budget: two train together (1.15 ×
    200 s fits, 1.15 × 300 s does not), the third alone; none is left and no group is cut."""
    from fedlib import together as T
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    out = tmp_path / "results"
    _fake(out, 100.0)
    groups, alone = [], []
    monkeypatch.setattr(T, "run_together", lambda specs, device="auto", checkpointer=None:
                        groups.append([s.seed for s in specs]) or [record_fakes.record(s) for s in specs])
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": alone.append(s.seed) or record_fakes.record(s))
    specs = [X.RunSpec("adult", "dirichlet", 0.5, 10, seed, "fedavg", fl=FAST, n_train=2000) for seed in (0, 1, 2)]
    recs = X.run_grid(specs, out, device="cpu", progress=False, budget=300, together=True)
    assert groups == [[0, 1]] and alone == [2]
    assert sorted(r["key"] for r in recs) == sorted(s.key() for s in specs)
    assert not any(claims.claim_path(X.record_path(out, s)).exists() for s in specs)


def test_without_wait_a_run_another_process_holds_is_left_to_it_not_waited_for(tmp_path, monkeypatch):
    """The plan's processes race down one list (run_plan passes wait=False): a run another live
    process claimed is left to it, the free one computed; with the default wait it would block."""
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    out = tmp_path / "results"
    out.mkdir()
    held, free = [X.RunSpec("adult", "dirichlet", 0.5, 10, seed, "fedavg", fl=FAST, n_train=2000) for seed in (0, 1)]
    assert claims.try_claim(X.record_path(out, held))  # a live process (this one) holds it
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": record_fakes.record(s))
    seen = []
    recs = X.run_grid([held, free], out, progress=False, wait=False,
                      on_run=lambda s, record, elsewhere, est: seen.append((s.seed, record is None, elsewhere)))
    assert seen == [(1, False, False), (0, True, True)]
    assert [r["key"] for r in recs] == [free.key()] and not X.record_path(out, held).exists()
    claims.release(X.record_path(out, held))


def test_timing_records_reads_folders_recursively_once_each_and_only_finished_runs(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "r1.json").write_text(json.dumps(rec(10)))
    (tmp_path / "a" / "b" / "r2.json").write_text(json.dumps(rec(20, processes=4)))
    (tmp_path / "a" / "failed.json").write_text(json.dumps(rec(5, status="failed")))
    (tmp_path / "a" / "manifest.json").write_text(json.dumps({"keys": ["x"]}))
    (tmp_path / "a" / "list.json").write_text("[1, 2]")
    (tmp_path / "a" / "broken.json").write_text("{")
    (tmp_path / "a" / ".tmp-x.json.part").write_text(json.dumps(rec(1)))
    got = fedlib.grid.timing_records(tmp_path / "a", tmp_path / "a" / "b", tmp_path / "missing")
    assert sorted(r["seconds"] for r in got) == [10, 20]  # r2 once, though two folders hold it
    assert {r["host"]["processes"] for r in got} == {None, 4}
    (tmp_path / "a" / "r1.json").write_text(json.dumps(rec(11)))  # a new version is read again
    assert sorted(r["seconds"] for r in fedlib.grid.timing_records(tmp_path / "a")) == [11, 20]


# ----------------------------------------------------------------------------- run_grid
def _fake(folder, seconds, name="fake.json", **kw):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(rec(seconds, **kw)))


def test_a_run_that_cannot_end_within_the_budget_is_left_unclaimed_and_unwritten(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    out = tmp_path / "results"
    _fake(out, 1e6)  # a comparable run took 11.6 days
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("a run that cannot fit was started"))
    s = spec()
    assert X.run_grid([s], out, device="cpu", progress="lines", budget=600) == []
    assert not X.record_path(out, s).exists() and not claims.claim_path(X.record_path(out, s)).exists()
    assert sorted(p.name for p in out.iterdir()) == ["fake.json"]
    # the timing fake is named fake.json, not its key: the records reader refuses it as a record (named on
    # stderr), while the estimate still reads its seconds
    err = [e for e in capsys.readouterr().err.splitlines() if not e.startswith("fedlib: record ")]
    assert err[0] == "run_grid: 1 runs, 0 already recorded, 1 to train"
    assert err[1] == ("run_grid: budget 600 s: a run starts only if 1.15 × its estimated seconds, and the longest "
                      "comparable run, end before it (a resumable method's run: those of its first 2 rounds; it stops at a round boundary)")
    assert err[-1] == "run_grid: budget: 1 runs left for a later call, reserving 1000000 s of runs"


def test_estimates_come_from_the_extra_folders_too_and_other_runs_still_start(tmp_path, monkeypatch):
    """The slow run is skipped, the next (estimated fast) one still starts: a shorter run may fit."""
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    out, committed = tmp_path / "results", tmp_path / "committed"
    _fake(committed / "nested", 1e6, method="clust_psi_pfl")
    _fake(committed, 1.0, name="fast.json", method="local")
    started = []
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": started.append(s.method) or record_fakes.record(s))
    slow, fast = spec("clust_psi_pfl"), spec("local")
    recs = X.run_grid([slow, fast], out, device="cpu", progress=False, budget=600, estimate_from=[committed])
    assert started == ["local"] and [r["key"] for r in recs] == [fast.key()]
    assert not X.record_path(out, slow).exists()


@pytest.mark.cross_cpu
def test_a_run_that_fits_is_computed_and_records_its_sharing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDLIB_SHARING", "4")
    out = tmp_path / "results"
    _fake(out, 0.01, processes=4)
    s = spec("local")
    recs = X.run_grid([s], out, device="cpu", progress="lines", budget=600)
    assert len(recs) == 1 and recs[0]["status"] == "ok" and X.record_path(out, s).exists()
    assert recs[0]["host"]["processes"] == 4  # measured with 4 processes sharing the device
    assert "left for a later call" not in capsys.readouterr().err


def test_a_run_without_any_comparable_record_is_started_and_said_so(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    monkeypatch.setattr(fedlib.run, "run", lambda s, device="auto": record_fakes.record(s, "infeasible"))
    recs = X.run_grid([spec()], tmp_path, device="cpu", progress="lines", budget=600)
    assert [r["status"] for r in recs] == ["infeasible"]
    assert ("run_grid: no comparable record estimates adult (Dirichlet α = 0.5) K=10 fedavg seed=0 on cpu: started; "
            "the budget cannot protect it") in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("kwargs, match", [
    (dict(budget=-1), r"budget must be a finite number > 0 \(or None for the default\), got -1"),
    (dict(budget=0), r"budget must be a finite number > 0"),
    (dict(budget=float("inf")), r"budget must be a finite number > 0"),
    (dict(budget="600"), r"budget must be a finite number > 0 .*got '600'"),
    (dict(budget=600, backend="ray"), r"budget must be None with backend='ray' \(only the local backend keeps a "
                                      r"budget\): use backend='local', or leave budget out, got 600"),
    (dict(estimate_from=["x"]), r"estimate_from must be left out unless budget is given"),
    (dict(budget=600, estimate_from=["/no/such/folder"]), r"estimate_from must be existing folders of records, "
                                                           r"got '/no/such/folder'"),
])
def test_bad_budgets_fail_before_any_work(tmp_path, kwargs, match):
    out = tmp_path / "results"
    with pytest.raises(ValueError, match=match):
        X.run_grid([spec()], out, device="cpu", progress=False, **kwargs)
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_sharing_count_fails_before_any_work(tmp_path, monkeypatch, value):
    monkeypatch.setenv("FEDLIB_SHARING", value)
    with pytest.raises(ValueError, match=rf"\$FEDLIB_SHARING must be an integer ≥ 1 .*got '{value}'"):
        X.run_grid([spec()], tmp_path / "r", device="cpu", progress=False, budget=60)
    assert not (tmp_path / "r").exists()


def test_table3_script_passes_its_budget_to_run_grid(tmp_path, capsys, monkeypatch):
    """benchmarks/table3_like_for_like.py --budget (the grid command's, on the paper table
    clust-psi-pfl-table3): a run a comparable record says takes 11.6 days is left for later; nothing
    trains, nothing is written."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    loader = importlib.util.spec_from_file_location("table3_like_for_like", root / "benchmarks" / "table3_like_for_like.py")
    script = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(script)
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    monkeypatch.setattr(fedlib.run, "run", lambda *a, **k: pytest.fail("a run that cannot fit was started"))
    times, out = tmp_path / "times", tmp_path / "results"
    _fake(times, 1e6, n_train=None)
    argv = ["--dataset", "adult", "--settings", "similarity:1", "--methods", "fedavg", "--reproductions", "paper_text",
            "--clients", "10", "--rounds", "2", "--epochs", "1", "--results", str(out), "--device", "cpu"]
    script.main(argv + ["--budget", "60", "--estimate-from", str(times)])
    captured = capsys.readouterr()
    assert "clust-psi-pfl-table3: budget: 1 runs left for a later call, reserving 1000000 s of runs" in captured.out
    assert "no records yet" in captured.out and not list(out.glob("*.json"))
    with pytest.raises(ValueError, match=r"--budget must be a finite number > 0, got -1\.0"):
        script.main(argv + ["--budget", "-1"])
