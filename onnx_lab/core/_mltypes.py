"""ONNX-ML map types on onnx_ir, and the one spelling of every value type.

onnx_ir 1.x declares ``MapTypeProtocol`` but implements no map type: its deserializer raises
``NotImplementedError`` on a ``map_type`` and its serializer ``TypeError`` on anything but
tensors, sequences and optionals, so a scikit-learn classifier (a ZipMap output of type
``seq(map(int64, tensor(float)))``) or a DictVectorizer input cannot even be opened. No other
library gives onnx_ir maps, so this module supplies :class:`MapType` and wraps the three serde
functions that dispatch on the type (``deserialize_type_proto_for_type``,
``deserialize_type_proto_for_shape``, ``serialize_type_into``): a map is handled here, every
other type goes to onnx_ir's own function, unchanged. The serde functions recurse through
their module's globals, so ``seq(map(...))`` and ``map(k, seq(...))`` reach the wrapped ones.
:func:`install` runs once, when this module is first imported (by ``core.shapes`` and
``core.load``, before any model is read or written).

:func:`onnx_type_label` spells a container's type as ONNX writes it without ``tensor(...)``,
as onnxruntime prints it (``seq(map(int64,float))``, ``seq(float)``, ``optional(float)``,
``map(string,int64)``); ``core.shapes.type_label`` uses it for the type column.
"""

from __future__ import annotations

import functools
from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir import serde

__all__ = ["MapType", "install", "onnx_type_label", "proto_type_label", "is_tensor_type"]


class MapType:
    """``map(key_type, value_type)``: ``key_type`` an integer or string DataType,
    ``value_type`` an onnx_ir type (a TensorType, SequenceType or MapType).

    ``dtype`` is the value type's, as onnx_ir's SequenceType reports its element's: a reader
    that needs a tensor checks ``isinstance(v.type, ir.TensorType)`` (see
    :func:`is_tensor_type`)."""

    __slots__ = ("key_type", "value_type", "denotation")

    def __init__(self, key_type: ir.DataType, value_type: Any, *,
                 denotation: str | None = None) -> None:
        self.key_type = ir.DataType(key_type)
        self.value_type = value_type
        self.denotation = denotation

    @property
    def elem_type(self) -> Any:
        return self.value_type

    @property
    def dtype(self) -> ir.DataType:
        return self.value_type.dtype

    @dtype.setter
    def dtype(self, value: ir.DataType) -> None:
        self.value_type.dtype = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MapType) and other.key_type == self.key_type \
            and other.value_type == self.value_type

    def __hash__(self) -> int:
        return hash(("map", int(self.key_type), repr(self.value_type)))

    def __repr__(self) -> str:
        return f"MapType({self.key_type!r}, {self.value_type!r})"

    def __str__(self) -> str:
        return onnx_type_label(self) or "map"


_ORIGINAL: dict[str, Any] = {}


def _deserialize_type(proto: onnx.TypeProto) -> Any:
    if proto.HasField("map_type"):
        mt = proto.map_type
        value = serde.deserialize_type_proto_for_type(mt.value_type) \
            if mt.HasField("value_type") else None
        if value is None:
            raise ValueError("MapTypeProto must have value_type set")
        return MapType(ir.DataType(mt.key_type), value,
                       denotation=proto.denotation or None)
    return _ORIGINAL["deserialize_type_proto_for_type"](proto)


def _deserialize_shape(proto: onnx.TypeProto) -> ir.Shape | None:
    if proto.HasField("map_type"):
        return None  # a map has keys, not a shape
    return _ORIGINAL["deserialize_type_proto_for_shape"](proto)


def _serialize_type(type_proto: onnx.TypeProto, from_: Any) -> None:
    if isinstance(from_, MapType):
        if from_.denotation:
            type_proto.denotation = from_.denotation
        mt = type_proto.map_type
        mt.key_type = int(from_.key_type)
        serde.serialize_type_into(mt.value_type, from_.value_type)
        return
    _ORIGINAL["serialize_type_into"](type_proto, from_)


_WRAPPERS = {"deserialize_type_proto_for_type": _deserialize_type,
             "deserialize_type_proto_for_shape": _deserialize_shape,
             "serialize_type_into": _serialize_type}


def install() -> None:
    """Give onnx_ir's serde map types (idempotent)."""
    for name, wrapper in _WRAPPERS.items():
        current = getattr(serde, name)
        if getattr(current, "_onnx_lab_maps", False):
            continue
        _ORIGINAL[name] = current
        wrapped = functools.wraps(current)(wrapper)
        wrapped._onnx_lab_maps = True  # type: ignore[attr-defined]
        setattr(serde, name, wrapped)


def is_tensor_type(t: Any) -> bool:
    """True for a (dense) tensor type, False for sequences, maps, optionals, sparse, None."""
    return isinstance(t, ir.TensorType)


def _onnx_name(dtype: ir.DataType) -> str:
    # ONNX's spelling (float, double, int64, string), as onnxruntime prints types.
    name = onnx.TensorProto.DataType.Name(int(dtype)).lower()
    return name


def onnx_type_label(t: Any) -> str | None:
    """``seq(map(int64,float))``: a type as ONNX writes it, tensors without ``tensor(...)``."""
    if t is None:
        return None
    if isinstance(t, ir.TensorType):
        return _onnx_name(t.dtype)
    if isinstance(t, ir.SparseTensorType):
        return f"sparse({_onnx_name(t.dtype)})"
    if isinstance(t, ir.SequenceType):
        return f"seq({onnx_type_label(t.elem_type)})"
    if isinstance(t, ir.OptionalType):
        return f"optional({onnx_type_label(t.elem_type)})"
    if isinstance(t, MapType):
        return f"map({_onnx_name(t.key_type)},{onnx_type_label(t.value_type)})"
    return None


def proto_type_label(tp: onnx.TypeProto) -> str | None:
    """:func:`onnx_type_label` of a TypeProto (inferred value_info)."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return _onnx_name(ir.DataType(tp.tensor_type.elem_type)) \
            if tp.tensor_type.elem_type else None
    if kind == "sparse_tensor_type":
        return f"sparse({_onnx_name(ir.DataType(tp.sparse_tensor_type.elem_type))})"
    if kind == "sequence_type":
        inner = proto_type_label(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else "seq"
    if kind == "optional_type":
        inner = proto_type_label(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else "optional"
    if kind == "map_type":
        inner = proto_type_label(tp.map_type.value_type)
        return f"map({_onnx_name(ir.DataType(tp.map_type.key_type))},{inner})"
    return None


install()
