"""Jupyter server settings of ``make lab`` (found through ``JUPYTER_CONFIG_PATH``).

JupyterLab copies the kernel's ``language_info`` into every notebook it opens, Python patch
level included, so saving a notebook with a 3.11 kernel other than the one that executed it
would change a tracked file. The committed notebooks carry no ``language_info.version``
(``scripts/clean_notebooks.py``), and this hook strips it again on every save.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "clean_notebooks", Path(__file__).resolve().parent.parent / "clean_notebooks.py")
_clean_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_clean_notebooks)

c = get_config()  # noqa: F821 - provided by the Jupyter config loader
c.ContentsManager.pre_save_hook = _clean_notebooks.pre_save_hook
