"""Fixtures of the rendering tests: samples opened once, generated graphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


@pytest.fixture(scope="module")
def convnet():
    return onnx_lab.open("sample:convnet")


@pytest.fixture(scope="module")
def block():
    return onnx_lab.open("sample:transformer_block")


@pytest.fixture(scope="module")
def control_flow():
    return onnx_lab.open("sample:control_flow")


def chain_model(n: int, *, scoped: bool = False, skip_every: int = 7,
                block: tuple[str, ...] = ()) -> onnx.ModelProto:
    """A long graph: a chain of unary ops with residual Adds every ``skip_every`` nodes.

    ``block`` repeats a fixed op sequence instead (for the repeated-block grouping); names are
    ``n{i}`` (no scopes) unless ``scoped`` (then ``/blk{i // 10}/op{i}``).
    """
    nodes = []
    x = "x"
    prev_skip = "x"
    ops = block or ("Relu", "Neg", "Abs", "Sigmoid", "Tanh")
    for i in range(n):
        name = f"/blk{i // 10}/op{i}" if scoped else f"n{i}"
        out = f"t{i}"
        if not block and skip_every and i % skip_every == skip_every - 1:
            nodes.append(helper.make_node("Add", [x, prev_skip], [out], name=name))
            prev_skip = out
        elif ops[i % len(ops)] == "Add":
            nodes.append(helper.make_node("Add", [x, "one"], [out], name=name))
        else:
            nodes.append(helper.make_node(ops[i % len(ops)], [x], [out], name=name))
        x = out
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.ones((1, 4), np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def big():
    """3,000 nodes without scopes."""
    return onnx_lab.open(chain_model(3000))


@pytest.fixture(scope="session")
def make_chain():
    """The :func:`chain_model` builder (test modules are not a package)."""
    return chain_model
