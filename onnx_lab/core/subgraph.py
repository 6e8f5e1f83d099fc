"""The part of a model between tensors: which inputs an output depends on, and the model
that computes only some tensors (so a reference run near the inputs of a multi-GB model maps
only the weights it needs). Used by extraction and by verification.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.model import LabModel

__all__ = ["extract_graph", "reached_inputs", "upstream_model"]


def reached_inputs(model: LabModel, inputs: list[str], outputs: list[str]) -> list[str]:
    """Model inputs the outputs depend on when the walk stops at ``inputs``."""
    idx = model.index
    g = model.graph
    graph_inputs = [v.name for v in g.inputs if v.name not in g.initializers]
    stop = set(inputs)
    seen: set[str] = set()
    stack = list(outputs)
    reached: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in stop:
            continue
        if t in graph_inputs:
            reached.add(t)
            continue
        nid = idx.producer.get(t)
        if nid is None:
            continue
        e = idx.entries[nid]
        stack.extend(v.name for v in e.node.inputs if v is not None and v.name)
        stack.extend(e.implicit_inputs)
    return [n for n in graph_inputs if n in reached]


def extract_graph(model: LabModel, inputs: list[str], outputs: list[str]) -> ir.Graph:
    """``onnx_ir.convenience.extract`` of ``model``'s main graph, also where a graph is stored
    out of topological order (onnx_ir copies nodes in stored order and refuses a node read
    before it is made; float16 conversion keeping float inputs and outputs appends their
    Casts at the end): then from a sorted copy.

    Raises:
        ValueError: what onnx_ir refuses (a boundary that does not cut the graph, a cycle).
    """
    source = model if model.index.stored_in_order() else model.sorted_clone()
    try:
        return ir.convenience.extract(source.graph, inputs, outputs)
    except RuntimeError as e:  # onnx_ir's cloner wraps the ValueError of what it refuses
        cause = e.__cause__ if isinstance(e.__cause__, ValueError) else e
        raise ValueError(str(cause).splitlines()[0][:300]) from e


def upstream_model(model: LabModel, tensors: list[str]) -> LabModel:
    """The part of ``model`` that computes ``tensors`` (so a reference run of a subgraph near
    the inputs of a multi-GB model maps only the weights it needs); the model on failure."""
    try:
        ins = reached_inputs(model, [], tensors)
        graph = extract_graph(model, ins, tensors)
        graph.opset_imports.update(model.ir.opset_imports)
        return LabModel(ir.Model(graph, ir_version=model.ir.ir_version,
                                 functions=list(model.ir.functions.values())), path=model.path)
    except ValueError:
        return model
