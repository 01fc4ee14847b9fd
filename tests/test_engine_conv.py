"""The hand-written kernel for conv stacks (fedlib.engine.conv): what it recognises, and its
gradients against autograd's, client by client."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedlib.engine import Federation, broadcast, local_train
from fedlib.engine.conv import ConvBlock, conv_stack
from fedlib.models import build_model, init_params

from fl_fixtures import DEVICES, start_states

pytestmark = pytest.mark.cross_cpu  # the engine's kernels: numbers from the CPU's instruction set (make test-other-cpu)

CPU = torch.device("cpu")


def _step_grads(model: nn.Module, states: list[dict], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor):
    """The kernel's (negated loss, grads) for m clients with the given states."""
    stack = conv_stack(model)
    params = [torch.stack([st[n] for st in states]).contiguous() for n in stack.param_names]
    m, batch = y.shape[0], y.shape[2]
    loss = torch.zeros(m, 1, 1)
    grads = stack.step_grads(stack.layers(params), x, y, w, torch.full((m, 1, batch), -1.0), loss)
    return stack, -loss.view(m), grads


@pytest.mark.parametrize("arch,shape", [("fmnist_cnn", (1, 28, 28)), ("lenet5", (1, 28, 28)),
                                        ("cnn", (3, 32, 32)), ("fmnist_cnn", (2, 15, 17))])
def test_gradients_equal_autograds_client_by_client(arch, shape):
    """Each client's weighted cross-entropy and its gradient for every parameter equal
    autograd's on that client's own model; inputs include all-zero images (ties in every
    pooling window) and a client whose batch is padded (weight 0 on padding)."""
    torch.manual_seed(0)
    model = build_model(arch, 10, shape)
    m, batch = 3, 8
    states = [init_params(model, seed) for seed in range(m)]
    x = torch.randn(m, batch, *shape)
    x[1, :3] = 0.0
    y = torch.randint(0, 10, (m, 1, batch))
    w = torch.full((m, 1, batch), 1 / batch)
    w[2, :, 5:], w[2, :, :5] = 0.0, 1 / 5
    stack, loss, grads = _step_grads(model, states, x, y, w)
    assert all(g.is_contiguous() for g in grads)
    for i in range(m):
        net = build_model(arch, 10, shape)
        net.load_state_dict(states[i], strict=False)
        keep = w[i, 0] > 0
        expected = F.cross_entropy(net(x[i][keep]), y[i, 0][keep])
        expected.backward()
        torch.testing.assert_close(loss[i], expected.detach(), rtol=1e-5, atol=1e-6)
        named = dict(net.named_parameters())
        for name, g in zip(stack.param_names, grads):
            torch.testing.assert_close(g[i], named[name].grad, rtol=1e-4, atol=1e-6, msg=f"{arch} {name}")


@pytest.mark.parametrize("arch", ["fmnist_cnn", "lenet5"])
def test_gradients_written_into_given_buffers_are_the_same_bits(arch):
    """``out=``: the kernel writes every gradient into the buffers it is given (the engine's
    reused workspace) and returns them, with the values of fresh tensors bit for bit."""
    torch.manual_seed(2)
    model = build_model(arch, 10, (1, 28, 28))
    m, batch = 2, 4
    states = [init_params(model, seed) for seed in range(m)]
    x, y = torch.randn(m, batch, 1, 28, 28), torch.randint(0, 10, (m, 1, batch))
    w = torch.full((m, 1, batch), 1 / batch)
    stack, _, fresh = _step_grads(model, states, x, y, w)
    params = [torch.stack([st[n] for st in states]).contiguous() for n in stack.param_names]
    buffers = [torch.full((m + 1, *g.shape[1:]), float("nan"))[:m] for g in fresh]  # views, as the engine's
    got = stack.step_grads(stack.layers(params), x, y, w, torch.full((m, 1, batch), -1.0), out=buffers)
    for g, b, f in zip(got, buffers, fresh):
        assert g.data_ptr() == b.data_ptr() and torch.equal(g, f)


def test_pooling_before_or_after_the_relu_is_the_same_kernel_and_the_same_gradient():
    """Conv → ReLU → MaxPool and Conv → MaxPool → ReLU compute the same function; the
    kernel reads both as one block and matches autograd on each."""
    torch.manual_seed(1)
    relu_first = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                               nn.Linear(3 * 4 * 4, 5))
    pool_first = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
                               nn.Linear(3 * 4 * 4, 5))
    pool_first.load_state_dict(relu_first.state_dict())
    assert conv_stack(relu_first) == conv_stack(pool_first)
    x = torch.randn(2, 6, 1, 8, 8)
    x[0, :, :, :4] = 0.0  # flat regions: equal values in many windows
    y, w = torch.randint(0, 5, (2, 1, 6)), torch.full((2, 1, 6), 1 / 6)
    state = {k: v.clone() for k, v in relu_first.state_dict().items()}
    _, _, grads = _step_grads(relu_first, [state, state], x, y, w)
    for net in (relu_first, pool_first):
        net.zero_grad()
        F.cross_entropy(net(x[0]), y[0, 0]).backward()
        for g, p in zip(grads, net.parameters()):
            torch.testing.assert_close(g[0], p.grad, rtol=1e-4, atol=1e-6)


def test_recognised_models_and_their_blocks():
    fmnist = conv_stack(build_model("fmnist_cnn", 10, (1, 28, 28)))
    assert fmnist.blocks == tuple(ConvBlock(f"0.{i}.weight", f"0.{i}.bias", (1, 1), True, 2) for i in (0, 3, 6))
    assert fmnist.head.weights == ("1.weight", "3.weight") and fmnist.head.relu == (True, False)
    lenet = conv_stack(build_model("lenet5", 10, (1, 28, 28)))
    assert [b.padding for b in lenet.blocks] == [(2, 2), (0, 0)]
    assert lenet.head.weights == ("1.weight", "3.weight", "5.weight")
    model = build_model("cnn", 10, (1, 8, 8))
    assert conv_stack(model).param_names == tuple(n for n, _ in model.named_parameters())


@pytest.mark.parametrize("model", [
    nn.Sequential(nn.Conv2d(1, 2, 3, stride=2), nn.Flatten(), nn.Linear(18, 2)),            # strided
    nn.Sequential(nn.Conv2d(1, 2, 3, bias=False), nn.Flatten(), nn.Linear(72, 2)),          # no bias
    nn.Sequential(nn.Conv2d(1, 2, 3, padding="same"), nn.Flatten(), nn.Linear(128, 2)),     # string padding
    nn.Sequential(nn.Conv2d(1, 2, 3, groups=1, dilation=2), nn.Flatten(), nn.Linear(32, 2)),
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2, stride=1), nn.Flatten(), nn.Linear(50, 2)),
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2, ceil_mode=True), nn.Flatten(), nn.Linear(18, 2)),
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(72, 2)),           # other activation
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(72, 4), nn.Tanh(), nn.Linear(4, 2)),
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(6, 2)),                                     # no Flatten
    nn.Sequential(nn.Flatten(), nn.Linear(64, 2)),                                          # no convolution
    nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 2)),
], ids=["stride", "bias", "same", "dilation", "pool-stride", "ceil", "tanh", "head-tanh", "no-flatten",
        "no-conv", "batchnorm"])
def test_other_models_are_not_conv_stacks(model):
    assert conv_stack(model) is None


@pytest.mark.parametrize("device", DEVICES)
def test_local_train_through_the_kernel_matches_the_sequential_path(device):
    """Two epochs of ragged FMNIST-CNN clients (16×16 images, chunks of 2, partial last
    batches): the vectorised path (the conv kernel) and the sequential path (torch.optim
    on the model) end at the same weights and losses up to float rounding."""
    rng = np.random.default_rng(0)
    sizes = [40, 9, 33, 20]
    x = rng.normal(size=(sum(sizes), 1, 16, 16)).astype(np.float32)
    x[:5] = 0.0
    y = rng.integers(0, 10, sum(sizes))
    parts = np.split(np.arange(sum(sizes)), np.cumsum(sizes)[:-1])
    fed = Federation.from_arrays(x, y, parts, parts, torch.device(device))
    model = build_model("fmnist_cnn", 10, (1, 16, 16))
    start = start_states(model, 3, 4, device)
    kwargs = dict(epochs=2, seed=5, batch_size=8, round_idx=1)
    seq = local_train(model, start, fed, range(4), path="sequential", **kwargs)
    vec = local_train(model, start, fed, range(4), path="vectorised", max_clients_per_chunk=2, **kwargs)
    auto = local_train(model, start, fed, range(4), **kwargs)
    assert auto.path == "vectorised"
    for name in seq.params:
        torch.testing.assert_close(vec.params[name], seq.params[name], rtol=1e-4, atol=2e-5, msg=name)
        assert not torch.equal(seq.params[name], start[name])
    torch.testing.assert_close(vec.mean_loss, seq.mean_loss, rtol=1e-5, atol=1e-5)


def test_the_kernel_runs_on_a_device_without_cpu_operands():
    """On the meta device (which, like CUDA, refuses CPU operands) the step returns
    gradients of every parameter's stacked shape: no tensor of the kernel is made on the
    CPU behind the caller's back."""
    meta = torch.device("meta")
    model = build_model("lenet5", 10, (1, 28, 28))
    stack = conv_stack(model)
    shapes = dict(model.state_dict())
    m, batch = 3, 4
    params = [torch.empty(m, *shapes[n].shape, device=meta) for n in stack.param_names]
    grads = stack.step_grads(stack.layers(params), torch.empty(m, batch, 1, 28, 28, device=meta),
                             torch.zeros(m, 1, batch, dtype=torch.long, device=meta),
                             torch.empty(m, 1, batch, device=meta), torch.empty(m, 1, batch, device=meta),
                             torch.empty(m, 1, 1, device=meta))
    assert [g.shape for g in grads] == [p.shape for p in params]
    assert all(g.device == meta for g in grads)


@pytest.mark.parametrize("arch,shape", [("fmnist_cnn", (1, 28, 28)), ("lenet5", (1, 28, 28)), ("mlp", (64,)),
                                        ("logistic", (64,))])
def test_steps_of_few_samples_skip_the_padding_with_the_full_batchs_weights(arch, shape, monkeypatch):
    """A step whose active clients all have ≤ 16 real samples computes 16 batch columns, not
    B = 32. The padding has weight 0, so the trained weights are those of the full batch up to
    float rounding. Bit for bit only where the kernels block the batch by 16, as this
    project's CPU's default kernels do (``train._WIDTH_STEP``); MKL's compatible path and
    other CPUs round differently (``tests/other_cpu.env``), so the test checks closeness."""
    from fedlib.engine import train as T

    sizes = [5, 16, 12, 40, 9]  # 40 = 32 + 8: its second step is one of few samples too
    x = torch.randn(sum(sizes) + 10, *shape, generator=torch.Generator().manual_seed(0))
    y = torch.arange(len(x)) % 10
    bounds = np.cumsum([0] + sizes)
    fed = Federation.from_arrays(x, y, [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])],
                                 [np.arange(len(x) - 10, len(x))] * len(sizes), "cpu", n_classes=10)
    model = build_model(arch, 10, shape)
    start = broadcast(init_params(model, seed=2), len(sizes))
    widths, stack = [], T._Batches.stack

    def spy(*args):
        batches = stack(*args)
        widths.extend(batches.width)
        return batches

    monkeypatch.setattr(T._Batches, "stack", staticmethod(spy))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trimmed = local_train(model, start, fed, range(len(sizes)), epochs=2, seed=4, path="vectorised",
                              max_clients_per_chunk=3)
        assert 16 in widths and 32 in widths
        monkeypatch.setattr(T, "_WIDTH_STEP", 1 << 30)
        full = local_train(model, start, fed, range(len(sizes)), epochs=2, seed=4, path="vectorised",
                           max_clients_per_chunk=3)
    finally:
        torch.set_num_threads(threads)
    for k in full.params:
        torch.testing.assert_close(trimmed.params[k], full.params[k], rtol=1e-5, atol=1e-6, msg=k)
        assert not torch.equal(trimmed.params[k], start[k]), k  # it trained
    torch.testing.assert_close(trimmed.mean_loss, full.mean_loss, rtol=1e-6, atol=1e-7)
