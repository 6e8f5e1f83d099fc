"""The one model index every feature reads: stable node ids, graph paths, producers, consumers.

Node ids: a node's name when it is non-empty and unique in the whole model (all graphs);
otherwise ``{op_type}_{position}`` for main-graph nodes and ``{graph}/{op_type}_{position}``
for nodes inside bodies, where position is the node's place in its graph's stored order. Both
survive save/load, the first as long as names stay unique.

Graph paths: ``""`` is the main graph; a body is ``{node_id}/{attribute}`` of the node that owns
it (``"If_0/then_branch"``), nested bodies chain (``"Loop_2/body/If_0/else_branch"``).
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import onnx_ir as ir

from onnx_lab.errors import unknown_name

__all__ = ["ModelIndex", "NodeEntry", "node_scope"]


@dataclass
class NodeEntry:
    """One node of the model as the index sees it."""

    node_id: str
    node: ir.Node
    graph: str
    position: int  # place in its graph's stored order
    topo: int  # place in the whole-model order (bodies follow their owner)
    implicit_inputs: list[str] = field(default_factory=list)  # outer values used by bodies


def node_scope(node: ir.Node) -> str:
    """Name-scope prefix of a node (``/encoder/layer.3/attention`` for ``.../MatMul``).

    Uses the name's ``/`` hierarchy (TorchScript exports); falls back to the
    ``pkg.torch.onnx.name_scopes`` metadata of dynamo exports.
    """
    name = node.name or ""
    if "/" in name.strip("/"):
        return name.rsplit("/", 1)[0]
    scopes = node.metadata_props.get("pkg.torch.onnx.name_scopes")
    if scopes:
        parts = [p.strip(" '\"") for p in scopes.strip("[]").split(",")]
        # Dynamo lists the root module first ('', or torch's placeholder
        # '_empty_nn_module_stack_from_metadata_hook' for ops outside any module), then each
        # module level by its qualified name ('layer.0', 'layer.0.attention',
        # 'layer.0.attention.key') and the op last; keep each level's own name so scopes read
        # like TorchScript's ('/layer.0/attention/key').
        local, parent = [], ""
        for part in (p for p in parts[1:-1] if p):
            local.append(part[len(parent) + 1:] if parent and part.startswith(parent + ".")
                         else part)
            parent = part
        if local:
            return "/" + "/".join(local)
    return ""


class ModelIndex:
    """Stable ids, graph paths, producer/consumer maps and topological order of a model.

    Built once per :class:`~onnx_lab.core.model.LabModel`; do not build your own maps.

    Attributes:
        entries: node_id -> NodeEntry, in whole-model topological order.
        graphs: graph path -> ir.Graph.
        producer: tensor name -> node_id that produces it.
        consumers: tensor name -> node_ids that read it (body nodes reading outer values too).
        values: tensor name -> ir.Value (first definition; names are SSA in valid models).
        value_graph: tensor name -> graph path where it is defined.
        undefined: names read by some node but defined nowhere (only in invalid models).
    """

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.entries: dict[str, NodeEntry] = {}
        self.graphs: dict[str, ir.Graph] = {"": model.graph}
        self.producer: dict[str, str] = {}
        self.consumers: dict[str, list[str]] = defaultdict(list)
        self.values: dict[str, ir.Value] = {}
        self.value_graph: dict[str, str] = {}
        self._id_of: dict[int, str] = {}
        names = Counter(n.name for n in _all_nodes(model.graph) if n.name)
        self._unique_names = {k for k, c in names.items() if c == 1}
        self._taken: set[str] = set(self._unique_names)
        self._walk(model.graph, "")
        self.consumers = dict(self.consumers)
        # Values read by nodes but defined nowhere (invalid models, e.g. a dangling input
        # left by manual surgery): indexed anyway so every node input has a row.
        self.undefined: set[str] = set()
        for name, users in self.consumers.items():
            if name not in self.values:
                entry = self.entries[users[0]]
                value = next(v for v in entry.node.inputs if v is not None and v.name == name)
                self.values[name] = value
                self.value_graph[name] = entry.graph
                self.undefined.add(name)

    # -- building -------------------------------------------------------------------------
    def _make_id(self, node: ir.Node, graph: str, position: int) -> str:
        if node.name and node.name in self._unique_names:
            return node.name
        base = f"{node.op_type}_{position}"
        nid = f"{graph}/{base}" if graph else base
        k = 1
        while nid in self._taken:
            nid = f"{graph}/{base}_{k}" if graph else f"{base}_{k}"
            k += 1
        self._taken.add(nid)
        return nid

    def _define(self, value: ir.Value | None, graph: str) -> None:
        if value is None or not value.name:
            return
        self.values.setdefault(value.name, value)
        self.value_graph.setdefault(value.name, graph)

    def _walk(self, graph: ir.Graph, path: str) -> None:
        for v in graph.inputs:
            self._define(v, path)
        for v in graph.initializers.values():
            self._define(v, path)
        nodes = list(graph)
        ids = [self._make_id(n, path, i) for i, n in enumerate(nodes)]
        for n, nid in zip(nodes, ids):
            self._id_of[id(n)] = nid
        for i in _topo_positions(nodes):
            node, nid = nodes[i], ids[i]
            entry = NodeEntry(nid, node, path, i, len(self.entries))
            self.entries[nid] = entry
            for out in node.outputs:
                if out.name:
                    self.producer.setdefault(out.name, nid)
                    self._define(out, path)
            for inp in node.inputs:
                # Mul(x, x) reads x twice but is one consumer.
                if inp is not None and inp.name and nid not in self.consumers[inp.name][-1:]:
                    self.consumers[inp.name].append(nid)
            for attr in node.attributes.values():
                for sub_name, sub in _subgraphs(attr):
                    # Derived ids of body nodes already carry their graph path.
                    owner = nid if (not path or nid.startswith(path + "/")) else f"{path}/{nid}"
                    sub_path = f"{owner}/{sub_name}"
                    self.graphs[sub_path] = sub
                    self._walk(sub, sub_path)
                    entry.implicit_inputs.extend(
                        x for x in _outer_values(sub) if x not in entry.implicit_inputs)
        for v in graph.outputs:
            self._define(v, path)

    # -- queries --------------------------------------------------------------------------
    def node_id(self, node: ir.Node) -> str:
        """The id of an ``ir.Node`` of this model."""
        try:
            return self._id_of[id(node)]
        except KeyError:
            raise unknown_name("node", node.name or node.op_type, self.entries) from None

    def node(self, node_id: str) -> ir.Node:
        """The ``ir.Node`` for ``node_id``; raises UnknownNameError with close matches."""
        return self.entry(node_id).node

    def entry(self, node_id: str) -> NodeEntry:
        try:
            return self.entries[node_id]
        except KeyError:
            raise unknown_name("node id", node_id, self.entries) from None

    def value(self, name: str) -> ir.Value:
        """The ``ir.Value`` named ``name``; raises UnknownNameError with close matches."""
        try:
            return self.values[name]
        except KeyError:
            raise unknown_name("tensor", name, self.values) from None

    def graph(self, path: str) -> ir.Graph:
        """The graph at ``path`` (``""`` main); raises UnknownNameError listing known paths."""
        try:
            return self.graphs[path]
        except KeyError:
            raise unknown_name("graph path", path, self.graphs,
                               fix=f"Known graph paths: {sorted(self.graphs)}.") from None

    def topo_order(self, graph: str | None = "") -> list[str]:
        """Node ids in topological order: of one graph, or of all graphs when ``graph=None``."""
        if graph is None:
            return list(self.entries)
        self.graph(graph)
        return [nid for nid, e in self.entries.items() if e.graph == graph]

    def predecessors(self, node_id: str) -> list[str]:
        """Node ids producing this node's inputs (in the same or an outer graph)."""
        e = self.entry(node_id)
        out: list[str] = []
        for inp in list(e.node.inputs) + [self.values[n] for n in e.implicit_inputs
                                          if n in self.values]:
            if inp is not None and inp.name in self.producer:
                p = self.producer[inp.name]
                if p not in out:
                    out.append(p)
        return out

    def successors(self, node_id: str) -> list[str]:
        """Node ids consuming this node's outputs."""
        out: list[str] = []
        for o in self.entry(node_id).node.outputs:
            for c in self.consumers.get(o.name, ()):
                if c not in out:
                    out.append(c)
        return out

    def __len__(self) -> int:
        return len(self.entries)


def _all_nodes(graph: ir.Graph):
    for node in graph:
        yield node
        for attr in node.attributes.values():
            for _, sub in _subgraphs(attr):
                yield from _all_nodes(sub)


def _subgraphs(attr) -> list[tuple[str, ir.Graph]]:
    if attr.type == ir.AttributeType.GRAPH:
        return [(attr.name, attr.value)]
    if attr.type == ir.AttributeType.GRAPHS:
        return [(f"{attr.name}.{i}", g) for i, g in enumerate(attr.value)]
    return []


def _outer_values(graph: ir.Graph) -> list[str]:
    """Names of values a body reads from enclosing graphs."""
    defined: set[str] = {v.name for v in graph.inputs if v.name}
    defined.update(graph.initializers)
    used: list[str] = []
    for node in graph:
        for inp in node.inputs:
            if inp is not None and inp.name and inp.name not in defined and inp.name not in used:
                used.append(inp.name)
        for attr in node.attributes.values():
            for _, sub in _subgraphs(attr):
                for name in _outer_values(sub):
                    if name not in defined and name not in used:
                        used.append(name)
        defined.update(o.name for o in node.outputs if o.name)
    return [u for u in used if u not in defined]


def _topo_positions(nodes: list[ir.Node]) -> list[int]:
    """Kahn's algorithm, preferring stored order; nodes in cycles keep their stored order."""
    made_by: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o.name:
                made_by.setdefault(o.name, i)
    deps: list[set[int]] = []
    for i, n in enumerate(nodes):
        names = [v.name for v in n.inputs if v is not None and v.name]
        for attr in n.attributes.values():
            for _, sub in _subgraphs(attr):
                names.extend(_outer_values(sub))
        deps.append({made_by[x] for x in names if x in made_by and made_by[x] != i})
    users: list[list[int]] = [[] for _ in nodes]
    indeg = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, u)
    if len(order) < len(nodes):  # a cycle (invalid model): keep the rest in stored order
        seen = set(order)
        order.extend(i for i in range(len(nodes)) if i not in seen)
    return order
