"""Method registry, built from the method modules' own declarations.

A method is one module with NAME, Hyper, run(ctx, hp) -> Outcome and ``INFO``, its entry
(:class:`fedlib.methods.contract.MethodInfo`: display name, hooks, properties). Adding one
is a new module in this package: it is found there (after the modules :data:`MODULES` orders,
until its name is put in that list at the row it should take), and everything here is derived
from the entries. What a study says of a method (which methods' records hold a grouping it
scores, which have a second reading of a paper's cell) is the study's, in the workbook."""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import MappingProxyType, ModuleType

from .base import Context, FLConfig, Outcome, federated_averaging, sample_clients
from .contract import MethodInfo

MODULES = (
    # Clust-PSI-PFL's Table III rows (and Local-only), in the paper's order
    "cl", "local", "fedavg", "fedprox", "fedopt", "poc", "haccs", "fedcls", "cfl", "fedsoft", "clust_psi_pfl",
    # the related seed papers' systems
    "psi_pfl", "cafa", "fedprism", "ifca", "fedclust", "fedamp", "pfedlia", "oracle", "fedfomo", "fedproto", "fesem",
)
"""The method modules, in the order of the tables' rows and the plots' colours."""
NOT_METHODS = ("base", "contract")
"""The modules of this package that are not methods (every other one declares ``INFO``)."""


def method_modules(listed, found) -> tuple[str, ...]:
    """The method modules in registry order: ``listed`` (:data:`MODULES`), then every other
    module ``found`` in the package, by name (a new method's rows come last until it is listed)."""
    missing = sorted(set(listed) - set(found))
    if missing:
        raise ValueError(f"MODULES names {missing}, not modules of fedlib.methods")
    return tuple(listed) + tuple(sorted(set(found) - set(listed)))


FOUND = tuple(m.name for m in pkgutil.iter_modules(__path__)
              if not m.ispkg and m.name not in NOT_METHODS and not m.name.startswith("_"))
"""Every method module of this package."""


def build_registry(modules) -> dict[str, tuple[MethodInfo, object]]:
    """name -> (entry, the object with its ``Hyper`` and ``run``) of every method that
    ``modules`` (module objects, in order) declare: a module's ``INFO`` is one
    :class:`MethodInfo` (the module implements it) or a tuple of them (a module serving
    several methods, each implemented by ``module.METHODS[name]``)."""
    registry: dict[str, tuple[MethodInfo, object]] = {}
    for module in modules:
        if not isinstance(module, ModuleType):
            raise TypeError(f"expected a method module, got {module!r}")
        declared = module.INFO
        several = isinstance(declared, tuple)
        for info in (declared if several else (declared,)):
            if not isinstance(info, MethodInfo):
                raise TypeError(f"{module.__name__}.INFO must be a MethodInfo or a tuple of them, got {info!r}")
            if info.name in registry:
                raise ValueError(f"method {info.name!r} is declared twice (again in {module.__name__})")
            registry[info.name] = (info, module.METHODS[info.name] if several else module)
    shown = [info.display_name for info, _ in registry.values()]
    twice = sorted({d for d in shown if shown.count(d) > 1})
    if twice:
        raise ValueError(f"display names must be unique, {twice} is used by several methods")
    return registry


_REGISTRY = build_registry(importlib.import_module(f".{m}", __name__) for m in method_modules(MODULES, FOUND))

METHODS = tuple(_REGISTRY)
"""Every method's name, in the modules' order (:func:`method_modules`)."""
REGISTRY = MappingProxyType({name: info for name, (info, _) in _REGISTRY.items()})
"""name -> :class:`MethodInfo`, the registry (read-only)."""
DISPLAY_NAMES = {name: info.display_name for name, info in REGISTRY.items()}
"""name -> the name in tables and legends (derived from the entries; the order sets rows and colours)."""
STREAMING_METHODS = tuple(m for m in METHODS if REGISTRY[m].streams_average)
"""The methods that accept ``FLConfig.stream_average`` (``streams_average``)."""


def method_info(name: str) -> MethodInfo:
    """The registry entry of method ``name`` (its display name, hooks and properties)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    return REGISTRY[name]


def display_name(method: str) -> str:
    """The name of ``method`` in tables and legends; a name the registry does not know is
    shown as it is (a variant label, an old record's method)."""
    info = REGISTRY.get(method) if isinstance(method, str) else None
    return info.display_name if info is not None else method


def get_method(name: str):
    """The object implementing method ``name``: its module, or for a module serving several
    methods (the FedOpt family) its ``METHODS[name]`` entry; either has Hyper and run."""
    method_info(name)
    return _REGISTRY[name][1]


def make_hyper(name: str, values: dict | None = None):
    """The method's Hyper dataclass filled with ``values`` over its paper defaults."""
    hyper_cls = method_info(name).hyper
    if values is not None and not isinstance(values, dict):
        raise ValueError(f"hyper must be a dict of hyperparameter values (or None), got {values!r}")
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(hyper_cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"method {name!r} has no hyperparameter(s) {unknown}; valid: {sorted(known) or 'none'}")
    return hyper_cls(**values)


__all__ = ["METHODS", "MODULES", "NOT_METHODS", "FOUND", "method_modules", "REGISTRY", "DISPLAY_NAMES",
           "STREAMING_METHODS", "MethodInfo", "build_registry", "method_info", "display_name", "get_method",
           "make_hyper", "Context", "FLConfig", "Outcome", "federated_averaging", "sample_clients"]
