"""workbook.ranking_power (issue 58): the plateau rule, mean ranks and Kendall τ, the
leave-one-block-out line, the Nemenyi CD against Demšar's table and autorank, and the cost
arithmetic — each on a case small enough to count by hand."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbook import ranking_power as RP


def test_plateau_round_compares_the_means_of_two_windows():
    rounds = np.arange(1, 21)
    # rises by 5 pp a round to round 6, then jitters ±3 pp around 75 (a label-skewed FedAvg)
    jitter = np.array([3, -3, 2, -2, 3, -3, 1, -1, 2, -2, 3, -3, 0, 0])
    acc = np.concatenate([[50, 55, 60, 65, 70, 75], 75 + jitter])
    # r = 8: (3, 8] = 65, 70, 75, 78, 72 → 72.0 vs (8, 13] → 75.2: |Δ| = 3.2 → not yet;
    # r = 9: (4, 9] = 70, 75, 78, 72, 77 → 74.4 vs (9, 14] = 73, 78, 72, 76, 74 → 74.6: |Δ| = 0.2 < 1 → 9
    assert RP.plateau_round(rounds, acc, window=5, tolerance=1.0) == 9
    # the old range rule (< 0.5 pp over one window) never fires on it: its range is ≥ 4 pp in every window
    assert min(np.ptp(acc[i:i + 6]) for i in range(6, 15)) >= 4
    # a window pair that would end after the last round never counts: R = 10, w = 5 → r ≤ 5
    late = np.array([10, 20, 30, 40, 50, 60, 61, 61, 61, 61])
    assert RP.plateau_round(np.arange(1, 11), late, window=5) is None
    # w = 3: r ≤ 7; r = 7: (4, 7] = 50, 60, 61 → 57 vs 61 → not
    assert RP.plateau_round(np.arange(1, 11), late, window=3) is None
    # w = 2 with two evaluations a window: r = 7: (5, 7] = 60, 61 → 60.5 vs 61 → 7
    assert RP.plateau_round(np.arange(1, 11), late, window=2, min_evaluations=2) == 7


def test_plateau_round_refuses_constants_and_thin_windows():
    r = np.arange(1, 21)
    # an S = 0 run at chance (10 % ± 0.3) and one at 100 %: constants, not plateaus
    assert RP.plateau_round(r, 10 + 0.3 * np.sin(r), chance=10.0) is None
    assert RP.plateau_round(r, np.full(20, 100.0), chance=10.0) is None
    # a real level off chance: r = 3, the first round with 3 evaluations on each side ((−2, 3] holds 1, 2, 3)
    assert RP.plateau_round(r, np.full(20, 60.0), chance=10.0) == 3
    # without the chance level, a constant at 10 % is not recognised as one
    assert RP.plateau_round(r, np.full(20, 10.0)) == 3
    assert RP.degenerate([9.5, 10.4], 10.0) == "chance" and RP.degenerate([99.2, 100], None) == "100 %"
    assert RP.degenerate([50, 51], 10.0) is None
    # evaluated every 5 rounds: a window of 5 holds one evaluation (< 3) → none, even if flat
    assert RP.plateau_round([5, 10, 15, 20, 25], [60, 60, 60, 60, 60], window=5) is None
    # w = 15 holds three: (0, 15] = 60, 60, 60 vs (15, 30] = 61, 60, 60 → |Δ| 0.33 → 15
    assert RP.plateau_round([5, 10, 15, 20, 25, 30], [60, 60, 60, 61, 60, 60], window=15) == 15
    with pytest.raises(ValueError, match="window"):
        RP.plateau_round([1, 2], [1, 1], window=0)
    with pytest.raises(ValueError, match="rounds"):
        RP.plateau_round([2, 1], [1, 1])
    with pytest.raises(ValueError, match="rounds, accuracy_pp"):
        RP.plateau_round([1, 2, 3], [1, 1])


def test_last_mean_scores_a_run_by_its_last_evaluations():
    rec = {"spec": {}, "history": [{"round": i + 1, "global_accuracy": a} for i, a in enumerate([.5, .6, .7, .8])]}
    assert RP.last_mean(rec) == pytest.approx(70.0) and RP.last_mean(rec, 1) == pytest.approx(80.0)
    assert np.isnan(RP.last_mean({"history": [{"round": 10, "global_accuracy": .9}]}))


def _rec(method, block, seed, accs, status="ok", cpu=None, rounds=None):
    hist = [{"round": i + 1, "global_accuracy": a} for i, a in enumerate(accs)]
    spec = {"method": method, "protocol": block, "seed": seed, "fl": {"rounds": rounds or len(accs)}}
    return {"spec": spec, "status": status, "history": hist, "global_accuracy": accs[-1], "cpu_seconds": cpu}


def test_convergence_table_reads_each_run_and_never_invents_a_plateau():
    flat = [0.5, 0.6] + [0.6] * 10
    recs = [_rec("fedavg", "b1", 0, flat),
            _rec("fedavg", "b1", 1, [0.1 * i for i in range(1, 8)]),
            _rec("local", "b1", 0, [0.9]),
            _rec("fedavg", "b2", 0, [0.1], status="failed"),
            _rec("fedavg", "b3", 0, [0.1] * 12)]
    for r in recs:
        r["spec"]["dataset"] = "fmnist"  # 10 classes: chance 10 %
    t = RP.convergence_table(recs, lambda r: r["spec"]["protocol"])
    # flat: (0, 5] = 50, 60, 60, 60, 60 → 58 vs (5, 10] = 60: |Δ| 2 → no; r = 6: (1, 6] = 60 vs 60 → 6
    assert t.reading.tolist() == ["plateau at 6", "not converged by R = 7", "one evaluation only (round 1): no history",
                                  "constant at chance"]
    assert t.plateau.iloc[0] == 6 and np.isnan(t.plateau.iloc[1])
    assert t.last_step_pp.iloc[1] == pytest.approx(10.0) and t.last_range_pp.iloc[1] == pytest.approx(60.0)
    sparse = {"spec": {"method": "fedavg", "protocol": "b", "seed": 0}, "status": "ok",
              "history": [{"round": 10, "global_accuracy": .5}, {"round": 20, "global_accuracy": .5}]}
    assert RP.convergence_table([sparse], lambda r: "b").reading.iloc[0].startswith("history too sparse")


def test_score_at_round_reads_the_history_and_averages_seeds():
    recs = [_rec("a", "b1", 0, [0.1, 0.3]), _rec("a", "b1", 1, [0.2, 0.5]), _rec("b", "b1", 0, [0.4, 0.2])]
    s1 = RP.score_at_round(recs, 1, lambda r: r["spec"]["protocol"])
    s2 = RP.score_at_round(recs, 2, lambda r: r["spec"]["protocol"])
    assert s1.loc["a", "b1"] == pytest.approx(15.0) and s1.loc["b", "b1"] == pytest.approx(40.0)
    assert s2.loc["a", "b1"] == pytest.approx(40.0) and s2.loc["b", "b1"] == pytest.approx(20.0)
    # a seed without an evaluation at that round makes the cell NaN, never the other seed's value
    recs.append(_rec("b", "b1", 1, [0.3]))
    assert np.isnan(RP.score_at_round(recs, 2, lambda r: r["spec"]["protocol"]).loc["b", "b1"])


SCORES = pd.DataFrame({"p1": [90, 80, 70], "p2": [60, 70, 50], "p3": [30, 20, 40]}, index=["A", "B", "C"])


def test_mean_ranks_by_hand_and_ties_share_their_mean_rank():
    # p1: A1 B2 C3; p2: B1 A2 C3; p3: C1 A2 B3 → A 5/3, B 2, C 7/3
    r = RP.mean_ranks(SCORES)
    assert r.to_dict() == pytest.approx({"A": 5 / 3, "B": 2.0, "C": 7 / 3})
    assert list(r.index) == ["A", "B", "C"]
    tied = SCORES.assign(p1=[90, 90, 70])
    assert RP.mean_ranks(tied[["p1"]]).to_dict() == pytest.approx({"A": 1.5, "B": 1.5, "C": 3.0})
    assert RP.ties_per_block(tied).to_dict() == {"p1": 2, "p2": 0, "p3": 0}
    # a method missing a block is left out; excluded methods too
    assert list(RP.mean_ranks(SCORES.assign(p3=[30, np.nan, 40])).index) == ["A", "C"]
    assert "A" not in RP.mean_ranks(SCORES, exclude=("A",)).index


def test_kendall_tau_and_leave_one_block_out():
    a = pd.Series({"A": 1.0, "B": 2.0, "C": 3.0})
    assert RP.kendall_tau(a, a) == pytest.approx(1.0)
    assert RP.kendall_tau(a, a[::-1].set_axis(a.index)) == pytest.approx(-1.0)
    # one swapped pair of three: concordant 2, discordant 1 → τ = 1/3
    assert RP.kendall_tau(a, pd.Series({"A": 2.0, "B": 1.0, "C": 3.0})) == pytest.approx(1 / 3)
    lobo = RP.leave_one_block_out(SCORES)
    # without p3: A 1.5, B 1.5, C 3 (tie A–B) vs A < B < C
    by = dict(zip(lobo.block, lobo.tau))
    assert set(by) == {"p1", "p2", "p3"}
    from scipy import stats
    expect = stats.kendalltau([5 / 3, 2, 7 / 3], [1.5, 1.5, 3]).statistic
    assert by["p3"] == pytest.approx(expect)
    # without p1 every method has mean rank 2: no order, τ undefined (NaN), listed last
    assert np.isnan(by["p1"]) and lobo.block.tolist() == ["p2", "p3", "p1"]


def test_nemenyi_q_matches_demsar_table_and_cd_matches_autorank():
    # Demšar (2006) Table 5(a), α = 0.05
    for k, q in {2: 1.960, 3: 2.343, 5: 2.728, 8: 3.031, 10: 3.164}.items():
        assert RP.nemenyi_q(k) == pytest.approx(q, abs=1e-3)
    # CD = q sqrt(k(k+1)/(6N)): k = 8, N = 14 → 3.031 · sqrt(72/84)
    assert RP.nemenyi_cd(8, 14) == pytest.approx(3.031 * np.sqrt(72 / 84), abs=2e-3)
    rng = np.random.default_rng(0)
    data = pd.DataFrame(rng.normal(size=(9, 6)), columns=list("abcdef"))
    from autorank import autorank
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        res = autorank(data, alpha=0.05, order="descending", force_mode="nonparametric")
    assert RP.nemenyi_cd(6, 9) == pytest.approx(res.cd, rel=1e-3)
    power = RP.ranking_power(data.T)
    assert (power.n, power.k) == (9, 6) and power.cd == pytest.approx(RP.nemenyi_cd(6, 9))
    assert power.p == pytest.approx(res.pvalue, rel=1e-6)
    assert "N = 9 blocks, k = 6 methods" in power.line()


def test_cost_per_round_and_design_cost():
    recs = [_rec("a", "b", 0, [0.1] * 10, cpu=100.0), _rec("a", "b", 1, [0.1] * 10, cpu=300.0),
            _rec("b", "b", 0, [0.1] * 5, cpu=50.0), _rec("c", "b", 0, [0.1] * 5, cpu=None)]
    per = RP.cost_per_run(recs, lambda r: r["spec"]["method"])
    assert per.to_dict() == pytest.approx({"a": 20.0, "b": 10.0})
    c = RP.design_cost(per, ["a", "b"], blocks=2, seeds=3, rounds=100)
    # (20 + 10) s a round · 100 rounds = 3000 s per block and seed; × 2 × 3 = 18,000 s = 5 h
    assert c == {"runs": 12, "cpu_hours": pytest.approx(5.0), "cpu_seconds_per_block_and_seed": pytest.approx(3000)}
    with pytest.raises(ValueError, match="methods"):
        RP.design_cost(per, ["a", "c"], blocks=1, seeds=1, rounds=1)


def test_client_blocks_local_and_official_test():
    r = {"spec": {"method": "a", "seed": 0}, "status": "ok", "local_accuracy": [0.5, np.nan, 1.0],
         "global_test_correct": [10, 20, 30], "n_global_test": 40}
    s = {**r, "spec": {"method": "b", "seed": 0}, "local_accuracy": [0.25, 0.5, 0.75]}
    loc = RP.client_blocks([r, s], ["a", "b"], "local")
    assert loc.to_dict("list") == {"a": [0.5, 1.0], "b": [0.25, 0.75]}  # the client without a test split dropped
    off = RP.client_blocks([r, s], ["a", "b"], "official_test")
    assert off.a.tolist() == [0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match="value"):
        RP.client_blocks([r], ["a"], "worst10")


def test_choose_rounds_waits_for_every_run_to_plateau():
    t = pd.DataFrame({"plateau": [12.0, 31.0], "reading": ["plateau at 12", "plateau at 31"]})
    assert RP.choose_rounds(t) == (40, "latest plateau at round 31 of 2 runs, + w = 5, rounded up to 10")
    assert RP.choose_rounds(t, step=5)[0] == 40 and RP.choose_rounds(t, window=10)[0] == 50
    t2 = pd.concat([t, pd.DataFrame({"plateau": [np.nan], "reading": ["not converged by R = 200"]})])
    R, why = RP.choose_rounds(t2)
    assert R is None and "1 of 3 runs without a plateau (not converged by R = 200)" in why
    assert RP.choose_rounds(t.iloc[:0]) == (None, "no run")


BUDGET_KIND = "fmnist/K=100/n_train=12000/arch=default"  # the budget grid's runs (workbook.cross_paper_design.cost_kind)


def test_designs_state_n_k_cd_and_cost_from_their_params():
    """The issue-58 designs (params/designs/): the focused one ranks k = 8 methods on N = 32 blocks (FMNIST
    at K = 20 and 100: 10 + 10; adult: 7 at K = 20, 5 at K = 100), CD ≤ 4 ranks by the formula; costs are
    measured seconds a round × R, summed over runs."""
    from workbook import cross_paper_design as D

    per = pd.Series({(BUDGET_KIND, m): 1.0 for m in ("cl", "oracle", "local", "fedavg", "fedprox", "fedavgm", "fedadagrad",
                                      "fedyogi", "fedadam", "poc", "haccs", "fedcls", "cfl", "fedsoft",
                                      "clust_psi_pfl", "psi_pfl", "cafa", "fedprism", "ifca", "fedclust", "fedamp",
                                      "pfedlia", "fedfomo", "fedproto", "fesem")})
    t = D.design_table(per).set_index("design")
    foc = t.loc["focused (all)"]
    assert (foc.blocks, foc.k, foc.seeds) == (32, 8, 3)
    assert foc.nemenyi_cd == pytest.approx(RP.nemenyi_cd(8, 32)) and foc.nemenyi_cd <= 4
    assert (t.loc["focused_adult_k20", "blocks"], t.loc["focused_adult_k100", "blocks"]) == (7, 5)
    # 1 s a round: runs × R seconds
    assert foc.cpu_hours == pytest.approx(foc.runs * 100 / 3600)
    assert t.loc["budget", "blocks"] == 7 and t.loc["budget", "R"] == [10]
    assert t.loc["pilot", "k"] == 2 and t.loc["pilot", "runs"] == 7 * 2 * 3
    specs = D.design_specs("focused_fmnist_k20")
    assert {s.n_clients for s in specs} == {20} and {s.method for s in specs} == set(D.FOCUSED_METHODS)
    adult = D.design_specs("focused_adult_k100")
    assert {s.dataset for s in adult} == {"adult"} and {s.arch for s in adult} == {"mlp"}
    assert {s.method for s in adult} == set(D.FOCUSED_METHODS)
    for s in adult:
        s.validate()  # FedPrism accepts the MLP (it refuses adult's default logistic model)
    with pytest.raises(ValueError, match="per_round"):
        D.design_table(per.drop((BUDGET_KIND, "fedfomo")), ["focused_fmnist_k20"])
    with pytest.raises(ValueError, match="design"):
        D.design_specs("nope")


def _run(method, part, accs, seed=0, test=None, local=None):
    from workbook import cross_paper as X
    p = X.PARTITIONS[part]
    hist = [{"round": i + 1, "global_accuracy": a} for i, a in enumerate(accs)]
    return {"spec": {"method": method, "protocol": p.protocol, "level": p.level, "seed": seed, "n_clients": 4,
                     "dataset": "fmnist", "fl": {"rounds": len(accs)}},
            "status": "ok", "history": hist, "global_accuracy": accs[-1],
            "global_test_correct": test, "n_global_test": 10, "local_accuracy": local}


def test_budget_rankings_rank_the_last_two_rounds_of_the_histories():
    from workbook import cross_paper_design as D

    parts = ["dirichlet_0.3", "similarity_1", "noisy"]
    # round 2: A > B > C everywhere; round 3: B > A > C everywhere → τ(3 vs 2) = 1/3
    recs = [_run("fedavg", p, [0.1, 0.9, 0.8]) for p in parts] + [_run("local", p, [0.1, 0.8, 0.9]) for p in parts] \
        + [_run("fedprox", p, [0.1, 0.2, 0.3]) for p in parts] + [_run("cl", p, [1, 1, 1]) for p in parts]
    b = D.budget_rankings(recs)
    assert b["R"] == 3 and list(b["at_R"].index) == ["local", "fedavg", "fedprox"]
    assert list(b["at_R_minus_1"].index) == ["fedavg", "local", "fedprox"]
    assert b["tau"] == pytest.approx(1 / 3)
    assert sorted(b["steps_pp"].round(6).unique()) == [0.0, 10.0] and b["left_out"] == []


def test_which_method_when_official_uses_each_clients_official_test_accuracy():
    from workbook import cross_paper_design as D

    recs = []
    for seed in range(2):
        recs += [_run("fedavg", "noisy", [0.5], seed, test=[9, 9, 9, 8], local=[.5] * 4),
                 _run("local", "noisy", [0.9], seed, test=[1, 2, 1, 2], local=[.9] * 4),
                 _run("fedprox", "noisy", [0.5], seed, test=[5, 6, 5, 6], local=[.5] * 4)]
    w = D.which_method_when_official(recs)
    row = w.iloc[0]
    assert row.partition == "noisy" and row.best == "fedavg" and row.n_blocks == 8 and row.n_methods == 3
    assert "local" not in row.not_worse  # ranked last on all 8 clients: mean rank 3 vs 1, CD < 2


def test_measurable_names_the_methods_without_a_cost():
    from workbook import cross_paper_design as D

    per = pd.Series({(BUDGET_KIND, m): 1.0 for m in D.FOCUSED_METHODS})
    ok, missing = D.measurable(per, ["focused_fmnist_k20", "pilot", "budget"])
    assert ok == ["focused_fmnist_k20", "pilot"] and "fedamp" in missing["budget"] and "cl" in missing["budget"]


def test_converged_vs_budget_waits_for_its_records_then_gives_tau(tmp_path, monkeypatch):
    from workbook import cross_paper_design as D

    res, text = D.converged_vs_budget([], root=tmp_path)
    assert res is None and "0 of 507 runs recorded" in text and "--params params/designs/11_cross_paper_converged.yaml" in text
    parts = ["dirichlet_0.3", "similarity_1", "noisy", "pathological", "cafa_iid_0.25"]
    budget = [_run(m, p, [a]) for p in parts for m, a in (("fedavg", .9), ("local", .8), ("fedprox", .7))]
    conv = [_run(m, p, [a], seed=s) for p in parts for s in (0, 1, 2)
            for m, a in (("fedavg", .7), ("local", .9), ("fedprox", .8))]
    for r in budget + conv:  # what cross_paper.runs_frame reads of a finished record
        r.update(local_accuracy=[0.5], ad=0.0, sdad=0.0, cp=0.0, wpsi=0.0, global_test_accuracy=0.5)
    monkeypatch.setattr("fedlib.experiment.present_records", lambda specs, folder: (conv, []))
    res, text = D.converged_vs_budget(budget, root=tmp_path)
    # converged: local, fedprox, fedavg; budget: fedavg, local, fedprox → pairs: (fedavg,local) −,
    # (fedavg,fedprox) −, (local,fedprox) + → τ = −1/3
    assert res["tau"] == pytest.approx(-1 / 3) and list(res["converged"].index) == ["local", "fedprox", "fedavg"]
    assert res["power"].n == 5 and res["power"].k == 3 and "Kendall τ = -0.33" in text


def test_tau_b_rows_matches_scipy_with_ties():
    from scipy import stats

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 4, (20, 6)).astype(float), rng.integers(0, 4, (20, 6)).astype(float)
    want = [stats.kendalltau(x, y).statistic for x, y in zip(a, b)]
    np.testing.assert_allclose(RP.tau_b_rows(a, b), want, atol=1e-12, equal_nan=True)
    assert np.isnan(RP.tau_b_rows([[1, 1, 1]], [[1, 2, 3]])[0])


def test_split_half_tau_counts_every_split_and_reads_a_perfect_order():
    # 4 methods, 7 blocks, the same order in every block: every split agrees, τ = 1 on C(7, 3) = 35 splits
    s = pd.DataFrame(np.tile([[4.0], [3.0], [2.0], [1.0]], (1, 7)), index=list("abcd"))
    t = RP.split_half_tau(s)
    assert t.shape == (35,) and np.all(t == 1.0)
    # 6 blocks: C(6, 3) / 2 = 10 splits (each once); blocks 0–2 rank a > b > c, blocks 3–5 the reverse
    s6 = pd.DataFrame([[3, 3, 3, 1, 1, 1], [2, 2, 2, 2, 2, 2], [1, 1, 1, 3, 3, 3]], index=list("abc"), dtype=float)
    t6 = RP.split_half_tau(s6)
    assert t6.shape == (10,)
    # the split {0, 1, 2} | {3, 4, 5}: halves reversed, τ = −1; the split with block 0 and two of 3–5 against the
    # rest: the halves' mean ranks (a: 7/3 vs 5/3 …) reverse too; no split gives +1 except a tie (NaN)
    assert np.nanmin(t6) == -1.0
    with pytest.raises(ValueError, match="scores"):
        RP.split_half_tau(s.iloc[:, :1])
    # more splits than max_splits: that many, distinct, reproducible from the seed
    big = pd.DataFrame(np.random.default_rng(1).random((3, 16)))
    a, b = RP.split_half_tau(big, max_splits=50, seed=3), RP.split_half_tau(big, max_splits=50, seed=3)
    assert a.shape == (50,) and np.array_equal(a, b, equal_nan=True)


def test_split_half_null_is_centred_near_zero_with_no_signal():
    null = RP.split_half_null(6, 7, n_sim=200, seed=0)
    assert null.shape == (200, 2) and abs(null["median"].median()) < 0.15
    assert (null["min"] <= null["median"]).all() and null["min"].min() >= -1 and null["median"].max() <= 1
    assert RP.split_half_null(6, 7, n_sim=5, seed=4).equals(RP.split_half_null(6, 7, n_sim=5, seed=4))


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 × (3, 2, 1) = 0.03, 0.04, 0.04 (running max); input order kept
    np.testing.assert_allclose(RP.holm([0.04, 0.01, 0.02]), [0.04, 0.03, 0.04])
    np.testing.assert_allclose(RP.holm([0.5, 0.4]), [0.8, 0.8])  # 0.4 × 2 = 0.8, then max(0.8, 0.5)
    np.testing.assert_allclose(RP.holm([0.9, 0.6, np.nan]), [1.0, 1.0, np.nan])
    assert RP.holm([]).size == 0


def test_preregistered_wilcoxon_with_holm():
    from scipy import stats

    blocks = 8
    d = np.array([1.0, 2, 3, 4, 5, 6, 7, -0.5])
    s = pd.DataFrame({b: {"m": 50 + d[b], "fedavg": 50.0, "local": 50 + d[b]} for b in range(blocks)})
    t = RP.preregistered(s, ["m"])
    assert list(zip(t.method, t.reference)) == [("m", "fedavg"), ("m", "local")]
    row = t.iloc[0]
    assert (row.n, row.wins, row.median_diff_pp) == (8, 7, pytest.approx(3.5))
    assert row.p == pytest.approx(stats.wilcoxon(d).pvalue)
    assert np.isnan(t.p.iloc[1])  # identical to Local on every block: no test
    assert row.p_holm == pytest.approx(row.p)  # one p-value: Holm leaves it
    with pytest.raises(ValueError, match="methods, references"):
        RP.preregistered(s, ["nope"])


def test_preregistered_design_is_stated_before_it_is_computed(tmp_path):
    """Issue 70's design: k = 7, N = 11 distinct FMNIST partitions at K = 100 (no K twins), one seed,
    R = 30, Local logging every round; CD ≤ 3 and the cost ≤ 25 CPU-hours at the measured rates; the
    statement names the tests and what cannot be separated; no result before its records exist."""
    from workbook import cross_paper as X, cross_paper_design as D

    specs = D.design_specs("preregistered")
    assert len(specs) == 77 and {s.seed for s in specs} == {0} and {s.fl["rounds"] for s in specs} == {30}
    blocks = {(s.dataset, s.n_clients, X.partition_of(s.protocol, s.level)) for s in specs}
    assert len(blocks) == 11 and {b[:2] for b in blocks} == {("fmnist", 100)}
    assert {s.method for s in specs} == set(D.SEED_PAPER_METHODS) | {"fedavg", "local"}
    assert all(s.hyper == {"per_round": True} for s in specs if s.method == "local")
    per = pd.Series({(BUDGET_KIND, m): 60.0 for m in {s.method for s in specs}})  # 1 CPU-minute a round each
    t = D.design_table(per, ["preregistered"]).iloc[0]
    assert t.nemenyi_cd == pytest.approx(RP.nemenyi_cd(7, 11)) and t.nemenyi_cd <= 3
    assert t.cpu_hours == pytest.approx(77 * 30 / 60)
    text = D.design_statement(per)
    for part in ("k = 7", "N = 11", "R = 30", "CD = 2.72", "Wilcoxon", "Holm", "What it cannot",
                 f"cost {77 * 30 / 60:.1f} CPU-hours", "at most 3 of 66"):
        assert part in text
    res, why = D.preregistered_results(tmp_path)
    assert res is None and "0 of 77 runs recorded" in why and "--params params/designs/11_cross_paper_preregistered.yaml" in why


def test_design_table_prices_each_block_at_its_own_measured_rate(tmp_path):
    """Issue 70: a focused design's adult or K = 20 block is priced at the measured CPU time a round of its own
    (data set, K, method) — the cost probe's records — not at FMNIST K = 100's; a kind no record measures is
    charged at its method's highest measured rate and its row says so; a rate from fewer rounds than the
    design's R is labelled an upper bound; records without cpu_seconds are labelled a fallback."""
    import record_fakes
    from fedlib import records
    from workbook import cross_paper_design as D

    def write(design, cpu_of):
        folder = tmp_path / D.RECORDS_OF[design]
        for s in D.design_specs(design):
            if s.method in D.FOCUSED_METHODS:
                rec = record_fakes.record(s, cpu_seconds=cpu_of(s))
                if rec["cpu_seconds"] is None:  # a record written before cpu_seconds existed
                    del rec["cpu_seconds"]
                records.write(folder / f"{s.key()}.json", rec)

    rate = {m: 5.0 + i for i, m in enumerate(D.FOCUSED_METHODS)}  # adult K = 20: 5-12 s a round
    write("budget", lambda s: 1.0 * 10)                   # FMNIST K = 100: 1 s a round at R = 10
    write("cost_probe_adult_k20", lambda s: rate[s.method] * 3)  # R = 3
    write("cost_probe_fmnist_k20", lambda s: None)      # no cpu_seconds: wall seconds (1 s a run)
    per = D.measured_rates(tmp_path)
    assert per[(D.cost_kind(D.design_specs("cost_probe_adult_k20")[0]), "fedfomo")] == pytest.approx(12.0)
    assert per.attrs["rounds"][(BUDGET_KIND, "fedavg")] == 10
    t = D.design_table(per, ["focused_fmnist_k100", "focused_adult_k20", "focused_adult_k100",
                             "focused_fmnist_k20"]).set_index("design")
    runs = {m: sum(s.method == m for s in D.design_specs("focused_adult_k20")) for m in D.FOCUSED_METHODS}
    assert t.loc["focused_adult_k20", "cpu_hours"] == pytest.approx(
        sum(runs[m] * 100 * rate[m] for m in runs) / 3600)  # at FMNIST K = 100's rate: 168 · 100 · 1 s
    basis = t.loc["focused_adult_k20", "cost_basis"]
    assert basis.startswith("measured: CPU time a round per (data set, K, method) × R (adult K = 20 from 3-round runs)")
    assert "upper bound" in basis and "not measured" not in basis and "fallback" not in basis
    assert t.loc["focused_fmnist_k100", "cpu_hours"] == pytest.approx(240 * 100 * 1.0 / 3600)
    assert "(fmnist K = 100 from 10-round runs)" in t.loc["focused_fmnist_k100", "cost_basis"]
    # adult K = 100: no record measures it — its method's highest measured rate (adult K = 20's here), said so
    a100 = t.loc["focused_adult_k100"]
    assert a100.cpu_hours == pytest.approx(sum(120 / 8 * 100 * rate[m] for m in rate) / 3600)
    assert a100.cost_basis.startswith("not measured for adult K = 100, n_train all, arch mlp: charged at its "
                                      "method's highest measured rate (adult K = 20, n_train all, arch mlp)")
    # FMNIST K = 20 measured from records without cpu_seconds: 1 s a run / 3 rounds, its basis the fallback's
    assert t.loc["focused_fmnist_k20", "cpu_hours"] == pytest.approx(240 * 100 / 3 / 3600)
    assert "fmnist K = 20 from 3-round runs" in t.loc["focused_fmnist_k20", "cost_basis"]
    assert "fallback" in t.loc["focused_fmnist_k20", "cost_basis"]
    # the focused designs together: each block at its own rate
    assert t.loc["focused (all)", "cpu_hours"] == pytest.approx(t.cpu_hours.iloc[:4].sum())
    with pytest.raises(ValueError, match="per_round"):  # a rate per method only: whose data set and K?
        D.design_table(pd.Series({m: 1.0 for m in D.FOCUSED_METHODS}), ["focused_adult_k20"])
    assert set(D.PROBES) <= set(D.DESIGNS) and not set(D.PROBES) & set(D.RANKING_DESIGNS)  # probes rank nothing


def test_preregistered_results_from_a_complete_design(tmp_path):
    """Issue 70: once all 77 runs are recorded, the results come from them: each run scored by the mean
    of its last 3 evaluations, the mean ranks, and the Wilcoxon–Holm comparisons. Here Local beats every
    method on every block (its rank 1, every comparison against it significant after Holm: exact p =
    2/2^11 ≈ 0.001 × 10 comparisons at most ≈ 0.0098 < 0.05) and the others tie FedAvg on some blocks."""
    import record_fakes
    from fedlib import records
    from workbook import cross_paper_design as D

    specs = D.design_specs("preregistered")
    blocks = sorted({D._partition({"spec": s.to_dict()}) for s in specs})
    skill = {"local": 0.9, "clust_psi_pfl": 0.7, "fedprism": 0.65, "psi_pfl": 0.6, "cafa": 0.55, "pfedlia": 0.5,
             "fedavg": 0.4}
    folder = tmp_path / D.RECORDS_OF["preregistered"]
    for s in specs:
        b = blocks.index(D._partition({"spec": s.to_dict()}))
        acc = skill[s.method] + 0.01 * b  # every block keeps the same order
        hist = [{"round": t, "global_accuracy": acc - 0.1 / (t + 1)} for t in range(30)]
        records.write(folder / f"{s.key()}.json", record_fakes.record(s, accuracy=0.5, history=hist))
    res, text = D.preregistered_results(tmp_path)
    assert res is not None and text.startswith("preregistered: ")
    last3 = {m: 100 * (skill[m] - np.mean([0.1 / 28, 0.1 / 29, 0.1 / 30])) for m in skill}  # block 0
    assert res["scores"].loc["local", blocks[0]] == pytest.approx(last3["local"])
    assert list(res["ranks"].index) == sorted(skill, key=lambda m: -skill[m])
    assert res["ranks"]["local"] == 1.0 and res["ranks"]["fedavg"] == 7.0
    pre = res["preregistered"].set_index(["method", "reference"])
    assert len(pre) == 10 and pre.significant.all()
    assert pre.p_holm.max() <= 10 * 2 / 2 ** 11 + 1e-12
    assert (res["convergence"].evaluations == 30).all()
