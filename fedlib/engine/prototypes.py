"""Class prototypes of many clients at once: ``class_embeddings``.

FedProto (Tan et al., AAAI 2022) describes a client by its class prototypes, the mean
embedding of each class over its data:

    C_i^c = (1 / |D_{i,c}|) Σ_{(x, y) ∈ D_{i,c}} f_i(x),

f_i = :func:`fedlib.models.body` of client i's model (every layer but the classifier).
:func:`class_embeddings` returns the sums Σ f_i(x) and the counts |D_{i,c}| per client and
class (means are sums / counts; sums also let a server pool samples exactly). It runs in
eval mode (dropout off, BatchNorm running statistics) without gradients, on the
federation's device, along the same two paths as :func:`fedlib.engine.evaluate`:

``sequential``
    row after row: load the weights into the model, forward the client's samples in
    batches of ``batch_size``;
``vectorised``
    rows sorted by sample count, chunked; one ``vmap``-ed ``functional_call`` of the body
    per batch of columns (the rows that still have samples).

``'auto'`` takes :func:`fedlib.engine.paths.choose_path`'s evaluation answer, like
``evaluate`` (CPU: vectorised for dense and small conv-free models, sequential for
convolutional ones). Both paths add every embedding, converted to float64, in the samples'
order (one ``index_add_`` per batch), so they agree exactly whenever the body's forward
gives the same float32 embeddings on both paths (a test checks it on the MLP and LeNet-5).
"""
from __future__ import annotations

import copy
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from ..models import body, float_state, head, head_prefix
from ._validation import check_int, check_state
from .federation import Federation, gather
from .paths import clients_per_chunk, resolve_path
from .precision import exact
from .ragged import pad_index

__all__ = ["ClassEmbeddings", "class_embeddings"]

State = dict[str, torch.Tensor]


class ClassEmbeddings(NamedTuple):
    """Per-row class sums of embeddings and class counts.

    sums : Tensor, shape (M, C, D), float64 — Σ body(x) over row i's samples of class c.
    counts : Tensor, shape (M, C), int64 — the number of those samples.
    path : str — ``'sequential'`` or ``'vectorised'``.
    """

    sums: torch.Tensor
    counts: torch.Tensor
    path: str

    def means(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(prototypes (M, C, D) float64, mask (M, C) bool): sums / counts where counts > 0, 0 elsewhere."""
        mask = self.counts > 0
        return self.sums / self.counts.clamp(min=1).unsqueeze(-1).double(), mask


@torch.no_grad()
@exact
def class_embeddings(model: nn.Module, params: State, fed: Federation, clients, split: str = "train",
                     batch_size: int = 256, path: str = "auto",
                     max_clients_per_chunk: int | None = None) -> ClassEmbeddings:
    """Sums of ``body(x)`` and sample counts per class for row i's model on client ``clients[i]``.

    Parameters
    ----------
    model : nn.Module
        Architecture template, an ``nn.Sequential`` ending in its classifier (every
        :func:`fedlib.models.build_model` model); its own weights are ignored.
    params : dict of str to Tensor
        Stacked state ``name -> (M, *shape)`` of the whole model (classifier included).
    fed : Federation
    clients : sequence of int, length M
        Client ids (repeats allowed: several models on one client's data).
    split : {'train', 'val', 'test', 'global'}
    batch_size : int
        Samples per forward pass.
    path : {'auto', 'sequential', 'vectorised'}
    max_clients_per_chunk : int, optional
        Vectorised path: rows per chunk (default: estimated from free memory).

    Returns
    -------
    ClassEmbeddings
        ``sums`` (M, C, D) float64 and ``counts`` (M, C) int64 on ``fed.device``
        (C = ``fed.n_classes``, D = the classifier's input size).
    """
    clients = fed.check_clients(clients)
    check_int(batch_size, "batch_size", 1)
    if max_clients_per_chunk is not None:
        check_int(max_clients_per_chunk, "max_clients_per_chunk", 1)
    x, y, parts = fed.split(split)
    template = copy.deepcopy(model).to(fed.device).eval()
    features = body(template)  # raises unless an nn.Sequential ending in its classifier
    dim, n_classes, m = head(template).in_features, fed.n_classes, len(clients)
    state = check_state(params, template, m, fed.device)
    chosen = resolve_path(path, template, fed.device, training=False)
    index = [parts[c] for c in clients]
    sums = torch.zeros(m * n_classes, dim, dtype=torch.float64, device=fed.device)
    counts = torch.zeros(m * n_classes, dtype=torch.int64, device=fed.device)
    if chosen == "sequential":
        live = float_state(template)
        for i, idx in enumerate(index):
            for name, tensor in live.items():
                tensor.copy_(state[name][i])
            idx_t = torch.as_tensor(idx, dtype=torch.int64, device=fed.device)
            for start in range(0, len(idx), batch_size):
                batch = idx_t[start:start + batch_size]
                target = gather(y, batch) + i * n_classes
                _add(sums, counts, target, features(gather(x, batch)))
    else:
        prefix = head_prefix(template)
        body_state = {n: t for n, t in state.items() if not n.startswith(prefix)}
        forward = vmap(lambda p, xb: functional_call(features, p, (xb,)))
        chunk = clients_per_chunk(template, x[:1], batch_size, False, max_clients_per_chunk)
        sizes = np.array([len(i) for i in index], dtype=np.int64)
        order = np.argsort(-sizes, kind="stable")
        for start in range(0, m, chunk):
            rows = order[start:start + chunk]
            rows = rows[sizes[rows] > 0]
            if rows.size == 0:
                continue
            rows_t = torch.as_tensor(rows, device=fed.device)
            padded, valid = pad_index([index[r] for r in rows], fed.device)
            sub = {n: t.index_select(0, rows_t) for n, t in body_state.items()}
            for col in range(0, padded.shape[1], batch_size):
                k = int((sizes[rows] > col).sum())
                batch, ok = padded[:k, col:col + batch_size], valid[:k, col:col + batch_size]
                emb = forward({n: t[:k] for n, t in sub.items()}, gather(x, batch))  # (k, B, D)
                target = gather(y, batch) + rows_t[:k, None] * n_classes         # (k, B)
                _add(sums, counts, target[ok], emb[ok])
    return ClassEmbeddings(sums.view(m, n_classes, dim), counts.view(m, n_classes), chosen)


def _add(sums: torch.Tensor, counts: torch.Tensor, target: torch.Tensor, emb: torch.Tensor) -> None:
    """sums[target[j]] += emb[j] (float64), counts[target[j]] += 1, in the order of j."""
    sums.index_add_(0, target, emb.reshape(len(target), -1).double())
    counts.index_add_(0, target, torch.ones_like(target))
