"""How far apart the per-client loop and the vectorised path end with and without TF32 on a GPU.

Two epochs of six ragged clients (sklearn's digits as 8×8 images) of the small CNN and of the
FMNIST CNN (28×28 digits upsampled) through ``local_train`` on both paths: once as the engine
runs it (``fedlib.engine.precision``: IEEE FP32, deterministic cuDNN), once inside
``gpu_kernels(tf32=True, deterministic=False)`` (TF32 convolutions and products, as torch's
CUDA default has for convolutions). Prints, per model and setting, the largest relative gap
between the paths' weights (|a - b| / max(|a|, 1e-3)). The evidence behind
``fedlib/engine/precision.py``.

Usage: python benchmarks/tf32_gap.py [--device cuda]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from fedlib.engine import Federation, broadcast, flatten_params, gpu_kernels, local_train, resolve_device
from fedlib.models import build_model, init_params

SIZES = [45, 70, 3, 32, 1, 97]


def gap(arch: str, side: int, device: torch.device, exact: bool) -> float:
    d = load_digits()
    x = torch.as_tensor((d.data / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
    if side != 8:
        x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False)
    cuts = np.cumsum(SIZES)
    parts = np.split(np.random.default_rng(0).permutation(len(d.target))[:cuts[-1]], cuts[:-1])
    fed = Federation.from_arrays(x.numpy(), d.target, parts, parts, device)
    model = build_model(arch, 10, (1, side, side))
    start = {n: t.to(device) for n, t in broadcast(init_params(model, seed=1), len(SIZES)).items()}
    kw = dict(epochs=2, seed=7, round_idx=2)
    with gpu_kernels(tf32=not exact, deterministic=exact):
        seq = flatten_params(local_train(model, start, fed, range(len(SIZES)), path="sequential", **kw).params)
        vec = flatten_params(local_train(model, start, fed, range(len(SIZES)), path="vectorised", **kw).params)
    return float(((seq - vec).abs() / seq.abs().clamp_min(1e-3)).max())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    device = resolve_device(ap.parse_args(argv).device)
    for arch, side in (("cnn", 8), ("fmnist_cnn", 28)):
        for exact in (True, False):
            print(f"{arch} {device.type} {'ieee_deterministic' if exact else 'tf32_any'} "
                  f"max_relative_gap={gap(arch, side, device, exact):.2e}", flush=True)


if __name__ == "__main__":
    main()
