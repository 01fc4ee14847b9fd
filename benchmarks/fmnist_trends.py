"""Trend check against Table III on real FMNIST: Clust-PSI-PFL vs FedAvg, K = 100.

Runs both methods on the whole FMNIST training pool (60 000 images, 80/20 per-client
splits) at α ∈ {50, 0.3} and S ∈ {1, 0} (override with --dirichlet / --similarity) and
prints, per setting, the global accuracy of each (mean over --seeds) beside the paper's
Table III values and the gap Clust-PSI-PFL − FedAvg, ours and the paper's.

The default protocol is shortened to fit a CPU in minutes (T = 10 rounds, E = 1 local
epoch; q = 0.5, Adam 1e-3, batch 32 as in Table II): it checks trends (who is ahead and
by how much), not the paper's absolute numbers. ``--paper`` runs T = 40, E = 5 (≈ 16 min
per run on a 2-core CPU; a GPU: ``--device cuda``). Records go to results/<--name>/ and
are reused: a rerun only computes what is missing.

Usage: python benchmarks/fmnist_trends.py [--rounds 10] [--epochs 1] [--paper] [--seeds 0]
       [--clients 100] [--dirichlet 50,0.3] [--similarity 1,0] [--device auto] [--name fmnist_trends]
"""
from __future__ import annotations

import argparse

import numpy as np

from workbook.paper_table3 import paper_value
from workbook.tables import setting_name
from fedlib.experiment import grid_specs, run_grid
from fedlib.paths import results_dir

METHODS = ("fedavg", "clust_psi_pfl")


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--paper", action="store_true", help="the paper's T=40, E=5")
    ap.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2,3,4")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--dirichlet", default="50,0.3")
    ap.add_argument("--similarity", default="1,0")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--name", default="fmnist_trends", help="results/<name>/ holds the records")
    a = ap.parse_args(argv)
    rounds, epochs = (40, 5) if a.paper else (a.rounds, a.epochs)
    protocols = {p: _floats(v) for p, v in (("dirichlet", a.dirichlet), ("similarity", a.similarity)) if v}
    seeds = [int(s) for s in a.seeds.split(",")]
    specs = grid_specs(["fmnist"], protocols, [a.clients], seeds, list(METHODS),
                       fl={"rounds": rounds, "local_epochs": epochs, "fraction": 0.5})
    records = run_grid(specs, results_dir() / a.name, device=a.device)

    acc: dict[tuple, list[float]] = {}
    for r in records:
        s = r["spec"]
        key = (s["protocol"], float(s["level"]), s["method"])
        acc.setdefault(key, []).append(r["global_accuracy"] if r["status"] == "ok" else np.nan)
    print(f"# FMNIST (60k), K={a.clients}, T={rounds}, E={epochs}, q=0.5, seeds={seeds}; "
          f"paper: Table III (K=100, T=40, E=5, 5 seeds)")
    print(f"{'setting':16s} {'FedAvg':>7s} {'Clust':>7s} {'gap':>6s}   {'paper FedAvg':>12s} "
          f"{'paper Clust':>11s} {'paper gap':>9s}")
    for protocol, levels in protocols.items():
        for level in levels:
            ours = [float(np.mean(acc[(protocol, level, m)])) for m in METHODS]
            paper = {m: paper_value("fmnist", m, protocol, level) for m in METHODS}
            paper = paper if None not in paper.values() else None  # Table III, FMNIST, K = 100
            name = setting_name(protocol, level)
            cols = (f"{paper['fedavg']:12.2f} {paper['clust_psi_pfl']:11.2f} "
                    f"{paper['clust_psi_pfl'] - paper['fedavg']:+9.2f}") if paper else f"{'—':>12s}"
            print(f"{protocol[:3]} {name:12s} {ours[0]:7.3f} {ours[1]:7.3f} {ours[1] - ours[0]:+6.3f}   {cols}")


if __name__ == "__main__":
    main()
