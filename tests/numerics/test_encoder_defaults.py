"""An encoder that maps a value off its list to a default (a LabelEncoder's ``default_*``, a
CategoryMapper's ``default_string`` / ``default_int64``) is fed one such value: feeds drawn
from its list only never took the default, and a model whose default changed passed
``compare``. An op that rejects such a value (a OneHotEncoder with ``zeros=0``) reading the
same column keeps it off."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics import make_feeds


def _model(nodes, inputs, outputs) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "encoders", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def _mapper(default_string: str = "other", default_int64: int = -1, *,
            strings_in: bool = True) -> onnx.ModelProto:
    dtype_in, dtype_out = (TensorProto.STRING, TensorProto.INT64) if strings_in else \
        (TensorProto.INT64, TensorProto.STRING)
    node = helper.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml", name="mapper",
                            cats_strings=["cat", "dog", "cow"], cats_int64s=[1, 2, 3],
                            default_string=default_string, default_int64=default_int64)
    return _model([node], [helper.make_tensor_value_info("x", dtype_in, ["N"])],
                  [helper.make_tensor_value_info("y", dtype_out, ["N"])])


def _label_encoder(default: int = -1, *, also_one_hot: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("LabelEncoder", ["x"], ["code"], domain="ai.onnx.ml",
                              name="encoder", keys_strings=["a", "b", "c"],
                              values_int64s=[0, 1, 2], default_int64=default)]
    outputs = [helper.make_tensor_value_info("code", TensorProto.INT64, ["N"])]
    if also_one_hot:  # zeros=0: onnxruntime refuses a value off its list
        nodes.append(helper.make_node("OneHotEncoder", ["x"], ["hot"], domain="ai.onnx.ml",
                                      cats_strings=["a", "b", "c"], zeros=0))
        outputs.append(helper.make_tensor_value_info("hot", TensorProto.FLOAT, ["N", 3]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.STRING, ["N"])],
                  outputs)


@pytest.mark.parametrize("strings_in", [True, False])
def test_a_category_mappers_default_is_taken_and_a_changed_one_fails_compare(strings_in):
    x = make_feeds(onnx_lab.open(_mapper(strings_in=strings_in), dims={"N": 8}))["x"]
    listed = {"cat", "dog", "cow"} if strings_in else {1, 2, 3}
    drawn = set(x.tolist())
    assert drawn & listed and drawn - listed  # the listed values and one off the list
    # an integer input was given the string categories before (random integers instead)
    assert strings_in or drawn <= listed | {4}
    ref = onnx_lab.open(_mapper(strings_in=strings_in), dims={"N": 8})
    assert onnx_lab.compare(ref, ref).passed
    changed = _mapper("unknown", -2, strings_in=strings_in)
    c = onnx_lab.compare(ref, onnx_lab.open(changed, dims={"N": 8}))
    assert not c.passed and c.first_divergence["node_id"] == "mapper"


def test_a_label_encoders_changed_default_fails_compare():
    ref = onnx_lab.open(_label_encoder(), dims={"N": 8})
    assert "unlisted" in set(make_feeds(ref)["x"].tolist())
    assert onnx_lab.compare(ref, ref).passed
    c = onnx_lab.compare(ref, onnx_lab.open(_label_encoder(default=7), dims={"N": 8}))
    assert not c.passed and c.first_divergence["node_id"] == "encoder"


def test_a_column_a_one_hot_encoder_also_reads_holds_only_listed_values():
    lab = onnx_lab.open(_label_encoder(also_one_hot=True), dims={"N": 8})
    assert set(make_feeds(lab)["x"].tolist()) <= {"a", "b", "c"}
    assert onnx_lab.compare(lab, lab).passed  # onnxruntime took every value


def test_a_default_an_op_downstream_refuses_is_never_fed():
    # the encoder's default (-1) reaches a OneHotEncoder with zeros=0: a value off the list
    # would fail onnxruntime's run of a correct model (a false alarm)
    nodes = [helper.make_node("LabelEncoder", ["x"], ["code"], domain="ai.onnx.ml",
                              keys_strings=["a", "b", "c"], values_int64s=[0, 1, 2],
                              default_int64=-1),
             helper.make_node("OneHotEncoder", ["code"], ["hot"], domain="ai.onnx.ml",
                              cats_int64s=[0, 1, 2], zeros=0)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.STRING, ["N"])],
               [helper.make_tensor_value_info("hot", TensorProto.FLOAT, ["N", 3])])
    lab = onnx_lab.open(m, dims={"N": 8})
    assert set(make_feeds(lab)["x"].tolist()) <= {"a", "b", "c"}
    assert onnx_lab.compare(lab, lab).passed


def test_an_integer_category_that_also_indexes_a_table_stays_on_its_keys():
    import numpy as np
    from onnx import numpy_helper

    nodes = [helper.make_node("LabelEncoder", ["x"], ["code"], domain="ai.onnx.ml",
                              keys_int64s=[0, 1, 2, 3], values_floats=[.1, .2, .3, .4]),
             helper.make_node("Gather", ["table", "x"], ["emb"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64,
                                                                     ["N"])],
                          [helper.make_tensor_value_info("code", TensorProto.FLOAT, ["N"]),
                           helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["N", 2])],
                          [numpy_helper.from_array(np.ones((4, 2), np.float32), "table")])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    lab = onnx_lab.open(m, dims={"N": 8})
    assert set(make_feeds(lab)["x"].tolist()) <= {0, 1, 2, 3}
    assert onnx_lab.compare(lab, lab).passed


@pytest.mark.parametrize("keys", [(10**17, 10**17 + 1), (0, 5, 2**63 - 1)])
def test_large_integer_keys_are_fed_as_they_are_with_one_off_the_list(keys):
    # hashed ids: the value off the list was found through a float (a listed key, or one past
    # int64 that turned every fed value into -2**63)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_int64s=list(keys), values_int64s=[1] * len(keys))
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.INT64, ["N"])],
               [helper.make_tensor_value_info("y", TensorProto.INT64, ["N"])])
    lab = onnx_lab.open(m, dims={"N": 16})
    drawn = set(make_feeds(lab)["x"].tolist())
    assert set(keys) <= drawn and len(drawn - set(keys)) == 1
