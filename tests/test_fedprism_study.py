"""Notebook 09's layer (workbook.fedprism_study) on hand-made records, and the official
test-set subset (RunSpec.n_global_test) its smoke profile uses."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedlib import partition as P
from workbook import fedprism_study as S
from fedlib.experiment import RunSpec, build_federation

FL = {"rounds": 100, "local_epochs": 10, "fraction": 0.1}


def test_local_only_trains_what_a_fedprism_client_trains_on_average():
    assert S.local_epochs_total(FL) == 100  # R·C·E of the paper's protocol
    assert S.local_epochs_total({"rounds": 3, "fraction": 0.1, "local_epochs": 1}) == 1  # at least one


def test_training_specs_follow_fedprism_protocol():
    specs = S.training_specs([0.1, 0.5], 100, [0, 1], FL, hyper={"fedprism": {"tau": 0.2}}, n_global_test=500)
    assert len(specs) == 2 * 2 * len(S.METHODS)
    assert {s.arch for s in specs} == {"lenet5"} and all(s.global_test and s.n_global_test == 500 for s in specs)
    local = [s for s in specs if s.method == "local"]
    assert all(s.hyper == {"epochs": 100} for s in local)
    assert all(s.hyper == {"tau": 0.2} for s in specs if s.method == "fedprism")
    assert {s.protocol for s in specs} == {"dirichlet_client"}  # §4.2's partition by default
    for s in specs:
        s.validate()
    old = S.training_specs([0.1], 100, [0], FL, methods=["fedavg", "cfl"], cfl_variants=[{"eps1": "auto"}],
                           partition="dirichlet")
    assert [s.protocol for s in old] == ["dirichlet"] * 3  # the NIID-Bench split stays selectable
    with pytest.raises(ValueError, match=r"partition must be one of .*got 'similarity'"):
        S.training_specs([0.1], 100, [0], FL, partition="similarity")


def test_ablation_specs_and_their_labels():
    specs = S.ablation_specs(0.1, 20, [0], FL, components=["global", "private"], global_weights=[0.1, 0.5],
                             hyper={"fedprism": {"warmup": 2}})
    labels = [S.variant_of(s.to_dict()) for s in specs]
    assert labels == ["global", "private", "alpha=0.1", "alpha=0.5"]
    assert all(s.hyper["warmup"] == 2 and s.level == 0.1 for s in specs)
    assert {s.protocol for s in specs} == {"dirichlet_client"}
    other = S.ablation_specs(0.1, 20, [0], FL, components=["global"], global_weights=[], partition="dirichlet")
    assert [s.protocol for s in other] == ["dirichlet"]
    assert S.variant_of({"hyper": {}}) == "full" and S.variant_of({"hyper": {"alpha": 0.9}}) == "full"


def record(method, level, local, glob, *, hyper=None, status="ok", sweep=None, g_model=None):
    """A run record with the fields accuracy_frame reads; ``local`` per-client accuracies."""
    r = {"spec": {"method": method, "level": level, "n_clients": len(local), "seed": 0, "hyper": hyper or {}},
         "status": status, "seconds": 1.0}
    if status == "ok":
        n = [10] * len(local)
        r.update(local_accuracy=list(local), global_test_accuracy=glob, n_test=n,
                 info={**({"expert_weight_sweep": sweep} if sweep else {}),
                       **({"global_model_accuracy": g_model} if g_model is not None else {})})
    return r


@pytest.fixture
def frame():
    recs = [record("fedprism", 0.1, [0.9, 1.0], 0.5, sweep={"0": [2, 4], "1": [10, 9]}, g_model=0.6),
            record("fedavg", 0.1, [0.6, 0.8], 0.8),
            record("local", 0.1, [1.0, 0.9], 0.2),
            record("ifca", 0.1, [0.5, 0.5], 0.4, status="failed"),
            record("fedprism", 0.1, [0.5, 0.7], 0.3, hyper={"components": "private"}),
            record("fedprism", 0.1, [0.8, 0.8], 0.35, hyper={"alpha": 0.5})]
    return S.accuracy_frame(recs)


def test_accuracy_frame_in_percent(frame):
    fp = frame[(frame.method == "fedprism") & (frame.variant == "full")].iloc[0]
    assert fp.local == pytest.approx(95.0) and fp["global"] == pytest.approx(50.0)
    assert fp.global_model == pytest.approx(60.0)
    assert fp.sweep == {0.0: pytest.approx(30.0), 1.0: pytest.approx(95.0)}  # mean of 2/10, 4/10; 10/10, 9/10
    assert frame[frame.method == "ifca"].status.item() == "failed"


def test_main_table_puts_the_paper_beside_ours_and_shows_failures(frame):
    t = S.main_table(frame, ["fedprism", "fedavg", "ifca"]).set_index("Method")
    assert t.loc["FedPrism", "α=0.1 Loc"] == "95.00 (n = 1)"
    assert t.loc["FedPrism", "α=0.1 Loc (paper)"] == "95.66"
    assert t.loc["FedAvg", "α=0.1 Glob"] == "80.00 (n = 1)" and t.loc["FedAvg", "α=0.1 Glob (paper)"] == "84.35"
    assert t.loc["IFCA", "α=0.1 Loc"] == "failed"


def test_main_numbers_are_the_tables_numbers_for_its_csv(frame):
    """The CSV of Tables 1/6/7: numbers only (mean, sd, n, paper in percent), never "95.00 (n = 1)"."""
    n = S.main_numbers(frame, ["fedprism", "fedavg", "ifca"]).set_index(["method", "alpha", "column"])
    assert n.loc[("FedPrism", 0.1, "Loc"), "mean"] == pytest.approx(95.0)
    assert n.loc[("FedPrism", 0.1, "Loc"), "paper"] == pytest.approx(95.66)
    assert n.loc[("FedPrism", 0.1, "Loc"), "n"] == 1 and n.loc[("FedPrism", 0.1, "Loc"), "sd"] == 0.0
    assert n.loc[("FedAvg", 0.1, "Glob"), "mean"] == pytest.approx(80.0)
    assert n.loc[("FedAvg", 0.1, "Glob"), "paper"] == pytest.approx(84.35)
    ifca = n.loc[("IFCA", 0.1, "Loc")]
    assert ifca.status == "failed" and np.isnan(ifca["mean"]) and ifca.n == 0
    for c in ("mean", "sd", "n", "paper", "alpha"):
        assert pd.api.types.is_numeric_dtype(n.reset_index()[c])


def test_cfl_rows_name_their_thresholds_and_only_the_papers_gets_the_paper_value():
    specs = S.training_specs([0.1], 20, [0], FL, methods=["fedavg", "cfl"], hyper={"cfl": S.CFL_PAPER},
                             cfl_variants=[{"eps1": "auto"}])
    cfl_specs = [s for s in specs if s.method == "cfl"]
    assert [s.hyper for s in cfl_specs] == [S.CFL_PAPER, {**S.CFL_PAPER, "eps1": "auto"}]
    assert [S.method_label(s.to_dict()) for s in cfl_specs] == [
        "cfl", "cfl (ε1 = auto (defective, superseded; 0.5 × warm-up update), ε2 = 0.1, γ = 0.5)"]
    assert S.method_label({"method": "cfl", "hyper": {}}) == "cfl"  # Table II is the default: old records
    assert len(S.training_specs([0.1], 20, [0], FL, methods=["fedavg"], cfl_variants=[{"eps1": "auto"}])) == 1
    with pytest.raises(ValueError, match="cfl_variants"):
        S.training_specs([0.1], 20, [0], FL, methods=["cfl"], cfl_variants=["auto"])
    recs = [record("cfl", 0.1, [0.4, 0.5], 0.1), record("cfl", 0.1, [0.9, 0.7], 0.3, hyper={"eps1": "auto"}),
            record("fedavg", 0.1, [0.6, 0.8], 0.8)]
    t = S.main_table(S.accuracy_frame(recs), ["fedavg", "cfl"]).set_index("Method")
    table_ii = "CFL (FedCFL; ε1 = 1e-05, ε2 = 0.1, γ = 0.5: Clust-PSI-PFL's Table II; FedPrism states none)"
    auto = "CFL (ε1 = auto (defective, superseded; 0.5 × warm-up update), ε2 = 0.1, γ = 0.5)"
    assert t.index.tolist() == ["FedAvg", table_ii, auto]
    assert t.loc[table_ii, "α=0.1 Loc"] == "45.00 (n = 1)" and t.loc[table_ii, "α=0.1 Loc (paper)"] == "44.86"
    assert t.loc[auto, "α=0.1 Loc"] == "80.00 (n = 1)" and t.loc[auto, "α=0.1 Loc (paper)"] == "—"
    # with the split log of the records: the Table II row never split, the calibrated one did
    recs[0]["info"] = {"split_log": [{"round": 1, "split": False}, {"round": 2, "split": False}]}
    recs[1]["info"] = {"split_log": [{"round": 1, "split": False}, {"round": 2, "split": True}]}
    t = S.main_table(S.accuracy_frame(recs), ["fedavg", "cfl"]).set_index("Method")
    assert t.loc[table_ii, "α=0.1 Loc"] == "45.00 (n = 1) (CFL never split)"
    assert t.loc[table_ii, "α=0.1 Glob"].endswith("(CFL never split)")
    assert t.loc[auto, "α=0.1 Loc"] == "80.00 (n = 1)" and t.loc["FedAvg", "α=0.1 Loc"] == "70.00 (n = 1)"


def test_ablation_and_sweep_tables(frame):
    t9 = S.ablation_table(frame, 0.1, 9).set_index("Configuration")
    assert t9.loc["Pure Private", "Loc"] == "60.00 (n = 1)" and t9.loc["Pure Private", "Loc (paper)"] == 95.15
    assert t9.loc["Pure Global", "Loc"] == "—"  # not run
    t11 = S.ablation_table(frame, 0.1, 11).set_index("α")
    assert t11.loc[0.5, "Glob"] == "35.00 (n = 1)" and t11.loc[0.9, "Glob"] == "50.00 (n = 1)"
    t10 = S.weight_sweep_table(frame, 0.1).set_index("Local expert weight")
    assert t10.loc[0.0, "Loc"] == "30.00 (n = 1)" and t10.loc[0.2, "Loc"] == "—"
    assert t10.loc[1.0, "Glob"] == "50.00 (n = 1)"  # the backbone's, whatever the weight
    with pytest.raises(ValueError, match="table must be 9 or 11"):
        S.ablation_table(frame, 0.1, 10)


def test_observations_are_computed_from_the_frame(frame):
    lines = S.observations(frame)
    assert "FedPrism local 95.00 vs FedAvg 70.00 — ahead: True (paper: 95.66 vs 85.01, ahead: True)" in lines[0]
    assert "≥ Local-only's (95.00 vs 95.00): True" in lines[1]
    assert "within 5 points of FedAvg's (50.00 vs 80.00): False (paper: True)" in lines[2]
    assert lines[3].endswith("best local accuracy: FedPrism (paper: FedPrism)")


def test_partition_preview_is_the_runs_partition():
    y = np.repeat(np.arange(4), 50)
    preview = S.partition_preview(y, 10, 0.5, 3, n_show=4)
    parts = P.partition(y, "dirichlet_client", 10, 0.5, 3)  # the paper's §4.2 rule, the default
    assert preview.to_numpy().tolist() == P.label_counts(y, parts[:4], 4).tolist()
    assert (preview.sum(axis=1) == 20).all()  # equal client sizes N // K
    other = S.partition_preview(y, 10, 0.5, 3, n_show=4, partition="dirichlet")
    assert other.to_numpy().tolist() == P.label_counts(y, P.partition(y, "dirichlet", 10, 0.5, 3)[:4], 4).tolist()
    with pytest.raises(ValueError, match="n_show must be"):
        S.partition_preview(y, 10, 0.5, 3, n_show=11)
    with pytest.raises(ValueError, match=r"partition must be one of \['dirichlet', 'dirichlet_client'\], got 'shards'"):
        S.partition_preview(y, 10, 0.5, 3, n_show=4, partition="shards")


def test_n_global_test_subsets_the_official_test_set_stratified():
    with pytest.raises(ValueError, match=r"n_global_test must be None unless global_test=True"):
        RunSpec("fmnist", "dirichlet", 0.5, 4, 0, "fedavg", n_global_test=100).validate()
    spec = RunSpec("fmnist", "dirichlet", 0.5, 4, 0, "fedavg", n_train=400, global_test=True, n_global_test=500)
    fed, _, _ = build_federation(spec, "cpu")
    assert len(fed.y_global) == 500
    assert np.bincount(fed.y_global.numpy(), minlength=10).tolist() == [50] * 10  # FMNIST's test set is balanced
    full, _, _ = build_federation(RunSpec("fmnist", "dirichlet", 0.5, 4, 0, "fedavg", n_train=400, global_test=True),
                                  "cpu")
    assert len(full.y_global) == 10000
    assert np.array_equal(fed.n_train, full.n_train)  # the training federation does not change
    assert "n_global_test" not in RunSpec("fmnist", "dirichlet", 0.5, 4, 0, "fedavg").to_dict()  # old keys stay


def test_table_markdown_renders_missing_paper_values_as_a_dash(frame):
    md = S.table_markdown(S.ablation_table(frame, 0.1, 9))
    assert md.splitlines()[2] == "| Full FedPrism | 50.00 (n = 1) | — | 95.00 (n = 1) | — |"
    assert "| Pure Private | 30.00 (n = 1) | 19.98 | 60.00 (n = 1) | 95.15 |" in md


def test_the_papers_other_columns_are_selectable(frame):
    t = S.main_table(frame, ["fedavg"], dataset="cifar100").set_index("Method")
    assert t.loc["FedAvg", "α=0.1 Glob (paper)"] == "13.46" and t.loc["FedAvg", "α=0.1 Loc (paper)"] == "13.48"
    assert S.PAPER_MAIN["svhn"][0.3]["cfl"] == (19.58, 39.01)  # Table 6, FedCFL on SVHN
    with pytest.raises(ValueError, match=r"dataset must be one of the paper's data sets .* got 'mnist'"):
        S.main_table(frame, dataset="mnist")


def test_clip_variants_fedamp_rows_and_the_parameter_average_column():
    specs = S.ablation_specs(0.1, 20, [0], FL, components=[], global_weights=[], alpha_clips=["paper"])
    assert [S.variant_of(s.to_dict()) for s in specs] == ["clip=paper"] and specs[0].hyper == {"alpha_clip": "paper"}
    amp = S.training_specs([0.1], 20, [0], FL, methods=["fedamp"], fedamp_variants=[{"attention": "paper"}])
    assert [s.hyper.get("attention") for s in amp] == [None, "paper"]
    assert S.method_label(amp[1].to_dict()).startswith("fedamp (Huang et al.")
    with pytest.raises(ValueError, match="fedamp_variants"):
        S.training_specs([0.1], 20, [0], FL, methods=["fedamp"], fedamp_variants=["paper"])
    recs = [record("fedamp", 0.1, [0.9, 0.7], 0.3), record("fedamp", 0.1, [0.5, 0.7], 0.2, hyper={"attention": "paper"}),
            record("fedprism", 0.1, [0.9, 0.9], 0.8), record("fedprism", 0.1, [0.7, 0.9], 0.6,
                                                             hyper={"alpha_clip": "paper"})]
    recs[0]["param_average_accuracy"] = 0.625
    df = S.accuracy_frame(recs)
    t = S.main_table(df, ["fedamp"]).set_index("Method")
    # a record without ``attention`` ran the workbook's softmax (its default until issue 57): its own row
    soft = "FedAMP (the workbook's softmax over −‖wᵢ − wⱼ‖²/σ, not the paper's)"
    assert t.index.tolist() == ["FedAMP", "FedAMP (Huang et al.'s attention A′(x) = e^(−x/σ)/σ)", soft]
    assert t.loc[soft, "α=0.1 Glob, param. avg"] == "62.50 (n = 1)"
    assert t.iloc[1]["α=0.1 Glob, param. avg"] == "—"  # a record without the field: not invented
    assert S.method_label(amp[0].to_dict()) == "fedamp"  # a new spec states the default, HeurFedAMP
    # HeurFedAMP's σ readings (issue 69): a record before it (no ``sigma``) ran σ = 1, FLGo's is named
    old_heur = {"method": "fedamp", "hyper": {"attention": "heurfedamp"}}
    assert S.method_label(old_heur) == "fedamp (σ = 1 (near-uniform attention))"
    assert S.method_label({"method": "fedamp", "hyper": {"attention": "heurfedamp", "sigma": 25.0,
                                                         "self_weight": "1/N"}}) == "fedamp (σ = 25, ξ = 1/N (FLGo))"
    t9 = S.ablation_table(df, 0.1, 9).set_index("Configuration")
    assert t9.loc["Full FedPrism, α clipped by [0, 1] (Alg. 2, line 30)", "Loc"] == "80.00 (n = 1)"


def test_alpha_gamma_table_summarises_the_trace_by_clip_and_round():
    def fp(clip, seed, trace):
        hyper = {} if clip == "simplex" else {"alpha_clip": clip}
        return {"spec": {"method": "fedprism", "seed": seed, "hyper": hyper}, "status": "ok",
                "info": {"alpha_trace": trace}}

    def t(rnd, a, g, cap):
        return {"round": rnd, "alpha_mean": a, "alpha_min": a, "alpha_max": a, "gamma_mean": g, "gamma_min": g,
                "gamma_max": g, "at_cap": cap}

    recs = [fp("simplex", 0, [t(1, 0.9, 0.0, 1.0), t(2, 0.9, 0.0, 1.0), t(3, 0.8, 0.1, 0.5)]),
            fp("simplex", 1, [t(2, 0.7, 0.2, 0.0), t(3, 0.7, 0.2, 0.0)]),
            fp("paper", 0, [t(2, 0.95, -0.05, 0.0), t(3, 0.96, -0.06, 0.0)]),
            {"spec": {"method": "fedavg", "seed": 0, "hyper": {}}, "status": "ok", "info": {}}]
    out = S.alpha_gamma_table(recs, every=2)
    assert out["round"].tolist() == [2, 3, 2, 3]  # every 2 rounds and the last; paper's clip sorts first
    simplex = out[out["α clip"].str.startswith("[0, 1 − β]")].set_index("round")
    assert simplex.loc[2, "α mean"] == pytest.approx(0.8) and simplex.loc[2, "seeds"] == 2
    assert simplex.loc[3, "share at cap"] == pytest.approx(0.25) and simplex.loc[3, "γ min"] == pytest.approx(0.1)
    paper = out[out["α clip"].str.startswith("[0, 1] ")].set_index("round")
    assert paper.loc[3, "γ min"] == pytest.approx(-0.06) and paper.loc[3, "α max"] == pytest.approx(0.96)
    with pytest.raises(ValueError, match="every"):
        S.alpha_gamma_table(recs, every=0)


def test_private_part_lines_compare_full_and_no_p_at_the_ablation_alpha_only():
    recs = [record("fedprism", 0.1, [0.9, 0.9], 0.8), record("fedprism", 0.5, [0.1, 0.1], 0.1),
            record("fedprism", 0.1, [0.7, 0.9], 0.6, hyper={"components": "global_cluster"})]
    for r in recs:
        r["info"]["alpha_trace"] = [{"round": 1, "alpha_mean": 0.9, "alpha_min": 0.9, "alpha_max": 0.9,
                                     "gamma_mean": 0.0, "gamma_min": 0.0, "gamma_max": 0.0, "at_cap": 1.0}]
    lines = S.private_part_lines(recs)
    assert lines[-1] == ("α_Dir = 0.1: full FedPrism vs without P (global + cluster): Loc 90.00 (n = 1) vs "
                         "80.00 (n = 1), Glob 80.00 (n = 1) vs 60.00 (n = 1)")  # α_Dir = 0.5's full run left out
    assert lines[0].startswith("α clipped to [0, 1 − β]") and "averages at most 0.0000" in lines[0]
    assert "0.0000 in the last" in lines[0]
    # under Alg. 2's own clip: the last round's mean γ, and the run beside the one without P
    clip = record("fedprism", 0.1, [0.95, 0.95], 0.7, hyper={"alpha_clip": "paper"})
    clip["info"]["alpha_trace"] = [{"round": r, "alpha_mean": a, "alpha_min": a, "alpha_max": a, "gamma_mean": 0.9 - a,
                                    "gamma_min": 0.9 - a, "gamma_max": 0.9 - a, "at_cap": 0.0}
                                   for r, a in ((1, 0.9), (2, 0.93))]
    lines = S.private_part_lines(recs + [clip])
    assert lines[0].startswith("α clipped to [0, 1] (Alg. 2") and "-0.0300 in the last" in lines[0]
    assert lines[-1] == ("α_Dir = 0.1: full FedPrism, α clipped to [0, 1] (Alg. 2, line 30), vs without P (global + "
                         "cluster): Loc 95.00 (n = 1) vs 80.00 (n = 1), Glob 70.00 (n = 1) vs 60.00 (n = 1)")


def test_total_variation_by_hand():
    from workbook import fedprism_study as st
    tv = st.total_variation([[1.0, 0.0], [0.2, 0.8]], [[0.5, 0.5], [0.2, 0.8]])
    assert tv.tolist() == pytest.approx([0.5, 0.0])
    with pytest.raises(ValueError, match="p, q"):
        st.total_variation([[1.0, 0.0]], [[1.0, 0.0, 0.0]])


def test_mix_drift_of_one_client_is_its_mix_against_the_pool():
    """K = 1: the client takes every sample, so its realised mix is the pool's class shares, and its
    total variation is ½ Σ |p − shares| for the p it drew."""
    from fedlib import partition as P
    from workbook import fedprism_study as st
    y = np.repeat(np.arange(3), [10, 30, 60])
    d = st.mix_drift(y, 1, [0.5], [4])
    mix, _ = P.dirichlet_client_mixes(y, 1, 0.5, 4)
    expect = 0.5 * np.abs(mix[0] - [0.1, 0.3, 0.6]).sum()
    assert d["n"].tolist() == [100] and d["median"].iloc[0] == pytest.approx(expect) == d["max"].iloc[0]
    (line,) = st.mix_drift_lines(d)
    assert line.startswith("α = 0.5 (K = 1, n = 100 per client, 1 seed): ")
