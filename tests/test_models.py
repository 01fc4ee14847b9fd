"""Tests of fedlib.models: shapes, the papers' layer sizes, seeded initialisation, the
body/head split, and the large seed-paper architectures (ResNet-18, VGG-19)."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call, vmap

from fedlib.engine import Federation, local_train, stack_params
from fedlib.models import (ARCH_FOR_DATASET, ARCHITECTURES, BasicBlock, KerasBatchNorm1d, body,
                           build_model, head, head_prefix, init_params)

SHAPES = {  # arch: (input_shape, vocab_size)
    "logistic": ((107,), None),
    "mlp": ((16,), None),
    "fmnist_cnn": ((1, 28, 28), None),
    "fmnist_cnn_bn": ((1, 28, 28), None),
    "cifar_cnn": ((3, 32, 32), None),
    "lstm": ((25,), 300),
    "embed_dnn": ((20,), 300),
    "lenet5": ((1, 28, 28), None),
    "cnn": ((3, 32, 32), None),
    "resnet18": ((3, 32, 32), None),
    "vgg19": ((3, 32, 32), None),
}


def _inputs(arch, batch=4):
    shape, vocab = SHAPES[arch]
    gen = torch.Generator().manual_seed(0)
    if vocab:
        return torch.randint(0, vocab, (batch, *shape), generator=gen)
    return torch.randn(batch, *shape, generator=gen)


def test_every_dataset_maps_to_a_known_architecture():
    assert set(ARCH_FOR_DATASET.values()) <= set(ARCHITECTURES)
    assert set(SHAPES) == set(ARCHITECTURES)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_models_map_a_batch_to_logits(arch):
    shape, vocab = SHAPES[arch]
    model = build_model(arch, 7, shape, vocab_size=vocab).eval()
    out = model(_inputs(arch))
    assert out.shape == (4, 7) and out.dtype == torch.float32


def test_layer_sizes_follow_the_paper():
    convs = lambda m: [l.out_channels for l in m.modules() if isinstance(l, nn.Conv2d)]  # noqa: E731
    dense = lambda m: [l.out_features for l in m.modules() if isinstance(l, nn.Linear)]  # noqa: E731
    assert dense(build_model("logistic", 2, (107,))) == [2]
    assert dense(build_model("mlp", 26, (16,))) == [500, 500, 500, 26]
    fmnist = build_model("fmnist_cnn", 10, (1, 28, 28))
    assert convs(fmnist) == [8, 16, 32] and dense(fmnist) == [2048, 10]
    assert fmnist[1].in_features == 32 * 3 * 3  # 28 → 14 → 7 → 3 with padding 1
    cifar = build_model("cifar_cnn", 10, (3, 32, 32))
    assert convs(cifar) == [32, 32, 64, 64, 128, 128] and dense(cifar) == [128, 10]
    assert [d.p for d in cifar.modules() if isinstance(d, nn.Dropout)] == [0.2, 0.3, 0.4, 0.5]
    assert sum(isinstance(b, nn.modules.batchnorm._BatchNorm) for b in cifar.modules()) == 7
    lstm = build_model("lstm", 2, (25,), vocab_size=300)
    assert lstm[0].embedding_dim == 32 and lstm[2].lstm.hidden_size == 10 and lstm[1].p == 0.5
    assert dense(build_model("embed_dnn", 2, (20,), vocab_size=300)) == [8, 2]
    assert dense(build_model("lenet5", 10, (1, 28, 28))) == [120, 84, 10]
    assert build_model("lenet5", 10, (1, 28, 28))[1].in_features == 16 * 5 * 5


@pytest.mark.parametrize("arch", ["mlp", "cifar_cnn", "lstm"])
def test_init_params_is_seeded_and_side_effect_free(arch):
    shape, vocab = SHAPES[arch]
    model = build_model(arch, 3, shape, vocab_size=vocab)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.random.get_rng_state()
    a, b, c = init_params(model, 1), init_params(model, 1), init_params(model, 2)
    assert torch.equal(rng, torch.random.get_rng_state())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    assert all(v.is_floating_point() for v in a.values())
    assert set(a) == {k for k, v in model.state_dict().items() if v.is_floating_point()}
    model.load_state_dict(a, strict=False)  # loadable as the model's own weights


def test_keras_initialisation():
    model = build_model("lstm", 2, (25,), vocab_size=300)
    state = init_params(model, 0)
    assert state["0.weight"].abs().max() <= 0.05
    assert torch.all(state["3.bias"] == 0)
    forget = state["2.lstm.bias_ih_l0"].chunk(4)[1]
    assert torch.all(forget == 1) and torch.all(state["2.lstm.bias_hh_l0"] == 0)
    w = state["2.lstm.weight_hh_l0"].chunk(4)[0]
    torch.testing.assert_close(w.T @ w, torch.eye(10), atol=1e-5, rtol=0)  # orthogonal
    dense = init_params(build_model("mlp", 26, (16,)), 0)["1.weight"]
    assert dense.abs().max() <= (6 / (16 + 500)) ** 0.5  # Glorot-uniform bound


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="arch"):
        build_model("resnet", 10, (3, 32, 32))
    with pytest.raises(ValueError, match="n_classes"):
        build_model("mlp", 1, (16,))
    with pytest.raises(ValueError, match="vocab_size"):
        build_model("lstm", 2, (25,))
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        build_model("fmnist_cnn", 10, (784,))
    with pytest.raises(ValueError, match="options"):
        build_model("logistic", 2, (4,), hidden=8)
    with pytest.raises(ValueError, match="scheme"):
        init_params(build_model("mlp", 2, (4,)), 0, scheme="he")


def test_keras_batchnorm_accepts_a_one_sample_training_batch():
    bn = KerasBatchNorm1d(3)
    with torch.no_grad():
        bn.bias.copy_(torch.tensor([1.0, 2.0, 3.0]))
    x = torch.tensor([[4.0, -1.0, 0.5]], requires_grad=True)
    out = bn.train()(x)
    assert out.tolist() == [[1.0, 2.0, 3.0]]  # normalised to 0, then β
    torch.testing.assert_close(bn.running_mean, 0.01 * x.detach()[0])
    torch.testing.assert_close(bn.running_var, torch.full((3,), 0.99))
    out.sum().backward()
    assert bn.bias.grad.tolist() == [1.0, 1.0, 1.0]
    two = torch.tensor([[1.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    torch.testing.assert_close(bn(two), nn.functional.batch_norm(
        two, None, None, bn.weight, bn.bias, training=True, eps=1e-3))


def test_every_registered_dataset_has_an_architecture():
    from fedlib.datasets import DATASETS

    assert set(DATASETS) <= set(ARCH_FOR_DATASET), sorted(set(DATASETS) - set(ARCH_FOR_DATASET))


# ----------------------------------------------------------------------------- body / head split
@functools.lru_cache(maxsize=None)
def _model(arch, n_classes=7, shape=None):
    """One eval-mode model per (arch, n_classes, shape), built once per test session."""
    shape_, vocab = SHAPES[arch]
    return build_model(arch, n_classes, shape or shape_, vocab_size=vocab).eval()


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_body_then_head_is_the_model(arch):
    model, x = _model(arch), _inputs(arch, batch=3)
    features = body(model)(x)
    assert features.ndim == 2 and features.shape == (3, head(model).in_features)
    assert torch.equal(head(model)(features), model(x))  # eval mode: exactly the same numbers
    assert head(model).out_features == 7


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_body_and_head_keep_the_model_names(arch):
    model = _model(arch)
    whole = model.state_dict()
    b, h, prefix = body(model).state_dict(), head(model).state_dict(), head_prefix(model)
    assert set(h) == {"weight", "bias"}
    assert set(b) | {prefix + k for k in h} == set(whole) and not set(b) & {prefix + k for k in h}
    assert all(b[k].data_ptr() == whole[k].data_ptr() for k in b)  # the same tensors
    assert all(torch.equal(h[k], whole[prefix + k]) for k in h)
    assert head(model) is model[int(prefix[:-1])]


@pytest.mark.parametrize("split", [body, head, head_prefix])
@pytest.mark.parametrize("bad", [BasicBlock(3, 3), nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
                                 nn.Sequential(nn.Linear(2, 2)), nn.Linear(2, 2)],
                         ids=["module", "no-final-linear", "only-linear", "linear"])
def test_body_and_head_reject_other_models(split, bad):
    with pytest.raises(ValueError, match="model must be an nn.Sequential ending in"):
        split(bad)


# ----------------------------------------------------------------------------- ResNet-18 / VGG-19
def _conv(c_in, c_out, k, bias):
    return c_in * c_out * k * k + (c_out if bias else 0)


def _resnet18_weights(c_in, n_classes):
    """He et al.'s ResNet-18 with the CIFAR stem, counted layer by layer."""
    total = _conv(c_in, 64, 3, False) + 2 * 64  # stem conv + BN (γ, β)
    width = 64
    for c_out in (64, 128, 256, 512):
        for block in range(2):
            c_prev = width if block == 0 else c_out
            total += _conv(c_prev, c_out, 3, False) + _conv(c_out, c_out, 3, False) + 4 * c_out
            if c_prev != c_out:  # projection shortcut: 1×1 conv + BN
                total += _conv(c_prev, c_out, 1, False) + 2 * c_out
        width = c_out
    return total + 512 * n_classes + n_classes


def _vgg19_bn_weights(c_in, n_classes):
    """Configuration E, every 3×3 conv with bias + BN, then the authors' classifier (their
    models/vgg.py): Linear(512, 512), ReLU, Linear(512, 512), ReLU, Linear(512, C)."""
    total = 0
    for c_out in (64, 64, 128, 128, 256, 256, 256, 256) + (512,) * 8:
        total += _conv(c_in, c_out, 3, True) + 2 * c_out
        c_in = c_out
    return total + 2 * (512 * 512 + 512) + 512 * n_classes + n_classes


def _n_weights(model):
    return sum(p.numel() for p in model.parameters())


def test_resnet18_and_vgg19_weight_counts():
    # the published CIFAR-10 sizes: ResNet-18 ≈ 11.17 M; VGG-19-bn 20.04 M with one Linear(512, 10),
    # + 2·(512·512 + 512) = 525 312 for the authors' 512-512-10 classifier
    assert _resnet18_weights(3, 10) == 11_173_962
    assert _vgg19_bn_weights(3, 10) == 20_040_522 + 525_312 == 20_565_834
    for shape in ((3, 32, 32), (1, 28, 28)):
        assert _n_weights(build_model("resnet18", 10, shape)) == _resnet18_weights(shape[0], 10)
        assert _n_weights(build_model("vgg19", 10, shape)) == _vgg19_bn_weights(shape[0], 10)
    assert _n_weights(build_model("resnet18", 100, (3, 32, 32))) == _resnet18_weights(3, 100)


def test_resnet18_and_vgg19_layers():
    resnet = build_model("resnet18", 10, (3, 32, 32))
    blocks = [m for m in resnet.modules() if isinstance(m, BasicBlock)]
    assert [b.conv1.out_channels for b in blocks] == [64, 64, 128, 128, 256, 256, 512, 512]
    assert [b.conv1.stride[0] for b in blocks] == [1, 1, 2, 1, 2, 1, 2, 1]
    assert resnet[0].kernel_size == (3, 3) and resnet[0].stride == (1, 1)  # CIFAR stem
    assert not any(isinstance(m, nn.MaxPool2d) for m in resnet.modules())
    vgg = build_model("vgg19", 10, (3, 32, 32))
    convs = [m.out_channels for m in vgg.modules() if isinstance(m, nn.Conv2d)]
    assert convs == [64, 64, 128, 128, 256, 256, 256, 256] + [512] * 8
    assert sum(isinstance(m, nn.BatchNorm2d) for m in vgg.modules()) == 16
    assert sum(isinstance(m, nn.MaxPool2d) for m in vgg.modules()) == 5
    linears = [(m.in_features, m.out_features) for m in vgg.modules() if isinstance(m, nn.Linear)]
    assert linears == [(512, 512), (512, 512), (512, 10)]  # the authors' classifier, no dropout
    assert not any(isinstance(m, nn.Dropout) for m in vgg.modules())
    assert body(vgg)(torch.zeros(2, 3, 32, 32)).shape == (2, 512) and head(vgg).in_features == 512
    bns = [m for m in list(resnet.modules()) + list(vgg.modules()) if isinstance(m, nn.BatchNorm2d)]
    assert all(bn.eps == 1e-5 and bn.momentum == 0.1 for bn in bns)  # torch's defaults


def test_fmnist_cnn_bn_is_fmnist_cnn_with_a_batchnorm_after_every_conv():
    plain, bn = build_model("fmnist_cnn", 10, (1, 28, 28)), build_model("fmnist_cnn_bn", 10, (1, 28, 28))
    mods = list(bn.modules())
    convs = [i for i, m in enumerate(mods) if isinstance(m, nn.Conv2d)]
    assert [m.out_channels for m in mods if isinstance(m, nn.Conv2d)] == [8, 16, 32]
    assert all(isinstance(mods[i + 1], nn.BatchNorm2d) and isinstance(mods[i + 2], nn.ReLU) for i in convs)
    assert all(m.eps == 1e-5 and m.momentum == 0.1 for m in mods if isinstance(m, nn.BatchNorm2d))  # torch's
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in plain.modules())
    # the same weights plus γ, β of 8 + 16 + 32 maps; the same dense layers
    assert _n_weights(bn) == _n_weights(plain) + 2 * (8 + 16 + 32)
    assert [tuple(p.shape) for n, p in bn.named_parameters() if p.ndim == 2] == \
           [tuple(p.shape) for n, p in plain.named_parameters() if p.ndim == 2]
    bn.train()
    assert bn(torch.randn(1, 1, 28, 28)).shape == (1, 10)  # a one-sample training batch passes


@pytest.mark.parametrize("arch", ["resnet18", "vgg19"])
@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 28, 28)])
def test_resnet18_and_vgg19_map_images_to_logits(arch, shape):
    model = _model(arch, 10, shape)
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    assert model(x).shape == (2, 10) and body(model)(x).shape == (2, 512)
    assert head(model).in_features == 512


@pytest.mark.parametrize("arch, min_side", [("resnet18", 9), ("vgg19", 17)])
def test_resnet18_and_vgg19_smallest_input(arch, min_side):
    model = build_model(arch, 3, (3, min_side, min_side + 5)).train()
    assert model(torch.randn(1, 3, min_side, min_side + 5)).shape == (1, 3)  # one-sample batch trains
    with pytest.raises(ValueError, match=rf"input_shape must have H, W ≥ {min_side}"):
        build_model(arch, 3, (3, min_side - 1, 32))
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        build_model(arch, 3, (3 * 32 * 32,))
    # one pixel less and a one-sample batch reaches a BatchNorm with a single value per channel
    too_small = ARCHITECTURES[arch](3, (3, min_side - 1, min_side - 1)).train()
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        too_small(torch.randn(1, 3, min_side - 1, min_side - 1))


@pytest.mark.parametrize("arch", ["resnet18", "vgg19"])
def test_resnet18_and_vgg19_seeded_init(arch):
    model = _model(arch, 10, (3, 32, 32))
    a, b, c = init_params(model, 3), init_params(model, 3), init_params(model, 4)
    assert set(a) == {k for k, v in model.state_dict().items() if v.is_floating_point()}
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(not torch.equal(a[k], c[k]) for k in a if k.endswith("weight") and a[k].ndim > 1)
    t = init_params(model, 3, scheme="torch")
    first_conv = next(k for k in a if a[k].ndim == 4)
    assert set(t) == set(a) and not torch.equal(t[first_conv], a[first_conv])
    assert all(torch.all(s[k] == 1) for s in (a, t) for k in s if k.endswith("running_var"))


@pytest.mark.parametrize("arch", ["resnet18", "vgg19"])
def test_resnet18_and_vgg19_vmap_over_stacked_weights(arch):
    """``vmap(functional_call)`` over two stacked models equals each model on its own, in
    eval mode and in training mode (batch statistics; the stacked BatchNorm running
    statistics are updated row by row in place)."""
    model = build_model(arch, 4, (3, 32, 32))
    rows = [init_params(model, 0), init_params(model, 1)]
    x = torch.randn(2, 2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    for mode in ("eval", "train"):
        getattr(model, mode)()
        stacked = stack_params(rows)
        out = vmap(lambda w, xb: functional_call(model, w, (xb,)))(stacked, x)
        for i, row in enumerate(rows):
            own = {k: v.clone() for k, v in row.items()}
            torch.testing.assert_close(out[i], functional_call(model, own, (x[i],)), rtol=1e-4, atol=1e-5)
            for k in own:
                torch.testing.assert_close(stacked[k][i], own[k], rtol=1e-5, atol=1e-6)
        moved = any(not torch.equal(stacked[k][0], rows[0][k]) for k in rows[0] if "running" in k)
        assert moved == (mode == "train")


@pytest.mark.parametrize("arch", ["resnet18", "vgg19"])
@pytest.mark.cross_cpu
def test_resnet18_and_vgg19_train_one_step(arch):
    """Two clients × 5 images, batch 4: a step of 4 then a one-sample step, sequential path.
    The vectorised path refuses BatchNorm in training mode (as for cifar_cnn)."""
    x = torch.randn(10, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    y = torch.arange(10) % 3
    fed = Federation.from_arrays(x, y, [np.arange(5), np.arange(5, 10)], [np.arange(2), np.arange(2)],
                                 device="cpu")
    model = build_model(arch, 3, (3, 32, 32))
    start = stack_params([init_params(model, 0)] * 2)
    res = local_train(model, start, fed, [0, 1], epochs=1, seed=0, batch_size=4, path="auto")
    assert res.path == "sequential" and torch.all(torch.isfinite(res.mean_loss))
    first_conv = next(k for k in start if start[k].ndim == 5)
    for k in (head_prefix(model) + "weight", first_conv):
        assert not torch.equal(res.params[k][0], start[k][0])
        assert not torch.equal(res.params[k][0], res.params[k][1])  # each client on its own data
    with pytest.raises(ValueError, match=r"(?s)vectorised.*BatchNorm"):
        local_train(model, start, fed, [0, 1], epochs=1, seed=0, batch_size=4, path="vectorised")
