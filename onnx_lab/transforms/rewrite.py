"""The rewrite toolkit: :class:`Rewrite`, the context a pass edits the graph through, which
records which nodes each new node came from. Importable from :mod:`onnx_lab.transforms.base`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.provenance import ORIGIN_KEY, node_origin
from onnx_lab.core.values import overridable


def _fresh(base: str, taken: set[str]) -> str:
    """``base``, else ``base_1``, ``base_2``... whichever is not in ``taken`` (then taken)."""
    name, k = base, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


class Rewrite:
    """Editing helpers for a pass, recording provenance of every node it creates or changes.

    Attributes:
        model: the LabModel being rewritten (a clone; its index reflects the state before the
            rewrite, so look nodes up by id before changing them).
        notes: messages for the result.
    """

    def __init__(self, model: LabModel) -> None:
        self.model = model
        self.notes: list[str] = []
        self._ids_before = {id(e.node): nid for nid, e in model.index.entries.items()}
        self._records: dict[int, tuple[ir.Node, list[str], list[str]]] = {}
        self._names: set[str] = set(model.index.values) | {
            n for g in model.index.graphs.values() for n in g.initializers}
        self.modified = False

    # -- provenance ---------------------------------------------------------------------
    def record(self, node: ir.Node, sources: Iterable[ir.Node]) -> None:
        """Declare that ``node`` (new or changed) stands for ``sources`` (nodes of the input)."""
        step_ids: list[str] = []
        orig: list[str] = []
        for s in sources:
            sid = self._ids_before.get(id(s))
            if sid is None and id(s) in self._records:  # a node created earlier in this pass
                _, s_ids, s_orig = self._records[id(s)]
                step_ids += [x for x in s_ids if x not in step_ids]
                orig += [x for x in s_orig if x not in orig]
                continue
            if sid is None:
                continue
            if sid not in step_ids:
                step_ids.append(sid)
            orig += [x for x in node_origin(s, sid) if x not in orig]
        self._records[id(node)] = (node, step_ids, orig)
        node.metadata_props[ORIGIN_KEY] = json.dumps(orig)
        self.modified = True

    # -- names and values ---------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """A tensor/initializer name not used in the model yet."""
        return _fresh(base, self._names)

    def unique_node_name(self, base: str) -> str:
        """A node name not used in the model yet (so it becomes the node's id)."""
        if not hasattr(self, "_node_names"):
            self._node_names = {e.node.name for e in self.model.index.entries.values()
                                if e.node.name} | set(self.model.index.entries)
        return _fresh(base, self._node_names)

    def add_initializer(self, graph: ir.Graph, base_name: str, array: np.ndarray, *,
                        exact: bool = False) -> ir.Value:
        """Register a new initializer holding ``array`` in ``graph``.

        With ``exact=True`` the name is ``base_name`` itself (the caller has freed it, e.g. by
        removing the node that produced a value of that name).
        """
        if exact:
            name = base_name
            self._names.add(name)
        else:
            name = self.unique_name(base_name)
        # ir.Tensor, not ir.tensor: for an array they build the same tensor, and ir.tensor's
        # three checks against onnx_ir's runtime protocols (~30 µs each on Python 3.11) cost
        # more than the tensor (light ShuffleNet's fold: 14 ms of them, 3 ms without)
        tensor = ir.Tensor(np.asarray(array, order="C"), name=name)
        value = ir.Value(name=name, shape=tensor.shape, type=ir.TensorType(tensor.dtype),
                         const_value=tensor)
        graph.register_initializer(value)
        if (self.model.ir.ir_version or 0) < 4:
            # IR < 4 requires every initializer to be listed as a graph input too.
            graph.inputs.append(value)
        self.modified = True
        return value

    def drop_if_unused(self, value: ir.Value | None) -> bool:
        """Remove an initializer, or a Constant node, whose value nothing uses any more.

        Graph inputs (but IR < 4 initializers, listed as inputs by rule) and outputs are kept.
        Returns True when something was removed.
        """
        if value is None or value.uses() or value.is_graph_output() or overridable(value):
            return False
        if value.is_initializer():
            graph = value.graph
            if graph is not None and value.name in graph.initializers:
                if value.is_graph_input():  # IR < 4: the initializer's required input entry
                    graph.inputs.remove(value)
                graph.initializers.pop(value.name)
                self.modified = True
                return True
            return False
        prod = value.producer()
        if prod is not None and prod.op_type == "Constant" and prod.graph is not None \
                and all(not o.uses() and not o.is_graph_output() for o in prod.outputs):
            prod.graph.remove(prod, safe=True)
            self.modified = True
            return True
        return False

    def set_const_input(self, node: ir.Node, index: int, array: np.ndarray,
                        base_name: str | None = None) -> ir.Value:
        """Make input ``index`` of ``node`` the constant ``array``.

        An initializer used only by ``node`` is updated in place (it keeps its name); otherwise
        a new initializer is added next to the node and the old constant is dropped when
        nothing else uses it. The input slot is appended when the node has fewer inputs.
        """
        graph = node.graph
        old = node.inputs[index] if index < len(node.inputs) else None
        array = np.asarray(array, order="C")
        if old is not None and old.is_initializer() and not old.is_graph_input() \
                and not old.is_graph_output() and old.graph is graph \
                and all(u.node is node for u in old.uses()) and len(old.uses()) == 1:
            tensor = ir.Tensor(array, name=old.name)  # (as in add_initializer)
            old.const_value = tensor
            old.shape = tensor.shape
            old.type = ir.TensorType(tensor.dtype)
            self.modified = True
            return old
        name = base_name or (old.name if old is not None and old.name else
                             f"{node.name or node.op_type}_in{index}")
        new = self.add_initializer(graph, name, array)
        if index < len(node.inputs):
            node.replace_input_with(index, new)
        else:
            node.resize_inputs(index + 1)
            node.replace_input_with(index, new)
        self.drop_if_unused(old)
        return new

    # -- structural edits ---------------------------------------------------------------
    def bypass(self, node: ir.Node, input_index: int = 0, output_index: int = 0, *,
               keep_name: bool = False) -> bool:
        """Remove ``node`` by wiring its input ``input_index`` to every use of its output.

        When the output is a graph output, the input value takes over the output's name (so
        model outputs keep their names). Returns False (and changes nothing) when that is not
        possible (the input is itself a graph input, initializer or output).

        ``keep_name=True`` is for fusions, where the node producing the input now computes
        what ``node`` computed (a Conv with the BatchNormalization folded in): the input value
        then takes the removed output's name whenever it is a node output of this graph, so a
        tensor name keeps meaning the same values across versions.
        """
        graph = node.graph
        out = node.outputs[output_index]
        src = node.inputs[input_index]
        if src is None or graph is None:
            return False
        if keep_name and not out.is_graph_output() and src.producer() is not None \
                and src.graph is graph and not src.is_graph_output():
            name = out.name
            out.replace_all_uses_with(src)
            out.name = None
            src.name = name
        elif out.is_graph_output():
            # Renaming a value of an enclosing graph from inside a body would break the
            # outer graph; graph inputs/initializers/outputs must keep their own names.
            if src.is_graph_input() or src.is_graph_output() or src.is_initializer() \
                    or src.graph is not graph:
                return False
            name = out.name
            out.replace_all_uses_with(src, replace_graph_outputs=True)
            out.name = None
            src.name = name
            # A graph output needs a type: keep the declared one.
            if out.type is not None:
                src.type = out.type
            if out.shape is not None:
                src.shape = out.shape
        else:
            out.replace_all_uses_with(src)
        graph.remove(node, safe=True)
        self.modified = True
        return True

    def remove(self, nodes: ir.Node | Iterable[ir.Node]) -> None:
        """Remove nodes whose outputs are no longer used."""
        nodes = [nodes] if isinstance(nodes, ir.Node) else list(nodes)
        # Remove per graph as one set, so chains (a -> b, both unused outside) can go together.
        by_graph: dict[int, tuple[ir.Graph, list[ir.Node]]] = {}
        for n in nodes:
            if n.graph is None:
                continue
            by_graph.setdefault(id(n.graph), (n.graph, []))[1].append(n)
        for graph, group in by_graph.values():
            graph.remove(group, safe=True)
        self.modified = True

    def replace(self, old_nodes: Sequence[ir.Node], new_nodes: Sequence[ir.Node],
                old_values: Sequence[ir.Value], new_values: Sequence[ir.Value]) -> None:
        """Replace ``old_nodes`` by ``new_nodes`` (inserted after the last old node), rewiring
        ``old_values`` to ``new_values`` (graph outputs keep their names) and recording that
        every new node comes from all old nodes."""
        graph = old_nodes[0].graph
        for n in new_nodes:
            self.record(n, old_nodes)
        # Insert after the last old node in graph order: the new nodes read the old nodes'
        # inputs, which may be produced between the old nodes (e.g. a Constant bias).
        olds = {id(n) for n in old_nodes}
        last = old_nodes[-1]
        for n in graph:
            if id(n) in olds:
                last = n
        ir.convenience.replace_nodes_and_values(graph, last, list(old_nodes),
                                                list(new_nodes), list(old_values),
                                                list(new_values))
        self.modified = True
