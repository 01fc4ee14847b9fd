"""The method contract (fedlib.methods.contract.MethodInfo) and the shared per-cluster average."""
import numpy as np
import torch

from fedlib.methods.base import per_cluster_average


def test_per_cluster_average_by_hand():
    models = {"w": torch.tensor([[0.0, 0.0], [10.0, 10.0], [20.0, 20.0]]),
              "b": torch.tensor([7.0, 8.0, 9.0])}
    members = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [100.0, 100.0]]),
               "b": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    out = per_cluster_average(models, members, cluster=[2, 0, 2, 1], weights=[1, 5, 3, 0])
    # cluster 0: member 1 alone; cluster 2: (1·[1, 2] + 3·[5, 6]) / 4 = [4, 5], b (1 + 9) / 4 = 2.5;
    # cluster 1: its only member weighs 0, so it keeps its model
    assert torch.equal(out["w"], torch.tensor([[3.0, 4.0], [10.0, 10.0], [4.0, 5.0]]))
    assert torch.equal(out["b"], torch.tensor([2.0, 8.0, 2.5]))
    assert torch.equal(models["w"][0], torch.zeros(2))  # new tensors: the input is untouched


def test_per_cluster_average_keeps_the_models_dtype_and_unpicked_clusters():
    models = {"w": torch.zeros(3, 2, dtype=torch.float32)}
    members = {"w": torch.tensor([[1.0, 3.0], [3.0, 5.0]], dtype=torch.float64)}
    out = per_cluster_average(models, members, np.array([1, 1]), np.array([1.0, 1.0]))
    assert out["w"].dtype == torch.float32
    assert torch.equal(out["w"], torch.tensor([[0.0, 0.0], [2.0, 4.0], [0.0, 0.0]]))
