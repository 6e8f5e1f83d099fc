"""Shape inference on the weight-free skeleton: data propagation, dims, symbolic dims."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from models import (
    paddle_style,
    quantized,
    reshape_computed_shape,
    symbolic_expr_model,
    tf2onnx_style,
    unsorted_model,
)
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.core.shapes import TensorInfo, dtype_name, dynamic_dims, shape_tuple
from onnx_lab.errors import DimError


def _shapes(lab: onnx_lab.Lab) -> dict[str, tuple | None]:
    return dict(zip(lab.tensors["name"], lab.tensors["shape"]))


def test_data_propagation_computes_reshape_target():
    lab = onnx_lab.open(reshape_computed_shape())
    s = _shapes(lab)
    assert s["shape"] == (3,) and s["target"] == (2,)
    assert s["y"] == (2, 12)  # only known through the values of Shape -> Gather -> Concat
    assert lab.outputs.iloc[0]["shape"] == (2, 12)


def test_dims_at_open_make_shapes_concrete():
    lab = onnx_lab.open("sample:transformer_block")
    assert _shapes(lab)["y"] == ("batch", "seq", 32)
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 2, "seq": 5})
    s = _shapes(lab)
    assert s["y"] == (2, 5, 32)
    assert s["/layer.0/attention/core/Softmax_output_0"] == (2, 4, 5, 5)
    assert lab.inputs.iloc[0]["shape"] == (2, 5, 32) and not lab.inputs.iloc[0]["dynamic"]
    assert not lab.tensors["dynamic"].any()
    assert lab.summary()["inputs"][0]["shape"] == [2, 5, 32]


def test_partial_dims():
    lab = onnx_lab.open("sample:transformer_block", dims={"seq": 7})
    assert _shapes(lab)["y"] == ("batch", 7, 32)


def test_shapes_at_open_for_unknown_dims():
    lab = onnx_lab.open(paddle_style(), shapes={"x": [2, 3, 20, 20]})
    s = _shapes(lab)
    assert s["x"] == (2, 3, 20, 20)
    assert s["relu_0.tmp_0"] == (2, 8, 20, 20)
    assert s["save_infer_model/scale_0.tmp_0"] == (2, 10)


def test_question_mark_and_minus_one_dims_are_unknown():
    lab = onnx_lab.open(paddle_style())
    s = _shapes(lab)
    assert s["x"] == (None, 3, None, None)
    assert s["save_infer_model/scale_0.tmp_0"] == (None, 10)
    # Dims invented by ONNX inference (unk__N) are unknown dims as well.
    assert s["relu_0.tmp_0"] == (None, 8, None, None)
    assert dynamic_dims(lab.model) == {"?": ["x"]}
    with pytest.raises(DimError, match="'\\?'"):
        onnx_lab.open(paddle_style(), dims={"?": 1})


def test_symbolic_expression_dims_kept_as_strings():
    lab = onnx_lab.open(symbolic_expr_model())
    s = _shapes(lab)
    expr = ("batch", 4, "floor(height/2)+1", "floor(width/2)+1")
    assert s["conv"] == expr and s["y"] == expr
    assert lab.outputs.iloc[0]["shape"] == expr
    assert lab.summary()["dynamic_dims"] == {"batch": ["x"], "height": ["x"], "width": ["x"]}
    # With values for the symbols, inference computes the numbers.
    lab = onnx_lab.open(symbolic_expr_model(), dims={"batch": 1, "height": 64, "width": 31})
    assert _shapes(lab)["y"] == (1, 4, 33, 16)


def test_tf2onnx_unk_dims_are_names():
    lab = onnx_lab.open(tf2onnx_style())
    s = _shapes(lab)
    assert s["input_1:0"] == ("unk__12", 16, 16, 3)
    assert s["StatefulPartitionedCall/model/conv2d/Relu:0"] == ("unk__12", 8, 16, 16)
    assert s["dense:0"] == ("unk__13", 10)
    lab = onnx_lab.open(tf2onnx_style(), dims={"unk__12": 4})
    assert _shapes(lab)["StatefulPartitionedCall/model/dense/BiasAdd:0"] == (4, 10)


def test_unsorted_graph_is_inferred_in_topological_order():
    s = _shapes(onnx_lab.open(unsorted_model()))
    assert s["a"] == s["b"] == s["y"] == (2,)


def test_large_constants_are_left_out_of_the_skeleton():
    # A 64x64 weight in a Constant node (over the 4 KB threshold) still gives shapes.
    w = numpy_helper.from_array(np.ones((64, 32), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=w),
         helper.make_node("MatMul", ["x", "w"], ["y"])], "big_const",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert _shapes(lab)["y"] == ("n", 32)
    assert _shapes(lab)["w"] == (64, 32)


def test_contrib_op_is_typed_by_its_rule_and_an_unknown_one_stays_untyped():
    s = _shapes(onnx_lab.open(quantized()))
    assert s["conv_out"] == (1, 4, 6, 6)
    assert s["act"] == (1, 4, 6, 6)  # com.microsoft::Gelu: ONNX cannot, its rule can
    assert s["y"] == (1, 10)
    # An op nobody has a rule for is never guessed, and stops nothing else.
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("NoSuchOp", ["r"], ["u"], domain="com.microsoft"),
         helper.make_node("Relu", ["u"], ["y"])], "unknown_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    s = _shapes(onnx_lab.open(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])))
    assert s["r"] == (2, 3) and s["u"] is None and s["y"] is None


def test_inference_failure_never_fails_open():
    # A declared type that contradicts the op (Relu of [2] declared [3]) and an unknown op.
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("NotAnOnnxOp", ["a"], ["b"]),
         helper.make_node("Neg", ["b"], ["y"])], "broken",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        value_info=[helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert len(lab.tensors) == 4 and len(lab.nodes) == 3
    assert _shapes(lab)["y"] == (2,)
    assert lab.summary()["num_nodes"] == 3


def test_types_are_cached_per_dims():
    model = onnx_lab.open("sample:transformer_block").model
    a = model.types({"batch": 1})
    assert model.types({"batch": 1}) is a
    assert model.types({"batch": 2}) is not a
    assert a["y"] == TensorInfo("float32", (1, "seq", 32))


def test_tensor_info():
    assert TensorInfo("float32", (1, 2)).numel == 2
    assert not TensorInfo("float32", (1, 2)).dynamic
    assert TensorInfo("float32", ("n", 2)).dynamic and TensorInfo("float32", ("n", 2)).numel is None
    assert TensorInfo(None, None).dynamic


def test_dtype_and_shape_helpers():
    assert dtype_name(ir.DataType.FLOAT) == "float32"
    assert dtype_name(TensorProto.DOUBLE) == "float64"
    assert dtype_name(TensorProto.FLOAT16) == "float16"
    assert dtype_name(TensorProto.INT64) == "int64"
    assert dtype_name(None) is None and dtype_name(0) is None
    assert shape_tuple(ir.Shape([1, "n", None, -1, "?"])) == (1, "n", None, None, None)
    assert shape_tuple(None) is None


def test_model_over_2gb_style_inference_uses_no_weights(tmp_path):
    # The skeleton holds no weight over 4 KB: a model whose weights are external and whose
    # data file is sparse (a hole, never read) still infers shapes.
    from models import save_external

    w = numpy_helper.from_array(np.zeros((256, 256), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    path = save_external(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                         tmp_path / "m.onnx")
    lab = onnx_lab.open(path)
    assert _shapes(lab)["y"] == ("b", 256)
    assert all(t.raw is None for t in lab.model.external_tensors())
    assert onnx.load(str(path), load_external_data=False).graph.initializer[0].data_location == 1


def test_dims_apply_to_declared_types_inference_cannot_reach():
    g = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
         helper.make_node("Relu", ["g"], ["y"])], "contrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    assert _shapes(onnx_lab.open(m))["y"] == ("batch", 4)
    lab = onnx_lab.open(m, dims={"batch": 3})
    assert _shapes(lab)["y"] == (3, 4)
    assert lab.outputs.iloc[0]["shape"] == (3, 4) and not lab.outputs.iloc[0]["dynamic"]


def _position_ids_model() -> onnx.ModelProto:
    """ids [batch, seq] -> Shape -> Gather(1) -> Range(0, seq, 1) -> Unsqueeze -> Gather(table),
    the position-embedding pattern of every transformer export."""
    table = numpy_helper.from_array(np.arange(64 * 4, dtype=np.float32).reshape(64, 4), "table")
    nodes = [
        helper.make_node("Shape", ["ids"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq_len"], axis=0),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "axes0"], ["pos_ids"]),
        helper.make_node("Gather", ["table", "pos_ids"], ["pos_emb"], axis=0),
        helper.make_node("Relu", ["pos_emb"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "positions",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [table, numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array([0], np.int64), "axes0")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_range_of_shape_is_resolved_when_dims_are_given():
    s = _shapes(onnx_lab.open(_position_ids_model()))
    assert s["positions"] == (None,) and s["y"] == (1, None, 4)
    lab = onnx_lab.open(_position_ids_model(), dims={"batch": 2, "seq": 7})
    s = _shapes(lab)
    assert s["positions"] == (7,) and s["pos_ids"] == (1, 7) and s["y"] == (1, 7, 4)
    assert not lab.tensors["dynamic"].any()
    # Ranges longer than the folding limit still work: only their scalar inputs are folded.
    assert _shapes(onnx_lab.open(_position_ids_model(), dims={"batch": 1, "seq": 9000}))["y"] \
        == (1, 9000, 4)


def test_folding_gives_same_shapes_as_running_the_model():
    import onnxruntime as ort

    model = _position_ids_model()
    lab = onnx_lab.open(model, dims={"batch": 3, "seq": 5})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"ids": np.zeros((3, 5), np.int64)})
    assert _shapes(lab)["y"] == y.shape


def _reshape_chain_model(links: int) -> onnx.ModelProto:
    """x [n] -> ``links`` times: Reshape(prev, ReduceProd(Shape(prev))) -> Relu: each target
    is computed from the previous Reshape's shape, through ReduceProd, which ONNX does not
    propagate (one fold round a link)."""
    nodes, prev = [], "x"
    for i in range(links):
        nodes += [helper.make_node("Shape", [prev], [f"s{i}"]),
                  helper.make_node("ReduceProd", [f"s{i}"], [f"p{i}"], keepdims=1),
                  helper.make_node("Reshape", [prev, f"p{i}"], [f"r{i}"]),
                  helper.make_node("Relu", [f"r{i}"], [f"a{i}"])]
        prev = f"a{i}"
    g = helper.make_graph(
        nodes, "reshape_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_folding_runs_as_many_rounds_as_a_chain_needs():
    # Six computed shapes in a row (PP-OCRv4's recognizer, a Paddle export, needs six rounds).
    s = _shapes(onnx_lab.open(_reshape_chain_model(6), dims={"n": 5}))
    assert all(s[f"r{i}"] == (5,) for i in range(6))


def _pad_in_if_model() -> onnx.ModelProto:
    """x [1, n] -> If(flag): each branch pads x to 64 columns with pads computed from
    Shape(x) (64 - n, through ReduceProd, which ONNX does not propagate): Silero VAD pads its
    STFT input so, inside an If."""
    def branch(tag: str, mode: str) -> onnx.GraphProto:
        return helper.make_graph([
            helper.make_node("Shape", ["x"], [f"{tag}_s"], start=1),
            helper.make_node("ReduceProd", [f"{tag}_s"], [f"{tag}_n"], keepdims=1),
            helper.make_node("Sub", ["sixty_four", f"{tag}_n"], [f"{tag}_right"]),
            helper.make_node("Concat", ["zeros3", f"{tag}_right"], [f"{tag}_pads"], axis=0),
            helper.make_node("Pad", ["x", f"{tag}_pads"], [f"{tag}_out"], mode=mode)],
            tag, [], [helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT, None)])

    g = helper.make_graph(
        [helper.make_node("If", ["flag"], ["padded"], then_branch=branch("then", "constant"),
                          else_branch=branch("else", "edge")),
         helper.make_node("Relu", ["padded"], ["y"])], "pad_in_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([64], np.int64), "sixty_four"),
         numpy_helper.from_array(np.zeros(3, np.int64), "zeros3")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_computations_inside_if_branches_are_folded():
    import onnxruntime as ort

    model = _pad_in_if_model()
    dynamic = _shapes(onnx_lab.open(model))["then_out"]
    assert dynamic is None or None in dynamic  # n unknown: nothing to fold
    s = _shapes(onnx_lab.open(model, dims={"n": 40}))
    assert s["then_out"] == s["else_out"] == s["y"] == (1, 64)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": np.ones((1, 40), np.float32), "flag": np.array(True)})
    assert y.shape == (1, 64)


def test_only_graphs_that_run_once_are_folded():
    from onnx_lab.core._fold import once_graphs

    lab = onnx_lab.open("sample:control_flow")
    assert set(lab.model.index.graphs) == {
        "", "If_2/then_branch", "If_2/else_branch", "Loop_3/body",
        "Loop_3/body/inner_if/then_branch", "Loop_3/body/inner_if/else_branch"}
    # A Loop body (and the If inside it) runs per iteration: its values are never folded.
    assert once_graphs(lab.model) == {"", "If_2/then_branch", "If_2/else_branch"}
