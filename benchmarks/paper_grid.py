"""Run a filtered part of a notebook's paper-protocol grid into a records folder.

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

Tables::

    psi-pfl            PSI-PFL Figs. 5-7 and §4.3: psi_pfl and the baselines × data sets × Dirichlet α × K × seeds
    cafa-table4        CAFA Tables IV–V and Fig. 6: FedAvg, FedProx, CAFA × IID shares × seeds (authors' protocol)
    fedprism-table1    FedPrism Tables 1, 6, 7: methods × Dirichlet α × seeds, CFL's extra thresholds
    fedprism-table9    FedPrism Table 9: the components ablations (FedPrism at the ablation α)
    fedprism-table11   FedPrism Table 11: the initial global weights (FedPrism at the ablation α)
    pfedlia-table1     pFedLIA Table I and the cluster-recovery table: methods × settings × seeds
    cross-paper        notebook 11: every method on every seed paper's partition × seeds (--settings: protocols)
    beyond-label       notebook 12: the variants × the partitions beyond label skew × seeds (--settings: protocols)

Usage::

    python benchmarks/paper_grid.py psi-pfl --out benchmarks/records/psi_pfl/comparison --datasets adult \\
        --n-clients 100 --alphas 0.05 --seeds 0
    python benchmarks/paper_grid.py fedprism-table1 --out benchmarks/records/fedprism/table1 --seeds 0 \\
        --methods fedprism fedavg local --alphas 0.1 [--device cuda] [--workers N]
    python benchmarks/paper_grid.py fedprism-table9 --out benchmarks/records/fedprism/table9 --seeds 0
    python benchmarks/paper_grid.py cafa-table4 --out benchmarks/records/cafa/training --seeds 0 1 2 --iid-fractions 0.0
    python benchmarks/paper_grid.py pfedlia-table1 --out benchmarks/records/pfedlia/table1 --seeds 0 \\
        --settings pathological_clusters
    python benchmarks/paper_grid.py cross-paper --out benchmarks/records/cross_paper --workers 2 \\
        --settings similarity noisy_clusters
    python benchmarks/paper_grid.py beyond-label --out benchmarks/records/beyond_label --seeds 0 \\
        --settings rotated_groups

Filters (each optional, each value must be in the table's grid, else the command fails before
any work): ``--seeds``, ``--methods`` (the method names of the specs: ``cfl`` selects every CFL
row, ``fedamp`` both attentions), ``--alphas`` (FedPrism's and PSI-PFL's Dirichlet α), ``--datasets`` and ``--n-clients`` (PSI-PFL's), ``--settings`` (pFedLIA's partitions; cross-paper's and beyond-label's partition protocols),
``--iid-fractions`` (CAFA's training partitions' IID shares). ``--list``
prints the filtered runs, each with where it stands in ``--out`` (``recorded (ok)``, ``running`` in
another process, ``to compute``), and exits. ``--workers N`` computes N runs at once, in N processes
(each on ``max(1, cores // N)`` torch threads) sharing the folder. Several commands (or machines)
sharing one folder split the runs: a run another live process has claimed is taken last, when
its record is then read (or waited for), so no process queues behind another's run.

Prints one line before (the runs, how many are recorded already) and one per finished run::

    <dataset> <protocol>=<level> K=<K> <row> seed=<s>: <status> in <seconds> s

(seconds: the record's ``seconds``, the run's wall time).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

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
_FILTERS = {"07_psi_pfl": ("seeds", "methods", "alphas", "datasets", "n_clients"),
            "08_cafa": ("seeds", "methods", "iid_fractions"), "09_fedprism": ("seeds", "methods", "alphas"),
            "10_pfedlia": ("seeds", "methods", "settings"),
            "11_cross_paper": ("seeds", "methods", "settings"),
            "12_beyond_label_skew": ("seeds", "methods", "settings", "datasets")}


def notebook_of(table: str) -> str:
    """The notebook whose grid ``table`` is part of; ValueError for an unknown table."""
    from fedlib.validation import check_choice

    return TABLES[check_choice(table, "table", tuple(TABLES))][0]


def _study(notebook: str):
    from fedlib.analysis import beyond_label, cafa_study, cross_paper, fedprism_study, pfedlia_study, psi_pfl_study

    return {"07_psi_pfl": psi_pfl_study, "08_cafa": cafa_study, "09_fedprism": fedprism_study, "10_pfedlia": pfedlia_study,
            "11_cross_paper": cross_paper, "12_beyond_label_skew": beyond_label}[notebook]


def load_params(notebook: str, path=None) -> dict:
    """The notebook's parameters: ``path``, or its paper profile ``params/paper/<notebook>.yaml``."""
    from fedlib.validation import fail

    path = Path(path) if path is not None else ROOT / "params" / "paper" / f"{notebook}.yaml"
    if not path.is_file():
        fail("params", f"a params file of notebook {notebook} (e.g. params/paper/{notebook}.yaml)", str(path))
    params = yaml.safe_load(path.read_text())
    missing = [k for k in _study(notebook).GRID_PARAMS if not isinstance(params, dict) or k not in params]
    if missing:
        fail("params", f"a params file of notebook {notebook} (it lacks {missing})", str(path))
    return params


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
    from fedlib.analysis import beyond_label, fedprism_study, pfedlia_study
    from fedlib.partition import PROTOCOL_ISSUE_44

    d = spec.to_dict()
    if spec.protocol in PROTOCOL_ISSUE_44:
        row = beyond_label.variant_of(d)
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


def _compute(spec, out: str, device: str) -> dict:
    """One run through run_grid (which claims it, records it, and skips it if recorded)."""
    from fedlib.experiment import run_grid

    return run_grid([spec], out, device=device, progress=False)[0]


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _compute_star(args):
    """``(spec, record, elsewhere)``: ``elsewhere`` when another process sharing the folder had
    recorded or claimed the run before this one reached it (run_grid then returned or waited for
    that process's record instead of computing it)."""
    from fedlib.experiment import record_path

    spec, out, _ = args
    elsewhere = record_path(Path(out), spec).exists() or _claimed_elsewhere(Path(out), spec)
    return spec, _compute(*args), elsewhere


def _collect(results, computed: list, echo) -> None:
    """Echo a line per finished run; append the records this process computed to ``computed``."""
    for spec, record, elsewhere in results:
        if elsewhere:
            echo(f"{describe(spec)}: {record['status']}, recorded by another process")
        else:
            computed.append(record)
            echo(_line(spec, record))


def _claimed_elsewhere(out: Path, spec) -> bool:
    """Whether another live process has claimed ``spec``'s run in ``out`` (:mod:`fedlib.claims`)."""
    from fedlib import claims
    from fedlib.experiment import record_path

    path = record_path(out, spec)
    return claims.claim_path(path).exists() and not claims.is_stale(path)


def run_state(out: Path, spec) -> str:
    """Where ``spec``'s run stands in the records folder ``out``: ``recorded (<status>)``,
    ``running`` (claimed by a live process) or ``to compute``, as ``--list`` prints it."""
    import json

    from fedlib.experiment import record_path

    path = record_path(Path(out), spec)
    if path.exists():
        return f"recorded ({json.loads(path.read_text()).get('status', '?')})"
    return "running" if _claimed_elsewhere(Path(out), spec) else "to compute"


def _next_run(pending: list, out: Path):
    """The first of ``pending`` that no other process is computing, else the first (whose record
    run_grid then waits for): processes sharing a folder each compute a different run instead
    of queueing behind one another's claims."""
    return next((s for s in pending if not _claimed_elsewhere(out, s)), pending[0])


def run_table(table: str, out, *, params=None, seeds=None, methods=None, alphas=None, settings=None,
              iid_fractions=None, datasets=None, n_clients=None, device: str | None = None, workers: int = 1,
              echo=print) -> dict:
    """Run the filtered part of ``table`` into ``out``; print (``echo``) a line per finished run.

    Returns
    -------
    dict: ``specs`` (the filtered runs), ``recorded`` (how many were recorded before),
    ``computed`` (the records this call computed, in the order they finished; runs another process
    sharing ``out`` recorded meanwhile are skipped and not among them).
    """
    from fedlib.engine import resolve_device
    from fedlib.experiment import record_path
    from fedlib.validation import check_int

    check_int(workers, "--workers", 1)
    p = load_params(notebook_of(table), params)
    specs = select(table, p, seeds=seeds, methods=methods, alphas=alphas, settings=settings,
                   iid_fractions=iid_fractions, datasets=datasets, n_clients=n_clients)
    for s in specs:  # every check before any work
        s.validate()
    device = device or p.get("device", "auto")
    resolve_device(device)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in specs if not record_path(out, s).exists()]
    echo(f"{table}: {len(specs)} runs, {len(specs) - len(todo)} already recorded in {out}, {len(todo)} to compute")
    computed = []
    if workers == 1 or len(todo) <= 1:
        pending = list(todo)
        while pending := [s for s in pending if not record_path(out, s).exists()]:  # another process may have recorded some
            s = _next_run(pending, out)  # runs another process is computing go last
            pending.remove(s)
            results = [_compute_star((s, str(out), device))]
            _collect(results, computed, echo)
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        ctx = multiprocessing.get_context("spawn")
        ordered = sorted(todo, key=lambda s: _claimed_elsewhere(out, s))  # stable: claimed elsewhere last
        with ctx.Pool(min(workers, len(todo)), initializer=_init_worker, initargs=(threads,)) as pool:
            _collect(pool.imap_unordered(_compute_star, [(s, str(out), device) for s in ordered]), computed, echo)
    return {"specs": specs, "recorded": len(specs) - len(todo), "computed": computed}


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", help=f"one of {', '.join(TABLES)}")
    ap.add_argument("--out", required=True, help="the records folder (created; runs recorded there are skipped)")
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
    ap.add_argument("--list", action="store_true", help="print the filtered runs and where each stands in --out, and exit")
    a = ap.parse_args(argv)
    try:
        if a.list:
            specs = select(a.table, load_params(notebook_of(a.table), a.params), seeds=a.seeds, methods=a.methods,
                           alphas=a.alphas, settings=a.settings, iid_fractions=a.iid_fractions,
                           datasets=a.datasets, n_clients=a.n_clients)
            for s in specs:
                print(f"{describe(s)}: {run_state(Path(a.out), s)}")
            return None
        return run_table(a.table, a.out, params=a.params, seeds=a.seeds, methods=a.methods, alphas=a.alphas,
                         settings=a.settings, iid_fractions=a.iid_fractions, datasets=a.datasets,
                         n_clients=a.n_clients, device=a.device, workers=a.workers)
    except ValueError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")


if __name__ == "__main__":
    main()
