"""Where the workbook reads and writes: data, figures, run records.

Each folder is, in order: the function's argument, else its environment variable
(``FEDLIB_DATA``, ``FEDLIB_FIGURES``, ``FEDLIB_RESULTS``), else ``<base>/data``,
``<base>/figures``, ``<base>/results``, where ``<base>`` is

* the project checkout, when fedlib is imported from one (``git clone`` + ``pip install -e .``):
  papermill runs kernels in the shell's directory and nbval in the notebook's, and both must
  see the same folders;
* otherwise (``pip install .`` into site-packages) the current working directory: nothing is
  ever written into the installed package.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_PARENT = Path(__file__).resolve().parent.parent

ENV_DATA = "FEDLIB_DATA"
ENV_FIGURES = "FEDLIB_FIGURES"
ENV_RESULTS = "FEDLIB_RESULTS"


def _is_checkout(path: Path) -> bool:
    """True when ``path`` is the fedlib project's source tree (not site-packages)."""
    return (path / "pyproject.toml").is_file() and (path / "notebooks").is_dir() \
        and (path / "fedlib" / "__init__.py").is_file()


def checkout_root() -> Path | None:
    """The project checkout fedlib is imported from, or None for an installed package."""
    return PACKAGE_PARENT if _is_checkout(PACKAGE_PARENT) else None


def base_dir() -> Path:
    """The checkout when fedlib runs from one, else the current working directory."""
    return checkout_root() or Path.cwd()


ROOT = PACKAGE_PARENT
"""The folder holding the fedlib package (the project root in a checkout; kept for
callers that read the checkout's own files such as params/ and notebooks/)."""


def _resolve(path, env: str, name: str) -> Path:
    chosen = path or os.environ.get(env) or base_dir() / name
    return Path(chosen).expanduser().resolve()


def data_root(path: str | os.PathLike | None = None) -> Path:
    """The data folder (not created here): argument, ``$FEDLIB_DATA``, or ``<base>/data``."""
    return _resolve(path, ENV_DATA, "data")


def figures_dir(path: str | os.PathLike | None = None) -> Path:
    """Where figures and their CSVs go (created): argument, ``$FEDLIB_FIGURES``, or ``<base>/figures``."""
    d = _resolve(path, ENV_FIGURES, "figures")
    d.mkdir(parents=True, exist_ok=True)
    return d


def results_dir(path: str | os.PathLike | None = None) -> Path:
    """Where run records go (created): argument, ``$FEDLIB_RESULTS``, or ``<base>/results``."""
    d = _resolve(path, ENV_RESULTS, "results")
    d.mkdir(parents=True, exist_ok=True)
    return d


def params_file(name: str, profile: str = "smoke") -> Path:
    """params/<profile>/<name>.yaml of the checkout."""
    return ROOT / "params" / profile / f"{name}.yaml"
