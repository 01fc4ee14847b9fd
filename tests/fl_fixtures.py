"""Tiny real federations for method tests (sklearn's digits: 1,797 8×8 images, 10 classes)."""
from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits

from fedlib import partition as P
from fedlib.engine import Federation
from fedlib.methods import Context, FLConfig
from fedlib.models import build_model


DEVICES = ("cpu",) + (("cuda",) if torch.cuda.is_available() else ())
"""The devices this machine has: tests parametrised over it run on the CPU everywhere and on
the GPU too where there is one (CI has none; a user's or a lent GPU machine runs them)."""


def digits():
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float32), y.astype(np.int64)


def start_states(model, seed: int, m: int, device="cpu") -> dict:
    """``init_params(model, seed)`` broadcast to m rows, on ``device``: (m, *shape) each."""
    from fedlib.engine import broadcast
    from fedlib.models import init_params

    return {n: t.to(device) for n, t in broadcast(init_params(model, seed=seed), m).items()}


def ragged_federation(sizes, device="cpu") -> Federation:
    """Clients with the given train sizes (and test splits of the same sizes) over the digits as
    (1, 8, 8) images in [0, 1], on ``device``; the samples in one seeded order."""
    x, y = digits()
    order = np.random.default_rng(0).permutation(len(y))
    cuts = np.cumsum(sizes)
    train = np.split(order[:cuts[-1]], cuts[:-1])
    test = np.split(order[cuts[-1]:2 * cuts[-1]], cuts[:-1])
    return Federation.from_arrays(x.reshape(-1, 1, 8, 8), y, train, test, torch.device(device))


def make_context(*, protocol="dirichlet", level=1.0, n_clients=10, seed=0, arch="logistic",
                 rounds=5, local_epochs=2, fraction=0.5, lr=0.01, x=None, y=None, path="auto",
                 val_fraction=0.0, device="cpu") -> Context:
    """A Context over a partition of digits (or of the given x, y), on ``device``, a small protocol
    (lr 0.01 instead of the paper's 0.001 so that a few rounds learn); ``val_fraction`` > 0
    gives every client a validation split (the test split stays the same)."""
    if x is None:
        x, y = digits()
    parts = P.partition(y, protocol, n_clients, level, seed)
    if val_fraction:
        train, val, test = P.train_val_test_split(parts, seed, 0.2, val_fraction)
    else:
        (train, test), val = P.train_test_split(parts, seed), None
    fed = Federation.from_arrays(x, y, train, test, device, n_classes=int(y.max()) + 1, val_parts=val)
    model = build_model(arch, fed.n_classes, fed.input_shape)
    cfg = FLConfig(rounds=rounds, local_epochs=local_epochs, fraction=fraction, lr=lr, path=path)
    return Context(fed=fed, model=model, cfg=cfg, seed=seed,
                   counts_train=P.label_counts(y, train, fed.n_classes),
                   true_clusters=P.planted_clusters(protocol, n_clients, level))


SMALL_HYPER = {"pfedlia": {"warmup_rounds": 1, "influence_epochs": 2}, "oracle": {"warmup_rounds": 1}}  # fit the registry tests' 2–3 rounds


def method_hyper(name: str):
    """Method ``name``'s Hyper at its defaults, except where a default needs a longer run than
    the registry-wide tests train (:data:`SMALL_HYPER`: pFedLIA's 20-round warm-up)."""
    from fedlib.methods import make_hyper

    return make_hyper(name, SMALL_HYPER.get(name, {}))


def method_context(name: str, **kw) -> Context:
    """:func:`make_context` for method ``name`` with :func:`method_hyper`: with a validation
    split (val_fraction 0.2) when the method needs one (PSI-PFL, CAFA, pFedLIA, FedFomo), on
    the pathological clusters (K = 10, 5 clusters) when it is defined only there (the Oracle)."""
    from fedlib.methods import method_info

    info = method_info(name)
    needs = info.needs_val(method_hyper(name))
    protocols = info.protocols
    if protocols is not None and "protocol" not in kw:
        kw.update(protocol=protocols[0], level=5)
    return make_context(**({"val_fraction": 0.2} if needs else {}), **kw)


def opposite_label_groups(n_clients=10, seed=0):
    """Two groups of IID clients on a binary task (digit 0 vs 1) whose labels are swapped in
    the second group: one model cannot fit both (CFL must split; Clust-PSI-PFL cannot see it).

    Returns (Context, group (K,)): clients 0..K/2-1 in group 0, the rest in group 1.
    """
    x, y = digits()
    keep = y < 2
    x, y = x[keep], y[keep]
    parts = P.similarity(y, n_clients, 1.0, seed)
    group = (np.arange(n_clients) >= n_clients // 2).astype(np.int64)
    xs, ys, tr, te = [], [], [], []  # each client's samples, relabelled 1 - y in group 1
    offset = 0
    for k, idx in enumerate(parts):
        lab = y[idx] if group[k] == 0 else 1 - y[idx]
        xs.append(x[idx]); ys.append(lab)
        a, b = P.train_test_split([np.arange(len(idx))], seed + k)
        tr.append(a[0] + offset); te.append(b[0] + offset)
        offset += len(idx)
    X, Y = np.concatenate(xs), np.concatenate(ys)
    fed = Federation.from_arrays(X, Y, tr, te, "cpu", n_classes=2)
    model = build_model("logistic", 2, fed.input_shape)
    cfg = FLConfig(rounds=10, local_epochs=2, fraction=1.0, lr=0.01)
    ctx = Context(fed=fed, model=model, cfg=cfg, seed=seed,
                  counts_train=np.stack([np.bincount(Y[t], minlength=2) for t in tr]))
    return ctx, group


def assert_states_close(a, b, atol=1e-5, rtol=1e-4):
    """Two states (name -> tensor) with the same names, equal within atol / rtol."""
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=rtol, msg=name)


def assert_states_equal(a, b):
    """Two states (name -> tensor) with the same names, equal bit for bit."""
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
