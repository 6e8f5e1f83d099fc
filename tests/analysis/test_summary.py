"""lab.summary(): keys, values, op families, HTML."""

from __future__ import annotations

import json

import onnx
import pytest
from models import control_flow_model, quantized

import onnx_lab
from onnx_lab.analysis.summary import OP_FAMILIES, Summary, op_family

KEYS = ["ir_version", "opsets", "producer", "num_nodes", "num_nodes_main", "num_initializers",
        "num_constant_tensors", "num_params", "param_bytes", "inputs", "outputs", "dynamic_dims",
        "op_counts", "op_families", "subgraphs", "external_data", "constant_computed_tensors",
        "constant_computed_bytes", "derived_dims"]


def test_keys_and_values_convnet():
    proto = onnx_lab.samples.build("convnet")
    s = onnx_lab.open(proto).summary()
    assert list(s) == KEYS
    assert s["ir_version"] == 8 and s["opsets"] == {"": 17}
    assert s["producer"] == "onnx_lab.samples 1"
    assert s["num_nodes"] == s["num_nodes_main"] == len(proto.graph.node) == 21
    assert s["num_initializers"] == len(proto.graph.initializer)
    arrays = [onnx.numpy_helper.to_array(t) for t in proto.graph.initializer]
    assert s["num_params"] == sum(a.size for a in arrays)
    assert s["param_bytes"] == sum(a.nbytes for a in arrays)
    assert s["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 32, 32]}]
    assert s["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [1, 10]}]
    assert s["dynamic_dims"] == {} and s["subgraphs"] == 0 and s["external_data"] is False
    assert s["op_counts"]["Conv"] == 3 and s["op_counts"]["Relu"] == 4
    assert sum(s["op_counts"].values()) == 21
    fams = s["op_families"]
    assert fams["convolution"] == 3 and fams["normalization"] == 3
    assert fams["pooling"] == 2 and fams["matmul/gemm"] == 1
    assert fams["activation"] == 4
    assert fams["shape ops"] == 5  # Identity, 2 Transpose, Flatten, Reshape
    assert sum(fams.values()) == 21
    # op_counts is sorted by count, most common first.
    counts = list(s["op_counts"].values())
    assert counts == sorted(counts, reverse=True)


def test_counts_include_bodies():
    s = onnx_lab.open(control_flow_model()).summary()
    assert s["num_nodes"] == 14 and s["num_nodes_main"] == 6 and s["subgraphs"] == 6
    assert s["op_families"]["control flow"] == 4  # If, Loop, inner If, Scan


def test_dynamic_dims():
    s = onnx_lab.open("sample:transformer_block").summary()
    assert s["dynamic_dims"] == {"batch": ["x"], "seq": ["x"]}
    assert s["inputs"][0]["shape"] == ["batch", "seq", 32]


def test_custom_domains_in_op_counts():
    s = onnx_lab.open(quantized()).summary()
    assert "com.microsoft::Gelu" in s["op_counts"]
    assert s["op_families"]["custom domain"] == 1


def test_op_family():
    assert op_family("Conv", "") == "convolution"
    assert op_family("LayerNormalization", "ai.onnx") == "normalization"
    assert op_family("Softmax", "") == "activation"
    assert op_family("GlobalAveragePool", "") == "pooling"
    assert op_family("Gemm", "") == "matmul/gemm"
    assert op_family("Reshape", "") == "shape ops"
    assert op_family("Loop", "") == "control flow"
    assert op_family("QuantizeLinear", "") == "quantization"
    assert op_family("DynamicQuantizeLinear", "") == "quantization"
    # First family wins: a quantized MatMul counts as matmul/gemm, even in a custom domain.
    assert op_family("MatMulNBits", "com.microsoft") == "matmul/gemm"
    assert op_family("QLinearAdd", "com.microsoft") == "quantization"
    assert op_family("FusedConv", "com.microsoft") == "custom domain"
    # ai.onnx.ml is a standard domain (check() does not flag it): its own family
    assert op_family("TreeEnsembleClassifier", "ai.onnx.ml") == "onnx-ml"
    assert op_family("ZipMap", "ai.onnx.ml") == "onnx-ml"
    assert op_family("Add", "") == "other"
    assert set(OP_FAMILIES) == {"convolution", "normalization", "activation", "pooling",
                                "matmul/gemm", "shape ops", "control flow", "quantization"}


def test_summary_object():
    s = onnx_lab.open("sample:convnet").summary()
    assert isinstance(s, Summary) and len(s) == len(KEYS)
    assert s.num_nodes == s["num_nodes"] and s.to_dict()["producer"] == s["producer"]
    assert "21 nodes" in repr(s) and "'input'" in repr(s)
    json.dumps(s.to_dict())  # plain Python values only
    html = s._repr_html_()
    assert "<table" in html and "Conv" in html and "logits" in html
    assert "<table" in onnx_lab.open("sample:convnet")._repr_html_()


def test_summary_reads_no_weights(tmp_path):
    from models import save_external

    path = save_external(onnx_lab.samples.build("convnet"), tmp_path / "m.onnx")
    lab = onnx_lab.open(path)
    s = lab.summary()
    assert s["external_data"] is True and s["num_params"] > 4000
    assert all(t.raw is None for t in lab.model.external_tensors())
    # float32 weights plus one int64 shape vector of 2 values.
    assert s["param_bytes"] == 4 * (s["num_params"] - 2) + 16


def test_summary_copies_and_pickles():
    import copy
    import pickle

    s = onnx_lab.open("sample:convnet").summary()
    assert copy.deepcopy(s).to_dict() == s.to_dict()
    assert pickle.loads(pickle.dumps(s))["num_nodes"] == 21
    with pytest.raises(AttributeError):
        s.not_a_key  # noqa: B018


def _runtime_weight_model() -> onnx.ModelProto:
    """y = x @ W where W (64x64 float, 16 KB) is built with ConstantOfShape at run time, plus a
    small computed shape vector (not a weight)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["W"], name="make_w",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Add", ["two", "two"], ["four"], name="small"),
             helper.make_node("Reshape", ["h", "four"], ["y"], name="reshape")]
    inits = [numpy_helper.from_array(np.array([64, 64], np.int64), "wshape"),
             numpy_helper.from_array(np.array([1, 1, 16], np.int64), "two")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_summary_counts_tensors_computed_from_constants():
    from onnx_lab.analysis.summary import constant_computed

    lab = onnx_lab.open(_runtime_weight_model())
    assert constant_computed(lab.model) == [{"tensor": "W", "node_id": "make_w",
                                             "op_type": "ConstantOfShape", "nbytes": 16384}]
    s = lab.summary()
    assert s.constant_computed_tensors == 1 and s.constant_computed_bytes == 16384
    assert s.param_bytes < 100  # the initializers are only the two shape vectors
    assert "computed from constants" in s._repr_html_() and "16,384 bytes" in repr(s)
    json.dumps(s.to_dict())
    # Folded into an initializer, it is an ordinary weight.
    lab.apply("fold_constants")
    folded = lab.summary()
    assert folded.constant_computed_bytes == 0 and folded.param_bytes >= 16384
    plain = onnx_lab.open("sample:convnet").summary()
    assert plain.constant_computed_tensors == 0 and "computed from" not in plain._repr_html_()


def test_scalar_constants_count_as_cost_counts_them_and_can_be_edited():
    # Constant(value_float=...) counted 0 params in the summary and 1 in cost() (147 of the
    # ONNX conformance cases disagreed), and was missing from lab.initializers
    import numpy as np
    import onnxruntime as ort
    from onnx import helper

    g = helper.make_graph([helper.make_node("Constant", [], ["c"], value_float=2.0, name="k"),
                           helper.make_node("Constant", [], ["v"], value_ints=[1, 2], name="n"),
                           helper.make_node("Mul", ["x", "c"], ["y"], name="m"),
                           helper.make_node("Cast", ["v"], ["vf"], to=1, name="cv"),
                           helper.make_node("Add", ["y", "vf"], ["z"], name="a")], "g",
                          [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("z", 1, [2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    rows = lab.initializers.set_index("name")
    assert rows.loc["c", "source"] == "constant" and rows.loc["v", "numel"] == 2
    assert lab.summary()["num_params"] == lab.cost().total["params"] == 3
    assert lab.scale_initializer("c", 3.0).modified  # value_float replaced by value
    proto = lab.model.to_proto()
    assert [a.name for a in proto.graph.node[0].attribute] == ["value"]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones(2, np.float32)})[0], [7, 8])


def test_an_onnx_ml_models_learned_attributes_are_params_as_cost_counts_them():
    # cost() counted a tree's thresholds and leaves, summary() 0 (two tree_ensemble
    # conformance cases: 7 against 0)
    from ml_models import tree_zipmap

    lab = onnx_lab.open(tree_zipmap(), dims={"N": 1})
    s, c = lab.summary(), lab.cost().total
    assert s["num_params"] == c["params"] > 0 and s["param_bytes"] == c["param_bytes"]
