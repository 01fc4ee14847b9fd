"""Claims: which process is computing which run, so that processes sharing one results folder
compute every run exactly once.

Before training a run, a process creates ``.<key>.claim`` beside the run's record with
``O_CREAT | O_EXCL`` (atomic on local file systems and on NFSv3+), writing its host, pid, the
time and its process's start token (:func:`start_token`: the boot and the start time of the pid,
from /proc); it removes the claim once the record is written (atomically, see
:func:`fedlib.grid.run_grid`). Another process that finds the claim leaves the run to its owner
and later waits for the record. A claim is *stale* — and may be taken over — when its process
is gone or it is too old:

* on the same host, its pid no longer exists (a SIGKILLed grid), or the process that has that
  pid now is another one (its start token differs: a reused pid, or a restarted container
  running the grid again as pid 1), or it is older than ``stale_after`` seconds;
* on another host, it is older than ``stale_after`` seconds, since a pid on another machine
  cannot be checked.

``stale_after`` defaults to ``$FEDLIB_CLAIM_TIMEOUT`` or :data:`DEFAULT_STALE_AFTER` (24 h): a
run that takes longer than that may be taken over and computed twice (set it higher); a claim is
never refreshed, so :func:`timeout` refuses less than :data:`MIN_STALE_AFTER` (1 h).

A takeover never removes the claim file: the one process that creates the takeover token
``.<key>.claim.<id>.takeover`` (``O_EXCL``; ``<id>`` names the very stale claim it read, by its
content, inode and mtime) checks that the claim is still that one and replaces it by its own
with one ``rename`` over it. Of any number of processes taking over one stale claim at the same
instant exactly one gets the run; the others find the token (or a fresh claim) and back off,
and at no instant is the run unclaimed, so none of them can slip in through :func:`try_claim`.
A token whose process died mid-takeover is itself stale and is taken over the same way, by a
token named after it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import NamedTuple

from .validation import fail

__all__ = ["claim_path", "try_claim", "release", "is_stale", "take_over", "start_token", "owner", "timeout",
           "DEFAULT_STALE_AFTER"]

DEFAULT_STALE_AFTER = 24 * 3600.0
MIN_STALE_AFTER = 3600.0
ENV_TIMEOUT = "FEDLIB_CLAIM_TIMEOUT"


def timeout() -> float:
    """``$FEDLIB_CLAIM_TIMEOUT`` in seconds, a number ≥ :data:`MIN_STALE_AFTER` (unset: the default)."""
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_STALE_AFTER
    except ValueError:
        value = math.nan
    if not MIN_STALE_AFTER <= value < math.inf:
        fail(f"${ENV_TIMEOUT}", f"a number of seconds ≥ {MIN_STALE_AFTER:g} (a claim is never refreshed while its "
             "run trains: a shorter timeout takes over runs still training; set it above the longest run) or unset "
             f"for {DEFAULT_STALE_AFTER:g}", raw)
    return value


def owner(record: Path) -> dict | None:
    """The claim on ``record``'s run (host, pid, time), or None (none, or one being written)."""
    seen = _read(claim_path(record))
    try:
        info = json.loads(seen.text)
    except (AttributeError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def claim_path(record: Path) -> Path:
    """``<dir>/.<name>.claim`` for the record ``<dir>/<name>.json``."""
    record = Path(record)
    return record.with_name(f".{record.stem}.claim")


def try_claim(record: Path) -> bool:
    """Claim the run of ``record``; True if this process now owns it, False if another does."""
    return _create_exclusive(claim_path(record))


def start_token(pid: int) -> str | None:
    """Which process ``pid`` is, beyond its number: this boot's id and the process's start time
    (clock ticks since boot, field 22 of ``/proc/<pid>/stat``). A pid reused by another process
    (or a container restarted with the same pid) gives another token. None where /proc does not
    tell (another OS, the process gone)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        start = stat[stat.rindex(")") + 2:].split()[19]  # fields after "pid (comm)": 22 is the 20th
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{boot}:{start}"


def _owner() -> str:
    """This process's claim (or token) content: host, pid, time and start token."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(),
                       "start": start_token(os.getpid())})


def _create_exclusive(path: Path) -> bool:
    """Create ``path`` with this process's owner line (``O_EXCL``); False if it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_owner())
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


class _Seen(NamedTuple):
    """One claim (or token) file as read at one instant: its text, mtime and identity."""

    text: bytes
    mtime: float
    ident: str  # content, inode and mtime hashed: a later file at the same path differs


def _read(path: Path) -> _Seen | None:
    """The file at ``path`` (content and metadata of one open file), or None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        text = f.read()
    ident = hashlib.sha256(text + f"|{st.st_ino}|{st.st_mtime_ns}".encode()).hexdigest()[:24]
    return _Seen(text, st.st_mtime, ident)


def _stale_file(path: Path, stale_after: float | None = None) -> bool:
    seen = _read(path)
    return seen is not None and _is_stale(seen, stale_after)


def _is_stale(seen: _Seen, stale_after: float | None = None) -> bool:
    """Whether the process that wrote ``seen`` is gone (module doc)."""
    if stale_after is None:
        stale_after = timeout()
    try:
        info = json.loads(seen.text)
        age = time.time() - float(info["time"])
        pid = int(info.get("pid", -1))
    except (ValueError, KeyError, TypeError, AttributeError):
        return time.time() - seen.mtime > 60  # a torn claim older than a minute
    if age > stale_after:
        return True
    if info.get("host") == socket.gethostname():
        if not _pid_alive(pid):
            return True
        token = info.get("start")
        return token is not None and start_token(pid) not in (None, token)  # the pid is another process's now
    return False


def take_over(record: Path) -> bool:
    """Replace a stale claim by this process's own; True if it now owns the run.

    Atomic (module doc): the claim read as stale is replaced only by the process that created
    its takeover token, and only if it is still that claim, with a ``rename`` over it — the
    claim file is never absent, and of several processes taking over at once exactly one
    gets True. False when the claim is live, or another process is taking it over or took it.
    """
    path = claim_path(record)
    seen = _read(path)
    if seen is None:
        return try_claim(record)
    if not _is_stale(seen):
        return False
    walked, token = [], None
    target = seen
    while token is None:  # the token of the stale claim, or of a dead taker's token, and so on
        candidate = path.with_name(f"{path.name}.{target.ident}.takeover")
        if _create_exclusive(candidate):
            token = candidate
            break
        other = _read(candidate)
        if other is not None and not _is_stale(other):
            return False  # a live process is taking it over
        if other is not None:
            walked.append(candidate)  # its taker died: take over its token
            target = other
        # else: its taker just finished and removed it; try to create it again
    mine = token.with_suffix(".part")  # this process's new claim, before it is renamed over the old
    try:
        now = _read(path)
        if now is None or now.ident != seen.ident:
            return False  # replaced (or released) since it was read: not ours to take
        mine.write_text(_owner())
        os.replace(mine, path)  # the claim changes owner in one step
        return True
    finally:
        mine.unlink(missing_ok=True)
        # The stale claim is gone for good (replaced here or before): its token, and those of
        # takers that died holding one, can serve nobody now.
        for used in (*walked, token):
            used.unlink(missing_ok=True)
        for dead in walked:  # and a new claim a dead taker left half-made
            dead.with_suffix(".part").unlink(missing_ok=True)
