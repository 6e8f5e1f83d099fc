"""A float16 candidate's outputs are judged as onnxruntime computes them in a plain run: with
every intermediate exposed, its CPU rounds each exposed float16 tensor that a plain run
computes in float32, and a GaussianNB-like model's probabilities moved 0.1 there."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from numerics_helpers import make_model, vi
from onnx import helper, numpy_helper

import onnx_lab


def _model(theta_shift: float = 0.0, level: float = -487.0) -> onnx.ModelProto:
    # log-likelihoods near -487 (float16 steps of 0.25 there), normalized by their reshaped
    # log-sum-exp and exponentiated: what skl2onnx writes for GaussianNB.predict_proba (the
    # Reshape, which onnxruntime runs in float16, is where exposing lse rounds what Sub reads)
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((3, 4)).astype(np.float32) + theta_shift
    sigma = np.full((3, 4), 2.0, np.float32)
    prior = np.array([0.0, 0.5, -0.25], np.float32) + level  # float16 values, large
    nodes = [helper.make_node("Sub", ["x", "theta"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
             helper.make_node("Div", ["d2", "sigma"], ["q"], name="div"),
             helper.make_node("ReduceSum", ["q", "axis"], ["nll"], keepdims=0, name="sum"),
             helper.make_node("Sub", ["prior", "nll"], ["ll"], name="joint"),
             helper.make_node("ReduceLogSumExp", ["ll"], ["lse"], axes=[1], keepdims=0,
                              name="lse"),
             helper.make_node("Reshape", ["lse", "column"], ["lse2"], name="reshape"),
             helper.make_node("Sub", ["ll", "lse2"], ["lp"], name="norm"),
             helper.make_node("Exp", ["lp"], ["y"], name="exp")]
    inits = [numpy_helper.from_array(theta, "theta"), numpy_helper.from_array(sigma, "sigma"),
             numpy_helper.from_array(prior, "prior"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array([2], np.int64), "axis"),
             numpy_helper.from_array(np.array([-1, 1], np.int64), "column")]
    return make_model(nodes, [vi("x", [4, 1, 4])], [vi("y", [4, 3])], inits)


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((4, 1, 4)).astype(np.float32)}


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    # as compare runs them: graph optimizations disabled
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]


def test_outputs_are_judged_on_a_plain_run():
    ref = _model()
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    feeds = _feeds()
    # the truth, from fresh sessions: the probabilities agree within the fp16 rule
    r, c = _run(ref, feeds), _run(half, feeds)
    assert np.all(np.abs(c - r) <= 1e-2 + 1e-2 * np.abs(r)), np.abs(c - r).max()
    plain = onnx_lab.compare(ref, half, feeds=feeds, layerwise=False)
    assert plain.passed, plain.summary_text()

    cmp = onnx_lab.compare(ref, half, feeds=feeds)
    assert cmp.passed, cmp.summary_text()  # it failed at max_abs ~0.1: two verdicts
    out = cmp.outputs.iloc[0]
    assert out["max_abs"] == plain.outputs.iloc[0]["max_abs"]
    assert "from a run of the outputs alone" in out["note"]
    # the layerwise rows keep the capture's numbers: the rounding stays visible there
    layers = cmp.layers.set_index("tensor")
    assert layers.loc["lp", "max_abs"] > 0.01
    np.testing.assert_array_equal(cmp._output_values[("y", "y")][1][0], c)


def test_a_wrong_weight_still_fails_on_the_plain_run():
    ref = _model()
    bad = onnx_lab.to_fp16(onnx_lab.open(_model(theta_shift=0.05))).model.to_proto()
    feeds = _feeds()
    r, c = _run(ref, feeds), _run(bad, feeds)
    assert not np.all(np.abs(c - r) <= 1e-2 + 1e-2 * np.abs(r))
    cmp = onnx_lab.compare(ref, bad, feeds=feeds)
    assert not cmp.passed and not cmp.outputs["passed"].any(), cmp.summary_text()
    assert cmp.outputs.iloc[0]["max_abs"] == np.abs(c.astype(np.float64) - r).max()


def test_a_passing_comparison_reports_the_plain_runs_numbers():
    # log-likelihoods near -20 (float16 steps of 1/64): the exposed log-sum-exp's rounding
    # moves the probabilities within the fp16 rule, so the comparison passed and read the
    # capture's max_abs (BERT-base in float16: 0.0109 where fresh sessions give 0.0108)
    ref = _model(level=-20.0)
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    feeds = _feeds()
    truth = np.abs(_run(half, feeds).astype(np.float64) - _run(ref, feeds)).max()
    cmp = onnx_lab.compare(ref, half, feeds=feeds)
    assert cmp.passed, cmp.summary_text()
    layers = cmp.layers.set_index("tensor")
    assert layers.loc["lp", "max_abs"] > truth  # the capture's rounding, kept in the layers
    out = cmp.outputs.iloc[0]
    assert out["max_abs"] == truth
    assert "from a run of the outputs alone" in out["note"]
