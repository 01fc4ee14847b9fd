"""Input checks shared by the training and evaluation entry points."""
from __future__ import annotations

import torch
from torch import nn

from ..models import float_state
from ..validation import check_int as _check_int


State = dict[str, torch.Tensor]


def check_int(value, name: str, minimum: int) -> None:
    """Raise ValueError unless ``value`` is an integer ≥ ``minimum`` (:mod:`fedlib.validation`)."""
    _check_int(value, name, minimum)


def check_state(params: State, template: nn.Module, m: int, device: torch.device) -> State:
    """``params`` must hold exactly the model's float state, stacked M times; moved to ``device``."""
    expected = {n: tuple(t.shape) for n, t in float_state(template).items()}
    if set(params) != set(expected):
        missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
        raise ValueError(f"params does not match the model: missing {missing}, unexpected {extra}")
    for n, shape in expected.items():
        if tuple(params[n].shape) != (m, *shape):
            raise ValueError(f"params[{n!r}] has shape {tuple(params[n].shape)}, expected {(m, *shape)} "
                             f"(one row per selected client)")
    return {n: params[n].detach().to(device, torch.float32) for n in expected}
