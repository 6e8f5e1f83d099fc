"""Bytes per element of ONNX dtypes and human-readable byte counts (shared by every layer)."""

from __future__ import annotations

import numpy as np

__all__ = ["itemsize", "format_bytes"]

_SPECIAL = {"bfloat16": 2, "float8e4m3fn": 1, "float8e4m3fnuz": 1, "float8e5m2": 1,
            "float8e5m2fnuz": 1, "float8e8m0": 1, "int4": 0.5, "uint4": 0.5, "float4e2m1": 0.5,
            "int2": 0.25, "uint2": 0.25, "complex64": 8, "complex128": 16}


def itemsize(dtype: str | None) -> float | None:
    """Bytes per element of a dtype name (``"float32"`` -> 4, ``"int4"`` -> 0.5), None if unknown."""
    if dtype is None:
        return None
    if dtype in _SPECIAL:
        return _SPECIAL[dtype]
    try:
        return float(np.dtype(dtype).itemsize)
    except (TypeError, ValueError):  # "string", "seq(map(int64,float))": no fixed size
        return None


def format_bytes(n: int | float | None) -> str:
    """``1536`` -> ``'1.5 KB'``; None -> ``''``."""
    if n is None:
        return ""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"
