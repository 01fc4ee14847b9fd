"""Per-client mini-batch schedules, seeded so they depend only on (seed, round, client, epoch).

Client ``k``'s shuffles in round ``t`` come from one generator seeded by
(seed, t, k); epoch ``e`` uses its (e+1)-th permutation, so the order of epoch ``e`` is
a function of (seed, t, k, e) alone. Both training paths consume the same
:class:`BatchPlan`, so a client sees the same batches whichever path trains it and
whichever other clients train beside it.

:func:`batch_plans` builds a round's plans for all its clients at once — the seeds of every
client in one vectorised pass of NumPy's SeedSequence arithmetic (:func:`shuffle_states`), the
same streams bit for bit (pinned by ``test_batch_plan_streams_are_the_documented_ones`` and
``test_shuffle_states_are_numpys_seed_sequence``) at a fifth of the cost per client, which is
what a round of many small clients spent most of its time on.
"""
from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import numpy as np
from numpy.random.bit_generator import ISeedSequence

__all__ = ["BatchPlan", "batch_plan", "batch_plans", "client_torch_seed", "shuffle_states"]

_SHUFFLE_STREAM, _DROPOUT_STREAM = 0, 1


def _sequence(seed: int, round_idx: int, client_id: int, stream: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, round_idx, client_id], spawn_key=(stream,))


def client_torch_seed(seed: int, round_idx: int, client_id: int) -> int:
    """Seed for a client's dropout masks in one round (used by the sequential path)."""
    state = _sequence(seed, round_idx, client_id, _DROPOUT_STREAM).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


# NumPy's SeedSequence (O'Neill's seed_seq_fe, pool of 4 uint32 words): its constants.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _XSHIFT, _POOL = 0xCA01F9DD, 0x4973F715, np.uint32(16), 4
_VECTORISE_FROM = 16  # clients; below it the arrays' fixed cost exceeds SeedSequence's


def _words(n: int) -> list[int]:
    """A non-negative int as SeedSequence reads it: little-endian 32-bit words, at least one."""
    n = int(n)
    out = [n & 0xFFFFFFFF]
    while n >> 32:
        n >>= 32
        out.append(n & 0xFFFFFFFF)
    return out


def shuffle_states(seed: int, round_idx: int, clients) -> np.ndarray:
    """``SeedSequence([seed, round_idx, k], spawn_key=(0,)).generate_state(4, uint64)`` for
    every client k: the words each client's PCG64 is seeded from. Shape (M, 4), uint64.

    From :data:`_VECTORISE_FROM` clients on, the same arithmetic as NumPy's SeedSequence
    (entropy assembly, pool mixing, output hashing; uint32 wrap-around) runs on arrays over
    the clients instead of one client at a time: ≈ 1 µs a client at M = 500 against
    ≈ 20 µs for SeedSequence + generate_state. Fewer clients take SeedSequence itself.
    ``test_shuffle_states_are_numpys_seed_sequence`` holds both to NumPy's output.
    """
    clients = np.asarray(clients, dtype=np.int64).reshape(-1)
    if clients.size and (clients.min() < 0 or clients.max() >= 2 ** 32):
        raise ValueError(f"client ids must lie in [0, 2**32), got {clients.min()}..{clients.max()}")
    if len(clients) < _VECTORISE_FROM:
        return np.array([_sequence(seed, round_idx, int(k), _SHUFFLE_STREAM).generate_state(4, np.uint64)
                         for k in clients], dtype=np.uint64).reshape(-1, 4)
    m, u32 = len(clients), np.uint32
    run = [np.full(m, w, dtype=u32) for w in _words(seed) + _words(round_idx)] + [clients.astype(u32)]
    run += [np.zeros(m, dtype=u32)] * max(0, _POOL - len(run))  # a spawn key pads the run entropy to the pool
    entropy = run + [np.full(m, w, dtype=u32) for w in _words(_SHUFFLE_STREAM)]
    const = _INIT_A  # Python ints for the scalar chain: array ops wrap silently, scalar ones would warn

    def hashmix(v):
        nonlocal const
        v = v ^ const
        const = const * _MULT_A & 0xFFFFFFFF
        v = v * u32(const)
        return v ^ (v >> _XSHIFT)

    def mix(x, y):
        r = x * u32(_MIX_L) - y * u32(_MIX_R)
        return r ^ (r >> _XSHIFT)

    pool = [hashmix(entropy[i]) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(_POOL, len(entropy)):
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    out = np.empty((m, 8), dtype=u32)  # generate_state(4, uint64): 8 words, little-endian pairs
    const = _INIT_B
    for i in range(8):
        v = pool[i % _POOL] ^ const
        const = const * _MULT_B & 0xFFFFFFFF
        v = v * u32(const)
        out[:, i] = v ^ (v >> _XSHIFT)
    return out.astype("<u4").view("<u8").astype(np.uint64)


class _Seeded(ISeedSequence):
    """Hands PCG64 the words :func:`shuffle_states` computed (what SeedSequence would)."""

    __slots__ = ("state",)

    def __init__(self, state: np.ndarray):
        self.state = state

    def generate_state(self, n_words, dtype=np.uint32):
        if n_words != 4 or np.dtype(dtype) != np.uint64:  # PCG64 asks for exactly this
            raise ValueError(f"precomputed state holds 4 uint64 words, asked for {n_words} {np.dtype(dtype)}")
        return self.state


class BatchPlan(NamedTuple):
    """One client's local-training schedule: S = epochs · ⌈n / B⌉ optimiser steps.

    A named tuple (immutable; half the construction cost of a frozen dataclass — a round of
    500 clients builds 500 of them).

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
    shuffling — what the PSI papers' FedLab baselines did). One client of :func:`batch_plans`;
    an empty plan (S = 0) when ``part`` is empty.
    """
    return batch_plans([part], epochs, batch_size, seed, round_idx, [client_id], shuffle)[0]


def batch_plans(parts, epochs: int, batch_size: int, seed: int, round_idx: int, clients,
                shuffle: bool = True) -> list[BatchPlan]:
    """:func:`batch_plan` for M clients at once: ``[batch_plan(parts[i], …, clients[i], shuffle)
    for i in range(M)]``.

    ``parts[i]``: client ``clients[i]``'s train indices (n_i,), or an int n_i for positions in
    its own split (``arange(n_i)``, what the vectorised path indexes; a (M,) int array is M such
    sizes). ``seed``: one int, or (M,) one per plan (rows of several runs trained together,
    :mod:`fedlib.together`). Generators are seeded in one pass (:func:`shuffle_states`) and the
    clients of one size share arrays and one index block: ≈ 4 µs a plan instead of ≈ 55.
    """

    states = _row_states(seed, round_idx, clients) if shuffle else None
    if isinstance(parts, np.ndarray) and parts.ndim == 1 and parts.dtype.kind in "iu":
        sizes, own = parts.astype(np.int64), None  # sizes only: positions (the vectorised path's call)
    else:
        own = [None if isinstance(part, (int, np.integer)) else np.asarray(part, dtype=np.int64) for part in parts]
        sizes = np.array([int(part) if rows is None else len(rows) for part, rows in zip(parts, own)], dtype=np.int64)
    plans: list[BatchPlan | None] = [None] * len(sizes)
    by_size = np.argsort(sizes, kind="stable")
    for group in np.split(by_size, np.flatnonzero(np.diff(sizes[by_size])) + 1) if len(by_size) else []:
        # the clients of one size share one index block (G, E, steps per epoch · B) and the layout
        n = int(sizes[group[0]])
        count, last_epoch = _layout(n, epochs, batch_size)
        index = np.empty((len(group), epochs, len(count) // epochs * batch_size), dtype=np.int64)
        order = index[:, :, :n]
        order[:] = np.arange(n)
        rows = group.tolist()
        if shuffle:
            # Client k's generator is Generator(PCG64(SeedSequence([seed, t, k], spawn_key=(0,)))); row e of
            # ``order[j]`` is its (e+1)-th permutation of range(n), as E successive rng.permutation(n) (one
            # epoch: ``shuffle`` of the row, the same Fisher–Yates draws with less argument handling). Where
            # :func:`_reseeding_is_fresh` holds, one PCG64 is re-seeded per client (``__init__`` again: state
            # and buffered half-word reset, as a new one's) under one Generator, which reads that PCG64's
            # state in place: 0.74 µs a client against 0.96 for a new pair. ``test_batch_plans_for_many_clients_are_the_documented_streams``
            # holds every client to a fresh default_rng's stream.
            reseed = _reseeding_is_fresh()
            seeded, gen = _Seeded(None), None
            if reseed:
                bits = np.random.PCG64(_Seeded(np.zeros(4, dtype=np.uint64)))
                gen = np.random.Generator(bits)
            for j, i in enumerate(rows):
                if reseed:
                    seeded.state = states[i]
                    bits.__init__(seeded)
                else:  # another NumPy than this one's layout: a new pair per client
                    gen = np.random.Generator(np.random.PCG64(_Seeded(states[i])))
                if epochs == 1:
                    gen.shuffle(order[j, 0])
                else:
                    gen.permuted(order[j], axis=1, out=order[j])
        if own is not None:
            for j, i in enumerate(rows):
                if own[i] is not None:
                    order[j] = own[i][order[j]]
        index[:, :, n:] = index[:, :, :1]  # padding repeats a real index (weight 0); none when n = 0
        steps = index.reshape(len(group), len(count), batch_size)
        for i, plan in zip(rows, map(BatchPlan._make, zip(steps, itertools.repeat(count), itertools.repeat(last_epoch)))):
            plans[i] = plan
    return plans


def _row_states(seed, round_idx: int, clients) -> np.ndarray:
    """:func:`shuffle_states` of every row, (M, 4) uint64: one seed for all rows, or one per row
    (an (M,) array; the rows of each distinct seed in one :func:`shuffle_states` call — a row's
    words depend only on its own (seed, round, client), so the split changes no bit)."""
    if np.ndim(seed) == 0:
        return shuffle_states(int(seed), round_idx, clients)
    seeds = np.asarray(seed, dtype=np.int64).reshape(-1)
    clients = np.asarray(clients, dtype=np.int64).reshape(-1)
    if seeds.shape != clients.shape:
        raise ValueError(f"seed must be an int or one per client ({len(clients)},), got shape {seeds.shape}")
    states = np.empty((len(clients), 4), dtype=np.uint64)
    for value in np.unique(seeds):
        rows = np.flatnonzero(seeds == value)
        states[rows] = shuffle_states(int(value), round_idx, clients[rows])
    return states


@functools.cache
def _reseeding_is_fresh() -> bool:
    """Whether a PCG64 re-seeded in place (``__init__`` again) under an existing Generator gives
    the stream of a new Generator(PCG64(...)) — NumPy's layout, where the Generator reads its
    bit generator's state where it lies and a re-seed resets the buffered half-word. Checked
    once per process on two seeds (the first leaves a buffered half-word), so that another NumPy
    falls back to a new pair per client instead of silently other streams."""
    states = [np.array([w, w + 1, w + 2, w + 3], dtype=np.uint64) for w in (11, 29)]
    seeded = _Seeded(states[0])
    bits = np.random.PCG64(seeded)
    gen = np.random.Generator(bits)
    got = [gen.permutation(6)]
    seeded.state = states[1]
    bits.__init__(seeded)
    got.append(gen.permutation(6))
    fresh = [np.random.Generator(np.random.PCG64(_Seeded(st))).permutation(6) for st in states]
    return all(np.array_equal(a, b) for a, b in zip(got, fresh))


@functools.lru_cache(maxsize=1024)
def _layout(n: int, epochs: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """For a client of n samples: the (S,) step counts (B, the epoch's last one n mod B
    when non-zero) and the (S,) last-epoch flags — read-only, shared by every plan of this
    shape (cached across calls and rounds)."""
    per_epoch = -(-n // batch_size)
    steps = epochs * per_epoch
    count = np.full(steps, batch_size, dtype=np.int64)
    count[per_epoch - 1::per_epoch or 1] = n - (per_epoch - 1) * batch_size
    last_epoch = np.zeros(steps, dtype=bool)
    last_epoch[steps - per_epoch:] = True
    count.flags.writeable = last_epoch.flags.writeable = False
    return count, last_epoch
