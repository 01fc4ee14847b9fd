"""The one validation helper: every entry point checks its inputs with these functions, before
any work, and every message has one form — the parameter, what is allowed, the value given:

    ValueError: epochs must be an integer ≥ 1 (or None for the default), got 0

Integers may be Python or numpy integers (seeds drawn by numpy are common); booleans are never
numbers; numbers must be finite unless said otherwise. Each function returns the value as a
plain Python type, so callers can store it.
"""
from __future__ import annotations

import math
import os
from numbers import Integral, Real
from pathlib import Path

import numpy as np

__all__ = ["check_int", "check_number", "check_choice", "check_seed", "check_folder", "plain", "fail"]


def fail(name: str, allowed: str, value) -> None:
    """Raise the workbook's ValueError: ``{name} must be {allowed}, got {value!r}``."""
    raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, (Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def _range_text(low, high, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '≥'} {low}"
    if high is not None:
        return f"{'<' if high_open else '≤'} {high}"
    return ""


def check_int(value, name: str, minimum: int | None = None, maximum: int | None = None, *,
              optional: bool = False) -> int | None:
    """An integer in [minimum, maximum] (either bound may be None); None passes if ``optional``."""
    if value is None and optional:
        return None
    ok = _is_int(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        rng = _range_text(minimum, maximum, False, False)
        fail(name, f"an integer{' ' + rng if rng else ''}{' (or None for the default)' if optional else ''}",
             value)
    return int(value)


def check_number(value, name: str, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, optional: bool = False) -> float | None:
    """A finite real number between ``low`` and ``high`` (open or closed ends); None passes if
    ``optional``."""
    if value is None and optional:
        return None
    ok = (isinstance(value, (Real, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
          and math.isfinite(float(value)))
    if ok:
        v = float(value)
        ok = ((low is None or (v > low if low_open else v >= low))
              and (high is None or (v < high if high_open else v <= high)))
    if not ok:
        rng = _range_text(low, high, low_open, high_open)
        fail(name, f"a finite number{' ' + rng if rng else ''}{' (or None for the default)' if optional else ''}",
             value)
    return float(value)


def check_choice(value, name: str, choices) -> object:
    """One of ``choices``; a bool only where a choice is one (1 == True would pass ``in``)."""
    choices = tuple(choices)
    boolean = isinstance(value, (bool, np.bool_))
    if isinstance(value, (list, dict, set)) or not any(
            value == c and boolean == isinstance(c, (bool, np.bool_)) for c in choices):
        fail(name, f"one of {list(choices)}", value)
    return value


#: The largest seed torch, numpy and scikit-learn's ``random_state`` all take (2**70 fails mid-run).
MAX_SEED = 2**32 - 1


def check_seed(value, name: str = "seed") -> int:
    """An integer in [0, :data:`MAX_SEED`] (Python or numpy)."""
    return check_int(value, name, 0, MAX_SEED)


def plain(value):
    """``value`` with numpy scalars as Python ones, nested too (a float32 as it prints: 0.01)."""
    if isinstance(value, np.floating) and np.finfo(value).bits < 64:
        return float(str(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def check_folder(value, name: str, *, writable: bool = True) -> Path:
    """A folder path (existing or not; nothing is created), not "", a file or under one, and
    (``writable``) whose nearest existing folder this process can write."""
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        fail(name, "a folder path (not empty: '.' names the current folder)", value)
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        fail(name, "a folder, not a file: choose another path", str(value))
    parent = path
    while not parent.exists() and parent != parent.parent:  # Path.exists is False under a file
        parent = parent.parent
    if not parent.is_dir():
        fail(name, f"a folder path not under a file ({parent} is a file): choose another path", str(value))
    if writable and not os.access(parent, os.W_OK | os.X_OK):
        fail(name, f"a folder this user can write ({parent} is not writable): choose another path", str(value))
    return path
