"""fedlib.engine.ragged: the one padding of ragged client indices and the one column-block loop
the vectorised evaluation and the predictors share (issue 60, item 6), checked by hand."""
import numpy as np
import torch

from fedlib.engine.ragged import pad_index, score_ragged


def test_pad_index_by_hand():
    padded, valid = pad_index([np.array([5, 7, 9]), np.array([], dtype=np.int64), np.array([3])],
                              torch.device("cpu"))
    assert padded.dtype == torch.int64 and padded.tolist() == [[5, 7, 9], [0, 0, 0], [3, 0, 0]]
    assert valid.dtype == torch.bool
    assert valid.tolist() == [[True, True, True], [False, False, False], [True, False, False]]


def test_score_ragged_by_hand():
    """Clients of 3, 1 and 2 samples, in chunks of 2 clients and columns of 2 samples: a scorer
    that predicts class 1 everywhere with loss = the sample's value; padding never counts."""
    x = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    y = torch.tensor([1, 0, 1, 1, 0, 1])
    index = [np.array([0, 1, 2]), np.array([3]), np.array([4, 5])]
    seen = []

    def prepare(rows_t):
        seen.append(rows_t.tolist())

        def score(k, xb, labels):
            assert xb.shape == labels.shape and xb.shape[0] == k
            return torch.ones_like(labels), xb.float()
        return score

    correct, loss_sum = score_ragged(prepare, x, y, index, batch_size=2, chunk=2)
    assert seen == [[0, 2], [1]]  # largest clients first, stable
    assert correct.tolist() == [2, 1, 1]  # labels 1,0,1 / 1 / 0,1
    assert loss_sum.dtype == torch.float64 and loss_sum.tolist() == [60.0, 40.0, 110.0]
