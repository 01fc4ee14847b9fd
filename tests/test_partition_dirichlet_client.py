"""fedlib.partition.dirichlet_client: FedPrism §4.2's per-client Dirichlet class mixes."""
import numpy as np
import pytest

from fedlib import experiment as X
from fedlib import partition as P


def balanced_labels(n_per_class=2000, n_classes=10, seed=0):
    y = np.repeat(np.arange(n_classes), n_per_class)
    return np.random.default_rng(seed).permutation(y)


def shares(y, parts):
    counts = P.label_counts(y, parts)
    return counts / counts.sum(axis=1, keepdims=True)


def test_equal_sizes_remainder_dropped_and_disjoint():
    y = balanced_labels(103, 7)  # N = 721, K = 20: n = 36, 1 sample dropped
    parts = P.dirichlet_client(y, 20, 0.3, seed=0)
    assert len(parts) == 20
    assert {len(p) for p in parts} == {721 // 20}
    every = np.concatenate(parts)
    assert len(np.unique(every)) == every.size == 20 * (721 // 20)
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    assert every.min() >= 0 and every.max() < y.size


def test_same_seed_same_partition_other_seed_other():
    y = balanced_labels(300)
    a = P.dirichlet_client(y, 30, 0.5, seed=3)
    b = P.dirichlet_client(y, 30, 0.5, seed=3)
    c = P.dirichlet_client(y, 30, 0.5, seed=4)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not all(np.array_equal(u, v) for u, v in zip(a, c))


def test_small_alpha_one_or_two_dominant_classes_large_alpha_near_uniform():
    """§4.2: "α = 0.1 yields an extreme non-IID regime, where clients typically contain one or
    two dominant classes"; α = 100 draws class mixes close to uniform (1/C each)."""
    y = balanced_labels()  # 10 classes × 2000, K = 50 clients of 400
    skewed = np.sort(shares(y, P.dirichlet_client(y, 50, 0.1, seed=0)), axis=1)[:, ::-1]
    top2 = skewed[:, :2].sum(axis=1)
    assert np.median(top2) > 0.75  # most clients: one or two classes hold > 3/4 of their data
    assert np.mean(top2 > 0.6) > 0.8
    flat = shares(y, P.dirichlet_client(y, 50, 100.0, seed=0))
    assert flat.min() > 0.0 and flat.max() < 0.2  # every client holds every class, none dominates
    assert np.median(np.abs(flat - 0.1).max(axis=1)) < 0.05


def test_client_mix_follows_its_own_drawn_proportions():
    """Client i's class mix is drawn from its own p_i (the rng's K Dirichlet draws after the
    class pools' shuffles), up to multinomial noise and the shortages of classes that run out
    near the end: close to its own p_i, far from another client's."""
    y = balanced_labels()
    parts = P.dirichlet_client(y, 50, 0.1, seed=0)
    rng = np.random.default_rng(0)
    for c in range(10):
        rng.permutation(np.flatnonzero(y == c))
    mix = rng.dirichlet(np.full(10, 0.1), size=50)
    got = shares(y, parts)
    own = 0.5 * np.abs(got - mix).sum(axis=1)  # total variation
    other = 0.5 * np.abs(got - np.roll(mix, 1, axis=0)).sum(axis=1)
    assert own.mean() < 0.2 and other.mean() > 0.6
    assert np.mean(got.argmax(axis=1) == mix.argmax(axis=1)) > 0.75


def test_a_class_that_runs_out_is_renormalised_away():
    """A class smaller than the clients' demand for it is used up and the clients fill their
    quota from the classes left (the rule the paper leaves open)."""
    y = np.concatenate([np.zeros(10, int), np.ones(500, int), np.full(490, 2)])  # class 0: 10 samples
    parts = P.dirichlet_client(y, 10, 100.0, seed=0)  # each client wants ~1/3 of 100 from class 0
    counts = P.label_counts(y, parts)
    assert counts[:, 0].sum() == 10  # all of class 0 used, none twice
    assert (counts.sum(axis=1) == 100).all()


def test_dispatch_runspec_and_metrics():
    y = balanced_labels(200)
    a = P.partition(y, "dirichlet_client", 10, 0.5, seed=2)
    b = P.dirichlet_client(y, 10, 0.5, seed=2)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert P.PROTOCOLS["dirichlet_client"].level_name == "alpha"
    assert P.planted_clusters("dirichlet_client", 10, 0.5) is None
    spec = X.RunSpec("fmnist", "dirichlet_client", 0.1, 100, 0, "fedavg")
    spec.validate()
    with pytest.raises(ValueError, match=r"level must be a number > 0 for the dirichlet_client protocol \(its alpha\), got 0"):
        X.RunSpec("fmnist", "dirichlet_client", 0.0, 100, 0, "fedavg").validate()


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=0.0), r"alpha must be a finite number > 0 .*got 0\.0"),
    (dict(alpha=float("nan")), r"alpha must be .*got nan"),
    (dict(alpha="0.1"), r"alpha must be .*got '0\.1'"),
    (dict(alpha=True), r"alpha must be .*got True"),
    (dict(n_clients=0), r"n_clients must be an integer ≥ 1, got 0"),
    (dict(n_clients=2.5), r"n_clients must be an integer ≥ 1, got 2\.5"),
    (dict(n_clients=31), r"n_clients=31 needs at least 31 samples .*dataset has 30"),
    (dict(seed=-1), r"seed must be an integer in \[0, 4294967295\], got -1"),
    (dict(labels=np.array([0.5, 1.0])), r"labels must be integer class ids"),
])
def test_bad_inputs_are_named(kwargs, match):
    args = dict(labels=balanced_labels(10, 3), n_clients=3, alpha=0.1, seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        P.dirichlet_client(**args)


def test_mixes_are_what_the_partition_drew_and_gave():
    """dirichlet_client_mixes returns the same draw's p_i and the class counts the parts hold."""
    y = np.repeat(np.arange(4), [30, 20, 40, 10])
    parts = P.dirichlet_client(y, 5, 0.3, 7)
    mix, counts = P.dirichlet_client_mixes(y, 5, 0.3, 7)
    assert mix.shape == (5, 4) and np.allclose(mix.sum(axis=1), 1)
    assert np.array_equal(counts, P.label_counts(y, parts, 4))
    assert (counts.sum(axis=1) == 20).all()  # n = ⌊100 / 5⌋
