"""fedlib.flower: the PSI strategies on Flower's Simulation Engine reproduce fedlib's methods.

One real simulation (Ray, 2 CPUs; no mocks of Flower) on a 10-client Adult federation runs
five strategies on the same nodes: Clust-PSI-PFL, PSI-PFL (two candidate percentiles,
selected on test), Clust-PSI-PFL with ε-DP counts, FedAvg, and PSI-PFL with ε-DP counts that
the server rounds. Each is compared with fedlib's
own method on the same spec: clusters / selected clients, the sampled clients of every
round and every client's correct test predictions are equal; the final weights agree within
ATOL = 1e-6 (measured: ≤ 7e-9). Each Flower client trains alone with fedlib's engine (batch
order seeded per (seed, round, client, epoch), so the same batches), the server averages in
client-id order with fedlib's ``weighted_average``; only the float32 rounding of a one-client
call differs from the batched call's.
"""
import dataclasses
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from fedlib import experiment  # noqa: E402
from fedlib import flower as F  # noqa: E402
from fedlib.flower.setup import spec_context  # noqa: E402
from fedlib.methods import clust_psi_pfl, fedavg, make_hyper, psi_pfl  # noqa: E402
from fedlib.methods.base import Context, sample_clients  # noqa: E402
from fedlib.privacy import noisy_label_counts  # noqa: E402

FL = {"rounds": 2, "local_epochs": 1}
EPS, DP_SEED = 0.5, 3
PSI_HYPER = {"percentiles": [25, 75], "select_on": "test"}


def spec(method="clust_psi_pfl", **hyper):
    return experiment.RunSpec("adult", "dirichlet", 0.3, 10, 0, method, hyper=hyper, fl=FL, n_train=2000)


def fedlib_outcome(s):
    """fedlib's own method on spec ``s``: (Outcome, record of fedlib.experiment.run)."""
    ctx = spec_context(s)
    ctx.restart()
    module = {"clust_psi_pfl": clust_psi_pfl, "psi_pfl": psi_pfl, "fedavg": fedavg}[s.method]
    return module.run(ctx, make_hyper(s.method, s.hyper)), experiment.run(s)


@pytest.fixture(scope="module")
def flower_runs():
    """The five strategies in one Flower simulation (Ray starts once: ~40 s on 2 CPUs)."""
    strategies = [F.ClustPSIPFL.from_spec(spec()),
                  F.PSIPFL.from_spec(spec("psi_pfl", **PSI_HYPER)),
                  F.ClustPSIPFL.from_spec(spec(dp_epsilon=EPS, dp_seed=DP_SEED)),
                  F.FedAvg.from_spec(spec("fedavg")),
                  F.PSIPFL.from_spec(spec("psi_pfl", dp_epsilon=EPS, dp_seed=DP_SEED, dp_postprocess="round",
                                          **PSI_HYPER))]
    return dict(zip(("clust", "psi", "clust_dp", "fedavg", "psi_dp_round"), F.simulate(strategies, spec())))


ATOL = 1e-6


def same_models(a: dict, b: dict) -> bool:
    """Equal names and shapes, weights within ATOL (see the module docstring)."""
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and torch.allclose(a[k].cpu(), b[k].cpu(),
                                                                                     rtol=0, atol=ATOL) for k in a)


# ----------------------------------------------------------------------------- simulations
@pytest.mark.slow
@pytest.mark.cross_cpu
def test_clust_psi_pfl_clusters_and_accuracies_equal_fedlib(flower_runs):
    s = spec()
    out = flower_runs["clust"]
    labels, info = clust_psi_pfl.cluster_clients(spec_context(s).counts_train, make_hyper(s.method, {}))
    own, record = fedlib_outcome(s)
    assert out["assignment"].tolist() == labels.tolist() == record["info"]["assignment"]
    assert out["info"]["tau"] == info["tau"] == record["info"]["tau"]
    np.testing.assert_array_equal(out["counts"], spec_context(s).counts_train)  # exact histograms
    assert out["correct"].tolist() == record["correct"] and out["n_test"].tolist() == record["n_test"]
    assert out["global_accuracy"] == record["global_accuracy"]
    assert same_models(out["models"], own.models)


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_clusters_sample_fedlibs_clients_each_round(flower_runs):
    s = spec()
    ctx = spec_context(s)
    labels = flower_runs["clust"]["assignment"]
    for g, rounds in enumerate(flower_runs["clust"]["selected"]):
        rng = ctx.rng(f"selection/group{g}")
        expected = [sample_clients(rng, np.flatnonzero(labels == g), ctx.cfg.fraction, ctx.cfg.min_clients).tolist()
                    for _ in rounds]
        assert rounds == expected


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_psi_pfl_selection_and_accuracies_equal_fedlib(flower_runs):
    s = spec("psi_pfl", **PSI_HYPER)
    out = flower_runs["psi"]
    own, record = fedlib_outcome(s)
    mine, theirs = out["info"], record["info"]
    assert [c["clients"] for c in mine["candidates"]] == [c["clients"] for c in theirs["candidates"]]
    assert [c["test_correct"] for c in mine["candidates"]] == [c["test_correct"] for c in theirs["candidates"]]
    assert mine["chosen"] == theirs["chosen"] and mine["threshold"] == theirs["threshold"]
    assert mine["psi"] == theirs["psi"]
    assert out["correct"].tolist() == record["correct"]
    assert same_models(out["models"], own.models)


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_dp_clients_send_noisy_label_counts_and_cluster_like_fedlib(flower_runs):
    s = spec(dp_epsilon=EPS, dp_seed=DP_SEED)
    out = flower_runs["clust_dp"]
    counts = spec_context(s).counts_train
    np.testing.assert_array_equal(out["counts"], noisy_label_counts(counts, EPS, DP_SEED))
    assert not np.array_equal(out["counts"], counts)
    record = experiment.run(s)  # fedlib's method with the same dp_epsilon / dp_seed
    assert out["assignment"].tolist() == record["info"]["assignment"]
    assert out["info"]["dp_epsilon"] == record["info"]["dp_epsilon"] == EPS
    assert out["correct"].tolist() == record["correct"]


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_dp_psi_pfl_with_the_servers_rounding_selects_like_fedlib(flower_runs):
    s = spec("psi_pfl", dp_epsilon=EPS, dp_seed=DP_SEED, dp_postprocess="round", **PSI_HYPER)
    out = flower_runs["psi_dp_round"]
    counts = spec_context(s).counts_train
    np.testing.assert_array_equal(out["counts"], noisy_label_counts(counts, EPS, DP_SEED))  # as the clients sent them
    record = experiment.run(s)
    assert out["info"]["psi"] == record["info"]["psi"]  # from the rounded counts, on both sides
    assert [c["clients"] for c in out["info"]["candidates"]] == [c["clients"] for c in record["info"]["candidates"]]
    assert out["info"]["dp_postprocess"] == record["info"]["dp_postprocess"] == "round"
    assert out["correct"].tolist() == record["correct"]


@pytest.mark.slow
@pytest.mark.cross_cpu
def test_fedavg_equals_fedlibs_fedavg(flower_runs):
    own, record = fedlib_outcome(spec("fedavg"))
    assert flower_runs["fedavg"]["correct"].tolist() == record["correct"]
    assert same_models(flower_runs["fedavg"]["models"], own.models)


# ----------------------------------------------------------------------------- no simulation
def test_client_counts_are_the_rows_fedlib_sees():
    s = spec()
    counts = spec_context(s).counts_train
    noisy = noisy_label_counts(counts, EPS, DP_SEED)
    for i in (0, 7):
        np.testing.assert_array_equal(F.client_counts(s, i), counts[i])
        np.testing.assert_array_equal(F.client_counts(s, i, EPS, DP_SEED), noisy[i])


def test_stream_rng_is_contexts():
    ctx = Context(fed=None, model=None, cfg=None, seed=5, counts_train=None)
    for stream in ("selection/group0", "selection/group3"):
        assert np.array_equal(F.stream_rng(5, stream).integers(0, 10**9, 8), ctx.rng(stream).integers(0, 10**9, 8))


def test_from_spec_reads_the_methods_settings():
    st = F.PSIPFL.from_spec(spec("psi_pfl", dp_epsilon=2.0, dp_seed=4, **PSI_HYPER))
    assert (st.dp_epsilon, st.dp_seed, st.hp.percentiles, st.hp.select_on) == (2.0, 4, (25, 75), "test")
    assert st.hp.dp_epsilon is None  # the counts arrive noisy: never noised twice
    assert (st.cfg.rounds, st.cfg.local_epochs) == (2, 1)
    assert dataclasses.asdict(F.ClustPSIPFL(hyper=clust_psi_pfl.Hyper(tau=2)).hp)["tau"] == 2


BAD = [
    (lambda: F.ClustPSIPFL(dp_epsilon=0), "dp_epsilon must be a finite number > 0"),
    (lambda: F.PSIPFL(dp_seed=-1), "dp_seed must be an integer in \\[0, 4294967295\\]"),
    (lambda: F.FedAvg(seed=1.5), "seed must be an integer in \\[0, 4294967295\\]"),
    (lambda: F.ClustPSIPFL(hyper="tau=2"), "hyper must be a dict"),
    (lambda: F.ClustPSIPFL(fl={"keep_optimizer_state": True}), "keep_optimizer_state must be False"),
    (lambda: F.ClustPSIPFL(fl={"stream_average": True}), "stream_average must be False"),
    (lambda: F.PSIPFL(hyper={"percentiles": []}), "percentiles must be a non-empty list"),
    (lambda: F.ClustPSIPFL(timeout=0), "timeout must be a finite number > 0"),
    (lambda: F.PSIPFL.from_spec(spec()), "spec.method must be 'psi_pfl'"),
    (lambda: F.make_client_app("adult"), "spec must be a fedlib.experiment.RunSpec"),
    (lambda: F.make_client_app(spec(), dp_seed=-2), "dp_seed must be an integer in \\[0, 4294967295\\]"),
    (lambda: F.simulate([], spec()), "strategies must be a fedlib.flower strategy"),
    (lambda: F.backend_config(num_cpus=0), "num_cpus must be an integer ≥ 1"),
    (lambda: F.group_fedavg({0: 1}, [0], seed=0, stream="s", fraction=0), "fraction (q) must be a finite number"),
    (lambda: F.group_fedavg({0: 1}, [5], seed=0, stream="s", fraction=0.5), "group must be a non-empty"),
    (lambda: F.stream_rng(-1, "selection/group0"), "seed must be an integer in \\[0, 4294967295\\]"),
    (lambda: F.client_counts(spec(), 0, epsilon=-1.0), "epsilon must be a finite number > 0"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m.split(" must")[0] for _, m in BAD])
def test_bad_arguments_raise_valueerror(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_missing_flower_is_a_clear_importerror(monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(ImportError, match=r"fedlib.flower needs Flower: pip install -e \.\[flower\]"):
        F.require_flwr()
