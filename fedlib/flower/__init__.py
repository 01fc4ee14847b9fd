"""fedlib on Flower (flwr ≥ 1.20, Message API): the PSI strategies as Flower apps.

* :func:`make_client_app` — a ``ClientApp`` whose node i is client i of a fedlib federation
  (built from a :class:`~fedlib.experiment.RunSpec`): it answers a label-counts query
  (optionally ε-DP, :func:`fedlib.privacy.laplace_counts` with its own id), trains with
  fedlib's engine (one-client ``Context.train``) and evaluates.
* :class:`ClustPSIPFL`, :class:`PSIPFL`, :class:`FedAvg` — server workflows: a counts
  exchange, fedlib's own selection code (``cluster_clients``; PSI, ``candidate_thresholds``,
  ``selected_clients``), then FedAvg rounds via ``flwr.serverapp.strategy.FedAvg.start``.
* :func:`simulate` — runs them under ``flwr.simulation.run_simulation``.

What the server learns from the clients
---------------------------------------
Each client's id, its label histogram (the counts of its train split; with ``dp_epsilon`` an
ε-DP noisy one: Laplace(1/ε) per count, clipped at 0 — :mod:`fedlib.privacy`), its
train/validation/test sizes, the weights it returns when selected, and its number of correct
predictions in the final evaluation. Raw examples never leave a client. With the default
noise seeding the server sends ``dp_seed`` and could regenerate (and remove) the noise: that
mode exists to reproduce fedlib's runs; a deployment builds clients with their own
``dp_seed`` (``make_client_app(spec, dp_seed=...)``, ``simulate(..., client_dp_seed=...)``).

Differences from fedlib's own methods
-------------------------------------
* Same results by construction: the same federation (rebuilt from the RunSpec in every
  process), the same seeded initial model, the same clustering/selection functions on the
  same (or identically noised) counts, the same sampling streams (``Context.rng``), the same
  local training (batch order seeded by (seed, round, client, epoch), which does not depend
  on which other clients train), the same weighted average in client-id order.
* fedlib trains all selected clients of a round in one vectorised call; here each client
  trains alone in its Ray worker (one-client ``local_train``). Same batches, same optimiser,
  but the engine's batched float32 kernel rounds a client's sums differently when it trains
  alongside others than when it trains alone (measured on Adult's logistic model, 10 clients,
  2 rounds of 1 epoch: final weights within 7e-9), so not bit for bit; clusters, selected
  clients and (in tests/test_flower.py) every client's correct predictions are equal.
* Clusters (and PSI-PFL's candidates) run one after the other, each a ``FedAvg.start`` of T
  rounds, instead of interleaved in one loop: they are independent, so results are unchanged.
* No per-round history (fedlib logs the global accuracy every ``eval_every`` rounds); only
  the final models are evaluated, by the clients.
* ``keep_optimizer_state=True`` is refused (a simulated client keeps no state across rounds),
  and so is ``stream_average=True`` (the server averages the models its clients send);
  a failed client aborts the run (fedlib raises too) instead of being dropped as Flower does.
* The federation lives on the CPU (``build_federation(spec, 'cpu')``).
* A client's dropout/shuffle seeds are fedlib's; Flower's own node sampling
  (``random.sample``) and aggregation (numpy running sum) are replaced by fedlib's.

Flower is imported lazily: without it, using this package raises ImportError
("fedlib.flower needs Flower: pip install -e .[flower]").
"""
from __future__ import annotations

from ._compat import MISSING, require_flwr

__all__ = ["make_client_app", "client_counts", "ClustPSIPFL", "PSIPFL", "FedAvg", "STRATEGIES", "simulate",
           "backend_config", "group_fedavg", "stream_rng", "require_flwr", "MISSING"]

_WHERE = {"make_client_app": "client", "client_counts": "client", "ClustPSIPFL": "strategies",
          "PSIPFL": "strategies", "FedAvg": "strategies", "STRATEGIES": "strategies", "simulate": "simulation",
          "backend_config": "simulation", "group_fedavg": "fedavg_group", "stream_rng": "fedavg_group"}


def __getattr__(name: str):
    """Import the public names on first use (Flower is needed only then)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'fedlib.flower' has no attribute {name!r}")
    require_flwr()
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
