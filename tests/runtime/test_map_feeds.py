"""A map input onnxruntime's Python API cannot be given (``map(int64,double)``: every Python
dict becomes a map of float values) says so, instead of asking to check the feeds' dtypes,
which no feed can meet."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import RuntimeLoadError


def _dict_vectorizer(value_type: int) -> onnx.ModelProto:
    m_type = helper.make_map_type_proto(TensorProto.INT64,
                                        helper.make_tensor_type_proto(value_type, []))
    node = helper.make_node("DictVectorizer", ["m"], ["v"], domain="ai.onnx.ml",
                            name="DictVectorizer", int64_vocabulary=[1, 3, 5])
    g = helper.make_graph([node], "dv", [helper.make_value_info("m", m_type)],
                          [helper.make_tensor_value_info("v", value_type, [1, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def test_a_map_of_doubles_names_what_python_cannot_feed():
    lab = onnx_lab.open(_dict_vectorizer(TensorProto.DOUBLE))
    with pytest.raises(RuntimeLoadError) as e:
        onnx_lab.compare(lab, lab)
    text = str(e.value)
    assert "map(int64,double)" in text and "map of float values" in text
    assert "Check the feeds" not in text
    # the same model over float values runs
    ok = onnx_lab.open(_dict_vectorizer(TensorProto.FLOAT))
    assert onnx_lab.compare(ok, ok).passed
