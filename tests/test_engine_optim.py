"""Tests of local_train's client optimisers (Adam, SGD), per-client optimiser state and
FedProto's embedding pull: both paths agree, and each piece matches its formula."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from fedlib.engine import (SGD, Adam, AdamState, EmbeddingPull, SGDState, broadcast, flatten_params, local_train,
                           unstack)
import fedlib.engine.optim as optim_module
from fedlib.engine.schedule import batch_plan
from fedlib.models import body, build_model, head, init_params

from fl_fixtures import DEVICES, assert_states_close, assert_states_equal, ragged_federation, start_states

pytestmark = pytest.mark.cross_cpu  # the engine's kernels: numbers from the CPU's instruction set (make test-other-cpu)

RAGGED = [45, 70, 3, 32, 1, 97]  # exact multiple of 32, single-sample and partial-batch clients
FULL_BATCH = 128  # ≥ every client's size: one step per epoch


def _assert_opt_states_close(a, b, atol=1e-5):
    assert type(a) is type(b)
    if isinstance(a, AdamState):
        assert torch.equal(a.step, b.step)
        assert_states_close(a.exp_avg, b.exp_avg, atol)
        assert_states_close(a.exp_avg_sq, b.exp_avg_sq, atol)
    else:
        assert torch.equal(a.has_buffer, b.has_buffer)
        assert_states_close(a.momentum_buffer, b.momentum_buffer, atol)


@pytest.fixture(scope="module")
def ragged_fed():
    """Six clients with the train sizes of RAGGED (load_digits in [0, 1], (1, 8, 8) images)."""
    return ragged_federation(RAGGED)


SMALL_MODELS = {  # logistic and mlp take the dense kernel, cnn the vmap + autograd one
    "logistic": lambda: build_model("logistic", 10, (1, 8, 8)),
    "mlp": lambda: build_model("mlp", 10, (1, 8, 8), hidden=32),
    "cnn": lambda: build_model("cnn", 10, (1, 8, 8)),
}
SGDS = {
    "plain": SGD(lr=0.05),
    "momentum_wd": SGD(lr=0.05, momentum=0.9, weight_decay=1e-2),
    "nesterov": SGD(lr=0.05, momentum=0.9, nesterov=True),
}


def _both_paths(model, start, fed, clients, **kwargs):
    seq = local_train(model, start, fed, clients, path="sequential", **kwargs)
    vec = local_train(model, start, fed, clients, path="vectorised", max_clients_per_chunk=4, **kwargs)
    assert (seq.path, vec.path) == ("sequential", "vectorised")
    return seq, vec


# ----------------------------------------------------------------------------- hyperparameters
def test_optimizer_dataclasses_validate_their_fields():
    assert Adam() == Adam(1e-3, (0.9, 0.999), 1e-7, 0.0)
    assert SGD(lr=1).lr == 1.0 and isinstance(SGD(lr=1).lr, float)
    for bad, match in [(dict(lr=0), "lr"), (dict(lr=float("nan")), "lr"), (dict(betas=(0.9, 1.0)), "betas"),
                       (dict(betas=(0.9,)), "betas"), (dict(eps=-1e-8), "eps"),
                       (dict(weight_decay=-1), "weight_decay")]:
        with pytest.raises(ValueError, match=match):
            Adam(**bad)
    for bad, match in [(dict(lr=-0.1), "lr"), (dict(momentum=-0.5), "momentum"),
                       (dict(weight_decay=-1e-4), "weight_decay"), (dict(nesterov=True), "momentum > 0"),
                       (dict(momentum=0.9, nesterov="yes"), "nesterov")]:
        with pytest.raises(ValueError, match=match):
            SGD(**bad)


def test_optimizer_none_and_the_default_adam_are_bit_identical_to_the_keyword_arguments(ragged_fed):
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=0), 6)
    for path in ("sequential", "vectorised"):
        kwargs = dict(epochs=2, seed=1, path=path)
        plain = local_train(model, start, ragged_fed, range(6), **kwargs)
        assert_states_equal(plain.params, local_train(model, start, ragged_fed, range(6), optimizer=Adam(),
                                                       **kwargs).params)
        legacy = local_train(model, start, ragged_fed, range(6), lr=1e-2, betas=(0.8, 0.99), eps=1e-6, **kwargs)
        chosen = local_train(model, start, ragged_fed, range(6), optimizer=Adam(1e-2, (0.8, 0.99), 1e-6), **kwargs)
        assert_states_equal(legacy.params, chosen.params)
        assert not torch.equal(legacy.params["1.weight"], plain.params["1.weight"])
        assert plain.opt_state is None  # not requested: not returned


def test_optimizer_together_with_adam_keywords_is_an_error(ragged_fed):
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=0), 2)
    for extra in (dict(lr=0.1), dict(betas=(0.5, 0.9)), dict(eps=1e-8)):
        with pytest.raises(ValueError, match="optimizer"):
            local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, optimizer=SGD(), **extra)
    with pytest.raises(ValueError, match="optimizer must be"):
        local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, optimizer=torch.optim.SGD)
    with pytest.raises(ValueError, match="lr must be"):
        local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, lr=0.0)


# ----------------------------------------------------------------------------- SGD
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("config", sorted(SGDS))
@pytest.mark.parametrize("arch", sorted(SMALL_MODELS))
def test_sgd_paths_agree_on_ragged_clients(arch, config, device):
    ragged_fed = ragged_federation(RAGGED, device)
    model = SMALL_MODELS[arch]()
    start = start_states(model, 1, 6, device)
    seq, vec = _both_paths(model, start, ragged_fed, range(6), epochs=3, seed=7, round_idx=2,
                           optimizer=SGDS[config])
    assert_states_close(seq.params, vec.params)
    torch.testing.assert_close(seq.mean_loss, vec.mean_loss, atol=1e-5, rtol=1e-5)
    moved = flatten_params(seq.params) - flatten_params(start)
    assert (moved.abs().amax(1) > 1e-3).all()  # every client trained
    adam = local_train(model, start, ragged_fed, range(6), epochs=3, seed=7, round_idx=2, path="vectorised")
    assert not torch.allclose(flatten_params(adam.params), flatten_params(vec.params), atol=1e-3)


@pytest.mark.parametrize("config", sorted(SGDS))
@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_sgd_follows_the_written_out_formula(ragged_fed, config, path):
    """g += λw; b = g first, else μb + g; step = b or g + μb (Nesterov); w -= lr·step."""
    sgd = SGDS[config]
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=2), 1)
    res = local_train(model, start, ragged_fed, [1], epochs=2, seed=3, optimizer=sgd, path=path)
    net = SMALL_MODELS["mlp"]()
    net.load_state_dict(unstack(start)[0])
    buffers = {}
    plan = batch_plan(ragged_fed.train_parts[1], 2, 32, 3, 0, 1)
    for s, count in enumerate(plan.count):
        idx = torch.as_tensor(plan.index[s, :count])
        net.zero_grad()
        nn.functional.cross_entropy(net(ragged_fed.x[idx]), ragged_fed.y[idx]).backward()
        with torch.no_grad():
            for name, w in net.named_parameters():
                g = w.grad + sgd.weight_decay * w
                buffers[name] = g.clone() if name not in buffers else sgd.momentum * buffers[name] + g
                step = g + sgd.momentum * buffers[name] if sgd.nesterov else buffers[name]
                w -= sgd.lr * step
    assert_states_close(unstack(res.params)[0], dict(net.named_parameters()))


@pytest.mark.parametrize("config", sorted(SGDS))
def test_stacked_sgd_update_is_torch_optim_sgd_bit_for_bit(config):
    """The vectorised update of three stacked rows, four steps, equals torch.optim.SGD's default
    (foreach) update of each row alone bit for bit, wherever the row sits in the stack: one
    row starting without a buffer (zeros stand for it), two from given buffers, tensors whose
    rows are and are not whole blocks of 16 floats. The fused kernel (torch.optim.SGD(fused=True))
    is not used because it rounds μb + g otherwise — and its last numel mod 16 elements
    otherwise again, so a stacked row would round by its place in the stack."""
    from fedlib.engine.optim import _sgd_step
    sgd = SGDS[config]
    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 40, 33), (3, 33), (3, 4, 32)]
    params = [torch.randn(s, generator=gen) for s in shapes]
    buffers = [torch.randn(s, generator=gen) for s in shapes]
    for b in buffers:
        b[0] = 0  # row 0 has no buffer yet
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(4)]
    rows = [[p[i].clone().requires_grad_() for p in params] for i in range(3)]
    torch_opts = []
    for i, ws in enumerate(rows):
        opt = torch.optim.SGD(ws, lr=sgd.lr, momentum=sgd.momentum, weight_decay=sgd.weight_decay,
                              nesterov=sgd.nesterov, foreach=True)
        if sgd.momentum and i:
            for w, b in zip(ws, buffers):
                opt.state[w]["momentum_buffer"] = b[i].clone()
        torch_opts.append(opt)
    stacked, stacked_buffers = [p.clone() for p in params], [b.clone() for b in buffers]
    for g in grads:
        _sgd_step(stacked, g, stacked_buffers if sgd.momentum else None, sgd)
        for i, (ws, opt) in enumerate(zip(rows, torch_opts)):
            for w, gi in zip(ws, g):
                w.grad = gi[i].clone()
            opt.step()
    for i, ws in enumerate(rows):
        for w, s in zip(ws, stacked):
            assert torch.equal(w.detach(), s[i]), (config, i)
    if sgd.momentum:
        fused, fused_buffers = [p.clone() for p in params], [b.clone() for b in buffers]
        for g in grads:
            torch._fused_sgd_(fused, [t.clone() for t in g], fused_buffers, weight_decay=sgd.weight_decay,
                              momentum=sgd.momentum, lr=sgd.lr, dampening=0.0, nesterov=sgd.nesterov,
                              maximize=False, is_first_step=False)
        assert not all(torch.equal(a, b) for a, b in zip(fused_buffers, stacked_buffers))


@pytest.mark.parametrize("arch", ["mlp", "cnn"])
def test_sgd_combines_with_the_proximal_term(ragged_fed, arch):
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=2), 6)
    center = broadcast(init_params(model, seed=3), 6)
    mu = torch.tensor([0.0, 0.5, 1.0, 2.0, 0.1, 3.0])
    sgd = SGD(lr=0.05, momentum=0.9, weight_decay=1e-3)
    seq, vec = _both_paths(model, start, ragged_fed, range(6), epochs=2, seed=1, optimizer=sgd,
                           prox_center=center, prox_mu=mu)
    assert_states_close(seq.params, vec.params)
    plain = local_train(model, start, ragged_fed, range(6), path="vectorised", epochs=2, seed=1, optimizer=sgd)
    dist = lambda res: (flatten_params(res.params) - flatten_params(center)).norm(dim=1)  # noqa: E731
    torch.testing.assert_close(dist(vec)[0], dist(plain)[0])  # μ = 0: no pull
    assert (dist(vec)[1:] < dist(plain)[1:]).all()  # μ > 0: pulled toward the center


@pytest.mark.parametrize("arch", ["logistic", "cnn"])
def test_adam_weight_decay_paths_agree_and_shrink_the_weights(ragged_fed, arch):
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=4), 6)
    adam = Adam(lr=1e-2, weight_decay=0.5)
    seq, vec = _both_paths(model, start, ragged_fed, range(6), epochs=2, seed=0, optimizer=adam)
    assert_states_close(seq.params, vec.params)
    plain = local_train(model, start, ragged_fed, range(6), epochs=2, seed=0, lr=1e-2, path="vectorised")
    norm = lambda res: flatten_params(res.params).norm(dim=1)  # noqa: E731
    assert (norm(vec) < norm(plain)).all()


# ----------------------------------------------------------------------------- optimiser state
OPTIMIZERS = {"adam": Adam(lr=1e-2), "sgd": SGD(lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)}


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_two_epochs_equal_one_epoch_twice_with_the_state_passed_back(ragged_fed, opt, path):
    """Full-batch steps see the same samples whatever the shuffle, so E = 2 in one call is
    E = 1 then E = 1 continued from the returned state (up to summation order)."""
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=5), 6)
    kwargs = dict(seed=2, batch_size=FULL_BATCH, optimizer=OPTIMIZERS[opt], path=path)
    both = local_train(model, start, ragged_fed, range(6), epochs=2, return_opt_state=True, **kwargs)
    first = local_train(model, start, ragged_fed, range(6), epochs=1, return_opt_state=True, **kwargs)
    second = local_train(model, first.params, ragged_fed, range(6), epochs=1, opt_state=first.opt_state,
                         round_idx=1, **kwargs)
    assert_states_close(both.params, second.params, atol=1e-6)
    _assert_opt_states_close(both.opt_state, second.opt_state, atol=1e-6)
    torch.testing.assert_close(both.mean_loss, second.mean_loss, atol=1e-5, rtol=1e-5)
    if opt == "adam":
        assert both.opt_state.step.tolist() == [2] * 6
    else:
        assert both.opt_state.has_buffer.all()
    fresh = local_train(model, first.params, ragged_fed, range(6), epochs=1, round_idx=1, **kwargs)
    gap = (flatten_params(fresh.params) - flatten_params(second.params)).abs().amax(1)
    assert (gap > 1e-4).all()  # the state matters


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("arch", sorted(SMALL_MODELS))
def test_paths_agree_when_resuming_from_unequal_per_client_states(arch, opt, device):
    """After one epoch of batch 32 the clients have taken 2, 3, 1, 1, 1, 4 steps: Adam's
    bias correction then needs each row's own step number on the vectorised path."""
    ragged_fed = ragged_federation(RAGGED, device)
    model = SMALL_MODELS[arch]()
    start = start_states(model, 6, 6, device)
    optimizer = OPTIMIZERS[opt]
    warm = local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, optimizer=optimizer,
                       path="sequential", return_opt_state=True)
    if opt == "adam":
        assert warm.opt_state.step.tolist() == [2, 3, 1, 1, 1, 4]
    seq, vec = _both_paths(model, warm.params, ragged_fed, range(6), epochs=2, seed=0, round_idx=1,
                           optimizer=optimizer, opt_state=warm.opt_state)
    assert_states_close(seq.params, vec.params)
    _assert_opt_states_close(seq.opt_state, vec.opt_state)
    torch.testing.assert_close(seq.mean_loss, vec.mean_loss, atol=1e-5, rtol=1e-5)
    if opt == "adam":
        assert vec.opt_state.step.tolist() == [2 + 4, 3 + 6, 1 + 2, 1 + 2, 1 + 2, 4 + 8]
    fresh = local_train(model, warm.params, ragged_fed, range(6), epochs=2, seed=0, round_idx=1,
                        optimizer=optimizer, path="vectorised")
    assert not torch.allclose(flatten_params(fresh.params), flatten_params(vec.params), atol=1e-4)
    if opt == "adam":  # the given state is not modified
        assert warm.opt_state.step.tolist() == [2, 3, 1, 1, 1, 4]


def test_per_row_adam_matches_torch_adam_client_by_client(ragged_fed):
    """Resumed Adam on the vectorised path equals torch.optim.Adam loaded with the same state."""
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=7), 6)
    adam = Adam(lr=1e-2, weight_decay=0.1)
    warm = local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, optimizer=adam,
                       path="vectorised", return_opt_state=True)
    res = local_train(model, warm.params, ragged_fed, range(6), epochs=1, seed=0, round_idx=3,
                      optimizer=adam, opt_state=warm.opt_state, path="vectorised")
    for i in range(6):
        net = SMALL_MODELS["logistic"]()
        net.load_state_dict(unstack(warm.params)[i])
        opt = torch.optim.Adam(net.parameters(), lr=1e-2, eps=1e-7, weight_decay=0.1)
        for name, w in net.named_parameters():
            opt.state[w] = {"step": torch.tensor(float(warm.opt_state.step[i])),
                            "exp_avg": warm.opt_state.exp_avg[name][i].clone(),
                            "exp_avg_sq": warm.opt_state.exp_avg_sq[name][i].clone()}
        plan = batch_plan(ragged_fed.train_parts[i], 1, 32, 0, 3, i)
        for s, count in enumerate(plan.count):
            idx = torch.as_tensor(plan.index[s, :count])
            opt.zero_grad()
            nn.functional.cross_entropy(net(ragged_fed.x[idx]), ragged_fed.y[idx]).backward()
            opt.step()
        assert_states_close(unstack(res.params)[i], dict(net.named_parameters()))


def test_returning_the_state_changes_nothing_else_and_state_rows_can_be_taken_and_put(ragged_fed):
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=8), 6)
    for opt in (Adam(), SGD(momentum=0.5), SGD()):
        for path in ("sequential", "vectorised"):
            plain = local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, optimizer=opt, path=path)
            kept = local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, optimizer=opt, path=path,
                               return_opt_state=True)
            assert_states_equal(plain.params, kept.params)
            assert plain.opt_state is None and kept.opt_state is not None
        if isinstance(opt, SGD) and not opt.momentum:
            assert kept.opt_state.momentum_buffer == {} and not kept.opt_state.has_buffer.any()
    state = local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, return_opt_state=True).opt_state
    part = state.take([4, 1])
    assert part.step.tolist() == [state.step[4].item(), state.step[1].item()]
    moved = state.put([0], state.take([5]))
    assert moved.step.tolist() == [state.step[5].item()] + state.step[1:].tolist()
    assert torch.equal(moved.exp_avg["1.weight"][0], state.exp_avg["1.weight"][5])
    assert not torch.equal(state.exp_avg["1.weight"][0], state.exp_avg["1.weight"][5])  # put copies


@pytest.mark.parametrize("arch", ["mlp", "fmnist_cnn"])  # the dense kernel (300 units: 203k weights), conv (94k)
def test_fresh_one_step_adam_rows_update_row_by_row_with_the_stacked_updates_bits(ragged_fed, arch, monkeypatch):
    """Clients that take one step from a fresh Adam and whose state is not returned are
    updated row by row on one row of zeroed moments (``StackedOptimizer(keep_state=False)``,
    FedAvg's many small clients): their weights are the stacked update's (the state
    returned) bit for bit, in one chunk and in chunks of 1 and 4, with weight decay and a
    proximal term; a chunk with a two-step client, a state given, or clients under
    ``ROW_BY_ROW_WEIGHTS`` take the stacked update."""
    model = build_model(arch, 10, (1, 8, 8), **({"hidden": 300} if arch == "mlp" else {}))
    assert sum(p.numel() for p in model.parameters()) >= optim_module.ROW_BY_ROW_WEIGHTS
    start = broadcast(init_params(model, seed=3), 6)
    modes = []
    built = optim_module.StackedOptimizer.__init__

    def spy(self, *args, **kwargs):
        built(self, *args, **kwargs)
        modes.append(self.scratch is not None)

    monkeypatch.setattr(optim_module.StackedOptimizer, "__init__", spy)
    kwargs = dict(epochs=1, seed=0, batch_size=FULL_BATCH, path="vectorised",
                  optimizer=Adam(lr=1e-2, weight_decay=1e-3), prox_center=start, prox_mu=0.1)
    for chunk in (None, 1, 4):
        modes.clear()
        stacked = local_train(model, start, ragged_fed, range(6), return_opt_state=True,
                              max_clients_per_chunk=chunk, **kwargs)
        assert modes and not any(modes)
        modes.clear()
        rows = local_train(model, start, ragged_fed, range(6), max_clients_per_chunk=chunk, **kwargs)
        assert modes and all(modes)
        assert_states_equal(rows.params, stacked.params)
    modes.clear()
    two = local_train(model, start, ragged_fed, range(6), **{**kwargs, "batch_size": 64})  # 70 and 97 samples: 2 steps
    assert not all(modes)  # the chunk of the two-step clients
    modes.clear()
    local_train(model, start, ragged_fed, range(6), opt_state=stacked.opt_state, **kwargs)
    assert modes and not any(modes)
    assert any(not torch.equal(two.params[n], stacked.params[n]) for n in start)  # a second step was taken
    modes.clear()
    small = SMALL_MODELS["mlp"]()  # 4.5k weights
    local_train(small, broadcast(init_params(small, seed=3), 6), ragged_fed, range(6), **{**kwargs, "prox_mu": 0.0})
    assert modes and not any(modes)
    monkeypatch.setattr(optim_module, "ROW_BY_ROW_WEIGHTS", 1)
    with pytest.raises(RuntimeError, match="keep_state=False"):
        optim_module.StackedOptimizer(Adam(), ["w"], {"w": torch.zeros(2, 3)}, None, np.ones(2, dtype=np.int64),
                                      AdamState({"w": torch.zeros(2, 3)}, {"w": torch.zeros(2, 3)},
                                                torch.zeros(2, dtype=torch.int64)),
                                      keep_state=False).final_state()


def test_a_row_without_momentum_buffer_starts_with_torch_first_step_rule(ragged_fed):
    """has_buffer False: whatever the row's buffer holds, the first step sets b = g."""
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=13), 6)
    sgd = SGD(lr=0.05, momentum=0.9)
    ones = {n: torch.ones_like(t) for n, t in start.items()}
    has = torch.tensor([False, True, False, True, False, True])
    fresh = local_train(model, start, ragged_fed, range(6), epochs=1, seed=0, optimizer=sgd, path="sequential")
    seq, vec = _both_paths(model, start, ragged_fed, range(6), epochs=1, seed=0, optimizer=sgd,
                           opt_state=SGDState(ones, has))
    assert_states_close(seq.params, vec.params)
    for row in range(6):
        same = all(torch.equal(seq.params[n][row], fresh.params[n][row]) for n in start)
        assert same == (not has[row])  # a real buffer of ones changes the result
    assert seq.opt_state.has_buffer.all() and vec.opt_state.has_buffer.all()


def test_bad_optimizer_states_fail_fast(ragged_fed):
    model = SMALL_MODELS["logistic"]()
    start = broadcast(init_params(model, seed=0), 2)
    adam_state = local_train(model, start, ragged_fed, [0, 1], epochs=1, seed=0, return_opt_state=True).opt_state
    kwargs = dict(epochs=1, seed=0)
    with pytest.raises(ValueError, match="SGDState"):
        local_train(model, start, ragged_fed, [0, 1], optimizer=SGD(momentum=0.9), opt_state=adam_state, **kwargs)
    with pytest.raises(ValueError, match="step"):
        local_train(model, start, ragged_fed, [0, 1], opt_state=AdamState(adam_state.exp_avg, adam_state.exp_avg_sq,
                                                                          torch.tensor([1, -1])), **kwargs)
    with pytest.raises(ValueError, match="shape"):
        local_train(model, {n: t[:1] for n, t in start.items()}, ragged_fed, [0], opt_state=adam_state, **kwargs)
    with pytest.raises(ValueError, match="has_buffer"):
        local_train(model, start, ragged_fed, [0, 1], optimizer=SGD(momentum=0.9),
                    opt_state=SGDState({}, torch.tensor([1, 0])), **kwargs)
    with pytest.raises(ValueError, match="momentum_buffer is empty"):
        local_train(model, start, ragged_fed, [0, 1], optimizer=SGD(momentum=0.9),
                    opt_state=SGDState({}, torch.tensor([True, False])), **kwargs)


# ----------------------------------------------------------------------------- embedding pull
def _pull(model, m, seed=0, weight=None):
    """Random prototypes for m clients; class 3 has none for client 0, classes ≥ 5 none for client 1
    (if any); weights rising from 0.5 to 2 unless given."""
    dim = head(model).in_features
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(m, 10, dtype=torch.bool)
    mask[0, 3] = False
    mask[1:2, 5:] = False
    weight = torch.linspace(0.5, 2.0, m) if weight is None else torch.as_tensor(weight, dtype=torch.float32)
    return EmbeddingPull(weight, torch.rand(m, 10, dim, generator=g), mask)


@pytest.mark.parametrize("arch", sorted(SMALL_MODELS))
def test_embedding_pull_paths_agree_and_the_term_changes_the_result(ragged_fed, arch):
    model = SMALL_MODELS[arch]()
    start = broadcast(init_params(model, seed=9), 6)
    pull = _pull(model, 6)
    kwargs = dict(epochs=2, seed=4, optimizer=Adam(lr=1e-2))
    seq, vec = _both_paths(model, start, ragged_fed, range(6), embedding_pull=pull, **kwargs)
    assert_states_close(seq.params, vec.params)
    torch.testing.assert_close(seq.mean_loss, vec.mean_loss, atol=1e-5, rtol=1e-5)
    plain = local_train(model, start, ragged_fed, range(6), path="sequential", **kwargs)
    gap = (flatten_params(plain.params) - flatten_params(seq.params)).abs().amax(1)
    if arch == "logistic":  # the body is Flatten: no weights for the pull to move
        assert (gap == 0).all()
    else:
        assert (gap > 1e-4).all()


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_embedding_pull_of_weight_zero_is_exactly_no_term(ragged_fed, path):
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=10), 6)
    kwargs = dict(epochs=2, seed=5, path=path)
    plain = local_train(model, start, ragged_fed, range(6), **kwargs)
    zero = local_train(model, start, ragged_fed, range(6), embedding_pull=_pull(model, 6, weight=[0.0] * 6), **kwargs)
    assert_states_equal(plain.params, zero.params)
    assert torch.equal(plain.mean_loss, zero.mean_loss)
    if path == "sequential":  # a client of weight 0 among pulled ones: no term for it
        mixed = local_train(model, start, ragged_fed, range(6),
                            embedding_pull=_pull(model, 6, weight=[0.0, 1.0, 0.0, 1.0, 1.0, 1.0]), **kwargs)
        for row in (0, 2):
            assert_states_equal(unstack(plain.params)[row], unstack(mixed.params)[row])
        assert not torch.equal(unstack(plain.params)[1]["1.weight"], unstack(mixed.params)[1]["1.weight"])


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_embedding_pull_gradient_matches_the_hand_computed_one(ragged_fed, path):
    """Embedding e = W₁x + b₁ (a linear body): the pull adds
    ∂/∂W₁ = (2λ/|S|) Σ_{j∈S} (e_j − p_{y_j}) x_jᵀ, ∂/∂b₁ = (2λ/|S|) Σ_{j∈S} (e_j − p_{y_j}) and nothing
    to the head. One full-batch SGD step."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 4), nn.Linear(4, 10))
    start = broadcast(init_params(model, seed=11), 2)
    pull = _pull(model, 2, seed=3, weight=[0.7, 1.3])
    sgd = SGD(lr=0.5)
    kwargs = dict(epochs=1, seed=0, batch_size=FULL_BATCH, optimizer=sgd, path=path)
    with_term = local_train(model, start, ragged_fed, [0, 1], embedding_pull=pull, **kwargs)
    without = local_train(model, start, ragged_fed, [0, 1], **kwargs)
    if path == "sequential":  # one step: the loss of the start weights, without the term
        assert torch.equal(with_term.mean_loss, without.mean_loss)
    else:  # vmap kernel with the term, dense kernel without
        torch.testing.assert_close(with_term.mean_loss, without.mean_loss, atol=1e-5, rtol=1e-5)
    for i in range(2):
        idx = torch.as_tensor(ragged_fed.train_parts[i])
        x, y = ragged_fed.x[idx].flatten(1).double(), ragged_fed.y[idx]
        w1, b1 = start["1.weight"][i].double(), start["1.bias"][i].double()
        selected = pull.mask[i][y]
        diff = (x @ w1.T + b1 - pull.prototypes[i].double()[y])[selected]  # (|S|, D)
        scale = 2 * float(pull.weight[i]) / int(selected.sum())
        grad_w1, grad_b1 = scale * diff.T @ x[selected], scale * diff.sum(0)
        expected = {"1.weight": -sgd.lr * grad_w1, "1.bias": -sgd.lr * grad_b1,
                    "2.weight": torch.zeros(10, 4, dtype=torch.float64), "2.bias": torch.zeros(10, dtype=torch.float64)}
        for name, change in expected.items():
            torch.testing.assert_close((with_term.params[name][i] - without.params[name][i]).double(), change,
                                       atol=1e-6, rtol=1e-4, msg=name)
        assert grad_w1.abs().max() > 1e-2  # the check is not vacuous
    labels_0 = ragged_fed.y[torch.as_tensor(ragged_fed.train_parts[0])]
    assert (labels_0 == 3).any()  # client 0 has samples without a prototype: the mask is exercised


def test_embedding_pull_matches_autograd_of_the_written_out_loss_with_adam(ragged_fed):
    """Several mini-batches of torch.optim.Adam on CE + λ·mean_{S}‖body(x) − p_y‖², written out."""
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=12), 1)
    pull = _pull(model, 1, seed=4, weight=[0.8])
    res = local_train(model, start, ragged_fed, [5], epochs=1, seed=0, embedding_pull=pull, path="vectorised")
    net = SMALL_MODELS["mlp"]()
    net.load_state_dict(unstack(start)[0])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7)
    plan = batch_plan(ragged_fed.train_parts[5], 1, 32, 0, 0, 5)
    for s, count in enumerate(plan.count):
        idx = torch.as_tensor(plan.index[s, :count])
        x, y = ragged_fed.x[idx], ragged_fed.y[idx]
        opt.zero_grad()
        e = body(net)(x)
        terms = ((e - pull.prototypes[0][y]) ** 2).sum(1)
        keep = pull.mask[0][y].float()
        loss = nn.functional.cross_entropy(head(net)(e), y) + 0.8 * (terms * keep).sum() / keep.sum()
        loss.backward()
        opt.step()
    assert_states_close(unstack(res.params)[0], dict(net.named_parameters()))


def test_bad_embedding_pulls_fail_fast(ragged_fed):
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=0), 2)
    kwargs = dict(epochs=1, seed=0)
    with pytest.raises(ValueError, match="mask"):
        EmbeddingPull(torch.ones(2), torch.zeros(2, 10, 32), torch.ones(2, 10))
    with pytest.raises(ValueError, match="weight"):
        EmbeddingPull(torch.tensor([1.0, -1.0]), torch.zeros(2, 10, 32), torch.ones(2, 10, dtype=torch.bool))
    with pytest.raises(ValueError, match="prototypes"):
        EmbeddingPull(torch.ones(3), torch.zeros(2, 10, 32), torch.ones(2, 10, dtype=torch.bool))
    wrong_dim = EmbeddingPull(torch.ones(2), torch.zeros(2, 10, 31), torch.ones(2, 10, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(2, 10, 32\)"):
        local_train(model, start, ragged_fed, [0, 1], embedding_pull=wrong_dim, **kwargs)

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = build_model("mlp", 10, (1, 8, 8), hidden=32)

        def forward(self, x):
            return self.net(x)

    wrapped = Wrapped()
    with pytest.raises(ValueError, match="nn.Sequential"):
        local_train(wrapped, broadcast(init_params(wrapped, seed=0), 2), ragged_fed, [0, 1],
                    embedding_pull=_pull(model, 2), **kwargs)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_state_collected_over_many_chunks_matches_the_sequential_path_and_leaves_the_input(ragged_fed, opt):
    """The vectorised path writes each chunk's optimiser state into one copy of the incoming
    state (``optim.put_rows``): over three chunks it equals the sequential path's state, and
    the caller's ``opt_state`` is left as it was."""
    model = SMALL_MODELS["mlp"]()
    start = broadcast(init_params(model, seed=5), 6)
    kwargs = dict(seed=2, optimizer=OPTIMIZERS[opt], epochs=1)
    warm = local_train(model, start, ragged_fed, range(6), return_opt_state=True, path="vectorised", **kwargs)
    given = warm.opt_state
    snapshot = copy.deepcopy(given)
    runs = [local_train(model, warm.params, ragged_fed, range(6), opt_state=given, round_idx=1, path=path,
                        max_clients_per_chunk=2, **kwargs) for path in ("vectorised", "sequential")]
    _assert_opt_states_close(runs[0].opt_state, runs[1].opt_state, atol=1e-6)
    _assert_opt_states_close(given, snapshot, atol=0)
