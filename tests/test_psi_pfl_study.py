"""Notebook 07's layer: candidates, the paper's test-selected variant and Observations 2–4 from
hand-made records (no training)."""
import numpy as np
import pandas as pd
import pytest

from workbook import psi_pfl_study as study, tables
from fedlib.evaluation import client_parity
from fedlib.methods import psi_pfl


def record(method, level, seed=0, correct=(8, 6), n=(10, 10), candidates=None, dataset="adult", psi=None):
    correct, n = list(correct), list(n)
    acc = np.array(correct) / np.array(n)
    r = {"spec": {"dataset": dataset, "protocol": "dirichlet", "level": level, "n_clients": len(n),
                  "seed": seed, "method": method},
         "status": "ok", "paper_name": "ACSIncome (stand-in: UCI Adult)", "correct": correct, "n_test": n,
         "global_accuracy": sum(correct) / sum(n), "ad": float(np.mean(1 - acc)), "sdad": float(np.std(1 - acc)),
         "cp": client_parity(acc), "wpsi": 1.0 / level, "local_accuracy": acc.tolist(),
         "info": {}}
    if candidates is not None:
        r["info"] = {"candidates": candidates, "selected_on": "val",
                     "chosen": int(np.argmax([c["val_accuracy"] for c in candidates])), "psi": psi}
        best = candidates[r["info"]["chosen"]]
        r["correct"] = best["test_correct"]
        r["global_accuracy"] = sum(best["test_correct"]) / sum(n)
        r["local_accuracy"] = (np.array(best["test_correct"]) / np.array(n)).tolist()
    return r


def cand(p, val, test_correct, n=(10, 10)):
    return {"percentile": float(p), "threshold": p / 100, "n_selected": 1 + p // 50, "clients": [0],
            "val_accuracy": val, "test_correct": list(test_correct),
            "test_accuracy": sum(test_correct) / sum(n)}


CANDS = [cand(10, 0.70, (9, 8)), cand(25, 0.80, (7, 7)), cand(50, 0.60, (5, 5)),
         cand(75, 0.50, (5, 4)), cand(90, 0.40, (4, 4))]


def test_candidates_frame_has_one_row_per_candidate_and_marks_the_chosen():
    c = study.candidates_frame([record("psi_pfl", 0.1, candidates=CANDS), record("fedavg", 0.1)])
    assert c.percentile.tolist() == [10, 25, 50, 75, 90]
    assert c.chosen.tolist() == [False, True, False, False, False]  # best validation accuracy
    assert c.test_accuracy.tolist() == pytest.approx([0.85, 0.7, 0.5, 0.45, 0.4])


def test_paper_variant_takes_the_best_test_candidate_and_recomputes_the_metrics():
    (v,) = study.paper_variant_records([record("psi_pfl", 0.1, candidates=CANDS)])
    assert v["spec"]["method"] == study.PAPER_VARIANT
    assert v["correct"] == [9, 8] and v["global_accuracy"] == pytest.approx(0.85)
    assert v["info"]["percentile"] == 10 and v["info"]["selected_on"] == "test"
    assert v["cp"] == pytest.approx((0.9 - 0.8) / 0.8)


def _with_variant(recs):
    return tables.records_frame(recs + study.paper_variant_records(recs))


def test_observations_computed_on_each_variant_the_papers_named():
    recs = []
    for level in (50.0, 0.1):
        recs += [record("cl", level, correct=(9, 9)), record("fedavg", level, correct=(8, 5)),
                 record("haccs", level, correct=(7, 7)), record("psi_pfl", level, candidates=CANDS)]
    lines, frames = study.observations(_with_variant(recs), study.candidates_frame(recs))
    # one line per observation × variant, the paper's variant first, and named as the one it speaks about
    assert [line.split()[1] for line in lines] == ["2", "2", "3", "3", "4", "4"]
    for line in lines[0::2]:
        assert "test, the paper's variant — the paper's statement is about this variant" in line
    for line in lines[1::2]:
        assert "validation, ours" in line and "statement is about" not in line
    # Obs. 2: best by test accuracy (the paper's) is the 10th percentile; by validation (ours) the 25th
    o2 = frames["obs2"]
    assert o2[o2.variant == study.PAPER_VARIANT].best_percentile.tolist() == [10.0, 10.0]
    assert o2[o2.variant == "psi_pfl"].best_percentile.tolist() == [25.0, 25.0]
    assert "2/2" in lines[0] and "2/2" in lines[1]
    # Obs. 3: the paper's variant (10th: (9+8)/20 = 85 %) vs the best baseline HACCS 70 %: +15 pp;
    # ours (25th: 70 %): margin 0 — percent, the readers' unit, in frames and lines
    o3 = frames["obs3"]
    assert o3[o3.variant == study.PAPER_VARIANT].margin.tolist() == pytest.approx([15.0, 15.0])
    assert o3.best_baseline_accuracy.tolist() == pytest.approx([70.0] * 4)
    assert "(margin from +15.00 to +15.00 pp)" in lines[2]
    assert o3[o3.variant == "psi_pfl"].margin.tolist() == pytest.approx([0.0, 0.0])
    assert o3.best_baseline.tolist() == ["haccs"] * 4
    # Obs. 4 at α=0.1, CL = 90 %: paper's (90, 80) → AD 5 %; ours (70, 70) → 20 %; HACCS 20 %
    o4 = frames["obs4"].set_index("variant")
    assert o4.loc[study.PAPER_VARIANT, "psi_pfl_ad_cl"] == pytest.approx(5.0)
    assert o4.loc["psi_pfl", "psi_pfl_ad_cl"] == pytest.approx(20.0)
    assert (o4.level == 0.1).all() and o4.best_baseline_ad_cl.tolist() == pytest.approx([20.0, 20.0])
    assert "(PSI-PFL's AD 5.00–5.00 %; the paper's 3.00 % is compared" in lines[4]
    assert frames["obs2"].best_test_accuracy.dropna().tolist() == pytest.approx([85.0, 85.0])


def test_observation_3_can_hold_for_the_papers_variant_and_fail_for_ours():
    recs = [record("cl", 0.1, correct=(9, 9)), record("fedavg", 0.1, correct=(8, 8)),
            record("psi_pfl", 0.1, candidates=CANDS)]
    lines, frames = study.observations(_with_variant(recs), study.candidates_frame(recs))
    o3 = frames["obs3"].set_index("variant").margin
    assert o3[study.PAPER_VARIANT] == pytest.approx(85 - 80) and o3["psi_pfl"] == pytest.approx(70 - 80)  # pp
    assert "1/1" in lines[2] and " confirmed" in lines[2]
    assert "0/1" in lines[3] and "not confirmed" in lines[3]


def test_observation_3_not_confirmed_when_a_baseline_wins():
    recs = [record("cl", 0.1, correct=(9, 9)), record("fedavg", 0.1, correct=(10, 10)),
            record("psi_pfl", 0.1, candidates=CANDS)]
    lines, frames = study.observations(tables.records_frame(recs), study.candidates_frame(recs))
    # without the paper's variant's rows, only ours is judged
    assert frames["obs3"].margin.iloc[0] == pytest.approx(70 - 100)  # pp
    assert len(lines) == 3 and "0/1" in lines[1] and "not confirmed" in lines[1]


def test_finite_cp_leaves_clients_at_zero_out_and_counts_them():
    recs = [record("cl", 0.05, correct=(9, 9, 9), n=(10, 10, 10)),
            record("haccs", 0.05, correct=(0, 3, 9), n=(10, 10, 10))]
    t = study.fairness_table(tables.records_frame(recs)).set_index("method")
    assert t.loc["haccs", "cp"] == np.inf  # the records' cp: (0.9 − 0) / 0
    assert t.loc["haccs", "cp_nonzero"] == pytest.approx((0.9 - 0.3) / 0.3)  # 2.0, client at 0 left out
    assert t.loc["haccs", "n_zero"] == 1


def test_paper_comparison_reads_ours_at_the_papers_setting_only():
    recs = []
    for level in (0.05, 0.3):
        recs += [record("cl", level, correct=(9, 9, 9), n=(10, 10, 10)),
                 record("haccs", level, correct=(0, 3, 9), n=(10, 10, 10))]
    df = tables.records_frame(recs)
    c = study.paper_comparison(df, level=0.05, n_clients=3).set_index(["method", "metric"])
    # AD vs CL (90 %): |0 − 90|, |30 − 90|, 0 → mean 50 %, population std 100·sqrt(0.14) — percent, as
    # the report prints them; CP stays a ratio
    assert c.loc[("haccs", "AD vs CL"), "paper"] == pytest.approx(24.0)
    assert c.loc[("haccs", "AD vs CL"), "ours"] == pytest.approx(50.0)
    assert c.loc[("haccs", "SDAD vs CL"), "paper"] == pytest.approx(13.0)
    assert c.loc[("haccs", "SDAD vs CL"), "ours"] == pytest.approx(100 * np.sqrt(0.14))
    assert c.loc[("haccs", "AD vs CL"), "unit"] == "%" and c.loc[("haccs", "CP"), "unit"] == "ratio"
    cp = c.loc[("haccs", "CP")]
    assert cp.paper == 2.2 and cp.ours == pytest.approx(2.0) and cp.ours_cp_inf == np.inf and cp.n_zero == 1
    assert c.loc[("fedyogi", "CP"), "paper"] == 3.7 and np.isnan(c.loc[("fedyogi", "CP"), "ours"])
    assert c.loc[(study.PAPER_VARIANT, "AD vs CL"), "paper"] == pytest.approx(3.0)
    assert np.isnan(c.loc[("psi_pfl", "AD vs CL"), "paper"])  # ours, listed beside the paper's variant
    # the default is the paper's most heterogeneous setting (α = 0.05, K = 100): no run of it here
    d = study.paper_comparison(df)
    assert d.setting.unique().tolist() == ["α=0.05, K=100"] and d.ours.isna().all() and (d.n_seeds == 0).all()
    assert d.paper.notna().sum() == len(study.PAPER_EQ3)


def test_threshold_ties_show_where_below_changes_the_selection():
    """Hand-made tie: three clients share PSI 0.2, which is the 25th, 50th and 75th percentile
    (positions 1, 2, 3 of 5); ≤ selects four clients there, < only the one at 0.1."""
    v = [0.1, 0.2, 0.2, 0.2, 0.9]
    z = psi_pfl.candidate_thresholds(v)
    np.testing.assert_allclose(z, [0.14, 0.2, 0.2, 0.2, 0.62])  # p10: .1 + .4·.1; p90: .2 + .6·.7
    ch = psi_pfl.rule_changes(v, z)
    assert [(c["n_le"], c["n_lt"], c["n_at"], c["changed"]) for c in ch] == [
        (1, 1, 0, False), (4, 1, 3, True), (4, 1, 3, True), (4, 1, 3, True), (4, 4, 0, False)]
    cands = [{"percentile": float(p), "threshold": float(t), "val_accuracy": 0.5, "test_accuracy": 0.5,
              "test_correct": [5, 5], "n_selected": 1, "clients": [0]} for p, t in zip(psi_pfl.PERCENTILES, z)]
    ties = study.threshold_ties([record("psi_pfl", 0.3, candidates=cands, psi=v), record("fedavg", 0.3)])
    assert ties.changed.tolist() == [False, True, True, True, False]
    assert ties.same_zeta_as.tolist()[2:4] == [25.0, 25.0] and np.isnan(ties.same_zeta_as.iloc[1])
    (line,) = study.threshold_tie_lines(ties)
    assert "changes 3/5" in line and "p25 (4 → 1 clients)" in line and "p25 = p50" in line and "p25 = p75" in line


def test_grid_specs_add_paper_code_for_the_baselines_not_for_psi_pfl():
    args = (["adult"], [0.3], [20], [0], ["fedavg", "poc", "haccs", "fedcls"])
    text = study.grid_specs(*args, val_fraction=0.1)
    assert {s.reproduction for s in text} == {"paper_text"} and len(text) == 5
    both = study.grid_specs(*args, val_fraction=0.1, reproductions=["paper_text", "paper_code"])
    code = sorted(s.method for s in both if s.reproduction == "paper_code")
    assert code == ["fedcls", "haccs", "poc"]  # FedAvg: ⌊0.5·20⌋ ≥ 2, one run serves both; PSI-PFL: rebuilt
    (poc,) = [s for s in both if s.reproduction == "paper_code" and s.method == "poc"]
    assert poc.effective()[1]["optimizer"] == "sgd" and poc.effective()[1]["batch_size"] == 64


def test_figures_draw_from_records():
    recs = [record("cl", lv, correct=(9, 9)) for lv in (50.0, 0.1)]
    recs += [record("psi_pfl", lv, candidates=CANDS) for lv in (50.0, 0.1)]
    c = study.candidates_frame(recs)
    fig = study.fig5_thresholds(c)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2 and ax.get_title() == "adult, K=2"
    # percent, the readers' unit: each line is 100 × the mean test accuracy per percentile
    for line in ax.get_lines():
        np.testing.assert_allclose(line.get_ydata(), [85.0, 70.0, 50.0, 45.0, 40.0])
    assert ax.get_ylabel() == "global accuracy (%)" and ax.get_ylim() == (0, 102)
    fig = study.fig7_ecdfs(tables.records_frame(recs), n_clients=2)
    assert [a.get_title() for a in fig.axes] == ["adult, α=50, K=2", "adult, α=0.1, K=2"]
    for a in fig.axes:
        assert a.get_xlabel() == "local accuracy (%)"
        assert max(np.nanmax(line.get_xdata()) for line in a.get_lines()) > 1.0  # percent, not fractions


def test_an_infeasible_setting_stays_infeasible_for_the_paper_variant():
    infeasible = {"spec": {"dataset": "adult", "protocol": "dirichlet", "level": 0.1, "n_clients": 20,
                           "seed": 0, "method": "psi_pfl"}, "status": "infeasible", "error": "no partition"}
    (v,) = study.paper_variant_records([infeasible])
    assert v["status"] == "infeasible" and v["spec"]["method"] == study.PAPER_VARIANT
    assert infeasible["spec"]["method"] == "psi_pfl"  # the original record is untouched


# ----------------------------------------------------------------------------- the authors' ζ choice
def _c(p, z, acc, n_selected=3):
    return {"percentile": float(p), "threshold": z, "test_accuracy": acc, "n_selected": n_selected}


def test_authors_zeta_is_one_percentile_by_the_mean_over_seeds_duplicates_dropped():
    """By hand. Seed 0: the 25th percentile's threshold equals the 10th's (dropped); seed 1 has
    three distinct thresholds. Means over the seeds that kept each percentile: 10th (0.9 + 0.6)/2
    = 0.75, 25th 0.65 (seed 1 only), 50th (0.5 + 0.7)/2 = 0.6 → the 10th for both seeds; seed 1
    reports 0.6, not its own best 0.7. Keeping the duplicate would have made the 25th
    (0.9 + 0.65)/2 = 0.775 the best."""
    by_seed = {0: [_c(10, 0.1, 0.9), _c(25, 0.1, 0.9), _c(50, 0.3, 0.5)],
               1: [_c(10, 0.1, 0.6), _c(25, 0.2, 0.65), _c(50, 0.3, 0.7)]}
    got = study.authors_zeta_choice(by_seed)
    assert got["kept"] == {0: [10.0, 50.0], 1: [10.0, 25.0, 50.0]}
    assert got["mean"] == pytest.approx({10.0: 0.75, 25.0: 0.65, 50.0: 0.6})
    assert got["percentile"] == 10.0 and got["chosen"] == {0: 0, 1: 0}


def test_authors_zeta_reports_the_kept_run_of_a_dropped_percentile_and_ties_take_the_lower():
    # the 25th wins on seed 1's 0.95 alone; seed 0 dropped it, so it reports the 10th's run (same pool)
    by_seed = {0: [_c(10, 0.1, 0.9), _c(25, 0.1, 0.9), _c(50, 0.3, 0.5)],
               1: [_c(10, 0.1, 0.6), _c(25, 0.2, 0.95), _c(50, 0.3, 0.7)]}
    got = study.authors_zeta_choice(by_seed)
    assert got["percentile"] == 25.0 and got["chosen"] == {0: 0, 1: 1}
    tie = study.authors_zeta_choice({0: [_c(10, 0.1, 0.8), _c(25, 0.2, 0.8)]})
    assert tie["percentile"] == 10.0 and tie["chosen"] == {0: 0}
    with pytest.raises(ValueError, match="candidates_by_seed must be every seed's candidates at the same percentiles"):
        study.authors_zeta_choice({0: [_c(10, 0.1, 0.8)], 1: [_c(25, 0.1, 0.8)]})
    with pytest.raises(ValueError, match="candidates_by_seed must be a non-empty dict"):
        study.authors_zeta_choice({})


def test_authors_pool_copies_a_pool_of_at_most_two_clients_four_times():
    assert study.authors_pool([3]) == [3, 3, 3, 3]
    assert study.authors_pool([1, 2]) == [1, 2, 1, 2, 1, 2, 1, 2]
    assert study.authors_pool([1, 2, 3]) == [1, 2, 3]


def test_paper_variant_chooses_one_zeta_per_setting_over_its_seeds():
    # seed 0's best test candidate is the 10th (0.85), seed 1's the 50th (0.9); means: 10th
    # (0.85 + 0.2)/2 = 0.525, 25th (0.7 + 0.6)/2 = 0.65, 50th (0.5 + 0.9)/2 = 0.7 → the 50th for
    # both seeds (seed 0: 0.5, not its best 0.85)
    c1 = [cand(10, 0.5, (2, 2)), cand(25, 0.5, (6, 6)), cand(50, 0.9, (9, 9)),
          cand(75, 0.5, (5, 4)), cand(90, 0.4, (4, 4))]
    recs = [record("psi_pfl", 0.1, seed=0, candidates=CANDS), record("psi_pfl", 0.1, seed=1, candidates=c1),
            record("psi_pfl", 0.5, seed=0, candidates=CANDS)]  # another setting: its own choice
    out = {(v["spec"]["level"], v["spec"]["seed"]): v for v in study.paper_variant_records(recs)}
    assert {k: v["info"]["percentile"] for k, v in out.items()} == {(0.1, 0): 50.0, (0.1, 1): 50.0, (0.5, 0): 10.0}
    assert out[(0.1, 0)]["correct"] == [5, 5] and out[(0.1, 0)]["global_accuracy"] == pytest.approx(0.5)
    assert out[(0.1, 1)]["global_accuracy"] == pytest.approx(0.9)
    assert out[(0.1, 0)]["info"]["zeta_seeds"] == [0, 1] and out[(0.5, 0)]["info"]["zeta_seeds"] == [0]
    assert out[(0.1, 0)]["info"]["zeta_mean_test_accuracy"] == pytest.approx(0.7)
    # cand()'s 50th pool holds 1 + 50 // 50 = 2 clients: the authors' code copied it ×4
    assert out[(0.1, 0)]["info"]["authors_pool_copied"] and out[(0.5, 0)]["info"]["authors_pool_copied"]
