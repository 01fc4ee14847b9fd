"""Tables III and IV rebuilt from run records (no retraining).

``records_frame`` (:func:`fedlib.frame.records_frame`) flattens records into one row per run;
``table3`` (global accuracy) and ``table4`` (AD ± SDAD) aggregate over seeds into one row per (dataset, protocol, level, K,
method) with ``mean``, ``std`` (population std over seeds), ``n_seeds``; a setting whose
partition was infeasible for every seed has n_seeds = 0 and renders as "—", as in the paper.
A cell with a failed (diverged) run has ``n_failed`` > 0, ``mean`` and ``std`` NaN (its other
seeds' numbers would silently drop it) and renders as "failed" (all seeds failed) or
"failed (f/n seeds)". ``to_markdown`` pivots a table to the paper's layout (methods ×
settings, "mean ± std").

Units. Readers see one unit for accuracies and for AD/SDAD: percent, in tables, figures, text and
CSVs. Records and the frames built here hold fractions of 1 (as the records do); what is shown
or written converts: :func:`to_markdown` prints percent, :func:`in_percent` converts a frame for a
figure's CSV, :func:`csv_table` turns a table into the numbers-only CSV (``mean``, ``sd``, ``n``
in percent — never a formatted "mean ± sd" string).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fedlib.frame import records_frame  # the core reader, kept under this name for notebooks and tests
from fedlib.methods import METHODS, display_name
from fedlib.partition import level_symbol

__all__ = ["mean_sd", "cell_numbers", "records_frame", "for_reproduction", "table3", "table4", "beside_paper", "seed_summary", "to_markdown", "frame_markdown", "setting_name", "SETTING_KEYS", "provenance",
           "PERCENT_COLUMNS", "in_percent", "csv_table", "beside_paper_markdown", "readings_frame"]

SETTING_KEYS = ["dataset", "protocol", "level", "n_clients"]
_KEYS = SETTING_KEYS + ["method"]


def setting_name(protocol: str, level: float, sep: str = "=") -> str:
    """A setting as the paper writes it: ``setting_name("dirichlet", 0.3)`` -> ``"α=0.3"``,
    ``setting_name("similarity", 1, " = ")`` -> ``"S = 1"``; other protocols keep their name."""
    return f"{level_symbol(protocol, protocol)}{sep}{level:g}"


def _aggregate(df: pd.DataFrame, value: str) -> pd.DataFrame:
    ok = df[df.status == "ok"]
    g = ok.groupby(_KEYS, dropna=False)[value]
    out = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=0), "n_seeds": g.count()}).reset_index()
    settings = df[_KEYS].drop_duplicates()
    out = settings.merge(out, on=_KEYS, how="left")
    out["n_seeds"] = out["n_seeds"].fillna(0).astype(int)
    for status, col in (("infeasible", "n_infeasible"), ("failed", "n_failed")):
        out[col] = _count(out, df, status)
    out.loc[out.n_failed > 0, ["mean", "std"]] = np.nan  # never a number from the surviving seeds
    return out.sort_values(_KEYS).reset_index(drop=True)


def _count(out: pd.DataFrame, df: pd.DataFrame, status: str) -> np.ndarray:
    """Runs of each row of ``out`` (one per setting × method) with ``status``, shape (rows,)."""
    counts = df[df.status == status].groupby(_KEYS).size().rename("n").reset_index()
    return out[_KEYS].merge(counts, on=_KEYS, how="left")["n"].fillna(0).astype(int).values


def seed_summary(df: pd.DataFrame, value: str, reproduction: str = "paper_text") -> pd.DataFrame:
    """Any per-run column (e.g. ``cp``), mean ± std over seeds in Table III's layout (the
    columns :func:`to_markdown` renders), for the runs of one ``reproduction``."""
    return _aggregate(for_reproduction(df, reproduction), value)


def for_reproduction(df: pd.DataFrame, reproduction: str = "paper_text") -> pd.DataFrame:
    """The rows of one reading of Table III (:mod:`fedlib.reproduction`): ``'paper_text'`` keeps
    the runs made as Table II says; ``'paper_code'`` keeps each (setting, method)'s runs made as
    the authors' code ran it, and its ``paper_text`` runs where it has none (a method the code
    ran as Table II says, or whose changes do nothing at that K and q — grids make one run for
    both readings there)."""
    from fedlib.validation import check_choice

    check_choice(reproduction, "reproduction", ("paper_text", "paper_code"))
    if df.empty:
        return df
    text = df[df.reproduction == "paper_text"]
    if reproduction == "paper_text":
        return text
    code = df[df.reproduction == "paper_code"]
    has_code = pd.MultiIndex.from_frame(code[_KEYS].drop_duplicates())
    return pd.concat([code, text[~pd.MultiIndex.from_frame(text[_KEYS]).isin(has_code)]]).sort_index()


def table3(df: pd.DataFrame, reproduction: str = "paper_text") -> pd.DataFrame:
    """Global accuracy, mean ± std over seeds, one row per (dataset, protocol, level, K, method).

    ``reproduction='paper_code'``: the number each method's code reported (``reported_accuracy``:
    the last round, or CFL's and FedSoft's best round of cluster models on the pooled test set)."""
    df = for_reproduction(df, reproduction)
    return _aggregate(df, "global_accuracy" if reproduction == "paper_text" else "reported_accuracy")


PERCENT_COLUMNS = ("global_accuracy", "reported_accuracy", "local_accuracy", "ad", "sdad", "ad_cl", "sdad_cl",
                   "ad_std", "mean", "std", "sd", "accuracy", "pooled_split_accuracy", "val_accuracy",
                   "test_accuracy", "global_test_accuracy", "param_average_accuracy", "paper")
"""Columns that hold a fraction of 1 in the workbook's frames (accuracies, AD/SDAD, their means
and spreads): :func:`in_percent` multiplies these by 100. A ratio (CP), a count or a PSI is
none of them."""


def in_percent(frame: pd.DataFrame, columns=None) -> pd.DataFrame:
    """A copy of ``frame`` with its fraction columns in percent (×100): ``columns`` (default the
    :data:`PERCENT_COLUMNS` present). A column of per-client lists (``local_accuracy``) is
    converted element by element. For a figure's CSV (:func:`workbook.plots.save_figure`)."""
    if not isinstance(frame, pd.DataFrame):
        from fedlib.validation import fail

        fail("frame", "a pandas DataFrame", type(frame).__name__)
    out = frame.copy()
    for c in [c for c in (PERCENT_COLUMNS if columns is None else columns) if c in out.columns]:
        if out[c].dtype == object:
            out[c] = [100.0 * np.asarray(v, float) if isinstance(v, (list, tuple, np.ndarray))
                      else (np.nan if v is None else 100.0 * float(v)) for v in out[c]]
        else:
            out[c] = 100.0 * out[c].astype(float)
    return out


_CSV_NAMES = {"std": "sd", "ad_std": "ad_sd", "n_seeds": "n"}


def csv_table(table: pd.DataFrame) -> pd.DataFrame:
    """The numbers-only CSV of a :func:`table3` / :func:`table4` table (or any frame with
    ``mean``/``std``/``n_seeds`` columns): fractions in percent (:func:`in_percent`), ``std`` named
    ``sd``, ``ad_std`` ``ad_sd``, ``n_seeds`` ``n``; no formatted string. ``figures/*.csv`` hold
    these (the tables shown in the notebooks keep their "mean ± sd" cells)."""
    return in_percent(table).rename(columns=_CSV_NAMES)


def beside_paper(df: pd.DataFrame, n_clients: int | None = None) -> pd.DataFrame:
    """Table III in both readings beside the paper's K = 100 value, one row per (data set,
    setting, method), numbers only, all in percent (the workbook's unit for accuracies):
    ``paper`` (the published mean, of the paper's data set that ``dataset`` stands in for —
    :data:`workbook.paper_table3.STAND_INS`; NaN where the table has none), ``paper_text_mean``,
    ``paper_text_sd``, ``paper_text_n`` and the same for ``paper_code`` over seeds
    (:func:`table3`; NaN mean where none ran or a run failed, ``*_failed`` the failed runs), and
    ``separate_code_run`` (True: the authors' code ran the method differently here, so
    ``paper_code`` is a run of its own; False: one run, made as Table II says, serves both
    readings). ``n_clients`` keeps one K. :func:`beside_paper_markdown` renders it."""
    from .paper_table3 import STAND_INS, paper_value

    keys = _KEYS
    text, code = table3(df).set_index(keys), table3(df, "paper_code").set_index(keys)
    own = set(df[df.reproduction == "paper_code"][keys].itertuples(index=False, name=None))
    rows = []
    for key, t in text.iterrows():
        name, protocol, level, k, method = key
        if n_clients is not None and k != n_clients:
            continue
        c = code.loc[key] if key in code.index else None
        row = {"dataset": name, "paper_dataset": STAND_INS.get(name, name),
               "setting": f"{setting_name(protocol, level)}, K={k}", "method": method,
               "paper": 100.0 * (paper_value(name, method, protocol, level) or np.nan)}
        for reading, r in (("paper_text", t), ("paper_code", c)):
            row[f"{reading}_mean"] = np.nan if r is None else 100.0 * r["mean"]
            row[f"{reading}_sd"] = np.nan if r is None else 100.0 * r["std"]
            row[f"{reading}_n"] = 0 if r is None else int(r["n_seeds"])
            row[f"{reading}_failed"] = 0 if r is None else int(r.get("n_failed", 0))
        row["separate_code_run"] = key in own
        rows.append(row)
    return pd.DataFrame(rows)


def beside_paper_markdown(side: pd.DataFrame) -> str:
    """:func:`beside_paper` as a Markdown table for readers: methods by display name, each
    reading "mean ± sd" in percent (the heading says so), the paper's value, and the column
    "paper_code run": "own run" where the authors' code ran the method differently (two runs),
    "= paper_text" where one run serves both readings."""
    t = pd.DataFrame({
        "data set": side.dataset, "paper's data set": side.paper_dataset, "setting": side.setting,
        "method": side.method.map(display_name),
        "paper (%)": side.paper,
        **{f"{r} (%)": [_fmt(a, b, n, n_failed=f) for a, b, n, f in
                        zip(side[f"{r}_mean"], side[f"{r}_sd"], side[f"{r}_n"], side[f"{r}_failed"])]
           for r in ("paper_text", "paper_code")},
        "paper_code run": np.where(side.separate_code_run, "own run", "= paper_text")})
    return frame_markdown(t)


def readings_frame(methods, n_clients: int, fraction: float) -> pd.DataFrame:
    """What the ``paper_code`` reading changes per method (:func:`fedlib.reproduction.describe`),
    for readers: ``method`` (display name), ``what the authors' code did`` and ``runs`` — "two:
    paper_text and paper_code" where that makes another run at K = ``n_clients``, q =
    ``fraction``, "one serves both readings" where it does not."""
    from fedlib.reproduction import describe

    d = pd.DataFrame(describe(methods, n_clients, fraction))
    return pd.DataFrame({"method": d.method.map(display_name), "what the authors' code did": d.paper_code,
                         "runs": np.where(d.separate_run, "two: paper_text and paper_code",
                                          "one serves both readings")})


def table4(df: pd.DataFrame, reproduction: str = "paper_text") -> pd.DataFrame:
    """AD ± SDAD against 1.0 (Clust-PSI-PFL's definition; mean over seeds of each run's AD and
    SDAD), with ``ad_std`` the std of AD over seeds, and the same against the CL accuracy
    (``ad_cl``, ``sdad_cl``; NaN where no CL run of the setting exists), for the runs of one
    ``reproduction`` (:func:`for_reproduction`; each client's model after the last round)."""
    df = for_reproduction(df, reproduction)
    out = _aggregate(df, "ad").rename(columns={"mean": "ad", "std": "ad_std"})
    ok = df[df.status == "ok"]
    extra = ok.groupby(_KEYS, dropna=False)[["sdad", "ad_cl", "sdad_cl"]].mean().reset_index()
    out = out.merge(extra, on=_KEYS, how="left")
    out.loc[out.n_failed > 0, ["sdad", "ad_cl", "sdad_cl"]] = np.nan
    return out


def _fmt(a, b, n, digits=2, n_failed=0) -> str:
    """"mean ± std"; the mean alone for one seed (no "± 0.00"); "failed" / "failed (f/n seeds)"
    when runs diverged; "—" when none ran."""
    if n_failed:
        return "failed" if n == 0 else f"failed ({n_failed}/{n_failed + n} seeds)"
    if n == 0 or pd.isna(a):
        return "—"
    return f"{a:.{digits}f}" if n == 1 else f"{a:.{digits}f} ± {b:.{digits}f}"


def cell_numbers(cells) -> pd.DataFrame:
    """The numbers-only CSV of a study's cell table: one row per (row, column) cell of ``cells``
    (an iterable of ``(row label, column label, values over seeds, status)``; status "ok", a run's
    other status, or "not run"): ``row``, ``column``, ``mean``, ``sd`` (population sd over seeds, as
    :func:`mean_sd` prints it; NaN for one seed or none), ``n`` (finite values), ``status``. The
    values keep the table's unit (a study's accuracies are percent already)."""
    out = []
    for row, column, values, status in cells:
        v = np.asarray(list(values), float)
        v = v[~np.isnan(v)] if status == "ok" else np.asarray([], float)
        out.append({"row": row, "column": column, "mean": float(v.mean()) if v.size else np.nan,
                    "sd": float(v.std()) if v.size > 1 else np.nan, "n": int(v.size), "status": status})
    return pd.DataFrame(out, columns=["row", "column", "mean", "sd", "n", "status"])


def mean_sd(values, digits: int = 2) -> str:
    """Values over seeds as the workbook prints them: ``"87.20 ± 0.41 (n = 3)"`` (population std
    over seeds, as every table here), ``"87.20 (n = 1)"`` for one seed (no "± 0.00"), ``"—"``
    for none; NaNs are dropped."""
    v = np.asarray(list(values), float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return "—"
    if v.size == 1:
        return f"{v[0]:.{digits}f} (n = 1)"
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f} (n = {v.size})"


def to_markdown(table: pd.DataFrame, value: str = "mean", spread: str = "std", percent: bool = True) -> str:
    """Paper layout: one block per dataset, methods as rows, (protocol, level, K) as columns.

    ``percent``: the values are fractions of 1 (accuracies, AD/SDAD: Tables III–IV) and print in
    percent, the workbook's one unit for accuracies (the paper prints 0.82, we print 82.00); each
    block's heading says "(%)". ``percent=False`` prints the values as they are (a count, a ratio
    such as PSI-PFL's CP)."""
    from fedlib.validation import check_choice

    check_choice(percent, "percent", (True, False))
    t = table.copy()
    if percent:
        t[[value, spread]] = t[[value, spread]] * 100.0
    t["setting"] = [
        f"{setting_name(p, lv)}, K={k}" for p, lv, k in zip(t.protocol, t.level, t.n_clients)
    ]
    failed = t["n_failed"] if "n_failed" in t else pd.Series(0, index=t.index)
    t["cell"] = [_fmt(a, b, n, n_failed=f) for a, b, n, f in zip(t[value], t[spread], t.n_seeds, failed)]
    t["Method"] = t.method.map(display_name)
    order = {display_name(m): i for i, m in enumerate(METHODS)}  # the rows in the registry's order
    blocks = []
    for ds, sub in t.groupby("dataset", sort=True):
        settings = list(dict.fromkeys(sub.sort_values(["protocol", "n_clients", "level"],
                                                      ascending=[True, True, False]).setting))
        pv = sub.pivot_table(index="Method", columns="setting", values="cell", aggfunc="first")
        pv = pv.reindex(columns=settings).fillna("")
        pv = pv.loc[sorted(pv.index, key=lambda m: order.get(m, 99))]
        header = "| Method | " + " | ".join(settings) + " |"
        sep = "|---" * (len(settings) + 1) + "|"
        lines = [f"**{ds}**" + (" (%)" if percent else ""), "", header, sep]
        lines += [f"| {m} | " + " | ".join(pv.loc[m]) + " |" for m in pv.index]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def frame_markdown(t: pd.DataFrame, digits: int = 2) -> str:
    """A small frame as a Markdown table (floats with ``digits`` decimals, NaN as "—")."""
    head = "| " + " | ".join(map(str, t.columns)) + " |"
    sep = "|" + "---|" * len(t.columns)
    body = ["| " + " | ".join(("—" if np.isnan(v) else f"{v:.{digits}f}") if isinstance(v, float) else str(v)
                              for v in row) + " |" for row in t.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def provenance(records) -> pd.DataFrame:
    """Where and how long a set of records ran: one row per machine (its GPU, else its CPU model),
    with the number of runs, their wall time (record ``seconds``: mean and total, in minutes of
    the run's own clock, other runs sharing the machine included) and, where recorded, the CPU
    time of the run's process (``cpu_seconds``, every thread summed)."""
    rows = []
    for r in records:
        host = r.get("host", {})
        rows.append({"machine": host.get("gpu") or host.get("cpu", "unknown"),
                     "torch": r.get("versions", {}).get("torch", "unknown"),
                     "seconds": r.get("seconds", np.nan), "cpu_seconds": r.get("cpu_seconds", np.nan)})
    df = pd.DataFrame(rows, columns=["machine", "torch", "seconds", "cpu_seconds"])
    out = df.groupby(["machine", "torch"], sort=True).agg(
        runs=("seconds", "size"), wall_min_mean=("seconds", lambda s: s.mean() / 60),
        wall_min_total=("seconds", lambda s: s.sum() / 60),
        cpu_min_total=("cpu_seconds", lambda s: s.sum(min_count=1) / 60)).reset_index()
    return out.round(1)
