"""Command line: ``python -m fedlib.datasets list`` and
``python -m fedlib.datasets prepare [NAME ...]`` (used by ``make data``).

``prepare`` copies each dataset's offline source (checksum-verified) into the
data directory, loads it and prints one summary line; with no NAME it prepares
every dataset whose files are available. Exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys
import time

from ._core import DataUnavailableError, data_dir
from ._registry import DATASETS, available, load


def _summary(name: str, root) -> str:
    spec = DATASETS[name]
    t = time.perf_counter()
    if spec.prepare is not None:
        spec.prepare(root)
    ds = load(name, root)
    dt = time.perf_counter() - t
    extra = f", vocab {ds.vocab_size}" if ds.vocab is not None else ""
    return (f"{name}: train {ds.x_train.shape} test {ds.x_test.shape} {ds.x_train.dtype}, "
            f"{ds.n_classes} classes{extra} [{dt:.1f} s] ({ds.paper_name})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedlib.datasets",
                                     description="fedlib data layer")
    parser.add_argument("--data-dir", default=None,
                        help="data directory (default: $FEDLIB_DATA, else data/ of the clone; installed: ./data)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print each dataset and whether it can be loaded now")
    prep = sub.add_parser("prepare", help="copy offline sources into the data dir and load them")
    prep.add_argument("names", nargs="*", metavar="NAME", help=f"of: {', '.join(DATASETS)}")
    args = parser.parse_args(argv)
    root = data_dir(args.data_dir)

    if args.command == "list":
        print(f"data directory: {root}")
        for name, ok in available(root).items():
            spec = DATASETS[name]
            state = {True: "yes", False: "no", "download": "download"}[ok]
            hint = "" if ok is True else f"  -> {spec.fix(root)}"
            print(f"{name:15s} {state:9s} {spec.modality:8s} {spec.paper_name}{hint}")
        return 0

    names = args.names or [n for n, ok in available(root).items() if ok is True]
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        parser.error(f"unknown dataset(s) {', '.join(unknown)}; valid: {', '.join(DATASETS)}")
    failed = 0
    for name in names:
        try:
            print(_summary(name, root), flush=True)
        except DataUnavailableError as e:
            failed += 1
            print(f"{name}: FAILED: {e}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
