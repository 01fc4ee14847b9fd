"""The reproduction report's catalogue: every cell of the seed papers' tables that the workbook
reproduces, what the paper printed, and where our number comes from.

A :class:`Cell` is one value of one paper table (paper, table, row, column, the paper's value and
spread); each of its :class:`Reading` s names how one of our numbers for it is found: a folder of
committed run records under ``benchmarks/records/``, the spec fields a record must match, and the
metric taken from it (:data:`METRICS`). A cell with two readings (Table III's paper text and the
authors' code) becomes two rows of the report, each with its own verdict.

A :class:`Cause` is the one reason from :data:`REASONS` suspected to move a row away from the paper
when it differs, with ``note`` saying why, and ``evidence``: the name of another reading of the
same cell that tests the reason (the run with the suspected difference undone). The report calls
the cause *confirmed* only when that reading's records support it (it lands within tolerance of
the paper, or closes at least half of the gap); a cause without an evidence reading, or whose
reading does not support it, is printed as *suspected* (:func:`workbook.report.frame`). A
row that differs with no cause listed is "differs, no cause identified". ``unavailable`` marks
cells that cannot run here (their data have no offline source): they are "not run" whatever the
records hold. ``kind`` separates trained cells from label-only ones (a clustering of label
histograms, no training); ``chance`` is a cell's chance-level accuracy (10 % for ten balanced
classes), so that a row where the paper and ours both sit at chance is counted apart; ``guess``
quotes the paper's sentence where the setting a cell is read at is not stated by the paper.

Nothing here is a result: the numbers come from records (:mod:`workbook.report`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from fedlib.reproduction import runs_differently
from fedlib.tables import load_tables
from . import paper_values
from .cafa_study import AUTHORS_FL, PAPER_TABLE2, PAPER_TABLE3, PAPER_TABLE4, PAPER_TABLE5, PAPER_WINDOWS
from .fedprism_study import CFL_PAPER as FEDPRISM_CFL
from .fedprism_study import PAPER_MAIN, PAPER_TABLE9
from .fedprism_study import PARTITION as FEDPRISM_PARTITION
from .fedprism_study import METHODS as FEDPRISM_METHODS
from .like_for_like import METHODS as TABLE3_METHODS
from .paper_table3 import SETTINGS as TABLE3_SETTINGS
from .paper_table3 import TABLE3, TABLE3_SD
from .pfedlia_study import CFL_PAPER as PFEDLIA_CFL
from .pfedlia_study import PAPER_TABLE1
from .psi_pfl_study import PAPER_EQ3, PAPER_MOST_HETEROGENEOUS, PAPER_VARIANT
from .tables import setting_name

PARAM_AVERAGE_METHODS = ("cfl", "ifca", "fedclust", "fedamp")
"""FedPrism Table 1's methods whose Glob cell has a second reading: the parameter average of the
several models their clients use (record field ``param_average_accuracy``, which a run with
``global_test`` records for every method without one predictor), shown beside ours."""

__all__ = ["PAPERS", "REASONS", "METRICS", "KINDS", "RECORD_COMMANDS", "GRID_VARIANTS", "grid_tables",
           "group_of", "record_command", "Reading", "Cause", "Cell", "cells", "PARAM_AVERAGE_METHODS"]

PAPERS = {
    "clust_psi_pfl": "Clust-PSI-PFL",
    "psi_pfl": "PSI-PFL",
    "cafa": "CAFA",
    "fedprism": "FedPrism",
    "pfedlia": "pFedLIA",
}
"""Report order and display name of each seed paper."""

REASONS = {
    "stand_in_dataset": "stand-in dataset: the paper's data are not reachable offline, an offline "
                        "data set of the same kind runs in their place",
    "text_vs_code": "paper text vs the authors' code: the published number came from the code, "
                    "which trains or aggregates otherwise than the text says",
    "metric_definition": "metric definition: the paper's number is computed by another rule than "
                         "the one in this row",
    "partition_rule": "partition rule: the workbook's partition differs from the paper's",
    "paper_inconsistent": "the paper is inconsistent with itself here",
    "known_defect": "a known defect of the implementation, open as an issue",
    "rule_unresolved": "the method's rule is not pinned down here: what the paper ran differs in a way no "
                       "run has isolated yet (an open fidelity question)",
    "no_offline_data": "not run here: no offline source of the paper's data",
}
"""The report's vocabulary of reasons: key -> what it means."""

METRICS = {
    "global_accuracy": "weighted local accuracy (%), Clust-PSI-PFL's \"global accuracy\": Σ correct / "
                       "Σ test samples over the clients, each client scored with its own model on "
                       "its own test split",
    "reported_accuracy": "the accuracy the authors' code reported (%): its reporting rule "
                         "(`fedlib.reproduction:reported_accuracy`)",
    "mean_local_accuracy": "mean local accuracy (%): the unweighted mean over clients of each "
                           "client's accuracy with its own model on its own test split",
    "global_test_accuracy": "official-test accuracy (%), FedPrism's \"global accuracy\": mean over "
                            "clients of each client's model on the data set's official test set",
    "param_average_accuracy": "parameter-average accuracy (%): the uniform parameter average of the "
                              "distinct models the clients use, on the data set's official test set (how "
                              "public code by one of FedPrism's authors scored a clustered method's "
                              "\"global accuracy\")",
    "ad_cl": "AD (%): mean over clients of |CL accuracy − the client's accuracy|",
    "sdad_cl": "SDAD (%): the standard deviation of the same distances",
    "cp": "client parity: (max − min) / min of the clients' accuracies",
    "cp_nonzero": "client parity over the clients not at accuracy 0: (max − min) / min of the others' "
                  "accuracies (`fedlib.evaluation:client_parity`, `zero='exclude'`); PSI-PFL's (max − min) / "
                  "min is infinite as soon as one client scores 0, and the paper is silent on that case",
    "k": "number of clusters chosen",
    "acc": "identification accuracy of the IID cluster",
    "precision": "identification precision",
    "recall": "identification recall",
    "f1": "identification F1",
    "window_mean": "mean official-test accuracy (%) over the rounds of the window",
    "best_round": "best round's official-test accuracy (%)",
}
"""Metric key -> its definition, printed beside the report (one name, one meaning)."""


@dataclass(frozen=True)
class Reading:
    """One way of finding our number for a cell.

    name : label of the reading (``"paper_text"``, ``"paper_code"``, ``"code default η"``, …)
    records : folder under ``benchmarks/records/`` holding the runs
    match : spec field -> required value; ``None`` requires the field to be absent (or
        ``"paper_text"`` for ``reproduction``); ``"most_heterogeneous"`` for ``level`` keeps the
        smallest level among the matching records that ran (status ok: an infeasible partition
        of a smaller level is passed over)
    metric : key of :data:`METRICS`; ``window_mean`` takes ``window`` (first, last round)
    derive : None, or the name of a transform of the folder's records applied before matching
        (:data:`workbook.report.DERIVATIONS`), e.g. ``"psi_pfl_paper_variant"``: the runs
        PSI-PFL's paper reports, rebuilt from the validation-selected records
    shared_with : matches (tuples like ``match``) of the runs the cell's table compares this one
        with; non-empty: only the seeds for which every one of them has an ``ok`` record in the
        folder count (a table of methods read over one set of seeds, e.g. CAFA's Tables IV–V)
    """
    name: str
    records: str
    match: tuple
    metric: str
    window: tuple | None = None
    derive: str | None = None
    shared_with: tuple = ()


_T3_SCRIPT = "python benchmarks/table3_like_for_like.py"
RECORD_COMMANDS = {
    "clust_psi_pfl/table3_acs_income": _T3_SCRIPT + " --dataset adult --settings {settings} --methods {methods_csv} "
                                       "--seeds {seeds_csv} --results benchmarks/records/clust_psi_pfl/table3_acs_income",
    "clust_psi_pfl/table3_fedopt_code_defaults": _T3_SCRIPT + " --settings {settings} --methods {methods_csv} --seeds {seeds_csv} "
                                                 "--hyper '{{\"fedyogi\": {{\"eta\": 0.3162, \"tau\": 0.1}}, "
                                                 "\"fedadam\": {{\"eta\": 0.3162, \"tau\": 0.1}}}}' "
                                                 "--results benchmarks/records/clust_psi_pfl/table3_fedopt_code_defaults",
}
"""Records folder -> the command that computes its runs, resumably, for the folders of no paper
table (:data:`workbook.paper_tables.TABLES`: their command is the grid command,
:func:`record_command`): ``{settings}`` (``protocol:level``), ``{methods_csv}``, ``{seeds_csv}``,
what the rows not run need, comma-separated; the report prints it beside them."""

GRID_VARIANTS = {
    "cafa/training:paper_code": (
        lambda match: match.get("reproduction") == "paper_code",
        "sed 's/^reproductions: .*/reproductions: [paper_text, paper_code]/' params/paper/08_cafa.yaml "
        "> /tmp/08_cafa_paper_code.yaml", "/tmp/08_cafa_paper_code.yaml"),
    "pfedlia/table1:workbook": (  # the second reading's split (the paper profile runs FL-bench's)
        lambda match: match.get("pool_test") is not True,
        "sed -e 's/^data_split: fl_bench/data_split: workbook/' -e '/^  pfedlia: {influence_samples: 100}/d' "
        "params/paper/10_pfedlia.yaml > /tmp/10_pfedlia_workbook.yaml", "/tmp/10_pfedlia_workbook.yaml"),
}
"""``folder:variant`` -> (``applies(match)``, the shell command writing its params file, that file),
where a paper table's records folder holds runs of two parameter files: CAFA's paper_code reading,
pFedLIA's workbook split (the second reading of its Table I)."""


def grid_tables() -> dict:
    """Records folder under ``benchmarks/records/`` -> the registered paper table
    (:func:`fedlib.tables.load_tables`: :data:`workbook.paper_tables.TABLES` and any other
    package's) whose grid command computes its runs."""
    return {t.records.removeprefix("benchmarks/records/"): t for t in load_tables().values() if t.records}


def group_of(folder: str, match: tuple) -> str:
    """The command group of a row: its records ``folder``, or ``folder:variant``
    (:data:`GRID_VARIANTS`) where the folder's runs come from two parameter files."""
    for key, (applies, _, _) in GRID_VARIANTS.items():
        if key.split(":")[0] == folder and applies(dict(match)):
            return key
    return folder


#: A filter of the grid command -> the key of :func:`record_command`'s ``values`` it reads.
_FILTER_VALUES = {"methods": "methods", "seeds": "seeds", "datasets": "datasets", "n_clients": "n_clients",
                  "alphas": "levels", "levels": "levels", "iid_fractions": "levels", "settings": "protocols"}


def record_command(key: str, values: dict) -> str:
    """The command that computes the rows not run of command group ``key`` (:func:`group_of`),
    resumably; '' where none is known. ``values``: ``methods``, ``seeds``, ``datasets``,
    ``n_clients``, ``levels``, ``protocols`` (lists of str, what the rows need; the grid
    command's flag of each of the table's filters that has values) and ``settings``
    (``protocol:level``; the commands of :data:`RECORD_COMMANDS`). A paper table's folder:
    ``python -m fedlib.grid TABLE [--params FILE] --out FOLDER --methods ... --seeds ...``."""
    folder = key.split(":")[0]
    table = grid_tables().get(folder)
    if table is None:
        template = RECORD_COMMANDS.get(key)
        return "" if template is None else template.format(
            settings=",".join(values["settings"]), methods_csv=",".join(values["methods"]),
            seeds_csv=",".join(values["seeds"]))
    prefix, params = "", ""
    if key in GRID_VARIANTS:
        _, write, path = GRID_VARIANTS[key]
        prefix, params = f"{write} && ", f" --params {path}"
    order = ["methods", "seeds", *(f for f in table.filters if f not in ("methods", "seeds"))]
    flags = [f"--{f.replace('_', '-')} {' '.join(values[_FILTER_VALUES[f]])}" for f in order
             if f in table.filters and f in _FILTER_VALUES and values.get(_FILTER_VALUES[f])]
    return " ".join([f"{prefix}python -m fedlib.grid {table.name}{params} --out {table.records}", *flags])


KINDS = {"trained": "a federated training run's result",
         "label_only": "a clustering of the clients' label histograms: no model is trained"}
"""A cell's kind -> what its number is; the scoreboard counts the kinds apart."""


@dataclass(frozen=True)
class Cause:
    """Why a row may differ from the paper: ``reason`` (a key of :data:`REASONS`), ``note`` (the
    specifics), ``evidence`` (the name of the cell's reading that undoes the suspected difference,
    or None when no run tests it)."""
    reason: str
    note: str
    evidence: str | None = None


@dataclass(frozen=True)
class Cell:
    """One value of a paper's table: ``paper``/``table``/``row``/``column`` locate it; ``value``
    and ``spread`` (sd, or None) are what the paper printed, in ``unit`` ("%" or ""); ``tolerance``
    the least disagreement that counts (1 pp for accuracies; a count's or a score's own step: what
    one client more or less moves it); ``readings`` how ours is found; ``kind`` a key of
    :data:`KINDS`; ``chance`` the chance-level value (or None); ``guess`` the paper's sentence that
    a setting not stated by the paper is read from (or None); ``paper_n`` the runs behind the
    paper's mean ± ``spread`` (:func:`workbook.paper_values.runs_of`; None where it prints no spread);
    ``shared_value``: the paper prints one value for the whole row and the cell repeats it in
    every column (CL's one accuracy per data set), so the scoreboard counts such rows apart."""
    paper: str
    table: str
    row: str
    column: str
    value: float
    readings: tuple
    spread: float | None = None
    unit: str = "%"
    tolerance: float = 1.0
    causes: dict = field(default_factory=dict)  # reading name (or "*") -> Cause
    unavailable: str | None = None  # reason key when the cell cannot run here
    kind: str = "trained"
    chance: float | None = None
    guess: str | None = None
    paper_n: int | None = None
    shared_value: bool = False

    def cause(self, reading: str):
        """The :class:`Cause` for ``reading``, or None."""
        return self.causes.get(reading, self.causes.get("*"))

    @property
    def stand_in(self) -> bool:
        """Whether the cell runs on stand-in data (a ``stand_in_dataset`` cause on any reading)."""
        return any(c.reason == "stand_in_dataset" for c in self.causes.values())


def _m(**kw) -> tuple:
    return tuple(sorted(kw.items()))


# ----------------------------------------------------------------------------- Clust-PSI-PFL
_T3_DIR = "clust_psi_pfl/table3_like_for_like"
_T3_CODE_ETA_DIR = "clust_psi_pfl/table3_fedopt_code_defaults"
_CODE_ETA = {"eta": 0.3162, "tau": 0.1}  # the authors' code's one --eta/--tau for every adaptive optimiser
_CODE_ETA_SETTINGS = (("similarity", 1.0), ("dirichlet", 0.3))
_FEDLAB = ("poc", "haccs", "fedcls", "cfl", "fedsoft")
_T3_CAUSES = {
    **{m: {"paper_text": Cause("text_vs_code", "the authors' code trained the FedLab baselines with plain "
                                               "SGD 0.001, batch 64, no shuffling (docs/reproduction.md); this "
                                               "row trains Adam as Table II says", evidence="paper_code")}
       for m in _FEDLAB},
    "fedprox": {"paper_text": Cause("text_vs_code", "the authors' code never read μ: the published FedProx "
                                                    "is FedAvg (the paper_code row)", evidence="paper_code")},
    "fedyogi": {"both readings": Cause("text_vs_code", "the code gives every adaptive server optimiser "
                                                       "FedAdagrad's default η = 0.3162, τ = 0.1",
                                       evidence="code default η")},
    "fedadam": {"both readings": Cause("text_vs_code", "as FedYogi: the code's shared default η",
                                       evidence="code default η")},
}
# FedSoft's paper_code row already scores by the code's rule (its best round's mean of the cluster
# models on the pooled test set: reported_accuracy), so the metric definition cannot be its cause.
_T3_CHANCE = {"fmnist": 10.0}  # ten balanced classes; adult's two classes are not balanced

def _table3_cells() -> list[Cell]:
    out = []
    for dataset, paper_ds, records_dir in (("fmnist", "fmnist", _T3_DIR), ("adult", "acs_income",
                                                                             "clust_psi_pfl/table3_acs_income")):
        column_name = "FMNIST" if paper_ds == "fmnist" else "ACSIncome (adult stand-in)"
        for protocol, level in TABLE3_SETTINGS:
            for m in TABLE3_METHODS:
                value = TABLE3[paper_ds].get(m, {}).get((protocol, float(level)))
                if value is None:
                    continue
                base = dict(dataset=dataset, protocol=protocol, level=float(level), n_clients=100, method=m)
                if runs_differently(m, 100, 0.5):
                    readings = (Reading("paper_text", records_dir, _m(**base, reproduction=None), "global_accuracy"),
                                Reading("paper_code", records_dir, _m(**base, reproduction="paper_code"),
                                        "reported_accuracy"))
                else:
                    readings = (Reading("both readings", records_dir, _m(**base, reproduction=None),
                                        "global_accuracy"),)
                if m in ("fedyogi", "fedadam"):
                    readings += (Reading("code default η", _T3_CODE_ETA_DIR,
                                         _m(**base, reproduction=None, **{f"hyper.{k}": v for k, v in _CODE_ETA.items()}),
                                         "global_accuracy"),)
                causes = dict(_T3_CAUSES.get(m, {}))
                if m in ("fedyogi", "fedadam") and (protocol, level) not in _CODE_ETA_SETTINGS:
                    causes = {}  # the code-default-η evidence covers only the settings it was run at
                if paper_ds != "fmnist":
                    causes = {"*": Cause("stand_in_dataset", "adult (1994 census) stands in for ACSIncome "
                                                             "(docs/reproduction.md)")}
                spread = TABLE3_SD[paper_ds].get(m, {}).get((protocol, float(level)))
                out.append(Cell("clust_psi_pfl", "Table III", m, f"{column_name}, {setting_name(protocol, level, ' = ')}",
                                100 * value, readings, spread=None if spread is None else 100 * spread,
                                causes=causes, chance=_T3_CHANCE.get(dataset), paper_n=paper_values.runs_of("clust_psi_pfl", f"table3_{paper_ds}"),
                                shared_value=m == "cl"))
    return out


# ----------------------------------------------------------------------------- PSI-PFL
_PSI_PFL_LABELS = {"ad_cl": "AD", "sdad_cl": "SDAD", "cp": "CP"}


_PSI_PFL_GUESS = ("the paper states no α, K or data set for §4.3's numbers: \"Under the most heterogeneous "
                  "scenario, our solution achieves an AD of 3% from the CL (target), with an SDAD of 6%.\" "
                  "They are read at α = 0.05 (the smallest α of Clust-PSI-PFL's grid; PSI-PFL's own α list is "
                  "lost in the text) and K = 100 (\"Its performance improves in scenarios with more "
                  "clients\"), on adult for ACSIncome (the data set of the paper's main-text figures)")


def _psi_pfl_cells() -> list[Cell]:
    """§4.3 (EQ3): the distance to CL and the client parity the text quotes
    (:data:`psi_pfl_study.PAPER_EQ3`) at the most heterogeneous setting
    (:data:`psi_pfl_study.PAPER_MOST_HETEROGENEOUS`: α = 0.05, K = 100). The text names no data
    set for them; they are read on the ACSIncome stand-in. PSI-PFL's AD/SDAD are the paper's
    test-selected variant's (derived from the validation-selected records, ``derive``: one ζ per
    setting by the best mean test accuracy over its seeds, as the authors' ``main.py``); ours
    (ζ chosen on validation) is a second reading. AD/SDAD use the CL run of the same setting and
    seed in the folder; CP leaves the clients at accuracy 0 out (``cp_nonzero``). Every reading is
    repeated at the most heterogeneous α that ran here, since the stand-in's partition can be
    infeasible at the paper's α (as the paper's tables mark "—")."""
    d = "psi_pfl/comparison"
    level, k = PAPER_MOST_HETEROGENEOUS["level"], PAPER_MOST_HETEROGENEOUS["n_clients"]
    base = dict(dataset="adult", protocol="dirichlet", level=float(level), n_clients=k, reproduction=None)
    cause = {"*": Cause("stand_in_dataset", "adult stands in for ACSIncome; the text does not name the data set")}
    feasible = ", most heterogeneous α run here"
    far = Cause("stand_in_dataset", "adult stands in for ACSIncome (the text does not name the data set); this row "
                               "reads the smallest α whose adult partition ran at this K, since a Dirichlet draw at "
                               "the paper's α can leave a client of the stand-in below 10 samples (infeasible)")
    out = []
    for (method, metric), value in PAPER_EQ3.items():
        label = _PSI_PFL_LABELS[metric]
        if method == PAPER_VARIANT:
            row = "psi_pfl"
            readings = (Reading("paper's variant (ζ chosen on test)", d, _m(**base, method=PAPER_VARIANT), metric,
                                derive="psi_pfl_paper_variant"),
                        Reading("ours (ζ chosen on validation)", d, _m(**base, method="psi_pfl"), metric))
        else:
            row = method
            m = "cp_nonzero" if metric == "cp" else metric
            if runs_differently(method, k, 0.5):
                readings = (Reading("paper_text", d, _m(**base, method=method), m),
                            Reading("paper_code", d, _m(**{**base, "reproduction": "paper_code"}, method=method), m))
            else:
                readings = (Reading("paper protocol", d, _m(**base, method=method), m),)
        readings += tuple(Reading(r.name + feasible, d, _m(**{**dict(r.match), "level": "most_heterogeneous"}),
                                  r.metric, derive=r.derive) for r in readings)
        pct = metric != "cp"
        out.append(Cell("psi_pfl", "§4.3 (EQ3) text", row, f"{label}, α = {level:g}, K = {k}",
                        100 * value if pct else value, readings, unit="%" if pct else "",
                        tolerance=1.0 if pct else 0.1,
                        causes={**cause, **{r.name: far for r in readings if r.name.endswith(feasible)}},
                        guess=_PSI_PFL_GUESS))
    return out


# ----------------------------------------------------------------------------- CAFA
def _cbcc_step(name: str, n_iid: int, n_non: int) -> float:
    """The least change of a CBCC score that one client can make: half a cluster for the count k
    (a mean within 0.5 of the paper's rounds to it), one client of all for the identification
    accuracy, one IID client for precision, recall and F1 (one client more or less in the IID
    cluster moves each by about 1/n_iid)."""
    if name == "k":
        return 0.5
    return 1.0 / (n_iid + n_non) if name == "acc" else 1.0 / n_iid


def _cafa_cells() -> list[Cell]:
    out = []
    names = ("k", "acc", "precision", "recall", "f1")
    for table, rows in (("Table II", PAPER_TABLE2), ("Table III", PAPER_TABLE3)):
        for (n_iid, n_non), values in rows.items():
            for name, v in zip(names, values):
                readings = tuple(Reading(label, "cafa/cbcc", _m(generator=gen, n_iid=n_iid, n_noniid=n_non), name)
                                 for label, gen in (("authors' generator", "authors"),
                                                    ("workbook generator", "workbook")))
                out.append(Cell("cafa", table, f"CBCC {name}", f"{n_iid} IID + {n_non} non-IID clients", float(v),
                                readings, unit="", tolerance=_cbcc_step(name, n_iid, n_non), kind="label_only",
                                causes={"workbook generator": Cause(
                                    "partition_rule", "the workbook's generator gives each non-IID client 2–4 "
                                                      "random classes with random shares; the authors' gives "
                                                      "1–2 classes with Dirichlet(0.5) shares and equal sizes",
                                    evidence="authors' generator")}))
    stand_in = Cause("stand_in_dataset", "FMNIST with a small CNN stands in for CIFAR-10 with VGG-19")
    half_iid = Cause("partition_rule", "half the clients IID (Table III's share): §IV-B's training partition, as "
                                       "written, has no IID client (every client 2–4 classes); §V-C's \"more non-IID "
                                       "clients\" implies settings with some, share not given")
    # the authors' protocol (cafa_study.AUTHORS_FL, params/paper/08_cafa.yaml), scored per round on the
    # official test set (history global_test_accuracy: window_mean / best_round), the whole test set;
    # the paper's windows count rounds from 0, the records' history from 1; the data set's own model
    # (not VGG-19). IID share 0 is §IV-B's training partition; 0.5 is shown beside it. Each table is
    # read over the seeds every method of it ran to the end (shared_with); CAFA's paper_code reading
    # (the authors' fixed-k clustering) against the same FedAvg and FedProx runs.
    authors = dict(global_test=True, n_global_test=None, arch=None, **{f"fl.{k}": v for k, v in AUTHORS_FL.items()})

    def match(m, level, reproduction=None):
        return _m(method=m, level=level, reproduction=reproduction, **authors)

    def readings(m, metric, window=None):
        out = []
        for name, level in (("authors' protocol", 0.0), ("authors' protocol, IID share 0.5", 0.5)):
            table = tuple(match(o, level) for o in PAPER_TABLE5)
            out.append(Reading(name, "cafa/training", match(m, level), metric, window=window, shared_with=table))
        if m == "cafa":  # the authors' train.py clustering: K-means with a fixed k, random_state 0
            table = tuple(match(o, 0.0, "paper_code" if o == "cafa" else None) for o in PAPER_TABLE5)
            out.append(Reading("authors' protocol, authors' fixed-k clustering", "cafa/training",
                               match(m, 0.0, "paper_code"), metric, window=window, shared_with=table))
        return tuple(out)

    causes = {"*": stand_in, "authors' protocol, IID share 0.5": half_iid}
    for m, values in PAPER_TABLE4.items():
        for (lo, hi), v in zip(PAPER_WINDOWS, values):
            out.append(Cell("cafa", "Table IV", m, f"rounds {lo}–{hi}", v,
                            readings(m, "window_mean", (lo + 1, hi + 1)), causes=causes, chance=10.0))  # 1-based
    for m, v in PAPER_TABLE5.items():
        out.append(Cell("cafa", "Table V", m, "best accuracy", v, readings(m, "best_round"), causes=causes,
                        chance=10.0))
    return out


# ----------------------------------------------------------------------------- FedPrism
def _fedprism_glob_cause(value: float) -> tuple[str, str]:
    """(reason, note) of a clustered method's Glob row whose paper value ``value`` (%) sits at or
    near chance, 10 % for FMNIST's ten classes: its 'parameter average' reading tests the reason."""
    at = "what a one-class predictor scores" if abs(value - 10.0) < 0.005 else \
        f"{abs(value - 10.0):.2f} pp from the 10 % a one-class predictor scores"
    return ("metric_definition", f"the paper's {value:.2f} % is {at}; public code by one of its authors scores a "
                                 "clustered method's global model as the parameter average of its cluster models")


_FEDPRISM_GLOB_METHODS = ("fedclust", "cfl", "fedamp")
"""The methods whose Glob row's 'parameter average' reading tests :func:`_fedprism_glob_cause`."""
_FEDPRISM_GAMMA = ("paper_inconsistent", "α₀ = 0.9, β = 0.1 and γ = 1 − α − β leave the private part's weight at 0 "
                                         "(or negative, which Alg. 2's [0, 1] clip of α undoes)")
_FEDPRISM_CLIP = "paper protocol, Alg. 2's [0, 1] clip of α"
_DATASETS = {"fmnist": "FMNIST", "svhn": "SVHN", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


FEDAMP_SOFTMAX = "paper protocol, the workbook's softmax attention (not the paper's)"
"""FedAMP's reading under the workbook's earlier attention: a softmax over −‖wᵢ − wⱼ‖²/σ."""
FESEM_ALL_CLIENTS = "paper protocol, FeSEM's all-clients start (not the paper's)"
"""FeSEM's reading under the workbook's earlier start: every client trained in round 0 and
k-means++ on all N models (``init='clients'``)."""
FESEM_UPDATE_ESTEP = "paper protocol, FeSEM's update-direction E-step (not the paper's)"
"""FeSEM's labelled variant (issue 69): the E-step clusters update directions (``estep='update_cosine'``)."""
_FESEM_START_CAUSE = Cause("known_defect", "this start trains every client in round 0 and seeds k-means++ on all N "
                                           "models, so it finds the planted clusters before round 1: a stronger start "
                                           "than the paper's random centres (issue 57); the cross-paper study runs "
                                           "both starts on its pathological partition (notebook 11)",
                           evidence="paper protocol")
"""Why FeSEM's all-clients reading may stand above the paper: the start (evidence: the paper's
start, the 'paper protocol' reading, once its records exist under this protocol)."""
_FESEM_PAPER_START_CAUSE = Cause("rule_unresolved", "FeSEM keeps the grouping it starts with: a client trains from "
                                                    "its own centre, so its distance to that centre is only its "
                                                    "update and the E-step keeps it there (the re-assignments that "
                                                    "kept the cluster are counted beside this row, from its records); "
                                                    "the paper's random start does not recover the planted clusters "
                                                    "(ARI in notebook 10's recovery table), so every centre averages "
                                                    "mixed clusters, while the all-clients start recovers them at "
                                                    "round 0 and lands above the paper. What let the paper's FeSEM "
                                                    "find them is not known (its E-step distance, participation or "
                                                    "start); the update-direction E-step variant tests the first")
"""Why FeSEM with the paper's start may fall below the paper (issues 57 and 69: its grouping stays
the random start's; the stay counts are rendered from the records by :func:`workbook.report.fesem_row_note`)."""


CFL_AUTO = "paper protocol, CFL ε1 = auto (defective, superseded)"
"""The reading of CFL's ``eps1='auto'`` runs (:data:`fedlib.methods.cfl.AUTO_LABEL`: its ε1 test
every cluster passes, issue 69)."""


def _variant_readings(records: str, base: dict, metric: str, cfl_paper: dict) -> tuple[Reading, ...]:
    """The readings of one cell of a method that the grids run in several variants: CFL at the
    paper's thresholds (``cfl_paper``) and at ε1 = auto (:data:`CFL_AUTO`); FedAMP (FedPrism's grid) with HeurFedAMP
    (the paper's rule for deep networks, the default, at its per-round σ: issue 69), Huang et al.'s A′ and the workbook's
    earlier softmax; FeSEM with the paper's start (Forgy) and the workbook's earlier all-clients
    start; pFedLIA clustering centrally (the paper's Algorithm) and peer to peer. Each reading
    pins its variant, so no two records of one seed answer it
    (:func:`workbook.report.row_values` refuses that); a record whose spec lacks a key
    whose default moved is matched as the value it ran (``report.matches``)."""
    method = base["method"]
    if method == "cfl":
        return (Reading("paper protocol", records, _m(**base, **{"hyper.eps1": cfl_paper["eps1"]}), metric),
                Reading(CFL_AUTO, records, _m(**base, **{"hyper.eps1": "auto"}), metric))
    if method == "fedamp" and records.startswith("fedprism/"):
        return (Reading("paper protocol", records, _m(**base, **{"hyper.attention": "heurfedamp",
                                                                  "hyper.sigma": "median"}), metric),
                Reading("paper protocol, Huang et al.'s attention", records,
                        _m(**base, **{"hyper.attention": "paper"}), metric),
                Reading(FEDAMP_SOFTMAX, records, _m(**base, **{"hyper.attention": "softmax"}), metric))
    if method == "fesem":
        return (Reading("paper protocol", records, _m(**base, **{"hyper.init": "forgy", "hyper.estep": "distance"}),
                        metric),
                Reading(FESEM_ALL_CLIENTS, records, _m(**base, **{"hyper.init": "clients", "hyper.estep": "distance"}),
                        metric),
                Reading(FESEM_UPDATE_ESTEP, records, _m(**base, **{"hyper.init": "forgy",
                                                                    "hyper.estep": "update_cosine"}), metric))
    if method == "pfedlia":
        return (Reading("paper protocol", records, _m(**base, **{"hyper.clustering": None}), metric),
                Reading("paper protocol, peer-to-peer clustering", records,
                        _m(**base, **{"hyper.clustering": "p2p"}), metric))
    return (Reading("paper protocol", records, _m(**base), metric),)


def _fedprism_cells() -> list[Cell]:
    out = []  # Table 1's
    # the paper's partition (§4.2, a class mix p_i ~ Dir(α·1) per client): fedprism_study.PARTITION
    for ds in ("fmnist", "svhn", "cifar10", "cifar100"):
        for m in FEDPRISM_METHODS:
            glob, loc = PAPER_MAIN[ds][0.1][m]
            base = dict(dataset=ds, protocol=FEDPRISM_PARTITION, level=0.1, n_clients=100, method=m)
            for label, v, metric in (("Glob", glob, "global_test_accuracy"), ("Loc", loc, "mean_local_accuracy")):
                readings = _variant_readings("fedprism/table1", base, metric, FEDPRISM_CFL)
                cause = _fedprism_glob_cause(v) if label == "Glob" and m in _FEDPRISM_GLOB_METHODS else None
                # each reading's evidence is its own parameter-average reading
                causes = {r.name: Cause(*cause, evidence=f"{r.name}, parameter average") for r in readings} if cause else {}
                if label == "Glob" and m in PARAM_AVERAGE_METHODS:  # the authors' reading, beside ours
                    readings += tuple(Reading(f"{r.name}, parameter average", r.records, r.match,
                                              "param_average_accuracy") for r in readings)
                if m == "fedprism":  # Alg. 2's own clip of α to [0, 1] (line 30): γ = 1 − α − β can go negative
                    readings += (Reading(_FEDPRISM_CLIP, "fedprism/table9",
                                         _m(**base, **{"hyper.alpha_clip": "paper"}), metric),)
                    causes = {"paper protocol": Cause(*_FEDPRISM_GAMMA, evidence=_FEDPRISM_CLIP)}
                out.append(Cell("fedprism", "Table 1", m, f"{_DATASETS[ds]}, α = 0.1, {label}", v, readings,
                                causes=causes, spread=paper_values.spread_of("fedprism", "table1"),
                                paper_n=paper_values.runs_of("fedprism", "table1"), unavailable=None if ds == "fmnist" else "no_offline_data",
                                chance=1.0 if ds == "cifar100" else 10.0))
    return out


def _fedprism_table9_cells() -> list[Cell]:
    out = []
    # Table 9's ablations fix the components by construction (global + cluster, private only, ...):
    # the γ of the full model does not apply to them, so no cause is listed there.
    for comp, (glob, loc) in PAPER_TABLE9.items():
        base = dict(dataset="fmnist", protocol=FEDPRISM_PARTITION, level=0.1, n_clients=100, method="fedprism",
                    **{"hyper.components": comp})
        for label, v, metric in (("Glob", glob, "global_test_accuracy"), ("Loc", loc, "mean_local_accuracy")):
            out.append(Cell("fedprism", "Table 9", f"fedprism ({comp})", f"FMNIST, α = 0.1, {label}", v,
                            (Reading("paper protocol", "fedprism/table9", _m(**base), metric),), chance=10.0,
                            spread=paper_values.spread_of("fedprism", "table9"),
                            paper_n=paper_values.runs_of("fedprism", "table9")))
    return out


# ----------------------------------------------------------------------------- pFedLIA
_PFEDLIA_SPLITS = (
    # (reading prefix, spec fields, metric): the paper profile's reading first
    ("paper protocol, FL-bench split, pooled", {"pool_test": True}, "global_accuracy"),  # FL-bench's pooled Σ correct / Σ n
    ("workbook split, mean over clients", {"pool_test": None}, "mean_local_accuracy"),
)
"""pFedLIA Table I's two readings (``pfedlia_study.READINGS``): FL-bench's split (official train and
test sets pooled, 75/25 per client, no validation split but FedFomo's and pFedLIA's) scored by
pooled accuracy, the paper's code base and the paper profile's reading; and the workbook's
60/20/20 split scored by the mean over clients (the records committed before issue 57)."""
_PFEDLIA_INFLUENCE = {"paper protocol, FL-bench split, pooled": 100, "workbook split, mean over clients": None}
"""pFedLIA's ``influence_samples`` per reading: the paper profile trains θ̂_j on a batch of 100 (Fig. 3a's
batch), the workbook records on the whole train split (absent from their spec)."""


def _pfedlia_readings(base: dict) -> tuple[Reading, ...]:
    """Every reading of one pFedLIA Table I cell: per data split (:data:`_PFEDLIA_SPLITS`), the
    method's variants (:func:`_variant_readings`: CFL at FL-bench's thresholds and at ε1 = auto,
    pFedLIA centralised and peer to peer), each named "<split>" or "<split>, <variant>"."""
    out = []
    for prefix, fields, metric in _PFEDLIA_SPLITS:
        extra = dict(fields)
        if base["method"] == "pfedlia":
            extra["hyper.influence_samples"] = _PFEDLIA_INFLUENCE[prefix]
        for r in _variant_readings("pfedlia/table1", {**base, **extra}, metric, PFEDLIA_CFL):
            if r.name == FESEM_ALL_CLIENTS and prefix != _PFEDLIA_SPLITS[-1][0]:
                continue  # the earlier start's records are the workbook split's; no grid runs it on another
            name = prefix + r.name[len("paper protocol"):]
            out.append(Reading(name, r.records, r.match, r.metric))
    return tuple(out)


def _pfedlia_cells() -> list[Cell]:
    out = []
    # each row its own cause or none: only Local's copy error and FeSEM's start are known; the paper's
    # "pretrained weights" (§5) is no cause for rows where ours stand above the paper
    defects = {"local": Cause("paper_inconsistent", "the paper prints the same Local row (84.71 ± 5.47) in both "
                                                    "settings, probably a copy error")}
    main = tuple(prefix for prefix, _, _ in _PFEDLIA_SPLITS)
    for setting, label in (("pathological_clusters", "pathological"), ("noisy_clusters", "noisy")):
        for ds in ("fmnist", "cifar10", "cifar100"):
            for m, v in PAPER_TABLE1[setting][ds].items():
                if v is None:
                    continue
                base = dict(dataset=ds, protocol=setting, n_clients=100, method=m)
                cause = defects.get(m)
                readings = _pfedlia_readings(base)
                # the cause concerns the paper's own variant: a variant reading (CFL's ε1 = auto,
                # peer-to-peer clustering) differs by the variant itself, so it lists none
                causes = {r.name: cause for r in readings if r.name in main} if cause else {}
                if m == "fesem":  # the start, not the pretrained model, is the suspected cause there
                    suffix = FESEM_ALL_CLIENTS[len("paper protocol"):]
                    for prefix in main:  # evidence: the paper's start on the same split
                        causes[prefix] = _FESEM_PAPER_START_CAUSE
                        if any(r.name == prefix + suffix for r in readings):
                            causes[prefix + suffix] = replace(_FESEM_START_CAUSE, evidence=prefix)
                out.append(Cell("pfedlia", "Table I", m, f"{_DATASETS[ds]}, {label}", v[0], readings,
                                spread=v[1], causes=causes, chance=1.0 if ds == "cifar100" else 10.0,
                                paper_n=paper_values.runs_of("pfedlia", "table1"),
                                unavailable=None if ds == "fmnist" else "no_offline_data"))
    return out


def cells() -> list[Cell]:
    """Every cell of the report: those of each registered paper table
    (:attr:`fedlib.tables.PaperTable.cells`, :mod:`workbook.paper_tables`), papers in
    :data:`PAPERS` order (a table's paper: its ``paper_values`` file's name), then the registry's."""
    tables = [t for t in load_tables().values() if t.cells is not None]
    order = list(PAPERS)
    tables.sort(key=lambda t: order.index(Path(t.paper_values).stem))
    return [c for t in tables for c in t.cells()]
