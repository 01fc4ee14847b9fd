"""Which path trains/evaluates a model, how many clients one vectorised chunk holds, and how
many chunks train at once (:func:`chunk_workers`).

The choice is a fixed rule of (model layers, size, device type), not a timing taken at
run time, so the same configuration always takes the same path and stays
bit-reproducible. The rule:

* training with dropout or BatchNorm, or any model with a recurrent layer: sequential.
  Dropout masks drawn under ``vmap`` cannot reproduce a client's own seeded stream, and
  ``aten::lstm`` has no batching rule. BatchNorm's running-statistics update does batch
  (``vmap`` updates each client's row of the stacked statistics as the loop would), but a
  vectorised step pads a client's short last batch to the chunk's batch width (weight 0 in
  the loss, :mod:`fedlib.engine.train`), and BatchNorm's batch mean and variance would
  count those padding rows. Evaluation (eval mode: no dropout, frozen BN statistics) of
  BN/dropout models does vectorise.
* CUDA: vectorised (many clients per kernel instead of many tiny kernels). Measured on an
  H200 (``benchmarks/engine_vs_sequential.py --device cuda``, K = 100): 10.7–94.7× the
  per-client loop, from the FMNIST CNN to the 3×500 MLP (docs/performance.md).
* CPU: vectorised for dense stacks (``Linear``/``ReLU`` only: logistic, MLP — they take
  the hand-written kernel of :mod:`fedlib.engine.dense`), for training conv stacks
  (convolution blocks then a dense head: the FMNIST CNN, LeNet-5, the small CNN — the
  hand-written grouped, channels-last kernel of :mod:`fedlib.engine.conv`; their
  evaluation stays sequential, vmap's forward being no faster) and for other models
  without convolutions of at most :data:`CPU_MAX_VECTORISED_WEIGHTS` weights;
  sequential otherwise.
* Evaluation (the bullets above are training's rule) follows the measurements of
  :data:`EVAL_MEASURED` (``benchmarks/eval_paths.py``): on the CPU vectorised only for dense
  stacks of at most :data:`CPU_EVAL_MAX_VECTORISED_WEIGHTS` weights, sequential for every
  other model, so that "auto" is never slower than the sequential path where nothing was
  measured; on CUDA vectorised except for models with convolutions.

The CPU rule comes from ``python benchmarks/engine_vs_sequential.py --path-table`` (ms per
client step by model and path: docs/performance.md, "The engine's two paths, per model").
Small models gain up to 10–17× per client step (the per-step overhead is paid once per
chunk); from a few hundred thousand weights on a step is bound by arithmetic or memory
traffic, where the dense kernel still edges out the loop and vmap + autograd does not. The
conv kernel gains 1.6–2.3× per client step; evaluation of conv stacks has no such kernel and
stays sequential on CPU (vmap's forward measured 4–35 % slower).
"""
from __future__ import annotations

import torch
from torch import nn

from .conv import conv_stack
from .dense import dense_stack, has_per_client_layer
from .workers import plan_workers

__all__ = ["PATHS", "CPU_MAX_VECTORISED_WEIGHTS", "CPU_EVAL_MAX_VECTORISED_WEIGHTS", "EVAL_MEASURED", "choose_path",
           "resolve_path", "clients_per_chunk", "chunk_workers"]

PATHS = ("auto", "sequential", "vectorised")

_RECURRENT = (nn.RNNBase,)
_TRAIN_ONLY_BLOCKERS = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)
_CONV = (nn.modules.conv._ConvNd,)
# On CPU, conv-free models that are not dense stacks are vectorised up to this many weights.
CPU_MAX_VECTORISED_WEIGHTS = 200_000
# CPU chunks are capped: a working set that leaves the caches is memory-bound, and fresh
# allocations above glibc's 32 MiB mmap threshold page-fault on every step (measured, MLP-500:
# 2.3 / 2.8 / 4.8 ms per client step with chunks of 5 / 20 / 50 clients).
_CPU_CHUNK_BYTES = 64 * 1024 ** 2
_CPU_DENSE_CHUNK_BYTES = 32 * 1024 ** 2  # the dense kernel's training chunks (see clients_per_chunk)
# ... except for a conv stack on its kernel trained on worker threads with many chunks to
# share out: its chunks may grow to this while each worker keeps _CHUNKS_PER_WORKER of them
# (see clients_per_chunk's ``clients``).
_CPU_WIDE_CHUNK_BYTES = 256 * 1024 ** 2
_CHUNKS_PER_WORKER = 12


def _blocker(model: nn.Module, training: bool) -> str | None:
    """Why ``model`` cannot take the vectorised path (None when it can)."""
    for name, module in model.named_modules():
        if isinstance(module, _RECURRENT):
            return f"layer {name!r} is recurrent ({type(module).__name__} has no vmap batching rule)"
        if training and isinstance(module, _TRAIN_ONLY_BLOCKERS):
            return (f"layer {name!r} ({type(module).__name__}) is stochastic or keeps running "
                    "statistics in training mode")
    return None


#: Evaluation's measured choices (``python benchmarks/eval_paths.py``, which prints auto's time
#: over the sequential path's and flags "AUTO SLOWER"): (device type, architecture of
#: :mod:`fedlib.models`, input shape, the faster path — the one auto takes —, what was
#: measured). Seconds are sequential / vectorised, the best of 5 alternating runs (3 for the
#: conv stacks) on one thread of a shared 2-core CPU VM; "global": 10 models each on the same
#: 1,000 images (``evaluate_global``), "clients": 50 clients' own models on their own 40 test
#: images (``evaluate``). Evaluation is vectorised only where a row measured it faster; on the
#: CPU every model no row covers is evaluated on the sequential path, which "auto" then is.
EVAL_MEASURED = (
    ("cpu", "logistic", (784,), "vectorised",
     "clients 0.037 / 0.018 s; global 0.067 / 0.085 s (the loop 10–40 ms ahead a call)"),
    ("cpu", "mlp", (16,), "sequential", "3×500 units: clients 0.312 / 0.395 s; global 0.865 / 0.845 s"),
    ("cpu", "embed_dnn", (100,), "sequential", "vocab 2,000: clients 0.050 / 0.065 s; global 0.140 / 0.165 s"),
    ("cpu", "lenet5", (1, 28, 28), "sequential", "global, 20 models × 2,000 images: 11.1 / 16.4 s"),
    ("cpu", "fmnist_cnn", (1, 28, 28), "sequential", "global, 20 models × 2,000 images: 15.2 / 27.2 s"),
    ("cpu", "cnn", (1, 28, 28), "sequential", "global, 20 models × 2,000 images: 12.1 / 31.4 s"),
    ("cuda", "lenet5", (1, 28, 28), "sequential", "FedPrism's 20 models × 10,000 FMNIST test images: 24 / 36 s"),
)
#: The largest dense stack evaluated vectorised on the CPU: logistic 784→10 measured faster,
#: the 3×500 MLP not; sizes between are unmeasured and stay sequential.
CPU_EVAL_MAX_VECTORISED_WEIGHTS = 10_000


def _eval_path(model: nn.Module, device: torch.device) -> str:
    """Evaluation's path (:data:`EVAL_MEASURED`): on the CPU vectorised only for dense stacks of
    at most :data:`CPU_EVAL_MAX_VECTORISED_WEIGHTS` weights; on CUDA vectorised except for
    models with convolutions."""
    if device.type != "cpu":
        return "sequential" if any(isinstance(m, _CONV) for m in model.modules()) else "vectorised"
    small = sum(p.numel() for p in model.parameters()) <= CPU_EVAL_MAX_VECTORISED_WEIGHTS
    return "vectorised" if dense_stack(model) is not None and small else "sequential"


def choose_path(model: nn.Module, device: torch.device, training: bool) -> str:
    """``'vectorised'`` or ``'sequential'`` for ``model`` on ``device`` (rule in the module docstring)."""
    if _blocker(model, training) is not None:
        return "sequential"
    if not training:
        return _eval_path(model, device)
    if device.type != "cpu" or dense_stack(model) is not None or conv_stack(model) is not None:
        return "vectorised"
    has_conv = any(isinstance(m, _CONV) for m in model.modules())
    n_weights = sum(p.numel() for p in model.parameters())
    return "vectorised" if not has_conv and n_weights <= CPU_MAX_VECTORISED_WEIGHTS else "sequential"


def resolve_path(path: str, model: nn.Module, device: torch.device, training: bool) -> str:
    """Validate a requested path; ``'auto'`` becomes :func:`choose_path`'s answer."""
    if path not in PATHS:
        raise ValueError(f"path={path!r} is unknown; choose one of {PATHS}")
    if path == "auto":
        return choose_path(model, device, training)
    reason = _blocker(model, training) if path == "vectorised" else None
    if reason is not None:
        raise ValueError(f"path='vectorised' is not possible: {reason}; use path='sequential' or 'auto'")
    return path


def clients_per_chunk(model: nn.Module, sample: torch.Tensor, batch_size: int, training: bool,
                      override: int | None = None, memory_fraction: float = 0.5, autograd: bool = False,
                      clients: int | None = None) -> int:
    """How many clients one vectorised step may hold (``sample``: one input, (1, *input_shape)).

    ≥ 1: ⌊memory_fraction · free bytes / estimated bytes per client⌋ (``override``: a fixed
    size), the budget capped at 64 MiB on CPU. Training counts 6 copies of the state per client
    (weights, gradients, two Adam moments, autograd activations), a conv stack on its kernel
    (:mod:`fedlib.engine.conv`) the 4 it holds (``autograd``: vmap + autograd anyway, 6). The
    dense kernel's training takes 32 MiB, rounded down to a multiple of torch's thread count:
    its steps are memory-bound and smaller chunks measured faster (the 3×500 MLP, 2 threads:
    2.33–2.42 s at 2 clients a chunk, 3.07–3.22 s at 3, 2.60–2.74 s at 4). With ``clients``
    = M, a conv stack on its kernel on CPU trained on W ≥ 2 workers (:func:`chunk_workers`)
    takes chunks of up to ⌈M / (12 W)⌉ clients within 256 MiB: at K = 1,000 (FMNIST CNN,
    ``benchmarks/scaling.py``) a round took 936–994 ms in chunks of 3, 747–963 in chunks of
    12; with few clients small chunks keep the workers balanced.
    """

    if override is not None:
        if isinstance(override, bool) or not isinstance(override, int) or override < 1:
            raise ValueError(f"max_clients_per_chunk must be an integer ≥ 1, got {override!r}")
        return override
    n_state = sum(t.numel() for t in model.state_dict().values())
    copies = (4 if not autograd and conv_stack(model) is not None else 6) if training else 1
    per_client = 4 * (n_state * copies
                      + batch_size * _activations_per_sample(model, sample) * (3 if training else 1))
    free = memory_fraction * _free_bytes(sample.device)
    if sample.device.type != "cpu":
        return max(1, int(free // per_client))
    if training and not autograd and dense_stack(model) is not None:
        chunk, threads = max(1, int(min(free, _CPU_DENSE_CHUNK_BYTES) // per_client)), torch.get_num_threads()
        return chunk - chunk % threads if chunk > threads else chunk
    chunk = max(1, int(min(free, _CPU_CHUNK_BYTES) // per_client))
    workers = plan_workers(2 ** 31)[0]
    if copies == 4 and clients and workers >= 2:  # training a conv stack on its kernel, side by side
        wide = max(1, int(min(free, _CPU_WIDE_CHUNK_BYTES) // per_client))
        chunk = min(wide, max(chunk, -(-int(clients) // (_CHUNKS_PER_WORKER * workers))))
    return chunk


def chunk_workers(model: nn.Module, device: torch.device, n_chunks: int) -> tuple[int, int] | None:
    """The worker threads that train a call's ``n_chunks`` vectorised chunks: (W, intra-op
    threads each) for :func:`fedlib.engine.workers.run_chunks`, or None for one chunk after
    another in the calling thread.

    A fixed rule, like the path's: conv stacks on CPU train on workers
    (:func:`fedlib.engine.workers.plan_workers`: side by side up to torch's thread count,
    subnormals flushed), and so do dense stacks with a layer large enough for one oneDNN
    product per client (:func:`fedlib.engine.dense.has_per_client_layer`); every other case
    in the calling thread. Measured (2 threads, the
    two settings alternating in one process): side by side, the FMNIST CNN 1.08–1.17× faster
    (``benchmarks/engine_vs_sequential.py``'s federation and ``benchmarks/scaling.py``'s
    rounds), LeNet-5 0.97–1.00×, the dense kernel on ``bmm`` no faster or slower (the 3×500 MLP
    0.95–1.01×; again 2.24–2.47 s against 2.30–2.61 s on its per-client products, four runs each,
    alternating; logistic regression in chunks of 50 0.65×: its steps are tens of
    microseconds of Python, which threads take turns at), the 3×500 MLP on its per-client oneDNN
    products 1.90–2.11 s against 2.05–3.13 s in the calling thread; flushing subnormals, the FMNIST
    CNN's paper protocol at S = 0 3.1× faster (``benchmarks/paper_run.py``, 10 rounds),
    while the MLP and logistic regression met no subnormals there (Letter and Adult at
    S = 0: the same round times).
    """
    if device.type == "cpu" and (conv_stack(model) is not None or has_per_client_layer(model, device)):
        return plan_workers(n_chunks)
    return None


def _activations_per_sample(model: nn.Module, sample: torch.Tensor) -> int:
    """Σ numel of every leaf module's output for one input (counted without a forward
    pass for dense stacks)."""
    if dense_stack(model) is not None:
        total, width = 0, sample.numel()
        for layer in model.children():
            width = layer.out_features if isinstance(layer, nn.Linear) else width
            total += width
        return total
    total = 0

    def count(_module, _inputs, output):
        nonlocal total
        if torch.is_tensor(output):
            total += output.numel()

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    try:
        with torch.no_grad():
            model.eval()(sample)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return max(total, 1)


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 2 * 1024 ** 3  # unknown: assume 2 GiB free
