"""PSI-PFL (Jimenez G. et al., PSI-PFL paper Section 3): PSI-based client selection.

1. Every client's PSI (Eq. 1) against the pooled label distribution, from the label counts of
   the clients' train splits (:func:`fedlib.noniid.psi`).
2. Candidate thresholds ζ = the 10/25/50/75/90th percentiles of those PSI values (numpy's
   linear interpolation, as the authors' code) — :func:`candidate_thresholds`.
3. For each candidate, the clients with PSI ≤ ζ (:func:`selected_clients`) train FedAvg (q of
   **them** per round, sample-weighted average); the final model goes to **every** client.
   "≤ ζ" is the authors' code (``../shared/reference-notes.md``, "PSI-PFL client selection");
   the text says PSI "below" the threshold, i.e. < ζ. The two differ exactly when a client's PSI
   equals ζ, which ties make common: clients with the same label histogram have the same PSI
   (e.g. every single-class client of a binary task at small α), and a percentile of tied values
   is that value (adult at α = 0.3 has identical 50th and 75th percentiles). ``threshold_rule``
   selects the reading ('le', the default: the code; 'lt': the text); under 'lt' a candidate
   that would select no client (ζ = the smallest PSI) is not trained and is listed in
   ``info['empty_candidates']``. :func:`rule_changes` says, per candidate, whether the reading
   changes the selection (notebook 07 shows it for every run).
4. The candidate with the highest global accuracy (sample-weighted over all clients) is kept
   (:func:`best_candidate`; ties: the lower percentile).

Two further differences from the authors' protocol (issue 69), both selectable: (a) the authors
choose ζ once per partition, with their seeds varying only training (one partition, several
training seeds); the workbook's seeds vary the partition and the training together (the run seed
draws both), and its choice is per run (``select_on``) or per setting over those seeds
(:func:`workbook.psi_pfl_study.authors_zeta_choice`); (b) the authors' default percentile list is
"10,25,50" (three candidates), the workbook's the paper's Section 3 list 10/25/50/75/90. The
authors' list is the reading ``percentiles=AUTHORS_PERCENTILES`` ((10, 25, 50)); a fixed
partition across seeds is not a reading (the partition seed is the run seed).

Departure from the authors' protocol, and why: their code picks the threshold by the test
accuracy it then reports (Section 3, step 3: "Select the optimal threshold based on the
highest value of our chosen performance metric"), which makes the reported number an
optimistic maximum over five test evaluations. Here the default selects on the clients'
**validation** split (``select_on='val'``; a run needs ``RunSpec(val_fraction > 0)``), and
the record says which split chose (``info['selected_on']``). ``select_on='test'`` picks the
best test candidate of the one run, a per-seed best; the authors' ``main.py`` instead picks one
percentile per setting by the best mean test accuracy over its seeds, dropping duplicate
thresholds. The workbook rebuilds that variant from the validation-selected records
(:func:`workbook.psi_pfl_study.authors_zeta_choice`), labelled as the paper's.

Every candidate's validation and test accuracy, its selected clients and its per-client test
correct counts are recorded (``info['candidates']``), so Fig. 5 (accuracy per percentile) and
either selection rule can be rebuilt from one record without retraining. Each candidate is an
independent FedAvg run from the same seeded initial model and the same client-sampling stream
as FedAvg: a threshold that selects every client reproduces FedAvg exactly.

Scheduling (``train_candidates``). On a GPU the five candidates train side by side: every round
all their clients go through one engine call, each row from its candidate's model
(:func:`~fedlib.methods.base.global_model_runs_together`): one wide call instead of five narrow
ones (``benchmarks/psi_pfl_schedule.py --device cuda`` measures the gain). One by one, a PSI-PFL
run costs about the GPU time of five FedAvg runs of the same protocol. The same clients, batch orders and
evaluations either way; the weights agree up to kernel rounding. On the CPU (cost per client
step either way) 'auto' keeps one by one, the schedule of the committed CPU records.

What the server learns. Steps 1–2 need, from every client, only its label histogram (the
counts of its train split, ``ctx.counts_train``): the PSI values, the thresholds and the
selected clients are functions of these histograms alone (step 3 also sends the selected
clients' trained weights and every client's correct predictions). A histogram is itself
sensitive. With ``dp_epsilon`` = ε > 0 every client sends an ε-DP histogram instead — Laplace(1/ε)
noise on each count, clipped at zero, client i's noise from ``default_rng([dp_seed, i])``
(:func:`fedlib.privacy.noisy_label_counts`) — and steps 1–2 use those noisy counts, post-processed
by the server as ``dp_postprocess`` says ('clip' or 'round', :func:`fedlib.privacy.postprocess_counts`) (training
still uses the clients' real data); ``info['psi']`` is then the noisy PSI the server computed
and ``info['dp_epsilon']`` records ε. ``dp_epsilon=None`` (the default) adds no noise: results
are identical, bit for bit, to a run without the option.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..evaluation import global_accuracy
from ..noniid import psi
from ..privacy import POSTPROCESS, server_histograms
from ..validation import check_choice, check_number, check_seed, fail
from .base import Context, Outcome, global_model_rounds, global_model_runs_together
from .contract import MethodInfo

NAME = "psi_pfl"
PERCENTILES = (10, 25, 50, 75, 90)  # Section 3, step 2
AUTHORS_PERCENTILES = (10, 25, 50)  # the authors' code's default percentile list ("10,25,50"; issue 69)
GRID: dict = {}  # the threshold search is part of the method (every candidate is trained)
THRESHOLD_RULES = ("le", "lt")  # PSI ≤ ζ (the authors' code) / PSI < ζ (the text's "below")
TRAIN_CANDIDATES = ("auto", "together", "one_by_one")  # how the candidates' FedAvg runs are scheduled


@dataclass(frozen=True)
class Hyper:
    """percentiles: the candidate thresholds' PSI percentiles (one value: a fixed threshold,
    no selection); select_on: the split that chooses among them ('val', or 'test' — the
    paper's, optimistic); dp_epsilon: None (exact label counts) or ε > 0 (the server sees
    ε-DP noisy counts, :mod:`fedlib.privacy`); dp_seed: the noise seed; dp_postprocess: what
    the server does with noisy counts ('clip': as received, 'round': rounded to integers);
    threshold_rule: 'le' (PSI ≤ ζ trains, the authors' code) or 'lt' (PSI < ζ, the text's
    "below"); train_candidates: how the candidates' FedAvg runs are scheduled, not what they
    compute — 'one_by_one', 'together' (every round all candidates' clients in one engine call,
    :func:`~fedlib.methods.base.global_model_runs_together`), or 'auto' (together on a GPU,
    where one wide call replaces five narrow ones; one by one on the CPU, whose cost is per
    client step either way and whose committed records were computed so)."""

    percentiles: tuple = PERCENTILES
    select_on: str = "val"
    dp_epsilon: float | None = None
    dp_seed: int = 0
    dp_postprocess: str = "clip"
    threshold_rule: str = "le"
    train_candidates: str = "auto"

    def __post_init__(self):
        p = self.percentiles
        if isinstance(p, (str, bytes)) or not isinstance(p, (list, tuple)) or len(p) == 0:
            fail("percentiles", "a non-empty list of numbers in [0, 100], e.g. [10, 25, 50, 75, 90]", p)
        for value in p:
            check_number(value, "percentiles", 0, 100)
        if len(set(p)) != len(p):
            fail("percentiles", "distinct values", p)
        object.__setattr__(self, "percentiles", tuple(p))  # a list from a params file
        check_choice(self.select_on, "select_on", ("val", "test"))
        check_number(self.dp_epsilon, "dp_epsilon", 0, low_open=True, optional=True)
        check_seed(self.dp_seed, "dp_seed")
        check_choice(self.dp_postprocess, "dp_postprocess", POSTPROCESS)
        check_choice(self.threshold_rule, "threshold_rule", THRESHOLD_RULES)
        check_choice(self.train_candidates, "train_candidates", TRAIN_CANDIDATES)


def candidate_thresholds(psi_values, percentiles=PERCENTILES) -> np.ndarray:
    """ζ_p = the p-th percentile of the clients' PSI (linear interpolation).

    Parameters
    ----------
    psi_values : array-like, shape (K,), finite
    percentiles : sequence of numbers in [0, 100], shape (P,)

    Returns
    -------
    ndarray, shape (P,), float64
    """
    v = np.asarray(psi_values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        fail("psi_values", "a non-empty 1-D array of finite PSI values", psi_values)
    for p in np.atleast_1d(percentiles):
        check_number(p, "percentiles", 0, 100)
    return np.percentile(v, np.asarray(percentiles, dtype=np.float64))


def _selection(psi_values, threshold, rule: str) -> np.ndarray:
    """Ids (ascending, possibly empty) of the clients with PSI ≤ ζ ('le') or PSI < ζ ('lt')."""
    check_choice(rule, "threshold_rule", THRESHOLD_RULES)
    v = np.asarray(psi_values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        fail("psi_values", "a non-empty 1-D array of finite PSI values", psi_values)
    check_number(threshold, "threshold")
    return np.flatnonzero(v <= threshold if rule == "le" else v < threshold).astype(np.int64)


def selected_clients(psi_values, threshold: float, rule: str = "le") -> np.ndarray:
    """Ids of the clients with PSI ≤ ``threshold`` (``rule='le'``, the authors' code) or PSI <
    ``threshold`` (``'lt'``, the text's "below"); shape (M,), ascending. An empty selection is
    an error: no client would train."""
    chosen = _selection(psi_values, threshold, rule)
    if chosen.size == 0:
        v = np.asarray(psi_values, dtype=np.float64)
        need = "≥" if rule == "le" else ">"
        fail("threshold", f"{need} the smallest client PSI ({v.min():.6g}) so that some client trains "
                          f"(threshold_rule={rule!r})", float(threshold))
    return chosen


def rule_changes(psi_values, thresholds) -> list[dict]:
    """Whether reading "PSI below ζ" as ≤ or as < changes each candidate's selection.

    Parameters
    ----------
    psi_values : array-like, shape (K,), finite
    thresholds : array-like, shape (P,): the candidates ζ (:func:`candidate_thresholds`)

    Returns
    -------
    list of P dicts: ``threshold``, ``n_le`` and ``n_lt`` (clients selected under each
    reading), ``n_at`` (clients whose PSI equals ζ: the ones the readings disagree on) and
    ``changed`` (n_at > 0).
    """
    out = []
    for z in np.atleast_1d(np.asarray(thresholds, dtype=np.float64)):
        le, lt = _selection(psi_values, z, "le"), _selection(psi_values, z, "lt")
        out.append({"threshold": float(z), "n_le": int(le.size), "n_lt": int(lt.size),
                    "n_at": int(le.size - lt.size), "changed": bool(le.size != lt.size)})
    return out


def best_candidate(scores) -> int:
    """Position of the highest score (shape (P,)); ties go to the earlier (lower) percentile."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        fail("scores", "a non-empty 1-D array", scores)
    return int(np.argmax(s))


def server_counts(counts_train, hp: Hyper):
    """The label counts (K, C) the server computes PSI from: ``counts_train`` itself when
    ``hp.dp_epsilon`` is None, else :func:`fedlib.privacy.server_histograms` (counts_train,
    hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess)."""
    return server_histograms(counts_train, hp.dp_epsilon, hp.dp_seed, hp.dp_postprocess)


def needs_validation(hp: Hyper) -> bool:
    """Whether a run needs the clients' validation split (checked by RunSpec.validate before
    any training): to choose among several thresholds on it."""
    return hp.select_on == "val" and len(hp.percentiles) > 1


def _together(hp: Hyper, device, keep_optimizer_state: bool) -> bool:
    """Whether the candidates train side by side (``hp.train_candidates``; 'auto': off the CPU
    (a GPU), unless the clients keep their optimiser states between rounds)."""
    if hp.train_candidates == "auto":
        return torch.device(device).type != "cpu" and not keep_optimizer_state
    return hp.train_candidates == "together"


def _train_candidates(ctx: Context, pools, together: bool) -> tuple[list[Outcome], list[list]]:
    """Each candidate's FedAvg run on its pool, from the seeded initial model, sampling with a
    fresh generator of FedAvg's stream (a pool of every client is FedAvg); its outcome and
    its per-round evaluations."""
    if together:
        ctx.restart()
        return global_model_runs_together(ctx, pools, [ctx.rng("selection/group0") for _ in pools])
    outcomes, histories = [], []
    for pool in pools:
        ctx.restart()
        outcomes.append(global_model_rounds(ctx, pool=pool))  # FedAvg's stream: ζ selecting everyone is FedAvg
        histories.append(ctx.history)
    return outcomes, histories


def run(ctx: Context, hp: Hyper) -> Outcome:
    if needs_validation(hp) and int(ctx.fed.n_val.sum()) == 0:
        raise ValueError("psi_pfl selects its threshold on the validation split (select_on='val'), but the "
                         "federation has none: give the run a validation split (RunSpec val_fraction > 0, "
                         "e.g. 0.1) or pass hyper select_on='test' (the paper's test-set selection)")
    psi_values = psi(server_counts(ctx.counts_train, hp))
    thresholds = candidate_thresholds(psi_values, hp.percentiles)
    percentiles, thresholds, empty = list(hp.percentiles), list(thresholds), []
    if hp.threshold_rule == "lt":  # ζ = the smallest PSI selects nobody under "below": not trained
        keep = [_selection(psi_values, z, "lt").size > 0 for z in thresholds]
        empty = [float(p) for p, k in zip(percentiles, keep) if not k]
        if not any(keep):
            fail("threshold_rule", "'le' here: every client has the same PSI, so PSI < ζ selects no client "
                                   "at any candidate", hp.threshold_rule)
        percentiles = [p for p, k in zip(percentiles, keep) if k]
        thresholds = [z for z, k in zip(thresholds, keep) if k]
    pools = [selected_clients(psi_values, z, hp.threshold_rule) for z in thresholds]  # checked before training
    outcomes, histories = _train_candidates(ctx, pools, _together(hp, ctx.fed.device, ctx.cfg.keep_optimizer_state))
    candidates = []
    for p, z, pool, out in zip(percentiles, thresholds, pools, outcomes):
        test_correct, n_test = ctx.evaluate(out.models, out.assignment)
        entry = {"percentile": float(p), "threshold": float(z), "n_selected": int(pool.size),
                 "clients": pool.tolist(), "test_accuracy": global_accuracy(test_correct, n_test),
                 "test_correct": test_correct.tolist()}
        if int(ctx.fed.n_val.sum()) > 0:
            val_correct, n_val = ctx.evaluate(out.models, out.assignment, "val")
            entry["val_accuracy"] = global_accuracy(val_correct, n_val)
        candidates.append(entry)
    chosen = 0 if len(candidates) == 1 else best_candidate([c[f"{hp.select_on}_accuracy"] for c in candidates])
    out = outcomes[chosen]
    ctx.history = histories[chosen]
    out.info.update({"psi": psi_values.tolist(), "candidates": candidates, "chosen": chosen,
                     "percentile": candidates[chosen]["percentile"], "threshold": candidates[chosen]["threshold"],
                     "n_selected": candidates[chosen]["n_selected"],
                     "selected_on": hp.select_on if len(hp.percentiles) > 1 else "fixed"})
    if hp.threshold_rule != "le":  # records of the default keep their old keys
        out.info.update(threshold_rule=hp.threshold_rule, empty_candidates=empty)
    if hp.dp_epsilon is not None:
        out.info["dp_epsilon"] = float(hp.dp_epsilon)
        if hp.dp_postprocess != "clip":
            out.info["dp_postprocess"] = hp.dp_postprocess
    return out


# all its training goes through global_model_rounds (FLConfig.stream_average)
INFO = MethodInfo(NAME, "PSI-PFL", Hyper, run, grid=GRID, streams_average=True, resumable=True,
                  needs_validation=needs_validation)
