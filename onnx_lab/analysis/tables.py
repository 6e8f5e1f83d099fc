"""The nodes, initializers and tensors tables (one row per entity, stable documented columns)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core._validate import dims_and_nbytes
from onnx_lab.core.index import node_scope
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import dtype_name, shape_tuple
from onnx_lab.core.source_map import SOURCE_COLUMNS, source_table
from onnx_lab.core.values import constant_tensors

__all__ = ["nodes_table", "initializers_table", "tensors_table", "io_table", "attribute_value",
           "constant_tensors", "initializer_rows", "io_rows"]

NODE_COLUMNS = ["node_id", "name", "op_type", "domain", "graph", "inputs", "outputs",
                "attributes", "scope", "topo", *SOURCE_COLUMNS]
INITIALIZER_COLUMNS = ["name", "dtype", "shape", "numel", "nbytes", "external", "location",
                       "consumers", "graph", "source", "constant_node"]
TENSOR_COLUMNS = ["name", "dtype", "shape", "kind", "producer", "consumers", "dynamic", "graph"]
IO_COLUMNS = ["name", "dtype", "shape", "dynamic"]


def _freeze(o: Any) -> Any:
    if isinstance(o, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in o.items()))
    if isinstance(o, (list, tuple)):
        return tuple(_freeze(v) for v in o)
    return o


def _cached_frame(fn: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
    """Build a table once per model (and dims/shapes); every caller gets its own copy.

    LabModels are immutable once indexed, so widgets and features that read ``lab.nodes``
    many times pay for building it once.
    """
    @functools.wraps(fn)
    def wrapper(model: LabModel, *args: Any, **kwargs: Any) -> pd.DataFrame:
        key = ("table", fn.__name__, _freeze(args), _freeze(kwargs))
        return model.cached(key, lambda: fn(model, *args, **kwargs)).copy()

    return wrapper


def _frame(rows: list[tuple], columns: list[str], nullable: tuple[str, ...]) -> pd.DataFrame:
    """Build a frame whose ``nullable`` columns keep None (object dtype) for missing values."""
    df = pd.DataFrame(rows, columns=columns)
    for col in nullable:
        df[col] = pd.Series([r[columns.index(col)] for r in rows], dtype=object, index=df.index)
    return df


def tensor_summary(t: ir.TensorProtocol) -> str:
    """``float32[64x3x7x7]``: a tensor attribute or weight summarized as dtype and shape."""
    dims = "x".join(str(d) for d in shape_tuple(t.shape) or ())
    return f"{dtype_name(t.dtype)}[{dims}]"


def attribute_value(attr: ir.Attr) -> Any:
    """A plain Python value for an attribute (tensors as dtype+shape, graphs as node counts)."""
    if attr.is_ref():
        return f"@{attr.ref_attr_name}"
    t = attr.type
    if t == ir.AttributeType.TENSOR:
        return tensor_summary(attr.value)
    if t == ir.AttributeType.TENSORS:
        return [tensor_summary(x) for x in attr.value]
    if t == ir.AttributeType.GRAPH:
        return f"<graph: {sum(1 for _ in attr.value.all_nodes())} nodes>"
    if t == ir.AttributeType.GRAPHS:
        return [f"<graph: {sum(1 for _ in g.all_nodes())} nodes>" for g in attr.value]
    if t in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS):
        return list(attr.value)
    if t in (ir.AttributeType.TYPE_PROTO, ir.AttributeType.TYPE_PROTOS):
        return str(attr.value)
    return attr.value


@_cached_frame
def nodes_table(model: LabModel) -> pd.DataFrame:
    """One row per node, in all graphs, in whole-model topological order.

    Columns:
        node_id (str): unique, stable id (see :mod:`onnx_lab.core.index`).
        name (str): the node's own name ('' when unnamed).
        op_type (str), domain (str: '' for the default ONNX domain).
        graph (str): '' for the main graph, else the body path such as 'If_0/then_branch'.
        inputs, outputs (list[str]): tensor names ('' for omitted optional inputs).
        attributes (dict): plain Python values; tensors as 'float32[64x3x7x7]', subgraphs
            as '<graph: N nodes>'.
        scope (str): name-scope prefix such as '/encoder/layer.3/attention' ('' if none).
        topo (int): position in the whole-model order (bodies follow their owner node).
        module, module_class, source_file, source_line, source_function, source_code,
            source_kind, source_modules: the PyTorch module and line of code the node comes
            from (see :func:`onnx_lab.core.source_map.source_table`; None where unknown).
    """
    rows = []
    for e in model.index.entries.values():
        n = e.node
        rows.append((e.node_id, n.name or "", n.op_type, n.domain or "", e.graph,
                     [v.name if v is not None else "" for v in n.inputs],
                     [v.name for v in n.outputs],
                     {k: attribute_value(a) for k, a in n.attributes.items()},
                     node_scope(n), e.topo))
    df = pd.DataFrame(rows, columns=NODE_COLUMNS[:10])
    src = source_table(model)
    for col in SOURCE_COLUMNS:
        df[col] = src[col].to_numpy()
    return df


@_cached_frame
def initializers_table(model: LabModel) -> pd.DataFrame:
    """One row per weight: initializers of every graph, plus tensors held in Constant nodes.

    Columns:
        name (str), dtype (str), shape (tuple[int]), numel (int), nbytes (int).
        external (bool): data lives in an external file; location (str|None): that file.
        consumers (list[str]): node ids reading it.
        graph (str): graph path where it is defined.
        source (str): 'initializer' or 'constant' (a Constant node's value, as PaddlePaddle
            exports keep weights); constant_node (str|None): the Constant node's id.
    """
    return _frame(initializer_rows(model), INITIALIZER_COLUMNS,
                  ("location", "constant_node", "dtype"))


def initializer_rows(model: LabModel) -> list[tuple]:
    """The rows of :func:`initializers_table` as tuples in ``INITIALIZER_COLUMNS`` order,
    built once per model and without pandas (the summary counts them). Read-only."""
    return model.cached(("initializer_rows",), lambda: _initializer_rows(model))


def _initializer_rows(model: LabModel) -> list[tuple]:
    idx = model.index
    consumers = idx.consumers
    rows = []
    for path, g in idx.graphs.items():
        for name, v in g.initializers.items():
            t = v.const_value
            if t is None:
                continue
            ext = isinstance(t, ir.ExternalTensor)
            shape, nbytes = dims_and_nbytes(t)
            rows.append((name, dtype_name(t.dtype), shape, _numel(shape), nbytes, ext,
                         t.location if ext else None, list(consumers.get(name, [])), path,
                         "initializer", None))
    for name, t, nid, path in constant_tensors(model):
        shape, nbytes = dims_and_nbytes(t)
        rows.append((name, dtype_name(t.dtype), shape, _numel(shape), nbytes, False, None,
                     list(consumers.get(name, [])), path, "constant", nid))
    return rows


def _numel(shape: tuple) -> int:
    """Elements of a weight's ``shape``, as numpy's int64 product gives them (wrapping past
    2**63, as before), without numpy's per-call cost for the usual small shapes."""
    n = math.prod(shape) if None not in shape else -1
    return n if 0 <= n < 2**63 else int(np.prod(shape, dtype=np.int64))


@_cached_frame
def tensors_table(model: LabModel, dims: Mapping[str, int] | None = None,
                  shapes: Mapping[str, Sequence[int]] | None = None) -> pd.DataFrame:
    """One row per value (tensor) in every graph (a name defined in two graphs, as sibling
    If branches may, has a row for each).

    Columns:
        name (str), dtype (str|None).
        shape (tuple|None): after ONNX shape inference with data propagation (and the
            dims/shapes given at open); symbolic dims as str, unknown dims as None, None when
            the rank is unknown.
        kind (str): 'input', 'output', 'initializer', 'constant' or 'intermediate'
            ('missing' for a value some node reads but nothing defines: an invalid model),
            for the row's graph (a branch's Constant of an If output's name leaves the
            output an 'output').
        producer (str|None): node id producing it.
        consumers (list[str]): node ids reading it.
        dynamic (bool): rank or some dim is not a concrete int.
        graph (str): graph path where it is defined.
    """
    idx = model.index
    types = model.types(dims, shapes)
    main = model.graph
    inputs = {v.name for v in main.inputs}
    outputs = {v.name for v in main.outputs}
    # By graph and name: a branch's Constant placeholder (optimum's merged decoders hold one
    # for each encoder `present.*`) does not make the If's output of that name a constant.
    constants = {(path, name) for name, _, _, path in constant_tensors(model)}
    # A name sibling If branches both define (optimum's merged decoders) has a row per
    # definition, each with its own type, producer and readers.
    defs: dict[str, list[str]] = {}
    for path, name in idx.defined_at:
        defs.setdefault(name, []).append(path)
    rows = []
    every = ((n, g) for n, first in idx.value_graph.items() for g in defs.get(n, (first,)))
    for name, graph in every:
        v = idx.defined_at[(graph, name)] if name in defs else idx.values[name]
        if name in idx.undefined:
            kind = "missing"
        elif v.is_initializer() or name in idx.graphs[graph].initializers:
            kind = "initializer"
        elif (graph, name) in constants:
            kind = "constant"
        elif name in outputs and graph == "":
            kind = "output"
        elif name in inputs and graph == "":
            kind = "input"
        elif graph != "" and v.producer() is None:
            kind = "input"  # body inputs (Loop iteration count, carried state)
        else:
            kind = "intermediate"
        info = types.defined(name, graph)
        shape = info.shape if info else None
        producer = idx.producer_at.get((graph, name)) if name in defs else idx.producer.get(name)
        rows.append((name, info.dtype if info else None, shape, kind, producer,
                     idx.consumers_in(name, graph), bool(info is None or info.dynamic), graph))
    return _frame(rows, TENSOR_COLUMNS, ("producer", "dtype", "shape"))


@_cached_frame
def io_table(model: LabModel, which: str, dims: Mapping[str, int] | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None) -> pd.DataFrame:
    """Graph inputs (``which='inputs'``, initializers excluded) or outputs of the main graph.

    Columns: name, dtype, shape (declared, with given dims/shapes applied), dynamic.
    """
    return _frame(io_rows(model, which, dims, shapes), IO_COLUMNS, ("dtype", "shape"))


def io_rows(model: LabModel, which: str, dims: Mapping[str, int] | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None) -> list[tuple]:
    """The rows of :func:`io_table` as tuples in ``IO_COLUMNS`` order (no pandas)."""
    g = model.graph
    values = [v for v in g.inputs if v.name not in g.initializers] if which == "inputs" \
        else list(g.outputs)
    types = model.types(dims, shapes)
    rows = []
    for v in values:
        info = types.get(v.name)
        shape = info.shape if info is not None else shape_tuple(v.shape)
        dtype = info.dtype if info is not None else dtype_name(v.dtype)
        rows.append((v.name, dtype, shape,
                     shape is None or any(not isinstance(d, int) for d in shape)))
    return rows
