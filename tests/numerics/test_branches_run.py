"""A step that changes a branch of an If whose condition the model computes (torch.cond on a
data predicate) is only checked when a sample takes that branch: a branch no sample took is
named in the report's ``unexercised`` instead of passing unseen."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def _cond_model() -> onnx.ModelProto:
    """y = If(sum(x) > 1000, then: cos(x) * 2, else: x + 1): random feeds take the else."""
    then = helper.make_graph(
        [helper.make_node("Cos", ["x"], ["c"], name="then_cos"),
         helper.make_node("Mul", ["c", "two"], ["t"], name="then_mul")], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Add", ["x", "one"], ["e"], name="else_add")],
                              "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT,
                                                                         [4])])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "limit"], ["big"], name="gt"),
         helper.make_node("If", ["big"], ["y"], name="cond", then_branch=then,
                          else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(1000, np.float32), "limit"),
         numpy_helper.from_array(np.array(2, np.float32), "two"),
         numpy_helper.from_array(np.array(1, np.float32), "one")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_change_in_a_branch_no_sample_took_is_named():
    lab = onnx_lab.open(_cond_model())
    r = lab.remove_node("then_cos")
    assert r.modified
    line = r.verification.attrs["unexercised"]
    assert len(line) == 1 and line[0].startswith(
        "then_branch of If 'cond', which the step changed: its condition 'big' was False on "
        "every sample")
    assert any("not exercised by the feeds" in n for n in r.notes)
    # fed a sample that takes it, the change is seen
    lab.undo()
    r = lab.remove_node("then_cos", verify={"feeds": {"x": np.full(4, 500, np.float32)}})
    assert r.verification.attrs["unexercised"] == []
    assert r.outputs_changed is True


def test_a_change_in_the_branch_the_samples_take_is_not_flagged():
    lab = onnx_lab.open(_cond_model())
    r = lab.scale_initializer("one", 2.0)  # read by the else branch, which samples take
    assert r.outputs_changed is True
    assert r.verification.attrs["unexercised"] == []


def test_compare_names_a_differing_branch_no_sample_took():
    # two models whose then branches differ passed compare with nothing said: the seeded
    # feeds never take it
    ref = _cond_model()
    cand = _cond_model()
    then = next(a.g for a in cand.graph.node[2].attribute if a.name == "then_branch")
    then.node[1].op_type = "Add"  # cos(x) + 2 instead of cos(x) * 2
    c = onnx_lab.compare(ref, cand, progress=False)
    assert c.passed
    assert c.unexercised == ["then_branch of If 'cond', which differs from the reference's: "
                             "its condition 'big' was False on every sample (give feeds that "
                             "take it)"]
    assert "not exercised by the feeds" in c.summary_text()
    taken = onnx_lab.compare(ref, cand, feeds={"x": np.full(4, 500, np.float32)},
                             progress=False)
    assert not taken.passed and taken.unexercised == []
    # identical branches are not named
    assert onnx_lab.compare(ref, _cond_model(), progress=False).unexercised == []


def _loop_model(k: float) -> onnx.ModelProto:
    """y = x, then Loop n = ceil(relu(max(x) - 10)) times: y = y + k (random feeds: 0 times)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"),
         helper.make_node("Add", ["y_in", "k"], ["y_out"], name="body_add")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(k, np.float32), "k")])
    g = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["m"], name="max", keepdims=0),
         helper.make_node("Sub", ["m", "ten"], ["d"], name="sub"),
         helper.make_node("Relu", ["d"], ["r"], name="relu"),
         helper.make_node("Ceil", ["r"], ["cf"], name="ceil"),
         helper.make_node("Cast", ["cf"], ["n"], name="count", to=TensorProto.INT64),
         helper.make_node("Loop", ["n", "yes", "x"], ["y"], name="loop", body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(10, np.float32), "ten"),
         numpy_helper.from_array(np.array(True), "yes")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loop_that_ran_zero_times_is_named_in_compare_and_in_a_step():
    # a weight planted in the body of a Loop whose trip count the data sets (0 on the seeded
    # feeds) passed compare and a verified step with nothing said
    c = onnx_lab.compare(_loop_model(1.0), _loop_model(-3.5), progress=False)
    assert c.passed and c.unexercised == [
        "body of Loop 'loop', which differs from the reference's: it ran 0 times, its trip "
        "count 'n' was 0 on every sample (give feeds that run it)"]
    big = {"x": np.full(4, 12.0, np.float32)}
    assert not onnx_lab.compare(_loop_model(1.0), _loop_model(-3.5), feeds=big,
                                progress=False).passed
    lab = onnx_lab.open(_loop_model(1.0))
    r = lab.scale_initializer("k", -3.5)
    assert r.verification.attrs["unexercised"] == [
        "body of Loop 'loop', which the step changed: it ran 0 times, its trip count 'n' was 0 "
        "on every sample (give feeds that run it: verify={'feeds': ...})"]
    lab.undo()
    r = lab.scale_initializer("k", -3.5, verify={"feeds": big})
    assert r.verification.attrs["unexercised"] == [] and r.outputs_changed is True


def test_a_step_that_left_the_branch_alone_is_not_said_to_differ_there():
    # every onnx_lab step stamps its provenance on the nodes it walks: a branch no sample ran
    # was "differs from the reference's" after any step (retina, frcnn and mrcnn after safe,
    # whose batched NMS branch is one empty Constant)
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["e"], name="c_then",
                          value=helper.make_tensor("v", TensorProto.INT64, [0], []))],
        "then", [], [helper.make_tensor_value_info("e", TensorProto.INT64, [None])])
    other = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["am"], name="am", keepdims=1)], "else", [],
        [helper.make_tensor_value_info("am", TensorProto.INT64, [None])])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="rs", keepdims=0),
         helper.make_node("Greater", ["s", "limit"], ["cond"], name="gt"),
         helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then,
                          else_branch=other),
         helper.make_node("Identity", ["x"], ["xi"], name="idn"),
         helper.make_node("Relu", ["xi"], ["z"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(1e9, np.float32), "limit")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(m)
    lab.apply_preset("safe")
    assert len(lab.history) > 1
    c = onnx_lab.compare(m, lab, progress=False)
    assert c.passed and c.unexercised == [], c.unexercised
