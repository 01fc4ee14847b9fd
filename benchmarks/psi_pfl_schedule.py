"""PSI-PFL's five threshold candidates trained one by one against side by side, in one process.

``psi_pfl``'s ``train_candidates`` schedules the candidates' FedAvg runs: ``'one_by_one'`` (five
runs in turn) or ``'together'`` (every round all candidates' clients in one engine call,
``fedlib.methods.base.global_model_runs_together``); ``'auto'`` takes 'together' off the CPU.
Both train the same clients with the same batch orders, so the work in client steps is the same
(the bound on the CPU, whose cost is per client step): what 'together' saves is kernel launches
and per-call overhead, which dominate a GPU's small vectorised steps. The two alternate
``--repeat`` times on one federation, each keeping its best; one line::

    psi_pfl_schedule <device> K=<K> rounds=<R> one_by_one=<s>s together=<s>s one_by_one/together=<x>
        same_selection=<True|False>

``same_selection`` checks that both schedules trained the same clients each round and chose the
same candidate. Synthetic FMNIST-shaped data (seeded images, a Dirichlet(α) label partition):
training time does not depend on the pixel values.

Usage: OMP_NUM_THREADS=1 python benchmarks/psi_pfl_schedule.py [--device cpu|cuda] [--clients 100]
       [--samples 60000] [--alpha 0.3] [--rounds 2] [--epochs 1] [--arch fmnist_cnn] [--repeat 2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fedlib import partition as P
from fedlib.engine import Federation, resolve_device
from fedlib.methods import Context, FLConfig, get_method, make_hyper
from fedlib.models import build_model


def context(args, device) -> Context:
    """A seeded federation of ``args.clients`` clients over synthetic 28×28 images."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, args.samples)
    x = rng.random((args.samples, 1, 28, 28), dtype=np.float32)
    parts = P.partition(y, "dirichlet", args.clients, args.alpha, 0)
    train, val, test = P.train_val_test_split(parts, 0, 0.2, 0.1)
    fed = Federation.from_arrays(x, y, train, test, device, n_classes=10, val_parts=val)
    cfg = FLConfig(rounds=args.rounds, local_epochs=args.epochs, fraction=0.5, lr=1e-3, optimizer="adam")
    return Context(fed=fed, model=build_model(args.arch, 10, fed.input_shape), cfg=cfg, seed=0,
                   counts_train=P.label_counts(y, train, 10))


def timed(ctx: Context, mode: str, device) -> tuple[float, dict]:
    """Seconds of one PSI-PFL run under ``mode`` (after the device's kernels) and its info."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    out = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl", {"train_candidates": mode}))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t, out.info


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--arch", default="fmnist_cnn")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    ctx = context(args, device)
    best, infos = {}, {}
    for _ in range(max(1, args.repeat)):
        for mode in ("one_by_one", "together"):
            s, infos[mode] = timed(ctx, mode, device)
            best[mode] = min(best.get(mode, np.inf), s)
    a, b = infos["one_by_one"], infos["together"]
    same = (a["chosen"] == b["chosen"] and a["selected"] == b["selected"]
            and [c["clients"] for c in a["candidates"]] == [c["clients"] for c in b["candidates"]])
    print(f"psi_pfl_schedule {device} K={args.clients} rounds={args.rounds} one_by_one={best['one_by_one']:.2f}s "
          f"together={best['together']:.2f}s one_by_one/together={best['one_by_one'] / best['together']:.2f} "
          f"same_selection={same}", flush=True)
    return {"one_by_one": best["one_by_one"], "together": best["together"], "same_selection": same}


if __name__ == "__main__":
    main()
