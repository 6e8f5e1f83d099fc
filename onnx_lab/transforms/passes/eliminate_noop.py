"""eliminate_noop: remove nodes that return their input unchanged."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import dtype_name, value_type
from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern
from onnx_lab.transforms.passes._shared import BypassPass
from onnx_lab.transforms.passes._util import (
    const_ints,
    free_shape,
    perm_of,
    rank,
    static_shape,
)

# Slice ends at or past this take everything whatever the dim (exporters write INT64_MAX or
# INT32_MAX for "to the end").
_TO_END = 2**31 - 1


def _same_dtype(model: LabModel, node: ir.Node) -> bool:
    x = node.inputs[0]
    to = node.attributes.get_int("to", None)
    if x is None or to is None:
        return False
    dt = x.dtype
    if dt is None:
        info = value_type(model, x)
        return info is not None and info.dtype is not None and info.dtype == dtype_name(to)
    return int(dt) == int(to)


def _reshape_noop(model: LabModel, node: ir.Node) -> bool:
    target = const_ints(node.inputs[1]) if len(node.inputs) > 1 else None
    if target is None:
        return False
    allowzero = node.attributes.get_int("allowzero", 0)
    x = node.inputs[0]
    shape = static_shape(model, x)
    if shape is not None:
        resolved = [shape[i] if t == 0 and not allowzero and i < len(shape) else t
                    for i, t in enumerate(target)]
        if resolved.count(-1) == 1:
            known = int(np.prod([d for d in resolved if d != -1]))
            total = int(np.prod(shape))
            if known == 0 or total % known:
                return False
            resolved[resolved.index(-1)] = total // known
        return resolved == list(shape)
    # Symbolic dims: a no-op when every dim is copied (0) or equal, one -1 at most left over
    # (the dims the inputs leave free: a stale value_info's 1 for `batch` made a Reshape to
    # [1, -1] one, which at batch 3 gave [1, 72])
    shape = free_shape(model, x)
    dims = list(shape) if shape is not None else None
    if dims is None or len(dims) != len(target) or allowzero:
        return False
    free = 0
    for t, d in zip(target, dims):
        if t == 0 or (isinstance(d, int) and t == d):
            continue
        if t == -1:
            free += 1
            continue
        return False
    return free <= 1


def _slice_noop(model: LabModel, node: ir.Node) -> bool:
    ins = list(node.inputs) + [None] * (5 - len(node.inputs))
    starts, ends = const_ints(ins[1]), const_ints(ins[2])
    if starts is None or ends is None:
        return False
    r = rank(model, ins[0])
    axes = const_ints(ins[3]) if ins[3] is not None else list(range(len(starts)))
    steps = const_ints(ins[4]) if ins[4] is not None else [1] * len(starts)
    if axes is None or steps is None:
        return False
    shape = static_shape(model, ins[0])
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st != 1 or s != 0:
            return False
        if e >= _TO_END:
            continue
        if shape is None or r is None or e < shape[a % r]:
            return False
    return True


def _pad_noop(node: ir.Node) -> bool:
    pads = node.attributes.get_ints("pads", None)
    if pads is None and len(node.inputs) > 1:
        pads = const_ints(node.inputs[1])
    return pads is not None and not any(pads)


def _expand_noop(model: LabModel, node: ir.Node) -> bool:
    target = const_ints(node.inputs[1]) if len(node.inputs) > 1 else None
    shape = static_shape(model, node.inputs[0])
    if target is None or shape is None:
        return False
    try:
        return tuple(np.broadcast_shapes(shape, tuple(target))) == tuple(shape)
    except ValueError:
        return False


_NEUTRAL = {"Mul": (1, True), "Div": (1, False), "Add": (0, True), "Sub": (0, False)}


def _arith_noop(model: LabModel, node: ir.Node) -> int | None:
    """Index of the data input when the node multiplies/divides by 1 or adds/subtracts 0 with
    a constant that does not broadcast the data to a bigger shape."""
    value, commutes = _NEUTRAL[node.op_type]
    for data, other in ((0, 1), (1, 0)) if commutes else ((0, 1),):
        c = const_array(node.inputs[other])
        if c is None or c.size == 0 or not np.all(c == value):
            continue
        x = node.inputs[data]
        if const_array(x) is not None:
            continue  # constant folding's job
        r = rank(model, x)
        if r is None or c.ndim > r:
            continue
        if all(d == 1 for d in c.shape):
            return data
        shape = static_shape(model, x)
        if shape is not None and tuple(np.broadcast_shapes(shape, c.shape)) == tuple(shape):
            return data
    return None


def noop_input(model: LabModel, node: ir.Node) -> tuple[str, int] | None:
    """(pattern, data input index) when ``node`` returns its input unchanged."""
    op = node.op_type
    if op == "Transpose":
        p = perm_of(model, node)
        return ("noop_transpose", 0) if p is not None and p == sorted(p) else None
    if op == "Reshape":
        return ("noop_reshape", 0) if _reshape_noop(model, node) else None
    if op == "Cast":
        return ("noop_cast", 0) if _same_dtype(model, node) else None
    if op == "Slice" and len(node.inputs) >= 3:
        return ("noop_slice", 0) if _slice_noop(model, node) else None
    if op == "Pad":
        return ("noop_pad", 0) if _pad_noop(node) else None
    if op == "Concat" and len(node.inputs) == 1:
        return ("noop_concat", 0)
    if op == "Expand":
        return ("noop_expand", 0) if _expand_noop(model, node) else None
    if op in _NEUTRAL and len(node.inputs) == 2:
        i = _arith_noop(model, node)
        return ("noop_arith", i) if i is not None else None
    return None


_WHAT = {"noop_transpose": "has the identity perm", "noop_reshape": "reshapes to the same shape",
         "noop_cast": "casts to the dtype it already has", "noop_slice": "takes everything",
         "noop_pad": "pads nothing", "noop_concat": "concatenates a single input",
         "noop_expand": "expands to the shape it already has",
         "noop_arith": "multiplies/divides by 1 or adds/subtracts 0"}


def _noop_fit(b: Binding) -> tuple[str, int] | None:
    """``Pattern.where``: (pattern, data input) of a single-output node that is a no-op."""
    node = b.root
    if len(node.outputs) != 1 or not node.inputs:
        return None
    return noop_input(b.model, node)


@register_pass("eliminate_noop")
class EliminateNoop(BypassPass):
    r"""Remove no-op Transpose/Reshape/Cast/Slice/Pad/Concat/Expand and x*1, x+0.

    ### No-op nodes (`eliminate_noop`)

    Nodes that return their input unchanged: Transpose with the identity perm, Reshape to the shape
    the input already has (0 copies a dim, −1 fills in; symbolic dims count when copied), Cast to
    the dtype it already has, Slice with start 0, step 1 and end past the dim (or INT_MAX), Pad
    with all-zero pads, Concat of one input, Expand to a shape that broadcasts to the input's own,
    and x·1, x/1, x+0, x−0 when the constant does not broadcast x to a bigger shape. Each is
    removed like an Identity."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("noop_transpose", "noop_reshape", "noop_cast", "noop_slice", "noop_pad", "noop_concat", "noop_expand", "noop_arith")

    no_match_reason = "no node returns its input unchanged"
    pattern = Pattern("noop", None, where=_noop_fit)  # the name comes from noop_input

    def data_input(self, b: Binding) -> int:
        return b.fit[1]

    def describe(self, b: Binding) -> Found:
        pattern, i = b.fit
        return Found(f"{b.root.op_type} {b.root_id} {_WHAT[pattern]}", pattern, data={"input": i})
