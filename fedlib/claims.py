"""Claims: which process is computing which run, so that processes sharing one results folder
compute every run exactly once.

Before training a run, a process creates ``.<key>.claim`` beside the run's record with
``O_CREAT | O_EXCL`` (atomic on local file systems and on NFSv3+), writing its host, pid and
start time; it removes the claim once the record is written (atomically, see
:func:`fedlib.experiment.run_grid`). Another process that finds the claim leaves the run to its
owner and later waits for the record. A claim is *stale* — and may be taken over — when its
process is gone: on the same host, its pid no longer exists (a SIGKILLed grid); on another
host, it is older than ``stale_after`` seconds (default ``$FEDLIB_CLAIM_TIMEOUT`` or 24 h),
since a pid on another machine cannot be checked.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

__all__ = ["claim_path", "try_claim", "release", "is_stale", "take_over", "DEFAULT_STALE_AFTER"]

DEFAULT_STALE_AFTER = 24 * 3600.0


def claim_path(record: Path) -> Path:
    """``<dir>/.<name>.claim`` for the record ``<dir>/<name>.json``."""
    record = Path(record)
    return record.with_name(f".{record.stem}.claim")


def try_claim(record: Path) -> bool:
    """Claim the run of ``record``; True if this process now owns it, False if another does."""
    path = claim_path(record)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return True


def release(record: Path) -> None:
    """Remove this process's claim on ``record`` (no error if it is already gone)."""
    try:
        claim_path(record).unlink()
    except FileNotFoundError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def is_stale(record: Path, stale_after: float | None = None) -> bool:
    """Whether the claim on ``record`` belongs to a process that is gone (see module doc).

    A claim being written right now (empty or unreadable for an instant) is not stale.
    """
    return _stale_file(claim_path(record), stale_after)


def _stale_file(path: Path, stale_after: float | None = None) -> bool:
    if stale_after is None:
        stale_after = float(os.environ.get("FEDLIB_CLAIM_TIMEOUT", DEFAULT_STALE_AFTER))
    try:
        info = json.loads(path.read_text())
        age = time.time() - float(info["time"])
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        try:
            return time.time() - path.stat().st_mtime > 60  # a torn claim older than a minute
        except FileNotFoundError:
            return False
    if info.get("host") == socket.gethostname():
        return not _pid_alive(int(info.get("pid", -1)))
    return age > stale_after


def take_over(record: Path) -> bool:
    """Replace a stale claim by this process's own; True if it now owns the run.

    The stale claim is first renamed away (atomic: of two processes taking over at once only
    one gets it); if what was renamed turns out to be a fresh claim (another process took over
    between the staleness check and the rename), it is put back and this process backs off.
    """
    path = claim_path(record)
    aside = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return try_claim(record)
    try:
        if not _stale_file(aside):
            try:
                os.link(aside, path)  # put the live claim back (fails if yet another exists)
            except FileExistsError:
                pass
            return False
    finally:
        aside.unlink(missing_ok=True)
    return try_claim(record)
