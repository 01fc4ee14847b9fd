"""Jupyter server settings of ``make lab`` (found through ``JUPYTER_CONFIG_PATH``).

Opening a committed notebook does not mark it modified, and saving it writes it unchanged:

- The committed notebooks are in the form ``scripts/clean_notebooks.py`` writes, which is the
  form this server writes: the kernel's whole ``language_info`` (JupyterLab copies it into a
  notebook when its kernel starts, and marks the notebook modified where it differs), a cell's
  consecutive stream outputs as one (as JupyterLab holds them). This ``pre_save_hook``
  (``clean_notebooks.pre_save_hook``) brings every notebook the server saves to that form again,
  keeping the Python version of the file it replaces (a 3.11.x kernel of another patch level
  does not rewrite it).
- Nothing is written unless the user saves: JupyterLab's defaults for ``make lab`` are in
  ``lab-settings/overrides.json`` (``LabApp.app_settings_dir``; a user's own settings still
  win): autosave off, so a notebook is never written mid-run with cells still queued, and the
  "get notified about official Jupyter news?" prompt not asked (no news fetched, no update check).

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
c.LabApp.app_settings_dir = str(Path(__file__).resolve().parent / "lab-settings")
c.LabApp.news_url = None  # the news feed is not fetched (no prompt asks about it)
