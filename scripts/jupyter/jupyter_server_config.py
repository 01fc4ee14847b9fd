"""Jupyter server settings of ``make lab`` (found through ``JUPYTER_CONFIG_PATH``).

JupyterLab copies the kernel's ``language_info`` into every notebook it opens, Python patch
level included, and keeps a cell's consecutive stream outputs as one, so saving a notebook
would change a tracked file. The committed notebooks are in the form
``scripts/clean_notebooks.py`` writes (no ``language_info.version``, consecutive streams
merged), and this hook brings every notebook the server saves to that form again
(``clean_notebooks.canonical_form``).

jupyter_server warns "Overriding existing pre_save_hook (pre_save_hook) with a new one
(pre_save_hook)" for a hook set here although nothing overrides it: traitlets validates a value
loaded from the config a second time (``hold_trait_notifications`` cross-validates it), and the
second time the validator finds the hook already set, to itself. It did so once per contents
manager: the server's, and the one jupytext's server extension builds in its place. That
warning alone is silenced; one naming another hook that replaces this one is still shown.
"""
import importlib.util
import re
import warnings
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "clean_notebooks", Path(__file__).resolve().parent.parent / "clean_notebooks.py")
_clean_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_clean_notebooks)

_name = _clean_notebooks.pre_save_hook.__name__
warnings.filterwarnings(
    "ignore", category=UserWarning,
    message=re.escape(f"Overriding existing pre_save_hook ({_name}) with a new one ({_name})."))

c = get_config()  # noqa: F821 - provided by the Jupyter config loader
c.ContentsManager.pre_save_hook = _clean_notebooks.pre_save_hook
