"""pFedLIA's influence matrix (Eq. 1): one batched evaluation vs. the K² loop.

Every client i scores every client j: Σ_{z∈val_i} L(z, θ0) − L(z, θ̂_j), i.e. the losses of K + 1
models (θ̂_0 … θ̂_{K−1}, θ0) on K validation splits. fedlib computes them in one call
(``fedlib.engine.evaluate.loss_matrix``: (model, client) pairs as rows of the engine's batched
evaluation); the plain way is a loop over the (K + 1)·K pairs, one ``evaluate`` call each. The
bound no implementation can beat: the same (K + 1)·Σ n_val forward passes through ONE model in
batches of 256 like the engine's (no per-pair weights to load). The data: FMNIST's pathological partition (5
clusters, K clients, 20 % validation); the K + 1 models are differently seeded initial
weights (the cost does not depend on the weights). Prints::

    influence clients=<K> pairs=<P> loop=<s>s batched=<s>s floor=<s>s batched_vs_loop=<x> floor_fraction=<f>

and checks that the two give the same matrix (up to float rounding).

Usage: python benchmarks/influence_matrix.py [--clients 100] [--arch fmnist_cnn] [--n-train 60000] [--record DIR]

``--record DIR`` also writes the run's figures as one JSON file in DIR (``benchmarks/_record.py``).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

import _record
from fedlib import partition as P
from fedlib.datasets import load, subsample
from fedlib.engine import Federation, evaluate
from fedlib.engine.evaluate import loss_matrix
from fedlib.methods.base import take
from fedlib.models import build_model, init_params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--arch", default="fmnist_cnn")
    ap.add_argument("--n-train", type=int, default=60_000)
    _record.add_argument(ap)
    args = ap.parse_args()
    ds = load("fmnist")
    if args.n_train < len(ds.y_train):
        ds = subsample(ds, args.n_train, None, seed=0)
    parts = P.partition(ds.y_train, "pathological_clusters", args.clients, 5, 0)
    train, val, test = P.train_val_test_split(parts, 0, 0.2, 0.2)
    fed = Federation.from_arrays(ds.x_train, ds.y_train, train, test, "cpu", n_classes=10, val_parts=val)
    model = build_model(args.arch, 10, ds.input_shape)
    states = [init_params(model, s) for s in range(args.clients + 1)]
    models = {k: torch.stack([s[k] for s in states]) for k in states[0]}
    clients = np.arange(args.clients)

    t = time.perf_counter()
    batched = loss_matrix(model, models, fed, clients, split="val", reduction="sum").loss.numpy()
    t_batched = time.perf_counter() - t

    t = time.perf_counter()
    loop = np.empty_like(batched)
    for j in range(args.clients + 1):
        row = take(models, [j])
        for i in clients:
            loop[j, i] = float(evaluate(model, row, fed, [i], split="val").loss_sum[0])
    t_loop = time.perf_counter() - t
    np.testing.assert_allclose(batched, loop, rtol=1e-4, atol=1e-3)

    x, y, parts_val = fed.split("val")
    idx = torch.as_tensor(np.concatenate([parts_val[i] for i in clients]))
    net = model.eval()
    t = time.perf_counter()
    with torch.no_grad():
        for _ in range(args.clients + 1):
            for b in range(0, len(idx), 256):
                F.cross_entropy(net(x[idx[b:b + 256]]), y[idx[b:b + 256]], reduction="sum")
    t_floor = time.perf_counter() - t
    pairs = (args.clients + 1) * args.clients
    print(f"influence clients={args.clients} pairs={pairs} loop={t_loop:.2f}s batched={t_batched:.2f}s "
          f"floor={t_floor:.2f}s batched_vs_loop={t_loop / t_batched:.1f} floor_fraction={t_floor / t_batched:.2f}")
    _record.save(args.record, "influence_matrix", args, [{
        "clients": args.clients, "arch": args.arch, "n_train": args.n_train, "pairs": pairs, "loop_s": t_loop,
        "batched_s": t_batched, "floor_s": t_floor, "batched_vs_loop": t_loop / t_batched,
        "floor_fraction": t_floor / t_batched}])


if __name__ == "__main__":
    main()
