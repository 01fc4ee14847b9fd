"""Notebook 10's analysis (workbook.pfedlia_study): the grid, Table I with the paper's
values beside, the cluster-recovery table, the rounds curve and the influence view, from
hand-made records."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbook import pfedlia_study as study

FL = {"rounds": 10, "local_epochs": 2, "fraction": 0.25}


def record(method, protocol, seed, acc, *, grouping=None, hyper=None, status="ok", history=None, info=None):
    k = 10
    truth = np.arange(k) % 5
    info = dict(info or {})
    if grouping is not None:
        info["cluster_of_client"] = list(grouping)
    return {"spec": {"method": method, "protocol": protocol, "level": 5.0, "n_clients": k, "seed": seed,
                     "hyper": hyper or {}},
            "status": status, "seconds": 2.0,
            **({"local_accuracy": [acc] * k, "history": history or [{"round": 1, "global_accuracy": acc}]}
               if status == "ok" else {}),
            "info": info, "_truth": truth.tolist()}


def test_training_specs_follow_the_paper():
    specs = study.training_specs(list(study.SETTINGS), 20, [0, 1], FL, hyper={"pfedlia": {"warmup_rounds": 3}})
    by = {}
    for s in specs:
        by.setdefault((s.protocol, study.method_label({"method": s.method, "hyper": s.hyper})), []).append(s)
    assert ("noisy_clusters", "oracle") not in by and len(by[("pathological_clusters", "oracle")]) == 2
    assert by[("noisy_clusters", "pfedlia (p2p)")][0].hyper == {"warmup_rounds": 3, "clustering": "p2p"}
    assert ("pathological_clusters", "clust_psi_pfl") in by  # for the recovery table
    variants = study.training_specs(["noisy_clusters"], 20, [0], FL, methods=["cfl"], recovery_extra=(),
                                    hyper={"cfl": {**study.CFL_PAPER, "warmup_rounds": 3}},
                                    cfl_variants=[{"eps1": "auto", "eps2": 0.0}])
    assert [s.hyper for s in variants] == [{**study.CFL_PAPER, "warmup_rounds": 3},
                                           {**study.CFL_PAPER, "warmup_rounds": 3, "eps1": "auto", "eps2": 0.0}]
    assert [study.method_label(s.to_dict()) for s in variants] == [
        "cfl", "cfl (ε1 = auto (defective, superseded; 0.5 × warm-up update), ε2 = 0, γ = 0)"]
    assert {s.val_fraction for s in specs} == {0.2} and {s.level for s in specs} == {5}
    assert by[("pathological_clusters", "local")][0].hyper == {"epochs": round(10 * 0.25 * 2)}
    for s in specs:
        s.validate()
    with pytest.raises(ValueError, match="settings must be one of"):
        study.training_specs(["dirichlet"], 20, [0], FL)


def test_paper_table1_as_printed():
    assert study.PAPER_TABLE1["pathological_clusters"]["fmnist"]["pfedlia"] == (99.07, 0.21)
    assert study.PAPER_TABLE1["noisy_clusters"]["fmnist"]["fedproto"] == (87.39, 2.87)
    assert study.PAPER_TABLE1["noisy_clusters"]["cifar100"]["oracle"] is None
    assert study.PAPER_TABLE1["pathological_clusters"]["cifar10"]["fesem"] == (72.90, 8.24)


def test_tables_from_records():
    perfect, merged = [0, 1, 2, 3, 4] * 2, [0] * 10
    recs = [record("oracle", "pathological_clusters", s, 0.98 + 0.01 * s, grouping=perfect) for s in (0, 1)]
    recs += [record("pfedlia", "pathological_clusters", 0, 0.97, grouping=perfect),
             record("pfedlia", "pathological_clusters", 0, 0.90, grouping=merged, hyper={"clustering": "p2p"}),
             record("fedavg", "pathological_clusters", 0, 0.60),
             record("cfl", "noisy_clusters", 0, 0.5, info={"assignment": merged}, hyper=study.CFL_PAPER),
             record("cfl", "noisy_clusters", 0, 0.7, info={"assignment": perfect}, hyper={"eps1": "auto"}),
             record("fedfomo", "noisy_clusters", 0, 0.0, status="failed")]
    df = study.accuracy_frame(recs)
    t = study.table1(df).set_index("Method")
    assert t.loc["Oracle", "Pathological"] == "98.50 ± 0.50 (n = 2)"
    assert t.loc["Oracle", "Noisy"] == "—" and t.loc["Oracle", "Noisy (paper)"] == "—"
    assert t.loc["pFedLIA", "Pathological (paper)"] == "99.07 ± 0.21"
    assert t.loc["pFedLIA (p2p)", "Pathological"] == "90.00 (n = 1)"
    assert t.loc["FedFomo", "Noisy"] == "failed"
    rec = study.recovery_table(df).set_index("Method")
    assert rec.loc["pFedLIA", "Pathological ARI"] == "1.00 (n = 1)"
    assert rec.loc["pFedLIA (p2p)", "Pathological ARI"] == "0.00 (n = 1)"
    flbench = "CFL (ε1 = 0.4, ε2 = 1.6, γ = 0: FL-bench's)"
    auto = "CFL (ε1 = auto (defective, superseded; 0.5 × warm-up update), ε2 = 0.1, γ = 0.5)"  # Table II's ε2, γ: the cfl defaults
    assert t.index.tolist()[-4:] == [flbench, auto, "pFedLIA", "pFedLIA (p2p)"]
    assert t.loc[flbench, "Noisy"] == "50.00 (n = 1)" and t.loc[flbench, "Noisy (paper)"] == "67.10 ± 4.80"
    assert t.loc[auto, "Noisy"] == "70.00 (n = 1)" and t.loc[auto, "Noisy (paper)"] == "—"
    assert rec.loc[flbench, "Noisy groups"] == "1.00 (n = 1)" and rec.loc[auto, "Noisy ARI"] == "1.00 (n = 1)"
    assert np.isnan(df[df.method == "fedavg"].ari).all()  # FedAvg has no grouping
    lines = study.observations(df)
    assert any("pFedLIA 97.00 vs Oracle 98.50 — within 1 point: False" in x for x in lines)
    assert any("recovers the planted clusters (ARI = 1): True" in x for x in lines)


def test_table1_reads_each_split_by_its_metric_and_refuses_mixing_them():
    """FL-bench's split (pool_test) reads pooled accuracy Σ correct / Σ n (record global_accuracy);
    the workbook's the mean over clients. Two clients: accuracies 0.9 and 0.5 on 30 and 10 test
    samples: mean 70 %, pooled (27 + 5) / 40 = 80 %."""
    fb = record("fedavg", "pathological_clusters", 0, 0.0)
    fb["spec"]["pool_test"] = True
    fb.update(local_accuracy=[0.9, 0.5], global_accuracy=0.8)
    wb = record("fedavg", "pathological_clusters", 0, 0.0)
    wb.update(local_accuracy=[0.6, 0.4], global_accuracy=0.55)
    never = record("cfl", "pathological_clusters", 0, 0.5, hyper=study.CFL_PAPER,
                   info={"split_log": [{"round": 21, "split": False}]})
    df = study.accuracy_frame([fb, wb, never])
    assert list(df.data_split) == ["fl_bench", "workbook", "workbook"]
    assert df.pooled.iloc[0] == pytest.approx(80.0) and df.accuracy.iloc[0] == pytest.approx(70.0)
    t_fb = study.table1(df, split="fl_bench").set_index("Method")
    t_wb = study.table1(df, split="workbook").set_index("Method")
    assert t_fb.loc["FedAvg", "Pathological"] == "80.00 (n = 1)"
    assert t_wb.loc["FedAvg", "Pathological"] == "50.00 (n = 1)"  # mean of 0.6 and 0.4
    assert t_wb.loc["CFL (ε1 = 0.4, ε2 = 1.6, γ = 0: FL-bench's)", "Pathological"] == "50.00 (n = 1) (CFL never split)"
    with pytest.raises(ValueError, match="^split must be one of"):
        study.table1(df)  # both splits: say which
    assert study.table1(df[df.data_split == "workbook"]).equals(study.table1(df, split="workbook"))
    assert study.READINGS["fl_bench"][0] == "pooled" and study.READINGS["workbook"][0] == "accuracy"


def test_rounds_frame_and_influence_view():
    hist = [{"round": r, "global_accuracy": r / 10} for r in (1, 2)]
    recs = [record("pfedlia", "pathological_clusters", s, 0.9, history=hist) for s in (0, 1)]
    recs.append(record("clust_psi_pfl", "pathological_clusters", 0, 0.9, history=hist))
    curves = study.rounds_frame(recs)
    assert curves.method.tolist() == ["pfedlia", "pfedlia"] and curves.accuracy.tolist() == [10.0, 20.0]
    study.fig_rounds(curves, 1)
    scores = np.full((10, 10), -1.0)
    scores[0, [0, 5]] = 5.0
    rec = record("pfedlia", "pathological_clusters", 0, 0.9, info={"influence": scores.tolist()})
    view = study.influence_frame(rec, 0)
    assert view.beneficial.tolist() == [c in (0, 5) for c in range(10)]
    assert view.planted_cluster.tolist() == [0, 1, 2, 3, 4] * 2
    study.fig_influence(view, 0, "pathological_clusters")
    with pytest.raises(ValueError, match="client must be"):
        study.influence_frame(rec, 10)
    with pytest.raises(ValueError, match="record must be a finished pFedLIA record"):
        study.influence_frame(record("fedavg", "pathological_clusters", 0, 0.9), 0)
    assert isinstance(curves, pd.DataFrame)


def _shown(mean, sd, n) -> str:
    """A cell of ours as the markdown table prints it (workbook.tables.mean_sd), from the CSV's numbers."""
    return "—" if n == 0 else f"{mean:.2f} (n = 1)" if n == 1 else f"{mean:.2f} ± {sd:.2f} (n = {n})"


def test_csvs_hold_the_tables_numbers_never_strings(tmp_path):
    """table1_csv / recovery_csv: numbers only (they survive a round trip through a CSV file as
    numbers), in the table's unit (percent; ARI a fraction of 1), and every number is the one the
    markdown table shows, its notes as counts."""
    perfect, merged, forgy = [0, 1, 2, 3, 4] * 2, [0] * 10, {"init": "forgy"}  # FeSEM's paper start
    never, split = {"split_log": [{"round": 3, "split": False}]}, {"split_log": [{"round": 3, "split": True}]}
    recs = [record("oracle", "pathological_clusters", s, 0.98 + 0.01 * s, grouping=perfect) for s in (0, 1)]
    recs += [record("pfedlia", "pathological_clusters", s, 0.97, grouping=perfect) for s in (0, 1)]
    recs += [record("pfedlia", "noisy_clusters", 0, 0.8, grouping=merged),
             record("pfedlia", "noisy_clusters", 1, 0.0, status="failed"),
             record("fesem", "pathological_clusters", 0, 0.6, grouping=perfect, hyper=forgy,
                    info={"stay": {"window": [3, 4]}}),
             record("fesem", "pathological_clusters", 1, 0.7, grouping=merged, hyper=forgy,
                    info={"stay": {"window": [5, 5]}}),
             record("cfl", "pathological_clusters", 0, 0.5, hyper=study.CFL_PAPER, info={**never, "assignment": merged}),
             record("cfl", "noisy_clusters", 0, 0.5, hyper=study.CFL_PAPER, info={**never, "assignment": merged}),
             record("cfl", "noisy_clusters", 1, 0.6, hyper=study.CFL_PAPER, info={**split, "assignment": perfect})]
    df = study.accuracy_frame(recs)
    shown, csv = study.table1(df).set_index("Method"), study.table1_csv(df)
    assert csv.columns.tolist() == study.TABLE1_CSV_COLUMNS
    csv.to_csv(tmp_path / "t1.csv", index=False)
    back = pd.read_csv(tmp_path / "t1.csv")
    for c in ("mean", "sd", "n", "paper_mean", "paper_sd", "stays", "stays_of", "never_split", "never_split_of"):
        assert pd.api.types.is_numeric_dtype(back[c]), c
    assert len(csv) == len(shown) * 2 and set(csv.setting) == {"Pathological", "Noisy"}
    for r in csv.itertuples():
        cell = shown.loc[r.method, r.setting]
        assert cell.startswith(_shown(r.mean, r.sd, r.n) if r.status in ("ok", "not run") else r.status), (r, cell)
        paper = shown.loc[r.method, f"{r.setting} (paper)"]
        assert paper == ("—" if np.isnan(r.paper_mean) else f"{r.paper_mean:.2f} ± {r.paper_sd:.2f}")
        assert (f"(stays {r.stays}/{r.stays_of})" in cell) == (not pd.isna(r.stays))
        assert ("(CFL never split)" in cell) == (not pd.isna(r.never_split) and r.never_split == r.never_split_of > 0)
    by = csv.set_index(["method", "setting"])
    assert by.loc[("Oracle", "Pathological"), ["mean", "sd", "n"]].tolist() == pytest.approx([98.5, 0.5, 2])  # percent
    assert by.loc[("Oracle", "Pathological"), ["paper_mean", "paper_sd"]].tolist() == [99.07, 0.21]
    assert by.loc[("Oracle", "Noisy"), "status"] == "not run" and by.loc[("Oracle", "Noisy"), "n"] == 0
    assert by.loc[("pFedLIA", "Noisy"), "status"] == "failed" and np.isnan(by.loc[("pFedLIA", "Noisy"), "mean"])
    assert by.loc[("FeSEM", "Pathological"), ["stays", "stays_of"]].tolist() == [8, 9]
    flbench = "CFL (ε1 = 0.4, ε2 = 1.6, γ = 0: FL-bench's)"
    assert by.loc[(flbench, "Pathological"), ["never_split", "never_split_of"]].tolist() == [1, 1]
    assert by.loc[(flbench, "Noisy"), ["never_split", "never_split_of"]].tolist() == [1, 2]
    assert shown.loc[flbench, "Noisy"] == "55.00 ± 5.00 (n = 2) (CFL split in 1 of 2 runs)"
    assert pd.isna(by.loc[("pFedLIA", "Pathological"), ["stays", "never_split"]]).all()  # no note, no count

    rshown, rcsv = study.recovery_table(df).set_index("Method"), study.recovery_csv(df)
    assert rcsv.columns.tolist() == ["method", "setting", "quantity", "mean", "sd", "n", "status"]
    rcsv.to_csv(tmp_path / "rec.csv", index=False)
    rback = pd.read_csv(tmp_path / "rec.csv")
    assert all(pd.api.types.is_numeric_dtype(rback[c]) for c in ("mean", "sd", "n"))
    assert len(rcsv) == rshown.size  # one row per cell of the table
    for r in rcsv.itertuples():
        cell = rshown.loc[r.method, f"{r.setting} {r.quantity}"]
        assert cell == (_shown(r.mean, r.sd, r.n) if r.status in ("ok", "not run") else r.status), (r, cell)
    rby = rcsv.set_index(["method", "setting", "quantity"])
    assert rby.loc[("FeSEM", "Pathological", "ARI"), ["mean", "n"]].tolist() == pytest.approx([0.5, 2])  # a fraction of 1
    assert rby.loc[("FeSEM", "Pathological", "groups"), "mean"] == pytest.approx(3.0)  # 5 and 1 groups
    assert rby.loc[("pFedLIA", "Noisy", "ARI"), "status"] == "failed"  # never the surviving seed's number
    assert rshown.loc["pFedLIA", "Noisy ARI"] == "failed"
