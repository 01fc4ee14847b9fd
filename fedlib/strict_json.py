"""Records as strict JSON (RFC 8259): no NaN, Infinity or -Infinity tokens.

Python's ``json`` writes ``NaN``/``Infinity`` by default, which strict readers (browsers,
``jq``, most non-Python parsers) reject. A record is made strict by :func:`sanitise`: every
non-finite float becomes ``null`` and the record gets a field ``"nonfinite"``, a list of
``{"path", "value", "reason"}`` — the JSON path replaced (``$.local_accuracy[3]``), the
value it held (``"nan"``, ``"inf"`` or ``"-inf"``) and why such a value is there — so
:func:`restore` can put the floats back after reading.

Where non-finite values enter a record today (the reasons in :data:`REASONS`):

* ``local_accuracy[k]`` — NaN for a client with no test sample
  (:func:`fedlib.evaluation.local_accuracy`);
* ``ad_cl``, ``sdad_cl`` — NaN: a single run has no CL accuracy to compare with (the tables
  compute AD against CL from the CL run of the same setting);
* ``cp`` — +inf when some client has accuracy 0 and another does not ((A_max − A_min)/A_min);
* a diverged run's weights — never recorded: such a run fails with
  :class:`fedlib.engine.errors.DivergenceError` and its record has no metrics.

``mean_loss`` (NaN for a client with no training sample) is an engine output, not a record
field; a value of any other path is replaced with a generic reason.
"""
from __future__ import annotations

import copy
import json
import math
import re

import numpy as np

__all__ = ["sanitise", "restore", "restore_parsed", "dumps_strict", "loads_strict", "REASONS", "NONFINITE_KEY"]

NONFINITE_KEY = "nonfinite"

REASONS = {  # regular expression over the JSON path -> reason
    r"\$\.local_accuracy\[\d+\]": "local accuracy of a client with no test samples (n_test = 0)",
    r"\$\.(ad_cl|sdad_cl)": "not computed in a single run: no CL accuracy given (the tables compute AD "
                            "against CL from the CL run of the same setting and seed)",
    r"\$\.cp": "client parity (A_max - A_min) / A_min with A_min = 0 (a client with accuracy 0)",
    r".*mean_loss.*": "mean_loss of a client with no training samples",
    r"\$\.info\.norms\[\d+\]\.ratio": "CFL's max/mean update-norm ratio in a round whose weighted mean "
                                       "update is exactly zero",
}
_GENERIC = "non-finite value (no known cause recorded for this field)"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _reason(path: str) -> str:
    return next((why for pattern, why in REASONS.items() if re.fullmatch(pattern, path)), _GENERIC)


def _child(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = str(key)
    return f"{path}.{key}" if _KEY.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _text(x: float) -> str:
    return "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"


def sanitise(record: dict) -> dict:
    """A copy of ``record`` with every NaN/±inf float replaced by None and, if any was, the
    field ``"nonfinite"``: ``[{"path": "$.cp", "value": "inf", "reason": ...}, ...]`` (in
    document order). Dicts, lists and tuples are walked; other values are kept as they are.
    An existing ``"nonfinite"`` list is extended, not replaced.
    """
    found = []

    def walk(value, path):
        if isinstance(value, dict):
            return {k: walk(v, _child(path, k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, _child(path, i)) for i, v in enumerate(value)]
        if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
            found.append({"path": path, "value": _text(float(value)), "reason": _reason(path)})
            return None
        return value

    clean = walk(record, "$")
    if found:
        clean[NONFINITE_KEY] = list(clean.get(NONFINITE_KEY) or []) + found
    return clean


def dumps_strict(record: dict) -> str:
    """``json.dumps`` of :func:`sanitise` (record) with ``allow_nan=False``: strict JSON text.
    Raises ValueError for anything non-finite that sanitise could not reach."""
    return json.dumps(sanitise(record), allow_nan=False)


def _reject(constant: str):
    raise ValueError(f"JSON text must be strict (RFC 8259), got the non-standard constant {constant!r}")


def loads_strict(text: str):
    """``json.loads`` refusing ``NaN``, ``Infinity`` and ``-Infinity`` (ValueError)."""
    return json.loads(text, parse_constant=_reject)


_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def _steps(path: str) -> list:
    if not path.startswith("$"):
        raise ValueError(f"path must start with '$', got {path!r}")
    steps, pos = [], 1
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise ValueError(f"path must be a JSON path like $.a.b[3], got {path!r}")
        steps.append(m.group(1) if m.group(1) is not None else int(m.group(2)) if m.group(2) is not None
                     else json.loads(m.group(3)))
        pos = m.end()
    return steps


def restore(record: dict) -> dict:
    """Inverse of :func:`sanitise`: a copy with the listed paths set back to their floats and
    without the ``"nonfinite"`` field. A record without that field is returned as a copy."""
    return restore_parsed(copy.deepcopy(record))


def restore_parsed(out: dict) -> dict:
    """:func:`restore` without the copy, for a record just parsed that nothing else holds: ``out``
    itself, its listed paths set back to their floats and its ``"nonfinite"`` field removed (a deep
    copy of a record with per-client histories costs several times its parse)."""
    for entry in out.pop(NONFINITE_KEY, None) or []:
        steps = _steps(entry["path"])
        if not steps:
            continue
        parent = out
        for step in steps[:-1]:
            parent = parent[step]
        parent[steps[-1]] = float(entry["value"])
    return out
