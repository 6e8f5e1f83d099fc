"""The run-context bar of a model with expression dims: the names are fields, the expression
shows its value as they are typed, and the profile runs with it."""

from __future__ import annotations

from expr_models import TOTAL, optimum_decoder

import onnx_lab
from onnx_lab.widgets.profiler import Profiler


def test_an_expression_is_no_field_and_shows_its_value():
    lab = onnx_lab.open(optimum_decoder(), dims={"batch": 1})
    p = Profiler(lab, runs=1, warmup=0)
    bar = p.context
    assert set(bar.dim_fields) == {"batch", "sequence_length", "past_sequence_length"}
    label = bar.expr_labels[TOTAL]
    assert label.value == f"{TOTAL} = ?"
    assert "attention_mask[1]" in label.tooltip
    p.run_profile()  # the lengths are missing: the bar asks for them, not the expression
    assert type(p.error).__name__ == "DimError"
    assert set(bar.missing) == {"sequence_length", "past_sequence_length"}
    bar.set_dims({"past_sequence_length": 4, "sequence_length": 3})
    assert label.value == f"{TOTAL} = 7"
    p.run_profile()
    assert p.error is None and p.profile_result is not None
    assert lab.dims == {"batch": 1, "past_sequence_length": 4, "sequence_length": 3}
    bar.dim_fields["sequence_length"].value = ""
    assert label.value == f"{TOTAL} = ?"


def test_a_value_the_expression_cannot_take_is_shown_not_raised():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "minus",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq - 4"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq - 4"])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    p = Profiler(lab, runs=1, warmup=0)
    bar = p.context
    assert set(bar.dim_fields) == {"seq"}
    bar.set_dims({"seq": 2})
    assert bar.expr_labels["seq - 4"].value.startswith("seq - 4 = ? (")
    assert "cannot be negative" in bar.expr_labels["seq - 4"].value
    p.run_profile()
    assert type(p.error).__name__ == "DimError" and "cannot be negative" in str(p.error)
    bar.set_dims({"seq": 6})
    assert bar.expr_labels["seq - 4"].value == "seq - 4 = 2"
    p.run_profile()
    assert p.error is None and p.profile_result is not None
