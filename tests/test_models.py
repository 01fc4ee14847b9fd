"""Tests of fedlib.models: shapes, the papers' layer sizes, seeded initialisation."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from fedlib.models import ARCH_FOR_DATASET, ARCHITECTURES, KerasBatchNorm1d, build_model, init_params

SHAPES = {  # arch: (input_shape, vocab_size)
    "logistic": ((107,), None),
    "mlp": ((16,), None),
    "fmnist_cnn": ((1, 28, 28), None),
    "cifar_cnn": ((3, 32, 32), None),
    "lstm": ((25,), 300),
    "embed_dnn": ((20,), 300),
    "lenet5": ((1, 28, 28), None),
    "cnn": ((3, 32, 32), None),
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
