"""Table III's FMNIST column at the paper's protocol, each method in both readings beside the
paper's value (pure functions over run records).

``python -m fedlib.grid clust-psi-pfl-table3`` trains the cells (the whole of FMNIST, K = 100, T = 40,
E = 5, q = 0.5: :func:`notebook_grid`, the paper table's grid; ``benchmarks/table3_like_for_like.py``
runs that command and prints the cells with these functions); notebook 06 prints the records committed
in :data:`RECORDS` without training. A cell is, for one (protocol, level, method),

    (paper, paper_text, paper_code, same run)

with Table III's value, the global accuracy as Table II says (the last round), the number the
authors' code reported (the last round, or CFL's and FedSoft's best round of their cluster models
on the pooled test set: :mod:`fedlib.reproduction`), NaN where there is none, and whether the
code ran the method as Table II says at this K and q (then one run is both readings).
"""
from __future__ import annotations

import numpy as np

from fedlib.methods import display_name
from fedlib.paths import ROOT
from fedlib.reproduction import runs_differently
from fedlib.spec import grid_specs
from .paper_table3 import paper_value
from .tables import records_frame, setting_name, table3

__all__ = ["FRACTION", "METHODS", "SETTINGS", "RECORDS", "GRID_PARAMS", "notebook_grid", "grid_label",
           "DEFAULT_SETTINGS", "COMMITTED_RECORDS", "parse_settings", "parse_hyper", "script_parser", "script_methods",
           "script_protocols", "script_params", "script_specs", "cells", "closer", "report_lines", "markdown"]

FRACTION = 0.5
"""Table II's q: the share of clients trained per round."""
METHODS = ("cl", "fedavg", "fedprox", "fedavgm", "fedadagrad", "fedyogi", "fedadam", "poc", "haccs", "fedcls",
           "cfl", "fedsoft", "clust_psi_pfl")
"""Table III's rows, in its order."""
SETTINGS = {"similarity": [0.0, 1.0], "dirichlet": [0.3]}
"""The settings run like for like: protocol -> levels (S = 0, S = 1, α = 0.3)."""
RECORDS = ROOT / "benchmarks" / "records" / "clust_psi_pfl" / "table3_like_for_like"
"""The committed records behind Table III's like-for-like column (present in a project checkout)."""

GRID_PARAMS = ("dataset", "settings", "n_clients", "seeds", "methods", "fl", "hyper", "reproductions")
"""The parameters Table III's like-for-like grid depends on (``params/tables/clust_psi_pfl_table3.yaml``):
:func:`notebook_grid`'s keywords."""


def notebook_grid(*, dataset: str, settings: dict, n_clients: int, seeds, methods, fl: dict, hyper: dict | None,
                  reproductions) -> dict[str, list]:
    """Table III's like-for-like grid from its parameters (:data:`GRID_PARAMS`), by table:
    ``'table3'`` — ``methods`` × ``settings`` (protocol -> levels) × ``reproductions`` × ``seeds``
    on ``dataset`` at K = ``n_clients`` (:func:`fedlib.spec.grid_specs`; a paper_code run only
    where the authors' code ran the method differently). At the default parameters its runs of
    S = 0, S = 1 and α = 0.3 are those ``benchmarks/table3_like_for_like.py`` has always run, key
    for key, so the committed records are found."""
    return {"table3": grid_specs([dataset], settings, [n_clients], seeds, methods, hyper=hyper, fl=fl,
                                 reproductions=reproductions)}


def grid_label(spec) -> str:
    """A run's row as the grid command's progress lines print it (``python -m fedlib.grid
    clust-psi-pfl-table3``): its method, Table III's row."""
    return spec.method


# ----------------------------------------------------------------------------- the script's command line
DEFAULT_SETTINGS = {"fmnist": "similarity:0,similarity:1,dirichlet:0.3",
                    "adult": "dirichlet:50,dirichlet:0.7,dirichlet:0.3,similarity:1,similarity:0.03,similarity:0"}
"""``benchmarks/table3_like_for_like.py``'s ``--settings`` default per ``--dataset``."""
COMMITTED_RECORDS = ROOT / "benchmarks" / "records"
"""``--estimate-from``'s default."""


def parse_settings(text: str) -> dict:
    """``--settings`` (``"similarity:0,dirichlet:0.3"``) -> protocol -> [levels]."""
    out: dict = {}
    for item in text.split(","):
        protocol, level = item.split(":")
        out.setdefault(protocol.strip(), []).append(float(level))
    return out


def parse_hyper(text: str | None) -> dict | None:
    """``--hyper`` (JSON: method -> hyperparameter overrides) as a dict; None for none.
    ValueError naming ``--hyper`` for text that is not JSON."""
    import json

    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"--hyper: {text!r} is not JSON ({err}); give e.g. "
                         "'{\"fedyogi\": {\"eta\": 0.3162}}'") from None


def script_parser(description: str | None = None):
    """The command line of ``benchmarks/table3_like_for_like.py`` (an ``argparse.ArgumentParser``):
    the script parses its arguments with it and the reproduction report its printed commands
    (:func:`workbook.report.command_specs`), so both build one spec list (:func:`script_specs`)."""
    import argparse

    from .paper_table3 import STAND_INS

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--dataset", default="fmnist", choices=sorted(STAND_INS),
                    help="fmnist (Table III's FMNIST column) or adult (the ACSIncome column's stand-in)")
    ap.add_argument("--settings", default=None, help="default: FMNIST's similarity:0,similarity:1,dirichlet:0.3; "
                    "adult's the six settings of the ACSIncome column")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--name", default="table3_like_for_like")
    ap.add_argument("--results", default=None, help="the records' folder (default: results/<--name>); "
                    "benchmarks/records/clust_psi_pfl/table3_like_for_like holds the README's")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--reproductions", default="paper_text,paper_code", help="their order is the runs' order")
    ap.add_argument("--hyper", default=None, help="JSON method -> hyperparameter overrides, e.g. "
                    "'{\"fedyogi\": {\"eta\": 0.3162}}' (use its own --name)")
    ap.add_argument("--report", action="store_true", help="print the records there are; train nothing")
    ap.add_argument("--markdown", action="store_true", help="also print them as one markdown table "
                    "(method x setting, each cell paper · paper_text · paper_code)")
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="start a run only if it is estimated to end within SECONDS (a resumable method's run, "
                         "or a group with --together: its first rounds; the budget stops it at a round "
                         "boundary with a checkpoint the next call resumes)")
    ap.add_argument("--estimate-from", nargs="+", default=None, metavar="DIR",
                    help="with --budget: folders of records whose seconds estimate the runs, besides the "
                         "records' folder (default: benchmarks/records)")
    ap.add_argument("--together", action="store_true",
                    help="train the FedAvg family's runs side by side, one engine call per round (fedlib.together)")
    return ap


def script_methods(a) -> list[str]:
    """``--methods`` of the parsed arguments ``a`` as a list."""
    return [m.strip() for m in a.methods.split(",") if m.strip()]


def script_protocols(a) -> dict:
    """``--settings`` of the parsed arguments ``a`` (default :data:`DEFAULT_SETTINGS` of ``--dataset``)."""
    return parse_settings(a.settings or DEFAULT_SETTINGS[a.dataset])


def script_params(a) -> dict:
    """The table's parameters (:data:`GRID_PARAMS`, as ``params/tables/clust_psi_pfl_table3.yaml``
    holds them) for the script's parsed arguments ``a`` (:func:`script_parser`). ValueError for
    ``--hyper`` that is not JSON (:func:`parse_hyper`)."""
    return {"dataset": a.dataset, "settings": script_protocols(a), "n_clients": a.clients,
            "seeds": [int(s) for s in a.seeds.split(",")], "methods": script_methods(a),
            "fl": {"rounds": a.rounds, "local_epochs": a.epochs, "fraction": FRACTION}, "hyper": parse_hyper(a.hyper),
            "reproductions": [r.strip() for r in a.reproductions.split(",")]}


def script_specs(a) -> list:
    """The RunSpecs the script computes for its parsed arguments ``a``: the table's grid
    (:func:`notebook_grid`) at :func:`script_params`. ValueError for ``--hyper`` that is not JSON
    or names an unknown hyperparameter."""
    return notebook_grid(**script_params(a))["table3"]


def cells(records, protocols: dict | None = None, methods=METHODS, n_clients: int = 100,
          fraction: float = FRACTION, dataset: str = "fmnist") -> dict:
    """(protocol, level, method) -> (paper, paper_text, paper_code, same run) for every setting in
    ``protocols`` (protocol -> levels; default :data:`SETTINGS`) and method in ``methods``.

    ``records``: run records (dicts as :func:`fedlib.experiment.load_records` returns them) at
    ``n_clients`` clients and the paper's protocol. Where the code ran a method differently and its
    paper_code run is not among the records, paper_code is NaN: the paper_text run does not stand
    in for it (:func:`workbook.tables.table3`'s fallback is only for methods run the same way).
    ``dataset``: the workbook data set the records ran on; the paper's value is read from the
    column it stands in for (:data:`workbook.paper_table3.STAND_INS`).
    """
    protocols = SETTINGS if protocols is None else protocols
    records = list(records)
    text, code, ran_code = {}, {}, set()
    if records:
        df = records_frame(records)
        text = table3(df).set_index(["protocol", "level", "method"])["mean"]
        code = table3(df, "paper_code").set_index(["protocol", "level", "method"])["mean"]
        ran_code = set(df[df.reproduction == "paper_code"][["protocol", "level", "method"]]
                       .itertuples(index=False, name=None))
    out = {}
    for protocol, levels in protocols.items():
        for level in levels:
            for m in methods:
                key = (protocol, float(level), m)
                t, c = text.get(key, np.nan), code.get(key, np.nan)
                same = not runs_differently(m, n_clients, fraction)
                if not same and key not in ran_code:
                    c = np.nan
                p = paper_value(dataset, m, protocol, level)
                out[key] = (np.nan if p is None else float(p), float(t), float(c), same)
    return out


def _fmt(v, digits: int) -> str:
    return "—" if not np.isfinite(v) else f"{v:.{digits}f}"


def closer(paper: float, text: float, code: float) -> str:
    """Which reading lands nearer the paper's value: "paper_text", "paper_code", "tie", or "—"
    unless all three are there."""
    if not all(np.isfinite([paper, text, code])):
        return "—"
    d_text, d_code = abs(text - paper), abs(code - paper)
    return "paper_text" if d_text < d_code else "paper_code" if d_code < d_text else "tie"


def _pct(v) -> str:
    """An accuracy (a fraction) as the report prints it: percent, two decimals (``86.00%``)."""
    return "—" if not np.isfinite(v) else f"{100 * v:.2f}%"


def report_lines(table: dict) -> list[str]:
    """One line per cell: ``<setting> <method> paper=<v> paper_text=<v> paper_code=<v> closer=<reading>``,
    the accuracies in percent with two decimals as the reproduction report prints them
    (``paper=86.00% paper_text=89.29%``; the cells and the records hold fractions)."""
    return [f"{protocol}={level:g} {m} paper={_pct(p)} paper_text={_pct(t)} paper_code={_pct(c)} "
            f"closer={closer(p, t, c)}" for (protocol, level, m), (p, t, c, _) in table.items()]


def markdown(table: dict, protocols: dict | None = None, methods=METHODS) -> str:
    """The cells as one markdown table: one row per method (its display name), one column per
    setting (its heading says "(%)"), each cell ``paper · paper_text · paper_code`` in percent
    ("=" where the code ran the method as Table II says, so one run is both readings; "—" where
    there is no value)."""
    protocols = SETTINGS if protocols is None else protocols
    settings = [(p, float(lv)) for p, levels in protocols.items() for lv in levels]
    head = ["Method"] + [f"{setting_name(p, lv, ' = ')} (%)" for p, lv in settings]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        row = [display_name(m)]
        for p, lv in settings:
            paper, t, c, same = table[(p, lv, m)]
            code_text = "=" if same and np.isfinite(t) else _fmt(100 * c, 1)
            row.append(f"{_fmt(100 * paper, 0)} · {_fmt(100 * t, 1)} · {code_text}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
