"""The fedlib side of a Flower run: one process's federation, model and protocol.

Every Flower process that needs data (each simulated client's Ray worker; the driver for the
server's initial model) rebuilds the same federation from the :class:`~fedlib.experiment.RunSpec`
— partition, splits and subsets are seeded, so every process holds identical clients — and
keeps it for the process's lifetime (one build per worker, not one per message). A client
then reads only its own rows.

The model, protocol and Context are built exactly as :func:`fedlib.experiment.run` builds
them (``torch.manual_seed(seed)``, the dataset's architecture, ``FLConfig`` from the spec's
effective settings), so a client's local training is fedlib's.
"""
from __future__ import annotations

import torch

from ..experiment import RunSpec, build_federation
from ..methods import Context, FLConfig
from ..models import ARCH_FOR_DATASET, build_model
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
        fed, counts, ds = build_federation(spec, "cpu")
        torch.manual_seed(int(spec.seed))
        model = build_model(spec.arch or ARCH_FOR_DATASET[spec.dataset], ds.n_classes, ds.input_shape,
                            vocab_size=getattr(ds, "vocab_size", None) if ds.modality == "text" else None)
        _, fl, _ = spec.effective()
        _CONTEXTS[key] = Context(fed=fed, model=model.to(fed.device), cfg=FLConfig.from_dict(fl),
                                 seed=int(spec.seed), counts_train=counts)
    return _CONTEXTS[key]


def initial_state(spec: RunSpec) -> dict:
    """The seeded initial model (``name -> Tensor``) every group starts from, as fedlib's
    ``Context.init_state()``."""
    return spec_context(spec).init_state()
