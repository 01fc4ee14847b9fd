"""Per-client mini-batch schedules, seeded so they depend only on (seed, round, client, epoch).

Client ``k``'s shuffles in round ``t`` come from one generator seeded by
(seed, t, k); epoch ``e`` uses its (e+1)-th permutation, so the order of epoch ``e`` is
a function of (seed, t, k, e) alone. Both training paths consume the same
:class:`BatchPlan`, so a client sees the same batches whichever path trains it and
whichever other clients train beside it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BatchPlan", "batch_plan", "client_torch_seed"]

_SHUFFLE_STREAM, _DROPOUT_STREAM = 0, 1


def _sequence(seed: int, round_idx: int, client_id: int, stream: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, round_idx, client_id], spawn_key=(stream,))


def client_torch_seed(seed: int, round_idx: int, client_id: int) -> int:
    """Seed for a client's dropout masks in one round (used by the sequential path)."""
    state = _sequence(seed, round_idx, client_id, _DROPOUT_STREAM).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


@dataclass(frozen=True)
class BatchPlan:
    """One client's local-training schedule: S = epochs · ⌈n / B⌉ optimiser steps.

    Attributes
    ----------
    index : np.ndarray, shape (S, B), int64
        Sample indices into the pooled data; step ``s`` uses ``index[s, :count[s]]``
        (the rest of the row is padding that repeats a real index and gets weight 0).
    count : np.ndarray, shape (S,), int64
        Real samples per step: B, except the last step of each epoch (n mod B when
        non-zero) — DataLoader's ``drop_last=False``.
    last_epoch : np.ndarray, shape (S,), bool
        Steps of the final epoch (their losses make :attr:`TrainResult.mean_loss`).
    """

    index: np.ndarray
    count: np.ndarray
    last_epoch: np.ndarray

    @property
    def n_steps(self) -> int:
        return len(self.count)


def batch_plan(part: np.ndarray, epochs: int, batch_size: int, seed: int, round_idx: int,
               client_id: int, shuffle: bool = True) -> BatchPlan:
    """Shuffle-per-epoch mini-batches of a client's train indices ``part`` (shape (n,)).

    ``shuffle=False``: every epoch walks ``part`` in its stored order (a DataLoader without
    shuffling — what the PSI papers' FedLab baselines did).

    Returns
    -------
    BatchPlan
        Empty (S = 0) when ``part`` is empty.
    """
    n = len(part)
    per_epoch = -(-n // batch_size)
    steps = epochs * per_epoch
    index = np.empty((epochs, per_epoch * batch_size), dtype=np.int64)
    part = np.asarray(part, dtype=np.int64)
    if shuffle:
        # default_rng(seq) is Generator(PCG64(seq)); row e of ``order``: the generator's (e+1)-th
        # permutation of range(n), as E successive rng.permutation(n) (permuted in place: no copy)
        rng = np.random.Generator(np.random.PCG64(_sequence(seed, round_idx, client_id, _SHUFFLE_STREAM)))
        order = np.empty((epochs, n), dtype=np.int64)
        order[:] = np.arange(n)
        rng.permuted(order, axis=1, out=order)
        index[:, :n] = part[order]
    else:
        index[:, :n] = part
    index[:, n:] = index[:, :1]  # padding repeats a real index (weight 0); none when n = 0
    count = np.full(steps, batch_size, dtype=np.int64)
    count[per_epoch - 1::per_epoch or 1] = n - (per_epoch - 1) * batch_size
    last_epoch = np.zeros(steps, dtype=bool)
    last_epoch[steps - per_epoch:] = True
    return BatchPlan(index.reshape(steps, batch_size), count, last_epoch)
