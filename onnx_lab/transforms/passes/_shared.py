"""Building blocks several passes share: bypassing a node, and whether a Conv can absorb the
node that reads it. Kept out of the passes themselves so no pass imports a sibling."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import Match, Rewrite
from onnx_lab.transforms.matcher import Binding, PatternPass, sole_reader
from onnx_lab.transforms.passes._util import not_constant


def bypass_blocker(node: ir.Node, out_index: int = 0, in_index: int = 0,
                   src: ir.Value | None = None) -> str | None:
    """Why ``node`` cannot be bypassed (graph output names must survive), or None.

    ``src`` is the value that would replace the output (default: input ``in_index``).
    """
    out = node.outputs[out_index]
    if src is None:
        src = node.inputs[in_index] if in_index < len(node.inputs) else None
    if src is None:
        return "it has no data input"
    if not out.is_graph_output():
        return None
    if src.is_graph_input():
        return f"it copies graph input {src.name!r} to graph output {out.name!r}; both names " \
               "must survive"
    if src.is_graph_output():
        return f"it copies graph output {src.name!r} to graph output {out.name!r}; both names " \
               "must survive"
    if src.is_initializer():
        return f"its graph output {out.name!r} would become initializer {src.name!r}"
    if src.graph is not node.graph:
        return f"its graph output {out.name!r} reads {src.name!r} of an enclosing graph"
    return None


class BypassPass(PatternPass):
    """A single-node pattern whose node goes: its data input replaces its output, and the
    constants only it read (Dropout's ratio, a Reshape's shape) go too."""

    def blocker(self, node: ir.Node, data_input: int) -> str | None:
        """Why ``node`` cannot be removed, or None (graph output names must survive)."""
        return bypass_blocker(node, 0, data_input)

    def data_input(self, b: Binding) -> int:
        """The input that replaces the output (a pass where it is not 0 keeps it in the
        match's ``data["input"]`` for :meth:`apply`)."""
        return 0

    def check(self, b: Binding) -> str | None:
        return self.blocker(b.root, self.data_input(b))

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        node, i = nodes[0], m.data.get("input", 0)
        # An earlier bypass may have made the data input a graph input: check again.
        if self.blocker(node, i) is not None:
            return
        rest = [v for k, v in enumerate(node.inputs) if k != i and v is not None]
        if rw.bypass(node, input_index=i):
            for v in rest:
                rw.drop_if_unused(v)


def conv_out_channels(conv: ir.Node, w: np.ndarray) -> int:
    """Output channels of ``conv`` given its weight ``w``."""
    if conv.op_type == "ConvTranspose":
        return w.shape[1] * conv.attributes.get_int("group", 1)
    return w.shape[0]


def conv_blocker(conv: ir.Node, reader: ir.Node, model: LabModel) -> str | None:
    """Why ``conv`` cannot absorb its reader (shared output, non-constant weights...)."""
    why = sole_reader(model, conv.outputs[0], reader)
    if why:
        return why
    w = const_array(conv.inputs[1] if len(conv.inputs) > 1 else None)
    if w is None:
        return not_constant(conv.inputs[1] if len(conv.inputs) > 1 else None, "its weight")
    if w.dtype.kind != "f":
        return f"its weight is {w.dtype}, not floating point"
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and const_array(conv.inputs[2]) is None:
        return not_constant(conv.inputs[2], "its bias")
    return None
