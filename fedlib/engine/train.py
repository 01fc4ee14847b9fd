"""Local training of many clients at once: ``local_train``.

Each selected client starts from its own row of a stacked state, runs exactly E epochs
of mini-batch Adam (or SGD, :mod:`fedlib.engine.optim`) over exactly its own train split
and returns its new row. Two paths compute the same mathematics:

``sequential``
    one client after another on the model itself, ``torch.optim.Adam`` (or ``SGD``);
``vectorised``
    all clients of a chunk in one step: a ``torch.func.vmap``-ed ``functional_call``
    forward over the stacked weights, one backward pass of the summed client losses
    (clients share no weights, so the gradient of Σ_i L_i with respect to the stacked
    weights is exactly the stack of the per-client gradients ∇L_i), and a hand-written
    per-client Adam (or SGD) that reproduces ``torch.optim``'s update formula.

Dense stacks (logistic regression, MLPs) take a hand-written batched forward/backward
instead of vmap + autograd (:mod:`fedlib.engine.dense`) in a step loop trimmed to about
twenty tensor calls: same gradient, less overhead. Under label skew most steps train only
the few largest clients, so there the fixed cost per tensor call (~2 µs on CPU, about the
same under TorchScript), not arithmetic, sets the engine's time. Conv stacks (the FMNIST
CNN, LeNet-5, the small CNN) take the same loop with :mod:`fedlib.engine.conv`'s kernel:
one grouped, channels-last convolution per layer for the whole chunk, the dense head on
the dense kernel. On CPU the dense kernel runs a large layer (≥ 65,536 weights: the FMNIST
CNN's 288 → 2,048, the paper MLP's 500 → 500) as one oneDNN product per client instead of a
``bmm``, which MKL computes with AVX2 code on AMD CPUs (:mod:`fedlib.engine.dense`).

On CPU, the conv kernel's chunks — and the dense kernel's, when it has such a layer — train
on worker threads (:mod:`fedlib.engine.workers`; the rule is
:func:`fedlib.engine.paths.chunk_workers`): side by side, one per thread of torch's
thread count, each on its share of the threads (their kernels are too small for torch's
intra-op parallelism to keep two cores busy), and with subnormal floats flushed to zero, as
TensorFlow's CPU threads do (subnormal arithmetic made the FMNIST CNN's paper protocol at
S = 0 about three times as slow). A chunk's numbers are then those of its kernels on its worker's
threads, whichever worker trains it.

Ragged clients in the vectorised path: clients are sorted by their number of steps, so
at step ``s`` the clients that still have a batch form a prefix of the chunk; only that
prefix is computed and updated. A client past its last step is masked out completely —
weights, both Adam moments and its step count stay as they are — and, since every
active client has then taken exactly ``s`` earlier steps, Adam's bias correction uses
the shared step number ``s + 1`` (``t_0 + s + 1`` for clients resuming from a given
``opt_state`` with t_0 earlier steps; a per-row t when their t_0 differ). A partial
batch (the last of an epoch) carries per-sample weights 1/count on its real samples and
0 on the padding, i.e. the batch loss is the mean over its real samples, exactly as with
``drop_last=False``.

Extra loss terms: a proximal pull (μ_i/2)‖w_i − c_i‖² (added to the gradient) and
FedProto's embedding pull (:class:`~fedlib.engine.optim.EmbeddingPull`, added to the
loss; on the vectorised path it always takes the vmap + autograd kernel, forward through
:func:`fedlib.models.body` then :func:`fedlib.models.head`). ``mean_loss`` excludes both.
"""
from __future__ import annotations

import contextlib
import copy
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from ..models import body, float_state, head, head_prefix
from .conv import ConvStack, conv_stack
from .dense import DenseStack, dense_stack
from .federation import Federation, gather
from .optim import (SGD, Adam, AdamState, EmbeddingPull, SGDState, StackedOptimizer, check_embedding_pull,
                    check_opt_state, check_optimizer, clone_state, fresh_state, pull_terms, put_rows)
from .params import copy_rows_
from .paths import chunk_workers, clients_per_chunk, resolve_path
from .schedule import BatchPlan, batch_plans, client_torch_seed
from .workers import run_chunks
from .errors import DivergenceError
from .host import to_host
from ._validation import check_int, check_state
from .precision import exact

__all__ = ["TrainResult", "local_train", "DivergenceError"]

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class TrainResult:
    """What ``local_train`` returns for M selected clients (rows in the order given).

    Attributes
    ----------
    params : dict of str to Tensor, or None
        ``name -> (M, *shape)``: every float parameter and buffer after training; None
        when ``local_train`` handed each chunk to a ``sink`` instead.
    n_samples : Tensor, shape (M,), int64
        Train samples per client (FedAvg's weights).
    mean_loss : Tensor, shape (M,), float64
        Sample-weighted mean training loss of the final local epoch (Keras's
        ``history['loss'][-1]``), without the proximal term; NaN for empty clients.
    path : str
        ``'sequential'`` or ``'vectorised'``.
    opt_state : AdamState or SGDState or None
        Each client's optimiser state after training (see :mod:`fedlib.engine.optim`),
        to pass back as ``opt_state`` next time; None unless ``opt_state`` was given or
        ``return_opt_state=True``.
    """

    params: State | None
    n_samples: torch.Tensor
    mean_loss: torch.Tensor
    path: str
    opt_state: AdamState | SGDState | None = None


@dataclass(frozen=True)
class _Prox:
    """Proximal pull (μ_i / 2)·‖w_i − c_i‖² on the trainable weights."""

    mu: torch.Tensor  # (M,)
    center: State     # trainable name -> (M, *shape)


_ADAM_DEFAULTS = (1e-3, (0.9, 0.999), 1e-7)  # local_train's lr, betas, eps


@exact
def local_train(model: nn.Module, params: State, fed: Federation, clients, *, epochs: int, seed,
                batch_size: int = 32, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                eps: float = 1e-7, round_idx: int = 0, prox_center: State | None = None,
                prox_mu=0.0, path: str = "auto", max_clients_per_chunk: int | None = None,
                optimizer: Adam | SGD | None = None, opt_state: AdamState | SGDState | None = None,
                return_opt_state: bool = False, embedding_pull: EmbeddingPull | None = None,
                shuffle: bool = True, out: State | None = None,
                sink: Callable[[np.ndarray, State], None] | None = None, seed_clients=None) -> TrainResult:
    """Train M clients locally, each from its own row of ``params``.

    Parameters
    ----------
    model : nn.Module
        Architecture template (its own weights are ignored and left untouched).
    params : dict of str to Tensor
        Stacked state ``name -> (M, *shape)`` with every float parameter and buffer of
        ``model`` (as :func:`fedlib.models.init_params` + :func:`broadcast` give).
    fed : Federation
    clients : sequence of int, length M
        Client ids; row ``i`` of ``params`` belongs to ``clients[i]``.
    epochs : int
        Local epochs E ≥ 1 over the client's whole train split.
    seed : int, or int array-like of shape (M,)
        Experiment seed. Client ``k``'s shuffles come from (seed, round_idx, k, epoch),
        its dropout masks from (seed, round_idx, k), so results do not depend on the
        path or on which other clients are trained in the same call. One seed per row
        (with ``seed_clients``): rows of several runs in one call (:mod:`fedlib.together`),
        row i's batches and masks those of its own run, (seed[i], round_idx, seed_clients[i]).
    batch_size : int, default 32
        The last partial batch of each epoch is kept (loss = mean over its samples).
    lr, betas, eps : Adam hyperparameters
        The default optimiser, ``Adam(lr, betas, eps)``, used when ``optimizer`` is None.
        ``eps`` defaults to Keras's 1e-7 (the authors trained in Keras; torch's default
        is 1e-8). Update formula as ``torch.optim.Adam``: ε is added to √v̂.
    round_idx : int, default 0
    prox_center : dict of str to Tensor, optional
        ``name -> (M, *shape)`` for (at least) the trainable parameters: c_i.
    prox_mu : float or array-like of shape (M,), default 0
        Adds (μ_i / 2)·‖w_i − c_i‖² to client i's loss: FedProx (c = global model),
        FedAMP (c = personalised cloud model, μ = λ/α) and FedSoft
        (Σ_s u_s‖w − c_s‖² = (Σ_s u_s)‖w − c̄‖² + const, so μ = λΣu, c = u-weighted mean).
    path : {'auto', 'sequential', 'vectorised'}
        See :mod:`fedlib.engine.paths` for what ``'auto'`` picks.
    max_clients_per_chunk : int, optional
        Vectorised path: clients per step (default: estimated from free memory). A memory
        knob, but not free of numerics: batched kernels may round a client's sums differently
        at another chunk size (measured: 1.5e-8 on the FMNIST CNN, 2e-10 on the MLP), so fix
        it, or leave the default on the same hardware, where results must match bit for bit.
        So may another thread count (torch's: ``torch.set_num_threads``) — except for conv
        stacks on CPU with at least as many chunks as threads, whose chunks then each train
        on one thread (:mod:`fedlib.engine.workers`; ``with fedlib.engine.without_workers():``
        trains them as before workers existed, one at a time on all the threads, keeping
        subnormals).
    optimizer : Adam or SGD, optional
        The client optimiser (:mod:`fedlib.engine.optim`); None: ``Adam(lr, betas, eps)``.
        Giving it together with a non-default ``lr``, ``betas`` or ``eps`` is an error.
    opt_state : AdamState or SGDState, optional
        Each client's optimiser state to continue from (rows as ``clients``; e.g. a
        previous call's ``TrainResult.opt_state``, or ``.take(rows)`` of a state kept for
        all clients). None: a fresh optimiser per client (zero moments, step 0).
    return_opt_state : bool, default False
        Return the state after training in ``TrainResult.opt_state``. It is returned
        whenever ``opt_state`` is given; otherwise only on request, so that plain calls
        neither gather nor copy it.
    embedding_pull : EmbeddingPull, optional
        Adds FedProto's λ_i · mean_{j ∈ S} ‖body(x_j) − p_{i, y_j}‖² to client i's batch
        loss (see :mod:`fedlib.engine.optim`; needs a model of
        :func:`fedlib.models.build_model`, an ``nn.Sequential`` ending in its
        classifier). The vectorised path then always uses its vmap + autograd kernel.
        A weight of 0 everywhere is the same as None.
    shuffle : bool, default True
        Reshuffle each client's samples every epoch (seeded as above); False walks them in
        their stored order every epoch (the PSI papers' FedLab baselines).
    out : dict of str to Tensor, optional
        Tensors to write the trained rows into (``TrainResult.params`` is then ``out``):
        ``name -> (M, *shape)`` as ``params``, contiguous float32 on the data's device,
        sharing no memory with ``params`` — typically the previous round's
        ``TrainResult.params`` once nothing reads them any more. Memory written for the first
        time is paged in by the kernel (measured here ≈ 4.5 GB/s against ≈ 25–50 GB/s for
        memory already in use), and a round's result is every client's model: 1.2 GB for
        500 FMNIST CNN clients, paged in anew every round without ``out`` (FedAvg passes
        its previous round's result: ``benchmarks/scaling.py`` prints the page faults per
        round). The values are the same with or without.
    sink : callable, optional
        ``sink(rows, trained)``, called once per chunk (sequential path: per client) as soon
        as it has trained: ``rows`` (m,) int64 positions in ``clients``, ``trained`` ``name ->
        (m, *shape)`` their weights — memory the next chunk overwrites, so read it before
        returning. Every row is handed over exactly once, with the values ``params`` would
        hold; ``TrainResult.params`` is then None and no tensor holds every client's model
        (what a streamed FedAvg needs: ``FLConfig.stream_average``). Not with ``out``.
    seed_clients : int array-like of shape (M,), optional
        The client id each row's batch order and dropout masks are seeded with (default:
        ``clients``). A federation that merges several runs' clients (client k of run r is
        row ``offset_r + k`` of :meth:`Federation.concat`) trains row i on its data and seeds
        it as client ``seed_clients[i]`` of its run.

    Returns
    -------
    TrainResult

    Raises
    ------
    DivergenceError
        When some clients' weights (parameters or float buffers) or last-epoch loss are NaN
        or ±inf after training (typically lr too large). It names every such client, the
        round (``round_idx``) and the optimiser's lr. Every client trains to the end
        first, so both paths name the same clients. The check costs one sum per tensor
        per chunk (vectorised) or per client (sequential) and one host sync; the exact
        per-client search runs only when a sum is not finite (:func:`_nonfinite_rows`).
    """
    clients = fed.check_clients(clients)
    check_int(epochs, "epochs", 1)
    check_int(batch_size, "batch_size", 1)
    seed, ids = _check_seeds(seed, seed_clients, clients)
    check_int(round_idx, "round_idx", 0)
    opt = check_optimizer(optimizer, lr, betas, eps, _ADAM_DEFAULTS)
    if not isinstance(return_opt_state, (bool, np.bool_)):
        raise ValueError(f"return_opt_state must be a bool, got {return_opt_state!r}")
    if not isinstance(shuffle, (bool, np.bool_)):
        raise ValueError(f"shuffle must be a bool, got {shuffle!r}")
    chosen = resolve_path(path, model, fed.device, training=True)
    if embedding_pull is not None:
        head(model)  # raises unless model is an nn.Sequential ending in its classifier
    template = _template(model, fed.device, chosen, embedding_pull is not None)
    state = check_state(params, template, len(clients), fed.device)
    out = _check_out(out, state, params)
    if sink is not None and (out is not None or not callable(sink)):
        raise ValueError(f"sink must be a callable (rows, trained) and out None, got sink={sink!r} with out "
                         f"{'given' if out is not None else 'None'}; pass one of them")
    names = [n for n, _ in template.named_parameters()]
    prox = _check_prox(prox_center, prox_mu, names, state, len(clients), fed.device)
    start_opt = check_opt_state(opt_state, opt, names, state, len(clients), fed.device)
    pull = None if embedding_pull is None else check_embedding_pull(
        embedding_pull, len(clients), fed.n_classes, head(template).in_features, fed.device)
    want_opt = bool(return_opt_state) or opt_state is not None
    if chosen == "sequential":
        plans = batch_plans([fed.train_parts[c] for c in clients], epochs, batch_size, seed, round_idx, ids,
                            bool(shuffle))
        new_state, loss_sum, new_opt, bad = _train_sequential(template, state, fed, clients, plans, opt, prox,
                                                              seed, round_idx, start_opt, want_opt, pull, out, sink,
                                                              ids)
    else:  # the same batches, as positions within each client's own split
        plans = batch_plans(fed.n_train[clients], epochs, batch_size, seed, round_idx, ids, bool(shuffle))
        chunk = clients_per_chunk(template, fed.x[:1], batch_size, True, max_clients_per_chunk,
                                  autograd=pull is not None, clients=len(clients))
        new_state, loss_sum, new_opt, bad = _train_vectorised(template, names, state, fed, clients, plans,
                                                              opt, prox, chunk, start_opt, want_opt, pull, out, sink)
    if bad:
        raise _divergence(clients, bad, round_idx, opt)
    n = torch.as_tensor(fed.n_train[clients], device=fed.device)
    mean_loss = torch.where(n > 0, loss_sum / n.clamp(min=1), torch.full_like(loss_sum, float("nan")))
    return TrainResult(new_state, n, mean_loss, chosen, new_opt)


def _check_seeds(seed, seed_clients, clients: np.ndarray) -> tuple[int | np.ndarray, np.ndarray]:
    """(seed: an int, or an (M,) int64 array; the (M,) client ids the schedule is seeded with)."""
    if seed_clients is None:
        ids = clients
    else:
        ids = np.asarray(seed_clients)
        if ids.shape != clients.shape or (ids.size and not np.issubdtype(ids.dtype, np.integer)) \
                or (ids.size and ids.min() < 0):
            raise ValueError(f"seed_clients must be {len(clients)} non-negative integer client ids (one per row), "
                             f"got {seed_clients!r}")
        ids = ids.astype(np.int64)
    if np.ndim(seed) == 0:
        check_int(seed, "seed", 0)
        return seed, ids
    seeds = np.asarray(seed)
    if seeds.shape != clients.shape or not np.issubdtype(seeds.dtype, np.integer) or seeds.min() < 0:
        raise ValueError(f"seed must be an int ≥ 0 or {len(clients)} of them (one per row), got {seed!r}")
    return seeds.astype(np.int64), ids


def _template(model: nn.Module, device: torch.device, path: str, needs_autograd: bool = False) -> nn.Module:
    """A training-mode copy of ``model`` on ``device`` (the caller's model is never changed).

    The vectorised kernel of a dense stack reads only the layer structure, so such a
    model already on ``device`` is used as it is (a deep copy per call is measurable
    against a few-millisecond logistic round) — unless ``needs_autograd`` sends it
    through the vmap + autograd kernel.
    """
    on_device = all(t.device == device for t in model.state_dict().values())
    if path == "vectorised" and on_device and not needs_autograd and dense_stack(model) is not None:
        return model
    return copy.deepcopy(model).to(device).train()


# ----------------------------------------------------------------------------- sequential path
def _train_sequential(template: nn.Module, state: State, fed: Federation, clients: np.ndarray,
                      plans: list[BatchPlan], opt: Adam | SGD, prox: _Prox | None, seed: int,
                      round_idx: int, opt_state: AdamState | SGDState | None, want_opt: bool,
                      pull: EmbeddingPull | None, out: State | None = None,
                      sink: Callable[[np.ndarray, State], None] | None = None, ids: np.ndarray | None = None
                      ) -> tuple[State | None, torch.Tensor, AdamState | SGDState | None, dict[int, str]]:
    """Client after client: load row i into ``template``, train it, write it back (into
    ``out`` when given, else into a copy of ``state``) or hand it to ``sink``.

    With ``opt_state`` each client's row is loaded into its ``torch.optim`` optimiser's
    state dict before training; with ``want_opt`` the optimiser's state is read back.
    The last value returned maps the rows whose weights or loss became non-finite to what
    did (:func:`_nonfinite_rows`); empty when training stayed finite.
    """
    bad: dict[int, str] = {}
    if sink is None:
        out = {k: v.clone() for k, v in state.items()} if out is None else {k: out[k].copy_(v) for k, v in state.items()}
    source = state if sink is not None else out
    loss_sum = torch.zeros(len(clients), dtype=torch.float64, device=fed.device)
    live = float_state(template)
    named_weights = list(template.named_parameters())
    weights = [w for _, w in named_weights]
    names = [n for n, _ in named_weights]
    new_opt = None
    if want_opt:
        new_opt = clone_state(opt_state) if opt_state is not None else fresh_state(opt, state, names)
    ids = clients if ids is None else ids
    for i, (client, plan) in enumerate(zip(ids, plans)):
        with torch.no_grad():
            for name, tensor in live.items():
                tensor.copy_(source[name][i])
        optimizer = _torch_optimizer(opt, weights)
        if opt_state is not None:
            optimizer.load_state_dict(_client_state_dict(optimizer, opt_state, names, i))
        pull_mu = [prox.center[n][i] for n, _ in named_weights] if prox is not None else None
        mu = float(prox.mu[i]) if prox is not None else 0.0
        loss_fn = _sequential_loss(template, pull, i)
        index = torch.as_tensor(plan.index, device=fed.device)
        row_seed = int(seed) if np.ndim(seed) == 0 else int(seed[i])
        with _seeded_rng(client_torch_seed(row_seed, round_idx, int(client)), fed.device):
            for s, count in enumerate(plan.count.tolist()):
                batch = index[s, :count]
                optimizer.zero_grad()
                loss, total = loss_fn(gather(fed.x, batch), gather(fed.y, batch))
                total.backward()
                if mu:
                    for w, c in zip(weights, pull_mu):
                        w.grad.add_(w.detach() - c, alpha=mu)
                optimizer.step()
                if plan.last_epoch[s]:
                    loss_sum[i] += loss.detach().double() * count
        with torch.no_grad():
            trained = {name: tensor.unsqueeze(0) for name, tensor in live.items()}
            for row, what in _nonfinite_rows(list(trained.values()), loss_sum[i:i + 1]).items():
                bad[i + row] = what
            if sink is None:
                for name, tensor in trained.items():
                    out[name][i].copy_(tensor[0])
            else:
                sink(np.array([i], dtype=np.int64), trained)
        if want_opt:
            new_opt = _read_client_state(optimizer, weights, names, new_opt, i)
    return (out if sink is None else None), loss_sum, new_opt, bad


def _sequential_loss(template: nn.Module, pull: EmbeddingPull | None, i: int):
    """``f(x (B, ...), y (B,)) -> (cross-entropy, loss to differentiate)`` for client row i."""
    if pull is None or not pull.weight[i]:
        def plain(x, y):
            loss = F.cross_entropy(template(x), y)
            return loss, loss
        return plain
    features, classifier = body(template), head(template)
    weight, prototypes, mask = float(pull.weight[i]), pull.prototypes[i], pull.mask[i]

    def with_pull(x, y):
        embedding = features(x)
        loss = F.cross_entropy(classifier(embedding), y)
        selected = mask[y]
        if not selected.any():
            return loss, loss
        distance = ((embedding[selected] - prototypes[y[selected]]) ** 2).sum(1)  # squared L2 per sample
        return loss, loss + weight * distance.mean()
    return with_pull


def _torch_optimizer(opt: Adam | SGD, weights: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimiser whose update the vectorised path reproduces."""
    if isinstance(opt, Adam):
        return torch.optim.Adam(weights, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                                fused=True)
    return torch.optim.SGD(weights, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay,
                           nesterov=opt.nesterov, foreach=True)


def _client_state_dict(optimizer: torch.optim.Optimizer, opt_state: AdamState | SGDState, names: list[str],
                       i: int) -> dict:
    """``optimizer.state_dict()`` with row i of ``opt_state`` as its per-parameter state."""
    packed = optimizer.state_dict()
    if isinstance(opt_state, AdamState):
        step = float(opt_state.step[i])
        packed["state"] = {k: {"step": torch.tensor(step, dtype=torch.float32),
                               "exp_avg": opt_state.exp_avg[n][i].clone(),
                               "exp_avg_sq": opt_state.exp_avg_sq[n][i].clone()} for k, n in enumerate(names)}
    elif opt_state.has_buffer[i] and optimizer.defaults["momentum"]:
        packed["state"] = {k: {"momentum_buffer": opt_state.momentum_buffer[n][i].clone()}
                           for k, n in enumerate(names)}
    return packed


def _read_client_state(optimizer: torch.optim.Optimizer, weights: list[torch.Tensor], names: list[str],
                       stacked: AdamState | SGDState, i: int) -> AdamState | SGDState:
    """``stacked`` with row i set from ``optimizer``'s state (in place; returned for chaining).

    A parameter without state (no step taken, nothing loaded) leaves its row as it is.
    """
    with torch.no_grad():
        for n, w in zip(names, weights):
            st = optimizer.state.get(w, {})
            if isinstance(stacked, AdamState) and st:
                stacked.exp_avg[n][i].copy_(st["exp_avg"])
                stacked.exp_avg_sq[n][i].copy_(st["exp_avg_sq"])
                stacked.step[i] = int(st["step"])
            elif isinstance(stacked, SGDState) and st.get("momentum_buffer") is not None:
                if not stacked.momentum_buffer:
                    stacked = SGDState({k: w2.detach().new_zeros(len(stacked.has_buffer), *w2.shape)
                                        for k, w2 in zip(names, weights)}, stacked.has_buffer)
                stacked.momentum_buffer[n][i].copy_(st["momentum_buffer"])
                stacked.has_buffer[i] = True
    return stacked


@contextlib.contextmanager
def _seeded_rng(seed: int, device: torch.device):
    """Run a block with the generator that draws on ``device`` seeded by ``seed`` (the CPU's,
    and on CUDA also that device's), restoring them afterwards.

    ``torch.manual_seed`` would do the same on the CPU, but it also queues a lazy seeding of
    every CUDA/XPU/MTIA device and records a stack trace for each (≈ 0.5 ms a call: a tenth
    of a CNN client's round at K = 1,000 on the sequential path, which seeds once per client).
    """
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.random.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


# ----------------------------------------------------------------------------- vectorised path
def _train_vectorised(template: nn.Module, names: list[str], state: State, fed: Federation,
                      clients: np.ndarray, plans: list[BatchPlan], opt: Adam | SGD, prox: _Prox | None,
                      chunk: int, opt_state: AdamState | SGDState | None, want_opt: bool,
                      pull: EmbeddingPull | None, out: State | None = None,
                      sink: Callable[[np.ndarray, State], None] | None = None
                      ) -> tuple[State | None, torch.Tensor, AdamState | SGDState | None, dict[int, str]]:
    """All clients of a chunk per step; clients sorted by step count (see module docstring).

    ``plans`` index positions within each client's own train split (``batch_plan`` of
    ``arange(n)``: the same batches as over the pooled indices); each chunk first copies
    its clients' samples into one contiguous block, so the steps gather from a few
    megabytes that stay in cache rather than from the whole pooled data set. The last value
    returned maps the rows whose weights or loss became non-finite to what did (checked once
    per chunk, :func:`_nonfinite_rows`); empty when training stayed finite.
    """
    bad: dict[int, str] = {}
    if sink is None:
        if out is None:
            out = {k: torch.empty_like(v, memory_format=torch.contiguous_format) for k, v in state.items()}
        out = {k: out[k] for k in state}  # the chunks write every row
    loss_sum = torch.zeros(len(plans), dtype=torch.float64, device=fed.device)
    new_opt = None  # one copy of the incoming state, whose rows each chunk then overwrites
    if want_opt:
        new_opt = clone_state(opt_state) if opt_state is not None else fresh_state(opt, state, names)
    stack = _kernel(template) if pull is None else None
    loss_and_grads = _loss_and_grads_fn(template, names, pull is not None) if stack is None else None
    n_steps = np.array([len(p.count) for p in plans], dtype=np.int64)  # BatchPlan.n_steps, without a call per client
    order = np.argsort(-n_steps, kind="stable")
    starts = range(0, len(order), chunk)
    workers = chunk_workers(template, fed.device, len(starts)) if stack is not None else None
    spaces = [] if stack is None else _Workspace.take(state, list(stack.param_names), opt, min(chunk, len(order)),
                                                      1 if workers is None else workers[0])

    def job(w: int, j: int):
        chunk_rows = order[starts[j]:starts[j] + chunk]
        rows = torch.as_tensor(chunk_rows, device=fed.device)
        work = spaces[w] if spaces else None
        into = None  # consecutive rows train in ``out`` itself: nothing to copy back
        if work is not None and sink is None and _consecutive(chunk_rows):
            into = {n: t[int(chunk_rows[0]):int(chunk_rows[0]) + len(chunk_rows)] for n, t in out.items()}
        sub = {n: t[rows] for n, t in state.items()} if work is None else work.gather(state, rows, into)
        chunk_plans = [plans[r] for r in chunk_rows.tolist()]
        batches = _Batches.stack(fed, clients[chunk_rows], chunk_plans, n_steps[chunk_rows])
        stepper = StackedOptimizer(opt, list(stack.param_names) if stack is not None else names, sub,
                                   None if opt_state is None else opt_state.take(rows.cpu()), n_steps[chunk_rows],
                                   None if work is None else work.opt_rows(len(rows)), keep_state=want_opt)
        if stack is not None:
            step_loss = _train_chunk_dense(stack, sub, batches, stepper, _rows(prox, rows),
                                           None if work is None else work.grads)
        else:
            step_loss = _train_chunk(loss_and_grads, names, sub, batches, stepper, _rows(prox, rows),
                                     _pull_rows(pull, rows))
        losses = (step_loss.T.double() * batches.stat).sum(1)
        return chunk_rows, rows, sub, losses, _nonfinite_rows(list(sub.values()), losses), stepper, into is not None

    def collect(_j: int, done) -> None:
        nonlocal new_opt
        chunk_rows, rows, sub, losses, chunk_bad, stepper, in_place = done
        loss_sum[rows] = losses
        for row, what in chunk_bad.items():
            bad[int(chunk_rows[row])] = what
        if sink is None:
            if not in_place:
                for name, tensor in sub.items():
                    copy_rows_(out[name], chunk_rows, tensor)
        else:
            sink(chunk_rows.astype(np.int64), sub)
        if want_opt:
            new_opt = put_rows(new_opt, rows.cpu(), stepper.final_state())

    try:
        run_chunks(len(starts), job, collect, workers, ordered=sink is not None)  # a sink sums in chunk order
    finally:
        _Workspace.keep(spaces)
    return out, loss_sum, new_opt, dict(sorted(bad.items()))


@dataclass(frozen=True)
class _Workspace:
    """The hand-written kernels' per-chunk tensors, allocated for the largest chunk and reused
    (their first m rows) by every chunk and step — and by the next call of the same shapes
    (:meth:`keep`, :meth:`take`: each is used by one chunk at a time): the chunk's weights,
    the gradients and the optimiser's state, instead of new tensors per chunk and step (a
    2,048 × 288 layer is 2.4 MB a client). Measured on the FMNIST CNN (K = 100, torch
    profiler, one round): the head's weight-gradient product 0.97 → 0.56 ms and zeroing
    Adam's moments 0.48 → 0.12 ms a chunk, writing into memory that is already in cache.
    The values are the same: the same kernels write into other memory.

    A chunk whose rows are consecutive (equal client sizes sort into runs of consecutive
    rows) trains in those rows of the result instead of :attr:`params`, which saves copying
    its weights back: at K = 1,000 FMNIST CNN clients that copy was 1.2 GB a round (FedAvg at
    S = 1 as ``benchmarks/scaling.py`` runs it, chunks of 2, 2 threads, rounds 2–5 of one run:
    1,125–1,191 → 1,067–1,083 ms a round).

    Attributes
    ----------
    params : dict of str to Tensor
        name -> (m_max, *shape): the chunk's state rows (chunks of scattered rows).
    grads : list of Tensor
        (m_max, *shape) per trained parameter, in the kernel's ``param_names`` order.
    opt : AdamState or SGDState
        The optimiser's state for m_max clients.
    key : tuple
        :func:`_workspace_key`: which calls can reuse it.
    """

    params: State
    grads: list[torch.Tensor]
    opt: AdamState | SGDState
    key: tuple

    @staticmethod
    def allocate(state: State, names: list[str], opt: Adam | SGD, m: int) -> "_Workspace":
        params = {n: torch.empty((m, *t.shape[1:]), dtype=t.dtype, device=t.device) for n, t in state.items()}
        return _Workspace(params, [torch.empty_like(params[n]) for n in names], fresh_state(opt, params, names),
                          _workspace_key(state, names, opt, m))

    @staticmethod
    def take(state: State, names: list[str], opt: Adam | SGD, m: int, count: int) -> list["_Workspace"]:
        """``count`` workspaces for chunks of up to m clients: those the last call of the same
        shapes left behind (:meth:`keep`), else new ones (:meth:`allocate`)."""
        key = _workspace_key(state, names, opt, m)
        with _KEPT_LOCK:
            reused = [w for w in _KEPT if w.key == key][:count]
            _KEPT[:] = [w for w in _KEPT if all(w is not r for r in reused)]
        return reused + [_Workspace.allocate(state, names, opt, m) for _ in range(count - len(reused))]

    @staticmethod
    def keep(spaces: list["_Workspace"]) -> None:
        """Keep a finished call's workspaces for the next call of the same shapes (only the
        last call's: kept ones of other shapes are let go). A new workspace is memory written
        for the first time, which the kernel pages in on every call (≈ 4.5 GB/s on this
        project's VM): 127–171 MB a round at K = 1,000 FMNIST CNN clients in chunks of 12
        (``benchmarks/scaling.py``'s ``paged_in``)."""
        if spaces:
            with _KEPT_LOCK:
                _KEPT[:] = [w for w in _KEPT if w.key == spaces[0].key] + list(spaces)

    def gather(self, state: State, rows: torch.Tensor, into: State | None = None) -> State:
        """``{name: state[name][rows]}`` in the first ``len(rows)`` rows of :attr:`params`, or in
        ``into`` (``name -> (len(rows), *shape)`` contiguous tensors) when given."""
        dst = into if into is not None else {n: p[:len(rows)] for n, p in self.params.items()}
        return {n: torch.index_select(t, 0, rows, out=dst[n]) for n, t in state.items()}

    def opt_rows(self, m: int) -> AdamState | SGDState:
        """The first m rows of :attr:`opt`."""
        if isinstance(self.opt, AdamState):
            return AdamState({n: t[:m] for n, t in self.opt.exp_avg.items()},
                             {n: t[:m] for n, t in self.opt.exp_avg_sq.items()}, self.opt.step[:m])
        return SGDState({n: t[:m] for n, t in self.opt.momentum_buffer.items()}, self.opt.has_buffer[:m])


@dataclass
class _Batches:
    """One chunk's mini-batches, step-major, with per-step views for the hot loop.

    ``x``: the chunk's clients' train samples, contiguous, (n, *input) — or, when every client
    of the chunk takes one step, the federation's pooled samples themselves if contiguous (a copy would be
    read once: one step of 500 logistic-regression clients of 26 samples copied 13,000 rows,
    0.5 ms of a 4 ms round); ``index`` then holds pooled rows. For step s (S steps) and the ``active[s]`` clients still training at s (a prefix,
    since clients are sorted by decreasing step count): ``index[s]`` (m, B) rows of
    ``x``, ``target[s]`` (m, 1, B) labels, ``weight[s]`` (m, 1, B) per-sample loss
    weights (1/count on real samples, 0 on padding), ``width[s]`` the batch columns that
    hold some active client's real sample, rounded up to a multiple of :data:`_WIDTH_STEP`
    (the hand-written kernels compute only those), and ``last[s]`` whether s is in
    some client's last epoch (the optimiser's step numbers live in
    :class:`~fedlib.engine.optim.StackedOptimizer`). ``stat``:
    (m, S) float64 sample counts of the last-epoch steps (0 elsewhere).
    """

    x: torch.Tensor
    n_clients: int
    batch_size: int
    active: list[int]
    width: list[int]
    index: list[torch.Tensor]
    target: list[torch.Tensor]
    weight: list[torch.Tensor]
    last: list[bool]
    stat: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        """(S steps, m clients, B batch size)."""
        return len(self.active), self.n_clients, self.batch_size

    @staticmethod
    def stack(fed: Federation, clients: np.ndarray, plans: list[BatchPlan], steps: np.ndarray) -> "_Batches":
        """Pad the chunk's plans (sorted by decreasing length, in client-local positions;
        ``steps`` their step counts) to the longest and cut the per-step views."""
        device = fed.device
        sizes = fed.n_train[clients]
        offsets = np.cumsum(sizes) - sizes
        pooled = fed.train_rows_of(clients)  # the chunk's samples' rows of the pooled data
        m, s_max, b = len(plans), plans[0].n_steps, plans[0].index.shape[1]
        index = np.zeros((s_max, m, b), dtype=np.int64)
        count = np.zeros((s_max, m), dtype=np.int64)
        last = np.zeros((s_max, m), dtype=bool)
        for lo, hi in _runs(steps):  # clients of one step count (contiguous: sorted) in one assignment each
            n, run = int(steps[lo]), plans[lo:hi]
            index[:n, lo:hi] = np.array([p.index for p in run]).transpose(1, 0, 2) + offsets[None, lo:hi, None]
            for dst, field in ((count, "count"), (last, "last_epoch")):  # shared by plans of one size
                first = getattr(run[0], field)
                same = all(getattr(p, field) is first for p in run)
                dst[:n, lo:hi] = first[:, None] if same else np.stack([getattr(p, field) for p in run], axis=1)
        per_step = count.astype(np.float32)[..., None]
        weight = (np.arange(b, dtype=np.float32) < per_step) / np.maximum(per_step, 1)  # 1/count, 0 on padding
        active = (steps[None, :] > np.arange(s_max)[:, None]).sum(1).tolist()
        if s_max == 1 and fed.x.is_contiguous():  # one step: index the pooled samples directly
            x, y, index = fed.x, fed.y, pooled[index]
        else:  # copy the chunk's samples into one block that the steps index
            rows = torch.as_tensor(pooled, device=device)
            x, y = fed.x.index_select(0, rows), fed.y.index_select(0, rows)
        index_t = torch.as_tensor(index, device=device)
        target = gather(y, index_t).unsqueeze(2)
        weight_t = torch.as_tensor(weight, device=device).unsqueeze(2)
        width = np.minimum(b, -(-count.max(1) // _WIDTH_STEP) * _WIDTH_STEP).tolist()
        return _Batches(x, m, b, active, width, _prefixes(index_t, active), _prefixes(target, active),
                        _prefixes(weight_t, active), last.any(1).tolist(),
                        torch.as_tensor(np.where(last, count, 0).T.astype(np.float64), device=device))


_WIDTH_STEP = 16
"""Batch columns are trimmed in multiples of this. Padding has weight 0, so its samples add
exact zeros to every gradient and loss; the kernels block the batch dimension in 16s (an
AVX-512 register of floats, two AVX2 ones), so a width that stays a multiple of 16 leaves
the sums' order — and, on one thread, the bits — as at the full batch (measured for 1–16
real samples against 32 on the FMNIST CNN, LeNet-5, the MLP and logistic regression with
this project's CPU's default kernels; on two threads oneDNN splits the batch of an odd
number of clients between the threads, and those convolution gradients then round
differently, as at another thread count). That is a property of the kernels, not a
guarantee: under MKL's compatible path (``tests/other_cpu.env``) a narrower step rounds
differently in the last bits, and so did a chunk's on the lent H200 machine's CPU (torch
2.11); the tests check closeness. At
K = 1,000 over 16,000 FMNIST samples every client has 16: half the batch of 32."""


_KEPT: list[_Workspace] = []  # the last finished call's workspaces (_Workspace.keep)
_KEPT_LOCK = threading.Lock()


def _workspace_key(state: State, names: list[str], opt: Adam | SGD, m: int) -> tuple:
    """What a workspace's tensors depend on: m, the trained names, the optimiser's kind and
    each state tensor's row shape, dtype and device."""
    kind = "adam" if isinstance(opt, Adam) else ("sgd", bool(opt.momentum))
    return m, tuple(names), kind, tuple((n, tuple(t.shape[1:]), t.dtype, t.device) for n, t in state.items())


def _consecutive(rows: np.ndarray) -> bool:
    """Whether ``rows`` are lo, lo + 1, ..., lo + len − 1."""
    return bool((np.diff(rows) == 1).all())


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) bounds of the runs of equal consecutive values: [3, 3, 1] -> [(0, 2), (2, 3)]; [] -> []."""
    if len(values) == 0:
        return []
    cut = np.flatnonzero(np.diff(values)) + 1
    bounds = np.concatenate([[0], cut, [len(values)]]).tolist()
    return list(zip(bounds[:-1], bounds[1:]))


def _prefixes(t: torch.Tensor, active: list[int]) -> list[torch.Tensor]:
    """``[t[s, :active[s]] for s]`` (contiguous views), cut one block per run of equal counts."""
    views = []
    for lo, hi in _runs(np.asarray(active)):
        views.extend(t[lo:hi, :active[lo]].unbind(0))
    return views


def _loss_and_grads_fn(template: nn.Module, names: list[str], with_pull: bool = False):
    """``f(state (m, ...), x (m, B, ...), y (m, B), weight (m, B), need_loss, pull) -> (grads, losses (m,))``
    by ``vmap`` + autograd (called under ``torch.no_grad()``; it turns autograd back on).

    ``losses`` are the weighted cross-entropies. With ``with_pull`` the forward pass is
    body then head, and ``pull = (per-sample weights (m, B), prototypes (m, B, D))`` adds
    Σ_j pull_j ‖body(x_j) − p_j‖² to each client's loss before differentiation.
    """
    forward = vmap(lambda weights, x: functional_call(template, weights, (x,)))
    if with_pull:
        prefix = head_prefix(template)
        features = vmap(lambda weights, x: functional_call(body(template), weights, (x,)))
        classifier = vmap(lambda weights, e: functional_call(head(template), weights, (e,)))

    def loss_and_grads(state, x, y, weight, need_loss=True, pull=None):  # the loss is needed for its gradient
        with torch.enable_grad():
            leaves = {n: state[n].detach().requires_grad_() for n in names}
            live = {**state, **leaves}
            if pull is None:
                logits = forward(live, x)
            else:
                embedding = features({n: t for n, t in live.items() if not n.startswith(prefix)}, x)
                logits = classifier({n[len(prefix):]: t for n, t in live.items() if n.startswith(prefix)},
                                    embedding)
            per_sample = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
            losses = (per_sample.view_as(weight) * weight).sum(1)
            total = losses.sum()
            if pull is not None:
                total = total + (((embedding - pull[1]) ** 2).sum(2) * pull[0]).sum()
            grads = torch.autograd.grad(total, list(leaves.values()))
        return dict(zip(names, grads)), losses.detach()

    return loss_and_grads


def _rows(prox: _Prox | None, rows: torch.Tensor) -> _Prox | None:
    return None if prox is None else _Prox(prox.mu[rows], {n: c[rows] for n, c in prox.center.items()})


def _pull_rows(pull: EmbeddingPull | None, rows: torch.Tensor) -> EmbeddingPull | None:
    return None if pull is None else EmbeddingPull(pull.weight[rows], pull.prototypes[rows], pull.mask[rows])


@torch.no_grad()
def _train_chunk(loss_and_grads, names: list[str], state: State, batches: _Batches, opt: StackedOptimizer,
                 prox: _Prox | None, embedding_pull: EmbeddingPull | None = None) -> torch.Tensor:
    """Train one chunk in place (``state``: name -> (m, ...)) with vmap + autograd.

    Returns the (S, m) weighted batch losses of the last-epoch steps (0 elsewhere).
    """
    n_steps, m_all, _ = batches.shape
    step_loss = torch.zeros(n_steps, m_all, device=batches.x.device)
    input_shape = batches.x.shape[1:]
    emb = None
    for s, m in enumerate(batches.active):
        if s == 0 or m != batches.active[s - 1]:  # the active prefix shrank: re-slice the views
            rows = {n: t[:m] for n, t in state.items()}
            weights = [rows[n] for n in names]
            opt.select(m)
            pull = _prox_rows(prox, names, m)
        x = batches.x.index_select(0, batches.index[s].reshape(-1)).view(m, -1, *input_shape)
        target, weight = batches.target[s].squeeze(1), batches.weight[s].squeeze(1)
        if embedding_pull is not None:
            emb = pull_terms(embedding_pull, target, weight > 0)
        grads, losses = loss_and_grads(rows, x, target, weight, batches.last[s], emb)
        grads = [grads[n].contiguous() for n in names]  # the fused Adam kernel misreads strided grads
        if pull is not None:  # g += μ (w − c)
            torch._foreach_add_(grads, torch._foreach_mul(torch._foreach_sub(weights, pull[1]), pull[0]))
        opt.step(weights, grads, s)
        if batches.last[s]:
            step_loss[s, :m] = losses
    return step_loss


@torch.no_grad()
def _train_chunk_dense(stack: DenseStack | ConvStack, state: State, batches: _Batches, opt: StackedOptimizer,
                       prox: _Prox | None, grads_out: list[torch.Tensor] | None = None) -> torch.Tensor:
    """:func:`_train_chunk` for a dense stack or a conv stack, on its hand-written kernel
    (``grads_out``: buffers of ≥ m rows per parameter that the gradients are written into).

    The same steps and the same mathematics; the loop is trimmed to about twenty tensor
    calls per step, because under label skew most steps train only the few largest
    clients and then the fixed cost per call, not arithmetic, is the engine's time.
    """
    n_steps, m_all, batch = batches.shape
    names = stack.param_names
    minus_one = torch.full((m_all, 1, batch), -1.0, device=batches.x.device)
    step_loss = torch.zeros(n_steps, m_all, 1, 1, device=batches.x.device)  # −weighted batch losses
    loss_views = _prefixes(step_loss, batches.active)
    x_all = batches.x.flatten(1)
    sample = (-1,) if isinstance(stack, DenseStack) else batches.x.shape[1:]  # a conv stack takes images
    for s, m in enumerate(batches.active):
        if s == 0 or m != batches.active[s - 1]:  # the active prefix shrank: re-slice the views
            params = [state[n][:m] for n in names]
            layers = stack.layers(params)
            opt.select(m)
            pull = _prox_rows(prox, names, m)
            ones = minus_one[:m]
            out = None if grads_out is None else [g[:m] for g in grads_out]
        width, index, target, weight = batches.width[s], batches.index[s], batches.target[s], batches.weight[s]
        if width < batch:  # no active client has a real sample past ``width``: skip that padding
            index, target, weight = index[:, :width].contiguous(), target[..., :width].contiguous(), \
                weight[..., :width].contiguous()
        x = x_all.index_select(0, index.view(-1)).view(m, width, *sample)
        grads = stack.step_grads(layers, x, target, weight, ones,
                                 loss_views[s] if batches.last[s] else None, out=out)
        if pull is not None:  # g += μ (w − c)
            torch._foreach_add_(grads, torch._foreach_mul(torch._foreach_sub(params, pull[1]), pull[0]))
        opt.step(params, grads, s)
    return -step_loss.view(n_steps, m_all)


def _kernel(template: nn.Module) -> DenseStack | ConvStack | None:
    """The hand-written kernel for ``template`` (a dense stack, or convolution blocks with a
    dense head), or None for vmap + autograd."""
    return dense_stack(template) or conv_stack(template)


def _prox_rows(prox: _Prox | None, names: list[str], m: int):
    """(μ broadcastable per tensor, centers) of the first m rows, as lists in ``names`` order."""
    if prox is None:
        return None
    centers = [prox.center[n][:m] for n in names]
    return [prox.mu[:m].view(-1, *[1] * (c.dim() - 1)) for c in centers], centers


# ----------------------------------------------------------------------------- divergence
def _nonfinite_rows(tensors: list[torch.Tensor], loss: torch.Tensor) -> dict[int, str]:
    """Rows whose weights or loss are not finite, mapped to ``"weights"``, ``"loss"`` or both.

    ``tensors``: stacked (m, ...) each; ``loss``: (m,). The common case costs one sum per
    tensor and one host sync: a sum is finite unless some entry is NaN/±inf or the sum
    overflows, so a finite sum clears the tensor (``isfinite().all()`` allocates a mask and
    is ~25× slower on a large MLP). Only when a sum is not finite are the rows searched
    exactly (an overflowing sum of finite weights then finds nothing).
    """
    if _all_finite(tensors + [loss]):
        return {}
    bad_w = torch.zeros(len(loss), dtype=torch.bool, device=loss.device)
    for t in tensors:
        bad_w |= ~torch.isfinite(t.reshape(len(t), -1)).all(1)
    bad_l = ~torch.isfinite(loss)
    out = {}
    for row, (w, l) in enumerate(zip(bad_w.tolist(), bad_l.tolist())):
        if w or l:
            out[row] = "weights and loss" if w and l else "weights" if w else "loss"
    return out


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Cheap screen: True when the sum of every tensor is finite (then so is every entry)."""
    return bool(torch.isfinite(torch.stack([t.sum().double() for t in tensors])).all())


def _divergence(clients: np.ndarray, bad: dict[int, str], round_idx: int, opt: Adam | SGD) -> DivergenceError:
    """The error naming the diverged clients (ids, ascending), the round and the optimiser."""
    rows = sorted(bad, key=lambda r: int(clients[r]))
    kinds = sorted(set(bad.values()), key=["weights", "loss", "weights and loss"].index)
    what = kinds[0] if len(kinds) == 1 else "weights and/or loss"
    return DivergenceError([int(clients[r]) for r in rows], round_idx, what=what, lr=opt.lr,
                           optimizer=type(opt).__name__.lower())


# ----------------------------------------------------------------------------- validation
def _check_out(out: State | None, state: State, params: State) -> State | None:
    """Validated ``out`` (see :func:`local_train`), or None."""
    if out is None:
        return None
    if not isinstance(out, dict) or set(out) != set(state):
        raise ValueError(f"out must be a dict with the keys of params ({sorted(state)}), "
                         f"got {sorted(out) if isinstance(out, dict) else type(out).__name__}")
    taken = {t.untyped_storage().data_ptr() for t in list(params.values()) + list(state.values())}
    for n, t in state.items():
        o = out[n]
        if (not torch.is_tensor(o) or o.shape != t.shape or o.dtype != torch.float32 or o.device != t.device
                or not o.is_contiguous()):
            got = (f"{tuple(o.shape)} {o.dtype} on {o.device}{'' if o.is_contiguous() else ', not contiguous'}"
                   if torch.is_tensor(o) else type(o).__name__)
            raise ValueError(f"out[{n!r}] must be a contiguous float32 tensor of shape {tuple(t.shape)} on "
                             f"{t.device}, got {got}; pass out=None for new tensors")
        if o.untyped_storage().data_ptr() in taken:
            raise ValueError(f"out[{n!r}] shares memory with params; pass other tensors "
                             "(e.g. the previous round's TrainResult.params) or out=None")
    return out


def _check_prox(center: State | None, mu, names: list[str], state: State, m: int,
                device: torch.device) -> _Prox | None:
    """Validated proximal term, or None when μ is zero everywhere."""
    if isinstance(mu, (str, bytes)) or (isinstance(mu, (list, tuple)) and any(isinstance(v, (str, bytes)) for v in mu)):
        raise ValueError(f"prox_mu must be a float ≥ 0 or an array of shape ({m},), got {mu!r}")
    mu_np = to_host(mu, np.float64)
    if mu_np.ndim == 0:
        mu_np = np.full(m, float(mu_np))
    if mu_np.shape != (m,):
        raise ValueError(f"prox_mu must be a float or have shape ({m},), got shape {mu_np.shape}")
    mu_t = torch.as_tensor(mu_np)
    if not torch.isfinite(mu_t).all() or (mu_t < 0).any():
        raise ValueError(f"prox_mu must be finite and ≥ 0 (a float or shape ({m},)), got {mu!r}")
    if not mu_t.any():
        return None
    if center is None:
        raise ValueError("prox_mu > 0 needs prox_center (name -> (M, *shape) for the trainable weights)")
    for n in names:
        if n not in center or tuple(center[n].shape) != tuple(state[n].shape):
            raise ValueError(f"prox_center[{n!r}] must exist with shape {tuple(state[n].shape)}")
    return _Prox(mu_t.to(device, torch.float32),
                 {n: center[n].detach().to(device, torch.float32) for n in names})
