"""Bad inputs at every public entry point give ONE clear ValueError (issue 16 §2).

Table-driven: each line of ``CASES`` is (entry point, bad keyword arguments, the parameter the
message must name[, the text that shows the bad value]). The entry point is called with its
good arguments of ``BASE`` overridden by the bad ones and must raise a plain ``ValueError``
(not TypeError / IndexError / KeyError / RuntimeError, nor a library's ValueError subclass)
whose message names the parameter and shows the bad value (``repr`` unless the line says
otherwise), in fedlib's one style ``{name} must be {allowed}, got {value!r}``
(:mod:`fedlib.validation`).

YAML params files give '0.5' and 0.5 alike: a number given as a string is refused at the entry
point, never converted. numpy integers and floats are accepted wherever Python ones are.

``test_every_public_entry_point_is_in_the_table`` walks the modules' ``__all__`` so that a new
entry point cannot skip this table unnoticed. Every case is cheap: validation runs before any
work, the arrays are tiny and nothing is trained.
"""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
import torch

import fedlib.clustering as C
import fedlib.datasets as D
import fedlib.engine.federation as F
import fedlib.evaluation as E
import fedlib.experiment as X
import fedlib.noniid as N
import fedlib.partition as P
import fedlib.privacy as Pv
import fedlib.ray_grid as RG
import fedlib.reproduction as R
from fedlib.datasets import Dataset
from fedlib.engine import (Federation, broadcast, class_embeddings, evaluate, flush_subnormals, local_train,
                           max_workers, resolve_device)
from fedlib.methods import FLConfig, make_hyper
from fedlib.models import build_model, init_params

# ----------------------------------------------------------------------------- tiny inputs
LABELS = np.repeat(np.arange(3), 20)  # N=60, C=3
PARTS = [np.arange(0, 20), np.arange(20, 40), np.arange(40, 60)]
COUNTS = np.array([[5, 3, 2], [1, 4, 5], [3, 3, 4]])
FEATURES = np.random.default_rng(0).normal(size=(6, 3))
X_POOL = np.random.default_rng(1).random((12, 3)).astype(np.float32)
Y_POOL = np.arange(12) % 2
FED = Federation.from_arrays(X_POOL, Y_POOL, [np.arange(4), np.arange(4, 8)],
                             [np.arange(8, 10), np.arange(10, 12)], "cpu")
MODEL = build_model("logistic", 2, (3,))
PARAMS = broadcast(init_params(MODEL, 0), 2)
TOY = Dataset("toy", None, "tabular", "toy", X_POOL, Y_POOL, X_POOL[:4], Y_POOL[:4], ("a", "b"))
TAB_X = np.column_stack([np.arange(60.0), np.arange(60.0) % 7])  # issue 44: a named numeric attribute
HIST3 = np.array([[[3, 1], [2, 2]], [[1, 3], [2, 2]]])  # (K=2, F=2, B=2) attribute bin counts
GOOD_SPEC = dict(dataset="adult", protocol="dirichlet", level=0.5, n_clients=4, seed=0, method="fedavg")
NOT_WRITABLE = os.path.join(os.devnull, "results")  # run_grid must fail on the spec before this


def spec(**bad) -> X.RunSpec:
    """A RunSpec with one bad field (RunSpec itself does not validate on construction)."""
    return X.RunSpec(**{**GOOD_SPEC, **bad})


def validate_spec(**fields):
    """RunSpec's entry point: construct, then ``validate()`` (what run and run_grid call first)."""
    return X.RunSpec(**fields).validate()


validate_spec.covers = X.RunSpec  # the public object this entry point checks

# Good arguments of each entry point; a case overrides some of them with bad values.
BASE = {
    P.dirichlet: dict(labels=LABELS, n_clients=3, alpha=0.5, seed=0),
    P.partition_name: dict(protocol="dirichlet", level=0.5),
    P.dirichlet_client: dict(labels=LABELS, n_clients=3, alpha=0.5, seed=0),
    P.dirichlet_client_mixes: dict(labels=LABELS, n_clients=3, alpha=0.5, seed=0),
    P.similarity: dict(labels=LABELS, n_clients=3, s=0.5, seed=0),
    P.shards: dict(labels=LABELS, n_clients=3, shards_per_client=2, seed=0),
    P.classes_per_client: dict(labels=LABELS, n_clients=3, n_classes_per_client=2, seed=0),
    P.iid_fraction_classes: dict(labels=LABELS, n_clients=3, iid_fraction=0.5, seed=0, classes=(1, 2)),
    P.cafa_authors: dict(labels=LABELS, n_iid=1, n_noniid=2, seed=0),
    P.pathological_clusters: dict(labels=LABELS, n_clients=3, seed=0, n_clusters=3),
    P.noisy_clusters: dict(labels=LABELS, n_clients=3, seed=0, n_clusters=3),
    P.cluster_of_client: dict(n_clients=6, n_clusters=3),
    P.planted_clusters: dict(protocol="pathological_clusters", n_clients=6, level=3),
    P.partition: dict(labels=LABELS, protocol="dirichlet", n_clients=3, level=0.5, seed=0),
    P.train_test_split: dict(parts=PARTS, seed=0),
    P.train_val_test_split: dict(parts=PARTS, seed=0),
    P.label_counts: dict(labels=LABELS, parts=PARTS),
    N.psi_per_class: dict(counts=COUNTS),
    N.psi: dict(counts=COUNTS),
    N.wpsi: dict(counts=COUNTS),
    N.jensen_shannon: dict(counts=COUNTS),
    N.hellinger: dict(counts=COUNTS),
    N.earth_movers: dict(counts=COUNTS),
    N.federation_metrics: dict(counts=COUNTS),
    C.psi_features: dict(counts=COUNTS),
    C.standardise: dict(x=FEATURES),
    C.kmeans_labels: dict(x=FEATURES, n_clusters=2, seed=0),
    C.select_n_clusters: dict(features=FEATURES),
    E.local_accuracy: dict(correct=[3, 4], n=[5, 5]),
    E.global_accuracy: dict(correct=[3, 4], n=[5, 5]),
    E.average_distance: dict(acc=[0.6, 0.8]),
    E.client_parity: dict(acc=[0.6, 0.8]),
    E.summarise_clients: dict(correct=[3, 4], n=[5, 5]),
    E.cluster_recovery: dict(assignment=[0, 0, 1, 1], truth=[1, 1, 0, 0]),
    resolve_device: dict(device="cpu"),
    Federation.from_arrays: dict(x=X_POOL, y=Y_POOL, train_parts=[np.arange(6)], test_parts=[np.arange(6, 12)],
                                 device="cpu"),
    local_train: dict(model=MODEL, params=PARAMS, fed=FED, clients=[0, 1], epochs=1, seed=0),
    max_workers: dict(n=1),
    flush_subnormals: dict(flush=True),
    evaluate: dict(model=MODEL, params=PARAMS, fed=FED, clients=[0, 1]),
    class_embeddings: dict(model=MODEL, params=PARAMS, fed=FED, clients=[0, 1]),
    validate_spec: GOOD_SPEC,
    X.grid_specs: dict(datasets=["adult"], protocols={"dirichlet": [0.5]}, n_clients=[4], seeds=[0],
                       methods=["fedavg"]),
    X.run: dict(spec=spec()),
    R.settings_for: dict(method="cfl", reproduction="paper_code"),
    R.reported_accuracy: dict(rule="last_round", final_accuracy=0.5, history=[]),
    R.runs_differently: dict(method="cfl", n_clients=10, fraction=0.5),
    R.describe: dict(methods=["cfl", "cl"], n_clients=10, fraction=0.5),
    X.run_grid: dict(specs=[spec()], results_dir=NOT_WRITABLE, progress=False),
    RG.ray_session: dict(ray_address=None),
    RG.run_on_ray: dict(specs=[], device="cpu", on_record=print),
    RG.check_options: dict(ray_address=None, num_cpus=1, num_gpus=0, max_retries=3),
    Pv.laplace_counts: dict(counts=COUNTS[0], epsilon=1.0, seed=0, client_id=0),
    Pv.noisy_label_counts: dict(counts=COUNTS, epsilon=1.0, seed=0),
    Pv.postprocess_counts: dict(counts=COUNTS, rule="round"),
    Pv.server_histograms: dict(counts=COUNTS, epsilon=1.0, seed=0, postprocess="clip"),
    Pv.server_attribute_histograms: dict(counts=HIST3, epsilon=1.0, seed=0),
    P.iid_fraction_classes_1_2: dict(labels=LABELS, n_clients=3, iid_fraction=0.5, seed=0),
    P.quantity_skew: dict(labels=LABELS, n_clients=3, sigma=0.2, seed=0),
    P.small_clients: dict(labels=LABELS, n_clients=3, small_share=0.3, seed=0, small_size=(2, 4)),
    P.attribute_skew: dict(labels=LABELS, n_clients=4, purity=1.0, seed=0, features=TAB_X,
                           feature_names=("age", "day"), n_groups=2),
    P.attribute_bins: dict(values=np.arange(8.0), n_bins=4),
    P.covariate_groups: dict(labels=LABELS, n_clients=4, n_groups=4, seed=0),
    P.joint_label_covariate: dict(labels=LABELS, n_clients=4, n_groups=2, seed=0),
    P.transform_inputs: dict(x=np.zeros((4, 1, 2, 2), np.float32), parts=[np.arange(2), np.arange(2, 4)],
                             group_of_client=np.array([0, 1]), kind="rot90"),
    P.transform_group_of_client: dict(protocol="rotated_groups", n_clients=8, level=4),
    P.tier_of_client: dict(n_clients=6, n_groups=3),
    N.image_summaries: dict(x=np.zeros((2, 1, 4, 4))),
    N.quantile_bins: dict(values=np.arange(8.0), n_bins=4),
    N.attribute_counts: dict(bins=np.array([[0], [1]]), parts=[np.array([0]), np.array([1])], n_bins=2),
    N.joint_counts: dict(labels=np.array([0, 1]), bins=np.array([[0], [1]]), parts=[np.array([0]), np.array([1])],
                         n_classes=2, n_bins=2),
    N.psi_per_feature: dict(counts=HIST3),
    N.psi_per_bin: dict(counts=HIST3),
    N.attribute_psi: dict(counts=HIST3),
    N.wapsi: dict(counts=HIST3),
    C.attribute_features: dict(counts=HIST3),
    C.with_size_feature: dict(features=FEATURES, sizes=np.arange(1, 7)),
    C.small_client_weights: dict(sizes=[5, 50, 100]),
    D.load: dict(name="adult"),
    D.available: dict(),
    D.data_dir: dict(),
    D.subsample: dict(ds=TOY, n_train=10, n_test=None, seed=0),
    make_hyper: dict(name="fedprox", values={"mu": 0.1}),
    build_model: dict(arch="logistic", n_classes=2, input_shape=(3,)),
    FLConfig: dict(),
}

CASES = [
    # --- fedlib.partition
    (P.partition_name, dict(protocol="dirichet"), "protocol"),
    (P.partition_name, dict(level="0.5"), "level"),
    (P.dirichlet, dict(alpha="0.5"), "alpha"),
    (P.dirichlet, dict(alpha=None), "alpha"),
    (P.dirichlet, dict(alpha=True), "alpha"),
    (P.dirichlet, dict(alpha=-1.0), "alpha"),
    (P.dirichlet, dict(max_draws=2.5), "max_draws"),
    (P.dirichlet, dict(min_samples="10"), "min_samples"),
    (P.dirichlet, dict(n_clients=2.5), "n_clients"),
    (P.dirichlet, dict(n_clients="3"), "n_clients"),
    (P.dirichlet, dict(seed="0"), "seed"),
    (P.dirichlet, dict(dataset_name=3), "dataset_name"),
    (P.dirichlet_client, dict(alpha="0.5"), "alpha"),
    (P.dirichlet_client, dict(alpha=0.0), "alpha"),
    (P.dirichlet_client, dict(n_clients=2.5), "n_clients"),
    (P.dirichlet_client, dict(seed=-1), "seed", "-1"),
    (P.dirichlet_client_mixes, dict(alpha=0.0), "alpha"),
    (P.dirichlet_client_mixes, dict(n_clients=2.5), "n_clients"),
    (P.similarity, dict(s="0.5"), "s"),
    (P.similarity, dict(s=True), "s"),
    (P.shards, dict(shards_per_client=2.5), "shards_per_client"),
    (P.shards, dict(shards_per_client=True), "shards_per_client"),
    (P.classes_per_client, dict(n_classes_per_client="2"), "n_classes_per_client"),
    (P.classes_per_client, dict(n_classes_per_client=4), "n_classes_per_client"),
    (P.cafa_authors, dict(n_iid=-1), "n_iid", "-1"),
    (P.cafa_authors, dict(n_iid=0, n_noniid=0), "n_iid + n_noniid", "0"),
    (P.cafa_authors, dict(skew=0.0), "skew", "0.0"),
    (P.iid_fraction_classes, dict(iid_fraction="0.5"), "iid_fraction", "'0.5'"),
    (P.iid_fraction_classes, dict(iid_fraction=1.5), "iid_fraction", "1.5"),
    (P.iid_fraction_classes, dict(classes=(3, 2)), "classes[1]", "2"),
    (P.pathological_clusters, dict(n_clusters=2.5), "n_clusters"),
    (P.noisy_clusters, dict(p_noise="0.5"), "p_noise"),
    (P.noisy_clusters, dict(n_noise_labels=1.5), "n_noise_labels"),
    (P.cluster_of_client, dict(n_clusters=2.5), "n_clusters"),
    (P.cluster_of_client, dict(n_clusters=0), "n_clusters"),
    (P.cluster_of_client, dict(n_clients=-1), "n_clients"),
    (P.planted_clusters, dict(level=2.5), "level"),
    (P.planted_clusters, dict(level="3"), "level"),
    (P.planted_clusters, dict(n_clients=0), "n_clients"),
    (P.partition, dict(level="0.5"), "level"),
    (P.partition, dict(protocol="pathological_clusters", level=2.5), "level"),
    (P.partition, dict(protocol="pathological_clusters", level="2"), "level"),
    (P.partition, dict(protocol=["dirichlet"]), "protocol"),
    (P.partition, dict(n_clients=2.5), "n_clients"),
    (P.train_test_split, dict(test_fraction="0.2"), "test_fraction"),
    (P.train_test_split, dict(parts=[np.array([0.5, 1.5])]), "parts[0]", "array([0.5, 1.5])"),
    (P.train_test_split, dict(parts=5), "parts"),
    (P.train_val_test_split, dict(val_fraction="0.1"), "val_fraction"),
    (P.train_val_test_split, dict(seed=1.5), "seed"),
    (P.label_counts, dict(parts=[np.array([0, 100])]), "parts[0]", "100"),
    (P.label_counts, dict(parts=[np.array([-1, 0])]), "parts[0]", "-1"),
    (P.label_counts, dict(n_classes=3.5), "n_classes"),
    (P.label_counts, dict(n_classes="3"), "n_classes"),
    # --- fedlib.noniid
    (N.psi_per_class, dict(eps="1e-6"), "eps"),
    (N.psi_per_class, dict(eps=float("nan")), "eps"),
    (N.psi, dict(eps=None), "eps"),
    (N.wpsi, dict(eps=-1e-6), "eps"),
    (N.jensen_shannon, dict(counts=[["a", "b"]]), "counts"),
    (N.hellinger, dict(counts=[[True, False]]), "counts"),
    (N.earth_movers, dict(variant="exact"), "variant"),
    (N.earth_movers, dict(variant=["faithful"]), "variant"),
    (N.federation_metrics, dict(counts=[["1", "2"]]), "counts"),
    # --- fedlib.clustering
    (C.psi_features, dict(eps="1e-6"), "eps"),
    (C.standardise, dict(x=[["a"]]), "x"),
    (C.kmeans_labels, dict(n_clusters=2.5), "n_clusters"),
    (C.kmeans_labels, dict(n_clusters=np.float64(2.0)), "n_clusters"),
    (C.kmeans_labels, dict(n_clusters=7), "n_clusters"),
    (C.kmeans_labels, dict(seed=-1), "seed"),
    (C.kmeans_labels, dict(n_init="x"), "n_init"),
    (C.select_n_clusters, dict(candidates=[2.5]), "candidates", "2.5"),
    (C.select_n_clusters, dict(candidates=["2"]), "candidates", "'2'"),
    (C.select_n_clusters, dict(candidates=3), "candidates"),
    (C.select_n_clusters, dict(seed="42"), "seed"),
    (C.select_n_clusters, dict(n_init=0), "n_init"),
    (C.select_n_clusters, dict(standardize="no"), "standardize"),
    (C.select_n_clusters, dict(features=[["a"]]), "features"),
    (C.select_n_clusters, dict(sample_weight=[1.0]), "sample_weight"),
    # --- issue 44: beyond label skew
    (P.iid_fraction_classes_1_2, dict(iid_fraction=1.5), "iid_fraction"),
    (P.quantity_skew, dict(sigma=-0.5), "sigma"),
    (P.quantity_skew, dict(tier_ratio="4"), "tier_ratio"),
    (P.small_clients, dict(small_share=1.0), "small_share"),
    (P.small_clients, dict(small_size=3), "small_size"),
    (P.attribute_skew, dict(purity=1.5), "purity"),
    (P.attribute_skew, dict(attribute="income"), "attribute"),
    (P.attribute_skew, dict(features=None), "features"),
    (P.attribute_bins, dict(n_bins=0), "n_bins"),
    (P.attribute_bins, dict(values=[[1.0]]), "values"),
    (P.covariate_groups, dict(n_groups=5), "n_groups"),
    (P.joint_label_covariate, dict(n_label_groups=0), "n_label_groups"),
    (P.transform_inputs, dict(kind="blur"), "kind"),
    (P.transform_inputs, dict(group_of_client=np.array([0, 4])), "group_of_client", "array([0, 4])"),
    (P.transform_group_of_client, dict(level=2.5), "level"),
    (P.tier_of_client, dict(n_groups=0), "n_groups"),
    (P.planted_clusters, dict(protocol="quantity_skew", level="0.5"), "level"),
    (N.image_summaries, dict(x=np.zeros((2, 1, 1, 4))), "x", "(2, 1, 1, 4)"),
    (N.quantile_bins, dict(n_bins=0), "n_bins"),
    (N.attribute_counts, dict(n_bins=1), "bins", "array([[0],"),
    (N.joint_counts, dict(labels=np.array([0, 2])), "labels", "array([0, 2])"),
    (N.psi_per_feature, dict(counts=[[1, 2]]), "counts"),
    (N.psi_per_bin, dict(counts=[[1, 2]]), "counts"),
    (N.attribute_psi, dict(eps="1e-6"), "eps"),
    (N.wapsi, dict(counts=[1, 2]), "counts"),
    (C.attribute_features, dict(counts=[[1]]), "counts"),
    (C.attribute_features, dict(terms="cells"), "terms", "'cells'"),
    (C.with_size_feature, dict(sizes=[1, 2]), "sizes"),
    (C.small_client_weights, dict(reference=0), "reference"),
    (Pv.server_attribute_histograms, dict(epsilon=0.0), "epsilon"),
    (Pv.server_attribute_histograms, dict(counts=[[1.0]]), "counts"),
    # --- fedlib.evaluation
    (E.local_accuracy, dict(correct=["3", "4"]), "correct"),
    (E.global_accuracy, dict(correct=[6, 4]), "correct"),
    (E.global_accuracy, dict(n=[5, -5]), "n"),
    (E.average_distance, dict(target="1.0"), "target"),
    (E.average_distance, dict(acc=[1.5, 0.5]), "acc"),
    (E.client_parity, dict(acc=[float("nan")]), "acc", "[nan]"),
    (E.summarise_clients, dict(cl_accuracy="0.5"), "cl_accuracy"),
    (E.cluster_recovery, dict(assignment=[0.5, 1.0]), "assignment"),
    (E.cluster_recovery, dict(truth=[0, 1, 1]), "truth"),
    # --- fedlib.engine
    (resolve_device, dict(device="gpu"), "device"),
    (resolve_device, dict(device="mps"), "device"),
    (resolve_device, dict(device="cuda:x"), "device"),
    (resolve_device, dict(device="cuda:99"), "device"),  # no such GPU, with or without CUDA
    (resolve_device, dict(device=None), "device"),
    (resolve_device, dict(device=torch.device("meta")), "device"),
    (Federation.from_arrays, dict(device="gpu"), "device"),
    (Federation.from_arrays, dict(n_classes=2.5), "n_classes"),
    (Federation.from_arrays, dict(n_classes="2"), "n_classes"),
    (Federation.from_arrays, dict(train_parts=3), "train_parts"),
    (Federation.from_arrays, dict(x=[["a"]], y=[0]), "x"),
    (local_train, dict(epochs=2.5), "epochs"),
    (local_train, dict(shuffle="no"), "shuffle"),
    (local_train, dict(sink="fold"), "sink"),
    (max_workers, dict(n=0), "max_workers", "0"),
    (max_workers, dict(n=1.5), "max_workers", "1.5"),
    (flush_subnormals, dict(flush=1), "flush", "1"),
    (flush_subnormals, dict(flush="yes"), "flush", "'yes'"),
    (local_train, dict(seed="0"), "seed"),
    (local_train, dict(lr="1e-3"), "lr"),
    (local_train, dict(batch_size=32.0), "batch_size"),
    (local_train, dict(betas=("0.9", 0.999)), "betas"),
    (local_train, dict(prox_mu="0.1", prox_center=PARAMS), "prox_mu"),
    (make_hyper, dict(values=["mu"]), "hyper", "['mu']"),
    (make_hyper, dict(values={"mu": "0.1"}), "mu", "'0.1'"),
    (build_model, dict(input_shape="3"), "input_shape"),
    (build_model, dict(n_classes=1), "n_classes"),
    (FLConfig, dict(lr="0.01"), "lr"),
    (FLConfig, dict(max_loss=0), "max_loss"),
    (FLConfig, dict(optimizer="rmsprop"), "optimizer"),
    (X.run, dict(device="gpu"), "device"),
    (evaluate, dict(split="validation"), "split"),
    (evaluate, dict(batch_size="256"), "batch_size"),
    (class_embeddings, dict(batch_size=0), "batch_size"),
    (class_embeddings, dict(split="validation"), "split"),
    # --- fedlib.experiment
    (validate_spec, dict(level="0.5"), "level"),
    (validate_spec, dict(level=None), "level"),
    (validate_spec, dict(protocol="shards", level=2.5), "level"),
    (validate_spec, dict(n_clients=2.5), "n_clients"),
    (validate_spec, dict(seed="0"), "seed"),
    (validate_spec, dict(n_train=200.5), "n_train"),
    (validate_spec, dict(global_test=True, n_global_test=0), "n_global_test"),
    (validate_spec, dict(n_global_test=100), "n_global_test", "100"),
    (validate_spec, dict(method="fedamp", fl={"stream_average": True}), "stream_average", "fedamp"),
    (validate_spec, dict(fl={"stream_average": 1}), "stream_average", "got 1"),
    (validate_spec, dict(dataset=["adult"]), "dataset"),
    (validate_spec, dict(arch=["mlp"]), "arch"),
    (validate_spec, dict(method="fedprism"), "arch", "got 'logistic'"),  # adult's default: no body/head split
    (validate_spec, dict(method="fedprism", arch="logistic"), "arch", "got 'logistic'"),
    (validate_spec, dict(hyper="mu=0.1"), "hyper"),
    (X.grid_specs, dict(protocols={"dirichlet": ["0.5"]}), "level", "'0.5'"),
    (X.grid_specs, dict(n_clients=[2.5]), "n_clients", "2.5"),
    (X.grid_specs, dict(seeds=["0"]), "seeds", "'0'"),
    (X.grid_specs, dict(datasets="adult"), "datasets"),
    (X.grid_specs, dict(val_fraction="0.1"), "val_fraction", "'0.1'"),
    (X.grid_specs, dict(val_fraction={"psi_pfl": 1.0}), "val_fraction['psi_pfl']", "1.0"),
    (X.grid_specs, dict(n_clients=10), "n_clients"),
    (X.grid_specs, dict(protocols=["dirichlet"]), "protocols"),
    (X.grid_specs, dict(reproductions=["code"]), "reproductions", "'code'"),
    (X.grid_specs, dict(reproductions="paper_code"), "reproductions"),
    (validate_spec, dict(reproduction="paper"), "reproduction", "'paper'"),
    (R.settings_for, dict(reproduction="code"), "reproduction", "'code'"),
    (R.reported_accuracy, dict(rule="best"), "rule", "'best'"),
    (R.settings_for, dict(method="fedmagic"), "method", "'fedmagic'"),
    (R.runs_differently, dict(n_clients=0), "n_clients", "0"),
    (R.runs_differently, dict(fraction="0.5"), "fraction", "'0.5'"),
    (R.runs_differently, dict(method="CFL"), "method", "'CFL'"),
    (R.describe, dict(methods="cfl"), "methods", "'cfl'"),
    (R.describe, dict(methods=["cfl", "x"]), "method", "'x'"),
    (X.run, dict(spec=spec(level="0.5")), "level", "'0.5'"),
    (X.run_grid, dict(specs=[spec(n_clients=2.5)]), "n_clients", "2.5"),
    (X.run_grid, dict(backend="spark"), "backend", "'spark'"),
    (X.run_grid, dict(backend="ray", num_gpus=-1), "num_gpus", "-1"),
    (X.run_grid, dict(ray_address="auto"), "ray_address", "'auto'"),
    (X.run_grid, dict(workers=0), "workers", "0"),
    (X.run_grid, dict(on_run=1), "on_run", "1"),
    # --- fedlib.ray_grid (before Ray is started)
    (RG.ray_session, dict(ray_address=6379), "ray_address", "6379"),
    (RG.run_on_ray, dict(num_cpus="1"), "num_cpus", "'1'"),
    (RG.run_on_ray, dict(max_retries=1.5), "max_retries", "1.5"),
    (RG.check_options, dict(ray_address=""), "ray_address", "''"),
    # --- fedlib.privacy
    (Pv.laplace_counts, dict(epsilon=0), "epsilon", "0"),
    (Pv.laplace_counts, dict(epsilon="1"), "epsilon", "'1'"),
    (Pv.laplace_counts, dict(counts=[1, -2, 3]), "counts"),
    (Pv.laplace_counts, dict(client_id=-1), "client_id", "-1"),
    (Pv.noisy_label_counts, dict(counts=COUNTS[0]), "counts"),
    (Pv.noisy_label_counts, dict(seed=1.5), "seed", "1.5"),
    (Pv.noisy_label_counts, dict(epsilon=float("inf")), "epsilon", "inf"),
    (Pv.postprocess_counts, dict(rule="floor"), "rule", "'floor'"),
    (Pv.postprocess_counts, dict(counts=COUNTS[0]), "counts"),
    (Pv.server_histograms, dict(postprocess="none"), "postprocess", "'none'"),
    (Pv.server_histograms, dict(epsilon=-1.0), "epsilon", "-1.0"),
    # --- fedlib.datasets
    (D.load, dict(name=["adult"]), "dataset", "['adult']"),
    (D.load, dict(data_dir=5), "data_dir"),
    (D.load, dict(foo=1), "options", "['foo']"),
    (D.load, dict(name="fine_foods", seq_len="50"), "seq_len"),
    (D.load, dict(name="fine_foods", min_count=2.5), "min_count"),
    (D.load, dict(name="sent140", fraction="0.2"), "fraction"),
    (D.available, dict(data_dir=5), "data_dir"),
    (D.data_dir, dict(data_dir=b"data"), "data_dir"),
    (D.subsample, dict(n_train=2.5), "n_train"),
    (D.subsample, dict(n_train="10"), "n_train"),
    (D.subsample, dict(seed=-1), "seed"),
    (D.subsample, dict(ds=None), "ds"),
]


def _call(fn, bad: dict):
    return fn(**{**BASE[fn], **bad})


def _case_id(case) -> str:
    fn, bad = case[0], case[1]
    return f"{getattr(fn, '__qualname__', fn)}-{'-'.join(f'{k}={v!r:.20}' for k, v in bad.items())}"


def _shown(case) -> str:
    """The text that must show the bad value: the line's own, else the repr of the bad argument."""
    return case[3] if len(case) > 3 else repr(case[1][case[2]])


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_gives_one_clear_value_error(case):
    fn, bad, name = case[:3]
    with pytest.raises(Exception) as info:
        _call(fn, bad)
    err = info.value
    assert type(err) is ValueError, f"{type(err).__name__}: {err}"
    msg = str(err)
    assert name in msg and _shown(case) in msg, msg


@pytest.mark.cross_cpu
def test_the_table_is_large_and_each_base_call_is_valid():
    """Each bad line differs from a good call only by its bad arguments (so the line, not the
    base, is what the error is about): the base calls that are cheap must succeed."""
    assert len(CASES) >= 40
    slow = {X.run, X.run_grid, D.load, RG.ray_session}  # ray_session would start Ray  # would load data / train: their bases are good by construction
    for fn, kwargs in BASE.items():
        if fn not in slow:
            _call(fn, {})


# ----------------------------------------------------------------------------- coverage
MODULES = [P, N, C, E, X, D, F, R, Pv, RG]
EXTRA_ENTRY_POINTS = [local_train, evaluate, class_embeddings, max_workers,  # engine entry points outside
                      flush_subnormals]                                      # federation.py

EXEMPT = {
    # classes that carry results, errors or fixed settings, not inputs
    "InfeasiblePartitionError", "ClusterSelection", "Dataset", "DatasetSpec", "DataUnavailableError",
    "DataChecksumError", "Settings",
    # gather(data, index): the trainer's inner-loop indexing helper; tensors in, nothing to check
    "gather",
    # paths and files only: nothing but a folder or a spec to pass, and the spec is validated
    # by RunSpec.validate (covered above) wherever a run starts
    "record_path", "load_records", "write_manifest", "load_grid", "present_records",
    # build_federation(spec): loads the data set (seconds), then partitions through
    # fedlib.partition.partition (covered above); run() validates the spec before calling it;
    # build_context(spec) is build_federation plus the model of the (validated) spec
    "build_federation", "build_context",
    # the protocol registry: Protocol is an entry (its check_level is what RunSpec.validate runs,
    # covered above); level_symbol / level_axis are display lookups that never raise (a name with
    # no entry gets the default); level_log_scale and partition_inputs likewise (False, {})
    "Protocol", "level_symbol", "level_axis", "level_log_scale", "partition_inputs",
}


def _covered() -> set:
    names = set()
    for fn in BASE:
        target = getattr(fn, "covers", fn)
        names.add(target.__qualname__.split(".")[0])
    return names


def test_every_public_entry_point_is_in_the_table():
    """A new public function of these modules must get a line in CASES (or a commented
    exemption), so that it cannot skip validation unnoticed."""
    in_cases = {getattr(fn, "covers", fn).__qualname__.split(".")[0] for fn, *_ in CASES}
    assert in_cases == _covered(), "every entry point with a base call needs at least one bad line"
    missing = []
    for module in MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and name not in EXEMPT and name not in in_cases:
                missing.append(f"{module.__name__}.{name}")
    for fn in EXTRA_ENTRY_POINTS:
        if fn.__name__ not in in_cases:
            missing.append(fn.__name__)
    assert not missing, f"public entry points with no line in CASES: {missing}"
    stale = {n for n in EXEMPT if not any(n in m.__all__ for m in MODULES)}
    assert not stale, f"exemptions for names no module exports: {stale}"


# ----------------------------------------------------------------------------- what is accepted
def test_numpy_numbers_are_accepted_wherever_python_ones_are():
    a = P.dirichlet(LABELS, 3, 0.5, 0, min_samples=10, max_draws=100)
    b = P.dirichlet(LABELS, np.int64(3), np.float64(0.5), np.int32(0), min_samples=np.int16(10),
                    max_draws=np.int64(100))
    assert [p.tolist() for p in a] == [p.tolist() for p in b]
    for protocol, level in (("similarity", 0.5), ("shards", 2), ("classes_per_client", 2),
                            ("pathological_clusters", 3), ("noisy_clusters", 3)):
        a = P.partition(LABELS, protocol, 3, level, 0)
        b = P.partition(LABELS, protocol, np.int64(3), np.asarray(level)[()], np.uint8(0))
        assert [p.tolist() for p in a] == [p.tolist() for p in b], protocol
    assert np.array_equal(P.label_counts(LABELS, PARTS, np.int64(4)), P.label_counts(LABELS, PARTS, 4))
    assert np.array_equal(P.cluster_of_client(np.int32(6), np.int64(3)), P.cluster_of_client(6, 3))
    assert np.array_equal(N.psi(COUNTS, np.float32(0.0)), N.psi(COUNTS, 0.0))
    assert np.array_equal(C.kmeans_labels(FEATURES, np.int64(2), np.int64(0), np.int64(1)),
                          C.kmeans_labels(FEATURES, 2, 0, 1))
    sel_a = C.select_n_clusters(FEATURES, candidates=np.arange(2, 4), seed=np.int64(42))
    sel_b = C.select_n_clusters(FEATURES, candidates=[2, 3], seed=42)
    assert sel_a.tau == sel_b.tau and np.array_equal(sel_a.silhouettes, sel_b.silhouettes)
    assert E.summarise_clients(np.array([3, 4]), np.array([5, 5]), np.float64(0.7)) == \
        E.summarise_clients([3, 4], [5, 5], 0.7)
    X.RunSpec("adult", "dirichlet", np.float64(0.5), np.int64(4), np.int32(0), "fedavg",
              n_train=np.int64(200)).validate()
    assert X.grid_specs(["adult"], {"dirichlet": [np.float64(0.5)]}, [np.int64(4)], np.arange(2), ["fedavg"]) \
        == X.grid_specs(["adult"], {"dirichlet": [0.5]}, [4], [0, 1], ["fedavg"])
    assert np.array_equal(D.subsample(TOY, np.int64(6), None, np.int64(1)).y_train,
                          D.subsample(TOY, 6, None, 1).y_train)
    assert resolve_device(torch.device("cpu")) == resolve_device("cpu") == torch.device("cpu")
    fed = Federation.from_arrays(X_POOL, Y_POOL, [np.arange(6)], [np.arange(6, 12)], "cpu", n_classes=np.int64(3))
    assert fed.n_classes == 3 and type(fed.n_classes) is int


def test_a_whole_float_level_is_a_count_as_runspec_stores_it():
    """RunSpec (and grid_specs) store levels as floats: 3.0 clusters is 3 clusters, as before."""
    a = P.partition(LABELS, "pathological_clusters", 6, 3.0, 0)
    b = P.partition(LABELS, "pathological_clusters", 6, 3, 0)
    assert [p.tolist() for p in a] == [p.tolist() for p in b]
    assert [p.tolist() for p in P.partition(LABELS, "shards", 3, 2.0, 0)] == \
           [p.tolist() for p in P.shards(LABELS, 3, 2, 0)]
    X.RunSpec("adult", "pathological_clusters", 2.0, 4, 0, "fedavg").validate()
    with pytest.raises(ValueError, match=r"^level must be a whole number ≥ 1 .*, got 0\.0$"):
        X.RunSpec("adult", "pathological_clusters", 0.0, 4, 0, "fedavg").validate()


def test_device_messages_say_what_is_allowed():
    for bad in ("gpu", "mps", "cuda:x"):
        with pytest.raises(ValueError) as info:
            resolve_device(bad)
        assert str(info.value).startswith("device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"), info.value
        assert str(info.value).endswith(f"got {bad!r}")
    with pytest.raises(ValueError, match="MPS backend is not supported"):
        resolve_device("mps")
    with pytest.raises(ValueError, match="MPS backend is not supported"):
        resolve_device(torch.device("mps"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^device must be 'auto' or 'cpu' here \(CUDA is not available"):
            resolve_device("cuda")
    else:
        assert resolve_device("cuda:0") == torch.device("cuda:0")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_strings_are_refused_not_converted():
    """'0.5' from a params file is an error with the standard message, never silently 0.5."""
    with pytest.raises(ValueError, match=r"^alpha must be a finite number > 0 .*, got '0\.5'$"):
        P.dirichlet(LABELS, 3, "0.5", 0)
    with pytest.raises(ValueError, match=r"^level must be a number \(the dirichlet protocol's alpha\), got '0\.5'$"):
        P.partition(LABELS, "dirichlet", 3, "0.5", 0)
    with pytest.raises(ValueError, match=r"^level must be a finite number, got '0\.5'$"):
        X.RunSpec("adult", "dirichlet", "0.5", 4, 0, "fedavg").validate()
    with pytest.raises(ValueError, match=r"^n_clusters must be an integer in \[1, 6\], got 2\.5$"):
        C.kmeans_labels(FEATURES, 2.5, 0)
    with pytest.raises(ValueError, match=r"^parts\[0\] must be indices into labels, in 0\.\.59, got 100$"):
        P.label_counts(LABELS, [np.array([0, 100])])


def test_load_options_are_the_loaders_keywords():
    """The message lists what the loader accepts."""
    with pytest.raises(ValueError, match=r"seq_len, min_count, max_vocab\), got \['seqlen'\]$"):
        D.load("fine_foods", seqlen=50)
    assert list(inspect.signature(D.DATASETS["adult"].loader).parameters) == ["root"]
