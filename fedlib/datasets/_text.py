"""Text preprocessing shared by the text loaders: regex cleaning, a vocabulary
built from the training split only, and fixed-length id sequences."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from ..validation import check_int

PAD, OOV = "<pad>", "<oov>"
#: The authors' Sent140 sequence length.
SEQ_LEN = 25
#: Defaults of the vocabulary: tokens seen at least MIN_COUNT times in train,
#: at most MAX_VOCAB ids in all (padding and OOV included).
MIN_COUNT = 2
MAX_VOCAB = 20_000

_URL = re.compile(r"(https?://\S+|www\.\S+)")
_USER = re.compile(r"@\w+")
_HTML = re.compile(r"<[^>]*>")
_NON_LETTER = re.compile(r"[^a-z]+")


def check_options(seq_len, min_count, max_vocab) -> None:
    """The text loaders' options, checked before any file is read: ``seq_len`` ≥ 1,
    ``min_count`` ≥ 1, ``max_vocab`` ≥ 3 (padding, OOV and one token) or None."""
    check_int(seq_len, "seq_len", 1)
    check_int(min_count, "min_count", 1)
    check_int(max_vocab, "max_vocab", 3, optional=True)


def tokenize(text: str) -> list[str]:
    """Lower-case, drop URLs, @users and HTML tags, keep runs of letters a-z as tokens."""
    text = _HTML.sub(" ", _USER.sub(" ", _URL.sub(" ", str(text).lower())))
    return _NON_LETTER.sub(" ", text).split()


def build_vocab(docs: list[list[str]], min_count: int = MIN_COUNT,
                max_vocab: int | None = MAX_VOCAB) -> tuple[str, ...]:
    """Vocabulary ``("<pad>", "<oov>", token_2, ...)`` (id i is ``vocab[i]``) of tokenised
    training documents: tokens seen ≥ ``min_count`` times, most frequent first (ties
    alphabetical), at most ``max_vocab`` in all (``<pad>`` and ``<oov>`` included)."""

    counts = Counter(tok for doc in docs for tok in doc)
    kept = sorted((t for t, c in counts.items() if c >= min_count),
                  key=lambda t: (-counts[t], t))
    if max_vocab is not None:
        kept = kept[: max(0, max_vocab - 2)]
    return (PAD, OOV, *kept)


def encode(docs: list[list[str]], vocab: tuple[str, ...], seq_len: int = SEQ_LEN) -> np.ndarray:
    """Token ids, first ``seq_len`` tokens, right-padded with 0; unknown → 1.

    Returns
    -------
    np.ndarray int64 (N, seq_len)
    """
    index = {t: i for i, t in enumerate(vocab)}
    out = np.zeros((len(docs), seq_len), dtype=np.int64)
    for r, doc in enumerate(docs):
        ids = [index.get(t, 1) for t in doc[:seq_len]]
        out[r, : len(ids)] = ids
    return out


def encode_text(train_texts, test_texts, seq_len: int = SEQ_LEN, min_count: int = MIN_COUNT,
                max_vocab: int | None = MAX_VOCAB):
    """Tokenise, build the vocabulary from ``train_texts`` only, encode both.

    Returns
    -------
    x_train : np.ndarray int64 (N_train, seq_len)
    x_test : np.ndarray int64 (N_test, seq_len)
    vocab : tuple of str
    """
    tr = [tokenize(t) for t in train_texts]
    te = [tokenize(t) for t in test_texts]
    vocab = build_vocab(tr, min_count=min_count, max_vocab=max_vocab)
    return encode(tr, vocab, seq_len), encode(te, vocab, seq_len), vocab


def encode_nonempty(train_texts, test_texts, seq_len: int = SEQ_LEN,
                    min_count: int = MIN_COUNT, max_vocab: int | None = MAX_VOCAB):
    """Like `encode_text`, but documents with no token after cleaning are dropped.

    Returns
    -------
    x_train : np.ndarray int64 (N_train_kept, seq_len)
    x_test : np.ndarray int64 (N_test_kept, seq_len)
    vocab : tuple of str
    keep_train, keep_test : np.ndarray bool (N_train,), (N_test,)
        Which input documents were kept.
    """
    tr = [tokenize(t) for t in train_texts]
    te = [tokenize(t) for t in test_texts]
    keep_tr = np.array([len(d) > 0 for d in tr], dtype=bool)
    keep_te = np.array([len(d) > 0 for d in te], dtype=bool)
    tr = [d for d in tr if d]
    te = [d for d in te if d]
    vocab = build_vocab(tr, min_count=min_count, max_vocab=max_vocab)
    return encode(tr, vocab, seq_len), encode(te, vocab, seq_len), vocab, keep_tr, keep_te


def describe(seq_len: int, min_count: int, max_vocab: int | None) -> str:
    """One phrase for ``Dataset.source`` describing the text encoding."""
    return (f"regex-cleaned lower-case tokens (URLs, @users, HTML tags, non-letters removed), "
            f"vocabulary from train only (count>={min_count}, max {max_vocab} ids, "
            f"0=pad 1=oov), first {seq_len} tokens right-padded")
