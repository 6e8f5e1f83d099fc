"""fuse_matmul_add: MatMul with a constant weight + Add of a constant bias -> one Gemm."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass, sole_reader
from onnx_lab.transforms.passes._util import constant_other, dtype, not_constant, rank

# Gemm is defined for these element types (opset 11+ adds the integer ones, but ORT's CPU
# kernel only has floating-point ones).
_GEMM_TYPES = ("float32", "float64", "float16", "bfloat16")


@register_pass("fuse_matmul_add")
class FuseMatMulAdd(PatternPass):
    r"""Replace MatMul (2-D input, constant weight) + Add (constant bias) by one Gemm.

    ### MatMul + Add → Gemm (`fuse_matmul_add`)

    Gemm computes Y = α·A·B + β·C. With α = β = 1, B the MatMul's constant weight `[K, N]` and C
    the Add's bias (`[N]` or `[1, N]`):

    $$\mathrm{Gemm}(A, B, C) = A B + C = \mathrm{Add}(\mathrm{MatMul}(A, B), C)$$

    Gemm only takes 2-D A, so the pass fuses only when the MatMul input is 2-D. Transformer
    exports feed 3-D `[batch, seq, hidden]` tensors; wrapping a Gemm in Reshapes would add nodes,
    and onnxruntime already fuses N-D MatMul+Add at run time, so those are skipped with a reason.

    **Why it is safe.** The same products and sums, in one kernel."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("matmul_add",)

    no_match_reason = "no Add of a constant bias directly follows a MatMul"
    pattern = Pattern("matmul_add", "Add", producer="MatMul", inputs=(0, 1), arity=2,
                      where=constant_other)

    def check(self, b: Binding) -> str | None:
        model, mm = b.model, b.producer
        why = sole_reader(model, mm.outputs[0], b.root)
        if why:
            return why
        w = const_array(mm.inputs[1])
        if w is None:
            return not_constant(mm.inputs[1], "its weight (input B)")
        if w.ndim != 2:
            return f"its weight is {w.ndim}-D; Gemm takes a 2-D B"
        r = rank(model, mm.inputs[0])
        if r is None:
            return "the rank of its input A is unknown"
        if r != 2:
            # Gemm only takes 2-D A; wrapping it in Reshapes would add nodes, and ORT fuses
            # N-D MatMul+Add itself at run time, so these stay.
            return f"its input A is {r}-D; Gemm takes 2-D inputs"
        if dtype(model, mm.inputs[0]) not in _GEMM_TYPES:
            return f"dtype {dtype(model, mm.inputs[0])} is not supported by Gemm"
        bias, n = b.fit, w.shape[1]  # the constant Pattern.where found
        if not (bias.ndim == 0 or (bias.ndim == 1 and bias.shape[0] in (1, n))
                or (bias.ndim == 2 and bias.shape[0] == 1 and bias.shape[1] in (1, n))):
            return f"the bias has shape {list(bias.shape)}; Gemm needs [{n}] or [1, {n}]"
        return None

    def describe(self, b: Binding) -> Found:
        return Found(f"{b.producer_id} + {b.root_id} become one Gemm", data={"side": b.input})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        mm, add = nodes[:2]
        c = add.inputs[1 - m.data["side"]]
        base = mm.name or ""
        k = base.rfind("MatMul")
        name = rw.unique_node_name(base[:k] + "Gemm" + base[k + 6:] if k >= 0 else
                                   f"{base}_gemm" if base else "Gemm")
        # Y = A·B + C with alpha = beta = 1: exactly MatMul then Add.
        gemm = ir.node("Gemm", [mm.inputs[0], mm.inputs[1], c], name=name)
        rw.replace([mm, add], [gemm], [add.outputs[0]], [gemm.outputs[0]])
