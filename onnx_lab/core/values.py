"""Constant values: the one answer to "is this value a constant, and what is it?".

A value is a constant when it is an initializer or the output of a standard ``Constant`` node
(PaddlePaddle and other exporters keep weights in Constant nodes), unless the user may feed it
at run time (:func:`overridable`). Every layer asks here: passes, the cost model, the
compatibility checks, extraction, the graph diff and the constant-subgraph summary.

Example:
    >>> from onnx_lab.core.values import const_array, is_constant
    >>> w = lab.index.node("/stem/conv/Conv").inputs[1]
    >>> is_constant(w), const_array(w).shape
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import IR_VERSION_META, LabModel

__all__ = ["overridable", "constant_producer", "is_constant", "const_array", "constant_tensor",
           "foldable_nodes", "type_only_dtype", "rename_value", "RANDOM_OPS", "QUANTIZATION_OPS"]

_STANDARD = ("", "ai.onnx")

#: Ops whose values differ from run to run (never folded; a verification region holding one is
#: checked on the whole model: numerics/region.py).
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})

#: The ops that set a quantized model's precision. On stored weights they compute constants,
#: but they are the model's quantization: runtimes fuse DequantizeLinear(int8 weight) -> Conv
#: into int8 kernels, and folding it would store the weight in float (4x the bytes) and lose
#: them. The optimizer keeps them (``foldable_nodes(..., keep=QUANTIZATION_OPS)``).
QUANTIZATION_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})

# Never folded: random outputs differ per run; Dropout may be random in training mode; bodies
# (If/Loop/Scan) are left to the runtime.
_NEVER_FOLDED = RANDOM_OPS | {"Dropout", "Constant"}


def overridable(value: ir.Value) -> bool:
    """Whether a user may feed ``value`` at run time (a graph input, initializer or not).

    IR < 4 required every initializer to be listed as a graph input too (onnx-caffe2 and other
    old exports list hundreds), and onnxruntime treats those as constants; from IR 4 on an
    initializer listed as an input is a default the user can override.
    """
    if not value.is_graph_input():
        return False
    if value.is_initializer() and value.graph is not None:
        version = value.graph.meta.get(IR_VERSION_META)
        if version is not None and version < 4:
            return False
    return True


def constant_producer(value: ir.Value | None) -> ir.Node | None:
    """The standard ``Constant`` node that produces ``value``, else None."""
    prod = value.producer() if value is not None else None
    if prod is not None and prod.op_type == "Constant" and prod.domain in _STANDARD:
        return prod
    return None


def is_constant(value: ir.Value | None, *, stored: bool = False) -> bool:
    """Whether ``value`` is an initializer (with data) or a Constant node's output.

    Args:
        stored: also count initializers the user may override at run time (they hold a
            stored value: weights for the cost model, data for the graph diff).
    """
    if value is None or (not stored and overridable(value)):
        return False
    if value.const_value is not None:
        return True
    return constant_producer(value) is not None


def const_array(value: ir.Value | None, *, stored: bool = False) -> np.ndarray | None:
    """The constant value of ``value`` (see :func:`is_constant`), else None.

    None also when the data cannot be read (e.g. a missing external data file): such a value is
    not a usable constant.
    """
    if value is None or (not stored and overridable(value)):
        return None
    if value.const_value is not None:
        try:
            return value.const_value.numpy()
        except Exception:  # noqa: BLE001 - e.g. missing external data: not a usable constant
            return None
    if constant_producer(value) is not None:
        t = constant_tensor(value)
        try:
            return t.numpy() if t is not None else None
        except Exception:  # noqa: BLE001 - an unreadable tensor: not a usable constant
            return None
    return None


_SCALAR_ATTRS = {"value_float": np.float32, "value_floats": np.float32,
                 "value_int": np.int64, "value_ints": np.int64}


def constant_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The tensor an initializer or a Constant node holds for ``value``, read without changing
    anything.

    ``onnx_ir.convenience.get_const_tensor`` names the Constant's tensor after the value and
    updates the value's shape and type: on a model that shares its tensors with earlier
    versions (a History) that would change those versions too. This reads the same data and
    writes nothing; a tensor built from ``value_floats``/``value_ints`` is a new one.
    """
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value
    node = constant_producer(value)
    if node is None or len(node.attributes) != 1:
        return None
    name, attr = next(iter(node.attributes.items()))
    if attr.is_ref():
        return None
    if name == "value" and attr.type == ir.AttributeType.TENSOR:
        return attr.value
    if name in _SCALAR_ATTRS:
        return ir.Tensor(np.array(attr.value, dtype=_SCALAR_ATTRS[name]), name=value.name)
    if name in ("value_string", "value_strings"):
        return ir.StringTensor(np.array(attr.value, dtype=np.bytes_), name=value.name)
    return None


def weight_makers(model: LabModel) -> set[str]:
    """Main-graph nodes that compute weights: Constant nodes and nodes whose inputs are all
    constants (a ConstantOfShape or a Reshape of an initializer: old exports make weights so;
    a Mul of a weight by a BatchNormalization's scale, as onnxoptimizer folds one)."""
    makers = {nid for nid, _node in foldable_nodes(model).values()}
    makers |= {nid for nid, e in model.index.entries.items()
               if e.graph == "" and constant_producer(e.node.outputs[0] if e.node.outputs
                                                      else None) is not None}
    return makers


def constant_tensors(model: LabModel) -> list[tuple[str, ir.TensorProtocol, str, str]]:
    """Tensors held in ``Constant`` nodes' ``value`` attribute, in every graph: (output name,
    tensor, node_id, graph). ``lab.initializers`` lists them as source 'constant', and the
    initializer edits change them."""
    return list(model.cached(("constant_tensors",), lambda: _constant_tensors(model)))


def _constant_tensors(model: LabModel) -> list[tuple[str, ir.TensorProtocol, str, str]]:
    out = []
    for e in model.index.entries.values():
        n = e.node
        if n.op_type == "Constant" and n.domain in _STANDARD and n.outputs:
            # value=TENSOR, and value_float(s)/value_int(s)/value_string(s) as the tensors
            # they stand for: cost() counts a scalar Constant's element, so the tables do
            t = constant_tensor(n.outputs[0])
            if t is not None:
                out.append((n.outputs[0].name, t, e.node_id, e.graph))
    return out


def rename_value(value: ir.Value, new: str) -> None:
    """Rename ``value``; an initializer gets a tensor of its own under the new name.

    onnx_ir renames a value's tensor with it, and that tensor is shared: by every clone of
    the model (the versions a Lab keeps) and, for a tensor read from a message, by the message
    itself (``TensorProtoTensor`` writes its name into the ``TensorProto``, so renaming in
    place would rename the initializer of the user's ``ModelProto`` and of earlier versions).
    The new tensor is a shallow one: an external reference to the same bytes, or a view of the
    same data read on use.
    """
    t = value.const_value
    if t is None:
        value.name = new
        return
    if isinstance(t, ir.ExternalTensor):
        own: ir.TensorProtocol = ir.ExternalTensor(
            t.location, t.offset, t.length, t.dtype, shape=t.shape, name=new,
            base_dir=t.base_dir)
    else:
        own = ir.LazyTensor(lambda t=t: t, t.dtype, t.shape, name=new)
    value.const_value = None
    value.name = new
    value.const_value = own


def _has_body(node: ir.Node) -> bool:
    return any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in node.attributes.values())


def type_only_dtype(node: ir.Node) -> ir.DataType | None:
    """The element type a ``CastLike`` casts to, when its second input declares one.

    ``CastLike(c, x)`` reads ``x`` for its element type alone: with that type declared, the
    result of a constant ``c`` is a constant (the dynamo exporter writes a Conv's missing bias
    as ``Expand(CastLike(0, x), ...)``), the same as ``Cast(c, to=dtype(x))``.
    """
    if node.op_type != "CastLike" or node.domain not in _STANDARD or len(node.inputs) != 2:
        return None
    target = node.inputs[1]
    if target is None or not isinstance(target.type, ir.TensorType):
        return None
    dtype = target.dtype
    return dtype if dtype is not None and dtype != ir.DataType.UNDEFINED else None


def foldable_nodes(model: LabModel, *, keep: frozenset[str] = frozenset()
                   ) -> dict[int, tuple[str, ir.Node]]:
    """Main-graph nodes whose inputs are all constants (initializers, Constant nodes, or
    outputs of other foldable nodes), keyed by id(node), in topological order.

    Args:
        keep: op types (standard domain) taken as computing at run time, like any node with
            a data input: they and what depends on them are not listed
            (``QUANTIZATION_OPS`` for what the optimizer may fold).
    """
    fold: dict[int, tuple[str, ir.Node]] = {}
    const_out: set[int] = set()
    idx = model.index
    entries = idx.entries
    for nid in idx.topo_order(""):
        node = entries[nid].node
        if node.domain != "":
            continue
        if node.op_type == "Constant":
            const_out.update(id(o) for o in node.outputs)
            continue
        if node.op_type in _NEVER_FOLDED or node.op_type in keep:
            continue
        ins = [v for v in node.inputs if v is not None]
        if not ins:
            continue
        if node.op_type == "CastLike" and len(ins) == 2 and type_only_dtype(node) is not None:
            ins = ins[:1]  # the second input gives its element type only, known statically
        for v in ins:
            if id(v) in const_out:
                continue
            # is_constant(v), answered at once for the usual computed value (a node's
            # output that holds no value and no Constant made)
            p = v.producer()
            if p is not None and p.op_type != "Constant" and v.const_value is None:
                break
            if not is_constant(v):
                break
        else:
            if not _has_body(node):
                fold[id(node)] = (nid, node)
                const_out.update(id(o) for o in node.outputs)
    return fold
