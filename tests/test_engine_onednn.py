"""The dense kernel's large layers on the CPU: one oneDNN product per client (fedlib.engine.dense)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import fedlib.engine.dense as dense
from fedlib.engine import broadcast, local_train, per_client_products
from fedlib.engine.paths import chunk_workers
from fedlib.models import build_model, init_params

from fl_fixtures import assert_states_close, ragged_federation

pytestmark = pytest.mark.cross_cpu  # the engine's kernels: numbers from the CPU's instruction set (make test-other-cpu)

RAGGED = [45, 70, 3, 32, 1, 97]
WIDE = 256  # 256 × 256 = ONEDNN_MIN_WEIGHTS: the MLP's two middle layers run per client, its first and last on bmm


@pytest.fixture(scope="module")
def ragged_fed():
    return ragged_federation(RAGGED)


@pytest.fixture
def counted(monkeypatch):
    """Counts the oneDNN products the dense kernel calls (the real op underneath)."""
    linear = dense._onednn_linear()
    assert linear is not None, "this torch build has no oneDNN linear: the per-client path cannot run"
    calls = []

    def counting(*args):
        calls.append(tuple(args[1].shape))
        return linear(*args)
    monkeypatch.setattr(dense, "_onednn_linear", lambda: counting)
    return calls


def test_the_rule_sends_large_float32_cpu_layers_to_onednn_only():
    assert WIDE * WIDE == dense.ONEDNN_MIN_WEIGHTS
    big, small = torch.zeros(2, WIDE, WIDE), torch.zeros(2, WIDE, WIDE - 1)
    assert dense._per_client(big) and not dense._per_client(small)
    assert not dense._per_client(big.double())
    assert not dense._per_client(torch.zeros(2, WIDE, WIDE, device="meta"))
    with per_client_products(False):
        assert not dense._per_client(big)
        with per_client_products(True):
            assert dense._per_client(big)
        assert not dense._per_client(big)
    assert dense._per_client(big)
    with pytest.raises(ValueError, match="enabled"):
        per_client_products("yes")


def test_models_with_a_per_client_layer_train_on_workers():
    cpu, meta = torch.device("cpu"), torch.device("meta")
    paper_mlp = build_model("mlp", 26, (16,))  # 3 × 500: two 500 × 500 layers
    logistic = build_model("logistic", 2, (107,))
    assert dense.has_per_client_layer(paper_mlp, cpu) and chunk_workers(paper_mlp, cpu, 4) is not None
    assert not dense.has_per_client_layer(logistic, cpu) and chunk_workers(logistic, cpu, 4) is None
    assert not dense.has_per_client_layer(paper_mlp, meta)
    assert not dense.has_per_client_layer(build_model("fmnist_cnn", 10, (1, 28, 28)), cpu)  # not a dense stack
    with per_client_products(False):
        assert chunk_workers(paper_mlp, cpu, 4) is None


def test_per_client_products_train_what_bmm_and_the_sequential_path_train(ragged_fed, counted):
    model = build_model("mlp", 10, (1, 8, 8), hidden=WIDE)
    start = broadcast(init_params(model, seed=1), 6)
    kwargs = dict(epochs=2, seed=7, round_idx=1)
    per_client = local_train(model, start, ragged_fed, range(6), path="vectorised", max_clients_per_chunk=4, **kwargs)
    n_calls = len(counted)
    # every step of every active client: 2 wide layers × (forward, ∂W, ∂h)
    steps = sum(2 * -(-n // 32) for n in RAGGED)
    assert n_calls == steps * 2 * 3
    assert {shape for shape in counted} >= {(WIDE, WIDE)}
    with per_client_products(False):
        on_bmm = local_train(model, start, ragged_fed, range(6), path="vectorised", max_clients_per_chunk=4, **kwargs)
    assert len(counted) == n_calls  # none on bmm
    sequential = local_train(model, start, ragged_fed, range(6), path="sequential", **kwargs)
    assert_states_close(per_client.params, on_bmm.params)
    assert_states_close(per_client.params, sequential.params)
    torch.testing.assert_close(per_client.mean_loss, sequential.mean_loss, atol=1e-5, rtol=1e-5)


def test_a_clients_rows_are_the_same_alone_and_in_any_chunk(ragged_fed):
    """Each client's products are calls of its own: its trained weights do not depend on which
    clients share its chunk, nor on the chunk size, up to float rounding. A chunk's steps are
    as wide as its widest client's batch (in multiples of 16: ``train._WIDTH_STEP``), and
    whether a narrower step rounds like a wider one depends on how the CPU's kernels block the
    batch: bit for bit with this project's CPU's default kernels; not with MKL's compatible
    path (``tests/other_cpu.env``) or on the lent H200 machine's CPU with torch 2.11, where
    the last layer's bias moved by ~1e-10. So the test checks closeness."""
    model = build_model("mlp", 10, (1, 8, 8), hidden=WIDE)
    start = broadcast(init_params(model, seed=2), 6)
    kwargs = dict(epochs=1, seed=3, round_idx=0, path="vectorised")
    together = local_train(model, start, ragged_fed, range(6), max_clients_per_chunk=6, **kwargs)
    in_pairs = local_train(model, start, ragged_fed, range(6), max_clients_per_chunk=2, **kwargs)
    tight = dict(atol=1e-7, rtol=1e-6)
    assert_states_close(together.params, in_pairs.params, **tight)
    for row in (1, 4):
        alone = local_train(model, {n: t[row:row + 1] for n, t in start.items()}, ragged_fed, [row], **kwargs)
        assert_states_close({n: t[row:row + 1] for n, t in together.params.items()}, alone.params, **tight)
    assert not torch.equal(together.params["3.weight"], start["3.weight"])  # it trained


def test_the_kernels_products_are_the_products(counted):
    """Forward, ∂W and ∂h of one wide layer per client against float64 matmuls."""
    gen = torch.Generator().manual_seed(0)
    m, n_in, n_out, batch = 3, WIDE, WIDE, 5
    w, b = torch.randn(m, n_out, n_in, generator=gen), torch.randn(m, n_out, 1, generator=gen)
    h, dz = torch.randn(m, n_in, batch, generator=gen), torch.randn(m, n_out, batch, generator=gen)
    f64 = [t.double() for t in (w, b, h, dz)]
    torch.testing.assert_close(dense._forward(w, b, h).double(), f64[0] @ f64[2] + f64[1], rtol=1e-5, atol=1e-4)
    out = torch.full((m, n_out, n_in), np.nan)
    assert dense._weight_grad(dz, h, w, out) is out
    torch.testing.assert_close(out.double(), f64[3] @ f64[2].transpose(1, 2), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(dense._weight_grad(dz, h, w, None).double(), out.double(), rtol=0, atol=0)
    dh = dense._input_grad(w, dz)
    assert dh.is_contiguous() and dh.shape == (m, n_in, batch)
    torch.testing.assert_close(dh.double(), f64[0].transpose(1, 2) @ f64[3], rtol=1e-5, atol=1e-4)
    assert len(counted) == 4 * m
