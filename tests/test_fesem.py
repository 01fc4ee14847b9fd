"""FeSEM (fedlib.methods.fesem): the E-step and M-step on hand-checkable inputs, rounds rebuilt
from the rules, the planted groups recovered, learning on a tiny real federation, determinism
and bad hyperparameters."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.engine import broadcast, flatten_params
from fedlib.evaluation import cluster_recovery
from fedlib.experiment import RunSpec
from fedlib.methods import fedprox, fesem
from fedlib.methods.base import take
from fl_fixtures import assert_states_close, make_context, opposite_label_groups

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def final_accuracy(ctx):
    return ctx.history[-1]["global_accuracy"]


def states_equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


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


# ----------------------------------------------------------------------------- rounds rebuilt
def test_first_round_is_forgy_from_trained_models_then_five_em_iterations():
    ctx = make_context(rounds=1, fraction=0.5)
    k = 3
    out = fesem.run(ctx, fesem.Hyper(n_clusters=k))
    ref = make_context(rounds=1, fraction=0.5)
    names = [n for n, _ in ref.model.named_parameters()]
    clients = np.asarray(out.info["selected"][0])
    res = ref.train(broadcast(ref.init_state(), len(clients)), clients, 0)  # everyone from w_0
    rows = np.sort(ref.rng("fesem/forgy").choice(len(clients), size=k, replace=False))
    centres = take(res.params, rows)
    flat = flatten_params(res.params, names).double()
    for _ in range(5):
        choice = fesem.assign_nearest(flat, flatten_params(centres, names))
        centres = fesem.update_centres(centres, res.params, choice)
    assert_states_close(out.models, centres)
    assert out.info["choices"][0] == choice.tolist()
    # the selected keep their E-step cluster; the others take their lowest-train-loss centre
    others = np.setdiff1d(np.arange(10), clients)
    loss, _, _ = ref.loss_matrix(out.models, others, split="train")
    assert out.assignment[clients].tolist() == choice.tolist()
    assert out.assignment[others].tolist() == np.argmin(loss, axis=0).tolist()
    assert out.info["cluster_of_client"] == out.assignment.tolist() == out.info["assignment"]
    assert out.info["cluster_sizes"] == np.bincount(out.assignment, minlength=k).tolist()
    assert out.info["never_selected"] == others.tolist()


def test_second_round_starts_from_the_clusters_centre_or_the_lowest_loss_one():
    hp = fesem.Hyper(n_clusters=2, em_iterations=2, weighting="samples")
    one = make_context(rounds=1, fraction=0.5)
    first = fesem.run(one, hp)
    ctx = make_context(rounds=2, fraction=0.5)
    out = fesem.run(ctx, hp)
    assert out.info["selected"][0] == first.info["selected"][0]
    known = np.full(10, -1)
    known[first.info["selected"][0]] = first.info["choices"][0]
    clients = np.asarray(out.info["selected"][1])
    ref = make_context(rounds=2, fraction=0.5)
    begin = known[clients].copy()
    new = np.flatnonzero(begin < 0)
    assert new.size and (begin >= 0).any()  # both kinds of client in round 1
    loss, _, _ = ref.loss_matrix(first.models, clients[new], split="train")
    begin[new] = np.argmin(loss, axis=0)
    res = ref.train(take(first.models, begin), clients, 1)
    names = [n for n, _ in ref.model.named_parameters()]
    flat = flatten_params(res.params, names).double()
    centres = first.models
    n = res.n_samples.double().numpy()
    for _ in range(2):
        choice = fesem.assign_nearest(flat, flatten_params(centres, names))
        centres = fesem.update_centres(centres, res.params, choice, weights=n)
    assert_states_close(out.models, centres)
    assert out.info["choices"][1] == choice.tolist()


def test_random_init_is_refused_naming_the_one_choice():
    """init="random" (FlexCFL's cold start from K random centres) is not offered: a client
    trained from a random centre stays nearest to it, so the E-step keeps the start centre."""
    with pytest.raises(ValueError, match=r"^init must be one of \['clients'\], got 'random'$"):
        fesem.Hyper(init="random")
    with pytest.raises(ValueError, match=r"init must be one of \['clients'\], got 'random'"):
        RunSpec("fmnist", "pathological_clusters", 5, 10, 0, "fesem", hyper={"init": "random"}).validate()
    assert fesem.Hyper().init == "clients"


# ----------------------------------------------------------------------------- planted groups
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fesem_separates_opposite_label_groups(seed):
    """Forgy centres from round 0's trained models separate the two swapped-label groups
    (seeds 0–19: 19 of 20 do; seed 9 ends with a 1/9 split)."""
    ctx, group = opposite_label_groups(seed=seed)
    out = fesem.run(ctx, fesem.Hyper(n_clusters=2))
    assert cluster_recovery(out.assignment, group) == 1.0
    assert sorted(out.info["cluster_sizes"]) == [5, 5]
    assert final_accuracy(ctx) > 0.9
    fed_ctx, _ = opposite_label_groups(seed=seed)
    fedprox.run(fed_ctx, fedprox.Hyper(mu=0.0))
    assert final_accuracy(fed_ctx) < 0.6  # one model cannot fit both groups


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


def test_selects_fedavgs_clients():
    out = fesem.run(make_context(rounds=3), fesem.Hyper())
    assert out.info["selected"] == fedprox.run(make_context(rounds=3), fedprox.Hyper(mu=0.0)).info["selected"]


def test_same_seed_same_numbers_other_seed_other_numbers():
    runs = []
    for seed in (0, 0, 1):
        ctx = make_context(rounds=3, seed=seed)
        runs.append((fesem.run(ctx, fesem.Hyper(n_clusters=3)), ctx.history))
    (a, ha), (b, hb), (c, _) = runs
    assert states_equal(a.models, b.models) and a.info == b.info and ha == hb
    assert a.assignment.tolist() == b.assignment.tolist()
    assert not states_equal(a.models, c.models)


# ----------------------------------------------------------------------------- hyperparameters
@pytest.mark.parametrize("values, match", [
    ({"n_clusters": 0}, r"n_clusters must be an integer ≥ 1, got 0"),
    ({"n_clusters": 2.0}, r"n_clusters must be an integer ≥ 1, got 2\.0"),
    ({"em_iterations": 0}, r"em_iterations must be an integer ≥ 1, got 0"),
    ({"em_iterations": "1"}, r"em_iterations must be an integer ≥ 1, got '1'"),
    ({"init_em_iterations": -1}, r"init_em_iterations must be an integer ≥ 1, got -1"),
    ({"init": "kmeans++"}, r"init must be one of \['clients'\], got 'kmeans\+\+'"),
    ({"weighting": "uniform"}, r"weighting must be one of \['plain', 'samples'\], got 'uniform'"),
])
def test_bad_hyper(values, match):
    with pytest.raises(ValueError, match=match):
        fesem.Hyper(**values)


def test_defaults():
    hp = fesem.Hyper()
    assert (hp.n_clusters, hp.em_iterations, hp.init_em_iterations, hp.init, hp.weighting) == \
        (5, 1, 5, "clients", "plain")
    assert fesem.GRID == {} and fesem.NAME == "fesem"
    assert all(callable(getattr(fesem, n)) or n in ("NAME", "GRID") for n in fesem.__all__)
