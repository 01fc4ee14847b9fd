"""Cost with many clients: the same data split over K = 10, 100, 1,000 clients.

For each model the same training pool (``--n-train`` examples, IID: similarity S = 1, so every
K splits the same examples into equal clients) is trained with FedAvg, q = 0.5, E local
epochs; each round therefore trains ≈ q · 0.8 · N examples whatever K is, and a cost that grows
with K is per-client overhead. Each (model, K) runs in a fresh subprocess (its peak memory is
its own): one FedAvg run of a warm-up round and ``--repeats`` timed rounds (more for rounds
of milliseconds, until about a second is timed), each round timed from the end of the
previous one to its own end (the run's logging hook, replaced by a clock); the fastest
counts.
Prints one line per (model, K)::

    scaling <model> <device> clients=<K> per_round=<ms>ms vs_K100=<x> chunk=<clients> workers=<W>
            paged_in=<MB>MB peak_rss=<MB>MB bound_rss=<MB>MB [peak_gpu=<MB>MB] average=<stacked|streamed>
            path=<engine path>
            examples_per_round=<n> client_steps=<n> steps_vs_K100=<x> per_client_step=<ms>ms

``vs_K100`` is the round's time over K = 100's (the issue's target: ≤ 1.5 at K = 1,000);
``steps_vs_K100`` the round's client steps over K = 100's, and ``per_client_step`` the round's
time over its client steps: a ``vs_K100`` below ``steps_vs_K100`` means a client step costs less
at that K, the rest of the ratio being the extra steps themselves;
``client_steps`` the optimiser steps the round's clients take together (Σ E·⌈n_k / B⌉): every
client takes at least one step per epoch, so with clients smaller than a batch this count — and
the per-step work that does not shrink with the batch (the optimiser's pass over each client's
weights, reading the weights in every matmul) — grows with K although the examples do not;
``paged_in`` the memory the kernel paged in per timed round (minor page faults × page size:
memory the round wrote for the first time — a count, unlike the times, free of other processes'
noise); ``peak_rss`` the process's peak resident memory after the round (``ru_maxrss``), and
``bound_rss`` the memory the issue bounds it by: the process before training (interpreter,
torch, the loaded data and federation) plus the stacked training state of the chunks in flight
(weights, gradients and two Adam moments: 4 × 4 bytes a weight, × clients per chunk × W, the
chunks trained side by side: ``fedlib.engine.workers``; ``workers=1``: one chunk at a time).
``--without-workers`` trains as before worker threads (``fedlib.engine.without_workers()``: one
chunk at a time in the calling thread, subnormals kept): the A/B.

``--stream-average`` runs FedAvg with ``FLConfig.stream_average`` (each chunk folded into the
average as it trains: no tensor holds every selected client's model; the lines then say
``average=streamed``, else ``average=stacked``).

``--device cuda`` runs the same rounds on a GPU (each round timed after its kernels finish;
``peak_gpu`` the GPU memory torch's allocator held at most; the memory bound is the CPU's).

Usage: python benchmarks/scaling.py [--models logistic fmnist_cnn] [--clients 10 100 1000]
       [--epochs 1] [--repeats 2] [--n-train 20000] [--stream-average] [--without-workers]
       [--device cpu|cuda|auto] [--record DIR]

``--record DIR`` also writes the run's figures as one JSON file in DIR (``benchmarks/_record.py``):
one row per (model, K) with the line's fields (times in seconds).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time

MODELS = {"logistic": ("adult", 32000), "fmnist_cnn": ("fmnist", 20000)}
"""model -> (dataset whose paper architecture it is, default training-pool size)."""
MIN_TIMED_SECONDS, MAX_REPEATS = 1.0, 100
"""Rounds of a few milliseconds are repeated until about a second is timed (at most
MAX_REPEATS): their minimum over two repeats moved by a third from run to run."""


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one(model: str, k: int, epochs: int, repeats: int, n_train: int | None, stream: bool = False,
        device: str = "cpu") -> dict:
    """Time FedAvg rounds of ``model`` at K = ``k`` in this process (under the caller's worker
    settings) on ``device``; return the measurements."""
    import numpy as np
    import torch

    from fedlib.engine.paths import chunk_workers, clients_per_chunk, resolve_path
    from fedlib.experiment import RunSpec, build_context
    from fedlib.methods.base import federated_averaging

    dataset, default_n = MODELS[model]
    spec = RunSpec(dataset, "similarity", 1.0, k, 0, "fedavg", n_train=n_train or default_n,
                   fl={"rounds": 1, "local_epochs": epochs, "fraction": 0.5, "stream_average": stream})
    ctx, _ = build_context(spec, device)
    cuda = ctx.fed.device.type == "cuda"
    everyone = [np.arange(ctx.n_clients)]
    x, _, _ = ctx.fed.split("train")
    path = resolve_path(ctx.cfg.path, ctx.model, ctx.fed.device, True)
    m = max(ctx.cfg.min_clients, int(ctx.cfg.fraction * k))
    chunk = clients_per_chunk(ctx.model, x[:1], ctx.cfg.batch_size, True, clients=m) if path == "vectorised" else 1
    plan = chunk_workers(ctx.model, ctx.fed.device, -(-m // chunk)) if path == "vectorised" else None
    workers = plan[0] if plan else 1  # chunks in flight
    weights = sum(p.numel() for p in ctx.model.parameters())
    before = _rss_mb()
    stamps = []  # (time, page faults) at the end of each round of one run

    def clock(*_args, **_kwargs):
        if cuda:  # the round's kernels are queued: wait for them
            torch.cuda.synchronize(ctx.fed.device)
        stamps.append((time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt))

    ctx.log_round = clock  # the run's logging hook (its evaluation is not timed)
    t0 = time.perf_counter()
    federated_averaging(ctx, everyone, rounds=1)  # the cost of one round, untimed
    n_timed = max(repeats, min(MAX_REPEATS, int(MIN_TIMED_SECONDS / (stamps[-1][0] - t0))))
    stamps.clear()
    federated_averaging(ctx, everyone, rounds=1 + n_timed)  # a warm-up round, then the timed ones
    times, faults = np.diff(np.array(stamps, dtype=np.float64), axis=0).T
    return {"model": model, "clients": k, "per_round": min(times), "average": "streamed" if stream else "stacked",
            "paged_in": float(faults.mean()) * resource.getpagesize() / 2 ** 20,
            "chunk": min(chunk, m), "workers": workers, "path": path,
            "peak_rss": _rss_mb(), "bound_rss": before + workers * min(chunk, m) * weights * 16 / 2 ** 20,
            "device": ctx.fed.device.type,
            "peak_gpu": torch.cuda.max_memory_allocated(ctx.fed.device) / 2 ** 20 if cuda else None,
            "examples_per_round": int(np.sort(ctx.fed.n_train)[-m:].sum()),
            "client_steps": int((-(-np.sort(ctx.fed.n_train)[-m:] // ctx.cfg.batch_size) * epochs).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["logistic", "fmnist_cnn"])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n-train", type=int, default=None, help="training pool (default: per model)")
    ap.add_argument("--stream-average", action="store_true", help="FLConfig.stream_average: no stacked round result")
    ap.add_argument("--without-workers", action="store_true",
                    help="train as before worker threads (fedlib.engine.without_workers()): the A/B")
    ap.add_argument("--device", default="cpu", help="cpu (the default), cuda or auto")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "K"), help=argparse.SUPPRESS)  # the subprocess
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _record
    _record.add_argument(ap)
    a = ap.parse_args()
    if a.one:
        from fedlib.engine import without_workers
        with without_workers() if a.without_workers else contextlib.nullcontext():
            print(json.dumps(one(a.one[0], int(a.one[1]), a.epochs, a.repeats, a.n_train, a.stream_average,
                                 a.device)))
        return
    records = []
    for model in a.models:
        rows = []
        for k in a.clients:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", model, str(k), "--epochs", str(a.epochs),
                   "--repeats", str(a.repeats), "--device", a.device] + (["--n-train", str(a.n_train)] if a.n_train else []) + (
                       ["--stream-average"] if a.stream_average else []) + (
                       ["--without-workers"] if a.without_workers else [])
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:  # the run's own error (a data set that does not load, say), not only its exit code
                sys.exit(f"scaling: {model} at K={k} failed (exit {out.returncode}):\n{out.stderr.strip()[-2000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        ref = next((r for r in rows if r["clients"] == 100), None)
        for r in rows:
            vs = f"{r['per_round'] / ref['per_round']:.2f}" if ref else "—"
            steps_vs = f"{r['client_steps'] / ref['client_steps']:.2f}" if ref else "—"
            gpu = f" peak_gpu={r['peak_gpu']:.0f}MB" if r.get("peak_gpu") is not None else ""
            print(f"scaling {model} {r['device']} clients={r['clients']} per_round={r['per_round'] * 1e3:.2f}ms vs_K100={vs} "
                  f"chunk={r['chunk']} workers={r['workers']} paged_in={r['paged_in']:.0f}MB "
                  f"peak_rss={r['peak_rss']:.0f}MB bound_rss={r['bound_rss']:.0f}MB{gpu} average={r['average']} "
                  f"path={r['path']} examples_per_round={r['examples_per_round']} client_steps={r['client_steps']} "
                  f"steps_vs_K100={steps_vs} per_client_step={r['per_round'] / r['client_steps'] * 1e3:.3f}ms",
                  flush=True)
            records.append({**r, "vs_K100": r["per_round"] / ref["per_round"] if ref else None,
                            "steps_vs_K100": r["client_steps"] / ref["client_steps"] if ref else None,
                            "per_client_step": r["per_round"] / r["client_steps"]})
    device = records[0]["device"] if records else "cpu"
    _record.save(a.record, "scaling", {k: v for k, v in vars(a).items() if k != "one"}, records, device=device)


if __name__ == "__main__":
    main()
