"""pFedLIA and the Oracle (fedlib.methods.pfedlia / oracle): Eq. (1) by hand and against a
K² loop, the peer-to-peer split of one row, the groups from the views, OPTICS on planted
blocks, the warm-up equal to FedAvg, the planted clusters recovered on a tiny real
federation, determinism and the errors before training."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlib.engine import broadcast, evaluate
from fedlib.evaluation import cluster_recovery
from fedlib.experiment import RunSpec
from fedlib.methods import fedavg, oracle, pfedlia
from fedlib.methods.base import CLUSTER_STREAM, federated_averaging, take
from fl_fixtures import assert_states_equal, make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

SMALL = dict(warmup_rounds=3, influence_epochs=5, min_samples=3)


def clustered_context(protocol="pathological_clusters", **kw):
    args = dict(protocol=protocol, level=5, n_clients=20, val_fraction=0.2, rounds=8, local_epochs=2, fraction=0.5)
    return make_context(**{**args, **kw})


# ----------------------------------------------------------------------------- Eq. (1)
def test_influence_matrix_by_hand():
    before = [3.0, 5.0]
    after = [[1.0, 6.0],   # θ̂_0 on client 0's and client 1's validation data
             [4.0, 2.0]]   # θ̂_1
    out = pfedlia.influence_matrix(before, after)
    np.testing.assert_array_equal(out, [[3 - 1, 3 - 4], [5 - 6, 5 - 2]])  # row i: client i's view
    with pytest.raises(ValueError, match=r"loss_after must be a \(2, 2\) matrix"):
        pfedlia.influence_matrix(before, [[1.0, 2.0]])


def test_influence_of_two_tiny_models_by_hand():
    """Summed cross-entropies of two known logistic models, computed with torch directly."""
    ctx = make_context(n_clients=3, val_fraction=0.2)
    theta0 = ctx.init_state()
    gen = torch.Generator().manual_seed(0)
    other = {k: v + torch.randn(v.shape, generator=gen) for k, v in theta0.items()}
    x, y, parts = ctx.fed.split("val")

    def summed_loss(state, client):
        idx = torch.as_tensor(parts[client])
        logits = torch.func.functional_call(ctx.model, state, (x[idx],))
        return float(F.cross_entropy(logits, y[idx], reduction="sum"))

    models = {k: torch.stack([other[k], theta0[k]]) for k in theta0}
    loss, _, n = ctx.loss_matrix(models, [0, 1, 2], split="val")
    sums = loss * n[None, :]
    scores = pfedlia.influence_matrix(sums[1], np.stack([sums[0], sums[0], sums[0]]))
    for i in range(3):
        assert scores[i, 0] == pytest.approx(summed_loss(theta0, i) - summed_loss(other, i), rel=1e-5)


def test_batched_influence_equals_the_k_squared_loop():
    ctx = make_context(n_clients=5, val_fraction=0.2)
    theta0 = ctx.init_state()
    hp = pfedlia.Hyper(warmup_rounds=0, influence_epochs=2)
    scores = pfedlia._influence(ctx, theta0, hp, round_idx=0)
    trained = ctx.train(broadcast(theta0, 5), np.arange(5), 0, epochs=2).params
    for i in range(5):
        base = evaluate(ctx.model, broadcast(theta0, 1), ctx.fed, [i], split="val")
        for j in range(5):
            after = evaluate(ctx.model, take(trained, [j]), ctx.fed, [i], split="val")
            expected = float(base.loss_sum[0] - after.loss_sum[0])
            assert scores[i, j] == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.cross_cpu
def test_influence_models_train_on_a_seeded_batch_of_each_clients_data():
    rng = np.random.default_rng(0)
    parts = (np.arange(10, 30), np.arange(3), np.arange(50, 58))
    drawn = pfedlia.influence_parts(parts, 5, rng)
    assert [len(p) for p in drawn] == [5, 3, 5]  # a part with ≤ n samples is kept whole
    for p, d in zip(parts, drawn):
        assert set(d) <= set(p) and np.all(np.diff(d) > 0)
    assert pfedlia.influence_parts(parts, None, rng) == parts
    # in the run: θ̂_j is trained on exactly that draw (the stream pfedlia/influence_samples)
    ctx = make_context(n_clients=5, val_fraction=0.2)
    theta0 = ctx.init_state()
    hp = pfedlia.Hyper(warmup_rounds=0, influence_epochs=2, influence_samples=4)
    scores = pfedlia._influence(ctx, theta0, hp, round_idx=0)
    sub = pfedlia.influence_parts(ctx.fed.train_parts, 4, ctx.rng("pfedlia/influence_samples"))
    small = dataclasses.replace(ctx, fed=dataclasses.replace(ctx.fed, train_parts=sub))
    trained = small.train(broadcast(theta0, 5), np.arange(5), 0, epochs=2).params
    base = evaluate(ctx.model, broadcast(theta0, 1), ctx.fed, [0], split="val")
    after = evaluate(ctx.model, take(trained, [3]), ctx.fed, [0], split="val")
    assert scores[0, 3] == pytest.approx(float(base.loss_sum[0] - after.loss_sum[0]), rel=1e-5, abs=1e-6)
    whole = pfedlia._influence(ctx, theta0, pfedlia.Hyper(warmup_rounds=0, influence_epochs=2), round_idx=0)
    assert not np.allclose(scores, whole)
    with pytest.raises(ValueError, match="influence_samples"):
        pfedlia.Hyper(influence_samples=0)


# ----------------------------------------------------------------------------- peer to peer
def test_beneficial_peers_splits_one_row_by_hand():
    # sorted −2, −1, 4, 4.5, 5: the best threshold is between −1 and 4
    assert pfedlia.beneficial_peers([5, 4, -1, -2, 4.5]).tolist() == [True, True, False, False, True]
    assert pfedlia.beneficial_peers([0, 0, 10]).tolist() == [False, False, True]
    assert pfedlia.beneficial_peers([1.0, 1.0]).tolist() == [True, True]  # nothing to split
    with pytest.raises(ValueError, match="row must be a finite 1-D influence row"):
        pfedlia.beneficial_peers([1.0, np.nan])


def test_beneficial_peers_is_the_optimal_two_means_split():
    """Brute force over every bipartition: no split has a lower within-cluster sum of squares."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        row = np.round(rng.normal(size=7) * 3, 1)
        mine = pfedlia.beneficial_peers(row)
        sse = lambda side: ((row[side] - row[side].mean()) ** 2).sum() if side.any() else 0.0  # noqa: E731
        best = min(sse(np.array(m, bool)) + sse(~np.array(m, bool))
                   for m in itertools.product([0, 1], repeat=7) if 0 < sum(m) < 7)
        assert sse(mine) + sse(~mine) == pytest.approx(best)
        assert row[mine].mean() > row[~mine].mean()


def test_mutual_groups_link_only_reciprocated_benefit():
    b = np.array([[1, 1, 0, 0],
                  [1, 1, 1, 0],   # 1 likes 2, but 2 does not like 1
                  [0, 0, 1, 1],
                  [0, 0, 1, 1]], dtype=bool)
    assert pfedlia.mutual_groups(b).tolist() == [0, 0, 1, 1]
    assert pfedlia.mutual_groups(np.eye(3, dtype=bool)).tolist() == [0, 1, 2]  # nobody reciprocates


# ----------------------------------------------------------------------------- centralised
def test_optics_recovers_planted_blocks_and_handles_noise():
    rng = np.random.default_rng(1)
    truth = np.repeat([0, 1, 2], 6)
    centres = rng.normal(scale=20, size=(3, 19))
    x = centres[truth] + rng.normal(scale=0.1, size=(18, 19))
    x = np.vstack([x, np.full(19, 500.0)])  # one far-away client
    near = pfedlia.optics_clusters(x, min_samples=3, noise="nearest")
    alone = pfedlia.optics_clusters(x, min_samples=3, noise="singleton")
    assert cluster_recovery(near[:18], truth) == 1.0 and cluster_recovery(alone[:18], truth) == 1.0
    assert alone[18] not in alone[:18]  # the outlier trains alone
    assert near[18] in near[:18]
    assert sorted(set(near.tolist())) == list(range(near.max() + 1))  # ids 0..G−1


# ----------------------------------------------------------------------------- the method
@pytest.mark.parametrize("clustering", ["centralised", "p2p"])
def test_pfedlia_recovers_the_planted_clusters_and_matches_the_oracle(clustering):
    ctx = clustered_context()
    out = pfedlia.run(ctx, pfedlia.Hyper(clustering=clustering, **SMALL))
    assert cluster_recovery(out.info["cluster_of_client"], ctx.planted_clusters) == 1.0
    mine = ctx.history[-1]["global_accuracy"]
    o_ctx = clustered_context()
    oracle.run(o_ctx, oracle.Hyper(warmup_rounds=0))  # FedAvg per true cluster: pFedLIA also beats it
    f_ctx = clustered_context()
    fedavg.run(f_ctx, fedavg.Hyper())
    assert mine > f_ctx.history[-1]["global_accuracy"] + 0.4  # FedAvg mixes the clusters' labels
    assert mine > o_ctx.history[-1]["global_accuracy"] - 0.02
    scores = np.array(out.info["influence"])
    same = ctx.planted_clusters[:, None] == ctx.planted_clusters[None, :]
    assert scores[same].min() > scores[~same].max()  # Eq. (1) separates the clusters


def test_pfedlia_warmup_is_fedavg():
    ctx, f_ctx = clustered_context(), clustered_context()
    out = pfedlia.run(ctx, pfedlia.Hyper(**SMALL))
    fedavg.run(f_ctx, fedavg.Hyper())
    assert ctx.history[:3] == f_ctx.history[:3]
    assert [h["round"] for h in ctx.history] == list(range(1, 9))
    assert out.info["n_clusters"] == 5 and sum(out.info["cluster_sizes"]) == 20


def test_pfedlia_noisy_partition_and_determinism():
    a = pfedlia.run(ctx_a := clustered_context("noisy_clusters"), pfedlia.Hyper(**SMALL))
    b = pfedlia.run(clustered_context("noisy_clusters"), pfedlia.Hyper(**SMALL))
    assert_states_equal(a.models, b.models)
    assert a.info == b.info
    assert ctx_a.history[-1]["global_accuracy"] > 0.6
    c = pfedlia.run(clustered_context("noisy_clusters", seed=1), pfedlia.Hyper(**SMALL))
    assert a.info["influence"] != c.info["influence"]


def test_pfedlia_errors_before_training():
    with pytest.raises(ValueError, match="val_fraction must be > 0"):
        pfedlia.run(clustered_context(val_fraction=0.0), pfedlia.Hyper(**SMALL))
    spec = dict(dataset="fmnist", protocol="pathological_clusters", level=5, n_clients=20, seed=0,
                method="pfedlia", val_fraction=0.2, fl={"rounds": 10})
    with pytest.raises(ValueError, match=r"warmup_rounds must be < rounds = 10 .*got 20"):
        RunSpec(**spec).validate()
    with pytest.raises(ValueError, match="val_fraction must be > 0 for method 'pfedlia'"):
        RunSpec(**{**spec, "val_fraction": 0.0, "hyper": {"warmup_rounds": 2}}).validate()
    with pytest.raises(ValueError, match="clustering must be one of"):
        pfedlia.Hyper(clustering="central")
    with pytest.raises(ValueError, match="min_samples must be"):
        pfedlia.Hyper(min_samples=1)


# ----------------------------------------------------------------------------- Oracle
def test_oracle_is_fedavg_per_true_cluster():
    ctx, ref = clustered_context(), clustered_context()
    out = oracle.run(ctx, oracle.Hyper(warmup_rounds=0))
    groups = [np.flatnonzero(ctx.planted_clusters == c) for c in range(5)]
    expected = federated_averaging(ref, groups, stream=CLUSTER_STREAM)
    assert_states_equal(out.models, expected.models)
    assert out.info["cluster_of_client"] == ctx.planted_clusters.tolist()
    assert ctx.history[-1]["global_accuracy"] > 0.9


def test_oracle_with_the_warmup_is_pfedlia_when_pfedlia_finds_the_true_clusters():
    """Table I's identical Oracle and pFedLIA cells: the same schedule, the same clusters."""
    ctx, o_ctx = clustered_context(), clustered_context()
    lia = pfedlia.run(ctx, pfedlia.Hyper(**SMALL))
    orc = oracle.run(o_ctx, oracle.Hyper(warmup_rounds=SMALL["warmup_rounds"]))
    assert lia.info["cluster_of_client"] == orc.info["cluster_of_client"]
    assert_states_equal(lia.models, orc.models)
    assert ctx.history == o_ctx.history


def test_oracle_refuses_partitions_without_clear_clusters():
    spec = dict(dataset="fmnist", level=5, n_clients=20, seed=0, method="oracle")
    RunSpec(protocol="pathological_clusters", **spec).validate()
    with pytest.raises(ValueError, match=r"warmup_rounds must be < rounds = 40 .*got 40"):
        RunSpec(protocol="pathological_clusters", **spec, hyper={"warmup_rounds": 40}).validate()
    for protocol, level in (("noisy_clusters", 5), ("dirichlet", 0.5)):
        with pytest.raises(ValueError, match=r"protocol must be one of \['pathological_clusters'\] for method "
                                             f"'oracle'.*got '{protocol}'"):
            RunSpec(protocol=protocol, **{**spec, "level": level}).validate()
    with pytest.raises(ValueError, match="true_clusters must be the partition's planted cluster"):
        oracle.run(make_context(), oracle.Hyper(warmup_rounds=0))
