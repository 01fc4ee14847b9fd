"""The one way numbers leave the training device: :func:`to_host`.

Engine results (counts, losses, weights) live on the federation's device — a GPU in a
CUDA run. ``np.asarray(tensor)`` works on CPU tensors and fails on CUDA ones, so code that
reads a device tensor into numpy must go through ``to_host``; the test suite runs every
method with numpy conversion of tensors switched off everywhere else
(tests/test_device_agnostic.py), so a direct ``np.asarray``/``.numpy()`` on an engine
tensor fails a test on a CPU-only machine.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["to_host"]

_TENSOR_NUMPY = torch.Tensor.numpy  # bound once, so tests may switch the method itself off


def to_host(t, dtype=None) -> np.ndarray:
    """A numpy copy of ``t`` (a Tensor on any device, or anything ``np.asarray`` takes).

    Parameters
    ----------
    t : Tensor (any shape, any device) or array-like
    dtype : numpy dtype, optional

    Returns
    -------
    np.ndarray with ``t``'s shape.
    """
    if torch.is_tensor(t):
        out = _TENSOR_NUMPY(t.detach().to("cpu", copy=True))
    else:
        out = np.asarray(t)
    return out if dtype is None else out.astype(dtype, copy=False)
