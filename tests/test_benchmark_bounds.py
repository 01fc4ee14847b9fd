"""The benchmarks' floor at the products' own shapes (benchmarks/peak.py: products_floor)."""
from __future__ import annotations

import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedlib.models import build_model

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import peak  # noqa: E402


@pytest.mark.parametrize("arch,shape,classes", [("fmnist_cnn", (1, 28, 28), 10), ("mlp", (16,), 26),
                                                ("logistic", (107,), 2)])
def test_products_floor_times_every_product_of_a_step(arch, shape, classes):
    """The recorded products carry all of a training step's FLOPs (torch's counter over the
    whole forward + backward), each timed: a positive time, at a rate no product exceeds
    by far (a missed or untimed product would break one of the two)."""
    model = build_model(arch, classes, shape)
    net = build_model(arch, classes, shape)
    x = torch.randn(8, *shape)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(net(x), torch.zeros(8, dtype=torch.long)).backward()
    seconds, flops = peak.products_floor(model, shape, 8, repeats=2)
    assert flops == counter.get_total_flops() == peak.step_flops(model, shape, 8) > 0
    names = {f.overloadpacket.__name__ for f, _, _ in peak._products_of_one_step(model, shape, 8, torch.device("cpu"))}
    assert names <= set(peak._PRODUCTS) and ("convolution" in names) == (arch == "fmnist_cnn")
    assert 0 < seconds and flops / seconds < 1e13  # 10 TFLOP/s on one CPU thread would be a timing error


def test_products_floor_restores_the_thread_count():
    threads = torch.get_num_threads()
    peak.products_floor(build_model("logistic", 2, (107,)), (107,), 4, repeats=1)
    assert torch.get_num_threads() == threads


def test_products_floor_is_a_cpu_bound_and_refuses_a_gpu_before_any_work():
    """On a GPU products timed alone are launch-bound, no floor (an H200 run beat the sum):
    the benchmarks print n/a there, and a direct call says why (meta stands in for CUDA)."""
    with pytest.raises(ValueError, match="device='meta'.*CPU bound"):
        peak.products_floor(build_model("logistic", 2, (107,)), (107,), 4, device="meta")
