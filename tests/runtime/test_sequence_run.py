"""A sequence feed whose elements differ in shape runs through verification's in-memory runner
(runtime/_runner.py: the memory check sizes tensors only), and a step verified on it still
catches a real change."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ml_models import sequence_input_model  # noqa: E402


def ragged():
    return {"sequence": [np.ones((2, 3), np.float32), -np.ones((4, 3), np.float32)]}


def with_identity(scale=None):
    m = sequence_input_model(element_shape=None)
    g = m.graph
    relu = next(n for n in g.node if n.op_type == "Relu")
    relu.output[0] = "r"
    tail = (helper.make_node("Mul", ["r", "k"], ["Y"], name="scale") if scale is not None
            else helper.make_node("Identity", ["r"], ["Y"], name="id"))
    g.node.append(tail)
    if scale is not None:
        g.initializer.append(helper.make_tensor("k", TensorProto.FLOAT, [], [scale]))
    return m


def test_ragged_sequence_feeds_verify_a_step():
    lab = onnx_lab.open(with_identity())
    r = lab.apply("eliminate_identity", verify={"feeds": ragged()})
    assert r.modified and r.verify_passed is True


def test_ragged_sequence_feeds_catch_a_change():
    rep = verify(with_identity(), with_identity(scale=1.5), feeds=ragged())
    assert not bool(rep["passed"].all())
    assert onnx_lab.compare(with_identity(), with_identity(), feeds=ragged()).passed
