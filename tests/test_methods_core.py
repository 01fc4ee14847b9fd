"""CL, Local, FedAvg and Clust-PSI-PFL on tiny real federations (sklearn digits)."""
import numpy as np
import pytest
import torch

from fedlib.methods import FLConfig, METHODS, get_method, make_hyper, sample_clients
from fedlib.methods.base import federated_averaging
from fedlib.methods.clust_psi_pfl import cluster_clients
from fl_fixtures import make_context, method_context, method_hyper

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def run(name, ctx, **hyper):
    return get_method(name).run(ctx, make_hyper(name, hyper))


def final_accuracy(ctx):
    return ctx.history[-1]["global_accuracy"]


def test_sample_clients_floor_and_at_least_one():
    rng = np.random.default_rng(0)
    picked = sample_clients(rng, np.arange(10), 0.5)
    assert len(picked) == 5 and len(set(picked)) == 5 and np.all(np.diff(picked) > 0)
    assert len(sample_clients(rng, np.array([7, 9]), 0.3)) == 1  # q·2 < 1 still trains one
    assert len(sample_clients(rng, np.arange(7), 0.5)) == 3      # Flower: int(q·K)
    with pytest.raises(ValueError, match="empty"):
        sample_clients(rng, np.array([], int), 0.5)


def test_sample_clients_minimum_is_flowers_min_fit_clients():
    rng = np.random.default_rng(0)
    assert len(sample_clients(rng, np.array([3, 5, 8]), 0.5, minimum=2)) == 2  # int(1.5) = 1 → 2
    assert len(sample_clients(rng, np.array([3]), 0.5, minimum=2)) == 1        # capped at the pool
    assert len(sample_clients(rng, np.arange(10), 0.5, minimum=2)) == 5        # above the minimum
    a = sample_clients(np.random.default_rng(1), np.arange(10), 0.5)
    assert a.tolist() == sample_clients(np.random.default_rng(1), np.arange(10), 0.5, minimum=1).tolist()


def test_fedavg_min_clients_trains_two_of_a_three_client_cluster():
    from dataclasses import replace

    trained = []
    ctx = make_context(rounds=2, fraction=0.5)
    ctx.cfg = replace(ctx.cfg, min_clients=2)
    train = ctx.train
    ctx.train = lambda start, clients, t, **kw: trained.append(list(clients)) or train(start, clients, t, **kw)
    federated_averaging(ctx, [np.array([0, 1, 2]), np.arange(3, 10)])
    for clients in trained:  # ⌊0.5·3⌋ = 1 → 2 of the small group; ⌊0.5·7⌋ = 3 of the other
        assert sum(c < 3 for c in clients) == 2 and sum(c >= 3 for c in clients) == 3


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_streamed_average_is_the_stacked_one_up_to_float32_rounding(path):
    """``stream_average``: each group's model is the sample-weighted mean of its clients as
    with the stacked result (same clients, same training: one round), to float32 rounding."""
    from dataclasses import replace

    groups = [np.array([0, 2, 4, 6, 8]), np.array([1, 3, 5, 7, 9])]
    models = {}
    for stream in (False, True):
        ctx = make_context(rounds=1, fraction=0.6, path=path)
        ctx.cfg = replace(ctx.cfg, stream_average=stream)
        models[stream] = federated_averaging(ctx, groups, log=False).models
    for k, v in models[False].items():
        assert v.shape[0] == 2
        torch.testing.assert_close(models[True][k], v, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="stream_average"):
        FLConfig(stream_average="yes")


@pytest.mark.parametrize("name,hyper", [("fedprox", {}), ("fedadam", {}), ("haccs", {"aggregation": "uniform"})])
def test_streamed_global_model_rounds_aggregate_as_the_stacked_ones(name, hyper):
    """``stream_average`` in :func:`global_model_rounds`: the proximal pull, a server optimiser
    and the uniform (FedLab) weights see the aggregate of the stacked path, to float32 rounding;
    the observer still gets the clients' losses."""
    from dataclasses import replace

    models = {}
    for stream in (False, True):
        ctx = method_context(name, rounds=1, local_epochs=1, seed=0)
        ctx.cfg = replace(ctx.cfg, stream_average=stream)
        models[stream] = get_method(name).run(ctx, make_hyper(name, hyper)).models
    for k, v in models[False].items():
        torch.testing.assert_close(models[True][k], v, rtol=1e-5, atol=1e-6)


def test_global_model_rounds_trains_from_a_view_into_the_last_rounds_memory():
    """Clients start from a read-only view of the global model (no copy per client), and each
    round's trained rows are written into the previous round's (dead) result."""
    from fedlib.methods.base import global_model_rounds

    ctx = make_context(rounds=3, fraction=0.5)
    seen, train = [], ctx.train

    def spy(start, clients, t, **kw):
        res = train(start, clients, t, **kw)
        seen.append((start, kw.get("out"), res.params))
        return res

    ctx.train = spy
    global_model_rounds(ctx)
    assert len(seen) == 3 and seen[0][1] is None
    for start, _, _ in seen:
        assert all(v.stride(0) == 0 for v in start.values())
    for (_, out, params), (_, _, last) in zip(seen[1:], seen):
        assert out is last and all(params[k] is last[k] for k in last)


def test_clust_psi_pfl_nonpositive_silhouettes_argmax_or_the_authors_fallback(monkeypatch):
    from fedlib.clustering import ClusterSelection
    from fedlib.methods import clust_psi_pfl

    labels3 = np.array([0, 1, 2, 0, 1, 2])
    flat = ClusterSelection(3, labels3, np.arange(2, 6), np.array([-0.05, -0.01, np.nan, -0.2]),
                            note="max silhouette -0.0100 ≤ 0", cluster_sizes=(2, 2, 2))
    monkeypatch.setattr(clust_psi_pfl, "select_n_clusters", lambda *a, **k: flat)
    counts = np.tile([10, 10, 10], (6, 1))
    labels, info = cluster_clients(counts, make_hyper("clust_psi_pfl"))
    assert info["tau"] == 3 and labels.tolist() == labels3.tolist()  # Algorithm 1 as printed
    labels, info = cluster_clients(counts, make_hyper("clust_psi_pfl", {"nonpositive_silhouette": "fedavg"}))
    assert info["tau"] == 1 and labels.tolist() == [0] * 6 and info["tau_argmax"] == 3
    assert "tau=1" in info["note"]
    positive = ClusterSelection(3, labels3, np.arange(2, 6), np.array([-0.05, 0.01, np.nan, -0.2]))
    monkeypatch.setattr(clust_psi_pfl, "select_n_clusters", lambda *a, **k: positive)
    labels, info = cluster_clients(counts, make_hyper("clust_psi_pfl", {"nonpositive_silhouette": "fedavg"}))
    assert info["tau"] == 3  # one positive silhouette: no fallback
    with pytest.raises(ValueError, match="nonpositive_silhouette must be one of"):
        make_hyper("clust_psi_pfl", {"nonpositive_silhouette": "x"})


def test_registry_and_hyper_errors():
    assert {"cl", "local", "fedavg", "clust_psi_pfl"} <= set(METHODS)
    with pytest.raises(ValueError, match="unknown method 'fedmagic'"):
        get_method("fedmagic")
    with pytest.raises(ValueError, match="has no hyperparameter"):
        make_hyper("fedavg", {"mu": 0.1})
    with pytest.raises(ValueError, match="fraction"):
        FLConfig(fraction=0)
    with pytest.raises(ValueError, match="rounds"):
        FLConfig(rounds=0)
    with pytest.raises(ValueError, match="unknown training setting"):
        FLConfig.from_dict({"epochs": 3})


def test_local_per_round_logs_every_evaluated_round_and_trains_the_same_epochs():
    """Local's default logs its last round only (one engine call of T·E epochs); ``per_round``
    (issue 70) logs every round, carries each client's optimiser state across rounds and trains
    T·E epochs in all; epochs with per_round is refused."""
    from fedlib.methods import local

    ctx = make_context(rounds=4, local_epochs=1, seed=0)
    one = local.run(ctx, local.Hyper())
    assert [h["round"] for h in ctx.history] == [4]
    ctx2 = make_context(rounds=4, local_epochs=1, seed=0)
    calls, train = [], ctx2.train
    ctx2.train = lambda start, clients, t, **kw: calls.append((t, ctx2.cfg.keep_optimizer_state)) or train(
        start, clients, t, **kw)
    per = local.run(ctx2, local.Hyper(per_round=True))
    assert [h["round"] for h in ctx2.history] == [1, 2, 3, 4]
    assert calls == [(0, True), (1, True), (2, True), (3, True)] and not ctx2.cfg.keep_optimizer_state
    assert per.info == one.info == {"epochs": 4}
    assert ctx2.history[-1]["global_accuracy"] > ctx2.history[0]["global_accuracy"] - 0.2
    with pytest.raises(ValueError, match="epochs"):
        local.Hyper(epochs=3, per_round=True)
