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
have stopped at its end. A last column (``reserve``) is that share for what a budget admits on
today: :data:`~fedlib.grid.SAFETY_FACTOR` × the ``setting`` median or the longest of those records,
whichever is more (:func:`fedlib.grid.reserve_seconds`), and, beside it, the share of the runs'
CPU-seconds that a budget ending at that reserve would have cut short (the runs that outlast it,
weighted by their cost: what is lost on a machine that does not keep checkpoints). ``--min-seconds S`` keeps the runs of at least S CPU-seconds (the
paper-protocol runs a budget is about). Per host capability (``host['cpu_capability']``) a line
then says how many of that host's runs outlast their reserve, with the other hosts' records read as
measured and scaled to that host (:func:`fedlib.cost.on_host`, the ratios measured left one out too):
what a budget on that host admits today. A line then says how well the printed estimate (in
CPU-seconds of a :data:`fedlib.cost.REFERENCE_CAPABILITY` host) prices the runs measured on such a
host: the median |log ratio| with the other hosts' records read as measured and scaled to the
reference host (:func:`fedlib.cost.on_reference_host`, as the report, ``--list`` and the plan read
them). The last line is the ratio of the two rules' median
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
from fedlib.grid import SAFETY_FACTOR, timing_fields
from fedlib.spec import RunSpec

REPO = Path(__file__).resolve().parents[1]


def _cpu_timings(root: Path) -> list[tuple[Path, dict]]:
    """(path, :func:`fedlib.grid.timing_fields`) of every finished CPU record under ``root``, by path."""
    return [(path, t) for path in sorted(root.rglob("*.json")) for t in [timing_fields(path)]
            if t is not None and cost.device_kind_of(t["device"]) == "cpu"]


def _left_out(root: Path):
    """(path, timing fields, spec, the other records, sharing) per finished CPU record with ``cpu_seconds``
    under ``root``: each run with every other record, as a plan or a budget priced it before it ran."""
    kept = _cpu_timings(root)
    for path, t in kept:
        if isinstance(t.get("cpu_seconds"), (int, float)):
            yield (path, t, RunSpec.from_record(json.loads(path.read_text())["spec"]), [o for _, o in kept if o is not t],
                   (t.get("host") or {}).get("processes"))


def priced(root: Path) -> list[tuple[str, float, float | None, float | None, float | None]]:
    """(folder, actual CPU-seconds, estimate by ``group``, estimate by ``setting``, the longest of the
    ``setting`` records) per CPU record with ``cpu_seconds``, each priced from every other finished
    record under ``root``."""
    out = []
    for path, t, spec, others, processes in _left_out(root):
        group, narrowed = (cost.measured(cost.comparable(spec, others, "cpu", processes, by_setting=b))
                           for b in (False, True))
        out.append((str(path.parent.relative_to(root)), float(t["cpu_seconds"]), group.seconds, narrowed.seconds,
                    narrowed.longest))
    return out


def host_priced(root: Path) -> list[tuple[str, float, float, float]]:
    """(capability, actual CPU-seconds, reserve as measured, reserve scaled to the host) per CPU record
    with ``cpu_seconds`` and a ``host['cpu_capability']`` and a comparable record, each priced from
    every other finished record under ``root``, as :func:`fedlib.grid.reserve_seconds` reserves without
    and with ``here`` (the host ratios too are computed without the run)."""
    from fedlib.grid import reserve_seconds

    out = []
    for path, t, spec, others, processes in _left_out(root):
        here = cost.capability_of(t)
        if here is None:
            continue
        plain, scaled = (reserve_seconds(spec, others, "cpu", processes, h) for h in (None, here))
        if plain is not None:
            out.append((here, float(t["cpu_seconds"]), plain, scaled))
    return out


def printed_priced(root: Path) -> list[tuple[float, float, float]]:
    """(actual CPU-seconds, printed estimate with the records as measured, printed estimate in
    reference-host CPU-seconds) per CPU record with ``cpu_seconds`` measured on a
    :data:`fedlib.cost.REFERENCE_CAPABILITY` host with a comparable record, each priced from every
    other finished record under ``root`` (:func:`fedlib.cost.estimate`; the host ratios too are
    computed without the run)."""
    out = []
    for path, t, spec, others, processes in _left_out(root):
        if cost.capability_of(t) != cost.REFERENCE_CAPABILITY:
            continue
        plain, ref = (cost.estimate(spec, rs, "cpu", processes).seconds for rs in (others, cost.on_reference_host(others)))
        if plain is not None:
            out.append((float(t["cpu_seconds"]), plain, ref))
    return out


def printed_summary(rows) -> tuple[int, float, float]:
    """(n, median |log(actual / estimate)| as measured, the same in reference-host CPU-seconds) of
    :func:`printed_priced`'s ``rows``."""
    if not rows:
        return 0, math.nan, math.nan
    a = np.array(rows, dtype=float)
    return len(rows), *(float(np.median(np.abs(np.log(a[:, 0] / a[:, i])))) for i in (1, 2))


def host_summary(rows) -> dict:
    """Per capability: (n, share of runs over SAFETY_FACTOR × the reserve as measured, the same scaled
    to the host, share of CPU-seconds cut as measured, scaled) of ``host_priced``'s ``rows``."""
    out = {}
    for cap in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == cap]
        actual = np.array([r[1] for r in mine])
        over = [actual > SAFETY_FACTOR * np.array([r[i] for r in mine]) for i in (2, 3)]
        out[cap] = (len(mine), *(float(np.mean(o)) for o in over), *(float(actual[o].sum() / actual.sum()) for o in over))
    return out


def summary(rows) -> dict:
    """n, then per rule (median |log ratio|, share over SAFETY_FACTOR) of ``rows`` (``priced``'s,
    each with both estimates)."""
    out = {"n": len(rows)}
    for i, rule in ((2, "group"), (3, "setting")):
        r = np.array([x[1] / x[i] for x in rows])
        out[rule] = ((float(np.median(np.abs(np.log(r)))), float(np.mean(r > SAFETY_FACTOR))) if len(r)
                     else (math.nan, math.nan))
    actual = np.array([x[1] for x in rows])
    reserve = np.array([max(SAFETY_FACTOR * x[3], x[4]) for x in rows])  # what fits_budget × reserve_seconds asks
    over = actual > reserve
    out["reserve"] = ((float(np.mean(over)), float(actual[over].sum() / actual.sum())) if len(rows)
                      else (math.nan, math.nan))
    median_over = actual > SAFETY_FACTOR * np.array([x[3] for x in rows])
    out["median cut"] = float(actual[median_over].sum() / actual.sum()) if len(rows) else math.nan
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=str(REPO / "benchmarks" / "records"))
    ap.add_argument("--min-seconds", type=float, default=0.0)
    a = ap.parse_args(argv)
    rows = [r for r in priced(Path(a.records)) if r[1] >= a.min_seconds and r[2] and r[3]]
    print(f"{'folder':40s} {'n':>5s}  {'group: |log|, >' + format(SAFETY_FACTOR, 'g') + 'x':>22s}  "
          f"{'setting: |log|, >' + format(SAFETY_FACTOR, 'g') + 'x':>24s}  {'reserve: > it, CPU-s cut':>26s}")
    for folder in sorted({r[0] for r in rows}) + ["all"]:
        s = summary([r for r in rows if folder in ("all", r[0])])
        print(f"{folder:40s} {s['n']:5d}  {s['group'][0]:10.3f} {s['group'][1]:10.1%}  "
              f"{s['setting'][0]:12.3f} {s['setting'][1]:10.1%}  {s['reserve'][0]:12.1%} {s['reserve'][1]:12.1%}")
    by_host = [r for r in host_priced(Path(a.records)) if r[1] >= a.min_seconds]
    for cap, (n, plain, scaled, cut_plain, cut_scaled) in host_summary(by_host).items():
        print(f"runs measured on {cap} hosts (n = {n}) that outlast their reserve: {plain:.1%} with the other hosts' "
              f"records as measured ({cut_plain:.1%} of their CPU-seconds), {scaled:.1%} scaled to {cap} "
              f"({cut_scaled:.1%}; fedlib.cost.on_host)")
    n, plain, ref = printed_summary([r for r in printed_priced(Path(a.records)) if r[0] >= a.min_seconds])
    print(f"printed estimates of the runs measured on {cost.REFERENCE_CAPABILITY} hosts (n = {n}): median "
          f"|log(actual/estimate)| {plain:.3f} with the other hosts' records as measured, {ref:.3f} in "
          f"{cost.REFERENCE_CAPABILITY}-host CPU-seconds (fedlib.cost.on_reference_host; 0 is exact)")
    s = summary(rows)
    print(f"CPU-seconds of the runs that outlast what admitted them: {s['median cut']:.1%} at {SAFETY_FACTOR:g} × the "
          f"setting median, {s['reserve'][1]:.1%} at the reserve (fedlib.grid.reserve_seconds; ratio "
          f"{s['reserve'][1] / s['median cut'] if s['median cut'] else math.nan:.2f}; 0 loses nothing)")
    print(f"ratio setting/group of the median |log(actual/estimate)|: {s['setting'][0] / s['group'][0]:.2f} "
          f"(n = {s['n']}; below 1: the narrowed rule prices better; 0 is exact)")


if __name__ == "__main__":
    main()
