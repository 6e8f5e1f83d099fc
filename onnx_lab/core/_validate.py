"""What a parsed ModelProto must satisfy before onnx_ir builds a model from it.

protobuf parses almost anything, and onnx_ir builds a model from whatever it is given: names
that are not UTF-8 come back as ``bytes``, an undefined attribute type or a tensor whose dims
disagree with its data only fails later, deep inside a table, a session or a save, as a
TypeError or an AssertionError. This walk runs once at open over the graph structure (never
over weight bytes: a few ms for BERT-base's 1,394 nodes) and turns each such cause into a
:class:`~onnx_lab.errors.ModelLoadError` that names the thing and the fix.

Two kinds of findings:

- **structural** problems make the model unreadable as a graph (names that are not UTF-8, an
  unknown tensor data type, attribute types that are undefined or contradict the ONNX schema,
  a standard node with fewer inputs or outputs than its schema requires, two nodes writing one
  tensor, sparse tensors, a map whose key is not an integer or string): ``check_structure`` raises (``check_ir_model`` for an
  ``onnx_ir.Model`` built in memory).
- **data** problems concern one tensor's bytes (dims that disagree with the data, data in a
  field its data type does not use, no data at all): the model still opens (tables, summary,
  ``check()``, which reports them), the tensor is kept as written (a save writes it back
  unchanged) but becomes an :class:`UnreadableTensor`, whose values raise
  :class:`~onnx_lab.errors.TensorDataError` and whose ``nbytes`` are the bytes it holds.
  Nothing ever allocates from the declared dims of such a tensor, and shape inference sees it
  without a shape.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._proto import graph_protos
from onnx_lab.errors import ExternalDataError, ModelLoadError, TensorDataError

__all__ = ["check_structure", "check_ir_model", "mark_unreadable", "remark_unreadable",
           "tensor_problem", "expected_nbytes", "UnreadableTensor", "unreadable", "KeptInline",
           "kept_inline", "ir_tensors", "tensor_dims", "dims_and_nbytes"]

_A = onnx.AttributeProto
_DTYPES = frozenset(int(d) for d in ir.DataType)
_DTYPE_OF = {int(d): d for d in ir.DataType}  # (an enum call per tensor costs µs)
_BITS = {int(d): d.bitwidth for d in ir.DataType
         if d not in (ir.DataType.UNDEFINED, ir.DataType.STRING)}
_ATTR_TYPES = frozenset(range(1, 15))  # FLOAT .. TYPE_PROTOS; 0 is UNDEFINED
_ATTR_NAMES = {v: k for k, v in _A.AttributeType.items()}
_SPARSE_ATTRS = frozenset({_A.SPARSE_TENSOR, _A.SPARSE_TENSORS})
# The key types ONNX allows for a map (ONNX-ML: ZipMap, DictVectorizer, CastMap).
_MAP_KEYS = frozenset(int(d) for d in (ir.DataType.STRING, ir.DataType.INT64, ir.DataType.INT32,
                                       ir.DataType.INT16, ir.DataType.INT8, ir.DataType.UINT64,
                                       ir.DataType.UINT32, ir.DataType.UINT16, ir.DataType.UINT8))
_PLAIN_ATTRS = frozenset({_A.FLOAT, _A.INT, _A.STRING, _A.FLOATS, _A.INTS, _A.STRINGS})
_DATA_FIELDS = ("int32_data", "int64_data", "uint64_data", "float_data", "double_data",
                "string_data")
# Which typed field may hold which data types (as onnx_ir reads them), and how many entries
# one element takes (two for complex numbers).
_D = ir.DataType
_FIELD_DTYPES = {
    "int32_data": {_D.BFLOAT16, _D.BOOL, _D.FLOAT16, _D.FLOAT4E2M1, _D.FLOAT8E4M3FN,
                   _D.FLOAT8E4M3FNUZ, _D.FLOAT8E5M2, _D.FLOAT8E5M2FNUZ, _D.FLOAT8E8M0,
                   _D.INT16, _D.INT32, _D.INT2, _D.INT4, _D.INT8, _D.UINT16, _D.UINT2,
                   _D.UINT4, _D.UINT8, _D.FLOAT6E2M3, _D.FLOAT6E3M2},
    "int64_data": {_D.INT64},
    "uint64_data": {_D.UINT32, _D.UINT64},
    "float_data": {_D.FLOAT, _D.COMPLEX64},
    "double_data": {_D.DOUBLE, _D.COMPLEX128},
    "string_data": {_D.STRING},
}
_FIELD_BYTES = {"int32_data": 4, "float_data": 4, "int64_data": 8, "uint64_data": 8,
                "double_data": 8}
_REEXPORT = "Re-export the model, or replace the tensor (lab.initializers shows it)."


def _dtype_label(dtype: int) -> str:
    try:
        return ir.DataType(dtype).name
    except ValueError:
        return str(dtype)


def expected_nbytes(dtype: int, numel: int) -> int:
    """Bytes ``numel`` elements of ``dtype`` take in ``raw_data`` / an external file
    (sub-byte types packed, as ONNX stores them)."""
    bits = _BITS.get(dtype)
    if bits is None:
        bits = ir.DataType(dtype).bitwidth  # (raises for types of no fixed size)
    return (numel * bits + 7) // 8


def tensor_dims(t: ir.TensorProtocol) -> tuple[int | None, ...]:
    """``t``'s dims (a negative one as None), read from the message for a plain tensor
    onnx_ir read from one (its ``shape`` builds a new ``Shape`` on every read: µs a tensor,
    and an unfused LLM export has 10^5 small weights)."""
    if type(t) is ir.serde.TensorProtoTensor:
        dims = tuple(t.raw.dims)
        if not dims or min(dims) >= 0:
            return dims
    return tuple(d if isinstance(d, int) and d >= 0 else None for d in t.shape)


def dims_and_nbytes(t: ir.TensorProtocol) -> tuple[tuple[int | None, ...], int]:
    """:func:`tensor_dims` and ``t.nbytes``: for a plain tensor read from a message, by
    onnx_ir's own formula (``TensorBase.nbytes``) from the message's dims."""
    dims = tensor_dims(t)
    if type(t) is ir.serde.TensorProtoTensor and None not in dims:
        itemsize = _SIZED.get(t.raw.data_type)
        if itemsize is not None:
            return dims, math.ceil(itemsize * math.prod(dims))
    return dims, int(t.nbytes)


# data type -> onnx_ir's itemsize (bytes, 0.5 for 4-bit types), for the types of a fixed size
_SIZED = {int(d): d.itemsize for d in ir.DataType
          if d not in (ir.DataType.UNDEFINED, ir.DataType.STRING)}


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _field_count(dtype: ir.DataType, field: str, numel: int) -> int:
    if field == "int32_data":
        bits = dtype.bitwidth
        per = 2 if bits == 4 else 4 if bits == 2 else 1
        return -(-numel // per)
    if dtype in (_D.COMPLEX64, _D.COMPLEX128):
        return 2 * numel
    return numel


def tensor_problem(t: onnx.TensorProto, stored: int | None = None) -> str | None:
    """Why ``t``'s data cannot be read as its dims and data type say, or None.

    Args:
        stored: the length of a ``raw_data`` that the loader took out of the message (the
            weights it keeps as views of the file).

    Only the lengths of the data fields are compared: no data is read.
    """
    dims = list(t.dims)
    if dims and min(dims) < 0:
        return f"has negative dims {dims}"
    dtype = _DTYPE_OF.get(t.data_type)
    if dtype is None:
        return f"has the unknown data type {t.data_type}"
    numel = math.prod(dims)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return None  # checked against its file (core.load.check_external_data)
    present = [f for f in _DATA_FIELDS if len(getattr(t, f))]
    has_raw = stored is not None or t.HasField("raw_data")
    if has_raw:
        present.insert(0, "raw_data")
    if len(present) > 1:
        return f"holds data in several fields ({', '.join(present)})"
    if dtype == _D.UNDEFINED:
        return "has no data type (data_type 0)"
    label = dtype.name
    if not present:
        if numel:
            return (f"declares dims {dims} ({numel:,} {label} elements) but holds no data")
        return None
    field = present[0]
    if field == "raw_data":
        if dtype == _D.STRING:
            return "is a STRING tensor with raw_data (strings go in string_data)"
        have = stored if stored is not None else len(t.raw_data)
        want = expected_nbytes(t.data_type, numel)
        if have != want:
            return (f"declares dims {dims} as {label} ({want:,} bytes) but holds {have:,} "
                    "bytes")
        return None
    if dtype not in _FIELD_DTYPES[field]:
        return f"is {label} but holds its data in {field}"
    want = _field_count(dtype, field, numel)
    have = len(getattr(t, field))
    if have != want:
        return (f"declares dims {dims} as {label} ({want:,} values in {field}) but holds "
                f"{have:,}")
    return None


# ------------------------------------------------------------------------- unreadable tensors
class UnreadableTensor(ir.serde.TensorProtoTensor):
    """A tensor kept as its ONNX message, whose data cannot be read as its dims say.

    Its name, data type and dims are shown as written (tables, summary, ``check()``, which
    reports the problem); a save writes the message back unchanged; reading its values raises
    :class:`~onnx_lab.errors.TensorDataError`. Nothing is allocated from its declared dims.
    """

    __slots__ = ("problem",)

    def __init__(self, proto: onnx.TensorProto, problem: str) -> None:
        super().__init__(proto)
        self.problem = problem

    def _error(self) -> TensorDataError:
        return TensorDataError(f"Tensor {self.name!r} {self.problem}: its values cannot be "
                               "read.", fix=_REEXPORT)

    def numpy(self):  # noqa: D102 - see the class
        raise self._error()

    def tobytes(self) -> bytes:  # noqa: D102
        raise self._error()

    def __array__(self, dtype=None, copy=None):  # noqa: D105
        raise self._error()

    def __dlpack__(self, *, stream=None):  # noqa: D105
        raise self._error()

    @property
    def nbytes(self) -> int:
        """The bytes the message holds, not what its dims declare (a 152-byte model may
        declare 8 GB): sizes, savings and summaries follow what is stored."""
        t = self._proto
        if t.HasField("raw_data"):
            return len(t.raw_data)
        if len(t.string_data):
            return sum(len(x) for x in t.string_data)
        return sum(len(getattr(t, f)) * size for f, size in _FIELD_BYTES.items())

    def __repr__(self) -> str:
        return (f"UnreadableTensor<{self.dtype.name},{list(self._proto.dims)}>"
                f"(name={self.name!r}, problem={self.problem!r})")


@dataclass(frozen=True)
class _Bad:
    """Where a tensor with a data problem lies: a path of (node index, attribute name, graph
    index) steps to its graph, then an initializer name or (node index, attribute, index)."""

    graph: tuple[tuple[int, str, int], ...]
    initializer: str | None
    node: int | None
    attribute: str | None
    index: int | None
    problem: str


def mark_unreadable(model: ir.Model, bad: list[_Bad]) -> None:
    """Replace the tensors ``check_structure`` found unreadable by :class:`UnreadableTensor`."""
    for b in bad:
        g = model.graph
        for node_i, attr, k in b.graph:
            a = g.node(node_i).attributes[attr]
            g = a.value if a.type == ir.AttributeType.GRAPH else a.value[k]
        if b.initializer is not None:
            v = g.initializers.get(b.initializer)
            if v is not None and v.const_value is not None:
                v.const_value = unreadable(v.const_value, b.problem)
            continue
        node = g.node(b.node)
        a = node.attributes[b.attribute]
        if a.type == ir.AttributeType.TENSOR:
            node.attributes[b.attribute] = ir.AttrTensor(
                b.attribute, unreadable(a.value, b.problem), doc_string=a.doc_string)
        elif a.type == ir.AttributeType.TENSORS:
            ts = list(a.value)
            ts[b.index] = unreadable(ts[b.index], b.problem)
            node.attributes[b.attribute] = ir.AttrTensors(b.attribute, ts,
                                                          doc_string=a.doc_string)


class KeptInline(ir.serde.TensorProtoTensor):
    """A tensor that must stay inside the .onnx file when the others go to a data file (a
    STRING tensor, which data files cannot hold; an :class:`UnreadableTensor`, written back
    as read). It serializes as its message and reports 0 bytes, so onnx_ir's external-data
    writer (which externalizes every tensor over a size) leaves it where it is."""

    __slots__ = ()

    @property
    def nbytes(self) -> int:
        return 0


def kept_inline(t: ir.TensorProtocol) -> KeptInline:
    """``t`` as a :class:`KeptInline` (same message)."""
    proto = t.raw if isinstance(t, ir.serde.TensorProtoTensor) else ir.serde.serialize_tensor(t)
    return KeptInline(proto)


def remark_unreadable(model: ir.Model) -> None:
    """Make every tensor of ``model`` whose data disagrees with its dims an
    :class:`UnreadableTensor` (for a model onnx_ir built from a message, a copy or a user's
    in-memory model; the loader finds them while it checks the structure)."""
    for g in model.graphs():
        for v in g.initializers.values():
            problem = _ir_problem(v.const_value)
            if problem:
                v.const_value = unreadable(v.const_value, problem)
        for node in g:
            for key, a in list(node.attributes.items()):
                if a.type != ir.AttributeType.TENSOR:
                    continue
                problem = _ir_problem(a.value)
                if problem:
                    node.attributes[key] = ir.AttrTensor(key, unreadable(a.value, problem),
                                                         doc_string=a.doc_string)


def _ir_problem(t: ir.TensorProtocol | None) -> str | None:
    """:func:`tensor_problem` for a tensor onnx_ir built: from a message, or strings."""
    if isinstance(t, UnreadableTensor):
        return None
    if isinstance(t, ir.serde.TensorProtoTensor):
        return tensor_problem(t.raw)
    if isinstance(t, ir.StringTensor) and np.size(t.raw) != _numel(t.shape):
        return f"declares dims {list(t.shape)} as STRING but holds {np.size(t.raw)} strings"
    return None


def unreadable(t: ir.TensorProtocol, problem: str) -> UnreadableTensor:
    """``t`` (a tensor onnx_ir built from a message) as an :class:`UnreadableTensor`."""
    if isinstance(t, UnreadableTensor):
        return t
    proto = t.raw if isinstance(t, ir.serde.TensorProtoTensor) else ir.serde.serialize_tensor(t)
    return UnreadableTensor(proto, problem)


# ------------------------------------------------------------------------- the structure walk
def _not_text(value: object) -> bool:
    return type(value) is not str


def _bad_text(what: str, where: str, value: bytes) -> ModelLoadError:
    return ModelLoadError(
        f"{what}: {where} is not valid UTF-8 ({bytes(value)[:40]!r}); ONNX strings must be "
        "UTF-8.", fix="Re-export the model, or fix the name with onnx (the file is damaged or "
        "was written by a broken exporter).")


@functools.cache
def _schema_attrs(op_type: str, domain: str, version: int) -> dict[str, int] | None:
    """Attribute name -> AttributeProto type the ONNX schema of the op gives it, plus the
    op's input and output counts under ``_COUNTS`` (None: no schema)."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except Exception:  # noqa: BLE001 - unknown op or opset: nothing to compare with
        return None
    out: dict = {name: int(a.type.value) for name, a in schema.attributes.items()}
    out[_COUNTS] = (schema.min_input, schema.max_input, schema.min_output, schema.max_output)
    return out


_COUNTS = ("counts",)  # a key no attribute name can be
_UNSEEN = object()


def _counts_problem(schema: dict | None, op_type: str, n_in: int, n_out: int) -> str | None:
    """Why a standard op with ``n_in`` inputs and ``n_out`` outputs lacks some its schema
    requires (every reader of the graph may index them). Extra inputs or outputs are left
    to ``check()``, which reports them."""
    if schema is None:
        return None
    lo_in, _, lo_out, _ = schema[_COUNTS]
    if n_in < lo_in:
        return f"has {n_in} inputs; ONNX {op_type} needs at least {lo_in}"
    if n_out < lo_out:
        return f"has {n_out} outputs; ONNX {op_type} makes at least {lo_out}"
    return None


class _Walk:
    def __init__(self, proto: onnx.ModelProto, what: str, skip: Collection[int]) -> None:
        self.what = what[:1].upper() + what[1:]
        self.skip = skip
        self.bad: list[_Bad] = []
        self.external = False  # some tensor refers to external data
        self.opsets: dict[str, int] = {}
        for op in proto.opset_import:
            if _not_text(op.domain):
                raise _bad_text(what, "an opset_import domain", op.domain)
            self.opsets[op.domain] = op.version
        default = self.opsets.get("", self.opsets.get("ai.onnx"))
        # Without a (valid) default opset the newest schemas judge attribute types: they
        # rarely change between versions, and the passes read them all the same.
        if default is None or default <= 0:
            default = onnx.defs.onnx_opset_version()
        self.opsets[""] = self.opsets["ai.onnx"] = default
        self.functions = {(f.domain, f.name) for f in proto.functions}
        self.in_function = False
        self.schemas: dict[str, dict | None] = {}  # op_type -> _schema_attrs at the opset

    def text(self, value: object, where: str) -> None:
        if _not_text(value):
            raise _bad_text(self.what, where, value)  # type: ignore[arg-type]

    def type_proto(self, tp: onnx.TypeProto, where: str) -> None:
        kind = tp.WhichOneof("value")
        if kind == "tensor_type" or kind == "sparse_tensor_type":
            tt = getattr(tp, kind)
            if tt.elem_type not in _DTYPES:
                raise ModelLoadError(
                    f"{self.what}: {where} has the unknown element type {tt.elem_type}.",
                    fix="Re-export the model (known types: FLOAT=1 ... FLOAT6E3M2=28).")
            for d in tt.shape.dim:
                if d.WhichOneof("value") == "dim_param":
                    self.text(d.dim_param, f"a dim name of {where}")
        elif kind == "map_type":
            mt = tp.map_type
            if mt.key_type not in _MAP_KEYS:
                raise ModelLoadError(
                    f"{self.what}: {where} is a map whose key type {mt.key_type} is not an "
                    "integer or string type.", fix="Re-export the model.")
            if not mt.HasField("value_type") or mt.value_type.WhichOneof("value") is None:
                raise ModelLoadError(f"{self.what}: {where} is a map without a value type.",
                                     fix="Re-export the model.")
            self.type_proto(mt.value_type, where)
        elif kind in ("sequence_type", "optional_type"):
            inner = getattr(tp, kind)
            if inner.HasField("elem_type"):
                self.type_proto(inner.elem_type, where)

    def props(self, entries, where: str) -> None:
        for p in entries:
            self.text(p.key, f"a metadata_props key of {where}")
            self.text(p.value, f"metadata_props {p.key!r} of {where}")

    def value_info(self, vi: onnx.ValueInfoProto, role: str, graph: str) -> None:
        try:  # the fast path (one C call); messages only on failure
            "".join((vi.name, vi.doc_string))
        except TypeError:
            self.text(vi.name, f"the name of a {role} of graph {graph!r}")
            self.text(vi.doc_string, f"the doc_string of {role} {vi.name!r} of graph {graph!r}")
        if len(vi.metadata_props):
            self.props(vi.metadata_props, f"{role} {vi.name!r}")
        tp = vi.type
        if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.elem_type in _DTYPES:
            try:  # a tensor of a known type whose dim names are text: nothing to say
                "".join([d.dim_param for d in tp.tensor_type.shape.dim])
                return
            except TypeError:
                pass
        self.type_proto(tp, f"{role} {vi.name!r} of graph {graph!r}")

    def tensor(self, t: onnx.TensorProto, where: str) -> str | None:
        try:  # the fast path (one C call); messages only on failure
            "".join((t.name, t.doc_string))
        except TypeError:
            self.text(t.name, f"the name of {where}")
            self.text(t.doc_string, f"the doc_string of {where}")
        if len(t.metadata_props):
            self.props(t.metadata_props, where)
        if t.data_type not in _DTYPES:
            raise ModelLoadError(
                f"{self.what}: {where} {t.name!r} has the unknown data type {t.data_type}.",
                fix="Re-export the model (known types: FLOAT=1 ... FLOAT6E3M2=28).")
        if len(t.dims) and min(t.dims) < 0:
            raise ModelLoadError(
                f"{self.what}: {where} {t.name!r} has negative dims {list(t.dims)}.",
                fix="Re-export the model: tensor dims are sizes, never negative.")
        if t.data_location == onnx.TensorProto.EXTERNAL:
            self.external = True
            if t.data_type in (0, _D.STRING):
                raise ModelLoadError(
                    f"{self.what}: {where} {t.name!r} is external data of type "
                    f"{_dtype_label(t.data_type)}, which cannot be stored in a data file.",
                    fix="Re-export the model.")
        return tensor_problem(t)

    def found(self, bad: _Bad) -> None:
        if self.in_function:  # function bodies are not located: refuse instead
            raise ModelLoadError(f"{self.what}: a tensor in a function body {bad.problem}.",
                                 fix=_REEXPORT)
        self.bad.append(bad)

    def graph(self, g: onnx.GraphProto, path: tuple[tuple[int, str, int], ...],
              outer: str) -> None:
        name = g.name
        self.text(name, f"the name of a graph in {outer}")
        label = name or outer
        self.text(g.doc_string, f"the doc_string of graph {label!r}")
        if len(g.metadata_props):
            self.props(g.metadata_props, f"graph {label!r}")
        if len(g.sparse_initializer):
            raise ModelLoadError(
                f"{self.what}: graph {label!r} has {len(g.sparse_initializer)} sparse "
                "initializer(s), which onnx_lab (and onnx_ir) cannot read.",
                fix="Store them as dense initializers (onnx.numpy_helper) before opening.")
        for vi in g.input:
            self.value_info(vi, "input", label)
        for vi in g.output:
            self.value_info(vi, "output", label)
        for vi in g.value_info:
            self.value_info(vi, "value_info entry", label)
        defined = {vi.name for vi in g.input}
        where = f"initializer of graph {label!r}"
        for k, t in enumerate(g.initializer):
            if not path and not self.in_function and k in self.skip:
                # a weight the loader keeps as a view of the file: its dtype and length
                # were checked against its dims there
                self.text(t.name, f"the name of initializer {k} of graph {label!r}")
                self.text(t.doc_string, f"the doc_string of initializer {t.name!r}")
                if len(t.metadata_props):
                    self.props(t.metadata_props, f"initializer {t.name!r}")
            else:
                problem = self.tensor(t, where)
                if problem:
                    self.found(_Bad(path, t.name, None, None, None, problem))
            defined.add(t.name)
        for i, node in enumerate(g.node):
            self.node(node, i, path, label, defined)

    def node(self, node: onnx.NodeProto, i: int, path: tuple[tuple[int, str, int], ...],
             graph: str, defined: set[str]) -> None:
        # The fast path of every check is one C call (str.join raises TypeError on a bytes
        # name); messages are built only on failure. BERT-base: ~10 ms for 1,394 nodes.
        name, op_type = node.name, node.op_type
        ins, outs = list(node.input), list(node.output)
        try:
            "".join((name, op_type, node.domain, node.doc_string, node.overload, *ins, *outs))
        except TypeError:
            where = f"node {i} of {graph}"
            for field in ("name", "op_type", "domain", "doc_string", "overload"):
                self.text(getattr(node, field), f"the {field} of {where}")
            for s in ins:
                self.text(s, f"an input name of {where}")
            for s in outs:
                self.text(s, f"an output name of {where}")
        if len(node.metadata_props):
            self.props(node.metadata_props, self.where(node, i, graph))
        for s in outs:
            if s in defined and s:
                raise ModelLoadError(
                    f"{self.what}: tensor {s!r} has two writers in {graph} "
                    f"({self.where(node, i, graph)} writes a tensor that a graph input, an "
                    "initializer or another node already defines).",
                    fix="Rename one of the outputs: every tensor of an ONNX graph is written "
                    "once.")
            defined.add(s)
        schema = None
        domain = node.domain
        if not self.in_function and (domain == "" or domain == "ai.onnx") \
                and (domain, op_type) not in self.functions:
            schema = self.schemas.get(op_type, _UNSEEN)
            if schema is _UNSEEN:
                schema = self.schemas[op_type] = _schema_attrs(op_type, "", self.opsets[""])
            if schema is not None:
                lo_in, _, lo_out, _ = schema[_COUNTS]
                if len(ins) < lo_in or len(outs) < lo_out:
                    problem = _counts_problem(schema, op_type, len(ins), len(outs))
                    raise ModelLoadError(f"{self.what}: {self.where(node, i, graph)} {problem}.",
                                         fix="Re-export the model (the node is malformed).")
        for a in node.attribute:
            kind = a.type
            # The fast path of the usual attribute (a number, numbers or a string whose type
            # the schema agrees with); anything else, and every message, in attribute().
            if kind in _PLAIN_ATTRS and (schema is None or schema.get(a.name, kind) == kind):
                try:
                    "".join((a.name, a.ref_attr_name, a.doc_string))
                except TypeError:
                    pass  # attribute() names the field that is not text
                else:
                    continue
            self.attribute(a, node, i, path, graph, schema)

    @staticmethod
    def where(node: onnx.NodeProto, i: int, graph: str) -> str:
        op = f"{node.op_type} node {node.name!r}" if node.name else f"{node.op_type} node {i}"
        return f"{op} of {graph}"

    def attribute(self, a: onnx.AttributeProto, node: onnx.NodeProto, i: int,
                  path: tuple[tuple[int, str, int], ...], graph: str,
                  schema: dict[str, int] | None) -> None:
        kind = a.type
        try:
            "".join((a.name, a.ref_attr_name, a.doc_string))
        except TypeError:
            where = self.where(node, i, graph)
            self.text(a.name, f"an attribute name of {where}")
            self.text(a.ref_attr_name, f"the ref_attr_name of an attribute of {where}")
            self.text(a.doc_string, f"the doc_string of attribute {a.name!r} of {where}")
        if a.ref_attr_name:
            return  # a reference to a function attribute: typed by the call
        if kind in _PLAIN_ATTRS and (schema is None or schema.get(a.name, kind) == kind):
            return  # numbers and strings: nothing more to check
        at = f"attribute {a.name!r} of {self.where(node, i, graph)}"
        if a.type not in _ATTR_TYPES:
            kind = "no type (UNDEFINED)" if a.type == 0 else f"the unknown type {a.type}"
            raise ModelLoadError(f"{self.what}: {at} has {kind}.",
                                 fix="Re-export the model, or set the attribute's type.")
        if a.type in _SPARSE_ATTRS:
            raise ModelLoadError(
                f"{self.what}: {at} holds a sparse tensor, which onnx_lab (and onnx_ir) "
                "cannot read.",
                fix="Use a dense tensor (Constant 'value') instead.")
        if schema is not None and a.name in schema and schema[a.name] != a.type:
            raise ModelLoadError(
                f"{self.what}: {at} is {_ATTR_NAMES.get(a.type, a.type)}, but ONNX "
                f"{node.op_type} (opset {self.opsets['']}) takes "
                f"{_ATTR_NAMES.get(schema[a.name], schema[a.name])}.",
                fix=f"Re-export the model, or give {a.name!r} the type the operator takes.")
        if a.type == _A.GRAPH:
            if not a.HasField("g"):
                raise ModelLoadError(f"{self.what}: {at} is a GRAPH attribute without a graph.",
                                     fix="Re-export the model.")
            self.graph(a.g, (*path, (i, a.name, 0)), at)
        elif a.type == _A.GRAPHS:
            for k, sub in enumerate(a.graphs):
                self.graph(sub, (*path, (i, a.name, k)), at)
        elif a.type == _A.TENSOR:
            if not a.HasField("t"):
                raise ModelLoadError(f"{self.what}: {at} is a TENSOR attribute without a "
                                     "tensor.", fix="Re-export the model.")
            problem = self.tensor(a.t, f"the tensor of {at}")
            if problem:
                self.found(_Bad(path, None, i, a.name, None, problem))
        elif a.type == _A.TENSORS:
            for k, t in enumerate(a.tensors):
                problem = self.tensor(t, f"tensor {k} of {at}")
                if problem:
                    self.found(_Bad(path, None, i, a.name, k, problem))
        elif a.type == _A.TYPE_PROTO:
            self.type_proto(a.tp, at)
        elif a.type == _A.TYPE_PROTOS:
            for tp in a.type_protos:
                self.type_proto(tp, at)

    def function(self, f: onnx.FunctionProto) -> None:
        for field in ("name", "domain", "doc_string", "overload"):
            self.text(getattr(f, field), f"the {field} of a function")
        where = f"function {f.domain}::{f.name}"
        # (onnx_ir's serializer raised on these: check(), summary() and render() crashed)
        self.props(f.metadata_props, where)
        for a in f.attribute_proto:
            for field in ("name", "doc_string", "ref_attr_name"):
                self.text(getattr(a, field), f"the {field} of a default attribute of {where}")
        for s in (*f.input, *f.output, *f.attribute):
            self.text(s, f"an input, output or attribute name of {where}")
        for op in f.opset_import:
            self.text(op.domain, f"an opset domain of {where}")
        self.attribute_defaults(f, where)
        defined = set(f.input)
        self.in_function = True
        try:
            for i, node in enumerate(f.node):
                self.node(node, i, (), where, defined)
        finally:
            self.in_function = False
        missing = [o for o in f.output if o not in defined]
        if missing:
            raise ModelLoadError(f"{self.what}: {where} returns {missing[0]!r}, which no node "
                                 "of the function computes.", fix="Re-export the model.")


    def attribute_defaults(self, f: onnx.FunctionProto, where: str) -> None:
        """Refuse a default attribute value (ir_version >= 9) held in a data file: no check
        or pinning of the loader reaches it, and onnx_ir resolves it against the current
        folder (an absolute location as it is), so a tool that inlines the function read
        any file into the model."""
        holder = onnx.GraphProto(node=[onnx.NodeProto(attribute=f.attribute_proto)])
        for g in graph_protos(holder):
            tensors = list(g.initializer)
            for node in g.node:
                for a in node.attribute:
                    tensors.extend([a.t] if a.type == onnx.AttributeProto.TENSOR
                                   else a.tensors)
            for t in tensors:
                if t.data_location == onnx.TensorProto.EXTERNAL:
                    raise ExternalDataError(
                        f"{self.what}: a default attribute value of {where} (tensor "
                        f"{t.name!r}) refers to external data, which onnx_lab does not read "
                        "there (it would not be resolved in the model's folder).",
                        fix="Store the default inside the model, or pass the attribute "
                        "at each call of the function.")


def check_structure(proto: onnx.ModelProto, what: str, *, skip: Collection[int] = ()
                    ) -> tuple[list[_Bad], bool]:
    """Check ``proto``'s structure (see the module docstring) before onnx_ir reads it.

    Args:
        what: how the source is named in messages (``"'model.onnx'"``, ``"the given bytes"``).
        skip: positions in the main graph's ``initializer`` list whose ``raw_data`` the loader
            took out (weights kept as views of the file, checked against their dims there).

    Returns:
        The tensors with data problems, for :func:`mark_unreadable` once the model is built,
        and whether any tensor refers to external data (the loader checks and pins those;
        a model without any skips both walks).

    Raises:
        ModelLoadError: naming the first structural problem and the fix.
    """
    walk = _Walk(proto, what, skip)
    for field in ("producer_name", "producer_version", "domain", "doc_string"):
        walk.text(getattr(proto, field), f"the model's {field}")
    walk.props(proto.metadata_props, "the model")
    for f in proto.functions:
        walk.function(f)
    walk.graph(proto.graph, (), "the main graph")
    _check_inlined_size(proto, what)
    return walk.bad, walk.external


#: A model whose local functions expand, inlined, past this many nodes and past
#: :data:`MAX_INLINE_GROWTH` times its stored nodes (or past :data:`MAX_INLINED_TOTAL` at all)
#: is refused: onnxruntime inlines every call when it builds a session (check, compare,
#: profile, save...), and a 1 KB file whose 16 functions each call the next twice took it
#: 15 s (32,768 Relus; each level more than doubles it, 30 levels never end). Nesting grows
#: exponentially; an exporter's functions (one per module) grow a model by the number of
#: times each is called: 250 layers sharing one 200-node function is 111x, and opens.
MAX_INLINED_NODES = 20_000
MAX_INLINE_GROWTH = 500
MAX_INLINED_TOTAL = 10_000_000


def _refuse_inlined(inlined: int, stored: int, what: str) -> None:
    """ModelLoadError when ``inlined`` nodes from ``stored`` ones pass the limits above."""
    if inlined > MAX_INLINED_NODES and (inlined > MAX_INLINE_GROWTH * max(stored, 1)
                                        or inlined > MAX_INLINED_TOTAL):
        raise ModelLoadError(
            f"{what}: its local functions expand to {inlined:,} nodes when inlined (it stores "
            f"{stored:,}): onnxruntime would inline every call to build a session.",
            fix="Re-export the model with its functions inlined, or with fewer nested calls.")


def _own_nodes(nodes: Any, funcs: Any, bodies: Any, extra: Any = None) -> tuple[int, list]:
    """The nodes of ``nodes`` and of their bodies (``bodies(node)``: its node lists) that
    call none of ``funcs`` (plus ``extra(node)`` for each node), and the calls (keys of
    ``funcs``), without recursion."""
    count, calls, todo = 0, [], [list(nodes)]
    while todo:
        for node in todo.pop():
            key = (node.domain, node.op_type, node.overload)
            if key in funcs:
                calls.append(key)
            else:
                count += 1
            if extra is not None:
                count += extra(node)
            todo.extend(bodies(node))
    return count, calls


def _inlined_total(funcs: Any, bodies: Any, refs: Any, passed: Any, main: Any) -> int:
    """The nodes of ``main`` once every call of ``funcs`` is inlined. A graph attribute a
    function's node takes by reference (``refs(node)``: how many) is copied, inlined, at each
    use: each use counts as the largest graph a call passes (``passed(node)``: the node lists
    of each graph attribute a call of a local function carries, one list of lists each), so a
    1,000-node branch handed down 13 levels of doubling calls (16 million nodes) is no longer
    read as 9,000."""
    def walk(nodes: Any) -> Iterator:
        todo = [list(nodes)]
        while todo:
            for node in todo.pop():
                yield node
                todo.extend(bodies(node))

    args = [graphs for nodes in [main, *funcs.values()] for node in walk(nodes)
            if (node.domain, node.op_type, node.overload) in funcs for graphs in passed(node)]
    per_ref = 0
    for _ in range(8):  # a passed graph that passes graphs on: until the size settles
        def own(nodes: Any, per_ref: int = per_ref) -> tuple[int, list]:
            return _own_nodes(nodes, funcs, bodies, (  # a call hands it on: no use
                lambda n: 0 if (n.domain, n.op_type, n.overload) in funcs else per_ref * refs(n))
                if per_ref else None)

        sizes = _inlined_sizes({key: own(f) for key, f in funcs.items()})

        def nodes_of(nodes: Any, own: Any = own, sizes: dict = sizes) -> int:
            count, calls = own(nodes)
            return count + sum(sizes[c] for c in calls)

        largest = min(max((sum(nodes_of(g) for g in graphs) for graphs in args), default=0),
                      MAX_INLINED_TOTAL + 1)
        if largest <= per_ref:
            break
        per_ref = largest
    return nodes_of(main)


def _inlined_sizes(parts: dict[Any, tuple[int, list]]) -> dict[Any, int]:
    """{function: its nodes once every call inside it is inlined}, from ``parts``
    ({function: (its nodes that call no local function, the calls)}), without recursion (a
    chain of a few hundred functions, each calling the next once, is no bomb, and recursing
    into it raised RecursionError at open). A function on the path of its own calls (a cycle,
    which onnxruntime refuses) counts as one node."""
    sizes: dict[Any, int] = {}
    active: set = set()
    for root in parts:
        stack = [(root, False)]
        while stack:
            key, ready = stack.pop()
            if ready:  # its callees are sized
                count, calls = parts[key]
                sizes[key] = count + sum(sizes.get(c, 1) for c in calls)
                active.discard(key)
            elif key not in sizes and key not in active:
                active.add(key)
                stack.append((key, True))
                stack.extend((c, False) for c in dict.fromkeys(parts[key][1])
                             if c not in sizes and c not in active)
    return sizes


def _check_inlined_size(proto: onnx.ModelProto, what: str) -> None:
    """Refuse a model whose local functions expand too far when inlined
    (:func:`_refuse_inlined`)."""
    if not len(proto.functions):
        return
    funcs = {(f.domain, f.name, f.overload): f for f in proto.functions}

    def bodies(node: onnx.NodeProto) -> list:
        return [b.node for a in node.attribute for b in (
            [a.g] if a.type == onnx.AttributeProto.GRAPH else
            a.graphs if a.type == onnx.AttributeProto.GRAPHS else ())]

    graph_types = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)

    def refs(node: onnx.NodeProto) -> int:
        return sum(1 for a in node.attribute if a.ref_attr_name and a.type in graph_types)

    def passed(node: onnx.NodeProto) -> list:
        return [[a.g.node] if a.type == onnx.AttributeProto.GRAPH else
                [g.node for g in a.graphs] for a in node.attribute
                if not a.ref_attr_name and a.type in graph_types]

    nodes = {key: f.node for key, f in funcs.items()}
    # the functions' If/Loop/Scan bodies too, as the inlined count has them (a function
    # holding a 500-node Loop body, called 41 times, read "the file stores 42" and was refused)
    stored = sum(1 for g in graph_protos(proto.graph) for _ in g.node) + sum(
        len(f.node) + sum(len(b.node) for n in f.node for a in n.attribute
                          for top in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                                      a.graphs if a.type == onnx.AttributeProto.GRAPHS else ())
                          for b in graph_protos(top))
        for f in proto.functions)
    _refuse_inlined(_inlined_total(nodes, bodies, refs, passed, proto.graph.node), stored,
                    what)


# ------------------------------------------------------------------------- in-memory models
def _ir_tensors(model: ir.Model) -> Iterator[tuple[str, ir.TensorProtocol]]:
    # the graphs, then the local functions' nodes (their If/Loop/Scan bodies included)
    bodies: list[Any] = list(model.graphs())
    for f in model.functions.values():
        bodies.append(f)
        todo = [f]  # (not onnx_ir's RecursiveGraphIterator: it raised TypeError on a graph
        while todo:  # attribute taken by reference, which has no value here)
            for node in todo.pop():
                for a in node.attributes.values():
                    if a.is_ref():  # a reference to the function's attribute: no value here
                        continue
                    if a.type == ir.AttributeType.GRAPH:
                        bodies.append(a.value)
                        todo.append(a.value)
                    elif a.type == ir.AttributeType.GRAPHS:
                        bodies.extend(a.value)
                        todo.extend(a.value)
    for g in bodies:
        for name, v in (g.initializers.items() if isinstance(g, ir.Graph) else ()):
            if v.const_value is not None:
                yield f"initializer {name!r}", v.const_value
        for node in g:
            for a in node.attributes.values():
                if a.is_ref():
                    continue
                if a.type == ir.AttributeType.TENSOR:
                    yield f"the tensor of attribute {a.name!r} of node {node.name!r}", a.value
                elif a.type == ir.AttributeType.TENSORS:
                    for t in a.value:
                        yield f"a tensor of attribute {a.name!r} of node {node.name!r}", t


def check_ir_model(model: ir.Model, what: str) -> None:
    """The checks of :func:`check_structure` that apply to a model built in memory: text
    (an ``onnx_ir.Model`` deserialized from a damaged proto carries ``bytes`` names, dim
    names, doc strings and metadata) and attribute types (undefined, or contradicting the
    ONNX schema of a standard op), and the input/output counts the schemas require."""
    what = what[:1].upper() + what[1:]
    version = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if version is None or version <= 0:
        version = onnx.defs.onnx_opset_version()
    functions = set(model.functions)

    def text(value: object, where: str) -> None:
        if value is not None and _not_text(value):
            raise _bad_text(what, where, value)  # type: ignore[arg-type]

    def props(owner: object, where: str) -> None:
        for k, v in (getattr(owner, "metadata_props", None) or {}).items():
            text(k, f"a metadata_props key of {where}")
            text(v, f"metadata_props {k!r} of {where}")

    def value(v: ir.Value, where: str) -> None:
        text(v.name, where)
        props(v, f"value {v.name!r}")
        text(getattr(v, "doc_string", None), f"the doc_string of value {v.name!r}")
        for d in v.shape or ():
            if not isinstance(d, int):
                text(getattr(d, "value", None), f"a dim name of value {v.name!r}")

    def node_checks(node: ir.Node, where: str, standard_ops: bool) -> None:
        for field in ("name", "op_type", "domain", "doc_string"):
            text(getattr(node, field), f"the {field} of a node in {where}")
        props(node, f"node {node.name!r}")
        for o in node.outputs:
            value(o, f"an output name of node {node.name!r}")
        for v in node.inputs:  # values nothing defines are in no graph's lists
            if v is not None:
                text(v.name, f"an input name of node {node.name!r}")
        standard = standard_ops and node.domain in ("", "ai.onnx") \
            and (node.domain, node.op_type, "") not in functions
        schema = _schema_attrs(node.op_type, "", version) if standard else None
        problem = _counts_problem(schema, node.op_type, len(node.inputs), len(node.outputs))
        if problem:
            raise ModelLoadError(f"{what}: {node.op_type} node {node.name!r} {problem}.",
                                 fix="Rebuild the node with the inputs and outputs its "
                                 "operator takes.")
        for a in node.attributes.values():
            text(a.name, f"an attribute name of node {node.name!r}")
            text(a.doc_string, f"the doc_string of attribute {a.name!r}")
            at = f"attribute {a.name!r} of {node.op_type} node {node.name!r}"
            if a.is_ref():
                continue
            if a.type == ir.AttributeType.UNDEFINED:
                raise ModelLoadError(f"{what}: {at} has no type (UNDEFINED).",
                                     fix="Set the attribute's type.")
            if schema is not None and a.name in schema and schema[a.name] != int(a.type):
                raise ModelLoadError(
                    f"{what}: {at} is {a.type.name}, but ONNX {node.op_type} (opset "
                    f"{version}) takes {_ATTR_NAMES.get(schema[a.name])}.",
                    fix=f"Give {a.name!r} the type the operator takes.")

    for field in ("producer_name", "producer_version", "domain", "doc_string"):
        text(getattr(model, field), f"the model's {field}")
    props(model, "the model")
    for domain in model.opset_imports:
        text(domain, "an opset_import domain")
    for g in model.graphs():
        text(g.name, "a graph name")
        text(g.doc_string, f"the doc_string of graph {g.name!r}")
        props(g, f"graph {g.name!r}")
        for v in (*g.inputs, *g.outputs, *g.initializers.values()):
            value(v, f"a value name in graph {g.name!r}")
        for node in g:
            node_checks(node, f"graph {g.name!r}", True)
    for desc, t in _ir_tensors(model):
        text(t.name, f"the tensor name of {desc}")
        text(t.doc_string, f"the doc_string of {desc}")
        props(t, desc)
        if isinstance(t, ir.ExternalTensor):
            text(t.location, f"the external data location of {desc}")
    for f in model.functions.values():
        for field in ("name", "domain", "doc_string"):
            text(getattr(f, field), f"the {field} of a function")
        for v in f.inputs:
            value(v, f"an input name of function {f.name!r}")
        for node in f:
            node_checks(node, f"function {f.name!r}", False)
        for a in f.attributes.values():  # defaults: onnx_ir reads them from the current folder
            held = [a.value] if a.type == ir.AttributeType.TENSOR else \
                list(a.value or ()) if a.type == ir.AttributeType.TENSORS else []
            if any(isinstance(t, ir.ExternalTensor) for t in held):
                raise ExternalDataError(
                    f"{what}: the default of attribute {a.name!r} of function {f.name!r} "
                    "refers to external data, which onnx_lab does not read there (it would "
                    "not be resolved in the model's folder).",
                    fix="Store the default inside the model, or pass the attribute at each "
                    "call of the function.")
    _check_inlined_size_ir(model, what)


def _check_inlined_size_ir(model: ir.Model, what: str) -> None:
    """:func:`_check_inlined_size` for an ``onnx_ir.Model``: a function bomb passed to
    ``open`` as one (``ir.load`` of the file) was not refused, and ``check()`` never ended."""
    funcs = dict(model.functions)
    if not funcs:
        return

    def bodies(node: ir.Node) -> list:
        return [list(g) for a in node.attributes.values() if not a.is_ref() for g in (
            [a.value] if a.type == ir.AttributeType.GRAPH else
            a.value if a.type == ir.AttributeType.GRAPHS else ())]

    graph_types = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)

    def refs(node: ir.Node) -> int:
        return sum(1 for a in node.attributes.values() if a.is_ref() and a.type in graph_types)

    def passed(node: ir.Node) -> list:
        return [[list(a.value)] if a.type == ir.AttributeType.GRAPH else
                [list(g) for g in a.value] for a in node.attributes.values()
                if not a.is_ref() and a.type in graph_types]

    def own(nodes: Any) -> tuple[int, list]:
        return _own_nodes(nodes, funcs, bodies)

    parts = {key: own(f) for key, f in funcs.items()}
    main = own(model.graph)
    stored = main[0] + len(main[1]) + sum(c + len(k) for c, k in parts.values())
    _refuse_inlined(_inlined_total({k: list(f) for k, f in funcs.items()}, bodies, refs,
                                   passed, list(model.graph)), stored, what)


def ir_tensors(model: ir.Model) -> Iterator[tuple[str, ir.TensorProtocol]]:
    """(description, tensor) of every initializer and attribute tensor of every graph."""
    return _ir_tensors(model)
