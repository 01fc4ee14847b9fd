"""The fedlib side of a Flower run: one process's federation, model and protocol.

Every Flower process that needs data (each simulated client's Ray worker; the driver for the
server's initial model) rebuilds the same federation from the :class:`~fedlib.experiment.RunSpec`
— partition, splits and subsets are seeded, so every process holds identical clients — and
keeps it for the process's lifetime (one build per worker, not one per message). A client
then reads only its own rows.

The model, protocol and Context are :func:`fedlib.experiment.build_context`'s, the very ones
:func:`fedlib.experiment.run` trains, so a client's local training is fedlib's.
"""
from __future__ import annotations

from ..experiment import RunSpec, build_context
from ..methods import Context
from ..validation import fail

__all__ = ["check_spec", "spec_context", "initial_state"]

_CONTEXTS: dict = {}  # spec key -> Context, per process


def check_spec(spec) -> RunSpec:
    """``spec`` if it is a valid RunSpec (ValueError otherwise, naming the bad field)."""
    if not isinstance(spec, RunSpec):
        fail("spec", "a fedlib.experiment.RunSpec", spec)
    spec.validate()
    return spec


def spec_context(spec: RunSpec) -> Context:
    """The run's :class:`fedlib.methods.Context` (federation with K clients, model, FLConfig,
    seed, counts_train (K, C)), built once per process and cached by ``spec.key()``."""
    key = check_spec(spec).key()
    if key not in _CONTEXTS:
        _CONTEXTS[key] = build_context(spec, "cpu")[0]
    return _CONTEXTS[key]


def initial_state(spec: RunSpec) -> dict:
    """The seeded initial model (``name -> Tensor``) every group starts from, as fedlib's
    ``Context.init_state()``."""
    return spec_context(spec).init_state()
