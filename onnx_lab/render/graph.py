"""The graph model of a rendering: drawn nodes, edges and clusters, built from the model index.

No graphviz here: :mod:`onnx_lab.render.dot` turns a :class:`GraphView` into DOT text. The
builder reads only :class:`~onnx_lab.core.index.ModelIndex` maps (producer, consumers,
values, entries) and touches each selected node and each of its inputs/outputs once, so a view
costs O(selected nodes + their edges), never a rescan of the graph per node.

Drawn element keys (also the DOT node ids and what :attr:`Rendering.edges` names):
``<node_id>`` for an op drawn on its own, ``input:<tensor>``, ``output:<tensor>``,
``outer:<tensor>`` (a value a body reads from an enclosing graph), ``weight:<tensor>``
(``show_initializers=True``), ``scope:<key>`` (a collapsed group), ``stub:up:<key>`` /
``stub:down:<key>`` ("+N more" at the boundary of the view).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx_ir as ir

from onnx_lab.core.index import node_scope
from onnx_lab.core.shapes import dtype_name, shape_tuple, type_at
from onnx_lab.core.values import foldable_nodes

if TYPE_CHECKING:
    from onnx_lab.core.index import ModelIndex
    from onnx_lab.core.model import LabModel
    from onnx_lab.core.shapes import TensorInfo

__all__ = ["DrawNode", "DrawEdge", "Cluster", "GraphView", "Group", "build_view", "op_label",
           "alias_dims",
           "shape_text", "owner_in_graph", "is_folded_constant"]

_SHORT_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                 "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
                 "bool": "bool", "string": "str"}

# Attributes never worth a line in a label (numerical-stability constants, training knobs).
_SKIP_ATTRS = {"epsilon", "momentum", "training_mode", "spatial", "is_test", "seed",
               "allowzero", "auto_pad"}
_CONTROL_FLOW = {"If", "Loop", "Scan"}


@dataclass
class DrawNode:
    """One drawn element.

    Attributes:
        key: unique id in the view (see the module docstring).
        kind: 'op', 'input', 'output', 'outer', 'weight', 'box' or 'stub'.
        title: first label line (op type, tensor name, scope).
        lines: further label lines (name, attributes, weights, counts).
        node_ids: model node ids this element stands for (one for an op, all members of a box).
        op_type: the op type of an 'op' element.
        cluster: key of the enclosing cluster, or None.
        tooltip: hover text (full node id / tensor name).
    """

    key: str
    kind: str
    title: str
    lines: list[str] = field(default_factory=list)
    node_ids: list[str] = field(default_factory=list)
    op_type: str | None = None
    cluster: str | None = None
    tooltip: str = ""
    fill: str | None = None
    font_color: str | None = None
    outline: str | None = None
    value: float | None = None
    value_text: str | None = None


@dataclass
class DrawEdge:
    """An edge between two drawn elements carrying one or more tensors."""

    src: str
    dst: str
    tensors: list[str]
    label: str = ""
    dashed: bool = False
    backward: bool = False  # runs against the model's order: drawn reversed with dir=back


@dataclass
class Cluster:
    """A name-scope frame drawn around nodes (nested through ``parent``)."""

    key: str
    label: str
    parent: str | None


@dataclass
class Group:
    """A collapsed box: its key, display name and member node ids."""

    key: str
    name: str
    members: list[str]


@dataclass
class GraphView:
    """Everything a backend needs to draw one view; see :func:`build_view`."""

    graph: str
    nodes: dict[str, DrawNode]
    edges: list[DrawEdge]
    clusters: dict[str, Cluster]
    notes: list[str] = field(default_factory=list)
    title: str | None = None
    legend: object | None = None  # overlays.ColorScale when an overlay is drawn
    aliases: dict[str, str] = field(default_factory=dict)  # short name -> long symbolic dim

    def op_node_ids(self) -> list[str]:
        """Model node ids drawn on their own (not inside a box)."""
        return [n.node_ids[0] for n in self.nodes.values() if n.kind == "op"]


# ----------------------------------------------------------------------------- label parts
def shape_text(info: TensorInfo | None) -> str:
    """``TensorInfo(float32, (1, 64, 56, 56))`` -> ``'1×64×56×56 f32'`` ('' when unknown)."""
    if info is None:
        return ""
    dt = _SHORT_DTYPES.get(info.dtype or "", info.dtype or "")
    if info.shape is None:
        return dt
    dims = "×".join("?" if d is None else str(d) for d in info.shape)
    return f"{dims or 'scalar'} {dt}".strip()


# Symbolic dims longer than this (``floor(floor(height/2 - 1/2)/2)+1``) are drawn as aliases
# (``h1``...) with a legend: spelled out they take over the edge labels and widen the layout.
ALIAS_FROM = 10


def _alias_stem(expr: str) -> str:
    """``'floor(height/2)+1'`` -> ``'h'`` (first letter of the first name in it), else ``'d'``."""
    m = re.search(r"[A-Za-z_][A-Za-z_0-9]*", expr.replace("floor", "").replace("ceil", ""))
    return (m.group(0)[0] if m else "d").lower()


def alias_dims(view: GraphView, *, longer_than: int = ALIAS_FROM) -> dict[str, str]:
    """Replace long symbolic dims in the edge labels and input/output lines of ``view``.

    The same expression always gets the same alias in one view (``h1``, ``h2``, ``w1``...,
    numbered in order of appearance); ``view.aliases`` maps alias -> expression (the legend).

    Example:
        >>> alias_dims(view)
        {'h1': 'floor(height/2 - 1/2)+1', 'w1': 'floor(width/2 - 1/2)+1'}
    """
    aliases: dict[str, str] = {}
    by_expr: dict[str, str] = {}
    counts: Counter[str] = Counter()

    def short(text: str) -> str:
        if not text or "×" not in text and len(text) <= longer_than:
            return text
        dims, sep, dt = text.rpartition(" ")
        if not sep:
            dims, dt = text, ""
        parts = []
        for d in dims.split("×"):
            if len(d) > longer_than and not d.isdigit():
                if d not in by_expr:
                    stem = _alias_stem(d)
                    counts[stem] += 1
                    by_expr[d] = f"{stem}{counts[stem]}"
                    aliases[by_expr[d]] = d
                d = by_expr[d]
            parts.append(d)
        return "×".join(parts) + (f" {dt}" if dt else "")

    for e in view.edges:
        e.label = short(e.label)
    for n in view.nodes.values():
        if n.kind in ("input", "output"):
            n.lines = [short(x) for x in n.lines]
        elif n.kind == "outer":  # "from enclosing graph", then its shape
            n.lines = n.lines[:1] + [short(x) for x in n.lines[1:]]
    view.aliases.update(aliases)
    return aliases


def _dims(shape) -> str:
    s = shape_tuple(shape) or ()
    return "×".join("?" if d is None else str(d) for d in s) or "scalar"


def _ints(v) -> list[int]:
    return [int(x) for x in v]


def _fmt_list(v: list[int]) -> str:
    if v and all(x == v[0] for x in v):
        return str(v[0])
    return "×".join(str(x) for x in v)


def _attr_lines(node: ir.Node) -> list[str]:
    """The attributes that matter for understanding the op, compactly."""
    a = {k: v for k, v in node.attributes.items() if not v.is_ref()}
    op = node.op_type
    parts: list[str] = []

    def ints(name: str) -> list[int] | None:
        x = a.get(name)
        return _ints(x.value) if x is not None and x.type == ir.AttributeType.INTS else None

    def one(name: str):
        x = a.get(name)
        return x.value if x is not None else None

    if op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger",
              "QLinearConv"):
        k = ints("kernel_shape")
        if k:
            parts.append(f"k {'×'.join(map(str, k))}")
        s = ints("strides")
        if s and any(x != 1 for x in s):
            parts.append(f"s {_fmt_list(s)}")
        p = ints("pads")
        if p and any(p):
            parts.append(f"p {_fmt_list(p)}")
        d = ints("dilations")
        if d and any(x != 1 for x in d):
            parts.append(f"d {_fmt_list(d)}")
        g = one("group")
        if g is not None and int(g) != 1:
            parts.append(f"g {int(g)}")
        ap = one("auto_pad")
        if ap and ap != "NOTSET":
            parts.append(str(ap).lower())
    elif op == "Transpose":
        perm = ints("perm")
        if perm is not None:
            parts.append(f"perm {perm}")
    elif op == "Cast":
        to = one("to")
        if to is not None:
            parts.append(f"to {dtype_name(int(to))}")
    elif op == "Gemm":
        for name in ("transA", "transB"):
            if one(name):
                parts.append(name)
        for name in ("alpha", "beta"):
            x = one(name)
            if x is not None and float(x) != 1.0:
                parts.append(f"{name} {float(x):g}")
    elif op == "Constant":
        t = one("value")
        if isinstance(t, ir.TensorProtocol):
            parts.append(_constant_text(t))
        else:
            for k, v in a.items():
                parts.append(f"{k} {_short_value(v.value)}")
    elif op not in _CONTROL_FLOW:
        for name, attr in a.items():
            if name in _SKIP_ATTRS:
                continue
            if attr.type in (ir.AttributeType.INT, ir.AttributeType.STRING):
                parts.append(f"{name} {_short_value(attr.value)}")
            elif attr.type == ir.AttributeType.INTS:
                parts.append(f"{name} {_ints(attr.value)}")
            elif attr.type == ir.AttributeType.FLOAT and op not in ("LayerNormalization",
                                                                     "BatchNormalization"):
                parts.append(f"{name} {float(attr.value):g}")
            if len(parts) >= 3:
                break
    # Wrap onto lines of reasonable width so boxes stay narrow.
    lines: list[str] = []
    cur = ""
    for p in parts:
        if cur and len(cur) + len(p) > 28:
            lines.append(cur)
            cur = p
        else:
            cur = f"{cur}  {p}" if cur else p
    if cur:
        lines.append(cur)
    return lines


def _short_value(v) -> str:
    if isinstance(v, bytes):
        v = v.decode(errors="replace")
    s = str(v)
    return s if len(s) <= 24 else s[:21] + "…"


def _constant_text(t: ir.TensorProtocol) -> str:
    """A small constant's value, or its dtype and shape."""
    n = 1
    for d in shape_tuple(t.shape) or ():
        n *= d if isinstance(d, int) else 1
    if n <= 4 and t.nbytes <= 64 and not isinstance(t, ir.ExternalTensor):
        try:
            vals = t.numpy().ravel().tolist()
            text = ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in vals)
            return f"[{text}]" if len(shape_tuple(t.shape) or ()) else text
        except Exception:  # noqa: BLE001 - unreadable data: fall back to the shape
            pass
    dt = _SHORT_DTYPES.get(dtype_name(t.dtype) or "", "")
    # float32 is the norm for weights: name the dtype only when it is something else.
    return _dims(t.shape) if dt == "f32" else f"{_dims(t.shape)} {dt}".strip()


_WEIGHT_NAMES = {
    ("Conv", 1): "W", ("Conv", 2): "B", ("ConvTranspose", 1): "W", ("ConvTranspose", 2): "B",
    ("Gemm", 1): "W", ("Gemm", 2): "B", ("MatMul", 1): "W", ("MatMul", 0): "W",
    ("BatchNormalization", 1): "scale", ("BatchNormalization", 2): "B",
    ("BatchNormalization", 3): "mean", ("BatchNormalization", 4): "var",
    ("LayerNormalization", 1): "scale", ("LayerNormalization", 2): "B",
    ("Gather", 0): "table", ("Add", 1): "B", ("Add", 0): "B", ("Mul", 1): "scale",
}


def _weight_line(op: str, pos: int, name: str, dims: str) -> str:
    tag = _WEIGHT_NAMES.get((op, pos))
    if tag is None and "Constant" in name:
        tag = "const"  # exporter-made names such as '/h.3/Constant_2_output_0' say nothing
    if tag is None:
        tail = re.split(r"[./:]", name)[-1] or name
        tag = tail if len(tail) <= 10 else tail[:9] + "…"
    return f"{tag} {dims}"


def op_label(index: ModelIndex, node_id: str, weights: list[tuple[int, str, str]],
             body_sizes: Mapping[str, int] | None = None) -> tuple[str, list[str]]:
    """Title and lines of an op node: op type, short name, attributes, weights, bodies.

    Args:
        weights: (input position, tensor name, dims text) of the weights read by the node.
        body_sizes: graph path -> node count (including nested bodies), for If/Loop/Scan.
    """
    e = index.entries[node_id]
    node = e.node
    title = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    lines: list[str] = []
    short = node_id.rsplit("/", 1)[-1]
    if node.op_type in _CONTROL_FLOW or not re.fullmatch(re.escape(node.op_type) + r"(_\d+)*",
                                                         short):
        lines.append(node_id if node.op_type in _CONTROL_FLOW else short)
    lines.extend(_attr_lines(node))
    if len(weights) > 2 and len({d for _, _, d in weights}) == 1:
        tags = "·".join(_weight_line(node.op_type, p, n, "").strip() for p, n, _ in weights)
        lines.append(f"{tags if len(tags) <= 24 else f'{len(weights)} weights'} "
                     f"{weights[0][2]}")
    else:
        lines.extend(_weight_line(node.op_type, pos, name, d) for pos, name, d in weights)
    if node.op_type in _CONTROL_FLOW and body_sizes is not None:
        prefix = node_id if not e.graph or node_id.startswith(e.graph + "/") \
            else f"{e.graph}/{node_id}"
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                path = f"{prefix}/{attr.name}"
                n = body_sizes.get(path, 0)
                lines.append(f"{attr.name}: {n} node{'s' if n != 1 else ''}")
            elif attr.type == ir.AttributeType.GRAPHS:
                lines.append(f"{attr.name}: {len(attr.value)} graphs")
    return title, lines


def owner_in_graph(index: ModelIndex, node_id: str, graph: str) -> str | None:
    """The node of ``graph`` that ``node_id`` is (or lies inside, through bodies); else None."""
    e = index.entries.get(node_id)
    while e is not None:
        if e.graph == graph:
            return e.node_id
        if not e.graph:
            return None
        e = index.entries.get(e.graph.rsplit("/", 1)[0])
    return None


def is_folded_constant(node: ir.Node) -> bool:
    """A Constant without inputs: drawn inside its consumers' labels, like a weight."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and not node.inputs


# ----------------------------------------------------------------------------- builder
def build_view(model: LabModel, graph: str, selected: Iterable[str], *,
               groups: Mapping[str, Group] | None = None,
               types: Mapping[str, TensorInfo] | None = None,
               show_initializers: bool = False, show_shapes: bool = True,
               clusters: bool = True, cluster_depth: int = 3,
               expanded: Iterable[str] = ()) -> GraphView:
    """Build the drawn graph of ``selected`` node ids of ``graph``.

    Args:
        selected: node ids of ``graph`` to draw (topological order is kept).
        groups: collapsed boxes (group key -> Group); members must be in ``selected``.
        types: tensor -> TensorInfo for edge labels (``model.types(dims, shapes)``).
        show_initializers: draw weights and Constant nodes as nodes of their own instead of
            summarizing them inside their consumers.
        clusters: frame individually drawn nodes by name scope (at most ``cluster_depth``
            levels below their common prefix).
        expanded: scope keys drawn open inside a collapsed view (framed as clusters).
    """
    idx = model.index
    g = idx.graph(graph)
    draw = _Drawing(idx, graph, types or {}, selected, groups, show_initializers)
    for nid in draw.sel:
        if not draw.absorbed(nid):
            draw.add_node(nid)
    draw.add_outputs(g)
    draw.add_stubs()
    edge_list = list(draw.edges.values())
    if groups:
        computed = model.cached(("render", "constant_nodes"), lambda: frozenset(
            nid for nid, _ in foldable_nodes(model).values())) if graph == "" else frozenset()
        _orient_edges(idx, draw.nodes, edge_list, computed)
    if show_shapes:
        _label_edges(edge_list, draw.types, graph)
    view = GraphView(graph, draw.nodes, edge_list, {})
    alias_dims(view)
    if clusters:
        _assign_clusters(view, idx, cluster_depth, tuple(expanded))
    if draw.folded:
        view.notes.append(f"{len(draw.folded)} Constant node(s) drawn inside their consumers "
                          "(show_initializers=True draws them).")
    return view


class _Drawing:
    """The drawn nodes and edges of :func:`build_view` as they are added: the selected nodes
    (or their boxes), the values they take from outside the selection, the graph outputs
    and the stubs of the producers and consumers not drawn."""

    def __init__(self, idx: ModelIndex, graph: str, types: Mapping[str, TensorInfo],
                 selected: Iterable[str], groups: Mapping[str, Group] | None,
                 show_initializers: bool) -> None:
        self.idx, self.graph, self.types = idx, graph, types
        self.show_initializers = show_initializers
        self.sel = list(dict.fromkeys(selected))
        self.sel_set = set(self.sel)
        groups = dict(groups or {})
        self.unit: dict[str, str] = {}
        for gk, grp in groups.items():
            for m in grp.members:
                self.unit[m] = f"scope:{gk}"
        # Constant nodes (selected or not) are summarized inside their consumers, like weights.
        self.fold = not show_initializers
        self.folded: set[str] = set()
        self.body_sizes = _body_sizes(idx, self.sel)
        self.nodes: dict[str, DrawNode] = {}
        self.edges: dict[tuple[str, str], DrawEdge] = {}
        self.hidden_up: dict[str, set[str]] = {}
        self.hidden_down: dict[str, set[str]] = {}
        self.graph_inputs = {v.name for v in idx.graph(graph).inputs if v.name}
        self.outer_inits = _initializer_names(idx, graph)
        # Boxes first so their keys exist before edges point at them.
        for gk, grp in groups.items():
            self.nodes[f"scope:{gk}"] = DrawNode(f"scope:{gk}", "box", grp.name,
                                                 node_ids=list(grp.members), tooltip=grp.name)

    def _type(self, name: str) -> TensorInfo | None:
        """The type of ``name`` as this graph reads it."""
        return type_at(self.types, name, self.graph)

    def absorbed(self, nid: str) -> bool:
        # A Constant goes inside a drawn consumer; with none drawn (the user selected the
        # Constant itself) it is drawn as a node, or the view would be silently empty.
        idx = self.idx
        node = idx.entries[nid].node
        if not (self.fold and is_folded_constant(node)):
            return False
        sel = self.sel_set  # (not `sel_set - {nid}`: a copy per consumer made this O(n^2))
        return any((o := owner_in_graph(idx, c, self.graph)) != nid and o in sel
                   for out in node.outputs if out.name
                   for c in idx.consumers_in(out.name, idx.entries[nid].graph))

    def add_edge(self, src: str, dst: str, tensor: str, dashed: bool = False) -> None:
        if src == dst:
            return
        e = self.edges.get((src, dst))
        if e is None:
            self.edges[(src, dst)] = DrawEdge(src, dst, [tensor], dashed=dashed)
        elif tensor not in e.tensors:
            e.tensors.append(tensor)

    def add_node(self, nid: str) -> None:
        """Node ``nid`` (or its box), the values it takes and the edges into it."""
        idx, graph, nodes = self.idx, self.graph, self.nodes
        e = idx.entries[nid]
        node = e.node
        me = self.unit.get(nid, nid)
        weights: list[tuple[int, str, str]] = []
        ins = [(i, v.name) for i, v in enumerate(node.inputs) if v is not None and v.name]
        ins.extend((-1, name) for name in e.implicit_inputs)
        for pos, t in ins:
            # as read in this graph: sibling If branches may define the same name
            p = idx.producer_in(t, e.graph)
            pe = idx.entries.get(p) if p is not None else None
            if pe is not None and pe.graph == graph:
                if self.fold and is_folded_constant(pe.node):
                    self.folded.add(p)
                    if me == nid:
                        weights.append((pos, t, _const_dims(pe.node)))
                elif p in self.sel_set:
                    self.add_edge(self.unit.get(p, p), me, t)
                else:
                    self.hidden_up.setdefault(me, set()).add(p)
                continue
            if pe is not None and owner_in_graph(idx, p, graph) is not None:
                continue  # produced inside a body of this graph: not a value of this graph
            if t in self.outer_inits:
                if self.show_initializers:
                    key = f"weight:{t}"
                    if key not in nodes:
                        v = idx.values[t]
                        nodes[key] = DrawNode(key, "weight", t.rsplit("/", 1)[-1],
                                              [_dims(v.shape)], tooltip=t)
                    self.add_edge(key, me, t)
                elif me == nid:
                    v = idx.values.get(t)
                    c = v.const_value if v is not None else None
                    weights.append((pos, t, _constant_text(c) if c is not None else
                                    _dims(v.shape if v is not None else None)))
                continue
            if t in self.graph_inputs:
                key = f"input:{t}"
                if key not in nodes:
                    nodes[key] = DrawNode(key, "input", t, [shape_text(self._type(t))],
                                          tooltip=f"graph input {t}")
                self.add_edge(key, me, t)
                continue
            if t in idx.value_graph and idx.scope(t, graph) != graph:
                key = f"outer:{t}"
                if key not in nodes:
                    nodes[key] = DrawNode(key, "outer", t,
                                          ["from enclosing graph", shape_text(self._type(t))],
                                          tooltip=f"outer value {t}")
                self.add_edge(key, me, t, dashed=True)
        if me == nid:
            body_sizes = self.body_sizes
            title, lines = op_label(idx, nid, weights, body_sizes)
            tip = nid
            if body_sizes is not None and node.op_type in _CONTROL_FLOW:
                prefix = nid if not graph or nid.startswith(graph + "/") else f"{graph}/{nid}"
                bodies = [p for p in body_sizes if p.rsplit("/", 1)[0] == prefix]
                tip += "".join(f"\ngraph={p!r}" for p in bodies)
            nodes[nid] = DrawNode(nid, "op", title, lines, [nid], node.op_type, tooltip=tip)
        for out in node.outputs:
            for c in idx.consumers_in(out.name, e.graph) if out.name else ():
                owner = owner_in_graph(idx, c, graph)
                if owner is None or owner == nid:
                    continue
                if owner not in self.sel_set:
                    self.hidden_down.setdefault(me, set()).add(owner)

    def add_outputs(self, g: ir.Graph) -> None:
        """Graph outputs produced by drawn nodes."""
        idx = self.idx
        for name in (v.name for v in g.outputs if v.name):
            p = idx.producer_in(name, self.graph)
            if p is None or p not in self.sel_set or idx.entries[p].graph != self.graph \
                    or self.absorbed(p):
                continue
            key = f"output:{name}"
            self.nodes[key] = DrawNode(key, "output", name, [shape_text(self._type(name))],
                                       tooltip=f"graph output {name}")
            self.add_edge(self.unit.get(p, p), key, name)

    def add_stubs(self) -> None:
        """``+N more``: the producers and consumers of drawn nodes that are not drawn."""
        for me, hidden in self.hidden_up.items():
            key = f"stub:up:{me}"
            self.nodes[key] = DrawNode(key, "stub", f"+{len(hidden)} more",
                                       node_ids=sorted(hidden),
                                       tooltip=f"{len(hidden)} producers not drawn")
            self.add_edge(key, me, "", dashed=True)
        for me, hidden in self.hidden_down.items():
            key = f"stub:down:{me}"
            self.nodes[key] = DrawNode(key, "stub", f"+{len(hidden)} more",
                                       node_ids=sorted(hidden),
                                       tooltip=f"{len(hidden)} consumers not drawn")
            self.add_edge(me, key, "", dashed=True)


def _body_sizes(idx: ModelIndex, sel: list[str]) -> dict[str, int] | None:
    """Body sizes for If/Loop labels: one pass over the (cheap) entry list per view that
    needs it; None when no control-flow node is drawn."""
    if not any(idx.entries[n].node.op_type in _CONTROL_FLOW for n in sel):
        return None
    per_graph = Counter(e.graph for e in idx.entries.values())
    body_sizes = {}
    for path in idx.graphs:
        if path:
            body_sizes[path] = sum(c for gp, c in per_graph.items()
                                   if gp == path or gp.startswith(path + "/"))
    return body_sizes


def _orient_edges(idx: ModelIndex, nodes: Mapping[str, DrawNode],
                  edge_list: list[DrawEdge], constant: set[str] | frozenset = frozenset()
                  ) -> None:
    """Collapsed boxes can form cycles ('/h.3' -> '/h.3/ln_2' -> ... -> '/h.3'). Edges that run
    against the model's topological order are emitted reversed with dir=back, so ranks
    follow the model from inputs to outputs instead of dot breaking cycles arbitrarily
    (constraint=false would do the same but trips "lost edge" errors of dot 2.43 in
    clusters)."""
    # A box is placed by the median position of its members: adopted helpers (shape
    # arithmetic computed early) must not pull a late layer to the top; nor may the members
    # that compute from constants alone (``constant``: weights built with ConstantOfShape,
    # which exporters put early: light ResNet-50's block 4 was drawn above block 3).
    first: dict[str, float] = {}
    for n in nodes.values():
        if n.kind in ("op", "box"):
            members = [m for m in n.node_ids if m not in constant] or list(n.node_ids)
            topo = sorted(idx.entries[m].topo for m in members)
            first[n.key] = topo[len(topo) // 2]
    for e in edge_list:
        a, b = first.get(e.src), first.get(e.dst)
        if a is not None and b is not None and a > b:
            e.backward = True


def _label_edges(edge_list: list[DrawEdge], types: Mapping[str, TensorInfo], graph: str = ""
                 ) -> None:
    """Each edge's label: its tensor's shape as read in ``graph``, or how many tensors it
    carries."""
    for e in edge_list:
        real = [t for t in e.tensors if t]
        if not real:
            continue
        if len(real) == 1:
            e.label = shape_text(type_at(types, real[0], graph))
        else:
            e.label = f"{len(real)} tensors"


def _const_dims(node: ir.Node) -> str:
    attr = node.attributes.get("value")
    if attr is not None and attr.type == ir.AttributeType.TENSOR:
        return _constant_text(attr.value)
    return "const"


def _initializer_names(idx: ModelIndex, graph: str) -> set[str]:
    """Initializers visible from ``graph`` (its own and those of enclosing graphs)."""
    names: set[str] = set()
    path = graph
    while True:
        names.update(idx.graphs[path].initializers)
        if not path:
            return names
        owner = idx.entries.get(path.rsplit("/", 1)[0])
        path = owner.graph if owner is not None else ""


def _scope_parts(scope: str) -> list[str]:
    return [p for p in scope.split("/") if p]


def _assign_clusters(view: GraphView, idx: ModelIndex, depth: int,
                     expanded: tuple[str, ...]) -> None:
    """Frame individually drawn ops by name scope (nested, at most ``depth`` levels)."""
    # Boxes stay unframed: frames around boxes that feed each other across frames trip
    # "lost edge" errors in dot 2.43.
    scopes = {n.key: _scope_parts(node_scope(idx.entries[n.node_ids[0]].node))
              for n in view.nodes.values() if n.kind == "op"}
    if not scopes:
        return
    # Levels shared by every drawn op would frame everything once more: skip them, unless the
    # view is an expanded scope, which keeps its own frame as the anchor of the view.
    common = 0
    parts_list = [p for p in scopes.values() if p]
    if parts_list and len(parts_list) == len(scopes):
        first = parts_list[0]
        while common < len(first) and all(len(p) > common and p[common] == first[common]
                                          for p in parts_list):
            common += 1
    exp_parts = [_scope_parts(x) for x in expanded]
    counts: Counter[str] = Counter()
    chosen: dict[str, list[str]] = {}
    for key, parts in scopes.items():
        start = common
        for ep in exp_parts:
            if parts[:len(ep)] == ep:
                start = min(start, len(ep) - 1)
        chain = ["/" + "/".join(parts[:i + 1]) for i in range(start, min(len(parts),
                                                                           start + depth))]
        chosen[key] = chain
        counts.update(chain)
    for key, chain in chosen.items():
        # A frame around a single op is noise: keep only frames holding two or more ops,
        # and always the frame of an expanded scope.
        chain = [c for c in chain if counts[c] > 1 or c in expanded]
        parent = None
        for c in chain:
            if c not in view.clusters:
                view.clusters[c] = Cluster(c, c.rsplit("/", 1)[-1], parent)
            parent = c
        view.nodes[key].cluster = parent
