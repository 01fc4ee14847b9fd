"""Issue 44's partitions beyond label skew: quantity skew, very small clients, attribute skew on a
named column, covariate (input-transform) groups and joint label–rotation groups. Every one plants
groups; each test checks that the planted groups are what the partition drew."""
import numpy as np
import pytest

from fedlib import partition as P
from fedlib.experiment import RunSpec, build_federation


def _labels(n_per_class=60, n_classes=10):
    return np.repeat(np.arange(n_classes), n_per_class)


def _disjoint(parts, n):
    flat = np.concatenate(parts)
    assert np.unique(flat).size == flat.size and flat.min() >= 0 and flat.max() < n


def test_every_protocol_beyond_label_skew_is_registered_and_plants_groups():
    for name in P.BEYOND_LABEL_PROTOCOLS:
        assert name in P.PROTOCOLS and P.PROTOCOLS[name].planted is not None
    assert P.planted_clusters("dirichlet", 6, 0.5) is None  # label-skew protocols plant none


def test_quantity_skew_tiers_are_the_planted_groups_and_labels_stay_balanced():
    y = _labels()
    parts = P.partition(y, "quantity_skew", 12, 0.0, seed=3)
    _disjoint(parts, y.size)
    assert sum(map(len, parts)) == y.size  # every sample used
    truth = P.planted_clusters("quantity_skew", 12, 0.0)
    np.testing.assert_array_equal(truth, np.arange(12) % 3)
    sizes = np.array([len(p) for p in parts])
    # sigma = 0: exact tiers, each 4x the next (to the per-class rounding of 10 classes)
    for g in range(3):
        assert np.ptp(sizes[truth == g]) <= 10
    assert sizes[truth == 0].mean() > 3 * sizes[truth == 1].mean() > 9 * sizes[truth == 2].mean() / 3
    # the label mix of every client is the pooled one up to rounding: one class count per client differs by ≤ 1
    counts = P.label_counts(y, parts)
    assert np.all(counts.max(axis=1) - counts.min(axis=1) <= 1)


def test_quantity_skew_sigma_spreads_sizes_within_tiers_and_is_seeded():
    y = _labels(200)
    a = P.quantity_skew(y, 9, 0.8, 1)
    b = P.quantity_skew(y, 9, 0.8, 1)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    sizes = np.array([len(p) for p in a])
    assert np.ptp(sizes[np.arange(9) % 3 == 0]) > 10  # no longer exact tiers


@pytest.mark.parametrize("kwargs, name", [
    (dict(sigma=-1.0), "sigma"), (dict(sigma=0.1, n_tiers=0), "n_tiers"),
    (dict(sigma=0.1, tier_ratio=0.5), "tier_ratio"), (dict(sigma=0.1, n_clients=2), "n_clients"),
])
def test_quantity_skew_refuses_bad_parameters_by_name(kwargs, name):
    args = {"n_clients": 6, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=f"^{name} must be"):
        P.quantity_skew(_labels(), **args)


def test_quantity_skew_too_small_a_client_is_infeasible():
    with pytest.raises(P.InfeasiblePartitionError, match="fewer than 2 samples"):
        P.quantity_skew(_labels(10, 2), 6, 0.0, 0, tier_ratio=50.0)


def test_small_clients_first_share_is_small_and_planted():
    y = _labels(100)
    parts = P.partition(y, "small_clients", 10, 0.3, seed=2)
    _disjoint(parts, y.size)
    truth = P.planted_clusters("small_clients", 10, 0.3)
    np.testing.assert_array_equal(truth, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    sizes = np.array([len(p) for p in parts])
    assert np.all((sizes[truth == 1] >= 5) & (sizes[truth == 1] <= 20))
    assert np.all(sizes[truth == 0] == sizes[truth == 0][0]) and sizes[truth == 0][0] > 20
    assert P.planted_clusters("small_clients", 10, 0.0).sum() == 0
    with pytest.raises(ValueError, match="^small_share must be"):
        P.small_clients(y, 4, 0.9, 0)  # rounds to 4 small clients of 4
    with pytest.raises(ValueError, match=r"^small_size\[1\] must be"):
        P.small_clients(y, 4, 0.25, 0, small_size=(5, 3))


def _tabular(n=800, seed=0):
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 90, size=n).astype(np.float32)
    other = rng.normal(size=n).astype(np.float32)
    onehot = (rng.random(n) < 0.3).astype(np.float32)
    y = (rng.random(n) < (age - 17) / 73).astype(np.int64)  # income rises with age
    return np.column_stack([age, other, onehot]), ("age", "hours", "sex=Male"), y


def test_attribute_skew_pure_clients_hold_only_their_age_quartile():
    x, names, y = _tabular()
    parts = P.partition(y, "attribute_skew", 8, 1.0, seed=0, features=x, feature_names=names)
    _disjoint(parts, y.size)
    truth = P.planted_clusters("attribute_skew", 8, 1.0)
    np.testing.assert_array_equal(truth, np.arange(8) % 4)
    bins = P.attribute_bins(x[:, 0], 4)
    for i, p in enumerate(parts):
        assert np.all(bins[p] == truth[i])  # purity 1: only the own bin
    assert len({len(p) for p in parts}) == 1
    # labels fall as they fall: the oldest quartile's clients have more positives than the youngest
    assert y[parts[3]].mean() > y[parts[0]].mean() + 0.3


def test_attribute_skew_purity_zero_gives_the_pooled_bin_mix():
    x, names, y = _tabular()
    parts = P.attribute_skew(y, 4, 0.0, 0, features=x, feature_names=names)
    bins = P.attribute_bins(x[:, 0], 4)
    pooled = np.bincount(bins, minlength=4) / y.size
    for p in parts:
        np.testing.assert_allclose(np.bincount(bins[p], minlength=4) / p.size, pooled, atol=2 / p.size)


def test_attribute_skew_refuses_bad_inputs_by_name():
    x, names, y = _tabular()
    with pytest.raises(ValueError, match="^attribute must be"):
        P.attribute_skew(y, 4, 1.0, 0, features=x, feature_names=names, attribute="income")
    with pytest.raises(ValueError, match="^features must be"):
        P.attribute_skew(y, 4, 1.0, 0)
    with pytest.raises(ValueError, match="^purity must be"):
        P.attribute_skew(y, 4, 1.5, 0, features=x, feature_names=names)
    with pytest.raises(ValueError, match="^n_bins must be"):  # a binary column has 2 quantile bins, not 4
        P.attribute_skew(y, 4, 1.0, 0, features=x, feature_names=names, attribute="sex=Male")


def test_adult_attribute_skew_through_build_federation():
    spec = RunSpec(dataset="adult", protocol="attribute_skew", level=1.0, n_clients=4, seed=0, method="fedavg",
                   n_train=2000)
    fed, counts, ds = build_federation(spec, "cpu")
    age = ds.feature_names.index("age")
    means = [float(fed.x[p, age].mean()) for p in fed.train_parts]
    assert means == sorted(means)  # clients 0..3 hold the age quartiles in order
    assert counts[:, 1].tolist() != sorted(counts[:, 1].tolist(), reverse=True)  # labels not flat


def test_covariate_groups_have_identical_label_histograms():
    y = _labels(61)
    for protocol in ("rotated_groups", "brightness_groups", "noise_groups"):
        parts = P.partition(y, protocol, 8, 4, seed=1)
        _disjoint(parts, y.size)
        counts = P.label_counts(y, parts)
        assert np.all(counts == counts[0])
        np.testing.assert_array_equal(P.planted_clusters(protocol, 8, 4), np.arange(8) % 4)
        np.testing.assert_array_equal(P.transform_group_of_client(protocol, 8, 4), np.arange(8) % 4)
    with pytest.raises(ValueError, match="^n_groups must be"):
        P.covariate_groups(y, 10, 5, 0)


def test_joint_label_rotation_plants_label_times_rotation_groups():
    y = _labels(40)
    parts = P.partition(y, "joint_label_rotation", 8, 2, seed=0)
    truth = P.planted_clusters("joint_label_rotation", 8, 2)
    np.testing.assert_array_equal(truth, [0, 1, 2, 3, 0, 1, 2, 3])
    rot = P.transform_group_of_client("joint_label_rotation", 8, 2)
    np.testing.assert_array_equal(rot, [0, 0, 1, 1, 0, 0, 1, 1])
    counts = P.label_counts(y, parts)
    for i in range(8):  # label group i mod 2 holds classes 0-4 or 5-9 only
        held = np.flatnonzero(counts[i])
        np.testing.assert_array_equal(held, np.arange(5) + 5 * (i % 2))
    # label histograms separate the label groups only: clients 0 and 2 (rotations differ) are equal
    np.testing.assert_array_equal(counts[0], counts[2])


def test_transform_inputs_rotates_exactly_per_group():
    rng = np.random.default_rng(0)
    x = rng.random((6, 1, 4, 4)).astype(np.float32)
    parts = [np.array([0, 1]), np.array([2, 3]), np.array([4])]
    out = P.transform_inputs(x, parts, np.array([0, 1, 2]), "rot90")
    np.testing.assert_array_equal(out[:2], x[:2])
    np.testing.assert_array_equal(out[2, 0], np.rot90(x[2, 0]))  # exact: a permutation of pixels
    np.testing.assert_array_equal(out[4, 0], x[4, 0, ::-1, ::-1])  # two quarter turns
    np.testing.assert_array_equal(out[5], x[5])  # in no client: unchanged
    np.testing.assert_array_equal(x, np.asarray(x))  # input untouched
    bright = P.transform_inputs(x, parts, np.array([0, 1, 2]), "brightness")
    np.testing.assert_allclose(bright[2], 0.75 * x[2])
    noisy = P.transform_inputs(x, parts, np.array([0, 1, 2]), "noise", seed=5)
    np.testing.assert_array_equal(noisy, P.transform_inputs(x, parts, np.array([0, 1, 2]), "noise", seed=5))
    assert not np.array_equal(noisy[2], x[2]) and noisy.min() >= 0 and noisy.max() <= 1
    with pytest.raises(ValueError, match="^kind must be"):
        P.transform_inputs(x, parts, np.array([0, 1, 2]), "blur")
    with pytest.raises(ValueError, match="^group_of_client must be"):
        P.transform_inputs(x, parts, np.array([0, 1]), "rot90")


def test_rotated_fmnist_through_build_federation_turns_each_group():
    spec = RunSpec(dataset="fmnist", protocol="rotated_groups", level=4, n_clients=8, seed=0, method="fedavg",
                   n_train=800)
    fed, counts, ds = build_federation(spec, "cpu")
    assert np.all(counts.sum(0) > 0)
    x0 = np.asarray(ds.x_train)
    for i in range(8):
        idx = fed.train_parts[i]
        np.testing.assert_array_equal(fed.x[idx].numpy(), np.rot90(x0[idx], k=i % 4, axes=(2, 3)))


@pytest.mark.parametrize("protocol, level, name", [
    ("quantity_skew", -0.5, "sigma"), ("attribute_skew", 1.5, "purity"), ("small_clients", 1.0, "small_share"),
    ("rotated_groups", 5, "n_groups"), ("joint_label_rotation", 0, "n_groups"),
])
def test_runspec_refuses_an_out_of_range_level_before_loading_data(protocol, level, name):
    """The range its registry entry declares (fedlib.partition.PROTOCOLS)."""
    with pytest.raises(ValueError, match=rf"^level must be .* for the {protocol} protocol \(its {name}\), got"):
        RunSpec(dataset="adult", protocol=protocol, level=level, n_clients=8, seed=0, method="fedavg").validate()
