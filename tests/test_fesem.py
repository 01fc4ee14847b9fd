"""FeSEM (fedlib.methods.fesem): the E-step (against every centre), M-step, Forgy and k-means++
seeding, re-seeding of empty centres and the re-clustering schedule on hand-checkable inputs;
round 0 under both starts (the paper's Forgy start from round 0's clients; the labelled
all-clients start: every client's model, k-means++ and Lloyd iterations), a later round and a
re-clustering rebuilt from the rules; the planted clusters recovered, learning on a tiny real
federation, determinism and bad hyperparameters."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.engine import broadcast, flatten_params
from fedlib.evaluation import cluster_recovery
from fedlib.experiment import RunSpec
from fedlib.methods import fedprox, fesem
from fedlib.methods.base import sample_clients, take
from fl_fixtures import assert_states_close, make_context, opposite_label_groups


def final_accuracy(ctx):
    return ctx.history[-1]["global_accuracy"]


def states_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def names_of(ctx):
    return [n for n, _ in ctx.model.named_parameters()]


def planted(seed, rounds=6, **kw):
    """20 digits clients in 5 planted clusters (2 labels each), 4 trained per round."""
    return make_context(protocol="pathological_clusters", level=5, n_clients=20, rounds=rounds, seed=seed,
                        fraction=0.2, **kw)


# ----------------------------------------------------------------------------- E-step
def test_assign_nearest_by_hand_ties_to_the_lowest_index():
    centres = [[0.0, 0.0], [4.0, 0.0], [0.0, 3.0]]
    weights = [[1.0, 0.0],    # 1 from c0, 3 from c1, √10 from c2 → 0
               [3.0, 1.0],    # √10, √2, √13 → 1
               [0.0, 2.0],    # 2, √20, 1 → 2
               [2.0, 0.0],    # 2 from c0 and from c1: tie → 0
               [2.0, 1.5]]    # 2.5 from c0 and from c2, √6.25 = 2.5 from c1: three-way tie → 0
    assert fesem.assign_nearest(weights, centres).tolist() == [0, 1, 2, 0, 0]
    # a tie between the last two only goes to the lower of them
    assert fesem.assign_nearest([[2.0, 3.0]], [[9.0, 9.0], [0.0, 3.0], [4.0, 3.0]]).tolist() == [1]
    # L2, not cosine: [10, 0] is nearer [8, 8] than the parallel [1, 0]
    assert fesem.assign_nearest([[10.0, 0.0]], [[1.0, 0.0], [8.0, 8.0]]).tolist() == [1]
    # torch in, float64 distances: 1e-8 apart is still told apart
    w = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    c = torch.tensor([[1.0 + 2e-8, 0.0], [1.0 - 1e-8, 0.0]], dtype=torch.float64)
    assert fesem.assign_nearest(w, c).tolist() == [1]
    out = fesem.assign_nearest(torch.zeros(3, 2), torch.ones(1, 2))
    assert out.dtype == np.int64 and out.tolist() == [0, 0, 0]


def test_em_step_compares_a_trained_client_with_every_centre_by_hand():
    """The paper's E-step: r(i) = argmin_k ‖W_i − c_k‖ over all K centres, W_i the client's model
    after its local training; a client that trained from c_0 but landed nearer c_1 moves to
    c_1, and the M-step then averages each cluster's models (a centre without one keeps its)."""
    centres = {"w": torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 50.0]], dtype=torch.float64)}
    # both clients trained from c_0 = (0, 0): one ended at (6, 0) (4 from c_1, 6 from c_0), one at (1, 0)
    trained = {"w": torch.tensor([[6.0, 0.0], [1.0, 0.0]], dtype=torch.float64)}
    new, choice = fesem._em(centres, trained, trained["w"], ["w"], None, 1)
    assert choice.tolist() == [1, 0]
    assert new["w"].tolist() == [[1.0, 0.0], [6.0, 0.0], [0.0, 50.0]]


def test_forgy_seeds_are_the_first_k_of_a_shuffled_list():
    rng, again = np.random.default_rng(3), np.random.default_rng(3)
    cand = np.array([7, 2, 9, 4, 5])
    seeds = fesem.forgy_seeds(cand, 3, rng)
    assert seeds.dtype == np.int64 and seeds.tolist() == again.permutation(cand)[:3].tolist()
    assert len(set(seeds.tolist())) == 3 and set(seeds.tolist()) <= set(cand.tolist())
    full = fesem.forgy_seeds(cand, 5, np.random.default_rng(0))  # k = M: a permutation of them all
    assert sorted(full.tolist()) == sorted(cand.tolist())
    # every candidate is drawn first about 1/M of the time (uniform shuffle)
    firsts = np.bincount([fesem.forgy_seeds(np.arange(4), 1, np.random.default_rng(s))[0] for s in range(4000)],
                         minlength=4) / 4000
    assert np.allclose(firsts, 0.25, atol=0.03)
    with pytest.raises(ValueError, match=r"^k must be an integer in \[1, 5\], got 6$"):
        fesem.forgy_seeds(cand, 6, rng)
    with pytest.raises(ValueError, match=r"candidates must be a 1-D array of distinct integers"):
        fesem.forgy_seeds([1, 1, 2], 2, rng)


def test_squared_distances_by_hand_in_float64_over_blocks_of_rows():
    d = fesem.squared_distances([[1.0, 0.0], [3.0, 1.0]], [[0.0, 0.0], [4.0, 0.0], [0.0, 3.0]])
    np.testing.assert_array_equal(d, [[1.0, 9.0, 10.0], [10.0, 2.0, 13.0]])
    # 40 float32 rows (more than one block): the same as float64 numpy on the same values
    w = torch.arange(40 * 3, dtype=torch.float32).reshape(40, 3) / 7
    c = torch.tensor([[0.5, 1.0, 2.0], [3.0, 2.0, 1.0]], dtype=torch.float32)
    ref = ((w.double().numpy()[:, None, :] - c.double().numpy()[None]) ** 2).sum(-1)
    out = fesem.squared_distances(w, c)
    assert out.dtype == np.float64 and out.shape == (40, 2)
    np.testing.assert_array_equal(out, ref)


def test_assign_nearest_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"centres must be a \(K, 2\) array"):
        fesem.assign_nearest([[0.0, 1.0]], [[0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match="weights must be a 2-D array of finite numbers"):
        fesem.assign_nearest([0.0, 1.0], [[0.0, 1.0]])
    with pytest.raises(ValueError, match="centres must be a 2-D array of finite numbers"):
        fesem.assign_nearest([[0.0, 1.0]], [[np.nan, 1.0]])


# ----------------------------------------------------------------------------- M-step
def test_update_centres_by_hand_plain_and_sample_weighted():
    centres = {"w": torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]), "b": torch.tensor([[0.0], [0.0], [0.0]])}
    models = {"w": torch.tensor([[10.0, 0.0], [20.0, 4.0], [30.0, 8.0], [0.0, 6.0]]),
              "b": torch.tensor([[1.0], [2.0], [3.0], [4.0]])}
    plain = fesem.update_centres(centres, models, [2, 0, 2, 2])
    torch.testing.assert_close(plain["w"], torch.tensor([[20.0, 4.0], [2.0, 2.0], [40 / 3, 14 / 3]]))
    torch.testing.assert_close(plain["b"], torch.tensor([[2.0], [0.0], [8 / 3]]))  # centre 1: no member, unchanged
    weighted = fesem.update_centres(centres, models, [2, 0, 2, 2], weights=[1, 5, 3, 0])
    torch.testing.assert_close(weighted["w"], torch.tensor([[20.0, 4.0], [2.0, 2.0], [25.0, 6.0]]))
    # members of total weight 0 leave their centre unchanged
    zero = fesem.update_centres(centres, models, [1, 0, 0, 0], weights=[0, 1, 1, 1])
    torch.testing.assert_close(zero["w"][1], torch.tensor([2.0, 2.0]))
    assert centres["w"][0].tolist() == [1.0, 1.0]  # the input is not modified
    with pytest.raises(ValueError, match=r"assignment must be an integer array of shape \(4,\) with values in \[0, 3\)"):
        fesem.update_centres(centres, models, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="weights must be 4 finite non-negative numbers"):
        fesem.update_centres(centres, models, [0, 1, 2, 2], weights=[1, -1, 1, 1])


# ----------------------------------------------------------------------------- k-means++ seeding
def test_kmeans_pp_draws_by_squared_distance_to_the_chosen_seeds():
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    seeds = fesem.kmeans_pp(pts, 3, np.random.default_rng(7))
    # the same draws by hand from a generator in the same state
    rng = np.random.default_rng(7)
    first = int(rng.integers(4))
    d2 = ((pts - pts[first]) ** 2).sum(1)
    second = int(rng.choice(4, p=d2 / d2.sum()))
    d2 = np.minimum(d2, ((pts - pts[second]) ** 2).sum(1))
    third = int(rng.choice(4, p=d2 / d2.sum()))
    assert seeds.dtype == np.int64 and seeds.tolist() == [first, second, third]
    assert len(set(seeds.tolist())) == 3


def test_kmeans_pp_never_draws_a_point_on_a_chosen_seed():
    """Three groups of identical points: D² is 0 on a chosen group, so every group gets a seed
    whatever the generator (Forgy's 3 uniform draws would miss a group 3 times in 4)."""
    pts = np.repeat([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]], 10, axis=0)
    for s in range(20):
        seeds = fesem.kmeans_pp(pts, 3, np.random.default_rng(s))
        assert sorted(seeds // 10) == [0, 1, 2]
    # k = M on identical points: D² is 0 everywhere, the rest are drawn uniformly, all distinct
    same = fesem.kmeans_pp(np.zeros((4, 2)), 4, np.random.default_rng(0))
    assert sorted(same.tolist()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 4\], got 5"):
        fesem.kmeans_pp(np.zeros((4, 2)), 5, np.random.default_rng(0))


# ----------------------------------------------------------------------------- empty centres
def test_reseed_empty_moves_the_farthest_member_of_a_shared_centre():
    # centre 1 has no member; rows 0, 1, 3 share centre 0, row 2 is alone on centre 2
    d = np.array([[1.0, 50.0, 60.0],
                  [4.0, 30.0, 60.0],
                  [9.0, 40.0, 0.5],    # farthest from its centre overall, but its centre has 1 member
                  [4.0, 20.0, 60.0]])  # ties row 1 at 4.0: the lower row moves
    r, moves = fesem.reseed_empty(d, [0, 0, 2, 0])
    assert r.tolist() == [0, 1, 2, 0] and moves == [(1, 1)]
    # three empty centres in increasing order; a moved row is not moved again; the last stays
    # empty once no centre has 2 members left
    r, moves = fesem.reseed_empty([[1.0] * 4, [3.0] * 4, [2.0] * 4], [0, 0, 0])
    assert r.tolist() == [0, 1, 2] and moves == [(1, 1), (2, 2)]
    # no row left to give: rows on their centre (distance 0) or alone stay
    r, moves = fesem.reseed_empty([[0.0, 1.0], [0.0, 1.0]], [0, 0])
    assert r.tolist() == [0, 0] and moves == []
    # members outside the rows count: centre 1 is not empty, centre 0 keeps 2 with row 0 gone
    r, moves = fesem.reseed_empty([[5.0, 1.0, 1.0], [1.0, 2.0, 2.0]], [0, 1], outside=[1, 0, 0])
    assert r.tolist() == [2, 1] and moves == [(2, 0)]
    with pytest.raises(ValueError, match=r"outside must be 3 non-negative member counts"):
        fesem.reseed_empty([[5.0, 1.0, 1.0]], [0], outside=[1, 0])
    with pytest.raises(ValueError, match=r"assignment must be an integer array of shape \(1,\) with values in \[0, 3\)"):
        fesem.reseed_empty([[5.0, 1.0, 1.0]], [3])


def test_a_duplicate_centre_is_empty_and_reseeded():
    """Two identical centres: every tie goes to the lower index, the other is re-seeded."""
    pts = np.array([[0.0, 0.0], [0.2, 0.0], [10.0, 0.0], [10.5, 0.0]])
    centres = np.array([[5.0, 0.0], [5.0, 0.0]])
    d = fesem.squared_distances(pts, centres)
    r, moves = fesem.reseed_empty(d, fesem.assign_nearest(pts, centres))
    assert fesem.assign_nearest(pts, centres).tolist() == [0, 0, 0, 0]
    assert moves == [(1, 3)] and r.tolist() == [0, 0, 0, 1]  # 5.5² is the largest squared distance


# ----------------------------------------------------------------------------- schedule
def test_reclustering_schedule_is_every_tenth_round_but_the_last():
    assert [t for t in range(25) if fesem.reclusters(t, 25, 10)] == [9, 19]
    assert [t for t in range(20) if fesem.reclusters(t, 20, 10)] == [9]  # after round 20: nothing trains
    assert [t for t in range(10) if fesem.reclusters(t, 10, 10)] == []
    assert [t for t in range(4) if fesem.reclusters(t, 4, 1)] == [0, 1, 2]
    assert not any(fesem.reclusters(t, 50, 0) for t in range(50))


# ----------------------------------------------------------------------------- rounds rebuilt
def _lloyd(centres, params, flat, names, iterations=5):
    """Round 0's Lloyd iterations rebuilt: (centres, choice, moves)."""
    moves = []
    for _ in range(iterations):
        d = fesem.squared_distances(flat, flatten_params(centres, names))
        choice, moved = fesem.reseed_empty(d, np.argmin(d, axis=1))
        for j, i in moved:  # a re-seeded centre becomes its new member's model
            centres = {n: v.clone() for n, v in centres.items()}
            for n in centres:
                centres[n][j] = params[n][i]
        moves += moved
        centres = fesem.update_centres(centres, params, choice)
    return centres, choice, moves


@pytest.mark.cross_cpu
def test_round_zero_forgy_seeds_from_the_rounds_clients_and_draws_the_others_clusters():
    """The paper's start (the default): S_0 trains from w_0, the centres are the models of the
    first K of a shuffled list of S_0, 5 Lloyd iterations on S_0's models; every other client a
    uniformly drawn cluster."""
    ctx = make_context(rounds=1, fraction=0.3)
    k = 3
    out = fesem.run(ctx, fesem.Hyper(n_clusters=k))
    ref = make_context(rounds=1, fraction=0.3)
    names = names_of(ref)
    clients = sample_clients(ref.rng("selection/group0"), np.arange(10), 0.3)
    assert len(clients) == 3
    res = ref.train(broadcast(ref.init_state(), 3), clients, 0)
    flat = flatten_params(res.params, names)
    rows = fesem.forgy_seeds(np.arange(3), k, ref.rng("fesem/seeding"))
    centres, choice, moves = _lloyd(take(res.params, rows), res.params, flat, names)
    expected = ref.rng("fesem/unassigned").integers(k, size=10)
    expected[clients] = choice
    assert_states_close(out.models, centres)
    assert out.info["init"] == "forgy" and out.info["selected"] == [clients.tolist()]
    assert out.info["seeds"] == clients[rows].tolist()
    assert out.info["choices"][0] == choice.tolist()
    assert out.assignment.tolist() == expected.tolist() == out.info["cluster_of_client"]
    assert out.info["reseeded"] == [[1, j, int(clients[i])] for j, i in moves]


def test_forgy_start_refuses_more_centres_than_round_zeros_clients():
    with pytest.raises(ValueError, match=r"n_clusters must be at most the 3 clients of round 0 for init='forgy'"):
        fesem.run(make_context(rounds=1, fraction=0.3), fesem.Hyper(n_clusters=4))


@pytest.mark.cross_cpu
def test_round_zero_trains_every_client_and_runs_kmeans_on_all_their_models():
    """The labelled all-clients start (``init='clients'``, the workbook's earlier default)."""
    ctx = make_context(rounds=1, fraction=0.3)
    k = 3
    out = fesem.run(ctx, fesem.Hyper(n_clusters=k, init="clients"))
    ref = make_context(rounds=1, fraction=0.3)
    names = names_of(ref)
    res = ref.train(broadcast(ref.init_state(), 10), np.arange(10), 0)  # every client from w_0
    flat = flatten_params(res.params, names)
    seeds = fesem.kmeans_pp(flat, k, ref.rng("fesem/seeding"))
    centres = take(res.params, seeds)
    reseeded = []
    for _ in range(5):
        d = fesem.squared_distances(flat, flatten_params(centres, names))
        choice, moves = fesem.reseed_empty(d, np.argmin(d, axis=1))
        for j, i in moves:  # a re-seeded centre becomes its new member's model
            centres = {n: v.clone() for n, v in centres.items()}
            for n in centres:
                centres[n][j] = res.params[n][i]
        reseeded += [[1, j, i] for j, i in moves]
        centres = fesem.update_centres(centres, res.params, choice)
    assert_states_close(out.models, centres)
    assert out.info["selected"] == [list(range(10))] and out.info["seeds"] == seeds.tolist()
    assert out.info["choices"][0] == choice.tolist() == out.assignment.tolist()
    assert out.info["cluster_of_client"] == out.assignment.tolist() == out.info["assignment"]
    assert out.info["cluster_sizes"] == np.bincount(out.assignment, minlength=k).tolist()
    assert out.info["reclustered"] == [] and out.info["reseeded"] == reseeded


@pytest.mark.cross_cpu
def test_later_rounds_train_fedavgs_clients_from_their_centre_then_em():
    hp = fesem.Hyper(n_clusters=2, em_iterations=2, weighting="samples", init="clients")
    first = fesem.run(make_context(rounds=1, fraction=0.5), hp)
    out = fesem.run(make_context(rounds=2, fraction=0.5), hp)
    fed = fedprox.run(make_context(rounds=2, fraction=0.5), fedprox.Hyper(mu=0.0))
    assert out.info["selected"][0] == list(range(10)) and out.info["selected"][1] == fed.info["selected"][1]
    clients = np.asarray(out.info["selected"][1])
    ref = make_context(rounds=2, fraction=0.5)
    res = ref.train(take(first.models, first.assignment[clients]), clients, 1)
    names = names_of(ref)
    centres = first.models
    for _ in range(2):
        choice = fesem.assign_nearest(flatten_params(res.params, names), flatten_params(centres, names))
        centres = fesem.update_centres(centres, res.params, choice, weights=res.n_samples.double().numpy())
    assert_states_close(out.models, centres)
    assert out.info["choices"][1] == choice.tolist()
    expected = first.assignment.copy()
    expected[clients] = choice
    assert out.assignment.tolist() == expected.tolist()


@pytest.mark.cross_cpu
def test_reclustering_reassigns_the_clients_trained_since_by_their_clusters_means():
    """Re-clustering after round 2 of 3 (every 2): the clients of round 1 are compared with the
    means of each cluster's round-1 models (a cluster without one: its centre)."""
    hp, every = fesem.Hyper(n_clusters=3, init="clients"), fesem.Hyper(n_clusters=3, recluster_every=2, init="clients")
    first = fesem.run(make_context(rounds=1, fraction=0.5), hp)
    second = fesem.run(make_context(rounds=2, fraction=0.5), every)  # nothing after the last round
    assert second.info["reclustered"] == []
    out = fesem.run(make_context(rounds=3, fraction=0.5), every)
    assert out.info["reclustered"] == [2]
    fresh = np.asarray(second.info["selected"][1])
    ref = make_context(rounds=3, fraction=0.5)
    names = names_of(ref)
    res = ref.train(take(first.models, first.assignment[fresh]), fresh, 1)
    flat = flatten_params(res.params, names).double()
    member = second.assignment[fresh]
    centroids = flatten_params(second.models, names).double().clone()
    for j in np.unique(member):
        centroids[j] = flat[member == j].mean(0)
    d = fesem.squared_distances(flat, centroids)
    outside = np.bincount(np.delete(second.assignment, fresh), minlength=3)
    choice, moves = fesem.reseed_empty(d, np.argmin(d, axis=1), outside)
    expected = second.assignment.copy()
    expected[fresh] = choice
    # round 3 (index 2) then trains from the re-clustered centres and moves its own clients
    now = np.asarray(out.info["selected"][2])
    expected[now] = out.info["choices"][2]
    assert out.assignment.tolist() == expected.tolist()
    assert [m[1:] for m in out.info["reseeded"]] == [[j, int(fresh[i])] for j, i in moves]


# ----------------------------------------------------------------------------- planted groups
@pytest.mark.cross_cpu
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_planted_clusters_from_every_clients_first_model(seed):
    """5 planted clusters of 4 clients, 4 clients a round: under the all-clients start K-means
    on all 20 round-0 models finds them exactly, and the rounds keep them (Forgy from round 0's
    4 trained clients cannot: 4 centres for 5 clusters, refused)."""
    ctx = planted(seed)
    out = fesem.run(ctx, fesem.Hyper(init="clients"))
    assert cluster_recovery(out.assignment, ctx.planted_clusters) == 1.0
    assert out.info["cluster_sizes"] == [4] * 5
    assert final_accuracy(ctx) > 0.75  # each client sees 2 labels: chance is 0.5


@pytest.mark.cross_cpu
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fesem_separates_opposite_label_groups(seed):
    ctx, group = opposite_label_groups(seed=seed)
    out = fesem.run(ctx, fesem.Hyper(n_clusters=2, init="clients"))
    assert cluster_recovery(out.assignment, group) == 1.0
    assert sorted(out.info["cluster_sizes"]) == [5, 5]
    assert final_accuracy(ctx) > 0.9
    fed_ctx, _ = opposite_label_groups(seed=seed)
    fedprox.run(fed_ctx, fedprox.Hyper(mu=0.0))
    assert final_accuracy(fed_ctx) < 0.6  # one model cannot fit both groups


@pytest.mark.cross_cpu
def test_learns_on_pathological_clusters():
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=6)
    out = fesem.run(ctx, fesem.Hyper())
    assert final_accuracy(ctx) > 0.5  # chance is 0.1
    correct, n = ctx.evaluate(out.models, out.assignment)
    assert correct.sum() / n.sum() == pytest.approx(final_accuracy(ctx))  # the history ends on the outcome
    assert len(ctx.history) == 6
    coc = out.info["cluster_of_client"]
    assert len(coc) == 10 and all(type(g) is int and 0 <= g < 5 for g in coc)
    assert cluster_recovery(out.assignment, ctx.planted_clusters) > 0.3


@pytest.mark.cross_cpu
def test_same_seed_same_numbers_other_seed_other_numbers():
    runs = []
    for seed in (0, 0, 1):
        ctx = make_context(rounds=3, seed=seed)
        runs.append((fesem.run(ctx, fesem.Hyper(n_clusters=3, recluster_every=1)), ctx.history))
    (a, ha), (b, hb), (c, _) = runs
    assert a.info["reclustered"] == [1, 2]
    assert states_equal(a.models, b.models) and a.info == b.info and ha == hb
    assert a.assignment.tolist() == b.assignment.tolist()
    assert not states_equal(a.models, c.models)


# ----------------------------------------------------------------------------- hyperparameters
def test_unknown_init_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"^init must be one of \['forgy', 'clients'\], got 'random'$"):
        fesem.Hyper(init="random")
    with pytest.raises(ValueError, match=r"init must be one of \['forgy', 'clients'\], got 'random'"):
        RunSpec("fmnist", "pathological_clusters", 5, 10, 0, "fesem", hyper={"init": "random"}).validate()


def test_more_centres_than_clients_is_refused_before_training():
    with pytest.raises(ValueError, match=r"n_clusters must be at most the number of clients \(10\).*got 11"):
        fesem.run(make_context(rounds=1), fesem.Hyper(n_clusters=11))


@pytest.mark.parametrize("values, match", [
    ({"n_clusters": 0}, r"n_clusters must be an integer ≥ 1, got 0"),
    ({"n_clusters": 2.0}, r"n_clusters must be an integer ≥ 1, got 2\.0"),
    ({"em_iterations": 0}, r"em_iterations must be an integer ≥ 1, got 0"),
    ({"em_iterations": "1"}, r"em_iterations must be an integer ≥ 1, got '1'"),
    ({"init_em_iterations": -1}, r"init_em_iterations must be an integer ≥ 1, got -1"),
    ({"init": "kmeans++"}, r"init must be one of \['forgy', 'clients'\], got 'kmeans\+\+'"),
    ({"recluster_every": -1}, r"recluster_every must be an integer ≥ 0, got -1"),
    ({"weighting": "uniform"}, r"weighting must be one of \['plain', 'samples'\], got 'uniform'"),
])
def test_bad_hyper(values, match):
    with pytest.raises(ValueError, match=match):
        fesem.Hyper(**values)


def test_defaults():
    hp = fesem.Hyper()
    assert (hp.n_clusters, hp.em_iterations, hp.init_em_iterations, hp.init, hp.recluster_every, hp.weighting) == \
        (5, 1, 5, "forgy", 10, "plain")
    assert fesem.GRID == {} and fesem.NAME == "fesem"
    assert all(callable(getattr(fesem, n)) or n in ("NAME", "GRID", "INITS", "ESTEPS") for n in fesem.__all__)


# ----------------------------------------------------------------------------- issue 69: stays, update directions
def test_assign_by_update_by_hand_cosine_to_the_clusters_mean_updates():
    u = np.array([[1.0, 0.1], [1.0, -0.1], [0.1, 1.0], [0.9, 0.2]])
    # clusters [0, 0, 1, 1]: m_0 = (1, 0), m_1 = (0.5, 0.6); row 3 is nearer m_0 in angle and moves
    np.testing.assert_array_equal(fesem.assign_by_update(u, np.array([0, 0, 1, 1]), 3), [0, 0, 1, 0])
    # a cluster without a row (2) is no candidate; the scale of an update does not matter
    np.testing.assert_array_equal(fesem.assign_by_update(u * [[5.0], [1], [1], [0.1]], np.array([0, 0, 1, 1]), 3),
                                  [0, 0, 1, 0])
    # re-clustering from scratch: two directions found whatever the labels, named by the best overlap
    np.testing.assert_array_equal(fesem.recluster_by_update(u, np.array([1, 0, 0, 1]), 2), [1, 1, 0, 1])
    np.testing.assert_array_equal(fesem.recluster_by_update(u, np.array([1, 1, 1, 1]), 2), [1, 1, 0, 1])
    # k = 3 groups from 4 rows: seeds row 0, row 2 (farthest), row 1 (next farthest); {0, 3} keeps label 2
    np.testing.assert_array_equal(fesem.recluster_by_update(u, np.array([2, 2, 0, 2]), 3), [2, 1, 0, 2])
    with pytest.raises(ValueError, match="assignment must be"):
        fesem.assign_by_update(u, np.array([0, 0, 3, 1]), 3)
    with pytest.raises(ValueError, match="estep must be one of"):
        fesem.Hyper(estep="cosine")


def _window_replay(info):
    """The stay count replayed from a record's info: E-steps of rounds ≥ 1 of a client whose
    previous E-step (round ≥ 1) lies in the same re-clustering window."""
    last, kept, total = {}, 0, 0
    for t, (sel, ch) in enumerate(zip(info["selected"], info["choices"])):
        for i, c in zip(sel, ch):
            if t >= 1 and i in last and last[i][0] >= 1 and not any(last[i][0] < v <= t for v in info["reclustered"]):
                kept, total = kept + (c == last[i][1]), total + 1
            last[i] = (t, c)
    return [kept, total]


@pytest.mark.cross_cpu
@pytest.mark.parametrize("seed", [0, 1])
def test_update_direction_variant_recovers_planted_clusters_where_the_paper_rule_keeps_its_start(seed):
    """Issue 69: a client trained from its centre stays nearest it, so the paper's E-step keeps
    the grouping of its (random) start; clustering the update directions finds the planted one."""
    kw = dict(protocol="pathological_clusters", level=5, n_clients=20, rounds=12, seed=seed, fraction=0.5)
    ctx = make_context(**kw)
    paper = fesem.run(ctx, fesem.Hyper(recluster_every=5))
    variant = fesem.run(make_context(**kw), fesem.Hyper(recluster_every=5, estep="update_cosine"))
    assert cluster_recovery(paper.assignment, ctx.planted_clusters) < 0.6
    assert cluster_recovery(variant.assignment, ctx.planted_clusters) == 1.0
    assert variant.info["estep"] == "update_cosine" and paper.info["estep"] == "distance"
    # the paper's rule: almost every re-assignment keeps the cluster the client trained from
    kept, total = paper.info["stay"]["e_step"]
    assert total == 11 * 10 and kept / total > 0.9
    for out in (paper, variant):  # the window count is the one a record's choices replay
        assert out.info["stay"]["window"] == _window_replay(out.info)
        assert out.info["stay_rate"] == out.info["stay"]["window"][0] / out.info["stay"]["window"][1]
