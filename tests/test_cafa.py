"""CAFA (fedlib.methods.cafa): CBCC (Eqs. 1–8), ABFA (Eqs. 9–10), Eq. 11, the CAFA partition
(fedlib.partition.iid_fraction_classes), the method on a tiny real federation, its errors,
and the notebook-08 study helpers (workbook.cafa_study)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fedlib import partition as P
from workbook import cafa_study as S
from fedlib.engine import Federation
from fedlib.methods import Context, FLConfig, cafa
from fedlib.models import build_model
from fl_fixtures import digits, make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


# ----------------------------------------------------------------------------- CBCC
def test_class_distribution_is_eq_1_2():
    v = cafa.class_distribution([[2, 2, 0], [1, 0, 3], [0, 5, 0]])
    assert np.allclose(v, [[0.5, 0.5, 0], [0.25, 0, 0.75], [0, 1, 0]])


def test_class_distribution_refuses_an_empty_client():
    with pytest.raises(ValueError, match=r"counts must be .*at least one sample.*\[1\]"):
        cafa.class_distribution([[1, 2], [0, 0]])


def test_cbcc_weights_by_hand():
    # clusters {0, 1, 3} (3 clients), {2} (1), {4} (1) of K = 5: w = 3/5, 3/5, 1/5, 3/5, 1/5
    w = cafa.cbcc_weights([0, 0, 1, 0, 2])
    assert np.allclose(w, [0.6, 0.6, 0.2, 0.6, 0.2])


def test_select_k_takes_the_argmax_and_the_smallest_k_on_ties():
    assert cafa.select_k({2: 0.3, 3: 0.7, 4: 0.5}) == 3
    assert cafa.select_k({2: 0.3, 3: 0.7, 5: 0.7}) == 3


def test_iid_cluster_largest_and_tie_rule():
    centroids = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    assert cafa.iid_cluster([0, 0, 0, 1, 2], centroids, [0.5, 0.5]) == 0  # largest wins
    # clusters 0 and 1 both have two clients: cluster 1's centroid is the reference
    assert cafa.iid_cluster([0, 0, 1, 1, 2], centroids, [0.5, 0.5]) == 1
    # equal distance too: the lower id
    assert cafa.iid_cluster([0, 0, 2, 2, 1], centroids, [0.5, 0.5]) == 0


def test_cbcc_finds_the_iid_clients_of_a_known_federation():
    # 6 IID clients (uniform over 4 classes, small noise) and 4 two-class clients in two pairs
    rng = np.random.default_rng(0)
    iid = 100 + rng.integers(-3, 4, size=(6, 4))
    non = np.array([[100, 100, 0, 0], [98, 103, 0, 0], [0, 0, 100, 100], [0, 0, 101, 97]])
    res = cafa.cbcc(np.vstack([iid, non]), random_state=0)
    assert res.iid_mask.tolist() == [True] * 6 + [False] * 4
    assert res.k == 3  # the silhouette picks the three true groups
    assert set(res.silhouettes) == set(range(2, 10))  # 2 … K−1
    assert np.allclose(res.weights, [0.6] * 6 + [0.2] * 4)


def test_k_counts_the_clusters_filled_not_the_largest_id(monkeypatch):
    assert cafa.n_clusters([0, 0, 2, 2, 2]) == 2  # cluster 1 empty: labels.max() + 1 would say 3
    # K-means leaving cluster 1 empty: CBCC reports k = 2 and weighs by the filled clusters
    monkeypatch.setattr(cafa, "kmeans_labels",
                        lambda v, k, rs, n_init=10: (np.array([0, 0, 2, 2, 2]), np.eye(3)[:, :2]))
    res = cafa.cbcc([[5, 0], [4, 1], [0, 5], [1, 4], [0, 6]], random_state=0, curve={3: 1.0})
    assert res.k == 2 and res.iid_cluster == 2
    assert np.allclose(res.weights, [0.4, 0.4, 0.6, 0.6, 0.6])


def test_k_above_the_distinct_histograms_reports_the_filled_clusters():
    # 3 distinct histograms, k = 5 forced by a curve: K-means can fill at most 3 clusters
    counts = np.array([[10, 0, 0]] * 3 + [[0, 10, 0]] * 3 + [[0, 0, 10]] * 2)
    res = cafa.cbcc(counts, random_state=0, curve={5: 0.9, 2: 0.1})
    assert res.silhouettes == {5: 0.9, 2: 0.1}
    assert res.k == np.unique(res.labels).size <= 3


def test_cbcc_takes_k_from_a_given_curve():
    rng = np.random.default_rng(0)
    counts = np.vstack([100 + rng.integers(-3, 4, size=(6, 4)),
                        [[100, 100, 0, 0], [98, 103, 0, 0], [0, 0, 100, 100], [0, 0, 101, 97]]])
    assert cafa.cbcc(counts, random_state=0).k == 3  # its own search
    res = cafa.cbcc(counts, random_state=0, curve={2: 0.9, 3: 0.5})
    assert res.k == 2 and res.silhouettes == {2: 0.9, 3: 0.5}
    with pytest.raises(ValueError, match=r"curve must be a non-empty dict k -> mean silhouette with every k in \[1, K = 10\]"):
        cafa.cbcc(counts, random_state=0, curve={11: 0.5})


def test_fixed_k_is_the_authors_kmeans_without_a_search():
    """The authors' train.py: KMeans(n_clusters=k, random_state=0), no silhouette search. By hand:
    4 clients at e1 (A), 2 at e2 (B), 1 at e3 (C). The search scores k = 3 at (4 + 2)/7 (a
    singleton's silhouette is 0) above k = 2 at (4·1 + 2·½ + 0)/7 (B in {B, C}: a = √2/2, b = √2)
    and takes 3; a fixed k = 2 forms {A}, {B, C}
    (within-cluster SSE 12/9, below {A, C}, {B}'s 8/5 and {A, B}, {C}'s 12/5)."""
    counts = np.array([[10, 0, 0]] * 4 + [[0, 10, 0]] * 2 + [[0, 0, 10]])
    searched = cafa.cbcc(counts, random_state=0)
    assert searched.k == 3 and searched.silhouettes == pytest.approx({2: 5 / 7, 3: 6 / 7})
    assert np.allclose(searched.weights, [4 / 7] * 4 + [2 / 7] * 2 + [1 / 7])
    fixed = cafa.cbcc(counts, random_state=0, k=2)
    assert fixed.k == 2 and fixed.silhouettes == {}
    assert fixed.labels[4] == fixed.labels[5] == fixed.labels[6] != fixed.labels[0]
    assert np.allclose(fixed.weights, [4 / 7] * 4 + [3 / 7] * 3)
    assert fixed.iid_mask.tolist() == [True] * 4 + [False] * 3  # the largest cluster, {A}
    three = cafa.cbcc(counts, random_state=0, k=3)
    assert np.allclose(three.weights, searched.weights) and three.silhouettes == {}
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 7\], got 8"):
        cafa.cbcc(counts, random_state=0, k=8)
    with pytest.raises(ValueError, match="curve must be None when k is given"):
        cafa.cbcc(counts, random_state=0, k=2, curve={2: 0.5})


def test_run_with_the_authors_clustering_uses_k_fixed_and_random_state_0():
    out = cafa.run(val_context(rounds=1), cafa.Hyper(clustering="fixed", k_fixed=2))
    assert out.info["k"] <= 2 and out.info["silhouettes"] == {} and out.info["kmeans_random_state"] == 0
    searched = cafa.run(val_context(rounds=1), cafa.Hyper())
    assert searched.info["silhouettes"] and searched.info["kmeans_random_state"] != 0
    ctx = val_context()
    with pytest.raises(ValueError, match=r"k_fixed must be ≤ K = 10"):
        cafa.run(ctx, cafa.Hyper(clustering="fixed", k_fixed=11))
    assert ctx.history == []


def test_mean_silhouette_curve_is_the_mean_of_the_curves():
    rng = np.random.default_rng(1)
    vs = [cafa.class_distribution(rng.integers(1, 50, size=(8, 4))) for _ in range(3)]
    curves = [cafa.silhouette_curve(v, [2, 3, 4], 0) for v in vs]
    mean = cafa.mean_silhouette_curve(vs, [2, 3, 4], 0)
    assert mean == pytest.approx({k: np.mean([c[k] for c in curves]) for k in (2, 3, 4)})
    with pytest.raises(ValueError, match="vs must be a non-empty sequence"):
        cafa.mean_silhouette_curve([], [2], 0)


def test_cbcc_with_identical_clients_is_one_cluster():
    res = cafa.cbcc(np.full((4, 3), 5), random_state=0)
    assert res.k == 1 and res.silhouettes == {} and res.iid_mask.all() and np.allclose(res.weights, 1)


# ----------------------------------------------------------------------------- ABFA and Eq. 11
def test_pooled_accuracy_is_eq_9():
    # model 0: a = (8/10, 1/5) on S = (10, 5) -> (8 + 1) / 15; model 1: (5 + 5) / 15
    a = cafa.pooled_accuracy([[8, 1], [5, 5]], [10, 5])
    assert np.allclose(a, [9 / 15, 10 / 15])
    # Eq. 9 written with the per-client accuracies a_j and sizes S_j
    assert np.isclose(a[0], (0.8 * 10 + 0.2 * 5) / 15)


def test_abfa_weights_are_eq_10():
    assert np.allclose(cafa.abfa_weights([0.6, 0.2, 0.2]), [0.6, 0.2, 0.2])
    assert np.allclose(cafa.abfa_weights([0.9, 0.3]), [0.75, 0.25])
    assert np.allclose(cafa.abfa_weights([0.0, 0.0]), [0.5, 0.5])  # undefined: uniform


def test_combine_weights_product_and_sum_by_hand():
    w_k, w_a = [0.6, 0.6, 0.2], [0.5, 0.25, 0.25]
    # Eq. 11: 0.30, 0.15, 0.05 over 0.50
    assert np.allclose(cafa.combine_weights(w_k, w_a, "product"), [0.6, 0.3, 0.1])
    # sum: ŵ^K = (3/7, 3/7, 1/7); mean with w^A
    assert np.allclose(cafa.combine_weights(w_k, w_a, "sum"),
                       [(3 / 7 + 0.5) / 2, (3 / 7 + 0.25) / 2, (1 / 7 + 0.25) / 2])


# ----------------------------------------------------------------------------- the partition
@pytest.fixture(scope="module")
def cifar_labels():
    return S.cifar10_labels()


def test_partition_classes_sizes_and_iid_histograms(cifar_labels):
    parts = P.iid_fraction_classes(cifar_labels, 20, 0.25, 3)
    counts = P.label_counts(cifar_labels, parts, 10)
    truth = S.true_iid_mask(20, 0.25)
    assert truth.sum() == 5 and truth[:5].all()
    held = (counts > 0).sum(axis=1)
    assert (held[truth] == 10).all()
    assert ((held[~truth] >= 2) & (held[~truth] <= 4)).all()
    assert set(held[~truth]) == {2, 3, 4}  # every count of classes occurs at K = 20
    for row in counts[truth]:  # IID: the data set's distribution (balanced) to rounding
        assert row.max() - row.min() <= 1
    sizes = counts.sum(axis=1)
    assert len(set(sizes.tolist())) == 20  # random sizes
    allidx = np.concatenate(parts)
    assert allidx.size == np.unique(allidx).size  # disjoint


def test_partition_is_deterministic_and_dispatchable(cifar_labels):
    a = P.iid_fraction_classes(cifar_labels, 20, 0.5, 7)
    b = P.partition(cifar_labels, "iid_fraction_classes", 20, 0.5, 7)
    c = P.iid_fraction_classes(cifar_labels, 20, 0.5, 8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_partition_classes_argument_and_all_iid(cifar_labels):
    parts = P.iid_fraction_classes(cifar_labels, 10, 0.0, 0, classes=(3, 3))
    assert ((P.label_counts(cifar_labels, parts, 10) > 0).sum(axis=1) == 3).all()
    parts = P.iid_fraction_classes(cifar_labels, 10, 1.0, 0)
    assert ((P.label_counts(cifar_labels, parts, 10) > 0).sum(axis=1) == 10).all()


@pytest.mark.parametrize("kwargs, match", [
    ({"iid_fraction": 1.5}, r"iid_fraction must be a finite number in \[0, 1\], got 1.5"),
    ({"iid_fraction": "0.5"}, r"iid_fraction must be a finite number"),
    ({"classes": (0, 4)}, r"classes\[0\] must be an integer in \[1, 10\], got 0"),
    ({"classes": (4, 2)}, r"classes\[1\] must be an integer in \[4, 10\], got 2"),
    ({"classes": 3}, r"classes must be a pair"),
])
def test_partition_errors(cifar_labels, kwargs, match):
    args = {"iid_fraction": 0.25, **kwargs}
    with pytest.raises(ValueError, match=match):
        P.iid_fraction_classes(cifar_labels, 20, args.pop("iid_fraction"), 0, **args)


def test_cbcc_identifies_the_partitions_iid_clients(cifar_labels):
    scores, res, truth = S.cbcc_case(cifar_labels, 10, 10, 0, generator="workbook", k_search="paper_text")
    assert scores["recall"] == 1.0 and scores["acc"] >= 0.9
    assert truth.sum() == 10 and truth[:10].all() and res.iid_mask[truth].all()
    # paper_text: 2 … K − 1 on this partition, capped at its distinct histograms (the IID ones coincide)
    assert set(res.silhouettes) == set(range(2, min(19, len(np.unique(res.v, axis=0))) + 1))


def test_generate_plants_the_first_n_iid_clients_under_both_generators(cifar_labels):
    for generator, low, high in (("authors", 1, 2), ("workbook", 2, 4)):
        parts = S.generate(cifar_labels, generator, 5, 15, 0)
        held = (P.label_counts(cifar_labels, parts, 10) > 0).sum(axis=1)
        assert len(parts) == 20 and (held[:5] == 10).all(), generator
        assert ((held[5:] >= low) & (held[5:] <= high)).all(), generator
    sizes = [len(p) for p in S.generate(cifar_labels, "authors", 5, 15, 0)]
    assert sizes == [2500] * 20  # equal sizes (the workbook's are random)
    with pytest.raises(ValueError, match=r"generator must be one of \['authors', 'workbook'\], got 'paper'"):
        S.generate(cifar_labels, "paper", 5, 15, 0)


def test_authors_k_search_averages_the_curve_over_other_partitions(cifar_labels):
    scores, res, truth = S.cbcc_case(cifar_labels, 5, 15, 0, generator="authors", repeats=2)
    # the curve by hand: partitions of seeds repeat_seed(0, 1), repeat_seed(0, 2), k = 2 … 19
    vs = [cafa.class_distribution(P.label_counts(cifar_labels, P.cafa_authors(cifar_labels, 5, 15, S.repeat_seed(0, r)), 10))
          for r in (1, 2)]
    curves = [cafa.silhouette_curve(v, range(2, 20), 0) for v in vs]
    assert res.silhouettes == pytest.approx({k: (curves[0][k] + curves[1][k]) / 2 for k in range(2, 20)})
    # K-means with the argmax on the partition of seed 0 (not one of the repeats), random_state 0
    v0 = cafa.class_distribution(P.label_counts(cifar_labels, P.cafa_authors(cifar_labels, 5, 15, 0), 10))
    labels, _ = cafa.kmeans_labels(v0, cafa.select_k(res.silhouettes), 0)
    assert np.array_equal(res.labels, labels) and scores["k"] == cafa.n_clusters(labels)
    assert S.repeat_seed(0, 1) not in (0, S.repeat_seed(0, 2), S.repeat_seed(1, 1))
    again, _, _ = S.cbcc_case(cifar_labels, 5, 15, 0, generator="authors", repeats=2)
    assert again == scores


def test_authors_k_range_is_capped_at_k_minus_1(cifar_labels):
    _, res, _ = S.cbcc_case(cifar_labels, 4, 8, 0, generator="authors", repeats=1, k_range=(2, 19))
    assert set(res.silhouettes) == set(range(2, 12))


@pytest.mark.parametrize("kwargs, match", [
    ({"k_search": "both"}, r"k_search must be one of \['authors', 'paper_text'\], got 'both'"),
    ({"repeats": 0}, r"repeats must be an integer ≥ 1, got 0"),
    ({"k_range": 19}, r"k_range must be a pair"),
    ({"k_range": (1, 19)}, r"k_range\[0\] must be an integer ≥ 2, got 1"),
    ({"k_range": (25, 30)}, r"n_iid \+ n_noniid must be > k_range\[0\] = 25"),
])
def test_cbcc_case_bad_input(cifar_labels, kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.cbcc_case(cifar_labels, 5, 15, 0, **kwargs)


def test_records_table_matches_cbcc_table(cifar_labels):
    live = S.cbcc_table(cifar_labels, [(4, 8)], [0, 1], repeats=1)
    records = [{"spec": {"generator": g, "n_iid": 4, "n_noniid": 8, "seed": s}, "status": "ok",
                **S.cbcc_case(cifar_labels, 4, 8, s, generator=g, repeats=1)[0]}
               for g in S.GENERATORS for s in (0, 1)]
    records.append({"spec": {"generator": "authors", "n_iid": 4, "n_noniid": 8, "seed": 2}, "status": "failed"})
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(S.records_table(records), live)
    assert live.n_seeds.tolist() == [2, 2] and live.generator.tolist() == ["authors", "workbook"]
    assert live.iid_share.tolist() == pytest.approx([1 / 3, 1 / 3])
    with pytest.raises(ValueError, match="records must be at least one CBCC record"):
        S.records_table(records[-1:])


def test_identification_scores_by_hand():
    # truth: 3 IID of 5; predicted IID: clients 0, 1, 3 -> TP 2, FP 1, FN 1, TN 1
    s = S.identification_scores([1, 1, 0, 1, 0], [1, 1, 1, 0, 0])
    assert s == pytest.approx({"acc": 3 / 5, "precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3})


# ----------------------------------------------------------------------------- the method
def val_context(seed=0, rounds=6, val_fraction=0.2, n_clients=10, iid_fraction=0.5) -> Context:
    x, y = digits()
    parts = P.iid_fraction_classes(y, n_clients, iid_fraction, seed)
    train, val, test = P.train_val_test_split(parts, seed, 0.2, val_fraction)
    fed = Federation.from_arrays(x, y, train, test, "cpu", n_classes=10, val_parts=val)
    model = build_model("logistic", 10, fed.input_shape)
    cfg = FLConfig(rounds=rounds, local_epochs=2, fraction=0.5, lr=0.01)
    return Context(fed=fed, model=model, cfg=cfg, seed=seed, counts_train=P.label_counts(y, train, 10))


def accuracy(ctx, out):
    correct, n = ctx.evaluate(out.models, out.assignment)
    return correct.sum() / n.sum()


def test_cafa_learns_and_is_deterministic():
    ctx = val_context()
    out = cafa.run(ctx, cafa.Hyper())
    assert accuracy(ctx, out) > 0.5  # chance is 0.1
    assert all(v.shape[0] == 1 for v in out.models.values())
    assert (out.assignment == 0).all()
    info = out.info
    assert len(info["selected"]) == 6 and all(len(s) == 5 for s in info["selected"])
    assert info["k"] == len(info["cluster_sizes"]) and sum(info["cluster_sizes"]) == 10
    assert info["cluster_sizes"][info["iid_cluster"]] == max(info["cluster_sizes"])
    assert set(range(5)) <= set(info["iid_clients"])  # the partition's IID clients 0..4
    for w in info["weights"]:
        assert np.isclose(sum(w), 1, atol=1e-5)
    again = val_context()
    out2 = cafa.run(again, cafa.Hyper())
    assert all(torch.equal(out.models[k], out2.models[k]) for k in out.models)
    assert out.info == out2.info and ctx.history == again.history


def test_cafa_aggregation_is_eq_11_on_the_trained_models():
    """Round 1 rebuilt by hand: train the selected clients, score on their pooled validation
    data, weigh by w^K·w^A — the method's model must be that average."""
    ctx = val_context(rounds=1)
    out = cafa.run(ctx, cafa.Hyper())
    ref = val_context(rounds=1)
    clients = np.asarray(out.info["selected"][0])
    from fedlib.engine import broadcast, weighted_average
    res = ref.train(broadcast(ref.init_state(), len(clients)), clients, 0)
    _, correct, n = ref.loss_matrix(res.params, clients, "val")
    acc = correct.sum(axis=1) / n.sum()
    w_k = np.asarray(out.info["cbcc_weights"])[clients]
    w = w_k * acc / (w_k * acc).sum()
    expected = weighted_average(res.params, w)
    assert all(torch.allclose(out.models[k][0], expected[k]) for k in expected)
    # and it is not FedAvg's sample-weighted average
    fedavg = weighted_average(res.params, res.n_samples)
    assert not all(torch.allclose(fedavg[k], expected[k]) for k in expected)


def test_cafa_sees_fedavgs_clients():
    from fedlib.methods import fedprox  # μ = 0: FedAvg through the shared loop, which records selections
    ctx = val_context(rounds=3)
    out = cafa.run(ctx, cafa.Hyper())
    ref = val_context(rounds=3)
    assert fedprox.run(ref, fedprox.Hyper(mu=0.0)).info["selected"] == out.info["selected"]


def test_cafa_variants_change_the_result():
    base = cafa.run(val_context(rounds=2), cafa.Hyper())
    for hp in (cafa.Hyper(combine="sum"), cafa.Hyper(abfa_pool="iid")):
        other = cafa.run(val_context(rounds=2), hp)
        assert other.info["weights"] != base.info["weights"]


# ----------------------------------------------------------------------------- errors
def test_no_validation_split_fails_before_training():
    ctx = make_context(n_clients=6)
    with pytest.raises(ValueError, match=r"validation split must be non-empty.*val_fraction > 0"):
        cafa.run(ctx, cafa.Hyper())
    assert ctx.history == []


@pytest.mark.parametrize("values, match", [
    ({"combine": "mean"}, r"combine must be one of \['product', 'sum'\], got 'mean'"),
    ({"abfa_pool": "all"}, r"abfa_pool must be one of"),
    ({"k_min": 1}, r"k_min must be an integer ≥ 2, got 1"),
    ({"k_min": 4, "k_max": 3}, r"k_max must be an integer ≥ 4"),
    ({"n_init": 0}, r"n_init must be an integer ≥ 1, got 0"),
    ({"clustering": "kmeans"}, r"clustering must be one of \['silhouette', 'fixed'\], got 'kmeans'"),
    ({"k_fixed": 0}, r"k_fixed must be an integer ≥ 1, got 0"),
])
def test_bad_hyper(values, match):
    with pytest.raises(ValueError, match=match):
        cafa.Hyper(**values)


def test_k_max_above_k_minus_1_fails_before_training():
    ctx = val_context()
    with pytest.raises(ValueError, match=r"k_max must be ≤ K − 1 = 9"):
        cafa.run(ctx, cafa.Hyper(k_max=10))
    assert ctx.history == []


# ----------------------------------------------------------------------------- notebook helpers
def test_window_and_best_tables_by_hand():
    import pandas as pd
    hist = pd.DataFrame({"method": ["fedavg"] * 4 + ["cafa"] * 4, "seed": [0] * 8,
                         "round": [1, 2, 3, 4] * 2, "accuracy": [0.1, 0.3, 0.5, 0.4, 0.2, 0.4, 0.6, 0.7]})
    win = S.window_table(hist, [(0, 1), (2, 3)])
    assert win.set_index(["method", "window"])["mean"].to_dict() == pytest.approx(
        {("fedavg", "0-1"): 0.2, ("cafa", "0-1"): 0.3, ("fedavg", "2-3"): 0.45, ("cafa", "2-3"): 0.65})
    best = S.best_table(hist).set_index("method")
    assert best["mean"].to_dict() == pytest.approx({"fedavg": 0.5, "cafa": 0.7})
    assert best.loc["fedavg", "cafa_improvement"] == pytest.approx(0.2)
    assert S.ordering_holds(win, best.reset_index()) == {"best: CAFA > FedAvg": True,
                                                         "every window: CAFA > FedAvg": True}
    assert "20.00 ± 0.00" in S.table_markdown(win, best.reset_index())


def test_training_specs_carry_the_validation_split():
    specs = S.training_specs("fmnist", 400, 0.0, 20, [0], ["fedavg", "cafa"], {}, {"rounds": 2}, 0.2)
    assert [s.method for s in specs] == ["fedavg", "cafa"]
    assert all(s.val_fraction == 0.2 and s.protocol == "iid_fraction_classes" for s in specs)
    assert all(s.global_test and s.n_global_test is None for s in specs)  # scored on the official test set
    assert {s.n_global_test for s in S.training_specs("fmnist", 400, 0.0, 20, [0], ["cafa"], {}, {}, 0.2,
                                                      n_global_test=300)} == {300}
    for s in specs:
        s.validate()
    with pytest.raises(ValueError, match="val_fraction must be"):
        S.training_specs("fmnist", 400, 0.0, 20, [0], ["cafa"], {}, {}, 0.0)


def test_training_specs_run_every_iid_share_and_the_model_asked_for():
    specs = S.training_specs("fmnist", 400, [0.0, 0.5], 20, [0, 1], ["fedavg", "cafa"], {}, {}, 0.2, arch="vgg19")
    assert [(s.level, s.seed, s.method) for s in specs] == [
        (f, seed, m) for f in (0.0, 0.5) for seed in (0, 1) for m in ("fedavg", "cafa")]
    assert {s.arch for s in specs} == {"vgg19"}
    for s in specs:
        s.validate()
    one = S.training_specs("fmnist", 400, 0.5, 20, [0], ["cafa"], {}, {}, 0.2)  # one number: one setting
    assert one == S.training_specs("fmnist", 400, [0.5], 20, [0], ["cafa"], {}, {}, 0.2) and one[0].arch is None
    grid = S.notebook_grid(dataset="fmnist", n_train=400, iid_fractions=[0.0, 0.5], n_clients=20, seeds=[0],
                           methods=["cafa"], hyper={}, fl={}, val_fraction=0.2, n_global_test=300, arch=None)
    assert grid == {"table4": S.training_specs("fmnist", 400, [0.0, 0.5], 20, [0], ["cafa"], {}, {}, 0.2,
                                               n_global_test=300)}


@pytest.mark.parametrize("kwargs, match", [
    (dict(arch="vgg"), r"arch must be one of \[.*'vgg19'.*\], got 'vgg'"),
    (dict(iid_fractions=[]), r"iid_fractions must be a non-empty list of IID shares in \[0, 1\]"),
    (dict(iid_fractions=[0.0, 1.5]), r"iid_fractions entries must be a finite number in \[0, 1\], got 1.5"),
    (dict(iid_fractions=["0.5"]), r"iid_fractions entries must be a finite number"),
])
def test_training_specs_bad_input(kwargs, match):
    args = {"iid_fractions": [0.0], "arch": None, **kwargs}
    with pytest.raises(ValueError, match=match):
        S.training_specs("fmnist", 400, args.pop("iid_fractions"), 20, [0], ["cafa"], {}, {}, 0.2, **args)


def test_vgg19_trains_through_notebook_08s_grid(monkeypatch):
    """One CI-sized CAFA run of the grid with arch='vgg19' (the paper's model, random init) on
    FMNIST's 1×28×28 images: the record names the model, the engine built VGG-19, and the
    global model is scored on the official test set (CAFA's ABFA scores the stacked BatchNorm
    models of the selected clients)."""
    import fedlib.run
    from fedlib import experiment
    from fedlib.models import build_model as real_build

    built = []
    monkeypatch.setattr(fedlib.run, "build_model",
                        lambda arch, *a, **k: built.append(arch) or real_build(arch, *a, **k))
    spec = S.training_specs("fmnist", 60, [0.5], 4, [0], ["cafa"], {},
                            {"rounds": 1, "local_epochs": 1, "batch_size": 8, "fraction": 0.5}, 0.2,
                            n_global_test=20, arch="vgg19")[0]
    rec = experiment.run(spec, device="cpu")
    assert rec["status"] == "ok" and rec["spec"]["arch"] == "vgg19" and set(built) == {"vgg19"}
    assert rec["n_global_test"] == 20 and 0 <= rec["history"][-1]["global_test_accuracy"] <= 1


def _record(method, seed, official, pooled, fl=None, **spec):
    fl = {**dataclasses.asdict(FLConfig()), "rounds": len(official), **(fl or {})}
    return {"key": f"{method}-{seed}", "status": "ok", "fl": fl,
            "spec": {"method": method, "seed": seed, "global_test": True, "n_global_test": None, "n_train": None,
                     **spec},
            "history": [{"round": i + 1, "global_test_accuracy": a, "global_accuracy": b}
                        for i, (a, b) in enumerate(zip(official, pooled))]}


def test_history_frame_reports_the_official_test_accuracy_and_keeps_the_pooled_split_beside():
    recs = [_record("fedavg", 0, [0.1, 0.5], [0.9, 0.95]), _record("cafa", 0, [0.2, 0.6], [0.3, 0.4])]
    hist = S.history_frame(recs)
    assert hist.accuracy.tolist() == [0.1, 0.5, 0.2, 0.6]  # CAFA's number: the official test set
    assert hist.pooled_split_accuracy.tolist() == [0.9, 0.95, 0.3, 0.4]
    best = S.best_table(hist).set_index("method")
    assert best["mean"].to_dict() == pytest.approx({"fedavg": 0.5, "cafa": 0.6})
    assert best["pooled_split_mean"].to_dict() == pytest.approx({"fedavg": 0.95, "cafa": 0.4})
    md = S.table_markdown(S.window_table(hist, [(0, 1)]), best.reset_index())
    assert f"best, {S.OFFICIAL_TEST}" in md and f"{S.POOLED_SPLIT} (extra)" in md and "95.00" in md
    old = _record("fedavg", 0, [0.1], [0.9])
    del old["history"][0]["global_test_accuracy"]  # a run without global_test
    with pytest.raises(ValueError, match=r"records must be runs of training_specs \(global_test=True\)"):
        S.history_frame([old])


def test_run_status_and_the_diverged_curves_keep_failed_runs_out_of_the_tables():
    specs = S.training_specs("fmnist", 500, [0.0], 20, [0, 1], ["fedavg", "cafa"], {}, {"rounds": 3}, 0.2)
    ok = {**_record("fedavg", 0, [0.2, 0.4, 0.5], [0.3, 0.4, 0.5], level=0.0), "key": specs[0].key()}
    failed = {"key": specs[1].key(), "status": "failed", "error": "cafa diverged in round 3: client [9] ...",
              "spec": {"method": "cafa", "seed": 0, "level": 0.0},
              "divergence": {"round_idx": 2, "clients": [9], "lr": 0.1, "optimizer": "sgd"},
              "history_before_divergence": [{"round": 1, "global_test_accuracy": 0.3, "global_accuracy": 0.2},
                                            {"round": 2, "global_test_accuracy": 0.6, "global_accuracy": 0.5}]}
    st = S.run_status(specs, [ok, failed])
    assert st[["method", "seed", "status"]].values.tolist() == [["fedavg", 0, "ok"], ["cafa", 0, "failed"],
                                                                 ["fedavg", 1, "not run yet"], ["cafa", 1, "not run yet"]]
    assert st.diverged_round.iloc[1] == 3 and np.isnan(st.diverged_round.iloc[0])
    assert st.rounds_before.tolist() == [0, 2, 0, 0] and st.detail.iloc[1].startswith("cafa diverged in round 3")
    assert S.diverged_round(ok) is None and S.diverged_round(failed) == 3
    hist = S.history_frame([ok, failed])  # the failed run gives no row of Tables IV-V
    assert set(hist.method) == {"fedavg"}
    div = S.diverged_history_frame([ok, failed])
    assert div["round"].tolist() == [1, 2] and div.accuracy.tolist() == [0.3, 0.6]
    assert set(div.diverged_round) == {3} and set(div.method) == {"cafa"}
    fig = S.fig_curves(hist, "t", div)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["FedAvg", "CAFA, seed 0: diverged in round 3"]


def test_runs_with_global_test_log_the_official_test_accuracy_every_round():
    from fedlib.experiment import run
    spec = S.training_specs("fmnist", 400, 0.0, 4, [0], ["fedavg"], {}, {"rounds": 2, "local_epochs": 1}, 0.2,
                            n_global_test=200)[0]
    rec = run(spec, device="cpu")
    assert [h["round"] for h in rec["history"]] == [1, 2]
    assert all(0 <= h["global_test_accuracy"] <= 1 for h in rec["history"])
    # the last round's entry is the final global model on the official test set, the record's number
    assert rec["history"][-1]["global_test_accuracy"] == pytest.approx(rec["global_test_accuracy"])
    assert rec["history"][-1]["global_accuracy"] == pytest.approx(rec["global_accuracy"])


def test_verdicts_name_the_protocol_the_records_ran():
    smoke = [_record(m, 0, [0.1, a], [0.5, 0.5], fl={"local_epochs": 1}, n_train=4000)
             for m, a in (("fedavg", 0.4), ("fedprox", 0.3), ("cafa", 0.5))]
    label = S.run_label(smoke)
    assert label.startswith("smoke grid (2 rounds, 1 seed; not the paper protocol: adam lr 0.001, q = 0.5, E = 1")
    assert "4000 training samples" in label and not S.is_paper_protocol(smoke)
    hist = S.history_frame(smoke)
    lines = S.verdicts(smoke, S.window_table(hist, [(0, 1)]), S.best_table(hist))
    assert lines and all(line.startswith(f"from {label}:") for line in lines)
    assert any("CAFA best - FedAvg best (official-test accuracy): +10.00 pp (paper: +1.35 pp)" in x for x in lines)
    paper = [_record(m, s, [0.1] * 150, [0.1] * 150, fl=S.AUTHORS_FL) for m in ("fedavg", "cafa") for s in range(3)]
    assert S.is_paper_protocol(paper) and S.run_label(paper) == "paper protocol (150 rounds, 3 seeds)"
    assert not S.is_paper_protocol(paper[:-1])  # CAFA on 2 seeds only
    assert S.run_label(paper[:-1]) == "paper protocol, fewer seeds than the paper grid's 3 (150 rounds, 2–3 seeds per method)"
    assert S.run_label(paper[:1]) == "paper protocol, fewer seeds than the paper grid's 3 (150 rounds, 1 seed)"
    subset = [{**r, "spec": {**r["spec"], "n_global_test": 500}} for r in paper]
    assert not S.is_paper_protocol(subset)
    assert S.run_label(subset).endswith("all training samples, a stratified 500 of the official test set)")


def test_one_table_per_iid_share_and_the_noniid_claim():
    """history_frame refuses a mix of IID shares; by_iid_fraction splits them; §V-C's claim (the
    gain grows with the number of non-IID clients) by hand: K = 20, shares 0 (20 non-IID) and
    0.5 (10 non-IID)."""
    recs = [_record(m, 0, [0.1, a], [0.5, 0.5], level=f, n_clients=20)
            for f, accs in ((0.0, {"fedavg": 0.4, "cafa": 0.6}), (0.5, {"fedavg": 0.5, "cafa": 0.55}))
            for m, a in accs.items()]
    with pytest.raises(ValueError, match=r"records must be runs of one IID share \(split them with by_iid_fraction"):
        S.history_frame(recs)
    split = S.by_iid_fraction(recs[::-1])
    assert list(split) == [0.0, 0.5] and all(len(v) == 2 for v in split.values())
    gains = S.gain_by_iid_fraction(recs)
    assert gains[["iid_fraction", "n_noniid", "method"]].values.tolist() == [[0.0, 20, "fedavg"], [0.5, 10, "fedavg"]]
    assert gains.gain.tolist() == pytest.approx([0.2, 0.05])
    (line,) = S.noniid_verdicts(recs)
    assert line.startswith(f"from {S.run_label(recs)}: §V-C, CAFA best - FedAvg best grows with the number of non-IID")
    assert "10 non-IID of K: +5.00 pp, 20 non-IID of K: +20.00 pp): True" in line
    flipped = [{**r, "spec": {**r["spec"], "level": 0.5 - r["spec"]["level"]}} for r in recs]
    assert S.noniid_verdicts(flipped)[0].endswith(": False")
    assert S.noniid_verdicts(split[0.0]) == []  # one share: no claim


def _authors_record(method, seed, official, level=0.0, status="ok", **spec):
    rec = _record(method, seed, official, [0.99] * len(official), fl=S.AUTHORS_FL, level=level, n_clients=20, **spec)
    rec["spec"]["fl"] = dict(S.AUTHORS_FL)
    rec.update(record_version=1, global_accuracy=0.99, key=f"{method}-{seed}-{level}-{spec}", status=status)
    if status == "failed":  # a diverged run: no history, its round kept
        rec.update(history_before_divergence=rec.pop("history"), error="diverged",
                   divergence={"round_idx": 4, "optimizer": "sgd", "lr": 0.1})
    return rec


def _write_records(root, recs):
    import json
    (root / "cafa" / "training").mkdir(parents=True, exist_ok=True)
    from fedlib import records
    for rec in recs:  # each under its spec's key, as a grid writes it
        rec["key"] = records.key_of(rec["spec"], (rec.get("versions") or {}).get("fedlib", records.__version__))
        (root / "cafa" / "training" / f"{rec['key']}.json").write_text(json.dumps(rec))


def _cafa_values(root, reading_name):
    from workbook.report import row_values
    from workbook.report_cells import cells

    return {(c.row, c.table, c.column): row_values(next(r for r in c.readings if r.name == reading_name), root=root)
            for c in cells() if c.paper == "cafa" and c.table in ("Table IV", "Table V")
            and any(r.name == reading_name for r in c.readings)}


def test_the_report_reads_cafa_training_records_of_the_authors_protocol(tmp_path):
    official = [0.5] * 29 + [0.9] + [0.6] * 120
    _write_records(tmp_path, [_authors_record(m, 0, official) for m in ("fedavg", "fedprox", "cafa")])
    ours = _cafa_values(tmp_path, "authors' protocol")
    assert ours[("cafa", "Table IV", "rounds 0–29")][0] == pytest.approx([100 * (0.5 * 29 + 0.9) / 30])  # rounds 1-30
    assert ours[("cafa", "Table IV", "rounds 30–59")][0] == pytest.approx([60.0])
    assert ours[("cafa", "Table V", "best accuracy")][0] == pytest.approx([90.0])  # official test, not the pooled 99 %


def test_the_report_reads_tables_4_and_5_over_the_seeds_every_method_finished(tmp_path):
    """IID share 0: FedAvg seeds 0, 1; FedProx seed 1; CAFA seed 1 and a diverged seed 0 → every row
    rests on seed 1 only, FedAvg's seed 0 named as left out. IID share 0.5 (beside it): FedAvg and
    FedProx seed 0, CAFA none → no row. CAFA's paper_code run (seed 1) is read against the same
    FedAvg and FedProx runs."""
    best = {0: [0.7], 1: [0.8]}
    recs = [_authors_record("fedavg", 0, best[0]), _authors_record("fedavg", 1, best[1]),
            _authors_record("fedprox", 1, [0.75]), _authors_record("cafa", 1, [0.85]),
            _authors_record("cafa", 0, [0.2], status="failed"),
            _authors_record("fedavg", 0, [0.6], level=0.5), _authors_record("fedprox", 0, [0.65], level=0.5),
            _authors_record("cafa", 1, [0.9], reproduction="paper_code")]
    _write_records(tmp_path, recs)
    at0 = _cafa_values(tmp_path, "authors' protocol")
    values, other = at0[("fedavg", "Table V", "best accuracy")]
    assert values == pytest.approx([80.0])  # seed 1 only, not the mean of 70 and 80
    assert other == ["seed 0: not finished by every method of the table (no FedProx, CAFA run)"]
    assert at0[("fedprox", "Table V", "best accuracy")] == (pytest.approx([75.0]), [])
    values, other = at0[("cafa", "Table V", "best accuracy")]
    assert values == pytest.approx([85.0]) and other[0].startswith("failed (CAFA seed 0: diverged in round 5")
    half = _cafa_values(tmp_path, "authors' protocol, IID share 0.5")
    assert half[("fedavg", "Table V", "best accuracy")] == (
        [], ["seed 0: not finished by every method of the table (no CAFA run)"])
    code = _cafa_values(tmp_path, "authors' protocol, authors' fixed-k clustering")
    assert set(code) == {("cafa", "Table IV", f"rounds {a}–{b}") for a, b in S.PAPER_WINDOWS} | {
        ("cafa", "Table V", "best accuracy")}
    assert code[("cafa", "Table V", "best accuracy")] == (pytest.approx([90.0]), [])


def test_shared_seeds_keep_the_seeds_every_method_finished():
    recs = [_authors_record("fedavg", 0, [0.7]), _authors_record("fedavg", 1, [0.8]),
            _authors_record("fedprox", 1, [0.75]), _authors_record("fedprox", 2, [0.75]),
            _authors_record("cafa", 1, [0.85]), _authors_record("cafa", 2, [0.2], status="failed")]
    assert S.shared_seeds(recs) == [1]
    assert S.shared_seeds(recs, ["fedavg", "fedprox"]) == [1]
    assert S.shared_seeds(recs, ["fedprox"]) == [1, 2]
    assert S.shared_seeds(recs, ["fedavg", "fedprox", "cafa", "local"]) == []  # a method with no run
    assert sorted((r["spec"]["method"], r["spec"]["seed"]) for r in S.shared_seed_records(recs)) == [
        ("cafa", 1), ("fedavg", 1), ("fedprox", 1)]
    # the §V-C gains read the shared seeds too: at share 0 seed 1 only (CAFA 0.85 − FedAvg 0.8)
    gains = S.gain_by_iid_fraction(recs).set_index("method").gain
    assert gains["fedavg"] == pytest.approx(0.05) and gains["fedprox"] == pytest.approx(0.1)


def test_training_specs_add_cafas_paper_code_run_only():
    specs = S.training_specs("fmnist", 400, [0.0], 20, [0, 1], ["fedavg", "fedprox", "cafa"], {}, {}, 0.2,
                             reproductions=["paper_text", "paper_code"])
    assert sorted((s.method, s.reproduction) for s in specs if s.seed == 0) == [
        ("cafa", "paper_code"), ("cafa", "paper_text"), ("fedavg", "paper_text"), ("fedprox", "paper_text")]
    code = next(s for s in specs if s.reproduction == "paper_code")
    assert code.effective()[0] == {"clustering": "fixed", "k_fixed": 6}  # the authors' train.py clustering
    plain = S.training_specs("fmnist", 400, [0.0], 20, [0], ["fedavg", "cafa"], {}, {}, 0.2)
    assert {s.reproduction for s in plain} == {"paper_text"}  # the default: the keys of the committed records
    with pytest.raises(ValueError, match="reproductions must be a non-empty list"):
        S.training_specs("fmnist", 400, [0.0], 20, [0], ["cafa"], {}, {}, 0.2, reproductions="paper_code")
    mixed = [_authors_record("cafa", 0, [0.5]), _authors_record("cafa", 0, [0.6], reproduction="paper_code")]
    with pytest.raises(ValueError, match="records must be runs of one reproduction"):
        S.history_frame(mixed)


def test_runspec_without_validation_split_is_refused_before_any_work():
    from fedlib.experiment import RunSpec
    spec = RunSpec("fmnist", "iid_fraction_classes", 0.0, 20, 0, "cafa", n_train=400)
    with pytest.raises(ValueError, match=r"val_fraction must be > 0 for method 'cafa'"):
        spec.validate()


# ----------------------------------------------------------------------------- Tables II–III records
def _cbcc_script():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cafa_cbcc.py"
    spec = importlib.util.spec_from_file_location("cafa_cbcc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cbcc_record_has_the_reports_shape_and_the_report_reads_it(tmp_path, cifar_labels):
    from workbook.report import row_values
    from workbook.report_cells import Reading
    from fedlib import records

    mod = _cbcc_script()
    spec = mod.spec_of("authors", 4, 8, 0, 1)
    assert spec == {"generator": "authors", "n_iid": 4, "n_noniid": 8, "seed": 0, "labels": "cifar10_counts",
                    "k_range": [2, 19], "repeats": 1}
    record = mod.run_one(spec, cifar_labels)
    assert set(record) == {"record_version", "spec", "status", "k", "acc", "precision", "recall", "f1", "host",
                           "versions"}
    scores = S.cbcc_case(cifar_labels, 4, 8, 0, generator="authors", repeats=1)[0]
    assert record["status"] == "ok" and record["k"] == scores["k"] and record["f1"] == scores["f1"]
    path = mod.path_of(tmp_path / "cafa" / "cbcc", spec)
    records.write(path, record)
    assert mod._done(path, spec) and not mod._done(path, {**spec, "repeats": 2})
    match = (("generator", "authors"), ("n_iid", 4), ("n_noniid", 8))
    assert row_values(Reading("authors' generator", "cafa/cbcc", match, "f1"), root=tmp_path) == ([scores["f1"]], [])
    assert row_values(Reading("authors' generator", "cafa/cbcc", match, "k"), root=tmp_path) == ([scores["k"]], [])


def test_committed_cbcc_records_cover_tables_2_and_3():
    import json
    records = [json.loads(p.read_text()) for p in sorted(S.CBCC_RECORDS.glob("*.json"))]
    have = {(r["spec"]["generator"], r["spec"]["n_iid"], r["spec"]["n_noniid"], r["spec"]["seed"])
            for r in records if r["status"] == "ok" and r["spec"]["repeats"] == S.AUTHORS_REPEATS}
    assert have == {(g, a, b, s) for g in S.GENERATORS for a, b in S.PAPER_CASES for s in (0, 1, 2)}


def test_paper_profile_trains_with_the_authors_protocol():
    import yaml
    from fedlib.paths import ROOT
    params = yaml.safe_load((ROOT / "params" / "paper" / "08_cafa.yaml").read_text())
    assert params["fl"] == S.AUTHORS_FL  # the report's Tables IV-V readings match these records
    assert S.AUTHORS_FL["fraction"] * params["n_clients"] == 6  # 6 of 20 clients per round
    specs = S.training_specs(params["dataset"], params["n_train"], params["iid_fractions"], params["n_clients"],
                             params["seeds"], params["methods"], params["hyper"], params["fl"], params["val_fraction"],
                             n_global_test=params["n_global_test"], arch=params["arch"])
    for s in specs:
        s.validate()
    assert {s.effective()[1]["optimizer"] for s in specs} == {"sgd"}
