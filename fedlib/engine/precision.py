"""IEEE FP32 and deterministic kernels on CUDA for the engine's calls.

torch's defaults on a GPU differ from the CPU's in two ways that change the numbers:

- cuDNN convolutions run in TF32 (``torch.backends.cudnn.conv.fp32_precision == "tf32"``,
  legacy ``cudnn.allow_tf32 = True``): their inputs are rounded to a 10-bit mantissa. Then
  the per-client loop (``nn.Conv2d``) and the vectorised path (one grouped convolution) round
  differently, and neither is the FP32 model of the papers. Measured on an H200 (torch
  2.11): all seven CNN path-equality tests on CUDA failed at rtol 1e-4 before this module,
  and passed after; after two epochs the paths' weights were up to 4.3e-2 apart (relative)
  with TF32 and 1.4e-5 without (``benchmarks/tf32_gap.py``).
- cuDNN may pick non-deterministic backward algorithms (atomics), so the same seed need not
  give the same bits twice.

:func:`exact_fp32` turns both off for the duration of an engine call (training, evaluation,
prediction, class embeddings) and restores the caller's settings afterwards, also on an
error. It also keeps cuBLAS products in IEEE FP32 when a caller has allowed TF32 for them
(torch's default already does). On the CPU these switches change nothing: they only steer
CUDA kernels.

The price on a GPU, measured on an H200 (``benchmarks/paper_run.py --device cuda``, the FMNIST
paper protocol, 40 rounds): training 21.8 s in IEEE FP32 with deterministic algorithms, 18.1 s
non-deterministic, 8.0 s with TF32. A user who wants the speed back trades the
guarantee explicitly: inside ``with gpu_kernels(tf32=True, deterministic=False):`` the
engine's calls let cuDNN and cuBLAS use TF32 and non-deterministic algorithms.

torch ≥ 2.9 has per-operator precision flags (``fp32_precision``) and refuses reads of the
legacy ``allow_tf32`` once they have been set; the new flags are used where they exist.
"""
from __future__ import annotations

import contextlib
import functools

import torch

from ..validation import check_choice
from .workers import _pushed


def _new_api() -> bool:
    return hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _flags() -> tuple:
    """(conv precision, matmul precision, cuDNN deterministic, cuDNN benchmark), in whichever
    API this torch has."""
    cudnn, mm = torch.backends.cudnn, torch.backends.cuda.matmul
    if _new_api():
        return cudnn.conv.fp32_precision, mm.fp32_precision, cudnn.deterministic, cudnn.benchmark
    return cudnn.allow_tf32, mm.allow_tf32, cudnn.deterministic, cudnn.benchmark


def _set(conv, matmul, deterministic: bool, benchmark: bool) -> None:
    cudnn, mm = torch.backends.cudnn, torch.backends.cuda.matmul
    if _new_api():
        cudnn.conv.fp32_precision, mm.fp32_precision = conv, matmul
    else:
        cudnn.allow_tf32, mm.allow_tf32 = conv, matmul
    cudnn.deterministic, cudnn.benchmark = deterministic, benchmark


_POLICY: list[tuple[bool, bool]] = []  # the innermost gpu_kernels block's (tf32, deterministic), if any


def gpu_kernels(*, tf32: bool = False, deterministic: bool = True) -> contextlib.AbstractContextManager:
    """A block (``with``) inside which the engine's CUDA calls allow TF32 in cuDNN's
    convolutions and cuBLAS's products (``tf32=True``) and/or cuDNN's non-deterministic
    algorithms (``deterministic=False``) (process-wide: the processes of a Ray grid do not
    see it). Faster on a GPU; the numbers are then no longer FP32's, nor the same bits from
    run to run, and a run's record says so (``host['gpu_kernels']``). Outside any block:
    IEEE FP32, deterministic."""
    check_choice(tf32, "tf32", (True, False))
    check_choice(deterministic, "deterministic", (True, False))
    return _pushed(_POLICY, (bool(tf32), bool(deterministic)))


def gpu_policy() -> dict:
    """What the engine's CUDA calls allow now: ``{'tf32': bool, 'deterministic': bool}`` (the
    innermost :func:`gpu_kernels` block's, else IEEE FP32 and deterministic); run records
    keep it for runs on a GPU."""
    tf32, deterministic = _POLICY[-1] if _POLICY else (False, True)
    return {"tf32": tf32, "deterministic": deterministic}


def _exact() -> tuple:
    """The settings :func:`exact_fp32` applies, in this torch's API (benchmarking off: the
    algorithm it would time and pick could differ from run to run); :func:`gpu_kernels`
    can loosen them."""
    tf32, deterministic = gpu_policy().values()
    if _new_api():
        return ("tf32" if tf32 else "ieee",) * 2 + (deterministic, False)
    return (tf32, tf32, deterministic, False)


@contextlib.contextmanager
def exact_fp32():
    """Within the block: cuDNN convolutions and cuBLAS products in IEEE FP32, cuDNN's
    algorithms deterministic and not benchmarked; the previous settings come back on leaving
    it. Nested blocks restore in order."""
    saved = _flags()
    _set(*_exact())
    try:
        yield
    finally:
        _set(*saved)


def exact(fn):
    """Decorator: ``fn`` runs inside :func:`exact_fp32`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with exact_fp32():
            return fn(*args, **kwargs)
    return wrapper
