"""Hand-written batched forward/backward for small convolutional nets (the FMNIST CNN, LeNet-5).

For models that are convolution blocks followed by a dense head,

    [Conv2d → ReLU → MaxPool2d(k)] × L → Flatten → Linear, [ReLU,] ..., Linear

(each block's ReLU and pooling optional; convolutions with stride 1, no dilation, one
group, zero padding given as numbers, a bias; pooling windows of k × k with stride k,
no padding, floor mode), the vectorised path skips ``vmap`` and autograd and runs the
whole chunk's step as a few large kernels:

* **one grouped convolution per layer for the m clients** of a chunk: the chunk's
  activations are laid out as one batch of B samples with m·C channels, client i owning
  channels [i·C, (i+1)·C), and client i's filters are group i (``groups = m``), so each
  layer is one oneDNN call instead of m small ones;
* **channels-last memory** (B, H, W, m·C): oneDNN's convolutions and torch's max pooling
  run 2–6× faster on it than on (B, m·C, H, W) for these few-channel layers (measured on
  this project's CPU: a 2 × 2 pool of (32, 8, 28, 28) takes 1.2 ms channels-first with
  indices, 0.2 ms channels-last);
* **pooling before the ReLU**: max-pooling and ReLU commute in value
  (max(relu(a), relu(b)) = relu(max(a, b)), ReLU being monotone) and in gradient (both
  orders send a window's gradient to the first position of its maximum when that maximum
  is > 0, and nowhere otherwise — ties among values ≤ 0 get no gradient through the
  ReLU either way), so the ReLU runs on a quarter of the elements;
* the dense head on :class:`~fedlib.engine.dense.DenseStack`'s kernel, which also returns
  the gradient with respect to its input.

The mathematics is autograd's for the per-client weighted cross-entropy Σ_j w_j ℓ_j,
per layer l with input h_{l−1} (B samples of client i):

    forward   z_l = conv(h_{l−1}; W_l, b_l),  p_l = maxpool(z_l),  h_l = relu(p_l)
    backward  ∂p_l = ∂h_l ⊙ [h_l > 0],  ∂z_l = maxpool⁻¹(∂p_l),
              (∂h_{l−1}, ∂W_l, ∂b_l) = conv_backward(∂z_l)   (∂h_0 never computed)

Float rounding differs from the sequential path's (other kernels, other summation
orders); the path-equality tests bound the difference.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .dense import DenseStack, dense_stack, relu_backward_

__all__ = ["ConvBlock", "ConvStack", "conv_stack"]

_aten = torch.ops.aten
_CL = torch.channels_last


@dataclass(frozen=True)
class ConvBlock:
    """One Conv2d with what follows it.

    Attributes
    ----------
    weight, bias : str
        State names of the filters (C_out, C_in, kh, kw) and the bias (C_out,).
    padding : tuple of int
        Zero padding (ph, pw).
    relu : bool
        Whether a ReLU follows.
    pool : int
        Max-pooling window (= stride) k, or 0 for none.
    """

    weight: str
    bias: str
    padding: tuple[int, int]
    relu: bool
    pool: int


@dataclass(frozen=True)
class ConvStack:
    """A conv-blocks-then-dense model, as the vectorised kernel reads it.

    Attributes
    ----------
    blocks : tuple of ConvBlock
    head : DenseStack
        The Linear layers after the Flatten.
    """

    blocks: tuple[ConvBlock, ...]
    head: DenseStack

    @property
    def param_names(self) -> tuple[str, ...]:
        """Each block's weight and bias, then the head's :attr:`DenseStack.param_names`."""
        return tuple(n for b in self.blocks for n in (b.weight, b.bias)) + self.head.param_names

    def layers(self, params: list[torch.Tensor]) -> tuple[list, list]:
        """``(conv, head)``: per block (filters as one grouped weight (m·C_out, C_in, kh, kw),
        bias (m·C_out,)), views of ``params`` (in :attr:`param_names` order), and the head's
        :meth:`DenseStack.layers`; in-place updates of ``params`` show through them."""
        n_conv = 2 * len(self.blocks)
        conv = [(w.view(-1, *w.shape[2:]), b.view(-1)) for w, b in zip(params[0:n_conv:2], params[1:n_conv:2])]
        return conv, self.head.layers(params[n_conv:])

    def step_grads(self, layers: tuple[list, list], x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor,
                   minus_one: torch.Tensor, loss_out: torch.Tensor | None = None,
                   out: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """One optimiser step's gradients for m clients (arguments as
        :meth:`DenseStack.step_grads`, except ``x``: (m, B, C, H, W) images).

        Returns
        -------
        list of Tensor
            In :attr:`param_names` order, each (m, *parameter shape), contiguous.
        """
        conv, head = layers
        m, batch = x.shape[0], x.shape[1]
        h = _grouped(x)
        saved = []
        for (w, b), block in zip(conv, self.blocks):
            z = _aten.convolution(h, _channels_last(w), b, [1, 1], list(block.padding), [1, 1], False, [0, 0], m)
            idx = None
            if block.pool:
                z_pre, (z, idx) = z, _aten.max_pool2d_with_indices(z, [block.pool] * 2, [block.pool] * 2)
            else:
                z_pre = None
            if block.relu:
                z = z.relu_()
            saved.append((h, z_pre, idx, z))
            h = z
        c, hh, ww = h.shape[1] // m, h.shape[2], h.shape[3]
        # client-major, each sample flattened in torch's (C, H, W) order, feature-major: (m, C·H·W, B)
        flat = h.reshape(batch, m, c, hh, ww).permute(1, 2, 3, 4, 0).reshape(m, c * hh * ww, batch)
        n_conv = 2 * len(self.blocks)
        *head_grads, dh = self.head.step_grads(head, flat.transpose(1, 2), target, weight, minus_one, loss_out,
                                               input_grad=True, out=None if out is None else out[n_conv:])
        dh = _grouped_feature_major(dh, m, (c, hh, ww))
        conv_grads = []
        for li in range(len(self.blocks) - 1, -1, -1):
            block, (h_in, z_pre, idx, h_out) = self.blocks[li], saved[li]
            w = conv[li][0]
            if block.relu:
                dh = relu_backward_(dh, h_out)
            if block.pool:
                dh = _aten.max_pool2d_with_indices_backward(dh, z_pre, [block.pool] * 2, [block.pool] * 2,
                                                            [0, 0], [1, 1], False, idx)
            dx, dw, db = _aten.convolution_backward(dh, h_in, w, [w.shape[0]], [1, 1], list(block.padding), [1, 1],
                                                    False, [0, 0], m, [li > 0, True, True])
            db, dw = db.view(m, -1), dw.view(m, -1, *w.shape[1:])  # dw: channels-last strides
            if out is None:
                conv_grads += [db, dw.contiguous()]
            else:
                conv_grads += [out[2 * li + 1].copy_(db), out[2 * li].copy_(dw)]
            dh = dx
        return conv_grads[::-1] + head_grads


def _grouped(x: torch.Tensor) -> torch.Tensor:
    """(m, B, C, H, W) → (B, m·C, H, W) in channels-last memory (client i: channels i·C…)."""
    m, batch, c, hh, ww = x.shape
    return _channels_last(x.permute(1, 3, 4, 0, 2).contiguous().view(batch, hh, ww, m * c).permute(0, 3, 1, 2))


def _grouped_feature_major(g: torch.Tensor, m: int, chw: tuple[int, int, int]) -> torch.Tensor:
    """(m, C·H·W, B) feature-major gradients → the grouped channels-last (B, m·C, H, W)."""
    c, hh, ww = chw
    batch = g.shape[2]
    grouped = g.view(m, c, hh, ww, batch).permute(4, 2, 3, 0, 1).contiguous().view(batch, hh, ww, m * c)
    return _channels_last(grouped.permute(0, 3, 1, 2))


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` (N, C, H, W), already laid out channels-last, with strides that say so.

    With one channel (one client of a one-channel input) the layout is both contiguous
    and channels-last and torch takes it for contiguous; oneDNN would then write the
    convolution's output channels-first, where pooling runs ~6× slower. A channel stride
    of 1 (the stride of a size-1 dimension is never used) makes the layout unambiguous.
    """
    if t.shape[1] == 1:
        t = t.as_strided(t.shape, (t.stride(0), 1, t.stride(2), t.stride(3)))
    return t


def _leaves(module: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    """The leaf modules in call order, nested ``nn.Sequential`` flattened (None when some
    container is not a Sequential, whose forward need not call its children in order)."""
    out = []
    for name, child in module.named_children():
        full = f"{prefix}{name}"
        if isinstance(child, nn.Sequential):
            inner = _leaves(child, full + ".")
            if inner is None:
                return None
            out.extend(inner)
        elif list(child.children()):
            return None
        else:
            out.append((full, child))
    return out


def _supported_conv(layer: nn.Module) -> bool:
    return (type(layer) is nn.Conv2d and layer.bias is not None and layer.stride == (1, 1)
            and layer.dilation == (1, 1) and layer.groups == 1 and layer.padding_mode == "zeros"
            and not isinstance(layer.padding, str))


def _pool_size(layer: nn.Module) -> int:
    """k for ``MaxPool2d(k)`` with stride k, no padding, no dilation, floor mode; else 0."""
    if type(layer) is not nn.MaxPool2d or layer.ceil_mode or layer.return_indices:
        return 0
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    k, s = pair(layer.kernel_size), pair(layer.stride if layer.stride is not None else layer.kernel_size)
    if k[0] != k[1] or s != k or pair(layer.padding) != (0, 0) or pair(layer.dilation) != (1, 1):
        return 0
    return int(k[0])


def conv_stack(model: nn.Module) -> ConvStack | None:
    """The :class:`ConvStack` of ``model``, or None when the model is not of that form (see
    the module docstring)."""
    if not isinstance(model, nn.Sequential):
        return None
    leaves = _leaves(model)
    if not leaves:
        return None
    blocks, i = [], 0
    while i < len(leaves) and isinstance(leaves[i][1], nn.Conv2d):
        name, layer = leaves[i]
        if not _supported_conv(layer):
            return None
        relu, pool, i = False, 0, i + 1
        while i < len(leaves):  # ReLU and MaxPool2d in either order, each at most once
            nxt = leaves[i][1]
            if type(nxt) is nn.ReLU and not relu:
                relu = True
            elif type(nxt) is nn.MaxPool2d and not pool and _pool_size(nxt):
                pool = _pool_size(nxt)
            else:
                break
            i += 1
        blocks.append(ConvBlock(f"{name}.weight", f"{name}.bias", tuple(int(p) for p in layer.padding), relu, pool))
    if not blocks or i >= len(leaves) or not (type(leaves[i][1]) is nn.Flatten and leaves[i][1].start_dim == 1):
        return None
    head = dense_stack(nn.Sequential(*[m for _, m in leaves[i + 1:]]))
    if head is None:
        return None
    names = [n for n, _ in leaves[i + 1:]]
    rename = lambda s: f"{names[int(s.split('.')[0])]}.{s.split('.', 1)[1]}"  # noqa: E731
    head = DenseStack(tuple(map(rename, head.weights)), tuple(map(rename, head.biases)), head.relu)
    return ConvStack(tuple(blocks), head)
