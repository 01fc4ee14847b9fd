"""The BatchNorm probe of CAFA's lr-0.1 divergence (issue 57, item 5): the paper-protocol runs of
notebook 08's grid (:data:`workbook.cafa_study.AUTHORS_FL`, the FMNIST stand-in, K = 20,
20 % validation, the official test set) cut to the rounds in which the committed diverged run of the
same method, IID share and seed went non-finite, once with the stand-in CNN (``fmnist_cnn``, no
BatchNorm: a replay of the committed run's first rounds) and once with ``fmnist_cnn_bn`` (a
BatchNorm after every conv, as every conv of the authors' VGG-19 has).

A record of a cut run is not a Tables IV–V number (its ``fl.rounds`` is not 150; the report's
readings pin 150 rounds); it says only whether training stayed finite that long.

    PYTHONPATH=. nice -n 5 python benchmarks/cafa_bn_probe.py --out benchmarks/records/cafa/bn_probe \\
        --method cafa --iid-fraction 0.5 --seed 0 --rounds 20 --archs fmnist_cnn_bn fmnist_cnn
"""
from __future__ import annotations

import argparse

from workbook.cafa_study import AUTHORS_FL, training_specs
from fedlib.grid import run_grid


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--method", required=True, choices=["fedavg", "fedprox", "cafa"])
    ap.add_argument("--iid-fraction", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--archs", nargs="+", default=["fmnist_cnn_bn", "fmnist_cnn"])
    a = ap.parse_args(argv)
    fl = {**AUTHORS_FL, "rounds": a.rounds}
    for arch in a.archs:
        # arch=None is the committed records' spelling of fmnist_cnn (the data set's model): the replay
        # uses it, so its spec differs from the committed run's only in fl.rounds
        specs = training_specs("fmnist", None, [a.iid_fraction], 20, [a.seed], [a.method], {}, fl, 0.2,
                               arch=None if arch == "fmnist_cnn" else arch)
        for r in run_grid(specs, a.out, device="cpu", progress="rounds"):
            div = r.get("divergence") or {}
            last = (r.get("history") or r.get("history_before_divergence") or [{}])[-1]
            print(arch, r["key"], r["status"], "diverged in round", None if not div else div["round_idx"] + 1,
                  "last evaluated:", last, "cpu_seconds", r.get("cpu_seconds"), flush=True)


if __name__ == "__main__":
    main()
