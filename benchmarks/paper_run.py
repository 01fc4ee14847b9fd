"""Time one paper-protocol run (Clust-PSI-PFL Sec. IV-A: T=40, E=5, q=0.5, Adam 1e-3, batch 32).

Usage: python benchmarks/paper_run.py [--dataset fmnist] [--protocol similarity] [--level 0]
                                      [--clients 100] [--method clust_psi_pfl] [--rounds 40]
                                      [--without-workers] [--keep-subnormals] [--tf32]
                                      [--nondeterministic] [--record DIR]
Prints one line: <dataset> <protocol>=<level> K=<K> <method> device=<d> rounds=<T>
seconds=<s> global_accuracy=<a>% tau=<τ> floor=<s> of_bound=<p>% shapes_floor=<s> of_shapes=<p>%
training=<s> workers=<on|off> subnormals=<flushed|kept> [gpu_kernels=<ieee|tf32>,<deterministic|any>]
peak=(<library> <rate> GFLOP/s, ...). On a GPU there is no shapes floor (n/a: ``peak.products_floor``);
``--tf32`` / ``--nondeterministic`` run inside ``fedlib.engine.gpu_kernels`` (the engine's default
is IEEE FP32 with deterministic cuDNN algorithms, ``fedlib/engine/precision.py``).
Nothing is cached: the run is computed afresh. ``training`` is the time spent in ``local_train``
(the rest: evaluation, clustering, set-up); ``--without-workers`` trains as before worker threads
(``fedlib.engine.without_workers()``: one chunk at a time in the calling thread, subnormals kept),
``--keep-subnormals`` on worker threads that keep subnormals (``flush_subnormals(False)``): the
A/B of ``fedlib.engine.workers``.

The floor is the bound no implementation can beat: the run's training arithmetic (forward
and backward FLOPs per sample, by torch's FLOP counter, times every sample every client
trained in every local epoch, counted as the run calls ``local_train``) at this machine's
measured float32 matmul peak (the faster of MKL's and oneDNN's, ``benchmarks/peak.py``).
of_bound = floor / seconds. The evaluation, the clustering and the optimiser's element-wise
update are not in it, so the bound is loose from below. ``shapes_floor`` is the same arithmetic
at the rates its own products reach (every product and convolution of one client's step of a
batch, timed alone on one thread: ``peak.products_floor``), over the threads; of_shapes =
shapes_floor / seconds.

``--record DIR`` also writes the run's figures as one JSON file in DIR (``benchmarks/_record.py``);
a run with fewer rounds or epochs than the paper's T = 40, E = 5 says so in the record
(``paper_protocol: false`` and a note).
"""
import argparse
import contextlib
import time

import torch

import _record
import fedlib.methods.base as methods_base
from fedlib.engine import flush_subnormals, gpu_kernels, without_workers
from fedlib.experiment import RunSpec, run
from peak import describe, matmul_peak, products_floor, step_flops


class _Counter:
    """Wraps ``local_train`` (as the methods call it) and adds up the FLOPs it trains and the
    seconds it takes."""

    def __init__(self, inner):
        self.inner, self.flops, self.seconds, self.per_sample = inner, 0.0, 0.0, {}
        self.shape_seconds = 0.0  # the same arithmetic at its products' own rates, one thread
        self.per_flop, self.measuring = {}, 0.0  # measuring: seconds spent timing the products (not the run's)

    def __call__(self, model, params, fed, clients, **kwargs):
        t0 = time.perf_counter()
        res = self.inner(model, params, fed, clients, **kwargs)
        self.seconds += time.perf_counter() - t0
        key = (type(model).__name__, tuple(fed.input_shape), sum(p.numel() for p in model.parameters()))
        if key not in self.per_sample:  # one step's FLOPs (torch's counter) and its products' times
            batch = kwargs.get("batch_size", 32)
            t1 = time.perf_counter()
            if fed.device.type == "cpu":
                seconds, flops = products_floor(model, fed.input_shape, batch)
            else:  # no shapes floor on a GPU (peak.products_floor): the FLOPs alone
                seconds, flops = float("nan"), step_flops(model, fed.input_shape, batch, fed.device)
            self.measuring += time.perf_counter() - t1
            self.per_sample[key], self.per_flop[key] = flops / batch, seconds / flops
        flops = self.per_sample[key] * float(res.n_samples.sum()) * kwargs["epochs"]
        self.flops += flops
        self.shape_seconds += flops * self.per_flop[key]
        return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--protocol", default="similarity")
    ap.add_argument("--level", type=float, default=0.0)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--method", default="clust_psi_pfl")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--without-workers", action="store_true",
                    help="train as before worker threads (fedlib.engine.without_workers())")
    ap.add_argument("--tf32", action="store_true",
                    help="on CUDA, let cuDNN/cuBLAS use TF32 (fedlib.engine.gpu_kernels(tf32=True))")
    ap.add_argument("--nondeterministic", action="store_true",
                    help="on CUDA, let cuDNN pick non-deterministic algorithms (gpu_kernels(deterministic=False))")
    ap.add_argument("--keep-subnormals", action="store_true",
                    help="workers keep subnormals (fedlib.engine.flush_subnormals(False))")
    _record.add_argument(ap)
    a = ap.parse_args(argv)
    spec = RunSpec(a.dataset, a.protocol, a.level, a.clients, a.seed, a.method,
                   fl={"rounds": a.rounds, "local_epochs": a.epochs, "fraction": 0.5})
    counter = _Counter(methods_base.local_train)
    methods_base.local_train = counter
    try:
        settings = (without_workers() if a.without_workers else
                    flush_subnormals(False) if a.keep_subnormals else contextlib.nullcontext())
        with settings, gpu_kernels(tf32=a.tf32, deterministic=not a.nondeterministic):
            t0 = time.perf_counter()
            rec = run(spec, device=a.device)
            seconds = time.perf_counter() - t0 - counter.measuring
    finally:
        methods_base.local_train = counter.inner
    device = torch.device(rec.get("device", "cpu"))
    peak, rates = matmul_peak(device)
    floor = counter.flops / peak
    shapes_floor = counter.shape_seconds / torch.get_num_threads()  # nan on a GPU: printed as n/a
    print(f"{a.dataset} {a.protocol}={a.level:g} K={a.clients} {a.method} device={rec.get('device')} "
          f"rounds={a.rounds} seconds={seconds:.1f} global_accuracy={100 * rec.get('global_accuracy', float('nan')):.2f}% "
          f"tau={rec.get('info', {}).get('tau')} floor={floor:.1f}s of_bound={floor / seconds:.0%} "
          + (f"shapes_floor={shapes_floor:.1f}s of_shapes={shapes_floor / seconds:.0%} " if device.type == "cpu"
             else "shapes_floor=n/a of_shapes=n/a ") +
          f"training={counter.seconds:.1f}s workers={'off' if a.without_workers else 'on'} "
          f"subnormals={'kept' if a.without_workers or a.keep_subnormals else 'flushed'} "
          + (f"gpu_kernels={'tf32' if a.tf32 else 'ieee'},{'any' if a.nondeterministic else 'deterministic'} "
             if device.type == "cuda" else "") + f"peak=({describe(rates)})")
    paper = (a.rounds, a.epochs) == (40, 5)
    cpu = device.type == "cpu"
    _record.save(a.record, "paper_run", a, [{
        "dataset": a.dataset, "protocol": a.protocol, "level": a.level, "clients": a.clients, "method": a.method,
        "rounds": a.rounds, "epochs": a.epochs, "paper_protocol": paper, "seconds": seconds,
        "training_s": counter.seconds, "global_accuracy": rec.get("global_accuracy"), "tau": rec.get("info", {}).get("tau"),
        "floor_s": floor, "of_bound": floor / seconds, "shapes_floor_s": shapes_floor if cpu else None,
        "of_shapes": shapes_floor / seconds if cpu else None, "workers": not a.without_workers,
        "subnormals": "kept" if a.without_workers or a.keep_subnormals else "flushed",
        "gpu_kernels": ({"tf32": a.tf32, "deterministic": not a.nondeterministic} if device.type == "cuda" else None),
        "peak_gflops": {lib: r / 1e9 for lib, r in rates.items()}}], device=device,
        notes=None if paper else [f"reduced protocol: T = {a.rounds}, E = {a.epochs} (the paper's T = 40, E = 5)"])


if __name__ == "__main__":
    main()
