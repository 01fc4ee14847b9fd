"""Client-selection baselines: PoC, HACCS, FedCLS (pure rules by hand, then end to end on digits)."""
import dataclasses

import numpy as np
import pytest

from fedlib.methods import get_method, make_hyper
from fedlib.methods import fedcls, haccs, poc
from fl_fixtures import make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

SELECTION = ["poc", "haccs", "fedcls"]


def run(name, ctx, **hyper):
    return get_method(name).run(ctx, make_hyper(name, hyper))


@pytest.mark.parametrize("module, field, grid", [
    (poc, "d", (6, 8, 10, 16)), (haccs, "rho", (0.1, 0.5, 0.95)), (fedcls, "tau", (0.1, 0.5, 0.95))])
def test_table_ii_defaults_and_grids(module, field, grid):
    assert module.GRID == {field: grid}
    default = {f.name: f.default for f in dataclasses.fields(module.Hyper)}[field]
    assert default == {"d": 8, "rho": 0.95, "tau": 0.1}[field]


def test_hyper_validation():
    with pytest.raises(ValueError, match="d must"):
        poc.Hyper(d=0)
    with pytest.raises(ValueError, match="rho"):
        haccs.Hyper(rho=1.5)
    with pytest.raises(ValueError, match="variant"):
        haccs.Hyper(variant="x")
    with pytest.raises(ValueError, match="variant"):
        fedcls.Hyper(variant="x")


# --- PoC -------------------------------------------------------------------------------

def test_candidate_distribution_is_the_data_share():
    p = poc.candidate_distribution([10, 30, 60])
    np.testing.assert_allclose(p, [0.1, 0.3, 0.6])
    assert p.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        poc.candidate_distribution([0, 0])


def test_draw_candidates_distinct_and_proportional():
    rng = np.random.default_rng(0)
    p = poc.candidate_distribution([10, 30, 60])
    assert sorted(poc.draw_candidates(rng, p, 3)) == [0, 1, 2]
    first = np.bincount([poc.draw_candidates(rng, p, 1)[0] for _ in range(20000)], minlength=3) / 20000
    np.testing.assert_allclose(first, p, atol=0.015)


def test_top_m_picks_the_highest_losses():
    losses = np.array([0.3, 2.0, 0.1, 1.5, 2.0])
    assert poc.top_m(losses, 3).tolist() == [1, 4, 3]  # ties: earlier position first
    assert poc.top_m(losses, 1).tolist() == [1]
    with pytest.raises(ValueError):
        poc.top_m(losses, 6)


def test_effective_d_is_raised_to_m_and_capped_at_k():
    assert poc.effective_d(8, 5, 10) == 8
    assert poc.effective_d(8, 50, 100) == 50   # Table II's d=8 with K=100, q=0.5
    assert poc.effective_d(16, 5, 10) == 10


def test_poc_with_d_equal_k_trains_exactly_the_top_m_losses():
    ctx = make_context(rounds=1)
    losses = poc.local_losses(ctx, ctx.init_state(), np.arange(10))
    out = run("poc", ctx, d=10)
    expected = np.argsort(-losses)[:5]
    assert out.info["selected"][0] == expected.tolist()
    assert out.info["d_effective"] == 10 and out.info["m"] == 5


def test_round_sizes_under_both_d_policies_by_hand():
    assert poc.round_sizes(8, 50, 100, "raise") == (50, 50)  # Table II's d = 8 at K = 100, q = 0.5
    assert poc.round_sizes(8, 50, 100, "min") == (8, 8)      # the authors' code: only the 8 train
    assert poc.round_sizes(60, 50, 100, "min") == (60, 50)   # d ≥ m: the policies agree
    assert poc.round_sizes(60, 50, 100, "raise") == (60, 50)
    assert poc.round_sizes(16, 5, 10, "min") == (10, 5)      # capped at K
    with pytest.raises(ValueError, match="d_policy must be one of"):
        poc.round_sizes(8, 5, 10, "max")


def test_poc_min_policy_trains_only_the_d_candidates_highest_loss_first():
    ctx = make_context(rounds=1)  # K = 10, m = 5
    out = run("poc", ctx, d=3, d_policy="min")
    assert len(out.info["selected"][0]) == 3
    assert out.info["d_effective"] == 3 and out.info["m_trained"] == 3 and out.info["d_policy"] == "min"
    losses = poc.local_losses(ctx, ctx.init_state(), out.info["selected"][0])
    assert list(losses) == sorted(losses, reverse=True)  # the candidates, highest loss first
    raised = run("poc", make_context(rounds=1), d=3)
    assert len(raised.info["selected"][0]) == 5 and raised.info["m_trained"] == 5


def test_poc_records_a_clamped_d():
    ctx = make_context(rounds=1, fraction=0.9)
    out = run("poc", ctx, d=6)
    assert out.info["d"] == 6 and out.info["d_effective"] == 9


# --- HACCS -----------------------------------------------------------------------------

def test_hellinger_matrix_by_hand():
    p = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    h = haccs.hellinger_matrix(p)
    half = np.sqrt(0.5 * ((np.sqrt(0.5) - 1) ** 2 + 0.5))  # H([1,0], [.5,.5]) ≈ 0.5412
    np.testing.assert_allclose(h, [[0, 1, half], [1, 0, half], [half, half, 0]], atol=1e-12)


def test_noise_to_singletons():
    assert haccs.noise_to_singletons([0, -1, 1, -1, 0]).tolist() == [0, 2, 1, 3, 0]
    assert haccs.noise_to_singletons([-1, -1]).tolist() == [0, 1]


@pytest.mark.parametrize("variant", ["psi", "original"])
def test_haccs_clusters_identical_distributions_and_isolates_noise(variant):
    counts = np.array([[10, 0, 0]] * 5 + [[0, 10, 0]] * 5 + [[0, 0, 10], [5, 5, 0]])
    counts[:5] *= np.arange(1, 6)[:, None]  # same pmf, different sizes
    labels = haccs.cluster_clients(counts, variant, min_samples=5)
    assert len(set(labels[:5])) == 1 and len(set(labels[5:10])) == 1 and labels[0] != labels[5]
    assert len(set(labels)) == 4  # the two noise points are singletons of their own
    assert set(labels[10:]).isdisjoint(labels[:10]) and labels[10] != labels[11]
    assert sorted(set(labels)) == [0, 1, 2, 3]


def test_cluster_probabilities_mix_speed_and_squared_loss():
    latency, loss = np.array([1.0, 2.0, 4.0]), np.array([3.0, 1.0, 1.0])
    speed = np.array([1, 0.5, 0.25]) / 1.75
    loss_sq = np.array([9, 1, 1]) / 11
    for rho in (0.0, 0.3, 0.95, 1.0):
        p = haccs.cluster_probabilities(latency, loss, rho)
        assert p.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(p, rho * speed + (1 - rho) * loss_sq)
    gaps = [np.abs(haccs.cluster_probabilities(latency, loss, r) - loss_sq).sum() for r in (1.0, 0.5, 0.1, 0.0)]
    assert np.all(np.diff(gaps) < 0) and gaps[-1] == pytest.approx(0.0)  # ρ → 0: loss decides
    np.testing.assert_allclose(haccs.cluster_probabilities(latency, [0, 0, 0], 0.0), [1 / 3] * 3)


def test_weighted_order_is_a_permutation_drawn_by_probability():
    rng = np.random.default_rng(0)
    p = np.array([0.6, 0.0, 0.3, 0.1])
    orders = np.array([haccs.weighted_order(rng, p) for _ in range(5000)])
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders[:50])
    assert np.all(orders[:, -1] == 1)  # zero probability: always last
    np.testing.assert_allclose(np.bincount(orders[:, 0], minlength=4) / 5000, p, atol=0.02)


def test_round_robin_by_hand():
    ranked = [np.array([0, 1]), np.array([2]), np.array([3, 4, 5])]
    assert haccs.round_robin([2, 0, 1], ranked, 5).tolist() == [3, 0, 2, 4, 1]
    assert haccs.round_robin([2, 0, 1], ranked, 6).tolist() == [3, 0, 2, 4, 1, 5]
    with pytest.raises(ValueError):
        haccs.round_robin([2, 0, 1], ranked, 7)


def test_haccs_select_takes_the_fastest_member_of_each_cluster():
    labels = np.array([0, 0, 0, 1, 1, 1, 2])
    latency = np.random.default_rng(3).uniform(*haccs.LATENCY_RANGE, size=7)
    picked = haccs.select(np.random.default_rng(3), labels, np.ones(7), 0.5, 3)
    expected = {int(np.flatnonzero(labels == c)[np.argmin(latency[labels == c])]) for c in range(3)}
    assert set(picked.tolist()) == expected
    more = haccs.select(np.random.default_rng(4), labels, np.ones(7), 0.5, 6)
    assert len(set(more.tolist())) == 6


# --- FedCLS ----------------------------------------------------------------------------

def test_hamming_and_leader_groups_on_hand_made_label_vectors():
    v = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1], [0, 0, 0, 1]])
    d = fedcls.hamming_matrix(v)
    assert d.tolist() == [[0, 1, 4, 3], [1, 0, 3, 4], [4, 3, 0, 1], [3, 4, 1, 0]]
    labels, leaders = fedcls.leader_groups(d, threshold=1)
    assert labels.tolist() == [0, 0, 1, 1] and leaders.tolist() == [0, 2]
    labels, leaders = fedcls.leader_groups(d, threshold=0)
    assert labels.tolist() == [0, 1, 2, 3]
    labels, _ = fedcls.leader_groups(d, threshold=3)  # client 3 is 3 from leader 0: joins it
    assert labels.tolist() == [0, 0, 1, 0]


def test_label_vectors_psi_compares_frequencies_original_presence():
    counts = np.array([[5, 5, 0, 0], [2, 8, 0, 0], [10, 10, 0, 0], [0, 0, 3, 1]])
    psi = fedcls.hamming_matrix(fedcls.label_vectors(counts, "psi"))
    orig = fedcls.hamming_matrix(fedcls.label_vectors(counts, "original"))
    assert psi[0].tolist() == [0, 2, 0, 4]   # same shares as client 2; 2 shares differ from 1
    assert orig[0].tolist() == [0, 0, 0, 4]  # same label set as clients 1, 2


def test_farthest_first_by_hand():
    x = np.array([0.0, 1.0, 5.0, 9.0])
    d = np.abs(x[:, None] - x[None])
    assert fedcls.farthest_first(np.random.default_rng(0), d, 0).tolist() == [0, 3, 2, 1]
    assert fedcls.farthest_first(np.random.default_rng(0), d, 2).tolist() == [2, 0, 3, 1]
    tie = np.array([[0, 2, 2], [2, 0, 1], [2, 1, 0]])  # from 0, groups 1 and 2 tie
    seconds = {fedcls.farthest_first(np.random.default_rng(s), tie, 0)[1] for s in range(20)}
    assert seconds == {1, 2}


def test_fedcls_select_prefers_complementary_groups():
    labels = np.array([0, 0, 1, 1, 2, 2])
    group_dist = np.array([[0, 1, 4], [1, 0, 3], [4, 3, 0]])  # groups 0, 1 nearly alike
    for seed in range(20):
        picked = fedcls.select(np.random.default_rng(seed), labels, group_dist, 2)
        groups = set(labels[picked].tolist())
        assert 2 in groups and len(groups) == 2  # always the complementary pair with group 2
        assert len(set(fedcls.select(np.random.default_rng(seed), labels, group_dist, 6))) == 6


# --- end to end ------------------------------------------------------------------------

@pytest.mark.parametrize("name", SELECTION)
def test_selection_methods_learn_and_select_m_distinct_clients(name):
    ctx = make_context(rounds=8)
    out = run(name, ctx)
    assert ctx.history[-1]["global_accuracy"] > 0.3  # chance is 0.1
    assert out.assignment.tolist() == [0] * 10 and len(next(iter(out.models.values()))) == 1
    assert len(out.info["selected"]) == 8
    assert all(len(s) == 5 and len(set(s)) == 5 for s in out.info["selected"])


@pytest.mark.parametrize("variant", ["psi", "original"])
@pytest.mark.parametrize("name", ["haccs", "fedcls"])
def test_grouping_methods_cover_both_label_clusters_every_round(name, variant):
    ctx = make_context(protocol="pathological_clusters", level=2, rounds=2)  # clusters: k % 2
    out = run(name, ctx, variant=variant)
    assert out.info["variant"] == variant
    if name == "haccs":
        assert out.info["clusters"] == [k % 2 for k in range(10)]
    for s in out.info["selected"]:
        assert len(set(s)) == 5 and {k % 2 for k in s} == {0, 1}
