"""All clients' data on one device: pooled tensors plus ragged per-client index arrays."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..validation import check_int, fail

__all__ = ["Federation", "resolve_device", "gather"]

NO_GLOBAL_TEST = ("this Federation has no global test set: build it with "
                  "Federation.from_arrays(..., x_global=x_test, y_global=y_test) (the data set's "
                  "official test split)")


DEVICES = "'auto', 'cpu', 'cuda' or 'cuda:N'"
"""The devices fedlib runs on (a torch.device of type cpu or cuda is accepted too)."""


def _parse_device(device) -> torch.device | None:
    """``device`` as a cpu/cuda torch.device, or None when it names no such device."""
    if isinstance(device, torch.device):
        return device if device.type in ("cpu", "cuda") else None
    if not isinstance(device, str):
        return None
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        return torch.device(device)
    return None


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``'auto'`` → CUDA when available, else CPU; any other value is checked and returned.

    Allowed: ``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'`` (N < the number of GPUs), or a
    ``torch.device`` of type cpu/cuda. Apple's ``'mps'`` and other torch backends are not
    supported (the engine's kernels are tested on CPU and CUDA only).
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    parsed = _parse_device(device)
    if parsed is None:
        kind = device.type if isinstance(device, torch.device) else str(device).split(":")[0]
        note = " (Apple's MPS backend is not supported by fedlib)" if kind == "mps" else ""
        fail("device", DEVICES + note, device)
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            fail("device", "'auto' or 'cpu' here (CUDA is not available on this machine)", device)
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            fail("device", f"'cuda' or 'cuda:N' with N < {torch.cuda.device_count()} (the GPUs here)", device)
    return parsed


def gather(data: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``data[index]`` for an int64 index of any shape: (*index.shape, *data.shape[1:]).

    ``index_select`` is several times faster than advanced indexing on CPU.
    """
    return data.index_select(0, index.flatten()).view(*index.shape, *data.shape[1:])


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class Federation:
    """K clients' train, validation and test data, pooled on one device.

    Client ``k``'s train samples are ``x[train_parts[k]]`` / ``y[train_parts[k]]``, its
    validation samples ``x[val_parts[k]]`` / ``y[val_parts[k]]`` and its test samples
    ``x_test[test_parts[k]]`` / ``y_test[test_parts[k]]``. The index arrays stay on the
    CPU (they drive the batch schedule); the engine gathers each step's mini-batches on
    ``x``'s device. An optional *global* test set ``x_global`` / ``y_global`` (the data
    set's official test split) is shared by every client: ``split('global')`` gives each
    client all of it.

    Attributes
    ----------
    x, y : Tensor, shapes (N, *input_shape) and (N,)
        Pooled inputs (float32 features/images, or int64 token ids) and int64 labels.
    x_test, y_test : Tensor, shapes (N', *input_shape) and (N',)
        Where the test indices point; the same tensors as ``x``/``y`` unless the data
        set has a separate test pool.
    train_parts, test_parts : tuple of np.ndarray
        K int64 index arrays each (ragged; may be empty).
    n_classes : int
    val_parts : tuple of np.ndarray
        K int64 index arrays into ``x``/``y`` (default: K empty arrays). A federation
        whose validation parts are all empty may be built (e.g. by
        ``dataclasses.replace``) with a different number of clients: they are reset to
        K empty arrays.
    x_global, y_global : Tensor or None, shapes (N_g, *input_shape) and (N_g,)
        The global test set, or None (see :attr:`has_global_test`).
    """

    x: torch.Tensor
    y: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    train_parts: tuple[np.ndarray, ...]
    test_parts: tuple[np.ndarray, ...]
    n_classes: int
    val_parts: tuple[np.ndarray, ...] | None = None
    x_global: torch.Tensor | None = None
    y_global: torch.Tensor | None = None

    def __post_init__(self):
        k = len(self.train_parts)
        val = self.val_parts
        if val is None or (len(val) != k and all(len(p) == 0 for p in val)):
            val = tuple(np.zeros(0, dtype=np.int64) for _ in range(k))
        if len(val) != k:
            raise ValueError(f"val_parts must list the same K={k} clients as train_parts, got {len(val)}")
        object.__setattr__(self, "val_parts", tuple(val))
        if (self.x_global is None) != (self.y_global is None):
            raise ValueError("give both x_global and y_global, or neither")

    @classmethod
    def from_arrays(cls, x, y, train_parts: Sequence, test_parts: Sequence,
                    device: str | torch.device = "auto", *, x_test=None, y_test=None,
                    n_classes: int | None = None, val_parts: Sequence | None = None,
                    x_global=None, y_global=None) -> "Federation":
        """Move a partitioned data set to ``device``.

        Parameters
        ----------
        x : array-like or Tensor, shape (N, *input_shape)
            Floating inputs (stored float32) or integer token ids (stored int64).
        y : array-like or Tensor, shape (N,)
            Integer class ids 0..C-1.
        train_parts, test_parts : sequence of K index arrays
            Per-client indices into ``x`` (train) and into ``x_test`` (test), e.g. from
            :func:`fedlib.partition.dirichlet` and :func:`fedlib.partition.train_test_split`.
        device : str or torch.device, default 'auto'
        x_test, y_test : optional
            A separate test pool; both or neither (default: the test indices point into
            ``x``/``y``).
        n_classes : int, optional
            Default: 1 + the largest label (of every pool given).
        val_parts : sequence of K index arrays, optional
            Per-client validation indices into ``x`` (e.g. from
            :func:`fedlib.partition.train_val_test_split`); default: none.
        x_global, y_global : optional, shapes (N_g, *input_shape) and (N_g,)
            The data set's official test set (e.g. FMNIST's 10k test images), evaluated
            by :func:`fedlib.engine.evaluate_global`; both or neither.
        """
        device = resolve_device(device)
        check_int(n_classes, "n_classes", 2, optional=True)
        for name, parts in (("train_parts", train_parts), ("test_parts", test_parts),
                            ("val_parts", val_parts)):
            if parts is not None and (isinstance(parts, (str, bytes, dict)) or not hasattr(parts, "__len__")):
                fail(name, "a sequence of K 1-D integer index arrays (one per client)", parts)
        if (x_test is None) != (y_test is None):
            raise ValueError("give both x_test and y_test, or neither")
        x_t, y_t = _to_inputs(x, "x", device), _to_labels(y, "y", device)
        _check_same_length(x_t, y_t, "x", "y")
        if x_test is None:
            xt_t, yt_t = x_t, y_t
        else:
            xt_t, yt_t = _to_inputs(x_test, "x_test", device), _to_labels(y_test, "y_test", device)
            _check_same_length(xt_t, yt_t, "x_test", "y_test")
            if xt_t.shape[1:] != x_t.shape[1:]:
                raise ValueError(f"x_test samples have shape {tuple(xt_t.shape[1:])}, "
                                 f"x has {tuple(x_t.shape[1:])}")
        if len(train_parts) != len(test_parts) or len(train_parts) == 0:
            raise ValueError(f"train_parts and test_parts must list the same K ≥ 1 clients, "
                             f"got {len(train_parts)} and {len(test_parts)}")
        tr = tuple(_to_index(p, len(y_t), f"train_parts[{k}]") for k, p in enumerate(train_parts))
        te = tuple(_to_index(p, len(yt_t), f"test_parts[{k}]") for k, p in enumerate(test_parts))
        if val_parts is None:
            va = tuple(np.zeros(0, dtype=np.int64) for _ in tr)
        else:
            if len(val_parts) != len(tr):
                raise ValueError(f"val_parts must list the same K={len(tr)} clients as train_parts, "
                                 f"got {len(val_parts)}")
            va = tuple(_to_index(p, len(y_t), f"val_parts[{k}]") for k, p in enumerate(val_parts))
        if (x_global is None) != (y_global is None):
            raise ValueError("give both x_global and y_global, or neither")
        xg_t = yg_t = None
        if x_global is not None:
            xg_t, yg_t = _to_inputs(x_global, "x_global", device), _to_labels(y_global, "y_global", device)
            _check_same_length(xg_t, yg_t, "x_global", "y_global")
            if len(yg_t) == 0:
                raise ValueError("x_global must hold at least one sample, got 0")
            if xg_t.shape[1:] != x_t.shape[1:]:
                raise ValueError(f"x_global samples have shape {tuple(xg_t.shape[1:])}, "
                                 f"x has {tuple(x_t.shape[1:])}")
            if xg_t.dtype != x_t.dtype:
                raise ValueError(f"x_global must hold the same kind of inputs as x, got {xg_t.dtype} "
                                 f"and {x_t.dtype}")
        top = int(max(y_t.max().item() if len(y_t) else -1, yt_t.max().item() if len(yt_t) else -1,
                      yg_t.max().item() if yg_t is not None else -1))
        if n_classes is None:
            n_classes = top + 1
        if n_classes < max(2, top + 1):
            raise ValueError(f"n_classes={n_classes} but labels go up to {top} "
                             "(and at least 2 classes are needed)")
        return cls(x_t, y_t, xt_t, yt_t, tr, te, int(n_classes), va, xg_t, yg_t)

    @classmethod
    def concat(cls, feds: Sequence["Federation"]) -> tuple["Federation", np.ndarray]:
        """The clients of several federations side by side in one: client k of ``feds[r]`` is
        client ``offsets[r] + k`` of the result, with the same train, validation and test
        samples (what :mod:`fedlib.together` trains several runs' clients in one call on).

        Federations whose pools are the same tensors (or equal ones: one data set, partitioned
        differently) share them; otherwise the pools are concatenated and the indices shifted.
        Every federation must be on one device, with one input shape and dtype and one number
        of classes. The global test set is the first federation's when all have an equal one,
        else none.

        Returns
        -------
        (Federation, offsets (R,) int64)
        """
        feds = list(feds)
        if not feds or not all(isinstance(f, Federation) for f in feds):
            fail("feds", "a non-empty sequence of Federations", feds)
        first = feds[0]
        for f in feds[1:]:
            same = (f.device == first.device, f.x.shape[1:] == first.x.shape[1:], f.x.dtype == first.x.dtype,
                    f.n_classes == first.n_classes)
            if not all(same):
                fail("feds", "federations on one device with one input shape, dtype and number of classes",
                     [(str(g.device), tuple(g.x.shape[1:]), str(g.x.dtype), g.n_classes) for g in feds])
        offsets = np.cumsum([0] + [f.n_clients for f in feds[:-1]]).astype(np.int64)

        def pool(xs, ys):  # (x, y, per-federation index shifts)
            if all(_same_tensor(x, xs[0]) and _same_tensor(y, ys[0]) for x, y in zip(xs, ys)):
                return xs[0], ys[0], [0] * len(xs)
            shift = np.cumsum([0] + [len(y) for y in ys[:-1]]).tolist()
            return torch.cat(xs), torch.cat(ys), shift

        x, y, shift = pool([f.x for f in feds], [f.y for f in feds])
        separate = any(f.x_test is not f.x for f in feds)
        if separate:
            x_test, y_test, shift_test = pool([f.x_test for f in feds], [f.y_test for f in feds])
        else:
            x_test, y_test, shift_test = x, y, shift
        train = tuple(p + s for f, s in zip(feds, shift) for p in f.train_parts)
        val = tuple(p + s for f, s in zip(feds, shift) for p in f.val_parts)
        test = tuple(p + s for f, s in zip(feds, shift_test) for p in f.test_parts)
        glob = first.has_global_test and all(f.has_global_test and _same_tensor(f.x_global, first.x_global)
                                             and _same_tensor(f.y_global, first.y_global) for f in feds)
        merged = cls(x, y, x_test, y_test, train, test, first.n_classes, val,
                     first.x_global if glob else None, first.y_global if glob else None)
        return merged, offsets

    @property
    def n_clients(self) -> int:
        """K."""
        return len(self.train_parts)

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input, without the batch dimension."""
        return tuple(self.x.shape[1:])

    @functools.cached_property
    def n_train(self) -> np.ndarray:
        """(K,) int64, read-only: train samples per client (computed once: a round reads it)."""
        return _frozen(np.array([len(p) for p in self.train_parts], dtype=np.int64))

    @functools.cached_property
    def n_test(self) -> np.ndarray:
        """(K,) int64, read-only: test samples per client."""
        return _frozen(np.array([len(p) for p in self.test_parts], dtype=np.int64))

    @functools.cached_property
    def train_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every client's train indices end to end, and where each client's start: a (Σ n_k,)
        int64 array and a (K,) int64 array, read-only. ``rows[start[k]:start[k] + n_train[k]]``
        is ``train_parts[k]``; :meth:`train_rows_of` gathers many clients' in one pass."""
        n = self.n_train
        rows = np.concatenate([np.zeros(0, dtype=np.int64), *self.train_parts]).astype(np.int64, copy=False)
        return _frozen(rows), _frozen(np.cumsum(n) - n)

    def train_rows_of(self, clients: np.ndarray) -> np.ndarray:
        """``np.concatenate([train_parts[c] for c in clients])`` as int64, without a loop over
        the clients. ``clients``: (M,) int; returns (Σ n_c,) int64."""
        rows, start = self.train_rows
        n = self.n_train[clients]
        within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        return rows[np.repeat(start[clients], n) + within]

    @property
    def n_val(self) -> np.ndarray:
        """(K,) int64: validation samples per client."""
        return np.array([len(p) for p in self.val_parts], dtype=np.int64)

    @property
    def has_global_test(self) -> bool:
        """Whether a global test set (``x_global``/``y_global``) was given."""
        return self.x_global is not None

    @property
    def n_global(self) -> int:
        """N_g, the size of the global test set (0 without one)."""
        return 0 if self.y_global is None else len(self.y_global)

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor, tuple[np.ndarray, ...]]:
        """``(x, y, parts)`` of ``'train'``, ``'val'``, ``'test'`` or ``'global'``.

        For ``'global'`` every one of the K parts is ``arange(N_g)``: each client's
        "split" is the whole global test set.
        """
        if name == "train":
            return self.x, self.y, self.train_parts
        if name == "val":
            return self.x, self.y, self.val_parts
        if name == "test":
            return self.x_test, self.y_test, self.test_parts
        if name == "global":
            if not self.has_global_test:
                raise ValueError(NO_GLOBAL_TEST)
            every = np.arange(self.n_global, dtype=np.int64)
            return self.x_global, self.y_global, (every,) * self.n_clients
        raise ValueError(f"split must be one of 'train', 'val', 'test', 'global', got {name!r}")

    def check_clients(self, clients) -> np.ndarray:
        """Validate client ids (repeats allowed) and return them as an (M,) int64 array."""
        c = np.asarray(clients)
        if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer):
            raise ValueError(f"clients must be a non-empty 1-D sequence of integer ids, got {clients!r}")
        if c.min() < 0 or c.max() >= self.n_clients:
            raise ValueError(f"client ids must lie in 0..{self.n_clients - 1}, got {c.min()}..{c.max()}")
        return c.astype(np.int64)


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same tensor, or equal ones (shape, dtype and values)."""
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b)))


def _as_tensor(v, name: str, what: str) -> torch.Tensor:
    try:
        return torch.as_tensor(v)
    except (TypeError, ValueError, RuntimeError):
        text = " ".join(repr(v).split())
        raise ValueError(f"{name} must be {what}, got {text if len(text) <= 120 else text[:117] + '...'}") \
            from None


def _to_inputs(x, name: str, device: torch.device) -> torch.Tensor:
    t = _as_tensor(x, name, "an array of floats or integer token ids, shape (N, *input_shape)")
    if t.dim() < 2:
        raise ValueError(f"{name} must have shape (N, *input_shape), got {tuple(t.shape)}")
    if t.is_floating_point():
        return t.to(device, torch.float32)
    if t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        return t.to(device, torch.int64)
    raise ValueError(f"{name} must hold floats or integer token ids, got dtype {t.dtype}")


def _to_labels(y, name: str, device: torch.device) -> torch.Tensor:
    t = _as_tensor(y, name, "a 1-D array of integer class ids")
    if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D array of integer class ids, got {t.dtype} {tuple(t.shape)}")
    if len(t) and t.min() < 0:
        raise ValueError(f"{name} must hold non-negative class ids, found {int(t.min())}")
    return t.to(device, torch.int64)


def _to_index(part, n: int, name: str) -> np.ndarray:
    p = np.asarray(part)
    if p.ndim != 1 or (p.size and not np.issubdtype(p.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-D integer index array, got {p.dtype} {p.shape}")
    p = p.astype(np.int64)
    if p.size and (p.min() < 0 or p.max() >= n):
        raise ValueError(f"{name} holds indices outside 0..{n - 1}")
    return p


def _check_same_length(x: torch.Tensor, y: torch.Tensor, xn: str, yn: str) -> None:
    if len(x) != len(y):
        raise ValueError(f"{xn} has {len(x)} samples but {yn} has {len(y)}")
