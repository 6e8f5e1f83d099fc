"""extract: boundaries by tensors or nodes, external data kept, checker, ORT, verification."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _machinery import chain_lab, save_external

import onnx_lab
from onnx_lab.errors import ExtractError, InputError
from onnx_lab.runtime.capture import run
from onnx_lab.samples import build
from onnx_lab.transforms.extract import boundary

MID = "/block1/relu/Relu_output_0"


def test_extract_between_tensors_is_verified():
    lab = onnx_lab.open("sample:convnet")
    sub = lab.extract(inputs=[MID], outputs=["logits"])
    assert list(sub.inputs.name) == [MID] and list(sub.outputs.name) == ["logits"]
    assert "/stem/conv/Conv" not in sub.index.entries
    assert "/head/fc/Gemm" in sub.index.entries
    h = sub.history
    assert h.loc[0, "pass"] == "extract" and bool(h.loc[0, "verify_passed"])
    assert h.loc[0, "nodes_before"] == len(lab.index)
    assert sub.results[0].params == {"inputs": [MID], "outputs": ["logits"]}
    assert sub.inputs.loc[0, "shape"] == (1, 16, 16, 16)
    onnx.checker.check_model(sub.model.to_proto())
    assert len(lab.index) == 21  # the source Lab is unchanged


def test_extract_default_inputs_are_the_model_inputs_reached():
    lab = onnx_lab.open("sample:convnet")
    sub = lab.extract(outputs=["/block1/pool/MaxPool_output_0"])
    assert list(sub.inputs.name) == ["input"]
    assert "/head/fc/Gemm" not in sub.index.entries
    assert sub.results[0].verify_passed


def test_boundary_from_nodes():
    lab = onnx_lab.open("sample:convnet")
    nodes = ["/block1/conv/Conv", "/block1/bn/BatchNormalization", "/block1/relu/Relu"]
    ins, outs = boundary(lab.model, nodes)
    assert ins == ["/stem/identity/Identity_output_0"]  # weights stay initializers
    assert outs == [MID]
    sub = lab.extract(nodes=nodes)
    assert sorted(sub.index.entries) == sorted(nodes)
    assert sub.results[0].verify_passed
    assert sub.results[0].params["nodes"] == nodes
    # It says where it comes from rather than posing as the source file.
    assert sub.derived_from.startswith("subgraph extracted from ")
    assert "subgraph extracted from" in repr(sub) and "subgraph extracted" in sub._repr_html_()


def test_boundary_outputs_include_tensors_used_outside():
    lab = chain_lab()
    ins, outs = boundary(lab.model, ["n0_MatMul", "n1_Identity"])
    assert ins == ["x"] and outs == ["i1"]
    ins, outs = boundary(lab.model, ["n4_MatMul", "n5_Identity"])
    assert ins == ["i2"] and outs == ["y"]


def test_extract_keeps_external_data_where_it_lies(tmp_path):
    path = tmp_path / "convnet.onnx"
    save_external(build("convnet"), path)
    data = path.with_name("convnet.onnx.data")
    before = path.read_bytes(), data.read_bytes()
    lab = onnx_lab.open(path)
    sub = lab.extract(inputs=[MID], outputs=["logits"])
    assert sub.model.has_external_data  # references, not copies
    assert sub.results[0].verify_passed
    proto = sub.model.to_proto()
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    # runs in ORT on its own and equals the full model on the same tensor
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, 32, 32), np.float32)}
    full = run(lab.model, feeds, outputs=[MID, "logits"])
    got = run(sub.model, {MID: full[MID]})
    np.testing.assert_allclose(got["logits"], full["logits"], atol=1e-5)
    out = sub.save(tmp_path / "sub.onnx")
    assert (tmp_path / "sub.onnx.data").is_file()  # the source had external data
    again = onnx_lab.open(out)
    np.testing.assert_allclose(run(again.model, {MID: full[MID]})["logits"], full["logits"],
                               atol=1e-5)
    assert (path.read_bytes(), data.read_bytes()) == before


def test_unknown_tensor_is_an_extract_error_with_close_matches():
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(ExtractError, match="Close matches"):
        lab.extract(inputs=["/block1/relu/Relu_output"], outputs=["logits"])
    with pytest.raises(ExtractError, match="logit"):
        lab.extract(outputs=["logit"])
    with pytest.raises(ExtractError, match="Unknown node id"):
        lab.extract(nodes=["/block1/conv/Conv", "nope"])


def test_boundary_that_does_not_cut_the_graph():
    lab = onnx_lab.open("sample:convnet")
    # the pool output is upstream of the chosen input: the outputs still need 'input'
    with pytest.raises(ExtractError, match="does not cut the graph") as e:
        lab.extract(inputs=["/head/pool/GlobalAveragePool_output_0"],
                    outputs=["/block1/pool/MaxPool_output_0"])
    assert "'input'" in str(e.value)
    with pytest.raises(ExtractError, match="both inputs and outputs"):
        lab.extract(inputs=[MID], outputs=[MID])


def test_nodes_and_tensors_together_are_refused():
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(InputError, match="either nodes"):
        lab.extract(inputs=[MID], nodes=["/head/fc/Gemm"])


def test_extract_of_an_ir3_model_lists_initializers_as_inputs():
    # IR < 4 (onnx-caffe2 exports): every initializer must also be a graph input.
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("ConstantOfShape", ["w_shape"], ["w"],
                               value=onnx.helper.make_tensor("v", 1, [1], [0.5])),
         onnx.helper.make_node("Mul", ["x", "w"], ["y"]),
         onnx.helper.make_node("Relu", ["y"], ["z"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3]),
         onnx.helper.make_tensor_value_info("w_shape", onnx.TensorProto.INT64, [2])],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2, 3])],
        [onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "w_shape")])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 9)])
    m.ir_version = 3
    lab = onnx_lab.open(m)
    sub = lab.extract(nodes=[lab.nodes.node_id[0], lab.nodes.node_id[1]])
    proto = sub.model.to_proto()
    assert proto.ir_version == 3
    assert "w_shape" in {i.name for i in proto.graph.input}
    onnx.checker.check_model(proto)
    assert list(sub.inputs.name) == ["x"]  # the initializer is not a user input
    assert sub.results[0].verify_passed


def _range_model() -> onnx.ModelProto:
    """x[batch, seq]; y = 2 * Range(seq) and xf = Reshape(x, [-1]): dims ONNX cannot name."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Gather", ["s", "one"], ["seq"], axis=0, name="gather"),
             h.make_node("Range", ["zero", "seq", "one"], ["pos"], name="range"),
             h.make_node("Cast", ["pos"], ["posf"], to=T.FLOAT, name="cast"),
             h.make_node("Mul", ["posf", "two"], ["y"], name="mul"),
             h.make_node("Reshape", ["x", "flat"], ["xf"], name="flat"),
             h.make_node("Relu", ["y"], ["r"], name="relu"),
             h.make_node("Add", ["r", "x"], ["out"], name="add"),
             h.make_node("ReduceSum", ["xf"], ["total"], keepdims=1, name="sum")]
    inits = [nh.from_array(np.array(1, np.int64), "one"),
             nh.from_array(np.array(0, np.int64), "zero"),
             nh.from_array(np.array(2.0, np.float32), "two"),
             nh.from_array(np.array([-1], np.int64), "flat")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq"])],
                     [h.make_tensor_value_info("out", T.FLOAT, None),
                      h.make_tensor_value_info("total", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_extract_names_dims_computed_through_shape_and_range(tmp_path):
    lab = onnx_lab.open(_range_model(), dims={"batch": 2, "seq": 5})
    assert lab.model.types()["y"].shape == (None,)  # ONNX inference leaves it unnamed
    sub = lab.extract(nodes=["relu", "add"])
    p = tmp_path / "sub.onnx"
    sub.save(p)
    saved = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
             for i in onnx.load(p).graph.input}
    assert saved == {"y": ["seq"], "x": ["batch", "seq"]}  # the original names
    again = onnx_lab.open(p, dims={"batch": 2, "seq": 5})
    x = np.ones((2, 5), np.float32)
    got = run(again.model, {"y": np.arange(5, dtype=np.float32) * 2, "x": x})["out"]
    np.testing.assert_allclose(got, x + np.arange(5) * 2)
    assert onnx_lab.profile(again, runs=1) is not None  # no DimError asking for shapes=


def test_extract_names_product_and_fresh_dims():
    lab = onnx_lab.open(_range_model(), dims={"batch": 2, "seq": 5})
    sub = lab.extract(nodes=["sum"])
    assert sub.model.graph.inputs[0].shape[0].value == "batch_x_seq"
    assert sub.dims == {"batch_x_seq": 10} and sub.inputs.loc[0, "shape"] == (10,)
    # Without input dim names (shapes= only), the cut still gets a named dim, never -1.
    m = _range_model()
    for d in m.graph.input[0].type.tensor_type.shape.dim:
        d.Clear()
    lab = onnx_lab.open(m, shapes={"x": [2, 5]})
    sub = lab.extract(nodes=["relu", "add"], verify=False)
    name = sub.model.graph.inputs[0].shape[0].value
    assert isinstance(name, str) and name and sub.dims[name] == 5


def test_a_part_of_a_model_the_checker_refuses_itself_is_extracted():
    # onnxruntime-genai's layout puts SimplifiedLayerNormalization in the default domain: the
    # whole model fails onnx.checker ("No Op registered"), so every part of it does too; the
    # extraction is held to its numerical verification instead of refused.
    dims = {"batch_size": 1, "sequence_length": 4, "total_sequence_length": 8,
            "past_sequence_length": 4, "kv_cache_dim": 16}
    lab = onnx_lab.open("sample:tiny_llm", dims=dims)
    with pytest.raises(onnx.checker.ValidationError, match="SimplifiedLayerNormalization"):
        onnx.checker.check_model(lab.model.to_proto())
    sub = lab.extract(outputs=["/model/layers.0/mlp/act_fn/Mul/output_0"])
    assert sub.results[0].verify_passed
    assert "SimplifiedLayerNormalization" in set(sub.nodes.op_type)
