"""Walking protobuf graphs: a GraphProto and the bodies of its If/Loop/Scan nodes."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

__all__ = ["graph_protos", "attribute_bodies"]


def attribute_bodies(attr: onnx.AttributeProto) -> list[tuple[str, onnx.GraphProto]]:
    """(body name as ``ModelIndex.bodies`` keys it, body) of a node attribute: none (not a
    graph), one (``then_branch``) or several (``branches.0``, ``branches.1``...)."""
    if attr.type == onnx.AttributeProto.GRAPH:
        return [(attr.name, attr.g)]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return [(f"{attr.name}.{i}", g) for i, g in enumerate(attr.graphs)]
    return []


def graph_protos(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` first, then every body (GRAPH and GRAPHS attributes), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graph_protos(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for body in attr.graphs:
                    yield from graph_protos(body)


def weights_as_inputs(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` (changed in place, and returned) with its external initializers declared as
    typed graph inputs instead: onnx's checker resolves external data against the current
    folder, so a model's structure is checked this way without reading (or finding) its data
    files (checked when the model was opened)."""
    ext = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if ext:
        names = {i.name for i in proto.graph.input}
        keep = [t for t in proto.graph.initializer
                if t.data_location != onnx.TensorProto.EXTERNAL]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(keep)
        proto.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                    list(t.dims))
                                 for t in ext if t.name not in names)
    return proto
