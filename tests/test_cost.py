"""fedlib.cost: the one estimator of what a run costs (run_grid's budget, ``python -m fedlib.grid
--list``, the report's "not run" lists, notebook 11's designs) — by hand on made-up records, its
labelled fallback, and the report's not-run groups against ``--list`` of the commands it prints."""
from __future__ import annotations

import math
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from fedlib import cost
from fedlib import experiment as X

import record_fakes

FL = {"rounds": 2, "local_epochs": 1}


def spec(method="fedavg", k=10, seed=0, dataset="adult"):
    return X.RunSpec(dataset, "dirichlet", 0.5, k, seed, method, fl=FL, n_train=2000)


def rec(s, seconds, cpu=None, device="cpu", threads=None, processes=None, **fl):
    """A finished record of ``s`` (record_fakes) with its times, device and host."""
    host = {k: v for k, v in (("threads", threads), ("processes", processes)) if v is not None}
    r = record_fakes.record(s, seconds=seconds, device=device, host=host, fl={**FL, **fl})
    if cpu is None:
        r.pop("cpu_seconds")
    else:
        r["cpu_seconds"] = cpu
    return r


# ----------------------------------------------------------------------------- by hand
def test_the_estimate_is_the_median_cpu_seconds_of_the_same_method_and_k():
    recs = [rec(spec(seed=0), 10, cpu=15), rec(spec(seed=1), 10, cpu=35), rec(spec(seed=2), 10, cpu=20),
            rec(spec("cl"), 1, cpu=1000), rec(spec(k=20), 1, cpu=5000),
            rec(spec(seed=3), 1, cpu=1, device="cuda:0"), rec(spec(seed=4), 1, cpu=1, rounds=40)]
    assert cost.estimate(spec(), recs) == cost.Estimate(20.0, cost.CPU_SECONDS, 3, 35.0)  # not the wall seconds (10); the longest: 35
    assert cost.estimate(spec(), recs + [rec(spec(seed=5), 1, cpu=40)]).seconds == 27.5  # the middle two's mean
    # no record of the method and K: any method and K on the data set (1000, 5000, and the three fedavg runs)
    assert cost.estimate(spec("ifca"), recs) == cost.Estimate(35.0, cost.CPU_SECONDS, 5, 5000.0)
    assert cost.estimate(spec(dataset="fmnist"), recs) == cost.Estimate(None)
    assert cost.estimate(spec(dataset="fmnist"), recs).basis is None


def test_estimate_each_is_estimate_of_each_run_in_order_one_walk_a_pricing_key(monkeypatch):
    recs = [rec(spec(seed=0), 10, cpu=15), rec(spec(seed=1), 10, cpu=35), rec(spec("cl"), 1, cpu=1000)]
    runs = [spec(seed=7), spec("cl"), spec(seed=8), spec(dataset="fmnist"), spec("cl", seed=3)]
    want = [cost.estimate(s, recs) for s in runs]
    assert [e.seconds for e in want] == [25.0, 1000.0, 25.0, None, 1000.0]
    walks = []
    real = cost.comparable
    monkeypatch.setattr(cost, "comparable", lambda s, *a, **k: walks.append(s) or real(s, *a, **k))
    assert cost.estimate_each(runs, recs) == want
    assert walks == [runs[0], runs[1], runs[3]]  # seeds 8 and 3 share their key with an earlier run
    assert cost.estimate_each([], recs) == []


def test_a_methods_own_reading_prices_it_before_its_other_reading(tmp_path):
    """PoC's paper_code runs cost ~160 CPU-s, its paper_text runs ~1,200: a paper_text run is priced
    by paper_text records (even by the fallback) while there are any, else by the method's others."""
    import dataclasses
    import json

    import fedlib.grid

    text, code = spec("poc"), dataclasses.replace(spec("poc"), reproduction="paper_code")
    recs = [rec(dataclasses.replace(code, seed=i), 160, cpu=160.0) for i in range(3)]
    recs += [rec(dataclasses.replace(text, seed=i), 1200, threads=1) for i in range(2)]
    assert cost.estimate(text, recs) == cost.Estimate(1200.0, cost.FALLBACK_THREADS, 2, 1200.0)
    assert cost.estimate(code, recs) == cost.Estimate(160.0, cost.CPU_SECONDS, 3, 160.0)
    assert cost.estimate(text, recs[:3]).seconds == 160.0  # no record of its reading: the method's others
    for i, r in enumerate(recs):  # what timing_records keeps tells the readings apart too
        (tmp_path / f"{i}.json").write_text(json.dumps(r))
    assert cost.estimate(text, fedlib.grid.timing_records(tmp_path)).seconds == 1200.0


def test_within_its_group_a_run_is_priced_by_records_of_its_protocol_and_hyper_parameters(tmp_path):
    """FedAMP's HeurFedAMP and softmax attention cost ~40 and ~400 CPU-s a run (notebook 11's records)
    at the same method, K and length:
    a run is priced by the records of its own hyper-parameters and protocol where there are any,
    else by its whole group, as before."""
    import dataclasses
    import json

    import fedlib.grid

    heur = spec("fedamp")  # today's default attention, HeurFedAMP
    plain = dataclasses.replace(spec("fedamp"), hyper={"attention": "softmax"})
    recs = [rec(dataclasses.replace(heur, seed=i), 40, cpu=40.0 + i) for i in range(3)]
    recs += [rec(dataclasses.replace(plain, seed=i), 400, cpu=400.0) for i in range(2)]
    assert cost.estimate(heur, recs) == cost.Estimate(41.0, cost.CPU_SECONDS, 3, 42.0)
    assert cost.estimate(plain, recs) == cost.Estimate(400.0, cost.CPU_SECONDS, 2, 400.0)
    other = dataclasses.replace(heur, hyper={"attention": "paper"})
    assert cost.estimate(other, recs) == cost.Estimate(42.0, cost.CPU_SECONDS, 5, 400.0)  # none of its own: the group
    similarity = dataclasses.replace(plain, protocol="similarity", level=0.5)
    assert cost.estimate(similarity, recs).records == 5  # another protocol, no record of it: the group
    recs.append(rec(dataclasses.replace(similarity, seed=5), 900, cpu=900.0))
    assert cost.estimate(similarity, recs) == cost.Estimate(900.0, cost.CPU_SECONDS, 1, 900.0)
    assert cost.estimate(plain, recs).seconds == 400.0  # dirichlet's own records still price dirichlet
    assert cost.setting({"protocol": "dirichlet"}) == cost.setting({"protocol": "dirichlet", "hyper": {}})
    # what a caller pricing many runs prices once: equal for another seed or level, not another setting
    assert cost.pricing_key(heur) == cost.pricing_key(dataclasses.replace(heur, seed=7, level=0.1))
    assert len({cost.pricing_key(s) for s in (heur, plain, other, similarity)}) == 4
    for i, r in enumerate(recs):  # what timing_records keeps tells the settings apart too
        (tmp_path / f"{i}.json").write_text(json.dumps(r))
    assert cost.estimate(heur, fedlib.grid.timing_records(tmp_path)).seconds == 41.0


def test_a_record_without_cpu_seconds_is_priced_by_the_labelled_fallback():
    two = [rec(spec(seed=0), 100, threads=2), rec(spec(seed=1), 300, threads=2)]
    est = cost.estimate(spec(), two)
    assert est == cost.Estimate(400.0, cost.FALLBACK_THREADS, 2, 600.0) and est.fallback  # wall seconds × threads
    assert cost.run_cost(rec(spec(), 100, threads=4)) == (400.0, cost.FALLBACK_THREADS)
    assert cost.run_cost(rec(spec(), 100)) == (100.0, cost.FALLBACK_WALL)  # no threads either: the wall seconds
    assert "fallback: no cpu_seconds" in cost.FALLBACK_THREADS and "fallback" in cost.FALLBACK_WALL
    mixed = cost.measured([rec(spec(), 100, threads=2), rec(spec(), 50)])
    assert mixed == cost.Estimate(125.0, cost.FALLBACK_MIXED, 2, 200.0) and mixed.fallback
    # records that carry cpu_seconds are preferred; the fallback is not mixed in
    measured = cost.estimate(spec(), two + [rec(spec(seed=2), 100, cpu=90, threads=2)])
    assert measured == cost.Estimate(90.0, cost.CPU_SECONDS, 1, 90.0) and not measured.fallback
    assert cost.run_cost(rec(spec(), None)) is None and cost.run_cost(rec(spec(), float("nan"))) is None


def test_on_a_gpu_the_cost_is_the_device_wall_seconds():
    recs = [rec(spec(seed=0), 8, cpu=40, device="cuda:0"), rec(spec(seed=1), 12, cpu=60, device="cuda"),
            rec(spec(seed=2), 500, cpu=500)]
    assert cost.estimate(spec(), recs, "cuda") == cost.Estimate(10.0, cost.DEVICE_SECONDS, 2, 12.0)
    assert cost.estimate(spec(), recs, "cpu") == cost.Estimate(500.0, cost.CPU_SECONDS, 1, 500.0)
    assert cost.device_kind_of("cuda:3") == "cuda" and cost.device_kind_of(None) is None


def test_the_budget_and_list_read_the_same_estimator():
    import fedlib.grid

    recs = [rec(spec(seed=0), 10, cpu=15), rec(spec(seed=1), 10, cpu=35)]
    assert fedlib.grid.estimate_seconds(spec(), recs, "cpu") == cost.estimate(spec(), recs).seconds == 25.0
    assert fedlib.grid.device_kind_of is cost.device_kind_of


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r"device_kind must be one of \['cpu', 'cuda'\], got 'gpu'"):
        cost.estimate(spec(), [], "gpu")
    with pytest.raises(ValueError, match=r"processes must be an integer ≥ 1"):
        cost.estimate(spec(), [], "cpu", processes=0)


def test_timing_records_keep_what_the_estimator_reads(tmp_path):
    import json

    import fedlib.grid

    r = rec(spec(), 10, cpu=15, threads=2, processes=1)
    r["host"]["cpu_capability"] = "AVX2"
    (tmp_path / "r.json").write_text(json.dumps(r))
    [t] = fedlib.grid.timing_records(tmp_path)
    assert cost.estimate(spec(), [t]) == cost.Estimate(15.0, cost.CPU_SECONDS, 1, 15.0)
    assert t["host"] == {"threads": 2, "processes": 1, "cpu_capability": "AVX2"}
    assert cost.capability_of(t) == "AVX2"


# ----------------------------------------------------------------------------- hosts
def on(cap, s, cpu, **kw):
    """A record of ``s`` measured on a host of capability ``cap`` (None: not recorded)."""
    r = rec(s, cpu, cpu=cpu, **kw)
    if cap is not None:
        r["host"]["cpu_capability"] = cap
    return r


def test_host_ratios_are_the_median_over_settings_measured_on_both_hosts_of_their_medians_ratio():
    """FedAvg K=10: AVX2 300 vs AVX-512 100, 140 (median 120): 2.5. CL: 90 vs 30: 3. FedProx K=10 was
    measured on AVX-512 only, FedAvg K=20 on AVX2 only, FedAvg with other hyper-parameters on both
    (200 vs 100: 2): the median of 2.5, 3 and 2 is 2.5. A record without a capability, a GPU run, a
    failed one and one without cpu_seconds measure nothing."""
    hyper = X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", fl=FL, n_train=2000, hyper={"lr": 0.1})
    rs = [on("AVX2", spec(), 300), on("AVX512", spec(seed=1), 100), on("AVX512", spec(seed=2), 140),
          on("AVX2", spec("cl"), 90), on("AVX512", spec("cl"), 30), on("AVX512", spec("fedprox"), 50),
          on("AVX2", spec(k=20), 999), on("AVX2", hyper, 200), on("AVX512", hyper, 100),
          on(None, spec(), 5), on("AVX512", spec(), 1, device="cuda:0")]
    failed = on("AVX512", spec("cl"), 1)
    failed["status"] = "failed"
    no_cpu = rec(spec("cl"), 1)
    no_cpu["host"]["cpu_capability"] = "AVX512"
    ratios = cost.host_ratios(rs + [failed, no_cpu], "AVX2")
    assert ratios == {"AVX512": cost.HostRatio(2.5, 3)}
    back = cost.host_ratios(rs, "AVX512")["AVX2"]
    assert back.settings == 3 and back.ratio == pytest.approx(1 / 2.5)
    assert cost.host_ratios(rs, "DEFAULT") == {}  # nothing measured on that host: no ratio
    damaged = on("AVX512", spec(), 100)
    damaged["host"]["cpu_capability"] = ["AVX512"]  # not a name: read as unknown, never a key
    assert cost.capability_of(damaged) is None and cost.capability_of({"host": "AVX2"}) is None
    assert cost.host_ratios(rs + [damaged], "AVX2") == ratios
    different_sharing = [on("AVX2", spec(), 300, processes=2), on("AVX512", spec(), 100, processes=1)]
    assert cost.host_ratios(different_sharing, "AVX2") == {}  # two sharings are two settings


def test_on_host_scales_only_the_records_of_other_hosts_with_a_measured_ratio():
    rs = [on("AVX512", spec(), 100), on("AVX2", spec(seed=1), 300), on(None, spec(seed=2), 50),
          on("DEFAULT", spec(seed=3), 70)]
    rs[0]["seconds"] = 110.0
    scaled = cost.on_host(rs, "AVX2", {"AVX512": cost.HostRatio(2.5, 4)})
    assert [r["cpu_seconds"] for r in scaled] == [250.0, 300, 50, 70]  # no ratio to DEFAULT; none for None
    assert scaled[0]["seconds"] == 275.0 and rs[0]["cpu_seconds"] == 100  # a copy: the records are left as read
    assert scaled[1:] == rs[1:]
    assert cost.on_host(rs, None) == rs
    # the ratios default to the records' own: here FedAvg on both hosts, 300 / 100
    assert [r["cpu_seconds"] for r in cost.on_host(rs[:2], "AVX2")] == [300.0, 300]
    assert cost.estimate(spec(), cost.on_host(rs[:2], "AVX2")).seconds == 300.0
    assert cost.estimate(spec(), rs[:2]).seconds == 200.0  # records read as measured
    gpu = on("AVX512", spec(seed=4), 9, device="cuda:0")
    assert cost.on_host([gpu], "AVX2", {"AVX512": cost.HostRatio(2.5, 4)}) == [gpu]  # a GPU run's cost is the device's


def test_printed_estimates_are_in_reference_host_cpu_seconds_and_the_budget_in_this_hosts(tmp_path):
    """FedAvg, CL and FedProx each took twice as long on AVX2 as on AVX-512 (FedAvg: 220 against
    100 and 120), so an AVX2 record is worth half its CPU-seconds on the reference host. FedAvg's
    printed estimate is the median of 100, 120 and 220 / 2 = 110 — not 120, as one slower host's
    record made it when read as measured — on either host that prints it; an AVX2 budget reserves
    the median of 200, 240 and 220."""
    import json

    import fedlib.grid
    from fedlib import grid_cli

    assert cost.REFERENCE_CAPABILITY == "AVX512"
    rs = [on("AVX512", spec(seed=1), 100), on("AVX512", spec(seed=2), 120), on("AVX2", spec(seed=3), 220),
          on("AVX512", spec("cl"), 50), on("AVX2", spec("cl", seed=1), 100),
          on("AVX512", spec("fedprox"), 60), on("AVX2", spec("fedprox", seed=1), 120)]
    assert cost.estimate(spec(), rs).seconds == 120.0  # as measured: the slower host's record moves the median
    assert cost.estimate(spec(), cost.on_reference_host(rs)).seconds == 110.0
    assert fedlib.grid.reserve_seconds(spec(), rs, "cpu", here="AVX2") == 220.0
    folder = tmp_path / "records"
    folder.mkdir()
    for i, r in enumerate(rs):
        (folder / f"r{i}.json").write_text(json.dumps(r))
    totals = grid_cli.list_runs([spec(seed=9)], tmp_path / "out", "cpu", estimate_from=[folder], echo=lambda _: None)
    assert totals["seconds"] == 110.0  # what --list prints, whichever host runs it


def test_cost_per_run_is_the_estimator_per_round_and_says_its_basis():
    from workbook import ranking_power as RP

    recs = [rec(spec(seed=0), 1, cpu=100, rounds=10), rec(spec(seed=1), 1, cpu=300, rounds=10),
            rec(spec(seed=2), 1, cpu=900, rounds=10), rec(spec("cl"), 50, threads=2, rounds=10)]
    for r in recs:
        r["spec"]["fl"] = {"rounds": 10}
    per = RP.cost_per_run(recs, lambda r: r["spec"]["method"])
    assert per.to_dict() == pytest.approx({"fedavg": 30.0, "cl": 10.0})  # medians: 300 / 10, (50 × 2) / 10
    assert per.attrs["basis"] == {"fedavg": cost.CPU_SECONDS, "cl": cost.FALLBACK_THREADS}
    recs[0]["spec"]["fl"] = {"rounds": 20}
    with pytest.raises(ValueError, match="key must be a grouping whose every group ran one number of rounds"):
        RP.cost_per_run(recs, lambda r: r["spec"]["method"])


# ----------------------------------------------------------------------------- the report vs --list
ROOT = Path(__file__).resolve().parents[1]


def test_the_report_rewrites_params_as_the_printed_sed_does(tmp_path):
    """The report applies the sed of a printed command itself (workbook.report._sed); sed agrees."""
    from workbook import report
    from workbook.report_cells import GRID_VARIANTS

    for key in ("cafa/training:paper_code", "pfedlia/table1:workbook"):
        sed = GRID_VARIANTS[key][1]  # the shell command writing the variant's params file
        out, text = report._sed(shlex.split(sed), ROOT)
        words = shlex.split(sed)
        real = subprocess.run(words[:words.index(">")], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert text == real and out.startswith("/tmp/")
        assert text != (ROOT / words[words.index(">") - 1]).read_text()


@pytest.fixture(scope="module")
def committed_groups():
    """The not-run groups of the committed records, per paper table as the report prints them."""
    import pandas as pd

    from workbook import report

    df = report.frame()
    idle = df[df.verdict == "not run"]
    return pd.concat([report.not_run_groups(idle[(idle.paper == p) & (idle.table == t)])
                      for p, t in dict.fromkeys(zip(idle.paper, idle.table))], ignore_index=True)


def _list_totals(command: str, tmp_path: Path, capsys) -> dict:
    """``--list``'s totals of a printed ``command``, each of its parts called as a user would:
    ``python -m fedlib.grid ... --list`` through :func:`fedlib.grid_cli.main` (a ``sed ... >`` before
    it run by sed into ``tmp_path``); ``table3_like_for_like.py``, which has no ``--list``, through
    :func:`fedlib.grid_cli.list_runs` on the script's own spec list."""
    from fedlib import grid_cli
    from workbook import like_for_like

    totals = {"runs": 0, "recorded": 0, "to_compute": 0, "seconds": 0.0, "rounded": 0}
    for line in command.split("\n"):
        *before, run = line.split(" && ")
        words = shlex.split(run)
        for part in before:
            sed = shlex.split(part)
            target = tmp_path / Path(sed[-1]).name
            target.write_text(subprocess.run(sed[:-2], cwd=ROOT, capture_output=True, text=True, check=True).stdout)
            words = [str(target) if w == sed[-1] else w for w in words]
        if words[1] == "benchmarks/table3_like_for_like.py":
            a = like_for_like.script_parser().parse_args(words[2:])
            t = grid_cli.list_runs(like_for_like.script_specs(a), ROOT / a.results, "cpu", echo=lambda _: None)
            totals["runs"] += t["recorded"] + t["running"] + t["to_compute"]
            totals["recorded"] += t["recorded"]
            totals["to_compute"] += t["to_compute"]
            totals["seconds"] += t["seconds"]
            continue
        argv = words[3:] + ([] if "--device" in words else ["--device", "cpu"])
        grid_cli.main([w if not w.startswith("benchmarks/") else str(ROOT / w) for w in argv] + ["--list"])
        last = capsys.readouterr().out.strip().splitlines()[-1]
        m = re.match(r"totals: (\d+) runs, (\d+) recorded, 0 running elsewhere, (\d+) to compute"
                     r"(?:; to compute: ≈ ([\d.]+) (CPU-hours|GPU-minutes))?", last)
        assert m, last
        totals["runs"] += int(m[1])
        totals["recorded"] += int(m[2])
        totals["to_compute"] += int(m[3])
        totals["seconds"] += float(m[4] or 0) * (3600 if m[5] == "CPU-hours" else 60)
        totals["rounded"] += m[5] == "CPU-hours"  # a totals line printed to 0.01 h: ± 0.005 h each
    return totals


@pytest.mark.parametrize("folder, method", [
    ("clust_psi_pfl/table3_like_for_like", None),  # Table III (python -m fedlib.grid clust-psi-pfl-table3): whichever method is left
    ("pfedlia/table1", None),                          # pFedLIA Table I (python -m fedlib.grid): whichever method is left
    ("sed", None),  # a command built as sed > params && python -m fedlib.grid (CAFA's paper_code, pFedLIA's split)
])
def test_the_reports_not_run_runs_and_hours_are_what_list_computes_for_its_command(
        committed_groups, folder, method, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIB_SHARING", raising=False)
    monkeypatch.setenv("FEDLIB_CHECKPOINTS", str(tmp_path / "no-checkpoints"))
    # the report counts a run without a record as not run, whoever may be computing it: so does
    # --list here (a background runner's claim would move it to "running elsewhere")
    from fedlib import grid_cli

    monkeypatch.setattr(grid_cli, "_claimed_elsewhere", lambda out, spec: False)
    if folder == "sed":  # whichever not-run group's command edits a params file first (the rows left change)
        g = committed_groups[committed_groups.command.str.startswith("sed ")]
    else:
        g = committed_groups[(committed_groups.records == folder)
                             & committed_groups.methods.map(lambda ms: method is None or ms == [method]
                                                            or method in ms and folder.startswith(("clust", "pfedlia")))]
    assert len(g), (folder, method)
    g = g.iloc[0]
    t = _list_totals(g.command, tmp_path, capsys)
    assert (t["to_compute"], t["recorded"]) == (g.runs, g.recorded)
    hours = t["seconds"] / 3600
    if "python -m fedlib.grid" not in g.command:  # the script's: list_runs' own seconds, unrounded
        assert hours == pytest.approx(g.hours)
    else:  # each grid command's totals line prints two decimals (both price each pricing_key once)
        assert hours == pytest.approx(g.hours, abs=0.005 * t["rounded"] + 1e-9)


def test_estimate_accuracy_prices_each_run_from_the_others_by_both_rules(tmp_path, capsys):
    """benchmarks/estimate_accuracy.py, left one out: FedAMP's softmax run (400 CPU-s) is priced at
    the group's median by the reference rule, at its own setting's by today's."""
    import dataclasses
    import importlib.util
    import json

    loader = importlib.util.spec_from_file_location("estimate_accuracy", ROOT / "benchmarks" / "estimate_accuracy.py")
    bench = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(bench)
    heur, soft = spec("fedamp"), dataclasses.replace(spec("fedamp"), hyper={"attention": "softmax"})
    runs = [(heur, 0, 40.0), (heur, 1, 44.0), (heur, 2, 42.0), (soft, 0, 400.0), (soft, 1, 420.0)]
    (tmp_path / "f").mkdir()
    for s, seed, cpu in runs:
        r = rec(dataclasses.replace(s, seed=seed), cpu, cpu=cpu)
        (tmp_path / "f" / f"{r['key']}.json").write_text(json.dumps(r))
    rows = {(round(a), g, t, m) for _, a, g, t, m in bench.priced(tmp_path)}
    assert (400, 43.0, 420.0, 420.0) in rows and (420, 43.0, 400.0, 400.0) in rows  # group: median of the other four
    assert (40, 222.0, 43.0, 44.0) in rows  # group: median of 44, 42, 400, 420; setting: of 44, 42, the longest 44
    s = bench.summary([r for r in bench.priced(tmp_path)])
    assert s["n"] == 5 and s["setting"][0] < s["group"][0]
    bench.main(["--records", str(tmp_path)])
    assert "ratio setting/group" in capsys.readouterr().out.splitlines()[-1]
    # the reserve, by hand: runs of 100, 120 and 200 CPU-s priced at a median of 100, the longest of their
    # records 100, 130 and 150: 1.15 × 100 = 115 admits the first only; the reserve (115, 130, 150) the first two
    by_hand = [("f", 100.0, 100.0, 100.0, 100.0), ("f", 120.0, 100.0, 100.0, 130.0), ("f", 200.0, 100.0, 100.0, 150.0)]
    s = bench.summary(by_hand)
    assert s["setting"][1] == pytest.approx(2 / 3) and s["median cut"] == pytest.approx(320 / 420)
    assert s["reserve"] == pytest.approx((1 / 3, 200 / 420))
    # per host: FedAvg measured at 100 and 100 CPU-s on AVX-512, 300 on AVX2; CL at 50 and 150. Left out, the
    # AVX2 FedAvg run reserves 100 s as measured and 300 s scaled by the others' ratio (CL's: 3)
    (tmp_path / "h").mkdir()
    for i, (s_, cap, cpu) in enumerate([(spec(), "AVX512", 100.0), (spec(seed=1), "AVX512", 100.0),
                                        (spec(seed=2), "AVX2", 300.0), (spec("cl"), "AVX512", 50.0),
                                        (spec("cl"), "AVX2", 150.0)]):
        (tmp_path / "h" / f"{i}.json").write_text(json.dumps(on(cap, s_, cpu)))
    assert ("AVX2", 300.0, 100.0, pytest.approx(300.0)) in bench.host_priced(tmp_path / "h")
    by_host = [("AVX2", 300.0, 100.0, 280.0), ("AVX2", 100.0, 100.0, 280.0), ("AVX512", 50.0, 100.0, 100.0)]
    assert bench.host_summary(by_host) == {"AVX2": (2, 0.5, 0.0, 0.75, 0.0), "AVX512": (1, 0.0, 0.0, 0.0, 0.0)}
    # the printed estimate of the AVX-512 runs: each FedAvg run (100) is priced at median(100, 300) = 200 as
    # measured, at median(100, 300 / 3) = 100 in AVX-512 CPU-seconds; CL's (50) at 150, and 150 / 3 = 50
    printed = sorted(bench.printed_priced(tmp_path / "h"))
    assert printed == [(50.0, 150.0, pytest.approx(50.0)), (100.0, 200.0, pytest.approx(100.0)),
                       (100.0, 200.0, pytest.approx(100.0))]
    assert bench.printed_summary(printed) == (3, pytest.approx(math.log(2)), pytest.approx(0.0))
