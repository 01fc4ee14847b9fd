"""Notebook 11's designs and what each ranking rests on (issue 58), built on
:mod:`workbook.cross_paper` (the grid, the per-run frame) and
:mod:`workbook.ranking_power` (plateau rule, τ, CD, cost).

**Readings of the committed grid** (R = 10, one seed: the *budget* reading):

* :func:`budget_rankings` — the ranking at round R − 1 and at R from each run's ``history``, with
  Kendall's τ between them: how much one more round moves the order;
* :func:`metric_rankings` — one ranking per metric (:data:`RANKED_METRICS`: weighted local
  accuracy, official-test accuracy, worst-10 % clients), each with N, k, Friedman's p, the Nemenyi
  CD, τ against the weighted-local ranking and the leave-one-block-out τ;
* :func:`which_method_when_official` — the per-partition "which method when" under the
  official-test accuracy (each client's model on the official test set; the clients as blocks);
  the module :func:`workbook.cross_paper.which_method_when` gives it under local accuracy.

**Designs not run yet** (:data:`DESIGNS`: params files of notebook 11 under ``params/designs/``):

* ``pilot`` — FedAvg and Local only, 3 seeds, R = 200 on the seven seed-paper partitions: where
  their accuracy plateaus (:data:`workbook.ranking_power.PLATEAU_RULE`);
  :func:`workbook.ranking_power.choose_rounds` turns the pilot's records into R;
* ``converged`` — every method, 3 seeds, at the R the pilot gives (the file holds R = 100 until the
  pilot is run; :func:`rounds_check` compares);
* ``focused_*`` — the five seed-paper methods + FedAvg, Local and FedFomo (k = 8) on more levels of
  each rule and K ∈ {20, 100}, on FMNIST and on adult (the label rules that apply to its 2 classes,
  every method with one MLP, ``arch: mlp``: adult's default logistic regression has no layer before
  the classifier for FedPrism's prototype; Dirichlet α ≤ 0.3 only at K = 20, infeasible at K = 100):
  N blocks = (data set, K, partition).
  :func:`design_table` gives each design's N, k, runs, the Nemenyi CD by the formula and the
  CPU-hours: each run at the measured CPU time a round (``cpu_seconds``: the one estimator,
  :mod:`fedlib.cost`, divided by the rounds: :func:`workbook.ranking_power.cost_per_run`) of its own
  (data set, K, ``n_train``, model, method) — :func:`cost_kind` — × its R. FMNIST at K = 100 is
  measured by the budget grid's records (R = 10); FMNIST at K = 20 and adult at K = 20 and 100 by
  the cost probes (:data:`PROBES`: one partition, one seed, R = 3, every method of the focused
  designs). Both are upper bounds a round: a run's fixed costs (data, partition, evaluation) are
  spread over its 10 or 3 rounds, not over a design's 100. A kind no record measures is charged at
  its method's highest measured rate, and the row's ``cost_basis`` says so.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fedlib import cost
from fedlib.methods import display_name
from fedlib.paths import ROOT
from fedlib.validation import check_choice, fail
from . import cross_paper as X
from . import ranking_power as RP

__all__ = ["RANKED_METRICS", "DESIGNS", "PROBES", "COST_DESIGNS", "RANKING_DESIGNS", "cost_kind", "rates",
           "measured_rates", "FOCUSED", "FOCUSED_METHODS", "block_of", "budget_rankings", "metric_rankings",
           "which_method_when_official", "long_horizon_convergence", "design_specs", "PREREGISTERED", "SEED_PAPER_METHODS",
           "design_statement", "preregistered_results", "paper_profile", "measurable", "design_table", "rounds_check", "converged_vs_budget", "run_commands"]

RANKED_METRICS = ("weighted_local", "official_test", "worst10")
"""The three metrics ranked (keys of :data:`workbook.cross_paper.METRICS`)."""

DESIGNS = {
    "budget": "params/paper/11_cross_paper.yaml",
    "pilot": "params/designs/11_cross_paper_pilot.yaml",
    "converged": "params/designs/11_cross_paper_converged.yaml",
    "focused_fmnist_k100": "params/designs/11_cross_paper_focused_fmnist_k100.yaml",
    "focused_fmnist_k20": "params/designs/11_cross_paper_focused_fmnist_k20.yaml",
    "focused_adult_k20": "params/designs/11_cross_paper_focused_adult_k20.yaml",
    "focused_adult_k100": "params/designs/11_cross_paper_focused_adult_k100.yaml",
    "preregistered": "params/designs/11_cross_paper_preregistered.yaml",
    **{p: f"params/designs/11_cross_paper_{p}.yaml"
       for p in ("cost_probe_fmnist_k20", "cost_probe_adult_k20", "cost_probe_adult_k100")},
}
"""Notebook 11's designs by name: a params file each (run with ``python -m fedlib.grid cross-paper
--params FILE --out FOLDER``)."""
PROBES = ("cost_probe_fmnist_k20", "cost_probe_adult_k20", "cost_probe_adult_k100")
"""Cost probes, not ranking designs (issue 70): each method of :data:`FOCUSED_METHODS` for R = 3 on one
partition of a (data set, K) the focused designs use and the budget grid does not measure, so that
:func:`design_table` prices those blocks at their own measured CPU time a round."""
COST_DESIGNS = ("budget", *PROBES)
"""The designs whose records price runs (:func:`measured_rates`)."""
RANKING_DESIGNS = tuple(d for d in DESIGNS if d not in PROBES)
"""The designs that rank methods: :func:`design_table`'s and :func:`measurable`'s default."""
FOCUSED = ("focused_fmnist_k100", "focused_fmnist_k20", "focused_adult_k20", "focused_adult_k100")
FOCUSED_METHODS = ("clust_psi_pfl", "psi_pfl", "cafa", "fedprism", "pfedlia", "fedavg", "local", "fedfomo")
RECORDS_OF = {"budget": "benchmarks/records/cross_paper", "pilot": "benchmarks/records/cross_paper_pilot",
              "converged": "benchmarks/records/cross_paper_converged",
              **{d: "benchmarks/records/cross_paper_focused" for d in FOCUSED},
              "preregistered": "benchmarks/records/cross_paper_preregistered",
              **{p: "benchmarks/records/cross_paper_cost_probe" for p in PROBES}}
PREREGISTERED = "preregistered"
"""Issue 70's design, stated before it is computed (its params file's header): k = 7, N = 11 distinct FMNIST
label-skew partitions, one seed, R = 30; Friedman / Nemenyi and the pre-registered comparisons
(:func:`preregistered_results`)."""
SEED_PAPER_METHODS = ("clust_psi_pfl", "psi_pfl", "cafa", "fedprism", "pfedlia")
"""The five seed papers' methods: each is compared with FedAvg and with Local (pre-registered)."""


def block_of(record: dict) -> str:
    """A run's block across designs: ``dataset/K/partition`` (e.g. ``fmnist/K=100/dirichlet_0.3``)."""
    s = record["spec"]
    return f"{s['dataset']}/K={s['n_clients']}/{X.partition_of(s['protocol'], s['level'])}"


def _partition(record: dict) -> str:
    return X.partition_of(record["spec"]["protocol"], record["spec"]["level"])


# ----------------------------------------------------------------------------- readings of a grid
def budget_rankings(records, *, exclude=X.REFERENCES) -> dict:
    """The ranking (mean ranks over the partitions, weighted local accuracy from each run's history)
    at the last round R and at R − 1, and Kendall's τ between them; also the per-run step between
    the two rounds. Returns ``{'R', 'at_R', 'at_R_minus_1', 'tau', 'steps_pp', 'left_out'}`` (τ is over
    the methods ranked at both rounds; ``left_out``: those without an evaluation at R − 1 on every
    partition, e.g. a method whose history holds its last round only)."""
    rounds = {len(r.get("history", [])) for r in records if r.get("status") == "ok"}
    R = max(rounds) if rounds else 0
    if R < 2:
        fail("records", "finished runs with a history of ≥ 2 rounds", sorted(rounds))
    at_r = RP.score_at_round(records, R, _partition)
    before = RP.score_at_round(records, R - 1, _partition)
    mr, mr1 = RP.mean_ranks(at_r, exclude=exclude), RP.mean_ranks(before, exclude=exclude)
    steps = (at_r - before).abs().stack()
    left_out = sorted(set(mr.index) - set(mr1.index))  # no evaluation at R − 1 (e.g. evaluated at the end only)
    return {"R": R, "at_R": mr, "at_R_minus_1": mr1, "tau": RP.kendall_tau(mr, mr1), "steps_pp": steps,
            "left_out": left_out}


def metric_rankings(df: pd.DataFrame, *, exclude=X.REFERENCES, alpha: float = X.ALPHA,
                    metrics=RANKED_METRICS) -> pd.DataFrame:
    """One row per metric of ``metrics`` over :func:`workbook.cross_paper.runs_frame`'s
    ``df``: ``metric``, ``n`` blocks, ``k`` methods, ``friedman_p``, ``cd`` (Nemenyi), ``test``,
    ``within_cd`` (methods within CD of the best), ``best``, ``tau_vs_weighted_local``, the
    split-half τ (:func:`workbook.ranking_power.split_half_tau`: ``split_half_median``,
    ``split_half_min``, ``splits``) and its null's 95th percentile of the median
    (``null_median_95``: random rankings, the same k and N, 1,000 tables, seed 0), the seeds per
    block (``seeds_min``), and ``ranks`` (the mean ranks, a Series)."""
    base = RP.mean_ranks(X.score_table(df, "weighted_local"), exclude=exclude)
    ok = df[df.status == "ok"]
    seeds = ok.groupby(["partition", "method"]).seed.nunique()
    rows = []
    for m in metrics:
        check_choice(m, "metrics", tuple(X.METRICS))
        scores = X.score_table(df, m)
        power = RP.ranking_power(scores, exclude=exclude, alpha=alpha)
        ranks = RP.mean_ranks(scores, exclude=exclude)
        halves = RP.split_half_tau(scores, exclude=exclude)
        null = RP.split_half_null(power.k, power.n, n_sim=1000, seed=0)
        rows.append({"metric": m, "n": power.n, "k": power.k, "friedman_p": power.p, "cd": power.cd,
                     "test": power.test, "within_cd": power.within_cd_of_best, "best": ranks.index[0],
                     "tau_vs_weighted_local": RP.kendall_tau(base, ranks),
                     "split_half_median": float(np.nanmedian(halves)), "split_half_min": float(np.nanmin(halves)),
                     "splits": int(halves.size), "null_median_95": float(null["median"].quantile(0.95)),
                     "seeds_min": int(seeds.min()) if len(seeds) else 0, "ranks": ranks})
    return pd.DataFrame(rows)


def which_method_when_official(records, *, alpha: float = X.ALPHA, exclude=X.REFERENCES) -> pd.DataFrame:
    """:func:`workbook.cross_paper.which_method_when` under the official-test accuracy: per
    partition, the clients as blocks (each client's model on the official test set, every seed's
    clients), Friedman then Nemenyi at ``alpha``; the same columns."""
    records = [r for r in records if r.get("status") == "ok" and "global_test_correct" in r]
    rows = []
    for p in X.PARTITIONS:
        here = [r for r in records if _partition(r) == p]
        if not here:
            continue
        methods = [m for m in X.METHODS if m not in exclude and any(r["spec"]["method"] == m for r in here)]
        data = RP.client_blocks(here, methods, "official_test")
        if len(methods) < 3 or len(data) < 5:
            rows.append({"partition": p, "best": None, "not_worse": [], "friedman_p": np.nan, "cd": np.nan,
                         "n_blocks": len(data), "n_methods": len(methods), "left_out": []})
            continue
        res = X._autorank(data, alpha)
        ranks = res.rankdf.meanrank.sort_values()
        best = ranks.index[0]
        rows.append({"partition": p, "best": best, "not_worse": [m for m in ranks.index if ranks[m] - ranks[best] <= res.cd],
                     "friedman_p": res.pvalue, "cd": res.cd, "n_blocks": len(data), "n_methods": len(methods),
                     "left_out": []})
    return pd.DataFrame(rows, columns=["partition", "best", "not_worse", "friedman_p", "cd", "n_blocks",
                                       "n_methods", "left_out"])


def long_horizon_convergence(root=None, *, dataset: str = "fmnist", methods=("fedavg", "local"),
                             min_rounds: int = 40) -> pd.DataFrame:
    """The plateau rule on every committed record of ``methods`` on ``dataset`` trained for ≥
    ``min_rounds`` rounds (the reproduction folders under ``root``, default
    ``benchmarks/records``): one row per (folder, protocol, level, K, E, method) with ``seeds``,
    ``R``, ``evaluations`` per run, the plateau rounds and the readings of
    :func:`workbook.ranking_power.convergence_table`. Their protocols differ from notebook
    11's (all data, E = 5 or 10): where *they* plateau, not where notebook 11's runs would."""
    from fedlib.grid import load_records

    root = ROOT / "benchmarks" / "records" if root is None else root
    recs = []
    for folder in sorted({p.parent for p in root.rglob("*.json")}):
        rel = folder.relative_to(root).as_posix()
        if rel.startswith(("cross_paper", "beyond_label", "cross_cpu", "speed", "cafa/cbcc")):
            continue
        for r in load_records(folder):
            s = r.get("spec", {})
            if (r.get("status") == "ok" and s.get("method") in methods and s.get("dataset") == dataset
                    and ((s.get("fl") or {}).get("rounds") or 0) >= min_rounds):
                recs.append({**r, "_folder": rel})

    def key(r):
        s = r["spec"]
        return f"{r['_folder']}|{s['protocol']}|{s['level']:g}|{s['n_clients']}|{s['fl'].get('local_epochs', 1)}"

    t = RP.convergence_table(recs, key)
    if t.empty:
        return pd.DataFrame(columns=["folder", "protocol", "level", "K", "E", "method", "seeds", "R", "evaluations",
                                     "plateaus", "readings"])
    out = t.groupby(["block", "method"], sort=True).agg(
        seeds=("seed", "size"), R=("R", "max"), evaluations=("evaluations", "max"),
        plateaus=("plateau", lambda v: ", ".join("—" if np.isnan(x) else f"{x:.0f}" for x in v)),
        readings=("reading", lambda v: "; ".join(sorted(set(v))))).reset_index()
    parts = out.block.str.split("|", expand=True)
    out.insert(0, "folder", parts[0])
    out.insert(1, "protocol", parts[1])
    out.insert(2, "level", parts[2])
    out.insert(3, "K", parts[3].astype(int))
    out.insert(4, "E", parts[4].astype(int))
    return out.drop(columns="block")


# ----------------------------------------------------------------------------- designs
def _params(design: str) -> dict:
    from fedlib.grid_cli import load_params
    from .paper_tables import TABLES

    check_choice(design, "design", tuple(DESIGNS))
    return load_params(next(t for t in TABLES if t.name == "cross-paper"), ROOT / DESIGNS[design])


def design_specs(design: str) -> list:
    """The RunSpecs of ``design`` (a key of :data:`DESIGNS`), from its params file."""
    p = _params(design)
    return X.notebook_grid(**{k: p[k] for k in X.GRID_PARAMS})["cross"]


def cost_kind(spec) -> str:
    """What a run's CPU time a round depends on besides its method: ``'DATASET/K=K/n_train=N/arch=A'``
    (e.g. ``'fmnist/K=20/n_train=12000/arch=default'``; ``n_train=all``: every row). ``spec``: a RunSpec
    or a record's ``spec`` dict."""
    get = spec.get if isinstance(spec, dict) else (lambda k: getattr(spec, k))
    n = get("n_train")
    return (f"{get('dataset')}/K={get('n_clients')}/n_train={'all' if n is None else n}"
            f"/arch={get('arch') or 'default'}")


def _kind_label(kind: str, full: bool = False) -> str:
    """``'fmnist/K=20/n_train=12000/arch=default'`` → ``'fmnist K = 20'`` (``full``: ``'fmnist K = 20,
    n_train 12000, arch default'``)."""
    ds, k, n, arch = kind.split("/")
    short = f"{ds} K = {k[2:]}"
    return f"{short}, {n.replace('=', ' ')}, {arch.replace('=', ' ')}" if full else short


def rates(records) -> pd.Series:
    """The measured CPU seconds a round of the finished ``records`` per (:func:`cost_kind`, method): a
    Series on a two-level index, by :func:`workbook.ranking_power.cost_per_run` (its ``attrs``: each
    rate's ``basis`` and the ``rounds`` its records ran)."""
    return RP.cost_per_run(records, lambda r: (cost_kind(r["spec"]), r["spec"]["method"]))


def measured_rates(root=None) -> pd.Series:
    """:func:`rates` of the committed records of :data:`COST_DESIGNS` under ``root`` (default the
    checkout): the budget grid (FMNIST, K = 100, R = 10) and the cost probes (:data:`PROBES`, R = 3)."""
    from fedlib.experiment import present_records

    root = ROOT if root is None else root
    found = [r for d in COST_DESIGNS for r in present_records(design_specs(d), root / RECORDS_OF[d])[0]]
    return rates(found)


def _price(spec, per_round: pd.Series):
    """(seconds a round, None) at ``spec``'s own (kind, method) rate; (seconds, kind) at its method's
    highest rate among the kinds measured when its own is not (a labelled fallback); (None, None)
    when ``per_round`` has no rate of its method."""
    kind, m = cost_kind(spec), spec.method
    if per_round.empty:
        return None, None
    if (kind, m) in per_round.index:
        return float(per_round[(kind, m)]), None
    alt = per_round[per_round.index.get_level_values(1) == m]
    if alt.empty:
        return None, None
    at = alt.idxmax()
    return float(alt[at]), at[0]


def _check_rates(per_round: pd.Series) -> None:
    if not per_round.empty and (not isinstance(per_round.index, pd.MultiIndex) or per_round.index.nlevels != 2):
        fail("per_round", "CPU seconds a round per (cost_kind, method) (a two-level index: rates(records))",
             type(per_round.index).__name__)


def measurable(per_round: pd.Series, designs=None) -> tuple[list[str], dict]:
    """The designs (of ``designs``, default :data:`RANKING_DESIGNS`) whose every run has a price in
    ``per_round`` (:func:`rates`: its own kind's rate or its method's at another kind), and for the
    others the methods without any rate."""
    _check_rates(per_round)
    ok, missing = [], {}
    for d in designs or RANKING_DESIGNS:
        lack = sorted({s.method for s in design_specs(d) if _price(s, per_round)[0] is None})
        (missing.__setitem__(d, lack) if lack else ok.append(d))
    return ok, missing


def design_table(per_round: pd.Series, designs=None, alpha: float = X.ALPHA) -> pd.DataFrame:
    """One row per design (:data:`RANKING_DESIGNS`, or ``designs``) and a ``focused (all)`` row for the
    focused files together: ``blocks`` N (data set × K × partition), ``k`` methods ranked
    (references aside), ``seeds``, ``R``, ``runs``, ``nemenyi_cd`` (:func:`workbook.ranking_power.nemenyi_cd`,
    NaN for k < 2) and ``cpu_hours``: each run at the measured CPU seconds a round of its own
    (data set, K, n_train, model, method) (``per_round``, :func:`rates` — :func:`measured_rates` for the
    committed records), × its R. ``cost_basis`` says what is measured, from runs of how many rounds
    (a rate from runs shorter than the design's R is an upper bound: their fixed costs — data,
    partition, evaluation — over fewer rounds; the cost probes' R = 3 most of all), and names the
    kinds no record measures: charged at their method's highest measured rate (a fallback)."""
    _check_rates(per_round)
    ran, bases = per_round.attrs.get("rounds", {}), per_round.attrs.get("basis", {})
    rows = []
    designs = list(designs or RANKING_DESIGNS)

    def basis(specs, priced):
        measured, charged, used = {}, {}, set()
        for s, (_, at) in zip(specs, priced):
            kind = cost_kind(s)
            key = (kind, s.method) if at is None else (at, s.method)
            used.add(key)
            if at is None:
                measured.setdefault(ran.get(key), set()).add(_kind_label(kind))
            else:
                charged.setdefault(_kind_label(kind, full=True), set()).add(_kind_label(at, full=True))
        parts = []
        if measured:
            runs = "; ".join(f"{', '.join(sorted(k))} from {r}-round runs" if r else ", ".join(sorted(k))
                             for r, k in sorted(measured.items(), key=lambda kv: -(kv[0] or 0)))
            short = min(r or 0 for r in measured) < max(s.fl["rounds"] for s in specs)
            parts.append(f"measured: CPU time a round per (data set, K, method) × R ({runs})"
                         + (": an upper bound, fixed costs over fewer rounds" if short else ""))
        for kind, at in sorted(charged.items()):
            parts.append(f"not measured for {kind}: charged at its method's highest measured rate "
                         f"({', '.join(sorted(at))})")
        other = sorted({bases[k] for k in used if k in bases} - {cost.CPU_SECONDS})
        if other:
            parts.append("priced by " + ", ".join(other))
        return "; ".join(parts)

    def row(name, specs):
        blocks = {(s.dataset, s.n_clients, X.partition_of(s.protocol, s.level)) for s in specs}
        ranked = sorted({s.method for s in specs} - set(X.REFERENCES))
        priced = [_price(s, per_round) for s in specs]
        missing = sorted({s.method for s, (sec, _) in zip(specs, priced) if sec is None})
        if missing:
            fail("per_round", f"a measured cost for every method of design {name}", missing)
        secs = sum(sec * s.fl["rounds"] for s, (sec, _) in zip(specs, priced))
        return {"design": name, "blocks": len(blocks), "k": len(ranked), "seeds": len({s.seed for s in specs}),
                "R": sorted({s.fl["rounds"] for s in specs}), "runs": len(specs),
                "nemenyi_cd": RP.nemenyi_cd(len(ranked), len(blocks), alpha) if len(ranked) >= 2 else np.nan,
                "cpu_hours": secs / 3600.0, "cost_basis": basis(specs, priced)}

    focused = []
    for d in designs:
        specs = design_specs(d)
        rows.append(row(d, specs))
        if d in FOCUSED:
            focused += specs
    if focused:
        rows.append(row("focused (all)", focused))
    return pd.DataFrame(rows)


def rounds_check(pilot_records, design: str = "converged") -> str:
    """What the pilot's records say about ``design``'s R: the R of
    :func:`workbook.ranking_power.choose_rounds` against the params file's."""
    p = _params(design)
    have = int(p["fl"]["rounds"])
    if not pilot_records:
        return (f"{design}: R = {have} in {DESIGNS[design]}; the pilot ({DESIGNS['pilot']}) has no record yet, "
                "so R is not yet chosen by the plateau rule")
    table = RP.convergence_table(pilot_records, block_of, methods=("fedavg", "local"))
    R, why = RP.choose_rounds(table)
    if R is None:
        return f"{design}: R = {have}; the pilot gives none — {why}"
    verdict = "enough" if R <= have else f"too few: set fl.rounds to {R} in {DESIGNS[design]}"
    return f"{design}: R = {have}; the pilot's plateau rule gives R = {R} ({why}): {verdict}"


def _design_records(design: str, root, missing_says: str) -> tuple[list, str | None]:
    """``design``'s records present under ``root`` (None: the repository) in its folder
    (:data:`RECORDS_OF`), and None; or, while any of its runs is not recorded, the records found
    and the line saying so ("N of M runs recorded in … — ``missing_says``; compute them with: …")."""
    from fedlib.experiment import present_records

    specs = design_specs(design)
    found, missing = present_records(specs, (ROOT if root is None else root) / RECORDS_OF[design])
    if missing or not found:
        return found, (f"{design}: {len(found)} of {len(specs)} runs recorded in {RECORDS_OF[design]} — {missing_says}; "
                       f"compute them with: {run_commands([design])[0]}")
    return found, None


def converged_vs_budget(budget_records, root=None, design: str = "converged") -> tuple[dict | None, str]:
    """The ranking of ``design``'s records (weighted local accuracy, seeds averaged within a block)
    beside the budget ranking of ``budget_records``, with Kendall's τ between them; (None, why)
    while ``design``'s records are incomplete. Returns ({'tau', 'converged', 'budget', 'power'}, text)."""
    found, why = _design_records(design, root, "not ranked")
    if why:
        return None, why
    conv = X.score_table(X.runs_frame(found))
    bud = X.score_table(X.runs_frame(budget_records))
    mr_c, mr_b = RP.mean_ranks(conv, exclude=X.REFERENCES), RP.mean_ranks(bud, exclude=X.REFERENCES)
    power = RP.ranking_power(conv, exclude=X.REFERENCES)
    tau = RP.kendall_tau(mr_c, mr_b)
    return ({"tau": tau, "converged": mr_c, "budget": mr_b, "power": power},
            f"{design} vs budget: Kendall τ = {tau:.2f}; {design}: {power.line()}")


def design_statement(per_round: pd.Series, design: str = PREREGISTERED, alpha: float = X.ALPHA) -> str:
    """The pre-registered design stated before it is computed (issue 70), from its params file and
    the measured CPU seconds a round (``per_round``, :func:`rates`):
    k, N, R, seeds, the tests, CD, the cost, and what the design can and cannot separate."""
    t = design_table(per_round, [design], alpha).iloc[0]
    specs = design_specs(design)
    methods = [m for m in dict.fromkeys(s.method for s in specs) if m not in X.REFERENCES]
    refs = [m for m in ("fedavg", "local") if m in methods]
    tested = [m for m in methods if m in SEED_PAPER_METHODS]
    n, k, pairs = int(t.blocks), int(t.k), len(tested) * len(refs)
    p_min = 2.0 / 2 ** n  # the exact two-sided Wilcoxon p when every block favours one side
    # the exact null of T (the ranks of |d| on the losing side summed) over the 2^N sign patterns
    signs = (np.arange(2 ** n)[:, None] >> np.arange(n)) & 1
    T = np.sort(signs @ np.arange(1, n + 1))
    t_max = max((t for t in range(int(T.max()) + 1) if 2 * np.mean(T <= t) <= alpha / pairs), default=-1)
    return (f"Design `{design}` ({DESIGNS[design]}), stated before any of its records: k = {k} methods "
            f"({', '.join(display_name(m) for m in methods)}), N = {n} blocks (distinct FMNIST label-skew partitions, "
            f"K = {specs[0].n_clients}), {int(t.seeds)} seed per block, R = {t.R[0]} rounds, {int(t.runs)} runs; cost "
            f"{t.cpu_hours:.1f} CPU-hours — {t.cost_basis}. "
            f"Tests: Friedman, then Nemenyi at α = {alpha:g}: CD = {t.nemenyi_cd:.2f} mean ranks of a possible {k - 1}; "
            f"pre-registered: each seed-paper method against {' and '.join(display_name(m) for m in refs)} "
            f"({pairs} comparisons), Wilcoxon signed-rank over the {n} blocks, Holm-adjusted together. Each run is scored "
            f"by the mean of its last {RP.SCORE_LAST} evaluations. What it can separate: two methods whose mean ranks "
            f"differ by more than {t.nemenyi_cd:.2f} (e.g. a personalised method against a global one); a seed-paper "
            f"method against FedAvg or Local only when nearly every block favours one side: Holm's first threshold is "
            f"{alpha / pairs:.3g}, reached when the losing blocks' ranks of |difference| sum to at most {t_max} of "
            f"{n * (n + 1) // 2} (exact null; the smallest p is {p_min:.2g}), so a method that wins on most blocks but "
            f"loses some by large margins is not separated. What it cannot: methods within {t.nemenyi_cd:.2f} mean "
            f"ranks of each other (e.g. the personalised methods near the top), any effect of K or of the data set "
            f"(one K, FMNIST only), nor seed-to-seed variation (one seed).")


def preregistered_results(root=None, design: str = PREREGISTERED, alpha: float = X.ALPHA) -> tuple[dict | None, str]:
    """The pre-registered design's results from its records (``root``/its folder): the ranking on
    each run's mean of its last :data:`~workbook.ranking_power.SCORE_LAST` evaluations, Friedman /
    Nemenyi (:func:`workbook.ranking_power.ranking_power`), the Wilcoxon–Holm comparisons
    (:func:`workbook.ranking_power.preregistered`) and the plateau rule's readings; (None, why)
    while any of its runs is not recorded."""
    found, why = _design_records(design, root, "no result yet")
    if why:
        return None, why
    scores = RP.score_table_records(found, _partition, RP.last_mean)
    power = RP.ranking_power(scores, exclude=X.REFERENCES, alpha=alpha)
    tested = [m for m in SEED_PAPER_METHODS if m in scores.index]
    pre = RP.preregistered(scores, tested, ("fedavg", "local"), alpha=alpha)
    conv = RP.convergence_table(found, _partition)
    return ({"scores": scores, "ranks": RP.mean_ranks(scores, exclude=X.REFERENCES), "power": power,
             "preregistered": pre, "convergence": conv}, f"{design}: {power.line()}")


def paper_profile(root=None) -> dict:
    """Notebook 11's paper-profile results from the committed records, whatever profile the notebook
    runs with (issue 70): ``rankings`` (:func:`metric_rankings` of the budget grid's complete
    partitions, three metrics), ``plateaus`` (the plateau rule's readings of every budget run,
    counted), ``per_round`` (:func:`measured_rates`: CPU seconds a round per (kind, method), the budget
    grid's and the cost probes' records),
    ``designs`` (:func:`design_table` of the designs every method of which has a measured cost),
    ``statement`` (:func:`design_statement`) and ``preregistered`` (:func:`preregistered_results`)."""
    from fedlib import notebook_params
    from fedlib.experiment import present_records

    root = ROOT if root is None else root
    p = notebook_params.load(ROOT / DESIGNS["budget"], "11_cross_paper")
    specs = X.notebook_grid(**{k: p[k] for k in X.GRID_PARAMS})["cross"]
    found, missing = present_records(specs, root / RECORDS_OF["budget"])
    df = X.runs_frame(found)
    done = set(X.complete_partitions(missing))
    complete = [q for q in X.score_table(df).columns if q in done]
    conv = RP.convergence_table(found, _partition)
    per_round = measured_rates(root)
    costed, _ = measurable(per_round)
    return {"runs": len(found), "of": len(specs), "rankings": metric_rankings(df[df.partition.isin(complete)]),
            "plateaus": conv.reading.str.replace(r"plateau at \d+", "plateau", regex=True).value_counts(),
            "convergence": conv, "per_round": per_round, "designs": design_table(per_round, costed),
            "statement": design_statement(per_round), "preregistered": preregistered_results(root)}


def run_commands(designs=None, workers: int = 2) -> list[str]:
    """The command that computes each design's records (resumably)."""
    return [f"python -m fedlib.grid cross-paper --params {DESIGNS[d]} --out {RECORDS_OF[d]} --workers {workers}"
            for d in (designs or DESIGNS)]


def label(block: str) -> str:
    """A block's display label (``fmnist/K=100/dirichlet_0.3`` → ``FMNIST K=100 Dirichlet α = 0.3``)."""
    ds, k, p = block.split("/")
    return f"{ds} {k} {X.PARTITIONS[p].label}"


def rename_methods(index) -> list[str]:
    return [display_name(m) for m in index]

