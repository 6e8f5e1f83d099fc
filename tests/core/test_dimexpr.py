"""Dim expressions: the one evaluator (core/dimexpr.py) and every place dims are resolved."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from expr_models import DIMS, TOTAL, optimum_decoder, scaled_inputs
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.core.dimexpr import MAX_TEXT, dim_expression, dim_names, resolve_dim
from onnx_lab.core.shapes import dynamic_dims, expression_dims
from onnx_lab.errors import DimError
from onnx_lab.runtime.feeds import make_feeds


# ---------------------------------------------------------------------------- the evaluator
@pytest.mark.parametrize("text, dims, value", [
    (TOTAL, {"past_sequence_length": 4, "sequence_length": 3}, 7),
    ("2*seq", {"seq": 5}, 10),
    ("floor(height/32)", {"height": 100}, 3),
    ("ceil(width/32)", {"width": 100}, 4),
    ("ceiling(width/32)", {"width": 64}, 2),
    ("Floor(h / 2) + 1", {"h": 7}, 4),
    ("((s0 - 1)//2) + 1", {"s0": 9}, 5),
    ("s0 % 4", {"s0": 10}, 2),
    ("Mod(s0, 4) + FloorDiv(s0, 4)", {"s0": 10}, 4),
    ("max(1, s0 - 8)", {"s0": 3}, 1),
    ("Min(a, b, 16)", {"a": 20, "b": 30}, 16),
    ("-(-a)", {"a": 3}, 3),
    ("a - b", {"a": 3, "b": 3}, 0),
    ("seq/2", {"seq": 8}, 4),  # exact division: fine when it divides
    ("CeilToInt(s0/2)", {"s0": 5}, 3),
    ("12", {}, 12),
])
def test_expressions_evaluate_from_the_dims_given(text, dims, value):
    expr = dim_expression(text)
    assert expr is not None and set(expr.names) == set(dims)
    assert expr.evaluate(dims) == value
    assert resolve_dim(text, dims) == value


def test_names_come_in_the_order_written_and_functions_are_no_names():
    assert dim_expression(TOTAL).names == ("past_sequence_length", "sequence_length")
    assert dim_expression("max(b, floor(a/2))").names == ("b", "a")
    assert dim_names(TOTAL) == ("past_sequence_length", "sequence_length")
    assert dim_names("batch") == ("batch",) and dim_names(3) == () and dim_names(None) == ()


def test_plain_names_and_missing_names_stay_symbolic():
    assert dim_expression("batch") is None and dim_expression("unk__0") is None
    assert resolve_dim("batch", {}) == "batch" and resolve_dim("batch", {"batch": 2}) == 2
    assert dim_expression(TOTAL).evaluate({"sequence_length": 3}) is None
    assert resolve_dim(TOTAL, {"sequence_length": 3}) == TOTAL
    assert resolve_dim(4, {}) == 4 and resolve_dim(None, {}) is None
    # given by its own text, the value is taken as given
    assert resolve_dim(TOTAL, {TOTAL: 9}) == 9


@pytest.mark.parametrize("text, dims, message", [
    ("seq/2", {"seq": 3}, "3/2 with seq=3: not a whole number"),
    ("seq - 8", {"seq": 3}, "-5 with seq=3: a size cannot be negative"),
    ("a // (b - b)", {"a": 1, "b": 2}, "divides by zero"),
    ("a % 0", {"a": 1}, "divides by zero"),
    ("99999999999999999999 * a", {"a": 1}, "beyond"),
    ("a*a*a*a*a*a*a*a", {"a": 1 << 20}, "beyond"),
])
def test_bad_arithmetic_is_a_dim_error_naming_the_dim(text, dims, message):
    with pytest.raises(DimError, match=re.escape(message)):
        dim_expression(text).evaluate(dims)
    assert resolve_dim(text, dims) == text  # lenient: stays symbolic
    with pytest.raises(DimError):
        resolve_dim(text, dims, strict=True)


@pytest.mark.parametrize("text", [
    "__import__('os')", "__import__('os').system('touch /tmp/pwned')", "9**9**9", "2**64",
    "a" * 100000 + " + 1", "(a + b", "a + b)", "((a)", "a +", "lambda: 1", "a if b else c",
    "[a]", "{a}", "x.y + 1", "'a' + 1", "1.5 * a", "True + a", "a < b", "a and b",
    "floor(a, b)", "min(a)", "max(*a)", "floor(x=a)", "open('f')", "eval('1')",
    "getattr(a, 'b')", "a[0]", "f(a)", "a +\x00 b", "(" * 300 + "a" + ")" * 300,
    "+".join(["a"] * 200), "a+" * 40 + "a", "a; b", "a\nb", "batch size", "s0 s1", "", "-",
    "a" * (MAX_TEXT + 1),
])
def test_hostile_or_malformed_text_is_not_an_expression(text, tmp_path):
    marker = tmp_path / "pwned"
    assert dim_expression(text.replace("/tmp/pwned", str(marker))) is None
    assert not marker.exists()
    assert resolve_dim(text, {"a": 1, "b": 2, "x": 3}) == text
    assert dim_names(text) == ((text,) if text else ())


def test_a_huge_plain_name_is_just_a_name():
    name = "a" * 100000
    assert dim_expression(name) is None and dim_names(name) == (name,)
    assert resolve_dim(name, {name: 2}) == 2


# ---------------------------------------------------------------------------- open, tables
def test_optimum_decoder_opens_with_the_lengths_and_shows_evaluated_shapes():
    model = optimum_decoder()
    lab = onnx_lab.open(model, dims=DIMS)
    ins = dict(zip(lab.inputs["name"], lab.inputs["shape"]))
    outs = dict(zip(lab.outputs["name"], lab.outputs["shape"]))
    assert ins["attention_mask"] == (1, 7)
    assert ins["past_key_values.0.key"] == (1, 2, 4, 16)
    assert outs["present.1.value"] == (1, 2, 7, 16) and outs["logits"] == (1, 3, 64)
    assert not lab.inputs["dynamic"].any() and not lab.outputs["dynamic"].any()
    # The expression is no dim of its own: its names are.
    dyn = dynamic_dims(lab.model)
    assert TOTAL not in dyn and "attention_mask" in dyn["past_sequence_length"]
    assert "attention_mask" in dyn["sequence_length"]
    assert expression_dims(lab.model) == {TOTAL: ["attention_mask[1]"]}
    assert set(lab.summary()["dynamic_dims"]) == {"batch", "sequence_length",
                                                   "past_sequence_length"}
    # Without the lengths the expression shows as written.
    bare = onnx_lab.open(model, dims={"batch": 1})
    assert dict(zip(bare.inputs["name"], bare.inputs["shape"]))["attention_mask"] == (1, TOTAL)


def test_open_checks_expressions_against_the_dims_given():
    model = optimum_decoder()
    with pytest.raises(DimError, match=r"attention_mask\[1\]"):
        onnx_lab.open(scaled_negative(), dims={"seq": 3})
    # the expression's own text may be given when it agrees
    lab = onnx_lab.open(model, dims={**DIMS, TOTAL: 7})
    assert make_feeds(lab)["attention_mask"].shape == (1, 7)
    with pytest.raises(DimError, match="is 7 with the dims given"):
        onnx_lab.open(model, dims={**DIMS, TOTAL: 8})
    with pytest.raises(DimError, match="Unknown dim name 'past_length'"):
        onnx_lab.open(model, dims={"past_length": 4})


def scaled_negative() -> onnx.ModelProto:
    """attention_mask [1, seq - 8]: negative for seq < 8."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["attention_mask"], ["y"])], "neg",
        [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "seq - 8"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, "seq - 8"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_scaled_inputs_feed_run_and_cost():
    lab = onnx_lab.open(scaled_inputs(), dims={"batch": 2, "seq": 4, "height": 64,
                                               "width": 70})
    feeds = make_feeds(lab)
    assert feeds["x"].shape == (2, 8) and feeds["y"].shape == (2, 4)
    assert feeds["fm"].shape == (1, 4, 2, 3)  # floor(64/32), ceil(70/32)
    outs = dict(zip(lab.outputs["name"], lab.outputs["shape"]))
    assert outs == {"sum": (2, 8), "out": (1, 4, 2, 3)}
    from onnx_lab.runtime.session import make_session, run_session

    got = run_session(make_session(lab.model), feeds, ["sum", "out"], what="the model")
    np.testing.assert_allclose(got["sum"], feeds["x"] + np.concatenate([feeds["y"]] * 2, 1))
    assert got["out"].shape == (1, 4, 2, 3)
    c = lab.cost()
    rows = c.nodes.set_index("node_id")
    assert int(c.total["flops"]) > 0
    # Add of [2, 8]: 16 FLOPs, counted at the evaluated size
    assert int(rows.loc["add", "flops"]) == 16


def test_a_hostile_dim_in_a_model_stays_an_opaque_name():
    bad = "__import__('os').system('echo pwned')"
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [bad, "9**9**9"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [bad, "9**9**9"])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(model)
    assert set(dynamic_dims(lab.model)) == {bad, "9**9**9"}
    assert expression_dims(lab.model) == {}
    with pytest.raises(DimError, match=r"Unresolved dims"):
        make_feeds(lab)
    lab2 = onnx_lab.open(model, dims={bad: 2, "9**9**9": 3})
    assert make_feeds(lab2)["x"].shape == (2, 3)


def test_a_hyphenated_name_can_be_given_as_written():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "hyphen",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch-size", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch-size", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(model, dims={"batch-size": 2})
    assert make_feeds(lab)["x"].shape == (2, 4)
    assert dict(zip(lab.inputs["name"], lab.inputs["shape"]))["x"] == (2, 4)


def test_an_expression_of_constants_needs_no_dims():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "const",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["2*3", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["2*3", 4])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert dynamic_dims(lab.model) == {}
    assert make_feeds(lab)["x"].shape == (6, 4)
    assert dict(zip(lab.outputs["name"], lab.outputs["shape"]))["y"] == (6, 4)
