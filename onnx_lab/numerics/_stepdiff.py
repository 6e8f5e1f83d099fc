"""What a step changed, node by node: the main-graph nodes it created, changed or rewired and
the initializers it changed (:func:`step_diff`). Region verification cuts its region from
this; the whole-model check and the selection judge (:mod:`onnx_lab.numerics.selection`) read
it to know which nodes downstream of a flipped selection the step rewrote. Importable from
:mod:`onnx_lab.numerics.region`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel


@dataclass
class StepDiff:
    """What a step changed, node by node (main graph), from the two versions.

    Attributes:
        nodes: ids (in ``after``) of main-graph nodes created, changed or rewired.
        constants: initializers of ``after`` that are new or hold another tensor.
        bodies: whether a node inside an If/Loop/Scan body was added, removed or changed.
        names: every tensor name whose value may differ from before the step (outputs of the
            changed nodes, the changed initializers).
    """

    nodes: list[str]
    constants: list[str]
    bodies: bool
    names: set[str] = field(default_factory=set)


def _names(values: Any) -> tuple[str, ...]:
    return tuple(v.name if v is not None else "" for v in values)


def _same_attr(a: ir.Attr, b: ir.Attr) -> bool:
    if a.type != b.type:
        return False
    if a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return True  # a body's nodes are compared as nodes of their own (StepDiff.bodies)
    if a.type in (ir.AttributeType.TENSOR, ir.AttributeType.TENSORS):
        x, y = (a.value if a.type == ir.AttributeType.TENSORS else [a.value]), \
            (b.value if b.type == ir.AttributeType.TENSORS else [b.value])
        return len(x) == len(y) and all(
            s is t or (s.dtype == t.dtype and s.shape == t.shape
                       and np.array_equal(s.numpy(), t.numpy())) for s, t in zip(x, y))
    return a.value == b.value


def _same_node(a: ir.Node, b: ir.Node) -> bool:
    if (a.op_type, a.domain, a.overload) != (b.op_type, b.domain, b.overload):
        return False
    if _names(a.inputs) != _names(b.inputs) or _names(a.outputs) != _names(b.outputs):
        return False
    if a.attributes.keys() != b.attributes.keys():
        return False
    return all(_same_attr(x, b.attributes[k]) for k, x in a.attributes.items())


def step_diff(before: LabModel, after: LabModel, result: Any = None) -> StepDiff:
    """The nodes and initializers a step changed (see :class:`StepDiff`).

    The provenance of ``result`` (new or changed node ids) is trusted as changed; every other
    node is compared with the node of the same id before the step (passes keep the ids of
    the nodes they do not touch), so a consumer rewired by a removal is found too. A change
    inside an If/Loop/Scan body (a body node added, removed or changed, a body's
    initializers or its inputs and outputs) counts as a change of the main-graph node that
    owns the body, which then computes other values; ``bodies`` is True only when such an
    owner cannot be named in both versions."""
    b_idx, a_idx = before.index, after.index
    prov = dict(getattr(result, "provenance", None) or {})
    nodes: list[str] = []
    owners: set[str] = set()
    lost = False  # a changed body whose main-graph owner is not in both versions
    a_owners, b_owners = _owners(a_idx), _owners(b_idx)

    def owned(path: str, owners_of: list[str]) -> None:
        nonlocal lost
        o = _owner(path, owners_of)
        if o is None or o not in a_owners or o not in b_owners:
            lost = True
        else:
            owners.add(o)

    for nid in a_idx.topo_order(None):
        e = a_idx.entries[nid]
        be = b_idx.entries.get(nid)
        changed = nid in prov or be is None or be.graph != e.graph \
            or not _same_node(e.node, be.node)
        if not changed:
            continue
        if e.graph:
            owned(e.graph, a_owners)
        else:
            nodes.append(nid)
    for nid, be in b_idx.entries.items():
        if be.graph and (nid not in a_idx.entries or a_idx.entries[nid].graph != be.graph):
            owned(be.graph, b_owners)  # a body node removed
    for path, g in a_idx.graphs.items():
        if path and not _same_body(g, b_idx.graphs.get(path)):
            owned(path, a_owners)
    for path in b_idx.graphs:
        if path and path not in a_idx.graphs:
            owned(path, b_owners)
    if not lost and owners:
        nodes = [nid for nid in a_idx.topo_order("") if nid in owners or nid in set(nodes)]
    b_init = before.graph.initializers
    constants = [n for n, v in after.graph.initializers.items()
                 if (bv := b_init.get(n)) is None or bv.const_value is not v.const_value]
    names = set(constants)
    for nid in nodes:
        names.update(v.name for v in a_idx.entries[nid].node.outputs if v.name)
    return StepDiff(nodes, constants, lost, names)


def _owners(idx: Any) -> list[str]:
    """Main-graph node ids that own bodies, longest first (a node id may hold ``/``)."""
    return sorted((nid for nid, e in idx.entries.items() if not e.graph
                   and any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                           for a in e.node.attributes.values())), key=len, reverse=True)


def _owner(path: str, owners: list[str]) -> str | None:
    """The main-graph node that owns the body at ``path`` (``"<owner id>/<attribute>..."``)."""
    return next((o for o in owners if path.startswith(o + "/")), None)


def _same_body(a: ir.Graph, b: ir.Graph | None) -> bool:
    """Whether a body kept its inputs, outputs and initializers (its nodes are compared as
    nodes of their own)."""
    if b is None or _names(a.inputs) != _names(b.inputs) or _names(a.outputs) != _names(b.outputs):
        return False
    if a.initializers.keys() != b.initializers.keys():
        return False
    return all(v.const_value is b.initializers[k].const_value for k, v in a.initializers.items())
