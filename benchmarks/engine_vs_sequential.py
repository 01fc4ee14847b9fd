"""Engine vs. a plain sequential FL loop: same federation, same model, same seed.

The plain loop is what the usual simulators do (PFLlib, FedLab's serial trainer, Flower
inside one actor): per selected client, deep-copy the global model, iterate a shuffled
``DataLoader`` over the client's ``TensorDataset`` with a fresh ``torch.optim.Adam`` for
E epochs, then average the state dicts weighted by sample count (FedAvg). The engine
runs the same rounds with ``fedlib.engine.local_train(path='auto')`` +
``weighted_average``, its clients starting from a read-only view of the global model
(``broadcast(..., copy=False)``, as fedlib's FedAvg passes them: the engine copies each chunk's
start rows itself). Only the training rounds are timed (data loading, partitioning and
the final evaluation are not). Each configuration prints an accuracy line (the final
global model on the union of the clients' test splits; the two runs shuffle
differently, so they agree within noise, not exactly) and then exactly one line::

    <model> <device> clients=<K> sequential=<s>s engine=<s>s ratio=<x> of_bound=<p>% of_shapes=<p>%

with ratio = sequential / engine, each time the best of ``--repeat`` interleaved runs, and
of_bound = (the arithmetic's time at this machine's matmul peak) / engine: the share of
the bound no implementation can beat that the engine reaches. The peak is the faster of MKL's
and oneDNN's 2048² products (``benchmarks/peak.py``: on AMD CPUs MKL runs AVX2 code, about half
of oneDNN's AVX-512 rate). The line ends with of_shapes = (the same arithmetic at the rates
its own products reach) / engine: every matrix product and convolution of one client's step
of a batch, each timed alone on one thread in the fastest formulation tried
(``peak.products_floor``), scaled to the run's samples and divided by the threads — the
floor for products of these shapes (a batch of 32 against a client's own weights runs far
below a 2048² product's rate), which the ``# … bounds`` line prints as a rate and a share of
the peak. ``--without-workers`` also times
the engine as it was before worker threads (``fedlib.engine.without_workers()``: one chunk at a
time in the calling thread, subnormals kept), in the same interleaving, and appends
``without_workers=<s>s workers_gain=<x>``: the A/B of ``fedlib.engine.workers`` (conv stacks).
``--without-onednn`` likewise times the engine with every dense layer on ``bmm``
(``fedlib.engine.per_client_products(False)``) and appends ``without_onednn=<s>s onednn_gain=<x>``:
the A/B of the dense kernel's per-client oneDNN products (``fedlib.engine.dense``).

Configurations (FedAvg, q = 0.5, Adam lr 1e-3, batch 32, Dirichlet α = --alpha, default 0.5):
  logistic    Adult (107 features, 2 classes; ACSIncome's offline stand-in), E=5
  mlp         Letter (16 features, 26 classes; Serengeti's stand-in), E=5
  fmnist_cnn  FMNIST, a 12 000-image training subset, E=1 (keeps the CPU run short)
  lenet5      the same FMNIST subset with LeNet-5 (FedPrism's model), E=1
Synthetic data of the same shape replaces a data set that does not load (a note says so).

``--path-table`` instead times the engine's two paths against each other on a ladder of
models (ms per client step, 50 synthetic clients × 128 samples, E=1, best of 3): the
measurement behind the rule of ``fedlib.engine.paths``; rerun it on new hardware.

Usage: python benchmarks/engine_vs_sequential.py [--device auto|cpu|cuda] [--clients 100]
       [--rounds 3] [--alpha 0.5] [--models logistic,mlp,fmnist_cnn,lenet5] [--mlp-hidden 500]
       [--repeat 2] [--quick] [--seed 0] [--path-table] [--optimizer adam|sgd] [--sgd-lr 0.01]
       [--momentum 0.9] [--without-workers] [--without-onednn] [--record DIR]

``--record DIR`` also writes the run's figures as one JSON file in DIR (``benchmarks/_record.py``;
``--path-table``'s under the benchmark name ``engine_paths``), which ``benchmarks/report.py``
renders into docs/performance.md.

The engine's wall time cannot drop below (steps of the largest selected client) × (cost of
one vectorised step), while the loop's grows with the sum over all selected clients: the
ratio is highest for equal client sizes (``--alpha 50``) and lower under label skew, where
Dirichlet sizes spread (Adult, α = 0.5: the largest client holds 5× the mean).
"""
from __future__ import annotations

import argparse
import copy
import functools
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from fedlib.engine import (SGD, Federation, broadcast, choose_path, local_train, per_client_products, resolve_device,
                           weighted_average, without_workers)
from fedlib.models import build_model, init_params
import _record
from peak import describe, matmul_peak, products_floor, step_flops

CONFIGS = {  # model: (dataset, synthetic fallback shape, n_classes, train subset, epochs)
    "logistic": ("adult", (107,), 2, None, 5),
    "mlp": ("letter", (16,), 26, None, 5),
    "fmnist_cnn": ("fmnist", (1, 28, 28), 10, 12_000, 1),
    "lenet5": ("fmnist", (1, 28, 28), 10, 12_000, 1),
}
Q, BATCH, LR, EPS = 0.5, 32, 1e-3, 1e-7


def load_data(name: str, shape: tuple, n_classes: int, subset: int | None, seed: int):
    """(x, y) as numpy arrays: the real training set (optionally subsampled), else synthetic."""
    try:
        from fedlib.datasets import load
        ds = load(name)
        x, y = np.asarray(ds.x_train, np.float32), np.asarray(ds.y_train, np.int64)
    except Exception as err:  # noqa: BLE001 - any failure means "use synthetic data"
        print(f"# note: {name} did not load ({type(err).__name__}: {err}); using synthetic data")
        rng = np.random.default_rng(seed)
        n = subset or 20_000
        centers = rng.normal(size=(n_classes, int(np.prod(shape))))
        y = rng.integers(0, n_classes, n)
        x = (centers[y] + 2.0 * rng.normal(size=(n, centers.shape[1]))).astype(np.float32).reshape(n, *shape)
    if subset is not None and subset < len(y):
        keep = np.random.default_rng(seed).choice(len(y), subset, replace=False)
        x, y = x[keep], y[keep]
    return x, y


def partition(y: np.ndarray, k: int, alpha: float, seed: int):
    """Dirichlet(α) parts split 80/20 via fedlib.partition; an IID split (with a note) when
    that module does not import or the draw is infeasible."""
    try:
        from fedlib.partition import dirichlet, train_test_split
        return train_test_split(dirichlet(y, k, alpha, seed), seed)
    except (ImportError, ValueError) as err:
        print(f"# note: Dirichlet partition unavailable ({type(err).__name__}: {err}); using an IID split")
        parts = np.array_split(np.random.default_rng(seed).permutation(len(y)), k)
        cut = [int(0.8 * len(p)) for p in parts]
        return [p[:c] for p, c in zip(parts, cut)], [p[c:] for p, c in zip(parts, cut)]


def plain_fedavg(model, x, y, train_parts, schedule, epochs, device, seed, sgd=None):
    """The usual simulator loop; returns the final global state dict. ``sgd``: a
    :class:`fedlib.engine.SGD` whose settings the loop's ``torch.optim.SGD`` takes (None:
    ``torch.optim.Adam``)."""
    datasets = [TensorDataset(torch.from_numpy(x[p]), torch.from_numpy(y[p])) for p in train_parts]
    global_model = copy.deepcopy(model).to(device)
    for t, chosen in enumerate(schedule):
        states, sizes = [], []
        for c in chosen:
            local = copy.deepcopy(global_model).train()
            loader = DataLoader(datasets[c], batch_size=BATCH, shuffle=True,
                                generator=torch.Generator().manual_seed(seed * 100_003 + t * 1_009 + int(c)))
            optimizer = (torch.optim.Adam(local.parameters(), lr=LR, eps=EPS) if sgd is None else
                         torch.optim.SGD(local.parameters(), lr=sgd.lr, momentum=sgd.momentum, foreach=True))
            for _ in range(epochs):
                for xb, yb in loader:
                    xb, yb = xb.to(device), yb.to(device)
                    optimizer.zero_grad()
                    F.cross_entropy(local(xb), yb).backward()
                    optimizer.step()
            states.append(local.state_dict())
            sizes.append(len(datasets[c]))
        total = sum(sizes)
        global_model.load_state_dict({
            k: sum(s[k] * (n / total) for s, n in zip(states, sizes)) if v.is_floating_point() else v
            for k, v in states[0].items()
        })
    return {k: v for k, v in global_model.state_dict().items() if v.is_floating_point()}


def engine_fedavg(model, fed, init, schedule, epochs, seed, sgd=None):
    """The same rounds on the engine; returns the final global state (``sgd`` as
    :func:`plain_fedavg`'s: the engine's vectorised SGD with momentum)."""
    global_, spare = init, None
    for t, chosen in enumerate(schedule):  # the clients start from a read-only view of the global model
        res = local_train(model, broadcast(global_, len(chosen), copy=False), fed, chosen, epochs=epochs,
                          seed=seed, round_idx=t, batch_size=BATCH, lr=LR, eps=EPS, optimizer=sgd,
                          out=spare)  # every round of the schedule has ⌊q·K⌋ clients
        global_ = weighted_average(res.params, res.n_samples)
        spare = res.params  # averaged: the next round writes its clients into this memory
    return global_, res.path


def training_flops(model, input_shape, device, samples: int) -> float:
    """FLOPs of forward + backward over ``samples`` training samples (torch's FLOP counter
    on one batch of BATCH, scaled; counts matmuls and convolutions, the bulk of the work)."""
    return step_flops(model, input_shape, BATCH, device) * samples / BATCH


@torch.no_grad()
def test_accuracy(model, state, fed) -> float:
    """Accuracy of one global model on the union of the clients' test splits."""
    net = copy.deepcopy(model).to(fed.device).eval()
    net.load_state_dict(state, strict=False)
    idx = torch.as_tensor(np.concatenate(fed.test_parts), device=fed.device)
    correct = sum(int((net(fed.x_test[b]).argmax(1) == fed.y_test[b]).sum()) for b in idx.split(4096))
    return correct / len(idx)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device, fn, *args):
    """(wall seconds, result) of fn(*args), synchronising CUDA around it."""
    _sync(device)
    t0 = time.perf_counter()
    result = fn(*args)
    _sync(device)
    return time.perf_counter() - t0, result


def run_config(arch: str, k: int, rounds: int, alpha: float, device: torch.device, seed: int,
               quick: bool, mlp_hidden: int, repeat: int, sgd: SGD | None = None, without: bool = False,
               without_onednn: bool = False) -> dict:
    """Time one configuration, print its lines; return its figures (the ``--record`` row)."""
    name, shape, n_classes, subset, epochs = CONFIGS[arch]
    if quick:
        subset, rounds, repeat = min(subset or 10_000, 10_000), 1, 1
    x, y = load_data(name, shape, n_classes, subset, seed)
    train_parts, test_parts = partition(y, k, alpha, seed)
    fed = Federation.from_arrays(x, y, train_parts, test_parts, device)
    options = {"hidden": mlp_hidden} if arch == "mlp" else {}
    model = build_model(arch, max(fed.n_classes, n_classes), fed.input_shape, **options)
    label = f"mlp{mlp_hidden}" if arch == "mlp" and mlp_hidden != 500 else arch
    label += "" if sgd is None else f"+sgd{sgd.momentum:g}"
    init = {n: t.to(device) for n, t in init_params(model, seed).items()}
    rng = np.random.default_rng(seed)
    schedule = [np.sort(rng.choice(k, int(Q * k), replace=False)) for _ in range(rounds)]

    model_seq = copy.deepcopy(model)
    model_seq.load_state_dict(init, strict=False)
    plain_fedavg(model_seq, x, y, train_parts, schedule[:1], 1, device, seed, sgd)  # warm-ups (lazy imports,
    engine_fedavg(model, fed, init, schedule[:1], 1, seed, sgd)                      # allocator, kernels)
    t_seq = t_eng = t_without = t_bmm = np.inf
    for _ in range(repeat):  # interleaved; both runs are deterministic, so every repeat is the same work
        t, state_seq = _timed(device, plain_fedavg, model_seq, x, y, train_parts, schedule, epochs,
                              device, seed, sgd)
        t_seq = min(t_seq, t)
        t, (state_eng, path) = _timed(device, engine_fedavg, model, fed, init, schedule, epochs, seed, sgd)
        t_eng = min(t_eng, t)
        if without:  # the engine before worker threads
            with without_workers():
                t_without = min(t_without, _timed(device, engine_fedavg, model, fed, init, schedule, epochs, seed,
                                                sgd)[0])
        if without_onednn:  # every dense layer on bmm
            with per_client_products(False):
                t_bmm = min(t_bmm, _timed(device, engine_fedavg, model, fed, init, schedule, epochs, seed, sgd)[0])

    acc_seq, acc_eng = test_accuracy(model, state_seq, fed), test_accuracy(model, state_eng, fed)
    sizes = np.array([len(p) for p in train_parts])
    print(f"# {label}: {name} n={len(y)} alpha={alpha} client train sizes {sizes.min()}..{sizes.max()} "
          f"(mean {sizes.mean():.0f}) E={epochs} rounds={rounds} path={path} "
          f"accuracy sequential={acc_seq:.4f} engine={acc_eng:.4f}")
    # Two bounds no implementation escapes: the engine takes at least as many (vectorised)
    # steps as the largest selected client of each round, and all clients' arithmetic at
    # this machine's matmul peak takes at least flops / peak seconds.
    steps = [np.array([epochs * -(-sizes[c] // BATCH) for c in chosen]) for chosen in schedule]
    total, critical = sum(int(st.sum()) for st in steps), sum(int(st.max()) for st in steps)
    flops = training_flops(model, fed.input_shape, device, epochs * sum(int(sizes[c].sum()) for c in schedule))
    peak, rates = matmul_peak(device)
    floor = flops / peak
    # A floor at the products' own shapes: one client's step of BATCH samples, each product
    # and convolution timed alone on one thread (benchmarks/peak.py), times the client steps'
    # samples over BATCH, over the threads (clients' products are independent).
    # On a GPU that floor does not exist (peak.products_floor): of_shapes is n/a there.
    shapes, shapes_floor, shapes_rate = "", None, None
    if device.type == "cpu":
        step_seconds, step_flops = products_floor(model, fed.input_shape, BATCH, device)
        threads = torch.get_num_threads()
        shapes_floor = step_seconds * flops / step_flops / threads
        shapes_rate = step_flops / step_seconds
        shapes = (f"; its products at their own shapes (batch {BATCH}, one thread each: "
                  f"{step_flops / step_seconds / 1e9:.0f} GFLOP/s, {step_flops / step_seconds * threads / peak:.0%} "
                  f"of the peak; {threads} threads) ≥ {shapes_floor:.3f}s")
    print(f"# {label} bounds: client steps loop={total} engine critical path={critical} "
          f"(step ratio {total / critical:.1f}); arithmetic {flops / 1e9:.1f} GFLOP at this machine's "
          f"matmul peak ({describe(rates)}) ≥ {floor:.3f}s, so ratio ≤ {t_seq / floor:.0f}{shapes}")
    ab = f" without_workers={t_without:.3f}s workers_gain={t_without / t_eng:.2f}" if without else ""
    ab += f" without_onednn={t_bmm:.3f}s onednn_gain={t_bmm / t_eng:.2f}" if without_onednn else ""
    print(f"{label} {device.type} clients={k} sequential={t_seq:.3f}s engine={t_eng:.3f}s "
          f"ratio={t_seq / t_eng:.1f} of_bound={floor / t_eng:.0%} "
          f"of_shapes={f'{shapes_floor / t_eng:.0%}' if shapes else 'n/a'}{ab}",
          flush=True)
    return {"model": label, "dataset": name, "clients": k, "rounds": rounds, "epochs": epochs, "path": path,
            "sequential_s": t_seq, "engine_s": t_eng, "ratio": t_seq / t_eng,
            "accuracy_sequential": acc_seq, "accuracy_engine": acc_eng,
            "client_steps_loop": total, "critical_path_steps": critical, "gflop": flops / 1e9,
            "peak_gflops": {lib: r / 1e9 for lib, r in rates.items()}, "floor_s": floor,
            "ratio_bound": t_seq / floor, "of_bound": floor / t_eng,
            "shapes_floor_s": shapes_floor, "shapes_gflops_per_thread": None if shapes_rate is None else shapes_rate / 1e9,
            "of_shapes": None if shapes_floor is None else shapes_floor / t_eng,
            "without_workers_s": t_without if without else None,
            "workers_gain": t_without / t_eng if without else None,
            "without_onednn_s": t_bmm if without_onednn else None,
            "onednn_gain": t_bmm / t_eng if without_onednn else None}


PATH_LADDER = [  # (arch, input_shape, n_classes, build options)
    ("logistic", (107,), 2, {}),
    ("logistic", (784,), 10, {}),
    ("mlp", (16,), 26, {"hidden": 64}),
    ("mlp", (16,), 26, {"hidden": 128}),
    ("mlp", (16,), 26, {"hidden": 256}),
    ("mlp", (16,), 26, {"hidden": 384}),
    ("mlp", (16,), 26, {}),
    ("embed_dnn", (20,), 2, {"vocab_size": 2_000}),
    ("embed_dnn", (20,), 2, {"vocab_size": 20_000}),
    ("cnn", (1, 28, 28), 10, {}),
    ("fmnist_cnn", (1, 28, 28), 10, {}),
    ("lenet5", (1, 28, 28), 10, {}),
]


def path_table(device: torch.device, k: int = 50, n: int = 128, repeats: int = 3) -> list[dict]:
    """Print ms per client step of both engine paths for each model of PATH_LADDER; return
    the rows (the ``--record`` results)."""
    rows = []
    rng = np.random.default_rng(0)
    parts = np.split(np.arange(k * n), k)
    for arch, shape, n_classes, options in PATH_LADDER:
        vocab = options.get("vocab_size")
        x = (rng.integers(0, vocab, (k * n, *shape)) if vocab
             else rng.normal(size=(k * n, *shape)).astype(np.float32))
        fed = Federation.from_arrays(x, rng.integers(0, n_classes, k * n), parts, parts, device)
        model = build_model(arch, n_classes, shape, **options)
        start = broadcast({t: v.to(device) for t, v in init_params(model, 0).items()}, k)
        best = {}
        for _ in range(repeats):
            for path in ("sequential", "vectorised"):
                train = functools.partial(local_train, epochs=1, seed=0, path=path)
                t, _ = _timed(device, train, model, start, fed, range(k))
                best[path] = min(best.get(path, np.inf), t / (k * n / BATCH))
        weights = sum(p.numel() for p in model.parameters())
        print(f"path-table {arch}{options or ''} {device.type} weights={weights} "
              f"sequential={best['sequential'] * 1e3:.3f}ms vectorised={best['vectorised'] * 1e3:.3f}ms "
              f"auto={choose_path(model, device, training=True)}", flush=True)
        rows.append({"model": f"{arch}{options or ''}", "weights": weights, "sequential_ms": best["sequential"] * 1e3,
                     "vectorised_ms": best["vectorised"] * 1e3, "auto": choose_path(model, device, training=True)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default=",".join(CONFIGS))
    ap.add_argument("--alpha", type=float, default=0.5, help="Dirichlet α (0.5: label skew; 50: near IID)")
    ap.add_argument("--mlp-hidden", type=int, default=500, help="MLP width (paper: 500)")
    ap.add_argument("--repeat", type=int, default=2, help="timed repeats per side; the best is printed")
    ap.add_argument("--quick", action="store_true", help="1 round, ≤ 10 000 samples per data set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--path-table", action="store_true", help="time the engine's two paths, then exit")
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                    help="the clients' optimiser: Adam (lr 1e-3, the paper's) or SGD (--sgd-lr, --momentum)")
    ap.add_argument("--sgd-lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--without-workers", action="store_true",
                    help="also time the engine before worker threads (fedlib.engine.without_workers())")
    ap.add_argument("--without-onednn", action="store_true",
                    help="also time the engine with every dense layer on bmm (fedlib.engine.per_client_products(False))")
    _record.add_argument(ap)
    args = ap.parse_args()
    sgd = SGD(lr=args.sgd_lr, momentum=args.momentum) if args.optimizer == "sgd" else None
    device = resolve_device(args.device)
    if args.path_table:  # its record files as its own benchmark: the measurement behind engine.paths' rule
        _record.save(args.record, "engine_paths", args, path_table(device), device=device)
        return
    for arch in args.models.split(","):
        if arch not in CONFIGS:
            raise SystemExit(f"--models: {arch!r} is not one of {sorted(CONFIGS)}")
    rows = [run_config(arch, args.clients, args.rounds, args.alpha, device, args.seed, args.quick,
                       args.mlp_hidden, args.repeat, sgd, args.without_workers, args.without_onednn)
            for arch in args.models.split(",")]
    _record.save(args.record, "engine_vs_sequential", args, rows, device=device)


if __name__ == "__main__":
    main()
