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
from typing import Any

import onnx
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.source import load_source
from onnx_lab.errors import InputError, PassError, unknown_name
from onnx_lab.transforms.base import LabPass, Match, Param, Rewrite, register_pass
from onnx_lab.transforms.extract import _ir_dtype

__all__ = ["SetAttribute", "RemoveNode", "RenameTensor", "merge_models"]


def _node(model: LabModel, node_id: str) -> ir.Node:
    return model.index.node(node_id)  # UnknownNameError with close matches


@register_pass("set_attribute", kind="edit")
class SetAttribute(LabPass):
    """Set (or add) one attribute of a node."""

    params = (Param("node_id", str, "", "the node"), Param("attribute", str, "", "attribute name"),
              Param("value", object, None, "int, float, str, list, numpy array or tensor"))

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
        return [Match(f"set_attribute:{nid}", "set_attribute", self.name, [nid], nid,
                      f"set {self.options['attribute']} of {nid}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = _node(model, self.options["node_id"])
        name, value = self.options["attribute"], self.options["value"]
        old = node.attributes.get(name)
        want = old.type if old is not None else _schema_type(model, node, name)
        try:
            if want == ir.AttributeType.FLOAT and isinstance(value, int) \
                    and not isinstance(value, bool):
                value = float(value)
            if want == ir.AttributeType.FLOATS and isinstance(value, (list, tuple)):
                value = [float(x) for x in value]
            attr = ir.convenience.convert_attribute(name, value)
        except (TypeError, ValueError) as e:
            raise PassError(f"Cannot use {value!r} as attribute {name!r}: {e}",
                            fix="Pass an int, float, str, a list of one of them, or a numpy "
                            "array.") from e
        if want is not None and want != attr.type:
            raise PassError(f"Attribute {name!r} of {self.options['node_id']} is "
                            f"{want.name}, the new value is {attr.type.name}.",
                            fix="Pass a value of the attribute's type.")
        node.attributes[name] = attr
        rw.record(node, [node])


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


@register_pass("remove_node", kind="edit")
class RemoveNode(LabPass):
    """Remove a node; reconnect its first input to its users, or make its outputs inputs."""

    params = (Param("node_id", str, "", "the node"),
              Param("reconnect", bool, True, "wire input 0 to the users of output 0; "
                    "False: the node's outputs become model inputs"))

    def find(self, model: LabModel) -> list[Match]:
        nid = self.options["node_id"]
        _node(model, nid)
        return [Match(f"remove_node:{nid}", "remove_node", self.name, [nid], nid,
                      f"remove {nid}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        nid = self.options["node_id"]
        node = _node(model, nid)
        graph = node.graph
        if self.options["reconnect"]:
            used_other = [v.name for v in node.outputs[1:] if v.uses() or v.is_graph_output()]
            if used_other:
                raise PassError(f"Cannot reconnect around {nid}: its output(s) {used_other} "
                                "besides the first are used.",
                                fix="Use remove_node(..., reconnect=False) to turn them into "
                                "model inputs.")
            if not node.inputs or node.inputs[0] is None:
                raise PassError(f"Cannot reconnect around {nid}: it has no first input.",
                                fix="Use reconnect=False.")
            if not rw.bypass(node):
                raise PassError(f"Cannot reconnect around {nid}: its input "
                                f"{node.inputs[0].name!r} is a model input, initializer or "
                                "output that would have to take over the output's name.",
                                fix="Use reconnect=False, or rename tensors first.")
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
class RenameTensor(LabPass):
    """Rename a tensor everywhere (edges, inputs, outputs, initializers)."""

    params = (Param("old", str, "", "current name"), Param("new", str, "", "new name"))

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
