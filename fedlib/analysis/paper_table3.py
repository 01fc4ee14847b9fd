"""Clust-PSI-PFL's Table III, FMNIST column (K = 100, mean over five seeds), as published.

Transcribed from the paper (``../shared/seeds``, Table III: "Global test accuracy … for K = 100");
settings are (protocol, level). Used to print the paper's value beside ours (notebook 06,
``benchmarks/table3_like_for_like.py``, ``benchmarks/fmnist_trends.py``).
"""
from __future__ import annotations

__all__ = ["SETTINGS", "FMNIST_K100", "paper_value"]

SETTINGS = (("dirichlet", 50.0), ("dirichlet", 0.7), ("dirichlet", 0.3), ("dirichlet", 0.2),
            ("dirichlet", 0.09), ("dirichlet", 0.05), ("similarity", 1.0), ("similarity", 0.03),
            ("similarity", 0.0))

_ROWS = {  # one value per SETTINGS entry, in that order
    "fedavg": (0.86, 0.83, 0.82, 0.81, 0.73, 0.68, 0.86, 0.74, 0.14),
    "fedprox": (0.86, 0.83, 0.82, 0.80, 0.71, 0.64, 0.86, 0.73, 0.15),
    "fedavgm": (0.84, 0.82, 0.80, 0.77, 0.72, 0.57, 0.84, 0.74, 0.11),
    "fedadagrad": (0.84, 0.82, 0.80, 0.78, 0.72, 0.67, 0.84, 0.74, 0.12),
    "fedyogi": (0.84, 0.81, 0.80, 0.77, 0.66, 0.66, 0.84, 0.74, 0.11),
    "fedadam": (0.82, 0.79, 0.77, 0.76, 0.68, 0.65, 0.82, 0.68, 0.14),
    "poc": (0.77, 0.63, 0.44, 0.38, 0.26, 0.54, 0.14, 0.10, 0.10),
    "haccs": (0.77, 0.79, 0.74, 0.73, 0.61, 0.61, 0.43, 0.16, 0.16),
    "fedcls": (0.77, 0.79, 0.74, 0.72, 0.58, 0.53, 0.42, 0.10, 0.10),
    "cfl": (0.81, 0.79, 0.74, 0.77, 0.62, 0.64, 0.81, 0.61, 0.59),
    "fedsoft": (0.81, 0.74, 0.71, 0.71, 0.46, 0.46, 0.81, 0.33, 0.28),
    "clust_psi_pfl": (0.86, 0.83, 0.80, 0.83, 0.84, 0.83, 0.86, 0.98, 0.98),
}

FMNIST_K100 = {m: dict(zip(SETTINGS, v)) for m, v in _ROWS.items()}
FMNIST_K100["cl"] = {s: 0.90 for s in SETTINGS}  # one CL value for the data set
"""method → {(protocol, level): the paper's mean global accuracy}."""


def paper_value(method: str, protocol: str, level: float) -> float | None:
    """The paper's FMNIST K = 100 value, or None where the table has none."""
    return FMNIST_K100.get(method, {}).get((protocol, float(level)))
