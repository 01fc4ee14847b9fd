"""Evaluation on path='auto' against both paths, in one process: "auto" must never be slower
than the sequential loop.

For each model, two evaluations are timed along ``path='sequential'``, ``'vectorised'`` and
``'auto'`` (the three alternating ``--repeat`` times, each keeping its best):

* ``global``: M stacked models each scored on the same N images
  (``fedlib.engine.evaluate_global``: FedPrism's global accuracy, every client's model on the
  official test set);
* ``clients``: K clients' own models each scored on the client's own test split of n images
  (``fedlib.engine.evaluate``: every run's local accuracies).

One line per model and evaluation::

    eval <model> <device> <evaluation> <size> auto=<path> sequential=<s>s vectorised=<s>s
         auto_time=<s>s auto/sequential=<x> [AUTO SLOWER]      (one line)

``AUTO SLOWER`` flags a model on which auto's time exceeds the sequential path's by more than
the noise margin ``--margin`` (default 10 %): the choice in ``fedlib.engine.paths`` is then
wrong for this machine and model. Where auto resolves to the sequential path the two time the
same code and the ratio is noise around 1. The inputs are synthetic (seeded): evaluation time
does not depend on the values.

Usage: OMP_NUM_THREADS=1 python benchmarks/eval_paths.py [--device cpu|cuda] [--models 10]
       [--images 1000] [--clients 50] [--client-images 40] [--repeat 3]
       [--archs logistic,mlp,embed_dnn,lenet5,fmnist_cnn,cnn] [--margin 0.1]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fedlib.engine import Federation, evaluate, evaluate_global
from fedlib.engine.paths import resolve_path
from fedlib.models import build_model, init_params

#: (input shape, classes) each architecture is timed with: the data sets the papers use it on.
SHAPES = {"logistic": ((784,), 10), "mlp": ((16,), 26), "embed_dnn": ((100,), 2), "lenet5": ((1, 28, 28), 10),
          "fmnist_cnn": ((1, 28, 28), 10), "cnn": ((1, 28, 28), 10), "cifar_cnn": ((3, 32, 32), 10)}


def data(shape, n_classes, n, rng):
    """n seeded inputs of ``shape`` (token ids below 2,000 for a text model) and labels."""
    x = (rng.integers(0, 2000, (n, *shape)) if len(shape) == 1 and shape[0] == 100
         else rng.random((n, *shape), dtype=np.float32))
    return x, rng.integers(0, n_classes, n)


def stacked(model, m: int, device) -> dict:
    """M distinct models (seeds 0..M−1), stacked: (M, *shape) each."""
    states = [init_params(model, seed=s) for s in range(m)]
    return {k: torch.stack([s[k] for s in states]).to(device) for k in states[0]}


def time_paths(arch: str, evaluation: str, m: int, n: int, device: str, repeat: int) -> dict:
    """Best seconds of each path (and auto's resolved path) for ``m`` models on ``n`` images
    each: shared images (``'global'``) or each client's own (``'clients'``)."""
    shape, n_classes = SHAPES[arch]
    rng = np.random.default_rng(0)
    dev = torch.device(device)
    if evaluation == "global":
        x, y = data(shape, n_classes, n, rng)
        one = [np.arange(2)]
        fed = Federation.from_arrays(x, y, one, one, dev, n_classes=n_classes, x_global=x, y_global=y)
    else:
        x, y = data(shape, n_classes, 2 * m * n, rng)
        train = [np.arange(i * n, (i + 1) * n) for i in range(m)]
        test = [np.arange((m + i) * n, (m + i + 1) * n) for i in range(m)]
        fed = Federation.from_arrays(x, y, train, test, dev, n_classes=n_classes)
    model = build_model(arch, n_classes, shape, **({"vocab_size": 2000} if arch == "embed_dnn" else {})).to(dev)
    params = stacked(model, m, dev)
    best = {p: float("inf") for p in ("sequential", "vectorised", "auto")}
    for _ in range(repeat):
        for path in best:
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if evaluation == "global":
                evaluate_global(model, params, fed, path=path)
            else:
                evaluate(model, params, fed, np.arange(m), path=path)
            if device == "cuda":
                torch.cuda.synchronize()
            best[path] = min(best[path], time.perf_counter() - t0)
    return {"auto_path": resolve_path("auto", model, dev, training=False), **best}


def line(arch: str, evaluation: str, size: str, device: str, t: dict, margin: float) -> str:
    ratio = t["auto"] / t["sequential"]
    flag = "  AUTO SLOWER" if ratio > 1 + margin else ""
    return (f"eval {arch} {device} {evaluation} {size} auto={t['auto_path']} sequential={t['sequential']:.3f}s "
            f"vectorised={t['vectorised']:.3f}s auto_time={t['auto']:.3f}s auto/sequential={ratio:.2f}{flag}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--models", type=int, default=10, help="M of the global evaluation")
    ap.add_argument("--images", type=int, default=1000, help="N of the global evaluation")
    ap.add_argument("--clients", type=int, default=50, help="K of the clients' evaluation")
    ap.add_argument("--client-images", type=int, default=40, help="test images per client")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--archs", default="logistic,mlp,embed_dnn,lenet5,fmnist_cnn,cnn")
    ap.add_argument("--margin", type=float, default=0.1)
    args = ap.parse_args(argv)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeat}", flush=True)
    for arch in args.archs.split(","):
        runs = (("global", args.models, args.images, f"models={args.models} images={args.images}"),
                ("clients", args.clients, args.client_images, f"clients={args.clients} images={args.client_images}"))
        for evaluation, m, n, size in runs:
            t = time_paths(arch, evaluation, m, n, args.device, args.repeat)
            print(line(arch, evaluation, size, args.device, t, args.margin), flush=True)


if __name__ == "__main__":
    main()
