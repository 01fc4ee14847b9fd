"""PSI-PFL (PSI-PFL paper Section 3): the threshold rule by hand, the selection on validation
(not test) by default, FedAvg as the everyone-selected special case, learning, clear errors."""
import dataclasses

import numpy as np
import pytest
import torch

from fedlib import experiment
from fedlib.methods import get_method, make_hyper
from fedlib.methods import psi_pfl
from fedlib.noniid import psi

from fl_fixtures import digits, make_context

pytestmark = pytest.mark.cross_cpu  # trains or evaluates: numbers from the CPU's kernels (make test-other-cpu)


def test_candidate_thresholds_are_linear_percentiles_by_hand():
    v = [0.0, 1.0, 2.0, 3.0, 10.0]
    # linear interpolation between order statistics: position p/100·(K−1)
    # 10th: 0.4 → 0.4;  25th: 1.0 → 1.0;  50th: 2.0;  75th: 3.0;  90th: 3.6 → 3 + 0.6·7 = 7.2
    np.testing.assert_allclose(psi_pfl.candidate_thresholds(v), [0.4, 1.0, 2.0, 3.0, 7.2])


def test_selected_clients_are_those_at_or_below_the_threshold():
    v = np.array([0.5, 0.1, 0.9, 0.1, 0.3])
    assert psi_pfl.selected_clients(v, 0.1).tolist() == [1, 3]  # ties included (PSI ≤ ζ)
    assert psi_pfl.selected_clients(v, 0.35).tolist() == [1, 3, 4]
    assert psi_pfl.selected_clients(v, 1.0).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match=r"threshold must be ≥ the smallest client PSI \(0.1\)"):
        psi_pfl.selected_clients(v, 0.05)


def test_below_read_as_strictly_below_leaves_the_ties_out():
    v = np.array([0.5, 0.1, 0.9, 0.1, 0.3])
    assert psi_pfl.selected_clients(v, 0.3, rule="lt").tolist() == [1, 3]  # client 4 (PSI = ζ) left out
    assert psi_pfl.selected_clients(v, 0.3, rule="le").tolist() == [1, 3, 4]
    with pytest.raises(ValueError, match=r"threshold must be > the smallest client PSI \(0.1\)"):
        psi_pfl.selected_clients(v, 0.1, rule="lt")  # ζ = the smallest PSI selects nobody under "below"
    with pytest.raises(ValueError, match="threshold_rule must be one of"):
        psi_pfl.selected_clients(v, 0.3, rule="<")
    assert psi_pfl.rule_changes(v, [0.1, 0.2]) == [
        {"threshold": 0.1, "n_le": 2, "n_lt": 0, "n_at": 2, "changed": True},
        {"threshold": 0.2, "n_le": 2, "n_lt": 2, "n_at": 0, "changed": False}]


def test_strict_rule_skips_a_candidate_that_selects_nobody_and_records_it():
    ctx = make_context(protocol="dirichlet", level=0.3, rounds=1, local_epochs=1)
    out = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl", {"percentiles": [0, 100], "select_on": "test",
                                                                "threshold_rule": "lt"}))
    v = np.array(out.info["psi"])
    assert out.info["threshold_rule"] == "lt" and out.info["empty_candidates"] == [0.0]  # ζ_0 = min PSI
    (c,) = out.info["candidates"]
    assert c["percentile"] == 100.0 and c["clients"] == np.flatnonzero(v < v.max()).tolist()
    assert out.info["selected_on"] == "test"
    default = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl", {"percentiles": [100], "select_on": "test"}))
    assert "threshold_rule" not in default.info and default.info["n_selected"] == ctx.fed.n_clients


def test_best_candidate_ties_go_to_the_lower_percentile():
    assert psi_pfl.best_candidate([0.5, 0.7, 0.7, 0.2]) == 1
    assert psi_pfl.best_candidate([0.9]) == 0


def test_three_clients_by_hand_select_the_homogeneous_ones():
    """Clients 0 and 1 hold the global mix, client 2 a single class: PSI puts client 2 far
    above the others, so the 50th-percentile threshold leaves it out."""
    counts = np.array([[50, 50], [40, 60], [0, 100]])
    v = psi(counts)
    assert v[2] > 10 * max(v[0], v[1])
    z = psi_pfl.candidate_thresholds(v, [50])[0]
    assert z == np.median(v)
    assert psi_pfl.selected_clients(v, z).tolist() == sorted(np.flatnonzero(v <= np.median(v)).tolist())
    assert 2 not in psi_pfl.selected_clients(v, z).tolist()


@pytest.mark.parametrize("values, match", [
    ({"percentiles": [10, 101]}, "percentiles must be"),
    ({"percentiles": [-1]}, "percentiles must be"),
    ({"percentiles": []}, "percentiles must be a non-empty list"),
    ({"percentiles": "50"}, "percentiles must be a non-empty list"),
    ({"percentiles": [50, 50]}, "percentiles must be distinct"),
    ({"percentiles": ["50"]}, "percentiles must be"),
    ({"select_on": "train"}, "select_on must be one of"),
    ({"threshold_rule": "below"}, "threshold_rule must be one of"),
    ({"train_candidates": "parallel"}, "train_candidates must be one of"),
])
def test_bad_hyperparameters_are_refused(values, match):
    with pytest.raises(ValueError, match=match):
        make_hyper("psi_pfl", values)


def test_list_percentiles_from_a_params_file_become_a_tuple():
    assert make_hyper("psi_pfl", {"percentiles": [10, 90]}).percentiles == (10, 90)


def test_everyone_selected_is_fedavg_bit_for_bit():
    a = make_context(protocol="dirichlet", level=0.3, rounds=3)
    fedavg = get_method("fedavg").run(a, make_hyper("fedavg"))
    b = make_context(protocol="dirichlet", level=0.3, rounds=3)
    out = get_method("psi_pfl").run(b, make_hyper("psi_pfl", {"percentiles": [100]}))
    assert all(torch.equal(fedavg.models[k], out.models[k]) for k in fedavg.models)
    assert a.history == b.history
    assert out.info["selected_on"] == "fixed" and out.info["n_selected"] == 10


def test_threshold_chosen_on_validation_by_default_and_every_candidate_recorded():
    ctx = make_context(protocol="dirichlet", level=0.3, rounds=3, val_fraction=0.2)
    out = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl"))
    info = out.info
    cands = info["candidates"]
    assert [c["percentile"] for c in cands] == [10, 25, 50, 75, 90]
    assert info["selected_on"] == "val"
    assert info["chosen"] == int(np.argmax([c["val_accuracy"] for c in cands]))
    np.testing.assert_allclose([c["threshold"] for c in cands],
                               np.percentile(psi(ctx.counts_train), [10, 25, 50, 75, 90]))
    for c in cands:  # each candidate trains only clients at or below its threshold
        assert c["clients"] == np.flatnonzero(np.asarray(info["psi"]) <= c["threshold"]).tolist()
        assert c["n_selected"] == len(c["clients"])
    chosen = cands[info["chosen"]]
    assert {k for r in info["selected"] for k in r} <= set(chosen["clients"])
    # the returned model is the chosen candidate's: its test accuracy is the recorded one
    correct, n = ctx.evaluate(out.models, out.assignment)
    assert correct.tolist() == chosen["test_correct"]
    assert len(ctx.history) == ctx.cfg.rounds  # the chosen candidate's history only


@pytest.mark.parametrize("arch", ["logistic", "cnn"])
def test_candidates_trained_together_are_the_candidates_trained_one_by_one(arch):
    """Scheduling, not arithmetic: the same clients every round, the same per-round evaluations
    and the same candidate accuracies; the weights agree to float rounding (a wider chunk of
    clients per kernel)."""
    x, y = digits()
    x = x.reshape(-1, 1, 8, 8) if arch == "cnn" else x  # the conv stack's grouped kernel on the CPU
    runs = {}
    for mode in ("one_by_one", "together"):
        ctx = make_context(protocol="dirichlet", level=0.3, rounds=3, val_fraction=0.2, arch=arch, x=x, y=y)
        out = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl", {"train_candidates": mode}))
        runs[mode] = ctx, out
    (a, one), (b, two) = runs["one_by_one"], runs["together"]
    for c1, c2 in zip(one.info["candidates"], two.info["candidates"]):
        assert c1["clients"] == c2["clients"]
        np.testing.assert_allclose(c1["val_accuracy"], c2["val_accuracy"], atol=1e-3)
        np.testing.assert_allclose(c1["test_accuracy"], c2["test_accuracy"], atol=1e-3)
    assert one.info["chosen"] == two.info["chosen"] and one.info["selected"] == two.info["selected"]
    assert [h["round"] for h in a.history] == [h["round"] for h in b.history]
    np.testing.assert_allclose([h["global_accuracy"] for h in a.history],
                               [h["global_accuracy"] for h in b.history], atol=1e-3)
    for k in one.models:
        torch.testing.assert_close(one.models[k], two.models[k], rtol=1e-4, atol=1e-5)


def test_runs_together_give_each_run_its_own_clients_model_and_history():
    """global_model_runs_together by hand: a run whose pool is every client is FedAvg exactly,
    the other run never trains outside its pool, and each run logs its own evaluations."""
    from fedlib.methods.base import global_model_rounds, global_model_runs_together

    a = make_context(protocol="dirichlet", level=0.3, rounds=3)
    fedavg = global_model_rounds(a)  # FedAvg's loop and its selection stream
    b = make_context(protocol="dirichlet", level=0.3, rounds=3)
    small = np.array([1, 4, 7])
    (everyone, few), (h_all, h_few) = global_model_runs_together(
        b, [np.arange(10), small], [b.rng("selection/group0"), b.rng("selection/group0")])
    assert everyone.info["selected"] == fedavg.info["selected"]
    for k in fedavg.models:  # logistic rows: the dense kernel's rows do not depend on their neighbours
        torch.testing.assert_close(everyone.models[k], fedavg.models[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([h["global_accuracy"] for h in h_all], [h["global_accuracy"] for h in a.history],
                               atol=1e-9)
    assert {k for r in few.info["selected"] for k in r} <= set(small.tolist())
    assert len(h_few) == len(h_all) == 3 and h_few != h_all
    assert not any(torch.equal(everyone.models[k], few.models[k]) for k in few.models)


def test_auto_trains_together_only_off_the_cpu_and_without_kept_optimiser_states():
    hp = make_hyper("psi_pfl")
    assert hp.train_candidates == "auto"
    assert not psi_pfl._together(hp, "cpu", False)
    assert psi_pfl._together(hp, torch.device("meta"), False)  # any accelerator: not the CPU
    assert not psi_pfl._together(hp, "cuda", True)
    assert psi_pfl._together(make_hyper("psi_pfl", {"train_candidates": "together"}), "cpu", False)
    assert not psi_pfl._together(make_hyper("psi_pfl", {"train_candidates": "one_by_one"}), "cuda", False)
    ctx = make_context(rounds=1)
    ctx.cfg = dataclasses.replace(ctx.cfg, keep_optimizer_state=True)
    with pytest.raises(ValueError, match="keep_optimizer_state must be False for runs trained together"):
        psi_pfl.run(ctx, make_hyper("psi_pfl", {"train_candidates": "together", "select_on": "test"}))


def test_test_selection_is_the_papers_variant_and_takes_the_best_test_accuracy():
    ctx = make_context(protocol="dirichlet", level=0.3, rounds=3, val_fraction=0.2)
    out = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl", {"select_on": "test"}))
    cands = out.info["candidates"]
    assert out.info["selected_on"] == "test"
    assert out.info["chosen"] == int(np.argmax([c["test_accuracy"] for c in cands]))


def test_selection_on_validation_without_a_validation_split_fails_before_training():
    ctx = make_context(rounds=2)
    with pytest.raises(ValueError, match="val_fraction > 0"):
        get_method("psi_pfl").run(ctx, make_hyper("psi_pfl"))
    assert ctx.history == []
    spec = experiment.RunSpec("adult", "dirichlet", 0.3, 10, 0, "psi_pfl")
    with pytest.raises(ValueError, match="val_fraction must be > 0 for method 'psi_pfl'"):
        spec.validate()
    experiment.RunSpec("adult", "dirichlet", 0.3, 10, 0, "psi_pfl", val_fraction=0.1).validate()
    experiment.RunSpec("adult", "dirichlet", 0.3, 10, 0, "psi_pfl", hyper={"select_on": "test"}).validate()


def test_grid_specs_give_the_validation_split_per_method():
    specs = experiment.grid_specs(["adult"], {"dirichlet": [0.3]}, [10], [0], ["fedavg", "psi_pfl"],
                                  val_fraction={"psi_pfl": 0.1})
    assert [(s.method, s.val_fraction) for s in specs] == [("fedavg", 0.0), ("psi_pfl", 0.1)]
    with pytest.raises(ValueError, match=r"val_fraction\['psi_pfl'\] must be"):
        experiment.grid_specs(["adult"], {"dirichlet": [0.3]}, [10], [0], ["psi_pfl"],
                              val_fraction={"psi_pfl": "0.1"})


def test_psi_pfl_learns_and_is_deterministic_per_seed():
    accs = []
    for seed in (0, 0, 1):
        ctx = make_context(protocol="dirichlet", level=0.5, rounds=4, seed=seed, val_fraction=0.2)
        out = get_method("psi_pfl").run(ctx, make_hyper("psi_pfl"))
        correct, n = ctx.evaluate(out.models, out.assignment)
        accs.append(correct)
        assert correct.sum() / n.sum() > 0.5  # chance is 0.1
    assert np.array_equal(accs[0], accs[1]) and not np.array_equal(accs[0], accs[2])


def test_the_schedule_benchmark_times_both_schedules_and_checks_they_select_alike(capsys):
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import psi_pfl_schedule

    res = psi_pfl_schedule.main(["--clients", "10", "--samples", "800", "--rounds", "1", "--repeat", "1"])
    assert res["same_selection"] and res["one_by_one"] > 0 and res["together"] > 0
    assert "one_by_one/together=" in capsys.readouterr().out
