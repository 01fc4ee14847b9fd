"""workbook.beyond_label (notebook 12): the grid (every variant on every partition beyond
label skew, IFCA / FedClust given the planted k), the variant of a record, the per-run quantities
(ARI against the planted groups, the small clients' accuracy) on hand-made records, the computed
answer's verdicts, and what each variant reveals to the server."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from fedlib import partition as P
from workbook import beyond_label as B
from fedlib.experiment import RunSpec

ROOT = Path(__file__).resolve().parents[1]
FL = {"rounds": 2, "local_epochs": 1, "fraction": 0.5}


def test_every_variant_on_every_partition_with_the_planted_k_for_ifca_and_fedclust():
    specs = B.training_specs(list(B.PARTITIONS), [0.1, 0.5], 20, [0, 1], list(B.VARIANTS), FL,
                             hyper={"pfedlia": {"warmup_rounds": 1}, "ifca": {"n_clusters": 9}},
                             n_train={"fmnist": 3000})
    for s in specs:
        s.validate()
    names = {B.partition_of_spec(s.to_dict()) for s in specs}
    assert names == set(B.PARTITIONS) | {"small_0.1", "small_0.5"}
    assert len(specs) == len(names) * len(B.VARIANTS) * 2
    for s in specs:
        part = B.partition_named(B.partition_of_spec(s.to_dict()))
        assert (s.dataset, s.protocol, s.level) == (part.dataset, part.protocol, part.level)
        assert s.n_train == (3000 if s.dataset == "fmnist" else None) and s.val_fraction == 0.1
        if s.method in ("ifca", "fedclust"):  # the planted number of groups, over the notebook's hyper
            assert s.hyper["n_clusters"] == P.planted_clusters(s.protocol, 20, s.level).max() + 1
    k = {B.partition_of_spec(s.to_dict()): s.hyper["n_clusters"] for s in specs if s.method == "ifca"}
    assert k == {"quantity": 3, "age": 4, "rotated": 4, "brightness": 4, "noise": 4, "joint": 4,
                 "small_0.1": 2, "small_0.5": 2}
    assert {s.hyper.get("warmup_rounds") for s in specs if s.method == "pfedlia"} == {1}
    # each record's spec maps back to its variant
    assert [B.variant_of(s.to_dict()) for s in specs[:len(B.VARIANTS) * 2:2]] == list(B.VARIANTS)


@pytest.mark.parametrize("kwargs, match", [
    (dict(partitions=["rotation"]), r"partitions must be one of .*got 'rotation'"),
    (dict(partitions=[], small_shares=[]), r"partitions must be at least one partition"),
    (dict(small_shares=[1.0]), r"small_shares must be"),
    (dict(small_shares=0.3), r"small_shares must be a list of shares"),
    (dict(variants=["psi_pixels"]), r"variants must be one of .*got 'psi_pixels'"),
    (dict(n_clients=1), r"n_clients must be"),
])
def test_bad_grid_parameters_fail_naming_them(kwargs, match):
    args = dict(partitions=["rotated"], small_shares=[0.3], n_clients=20, seeds=[0], variants=["fedavg"], fl=FL)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        B.training_specs(args.pop("partitions"), args.pop("small_shares"), args.pop("n_clients"), args.pop("seeds"),
                         args.pop("variants"), args.pop("fl"))


def test_a_run_of_no_variant_is_refused():
    with pytest.raises(ValueError, match="^spec must be a run of one of the variants"):
        B.variant_of({"method": "fedprox", "hyper": {}})
    with pytest.raises(ValueError, match="^spec must be a run of one of the variants"):  # attribute PSI + ln n_i
        B.variant_of({"method": "clust_psi_pfl", "hyper": {"features": "attribute", "size_feature": True}})


def _record(partition: str, variant: str, acc, grouping=None, seed=0, status="ok"):
    part = B.partition_named(partition)
    var = B.VARIANTS[variant]
    spec = RunSpec(part.dataset, part.protocol, float(part.level), len(acc), seed, var.method, hyper=dict(var.hyper))
    rec = {"spec": spec.to_dict(), "status": status, "seconds": 1.0, "cpu_seconds": 2.0}
    if status == "ok":
        rec.update(local_accuracy=list(acc), global_accuracy=float(np.mean(acc)),
                   info={} if grouping is None else {"assignment": list(grouping)})
    return rec


def test_cfl_row_names_its_thresholds_and_cells_say_where_it_never_split():
    k = 8
    acc = np.linspace(0.2, 0.9, k)
    never = {"split_log": [{"round": 1, "split": False}], "assignment": [0] * k}
    split = {"split_log": [{"round": 1, "split": False}, {"round": 2, "split": True}], "assignment": [0, 1] * 4}
    recs = []
    for part, info in (("rotated", never), ("noise", split)):
        r = _record(part, "cfl", acc)
        r["spec"]["hyper"] = {"split_rule": "ratio"}
        r["info"] = info
        recs.append(r)
    df = B.runs_frame(recs)
    assert list(df.never_split) == [True, False]
    label = "CFL (‖mean ΔW‖ < 0.25 · max ‖ΔW_i‖ (scale-free), γ = 0.5)"
    assert B.variant_row_label(df, "cfl") == label
    table = B.cell_table(df, "weighted_local", ["rotated", "noise"]).set_index("Variant")
    assert table.loc[label, B.PARTITIONS["rotated"].label].endswith(" (CFL never split)")
    assert "never split" not in table.loc[label, B.PARTITIONS["noise"].label]
    # the grid's scale-free CFL specs at Table II's thresholds (the records made before issue 57) and
    # at ε1 = auto (issues 57–69, defective: labelled so, not ranked)
    specs = B.training_specs(["rotated"], [], 8, [0], ["cfl", "fedavg"], {"rounds": 4},
                             hyper={"cfl": {"split_rule": "ratio"}})
    (old,) = B.table_ii_cfl_specs(specs)
    assert old.method == "cfl" and old.hyper == {} and old.key() != specs[0].key()
    (auto,) = B.superseded_cfl_specs(specs)
    assert auto.hyper == {"eps1": "auto", "auto_scale": 0.7} and auto.key() not in {old.key(), specs[0].key()}
    auto_rec = _record("rotated", "cfl", acc)
    auto_rec["spec"]["hyper"] = auto.hyper
    assert B.runs_frame([auto_rec]).thresholds.iloc[0] == \
        "ε1 = auto (defective, superseded; 0.7 × warm-up update), ε2 = 0.1, γ = 0.5"
    assert B.table_ii_cfl_specs([auto]) == [old]  # an ε1 = auto grid (before issue 69) reads the same old records


def test_runs_frame_scores_groupings_against_the_planted_groups_and_the_small_clients():
    k = 8
    truth = P.planted_clusters("rotated_groups", k, 4)  # i mod 4
    acc = np.linspace(0.2, 0.9, k)
    small_truth = P.planted_clusters("small_clients", 10, 0.3)
    recs = [_record("rotated", "psi_joint", acc, truth),             # recovered exactly
            _record("rotated", "psi_label", acc, np.zeros(k, int)),  # one group: chance
            _record("rotated", "fedavg", acc),                       # no grouping: no ARI
            _record("small_0.3", "psi_size", np.where(small_truth == 1, 0.25, 0.75), small_truth),
            _record("rotated", "cfl", acc, status="failed")]
    df = B.runs_frame(recs)
    assert list(df.variant) == ["psi_joint", "psi_label", "fedavg", "psi_size", "cfl"]
    assert df.ari.iloc[0] == pytest.approx(1.0) and df.groups.iloc[0] == 4
    assert df.ari.iloc[1] == pytest.approx(0.0) and df.groups.iloc[1] == 1
    assert np.isnan(df.ari.iloc[2]) and np.isnan(df.small.iloc[0])
    assert df.small.iloc[3] == pytest.approx(25.0) and small_truth.sum() == 3  # the 3 planted small clients' mean
    assert df.worst10.iloc[0] == pytest.approx(20.0)  # ⌈0.1·8⌉ = 1 worst client
    assert df.status.iloc[4] == "failed" and np.isnan(df.weighted_local.iloc[4])
    table = B.cell_table(df, "ari", ["rotated"])
    cells = dict(zip(table.Variant, table[B.PARTITIONS["rotated"].label]))
    # a CFL spec without eps1 ran Table II's 1e-5: its row says so
    assert cells[B.VARIANTS["fedavg"].label] == "—" and cells["CFL (ε1 = 1e-05, ε2 = 0.1, γ = 0.5)"] == "failed"
    # the cost is the record's CPU time (cpu_seconds, every thread summed), not its wall time (seconds)
    assert df.cpu_seconds.iloc[0] == 2.0 and df.seconds.iloc[0] == 1.0
    cost = B.cell_table(df, "cpu_seconds", ["rotated"])
    assert dict(zip(cost.Variant, cost[B.PARTITIONS["rotated"].label]))[B.VARIANTS["psi_joint"].label].startswith("2.0")


def test_answer_verdicts_follow_the_ari_thresholds_and_pick_the_best_extension():
    k = 8
    truth = P.planted_clusters("rotated_groups", k, 4)
    half = truth % 2  # two of the four groups merged pairwise: ARI between chance and recovered
    acc = np.full(k, 0.5)
    recs = [_record("rotated", "psi_label", acc, np.zeros(k, int)),
            _record("rotated", "psi_attribute", acc, half), _record("rotated", "psi_joint", acc, truth),
            _record("quantity", "psi_label", acc[:6], P.planted_clusters("quantity_skew", 6, 0.5)),
            _record("quantity", "psi_size", acc[:6], np.zeros(6, int))]
    ans = B.answer(B.runs_frame(recs), {"rotated": {"mean_label_psi": 0.0}})
    rot = ans.set_index("partition").loc["rotated"]
    assert rot.label_only == "cannot separate" and rot.best_extension == "psi_joint" and rot.extension == "recovers"
    assert rot.extensions_run == 2
    assert rot.mean_label_psi == 0.0
    qty = ans.set_index("partition").loc["quantity"]
    assert qty.label_only == "recovers" and qty.extension == "cannot separate" and np.isnan(qty.mean_label_psi)
    from fedlib.evaluation import cluster_recovery
    assert B.CHANCE < cluster_recovery(half, truth) < B.RECOVERED


def test_reveals_table_counts_what_each_histogram_sends():
    t = B.reveals_table({"fmnist": (10, 6), "adult": (2, 14)}, 10).set_index("variant")
    label = t.loc[B.VARIANTS["psi_label"].label]
    assert label["values per client"] == "fmnist: 10, adult: 2" and label["ε-DP option"] == "Laplace(1/ε) per count"
    assert t.loc[B.VARIANTS["psi_attribute"].label, "values per client"] == "fmnist: 6·10 = 60, adult: 14·10 = 140"
    assert t.loc[B.VARIANTS["psi_joint"].label, "values per client"] == "fmnist: 6·10·10 = 600, adult: 14·2·10 = 280"
    assert "clustering feature" in t.loc[B.VARIANTS["psi_size"].label, "client size n_i"]
    assert "weight" in t.loc[B.VARIANTS["psi_downweight"].label, "client size n_i"]
    assert t.loc[B.VARIANTS["fedavg"].label, "values per client"] == "—"
    with pytest.raises(ValueError, match="^n_bins must be"):
        B.reveals_table({"fmnist": (10, 6)}, 1)


def test_label_spread_is_zero_for_identical_label_histograms_and_positive_under_label_skew():
    rot = B.label_spread(RunSpec("fmnist", "rotated_groups", 4.0, 8, 0, "fedavg", n_train=800))
    joint = B.label_spread(RunSpec("fmnist", "joint_label_rotation", 2.0, 8, 0, "fedavg", n_train=800))
    assert rot["max_label_psi"] < 0.05  # each class split evenly among the clients: the splits' rounding only
    assert joint["mean_label_psi"] > 1.0  # disjoint label sets


def test_the_grid_is_built_from_the_notebooks_parameters():
    for profile in ("smoke", "paper"):
        p = yaml.safe_load((ROOT / "params" / profile / "12_beyond_label_skew.yaml").read_text())
        specs = B.notebook_grid(**{k: p[k] for k in B.GRID_PARAMS})["study"]
        assert {B.partition_of_spec(s.to_dict()) for s in specs} == (
            set(p["partitions"]) | {B.small_name(x) for x in p["small_shares"]}), profile
        assert {B.variant_of(s.to_dict()) for s in specs} == set(p["variants"]) == set(B.VARIANTS), profile
        for s in specs:
            s.validate()
    paper = yaml.safe_load((ROOT / "params" / "paper" / "12_beyond_label_skew.yaml").read_text())
    assert paper["n_clients"] == 100 and paper["records"] == "benchmarks/records/beyond_label"
    assert set(paper["partitions"]) == set(B.PARTITIONS)


def test_small_curve_and_gap_average_over_the_shares_against_fedavg():
    small = P.planted_clusters("small_clients", 10, 0.3)  # clients 0–2 small
    recs = []
    for share, (found, fedavg) in {0.3: (0.2, 0.6), 0.5: (0.3, 0.5)}.items():
        truth = P.planted_clusters("small_clients", 10, share)
        recs.append(_record(B.small_name(share), "psi_label", np.where(truth == 1, found, 0.8), truth))
        recs.append(_record(B.small_name(share), "fedavg", np.where(truth == 1, fedavg, 0.8)))
    assert small.sum() == 3
    curve = B.small_curve(B.runs_frame(recs))
    assert list(curve.share) == [0.3, 0.5, 0.3, 0.5] and set(curve.variant) == {"psi_label", "fedavg"}
    gap = B.small_gap(curve).set_index("variant")
    assert gap.loc["psi_label", "small_minus_reference"] == pytest.approx(((20 - 60) + (30 - 50)) / 2)
    assert gap.loc["psi_label", "ari"] == pytest.approx(1.0) and gap.loc["fedavg", "small_minus_reference"] == 0
    assert B.small_gap(curve[curve.variant == "psi_label"]).empty  # no FedAvg: no reference
