"""Notebook 07's layer: candidates, the paper's test-selected variant and Observations 2–4 from
hand-made records (no training)."""
import numpy as np
import pandas as pd
import pytest

from fedlib.analysis import psi_pfl_study as study, tables


def record(method, level, seed=0, correct=(8, 6), n=(10, 10), candidates=None, dataset="adult"):
    correct, n = list(correct), list(n)
    acc = np.array(correct) / np.array(n)
    r = {"spec": {"dataset": dataset, "protocol": "dirichlet", "level": level, "n_clients": len(n),
                  "seed": seed, "method": method},
         "status": "ok", "paper_name": "ACSIncome (stand-in: UCI Adult)", "correct": correct, "n_test": n,
         "global_accuracy": sum(correct) / sum(n), "ad": float(np.mean(1 - acc)), "sdad": float(np.std(1 - acc)),
         "cp": float((acc.max() - acc.min()) / acc.min()), "wpsi": 1.0 / level, "local_accuracy": acc.tolist(),
         "info": {}}
    if candidates is not None:
        r["info"] = {"candidates": candidates, "selected_on": "val",
                     "chosen": int(np.argmax([c["val_accuracy"] for c in candidates]))}
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


def test_observations_computed_from_the_runs():
    recs = []
    for level in (50.0, 0.1):
        recs += [record("cl", level, correct=(9, 9)), record("fedavg", level, correct=(8, 5)),
                 record("haccs", level, correct=(7, 7)), record("psi_pfl", level, candidates=CANDS)]
    df = tables.records_frame(recs)
    lines, frames = study.observations(df, study.candidates_frame(recs))
    # Obs. 2: the 10th percentile has the best test accuracy in both settings
    assert frames["obs2"].best_percentile.tolist() == [10.0, 10.0]
    assert "2/2" in lines[0] and "confirmed" in lines[0]
    # Obs. 3: PSI-PFL (val-chosen 25th: 0.70) vs best baseline HACCS 0.70 ≥ FedAvg 0.65 → margin 0
    assert frames["obs3"].best_baseline.tolist() == ["haccs", "haccs"]
    assert frames["obs3"].margin.tolist() == pytest.approx([0.0, 0.0])
    assert "2/2" in lines[1]
    # Obs. 4 at α=0.1: AD from CL (0.9): PSI-PFL |0.7−0.9| = 0.2; HACCS 0.2; FedAvg (0.1+0.4)/2 = 0.25
    o4 = frames["obs4"].iloc[0]
    assert o4.level == 0.1 and o4.psi_pfl_ad_cl == pytest.approx(0.2)
    assert o4.best_baseline == "haccs" and o4.best_baseline_ad_cl == pytest.approx(0.2)


def test_observation_3_not_confirmed_when_a_baseline_wins():
    recs = [record("cl", 0.1, correct=(9, 9)), record("fedavg", 0.1, correct=(10, 10)),
            record("psi_pfl", 0.1, candidates=CANDS)]
    lines, frames = study.observations(tables.records_frame(recs), study.candidates_frame(recs))
    assert frames["obs3"].margin.iloc[0] == pytest.approx(0.7 - 1.0)
    assert "0/1" in lines[1] and "not confirmed" in lines[1]


def test_figures_draw_from_records():
    recs = [record("cl", lv, correct=(9, 9)) for lv in (50.0, 0.1)]
    recs += [record("psi_pfl", lv, candidates=CANDS) for lv in (50.0, 0.1)]
    c = study.candidates_frame(recs)
    fig = study.fig5_thresholds(c)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2 and ax.get_title() == "adult, K=2"
    fig = study.fig7_ecdfs(tables.records_frame(recs), n_clients=2)
    assert [a.get_title() for a in fig.axes] == ["adult, α=50, K=2", "adult, α=0.1, K=2"]


def test_an_infeasible_setting_stays_infeasible_for_the_paper_variant():
    infeasible = {"spec": {"dataset": "adult", "protocol": "dirichlet", "level": 0.1, "n_clients": 20,
                           "seed": 0, "method": "psi_pfl"}, "status": "infeasible", "error": "no partition"}
    (v,) = study.paper_variant_records([infeasible])
    assert v["status"] == "infeasible" and v["spec"]["method"] == study.PAPER_VARIANT
    assert infeasible["spec"]["method"] == "psi_pfl"  # the original record is untouched
