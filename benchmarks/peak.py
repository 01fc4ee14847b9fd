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

import copy
import time

import torch


def _best_seconds(fn, repeats: int, device: torch.device, warmups: int = 1) -> float:
    """The fastest of ``repeats`` calls of ``fn`` after ``warmups`` untimed ones (CUDA
    synchronised around each)."""
    for _ in range(warmups):
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
    return best


def _best_rate(fn, n: int, repeats: int, device: torch.device) -> float:
    return 2 * n ** 3 / _best_seconds(fn, repeats, device)


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


_PRODUCTS = ("mm", "addmm", "bmm", "convolution", "convolution_backward")


def _products_of_one_step(model, input_shape, batch: int, device: torch.device) -> list:
    """(aten op, args) of every matrix product and convolution in one client's training step
    (forward + backward of the mean cross-entropy over ``batch`` samples, as ``nn.Module``s
    run it), recorded with their real arguments."""
    import copy

    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    recorded = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in _PRODUCTS:
                recorded.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    net = copy.deepcopy(model).to(device).train()
    x = torch.randn(batch, *input_shape, device=device)
    with Record():
        F.cross_entropy(net(x), torch.zeros(batch, dtype=torch.long, device=device)).backward()
    return recorded


def _formulations(func, args: tuple, kwargs: dict) -> list:
    """Ways to compute one recorded product: the op itself; for a matrix product also
    oneDNN's linear in both orientations (x wᵀ and (wᵀ xᵀ)ᵀ) where this build has it; for a
    convolution also its inputs in channels-last memory."""
    name = func.overloadpacket.__name__
    ways = [lambda: func(*args, **kwargs)]
    if name in ("mm", "addmm") and torch.backends.mkldnn.is_available() and args[-1].device.type == "cpu":
        a, b = args[-2], args[-1]
        linear = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
        if linear is not None:
            ways += [lambda: linear(a, b.t(), None, "none", [], ""), lambda: linear(b.t(), a, None, "none", [], "")]
    if name.startswith("convolution"):
        cl = [a.contiguous(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4 else a
              for a in args]
        ways.append(lambda: func(*cl, **kwargs))
    return ways


def step_flops(model, input_shape, batch: int, device: torch.device | str = "cpu") -> float:
    """FLOPs of one training step (forward + backward) of ``batch`` samples, by torch's FLOP
    counter (matrix products and convolutions: the bulk of the work), on ``device``."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    device = torch.device(device)
    net = copy.deepcopy(model).to(device).train()
    x = torch.randn(batch, *input_shape, device=device)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(net(x), torch.zeros(batch, dtype=torch.long, device=device)).backward()
    return float(counter.get_total_flops())


def products_floor(model, input_shape, batch: int, device: torch.device | str = "cpu",
                   repeats: int = 5) -> tuple[float, float]:
    """(seconds, FLOPs) of one client's training step of ``batch`` samples counting only its
    matrix products and convolutions, each timed alone at its own shape on one thread with
    its data in the cache, in the fastest of the ways :func:`_formulations` tries.

    Each client multiplies by its own weights, so its products cannot be merged with
    another client's (a grouped convolution or ``bmm`` runs them side by side, each at its
    own shape's rate; only the forward products of a first step, where clients start from
    one model, share a weight); on T threads T clients' products run at once, at best T
    times as fast. So (seconds × client steps / T) is a floor for per-client training at
    these shapes with these libraries: the small, skinny products of a batch of 32 run far
    below the 2048² peak (:func:`matmul_peak`), which is the bound for a single large
    product, not for them.

    A CPU yardstick only: on a GPU one small product alone is bound by its kernel's launch
    (microseconds) while the engine runs all clients' products in one kernel, so the sum of
    such times is no floor (an H200 run of the engine beat it 1.4–5.9×); ``device='cuda'``
    raises ValueError.
    """
    from torch.utils.flop_counter import FlopCounterMode

    device = torch.device(device)
    if device.type != "cpu":
        raise ValueError(f"device={device.type!r}: products_floor is a CPU bound (on a GPU, products timed "
                         "alone are bound by kernel launches, not by their arithmetic); fix: device='cpu', "
                         "or compare a GPU run with matmul_peak(device)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds = flops = 0.0
        for func, args, kwargs in _products_of_one_step(model, input_shape, batch, device):
            with FlopCounterMode(display=False) as counter:
                func(*args, **kwargs)
            best = float("inf")
            for way in _formulations(func, args, kwargs):
                try:
                    best = min(best, _best_seconds(way, repeats, device, warmups=2))
                except RuntimeError:  # a formulation this build or shape does not take
                    continue
            seconds += best
            flops += counter.get_total_flops()
        return seconds, flops
    finally:
        torch.set_num_threads(threads)
