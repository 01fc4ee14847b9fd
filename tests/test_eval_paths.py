"""path='auto' for evaluation follows the measurements kept in fedlib.engine.paths: it never
takes a path that measured slower than the sequential loop."""
import pytest
import torch
from torch import nn

from fedlib.engine import choose_path
from fedlib.engine.paths import CPU_EVAL_MAX_VECTORISED_WEIGHTS, EVAL_MEASURED, resolve_path
from fedlib.models import build_model

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def model_of(arch, shape):
    return build_model(arch, 10, shape, **({"vocab_size": 2_000} if arch == "embed_dnn" else {}))


@pytest.mark.parametrize("row", EVAL_MEASURED, ids=lambda r: f"{r[0]}-{r[1]}")
def test_auto_evaluates_every_measured_model_on_its_faster_path(row):
    device, arch, shape, faster, measured = row
    assert faster in ("sequential", "vectorised") and measured
    model = model_of(arch, shape)
    assert choose_path(model, torch.device(device), training=False) == faster
    assert resolve_path("auto", model, torch.device(device), training=False) == faster


def test_lenet5_evaluates_sequentially_everywhere_and_still_trains_vectorised():
    lenet = build_model("lenet5", 10, (1, 28, 28))
    assert choose_path(lenet, CPU, training=False) == choose_path(lenet, CUDA, training=False) == "sequential"
    assert choose_path(lenet, CPU, training=True) == "vectorised"  # training's rule is its own
    assert resolve_path("vectorised", lenet, CPU, training=False) == "vectorised"  # still possible on request


def test_unmeasured_models_evaluate_sequentially_on_the_cpu():
    mid = nn.Sequential(nn.Linear(64, 200), nn.ReLU(), nn.Linear(200, 10))  # dense, 15,010 weights
    assert sum(p.numel() for p in mid.parameters()) > CPU_EVAL_MAX_VECTORISED_WEIGHTS
    assert choose_path(mid, CPU, training=False) == "sequential"
    assert choose_path(mid, CPU, training=True) == "vectorised"
    small = nn.Sequential(nn.Linear(64, 10))
    assert choose_path(small, CPU, training=False) == "vectorised"
    with_norm = nn.Sequential(nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))
    assert choose_path(with_norm, CPU, training=False) == "sequential"
