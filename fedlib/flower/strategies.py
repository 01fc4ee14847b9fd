"""The PSI strategies as Flower server workflows: a counts exchange, then fedlib's own
selection code, then FedAvg rounds through Flower's ``FedAvg.start``.

Each strategy is configured like the fedlib method it mirrors (the method's ``Hyper`` fields
as ``hyper``, the training protocol as ``fl``, the run ``seed``) plus ``dp_epsilon`` (None:
exact histograms; ε > 0: every client sends :func:`fedlib.privacy.laplace_counts` with noise
seed ``dp_seed``) — the meaning these two have in fedlib's methods; ``hyper dp_postprocess``
('clip' or 'round') is what the server does with noisy counts, as in the methods. ``run(grid,
initial_state, n_clients)`` runs inside a ServerApp and returns the outcome (see
:func:`fedlib.flower.simulate`); :meth:`from_spec` reads everything from a RunSpec.

The server learns, per client: its id, its label histogram (ε-DP noisy with ``dp_epsilon``),
its split sizes, the weights it trained when selected, and its correct test (and validation)
predictions for the final evaluation.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..evaluation import global_accuracy
from ..methods import FLConfig, make_hyper
from ..methods.clust_psi_pfl import cluster_clients
from ..methods.psi_pfl import best_candidate, candidate_thresholds, needs_validation, selected_clients
from ..noniid import psi
from ..privacy import postprocess_counts
from ..validation import check_int, check_number, check_seed, fail
from .exchange import evaluate_clients, exchange_counts, wait_for_nodes
from .fedavg_group import group_fedavg
from .records import record_to_state, state_to_record

__all__ = ["ClustPSIPFL", "PSIPFL", "FedAvg", "STRATEGIES"]

_DP_KEYS = ("dp_epsilon", "dp_seed")


class _Strategy:
    """Shared set-up: validated protocol, hyperparameters, seed and DP settings."""

    method = ""  # the fedlib method mirrored

    def __init__(self, *, hyper=None, fl=None, seed: int = 0, dp_epsilon: float | None = None, dp_seed: int = 0,
                 timeout: float = 3600.0):
        if hyper is not None and not isinstance(hyper, dict) and not dataclasses.is_dataclass(hyper):
            fail("hyper", f"a dict of {self.method}'s hyperparameters or its Hyper (or None)", hyper)
        values = dict(hyper or {}) if not dataclasses.is_dataclass(hyper) else {
            f.name: getattr(hyper, f.name) for f in dataclasses.fields(hyper)}
        for key in _DP_KEYS:  # the counts arrive noisy already: the method's own noise stays off
            values.pop(key, None)
        self.hp = make_hyper(self.method, values)
        if fl is not None and not isinstance(fl, (dict, FLConfig)):
            fail("fl", "a dict of training settings (fedlib.methods.FLConfig fields), an FLConfig or None", fl)
        self.cfg = fl if isinstance(fl, FLConfig) else FLConfig.from_dict(fl)
        if self.cfg.keep_optimizer_state:
            fail("fl keep_optimizer_state", "False for fedlib.flower (a simulated client keeps no state between "
                 "rounds)", True)
        if self.cfg.stream_average:
            fail("fl stream_average", "False for fedlib.flower (the server averages the models its clients send; "
                 "there is no engine chunk to fold in)", True)
        self.seed = check_seed(seed)
        self.dp_epsilon = check_number(dp_epsilon, "dp_epsilon", 0, low_open=True, optional=True)
        self.dp_seed = check_seed(dp_seed, "dp_seed")
        self.timeout = check_number(timeout, "timeout", 0, low_open=True)

    @classmethod
    def from_spec(cls, spec, **overrides):
        """The strategy for ``spec`` (its effective hyper and fl, its seed; ``dp_epsilon`` and
        ``dp_seed`` from its hyper when present); keyword ``overrides`` win."""
        from .setup import check_spec

        hyper, fl, _ = check_spec(spec).effective()
        if spec.method != cls.method:
            fail("spec.method", f"{cls.method!r} for {cls.__name__}", spec.method)
        dp = {k: hyper[k] for k in _DP_KEYS if k in hyper}
        return cls(**{"hyper": hyper, "fl": fl, "seed": int(spec.seed), **dp, **overrides})

    # ------------------------------------------------------------------ shared steps
    def _dp_info(self) -> dict:
        """``{'dp_epsilon': ε}`` (and ``dp_postprocess`` unless 'clip') when the counts were
        noised, as fedlib's info; else {}."""
        if self.dp_epsilon is None:
            return {}
        rule = self.hp.dp_postprocess
        return {"dp_epsilon": self.dp_epsilon, **({"dp_postprocess": rule} if rule != "clip" else {})}

    def _counts(self, grid, n_clients: int):
        """(node_of, counts as received (K, C), sizes, the counts the server uses: post-processed
        by ``hyper dp_postprocess`` when they are noisy, :func:`fedlib.privacy.postprocess_counts`)."""
        nodes = wait_for_nodes(grid, check_int(n_clients, "n_clients", 1), self.timeout)
        node_of, counts, sizes = exchange_counts(grid, nodes, self.dp_epsilon, self.dp_seed, self.timeout)
        used = counts if self.dp_epsilon is None else postprocess_counts(counts, self.hp.dp_postprocess)
        return node_of, counts, sizes, used

    def _fedavg(self, grid, node_of, group, initial_state, stream: str):
        """One FedAvg over ``group`` through Flower → (final state, selected per round, seconds)."""
        strategy = group_fedavg(node_of, group, seed=self.seed, stream=stream, fraction=self.cfg.fraction,
                                min_clients=self.cfg.min_clients)
        result = strategy.start(grid=grid, initial_arrays=state_to_record(initial_state),
                                num_rounds=self.cfg.rounds, timeout=self.timeout)
        return record_to_state(result.arrays), strategy.selected, strategy.train_seconds

    def _outcome(self, grid, node_of, sizes, states, assignment, counts, info, selected, seconds) -> dict:
        correct, n = evaluate_clients(grid, node_of, states, assignment, "test", self.timeout)
        out = {"method": self.method, "counts": counts, "assignment": np.asarray(assignment, dtype=np.int64),
               "models": {k: torch.stack([s[k] for s in states]) for k in states[0]},
               "correct": correct, "n_test": n, "global_accuracy": global_accuracy(correct, n),
               "selected": selected, "info": info, "train_seconds": seconds}
        if int(sizes["val"].sum()) > 0:
            out["val_correct"], out["n_val"] = evaluate_clients(grid, node_of, states, assignment, "val", self.timeout)
        return out

    def run(self, grid, initial_state: dict, n_clients: int) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError


class ClustPSIPFL(_Strategy):
    """Clust-PSI-PFL over Flower: counts → :func:`fedlib.methods.clust_psi_pfl.cluster_clients`
    (Algorithm 1) → one FedAvg per cluster (stream ``selection/group{g}``, as fedlib), each client
    evaluated with its cluster's model.

    ``run`` returns a dict: ``counts`` (K, C) as received, ``assignment`` (K,) cluster of each
    client, ``models`` stacked (τ, ...), ``correct``/``n_test`` (K,), ``global_accuracy``,
    ``selected`` [cluster][round] → client ids, ``info`` (τ, silhouettes, … as fedlib's record),
    ``train_seconds``; ``val_correct``/``n_val`` when the clients have a validation split."""

    method = "clust_psi_pfl"

    def run(self, grid, initial_state: dict, n_clients: int) -> dict:
        node_of, counts, sizes, used = self._counts(grid, n_clients)
        labels, info = cluster_clients(used, self.hp)
        info = {**info, **self._dp_info(), "assignment": labels.tolist()}
        states, selected, seconds = [], [], 0.0
        for g in range(int(labels.max()) + 1):
            state, picks, secs = self._fedavg(grid, node_of, np.flatnonzero(labels == g), initial_state,
                                              f"selection/group{g}")
            states.append(state)
            selected.append(picks)
            seconds += secs
        return self._outcome(grid, node_of, sizes, states, labels, counts, info, selected, seconds)


class PSIPFL(_Strategy):
    """PSI-PFL over Flower: counts → PSI (Eq. 1) → candidate thresholds (``hyper`` percentiles)
    → for each, FedAvg over the clients with PSI ≤ ζ (fedlib's ``selection/group0`` stream,
    restarted per candidate) → its model to every client; the candidate with the best
    accuracy on ``select_on`` ('val' or 'test') is kept (fedlib's :func:`best_candidate`).

    ``run`` returns ClustPSIPFL's keys for the chosen candidate (``assignment`` zeros, one
    model; ``selected`` [round] → client ids) and ``info`` as fedlib's (``psi``,
    ``candidates`` with each one's clients, accuracies and correct counts, ``chosen``,
    ``percentile``, ``threshold``, ``n_selected``, ``selected_on``)."""

    method = "psi_pfl"

    def run(self, grid, initial_state: dict, n_clients: int) -> dict:
        if self.hp.threshold_rule != "le":
            fail("threshold_rule", "'le' over Flower (threshold_rule='lt' runs on the in-process engine)",
                 self.hp.threshold_rule)
        node_of, counts, sizes, used = self._counts(grid, n_clients)
        if needs_validation(self.hp) and int(sizes["val"].sum()) == 0:
            fail("clients' validation split", "non-empty for select_on='val' (give the RunSpec val_fraction > 0, "
                 "or hyper select_on='test')", 0)
        psi_values = psi(used)
        thresholds = candidate_thresholds(psi_values, self.hp.percentiles)
        pools = [selected_clients(psi_values, z) for z in thresholds]
        zeros = np.zeros(len(counts), dtype=np.int64)
        candidates, runs = [], []
        for p, z, pool in zip(self.hp.percentiles, thresholds, pools):
            state, picks, secs = self._fedavg(grid, node_of, pool, initial_state, "selection/group0")
            out = self._outcome(grid, node_of, sizes, [state], zeros, counts, {}, picks, secs)
            entry = {"percentile": float(p), "threshold": float(z), "n_selected": int(pool.size),
                     "clients": pool.tolist(), "test_accuracy": out["global_accuracy"],
                     "test_correct": out["correct"].tolist()}
            if "val_correct" in out:
                entry["val_accuracy"] = global_accuracy(out["val_correct"], out["n_val"])
            candidates.append(entry)
            runs.append(out)
        chosen = 0 if len(candidates) == 1 else best_candidate(
            [c[f"{self.hp.select_on}_accuracy"] for c in candidates])
        out = runs[chosen]
        out["train_seconds"] = sum(r["train_seconds"] for r in runs)
        out["info"] = {"psi": psi_values.tolist(), "candidates": candidates, "chosen": chosen,
                       "percentile": candidates[chosen]["percentile"], "threshold": candidates[chosen]["threshold"],
                       "n_selected": candidates[chosen]["n_selected"], **self._dp_info(),
                       "selected_on": self.hp.select_on if len(candidates) > 1 else "fixed"}
        return out


class FedAvg(_Strategy):
    """Plain FedAvg over Flower with fedlib's sampling (stream ``selection/group0``) and
    averaging: fedlib's ``fedavg`` method. The counts exchange only maps client ids to nodes
    (its histograms are not used). Returns ClustPSIPFL's keys (one model)."""

    method = "fedavg"

    def run(self, grid, initial_state: dict, n_clients: int) -> dict:
        node_of, counts, sizes, _ = self._counts(grid, n_clients)
        state, picks, secs = self._fedavg(grid, node_of, np.arange(len(counts)), initial_state, "selection/group0")
        zeros = np.zeros(len(counts), dtype=np.int64)
        return self._outcome(grid, node_of, sizes, [state], zeros, counts, {}, picks, secs)


STRATEGIES = {s.method: s for s in (ClustPSIPFL, PSIPFL, FedAvg)}
