"""What a run's value is before it is measured: a tensor, a sequence, a map, a sequence of
maps (:func:`as_value`, :func:`value_dtype`, :func:`is_structured`, :func:`numeric_pair`).
Importable from :mod:`onnx_lab.numerics.metrics`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def is_structured(value: Any) -> bool:
    """True for what onnxruntime returns for a sequence (a list) or a map (a dict)."""
    return isinstance(value, (list, tuple, dict))


def as_value(value: Any) -> Any:
    """A run's value ready to measure: sequences (lists) and maps (dicts) as they are (numpy
    would make an object array of them, or fail on elements of different shapes), anything
    else as an array (None, an empty optional, stays None)."""
    if value is None or is_structured(value):
        return value
    return np.asarray(value)


def value_dtype(value: Any) -> str:
    """The dtype name that picks a value's rule: an array's, a sequence's first element's, a
    map's first value's; the Python floats of an onnxruntime map (ZipMap, CastMap make
    float32 values) count as float32, its ints as int64, text as ``string``."""
    if isinstance(value, dict):
        return value_dtype(next(iter(value.values()))) if value else "float32"
    if isinstance(value, (list, tuple)):
        return value_dtype(value[0]) if len(value) else "float32"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float32"
    if value is None:
        return "float32"
    a = np.asarray(value)
    if a.dtype == np.bool_:
        return "bool"
    return "string" if a.dtype.kind in "OSU" else str(a.dtype)


def _maps_of(value: Any) -> list[dict] | None:
    """``value`` as a list of maps when it is a map or a sequence of maps, else None."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) for m in value):
        return list(value)
    return None


def _maps_as_rows(value: Any, order: Sequence | None = None) -> np.ndarray:
    """A sequence of maps as the tensor it was zipped from: row i holds map i's values in
    ``order`` (the ZipMap's class labels: the tensor's columns follow them), else in key
    order (onnxruntime returns a map's keys sorted; skl2onnx's labels ascend). A lone map
    becomes a 1-D array."""
    maps = _maps_of(value) or []
    rows = [[m[k] for k in (order if order is not None and len(order) == len(m)
                            and set(order) == set(m)
                            else sorted(m, key=lambda k: (isinstance(k, str), k)))]
            for m in maps]
    arr = np.asarray(rows)
    return arr[0] if isinstance(value, dict) else arr


def _empty_rows(seq: Any, arr: Any) -> bool:
    """An empty sequence against a tensor of no rows (first dim 0): the ZipMap output of an
    empty batch and the probabilities tensor remove_zipmap left in its place."""
    return isinstance(seq, (list, tuple)) and not seq and isinstance(arr, np.ndarray) \
        and arr.ndim >= 1 and arr.shape[0] == 0


def _leaves(ref: Any, cand: Any, path: str, out: list, notes: list[str],
            order: Sequence | None = None) -> str | None:
    """Walk a (reference, candidate) pair of sequences / maps in step: ``out`` gets each pair
    of leaf arrays, ``notes`` what differs in structure. Returns what made it unequal in
    structure (None: same structure). ``order``: the labels of the ZipMap that made the
    maps, in the order of the tensor's columns (a ZipMap output against a tensor)."""
    if _maps_of(ref) is not None and _maps_of(cand) is None and cand is not None:
        ref = _maps_as_rows(ref, order)  # the maps against the tensor remove_zipmap left
    elif _maps_of(cand) is not None and _maps_of(ref) is None and ref is not None:
        cand = _maps_as_rows(cand, order)
    if isinstance(ref, dict) or isinstance(cand, dict):
        if not (isinstance(ref, dict) and isinstance(cand, dict)):
            return f"{path or 'value'}: a map against a {type(cand).__name__}"
        if set(ref) != set(cand):
            only_r = sorted(map(repr, set(ref) - set(cand)))[:3]
            only_c = sorted(map(repr, set(cand) - set(ref)))[:3]
            return (f"{path or 'map'} keys differ (reference only {', '.join(only_r) or '-'}; "
                    f"candidate only {', '.join(only_c) or '-'})")
        for k in sorted(ref, key=repr):
            bad = _leaves(ref[k], cand[k], f"{path}[{k!r}]", out, notes)
            if bad:
                return bad
        return None
    if _empty_rows(ref, cand) or _empty_rows(cand, ref):
        return None  # no maps on either side: a ZipMap's [] and remove_zipmap's (0, k)
    if isinstance(ref, (list, tuple)) or isinstance(cand, (list, tuple)):
        if not (isinstance(ref, (list, tuple)) and isinstance(cand, (list, tuple))):
            return f"{path or 'value'}: a sequence against a {type(cand).__name__}"
        if len(ref) != len(cand):
            return f"{path or 'sequence'} length differs ({len(ref)} vs {len(cand)})"
        for i, (r, c) in enumerate(zip(ref, cand)):
            bad = _leaves(r, c, f"{path}[{i}]", out, notes)
            if bad:
                return bad
        return None
    if ref is None or cand is None:
        return None if ref is None and cand is None else \
            f"{path or 'optional'}: empty on one side only"
    r, c = np.asarray(ref), np.asarray(cand)
    if r.shape != c.shape and r.size != c.size:
        return f"{path or 'element'} shape differs ({list(r.shape)} vs {list(c.shape)})"
    out.append((r.reshape(-1), c.reshape(-1)))
    return None


def numeric_pair(ref: Any, cand: Any) -> tuple[np.ndarray, np.ndarray] | str:
    """The numbers of a (reference, candidate) pair as two flat float64 arrays, as the
    comparator pairs them (a sequence's elements, a map's values by key), for plots; the
    reason (a str) when there are none to pair: strings, or a different structure."""
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    if is_structured(ref) or is_structured(cand) or ref is None or cand is None:
        bad = _leaves(ref, cand, "", pairs, [])
        if bad:
            return bad
    else:
        pairs.append((np.asarray(ref).reshape(-1), np.asarray(cand).reshape(-1)))
    if not pairs:
        return "nothing to compare (empty)"
    r = np.concatenate([p[0] for p in pairs])
    c = np.concatenate([p[1] for p in pairs])
    if r.dtype.kind in "OSU" or c.dtype.kind in "OSU":
        return "strings are compared for equality, not drawn as numbers"
    if r.size != c.size:
        return f"sizes differ ({r.size} vs {c.size})"
    return r.astype(np.float64), c.astype(np.float64)


def _structure_kind(ref: Any, cand: Any = None) -> str:
    """What a structured pair is compared as, read from the side that has the structure (a
    ZipMap output against remove_zipmap's tensor is ``seq(map)`` either way round)."""
    value = ref if isinstance(ref, (dict, list, tuple)) or not isinstance(
        cand, (dict, list, tuple)) else cand
    if isinstance(value, dict):
        return "map"
    if isinstance(value, (list, tuple)):
        return "seq(map)" if value and isinstance(value[0], dict) else "sequence"
    return "optional"
