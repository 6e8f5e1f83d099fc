"""Removing a node: ``removal_plan`` (what a removal reconnects or cuts) and the
``remove_node`` pass. Importable from :mod:`onnx_lab.transforms.edit`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnx_ir as ir

from onnx_lab.core.index import _node_subgraphs
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import value_type
from onnx_lab.errors import InputError, PassError
from onnx_lab.transforms._edit_base import _EditPass, _node
from onnx_lab.transforms.base import (
    Match,
    Param,
    Rewrite,
    register_pass,
)
from onnx_lab.transforms.extract import _ir_dtype


def removal_plan(model: LabModel, node_id: str, mode: str = "reconnect",
                 dims: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What ``remove_node(node_id, mode=mode)`` would remove, without removing it. ``dims``:
    the Lab's dim values, which size the shapes a reconnection must keep (``[b, a]`` and
    ``[a, b]`` differ once ``a`` and ``b`` are known to).

    Returns:
        dict with nodes (node ids removed, the node first), outputs (graph outputs that go
        away), initializers (initializers nothing uses any more), reconnect (for mode
        ``"reconnect"``: the tensor that takes the node's place, else None) and problem (why
        the removal would be refused, or None).

    Example:
        >>> removal_plan(lab.model, "/head/Softmax", mode="cascade")["nodes"]
    """
    node = _node(model, node_id)
    idx = model.index
    graph_path = idx.entry(node_id).graph
    graph = node.graph
    plan: dict[str, Any] = {"nodes": [node_id], "outputs": [], "initializers": [],
                            "reconnect": None, "problem": None}
    if mode not in ("reconnect", "cascade", "inputs"):
        raise InputError(f"remove_node mode must be 'reconnect', 'cascade' or 'inputs', got "
                         f"{mode!r}.", fix="reconnect: wire the input to the consumers; "
                         "cascade: also remove everything downstream; inputs: the outputs "
                         "become model inputs.")
    if mode == "reconnect":
        data = node.inputs[0] if node.inputs else None
        used = [v for v in node.outputs if v.uses() or v.is_graph_output()]
        if data is None:
            plan["problem"] = f"{node_id} has no first input to reconnect"
        elif any(v is not node.outputs[0] for v in used):
            plan["problem"] = (f"outputs {[v.name for v in used if v is not node.outputs[0]]} "
                               f"of {node_id} besides the first are used")
        elif node.outputs and used:
            out = node.outputs[0]
            types = model.types(dict(dims)) if dims else model.types()
            ti, to = value_type(model, data, types), value_type(model, out, types)
            if ti is not None and to is not None:
                if ti.dtype and to.dtype and ti.dtype != to.dtype:
                    plan["problem"] = (f"its input {data.name!r} is {ti.dtype} and its output "
                                       f"{out.name!r} is {to.dtype}")
                elif ti.shape is not None and to.shape is not None and (
                        len(ti.shape) != len(to.shape) or any(
                            isinstance(x, int) and isinstance(y, int) and x != y
                            for x, y in zip(ti.shape, to.shape))):
                    plan["problem"] = (f"its input {data.name!r} has shape {list(ti.shape)} "
                                       f"and its output {out.name!r} {list(to.shape)}")
            if plan["problem"] is None and out.is_graph_output() and (
                    data.is_graph_input() or data.is_graph_output() or data.is_initializer()
                    or data.graph is not graph):
                plan["problem"] = (f"its output {out.name!r} is a graph output and its input "
                                   f"{data.name!r} is a model input, initializer or output: "
                                   "removing the node would disconnect the graph output")
        if data is not None:
            plan["reconnect"] = data.name
    elif mode == "inputs":
        through = [v.name for v in node.outputs if v.is_graph_output()]
        if through:
            plan["problem"] = (f"its output(s) {through} are graph outputs: as model inputs "
                               "they would be passed straight through, and the graph output "
                               "would be disconnected from the model")
    elif mode == "cascade":
        seen = [node_id]
        todo = [node_id]
        while todo:
            for s in idx.successors(todo.pop()):
                if s not in seen and idx.entry(s).graph == graph_path:
                    seen.append(s)
                    todo.append(s)
        gone = {id(idx.node(n)) for n in seen}
        # nodes inside the removed nodes' bodies go with them: their reads count as removed
        gone.update(id(b) for n in seen for b in _body_nodes(idx.node(n)))
        # then the producers only the removed nodes read (they would be left dead)
        changed = True
        while changed:
            changed = False
            for n in list(seen):
                for v in _reads(idx.node(n)):
                    p = v.producer()
                    if p is None or id(p) in gone or p.graph is not graph:
                        continue
                    outs = [o for o in p.outputs if o.uses() or o.is_graph_output()]
                    if all(not o.is_graph_output() and all(id(u.node) in gone
                                                           for u in o.uses()) for o in outs):
                        seen.append(idx.node_id(p))
                        gone.add(id(p))
                        gone.update(id(b) for b in _body_nodes(p))
                        changed = True
        plan["nodes"] = seen
        plan["outputs"] = [v.name for n in seen for v in idx.node(n).outputs
                           if v.is_graph_output()]
        if graph is not None and len(plan["outputs"]) >= len(graph.outputs):
            plan["problem"] = (f"removing {node_id} with the {len(seen) - 1} node(s) it feeds "
                               "or alone needs removes every output of the graph")
        elif graph_path and plan["outputs"]:
            # a body's outputs are its owner's contract (a Loop's carried values and scan
            # outputs, a branch's results): none can go
            plan["problem"] = (f"removing {node_id} with the {len(seen) - 1} node(s) it feeds "
                               f"removes output(s) {plan['outputs']} of the body "
                               f"{graph_path!r}, which its If/Loop/Scan needs")
        # initializers only the removed nodes (their bodies included) read
        for n in seen:
            for v in _reads(idx.node(n)):
                if v.is_initializer() and not v.is_graph_output() \
                        and v.name not in plan["initializers"] \
                        and all(id(u.node) in gone for u in v.uses()):
                    plan["initializers"].append(v.name)
    return plan


def _body_nodes(node: ir.Node) -> list[ir.Node]:
    """Every node inside ``node``'s If/Loop/Scan bodies, nested bodies included."""
    out: list[ir.Node] = []
    for _, body in _node_subgraphs(node):
        for b in body:
            out.append(b)
            out.extend(_body_nodes(b))
    return out


def _reads(node: ir.Node) -> list[ir.Value]:
    """The values ``node`` reads: its inputs, and those of enclosing graphs its bodies read
    (a weight an If's branches share with the main graph)."""
    out = [v for v in node.inputs if v is not None]
    seen = {id(v) for v in out}
    inside = _bodies(node)
    for b in _body_nodes(node):
        for v in b.inputs:
            if v is not None and id(v.graph) not in inside and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def _bodies(node: ir.Node) -> set[int]:
    """``id`` of every body of ``node``, nested ones included."""
    return {id(body) for b in [node, *_body_nodes(node)] for _, body in _node_subgraphs(b)}


@register_pass("remove_node", kind="edit")
class RemoveNode(_EditPass):
    """Remove a node: reconnect its input to its users, or cascade, or make its outputs inputs."""

    params = (Param("node_id", str, "", "the node"),
              Param("reconnect", bool, True, "wire input 0 to the users of output 0; "
                    "False: the node's outputs become model inputs (mode='inputs')"),
              Param("mode", str, "", "'reconnect' (default), 'cascade' (the node and "
                    "everything after it; see removal_plan) or 'inputs'"))
    semantics_preserving = False

    def _mode(self) -> str:
        return self.options["mode"] or ("reconnect" if self.options["reconnect"] else "inputs")

    def find(self, model: LabModel) -> list[Match]:
        nid = self.options["node_id"]
        plan = removal_plan(model, nid, self._mode(), self.context.dims)
        if plan["problem"]:
            fix = ("Add an output before it first (add_output), or remove a node further "
                   "down. The model is unchanged." if self._mode() == "cascade" else
                   "Add an output before it and remove this one (add_output, then "
                   "remove_output), or use mode='cascade'. The model is unchanged."
                   if self._mode() == "inputs" else
                   "Use reconnect=False (mode='inputs': its outputs become model inputs) or "
                   "mode='cascade' (see removal_plan), or remove_output / rename tensors "
                   "first. The model is unchanged.")
            raise PassError(f"Cannot remove {nid} ({self._mode()}): {plan['problem']}.",
                            fix=fix)
        return [Match(f"remove_node:{nid}", "remove_node", self.name, list(plan["nodes"]), nid,
                      f"remove {', '.join(plan['nodes'])}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        nid = self.options["node_id"]
        node = _node(model, nid)
        graph = node.graph
        mode = self._mode()
        if mode == "reconnect":
            if not node.outputs[0].uses() and not node.outputs[0].is_graph_output():
                rw.remove(node)
            elif not rw.bypass(node):
                raise PassError(f"Cannot reconnect around {nid}: its input "
                                f"{node.inputs[0].name!r} is a model input, initializer or "
                                "output that would have to take over the output's name.",
                                fix="Use mode='inputs', or rename tensors first.")
            for v in list(node.inputs):
                rw.drop_if_unused(v)
            return
        if mode == "cascade":
            plan = removal_plan(model, nid, mode, self.context.dims)
            nodes = [_node(model, n) for n in plan["nodes"]]
            for n in nodes:
                for v in n.outputs:
                    while v.is_graph_output():
                        graph.outputs.remove(v)
            inputs = [v for n in nodes for v in _reads(n)]
            for n in nodes:  # the bodies go too: they stop reading the enclosing graphs
                inside = _bodies(n)
                for b in _body_nodes(n):
                    for i, v in enumerate(b.inputs):
                        if v is not None and id(v.graph) not in inside:
                            b.replace_input_with(i, None)
            rw.remove(nodes)
            for v in inputs:
                rw.drop_if_unused(v)
            return

        types = model.types()  # the new inputs need a declared type and shape
        for out in node.outputs:
            if not (out.uses() or out.is_graph_output()):
                continue
            info = value_type(model, out, types)
            shape, typ = out.shape, out.type
            if shape is None and info is not None and info.shape is not None:
                shape = ir.Shape(list(info.shape))
            if typ is None and info is not None and info.dtype is not None:
                typ = ir.TensorType(_ir_dtype(info.dtype))
            new = ir.Value(name=None, shape=shape, type=typ)
            name = out.name
            out.replace_all_uses_with(new, replace_graph_outputs=True)
            out.name = None
            new.name = name
            graph.inputs.append(new)
        graph.remove(node, safe=True)
        rw.modified = True
