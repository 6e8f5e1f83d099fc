"""onnx-tool 1.0.1's "MACs" of one node, for users comparing with it (the
``macs_onnx_tool`` column of :func:`onnx_lab.analysis.cost.cost`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_lab.analysis._counters import _MOVE_OPS, _Ctx, _numel, _prod

# onnx-tool 1.0.1's "MACs" (onnx_tool/node.py, Node.profile), for users comparing with it. It
# counts every op's arithmetic as MACs, each weighed by a per-operation cost (add, mul and
# compare 1; divide 4, sqrt 24, exp and pow 32, sin/cos 39, log 43), over the output elements
# unless said otherwise; Conv, Gemm and MatMul add their bias adds to the multiply-accumulates.
# Ops it has no formula for count 0 there; here they are NaN unless they only move data.
_OT_DIV, _OT_SQRT, _OT_EXP, _OT_LOG, _OT_SIN = 4.0, 24.0, 32.0, 43.0, 39.0
_OT_TANH = _OT_EXP + 2 + _OT_DIV
# Per output element, times max(1, inputs - 1) (its element-wise base classes).
_OT_PER_OUT_N: dict[str, float] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Min", "Max", "Neg", "Abs", "Ceil", "Mod", "Relu",
                     "Sign"), 1.0),
    "LeakyRelu": 2.0, "Sqrt": _OT_SQRT, "Pow": _OT_EXP, "Div": _OT_DIV, "Reciprocal": _OT_DIV,
    "Sin": _OT_SIN, "Cos": _OT_SIN,
    "HardSigmoid": 4.0, "HardSwish": 5.0, "Tanh": 2 * _OT_TANH,
    "Atan": 2 * (_OT_SQRT + 4 + _OT_DIV), "InstanceNormalization": 3 + _OT_DIV,
    "LpNormalization": _OT_EXP + 1,
}
# Per output element, once.
_OT_PER_OUT: dict[str, float] = {
    "Exp": _OT_EXP, "Sigmoid": _OT_EXP, "Softmax": _OT_EXP + _OT_DIV, "Log": _OT_LOG,
    "Softplus": _OT_EXP + 1 + _OT_LOG, "LogSoftmax": _OT_EXP + _OT_DIV + 1 + _OT_LOG,
    "Elu": _OT_EXP + 3, "Gelu": _OT_EXP + 2, "PRelu": 2.0, "Clip": 2.0, "ImageScaler": 2.0,
    "CumSum": 1.0, "QuantizeLinear": 2.0, "DequantizeLinear": 2.0, "Less": 1.0, "LessOrEqual": 1.0,
    "Greater": 1.0, "GreaterOrEqual": 1.0, "Equal": 1.0, "Not": 1.0, "And": 1.0, "Or": 1.0,
    "Xor": 1.0, "Round": 1.0, "Floor": 1.0, "NonZero": 1.0,
    "BatchNormalization": 2 + _OT_SQRT + _OT_DIV + 1,
}
# Per element of the first input.
_OT_PER_IN = {"ReduceMean": 1.0, "ReduceSum": 1.0, "ReduceProd": 1.0, "ReduceMin": 1.0,
              "ReduceMax": 1.0, "ReduceL2": 1 + _OT_SQRT}
# No arithmetic there (its Node.profile default of 0).
_OT_ZERO = (_MOVE_OPS - {"Mod", "NonZero"}) | {"Erf", "Dropout", "Identity", "Constant", "If",
                                                "Loop", "Scan"}


def _onnx_tool_macs(c: _Ctx) -> float | None:
    """onnx-tool 1.0.1's MACs of one node (see the table above), or None: shapes unknown or
    an op outside the table."""
    op, y = c.node.op_type, (c.outs[0] if c.outs else None)
    n_in = sum(1 for v in c.node.inputs if v is not None)
    if op in _OT_ZERO:
        return 0.0
    if op == "Sum":  # n - 1 adds per output element
        return float(_numel(y) * (n_in - 1)) if y is not None else None
    if op in _OT_PER_OUT_N:
        return float(_numel(y) * max(1, n_in - 1) * _OT_PER_OUT_N[op]) if y else None
    if op in _OT_PER_OUT:
        return float(_numel(y) * _OT_PER_OUT[op]) if y is not None else None
    x = c.ins[0] if c.ins else None
    if op in _OT_PER_IN:
        return float(_numel(x) * _OT_PER_IN[op]) if x is not None else None
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w = c.ins[3 if op == "QLinearConv" else 1] if len(c.ins) > 1 else None
        if not c.need(w, y):
            return None
        bias = _numel(y) if op in ("Conv", "ConvTranspose") and n_in > 2 else 0
        return float(_numel(y) * _prod(w[1:]) + bias)
    if op in ("Gemm", "MatMul", "MatMulInteger"):
        w = c.ins[1] if len(c.ins) > 1 else None
        if not c.need(w, y):
            return None
        k = (w[-1] if c.attr("transB", 0) else w[-2]) if op == "Gemm" else \
            (w[-2] if len(w) > 1 else 1)
        return float(_numel(y) * k + (_numel(y) if n_in == 3 else 0))
    if op in ("MaxPool", "AveragePool"):
        ks = c.attr("kernel_shape") or (3, 3)
        return float(_numel(y) * _prod(list(ks)[:2])) if y is not None else None
    if op == "GlobalAveragePool":
        return float(_numel(x) + _numel(y) * _OT_DIV) if c.need(x, y) else None
    if op == "LRN":
        size = c.attr("size")
        return float(_numel(y) * (_OT_DIV + _OT_EXP + 1 + int(size))) if y and size else None
    if op == "LayerNormalization":
        if x is None:
            return None
        axis = int(c.attr("axis", -1)) % len(x) if x else 0
        rest = _numel(x) // x[axis] if x and x[axis] else 0
        return float(_numel(x) * 7 + rest * (1 + _OT_SQRT + _OT_DIV))
    if op in ("Resize", "Upsample"):
        mode = str(c.attr("mode", "nearest"))
        return float(_numel(y) * {"linear": 4, "cubic": 8}.get(mode, 0)) if y else None
    return None


def _or_nan(x: float | None) -> float:
    return np.nan if x is None else x


def _onnx_tool_total(macs: Sequence[float], op_types: Sequence[str]) -> dict[str, Any]:
    """``macs_onnx_tool`` (the sum over the nodes it has a figure for: the column's
    ``macs``) and ``macs_onnx_tool_missing`` (the op types left out: shapes unknown or no
    rule)."""
    a = np.asarray(macs, dtype=np.float64)
    missing = {op for op, m in zip(op_types, np.isnan(a)) if m}
    return {"macs_onnx_tool": float(np.nansum(a)), "macs_onnx_tool_missing": sorted(missing)}
