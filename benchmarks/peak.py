"""This machine's float32 matmul peak: the rate the benchmarks' floors divide by.

On the CPU torch multiplies matrices through two libraries: MKL (``torch.mm``, ``bmm``,
``nn.Linear``) and oneDNN (convolutions, and the dense kernel's per-client products,
:mod:`fedlib.engine.dense`). On AMD CPUs MKL takes its AVX2 code path even where the CPU has
AVX-512, so the two peaks differ by about 2× there (this project's AMD EPYC, 2 threads:
MKL 220 GFLOP/s, oneDNN 475 GFLOP/s on 2048² products); on Intel CPUs they are close. The
bound no implementation can beat is the faster of the two: :func:`matmul_peak` measures both
and returns the best, with each library's rate for the benchmark's line.
"""
from __future__ import annotations

import time

import torch


def _best_rate(fn, n: int, repeats: int, device: torch.device) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def matmul_peak(device: torch.device | str = "cpu", n: int = 2048, repeats: int = 5) -> tuple[float, dict[str, float]]:
    """(peak FLOP/s, {library: FLOP/s}): best of ``repeats`` n×n float32 products per library —
    ``torch.mm`` (MKL on the CPU, cuBLAS on CUDA) and, on the CPU where this torch build has
    it, oneDNN's linear."""
    device = torch.device(device)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    rates = {"mkl" if device.type == "cpu" else "torch.mm": _best_rate(lambda: a @ b, n, repeats, device)}
    if device.type == "cpu" and torch.backends.mkldnn.is_available():
        try:
            linear = torch.ops.mkldnn._linear_pointwise
            rates["onednn"] = _best_rate(lambda: linear(a, b, None, "none", [], ""), n, repeats, device)
        except (AttributeError, RuntimeError):
            pass
    return max(rates.values()), rates


def describe(rates: dict[str, float]) -> str:
    """``'mkl 220 GFLOP/s, onednn 475 GFLOP/s'``."""
    return ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in rates.items())
