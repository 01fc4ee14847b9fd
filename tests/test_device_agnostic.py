"""Device handling without a GPU: no method reads a device tensor into numpy directly, and
the server-side rules run on the ``meta`` device (which, like CUDA, refuses CPU operands).
Where the machine has a GPU, every method also runs on it (``DEVICES``; an H200 run found
FedPrism's CPU mask, now covered on ``meta`` below).

On CUDA, ``np.asarray(tensor)`` raises; on CPU it silently works, so a CPU-only test suite
cannot see the mix-up — unless tensor→numpy conversion is switched off. ``no_numpy``
switches it off for every tensor; :func:`fedlib.engine.host.to_host` is the one sanctioned
way across, and every method must run to completion under it.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.engine import broadcast, weighted_average
from fedlib.engine.host import to_host
from fedlib.methods import METHODS, get_method, make_hyper
from fedlib.methods import fedopt, fedprism, fedsoft
from fedlib.methods.base import take
from fedlib.methods.cfl import cosine_similarity_matrix
from fl_fixtures import DEVICES, method_context, method_hyper

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

META = torch.device("meta")


@pytest.fixture
def no_numpy(monkeypatch):
    """Tensor → numpy conversion raises, as it does for a CUDA tensor."""
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"a {tuple(self.shape)} tensor was converted to numpy directly; on a GPU "
                             "this fails — use fedlib.engine.host.to_host")
    monkeypatch.setattr(torch.Tensor, "__array__", refuse)
    monkeypatch.setattr(torch.Tensor, "numpy", refuse)


def test_the_guard_refuses_direct_conversion_and_to_host_still_works(no_numpy):
    t = torch.arange(3)
    with pytest.raises(AssertionError, match="to_host"):
        np.asarray(t)
    with pytest.raises(AssertionError, match="to_host"):
        t.numpy()
    assert to_host(t, np.float64).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", METHODS)
def test_every_method_runs_without_direct_device_to_numpy_conversion(name, device, no_numpy):
    """On the CPU under the guard; where this machine has a GPU, on it too (DEVICES)."""
    ctx = method_context(name, rounds=2, seed=0, device=device)
    out = get_method(name).run(ctx, method_hyper(name))
    assert {t.device.type for t in out.models.values()} == {device}
    correct, n = ctx.evaluate(out.models, out.assignment)
    assert correct.shape == n.shape == (ctx.n_clients,)
    assert 0 < int(n.sum()) and 0 <= int(correct.sum()) <= int(n.sum())


def meta_state(m: int) -> dict:
    return {"w": torch.empty(m, 4, 3, device=META), "b": torch.empty(m, 3, device=META)}


def test_shared_server_pieces_stay_on_the_models_device():
    stacked = meta_state(5)
    rows = np.array([4, 0, 2])  # host indices, as methods hold them
    assert all(v.device == META and v.shape[0] == 3 for v in take(stacked, rows).values())
    avg = weighted_average(stacked, np.array([1.0, 2.0, 3.0, 4.0, 5.0]))  # host weights
    assert all(v.device == META for v in avg.values()) and avg["w"].shape == (4, 3)
    assert all(v.device == META and v.shape[0] == 2 for v in broadcast(avg, 2).values())
    assert cosine_similarity_matrix(torch.empty(3, 7, device=META)).device == META


def test_server_optimiser_fedsoft_and_fedprism_rules_on_meta():
    names = ["w", "b"]
    current = {k: v[0] for k, v in meta_state(1).items()}
    aggregate = {k: v[0] for k, v in meta_state(1).items()}
    method = fedopt.METHODS["fedadam"]
    hp = make_hyper("fedadam", {})
    state = method.init(fedopt.flatten(current, names), hp)
    new, state = fedopt.server_update(lambda w, a, s: method.step(w, a, s, hp=hp), current, aggregate, state, names)
    assert all(v.device == META for v in new.values()) and state.m.device == META
    u = np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]])  # host importance weights (K=3, S=2)
    center, mu = fedsoft.proximal_terms(u, meta_state(2), lam=0.1)
    assert all(v.device == META and v.shape[0] == 3 for v in center.values())
    assert mu.shape == (3,)
    clusters = fedprism.cluster_step(meta_state(2), meta_state(3), u, eta=0.5)  # an H200 run found this one
    assert all(v.device == META and v.shape[0] == 2 for v in clusters.values())


def test_a_cpu_operand_in_a_meta_rule_is_caught():
    """The meta device refuses CPU tensors like CUDA does, so the tests above are not vacuous."""
    with pytest.raises(RuntimeError, match="device"):
        torch.empty(3, device=META) + torch.ones(3)


def test_engine_calls_run_in_ieee_fp32_on_cuda_and_give_the_callers_settings_back(monkeypatch):
    """cuDNN's TF32 convolutions and non-deterministic algorithms are off inside every engine
    call (on an H200 they broke the CNN's path equality) unless a gpu_kernels block allows
    them, and the caller's settings, TF32 allowed here, are back afterwards, also after an
    error. The flags only steer CUDA kernels, so this runs on any machine."""
    from fedlib.engine import gpu_kernels, local_train, precision, train
    from fedlib.models import build_model, init_params
    from fl_fixtures import ragged_federation

    before = precision._flags()
    tf32 = ("tf32", "tf32", False, True) if precision._new_api() else (True, True, False, True)
    precision._set(*tf32)
    try:
        seen = []
        real = train._template
        monkeypatch.setattr(train, "_template", lambda *a, **k: (seen.append(precision._flags()), real(*a, **k))[1])
        fed = ragged_federation([5, 7])
        model = build_model("cnn", 10, (1, 8, 8))
        local_train(model, broadcast(init_params(model, 0), 2), fed, [0, 1], epochs=1, seed=0)
        assert seen == [precision._exact()] and precision._flags() == tf32
        with pytest.raises(ValueError):
            with precision.exact_fp32():
                with precision.exact_fp32():
                    assert precision._flags() == precision._exact()
                assert precision._flags() == precision._exact()
                raise ValueError
        assert precision._flags() == tf32
        with gpu_kernels(tf32=True, deterministic=False):  # the user's explicit trade
            seen.clear()
            local_train(model, broadcast(init_params(model, 0), 2), fed, [0, 1], epochs=1, seed=0)
            loose = ("tf32", "tf32", False, False) if precision._new_api() else (True, True, False, False)
            assert seen == [loose] == [precision._exact()]
        assert precision._exact() == (("ieee", "ieee", True, False) if precision._new_api()
                                      else (False, False, True, False))
        with pytest.raises(ValueError, match="tf32"):
            gpu_kernels(tf32="yes")
    finally:
        precision._set(*before)


def test_every_engine_entry_point_that_runs_a_model_runs_under_the_gpu_policy(monkeypatch):
    """Training, evaluation, prediction and class embeddings each apply the policy once (and
    give the flags back), so no entry point computes in TF32 on a GPU behind the user's back.
    Recorded through ``precision._set``, which the policy calls on entry and on exit."""
    from fedlib.engine import (Federation, OneModel, class_embeddings, evaluate, evaluate_global, evaluate_with,
                               local_train, loss_matrix, precision, predict_logits)
    from fedlib.models import build_model, init_params
    from fl_fixtures import digits

    x, y = digits()
    x = x.reshape(-1, 1, 8, 8)
    parts = [np.arange(0, 40), np.arange(40, 70)]
    fed = Federation.from_arrays(x, y, parts, parts, "cpu", x_global=x[100:130], y_global=y[100:130])
    model = build_model("cnn", 10, (1, 8, 8))
    params = broadcast(init_params(model, 0), 2)
    calls = {
        "local_train": lambda: local_train(model, params, fed, [0, 1], epochs=1, seed=0),
        "evaluate": lambda: evaluate(model, params, fed, [0, 1]),
        "evaluate_global": lambda: evaluate_global(model, params, fed),
        "loss_matrix": lambda: loss_matrix(model, params, fed, [0, 1], split="test"),
        "predict_logits": lambda: predict_logits(model, params, fed.x[:5]),
        "evaluate_with": lambda: evaluate_with(OneModel(), model, params, fed, [0, 1]),
        "class_embeddings": lambda: class_embeddings(model, params, fed, [0, 1]),
    }
    real, applied = precision._set, []
    monkeypatch.setattr(precision, "_set", lambda *flags: (applied.append(flags), real(*flags))[1])
    before = precision._flags()
    for name, call in calls.items():
        applied.clear()
        call()
        # on entry (again for a nested entry point: evaluate_with of OneModel calls evaluate),
        # then the caller's flags back
        assert len(applied) >= 2 and applied[-1] == before, name
        assert all(flags == precision._exact() for flags in applied[:-1]), name
