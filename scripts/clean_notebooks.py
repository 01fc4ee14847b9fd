#!/usr/bin/env python
"""Strip volatile metadata from executed notebooks so committed diffs stay quiet.

Removes papermill's records (``metadata.papermill`` of the notebook and of each cell),
per-cell execution timings (``metadata.execution``), widget state, and papermill's
``injected-parameters`` cells (the committed notebooks run with their own defaults);
renumbers execution counts 1, 2, ... in cell order; keeps outputs, tags and cell ids; sets the
kernelspec to the one JupyterLab writes for the venv's ``python3`` kernel (so opening and saving
a notebook in ``make lab`` leaves it unchanged).
Idempotent: running it twice changes nothing the second time.

Usage
-----
    python scripts/clean_notebooks.py                 # every notebooks/*.ipynb
    python scripts/clean_notebooks.py a.ipynb b.ipynb # these
    python scripts/clean_notebooks.py --check         # exit 1 if any notebook would change
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
VOLATILE_NB_KEYS = ("papermill", "widgets")
VOLATILE_CELL_KEYS = ("papermill", "execution", "ExecuteTime", "collapsed", "scrolled")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return ``nb`` without volatile metadata (modified in place)."""
    for key in VOLATILE_NB_KEYS:
        nb.metadata.pop(key, None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    count = 0
    for cell in nb.cells:
        for key in VOLATILE_CELL_KEYS:
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            continue
        if cell.get("execution_count") is not None or cell.get("outputs"):
            count += 1
            cell.execution_count = count
            for out in cell.outputs:
                if "execution_count" in out:
                    out["execution_count"] = count
        else:
            cell.execution_count = None
    return nb


def process(path: Path, check: bool) -> bool:
    """Clean one notebook file; return True if it changed (or would change, with check)."""
    before = path.read_text(encoding="utf-8")
    nb = clean(nbformat.reads(before, as_version=4))
    after = nbformat.writes(nb) + "\n"
    if after == before:
        return False
    if not check:
        path.write_text(after, encoding="utf-8")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if any would change")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    changed = [p for p in paths if process(p, args.check)]
    for p in changed:
        print(f"{'would clean' if args.check else 'cleaned'}: {p}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
