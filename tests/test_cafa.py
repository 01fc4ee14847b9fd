"""CAFA (fedlib.methods.cafa): CBCC (Eqs. 1–8), ABFA (Eqs. 9–10), Eq. 11, the CAFA partition
(fedlib.partition.iid_fraction_classes), the method on a tiny real federation, its errors,
and the notebook-08 study helpers (fedlib.analysis.cafa_study)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib import partition as P
from fedlib.analysis import cafa_study as S
from fedlib.engine import Federation
from fedlib.methods import Context, FLConfig, cafa
from fedlib.models import build_model
from fl_fixtures import digits, make_context


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
    scores, res, truth = S.cbcc_case(cifar_labels, 20, 0.5, 0)
    assert scores["recall"] == 1.0 and scores["acc"] >= 0.9
    assert truth.sum() == 10 and res.iid_mask[truth].all()


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
    for s in specs:
        s.validate()
    with pytest.raises(ValueError, match="val_fraction must be"):
        S.training_specs("fmnist", 400, 0.0, 20, [0], ["cafa"], {}, {}, 0.0)


def test_runspec_without_validation_split_is_refused_before_any_work():
    from fedlib.experiment import RunSpec
    spec = RunSpec("fmnist", "iid_fraction_classes", 0.0, 20, 0, "cafa", n_train=400)
    with pytest.raises(ValueError, match=r"val_fraction must be > 0 for method 'cafa'"):
        spec.validate()
