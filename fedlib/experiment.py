"""The notebooks' entry point to running experiments: the spec (:mod:`fedlib.spec`), one run
(:mod:`fedlib.run`) and grids of runs with their records (:mod:`fedlib.grid`), named in one
module. It defines nothing of its own and imports only downward, so
``from fedlib import experiment`` then ``experiment.RunSpec``, ``experiment.run`` and
``experiment.run_grid`` reach the modules that define them.

``RunSpec`` names everything a result depends on (dataset, protocol, level, K, seed,
method, hyperparameters, training protocol, data subset). ``run(spec)`` returns a record
(a JSON-able dict carrying the full configuration, library versions, the host, per-client and
global metrics, per-round history, and the method's info such as τ).
"""
from __future__ import annotations

from .grid import load_grid, load_records, present_records, run_grid, write_manifest
from .run import build_context, build_federation, run
from .spec import RunSpec, grid_specs, record_path

__all__ = ["RunSpec", "run", "run_grid", "grid_specs", "load_records", "record_path", "present_records",
           "build_federation", "build_context", "write_manifest", "load_grid"]
