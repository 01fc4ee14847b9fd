"""The papers' architectures, one builder per name, and seeded initialisation.

Every model maps a batch of inputs to class logits (no softmax: the engine applies
cross-entropy on logits, which equals Keras's softmax + categorical cross-entropy).

Architectures (Clust-PSI-PFL Sec. IV-A unless noted)
----------------------------------------------------
logistic     one Linear layer (ACSIncome, Adult)
mlp          3 hidden layers of 500 ReLU units (Serengeti, Letter)
fmnist_cnn   3×3 convs with 8/16/32 maps, each + ReLU + 2×2 max-pool, dense 2048 ReLU.
             The authors' code used valid padding with Dense(8·8·32) for 32×32 inputs;
             here padding=1 so the same stack fits 28×28 (28→14→7→3, flatten 288).
fmnist_cnn_bn  ``fmnist_cnn`` with a BatchNorm after every conv (conv → BN → ReLU → pool), torch's
             BN defaults (eps 1e-5, momentum 0.1), the dense layers as ``fmnist_cnn``. Not a
             paper's model: a labelled reading for CAFA's FMNIST stand-in, whose authors' VGG-19
             has a BatchNorm after every conv (:mod:`workbook.cafa_study`).
cifar_cnn    three blocks of two 3×3 convs (32/64/128, same padding, BN, ReLU) + 2×2
             max-pool + dropout 0.2/0.3/0.4, then dense 128 (BN, ReLU, dropout 0.5).
             BatchNorm uses Keras's defaults (momentum 0.99 ⇒ torch momentum 0.01,
             eps 1e-3) and, like Keras, accepts a one-sample batch
             (:class:`KerasBatchNorm1d`).
lstm         embedding (dim 32) → dropout 0.5 → LSTM(10) → classifier (Sent140, Fine
             Foods). The authors used frozen GloVe-300 vectors, which cannot be fetched
             offline: the embedding here is trainable and randomly initialised.
embed_dnn    embedding (dim 32) → flatten → dense 8 ReLU → classifier (Amazon reviews).
lenet5       6/16 5×5 convs + ReLU + 2×2 max-pool, dense 120/84 ReLU (FedPrism); the
             first conv is zero-padded so that 28×28 inputs behave like LeNet's 32×32.
cnn          a small generic CNN (16/32 3×3 convs, dense 64) for quick experiments.
resnet18     ResNet-18 (He et al. 2016): BasicBlocks [2, 2, 2, 2] with 64/128/256/512
             maps (pFedLIA: "For the classification tasks we used Res-Net18 [20] ... We
             used pretrained weights"). CIFAR stem for every input size (3×3 conv,
             stride 1, no max-pool: this project's images are 28×28 and 32×32), so the
             stages see 32→32→16→8→4 (28→28→14→7→4); 1×1-conv + BN projection
             shortcuts where the shape changes; AdaptiveAvgPool2d(1) + Flatten →
             Linear(512, C). 11 173 962 weights for 3×32×32 and 10 classes.
vgg19        VGG-19 configuration E (Simonyan & Zisserman 2015) with BatchNorm after
             every conv (torchvision's vgg19_bn feature stack; convs keep their bias)
             (CAFA: "The VGG19 [14] was used as the image classification model"), then
             the authors' classifier (their ``models/vgg.py``): flatten 512 → Linear(512, 512)
             → ReLU → Linear(512, 512) → ReLU → Linear(512, C), no dropout (20 565 834
             weights for 3×32×32 and 10 classes). The 2×2 max-pools use ceil_mode, which changes
             nothing for sides divisible by 32 but lets 28×28 inputs through
             (28→14→7→4→2→1 instead of reaching 0); AdaptiveAvgPool2d(1) before the
             flatten is the identity on 32×32 inputs and keeps D = 512 for larger ones.

ResNet-18 and VGG-19 are randomly initialised only: no pretrained (ImageNet) weights can
be fetched offline. pFedLIA states it used pretrained ResNet-18 weights (presumably
ImageNet); CAFA does not say whether its VGG19 was pretrained; FedPrism uses LeNet-5
(``lenet5``) for all its data sets, neither of these two. Their BatchNorm uses torch's
defaults (eps 1e-5, momentum 0.1), not Keras's like ``cifar_cnn``: CAFA states it used
PyTorch, and pretrained ResNet-18 weights are most commonly torchvision's (an assumption:
pFedLIA leaves the details to its supplement). Each side of the input must be at least
:data:`_MIN_SIDE` (9 for resnet18, 17 for vgg19) so that the last BatchNorm still sees
2×2 positions per sample: a one-sample training batch (a client with 32·k + 1 samples)
then still trains. With BatchNorm in training mode, the engine trains these models on
the ``'sequential'`` path only, like ``cifar_cnn`` (:mod:`fedlib.engine.paths`);
evaluation vectorises.

Input shapes exclude the batch dimension: ``(C, H, W)`` for images, ``(F,)`` for
tabular features and ``(L,)`` for token-id sequences (int64, needs ``vocab_size``).
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

from .validation import check_int, check_seed

__all__ = ["ARCH_FOR_DATASET", "ARCHITECTURES", "build_model", "init_params", "float_state",
           "KerasBatchNorm1d", "BasicBlock", "body", "head", "head_prefix"]

ARCH_FOR_DATASET = {
    "acs_income": "logistic",
    "adult": "logistic",
    "serengeti": "mlp",
    "letter": "mlp",
    "satellite": "mlp",  # tabular multi-class stand-ins for Serengeti, like letter
    "shuttle": "mlp",
    "fmnist": "fmnist_cnn",
    "cifar10": "cifar_cnn",
    "cifar100": "lenet5",  # FedPrism's LeNet-5
    "svhn": "lenet5",
    "sent140": "lstm",
    "fine_foods": "lstm",
    "amazon_reviews": "embed_dnn",
}

_TEXT_ARCHS = ("lstm", "embed_dnn")
_OPTIONS = {"mlp": {"hidden"}, "lstm": {"embed_dim", "hidden"}, "embed_dnn": {"embed_dim", "hidden"}}
_IMAGE_ARCHS = ("fmnist_cnn", "fmnist_cnn_bn", "cifar_cnn", "lenet5", "cnn", "resnet18", "vgg19")
# Smallest input side per architecture with a bound: the last BatchNorm must see ≥ 2×2
# positions per sample. resnet18: 3 stride-2 stages, ⌈h/8⌉ ≥ 2 ⇔ h ≥ 9; vgg19: its last
# block follows 4 ceil-mode 2×2 max-pools, ⌈h/16⌉ ≥ 2 ⇔ h ≥ 17.
_MIN_SIDE = {"resnet18": 9, "vgg19": 17}


# ----------------------------------------------------------------------------- blocks
def _conv_out_features(features: nn.Module, input_shape: tuple) -> int:
    """Number of features ``features`` produces for one input of ``input_shape``."""
    with torch.no_grad():
        return int(features(torch.zeros(1, *input_shape)).numel())


class KerasBatchNorm1d(nn.BatchNorm1d):
    """``BatchNorm1d`` with Keras's defaults that, like Keras, also trains on a batch of one.

    PyTorch refuses a one-sample training batch (its unbiased variance is undefined);
    Keras normalises it with the batch's biased variance 0, so the output is β, and
    moves the moving mean toward the sample and the moving variance toward 0. Such
    batches occur whenever a client holds 32·k + 1 samples (``drop_last=False``).
    """

    def __init__(self, num_features: int):
        super().__init__(num_features, eps=1e-3, momentum=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, num_features) → (B, num_features)."""
        if not (self.training and x.shape[0] == 1):
            return super().forward(x)
        with torch.no_grad():
            self.running_mean.lerp_(x[0], self.momentum)
            self.running_var.mul_(1 - self.momentum)
        return (x - x.mean(0)) * torch.rsqrt(x.var(0, unbiased=False) + self.eps) * self.weight + self.bias


def _keras_bn(n: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(n, eps=1e-3, momentum=0.01)


class LastStepLSTM(nn.Module):
    """``nn.LSTM`` returning the last time step's hidden state, shape (B, hidden)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, input_size) → (B, hidden_size)."""
        _, (h_n, _) = self.lstm(x)
        return h_n[-1]


def _logistic(n_classes, input_shape, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), n_classes))


def _mlp(n_classes, input_shape, hidden=500, **_):
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, n_classes),
    )


def _fmnist_cnn(n_classes, input_shape, batch_norm=False, **_):
    layers, c_in = [], input_shape[0]
    for c_out in (8, 16, 32):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), *([nn.BatchNorm2d(c_out)] if batch_norm else []),
                   nn.ReLU(), nn.MaxPool2d(2)]
        c_in = c_out
    features = nn.Sequential(*layers, nn.Flatten())
    n_flat = _conv_out_features(features.eval(), input_shape)
    return nn.Sequential(features.train(), nn.Linear(n_flat, 2048), nn.ReLU(), nn.Linear(2048, n_classes))


def _fmnist_cnn_bn(n_classes, input_shape, **_):
    return _fmnist_cnn(n_classes, input_shape, batch_norm=True)


def _cifar_cnn(n_classes, input_shape, **_):
    layers, c_in = [], input_shape[0]
    for c_out, p_drop in ((32, 0.2), (64, 0.3), (128, 0.4)):
        layers += [
            nn.Conv2d(c_in, c_out, 3, padding=1), _keras_bn(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1), _keras_bn(c_out), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(p_drop),
        ]
        c_in = c_out
    features = nn.Sequential(*layers, nn.Flatten())
    n_flat = _conv_out_features(features.eval(), input_shape)
    return nn.Sequential(
        features.train(),
        nn.Linear(n_flat, 128), KerasBatchNorm1d(128), nn.ReLU(),
        nn.Dropout(0.5), nn.Linear(128, n_classes),
    )


def _lstm(n_classes, input_shape, vocab_size, embed_dim=32, hidden=10, **_):
    return nn.Sequential(
        nn.Embedding(vocab_size, embed_dim), nn.Dropout(0.5),
        LastStepLSTM(embed_dim, hidden), nn.Linear(hidden, n_classes),
    )


def _embed_dnn(n_classes, input_shape, vocab_size, embed_dim=32, hidden=8, **_):
    (seq_len,) = input_shape
    return nn.Sequential(
        nn.Embedding(vocab_size, embed_dim), nn.Flatten(),
        nn.Linear(seq_len * embed_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_classes),
    )


def _lenet5(n_classes, input_shape, **_):
    c, h = input_shape[0], input_shape[1]
    features = nn.Sequential(
        nn.Conv2d(c, 6, 5, padding=max(0, (32 - h) // 2)), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    )
    n_flat = _conv_out_features(features, input_shape)
    return nn.Sequential(
        features, nn.Linear(n_flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, n_classes),
    )


def _cnn(n_classes, input_shape, **_):
    c = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(c, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    )
    n_flat = _conv_out_features(features, input_shape)
    return nn.Sequential(features, nn.Linear(n_flat, 64), nn.ReLU(), nn.Linear(64, n_classes))


class BasicBlock(nn.Module):
    """ResNet's basic block (He et al. 2016): two 3×3 conv–BN pairs and a shortcut.

    ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``; the shortcut is the identity
    when shape is kept, else a 1×1 conv with ``stride`` + BN (option B). Convs have no
    bias (BN follows). Maps (B, c_in, H, W) → (B, c_out, ⌈H/stride⌉, ⌈W/stride⌉).
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, c_in, H, W) → (B, c_out, H', W')."""
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def _resnet18(n_classes, input_shape, **_):
    layers, c_in = [], 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers.append(nn.Sequential(BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out)))
        c_in = c_out
    return nn.Sequential(
        nn.Conv2d(input_shape[0], 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, n_classes),
    )


_VGG19_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
              512, 512, 512, 512, "M", 512, 512, 512, 512, "M")  # configuration E


def _vgg19(n_classes, input_shape, **_):
    layers, c_in = [], input_shape[0]
    for v in _VGG19_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2, ceil_mode=True))
        else:
            layers += [nn.Conv2d(c_in, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
            c_in = v
    features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())
    return nn.Sequential(features, nn.Linear(512, n_classes))


ARCHITECTURES = {
    "logistic": _logistic,
    "mlp": _mlp,
    "fmnist_cnn": _fmnist_cnn,
    "fmnist_cnn_bn": _fmnist_cnn_bn,
    "cifar_cnn": _cifar_cnn,
    "lstm": _lstm,
    "embed_dnn": _embed_dnn,
    "lenet5": _lenet5,
    "cnn": _cnn,
    "resnet18": _resnet18,
    "vgg19": _vgg19,
}


# ----------------------------------------------------------------------------- public API
def build_model(arch: str, n_classes: int, input_shape: tuple, vocab_size: int | None = None,
                **options) -> nn.Module:
    """Build one of the papers' architectures: a ``torch.nn.Module`` mapping ``(B, *input_shape)``
    to logits ``(B, n_classes)``; CPU, float32, torch's default init (:func:`init_params` seeds one).

    ``arch``: a key of :data:`ARCHITECTURES` (:data:`ARCH_FOR_DATASET`: the paper's choice per
    dataset); ``n_classes`` ≥ 2; ``input_shape``: one input without the batch dimension, ``(C, H, W)``
    for the CNNs, ``(F,)`` (or any shape, flattened) for logistic/mlp, ``(L,)`` for text models;
    ``vocab_size``: number of token ids (``0..vocab_size-1``), required by ``lstm`` and ``embed_dnn``;
    ``**options``: ``hidden`` (mlp, lstm, embed_dnn), ``embed_dim`` (lstm, embed_dnn).
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch={arch!r} is unknown; choose one of {sorted(ARCHITECTURES)}")
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
        raise ValueError(f"n_classes must be an integer ≥ 2, got {n_classes!r}")
    if isinstance(input_shape, (str, bytes)) or not hasattr(input_shape, "__iter__"):
        raise ValueError(f"input_shape must be a tuple of positive integers, got {input_shape!r}")
    input_shape = tuple(check_int(s, "input_shape entries", 1) for s in input_shape)
    if not input_shape or min(input_shape) < 1:
        raise ValueError(f"input_shape must be a non-empty tuple of positive sizes, got {input_shape}")
    if arch in _IMAGE_ARCHS and len(input_shape) != 3:
        raise ValueError(f"arch={arch!r} needs input_shape=(C, H, W), got {input_shape}")
    if arch in _MIN_SIDE and min(input_shape[1:]) < _MIN_SIDE[arch]:
        raise ValueError(f"input_shape must have H, W ≥ {_MIN_SIDE[arch]} for arch={arch!r} (its last "
                         f"BatchNorm must see ≥ 2×2 positions per sample), got {input_shape}")
    unknown = set(options) - _OPTIONS.get(arch, set())
    if unknown:
        raise ValueError(f"arch={arch!r} takes the options {sorted(_OPTIONS.get(arch, set()))}, "
                         f"not {sorted(unknown)}")
    if arch in _TEXT_ARCHS:
        if len(input_shape) != 1:
            raise ValueError(f"arch={arch!r} needs input_shape=(seq_len,), got {input_shape}")
        if vocab_size is None or vocab_size < 1:
            raise ValueError(f"arch={arch!r} needs vocab_size ≥ 1, got {vocab_size!r}")
    return ARCHITECTURES[arch](n_classes, input_shape, vocab_size=vocab_size, **options)


def _keras_init_(module: nn.Module) -> None:
    """Keras's default initialisers, applied in place to one module's own tensors."""
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        nn.init.xavier_uniform_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.uniform_(module.weight, -0.05, 0.05)
    elif isinstance(module, nn.LSTM):
        for name, tensor in module.named_parameters():
            if name.startswith("weight_ih"):
                for gate in tensor.chunk(4, dim=0):
                    nn.init.xavier_uniform_(gate)
            elif name.startswith("weight_hh"):
                for gate in tensor.chunk(4, dim=0):
                    nn.init.orthogonal_(gate)
            else:  # torch gate order i, f, g, o; Keras's unit_forget_bias sets f to 1
                nn.init.zeros_(tensor)
                if name.startswith("bias_ih"):
                    tensor.chunk(4)[1].fill_(1.0)
    elif isinstance(module, nn.modules.batchnorm._BatchNorm):
        module.reset_parameters()


def _torch_init_(module: nn.Module) -> None:
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()


_INIT_SCHEMES = {"keras": _keras_init_, "torch": _torch_init_}


def init_params(model: nn.Module, seed: int, scheme: str = "keras") -> dict[str, torch.Tensor]:
    """Seeded initial weights of ``model``, as the state dict the engine federates.

    The global torch RNG is left untouched, and ``model`` itself is not modified; same seed ⇒
    bit-identical tensors. ``scheme`` ``'keras'`` (default, what the authors' Keras code used):
    Glorot-uniform kernels and zero biases for dense/conv layers, U(−0.05, 0.05) embeddings,
    Glorot input / orthogonal recurrent LSTM kernels with a unit forget-gate bias; ``'torch'``:
    each module's ``reset_parameters``.

    Returns every floating-point parameter and buffer (BatchNorm running statistics) by name, on
    ``model``'s device; integer buffers (``num_batches_tracked``) are left out: not federated.
    """
    if scheme not in _INIT_SCHEMES:
        raise ValueError(f"scheme={scheme!r} is unknown; choose one of {sorted(_INIT_SCHEMES)}")
    seed = check_seed(seed)
    fresh = copy.deepcopy(model)
    devices = [fresh_device] if (fresh_device := _device_of(fresh)).type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(seed)
        for module in fresh.modules():
            _INIT_SCHEMES[scheme](module)
    return {name: t.detach().clone() for name, t in float_state(fresh).items()}


def body(model: nn.Module) -> nn.Module:
    """The feature extractor: every layer but the classifier, ``(B, *input) -> (B, D)``.

    Every model of :func:`build_model` is an ``nn.Sequential`` whose last layer is the
    classifier ``nn.Linear(D, C)``; the body is the slice ``model[:-1]``, which shares the
    model's tensors and keeps their names (``"0.weight"`` in the body is ``"0.weight"`` in
    the model), so a state of the whole model drives the body through ``functional_call``.
    """
    _check_sequential(model)
    return model[:-1]


def head(model: nn.Module) -> nn.Linear:
    """The classifier, the final ``nn.Linear(D, C)``: embeddings (B, D) → logits (B, C).

    Its tensors are named ``head_prefix(model) + "weight"`` / ``"bias"`` in the model's state.
    """
    _check_sequential(model)
    return model[-1]


def head_prefix(model: nn.Module) -> str:
    """The prefix of the classifier's tensors in the model's state, e.g. ``"4."``."""
    _check_sequential(model)
    return f"{len(model) - 1}."


def _check_sequential(model: nn.Module) -> None:
    if not (isinstance(model, nn.Sequential) and len(model) >= 2 and isinstance(model[-1], nn.Linear)):
        raise ValueError("model must be an nn.Sequential ending in its classifier nn.Linear (as every "
                         f"fedlib.models.build_model architecture is), got {type(model).__name__}")


def _device_of(model: nn.Module) -> torch.device:
    tensor = next(iter(model.parameters()), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def float_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Floating-point parameters then floating-point buffers of ``model``, by name."""
    state = dict(model.named_parameters())
    state.update((n, b) for n, b in model.named_buffers() if b.is_floating_point())
    return state
