#!/usr/bin/env python
"""Compare executed notebooks with the committed ones, by nbval's rules, without re-running them.

``make workbook`` executes every notebook with papermill into ``build/executed/<profile>/``;
``make test`` then checks that each executed smoke notebook printed what the committed notebook
shows, instead of executing the notebooks a second time under nbval. The comparison is nbval's
(``pytest --nbval``, 0.11), cell by cell:

- the executed copy is first cleaned as ``make refresh-notebooks`` cleans the committed one
  (``scripts/clean_notebooks.py``: papermill's injected-parameters cell and ``run_grid``'s
  progress lines on stderr go);
- code cells are paired in order, and their sources must be equal (a different source means the
  executed copy is stale: re-run ``make workbook``);
- ``# NBVAL_SKIP`` / ``# NBVAL_IGNORE_OUTPUT`` (or the ``nbval-skip`` / ``nbval-ignore-output``
  tags) exempt a cell, and a reference cell that was never run is not compared;
- outputs are coalesced per stream, flattened by MIME type, and the keys nbval skips are skipped
  (metadata, execution counts, images, widget model ids);
- every text is passed through ``tests/nbval_sanitize.cfg`` before it is compared.

``make nbval`` (and ``make test-other-cpu``, which re-executes every notebook under other CPU
kernels) still run nbval itself.

Usage
-----
    python scripts/compare_notebooks.py build/executed/smoke                # every notebooks/*.ipynb
    python scripts/compare_notebooks.py build/executed/smoke notebooks/05_training.ipynb
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbval.plugin import (coalesce_streams, find_comment_markers, find_metadata_tags,
                          get_sanitize_patterns, transform_streams_for_comparison)

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
#: Output keys nbval does not compare (IPyNbFile.skip_compare without --nbdime).
SKIP_COMPARE = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
                "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")


@functools.cache
def _clean_notebooks():
    """scripts/clean_notebooks.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("clean_notebooks", ROOT / "scripts" / "clean_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sanitize_patterns(path: Path = SANITIZE) -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of an nbval sanitize file, in file order."""
    return get_sanitize_patterns(path.read_text(encoding="utf-8"))


def _options(cell) -> dict:
    """nbval's per-cell options: tags first, then comment markers (which win)."""
    options = dict(find_metadata_tags(cell.metadata))
    options.update(dict(find_comment_markers(cell.source)))
    options.setdefault("check", True)
    return options


def _flatten(outputs, patterns) -> dict[str, list]:
    """nbval's comparison form: {key or MIME type: [sanitised value per output]}."""
    def sanitize(value):
        if not isinstance(value, str):
            return value
        for regex, replace in patterns:
            value = re.sub(regex, replace, value)
        return value

    flat = defaultdict(list)
    for output in transform_streams_for_comparison(coalesce_streams(list(outputs))):
        for key, value in output.items():
            if key in SKIP_COMPARE:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in SKIP_COMPARE:
                        flat[mime].append(sanitize(data))
            else:
                flat[key].append(sanitize(value))
    return dict(flat)


@dataclass(frozen=True)
class Difference:
    """One cell whose executed output differs from the committed one (``cell``: nbval's
    code-cell number, as in ``notebooks/NN.ipynb::Cell 5``)."""
    cell: int
    what: str

    def __str__(self) -> str:
        return f"Cell {self.cell}: {self.what}"


def _text(values: list) -> str:
    return "\n".join(v if isinstance(v, str) else repr(v) for v in values)


def compare(reference: nbformat.NotebookNode, executed: nbformat.NotebookNode,
            patterns: list[tuple[str, str]]) -> list[Difference]:
    """The cells of ``executed`` (a papermill run, cleaned here) whose outputs differ from
    ``reference``'s (the committed notebook) by nbval's rules; empty when they agree."""
    executed = _clean_notebooks().clean(executed)
    ref_cells = [c for c in reference.cells if c.cell_type == "code"]
    run_cells = [c for c in executed.cells if c.cell_type == "code"]
    if len(ref_cells) != len(run_cells):
        return [Difference(-1, f"the committed notebook has {len(ref_cells)} code cells, the executed "
                               f"copy {len(run_cells)}: the copy is stale; re-run `make workbook`")]
    differences = []
    for number, (ref, run) in enumerate(zip(ref_cells, run_cells)):
        if ref.source != run.source:
            differences.append(Difference(number, "its source differs from the committed notebook's: the "
                                                  "executed copy is stale; re-run `make workbook`"))
            continue
        options = _options(ref)
        if options.get("skip") or not options["check"] or ref.execution_count is None:
            continue
        errors = [o for o in run.outputs if o.get("output_type") == "error"]
        if errors and not options.get("check_exception"):
            differences.append(Difference(number, f"raised {errors[0].get('ename')}: {errors[0].get('evalue')}"))
            continue
        want, got = _flatten(ref.outputs, patterns), _flatten(run.outputs, patterns)
        if set(want) != set(got):
            differences.append(Difference(number, f"output kinds differ: committed {sorted(want)}, executed {sorted(got)}"))
            continue
        for key in want:
            if want[key] != got[key]:
                differences.append(Difference(
                    number, f"{key} differs\n<<<<<<<<<<<< committed\n{_text(want[key])}\n"
                            f"============ executed\n{_text(got[key])}\n>>>>>>>>>>>>"))
                break
    return differences


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("executed", type=Path, help="folder of executed notebooks (make workbook's build/executed/smoke)")
    ap.add_argument("notebooks", nargs="*", type=Path, help="committed notebooks (default: notebooks/[0-9][0-9]_*.ipynb)")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    patterns = sanitize_patterns()
    missing = [p for p in paths if not (args.executed / p.name).is_file()]
    if missing:
        print(f"compare_notebooks: no executed copy of {', '.join(p.name for p in missing)} in "
              f"{args.executed}/: run `make workbook` first", file=sys.stderr)
        return 2
    failed = 0
    for path in paths:
        reference = nbformat.read(path, as_version=4)
        executed = nbformat.read(args.executed / path.name, as_version=4)
        differences = compare(reference, executed, patterns)
        checked = sum(1 for c in reference.cells if c.cell_type == "code")
        print(f"compare_notebooks: {path.name}: {'ok' if not differences else 'DIFFERS'} ({checked} code cells)")
        for d in differences:
            print(f"  {path}::{d}")
        failed += bool(differences)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
