#!/usr/bin/env python
"""Strip volatile metadata from executed notebooks so committed diffs stay quiet.

Removes papermill's records (``metadata.papermill`` of the notebook and of each cell),
per-cell execution timings (``metadata.execution``), widget state, papermill's
``injected-parameters`` cells (the committed notebooks run with their own defaults) and
``run_grid``'s progress lines from stderr outputs (``make refresh-notebooks`` prints them for
papermill's log; they carry timings, so every refresh would change them); renumbers execution
counts 1, 2, ... in cell order; merges a cell's consecutive stream outputs of one name (stdout or
stderr) into one, as JupyterLab does whenever it opens or runs a notebook (papermill writes one
output per message the kernel sent, so how a cell's printing is split depends on timing; nbval
compares the streams merged); keeps the other outputs, tags and cell ids; sets the kernelspec to
the one JupyterLab writes for the venv's ``python3`` kernel and keeps the kernel's
``language_info`` whole, Python version included (the one the kernel that ran it reported; where
a notebook has none, the ``python3`` kernel's: :func:`kernel_python_version`).

The file is written as Jupyter's server writes it (``nbformat.write(nb, f,
version=NO_CONVERT)``: one-space indent, sorted keys, non-ASCII kept, a final newline). So
opening a committed notebook in ``make lab`` does not mark it modified: JupyterLab copies its
kernel's ``language_info`` into the notebook when the kernel starts, and marks it modified only
where that differs from the file's. Saving it leaves it unchanged: the server of ``make lab``
brings every notebook it saves to the same form (:func:`pre_save_hook`, loaded by
``scripts/jupyter/jupyter_server_config.py``: the streams merged by :func:`canonical_form`, the
function both use, and the Python version the file on disk already holds kept, so a kernel of
another 3.11.x patch level does not rewrite it).
Idempotent: running it twice changes nothing the second time.

Usage
-----
    python scripts/clean_notebooks.py                 # every notebooks/*.ipynb
    python scripts/clean_notebooks.py a.ipynb b.ipynb # these
    python scripts/clean_notebooks.py --check         # exit 1 if any notebook would change
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
VOLATILE_NB_KEYS = ("papermill", "widgets")
VOLATILE_CELL_KEYS = ("papermill", "execution", "ExecuteTime", "collapsed", "scrolled")
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
#: A line ``fedlib.experiment.run_grid`` prints in its ``progress='lines'`` mode
#: (``run_grid: 5 runs, ...``, ``run_grid [3/5] <run>: ...``, ``run_grid: waiting for ...``).
PROGRESS_LINE = re.compile(r"^run_grid(: | \[\d+/\d+\] )")


@lru_cache(maxsize=1)
def kernel_python_version() -> str:
    """The Python version (``3.11.7``) the ``python3`` kernel reports in ``language_info``:
    ipykernel's ``sys.version.split()[0]`` of the interpreter its kernelspec starts (this
    script's own where the kernelspec cannot be read)."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        python = KernelSpecManager().get_kernel_spec("python3").argv[0]
        python = sys.executable if python in ("python", "python3") else python
        return subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], check=True,
                              capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception:  # no jupyter_client, no kernelspec: this interpreter is the kernel's
        return sys.version.split()[0]


def set_language_version(nb: dict, version: str | None) -> dict:
    """Set ``metadata.language_info.version`` of ``nb`` (dict or NotebookNode, modified in
    place) to ``version`` where it has a ``language_info`` (None: leave it as it is)."""
    info = nb.get("metadata", {}).get("language_info")
    if isinstance(info, dict) and version:
        info["version"] = version
    return nb


def is_progress_output(output: dict) -> bool:
    """True for a stderr stream output holding only ``run_grid`` progress lines (and blank ones)."""
    if output.get("output_type") != "stream" or output.get("name") != "stderr":
        return False
    text = output.get("text", "")
    lines = ("".join(text) if isinstance(text, list) else text).splitlines()
    return all(PROGRESS_LINE.match(line) or not line.strip() for line in lines)


def _text(output: dict) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else text


def merge_streams(outputs: list) -> list:
    """A cell's outputs with every run of consecutive stream outputs of one name (``stdout``,
    ``stderr``) merged into the first of them, its text the run's texts joined: what
    JupyterLab's output area keeps (and saves) of them. Other outputs, and streams of another
    name between two, separate runs. (JupyterLab also applies ``\\r`` and ``\\b`` to the
    text it shows; no committed output holds either.)"""
    merged: list = []
    for out in outputs:
        last = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and last is not None
                and last.get("output_type") == "stream" and last.get("name") == out.get("name")):
            last["text"] = _text(last) + _text(out)
        else:
            merged.append(out)
    return merged


def canonical_form(nb: dict) -> dict:
    """The form in which a notebook is committed and saved (dict or NotebookNode, modified in
    place): each cell's consecutive same-name streams merged (:func:`merge_streams`). Shared
    by :func:`clean` (``make refresh-notebooks``) and :func:`pre_save_hook` (``make lab``)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and cell.get("outputs"):
            cell["outputs"] = merge_streams(cell["outputs"])
    return nb


def _version_on_disk(path: str | None, contents_manager) -> str | None:
    """``language_info.version`` of the notebook file the server is about to overwrite (None
    where there is none, or it cannot be read)."""
    try:
        os_path = contents_manager._get_os_path(path)
        with open(os_path, encoding="utf-8") as f:
            version = json.load(f)["metadata"]["language_info"]["version"]
        return version if isinstance(version, str) else None
    except Exception:
        return None


def pre_save_hook(model: dict, path: str | None = None, contents_manager=None, **kwargs) -> None:
    """Jupyter server's ``ContentsManager.pre_save_hook``: bring a notebook to its committed
    form (:func:`canonical_form`) before it is written, keeping the Python version
    (``language_info.version``) of the file it replaces. JupyterLab copies the kernel's
    ``language_info``, patch level included, into every notebook it opens: on a machine whose
    3.11.x differs from the committed one, saving would otherwise rewrite that line. It keeps a
    cell's consecutive stream outputs as one; a notebook papermill wrote may hold them split."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        canonical_form(model["content"])
        if contents_manager is not None and path:
            set_language_version(model["content"], _version_on_disk(path, contents_manager))


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
        cell.outputs = [o for o in cell.get("outputs", []) if not is_progress_output(o)]
        if cell.get("execution_count") is not None or cell.get("outputs"):
            count += 1
            cell.execution_count = count
            for out in cell.outputs:
                if "execution_count" in out:
                    out["execution_count"] = count
        else:
            cell.execution_count = None
    if not nb.metadata.get("language_info", {}).get("version"):
        set_language_version(nb, kernel_python_version())
    return canonical_form(nb)


def process(path: Path, check: bool) -> bool:
    """Clean one notebook file; return True if it changed (or would change, with check)."""
    before = path.read_text(encoding="utf-8")
    nb = clean(nbformat.reads(before, as_version=4))
    after = nbformat.writes(nb, version=nbformat.NO_CONVERT)  # as nbformat.write, which the server uses
    after += "" if after.endswith("\n") else "\n"
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
