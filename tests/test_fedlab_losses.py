"""FedLab's client "loss" (Σ of batch means, PoC's and HACCS's ranking in the PSI papers' code)
through the batched evaluation: ``loss_matrix(reduction='batch_means')`` and ``fedlab_losses``."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlib.engine import broadcast, loss_matrix, predict_logits
from fedlib.methods import base
from fedlib.methods.base import fedlab_losses
from fl_fixtures import digits, make_context, start_states

pytestmark = pytest.mark.cross_cpu  # evaluation: the numbers come from the CPU's kernels


def per_client_reference(ctx, w, clients, batch_size):
    """What fedlab_losses computed before it went through loss_matrix: client after client, the
    logits of its whole train split, cross-entropy cut into batches, the batch means added up."""
    x, y, parts = ctx.fed.split("train")
    out = np.zeros(len(clients))
    for row, c in enumerate(clients):
        index = torch.as_tensor(np.asarray(parts[c], dtype=np.int64))
        if index.numel() == 0:
            continue
        loss = F.cross_entropy(predict_logits(ctx.model, broadcast(w, 1), x[index])[0], y[index],
                               reduction="none").double()
        out[row] = float(sum(b.mean().item() for b in torch.split(loss, batch_size)))
    return out


def context(arch, path):
    if arch == "cnn":  # a conv stack: sequential evaluation on worker threads on the CPU
        x, y = digits()
        return make_context(arch="cnn", x=x.reshape(-1, 1, 8, 8), y=y, path=path, rounds=1)
    return make_context(arch=arch, path=path, rounds=1)


@pytest.mark.parametrize("path", ["auto", "sequential", "vectorised"])
@pytest.mark.parametrize("arch", ["logistic", "cnn"])
def test_fedlab_losses_equal_the_per_client_computation(arch, path, monkeypatch):
    ctx = context(arch, path)
    w = ctx.init_state()
    clients = np.array([3, 0, 7, 3, 9])
    calls = []
    monkeypatch.setattr(base, "loss_matrix", lambda *a, **k: calls.append(k) or loss_matrix(*a, **k))
    for batch in (64, 16, 7):
        got = fedlab_losses(ctx, w, clients, batch_size=batch)
        assert got.dtype == np.float64 and got.shape == (5,)
        np.testing.assert_allclose(got, per_client_reference(ctx, w, clients, batch), rtol=1e-6)
        assert got[0] == got[3]  # a repeated client, the same bits
    assert len(calls) == 3 and all(k["reduction"] == "batch_means" for k in calls)  # one batched call each


@pytest.mark.parametrize("path", ["sequential", "vectorised"])
def test_batch_means_of_one_batch_is_the_mean_and_of_single_samples_the_sum(path):
    ctx = make_context(rounds=1)
    models = start_states(ctx.model, 0, 2)
    # scaled, not shifted: a shift of every weight and bias moves all logits alike (softmax-invariant)
    models = {k: v * (1 + 0.5 * torch.arange(2.0)).view(-1, *[1] * (v.dim() - 1)) for k, v in models.items()}
    clients = [2, 5, 5, 1]
    mean = loss_matrix(ctx.model, models, ctx.fed, clients, split="train", path=path)
    total = loss_matrix(ctx.model, models, ctx.fed, clients, split="train", reduction="sum", path=path)
    whole = loss_matrix(ctx.model, models, ctx.fed, clients, split="train", reduction="batch_means",
                        mean_batch=10 ** 6, path=path)
    singles = loss_matrix(ctx.model, models, ctx.fed, clients, split="train", reduction="batch_means",
                          mean_batch=1, path=path)
    torch.testing.assert_close(whole.loss, mean.loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(singles.loss, total.loss, rtol=1e-6, atol=0)
    assert torch.equal(whole.correct, mean.correct) and torch.equal(singles.correct, mean.correct)
    assert torch.equal(whole.n, mean.n) and whole.loss.shape == (2, 4)
    # row m is model m's (two models, so a row is not another row's copy)
    assert not torch.equal(whole.loss[0], whole.loss[1])


def test_batch_means_of_an_empty_split_is_zero_and_mean_batch_is_checked():
    ctx = make_context(rounds=1)  # no validation split: every val split is empty
    w = broadcast(ctx.init_state(), 1)
    res = loss_matrix(ctx.model, w, ctx.fed, [0, 1], split="val", reduction="batch_means")
    assert res.loss.tolist() == [[0.0, 0.0]] and res.correct.tolist() == [[0, 0]] and res.n.tolist() == [0, 0]
    with pytest.raises(ValueError, match="mean_batch must be an integer ≥ 1, got 0"):
        loss_matrix(ctx.model, w, ctx.fed, [0], split="train", reduction="batch_means", mean_batch=0)
    with pytest.raises(ValueError, match="batch_size must be an integer ≥ 1, got 0"):
        fedlab_losses(ctx, ctx.init_state(), [0], batch_size=0)
