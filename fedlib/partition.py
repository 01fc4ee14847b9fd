"""Partition protocols: split a labelled dataset among K clients.

Every protocol takes the label vector ``labels`` (shape (N,), ints 0..C-1), returns
one index array per client (a list of K disjoint int64 arrays into ``labels``) and
draws every random choice from ``numpy.random.default_rng(seed)``.

Protocols
---------
dirichlet            FedArtML / NIID-Bench variant used by the PSI papers (label skew by α)
dirichlet_client     FedPrism §4.2: each client draws its own class mix p_i ~ Dir(α·1), equal
                     client sizes (see :func:`dirichlet_client` for the rules the paper leaves open)
similarity           Similarity(S): S·N IID samples + (1−S)·N label-sorted samples
shards               FedAvg "pathological" shards (sort by label, deal shards)
classes_per_client   each client holds exactly n classes (CAFA, FL-bench ``-c``)
pathological_clusters pFedLIA: clusters own disjoint label sets
noisy_clusters       pFedLIA noisy variant: some clients get extra labels from outside
iid_fraction_classes CAFA Tables II–III: a share of IID clients, the others 2–4 classes
iid_fraction_classes_1_2
                     the same with non-IID clients of 1–2 classes (the authors' code's count;
                     disjoint clients, so trainable, unlike ``cafa_authors``)
cafa_authors         CAFA Tables II–III as the authors' code drew them: equal sizes, IID
                     clients, non-IID clients with 1–2 classes and Dirichlet(0.5) shares
                     (CBCC only: its clients may share samples, see its docstring)

Beyond label skew (issue 44; the PSI papers' future work: Clust-PSI-PFL §V, PSI-PFL §5). Every
one plants groups (:func:`planted_clusters`):
quantity_skew        size tiers (log-normal sizes), labels balanced (pooled mix per client)
small_clients        a share of clients with 5–20 samples, the rest regular; labels IID
attribute_skew       clients drawn by quantile bins of a real attribute (adult: age), labels
                     as they fall (``needs_features``: build_federation passes the inputs)
rotated_groups       identical label histograms, groups see inputs turned by 0/90/180/270°
brightness_groups    the same with brightness scaled, noise_groups with Gaussian noise
joint_label_rotation label groups (disjoint label sets) × rotation groups
The input transforms (:func:`transform_inputs`) are applied by
:func:`fedlib.experiment.build_federation`; the official test set stays untransformed.

Each protocol is one entry of :data:`PROTOCOLS` (:class:`Protocol`); adding a protocol is its
function and its entry here (plus tests).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .validation import check_choice, check_int, check_number, check_seed, fail

__all__ = [
    "InfeasiblePartitionError",
    "PROTOCOLS",
    "Protocol",
    "level_symbol",
    "level_axis",
    "level_log_scale",
    "partition_name",
    "partition_inputs",
    "dirichlet",
    "dirichlet_client", "dirichlet_client_mixes",
    "similarity",
    "shards",
    "classes_per_client",
    "pathological_clusters",
    "noisy_clusters",
    "iid_fraction_classes",
    "cafa_authors",
    "iid_fraction_classes_1_2",
    "quantity_skew",
    "small_clients",
    "attribute_skew",
    "attribute_bins",
    "ADULT_ATTRIBUTE",
    "covariate_groups",
    "joint_label_covariate",
    "transform_inputs",
    "transform_group_of_client",
    "tier_of_client",
    "TRANSFORMS",
    "BEYOND_LABEL_PROTOCOLS",
    "cluster_of_client",
    "planted_clusters",
    "CLUSTERED_PROTOCOLS",
    "partition",
    "train_test_split",
    "train_val_test_split",
    "label_counts",
]


class InfeasiblePartitionError(ValueError):
    """A partition that cannot be drawn under the protocol's constraints.

    The workbook shows such cells as "—" (as the paper does).
    """


# ----------------------------------------------------------------------------- validation
def _check_labels(labels) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class ids, got shape {y.shape}")
    if y.size == 0:
        raise ValueError("labels is empty: the dataset has no samples to partition")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise ValueError(
                f"labels must be integer class ids 0..C-1, got dtype {y.dtype}; "
                "encode them first (e.g. np.unique(labels, return_inverse=True)[1])"
            )
    if y.min() < 0:
        raise ValueError(f"labels must be non-negative class ids, found {int(y.min())}")
    return y.astype(np.int64, copy=False)


def _check_n_clients(n_clients, n_samples: int, minimum_per_client: int = 1) -> int:
    k = check_int(n_clients, "n_clients", 1)
    if k * minimum_per_client > n_samples:
        raise ValueError(
            f"n_clients={k} needs at least {k * minimum_per_client} samples "
            f"({minimum_per_client} per client) but the dataset has {n_samples}: "
            "use fewer clients or a larger dataset"
        )
    return k


_check_seed = check_seed


def _is_number(value) -> bool:
    """A real number (Python or numpy), not a bool and not a string."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _check_parts(parts, name: str = "parts") -> list[np.ndarray]:
    """A sequence of 1-D integer index arrays (one per client); returned as int64 arrays."""
    if isinstance(parts, (str, bytes, dict)) or not hasattr(parts, "__iter__") \
            or (isinstance(parts, np.ndarray) and parts.ndim == 0):
        fail(name, "a sequence of K 1-D integer index arrays (one per client)", parts)
    out = []
    for i, p in enumerate(parts):
        a = np.asarray(p)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            fail(f"{name}[{i}]", "a 1-D array of integer indices", p)
        out.append(a.astype(np.int64))
    return out


def _dataset_tag(name: str | None, n: int) -> str:
    return f"dataset {name!r} (N={n})" if name else f"a dataset of N={n} samples"


# ----------------------------------------------------------------------------- Dirichlet
def dirichlet(
    labels,
    n_clients: int,
    alpha: float,
    seed: int,
    *,
    min_samples: int = 10,
    max_draws: int = 20_000,
    dataset_name: str | None = None,
) -> list[np.ndarray]:
    """Dirichlet(α) label-skew partition, FedArtML / NIID-Bench variant.

    Per class, shares over the K clients ~ Dir(α·1_K); a client already holding ≥ N/K samples
    gets share 0 (balancing); the class's shuffled indices are cut at the renormalised shares.
    The draw is repeated until every client holds ≥ ``min_samples``. Unlike Flower's
    ``DirichletPartitioner`` (10 tries) up to ``max_draws`` draws are made, since the paper
    reports cells (FMNIST, K=100, α=0.05) that need thousands. ``dataset_name`` only names the
    data set in the InfeasiblePartitionError.

    labels (N,) ints → K disjoint int64 arrays covering all N samples.
    """
    y = _check_labels(labels)
    n = y.size
    if not (_is_number(alpha) and np.isfinite(alpha) and alpha > 0):
        fail("alpha", "a finite number > 0 (smaller = more non-IID)", alpha)
    check_int(min_samples, "min_samples", 0)
    k = _check_n_clients(n_clients, n, minimum_per_client=max(1, min_samples))
    seed = _check_seed(seed)
    check_int(max_draws, "max_draws", 1)
    if dataset_name is not None and not isinstance(dataset_name, str):
        fail("dataset_name", "a string or None", dataset_name)
    rng = np.random.default_rng(seed)
    classes, class_sizes = np.unique(y, return_counts=True)
    cap = n / k
    for _ in range(max_draws):
        counts = _dirichlet_counts(rng, class_sizes, k, alpha, cap)
        if counts.sum(axis=0).min() >= min_samples:
            break
    else:
        raise InfeasiblePartitionError(
            f"Dirichlet partition infeasible: no draw out of max_draws={max_draws} gave "
            f"every one of K={k} clients ≥ {min_samples} samples with alpha={alpha} on "
            f"{_dataset_tag(dataset_name, n)}. Raise alpha, use fewer clients, or raise "
            "max_draws (each draw costs microseconds)."
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c, row in zip(classes, counts):
        idx = rng.permutation(np.flatnonzero(y == c))
        for i, chunk in enumerate(np.split(idx, np.cumsum(row)[:-1])):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def _dirichlet_counts(rng, class_sizes, k: int, alpha: float, cap: float) -> np.ndarray:
    """One draw of the per-class client counts, shape (C, K) (FedArtML's balancing rule)."""
    held = np.zeros(k, dtype=np.int64)
    out = np.empty((class_sizes.size, k), dtype=np.int64)
    for j, size in enumerate(class_sizes):
        p = rng.dirichlet(np.full(k, alpha))
        p = np.where(held < cap, p, 0.0)
        total = p.sum()
        if total <= 0:  # every client is full (cannot happen while samples remain, kept safe)
            p, total = np.full(k, 1.0), float(k)
        cuts = (np.cumsum(p / total) * size).astype(np.int64)[:-1]
        out[j] = np.diff(np.concatenate(([0], cuts, [size])))
        held += out[j]
    return out


# ----------------------------------------------------------------------------- Dirichlet per client
def dirichlet_client(labels, n_clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """FedPrism's Dirichlet partition (§4.2): a class-proportion vector per *client*.

    Each client i draws p_i ~ Dir(α·1_C) and its training samples are allocated according to
    p_i (:func:`dirichlet` instead draws, per *class*, shares over the clients). The paper
    states only that; the rules it leaves open are, here:

    * **Sizes.** Every client gets n = ⌊N/K⌋ samples; the N − K·n left over are dropped
      (they are in no client).
    * **Allocation.** Round-robin, one sample per client per turn: in each turn every client
      that still needs samples draws a class from p_i (inverse CDF on one uniform), in a
      freshly shuffled client order, and takes the next sample of that class's shuffled pool,
      without replacement. While no class has run out this is a multinomial draw of n
      classes from p_i per client; the interleaving spreads the shortages below over all
      clients instead of the last ones drawn.
    * **A class that runs out** (the paper is silent): p_i is renormalised over the classes
      that still have samples, i.e. a client whose draw finds its class empty (or lost the
      class's last samples to clients earlier in the turn's order) draws again in the next
      turn from p_i restricted to the classes left. A client whose p_i puts all its mass on
      emptied classes (only at tiny α, where Dir draws underflow to exact zeros) draws
      uniformly from the classes left. Because K·n ≤ N, every client is filled.

    labels (N,) ints → K disjoint sorted int64 arrays, each of length ⌊N/K⌋.
    """
    parts, _, _ = _dirichlet_client_draw(labels, n_clients, alpha, seed)
    return parts


def dirichlet_client_mixes(labels, n_clients: int, alpha: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`dirichlet_client` drew and what each client received, for the same arguments.

    Returns ``(mix, counts)``: ``mix`` (K, C) the drawn class mixes p_i ~ Dir(α·1) (columns: the
    sorted distinct labels), ``counts`` (K, C) the samples of each class client i holds. Where
    classes run out, a client's realised mix counts_i / n differs from p_i by more than a multinomial
    draw of n from p_i would (the allocation rule in :func:`dirichlet_client`'s docstring).
    """
    _, mix, counts = _dirichlet_client_draw(labels, n_clients, alpha, seed)
    return mix, counts


def _dirichlet_client_draw(labels, n_clients: int, alpha: float, seed: int):
    """:func:`dirichlet_client`'s draw: (parts, mix (K, C), counts (K, C))."""
    y = _check_labels(labels)
    if not (_is_number(alpha) and np.isfinite(alpha) and alpha > 0):
        fail("alpha", "a finite number > 0 (smaller = more non-IID)", alpha)
    k = _check_n_clients(n_clients, y.size)
    rng = np.random.default_rng(_check_seed(seed))
    classes, cls_of = np.unique(y, return_inverse=True)
    n_cls = classes.size
    pools = [rng.permutation(np.flatnonzero(cls_of == c)) for c in range(n_cls)]
    remaining = np.array([p.size for p in pools], dtype=np.int64)
    mix = rng.dirichlet(np.full(n_cls, float(alpha)), size=k)  # (K, C): p_i
    counts = _dirichlet_client_counts(rng, mix, remaining, y.size // k)
    start = np.zeros(n_cls, dtype=np.int64)
    parts = []
    for i in range(k):  # client i takes the next counts[i, c] samples of each shuffled class pool
        chunks = [pools[c][start[c]:start[c] + counts[i, c]] for c in range(n_cls)]
        start += counts[i]
        parts.append(np.sort(np.concatenate(chunks)).astype(np.int64))
    return parts, mix, counts


def _dirichlet_client_counts(rng, mix: np.ndarray, remaining: np.ndarray, size: int) -> np.ndarray:
    """Round-robin class draws, shape (K, C): row i sums to ``size``, column c to at most
    ``remaining[c]`` (:func:`dirichlet_client`'s allocation rule)."""
    k, n_cls = mix.shape
    remaining = remaining.copy()
    counts = np.zeros((k, n_cls), dtype=np.int64)
    need = np.full(k, size, dtype=np.int64)
    while need.any():
        order = rng.permutation(np.flatnonzero(need > 0))
        left = remaining > 0
        w = mix[order] * left  # p_i renormalised over the classes that still have samples
        empty = w.sum(axis=1) <= 0
        w[empty] = left  # all of p_i's mass on emptied classes: uniform over the rest
        cdf = np.cumsum(w, axis=1)
        u = rng.random(order.size) * cdf[:, -1]
        drawn = np.argmax(cdf > u[:, None], axis=1)  # first class whose CDF passes u: one with mass
        # in turn order, the r-th request for class c is served while c has more than r samples left
        by_class = np.argsort(drawn, kind="stable")  # turn order kept within a class
        sorted_drawn = drawn[by_class]
        rank = np.empty(order.size, dtype=np.int64)
        rank[by_class] = np.arange(order.size) - np.searchsorted(sorted_drawn, sorted_drawn, side="left")
        served = rank < remaining[drawn]
        np.add.at(counts, (order[served], drawn[served]), 1)
        remaining -= np.bincount(drawn[served], minlength=n_cls)
        need[order[served]] -= 1
    return counts


# ----------------------------------------------------------------------------- Similarity
def similarity(labels, n_clients: int, s: float, seed: int) -> list[np.ndarray]:
    """Similarity(S) partition (the PSI papers' protocol).

    Shuffle the indices; the first round(S·N) form the IID pool, the rest are sorted
    by label (stable). Client i gets ``len(iid)//K`` consecutive IID indices plus
    ``len(niid)//K`` consecutive label-sorted indices; remainders are dropped, as in
    the authors' code. S=1 gives IID clients, S=0 label-sorted (pathological) clients.
    labels (N,) → K disjoint int64 arrays (up to 2(K-1) samples left unassigned).
    """
    y = _check_labels(labels)
    if not (_is_number(s) and 0.0 <= float(s) <= 1.0):
        fail("s", "a number in [0, 1] (1 = IID, 0 = label-sorted)", s)
    k = _check_n_clients(n_clients, y.size)
    rng = np.random.default_rng(_check_seed(seed))
    perm = rng.permutation(y.size)
    n_iid = int(round(float(s) * y.size))
    iid, rest = perm[:n_iid], perm[n_iid:]
    niid = rest[np.argsort(y[rest], kind="stable")]
    a, b = iid.size // k, niid.size // k
    return [
        np.sort(np.concatenate((iid[i * a:(i + 1) * a], niid[i * b:(i + 1) * b]))).astype(np.int64)
        for i in range(k)
    ]


# ----------------------------------------------------------------------------- pathological
def shards(labels, n_clients: int, shards_per_client: int, seed: int) -> list[np.ndarray]:
    """FedAvg's pathological partition: sort by label, cut into K·s equal shards, deal
    ``shards_per_client`` random shards to each client (remainder dropped); K int64 arrays."""
    y = _check_labels(labels)
    check_int(shards_per_client, "shards_per_client", 1)
    k = _check_n_clients(n_clients, y.size, minimum_per_client=int(shards_per_client))
    rng = np.random.default_rng(_check_seed(seed))
    order = rng.permutation(y.size)
    order = order[np.argsort(y[order], kind="stable")]
    n_shards = k * int(shards_per_client)
    size = y.size // n_shards
    shard_ids = rng.permutation(n_shards).reshape(k, int(shards_per_client))
    return [
        np.sort(np.concatenate([order[j * size:(j + 1) * size] for j in row])).astype(np.int64)
        for row in shard_ids
    ]


def _split_labels_among(y, holders: dict[int, list[int]], k: int, rng) -> list[np.ndarray]:
    """Split each label's shuffled indices evenly among the clients holding it."""
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c, clients in sorted(holders.items()):
        if not clients:
            continue
        idx = rng.permutation(np.flatnonzero(y == c))
        for client, chunk in zip(clients, np.array_split(idx, len(clients))):
            parts[client].append(chunk)
    return [
        np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64) for p in parts
    ]


def classes_per_client(labels, n_clients: int, n_classes_per_client: int, seed: int) -> list[np.ndarray]:
    """Each client holds exactly ``n_classes_per_client`` classes (CAFA: 2–4 of 10).

    Classes are assigned round-robin over a shuffled class order so that every class is
    used when K·n ≥ C; each class's samples are split evenly among its holders.
    """
    y = _check_labels(labels)
    n_classes = int(y.max()) + 1
    check_int(n_classes_per_client, "n_classes_per_client", 1, n_classes)
    k = _check_n_clients(n_clients, y.size, minimum_per_client=int(n_classes_per_client))
    rng = np.random.default_rng(_check_seed(seed))
    holders: dict[int, list[int]] = {c: [] for c in range(n_classes)}
    order = rng.permutation(n_classes)
    pos = 0
    for client in range(k):
        chosen: set[int] = set()
        while len(chosen) < n_classes_per_client:
            c = int(order[pos % n_classes])
            pos += 1
            if c not in chosen:
                chosen.add(c)
                holders[c].append(client)
    parts = _split_labels_among(y, holders, k, rng)
    _raise_if_empty(parts, "classes_per_client")
    return parts


def cluster_of_client(n_clients: int, n_clusters: int) -> np.ndarray:
    """True cluster (K,) int64 of each client in the pFedLIA protocols: client i → i mod n_clusters."""
    check_int(n_clients, "n_clients", 1)
    check_int(n_clusters, "n_clusters", 1)
    return np.arange(n_clients, dtype=np.int64) % n_clusters


def planted_clusters(protocol: str, n_clients: int, level, **kwargs) -> np.ndarray | None:
    """The true cluster (K,) of every client under ``protocol`` at ``level``, or None for the
    protocols that plant no clusters (a :data:`PROTOCOLS` entry's ``planted``). pFedLIA's pathological
    and noisy ones plant clusters, and so does every protocol beyond label skew (:data:`BEYOND_LABEL_PROTOCOLS`:
    size tiers, small vs regular clients, attribute groups, transform groups); ``kwargs`` are the
    protocol's own options where they change the groups (``n_tiers``, ``n_groups``,
    ``n_label_groups``; defaults as the protocol's)."""
    spec = PROTOCOLS.get(protocol) if isinstance(protocol, str) else None
    if spec is None or spec.planted is None:
        return None
    check_int(n_clients, "n_clients", 1)
    return spec.planted(int(n_clients), _check_level(level, protocol, spec.level_name), **kwargs)


def _cluster_label_sets(n_classes: int, n_clusters: int) -> list[np.ndarray]:
    check_int(n_clusters, "n_clusters", 1, n_classes)
    return np.array_split(np.arange(n_classes), n_clusters)


def pathological_clusters(labels, n_clients: int, seed: int, *, n_clusters: int = 5) -> list[np.ndarray]:
    """pFedLIA's pathological protocol: ``n_clusters`` clusters own disjoint label sets
    (10 labels, 5 clusters ⇒ 2 labels each); client i belongs to cluster i mod n_clusters
    (:func:`cluster_of_client`) and shares its cluster's labels with the cluster's other
    clients (each label's samples split evenly among them).
    """
    return noisy_clusters(labels, n_clients, seed, n_clusters=n_clusters, p_noise=0.0)


def noisy_clusters(
    labels,
    n_clients: int,
    seed: int,
    *,
    n_clusters: int = 5,
    p_noise: float = 0.5,
    n_noise_labels: int = 1,
) -> list[np.ndarray]:
    """pFedLIA's noisy protocol: the pathological clusters, and with probability
    ``p_noise`` a client also gets ``n_noise_labels`` random labels from outside its
    cluster (the paper: one label for 10-class sets, five for CIFAR-100).
    """
    y = _check_labels(labels)
    n_classes = int(y.max()) + 1
    label_sets = _cluster_label_sets(n_classes, n_clusters)
    check_number(p_noise, "p_noise", 0, 1)
    check_int(n_noise_labels, "n_noise_labels", 0)
    k = _check_n_clients(n_clients, y.size)
    if k < n_clusters:
        raise ValueError(f"n_clients={k} must be ≥ n_clusters={n_clusters} so every cluster has a client")
    rng = np.random.default_rng(_check_seed(seed))
    membership = cluster_of_client(k, n_clusters)
    holders: dict[int, list[int]] = {c: [] for c in range(n_classes)}
    for client, cl in enumerate(membership):
        own = label_sets[cl]
        for c in own:
            holders[int(c)].append(client)
        if p_noise > 0 and rng.random() < p_noise:
            outside = np.setdiff1d(np.arange(n_classes), own)
            m = min(int(n_noise_labels), outside.size)
            for c in rng.choice(outside, size=m, replace=False):
                holders[int(c)].append(client)
    parts = _split_labels_among(y, holders, k, rng)
    _raise_if_empty(parts, "pathological/noisy clusters")
    return parts


def iid_fraction_classes(labels, n_clients: int, iid_fraction: float, seed: int, *,
                         classes=(2, 4)) -> list[np.ndarray]:
    """CAFA's partition (Sec. IV-B, Tables II–III): a share of IID clients, the rest holding
    2–4 random classes (20–40 % of 10), with random client sizes.

    * Clients ``0 … n_IID−1`` are the IID ones, n_IID = ⌊iid_fraction·K + ½⌋ (CAFA's Tables
      II–III: 25 % / 50 % of K); their order carries no information for K-means, and it lets
      a caller recompute the truth (``np.arange(K) < n_IID``).
    * IID client i takes ⌊f_i·n_c⌋ samples of every class c (n_c: the class's size), with
      f_i = u_i / K, u_i ~ U(0.5, 1.5): its label histogram is the data set's (to rounding).
    * Non-IID client i draws c_i ~ U{classes[0] … classes[1]} distinct classes uniformly and a
      weight w_i ~ U(0.5, 1.5); what the IID clients leave of each class is split among its
      non-IID holders ∝ w_i (contiguous shares of the shuffled class; a class no non-IID
      client drew stays unused).

    labels (N,) → K disjoint sorted int64 arrays; InfeasiblePartitionError when a client gets none.
    """
    y = _check_labels(labels)
    n_classes = int(y.max()) + 1
    f = check_number(iid_fraction, "iid_fraction", 0, 1)
    if isinstance(classes, (str, bytes)) or not hasattr(classes, "__len__") or len(classes) != 2:
        fail("classes", "a pair (low, high) of classes per non-IID client", classes)
    low = check_int(classes[0], "classes[0]", 1, n_classes)
    high = check_int(classes[1], "classes[1]", low, n_classes)
    k = _check_n_clients(n_clients, y.size)
    rng = np.random.default_rng(_check_seed(seed))
    n_iid = int(np.floor(f * k + 0.5))
    share = rng.uniform(0.5, 1.5, size=k)
    chosen = [rng.choice(n_classes, size=int(rng.integers(low, high + 1)), replace=False)
              for _ in range(k - n_iid)]
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in range(n_classes):
        idx = rng.permutation(np.flatnonzero(y == c))
        take = np.floor(share[:n_iid] / k * idx.size).astype(np.int64)
        cuts = np.concatenate([[0], np.cumsum(take)])
        for i in range(n_iid):
            parts[i].append(idx[cuts[i]:cuts[i + 1]])
        rest = idx[cuts[-1]:]
        holders = [n_iid + j for j, cs in enumerate(chosen) if c in cs]
        if holders:
            w = share[holders]
            bounds = np.round(np.cumsum(w) / w.sum() * rest.size).astype(np.int64)
            for client, a, b in zip(holders, np.concatenate([[0], bounds[:-1]]), bounds):
                parts[client].append(rest[a:b])
    out = [np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64) for p in parts]
    _raise_if_empty(out, "iid_fraction_classes")
    return out


def iid_fraction_classes_1_2(labels, n_clients: int, iid_fraction: float, seed: int) -> list[np.ndarray]:
    """CAFA's IID share with non-IID clients of 1–2 classes, as a training partition:
    :func:`iid_fraction_classes` with ``classes=(1, 2)`` — the class count of the authors' code
    (:func:`cafa_authors`, whose clients may share samples and so cannot be trained on), the
    rest of the paper text's rule (IID clients ``0 … n_IID−1``, random sizes, disjoint clients).
    """
    return iid_fraction_classes(labels, n_clients, iid_fraction, seed, classes=(1, 2))


def cafa_authors(labels, n_iid: int, n_noniid: int, seed: int, *, max_classes: int = 2,
                 skew: float = 0.5) -> list[np.ndarray]:
    """CAFA Tables II–III's partition as the authors' code drew it (their ``cluster_vis.py``
    calls ``split_balanced_non_iid`` of their ``ultils.py``; the paper's text describes
    :func:`iid_fraction_classes` instead).

    * K = n_IID + n_non-IID clients of equal size s = ⌊N/K⌋; the last client also takes the
      remainder N − K·s (as the authors' code).
    * Clients ``0 … n_IID−1`` are IID: consecutive blocks of one random permutation of the N
      samples (random subsets, disjoint from each other).
    * Non-IID client i draws m_i ~ U{1 … max_classes} distinct classes uniformly from the
      classes present, shares p_i ~ Dirichlet(skew·1_m), counts ⌈p_i·s_i⌉ lowered one at a time
      at the largest until they sum to its size s_i, and that many samples of each class
      uniformly without replacement **from the whole class** — so a non-IID client may share
      samples with the IID clients and with other non-IID clients, as in the authors' code.
      The histograms (all CBCC sees) are those of the authors' generator; do not train on
      this partition (its clients are not disjoint).

    Departures from the authors' code: one ``numpy.random.default_rng(seed)`` stream instead
    of numpy's global state; classes drawn from those present in ``labels`` (theirs from
    0 … C−1, the same for CIFAR-10); a client size above the smallest class is refused up
    front (theirs fails inside ``np.random.choice``). ``max_classes``, ``skew``: the authors'
    ``max_classes_per_client`` and ``skewness``.

    labels (N,) → K sorted int64 arrays; the truth is ``np.arange(K) < n_iid``.
    """
    y = _check_labels(labels)
    present, sizes = np.unique(y, return_counts=True)
    n_iid = check_int(n_iid, "n_iid", 0)
    n_noniid = check_int(n_noniid, "n_noniid", 0)
    k = n_iid + n_noniid
    if k < 1:
        fail("n_iid + n_noniid", "≥ 1 (at least one client)", k)
    seed = _check_seed(seed)
    max_classes = check_int(max_classes, "max_classes", 1, present.size)
    skew = check_number(skew, "skew", 0, None, low_open=True)
    size = y.size // k
    if size < 1:
        fail("n_iid + n_noniid", f"≤ N = {y.size} (every client needs a sample)", k)
    last = size + y.size - k * size
    biggest = last if n_noniid else size  # the largest non-IID client, if any
    if n_noniid and biggest > sizes.min():
        fail("n_iid + n_noniid", f"large enough that a client's ⌊N/K⌋ (+ remainder) = {biggest} samples fit "
             f"in the smallest class ({int(sizes.min())} samples): a one-class non-IID client draws all "
             "its samples from one class; use more clients", k)
    rng = np.random.default_rng(seed)
    client_size = np.full(k, size, dtype=np.int64)
    client_size[-1] = last
    order = rng.permutation(y.size)
    starts = np.concatenate([[0], np.cumsum(client_size[:n_iid])])
    parts = [np.sort(order[starts[i]:starts[i + 1]]).astype(np.int64) for i in range(n_iid)]
    members = [np.flatnonzero(y == c) for c in present]
    for i in range(n_iid, k):
        m = int(rng.integers(1, max_classes + 1))
        chosen = rng.choice(present.size, size=m, replace=False)
        counts = np.ceil(rng.dirichlet(np.full(m, skew)) * client_size[i]).astype(np.int64)
        while counts.sum() > client_size[i]:
            counts[np.argmax(counts)] -= 1
        picks = [rng.choice(members[c], size=int(n), replace=False) for c, n in zip(chosen, counts)]
        parts.append(np.sort(np.concatenate(picks)).astype(np.int64))
    return parts


def _raise_if_empty(parts, protocol: str) -> None:
    empty = [i for i, p in enumerate(parts) if p.size == 0]
    if empty:
        raise InfeasiblePartitionError(
            f"{protocol}: clients {empty[:10]} received no samples; use fewer clients"
        )


# ----------------------------------------------------------------------------- beyond label skew (issue 44)
# Partitions whose clients differ in size, in a real attribute or in their inputs rather than (only)
# in labels. Every one plants groups: client i's group is a function of (i, K, level) alone
# (:func:`planted_clusters`), so the truth needs no record of the draw.
def _largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers ≥ 0 summing to ``total``, proportional to ``weights`` (Hamilton's rule), (K,)."""
    exact = weights / weights.sum() * total
    out = np.floor(exact).astype(np.int64)
    short = int(total - out.sum())
    if short:
        out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return out


def _stratified_split(y: np.ndarray, sizes: np.ndarray, rng) -> list[np.ndarray]:
    """Split samples among clients of (target) ``sizes`` (K,) so that every client's label mix is
    the pooled one up to rounding: each class c is cut among the clients ∝ sizes (largest
    remainder) from its shuffled indices. Client i gets Σ_c of its shares ≈ sizes[i]."""
    k = sizes.size
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        take = _largest_remainder(idx.size, sizes.astype(np.float64))
        for i, chunk in enumerate(np.split(idx, np.cumsum(take)[:-1])):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def _check_min_size(parts, protocol: str, minimum: int, fix: str) -> None:
    small = [i for i, p in enumerate(parts) if p.size < minimum]
    if small:
        raise InfeasiblePartitionError(
            f"{protocol}: clients {small[:10]} hold fewer than {minimum} samples "
            f"(smallest {min(p.size for p in parts)}); {fix}")


def quantity_skew(labels, n_clients: int, sigma: float, seed: int, *, n_tiers: int = 3,
                  tier_ratio: float = 4.0, min_samples: int = 2) -> list[np.ndarray]:
    """Quantity skew with balanced labels: clients differ in size only.

    * **Tiers (the planted groups).** Client i is in size tier g(i) = i mod ``n_tiers``
      (:func:`tier_of_client`); tier g's median size is ∝ ``tier_ratio``^(−g), so tier 0 holds
      the largest clients and each next tier clients ``tier_ratio`` times smaller.
    * **Sizes.** log n_i = −g(i)·ln(tier_ratio) + σ·z_i, z_i ~ N(0, 1) (log-normal within a
      tier), normalised so that the sizes sum to N (largest remainder: every sample is used).
      ``sigma`` (the level) is the within-tier spread: σ = 0 gives exact tiers, σ ≳ ln(tier_ratio)
      makes neighbouring tiers overlap.
    * **Labels.** Every client's label mix is the pooled one up to rounding (each class is cut
      among the clients ∝ their sizes, :func:`_stratified_split`): label PSI sees only the
      rounding noise of the small clients.

    labels (N,) → K disjoint sorted int64 arrays covering all N samples; a client below
    ``min_samples``: InfeasiblePartitionError.
    """
    y = _check_labels(labels)
    sigma = check_number(sigma, "sigma", 0)
    n_tiers = check_int(n_tiers, "n_tiers", 1)
    tier_ratio = check_number(tier_ratio, "tier_ratio", 1)
    min_samples = check_int(min_samples, "min_samples", 1)
    k = _check_n_clients(n_clients, y.size, minimum_per_client=min_samples)
    if k < n_tiers:
        fail("n_clients", f"≥ n_tiers = {n_tiers} (every size tier needs a client)", k)
    rng = np.random.default_rng(_check_seed(seed))
    tier = tier_of_client(k, n_tiers)
    log_size = -tier * np.log(tier_ratio) + sigma * rng.standard_normal(k)
    weights = np.exp(log_size - log_size.max())
    parts = _stratified_split(y, weights, rng)
    _check_min_size(parts, "quantity_skew", min_samples,
                    "lower sigma or tier_ratio, or use fewer clients")
    return parts


def tier_of_client(n_clients: int, n_groups: int) -> np.ndarray:
    """The planted group of client i in the issue-44 protocols: i mod ``n_groups``, (K,) int64
    (as :func:`cluster_of_client`)."""
    check_int(n_clients, "n_clients", 1)
    return cluster_of_client(n_clients, check_int(n_groups, "n_groups", 1))


ADULT_ATTRIBUTE = "age"
"""The adult attribute :func:`attribute_skew` draws clients by, by default (module docstring of
that function says why)."""


def attribute_bins(values, n_bins: int) -> np.ndarray:
    """Bin of every sample, (N,) int64 in 0..n_bins−1: the ``n_bins`` quantile bins of the pooled
    values (edges at the j/n_bins quantiles; a value equal to an edge goes to the lower bin).

    Raises the workbook's ValueError when ties leave fewer than ``n_bins`` non-empty bins (a
    binary one-hot column, say): use fewer bins or another attribute.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        fail("values", "a non-empty 1-D array of finite attribute values", values)
    n_bins = check_int(n_bins, "n_bins", 1)
    edges = np.quantile(v, np.arange(1, n_bins) / n_bins)
    bins = np.searchsorted(edges, v, side="left").astype(np.int64)
    found = np.unique(bins).size
    if found < n_bins:
        fail("n_bins", f"at most the {found} non-empty quantile bins the attribute's ties allow "
             "(or choose an attribute with more distinct values)", n_bins)
    return bins


def attribute_skew(labels, n_clients: int, purity: float, seed: int, *, features=None, feature_names=None,
                   attribute: str = ADULT_ATTRIBUTE, n_groups: int = 4) -> list[np.ndarray]:
    """Attribute skew on a real feature: clients drawn by the bins of one attribute, labels left
    as they fall.

    * **Bins.** The attribute's values (column ``attribute`` of ``features``, by name) are cut
      into ``n_groups`` quantile bins of the pooled values (:func:`attribute_bins`).
    * **Groups (planted).** Client i is in group g(i) = i mod ``n_groups``: its bin mix is
      m_i = purity·e_{g(i)} + (1 − purity)·π, π the pooled bin pmf. ``purity`` (the level) 0 gives
      clients whose attribute is distributed as the pool's (IID), 1 clients that hold only their
      own bin.
    * **Sizes.** Every client holds the same n = ⌊min_b |bin b| / Σ_i m_{i,b}⌋ samples (the most
      that every bin can serve), client i ⌊n·m_{i,b}⌋ of bin b (largest remainder to n), drawn
      uniformly without replacement from the bin; samples no client takes are dropped.
    * **Labels** are whatever the drawn people have: on adult, age bins carry income skew
      (older people earn > 50K more often), which is the realistic case — label PSI sees a
      shadow of the attribute skew, attribute PSI the skew itself.

    Why ``age`` on adult: it is a numeric attribute with 73 distinct values, so its quartile bins
    are nearly equal (education_num has 16 values and coarse ties; the categoricals are one-hot
    columns that quantile bins cannot split); it is a natural axis along which real data holders
    differ (an employer's, a pension fund's or a university's records), and it is not the label.

    labels (N,), features (N, F) with F ``feature_names`` → K disjoint sorted int64 arrays of
    equal size.
    """
    y = _check_labels(labels)
    purity = check_number(purity, "purity", 0, 1)
    n_groups = check_int(n_groups, "n_groups", 1)
    if features is None or feature_names is None:
        fail("features", "the data set's (N, F) inputs with their feature_names (a tabular data set: "
             "attribute_skew draws clients by a named column)", features)
    x = np.asarray(features)
    names = list(feature_names)
    if x.ndim != 2 or x.shape[0] != y.size or x.shape[1] != len(names):
        fail("features", f"an (N={y.size}, F={len(names)}) matrix matching labels and feature_names",
             getattr(x, "shape", x))
    if attribute not in names:
        fail("attribute", f"one of the feature names, e.g. {names[:5]}", attribute)
    k = _check_n_clients(n_clients, y.size)
    if k < n_groups:
        fail("n_clients", f"≥ n_groups = {n_groups} (every group needs a client)", k)
    rng = np.random.default_rng(_check_seed(seed))
    bins = attribute_bins(x[:, names.index(attribute)], n_groups)
    bin_size = np.bincount(bins, minlength=n_groups)
    pooled = bin_size / bin_size.sum()
    group = tier_of_client(k, n_groups)
    mix = purity * np.eye(n_groups)[group] + (1 - purity) * pooled  # (K, B)
    n = int(np.floor((bin_size / mix.sum(axis=0)).min()))
    if n < 1:
        raise InfeasiblePartitionError(f"attribute_skew: K={k} clients leave no sample per client; "
                                       "use fewer clients")
    counts = np.stack([_largest_remainder(n, m) for m in mix])  # (K, B), row sums n
    over = counts.sum(axis=0) > bin_size
    for b in np.flatnonzero(over):  # rounding up may overdraw a bin by < K: take from the largest
        while counts[:, b].sum() > bin_size[b]:
            counts[np.argmax(counts[:, b]), b] -= 1
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for b in range(n_groups):
        idx = rng.permutation(np.flatnonzero(bins == b))
        for i, chunk in enumerate(np.split(idx[:counts[:, b].sum()], np.cumsum(counts[:, b])[:-1])):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


TRANSFORMS = ("rot90", "brightness", "noise")
"""Input transforms of :func:`transform_inputs` (the rotated-MNIST family)."""


def _balanced_equal(y: np.ndarray, k: int, rng) -> list[np.ndarray]:
    """K clients with identical label histograms: ⌊n_c/K⌋ samples of every class c each (the
    remainders dropped)."""
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        m = idx.size // k
        for i in range(k):
            parts[i].append(idx[i * m:(i + 1) * m])
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def covariate_groups(labels, n_clients: int, n_groups: int, seed: int) -> list[np.ndarray]:
    """Covariate (input) skew with identical labels: the index part of the rotated-FMNIST family.

    Every client holds ⌊n_c/K⌋ samples of every class c (identical label histograms; the
    remainders dropped). Client i is in group g(i) = i mod ``n_groups`` (the level); the group
    decides its input transform, applied by :func:`transform_inputs` where the federation's data
    are built (:func:`fedlib.experiment.build_federation`): the protocols ``rotated_groups``
    (quarter turns), ``brightness_groups`` and ``noise_groups`` differ only in that transform.
    Label PSI cannot separate the groups (the label histograms are equal, before the per-client
    80/20 split); only the inputs differ. Returns K disjoint sorted int64 arrays of equal size.
    """
    y = _check_labels(labels)
    n_groups = check_int(n_groups, "n_groups", 1, 4)
    k = _check_n_clients(n_clients, y.size)
    if k < n_groups:
        fail("n_clients", f"≥ n_groups = {n_groups} (every group needs a client)", k)
    rng = np.random.default_rng(_check_seed(seed))
    parts = _balanced_equal(y, k, rng)
    _raise_if_empty(parts, "covariate_groups")
    return parts


def joint_label_covariate(labels, n_clients: int, n_groups: int, seed: int, *,
                          n_label_groups: int = 2) -> list[np.ndarray]:
    """Joint label–attribute skew: ``n_label_groups`` disjoint label sets × ``n_groups`` input
    transforms.

    Client i has label group a(i) = i mod L (L = ``n_label_groups``; the classes cut into L
    contiguous sets, :func:`_cluster_label_sets`) and transform group r(i) = (i // L) mod R
    (R = ``n_groups``, the level); its planted group is a(i) + L·r(i), L·R groups in all
    (:func:`planted_clusters`). Each class's samples are split evenly among the clients of its
    label group. Label PSI sees the L label groups only (half the structure when L = R = 2);
    the transform (:func:`transform_inputs`, by r(i)) is applied in
    :func:`fedlib.experiment.build_federation`. Returns K disjoint sorted int64 arrays.
    """
    y = _check_labels(labels)
    n_classes = int(y.max()) + 1
    n_groups = check_int(n_groups, "n_groups", 1, 4)
    n_label_groups = check_int(n_label_groups, "n_label_groups", 1, n_classes)
    k = _check_n_clients(n_clients, y.size)
    if k < n_groups * n_label_groups:
        fail("n_clients", f"≥ n_groups·n_label_groups = {n_groups * n_label_groups} (every planted "
             "group needs a client)", k)
    rng = np.random.default_rng(_check_seed(seed))
    label_group = np.arange(k) % n_label_groups
    holders = {int(c): [] for c in range(n_classes)}
    for a, cls in enumerate(_cluster_label_sets(n_classes, n_label_groups)):
        for c in cls:
            holders[int(c)] = np.flatnonzero(label_group == a).tolist()
    parts = _split_labels_among(y, holders, k, rng)
    _raise_if_empty(parts, "joint_label_covariate")
    return parts


def transform_group_of_client(protocol: str, n_clients: int, level, **kwargs) -> np.ndarray | None:
    """Transform group (K,) of every client under a protocol with an input transform, else None:
    i mod n_groups for the covariate protocols, (i // n_label_groups) mod n_groups for the joint one."""
    spec = PROTOCOLS.get(protocol) if isinstance(protocol, str) else None
    if spec is None or spec.transform is None:
        return None
    n_groups = _check_level(level, protocol, spec.level_name)
    check_int(n_clients, "n_clients", 1)
    return (spec.transform_group or _transform_by_tier)(int(n_clients), n_groups, **kwargs)


def _transform_by_tier(k: int, n_groups: int, **kwargs) -> np.ndarray:
    """Client i's transform group: i mod n_groups (the covariate protocols)."""
    return tier_of_client(k, n_groups)


def _transform_joint(k: int, n_groups: int, **kwargs) -> np.ndarray:
    """Client i's transform group under joint_label_rotation: (i // n_label_groups) mod n_groups."""
    n_label = check_int(kwargs.get("n_label_groups", 2), "n_label_groups", 1)
    return (np.arange(k, dtype=np.int64) // n_label) % n_groups


BRIGHTNESS_STEP = 0.25
"""``brightness``: group g's inputs are scaled by 1 − BRIGHTNESS_STEP·g (1, 0.75, 0.5, 0.25)."""
NOISE_STEP = 0.1
"""``noise``: group g's inputs get N(0, (NOISE_STEP·g)²) noise per pixel, clipped to [0, 1]."""


def transform_inputs(x, parts, group_of_client, kind: str, seed: int = 0) -> np.ndarray:
    """Every client's inputs under its group's transform (covariate skew), a new array.

    x (N, C, H, W) floats in [0, 1]; parts: K disjoint index arrays (samples in no client are
    unchanged); group_of_client (K,) ints in 0..3. ``kind``: 'rot90' — g quarter turns
    counter-clockwise in the (H, W) plane (``np.rot90``, H = W); 'brightness' — scaled by
    1 − 0.25·g; 'noise' — plus N(0, (0.1·g)²) noise clipped to [0, 1], drawn per client from
    ``default_rng([seed, i])``. Group 0 is unchanged. Returns float32 (N, C, H, W).
    """
    check_choice(kind, "kind", TRANSFORMS)
    seed = _check_seed(seed)
    a = np.asarray(x)
    if a.ndim != 4 or not np.issubdtype(a.dtype, np.floating):
        fail("x", "a float (N, C, H, W) image array (covariate transforms act on images)", getattr(a, "shape", a))
    if kind == "rot90" and a.shape[2] != a.shape[3]:
        fail("kind", f"not 'rot90' for non-square images {a.shape[2]}×{a.shape[3]}", kind)
    parts = _check_parts(parts)
    g = np.asarray(group_of_client)
    if g.shape != (len(parts),) or g.dtype.kind not in "iu" or (g.size and (g.min() < 0 or g.max() > 3)):
        fail("group_of_client", f"an int array of {len(parts)} groups in 0..3 (one per client)", group_of_client)
    out = a.astype(np.float32, copy=True)
    for i, (idx, grp) in enumerate(zip(parts, g)):
        grp = int(grp)
        if grp == 0 or idx.size == 0:
            continue
        if kind == "rot90":
            out[idx] = np.rot90(a[idx], k=grp, axes=(2, 3))
        elif kind == "brightness":
            out[idx] = a[idx] * (1.0 - BRIGHTNESS_STEP * grp)
        else:
            noise = np.random.default_rng([seed, i]).normal(0.0, NOISE_STEP * grp, size=a[idx].shape)
            out[idx] = np.clip(a[idx] + noise, 0.0, 1.0)
    return out


def small_clients(labels, n_clients: int, small_share: float, seed: int, *, small_size=(5, 20)) -> list[np.ndarray]:
    """Very small clients: a share of the clients holds 5–20 samples, the others the rest.

    Clients ``0 … n_small−1`` are the small ones, n_small = ⌊small_share·K + ½⌋ (the planted
    groups: 1 = small, 0 = regular, :func:`planted_clusters`); small client i draws its size
    uniformly from ``small_size`` = (low, high) inclusive; the regular clients share the remaining
    samples equally (remainder dropped). Every client's samples are a uniform random draw without
    replacement (labels IID, with the sampling noise a 5-sample client has).
    labels (N,) → K disjoint sorted int64 arrays.
    """
    y = _check_labels(labels)
    share = check_number(small_share, "small_share", 0, 1, high_open=True)
    if isinstance(small_size, (str, bytes)) or not hasattr(small_size, "__len__") or len(small_size) != 2:
        fail("small_size", "a pair (low, high) of sample counts", small_size)
    low = check_int(small_size[0], "small_size[0]", 1)
    high = check_int(small_size[1], "small_size[1]", low)
    k = _check_n_clients(n_clients, y.size)
    n_small = int(np.floor(share * k + 0.5))
    if n_small >= k:
        fail("small_share", f"a share leaving at least one regular client of K={k} (rounds to {n_small} small)",
             small_share)
    rng = np.random.default_rng(_check_seed(seed))
    sizes = rng.integers(low, high + 1, size=n_small)
    rest = y.size - int(sizes.sum())
    regular = rest // (k - n_small) if rest > 0 else 0
    if regular < high:
        raise InfeasiblePartitionError(
            f"small_clients: the {k - n_small} regular clients would hold {regular} samples each, not more "
            f"than a small one ({high}); use fewer clients or a larger dataset")
    order = rng.permutation(y.size)
    cuts = np.cumsum(np.concatenate([sizes, np.full(k - n_small, regular)]))
    return [np.sort(order[a:b]).astype(np.int64) for a, b in zip(np.concatenate([[0], cuts[:-1]]), cuts)]


# ----------------------------------------------------------------------------- dispatch
@dataclass(frozen=True)
class Protocol:
    """One registered partition protocol: everything the workbook knows about it, in one entry of
    :data:`PROTOCOLS` (validation, :func:`fedlib.experiment.build_federation`, the tables', plots'
    and report's names read it; adding a protocol is adding an entry).

    ``func``: the function; ``level_name``: the name of its one parameter (the spec's level).
    ``low``/``high`` (``low_open``/``high_open``): the level's range (None: unbounded), checked by
    :meth:`check_level` before any data is loaded; ``integer``: the level is a count (3.0 is 3).
    ``level_keyword``: the level is passed as this keyword (``func(labels, K, seed, n_clusters=level)``)
    instead of positionally (``func(labels, K, level, seed)``).
    ``inputs``: what the function takes besides the labels, by name: ``dataset_name`` (Dirichlet's
    feasibility message), ``features`` and ``feature_names`` (the training inputs (N, F) and their
    column names); build_federation passes exactly these.
    ``symbol``: the level's display symbol (tables ``α=0.3``, plots' axes; None: the protocol's
    name, or "level"); ``axis``: the plots' x-axis label (None: "level"); ``log_scale``: plots
    draw the level on a log axis.
    ``transform``: the input transform of :func:`transform_inputs` applied to every client by its
    :func:`transform_group_of_client` (None: inputs unchanged), whose group of each client is
    ``transform_group(n_clients, n_groups, **kwargs)`` → (K,) (None: i mod n_groups). ``planted``:
    ``planted(n_clients, level, **kwargs)`` → the (K,) planted group of every client (None: the
    protocol plants none; :func:`planted_clusters`).
    """

    func: object
    level_name: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    level_keyword: str | None = None
    inputs: tuple = ()
    symbol: str | None = None
    axis: str | None = None
    log_scale: bool = False
    transform: str | None = None
    transform_group: object = None
    planted: object = None

    @property
    def plants_groups(self) -> bool:
        """Whether the protocol plants groups (:func:`planted_clusters` gives them)."""
        return self.planted is not None

    @property
    def needs_features(self) -> bool:
        """Whether the function also takes the training inputs (``features=``, ``feature_names=``)."""
        return "features" in self.inputs

    def check_level(self, level, protocol: str):
        """``level`` as the function takes it (an int for a count), or ValueError naming the
        protocol, its level's name and range: ``level must be a number > 0 for the dirichlet
        protocol (its alpha), got 0.0``."""
        from .validation import _range_text

        rng = _range_text(self.low, self.high, self.low_open, self.high_open)
        what = f"{'a whole number' if self.integer else 'a number'}{' ' + rng if rng else ''}"
        if not _is_number(level) or not np.isfinite(float(level)):
            fail("level", f"{what} for the {protocol} protocol (its {self.level_name})", level)
        v = float(level)
        ok = ((not self.integer or v.is_integer())
              and (self.low is None or (v > self.low if self.low_open else v >= self.low))
              and (self.high is None or (v < self.high if self.high_open else v <= self.high)))
        if not ok:
            fail("level", f"{what} for the {protocol} protocol (its {self.level_name})", level)
        return int(v) if self.integer else level


def _planted_mod(kwarg: str, default: int, level_name: str, high=None):
    """i mod the protocol's group count (a keyword option); the level's range checked on the way
    (RunSpec.validate calls this before any data is loaded)."""
    def planted(k, level, **kw):
        check_number(level, level_name, 0, high)
        return tier_of_client(k, check_int(kw.get(kwarg, default), kwarg, 1))
    return planted


def _planted_clusters(k, level, **kw):
    return cluster_of_client(k, level)


def _planted_groups(k, level, **kw):
    return tier_of_client(k, check_int(level, "n_groups", 1, 4))


def _planted_small(k, level, **kw):
    share = check_number(level, "small_share", 0, 1, high_open=True)
    return (np.arange(k) < int(np.floor(share * k + 0.5))).astype(np.int64)


def _planted_joint(k, level, **kw):
    check_int(level, "n_groups", 1, 4)
    n_label = check_int(kw.get("n_label_groups", 2), "n_label_groups", 1)
    return np.arange(k, dtype=np.int64) % n_label + n_label * ((np.arange(k, dtype=np.int64) // n_label) % int(level))


_COUNT = dict(low=1, integer=True)  # a level that is a count ≥ 1
_SHARE = dict(low=0, high=1)  # a level in [0, 1]

PROTOCOLS = {
    "dirichlet": Protocol(dirichlet, "alpha", low=0, low_open=True, inputs=("dataset_name",), symbol="α",
                          axis="Dirichlet α (log scale)", log_scale=True),
    "dirichlet_client": Protocol(dirichlet_client, "alpha", low=0, low_open=True),
    "similarity": Protocol(similarity, "s", **_SHARE, symbol="S", axis="Similarity S"),
    "shards": Protocol(shards, "shards_per_client", **_COUNT),
    "classes_per_client": Protocol(classes_per_client, "n_classes_per_client", **_COUNT),
    "pathological_clusters": Protocol(pathological_clusters, "n_clusters", **_COUNT, level_keyword="n_clusters",
                                      planted=_planted_clusters),
    "noisy_clusters": Protocol(noisy_clusters, "n_clusters", **_COUNT, level_keyword="n_clusters",
                               planted=_planted_clusters),
    "iid_fraction_classes": Protocol(iid_fraction_classes, "iid_fraction", **_SHARE),
    "iid_fraction_classes_1_2": Protocol(iid_fraction_classes_1_2, "iid_fraction", **_SHARE),
    # beyond label skew (issue 44; every one plants groups)
    "quantity_skew": Protocol(quantity_skew, "sigma", low=0, planted=_planted_mod("n_tiers", 3, "sigma")),
    "small_clients": Protocol(small_clients, "small_share", low=0, high=1, high_open=True, planted=_planted_small),
    "attribute_skew": Protocol(attribute_skew, "purity", **_SHARE, inputs=("features", "feature_names"),
                               planted=_planted_mod("n_groups", 4, "purity", 1)),
    "rotated_groups": Protocol(covariate_groups, "n_groups", **_COUNT, high=4, transform="rot90",
                               planted=_planted_groups),
    "brightness_groups": Protocol(covariate_groups, "n_groups", **_COUNT, high=4, transform="brightness",
                                  planted=_planted_groups),
    "noise_groups": Protocol(covariate_groups, "n_groups", **_COUNT, high=4, transform="noise",
                             planted=_planted_groups),
    "joint_label_rotation": Protocol(joint_label_covariate, "n_groups", **_COUNT, high=4, transform="rot90",
                                     transform_group=_transform_joint, planted=_planted_joint),
}
"""Protocol name → :class:`Protocol`. The level of each: dirichlet/dirichlet_client α;
similarity S; shards shards per client; classes_per_client classes per client; the clustered
protocols their number of clusters; iid_fraction_classes(_1_2) the IID share; quantity_skew σ,
the log-normal spread of sizes within a size tier; small_clients the share of 5–20-sample
clients; attribute_skew the purity of a client's attribute bin; rotated/brightness/noise_groups
and joint_label_rotation the number of transform groups (1–4)."""

def _entry(protocol):
    return PROTOCOLS.get(protocol) if isinstance(protocol, str) else None


def level_symbol(protocol: str, default=None):
    """The display symbol of ``protocol``'s level (``'α'``, ``'S'``), else ``default``."""
    entry = _entry(protocol)
    return entry.symbol if entry is not None and entry.symbol is not None else default


def level_axis(protocol: str, default: str = "level") -> str:
    """The plots' x-axis label of ``protocol``'s level, or ``default`` where its entry declares none."""
    entry = _entry(protocol)
    return entry.axis if entry is not None and entry.axis is not None else default


def level_log_scale(protocol: str) -> bool:
    """Whether plots draw ``protocol``'s level on a log axis (its entry's ``log_scale``)."""
    entry = _entry(protocol)
    return entry is not None and entry.log_scale


def _steps(n, fmt) -> str:
    return "/".join(fmt(g) for g in range(int(n)))


_NAMES = {
    "dirichlet": lambda v: f"Dirichlet α = {v:g}",
    "dirichlet_client": lambda v: f"per-client Dir({v:g})",
    "similarity": lambda v: f"Similarity S = {v:g}",
    "shards": lambda v: f"{v:g} shards per client",
    "classes_per_client": lambda v: f"{v:g} classes per client",
    "pathological_clusters": lambda v: f"pathological, {v:g} clusters",
    "noisy_clusters": lambda v: f"noisy, {v:g} clusters",
    "iid_fraction_classes": lambda v: f"{100 * v:g} % IID, others 2–4 classes",
    "iid_fraction_classes_1_2": lambda v: f"{100 * v:g} % IID, others 1–2 classes",
    "quantity_skew": lambda v: f"quantity skew, 3 size tiers (σ = {v:g})",
    "small_clients": lambda v: f"{100 * v:g} % small clients (5–20 samples)",
    "attribute_skew": lambda v: f"{ADULT_ATTRIBUTE} bins (purity {v:g})",
    "rotated_groups": lambda v: f"rotated {_steps(v, lambda g: str(90 * g))}°",
    "brightness_groups": lambda v: "brightness ×" + _steps(v, lambda g: f"{1 - BRIGHTNESS_STEP * g:g}".lstrip("0")),
    "noise_groups": lambda v: "Gaussian noise s.d. " + _steps(v, lambda g: f"{NOISE_STEP * g:g}".lstrip("0") or "0"),
    "joint_label_rotation": lambda v: f"2 label groups × {v:g} rotations",
}


def partition_name(protocol: str, level) -> str:
    """The one display name of a partition (``protocol`` at ``level``) that tables, figures and
    the grid command's lines show: ``partition_name("dirichlet_client", 0.1)`` ->
    ``"per-client Dir(0.1)"``, ``("iid_fraction_classes_1_2", 0.25)`` -> ``"25 % IID, others 1–2
    classes"``, ``("dirichlet", 0.3)`` -> ``"Dirichlet α = 0.3"``. Every protocol of
    :data:`PROTOCOLS` has one; ValueError naming the parameter for another protocol or a
    non-numeric level."""
    check_choice(protocol, "protocol", tuple(PROTOCOLS))
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)):
        fail("level", "a number (the protocol's level: α, S, a count or a share)", level)
    return _NAMES[protocol](float(level))


def partition_inputs(protocol: str, **available) -> dict:
    """The keyword inputs of :func:`partition` that ``protocol``'s entry takes, among those
    ``available`` and not None (``{}`` for none or no entry)."""
    entry = _entry(protocol)
    return {} if entry is None else {n: available[n] for n in entry.inputs if available.get(n) is not None}


CLUSTERED_PROTOCOLS = tuple(p for p, e in PROTOCOLS.items() if e.level_keyword == "n_clusters")
"""pFedLIA's protocols: clusters own label sets, the level is their number."""

BEYOND_LABEL_PROTOCOLS = ("quantity_skew", "small_clients", "attribute_skew", "rotated_groups",
                          "brightness_groups", "noise_groups", "joint_label_rotation")
"""The protocols beyond label skew: size, attribute and input-transform groups (every one
plants its groups, :func:`planted_clusters`)."""


def partition(labels, protocol: str, n_clients: int, level, seed: int, **kwargs) -> list[np.ndarray]:
    """Dispatch by protocol name; ``level`` is the protocol's one parameter
    (α, S, shards per client, classes per client, number of clusters, …: :data:`PROTOCOLS`).
    A protocol that ``needs_features`` takes ``features=`` and ``feature_names=`` in ``kwargs``."""
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {sorted(PROTOCOLS)}")
    spec = PROTOCOLS[protocol]
    level = _check_level(level, protocol, spec.level_name)
    if spec.level_keyword is not None:
        return spec.func(labels, n_clients, seed, **{spec.level_keyword: level}, **kwargs)
    return spec.func(labels, n_clients, level, seed, **kwargs)


def _check_level(level, protocol: str, level_name: str):
    """``level`` must be a number (never a string: YAML gives '0.5' and 0.5 alike); for the
    protocols whose parameter is a count (an entry's ``integer``), an integral float (2.0, as
    RunSpec stores levels) becomes an int. The protocol itself checks the range
    (:meth:`Protocol.check_level` checks it before any data)."""
    if not _is_number(level):
        fail("level", f"a number (the {protocol} protocol's {level_name})", level)
    if PROTOCOLS[protocol].integer:
        if not float(level).is_integer():
            fail("level", f"a whole number (the {protocol} protocol's {level_name})", level)
        return int(level)
    return level


# ----------------------------------------------------------------------------- helpers
def train_test_split(parts, seed: int, test_fraction: float = 0.2) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Seeded per-client train/test split (the papers' 80/20 local split).

    Each client's indices are shuffled with a generator seeded by (seed, client) and the
    first ``round(test_fraction · n_i)`` go to test (at least one when n_i ≥ 2, and at
    least one sample always stays in train). Returns (train_parts, test_parts), K sorted
    int64 arrays each.
    """
    _check_fraction(test_fraction, "test_fraction")
    seed = _check_seed(seed)
    parts = _check_parts(parts)
    train, test = [], []
    for i, idx in enumerate(parts):
        rng = np.random.default_rng([seed, i])
        shuffled = rng.permutation(idx)
        n_test = int(round(test_fraction * idx.size))
        if test_fraction > 0 and idx.size >= 2:
            n_test = min(max(n_test, 1), idx.size - 1)
        test.append(np.sort(shuffled[:n_test]))
        train.append(np.sort(shuffled[n_test:]))
    return train, test


def _check_fraction(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def train_val_test_split(parts, seed: int, test_fraction: float = 0.2,
                         val_fraction: float = 0.0) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Seeded per-client train/validation/test split.

    Convention
    ----------
    * Both fractions are shares of the client's *whole* data n_i (not of what is left).
    * The test part is exactly that of :func:`train_test_split` with the same ``seed`` and
      ``test_fraction``, whatever ``val_fraction`` is, so test numbers stay comparable
      between runs with and without a validation set. With ``val_fraction=0`` the train
      part is exactly that of :func:`train_test_split` too, and every validation part is
      empty.
    * The validation part is carved out of the train part: client i's indices are
      shuffled by a generator seeded by (seed, i) (the very permutation
      :func:`train_test_split` uses); the first ``n_test`` go to test, the next
      ``round(val_fraction · n_i)`` to validation (at least one when ``val_fraction > 0``
      and at least two samples are left after the test split), and at least one sample
      always stays in train.

    Returns (train_parts, val_parts, test_parts): K sorted int64 arrays each, disjoint per
    client, whose union is the client's indices.
    """
    test_fraction = _check_fraction(test_fraction, "test_fraction")
    val_fraction = _check_fraction(val_fraction, "val_fraction")
    if test_fraction + val_fraction >= 1.0:
        raise ValueError(f"test_fraction + val_fraction must be < 1 (some data must stay for training), "
                         f"got {test_fraction!r} + {val_fraction!r} = {test_fraction + val_fraction!r}")
    train, test = train_test_split(parts, seed, test_fraction)
    if val_fraction == 0.0:
        return train, [np.zeros(0, dtype=np.int64) for _ in train], test
    seed = _check_seed(seed)
    train, val = [], []
    for i, idx in enumerate(parts):
        idx = np.asarray(idx, dtype=np.int64)
        shuffled = np.random.default_rng([seed, i]).permutation(idx)
        n_test = len(test[i])
        rest = shuffled[n_test:]
        n_val = int(round(val_fraction * idx.size))
        if rest.size >= 2:
            n_val = min(max(n_val, 1), rest.size - 1)
        else:
            n_val = 0
        val.append(np.sort(rest[:n_val]))
        train.append(np.sort(rest[n_val:]))
    return train, val, test


def label_counts(labels, parts, n_classes: int | None = None) -> np.ndarray:
    """Per-client label counts, int64 (K, C), of labels (N,) and K index arrays ``parts``;
    C = ``n_classes``, default max(labels)+1."""

    y = _check_labels(labels)
    check_int(n_classes, "n_classes", 1, optional=True)
    c = int(y.max()) + 1 if n_classes is None else int(n_classes)
    if c <= int(y.max()):
        raise ValueError(f"n_classes={c} is smaller than the largest label + 1 ({int(y.max()) + 1})")
    parts = _check_parts(parts)
    if not parts:
        fail("parts", "a non-empty sequence of K index arrays (one per client)", parts)
    for i, p in enumerate(parts):
        if p.size and (p.min() < 0 or p.max() >= y.size):
            bad = int(p.min()) if p.min() < 0 else int(p.max())
            fail(f"parts[{i}]", f"indices into labels, in 0..{y.size - 1}", bad)
    return np.stack([np.bincount(y[p], minlength=c) for p in parts]).astype(np.int64)
