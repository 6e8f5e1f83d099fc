"""Types and shapes of every value, by ONNX shape inference on a weight-free skeleton.

Shape inference runs on a copy of the graph in which large tensors (initializers and Constant
node values over ``_KEEP_BYTES``) are replaced by typed graph inputs. The skeleton holds no
weights, so inference is fast, needs no external data, and works for models over 2 GB, while
small constants (shape vectors, axes) stay so data propagation can compute Reshape targets.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core import _contrib_shapes
from onnx_lab.core._fold import fold_into_bodies, fold_shape_values
from onnx_lab.core._mltypes import onnx_type_label, proto_type_label
from onnx_lab.core._proto import attribute_bodies, graph_protos
from onnx_lab.core._validate import UnreadableTensor, dims_and_nbytes, tensor_dims
from onnx_lab.core.dimexpr import dim_expression, dim_names, resolve_dim
from onnx_lab.errors import DimError, close_matches, unknown_name

if TYPE_CHECKING:
    from onnx_lab.core.index import ModelIndex
    from onnx_lab.core.model import LabModel

logger = logging.getLogger(__name__)

__all__ = ["TensorInfo", "TypeTable", "type_at", "value_type", "infer_types", "dtype_name", "type_label",
           "anonymous_dim", "shape_tuple",
           "validate_dims", "dynamic_dims", "expression_dims", "named_shapes", "fit_dims",
           "resolve_dim"]

_KEEP_BYTES = 4096
_PLAIN_TENSOR = ir.serde.TensorProtoTensor
_DTYPE_NAMES = {ir.DataType.FLOAT: "float32", ir.DataType.DOUBLE: "float64"}

Dim = int | str | None


@dataclass(frozen=True)
class TensorInfo:
    """dtype name (``"float32"``) and shape (ints, symbolic names, None for unknown dims;
    ``shape`` itself None when the rank is unknown)."""

    dtype: str | None
    shape: tuple[Dim, ...] | None

    @property
    def dynamic(self) -> bool:
        """True when the rank or any dim is not a concrete int."""
        return self.shape is None or any(not isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        if self.dynamic:
            return None
        n = 1
        for d in self.shape:  # type: ignore[union-attr]
            n *= d  # type: ignore[operator]
        return n


class TypeTable(dict):
    """The types of a model's values: ``name -> TensorInfo`` (a dict, as every reader uses it)
    and, for names defined in more than one graph (``ModelIndex.shared``: sibling If branches
    of optimum's merged decoders reuse hundreds of names with other shapes and types), the
    type of each definition: :meth:`at` reads the one a node in a given graph sees. The plain
    ``table[name]`` of such a name is its first definition's (``ModelIndex.value_graph``).

    Example:
        >>> types = lab.model.types(dims)
        >>> types.at("/decoder/Add_output_0", "optimum::if/then_branch").shape
    """

    def __init__(self, flat: Mapping[str, TensorInfo] | None = None,
                 scoped: Mapping[tuple[str, str], TensorInfo] | None = None,
                 scope: Callable[[str, str], str] | None = None,
                 shared: frozenset[str] | set[str] = frozenset()) -> None:
        super().__init__(flat or {})
        #: ``(graph path, name) -> TensorInfo`` of every definition of a shared name.
        self.scoped: dict[tuple[str, str], TensorInfo] = dict(scoped or {})
        self._scope = scope
        self._shared = shared

    def at(self, name: str, graph: str = "") -> TensorInfo | None:
        """The type of ``name`` as a node in the graph at ``graph`` reads it (``""``: main);
        None when unknown."""
        if name in self._shared and self._scope is not None:
            return self.scoped.get((self._scope(name, graph), name))
        return self.get(name)

    def defined(self, name: str, graph: str) -> TensorInfo | None:
        """The type of the definition of ``name`` made in the graph at ``graph``."""
        if name in self._shared:
            return self.scoped.get((graph, name))
        return self.get(name)


def type_at(types: Mapping[str, TensorInfo], name: str, graph: str = "") -> TensorInfo | None:
    """``types.at(name, graph)`` of a :class:`TypeTable`, ``types.get(name)`` of a plain
    mapping."""
    if isinstance(types, TypeTable):
        return types.at(name, graph)
    return types.get(name)


def value_type(model: LabModel, value: ir.Value, types: Mapping[str, TensorInfo] | None = None
               ) -> TensorInfo | None:
    """The inferred type of ``value`` (``types``, else ``model.types()``): its own graph's
    when sibling If branches define its name too."""
    types = model.types() if types is None else types
    name = value.name or ""
    if isinstance(types, TypeTable) and name in model.index.shared:
        return types.defined(name, model.index.path_of(value))
    return types.get(name)


_UNTYPED = TensorInfo(None, None)


def dtype_name(dtype: ir.DataType | int | None) -> str | None:
    """``ir.DataType.FLOAT`` / ``1`` -> ``"float32"``; None stays None."""
    if dtype is None:
        return None
    try:
        return _DTYPE_NAME_OF[dtype]  # called per value: ~0.4 s at 20,000 nodes uncached
    except (KeyError, TypeError):
        pass
    try:
        dt = ir.DataType(dtype)
    except ValueError:
        return None
    if dt == ir.DataType.UNDEFINED:
        return None
    name = _DTYPE_NAMES.get(dt, dt.name.lower())
    _DTYPE_NAME_OF[int(dt)] = name  # known types only: bounded by the enum
    return name


_DTYPE_NAME_OF: dict[int, str] = {}


def type_label(t: object) -> str | None:
    """The type column's text: a tensor's numpy dtype name (``float32``; None when unknown), a
    sequence, map or optional as ONNX writes it without ``tensor(...)``, as onnxruntime prints
    it (``seq(map(int64,float))``, ``seq(float)``, ``optional(float)``)."""
    if t is None:
        return None
    if isinstance(t, ir.TensorType):
        return dtype_name(t.dtype)
    return onnx_type_label(t)


def is_container(dtype: str | None) -> bool:
    """True for a :func:`type_label` of a sequence, map, optional or sparse tensor."""
    return dtype is not None and "(" in dtype


# dim_param spellings that mean "unknown" rather than a named symbol (PaddlePaddle writes "?").
_UNKNOWN_PARAMS = frozenset({"", "?", "-1", "None", "none"})


_ANONYMOUS = re.compile(r"unk__\d+")


def anonymous_dim(d: Dim) -> bool:
    """A dim of a :func:`shape_tuple` with no name of its own: unknown (None), or the
    ``unk__N`` that ONNX inference and tf2onnx write for a dim they could not name (a
    different N per model and per value, so no option can give it)."""
    return d is None or (isinstance(d, str) and _ANONYMOUS.fullmatch(d) is not None)


def shape_tuple(shape: ir.Shape | None) -> tuple[Dim, ...] | None:
    """``ir.Shape`` -> tuple of int / str / None.

    Named symbolic dims (``"batch"``, ``"floor(height/2)+1"``) stay strings; unknown dims
    (no value, a negative value such as ``-1``, or a ``"?"`` dim_param) become None.
    """
    if shape is None:
        return None
    out: list[Dim] = []
    for d in shape:
        if isinstance(d, int):
            out.append(d if d >= 0 else None)
        else:
            value = getattr(d, "value", None)
            out.append(value if isinstance(value, str) and value not in _UNKNOWN_PARAMS
                       else (value if isinstance(value, int) and value >= 0 else None))
    return tuple(out)


def dynamic_dims(model: LabModel) -> dict[str, list[str]]:
    """Symbolic dim name -> input names that use it (unnamed/-1/? dims as ``"?"``).

    A dim expression (``past_sequence_length + sequence_length``, see
    :mod:`onnx_lab.core.dimexpr`) is no name of its own: the names it uses are listed.
    """
    out: dict[str, list[str]] = {}
    for v in model.graph.inputs:
        if v.name in model.graph.initializers:
            continue
        for d in shape_tuple(v.shape) or ():
            if isinstance(d, int) and d >= 0:
                continue
            keys = dim_names(d) if isinstance(d, str) else ("?",)
            for key in keys:
                out.setdefault(key, [])
                if v.name not in out[key]:
                    out[key].append(v.name)
    return out


def expression_dims(model: LabModel) -> dict[str, list[str]]:
    """Dim expression text -> the ``"input[axis]"`` places it sizes (main-graph inputs).

    Example:
        >>> expression_dims(lab.model)
        {'past_sequence_length + sequence_length': ['attention_mask[1]']}
    """
    out: dict[str, list[str]] = {}
    for v in model.graph.inputs:
        if v.name in model.graph.initializers:
            continue
        for axis, d in enumerate(shape_tuple(v.shape) or ()):
            if isinstance(d, str) and dim_expression(d) is not None:
                out.setdefault(d, []).append(f"{v.name}[{axis}]")
    return out


def check_dim_arguments(dims: object, shapes: object) -> None:
    """Raise DimError unless ``dims`` and ``shapes`` are None or mappings (a string such as
    ``"batch=1"`` is the command line's form, not the API's)."""
    if dims is not None and not isinstance(dims, Mapping):
        raise DimError(f"dims must be a dict of dim name -> size, got {type(dims).__name__} "
                       f"{dims!r:.60}.", fix="Pass e.g. dims={'batch': 1, 'sequence': 128}.")
    if shapes is not None and not isinstance(shapes, Mapping):
        raise DimError(f"shapes must be a dict of input name -> sizes, got "
                       f"{type(shapes).__name__} {shapes!r:.60}.",
                       fix="Pass e.g. shapes={'x': [1, 3, 224, 224]}.")


def validate_dims(model: LabModel, dims: Mapping[str, int] | None,
                  shapes: Mapping[str, Sequence[int]] | None) -> None:
    """Check that ``dims`` names exist and ``shapes`` name real inputs with the right rank.

    Raises:
        DimError: an unknown dim name, a non-positive value or a rank mismatch.
        UnknownNameError: ``shapes`` names an input that does not exist.
    """
    check_dim_arguments(dims, shapes)
    known = dynamic_dims(model)
    exprs = expression_dims(model)
    for name, value in (dims or {}).items():
        if (name not in known or name == "?") and name not in exprs:
            named = sorted(k for k in known if k != "?")
            near = close_matches(str(name), named, n=1)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise DimError(
                f"Unknown dim name {name!r}: the model's inputs have "
                f"{'symbolic dims ' + ', '.join(map(repr, named)) if named else 'no named dims'}."
                f"{hint}",
                fix="Use one of those names, or give whole shapes with shapes={input: [...]}."
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DimError(f"Dim {name!r} must be an int >= 0, got {value!r}.",
                           fix=f"Pass dims={{{name!r}: 1}} or another size (0 for an empty "
                               "KV cache).")
    _check_derived(model, dims or {})
    _check_expressions(exprs, dims or {})
    inputs = {v.name: v for v in model.graph.inputs if v.name not in model.graph.initializers}
    for name, shape in (shapes or {}).items():
        if name not in inputs:
            raise unknown_name("input", name, inputs,
                               fix=f"Model inputs are {sorted(inputs)}.")
        declared = shape_tuple(inputs[name].shape)
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise DimError(f"Shape for input {name!r} must be a list of sizes, got "
                           f"{shape!r:.60}.", fix="Use concrete sizes such as [1, 3, 224, 224].")
        shape = list(shape)
        if declared is not None and len(declared) != len(shape):
            raise DimError(
                f"Shape {shape} for input {name!r} has rank {len(shape)}, but the model "
                f"declares rank {len(declared)} ({list(declared)}).",
                fix="Give one size per declared dim.")
        for i, d in enumerate(shape):
            if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                raise DimError(f"Shape {shape} for input {name!r}: dim {i} must be an int "
                               f">= 0, got {d!r}.", fix="Use concrete sizes such as [1, 3, 224, 224].")
            if declared is not None and isinstance(declared[i], int) and declared[i] > 0 \
                    and declared[i] != d:
                raise DimError(
                    f"Shape {shape} for input {name!r}: dim {i} is fixed to {declared[i]} in "
                    f"the model, not {d}.", fix=f"Use {declared[i]} for dim {i}.")


def _check_expressions(exprs: Mapping[str, list[str]], dims: Mapping[str, int]) -> None:
    """Every input dim expression whose names are given evaluates to a size (DimError naming
    the input and axis otherwise); one given by its own text agrees with its value."""
    for text, uses in exprs.items():
        expr = dim_expression(text)
        try:
            value = expr.evaluate(dims) if expr is not None else None
        except DimError as e:
            raise DimError(f"{e.problem} (input {', '.join(uses)})", fix=e.fix) from e
        if value is not None and text in dims and dims[text] != value:
            raise DimError(f"Dim {text!r} ({', '.join(uses)}) is {value} with the dims given "
                           f"({expr.given(dims)}), not {dims[text]}.",
                           fix=f"Leave {text!r} out: it is computed from its names.")


def _check_derived(model: LabModel, dims: Mapping[str, int]) -> None:
    """A given dim that contradicts what the graph fixes (a head size) fails now, by name,
    rather than later inside onnxruntime."""
    # here: core.derived imports this module
    from onnx_lab.core.derived import derived_dims

    fixed = {n: d for n, d in derived_dims(model).items() if d.kind == "graph"}
    for name, value in dims.items():
        d = fixed.get(name)
        if d is not None and value != d.value:
            raise DimError(f"Dim {name!r} is {d.value} in this model ({d.source}), not {value}.",
                           fix=f"Leave {name!r} out (it is filled in) or pass {d.value}.")


def fit_dims(model: LabModel, dims: Mapping[str, int] | None,
         shapes: Mapping[str, Sequence[int]] | None) -> tuple[dict, dict]:
    """The dims/shapes that apply to ``model`` (a fixed dim is no longer a dim)."""
    known = {**dynamic_dims(model), **expression_dims(model)}
    inputs = {v.name for v in model.graph.inputs if v.name not in model.graph.initializers}
    return ({k: v for k, v in (dims or {}).items() if k in known},
            {k: list(v) for k, v in (shapes or {}).items() if k in inputs})


def _with_dims(shape: tuple[Dim, ...] | None, dims: Mapping[str, int]
               ) -> tuple[Dim, ...] | None:
    """Declared shape with the user's dim values substituted for their names (and dim
    expressions evaluated once all their names are given)."""
    if shape is None:
        return shape
    return tuple(resolve_dim(d, dims) for d in shape)  # (an expression of no names: "12")


def _resolved_input_shape(v: ir.Value, dims: Mapping[str, int],
                          shapes: Mapping[str, Sequence[int]]) -> list[Dim] | None:
    if v.name in shapes:
        return list(shapes[v.name])
    declared = shape_tuple(v.shape)
    if declared is None:
        return None
    return [resolve_dim(d, dims) for d in declared]


def _value_info(name: str, elem: int, shape: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    if shape is None:
        return onnx.helper.make_tensor_value_info(name, elem, None)
    dims = [d if (isinstance(d, str) and d not in _UNKNOWN_PARAMS)
            or (isinstance(d, int) and d >= 0) else None for d in shape]
    return onnx.helper.make_tensor_value_info(name, elem, dims)


def _dims_into_bodies(node: onnx.NodeProto, dims: Mapping[str, int]) -> None:
    """The user's dim values in the types the bodies of ``node`` (a copy) declare: a
    TorchScript Loop body declares its carried input ``y`` as ``[n, 4]``, the same ``n`` as
    the graph input it starts from, and ONNX's inference keeps a body's declared symbol
    rather than the size it is fed, so the body (and its cost) stayed unsized with
    ``dims={"n": 5}``."""
    for attr in node.attribute:
        for _key, body in attribute_bodies(attr):
            for g in graph_protos(body):
                for vi in (*g.input, *g.output, *g.value_info):
                    if not vi.type.HasField("tensor_type"):
                        continue
                    for d in vi.type.tensor_type.shape.dim:
                        if d.HasField("dim_param"):
                            value = resolve_dim(d.dim_param, dims)
                            if isinstance(value, int):
                                d.dim_value = value


def _skeleton_graph(graph: ir.Graph, into: onnx.GraphProto, dims, shapes, top: bool,
                    order: Sequence[ir.Node] | None = None,
                    folded: Mapping[tuple[str, str], np.ndarray] | None = None,
                    bodies: Mapping[tuple[str, str, str], str] | None = None,
                    sources: Sequence[onnx.NodeProto] | None = None,
                    declared: bool = True) -> None:
    """``sources``: with ``order``, the message each node was read from (copied instead of
    serializing the node again). ``declared`` False: the shapes the model declares for its
    intermediates and outputs stay out (their dtypes go along)."""
    into.name = graph.name or "graph"
    inputs = set(graph.inputs)
    for v in graph.inputs:
        if top and v.name not in graph.initializers and v.type is not None \
                and isinstance(v.type, ir.TensorType):
            into.input.append(_value_info(v.name, int(v.dtype or 0),
                                          _resolved_input_shape(v, dims, shapes)))
        else:
            ir.serde.serialize_value_into(into.input.add(), v)
    declared_inputs = {i.name for i in into.input}
    # (isinstance against onnx_ir's classes, Protocols, costs µs when false: the plain
    # tensors and the untyped values, 10^5 of them in an unfused export, are told first)
    for name, v in graph.initializers.items():
        t = v.const_value
        if type(t) is not _PLAIN_TENSOR and isinstance(t, UnreadableTensor):
            # Its dims disagree with its data: inference gets its type, never those dims
            # (a 152-byte model declaring [2**31] must not size anything).
            if name not in declared_inputs:
                into.input.append(_value_info(name, int(t.dtype), None))
            continue
        if t is not None and dims_and_nbytes(t)[1] <= _KEEP_BYTES:
            try:
                ir.serde.serialize_tensor_into(into.initializer.add(), t)
                into.initializer[-1].name = name
                continue
            except Exception:  # noqa: BLE001 - unreadable data: fall back to a typed input
                del into.initializer[-1]
        if name in declared_inputs:
            continue
        dtype = v.dtype or (t.dtype if t is not None else None)
        shape = shape_tuple(v.shape or (t.shape if t is not None else None))
        into.input.append(_value_info(name, int(dtype or 0), shape))
    outputs = {v.name for v in graph.outputs}
    # Nodes go in topological order: ONNX inference walks the stored order and leaves
    # everything after an out-of-order node untyped.
    folded = folded or {}
    for k, node in enumerate(order if order is not None else graph):
        outs = [o.name for o in node.outputs if o.name] if folded else None
        if outs and all(("", o) in folded for o in outs):
            # Values computed by core._fold replace the node that makes them.
            for o in outs:
                into.initializer.append(onnx.numpy_helper.from_array(folded[("", o)], o))
            continue
        value = node.attributes.get("value") if node.op_type == "Constant" else None
        if value is not None and node.domain in ("", "ai.onnx") \
                and value.type == ir.AttributeType.TENSOR and node.outputs \
                and (value.value.nbytes > _KEEP_BYTES or isinstance(value.value,
                                                                    UnreadableTensor)):
            t = value.value
            into.input.append(_value_info(
                node.outputs[0].name, int(t.dtype),
                None if isinstance(t, UnreadableTensor) else shape_tuple(t.shape)))
            continue
        proto = into.node.add()
        source = sources[k] if sources is not None else None
        if source is not None and source.op_type == node.op_type:
            proto.CopyFrom(source)
        else:
            ir.serde.serialize_node_into(proto, node)
        if folded and node.op_type == "If":
            fold_into_bodies(proto, folded, bodies or {})
        if not declared and proto.attribute:
            _drop_body_value_info(proto)
        if dims and proto.attribute:
            _dims_into_bodies(proto, dims)
        # Declared types of intermediate values (value_info) go along: inference merges into
        # them, so exporter-written dims such as "floor(height/2)+1" survive instead of
        # becoming anonymous unk__N symbols.
        for out in node.outputs:
            if declared and out.type is not None and out.name and out.name not in outputs \
                    and isinstance(out.type, ir.TensorType):
                into.value_info.append(_value_info(out.name, int(out.dtype or 0),
                                                   _with_dims(shape_tuple(out.shape), dims)))
    for v in graph.outputs:
        if isinstance(v.type, ir.TensorType):
            into.output.append(_value_info(
                v.name, int(v.dtype or 0),
                _with_dims(shape_tuple(v.shape), dims) if declared or v in inputs else None))
        elif v.type is not None:
            ir.serde.serialize_value_into(into.output.add(), v)
        else:
            into.output.add().name = v.name


def _drop_body_value_info(node: onnx.NodeProto) -> None:
    """Remove the declared intermediate shapes of ``node``'s bodies (all levels)."""
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                  list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
            del g.value_info[:]
            for n in g.node:
                if n.attribute:
                    _drop_body_value_info(n)


_KEY_TYPES = (("keys_floats", onnx.TensorProto.FLOAT), ("keys_int64s", onnx.TensorProto.INT64),
              ("keys_strings", onnx.TensorProto.STRING))


def guard_label_encoders(proto: onnx.ModelProto) -> int:
    """Make ``proto`` (in place) safe for onnx's shape inference and full check: onnx 1.23
    crashes the process (SIGSEGV; a notebook's kernel) inferring a LabelEncoder of
    ``ai.onnx.ml`` opset 1 or 2 whose input has no type, which happens when the node before
    it has a schema that types nothing (skl2onnx's TreeEnsembleRegressor in a
    ``decision_path`` export, a Scaler). In every graph and body, such an input not declared
    there or in an enclosing graph gets its element type declared: from the encoder's keys
    (opset 2), from its declared output (opset 1 maps strings to int64s and back); an
    encoder with neither is left out (its output keeps the type the model declares). Returns
    how many encoders were guarded; a model without ``ai.onnx.ml`` opset 1-2 is untouched.
    """
    version = next((o.version for o in proto.opset_import if o.domain == "ai.onnx.ml"), None)
    if version is None or version > 2:
        return 0
    count = 0

    def declared(vs: Any) -> dict[str, int]:
        return {v.name: v.type.tensor_type.elem_type for v in vs
                if v.type.HasField("tensor_type")}

    def walk(g: onnx.GraphProto, outer: dict[str, int]) -> None:
        nonlocal count
        typed = {**outer, **declared(g.input), **declared(g.value_info),
                 **declared(g.output), **{t.name: t.data_type for t in g.initializer}}
        keep = []
        for n in g.node:
            for a in n.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                            list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                    walk(sub, typed)
            if n.op_type == "LabelEncoder" and n.domain == "ai.onnx.ml" and n.input \
                    and n.input[0] and n.input[0] not in typed:
                count += 1
                names = {a.name for a in n.attribute}
                dtype = next((t for name, t in _KEY_TYPES if name in names), None)
                if version == 1:
                    out = typed.get(n.output[0]) if n.output else None
                    dtype = {onnx.TensorProto.INT64: onnx.TensorProto.STRING,
                             onnx.TensorProto.STRING: onnx.TensorProto.INT64}.get(out)
                if dtype is None:
                    continue  # left out
                g.value_info.append(_value_info(n.input[0], int(dtype), None))
                typed[n.input[0]] = int(dtype)
            keep.append(n)
        if len(keep) != len(g.node):
            del g.node[:]
            g.node.extend(keep)

    walk(proto.graph, {})
    return count


def infer_types(model: LabModel, *, dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None,
                declared: bool = True) -> TypeTable:
    """Run shape inference (with data propagation) and return TensorInfo for every value, in
    a :class:`TypeTable` (names defined in more than one graph typed per graph).

    ``declared`` False: the shapes the model declares for intermediates and graph outputs
    (value_info) are neither given to inference nor used where it computes none; what is
    left is what the inputs and weights fix (a value_info written at batch 1 into a model
    whose inputs say ``batch`` makes no dim 1 here). Their dtypes are kept.

    Never raises because of the model: when inference fails, declared types are kept and a
    warning is logged.
    """
    dims = dict(dims or {})
    shapes = dict(shapes or {})
    m = model.ir
    idx = model.index
    shared = idx.shared
    skel = onnx.ModelProto(ir_version=max(m.ir_version, 4))
    for domain, version in m.opset_imports.items():
        skel.opset_import.add(domain=domain, version=version)
    for f in m.functions.values():
        ir.serde.serialize_function_into(skel.functions.add(), f)
    # Declared types (inputs, outputs, value_info, weights) of every graph, and the dim
    # names the model itself uses.
    declared_types = TypeTable()
    symbols: set[str] = set()
    for path, g in idx.graphs.items():
        values = list(g.inputs) + list(g.outputs) + list(g.initializers.values())
        for node in g:
            values.extend(node.outputs)
        fixed = set(g.inputs) | set(g.initializers.values())
        for v in values:
            if not v.name:
                continue
            if not declared and v not in fixed and v.const_value is None:
                if v.dtype is not None:
                    info = TensorInfo(dtype_name(v.dtype), None)
                    declared_types.setdefault(v.name, info)
                    if v.name in shared and (path, v.name) in idx.defined_at:
                        declared_types.scoped.setdefault((path, v.name), info)
                continue
            if v.type is None and v.shape is None and v.const_value is None:
                # most intermediates: nothing declared
                declared_types.setdefault(v.name, _UNTYPED)
                if v.name in shared and (path, v.name) in idx.defined_at:
                    declared_types.scoped.setdefault((path, v.name), _UNTYPED)
                continue
            raw = shape_tuple(v.shape)
            symbols.update(d for d in raw or () if isinstance(d, str))
            info = TensorInfo(dtype_name(v.dtype), _with_dims(raw, dims)) \
                if v.type is None or isinstance(v.type, ir.TensorType) \
                else TensorInfo(type_label(v.type), None)  # a sequence's shape is its element's
            if v.const_value is not None:
                info = TensorInfo(dtype_name(v.const_value.dtype),
                                  tensor_dims(v.const_value))
            declared_types.setdefault(v.name, info)
            if v.name in shared and (path, v.name) in idx.defined_at:
                declared_types.scoped.setdefault((path, v.name), info)
    result = TypeTable()
    entries = [idx.entries[nid] for nid in idx.topo_order("")]
    order = [e.node for e in entries]
    stored = model.source_nodes()
    sources = [stored[e.position] for e in entries] if stored is not None else None

    def infer(folded: Mapping[tuple[str, str], np.ndarray] | None) -> TypeTable:
        out = TypeTable(scope=idx.scope, shared=shared)
        skeleton = onnx.ModelProto()
        skeleton.CopyFrom(skel)
        _skeleton_graph(m.graph, skeleton.graph, dims, shapes, top=True, order=order,
                        folded=folded, bodies=idx.bodies, sources=sources,
                        declared=declared)
        # ONNX's data propagation keeps the values it computes by tensor name for the whole
        # model, so sibling branches that define a name each read the first branch's (T5's
        # merged decoder: the no-cache branch's position bias took the cache branch's length):
        # inference sees each body's shared names made unique, and reads them back.
        renamed = _unshare_bodies(skeleton.graph, idx) if shared else {}
        aliases = _alias_long_dims(skeleton)
        guard_label_encoders(skeleton)
        data_prop = _largest_dim(skeleton.graph, bodies=len(idx.graphs) > 1) \
            <= _MAX_PROPAGATED_DIM
        inferred = onnx.shape_inference.infer_shapes(
            skeleton, check_type=False, strict_mode=False, data_prop=data_prop)
        # onnxruntime's fused ops (FusedConv, Attention...) have no ONNX schema: type their
        # outputs and what follows them, then let inference run again over those types for
        # its data propagation (Shape -> Reshape targets), a few rounds at most.
        for _ in range(3):
            if not _contrib_shapes.needs_completion(inferred.graph, m.opset_imports) or \
                    not _contrib_shapes.complete(inferred.graph, m.opset_imports):
                break
            inferred = onnx.shape_inference.infer_shapes(
                inferred, check_type=False, strict_mode=False, data_prop=data_prop)
        _collect(inferred.graph, out, "", idx if shared else None, renamed)
        return _unalias_dims(out, aliases)

    try:
        result = infer(None)
        # With every input shape concrete, evaluate the small shape computations ONNX does
        # not propagate (Range of Shape(x)...) and infer again, while that finds more.
        folded: dict[tuple[str, str], np.ndarray] = {}
        inputs = [v.name for v in m.graph.inputs if v.name not in m.graph.initializers]
        for _ in range(_FOLD_ROUNDS):
            if not all(name in result and not result[name].dynamic for name in inputs) \
                    or not any(info.dynamic for info in (*result.values(),
                                                         *result.scoped.values())):
                break
            more = fold_shape_values(model, result)
            if not more.keys() - folded.keys():
                break
            folded.update(more)
            again = infer(folded)
            for table, new in ((result, again), (result.scoped, again.scoped)):
                table.update({k: v for k, v in new.items()
                              if not v.dynamic or k not in table or table[k].shape is None})
    except Exception as e:  # noqa: BLE001 - inference must never make open() fail
        logger.warning("ONNX shape inference failed (%s); using declared shapes only.", e)
    out = TypeTable(scope=idx.scope, shared=shared)
    # (values of one type share one TensorInfo: each is looked at once)
    seen: dict[int, TensorInfo] = {}
    for table, have_all, decl in ((out, result, declared_types),
                                  (out.scoped, result.scoped, declared_types.scoped)):
        for name, info in have_all.items():
            # Symbols that inference invented (unk__0, ...) for dims it could not compute are
            # unknown dims: shown as None, like any other unknown dim.
            new = seen.get(id(info))
            if new is None:
                new = info
                if info.shape is not None and any(isinstance(d, str) and d not in symbols
                                                  for d in info.shape):
                    new = TensorInfo(info.dtype, tuple(
                        None if isinstance(d, str) and d not in symbols else d
                        for d in info.shape))
                seen[id(info)] = new
            table[name] = new
        # Declared types fill what inference did not produce (and bodies it could not enter).
        for name, info in decl.items():
            have = table.get(name)
            if have is None or (have.shape is None and info.shape is not None) \
                    or (have.dtype is None and info.dtype is not None):
                table[name] = TensorInfo(have.dtype if have and have.dtype else info.dtype,
                                         have.shape if have and have.shape is not None
                                         else info.shape)
    # A shared name's plain entry is its first definition's (the index's value_graph).
    for name in shared:
        first = out.scoped.get((idx.value_graph.get(name, ""), name))
        if first is not None:
            out[name] = first
    return out


# ONNX data propagation stores the values of 1-D tensors as shape dims (~150 bytes each) and
# materializes e.g. ConstantOfShape([n]) for any n: a 100-byte model declaring a dim of 2**31
# made it allocate 8 GB. Above this dim size, inference runs without data propagation.
_MAX_PROPAGATED_DIM = 1 << 20
# Rounds of folding: each one evaluates the shape computations at the first still-unknown
# shapes and infers again, so a graph needs one round per reshape computed from an earlier
# computed shape (PP-OCRv4's recognizer, a Paddle export: 6). Rounds stop as soon as nothing
# new folds; this bounds the worst case (one inference of the weight-free graph a round).
_FOLD_ROUNDS = 10


# Inference copies a dim_param into every value it reaches: one 200 KB dim of a 250 KB file
# read by a chain of 2,000 Relus made 400 MB of value_info (1.2 GB at the peak). Longer dim
# texts go to inference as short aliases (one per distinct text) and are read back as the
# model's one string object.
_MAX_INFERRED_DIM_TEXT = 256


def _dim_protos(tp: onnx.TypeProto):
    """Every TensorShapeProto.Dimension of ``tp``, through sequences, optionals and maps."""
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        yield from getattr(tp, which).shape.dim
    elif which in ("sequence_type", "optional_type"):
        yield from _dim_protos(getattr(tp, which).elem_type)
    elif which == "map_type":
        yield from _dim_protos(tp.map_type.value_type)


def has_long_dims(proto: onnx.ModelProto) -> bool:
    """Whether a dim_param of ``proto``'s graph inputs and outputs is longer than
    :data:`_MAX_INFERRED_DIM_TEXT` (ONNX inference would copy it into every value)."""
    return any(len(d.dim_param) > _MAX_INFERRED_DIM_TEXT
               for vi in (*proto.graph.input, *proto.graph.output)
               for d in _dim_protos(vi.type) if d.HasField("dim_param"))


def _alias_long_dims(proto: onnx.ModelProto) -> dict[str, str]:
    """Replace (in place) every dim_param of ``proto`` longer than
    :data:`_MAX_INFERRED_DIM_TEXT` by a short alias; returns {alias: text}."""
    infos = []
    for g in graph_protos(proto.graph):
        infos.extend((*g.input, *g.output, *g.value_info))
    for f in proto.functions:
        infos.extend(f.value_info)
    dims = [d for vi in infos for d in _dim_protos(vi.type) if d.HasField("dim_param")]
    long_dims = [d for d in dims if len(d.dim_param) > _MAX_INFERRED_DIM_TEXT]
    if not long_dims:
        return {}
    taken = {d.dim_param for d in dims}
    by_text: dict[str, str] = {}
    for d in long_dims:
        alias = by_text.get(d.dim_param)
        if alias is None:
            alias = f"onnx_lab_long_dim_{len(by_text)}"
            while alias in taken:
                alias += "_"
            by_text[d.dim_param] = alias
        d.dim_param = alias
    return {a: t for t, a in by_text.items()}


def _unalias_dims(table: TypeTable, aliases: Mapping[str, str]) -> TypeTable:
    """``table`` with the dims :func:`_alias_long_dims` renamed read back (in place)."""
    if not aliases:
        return table
    for t in (table, table.scoped):
        for name, info in t.items():
            if info.shape is not None and any(isinstance(d, str) and d in aliases
                                              for d in info.shape):
                t[name] = TensorInfo(info.dtype, tuple(
                    aliases.get(d, d) if isinstance(d, str) else d for d in info.shape))
    return table


def _largest_dim(graph: onnx.GraphProto, bodies: bool = True) -> int:
    """The largest concrete dim declared anywhere in ``graph`` and its bodies (``bodies``:
    whether it has any; without, its nodes are not walked for them)."""
    largest = 0
    for g in graph_protos(graph) if bodies else (graph,):
        for vi in (*g.input, *g.value_info, *g.output):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value > largest:
                    largest = d.dim_value
        for t in g.initializer:
            largest = max(largest, *t.dims, 0)
    return largest


_UNSHARED = "\x1f"  # joins a shared name and its body's path while inference runs


def _unshare_bodies(graph: onnx.GraphProto, idx: ModelIndex, path: str = "",
                    outer: Mapping[str, str] | None = None,
                    renamed: dict[str, str] | None = None) -> dict[str, str]:
    """Give every name a body of ``graph`` (at ``path``) defines that another graph defines
    too (``ModelIndex.shared``) a name of its own, in that body and in the bodies inside it
    that read it (in place). Returns ``{new name: name}``."""
    renamed = {} if renamed is None else renamed
    mapping = dict(outer or {})
    if path:
        own = {v.name for v in (*graph.input, *graph.initializer)}
        own.update(o for n in graph.node for o in n.output)
        for name in own & idx.shared:
            mapping[name] = f"{name}{_UNSHARED}{path}"
            renamed[mapping[name]] = name

    def fix(values: Any) -> None:
        for k, name in enumerate(values):
            if name in mapping:
                values[k] = mapping[name]

    for v in (*graph.input, *graph.initializer, *graph.value_info, *graph.output):
        if v.name in mapping:
            v.name = mapping[v.name]
    for node in graph.node:
        owner = node.output[0] if node.output else ""
        fix(node.input)
        fix(node.output)
        for attr in node.attribute:
            for sub_name, sub in attribute_bodies(attr):
                sub_path = idx.bodies.get((path, owner, sub_name))
                if sub_path is not None:
                    _unshare_bodies(sub, idx, sub_path, mapping, renamed)
                else:
                    _read_renamed(sub, mapping)
    return renamed


def _read_renamed(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """The reads of renamed outer names in a body the index does not know (in place)."""
    for g in graph_protos(graph):
        for node in g.node:
            for k, name in enumerate(node.input):
                if name in mapping:
                    node.input[k] = mapping[name]


def _collect(graph: onnx.GraphProto, out: TypeTable, path: str = "",
             idx: ModelIndex | None = None, renamed: Mapping[str, str] | None = None) -> None:
    """The inferred types of ``graph`` (at ``path``) and its bodies into ``out``; with
    ``idx`` (a model whose graphs share names), each shared name's per graph too;
    ``renamed``: the names :func:`_unshare_bodies` gave, read back."""
    renamed = renamed or {}

    def put(name: str, info: TensorInfo, first: bool = False) -> None:
        name = renamed.get(name, name)
        if name not in out or (not first and out[name].shape is None):
            out[name] = info
        if idx is not None and name in idx.shared and (path, name) in idx.defined_at:
            have = out.scoped.get((path, name))
            if have is None or (not first and have.shape is None):
                out.scoped[(path, name)] = info

    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        info = _info_from_proto(vi)
        if info is not None:
            put(vi.name, info)
    for t in graph.initializer:
        put(t.name, TensorInfo(dtype_name(t.data_type), tuple(t.dims)), first=True)
    for node in graph.node:
        owner = renamed.get(node.output[0], node.output[0]) if node.output else ""
        for attr in node.attribute:
            for sub_name, sub in attribute_bodies(attr):
                sub_path = idx.bodies.get((path, owner, sub_name)) if idx is not None else None
                # a body the index does not know is read by name only
                _collect(sub, out, sub_path or "", idx if sub_path is not None else None,
                         renamed)
            if node.op_type == "Constant" and attr.type == onnx.AttributeProto.TENSOR \
                    and node.output:
                put(node.output[0], TensorInfo(dtype_name(attr.t.data_type),
                                               tuple(attr.t.dims)), first=True)


def _info_from_proto(vi: onnx.ValueInfoProto) -> TensorInfo | None:
    # Called once per value of the model (10^5 in an unfused export), whose types repeat:
    # read once per distinct type (its serialized form is one C call).
    return _info_from_type(vi.type.SerializeToString())


@functools.lru_cache(maxsize=4096)
def _info_from_type(data: bytes) -> TensorInfo | None:
    tp = onnx.TypeProto.FromString(data)
    if tp.WhichOneof("value") != "tensor_type":
        label = proto_type_label(tp)
        return TensorInfo(label, None) if label else None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return TensorInfo(dtype_name(tt.elem_type), None)
    dims: list[Dim] = []
    for d in tt.shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            value = d.dim_value
            dims.append(value if value >= 0 else None)
        elif which == "dim_param":
            param = d.dim_param
            dims.append(param if param not in _UNKNOWN_PARAMS else None)
        else:
            dims.append(None)
    return TensorInfo(dtype_name(tt.elem_type), tuple(dims))


# Probe sizes for named_shapes: distinct primes, so a probed size factors back into the
# input dims it is made of; chosen away from the usual fixed sizes (powers of two, 3, 12...).
_PROBE_PRIMES = (211, 223, 227, 229, 233, 239, 241, 251, 257, 263, 269, 271, 277, 281, 283)


def _factor_name(size: int, probes: Mapping[str, int]) -> str | None:
    """``211*223`` -> ``"batch_x_sequence"`` when those are the probes of batch, sequence."""
    parts: list[str] = []
    for name, p in sorted(probes.items(), key=lambda kv: kv[1]):
        while size % p == 0:
            parts.append(name)
            size //= p
    if not parts:
        return None
    if size != 1:
        parts.append(str(size))
    return "_x_".join(parts)


def named_shapes(model: LabModel, tensors: Sequence[str],
                 shapes: Mapping[str, Sequence[int]] | None = None
                 ) -> dict[str, tuple[Dim, ...] | None]:
    """Shapes of ``tensors`` with every dynamic dim named, for cutting a model at them.

    ONNX inference names a dim only when it flows straight from an input; a dim computed
    through Shape/Range/Reshape comes back unnamed. This runs inference once more with a
    distinct prime size per input dim name (``dims`` probe) and names each unnamed dim by
    the input dims its probed size factors into: the original name (``"sequence"``), a product
    (``"batch_x_sequence"``), else a fresh ``"<tensor>_dim<axis>"``. A name that comes from
    the same probed size is reused across tensors, so equal dims stay equal.

    Args:
        tensors: value names (main graph).
        shapes: whole input shapes given for inputs with unnamed dims (kept in the probe).

    Example:
        >>> named_shapes(lab.model, ["/attn/Reshape_output_0"])
        {'/attn/Reshape_output_0': ('batch', 'sequence', 12, 64)}
    """
    symbolic = model.types()
    names = sorted(k for k in dynamic_dims(model) if k != "?")
    primes = list(_PROBE_PRIMES)
    while len(primes) < len(names):  # more dim names than listed primes: continue the list
        n = primes[-1] + 2
        while any(n % p == 0 for p in range(3, int(n ** 0.5) + 1, 2)):
            n += 2
        primes.append(n)
    probes = dict(zip(names, primes, strict=False))
    # Without unnamed input dims, a probed size made of no probe is a fixed size.
    all_named = "?" not in dynamic_dims(model)
    need = any(info is not None and info.shape is not None and any(d is None for d in info.shape)
               for info in (symbolic.get(t) for t in tensors))
    probed = model.types(dims=probes, shapes=shapes) if need and probes else {}
    fresh: dict[int, str] = {}
    out: dict[str, tuple[Dim, ...] | None] = {}
    for t in tensors:
        info = symbolic.get(t)
        if info is None or info.shape is None:
            out[t] = None if info is None else info.shape
            continue
        p = probed.get(t)
        dims: list[Dim] = []
        for axis, d in enumerate(info.shape):
            if d is not None:
                dims.append(d)
                continue
            size = p.shape[axis] if p is not None and p.shape is not None \
                and len(p.shape) == len(info.shape) else None
            name = _factor_name(size, probes) if isinstance(size, int) and size > 0 else None
            if name is None and all_named and isinstance(size, int) and size > 0:
                dims.append(size)
                continue
            if name is None:
                key = size if isinstance(size, int) and size > 0 else -len(fresh) - 1
                name = fresh.setdefault(key, f"{t.strip('/').replace('/', '_')}_dim{axis}")
            dims.append(name)
        out[t] = tuple(dims)
    return out
