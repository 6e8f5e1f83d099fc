"""fuse_matmul_mul: fold a Mul by a per-column constant after a MatMul into its weight."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass, sole_reader
from onnx_lab.transforms.passes._shared import bypass_blocker, fold_into_producer
from onnx_lab.transforms.passes._util import constant_other, freed_bytes, not_constant, rank


def per_column(c: np.ndarray, columns: int, out_rank: int) -> np.ndarray | None:
    """``c`` as a [columns] vector when multiplying an [..., N] tensor by it scales column j
    by c[j] (shapes [N], [1, N], [1, 1, N], a scalar), else None (it would also broadcast
    along another axis, or change the output's rank)."""
    if c.ndim > out_rank or any(d != 1 for d in c.shape[:-1]):
        return None
    last = c.shape[-1] if c.ndim else 1
    if last == columns:
        return c.reshape(columns)
    if last == 1:
        return np.full(columns, c.reshape(-1)[0], dtype=c.dtype)
    return None


@register_pass("fuse_matmul_mul")
class FuseMatMulMul(PatternPass):
    r"""Fold a Mul by a per-column constant after a MatMul into the MatMul's weight.

    ### MatMul + Mul(per-column constant) → MatMul (`fuse_matmul_mul`)

    tf2onnx writes a Keras BatchNormalization after a Dense layer as `Mul` by a scale and `Add`
    of a shift along the last axis. With a constant weight B `[K, N]` and a scale s of one
    value per output column:

    $$(A B)\,\mathrm{diag}(s) = A\,(B\,\mathrm{diag}(s)),\qquad B'_{kj} = B_{kj}\,s_j$$

    so the Mul goes away and the Add stays a bias (which onnxruntime fuses with the MatMul).
    The constant must broadcast along the last axis only (`[N]`, `[1, N]`, a single value)
    and have no more dimensions than the MatMul's output.

    **Why it is safe.** The math is exact; only float rounding changes (computed in float64,
    stored in the weight dtype)."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("matmul_mul",)
    presets = {"safe": (46,)}  # with fuse_conv_mul (transforms/presets.py)

    no_match_reason = "no Mul by a per-column constant directly follows a MatMul"
    pattern = Pattern("matmul_mul", "Mul", producer="MatMul", inputs=(0, 1), arity=2,
                      where=constant_other)

    def check(self, b: Binding) -> str | None:
        mm, arr = b.producer, b.fit
        why = sole_reader(b.model, mm.outputs[0], b.root)
        if why:
            return why
        w = const_array(mm.inputs[1])
        if w is None:
            return not_constant(mm.inputs[1], "its weight (input B)")
        if w.ndim != 2 or w.dtype.kind != "f" or arr.dtype.kind != "f":
            return f"its weight is a {w.ndim}-D {w.dtype} array: only a 2-D float one folds"
        out_rank = rank(b.model, mm.outputs[0])
        if out_rank is None:
            return "the rank of its output is unknown"
        if per_column(arr, w.shape[1], out_rank) is None:
            return (f"{b.root_id} multiplies by a constant of shape {list(arr.shape)}, not one "
                    f"value per output column (use [{w.shape[1]}])")
        if not np.all(np.isfinite(arr)):
            return f"{b.root_id} multiplies by a constant holding inf or NaN"
        return None

    def describe(self, b: Binding) -> Found:
        return Found(f"{b.root_id} scales each column of {b.producer_id}: it folds into its "
                     "weight", saving_bytes=freed_bytes([b.other], [b.root]),
                     data={"side": b.input})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        mm, mul = nodes[:2]
        side = m.data["side"]
        if bypass_blocker(mul, 0, side):
            return
        c = mul.inputs[1 - side]
        w = const_array(mm.inputs[1])
        arr = const_array(c)
        s = per_column(arr, w.shape[1], arr.ndim).astype(np.float64)  # (checked in check)
        # rounded once into the weight dtype, as fuse_conv_bn does
        rw.set_const_input(mm, 1, (w.astype(np.float64) * s).astype(w.dtype))
        fold_into_producer(rw, mm, mul, side)
