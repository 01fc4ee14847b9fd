"""The PSI papers' code's versions of the FedLab baselines (``paper_code``): their rules on
hand-made inputs, then runs on tiny real federations."""
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlib.engine import broadcast, predict_logits
from fedlib.methods import cfl, fedcls, fedsoft, get_method, haccs, make_hyper, poc
from fedlib.methods.base import aggregation_weights, fedlab_losses, global_model_rounds
from fl_fixtures import assert_states_close, make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def run(name, ctx, **hyper):
    return get_method(name).run(ctx, make_hyper(name, hyper))


# ----------------------------------------------------------------------------- shared pieces
def test_fedlab_losses_add_up_batch_means_in_stored_order():
    ctx = make_context(rounds=1)
    w = ctx.init_state()
    got = fedlab_losses(ctx, w, [0, 3], batch_size=16)
    x, y, parts = ctx.fed.split("train")
    for value, c in zip(got, [0, 3]):
        idx = torch.as_tensor(parts[c])
        loss = F.cross_entropy(predict_logits(ctx.model, broadcast(w, 1), x[idx])[0], y[idx], reduction="none")
        batches = [loss[i:i + 16].mean().item() for i in range(0, len(idx), 16)]
        assert value == pytest.approx(sum(batches), rel=1e-6)
        assert value > 2 * loss.mean().item()  # several batches: a sum, not a mean


def test_uniform_aggregation_is_the_plain_mean_of_the_trained_models():
    assert aggregation_weights(np.array([3.0, 9.0]), "samples").tolist() == [3.0, 9.0]
    assert aggregation_weights(torch.tensor([3, 9]), "uniform").tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="aggregation must be one of"):
        aggregation_weights([1, 2], "median")
    ctx = make_context(rounds=1, fraction=0.5)
    trained = {}
    train = ctx.train

    def spy(start, clients, t, **kw):
        trained["res"] = train(start, clients, t, **kw)
        return trained["res"]

    ctx.train = spy
    out = global_model_rounds(ctx, weights="uniform")
    plain = {k: v.mean(0) for k, v in trained["res"].params.items()}
    assert_states_close({k: v[0] for k, v in out.models.items()}, plain, atol=1e-6)


# ----------------------------------------------------------------------------- CFL
def test_authors_split_test_reads_the_mean_of_deviation_norms():
    dw = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]])  # mean 0, deviations 1, 1, 0
    assert cfl.authors_split_criterion(dw, eps1=0.7, eps2=0.5)          # mean of norms 2/3 < 0.7
    assert not cfl.authors_split_criterion(dw, eps1=0.6, eps2=0.5)
    assert cfl.split_criterion(dw, eps1=0.6, eps2=0.5)                  # Sattler: ‖mean‖ = 0 < 0.6
    # Table II's ε1 = 1e-5, ε2 = 0.1: mean ≥ max / M, so M clients can never pass with ε2/ε1 = 10⁴
    rng = np.random.default_rng(0)
    many = torch.as_tensor(rng.normal(size=(50, 20)))
    assert not cfl.authors_split_criterion(many, 1e-5, 0.1)


def test_cfl_as_the_authors_ran_it_never_splits_and_averages_plainly():
    ctx = make_context(rounds=3)
    out = run("cfl", ctx, split_test="mean_of_norms", aggregation="uniform", warmup_rounds=0)
    assert out.info["n_clusters"] == 1 and out.info["warmup_rounds"] == 0
    assert all(r["mean_deviation_norm"] > 1e-5 for r in out.info["norms"])


# ----------------------------------------------------------------------------- PoC
def test_poc_as_the_authors_ran_it():
    ctx = make_context(rounds=2, fraction=0.5)
    out = run("poc", ctx, d=3, d_policy="min", aggregation="uniform", loss="fedlab")
    assert [len(s) for s in out.info["selected"]] == [3, 3]
    assert out.info["aggregation"] == "uniform" and out.info["loss"] == "fedlab"
    with pytest.raises(ValueError, match="loss must be one of"):
        make_hyper("poc", {"loss": "sum"})


# ----------------------------------------------------------------------------- HACCS
def test_optics_by_silhouette_finds_well_separated_groups():
    p = np.repeat(np.eye(3), 6, axis=0) * 0.9 + 0.1 / 3  # 18 clients, 3 dominant labels
    p += np.random.default_rng(0).uniform(0, 0.01, p.shape)
    labels, info = haccs.optics_by_silhouette(haccs.hellinger_matrix(p / p.sum(1, keepdims=True)))
    truth = np.repeat(np.arange(3), 6)
    assert len(set(zip(labels, truth))) == 3 and len(set(labels)) == 3  # the three groups, no noise
    assert info["silhouette"] > 0.5 and info["n_valid"] >= 1
    assert info["min_samples"] in (2, 3) and info["xi"] in (0.05, 0.8)


def test_optics_by_silhouette_without_a_valid_setting_takes_the_first():
    p = np.eye(4)  # four clients with one distinct label each: every distance 1 > max_eps, all noise
    labels, info = haccs.optics_by_silhouette(haccs.hellinger_matrix(p))
    assert (info["min_samples"], info["max_eps"], info["xi"]) == (2, 0.2, 0.05)
    assert info["silhouette"] is None and info["n_valid"] == 0
    assert labels.tolist() == [0, 1, 2, 3]  # noise as singletons


def test_mixture_latencies_follow_the_device_classes():
    lat = haccs.mixture_latencies(np.random.default_rng(0), 20000)
    network_min = haccs.LINK_SECONDS[0] + haccs.MODEL_MEGABITS / haccs.BANDWIDTH_MBPS[0][1]
    assert lat.min() >= network_min and lat.max() <= 0.2 + 80.0 + 20.0
    fast_cpu = np.mean(lat < 5.0 + 0.2 + 80 / 75)  # CPU factor < 0.5 and a fast link: 0.6 · 0.6 at least
    assert fast_cpu > 0.3


def test_code_cluster_probabilities_by_hand():
    latency = np.array([2.0, 4.0, 10.0, 6.0])
    loss = np.array([1.0, 3.0, 4.0, 4.0])
    labels = np.array([0, 0, 1, 2])
    # ℓ̄ = (3, 10, 6), max ℓ = 10 → 1 − ℓ̄/10 = (0.7, 0, 0.4); L̄ = (2, 4, 4) / 10
    theta = 0.5 * np.array([0.7, 0.0, 0.4]) + 0.5 * np.array([0.2, 0.4, 0.4])
    np.testing.assert_allclose(haccs.code_cluster_probabilities(latency, loss, labels, 0.5), theta / theta.sum())


def test_select_code_takes_the_lowest_id_member_of_each_drawn_cluster_then_fills_by_data_share():
    labels = np.array([1, 0, 1, 2, 0, 2, 3, 3])
    n_train = np.array([5, 5, 5, 5, 5, 5, 5, 1000])
    chosen = haccs.select_code(np.random.default_rng(0), labels, np.ones(8), n_train, 0.95, w=2, m=4)
    assert len(chosen) == 4 and len(set(chosen.tolist())) == 4
    assert set(chosen[:2].tolist()) <= {0, 1, 3, 6}  # each cluster's lowest id
    assert len({labels[c] for c in chosen[:2]}) == 2
    fills = [haccs.select_code(np.random.default_rng(s), labels, np.ones(8), n_train, 0.95, 1, 2)[1]
             for s in range(40)]
    assert np.mean(np.array(fills) == 7) > 0.8  # the client with most of the data


def test_haccs_psi_code_runs_and_records_its_optics_choice():
    ctx = make_context(n_clients=12, rounds=2)
    out = run("haccs", ctx, variant="psi_code", aggregation="uniform")
    assert set(out.info["optics"]) == {"min_samples", "max_eps", "xi", "silhouette", "n_valid"}
    assert all(len(s) == 6 for s in out.info["selected"])
    again = run("haccs", make_context(n_clients=12, rounds=2), variant="psi_code", aggregation="uniform")
    assert again.info["selected"] == out.info["selected"]


# ----------------------------------------------------------------------------- FedCLS
def test_code_groups_fall_back_to_the_first_fifth_when_nothing_groups():
    assert fedcls.code_groups(np.arange(10)).tolist() == [0, 0] + list(range(1, 9))
    grouped = np.array([0, 1, 0, 2, 3])
    assert fedcls.code_groups(grouped).tolist() == grouped.tolist()  # a group of two exists
    assert fedcls.code_groups(np.arange(5)).tolist() == list(range(5))  # ⌊0.2·5⌋ = 1: no group to make


def test_fedcls_select_code_one_client_per_top_group_then_data_share():
    labels = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    n_train = np.full(10, 10)
    for seed in range(20):
        chosen = fedcls.select_code(np.random.default_rng(seed), labels, n_train, d=10, w=5, m=5)
        assert len(chosen) == 5 and len(set(chosen.tolist())) == 5
        assert len({labels[c] for c in chosen}) >= 4  # at most one extra can share a taken group
    filled = fedcls.select_code(np.random.default_rng(0), labels, n_train, d=10, w=2, m=6)
    assert len(filled) == 6  # 2 from the groups, 4 by data share


def test_fedcls_psi_code_runs_on_digits():
    ctx = make_context(rounds=2)
    out = run("fedcls", ctx, variant="psi_code", aggregation="uniform")
    assert all(len(s) == 5 for s in out.info["selected"])
    assert ctx.history[-1]["global_accuracy"] > 0.2


# ----------------------------------------------------------------------------- FedSoft
def test_fedsoft_code_rules_by_hand():
    u = np.array([[0.9, 0.1], [0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(fedsoft.code_aggregation_weights(u),
                               [[0.9 / 1.4, 0.5 / 1.4, 0.0], [0.1 / 1.6, 0.5 / 1.6, 1.0 / 1.6]], rtol=1e-8)
    assert [fedsoft.code_estimation_round(r, 2) for r in range(1, 7)] == [True, True, False, True, False, True]


def test_fedsoft_psi_code_starts_from_identical_centres_and_logs_round_zero():
    ctx = make_context(rounds=3)
    ctx.pooled_models_eval = True
    out = run("fedsoft", ctx, variant="psi_code", estimation_interval=2)
    assert [h["round"] for h in ctx.history] == [0, 1, 2, 3]
    first = ctx.history[0]["pooled_model_accuracy"]
    assert len(first) == 5 and len(set(first)) == 1  # five identical initial centres
    assert out.info["clients_per_round"] == 5 and out.info["variant"] == "psi_code"
    assert out.info["cluster_of_client"] == out.assignment.tolist()  # the grouping, in the record
    assert np.bincount(out.info["cluster_of_client"], minlength=5).tolist() == out.info["cluster_sizes"]
    assert ctx.history[-1]["mean_pooled_model_accuracy"] > first[0]
