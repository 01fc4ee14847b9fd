"""Evaluation of M stacked models: on their clients' data (``evaluate``), on the global test
set (``evaluate_global``), every model on every client (``loss_matrix``) or on shared inputs
(``predict_logits``). All run in eval mode (dropout off, BatchNorm running statistics).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from ..models import float_state
from ..validation import check_choice, fail
from .federation import NO_GLOBAL_TEST, Federation, gather
from .paths import clients_per_chunk, resolve_path
from ._validation import check_int, check_state
from .precision import exact
from .ragged import score_ragged
from .workers import flush_subnormals, plan_workers, run_chunks

__all__ = ["EvalResult", "evaluate", "evaluate_global", "LossMatrix", "loss_matrix", "predict_logits"]

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class EvalResult:
    """Per-row counts of an evaluation (rows in the order of ``clients``).

    Attributes
    ----------
    correct : Tensor, shape (M,), int64
        Samples whose arg-max logit equals the label.
    n : Tensor, shape (M,), int64
        Samples evaluated.
    loss_sum : Tensor, shape (M,), float64
        Σ cross-entropy over those samples.
    path : str
    """

    correct: torch.Tensor
    n: torch.Tensor
    loss_sum: torch.Tensor
    path: str

    @property
    def accuracy(self) -> torch.Tensor:
        """(M,) float64: correct / n (NaN where n = 0)."""
        return self.correct.double() / self.n.double()

    @property
    def mean_loss(self) -> torch.Tensor:
        """(M,) float64: loss_sum / n (NaN where n = 0)."""
        return self.loss_sum / self.n.double()


@torch.no_grad()
@exact
def evaluate(model: nn.Module, params: State, fed: Federation, clients, split: str = "test",
             batch_size: int = 256, path: str = "auto",
             max_clients_per_chunk: int | None = None, model_of=None) -> EvalResult:
    """Accuracy and loss counts (EvalResult) of row i's model on client ``clients[i]``'s split.

    ``params``: ``name -> (M, *shape)``; ``clients`` (M,) may repeat (IFCA scores k cluster
    models on one client by passing it k times). With ``model_of`` (M,), client ``clients[i]``
    is scored with row ``model_of[i]`` of ``params`` ``name -> (G, *shape)`` — the same counts,
    bit for bit, as those rows copied out one per client, without the copy. ``split``: 'test',
    'train', 'val' or 'global'; ``batch_size`` changes only float rounding.
    """
    clients, x, y, parts, template, state, chosen = _prepare(model, params, fed, clients, split, batch_size, path,
                                                             model_of)
    index = [parts[c] for c in clients]
    rows = None if model_of is None else _check_model_of(model_of, len(clients), _n_rows(params))
    correct, loss_sum = _eval_rows(template, state, x, y, index, batch_size, chosen, max_clients_per_chunk, rows)
    n = torch.as_tensor([len(i) for i in index], dtype=torch.int64, device=fed.device)
    return EvalResult(correct, n, loss_sum, chosen)


def _prepare(model: nn.Module, params: State, fed: Federation, clients, split: str, batch_size: int, path: str,
             model_of=None):
    """What every evaluation of one model row per client checks and builds first: the clients
    (checked), the split's x, y and per-client parts, the model in eval mode on the
    federation's device, the checked state (one row per client, or any number of rows when
    ``model_of`` maps clients to them) and the resolved path."""
    clients = fed.check_clients(clients)
    check_int(batch_size, "batch_size", 1)
    x, y, parts = fed.split(split)
    template = copy.deepcopy(model).to(fed.device).eval()
    state = check_state(params, template, len(clients) if model_of is None else _n_rows(params), fed.device)
    chosen = resolve_path(path, template, fed.device, training=False)
    return clients, x, y, parts, template, state, chosen


def _check_model_of(model_of, m: int, g: int) -> np.ndarray:
    """``model_of`` as an (M,) int64 array of rows in 0..G−1 (the workbook's ValueError otherwise)."""
    rows = np.asarray(model_of)
    if rows.shape != (m,) or not np.issubdtype(rows.dtype, np.integer) or rows.min() < 0 or rows.max() >= g:
        fail("model_of", f"{m} integer rows of params in 0..{g - 1} (one per client)", model_of)
    return rows.astype(np.int64)


def _eval_rows(template, state, x, y, index, batch_size, chosen, max_rows_per_chunk, model_of=None):
    """(correct (M,), loss_sum (M,)) of row i's model (row ``model_of[i]``, if given) on
    ``x[index[i]]`` along path ``chosen``."""
    if chosen == "sequential":
        return _eval_sequential(template, state, x, y, index, batch_size, model_of)
    chunk = clients_per_chunk(template, x[:1], batch_size, False, max_rows_per_chunk)
    return _eval_vectorised(template, state, x, y, index, batch_size, chunk, model_of)


@torch.no_grad()
@exact
def evaluate_global(model: nn.Module, params: State, fed: Federation, batch_size: int = 256,
                    path: str = "auto", max_models_per_chunk: int | None = None) -> EvalResult:
    """Each of M stacked models on the whole global test set (``fed.split('global')``).

    FedPrism's "global accuracy" of client i's model is row i's accuracy here (the
    official test set), its "local accuracy" that of :func:`evaluate` on ``split='test'``.
    ``params``: ``name -> (M, *shape)`` (M need not be K); ``fed`` built with ``x_global``.
    Returns EvalResult, M rows with ``n = N_g``.
    """
    if not fed.has_global_test:
        raise ValueError(NO_GLOBAL_TEST)
    check_int(batch_size, "batch_size", 1)
    x, y, parts = fed.split("global")
    template = copy.deepcopy(model).to(fed.device).eval()
    m = _n_rows(params)
    state = check_state(params, template, m, fed.device)
    chosen = resolve_path(path, template, fed.device, training=False)
    index = [parts[0]] * m
    correct, loss_sum = _eval_rows(template, state, x, y, index, batch_size, chosen, max_models_per_chunk)
    n = torch.full((m,), len(parts[0]), dtype=torch.int64, device=fed.device)
    return EvalResult(correct, n, loss_sum, chosen)


class LossMatrix(NamedTuple):
    """Every one of M models on every one of K clients (unpacks as ``loss, correct, n``).

    Attributes
    ----------
    loss : Tensor, shape (M, K), float64
        Mean (or summed) cross-entropy of model m on client ``clients[j]``'s split; NaN
        for a mean over an empty split.
    correct : Tensor, shape (M, K), int64
        Samples whose arg-max logit equals the label.
    n : Tensor, shape (K,), int64
        Samples in each client's split.
    """

    loss: torch.Tensor
    correct: torch.Tensor
    n: torch.Tensor


@torch.no_grad()
@exact
def loss_matrix(model: nn.Module, params: State, fed: Federation, clients, split: str = "val",
                reduction: str = "mean", batch_size: int = 256, path: str = "auto",
                max_pairs_per_chunk: int | None = None, mean_batch: int = 64) -> LossMatrix:
    """Loss of every one of M models on every one of K clients' split, in batched calls.

    The M·K (model, client) pairs are rows of the same machinery as :func:`evaluate`
    (model index repeated K times, the client list tiled M times, ``evaluate``'s
    ``model_of``). The vectorised path copies out the weights of at most
    ``max_pairs_per_chunk`` pairs at a time (default: the memory estimate of
    :func:`fedlib.engine.paths.clients_per_chunk`); the sequential path loads each model into
    the template once for all its clients and copies nothing. Entry (m, j) equals
    ``evaluate(model, params[m:m+1], fed, [clients[j]], split)`` up to float rounding
    (exactly where the path's kernels batch row-independently).

    Used by IFCA (each client takes the argmin over models of its loss), FedSoft,
    pFedLIA (influence = loss before − loss after), FedFomo and CAFA.

    ``params``: ``name -> (M, *shape)``; ``clients`` (K,), repeats allowed. ``reduction``:
    ``'mean'`` Σ loss / n (NaN on an empty split); ``'sum'`` Σ loss (0 on an empty split);
    ``'batch_means'``: the split cut in stored order into batches of ``mean_batch`` samples,
    Σ of each batch's mean loss (FedLab's ``evaluate``, which the PSI papers' PoC and HACCS
    rank by; 0 on an empty split), scored in the same batched calls. Returns LossMatrix
    ``(loss (M, K) float64, correct (M, K) int64, n (K,) int64)``.
    """

    check_choice(reduction, "reduction", _REDUCTIONS)
    clients = fed.check_clients(clients)
    check_int(batch_size, "batch_size", 1)
    check_int(mean_batch, "mean_batch", 1)
    if max_pairs_per_chunk is not None:
        check_int(max_pairs_per_chunk, "max_pairs_per_chunk", 1)
    x, y, parts = fed.split(split)
    template = copy.deepcopy(model).to(fed.device).eval()
    m, k = _n_rows(params), len(clients)
    state = check_state(params, template, m, fed.device)
    chosen = resolve_path(path, template, fed.device, training=False)
    sizes = np.array([len(parts[c]) for c in clients], dtype=np.int64)
    model_of = np.repeat(np.arange(m), k)            # pair p = (model_of[p], client_of[p])
    client_of = np.tile(np.arange(k), m)
    index = [parts[clients[j]] for j in client_of]
    n = torch.as_tensor(sizes, device=fed.device)
    if reduction == "batch_means":
        loss, correct = _batch_means(template, state, x, y, index, model_of, mean_batch, batch_size, chosen,
                                     max_pairs_per_chunk)
        return LossMatrix(loss.view(m, k), correct.view(m, k), n)
    correct, loss_sum = _eval_rows(template, state, x, y, index, batch_size, chosen, max_pairs_per_chunk, model_of)
    loss = loss_sum.view(m, k)
    if reduction == "mean":
        loss = loss / n.double()
    return LossMatrix(loss, correct.view(m, k), n)


_REDUCTIONS = ("mean", "sum", "batch_means")


def _batch_means(template, state, x, y, index, model_of, mean_batch, batch_size, chosen, max_rows_per_chunk):
    """(Σ of batch-mean losses (P,) float64, correct (P,) int64) of pair p — row
    ``model_of[p]`` on ``x[index[p]]`` cut into batches of ``mean_batch`` in stored order.

    Every batch is one row of :func:`_eval_rows` (its model row repeated), so all pairs'
    batches go through one batched evaluation; the per-batch means are added up on the host
    in batch order (``np.bincount``: sequential, the same bits on every device)."""
    pieces, pair_of = [], []
    for p, idx in enumerate(index):
        for start in range(0, len(idx), mean_batch):
            pieces.append(idx[start:start + mean_batch])
            pair_of.append(p)
    n_pairs = len(index)
    if not pieces:  # every split empty
        return (torch.zeros(n_pairs, dtype=torch.float64, device=x.device),
                torch.zeros(n_pairs, dtype=torch.int64, device=x.device))
    pair_of = np.asarray(pair_of, dtype=np.int64)
    correct, loss_sum = _eval_rows(template, state, x, y, pieces, batch_size, chosen, max_rows_per_chunk,
                                   np.asarray(model_of)[pair_of])
    means = loss_sum.cpu().numpy() / np.array([len(i) for i in pieces], dtype=np.float64)
    loss = np.bincount(pair_of, weights=means, minlength=n_pairs)
    counts = np.bincount(pair_of, weights=correct.cpu().numpy(), minlength=n_pairs)
    return (torch.as_tensor(loss, dtype=torch.float64, device=x.device),
            torch.as_tensor(counts, dtype=torch.int64, device=x.device))


def _n_rows(params: State) -> int:
    """M, the leading dimension of a stacked state."""
    if not isinstance(params, dict) or not params:
        raise ValueError(f"params must be a non-empty dict name -> (M, *shape) Tensor, got {type(params).__name__}")
    return int(next(iter(params.values())).shape[0])


def _channels_last(template: nn.Module, x: torch.Tensor) -> bool:
    """Whether the sequential evaluation runs ``template`` in channels-last memory: a model with
    2-D convolutions on image inputs on the CPU, where oneDNN's convolutions and torch's max
    pooling run faster so (forward passes over 4,000 images in batches of 140 on this project's
    CPU: the FMNIST CNN 0.130 → 0.065 s, LeNet-5 0.066 → 0.046 s, the CIFAR CNN 1.91 → 0.85 s).
    Its logits differ from channels-first ones in the last bits (≤ 1e-7 there) — as another
    CPU's kernels do — and the arg-max was the same for every image."""
    return x.device.type == "cpu" and x.dim() == 4 and any(isinstance(m, nn.Conv2d) for m in template.modules())


def _eval_sequential(template, state, x, y, index, batch_size, model_of=None):
    """Client after client: load its weights into ``template`` (unless they are loaded
    already: with ``model_of``, the clients of one model in a row), forward its samples.

    On the CPU the clients are split into chunks that W worker threads of T // W intra-op
    threads each evaluate side by side (:func:`fedlib.engine.workers.plan_workers`, IEEE
    subnormals kept, each worker with its own copy of the template): a client's counts are
    those of evaluating it alone at T // W threads, whichever worker takes it. Two
    threads splitting each small forward pass were slower than two forward passes side by
    side (docs/performance.md); ``max_workers(1)`` evaluates in the calling thread on all
    of torch's threads, as before.
    """
    m = len(index)
    correct = torch.zeros(m, dtype=torch.int64, device=x.device)
    loss_sum = torch.zeros(m, dtype=torch.float64, device=x.device)
    last = _channels_last(template, x)
    if last:
        template.to(memory_format=torch.channels_last)
    rows = np.arange(m) if model_of is None else model_of
    order = np.argsort(rows, kind="stable")  # a client's counts do not depend on the order
    plan = plan_workers(m) if x.device.type == "cpu" else None
    n_workers = plan[0] if plan else 1
    chunks = np.array_split(order, min(m, _EVAL_CHUNKS_PER_WORKER * n_workers)) if n_workers > 1 else [order]
    templates = [template] + [copy.deepcopy(template) for _ in range(n_workers - 1)]
    lives = [float_state(t) for t in templates]

    def job(w: int, j: int):
        with torch.no_grad():  # grad mode is per thread
            return _eval_clients(templates[w], lives[w], state, x, y, index, rows, chunks[j], batch_size, last)

    def collect(j: int, counts) -> None:
        rows_t = torch.as_tensor(chunks[j], device=x.device)
        correct[rows_t], loss_sum[rows_t] = counts

    with flush_subnormals(False):  # the calling thread's IEEE arithmetic, as before workers
        run_chunks(len(chunks), job, collect, workers=plan if n_workers > 1 else None, ordered=False)
    return correct, loss_sum


#: Chunks of clients per evaluation worker: enough that a worker done early takes another.
_EVAL_CHUNKS_PER_WORKER = 4


def _eval_clients(template, live, state, x, y, index, rows, clients, batch_size, last):
    """(correct, loss_sum), each (len(clients),), of client i (of ``clients``) with weights
    ``state``'s row ``rows[i]`` loaded into ``template`` (``live``: its float state)."""
    correct = torch.zeros(len(clients), dtype=torch.int64, device=x.device)
    loss_sum = torch.zeros(len(clients), dtype=torch.float64, device=x.device)
    loaded = -1
    for r, i in enumerate(clients):
        idx = index[i]
        if rows[i] != loaded:
            for name, tensor in live.items():
                tensor.copy_(state[name][rows[i]])
            loaded = rows[i]
        idx_t = torch.as_tensor(idx, device=x.device)
        for start in range(0, len(idx), batch_size):
            batch = idx_t[start:start + batch_size]
            xb = gather(x, batch)
            logits, labels = template(xb.contiguous(memory_format=torch.channels_last) if last else xb), gather(y, batch)
            correct[r] += (logits.argmax(1) == labels).sum()
            loss_sum[r] += F.cross_entropy(logits, labels, reduction="sum").double()
    return correct, loss_sum


def _eval_vectorised(template, state, x, y, index, batch_size, chunk, model_of=None):
    """Per-client (correct (M,), loss_sum (M,)) of M models run side by side (vmap) on the
    ragged rectangle of :func:`fedlib.engine.ragged.score_ragged`. Row i's weights are
    ``state``'s row ``model_of[i]`` (default i)."""
    weights_of = None if model_of is None else torch.as_tensor(model_of, device=x.device)
    forward = vmap(lambda p, xb: functional_call(template, p, (xb,)))

    def prepare(rows_t):
        sub = {n: t[rows_t if weights_of is None else weights_of[rows_t]] for n, t in state.items()}

        def score(k, xb, labels):  # xb (k, B, ...), labels (k, B) -> argmax (k, B), loss (k, B)
            logits = forward({n: t[:k] for n, t in sub.items()}, xb)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
            return logits.argmax(-1), loss.view_as(labels)
        return score

    return score_ragged(prepare, x, y, index, batch_size, chunk)


@torch.no_grad()
@exact
def predict_logits(model: nn.Module, params: State, x: torch.Tensor, batch_size: int = 256,
                   path: str = "auto", max_models_per_chunk: int | None = None) -> torch.Tensor:
    """Logits (M, N, n_classes) of M stacked models ``name -> (M, *shape)`` on x (N, *input_shape)."""

    check_int(batch_size, "batch_size", 1)
    template = copy.deepcopy(model).to(x.device).eval()
    m = next(iter(params.values())).shape[0]
    state = check_state(params, template, m, x.device)
    if resolve_path(path, template, x.device, training=False) == "sequential":
        out = []
        last = _channels_last(template, x)
        if last:  # as _eval_sequential
            template.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        live = float_state(template)
        for i in range(m):
            for name, tensor in live.items():
                tensor.copy_(state[name][i])
            out.append(torch.cat([template(x[s:s + batch_size]) for s in range(0, len(x), batch_size)]))
        return torch.stack(out)
    forward = vmap(lambda p, xb: functional_call(template, p, (xb,)), in_dims=(0, None))
    chunk = clients_per_chunk(template, x[:1], batch_size, False, max_models_per_chunk)
    return torch.cat([
        torch.cat([forward({n: t[r:r + chunk] for n, t in state.items()}, x[s:s + batch_size])
                   for s in range(0, len(x), batch_size)], dim=1)
        for r in range(0, m, chunk)
    ])
