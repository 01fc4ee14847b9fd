"""``python -m workbook.plan``: print the plan, or compute it (``--run --budget S``); :mod:`workbook.plan`.

A module of its own, so that the plan (:mod:`workbook.plan`, which the report imports) never
imports the report: this command does, and hands it in."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fedlib.validation import check_choice, check_int, check_number, fail
from workbook import report as R
from workbook.matching import RECORDS
from workbook.plan import COMMAND, PLANNED_DESIGNS, plan, plan_markdown, plan_notes, run_plan


def _parser() -> argparse.ArgumentParser:
    a = argparse.ArgumentParser(prog=COMMAND, description="The next runs, ordered by the rows they would decide per "
                                "CPU-hour (workbook.plan's docstring); --run --budget S computes them in that order.")
    a.add_argument("--records", default=str(RECORDS), help="the records root (default benchmarks/records)")
    a.add_argument("--top", default="30", help="print the first N runs (default 30; 'all' for every one)")
    a.add_argument("--device", default="cpu", help="cpu (default) or cuda: what the estimates price and the runs use")
    a.add_argument("--no-studies", action="store_true", help="leave notebooks 11 and 12's grids out")
    a.add_argument("--without", nargs="+", default=[], metavar="METHOD",
                   help="leave these methods' runs out (e.g. methods whose code is changing: their records would be superseded)")
    a.add_argument("--only", nargs="+", default=[], metavar="FOLDER",
                   help="keep only the runs of these records folders or planned designs (workbook.plan.PLANNED_DESIGNS, e.g. "
                        "cross_paper_preregistered: a core given to a study's design while the other follows the plan's head)")
    a.add_argument("--run", action="store_true", help="compute the plan in order (needs --budget)")
    a.add_argument("--budget", default=None, help="with --run: seconds from the start; no run starts that would not end by then")
    a.add_argument("--together", action="store_true", help="with --run: runs of the FedAvg family that may train together "
                   "do, in one engine call per round (fedlib.together; on a GPU, one wide call replaces many narrow ones)")
    a.add_argument("--workers", default="1", help="with --run: runs at once, one process and one thread each")
    return a


def folders() -> tuple:
    """The records folders and planned designs a plan's run can belong to (``--only``'s choices)."""
    from workbook.report_cells import RECORD_COMMANDS, grid_tables

    return tuple(sorted({*grid_tables(), *(k.split(":")[0] for k in RECORD_COMMANDS), *PLANNED_DESIGNS}))


def whole_runs_by_default(environ=os.environ) -> bool:
    """``--run``'s budget rule: ``$FEDLIB_WHOLE_RUNS`` (:func:`fedlib.grid.whole_runs`) is 1 unless
    set, so a run starts only if all of it fits, resumable ones too: no run is left half done at
    the budget's end, whose checkpoint a later call on another machine would not find. Set it to 0
    to let a resumable run start on its first rounds and stop at a round boundary with a
    checkpoint (a later call on this machine resumes it). A value other than 0 or 1 is refused."""
    from fedlib.grid import ENV_WHOLE_RUNS, whole_runs

    environ.setdefault(ENV_WHOLE_RUNS, "1")
    return whole_runs()


def _number(text, name: str, kind=float):
    try:
        return kind(text)
    except (TypeError, ValueError):
        fail(name, f"a {'whole ' if kind is int else ''}number", text)


def main(argv=None) -> int:
    """``python -m workbook.plan``: print the plan (or, with ``--run --budget S``, compute it). Bad
    input exits 2 with the parameter, its value and the fix."""
    a = _parser().parse_args(argv)
    try:
        device = check_choice(a.device, "--device", ("cpu", "cuda"))
        top = None if a.top == "all" else check_int(_number(a.top, "--top", int), "--top", 1)
        workers = check_int(_number(a.workers, "--workers", int), "--workers", 1)
        budget = None if a.budget is None else check_number(_number(a.budget, "--budget"), "--budget", 0, low_open=True)
        if a.run and budget is None:
            fail("--budget", "seconds > 0 with --run (e.g. --run --budget 3600)", None)
        if budget is not None and not a.run:
            fail("--budget", "left out unless --run is given (it bounds the computation)", budget)
        if a.together and not a.run:
            fail("--together", "left out unless --run is given", True)
        if workers != 1 and not a.run:
            fail("--workers", "1 unless --run is given", workers)
        from fedlib.methods import METHODS

        for m in a.without:
            check_choice(m, "--without", tuple(sorted(METHODS)))
        root = Path(a.records)
        if not root.is_dir():
            fail("--records", "an existing folder of run records (e.g. benchmarks/records)", str(root))
        studies = {"cross_paper", "beyond_label", *PLANNED_DESIGNS}
        if a.no_studies and studies & set(a.only):
            fail("--only", "a study's folder only without --no-studies (that leaves the studies out)", a.only)
        for folder in a.only:
            check_choice(folder, "--only", folders())
        whole = whole_runs_by_default() if a.run else None
    except ValueError as e:
        print(f"{COMMAND}: {e}", file=sys.stderr)
        return 2
    df = R.frame(root)
    p = plan(df, root, device=device, studies=not a.no_studies, report=R)
    if a.without:
        p = p[[s.method not in a.without for s in p.spec]].reset_index(drop=True)
    if a.only:
        p = p[p.folder.isin(a.only) | p.group.isin(a.only)].reset_index(drop=True)
    if not a.run:
        print(f"{len(p)} runs planned, {p.seconds.notna().sum()} priced ({p.seconds.sum() / 3600:.1f} "
              f"{'CPU' if device == 'cpu' else 'GPU'}-hours), expected to decide {p.value.sum():.1f} rows; "
              "not planned: " + ", ".join(f"{n} {w}" for w, n in plan_notes(p).items()))
        print("\n".join(plan_markdown(p, top)))
        return 0
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    print("plan: a run starts only if " + ("all of it fits the budget ($FEDLIB_WHOLE_RUNS=1, --run's default)" if whole else
          "its first rounds fit the budget where its method resumes ($FEDLIB_WHOLE_RUNS=0: it stops at a round "
          "boundary with a checkpoint that only this machine keeps)"), flush=True)
    got = run_plan(p, budget, root, workers=workers, device=device, together=a.together)
    print(f"plan: {len(got['computed'])} runs computed, {len(got['left'])} left for a later call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
