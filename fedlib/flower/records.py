"""Model states ↔ Flower records (lossless: the float32 tensors travel as their bytes).

A fedlib *state* is ``name -> Tensor`` (one model, unstacked); Flower carries it as an
:class:`flwr.app.ArrayRecord` with the same names in the same order.
"""
from __future__ import annotations

import numpy as np
import torch

from ..engine.host import to_host
from ._compat import require_flwr

__all__ = ["state_to_record", "record_to_state", "counts_to_record", "record_to_counts"]


def state_to_record(state: dict):
    """One model's state (``name -> Tensor``, any device) as an ArrayRecord (CPU copies)."""
    app = require_flwr("flwr.app")
    if not isinstance(state, dict) or not state:
        raise ValueError(f"state must be a non-empty dict name -> Tensor, got {type(state).__name__}")
    return app.ArrayRecord({k: app.Array(np.ascontiguousarray(to_host(v))) for k, v in state.items()})


def record_to_state(record, device="cpu") -> dict:
    """An ArrayRecord back to ``name -> Tensor`` on ``device`` (names and order kept)."""
    return {k: torch.from_numpy(np.array(a.numpy(), copy=True)).to(device) for k, a in record.items()}


def counts_to_record(counts):
    """A label histogram, shape (C,), as an ArrayRecord ``{"counts": float64 (C,)}``."""
    app = require_flwr("flwr.app")
    return app.ArrayRecord({"counts": app.Array(np.asarray(counts, dtype=np.float64))})


def record_to_counts(record) -> np.ndarray:
    """The histogram (C,), float64, from :func:`counts_to_record`'s record."""
    return np.asarray(record["counts"].numpy(), dtype=np.float64)
