"""Run strategies on a fedlib federation under Flower's Simulation Engine (Ray backend)."""
from __future__ import annotations

import logging
import sys
import time
import warnings

from ..validation import check_int, fail
from ._compat import require_flwr
from .client import make_client_app
from .setup import check_spec, initial_state, spec_context
from .strategies import STRATEGIES, _Strategy

__all__ = ["simulate", "backend_config", "retry_ray_startup", "startup_timed_out"]


def backend_config(num_cpus: int = 2, client_cpus: int = 1) -> dict:
    """Ray settings for a small shared machine: ``num_cpus`` for Ray in all, ``client_cpus``
    per simulated client (so ⌊num_cpus / client_cpus⌋ clients run at once), no GPU, no
    dashboard, Ray's own logs kept out of the driver."""
    check_int(num_cpus, "num_cpus", 1)
    check_int(client_cpus, "client_cpus", 1, num_cpus)
    return {"client_resources": {"num_cpus": client_cpus, "num_gpus": 0.0},
            "init_args": {"num_cpus": num_cpus, "num_gpus": 0, "include_dashboard": False,
                          "log_to_driver": False, "logging_level": "error"}}


def simulate(strategies, spec, *, num_cpus: int = 2, client_dp_seed: int | None = None, verbose: bool = False,
             client_app=None):
    """Run ``strategies`` one after the other on ``spec``'s federation under
    ``flwr.simulation.run_simulation`` (one Flower node per client, Ray shut down after).

    ``strategies``: a strategy (:class:`ClustPSIPFL`, :class:`PSIPFL`, :class:`FedAvg`), a list of
    them (run on the same nodes in one simulation), or None: ``STRATEGIES[spec.method].from_spec(spec)``;
    ``spec``: the RunSpec (data, partition, model, the clients' protocol); ``num_cpus`` ≥ 1: Ray's
    CPUs (one per simulated client at a time); ``client_dp_seed``: the clients' own DP noise seed
    (:func:`make_client_app`); ``verbose``: Flower's INFO logs; ``client_app``: a Flower ``ClientApp``
    answering the same messages, or None: :func:`make_client_app` (fedlib's engine per client).

    Returns one outcome dict per strategy (a dict for a single strategy, else a list), each as the
    strategy's ``run`` describes (``assignment`` (K,), ``correct``/``n_test`` (K,),
    ``models`` stacked (G, ...), ``selected``, ``info``, ``counts`` (K, C)), plus
    ``wall_seconds`` of the whole simulation (Ray start-up included).
    """
    simulation = require_flwr("flwr.simulation")
    serverapp = require_flwr("flwr.serverapp")
    spec = check_spec(spec)
    if strategies is None:
        if spec.method not in STRATEGIES:
            fail("spec.method", f"one of {sorted(STRATEGIES)} when strategies is None", spec.method)
        strategies = STRATEGIES[spec.method].from_spec(spec)
    single = not isinstance(strategies, (list, tuple))
    todo = [strategies] if single else list(strategies)
    if not todo or not all(isinstance(s, _Strategy) for s in todo):
        fail("strategies", "a fedlib.flower strategy (ClustPSIPFL, PSIPFL, FedAvg) or a non-empty list of them",
             strategies)
    if client_app is not None and client_dp_seed is not None:
        fail("client_dp_seed", "None when client_app is given (the app holds its own seed)", client_dp_seed)
    if client_app is not None and type(client_app).__name__ != "ClientApp":
        fail("client_app", "a flwr.clientapp.ClientApp or None", client_app)
    n_clients, start = spec_context(spec).n_clients, initial_state(spec)
    results: list = []
    app = serverapp.ServerApp()

    @app.main()
    def main(grid, context):  # noqa: ARG001 - Flower's signature
        for strategy in todo:
            results.append(strategy.run(grid, start, n_clients))

    t0 = time.perf_counter()
    client_app = client_app if client_app is not None else make_client_app(spec, dp_seed=client_dp_seed)

    def attempt():
        results.clear()
        _run_quietly(simulation, app, client_app, n_clients, num_cpus, verbose)

    retry_ray_startup(attempt)
    if len(results) != len(todo):
        raise RuntimeError(f"the Flower simulation finished {len(results)} of {len(todo)} strategies")
    for r in results:
        r["wall_seconds"] = time.perf_counter() - t0
    return results[0] if single else results


def startup_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from (``__cause__``/``__context__``) is Ray's
    local node missing its fixed 30 s registration window (:data:`fedlib.ray_grid.STARTUP_TIMEOUT`):
    Flower's simulation wraps it in two RuntimeErrors."""
    from ..ray_grid import STARTUP_TIMEOUT

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if STARTUP_TIMEOUT in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def retry_ray_startup(fn, attempts: int | None = None):
    """``fn()``, called again (up to ``attempts``, default :data:`fedlib.ray_grid.START_ATTEMPTS`
    times in all) when it fails because the local Ray node did not start in time on a busy
    machine (:func:`startup_timed_out`), as :func:`fedlib.ray_grid.ray_session` does for grids;
    any other error, or the last attempt's, is raised."""
    from ..ray_grid import START_ATTEMPTS

    attempts = START_ATTEMPTS if attempts is None else attempts
    for i in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - re-raised unless it is Ray's start-up timeout
            if i == attempts or not startup_timed_out(e):
                raise
            print(f"fedlib.flower: the local Ray node did not register within Ray's 30 s (attempt {i} of "
                  f"{attempts}; a busy machine); starting the simulation again", file=sys.stderr)


def _run_quietly(simulation, server_app, client_app, n_clients: int, num_cpus: int, verbose: bool) -> None:
    """run_simulation with Flower's INFO logs off (unless ``verbose``) and Ray always shut down."""
    logger = logging.getLogger("flwr")
    level = logger.level
    if not verbose:  # also hides run_simulation's deprecation notice (the Python entry point tests use)
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module="ray")
            simulation.run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n_clients,
                                      backend_config=backend_config(num_cpus), verbose_logging=verbose)
    finally:
        logger.setLevel(level)
        import ray

        if ray.is_initialized():
            ray.shutdown()
