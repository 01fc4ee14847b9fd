"""The one reader of a notebook's parameters file (``params/<profile>/<notebook>.yaml``).

A notebook's parameters are the names its cell tagged ``parameters`` assigns (papermill's
defaults, equal to ``params/smoke``). A key of a params file that is not one of them would be
injected by papermill and never read (papermill only warns), so a typo (``methds:``) would run
the defaults with valid-looking records: here it is an error naming the key and the known ones.
``benchmarks/paper_grid.py``, the report and ``make workbook`` (``python -m fedlib.notebook_params
FILE...`` before papermill) read params files through :func:`load`. Under papermill itself
(``-p name value`` or ``-f file``), :func:`check_injected` refuses the unknown name when the
notebook first imports fedlib, in the kernel (docs/running.md).
"""
from __future__ import annotations

import ast
import json
import sys
from functools import lru_cache
from pathlib import Path

from .paths import base_dir
from .validation import fail

__all__ = ["notebook_parameters", "check_keys", "check_injected", "load"]


def _notebooks_dir() -> Path:
    return base_dir() / "notebooks"


@lru_cache(maxsize=None)
def notebook_parameters(notebook: str) -> tuple[str, ...]:
    """The names the ``parameters`` cell of ``notebooks/<notebook>.ipynb`` assigns, in order."""
    path = _notebooks_dir() / f"{notebook}.ipynb"
    if not path.is_file():
        known = sorted(p.stem for p in _notebooks_dir().glob("[0-9][0-9]_*.ipynb"))
        fail("notebook", f"one of {known} (a notebook of notebooks/)", notebook)
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        fail("notebook", "a notebook with exactly one cell tagged 'parameters'", notebook)
    return _assigned("".join(cells[0]["source"]))


def _assigned(source: str) -> tuple[str, ...]:
    """The names a cell's top-level statements assign, in order."""
    names: list[str] = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and t.id not in names:
                names.append(t.id)
    return tuple(names)


def check_injected(cells=None) -> None:
    """Refuse a name papermill's injected cell (first line its bare ``# Parameters``, after another
    cell) sets that no earlier cell (``parameters``) assigns: papermill only warns. ``cells``: the
    sources run so far (default: the kernel's history); fedlib's import calls this in a kernel."""
    if cells is None:
        ip = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
        cells = [] if ip is None else list(ip.history_manager.input_hist_raw)
    for i, source in enumerate(cells):
        if source.split("\n", 1)[0].strip() != "# Parameters" or not any(c.strip() for c in cells[:i]):
            continue  # papermill's cell follows the parameters cell (whose comment says more than this)
        try:
            known = [n for before in cells[:i] for n in _assigned(before)]
            injected = _assigned(source)
        except SyntaxError:  # magics and the like: not papermill's cell
            continue
        for name in injected:
            if name not in known:
                fail("papermill parameter (-p/-f)", f"a parameter of this notebook's parameters cell "
                     f"(one of {', '.join(dict.fromkeys(known))}): check its spelling", name)


def check_keys(params, notebook: str, where: str = "params") -> dict:
    """``params`` (a parsed params file) if it is a dict whose every key is a parameter of
    ``notebook``; else ValueError naming the unknown key and the known ones."""
    if not isinstance(params, dict):
        fail(where, f"a mapping of notebook {notebook}'s parameters", params)
    known = notebook_parameters(notebook)
    for key in params:
        if key not in known:
            fail(f"{where} key", f"a parameter of notebook {notebook} (one of {', '.join(known)})", key)
    return params


def load(path, notebook: str | None = None) -> dict:
    """The params file ``path`` of ``notebook`` (default: the file's name, e.g. ``09_fedprism``),
    every top-level key checked by :func:`check_keys`."""
    import yaml

    path = Path(path)
    if not path.is_file():
        fail("params", "an existing params file (e.g. params/paper/09_fedprism.yaml)", str(path))
    return check_keys(yaml.safe_load(path.read_text()), notebook or path.stem, f"params file {path}")


def main(argv=None) -> int:
    """``python -m fedlib.notebook_params FILE...``: check each file's keys; exit 1 naming the first
    bad one."""
    for f in (sys.argv[1:] if argv is None else argv):
        try:
            load(f)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
