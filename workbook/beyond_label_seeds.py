"""Notebook 12 over seeds (issue 58): the clustering-only ARIs with an interval over seeds, verdicts
that read the interval against the cut-offs, and the small clients' accuracy with their test
samples pooled.

**Clustering-only ARI** (:func:`clustering_ari`). Clust-PSI-PFL's grouping is a function of the
histograms the clients send (Algorithm 1 on the train splits' histograms), not of training: it
costs one partition and one K-means search, no round. :func:`clustering_ari` builds the
federation of a run exactly as a training run does (:func:`fedlib.experiment.build_federation`),
computes the variant's grouping (:func:`fedlib.methods.clust_psi_pfl.cluster_clients`) and its
ARI against the planted groups. What varies over seeds is the run's ``seed``: the partition, the
train / validation / test split, for the covariate protocols the transforms' noise, and (issue 70)
K-means' own initialisation: :func:`kmeans_seeded` sets the variant's ``kmeans_seed`` to
:data:`KMEANS_BASE` + seed (42 + seed; 42 is the authors' ``random_state``, so seed 0 is exactly
the trained runs' grouping). Rows written before issue 70 kept ``kmeans_seed`` = 42 at every seed;
the CSV's ``kmeans_seed`` column says which (absent: 42), and :func:`ari_reading` picks the
seed-derived rows where they exist. The trained runs of notebook 12 keep the method's default (42):
changing it would change every Clust-PSI-PFL record's key. The clustered baselines that need
training to group (IFCA, FedClust, CFL, pFedLIA) have no clustering-only ARI.

**Verdicts that describe the runs** (issue 70, :func:`share_over_seeds`): ARIs are bounded and
bimodal (a seed recovers the groups or it does not), so a mean with a t-interval misreads them (its
upper limit can pass 1). Per setting the verdict reads the **share of seeds with ARI ≥ the cut-off**
(:data:`workbook.beyond_label.RECOVERED`, 0.9) with its exact **Clopper–Pearson** interval
(:func:`clopper_pearson`, always within [0, 1]) and the seeds' **median** ARI
(:func:`share_verdict`): "recovers in every seed", "recovers in most seeds" (the interval's lower
limit > ½), "recovers in few seeds" (its upper limit < ½, some seed recovers), "recovers in no
seed" (none reaches the cut-off, the median above chance), "cannot separate" (none, and the median ≤
:data:`~workbook.beyond_label.CHANCE`), "mixed" otherwise; one seed is no verdict.

**Interval of the mean** (:func:`t_interval`, :func:`interval_verdict`; issue 58's reading, kept
for comparison): mean ± t_{0.975, n−1} · s / √n, the verdict "recovers" when the whole interval is
≥ 0.9 — a statement about the mean, not about the runs.

**Small clients pooled** (:func:`pooled_small_accuracy`): a small client (5–20 samples) keeps
1–4 test samples, so its A_k = CC_k / n_k moves by 25–100 pp per sample. The pooled reading sums
the planted small clients' correct predictions over their summed test samples (Σ CC_k / Σ n_k
over the small clients), with a bootstrap interval over the small clients (resampled with their
counts); the records keep ``correct`` and ``n_test`` per client, so it is computed from the
committed records, no new run.

**The small clients' gap to FedAvg over seeds** (issue 70, :func:`small_gap_pairs`,
:func:`small_gap_table`): per (variant, share, seed) the pooled accuracy minus FedAvg's at the same
share and seed (the same partition and splits: a paired difference), read over the paper profile's
seed and the pre-registered seeds 1–2 (:data:`SMALL_SEEDS_DESIGN`). Per share: the seeds' mean gap
with its 95 % t-interval; over all shares: the mean over the (share, seed) pairs with its interval,
read "below" / "above FedAvg" when the interval excludes 0 and "undecided" otherwise, with the pairs
that would likely decide it (:func:`units_to_exclude_zero`).
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
from scipy import stats

from fedlib import partition as P
from fedlib.evaluation import cluster_recovery
from fedlib.frame import records_frame
from fedlib.validation import check_int, check_number, fail

__all__ = ["CONFIDENCE", "KMEANS_BASE", "kmeans_seeded", "ari_reading", "clopper_pearson", "share_verdict",
           "share_over_seeds", "share_text", "t_interval", "interval_verdict", "clustering_ari", "clustering_aris", "ari_rows", "read_ari_rows", "ARI_RECORDS", "CLUSTERING_ONLY", "ari_over_seeds",
           "interval_text", "answer_over_seeds", "pooled_small_accuracy", "bootstrap_pooled", "small_pooled_frame", "small_pooled_table", "SMALL_SEEDS_DESIGN", "small_specs_over_seeds", "small_gap_pairs", "units_to_exclude_zero", "small_gap_table", "collapsed_rows"]

CONFIDENCE = 0.95
"""The intervals' two-sided level."""


def t_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of ``values`` (NaN dropped): the Student-t interval for the mean,
    mean ± t_{(1+c)/2, n−1} · s / √n with s the sample sd. n = 1 gives (value, NaN, NaN, 1): one
    value has no interval."""
    check_number(confidence, "confidence", 0, 1, low_open=True, high_open=True)
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return np.nan, np.nan, np.nan, 0
    m = float(v.mean())
    if v.size == 1:
        return m, np.nan, np.nan, 1
    half = float(stats.t.ppf((1 + confidence) / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return m, m - half, m + half, int(v.size)


def clopper_pearson(hits: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided interval of a binomial share ``hits`` / ``n``:
    low = Beta⁻¹(α/2; x, n − x + 1) (0 when x = 0), high = Beta⁻¹(1 − α/2; x + 1, n − x) (1 when
    x = n), α = 1 − ``confidence``. Always within [0, 1]; n = 0 gives (NaN, NaN)."""
    check_number(confidence, "confidence", 0, 1, low_open=True, high_open=True)
    check_int(n, "n", 0)
    check_int(hits, "hits", 0)
    if hits > n:
        fail("hits", f"a count ≤ n = {n}", hits)
    if n == 0:
        return np.nan, np.nan
    a = 1 - confidence
    low = 0.0 if hits == 0 else float(stats.beta.ppf(a / 2, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(1 - a / 2, hits + 1, n - hits))
    return low, high


def share_verdict(hits: int, n: int, low: float, high: float, median: float, *, chance: float = 0.1) -> str:
    """What the seeds did (module docstring): ``hits`` of ``n`` seeds at ARI ≥ the cut-off, the
    share's interval [``low``, ``high``] and the seeds' ``median`` ARI."""
    if n < 2:
        return "one seed: no verdict" if n == 1 else "no seed"
    if hits == n:
        return "recovers in every seed"
    if hits == 0:
        return "cannot separate" if median <= chance else "recovers in no seed"
    if low > 0.5:
        return "recovers in most seeds"
    if high < 0.5:
        return "recovers in few seeds"
    return "mixed"


def share_over_seeds(rows: pd.DataFrame, confidence: float = CONFIDENCE, *, chance: float = 0.1,
                     recovered: float = 0.9) -> pd.DataFrame:
    """Per (partition, variant) of ``rows`` (columns ``partition``, ``variant``, ``seed``, ``ari``):
    ``n`` seeds, ``hits`` (seeds with ARI ≥ ``recovered``), ``share`` = hits / n, its
    Clopper–Pearson ``low`` / ``high`` (:func:`clopper_pearson`), the seeds' ``median``, ``min``,
    ``max`` and the :func:`share_verdict`."""
    out = []
    for (p, v), g in rows.groupby(["partition", "variant"], sort=False):
        a = np.asarray(g.ari, np.float64)
        a = a[~np.isnan(a)]
        n, hits = int(a.size), int((a >= recovered).sum())
        lo, hi = clopper_pearson(hits, n, confidence)
        med = float(np.median(a)) if n else np.nan
        out.append({"partition": p, "variant": v, "n": n, "hits": hits, "share": hits / n if n else np.nan,
                    "low": lo, "high": hi, "median": med, "min": float(a.min()) if n else np.nan,
                    "max": float(a.max()) if n else np.nan,
                    "verdict": share_verdict(hits, n, lo, hi, med, chance=chance)})
    return pd.DataFrame(out, columns=["partition", "variant", "n", "hits", "share", "low", "high", "median", "min",
                                      "max", "verdict"])


def share_text(hits: int, n: int, low: float, high: float, median: float, recovered: float = 0.9) -> str:
    """"h of n seeds ≥ 0.9 (share % [low, high]), median m" — "—" for no seed."""
    if n == 0:
        return "—"
    if n == 1:
        return f"ARI {median:.2f} (one seed, no interval)"
    return (f"{hits} of {n} seeds ≥ {recovered:g} ({100 * hits / n:.0f} % [{100 * low:.0f}, {100 * high:.0f}]), "
            f"median {median:.2f}")


def interval_verdict(low: float, high: float, *, chance: float = 0.1, recovered: float = 0.9) -> str:
    """The verdict of an interval [low, high] against the cut-offs (module docstring); one value
    (NaN bounds) is "one run: no verdict"."""
    if np.isnan(low) or np.isnan(high):
        return "one run: no verdict"
    if low > high:
        fail("low, high", "low ≤ high", (low, high))
    if low >= recovered:
        return "recovers"
    if high <= chance:
        return "cannot separate"
    if high < recovered and low > chance:
        return "partly"
    crossed = recovered if high >= recovered else chance
    return f"undecided (interval crosses {crossed:g})"


KMEANS_BASE = 42
"""K-means' seed of the clustering-only ARIs is ``KMEANS_BASE + seed`` (issue 70): 42, the authors'
``random_state``, at seed 0."""


def kmeans_seeded(spec):
    """``spec`` (a Clust-PSI-PFL :class:`fedlib.experiment.RunSpec`) with its ``hyper``'s
    ``kmeans_seed`` = :data:`KMEANS_BASE` + ``spec.seed``: K-means' initialisation varies with the
    run's seed."""
    import dataclasses

    return dataclasses.replace(spec, hyper={**dict(spec.hyper or {}), "kmeans_seed": KMEANS_BASE + int(spec.seed)})


def ari_reading(rows: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of :data:`ARI_RECORDS` to read, and what they are: the rows whose K-means seed
    derives from the run's seed (``kmeans_seed`` = 42 + seed) where any seed other than 0 has
    them, otherwise the rows written before issue 70 (``kmeans_seed`` = 42 at every seed)."""
    r = rows.copy()
    if "kmeans_seed" not in r:
        r["kmeans_seed"] = KMEANS_BASE
    r["kmeans_seed"] = r.kmeans_seed.fillna(KMEANS_BASE).astype(int)
    derived = r[r.kmeans_seed == KMEANS_BASE + r.seed.astype(int)]
    if (derived.seed.astype(int) != 0).any():
        return derived.reset_index(drop=True), "K-means seeded 42 + seed (its initialisation varies with the seed)"
    fixed = r[r.kmeans_seed == KMEANS_BASE].reset_index(drop=True)
    return fixed, ("K-means seed fixed at 42 at every seed (rows written before issue 70: its initialisation "
                   "does not vary; `python benchmarks/beyond_label_ari.py --seeds 0-19` adds the seeded rows)")


CLUSTERING_ONLY = ("psi_label", "psi_size", "psi_downweight", "psi_attribute", "psi_attribute_bins", "psi_joint")
"""The variants of :data:`workbook.beyond_label.VARIANTS` whose grouping needs no training."""


def clustering_ari(spec) -> dict:
    """The grouping a Clust-PSI-PFL run of ``spec`` (a :class:`fedlib.experiment.RunSpec`) would
    train with, and its ARI against the planted groups — no training.

    Returns ``{'ari', 'tau', 'groups', 'cpu_seconds'}`` (``tau``: the number of clusters chosen;
    ``cpu_seconds``: this call's process CPU time)."""
    return clustering_aris([spec])[0]


def clustering_aris(specs) -> list[dict]:
    """:func:`clustering_ari` of each of ``specs`` (Clust-PSI-PFL RunSpecs that may differ in their
    ``hyper`` only: one federation is built for all, the images summarised once); each result's
    ``cpu_seconds`` is its share of the call's CPU time (the federation's split evenly)."""
    import dataclasses

    from fedlib.experiment import build_federation
    from fedlib.methods.clust_psi_pfl import Hyper, attribute_histograms, cluster_clients
    from fedlib.noniid import image_summaries

    specs = list(specs)
    if not specs:
        return []
    for s in specs:
        if s.method != "clust_psi_pfl":
            fail("spec.method", "'clust_psi_pfl' (the only method whose grouping needs no training)", s.method)
    base = dataclasses.replace(specs[0], hyper={})
    if any(dataclasses.replace(s, hyper={}) != base for s in specs):
        fail("specs", "Clust-PSI-PFL specs that differ in their hyper only", [s.key() for s in specs])
    truth = P.planted_clusters(base.protocol, int(base.n_clients), base.level)
    if truth is None:
        fail("spec", "a partition that plants groups (fedlib.partition.planted_clusters)", (base.protocol, base.level))
    t0 = time.process_time()
    fed, counts, _ = build_federation(dataclasses.replace(base, method="fedavg"), "cpu")
    x = fed.x.cpu().numpy()
    summaries = None
    shared = time.process_time() - t0
    out = []
    for s in specs:
        t = time.process_time()
        hp = Hyper(**dict(s.hyper or {}))
        hist = None
        if hp.features != "label":
            if x.ndim == 4 and summaries is None:  # the same six summaries attribute_histograms computes
                t_s = time.process_time()
                summaries = image_summaries(x)
                shared += time.process_time() - t_s
                t += time.process_time() - t_s
            hist = attribute_histograms(summaries if x.ndim == 4 else x, fed.y.cpu().numpy(), fed.train_parts,
                                        hp.features, hp.n_bins, fed.n_classes)
        labels, info = cluster_clients(counts, hp, hist)
        out.append({"ari": float(cluster_recovery(np.asarray(labels, np.int64), truth)),
                    "tau": int(info.get("tau", 1)), "groups": int(len(np.unique(labels))),
                    "cpu_seconds": time.process_time() - t})
    for r in out:
        r["cpu_seconds"] += shared / len(out)
    return out


ARI_RECORDS = "benchmarks/records/beyond_label_ari/aris.csv"
"""The committed clustering-only ARIs (``benchmarks/beyond_label_ari.py`` writes them): one row per
(partition, variant, seed) of notebook 12's paper grid, with ``n_clients``, ``ari``, ``tau``,
``groups``, ``cpu_seconds`` and ``kmeans_seed`` (absent or empty in rows written before issue 70:
42)."""


def ari_rows(specs, seeds) -> pd.DataFrame:
    """Clustering-only ARIs (:func:`clustering_aris`) of the :data:`CLUSTERING_ONLY` variants among
    notebook 12's ``specs`` (any seed), recomputed at each of ``seeds`` with K-means seeded
    :func:`kmeans_seeded`: one row per (partition, variant, seed), the columns of :data:`ARI_RECORDS`."""
    import dataclasses

    from . import beyond_label as B

    groups = {}
    for s in specs:
        d = s.to_dict()
        v = B.variant_of(d)
        if v in CLUSTERING_ONLY:
            groups.setdefault(B.partition_of_spec(d), {})[v] = s
    rows = []
    for part, by_variant in groups.items():
        for seed in seeds:
            todo = [(v, kmeans_seeded(dataclasses.replace(s, seed=int(seed)))) for v, s in by_variant.items()]
            for (v, s), r in zip(todo, clustering_aris([s for _, s in todo])):
                rows.append({"partition": part, "variant": v, "seed": int(seed), "n_clients": s.n_clients,
                             "dataset": s.dataset, **r, "kmeans_seed": KMEANS_BASE + int(seed)})
    return pd.DataFrame(rows, columns=["partition", "variant", "seed", "n_clients", "dataset", "ari", "tau",
                                       "groups", "cpu_seconds", "kmeans_seed"])


def read_ari_rows(path, n_clients: int) -> pd.DataFrame:
    """The committed clustering-only ARIs at ``path`` for ``n_clients`` clients (empty if none)."""
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return pd.DataFrame(columns=["partition", "variant", "seed", "n_clients", "dataset", "ari", "tau", "groups",
                                     "cpu_seconds", "kmeans_seed"])
    rows = pd.read_csv(path)
    return rows[rows.n_clients == int(n_clients)].reset_index(drop=True)


def ari_over_seeds(rows: pd.DataFrame, confidence: float = CONFIDENCE, *, chance: float = 0.1,
                   recovered: float = 0.9) -> pd.DataFrame:
    """Per (partition, variant) of ``rows`` (columns ``partition``, ``variant``, ``seed``, ``ari``,
    e.g. the committed clustering-only ARIs): ``n`` seeds, ``mean``, the t-interval ``low`` /
    ``high`` (:func:`t_interval`), ``sd``, ``min``, ``max`` and the :func:`interval_verdict`."""
    out = []
    for (p, v), g in rows.groupby(["partition", "variant"], sort=False):
        m, lo, hi, n = t_interval(g.ari, confidence)
        out.append({"partition": p, "variant": v, "n": n, "mean": m, "low": lo, "high": hi,
                    "sd": float(g.ari.std(ddof=1)) if n > 1 else np.nan, "min": float(g.ari.min()),
                    "max": float(g.ari.max()), "verdict": interval_verdict(lo, hi, chance=chance, recovered=recovered)})
    return pd.DataFrame(out, columns=["partition", "variant", "n", "mean", "low", "high", "sd", "min", "max",
                                      "verdict"])


def interval_text(mean: float, low: float, high: float, n: int, digits: int = 2) -> str:
    """"mean [low, high] (n = n)" — or "value (n = 1, no interval)" for one seed."""
    if n == 0 or np.isnan(mean):
        return "—"
    if n == 1 or np.isnan(low):
        return f"{mean:.{digits}f} (n = 1, no interval)"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}] (n = {n})"


def answer_over_seeds(rows: pd.DataFrame, partitions=None, extensions=None,
                      confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Notebook 12's answer from clustering-only ARIs over seeds (``rows``, :data:`ARI_RECORDS`):
    per partition, label-only PSI's runs and those of the extension with the most seeds at
    ARI ≥ the cut-off (ties: the higher median), each as :func:`share_text` with its
    :func:`share_verdict` — what the seeds did, not an interval of the mean."""
    from . import beyond_label as B

    t = share_over_seeds(rows, confidence, chance=B.CHANCE, recovered=B.RECOVERED)
    extensions = tuple(extensions or B.EXTENSIONS)
    order = list(partitions) if partitions is not None else list(dict.fromkeys(t.partition))
    out = []
    for p in order:
        here = t[t.partition == p].set_index("variant")
        if "psi_label" not in here.index:
            continue
        lab = here.loc["psi_label"]
        ext = here[here.index.isin(extensions)]
        best = ext.sort_values(["share", "median"], ascending=False, kind="stable").index[0] if len(ext) else None
        e = ext.loc[best] if best is not None else None

        def text(r):
            return share_text(int(r.hits), int(r.n), r.low, r.high, r["median"], B.RECOVERED)
        out.append({"partition": p, "label_only": text(lab), "label_only_verdict": lab.verdict,
                    "best_extension": best, "extension": text(e) if e is not None else "—",
                    "extension_verdict": e.verdict if e is not None else "none run", "seeds": int(here.n.min())})
    return pd.DataFrame(out, columns=["partition", "label_only", "label_only_verdict", "best_extension", "extension",
                                      "extension_verdict", "seeds"])


def pooled_small_accuracy(correct, n_test, small) -> float:
    """Σ correct / Σ test samples over the clients where ``small`` (K,) is True (a fraction);
    NaN when they hold no test sample."""
    c, n, s = (np.asarray(correct, np.float64), np.asarray(n_test, np.float64), np.asarray(small, bool))
    if not (c.shape == n.shape == s.shape):
        fail("correct, n_test, small", "three arrays of shape (K,)", (c.shape, n.shape, s.shape))
    total = n[s].sum()
    return float(c[s].sum() / total) if total > 0 else np.nan


def bootstrap_pooled(correct, n_test, *, n_boot: int = 2000, seed: int = 0,
                     confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of Σ correct / Σ n_test, resampling the clients (with their
    counts) ``n_boot`` times from ``default_rng(seed)``; clients with n_test = 0 carry no weight."""
    check_int(n_boot, "n_boot", 10)
    c, n = np.asarray(correct, np.float64), np.asarray(n_test, np.float64)
    if c.size == 0 or n.sum() == 0:
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, c.size, size=(n_boot, c.size))
    tot = n[idx].sum(axis=1)
    vals = np.where(tot > 0, c[idx].sum(axis=1) / np.where(tot > 0, tot, 1), np.nan)
    a = (1 - confidence) / 2
    return float(np.nanquantile(vals, a)), float(np.nanquantile(vals, 1 - a))


def small_pooled_frame(records, variant_of, *, n_boot: int = 2000) -> pd.DataFrame:
    """Per finished ``small_clients`` record: ``share``, ``variant`` (``variant_of(spec)``), ``seed``,
    ``small_clients`` (planted small clients), ``small_test_samples`` (their test samples, total and
    the per-client min–max), the per-client mean A_k (``small_mean``, %, the notebook's ``small``),
    the pooled accuracy (``small_pooled``, %) and its bootstrap interval over the small clients
    (``pooled_low``, ``pooled_high``, %)."""
    f = records_frame(records)
    runs = f[(f.status == "ok") & (f.protocol == "small_clients")].record if len(f) else []
    rows = []
    for r in runs:
        s = r["spec"]
        small = P.planted_clusters(s["protocol"], int(s["n_clients"]), s["level"]) == 1
        c, n = np.asarray(r["correct"], np.float64), np.asarray(r["n_test"], np.float64)
        acc = np.asarray(r["local_accuracy"], np.float64)
        lo, hi = bootstrap_pooled(c[small], n[small], n_boot=n_boot, seed=int(s["seed"]))
        rows.append({"share": float(s["level"]), "variant": variant_of(s), "seed": s["seed"],
                     "small_clients": int(small.sum()), "small_test_samples": int(n[small].sum()),
                     "per_client_test": f"{int(n[small].min())}–{int(n[small].max())}",
                     "small_mean": 100 * float(np.nanmean(acc[small])),
                     "small_pooled": 100 * pooled_small_accuracy(c, n, small),
                     "pooled_low": 100 * lo, "pooled_high": 100 * hi})
    return pd.DataFrame(rows, columns=["share", "variant", "seed", "small_clients", "small_test_samples",
                                       "per_client_test", "small_mean", "small_pooled", "pooled_low", "pooled_high"])


def small_pooled_table(frame: pd.DataFrame, labels=None, reference: str = "fedavg") -> pd.DataFrame:
    """Variants × small shares of :func:`small_pooled_frame`: "pooled % [low, high] (T test samples)"
    for one seed, the seeds' mean pooled accuracy and "(n = seeds)" for more (intervals are per
    seed: over the small clients), then a column per share of the pooled accuracy minus
    ``reference``'s (pp, same share and seeds). ``labels``: variant → row label."""
    rows = []
    shares = sorted(set(frame.share))
    ref = frame[frame.variant == reference].groupby("share").small_pooled.mean()
    for v in list(dict.fromkeys(frame.variant)):
        row = {"variant": (labels or {}).get(v, v)}
        for sh in shares:
            g = frame[(frame.variant == v) & (frame.share == sh)]
            if g.empty:
                row[f"s = {sh:g}"] = "not run"
                continue
            if len(g) == 1:
                r = g.iloc[0]
                row[f"s = {sh:g}"] = (f"{r.small_pooled:.1f} [{r.pooled_low:.1f}, {r.pooled_high:.1f}] "
                                      f"({r.small_test_samples} test samples, {r.per_client_test} a client)")
            else:
                row[f"s = {sh:g}"] = f"{g.small_pooled.mean():.1f} (n = {len(g)} seeds)"
        for sh in shares:
            g = frame[(frame.variant == v) & (frame.share == sh)]
            row[f"Δ vs {reference}, s = {sh:g} (pp)"] = (round(g.small_pooled.mean() - ref[sh], 1)
                                                        if len(g) and sh in ref.index else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


SMALL_SEEDS_DESIGN = "params/designs/12_beyond_label_skew_small_clients_seeds.yaml"
"""Issue 70's pre-registered seeds 1–2 of the small-client baselines (FedAvg, IFCA, FedClust, CFL,
pFedLIA), computed into notebook 12's paper records folder."""


def small_specs_over_seeds(paper: dict, design: dict) -> list:
    """The small-client runs whose records the gap table reads: the design's variants on its shares,
    at the paper profile's seeds (``paper``: ``params/paper/12_beyond_label_skew.yaml``) and at the
    design's (``design``: :data:`SMALL_SEEDS_DESIGN`), each at its own file's protocol; one spec per
    key."""
    from .beyond_label import GRID_PARAMS, notebook_grid

    specs = {}
    for p in (paper, design):
        grid = {k: p[k] for k in GRID_PARAMS} | {"partitions": [], "variants": list(design["variants"]),
                                                 "small_shares": list(design["small_shares"])}
        for s in notebook_grid(**grid)["study"]:
            specs.setdefault(s.key(), s)
    return list(specs.values())


def small_gap_pairs(frame: pd.DataFrame, reference: str = "fedavg") -> pd.DataFrame:
    """The paired gaps of :func:`small_pooled_frame`: one row per (variant ≠ ``reference``, share, seed)
    where ``reference`` ran at the same share and seed, with ``gap`` = the variant's pooled small-client
    accuracy minus ``reference``'s (pp). The two runs share the seed's partition and test splits, so
    the pair's difference is free of the partition's draw."""
    cols = ["variant", "share", "seed", "gap"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    ref = frame[frame.variant == reference].set_index(["share", "seed"]).small_pooled
    rows = [{"variant": r.variant, "share": float(r.share), "seed": int(r.seed),
             "gap": float(r.small_pooled - ref[(r.share, r.seed)])}
            for r in frame[frame.variant != reference].itertuples() if (r.share, r.seed) in ref.index]
    return pd.DataFrame(rows, columns=cols)


def units_to_exclude_zero(mean: float, sd: float, *, confidence: float = CONFIDENCE,
                          most: int = 50) -> int | None:
    """The least n (2 ≤ n ≤ ``most``) at which mean ± t_{(1+c)/2, n−1} · sd / √n excludes 0 at
    today's mean and sd, or None where none does (mean 0, or sd too large)."""
    if not np.isfinite(mean) or not np.isfinite(sd) or mean == 0:
        return None
    for n in range(2, most + 1):
        if stats.t.ppf((1 + confidence) / 2, n - 1) * sd / np.sqrt(n) < abs(mean):
            return n
    return None


def _gap_cell(interval) -> str:
    """One cell of :func:`small_gap_table`: ``interval`` = :func:`t_interval`'s (mean, low, high, n)."""
    m, lo, hi, n = interval
    if n == 0:
        return "not run"
    return f"{m:+.1f} (n = 1)" if n == 1 else f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}] (n = {n})"


def small_gap_table(pairs: pd.DataFrame, labels=None, reference: str = "fedavg") -> pd.DataFrame:
    """Variants × shares of :func:`small_gap_pairs`, the answer first: "all shares": the mean gap (pp)
    over every (share, seed) pair with its 95 % t-interval (:func:`t_interval`) and n (each pair a
    distinct partition; the shares' own differences widen it); ``verdict`` (``reference`` by its
    label in ``labels``): "identical to {reference}" when every pair's gap is 0 (a run that trained as it),
    "below {reference}" / "above {reference}" when that interval excludes 0, else
    "undecided" with the pairs that would likely decide it at today's mean and sd
    (:func:`units_to_exclude_zero`); then per share the seeds' mean gap, its interval and n (a
    reader sees the verdict without scrolling past the shares)."""
    rows = []
    shares = sorted(set(pairs.share))
    ref = (labels or {}).get(reference, reference)
    for v in list(dict.fromkeys(pairs.variant)):
        g = pairs[pairs.variant == v]
        overall = t_interval(g.gap)
        m, lo, hi, n = overall
        row = {"variant": (labels or {}).get(v, v), "all shares": _gap_cell(overall)}
        if n >= 2 and (g.gap == 0).all():
            row["verdict"] = f"identical to {ref} (every pair's gap 0)"
        elif n >= 2 and hi < 0:
            row["verdict"] = f"below {ref}"
        elif n >= 2 and lo > 0:
            row["verdict"] = f"above {ref}"
        else:
            need = units_to_exclude_zero(m, float(np.std(g.gap, ddof=1))) if n >= 2 else None
            row["verdict"] = ("no verdict (one pair)" if n < 2 else "undecided" + (
                f" (≈{need} pairs would decide it)" if need else
                " (no number of pairs up to 50 would, at today's mean and sd)"))
        for sh in shares:
            row[f"s = {sh:g}"] = _gap_cell(t_interval(g[g.share == sh].gap))
        rows.append(row)
    return pd.DataFrame(rows)


def collapsed_rows(df: pd.DataFrame, variants) -> pd.DataFrame:
    """Per variant of ``variants`` in ``df`` (:func:`workbook.beyond_label.runs_frame`): in how
    many of its finished runs the final grouping has one group (a clustered method that collapsed
    to FedAvg), out of how many, and the partitions where it did."""
    ok = df[(df.status == "ok") & df.variant.isin(list(variants))]
    rows = []
    for v in [v for v in variants if v in set(ok.variant)]:
        g = ok[ok.variant == v]
        one = g[g.groups == 1]
        rows.append({"variant": v, "collapsed": len(one), "runs": len(g),
                     "partitions": ", ".join(sorted(set(one.partition)))})
    return pd.DataFrame(rows, columns=["variant", "collapsed", "runs", "partitions"])
