"""Edits as verified history steps: attributes, node removal, renames, merge, shapes, opset."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _machinery import chain_lab, chain_proto, ir3_conv_bn_proto
from onnx import helper

import onnx_lab
from onnx_lab.core.shapes import shape_tuple
from onnx_lab.errors import DimError, InputError, PassError, UnknownNameError
from onnx_lab.runtime.capture import run


def test_set_attribute_is_a_step_whose_report_shows_the_change():
    lab = onnx_lab.open("sample:convnet")
    r = lab.set_attribute("/head/fc/Gemm", "alpha", 2)  # int coerced to the FLOAT attribute
    node = lab.index.node("/head/fc/Gemm")
    assert node.attributes["alpha"].value == 2.0
    # a change the user asked for is reported as such, not as a failed verification
    assert r.verify_passed is None and r.outputs_changed is True
    assert any(n.startswith("outputs changed (expected for this edit): max_abs") and "'logits'"
               in n for n in r.notes)
    assert r.max_abs_err > 0
    assert r.provenance == {"/head/fc/Gemm": ["/head/fc/Gemm"]}
    assert "alpha" not in lab.original.index.node("/head/fc/Gemm").attributes \
        or lab.original.index.node("/head/fc/Gemm").attributes["alpha"].value == 1.0
    with pytest.raises(PassError, match="FLOAT"):
        lab.set_attribute("/head/fc/Gemm", "alpha", "two")
    with pytest.raises(UnknownNameError, match="Gemm"):
        lab.set_attribute("/head/fc/Gem", "alpha", 1.0)


def test_set_attribute_the_op_does_not_define():
    # A typo used to become a version onnxruntime refuses to load ("verify FAILED, inf").
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(UnknownNameError, match="'strides'") as e:
        lab.set_attribute("/stem/conv/Conv", "stridez", [2, 2])
    assert "kernel_shape" in e.value.fix
    assert len(lab.history) == 1


def test_remove_node_reconnects_and_keeps_semantics():
    lab = onnx_lab.open("sample:convnet")
    r = lab.remove_node("/head/dropout/Dropout")
    assert r.removed == ["/head/dropout/Dropout"] and r.verify_passed
    assert "Dropout" not in set(lab.nodes.op_type)


def test_remove_node_without_reconnect_turns_outputs_into_inputs():
    lab = chain_lab()
    r = lab.remove_node("n2_Relu", reconnect=False)
    assert r.modified
    assert set(lab.inputs.name) == {"x", "r1"}
    # the dead branch feeding the Relu stays until eliminated; the model still runs
    out = run(lab.model, {"x": np.ones((2, 8), np.float32), "r1": np.ones((2, 16), np.float32)})
    assert out["y"].shape == (2, 4)


def test_remove_node_refuses_a_reconnect_it_cannot_do():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("y", 1, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(m)
    with pytest.raises(PassError, match="reconnect=False"):
        lab.remove_node("relu")
    assert len(lab.history) == 1


def test_remove_node_refuses_to_turn_a_graph_output_into_a_passed_through_input():
    lab = onnx_lab.open("sample:convnet")
    before = onnx.printer.to_text(lab.model.to_proto())
    with pytest.raises(PassError, match="passed straight through") as e:
        lab.remove_node("/head/fc/Gemm", reconnect=False)
    assert "remove_output" in e.value.fix
    assert lab.removal_plan("/head/fc/Gemm", "inputs")["problem"]
    assert onnx.printer.to_text(lab.model.to_proto()) == before and len(lab.history) == 1
    # a node feeding no graph output still may (the chain test above)
    assert lab.removal_plan("/head/dropout/Dropout", "inputs")["problem"] is None


def test_rename_tensor_everywhere_and_earlier_versions_keep_names():
    lab = chain_lab()
    lab.rename_tensor("W1", "first_weight")
    lab.rename_tensor("y", "scores")
    assert "first_weight" in lab.model.graph.initializers
    assert list(lab.outputs.name) == ["scores"]
    assert lab.history.loc[2, "verify_passed"]  # outputs are matched by position
    assert "W1" in lab.original.model.graph.initializers
    assert list(lab.original.outputs.name) == ["y"]
    assert lab.original.model.graph.initializers["W1"].const_value.name == "W1"
    with pytest.raises(PassError, match="exists"):
        lab.rename_tensor("h1", "h2")
    with pytest.raises(UnknownNameError):
        lab.rename_tensor("nope", "x2")


def test_fix_dims_then_verification():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.fix_dims({"batch": 2})
    assert r.modified and r.verify_passed
    assert shape_tuple(lab.model.graph.inputs[0].shape) == (2, "seq", 32)
    assert lab.dims == {"seq": 8}  # 'batch' is no longer a dim
    assert r.verification.set_index("match").loc["output", "shape"] == [2, 8, 32]
    lab.undo()
    assert lab.dims == {"batch": 1, "seq": 8}
    with pytest.raises(DimError, match="'batchsize'"):
        lab.fix_dims({"batchsize": 1})
    with pytest.raises(DimError, match="int >= 0, got -1"):
        lab.fix_dims({"batch": -1})


def test_fix_dims_gives_anonymous_output_dims_their_size(tmp_path):
    # tf2onnx names every None dim unk__N, a new N per value: fixing the input's unk__12
    # left the outputs declared [unk__13, 3], which no dims name reaches
    import onnxruntime as ort
    from onnx import TensorProto, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"]),
             helper.make_node("Shape", ["y"], ["s"]), helper.make_node("Identity", ["x"], ["z"])]
    g = helper.make_graph(nodes, "tf", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      ["unk__12", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["unk__13", 3]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [None]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])],
                          [w], value_info=[helper.make_tensor_value_info(
                              "r", TensorProto.FLOAT, ["unk__14", 4])])
    path = tmp_path / "tf.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    lab = onnx_lab.open(path)
    r = lab.fix_dims({"unk__12": 2})
    assert r.verify_passed is True
    assert any(n.startswith("3 anonymous dims (unk__N or unnamed)") for n in r.notes), r.notes
    out = {v.name: shape_tuple(v.shape) for v in lab.model.graph.outputs}
    # a named dim the user did not give stays a name (z is x, but declared 'n')
    assert out == {"y": (2, 3), "s": (2,), "z": ("n", 4)}
    assert shape_tuple(lab.index.value("r").shape) == (2, 4)
    lab.save(tmp_path / "fixed.onnx")
    saved = onnx.load(tmp_path / "fixed.onnx")
    assert [d.dim_value for d in saved.graph.output[0].type.tensor_type.shape.dim] == [2, 3]
    sess = ort.InferenceSession(str(tmp_path / "fixed.onnx"))
    y, s, _ = sess.run(None, {"x": np.ones((2, 4), np.float32)})
    assert y.shape == (2, 3) and s.tolist() == [2, 3]
    assert onnx.load(path).graph.output[0].type.tensor_type.shape.dim[0].dim_param == "unk__13"


def test_fix_dims_of_a_decoder_fixes_its_total_length_too(tmp_path):
    # genai's total_sequence_length is past + new: fixing both fixes it (it used to stay a
    # name the fixed model could no longer derive, and verification asked for a total of 1).
    lab = onnx_lab.open("sample:tiny_llm")
    r = lab.fix_dims({"batch_size": 1, "sequence_length": 1, "past_sequence_length": 4})
    assert r.verify_passed is True
    assert any("total_sequence_length" in n and "fixed to 5" in n for n in r.notes)
    shapes = {v.name: shape_tuple(v.shape) for v in lab.model.graph.inputs}
    assert shapes["attention_mask"] == (1, 5)
    # Only the past fixed: the total is declared as the sum that is left.
    lab = onnx_lab.open("sample:tiny_llm", dims={"batch_size": 1, "sequence_length": 3})
    r = lab.fix_dims({"past_sequence_length": 4})
    assert r.verify_passed is True
    declared = {v.name: shape_tuple(v.shape) for v in lab.model.graph.outputs}
    assert declared["present.0.key"][2] == "4 + sequence_length"
    path = tmp_path / "fixed.onnx"
    lab.save(path)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path))
    feeds = {"input_ids": np.ones((1, 3), np.int64), "attention_mask": np.ones((1, 7), np.int64)}
    for i in sess.get_inputs():
        if i.name.startswith("past"):
            feeds[i.name] = np.zeros((1, 2, 4, 16), np.float32)
    assert sess.run(["present.0.key"], feeds)[0].shape == (1, 2, 7, 16)


def test_set_input_shape():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.set_input_shape("x", [1, 8, 32])
    assert r.verify_passed and lab.inputs.loc[0, "shape"] == (1, 8, 32)
    with pytest.raises(DimError, match="fixed to 32"):
        lab.set_input_shape("x", [1, 8, 16])
    with pytest.raises(DimError, match="rank"):
        lab.set_input_shape("x", [1, 8])
    with pytest.raises(UnknownNameError, match="'x'"):
        lab.set_input_shape("y", [1, 8, 32])
    # the outputs said "batch" and "seq" after the input said 1 and 8 (no other input names
    # them): they take the sizes too, and the saved file runs
    assert shape_tuple(lab.model.graph.outputs[0].shape) == (1, 8, 32)
    assert any("batch=1, seq=8 in the outputs" in n for n in r.notes)


def test_a_reference_that_fails_at_the_new_sizes_is_said_to_fail_at_them():
    # a batch of 0 that a Gather of row 0 refuses: the message read as if the model before
    # the step were broken, and did not name the sizes it ran at
    from onnx import TensorProto, numpy_helper

    from onnx_lab.errors import RuntimeLoadError

    g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array(0, np.int64), "i")])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                        dims={"b": 2})
    with pytest.raises(RuntimeLoadError, match=r"does not run at the sizes this step sets "
                       r"\(x \[0, 8\]\)"):
        lab.set_input_shape("x", [0, 8])
    assert len(lab.history) == 1  # nothing applied


def test_set_input_shape_keeps_a_name_another_input_declares():
    from onnx import TensorProto

    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                        dims={"n": 2})
    lab.set_input_shape("a", [2, 4])
    assert shape_tuple(lab.model.graph.outputs[0].shape) == ("n", 4)  # b still says n


def test_convert_opset_and_unsupported_targets():
    lab = onnx_lab.open("sample:convnet")
    r = lab.convert_opset(18)
    assert r.modified and r.verify_passed
    assert lab.model.ir.opset_imports[""] == 18
    assert set(lab.origins) >= {"/stem/conv/Conv"}
    r = lab.convert_opset(18)
    assert r.modified is False and "already" in r.reason
    with pytest.raises(PassError, match="not supported"):
        lab.convert_opset(999)
    with pytest.raises(PassError, match="must be int"):
        lab.convert_opset("18")


def test_convert_opset_of_an_ir3_model_raises_the_ir_version_and_keeps_weights_constant():
    # onnx.version_converter kept IR 3 with opset 17 (out of spec). From IR 4 on, weights left
    # listed as inputs would become overridable inputs that no pass folds or fuses.
    m = ir3_conv_bn_proto()
    lab = onnx_lab.open(m)
    r = lab.convert_opset(17)
    assert r.verify_passed and any("IR version 3 -> 8" in n for n in r.notes)
    proto = lab.model.to_proto()
    assert proto.ir_version == 8 and [i.name for i in proto.graph.input] == ["x"]
    onnx.checker.check_model(proto)
    assert lab.check(load=False).query("code == 'initializer_input'").empty
    assert lab.apply("fuse_conv_bn").verify_passed


def test_convert_opset_missing_adapter_is_a_clear_error():
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(PassError, match="version_converter|adapter"):
        lab.convert_opset(1)


def _half(prefix: str) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("h", 1, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_merge_connects_two_models():
    a, b = _half("a"), _half("b")
    both = onnx_lab.merge(a, b, io_map=[("h", "x")], prefix1="a/", prefix2="b/")
    assert list(both.inputs.name) == ["a/x"] and list(both.outputs.name) == ["b/h"]
    out = run(both.model, {"a/x": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(out["b/h"], [0.0, 2.0])
    with pytest.raises(InputError, match="io_map"):
        onnx_lab.merge(a, b, io_map=[("nope", "x")])
    with pytest.raises(InputError):
        onnx_lab.merge(a, b, io_map=[("h", "x")])  # clashing names without prefixes


def _dense(width_in: int, width_out: int) -> onnx.ModelProto:
    w = onnx.numpy_helper.from_array(np.ones((width_in, width_out), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", 1, ["batch", width_in])],
                          [helper.make_tensor_value_info("y", 1, ["batch", width_out])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_merge_refuses_tensors_of_another_shape_and_keeps_the_dims():
    # [batch, 10] joined to [batch, 64] was accepted, saved, and failed at the first run; the
    # merged Lab forgot batch, so the next verified edit raised a DimError
    a = onnx_lab.open(_dense(64, 10), dims={"batch": 2})
    with pytest.raises(InputError, match=r"shape \['batch', 10\] into \['batch', 64\]"):
        onnx_lab.merge(a, a, io_map=[("y", "x")], prefix1="p/", prefix2="q/")
    b = onnx_lab.open(_dense(10, 3), dims={"batch": 2})
    both = onnx_lab.merge(a, b, io_map=[("y", "x")], prefix1="p/", prefix2="q/")
    assert both.dims == {"batch": 2}
    r = both.rename_tensor("q/y", "out")  # verified: the dims size the feeds
    assert r.verify_passed


def test_merge_is_exported():
    # The façade wraps transforms.edit.merge_models (which returns a LabModel) in a Lab.
    from onnx_lab.lab import merge

    assert onnx_lab.merge is merge
    assert chain_proto() is not None


def _pool_model(output_is_pool: bool) -> onnx.ModelProto:
    h = onnx.helper
    vi = h.make_tensor_value_info
    if output_is_pool:
        nodes = [h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                             name="pool")]
        g = h.make_graph(nodes, "g", [vi("x", 1, [1, 3, 33, 33])], [vi("y", 1, [1, 3, 16, 16])])
    else:
        nodes = [h.make_node("Relu", ["x0"], ["x"], name="pre"),
                 h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                             name="pool"),
                 h.make_node("Relu", ["p"], ["r"], name="relu"),
                 h.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
        g = h.make_graph(nodes, "g", [vi("x0", 1, [1, 3, 33, 33])], [vi("y", 1, [1, 3, 1, 1])],
                         value_info=[vi("x", 1, [1, 3, "H", "W"]), vi("p", 1, [1, 3, 16, 16]),
                                     vi("r", 1, [1, 3, 16, 16])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_an_edit_that_changes_declared_intermediate_shapes_is_applied():
    # MaxPool ceil_mode=1 makes 17 of 16: the declared 16 was refused as "pass values the
    # op accepts", which MaxPool does accept
    lab = onnx_lab.open(_pool_model(False))
    r = lab.set_attribute("pool", "ceil_mode", 1)
    assert r.modified and any("declared shapes of 2 intermediate" in n for n in r.notes)
    assert lab.tensors.set_index("name").loc["p", "shape"] == (1, 3, 17, 17)
    # only what the edited node feeds: the shape declared upstream stays as written
    assert [d for d in lab.model.ir.graph.node(0).outputs[0].shape] == [1, 3, "H", "W"]


def test_an_edit_that_changes_a_declared_output_shape_says_so():
    lab = onnx_lab.open(_pool_model(True))
    with pytest.raises(onnx_lab.errors.PassError, match="changes the shape of a graph output"):
        lab.set_attribute("pool", "ceil_mode", 1)
    assert len(lab.history) == 1


# "²", "½", "Ⅷ", "1_000": numbers str.isdecimal does not take, which the Editor's shape
# field and --input-shape hand on as text (each had become a dim of that name)
@pytest.mark.parametrize("text", ["1.5", "16.0", "1e3", "-3", "8", "²", "½", "Ⅷ", "1_000"])
def test_set_input_shape_refuses_a_number_written_as_text(text):
    """'1.5' in a shape had become a symbolic dim named '1.5' (sized 1 by the Lab), verified
    and saved so: a number typed as text is neither a size nor a name."""
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    with pytest.raises(DimError, match="number written as text"):
        lab.set_input_shape("x", [text, 8, 32])
    assert len(lab.history) == 1 and text not in lab.dims
    r = lab.set_input_shape("x", ["n", 8, 32])  # a name still is one
    assert r.modified and shape_tuple(lab.model.graph.inputs[0].shape) == ("n", 8, 32)
    r = lab.set_input_shape("x", ["n2", 8, 32])  # a digit inside a name too
    assert r.modified and shape_tuple(lab.model.graph.inputs[0].shape) == ("n2", 8, 32)
