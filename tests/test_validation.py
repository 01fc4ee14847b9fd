"""One validation helper, one message style: ``{name} must be {allowed}, got {value!r}``.

Table-driven: each line is an entry point, a bad value, and the parameter the error must name.
"""
from __future__ import annotations

import numpy as np
import pytest

from fedlib import partition as P
from fedlib.methods import FLConfig, make_hyper
from fedlib.models import build_model, init_params
from fedlib.validation import check_choice, check_int, check_number, check_seed

BAD_HYPER = [  # (method, field, bad value)
    ("cl", "epochs", 0), ("cl", "epochs", 2.5), ("local", "epochs", 0), ("local", "epochs", True),
    ("clust_psi_pfl", "tau", 0), ("clust_psi_pfl", "kmeans_seed", -1), ("clust_psi_pfl", "n_init", 0),
    ("fedprox", "mu", -0.1), ("fedprox", "mu", "0.01"), ("fedprox", "mu", float("nan")),
    ("fedavgm", "momentum", 1.0), ("fedadagrad", "eta", 0.0), ("fedyogi", "beta_2", -0.5),
    ("fedadam", "variant", "keras"), ("poc", "d", 0), ("poc", "d", 2.0),
    ("haccs", "rho", 1.5), ("haccs", "variant", "x"), ("haccs", "min_samples", 1),
    ("fedcls", "tau", -1.0), ("fedcls", "variant", None),
    ("cfl", "eps1", -1e-5), ("cfl", "eps1", "Auto"), ("cfl", "gamma", 1.0), ("cfl", "warmup_rounds", -1),
    ("cfl", "warmup_rounds", 2.5), ("cfl", "auto_scale", 0.0), ("poc", "d_policy", "max"),
    ("fedsoft", "n_clusters", 0), ("fedsoft", "n_clusters", 2.5), ("fedsoft", "sigma", 0.0),
    ("fedsoft", "lam", "0.1"), ("fedsoft", "estimation_interval", 0),
]


@pytest.mark.parametrize("method,name,value", BAD_HYPER)
def test_every_hyper_rejects_a_bad_value_naming_it(method, name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got {__import__('re').escape(repr(value))}$"):
        make_hyper(method, {name: value})


BAD_PROTOCOL = [("rounds", 0), ("local_epochs", 0), ("local_epochs", 1.5), ("batch_size", True),
                ("fraction", 0.0), ("fraction", 1.5), ("lr", 0), ("lr", "1e-3"), ("path", "gpu")]


@pytest.mark.parametrize("name,value", BAD_PROTOCOL)
def test_the_protocol_rejects_a_bad_value_naming_it(name, value):
    with pytest.raises(ValueError, match=rf"^{name}.* must be .*, got "):
        FLConfig(**{name: value})


def test_epochs_zero_is_an_error_not_the_default():
    """``epochs=0`` used to mean "the default" through ``epochs or default``."""
    for method in ("cl", "local"):
        with pytest.raises(ValueError, match="epochs must be an integer ≥ 1 \\(or None for the default\\), got 0"):
            make_hyper(method, {"epochs": 0})
        assert make_hyper(method, {"epochs": None}).epochs is None


def test_numpy_integers_are_accepted_as_seeds_everywhere():
    model = build_model("logistic", 3, (4,))
    a, b = init_params(model, np.int64(7)), init_params(model, 7)
    assert all((a[k] == b[k]).all() for k in a)
    y = np.repeat(np.arange(3), 20)
    assert [p.tolist() for p in P.partition(y, "dirichlet", 4, 1.0, np.int64(3))] == \
           [p.tolist() for p in P.partition(y, "dirichlet", 4, 1.0, 3)]
    assert make_hyper("clust_psi_pfl", {"kmeans_seed": np.int32(5)}).kmeans_seed == 5
    with pytest.raises(ValueError, match="seed must be an integer in \\[0, 4294967295\\], got -1"):
        init_params(model, -1)


def test_helper_messages():
    with pytest.raises(ValueError, match=r"^n_clusters must be an integer ≥ 1, got 2\.5$"):
        check_int(2.5, "n_clusters", 1)
    with pytest.raises(ValueError, match=r"^alpha must be a finite number > 0, got '0\.5'$"):
        check_number("0.5", "alpha", 0, low_open=True)
    with pytest.raises(ValueError, match=r"^q must be a finite number in \(0, 1\], got inf$"):
        check_number(float("inf"), "q", 0, 1, low_open=True)
    with pytest.raises(ValueError, match=r"^variant must be one of \['a', 'b'\], got 'c'$"):
        check_choice("c", "variant", ("a", "b"))
    with pytest.raises(ValueError, match="seed must be an integer in \\[0, 4294967295\\], got True"):
        check_seed(True)
    assert check_int(np.int16(3), "k", 1) == 3 and type(check_int(np.int16(3), "k", 1)) is int
    assert check_number(np.float32(0.5), "x", 0, 1) == 0.5
