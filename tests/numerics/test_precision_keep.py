"""keep= / --keep for the fp16, bf16 and int8 searches; a candidate that fails to run is a failed
trial (its nodes kept); nodes the converters cannot reach are said before any trial."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.errors import InputError
from onnx_lab.numerics.precision import find_precision


def mlp():
    """x -> MatMul -> Relu -> MatMul -> Softmax: converts cleanly with a loose tolerance."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((32, 8)) * 0.3).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="/fc1/MatMul"),
             helper.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
             helper.make_node("MatMul", ["r", "w2"], ["z"], name="/fc2/MatMul"),
             helper.make_node("Softmax", ["z"], ["y"], name="/out/Softmax", axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TP.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_keep_stays_float32_in_every_trial(target):
    plan = find_precision(mlp(), target, atol=0.05, rtol=0.05, keep=["/fc2/MatMul"])
    assert plan.passed
    assert "/fc2/MatMul" in plan.kept and plan.forced == ["/fc2/MatMul"]
    assert all("/fc2/MatMul" in k for k in plan.trials["kept"])
    assert "(1 by keep=)" in plan.summary_text()
    if target == "fp16":  # the kept MatMul computes in float32, the other in float16
        w = {n.name: n.inputs[1].producer() or n.inputs[1] for n in plan.model.graph
             if n.op_type == "MatMul"}
        assert w["/fc2/MatMul"].dtype == ir.DataType.FLOAT  # its weight, as it was
        assert w["/fc1/MatMul"].dtype != ir.DataType.FLOAT
    # without keep the same tolerance keeps nothing: keep is what kept it
    free = find_precision(mlp(), target, atol=0.05, rtol=0.05)
    assert free.kept == [] and free.forced == []


def test_keep_int8_excludes_the_node():
    feeds = [{"x": np.random.default_rng(i).standard_normal((4, 16)).astype(np.float32)}
             for i in range(4)]
    plan = find_precision(mlp(), "int8", feeds, metric="sqnr", tolerance=5.0,
                          keep=["/fc1/MatMul"], confirm=False)
    assert plan.passed and plan.kept[0] == "/fc1/MatMul"
    g = plan.model.graph
    fc1 = next(n for n in g if n.name == "/fc1/MatMul")
    # excluded: its inputs are not dequantized tensors
    assert all(v.producer() is None or v.producer().op_type != "DequantizeLinear"
               for v in fc1.inputs)
    fc2 = next(n for n in g if n.name == "/fc2/MatMul")
    assert any(v.producer() is not None and v.producer().op_type == "DequantizeLinear"
               for v in fc2.inputs)


def test_keep_unknown_node_names_close_matches():
    with pytest.raises(InputError) as e:
        find_precision(mlp(), "fp16", keep=["/fc2/MatMu"])
    assert "/fc2/MatMul" in str(e.value) and "/fc2/MatMu'" in str(e.value)
    with pytest.raises(InputError):
        find_precision(mlp(), "fp16", keep=[3])


def test_keep_through_the_lab_and_the_step():
    lab = onnx_lab.open(mlp())
    plan = lab.find_precision("fp16", atol=0.05, rtol=0.05, keep=["/act/Relu"])
    assert "/act/Relu" in plan.kept
    assert lab.history.iloc[-1]["params"]["kept"] == plan.kept


def gather_from_quantized():
    """T5's relative-attention bias in small: a Gather whose indices are computed from float
    values (Add -> Cast). int8 quantizes the Add's output with an asymmetric range whose top
    step lands past 8: the candidate's Gather runs out of bounds (idx=8 of 8 rows)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.zeros((1, 2), np.float32), "zero"),
             numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "table"),
             numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w")]
    nodes = [helper.make_node("Add", ["x", "zero"], ["f"], name="/pos/Add"),
             helper.make_node("Cast", ["f"], ["idx"], name="/pos/Cast", to=TP.INT64),
             helper.make_node("Gather", ["table", "idx"], ["e"], name="/bias/Gather", axis=0),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="/out/MatMul")]
    g = helper.make_graph(nodes, "t5_bias", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


T5_FEEDS = [{"x": np.array([[-1.0, 7.99]], np.float32)}]


def test_a_candidate_that_fails_to_run_is_a_failed_trial():
    plan = find_precision(gather_from_quantized(), "int8", T5_FEEDS, confirm=False)
    t = plan.trials
    assert t.loc[0, "phase"] == "full" and not t.loc[0, "passed"]
    assert t.loc[0, "note"].startswith("candidate failed to run")
    assert "/bias/Gather" in t.loc[0, "note"] and t.loc[0, "score"] == np.inf
    # the search went on and kept the Add whose quantized output breaks the indices
    assert plan.passed and "/pos/Add" in plan.kept
    assert any("failed to run" in n for n in plan.notes)
    # the plan's model runs
    from onnx_lab.runtime.session import make_session
    make_session(plan.model, outputs=["y"]).run(None, T5_FEEDS[0])


def test_keep_gets_past_a_candidate_that_fails_to_run():
    plan = find_precision(gather_from_quantized(), "int8", T5_FEEDS, keep=["/pos/Add"],
                          confirm=False)
    assert plan.passed and plan.trials.loc[0, "passed"]  # the full conversion now runs
    assert plan.kept == ["/pos/Add"]


def test_a_model_that_runs_quantized_has_no_failed_trial():
    # the same model judged where int8 keeps the indices in range: no failure, no note
    feeds = [{"x": np.array([[0.0, 5.0]], np.float32)}]
    plan = find_precision(gather_from_quantized(), "int8", feeds, confirm=False)
    assert not any(str(n).startswith("candidate failed") for n in plan.trials["note"])
    assert not any("failed to run" in n for n in plan.notes)
