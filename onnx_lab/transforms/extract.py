"""Cut a subgraph out of a model as a new, runnable, verified model.

The boundary is given by tensor names (``inputs``/``outputs``) or computed from a set of node
ids: inputs are the tensors the nodes consume but do not produce (weights stay initializers),
outputs are the tensors they produce that are used outside or are model outputs.

Built on ``onnx_ir.convenience.extract`` rather than ``onnx.utils.Extractor``: the Extractor
runs shape inference over one whole protobuf (weights included), which fails past 2 GB and
needs external data loaded; onnx_ir keeps external tensors as references to their files, so
the subgraph of a multi-GB model costs its structure only. Cut tensors get their types from
onnx_lab's weight-free shape inference.

Example:
    >>> sub = lab.extract(inputs=["/block1/relu/Relu_output_0"], outputs=["logits"])
    >>> sub.history.loc[0, ["pass", "verify_passed"]]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._proto import weights_as_inputs
from onnx_lab.core.dimexpr import dim_expression
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import fit_dims, named_shapes, shape_tuple
from onnx_lab.core.subgraph import extract_graph, reached_inputs
from onnx_lab.core.values import constant_producer
from onnx_lab.errors import ExtractError, InputError, LabError, clip_text, close_matches
from onnx_lab.transforms.base import PassResult

logger = logging.getLogger(__name__)

__all__ = ["extract_model", "boundary"]


def _check_names(model: LabModel, names: Sequence[str], what: str) -> list[str]:
    if isinstance(names, str):
        names = [names]
    elif not isinstance(names, Iterable) or isinstance(names, Mapping):  # outputs=5
        raise ExtractError(f"{what}s must be a tensor name or a list of them, got "
                           f"{clip_text(repr(names), 200)}.",
                           fix=f"Pass {what}s=['name', ...] (names from lab.tensors).")
    idx = model.index
    out = []
    for n in names:
        if not isinstance(n, str) or n not in idx.values or idx.value_graph.get(n) != "":
            near = close_matches(str(n), [k for k, g in idx.value_graph.items() if g == ""])
            hint = f" Close matches: {', '.join(map(repr, near))}." if near else ""
            raise ExtractError(f"Unknown {what} tensor {n!r} (main graph).{hint}",
                               fix="Use tensor names from lab.tensors (main graph only).")
        out.append(n)
    return out


def boundary(model: LabModel, nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of the subgraph made of ``nodes`` (main-graph node ids).

    Inputs: tensors consumed (also inside bodies) but not produced by the nodes, weights
    excluded. Outputs: tensors produced by the nodes that are used by other nodes or are
    model outputs (when none are, the outputs of the last node).
    """
    idx = model.index
    if isinstance(nodes, str):
        nodes = [nodes]
    inside: list[str] = []
    for nid in nodes:
        if nid not in idx.entries:
            near = close_matches(str(nid), idx.entries)
            hint = f" Close matches: {', '.join(map(repr, near))}." if near else ""
            raise ExtractError(f"Unknown node id {nid!r}.{hint}",
                               fix="Use node ids from lab.nodes.")
        if idx.entries[nid].graph != "":
            raise ExtractError(f"Node {nid!r} lies inside a subgraph ({idx.entries[nid].graph}).",
                               fix="Extract main-graph nodes (the If/Loop/Scan owner whole).")
        if nid not in inside:
            inside.append(nid)
    if not inside:
        raise ExtractError("extract(nodes=[]) has no nodes.", fix="Pass node ids from lab.nodes.")
    inside.sort(key=lambda n: idx.entries[n].topo)
    inside_set = set(inside)
    g = model.graph
    produced: set[str] = set()
    for nid in inside:
        produced.update(v.name for v in idx.entries[nid].node.outputs if v.name)
    inputs: list[str] = []
    for nid in inside:
        e = idx.entries[nid]
        names = [v.name for v in e.node.inputs if v is not None and v.name] + e.implicit_inputs
        for n in names:
            if n in produced or n in inputs:
                continue
            v = idx.values.get(n)
            if n in g.initializers or constant_producer(v) is not None:
                continue
            inputs.append(n)
    graph_outputs = {v.name for v in g.outputs}
    outputs: list[str] = []
    for nid in inside:
        for v in idx.entries[nid].node.outputs:
            if not v.name:
                continue
            users = idx.consumers.get(v.name, [])
            if v.name in graph_outputs or any(u not in inside_set for u in users):
                outputs.append(v.name)
    if not outputs:
        outputs = [v.name for v in idx.entries[inside[-1]].node.outputs if v.name]
    return inputs, outputs


def extract_model(model: LabModel, inputs: Sequence[str] | None = None,
                  outputs: Sequence[str] | None = None, nodes: Sequence[str] | None = None, *,
                  dims: Mapping[str, int] | None = None,
                  shapes: Mapping[str, Sequence[int]] | None = None
                  ) -> tuple[PassResult, dict[str, int], dict[str, list[int]]]:
    """The subgraph between ``inputs`` and ``outputs`` (or of ``nodes``) as a new model.

    ``lab.extract`` (through :func:`onnx_lab.steps.extract`) wraps it in a new Lab and
    verifies it.

    Args:
        inputs: tensor names that become the subgraph's inputs (default: the model inputs the
            outputs depend on).
        outputs: tensor names that become its outputs (default: the model outputs).
        nodes: main-graph node ids; the boundary is computed (do not pass inputs/outputs).
        dims, shapes: the model's dim values and input shapes (they name the cut's dims).

    Returns:
        (result, dims, shapes): a PassResult named ``extract`` whose ``model`` is the
        subgraph (its weights still lie in the source files: external data is referenced,
        not copied; it passed ``onnx.checker``; ``params`` holds the inputs and outputs),
        and the dims and shapes that apply to it.

    Raises:
        ExtractError: unknown tensors or node ids, or a boundary that does not cut the graph
            (the outputs still depend on model inputs not listed in ``inputs``).

    Example:
        >>> sub = lab.extract(nodes=["/block1/conv/Conv", "/block1/bn/BatchNormalization"])
        >>> sub.inputs, sub.outputs
    """
    t0 = time.perf_counter()
    if nodes is not None:
        if inputs is not None or outputs is not None:
            raise InputError("Pass either nodes=... or inputs=/outputs=, not both.",
                             fix="With nodes, the boundary is computed from them.")
        ins, outs = boundary(model, nodes)
    else:
        outs = _check_names(model, outputs, "output") if outputs is not None else \
            [v.name for v in model.graph.outputs]
        if not outs:
            raise ExtractError("extract needs at least one output.", fix="Pass outputs=[...].")
        if inputs is None:
            ins = reached_inputs(model, [], outs)
        else:
            ins = _check_names(model, inputs, "input")
            missing = reached_inputs(model, ins, outs)
            missing = [m for m in missing if m not in ins]
            if missing:
                raise ExtractError(
                    f"The boundary does not cut the graph: outputs {outs} still depend on "
                    f"model input(s) {missing}, which are not among inputs {ins}.",
                    fix=f"Add {missing} to inputs, or choose inputs that lie between the "
                    "model inputs and the outputs.")
    overlap = [n for n in outs if n in ins]
    if overlap:
        raise ExtractError(f"Tensors {overlap} are both inputs and outputs of the extraction.",
                           fix="Pick outputs downstream of the inputs.")
    try:
        graph = extract_graph(model, ins, outs)
    except ValueError as e:
        raise ExtractError(f"Cannot extract between {ins} and {outs}: {e}",
                           fix="Check that the inputs separate the outputs from the rest of "
                           "the graph.") from e
    # Symbolic shapes: the subgraph keeps the model's dynamic dims, named even where ONNX
    # inference loses the name (dims computed through Shape/Range/Reshape), so that
    # dims={...} still resolves the saved subgraph.
    types = model.types()
    boundary_values = list(graph.inputs) + list(graph.outputs)
    named = named_shapes(model, [v.name for v in boundary_values], shapes)
    for v in boundary_values:
        info = types.get(v.name)
        if info is None:
            continue
        if v.type is None and info.dtype is not None:
            v.dtype = _ir_dtype(info.dtype)
        shape = named.get(v.name)
        have = shape_tuple(v.shape)
        if shape is not None and (have is None or (len(have) == len(shape) and any(
                d is None for d in have))):
            v.shape = ir.Shape([h if h is not None else d
                                for h, d in zip(have or shape, shape, strict=True)])
    untyped = [v for v in boundary_values if v.type is None or (
        isinstance(v.type, ir.TensorType) and v.shape is None)]
    if untyped:
        # ONNX infers nothing for some ops (ai.onnx.ml 1's TreeEnsembleClassifier) and the
        # cut needs a type and a rank: read them from one run (add_output does the same)
        try:
            found = types_from_a_run(model, [v.name for v in untyped], dims, shapes)
        except LabError:
            found = {}  # the checker below names what is missing
        for v in untyped:
            if v.name in found:
                dtype, rank = found[v.name]
                if v.type is None:
                    v.type = ir.TensorType(dtype)
                v.shape = ir.Shape([None] * rank)
    if (model.ir.ir_version or 0) < 4:
        # IR < 4 requires every initializer to be listed as a graph input too (old exports,
        # e.g. onnx-caffe2); the extractor drops them from the inputs.
        listed = {v.name for v in graph.inputs}
        graph.inputs.extend(v for v in graph.initializers.values() if v.name not in listed)
    graph.opset_imports.update(model.ir.opset_imports)
    new_ir = ir.Model(graph, ir_version=model.ir.ir_version, producer_name="onnx_lab.extract",
                      functions=list(model.ir.functions.values()))
    # Weights stay references to the source files: keep the source path as base folder.
    sub_model = LabModel(new_ir, path=model.path)
    _check(sub_model, model)
    d, s = fit_dims(sub_model, dims, shapes)
    d.update(_new_dim_values(model, sub_model, d, dims or {}, shapes or {}))
    params = {"inputs": list(ins), "outputs": list(outs)}
    if nodes is not None:
        params["nodes"] = list(nodes)
    result = PassResult("extract", params, True, len(model.index), len(sub_model.index), {},
                        [n for n in model.index.entries if n not in sub_model.index.entries],
                        None, time.perf_counter() - t0, [], sub_model)
    return result, d, s


def _new_dim_values(model: LabModel, sub: LabModel, known: Mapping[str, int],
                    dims: Mapping[str, int] | None, shapes: Mapping[str, Sequence[int]] | None
                    ) -> dict[str, int]:
    """Sizes of the dims named at the cut (``batch_x_sequence``...) under the Lab's dims."""
    if not dims and not shapes:
        return {}
    concrete = model.types(dims, shapes)
    out: dict[str, int] = {}
    for v in sub.graph.inputs:
        have = concrete.get(v.name)
        shape = shape_tuple(v.shape)
        if have is None or have.shape is None or shape is None or len(shape) != len(have.shape):
            continue
        for d, size in zip(shape, have.shape, strict=True):
            # (a dim expression is no name: it is computed from the names it uses)
            if isinstance(d, str) and d not in known and dim_expression(d) is None \
                    and isinstance(size, int) and size > 0:
                out.setdefault(d, size)
    return out


def types_from_a_run(model: LabModel, names: Sequence[str],
                     dims: Mapping[str, int] | None, shapes: Mapping[str, Sequence[int]] | None
                     ) -> dict[str, tuple[ir.DataType, int]]:
    """{tensor: (element type, rank)} of main-graph tensors, read from one run of ``model``
    on seeded feeds sized by ``dims``/``shapes``: what ONNX's inference leaves untyped.
    Tensors that are not arrays (sequences, maps) are left out.

    Raises:
        LabError: the model cannot be sized or run.
    """
    from onnx_lab.runtime.capture import run
    from onnx_lab.runtime.feeds import make_feeds

    feeds = make_feeds(model, dict(dims or {}), {k: list(v) for k, v in (shapes or {}).items()})
    values = run(model, feeds, outputs=list(names))
    out = {}
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            dtype = ir.DataType.STRING if value.dtype.kind in "OUS" else \
                ir.DataType.from_numpy(value.dtype)
            out[name] = (dtype, value.ndim)
    return out


def _ir_dtype(name: str) -> ir.DataType:
    table = {"float32": ir.DataType.FLOAT, "float64": ir.DataType.DOUBLE}
    return table.get(name) or ir.DataType[name.upper()]


def _check(model: LabModel, source: LabModel) -> None:
    """onnx.checker on the extracted model. A source the checker refuses itself (an
    onnxruntime op in the default domain, as onnxruntime-genai's builder writes
    SimplifiedLayerNormalization) gives a part it refuses for the same reason: the checker
    then says nothing about the extraction, which is verified by running it."""
    proto = weights_as_inputs(model.to_proto())  # the data files are not read
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        try:
            onnx.checker.check_model(weights_as_inputs(source.to_proto()))
        except onnx.checker.ValidationError:
            logger.info("the source model does not pass onnx.checker either (%s): the "
                        "extracted part is not held to it", str(e).splitlines()[0][:200])
            return
        raise ExtractError(f"The extracted model does not pass onnx.checker: "
                           f"{str(e).strip().splitlines()[0][:300]}",
                           fix="Choose a boundary that cuts whole nodes (report this if it "
                           "does).") from e


