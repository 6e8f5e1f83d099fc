"""Manual model surgery: set an attribute, remove a node, rename a tensor, merge two models.

The first three are registered passes (kind ``edit``) applied through ``lab.apply``, so each
is a verified version in history; edits that change semantics are allowed (the user meant
it) and the verification report shows the difference.

Example:
    >>> lab.set_attribute("/head/fc/Gemm", "alpha", 2.0)   # report shows the outputs doubled
    >>> lab.remove_node("/stem/identity/Identity")
    >>> lab.rename_tensor("logits", "scores")
    >>> both = onnx_lab.merge(encoder, decoder, io_map=[("hidden", "hidden")])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.source import load_source
from onnx_lab.errors import InputError, PassError, unknown_name

# The edit passes by seam; every name stays importable from here.
from onnx_lab.transforms._edit_attributes import (  # noqa: F401  (re-exports)
    _ALLOWED,
    _DTYPE_ATTRS,
    SetAttribute,
    _coerce_attribute,
    _same_attr,
    _schema,
    _schema_attributes,
    _schema_type,
    attribute_form,
    parse_attribute_text,
)
from onnx_lab.transforms._edit_base import _EditPass, _model_problem, _node  # noqa: F401
from onnx_lab.transforms._edit_removal import RemoveNode, removal_plan  # noqa: F401
from onnx_lab.transforms._edit_tensors import (  # noqa: F401  (re-exports)
    AddOutput,
    RemoveOutput,
    RenameNode,
    RenameTensor,
    ReplaceInitializer,
    ScaleInitializer,
    _initializer,
    _load_array,
    _set_tensor,
    _top_value,
)
from onnx_lab.transforms.base import (
    Match,
    Param,
    PassResult,
    Rewrite,
    register_pass,
)
from onnx_lab.transforms.extract import _ir_dtype

__all__ = ["SetAttribute", "RemoveNode", "RenameTensor", "RenameNode", "AddOutput",
           "RemoveOutput", "ReplaceInitializer", "ScaleInitializer", "AddNode", "removal_plan",
           "edit_provenance", "attribute_form", "parse_attribute_text", "EDIT_OPS", "merge_models"]

#: The ops the add-node form offers first (any ONNX op works from Python).
EDIT_OPS = ("Identity", "Cast", "Transpose", "Reshape", "Softmax", "Clip", "Add", "Mul",
            "Relu", "Sigmoid", "Flatten", "Unsqueeze")


@register_pass("add_node", kind="edit")
class AddNode(_EditPass):
    """Insert a node after a tensor: it reads the tensor and takes over its consumers."""

    params = (Param("tensor", str, "", "the tensor the new node reads"),
              Param("op_type", str, "", "e.g. Identity, Cast, Transpose, Reshape, Softmax, "
                    "Clip, Add, Mul"),
              Param("attributes", dict, None, "attribute name -> value"),
              Param("inputs", (list, tuple), None, "extra inputs as constants (numbers, "
                    "lists or arrays; None leaves an optional input empty)"),
              Param("node_name", str, "", "the node name (default: <tensor>/<op_type>)"),
              Param("domain", str, "", "the op's domain ('' for ONNX)"))
    semantics_preserving = False

    def _schema(self, model: LabModel):
        op, domain = self.options["op_type"], self.options["domain"]
        if not op:
            raise PassError("add_node needs op_type=...", fix="Pass e.g. op_type='Softmax'.")
        opset = model.ir.opset_imports.get(domain, None)
        if opset is None:
            raise PassError(f"The model imports no opset for domain {domain!r}.",
                            fix="Use an ONNX op (domain '').")
        try:
            return onnx.defs.get_schema(op, opset, domain)
        except onnx.defs.SchemaError as e:
            raise PassError(f"No op {op!r} in domain {domain or 'ai.onnx'!r} at opset {opset}.",
                            fix="Pick an ONNX op, e.g. Identity, Cast, Softmax, Clip.") from e

    def find(self, model: LabModel) -> list[Match]:
        tensor = self.options["tensor"]
        _top_value(model, tensor, "read by a node added here")
        schema = self._schema(model)
        n_in = 1 + len(self.options["inputs"] or [])
        if n_in < schema.min_input or n_in > schema.max_input:
            if n_in < schema.min_input:
                fix = "Give the extra inputs as inputs=[...] (the tensor is the first)."
            elif schema.attributes:  # Clip at opset 9: min and max are attributes there
                fix = (f"This model's {schema.name} (its opset's version, since opset "
                       f"{schema.since_version}) takes its other values as attributes: "
                       f"{', '.join(sorted(schema.attributes))} (attributes={{...}}), not as "
                       "inputs.")
            else:
                fix = f"Give at most {schema.max_input - 1} extra input(s)."
            raise PassError(f"{schema.name} takes {schema.min_input}..{schema.max_input} "
                            f"inputs; the node would have {n_in}.", fix=fix)
        attrs = dict(self.options["attributes"] or {})
        for k, value in attrs.items():
            if k not in schema.attributes:
                raise unknown_name(f"attribute of {schema.name}", k, sorted(schema.attributes),
                                   fix=f"{schema.name} has attributes "
                                   f"{sorted(schema.attributes)}.")
            try:
                want = ir.AttributeType(int(schema.attributes[k].type))
            except ValueError:
                want = None
            _coerce_attribute(f"the new {schema.name}", schema.name, k, value, want)
        missing = [k for k, a in schema.attributes.items() if a.required and k not in attrs]
        if missing:
            raise PassError(f"{schema.name} needs attribute(s) {missing}.",
                            fix="Pass them in attributes={...}.")
        return [Match(f"add_node:{tensor}", "add_node", self.name, [], "",
                      f"add {schema.name} after {tensor}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        schema = self._schema(model)
        tensor = self.options["tensor"]
        src = model.index.value(tensor)
        g = model.graph
        info = model.types().get(tensor)
        dtype = _numeric_dtype(info.dtype if info is not None else None)
        attrs = []
        for k, value in (self.options["attributes"] or {}).items():
            want = ir.AttributeType(int(schema.attributes[k].type))
            attrs.append(_coerce_attribute(f"the new {schema.name}", schema.name, k, value,
                                           want))
        uses = [(u.node, u.idx) for u in src.uses()]  # before the new node uses it too
        name = rw.unique_node_name(self.options["node_name"] or f"{tensor}/{schema.name}")
        inputs: list[ir.Value | None] = [src]
        for i, x in enumerate(self.options["inputs"] or []):
            if x is None:
                inputs.append(None)
                continue
            if isinstance(x, str):  # a tensor of the model by name (a weight, an input)
                inputs.append(_top_value(model, x, "read by a node added here"))
                continue
            try:
                arr = np.asarray(x)
            except ValueError as e:  # a ragged list
                raise PassError(f"Extra input {i + 1} of the new {schema.name}, {x!r:.80}, is "
                                f"not an array: {e}", fix="Pass numbers, a rectangular list, "
                                "a numpy array or a tensor name.") from e
            if arr.dtype.kind == "O":
                raise PassError(f"Extra input {i + 1} of the new {schema.name}, {x!r:.80}, is "
                                "not an array of numbers.", fix="Pass numbers, a rectangular "
                                "list, a numpy array or a tensor name.")
            if not isinstance(x, np.ndarray):
                # numbers take the tensor's dtype (Add/Mul/Clip); an input the schema types
                # as integers only (shapes, axes, TopK's K, Split's parts) is int64; values
                # for a tensor of strings stay as given
                arr = arr.astype(np.int64 if _integer_input(schema, i + 1) or
                                 (arr.dtype.kind in "iu" and dtype.kind not in "f")
                                 else arr.dtype if dtype.kind == "O" else dtype)
            if arr.ndim == 0 and (schema.name, i + 1) in _ONE_D:
                arr = arr.reshape(1)  # TopK's K of 5: [5], which the spec wants
            inputs.append(rw.add_initializer(g, f"{name}/in{i + 1}", arr))
        out = ir.Value(name=rw.unique_name(f"{name}_output"))
        # an op with several outputs (TopK's values and indices, Split's parts) gets them
        # all; the first takes the tensor's place, the others are there to be read
        extra = [ir.Value(name=rw.unique_name(f"{name}_output_{i}"))
                 for i in range(1, _output_count(schema, self.options))]
        node = ir.Node(self.options["domain"], schema.name, inputs, attributes=attrs,
                       outputs=[out, *extra], name=name)
        producer = src.producer()
        if producer is not None and producer.graph is g:
            g.insert_after(producer, node)
        else:
            g.insert_before(g.node(0), node) if len(g) else g.append(node)
        for user, idx in uses:
            user.replace_input_with(idx, out)
        if src.is_graph_output():
            # the graph output keeps its name and now shows the new node's result
            for i, o in enumerate(g.outputs):
                if o is src:
                    g.outputs[i] = out
            if not (src.is_graph_input() or src.is_initializer()):
                old = src.name
                src.name = rw.unique_name(f"{old}_before_{schema.name}")
                out.name = old
                # a graph output needs its type: the op's (a Cast changes it), by inference
                out.type, out.shape = _infer_output(model, node, src, info)
        rw.record(node, [producer] if producer is not None else [])


_INTEGER_TYPES = {"tensor(int64)", "tensor(int32)", "tensor(int16)", "tensor(int8)",
                  "tensor(uint64)", "tensor(uint32)", "tensor(uint16)", "tensor(uint8)"}



#: Inputs the ONNX spec wants 1-D (a number given for them becomes a 1-element list).
_ONE_D = frozenset({
    ("TopK", 1), ("Reshape", 1), ("Unsqueeze", 1), ("Squeeze", 1), ("Expand", 1),
    ("Tile", 1), ("Pad", 1), ("Split", 1), ("Slice", 1), ("Slice", 2), ("Slice", 3),
    ("Slice", 4), *((op, 1) for op in (
        "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"))})

def _integer_input(schema: Any, position: int) -> bool:
    """Whether the op's input at ``position`` takes integer tensors only (by its schema)."""
    formal = schema.inputs[min(position, len(schema.inputs) - 1)] if schema.inputs else None
    if formal is None:
        return False
    allowed = {formal.type_str}
    for c in schema.type_constraints:
        if c.type_param_str == formal.type_str:
            allowed = set(c.allowed_type_strs)
    return bool(allowed) and allowed <= _INTEGER_TYPES and "tensor(int64)" in allowed


def _output_count(schema: Any, options: Mapping[str, Any]) -> int:
    """How many outputs the new node gets: ``num_outputs`` when given, else as many as a
    Split's ``split`` input has parts, else the op's required outputs."""
    attrs = options.get("attributes") or {}
    if "num_outputs" in attrs:
        try:
            return max(1, int(attrs["num_outputs"]))
        except (TypeError, ValueError):
            return 1
    extra = options.get("inputs") or []
    if schema.name == "Split" and extra and extra[0] is not None \
            and not isinstance(extra[0], str):
        return max(1, int(np.asarray(extra[0]).size))
    if schema.name == "Split" and attrs.get("split") is not None:  # before opset 13
        return max(1, len(list(attrs["split"])))
    return max(1, schema.min_output)


def _numeric_dtype(name: str | None) -> np.dtype:
    """The numpy dtype numbers given for the new node's extra inputs take (the tensor's);
    float32 where the tensor's type has none: unknown, bfloat16 and other ml_dtypes kinds
    (numpy does not know those names), strings (object), sequences and maps."""
    if not name or name.startswith(("seq(", "map(", "optional(", "sparse")):
        return np.dtype(np.float32)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(object) if name == "string" else np.dtype(np.float32)


def _infer_output(model: LabModel, node: ir.Node, src: ir.Value, info: Any
                  ) -> tuple[ir.TypeProtocol, ir.Shape | None]:
    """Type and shape of ``node``'s output by onnx shape inference on the node alone."""
    if src.type is not None and not isinstance(src.type, ir.TensorType):
        x = onnx.ValueInfoProto()  # a sequence, map or optional (a ZipMap's output)
        ir.serde.serialize_value_into(x, src)
    else:
        elem = _ir_dtype(info.dtype) if info is not None and info.dtype else src.dtype
        dims = list(info.shape) if info is not None and info.shape is not None else None
        x = onnx.helper.make_tensor_value_info(src.name, int(elem), dims)
    inits = [ir.serde.serialize_tensor(v.const_value) for v in node.inputs[1:]
             if v is not None and v.const_value is not None]
    y = node.outputs[0].name
    tail = onnx.helper.make_node("Identity", [y], ["__onnx_lab_out"])
    g = onnx.helper.make_graph([ir.serde.serialize_node(node), tail], "g", [x],
                               [onnx.helper.make_empty_tensor_value_info("__onnx_lab_out")],
                               inits)
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v
                                                 in model.ir.opset_imports.items()])
    try:
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        raise PassError(f"The new {node.op_type} on {src.name!r} is refused by ONNX shape "
                        f"inference: {' '.join(str(e).split())[:300]}",
                        fix="Check the op's inputs and attributes.") from e
    for vi in inferred.graph.value_info:
        if vi.name == y and vi.type.tensor_type.elem_type:
            t = vi.type.tensor_type
            shape = None
            if t.HasField("shape"):
                shape = ir.Shape([d.dim_value if d.HasField("dim_value") else
                                  (d.dim_param or None) for d in t.shape.dim])
            return ir.TensorType(ir.DataType(t.elem_type)), shape
        if vi.name == y and vi.type.WhichOneof("value") in ("sequence_type", "map_type",
                                                             "optional_type"):
            return ir.serde.deserialize_type_proto_for_type(vi.type), None
    raise PassError(f"Cannot infer the type of the new {node.op_type}'s output.",
                    fix="Check the op's inputs and attributes.")


def edit_provenance(result: PassResult) -> dict[str, list[str]]:
    """The nodes a step touched (changed in place), created and removed.

    Example:
        >>> edit_provenance(lab.results[-1])   # {'touched': ['/bn'], 'created': [], ...}
    """
    after = result.model.index.entries
    removed = set(result.removed)

    def same_node(n: str, src: list[str]) -> bool:  # changed in place, maybe renamed
        return src == [n] or (len(src) == 1 and src[0] not in after and src[0] not in removed)

    return {"touched": [n for n, s in result.provenance.items() if same_node(n, s)],
            "created": [n for n, s in result.provenance.items() if not same_node(n, s)],
            "removed": list(result.removed)}


def _as_proto(x: Any) -> onnx.ModelProto:
    m = load_source(x)
    if m.has_external_data:
        clone = m.clone()
        ir.external_data.load_to_model(clone.ir)
        return ir.to_proto(clone.ir)
    return m.to_proto()


def _joint_mismatch(out: onnx.TypeProto, inp: onnx.TypeProto) -> str | None:
    """Why a graph output of declared type ``out`` cannot feed an input of type ``inp``:
    another element type, rank, or a fixed size that differs; None when they may fit."""
    if not (out.HasField("tensor_type") and inp.HasField("tensor_type")):
        return None
    a, b = out.tensor_type, inp.tensor_type
    if a.elem_type and b.elem_type and a.elem_type != b.elem_type:
        return (f"{onnx.TensorProto.DataType.Name(a.elem_type).lower()} into "
                f"{onnx.TensorProto.DataType.Name(b.elem_type).lower()}")
    if not (a.HasField("shape") and b.HasField("shape")):
        return None

    def dims(t: onnx.TypeProto.Tensor) -> list:
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in t.shape.dim]

    da, db = dims(a), dims(b)
    if len(da) != len(db) or any(isinstance(x, int) and isinstance(y, int) and x != y
                                 for x, y in zip(da, db)):
        return f"shape {da} into {db}"
    return None


def merge_models(a: Any, b: Any, io_map: Sequence[tuple[str, str]], *, prefix1: str | None = None,
          prefix2: str | None = None, inputs: Sequence[str] | None = None,
          outputs: Sequence[str] | None = None):
    """Connect two models into one with ``onnx.compose.merge_models`` (``onnx_lab.merge``
    wraps the result in a Lab).

    Args:
        a, b: Labs, paths or anything ``onnx_lab.open`` takes.
        io_map: pairs (output of ``a``, input of ``b``) to connect.
        prefix1, prefix2: prefixes added to every name of ``a`` / ``b`` (to avoid clashes;
            ``io_map`` names are given without them).
        inputs, outputs: the merged model's inputs/outputs (default: all remaining).

    Returns:
        The merged LabModel (weights in memory).

    Raises:
        InputError: clashing names, unknown io_map names, mismatched IR versions or opsets.

    Example:
        >>> both = onnx_lab.merge("enc.onnx", "dec.onnx", io_map=[("hidden", "hidden")])
    """
    pa, pb = _as_proto(a), _as_proto(b)
    pairs = [tuple(p) for p in io_map]
    if not pairs or not all(len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
        raise InputError(f"io_map must be a list of (output of a, input of b) pairs, got "
                         f"{io_map!r}.", fix="Pass io_map=[('a_out', 'b_in')].")
    if prefix1 or prefix2:
        if prefix1:
            pa = onnx.compose.add_prefix(pa, prefix1)
        if prefix2:
            pb = onnx.compose.add_prefix(pb, prefix2)
        pairs = [((prefix1 or "") + x, (prefix2 or "") + y) for x, y in pairs]
    a_outs = {o.name for o in pa.graph.output}
    b_ins = {i.name for i in pb.graph.input}
    bad = [x for x, _ in pairs if x not in a_outs] + [y for _, y in pairs if y not in b_ins]
    if bad:
        raise InputError(f"io_map names {bad} are not outputs of a / inputs of b.",
                         fix=f"Outputs of a: {sorted(a_outs)}; inputs of b: {sorted(b_ins)}.")
    a_vi = {o.name: o.type for o in pa.graph.output}
    b_vi = {i.name: i.type for i in pb.graph.input}
    for x, y in pairs:  # what onnx.compose leaves to the first run
        why = _joint_mismatch(a_vi[x], b_vi[y])
        if why:
            raise InputError(f"io_map pair ({x!r}, {y!r}) joins tensors of another type: {why}.",
                             fix="Connect an output to an input of the same element type and "
                             "shape (or insert a Cast/Reshape in one model first).")
    if pa.ir_version != pb.ir_version:
        v = max(pa.ir_version, pb.ir_version)
        pa.ir_version = pb.ir_version = v
    try:
        merged = onnx.compose.merge_models(pa, pb, io_map=pairs, inputs=inputs, outputs=outputs)
    except (ValueError, RuntimeError, onnx.checker.ValidationError) as e:
        raise InputError(f"onnx.compose.merge_models refused: {str(e).strip()[:300]}",
                         fix="Use prefix1=/prefix2= for clashing names; both models need the "
                         "same opset versions (lab.convert_opset).") from e
    return LabModel(ir.serde.deserialize_model(merged))
