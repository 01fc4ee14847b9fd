"""Notebook 12's clustering-only ARIs over seeds (issue 58): for every partition of
``params/paper/12_beyond_label_skew.yaml`` and every Clust-PSI-PFL variant whose grouping needs no
training (:data:`workbook.beyond_label_seeds.CLUSTERING_ONLY`), the grouping a run of the
grid's spec at each seed would train with, and its ARI against the planted groups
(:func:`workbook.beyond_label_seeds.clustering_ari`). Writes one CSV row per (partition,
variant, seed) to ``--out``, K-means seeded 42 + seed (issue 70: ``kmeans_seed`` column; rows of
the fixed seed 42 written before are kept beside them) (default ``benchmarks/records/beyond_label_ari/aris.csv``); rows already
there are kept (resumable).

    python benchmarks/beyond_label_ari.py --seeds 0-19
"""
import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pandas as pd  # noqa: E402

from fedlib import notebook_params  # noqa: E402
from workbook import beyond_label as B, beyond_label_seeds as S  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-19", help="a range a-b (inclusive)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/records/beyond_label_ari/aris.csv"))
    ap.add_argument("--params", default=str(ROOT / "params/paper/12_beyond_label_skew.yaml"))
    ap.add_argument("--partitions", nargs="*", default=None)
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.seeds.split("-"))
    p = notebook_params.load(Path(a.params), "12_beyond_label_skew")
    variants = [v for v in p["variants"] if v in S.CLUSTERING_ONLY]
    specs = B.training_specs(p["partitions"], p["small_shares"], p["n_clients"], [0], variants, p["fl"],
                             hyper=p["hyper"], n_train=p["n_train"], val_fraction=p["val_fraction"])
    out = Path(a.out)
    done = pd.read_csv(out) if out.is_file() else pd.DataFrame(columns=["partition", "variant", "seed"])
    if "kmeans_seed" not in done:  # rows before issue 70: K-means seeded 42 at every seed
        done["kmeans_seed"] = S.KMEANS_BASE
    done["kmeans_seed"] = done.kmeans_seed.fillna(S.KMEANS_BASE).astype(int)
    have = set(zip(done.partition, done.variant, done.seed.astype(int), done.kmeans_seed))
    rows = []
    by_partition = {}
    for spec in specs:
        d = spec.to_dict()
        by_partition.setdefault(B.partition_of_spec(d), []).append((B.variant_of(d), spec))
    for part in (a.partitions or list(by_partition)):  # in the order given
        pairs = by_partition[part]
        for seed in range(lo, hi + 1):
            todo = [(v, S.kmeans_seeded(dataclasses.replace(s, seed=seed))) for v, s in pairs
                    if (part, v, seed, S.KMEANS_BASE + seed) not in have]
            if not todo:
                continue
            t = time.time()
            results = S.clustering_aris([s for _, s in todo])
            for (var, spec), r in zip(todo, results):
                rows.append({"partition": part, "variant": var, "seed": seed, "n_clients": spec.n_clients,
                             "dataset": spec.dataset, **r, "kmeans_seed": S.KMEANS_BASE + seed})
            print(f"{part} seed {seed}: " + ", ".join(f"{v} {r['ari']:.3f}" for (v, _), r in zip(todo, results))
                  + f" ({time.time() - t:.1f} s)", flush=True)
            _write(out, done, rows)
    _write(out, done, rows)


def _write(out: Path, done: pd.DataFrame, rows: list) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.concat([done, pd.DataFrame(rows)], ignore_index=True) if rows else done
    frame.sort_values(["partition", "variant", "seed", "kmeans_seed"]).to_csv(out.with_suffix(".tmp"), index=False)
    out.with_suffix(".tmp").replace(out)


if __name__ == "__main__":
    main()
