"""fuse_transposes: Transpose pairs that cancel are removed, pairs that compose become one."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass, sole_reader
from onnx_lab.transforms.passes._shared import bypass_blocker
from onnx_lab.transforms.passes._util import perm_of


def compose(p1: list[int], p2: list[int]) -> list[int]:
    """Transpose(Transpose(x, p1), p2) == Transpose(x, p) with p[i] = p1[p2[i]]."""
    return [p1[i] for i in p2]


def _perms(b: Binding) -> tuple[list[int] | None, list[int] | None]:
    """The perms of the first and the second Transpose."""
    return perm_of(b.model, b.producer), perm_of(b.model, b.root)


@register_pass("fuse_transposes")
class FuseTransposes(PatternPass):
    r"""Remove Transpose pairs that cancel and merge pairs that compose into one Transpose.

    ### Transpose pairs (`fuse_transposes`)

    Transpose with perm p gives y.shape[i] = x.shape[p[i]]. Two in a row compose:

    $$\mathrm{Transpose}(\mathrm{Transpose}(x, p_1), p_2) = \mathrm{Transpose}(x, p),\qquad
    p[i] = p_1[p_2[i]]\quad (p = p_1 \circ p_2)$$

    When p is the identity the pair **cancels** (`transpose_cancel`, NHWC→NCHW round trips);
    otherwise the pair **merges** into one Transpose (`transpose_merge`). A missing perm means
    reversed axes. The first Transpose's output must have no other reader."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("transpose_cancel", "transpose_merge")
    presets = {"safe": (70,)}  # after the Conv fusions (transforms/presets.py)

    no_match_reason = "no Transpose directly follows another Transpose"
    pattern = Pattern("transpose_merge", "Transpose", producer="Transpose", disjoint=True)

    def check(self, b: Binding) -> str | None:
        why = sole_reader(b.model, b.value, b.root)
        if why:
            return why
        p1, p2 = _perms(b)
        if p1 is None or p2 is None:
            return "the rank is unknown and a perm is implicit"
        p = compose(p1, p2)
        return bypass_blocker(b.root, src=b.producer.inputs[0]) if p == sorted(p) else None

    def describe(self, b: Binding) -> Found:
        (p1, p2), fid, nid = _perms(b), b.producer_id, b.root_id
        p = compose(p1, p2)
        if p == sorted(p):
            return Found(f"{fid} ({p1}) and {nid} ({p2}) cancel", "transpose_cancel", 2,
                         data={"perm": p})
        return Found(f"{fid} ({p1}) then {nid} ({p2}) is one Transpose {p}", data={"perm": p})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        t1, t2 = nodes[:2]
        t2.replace_input_with(0, t1.inputs[0])
        if m.pattern == "transpose_cancel":
            if not rw.bypass(t2):
                t2.replace_input_with(0, t1.outputs[0])  # undo: keep the pair
                return
        else:
            t2.attributes["perm"] = ir.AttrInt64s("perm", m.data["perm"])
            rw.record(t2, [t1, t2])
        rw.remove(t1)
