"""Results from training on another CPU: what may differ, by how much, and that the check is real.

Training in float32 is bit-identical per seed on one machine, but another x86 CPU (other
instruction set, other core count) picks other kernels in ATen, MKL, oneDNN and OpenBLAS,
and the last bits of a run differ and grow over the rounds. So nbval does not compare numbers
that come from training (``tests/nbval_sanitize.cfg`` masks the tables' ``mean ± std`` cells;
notebook 06's trend lines are not compared); this file compares them instead, with a stated
tolerance, against the committed ``figures/table3_global_accuracy.csv`` and
``figures/table4_fairness.csv`` (numbers only, in percent: :func:`workbook.tables.csv_table`).

CI (``.ci/run``) runs ``make workbook`` and ``make test`` with the kernels forced to
``tests/other_cpu.env``: the smoke grid is retrained on them, every notebook's output is compared
with the committed one (executed on other kernels) and this file's tests run. ``make
test-other-cpu`` does the same with nbval. Either fails if an output nbval compares depends on
the CPU.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fedlib import experiment
from workbook import tables
from fedlib.paths import ROOT, results_dir

OTHER_CPU_ENV = ROOT / "tests" / "other_cpu.env"

#: Largest difference allowed between a cell of the smoke grid's tables computed here and the
#: committed one (a mean over the cell's two seeds), in percentage points (the CSVs' unit).
#: Global accuracy: ±1 pp, the tolerance of the paper's artifact appendix; AD: ±5 % relative
#: (the appendix's fairness tolerance), at least 1 pp. Measured with the kernels of
#: tests/other_cpu.env (ATen, oneDNN, MKL, OpenBLAS forced, one thread; README
#: "Reproducibility"): 9 of 84 cells differ, accuracy by at most 0.19 pp, AD by at most 0.22 pp.
ACCURACY_TOLERANCE = 1.0
AD_RELATIVE_TOLERANCE, AD_MIN_TOLERANCE = 0.05, 1.0


def tolerance(column: str, committed: pd.Series) -> pd.Series:
    """Allowed absolute difference per cell for ``column`` ('mean' accuracy or 'ad')."""
    if column == "mean":
        return pd.Series(ACCURACY_TOLERANCE, index=committed.index)
    return np.maximum(AD_RELATIVE_TOLERANCE * committed.abs(), AD_MIN_TOLERANCE)


def other_cpu_env() -> dict[str, str]:
    """The variables of tests/other_cpu.env as a dict."""
    out = {}
    for line in OTHER_CPU_ENV.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key] = value
    return out


_TRAIN = """
import hashlib, torch
from fedlib.models import build_model
torch.manual_seed(0)
model = build_model("fmnist_cnn", 10, (1, 28, 28))
x, y = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(3):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
h = hashlib.sha1()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
print(h.hexdigest())
"""


def _train_hash(extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in other_cpu_env()}
    env.update(extra)
    out = subprocess.run([sys.executable, "-c", _TRAIN], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return out.stdout.strip()


# Not marked cross_cpu: its subprocesses set their own kernels (this machine's defaults, and
# tests/other_cpu.env's), whatever the kernels of the run that starts them, so `make test` checks it.
def test_forced_kernels_change_the_bits_of_training():
    """The other-CPU run is not vacuous: its kernels give another float32 result than this
    machine's defaults for the same seeded steps (the paper's FMNIST CNN, three Adam steps),
    while the same kernels repeat it exactly."""
    natural = _train_hash({})
    assert natural == _train_hash({}), "training is not repeatable on one machine"
    assert _train_hash(other_cpu_env()) != natural, (
        "tests/other_cpu.env selects the same kernels as this machine's defaults: "
        "make test-other-cpu would check nothing; force other instruction sets")


def _smoke_tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    p = yaml.safe_load((ROOT / "params" / "smoke" / "05_training.yaml").read_text())
    specs = experiment.grid_specs(p["datasets"], p["protocols"], p["n_clients"], p["seeds"],
                                  p["methods"], hyper=p["hyper"], fl=p["fl"], n_train=p["n_train"],
                                  val_fraction=p["val_fraction"], reproductions=p["reproductions"])
    records = experiment.run_grid(specs, results_dir() / p["results_name"], progress=False)
    df = tables.records_frame(records)
    return tables.table3(df), tables.table4(df), tables.table3(df, "paper_code")


def _compare(new: pd.DataFrame, committed: Path, column: str) -> None:
    """``new`` (a :func:`tables.table3` / :func:`tables.table4` table, fractions) against the committed
    CSV (:func:`tables.csv_table`: percent, ``n`` for ``n_seeds``), cell by cell."""
    old = pd.read_csv(committed)
    new = tables.csv_table(new) if "n_seeds" in new.columns else new
    keys = ["dataset", "protocol", "level", "n_clients", "method"]
    merged = old.merge(new, on=keys, how="outer", suffixes=("_committed", "_here"), indicator=True)
    assert (merged["_merge"] == "both").all(), (
        f"{committed.name}: rows differ from the smoke grid's:\n"
        f"{merged.loc[merged['_merge'] != 'both', keys + ['_merge']]}")
    assert (merged["n_committed"] == merged["n_here"]).all()
    diff = (merged[f"{column}_committed"] - merged[f"{column}_here"]).abs()
    assert not diff.isna().any(), f"{column}: a value is missing on one side"
    allowed = tolerance(column, merged[f"{column}_committed"])
    table = merged[keys].assign(committed=merged[f"{column}_committed"],
                                here=merged[f"{column}_here"], allowed=allowed)
    bad = table[diff > allowed]
    assert bad.empty, f"{committed.name} {column}: cells differ by more than allowed:\n{bad}"


@pytest.mark.cross_cpu
def test_smoke_training_numbers_match_the_committed_tables():
    """Table III (global accuracy; as Table II says and as the authors' code ran it) and Table IV
    (AD) of the smoke grid, trained on this machine (or reused from results/), agree with the
    committed CSVs within the stated tolerance."""
    t3, t4, t3_code = _smoke_tables()
    _compare(t3, ROOT / "figures" / "table3_global_accuracy.csv", "mean")
    _compare(t4, ROOT / "figures" / "table4_fairness.csv", "ad")
    _compare(t3_code, ROOT / "figures" / "table3_global_accuracy_paper_code.csv", "mean")


@pytest.mark.cross_cpu
def test_tolerance_check_catches_a_real_change():
    """The comparison fails when one cell moves by more than the tolerance, and passes the
    committed table itself."""
    committed = ROOT / "figures" / "table3_global_accuracy.csv"
    table = pd.read_csv(committed)
    moved = table.copy()
    moved.loc[3, "mean"] += ACCURACY_TOLERANCE + 0.005
    with pytest.raises(AssertionError, match="differ by more than allowed"):
        _compare(moved, committed, "mean")
    _compare(table, committed, "mean")
