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
from collections import Counter
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
        parent: body graph path -> the path of the graph holding its owner node.
        shared: names defined in more than one graph (sibling If branches may reuse a name:
            optimum's merged decoders define 372 names in both branches of T5's decoder).
            :meth:`scope` tells which definition a node reads; ``producer``, ``values`` and
            ``value_graph`` hold the first one.
        defined_at: ``(graph path, name) -> ir.Value`` for every definition of a shared name.
        bodies: ``(graph path, first output name of the owner, attribute) -> body path``
            (``"then_branch"``; ``"body.0"`` for a GRAPHS attribute's first): the body paths of
            serialized copies of the graph, whose nodes carry no ids.
    """

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.entries: dict[str, NodeEntry] = {}
        self.graphs: dict[str, ir.Graph] = {"": model.graph}
        self.producer: dict[str, str] = {}
        self.consumers: dict[str, list[str]] = {}
        self.values: dict[str, ir.Value] = {}
        self.value_graph: dict[str, str] = {}
        self._id_of: dict[int, str] = {}
        self.parent: dict[str, str] = {}
        self.shared: set[str] = set()
        self.defined_at: dict[tuple[str, str], ir.Value] = {}
        self.producer_at: dict[tuple[str, str], str] = {}
        self.bodies: dict[tuple[str, str, str], str] = {}
        all_names: list[str] = []
        self._bodies: dict[int, list[tuple[str, ir.Graph]]] = {}  # id(node) -> its bodies
        _scan(model.graph, all_names, self._bodies)
        names = Counter(n for n in all_names if n)
        self._unique_names = {k for k, c in names.items() if c == 1}
        self._taken: set[str] = set(self._unique_names)
        self._walk(model.graph, "")
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
        name = node.name
        if name and name in self._unique_names:
            return name
        base = f"{node.op_type}_{position}"
        nid = f"{graph}/{base}" if graph else base
        k = 1
        while nid in self._taken:
            nid = f"{graph}/{base}_{k}" if graph else f"{base}_{k}"
            k += 1
        self._taken.add(nid)
        return nid

    def _define(self, value: ir.Value | None, graph: str, producer: str | None = None) -> None:
        if value is None or not value.name:
            return
        name = value.name
        first = self.value_graph.setdefault(name, graph)
        if self.values.setdefault(name, value) is not value and first != graph:
            # Defined again in another graph (a sibling branch): kept per graph.
            if name not in self.shared:
                self.shared.add(name)
                self.defined_at[(first, name)] = self.values[name]
                if name in self.producer:
                    self.producer_at[(first, name)] = self.producer[name]
            self.defined_at.setdefault((graph, name), value)
            if producer is not None:
                self.producer_at.setdefault((graph, name), producer)

    def _walk(self, graph: ir.Graph, path: str) -> None:
        # One pass per graph, in the loops below rather than helpers: this runs once per
        # node of the model at open (200,000 nodes in an unfused LLM export).
        for v in graph.inputs:
            self._define(v, path)
        for v in graph.initializers.values():
            self._define(v, path)
        nodes = list(graph)
        unique = self._unique_names
        ids = [name if (name := n.name) and name in unique else self._make_id(n, path, i)
               for i, n in enumerate(nodes)]
        id_of = self._id_of
        for n, nid in zip(nodes, ids):
            id_of[id(n)] = nid
        # The bodies of each node that has some, with the outer values each reads.
        has = self._bodies
        bodies = {i: [(sub_name, sub, _outer_values(sub)) for sub_name, sub in has[id(n)]]
                  for i, n in enumerate(nodes) if id(n) in has} if has else {}
        entries, producer, consumers = self.entries, self.producer, self.consumers
        values, value_graph = self.values, self.value_graph
        for i in _topo_positions(nodes, bodies):
            node, nid = nodes[i], ids[i]
            entry = NodeEntry(nid, node, path, i, len(entries), [])
            entries[nid] = entry
            for out in node.outputs:
                name = out.name
                if name:
                    if name not in producer:
                        producer[name] = nid
                    if name not in values:
                        values[name] = out
                        value_graph[name] = path
                    else:  # defined before: in a sibling graph, kept per graph (_define)
                        self._define(out, path, nid)
            for inp in node.inputs:
                # Mul(x, x) reads x twice but is one consumer.
                if inp is not None and (name := inp.name):
                    users = consumers.get(name)
                    if users is None:
                        consumers[name] = [nid]
                    elif users[-1] != nid:
                        users.append(nid)
            for sub_name, sub, outer in bodies.get(i, ()):
                # Derived ids of body nodes already carry their graph path.
                owner = nid if (not path or nid.startswith(path + "/")) else f"{path}/{nid}"
                sub_path = f"{owner}/{sub_name}"
                self.graphs[sub_path] = sub
                self.parent[sub_path] = path
                if node.outputs and node.outputs[0].name:
                    self.bodies[(path, node.outputs[0].name, sub_name)] = sub_path
                self._walk(sub, sub_path)
                seen = set(entry.implicit_inputs)
                entry.implicit_inputs.extend(x for x in outer if x not in seen)
        for v in graph.outputs:
            # An output is a definition only where nothing defines it (a body's output is
            # its own node's value or an outer one: never a second definition).
            if v.name and v.name not in self.value_graph:
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

    def scope(self, name: str, graph: str = "") -> str:
        """The path of the graph whose definition of ``name`` a node in ``graph`` reads: its
        own graph's, else the nearest enclosing one's (``value_graph`` for a name defined
        once)."""
        if name not in self.shared:
            return self.value_graph.get(name, "")
        path: str | None = graph
        while path is not None:
            if (path, name) in self.defined_at:
                return path
            path = self.parent.get(path)
        return self.value_graph.get(name, "")

    def path_of(self, value: ir.Value) -> str:
        """The path of the graph that defines ``value`` (``""`` when it is not in a body)."""
        g = value.graph
        if g is None or g is self.model.graph:
            return ""
        return self.graph_path(g) or ""

    def graph_path(self, graph: object) -> str | None:
        """The path of ``graph`` (the main graph or a body: ``graphs``' key), None for a graph
        that is not the model's."""
        if not hasattr(self, "_paths"):
            self._paths = {id(body): p for p, body in self.graphs.items()}
        return self._paths.get(id(graph))

    def producer_in(self, name: str, graph: str = "") -> str | None:
        """The node id producing ``name`` as read by a node in ``graph`` (see :meth:`scope`)."""
        if name not in self.shared:
            return self.producer.get(name)
        return self.producer_at.get((self.scope(name, graph), name))

    def consumers_in(self, name: str, graph: str) -> list[str]:
        """The node ids reading the definition of ``name`` made in ``graph``."""
        users = self.consumers.get(name, [])
        if name not in self.shared:
            return list(users)
        return [c for c in users if self.scope(name, self.entries[c].graph) == graph]

    def stored_in_order(self) -> bool:
        """Whether every graph stores its nodes in topological order, as ONNX requires
        (converters that append nodes at the end, such as float16 conversion keeping float
        inputs and outputs, write graphs onnxruntime runs but onnx's checker and onnx_ir's
        cloner refuse)."""
        last: dict[str, int] = {}
        for e in self.entries.values():
            if e.position < last.get(e.graph, -1):
                return False
            last[e.graph] = e.position
        return True

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


def _scan(graph: ir.Graph, names: list[str], bodies: dict[int, list[tuple[str, ir.Graph]]]
          ) -> None:
    """The names of every node of ``graph`` and its bodies, and the bodies of each node that
    has some (by ``id(node)``), in one pass."""
    for node in graph:
        names.append(node.name)
        if node.attributes and (subs := _node_subgraphs(node)):
            bodies[id(node)] = subs
            for _, sub in subs:
                _scan(sub, names, bodies)


_GRAPH_TYPES = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)


def _node_subgraphs(node: ir.Node) -> list[tuple[str, ir.Graph]]:
    """The bodies of ``node`` as (attribute name, graph); ``name.i`` for GRAPHS."""
    attrs = node.attributes
    if not attrs:
        return []
    out: list[tuple[str, ir.Graph]] = []
    for attr in attrs.values():
        if attr.type in _GRAPH_TYPES:
            out.extend(_subgraphs(attr))
    return out


def _subgraphs(attr) -> list[tuple[str, ir.Graph]]:
    if attr.type == ir.AttributeType.GRAPH:
        return [(attr.name, attr.value)]
    if attr.type == ir.AttributeType.GRAPHS:
        return [(f"{attr.name}.{i}", g) for i, g in enumerate(attr.value)]
    return []


def _outer_values(graph: ir.Graph) -> list[str]:
    """Names of values a body reads from enclosing graphs, in first-read order."""
    defined: set[str] = {v.name for v in graph.inputs if v.name}
    defined.update(graph.initializers)
    used: dict[str, None] = {}  # ordered, with set lookups
    for node in graph:
        for inp in node.inputs:
            if inp is not None and inp.name and inp.name not in defined and inp.name not in used:
                used[inp.name] = None
        for _, sub in _node_subgraphs(node):
            for name in _outer_values(sub):
                if name not in defined and name not in used:
                    used[name] = None
        defined.update(o.name for o in node.outputs if o.name)
    return [u for u in used if u not in defined]


def _topo_positions(nodes: list[ir.Node],
                    bodies: dict[int, list[tuple[str, ir.Graph, list[str]]]]) -> list[int]:
    """Kahn's algorithm, preferring stored order; nodes in cycles keep their stored order.

    ``bodies``: node position -> its bodies with the outer values each reads (a node depends
    on the producers of those too).
    """
    made_by: dict[str, int] = {}
    early: list[tuple[str, int]] = []  # (name, reader) read before any node made it
    for i, n in enumerate(nodes):
        for v in n.inputs:
            if v is not None and (name := v.name) and name not in made_by:
                early.append((name, i))
        for _, _, outer in bodies.get(i, ()):
            early.extend((name, i) for name in outer if name not in made_by)
        for o in n.outputs:
            if (name := o.name) and name not in made_by:
                made_by[name] = i
    # Every node after all it reads (the usual case): Kahn's order is the stored one.
    if all(made_by.get(name, reader) == reader for name, reader in early):
        return list(range(len(nodes)))
    deps: list[set[int]] = []
    for i, n in enumerate(nodes):
        names = [v.name for v in n.inputs if v is not None and v.name]
        for _, _, outer in bodies.get(i, ()):
            names.extend(outer)
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
