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
``~/.cache/fedlib/checkpoints``), written atomically (a temporary file, fsync, rename) every
``every`` seconds of training (``$FEDLIB_CHECKPOINT_EVERY``, default 300; 0: every round) and
when a deadline stops the run; :func:`fedlib.grid.run_grid` deletes it once the run's record is
written. A file from another fedlib version, other fedlib source code (:func:`code_fingerprint`)
or another spec is not used (said on stderr).
Its size is about the phase's models plus the finished phases' final models: one model for
FedAvg, τ for Clust-PSI-PFL, one per candidate for PSI-PFL.

Files are read with ``torch.load(weights_only=False)`` (they hold numpy Generators): read only
checkpoints your own runs wrote.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import os
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from . import __version__

CHECKPOINT_VERSION = 1
ENV_FOLDER = "FEDLIB_CHECKPOINTS"
ENV_EVERY = "FEDLIB_CHECKPOINT_EVERY"
DEFAULT_EVERY = 300.0  # seconds of training between two checkpoint writes

__all__ = ["Checkpointer", "RunStopped", "checkpoint_folder", "checkpoint_path", "active", "current", "saved_round",
           "CHECKPOINT_VERSION"]


class RunStopped(Exception):
    """A run stopped at a round boundary because its deadline would pass before the next one
    ends; its checkpoint is at ``path`` (``size`` bytes) and resumes at round ``round_idx``."""

    def __init__(self, key: str, round_idx: int, path: Path, size: int):
        self.key, self.round_idx, self.path, self.size = key, round_idx, Path(path), size
        super().__init__(f"run {key} stopped before round {round_idx + 1} (its deadline); checkpoint "
                         f"{path} ({size / 2**20:.1f} MiB) resumes it")


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


def _every_from_env() -> float:
    raw = os.environ.get(ENV_EVERY, "").strip()
    if not raw:
        return DEFAULT_EVERY
    try:
        every = float(raw)
    except ValueError:
        every = -1.0
    if not every >= 0:
        raise ValueError(f"${ENV_EVERY} must be a number of seconds ≥ 0 (0: a checkpoint every round), got "
                         f"{raw!r}; unset it for the default {DEFAULT_EVERY:g}")
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


def _dumps(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _loads(blob: bytes):
    return torch.load(io.BytesIO(blob), weights_only=False, map_location="cpu")


def _ctx_snapshot(ctx) -> dict:
    """What a round changes in the context besides the phase's state."""
    return {"history": ctx.history, "opt_state": ctx._opt_state}


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [_to_device(v, device) for v in value]
        return out if isinstance(value, list) else tuple(out)
    if hasattr(value, "__dataclass_fields__"):  # frozen optimiser states (fedlib.engine.optim)
        import dataclasses

        return dataclasses.replace(value, **{f.name: _to_device(getattr(value, f.name), device)
                                             for f in dataclasses.fields(value) if f.init})
    return value


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
    progress_every: float = 60.0  # seconds between two progress lines
    _finished: list = field(default_factory=list)  # per phase entered: its serialized (state, ctx) or None (opaque)
    _current: tuple | None = None  # (phase, next round, serialized state, serialized ctx) from the file
    _phase: int = 0
    _started: float = field(default_factory=time.time)
    _cpu_started: float = field(default_factory=time.process_time)
    _last_write: float = field(default_factory=time.monotonic)
    _last_progress: float = field(default_factory=time.monotonic)

    @classmethod
    def open(cls, key: str, folder=None, *, every: float | None = None, deadline: float | None = None,
             say=None, label: str = "") -> "Checkpointer":
        """The run's checkpointer; loads ``<folder>/<key>.pt`` when it is a usable checkpoint.
        ``say``: where its messages and progress lines go (default: stderr)."""
        say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        ck = cls(checkpoint_path(key, folder), key, _every_from_env() if every is None else float(every), deadline,
                 label=label or key, say=say)
        if ck.path.exists():
            try:
                blob = torch.load(ck.path, weights_only=False, map_location="cpu")
            except Exception as err:  # a torn or foreign file: the run starts again
                say(f"checkpoint {ck.path}: unreadable ({type(err).__name__}); the run starts at round 1")
                return ck
            why = ck._unusable(blob)
            if why:
                say(f"checkpoint {ck.path}: {why}; the run starts at round 1")
                return ck
            ck._finished, ck._current = list(blob["finished"]), blob["current"]
            ck.elapsed, ck.cpu_elapsed = float(blob["seconds"]), float(blob["cpu_seconds"])
            ck.resumed_at = (ck._current[0], ck._current[1]) if ck._current else None
        return ck

    def _unusable(self, blob) -> str | None:
        if not isinstance(blob, dict) or blob.get("checkpoint_version") != CHECKPOINT_VERSION:
            return f"not a version-{CHECKPOINT_VERSION} checkpoint"
        if blob.get("key") != self.key:
            return f"it belongs to run {blob.get('key')!r}"
        if blob.get("fedlib") != __version__:
            return f"written by fedlib {blob.get('fedlib')}, this is {__version__} (a resumed run must run the same code)"
        if blob.get("code") != code_fingerprint():
            return (f"written by other fedlib code (source fingerprint {blob.get('code')}, this is {code_fingerprint()}: "
                    "a resumed run must run the same code)")
        return None

    # ------------------------------------------------------------------ a phase
    def rounds(self, ctx, window: range, state, step, *, opaque: bool = False):
        """Run ``state = step(t, state)`` for ``t`` in ``window``, resuming and checkpointing."""
        phase = self._phase
        self._phase += 1
        if phase < len(self._finished) and self._finished[phase] is not None:
            saved, snap = self._finished[phase]
            self._restore(ctx, snap)
            return _to_device(_loads(saved), ctx.fed.device)
        first = window.start
        if not opaque and self._current is not None and self._current[0] == phase:
            _, first, saved, snap = self._current
            state = _to_device(_loads(saved), ctx.fed.device)
            self._restore(ctx, snap)
            self._current = None
        for t in range(first, window.stop):
            began = time.monotonic()
            state = step(t, state)
            last_round = time.monotonic() - began
            self._progress(ctx, phase, t, window, last_round)
            if not opaque and t + 1 < window.stop:
                self._at_boundary(ctx, phase, t + 1, state, last_round)
        done = None if opaque else (_dumps(state), _dumps(_ctx_snapshot(ctx)))
        self._finished += [None] * (phase + 1 - len(self._finished))
        self._finished[phase] = done
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

    def _restore(self, ctx, snap: bytes) -> None:
        saved = _loads(snap)
        ctx.history = saved["history"]
        ctx._opt_state = _to_device(saved["opt_state"], ctx.fed.device)

    def _at_boundary(self, ctx, phase: int, next_round: int, state, round_seconds: float) -> None:
        """Write a checkpoint when one is due; stop when the next round would end past the deadline."""
        stop = self.deadline is not None and time.time() + 1.25 * round_seconds > self.deadline
        if stop or time.monotonic() - self._last_write >= self.every:
            size = self.write(phase, next_round, state, ctx)
            if stop:
                raise RunStopped(self.key, next_round, self.path, size)

    def write(self, phase: int, next_round: int, state, ctx) -> int:
        """Write the checkpoint atomically; its size in bytes."""
        from .records import write_bytes

        done = self._finished[:phase] + [None] * (phase - len(self._finished[:phase]))
        blob = {"checkpoint_version": CHECKPOINT_VERSION, "key": self.key, "fedlib": __version__, "code": code_fingerprint(),
                "finished": done, "current": (phase, next_round, _dumps(state), _dumps(_ctx_snapshot(ctx))),
                "seconds": self.seconds(), "cpu_seconds": self.cpu_seconds()}
        data = _dumps(blob)
        write_bytes(self.path, data)
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


def saved_round(key: str, folder=None) -> int | None:
    """The round a usable checkpoint of run ``key`` resumes at (0-based), else None."""
    path = checkpoint_path(key, folder)
    if not path.exists():
        return None
    ck = Checkpointer.open(key, folder, say=lambda line: None)
    return None if ck.resumed_at is None else int(ck.resumed_at[1])


_ACTIVE: contextvars.ContextVar[Checkpointer | None] = contextvars.ContextVar("fedlib_checkpointer", default=None)


@contextlib.contextmanager
def active(checkpointer: Checkpointer | None):
    """Within the block, :func:`fedlib.experiment.run` trains with ``checkpointer`` (grids set it
    around each run, so ``run(spec, device)`` keeps its signature)."""
    token = _ACTIVE.set(checkpointer)
    try:
        yield checkpointer
    finally:
        _ACTIVE.reset(token)


def current() -> Checkpointer | None:
    return _ACTIVE.get()
