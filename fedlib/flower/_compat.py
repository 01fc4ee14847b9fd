"""Import Flower lazily, with one clear error when it is missing.

Only :mod:`fedlib.flower` needs Flower (``flwr[simulation]``, which brings Ray); the rest of
fedlib never imports it.
"""
from __future__ import annotations

import importlib

MISSING = "fedlib.flower needs Flower: pip install -e .[flower]"


def require_flwr(module: str = "flwr"):
    """Import and return ``module`` (a Flower module, e.g. ``'flwr.serverapp'``); raise
    ImportError with :data:`MISSING` when Flower is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{MISSING} ({err})") from err
