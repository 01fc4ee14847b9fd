"""Algorithm 1 across settings: silhouette curves (Fig. 5) and the selected τ (Fig. 6).

Only labels are needed: each (dataset, protocol, level, K, seed) cell is partitioned and
split exactly as a training run would be (fedlib.partition + 80/20 per client), and
Algorithm 1 runs on the train-split PSI features.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import partition as P
from ..clustering import psi_features, select_n_clusters
from ..noniid import wpsi

__all__ = ["cluster_selection_study"]


def cluster_selection_study(labels, n_classes: int, protocols: dict, n_clients, seeds, *,
                            dataset_name: str = "", kmeans_seed: int = 42, n_init="auto",
                            test_fraction: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run Algorithm 1 on every cell of a grid.

    Parameters
    ----------
    labels : int array (N,)
        The training pool's labels.
    n_classes : int
    protocols : dict protocol -> list of levels, e.g. {'dirichlet': [0.3], 'similarity': [0.0]}
    n_clients, seeds : iterables of int
    kmeans_seed, n_init : K-means settings (the authors': 42, 'auto')

    Returns
    -------
    selections : DataFrame, one row per cell: dataset, protocol, level, n_clients, seed,
        feasible, tau, max_silhouette, degenerate, note, wpsi, cluster_sizes
    curves : DataFrame, one row per (cell, j): … , j, silhouette (NaN where undefined)
    """
    sel_rows, curve_rows = [], []
    for protocol, levels in protocols.items():
        for level in levels:
            for k in n_clients:
                for seed in seeds:
                    key = dict(dataset=dataset_name, protocol=protocol, level=float(level),
                               n_clients=int(k), seed=int(seed))
                    try:
                        extra = {"dataset_name": dataset_name} if protocol == "dirichlet" else {}
                        parts = P.partition(labels, protocol, int(k), level, int(seed), **extra)
                    except P.InfeasiblePartitionError:
                        sel_rows.append({**key, "feasible": False})
                        continue
                    train, _ = P.train_test_split(parts, int(seed), test_fraction)
                    counts = P.label_counts(labels, train, n_classes)
                    sel = select_n_clusters(psi_features(counts), seed=kmeans_seed, n_init=n_init)
                    sel_rows.append({**key, "feasible": True, "tau": sel.tau,
                                     "max_silhouette": float(np.nanmax(sel.silhouettes))
                                     if not sel.degenerate else np.nan,
                                     "degenerate": sel.degenerate, "note": sel.note,
                                     "wpsi": wpsi(counts), "cluster_sizes": list(sel.cluster_sizes)})
                    curve_rows += [{**key, "j": int(j), "silhouette": float(s)}
                                   for j, s in zip(sel.candidates, sel.silhouettes)]
    return pd.DataFrame(sel_rows), pd.DataFrame(curve_rows)
