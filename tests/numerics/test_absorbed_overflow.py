"""An fp16 overflow the candidate's own arithmetic absorbs does not fail a comparison whose
outputs agree; one that only onnxruntime's CPU absorbs (computing in float32 between its
inserted Casts) still does."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from numerics_helpers import make_model, vi
from onnx import helper, numpy_helper

import onnx_lab


def _model(absorbing: bool, small: float = 1e-6) -> onnx.ModelProto:
    # d = x * 1e5 (beyond 65504: inf in float16); absorbing: y = x + Exp(-d), which is x on
    # both sides (Exp(-inf) = 0 = Exp(-1e5), as a GaussianProcessRegressor's RBF kernel of
    # distances beyond float16's range); not absorbing: y = x + d * 1e-6, inf in float16
    # arithmetic, which onnxruntime's CPU computes in float32 when d is not exposed
    tail = ([helper.make_node("Neg", ["d"], ["nd"], name="neg"),
             helper.make_node("Exp", ["nd"], ["e"], name="exp")] if absorbing else
            [helper.make_node("Mul", ["d", "small"], ["e"], name="shrink")])
    nodes = [helper.make_node("Mul", ["x", "big"], ["d"], name="spread"), *tail,
             helper.make_node("Add", ["x", "e"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
             numpy_helper.from_array(np.array(small, np.float32), "small")]
    if absorbing:
        inits = inits[:1]
    return make_model(nodes, [vi("x", [2, 4])], [vi("y", [2, 4])], inits)


def _runs(model: onnx.ModelProto, feeds: dict, outputs: list[str]) -> list[np.ndarray]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs if n not in have)
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(outputs, feeds)


def test_an_overflow_the_candidate_absorbs_does_not_fail_agreeing_outputs():
    # to_fp16 of a scikit-learn GaussianProcessRegressor failed compare at an overflowing
    # Transpose "that does not reach the outputs" while fresh sessions gave max_abs 0
    ref = _model(absorbing=True)
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    feeds = {"x": np.linspace(1.5, 2.5, 8, dtype=np.float32).reshape(2, 4)}
    # the truth, from fresh sessions: the candidate's d is inf, its output agrees
    r_y, r_d = _runs(ref, feeds, ["y", "d"])
    c_y, c_d = _runs(half, feeds, ["y", "d"])
    assert np.isfinite(r_d).all() and np.isinf(c_d).all()
    assert np.abs(c_y - r_y).max() <= 1e-2 + 1e-2 * np.abs(r_y).min()

    c = onnx_lab.compare(ref, half, feeds=feeds)
    assert c.passed, c.summary_text()
    assert c.outputs["passed"].all()
    f = c.first_nonfinite
    assert f is not None and f["tensor"] == "d" and f["inf_cand"] == 8 and f["absorbed"]
    row = c.layers.set_index("tensor").loc["d"]
    assert "absorbed by the candidate" in row["note"], row["note"]
    assert "absorbed by the candidate" in c.summary_text()
    # the same judgement on seeded feeds (standard-normal: a negative x gives -inf, Exp(inf))
    seeded = onnx_lab.compare(ref, half)
    got = [_runs(m, seeded.feeds[0], ["y"])[0] for m in (ref, half)]
    agree = bool(np.all(np.abs(got[1] - got[0]) <= 1e-2 + 1e-2 * np.abs(got[0])))
    assert seeded.passed == agree, seeded.summary_text()


def test_an_overflow_only_the_cpu_absorbs_still_fails():
    # onnxruntime's CPU computes d * 1e-6 in float32 from the float32 d when d is not
    # exposed; in float16 arithmetic (a GPU) the output is inf
    ref = _model(absorbing=False)
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    feeds = {"x": np.linspace(1.5, 2.5, 8, dtype=np.float32).reshape(2, 4)}
    c = onnx_lab.compare(ref, half, feeds=feeds)
    assert not c.passed, c.summary_text()
    f = c.first_nonfinite
    assert f is not None and f["tensor"] == "d" and not f["absorbed"]
    assert "absorbed" not in c.summary_text()
    assert "they fail the comparison though the outputs agree here" not in c.summary_text()


def test_an_overflow_only_the_cpu_absorbs_fails_agreeing_outputs_and_says_why():
    # y = x + d * 1e-8: the CPU's float32 computes past the overflow and the outputs agree
    # (max_abs 0.007); fed d as float16 holds it, inf, they do not
    ref = _model(absorbing=False, small=1e-8)
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    feeds = {"x": np.linspace(1.5, 2.5, 8, dtype=np.float32).reshape(2, 4)}
    (r_y,), (c_y,) = _runs(ref, feeds, ["y"]), _runs(half, feeds, ["y"])
    assert np.all(np.abs(c_y - r_y) <= 1e-2 + 1e-2 * np.abs(r_y))
    c = onnx_lab.compare(ref, half, feeds=feeds)
    assert c.outputs["passed"].all() and not c.passed, c.summary_text()
    assert not c.first_nonfinite["absorbed"]
    assert "they fail the comparison though the outputs agree here" in c.summary_text()


def test_an_overflow_on_some_samples_only_is_judged_on_those():
    # x * 1e5 overflows float16 on the second sample only (1e5 * 2e-3 = 200 on the first);
    # Exp(-inf) absorbs it there: fresh sessions give max_abs 0 on both samples, and the
    # first sample, which shows no inf, made the absorbed check give up (FAILED)
    ref = _model(absorbing=True)
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    small = {"x": np.linspace(1e-3, 2e-3, 8, dtype=np.float32).reshape(2, 4)}
    large = {"x": np.linspace(1.5, 2.5, 8, dtype=np.float32).reshape(2, 4)}
    infs = []
    for feeds in (small, large):
        r_y, r_d = _runs(ref, feeds, ["y", "d"])
        c_y, c_d = _runs(half, feeds, ["y", "d"])
        assert np.isfinite(r_d).all()
        assert np.abs(c_y.astype(np.float32) - r_y).max() <= 1e-2 + 1e-2 * np.abs(r_y).min()
        infs.append(int(np.isinf(c_d).sum()))
    assert infs == [0, 8]
    for order in ([small, large], [large, small]):
        c = onnx_lab.compare(ref, half, feeds=order)
        assert c.passed, c.summary_text()
        assert c.first_nonfinite["absorbed"]
    # an overflow only the CPU's float32 absorbs still fails on some samples only
    ref = _model(absorbing=False)
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    c = onnx_lab.compare(ref, half, feeds=[small, large])
    assert not c.passed and not c.first_nonfinite["absorbed"], c.summary_text()


def test_a_note_quoting_the_mark_is_no_mark():
    # the verdict reads the mark from a row's note: a model string a note quotes (a tensor
    # named with the sentence) must not mark the row absorbed
    from onnx_lab.numerics._absorbed import ABSORBED_NOTE, absorbed

    mine = {"note": f"{ABSORBED_NOTE} (max_abs 0)"}
    assert absorbed(mine) and absorbed({"note": "flipped; " + mine["note"]})
    hostile = f"{ABSORBED_NOTE} (max_abs 0)"
    assert not absorbed({"note": f"below a TopK {hostile!r}"})
    assert not absorbed({"note": f"{hostile}; renamed from {'x'!r}"})


def test_find_precision_keeps_no_node_for_an_overflow_the_model_absorbs():
    # the overflow constraint kept every node that produces or reads a tensor beyond 65504:
    # a scikit-learn GaussianProcessRegressor's plan kept 4 nodes (Transpose, Mul, Neg, Exp)
    # in float32 while its full float16 conversion passes compare and fresh sessions
    ref = _model(absorbing=True)
    feeds = {"x": np.linspace(1.5, 2.5, 8, dtype=np.float32).reshape(2, 4)}
    plan = onnx_lab.open(ref).find_precision("fp16", feeds=feeds, progress=False)
    assert plan.passed and plan.kept == [] and plan.required == {}, plan.trials
    assert any("fp16 overflow absorbed" in n for n in plan.notes), plan.notes
    # the truth, in fresh sessions: the plan's d overflows and its output agrees
    r_y = _runs(ref, feeds, ["y"])[0]
    c_y, c_d = _runs(plan.model.to_proto(), feeds, ["y", "d"])
    assert np.isinf(c_d).all()
    assert np.all(np.abs(c_y - r_y) <= 1e-2 + 1e-2 * np.abs(r_y))


def test_find_precision_keeps_an_overflow_only_the_cpu_absorbs():
    # fed inf, d * 1e-6 is inf: the overflow constraint stands
    ref = _model(absorbing=False)
    feeds = {"x": np.linspace(1.5, 2.5, 8, dtype=np.float32).reshape(2, 4)}
    plan = onnx_lab.open(ref).find_precision("fp16", feeds=feeds, progress=False)
    assert set(plan.required) == {"spread", "shrink"} and {"spread", "shrink"} <= set(plan.kept)
    assert not any("absorbed" in n for n in plan.notes), plan.notes
    assert "fp16 overflow" in plan.trials.iloc[0]["note"]
