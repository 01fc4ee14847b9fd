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

``--together`` (with ``--budget`` too: a group trains only as many runs as its summed estimate
lets end in time, the others one by one; ``fedlib.grid.fitting_prefix``): the runs of the FedAvg family that share the protocol
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

import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's fedlib and workbook, installed or not
from fedlib import grid_cli  # noqa: E402
from fedlib.lookup import find  # noqa: E402
from fedlib.paths import results_dir  # noqa: E402
from workbook.like_for_like import (FRACTION, METHODS, cells, markdown, report_lines, script_methods,  # noqa: E402,F401
                                    script_params, script_parser, script_protocols)  # METHODS: the script's public name
from workbook.paper_tables import TABLES  # noqa: E402

TABLE = next(t for t in TABLES if t.name == "clust-psi-pfl-table3")  # the paper table these runs are


def main(argv=None) -> None:
    ap = script_parser(__doc__.split("\n\n")[0])  # the command line, shared with the report (workbook.like_for_like)
    a = ap.parse_args(argv)
    protocols, methods = script_protocols(a), script_methods(a)
    try:
        params = script_params(a)
    except ValueError as err:
        ap.error(str(err))
    specs = TABLE.grid(params)  # the table's grid at these parameters (bad input fails here)
    folder = Path(a.results) if a.results else results_dir() / a.name
    if not a.report:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "clust_psi_pfl_table3.yaml"
            path.write_text(yaml.safe_dump(params))
            grid_cli.run_table(TABLE, folder, params=path, device=a.device, budget=a.budget,
                               estimate_from=a.estimate_from, together=a.together,
                               echo=lambda line: print(line, flush=True))
    records = find(specs, folder, restore_nonfinite=False)[0]  # by the specs' fields, whatever version wrote them
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
