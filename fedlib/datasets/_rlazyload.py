"""Read objects from an R lazy-load database (``Rdata.rdb`` + ``Rdata.rdx``).

R packages installed with ``LazyData`` keep their data sets in ``data/Rdata.rdb``.
The ``.rdx`` index is a (gzip) serialized R list whose ``variables`` element
maps each object name to ``(offset, length)`` in the ``.rdb``. Each chunk is a
4-byte big-endian uncompressed length, one type byte (``Z`` = raw LZMA2,
``2`` = bzip2, ``1`` = zlib, ``0`` = none; R 2.10+ "compress=3"; plain zlib
chunks of older files have no type byte) and the compressed serialized object,
which the pure-Python ``rdata`` package parses and converts.

`read_object` reads the two files by path; `parse_object` takes their bytes, so a
caller can parse exactly the bytes whose checksum it verified.
"""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import warnings
import zlib
from pathlib import Path

# R's xz settings for lazy-load chunks (LZMA2, preset 9e); decoding only needs a
# dictionary at least as large as the encoder's.
_LZMA2 = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]


def decompress_chunk(chunk: bytes) -> bytes:
    """Decompress one ``.rdb`` chunk (``length (4 bytes, big-endian) + type byte + payload``) to
    the serialized R object's bytes (``b"X\\n"`` first for XDR)."""
    if len(chunk) < 5:
        raise ValueError("R lazy-load chunk shorter than its 5-byte header")
    n = struct.unpack(">I", chunk[:4])[0]
    kind, payload = chunk[4:5], chunk[5:]
    if kind == b"Z":
        try:
            out = lzma.decompress(payload, format=lzma.FORMAT_RAW, filters=_LZMA2)
        except lzma.LZMAError:
            out = lzma.decompress(payload)  # xz / lzma-alone container
    elif kind == b"2":
        out = bz2.decompress(payload)
    elif kind == b"1":
        out = zlib.decompress(payload)
    elif kind == b"0":
        out = payload
    else:  # compress=TRUE (zlib) files carry no type byte
        out = zlib.decompress(chunk[4:])
    if len(out) != n:
        raise ValueError(f"R lazy-load chunk: expected {n} bytes, got {len(out)}")
    return out


def read_index(rdx: str | Path | bytes) -> dict[str, tuple[int, int]]:
    """Object name → ``(offset, length)`` from a ``.rdx`` index (a path, or its bytes)."""
    import rdata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = rdata.read_rds(io.BytesIO(rdx) if isinstance(rdx, bytes) else rdx)
    return {str(k): (int(v[0]), int(v[1])) for k, v in index["variables"].items()}


def parse_object(rdb: bytes, rdx: bytes, name: str, where: str = "the .rdb"):
    """One object ``name`` of an R lazy-load database given as bytes (``Rdata.rdb``/``.rdx``;
    ``where`` names it in errors), as ``rdata`` converts it (see `read_object`)."""
    import rdata

    index = read_index(rdx)
    if name not in index:
        raise KeyError(f"{name!r} not in {where} (has: {', '.join(sorted(index))})")
    offset, length = index[name]
    chunk = rdb[offset:offset + length]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
        return rdata.conversion.convert(rdata.parser.parse_data(decompress_chunk(chunk)))


def read_object(rdb: str | Path, name: str, rdx: str | Path | None = None):
    """Read object ``name`` (e.g. ``"training_data"``) of an R lazy-load database ``rdb`` (index
    ``rdx``, default the same name with ``.rdx``) as ``rdata`` converts it (a data frame becomes
    a ``pandas.DataFrame``)."""

    rdb = Path(rdb)
    rdx = Path(rdx) if rdx is not None else rdb.with_suffix(".rdx")
    return parse_object(rdb.read_bytes(), rdx.read_bytes(), name, where=str(rdb))
