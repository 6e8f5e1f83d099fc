"""Tool steps on a model with expression dims (optimum's ``past_sequence_length +
sequence_length``): the tools get every input shape, verification sizes the inputs by the
Lab's dims, and a tool that fixed other sizes is told apart."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxsim
import pytest
from expr_models import DIMS, optimum_decoder

import onnx_lab
from onnx_lab.core.shapes import shape_tuple
from onnx_lab.errors import DimError
from onnx_lab.numerics.verify import report_of, verify
from onnx_lab.runtime.feeds import make_feeds


def _static(past: int) -> onnx.ModelProto:
    shapes = {"input_ids": [1, 3], "position_ids": [1, 3], "attention_mask": [1, past + 3]}
    for i in range(2):
        for k in ("key", "value"):
            shapes[f"past_key_values.{i}.{k}"] = [1, 2, past, 16]
    out, ok = onnxsim.simplify(optimum_decoder(), overwrite_input_shapes=shapes)
    assert ok
    return out


@pytest.mark.parametrize("tool", ["onnxsim", "onnxslim"])
def test_tools_run_with_every_input_shape_and_verify(tool):
    lab = onnx_lab.open(optimum_decoder(), dims=DIMS)
    r = lab.apply(tool)
    assert r.modified and r.verify_passed, r.verification
    shapes = {v.name: shape_tuple(v.shape) for v in lab.model.graph.inputs}
    assert shapes["attention_mask"] == (1, 7)  # the expression was evaluated for the tool
    assert shapes["past_key_values.0.key"] == (1, 2, 4, 16)
    outs = r.verification.set_index("tensor")
    assert list(outs.loc["present.1.key", "shape"]) == [1, 2, 7, 16]
    assert outs.loc["logits", "passed"]
    # The static result compares with the original, both ways.
    assert lab.compare().passed
    assert onnx_lab.compare(lab.original, lab).passed


def test_the_tool_gets_the_mask_shape():
    lab = onnx_lab.open(optimum_decoder(), dims=DIMS)
    r = lab.apply("onnxsim")
    assert any("'attention_mask': [1, 7]" in n for n in r.notes), r.notes


def test_fix_dims_evaluates_the_expression_once_its_names_are_fixed():
    lab = onnx_lab.open(optimum_decoder(), dims=DIMS)
    r = lab.fix_dims({"past_sequence_length": 4})
    assert r.modified and r.verify_passed
    mask = next(v for v in lab.model.graph.inputs if v.name == "attention_mask")
    assert shape_tuple(mask.shape) == ("batch", "4 + sequence_length")  # the rest stays open
    assert lab.dims == {"batch": 1, "sequence_length": 3}  # past_sequence_length is no dim
    assert make_feeds(lab)["attention_mask"].shape == (1, 7)
    r = lab.fix_dims({"sequence_length": 3})
    mask = next(v for v in lab.model.graph.inputs if v.name == "attention_mask")
    assert r.verify_passed and shape_tuple(mask.shape) == ("batch", 7)
    present = next(v for v in lab.model.graph.outputs if v.name == "present.0.value")
    assert shape_tuple(present.shape) == ("batch", 2, 7, 16)
    # fix_dims to other sizes than the Lab's dims is what the user asked for: verified there
    other = onnx_lab.open(optimum_decoder(), dims=DIMS)
    r = other.fix_dims({"past_sequence_length": 5, "sequence_length": 2})
    assert r.verify_passed
    assert list(r.verification.set_index("tensor").loc["present.0.key", "shape"]) == \
        [1, 2, 7, 16]


def test_a_step_that_fixed_other_sizes_than_the_dims_is_a_dim_error():
    ref = onnx_lab.open(optimum_decoder(), dims=DIMS).model
    wrong = onnx_lab.open(_static(past=5)).model  # fixed for past 5, the Lab says 4
    with pytest.raises(DimError, match=r"input 'attention_mask' is \[1, 8\].*give it \[1, 7\]"):
        report_of(ref, wrong, dims=DIMS, reference_shapes=True)
    right = onnx_lab.open(_static(past=4)).model
    rep = report_of(ref, right, dims=DIMS, reference_shapes=True)
    assert rep.attrs["passed"]
    # The candidate's own shapes lead without reference_shapes (fix_dims): past 5 runs.
    rep = report_of(ref, wrong, dims=DIMS)
    assert rep.attrs["passed"]
    frame = verify(ref, right, dims=DIMS, reference_shapes=True)
    assert frame.attrs["passed"]
    with pytest.raises(DimError, match="fixed the input shapes to other sizes"):
        verify(ref, wrong, dims=DIMS, reference_shapes=True)


def _sequence_input_model() -> onnx.ModelProto:
    """A sequence input whose element dim is named (onnx's sequence_map cases)."""
    from onnx import TensorProto, helper

    seq = helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, ["N"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
    g = helper.make_graph([helper.make_node("SequenceAt", ["x", "i"], ["a"]),
                           helper.make_node("Identity", ["a"], ["y"])], "g", [seq], [out],
                          initializer=[helper.make_tensor("i", TensorProto.INT64, [], [0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_sequence_input_is_not_given_a_tensor_shape():
    # The element's dim (N) used to be handed to onnxsim as the input's shape, which wrote a
    # tensor type over the sequence type: "Field 'elem_type' of 'type' is required but missing".
    lab = onnx_lab.open(_sequence_input_model(), dims={"N": 3})
    r = lab.apply("onnxsim", verify=False)
    assert not any("input shapes" in n for n in r.notes), r.notes
    x = next(v for v in lab.model.graph.inputs if v.name == "x")
    assert x.type is not None and not isinstance(x.type, ir.TensorType)
