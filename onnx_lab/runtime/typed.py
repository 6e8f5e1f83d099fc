"""Values onnxruntime's Python binding cannot pass or return as numpy arrays: bfloat16, the
float8 types, int4/uint4, int2/uint2 and float4e2m1 tensors, as ``ml_dtypes`` arrays.

``sess.run`` refuses numpy arrays of these dtypes ("Numpy_type 256 can't be converted to
MLDataType") and cannot return such outputs ("No corresponding Numpy type for Tensor Type");
float8 outputs come back as uint8. Here feeds become typed ``OrtValue`` s (the bytes of the
array under its ONNX element type; sub-byte types packed two or four to a byte, as
onnxruntime stores them) and outputs are read back from the OrtValue's buffer as the
matching ``ml_dtypes`` array (sub-byte elements unpacked), so comparisons see real values
(compared in float, like any float tensor).

Example:
    >>> ov = to_ortvalue(np.ones((2, 3), ml_dtypes.bfloat16))
    >>> from_ortvalue(sess.run_with_ort_values(None, {"x": ov})[0]).dtype
    dtype(bfloat16)
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

__all__ = ["needs_ortvalue", "to_ortvalue", "from_ortvalue", "SPECIAL_OUTPUT_TYPES"]


def _types() -> dict[str, tuple[int, Any, int]]:
    """onnxruntime type name -> (ONNX element type, ml_dtypes dtype, bits per element)."""
    import ml_dtypes
    from onnx import TensorProto as T

    table = {
        "bfloat16": (T.BFLOAT16, ml_dtypes.bfloat16, 16),
        "float8e4m3fn": (T.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 8),
        "float8e4m3fnuz": (T.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, 8),
        "float8e5m2": (T.FLOAT8E5M2, ml_dtypes.float8_e5m2, 8),
        "float8e5m2fnuz": (T.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, 8),
        "int4": (T.INT4, ml_dtypes.int4, 4),
        "uint4": (T.UINT4, ml_dtypes.uint4, 4),
    }
    for name, elem, attr, bits in (("int2", "INT2", "int2", 2), ("uint2", "UINT2", "uint2", 2),
                                   ("float4e2m1", "FLOAT4E2M1", "float4_e2m1fn", 4),
                                   ("float8e8m0", "FLOAT8E8M0", "float8_e8m0fnu", 8)):
        if hasattr(T, elem) and hasattr(ml_dtypes, attr):
            table[name] = (getattr(T, elem), getattr(ml_dtypes, attr), bits)
    return table


_TABLE: dict[str, tuple[int, Any, int]] = {}


def _table() -> dict[str, tuple[int, Any, int]]:
    if not _TABLE:
        _TABLE.update(_types())
    return _TABLE


#: onnxruntime output type strings whose values the binding cannot return as numpy.
SPECIAL_OUTPUT_TYPES = frozenset(f"tensor({k})" for k in (
    "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "int4",
    "uint4", "int2", "uint2", "float4e2m1", "float8e8m0"))


def _by_dtype(dtype: np.dtype) -> tuple[int, Any, int] | None:
    for elem, dt, bits in _table().values():
        if np.dtype(dt) == dtype:
            return elem, dt, bits
    return None


def needs_ortvalue(value: Any) -> bool:
    """Whether ``value`` is a numpy array of a dtype the binding refuses (an ml_dtypes one)."""
    return isinstance(value, np.ndarray) and type(value.dtype).__module__.startswith("ml_dtypes")


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned ``bits``-bit codes packed little end first (ONNX's layout: element 0 in the
    low bits of byte 0), the last byte padded with zeros."""
    per = 8 // bits
    flat = codes.astype(np.uint8).ravel() & ((1 << bits) - 1)
    pad = (-flat.size) % per
    flat = np.concatenate([flat, np.zeros(pad, np.uint8)]).reshape(-1, per)
    out = np.zeros(flat.shape[0], np.uint8)
    for k in range(per):
        out |= flat[:, k] << (bits * k)
    return out


def _unpack(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    per = 8 // bits
    codes = np.stack([(packed >> (bits * k)) & ((1 << bits) - 1) for k in range(per)], axis=1)
    return codes.ravel()[:n].astype(np.uint8)


def to_ortvalue(value: np.ndarray) -> Any:
    """A numpy array (ml_dtypes or plain) as an onnxruntime ``OrtValue`` of its ONNX type.

    Raises:
        ValueError: an array of a dtype with no ONNX element type here.
    """
    import onnxruntime as ort

    arr = np.ascontiguousarray(value)
    spec = _by_dtype(arr.dtype) if needs_ortvalue(arr) else None
    if spec is None:
        if needs_ortvalue(arr):
            raise ValueError(f"no ONNX element type for dtype {arr.dtype}")
        return ort.OrtValue.ortvalue_from_numpy(arr)
    elem, _dt, bits = spec
    if bits >= 8:
        raw = arr.view(np.uint8 if bits == 8 else np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, elem)
    # sub-byte: onnxruntime takes the shape from the array it is given, so make a tensor of
    # the shape and copy the packed bytes into its buffer
    packed = _pack(arr.view(np.uint8), bits)
    ov = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), elem)
    if packed.size:
        ctypes.memmove(ov.data_ptr(), packed.ctypes.data, packed.size)
    return ov


def from_ortvalue(ov: Any) -> Any:
    """An output ``OrtValue`` as numpy: its ``.numpy()`` where the binding can, else the
    buffer read as the matching ml_dtypes array (float8 outputs, which ``.numpy()`` returns
    as uint8, are viewed as their type)."""
    if not ov.is_tensor():
        return ov.numpy()
    kind = ov.data_type().removeprefix("tensor(").removesuffix(")")
    spec = _table().get(kind)
    if spec is None:
        return ov.numpy()
    _elem, dt, bits = spec
    shape = tuple(int(d) for d in ov.shape())
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    nbytes = (n * bits + 7) // 8
    buf = np.frombuffer(ctypes.string_at(ov.data_ptr(), nbytes) if nbytes else b"", np.uint8)
    if bits >= 8:
        return buf.view(np.uint16 if bits == 16 else np.uint8).view(dt).reshape(shape).copy()
    return _unpack(buf, bits, n).view(dt).reshape(shape)
