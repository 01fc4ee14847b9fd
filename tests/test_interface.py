"""The method interface as methods see it, through Context: the protocol's optimiser and
its state across rounds, the loss-matrix service, predictors in evaluation and records, and
round windows for two-phase methods."""
import dataclasses

import numpy as np
import pytest
import torch

import fedlib.methods
import fedlib.run
from fedlib import experiment as X
from fedlib.engine import broadcast
from fedlib.engine.predict import GatedMixture, OneModel
from fedlib.methods import FLConfig, Outcome
from fedlib.methods.base import federated_averaging, global_model_rounds, take
from fl_fixtures import make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def fedavg_accuracy(ctx):
    out = federated_averaging(ctx, [np.arange(ctx.n_clients)], log=False)
    return out, ctx.evaluate(out.models, out.assignment)[0]


def with_cfg(ctx, **fields):
    return dataclasses.replace(ctx, cfg=dataclasses.replace(ctx.cfg, **fields), history=[])


def test_protocol_sgd_trains_and_differs_from_adam_and_paths_agree():
    base = make_context(rounds=2, fraction=1.0, lr=0.05)
    _, adam = fedavg_accuracy(base)
    sgd_vec, acc_vec = fedavg_accuracy(with_cfg(base, optimizer="sgd", momentum=0.9, weight_decay=1e-4,
                                                path="vectorised"))
    sgd_seq, acc_seq = fedavg_accuracy(with_cfg(base, optimizer="sgd", momentum=0.9, weight_decay=1e-4,
                                                path="sequential"))
    assert not np.array_equal(adam, acc_vec)
    for k in sgd_vec.models:
        torch.testing.assert_close(sgd_vec.models[k], sgd_seq.models[k], rtol=1e-5, atol=1e-6)
    assert acc_vec.sum() > 0.5 * ctx_test_size(base)


def ctx_test_size(ctx):
    return int(ctx.fed.n_test.sum())


def test_protocol_rejects_momentum_with_adam():
    with pytest.raises(ValueError, match="momentum must be 0 with optimizer='adam'"):
        FLConfig(momentum=0.9)
    with pytest.raises(ValueError, match=r"optimizer must be one of \['adam', 'sgd'\], got 'rmsprop'"):
        FLConfig(optimizer="rmsprop")


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_optimizer_state_kept_across_rounds_changes_training_and_is_per_client(optimizer):
    extra = {"momentum": 0.9} if optimizer == "sgd" else {}
    base = make_context(rounds=3, fraction=0.5, lr=0.05)
    fresh, _ = fedavg_accuracy(with_cfg(base, optimizer=optimizer, **extra))
    kept_ctx = with_cfg(base, optimizer=optimizer, keep_optimizer_state=True, **extra)
    kept, _ = fedavg_accuracy(kept_ctx)
    assert any(not torch.equal(fresh.models[k], kept.models[k]) for k in fresh.models)
    state = kept_ctx._opt_state
    if optimizer == "adam":  # every selected client's step count grew, the others stayed at 0
        steps = state.step.numpy()
        assert steps.shape == (10,) and (steps > 0).sum() >= 5
        assert len(set(steps[steps > 0].tolist())) > 1  # clients of different sizes, own counts
    else:
        assert state.has_buffer.numpy().sum() >= 5


def test_keeping_no_state_is_todays_training_bit_for_bit():
    a, _ = fedavg_accuracy(make_context(rounds=2))
    b, _ = fedavg_accuracy(with_cfg(make_context(rounds=2), keep_optimizer_state=False, optimizer="adam"))
    assert all(torch.equal(a.models[k], b.models[k]) for k in a.models)


def test_loss_matrix_agrees_with_evaluate():
    ctx = make_context(rounds=1)
    models = broadcast(ctx.init_state(), 3)
    out, _ = fedavg_accuracy(ctx)
    models = {k: torch.cat([v[:2], out.models[k]]) for k, v in models.items()}  # 2 initial + trained
    loss, correct, n = ctx.loss_matrix(models, np.arange(ctx.n_clients), split="test")
    assert loss.shape == correct.shape == (3, 10) and n.shape == (10,)
    for g in range(3):
        c, n_eval = ctx.evaluate(models, np.full(10, g))
        assert np.array_equal(correct[g], c) and np.array_equal(n, n_eval)
    assert np.array_equal(loss[0], loss[1]) and (loss[2] < loss[0]).mean() > 0.5  # training lowered it


def test_evaluation_goes_through_the_predictor():
    ctx = make_context(rounds=1)
    out, plain = fedavg_accuracy(ctx)
    init = broadcast(ctx.init_state(), ctx.n_clients)
    expert_only = GatedMixture(expert=init, weight=1.0)  # all weight on the (untrained) expert
    init_acc = ctx.evaluate(init, np.arange(10))[0]
    assert np.array_equal(ctx.evaluate(out.models, out.assignment, predictor=expert_only)[0], init_acc)
    assert np.array_equal(ctx.evaluate(out.models, out.assignment, predictor=OneModel())[0], plain)


def test_records_evaluate_through_the_outcomes_predictor(monkeypatch):
    spec = X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "fedavg", fl={"rounds": 1, "local_epochs": 1},
                     n_train=1200)
    plain = X.run(spec)
    seen = {}

    class Expert:  # a method whose clients all predict with the initial model as expert
        Hyper = type(fedlib.methods.make_hyper("fedavg", {}))

        @staticmethod
        def run(ctx, hp):
            out = federated_averaging(ctx, [np.arange(ctx.n_clients)])
            expert = broadcast(ctx.init_state(), ctx.n_clients)
            seen["init"] = ctx.evaluate(expert, np.arange(ctx.n_clients))[0].tolist()
            return Outcome(out.models, out.assignment, predictor=GatedMixture(expert=expert, weight=1.0))

    monkeypatch.setattr(fedlib.run, "get_method", lambda name: Expert)
    rec = X.run(spec)
    assert rec["correct"] == seen["init"] != plain["correct"]


def test_round_window_continues_the_round_count():
    ctx = make_context(rounds=3, fraction=1.0)
    warm = federated_averaging(ctx, [np.arange(10)], rounds=1, log=False)
    start = take(warm.models, [0])
    start = {k: v[0] for k, v in start.items()}
    second = global_model_rounds(ctx, start=start, first_round=1, rounds=2)
    other = global_model_rounds(dataclasses.replace(ctx, history=[]), start=start, first_round=0, rounds=2)
    assert [h["round"] for h in ctx.history] == [2, 3]
    assert any(not torch.equal(second.models[k], other.models[k]) for k in second.models)  # other batches
    with pytest.raises(ValueError, match="first_round must be an integer ≥ 0, got -1"):
        global_model_rounds(ctx, first_round=-1)
