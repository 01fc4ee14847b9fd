"""The parameter-average reading of a personalised method's "global accuracy" (FedPrism Table 1,
fedlib.evaluation): the uniform average of the distinct models the clients use, on the official
test set."""
import numpy as np
import pytest
import torch

from fedlib import experiment as X
from fedlib.engine import evaluate_global
from fedlib.methods import get_method, make_hyper
from fedlib.methods.base import parameter_average

FAST = {"rounds": 2, "local_epochs": 1, "lr": 0.01}


def test_parameter_average_by_hand():
    stacked = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0], [100.0, 100.0]]),
               "count": torch.tensor([7, 9, 11])}
    avg = parameter_average(stacked, [0, 1])
    assert avg["w"].shape == (1, 2) and avg["w"].tolist() == [[2.0, 4.0]]
    assert avg["count"].tolist() == [7]  # integer buffers: the first row's, never a float mean
    assert parameter_average(stacked, [2])["w"].tolist() == [[100.0, 100.0]]
    with pytest.raises(ValueError, match="rows must be a non-empty 1-D array"):
        parameter_average(stacked, [])


@pytest.mark.cross_cpu
def test_one_model_methods_read_their_model_and_personalised_ones_the_average():
    one = X.run(X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "fedavg", fl=FAST, n_train=1200, global_test=True))
    # FedAvg's clients all use one model: its average is itself
    assert one["param_average_accuracy"] == pytest.approx(one["global_test_accuracy"], abs=1e-12)

    spec = X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "local", fl=FAST, n_train=1200, global_test=True)
    rec = X.run(spec)
    ctx, _ = X.build_context(spec, "cpu")
    outcome = get_method("local").run(ctx, make_hyper("local", spec.effective()[0]))
    avg = parameter_average(outcome.models, np.unique(outcome.assignment))
    res = evaluate_global(ctx.model, avg, ctx.fed)
    by_hand = float(res.correct[0]) / float(res.n[0])
    assert rec["param_average_accuracy"] == pytest.approx(by_hand, abs=1e-12)
    # K = 6 local models: the average is not any client's model, and the record says so
    assert len(np.unique(outcome.assignment)) == 6


@pytest.mark.cross_cpu
def test_no_param_average_without_the_official_test_set():
    rec = X.run(X.RunSpec("adult", "dirichlet", 0.5, 6, 0, "fedavg", fl=FAST, n_train=1200))
    assert "param_average_accuracy" not in rec
