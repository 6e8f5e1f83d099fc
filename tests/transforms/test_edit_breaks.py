"""An edit that breaks the model is a failed step, not "an expected change"; a reconnection
that the Lab's dims show to change a shape is refused before it is made."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.errors import PassError


def _transposes() -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0], name="T"),
         helper.make_node("Relu", ["xt"], ["r"], name="R"),
         helper.make_node("Transpose", ["r"], ["rt"], perm=[1, 0], name="T2"),
         helper.make_node("Add", ["x", "rt"], ["y"], name="A")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_reconnection_the_dims_show_to_change_the_shape_is_refused():
    lab = onnx_lab.open(_transposes(), dims={"a": 2, "b": 3})
    assert lab.removal_plan("T2")["problem"] == (
        "its input 'r' has shape [3, 2] and its output 'rt' [2, 3]")
    n = len(lab.version_history)
    with pytest.raises(PassError, match=r"Cannot remove T2 \(reconnect\)"):
        lab.remove_node("T2")
    assert len(lab.version_history) == n


def _bias(width: int) -> onnx.ModelProto:
    """y = x + c with x [a, b]: a bias of another width passes ONNX's inference (b is a
    symbol) and fails in onnxruntime."""
    c = helper.make_node("Constant", [], ["c"], name="c",
                         value=numpy_helper.from_array(np.ones(width, np.float32)))
    g = helper.make_graph([c, helper.make_node("Add", ["x", "c"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_edit_after_which_the_model_does_not_run_is_refused(tmp_path, capsys):
    # it was "outputs changed (expected for this edit): max_abs inf", verify_passed None, and
    # onnx-lab edit exited 0 writing a model onnxruntime cannot run; then it was kept as a
    # failed step, after which every edit was refused ("the model before it does not run")
    lab = onnx_lab.open(_bias(3), dims={"a": 2, "b": 3})
    with pytest.raises(PassError, match=r"set_attribute refused: the edited model does not "
                       r"run: onnxruntime failed to run the model: .*Add") as e:
        lab.set_attribute("c", "value", np.ones(2, np.float32))
    assert "The model is unchanged" in e.value.fix and "verify=False" in e.value.fix
    assert lab.version_history.current == 0 and len(lab.version_history) == 1
    r = lab.rename_node("c", "c2")  # the next edit runs against the unchanged model
    assert r.verify_passed is True
    # verify=False keeps it, unrun, when the user wants it
    assert lab.set_attribute("c2", "value", np.ones(2, np.float32), verify=False).modified
    src = tmp_path / "t.onnx"
    onnx.save(_transposes(), src)  # T2 made a no-op: Add of [2, 3] and [3, 2]
    code = main(["edit", str(src), str(tmp_path / "o.onnx"), "--dims", "a=2", "--dims", "b=3",
                 "--set-attr", "T2:perm=[0,1]"])
    err = capsys.readouterr().err
    assert code == 2 and "the edited model does not run" in err
    assert not (tmp_path / "o.onnx").exists()
    # the CLI refuses the reconnection the dims show to be wrong, one line, exit 2
    src = tmp_path / "t.onnx"
    onnx.save(_transposes(), src)
    code = main(["edit", str(src), str(tmp_path / "out.onnx"), "--dims", "a=2", "--dims", "b=3",
                 "--remove", "T2"])
    err = capsys.readouterr().err
    assert code == 2 and "Cannot remove T2 (reconnect)" in err
    assert not (tmp_path / "out.onnx").exists()


def _dense() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(np.full(3, 0.5, np.float32), "bias")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_add_node_takes_a_tensor_name_and_refuses_a_ragged_constant():
    lab = onnx_lab.open(_dense())
    r = lab.add_node("h", "Add", inputs=["bias"])  # the model's own weight, by name
    assert r.modified and r.outputs_changed is True
    add = lab.nodes.set_index("op_type").loc["Add"]
    assert "bias" in list(add["inputs"])
    with pytest.raises(PassError, match="is not an array"):
        onnx_lab.open(_dense()).add_node("h", "Add", inputs=[[1.0, [2]]])


def test_an_integer_attribute_past_int64_is_refused():
    lab = onnx_lab.open(_transposes(), dims={"a": 2, "b": 3})
    with pytest.raises(PassError, match=r"expected a list of integers \(int64\)"):
        lab.set_attribute("T", "perm", [1, 2**70])


def _unnamed() -> onnx.ModelProto:
    """An input of an unnamed batch dim, as skl2onnx writes: opened with shapes=."""
    g = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"], name="relu")], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_renamed_input_keeps_the_shape_the_lab_was_given():
    # the shapes were keyed by the old name: a DimError about the new one, and after a
    # verify=False rename every later verified step failed the same way
    lab = onnx_lab.open(_unnamed(), shapes={"X": [2, 4]})
    r = lab.rename_tensor("X", "features")
    assert r.verify_passed and lab.shapes == {"features": [2, 4]}
    lab.undo()
    assert lab.shapes == {"X": [2, 4]}


@pytest.mark.parametrize("new", [[3, 4], [0, 4]])
def test_set_input_shape_to_other_sizes_than_the_lab_was_given(new):
    # a DimError about the Lab's own [2, 4] (3), or "the new model does not run" (0: it was fed
    # [2, 4])
    lab = onnx_lab.open(_unnamed(), shapes={"X": [2, 4]})
    r = lab.set_input_shape("X", new)
    assert r.verify_passed is True, r.notes
    assert lab.inputs.set_index("name").loc["X", "shape"] == tuple(new)


def test_a_cascade_that_would_remove_a_body_output_is_refused_in_the_plan():
    # the plan said no problem, then remove_node_cascade failed with onnx's checker text
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
         helper.make_node("Add", ["acc", "x"], ["acc_new"], name="loop_add"),
         helper.make_node("Relu", ["acc_new"], ["scan_out"], name="body_relu")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_new", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["acc_last", "scans"], name="loop",
                          body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("acc_last", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scans", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    nid = next(n for n in lab.nodes.node_id if n.endswith("loop_add"))
    plan = lab.removal_plan(nid, mode="cascade")
    assert "removes output(s) ['acc_new', 'scan_out'] of the body" in plan["problem"]
    with pytest.raises(PassError, match="of the body"):
        lab.remove_node_cascade(nid)


def test_nan_and_float32_limits_are_refused_where_they_mean_nothing_only():
    # NaN in LayerNormalization's epsilon is refused; sklearn's SimpleImputer exports
    # Imputer(replaced_value_float=NaN), LabelEncoder matches NaN keys, and Clip's max of
    # float32's largest number is what float32 stores
    import math

    g = helper.make_graph(
        [helper.make_node("Imputer", ["x"], ["i"], domain="ai.onnx.ml", name="imp",
                          imputed_value_floats=[0.0], replaced_value_float=0.0),
         helper.make_node("Clip", ["i"], ["y"], name="clip", min=-1.0, max=1.0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 6), helper.make_opsetid("ai.onnx.ml", 1)]))
    r = lab.set_attribute("imp", "replaced_value_float", float("nan"), verify=False)
    assert r.modified and math.isnan(lab.index.node("imp").attributes[
        "replaced_value_float"].value)
    assert lab.set_attribute("clip", "max", 3.4028235e38, verify=False).modified
    with pytest.raises(PassError, match="cannot be NaN"):
        lab.set_attribute("clip", "max", float("nan"), verify=False)
    with pytest.raises(PassError, match="does not fit the float32"):
        lab.set_attribute("clip", "max", 1e39, verify=False)


def test_an_edit_of_the_inputs_that_the_given_feeds_do_not_fit_is_kept_as_a_failed_step():
    # the refusal is for an edit that breaks the model; feeds the user gave for the old
    # inputs may be what does not fit the new ones
    lab = onnx_lab.open(_bias(3), dims={"a": 2, "b": 3})
    feeds = {"x": np.ones((2, 3), np.float32)}
    r = lab.set_input_shape("x", [4, 3], verify={"feeds": feeds})
    assert r.modified and r.verify_passed is False and lab.version_history.current == 1


def test_a_dim_an_edit_names_anew_takes_the_size_the_input_had_there():
    # set_input_shape(x, [batch, tokens, 32]) where x said seq (sized 5): "Unresolved dims:
    # 'tokens'", a fix the Editor has no field for
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 5})
    r = lab.set_input_shape("x", ["batch", "tokens", 32])
    assert r.modified and r.verify_passed is True
    assert lab.dims["tokens"] == 5
    assert [getattr(d, "value", d) for d in lab.model.graph.inputs[0].shape] == [
        "batch", "tokens", 32]


def test_fixes_point_the_right_way_for_an_old_clip_and_a_file_that_is_no_npy(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                          [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]))
    # it said "Give the extra inputs as inputs=[...]", which is what was done
    with pytest.raises(PassError, match=r"takes its other values as attributes: max, min"):
        lab.add_node("y", "Clip", None, [0.0, 6.0])
    data = tmp_path / "model.onnx.data"
    data.write_bytes(b"\x00" * 64)  # a model's data file, not a .npy
    with pytest.raises(onnx_lab.errors.InputError) as e:
        lab.replace_initializer("w", str(data))
    assert "not a .npy or .npz file" in e.value.fix and "astype(str)" not in e.value.fix
