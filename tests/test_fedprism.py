"""FedPrism (fedlib.methods.fedprism): Eq. (1), the soft weights, the cluster and α updates of
Algorithm 2 by hand, the centroid matching, the ablations as parameters, the method on a tiny
real federation (learning, determinism, the dual-stream weights), and its errors."""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from fedlib.engine import broadcast
from fedlib.engine.predict import GatedMixture
from fedlib.experiment import RunSpec
from fedlib.methods import fedprism as FP
from fl_fixtures import make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def st(*rows):
    """A stacked one-tensor state from rows of numbers."""
    return {"w": torch.tensor(rows, dtype=torch.float64)}


# ----------------------------------------------------------------------------- pure rules
def test_prism_backbone_is_eq_1_by_hand():
    g = {"w": torch.tensor([1.0, 1.0], dtype=torch.float64)}
    clusters = st([0.0, 0.0], [2.0, 2.0])
    private = st([4.0, 4.0], [0.0, -1.0])
    w = FP.prism_backbone(g, clusters, private, alpha=[0.5, 0.9], beta=0.2, weights=[[0.25, 0.75], [1.0, 0.0]])
    # client 0: 0.5·1 + 0.2·(0.25·0 + 0.75·2) + 0.3·4 = 2.0 in both entries;
    # client 1: γ = 1 − 0.9 − 0.2 = −0.1 (the rule as written): 0.9·1 + 0.2·0 − 0.1·(0, −1) = (0.9, 1.0)
    assert torch.allclose(w["w"], torch.tensor([[2.0, 2.0], [0.9, 1.0]], dtype=torch.float64))


def test_prism_backbone_needs_the_private_part_when_gamma_is_not_zero():
    g = {"w": torch.zeros(2)}
    with pytest.raises(ValueError, match="private must be given"):
        FP.prism_backbone(g, broadcast(g, 2), None, alpha=[0.5], beta=0.1, weights=[[0.5, 0.5]])
    out = FP.prism_backbone(g, broadcast(g, 2), None, alpha=[0.9], beta=0.1, weights=[[0.5, 0.5]])
    assert out["w"].shape == (1, 2)


def test_soft_weights_are_a_softmax_of_cosine_over_tau():
    pi = FP.soft_weights([[2.0, 0.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 3.0]], tau=0.5)
    e2 = math.exp(2.0)
    assert np.allclose(pi[0], [e2 / (e2 + 1), 1 / (e2 + 1)])  # cos = 1 and 0 → exp(2), exp(0)
    assert np.allclose(pi[1], [0.5, 0.5])                      # equally similar to both
    assert np.allclose(pi.sum(1), 1)


def test_cluster_step_moves_each_centre_towards_its_weighted_members():
    clusters = st([0.0], [10.0], [5.0])
    trained = st([2.0], [4.0])
    weights = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    new = FP.cluster_step(clusters, trained, weights, eta=0.5)["w"].flatten().tolist()
    # W̄_0 = (2 + 0.5·4)/1.5 = 8/3 → 0 + 0.5·8/3; W̄_1 = 4 → 10 + 0.5·(4 − 10); Z_2 = 0: unchanged
    assert np.allclose(new, [4 / 3, 7.0, 5.0])


def test_alpha_step_follows_the_distance_difference_and_clips():
    a = FP.alpha_step([0.5, 0.85, 0.05], dist_cluster=[3.0, 3.0, 1.0], dist_global=[1.0, 1.0, 3.0],
                      eta=0.1, high=0.9)
    assert np.allclose(a, [0.7, 0.9, 0.0])  # 0.5 + 0.2; 0.85 + 0.2 clipped to 0.9; 0.05 − 0.2 → 0


def test_alpha_gamma_summary_by_hand():
    row = FP.alpha_gamma_summary([0.9, 0.5, 0.9, 0.7], beta=0.1, high=0.9)
    assert row["alpha_mean"] == pytest.approx(0.75) and row["alpha_min"] == 0.5 and row["alpha_max"] == 0.9
    assert row["gamma_mean"] == pytest.approx(0.15) and row["gamma_min"] == pytest.approx(0.0)
    assert row["gamma_max"] == pytest.approx(0.4) and row["at_cap"] == 0.5
    paper = FP.alpha_gamma_summary([1.0, 0.95], beta=0.1, high=1.0)  # the paper's [0, 1] clip
    assert paper["gamma_min"] == pytest.approx(-0.1) and paper["at_cap"] == 0.5


def test_match_centroids_is_the_hungarian_assignment_on_cosine():
    refs = np.eye(3)
    assert FP.match_centroids([[0, 0, 2.0], [3.0, 0.1, 0]], refs).tolist() == [2, 0]
    # a greedy match would give both centroids to reference 0; the assignment is one-to-one
    assert FP.match_centroids([[1.0, 0.2, 0], [1.0, 0, 0.1]], refs[:2]).tolist() == [1, 0]


def test_the_ablations_are_coefficients_of_one_method():
    hp = FP.Hyper(beta=0.1, alpha=0.6)
    assert FP.coefficients(hp) == (0.6, 0.1, True)
    assert FP.coefficients(FP.Hyper(components="global")) == (1.0, 0.0, False)
    assert FP.coefficients(FP.Hyper(components="cluster")) == (0.0, 1.0, False)
    assert FP.coefficients(FP.Hyper(components="private")) == (0.0, 0.0, False)
    assert FP.coefficients(FP.Hyper(components="global_cluster", beta=0.2)) == (0.8, 0.2, False)


@pytest.mark.parametrize("values, name", [
    (dict(beta=1.5), "beta"), (dict(beta=-0.1), "beta"), (dict(alpha=0.95, beta=0.1), "alpha + beta"),
    (dict(n_clusters=0), "n_clusters"), (dict(tau=0), "tau"), (dict(expert_weight=1.2), "expert_weight"),
    (dict(components="pure"), "components"), (dict(eta_cluster=2), "eta_cluster"), (dict(alpha_clip="x"), "alpha_clip"),
    (dict(recluster_every=0), "recluster_every"), (dict(temperature=0), "temperature"),
])
def test_bad_hyperparameters_are_refused_before_training(values, name):
    pattern = re.escape(name)
    with pytest.raises(ValueError, match=rf"^{pattern}.* must be"):
        FP.Hyper(**values)
    with pytest.raises(ValueError, match=pattern):  # the run refuses it before any data
        RunSpec("adult", "dirichlet", 0.5, 4, 0, "fedprism", hyper=values).validate()


def test_keeping_optimizer_state_is_refused_before_training():
    ctx = make_context(n_clients=4, rounds=1)
    ctx = dataclasses.replace(ctx, cfg=dataclasses.replace(ctx.cfg, keep_optimizer_state=True))
    with pytest.raises(ValueError, match="keep_optimizer_state must be False"):
        FP.run(ctx, FP.Hyper())
    assert ctx.history == []


def test_a_model_without_a_body_head_split_is_refused_before_any_data():
    """The prototype is the classifier layer (Sec. 3.2); the logistic model (adult's default) is
    a classifier alone, so RunSpec.validate refuses it, naming the parameter, value and a fix."""
    with pytest.raises(ValueError, match=r"^arch must be a model with layers before its classifier "
                                         r"for method 'fedprism' .*e\.g\. arch='mlp', got 'logistic'$"):
        RunSpec("adult", "dirichlet", 0.5, 4, 0, "fedprism").validate()
    with pytest.raises(ValueError, match="got 'logistic'"):
        RunSpec("fmnist", "dirichlet", 0.5, 4, 0, "fedprism", arch="logistic").validate()
    RunSpec("adult", "dirichlet", 0.5, 4, 0, "fedprism", arch="mlp").validate()  # a body: accepted
    RunSpec("adult", "dirichlet", 0.5, 4, 0, "fedavg").validate()  # other methods keep logistic


def test_no_feature_extractor_lists_exactly_the_architectures_whose_body_has_no_weights():
    from fedlib.models import ARCHITECTURES, body, build_model

    text = {"lstm", "embed_dnn"}
    for arch in ARCHITECTURES:
        shape, vocab = ((12,), 50) if arch in text else (((3, 32, 32), None) if arch not in ("logistic", "mlp")
                                                          else ((10,), None))
        model = build_model(arch, 4, shape, vocab_size=vocab)
        has_body = any(True for _ in body(model).parameters())
        assert has_body == (arch not in FP.NO_FEATURE_EXTRACTOR), arch


# ----------------------------------------------------------------------------- the method
def _run(hp, **kw):
    ctx = make_context(**{"n_clients": 8, "rounds": 6, "local_epochs": 1, "fraction": 0.5, "lr": 0.05,
                          "level": 0.1, **kw})
    return ctx, FP.run(ctx, hp)


@pytest.fixture(scope="module")
def full():
    return _run(FP.Hyper(n_clusters=3, warmup=2, recluster_every=2))


def test_fedprism_learns_personalised_models_on_a_tiny_federation(full):
    ctx, out = full
    correct, n = ctx.evaluate(out.models, out.assignment, predictor=out.predictor)
    assert correct.sum() / n.sum() > 0.85  # α = 0.1 label skew: the experts know their classes
    assert ctx.history[-1]["round"] == 6
    info = out.info
    assert len(info["alpha"]) == 8 and all(0 <= a <= 0.9 for a in info["alpha"])  # clip [0, 1 − β]
    assert np.allclose(np.sum(info["cluster_weights"], 1), 1, atol=1e-5)
    assert info["reclustered_after_rounds"] == [3, 5]  # rounds t = 2, 4 (0-based) after warm-up 2
    assert len(set(info["cluster_of_client"])) > 1     # the soft weights left the uniform start


def test_the_alpha_trace_follows_every_round_and_the_clip(full):
    ctx, out = full
    trace = out.info["alpha_trace"]
    assert [r["round"] for r in trace] == [1, 2, 3, 4, 5, 6]
    assert trace[-1] == {"round": 6, **FP.alpha_gamma_summary(out.info["alpha"], 0.1, 0.9)}  # the final α
    assert all(r["gamma_min"] >= -1e-12 and r["alpha_max"] <= 0.9 + 1e-12 for r in trace)  # 'simplex'
    _, paper = _run(FP.Hyper(n_clusters=3, warmup=2, recluster_every=2, alpha_clip="paper"))
    assert all(r["alpha_max"] <= 1.0 + 1e-12 for r in paper.info["alpha_trace"])
    assert paper.info["alpha_trace"][-1] == {"round": 6, **FP.alpha_gamma_summary(paper.info["alpha"], 0.1, 1.0)}


def test_same_seed_same_numbers(full):
    ctx, out = full
    ctx2, out2 = _run(FP.Hyper(n_clusters=3, warmup=2, recluster_every=2))
    for k in out.models:
        assert torch.equal(out.models[k], out2.models[k])
    assert out.info == out2.info and ctx.history == ctx2.history


def test_fixed_expert_weights_0_and_1_are_the_backbone_and_the_expert(full):
    ctx, out = full
    backbone = ctx.evaluate(out.models, out.assignment)[0]
    expert = ctx.evaluate(out.predictor.expert, out.assignment)[0]
    w0 = GatedMixture(out.predictor.expert, weight=0.0)
    w1 = GatedMixture(out.predictor.expert, weight=1.0)
    assert np.array_equal(ctx.evaluate(out.models, out.assignment, predictor=w0)[0], backbone)
    assert np.array_equal(ctx.evaluate(out.models, out.assignment, predictor=w1)[0], expert)
    # Table 10's point: on label-skewed clients the expert is far better locally than the backbone
    assert expert.sum() > backbone.sum()


def test_pure_global_ablation_gives_every_client_the_global_model():
    ctx, out = _run(FP.Hyper(components="global", expert_weight=0.0), rounds=3)
    first = {k: v[0] for k, v in out.models.items()}
    for k, v in out.models.items():
        assert torch.equal(v, first[k].expand_as(v))  # α = 1, β = γ = 0: W_i = G for all i
    assert out.info["alpha"] == [1.0] * 8


def test_fewer_clients_per_round_than_clusters_still_clusters():
    ctx, out = _run(FP.Hyper(n_clusters=5, warmup=0, recluster_every=1), fraction=0.25, rounds=2)
    assert out.info["reclustered_after_rounds"] == [1, 2]  # 2 clients per round → 2 centroids


def test_the_expert_weight_sweep_is_recorded_without_retraining(full):
    ctx, out = full
    sweep = out.info["expert_weight_sweep"]
    assert list(sweep) == ["0", "0.2", "0.5", "0.8", "1"]
    for w, counts in sweep.items():
        fixed = GatedMixture(out.predictor.expert, weight=float(w))
        assert counts == ctx.evaluate(out.models, out.assignment, predictor=fixed)[0].tolist()
    assert FP.Hyper(weight_sweep=[0.5]).weight_sweep == (0.5,)  # a list from a params file
    with pytest.raises(ValueError, match="weight_sweep must be"):
        FP.Hyper(weight_sweep=[0.5, 2])
