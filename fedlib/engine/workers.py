"""Chunks trained on threads of their own: side by side, and with subnormal floats flushed to zero.

The vectorised path trains a call's clients chunk by chunk, and chunks share nothing: each
reads its own rows and writes its own rows. For the conv kernel on CPU, and the dense kernel
when a layer runs one oneDNN product per client (:func:`fedlib.engine.paths.chunk_workers` is
the rule), :func:`run_chunks` trains them on worker threads, for two reasons.

* **Side by side.** A chunk's kernels are small (two FMNIST-CNN clients: convolutions over
  32 images, products of 32 rows) and torch's intra-op parallelism, splitting each of them
  across the cores, got only 1.2× out of two threads for the FMNIST CNN (1.47 s → 1.21 s,
  ``benchmarks/engine_vs_sequential.py``, this project's 2-core CPU). W chunks at once on W
  threads of ``T // W`` intra-op threads each (T = ``torch.get_num_threads()``, W = min(T,
  chunks)) keep every core on whole kernels.
* **Subnormals flushed to zero** (the CPU's FTZ and DAZ modes), as TensorFlow's CPU thread
  pool does for every kernel it runs (the papers' authors trained in Keras). Subnormal
  floats (|x| < 1.2e-38) are 10–100× slower to compute with on x86, and the FMNIST CNN's
  clients produce them once their softmax saturates — at similarity S = 0 each client holds
  one class: a (4, 2048, 32) × (4, 32, 288) product of subnormal inputs takes 84 ms, 1 ms
  flushed, and the first FedAvg round of the paper's FMNIST protocol at S = 0 took 16.5 s,
  7.8 s flushed (K = 100, E = 5). The mode is per-thread CPU state: each worker sets it at
  its start, the intra-op threads a worker starts inherit it, and the calling thread (and
  everything else the process computes) keeps IEEE subnormals. The values differ only where
  a subnormal was flushed: by less than 1.2e-38 each.

Numbers: a chunk's kernels run on its worker's ``T // W`` intra-op threads, so its result
has the bits of that chunk trained alone at that thread count with subnormals flushed —
whichever worker trains it and in whatever order (tested: the same bits with 1, 2 and 4
workers). Results are handed to ``collect`` one chunk at a time: in chunk order when it sums
them (a streamed average: ``local_train``'s ``sink``), so that the sum is taken in the same
order as without workers; as they finish when each chunk only writes its own rows of the
result (``ordered=False``). With one thread (T = 1, or one chunk on one thread) the result is
that of one chunk after another.

The sequential evaluation of conv models on the CPU (:mod:`fedlib.engine.evaluate`) runs its
chunks of clients on the same workers, inside ``flush_subnormals(False)``: evaluation keeps
IEEE subnormals, as it did in the calling thread.

``max_workers(1)`` trains one chunk at a time, and ``flush_subnormals(False)`` keeps
subnormals; both together (:func:`without_workers`) give the engine as it was before
workers, bit for bit (one chunk at a time in the calling thread, on torch's threads): the
benchmarks' ``--without-workers``. A worker's torch thread count is its own (OpenMP, MKL and oneDNN read the
calling thread's); the process-wide default that new threads start from is restored when
it ends.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, TypeVar

import torch

from ..validation import check_choice, check_int

__all__ = ["plan_workers", "run_chunks", "max_workers", "flush_subnormals", "without_workers"]

R = TypeVar("R")
_CAP: list[int] = []  # the innermost max_workers block's cap, if any
_FLUSH: list[bool] = []  # the innermost flush_subnormals block's setting, if any


def max_workers(n: int) -> contextlib.AbstractContextManager:
    """A block (``with``) inside which at most ``n`` ≥ 1 chunks train at once (process-wide).

    ``max_workers(1)``: one chunk at a time, on all of torch's threads (e.g. a process that
    shares its cores with others).
    """
    check_int(n, "max_workers", 1)
    return _pushed(_CAP, int(n))


def flush_subnormals(flush: bool) -> contextlib.AbstractContextManager:
    """A block (``with``) inside which the workers flush subnormals to zero (True, the
    default) or keep them (False: IEEE arithmetic, as in the calling thread) (process-wide)."""
    return _pushed(_FLUSH, bool(check_choice(flush, "flush", (True, False))))


@contextlib.contextmanager
def without_workers() -> Iterator[None]:
    """``max_workers(1)`` and ``flush_subnormals(False)``: every chunk in the calling thread,
    one after another, on torch's threads, with IEEE subnormals — the engine before workers
    (the benchmarks' ``--without-workers``)."""
    with max_workers(1), flush_subnormals(False):
        yield


@contextlib.contextmanager
def _pushed(stack: list, value) -> Iterator[None]:
    """``value`` on top of ``stack`` for the block (validated before: arguments fail at the call)."""
    stack.append(value)
    try:
        yield
    finally:
        stack.pop()


def _flushing() -> bool:
    return _FLUSH[-1] if _FLUSH else True


def plan_workers(n_chunks: int, threads: int | None = None) -> tuple[int, int]:
    """(workers W, intra-op threads per worker) for ``n_chunks`` chunks on ``threads`` threads.

    W = max(1, min(T, n_chunks, the cap of an enclosing :func:`max_workers`)) and max(1, T // W)
    (T: ``threads``, default ``torch.get_num_threads()``): W · (T // W) ≤ T threads at once.
    """
    total = torch.get_num_threads() if threads is None else int(threads)
    cap = _CAP[-1] if _CAP else total
    workers = max(1, min(total, n_chunks, cap))
    return workers, max(1, total // workers)


def run_chunks(n_chunks: int, job: Callable[[int, int], R], collect: Callable[[int, R], None],
               workers: tuple[int, int] | None = None, ordered: bool = True) -> None:
    """``collect(j, job(w, j))`` for every chunk j in 0..n_chunks−1.

    ``job(w, j)`` trains chunk j with worker w's resources (used by one chunk at a time),
    concurrently for different j. ``collect(j, R)`` runs one chunk at a time, in chunk order —
    or, with ``ordered=False`` (for a ``collect`` that writes its own rows), as chunks finish,
    so no core idles behind a longer chunk (FMNIST CNN, 2 workers: 1.16–1.24 s ordered,
    1.11–1.19 s not); a worker's next ``job`` starts after its ``collect`` returned.
    ``workers``: (W, intra-op threads each) from :func:`plan_workers`: W threads, subnormals
    flushed (unless :func:`flush_subnormals` (False)); None, or W = 1 with subnormals kept:
    every chunk in the calling thread. The exception of a ``job`` or ``collect`` (the lowest
    chunk's) is raised after every worker stopped, no chunk collected after it; Ctrl-C stops
    the workers after their current chunk.
    """
    flush = _flushing()
    if workers is None or (workers[0] <= 1 and not flush):
        for j in range(n_chunks):
            collect(j, job(0, j))
        return
    n_workers, threads_each = workers
    restore = torch.get_num_threads()
    state = {"next": 0, "turn": 0, "stop": False}
    errors: dict[int, BaseException] = {}
    turn = threading.Condition()
    collecting = threading.Lock()  # unordered: one collect at a time, whichever chunk finished

    def fail(j: int, error: BaseException) -> None:
        with turn:
            errors[j] = error
            turn.notify_all()

    def halted() -> bool:  # called holding the lock
        return bool(errors) or state["stop"]

    def work(w: int) -> None:
        torch.get_num_threads()  # initialise this thread's count now: a later first call would reset it
        torch.set_num_threads(threads_each)
        torch.set_flush_denormal(flush)  # this thread's FTZ/DAZ; the threads it starts inherit them
        try:
            while True:
                with turn:
                    j = state["next"]
                    if j >= n_chunks or halted():
                        return
                    state["next"] = j + 1
                try:
                    result = job(w, j)
                except BaseException as e:  # noqa: BLE001 — re-raised by the caller
                    return fail(j, e)
                if not ordered:
                    with collecting:
                        with turn:
                            if halted():
                                return
                        try:
                            collect(j, result)
                        except BaseException as e:  # noqa: BLE001
                            return fail(j, e)
                    continue
                with turn:
                    while state["turn"] != j and not halted():
                        turn.wait()
                    if halted():
                        return
                try:  # outside the lock: only the chunk whose turn it is gets here
                    collect(j, result)
                except BaseException as e:  # noqa: BLE001
                    return fail(j, e)
                with turn:
                    state["turn"] = j + 1
                    turn.notify_all()
        finally:
            torch.set_num_threads(restore)

    threads = [threading.Thread(target=work, args=(w,), name=f"fedlib-chunk-{w}") for w in range(n_workers)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # e.g. Ctrl-C in a notebook: the workers stop after their current chunk
        with turn:
            state["stop"] = True
            turn.notify_all()
        raise
    if errors:
        raise errors[min(errors)]
