"""fp16 / int8 candidates: structure, options, errors."""

from __future__ import annotations

import pytest

import onnx_lab
from onnx_lab.errors import UnknownNameError
from onnx_lab.numerics import to_fp16, to_int8_dynamic


def test_fp16_keeps_io_types_and_block_list():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    half = to_fp16(lab, block_list=["Softmax", "/layer.0/ln/Pow"])
    assert half.dims == lab.dims
    assert list(half.inputs["dtype"]) == ["float32"]
    # Blocked nodes run in float32 between Casts.
    out_dtype = {nid: e.node.outputs[0].dtype.name for nid, e in half.index.entries.items()}
    assert out_dtype["/layer.0/ln/Pow"] == "FLOAT"
    assert out_dtype["/layer.0/attention/core/Softmax"] == "FLOAT"
    assert out_dtype["/layer.0/attention/core/MatMul"] == "FLOAT16"
    c = onnx_lab.compare(lab, half, atol=1e-2, rtol=1e-2)
    assert c.passed
    raw = to_fp16(lab, keep_io_types=False)
    assert list(raw.inputs["dtype"]) == ["float16"]
    with pytest.raises(onnx_lab.errors.InputError, match="float16"):
        onnx_lab.compare(lab, raw)
    with pytest.raises(UnknownNameError, match="Softmx"):
        to_fp16(lab, block_list=["Softmx"])


def test_int8_dynamic_excludes_nodes():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    q = to_int8_dynamic(lab, nodes_to_exclude=["/layer.0/mlp/fc2/MatMul"])
    ops = q.nodes.set_index("node_id")["op_type"]
    assert ops["/layer.0/mlp/fc2/MatMul"] == "MatMul"
    assert (q.nodes["op_type"] == "MatMulInteger").sum() == 5
    with pytest.raises(UnknownNameError):
        to_int8_dynamic(lab, nodes_to_exclude=["nope"])
