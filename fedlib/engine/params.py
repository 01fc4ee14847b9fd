"""Pure functions over *stacked* client weights.

A stacked state is a dict ``name -> Tensor`` of shape ``(M, *shape)``: row ``i`` holds
client (or model) ``i``'s copy of that tensor. Server rules (FedAvg, FedOpt, CFL,
FedAMP, ...) are written against this layout so that they never loop over clients.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

__all__ = [
    "stack_params",
    "unstack",
    "broadcast",
    "weighted_average",
    "RunningAverage",
    "flatten_params",
    "unflatten_params",
]

State = dict[str, torch.Tensor]


def stack_params(states: Sequence[Mapping[str, torch.Tensor]]) -> State:
    """Stack M ≥ 1 states ``name -> shape`` (same names and shapes) into ``name -> (M, *shape)``."""
    if len(states) == 0:
        raise ValueError("states is empty: stack_params needs at least one state")
    names = list(states[0])
    for i, s in enumerate(states[1:], start=1):
        if list(s) != names:
            raise ValueError(f"states[{i}] has names {list(s)}, expected {names}")
    return {n: torch.stack([s[n] for s in states]) for n in names}


def unstack(stacked: Mapping[str, torch.Tensor]) -> list[State]:
    """Split a stacked state ``name -> (M, *shape)`` into M states ``name -> shape``."""
    m = _n_rows(stacked)
    return [{n: t[i] for n, t in stacked.items()} for i in range(m)]


def broadcast(state: Mapping[str, torch.Tensor], m: int, *, copy: bool = True) -> State:
    """M copies of one state: ``name -> shape`` becomes ``name -> (M, *shape)``.

    ``copy=False`` gives a read-only expanded view instead (no memory per row): enough for
    ``local_train``'s ``params``, which copies each chunk's start rows before training them
    (what FedAvg's rounds pass; M independent copies of a 618k-weight CNN for 50 clients are
    124 MB written every round). Writing into the view would write every row at once.
    """
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be an integer ≥ 1, got {m!r}")
    if not isinstance(copy, (bool, np.bool_)):
        raise ValueError(f"copy must be a bool, got {copy!r}")
    views = {n: t.unsqueeze(0).expand(int(m), *t.shape) for n, t in state.items()}
    return {n: v.clone() for n, v in views.items()} if copy else views


def weighted_average(stacked: Mapping[str, torch.Tensor], weights) -> State:
    """Weighted mean of the M rows: Σ_i w_i θ_i / Σ_i w_i (FedAvg with w = sample counts).

    ``stacked`` ``name -> (M, *shape)``, ``weights`` (M,) non-negative with a positive sum →
    ``name -> shape`` (the input's dtype and device).
    """
    m = _n_rows(stacked)
    w = _host_float64(weights)
    if w.shape != (m,):
        raise ValueError(f"weights must have shape ({m},) to match the stacked rows, got {tuple(w.shape)}")
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, non-negative and sum to > 0, got {w.tolist()}")
    w = w / w.sum()
    return {n: torch.tensordot(w.to(t.device, t.dtype), t, dims=1) for n, t in stacked.items()}


_ROW_BY_ROW_FROM = 1 << 16
"""Elements a row from which :meth:`RunningAverage.add` adds row by row, and :func:`copy_rows_`
copies row by row."""


def copy_rows_(dst: torch.Tensor, rows, src: torch.Tensor) -> torch.Tensor:
    """``dst[rows] = src`` in place (``dst`` returned): ``dst`` (N, *shape), ``rows`` M distinct
    row indices (a sequence, array or 1-D tensor), ``src`` (M, *shape).

    Rows of at least :data:`_ROW_BY_ROW_FROM` elements are copied one ``copy_`` per row:
    indexed assignment walks them element by element, 3–4× slower (this project's CPU, one
    thread: three rows of 2,048 × 288 floats, the FMNIST CNN's head, 0.47–0.57 ms against
    0.14–0.17 ms); smaller rows in one indexed assignment (one call instead of M).
    """
    if src.shape[0] and src[0].numel() >= _ROW_BY_ROW_FROM:
        indices = rows.tolist() if hasattr(rows, "tolist") else list(rows)
        for i, r in enumerate(indices):
            dst[r].copy_(src[i])
    else:
        dst[torch.as_tensor(rows, device=dst.device)] = src.to(dst.device, dst.dtype)
    return dst


class RunningAverage:
    """A weighted average of rows that arrive a chunk at a time, none of them kept:
    Σ_i w_i θ_i and Σ_i w_i accumulated in float64 (FedAvg folded into training, one chunk
    of clients in memory instead of every selected client's model).

    :meth:`mean` is :func:`weighted_average` of all the rows added, up to rounding: the
    float64 sums round to float32 once, so it differs from :func:`weighted_average`'s float32
    products in the last bit of some weights, and rows added in other chunks (another chunk
    size, another order) change only float64 rounding, far below float32's.

    Tensors of at least :data:`_ROW_BY_ROW_FROM` elements a row are added row by row in
    place (``total += w_i · θ_i`` in float64): a float64 copy of a chunk's rows would be new
    memory every chunk — measured on 2 FMNIST CNN clients, 2–3 ms a chunk (paged in) against
    0.3 ms in place. Smaller ones as one float64 product per chunk (a call per row would cost
    more than the arithmetic for 500 logistic clients). ``like``: one state ``name -> shape``
    (the names, shapes, device and result dtype).
    """

    def __init__(self, like: Mapping[str, torch.Tensor]):
        self.total = {n: torch.zeros(t.shape, dtype=torch.float64, device=t.device) for n, t in like.items()}
        self.dtypes = {n: t.dtype for n, t in like.items()}
        self.weight = 0.0

    def add(self, rows: Mapping[str, torch.Tensor], weights) -> None:
        """Fold in m rows: ``rows`` ``name -> (m, *shape)``, ``weights`` (m,) non-negative."""
        w = _host_float64(weights)
        m = _n_rows(rows)
        if w.shape != (m,) or set(rows) != set(self.total):
            raise ValueError(f"add needs rows with the names {sorted(self.total)} and weights of shape ({m},), "
                             f"got names {sorted(rows)} and weights of shape {tuple(w.shape)}")
        if not torch.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"weights must be finite and non-negative, got {w.tolist()}")
        for n, total in self.total.items():
            r = rows[n]
            if r[0].numel() >= _ROW_BY_ROW_FROM:  # in place, one row at a time: no float64 copy of the chunk
                for i, wi in enumerate(w.tolist()):
                    total.add_(r[i], alpha=wi)
            else:
                total.add_(torch.tensordot(w.to(total.device), r.to(torch.float64), dims=1))
        self.weight += float(w.sum())

    def mean(self) -> State:
        """Σ_i w_i θ_i / Σ_i w_i, ``name -> shape`` in the dtype of ``like``."""
        if not self.weight > 0:
            raise ValueError(f"the weights added sum to {self.weight}; a weighted average needs a positive sum")
        return {n: (t / self.weight).to(self.dtypes[n]) for n, t in self.total.items()}


def flatten_params(stacked: Mapping[str, torch.Tensor], names: Sequence[str] | None = None) -> torch.Tensor:
    """Concatenate each row's tensors ``name -> (M, *shape)`` into (M, P), P = Σ prod(shape)
    over ``names`` (default: all, in dict order; CFL, FeSEM and FedAMP pass the trainable
    names so that BatchNorm statistics stay out)."""
    names = list(stacked) if names is None else list(names)
    _n_rows({n: stacked[n] for n in names})
    return torch.cat([stacked[n].reshape(stacked[n].shape[0], -1) for n in names], dim=1)


def unflatten_params(flat: torch.Tensor, like: Mapping[str, torch.Tensor],
                     names: Sequence[str] | None = None) -> State:
    """Inverse of :func:`flatten_params`: ``(M, P)`` back to ``name -> (M, *shape)``, the
    shapes read from ``like`` (``name -> (M', *shape)``), ``names`` as given to flatten_params."""

    names = list(like) if names is None else list(names)
    shapes = [tuple(like[n].shape[1:]) for n in names]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    if flat.dim() != 2 or flat.shape[1] != sum(sizes):
        raise ValueError(f"flat must have shape (M, {sum(sizes)}), got {tuple(flat.shape)}")
    parts = torch.split(flat, sizes, dim=1)
    return {n: p.reshape(flat.shape[0], *s).contiguous() for n, p, s in zip(names, parts, shapes)}


def _host_float64(weights) -> torch.Tensor:
    """Weights (array-like or Tensor on any device) as a float64 CPU tensor."""
    if torch.is_tensor(weights):
        return weights.detach().to("cpu", torch.float64)
    return torch.as_tensor(np.asarray(weights, dtype=np.float64))


def _n_rows(stacked: Mapping[str, torch.Tensor]) -> int:
    """The common leading dimension M of a stacked state (validated)."""
    if len(stacked) == 0:
        raise ValueError("the stacked state is empty")
    rows = {n: (t.shape[0] if t.dim() > 0 else None) for n, t in stacked.items()}
    if len(set(rows.values())) != 1 or None in rows.values():
        raise ValueError(f"every stacked tensor needs the same leading dimension M, got {rows}")
    return next(iter(rows.values()))
