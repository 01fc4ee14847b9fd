"""Grids of runs: ``run_grid`` and what it needs — the records already there, claims shared
with other processes, progress, budgets and backends.

``run_grid`` writes one JSON file per record (:func:`fedlib.records.write`: atomic and fsynced,
a crash never leaves a half-written record), skips specs whose valid record is already there,
found by their fields whatever version wrote it (an interrupted grid resumes where it stopped; a
file that fails :func:`fedlib.records.read_strict` — truncated, NaN, another run's record, no
metrics — is named on stderr and recomputed), and validates every spec, and finds every data set
it needs, before any training starts. With a
``budget`` it starts only the runs estimated (:func:`estimate_seconds`: :func:`fedlib.cost.estimate`,
from the records of comparable runs) to end before the budget does, and leaves the others for a later call.

Layers: this module depends on :mod:`fedlib.experiment` (the spec and the run), which re-exports
its public names on first use (``experiment.run_grid``); the Ray backend, :mod:`fedlib.ray_grid`,
is imported here when a grid runs on Ray.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from .. import checkpoint, claims, cost, lookup, records, run as _run
from ..cost import device_kind_of  # noqa: F401  (re-exported: the budget helpers' public name)
from ..engine import resolve_device
from ..spec import ENV_SHARING, RunSpec, record_path, sharing  # noqa: F401  (ENV_SHARING: re-exported)
from ..methods import FLConfig, method_info
from ..validation import check_choice, check_folder, check_int, check_number, fail

__all__ = ["run_grid", "load_records", "write_manifest", "load_grid", "present_records", "check_data"]
# The budget helpers (estimate_seconds, reserve_seconds, timing_records, timing_fields, fits_budget, sharing, device_kind_of,
# SAFETY_FACTOR, ENV_SHARING) are public for benchmarks/paper_grid.py but stay out of __all__, the
# list of validated entry points (tests/test_bad_inputs.py); estimate_seconds checks its own inputs.


# ----------------------------------------------------------------------------- records there
def _unrecorded(results_dir: Path, specs) -> list:
    """The specs without a finished record (status ok, infeasible or failed) in ``results_dir``, found
    by their fields (:func:`fedlib.lookup.where`): a record written under another fedlib version
    (another file name) counts; a file failing its checks (truncated, NaN) does not: recomputed."""
    return [s for s, path in zip(specs, lookup.where(specs, results_dir)) if path is None]


def _recorded(results_dir: Path, spec: RunSpec) -> bool:
    return not _unrecorded(results_dir, [spec])


def _check_writable(results_dir: Path) -> None:
    """Fail before any training if records cannot be written to ``results_dir``."""
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=results_dir, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"results_dir {str(results_dir)!r} is not writable ({err.strerror or err}); "
                         "choose another folder (results_dir= or $FEDLIB_RESULTS)") from None


PROGRESS_MODES = ("bar", "lines", "rounds", "off")


def _progress_mode(progress) -> str:
    """'bar', 'lines', 'rounds' or 'off' from run_grid's ``progress`` argument and ``$FEDLIB_PROGRESS``."""
    if progress is False or progress is None:
        return "off"
    if progress is True or progress == "auto":
        progress = os.environ.get("FEDLIB_PROGRESS", "").strip().lower() or "bar"
    if progress not in PROGRESS_MODES:
        raise ValueError(f"progress={progress!r} (or $FEDLIB_PROGRESS) is not one of "
                         f"{PROGRESS_MODES}: use 'bar' for a progress bar, 'lines' for one line per "
                         "run (headless/papermill logs), 'rounds' for only the lines of runs in progress, 'off' for silence")
    return progress


def _describe(s: RunSpec) -> str:
    """A run as progress lines name it; the partition by its display name (:func:`fedlib.partition.partition_name`)."""
    from fedlib.partition import partition_name

    tag = "" if s.reproduction == "paper_text" else f" ({s.reproduction})"
    return f"{s.dataset} ({partition_name(s.protocol, s.level)}) K={s.n_clients} {s.method}{tag} seed={s.seed}"


# ----------------------------------------------------------------------------- budgets
#: A run starts under a budget only if ``SAFETY_FACTOR`` × its estimated seconds fit in the time
#: left: the median of comparable runs is a typical run, and one run in two takes longer. (The
#: longest comparable run must fit too: :func:`reserve_seconds`.)
SAFETY_FACTOR = 1.15

def estimate_seconds(spec: RunSpec, records, device_kind: str, processes: int | None = None) -> float | None:
    """The seconds ``spec``'s run is expected to take, for the budget: :func:`fedlib.cost.estimate`'s
    (the median cost of comparable finished runs among ``records``: the same data set, training
    length, device kind and sharing, the same method and K if any, else any method on the data
    set); None when no record is comparable.

    The budget compares wall-clock deadlines while a CPU estimate is CPU-seconds (``cpu_seconds``,
    every thread summed; records without it: wall seconds × threads, :mod:`fedlib.cost`): for the
    one-thread CPU runs the grids are measured with, CPU-seconds ≈ wall seconds; for a run of T
    busy threads the estimate is up to T times its wall time, so the budget errs on the side of
    leaving a run for later. On a GPU the estimate is the device wall seconds. The estimate is the
    median itself; :data:`SAFETY_FACTOR` is applied by :func:`fits_budget`.
    """
    return cost.estimate(spec, records, device_kind, processes).seconds


def cpu_capability() -> str:
    """The instruction set ATen dispatches to on this host (``'AVX512'``, ``'AVX2'``, …): what a
    record names as ``host['cpu_capability']`` (:func:`fedlib.run.host_of`)."""
    return torch.backends.cpu.get_cpu_capability()


def host_line(records, device_kind: str, here: str | None = None) -> str | None:
    """The line a budget prints about this host's speed against the hosts that measured ``records``
    (:func:`fedlib.cost.host_ratios`; ``here`` default :func:`cpu_capability`), None on a GPU or where no
    other host's records are measured against this one's."""
    if device_kind_of(device_kind) != "cpu":
        return None
    here = cpu_capability() if here is None else here
    ratios = cost.host_ratios(records, here)
    if not ratios:
        return None
    parts = "; ".join(f"{r.ratio:.2f} × its CPU-seconds on an {cap} host (the median over {r.settings} "
                      f"setting{'s' * (r.settings != 1)} measured on both)" for cap, r in ratios.items())
    return (f"a run on this host ({here}) costs {parts}: the budget scales those records before it reserves "
            f"(fedlib.cost.on_host; the printed estimates are an {cost.REFERENCE_CAPABILITY} host's: "
            "fedlib.cost.on_reference_host)")


def reserve_seconds(spec: RunSpec, records, device_kind: str, processes: int | None = None,
                    here: str | None = None) -> float | None:
    """What a budget holds ``spec``'s run to, in the unit :func:`fits_budget` reads (it multiplies by
    :data:`SAFETY_FACTOR`): the median of the comparable runs (:func:`estimate_seconds`) raised to
    the longest of them / ``SAFETY_FACTOR``, so that ``SAFETY_FACTOR × reserve = max(SAFETY_FACTOR ×
    median, longest)``: a run starts only if the longest comparable run measured would have ended in
    time too. ``here``: the CPU capability of the host that will compute the run (on a CPU; the
    budgets pass :func:`cpu_capability`): the records measured on other hosts are first scaled to it
    (:func:`fedlib.cost.on_host`), so a budget on a host slower than the records' does not start runs
    that outlast it; None reads the records as measured. A typical run's estimate is the median (what ``--list`` and the plan print); the
    reserve only decides what starts near a deadline, where a run that outlasts it is cut and, on a
    machine that is not kept, lost. ``benchmarks/estimate_accuracy.py`` measures, left one out over
    the committed runs, how many runs outlast each rule. None when no record is comparable.

    >>> recs = [{"status": "ok", "cpu_seconds": c, "device": "cpu", "spec": {"dataset": "adult", "method": "fedavg",
    ...          "n_clients": 10, "n_train": 2000}, "fl": {"rounds": 2, "local_epochs": 1}} for c in (100.0, 110.0, 230.0)]
    >>> s = RunSpec("adult", "dirichlet", 0.5, 10, 0, "fedavg", fl={"rounds": 2, "local_epochs": 1}, n_train=2000)
    >>> [round(f(s, r, "cpu"), 6) for f, r in ((estimate_seconds, recs), (reserve_seconds, recs), (reserve_seconds, recs[:2]))]
    [110.0, 200.0, 105.0]"""
    if here is not None and device_kind_of(device_kind) == "cpu":
        records = cost.on_host(records, here)
    est = cost.estimate(spec, records, device_kind, processes)
    if est.seconds is None:
        return None
    return max(est.seconds, est.longest / SAFETY_FACTOR)


def why_left(reserve: float | None) -> str:
    """Why a run was left for a later call, from its :func:`reserve_seconds` (None: the budget had
    ended before it was priced), in the grids' words."""
    return ("the budget has ended" if reserve is None else
            f"it reserves {reserve:.0f} s; it would not end before the budget does")


def left_total(skipped) -> str:
    """The closing line's words for the runs a budget left, ``skipped`` a list of (spec, reserve)."""
    known = [e for _, e in skipped if e is not None]
    return (f"{len(skipped)} runs left for a later call, reserving {sum(known):.0f} s of runs"
            + (f" ({len(skipped) - len(known)} without an estimate: the budget had ended)"
               if len(known) < len(skipped) else ""))


def admission_rule() -> str:
    """What a budget asks of a run before it starts, as the grids' first line says it."""
    return (f"a run starts only if {SAFETY_FACTOR} × its estimated seconds, and the longest comparable run, end "
            f"before it {budget_rule()}")


_TIMINGS: dict[str, tuple[tuple[int, int], dict | None]] = {}  # path -> ((mtime_ns, size), fields or None)


def timing_fields(path: Path) -> dict | None:
    """The fields :func:`fedlib.cost.estimate` reads of the record at ``path``; None for anything else."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("status") != "ok" or not isinstance(rec.get("spec"), dict):
        return None
    spec, fl = rec["spec"], rec.get("fl") or {}
    return {"status": "ok", "seconds": rec.get("seconds"), "device": rec.get("device"),
            "spec": {k: spec.get(k) for k in ("dataset", "method", "n_clients", "n_train", "reproduction", "protocol",
                                              "hyper")},
            "fl": {k: fl.get(k) for k in ("rounds", "local_epochs")},
            "cpu_seconds": rec.get("cpu_seconds"),
            "host": {k: (rec.get("host") or {}).get(k) for k in ("processes", "threads", "cpu_capability")}}


def timing_records(*folders) -> list[dict]:
    """What :func:`fedlib.cost.estimate` reads of every finished record in ``folders`` (each read
    recursively; a folder that does not exist gives none; a file found twice counts once). Each
    file is parsed once per process and version (its mtime and size), so calling this before
    every run of a grid costs a directory walk."""
    out, seen = [], set()
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for path in folder.rglob("*.json"):
            try:
                st = path.stat()
                name = str(path.resolve())
            except OSError:
                continue
            if name in seen:
                continue
            seen.add(name)
            stamp = (st.st_mtime_ns, st.st_size)
            hit = _TIMINGS.get(name)
            if hit is None or hit[0] != stamp:
                hit = _TIMINGS[name] = (stamp, timing_fields(path))
            if hit[1] is not None:
                out.append(hit[1])
    return out


def fits_budget(estimate: float | None, deadline: float, now: float | None = None) -> bool:
    """Whether a run estimated at ``estimate`` seconds may start now (``time.time()``) and end
    before ``deadline`` (a ``time.time()`` value): ``now + SAFETY_FACTOR · estimate ≤ deadline``.
    Nothing starts once the deadline has passed; a run with no estimate (None) starts before it
    — the budget cannot protect it."""
    now = time.time() if now is None else now
    return now < deadline and (estimate is None or now + SAFETY_FACTOR * estimate <= deadline)


#: Rounds a resumable run must be estimated to complete before the deadline for it to start.
FIRST_ROUNDS = 2

#: "1": every run starts only if all of it fits the budget, resumable ones too (no run is left as a
#: checkpoint: a GPU lease that brings back a few files of 16 MiB cannot return 16 workers'
#: checkpoints; ``benchmarks/gpu_lease.sh`` sets it); "0" or unset: resumable runs start on their
#: first rounds.
ENV_WHOLE_RUNS = "FEDLIB_WHOLE_RUNS"


def whole_runs() -> bool:
    """``$FEDLIB_WHOLE_RUNS`` read: True for "1", False for "0" or unset; anything else is refused
    (ValueError naming the variable)."""
    value = os.environ.get(ENV_WHOLE_RUNS, "").strip()
    if value not in ("", "0", "1"):
        fail(f"${ENV_WHOLE_RUNS}", "1 (a run starts only if all of it fits the budget), 0 or unset", value)
    return value == "1"


def budget_rule() -> str:
    """What a budget asks of a resumable run, as the grids' first line says it (:func:`whole_runs`)."""
    if whole_runs():
        return f"(${ENV_WHOLE_RUNS}=1: all of it, resumable runs too)"
    return f"(a resumable method's run: those of its first {FIRST_ROUNDS} rounds; it stops at a round boundary)"


def seconds_to_start(spec: RunSpec, estimate: float | None) -> float | None:
    """The seconds a budget must still hold for ``spec``'s run to start, from its whole run's
    ``estimate`` (None: unknown): a resumable method's run (:attr:`fedlib.methods.contract.
    MethodInfo.resumable`) needs its first :data:`FIRST_ROUNDS` rounds, since the deadline stops
    it at a round boundary with a checkpoint, unless ``$FEDLIB_WHOLE_RUNS`` is 1
    (:func:`whole_runs`); any other run needs all of it."""
    if estimate is None or not method_info(spec.method).resumable or whole_runs():
        return estimate
    return estimate * min(1.0, FIRST_ROUNDS / FLConfig.from_dict(spec.effective()[1]).rounds)


class _Budget:
    """run_grid's budget: the deadline, where the estimates come from, the runs it left."""

    def __init__(self, seconds: float, folders, kind: str, say):
        self.deadline = time.time() + seconds
        self.folders, self.kind, self.say = list(folders), kind, say
        self.processes = sharing()
        self.here = cpu_capability() if kind == "cpu" else None
        self.skipped: list[tuple[RunSpec, float | None]] = []
        self.stopped: list[tuple[RunSpec, checkpoint.RunStopped]] = []  # started, stopped at a round boundary

    def reserve(self, s: RunSpec) -> float | None:
        """What the budget holds ``s``'s run to (:func:`reserve_seconds`); None: no comparable record."""
        return reserve_seconds(s, timing_records(*self.folders), self.kind, self.processes, self.here)

    def admit(self, s: RunSpec) -> bool:
        """Whether ``s`` may start now; if not, it is left for a later call (``skipped``). A
        resumable method's run (:attr:`fedlib.methods.contract.MethodInfo.resumable`) starts when
        its first :data:`FIRST_ROUNDS` rounds fit: the deadline stops it at a round boundary with a
        checkpoint. Any other run starts only when all of it fits."""
        est = self.reserve(s)
        if fits_budget(seconds_to_start(s, est), self.deadline):
            if est is None:
                self.say(f"run_grid: no comparable record estimates {_describe(s)} on {self.kind}: started; "
                         "the budget cannot protect it")
            return True
        self.skipped.append((s, est))
        return False


_POLL_SECONDS = 0.5
_NOTE_SECONDS = 60.0  # between two lines of a wait on other processes' runs


def _claimed_live(path: Path) -> bool:
    """Whether another live process holds the claim on the run of ``path``."""
    return claims.claim_path(path).exists() and not claims.is_stale(path)


def _run_claimed(specs, results_dir: Path, device, bar, report, budget: _Budget | None = None,
                 say=print) -> list:
    """Compute each spec this process can claim; return those other live processes hold. Under
    a ``budget``, a run that would not end before its deadline is not claimed (it is left in
    ``budget.skipped``)."""
    held = []
    for s in specs:
        path = record_path(results_dir, s)
        if (budget is not None and not _recorded(results_dir, s) and not _claimed_live(path)
                and not budget.admit(s)):
            continue
        if not (claims.try_claim(path) or (claims.is_stale(path) and claims.take_over(path))):
            held.append(s)
            continue
        try:
            if _recorded(results_dir, s):  # finished by another process since we looked
                report(s, None)
                continue
            if bar is not None:
                bar.set_postfix_str(_describe(s))
            ck = checkpoint.Checkpointer.open(s.key(), deadline=None if budget is None else budget.deadline, say=say,
                                              label=_describe(s))
            if ck.resumed_at is not None:
                say(f"run_grid: {_describe(s)} resumes at round {ck.resumed_at[1] + 1} "
                    f"(training phase {ck.resumed_at[0] + 1}) from {ck.path}")
            try:
                with checkpoint.active(ck):
                    record = _run.run(s, device)  # read here: tests and notebooks may replace it
            except checkpoint.RunStopped as stop:
                say(f"run_grid: {_describe(s)}: stopped before round {stop.round_idx + 1} by the budget; "
                    f"checkpoint {stop.path} ({stop.size / 2**20:.1f} MiB) resumes it")
                if budget is not None:
                    budget.stopped.append((s, stop))
                continue
            records.write(path, record)
            ck.delete()  # the record is written: the run will not resume
            report(s, record)
        finally:
            claims.release(path)
    return held


def fitting_prefix(estimates, seconds_left: float) -> int:
    """How many leading runs of a group, estimated at ``estimates`` seconds each (a list; None:
    unknown), may train together in ``seconds_left``: the most whose summed estimate, times
    :data:`SAFETY_FACTOR`, ends in time (a group trains faster than its runs one by one, so the sum
    errs on the safe side). A group is stopped only at its end: its checkpoint holds every run's
    models (136 MiB compressed for one window's group of Table III runs, too large for a lease to
    bring back) and resumes only that very group, so a group that would outlast the budget is
    trimmed, never started to be cut. An unknown estimate: every run (the budget cannot protect them).

    >>> fitting_prefix([100.0, 100.0, 100.0], 250.0), fitting_prefix([100.0, None], 1.0)
    (2, 2)"""
    if any(e is None for e in estimates):
        return len(estimates)
    n, total = 0, 0.0
    for e in estimates:
        if SAFETY_FACTOR * (total + e) > seconds_left:
            break
        n, total = n + 1, total + e
    return n


def _split_group(group, budget: _Budget | None) -> tuple[list, list]:
    """The part of ``group`` that trains together under ``budget`` and the rest, left to the runs
    one by one (:func:`_run_local` or the pool, each with its own budget check): the leading runs
    whose summed estimate fits what is left (:func:`fitting_prefix`); fewer than two: none."""
    if budget is None:
        return group, []
    estimates = [budget.reserve(s) for s in group]
    n = fitting_prefix(estimates, budget.deadline - time.time())
    if n < 2:
        return [], group
    if any(e is None for e in estimates):
        budget.say(f"run_grid: no comparable record estimates every run of {len(group)} runs together "
                   f"({_describe(group[0])} …): started; the budget stops them at a round boundary")
    elif n < len(group):
        budget.say(f"run_grid: {n} of {len(group)} runs together ({_describe(group[0])} …): all of them "
                   f"would not end within the budget; the other {len(group) - n} run one by one")
    return group[:n], group[n:]


def _run_together(specs, results_dir: Path, device, bar, report, max_group: int | None,
                  budget: _Budget | None = None, say=print) -> list:
    """Train each group of ``specs`` that may train together (:func:`fedlib.together.group_specs`)
    in one :func:`fedlib.together.run_together` call, the runs this process can claim; return
    the specs left for :func:`_run_local` (other methods, groups of one, runs held elsewhere).
    Each group checkpoints as one run (key :func:`fedlib.together.group_key`); under a ``budget``
    a group trains only the leading runs whose summed estimate fits (:func:`fitting_prefix`), the
    others one by one; a round boundary stops it only where the estimates were wrong."""
    from .. import together as T

    left = []
    for group in T.group_specs(specs, max_group):
        if len(group) < 2 or T.together_key(group[0]) is None:
            left.extend(group)
            continue
        mine = []
        try:
            for s in group:
                path = record_path(results_dir, s)
                if not (claims.try_claim(path) or (claims.is_stale(path) and claims.take_over(path))):
                    left.append(s)  # another process holds it: _run_local waits for it
                elif _recorded(results_dir, s):
                    claims.release(path)
                    report(s, None)
                else:
                    mine.append(s)
            if len(mine) == 1:  # nothing to train it with: alone, as usual
                claims.release(record_path(results_dir, mine[0]))
                left.extend(mine)
                mine = []
                continue
            if not mine:
                continue
            mine, alone = _split_group(mine, budget)
            for s in alone:  # trained one by one, after the groups
                claims.release(record_path(results_dir, s))
            left.extend(alone)
            if not mine:
                continue
            if bar is not None:
                bar.set_postfix_str(f"{len(mine)} runs together: {_describe(mine[0])} …")
            label = f"{len(mine)} runs together ({_describe(mine[0])} …)"
            ck = checkpoint.Checkpointer.open(T.group_key(mine), deadline=None if budget is None else budget.deadline,
                                              say=say, label=label)
            if ck.resumed_at is not None:
                say(f"run_grid: {label} resume at round {ck.resumed_at[1] + 1} from {ck.path}")
            try:
                done = T.run_together(mine, device, checkpointer=ck)
            except checkpoint.RunStopped as stop:
                say(f"run_grid: {label}: stopped before round {stop.round_idx + 1} by the budget; checkpoint "
                    f"{stop.path} ({stop.size / 2**20:.1f} MiB) resumes them")
                if budget is not None:
                    budget.stopped.extend((s, stop) for s in mine)
                continue
            for s, record in zip(mine, done):
                records.write(record_path(results_dir, s), record)
                report(s, record)
            ck.delete()  # every record of the group is written
        finally:
            for s in mine:
                claims.release(record_path(results_dir, s))
    return left


# ----------------------------------------------------------------------------- runs one by one, or N at once
#: How many times the pool of ``workers`` processes is restarted after a worker died (killed,
#: out of memory) before the runs it lost are given up (named in a RuntimeError, not recorded).
POOL_RESTARTS = 3

#: Tests only: a file path; the first worker run to find it absent creates it and SIGKILLs its own
#: process (a worker killed mid-grid, e.g. out of memory), so that a test sees the grid recover.
ENV_KILL_ONCE = "PAPER_GRID_TEST_KILL_ONCE"


def _kill_once_for_tests() -> None:
    import multiprocessing
    import signal

    flag = os.environ.get(ENV_KILL_ONCE)
    if flag and multiprocessing.parent_process() is not None:
        try:
            fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


def _compute_one(spec: RunSpec, results_dir, device, mode: str, budget: float | None = None,
                 estimate_from=(), wait: bool = True) -> dict | None:
    """One run through :func:`run_grid` (which claims it, records it, and skips it if recorded);
    None when a ``budget`` left it for a later call (or ended while another process computed it)."""
    kw = {} if budget is None else {"budget": budget, "estimate_from": estimate_from}
    found = run_grid([spec], results_dir, device=device, progress=mode, wait=wait, **kw)
    return found[0] if found else None


def _one_run(spec: RunSpec, results_dir, device, deadline: float | None, folders, mode: str,
             wait: bool = True) -> tuple:
    """``(spec, record, elsewhere, estimate)`` of one run: ``elsewhere`` when another process
    sharing the folder had recorded or claimed it before this one reached it (its record is then
    read, or waited for, instead of computed). With a ``deadline`` (a ``time.time()`` value) the
    run starts only if it fits (:func:`fits_budget`; a resumable method's run only needs its first
    rounds to: :func:`seconds_to_start`), its seconds estimated from the records in
    ``results_dir`` and ``folders``; else ``record`` is None and ``estimate`` says what it needs."""
    _kill_once_for_tests()
    results_dir = Path(results_dir)
    path = record_path(results_dir, spec)
    recorded = _recorded(results_dir, spec)
    elsewhere = recorded or _claimed_live(path)
    if deadline is None:
        return spec, _compute_one(spec, results_dir, device, mode, wait=wait), elsewhere, None
    kind = resolve_device(device).type
    est = None if recorded else reserve_seconds(spec, timing_records(results_dir, *folders), kind, sharing(),
                                                cpu_capability() if kind == "cpu" else None)
    left = deadline - time.time()
    if not recorded and (left <= 0 or not (elsewhere or fits_budget(seconds_to_start(spec, est), deadline))):
        return spec, None, elsewhere, est
    return spec, _compute_one(spec, results_dir, device, mode, max(left, 1e-3), folders, wait), elsewhere, est


def _one_run_star(args) -> tuple:
    return _one_run(*args)


def _init_worker(threads: int, processes: int | None) -> None:
    """A pool worker: ``threads`` torch threads; ``$FEDLIB_SHARING`` = ``processes`` (the pool's
    processes share the device: their estimates and records say so) unless it is set."""
    torch.set_num_threads(threads)
    if processes is not None:
        os.environ.setdefault(ENV_SHARING, str(processes))


def _run_each(todo, results_dir: Path, device, deadline, folders, mode: str, workers: int, on_run, say,
              wait: bool = True) -> None:
    """The runs one by one in this process (``workers`` = 1), or ``workers`` at once in as many
    spawned processes, each claimed, recorded and skipped if recorded by :func:`run_grid` itself
    and checked against the one ``deadline`` just before it starts (:func:`_one_run`);
    ``on_run(spec, record, elsewhere, estimate)`` as each finishes or is left. A run another live
    process holds goes last (its record is then read, or waited for), so that processes sharing
    a folder each compute a different run; a run another process recorded meanwhile is skipped.
    ``wait`` False (one process): the runs other processes hold are left to them
    (``on_run(spec, None, True, None)``) instead of waited for."""
    def held(s: RunSpec) -> bool:
        return _claimed_live(record_path(results_dir, s))

    if workers == 1 or len(todo) <= 1:
        pending = list(todo)
        while pending := _unrecorded(results_dir, pending):
            free = [x for x in pending if not held(x)]
            if not free and not wait:
                for x in pending:
                    on_run(x, None, True, None)
                return
            s = free[0] if free else pending[0]
            pending.remove(s)
            got = _one_run(s, results_dir, device, deadline, folders, mode, wait=not free)
            if got[1] is None and free and held(s):  # another process claimed it first: back to it last
                pending.append(s)
                continue
            on_run(*got)
        return
    threads = max(1, (os.cpu_count() or 1) // workers)
    processes = None if os.environ.get(ENV_SHARING) else workers
    _run_pool(sorted(todo, key=held), results_dir, device, deadline, folders, mode, workers, threads, processes,
              on_run, say)


def _run_pool(specs, results_dir: Path, device, deadline, folders, mode: str, workers: int, threads: int,
              processes: int | None, on_run, say) -> None:
    """The runs on a pool of ``workers`` spawned processes (``concurrent.futures``). A worker that
    dies (SIGKILL, out of memory) breaks the pool (``BrokenProcessPool``) instead of hanging it:
    the runs it lost (its claims are stale once its pid is gone) are computed again on a new pool,
    at most :data:`POOL_RESTARTS` times; then the runs still lost are named in a RuntimeError."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")
    pending = list(specs)
    for attempt in range(POOL_RESTARTS + 1):
        lost = []
        with ProcessPoolExecutor(min(workers, len(pending)), mp_context=ctx, initializer=_init_worker,
                                 initargs=(threads, processes)) as pool:
            futures = {pool.submit(_one_run_star, (s, str(results_dir), device, deadline, folders, mode)): s
                       for s in pending}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except BrokenProcessPool:
                    lost.append(futures[future])
                    continue
                on_run(*result)
        pending = _unrecorded(results_dir, lost)
        if not pending:
            return
        say(f"run_grid: a worker process died: {len(pending)} run{'s' if len(pending) != 1 else ''} lost"
            + (f"; computing {'them' if len(pending) != 1 else 'it'} again" if attempt < POOL_RESTARTS else ""))
    raise RuntimeError(f"{len(pending)} runs were lost {POOL_RESTARTS + 1} times by a worker process that died "
                       "(killed, out of memory): " + "; ".join(_describe(s) for s in pending))


BACKENDS = ("local", "ray")


def _ray_backend():
    """:mod:`fedlib.ray_grid`, the Ray backend, imported when a grid runs there (so that
    importing fedlib imports no Ray). It depends on :mod:`fedlib.experiment` (it runs `RunSpec`s
    with `run`), never on this module. It provides ``check_options(ray_address, num_cpus,
    num_gpus, max_retries)`` and ``run_on_ray(specs, device=, on_record=, ray_address=,
    num_cpus=, num_gpus=, max_retries=)``."""
    from .. import ray_grid

    return ray_grid


def run_grid(specs, results_dir, *, device="auto", progress=True, backend: str = "local",
             ray_address: str | None = None, num_cpus: float = 1, num_gpus: float = 0,
             max_retries: int = 3, budget: float | None = None, estimate_from=(),
             together: bool = False, max_together: int | None = None, workers: int = 1,
             on_run=None, wait: bool = True) -> list[dict]:
    """Run every spec not already recorded in ``results_dir``; return the records of the specs
    that have one (all of them, unless a ``budget`` left some for a later call).

    Every spec is validated first, so a typo fails before any training starts; finished
    records are reused, never recomputed or overwritten. A diverged run is recorded with
    status ``failed`` and, like an infeasible one, not retried (delete its record to retry).
    A results folder that cannot be written fails before any training. Records are found by the
    specs' fields (:func:`fedlib.lookup.where`), not by file name (:meth:`RunSpec.key` holds
    fedlib's version): runs recorded before a version bump stay skipped; two records of one run
    are refused, naming both files. Claims and checkpoints are named by the key: a run a version
    bump finds unfinished restarts from round 1.

    Where the runs are computed (``backend``):

    - ``'local'`` (default): in this process, one after another. Several processes (or
      machines) may run the same grid on one **shared** results folder: each run is claimed
      before it is computed (:mod:`fedlib.claims`), so every run is computed once and recorded
      once; a process waits for the runs others hold (``wait`` False: it leaves them, without a
      record) and takes over those whose process died.
      Use it on one machine, or on machines that share a folder but no Ray (e.g. SLURM array
      jobs on one network filesystem).
    - ``'ray'``: every run one Ray task (:mod:`fedlib.ray_grid`) needing ``num_cpus`` CPUs and
      ``num_gpus`` GPUs; this process writes each finished record, so the workers share no
      folder with it. ``ray_address`` (or ``$RAY_ADDRESS``) joins a running cluster; neither
      starts a local Ray instance. A worker that dies mid-run is retried (``max_retries``
      times); a run that raises is reported after the others finished (its record is not
      written; the records already written stay). Use it for a cluster, or for several runs at
      once on one machine (``num_cpus=1``: one run per core).

    ``progress``: True (default) follows ``$FEDLIB_PROGRESS`` and else draws a tqdm bar over
    the finished runs (a widget in JupyterLab); ``'lines'`` prints one line per finished run
    to stderr (what ``make workbook`` shows through papermill's log), and for a run in progress a
    line a minute (:class:`fedlib.checkpoint.Checkpointer`: its round, last accuracy, seconds per
    round and when it ends); ``'rounds'``: only the lines of the runs in progress (and of a run
    resumed or stopped at a round boundary), for a caller that prints its own line per run
    (``python -m fedlib.grid``); ``'bar'``; False or ``'off'``.

    ``budget`` (seconds from this call; local backend only): before claiming each run, its
    seconds are estimated (:func:`estimate_seconds`, :func:`fedlib.cost.estimate`: the median
    CPU-seconds — on a GPU, device wall seconds — of comparable finished runs in ``results_dir`` and the folders ``estimate_from``, on the same kind of device and,
    where records say so, under the same sharing, ``$FEDLIB_SHARING``), and a run is started
    only if :data:`SAFETY_FACTOR` × that estimate, and the longest of those runs, end before the
    budget does (:func:`reserve_seconds`); the others are
    left, unclaimed, for a later call (``'lines'`` prints how many and their estimated seconds),
    and the runs after them are still tried (a shorter one may fit). A run is never stopped once
    started: the budget decides only what starts. Without any comparable record a run has no
    estimate and is started (said so in ``'lines'`` mode): the budget cannot protect it. Once
    the budget has ended nothing starts, and runs that other processes hold are no longer waited
    for. The records returned are then only those that exist.

    ``together`` (local backend): the runs that may train together
    (:func:`fedlib.together.group_specs`: the FedAvg family, one data set, architecture, K and
    training protocol; at most ``max_together`` a group) train as one group each, their clients
    in one engine call per round (:func:`fedlib.together.run_together`), each record written by
    :func:`fedlib.records.write` as it would be alone — on the CPU the same record bit for bit,
    its ``seconds`` the group's divided among its runs (``host['together']``). Runs of other
    methods, and runs another process holds, go the usual way. Worth it on a GPU, where one call
    of many rows costs little more than one of few.

    ``workers`` (local backend): the runs (those not trained together) are computed ``workers``
    at once, each in its own spawned process on ``max(1, cores // workers)`` torch threads
    (recording ``host['processes'] = workers`` unless ``$FEDLIB_SHARING`` is set), each claimed,
    recorded and skipped if recorded as above, and, under a ``budget``, checked against the one
    deadline just before it starts. A worker that dies (killed, out of memory) loses its run:
    the pool is started again for the runs lost, at most :data:`POOL_RESTARTS` times, then they
    are named in a RuntimeError. A run another live process holds is taken last.

    ``on_run`` (local backend): ``on_run(spec, record, elsewhere, estimate)`` for each run not
    recorded at the start, as it finishes or is left, in this process: ``record`` None where the
    budget left it for a later call (``estimate``: its estimated seconds, or None) or ended while
    another process computed it; ``elsewhere`` True where another process sharing the folder had
    recorded or held it first (the record is that process's). With ``on_run`` (or ``workers`` >
    1) the runs are taken one at a time in that order, as ``python -m fedlib.grid`` does.
    """
    mode = _progress_mode(progress)
    check_choice(backend, "backend", BACKENDS)
    check_number(budget, "budget", 0, low_open=True, optional=True)
    if budget is not None and backend != "local":
        fail("budget", f"None with backend={backend!r} (only the local backend keeps a budget): "
                       "use backend='local', or leave budget out", budget)
    estimate_from = [estimate_from] if isinstance(estimate_from, (str, os.PathLike)) else list(estimate_from)
    if estimate_from and budget is None:
        fail("estimate_from", "left out unless budget is given (its records estimate runs for the budget)",
             [str(f) for f in estimate_from])
    for folder in estimate_from:
        if not Path(folder).is_dir():
            fail("estimate_from", "existing folders of records", str(folder))
    check_choice(together, "together", (False, True))
    if together and backend != "local":
        fail("together", "False with backend='ray' (runs train together in this process); use backend='local'",
             together)
    if max_together is not None and not together:
        fail("max_together", "None unless together=True", max_together)
    check_int(max_together, "max_together", 1, optional=True)
    check_int(workers, "workers", 1)
    if (workers > 1 or on_run is not None) and backend != "local":
        fail("workers, on_run", f"1 and None with backend={backend!r} (a pool of processes and a callback per run "
             "are the local backend's): use backend='local'", (workers, on_run))
    if on_run is not None and not callable(on_run):
        fail("on_run", "None or a callable on_run(spec, record, elsewhere, estimate)", on_run)
    check_settings()  # the environment's settings, before any training
    if backend != "local":
        _ray_backend().check_options(ray_address, num_cpus, num_gpus, max_retries)
    if ray_address is not None and backend != "ray":
        fail("ray_address", "None unless backend='ray'", ray_address)
    specs = list(specs)
    for s in specs:  # before anything else (the key itself needs valid fields)
        s.validate()
    specs = list({s.key(): s for s in specs}.values())  # drop duplicates, keep order
    results_dir = Path(results_dir)
    _check_writable(results_dir)
    kind = resolve_device(device).type  # a bad device fails here, not in every task
    todo = _unrecorded(results_dir, specs)
    for s in todo:  # a damaged file at a run's key (truncated, NaN, another run's record) is named, then overwritten
        records.read_valid(record_path(results_dir, s), s, "not used: a grid recomputes it")
    check_data(todo)  # every data set a run needs is here before the first run trains
    if mode == "lines":
        print(f"run_grid: {len(specs)} runs, {len(specs) - len(todo)} already recorded, "
              f"{len(todo)} to train{' on Ray' if backend == 'ray' and todo else ''}", file=sys.stderr, flush=True)
    bar = None
    if mode == "bar" and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="runs", unit="run")
    done = 0

    def say(line: str) -> None:
        if bar is not None:
            bar.write(line, file=sys.stderr)
        elif mode in ("lines", "rounds"):
            print(line, file=sys.stderr, flush=True)

    def summary(line: str) -> None:  # the grid's own lines: 'rounds' leaves them to its caller
        if mode != "rounds":
            say(line)

    plan = None
    if budget is not None:
        plan = _Budget(budget, [results_dir, *estimate_from], kind, summary)
        if todo:
            summary(f"run_grid: budget {budget:g} s: {admission_rule()}")
            if (line := host_line(timing_records(*plan.folders), kind)) is not None:
                summary(f"run_grid: {line}")

    def report(s: RunSpec, record: dict | None) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(1)
        elif mode == "lines" and record is not None:
            result = (f"weighted local accuracy {100 * record['global_accuracy']:.2f}% in {record['seconds']:.1f} s"
                      if record["status"] == "ok" else record["status"])
            print(f"run_grid [{done}/{len(todo)}] {_describe(s)}: {result}", file=sys.stderr, flush=True)

    try:
        if backend == "ray":
            _run_ray(todo, results_dir, device, report, ray_address, num_cpus, num_gpus, max_retries)
        else:
            if together:
                todo = _run_together(todo, results_dir, device, bar, report, max_together, plan, say)
            if workers > 1 or on_run is not None:
                def each(s, record, elsewhere, est):
                    report(s, record)
                    if record is None and not elsewhere and plan is not None:
                        plan.skipped.append((s, est))  # left for a later call (or stopped with a checkpoint)
                    if on_run is not None:
                        on_run(s, record, elsewhere, est)

                _run_each(todo, results_dir, device, None if plan is None else plan.deadline,
                          [] if plan is None else plan.folders[1:], mode, workers, each,
                          lambda line: print(line, file=sys.stderr, flush=True), wait)
            else:
                _run_local(todo, results_dir, device, bar, report, mode, plan, say, wait)
    finally:
        if bar is not None:
            bar.close()
    if plan is not None and plan.skipped:
        summary(f"run_grid: budget: {left_total(plan.skipped)}")
    if plan is not None and plan.stopped:
        summary(f"run_grid: budget: {len(plan.stopped)} runs stopped at a round boundary; the next call resumes "
            f"them from their checkpoints ({checkpoint.checkpoint_folder()})")
    return lookup.find(specs, results_dir, restore_nonfinite=False)[0]  # as stored: null for NaN, as always


def check_settings() -> None:
    """The environment variables a grid reads, checked before its first run, not hours into it."""
    sharing()
    whole_runs()
    claims.timeout()
    checkpoint._every_from_env()
    checkpoint._every_from_env(checkpoint.ENV_PROGRESS, 60.0, zero=False)
    check_folder(checkpoint.checkpoint_folder(), f"${checkpoint.ENV_FOLDER} (the checkpoints' folder)")


def check_data(specs) -> None:
    """Fail before any training when a data set that ``specs`` need cannot be loaded here:
    :class:`fedlib.datasets.DataUnavailableError` naming every such data set with its loader's
    own message (where the files go, the command that fetches them, e.g. ``make data``). Checks
    file presence (:func:`fedlib.datasets.available`); nothing is loaded for the data sets that
    are here."""
    from ..datasets import DataUnavailableError, available, load

    names = list(dict.fromkeys(s.dataset for s in specs))
    if not names:
        return
    here = available()
    reasons = []
    for name in names:
        if here.get(name):
            continue
        try:
            load(name)  # its own message says how to get it (nothing to load if absent)
        except DataUnavailableError as err:
            reasons.append(f"- {name}: {err}")
    if reasons:
        raise DataUnavailableError(
            f"{len(reasons)} of the {len(names)} data sets this grid needs "
            f"{'is' if len(reasons) == 1 else 'are'} not here; no run was started:\n" + "\n".join(reasons))


def _run_ray(todo, results_dir, device, report, address, num_cpus, num_gpus, max_retries) -> None:
    """The runs as Ray tasks; every finished record written here, atomically, once."""
    def on_record(s: RunSpec, record: dict) -> None:
        if not _recorded(results_dir, s):  # another process may have recorded it meanwhile
            records.write(record_path(results_dir, s), record)
        report(s, record)

    failed = _ray_backend().run_on_ray(todo, device=device, on_record=on_record, ray_address=address,
                                        num_cpus=num_cpus, num_gpus=num_gpus, max_retries=max_retries)
    if failed:
        lines = "\n".join(f"  {_describe(s)}: {why}" for s, why in failed)
        raise RuntimeError(f"{len(failed)} of {len(todo)} runs failed on Ray (their records were not written; "
                           f"the other {len(todo) - len(failed)} were):\n{lines}")


def _run_local(todo, results_dir, device, bar, report, mode, budget: _Budget | None = None, say=print,
               wait: bool = True) -> None:
    """The runs in this process, sharing the folder with other processes through claims; under
    a ``budget``, only those that fit, and no waiting for other processes' runs past its end
    (with ``wait`` False, none at all: they are left without a record)."""
    waiting = _run_claimed(todo, results_dir, device, bar, report, budget, say)
    if not wait:
        return
    if waiting and mode == "lines":
        print(f"run_grid: waiting for {len(waiting)} runs that other processes are computing",
              file=sys.stderr, flush=True)
    note = time.monotonic() + _NOTE_SECONDS
    while waiting:  # runs other processes claimed: wait for their records, take over if they die
        if time.monotonic() >= note:  # a line a minute naming who holds the runs
            note = time.monotonic() + _NOTE_SECONDS
            say(_waiting_line(results_dir, waiting))
        if budget is not None and time.time() >= budget.deadline:
            budget.say(f"run_grid: the budget has ended: not waiting for the {len(waiting)} runs other "
                       "processes are computing (their records are theirs to write)")
            return
        time.sleep(_POLL_SECONDS)
        left = _unrecorded(results_dir, waiting)
        for s in waiting:
            if s not in left:
                report(s, None)
        waiting = left
        orphans = [s for s in waiting if not claims.claim_path(record_path(results_dir, s)).exists()
                   or claims.is_stale(record_path(results_dir, s))]
        if orphans:
            left = _run_claimed(orphans, results_dir, device, bar, report, budget, say)
            waiting = [s for s in waiting if s not in orphans or s in left]


def _waiting_line(results_dir: Path, waiting) -> str:
    """What a wait on other processes' claims says each minute: the first run and its claim's owner."""
    info = claims.owner(record_path(results_dir, waiting[0])) or {}
    since = f", for {(time.time() - info['time']) / 60:.0f} min" if isinstance(info.get("time"), (int, float)) else ""
    return (f"run_grid: waiting for {len(waiting)} run(s) other processes hold: {_describe(waiting[0])} is claimed by "
            f"host {info.get('host', '?')} pid {info.get('pid', '?')}{since} (taken over if that process dies, or "
            f"after ${claims.ENV_TIMEOUT} = {claims.timeout():g} s)")


def load_records(results_dir) -> list[dict]:
    """Every valid finished record in ``results_dir``, in file-name order, as stored (null for NaN):
    :func:`fedlib.lookup.load`. A file that fails :func:`fedlib.records.read_strict` (NaN,
    truncated, a value out of range, a spec not its key's) is named on stderr and skipped, never
    used; two records of one run are refused, a ValueError naming both files."""
    return lookup.load(results_dir, restore_nonfinite=False)


def write_manifest(results_dir, specs, name: str = "manifest.json") -> Path:
    """Record which runs make up a grid (their record files' names: a recorded run's file, found by
    its fields, whatever version wrote it; else its key), so tables use exactly those records."""
    path, specs = Path(results_dir) / name, list(specs)
    keys = [s.key() if p is None else p.stem for s, p in zip(specs, lookup.where(specs, results_dir))]
    records.write(path, {"keys": keys})  # a unique temporary per writer
    return path


def present_records(specs, folder) -> tuple[list[dict], list[RunSpec]]:
    """The finished records of ``specs`` in ``folder`` (the committed paper-grid records: read,
    never trained) and the specs that have none there yet, in the order of ``specs``. Found by
    the specs' fields (:func:`fedlib.lookup.find`), not by file name: a record stays found when
    fedlib's version (part of :meth:`RunSpec.key`) changes."""
    return lookup.find(specs, folder)


def load_grid(results_dir, name: str = "manifest.json") -> list[dict]:
    """The records of the grid named by the manifest (missing runs are reported, not invented)."""
    results_dir = Path(results_dir)
    manifest = results_dir / name
    if not manifest.is_file():
        raise FileNotFoundError(f"no {name} in {results_dir}: run notebook 05 (the training grid) first")
    keys = json.loads(manifest.read_text())["keys"]
    found = [records.read_valid(results_dir / f"{k}.json", consequence="not used: re-run notebook 05",
                                restore_nonfinite=False) for k in keys]
    missing = [k for k, r in zip(keys, found) if r is None]
    if missing:
        raise FileNotFoundError(f"{len(missing)} of {len(keys)} runs of the grid have no record in "
                                f"{results_dir}: re-run notebook 05 to finish them")
    return found

