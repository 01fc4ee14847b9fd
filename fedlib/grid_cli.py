"""Run a filtered part of a notebook's paper-protocol grid into a records folder: ``python -m fedlib.grid``.

The command that fills the report's records (``fedlib-grid`` once the package is installed;
``python benchmarks/paper_grid.py`` is the same command under its old path). Without a table
(or with ``--tables``) it lists the tables: each one's paper, notebook and the records folder the
report reads; ``TABLE --out FOLDER --list`` prints what a run of it costs.

A paper grid (notebook 07's PSI-PFL comparison, notebook 08's CAFA training, notebook 09's FedPrism
tables, notebook 10's pFedLIA Table I) takes hours to days;
this runs any part of it, in the background or on another machine, and resumes: runs already
recorded in the folder are skipped (:func:`fedlib.experiment.run_grid`), so the same command
can be repeated, split by seed or method, or run by several processes or machines on one
shared folder (each run is claimed before it is computed, :mod:`fedlib.claims`).

The protocol is defined once, in the notebook's paper parameters (``params/paper/09_fedprism.yaml``,
``params/paper/10_pfedlia.yaml``; ``--params`` reads another file of the same notebook), and the
runs are built by the notebook's own function (``psi_pfl_study.notebook_grid``, ``cafa_study.notebook_grid``,
``fedprism_study.notebook_grid``, ``pfedlia_study.notebook_grid``), so they are the notebook's
runs, record for record.

Tables: :data:`TABLES` (each one's notebook), :data:`PAPERS` (what it reproduces) and
:data:`RECORDS` (the committed records folder that its notebook and the report read);
``python -m fedlib.grid`` lists them, with how many records each folder holds.

Usage::

    python -m fedlib.grid psi-pfl --out benchmarks/records/psi_pfl/comparison --datasets adult \\
        --n-clients 100 --alphas 0.05 --seeds 0
    python -m fedlib.grid fedprism-table1 --out benchmarks/records/fedprism/table1 --seeds 0 \\
        --methods fedprism fedavg local --alphas 0.1 [--device cuda] [--workers N]
    python -m fedlib.grid fedprism-table9 --out benchmarks/records/fedprism/table9 --seeds 0
    python -m fedlib.grid cafa-table4 --out benchmarks/records/cafa/training --seeds 0 1 2 --iid-fractions 0.0
    python -m fedlib.grid pfedlia-table1 --out benchmarks/records/pfedlia/table1 --seeds 0 \\
        --settings pathological_clusters
    python -m fedlib.grid cross-paper --out benchmarks/records/cross_paper --workers 2 \\
        --settings similarity noisy_clusters
    python -m fedlib.grid beyond-label --out benchmarks/records/beyond_label --seeds 0 \\
        --settings rotated_groups

Filters (each optional, each value must be in the table's grid, else the command fails before
any work): ``--seeds``, ``--methods`` (the method names of the specs: ``cfl`` selects every CFL
row, ``fedamp`` both attentions), ``--alphas`` (FedPrism's and PSI-PFL's Dirichlet α), ``--datasets`` and ``--n-clients`` (PSI-PFL's), ``--settings`` (pFedLIA's partitions; cross-paper's and beyond-label's partition protocols),
``--iid-fractions`` (CAFA's training partitions' IID shares). ``--list``
prints the filtered runs, each with where it stands in ``--out`` (``recorded (ok)``, ``running`` in
another process, ``to compute`` with its estimated seconds), then one totals line (runs recorded,
running, to compute, and the estimated CPU-hours or GPU-minutes of those to compute), and exits;
``--list-datasets`` prints the data sets the filtered runs need, one a line, and exits (what
``benchmarks/gpu_lease.sh`` prepares). ``--workers N`` computes N runs at once, in N processes
(each on ``max(1, cores // N)`` torch threads) sharing the folder (and, unless ``$FEDLIB_SHARING``
is set, recording ``host['processes'] = N``). Several commands (or machines)
sharing one folder split the runs: a run another live process has claimed is taken last, when
its record is then read (or waited for), so no process queues behind another's run.

``--together`` (with ``--budget`` too: a group starts when its first rounds fit and is stopped at a
round boundary with one checkpoint for the group): the filtered runs of the FedAvg family that share data
set, K and protocol (e.g. PSI-PFL's FedAvg, FedProx and FedOpt rows over seeds and α) first train
side by side, one engine call per round (``run_grid(..., together=True)``, :mod:`fedlib.together`:
the same records up to kernel rounding, their ``seconds`` the group's divided among its runs);
then the other runs as usual (``--workers`` included).

``--budget SECONDS`` (from the command's start, computed once): a run starts only if
``fedlib.experiment.SAFETY_FACTOR`` × its estimated seconds end before the budget does — a
resumable method's run (``MethodInfo.resumable``) only its first rounds' (:func:`fedlib.grid.seconds_to_start`):
the budget stops it at a round boundary with a checkpoint that the next call resumes
(:mod:`fedlib.checkpoint`); the others are left for a later call (a line each, and a total). The
estimate (:func:`fedlib.cost.estimate`) is the median CPU-seconds (on a GPU: device seconds) of comparable
finished runs in ``--out`` and ``--estimate-from`` (default: the committed ``benchmarks/records``):
the same data set, training length and kind of device, the same sharing (``$FEDLIB_SHARING``) where
records say, the same method and K if any, else any method on the data set. A run without any
comparable record is started (the budget cannot protect it; its line says so). With ``--workers
N`` each worker checks the run it is about to start against the one deadline.

Prints one line before (the runs, how many are recorded already) and one per finished run::

    <dataset> <protocol>=<level> K=<K> <row> seed=<s>: <status> in <seconds> s

(seconds: the record's ``seconds``, the run's wall time), and, on stderr while a run trains
(``--progress rounds``, the default; ``off``: none), a line a minute from
:class:`fedlib.checkpoint.Checkpointer`::

      <run>: round <t>/<rounds> (phase <p>), accuracy <a>% after round <r>, <s> s/round, phase ends in ≈ <m> min
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]  # the checkout (params/, benchmarks/records/): an editable install
COMMITTED_RECORDS = ROOT / "benchmarks" / "records"  # --estimate-from's default

# table -> (notebook, the study module's grid part)
TABLES = {
    "psi-pfl": ("07_psi_pfl", "comparison"),
    "cafa-table4": ("08_cafa", "table4"),
    "fedprism-table1": ("09_fedprism", "table1"),
    "fedprism-table9": ("09_fedprism", "table9"),
    "fedprism-table11": ("09_fedprism", "table11"),
    "pfedlia-table1": ("10_pfedlia", "table1"),
    "cross-paper": ("11_cross_paper", "cross"),
    "beyond-label": ("12_beyond_label_skew", "study"),
}
#: table -> the paper's tables and figures it reproduces, and what its grid crosses
PAPERS = {
    "psi-pfl": "PSI-PFL Figs. 5-7 and §4.3: psi_pfl and the baselines × data sets × Dirichlet α × K × seeds",
    "cafa-table4": "CAFA Tables IV–V and Fig. 6: FedAvg, FedProx, CAFA × IID shares × seeds (authors' protocol)",
    "fedprism-table1": "FedPrism Tables 1, 6, 7: methods × Dirichlet α × seeds, CFL's extra thresholds",
    "fedprism-table9": "FedPrism Table 9: the components ablations (FedPrism at the ablation α)",
    "fedprism-table11": "FedPrism Table 11: the initial global weights (FedPrism at the ablation α)",
    "pfedlia-table1": "pFedLIA Table I and the cluster-recovery table: methods × settings × seeds",
    "cross-paper": "this workbook's study: every method on every seed paper's partition × seeds (--settings: protocols)",
    "beyond-label": "this workbook's study: the variants × the partitions beyond label skew × seeds (--settings: protocols)",
}
#: table -> the committed records folder (relative to the checkout) that the notebook and the
#: report read (:data:`workbook.report_cells.RECORD_COMMANDS` names the same folders);
#: None: none is committed and the report reads none
RECORDS = {
    "psi-pfl": "benchmarks/records/psi_pfl/comparison",
    "cafa-table4": "benchmarks/records/cafa/training",
    "fedprism-table1": "benchmarks/records/fedprism/table1",
    "fedprism-table9": "benchmarks/records/fedprism/table9",
    "fedprism-table11": None,
    "pfedlia-table1": "benchmarks/records/pfedlia/table1",
    "cross-paper": "benchmarks/records/cross_paper",
    "beyond-label": "benchmarks/records/beyond_label",
}
_FILTERS = {"07_psi_pfl": ("seeds", "methods", "alphas", "datasets", "n_clients"),
            "08_cafa": ("seeds", "methods", "iid_fractions"), "09_fedprism": ("seeds", "methods", "alphas"),
            "10_pfedlia": ("seeds", "methods", "settings"),
            "11_cross_paper": ("seeds", "methods", "settings"),
            "12_beyond_label_skew": ("seeds", "methods", "settings", "datasets")}


def notebook_of(table: str) -> str:
    """The notebook whose grid ``table`` is part of; ValueError for an unknown table."""
    from fedlib.validation import check_choice

    return TABLES[check_choice(table, "table", tuple(TABLES))][0]


def tables_text(root: Path | None = None) -> str:
    """The tables, as the command lists them without a table (and ``--help`` ends): each one's
    paper, notebook and records folder (with how many records it holds under ``root``, default
    this checkout; None: the folder is not counted), then how to get what the runs not yet
    recorded cost (``--list``)."""
    lines = ["tables (python -m fedlib.grid TABLE --out FOLDER ...):"]
    for table, (notebook, _) in TABLES.items():
        folder = RECORDS[table]
        if folder is None:
            where = "none committed (the report reads none; choose an --out)"
        elif root is None:
            where = folder
        else:
            n = sum(1 for _ in (root / folder).glob("*.json")) if (root / folder).is_dir() else 0
            where = f"{folder} ({n} records)" if n else f"{folder} (none yet)"
        lines += [f"  {table}", f"      paper:    {PAPERS[table]}", f"      notebook: notebooks/{notebook}.ipynb",
                  f"      records:  {where}"]
    lines += ["what a table's runs cost: python -m fedlib.grid TABLE --out FOLDER --list [filters] [--device cuda]",
              "prints each run not yet recorded in FOLDER with its estimated seconds (from comparable records), "
              "then the totals: CPU-hours, or GPU-minutes with --device cuda"]
    return "\n".join(lines)


_STUDIES = {"07_psi_pfl": "psi_pfl_study", "08_cafa": "cafa_study", "09_fedprism": "fedprism_study",
            "10_pfedlia": "pfedlia_study", "11_cross_paper": "cross_paper", "12_beyond_label_skew": "beyond_label"}


def _study(notebook: str):
    """The notebook's study module, imported alone (importing all six costs seconds a call)."""
    import importlib

    return importlib.import_module(f"workbook.{_STUDIES[notebook]}")


def load_params(notebook: str, path=None) -> dict:
    """The notebook's parameters: ``path``, or its paper profile ``params/paper/<notebook>.yaml``."""
    import yaml

    from fedlib import notebook_params
    from fedlib.validation import fail

    path = Path(path) if path is not None else ROOT / "params" / "paper" / f"{notebook}.yaml"
    if not path.is_file():
        fail("params", f"a params file of notebook {notebook} (e.g. params/paper/{notebook}.yaml)", str(path))
    params = yaml.safe_load(path.read_text())
    missing = [k for k in _study(notebook).GRID_PARAMS if not isinstance(params, dict) or k not in params]
    if missing:
        fail("params", f"a params file of notebook {notebook} (it lacks {missing})", str(path))
    return notebook_params.check_keys(params, notebook, f"params file {path}")  # an unknown key is an error


def _flag(name: str) -> str:
    """The command-line flag of filter ``name`` (``iid_fractions`` -> ``--iid-fractions``)."""
    return "--" + name.replace("_", "-")


def _value(spec, name: str):
    return {"seeds": spec.seed, "methods": spec.method, "alphas": float(spec.level),
            "settings": spec.protocol, "iid_fractions": float(spec.level),
            "datasets": spec.dataset, "n_clients": spec.n_clients}[name]


def select(table: str, params: dict, *, seeds=None, methods=None, alphas=None, settings=None,
           iid_fractions=None, datasets=None, n_clients=None) -> list:
    """The RunSpecs of ``table`` built from ``params`` by the notebook's grid function, kept where
    each given filter holds (None: no filter). A filter value that is not in the table's grid,
    or a filter the table does not have, raises ValueError before any work."""
    from fedlib.validation import fail

    notebook, part = notebook_of(table), TABLES[table][1]
    study = _study(notebook)
    specs = study.notebook_grid(**{k: params[k] for k in study.GRID_PARAMS})[part]
    given = {"seeds": seeds, "methods": methods, "alphas": alphas, "settings": settings,
             "iid_fractions": iid_fractions, "datasets": datasets, "n_clients": n_clients}
    for name, values in given.items():
        if values is None:
            continue
        if name not in _FILTERS[notebook]:
            fail(_flag(name), f"left out for {table} (its filters: {', '.join(_flag(f) for f in _FILTERS[notebook])})",
                 list(values))
        present = sorted({_value(s, name) for s in specs})
        for v in values:
            if v not in present:
                fail(_flag(name), f"one of {present} (the {name} of {table}'s grid)", v)
        specs = [s for s in specs if _value(s, name) in values]
    return specs


def describe(spec) -> str:
    """One run as the progress lines name it: setting, row (the study's label) and seed."""
    from workbook import fedprism_study, pfedlia_study
    from fedlib.partition import BEYOND_LABEL_PROTOCOLS

    d = spec.to_dict()
    if spec.protocol in BEYOND_LABEL_PROTOCOLS:
        from workbook import beyond_label  # imported only for its runs: it costs seconds

        row = beyond_label.variant_of(d)
        if row == "cfl":  # the thresholds it runs (the params calibrate ε1)
            from fedlib.methods import cfl

            row += f" ({cfl.thresholds_label(d.get('hyper'))})"
    elif spec.method == "fedprism":
        row = f"fedprism ({fedprism_study.variant_of(d)})"
    elif spec.protocol in pfedlia_study.SETTINGS:
        row = pfedlia_study.method_label(d)
    else:
        row = fedprism_study.method_label(d)
    if getattr(spec, "reproduction", "paper_text") != "paper_text":  # e.g. PSI-PFL's baselines as their code ran them
        row += f" ({spec.reproduction})"
    return f"{spec.dataset} {spec.protocol}={spec.level:g} K={spec.n_clients} {row} seed={spec.seed}"


def _line(spec, record: dict) -> str:
    return f"{describe(spec)}: {record['status']} in {record.get('seconds', float('nan')):.1f} s"


#: run_grid's ``progress`` for each run (``--progress``): 'rounds' prints a line a minute while a
#: run trains (its round, last accuracy, seconds per round, when it ends: fedlib.checkpoint) to
#: stderr; 'off' none. The command's own line per finished run is printed either way.
_PROGRESS = "rounds"


def _compute(spec, out: str, device: str, budget: float | None = None, estimate_from=()) -> dict | None:
    """One run through run_grid (which claims it, records it, and skips it if recorded); None
    when a ``budget`` left it for a later call (or ended while another process computed it)."""
    from fedlib.grid import run_grid

    if budget is None:
        return run_grid([spec], out, device=device, progress=_PROGRESS)[0]
    records = run_grid([spec], out, device=device, progress=_PROGRESS, budget=budget, estimate_from=estimate_from)
    return records[0] if records else None


def _init_worker(threads: int, processes: int | None = None, progress: str = "rounds") -> None:
    import torch

    from fedlib.spec import ENV_SHARING

    global _PROGRESS
    _PROGRESS = progress  # a spawned worker starts from the module's default
    torch.set_num_threads(threads)
    if processes is not None:  # the pool's processes share the device: their estimates and records say so
        os.environ.setdefault(ENV_SHARING, str(processes))


def estimate(spec, out, kind: str, estimate_from=()) -> float | None:
    """The estimated seconds of ``spec``'s run on a ``kind`` device ('cpu' or 'cuda') under
    ``$FEDLIB_SHARING``, from the records in ``out`` and ``estimate_from``
    (:func:`fedlib.cost.estimate`); None where none is comparable."""
    from fedlib import cost
    from fedlib.grid import sharing, timing_records

    return cost.estimate(spec, timing_records(out, *estimate_from), kind, sharing()).seconds


def _compute_star(args):
    """``(spec, record, elsewhere, estimate)``: ``elsewhere`` when another process sharing the
    folder had recorded or claimed the run before this one reached it (run_grid then returned or
    waited for that process's record instead of computing it). With a deadline (a ``time.time()``
    value) the run starts only if it fits (:func:`fedlib.experiment.fits_budget`; a resumable method's
    run only needs its first rounds to fit: :func:`fedlib.grid.seconds_to_start`); else
    ``record`` is None and ``estimate`` says what it needs."""
    spec, out, device, deadline, estimate_from = args
    _kill_once_for_tests()
    recorded = _recorded(Path(out), spec)
    elsewhere = recorded or _claimed_elsewhere(Path(out), spec)
    if deadline is None:
        return spec, _compute(spec, out, device), elsewhere, None
    from fedlib.engine import resolve_device
    from fedlib.grid import fits_budget
    from fedlib.grid import seconds_to_start

    est = None if recorded else estimate(spec, out, resolve_device(device).type, estimate_from)
    left = deadline - time.time()
    if not recorded and (left <= 0 or not (elsewhere or fits_budget(seconds_to_start(spec, est), deadline))):
        return spec, None, elsewhere, est
    return spec, _compute(spec, out, device, max(left, 1e-3), estimate_from), elsewhere, est


def _collect(results, computed: list, skipped: list, echo, budget: bool = False) -> None:
    """Echo a line per finished run; append the records this process computed to ``computed``
    and ``(spec, estimate)`` of the runs a budget left for a later call to ``skipped`` (not started,
    or stopped at a round boundary with a checkpoint)."""
    from fedlib.checkpoint import checkpoint_path, saved_round

    for spec, record, elsewhere, est in results:
        if record is None and elsewhere:
            echo(f"{describe(spec)}: another process is computing it; not waited for (the budget has ended)")
        elif record is None:
            skipped.append((spec, est))
            resumes = saved_round(spec.key())
            if resumes is not None:  # started, then stopped at a round boundary by the budget
                echo(f"{describe(spec)}: stopped by the budget before round {resumes + 1}; its checkpoint "
                     f"({checkpoint_path(spec.key())}) resumes it in a later call")
                continue
            why = ("the budget has ended" if est is None else
                   f"estimated {est:.0f} s; it would not end before the budget does")
            echo(f"{describe(spec)}: left for a later call ({why})")
        elif elsewhere:
            echo(f"{describe(spec)}: {record['status']}, recorded by another process")
        else:
            computed.append(record)
            unprotected = " (no comparable record: the budget could not protect it)" if budget and est is None else ""
            echo(_line(spec, record) + unprotected)


def _claimed_elsewhere(out: Path, spec) -> bool:
    """Whether another live process has claimed ``spec``'s run in ``out`` (:mod:`fedlib.claims`)."""
    from fedlib import claims
    from fedlib.spec import record_path

    path = record_path(out, spec)
    return claims.claim_path(path).exists() and not claims.is_stale(path)


#: Tests only: a file path; the first worker run to find it absent creates it and SIGKILLs its own
#: process (a worker killed mid-grid, e.g. out of memory), so that a test sees the grid recover.
ENV_KILL_ONCE = "PAPER_GRID_TEST_KILL_ONCE"


def _kill_once_for_tests() -> None:
    flag = os.environ.get(ENV_KILL_ONCE)
    if flag and multiprocessing.parent_process() is not None:
        try:
            fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


def _recorded(out: Path, spec) -> bool:
    """Whether ``out`` holds ``spec``'s valid finished record (:func:`fedlib.records.read_strict`:
    a truncated, empty, NaN or another run's record is named on stderr and counts as not
    recorded: it is recomputed)."""
    from fedlib import records
    from fedlib.spec import record_path

    return records.is_complete(record_path(Path(out), spec), spec)


def run_state(out: Path, spec) -> str:
    """Where ``spec``'s run stands in the records folder ``out``: ``recorded (<status>)``,
    ``running`` (claimed by a live process), ``to compute``, or ``to compute (invalid record:
    <what is wrong>)`` for a file that fails :func:`fedlib.records.read_strict`, as ``--list``
    prints it."""
    from fedlib import records
    from fedlib.spec import record_path

    path = record_path(Path(out), spec)
    try:
        return f"recorded ({records.read_strict(path, spec)['status']})"
    except FileNotFoundError:
        pass
    except records.RecordError as err:
        return f"to compute (invalid record {path.name}: {err.problem})"
    return "running" if _claimed_elsewhere(Path(out), spec) else "to compute"


def _next_run(pending: list, out: Path):
    """The first of ``pending`` that no other process is computing, else the first (whose record
    run_grid then waits for): processes sharing a folder each compute a different run instead
    of queueing behind one another's claims."""
    return next((s for s in pending if not _claimed_elsewhere(out, s)), pending[0])


def _estimate_folders(estimate_from) -> list[Path]:
    """``--estimate-from``'s folders (default: the committed records), each checked to exist."""
    from fedlib.validation import fail

    folders = [COMMITTED_RECORDS] if estimate_from is None else [Path(f) for f in estimate_from]
    for f in folders:
        if not f.is_dir():
            fail("--estimate-from", "existing folders of records", str(f))
    return folders


def device_kind(device) -> str:
    """'cpu' or 'cuda' of a ``--device`` value, without needing a GPU here for 'cuda' (``--list``
    estimates a GPU lease on a laptop); 'auto' is what this machine would use."""
    from fedlib.engine import resolve_device

    d = str(device or "auto")
    return "cuda" if d.startswith("cuda") else "cpu" if d == "cpu" else resolve_device(d).type


def list_runs(specs, out, kind: str, estimate_from=None, echo=print) -> dict:
    """``--list``: a line per run (where it stands in ``out``; a run to compute with its estimated
    seconds on a ``kind`` device), then the totals line. Returns the totals: ``recorded``,
    ``running``, ``to_compute``, ``estimated`` (how many of those to compute have an estimate) and
    ``seconds`` (their estimates summed)."""
    from fedlib.checkpoint import saved_round
    from fedlib import cost
    from fedlib.grid import sharing, timing_records
    from fedlib.methods import FLConfig

    folders = _estimate_folders(estimate_from)
    timings = None  # the records' timings, read once a call (not once a run: a walk of every folder each)
    totals = {"recorded": 0, "running": 0, "to_compute": 0, "estimated": 0, "seconds": 0.0}
    for s in specs:
        state = run_state(Path(out), s)
        if state == "to compute":
            totals["to_compute"] += 1
            if timings is None:
                timings = timing_records(Path(out), *folders)
            est = cost.estimate(s, timings, kind, sharing()).seconds
            resumes = saved_round(s.key())
            left, rounds = 1.0, FLConfig.from_dict(s.effective()[1]).rounds
            if resumes is not None:  # a checkpoint holds its first rounds: what is left of it
                left = 1 - resumes / rounds
                state += f", checkpoint resumes it at round {resumes + 1} of {rounds}"
            if est is None:
                state += f" (no comparable record on {kind})"
            else:
                totals["estimated"] += 1
                totals["seconds"] += est * left
                state += f" (≈ {est * left:.0f} s left on {kind})" if resumes is not None else f" (≈ {est:.0f} s on {kind})"
        else:
            totals["running" if state == "running" else "recorded"] += 1
        echo(f"{describe(s)}: {state}")
    secs, n = totals["seconds"], totals["to_compute"]
    cost = f"≈ {secs / 3600:.2f} CPU-hours" if kind == "cpu" else f"≈ {secs / 60:.1f} GPU-minutes"
    if not totals["estimated"]:
        cost = f"no comparable record on {kind} to estimate them from"
    elif totals["estimated"] < n:
        cost += f" for the {totals['estimated']} with a comparable record ({n - totals['estimated']} without)"
    processes = sharing()
    if processes and processes > 1 and secs:
        cost += (f" (the runs' seconds summed, measured with {processes} processes sharing the device: "
                 f"≈ {secs / processes / 60:.1f} minutes of wall time with {processes} at once)")
    echo(f"totals: {len(specs)} runs, {totals['recorded']} recorded, {totals['running']} running elsewhere, "
         f"{n} to compute" + (f"; to compute: {cost}" if n else ""))
    return totals


def run_table(table: str, out, *, params=None, seeds=None, methods=None, alphas=None, settings=None,
              iid_fractions=None, datasets=None, n_clients=None, device: str | None = None, workers: int = 1,
              budget: float | None = None, estimate_from=None, echo=print, together: bool = False,
              progress: str = "rounds") -> dict:
    """Run the filtered part of ``table`` into ``out``; print (``echo``) a line per finished run.

    ``budget``: seconds from this call; a run starts only if it is estimated to end before then
    (the module's docstring; ``estimate_from``: the folders of records the estimates read besides
    ``out``, default the committed records).

    ``together`` (a budget stops a group at a round boundary): first the runs that may train together
    (:func:`fedlib.together.group_specs`: the FedAvg family, one data set, K and protocol) train
    in groups, one engine call per round (``run_grid(..., together=True)``); the rest as usual.

    ``progress``: 'rounds' (default) prints, to stderr, a line a minute for each run in progress
    (round, last accuracy, seconds per round, when it ends); 'off' none.

    Returns
    -------
    dict: ``specs`` (the filtered runs), ``recorded`` (how many were recorded before),
    ``computed`` (the records this call computed, in the order they finished; runs another process
    sharing ``out`` recorded meanwhile are skipped and not among them), ``skipped`` (the specs a
    budget left for a later call).
    """
    from fedlib.validation import check_number

    deadline = None if budget is None else time.time() + check_number(budget, "--budget", 0, low_open=True)
    from fedlib.engine import resolve_device
    from fedlib.grid import ENV_SHARING, SAFETY_FACTOR
    from fedlib.grid import FIRST_ROUNDS
    from fedlib.validation import check_choice, check_int

    check_int(workers, "--workers", 1)
    global _PROGRESS
    _PROGRESS = check_choice(progress, "--progress", ("rounds", "off"))
    folders = _estimate_folders(estimate_from) if budget is not None else []
    p = load_params(notebook_of(table), params)
    specs = select(table, p, seeds=seeds, methods=methods, alphas=alphas, settings=settings,
                   iid_fractions=iid_fractions, datasets=datasets, n_clients=n_clients)
    for s in specs:  # every check before any work
        s.validate()
    device = device or p.get("device", "auto")
    resolve_device(device)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in specs if not _recorded(out, s)]
    from fedlib.grid import check_data

    check_data(todo)  # every data set the runs need, before the first one trains
    echo(f"{table}: {len(specs)} runs, {len(specs) - len(todo)} already recorded in {out}, {len(todo)} to compute")
    if budget is not None and todo:
        echo(f"{table}: budget {budget:g} s: a run starts only if {SAFETY_FACTOR} × its estimated seconds end before it "
             f"(a resumable method's run: those of its first {FIRST_ROUNDS} rounds; it stops at a round boundary)")
    computed, skipped = [], []
    if together:
        from fedlib.grid import run_grid
        from fedlib.together import group_specs, together_key

        batched = [s for g in group_specs(todo) if len(g) > 1 and together_key(g[0]) is not None for s in g]
        if batched:
            echo(f"{table}: {len(batched)} runs train together in groups (fedlib.together)")
            kw = {} if deadline is None else {"budget": max(deadline - time.time(), 1e-3), "estimate_from": folders}
            got = {r["key"]: r for r in run_grid(batched, out, device=device, progress=_PROGRESS, together=True, **kw)}
            for s in batched:
                record = got.get(s.key())
                if record is None:  # its group did not fit the budget, or the budget stopped it (a checkpoint)
                    skipped.append((s, None))
                    echo(f"{describe(s)}: left for a later call (its group of runs trained together did not fit "
                         "the budget, or was stopped at a round boundary with a checkpoint)")
                    continue
                computed.append(record)
                echo(_line(s, record))
        todo = [s for s in todo if not _recorded(out, s)]
    if workers == 1 or len(todo) <= 1:
        pending = list(todo)
        while pending := [s for s in pending if not _recorded(out, s)]:  # another process may have recorded some
            s = _next_run(pending, out)  # runs another process is computing go last
            pending.remove(s)
            results = [_compute_star((s, str(out), device, deadline, folders))]
            _collect(results, computed, skipped, echo, budget is not None)
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        processes = None if os.environ.get(ENV_SHARING) else workers
        ordered = sorted(todo, key=lambda s: _claimed_elsewhere(out, s))  # stable: claimed elsewhere last
        _run_pool(ordered, out, device, deadline, folders, workers, threads, processes, computed, skipped, echo,
                  budget is not None, _PROGRESS)
    if skipped:
        known = [e for _, e in skipped if e is not None]
        echo(f"{table}: budget: {len(skipped)} runs left for a later call, estimated {sum(known):.0f} s of runs"
             + (f" ({len(skipped) - len(known)} without an estimate: the budget had ended)"
                if len(known) < len(skipped) else ""))
    return {"specs": specs, "recorded": len(specs) - len(todo), "computed": computed,
            "skipped": [s for s, _ in skipped]}


#: How many times the pool is restarted after a worker died (killed, out of memory) before the
#: runs it lost are given up (named, not recorded).
POOL_RESTARTS = 3


def _run_pool(specs, out: Path, device, deadline, folders, workers, threads, processes, computed, skipped, echo,
              budget: bool, progress: str = "rounds") -> None:
    """The runs on a pool of ``workers`` spawned processes (``concurrent.futures``). A worker
    that dies (SIGKILL, out of memory) breaks the pool (``BrokenProcessPool``) instead of hanging
    it: the runs it lost (its claims are stale once its pid is gone) are recomputed on a new pool,
    at most :data:`POOL_RESTARTS` times; then the runs still lost are named in a RuntimeError."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")
    pending = list(specs)
    for attempt in range(POOL_RESTARTS + 1):
        lost = []
        with ProcessPoolExecutor(min(workers, len(pending)), mp_context=ctx, initializer=_init_worker,
                                 initargs=(threads, processes, progress)) as pool:
            futures = {pool.submit(_compute_star, (s, str(out), device, deadline, folders)): s for s in pending}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except BrokenProcessPool:
                    lost.append(futures[future])
                    continue
                _collect([result], computed, skipped, echo, budget)
        pending = [s for s in lost if not _recorded(out, s)]
        if not pending:
            return
        echo(f"a worker process died: {len(pending)} run{'s' if len(pending) != 1 else ''} lost"
             + (f"; computing {'them' if len(pending) != 1 else 'it'} again" if attempt < POOL_RESTARTS else ""))
    raise RuntimeError(f"{len(pending)} runs were lost {POOL_RESTARTS + 1} times by a worker process that died "
                       "(killed, out of memory): " + "; ".join(describe(s) for s in pending))


def cli() -> int:
    """The ``fedlib-grid`` console script (``[project.scripts]``): :func:`main`, exit status 0
    (2 for a bad argument, from argparse)."""
    main()
    return 0


def _prog() -> str:
    """The command's name as it was started: ``python -m fedlib.grid`` unless a script ran it."""
    import sys

    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name in ("paper_grid.py", "fedlib-grid") else "python -m fedlib.grid"


def main(argv=None) -> dict | None:
    """The command line (``python -m fedlib.grid``, ``fedlib-grid``, ``benchmarks/paper_grid.py``):
    the tables without a table argument (or with ``--tables``), else :func:`list_runs` under
    ``--list``, or :func:`run_table`. Returns run_table's dict, else None."""
    ap = argparse.ArgumentParser(prog=_prog(), description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=tables_text() + "\n\nThe module fedlib.grid_cli documents the rest (filters, "
                                 "--workers, --together, --budget and its estimates, the lines printed).")
    ap.add_argument("table", nargs="?", help=f"one of {', '.join(TABLES)} (left out: list the tables)")
    ap.add_argument("--tables", action="store_true",
                    help="list the tables (paper, notebook, records folder, how many records it holds) and exit")
    ap.add_argument("--out", help="the records folder (created; runs recorded there are skipped); "
                                  "needed with a table")
    ap.add_argument("--params", help="the notebook's params file (default: params/paper/<notebook>.yaml)")
    ap.add_argument("--seeds", nargs="+", type=int)
    ap.add_argument("--methods", nargs="+")
    ap.add_argument("--alphas", nargs="+", type=float, help="FedPrism's and PSI-PFL's Dirichlet α")
    ap.add_argument("--settings", nargs="+", help="pFedLIA's partitions (cross-paper: the partition protocols)")
    ap.add_argument("--iid-fractions", nargs="+", type=float, help="CAFA's training partitions' IID shares")
    ap.add_argument("--datasets", nargs="+", help="PSI-PFL's data sets")
    ap.add_argument("--n-clients", nargs="+", type=int, help="PSI-PFL's numbers of clients K")
    ap.add_argument("--device", help="auto, cpu, cuda, cuda:N (default: the params file's)")
    ap.add_argument("--workers", type=int, default=1, help="runs computed at once, one process each")
    ap.add_argument("--together", action="store_true",
                    help="train the FedAvg family's compatible runs side by side, one engine call per round "
                         "(fedlib.together; a budget stops a group at a round boundary), then the rest as usual")
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="start a run only if it is estimated to end within SECONDS of the command's start "
                         "(the others are left for a later call; a started run is never stopped)")
    ap.add_argument("--estimate-from", nargs="+", default=None, metavar="DIR",
                    help="folders of records whose seconds estimate the runs, besides --out "
                         "(default: benchmarks/records)")
    ap.add_argument("--list", action="store_true", help="print the filtered runs, where each stands in --out and "
                    "its estimated seconds, then the totals, and exit")
    ap.add_argument("--list-datasets", action="store_true", help="print the data sets the filtered runs need and exit")
    ap.add_argument("--progress", choices=("rounds", "off"), default="rounds",
                    help="rounds (default): while a run trains, a line a minute on stderr (its round, last accuracy, "
                         "seconds per round, when it ends); off: only the line per finished run")
    a = ap.parse_args(argv)
    if a.tables or a.table is None:
        print(tables_text(ROOT))
        return None
    try:
        if a.out is None:
            notebook_of(a.table)  # an unknown table is named first
            ap.error(f"the following arguments are required with a table: --out (e.g. --out {RECORDS[a.table]})"
                     if RECORDS[a.table] else "the following arguments are required with a table: --out")
        if a.list or a.list_datasets:
            params = load_params(notebook_of(a.table), a.params)
            specs = select(a.table, params, seeds=a.seeds, methods=a.methods,
                           alphas=a.alphas, settings=a.settings, iid_fractions=a.iid_fractions,
                           datasets=a.datasets, n_clients=a.n_clients)
            if a.list_datasets:
                print("\n".join(dict.fromkeys(s.dataset for s in specs)))
            else:
                list_runs(specs, Path(a.out), device_kind(a.device or params.get("device", "auto")), a.estimate_from)
            return None
        return run_table(a.table, a.out, params=a.params, seeds=a.seeds, methods=a.methods, alphas=a.alphas,
                         settings=a.settings, iid_fractions=a.iid_fractions, datasets=a.datasets,
                         n_clients=a.n_clients, device=a.device, workers=a.workers, budget=a.budget,
                         estimate_from=a.estimate_from, together=a.together, progress=a.progress,
                         echo=lambda line: print(line, flush=True))  # a log file sees each line as it comes
    except ValueError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")


if __name__ == "__main__":
    main()
