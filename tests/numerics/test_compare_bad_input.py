"""Bad input to compare(): mismatched models, unloadable candidates, bad parameters."""

from __future__ import annotations

import pytest
from numerics_helpers import make_model, vi
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import InputError, ModelLoadError, RuntimeLoadError


def _neg(input_name="x", dtype=TensorProto.FLOAT, shape=(2, 3)):
    return make_model([helper.make_node("Neg", [input_name], ["y"], name="neg")],
                      [vi(input_name, list(shape), dtype)], [vi("y", list(shape), dtype)])


def test_inputs_differ_in_name_dtype_rank():
    with pytest.raises(InputError, match=r"differ in name.*\['x'\].*\['z'\]"):
        onnx_lab.compare(_neg("x"), _neg("z"))
    with pytest.raises(InputError, match="'x' is float32 in the reference and float64"):
        onnx_lab.compare(_neg(), _neg(dtype=TensorProto.DOUBLE))
    with pytest.raises(InputError, match="rank 2 .* rank 3"):
        onnx_lab.compare(_neg(), _neg(shape=(1, 2, 3)))


def test_a_merged_decoder_against_a_plain_one_gets_advice_it_can_follow():
    # compare(merged, plain) advised renaming use_cache_branch, which the plain one lacks
    import sys
    from pathlib import Path

    import numpy as np
    import onnx

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from llm_models import merged_kv_decoder

    merged = merged_kv_decoder()
    plain = onnx.ModelProto()
    plain.CopyFrom(merged)
    plain.graph.input.remove(next(i for i in plain.graph.input if i.name == "use_cache_branch"))
    plain.graph.initializer.append(onnx.numpy_helper.from_array(np.array([True]),
                                                                "use_cache_branch"))
    for a, b, side in ((merged, plain, "reference"), (plain, merged, "candidate")):
        with pytest.raises(InputError) as e:
            onnx_lab.compare(a, b, progress=False)
        assert f"the {side}'s 'use_cache_branch' decides its If branches" in e.value.problem
        assert "rename" not in e.value.fix.lower() and "same layout" in e.value.fix
    with pytest.raises(InputError) as e:  # an input only one side has, not a switch
        onnx_lab.compare(make_model([helper.make_node("Add", ["x", "z"], ["y"], name="add")],
                                    [vi("x", [2, 3]), vi("z", [2, 3])], [vi("y", [2, 3])]),
                         _neg())
    assert "another model" in e.value.fix


def test_candidate_onnxruntime_cannot_load_names_op_and_domain():
    bad = make_model([helper.make_node("FancyOp", ["x"], ["y"], name="fancy",
                                       domain="my.domain")],
                     [vi("x", [2, 3])], [vi("y", [2, 3])],
                     extra_opsets=[helper.make_opsetid("my.domain", 1)])
    with pytest.raises(RuntimeLoadError, match="candidate model") as e:
        onnx_lab.compare(_neg(), bad)
    msg = str(e.value)
    assert "FancyOp" in msg and "my.domain" in msg and "'fancy'" in msg


def test_bad_parameters_and_sources(tmp_path):
    with pytest.raises(InputError, match="atol"):
        onnx_lab.compare(_neg(), _neg(), atol=-1)
    with pytest.raises(InputError, match="max_bytes"):
        onnx_lab.compare(_neg(), _neg(), max_bytes=0)
    with pytest.raises(ModelLoadError, match="reference: Model file"):
        onnx_lab.compare(str(tmp_path / "missing.onnx"), _neg())
    with pytest.raises(ModelLoadError, match="candidate"):
        onnx_lab.compare(_neg(), str(tmp_path / "missing.onnx"))


def test_outputs_differ():
    other = make_model([helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])],
                       [vi("x", [2, 3])], [vi("a", [2, 3]), vi("b", [2, 3])])
    with pytest.raises(InputError, match="does not give the reference's output"):
        onnx_lab.compare(_neg(), other)


def test_a_reference_output_the_candidate_lost_is_refused_not_passed():
    # [y, z] against [y] or [y, w, v] compared y alone and passed: z was never compared
    ref = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])],
                     [vi("x", [4])], [vi("y", [4]), vi("z", [4])])
    lost = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])])
    more = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Abs", ["x"], ["w"]),
                       helper.make_node("Exp", ["x"], ["v"])],
                      [vi("x", [4])], [vi("y", [4]), vi("w", [4]), vi("v", [4])])
    for cand in (lost, more):
        with pytest.raises(InputError, match=r"output\(s\) \['z'\]") as e:
            onnx_lab.compare(ref, cand)
        assert "extract(outputs=" in e.value.fix
    # a candidate giving more than the reference's outputs compares those
    assert onnx_lab.compare(lost, ref).passed


def test_inputs_fixed_to_other_sizes_are_named_as_such():
    # tf2onnx's --inputs-as-nchw export against the NHWC one: "give dims that match the
    # candidate's fixed shapes" could not be done
    nhwc = _neg(shape=("n", 8, 8, 3))
    nchw = _neg(shape=("batch", 3, 8, 8))
    with pytest.raises(InputError, match=r"fixed to \['n', 8, 8, 3\].*\['batch', 3, 8, 8\] in the candidate: "
                       r"no input fits both \(another layout\)") as e:
        onnx_lab.compare(nhwc, nchw, dims={"n": 1, "batch": 1})
    assert "dims" not in e.value.fix


def test_an_output_of_another_shape_or_kind_of_dtype_fails():
    # [2, 3] against [3, 2] was compared flattened and passed; a float32 output become int32
    # was compared as float64 and passed: an interface change either way
    import onnx

    h = '<ir_version: 8, opset_import: ["" : 17]>'
    ref = onnx.parser.parse_model(f"{h} g (float[2,3] x) => (float[2,3] y) {{ y = Relu(x) }}")
    other = onnx.parser.parse_model(
        f"{h} g (float[2,3] x) => (float[3,2] y) {{ r = Relu(x) "
        "s = Constant<value=int64[2] {3,2}>() y = Reshape(r, s) }")
    c = onnx_lab.compare(ref, other, progress=False)
    assert not c.passed and "shape is [3, 2] instead of [2, 3]" in c.outputs["note"][0]
    # dims of 1 added or dropped are the same interface
    flat = onnx.parser.parse_model(
        f"{h} g (float[2,3] x) => (float[1,2,3] y) {{ r = Relu(x) "
        "s = Constant<value=int64[3] {1,2,3}>() y = Reshape(r, s) }")
    assert onnx_lab.compare(ref, flat, progress=False).passed
    floor = onnx.parser.parse_model(
        f"{h} g (float[6] x) => (float[6] y) {{ s = Constant<value=float {{1000.0}}>() "
        "m = Mul(x, s) y = Floor(m) }")
    cast = onnx.parser.parse_model(
        f"{h} g (float[6] x) => (int32[6] y) {{ s = Constant<value=float {{1000.0}}>() "
        "m = Mul(x, s) f = Floor(m) y = Cast<to=6>(f) }")
    c = onnx_lab.compare(floor, cast, progress=False)
    assert not c.passed and "dtype is int32 instead of float32" in c.outputs["note"][0]
    # a float16 output (a conversion without float32 I/O) is the same kind
    half = onnx.parser.parse_model(
        f"{h} g (float[2,3] x) => (float16[2,3] y) {{ r = Relu(x) y = Cast<to=10>(r) }}")
    assert onnx_lab.compare(ref, half, progress=False).passed


def test_inputs_the_seeded_feeds_hold_at_one_value_are_named():
    # a candidate that ignores its attention mask passed with nothing said: the seeded mask
    # is all ones
    import numpy as np
    import onnx

    h = '<ir_version: 8, opset_import: ["" : 17]>'
    ref = onnx.parser.parse_model(
        f"{h} g (float[2,4] x, int64[2,4] attention_mask) => (float[2,4] y) "
        "{ m = Cast<to=1>(attention_mask) y = Mul(x, m) }")
    ignores = onnx.parser.parse_model(
        f"{h} g (float[2,4] x, int64[2,4] attention_mask) => (float[2,4] y) "
        "{ y = Identity(x) }")
    c = onnx_lab.compare(ref, ignores, progress=False)
    assert c.passed
    assert any("hold 'attention_mask' (all 1) at one value" in n for n in c.feeds_notes)
    assert "attention_mask" in c.summary_text()
    # feeds given by the user: their values are theirs, nothing said
    feeds = {"x": np.ones((2, 4), np.float32), "attention_mask": np.ones((2, 4), np.int64)}
    assert not onnx_lab.compare(ref, ignores, feeds=feeds, progress=False).feeds_notes


def test_inputs_a_tool_left_unread_are_named_with_advice_that_fits():
    # onnxruntime's saved optimized model of an IR version 3 file (its initializers listed as
    # graph inputs too: the light AlexNet, SqueezeNet, ResNet-50... of onnx's test data) folds
    # the ConstantOfShape that read a weight, drops the weight and keeps its input, which
    # onnxruntime then asks for. The refusal advised renaming, with nothing to rename to.
    import numpy as np
    import onnx

    shape = onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "b__SHAPE")
    ref = helper.make_model(helper.make_graph(
        [helper.make_node("ConstantOfShape", ["b__SHAPE"], ["b"], name="fill",
                          value=onnx.numpy_helper.from_array(np.array([0.5], np.float32))),
         helper.make_node("Add", ["x", "b"], ["y"], name="add")],
        "ref", [vi("x", [2, 3]), vi("b__SHAPE", [2], TensorProto.INT64)], [vi("y", [2, 3])],
        [shape]), opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    cand = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add")],
        "cand", [vi("x", [2, 3]), vi("b__SHAPE", [2], TensorProto.INT64)], [vi("y", [2, 3])],
        [onnx.numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "b")]),
        opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    with pytest.raises(InputError) as e:
        onnx_lab.compare(ref, cand, progress=False)
    assert "The candidate takes inputs the reference does not: ['b__SHAPE']" in e.value.problem
    assert "No node of the candidate reads them" in e.value.problem
    assert "the reference holds them as weights (an IR version 3" in e.value.problem
    assert "rename" not in str(e.value).lower() and "Remove them" in e.value.fix
    # renaming is advised where both sides have names to rename
    with pytest.raises(InputError) as e:
        onnx_lab.compare(_neg("x"), _neg("z"))
    assert "lab.rename_tensor" in e.value.fix
