"""Model editing as verified steps: schema-checked attributes, removal modes and plans, renames
(also inside If bodies), outputs, weights, inserted nodes, refusals that leave the model
unchanged, and the replay script."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
import pytest
from _machinery import save_external
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import InputError, LabError, UnknownNameError
from onnx_lab.runtime.capture import run
from onnx_lab.samples import build
from onnx_lab.transforms.edit import attribute_form, edit_provenance, removal_plan

BN = "/stem/bn/BatchNormalization"


@pytest.fixture
def convnet(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(path))
    return onnx_lab.open(path)


def _text(lab) -> str:
    return onnx.printer.to_text(lab.model.to_proto())


def _feeds(lab, seed=0):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in v.shape])
            .astype(np.float32) for v in lab.model.graph.inputs}


def _refused(lab, call, match):
    """``call`` raises a LabError matching ``match`` and leaves the history as it was."""
    before, steps = _text(lab), len(lab.version_history)
    with pytest.raises(LabError, match=match):
        call()
    assert _text(lab) == before and len(lab.version_history) == steps


def test_attribute_edit_is_typed_by_the_schema_and_reported_as_an_expected_change(convnet):
    r = convnet.set_attribute(BN, "epsilon", 1e-3)
    assert convnet.index.node(BN).attributes["epsilon"].value == pytest.approx(1e-3)
    assert r.outputs_changed is True and r.verify_passed is None and r.max_abs_err > 0
    assert any("outputs changed (expected for this edit): max_abs" in n for n in r.notes)
    assert edit_provenance(r) == {"touched": [BN], "created": [], "removed": []}
    # the same value again: nothing to do, with the reason
    assert not convnet.set_attribute(BN, "epsilon", 1e-3).modified
    _refused(convnet, lambda: convnet.set_attribute(BN, "epsilon", "small"), "FLOAT")
    _refused(convnet, lambda: convnet.set_attribute(BN, "epsilon", [1e-3]), "FLOAT")
    _refused(convnet, lambda: convnet.set_attribute("/block1/pool/MaxPool", "kernel_shape",
                                                    [2.5, 2]), "INTS")
    _refused(convnet, lambda: convnet.set_attribute("/block1/pool/MaxPool", "auto_pad",
                                                    "SAME"), "SAME_UPPER")


def test_an_edit_that_breaks_shape_inference_is_refused_with_the_reason(convnet):
    # a 2-d perm on a 4-d tensor: only ONNX shape inference sees it
    _refused(convnet, lambda: convnet.set_attribute("/block2/to_nhwc/Transpose", "perm",
                                                    [1, 0]), "shape inference")


def test_an_edit_that_keeps_values_reports_them_unchanged(convnet):
    r = convnet.set_attribute(BN, "momentum", 0.5)  # training-only attribute
    assert r.verify_passed is True and r.outputs_changed is False and r.max_abs_err == 0


def test_setting_a_float_attribute_to_the_value_it_holds_changes_nothing(convnet):
    # the model holds epsilon as float32: the same 1e-5 given as a Python float is no edit
    eps = next(a.f for a in convnet.model.to_proto().graph.node
               if a.name == BN for a in a.attribute if a.name == "epsilon")
    given = float(str(np.float32(eps)))  # '1e-05': a double that is not the float32 held
    assert given != eps
    steps = len(convnet.history)
    r = convnet.set_attribute(BN, "epsilon", given)
    assert not r.modified and r.reason == "the attribute already has this value"
    assert len(convnet.history) == steps  # no step that undo would step over


def test_attribute_form_lists_schema_attributes_with_types_and_values(convnet):
    form = {a["name"]: a for a in attribute_form(convnet.model, BN)}
    assert form["epsilon"]["type"] == "FLOAT"
    assert form["epsilon"]["value"] == pytest.approx(1e-5)
    assert form["momentum"]["default"] == pytest.approx(0.9)
    pool = {a["name"]: a for a in attribute_form(convnet.model, "/block1/pool/MaxPool")}
    assert pool["auto_pad"]["allowed"][0] == "NOTSET" and pool["kernel_shape"]["required"]


def test_remove_node_reconnects_only_when_dtype_and_shape_allow(convnet):
    plan = convnet.removal_plan("/head/dropout/Dropout")
    assert plan["problem"] is None and plan["nodes"] == ["/head/dropout/Dropout"]
    r = convnet.remove_node("/head/dropout/Dropout")
    assert r.verify_passed is True and r.removed == ["/head/dropout/Dropout"]
    # a Conv changes the channel count: its input cannot stand in for its output
    assert "shape" in convnet.removal_plan("/stem/conv/Conv")["problem"]
    _refused(convnet, lambda: convnet.remove_node("/stem/conv/Conv"), "shape")


def test_removing_the_node_of_a_graph_output_that_cannot_be_reconnected_is_refused():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("y", 1, [2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    _refused(lab, lambda: lab.remove_node("relu"), "disconnect the graph output")
    # cascade would remove the only output: refused as well
    _refused(lab, lambda: lab.remove_node_cascade("relu"), "every output")


def test_a_cascade_through_an_if_takes_the_weights_only_its_branches_read(tmp_path):
    # 'w' is read inside both branches and by a Mul after the If: the plan missed it and the
    # saved model kept it as an orphan (the bodies' reads did not count)
    T = TensorProto
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"], name="tm")], "then",
                               [], [helper.make_tensor_value_info("t", T.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["e"], name="ea")], "else",
                               [], [helper.make_tensor_value_info("e", T.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["f"], name="if", then_branch=then_g,
                          else_branch=else_g),
         helper.make_node("Mul", ["f", "w"], ["y"], name="mul"),
         helper.make_node("Sigmoid", ["x"], ["z"], name="sig")], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2]),
         helper.make_tensor_value_info("z", T.FLOAT, [2])],
        [helper.make_tensor("w", T.FLOAT, [2], [0.5, 2.0]),
         helper.make_tensor("zero", T.FLOAT, [], [0.0])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    plan = lab.removal_plan("if", mode="cascade")
    assert plan["nodes"] == ["if", "mul", "gt", "sum"] and plan["outputs"] == ["y"]
    assert sorted(plan["initializers"]) == ["w", "zero"]
    lab.remove_node_cascade("if")
    out = lab.save(tmp_path / "m.onnx")
    m = onnx.load(str(out))
    assert [i.name for i in m.graph.initializer] == []
    assert [n.op_type for n in m.graph.node] == ["Sigmoid"]
    import onnxruntime as ort
    x = np.array([-1.0, 2.0], np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], 1 / (1 + np.exp(-x)), rtol=1e-6)
    lab.undo()  # the version before keeps its bodies whole
    assert run(lab.model, {"x": x})["y"].tolist() == (x * [0.5, 2.0] * [0.5, 2.0]).tolist()


def test_cascade_says_what_it_removes_then_removes_exactly_that(convnet):
    convnet.add_output("/head/flatten/Flatten_output_0")
    plan = convnet.removal_plan("/head/dropout/Dropout", mode="cascade")
    assert plan["nodes"] == ["/head/dropout/Dropout", "/head/fc/Gemm", "/head/fc/Reshape"]
    assert plan["outputs"] == ["logits"]
    assert set(plan["initializers"]) == {"head.fc.weight_flat", "head.fc.weight_shape",
                                         "head.fc.bias"}
    r = convnet.remove_node_cascade("/head/dropout/Dropout")
    assert sorted(r.removed) == sorted(plan["nodes"])
    assert [v.name for v in convnet.model.graph.outputs] == ["/head/flatten/Flatten_output_0"]
    assert "head.fc.weight_flat" not in convnet.model.graph.initializers
    assert r.verify_passed is None or r.verify_passed is True  # the kept output is compared
    out = run(convnet.model, _feeds(convnet))
    assert list(out) == ["/head/flatten/Flatten_output_0"]


def test_renames_keep_every_output_bit_identical(convnet):
    feeds = _feeds(convnet)
    ref = run(convnet.model, feeds)["logits"]
    for r in (convnet.rename_tensor("input", "image"), convnet.rename_tensor("logits", "scores"),
              convnet.rename_node("/head/fc/Gemm", "classifier")):
        assert r.verify_passed is True and r.max_abs_err == 0
        assert r.verification["preset"].eq("exact").all()
    assert [v.name for v in convnet.model.graph.inputs] == ["image"]
    assert "classifier" in convnet.index.entries
    got = run(convnet.model, {"image": feeds["input"]})["scores"]
    assert np.array_equal(got, ref)
    _refused(convnet, lambda: convnet.rename_tensor("scores", "image"), "exists")
    _refused(convnet, lambda: convnet.rename_node(BN, "classifier"), "exists")


def test_rename_follows_into_if_bodies():
    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"], name="t_add")],
                             "then", [], [helper.make_tensor_value_info("t", 1, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="e_neg")],
                              "else", [], [helper.make_tensor_value_info("e", 1, [2])])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
        "g", [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
              helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("y", 1, [2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    r = lab.rename_tensor("x", "features")
    assert r.verify_passed is True
    proto = lab.model.to_proto()
    body_inputs = {i for n in proto.graph.node for a in n.attribute for b in [a.g]
                   for bn in b.node for i in bn.input}
    assert body_inputs == {"features"}
    onnx.checker.check_model(proto, full_check=True)


def test_add_output_then_remove_it_again(convnet):
    feeds = _feeds(convnet)
    ref = run(convnet.model, feeds)["logits"]
    r = convnet.add_output("/stem/relu/Relu_output_0")
    assert r.verify_passed is True and r.max_abs_err == 0
    out = run(convnet.model, feeds)
    assert np.array_equal(out["logits"], ref) and out["/stem/relu/Relu_output_0"].ndim == 4
    _refused(convnet, lambda: convnet.add_output("no_such_tensor"), "no_such_tensor")
    r = convnet.remove_output("logits")  # the head is only needed by logits
    assert {"/head/fc/Gemm", "/head/pool/GlobalAveragePool"} <= set(r.removed)
    assert "/stem/relu/Relu" in convnet.index.entries
    _refused(convnet, lambda: convnet.remove_output("/stem/relu/Relu_output_0"), "only")


def test_replace_and_scale_an_initializer(convnet, tmp_path):
    w = convnet.model.graph.initializers["block1.conv.weight"].const_value.numpy()
    np.save(tmp_path / "w.npy", w * 2)
    np.savez(tmp_path / "w.npz", **{"block1.conv.weight": w * 3, "other": w})
    r = convnet.replace_initializer("block1.conv.weight", str(tmp_path / "w.npy"))
    assert r.outputs_changed is True
    assert edit_provenance(r)["touched"] == ["/block1/conv/Conv"]
    got = convnet.model.graph.initializers["block1.conv.weight"].const_value.numpy()
    assert np.array_equal(got, w * 2)
    # earlier versions keep their weights
    orig = convnet.original.model.graph.initializers["block1.conv.weight"].const_value.numpy()
    assert np.array_equal(orig, w)
    convnet.replace_initializer("block1.conv.weight", str(tmp_path / "w.npz"))
    assert np.array_equal(
        convnet.model.graph.initializers["block1.conv.weight"].const_value.numpy(), w * 3)
    convnet.scale_initializer("block1.conv.weight", 0.5)
    assert np.allclose(
        convnet.model.graph.initializers["block1.conv.weight"].const_value.numpy(), w * 1.5)
    _refused(convnet, lambda: convnet.replace_initializer("block1.conv.weight", w[:1]),
             "shape")
    _refused(convnet, lambda: convnet.replace_initializer("block1.conv.weight",
                                                          w.astype(np.float64)), "float64")
    _refused(convnet, lambda: convnet.replace_initializer("block1.conv.weight",
                                                          str(tmp_path / "none.npy")),
             "No file")


def test_a_weight_held_in_a_constant_node_is_replaced_and_scaled_like_an_initializer(tmp_path):
    # lab.initializers lists Constant-node tensors (PaddlePaddle and TorchScript exports keep
    # weights there, source 'constant'), and the initializer edits said "Unknown initializer"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], name="const",
                          value=onnx.numpy_helper.from_array(w, "w")),
         helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert lab.initializers.set_index("name").loc["w", "source"] == "constant"
    x = {"x": np.ones((1, 2), np.float32)}
    r = lab.scale_initializer("w", 2.0)
    assert r.modified and r.outputs_changed is True
    assert edit_provenance(r)["touched"] == ["mm"]
    np.testing.assert_array_equal(run(lab.model, x)["y"], x["x"] @ (w * 2))
    lab.replace_initializer("w", np.ones((2, 3), np.float32))
    out = lab.save(tmp_path / "m.onnx")
    import onnxruntime as ort
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, [[2, 2, 2]])
    lab.undo()
    lab.undo()  # earlier versions keep the Constant's own tensor
    np.testing.assert_array_equal(run(lab.model, x)["y"], x["x"] @ w)
    _refused(lab, lambda: lab.replace_initializer("w", np.ones((3, 2), np.float32)), "shape")


@pytest.mark.parametrize("op, attrs, inputs, expect", [
    ("Identity", {}, None, lambda y: y),
    ("Softmax", {"axis": -1}, None, lambda y: np.exp(y) / np.exp(y).sum(-1, keepdims=True)),
    ("Mul", {}, [2.0], lambda y: y * 2),
    ("Add", {}, [1.0], lambda y: y + 1),
    ("Clip", {}, [-0.1, 0.1], lambda y: np.clip(y, -0.1, 0.1)),
    ("Transpose", {"perm": [1, 0]}, None, lambda y: y.T),
    ("Reshape", {}, [[2, 5]], lambda y: y.reshape(2, 5)),
    ("Cast", {"to": onnx.TensorProto.DOUBLE}, None, lambda y: y.astype(np.float64)),
])
def test_add_node_after_a_graph_output(convnet, op, attrs, inputs, expect):
    feeds = _feeds(convnet)
    ref = run(convnet.model, feeds)["logits"]
    r = convnet.add_node("logits", op, attrs, inputs)
    assert len(edit_provenance(r)["created"]) == 1
    out = run(convnet.model, feeds)
    assert list(out) == ["logits"]  # the output keeps its name and shows the new node
    np.testing.assert_allclose(out["logits"], expect(ref), rtol=1e-5, atol=1e-6)


def test_add_node_between_nodes_and_bad_forms(convnet):
    r = convnet.add_node("/stem/relu/Relu_output_0", "Mul", inputs=[1.0])
    assert r.verify_passed is True or r.outputs_changed is False
    _refused(convnet, lambda: convnet.add_node("logits", "Softmaxx"), "No op")
    _refused(convnet, lambda: convnet.add_node("logits", "Cast"), "needs attribute")
    _refused(convnet, lambda: convnet.add_node("logits", "Softmax", {"axes": 1}), "axes")
    _refused(convnet, lambda: convnet.add_node("logits", "Softmax", {"axis": "1"}), "INT")
    _refused(convnet, lambda: convnet.add_node("logits", "Add"), "inputs")


@pytest.mark.parametrize("op, attrs, inputs, n_out", [
    ("TopK", {"axis": -1}, [[3]], 2),                 # K is int64 by the schema; 2 outputs
    ("Split", {"axis": 1, "num_outputs": 2}, None, 2),
    ("Split", {"axis": 1}, [[4, 6]], 2),              # the parts' sizes (of 10): int64
])
def test_add_node_of_an_op_with_several_outputs(convnet, tmp_path, op, attrs, inputs, n_out):
    # TopK was refused ("Output 1 is out of bounds", K made float32) and a Split got one
    # output, so the model no longer ran
    if "num_outputs" in attrs:
        convnet.convert_opset(18)  # Split's num_outputs is opset 18's
    r = convnet.add_node("logits", op, attrs, inputs)
    assert r.modified and r.verify_passed is not False, r.notes
    node = next(n for n in convnet.model.graph if n.op_type == op)
    assert len(node.outputs) == n_out and node.outputs[0].name == "logits"
    import onnxruntime as ort
    out = convnet.save(tmp_path / "m.onnx")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"input": np.ones((1, 3, 32, 32), np.float32)})[0]
    assert y.shape == (1, {"TopK": 3}.get(op, 5 if attrs.get("num_outputs") else 4))


def test_the_script_replays_the_session(convnet, tmp_path):
    np.save(tmp_path / "w.npy",
            convnet.model.graph.initializers["block1.conv.weight"].const_value.numpy() * 2)
    convnet.set_attribute(BN, "epsilon", 1e-3)
    convnet.remove_node("/head/dropout/Dropout")
    convnet.rename_tensor("input", "image")
    convnet.add_output("/stem/relu/Relu_output_0")
    convnet.replace_initializer("block1.conv.weight", str(tmp_path / "w.npy"))
    convnet.scale_initializer("block1.conv.weight", 0.5)
    convnet.add_node("logits", "Softmax", {"axis": 1})
    convnet.rename_node("/head/fc/Gemm", "fc")
    convnet.add_node("logits", "Mul", inputs=[np.float32(3.0)])
    convnet.undo()  # an undone step is not replayed
    script = convnet.to_script()
    assert script.count("# step") == 8 and "lab.set_attribute('" + BN in script
    ns: dict = {}
    exec(compile(script, "replay.py", "exec"), ns)
    assert _text(ns["lab"]) == _text(convnet)
    assert convnet.version_history.to_script() == script  # the History's own door
    assert convnet.history.to_script() == script  # the table's, as the issue names it
    assert type(convnet.history.tail(2)) is pd.DataFrame  # derived frames stay plain
    assert list(convnet.history["step"]) == list(range(10))


def test_a_step_made_without_verification_is_replayed_so(tmp_path):
    # an unnamed batch dim opened without shapes: the session needed verify=False, and the
    # script replayed into a DimError at step 1
    g = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"], name="relu")], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    lab = onnx_lab.open(src)
    lab.rename_tensor("Y", "out", verify=False)
    lab.set_input_shape("X", [2, 4])  # verified: the shape is known now
    script = lab.to_script()
    assert "lab.rename_tensor('Y', 'out', verify=False)" in script
    assert "lab.set_input_shape('X', [2, 4])  # step 2" in script
    ns: dict = {}
    exec(compile(script, "replay.py", "exec"), ns)
    assert _text(ns["lab"]) == _text(lab)


def test_a_script_needs_a_file_to_open():
    lab = onnx_lab.open(build("convnet"))
    lab.rename_tensor("input", "image")
    with pytest.raises(LabError, match="source="):
        lab.to_script()
    assert "onnx_lab.open('m.onnx')" in lab.to_script(source="m.onnx")


def test_unknown_node_is_a_clear_error(convnet):
    with pytest.raises(UnknownNameError, match="/stem/bn"):
        convnet.set_attribute("/stem/bnn", "epsilon", 1e-3)
    with pytest.raises(InputError, match="mode"):
        removal_plan(convnet.model, BN, mode="all")


def _external_lab(tmp_path):
    path = tmp_path / "ext.onnx"
    save_external(build("convnet"), path)  # weights over 1 KiB in ext.onnx.data
    lab = onnx_lab.open(path)
    assert lab.model.external_tensors()
    return lab


def test_edits_of_a_model_with_external_data_are_checked(tmp_path):
    lab = _external_lab(tmp_path)
    r = lab.set_attribute(BN, "epsilon", 1e-3)
    # the checker runs (external weights as typed inputs), it does not fail on the files
    assert not any("checker" in n for n in r.notes) and r.outputs_changed
    _refused(lab, lambda: lab.set_attribute("/block2/to_nhwc/Transpose", "perm", [1, 0]),
             "shape inference")


def test_an_edited_model_with_external_data_loads_in_onnxruntime(tmp_path):
    import onnxruntime as ort

    lab = _external_lab(tmp_path)
    lab.scale_initializer("block1.conv.weight", 0.5)
    out = lab.save(tmp_path / "out" / "edited.onnx")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.zeros((1, 3, 32, 32), np.float32)
    np.testing.assert_allclose(sess.run(None, {"input": x})[0],
                               run(lab.model, {"input": x})["logits"], rtol=1e-5, atol=1e-6)


def test_a_change_only_in_intermediates_is_not_called_an_output_change():
    zero = onnx.numpy_helper.from_array(np.zeros([4], np.float32), "zero")
    g = helper.make_graph([helper.make_node("LeakyRelu", ["x"], ["h"], name="act", alpha=0.1),
                           helper.make_node("Mul", ["h", "zero"], ["y"], name="mul")], "g",
                          [helper.make_tensor_value_info("x", 1, [4])],
                          [helper.make_tensor_value_info("y", 1, [4])], [zero])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    r = lab.set_attribute("act", "alpha", 0.5)
    assert r.outputs_changed is False and r.verify_passed is None
    assert r.first_failure == "h" and r.max_abs_err == 0
    assert "outputs unchanged within tolerance" in r.notes[-1]
    assert "intermediate values changed" in r.notes[-1]


def test_edits_inside_control_flow():
    lab = onnx_lab.open("sample:control_flow")
    r = lab.rename_tensor("neg_x", "neg_out")  # defined inside If_2's else branch
    assert r.verify_passed is True
    assert "neg_out" in {o.name for o in lab.index.node("If_2/else_branch/Neg_0").outputs}
    assert lab.rename_node("inner_if", "the_if").verify_passed is True
    _refused(lab, lambda: lab.add_output("neg_out"), "subgraph")
    _refused(lab, lambda: lab.remove_node("Loop_3/body/Identity_0"), "graph output")
    _refused(lab, lambda: lab.remove_node_cascade("If_2"), "add_output")


def test_roi_align_modes_are_checked_against_the_spec():
    # onnxruntime ran coordinate_transformation_mode='bogus' as output_half_pixel, silently:
    # the edit was accepted and saved (torchvision's Faster R-CNN)
    g = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], name="roi", output_height=2,
                          output_width=2, coordinate_transformation_mode="half_pixel")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("bi", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    _refused(lab, lambda: lab.set_attribute("roi", "coordinate_transformation_mode", "bogus"),
             "output_half_pixel")
    _refused(lab, lambda: lab.set_attribute("roi", "mode", "min"), "'avg', 'max'")
    form = {row["name"]: row for row in attribute_form(lab.model, "roi")}
    assert form["mode"]["allowed"] == ["avg", "max"]


def test_a_number_for_an_input_the_spec_wants_one_d_is_a_one_element_list():
    # lab.add_node('logits', 'TopK', inputs=[5]) was refused by onnx ("K input must be a
    # one-dimensional tensor of size 1"); inputs=[[5]] had to be guessed
    lab = onnx_lab.open(build("convnet"))
    lab.add_node("logits", "TopK", inputs=[3])
    k = next(n for n in lab.model.graph if n.op_type == "TopK").inputs[1]
    assert list(k.const_value.numpy()) == [3] and k.const_value.numpy().dtype == np.int64
    # the model runs: the TopK picks 3 of 10
    assert run(lab.model, {"input": np.ones((1, 3, 32, 32), np.float32)})["logits"].shape[-1] == 3


def test_a_conversion_onnx_cannot_do_validly_says_so_not_to_pass_other_values():
    # torch's dynamo export writes ReduceMean with noop_with_empty_axes (opset 18+); onnx's
    # version converter keeps the attribute at opset 17, which onnxruntime refuses: the fix
    # said "pass values the op accepts ... verify=False keeps an edit"
    from onnx import numpy_helper

    g = helper.make_graph(
        [helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=0,
                          noop_with_empty_axes=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.int64), "axes")])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    with pytest.raises(LabError, match="does not run") as e:
        lab.convert_opset(17)
    assert "version_converter" in e.value.fix and "verify=False" not in e.value.fix
    assert len(lab.history) == 1
