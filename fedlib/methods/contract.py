"""The method contract: what a method module declares about itself, in one place.

Every method module ends with ``INFO = MethodInfo(...)`` (a module serving several methods,
the FedOpt family, declares ``INFO`` as a tuple, one entry per method, and ``METHODS``: name ->
the object with its ``Hyper`` and ``run``). :mod:`fedlib.methods` builds the registry from
them; validation (:meth:`fedlib.experiment.RunSpec.validate`), tuning, the cross-paper study
and the report read the entries' fields, never a module attribute found by ``getattr``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

__all__ = ["MethodInfo"]


@dataclass(frozen=True)
class MethodInfo:
    """One method's registry entry.

    name : the method's key (``RunSpec.method``, record specs), e.g. ``'fedavg'``.
    display_name : its name in tables and legends, e.g. ``'FedAvg'``.
    hyper : its frozen ``Hyper`` dataclass (the paper's defaults).
    run : ``run(ctx, hp) -> Outcome``.
    grid : Table II's search grid, ``name -> values`` (read by :func:`fedlib.tuning.tune`).
    streams_average : all its training goes through ``federated_averaging`` or
        ``global_model_rounds``, so ``FLConfig.stream_average`` applies; other methods refuse it.
    resumable : every round it trains goes through :func:`fedlib.methods.base.run_rounds` with
        its state explicit, so an interrupted run resumes at its last checkpoint
        (:mod:`fedlib.checkpoint`); other methods' runs start again at round 1.
    protocols : the partitions it is defined on (None: every one); the Oracle needs planted
        clusters.
    needs_validation : ``needs_validation(hp) -> bool``, whether it selects or weights on the
        clients' validation split (``val_fraction = 0`` is then refused); None: never.
    check_protocol : ``check_protocol(hp, cfg)``, a constraint between its hyperparameters
        and the training protocol (:class:`fedlib.methods.FLConfig`), raising ValueError.
    check_arch : ``check_arch(arch)``, a constraint on the model, raising ValueError.
    recorded_defaults : hyperparameter -> the value a committed record's spec that lacks the key
        was produced with, for each hyperparameter whose default changed (or that was added)
        after records were committed: a spec leaves such a key out exactly when it runs this
        value and states it otherwise (:meth:`fedlib.experiment.RunSpec.to_dict`,
        :func:`fedlib.records.with_current_defaults`), and a record's spec without it reads as
        this value (:func:`fedlib.records.with_recorded_defaults`), so an old record keeps its
        meaning (and its file name) when the default moves.
    """

    name: str
    display_name: str
    hyper: type
    run: Callable[..., Any]
    grid: Mapping[str, Sequence] = field(default_factory=dict, hash=False)
    streams_average: bool = False
    resumable: bool = False
    protocols: tuple[str, ...] | None = None
    needs_validation: Callable[[Any], bool] | None = None
    check_protocol: Callable[[Any, Any], None] | None = None
    check_arch: Callable[[str], None] | None = None
    recorded_defaults: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self):
        for name in ("name", "display_name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"MethodInfo.{name} must be a non-empty str, got {value!r}")
        if not (isinstance(self.hyper, type) and dataclasses.is_dataclass(self.hyper)):
            raise ValueError(f"MethodInfo.hyper of {self.name!r} must be a dataclass type, got {self.hyper!r}")
        if not callable(self.run):
            raise ValueError(f"MethodInfo.run of {self.name!r} must be callable, got {self.run!r}")
        if not isinstance(self.grid, Mapping):
            raise ValueError(f"MethodInfo.grid of {self.name!r} must be a dict name -> values, got {self.grid!r}")
        for name in ("streams_average", "resumable"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"MethodInfo.{name} of {self.name!r} must be a bool, got {getattr(self, name)!r}")
        if self.protocols is not None and (not isinstance(self.protocols, tuple)
                                           or not all(isinstance(p, str) for p in self.protocols)):
            raise ValueError(f"MethodInfo.protocols of {self.name!r} must be None or a tuple of protocol "
                             f"names, got {self.protocols!r}")
        known = {f.name for f in dataclasses.fields(self.hyper)}
        if not isinstance(self.recorded_defaults, Mapping) or set(self.recorded_defaults) - known:
            raise ValueError(f"MethodInfo.recorded_defaults of {self.name!r} must be a dict of its hyperparameters "
                             f"({sorted(known)}) -> value, got {self.recorded_defaults!r}")
        for name in ("needs_validation", "check_protocol", "check_arch"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise ValueError(f"MethodInfo.{name} of {self.name!r} must be None or callable, got {hook!r}")

    def needs_val(self, hp) -> bool:
        """Whether this run (hyperparameters ``hp``) reads the clients' validation split."""
        return self.needs_validation is not None and bool(self.needs_validation(hp))
