"""FeSEM's cluster recovery on pFedLIA's pathological FMNIST partition.

The paper protocol of ``params/paper/10_pfedlia.yaml`` (K = 100 clients in 5 planted clusters,
q = 0.1, E = 5, SGD lr 0.01, batch 32, 60/20/20 train/validation/test) for ``--rounds`` rounds
(default 10): per seed, the adjusted Rand index of FeSEM's ``info['cluster_of_client']``
against the planted clusters (:func:`fedlib.evaluation.cluster_recovery`), the sizes of its
groups and the mean local accuracy (``pfedlia_study.accuracy_frame``: the mean over clients of
each client's test accuracy). Prints one line per seed::

    fesem seed=<s> rounds=<R> ari=<a> groups=<sizes> accuracy=<%> seconds=<s>

``--module PATH`` runs another implementation of FeSEM (a file with ``Hyper`` and ``run``, e.g.
an earlier version from ``git show REV:fedlib/methods/fesem.py > /tmp/fesem_old.py``) in
place of ``fedlib.methods.fesem`` for this process, to compare before and after a change.

Usage: python benchmarks/fesem_recovery.py [--seeds 0 1] [--rounds 10] [--n-train N] [--module PATH] [--record DIR]

``--record DIR`` also writes each run's experiment record as one JSON file in DIR.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def use_module(path: str) -> None:
    """Make ``fedlib.methods.fesem`` the module in ``path`` for this process (the method
    registry imports it by that name)."""
    spec = importlib.util.spec_from_file_location("fedlib.methods.fesem", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fedlib.methods.fesem"] = module
    spec.loader.exec_module(module)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n-train", type=int, default=None, help="stratified subset of FMNIST's train pool")
    ap.add_argument("--module", default=None, help="a FeSEM module file to run instead of fedlib's")
    ap.add_argument("--record", default=None, help="write each run's record as JSON here")
    args = ap.parse_args()
    if args.module:
        use_module(args.module)
    from workbook import pfedlia_study as study
    from fedlib.experiment import run

    from fedlib import notebook_params

    cfg = notebook_params.load(ROOT / "params" / "paper" / "10_pfedlia.yaml")
    fl = dict(cfg["fl"], rounds=args.rounds)
    specs = study.training_specs(["pathological_clusters"], cfg["n_clients"], args.seeds, fl,
                                 n_clusters=cfg["n_clusters"], methods=["fesem"], recovery_extra=(), p2p=False,
                                 n_train=args.n_train, hyper=cfg.get("hyper"))
    for spec in specs:
        record = run(spec, device="cpu")
        row = study.accuracy_frame([record]).iloc[0]
        sizes = sorted(record.get("info", {}).get("cluster_sizes", []), reverse=True)
        print(f"fesem seed={spec.seed} rounds={args.rounds} ari={row.ari:.3f} groups={sizes} "
              f"accuracy={row.accuracy:.2f} seconds={row.seconds:.0f}", flush=True)
        if args.record:
            out = Path(args.record)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"fesem_seed{spec.seed}_r{args.rounds}.json").write_text(json.dumps(record, default=str))


if __name__ == "__main__":
    main()
