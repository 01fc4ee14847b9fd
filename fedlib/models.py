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

Input shapes exclude the batch dimension: ``(C, H, W)`` for images, ``(F,)`` for
tabular features and ``(L,)`` for token-id sequences (int64, needs ``vocab_size``).
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

__all__ = ["ARCH_FOR_DATASET", "ARCHITECTURES", "build_model", "init_params", "float_state",
           "KerasBatchNorm1d"]

ARCH_FOR_DATASET = {
    "acs_income": "logistic",
    "adult": "logistic",
    "serengeti": "mlp",
    "letter": "mlp",
    "satellite": "mlp",  # tabular multi-class stand-ins for Serengeti, like letter
    "shuttle": "mlp",
    "fmnist": "fmnist_cnn",
    "cifar10": "cifar_cnn",
    "sent140": "lstm",
    "fine_foods": "lstm",
    "amazon_reviews": "embed_dnn",
}

_TEXT_ARCHS = ("lstm", "embed_dnn")
_OPTIONS = {"mlp": {"hidden"}, "lstm": {"embed_dim", "hidden"}, "embed_dnn": {"embed_dim", "hidden"}}
_IMAGE_ARCHS = ("fmnist_cnn", "cifar_cnn", "lenet5", "cnn")


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


def _fmnist_cnn(n_classes, input_shape, **_):
    c = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(c, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    )
    n_flat = _conv_out_features(features, input_shape)
    return nn.Sequential(features, nn.Linear(n_flat, 2048), nn.ReLU(), nn.Linear(2048, n_classes))


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


ARCHITECTURES = {
    "logistic": _logistic,
    "mlp": _mlp,
    "fmnist_cnn": _fmnist_cnn,
    "cifar_cnn": _cifar_cnn,
    "lstm": _lstm,
    "embed_dnn": _embed_dnn,
    "lenet5": _lenet5,
    "cnn": _cnn,
}


# ----------------------------------------------------------------------------- public API
def build_model(arch: str, n_classes: int, input_shape: tuple, vocab_size: int | None = None,
                **options) -> nn.Module:
    """Build one of the papers' architectures.

    Parameters
    ----------
    arch : str
        A key of :data:`ARCHITECTURES` (see :data:`ARCH_FOR_DATASET` for the paper's
        choice per dataset).
    n_classes : int
        Number of output logits, ≥ 2.
    input_shape : tuple of int
        Shape of one input without the batch dimension: ``(C, H, W)`` for the CNNs,
        ``(F,)`` (or any shape, flattened) for logistic/mlp, ``(L,)`` for text models.
    vocab_size : int, optional
        Number of token ids (ids in ``0..vocab_size-1``); required by ``lstm`` and
        ``embed_dnn``.
    **options
        Architecture-specific sizes: ``hidden`` (mlp, lstm, embed_dnn), ``embed_dim``
        (lstm, embed_dnn).

    Returns
    -------
    torch.nn.Module
        Maps a batch ``(B, *input_shape)`` to logits ``(B, n_classes)``; CPU, float32,
        torch's default initialisation (use :func:`init_params` for a seeded one).
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch={arch!r} is unknown; choose one of {sorted(ARCHITECTURES)}")
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
        raise ValueError(f"n_classes must be an integer ≥ 2, got {n_classes!r}")
    input_shape = tuple(int(s) for s in input_shape)
    if not input_shape or min(input_shape) < 1:
        raise ValueError(f"input_shape must be a non-empty tuple of positive sizes, got {input_shape}")
    if arch in _IMAGE_ARCHS and len(input_shape) != 3:
        raise ValueError(f"arch={arch!r} needs input_shape=(C, H, W), got {input_shape}")
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

    The global torch RNG is left untouched, and ``model`` itself is not modified.

    Parameters
    ----------
    model : torch.nn.Module
        A model from :func:`build_model` (or any module).
    seed : int
        Same seed ⇒ bit-identical tensors.
    scheme : {'keras', 'torch'}
        ``'keras'`` (default, what the authors' Keras code used): Glorot-uniform kernels
        and zero biases for dense/conv layers, U(−0.05, 0.05) embeddings, Glorot input /
        orthogonal recurrent LSTM kernels with a unit forget-gate bias. ``'torch'``:
        each module's ``reset_parameters``.

    Returns
    -------
    dict of str to torch.Tensor
        Every floating-point parameter and buffer (BatchNorm running statistics), by
        name, on ``model``'s device. Integer buffers (``num_batches_tracked``) are left
        out: they are not federated.
    """
    if scheme not in _INIT_SCHEMES:
        raise ValueError(f"scheme={scheme!r} is unknown; choose one of {sorted(_INIT_SCHEMES)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    fresh = copy.deepcopy(model)
    devices = [fresh_device] if (fresh_device := _device_of(fresh)).type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(seed)
        for module in fresh.modules():
            _INIT_SCHEMES[scheme](module)
    return {name: t.detach().clone() for name, t in float_state(fresh).items()}


def _device_of(model: nn.Module) -> torch.device:
    tensor = next(iter(model.parameters()), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def float_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Floating-point parameters then floating-point buffers of ``model``, by name."""
    state = dict(model.named_parameters())
    state.update((n, b) for n, b in model.named_buffers() if b.is_floating_point())
    return state
