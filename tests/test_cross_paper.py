"""workbook.cross_paper (notebook 11): the grid (every method on every seed paper's
partition, the Oracle only where clusters are planted), the per-run quantities, the ranking
(autorank's Friedman p and mean ranks against scipy and a hand count) and the which-method-when
summary on hand-made cases."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from fedlib import partition as P
from workbook import cross_paper as cp
from fedlib.methods import METHODS

ROOT = Path(__file__).resolve().parents[1]
FL = {"rounds": 4, "local_epochs": 1, "fraction": 0.5}
HYPER = {"pfedlia": {"warmup_rounds": 1}, "oracle": {"warmup_rounds": 1}}


def test_every_method_on_every_partition_and_the_oracle_only_where_clusters_are_planted():
    specs = cp.training_specs(list(cp.PARTITIONS), 20, [0, 1], list(METHODS), FL, hyper=HYPER, n_train=2000,
                              n_global_test=500)
    for s in specs:
        s.validate()
    by_partition = {}
    for s in specs:
        by_partition.setdefault(cp.partition_of(s.protocol, s.level), []).append((s.method, s.seed))
    assert set(by_partition) == set(cp.PARTITIONS)
    for name, runs in by_partition.items():
        planted = P.planted_clusters(cp.PARTITIONS[name].protocol, 20, cp.PARTITIONS[name].level) is not None
        expected = [m for m in METHODS if m != "oracle" or name == "pathological"]
        assert sorted(runs) == sorted((m, seed) for m in expected for seed in (0, 1)), name
        if not planted:
            assert "oracle" not in {m for m, _ in runs}, name
    assert {(s.protocol, s.level) for s in specs if s.method == "oracle"} == {("pathological_clusters", 5.0)}
    assert all(s.global_test and s.n_global_test == 500 and s.val_fraction == 0.1 for s in specs)
    # the protocols that plant groups are exactly pFedLIA's two
    planted = {n for n, p in cp.PARTITIONS.items() if P.planted_clusters(p.protocol, 20, p.level) is not None}
    assert planted == {"pathological", "noisy"}


@pytest.mark.parametrize("kwargs, match", [
    (dict(partitions=["dirichlet_0.5"]), r"partitions must be one of .*got 'dirichlet_0.5'"),
    (dict(partitions=[]), r"partitions must be a non-empty list"),
    (dict(methods=["fedsgd"]), r"methods must be one of .*got 'fedsgd'"),
    (dict(val_fraction=0.0), r"val_fraction must be"),
    (dict(arch=3), r"arch must be None \(the data set's default model\) or an architecture name"),
])
def test_bad_grid_parameters_fail_naming_them(kwargs, match):
    args = dict(partitions=["noisy"], n_clients=20, seeds=[0], methods=["fedavg"], fl=FL, val_fraction=0.1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cp.training_specs(args.pop("partitions"), args.pop("n_clients"), args.pop("seeds"), args.pop("methods"),
                          args.pop("fl"), **args)


def test_the_grid_is_built_from_the_notebooks_parameters():
    for profile in ("smoke", "paper"):
        p = yaml.safe_load((ROOT / "params" / profile / "11_cross_paper.yaml").read_text())
        specs = cp.notebook_grid(**{k: p[k] for k in cp.GRID_PARAMS})["cross"]
        assert {cp.partition_of(s.protocol, s.level) for s in specs} == set(p["partitions"]), profile
        assert {s.method for s in specs} == set(p["methods"]), profile
        for s in specs:
            s.validate()
    paper = yaml.safe_load((ROOT / "params" / "paper" / "11_cross_paper.yaml").read_text())
    assert set(paper["methods"]) == set(METHODS) and set(paper["partitions"]) == set(cp.SEED_PAPER_PARTITIONS)
    assert set(cp.SEED_PAPER_PARTITIONS) <= set(cp.PARTITIONS)
    assert paper["n_clients"] == 100 and paper["records"] == "benchmarks/records/cross_paper"
    assert paper["arch"] is None and all(s.arch is None for s in cp.notebook_grid(
        **{k: paper[k] for k in cp.GRID_PARAMS})["cross"])  # the committed records' model: FMNIST's default
    mlp = cp.training_specs(["dirichlet_0.3"], 10, [0], ["fedprism", "fedavg"], FL, dataset="adult", arch="mlp")
    assert {s.arch for s in mlp} == {"mlp"}
    for s in mlp:
        s.validate()


def test_cafa_partition_has_the_iid_share_and_one_or_two_classes_elsewhere():
    y = np.repeat(np.arange(10), 200)
    parts = P.partition(y, "iid_fraction_classes_1_2", 20, 0.25, 3)
    assert len(parts) == 20
    allidx = np.concatenate(parts)
    assert allidx.size == np.unique(allidx).size  # disjoint: trainable
    n_classes = [np.unique(y[p]).size for p in parts]
    assert n_classes[:5] == [10] * 5  # ⌊0.25·20 + ½⌋ IID clients first
    assert set(n_classes[5:]) <= {1, 2} and 1 in n_classes[5:] and 2 in n_classes[5:]


# ----------------------------------------------------------------------------- records → frames
def _record(partition, method, seed, acc, n=None, *, status="ok", grouping=None, seconds=1.0, official=0.5):
    p = cp.PARTITIONS[partition]
    acc = np.asarray(acc, float)
    n = np.full(acc.size, 10) if n is None else np.asarray(n)
    spec = {"dataset": "fmnist", "protocol": p.protocol, "level": float(p.level), "n_clients": acc.size,
            "seed": seed, "method": method}
    if status != "ok":
        return {"spec": spec, "status": status, "error": f"why {method}", "seconds": seconds}
    correct = acc * n
    return {"spec": spec, "status": "ok", "global_accuracy": float(correct.sum() / n.sum()), "ad": 0.0, "sdad": 0.0,
            "cp": 0.0, "wpsi": 0.0, "local_accuracy": acc.tolist(), "global_test_accuracy": official,
            "info": {} if grouping is None else {"cluster_of_client": list(grouping)}, "seconds": seconds,
            "cpu_seconds": 2 * seconds}


def test_runs_frame_computes_worst_clients_ad_from_cl_and_ari():
    acc = np.linspace(0.1, 1.0, 10)  # clients 0..9
    truth = P.planted_clusters("pathological_clusters", 10, 5)
    recs = [_record("pathological", "cl", 0, np.full(10, 0.8)),
            _record("pathological", "pfedlia", 0, acc, grouping=truth + 3),  # the truth relabelled
            _record("pathological", "fedavg", 0, acc, grouping=np.zeros(10, int)),
            _record("pathological", "ifca", 0, acc, grouping=np.zeros(10, int)),
            _record("dirichlet_0.3", "pfedlia", 0, acc, grouping=truth),
            _record("noisy", "fesem", 0, acc, status="failed")]
    df = cp.runs_frame(recs).set_index(["partition", "method"])
    lia = df.loc[("pathological", "pfedlia")]
    assert lia.weighted_local == pytest.approx(100 * acc.mean())
    assert lia.worst10 == pytest.approx(10.0)  # ⌈0.1·10⌉ = 1 client, the worst
    assert lia.ad_cl == pytest.approx(100 * np.abs(acc - 0.8).mean())
    assert lia.official_test == pytest.approx(50.0)
    assert lia.ari == pytest.approx(1.0)
    assert np.isnan(df.loc[("pathological", "fedavg")].ari)  # no grouping: one model
    assert df.loc[("pathological", "ifca")].ari == pytest.approx(0.0)  # one group for all
    assert np.isnan(df.loc[("dirichlet_0.3", "pfedlia")].ari)  # nothing planted
    assert np.isnan(df.loc[("dirichlet_0.3", "pfedlia")].ad_cl)  # no CL run of that partition
    assert df.loc[("noisy", "fesem")].status == "failed" and df.loc[("noisy", "fesem")].error == "why fesem"
    table = cp.cell_table(cp.runs_frame(recs), "ari").set_index("Method")
    assert table.loc["FeSEM", "noisy, 5 clusters"] == "failed"
    assert table.loc["FedAvg", "noisy, 5 clusters"] == "not run"
    assert table.loc["pFedLIA", "pathological, 5 clusters"] == "1.00 (n = 1)"
    assert table.loc["FedAvg", "pathological, 5 clusters"] == "—"
    assert list(cp.status_table(cp.runs_frame(recs)).method) == ["fesem"]
    # groups found: the grouping methods' distinct groups, planted or not; none for FedAvg
    assert df.loc[("pathological", "pfedlia")].groups == 5 and df.loc[("dirichlet_0.3", "pfedlia")].groups == 5
    assert df.loc[("pathological", "ifca")].groups == 1 and np.isnan(df.loc[("pathological", "fedavg")].groups)
    groups = cp.cell_table(cp.runs_frame(recs), "groups").set_index("Method")
    assert groups.loc["IFCA", "pathological, 5 clusters"] == "1.0 (n = 1)"
    assert groups.loc["FedAvg", "pathological, 5 clusters"] == "—"
    # CPU time is the record's cpu_seconds (every thread summed), not its wall time
    assert df.loc[("pathological", "ifca")].cpu_seconds == 2.0 and df.loc[("pathological", "ifca")].seconds == 1.0
    cpu = cp.cell_table(cp.runs_frame(recs), "cpu_seconds").set_index("Method")
    assert cpu.loc["IFCA", "pathological, 5 clusters"] == "2.0 (n = 1)"


def test_worst_share_takes_the_ceiling_of_a_tenth():
    assert cp.worst_clients_accuracy(np.arange(1, 21) / 20) == pytest.approx((0.05 + 0.10) / 2)  # 2 of 20
    assert cp.worst_clients_accuracy([0.5, np.nan, 0.9]) == pytest.approx(0.5)  # a client without a test split is not counted


def test_score_table_never_averages_over_the_surviving_seeds():
    recs = [_record("noisy", "fedavg", 0, [0.5, 0.7]), _record("noisy", "fedavg", 1, [0.5, 0.7], status="failed"),
            _record("noisy", "local", 0, [0.6, 0.6]), _record("noisy", "local", 1, [0.8, 0.8])]
    s = cp.score_table(cp.runs_frame(recs))
    assert np.isnan(s.loc["fedavg", "noisy"]) and s.loc["local", "noisy"] == pytest.approx(70.0)


# ----------------------------------------------------------------------------- ranking
def _scores():
    """Hand-made weighted local accuracies: 5 methods × 6 partitions, with a tie."""
    data = {"fedavg": [70, 60, 80, 50, 65, 72], "local": [90, 85, 40, 88, 60, 70], "cafa": [71, 61, 81, 52, 66, 70],
            "pfedlia": [95, 86, 79, 90, 64, 71], "ifca": [60, 55, 75, 45, 70, 69],
            "cl": [99, 99, 99, 99, 99, 99], "oracle": [np.nan] * 3 + [96, np.nan, np.nan]}
    parts = list(cp.PARTITIONS)[:6]
    return pd.DataFrame(data, index=parts).T


def test_ranking_is_friedman_over_partitions_with_the_mean_ranks_by_hand():
    scores = _scores()
    result, left_out = cp.ranking(scores)
    assert left_out == []  # the references (CL, the Oracle) are excluded, not left out
    assert set(result.rankdf.index) == {"fedavg", "local", "cafa", "pfedlia", "ifca"}
    ranked = scores.drop(index=["cl", "oracle"])
    assert result.pvalue == pytest.approx(stats.friedmanchisquare(*ranked.to_numpy()).pvalue)
    assert result.omnibus == "friedman" and result.posthoc == "nemenyi"
    # by hand: rank 1 = best in each partition (ties share the mean rank)
    by_hand = {"fedavg": [4, 4, 2, 4, 3, 1], "local": [2, 2, 5, 2, 5, 3.5], "cafa": [3, 3, 1, 3, 2, 3.5],
               "pfedlia": [1, 1, 3, 1, 4, 2], "ifca": [5, 5, 4, 5, 1, 5]}
    for m, ranks in by_hand.items():
        assert result.rankdf.meanrank[m] == pytest.approx(np.mean(ranks)), m
    k, n = 5, 6
    q = 2.728  # Studentized range / √2 at α = 0.05, k = 5 (Demšar 2006, Table 5a)
    assert result.cd == pytest.approx(q * np.sqrt(k * (k + 1) / (6 * n)), rel=1e-3)


def test_ranking_leaves_out_a_method_without_a_score_everywhere_and_needs_five_partitions():
    scores = _scores()
    scores.loc["ifca", scores.columns[2]] = np.nan
    result, left_out = cp.ranking(scores)
    assert left_out == ["ifca"] and "ifca" not in result.rankdf.index
    with pytest.raises(ValueError, match=r"scores must be ≥ 5 partitions"):
        cp.ranking(scores.iloc[:, :4])


def test_unrankable_says_why_while_the_records_are_coming_in():
    scores = _scores()
    assert cp.unrankable(scores) is None
    assert cp.unrankable(scores.iloc[:, :4]) == ("4 partition(s) with a score and 5 method(s) scored on all of them; "
                                                 "the ranking needs ≥ 5 partitions and ≥ 3 methods scored on all")
    half = scores.copy()
    half.iloc[:3, -1] = np.nan  # the last partition half done: three of the five ranked methods lack it
    assert cp.unrankable(half).startswith("6 partition(s) with a score and 2 method(s)")
    with pytest.raises(ValueError, match="scores must be ≥ 5 partitions"):
        cp.ranking(half)


def test_cell_table_takes_the_grids_partitions_and_ari_only_where_clusters_are_planted():
    recs = [_record("pathological", "fedavg", 0, [0.5, 0.7])]
    t = cp.cell_table(cp.runs_frame(recs), "weighted_local", ["similarity_0", "pathological"])
    assert list(t.columns) == ["Method", cp.PARTITIONS["similarity_0"].label, cp.PARTITIONS["pathological"].label]
    assert t.iloc[0, 1] == "not run" and t.iloc[0, 2] == "60.00 (n = 1)"
    assert cp.planted_partitions(["dirichlet_0.3", "similarity_0", "pathological", "noisy"], 100) == [
        "pathological", "noisy"]
    with pytest.raises(ValueError, match="partitions entries must be one of"):
        cp.cell_table(cp.runs_frame(recs), "ari", ["pathological_clusters"])


def test_complete_partitions_are_those_without_a_missing_run():
    specs = cp.training_specs(["noisy", "pathological"], 10, [0], ["fedavg", "local"], {"rounds": 1})
    assert cp.complete_partitions([]) == set(cp.PARTITIONS)
    missing = [s for s in specs if cp.partition_of(s.protocol, s.level) == "noisy"][:1]
    assert cp.complete_partitions(missing) == set(cp.PARTITIONS) - {"noisy"}


def test_which_method_when_names_the_best_and_those_within_the_critical_distance():
    rng = np.random.default_rng(0)
    k = 30
    base = rng.uniform(0.5, 0.6, k)
    a_ahead = np.arange(k) < 20  # A beats B on 20 of 30 clients: mean ranks 1.33 and 1.67
    acc = {"pfedlia": base + np.where(a_ahead, 0.02, 0.0), "fedavg": base + np.where(a_ahead, 0.0, 0.02),
           "local": base - 0.1, "ifca": base - 0.2, "cl": base + 0.3}
    recs = [_record("noisy", m, 0, a) for m, a in acc.items()]
    recs += [_record("noisy", "cafa", 0, base, status="failed")]
    recs += [_record("similarity_1", m, 0, base + 0.01 * i) for i, m in enumerate(("fedavg", "local"))]
    w = cp.which_method_when(cp.runs_frame(recs)).set_index("partition")
    noisy = w.loc["noisy"]
    assert noisy.best == "pfedlia" and noisy.not_worse == ["pfedlia", "fedavg"]
    assert noisy.left_out == ["cafa"] and noisy.n_methods == 4 and noisy.n_blocks == k  # CL is a reference
    cd = 2.569 * np.sqrt(4 * 5 / (6 * k))  # Nemenyi, k = 4 methods, N = 30 clients
    assert noisy.cd == pytest.approx(cd, rel=1e-3)
    ranks = np.array([[1, 2, 3, 4] if a else [2, 1, 3, 4] for a in a_ahead])
    assert noisy.friedman_p == pytest.approx(stats.friedmanchisquare(*ranks.T).pvalue)
    assert pd.isna(w.loc["similarity_1"].best)  # two methods: nothing to test
