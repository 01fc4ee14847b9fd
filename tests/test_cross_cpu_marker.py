"""The guard of tests/conftest.py: a test that trains or evaluates without the ``cross_cpu``
marker fails, so that no training test drops out of ``make test-other-cpu``.

A pytest run in a subprocess, on a scratch folder whose conftest is tests/conftest.py, with
tests that call the engine in every way the guard must see: by a name bound before the guard
was installed (``fedlib.methods.base`` imported first), by ``from ... import`` after it, a call
whose failure the test swallows, and a module fixture that trains, set up for a marked test and
reused, cached, by an unmarked one; and the calls it must let pass: in marked tests, and a call
that refuses its input (a validation test). Two clients of four samples, one epoch.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")

INNER = '''
import numpy as np
import pytest
import torch
from fedlib.engine import Federation, broadcast, local_train
from fedlib.engine.evaluate import evaluate
from fedlib.methods import base
from fedlib.models import build_model, init_params

x = np.random.default_rng(0).random((8, 3), dtype=np.float32)
y = np.array([0, 1] * 4)
FED = Federation.from_arrays(x, y, [np.arange(4), np.arange(4, 8)], [np.arange(4), np.arange(4, 8)], "cpu")
MODEL = build_model("logistic", 2, (3,))
STATE = broadcast(init_params(MODEL, seed=0), 2)


def train(fn=local_train):
    return fn(MODEL, STATE, FED, [0, 1], epochs=1, seed=0)


@pytest.fixture(scope="module")
def trained():
    return train().params


@pytest.mark.cross_cpu
def test_marked_trains_and_evaluates():
    assert evaluate(MODEL, train().params, FED, [0, 1]).n.tolist() == [4, 4]


@pytest.mark.cross_cpu
def test_marked_sets_up_a_training_fixture(trained):
    assert set(trained) == set(STATE)


def test_unmarked_uses_the_cached_training_fixture(trained):
    assert set(trained) == set(STATE)


def test_unmarked_train():
    train()


def test_unmarked_evaluate_swallowed():
    try:
        evaluate(MODEL, STATE, FED, [0, 1])
    except BaseException:
        pass


def test_unmarked_name_bound_before_the_guard():
    train(base.local_train)


def test_unmarked_bad_input_is_a_validation_test():
    with pytest.raises(ValueError, match="epochs"):
        local_train(MODEL, STATE, FED, [0, 1], epochs=0, seed=0)


def test_unmarked_without_the_engine():
    assert torch.equal(broadcast(init_params(MODEL, seed=0), 2)["1.weight"], STATE["1.weight"])
'''

EXPECTED = {
    "test_marked_trains_and_evaluates": "PASSED",
    "test_marked_sets_up_a_training_fixture": "PASSED",
    "test_unmarked_uses_the_cached_training_fixture": "FAILED",
    "test_unmarked_train": "FAILED",
    "test_unmarked_evaluate_swallowed": "FAILED",
    "test_unmarked_name_bound_before_the_guard": "FAILED",
    "test_unmarked_bad_input_is_a_validation_test": "PASSED",
    "test_unmarked_without_the_engine": "PASSED",
}


def test_unmarked_tests_that_reach_the_engine_fail(tmp_path):
    # fedlib.methods.base binds local_train and evaluate before the guard wraps them
    future = "from __future__ import annotations\n"
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text().replace(future, future + "import fedlib.methods.base\n", 1))
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cross_cpu: numbers from the CPU's kernels\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:nbval",
                          "-p", "no:xdist", "-rA", "--tb=no", "-q", "test_inner.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "COLUMNS": "1000"})  # summary lines not cut
    outcomes = dict((name, status) for status, name in
                    re.findall(r"^(PASSED|FAILED|ERROR) test_inner\.py::(\w+)", run.stdout, re.M))
    assert outcomes == EXPECTED, run.stdout + run.stderr
    for line in run.stdout.splitlines():
        if line.startswith("FAILED"):
            assert "not marked cross_cpu: add `@pytest.mark.cross_cpu`" in line, line
    assert "uses the fixture 'trained', which calls fedlib.engine.train.local_train" in run.stdout
    assert "calls fedlib.engine.evaluate.evaluate" in run.stdout
