"""Verification: report structure, tolerances, catching a wrong rewrite, dims, chunking."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from _machinery import chain_lab, chain_proto
from onnx import helper

import onnx_lab
from onnx_lab.errors import DimError, InputError
from onnx_lab.numerics.region import COPY_PREFIX
from onnx_lab.numerics.verify import REPORT_COLUMNS, tolerance, verify


def test_wrong_rewrite_is_caught_and_first_failure_named():
    lab = chain_lab()
    r = lab.apply("test_perturb_weight", node_id="n4_MatMul", delta=0.5)
    assert r.modified and r.verify_passed is False
    assert r.first_failure == "h2"  # the perturbed MatMul's output, before the final Identity
    assert "verify FAILED first at 'h2' (outputs max_abs_err" in repr(r)
    assert r.max_abs_err > 0.1
    rep = r.verification
    assert list(rep.columns) == REPORT_COLUMNS
    row = rep.set_index("tensor").loc["h2"]
    assert row["match"] == "provenance" and row["node_id"] == "n4_MatMul"
    assert row["max_abs"] > row["atol"] and not row["passed"]
    # upstream tensors are untouched and pass
    assert rep.set_index("tensor").loc[["h1", "r1"], "passed"].all()
    assert any("verification failed first at tensor 'h2'" in n for n in r.notes)
    assert lab.history.loc[1, "verify_passed"] == False  # noqa: E712 - a numpy bool
    # the failing step is still a version (the user decides): undo returns to the original
    lab.undo()
    assert lab.history.loc[0, "current"]


def test_wrong_rewrite_in_the_first_matmul_fails_first_there():
    lab = chain_lab()
    r = lab.apply("test_perturb_weight", node_id="n0_MatMul")
    assert r.first_failure == "h1"
    failing = r.verification.loc[~r.verification.passed, "tensor"].tolist()
    assert failing[0] == "h1" and "y" in failing


def test_report_of_a_correct_rewrite_has_names_provenance_and_outputs():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("fuse_conv_bn")
    rep = r.verification
    assert r.verify_passed and rep.passed.all()
    assert set(rep.match) == {"output", "name", "provenance"}
    prov = rep.loc[rep.match == "provenance"].set_index("node_id")
    # the fused conv's output is compared with the BatchNormalization output it replaces
    assert prov.loc["/stem/conv/Conv", "ref_node_id"] == "/stem/bn/BatchNormalization"
    assert (rep.dtype == "float32").all()
    assert (rep.atol == 1e-4).all() and (rep.rtol == 1e-3).all()
    assert rep.attrs["passed"] and rep.attrs["first_failure"] is None


def test_tolerances_per_dtype():
    assert tolerance("float32") == (1e-4, 1e-3)
    assert tolerance("float16") == (1e-2, 1e-2)
    a16, r16 = tolerance("bfloat16")
    assert a16 > 1e-2 and r16 > 1e-2 and r16 < 1
    assert tolerance("int64") == (0.0, 0.0) and tolerance("bool") == (0.0, 0.0)
    assert tolerance("float32", atol=1e-2) == (1e-2, 1e-3)
    assert tolerance("int32", atol=1.0) == (0.0, 0.0)  # ints stay exact


def test_rtol_of_one_is_refused():
    lab = chain_lab()
    with pytest.raises(InputError, match="rtol"):
        lab.apply("test_drop_identity", verify={"rtol": 1.0})
    with pytest.raises(InputError, match="atol"):
        lab.apply("test_drop_identity", verify={"atol": -1})


def test_looser_tolerance_lets_a_small_error_pass():
    lab = chain_lab()
    r = lab.apply("test_perturb_weight", delta=1e-6, verify={"atol": 1e-3, "rtol": 1e-3})
    assert r.verify_passed


def test_symbolic_dims_without_values_raise_dimerror_with_the_fix():
    lab = onnx_lab.open(chain_proto())  # batch is symbolic, no value
    with pytest.raises(DimError, match="batch") as e:
        lab.apply("test_drop_identity")
    assert "dims={'batch': 1}" in str(e.value) and "verify=False" in str(e.value)
    r = lab.apply("test_drop_identity", verify=False)
    assert r.modified and r.verify_passed is None


def test_user_feeds_and_several_samples():
    lab = chain_lab()
    feeds = [{"x": np.ones((3, 8), np.float32)}, {"x": np.zeros((3, 8), np.float32)}]
    r = lab.apply("test_perturb_weight", verify={"feeds": feeds})
    assert r.verification.attrs["samples"] == 2
    assert r.verification.set_index("tensor").loc["y", "shape"] == [3, 4]


def test_chunked_capture_gives_the_same_report():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("fuse_conv_bn")
    small = verify(lab.original.model, lab.model, r, max_bytes=20_000)
    cols = ["tensor", "match", "passed"]
    assert small[cols].equals(r.verification[cols])
    np.testing.assert_allclose(small.max_abs, r.verification.max_abs)


def test_integer_tensors_compare_exactly():
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [4])],
        [helper.make_tensor("one", onnx.TensorProto.INT64, [1], [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.graph.initializer[0].int64_data[0] = 2
    lab, lab2 = onnx_lab.open(m), onnx_lab.open(m2)
    rep = verify(lab.model, lab2.model)
    row = rep.iloc[0]
    assert row["dtype"] == "int64" and row["atol"] == 0 and not row["passed"]
    assert row["max_abs"] == 1.0


def test_candidate_that_does_not_run_fails_verification():
    lab = chain_lab()
    bad = chain_proto()
    bad.graph.node[0].op_type = "Add"  # [2,8] + [8,16] does not broadcast
    rep = verify(lab.model, onnx_lab.open(bad, dims={"batch": 2}).model, dims={"batch": 2})
    assert not rep.attrs["passed"] and rep.attrs["first_failure"] is not None
    assert rep.note.str.contains("does not run").all()
    assert math.isinf(rep.max_abs.iloc[0])
    # the step's note and one-line verdict say so, instead of naming the first row's tensor
    # as where the values differ (nothing was compared)
    from onnx_lab.numerics.verify import failed_where, fill_result
    from onnx_lab.transforms.base import PassResult

    r = fill_result(PassResult(name="a tool", params={}, modified=True, nodes_before=1,
                               nodes_after=1, provenance={}, removed=[], reason="",
                               seconds=0.0, notes=[], model=None), rep, 0.0)
    assert r.verify_passed is False
    assert r.notes == [f"verification failed: {rep.note.iloc[0]}"]
    assert r.notes[0].startswith("verification failed: the new model does not run: ")
    assert failed_where(r) == f": {rep.note.iloc[0][:300]}"


def test_semantics_changing_edit_reports_the_difference():
    lab = onnx_lab.open("sample:convnet")
    r = lab.set_attribute("/head/fc/Gemm", "alpha", 2.0)
    # expected by the edit: reported as a change, not as a failed verification
    assert r.modified and r.verify_passed is None and r.outputs_changed is True
    assert r.first_failure == "logits"
    assert lab.history.loc[1, "pass"] == "set_attribute"


def _branchy_convnet() -> onnx.ModelProto:
    """Conv -> Relu -> two Convs -> Concat -> Conv, named nodes: ort:all keeps the names."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.2)
                                            .astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1"),
             helper.make_node("Conv", ["r0", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["c1", "c2"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], name="conv3")]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16, 8, 8])],
        [w("w0", 16, 3, 3, 3), w("w1", 16, 16, 1, 1), w("w2", 16, 16, 3, 3),
         w("w3", 16, 32, 1, 1)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_nchwc_blocked_tensors_are_not_compared_after_ort_all():
    # ort:all stores activations channel-blocked: same shape, other element order. Comparing
    # them with the NCHW originals failed every squeezenet/resnet verification.
    lab = onnx_lab.open(_branchy_convnet())
    r = lab.apply("ort:all")
    if "com.microsoft.nchwc" not in set(lab.nodes.domain):
        pytest.skip("onnxruntime made no NCHWc rewrite on this CPU")
    assert r.verify_passed, r.verification
    assert not r.verification["tensor"].str.startswith("reorder_token").any()
    c = onnx_lab.compare(lab.original, lab)
    assert c.passed and c.first_divergence is None
    assert c.layers["passed"].all()
    reasons = c.alignment.set_index("tensor")["reason"]
    assert "blocked layout" in reasons["c1"]


def test_in_memory_runner_matches_make_session(tmp_path):
    from onnx_lab.runtime import _runner
    from onnx_lab.runtime.capture import capturable_tensors, run
    from onnx_lab.runtime.feeds import make_feeds
    from onnx_lab.samples import build

    path = tmp_path / "tiny_external.onnx"
    proto = build("convnet")
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.data", size_threshold=0)  # even shape vectors external
    for lab in (onnx_lab.open("sample:convnet"), onnx_lab.open(path)):
        feeds = make_feeds(lab)
        names = capturable_tensors(lab.model)
        fast = _runner._fast(lab.model, feeds, names, None)  # no fallback
        ref = run(onnx_lab.open("sample:convnet").model, feeds, outputs=names)
        for n in names:
            np.testing.assert_array_equal(fast[n], ref[n], err_msg=n)


def test_reference_that_onnxruntime_cannot_run_says_how_to_skip_verification():
    from onnx_lab.errors import RuntimeLoadError

    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"], name="id"),
         helper.make_node("Foo", ["t"], ["y"], name="foo", domain="my.ops")], "g",
        [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("my.ops", 1)])
    lab = onnx_lab.open(m)
    with pytest.raises(RuntimeLoadError, match="verify=False"):
        lab.apply("test_drop_identity")
    assert lab.apply("test_drop_identity", verify=False).modified


def test_preset_reuses_each_steps_captures_as_the_next_reference(monkeypatch):
    from onnx_lab.runtime import _runner

    calls = []
    real = _runner.run

    def counting(model, feeds, outputs, providers=None):
        calls.append(model)
        return real(model, feeds, outputs, providers)

    monkeypatch.setattr(_runner, "run", counting)
    lab = onnx_lab.open("sample:convnet")
    steps = ["eliminate_identity", "eliminate_dropout", "fuse_conv_bn"]
    results = lab.apply_preset(steps, verify="full")
    assert [r.modified for r in results] == [True, True, True]
    assert all(r.verify_passed for r in results)
    # the original once, then each new version once
    assert len(calls) == 4
    assert calls[0] is lab.original.model and calls[-1] is lab.model
    # by region: the original once, then the outputs once, which also compute the last
    # step's region (the earlier steps were exact) and the first two steps' regions (a few
    # nodes each), as copies fed the reference's values
    calls.clear()
    lab = onnx_lab.open("sample:convnet")
    results = lab.apply_preset(steps)
    assert all(r.verify_passed and r.verified_by == "region" for r in results)
    assert len(calls) == 2
    assert calls[0] is lab.original.model
    final = calls[-1]
    copies = [nid for nid in final.index.entries if nid.startswith(COPY_PREFIX)]
    assert 0 < len(copies) < len(lab.original.model.index) / 2
    assert len(final.index) == len(lab.model.index) + len(copies)
    runs = [r.verification.attrs["region"]["run"] for r in results]
    assert runs == ["as a copy in the final run"] * 2 + ["with the final outputs"]


def test_outputs_nothing_reads_are_not_compared():
    # An inference Dropout's mask is float in opset 9 and bool from opset 10 with other
    # values: converting light squeezenet to opset 13 "failed" verification on it.
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Dropout", ["r"], ["d", "mask"], name="drop", ratio=0.5),
         helper.make_node("Relu", ["d"], ["y"], name="out")],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]))
    r = lab.convert_opset(13)
    assert r.modified and r.verify_passed, r.verification
    assert "mask" not in set(r.verification["tensor"])
    assert {"r", "d", "y"} <= set(r.verification["tensor"])


@pytest.mark.parametrize("ir_version", [3, 8])
def test_runner_feeds_large_weights_as_inputs_with_make_sessions_values(ir_version):
    # Large initializers are fed as graph inputs (no copy into the session); small ones
    # (shape vectors) stay in the graph; an IR-3 initializer already listed as an input
    # keeps its single entry. Values must equal a make_session run bit for bit.
    from onnx import numpy_helper

    from onnx_lab.runtime import _runner
    from onnx_lab.runtime.capture import run

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Reshape", ["h", "shape"], ["y"], name="rs")], "g",
        [helper.make_tensor_value_info("x", 1, [4, 64])]
        + ([helper.make_tensor_value_info("w", 1, [64, 32])] if ir_version < 4 else []),
        [helper.make_tensor_value_info("y", 1, [2, 64])],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([2, 64], np.int64), "shape")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = ir_version
    lab = onnx_lab.open(m)
    proto, names, _values, _folder = _runner._prepare(lab.model)
    assert names == ["w"]
    assert [t.name for t in proto.graph.initializer] == ["shape"]
    assert [i.name for i in proto.graph.input].count("w") == 1
    x = rng.standard_normal((4, 64)).astype(np.float32)
    fast = _runner._fast(lab.model, {"x": x}, ["h", "y"], None)  # no fallback
    ref = run(lab.model, {"x": x}, outputs=["h", "y"])
    for n in ("h", "y"):
        np.testing.assert_array_equal(fast[n], ref[n])


def test_quick_sizes_agree_with_the_full_estimate():
    # The chunk plan's sizes come from shape inference on the graph prepared for running;
    # where it knows a size it must be the full estimate's.
    from onnx_lab.runtime._runner import quick_sizes
    from onnx_lab.runtime.capture import capturable_tensors, estimate_bytes

    lab = onnx_lab.open("sample:transformer_block")
    shapes = {n: s for n, s in
              ((i.name, [2 if not isinstance(d, int) else d for d in i.shape])
               for i in lab.model.graph.inputs)}
    names = capturable_tensors(lab.model)
    quick = quick_sizes(lab.model, names, shapes)
    full = estimate_bytes(lab.model, names, shapes)
    known = [n for n in names if quick[n] is not None]
    assert len(known) >= len(names) * 0.9
    assert {n: quick[n] for n in known} == {n: full[n] for n in known}
    assert quick_sizes(lab.model, names, {lab.model.graph.inputs[0].name: [1]}) is None


def test_same_order_reshapes_are_compared_transposed_layouts_are_not():
    from onnx_lab.numerics.verify import _same_order

    assert _same_order((6, 4), (2, 3, 4))          # [B*S, H] vs [B, S, H]
    assert _same_order((1, 8, 1, 1), (8,))          # unit dims
    assert not _same_order((1, 8, 4, 4), (1, 4, 4, 8))  # NCHW vs NHWC: same size, other order
    assert not _same_order((6, 4), (5, 4))


def test_onnxoptimizer_transpose_fusion_has_no_false_alarm():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxoptimizer", passes=["fuse_consecutive_transposes"])
    assert r.modified and r.verify_passed, r.notes


def test_region_copies_leave_the_users_model_proto_and_earlier_versions_untouched(tmp_path):
    # The copies of the regions rename their initializers; those tensors are shared with the
    # model's versions and with the ModelProto the model was read from (onnx_ir writes a
    # tensor's new name into its TensorProto): renamed in place, the user's proto lost its
    # initializers' names and compare(proto, lab) refused "inputs differ in name".
    onnx_lab.open("sample:convnet").save(tmp_path / "convnet.onnx")
    proto = onnx.load(tmp_path / "convnet.onnx")
    before = proto.SerializeToString()
    lab = onnx_lab.open(proto)
    names = sorted(lab.original.model.graph.initializers)
    results = lab.apply_preset(["eliminate_identity", "eliminate_dropout", "fuse_conv_bn"])
    assert all(r.verify_passed and r.verified_by == "region" for r in results)
    assert proto.SerializeToString() == before
    for version in (lab.original.model, lab.model):
        for name, v in version.graph.initializers.items():
            assert v.const_value.name == name
    assert sorted(lab.original.model.graph.initializers) == names
    assert onnx_lab.compare(proto, lab).passed
    # renaming an initializer (the edit) leaves the proto and the original's tensor alone
    w = next(n for n in names if lab.model.graph.initializers.get(n) is not None)
    lab.rename_tensor(w, "renamed_weight")
    assert proto.SerializeToString() == before
    assert lab.original.model.graph.initializers[w].const_value.name == w
