"""workbook.beyond_label_seeds (issue 58): the t-interval and the verdict that reads it
against the cut-offs, the clustering-only ARI against a trained run's grouping, and the small
clients' pooled accuracy — by hand on tiny cases."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedlib import partition as P
from workbook import beyond_label as B, beyond_label_seeds as S
from fedlib.experiment import RunSpec


def test_t_interval_by_hand():
    # values 1, 2, 3: mean 2, s = 1, n = 3 → half-width t_{0.975, 2} / √3 = 4.3027 / 1.7321
    m, lo, hi, n = S.t_interval([1.0, 2.0, 3.0, np.nan])
    assert (m, n) == (2.0, 3)
    assert hi - m == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5) and m - lo == pytest.approx(hi - m)
    assert S.t_interval([0.9]) [0] == 0.9 and np.isnan(S.t_interval([0.9])[1])
    assert S.t_interval([1.0, 1.0, 1.0])[1:3] == (1.0, 1.0)  # no spread: zero width
    with pytest.raises(ValueError, match="confidence"):
        S.t_interval([1, 2], confidence=1.5)


def test_interval_verdict_reads_the_whole_interval():
    assert S.interval_verdict(0.92, 0.99) == "recovers"
    assert S.interval_verdict(0.85, 0.95) == "undecided (interval crosses 0.9)"
    assert S.interval_verdict(0.3, 0.6) == "partly"
    assert S.interval_verdict(-0.01, 0.05) == "cannot separate"
    assert S.interval_verdict(0.05, 0.3) == "undecided (interval crosses 0.1)"
    assert S.interval_verdict(np.nan, np.nan) == "one run: no verdict"
    # one value at 0.933 is no verdict; an interval 0.80–1.06 around it crosses the cut-off
    rows = pd.DataFrame({"partition": "age", "variant": "v", "seed": [0, 1, 2], "ari": [0.933, 0.80, 0.99]})
    t = S.ari_over_seeds(rows)
    assert t.n.iloc[0] == 3 and t.verdict.iloc[0] == "undecided (interval crosses 0.9)"
    assert t["mean"].iloc[0] == pytest.approx(np.mean([0.933, 0.80, 0.99]))
    assert S.ari_over_seeds(rows.head(1)).verdict.iloc[0] == "one run: no verdict"


def test_pooled_small_accuracy_and_bootstrap():
    correct, n_test = [1, 0, 3, 40], [1, 2, 4, 50]
    small = [True, True, True, False]
    # Σ correct / Σ n over the small ones: (1 + 0 + 3) / (1 + 2 + 4) = 4/7 — not the mean of
    # 1, 0, 0.75 (= 0.583)
    assert S.pooled_small_accuracy(correct, n_test, small) == pytest.approx(4 / 7)
    assert np.isnan(S.pooled_small_accuracy([0], [0], [True]))
    lo, hi = S.bootstrap_pooled([1, 0, 3], [1, 2, 4], n_boot=500, seed=1)
    assert 0 <= lo <= 4 / 7 <= hi <= 1
    assert S.bootstrap_pooled([2, 2], [2, 2], n_boot=50) == (1.0, 1.0)  # every client perfect
    assert S.bootstrap_pooled([2, 2], [2, 2], n_boot=50, seed=3) == S.bootstrap_pooled([2, 2], [2, 2], n_boot=50,
                                                                                         seed=3)
    with pytest.raises(ValueError, match="correct, n_test, small"):
        S.pooled_small_accuracy([1], [1, 2], [True])


def test_small_pooled_frame_from_a_record():
    K, share = 10, 0.3
    small = P.planted_clusters("small_clients", K, share) == 1
    n_test = np.where(small, 2, 20)
    correct = np.where(small, [1] * K, 15)
    acc = correct / n_test
    rec = {"spec": {"protocol": "small_clients", "level": share, "n_clients": K, "seed": 0, "method": "fedavg",
                    "hyper": {}},
           "status": "ok", "correct": correct.tolist(), "n_test": n_test.tolist(), "local_accuracy": acc.tolist()}
    f = S.small_pooled_frame([rec], B.variant_of, n_boot=100)
    row = f.iloc[0]
    assert row.variant == "fedavg" and row.small_clients == small.sum() and row.small_test_samples == 2 * small.sum()
    assert row.small_pooled == pytest.approx(50.0) and row.small_mean == pytest.approx(50.0)
    assert row.per_client_test == "2–2" and row.pooled_low == row.pooled_high == pytest.approx(50.0)


def test_collapsed_rows_counts_one_group_runs():
    df = pd.DataFrame({"variant": ["ifca", "ifca", "ifca", "cfl"], "partition": ["a", "b", "c", "a"],
                       "status": ["ok", "ok", "failed", "ok"], "groups": [1, 4, np.nan, 2]})
    t = S.collapsed_rows(df, ["ifca", "cfl", "fedclust"])
    assert t.to_dict("records") == [{"variant": "ifca", "collapsed": 1, "runs": 2, "partitions": "a"},
                                    {"variant": "cfl", "collapsed": 0, "runs": 1, "partitions": ""}]


def test_clustering_ari_equals_the_grouping_a_training_run_uses():
    """The clustering-only grouping is the one Clust-PSI-PFL's run() trains with: compare with the
    method's own cluster_clients on the same federation, and the ARI against the planted groups."""
    from fedlib.experiment import build_federation
    from fedlib.evaluation import cluster_recovery
    from fedlib.methods.clust_psi_pfl import Hyper, attribute_histograms, cluster_clients

    spec = RunSpec("fmnist", "rotated_groups", 4, 8, 3, "clust_psi_pfl", n_train=800,
                   hyper={"features": "attribute", "standardize": False})
    label = RunSpec("fmnist", "rotated_groups", 4, 8, 3, "clust_psi_pfl", n_train=800)
    got = S.clustering_aris([spec, label])
    fed, counts, _ = build_federation(spec, "cpu")
    hp = Hyper(features="attribute", standardize=False)
    hist = attribute_histograms(fed.x.numpy(), fed.y.numpy(), fed.train_parts, "attribute", hp.n_bins, fed.n_classes)
    labels, info = cluster_clients(counts, hp, hist)
    truth = P.planted_clusters("rotated_groups", 8, 4)
    assert got[0]["ari"] == pytest.approx(cluster_recovery(labels, truth)) and got[0]["tau"] == info["tau"]
    labels2, _ = cluster_clients(counts, Hyper(), None)
    assert got[1]["ari"] == pytest.approx(cluster_recovery(labels2, truth))
    assert S.clustering_ari(label)["ari"] == got[1]["ari"]
    with pytest.raises(ValueError, match="spec.method"):
        S.clustering_ari(RunSpec("fmnist", "rotated_groups", 4, 8, 3, "fedavg", n_train=800))
    with pytest.raises(ValueError, match="specs"):
        S.clustering_aris([spec, RunSpec("fmnist", "rotated_groups", 4, 8, 4, "clust_psi_pfl", n_train=800)])


def test_committed_ari_rows_match_the_trained_runs_at_seed_0():
    """The committed clustering-only ARIs (benchmarks/records/beyond_label_ari) at seed 0 are the
    ARIs of the committed trained runs (benchmarks/records/beyond_label): the same grouping."""
    from fedlib.grid import load_records
    from fedlib.paths import ROOT

    rows = pd.read_csv(ROOT / "benchmarks/records/beyond_label_ari/aris.csv")
    df = B.runs_frame(load_records(ROOT / "benchmarks/records/beyond_label"))
    m = rows[rows.seed == 0].merge(df[["partition", "variant", "seed", "ari", "groups"]],
                                   on=["partition", "variant", "seed"], suffixes=("", "_trained"))
    assert len(m) == 66  # 11 partitions × 6 clustering-only variants
    np.testing.assert_allclose(m.ari, m.ari_trained, atol=1e-12)
    assert (m.groups == m.groups_trained).all()


def test_ari_rows_recompute_each_seed_and_keep_only_clustering_variants(tmp_path):
    specs = B.training_specs(["rotated"], [], 8, [0], ["psi_label", "psi_attribute", "fedavg"],
                             {"rounds": 1, "local_epochs": 1}, n_train={"fmnist": 800})
    rows = S.ari_rows(specs, [1, 2])
    assert list(rows.kmeans_seed) == [43, 44, 43, 44] or sorted(rows.kmeans_seed) == [43, 43, 44, 44]
    assert sorted(zip(rows.variant, rows.seed)) == [("psi_attribute", 1), ("psi_attribute", 2), ("psi_label", 1),
                                                    ("psi_label", 2)]
    import dataclasses
    one = [s for s in specs if B.variant_of(s.to_dict()) == "psi_attribute"][0]
    assert rows[(rows.variant == "psi_attribute") & (rows.seed == 2)].ari.iloc[0] == pytest.approx(
        S.clustering_ari(S.kmeans_seeded(dataclasses.replace(one, seed=2)))["ari"])
    path = tmp_path / "aris.csv"
    rows.to_csv(path, index=False)
    assert len(S.read_ari_rows(path, 8)) == 4 and S.read_ari_rows(path, 100).empty
    assert S.read_ari_rows(tmp_path / "none.csv", 8).empty


def test_clopper_pearson_by_hand_and_against_beta_quantiles():
    # x = 0 of n: upper limit 1 − (α/2)^(1/n) in closed form; x = n: lower limit (α/2)^(1/n)
    assert S.clopper_pearson(0, 20) == (0.0, pytest.approx(1 - 0.025 ** (1 / 20)))
    assert S.clopper_pearson(20, 20) == (pytest.approx(0.025 ** (1 / 20)), 1.0)
    assert S.clopper_pearson(0, 20)[1] == pytest.approx(0.16843, abs=1e-5)
    # 1 of 1: [0.025, 1]; 3 of 20 (the brightness case): known values 0.0321, 0.3789
    assert S.clopper_pearson(1, 1) == (pytest.approx(0.025), 1.0)
    lo, hi = S.clopper_pearson(3, 20)
    assert (lo, hi) == (pytest.approx(0.03207, abs=1e-4), pytest.approx(0.37893, abs=1e-4))
    # 5 of 10: symmetric about ½ (known 0.18709, 0.81291)
    lo, hi = S.clopper_pearson(5, 10)
    assert lo == pytest.approx(0.187086, abs=1e-5) and hi == pytest.approx(1 - lo)
    for x in range(21):
        lo, hi = S.clopper_pearson(x, 20)
        assert 0 <= lo <= x / 20 <= hi <= 1
    assert np.isnan(S.clopper_pearson(0, 0)[0])
    with pytest.raises(ValueError, match="hits"):
        S.clopper_pearson(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        S.clopper_pearson(1, 2, confidence=1.0)


def test_share_over_seeds_describes_the_runs():
    # 17 seeds at 0.327 and 3 at 1.0 (brightness per bin): the mean 0.43 was "partly"; 3 of 20 recover
    rows = pd.DataFrame({"partition": "b", "variant": "v", "seed": range(20), "ari": [0.327] * 17 + [1.0] * 3})
    t = S.share_over_seeds(rows).iloc[0]
    assert (t.n, t.hits, t["median"]) == (20, 3, pytest.approx(0.327))
    assert (t.low, t.high) == S.clopper_pearson(3, 20) and t.verdict == "recovers in few seeds"
    # 16 of 20 ≥ 0.9 (4 below): "most", not "every"; all 20: "every", interval ends at 1, not above
    rows = rows.assign(ari=[0.95] * 16 + [0.5] * 4)
    assert S.share_over_seeds(rows).verdict.iloc[0] == "recovers in most seeds"
    t = S.share_over_seeds(rows.assign(ari=1.0)).iloc[0]
    assert t.verdict == "recovers in every seed" and t.high == 1.0
    assert S.share_over_seeds(rows.assign(ari=0.0)).verdict.iloc[0] == "cannot separate"
    assert S.share_over_seeds(rows.assign(ari=0.45)).verdict.iloc[0] == "recovers in no seed"  # above chance, none ≥ 0.9
    assert S.share_over_seeds(rows.assign(ari=[0.95] * 10 + [0.5] * 10)).verdict.iloc[0] == "mixed"
    assert S.share_over_seeds(rows.head(1)).verdict.iloc[0] == "one seed: no verdict"
    assert S.share_text(3, 20, *S.clopper_pearson(3, 20), 0.327) == "3 of 20 seeds ≥ 0.9 (15 % [3, 38]), median 0.33"


def test_answer_over_seeds_gives_shares_and_verdicts():
    rows = pd.DataFrame({"partition": ["p"] * 6 + ["q"] * 2,
                         "variant": ["psi_label"] * 3 + ["psi_joint"] * 3 + ["psi_label", "psi_size"],
                         "seed": [0, 1, 2] * 2 + [0, 0],
                         "ari": [0.0, 0.02, 0.04, 0.95, 0.97, 0.99, 0.5, 0.96]})
    t = S.answer_over_seeds(rows, ["p", "q"]).set_index("partition")
    assert t.loc["p", "label_only"] == "0 of 3 seeds ≥ 0.9 (0 % [0, 71]), median 0.02"
    assert t.loc["p", "label_only_verdict"] == "cannot separate"
    assert t.loc["p", "best_extension"] == "psi_joint" and t.loc["p", "extension_verdict"] == "recovers in every seed"
    wide = rows.assign(ari=[0.0, 0.02, 0.04, 0.80, 0.97, 0.99, 0.5, 0.96])  # 2 of 3
    assert S.answer_over_seeds(wide, ["p"]).extension_verdict.iloc[0] == "mixed"
    assert t.loc["q", "label_only"] == "ARI 0.50 (one seed, no interval)"
    assert t.loc["q", "extension_verdict"] == "one seed: no verdict"
    assert S.interval_text(np.nan, np.nan, np.nan, 0) == "—"


def test_kmeans_seed_derives_from_the_run_seed(tmp_path):
    spec = RunSpec("fmnist", "rotated_groups", 4, 8, 3, "clust_psi_pfl", n_train=800, hyper={"features": "attribute"})
    s = S.kmeans_seeded(spec)
    assert s.hyper == {"features": "attribute", "kmeans_seed": 45} and spec.hyper == {"features": "attribute"}
    assert S.kmeans_seeded(RunSpec("fmnist", "rotated_groups", 4, 8, 0, "clust_psi_pfl", n_train=800)).hyper == {
        "kmeans_seed": 42}  # seed 0: the authors' 42, the trained runs' grouping
    old = pd.DataFrame({"partition": "p", "variant": "v", "seed": [0, 1, 2], "ari": [0.1, 0.2, 0.3]})
    got, what = S.ari_reading(old)  # no kmeans_seed column: the fixed-42 rows
    assert list(got.ari) == [0.1, 0.2, 0.3] and "fixed at 42" in what
    both = pd.concat([old, pd.DataFrame({"partition": "p", "variant": "v", "seed": [1, 2], "ari": [0.7, 0.8],
                                         "kmeans_seed": [43, 44]})], ignore_index=True)
    got, what = S.ari_reading(both)
    assert list(got.ari) == [0.1, 0.7, 0.8] and "42 + seed" in what


def test_small_pooled_table_reads_one_seed_with_its_interval_and_the_gap():
    f = pd.DataFrame({"share": [0.1, 0.1], "variant": ["fedavg", "psi_size"], "seed": [0, 0],
                      "small_clients": [10, 10], "small_test_samples": [20, 20], "per_client_test": ["1–4", "1–4"],
                      "small_mean": [50.0, 40.0], "small_pooled": [55.0, 45.0], "pooled_low": [35.0, 25.0],
                      "pooled_high": [75.0, 65.0]})
    t = S.small_pooled_table(f, {"psi_size": "ln n"}).set_index("variant")
    assert t.loc["ln n", "s = 0.1"] == "45.0 [25.0, 65.0] (20 test samples, 1–4 a client)"
    assert t.loc["ln n", "Δ vs fedavg, s = 0.1 (pp)"] == -10.0 and t.loc["fedavg", "Δ vs fedavg, s = 0.1 (pp)"] == 0.0
    two = pd.concat([f, f.assign(seed=1, small_pooled=[65.0, 35.0])])
    t2 = S.small_pooled_table(two).set_index("variant")
    assert t2.loc["psi_size", "s = 0.1"] == "40.0 (n = 2 seeds)" and t2.loc["psi_size", "Δ vs fedavg, s = 0.1 (pp)"] == -20.0


def _pooled(rows):
    """A small_pooled_frame-shaped frame from (variant, share, seed, pooled %) rows."""
    return pd.DataFrame([{"variant": v, "share": sh, "seed": sd, "small_pooled": acc} for v, sh, sd, acc in rows])


def test_small_gap_pairs_are_paired_by_share_and_seed():
    f = _pooled([("fedavg", 0.1, 0, 50.0), ("fedavg", 0.1, 1, 60.0), ("fedavg", 0.3, 0, 40.0),
                 ("ifca", 0.1, 0, 45.0), ("ifca", 0.1, 1, 70.0), ("ifca", 0.3, 0, 40.0),
                 ("ifca", 0.3, 2, 99.0)])  # no FedAvg at (0.3, seed 2): no pair
    p = S.small_gap_pairs(f).set_index(["share", "seed"]).gap
    assert p.to_dict() == {(0.1, 0): -5.0, (0.1, 1): 10.0, (0.3, 0): 0.0}
    assert S.small_gap_pairs(f[f.variant == "ifca"]).empty  # no reference: no gap


def test_small_gap_table_reads_the_interval_against_zero_by_hand():
    rows = []
    for seed, (ref, low, mixed, same) in enumerate([(50.0, 40.0, 55.0, 50.0), (50.0, 38.0, 45.0, 50.0),
                                                   (50.0, 42.0, 51.0, 50.0)]):
        rows += [("fedavg", 0.1, seed, ref), ("pfedlia", 0.1, seed, low), ("ifca", 0.1, seed, mixed),
                 ("cfl", 0.1, seed, same)]
    t = S.small_gap_table(S.small_gap_pairs(_pooled(rows)), {"pfedlia": "pFedLIA"}).set_index("variant")
    # pFedLIA: gaps −10, −12, −8 → mean −10, s = 2, half-width t_{0.975, 2} · 2 / √3 = 4.968
    assert t.loc["pFedLIA", "s = 0.1"] == "-10.0 [-15.0, -5.0] (n = 3)"
    assert t.loc["pFedLIA", "verdict"] == "below fedavg"
    assert t.loc["ifca", "verdict"].startswith("undecided")  # +5, −5, +1: the interval holds 0
    assert t.loc["cfl", "verdict"] == "identical to fedavg (every pair's gap 0)"
    # the answer first: a reader sees the verdict before the per-share columns (a 1,440-px window)
    assert list(t.reset_index().columns) == ["variant", "all shares", "verdict", "s = 0.1"]
    assert t.loc["pFedLIA", "all shares"] == "-10.0 [-15.0, -5.0] (n = 3)"
    one = S.small_gap_table(S.small_gap_pairs(_pooled(rows[:4]))).set_index("variant")
    assert one.loc["pfedlia", "verdict"] == "no verdict (one pair)" and one.loc["pfedlia", "s = 0.1"] == "-10.0 (n = 1)"


def test_units_to_exclude_zero_by_hand():
    # mean 1, sd 2: t_{0.975, 16} · 2 / √17 = 1.028 ≥ 1, t_{0.975, 17} · 2 / √18 = 0.995 < 1 → 18
    assert S.units_to_exclude_zero(1.0, 2.0) == 18 and S.units_to_exclude_zero(-1.0, 2.0) == 18
    assert S.units_to_exclude_zero(0.0, 2.0) is None and S.units_to_exclude_zero(0.01, 5.0) is None


def test_small_specs_over_seeds_reads_the_paper_seed_and_the_design_seeds():
    from fedlib import notebook_params
    from fedlib.paths import ROOT
    paper = notebook_params.load(ROOT / "params/paper/12_beyond_label_skew.yaml", "12_beyond_label_skew")
    design = notebook_params.load(ROOT / S.SMALL_SEEDS_DESIGN, "12_beyond_label_skew")
    specs = S.small_specs_over_seeds(paper, design)
    assert {s.seed for s in specs} == set(paper["seeds"]) | set(design["seeds"])
    assert {B.variant_of(s.to_dict()) for s in specs} == set(design["variants"])
    assert len(specs) == len({s.key() for s in specs}) == (
        len(design["variants"]) * len(design["small_shares"]) * len(set(paper["seeds"]) | set(design["seeds"])))
    assert all(s.protocol == "small_clients" and s.n_clients == paper["n_clients"] for s in specs)
