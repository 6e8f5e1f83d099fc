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


def fold_into_producer(rw: Rewrite, producer: ir.Node, node: ir.Node, side: int) -> None:
    """Remove ``node``, an Add or Mul of a constant that ``producer`` took in: its data input
    (the other side of the constant at ``side``) replaces its output, which keeps its name,
    the constant goes when nothing else reads it, and ``producer`` stands for both."""
    c = node.inputs[1 - side]
    if rw.bypass(node, input_index=side, keep_name=True):
        rw.drop_if_unused(c)
        rw.record(producer, [producer, node])


def conv_out_channels(conv: ir.Node, w: np.ndarray) -> int:
    """Output channels of ``conv`` given its weight ``w``."""
    if conv.op_type == "ConvTranspose":
        return w.shape[1] * conv.attributes.get_int("group", 1)
    return w.shape[0]


def per_channel(c: np.ndarray, channels: int, out_rank: int) -> np.ndarray | None:
    """``c`` as a [channels] vector when adding it to an [N, C, ...] tensor adds c[k] to
    channel k (shapes [1, C, 1, 1], [C, 1, 1], a scalar...), else None.

    A plain [C] vector is *not* per-channel: broadcasting aligns it with the last axis.
    """
    if c.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    if shape[1] == channels:
        return c.reshape(channels)
    if shape[1] == 1:
        return np.full(channels, c.reshape(-1)[0], dtype=c.dtype)
    return None


def scale_weight(conv: ir.Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """W' with every output channel c multiplied by s[c].

    Conv weights are [Cout, Cin/g, k...]: the output channel is axis 0. ConvTranspose weights
    are [Cin, Cout/g, k...]: output channel c = group·(Cout/g) + j lives in axis 1 of the
    group's slice, so the weight is viewed as [g, Cin/g, Cout/g, k...].
    """
    # Multiplied in float64 and rounded once into the weight dtype, without float64 copies
    # of the weight: numpy casts through small buffers (bit for bit the result of
    # (w.astype(float64) * s).astype(w.dtype), ~5x faster on ResNet-50's 25M weights).
    k = w.ndim - 2
    out = np.empty_like(w)
    if conv.op_type == "ConvTranspose":
        g = conv.attributes.get_int("group", 1)
        cin, cout_g = w.shape[0], w.shape[1]
        view = w.reshape(g, cin // g, cout_g, *w.shape[2:])
        np.multiply(view, s.reshape(g, 1, cout_g, *([1] * k)), out=out.reshape(view.shape),
                    dtype=np.float64, casting="unsafe")
        return out
    np.multiply(w, s.reshape(-1, *([1] * (k + 1))), out=out, dtype=np.float64,
                casting="unsafe")
    return out


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
