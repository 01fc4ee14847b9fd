"""Two readings of Table III (fedlib.reproduction): the settings each applies, the reporting
rules by hand, and real runs whose records carry what ran and what the code would report."""
import numpy as np
import pytest

from fedlib import experiment as X
from fedlib import reproduction as R
from workbook.tables import for_reproduction, records_frame, table3
from fedlib.methods.base import pooled_accuracies

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)

FAST = {"rounds": 3, "local_epochs": 1}


def spec(method="fedavg", reproduction="paper_text", **kw):
    return X.RunSpec("adult", "dirichlet", 0.5, 10, 0, method, fl=FAST, n_train=2000,
                     reproduction=reproduction, **kw)


# ----------------------------------------------------------------------------- rules by hand
def test_paper_text_changes_nothing_and_paper_code_what_the_authors_code_ran():
    assert R.settings_for("cfl", "paper_text").fl == {} and R.settings_for("cfl", "paper_text").hyper == {}
    fedlab = R.settings_for("cfl", "paper_code")
    assert fedlab.fl == {"optimizer": "sgd", "lr": 0.001, "batch_size": 64, "shuffle": False}
    assert fedlab.report == "best_round_pooled_cluster_mean"
    assert R.settings_for("fedsoft", "paper_code").report == "best_round_pooled_cluster_mean"
    assert fedlab.hyper == {"split_test": "mean_of_norms", "aggregation": "uniform", "warmup_rounds": 0}
    assert R.settings_for("poc", "paper_code").hyper == {"d_policy": "min", "aggregation": "uniform", "loss": "fedlab"}
    assert R.settings_for("poc", "paper_code").report == "last_round"
    for name in ("haccs", "fedcls"):
        assert R.settings_for(name, "paper_code").hyper == {"variant": "psi_code", "aggregation": "uniform"}
    assert R.settings_for("fedsoft", "paper_code").fl["shuffle"] is True  # FedSoft's trainer shuffled
    assert R.settings_for("fedprox", "paper_code").hyper == {"mu": 0.0}  # the client never read μ
    assert R.settings_for("fedavg", "paper_code").fl == {"min_clients": 2}  # Keras Adam, batch 32: the default
    assert R.settings_for("clust_psi_pfl", "paper_code").hyper == {"nonpositive_silhouette": "fedavg"}
    assert R.settings_for("cl", "paper_code").fl == {}  # not one of the code's baselines
    # CAFA's authors' train.py: a fixed k = 6, K-means random_state 0 (no silhouette search)
    assert R.settings_for("cafa", "paper_code").hyper == {"clustering": "fixed", "k_fixed": 6}
    assert set(R.PAPER_CODE) == {"fedavg", "fedprox", "fedavgm", "fedadagrad", "fedyogi", "fedadam", "psi_pfl",
                                 "clust_psi_pfl", "poc", "haccs", "fedcls", "cfl", "fedsoft", "cafa"}
    with pytest.raises(ValueError, match="reproduction must be one of"):
        R.settings_for("cfl", "paper")


def test_runs_differently_only_where_the_code_changes_something():
    assert not R.runs_differently("cl", 100, 0.5)                  # not one of the code's baselines
    assert not R.runs_differently("fedavg", 100, 0.5)              # max(⌊50⌋, 2) = 50
    assert R.runs_differently("fedavg", 3, 0.5)                    # max(⌊1.5⌋, 2) = 2 ≠ 1
    assert R.runs_differently("fedprox", 100, 0.5)                 # μ = 0
    assert R.runs_differently("cfl", 100, 0.5) and R.runs_differently("clust_psi_pfl", 100, 0.5)
    assert R.runs_differently("cafa", 20, 0.3)                     # fixed k instead of the silhouette search


def test_reported_accuracy_last_round_or_best_pooled_cluster_mean():
    history = [{"round": 1, "global_accuracy": 0.5, "mean_pooled_model_accuracy": 0.4},
               {"round": 2, "global_accuracy": 0.6, "mean_pooled_model_accuracy": 0.7},
               {"round": 3, "global_accuracy": 0.8, "mean_pooled_model_accuracy": 0.65}]
    assert R.reported_accuracy("last_round", 0.8, history) == 0.8
    assert R.reported_accuracy("best_round_pooled_cluster_mean", 0.8, history) == 0.7  # round 2, not the last
    with pytest.raises(ValueError, match="pooled_model_accuracy"):
        R.reported_accuracy("best_round_pooled_cluster_mean", 0.8, [{"round": 1, "global_accuracy": 0.5}])
    with pytest.raises(ValueError, match="rule must be one of"):
        R.reported_accuracy("best", 0.8, history)


def test_pooled_accuracies_by_hand():
    correct = [[3, 0, 5], [1, 2, 0]]  # two models on three clients' test splits of 4, 2, 6 samples
    np.testing.assert_allclose(pooled_accuracies(correct, [4, 2, 6]), [8 / 12, 3 / 12])
    with pytest.raises(ValueError, match="n must be"):
        pooled_accuracies(correct, [0, 0, 0])


# ----------------------------------------------------------------------------- specs and grids
def test_paper_text_keys_are_unchanged_and_paper_code_is_another_run():
    text, code = spec("cfl"), spec("cfl", "paper_code")
    assert "reproduction" not in text.to_dict()  # records computed before this field keep their keys
    assert text.key() == X.RunSpec("adult", "dirichlet", 0.5, 10, 0, "cfl", fl=FAST, n_train=2000).key()
    assert code.to_dict()["reproduction"] == "paper_code" and code.key() != text.key()
    hyper, fl, _ = spec("poc", "paper_code", hyper={"d": 6, "d_policy": "raise"}).effective()
    assert hyper == {"d": 6, "d_policy": "min", "aggregation": "uniform", "loss": "fedlab"}  # it wins where it speaks
    assert fl == {**FAST, "optimizer": "sgd", "lr": 0.001, "batch_size": 64, "shuffle": False}
    with pytest.raises(ValueError, match="reproduction must be one of"):
        spec("cfl", "paper_cod").validate()


def test_grid_specs_adds_paper_code_runs_only_where_the_code_differs():
    specs = X.grid_specs(["adult"], {"dirichlet": [0.5]}, [10], [0], ["cl", "fedavg", "cfl"],
                         reproductions=["paper_text", "paper_code"])
    assert [(s.method, s.reproduction) for s in specs] == [  # ⌊0.5·10⌋ ≥ 2: FedAvg's code runs as Table II
        ("cl", "paper_text"), ("fedavg", "paper_text"), ("cfl", "paper_text"), ("cfl", "paper_code")]
    few = X.grid_specs(["adult"], {"dirichlet": [0.5]}, [3], [0], ["fedavg"], fl={"fraction": 0.5},
                       reproductions=["paper_text", "paper_code"])
    assert [s.reproduction for s in few] == ["paper_text", "paper_code"]  # ⌊1.5⌋ = 1 < Flower's 2
    default = X.grid_specs(["adult"], {"dirichlet": [0.5]}, [10], [0], ["cl", "cfl"])
    assert {s.reproduction for s in default} == {"paper_text"}
    with pytest.raises(ValueError, match="reproductions must be one of"):
        X.grid_specs(["adult"], {"dirichlet": [0.5]}, [10], [0], ["cl"], reproductions=["code"])


# ----------------------------------------------------------------------------- real runs
@pytest.mark.parametrize("method", sorted(R.PAPER_CODE))
def test_every_paper_code_method_runs_and_records_what_it_reports(method):
    rec = X.run(spec(method, "paper_code", val_fraction=0.2 if method == "cafa" else 0.0))  # CAFA's ABFA needs it
    assert rec["status"] == "ok", rec.get("error")
    assert rec["reproduction_settings"]["hyper"] == R.PAPER_CODE[method].hyper
    for name, value in R.PAPER_CODE[method].fl.items():
        assert rec["fl"][name] == value
    if rec["reported_rule"] == "last_round":
        assert rec["reported_accuracy"] == rec["global_accuracy"]
    else:
        assert rec["reported_accuracy"] == max(h["mean_pooled_model_accuracy"] for h in rec["history"])


@pytest.fixture(scope="module")
def cfl_records():
    return {r: X.run(spec("cfl", r)) for r in R.REPRODUCTIONS}


def test_paper_code_cfl_trains_as_the_code_did_and_reports_its_best_pooled_round(cfl_records):
    rec = cfl_records["paper_code"]
    assert rec["status"] == "ok" and rec["reproduction"] == "paper_code"
    assert {k: rec["fl"][k] for k in ("optimizer", "lr", "batch_size", "shuffle")} == {
        "optimizer": "sgd", "lr": 0.001, "batch_size": 64, "shuffle": False}
    assert rec["reported_rule"] == "best_round_pooled_cluster_mean"
    pooled = [h["mean_pooled_model_accuracy"] for h in rec["history"]]
    assert len(pooled) == 3 and rec["reported_accuracy"] == max(pooled)
    for h in rec["history"]:
        assert h["mean_pooled_model_accuracy"] == pytest.approx(np.mean(h["pooled_model_accuracy"]))
    if rec["info"]["n_clusters"] == 1:  # one model for every client: pooled accuracy = sample-weighted accuracy
        assert rec["history"][-1]["pooled_model_accuracy"][0] == pytest.approx(rec["global_accuracy"])
    text = cfl_records["paper_text"]
    assert "reported_accuracy" not in text and "pooled_model_accuracy" not in text["history"][-1]
    assert text["fl"]["optimizer"] == "adam" and text["fl"]["shuffle"] is True
    assert text["correct"] != rec["correct"]  # another optimiser, batch and order: another run


def test_table3_reads_each_reproduction(cfl_records):
    cl = X.run(spec("cl"))
    df = records_frame([cl, *cfl_records.values()])
    pairs = lambda d: sorted(zip(d.method, d.reproduction))  # noqa: E731
    assert pairs(for_reproduction(df, "paper_code")) == [("cfl", "paper_code"), ("cl", "paper_text")]
    only_text = records_frame([cl, cfl_records["paper_text"]])  # no paper_code run of CFL: its text run stands in
    assert pairs(for_reproduction(only_text, "paper_code")) == [("cfl", "paper_text"), ("cl", "paper_text")]
    assert pairs(for_reproduction(df)) == [("cfl", "paper_text"), ("cl", "paper_text")]
    text = table3(df).set_index("method")["mean"]
    code = table3(df, "paper_code").set_index("method")["mean"]
    assert text["cfl"] == pytest.approx(cfl_records["paper_text"]["global_accuracy"])
    assert code["cfl"] == pytest.approx(cfl_records["paper_code"]["reported_accuracy"])
    assert code["cl"] == text["cl"] == pytest.approx(cl["global_accuracy"])  # CL runs as Table II says in both


def test_paper_values_and_the_side_by_side_table(cfl_records):
    from workbook.paper_table3 import paper_value
    from workbook.tables import beside_paper, beside_paper_markdown

    assert paper_value("fmnist", "cfl", "similarity", 0) == 0.59
    assert paper_value("adult", "cfl", "similarity", 0.0) == 0.76      # ACSIncome's column, adult its stand-in
    assert paper_value("adult", "fedavg", "dirichlet", 0.05) is None   # "—": infeasible for two classes
    assert paper_value("fmnist", "local", "similarity", 0.0) is None   # not a Table III row
    cl = X.run(spec("cl"))
    t = beside_paper(records_frame([cl, *cfl_records.values()])).set_index("method")
    assert bool(t.loc["cfl", "separate_code_run"]) and not bool(t.loc["cl", "separate_code_run"])
    # numbers only, in percent, the workbook's unit for accuracies
    assert t.loc["cfl", "paper_text_mean"] == pytest.approx(100 * cfl_records['paper_text']['global_accuracy'])
    assert t.loc["cfl", "paper_code_mean"] == pytest.approx(100 * cfl_records['paper_code']['reported_accuracy'])
    assert t.loc["cfl", "paper_text_n"] == 1 and t.loc["cfl", "paper_text_sd"] == 0.0
    assert t.loc["cl", "paper_code_mean"] == t.loc["cl", "paper_text_mean"]
    assert all(t[c].dtype != object for c in t.columns if c.startswith(("paper_text", "paper_code")))
    md = beside_paper_markdown(t.reset_index())  # for readers: display names, one seed: no ± 0.00
    assert f"| CFL | — | {100 * cfl_records['paper_text']['global_accuracy']:.2f} | " in md
    assert "| own run |" in md and "| = paper_text |" in md and "paper_text (%)" in md
    assert t.paper.isna().all() and (t.paper_dataset == "acs_income").all()  # α = 0.5 is not in the table
