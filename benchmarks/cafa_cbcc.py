"""CAFA Tables II–III (CBCC identifying the IID clients): one record per (generator, n_IID,
n_non-IID, seed), under the authors' k search (``workbook.cafa_study``).

Each record is one JSON file (written atomically by ``fedlib.records.write``)::

    {"record_version": 1,
     "spec": {"generator": "authors"|"workbook", "n_iid": 5, "n_noniid": 15, "seed": 0,
              "labels": "cifar10_counts", "k_range": [2, 19], "repeats": 10},
     "status": "ok", "k": 9, "acc": 0.95, "precision": 0.83, "recall": 1.0, "f1": 0.91,
     "host": {...}, "versions": {...}}

``k`` is the number of clusters K-means filled; the scores treat IID as the positive class.
CBCC needs labels only (a label vector with CIFAR-10's class counts), so the whole grid runs on
a CPU in minutes. Resumable: a record already present with the same spec is kept, so a rerun
computes only what is missing. The reproduction report (``workbook.report``) reads
the committed records under ``benchmarks/records/cafa/cbcc``.

Usage: OMP_NUM_THREADS=1 python benchmarks/cafa_cbcc.py [--generators authors,workbook]
       [--seeds 0,1,2] [--repeats 10] [--results benchmarks/records/cafa/cbcc] [--report]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from workbook import cafa_study as S
from fedlib import lookup, records
from fedlib.run import host_of, library_versions
from fedlib.validation import check_choice, check_int, check_seed

LABELS = "cifar10_counts"  # S.cifar10_labels(): 5,000 samples of each of 10 classes
ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "benchmarks" / "records" / "cafa" / "cbcc"


def spec_of(generator: str, n_iid: int, n_noniid: int, seed: int, repeats: int) -> dict:
    return {"generator": generator, "n_iid": int(n_iid), "n_noniid": int(n_noniid), "seed": int(seed),
            "labels": LABELS, "k_range": list(S.AUTHORS_K_RANGE), "repeats": int(repeats)}


def path_of(results: Path, spec: dict) -> Path:
    return results / records.cbcc_name(spec)


def run_one(spec: dict, labels) -> dict:
    """The record of one spec (nothing written)."""
    scores, _, _ = S.cbcc_case(labels, spec["n_iid"], spec["n_noniid"], spec["seed"], generator=spec["generator"],
                               k_search="authors", repeats=spec["repeats"], k_range=tuple(spec["k_range"]))
    return {"record_version": 1, "spec": spec, "status": "ok", "k": int(scores["k"]),
            **{m: float(scores[m]) for m in S.METRICS}, "host": host_of(torch.device("cpu")),
            "versions": library_versions()}


def _done(path: Path, spec: dict) -> bool:
    """Whether ``path`` holds ``spec``'s finished record (:func:`fedlib.records.read_valid`: a file
    that fails the strict checks is named on stderr and computed again)."""
    r = records.read_valid(path, consequence="computed again")
    return r is not None and r.get("spec") == spec and r.get("status") == "ok"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generators", default=",".join(S.GENERATORS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeats", type=int, default=S.AUTHORS_REPEATS,
                    help="partitions the silhouette curve is averaged over (the authors' default 10)")
    ap.add_argument("--results", default=str(DEFAULT), help="the records' folder")
    ap.add_argument("--report", action="store_true", help="print the table of the records there; compute nothing")
    args = ap.parse_args(argv)
    results = Path(args.results)
    generators = [check_choice(g.strip(), "--generators", S.GENERATORS) for g in args.generators.split(",")]
    seeds = [check_seed(int(s)) for s in args.seeds.split(",")]
    repeats = check_int(args.repeats, "--repeats", 1)
    if not args.report:
        labels = S.cifar10_labels()
        specs = [spec_of(g, a, b, s, repeats) for g in generators for a, b in S.PAPER_CASES for s in seeds]
        todo = [s for s in specs if not _done(path_of(results, s), s)]
        print(f"cafa_cbcc: {len(specs)} records, {len(specs) - len(todo)} already in {results}, {len(todo)} to compute",
              flush=True)
        for i, spec in enumerate(todo, 1):
            record = run_one(spec, labels)
            records.write(path_of(results, spec), record)
            print(f"[{i}/{len(todo)}] {spec['generator']} {spec['n_iid']}+{spec['n_noniid']} seed={spec['seed']}: "
                  f"k={record['k']} acc={record['acc']:.2f} precision={record['precision']:.2f} "
                  f"recall={record['recall']:.2f} f1={record['f1']:.2f}", flush=True)
    found = lookup.load(results)
    table = S.with_paper(S.records_table(found))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
