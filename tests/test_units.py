"""One unit for readers, percent (issue 71): the conversions behind the figures' CSVs and tables,
and the committed CSVs of notebooks 06–09 (numbers only, accuracies in percent)."""
import matplotlib

matplotlib.use("Agg")

import re  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from fedlib.paths import ROOT  # noqa: E402
from workbook import cafa_study, tables  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_in_percent_scales_fraction_columns_only_and_lists_element_by_element():
    f = pd.DataFrame({"method": ["a", "b"], "global_accuracy": [0.5, 0.25], "cp": [2.2, 3.7],
                      "wpsi": [1.5, 0.1], "local_accuracy": [[0.1, 0.2], [1.0]]})
    out = tables.in_percent(f)
    assert out.global_accuracy.tolist() == [50.0, 25.0]
    assert out.cp.tolist() == [2.2, 3.7] and out.wpsi.tolist() == [1.5, 0.1]  # a ratio and a PSI: not percent
    np.testing.assert_allclose(out.local_accuracy[0], [10.0, 20.0])
    assert f.global_accuracy.tolist() == [0.5, 0.25]  # a copy: the frame itself is left alone
    exploded = tables.in_percent(f.explode("local_accuracy"))  # an exploded ECDF frame: object scalars
    assert exploded.local_accuracy.tolist() == pytest.approx([10.0, 20.0, 100.0])
    with pytest.raises(ValueError, match="frame"):
        tables.in_percent([0.5])


def test_csv_table_holds_numbers_mean_sd_n_in_percent():
    t = pd.DataFrame({"dataset": ["fmnist"], "protocol": ["dirichlet"], "level": [0.3], "n_clients": [20],
                      "method": ["fedavg"], "mean": [0.8731], "std": [0.0058], "n_seeds": [2],
                      "n_infeasible": [0], "n_failed": [0]})
    c = tables.csv_table(t)
    assert list(c.columns) == ["dataset", "protocol", "level", "n_clients", "method", "mean", "sd", "n",
                               "n_infeasible", "n_failed"]
    assert c["mean"].iloc[0] == pytest.approx(87.31) and c["sd"].iloc[0] == pytest.approx(0.58)
    assert c["n"].iloc[0] == 2 and c["level"].iloc[0] == 0.3  # a level is not a fraction to scale
    t4 = t.rename(columns={"mean": "ad", "std": "ad_std"}).assign(sdad=0.1, ad_cl=0.2, sdad_cl=0.05)
    c4 = tables.csv_table(t4)
    assert c4[["ad", "ad_sd", "sdad", "ad_cl", "sdad_cl"]].iloc[0].tolist() == pytest.approx([87.31, 0.58, 10, 20, 5])


def test_cafa_fig6_plots_percent_with_a_percent_axis():
    hist = pd.DataFrame({"method": ["fedavg"] * 3, "seed": [0] * 3, "round": [1, 2, 3],
                         "accuracy": [0.25, 0.5, 0.75]})
    fig = cafa_study.fig_curves(hist, "t")
    (line,) = fig.axes[0].get_lines()
    np.testing.assert_allclose(line.get_ydata(), [25.0, 50.0, 75.0])
    assert fig.axes[0].get_ylabel().endswith("(%)")


#: The CSVs notebooks 06–09 write under figures/, and their accuracy (or AD) columns.
CSVS = {
    "table3_global_accuracy": ["mean", "sd"],
    "table3_global_accuracy_paper_code": ["mean", "sd"],
    "table3_beside_paper": ["paper", "paper_text_mean", "paper_code_mean"],
    "table4_fairness": ["ad", "sdad"],
    "table4_fairness_paper_code": ["ad", "sdad"],
    "fig7_global_accuracy": ["global_accuracy", "reported_accuracy"],
    "fig8_local_accuracy_ecdf": ["local_accuracy"],
    "psi_pfl_fig5_thresholds": ["test_accuracy"],
    "psi_pfl_fig6_global_accuracy": ["global_accuracy"],
    "psi_pfl_global_accuracy": ["mean"],
    "psi_pfl_fig7_local_accuracy_ecdf": ["local_accuracy"],
    "cafa_fig6_accuracy": ["accuracy"],
    "fedprism_tables_1_6_7": ["mean", "paper"],
}
FORMATTED = re.compile(r"±|\(n = \d+\)")


@pytest.mark.parametrize("name", sorted(CSVS))
def test_committed_csvs_hold_numbers_in_percent(name):
    """Every committed CSV of notebooks 06–09 parses as numbers (no "68.49 ± 2.66", no "62.16 (n = 1)")
    and its accuracy columns are in percent: numeric, within [0, 100], and above 1 somewhere."""
    df = pd.read_csv(ROOT / "figures" / f"{name}.csv")
    text = df.select_dtypes(exclude="number")
    assert not text.apply(lambda c: c.astype(str).str.contains(FORMATTED)).any().any(), \
        f"{name}.csv holds formatted strings: parse-free numbers are its columns mean, sd, n"
    for col in CSVS[name]:
        assert pd.api.types.is_numeric_dtype(df[col]), f"{name}.csv: {col} is not numeric"
        v = df[col].dropna()
        assert len(v) and v.between(0, 100).all() and v.max() > 1.0, f"{name}.csv: {col} is not in percent"


def test_a_study_cell_csv_holds_numbers_mean_sd_n_and_status():
    """Issue 71: the studies' CSVs (notebooks 11 and 12) hold numbers, never "mean ± sd" strings."""
    import pandas as pd
    from workbook import cross_paper as X
    from workbook.tables import cell_numbers

    got = cell_numbers([("FedAvg", "S = 0", [60.0, 62.0, float("nan")], "ok"), ("CL", "S = 0", [70.0], "ok"),
                        ("Local", "S = 0", [], "not run"), ("CFL", "S = 0", [50.0], "failed")])
    assert list(got.columns) == ["row", "column", "mean", "sd", "n", "status"]
    assert got.loc[0, "mean"] == 61.0 and got.loc[0, "sd"] == 1.0 and got.loc[0, "n"] == 2  # population sd, NaN dropped
    assert got.loc[1, "n"] == 1 and pd.isna(got.loc[1, "sd"])
    assert got.loc[2, "status"] == "not run" and got.loc[2, "n"] == 0 and pd.isna(got.loc[2, "mean"])
    assert got.loc[3, "status"] == "failed" and got.loc[3, "n"] == 0  # a failed cell carries no number
    assert all(pd.api.types.is_float_dtype(got[c]) for c in ("mean", "sd"))
    df = pd.DataFrame({"method": ["fedavg", "fedavg"], "partition": ["similarity_0"] * 2, "status": ["ok", "ok"],
                       "weighted_local": [60.0, 62.0], "never_split": [False, False]})
    csv = X.cell_csv(df, "weighted_local")
    assert list(csv.columns) == ["method", "partition", "mean", "sd", "n", "status"]
    assert csv.loc[0, "mean"] == 61.0 and csv.loc[0, "n"] == 2
