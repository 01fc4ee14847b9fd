"""FedFomo (fedlib.methods.fedfomo): its weights, update, candidate choice and affinity on
hand-checkable inputs, two rounds rebuilt from the rules, learning and same-cluster affinity
on planted clusters, determinism, the validation requirement and bad hyperparameters."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from fedlib.engine import broadcast, flatten_params
from fedlib.methods import fedfomo, get_method, make_hyper
from fedlib.methods.base import sample_clients, take
from fl_fixtures import assert_states_close, assert_states_equal, make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def clustered(rounds=8, seed=0):
    return make_context(protocol="pathological_clusters", level=5, n_clients=10, val_fraction=0.2,
                        rounds=rounds, local_epochs=2, seed=seed)


def states_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- weights by hand
def test_scores_and_weights_by_hand():
    loss_old = [1.0, 0.5]
    loss_cand = [[0.5, 1.5, 0.0],
                 [0.7, 0.9, 0.6]]
    dist = [[1.0, 1.0, 4.0],
            [1.0, 2.0, 0.5]]
    s = fedfomo.fomo_scores(loss_old, loss_cand, dist)
    np.testing.assert_allclose(s, [[0.5, -0.5, 0.25], [-0.2, -0.2, -0.2]], rtol=1e-12)
    w = fedfomo.fomo_weights(loss_old, loss_cand, dist)
    # row 0: max(0, ·) = [0.5, 0, 0.25] → normalised [2/3, 0, 1/3]; row 1: nothing improves → zeros
    np.testing.assert_allclose(w, [[2 / 3, 0.0, 1 / 3], [0.0, 0.0, 0.0]], rtol=1e-12)
    assert w.dtype == np.float64


def test_weights_negative_improvements_give_zero_rows_normalised():
    rng = np.random.default_rng(0)
    old = rng.random(6)
    cand = rng.random((6, 4))
    dist = rng.random((6, 4)) + 0.1
    w = fedfomo.fomo_weights(old, cand, dist)
    assert (w[cand >= old[:, None]] == 0).all()  # no improvement ⇒ weight 0
    assert (w[cand < old[:, None]] > 0).all()
    sums = w.sum(1)
    improving = (cand < old[:, None]).any(1)
    np.testing.assert_allclose(sums[improving], 1.0)
    assert (sums[~improving] == 0).all()
    # the weights are the improvements per unit distance, normalised
    r = np.flatnonzero(improving)[0]
    ratio = np.maximum(old[r] - cand[r], 0) / dist[r]
    np.testing.assert_allclose(w[r], ratio / ratio.sum(), rtol=1e-12)


def test_zero_distance_and_missing_losses_give_zero_without_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero / invalid warnings either
        s = fedfomo.fomo_scores([1.0, np.nan], [[0.5, 0.2, np.nan, np.inf], [0.1, 0.2, 0.3, 0.4]],
                                [[0.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
        w = fedfomo.fomo_weights([1.0, np.nan], [[0.5, 0.2, np.nan, np.inf], [0.1, 0.2, 0.3, 0.4]],
                                 [[0.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(s, [[0.0, 0.4, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(w, [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert np.isfinite(w).all()


def test_weights_bad_inputs():
    with pytest.raises(ValueError, match="distances must be non-negative"):
        fedfomo.fomo_weights([1.0], [[0.5]], [[-1.0]])
    with pytest.raises(ValueError, match="distances must be an array of numbers of shape"):
        fedfomo.fomo_weights([1.0], [[0.5, 0.4]], [[1.0]])
    with pytest.raises(ValueError, match="loss_candidates must be an"):
        fedfomo.fomo_weights([1.0, 2.0], [[0.5]], [[1.0]])
    with pytest.raises(ValueError, match="loss_old must be a 1-D"):
        fedfomo.fomo_scores([[1.0]], [[0.5]], [[1.0]])


# ----------------------------------------------------------------------------- update by hand
def test_update_by_hand():
    own = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "steps": torch.tensor([[7], [8]])}
    cand = {"w": torch.tensor([[[3.0, 2.0], [1.0, 6.0]],
                               [[9.0, 9.0], [0.0, 0.0]]]),
            "steps": torch.tensor([[[1], [2]], [[3], [4]]])}
    out = fedfomo.fomo_update(own, cand, [[0.25, 0.75], [0.0, 0.0]])
    # row 0: θ + 0.25·([3, 2] − θ) + 0.75·([1, 6] − θ) = [1 + 0.5 + 0, 2 + 0 + 3]
    torch.testing.assert_close(out["w"][0], torch.tensor([1.5, 5.0]))
    assert torch.equal(out["w"][1], own["w"][1])  # all-zero weights: unchanged
    assert torch.equal(out["steps"], own["steps"])  # integer buffers keep θ_i
    assert out["w"].dtype == torch.float32 and own["w"][0].tolist() == [1.0, 2.0]  # input untouched


def test_all_zero_weights_keep_the_model_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    own = {"a": torch.randn(3, 5, generator=g), "b": torch.randn(3, 2, 2, generator=g)}
    cand = {"a": torch.randn(3, 4, 5, generator=g), "b": torch.randn(3, 4, 2, 2, generator=g)}
    w = fedfomo.fomo_weights([0.1, 0.2, 0.3], np.ones((3, 4)), np.ones((3, 4)))  # nobody improves
    assert (w == 0).all()
    out = fedfomo.fomo_update(own, cand, w)
    assert_states_equal(out, own)
    # one candidate with weight 1 gives that candidate
    w1 = np.zeros((3, 4))
    w1[:, 2] = 1.0
    out = fedfomo.fomo_update(own, cand, w1)
    assert_states_close(out, {k: v[:, 2] for k, v in cand.items()}, atol=1e-6)


def test_update_bad_inputs():
    own = {"w": torch.zeros(2, 3)}
    with pytest.raises(ValueError, match="candidates must be tensors"):
        fedfomo.fomo_update(own, {"w": torch.zeros(2, 2, 4)}, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="candidates must be tensors"):
        fedfomo.fomo_update(own, {"w": torch.zeros(2, 2, 3)}, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="candidates must be a state"):
        fedfomo.fomo_update(own, {"v": torch.zeros(2, 2, 3)}, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="weights must be finite"):
        fedfomo.fomo_update(own, {"w": torch.zeros(2, 2, 3)}, [[np.nan, 0], [0, 0]])


# ----------------------------------------------------------------------------- candidates, affinity
def test_choose_candidates_top_m_without_self_padded():
    p = np.array([[1.0, 0.5, -1.0, 2.0, 0.1],
                  [0.0, 1.0, 3.0, 2.0, 1.0],
                  [0.0, 0.0, 1.0, 0.0, 0.0],
                  [0.3, 0.2, 0.1, 1.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0, 1.0]])
    rng = np.random.default_rng(0)
    out = fedfomo.choose_candidates(p, [0, 1, 3], [0, 1, 2, 3], 2, rng)
    assert out.tolist() == [[3, 1], [2, 3], [0, 1]]  # ranked by P_i, itself never chosen
    out = fedfomo.choose_candidates(p, [0, 4], [0, 3], 3, rng)
    assert out.tolist() == [[3, -1, -1], [3, 0, -1]]  # the pool without itself is short: −1
    assert fedfomo.choose_candidates(p, [2], [], 2, rng).tolist() == [[-1, -1]]  # round 0: no pool


def test_choose_candidates_ties_random_but_seeded_and_epsilon_explores():
    k = 12
    p = np.eye(k)  # all others tied
    pool = np.arange(k)
    picks = [fedfomo.choose_candidates(p, [0], pool, 4, np.random.default_rng(s))[0] for s in range(6)]
    for row in picks:
        assert 0 not in row and len(set(row.tolist())) == 4
    assert len({tuple(r) for r in picks}) > 1  # ties broken at random …
    again = fedfomo.choose_candidates(p, [0], pool, 4, np.random.default_rng(3))[0]
    assert again.tolist() == picks[3].tolist()  # … from the seed
    # a clear ranking: ε = 0 always takes the top; ε = 1 follows the random shuffle
    ranked = np.zeros((k, k))
    ranked[0] = np.arange(k)[::-1]  # client 1 best, then 2, …
    top = [fedfomo.choose_candidates(ranked, [0], pool, 3, np.random.default_rng(s))[0].tolist() for s in range(5)]
    assert all(t == [1, 2, 3] for t in top)
    explored = [fedfomo.choose_candidates(ranked, [0], pool, 3, np.random.default_rng(s), epsilon=1.0)[0]
                for s in range(5)]
    assert any(e.tolist() != [1, 2, 3] for e in explored)
    assert all(0 not in e and len(set(e.tolist())) == 3 for e in explored)


def test_update_affinity_by_hand():
    p = np.eye(3)
    out = fedfomo.update_affinity(p, [0, 2], [[1, 2], [0, -1]], [[0.5, -0.25], [2.0, np.nan]])
    np.testing.assert_allclose(out, [[1.0, 0.5, -0.25], [0.0, 1.0, 0.0], [2.0, 0.0, 1.0]])
    assert (p == np.eye(3)).all()  # a new matrix
    with pytest.raises(ValueError, match="scores must be finite"):
        fedfomo.update_affinity(p, [0], [[1]], [[np.nan]])
    with pytest.raises(ValueError, match="candidates must be an"):
        fedfomo.update_affinity(p, [0], [[3]], [[1.0]])
    with pytest.raises(ValueError, match="clients must be a 1-D array of client ids"):
        fedfomo.choose_candidates(p, [5], [0], 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng must be"):
        fedfomo.choose_candidates(p, [0], [1], 1, 0)


# ----------------------------------------------------------------------------- rounds rebuilt
def test_two_rounds_rebuilt_from_the_rules():
    """Round 0 trains from the initial models (no uploads yet); round 1 downloads the top-M
    of the previous round's uploaders, weighs them on the validation split (here through
    ctx.loss_matrix, one client at a time, instead of the method's batched evaluation),
    updates and trains."""
    ctx = clustered(rounds=2)
    hp = fedfomo.Hyper(m=3)
    out = fedfomo.run(ctx, hp)
    ref = clustered(rounds=2)
    names = [n for n, _ in ref.model.named_parameters()]
    k = ref.n_clients
    local = broadcast(ref.init_state(), k)
    rng, rng_c = ref.rng("selection/group0"), ref.rng("fedfomo/candidates")
    c0 = sample_clients(rng, np.arange(k), ref.cfg.fraction)
    assert (fedfomo.choose_candidates(np.eye(k), c0, [], 3, rng_c) == -1).all()
    res = ref.train(take(local, c0), c0, 0)
    for n, v in res.params.items():
        local[n][torch.as_tensor(c0)] = v
    c1 = sample_clients(rng, np.arange(k), ref.cfg.fraction)
    cand = fedfomo.choose_candidates(np.eye(k), c1, c0, 3, rng_c)
    assert out.info["selected"] == [c0.tolist(), c1.tolist()]
    assert out.info["candidates"][1] == [[int(c) for c in row if c >= 0] for row in cand]
    loss_old = np.array([ref.loss_matrix(take(local, [i]), [i])[0][0, 0] for i in c1])
    loss_cand = np.full(cand.shape, np.nan)
    dist = np.zeros(cand.shape)
    flat = flatten_params(local, names).double()
    for r, i in enumerate(c1):
        for s, j in enumerate(cand[r]):
            if j >= 0:
                loss_cand[r, s] = ref.loss_matrix(take(local, [j]), [i])[0][0, 0]
                dist[r, s] = float((flat[j] - flat[i]).norm())
    w = fedfomo.fomo_weights(loss_old, loss_cand, dist)
    assert (w.sum(1) > 0).any()  # the round does move some model
    stacked = take(local, np.where(cand >= 0, cand, c1[:, None]).reshape(-1))
    stacked = {n: v.reshape(len(c1), cand.shape[1], *v.shape[1:]) for n, v in stacked.items()}
    start = fedfomo.fomo_update(take(local, c1), stacked, w)
    res = ref.train(start, c1, 1)
    for n, v in res.params.items():
        local[n][torch.as_tensor(c1)] = v
    assert_states_close(out.models, local, atol=1e-5)
    expected_p = fedfomo.update_affinity(np.eye(k), c1, cand, fedfomo.fomo_scores(loss_old, loss_cand, dist))
    np.testing.assert_allclose(out.info["affinity"], expected_p, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- behaviour
@pytest.fixture(scope="module")
def clustered_run():
    ctx = clustered(rounds=8)
    return ctx, fedfomo.run(ctx, fedfomo.Hyper())


def test_learns_on_planted_clusters(clustered_run):
    ctx, out = clustered_run
    acc = [h["global_accuracy"] for h in ctx.history]
    # each client holds 2 of 10 labels: chance is 0.1 over the labels, ~0.5 within a client
    assert acc[-1] > 0.8 and acc[-1] > acc[0] + 0.2, acc
    assert out.assignment.tolist() == list(range(10))
    assert all(len(v) == 10 for v in out.models.values())


def test_affinity_concentrates_on_the_same_planted_cluster(clustered_run):
    ctx, out = clustered_run
    truth = ctx.planted_clusters
    same = truth[:, None] == truth[None, :]
    np.fill_diagonal(same, False)
    other = ~same
    np.fill_diagonal(other, False)
    mass = np.array(out.info["weight_mass"])
    assert mass[same].sum() > mass[other].sum() and mass[same].sum() > 0
    p = np.array(out.info["affinity"])
    assert p[same].mean() > p[other].mean()
    top1 = np.array([row[0] for row in out.info["top_candidates"]])
    assert (truth[top1] == truth).sum() >= 8  # the best-liked peer is mostly the cluster mate


def test_info_is_json_and_complete(clustered_run):
    ctx, out = clustered_run
    info = json.loads(json.dumps(out.info))
    assert len(info["selected"]) == len(info["candidates"]) == ctx.cfg.rounds
    assert info["candidates"][0] == [[] for _ in info["selected"][0]]  # round 0: nothing to download
    assert all(len(c) <= 5 for rnd in info["candidates"] for c in rnd)
    for rnd, prev, sel in zip(info["candidates"][1:], info["selected"], info["selected"][1:]):
        for i, c in zip(sel, rnd):
            assert i not in c and set(c) <= set(prev)  # others from the previous round only
    assert np.array(info["affinity"]).shape == (10, 10) and np.array(info["weight_mass"]).shape == (10, 10)
    assert np.array(info["top_candidates"]).shape == (10, 5)


def test_same_seed_same_numbers_other_seed_other_numbers():
    a = fedfomo.run(ctx_a := clustered(rounds=3), fedfomo.Hyper(epsilon=0.3))
    b = fedfomo.run(ctx_b := clustered(rounds=3), fedfomo.Hyper(epsilon=0.3))
    assert_states_equal(a.models, b.models)
    assert a.info == b.info and ctx_a.history == ctx_b.history
    c = fedfomo.run(clustered(rounds=3, seed=1), fedfomo.Hyper(epsilon=0.3))
    assert not states_equal(a.models, c.models)


def test_selects_fedavgs_clients():
    ctx = clustered(rounds=3)
    out = fedfomo.run(ctx, fedfomo.Hyper())
    rng = clustered(rounds=3).rng("selection/group0")
    assert out.info["selected"] == [sample_clients(rng, np.arange(10), 0.5).tolist() for _ in range(3)]


# ----------------------------------------------------------------------------- validation, hyper
def test_needs_validation_and_clear_error_without_it():
    assert fedfomo.needs_validation(fedfomo.Hyper()) is True
    ctx = make_context(protocol="pathological_clusters", level=5, n_clients=10, rounds=1)
    with pytest.raises(ValueError, match="validation split must be non-empty for fedfomo"):
        fedfomo.run(ctx, fedfomo.Hyper())


def test_registry_and_defaults():
    assert get_method("fedfomo") is fedfomo
    hp = make_hyper("fedfomo", {})
    assert (hp.m, hp.epsilon, hp.epsilon_decay) == (5, 0.0, 0.05)
    assert fedfomo.GRID == {} and fedfomo.NAME == "fedfomo"


@pytest.mark.parametrize("values, match", [
    ({"m": 0}, "m must be an integer ≥ 1"),
    ({"m": 2.5}, "m must be an integer"),
    ({"m": True}, "m must be an integer"),
    ({"epsilon": 1.5}, "epsilon must be a finite number in"),
    ({"epsilon": -0.1}, "epsilon must be a finite number in"),
    ({"epsilon": "0.3"}, "epsilon must be a finite number"),
    ({"epsilon_decay": -1.0}, "epsilon_decay must be a finite number ≥ 0"),
    ({"epsilon_decay": float("nan")}, "epsilon_decay must be a finite number"),
])
def test_bad_hyper(values, match):
    with pytest.raises(ValueError, match=match):
        fedfomo.Hyper(**values)
