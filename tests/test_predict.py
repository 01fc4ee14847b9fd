"""Prediction modes: OneModel, FedPrism's GatedMixture and FedProto's NearestPrototype."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from fedlib.engine import (Federation, GatedMixture, NearestPrototype, OneModel, evaluate, evaluate_with,
                           stack_params, unstack)
from fedlib.models import body, build_model, init_params

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def fed():
    """Six digits clients (ragged, one with 3 test samples) with a 97-image global test set."""
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8), d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(1700)
    sizes = [60, 90, 3, 45, 120, 30]
    cuts = np.cumsum(sizes)
    test = np.split(order[:cuts[-1]], cuts[:-1])
    train = np.split(order[cuts[-1]:2 * cuts[-1]], cuts[:-1])
    return Federation.from_arrays(x, y, train, test, CPU, x_global=x[1700:], y_global=y[1700:])


def _stack(arch, seeds):
    model = build_model(arch, 10, (1, 8, 8))
    return model, stack_params([init_params(model, seed=s) for s in seeds])


def _rows(state, clients):
    return {n: t[torch.as_tensor(clients)] for n, t in state.items()}


CLIENTS = [4, 0, 2, 4, 5]


# ----------------------------------------------------------------------------- OneModel
@pytest.mark.parametrize("arch", ["logistic", "cnn"])
def test_one_model_is_exactly_evaluate(fed, arch):
    model, params = _stack(arch, range(5))
    for split in ("test", "train", "global"):
        want = evaluate(model, params, fed, CLIENTS, split=split, batch_size=32)
        got = evaluate_with(OneModel(), model, params, fed, CLIENTS, split=split, batch_size=32)
        assert torch.equal(got.correct, want.correct) and torch.equal(got.n, want.n)
        assert torch.equal(got.loss_sum, want.loss_sum) and got.path == want.path


# ----------------------------------------------------------------------------- GatedMixture
@pytest.mark.parametrize("arch,path", [("logistic", "vectorised"), ("mlp", "sequential"), ("cnn", "auto")])
def test_forced_gates_reduce_to_the_expert_or_the_backbone(fed, arch, path):
    model, backbone = _stack(arch, range(5))        # row i: client CLIENTS[i]'s backbone
    _, expert = _stack(arch, range(100, 106))        # row k: client k's local expert
    as_expert = evaluate(model, _rows(expert, CLIENTS), fed, CLIENTS)
    as_backbone = evaluate(model, backbone, fed, CLIENTS)
    assert not torch.equal(as_expert.correct, as_backbone.correct)  # the two streams really differ
    all_expert = [GatedMixture(expert, weight=1.0), GatedMixture(expert, threshold=0.0),
                  GatedMixture(expert, weight=1.0, space="probs")]
    all_backbone = [GatedMixture(expert, weight=0.0), GatedMixture(expert, temperature=1e6, threshold=0.5),
                    GatedMixture(expert, weight=0.0, space="probs")]
    for predictor, want in [(p, as_expert) for p in all_expert] + [(p, as_backbone) for p in all_backbone]:
        got = evaluate_with(predictor, model, backbone, fed, CLIENTS, batch_size=16, path=path)
        assert torch.equal(got.correct, want.correct), predictor
        assert torch.equal(got.n, want.n)
    logits_loss = evaluate_with(all_expert[0], model, backbone, fed, CLIENTS, path=path).loss_sum
    torch.testing.assert_close(logits_loss, as_expert.loss_sum, rtol=1e-5, atol=1e-4)
    probs_loss = evaluate_with(all_backbone[2], model, backbone, fed, CLIENTS, path=path).loss_sum
    torch.testing.assert_close(probs_loss, as_backbone.loss_sum, rtol=1e-4, atol=1e-3)


def test_confidence_gate_matches_a_direct_computation(fed):
    """The default gate (λ = max softmax(expert/T), logits mixed) against a per-row hand computation."""
    model, backbone = _stack("mlp", range(5))
    _, expert = _stack("mlp", range(100, 106))
    for temperature in (0.5, 2.0):
        got = evaluate_with(GatedMixture(expert, temperature=temperature), model, backbone, fed, CLIENTS)
        for row, client in enumerate(CLIENTS):
            idx = torch.as_tensor(fed.test_parts[client])
            with torch.no_grad():
                model.load_state_dict({n: t[row] for n, t in backbone.items()})
                z_g = model.eval()(fed.x[idx])
                model.load_state_dict({n: t[client] for n, t in expert.items()})
                z_l = model.eval()(fed.x[idx])
            lam = torch.softmax(z_l / temperature, 1).max(1, keepdim=True).values
            z = lam * z_l + (1 - lam) * z_g
            assert got.correct[row] == (z.argmax(1) == fed.y[idx]).sum()
            torch.testing.assert_close(got.loss_sum[row].float(), torch.nn.functional.cross_entropy(
                z, fed.y[idx], reduction="sum"), rtol=1e-5, atol=1e-4)


def unstack_rows(state, m):
    return {n: t[:m] for n, t in state.items()}


def _two_d_fed(x, y, n_classes):
    """One client holding every sample as its test split."""
    idx = np.arange(len(y))
    return Federation.from_arrays(np.asarray(x, np.float32), np.asarray(y), [idx], [idx], CPU, n_classes=n_classes)


def _linear(weight, bias=None):
    w = torch.tensor(weight, dtype=torch.float32)
    b = torch.zeros(len(w)) if bias is None else torch.tensor(bias, dtype=torch.float32)
    return {"1.weight": w[None], "1.bias": b[None]}


def test_the_mixture_changes_predictions_by_hand():
    """x1 = (1, 0), label 1: expert logits (0.2, 0) (unsure, wrong), backbone (0, 3) → λ = 0.550, mix picks 1.
    x2 = (0, 1), label 0: expert logits (5, 0) (sure, right), backbone (0, 1) → λ = 0.993, mix picks 0.
    Each stream alone gets one of the two; the mixture gets both."""
    f = _two_d_fed([[1, 0], [0, 1]], [1, 0], 2)
    model = build_model("logistic", 2, (2,))
    expert = _linear([[0.2, 5.0], [0.0, 0.0]])
    backbone = _linear([[0.0, 0.0], [3.0, 1.0]])
    assert evaluate(model, expert, f, [0]).correct.tolist() == [1]
    assert evaluate(model, backbone, f, [0]).correct.tolist() == [1]
    lam1, lam2 = 1 / (1 + math.exp(-0.2)), 1 / (1 + math.exp(-5.0))
    z1 = torch.tensor([[lam1 * 0.2, (1 - lam1) * 3.0]])
    z2 = torch.tensor([[lam2 * 5.0, (1 - lam2) * 1.0]])
    want_loss = (torch.nn.functional.cross_entropy(z1, torch.tensor([1]))
                 + torch.nn.functional.cross_entropy(z2, torch.tensor([0])))
    got = evaluate_with(GatedMixture(expert), model, backbone, f, [0])
    assert got.correct.tolist() == [2] and got.n.tolist() == [2]
    assert got.loss_sum.item() == pytest.approx(want_loss.item(), rel=1e-6)
    assert evaluate_with(GatedMixture(expert, space="probs"), model, backbone, f, [0]).correct.tolist() == [2]
    assert evaluate_with(GatedMixture(expert, threshold=0.9), model, backbone, f, [0]).correct.tolist() == [2]
    # a sharp gate (T → 0) makes x1's expert fully confident: λ = 1 and the wrong expert wins
    assert evaluate_with(GatedMixture(expert, temperature=1e-3), model, backbone, f, [0]).correct.tolist() == [1]


@pytest.mark.parametrize("kwargs,match", [
    ({"temperature": 0.0}, "temperature must be a finite number > 0, got 0.0"),
    ({"temperature": math.inf}, "temperature must be"),
    ({"space": "odds"}, "space must be 'logits' or 'probs', got 'odds'"),
    ({"weight": 1.5}, "weight must be a number in \\[0, 1\\] or None, got 1.5"),
    ({"threshold": -0.1}, "threshold must be"),
    ({"weight": 0.5, "threshold": 0.5}, "not both"),
])
def test_gated_mixture_refuses_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GatedMixture(_linear([[1.0, 0.0], [0.0, 1.0]]), **kwargs)


def test_gated_mixture_checks_the_expert_against_the_federation(fed):
    model, backbone = _stack("logistic", range(2))
    _, too_few = _stack("logistic", range(5))  # K = 6 experts are needed
    with pytest.raises(ValueError, match="expected"):
        evaluate_with(GatedMixture(too_few), model, backbone, fed, [0, 1])
    with pytest.raises(ValueError, match="predictor must be"):
        evaluate_with("argmax", model, backbone, fed, [0, 1])


# ----------------------------------------------------------------------------- NearestPrototype
def test_nearest_prototype_by_hand_never_predicts_a_masked_class():
    """Logistic model: body = Flatten, so the embedding of a 2-D input is the input itself.
    Prototypes (0, 0), (3, 0), (0, 3) for classes 0, 1, 2."""
    x = [[0.4, 0.2], [2.9, 0.5], [0.2, 2.0], [1.4, 1.4]]  # nearest: 0, 1, 2, 0 (3.92 vs 4.52, 4.52)
    f = Federation.from_arrays(np.asarray(x, np.float32), np.array([0, 1, 2, 0]), [np.arange(4)] * 2,
                               [np.arange(4)] * 2, CPU, n_classes=3)
    model = build_model("logistic", 3, (2,))
    params = stack_params([init_params(model, seed=s) for s in range(4)])  # rows: clients 0, 1, 1, 0
    protos = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]]).expand(2, 3, 2).clone()
    mask = torch.tensor([[True, True, True], [False, True, True]])  # client 1 has no class-0 prototype
    got = evaluate_with(NearestPrototype(protos, mask), model, params, f, [0, 1, 1, 0])
    # client 0 gets all four; client 1 can only get sample 1 (class 1) and 2 (class 2) right
    assert got.correct.tolist() == [4, 2, 2, 4] and got.n.tolist() == [4] * 4
    assert torch.isnan(got.loss_sum).all()
    # relabel: client 1's nearest unmasked class of (0.4, 0.2) is 1 (6.8 < 8.0); client 0 predicts 0 there
    f1 = Federation.from_arrays(np.asarray(x[:3], np.float32), np.array([1, 1, 2]), [np.arange(3)] * 2,
                                [np.arange(3)] * 2, CPU, n_classes=3)
    assert evaluate_with(NearestPrototype(protos, mask), model, unstack_rows(params, 2), f1, [1, 0]).correct.tolist() == [3, 2]
    # the classifier head plays no part
    other = {n: t.clone() for n, t in params.items()}
    other["1.weight"].mul_(-7)
    assert evaluate_with(NearestPrototype(protos, mask), model, other, f, [0, 1, 1, 0]).correct.tolist() == [4, 2, 2, 4]


@pytest.mark.parametrize("arch,path", [("mlp", "vectorised"), ("mlp", "sequential"), ("cnn", "auto")])
def test_nearest_prototype_matches_a_direct_computation(fed, arch, path):
    model, params = _stack(arch, range(5))
    d = body(model)(fed.x[:1]).shape[1]
    gen = torch.Generator().manual_seed(0)
    protos = torch.randn(6, 10, d, generator=gen) * 0.3
    mask = torch.rand(6, 10, generator=gen) < 0.6
    mask[:, 3] = True
    got = evaluate_with(NearestPrototype(protos, mask), model, params, fed, CLIENTS, batch_size=16, path=path)
    assert got.correct.sum() > 0
    for row, (client, state) in enumerate(zip(CLIENTS, unstack(params))):
        model.load_state_dict(state)
        idx = torch.as_tensor(fed.test_parts[client])
        with torch.no_grad():
            emb = body(model.eval())(fed.x[idx]).double()
        dist = ((emb[:, None, :] - protos[client].double()[None]) ** 2).sum(-1)
        dist[:, ~mask[client]] = math.inf
        assert got.correct[row] == (dist.argmin(1) == fed.y[idx]).sum()
        assert got.n[row] == len(idx)


def test_nearest_prototype_refuses_bad_inputs(fed):
    model, params = _stack("logistic", range(2))
    protos = torch.zeros(6, 10, 64)
    with pytest.raises(ValueError, match="prototypes must be a float Tensor of shape \\(K, C, D\\)"):
        NearestPrototype(torch.zeros(6, 64))
    with pytest.raises(ValueError, match="mask must be a bool Tensor of shape \\(6, 10\\)"):
        NearestPrototype(protos, torch.ones(6, 9, dtype=torch.bool))
    mask = torch.ones(6, 10, dtype=torch.bool)
    mask[1] = False
    with pytest.raises(ValueError, match="at least one class for every evaluated client, got none for clients \\[1\\]"):
        evaluate_with(NearestPrototype(protos, mask), model, params, fed, [0, 1])
    with pytest.raises(ValueError, match="one row per client, K=6"):
        evaluate_with(NearestPrototype(protos[:5]), model, params, fed, [0, 1])
    with pytest.raises(ValueError, match="dimension D=32"):
        evaluate_with(NearestPrototype(torch.zeros(6, 10, 32)), model, params, fed, [0, 1])


def test_predictors_work_on_the_global_test_set(fed):
    model, backbone = _stack("logistic", range(3))
    _, expert = _stack("logistic", range(10, 16))
    got = evaluate_with(GatedMixture(expert, weight=1.0), model, backbone, fed, [0, 5, 5], split="global")
    want = evaluate(model, _rows(expert, [0, 5, 5]), fed, [0, 5, 5], split="global")
    assert got.n.tolist() == [97] * 3 and torch.equal(got.correct, want.correct)
