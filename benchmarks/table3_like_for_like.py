"""Table III's FMNIST column like for like: each method as Table II says (paper_text) and as the
authors' code ran it (paper_code, :mod:`fedlib.reproduction`), beside the paper's value.

The runs are the paper table ``clust-psi-pfl-table3`` of the grid command (``python -m fedlib.grid
clust-psi-pfl-table3 --out benchmarks/records/clust_psi_pfl/table3_like_for_like``,
:mod:`workbook.paper_tables`): this script is that command under its own flags (they write the
table's params file, ``params/tables/clust_psi_pfl_table3.yaml``'s keys, and it runs
:func:`fedlib.grid_cli.run_table`), then prints the cells (:mod:`workbook.like_for_like`);
``--report`` prints them without training.

The paper's protocol by default: the whole of FMNIST, K = 100, T = 40, E = 5, q = 0.5 (≈ 16 min
per run on a 2-core CPU; ``--device cuda`` on a GPU). Records go to results/<--name>/ and are
reused: a rerun computes only what is missing, and several processes may run the same command
at once (each run is claimed before it is computed). ``--report`` prints what is there without
training. Prints, per setting and method::

    <setting> <method> paper=<v> paper_text=<v> paper_code=<v> closer=<reading>

(accuracies in percent, two decimals, as the reproduction report prints them: ``similarity=0 cfl
paper=59.00% paper_text=10.00% paper_code=48.22% closer=paper_code``), where paper_code is the number the code reported (the last round, or CFL's and FedSoft's best
round of their cluster models on the pooled test set) and ``closer`` names the reading nearer to
the paper's value. A method whose code ran as Table II says at this K and q has one run for both.

Usage: python benchmarks/table3_like_for_like.py [--dataset fmnist|adult] [--settings similarity:0,similarity:1,dirichlet:0.3]
       [--methods cfl,fedsoft,...] [--seeds 0] [--rounds 40] [--epochs 5] [--clients 100]
       [--name table3_like_for_like] [--results DIR] [--device auto] [--reproductions paper_text,paper_code]
       [--hyper '{"fedyogi": {"eta": 0.3162, "tau": 0.1}}'] [--report] [--markdown]
       [--budget SECONDS [--estimate-from DIR ...]] [--together]

``--budget SECONDS`` (from the training's start): a run starts only if it is estimated to end
before then, the others are left for a later call (the grid command's ``--budget``:
the median wall time of comparable finished runs in the records' folder and ``--estimate-from``,
default the committed ``benchmarks/records``, times ``SAFETY_FACTOR``); a resumable method's run
starts when its first rounds fit and the budget stops it at a round boundary with a checkpoint
(:mod:`fedlib.checkpoint`) that the next call resumes. ``benchmarks/gpu_lease.sh`` runs this command on a GPU lease with it.

``--together`` (with ``--budget`` too: a group starts when its first rounds fit and stops at a
round boundary with one checkpoint for the group): the runs of the FedAvg family that share the protocol
(FedAvg, FedProx, FedAvgM, FedAdagrad, FedYogi, FedAdam over the seeds and settings) train side
by side, their clients in one engine call per round (the grid command's ``--together``,
:mod:`fedlib.together`): the same records up to kernel rounding, faster on a GPU.

``--hyper`` (JSON: method -> hyperparameter overrides) runs a sensitivity check beside the table;
give it its own ``--name``/``--results`` so its records do not mix with the table's.

The records behind the README's numbers are committed: ``--results
benchmarks/records/clust_psi_pfl/table3_like_for_like --report --markdown`` prints them without training, and
the README's table (method x setting, each cell ``paper · paper_text · paper_code``) as well.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fedlib and workbook, installed or not
from fedlib import grid_cli  # noqa: E402
from fedlib.experiment import load_records  # noqa: E402
from fedlib.paths import results_dir  # noqa: E402
from workbook.like_for_like import FRACTION, METHODS, cells, markdown, notebook_grid, report_lines  # noqa: E402
from workbook.paper_table3 import STAND_INS  # noqa: E402
from workbook.paper_tables import TABLES  # noqa: E402

TABLE = next(t for t in TABLES if t.name == "clust-psi-pfl-table3")  # the paper table these runs are

DEFAULT_SETTINGS = {"fmnist": "similarity:0,similarity:1,dirichlet:0.3",
                    "adult": "dirichlet:50,dirichlet:0.7,dirichlet:0.3,similarity:1,similarity:0.03,similarity:0"}


def _settings(text: str) -> dict:
    out: dict = {}
    for item in text.split(","):
        protocol, level = item.split(":")
        out.setdefault(protocol.strip(), []).append(float(level))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    a = ap.parse_args(argv)
    protocols = _settings(a.settings or DEFAULT_SETTINGS[a.dataset])
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    try:
        hyper = json.loads(a.hyper) if a.hyper else None
    except json.JSONDecodeError as err:
        ap.error(f"--hyper: {a.hyper!r} is not JSON ({err}); give e.g. '{{\"fedyogi\": {{\"eta\": 0.3162}}}}'")
    params = {"dataset": a.dataset, "settings": protocols, "n_clients": a.clients,
              "seeds": [int(s) for s in a.seeds.split(",")], "methods": methods,
              "fl": {"rounds": a.rounds, "local_epochs": a.epochs, "fraction": FRACTION}, "hyper": hyper,
              "reproductions": [r.strip() for r in a.reproductions.split(",")]}
    specs = notebook_grid(**params)["table3"]  # the table's grid at these parameters (bad input fails here)
    folder = Path(a.results) if a.results else results_dir() / a.name
    if not a.report:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "clust_psi_pfl_table3.yaml"
            path.write_text(yaml.safe_dump(params))
            grid_cli.run_table(TABLE, folder, params=path, device=a.device, budget=a.budget,
                               estimate_from=a.estimate_from, together=a.together,
                               echo=lambda line: print(line, flush=True))
    keys = {s.key() for s in specs}
    records = [r for r in load_records(folder) if r.get("key") in keys] if folder.exists() else []
    if not records:
        print(f"no records yet in {folder}")
        return
    table = cells(records, protocols, methods, a.clients, FRACTION, dataset=a.dataset)
    print("\n".join(report_lines(table)))
    if a.markdown:
        print()
        print(markdown(table, protocols, methods))


if __name__ == "__main__":
    main()
