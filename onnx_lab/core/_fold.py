"""Evaluate the small shape-computing subgraphs that ONNX data propagation does not cover.

ONNX shape inference propagates values only through a few ops (Shape, Gather, Concat, Slice,
arithmetic...); a ``Range`` whose limit comes from ``Shape(x)`` (position ids in every
transformer export) stays of unknown length even when every input dim is given. When the input
shapes are concrete, those values are plain small integer tensors: we evaluate just the nodes
that feed the first still-unknown shapes, with onnx's reference evaluator, and hand the results
back to inference as constants. Written here because onnxsim and the ORT optimizer need the
weights and rewrite the model, while this touches only tensors of a few elements.

The main graph and the branches of ``If`` nodes are folded (a branch runs once, with the outer
values of that run: Silero VAD pads its STFT input inside one); never a ``Loop`` or ``Scan``
body, whose values change from one iteration to the next.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._proto import attribute_bodies
from onnx_lab.core._validate import UnreadableTensor

if TYPE_CHECKING:
    from onnx_lab.core.model import LabModel
    from onnx_lab.core.shapes import TensorInfo

logger = logging.getLogger(__name__)

MAX_ELEMENTS = 4096  # shape vectors and index ranges, never activations or weights

_FOLDABLE = frozenset({
    "Shape", "Size", "Constant", "Identity", "Gather", "Unsqueeze", "Squeeze", "Concat",
    "Slice", "Cast", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil", "Sqrt",
    "Range", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
    "Where", "Min", "Max", "ConstantOfShape", "Reshape", "Expand", "ReduceProd", "ReduceSum",
    "ReduceMax", "ReduceMin", "Tile", "Flatten", "Transpose",
})


def _static(info: TensorInfo | None) -> bool:
    return info is not None and not info.dynamic


def _small(info: TensorInfo | None) -> bool:
    return info is not None and info.numel is not None and info.numel <= MAX_ELEMENTS


def _foldable(node: ir.Node) -> bool:
    return (node.domain in ("", "ai.onnx") and node.op_type in _FOLDABLE
            and not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                        for a in node.attributes.values()))


def once_graphs(model: LabModel) -> set[str]:
    """Paths of the graphs that run at most once per model run: the main graph and the
    branches of ``If`` nodes in them (a Loop or Scan body, and what it holds, runs per
    iteration)."""
    idx = model.index
    out = {""}
    for e in idx.entries.values():  # owners come before their bodies
        if e.graph in out and e.node.op_type == "If" and e.node.domain in ("", "ai.onnx"):
            for attr in e.node.attributes.values():
                path = idx.graph_path(attr.value) \
                    if attr.type == ir.AttributeType.GRAPH else None
                if path is not None:
                    out.add(path)
    return out


#: A value of a graph: ``(graph path, name)``. Sibling If branches may define the same name
#: (optimum's merged decoders), so a folded value is known by where it is defined.
Key = tuple[str, str]


def fold_into_bodies(node: onnx.NodeProto, folded: Mapping[Key, np.ndarray],
                     bodies: Mapping[tuple[str, str, str], str], path: str = "") -> None:
    """In the bodies of ``node`` (a serialized If of the graph at ``path``), replace every node
    whose outputs were all folded by Constant nodes holding those values (recursively).
    ``bodies``: the index's ``bodies`` (the path of each body of a serialized node)."""
    owner = node.output[0] if node.output else ""
    for attr in node.attribute:
        for sub_name, body in attribute_bodies(attr):
            sub = bodies.get((path, owner, sub_name))
            if sub is None:
                continue
            nodes: list[onnx.NodeProto] = []
            for n in body.node:
                outs = [o for o in n.output if o]
                if outs and all((sub, o) in folded for o in outs):
                    nodes.extend(onnx.helper.make_node(
                        "Constant", [], [o], value=onnx.numpy_helper.from_array(
                            np.asarray(folded[(sub, o)]), o)) for o in outs)
                else:
                    fold_into_bodies(n, folded, bodies, sub)
                    nodes.append(n)
            del body.node[:]
            body.node.extend(nodes)


def fold_shape_values(model: LabModel, types: Mapping[str, TensorInfo]
                      ) -> dict[Key, np.ndarray]:
    """Values of the small tensors that feed the first unknown shapes of the main graph and
    its If branches (:func:`once_graphs`).

    Returns ``{(graph path, tensor name): array}`` for node outputs that could be evaluated
    (empty when nothing is unknown or nothing can be computed); a name is read in the scope of
    the node that reads it (``ModelIndex.scope``), so sibling branches that define the same
    name each fold their own. Never reads external data.
    """
    # here: core.shapes imports this module
    from onnx_lab.core.shapes import type_at

    idx = model.index
    graphs = once_graphs(model)
    order = [nid for nid in idx.topo_order(None) if idx.entries[nid].graph in graphs]

    def info(name: str, path: str) -> TensorInfo | None:
        return type_at(types, name, path)

    def key(name: str, path: str) -> Key:
        return idx.scope(name, path), name

    known = _weights(model)

    # Frontier: nodes whose inputs all have static types but some output does not.
    wanted: list[tuple[str, str]] = []
    for nid in order:
        e = idx.entries[nid]
        outs = [o.name for o in e.node.outputs if o.name]
        ins = [i.name for i in e.node.inputs if i is not None and i.name]
        if outs and any(not _static(info(o, e.graph)) for o in outs) \
                and all(_static(info(i, e.graph)) for i in ins):
            wanted.extend((i, e.graph) for i in ins
                          if _small(info(i, e.graph)) and key(i, e.graph) not in known)
    return _fold(model, types, wanted, graphs, order, known)


def fold_values(model: LabModel, types: Mapping[str, TensorInfo],
                targets: Sequence[tuple[str, str]]) -> dict[Key, np.ndarray]:
    """The values of ``targets`` (``(name, graph path)`` of tensors the main graph or its If
    branches compute) that fold from the weights and the static shapes in ``types``: a
    TorchScript Loop's trip count, ``Gather(Shape(x), 0)``, once ``x`` is sized. Keyed as
    :func:`fold_shape_values`; a target that does not fold is absent. Never reads external
    data."""
    idx = model.index
    graphs = once_graphs(model)
    order = [nid for nid in idx.topo_order(None) if idx.entries[nid].graph in graphs]
    known = _weights(model)
    folded = _fold(model, types, [t for t in targets if t[1] in graphs], graphs, order, known)
    out = {}
    for name, path in targets:
        key = (idx.scope(name, path), name)
        value = folded.get(key, known.get(key))
        if value is not None:
            out[key] = value
    return out


def _weights(model: LabModel) -> dict[Key, np.ndarray]:
    """The main graph's small readable initializers, by ``("", name)``."""
    known: dict[Key, np.ndarray] = {}
    for name, v in model.graph.initializers.items():
        t = v.const_value
        # An UnreadableTensor's dims disagree with its data: never a source of values.
        if t is not None and not isinstance(t, (ir.ExternalTensor, UnreadableTensor)) \
                and t.size <= MAX_ELEMENTS:
            known[("", name)] = t.numpy()
    return known


def _fold(model: LabModel, types: Mapping[str, TensorInfo], wanted: list[tuple[str, str]],
          graphs: set[str], order: list[str], known: dict[Key, np.ndarray]
          ) -> dict[Key, np.ndarray]:
    """Evaluate what ``wanted`` (``(name, graph path)``) needs, walking back through
    foldable nodes from ``known`` values (updated in place); returns the folded values."""
    from onnx_lab.core.shapes import type_at

    idx = model.index
    if not wanted:
        return {}

    def info(name: str, path: str) -> TensorInfo | None:
        return type_at(types, name, path)

    def key(name: str, path: str) -> Key:
        return idx.scope(name, path), name

    # Walk back from the values the frontier needs, through foldable nodes only.
    nodes: set[str] = set()
    stack = list(wanted)
    while stack:
        name, path = stack.pop()
        pid = idx.producer_in(name, path)
        if key(name, path) in known or pid is None or pid in nodes \
                or idx.entries[pid].graph not in graphs:
            continue
        pe = idx.entries[pid]
        node = pe.node
        if not _foldable(node) or not all(_small(info(o.name, pe.graph))
                                          or not _static(info(o.name, pe.graph))
                                          for o in node.outputs if o.name):
            continue
        nodes.add(pid)
        if node.op_type not in ("Shape", "Size"):  # those need only their input's type
            stack.extend((i.name, pe.graph) for i in node.inputs if i is not None and i.name)

    opset = model.ir.opset_imports.get("", model.ir.opset_imports.get("ai.onnx", 17))
    folded: dict[Key, np.ndarray] = {}
    for nid in order:
        if nid not in nodes:
            continue
        e = idx.entries[nid]
        try:
            values = _evaluate(e.node, {i.name: known[k] for i in e.node.inputs
                                        if i is not None and i.name
                                        and (k := key(i.name, e.graph)) in known},
                               lambda name, p=e.graph: info(name, p), opset)
        except Exception as err:  # noqa: BLE001 - any failure just leaves that shape unknown
            logger.debug("cannot fold %s (%s): %s", nid, e.node.op_type, err)
            continue
        for name, value in (values or {}).items():
            value = np.asarray(value)
            if value.size <= MAX_ELEMENTS:
                known[(e.graph, name)] = folded[(e.graph, name)] = value
    return folded


_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Equal", "Less", "Greater",
                        "LessOrEqual", "GreaterOrEqual", "And", "Or", "Where", "Min", "Max"})


def _output_elements(node: ir.Node, inputs: list[np.ndarray | None]) -> int | None:
    """An upper bound of the elements ``node`` outputs, from its input values, before it is
    evaluated; None when it cannot be bounded (the node is then not evaluated)."""
    op = node.op_type
    arrays = [a for a in inputs if a is not None]
    try:
        if op == "ConstantOfShape":
            dims = [int(x) for x in np.asarray(inputs[0]).reshape(-1)]
            return math.prod(dims) if all(d >= 0 for d in dims) else None
        if op == "Expand":
            dims = tuple(int(x) for x in np.asarray(inputs[1]).reshape(-1))
            if any(d < 0 for d in dims):
                return None
            return math.prod(np.broadcast_shapes(np.shape(inputs[0]), dims))
        if op == "Tile":
            reps = [int(x) for x in np.asarray(inputs[1]).reshape(-1)]
            if any(r < 0 for r in reps) or len(reps) != np.ndim(inputs[0]):
                return None
            return math.prod(d * r for d, r in zip(np.shape(inputs[0]), reps))
        if op == "Range":
            start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in inputs[:3])
            if not delta or not all(math.isfinite(x) for x in (start, limit, delta)):
                return None
            return max(0, math.ceil((limit - start) / delta))
        if op in _BROADCAST:
            return math.prod(np.broadcast_shapes(*(np.shape(a) for a in arrays)))
        if op == "Gather":
            shape = np.shape(inputs[0])
            axis = node.attributes.get_int("axis", 0) % max(len(shape), 1)
            return int(np.size(inputs[1])) * math.prod(shape[:axis] + shape[axis + 1:])
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    # The other foldable ops (shape manipulations, reductions, Concat...) output at most what
    # their inputs hold.
    return sum(int(np.size(a)) for a in arrays)


def _evaluate(node: ir.Node, known: Mapping[str, np.ndarray],
              info_of: Callable[[str], TensorInfo | None], opset: int
              ) -> dict[str, np.ndarray] | None:
    """The outputs of ``node`` from the values of its inputs (``known``, by name as the node
    reads them) and their types (``info_of``), by onnx's reference evaluator."""
    if node.op_type in ("Shape", "Size"):
        info = info_of(node.inputs[0].name) if node.inputs and node.inputs[0] else None
        if info is None or info.dynamic:
            return None
        shape = list(info.shape)  # type: ignore[arg-type]
        out = node.outputs[0].name
        if node.op_type == "Size":
            return {out: np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)}
        start = node.attributes.get_int("start", 0)
        end = node.attributes.get_int("end", len(shape))
        return {out: np.array(shape[start:end], dtype=np.int64)}
    feeds: dict[str, np.ndarray] = {}
    for inp in node.inputs:
        if inp is None or not inp.name:
            continue
        if inp.name not in known:
            return None
        feeds[inp.name] = known[inp.name]
    size = _output_elements(node, [feeds[i.name] if i is not None and i.name else None
                                   for i in node.inputs])
    if size is None or size > MAX_ELEMENTS:
        # A few small integers can ask for billions of elements (ConstantOfShape([2**31]),
        # Expand, Tile, Range, broadcasting): never evaluated.
        return None
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    outs = [o for o in proto.output if o]
    graph = onnx.helper.make_graph(
        [proto], "fold",
        [onnx.helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype),
                                            v.shape) for k, v in feeds.items()],
        [onnx.helper.make_empty_tensor_value_info(o) for o in outs])
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    with np.errstate(all="ignore"):  # a mask's inf * 0: the value is what the model computes
        return dict(zip(outs, ReferenceEvaluator(m).run(None, feeds)))
