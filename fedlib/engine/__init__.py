"""The fast multi-client trainer: stacked weights in, stacked weights out.

A *stacked state* is a dict ``name -> Tensor (M, *shape)`` holding M models (one per
selected client, or per cluster) — every float parameter and BatchNorm buffer of the
architecture. Server rules are pure functions over it (:mod:`fedlib.engine.params`);
:func:`local_train` and :func:`evaluate` run many clients at once, vectorised over
clients with ``torch.func.vmap`` where that pays (:mod:`fedlib.engine.paths`).

Typical round of FedAvg::

    fed = Federation.from_arrays(x, y, train_parts, test_parts, device="auto")
    model = build_model("mlp", fed.n_classes, fed.input_shape)
    global_ = init_params(model, seed=0)
    chosen = rng.choice(fed.n_clients, size=int(q * fed.n_clients), replace=False)
    res = local_train(model, broadcast(global_, len(chosen), copy=False), fed, chosen,
                      epochs=5, seed=0, round_idx=t)
    global_ = weighted_average(res.params, res.n_samples)
"""
from .evaluate import EvalResult, LossMatrix, evaluate, evaluate_global, loss_matrix, predict_logits
from .dense import per_client_products
from .federation import Federation, resolve_device
from .params import (RunningAverage, broadcast, flatten_params, stack_params, unflatten_params, unstack,
                     weighted_average)
from .paths import choose_path
from .predict import GatedMixture, NearestPrototype, OneModel, evaluate_with
from .prototypes import class_embeddings
from .optim import SGD, Adam, AdamState, EmbeddingPull, SGDState
from .train import TrainResult, local_train
from .precision import gpu_kernels
from .workers import flush_subnormals, max_workers, without_workers

__all__ = [
    "Federation",
    "resolve_device",
    "local_train",
    "TrainResult",
    "Adam",
    "SGD",
    "AdamState",
    "SGDState",
    "EmbeddingPull",
    "class_embeddings",
    "evaluate",
    "predict_logits",
    "EvalResult",
    "evaluate_global",
    "loss_matrix",
    "LossMatrix",
    "evaluate_with",
    "OneModel",
    "GatedMixture",
    "NearestPrototype",
    "choose_path",
    "max_workers",
    "flush_subnormals",
    "without_workers",
    "gpu_kernels",
    "per_client_products",
    "stack_params",
    "unstack",
    "broadcast",
    "weighted_average",
    "RunningAverage",
    "flatten_params",
    "unflatten_params",
]
