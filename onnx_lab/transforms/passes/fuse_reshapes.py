"""fuse_reshapes: Reshape->Reshape chains become one Reshape; Squeeze/Unsqueeze chains cancel
or merge."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass, sole_reader
from onnx_lab.transforms.passes._shared import bypass_blocker
from onnx_lab.transforms.passes._util import axes_of, const_ints, rank, static_shape


def merge_unsqueeze(a1: list[int], a2: list[int], r: int) -> list[int]:
    """Axes of one Unsqueeze equal to Unsqueeze(a1) then Unsqueeze(a2) on a rank-r input."""
    r1 = r + len(a1)
    big = r1 + len(a2)
    n1 = sorted(a % r1 for a in a1)
    n2 = sorted(a % big for a in a2)
    rest = [i for i in range(big) if i not in n2]  # where the intermediate dims land
    return sorted(set(n2) | {rest[i] for i in n1})


def merge_squeeze(s1: list[int], s2: list[int], r: int) -> list[int]:
    """Axes of one Squeeze equal to Squeeze(s1) then Squeeze(s2) on a rank-r input."""
    n1 = sorted(a % r for a in s1)
    rest = [i for i in range(r) if i not in n1]  # input positions of the intermediate dims
    n2 = [a % len(rest) for a in s2]
    return sorted(set(n1) | {rest[j] for j in n2})


def _chain(model: LabModel, first: ir.Node, second: ir.Node
           ) -> tuple[str, dict[str, Any]] | str | None:
    """(pattern, data) for a pair of shape ops, or a str reason, or None when unrelated."""
    a, b = first.op_type, second.op_type
    if a == "Reshape" and b == "Reshape":
        target = const_ints(second.inputs[1])
        final = static_shape(model, second.outputs[0])
        if final is not None:
            return "reshape_chain", {"shape": list(final)}
        if target is not None and (0 not in target or second.attributes.get_int("allowzero", 0)):
            return "reshape_chain", {"shape": None}
        return "the final shape is not static and the second target copies dims (0)"
    if {a, b} <= {"Squeeze", "Unsqueeze"}:
        a1, a2 = axes_of(first), axes_of(second)
        if not a1 or not a2:
            return "the axes are not constants (or squeeze every 1-dim)"
        r = rank(model, first.inputs[0])
        if r is None:
            return "the input rank is unknown"
        if a == "Unsqueeze" and b == "Squeeze":
            if sorted(x % (r + len(a1)) for x in a2) == sorted(x % (r + len(a1)) for x in a1):
                return "squeeze_cancel", {}
            return "the Squeeze removes other axes than the Unsqueeze added"
        if a == "Squeeze" and b == "Unsqueeze":
            if sorted(x % r for x in a2) == sorted(x % r for x in a1):
                return "squeeze_cancel", {}
            return "the Unsqueeze adds other axes than the Squeeze removed"
        if a == "Unsqueeze":
            return "unsqueeze_merge", {"axes": merge_unsqueeze(a1, a2, r)}
        return "squeeze_merge", {"axes": merge_squeeze(a1, a2, r)}
    return None


_SHAPE_OPS = ("Reshape", "Squeeze", "Unsqueeze")


@register_pass("fuse_reshapes")
class FuseReshapes(PatternPass):
    r"""Merge Reshape->Reshape chains; cancel or merge Squeeze/Unsqueeze chains.

    ### Reshape and Squeeze/Unsqueeze chains (`fuse_reshapes`)

    Reshape only reinterprets the element order, which never changes, so
    Reshape(Reshape(x, s₁), s₂) = Reshape(x, s₂) — with s₂ replaced by the final static shape
    when it is known (a 0 in s₂ copies a dim of the *intermediate* tensor, so it cannot be kept
    as is).

    Unsqueeze(a) followed by Squeeze(a) of the same axes, and Squeeze then Unsqueeze of the same
    axes, **cancel**. Two Unsqueezes (or two Squeezes) **merge** into one whose axes are the union
    expressed in one coordinate system: for Unsqueeze, the first node's axes are mapped to the
    positions the second leaves free in the final rank; for Squeeze, the second node's axes are
    mapped back to input positions not removed by the first."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("reshape_chain", "squeeze_cancel", "squeeze_merge", "unsqueeze_merge")
    presets = {"safe": (80,)}  # after the Conv fusions (transforms/presets.py)

    no_match_reason = "no Reshape follows a Reshape, no Squeeze/Unsqueeze follows another"
    pattern = Pattern("reshape_chain", _SHAPE_OPS, producer=_SHAPE_OPS, disjoint=True,
                      where=lambda b: _chain(b.model, b.producer, b.root))

    def check(self, b: Binding) -> str | None:
        if isinstance(b.fit, str):
            return b.fit
        why = sole_reader(b.model, b.value, b.root)
        if why:
            return why
        if b.fit[0] == "squeeze_cancel":
            return bypass_blocker(b.root, src=b.producer.inputs[0])
        return None

    def describe(self, b: Binding) -> Found:
        (pattern, data), first, second = b.fit, b.producer, b.root
        if pattern == "squeeze_cancel":
            return Found(f"{first.op_type} {b.producer_id} and {second.op_type} {b.root_id} "
                         "cancel", pattern, 2, data=data)
        return Found(f"{b.producer_id} then {b.root_id} is one {second.op_type}", pattern,
                     data=data)

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        first, second = nodes[:2]
        old_params = [v for v in first.inputs[1:] if v is not None]
        second.replace_input_with(0, first.inputs[0])
        if m.pattern == "squeeze_cancel":
            if not rw.bypass(second):
                second.replace_input_with(0, first.outputs[0])
                return
            old_params += [v for v in second.inputs[1:] if v is not None]
        elif m.pattern == "reshape_chain":
            if m.data["shape"] is not None:
                rw.set_const_input(second, 1, np.array(m.data["shape"], dtype=np.int64),
                                   f"{second.inputs[1].name or 'shape'}_fused")
            rw.record(second, [first, second])
        else:
            axes = m.data["axes"]
            if second.attributes.get("axes") is not None:
                second.attributes["axes"] = ir.AttrInt64s("axes", axes)
            else:
                rw.set_const_input(second, 1, np.array(axes, dtype=np.int64),
                                   f"{second.inputs[1].name or 'axes'}_fused")
            rw.record(second, [first, second])
        rw.remove(first)
        for v in old_params:
            rw.drop_if_unused(v)
