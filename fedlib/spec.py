"""The spec of one run: ``RunSpec`` names everything a result depends on (dataset, protocol,
level, K, seed, method, hyperparameters, training protocol, data subset), its key names the
record's file (``record_path``), and ``grid_specs`` crosses a training grid into specs.

Layers: this module is below :mod:`fedlib.run` (one run), :mod:`fedlib.grid` (grids) and
:mod:`fedlib.records`' readers; it imports the registries it validates against (data sets,
partitions, methods, models, reproductions) and nothing above them.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import __version__, partition as P
from .methods import METHODS, STREAMING_METHODS, FLConfig, make_hyper, method_info
from .models import ARCH_FOR_DATASET, ARCHITECTURES
from .records import key_of, with_current_defaults, with_recorded_defaults
from .reproduction import REPRODUCTIONS, Settings, runs_differently, settings_for
from .validation import check_choice, check_int, check_number, check_seed, fail, plain

__all__ = ["RunSpec", "grid_specs", "record_path", "sharing", "ENV_SHARING"]

_LATER_FIELDS = {"val_fraction": 0.0, "global_test": False, "n_global_test": None,  # added with the val and global test splits
                 "reproduction": "paper_text", "pool_test": False}  # added with fedlib.reproduction; defaults keep old keys


@dataclass(frozen=True)
class RunSpec:
    """Everything one run depends on.

    Attributes
    ----------
    dataset : registry name (fedlib.datasets), e.g. 'fmnist', 'adult'
    protocol : partition protocol (fedlib.partition.PROTOCOLS), e.g. 'dirichlet'
    level : the protocol's parameter (α, S, …)
    n_clients : K
    seed : partition, split, initial-weights and selection seed
    method : registry name (fedlib.methods.METHODS)
    hyper : the method's hyperparameters (over its paper defaults)
    fl : training protocol overrides (fedlib.methods.FLConfig fields)
    n_train : optional stratified subset of the training pool (CI-sized runs; seed 0, fixed
        across run seeds so that seeds vary only the partition and training)
    test_fraction : per-client test share (0.2: the papers' 80/20)
    arch : model architecture override (default: the dataset's paper architecture)
    val_fraction : per-client validation share, taken from the train part (0: none, the
        papers' protocol; the test split is the same for every val_fraction)
    global_test : also evaluate every client's model on the data set's official test set
        (FedPrism's "global accuracy"; recorded as ``global_test_*``)
    n_global_test : optional stratified subset (seed 0) of that official test set (CI-sized
        runs: every personalised model is evaluated on it); None = all of it
    reproduction : 'paper_text' (Table II as written, the default) or 'paper_code' (what the
        authors' code ran for this method: :mod:`fedlib.reproduction`; its settings override
        ``hyper`` and ``fl`` for the fields they name)
    pool_test : pool the data set's official test set into the training pool before the
        partition (FL-bench's generator, which pFedLIA's runs used: FMNIST's 60,000 + 10,000
        images partitioned together, each client then split by ``test_fraction``, 0.25 there);
        no official test set is left, so ``global_test`` must be False. ``n_train`` subsets the
        pooled set.

    Fields added after the first release enter the record key only when they differ from
    their defaults, so records computed before they existed are still found.
    """

    dataset: str
    protocol: str
    level: float
    n_clients: int
    seed: int
    method: str
    hyper: dict = field(default_factory=dict)
    fl: dict = field(default_factory=dict)
    n_train: int | None = None
    test_fraction: float = 0.2
    arch: str | None = None
    val_fraction: float = 0.0
    global_test: bool = False
    n_global_test: int | None = None
    reproduction: str = "paper_text"
    pool_test: bool = False

    def __post_init__(self):  # numpy numbers as Python ones: the same key, a JSON record
        for name, value in vars(self).items():
            object.__setattr__(self, name, plain(value))

    def effective(self) -> tuple[dict, dict, Settings]:
        """(hyper, fl, settings): the spec's hyperparameters and training settings with its
        reproduction's settings applied (:func:`fedlib.reproduction.settings_for`)."""
        settings = settings_for(self.method, self.reproduction)
        return {**self.hyper, **settings.hyper}, {**self.fl, **settings.fl}, settings

    def validate(self) -> None:
        """Raise ValueError naming the bad field, before any data is loaded or trained."""
        from .datasets import DATASETS

        if not isinstance(self.dataset, str) or self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; available: {sorted(DATASETS)}")
        if not isinstance(self.protocol, str) or self.protocol not in P.PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; available: {sorted(P.PROTOCOLS)}")
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; available: {', '.join(METHODS)}")
        proto = P.PROTOCOLS[self.protocol]  # its entry declares the level's range
        check_number(self.level, "level")  # never a string: YAML gives '0.5' and 0.5 alike
        proto.check_level(self.level, self.protocol)
        check_int(self.n_clients, "n_clients", 1)
        if proto.plants_groups:  # the groups' own options, before any data
            P.planted_clusters(self.protocol, int(self.n_clients), self.level)
        check_seed(self.seed)
        check_int(self.n_train, "n_train", 1, optional=True)
        if self.n_train is not None and int(self.n_train) < int(self.n_clients):
            raise ValueError(f"n_train={self.n_train} is smaller than n_clients={self.n_clients}")
        if self.arch is not None and (not isinstance(self.arch, str) or self.arch not in ARCHITECTURES):
            raise ValueError(f"arch={self.arch!r} is unknown; choose one of {sorted(ARCHITECTURES)}")
        if self.arch is None and self.dataset not in ARCH_FOR_DATASET:
            raise ValueError(f"dataset={self.dataset!r} has no default architecture; pass arch= "
                             f"(one of {sorted(ARCHITECTURES)}) or add it to "
                             "fedlib.models.ARCH_FOR_DATASET")
        check_number(self.test_fraction, "test_fraction", 0, 1, high_open=True)
        check_number(self.val_fraction, "val_fraction", 0, 1, high_open=True)
        if self.test_fraction + self.val_fraction >= 1:
            fail("test_fraction + val_fraction", "< 1 (some data must stay for training)",
                 self.test_fraction + self.val_fraction)
        check_choice(self.global_test, "global_test", (False, True))
        check_int(self.n_global_test, "n_global_test", 1, optional=True)
        check_choice(self.pool_test, "pool_test", (False, True))
        if self.pool_test and self.global_test:
            fail("global_test", "False when pool_test=True (the official test set is then part of the "
                                "training pool)", self.global_test)
        if self.n_global_test is not None and not self.global_test:
            fail("n_global_test", "None unless global_test=True (it subsets the official test set)",
                 self.n_global_test)
        if not isinstance(self.hyper, dict):
            fail("hyper", "a dict of the method's hyperparameters", self.hyper)
        if not isinstance(self.fl, dict):
            fail("fl", "a dict of training settings (fedlib.methods.FLConfig fields)", self.fl)
        check_choice(self.reproduction, "reproduction", REPRODUCTIONS)
        hyper, fl, _ = self.effective()
        hp = make_hyper(self.method, hyper)
        info = method_info(self.method)  # the method's own declarations (fedlib.methods.contract)
        if FLConfig.from_dict(fl).stream_average and not info.streams_average:
            fail("fl stream_average", f"False for method {self.method!r} (its training does not all go through "
                 f"federated_averaging; methods that stream: {', '.join(STREAMING_METHODS)})", True)
        if info.protocols is not None and self.protocol not in info.protocols:
            fail("protocol", f"one of {list(info.protocols)} for method {self.method!r} (it needs the partition's "
                 "true clusters)", self.protocol)
        if info.check_protocol is not None:  # a method's own constraint on the training protocol
            info.check_protocol(hp, FLConfig.from_dict(fl))
        if info.check_arch is not None:  # a method's own constraint on the model
            info.check_arch(self.arch or ARCH_FOR_DATASET[self.dataset])
        if info.needs_val(hp) and self.val_fraction == 0:
            fail("val_fraction", f"> 0 for method {self.method!r} with hyper {self.hyper or '{}'} (it selects or "
                 "weights on the clients' validation split), e.g. 0.1", self.val_fraction)

    @classmethod
    def from_record(cls, spec: dict) -> "RunSpec":
        """The RunSpec a committed record's ``spec`` dict ran: a hyperparameter whose default
        moved after the record was written, and that its spec therefore leaves out, is set to
        the value it ran (:func:`fedlib.records.with_recorded_defaults`); ``RunSpec(**spec)``
        would give it today's default instead."""
        if not isinstance(spec, dict):
            fail("spec", "a record's spec dict", spec)
        return cls(**with_recorded_defaults(spec))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["level"] = float(self.level)
        d["hyper"] = with_current_defaults(self.method, d["hyper"])  # a moved default: stated unless the recorded value
        for name, default in _LATER_FIELDS.items():  # keys of older records stay valid
            if d[name] == default:
                del d[name]
        return d

    def key(self) -> str:
        """Stable content hash of the spec and the fedlib version (the record's file name):
        a new fedlib release never reuses records computed by an older one."""
        return key_of(self.to_dict(), __version__)



# ----------------------------------------------------------------------------- grids
def record_path(results_dir, spec: RunSpec) -> Path:
    return Path(results_dir) / f"{spec.key()}.json"



# ----------------------------------------------------------------------------- the host's sharing
#: The number of processes sharing the device (set by ``benchmarks/gpu_lease.sh``; unset: not
#: known). A run's record keeps it as ``host['processes']``: its ``seconds`` were measured so.
ENV_SHARING = "FEDLIB_SHARING"


def sharing() -> int | None:
    """The number of processes sharing this device, from ``$FEDLIB_SHARING``; None when unset.
    Anything but an integer ≥ 1 is refused (ValueError naming the variable)."""
    value = os.environ.get(ENV_SHARING, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        fail(f"${ENV_SHARING}", "an integer ≥ 1 (the number of processes sharing the device) or unset", value)
    return int(value)


def grid_specs(datasets, protocols: dict, n_clients, seeds, methods, *, hyper: dict | None = None,
               fl: dict | None = None, n_train: dict | int | None = None,
               val_fraction: dict | float = 0.0, reproductions=("paper_text",)) -> list[RunSpec]:
    """The cross product of a training grid as RunSpecs (what notebook 05's parameters name).

    Parameters
    ----------
    datasets : list of dataset names
    protocols : dict protocol -> list of levels, e.g. {'dirichlet': [50, 0.3], 'similarity': [1, 0]}
    n_clients, seeds, methods : lists
    hyper : dict method -> hyperparameter overrides
    fl : training protocol overrides (FLConfig fields), shared by every run
    n_train : training-pool subset size, one int for all datasets or a dict per dataset
    val_fraction : per-client validation share (RunSpec.val_fraction), one number for every
        method or a dict method -> share (methods not named get 0), e.g. {'psi_pfl': 0.1}
    reproductions : list of 'paper_text' / 'paper_code' (RunSpec.reproduction); 'paper_code'
        adds a run only where the code ran the method differently at that K and q
        (:func:`fedlib.reproduction.runs_differently`; elsewhere it would repeat the
        'paper_text' run)

    Levels, K and seeds must be numbers (a string such as '0.5' from a params file is refused,
    never converted); the rest of each spec is checked by :meth:`RunSpec.validate`.
    """
    for name, values in (("datasets", datasets), ("n_clients", n_clients), ("seeds", seeds),
                         ("methods", methods)):
        _check_list(values, name)
    if not isinstance(protocols, dict):
        fail("protocols", "a dict protocol -> list of levels, e.g. {'dirichlet': [0.3]}", protocols)
    for protocol, levels in protocols.items():
        _check_list(levels, f"protocols[{protocol!r}]")
        for level in levels:
            check_number(level, f"protocols[{protocol!r}] level")
    for k in n_clients:
        check_int(k, "n_clients", 1)
    for seed in seeds:
        check_seed(seed, "seeds")
    if len(methods) == 0:
        fail("methods", f"a non-empty list of methods (available: {', '.join(METHODS)})", list(methods))
    for name, value in (("hyper", hyper), ("fl", fl)):
        if value is not None and not isinstance(value, dict):
            fail(name, "a dict or None", value)
    from .datasets import DATASETS

    _check_keys(hyper, "hyper", METHODS, "method")
    _check_keys(val_fraction, "val_fraction", METHODS, "method")
    _check_keys(n_train, "n_train", sorted(DATASETS), "data set")
    if not isinstance(n_train, dict):
        check_int(n_train, "n_train", 1, optional=True)
    else:
        for ds, v in n_train.items():
            check_int(v, f"n_train[{ds!r}]", 1, optional=True)
    if isinstance(val_fraction, dict):
        for m, v in val_fraction.items():
            check_number(v, f"val_fraction[{m!r}]", 0, 1, high_open=True)
    else:
        check_number(val_fraction, "val_fraction", 0, 1, high_open=True)
    _check_list(reproductions, "reproductions")
    for r in reproductions:
        check_choice(r, "reproductions", REPRODUCTIONS)
    hyper = hyper or {}
    specs = []
    for ds in datasets:
        nt = n_train.get(ds) if isinstance(n_train, dict) else n_train
        for protocol, levels in protocols.items():
            for level in levels:
                for k in n_clients:
                    for seed in seeds:
                        for m in methods:
                            vf = val_fraction.get(m, 0.0) if isinstance(val_fraction, dict) else val_fraction
                            for r in reproductions:
                                q = (fl or {}).get("fraction", FLConfig.fraction)
                                if r != "paper_text" and not runs_differently(m, int(k), q):
                                    continue  # its paper_text run is its paper_code run
                                specs.append(RunSpec(ds, protocol, float(level), int(k), int(seed), m,
                                                     hyper=dict(hyper.get(m, {})), fl=dict(fl or {}),
                                                     n_train=nt, val_fraction=float(vf), reproduction=r))
    return specs


def _check_keys(values, name: str, known, what: str) -> None:
    """Every key of a per-method / per-data-set dict names a known ``what``: a typo (``'fedprx'``)
    is refused, never silently left at its default. Known, not "of this grid": the studies build
    one grid from several ``grid_specs`` calls sharing one ``hyper`` / ``n_train`` dict (e.g.
    pFedLIA's CFL rows), so a key for a method of another part of the same study is legitimate."""
    if not isinstance(values, dict):
        return
    for key in values:
        if not isinstance(key, str) or key not in known:
            fail(f"{name} key", f"a known {what} (one of {', '.join(known)})", key)


def _check_list(values, name: str) -> None:
    """A list (or tuple) of grid values: a bare string or number is refused, not iterated."""
    if not isinstance(values, (list, tuple, range, np.ndarray)) or np.ndim(values) != 1:
        fail(name, "a list", values)
