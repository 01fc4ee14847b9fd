"""Clients with different numbers of samples, computed as rectangles.

M clients' sample indices are ragged (client r holds ``len(index[r])`` samples). The vectorised
evaluation (:mod:`fedlib.engine.evaluate`), the predictors (:mod:`fedlib.engine.predict`) and the
class-embedding sums (:mod:`fedlib.engine.prototypes`) run many clients' models at once on one
rectangle: :func:`pad_index` pads the indices, :func:`score_ragged` walks the rectangle in column
blocks.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .federation import gather

__all__ = ["pad_index", "score_ragged", "Scorer"]

#: ``score(k, xb, labels) -> (pred, nll)``: xb (k, B, *input_shape), labels (k, B) int64;
#: pred (k, B) int64 predicted classes, nll (k, B) float per-sample loss.
Scorer = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def pad_index(index: list[np.ndarray], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged index arrays as a rectangle.

    Parameters
    ----------
    index : list of m int arrays, array r of length n_r (n_r may be 0; m ≥ 1)
    device : where the tensors go

    Returns
    -------
    padded : int64 Tensor, shape (m, n_max), n_max = max n_r; row r is ``index[r]`` followed by 0s
    valid : bool Tensor, shape (m, n_max); ``valid[r, j]`` is ``j < n_r`` (False on the padding)

    >>> pad_index([np.array([5, 7]), np.array([3])], torch.device("cpu"))
    (tensor([[5, 7],
            [3, 0]]), tensor([[ True,  True],
            [ True, False]]))
    """
    n_max = max(len(i) for i in index)
    padded = np.zeros((len(index), n_max), dtype=np.int64)
    for r, idx in enumerate(index):
        padded[r, :len(idx)] = idx
    valid = np.arange(n_max) < np.array([len(i) for i in index])[:, None]
    return torch.as_tensor(padded, device=device), torch.as_tensor(valid, device=device)


def score_ragged(prepare: Callable[[torch.Tensor], Scorer], x: torch.Tensor, y: torch.Tensor,
                 index: list[np.ndarray], batch_size: int, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client (correct, loss_sum) of a scorer over ragged clients, ``chunk`` clients at a time.

    Clients are sorted by sample count (largest first, stable) and taken ``chunk`` at a time;
    ``prepare(rows_t)`` (rows_t: int64 (c,), the chunk's client numbers in that order) returns
    the chunk's :data:`Scorer`. Column block ``[col, col + batch_size)`` of the padded chunk is
    scored for its first k rows, those with more than ``col`` samples (the rest are done), and
    padding never counts. x (N, *input_shape), y (N,) int64, ``index``: M int arrays into them.
    Returns correct (M,) int64 (Σ pred == label) and loss_sum (M,) float64 (Σ nll, summed in
    float64 in column order).
    """

    m = len(index)
    correct = torch.zeros(m, dtype=torch.int64, device=x.device)
    loss_sum = torch.zeros(m, dtype=torch.float64, device=x.device)
    sizes = np.array([len(i) for i in index])
    order = np.argsort(-sizes, kind="stable")
    for start in range(0, m, chunk):
        rows = order[start:start + chunk]
        rows_t = torch.as_tensor(rows, device=x.device)
        padded, valid = pad_index([index[r] for r in rows], x.device)
        score = prepare(rows_t)
        for col in range(0, padded.shape[1], batch_size):
            k = int((sizes[rows] > col).sum())
            batch, mask = padded[:k, col:col + batch_size], valid[:k, col:col + batch_size]
            labels = gather(y, batch)
            pred, nll = score(k, gather(x, batch), labels)
            correct[rows_t[:k]] += ((pred == labels) & mask).sum(1)
            loss_sum[rows_t[:k]] += torch.where(mask, nll.double(), 0.0).sum(1)
    return correct, loss_sum
