"""Hand-written batched forward/backward for stacks of dense layers (logistic, MLP).

For ``nn.Sequential([Flatten,] Linear, [ReLU,] ..., Linear)`` the vectorised path skips
``vmap`` and autograd, whose per-step bookkeeping dominates when each client's step is a
few small matrix products: the whole chunk's step is a handful of batched matmuls.
The mathematics is the one autograd would compute — the gradient of the per-client
weighted cross-entropy Σ_j w_j ℓ_j:

    forward   h_0 = xᵀ,  z_l = W_l h_{l-1} + b_l,  h_l = relu(z_l) where a ReLU follows
    output    ∂/∂z_L = (softmax(z_L) − onehot(y)) · w
    backward  ∂W_l = ∂z_l h_{l-1}ᵀ,  ∂b_l = Σ_j ∂z_l,  ∂z_{l-1} = (W_lᵀ ∂z_l) ⊙ [z_{l-1} > 0]

Activations are kept feature-major, (m, features, B) per layer: softmax over a short
class axis and the small matrix products of logistic regression run 1.5–5× faster in
that layout than batch-major on CPU (measured: (m, C, B) log-softmax 3 µs vs 19 µs for
m = 50, B = 32, C = 2); for wide MLPs the two layouts time the same.

**Large layers on the CPU: one oneDNN product per client** (:func:`per_client_products`).
``torch.bmm`` runs on MKL, and MKL on AMD CPUs takes its AVX2 code path even where the CPU
has AVX-512: on this project's AMD EPYC (Zen 5) a 2048² float32 product runs at 110 GFLOP/s
a core through MKL and 244 GFLOP/s through oneDNN, the library torch's convolutions already
use. A layer with at least :data:`ONEDNN_MIN_WEIGHTS` weights therefore runs its three
products (forward, ∂W, ∂h) as m oneDNN calls, one per client, instead of three ``bmm``:
measured on one thread, B = 32, the three products together (copies into the stacked
tensors included), FMNIST CNN head 288 → 2048 for 3 clients 3.62 → 1.87 ms, the MLP's
500 → 500 for 2 clients 0.97 → 0.60 ms, LeNet-5's 400 → 120 for 9 clients 0.85 → 0.86 ms
(the break-even) and 120 → 84 0.19 → 0.50 ms (the calls' fixed cost wins: smaller layers
stay on ``bmm``). Each client's rows come from calls of their own, so their bits do not
depend on the other clients of the chunk. On other devices, or where this torch build has
no oneDNN linear, every layer runs on ``bmm``.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch import nn

from ..validation import check_choice

__all__ = ["DenseStack", "dense_stack", "relu_backward_", "per_client_products", "has_per_client_layer",
           "ONEDNN_MIN_WEIGHTS"]

#: Layers with at least this many weights (in · out) run their products per client on oneDNN
#: on the CPU (module docstring: the measured break-even lies near 48,000).
ONEDNN_MIN_WEIGHTS = 65_536
_PER_CLIENT: list[bool] = []  # the innermost per_client_products block's setting, if any


@dataclass(frozen=True)
class DenseStack:
    """The Linear layers of a dense model, in order.

    Attributes
    ----------
    weights, biases : tuple of str
        State names of each layer's weight (out, in) and bias (out,).
    relu : tuple of bool
        Whether a ReLU follows each layer (never the last).
    """

    weights: tuple[str, ...]
    biases: tuple[str, ...]
    relu: tuple[bool, ...]

    @property
    def param_names(self) -> tuple[str, ...]:
        """Weight and bias names interleaved layer by layer: W_1, b_1, W_2, b_2, ..."""
        return tuple(n for pair in zip(self.weights, self.biases) for n in pair)

    @staticmethod
    def layers(params: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``[(W_l (m, out, in), b_l as a column (m, out, 1))]`` views of ``params`` (in
        :attr:`param_names` order); in-place updates of ``params`` show through them."""
        return [(params[i], params[i + 1].unsqueeze(2)) for i in range(0, len(params), 2)]

    def step_grads(self, layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor,
                   target: torch.Tensor, weight: torch.Tensor, minus_one: torch.Tensor,
                   loss_out: torch.Tensor | None = None, input_grad: bool = False,
                   out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """One optimiser step's gradients for m clients: the engine's hot path.

        Parameters
        ----------
        layers : list of (Tensor, Tensor)
            :meth:`layers` of the clients' stacked parameters.
        x : Tensor, shape (m, B, in_features)
            The step's inputs, flattened per sample.
        target : Tensor, shape (m, 1, B), int64
            Labels.
        weight : Tensor, shape (m, 1, B)
            Per-sample loss weights (1/count on real samples, 0 on padding).
        minus_one : Tensor, shape (m, 1, B)
            −1 everywhere (the one-hot term of the output gradient).
        loss_out : Tensor of shape (m, 1, 1), optional
            Where to write −Σ_j weight_j · cross-entropy_j per client (the negated loss;
            the gradient does not need it, so it is computed only when asked for).

        Returns
        -------
        list of Tensor
            In :attr:`param_names` order: ∂W_l (m, out, in) and ∂b_l (m, out).
        """
        h = [x.transpose(1, 2)]  # feature-major activations (m, features, B)
        for (w, b), relu in zip(layers, self.relu):
            z = _forward(w, b, h[-1])
            h.append(z.relu_() if relu else z)
        log_p = torch.log_softmax(h.pop(), 1)  # (m, C, B)
        if loss_out is not None:
            torch.bmm(log_p.gather(1, target), weight.transpose(1, 2), out=loss_out)
        dz = log_p.exp_().scatter_add_(1, target, minus_one).mul_(weight)
        grads = [dz] * (2 * len(layers))
        for layer in range(len(layers) - 1, -1, -1):
            h_in, w = h[layer], layers[layer][0]
            grads[2 * layer] = _weight_grad(dz, h_in, w, None if out is None else out[2 * layer])
            grads[2 * layer + 1] = dz.sum(2) if out is None else torch.sum(dz, 2, out=out[2 * layer + 1])
            if layer or input_grad:
                dz = _input_grad(w, dz)
                if layer and self.relu[layer - 1]:
                    relu_backward_(dz, h_in)
        return grads + [dz] if input_grad else grads


def per_client_products(enabled: bool) -> contextlib.AbstractContextManager:
    """A block (``with``) inside which large dense layers on the CPU run one oneDNN product
    per client (True, the default outside any block) or ``bmm`` for every layer (False:
    the kernel as it was before, bit for bit; the A/B of ``benchmarks/engine_vs_sequential.py
    --without-onednn``). Process-wide, like :func:`fedlib.engine.max_workers`."""
    check_choice(enabled, "enabled", (False, True))

    @contextlib.contextmanager
    def block():
        _PER_CLIENT.append(enabled)
        try:
            yield
        finally:
            _PER_CLIENT.pop()
    return block()


@functools.lru_cache(maxsize=1)
def _onednn_linear():
    """torch's oneDNN linear (``torch.ops.mkldnn._linear_pointwise``: x (n, in), w (out, in),
    b (out,) or None → x wᵀ + b), or None where this torch build lacks it or it does not
    compute a product (checked once, on a small one)."""
    try:
        linear = torch.ops.mkldnn._linear_pointwise
        if not torch.backends.mkldnn.is_available():
            return None
        a, w = torch.arange(12.0).view(3, 4), torch.arange(8.0).view(2, 4)
        return linear if torch.equal(linear(a, w, None, "none", [], ""), a @ w.T) else None
    except (AttributeError, RuntimeError):
        return None


def _enabled() -> bool:
    """The innermost :func:`per_client_products` block's setting (True outside any block)."""
    return _PER_CLIENT[-1] if _PER_CLIENT else True


def _per_client(w: torch.Tensor) -> bool:
    """Whether the layer with stacked weights ``w`` (m, out, in) runs one oneDNN product per client."""
    return (_enabled() and w.device.type == "cpu" and w.dtype == torch.float32
            and w.shape[1] * w.shape[2] >= ONEDNN_MIN_WEIGHTS and _onednn_linear() is not None)


def has_per_client_layer(model: nn.Module, device: torch.device) -> bool:
    """Whether ``model``, a dense stack (:func:`dense_stack`), trains some layer as one oneDNN
    product per client on ``device`` (then its chunks train on worker threads:
    :func:`fedlib.engine.paths.chunk_workers`)."""
    return (dense_stack(model) is not None and _enabled() and device.type == "cpu" and _onednn_linear() is not None
            and any(type(m) is nn.Linear and m.in_features * m.out_features >= ONEDNN_MIN_WEIGHTS
                    for m in model.modules()))


def _forward(w: torch.Tensor, b: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """z = W h + b: ``w`` (m, out, in), ``b`` (m, out, 1), ``h`` (m, in, B) → (m, out, B)."""
    if not _per_client(w):
        return torch.baddbmm(b, w, h)
    linear = _onednn_linear()
    return torch.stack([linear(w[i], h[i].T, None, "none", [], "") for i in range(len(w))]).add_(b)


def _weight_grad(dz: torch.Tensor, h_in: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """∂W = ∂z h_inᵀ: ``dz`` (m, out, B), ``h_in`` (m, in, B) → (m, out, in), into ``out`` if given."""
    if not _per_client(w):
        return torch.bmm(dz, h_in.transpose(1, 2), out=out)
    linear = _onednn_linear()
    out = torch.empty_like(w, memory_format=torch.contiguous_format) if out is None else out
    for i in range(len(w)):
        out[i].copy_(linear(dz[i], h_in[i], None, "none", [], ""))
    return out


def _input_grad(w: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
    """∂h = Wᵀ ∂z: ``w`` (m, out, in), ``dz`` (m, out, B) → (m, in, B), contiguous."""
    if not _per_client(w):
        return torch.bmm(w.transpose(1, 2), dz)
    linear = _onednn_linear()
    out = dz.new_empty(len(w), w.shape[2], dz.shape[2])
    for i in range(len(w)):  # (B, in) per client, written transposed
        out[i].copy_(linear(dz[i].T, w[i].T, None, "none", [], "").T)
    return out


def relu_backward_(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """``grad`` ⊙ [``output`` > 0], in place (``grad`` returned): the gradient through a ReLU
    whose output was ``output`` (same shape).

    One pass of autograd's own ReLU backward (``threshold_backward``, as the sequential path
    computes it); ``grad.mul_(output > 0)`` also builds a bool mask and converts it to float,
    6–10× slower on this project's CPU (one thread: (3, 2,048, 32) 165 µs against 25 µs,
    (32, 24, 14, 14) channels-last 130 µs against 13 µs). A masked entry is +0.0 (the product
    gave −0.0 where the gradient was negative): the same values, and the same trained weights
    bit for bit on ``benchmarks/engine_vs_sequential.py``'s MLP, FMNIST CNN and LeNet-5 runs.
    """
    return torch.ops.aten.threshold_backward.grad_input(grad, output, 0, grad_input=grad)


def dense_stack(model: nn.Module) -> DenseStack | None:
    """The :class:`DenseStack` of ``model`` if it is ``Sequential([Flatten,] Linear, [ReLU,] ..., Linear)``
    with biases everywhere, else None."""
    if not isinstance(model, nn.Sequential):
        return None
    layers = list(model.named_children())
    if layers and isinstance(layers[0][1], nn.Flatten) and layers[0][1].start_dim == 1:
        layers = layers[1:]
    weights, biases, relu = [], [], []
    for i, (name, layer) in enumerate(layers):
        if isinstance(layer, nn.Linear) and layer.bias is not None:
            weights.append(f"{name}.weight")
            biases.append(f"{name}.bias")
            relu.append(False)
        elif isinstance(layer, nn.ReLU) and relu and not relu[-1] and i < len(layers) - 1:
            relu[-1] = True
        else:
            return None
    if not weights or relu[-1]:
        return None
    return DenseStack(tuple(weights), tuple(biases), tuple(relu))
