"""This machine's CPU cost of a committed run, against what its record measured on its own host.

The estimator (:mod:`fedlib.cost`) prices a run by the ``cpu_seconds`` of comparable committed
records, whatever host measured them. This benchmark says what one such record's run costs here:
its spec runs in this process for R₁ and R₂ rounds (default 1 and 3; nothing is written), and

    here     = (cpu(R₂) − cpu(R₁)) / (R₂ − R₁)   CPU-seconds a round, fixed costs cancelled
    recorded = cpu_seconds / R                   the record's R rounds, its fixed costs in it

are printed beside both hosts' CPU model, the instruction set ATen dispatched to
(``host.cpu_capability``) and the thread count. ``ratio = here / recorded``: a run priced from
records of that host costs about that many times its estimate here. ``recorded`` carries the
record's fixed costs, so the ratio is a lower bound on the per-round one (by a few per cent for a
paper-protocol run). No machine can beat a ratio that its own cores set: the two hosts' per-core
speed is the whole of it when the thread counts agree (run with ``OMP_NUM_THREADS`` = the
record's ``threads``, 1 for the committed CPU records).

Usage: OMP_NUM_THREADS=1 python benchmarks/host_speed.py [--record PATH] [--rounds 1 3]
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch

from fedlib import cost, records
from fedlib import experiment as X
from fedlib.run import host_of
from fedlib.spec import RunSpec
from fedlib.validation import check_int, fail

REPO = Path(__file__).resolve().parents[1]
#: FedAvgM on FMNIST, S = 1, K = 100, seed 1, Table III's protocol (40 rounds of 5 epochs):
#: one of the committed CPU records, measured on an AVX-512 host.
DEFAULT_RECORD = REPO / "benchmarks/records/clust_psi_pfl/table3_like_for_like/05d0544a5b22b9e4.json"


def _host_text(host: dict) -> str:
    return f"{host.get('cpu', '?')} ({host.get('cpu_capability', '?')}), {host.get('threads', '?')} thread(s)"


def probe(path, rounds=(1, 3)) -> dict:
    """The record at ``path`` (a finished ``ok`` CPU record, checked by
    :func:`fedlib.records.read_strict`) against its spec run here for each of ``rounds`` (two
    round counts R₁ < R₂ ≤ the record's R): ``recorded`` and ``here`` CPU-seconds a round (module
    docstring), their ``ratio``, the CPU-seconds of each probe run (``probes``: R -> CPU-s) and both
    hosts (``record_host``, ``host``)."""
    r1, r2 = (check_int(r, "rounds", 1) for r in rounds) if len(rounds) == 2 else fail(
        "rounds", "two round counts R1 < R2", list(rounds))
    rec = records.read_strict(path)
    if rec["status"] != "ok" or cost.device_kind_of(rec.get("device")) != "cpu" or not rec.get("cpu_seconds"):
        fail("record", "a finished ok CPU record with cpu_seconds", str(path))
    spec = RunSpec.from_record(rec["spec"])
    total = int(rec["fl"]["rounds"])
    if not r1 < r2 <= total:
        fail("rounds", f"two round counts R1 < R2 ≤ the record's {total}", [r1, r2])
    probes = {}
    for r in (r1, r2):
        out = X.run(dataclasses.replace(spec, fl={**spec.fl, "rounds": r}), device="cpu")
        if out["status"] != "ok":
            raise RuntimeError(f"the probe run of {r} round(s) did not finish: {out.get('status')} {out.get('error')}")
        probes[r] = float(out["cpu_seconds"])
    here = (probes[r2] - probes[r1]) / (r2 - r1)
    recorded = float(rec["cpu_seconds"]) / total
    return {"recorded": recorded, "here": here, "ratio": here / recorded, "probes": probes, "rounds": total,
            "record_host": rec.get("host") or {}, "host": host_of(torch.device("cpu")), "spec": spec}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", default=str(DEFAULT_RECORD))
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 3])
    a = ap.parse_args(argv)
    p = probe(a.record, a.rounds)
    s = p["spec"]
    print(f"record {a.record}: {s.method} {s.dataset} {s.protocol}={s.level:g} K={s.n_clients} seed {s.seed}, "
          f"{p['rounds']} rounds")
    print(f"  recorded: {p['recorded'] * p['rounds']:.1f} CPU-s, {p['recorded']:.2f} a round (fixed costs in it), "
          f"on {_host_text(p['record_host'])}")
    (r1, c1), (r2, c2) = sorted(p["probes"].items())
    print(f"  here: {c1:.1f} CPU-s at R = {r1}, {c2:.1f} at R = {r2}: {p['here']:.2f} a round, on {_host_text(p['host'])}")
    print(f"ratio here / recorded: {p['ratio']:.2f} (a lower bound; 1: this machine prices as the record's host)")


if __name__ == "__main__":
    main()
