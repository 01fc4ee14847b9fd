"""Issue 44's PSI extensions: attribute PSI over quantile bins of the pooled marginal, image summary
statistics, joint label–attribute bins, the size feature and small-client weights, their Laplace
noise, and Clust-PSI-PFL's clustering-step options. The key check: on rotated images with identical
label histograms, label PSI cannot separate the rotation groups and attribute PSI does (ARI = 1)."""
import numpy as np
import pytest

from fedlib import noniid as N
from fedlib import partition as P
from fedlib.clustering import (attribute_features, kmeans_labels, psi_features, select_n_clusters,
                               small_client_weights, with_size_feature)
from fedlib.evaluation import cluster_recovery
from fedlib.methods.clust_psi_pfl import Hyper, attribute_histograms, cluster_clients
from fedlib.privacy import server_attribute_histograms


# ----------------------------------------------------------------------------- hand-computed PSI
def test_psi_per_feature_by_hand():
    # feature 0: client A [3, 1], B [1, 3]: pooled [1/2, 1/2]; PSI = 1/4 ln 3 each (eps = 0)
    # feature 1: both [2, 2]: PSI 0
    counts = np.array([[[3, 1], [2, 2]], [[1, 3], [2, 2]]])
    got = N.psi_per_feature(counts, eps=0.0)
    np.testing.assert_allclose(got, [[np.log(3) / 4, 0.0], [np.log(3) / 4, 0.0]])
    np.testing.assert_allclose(N.attribute_psi(counts, eps=0.0), [np.log(3) / 8] * 2)
    # weighted by n_i: A has 4, C has 12 samples
    counts = np.array([[[4, 0]], [[6, 6]]])  # pooled [10/16, 6/16]
    p_a = (1 - 10 / 16) * np.log(1 / (10 / 16)) + 0.0  # bin 1 term: (0 − 6/16)·ln(0/(6/16)) = inf at eps = 0
    eps = 1e-6
    obs_a, obs_c, exp = np.array([1, 0]) + eps, np.array([.5, .5]) + eps, np.array([10, 6]) / 16 + eps
    psi_a = np.sum((obs_a - exp) * np.log(obs_a / exp))
    psi_c = np.sum((obs_c - exp) * np.log(obs_c / exp))
    assert psi_a > p_a  # the empty bin dominates, as for an absent class
    np.testing.assert_allclose(N.wapsi(counts), (4 * psi_a + 12 * psi_c) / 16)


def test_quantile_bins_of_the_pooled_marginal():
    v = np.array([[1.0, 0], [2, 0], [3, 1], [4, 0], [5, 1], [6, 0], [7, 0], [8, 1]])
    b = N.quantile_bins(v, 4)
    np.testing.assert_array_equal(b[:, 0], [0, 0, 1, 1, 2, 2, 3, 3])  # edges 2.75, 4.5, 6.25
    np.testing.assert_array_equal(b[:, 1], v[:, 1])  # a binary column: its two values, two bins
    with pytest.raises(ValueError, match="^n_bins must be"):
        N.quantile_bins(v, 0)


def test_attribute_and_joint_counts_by_hand():
    bins = np.array([[0], [1], [1], [0]])
    y = np.array([0, 0, 1, 1])
    parts = [np.array([0, 1]), np.array([2, 3])]
    np.testing.assert_array_equal(N.attribute_counts(bins, parts, 2), [[[1, 1]], [[1, 1]]])
    # joint cell = class·B + bin: client 0 has (0,0), (0,1); client 1 (1,1), (1,0)
    np.testing.assert_array_equal(N.joint_counts(y, bins, parts, 2, 2), [[[1, 1, 0, 0]], [[0, 0, 1, 1]]])
    # attribute PSI sees no difference here, joint PSI does (the labels differ)
    assert np.allclose(N.attribute_psi(N.attribute_counts(bins, parts, 2)), 0)
    assert np.all(N.attribute_psi(N.joint_counts(y, bins, parts, 2, 2)) > 1)


def test_image_summaries_by_hand_and_quarter_turns_permute_quadrants():
    img = np.zeros((1, 1, 4, 4))
    img[0, 0, :2, :2] = 1.0  # ink in the top-left quadrant only
    s = N.image_summaries(img)
    np.testing.assert_allclose(s[0], [0.25, np.sqrt(0.25 * 0.75), 1, 0, 0, 0])
    turned = N.image_summaries(np.rot90(img, 1, axes=(2, 3)))  # counter-clockwise: top-left → bottom-left
    np.testing.assert_allclose(turned[0], [0.25, np.sqrt(0.25 * 0.75), 0, 0, 1, 0])
    with pytest.raises(ValueError, match="^x must be"):
        N.image_summaries(np.zeros((2, 1, 1, 4)))


# ----------------------------------------------------------------------------- size and weights
def test_size_feature_and_small_client_weights():
    np.testing.assert_allclose(with_size_feature(np.zeros((3, 1)), [1, np.e, 10])[:, 1], [0, 1, np.log(10)])
    np.testing.assert_allclose(small_client_weights([5, 100, 200, 400]), [5 / 150, 100 / 150, 1, 1])
    np.testing.assert_allclose(small_client_weights([5, 100], reference=10), [0.5, 1])
    with pytest.raises(ValueError, match="^sizes must be"):
        small_client_weights([0, 3])


def test_downweighting_keeps_a_tiny_outlier_from_forming_its_own_cluster():
    # two clear groups and one tiny client far away: unweighted K-means at j=2 may split it off
    x = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2], [40.0]])
    w = small_client_weights([100, 100, 100, 100, 100, 100, 1])
    lab = kmeans_labels(x, 2, 0, 10, w)
    assert lab[0] == lab[1] == lab[2] != lab[3] == lab[4] == lab[5]
    plain = kmeans_labels(x, 2, 0, 10)
    assert plain[6] != plain[0] and plain[0] == plain[3]  # without weights the outlier is its own cluster


# ----------------------------------------------------------------------------- the key check
def _rotated_toy(n_clients=8, per_client=24, seed=0):
    """Hand-built 8×8 images: a 3×3 block of ink in the top rows, left of centre for class 0 and
    right of it for class 1 (so every image has the same mean and s.d.; only where the ink is
    differs); identical label histograms per client; group g = i mod 4 turned by g quarter turns."""
    y = np.repeat(np.arange(2), per_client * n_clients // 2)
    x = np.zeros((y.size, 1, 8, 8), dtype=np.float32)
    for j, c in enumerate(y):
        x[j, 0, :3, 1 + 3 * c:4 + 3 * c] = 1.0
    parts = P.covariate_groups(y, n_clients, 4, seed)
    truth = P.planted_clusters("rotated_groups", n_clients, 4)
    x_fed = P.transform_inputs(x, parts, P.transform_group_of_client("rotated_groups", n_clients, 4), "rot90")
    return x_fed, y, parts, truth


def test_rotated_groups_label_psi_cannot_separate_and_attribute_psi_does():
    x, y, parts, truth = _rotated_toy()
    counts = P.label_counts(y, parts)
    assert np.all(counts == counts[0])  # identical label histograms
    label_feats = psi_features(counts)
    assert np.all(label_feats == label_feats[0])  # hence identical label-PSI descriptors
    label_sel = select_n_clusters(label_feats)
    assert label_sel.degenerate and label_sel.tau == 1
    assert cluster_recovery(label_sel.labels, truth) == 0.0

    hist = attribute_histograms(x, y, parts, "attribute", 4, 2)
    assert hist.shape == (8, 6, 4)
    attr_sel = select_n_clusters(attribute_features(hist))
    assert attr_sel.tau == 4
    assert cluster_recovery(attr_sel.labels, truth) == 1.0
    # the method's clustering step gives the same, and joint bins separate them too
    lab, info = cluster_clients(counts, Hyper(features="attribute", n_bins=4), hist)
    assert cluster_recovery(lab, truth) == 1.0 and info["features"] == "attribute"
    lab, _ = cluster_clients(counts, Hyper(), hist)  # features='label' ignores the attribute histograms
    assert cluster_recovery(lab, truth) == 0.0
    joint = attribute_histograms(x, y, parts, "joint", 4, 2)
    assert joint.shape == (8, 6, 8)
    assert cluster_recovery(cluster_clients(counts, Hyper(features="joint", n_bins=4), joint)[0], truth) == 1.0


def test_size_feature_recovers_quantity_tiers_where_label_psi_cannot():
    y = np.repeat(np.arange(4), 400)
    parts = P.quantity_skew(y, 9, 0.0, 0, n_tiers=3, tier_ratio=4.0)
    truth = P.planted_clusters("quantity_skew", 9, 0.0, n_tiers=3)
    counts = P.label_counts(y, parts)
    lab, info = cluster_clients(counts, Hyper(size_feature=True))
    assert cluster_recovery(lab, truth) == 1.0 and info["size_feature"] is True
    lab_plain, _ = cluster_clients(counts, Hyper())
    assert cluster_recovery(lab_plain, truth) < 1.0


def test_attribute_histograms_get_laplace_noise_of_scale_f_over_epsilon():
    hist = np.full((2, 3, 4), 50.0)
    np.testing.assert_array_equal(server_attribute_histograms(hist, None, 0), hist)
    a = server_attribute_histograms(hist, 1.0, 7)
    np.testing.assert_array_equal(a, server_attribute_histograms(hist, 1.0, 7))  # seeded
    assert a.shape == hist.shape and np.all(a >= 0) and not np.array_equal(a, hist)
    big = np.full((1, 3, 20000), 1e6)  # the noise's mean absolute deviation is its scale F/ε = 3/0.5 = 6
    dev = np.abs(server_attribute_histograms(big, 0.5, 1) - big).mean()
    assert 5.7 < dev < 6.3
    r = server_attribute_histograms(hist, 2.0, 3, "round")
    assert np.array_equal(r, np.rint(r))
    with pytest.raises(ValueError, match="^epsilon must be"):
        server_attribute_histograms(hist, 0.0, 0)
    lab, info = cluster_clients(np.ones((2, 2)), Hyper(features="attribute", tau=1, dp_epsilon=1.0), hist)
    assert info["dp_epsilon"] == 1.0


def test_standardize_false_lets_the_size_column_recover_quantity_tiers():
    # 10 classes of uneven sizes: the small tier's label histograms carry rounding noise in every class
    # column; standardised, those columns weigh as much as ln n_i and hide the tiers
    y = np.random.default_rng(0).integers(0, 10, 3000)
    parts = P.quantity_skew(y, 15, 0.2, 0)
    truth = P.planted_clusters("quantity_skew", 15, 0.2)
    counts = P.label_counts(y, parts)
    raw, info = cluster_clients(counts, Hyper(size_feature=True, standardize=False))
    assert cluster_recovery(raw, truth) == 1.0 and info["standardize"] is False
    assert cluster_recovery(cluster_clients(counts, Hyper(size_feature=True))[0], truth) < 0.5
    with pytest.raises(ValueError, match="^standardize must be"):
        Hyper(standardize="no")


def test_hyper_options_are_validated_by_name():
    for bad, name in ((dict(features="pixels"), "features"), (dict(n_bins=1), "n_bins"),
                      (dict(size_feature="yes"), "size_feature"), (dict(downweight_small=1), "downweight_small")):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            Hyper(**bad)
    with pytest.raises(ValueError, match="^histograms must be"):
        cluster_clients(np.ones((3, 2)), Hyper(features="attribute"))


@pytest.mark.cross_cpu  # run() trains one round after clustering (the assignment does not depend on it)
def test_run_computes_the_histograms_from_the_federations_train_inputs():
    import sys
    import os
    sys.path.insert(0, os.path.dirname(__file__))
    from fl_fixtures import digits
    from fedlib.engine import Federation
    from fedlib.methods import FLConfig
    from fedlib.methods.base import Context
    from fedlib.methods.clust_psi_pfl import run
    from fedlib.models import build_model

    x, y = digits()
    parts = P.covariate_groups(y, 8, 4, 0)
    truth = P.planted_clusters("rotated_groups", 8, 4)
    x = P.transform_inputs(x.reshape(-1, 1, 8, 8), parts, P.transform_group_of_client("rotated_groups", 8, 4), "rot90")
    train, test = P.train_test_split(parts, 0)
    fed = Federation.from_arrays(x, y, train, test, "cpu", n_classes=10)
    ctx = Context(fed=fed, model=build_model("logistic", 10, fed.input_shape), cfg=FLConfig(rounds=1, local_epochs=1),
                  seed=0, counts_train=P.label_counts(y, train, 10), true_clusters=truth)
    out = run(ctx, Hyper(features="joint", standardize=False))
    assert out.info["features"] == "joint"
    # run() bins the federation's train inputs exactly as attribute_histograms does
    direct, _ = cluster_clients(ctx.counts_train, Hyper(features="joint", standardize=False),
                                attribute_histograms(x, y, train, "joint", 10, 10))
    np.testing.assert_array_equal(out.info["assignment"], direct)
    assert out.info["tau"] > 1


def test_per_bin_terms_keep_which_bins_a_client_over_holds():
    from fedlib.noniid import psi_per_bin, psi_per_class, psi_per_feature
    # one feature, 4 bins; client 0 holds the low bins, client 1 the high ones, client 2 the pool's mix
    hist = np.array([[[40, 40, 10, 10]], [[10, 10, 40, 40]], [[25, 25, 25, 25]]], dtype=float)
    per_feature = psi_per_feature(hist)
    assert per_feature[0, 0] == pytest.approx(per_feature[1, 0])  # equally far from the pool: one magnitude
    terms = psi_per_bin(hist)
    assert terms.shape == (3, 4)
    # label PSI's per-class terms, bins for classes, signed by over- (+) or under-holding (−)
    np.testing.assert_allclose(np.abs(terms), psi_per_class(hist[:, 0, :]))
    np.testing.assert_allclose(np.abs(terms).sum(axis=1), per_feature[:, 0])
    assert np.all(np.sign(terms[0]) == [1, 1, -1, -1]) and np.all(np.sign(terms[1]) == [-1, -1, 1, 1])
    np.testing.assert_allclose(terms[2], 0, atol=1e-9)  # the pool's own mix
    assert not np.allclose(terms[0], terms[1])  # the signed terms tell the two apart
    feats = attribute_features(hist, terms="bin")
    assert feats.shape == (3, 5) and np.allclose(feats[:, 1:], terms)
    assert attribute_features(hist).shape == (3, 2)
    # two planted groups on opposite sides of one feature: per feature one cluster, per bin both
    groups = np.repeat(hist[:2], 4, axis=0) + 0.2 * (np.arange(8) % 2)[:, None, None]  # 8 clients, small jitter
    truth = np.repeat([0, 1], 4)
    lab, info = cluster_clients(np.ones((8, 2)), Hyper(features="attribute", attribute_terms="bin", tau=2,
                                                       standardize=False), groups)
    assert cluster_recovery(lab, truth) == 1.0 and info["attribute_terms"] == "bin"
    lab, _ = cluster_clients(np.ones((8, 2)), Hyper(features="attribute", tau=2, standardize=False), groups)
    assert cluster_recovery(lab, truth) < 0.5  # per feature the two sides look alike
    with pytest.raises(ValueError, match="^attribute_terms must be"):
        Hyper(attribute_terms="cell")
    with pytest.raises(ValueError, match="^terms must be"):
        attribute_features(hist, terms="cells")
