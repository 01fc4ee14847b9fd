"""What a run costs: one estimator for every place that prices runs not yet computed.

``run_grid``'s budget (:func:`fedlib.grid.estimate_seconds`), ``python -m fedlib.grid TABLE
--list`` (:func:`fedlib.grid_cli.list_runs`), the reproduction report's "not run" lists
(:func:`workbook.report.not_run_groups`) and notebook 11's design tables
(:func:`workbook.ranking_power.cost_per_run`) all call :func:`estimate` (or :func:`measured`),
so the page and the command it prints say the same number.

**What is measured.** On a CPU (device kind ``'cpu'``) the cost of a run is its **CPU-seconds**:
the record's ``cpu_seconds``, the run's process CPU time with every thread summed
(:func:`fedlib.run.run`). CPU time, not wall time, because it is what a machine is asked for:
it does not depend on how many other jobs shared the cores while the run was measured, and a
run of T threads costs T cores for its wall time. A record written before ``cpu_seconds``
existed is priced by a labelled fallback (:func:`run_cost`): its wall ``seconds`` × its
``host['threads']`` (an upper bound: every thread busy the whole run), or its wall ``seconds``
alone where the threads are not recorded either; the :class:`Estimate` says so in its ``basis``.
On a GPU (device kind ``'cuda'``) the cost is the run's wall ``seconds`` on the device
(GPU-seconds; the report prints GPU-minutes): the device, not the host's CPU, is what is spent.

**Comparable records** (:func:`comparable`): status ``ok``, the same data set, ``n_train``,
rounds and local epochs (the effective training protocol, :meth:`fedlib.spec.RunSpec.effective`)
and the same device kind (a record's ``device`` field, :func:`device_kind_of`); CPU and GPU
costs never mix. Among them, in this order, the first group that has any: (1) the same method,
number of clients K and reading (``reproduction``: a method's paper_code and paper_text runs can
differ several-fold, e.g. PoC's); (2) the same method and K; (3) any method and K on that data set. Within the group,
the records of the same partition protocol and hyper-parameters (``spec.hyper``, as given: FedAMP's
two attention rules cost 40 and 400 CPU-s a run) are used if there are any (:func:`setting`); then the records
measured under the same sharing (``host['processes']`` equal to ``processes``; both unknown
counts as equal) are used if there are any, else those whose sharing is unknown; records of a
different known sharing never are (16 processes on one GPU take several times as long per run as
one). The thread count is not matched. Of those, the records that carry ``cpu_seconds`` (on a
CPU) are used if any do; else the fallback prices them.

**The estimate** is the median cost of those records (:func:`measured`): a typical run; one in
two takes longer. The :class:`Estimate` also carries the longest of them (``longest``): a budget
starts a run only if both :data:`fedlib.grid.SAFETY_FACTOR` × the median and the longest comparable
run would end in time (:func:`fedlib.grid.reserve_seconds`).

**Hosts.** A record's CPU-seconds are its host's: each record names the instruction set ATen
dispatched to (``host['cpu_capability']``: ``'AVX512'``, ``'AVX2'``, …), and the same run can
cost twice as much on an AVX2 host as on an AVX-512 one. :func:`host_ratios` measures, from the
records alone, how many times the CPU-seconds of a host with another capability a run costs on a
given one (the median, over the settings measured on both, of the ratio of their medians), and
:func:`on_host` scales the other hosts' records by it.

* **The printed estimate** (the report, ``--list``, the plan, notebook 11's design costs) is in
  CPU-seconds of a :data:`REFERENCE_CAPABILITY` host: they read :func:`on_reference_host` of the
  records, so a record measured on a slower host joins its setting's median at what the run costs on
  the reference host, and one such record no longer moves an estimate it shares with records of the
  reference host. It does not depend on the host that computes it: the same number on every machine.
* **A budget's admission** reads the records scaled to the host that computes
  (:func:`fedlib.grid.reserve_seconds` with ``here``), so that a budget on a slower host does not
  start runs that cannot end in time.

A record of a capability with no setting measured on both hosts, or with no capability recorded,
is read as measured. Only CPU records are scaled: a GPU run's cost is the device's.

Pure functions over record dicts (or what :func:`fedlib.grid.timing_records` keeps of them);
reading folders is the caller's.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .validation import check_choice, check_int

__all__ = ["Estimate", "CPU_SECONDS", "FALLBACK_THREADS", "FALLBACK_WALL", "FALLBACK_MIXED", "DEVICE_SECONDS",
           "device_kind_of", "run_cost", "measured", "setting", "pricing_key", "comparable", "estimate", "estimate_each",
           "HostRatio", "capability_of", "host_ratios", "on_host", "REFERENCE_CAPABILITY", "on_reference_host"]

CPU_SECONDS = "cpu_seconds"
"""Basis: the records' ``cpu_seconds`` (CPU time, every thread summed)."""
FALLBACK_THREADS = "wall seconds × host threads (fallback: no cpu_seconds)"
"""Basis: records without ``cpu_seconds``, priced at their wall ``seconds`` × ``host['threads']``."""
FALLBACK_WALL = "wall seconds (fallback: no cpu_seconds, no host threads)"
"""Basis: records without ``cpu_seconds`` nor ``host['threads']``, priced at their wall ``seconds``."""
FALLBACK_MIXED = "wall seconds, × host threads where recorded (fallback: no cpu_seconds)"
"""Basis: records of both fallbacks."""
DEVICE_SECONDS = "device wall seconds"
"""Basis on a GPU: the records' wall ``seconds`` on the device."""

KINDS = ("cpu", "cuda")

REFERENCE_CAPABILITY = "AVX512"
"""The host whose CPU-seconds every printed estimate is in (:func:`on_reference_host`): the
instruction set (``host['cpu_capability']``) of the hosts that measured nearly all committed CPU
records, so that the printed hours stay what those records measured."""


@dataclass(frozen=True)
class Estimate:
    """A run's estimated cost.

    seconds : CPU-seconds (device kind ``'cpu'``) or device wall seconds (``'cuda'``); None when no
        record is comparable
    basis : what the seconds are measured from (:data:`CPU_SECONDS`, a ``FALLBACK_*`` label, or
        :data:`DEVICE_SECONDS`); None with ``seconds``
    records : how many records the median is taken over
    longest : the largest cost among those records (same unit as ``seconds``); None with ``seconds``
    """
    seconds: float | None
    basis: str | None = None
    records: int = 0
    longest: float | None = None

    @property
    def fallback(self) -> bool:
        """Whether the estimate rests on records without ``cpu_seconds`` (a labelled fallback)."""
        return self.basis is not None and "fallback" in self.basis


NONE = Estimate(None)


def device_kind_of(device) -> str | None:
    """``'cpu'`` or ``'cuda'`` (``'cuda:0'`` included) of a record's ``device`` field or a
    ``torch.device`` (anything with a ``type``); another backend's own name; None for no device."""
    if device is None:
        return None
    kind = device.type if hasattr(device, "type") else str(device).split(":")[0]
    return kind or None


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def run_cost(record: dict, device_kind: str = "cpu") -> tuple[float, str] | None:
    """``(seconds, basis)``: what the finished ``record`` cost on a ``device_kind`` device, by the
    module's rule: on ``'cpu'`` its ``cpu_seconds`` (:data:`CPU_SECONDS`), else its wall
    ``seconds`` × ``host['threads']`` (:data:`FALLBACK_THREADS`), else its wall ``seconds``
    (:data:`FALLBACK_WALL`); on ``'cuda'`` its wall ``seconds`` (:data:`DEVICE_SECONDS`). None
    where the record holds no finite time to read."""
    check_choice(device_kind, "device_kind", KINDS)
    wall = record.get("seconds")
    if device_kind == "cuda":
        return (float(wall), DEVICE_SECONDS) if _finite(wall) else None
    cpu = record.get("cpu_seconds")
    if _finite(cpu):
        return float(cpu), CPU_SECONDS
    if not _finite(wall):
        return None
    threads = (record.get("host") or {}).get("threads")
    if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
        return float(wall) * threads, FALLBACK_THREADS
    return float(wall), FALLBACK_WALL


def measured(records, device_kind: str = "cpu") -> Estimate:
    """The median cost (:func:`run_cost`) of ``records`` (finished runs the caller holds to be
    alike; none is filtered out but those without a time), and the largest (``longest``): on a
    CPU, over the records with ``cpu_seconds`` if any have it, else over all of them with the
    fallback, labelled in :attr:`Estimate.basis`. :data:`NONE` (``seconds`` None) for no record
    with a time.

    >>> measured([{"cpu_seconds": 10.0}, {"cpu_seconds": 40.0}, {"cpu_seconds": 20.0}])
    Estimate(seconds=20.0, basis='cpu_seconds', records=3, longest=40.0)"""
    costs = [c for c in (run_cost(r, device_kind) for r in records) if c is not None]
    exact = [c for c in costs if c[1] in (CPU_SECONDS, DEVICE_SECONDS)]
    use = exact or costs
    if not use:
        return NONE
    bases = {b for _, b in use}
    basis = bases.pop() if len(bases) == 1 else FALLBACK_MIXED
    return Estimate(float(statistics.median(s for s, _ in use)), basis, len(use), float(max(s for s, _ in use)))


def _sharing_rank(recorded, current) -> int | None:
    """0: the record was measured under the current sharing (both unknown counts as the same);
    1: one of the two is unknown; None: a different known count (not comparable)."""
    if recorded == current:
        return 0
    return 1 if recorded is None or current is None else None


def setting(spec: dict) -> tuple[str | None, str]:
    """What within a comparable group still moves a run's cost: its partition protocol and its
    hyper-parameters as given (``spec.hyper``, canonical JSON; none given and ``{}`` are alike), of a
    record's ``spec`` dict (``RunSpec.to_dict``)."""
    import json

    return spec.get("protocol"), json.dumps(spec.get("hyper") or {}, sort_keys=True, default=str)


def pricing_key(spec) -> tuple:
    """What :func:`comparable` reads of ``spec`` (a :class:`fedlib.spec.RunSpec`): two runs with
    equal keys get equal estimates from the same records (a caller pricing many runs prices each
    key once). The seed and the level are not in it."""
    from .methods import FLConfig

    cfg = FLConfig.from_dict(spec.effective()[1])
    return (spec.dataset, spec.n_train, cfg.rounds, cfg.local_epochs, spec.method, spec.n_clients,
            spec.reproduction, setting(spec.to_dict()))


def comparable(spec, records, device_kind: str, processes: int | None = None, *,
               by_setting: bool = True) -> list[dict]:
    """The records of ``records`` that price ``spec``'s run (a :class:`fedlib.spec.RunSpec`) on a
    ``device_kind`` device (``'cpu'`` or ``'cuda'``) measured under ``processes`` sharing it
    (None: unknown): the module's rule (same data set, ``n_train``, rounds, local epochs and device
    kind; the same method, K and reading, else the same method and K, else any on the data set; of
    those, the same protocol and hyper-parameters where any are, unless ``by_setting`` is False; the
    best sharing). [] for none."""
    from .methods import FLConfig

    check_choice(device_kind, "device_kind", KINDS)
    check_int(processes, "processes", 1, optional=True)
    _, fl, _ = spec.effective()
    cfg = FLConfig.from_dict(fl)
    pool = []
    for r in records:
        s, rfl = r.get("spec") or {}, r.get("fl") or {}
        if (s.get("dataset") != spec.dataset or r.get("status") != "ok" or s.get("n_train") != spec.n_train
                or rfl.get("rounds") != cfg.rounds or rfl.get("local_epochs") != cfg.local_epochs
                or device_kind_of(r.get("device")) != device_kind or run_cost(r, device_kind) is None):
            continue
        rank = _sharing_rank((r.get("host") or {}).get("processes"), processes)
        if rank is not None:
            same = s.get("method") == spec.method and s.get("n_clients") == spec.n_clients
            pool.append((rank, r, same, same and (s.get("reproduction") or "paper_text") == spec.reproduction))
    mine = setting(spec.to_dict())
    for group in ([(k, r) for k, r, _, own in pool if own], [(k, r) for k, r, same, _ in pool if same],
                  [(k, r) for k, r, *_ in pool]):
        if group:
            if by_setting:
                group = [(k, r) for k, r in group if setting(r.get("spec") or {}) == mine] or group
            best = min(k for k, _ in group)
            return [r for k, r in group if k == best]
    return []


def estimate(spec, records, device_kind: str = "cpu", processes: int | None = None) -> Estimate:
    """The cost of ``spec``'s run on a ``device_kind`` device: the median cost (:func:`measured`)
    of the :func:`comparable` records among ``records`` (record dicts, or what
    :func:`fedlib.grid.timing_records` keeps of them) — CPU-seconds on ``'cpu'`` (``cpu_seconds``,
    or the labelled fallback), device wall seconds on ``'cuda'``. ``Estimate(None)`` when none is
    comparable. ValueError for a ``device_kind`` other than 'cpu'/'cuda' or ``processes`` < 1."""
    return measured(comparable(spec, records, device_kind, processes), device_kind)


def estimate_each(specs, records, device_kind: str = "cpu", processes: int | None = None) -> list[Estimate]:
    """:func:`estimate` of each of ``specs`` (a list of :class:`fedlib.spec.RunSpec`, length n), in
    their order (length n): each :func:`pricing_key` priced once, so runs that differ only in their
    seed or level share one estimate (what a listing of many runs needs: one walk of ``records`` a key)."""
    keys, by_key = [pricing_key(s) for s in specs], {}
    for s, k in zip(specs, keys):
        if k not in by_key:
            by_key[k] = estimate(s, records, device_kind, processes)
    return [by_key[k] for k in keys]


# ----------------------------------------------------------------------------- hosts
@dataclass(frozen=True)
class HostRatio:
    """How many times the CPU-seconds of a record measured on another host a run costs on this one.

    ratio : the median, over ``settings``, of median(CPU-seconds here) / median(CPU-seconds there)
    settings : how many settings (:func:`_record_setting`: everything :func:`pricing_key` reads, and
        the sharing) have records with ``cpu_seconds`` on both hosts
    """
    ratio: float
    settings: int


def capability_of(record: dict) -> str | None:
    """The instruction set ATen dispatched to on the host that measured ``record``
    (``host['cpu_capability']``, :func:`fedlib.run.host_of`); None where it is not recorded, or is
    not a name (a damaged record's host is read as unknown, never trusted)."""
    host = record.get("host")
    cap = host.get("cpu_capability") if isinstance(host, dict) else None
    return cap if isinstance(cap, str) else None


def _record_setting(record: dict) -> tuple:
    """What :func:`pricing_key` reads of a run, read off its record dict, and its sharing."""
    s, fl = record.get("spec") or {}, record.get("fl") or {}
    return (s.get("dataset"), s.get("n_train"), fl.get("rounds"), fl.get("local_epochs"), s.get("method"),
            s.get("n_clients"), s.get("reproduction") or "paper_text", setting(s),
            (record.get("host") or {}).get("processes"))


def host_ratios(records, here: str) -> dict[str, HostRatio]:
    """For each instruction set ``c`` ≠ ``here`` among ``records`` (record dicts; the finished CPU
    runs with ``cpu_seconds`` are read): :class:`HostRatio` of a host of capability ``here`` to one
    of ``c``, over the settings measured on both. A capability with no setting in common is absent:
    nothing measures it against ``here``.

    >>> def rec(cap, cpu, method="fedavg"):
    ...     return {"status": "ok", "device": "cpu", "cpu_seconds": cpu, "host": {"cpu_capability": cap},
    ...             "spec": {"dataset": "fmnist", "method": method, "n_clients": 100}, "fl": {"rounds": 40}}
    >>> rs = [rec("AVX512", 100), rec("AVX512", 120), rec("AVX2", 220), rec("AVX512", 50, "cl"),
    ...       rec("AVX2", 150, "cl"), rec("AVX512", 80, "fedprox"), rec(None, 300)]
    >>> host_ratios(rs, "AVX2")   # fedavg: 220 / 110; cl: 150 / 50; fedprox: not measured here
    {'AVX512': HostRatio(ratio=2.5, settings=2)}
    >>> host_ratios(rs, "AVX512")["AVX2"].settings
    2"""
    costs: dict = {}
    for r in records:
        cap = capability_of(r)
        if (cap is None or r.get("status") != "ok" or device_kind_of(r.get("device")) != "cpu"
                or not _finite(r.get("cpu_seconds"))):
            continue
        costs.setdefault(_record_setting(r), {}).setdefault(cap, []).append(float(r["cpu_seconds"]))
    per_cap: dict = {}
    for by_cap in costs.values():
        if here not in by_cap:
            continue
        mine = statistics.median(by_cap[here])
        for cap, seconds in by_cap.items():
            if cap != here:
                per_cap.setdefault(cap, []).append(mine / statistics.median(seconds))
    return {cap: HostRatio(float(statistics.median(r)), len(r)) for cap, r in sorted(per_cap.items())}


def on_host(records, here: str | None, ratios: dict[str, HostRatio] | None = None) -> list[dict]:
    """``records`` as their runs would cost on a host of capability ``here``: a record measured on
    a host of capability ``c`` ≠ ``here`` with a known ratio (``ratios``, default
    :func:`host_ratios` of ``records``) has its ``cpu_seconds`` and wall ``seconds`` multiplied by
    ``ratios[c].ratio`` (a copy; the others, and every GPU record, are returned as they are).
    ``here`` None: unchanged. A budget's admission reads these with ``here`` the host that computes
    (:func:`fedlib.grid.reserve_seconds`); the printed estimates with ``here``
    :data:`REFERENCE_CAPABILITY` (:func:`on_reference_host`).

    >>> rs = [{"status": "ok", "device": "cpu", "cpu_seconds": 100.0, "host": {"cpu_capability": "AVX512"}}]
    >>> on_host(rs, "AVX2", {"AVX512": HostRatio(2.5, 3)})[0]["cpu_seconds"]
    250.0"""
    records = list(records)
    if here is None:
        return records
    ratios = host_ratios(records, here) if ratios is None else ratios
    out = []
    for r in records:
        cap = capability_of(r)
        k = ratios.get(cap) if cap != here and device_kind_of(r.get("device")) == "cpu" else None
        if k is None:
            out.append(r)
            continue
        r = dict(r)
        for field in ("cpu_seconds", "seconds"):
            if _finite(r.get(field)):
                r[field] = r[field] * k.ratio
        out.append(r)
    return out


def on_reference_host(records) -> list[dict]:
    """``records`` as their runs would cost on a :data:`REFERENCE_CAPABILITY` host
    (:func:`on_host`, the ratios measured from ``records`` themselves): what every printed estimate
    reads, so that it is one host's CPU-seconds whichever hosts measured the records.

    >>> def rec(cap, cpu, method="fedavg"):
    ...     return {"status": "ok", "device": "cpu", "cpu_seconds": cpu, "host": {"cpu_capability": cap},
    ...             "spec": {"dataset": "fmnist", "method": method, "n_clients": 100}, "fl": {"rounds": 40}}
    >>> rs = [rec("AVX512", 100), rec("AVX2", 200), rec("AVX512", 50, "cl"), rec("AVX2", 200, "cl")]
    >>> [r["cpu_seconds"] for r in on_reference_host(rs)]   # AVX512 / AVX2: median(100/200, 50/200) = 0.375
    [100, 75.0, 50, 75.0]"""
    return on_host(records, REFERENCE_CAPABILITY)
