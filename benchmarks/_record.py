"""One JSON record per benchmark run (``--record DIR``), the input of ``benchmarks/report.py``.

A record holds what the run printed as structured fields, and where it ran::

    {"schema": 1, "benchmark": "engine_vs_sequential", "args": {...the command line's options...},
     "results": [{...one printed line as numbers...}, ...], "device": "cpu" | "cuda",
     "host": {"cpu": ..., "cpu_capability": ..., "threads": ..., "gpu": name | null,
              ["gpu_kernels": {...} on a GPU]},
     "torch": "2.x", "commit": "<git sha>" | null, "timestamp": "2026-01-01T12:00:00Z",
     "load_average": [1 min, 5 min, 15 min] | null, "cores": n, ["notes": [...]]}

The host fields are the ones training records keep (``fedlib.experiment.host_of``); ``gpu`` is the
GPU the run measured (null for a CPU run), so a CPU figure measured on a GPU machine files
under its CPU. ``load_average`` (the OS's, when the run ended) says how busy the machine was:
a shared machine's timings move with it, ratios measured in one process much less. The file is written atomically (a temporary ``.json.part`` file, then
``os.replace``) as strict JSON (:mod:`fedlib.strict_json`: a non-finite figure becomes null and
is listed in ``"nonfinite"``); its name is the UTC time and a short digest, so runs never
overwrite one another and sort by time.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import torch

SCHEMA = 1
REPO = Path(__file__).resolve().parents[1]

__all__ = ["SCHEMA", "add_argument", "host", "commit", "make_record", "write", "save"]


_STARTED_AT: list[str | None] = []  # the commit checked out when the benchmark parsed its arguments


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--record DIR`` to a benchmark's command line (and note the commit checked out
    now, before the run: the code it imported)."""
    if not _STARTED_AT:
        _STARTED_AT.append(commit())
    parser.add_argument("--record", metavar="DIR", default=None,
                        help="also write this run's figures, arguments and host as one JSON file in DIR "
                             "(benchmarks/records/speed/<benchmark>/; rendered by benchmarks/report.py)")


def host(device="cpu") -> dict:
    """{'cpu', 'cpu_capability', 'threads', 'gpu'[, 'gpu_kernels']} of this process, as
    ``fedlib.experiment`` records a run's host; ``gpu`` is None unless ``device`` is CUDA."""
    from fedlib.run import host_of

    out = host_of(torch.device(device))
    out.setdefault("gpu", None)
    return out


def commit(repo: Path = REPO) -> str | None:
    """The checked-out git commit of ``repo``, or None (no git, not a repository)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and len(sha) == 40 else None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def _arguments(args) -> dict:
    values = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    return {k: v for k, v in values.items() if k != "record"}


def make_record(benchmark: str, args, results: list[dict], *, device="cpu", notes: list[str] | None = None,
                now: datetime.datetime | None = None) -> dict:
    """The record of one run: ``results`` (one dict of figures per printed line) with the
    run's arguments (``--record`` left out), host, torch version, commit and UTC time."""
    now = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    record = {"schema": SCHEMA, "benchmark": benchmark, "args": _arguments(args), "results": list(results),
              "device": torch.device(device).type, "host": host(device), "torch": torch.__version__,
              "commit": _STARTED_AT[0] if _STARTED_AT else commit(), "timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
              "load_average": _load(), "cores": os.cpu_count()}
    if notes:
        record["notes"] = list(notes)
    return record


def write(directory, record: dict) -> Path:
    """Write ``record`` into ``directory`` (created if missing) as strict JSON, atomically;
    return the file's path: ``<UTC time>-<digest of the record>.json``."""
    from fedlib.strict_json import sanitise

    record = sanitise(record)
    text = json.dumps(record, allow_nan=False, indent=1, sort_keys=False) + "\n"
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = record["timestamp"].replace("-", "").replace(":", "")
    path = directory / f"{stamp}-{hashlib.sha256(text.encode()).hexdigest()[:8]}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json.part")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    print(f"# record: {path}", flush=True)
    return path


def save(directory, benchmark: str, args, results: list[dict], *, device="cpu",
         notes: list[str] | None = None) -> Path | None:
    """:func:`make_record` then :func:`write`, when ``directory`` is given (else nothing)."""
    if not directory:
        return None
    return write(directory, make_record(benchmark, args, results, device=device, notes=notes))
