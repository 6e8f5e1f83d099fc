"""The attribute edit: ``set_attribute``, its value coercion and checks against the op
schema, and the form the Editor shows (``attribute_form``, ``parse_attribute_text``).
Importable from :mod:`onnx_lab.transforms.edit`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.errors import PassError, unknown_name
from onnx_lab.transforms._edit_base import _EditPass, _node
from onnx_lab.transforms.base import (
    Match,
    Param,
    Rewrite,
    register_pass,
)

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
    # onnxruntime reads an unknown RoiAlign coordinate mode as output_half_pixel, silently
    ("RoiAlign", "mode"): ("avg", "max"),
    ("RoiAlign", "coordinate_transformation_mode"): ("half_pixel", "output_half_pixel"),
    ("Upsample", "mode"): ("nearest", "linear"),
    **{(op, "reduction"): ("none", "add", "mul", "max", "min")
       for op in ("ScatterElements", "ScatterND")},
    ("StringNormalizer", "case_change_action"): ("LOWER", "UPPER", "NONE"),
    ("TfIdfVectorizer", "mode"): ("TF", "IDF", "TFIDF"),
    ("ImageDecoder", "pixel_format"): ("RGB", "BGR", "Grayscale"),
    **{(op, "direction"): ("forward", "reverse", "bidirectional") for op in ("LSTM", "GRU", "RNN")},
}


# INT attributes that hold an onnx.TensorProto data type (may be given by name)
_DTYPE_ATTRS = {"Cast": ("to",), "EyeLike": ("dtype",), "RandomNormal": ("dtype",),
                "RandomUniform": ("dtype",), "RandomNormalLike": ("dtype",),
                "RandomUniformLike": ("dtype",), "Multinomial": ("dtype",),
                "Bernoulli": ("dtype",), "QuantizeLinear": ("output_dtype",)}


# Ops whose float attributes hold NaN on purpose: a Constant's value, ai.onnx.ml's Imputer
# (replaced_value_float=NaN: impute missing values) and LabelEncoder (NaN keys match NaN inputs).
_NAN_MEANS_SOMETHING = frozenset({"Constant", "Imputer", "LabelEncoder"})


def _coerce_attribute(where: str, op_type: str, name: str, value: Any,
                      want: ir.AttributeType | None) -> ir.Attr:
    """``value`` as an attribute of type ``want`` (the schema's or the existing one), or
    PassError naming the expected type."""
    T = ir.AttributeType

    def bad(what: str) -> PassError:
        return PassError(f"Attribute {name!r} of {where} ({op_type}) is {want.name}; got "
                         f"{type(value).__name__} {value!r}: {what}.",
                         fix=f"Pass a value of type {want.name}.")

    def is_int(x: Any) -> bool:  # and fits the int64 ONNX stores
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool) \
            and -(1 << 63) <= int(x) < (1 << 63)

    def is_num(x: Any) -> bool:
        return is_int(x) or isinstance(x, (float, np.floating))

    if want is None:
        try:
            return ir.convenience.convert_attribute(name, value)
        except (TypeError, ValueError) as e:
            raise PassError(f"Cannot use {value!r} as attribute {name!r} of {where}: {e}",
                            fix="Pass an int, float, str, a list of one of them, or a numpy "
                            "array.") from e
    def finite32(values: Sequence[Any]) -> None:
        # ONNX stores float attributes as float32. NaN means nothing to an op's attribute
        # (LayerNormalization epsilon=nan made every output NaN, reported as an expected
        # change); a finite number past float32 would be stored as inf. A Constant's
        # value_float may hold either on purpose.
        if op_type in _NAN_MEANS_SOMETHING:
            return
        for x in values:
            x = float(x)
            if math.isnan(x):
                raise PassError(f"Attribute {name!r} of {where} ({op_type}) cannot be NaN.",
                                fix="Pass a number.")
            with np.errstate(over="ignore"):  # what float32 rounds it to, not a bound
                stored = float(np.float32(x))
            if math.isfinite(x) and not math.isfinite(stored):
                raise PassError(f"Attribute {name!r} of {where} ({op_type}): {x!r} does not "
                                "fit the float32 ONNX stores (it would become inf).",
                                fix="Pass a number within ±3.4e38 (or inf itself if meant).")

    if want == T.FLOAT:
        if not is_num(value):
            raise bad("expected a number")
        finite32([value])
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
            raise bad("expected an integer (int64)")
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
                raise bad("expected a list of integers (int64)")
            return ir.AttrInt64s(name, [int(x) for x in value])
        if want == T.FLOATS:
            if not all(is_num(x) for x in value):
                raise bad("expected a list of numbers")
            finite32(value)
            return ir.AttrFloat32s(name, [float(x) for x in value])
        if not all(isinstance(x, str) for x in value):
            raise bad("expected a list of strings")
        return ir.AttrStrings(name, list(value))
    if want == T.TENSOR:
        if not isinstance(value, (np.ndarray, int, float, np.generic)) or isinstance(value, bool):
            raise bad("expected a numpy array or a number")
        arr = np.asarray(value)
        if arr.dtype.kind == "O":  # a Python int past int64
            raise bad("a number numpy cannot hold in a fixed-width type")
        return ir.AttrTensor(name, ir.tensor(arr, name=name))
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
        if a.type in (ir.AttributeType.FLOAT, ir.AttributeType.FLOATS):
            # stored as float32: 1e-5 given again is the value the model holds
            return bool(np.array_equal(np.float32(va), np.float32(vb)))
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
