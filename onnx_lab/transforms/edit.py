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

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._proto import weights_as_inputs
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import load_source
from onnx_lab.errors import InputError, PassError, unknown_name
from onnx_lab.transforms.base import (
    LabPass,
    Match,
    Param,
    PassContext,
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


def _node(model: LabModel, node_id: str) -> ir.Node:
    return model.index.node(node_id)  # UnknownNameError with close matches


def _model_problem(model: LabModel) -> str | None:
    """Why onnx's checker (with strict shape inference) refuses ``model``, or None."""
    try:
        proto = weights_as_inputs(model.to_proto())  # the data files are not read
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        text = " ".join(str(e).split())
        return text[:400]
    except ValueError:  # a proto over 2 GB cannot be checked in memory
        return None
    return None


class _EditPass(LabPass):
    """An edit: after the rewrite the model must pass onnx's checker and strict shape inference
    (else PassError, and the history is unchanged), unless the model already failed before.

    Class attributes read by the verification step (:func:`onnx_lab.steps.apply`):
        semantics_preserving: False for edits meant to change the outputs (an attribute, a
            removed node, a new weight): the step reports "outputs changed (expected for this
            edit): max_abs ..." instead of a failure.
        verify_preset: a tolerance preset the step verifies with (``"exact"`` for renames and
            output changes: every surviving output must stay bit-identical).
    """

    semantics_preserving: ClassVar[bool] = True
    verify_preset: ClassVar[str | None] = None

    def run(self, model: LabModel, context: PassContext | None = None) -> PassResult:
        result = super().run(model, context)
        if result.modified:
            problem = _model_problem(result.model)
            if problem is not None:
                already = _model_problem(model)
                if already is None:
                    raise PassError(f"{self.name} refused: the edited model fails onnx's "
                                    f"checker / shape inference: {problem}",
                                    fix="The model is unchanged; pass values the op accepts.")
                result.notes.append("the model failed onnx's checker before this edit too: "
                                    f"{already}")
        return result


#: String attributes whose values the ONNX spec enumerates (onnx.defs does not carry them).
_ALLOWED: dict[tuple[str, str], tuple[str, ...]] = {
    **{(op, "auto_pad"): ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
       for op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                  "AveragePool", "LpPool")},
    ("Resize", "mode"): ("nearest", "linear", "cubic"),
    ("Resize", "coordinate_transformation_mode"): (
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_crop_and_resize"),
    ("Resize", "nearest_mode"): ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    ("Resize", "keep_aspect_ratio_policy"): ("stretch", "not_larger", "not_smaller"),
    ("Pad", "mode"): ("constant", "reflect", "edge", "wrap"),
    ("GridSample", "mode"): ("bilinear", "nearest", "bicubic", "linear", "cubic"),
    ("GridSample", "padding_mode"): ("zeros", "border", "reflection"),
    ("Gelu", "approximate"): ("none", "tanh"),
    ("DepthToSpace", "mode"): ("DCR", "CRD"),
    **{(op, "direction"): ("forward", "reverse", "bidirectional") for op in ("LSTM", "GRU", "RNN")},
}


# INT attributes that hold an onnx.TensorProto data type (may be given by name)
_DTYPE_ATTRS = {"Cast": ("to",), "EyeLike": ("dtype",), "RandomNormal": ("dtype",),
                "RandomUniform": ("dtype",), "RandomNormalLike": ("dtype",),
                "RandomUniformLike": ("dtype",), "Multinomial": ("dtype",),
                "Bernoulli": ("dtype",), "QuantizeLinear": ("output_dtype",)}


def _coerce_attribute(where: str, op_type: str, name: str, value: Any,
                      want: ir.AttributeType | None) -> ir.Attr:
    """``value`` as an attribute of type ``want`` (the schema's or the existing one), or
    PassError naming the expected type."""
    T = ir.AttributeType

    def bad(what: str) -> PassError:
        return PassError(f"Attribute {name!r} of {where} ({op_type}) is {want.name}; got "
                         f"{type(value).__name__} {value!r}: {what}.",
                         fix=f"Pass a value of type {want.name}.")

    def is_int(x: Any) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

    def is_num(x: Any) -> bool:
        return is_int(x) or isinstance(x, (float, np.floating))

    if want is None:
        try:
            return ir.convenience.convert_attribute(name, value)
        except (TypeError, ValueError) as e:
            raise PassError(f"Cannot use {value!r} as attribute {name!r} of {where}: {e}",
                            fix="Pass an int, float, str, a list of one of them, or a numpy "
                            "array.") from e
    if want == T.FLOAT:
        if not is_num(value):
            raise bad("expected a number")
        return ir.AttrFloat32(name, float(value))
    if want == T.INT:
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, str) and name in _DTYPE_ATTRS.get(op_type, ()):
            # Cast(to=FLOAT16): a data type by name (TensorProto's, case-insensitive)
            try:
                value = onnx.TensorProto.DataType.Value(value.strip().upper())
            except ValueError:
                raise PassError(f"Attribute {name!r} of {where} ({op_type}) is a data type; "
                                f"{value!r} is not one.", fix="Use an onnx.TensorProto name "
                                "such as FLOAT, FLOAT16, INT64, or its number.") from None
        if not is_int(value):
            raise bad("expected an integer")
        return ir.AttrInt64(name, int(value))
    if want == T.STRING:
        if not isinstance(value, str):
            raise bad("expected a string")
        allowed = _ALLOWED.get((op_type, name))
        if allowed is not None and value not in allowed:
            raise PassError(f"Attribute {name!r} of {where} ({op_type}) cannot be {value!r}.",
                            fix=f"The ONNX spec allows {list(allowed)}.")
        return ir.AttrString(name, value)
    if want in (T.INTS, T.FLOATS, T.STRINGS):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            raise bad("expected a list")
        if want == T.INTS:
            if not all(is_int(x) for x in value):
                raise bad("expected a list of integers")
            return ir.AttrInt64s(name, [int(x) for x in value])
        if want == T.FLOATS:
            if not all(is_num(x) for x in value):
                raise bad("expected a list of numbers")
            return ir.AttrFloat32s(name, [float(x) for x in value])
        if not all(isinstance(x, str) for x in value):
            raise bad("expected a list of strings")
        return ir.AttrStrings(name, list(value))
    if want == T.TENSOR:
        if not isinstance(value, (np.ndarray, int, float, np.generic)) or isinstance(value, bool):
            raise bad("expected a numpy array or a number")
        return ir.AttrTensor(name, ir.tensor(np.asarray(value), name=name))
    raise PassError(f"Attribute {name!r} of {where} is {want.name}, which cannot be edited "
                    "here.", fix="Edit the subgraph's nodes instead.")


@register_pass("set_attribute", kind="edit")
class SetAttribute(_EditPass):
    """Set (or add) one attribute of a node, checked against the op schema."""

    params = (Param("node_id", str, "", "the node"), Param("attribute", str, "", "attribute name"),
              Param("value", object, None, "int, float, str, list, numpy array or tensor"))
    semantics_preserving = False

    def find(self, model: LabModel) -> list[Match]:
        nid = self.options["node_id"]
        _node(model, nid)
        if not self.options["attribute"]:
            raise PassError("set_attribute needs attribute=...", fix="Pass the attribute name.")
        node = _node(model, nid)
        name = self.options["attribute"]
        known = _schema_attributes(model, node)
        if known is not None and name not in known and name not in node.attributes:
            # A typo ("stridez") would only surface as onnxruntime refusing the new model.
            raise unknown_name(f"attribute of {node.op_type}", name, sorted(known),
                               fix=f"{node.op_type} (opset "
                               f"{model.ir.opset_imports.get(node.domain or '', '?')}) has "
                               f"attributes {sorted(known)}.")
        self._attr = self._convert(model, node)  # bad values refused before any copy
        old = node.attributes.get(name)
        if old is not None and old.type == self._attr.type and _same_attr(old, self._attr):
            return []
        return [Match(f"set_attribute:{nid}", "set_attribute", self.name, [nid], nid,
                      f"set {self.options['attribute']} of {nid}")]

    no_match_reason = "the attribute already has this value"

    def _convert(self, model: LabModel, node: ir.Node) -> ir.Attr:
        name, value = self.options["attribute"], self.options["value"]
        old = node.attributes.get(name)
        want = _schema_type(model, node, name)
        if want is None and old is not None:
            want = old.type
        return _coerce_attribute(self.options["node_id"], node.op_type, name, value, want)

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = _node(model, self.options["node_id"])
        node.attributes[self.options["attribute"]] = self._convert(model, node)
        rw.record(node, [node])


def parse_attribute_text(text: str, type_name: str) -> Any:
    """A typed form field's text as a value of the attribute type ``type_name`` (``FLOAT``,
    ``INT``, ``STRING``, ``INTS``, ``FLOATS``, ``STRINGS``); PassError when it is not one.

    Example:
        >>> parse_attribute_text("1, 2", "INTS")
        [1, 2]
    """
    raw = text.strip()

    def items() -> list[str]:
        inner = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
        return [x.strip().strip("'\"") for x in inner.split(",") if x.strip()]

    try:
        if type_name == "FLOAT":
            return float(raw)
        if type_name == "INT":
            return int(raw)
        if type_name == "STRING":
            return text
        if type_name == "INTS":
            return [int(x) for x in items()]
        if type_name == "FLOATS":
            return [float(x) for x in items()]
        if type_name == "STRINGS":
            return items()
    except ValueError as e:
        raise PassError(f"{text!r} is not a value of type {type_name}.",
                        fix={"FLOAT": "Type a number, e.g. 1e-3.", "INT": "Type an integer.",
                             "INTS": "Type integers separated by commas, e.g. 1, 1.",
                             "FLOATS": "Type numbers separated by commas."}.get(type_name)
                        ) from e
    raise PassError(f"Attributes of type {type_name} cannot be typed in a form.",
                    fix="Set them from Python: lab.set_attribute(node, name, value).")


def _same_attr(a: ir.Attr, b: ir.Attr) -> bool:
    try:
        va, vb = a.value, b.value
        if a.type == ir.AttributeType.TENSOR:
            return bool(np.array_equal(va.numpy(), vb.numpy()))
        return list(va) == list(vb) if isinstance(va, Sequence) and not isinstance(va, str) \
            else va == vb
    except (TypeError, ValueError, AttributeError):
        return False


def attribute_form(model: LabModel, node_id: str) -> list[dict[str, Any]]:
    """The editable attributes of a node for a form: one dict per schema (or present)
    attribute with name, type (``FLOAT``, ``INTS``...), value (current, or None), default,
    required, allowed (enumerated strings or None) and doc.

    Example:
        >>> [a["name"] for a in attribute_form(lab.model, "/bn")]   # ['epsilon', 'momentum'...]
    """
    node = _node(model, node_id)
    schema = _schema(model, node)
    rows: dict[str, dict[str, Any]] = {}
    if schema is not None:
        for name, a in sorted(schema.attributes.items()):
            try:
                typ = ir.AttributeType(int(a.type)).name
            except ValueError:
                typ = "UNDEFINED"
            default = None
            if a.default_value is not None and a.default_value.type:
                try:
                    default = onnx.helper.get_attribute_value(a.default_value)
                    if isinstance(default, bytes):
                        default = default.decode("utf-8", "replace")
                except (ValueError, TypeError):
                    default = None
            rows[name] = {"name": name, "type": typ, "value": None, "default": default,
                          "required": bool(a.required),
                          "allowed": list(_ALLOWED.get((node.op_type, name), ())) or None,
                          "doc": " ".join((a.description or "").split())[:200]}
    for name, attr in node.attributes.items():
        value = attr.value
        if attr.type == ir.AttributeType.TENSOR:
            value = f"tensor {list(value.shape)} {value.dtype.name.lower()}"
        elif attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            value = "subgraph"
        elif isinstance(value, Sequence) and not isinstance(value, str):
            value = list(value)
        row = rows.setdefault(name, {"name": name, "type": attr.type.name, "default": None,
                                     "required": False, "allowed": None, "doc": ""})
        row["value"] = value
    return list(rows.values())


def _schema(model: LabModel, node: ir.Node):
    opset = model.ir.opset_imports.get(node.domain or "", None)
    try:
        return onnx.defs.get_schema(node.op_type, opset or onnx.defs.onnx_opset_version(),
                                    node.domain or "")
    except onnx.defs.SchemaError:
        return None


def _schema_attributes(model: LabModel, node: ir.Node) -> set[str] | None:
    """Attribute names the op schema defines (None for ops without a schema: custom ops)."""
    schema = _schema(model, node)
    return set(schema.attributes) if schema is not None else None


def _schema_type(model: LabModel, node: ir.Node, name: str) -> ir.AttributeType | None:
    """The attribute's type from the op schema (None for unknown ops or attributes)."""
    schema = _schema(model, node)
    if schema is None:
        return None
    attr = schema.attributes.get(name)
    if attr is None:
        return None
    try:
        return ir.AttributeType(int(attr.type))
    except ValueError:
        return None


def removal_plan(model: LabModel, node_id: str, mode: str = "reconnect") -> dict[str, Any]:
    """What ``remove_node(node_id, mode=mode)`` would remove, without removing it.

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
            types = model.types()
            ti, to = types.get(data.name), types.get(out.name)
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
        # then the producers only the removed nodes read (they would be left dead)
        changed = True
        while changed:
            changed = False
            for n in list(seen):
                for v in idx.node(n).inputs:
                    p = v.producer() if v is not None else None
                    if p is None or id(p) in gone or p.graph is not graph:
                        continue
                    outs = [o for o in p.outputs if o.uses() or o.is_graph_output()]
                    if all(not o.is_graph_output() and all(id(u.node) in gone
                                                           for u in o.uses()) for o in outs):
                        seen.append(idx.node_id(p))
                        gone.add(id(p))
                        changed = True
        plan["nodes"] = seen
        plan["outputs"] = [v.name for n in seen for v in idx.node(n).outputs
                           if v.is_graph_output()]
        if graph is not None and len(plan["outputs"]) >= len(graph.outputs):
            plan["problem"] = (f"removing {node_id} with the {len(seen) - 1} node(s) it feeds "
                               "or alone needs removes every output of the graph")
        # initializers only the removed nodes read
        for n in seen:
            for v in idx.node(n).inputs:
                if v is not None and v.is_initializer() and not v.is_graph_output() \
                        and v.name not in plan["initializers"] \
                        and all(id(u.node) in gone for u in v.uses()):
                    plan["initializers"].append(v.name)
    return plan


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
        plan = removal_plan(model, nid, self._mode())
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
            plan = removal_plan(model, nid, mode)
            nodes = [_node(model, n) for n in plan["nodes"]]
            for n in nodes:
                for v in n.outputs:
                    while v.is_graph_output():
                        graph.outputs.remove(v)
            inputs = [v for n in nodes for v in n.inputs]
            rw.remove(nodes)
            for v in inputs:
                rw.drop_if_unused(v)
            return

        types = model.types()  # the new inputs need a declared type and shape
        for out in node.outputs:
            if not (out.uses() or out.is_graph_output()):
                continue
            info = types.get(out.name)
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


@register_pass("rename_tensor", kind="edit")
class RenameTensor(_EditPass):
    """Rename a tensor everywhere (edges, inputs, outputs, initializers, If/Loop bodies)."""

    params = (Param("old", str, "", "current name"), Param("new", str, "", "new name"))
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        old, new = self.options["old"], self.options["new"]
        model.index.value(old)  # UnknownNameError with close matches
        if not new:
            raise PassError("rename_tensor needs a non-empty new name.", fix="Pass new='...'.")
        if new in model.index.values and new != old:
            raise PassError(f"Cannot rename {old!r} to {new!r}: a tensor named {new!r} exists.",
                            fix="Pick an unused name.")
        if new == old:
            return []
        return [Match(f"rename_tensor:{old}", "rename_tensor", self.name, [], "",
                      f"rename {old} -> {new}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        v = model.index.value(self.options["old"])
        if v.const_value is not None:
            # Clones share tensor objects and renaming a value renames its tensor: give this
            # version its own (shallow) tensor copy so earlier versions keep their names.
            t = v.const_value
            new = self.options["new"]
            if isinstance(t, ir.ExternalTensor):
                t2: ir.TensorProtocol = ir.ExternalTensor(
                    t.location, t.offset, t.length, t.dtype, shape=t.shape, name=new,
                    base_dir=t.base_dir)
            else:  # a view of the same data, read on use
                t2 = ir.LazyTensor(lambda t=t: t, t.dtype, t.shape, name=new)
            v.const_value = None
            v.name = new
            v.const_value = t2
        else:
            v.name = self.options["new"]
        rw.modified = True


@register_pass("rename_node", kind="edit")
class RenameNode(_EditPass):
    """Rename a node (its id becomes the new name)."""

    params = (Param("node_id", str, "", "the node"), Param("new", str, "", "new name"))
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        nid, new = self.options["node_id"], self.options["new"]
        node = _node(model, nid)
        if not new:
            raise PassError("rename_node needs a non-empty new name.", fix="Pass new='...'.")
        if new == nid and node.name == new:
            return []
        taken = {e.node.name for e in model.index.entries.values() if e.node is not node}
        if new in taken or (new in model.index.entries and new != nid):
            raise PassError(f"Cannot rename node {nid!r} to {new!r}: a node named {new!r} "
                            "exists.", fix="Pick an unused node name.")
        return [Match(f"rename_node:{nid}", "rename_node", self.name, [nid], nid,
                      f"rename node {nid} -> {new}")]

    no_match_reason = "the node already has this name"

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = _node(model, self.options["node_id"])
        node.name = self.options["new"]
        rw.record(node, [node])


def _top_value(model: LabModel, name: str) -> ir.Value:
    v = model.index.value(name)  # UnknownNameError with close matches
    if model.index.value_graph.get(name, "") != "":
        raise PassError(f"Tensor {name!r} lives inside a subgraph "
                        f"({model.index.value_graph[name]}); only main-graph tensors can be "
                        "model outputs.", fix="Pick a tensor of the main graph.")
    return v


@register_pass("add_output", kind="edit")
class AddOutput(_EditPass):
    """Make an intermediate tensor a graph output (existing outputs stay bit-identical)."""

    params = (Param("tensor", str, "", "the tensor"),)
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        name = self.options["tensor"]
        v = _top_value(model, name)
        if v.is_graph_output():
            return []
        return [Match(f"add_output:{name}", "add_output", self.name, [], "",
                      f"add output {name}")]

    no_match_reason = "the tensor is already a graph output"

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        name = self.options["tensor"]
        v = model.index.value(name)
        info = model.types().get(name)
        if v.type is None and info is not None and info.dtype is not None:
            v.type = ir.TensorType(_ir_dtype(info.dtype))
        if v.shape is None and info is not None and info.shape is not None:
            v.shape = ir.Shape(list(info.shape))
        if v.type is None:
            raise PassError(f"Cannot add {name!r} as an output: its dtype is unknown (shape "
                            "inference found none).", fix="Set the input shapes first.")
        model.graph.outputs.append(v)
        rw.modified = True


@register_pass("remove_output", kind="edit")
class RemoveOutput(_EditPass):
    """Remove a graph output and the nodes only it needed."""

    params = (Param("output", str, "", "the graph output"),)
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        name = self.options["output"]
        outs = [v.name for v in model.graph.outputs]
        if name not in outs:
            raise unknown_name("graph output", name, outs, fix=f"Graph outputs: {outs}.")
        if len(outs) == 1:
            raise PassError(f"Cannot remove {name!r}: it is the only graph output.",
                            fix="Add another output first (add_output).")
        return [Match(f"remove_output:{name}", "remove_output", self.name, [], "",
                      f"remove output {name}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        g = model.graph
        v = next(v for v in g.outputs if v.name == self.options["output"])
        g.outputs.remove(v)
        rw.modified = True
        # the nodes only this output needed: remove dead producers until none is left
        pending = [v]
        while pending:
            val = pending.pop()
            if val.uses() or val.is_graph_output():
                continue
            prod = val.producer()
            if prod is None:
                rw.drop_if_unused(val)
                continue
            if prod.graph is g and all(not o.uses() and not o.is_graph_output()
                                       for o in prod.outputs):
                ins = list(prod.inputs)
                rw.remove(prod)
                pending.extend(i for i in ins if i is not None)


def _load_array(source: Any, name: str) -> np.ndarray:
    if isinstance(source, np.ndarray):
        return source
    if isinstance(source, (str, Path)):
        p = Path(source)
        if not p.is_file():
            raise InputError(f"No file {str(p)!r} for initializer {name!r}.",
                             fix="Pass the path of a .npy or .npz file.")
        try:
            data = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"Cannot read {str(p)!r} as .npy/.npz: {e}",
                             fix="Save the array with numpy.save or numpy.savez.") from e
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                keys = list(data.keys())
                if name in keys:
                    return data[name]
                if len(keys) == 1:
                    return data[keys[0]]
                raise unknown_name(f"array in {p.name}", name, keys,
                                   fix="Name the array after the initializer in the .npz.")
        return data
    raise InputError(f"replace_initializer needs a numpy array or a .npy/.npz path, got "
                     f"{type(source).__name__}.", fix="Pass value=np.array(...) or 'w.npy'.")


def _initializer(model: LabModel, name: str) -> ir.Value:
    for g in model.index.graphs.values():
        if name in g.initializers:
            return g.initializers[name]
    names = [n for g in model.index.graphs.values() for n in g.initializers]
    raise unknown_name("initializer", name, names, fix="See lab.initializers.")


def _set_tensor(v: ir.Value, array: np.ndarray) -> None:
    # a new tensor object: earlier versions share the old one
    v.const_value = ir.tensor(np.ascontiguousarray(array), name=v.name)


@register_pass("replace_initializer", kind="edit")
class ReplaceInitializer(_EditPass):
    """Replace an initializer's values from an array or a .npy/.npz file (same shape, dtype)."""

    params = (Param("initializer", str, "", "the initializer"),
              Param("value", object, None, "numpy array, or path of a .npy / .npz"))
    semantics_preserving = False

    def _array(self, model: LabModel) -> np.ndarray:
        name = self.options["initializer"]
        v = _initializer(model, name)
        arr = _load_array(self.options["value"], name)
        t = v.const_value
        want_shape = tuple(int(d) for d in t.shape)
        want_dtype = t.dtype.numpy()
        if tuple(arr.shape) != want_shape:
            raise PassError(f"Replacement for initializer {name!r} has shape "
                            f"{list(arr.shape)}; the initializer has {list(want_shape)}.",
                            fix="Reshape the array to the initializer's shape.")
        if arr.dtype != want_dtype:
            raise PassError(f"Replacement for initializer {name!r} is {arr.dtype}; the "
                            f"initializer is {want_dtype}.",
                            fix=f"Convert it first: array.astype('{want_dtype}').")
        return arr

    def find(self, model: LabModel) -> list[Match]:
        self._array(model)
        name = self.options["initializer"]
        return [Match(f"replace_initializer:{name}", "replace_initializer", self.name, [], "",
                      f"replace {name}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        v = _initializer(model, self.options["initializer"])
        _set_tensor(v, self._array(model))
        for u in v.uses():
            rw.record(u.node, [u.node])
        rw.modified = True


@register_pass("scale_initializer", kind="edit")
class ScaleInitializer(_EditPass):
    """Multiply a float initializer by a factor."""

    params = (Param("initializer", str, "", "the initializer"),
              Param("factor", float, 1.0, "the factor"))
    semantics_preserving = False

    def find(self, model: LabModel) -> list[Match]:
        name = self.options["initializer"]
        v = _initializer(model, name)
        dt = v.const_value.dtype.numpy()
        if not np.issubdtype(dt, np.floating):
            raise PassError(f"Initializer {name!r} is {dt}; only float initializers can be "
                            "scaled.", fix="Use replace_initializer for integer tensors.")
        if not np.isfinite(self.options["factor"]):
            raise PassError(f"factor must be finite, got {self.options['factor']!r}.",
                            fix="Pass e.g. factor=0.5.")
        if self.options["factor"] == 1.0:
            return []
        return [Match(f"scale_initializer:{name}", "scale_initializer", self.name, [], "",
                      f"scale {name} by {self.options['factor']}")]

    no_match_reason = "factor 1.0 changes nothing"

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        v = _initializer(model, self.options["initializer"])
        arr = v.const_value.numpy()
        _set_tensor(v, (arr * self.options["factor"]).astype(arr.dtype))
        for u in v.uses():
            rw.record(u.node, [u.node])
        rw.modified = True


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
        _top_value(model, tensor)
        schema = self._schema(model)
        n_in = 1 + len(self.options["inputs"] or [])
        if n_in < schema.min_input or n_in > schema.max_input:
            raise PassError(f"{schema.name} takes {schema.min_input}..{schema.max_input} "
                            f"inputs; the node would have {n_in}.",
                            fix="Give the extra inputs as inputs=[...] (the tensor is the "
                            "first).")
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
        dtype = np.dtype(info.dtype) if info is not None and info.dtype else np.float32
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
            arr = np.asarray(x)
            if not isinstance(x, np.ndarray):
                # numbers take the tensor's dtype (Add/Mul/Clip); shapes and axes are int64
                arr = arr.astype(np.int64 if schema.name in ("Reshape", "Expand", "Tile",
                                                             "Unsqueeze", "Squeeze", "Slice",
                                                             "Pad", "ReduceSum") or
                                 (arr.dtype.kind in "iu" and dtype.kind not in "f")
                                 else dtype)
            inputs.append(rw.add_initializer(g, f"{name}/in{i + 1}", arr))
        out = ir.Value(name=rw.unique_name(f"{name}_output"))
        node = ir.Node(self.options["domain"], schema.name, inputs, attributes=attrs,
                       outputs=[out], name=name)
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


def _infer_output(model: LabModel, node: ir.Node, src: ir.Value, info: Any
                  ) -> tuple[ir.TypeProtocol, ir.Shape | None]:
    """Type and shape of ``node``'s output by onnx shape inference on the node alone."""
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
