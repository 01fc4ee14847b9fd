"""Run a filtered part of a notebook's paper-protocol grid into a records folder: ``python -m fedlib.grid``.

The command that fills the report's records (``fedlib-grid`` once the package is installed;
``python benchmarks/paper_grid.py`` is the same command under its old path). Without a table
(or with ``--tables``) it lists the tables: each one's paper, notebook and the records folder the
report reads; ``TABLE --out FOLDER --list`` prints what a run of it costs.

A paper grid (notebook 07's PSI-PFL comparison, notebook 08's CAFA training, notebook 09's FedPrism
tables, notebook 10's pFedLIA Table I) takes hours to days;
this runs any part of it, in the background or on another machine, and resumes: runs already
recorded in the folder, found by their specs' fields whatever fedlib version wrote them, are
skipped (:func:`fedlib.experiment.run_grid`), so the same command
can be repeated, split by seed or method, or run by several processes or machines on one
shared folder (each run is claimed before it is computed, :mod:`fedlib.claims`).

The tables are those of the registry (:mod:`fedlib.tables`: every entry point of the group
``fedlib.tables``; the workbook registers its own in ``workbook.paper_tables``), so this module
imports no table's code: a :class:`fedlib.tables.PaperTable` names the table's paper, notebook,
default params file (``params/paper/09_fedprism.yaml``; ``--params`` reads another), committed
records folder, filters, and the functions that build its runs (the notebook's own grid function,
so they are the notebook's runs, record for record) and name them in the progress lines.
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
    python -m fedlib.grid clust-psi-pfl-table3 --out benchmarks/records/clust_psi_pfl/table3_like_for_like \\
        --seeds 0 --settings similarity --levels 0 1

Filters (each optional, each value must be in the table's grid, else the command fails before
any work): ``--seeds``, ``--methods`` (the method names of the specs: ``cfl`` selects every CFL
row, ``fedamp`` both attentions), ``--alphas`` (FedPrism's and PSI-PFL's Dirichlet α), ``--datasets`` and ``--n-clients`` (PSI-PFL's), ``--settings`` (pFedLIA's partitions; cross-paper's, beyond-label's and Table III's partition protocols),
``--levels`` (Table III's S or α), ``--reproductions`` (Table III's readings, paper_text and paper_code),
``--iid-fractions`` (CAFA's training partitions' IID shares); each table accepts those its entry
names (:attr:`fedlib.tables.PaperTable.filters`). ``--list``
prints the filtered runs, each with where it stands in ``--out`` (``recorded (ok)``, ``running`` in
another process, ``to compute`` with its estimated seconds), then one totals line (runs recorded,
running, to compute, and the estimated CPU-hours or GPU-minutes of those to compute), and exits;
``--summary`` prints, instead of a line per run, the counts by row (method) and by setting;
``--list-datasets`` prints the data sets the filtered runs need, one a line, and exits (what
``benchmarks/gpu_lease.sh`` prepares). ``--workers N`` computes N runs at once, in N processes
(each on ``max(1, cores // N)`` torch threads) sharing the folder (and, unless ``$FEDLIB_SHARING``
is set, recording ``host['processes'] = N``). Several commands (or machines)
sharing one folder split the runs: a run another live process has claimed is taken last, when
its record is then read (or waited for), so no process queues behind another's run.

``--together`` (with ``--budget`` too: a group trains only as many runs as its summed estimate
lets end in time, the others one by one; :func:`fedlib.grid.fitting_prefix`): the filtered runs of the FedAvg family that share data
set, K and protocol (e.g. PSI-PFL's FedAvg, FedProx and FedOpt rows over seeds and α) first train
side by side, one engine call per round (``run_grid(..., together=True)``, :mod:`fedlib.together`:
the same records up to kernel rounding, their ``seconds`` the group's divided among its runs);
then the other runs as usual (``--workers`` included).

``--budget SECONDS`` (from the command's start, computed once): a run starts only if
``fedlib.experiment.SAFETY_FACTOR`` × its estimated seconds, and the longest comparable run
(:func:`fedlib.grid.reserve_seconds`), end before the budget does — a
resumable method's run (``MethodInfo.resumable``) only its first rounds' (:func:`fedlib.grid.seconds_to_start`):
the budget stops it at a round boundary with a checkpoint that the next call resumes
(:mod:`fedlib.checkpoint`); the others are left for a later call (a line each, and a total). The
estimate (:func:`fedlib.cost.estimate`) is the median CPU-seconds (on a GPU: device seconds) of comparable
finished runs in ``--out`` and ``--estimate-from`` (default: the committed ``benchmarks/records``):
the same data set, training length and kind of device, the same sharing (``$FEDLIB_SHARING``) where
records say, the same method and K if any, else any method on the data set; ``--list`` prints it in
CPU-seconds of a :data:`fedlib.cost.REFERENCE_CAPABILITY` host (:func:`fedlib.cost.on_reference_host`),
the budget on this host (:func:`fedlib.cost.on_host`). A run without any
comparable record is started (the budget cannot protect it; its line says so). With ``--workers
N`` each worker checks the run it is about to start against the one deadline.

Prints one line before (the runs, how many are recorded already) and one per finished run::

    <dataset> <protocol>=<level> K=<K> <row> seed=<s>: <status> in <seconds> s, weighted local accuracy <a> %

(seconds: the record's ``seconds``, the run's wall time; the accuracy: its ``global_accuracy``,
for a finished run), and, on stderr while a run trains (``--progress rounds``, the default;
``off``: none), a line a minute (``$FEDLIB_PROGRESS_INTERVAL`` seconds) from
:class:`fedlib.checkpoint.Checkpointer`, for every method: a resumable one's at a round's end::

      <run>: round <t>/<rounds> (phase <p>), accuracy <a>% after round <r>, <s> s/round, phase ends in ≈ <m> min

any other's (and a resumable one's within a round longer than the interval)::

    run_grid: <run>: training, <m> min so far, accuracy <a>% after round <r>
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]  # the checkout (params/, benchmarks/records/): an editable install
COMMITTED_RECORDS = ROOT / "benchmarks" / "records"  # --estimate-from's default

def registry() -> dict:
    """The paper tables, name -> :class:`fedlib.tables.PaperTable` (:func:`fedlib.tables.load_tables`:
    every entry point of ``fedlib.tables``), read once a process."""
    global _REGISTRY
    if _REGISTRY is None:
        from fedlib.tables import load_tables

        _REGISTRY = load_tables()
    return _REGISTRY


_REGISTRY = None


def table_of(table, tables: dict | None = None):
    """The :class:`fedlib.tables.PaperTable` of ``table`` (a name, or a PaperTable, returned as it
    is) among ``tables`` (default: :func:`registry`); ValueError for an unknown name."""
    from fedlib.tables import PaperTable
    from fedlib.validation import check_choice

    if isinstance(table, PaperTable):
        return table
    tables = registry() if tables is None else tables
    return tables[check_choice(table, "table", tuple(tables))]


def tables_text(root: Path | None = None, tables: dict | None = None) -> str:
    """The tables (default: :func:`registry`), as the command lists them without a table (and
    ``--help`` ends): each one's paper, notebook and records folder (with how many records it
    holds under ``root``, default this checkout; None: the folder is not counted), then how to
    get what the runs not yet recorded cost (``--list``)."""
    lines = ["tables (python -m fedlib.grid TABLE --out FOLDER ...):"]
    for name, t in (registry() if tables is None else tables).items():
        folder = t.records
        if folder is None:
            where = "none committed (the report reads none; choose an --out)"
        elif root is None:
            where = folder
        else:
            n = sum(1 for _ in (root / folder).glob("*.json")) if (root / folder).is_dir() else 0
            where = f"{folder} ({n} records)" if n else f"{folder} (none yet)"
        lines += [f"  {name}", f"      paper:    {t.paper}", f"      notebook: notebooks/{t.notebook}.ipynb",
                  f"      records:  {where}"]
    lines += ["what a table's runs cost: python -m fedlib.grid TABLE --out FOLDER --list [filters] [--device cuda]",
              "prints each run not yet recorded in FOLDER with its estimated seconds (from comparable records), "
              "then the totals: CPU-hours, or GPU-minutes with --device cuda"]
    return "\n".join(lines)


def load_params(table, path=None, tables: dict | None = None) -> dict:
    """The parameters of ``table`` (a name or a PaperTable): ``path``, or its default params file
    (:attr:`fedlib.tables.PaperTable.params`). A file lacking one of the table's ``grid_params`` is
    refused, and so is a key that is none of its notebook's parameters (where the grid's parameters
    are its notebook's) or else none of the grid's parameters and ``device``."""
    import yaml

    from fedlib import notebook_params
    from fedlib.validation import fail

    t = table_of(table, tables)
    path = Path(path) if path is not None else ROOT / t.params
    if not path.is_file():
        fail("params", f"a params file of table {t.name} (e.g. {t.params})", str(path))
    params = yaml.safe_load(path.read_text())
    missing = [k for k in t.grid_params if not isinstance(params, dict) or k not in params]
    if missing:
        fail("params", f"a params file of notebook {t.notebook} (it lacks {missing})"
             if f"/{t.notebook}.yaml" in t.params else f"a params file of table {t.name} (it lacks {missing})",
             str(path))
    if set(t.grid_params) <= set(notebook_params.notebook_parameters(t.notebook)):
        return notebook_params.check_keys(params, t.notebook, f"params file {path}")  # an unknown key is an error
    for key in params:
        if key not in (*t.grid_params, "device"):
            fail(f"params file {path} key", f"a parameter of table {t.name} (one of {', '.join(t.grid_params)}, "
                 "device)", key)
    return params


def _flag(name: str) -> str:
    """The command-line flag of filter ``name`` (``iid_fractions`` -> ``--iid-fractions``)."""
    return "--" + name.replace("_", "-")


def _value(spec, name: str):
    return {"seeds": spec.seed, "methods": spec.method, "alphas": float(spec.level), "levels": float(spec.level),
            "settings": spec.protocol, "iid_fractions": float(spec.level),
            "datasets": spec.dataset, "n_clients": spec.n_clients, "reproductions": spec.reproduction}[name]


def select(table, params: dict, *, seeds=None, methods=None, alphas=None, settings=None,
           iid_fractions=None, datasets=None, n_clients=None, levels=None, reproductions=None,
           tables: dict | None = None) -> list:
    """The RunSpecs of ``table`` (a name or a PaperTable) built from ``params`` by its grid
    function, kept where each given filter holds (None: no filter). A filter value that is not in
    the table's grid, or a filter the table does not have, raises ValueError before any work."""
    from fedlib.validation import fail

    t = table_of(table, tables)
    specs = list(t.grid(params))
    given = {"seeds": seeds, "methods": methods, "alphas": alphas, "levels": levels, "settings": settings,
             "iid_fractions": iid_fractions, "datasets": datasets, "n_clients": n_clients,
             "reproductions": reproductions}
    for name, values in given.items():
        if values is None:
            continue
        if name not in t.filters:
            fail(_flag(name), f"left out for {t.name} (its filters: {', '.join(_flag(f) for f in t.filters)})",
                 list(values))
        present = sorted({_value(s, name) for s in specs})
        for v in values:
            if v not in present:
                fail(_flag(name), f"one of {present} (the {name} of {t.name}'s grid)", v)
        specs = [s for s in specs if _value(s, name) in values]
    return specs


def describe(spec, table=None) -> str:
    """One run as the progress lines name it: setting, row (the table's
    :attr:`~fedlib.tables.PaperTable.label`, with the reading where it is not the paper's text)
    and seed, the partition by its display name (:func:`fedlib.partition.partition_name`);
    ``table`` a name or a PaperTable (None: the row is the method)."""
    from fedlib.partition import partition_name

    row = spec.method if table is None else table_of(table).label(spec)
    if getattr(spec, "reproduction", "paper_text") != "paper_text":  # e.g. PSI-PFL's baselines as their code ran them
        row += f" ({spec.reproduction})"
    return f"{spec.dataset} ({partition_name(spec.protocol, spec.level)}) K={spec.n_clients} {row} seed={spec.seed}"


def _line(name, spec, record: dict) -> str:
    """A finished run's line: ``name(spec)`` (:func:`describe`), its status, seconds and (when
    it finished) accuracy: the record's ``global_accuracy``, in percent."""
    acc = record.get("global_accuracy")
    acc = f", weighted local accuracy {100 * acc:.2f} %" if isinstance(acc, (int, float)) else ""
    return f"{name(spec)}: {record['status']} in {record.get('seconds', float('nan')):.1f} s{acc}"


#: run_grid's ``progress`` for each run (``--progress``): 'rounds' prints a line a minute while a
#: run trains (its round, last accuracy, seconds per round, when it ends: fedlib.checkpoint) to
#: stderr; 'off' none. The command's own line per finished run is printed either way.
_PROGRESS = "rounds"


def _collect(results, computed: list, skipped: list, echo, budget: bool = False, name=None) -> None:
    """Echo a line per finished run (each named by ``name(spec)``, default :func:`describe` under
    its method's row); append the records this process computed to ``computed``
    and ``(spec, reserve)`` of the runs a budget left for a later call to ``skipped`` (not started,
    or stopped at a round boundary with a checkpoint; :func:`fedlib.grid.reserve_seconds`)."""
    from fedlib.checkpoint import checkpoint_path, saved_round
    from fedlib.grid import why_left

    describe_ = name or describe
    for spec, record, elsewhere, est in results:
        if record is None and elsewhere:
            echo(f"{describe_(spec)}: another process is computing it; not waited for (the budget has ended)")
        elif record is None:
            skipped.append((spec, est))
            resumes = saved_round(spec.key())
            if resumes is not None:  # started, then stopped at a round boundary by the budget
                echo(f"{describe_(spec)}: stopped by the budget before round {resumes + 1}; its checkpoint "
                     f"({checkpoint_path(spec.key())}) resumes it in a later call")
                continue
            echo(f"{describe_(spec)}: left for a later call ({why_left(est)})")
        elif elsewhere:
            echo(f"{describe_(spec)}: {record['status']}, recorded by another process")
        else:
            computed.append(record)
            unprotected = " (no comparable record: the budget could not protect it)" if budget and est is None else ""
            echo(_line(describe_, spec, record) + unprotected)


def _claimed_elsewhere(out: Path, spec) -> bool:
    """Whether another live process has claimed ``spec``'s run in ``out`` (:mod:`fedlib.claims`)."""
    from fedlib.grid import _claimed_live, record_path

    return _claimed_live(record_path(out, spec))


def run_state(out: Path, spec, found=...) -> str:
    """Where ``spec``'s run stands in the records folder ``out``: ``recorded (<status>)`` (found by
    its fields, :func:`fedlib.lookup.find`, whatever fedlib version wrote it), ``running`` (claimed
    by a live process), ``to compute``, or ``to compute (invalid record: <what is wrong>)`` for a
    file at its key that fails :func:`fedlib.records.read_strict`, as ``--list`` prints it.
    ``found``: its record file as :func:`fedlib.lookup.where` found it (``--list`` looks all its runs
    up at once: one lookup a run scanned the folder each time)."""
    from fedlib import lookup, records
    from fedlib.spec import record_path

    found = lookup.where([spec], Path(out))[0] if found is ... else found
    record = found and records.read_valid(found, consequence="skipped, not used")
    if record:
        return f"recorded ({record['status']})"
    path = record_path(Path(out), spec)
    try:
        records.read_strict(path, spec)
    except FileNotFoundError:
        pass
    except records.RecordError as err:
        return f"to compute (invalid record {path.name}: {err.problem})"
    return "running" if _claimed_elsewhere(Path(out), spec) else "to compute"


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


def list_runs(specs, out, kind: str, estimate_from=None, echo=print, name=None, summary: bool = False,
              table=None) -> dict:
    """``--list``: a line per run (named by ``name(spec)``, default :func:`describe`; where it stands in
    ``out``, :func:`run_state`; a run to compute with its estimated seconds on a ``kind`` device, less what
    its checkpoint holds: found by its key, so lost to a version bump), then the totals line. Returns the totals:
    ``recorded``, ``running``, ``to_compute``, ``estimated`` (those to compute with an estimate), ``seconds``.

    ``summary`` (``--summary``): instead of a line per run, the counts by row (the method, or
    ``table``'s row label) and by setting (data set, protocol and level, K), then the totals line.
    The records are looked up once for all runs, and runs with one :func:`fedlib.cost.pricing_key`
    (those that differ only in their seed or level) share one estimate."""
    from collections import defaultdict

    from fedlib.checkpoint import saved_round
    from fedlib import cost, lookup
    from fedlib.grid import sharing, timing_records
    from fedlib.methods import FLConfig

    folders = _estimate_folders(estimate_from)
    totals = {"recorded": 0, "running": 0, "to_compute": 0, "estimated": 0, "seconds": 0.0}
    specs = list(specs)
    states = [run_state(Path(out), s, found) for s, found in zip(specs, lookup.where(specs, Path(out)))]
    todo = [s for s, state in zip(specs, states) if state == "to compute"]
    # the records' timings are read once a call (not once a run: a walk of every folder each)
    timings = cost.on_reference_host(timing_records(Path(out), *folders))  # printed: reference-host CPU-s
    estimates = iter(cost.estimate_each(todo, timings, kind, sharing()) if todo else ())
    groups = {"row": defaultdict(lambda: defaultdict(float)), "setting": defaultdict(lambda: defaultdict(float))}
    for s, state in zip(specs, states):
        secs = 0.0
        if state == "to compute":
            totals["to_compute"] += 1
            cfg = FLConfig.from_dict(s.effective()[1])
            est = next(estimates).seconds
            resumes = saved_round(s.key())
            left, rounds = 1.0, cfg.rounds
            if resumes is not None:  # a checkpoint holds its first rounds: what is left of it
                left = 1 - resumes / rounds
                state += f", checkpoint resumes it at round {resumes + 1} of {rounds}"
            if est is None:
                state += f" (no comparable record on {kind})"
            else:
                totals["estimated"] += 1
                totals["seconds"] += est * left
                secs = est * left
                state += f" (≈ {est * left:.0f} s left on {kind})" if resumes is not None else f" (≈ {est:.0f} s on {kind})"
        else:
            totals["running" if state == "running" else "recorded"] += 1
        if not summary:
            echo(f"{(name or describe)(s)}: {state}")
            continue
        row = s.method if table is None else table_of(table).label(s)
        row += "" if getattr(s, "reproduction", "paper_text") == "paper_text" else f" ({s.reproduction})"
        for by, key in (("row", row), ("setting", f"{s.dataset} {s.protocol}={s.level:g} K={s.n_clients}")):
            g = groups[by][key]
            g["runs"] += 1
            g["to compute" if state.startswith("to compute") else "running" if state == "running" else "recorded"] += 1
            g["seconds"] += secs
    unit = (3600, "CPU-hours") if kind == "cpu" else (60, "GPU-minutes")
    for by in groups if summary else ():
        echo(f"by {by}:")
        for key, g in groups[by].items():
            priced = f" (≈ {g['seconds'] / unit[0]:.2f} {unit[1]})" if g["seconds"] else ""
            echo(f"  {key}: {g['runs']:.0f} runs, {g['recorded']:.0f} recorded, {g['running']:.0f} running, "
                 f"{g['to compute']:.0f} to compute{priced}")
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


def run_table(table, out, *, params=None, seeds=None, methods=None, alphas=None, settings=None,
              iid_fractions=None, datasets=None, n_clients=None, levels=None, reproductions=None,
              device: str | None = None, workers: int = 1, budget: float | None = None, estimate_from=None,
              echo=print, together: bool = False, progress: str = "rounds", tables: dict | None = None) -> dict:
    """Run the filtered part of ``table`` (a name among ``tables``, default :func:`registry`, or a
    :class:`fedlib.tables.PaperTable`) into ``out``; print (``echo``) a line per finished run.

    ``budget``: seconds from this call; a run starts only if it is estimated to end before then
    (the module's docstring; ``estimate_from``: the folders of records the estimates read besides
    ``out``, default the committed records).

    ``together`` (a budget trims a group to the runs that end in time): first the runs that may train together
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
    from fedlib.engine import resolve_device
    from fedlib.grid import admission_rule, check_settings
    from fedlib.validation import check_choice, check_folder, check_int, check_number, fail

    deadline = None if budget is None else time.time() + check_number(budget, "--budget", 0, low_open=True)
    check_int(workers, "--workers", 1)
    if estimate_from is not None and budget is None:
        fail("--estimate-from", "given only with --budget (its records estimate the runs a budget admits; "
             "--list reads it too): add --budget SECONDS or leave it out", estimate_from)
    out = check_folder(out, "--out")  # before anything is created
    check_settings()
    global _PROGRESS
    _PROGRESS = check_choice(progress, "--progress", ("rounds", "off"))
    folders = _estimate_folders(estimate_from) if budget is not None else []
    t = table_of(table, tables)
    table = t.name

    def name(spec) -> str:
        return describe(spec, t)

    p = load_params(t, params)
    specs = select(t, p, seeds=seeds, methods=methods, alphas=alphas, settings=settings,
                   iid_fractions=iid_fractions, datasets=datasets, n_clients=n_clients, levels=levels,
                   reproductions=reproductions)
    for s in specs:  # every check before any work
        s.validate()
    device = device or p.get("device", "auto")
    resolve_device(device)
    out.mkdir(parents=True, exist_ok=True)
    from fedlib.grid import _unrecorded, check_data

    todo = _unrecorded(out, specs)
    check_data(todo)  # every data set the runs need, before the first one trains
    echo(f"{table}: {len(specs)} runs, {len(specs) - len(todo)} already recorded in {out}, {len(todo)} to compute")
    if budget is not None and todo:
        echo(f"{table}: budget {budget:g} s: {admission_rule()}")
    computed, skipped = [], []
    from fedlib.grid import left_total, run_grid

    if together:
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
                    echo(f"{name(s)}: left for a later call (its group of runs trained together did not fit "
                         "the budget, or was stopped at a round boundary with a checkpoint)")
                    continue
                computed.append(record)
                echo(_line(name, s, record))
        todo = _unrecorded(out, todo)
    if todo:  # one at a time, or --workers at once (run_grid's pool), each checked against the one deadline
        kw = {} if deadline is None else {"budget": max(deadline - time.time(), 1e-3), "estimate_from": folders}
        run_grid(todo, out, device=device, progress=_PROGRESS, workers=workers,
                 on_run=lambda *result: _collect([result], computed, skipped, echo, budget is not None, name), **kw)
    if skipped:
        echo(f"{table}: budget: {left_total(skipped)}")
    return {"specs": specs, "recorded": len(specs) - len(todo), "computed": computed,
            "skipped": [s for s, _ in skipped]}


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


def main(argv=None, *, tables: dict | None = None) -> dict | None:
    """The command line (``python -m fedlib.grid``, ``fedlib-grid``, ``benchmarks/paper_grid.py``):
    the tables (``tables``, name -> PaperTable; default: :func:`registry`) without a table argument
    (or with ``--tables``), else :func:`list_runs` under ``--list``, or :func:`run_table`. Returns
    run_table's dict, else None."""
    tables = registry() if tables is None else tables
    ap = argparse.ArgumentParser(prog=_prog(), description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=tables_text(tables=tables) + "\n\nThe module fedlib.grid_cli documents the rest "
                                 "(filters, --workers, --together, --budget and its estimates, the lines printed).")
    ap.add_argument("table", nargs="?", help=f"one of {', '.join(tables)} (left out: list the tables)")
    ap.add_argument("--tables", action="store_true",
                    help="list the tables (paper, notebook, records folder, how many records it holds) and exit")
    ap.add_argument("--out", help="the records folder (created; runs recorded there are skipped); "
                                  "needed with a table")
    ap.add_argument("--params", help="the table's params file (default: its notebook's paper profile, "
                                     "params/paper/<notebook>.yaml, or the table's own)")
    ap.add_argument("--seeds", nargs="+", type=int)
    ap.add_argument("--methods", nargs="+")
    ap.add_argument("--alphas", nargs="+", type=float, help="FedPrism's and PSI-PFL's Dirichlet α")
    ap.add_argument("--levels", nargs="+", type=float, help="the partitions' levels (Table III: S or α)")
    ap.add_argument("--settings", nargs="+", help="pFedLIA's partitions (cross-paper, beyond-label, Table III: "
                                                  "the partition protocols)")
    ap.add_argument("--iid-fractions", nargs="+", type=float, help="CAFA's training partitions' IID shares")
    ap.add_argument("--datasets", nargs="+", help="PSI-PFL's data sets")
    ap.add_argument("--n-clients", nargs="+", type=int, help="PSI-PFL's numbers of clients K")
    ap.add_argument("--reproductions", nargs="+", help="Table III's readings: paper_text, paper_code")
    ap.add_argument("--device", help="auto, cpu, cuda, cuda:N (default: the params file's)")
    ap.add_argument("--workers", type=int, default=1, help="runs computed at once, one process each")
    ap.add_argument("--together", action="store_true",
                    help="train the FedAvg family's compatible runs side by side, one engine call per round "
                         "(fedlib.together; under a budget a group keeps only the runs whose summed estimate ends in "
                         "time), then the rest as usual")
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="start a run only if it is estimated to end within SECONDS of the command's start "
                         "(the others are left for a later call; a started run is never stopped)")
    ap.add_argument("--estimate-from", nargs="+", default=None, metavar="DIR",
                    help="folders of records whose seconds estimate the runs, besides --out "
                         "(default: benchmarks/records)")
    ap.add_argument("--list", action="store_true", help="print the filtered runs, where each stands in --out and "
                    "its estimated seconds, then the totals, and exit")
    ap.add_argument("--summary", action="store_true", help="--list's counts by row (method) and by setting "
                    "instead of a line per run, then the totals, and exit")
    ap.add_argument("--list-datasets", action="store_true", help="print the data sets the filtered runs need and exit")
    ap.add_argument("--progress", choices=("rounds", "off"), default="rounds",
                    help="rounds (default): while a run trains, a line a minute on stderr (its round, last accuracy, "
                         "seconds per round, when it ends); off: only the line per finished run")
    a = ap.parse_args(argv)
    if a.tables or a.table is None:
        print(tables_text(ROOT, tables))
        return None
    filters = dict(seeds=a.seeds, methods=a.methods, alphas=a.alphas, settings=a.settings,
                   iid_fractions=a.iid_fractions, datasets=a.datasets, n_clients=a.n_clients, levels=a.levels,
                   reproductions=a.reproductions)
    try:
        t = table_of(a.table, tables)  # an unknown table is named first
        if a.out is None:
            ap.error(f"the following arguments are required with a table: --out (e.g. --out {t.records})"
                     if t.records else "the following arguments are required with a table: --out")
        if a.list or a.summary or a.list_datasets:
            __import__("fedlib.validation").validation.check_folder(a.out, "--out", writable=False)
            params = load_params(t, a.params)
            specs = select(t, params, **filters)
            if a.list_datasets:
                print("\n".join(dict.fromkeys(s.dataset for s in specs)))
            else:
                list_runs(specs, Path(a.out), device_kind(a.device or params.get("device", "auto")), a.estimate_from,
                          name=lambda spec: describe(spec, t), summary=a.summary, table=t)
            return None
        return run_table(t, a.out, params=a.params, **filters, device=a.device, workers=a.workers, budget=a.budget,
                         estimate_from=a.estimate_from, together=a.together, progress=a.progress,
                         echo=lambda line: print(line, flush=True))  # a log file sees each line as it comes
    except ValueError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")


if __name__ == "__main__":
    main()
