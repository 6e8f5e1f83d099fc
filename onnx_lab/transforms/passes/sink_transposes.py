"""sink_transposes: Transposes around a region of elementwise ops cancel.

tf2onnx writes a Keras model's NHWC ops between Transposes around each Conv:
``Conv -> Transpose(0,2,3,1) -> Add/Mul/Clip/Relu... -> Transpose(0,3,1,2) -> Conv``. An
elementwise op does not care about the layout, so the region between the two Transposes can
run in the Conv's layout and both Transposes go (onnxruntime's transpose optimizer does this
at session load; onnxsim and fuse_transposes, which need the Transposes adjacent, do not).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from onnx_lab.core._layout import LAYOUT_KEY
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import LabPass, Match, Param, Rewrite, register_pass
from onnx_lab.transforms.matcher import STANDARD_DOMAINS
from onnx_lab.transforms.passes._util import perm_of, rank

#: Ops that compute element by element, with no axis: which inputs carry the layout (None:
#: all of them, broadcast against each other). Clip's bounds are scalars and stay.
_ELEMENTWISE: dict[str, tuple[int, ...] | None] = {
    **{op: (0,) for op in (
        "Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu",
        "Celu", "Softplus", "Softsign", "ThresholdedRelu", "Mish", "Gelu", "Neg", "Abs",
        "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Erf", "Sin", "Cos",
        "Sign", "Not", "IsNaN", "IsInf", "Identity", "Cast", "Clip")},
    **{op: None for op in (
        "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Equal",
        "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where",
        "Mod")},
}


#: Ops over axes that keep the rank: they join a region with their axes renumbered
#: (a squeeze-excite ReduceMean over NHWC's H and W reduces NCHW's; a Pad's pads move).
_REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                     "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                     "ReduceSumSquare"})
#: Reductions whose result does not depend on the order they read the elements in: exact in
#: any layout. The others add in another order once their axes move (float rounding; an
#: output that cancels, x + ReduceSum(x), shows it beyond the per-element rule): they join a
#: region only with ``reorder_sums=True``.
_EXACT_REDUCE = frozenset({"ReduceMax", "ReduceMin"})


def _axes(node: ir.Node) -> tuple[str, list[int] | None] | None:
    """Where a Reduce's axes or a Pad's pads are (``"attr"``, ``"input"``; ``"all"`` for a
    Reduce over every axis) and their values; None when the node cannot join a region
    (keepdims=0, axes or pads computed at run time, a Pad's own axes input)."""
    if node.op_type in _REDUCE:
        keep = node.attributes.get("keepdims")
        if keep is not None and keep.as_int() == 0:
            return None
        if "axes" in node.attributes:
            return "attr", list(node.attributes["axes"].as_ints())
        if len(node.inputs) > 1 and node.inputs[1] is not None:
            arr = const_array(node.inputs[1])
            return ("input", [int(a) for a in arr.reshape(-1)]) if arr is not None else None
        noop = node.attributes.get("noop_with_empty_axes")
        return None if noop is not None and noop.as_int() else ("all", None)
    if node.op_type == "Pad":
        if len(node.inputs) > 3 and node.inputs[3] is not None:
            return None
        if "pads" in node.attributes:
            return "attr", list(node.attributes["pads"].as_ints())
        arr = const_array(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None \
            else None
        return ("input", [int(a) for a in arr.reshape(-1)]) if arr is not None else None
    return None


def _axes_fit(node: ir.Node, rank: int) -> bool:
    """Whether ``node`` (a Reduce or a Pad) can join a region of tensors of ``rank``."""
    got = _axes(node)
    if got is None:
        return False
    values = got[1]
    if values is None:
        return True
    if node.op_type == "Pad":
        return len(values) == 2 * rank
    return all(-rank <= a < rank for a in values) and len({a % rank for a in values}) == \
        len(values)


def _inverse(perm: list[int]) -> list[int]:
    return [int(i) for i in np.argsort(perm)]


def _data_inputs(node: ir.Node) -> list[int]:
    which = (0,) if node.op_type in _REDUCE or node.op_type == "Pad" else \
        _ELEMENTWISE[node.op_type]
    return [i for i in (range(len(node.inputs)) if which is None else which)
            if i < len(node.inputs) and node.inputs[i] is not None]


class _Region:
    """Elementwise nodes whose layout inputs all come out of a Transpose of one perm (or are
    constants, or come from the region): running them in the Transpose's input layout
    removes those Transposes and the inverse Transposes that read the region."""

    def __init__(self, model: LabModel, perm: list[int], reorder_sums: bool = False) -> None:
        self.model = model
        self.perm = perm
        self.reductions = _REDUCE if reorder_sums else _EXACT_REDUCE
        self.inverse = _inverse(perm)
        self.nodes: list[ir.Node] = []
        self.ids: set[int] = set()

    def accepts(self, node: ir.Node) -> bool:
        if node.domain not in STANDARD_DOMAINS or node.graph is not self.model.graph or \
                id(node) in self.ids:
            return False
        if node.op_type not in _ELEMENTWISE and not (
                (node.op_type in self.reductions or node.op_type == "Pad")
                and _axes_fit(node, len(self.perm))):
            return False
        if any(o.is_graph_output() for o in node.outputs):
            return False  # a graph output keeps its layout: the node reads the region
        for i in _data_inputs(node):
            v = node.inputs[i]
            p = v.producer()
            if p is not None and id(p) in self.ids:
                continue
            if self.entry(p):
                continue
            arr = const_array(v)
            if arr is None or arr.ndim > len(self.perm) or arr.size == 0:
                return False  # (an empty constant does not broadcast as a scalar does)
        return any(self.entry(node.inputs[i].producer()) or
                   id(node.inputs[i].producer()) in self.ids
                   for i in _data_inputs(node) if node.inputs[i].producer() is not None)

    def entry(self, node: ir.Node | None) -> bool:
        return node is not None and node.op_type == "Transpose" and \
            node.domain in STANDARD_DOMAINS and node.graph is self.model.graph and \
            perm_of(self.model, node) == self.perm

    def exit(self, node: ir.Node) -> bool:
        return node.op_type == "Transpose" and node.domain in STANDARD_DOMAINS and \
            node.graph is self.model.graph and perm_of(self.model, node) == self.inverse

    def grow(self, seed: ir.Node) -> None:
        todo = [u.node for u in seed.outputs[0].uses()]
        while todo:
            node = todo.pop(0)
            if not self.accepts(node):
                continue
            self.nodes.append(node)
            self.ids.add(id(node))
            for o in node.outputs:
                todo += [u.node for u in o.uses() if id(u.node) not in self.ids]
            # a node rejected before one of its inputs joined may fit now
            for i in _data_inputs(node):
                p = node.inputs[i].producer()
                if self.entry(p):
                    todo += [u.node for u in p.outputs[0].uses() if id(u.node) not in self.ids]

    # -- what changes
    def outputs(self) -> list[ir.Value]:
        return [o for n in self.nodes for o in n.outputs]

    def entries(self) -> list[ir.Node]:
        seen: dict[int, ir.Node] = {}
        for n in self.nodes:
            for i in _data_inputs(n):
                p = n.inputs[i].producer()
                if self.entry(p) and id(p) not in self.ids:
                    seen.setdefault(id(p), p)
        return list(seen.values())

    def removed_entries(self) -> list[ir.Node]:
        """Entries every reader of which is in the region (the others keep theirs)."""
        return [e for e in self.entries()
                if not e.outputs[0].is_graph_output()
                and all(id(u.node) in self.ids for u in e.outputs[0].uses())]

    def exits(self) -> list[ir.Node]:
        return [u.node for o in self.outputs() for u in o.uses()
                if id(u.node) not in self.ids and self.exit(u.node)]

    def kept_layout(self) -> list[ir.Value]:
        """Region tensors read outside by another node than an inverse Transpose: they get a
        Transpose of ``perm`` (no region tensor is a graph output: its node stays out)."""
        return [o for o in self.outputs()
                if any(id(u.node) not in self.ids and not self.exit(u.node)
                       for u in o.uses())]


@register_pass("sink_transposes")
class SinkTransposes(LabPass):
    r"""Remove the Transposes around a region of elementwise ops that runs as well in the
    layout before them.

    ### Transposes around elementwise ops (`sink_transposes`)

    An elementwise op $f$ (Add, Mul, Relu, Clip, HardSwish, Sigmoid...) commutes with a
    Transpose of perm $p$, its constants transposed back by the inverse perm $p^{-1}$
    (after numpy's broadcasting pads them to the rank):

    $$f(\mathrm{Transpose}(x, p),\ c) = \mathrm{Transpose}(f(x,\ \mathrm{Transpose}(c, p^{-1})), p)$$

    So a region of such ops whose layout inputs all come out of a `Transpose(p)` runs on
    the Transposes' inputs instead; a `Transpose(p^{-1})` reading the region becomes the
    identity and goes too. tf2onnx writes every Keras Conv as `Transpose(0,3,1,2) -> Conv ->
    Transpose(0,2,3,1)` with the bias, batch norm and activation between them in NHWC: a
    MobileNetV3 holds 108 such Transposes. ReduceMax/ReduceMin that keep the rank and Pad
    join a region with their axes renumbered (axis $a$ after the Transpose is axis $p_a$
    before it); the Reduce ops that add (a squeeze-excite ReduceMean) join with
    `reorder_sums=True`, which sums in another order: equal up to float rounding, not bit
    for bit.
    A region tensor read by another op (a Reshape) gets a `Transpose(p)` of its own; a region
    is rewritten only when more Transposes go than come, and a node making a graph output
    stays out of it.

    **Why it is safe.** Each op computes the same numbers on the same elements, in another
    order of axes; the values are bit-identical (with `reorder_sums=True`, the sums of the
    Reduce ops only up to float rounding)."""

    params = (Param("reorder_sums", bool, False,
                    "also take Reduce ops that add (ReduceMean, ReduceSum...): their sums run "
                    "in another order, equal up to float rounding"),)
    patterns = ("transpose_region",)
    # after constant folding (40), before the Conv fusions (45-60): a bias Add or batch norm
    # Mul between tf2onnx's Transposes is next to its Conv once they go
    presets = {"safe": (42, 75)}  # and again once the fusions made more regions

    no_match_reason = ("no Transpose feeds elementwise ops that an inverse Transpose reads "
                       "back")

    def find(self, model: LabModel) -> list[Match]:
        out: list[Match] = []
        used: set[int] = set()
        idx = model.index
        for nid, e in idx.entries.items():
            node = e.node
            if e.graph or node.op_type != "Transpose" or node.domain not in STANDARD_DOMAINS \
                    or id(node) in used:
                continue
            perm = perm_of(model, node)
            if perm is None or perm == sorted(perm) or rank(model, node.inputs[0]) != len(perm):
                continue
            region = _Region(model, perm, self.options["reorder_sums"])
            region.grow(node)
            if not region.nodes:
                continue
            entries, exits, kept = region.entries(), region.exits(), region.kept_layout()
            touched = [*region.nodes, *entries, *exits]
            if any(id(n) in used for n in touched):
                continue
            if any(e.inputs[0].producer() is not None and id(e.inputs[0].producer())
                   in region.ids for e in entries):
                self.skip(nid, "a Transpose inside the region after it feeds the region again")
                continue
            gone = len(region.removed_entries()) + len(exits)
            if gone - len(kept) < 1:
                self.skip(nid, f"{len(kept)} tensor(s) of the region after it are read in its "
                          "layout elsewhere: no Transpose would go")
                continue
            used.update(id(n) for n in touched)
            ids = [idx.node_id(n) for n in touched]
            out.append(Match(
                f"{self.name}:{nid}", "transpose_region", self.name, ids, nid,
                f"{gone} Transposes (perm {perm} and back) around {len(region.nodes)} "
                f"elementwise node(s) ({', '.join(idx.node_id(n) for n in region.nodes[:3])}"
                f"{', ...' if len(region.nodes) > 3 else ''}) cancel"
                + (f"; {len(kept)} added for readers in the other layout" if kept else ""),
                gone - len(kept), 0, {"region": region}))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            self._sink(m.data["region"], rw)

    @staticmethod
    def _renumber(node: ir.Node, region: _Region, rw: Rewrite) -> None:
        where, values = _axes(node)
        if values is None:  # a Reduce over every axis: the same in any layout
            return
        new = _renumbered(node, values, region.perm)
        name = "axes" if node.op_type in _REDUCE else "pads"
        if where == "attr":
            node.attributes[name] = ir.AttrInt64s(name, new)
        else:
            old = node.inputs[1]
            node.replace_input_with(1, rw.add_initializer(
                node.graph, f"{old.name or name}_t", np.asarray(new, np.int64)))
            rw.drop_if_unused(old)

    def _sink(self, region: _Region, rw: Rewrite) -> None:
        graph = region.model.graph
        entries, removed = region.entries(), region.removed_entries()
        exits, kept = region.exits(), region.kept_layout()
        r = len(region.perm)
        olds: list[ir.Value] = []
        for node in region.nodes:
            for i in _data_inputs(node):
                v = node.inputs[i]
                p = v.producer()
                if region.entry(p) and id(p) not in region.ids:
                    node.replace_input_with(i, p.inputs[0])
                    continue
                if p is not None and id(p) in region.ids:
                    continue
                arr = const_array(v)
                if arr is None or arr.size <= 1:
                    continue
                back = arr.reshape((1,) * (r - arr.ndim) + arr.shape).transpose(region.inverse)
                node.replace_input_with(i, rw.add_initializer(graph, f"{v.name}_t", back))
                olds.append(v)
            if node.op_type not in _ELEMENTWISE:
                self._renumber(node, region, rw)
            # an output an inverse Transpose read is that Transpose's output now, and takes
            # its name: the Transpose is among its sources (else the name, kept by a node of
            # other sources, pairs with the old tensor of the same shape: a false failure)
            read_by = [x for x in exits if any(x.inputs[0] is o for o in node.outputs)]
            rw.record(node, [node, *entries, *read_by])
        # Every region tensor is another tensor now (the old one's axes reordered): it gets a
        # name of its own, and its node says so (alignment pairs it only with a tensor marked
        # alike), except where an inverse Transpose read it, whose output it now is (and
        # whose name it takes).
        exit_read = {id(x.inputs[0]) for x in exits}
        for node in region.nodes:
            marked = [i for i, o in enumerate(node.outputs) if id(o) not in exit_read]
            if marked:
                node.metadata_props[LAYOUT_KEY] = json.dumps(
                    {"outputs": marked, "perm": region.inverse})
        names = {id(v): v.name for v in region.outputs()}
        for v in region.outputs():
            v.name = rw.unique_name(f"{v.name}_sunk")
        for v in kept:  # readers in the region's old layout get it back, under its old name
            t = ir.node("Transpose", [v], attributes={"perm": list(region.perm)},
                        name=rw.unique_node_name(f"{v.producer().name or 'region'}/transpose"))
            t.outputs[0].name = names[id(v)]
            t.outputs[0].type = v.type
            t.outputs[0].shape = v.shape
            for u in list(v.uses()):
                if u.node is not t and id(u.node) not in region.ids and \
                        not region.exit(u.node):
                    u.node.replace_input_with(u.idx, t.outputs[0])
            graph.insert_after(v.producer(), t)
            rw.record(t, [v.producer(), *entries])
        for v in region.outputs():  # the region's tensors are in the other layout now
            if v.shape is not None and len(v.shape) == r:
                v.shape = ir.Shape([v.shape[i] for i in region.inverse])
        for x in exits:
            if not rw.bypass(x, keep_name=True):
                # its output and the region tensor are both graph outputs (two exits of one
                # tensor): it becomes an Identity, the Transpose is the identity now
                ident = ir.node("Identity", [x.inputs[0]], name=rw.unique_node_name(
                    f"{x.name or 'transpose'}/identity"))
                ident.outputs[0].type, ident.outputs[0].shape = x.outputs[0].type, \
                    x.outputs[0].shape
                rw.replace([x], [ident], [x.outputs[0]], [ident.outputs[0]])
        rw.remove(removed)
        for v in _unique(olds):
            rw.drop_if_unused(v)
        rw.modified = True


def _renumbered(node: ir.Node, values: list[int], perm: list[int]) -> list[int]:
    """A Reduce's axes or a Pad's pads in the Transpose's input layout: axis ``a`` after the
    Transpose is axis ``perm[a]`` before it."""
    r = len(perm)
    if node.op_type == "Pad":
        out = [0] * (2 * r)
        for a in range(r):
            out[perm[a]], out[r + perm[a]] = values[a], values[r + a]
        return out
    return sorted(perm[a % r] for a in values)


def _unique(values: Iterable[ir.Value]) -> list[ir.Value]:
    return list({id(v): v for v in values}.values())
