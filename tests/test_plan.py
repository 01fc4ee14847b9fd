"""workbook.plan: the next runs by the rows they would decide per CPU-hour (issue 67)."""
import json

import numpy as np
import pandas as pd
import pytest

from workbook import plan as P, report, verdicts as V

T3 = "clust_psi_pfl/table3_like_for_like"


def _t3(root, method, protocol, level, seed, acc, cpu=600.0):
    """A Table III like-for-like record (the grid's own spec, so the plan finds it recorded)."""
    import record_fakes
    from fedlib.spec import RunSpec, record_path
    from workbook.like_for_like import FRACTION

    s = RunSpec("fmnist", protocol, level, 100, seed, method, fl={"rounds": 40, "local_epochs": 5, "fraction": FRACTION})
    r = record_fakes.record(s, "ok", acc, fl={"rounds": 40, "local_epochs": 5}, host={"threads": 1}, cpu_seconds=cpu)
    c = round(1000 * acc)  # 1,000 test samples a client: global_accuracy = Σ correct / Σ n_test, as records check
    r.update(n_test=[1000] * 100, correct=[c] * 100, global_accuracy=c / 1000, local_accuracy=[c / 1000] * 100)
    path = record_path(root / T3, s)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(r))
    return s


def _row(df, row, column, reading="both readings"):
    d = df[(df.paper == "clust_psi_pfl") & (df.table == "Table III") & (df.row == row) & (df.column == column)
           & (df.reading == reading)]
    assert len(d) == 1, (row, column, reading)
    return d.iloc[0]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    # FedAvg at S = 1 (paper 0.86 ± 0.01 over 5 runs): two seeds far apart, undecided
    for seed, acc in enumerate([0.850, 0.875]):
        _t3(root, "fedavg", "similarity", 1.0, seed, acc)
    # CL at S = 1 (paper 0.90 ± 0.02): five seeds at 0.60, decided (differs)
    for seed in range(5):
        _t3(root, "cl", "similarity", 1.0, seed, 0.60 + 0.001 * seed)
    df = report.frame(root)
    return root, df, P.plan(df, root, studies=False, report=report)


def test_a_not_run_rows_first_seed_and_an_undecided_rows_next_seed_are_planned(planned):
    root, df, p = planned
    undecided, decided = _row(df, "fedavg", "FMNIST, S = 1"), _row(df, "cl", "FMNIST, S = 1")
    assert undecided.verdict == "undecided" and decided.verdict == "differs"
    ids = [set(d.split("; ")) for d in p.decides]
    mine = [i for i, d in enumerate(ids) if undecided.id in d]
    assert len(mine) == 1
    r = p.iloc[mine[0]]
    assert r.basis.startswith("next") and r.spec.seed == 2 and r.spec.method == "fedavg" and 0 < r.p < 1
    # a decided row is never planned: every run of the plan ranks above it
    assert not any(decided.id in d for d in ids)
    # a row not run: its first seed (seed 0), worth 1
    fedprox = _row(df, "fedprox", "FMNIST, S = 1", "paper_text")
    assert fedprox.verdict == "not run"
    first = p[[fedprox.id in d for d in ids]]
    assert len(first) == 1 and first.basis.iloc[0] == "first seed" and first.spec.iloc[0].seed == 0
    assert first.value.iloc[0] == pytest.approx(1.0)
    # ordered by value per CPU-hour (the priced runs), cumulative columns add up
    priced = p[p.seconds.notna()]
    rate = (priced.value / priced.seconds).to_numpy()
    assert np.all(np.diff(rate) <= 1e-12)
    assert p.cum_value.iloc[-1] == pytest.approx(p.value.sum())
    assert p.cum_hours.iloc[-1] == pytest.approx(priced.seconds.sum() / 3600)


def test_each_groups_printed_command_computes_its_run(planned):
    root, df, p = planned
    for _, r in p.drop_duplicates("folder").iterrows():
        if not r.command:
            continue
        specs, folder = report.command_specs(r.command)
        assert r.spec.key() in {s.key() for s in specs}, r.command
        assert str(folder).endswith(r.folder)


def test_p_decided_is_the_verdict_simulated():
    values, paper, sd, n_p, tol = [85.0, 87.5], 86.0, 1.0, 5, 1.0
    got = P.p_decided(paper, sd, n_p, values, tol, draws=400, seed=3)
    rng = np.random.default_rng(3)  # the true mean drawn around ours (its se), then the next seed around it
    mu = rng.normal(np.mean(values), np.std(values, ddof=1) / np.sqrt(2), 400)
    x = rng.normal(mu[:, None], np.std(values, ddof=1), (400, 1))[:, 0]
    by_hand = np.mean([V.verdict(paper, sd, n_p, [*values, v], tol).outcome != "undecided" for v in x])
    assert got == pytest.approx(by_hand) and 0 < got < 1
    # the vectorised test is the verdict's, draw by draw
    draws = np.column_stack([np.broadcast_to(values, (50, 2)), x[:50]])
    fast = P._decided(paper, sd, n_p, draws, tol)
    slow = [V.verdict(paper, sd, n_p, list(d), tol).outcome != "undecided" for d in draws]
    assert list(fast) == slow
    # far from the paper with no seed noise: always decided; a one-seed row draws from its pooled sd
    assert P.p_decided(86.0, None, 1, [60.0, 60.0], 1.0) == 1.0
    assert 0 <= P.p_decided(86.0, 1.0, 5, [86.2], 1.0, pooled_sd=0.5) <= 1
    with pytest.raises(ValueError, match="pooled_sd"):
        P.p_decided(86.0, 1.0, 5, [86.2], 1.0)


def test_a_row_one_seed_cannot_decide_is_valued_by_the_seeds_that_would():
    # paper 86.0 ± 1.0 over 5 runs (margin 2 pp): three seeds around 88.4, sd 0.8 — Δ ≈ +2.4 pp, its
    # interval straddles the margin's bound; one more seed rarely decides it, several do
    values, paper, sd, n_p, tol = [87.6, 88.4, 89.2], 86.0, 1.0, 5, 1.0
    p1 = P.p_decided(paper, sd, n_p, values, tol)
    p6 = P.p_decided(paper, sd, n_p, values, tol, extra=6)
    assert p6 > p1
    k, pk = P.best_bundle(paper, sd, n_p, values, tol)
    assert 1 <= k <= P.LOOKAHEAD
    assert pk == pytest.approx(P.p_decided(paper, sd, n_p, values, tol, extra=k))
    # k maximises P_k / k over the look-ahead, by hand
    rates = [P.p_decided(paper, sd, n_p, values, tol, extra=j) / j for j in range(1, P.LOOKAHEAD + 1)]
    assert pk / k == pytest.approx(max(rates))
    # with the extra seeds drawn from a true mean near the margin's bound, not all draws decide
    assert 0 < pk < 1
    with pytest.raises(ValueError, match="extra"):
        P.p_decided(paper, sd, n_p, values, tol, extra=0)


def test_feasible_share_is_laplaces_rule_over_the_seeds_tried():
    assert P.feasible_share([]) == 1.0
    assert P.feasible_share(["ok", "ok"]) == 1.0
    assert P.feasible_share(["infeasible", "ok", "infeasible", "infeasible"]) == pytest.approx(2 / 6)
    assert P.feasible_share(["infeasible"]) == pytest.approx(1 / 3)


def test_rows_the_claims_read_are_the_claims_own():
    from workbook import paper_claims as C

    rows = P.claim_rows()
    # Clust-PSI-PFL's own claim reads its α = 0.05 row against each baseline of that column
    assert "clust-psi-pfl-table-iii-clust-psi-pfl-fmnist-alpha-0-05-paper-text" in rows
    read = [r for c in C.CLAIMS for comp in c.comparisons for r in (comp.a, comp.b) if r is not None]
    by_hand = {C._row_id(other) for r in read if C._owner(r) is not None for other in C._owner(r).readings}
    assert rows == by_hand - {None}


def test_study_blocks_share_one():
    out = P.study_values({"a": ["x", "y"], "b": ["z"]})
    assert [v for *_, v in out] == [0.5, 0.5, 1.0]


def test_head_markdown_says_the_next_10_cpu_hours(planned):
    root, df, p = planned
    text = "\n".join(P.head_markdown(df, root=root, p=p))
    assert "The next 10 CPU-hours would decide these rows" in text
    assert "python -m workbook.plan --run --budget 36000" in text
    assert "| 1 |" in text


def _fake_plan(specs_seconds):
    return pd.DataFrame([{"folder": T3, "spec": s, "seconds": sec} for s, sec in specs_seconds])


def test_run_hands_only_priced_runs_to_the_grid_under_the_budget(tmp_path, monkeypatch):
    from fedlib import grid
    from fedlib.spec import RunSpec

    calls = []

    def fake_run_grid(specs, results_dir, **kw):
        calls.append((list(specs), results_dir, kw))
        for s in specs:
            kw["on_run"](s, None, False, 1.0)
        return []
    monkeypatch.setattr(grid, "run_grid", fake_run_grid)
    a = RunSpec("fmnist", "similarity", 1.0, 100, 7, "fedavg")
    b = RunSpec("fmnist", "similarity", 1.0, 100, 8, "fedavg")
    out = P.run_plan(_fake_plan([(a, 10.0), (b, float("nan"))]), budget=5, root=tmp_path, echo=lambda *_: None)
    assert len(calls) == 1 and [s.key() for s in calls[0][0]] == [a.key()]  # never the unpriced run
    assert 0 < calls[0][2]["budget"] <= 5 and calls[0][2]["estimate_from"] == [tmp_path]
    assert {s.key() for s in out["left"]} == {a.key(), b.key()} and out["computed"] == []
    assert calls[0][2]["together"] is False
    P.run_plan(_fake_plan([(a, 10.0)]), budget=5, root=tmp_path, echo=lambda *_: None, together=True)
    assert calls[-1][2]["together"] is True  # the GPU lease's way: runs that may train together do


def test_each_run_line_says_what_became_of_the_run_and_names_its_record(monkeypatch):
    """By hand, the five outcomes run_grid reports to the plan; a run another process is computing
    is never said to be left for a later call (it is computed, elsewhere)."""
    from fedlib import checkpoint
    from fedlib.spec import RunSpec

    s = RunSpec("fmnist", "similarity", 1.0, 100, 7, "fedavg")
    name = f"fedavg fmnist (Similarity S = 1) K=100 seed 7 [{s.key()}.json]"
    lines = []
    monkeypatch.setattr(checkpoint, "saved_round", lambda key, *a, **k: None)
    P.run_line(s, {"status": "ok", "seconds": 12.5, "global_accuracy": 0.8612}, False, 10.0, lines.append)
    P.run_line(s, {"status": "ok"}, True, 10.0, lines.append)
    P.run_line(s, None, True, 10.0, lines.append)
    P.run_line(s, None, False, 900.0, lines.append)
    monkeypatch.setattr(checkpoint, "saved_round", lambda key, *a, **k: 3 if key == s.key() else None)
    P.run_line(s, None, False, 900.0, lines.append)
    assert lines[0] == f"{name}: ok in 12.5 s, weighted local accuracy 86.12 %"
    assert lines[1] == f"{name}: ok, recorded by another process"
    assert lines[2] == f"{name}: another process is computing it (not waited for)"
    assert lines[3] == f"{name}: left for a later call (it reserves 900 s; it would not end before the budget does)"
    assert lines[4].startswith(f"{name}: stopped by the budget before round 4; its checkpoint (")
    assert lines[4].endswith(f"{s.key()}.pt) resumes it in a later call")


def test_run_with_a_tiny_budget_starts_nothing_that_would_not_fit(tmp_path):
    """The real grid: a run estimated at 10,000 CPU-seconds is not started under a 2 s budget."""
    from fedlib.spec import RunSpec
    from workbook.like_for_like import FRACTION

    _t3(tmp_path, "fedavg", "similarity", 1.0, 0, 0.86, cpu=10_000.0)
    s = RunSpec("fmnist", "similarity", 1.0, 100, 1, "fedavg", fl={"rounds": 40, "local_epochs": 5, "fraction": FRACTION})
    before = sorted(p.name for p in (tmp_path / T3).iterdir())
    out = P.run_plan(_fake_plan([(s, 10_000.0)]), budget=2, root=tmp_path, echo=lambda *_: None)
    assert out["computed"] == [] and [x.key() for x in out["left"]] == [s.key()]
    assert sorted(p.name for p in (tmp_path / T3).iterdir()) == before


def test_run_defaults_to_whole_runs_and_refuses_a_bad_setting_before_any_work(monkeypatch, capsys):
    """``--run`` starts a resumable run only if all of it fits unless $FEDLIB_WHOLE_RUNS says 0: a
    checkpoint left at the budget's end is lost with the machine. A bad value is refused before the
    report is read."""
    import fedlib.grid
    from workbook.plan import __main__ as M

    # set, then removed: monkeypatch then restores the variable as it was before this test, although
    # whole_runs_by_default sets it (a delenv of an absent variable records nothing to restore, and
    # the "1" it sets would leak into the next test of this worker)
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "0")
    monkeypatch.delenv(fedlib.grid.ENV_WHOLE_RUNS)
    assert M.whole_runs_by_default() is True and fedlib.grid.whole_runs()
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "0")
    assert M.whole_runs_by_default() is False
    monkeypatch.setenv(fedlib.grid.ENV_WHOLE_RUNS, "yes")
    monkeypatch.setattr(M.R, "frame", lambda *a: pytest.fail("the report was read before the setting was checked"))
    assert M.main(["--run", "--budget", "60"]) == 2
    err = capsys.readouterr().err
    assert "$FEDLIB_WHOLE_RUNS" in err and "'yes'" in err


@pytest.mark.parametrize("argv, names", [
    (["--run"], ["--budget", "--run --budget 3600"]),
    (["--budget", "60"], ["--budget", "unless --run"]),
    (["--run", "--budget", "-5"], ["--budget", "-5"]),
    (["--run", "--budget", "ten"], ["--budget", "ten"]),
    (["--run", "--budget", "60", "--workers", "0"], ["--workers", "0"]),
    (["--device", "tpu"], ["--device", "tpu", "cuda"]),
    (["--top", "0"], ["--top"]),
    (["--without", "fedsgd"], ["--without", "fedsgd", "fedavg"]),
    (["--together"], ["--together", "unless --run"]),
    (["--records", "/no/such/folder"], ["--records", "/no/such/folder"]),
    (["--only", "table3"], ["--only", "table3", "cross_paper_preregistered"]),
    (["--only", "cross_paper_preregistered", "--no-studies"], ["--only", "without --no-studies"]),
])
def test_bad_cli_input_names_the_parameter_and_the_fix(argv, names, capsys):
    from workbook.plan.__main__ import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    for n in names:
        assert n in err, (n, err)


def test_the_planned_designs_are_study_blocks_with_commands_that_compute_them(tmp_path):
    """Issue 70's designs are computed through the plan: a block per partition (the pre-registered
    design: 7 runs, 1/7 each), each run's printed command computes it into the design's folder."""
    missing = {group: (block_of, specs) for group, _, block_of, specs in P._study_missing(str(tmp_path), report)}
    block_of, specs = missing["cross_paper_preregistered"]
    assert len(specs) == 77 and all(s.fl["rounds"] == 30 and s.seed == 0 for s in specs)
    blocks = {}
    for s in specs:
        blocks.setdefault(block_of(s), []).append(s.method)
    assert len(blocks) == 11 and all(len(m) == 7 for m in blocks.values())
    for s in specs[::13]:
        got, folder = report.command_specs(P._design_command("cross_paper_preregistered", s))
        assert s.key() in {g.key() for g in got} and str(folder).endswith("cross_paper_preregistered")
    # the small-client seeds: FedAvg and the four baselines at seeds 1 and 2, a block per share, into beyond_label
    block_of, specs = missing["beyond_label:small_seeds"]
    assert {s.seed for s in specs} == {1, 2} and {s.protocol for s in specs} == {"small_clients"}
    assert {s.method for s in specs} == {"fedavg", "ifca", "fedclust", "cfl", "pfedlia"} and len(specs) == 50
    assert len({block_of(s) for s in specs}) == 5
    for s in specs[::11]:
        got, folder = report.command_specs(P._design_command("beyond_label:small_seeds", s))
        assert s.key() in {g.key() for g in got} and str(folder).endswith("beyond_label")


def test_a_design_run_is_priced_per_round_from_records_at_another_r(tmp_path):
    """No record at the design's R: its cost is the same method's at R₀, × R / R₀ (linear in R)."""
    import dataclasses
    import record_fakes
    from fedlib.spec import RunSpec, record_path

    s10 = RunSpec("fmnist", "dirichlet", 0.1, 100, 0, "fedavg", fl={"rounds": 10, "local_epochs": 1}, n_train=12000)
    r = record_fakes.record(s10, fl={"rounds": 10, "local_epochs": 1}, host={"threads": 1}, cpu_seconds=40.0)
    path = record_path(tmp_path / "cross_paper", s10)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(r))
    P._timings.cache_clear()
    s30 = dataclasses.replace(s10, fl={"rounds": 30, "local_epochs": 1})
    assert P._per_round_estimate(s30, str(tmp_path), "cpu") == pytest.approx(120.0)
    # a cost probe at a smaller R₀ of another method and K (issue 70) does not price it: its own method and K do
    s3 = dataclasses.replace(s10, n_clients=20, method="local", fl={"rounds": 3, "local_epochs": 1})
    probe = record_path(tmp_path / "cross_paper_cost_probe", s3)
    probe.parent.mkdir(parents=True)
    probe.write_text(json.dumps(record_fakes.record(s3, fl={"rounds": 3, "local_epochs": 1}, host={"threads": 1},
                                                    cpu_seconds=3.0)))
    P._timings.cache_clear()
    assert P._per_round_estimate(s30, str(tmp_path), "cpu") == pytest.approx(120.0)  # not 3.0 s · 30 / 3
    other = dataclasses.replace(s30, dataset="cifar10")  # no record of its data set: unpriced
    assert P._per_round_estimate(other, str(tmp_path), "cpu") is None
    P._timings.cache_clear()


def test_a_seed_another_method_already_drew_is_feasible_for_certain():
    by_seed = {0: "infeasible", 1: "ok"}
    assert P.seed_feasible_share(by_seed, 1) == 1.0  # drawn: no discount
    assert P.seed_feasible_share(by_seed, 0) == 0.0
    assert P.seed_feasible_share(by_seed, 2) == pytest.approx(2 / 4)  # untried: Laplace over the seeds tried
    assert P.seed_feasible_share({}, 0) == 1.0


def test_claim_rows_hold_every_reading_of_a_claimed_cell():
    """A claim reads Clust-PSI-PFL's cell in the paper's text reading; the authors' code's reading of
    the same cell counts as claimed too (it says whether the outcome depends on the reading)."""
    from workbook import paper_claims as C

    read = {C._row_id(r) for c in C.CLAIMS for comp in c.comparisons for r in (comp.a, comp.b) if r is not None}
    code = "clust-psi-pfl-table-iii-clust-psi-pfl-fmnist-alpha-0-7-paper-code"
    assert code not in read and code.replace("paper-code", "paper-text") in read
    assert read < P.claim_rows() and code in P.claim_rows()
    assert "clust-psi-pfl-table-iii-fedyogi-fmnist-alpha-0-7-both-readings" not in P.claim_rows()


def test_a_seed_whose_partition_is_recorded_infeasible_is_skipped_for_every_method(tmp_path):
    """The partition depends on its seed, not the method: CL's infeasible seed 0 at α = 0.05 means
    FedAvg's first run there is seed 1, not a second 'infeasible' record."""
    import record_fakes
    from fedlib.spec import RunSpec, record_path
    from workbook.like_for_like import FRACTION

    s = RunSpec("fmnist", "dirichlet", 0.05, 100, 0, "cl", fl={"rounds": 40, "local_epochs": 5, "fraction": FRACTION})
    path = record_path(tmp_path / T3, s)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record_fakes.record(s, "infeasible")))
    _t3(tmp_path, "fedavg", "similarity", 1.0, 0, 0.85)  # a record that prices FedAvg's runs
    df = report.frame(tmp_path)
    p = P.plan(df, tmp_path, studies=False, report=report)
    at = [x for f, x in zip(p.folder, p.spec) if f == T3 and x.protocol == "dirichlet" and float(x.level) == 0.05]
    assert at and all(x.seed != 0 for x in at)
    assert any(x.method == "fedavg" and x.seed == 1 for x in at)


def test_finish_share_is_laplaces_rule_over_the_runs_outcomes():
    assert P.finish_share([]) == 1.0
    assert P.finish_share(["ok", "ok", "infeasible"]) == 1.0  # none failed
    assert P.finish_share(["failed", "ok", "failed"]) == pytest.approx(2 / 5)  # CAFA's FedAvg at 0 % IID
    assert P.finish_share(["failed"]) == pytest.approx(1 / 3)


def test_a_seed_where_a_compared_run_failed_is_known(tmp_path):
    """_failed_seeds: the seeds at which a run answering one of the row's matches has a failed record."""
    import record_fakes
    from fedlib.spec import RunSpec, record_path

    for seed, method, status in [(0, "fedavg", "failed"), (1, "fedavg", "ok"), (2, "fedprox", "failed"), (3, "cl", "failed")]:
        s = RunSpec("fmnist", "similarity", 1.0, 10, seed, method)
        path = record_path(tmp_path / "t", s)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record_fakes.record(s, status, 0.8)))
    folder = str(tmp_path / "t")
    assert P._failed_seeds(folder, ((("method", "fedavg"),),)) == {0}
    assert P._failed_seeds(folder, ((("method", "fedavg"),), (("method", "fedprox"),))) == {0, 2}
    assert P._failed_seeds(folder, ((("method", "local"),),)) == set()


def test_no_planned_run_sits_at_a_seed_its_row_can_never_read():
    """On the committed records: a row read over the seeds every compared run finished (CAFA's
    Tables IV and V; the authors' FedAvg diverges at some seeds) is never planned at a seed where one
    of them failed — the run would not enter the row."""
    from workbook.matching import RECORDS, anchor_slug
    from workbook.report_cells import PAPERS, cells

    df = report.frame()
    p = P.plan(df, studies=False, report=report)
    readings = {anchor_slug(PAPERS[c.paper], c.table, c.row, c.column, rd.name): rd for c in cells() for rd in c.readings}
    rows = df.set_index("id")
    checked = with_failures = 0
    for spec, decides in zip(p.spec, p.decides):
        for rid in decides.split("; "):
            if rid not in readings:
                continue  # a study block
            rd = readings[rid]
            dead = P._failed_seeds(str(RECORDS / rows.loc[rid, "records"]), (rd.match, *rd.shared_with))
            assert spec.seed not in dead, (rid, spec.seed, dead)
            checked += 1
            with_failures += bool(dead)
    assert checked and with_failures  # today: CAFA's 0 % IID rows (FedAvg failed at seeds 0 and 2)
