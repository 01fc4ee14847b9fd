"""fedlib.partition: protocol semantics, disjointness, seeding and input validation."""
import numpy as np
import pytest

from fedlib import noniid, partition as P


def balanced_labels(n_per_class=300, n_classes=10, seed=0):
    y = np.repeat(np.arange(n_classes), n_per_class)
    return np.random.default_rng(seed).permutation(y)


def assert_disjoint(parts, n=None):
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx), "client index sets overlap"
    if n is not None:
        assert len(allidx) == n, "not every sample was assigned"
    for p in parts:
        assert p.dtype == np.int64


# ----------------------------------------------------------------------------- Dirichlet
def test_dirichlet_covers_disjoint_min_size_and_seeded():
    y = balanced_labels()
    parts = P.dirichlet(y, 20, 0.3, seed=1)
    assert len(parts) == 20
    assert_disjoint(parts, n=len(y))
    assert min(map(len, parts)) >= 10
    again = P.dirichlet(y, 20, 0.3, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = P.dirichlet(y, 20, 0.3, seed=2)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


def test_dirichlet_skew_decreases_with_alpha():
    y = balanced_labels()
    w = [np.median([noniid.wpsi(P.label_counts(y, P.dirichlet(y, 20, a, s))) for s in range(5)])
         for a in (0.1, 1.0, 100.0)]
    assert w[0] > w[1] > w[2]
    assert w[2] < 0.05  # near-IID


def test_dirichlet_balancing_caps_client_growth():
    # with balancing, a client that reached N/K gets no further classes: no client can exceed
    # N/K by more than one class's worth of samples.
    y = balanced_labels(200, 10)
    for s in range(5):
        parts = P.dirichlet(y, 10, 0.1, seed=s)
        assert max(map(len, parts)) <= len(y) / 10 + 200


def test_dirichlet_infeasible_raises_naming_alpha_k_and_dataset():
    y = balanced_labels(15, 2)  # 30 samples, K=3 needs 10 each: only a near-even draw works
    with pytest.raises(P.InfeasiblePartitionError, match=r"K=3 clients.*alpha=0\.01.*'tiny' \(N=30\)"):
        P.dirichlet(y, 3, 0.01, seed=0, max_draws=5, dataset_name="tiny")
    assert issubclass(P.InfeasiblePartitionError, ValueError)


@pytest.mark.parametrize("alpha", [0, -1.0, float("nan"), float("inf")])
def test_dirichlet_rejects_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha must be"):
        P.dirichlet(balanced_labels(), 10, alpha, seed=0)


def test_more_clients_than_samples_fails_before_work():
    y = np.array([0, 1, 0, 1, 1])
    with pytest.raises(ValueError, match="n_clients=6.*dataset has 5"):
        P.similarity(y, 6, 0.5, seed=0)
    with pytest.raises(ValueError, match="n_clients=2.*needs at least 20"):
        P.dirichlet(y, 2, 1.0, seed=0)


def test_bad_labels_and_seed():
    with pytest.raises(ValueError, match="1-D"):
        P.dirichlet(np.zeros((4, 2), int), 2, 1.0, seed=0)
    with pytest.raises(ValueError, match="integer class ids"):
        P.similarity(np.array([0.5, 1.5]), 1, 0.5, seed=0)
    with pytest.raises(ValueError, match="seed"):
        P.similarity(balanced_labels(), 2, 0.5, seed=-3)
    with pytest.raises(ValueError, match="empty"):
        P.similarity(np.array([], int), 2, 0.5, seed=0)


# ----------------------------------------------------------------------------- Similarity
def test_similarity_s1_is_iid_and_s0_is_label_sorted():
    y = balanced_labels(100, 10)
    iid = P.similarity(y, 10, 1.0, seed=0)
    assert_disjoint(iid, n=len(y))
    assert noniid.wpsi(P.label_counts(y, iid)) < 0.1
    sorted_parts = P.similarity(y, 10, 0.0, seed=0)
    counts = P.label_counts(y, sorted_parts)
    # 1000 samples, 10 per class-block of 100: each client holds exactly one class
    assert np.all((counts > 0).sum(1) == 1)
    assert sorted(counts.argmax(1)) == list(range(10))


def test_similarity_sizes_and_remainders_dropped():
    y = balanced_labels(101, 3)  # N=303
    parts = P.similarity(y, 10, 0.5, seed=3)
    n_iid = round(0.5 * 303)
    expected = n_iid // 10 + (303 - n_iid) // 10
    assert all(len(p) == expected for p in parts)
    assert_disjoint(parts)


def test_similarity_skew_falls_as_s_rises():
    y = balanced_labels(200, 10)
    w = [noniid.wpsi(P.label_counts(y, P.similarity(y, 20, s, seed=0))) for s in (0.0, 0.3, 0.7, 1.0)]
    assert w == sorted(w, reverse=True) and w[0] > w[-1]


@pytest.mark.parametrize("s", [-0.1, 1.01, float("nan"), "0.5"])
def test_similarity_rejects_s_outside_unit_interval(s):
    with pytest.raises(ValueError, match=r"s must be a number in \[0, 1\]"):
        P.similarity(balanced_labels(), 10, s, seed=0)


# ----------------------------------------------------------------------------- pathological
def test_shards_two_per_client_give_at_most_two_classes():
    y = balanced_labels(100, 10)
    parts = P.shards(y, 10, 2, seed=0)
    assert_disjoint(parts, n=1000)
    assert np.all((P.label_counts(y, parts) > 0).sum(1) <= 2)


def test_classes_per_client_exact_and_all_classes_used():
    y = balanced_labels(100, 10)
    parts = P.classes_per_client(y, 20, 3, seed=0)
    counts = P.label_counts(y, parts)
    assert_disjoint(parts, n=1000)
    assert np.all((counts > 0).sum(1) == 3)
    with pytest.raises(ValueError, match="n_classes_per_client"):
        P.classes_per_client(y, 20, 11, seed=0)


def test_pathological_clusters_own_disjoint_labels():
    y = balanced_labels(100, 10)
    parts = P.pathological_clusters(y, 20, seed=0, n_clusters=5)
    counts = P.label_counts(y, parts)
    cl = P.cluster_of_client(20, 5)
    assert_disjoint(parts, n=1000)
    for c in range(5):
        held = np.flatnonzero(counts[cl == c].sum(0))
        assert len(held) == 2
        assert np.all(counts[cl == c][:, held] > 0)  # every member holds both labels
        others = counts[cl != c][:, held]
        assert others.sum() == 0


def test_noisy_clusters_add_one_outside_label_to_some_clients():
    y = balanced_labels(100, 10)
    parts = P.noisy_clusters(y, 40, seed=0, n_clusters=5, p_noise=0.5)
    counts = P.label_counts(y, parts)
    n_labels = (counts > 0).sum(1)
    assert set(n_labels) == {2, 3}
    assert 8 <= (n_labels == 3).sum() <= 32  # ~Binomial(40, 0.5)
    assert_disjoint(parts, n=1000)


def test_dispatch_and_unknown_protocol():
    y = balanced_labels()
    a = P.partition(y, "dirichlet", 10, 0.5, seed=4)
    b = P.dirichlet(y, 10, 0.5, seed=4)
    assert all(np.array_equal(x, z) for x, z in zip(a, b))
    with pytest.raises(ValueError, match="unknown protocol 'iid'.*dirichlet"):
        P.partition(y, "iid", 10, 0.5, seed=0)


# ----------------------------------------------------------------------------- helpers
def test_train_test_split_is_80_20_disjoint_and_seeded():
    y = balanced_labels()
    parts = P.dirichlet(y, 10, 1.0, seed=0)
    tr, te = P.train_test_split(parts, seed=0)
    for p, a, b in zip(parts, tr, te):
        assert len(np.intersect1d(a, b)) == 0
        assert np.array_equal(np.sort(np.concatenate([a, b])), p)
        assert len(b) == round(0.2 * len(p))
    tr2, te2 = P.train_test_split(parts, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(te, te2))
    _, te3 = P.train_test_split(parts, seed=1)
    assert not all(np.array_equal(a, b) for a, b in zip(te, te3))
    with pytest.raises(ValueError, match="test_fraction"):
        P.train_test_split(parts, seed=0, test_fraction=1.0)


def test_label_counts_matrix():
    y = np.array([0, 1, 2, 2, 1, 0, 0])
    counts = P.label_counts(y, [np.array([0, 1, 2]), np.array([3, 4, 5, 6])], n_classes=4)
    assert counts.tolist() == [[1, 1, 1, 0], [2, 1, 1, 0]]
    with pytest.raises(ValueError, match="n_classes=2"):
        P.label_counts(y, [np.arange(7)], n_classes=2)


# ----------------------------------------------------------------------------- CAFA, the authors' generator
def test_cafa_authors_planted_truth_sizes_and_classes():
    y = balanced_labels(n_per_class=500)  # N = 5,000
    n_iid, n_non = 6, 18  # K = 24: s = 208, the last client 208 + 8
    parts = P.cafa_authors(y, n_iid, n_non, seed=3)
    assert len(parts) == 24 and all(p.dtype == np.int64 for p in parts)
    sizes = [len(p) for p in parts]
    assert sizes[:-1] == [5000 // 24] * 23 and sizes[-1] == 5000 // 24 + 5000 % 24
    assert all(len(np.unique(p)) == len(p) for p in parts)  # no sample twice within a client
    assert_disjoint(parts[:n_iid])  # IID clients: blocks of one permutation
    counts = P.label_counts(y, parts, 10)
    held = (counts > 0).sum(axis=1)
    assert (held[:n_iid] == 10).all()  # IID clients: random subsets, every class
    assert (counts[:n_iid] / counts[:n_iid].sum(axis=1, keepdims=True)).max() < 0.2
    assert ((held[n_iid:] >= 1) & (held[n_iid:] <= 2)).all()  # non-IID: 1–2 classes
    assert set(held[n_iid:].tolist()) == {1, 2}
    # max_classes raises the ceiling
    held3 = (P.label_counts(y, P.cafa_authors(y, 0, 30, seed=0, max_classes=3), 10) > 0).sum(axis=1)
    assert held3.max() == 3 and held3.min() >= 1


def test_cafa_authors_shares_are_dirichlet():
    # two-class clients' smaller share: E[min(p, 1 − p)] = 1/2 − 1/π ≈ 0.182 for p ~ Beta(0.5, 0.5)
    # (Dirichlet(0.5) over two classes); ≈ 0.39 for skew 10 (near-even shares)
    y = np.repeat(np.arange(10), 20_000)
    def minority(skew):
        counts = P.label_counts(y, P.cafa_authors(y, 0, 400, seed=0, skew=skew), 10)
        two = counts[(counts > 0).sum(axis=1) == 2]
        assert len(two) > 150
        return float(np.mean(np.sort(two, axis=1)[:, -2] / two.sum(axis=1)))
    assert abs(minority(0.5) - (0.5 - 1 / np.pi)) < 0.03
    assert minority(10.0) > 0.35


def test_cafa_authors_is_seeded_and_keeps_its_order():
    y = balanced_labels(n_per_class=500)
    a = P.cafa_authors(y, 5, 15, seed=7)
    b = P.cafa_authors(y, 5, 15, seed=7)
    c = P.cafa_authors(y, 5, 15, seed=8)
    assert all(np.array_equal(x, z) for x, z in zip(a, b))
    assert not all(np.array_equal(x, z) for x, z in zip(a, c))
    # only IID clients: blocks of one permutation, disjoint and covering the data
    assert_disjoint(P.cafa_authors(y, 10, 0, seed=0), n=len(y))


@pytest.mark.parametrize("args, kwargs, match", [
    ((-1, 15), {}, r"n_iid must be an integer ≥ 0, got -1"),
    ((5, 1.5), {}, r"n_noniid must be an integer ≥ 0, got 1.5"),
    ((0, 0), {}, r"n_iid \+ n_noniid must be ≥ 1 \(at least one client\), got 0"),
    ((5, 15), {"max_classes": 0}, r"max_classes must be an integer in \[1, 10\], got 0"),
    ((5, 15), {"max_classes": 11}, r"max_classes must be an integer in \[1, 10\], got 11"),
    ((5, 15), {"skew": 0}, r"skew must be a finite number > 0, got 0"),
    ((1, 1), {}, r"n_iid \+ n_noniid must be large enough .* 1500 samples fit in the smallest class \(300"),
    ((1, 1), {"seed": -1}, r"seed"),
])
def test_cafa_authors_bad_input(args, kwargs, match):
    y = balanced_labels()  # 300 per class
    kw = {"seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        P.cafa_authors(y, *args, **kw)


def test_cafa_authors_only_iid_clients_need_no_class_capacity():
    y = balanced_labels()  # 300 per class: two clients of 1,500 are fine when both are IID
    parts = P.cafa_authors(y, 2, 0, seed=0)
    assert [len(p) for p in parts] == [1500, 1500]
