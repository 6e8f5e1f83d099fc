"""Walking protobuf graphs: a GraphProto and the bodies of its If/Loop/Scan nodes."""

from __future__ import annotations

from collections.abc import Iterator

import onnx

__all__ = ["graph_protos"]


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
