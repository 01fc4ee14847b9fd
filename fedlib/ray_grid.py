"""Running a grid's runs as Ray tasks (``run_grid(..., backend='ray')``).

Each run is one Ray task that returns its record; the driver (the process that called
``run_grid``) writes every finished record atomically into its own results folder, so the
workers need no shared filesystem — only the same environment (``make setup``) and the data
(``make data``, ``$FEDLIB_DATA``) on every node. A task whose worker dies (killed, out of
memory, node lost) is retried by Ray up to ``max_retries`` times; a run that raises (a bug,
bad data) is not retried: its error is reported and the other runs go on. Runs already
recorded are never submitted.

Where Ray runs: ``address=None`` and no ``$RAY_ADDRESS`` starts a local instance on this
machine (``ray.init()``); ``address='auto'`` or ``'ray://host:10001'`` (or ``$RAY_ADDRESS``)
joins a running cluster (``ray start --head`` on one machine, ``ray start --address=<head>:6379``
on the others; see docs/scaling-out.md). A Ray session the caller already started is used as it is.

Layers: this module depends on :mod:`fedlib.experiment` (it runs `RunSpec`s with its `run`);
:func:`fedlib.grid.run_grid` imports it when a grid runs on Ray, so importing
:mod:`fedlib.experiment` or :mod:`fedlib.grid` never imports it (nor Ray), and no import loops.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict

from .run import run
from .spec import RunSpec
from .validation import check_int, check_number, fail

__all__ = ["ray_session", "run_on_ray", "check_options"]


def _ray():
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("run_grid(backend='ray') needs Ray: pip install -e .[ray] "
                          "(make setup installs it)") from None
    return ray


def check_options(ray_address, num_cpus, num_gpus, max_retries) -> None:
    """Where to run, the per-run resources and the retry budget, checked before Ray starts."""
    if ray_address is not None and (not isinstance(ray_address, str) or not ray_address):
        fail("ray_address", "None (a local Ray instance, or $RAY_ADDRESS) or a cluster address such as "
             "'auto' or 'ray://head:10001'", ray_address)
    check_number(num_cpus, "num_cpus", 0, low_open=True)
    check_number(num_gpus, "num_gpus", 0)
    check_int(max_retries, "max_retries", 0)


#: A local Ray node must register with its GCS within a fixed 30 s (``ray._private.node``); on a
#: machine whose cores are busy it sometimes does not. :func:`ray_session` starts a local node up
#: to ``START_ATTEMPTS`` times when that is the error (never for a cluster address).
START_ATTEMPTS = 3
STARTUP_TIMEOUT = "timed out during startup"


def ray_session(ray_address: str | None = None, **init_args):
    """The Ray module with a session: the caller's if one is running, else ``ray.init`` on
    ``ray_address`` (default ``$RAY_ADDRESS``, else a local instance). Returns (ray, started):
    ``started`` is True when this call started it (the caller then shuts it down)."""
    check_options(ray_address, 1, 0, 0)
    ray = _ray()
    if ray.is_initialized():
        return ray, False
    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # Ray ≥ 2.5x's behaviour, without its warning
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **init_args)
            return ray, True
        except Exception as e:  # Ray raises a bare Exception for this
            if address is not None or STARTUP_TIMEOUT not in str(e) or attempt == START_ATTEMPTS:
                raise
            ray.shutdown()
            print(f"ray_session: the local Ray node did not register within Ray's 30 s "
                  f"(attempt {attempt} of {START_ATTEMPTS}; a busy machine); starting it again", file=sys.stderr)


def _run_record(spec_dict: dict, device) -> dict:
    """The Ray task: one run, its record returned to the driver (nothing written here). Its
    torch threads = the CPUs Ray gave it (Ray sets ``OMP_NUM_THREADS`` per task, but a reused
    worker's torch keeps the thread count of its first task)."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) >= 1:
        torch.set_num_threads(int(threads))

    return run(RunSpec(**spec_dict), device)


def run_on_ray(specs, *, device, on_record, ray_address=None, num_cpus=1.0, num_gpus=0.0,
               max_retries: int = 3) -> list:
    """Run ``specs`` as Ray tasks; call ``on_record(spec, record)`` in the driver as each
    finishes (in the order they finish). Returns [(spec, error message)] of the runs that
    raised or whose workers died more than ``max_retries`` times (nothing written for them).
    """
    check_options(ray_address, num_cpus, num_gpus, max_retries)
    specs = list(specs)
    if not specs:
        return []
    ray, started = ray_session(ray_address)
    try:
        task = ray.remote(_run_record).options(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=max_retries,
                                               retry_exceptions=False, name="fedlib_run")
        pending = {task.remote(asdict(s), device): s for s in specs}
        failed = []
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(ready[0])
            try:
                record = ray.get(ready[0])
            except Exception as err:  # the run raised, or its worker died too often
                failed.append((spec, f"{type(err).__name__}: {err}"))
                continue
            on_record(spec, record)
        return failed
    finally:
        if started:
            ray.shutdown()
