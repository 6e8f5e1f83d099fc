"""Seeded feeds run every branch a boolean input decides (optimum's merged decoders: all the
compute inside an If on ``use_cache_branch``), so verification and the precision searches judge
both; user feeds that miss a branch are respected and the result names what was not run.

Distilled from optimum's T5 merged decoder, whose bf16 plan "passed" on the branch the seeded
feeds took while its logits were NaN with use_cache_branch=True: an attention mask at float32's
minimum is -inf in bfloat16, and a fully masked row's Softmax is NaN."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.core.branches import branch_switches
from onnx_lab.numerics.verify import verify
from onnx_lab.runtime.feeds import as_feed_list, branch_feeds, make_feeds

FMIN = float(np.finfo(np.float32).min)
KINDS = ("key", "value")


def merged(mask_in_then: bool = True, past: bool = False, cond: str = "use_cache_branch"
           ) -> onnx.ModelProto:
    """An If on ``use_cache_branch`` whose branches define the same names (as optimum's do).
    ``mask_in_then``: the cache branch adds a row fully masked at float32's minimum (finite in
    float32, -inf in bfloat16: Softmax NaN). ``past``: the cache branch concatenates a KV
    cache (``past_key_values.0.key`` / ``.value``) and the graph returns ``present.0.*``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array(np.full((1, 1, 8), FMIN if mask_in_then else 0.0,
                                             np.float32), "mask")]

    def branch(tag: str, masked: bool, reads_past: bool) -> onnx.GraphProto:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["/decoder/MatMul_output_0"],
                                  name=f"/{tag}/MatMul")]
        s = "/decoder/MatMul_output_0"
        if masked:
            nodes.append(helper.make_node("Add", [s, "mask"], ["/decoder/Add_output_0"],
                                          name=f"/{tag}/Add"))
            s = "/decoder/Add_output_0"
        nodes.append(helper.make_node("Softmax", [s], ["/decoder/Softmax_output_0"], axis=-1,
                                      name=f"/{tag}/Softmax"))
        outs = [helper.make_tensor_value_info("/decoder/Softmax_output_0", T.FLOAT, None)]
        for kind in KINDS if past else ():
            ins = [f"past_key_values.0.{kind}", "x"] if reads_past else ["x"]
            nodes.append(helper.make_node("Concat", ins, [f"/decoder/present_{kind}"], axis=1,
                                          name=f"/{tag}/Concat_{kind}"))
            outs.append(helper.make_tensor_value_info(f"/decoder/present_{kind}", T.FLOAT, None))
        return helper.make_graph(nodes, tag, [], outs)

    outs = ["logits"] + ([f"present.0.{k}" for k in KINDS] if past else [])
    nodes = []
    if cond != "use_cache_branch":  # Not(use_cache_branch): the branches swap
        nodes.append(helper.make_node("Not", ["use_cache_branch"], [cond], name="not"))
    nodes.append(helper.make_node("If", [cond], outs, name="optimum::if",
                                  then_branch=branch("then", mask_in_then, True),
                                  else_branch=branch("else", False, False)))
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [1, "decoder_sequence_length", 8])]
    outputs = [helper.make_tensor_value_info("logits", T.FLOAT,
                                             [1, "decoder_sequence_length", 8])]
    for kind in KINDS if past else ():
        inputs.append(helper.make_tensor_value_info(
            f"past_key_values.0.{kind}", T.FLOAT, [1, "past_sequence_length", 8]))
        outputs.append(helper.make_tensor_value_info(
            f"present.0.{kind}", T.FLOAT, [1, "past_sequence_length + decoder_sequence_length",
                                           8]))
    inputs.append(helper.make_tensor_value_info("use_cache_branch", T.BOOL, [1]))
    g = helper.make_graph(nodes, "merged", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


DIMS = {"decoder_sequence_length": 3}


def _runs(model, feeds) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto)
                                else str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_switch_and_the_branches_each_value_takes():
    lab = onnx_lab.open(merged(), dims=DIMS)
    (s,) = branch_switches(lab.model)
    assert s.input == "use_cache_branch" and s.cache_value is None
    assert s.taken == {True: ("optimum::if/then_branch",), False: ("optimum::if/else_branch",)}
    (n,) = branch_switches(onnx_lab.open(merged(cond="not_cache"), dims=DIMS).model)
    assert n.taken[True] == ("optimum::if/else_branch",)  # through the Not
    fl = branch_feeds(lab)
    assert [bool(f["use_cache_branch"][0]) for f in fl] == [True, False]
    np.testing.assert_array_equal(fl[0]["x"], fl[1]["x"])
    # make_feeds alone (profiling) stays one sample; without a switch, one sample too
    assert isinstance(make_feeds(lab), dict)
    plain = onnx_lab.open("sample:convnet")
    assert len(as_feed_list(None, plain, branches=True)) == 1


def test_a_condition_computed_from_data_is_no_switch():
    m = merged()
    m.graph.node.insert(0, helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0))
    m.graph.node.insert(1, helper.make_node("Greater", ["mx", "zero"], ["c"]))
    m.graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    m.graph.node[2].input[0] = "c"
    assert branch_switches(onnx_lab.open(m, dims=DIMS).model) == []


def test_the_cache_branch_gets_a_past_length_the_other_none():
    lab = onnx_lab.open(merged(past=True), dims={**DIMS, "past_sequence_length": 0})
    (s,) = branch_switches(lab.model)
    assert s.cache_value is True
    fl = branch_feeds(lab)
    got = [(bool(f["use_cache_branch"][0]), f["past_key_values.0.key"].shape[1]) for f in fl]
    assert got == [(False, 0), (True, 1)]  # the given dims first, the cache branch non-empty
    fl = branch_feeds(lab, {"past_sequence_length": 4})
    got = [(bool(f["use_cache_branch"][0]), f["past_key_values.0.key"].shape[1]) for f in fl]
    assert got == [(True, 4), (False, 0)]
    for f in fl:  # each sample runs, and the cache branch grows the cache
        out = _runs(merged(past=True), f)
        assert out["present.0.key"].shape[1] == f["past_key_values.0.key"].shape[1] + 3


def _break_else(m: onnx.ModelProto) -> onnx.ModelProto:
    """A wrong rewrite of the branch the first sample does not take: its Softmax over the
    other axis."""
    bad = onnx.ModelProto()
    bad.CopyFrom(m)
    if_node = bad.graph.node[-1]
    body = next(a.g for a in if_node.attribute if a.name == "else_branch")
    soft = next(n for n in body.node if n.op_type == "Softmax")
    soft.attribute[0].i = 1
    return bad


def test_verification_catches_a_rewrite_that_breaks_only_the_untaken_branch():
    m = merged()
    before, after = onnx_lab.open(m, dims=DIMS), onnx_lab.open(_break_else(m), dims=DIMS)
    report = verify(before.model, after.model, dims=DIMS)
    assert report.attrs["samples"] == 2 and not report.attrs["passed"]
    row = report.loc[report["tensor"] == "logits"].iloc[0]
    assert "fails with use_cache_branch=False (optimum::if/else_branch)" in row["note"]
    # the same model is no failure (no false alarm from the second sample)
    same = verify(before.model, onnx_lab.open(m, dims=DIMS).model, dims=DIMS)
    assert same.attrs["passed"] and same.attrs["unexercised"] == []
    # compare() on seeded feeds runs both branches too, and fails the rewrite
    c = onnx_lab.compare(before, after)
    assert len(c.feeds) == 2 and not c.passed and c.unexercised == []


def test_user_feeds_are_respected_and_the_branch_they_miss_is_named():
    m = merged()
    before, after = onnx_lab.open(m, dims=DIMS), onnx_lab.open(_break_else(m), dims=DIMS)
    feeds = {"x": np.ones((1, 3, 8), np.float32), "use_cache_branch": np.array([True])}
    report = verify(before.model, after.model, feeds=feeds, dims=DIMS)
    assert report.attrs["samples"] == 1 and report.attrs["passed"]  # what was asked
    assert report.attrs["unexercised"] == ["use_cache_branch=False (optimum::if/else_branch)"]
    assert "not exercised" in report.attrs["note"]
    c = onnx_lab.compare(before, after, feeds=feeds)
    assert c.passed and c.unexercised == ["use_cache_branch=False (optimum::if/else_branch)"]
    assert "never compared): use_cache_branch=False" in c.summary_text()
    # a step verified on such feeds says it in its notes (the history and the CLI show them)
    m.graph.input[0].name = "x_in"
    m.graph.node.insert(0, helper.make_node("Identity", ["x_in"], ["x"], name="copy"))
    lab = onnx_lab.open(m, dims=DIMS)
    r = lab.apply("eliminate_identity", verify={"feeds": {
        "x_in": feeds["x"], "use_cache_branch": feeds["use_cache_branch"]}})
    assert r.modified and r.verify_passed
    assert any("not exercised" in n and "use_cache_branch=False" in n for n in r.notes)


def test_bf16_search_judges_the_cache_branch_and_its_plan_runs_both(tmp_path):
    lab = onnx_lab.open(merged(), dims=DIMS)
    plan = lab.find_precision("bf16", progress=False)
    full = plan.trials.iloc[0]
    assert not full["passed"]
    assert "fails with use_cache_branch=True (optimum::if/then_branch)" in full["note"]
    assert plan.passed and plan.kept and all(k.startswith("/then/") for k in plan.kept)
    assert lab.history.iloc[-1]["verify_passed"]
    path = tmp_path / "bf16.onnx"
    lab.save(path)
    x = np.random.default_rng(1).standard_normal((1, 3, 8)).astype(np.float32)
    for flag in (True, False):  # a fresh session on the saved plan: no NaN in either branch
        out = _runs(path, {"x": x, "use_cache_branch": np.array([flag])})
        assert np.isfinite(out["logits"]).all()
    # user feeds with one value: respected, and the plan says which branch was not judged
    one = onnx_lab.open(merged(), dims=DIMS).find_precision(
        "bf16", feeds={"x": x, "use_cache_branch": np.array([False])}, progress=False)
    assert one.kept == [] and any("never run use_cache_branch=True" in n for n in one.notes)


def test_a_correct_conversion_passes_on_both_branches():
    lab = onnx_lab.open(merged(mask_in_then=False), dims=DIMS)
    plan = lab.find_precision("bf16", progress=False)
    assert plan.passed and plan.kept == [] and len(plan.feeds) == 2
    assert any(n.startswith("judged on every branch") and "use_cache_branch=False" in n
               for n in plan.notes)
    assert plan.trials.iloc[0]["passed"] and not plan.trials.iloc[0]["note"]
    assert lab.history.iloc[-1]["verify_passed"]


def _other_branch_broken() -> onnx.ModelProto:
    """A switch whose else branch cannot run at these dims (a Reshape to 4 rows of 3): the
    model is only ever run with use_cache_branch=True."""
    m = merged(mask_in_then=False)
    body = next(a.g for a in m.graph.node[-1].attribute if a.name == "else_branch")
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, 4, 8], np.int64), "four"))
    body.node[0].output[0] = "mm"
    body.node.insert(1, helper.make_node("Reshape", ["mm", "four"],
                                         ["/decoder/MatMul_output_0"], name="/else/Reshape"))
    return m


def test_a_branch_the_reference_cannot_run_is_named_not_failed():
    m = _other_branch_broken()
    before = onnx_lab.open(m, dims=DIMS)
    report = verify(before.model, onnx_lab.open(m, dims=DIMS).model, dims=DIMS)
    assert report.attrs["passed"]  # no false alarm from a branch the model never runs
    (u,) = report.attrs["unexercised"]
    assert u.startswith("use_cache_branch=False (optimum::if/else_branch) (the reference "
                        "does not run on it")
    c = onnx_lab.compare(before, onnx_lab.open(m, dims=DIMS))
    assert c.passed and len(c.feeds) == 1 and c.unexercised[0].startswith("use_cache_branch=False")
    plan = before.find_precision("bf16", progress=False)
    assert plan.passed and len(plan.feeds) == 1
    assert any("does not run use_cache_branch=False" in n for n in plan.notes)
    assert c.feeds_notes and "the reference itself fails on it" in c.feeds_notes[0]


def test_a_candidate_fixed_to_the_first_samples_sizes_is_compared_on_that_branch():
    # onnxslim or onnxsim given input shapes fix the past length the first sample has; the
    # no-cache sample (an empty past) cannot run on that candidate: said, not a DimError.
    dims = {**DIMS, "past_sequence_length": 4}
    m = merged(past=True)
    fixed = onnx.ModelProto()
    fixed.CopyFrom(m)
    for v in fixed.graph.input:
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = dims[d.dim_param]
    c = onnx_lab.compare(onnx_lab.open(m, dims=dims), onnx_lab.open(fixed))
    assert c.passed and len(c.feeds) == 1 and bool(c.feeds[0]["use_cache_branch"][0])
    assert c.unexercised == ["use_cache_branch=False (optimum::if/else_branch)"]
    (note,) = c.feeds_notes
    assert note.startswith("the sample for use_cache_branch=False (optimum::if/else_branch) "
                           "was not run: the candidate's inputs are fixed to other sizes")
    assert "past_key_values.0.key" in note and note in c.summary_text()
    assert c.to_dict()["feeds_notes"] == [note]
    # a wrong candidate is still caught on the branch it runs
    bad = onnx.ModelProto()
    bad.CopyFrom(fixed)
    then = next(a.g for a in bad.graph.node[-1].attribute if a.name == "then_branch")
    next(n for n in then.node if n.op_type == "Softmax").attribute[0].i = 1
    assert not onnx_lab.compare(onnx_lab.open(m, dims=dims), onnx_lab.open(bad)).passed
