"""Client optimisers, their per-client state, and FedProto's embedding pull for ``local_train``.

Choices
-------
Optimisers (:class:`Adam`, :class:`SGD`)
    Frozen dataclasses of hyperparameters, validated on construction. Both follow
    ``torch.optim``'s formulas exactly, because the sequential path *is* ``torch.optim``:

    * Adam (``torch.optim.Adam(fused=True)``), with torch's *coupled* L2 weight decay:
      g ← g + λw; m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²;
      w ← w − lr/(1−β1^t) · m / (√v / √(1−β2^t) + ε). ε defaults to Keras's 1e-7.
    * SGD (``torch.optim.SGD(foreach=True)``, dampening 0): g ← g + λw; b ← g on a
      client's first step, else b ← μ b + g; step = b (or g + μ b with Nesterov);
      w ← w − lr · step.

    The vectorised path updates all clients of a chunk at once. For Adam it calls the
    fused kernel behind ``torch.optim.Adam(fused=True)`` while the chunk's clients share
    one step number t, and a hand-written update with a per-row t otherwise (the fused
    kernel takes one scalar t per tensor). For SGD it replays ``torch.optim.SGD``'s
    foreach update with ``torch._foreach_*`` calls: that reproduces ``torch.optim.SGD``
    bit for bit on CPU, whereas ``torch._fused_sgd_`` differs from it in the last bit
    (measured: up to 6e-8 after five steps). The first-step rule b ← g needs no per-row
    branch: a missing buffer is held as zeros, and μ·0 + g = g.

Optimiser state (:class:`AdamState`, :class:`SGDState`)
    Stacked per client like the weights, for the trainable parameters only (BatchNorm
    statistics have no optimiser state): Adam's moments ``name -> (M, *shape)`` and each
    client's own step count (M,); SGD's momentum buffers and whether each client has
    one yet (torch creates the buffer on the first step). A client that takes no step
    keeps its state as given.

Embedding pull (:class:`EmbeddingPull`)
    FedProto (Tan et al., AAAI 2022, Eq. 8) regularises each client's embeddings toward
    given class prototypes. Here client i's batch loss gains

        λ_i · (1 / |S|) Σ_{j ∈ S} ‖f(x_j) − p_{i, y_j}‖²₂,   S = {j in the batch : mask[i, y_j]},

    with f = :func:`fedlib.models.body` (every layer but the classifier): the squared L2
    distance *summed over the D embedding dimensions* and *averaged over the batch's
    samples whose class has a prototype* (0 when there is none). Both paths use this
    normalisation. (FedProto's reference code uses ``nn.MSELoss``, i.e. also divides by
    D: that is λ scaled by 1/D.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..validation import check_number
from .params import copy_rows_

__all__ = ["Adam", "SGD", "AdamState", "SGDState", "EmbeddingPull"]

State = dict[str, torch.Tensor]


# ----------------------------------------------------------------------------- hyperparameters
def _positive(name: str, value) -> float:
    return check_number(value, name, 0, low_open=True)


def _non_negative(name: str, value) -> float:
    return check_number(value, name, 0)


@dataclass(frozen=True)
class Adam:
    """Adam as ``torch.optim.Adam`` (coupled L2 ``weight_decay``), ε added to √v̂.

    Attributes
    ----------
    lr : float, default 1e-3
    betas : (float, float), default (0.9, 0.999)
        Each in [0, 1).
    eps : float, default 1e-7
        Keras's default (the authors trained in Keras; torch's is 1e-8).
    weight_decay : float, default 0
        λ ≥ 0: g ← g + λw before the moments.
    """

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-7
    weight_decay: float = 0.0

    def __post_init__(self):
        lr = _positive("lr", self.lr)
        if isinstance(self.betas, (str, bytes)) or not hasattr(self.betas, "__len__") or len(self.betas) != 2:
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        try:
            betas = tuple(check_number(b, "betas entries", 0, 1, high_open=True) for b in self.betas)
        except ValueError:
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}") from None
        object.__setattr__(self, "lr", lr)
        object.__setattr__(self, "betas", betas)
        object.__setattr__(self, "eps", _positive("eps", self.eps))
        object.__setattr__(self, "weight_decay", _non_negative("weight_decay", self.weight_decay))


@dataclass(frozen=True)
class SGD:
    """SGD as ``torch.optim.SGD`` with dampening 0.

    Attributes
    ----------
    lr : float, default 0.01
    momentum : float, default 0
        μ ≥ 0 (0: plain SGD, no buffer).
    weight_decay : float, default 0
        λ ≥ 0: g ← g + λw.
    nesterov : bool, default False
        Step g + μb instead of b; needs μ > 0.
    """

    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self):
        object.__setattr__(self, "lr", _positive("lr", self.lr))
        object.__setattr__(self, "momentum", _non_negative("momentum", self.momentum))
        object.__setattr__(self, "weight_decay", _non_negative("weight_decay", self.weight_decay))
        if not isinstance(self.nesterov, (bool, np.bool_)):
            raise ValueError(f"nesterov must be a bool, got {self.nesterov!r}")
        if self.nesterov and self.momentum == 0:
            raise ValueError(f"nesterov=True needs momentum > 0, got momentum={self.momentum!r}")
        object.__setattr__(self, "nesterov", bool(self.nesterov))


# ----------------------------------------------------------------------------- optimiser state
def _take(state: State, rows) -> State:
    return {n: t[rows] for n, t in state.items()}


def _put(state: State, rows, new: State) -> State:
    out = {n: t.clone() for n, t in state.items()}
    for n, t in out.items():
        t[rows] = new[n].to(t.device, t.dtype)
    return out


def _as_index(rows, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(rows, dtype=np.int64), device=device)


@dataclass(frozen=True)
class AdamState:
    """Adam's state for M clients (rows in the order of ``local_train``'s ``clients``).

    Attributes
    ----------
    exp_avg, exp_avg_sq : dict of str to Tensor
        First and second moments, ``name -> (M, *shape)`` for every trainable parameter.
    step : Tensor, shape (M,), int64
        Steps each client has taken (its bias correction uses step + 1 next).
    """

    exp_avg: State
    exp_avg_sq: State
    step: torch.Tensor

    def take(self, rows) -> "AdamState":
        """The state of ``rows`` (int array-like of shape (M',)), e.g. a round's clients
        out of a state kept for all K clients."""
        index = _as_index(rows, self.step.device)
        return AdamState(_take(self.exp_avg, index), _take(self.exp_avg_sq, index), self.step[index])

    def put(self, rows, new: "AdamState") -> "AdamState":
        """A copy with rows ``rows`` replaced by ``new`` (M' rows)."""
        index = _as_index(rows, self.step.device)
        step = self.step.clone()
        step[index] = new.step.to(step.device, step.dtype)
        return AdamState(_put(self.exp_avg, index, new.exp_avg), _put(self.exp_avg_sq, index, new.exp_avg_sq),
                         step)


@dataclass(frozen=True)
class SGDState:
    """SGD's state for M clients.

    Attributes
    ----------
    momentum_buffer : dict of str to Tensor
        ``name -> (M, *shape)`` for every trainable parameter; empty when no client has
        a buffer (momentum 0). Rows without a buffer are ignored (held as zeros).
    has_buffer : Tensor, shape (M,), bool
        Whether client i has a buffer (it took a step with momentum > 0); torch's
        ``state['momentum_buffer'] is not None``.
    """

    momentum_buffer: State
    has_buffer: torch.Tensor

    def take(self, rows) -> "SGDState":
        index = _as_index(rows, self.has_buffer.device)
        return SGDState(_take(self.momentum_buffer, index), self.has_buffer[index])

    def put(self, rows, new: "SGDState") -> "SGDState":
        index = _as_index(rows, self.has_buffer.device)
        has = self.has_buffer.clone()
        has[index] = new.has_buffer.to(has.device)
        if not new.momentum_buffer:
            return SGDState({n: t.clone() for n, t in self.momentum_buffer.items()}, has)
        if not self.momentum_buffer:
            base = {n: t.new_zeros(len(has), *t.shape[1:]) for n, t in new.momentum_buffer.items()}
            return SGDState(_put(base, index, new.momentum_buffer), has)
        return SGDState(_put(self.momentum_buffer, index, new.momentum_buffer), has)


def fresh_state(optimizer: Adam | SGD, like: State, names: list[str]) -> AdamState | SGDState:
    """The state of M clients that have not stepped yet (zeros; ``like``: name -> (M, *shape))."""
    m = next(iter(like.values())).shape[0]
    device = next(iter(like.values())).device
    if isinstance(optimizer, Adam):
        zeros = lambda: {n: torch.zeros_like(like[n]) for n in names}  # noqa: E731
        return AdamState(zeros(), zeros(), torch.zeros(m, dtype=torch.int64, device=device))
    buffers = {n: torch.zeros_like(like[n]) for n in names} if optimizer.momentum else {}
    return SGDState(buffers, torch.zeros(m, dtype=torch.bool, device=device))


def check_opt_state(opt_state, optimizer: Adam | SGD, names: list[str], params: State, m: int,
                    device: torch.device) -> AdamState | SGDState | None:
    """Validated ``opt_state`` for ``optimizer`` (on ``device``, float32 / int64 / bool), or None."""
    if opt_state is None:
        return None
    kind = AdamState if isinstance(optimizer, Adam) else SGDState
    if not isinstance(opt_state, kind):
        raise ValueError(f"opt_state must be a {kind.__name__} for optimizer={optimizer!r}, "
                         f"got {type(opt_state).__name__}")

    def tensors(name: str, state: State, allow_empty: bool) -> State:
        if allow_empty and not state:
            return {}
        if set(state) != set(names):
            raise ValueError(f"opt_state.{name} must hold exactly the trainable parameters {sorted(names)}, "
                             f"got {sorted(state)}")
        for n in names:
            if tuple(state[n].shape) != tuple(params[n].shape):
                raise ValueError(f"opt_state.{name}[{n!r}] must have shape {tuple(params[n].shape)}, "
                                 f"got {tuple(state[n].shape)}")
        return {n: state[n].detach().to(device, torch.float32) for n in names}

    if kind is AdamState:
        step = torch.as_tensor(opt_state.step).detach()
        if step.shape != (m,) or step.is_floating_point() and not torch.equal(step, step.round()) \
                or step.dtype == torch.bool or (step < 0).any():
            raise ValueError(f"opt_state.step must be non-negative integer step counts of shape ({m},), "
                             f"got {opt_state.step!r}")
        return AdamState(tensors("exp_avg", opt_state.exp_avg, False),
                         tensors("exp_avg_sq", opt_state.exp_avg_sq, False), step.to(device, torch.int64))
    has = torch.as_tensor(opt_state.has_buffer).detach()
    if has.shape != (m,) or has.dtype != torch.bool:
        raise ValueError(f"opt_state.has_buffer must be a bool tensor of shape ({m},), got {opt_state.has_buffer!r}")
    buffers = tensors("momentum_buffer", opt_state.momentum_buffer, allow_empty=True)
    if has.any() and not buffers:
        raise ValueError("opt_state.momentum_buffer is empty but opt_state.has_buffer marks clients "
                         "with a buffer")
    return SGDState(buffers, has.to(device))


def check_optimizer(optimizer, lr, betas, eps, defaults: tuple) -> Adam | SGD:
    """``optimizer``, or ``Adam(lr, betas, eps)`` when None; both at once is an error."""
    if optimizer is None:
        return Adam(lr, betas, eps)
    if not isinstance(optimizer, (Adam, SGD)):
        raise ValueError(f"optimizer must be a fedlib.engine.Adam, fedlib.engine.SGD or None, got {optimizer!r}")
    given = {k: v for k, v, d in zip(("lr", "betas", "eps"), (lr, betas, eps), defaults)
             if (tuple(v) if k == "betas" else v) != d}
    if given:
        raise ValueError(f"optimizer={optimizer!r} was given together with {given}: set the "
                         "hyperparameters on the optimizer only (lr/betas/eps of local_train "
                         "configure the default Adam)")
    return optimizer


# ----------------------------------------------------------------------------- embedding pull
@dataclass(frozen=True)
class EmbeddingPull:
    """FedProto's regulariser (see the module docstring): pull client i's embeddings of
    class c toward ``prototypes[i, c]`` wherever ``mask[i, c]``.

    Attributes
    ----------
    weight : Tensor, shape (M,)
        λ_i ≥ 0 per client (0: no term for that client).
    prototypes : Tensor, shape (M, C, D)
        Target embedding per client and class (D = the classifier's input size).
    mask : Tensor, shape (M, C), bool
        Which prototypes exist; samples of other classes get no pull.
    """

    weight: torch.Tensor
    prototypes: torch.Tensor
    mask: torch.Tensor

    def __post_init__(self):
        weight = torch.as_tensor(self.weight).detach()
        prototypes = torch.as_tensor(self.prototypes).detach()
        mask = torch.as_tensor(self.mask).detach()
        if weight.dim() != 1 or weight.dtype == torch.bool:
            raise ValueError(f"weight must be a 1-D numeric tensor (M,), got {weight.dtype} {tuple(weight.shape)}")
        if not torch.isfinite(weight.double()).all() or (weight < 0).any():
            raise ValueError(f"weight must be finite and ≥ 0, got {weight.tolist()!r}")
        m = len(weight)
        if prototypes.dim() != 3 or prototypes.shape[0] != m or not prototypes.is_floating_point():
            raise ValueError(f"prototypes must be a float tensor of shape ({m}, C, D), got "
                             f"{prototypes.dtype} {tuple(prototypes.shape)}")
        if mask.dtype != torch.bool or tuple(mask.shape) != tuple(prototypes.shape[:2]):
            raise ValueError(f"mask must be a bool tensor of shape {tuple(prototypes.shape[:2])}, got "
                             f"{mask.dtype} {tuple(mask.shape)}")
        if not torch.isfinite(prototypes[mask]).all():
            raise ValueError("prototypes must be finite wherever mask is True")
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "prototypes", prototypes)
        object.__setattr__(self, "mask", mask)


def check_embedding_pull(pull, m: int, n_classes: int, dim: int,
                         device: torch.device) -> EmbeddingPull | None:
    """``pull`` on ``device`` (float32 weights and prototypes, zeros where masked out), or
    None when absent or every weight is 0."""
    if pull is None:
        return None
    if not isinstance(pull, EmbeddingPull):
        raise ValueError(f"embedding_pull must be an EmbeddingPull or None, got {type(pull).__name__}")
    expected = (m, n_classes, dim)
    if tuple(pull.prototypes.shape) != expected:
        raise ValueError(f"embedding_pull.prototypes must have shape {expected} (clients, classes, the "
                         f"classifier's input size), got {tuple(pull.prototypes.shape)}")
    if not pull.weight.any():
        return None
    mask = pull.mask.to(device)
    prototypes = torch.where(mask.unsqueeze(2), pull.prototypes.to(device, torch.float32), 0.0)
    return EmbeddingPull(pull.weight.to(device, torch.float32), prototypes, mask)


def pull_terms(pull: EmbeddingPull, target: torch.Tensor, real: torch.Tensor):
    """Per-sample weights and targets of the pull (its first m rows) for m clients' batches:
    ``target`` (m, B) int64, ``real`` (m, B) bool (not padding) → (λ_i [j ∈ S_i] / max(|S_i|, 1)
    (m, B), p_{i, y_j} (m, B, D))."""

    m = target.shape[0]
    selected = pull.mask[:m].gather(1, target) & real
    per_sample = selected / selected.sum(1, keepdim=True).clamp(min=1) * pull.weight[:m, None]
    protos = pull.prototypes[:m].gather(1, target.unsqueeze(2).expand(-1, -1, pull.prototypes.shape[2]))
    return per_sample, protos


# ----------------------------------------------------------------------------- stacked updates
ROW_BY_ROW_WEIGHTS = 1 << 16
"""Trainable weights a client from which :class:`StackedOptimizer` updates fresh one-step
Adam rows one row at a time (``keep_state=False``); smaller clients stay in one call for the
chunk, whose fixed cost a call per row would multiply (logistic regression's 214 weights,
500 clients a chunk: the K = 1,000 round of ``benchmarks/scaling.py`` 4.4 → 10.9 ms)."""


class StackedOptimizer:
    """The vectorised path's optimiser for one chunk of m clients (rows sorted by
    decreasing step count, so the clients active at step s are a prefix).

    ``state`` (the chunk's rows, or None for fresh) is copied — into ``into``'s tensors when
    given (a state of the chunk's shape whose tensors the engine reuses from chunk to chunk;
    then :meth:`final_state` is valid until ``into`` is reused); :meth:`select` re-slices
    to the active prefix, :meth:`step` updates the prefix's weights in place, and
    :meth:`final_state` gives the chunk's state after its clients' ``n_steps`` steps.

    ``keep_state=False`` says that :meth:`final_state` will not be asked for. Then Adam
    clients of at least :data:`ROW_BY_ROW_WEIGHTS` weights that start fresh and take at most
    one step (FedAvg's many small clients) are updated one row at a time on zeroed moments
    of one row (``into``'s first row, zeroed again for each row), instead of zeroing, then
    reading and writing, the chunk's stacked moments: the same kernel on the same elements,
    so the same bits (:func:`_fused_adam` is elementwise), without streaming two moments of
    every row through memory — a chunk of 12 FMNIST-CNN clients (618k weights, 2.5 MB
    each) has 59 MB of them, more than the cache. Measured on one thread, caches flushed: the
    zeroing and the update of 12 such rows 7.4–8.1 → 5.2–6.3 ms.
    """

    def __init__(self, optimizer: Adam | SGD, names: list[str], params: State,
                 state: AdamState | SGDState | None, n_steps: np.ndarray,
                 into: AdamState | SGDState | None = None, keep_state: bool = True):
        self.opt, self.names, self.n_steps = optimizer, names, torch.as_tensor(n_steps)
        device = params[names[0]].device
        self.scratch = None  # one row of zeroed moments per parameter: the one-step rows' Adam
        self.slots: tuple[list[torch.Tensor], ...] = ()  # per-parameter state tensors, (m, ...) each
        one_step = len(self.n_steps) > 0 and int(self.n_steps.max()) <= 1
        if (not keep_state and state is None and into is not None and isinstance(optimizer, Adam) and one_step
                and sum(params[n][0].numel() for n in names) >= ROW_BY_ROW_WEIGHTS):
            self.scratch = [into.exp_avg[n][:1] for n in names], [into.exp_avg_sq[n][:1] for n in names]
            self.t = (torch.ones((), dtype=torch.float32, device=device),)  # every row's first step
            return
        if into is not None:
            self.state = copy_state(state, into)
        else:
            self.state = fresh_state(optimizer, params, names) if state is None else clone_state(state)
        if isinstance(optimizer, Adam):
            self.slots = [self.state.exp_avg[n] for n in names], [self.state.exp_avg_sq[n] for n in names]
            step0 = self.state.step
            s_max = int(self.n_steps.max()) if len(self.n_steps) else 0
            self.uniform = bool((step0 == step0[0]).all()) if len(step0) else True
            if self.uniform:  # one step number per step: the fused kernel
                first = int(step0[0]) if len(step0) else 0
                self.t = torch.arange(first + 1, first + s_max + 1, dtype=torch.float32, device=device).unbind(0)
            else:
                self.step0 = step0.double()
        else:
            if optimizer.momentum:
                if not self.state.momentum_buffer:  # given without buffers: none exists yet
                    self.state = fresh_state(optimizer, params, names)
                buffers = self.state.momentum_buffer
                keep = self.state.has_buffer
                for n in names:  # a missing buffer is zeros (μ·0 + g = g: torch's first step)
                    buffers[n].mul_(keep.view(-1, *[1] * (buffers[n].dim() - 1)))
                self.slots = ([buffers[n] for n in names],)

    def select(self, m: int) -> None:
        """Work on the first m rows from now on."""
        self.m = m
        self.views = [[t[:m] for t in ts] for ts in self.slots]

    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor], s: int) -> None:
        """Update ``params`` (the active prefix, ``names`` order) in place, at chunk step s."""
        opt = self.opt
        if self.scratch is not None:  # fresh rows, one step each: row by row on zeroed moments
            exp_avgs, exp_avg_sqs = self.scratch
            for i in range(self.m):
                torch._foreach_zero_(exp_avgs + exp_avg_sqs)
                _fused_adam([p[i:i + 1] for p in params], [g[i:i + 1] for g in grads], exp_avgs, exp_avg_sqs,
                            [self.t[0]] * len(params), opt)
        elif isinstance(opt, SGD):
            _sgd_step(params, grads, self.views[0] if self.views else None, opt)
        elif self.uniform:
            _fused_adam(params, grads, self.views[0], self.views[1], [self.t[s]] * len(params), opt)
        else:
            _adam_step_per_row(params, grads, self.views[0], self.views[1], self.step0[:self.m] + (s + 1), opt)

    def final_state(self) -> AdamState | SGDState:
        if self.scratch is not None:
            raise RuntimeError("final_state() of a StackedOptimizer made with keep_state=False")
        if isinstance(self.opt, Adam):
            return AdamState(self.state.exp_avg, self.state.exp_avg_sq,
                             self.state.step + self.n_steps.to(self.state.step.device))
        if not self.opt.momentum:  # no buffers: the state passes through
            return self.state
        return SGDState(self.state.momentum_buffer,
                        self.state.has_buffer | (self.n_steps > 0).to(self.state.has_buffer.device))


def put_rows(state: AdamState | SGDState, rows, new: AdamState | SGDState) -> AdamState | SGDState:
    """``state.put(rows, new)`` written into ``state``'s own tensors (returned), not a copy:
    the vectorised path collects each chunk's state this way, once per chunk, so that a call
    of many chunks copies each row once instead of the whole state per chunk. An SGD state
    without momentum buffers that receives some gets them by :meth:`SGDState.put` (a copy)."""
    if isinstance(state, SGDState) and new.momentum_buffer and not state.momentum_buffer:
        return state.put(rows, new)
    if isinstance(state, AdamState):
        index = _as_index(rows, state.step.device)
        for mine, theirs in ((state.exp_avg, new.exp_avg), (state.exp_avg_sq, new.exp_avg_sq)):
            for n, t in mine.items():
                copy_rows_(t, index, theirs[n].to(t.device, t.dtype))
        state.step[index] = new.step.to(state.step.device, state.step.dtype)
        return state
    index = _as_index(rows, state.has_buffer.device)
    state.has_buffer[index] = new.has_buffer.to(state.has_buffer.device)
    for n, t in (state.momentum_buffer.items() if new.momentum_buffer else ()):
        t[index] = new.momentum_buffer[n].to(t.device, t.dtype)
    return state


def copy_state(state: AdamState | SGDState | None, into: AdamState | SGDState) -> AdamState | SGDState:
    """``state`` written into the tensors of ``into`` (same kind, same rows); None writes
    :func:`fresh_state`'s zeros. Returns a state on ``into``'s tensors (step counts and
    buffer flags are new tensors)."""
    if isinstance(into, AdamState):
        if state is None:  # one call for every moment
            torch._foreach_zero_(list(into.exp_avg.values()) + list(into.exp_avg_sq.values()))
        else:
            for name in into.exp_avg:
                into.exp_avg[name].copy_(state.exp_avg[name])
                into.exp_avg_sq[name].copy_(state.exp_avg_sq[name])
        return AdamState(into.exp_avg, into.exp_avg_sq,
                         torch.zeros_like(into.step) if state is None else state.step.clone())
    given = state is not None and bool(state.momentum_buffer)
    for name, dst in into.momentum_buffer.items():
        dst.copy_(state.momentum_buffer[name]) if given else dst.zero_()
    return SGDState(into.momentum_buffer,
                    torch.zeros_like(into.has_buffer) if state is None else state.has_buffer.clone())


def clone_state(state: AdamState | SGDState) -> AdamState | SGDState:
    if isinstance(state, AdamState):
        return AdamState({n: t.clone() for n, t in state.exp_avg.items()},
                         {n: t.clone() for n, t in state.exp_avg_sq.items()}, state.step.clone())
    return SGDState({n: t.clone() for n, t in state.momentum_buffer.items()}, state.has_buffer.clone())


def _fused_adam(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                exp_avg_sqs: list[torch.Tensor], steps: list[torch.Tensor], adam: Adam) -> None:
    """In-place Adam update of stacked rows that have all taken the same number of steps.

    The kernel behind ``torch.optim.Adam(fused=True)`` (the sequential path's optimizer),
    called without the optimizer's per-call grouping: m ← β1-lerp(m, g),
    v ← β2 v + (1−β2) g², w ← w − lr/(1−β1^t) · m / (√v / √(1−β2^t) + ε), with t read
    from ``steps`` (one float scalar tensor per parameter, already incremented).
    """
    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=adam.lr,
                       beta1=adam.betas[0], beta2=adam.betas[1], weight_decay=adam.weight_decay,
                       eps=adam.eps, maximize=False, grad_scale=None, found_inf=None)


def _adam_step_per_row(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                       exp_avg_sqs: list[torch.Tensor], t: torch.Tensor, adam: Adam) -> None:
    """:func:`_fused_adam` with each row's own step number ``t`` (m,) (float64, already
    incremented); the bias corrections are computed in float64 like the fused kernel's."""
    beta1, beta2 = adam.betas
    if adam.weight_decay:
        grads = torch._foreach_add(grads, params, alpha=adam.weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    step_size = (adam.lr / (1 - beta1 ** t)).float()
    bias_correction2_sqrt = (1 - beta2 ** t).sqrt().float()
    for w, m, v in zip(params, exp_avgs, exp_avg_sqs):
        shape = (-1, *[1] * (w.dim() - 1))
        denom = v.sqrt().div_(bias_correction2_sqrt.view(shape)).add_(adam.eps)
        w.sub_(m.mul(step_size.view(shape)).div_(denom))


def _sgd_step(params: list[torch.Tensor], grads: list[torch.Tensor], buffers: list[torch.Tensor] | None,
              sgd: SGD) -> None:
    """``torch.optim.SGD(foreach=True)``'s update (dampening 0) of stacked rows, in place.

    ``buffers``: the momentum buffers (zeros for rows without one), None when μ = 0.
    """
    if sgd.weight_decay:
        grads = torch._foreach_add(grads, params, alpha=sgd.weight_decay)
    if sgd.momentum:
        torch._foreach_mul_(buffers, sgd.momentum)
        torch._foreach_add_(buffers, grads)
        grads = torch._foreach_add(grads, buffers, alpha=sgd.momentum) if sgd.nesterov else buffers
    torch._foreach_add_(params, grads, alpha=-sgd.lr)
