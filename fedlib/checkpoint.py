"""Round-level checkpoints: a run that is killed, or stopped by a budget, resumes at its last
round boundary and ends with the record it would have had uninterrupted — bit for bit on the
same machine (the clients' batch orders and dropout masks are seeded by (seed, round, client),
so no torch RNG state needs saving).

How a method takes part
-----------------------
A method's training is one or more *phases* — calls of :func:`fedlib.methods.base.run_rounds`
(``federated_averaging``, ``global_model_rounds``, ``global_model_runs_together`` use it; a
warm-up and a second phase are two calls). A phase's whole state is an explicit value
``state`` (tensors, numpy arrays, numpy Generators, lists) that ``step(t, state) -> state``
turns into the next round's. Besides it, the only things a round changes are the context's
history of evaluations and the clients' kept optimiser states; a checkpoint holds both.

Resuming replays the method's code from the start: a phase that had finished returns its saved
final state at once (the code between phases is recomputed: it is deterministic given the same
inputs), and the phase that was interrupted continues from its saved round. A phase whose state
is not explicit (a ``choose`` or ``observe`` closure that keeps its own state, without the
loop's ``selection_stream`` and ``memo``) is *opaque*: it is recomputed on resume and writes no
checkpoint while it runs. Methods
that do not train through ``run_rounds`` (CFL, FedFomo, FedSoft …) never checkpoint: an
interrupted run of theirs starts again at round 1. A method's registry entry says which it is
(:attr:`fedlib.methods.contract.MethodInfo.resumable`).

Files
-----
One file per run, ``<folder>/<record key>.pt`` (``$FEDLIB_CHECKPOINTS``, default
``~/.cache/fedlib/checkpoints``), written atomically (``<name>.<host>.<pid>.part``, fsync, rename)
every ``every`` seconds of training (``$FEDLIB_CHECKPOINT_EVERY``, default 300; 0: every round)
and when a deadline stops the run; :func:`fedlib.grid.run_grid` deletes it once the run's record
is written. Its size is about the phase's models plus the finished phases' final models: one
model for FedAvg, τ for Clust-PSI-PFL, one per candidate for PSI-PFL.

Format 2: a line of strict JSON (the header: run key, fedlib version, source fingerprint
:func:`code_fingerprint`, phase, next round, the run's rounds, seconds, the payload's length and a
SHA-256 over header and payload), then the payload: a ``torch.save`` of tensors and plain values
(numpy arrays as bytes and dtype, numpy Generators as their states, fedlib's own dataclasses by
name), read with ``torch.load(weights_only=True)``: nothing in a file runs code.
Checked in order: the header (all ``--list`` reads, :func:`saved_round`), the length, the digest
(:meth:`Checkpointer.open`), then as the run's first phase starts the run's rounds, the payload's
decoding and the shapes of every tensor dict named like the model's weights. A file that fails is
moved aside to ``<name>.refused-<reason>`` (said on stderr) and the run starts again at round 1.
Opening removes leftover ``.part`` files: the run's own whose writer (a pid of this host) is gone,
any older than ``$FEDLIB_CLAIM_TIMEOUT``.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import importlib
import io
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import __version__

CHECKPOINT_VERSION = 2
ENV_FOLDER = "FEDLIB_CHECKPOINTS"
ENV_EVERY = "FEDLIB_CHECKPOINT_EVERY"
DEFAULT_EVERY = 300.0  # seconds of training between two checkpoint writes
ENV_PROGRESS = "FEDLIB_PROGRESS_INTERVAL"  # seconds between two progress lines of a run (default 60)
_TAG = "$fedlib"  # a dict with this key is an encoded value (_encode)

__all__ = ["Checkpointer", "RunStopped", "checkpoint_folder", "checkpoint_path", "active", "current", "saved_round",
           "CHECKPOINT_VERSION"]


class RunStopped(Exception):
    """A run stopped at a round boundary because its deadline would pass before the next one
    ends; its checkpoint is at ``path`` (``size`` bytes) and resumes at round ``round_idx``."""

    def __init__(self, key: str, round_idx: int, path: Path, size: int):
        self.key, self.round_idx, self.path, self.size = key, round_idx, Path(path), size
        super().__init__(f"run {key} stopped before round {round_idx + 1} (its deadline); checkpoint "
                         f"{path} ({size / 2**20:.1f} MiB) resumes it")


class _Refused(Exception):
    """A checkpoint not used: ``args``, the reason its name is moved aside to and why."""


def checkpoint_folder() -> Path:
    """``$FEDLIB_CHECKPOINTS``, else ``$XDG_CACHE_HOME/fedlib/checkpoints`` (``~/.cache``): outside
    the repository, so a checkout stays clean and a lease's tree stays small."""
    folder = os.environ.get(ENV_FOLDER, "").strip()
    if folder:
        return Path(folder)
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache) / "fedlib" / "checkpoints"


def checkpoint_path(key: str, folder=None) -> Path:
    return Path(folder if folder is not None else checkpoint_folder()) / f"{key}.pt"


def _every_from_env(name: str = ENV_EVERY, default: float = DEFAULT_EVERY, zero: bool = True) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        every = float(raw)
    except ValueError:
        every = -1.0
    if not (every >= 0 if zero else every > 0):
        raise ValueError(f"${name} must be a number of seconds {'≥' if zero else '>'} 0"
                         f"{' (0: a checkpoint every round)' if zero else ''}, got {raw!r}; unset it for the default {default:g}")
    return every


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of fedlib's source files: a checkpoint resumes only under the code that wrote it (a
    phase's state is whatever its loop carries, and another revision may carry something else,
    without any change of ``fedlib.__version__``)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _encode(v, copy: bool = False):
    """``v`` as tensors and plain values (what ``torch.load(weights_only=True)`` reads); ``copy``:
    its tensors cloned (a snapshot later rounds cannot change)."""
    if isinstance(v, torch.Tensor):
        return v.detach().clone() if copy else v.detach()
    if isinstance(v, (np.ndarray, np.generic)) and not np.asarray(v).dtype.hasobject:
        raw = np.frombuffer(np.ascontiguousarray(v).tobytes(), np.uint8).copy()
        return {_TAG: "array", "bytes": torch.from_numpy(raw), "dtype": np.asarray(v).dtype.str,
                "shape": list(np.shape(v)), "scalar": isinstance(v, np.generic)}
    if v is None or type(v) in (bool, int, float, str):
        return v
    if type(v) in (list, tuple):
        return type(v)(_encode(x, copy) for x in v)
    if type(v) is dict and _TAG not in v and all(type(k) in (str, int) for k in v):
        return {k: _encode(x, copy) for k, x in v.items()}
    if isinstance(v, np.random.Generator):
        return {_TAG: "generator", "state": _encode(v.bit_generator.state, copy)}
    if dataclasses.is_dataclass(v) and type(v).__module__.split(".")[0] == "fedlib":
        return {_TAG: "dataclass", "class": f"{type(v).__module__}:{type(v).__qualname__}",
                "fields": {f.name: _encode(getattr(v, f.name), copy) for f in dataclasses.fields(v) if f.init}}
    raise TypeError(f"a checkpoint cannot hold a {type(v).__module__}.{type(v).__qualname__}")


def _decode(v, device, shapes: dict):
    """The value :func:`_encode` gave ``v``, its tensors on ``device``; ValueError (or another
    error) if ``v`` is not one, or a tensor dict named like the model's weights has other shapes."""
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if type(v) in (list, tuple):
        return type(v)(_decode(x, device, shapes) for x in v)
    if type(v) is not dict:
        return v
    tag = v.get(_TAG)
    if tag is None:
        out = {k: _decode(x, device, shapes) for k, x in v.items()}
        if out and set(out) <= set(shapes) and all(isinstance(t, torch.Tensor) for t in out.values()):
            for k, t in out.items():
                if t.dim() < len(shapes[k]) or tuple(t.shape[t.dim() - len(shapes[k]):]) != shapes[k]:
                    raise _Refused("shapes", f"its weights do not fit the run's model ({k} has shape "
                                   f"{tuple(t.shape)}, the model's is {shapes[k]})")
        return out
    if tag == "array":
        dtype, shape = np.dtype(v["dtype"]), tuple(int(n) for n in v["shape"])
        if dtype.hasobject or v["bytes"].dtype != torch.uint8 or v["bytes"].numel() != np.prod(shape) * dtype.itemsize:
            raise ValueError("an array's bytes do not match its dtype and shape")
        a = np.frombuffer(v["bytes"].numpy().tobytes(), dtype).reshape(shape).copy()
        return a[()] if v["scalar"] else a
    if tag == "generator":
        state = _decode(v["state"], "cpu", {})
        if state["bit_generator"] not in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"):
            raise ValueError(f"unknown bit generator {state['bit_generator']!r}")
        rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
        rng.bit_generator.state = state
        return rng
    module, _, name = v["class"].partition(":") if tag == "dataclass" else ("", "", "")
    if module.split(".")[0] != "fedlib":
        raise ValueError(f"unknown value {tag!r} {v.get('class', '')}")
    cls = importlib.import_module(module)
    for part in name.split("."):
        cls = getattr(cls, part)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__.split(".")[0] == "fedlib"):
        raise ValueError(f"{v['class']} is not a fedlib dataclass")
    return cls(**_decode(v["fields"], device, shapes))


def _digest(header: dict, payload: bytes) -> str:
    head = json.dumps({k: v for k, v in header.items() if k != "sha256"}, sort_keys=True).encode()
    return hashlib.sha256(head + b"\n" + payload).hexdigest()


def _count(value, low: int = 0) -> bool:
    return type(value) is int and value >= low


def _read_header(path: Path, key: str) -> tuple[dict, int]:
    """The header of checkpoint ``path`` of run ``key`` and its length in bytes; :class:`_Refused`
    if it is not one this code may resume."""
    with open(path, "rb") as f:
        line = f.readline(1 << 20)
    try:
        header = json.loads(line, parse_constant=lambda c: None) if line.endswith(b"\n") else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("checkpoint_version") != CHECKPOINT_VERSION:
        raise _Refused("foreign", f"not a version-{CHECKPOINT_VERSION} fedlib checkpoint (an older format or "
                       "another file: never unpickled)")
    if header.get("key") != key:
        raise _Refused("other-run", f"it belongs to run {header.get('key')!r}")
    if header.get("fedlib") != __version__:
        raise _Refused("other-version", f"written by fedlib {header.get('fedlib')}, this is {__version__} "
                       "(a resumed run must run the same code)")
    if header.get("code") != code_fingerprint():
        raise _Refused("other-code", f"written by other fedlib code (source fingerprint {header.get('code')}, "
                       f"this is {code_fingerprint()}: a resumed run must run the same code)")
    rounds = header.get("rounds")
    if not (_count(header.get("round"), 1) and _count(rounds) and header["round"] < rounds):
        raise _Refused("round", f"its next round {header.get('round')!r} (0-based) is outside 1 … rounds - 1 "
                       f"(rounds: {rounds!r})")
    if not (_count(header.get("phase")) and _count(header.get("payload")) and isinstance(header.get("sha256"), str)
            and all(type(header.get(k)) is float and header[k] >= 0 for k in ("seconds", "cpu_seconds"))):
        raise _Refused("foreign", "its header's phase, payload length, digest or seconds are missing or malformed")
    return header, len(line)


def _move_aside(path: Path, reason: str) -> str:
    aside = path.with_name(f"{path.name}.refused-{reason}")
    try:
        os.replace(path, aside)
        return f"moved aside to {aside}"
    except OSError as err:
        return f"not used (cannot move it aside: {err})"


def _clean_parts(path: Path) -> None:
    """Remove the ``.part`` files of ``path``'s folder whose writer is gone: ``path``'s own written
    by a dead pid of this host, any older than the claim timeout."""
    from .claims import DEFAULT_STALE_AFTER, _pid_alive

    timeout = float(os.environ.get("FEDLIB_CLAIM_TIMEOUT", DEFAULT_STALE_AFTER))
    mine = f"{path.name}.{socket.gethostname()}."
    for part in path.parent.glob("*.part"):
        pid = part.name[len(mine):-len(".part")] if part.name.startswith(mine) else ""
        with contextlib.suppress(OSError):
            if (pid.isdigit() and not _pid_alive(int(pid))) or time.time() - part.stat().st_mtime > timeout:
                part.unlink()


def _ctx_snapshot(ctx) -> dict:
    """What a round changes in the context besides the phase's state."""
    return {"history": ctx.history, "opt_state": ctx._opt_state}


@dataclass
class Checkpointer:
    """One run's checkpoints: resumes its phases from ``path`` when a usable file is there,
    writes one every ``every`` seconds and before ``deadline`` (a ``time.time()``) passes."""

    path: Path
    key: str
    every: float = DEFAULT_EVERY
    deadline: float | None = None
    elapsed: float = 0.0  # seconds (wall) of earlier executions of this run
    cpu_elapsed: float = 0.0
    resumed_at: tuple | None = None  # (phase, round) it resumed from, for the progress line
    label: str = ""  # the run, as progress lines name it
    say: object = None  # where progress lines go (None: nowhere)
    progress_every: float = field(default_factory=lambda: _every_from_env(ENV_PROGRESS, 60.0, zero=False))
    ctx: object = None  # the run's context (fedlib.run sets it): its last evaluation, for the progress lines
    _finished: list = field(default_factory=list)  # per phase entered: its encoded (state, ctx) or None (opaque)
    _current: tuple | None = None  # the interrupted phase's encoded (state, ctx), from the file
    _rounds: int | None = None  # the run's rounds, as the file says
    _restored: list | None = None  # per saved phase: its (state, ctx) decoded, the last one interrupted
    _phase: int = 0
    _started: float = field(default_factory=time.time)
    _cpu_started: float = field(default_factory=time.process_time)
    _last_write: float = field(default_factory=time.monotonic)
    _last_progress: float = field(default_factory=time.monotonic)

    @classmethod
    def open(cls, key: str, folder=None, *, every: float | None = None, deadline: float | None = None,
             say=None, label: str = "") -> "Checkpointer":
        """The run's checkpointer; loads ``<folder>/<key>.pt`` when it is a usable checkpoint (else
        moves it aside, said with ``say``, default stderr) and removes leftover ``.part`` files."""
        say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        ck = cls(checkpoint_path(key, folder), key, _every_from_env() if every is None else float(every), deadline,
                 label=label or key, say=say)
        _clean_parts(ck.path)
        if ck.path.exists():
            try:
                ck._load()
            except _Refused as refused:
                ck._refuse(refused)
        return ck

    def _load(self) -> None:
        header, start = _read_header(self.path, self.key)
        payload = self.path.read_bytes()[start:]
        if len(payload) != header["payload"]:
            raise _Refused("torn", f"torn: {len(payload)} bytes of payload, its header says {header['payload']}")
        if _digest(header, payload) != header["sha256"]:
            raise _Refused("digest", "its SHA-256 digest does not match its contents (a corrupted file)")
        try:  # tensors and plain values only: nothing in the file runs
            saved = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
            finished, current = saved["finished"], saved["current"]
            assert type(finished) is list and len(finished) == header["phase"] and type(current) is tuple
        except Exception as err:  # a payload whose digest matches, written by something else
            raise _Refused("unreadable", f"its payload is not a checkpoint's ({type(err).__name__}: {err})") from None
        self._finished, self._current, self._rounds = finished, current, header["rounds"]
        self.elapsed, self.cpu_elapsed = header["seconds"], header["cpu_seconds"]
        self.resumed_at = (header["phase"], header["round"])

    def _refuse(self, refused: _Refused, then: str = "the run starts again at round 1") -> None:
        self.say(f"checkpoint {self.path}: {refused.args[1]}; {_move_aside(self.path, refused.args[0])}; {then}")

    # ------------------------------------------------------------------ a phase
    def rounds(self, ctx, window: range, state, step, *, opaque: bool = False):
        """Run ``state = step(t, state)`` for ``t`` in ``window``, resuming and checkpointing."""
        phase = self._phase
        self._phase += 1
        if phase == 0 and self.resumed_at is not None:
            try:
                self._restored = _decoded(self, ctx)
            except _Refused as refused:
                self._refuse(refused)
                self._finished, self.resumed_at, self.elapsed, self.cpu_elapsed = [], None, 0.0, 0.0
        self._current, restored, first = None, self._restored or [], window.start
        saved = restored[phase] if phase < len(restored) else None
        if saved is not None and phase < len(restored) - 1:  # a finished phase
            self._restore(ctx, saved[1])
            return saved[0]
        if phase == len(restored) - 1:  # the interrupted phase
            self._restored = None
            if not opaque and window.start < self.resumed_at[1] < window.stop:
                first, state = self.resumed_at[1], saved[0]
                self._restore(ctx, saved[1])
            else:
                self._refuse(_Refused("round", f"its phase {phase + 1} cannot resume at round {self.resumed_at[1] + 1}"
                                      f" (its rounds: {window.start + 1} … {window.stop})"), "the phase runs in full")
        for t in range(first, window.stop):
            began = time.monotonic()
            state = step(t, state)
            last_round = time.monotonic() - began
            self._progress(ctx, phase, t, window, last_round)
            if not opaque and t + 1 < window.stop:
                self._at_boundary(ctx, phase, t + 1, state, last_round)
        self._finished += [None] * (phase + 1 - len(self._finished))
        self._finished[phase] = None if opaque else _encode((state, _ctx_snapshot(ctx)), copy=True)
        return state

    def _progress(self, ctx, phase: int, t: int, window: range, round_seconds: float) -> None:
        """A progress line every ``progress_every`` seconds: round, last evaluation, pace, ETA of the phase."""
        now = time.monotonic()
        if self.say is None or now - self._last_progress < self.progress_every:
            return
        self._last_progress = now
        left = (window.stop - t - 1) * round_seconds
        seen = next((h for h in reversed(ctx.history) if "global_accuracy" in h), None)
        accuracy = f", accuracy {100 * seen['global_accuracy']:.2f}% after round {seen['round']}" if seen else ""
        self.say(f"  {self.label}: round {t + 1}/{window.stop} (phase {phase + 1}){accuracy}, "
                 f"{round_seconds:.1f} s/round, phase ends in ≈ {left / 60:.1f} min")

    def _heartbeat(self, stop: threading.Event) -> None:
        """While the run trains, a line every ``progress_every`` seconds for every method (a
        resumable one's per-round line of :meth:`rounds` counts as one): minutes so far, last
        evaluation. It starts with ``run_grid: `` (what clean_notebooks strips from notebooks)."""
        while not stop.wait(min(self.progress_every, 5.0)):
            if time.monotonic() - self._last_progress < self.progress_every:
                continue
            self._last_progress = time.monotonic()
            seen = next((h for h in reversed(list(getattr(self.ctx, "history", None) or []))
                         if "global_accuracy" in h), None)
            accuracy = f", accuracy {100 * seen['global_accuracy']:.2f}% after round {seen['round']}" if seen else ""
            self.say(f"run_grid: {self.label}: training, {(time.time() - self._started + self.elapsed) / 60:.1f} min"
                     f" so far{accuracy}")

    def _restore(self, ctx, saved: dict) -> None:
        ctx.history, ctx._opt_state = saved["history"], saved["opt_state"]

    def _at_boundary(self, ctx, phase: int, next_round: int, state, round_seconds: float) -> None:
        """Write a checkpoint when one is due; stop when the next round would end past the deadline."""
        stop = self.deadline is not None and time.time() + 1.25 * round_seconds > self.deadline
        if stop or time.monotonic() - self._last_write >= self.every:
            size = self.write(phase, next_round, state, ctx)
            if stop:
                raise RunStopped(self.key, next_round, self.path, size)

    def write(self, phase: int, next_round: int, state, ctx) -> int:
        """Write the checkpoint atomically (``<name>.<host>.<pid>.part``, fsync, rename); its size in bytes."""
        from .records import RecordWriteError, _fsync_dir

        buffer = io.BytesIO()
        torch.save({"finished": self._finished[:phase] + [None] * (phase - len(self._finished[:phase])),
                    "current": _encode((state, _ctx_snapshot(ctx)))}, buffer)
        payload = buffer.getvalue()
        header = {"checkpoint_version": CHECKPOINT_VERSION, "key": self.key, "fedlib": __version__,
                  "code": code_fingerprint(), "phase": phase, "round": next_round, "rounds": ctx.cfg.rounds,
                  "seconds": self.seconds(), "cpu_seconds": self.cpu_seconds(), "payload": len(payload)}
        data = json.dumps({**header, "sha256": _digest(header, payload)}).encode() + b"\n" + payload
        part = self.path.with_name(f"{self.path.name}.{socket.gethostname()}.{os.getpid()}.part")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(part, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(part, self.path)
        except OSError as err:
            raise RecordWriteError(self.path, err, None) from err
        finally:
            with contextlib.suppress(OSError):
                part.unlink()
        _fsync_dir(self.path.parent)
        self._last_write = time.monotonic()
        return len(data)

    def seconds(self) -> float:
        """Wall seconds of the run so far, earlier executions included."""
        return self.elapsed + time.time() - self._started

    def cpu_seconds(self) -> float:
        return self.cpu_elapsed + time.process_time() - self._cpu_started

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _decoded(ck: Checkpointer, ctx) -> list:
    """``ck``'s saved phases decoded for the run ``ctx`` starts (its rounds, model and device)."""
    if ck._rounds != ctx.cfg.rounds:
        raise _Refused("round", f"it is of a run of {ck._rounds} rounds, this one has {ctx.cfg.rounds}")
    try:
        parts = _decode([*ck._finished, ck._current], ctx.fed.device,
                        {k: tuple(v.shape) for k, v in ctx.model.state_dict().items()})
        assert all(p is None or (type(p) is tuple and type(p[1]["history"]) is list) for p in parts)
    except _Refused:
        raise
    except Exception as err:
        raise _Refused("unreadable", f"its payload is not a checkpoint's ({type(err).__name__}: {err})") from None
    return parts


def saved_round(key: str, folder=None, say=None) -> int | None:
    """The round a checkpoint of run ``key`` resumes at (0-based), from its header alone; None if
    there is none (a file that is not a usable checkpoint is moved aside, said with ``say``)."""
    path = checkpoint_path(key, folder)
    try:
        return _read_header(path, key)[0]["round"]
    except _Refused as refused:
        (say or (lambda line: print(line, file=sys.stderr, flush=True)))(
            f"checkpoint {path}: {refused.args[1]}; {_move_aside(path, *refused.args[:1])}; its run starts again at round 1")
    except OSError:  # none
        pass
    return None


_ACTIVE: contextvars.ContextVar[Checkpointer | None] = contextvars.ContextVar("fedlib_checkpointer", default=None)


@contextlib.contextmanager
def active(checkpointer: Checkpointer | None):
    """Within the block, :func:`fedlib.experiment.run` trains with ``checkpointer`` (grids set it
    around each run, so ``run(spec, device)`` keeps its signature)."""
    token, stop = _ACTIVE.set(checkpointer), threading.Event()
    if checkpointer is not None and checkpointer.say is not None:  # a line a minute, whatever the method
        threading.Thread(target=checkpointer._heartbeat, args=(stop,), daemon=True).start()
    try:
        yield checkpointer
    finally:
        stop.set()
        _ACTIVE.reset(token)


def current() -> Checkpointer | None:
    return _ACTIVE.get()
