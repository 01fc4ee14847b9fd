"""How well the one cost estimator (:mod:`fedlib.cost`) prices the committed runs, left one out.

For every committed CPU record with ``cpu_seconds`` (under ``--records``, default
benchmarks/records), the run is priced from all the other records, as a plan or a budget would
have priced it before it ran, by two rules in one process:

* ``group``: the reference, the median of the whole comparable group (same data set, training
  length, method, K and reading, else …: :func:`fedlib.cost.comparable` with ``by_setting=False``);
* ``setting``: today's rule, that group narrowed to the records of the run's own partition protocol
  and hyper-parameters where there are any (:func:`fedlib.cost.setting`).

Per records folder, and over all of them, it prints n, the median |log(actual / estimate)| (0:
exact; 0.18: a typical run 20 % off) and the share of runs that took longer than
:data:`fedlib.grid.SAFETY_FACTOR` × their estimate: those a budget admitting on that rule would
have stopped at its end. ``--min-seconds S`` keeps the runs of at least S CPU-seconds (the
paper-protocol runs a budget is about). The last line is the ratio of the two rules' median
|log ratio| (setting / group): below 1, the narrowed rule prices better. No estimator can beat 0,
and none that sees only comparable records' times can price a run whose cost no record measured.

Usage: python benchmarks/estimate_accuracy.py [--records benchmarks/records] [--min-seconds 300]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from fedlib import cost
from fedlib.grid import SAFETY_FACTOR, _timing_fields
from fedlib.spec import RunSpec

REPO = Path(__file__).resolve().parents[1]


def priced(root: Path) -> list[tuple[str, float, float | None, float | None]]:
    """(folder, actual CPU-seconds, estimate by ``group``, estimate by ``setting``) per CPU record
    with ``cpu_seconds``, each priced from every other finished record under ``root``."""
    kept = []
    for path in sorted(root.rglob("*.json")):
        t = _timing_fields(path)
        if t is None or cost.device_kind_of(t["device"]) != "cpu":
            continue
        kept.append((path, t))
    out = []
    for path, t in kept:
        if not isinstance(t.get("cpu_seconds"), (int, float)):
            continue
        spec = RunSpec.from_record(json.loads(path.read_text())["spec"])
        others = [o for _, o in kept if o is not t]
        processes = (t.get("host") or {}).get("processes")
        est = [cost.measured(cost.comparable(spec, others, "cpu", processes, by_setting=b)).seconds
               for b in (False, True)]
        out.append((str(path.parent.relative_to(root)), float(t["cpu_seconds"]), *est))
    return out


def summary(rows) -> dict:
    """n, then per rule (median |log ratio|, share over SAFETY_FACTOR) of ``rows`` (``priced``'s,
    each with both estimates)."""
    out = {"n": len(rows)}
    for i, rule in ((2, "group"), (3, "setting")):
        r = np.array([x[1] / x[i] for x in rows])
        out[rule] = ((float(np.median(np.abs(np.log(r)))), float(np.mean(r > SAFETY_FACTOR))) if len(r)
                     else (math.nan, math.nan))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=str(REPO / "benchmarks" / "records"))
    ap.add_argument("--min-seconds", type=float, default=0.0)
    a = ap.parse_args(argv)
    rows = [r for r in priced(Path(a.records)) if r[1] >= a.min_seconds and r[2] and r[3]]
    print(f"{'folder':40s} {'n':>5s}  {'group: |log|, >' + format(SAFETY_FACTOR, 'g') + 'x':>22s}  "
          f"{'setting: |log|, >' + format(SAFETY_FACTOR, 'g') + 'x':>24s}")
    for folder in sorted({r[0] for r in rows}) + ["all"]:
        s = summary([r for r in rows if folder in ("all", r[0])])
        print(f"{folder:40s} {s['n']:5d}  {s['group'][0]:10.3f} {s['group'][1]:10.1%}  "
              f"{s['setting'][0]:12.3f} {s['setting'][1]:10.1%}")
    s = summary(rows)
    print(f"ratio setting/group of the median |log(actual/estimate)|: {s['setting'][0] / s['group'][0]:.2f} "
          f"(n = {s['n']}; below 1: the narrowed rule prices better; 0 is exact)")


if __name__ == "__main__":
    main()
