"""Chunks trained on worker threads (fedlib.engine.workers): the same bits as one thread, in the
same order, with subnormals flushed to zero in the workers only."""
from __future__ import annotations

import importlib
import threading
import time

import numpy as np
import pytest
import torch

from fedlib.engine import (SGD, Federation, broadcast, evaluate, flush_subnormals, local_train, max_workers,
                          stack_params)
from fedlib.engine.paths import chunk_workers
from fedlib.engine.workers import plan_workers, run_chunks
from fedlib.models import build_model, init_params

from fl_fixtures import assert_states_equal, ragged_federation

pytestmark = pytest.mark.cross_cpu  # thread workers: numbers from the CPU's kernels and thread count (make test-other-cpu)

CPU = torch.device("cpu")
SIZES = [45, 70, 3, 32, 1, 97, 40, 33]  # ragged: several step counts, a one-sample client


@pytest.fixture
def threads():
    """Set torch's thread count inside a test; the count it had is restored afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def fed():
    return ragged_federation(SIZES)


@pytest.mark.parametrize("n_chunks,threads,expected", [
    (0, 2, (1, 2)), (1, 2, (1, 2)), (2, 2, (2, 1)), (5, 2, (2, 1)), (5, 1, (1, 1)), (3, 8, (3, 2)), (9, 8, (8, 1)),
])
def test_plan_workers_splits_the_threads_over_at_most_one_worker_a_chunk(n_chunks, threads, expected):
    assert plan_workers(n_chunks, threads) == expected


def test_chunks_are_collected_in_order_whatever_finishes_first():
    """Later chunks finish first here (shorter jobs); ``collect`` still sees 0, 1, 2, …, one
    at a time, and a worker's resources are not reused before its chunk is collected."""
    n, workers = 9, 3
    busy = [None] * workers
    seen, inside = [], []
    lock = threading.Lock()

    def job(w, j):
        with lock:
            assert busy[w] is None, f"worker {w} took chunk {j} before chunk {busy[w]} was collected"
            busy[w] = j
        time.sleep(0.002 * (n - j))
        return w, j

    def collect(j, result):
        w, jj = result
        inside.append(1)
        assert len(inside) == 1, "two collects at once"
        time.sleep(0.001)
        seen.append(j)
        assert jj == j
        with lock:
            busy[w] = None
        inside.pop()

    run_chunks(n, job, collect, (workers, 1))
    assert seen == list(range(n))


def test_unordered_chunks_are_collected_as_they_finish_one_at_a_time():
    """``ordered=False``: chunk 0 cannot finish until the last chunk has been collected, so
    the other worker must collect chunks 1…n−1 without waiting for it (ordered, this would
    wait for the timeout); still one collect at a time, each chunk once, and a worker's
    resources are not reused before its chunk is collected."""
    n, workers = 6, 2
    last_collected = threading.Event()
    busy = [None] * workers
    seen, inside, waited = [], [], []
    lock = threading.Lock()

    def job(w, j):
        with lock:
            assert busy[w] is None, f"worker {w} took chunk {j} before chunk {busy[w]} was collected"
            busy[w] = j
        if j == 0:
            waited.append(last_collected.wait(timeout=10))
        return w, j

    def collect(j, result):
        w, jj = result
        inside.append(1)
        assert len(inside) == 1, "two collects at once"
        time.sleep(0.001)
        seen.append(j)
        assert jj == j
        if j == n - 1:
            last_collected.set()
        with lock:
            busy[w] = None
        inside.pop()

    run_chunks(n, job, collect, (workers, 1), ordered=False)
    assert waited == [True]
    assert seen == list(range(1, n)) + [0]


@pytest.mark.parametrize("ordered", [True, False])
def test_a_failing_chunk_stops_the_others_and_its_error_is_raised(ordered):
    """Ordered, the chunks collected are a prefix before the failing one; unordered, any of
    the others, each once — never the failing chunk, never after the failure."""
    collected = []

    def job(_w, j):
        if j == 3:
            raise ArithmeticError("chunk 3 failed")
        time.sleep(0.001)
        return j

    with pytest.raises(ArithmeticError, match="chunk 3 failed"):
        run_chunks(20, job, lambda j, r: collected.append(r), (2, 1), ordered=ordered)
    if ordered:
        assert collected == list(range(len(collected))) and len(collected) <= 3
    else:
        assert 3 not in collected and len(collected) == len(set(collected)) and len(collected) <= 5


def test_workers_run_on_their_share_of_threads_and_leave_the_default(threads):
    threads(2)
    counts = []
    run_chunks(4, lambda _w, _j: torch.get_num_threads(), lambda _j, r: counts.append(r), (2, 1))
    assert counts == [1, 1, 1, 1]
    assert torch.get_num_threads() == 2
    fresh = []
    t = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert fresh == [2]  # a new thread starts from the process's count again


def _train(fed, arch="cnn", **kwargs):
    # "cnn": a conv stack, the conv kernel; "mlp": a dense stack whose 256 × 256 layers run one
    # oneDNN product per client (fedlib.engine.dense), also trained on workers
    model = build_model(arch, 10, (1, 8, 8), **({"hidden": 256} if arch == "mlp" else {}))
    start = broadcast(init_params(model, seed=4), len(SIZES))
    return local_train(model, start, fed, range(len(SIZES)), epochs=2, seed=5, path="vectorised",
                       max_clients_per_chunk=2, return_opt_state=True, **kwargs)


def test_conv_stacks_and_wide_dense_stacks_on_cpu_train_chunks_side_by_side(threads):
    threads(2)
    cnn, mlp = build_model("cnn", 10, (1, 8, 8)), build_model("mlp", 10, (1, 8, 8), hidden=32)
    wide = build_model("mlp", 10, (1, 8, 8), hidden=256)  # 256 × 256 layers: per-client oneDNN products
    assert chunk_workers(cnn, CPU, 5) == (2, 1)
    assert chunk_workers(cnn, CPU, 1) == (1, 2)
    assert chunk_workers(wide, CPU, 5) == (2, 1)
    with max_workers(1):
        assert chunk_workers(cnn, CPU, 5) == (1, 2)
    assert chunk_workers(mlp, CPU, 5) is None  # the dense kernel on bmm: measured no faster
    assert chunk_workers(cnn, torch.device("cuda"), 5) is None  # one device, one stream of kernels


def _subnormal_product() -> float:
    """(1e-30 · 1e-10) in float32: 1e-40, a subnormal — or 0 where subnormals are flushed."""
    return float(torch.tensor([1e-30]) * torch.tensor([1e-10]))


def test_workers_flush_subnormals_and_the_calling_thread_keeps_them(threads):
    threads(2)
    for workers in ((2, 1), (1, 2)):  # one worker too: it still runs on a thread of its own
        seen = []
        run_chunks(3, lambda _w, _j: (_subnormal_product(), threading.current_thread()),
                   lambda _j, r: seen.append(r), workers)
        assert [value for value, _ in seen] == [0.0] * 3
        assert all(thread is not threading.main_thread() for _, thread in seen)
    assert _subnormal_product() != 0.0  # the caller's arithmetic is left as it was
    with flush_subnormals(False):
        seen = []
        run_chunks(3, lambda _w, _j: _subnormal_product(), lambda _j, r: seen.append(r), (2, 1))
        assert all(v != 0.0 for v in seen)
        with max_workers(1):  # one chunk at a time, subnormals kept: the calling thread itself
            where = []
            run_chunks(2, lambda _w, _j: threading.current_thread(), lambda _j, r: where.append(r), None)
            assert where == [threading.main_thread()] * 2
    with pytest.raises(ValueError, match=r"flush must be one of \[True, False\], got 1"):
        flush_subnormals(1)  # at the call, before any block starts


def test_conv_training_flushes_the_subnormal_gradients_of_a_saturated_softmax(fed):
    """A CNN whose softmax is saturated on class 0 (zero weights, output bias 100) trained on
    clients of class 0 only: the other classes' probabilities are e^-100 ≈ 4e-44, subnormal.
    With plain SGD their bias gradients step those biases from 0 to −4e-44-ish values; the
    workers flush them, so the biases stay exactly 0 — and keep them under
    ``flush_subnormals(False)``."""
    model = build_model("cnn", 10, (1, 8, 8))
    start = {n: torch.zeros_like(t) for n, t in init_params(model, seed=0).items()}
    last_bias = [n for n in start if n.endswith("bias")][-1]
    start[last_bias][0] = 100.0
    x, y = fed.x.numpy(), fed.y.numpy()
    zeros = np.flatnonzero(y == 0)[:60]
    one_class = Federation.from_arrays(x, y, [zeros[:30], zeros[30:]], [zeros[:5], zeros[5:10]], CPU)

    def bias_after(**settings):
        with flush_subnormals(settings.get("flush", True)):
            res = local_train(model, broadcast(start, 2), one_class, [0, 1], epochs=1, seed=0,
                              path="vectorised", max_clients_per_chunk=1, optimizer=SGD(lr=1.0))
        return res.params[last_bias][:, 1:]

    assert torch.equal(bias_after(), torch.zeros(2, 9))
    kept = bias_after(flush=False)
    assert (kept != 0).all() and (kept.abs() < 1e-37).all()


@pytest.mark.parametrize("arch", ["cnn", "mlp"])
def test_chunks_on_several_workers_give_the_bits_of_one_thread(fed, threads, arch):
    """4 chunks of 2 clients: one thread trains them one after another, 2 and 4 threads
    train them on 2 and 4 workers of one intra-op thread each — the same bits for weights,
    losses and optimiser state (a shared workspace or a row written to the wrong place would
    show here)."""
    runs = {}
    for t in (1, 2, 4):
        threads(t)
        runs[t] = _train(fed, arch)
    for t in (2, 4):
        assert_states_equal(runs[t].params, runs[1].params)
        assert torch.equal(runs[t].mean_loss, runs[1].mean_loss)
        for kind in ("exp_avg", "exp_avg_sq"):
            assert_states_equal(getattr(runs[t].opt_state, kind), getattr(runs[1].opt_state, kind))
        assert torch.equal(runs[t].opt_state.step, runs[1].opt_state.step)


def test_a_sink_gets_the_chunks_in_the_same_order_from_workers(fed, threads):
    """``sink`` (a streamed average sums in the order it is called) sees the chunks in the
    one-thread order, with the same rows and bits."""
    calls = {}
    for t in (1, 2):
        threads(t)
        got = []
        _train(fed, sink=lambda rows, trained: got.append(
            (rows.tolist(), {k: v.clone() for k, v in trained.items()})))
        calls[t] = got
    assert [rows for rows, _ in calls[2]] == [rows for rows, _ in calls[1]]
    assert_states_equal(stack_params([s for _, s in calls[2]]), stack_params([s for _, s in calls[1]]))


def test_sequential_evaluation_runs_clients_on_workers_with_the_bits_of_one_thread(fed, threads, monkeypatch):
    """A conv model's evaluation (the sequential path on the CPU): 2 and 4 threads evaluate the
    clients on 2 and 4 workers of one intra-op thread each, with the counts and loss sums of one
    thread, bit for bit (workers sharing one template, or a client's counts written to another
    row, would show); ``max_workers(1)`` keeps the calling thread."""
    E = importlib.import_module("fedlib.engine.evaluate")  # the module (fedlib.engine.evaluate is also the function)
    plans, real = [], E.run_chunks

    def spy(n_chunks, job, collect, workers=None, ordered=True):
        plans.append(workers)
        return real(n_chunks, job, collect, workers=workers, ordered=ordered)

    monkeypatch.setattr(E, "run_chunks", spy)
    model = build_model("cnn", 10, (1, 8, 8))
    models = stack_params([init_params(model, seed=s) for s in range(3)])
    clients = np.arange(len(SIZES))
    runs = {}
    for t in (1, 2, 4):
        threads(t)
        runs[t] = evaluate(model, models, fed, clients, split="train", batch_size=16, path="sequential",
                           model_of=clients % 3)
    assert plans == [None, (2, 1), (4, 1)]
    for t in (2, 4):
        assert torch.equal(runs[t].correct, runs[1].correct) and torch.equal(runs[t].n, runs[1].n)
        assert torch.equal(runs[t].loss_sum, runs[1].loss_sum)
    assert len(set(runs[1].loss_sum.tolist())) == len(SIZES)  # every row its own: a swap would show
    threads(2)
    with max_workers(1):
        alone = evaluate(model, models, fed, clients, split="train", batch_size=16, path="sequential",
                         model_of=clients % 3)
    assert plans[-1] is None and torch.equal(alone.correct, runs[1].correct)
