"""eliminate_dead_nodes: remove nodes whose outputs reach no graph output."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import STANDARD_DOMAINS, walk
from onnx_lab.transforms.passes._util import freed_bytes

# Standard ONNX ops have no side effects, so an unused result can go; custom-domain ops might
# (I/O, state), so they are kept.
_PURE_DOMAINS = (*STANDARD_DOMAINS, "ai.onnx.ml")


def _body_nodes(node: ir.Node) -> list[ir.Node]:
    out: list[ir.Node] = []
    for attr in node.attributes.values():
        graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else \
            list(attr.value) if attr.type == ir.AttributeType.GRAPHS else []
        for g in graphs:
            for n in g:
                out.append(n)
                out.extend(_body_nodes(n))
    return out


def dead_nodes(model: LabModel) -> list[tuple[str, ir.Node]]:
    """Nodes (in topological order) whose outputs reach no graph output, chains included."""
    dead: set[int] = set()  # id() of dead nodes and of nodes inside dead nodes' bodies
    found: list[tuple[str, ir.Node]] = []
    # Reverse topological order: readers are decided before the nodes they read from (body
    # nodes follow their owner in the index order, so they are decided before it too).
    for nid, node in reversed(list(walk(model))):
        if node.domain not in _PURE_DOMAINS or not node.outputs:
            continue
        if all(not o.is_graph_output() and all(id(u.node) in dead for u in o.uses())
               for o in node.outputs):
            dead.add(id(node))
            dead.update(id(n) for n in _body_nodes(node))
            found.append((nid, node))
    found.reverse()
    # Nodes inside a dead owner's body go with the owner; report only the outermost.
    inner = set()
    for _, node in found:
        inner.update(id(n) for n in _body_nodes(node))
    return [(nid, n) for nid, n in found if id(n) not in inner]


@register_pass("eliminate_dead_nodes")
class EliminateDeadNodes(LabPass):
    r"""Remove nodes whose outputs reach no graph output (dead chains too, bodies included).

    ### Dead nodes (`eliminate_dead_nodes`)

    A node is dead when none of its outputs reaches a graph output — directly or through other
    nodes. Walking the graph backwards from the outputs finds whole dead chains at once
    (`/dead/Mul → /dead/Relu` in sample:convnet); connected dead nodes form one match, because a
    dead node that feeds another cannot go alone. Nodes inside If/Loop bodies are checked against
    their body's outputs, and a value read by a live body keeps its producer alive.

    **Why it is safe.** Standard ONNX ops have no side effects: a result nobody reads changes
    nothing. Nodes of custom domains are kept (they may have effects)."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("dead_nodes",)
    presets = {"safe": (30, 90)}  # before the fusions, and again after them (transforms/presets.py)

    no_match_reason = "no dead node: every node contributes to a graph output"

    def find(self, model: LabModel) -> list[Match]:
        nodes = dead_nodes(model)
        if not nodes:
            return []
        # Group dead nodes into connected clusters: a cluster is removed as one unit (a dead
        # node that feeds another dead node cannot go alone).
        ids = {id(n): nid for nid, n in nodes}
        parent = {nid: nid for nid, _ in nodes}

        def root(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for nid, node in nodes:
            for o in node.outputs:
                for u in o.uses():
                    other = ids.get(id(u.node))
                    if other is not None:
                        parent[root(other)] = root(nid)
        groups: dict[str, list[tuple[str, ir.Node]]] = {}
        for nid, node in nodes:
            groups.setdefault(root(nid), []).append((nid, node))
        out = []
        for members in groups.values():
            anchor = members[0][0]
            member_nodes = [n for _, n in members]
            inputs = [v for n in member_nodes for v in n.inputs]
            saving = freed_bytes(inputs, member_nodes)
            desc = (f"{len(members)} node(s) whose results reach no graph output: "
                    + ", ".join(m for m, _ in members[:6]) + (" ..." if len(members) > 6 else ""))
            out.append(Match(f"{self.name}:{anchor}", "dead_nodes", self.name,
                             [m for m, _ in members], anchor, desc, len(members), saving,
                             {"nodes": member_nodes}))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            nodes = [n for n in m.data["nodes"] if n.graph is not None]
            group = {id(n) for n in nodes}
            if not nodes or any(o.is_graph_output() or any(id(u.node) not in group
                                                            for u in o.uses())
                                for n in nodes for o in n.outputs):
                continue
            inputs = [v for n in nodes for v in n.inputs]
            rw.remove(nodes)
            for v in inputs:
                rw.drop_if_unused(v)
