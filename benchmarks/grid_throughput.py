"""Runs per minute of one grid: one run per process in a pool, against all of them in one process
trained together (:func:`fedlib.together.run_together`, one engine call per round).

The same N small runs (FedAvg, FedProx and FedAdam over Dirichlet levels and seeds; adult's MLP
on a stratified subsample by default, ``--dataset fmnist`` for the CNN) are computed twice:

(a) ``pool``: each run by :func:`fedlib.experiment.run` in a pool of ``--processes`` spawned
    processes (``benchmarks/paper_grid.py --workers``' way: ``cores // P`` torch threads each),
    timed from the moment every worker has imported fedlib;
(b) ``together``: all N in this process by ``run_together`` (torch's default thread count),
    the data, training and evaluation included, as in (a).

One line, the ratios against the pool measured in the same script::

    grid_throughput <device> <dataset> runs=<N> processes=<P> pool=<s>s (<r>/min)
        together=<s>s (<r>/min) together/pool=<x> per_cpu=<y> bitwise_equal=<k>/<N> max_delta_accuracy=<d>

``together/pool`` > 1: batching computes more runs per minute (wall clock; the pool on P
processes, the one process on torch's threads). ``per_cpu`` = the pool's CPU-seconds / the
together process's (each the sum of its records' ``cpu_seconds``): > 1, batching computes more runs
per CPU-hour — what decides it on a machine whose cores are all busy with runs anyway. ``bitwise_equal``: how many of
(b)'s records equal (a)'s bit for bit (timing and host aside); ``max_delta_accuracy``: the
largest difference of their weighted local accuracies (0 when all are equal; the engine's kernel
rounding otherwise, :mod:`fedlib.together`). On the CPU the cost is per client step either way,
so expect a ratio near or below P's share of the cores; on a GPU one wide call replaces many
narrow ones. ``--n-train 0`` (the whole training set), ``--clients 100 --fraction 0.5 --epochs 5``:
Table III's federation and protocol (Clust-PSI-PFL Table II), at ``--rounds`` rounds. No timing is asserted anywhere; ``--record DIR`` writes the figures as JSON
(``benchmarks/_record.py``).

Usage: OMP_NUM_THREADS=1 python benchmarks/grid_throughput.py [--device cpu|cuda] [--runs 12]
       [--processes 2] [--dataset adult] [--n-train 2000] [--clients 10] [--rounds 3] [--epochs 1]
       [--fraction Q] [--record DIR]
"""
from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import time

import _record

METHODS = ("fedavg", "fedprox", "fedadam")
LEVELS = (0.1, 1.0, 10.0)
TIMING = ("seconds", "cpu_seconds", "host")


def specs_for(args) -> list:
    """N specs: methods × levels × seeds, in that order of variation, the first N."""
    from fedlib.experiment import RunSpec

    fl = {"rounds": args.rounds, "local_epochs": args.epochs}
    if args.fraction is not None:
        fl["fraction"] = args.fraction
    combos = ((m, lvl, seed) for seed in itertools.count() for lvl in LEVELS for m in METHODS)
    n_train = args.n_train or None  # 0: the whole training set
    return [RunSpec(args.dataset, "dirichlet", lvl, args.clients, seed, m, fl=fl, n_train=n_train)
            for m, lvl, seed in itertools.islice(combos, args.runs)]


def _init_worker(threads: int) -> None:
    import torch

    import fedlib.experiment  # noqa: F401  (imported before the clock starts)

    torch.set_num_threads(threads)


def _ready(_=None) -> int:
    return os.getpid()


def _run(spec, device):
    from fedlib.experiment import run

    return run(spec, device)


def pool_run(specs, device: str, processes: int) -> tuple[float, list[dict]]:
    """Seconds for every spec on a pool of ``processes`` spawned workers, and their records."""
    from concurrent.futures import ProcessPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // processes)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=ctx, initializer=_init_worker, initargs=(threads,)) as pool:
        list(pool.map(_ready, range(processes)))  # every worker started and has imported fedlib
        t = time.perf_counter()
        records = list(pool.map(_run, specs, itertools.repeat(device)))
        return time.perf_counter() - t, records


def together_run(specs, device: str) -> tuple[float, list[dict]]:
    import torch

    from fedlib.together import group_specs, run_together

    t = time.perf_counter()
    records = {}
    for group in group_specs(specs):
        for s, rec in zip(group, run_together(group, device)):
            records[s.key()] = rec
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, [records[s.key()] for s in specs]


def computed(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k not in TIMING}, sort_keys=True)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--dataset", default="adult")
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--fraction", type=float, default=None, help="clients a round (FLConfig's default if left out)")
    _record.add_argument(ap)
    args = ap.parse_args(argv)
    if args.runs < 1 or args.processes < 1:
        ap.error("--runs and --processes must be ≥ 1")
    if args.n_train < 0:
        ap.error(f"--n-train must be ≥ 0 (0: the whole training set), got {args.n_train}")
    from fedlib.engine import resolve_device

    device = str(resolve_device(args.device))
    specs = specs_for(args)
    for s in specs:
        s.validate()
    pool_s, pool_recs = pool_run(specs, device, args.processes)
    together_s, together_recs = together_run(specs, device)
    equal = sum(computed(a) == computed(b) for a, b in zip(pool_recs, together_recs))
    delta = max(abs(a.get("global_accuracy", 0.0) - b.get("global_accuracy", 0.0))
                for a, b in zip(pool_recs, together_recs))
    pool_cpu = sum(r["cpu_seconds"] for r in pool_recs)
    together_cpu = sum(r["cpu_seconds"] for r in together_recs)  # the group's CPU time, split evenly
    row = {"runs": args.runs, "processes": args.processes, "dataset": args.dataset,
           "pool_seconds": pool_s, "together_seconds": together_s,
           "pool_cpu_seconds": pool_cpu, "together_cpu_seconds": together_cpu,
           "together_over_pool_per_cpu": pool_cpu / together_cpu,
           "pool_runs_per_minute": 60 * args.runs / pool_s, "together_runs_per_minute": 60 * args.runs / together_s,
           "together_over_pool": pool_s / together_s, "bitwise_equal": equal, "max_delta_accuracy": delta}
    print(f"grid_throughput {device} {args.dataset} runs={args.runs} processes={args.processes} "
          f"pool={pool_s:.2f}s ({row['pool_runs_per_minute']:.1f}/min) "
          f"together={together_s:.2f}s ({row['together_runs_per_minute']:.1f}/min) "
          f"together/pool={row['together_over_pool']:.2f} per_cpu={row['together_over_pool_per_cpu']:.2f} bitwise_equal={equal}/{args.runs} "
          f"max_delta_accuracy={delta:.3g}", flush=True)
    _record.save(args.record, "grid_throughput", args, [row], device=device)
    return row


if __name__ == "__main__":
    main()
