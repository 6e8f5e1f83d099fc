"""fuse_matmul_add: MatMul with a constant weight + Add of a constant bias -> one Gemm."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, const_array, register_pass
from onnx_lab.transforms.passes._util import (
    alive,
    dtype,
    is_std,
    match,
    names_of,
    not_constant,
    rank,
    users,
    walk,
)

# Gemm is defined for these element types (opset 11+ adds the integer ones, but ORT's CPU
# kernel only has floating-point ones).
_GEMM_TYPES = ("float32", "float64", "float16", "bfloat16")


@register_pass("fuse_matmul_add")
class FuseMatMulAdd(LabPass):
    """Replace MatMul (2-D input, constant weight) + Add (constant bias) by one Gemm."""

    no_match_reason = "no Add of a constant bias directly follows a MatMul"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        for nid, add in walk(model):
            if not is_std(add, "Add") or len(add.inputs) != 2:
                continue
            for side in (0, 1):
                y, c = add.inputs[side], add.inputs[1 - side]
                mm = y.producer() if y is not None else None
                if mm is None or not is_std(mm, "MatMul") or const_array(c) is None:
                    continue  # not a bias Add (e.g. a residual Add of two tensors)
                mid = model.index.node_id(mm)
                why = self._blocker(model, mm, add, c)
                if why:
                    self.skip(mid, why)
                    break
                out.append(match(self.name, "matmul_add", model, mm, [add],
                                 f"{mid} + {nid} become one Gemm", 1, side=side))
                break
        return out

    @staticmethod
    def _blocker(model: LabModel, mm: ir.Node, add: ir.Node, c: ir.Value) -> str | None:
        y = mm.outputs[0]
        if y.is_graph_output():
            return f"its output {y.name!r} is a graph output"
        others = [u for u in users(y) if u is not add]
        if others:
            return f"its output is also read by {names_of(model, others)}"
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
        b = const_array(c)
        if b is None:
            return not_constant(c, "the Add's other input")
        n = w.shape[1]
        if not (b.ndim == 0 or (b.ndim == 1 and b.shape[0] in (1, n))
                or (b.ndim == 2 and b.shape[0] == 1 and b.shape[1] in (1, n))):
            return f"the bias has shape {list(b.shape)}; Gemm needs [{n}] or [1, {n}]"
        return None

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            mm, add = m.data["nodes"][:2]
            if not alive(mm, add):
                continue
            c = add.inputs[1 - m.data["side"]]
            base = mm.name or ""
            k = base.rfind("MatMul")
            name = rw.unique_node_name(base[:k] + "Gemm" + base[k + 6:] if k >= 0 else
                                       f"{base}_gemm" if base else "Gemm")
            # Y = A·B + C with alpha = beta = 1: exactly MatMul then Add.
            gemm = ir.node("Gemm", [mm.inputs[0], mm.inputs[1], c], name=name)
            rw.replace([mm, add], [gemm], [add.outputs[0]], [gemm.outputs[0]])
