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


def merged_decoder(head=False):
    """optimum's merged decoder in small: every compute node inside an If on
    ``use_cache_branch`` whose branches read outer-scope tensors (x, the weights); ``head``:
    a MatMul after the If, in the main graph."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), n)
             for n in ("wq", "wk", "wo", "wh")]
    inits.append(numpy_helper.from_array(np.full(16, 0.1, np.float32), "b"))

    def branch(tag):
        nodes = [helper.make_node("MatMul", ["x", "wq"], [f"{tag}_q"], name=f"/{tag}/q/MatMul"),
                 helper.make_node("MatMul", ["x", "wk"], [f"{tag}_k"], name=f"/{tag}/k/MatMul"),
                 helper.make_node("Transpose", [f"{tag}_k"], [f"{tag}_kt"], name=f"/{tag}/T",
                                  perm=[0, 2, 1]),
                 helper.make_node("MatMul", [f"{tag}_q", f"{tag}_kt"], [f"{tag}_s"],
                                  name=f"/{tag}/attn/MatMul"),
                 helper.make_node("Softmax", [f"{tag}_s"], [f"{tag}_p"], name=f"/{tag}/Softmax",
                                  axis=-1),
                 helper.make_node("MatMul", [f"{tag}_p", "x"], [f"{tag}_c"], name=f"/{tag}/ctx/MatMul"),
                 helper.make_node("MatMul", [f"{tag}_c", "wo"], [f"{tag}_o"], name=f"/{tag}/o/MatMul"),
                 helper.make_node("Add", [f"{tag}_o", "b"], [f"{tag}_y"], name=f"/{tag}/Add")]
        return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"{tag}_y", TP.FLOAT, None)])

    out = "h" if head else "y"
    nodes = [helper.make_node("If", ["use_cache_branch"], [out], name="optimum::if",
                              then_branch=branch("with_past"), else_branch=branch("no_past"))]
    if head:
        nodes.append(helper.make_node("MatMul", ["h", "wh"], ["y"], name="/lm_head/MatMul"))
    g = helper.make_graph(nodes, "merged", [
        helper.make_tensor_value_info("x", TP.FLOAT, [1, "decoder_sequence_length", 16]),
        helper.make_tensor_value_info("use_cache_branch", TP.BOOL, [1])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, "decoder_sequence_length", 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


MERGED_FEEDS = [{"x": np.random.default_rng(i).standard_normal((1, 5, 16)).astype(np.float32),
                 "use_cache_branch": np.array([i % 2 == 0])} for i in range(3)]


def test_int8_says_it_cannot_reach_if_bodies_before_any_trial():
    # every float node inside the If: refused up front, never "passed, kept: []"
    with pytest.raises(InputError) as e:
        find_precision(merged_decoder(), "int8", MERGED_FEEDS)
    msg = str(e.value)
    assert "all 16 float nodes" in msg and "'optimum::if'" in msg and "does not reach" in msg


def test_int8_notes_the_unreachable_body_nodes_and_plans_the_rest():
    plan = find_precision(merged_decoder(head=True), "int8", MERGED_FEEDS, confirm=False)
    assert any("16 of 17 float nodes" in n and "does not reach" in n for n in plan.notes)
    assert plan.n_candidates == 1  # the plan is over the head alone
    n_q = sum(n.op_type == "QuantizeLinear" for n in plan.model.graph)
    assert n_q > 0 and "/lm_head/MatMul" not in plan.kept


def test_fp16_converts_if_bodies():
    # fp16 does reach the bodies: their MatMuls read float16 weights, no note of unreachability
    plan = find_precision(merged_decoder(), "fp16", MERGED_FEEDS, atol=0.05, rtol=0.05)
    assert plan.n_candidates >= 16 and not any("does not reach" in n for n in plan.notes)
    body = next(n for n in plan.model.graph if n.op_type == "If").attributes["then_branch"].value
    assert any(v.dtype == ir.DataType.FLOAT16 for n in body for v in n.inputs
               if v is not None and v.dtype is not None)


def test_sensitivity_ranks_past_a_candidate_that_fails_to_run():
    from onnx_lab.numerics.precision import sensitivity

    df = sensitivity(gather_from_quantized(), "int8", T5_FEEDS)
    trials = df.attrs["trials"]
    assert trials.loc[0, "note"].startswith("candidate failed to run")
    row = df.set_index("node_id")
    assert row.loc["/pos/Add", "score_alone"] <= 1  # keeping the Add alone runs and passes
    assert row.loc["/bias/Gather", "score_alone"] == np.inf
