"""compare(): planted drift, identical models, fp16 overflow, fusion, int8, chunking, dicts."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
import pytest
from numerics_helpers import convnet, fuse_stem_bn, make_model, scaled_copy, vi
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.numerics.compare import LAYER_COLUMNS, OUTPUT_COLUMNS, compare
from onnx_lab.runtime.capture import capture


def test_planted_drift_found_at_the_scaled_conv():
    ref = convnet()
    c = compare(ref, scaled_copy(ref, "block1.conv.weight", 1.5))
    assert not c.passed
    d = c.first_divergence
    assert d["node_id"] == "/block1/conv/Conv"
    assert d["tensor"] == "/block1/conv/Conv_output_0"
    assert d["op_type"] == "Conv"
    assert d["reaches_outputs"] is True
    assert d["max_abs"] > 0.1
    assert list(c.layers.columns) == LAYER_COLUMNS
    assert list(c.outputs.columns) == OUTPUT_COLUMNS
    # Everything before the scaled conv matches exactly.
    before = c.layers.loc[c.layers["depth"] < c.layers.loc[
        c.layers["tensor"] == d["tensor"], "depth"].iloc[0]]
    assert len(before) > 3 and (before["max_abs"] == 0).all()


def test_identical_models_pass_with_zero_error():
    c = compare("sample:convnet", "sample:convnet")
    assert c.passed and c.first_divergence is None
    assert (c.layers["max_abs"] == 0).all()
    assert (c.layers["cosine"] > 0.999999).all()
    assert np.isinf(c.layers["sqnr_db"]).all()
    assert len(c.layers) == 21 and (c.layers["match"] == "exact").all()
    assert c.to_dict()["first_divergence"] is None


def test_divergence_that_does_not_reach_the_outputs():
    # Changing the dead branch's scale only drifts tensors no output depends on.
    ref = convnet()
    cand = onnx.ModelProto()
    cand.CopyFrom(ref)
    for t in cand.graph.initializer:
        if t.name == "dead.scale":
            t.CopyFrom(numpy_helper.from_array(np.array(3.0, np.float32), t.name))
    c = compare(ref, cand)
    assert c.passed
    assert c.first_divergence["node_id"] == "/dead/Mul"
    assert c.first_divergence["reaches_outputs"] is False


def _overflow_model():
    # h = x + 1 (fine), big = h @ W (|big| ~ 1e5 > 65504: overflows in fp16), y = big * 1e-3
    w = np.full((8, 8), 3000.0, np.float32)
    nodes = [helper.make_node("Add", ["x", "one"], ["h"], name="add"),
             helper.make_node("MatMul", ["h", "W"], ["big"], name="big_matmul"),
             helper.make_node("Mul", ["big", "small"], ["y"], name="scale")]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(np.array(1e-3, np.float32), "small")]
    return make_model(nodes, [vi("x", [1, 8])], [vi("y", [1, 8])], inits)


def test_fp16_overflow_diverges_at_that_layer():
    from onnx_lab import to_fp16

    lab = onnx_lab.open(_overflow_model())
    half = to_fp16(lab)
    feeds = {"x": np.full((1, 8), 4.0, np.float32)}  # big = 5 * 3000 * 8 = 120000
    c = compare(lab, half, feeds=feeds, atol=1e-2, rtol=1e-2)
    d = c.first_divergence
    assert d["node_id"] == "big_matmul" and d["op_type"] == "MatMul"
    assert d["max_abs"] == np.inf
    # ORT's CPU EP runs the fp16 Mul in fp32 (its Cast pair is removed), so on CPU the output
    # may stay finite; whether the overflow reaches the output is reported, not assumed.
    assert d["reaches_outputs"] == (not c.outputs["passed"].all())
    # An inf the reference does not hold fails the comparison either way.
    assert not c.passed
    row = c.layers.set_index("tensor").loc["big"]
    assert row["inf_cand"] == 8 and row["inf_ref"] == 0
    add = c.layers.set_index("tensor").loc["h"]
    assert add["passed"] and add["cand_dtype"] == "float16" and "dtype differs" in add["note"]


def test_fused_model_aligns_through_provenance():
    ref = convnet()
    for keep_name in (True, False):
        fused = fuse_stem_bn(ref, keep_conv_name=keep_name)
        c = compare(ref, fused)
        a = c.alignment.set_index("tensor")
        bn_out = a.loc["/stem/bn/BatchNormalization_output_0"]
        assert bn_out["match"] == "provenance"
        assert bn_out["cand_node_id"] == "/stem/conv/Conv"
        conv_out = a.loc["/stem/conv/Conv_output_0"]
        assert pd.isna(conv_out["cand_tensor"])
        assert "fused into candidate node '/stem/conv/Conv'" in conv_out["reason"]
        assert c.passed, c.summary_text()
        assert c.first_divergence is None
        row = c.layers.set_index("tensor").loc["/stem/bn/BatchNormalization_output_0"]
        assert row["passed"] and row["max_abs"] < 1e-4


def test_fusion_with_a_planted_error_is_localized_to_the_fused_node():
    ref = convnet()
    fused = fuse_stem_bn(ref, keep_conv_name=False)
    bad = scaled_copy(fused, "stem.conv.weight", 1.1)
    c = compare(ref, bad)
    assert c.first_divergence["node_id"] == "/stem/bn/BatchNormalization"


def test_int8_dynamic_aligns_per_layer():
    from onnx_lab import to_int8_dynamic

    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    q = to_int8_dynamic(lab)
    c = compare(lab, q, atol=1e-3, rtol=1e-2)
    a = c.alignment
    assert a["cand_tensor"].notna().all()
    assert len(c.layers) == len(a)
    # LayerNorm (before any quantized MatMul) is exact; the first MatMul introduces the drift.
    ln = c.layers.loc[c.layers["tensor"].str.startswith("/layer.0/ln/")]
    assert (ln["max_abs"] == 0).all()
    assert c.first_divergence["op_type"] == "MatMul"
    assert c.first_divergence["node_id"].startswith("/layer.0/attention/")
    assert c.outputs["cosine"].iloc[0] > 0.99


def test_int8_static_aligns_to_dequantize_outputs():
    from onnx_lab import to_int8_static

    lab = onnx_lab.open("sample:convnet")
    q = to_int8_static(lab, n=2)
    c = compare(lab, q, atol=0.1, rtol=0.1)
    a = c.alignment.set_index("tensor")
    row = a.loc["/block1/conv/Conv_output_0"]
    assert row["match"] == "dequantize"
    assert row["cand_tensor"].endswith("DequantizeLinear_Output")
    assert (c.layers["match"] == "dequantize").sum() >= 10


def test_tiny_max_bytes_gives_identical_metrics():
    ref = convnet()
    cand = scaled_copy(ref, "block2.conv.weight", 1.01)
    feeds = onnx_lab.numerics.make_feeds(onnx_lab.open(ref), n=2)
    big = compare(ref, cand, feeds=feeds)
    calls = []
    small = compare(ref, cand, feeds=feeds, max_bytes=1,
                    progress=lambda done, total, label: calls.append((done, total)))
    pd.testing.assert_frame_equal(big.layers, small.layers)
    pd.testing.assert_frame_equal(big.outputs, small.outputs)
    assert big.first_divergence == small.first_divergence
    assert calls[-1][0] == calls[-1][1] == 2 * len(small.layers)  # a chunk per tensor, 2 steps
    assert calls[0] == (0, calls[-1][1])


def _masked_softmax_model():
    mask = np.zeros((1, 4), np.float32)
    mask[0, 2:] = -np.inf
    nodes = [helper.make_node("Add", ["x", "mask"], ["scores"], name="add_mask"),
             helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
             helper.make_node("Log", ["p"], ["logp"], name="log")]
    inits = [numpy_helper.from_array(mask, "mask")]
    return make_model(nodes, [vi("x", [1, 4])], [vi("logp", [1, 4])], inits)


def test_inf_and_nan_on_both_sides_compare_sensibly():
    m = _masked_softmax_model()
    c = compare(m, m)
    assert c.passed and c.first_divergence is None
    scores = c.layers.set_index("tensor").loc["scores"]
    assert scores["inf_ref"] == 2 and scores["inf_cand"] == 2 and scores["max_abs"] == 0
    logp = c.layers.set_index("tensor").loc["logp"]  # log(0) = -inf on both sides
    assert logp["inf_ref"] == 2 and logp["passed"]
    # A finite "mask" in the candidate is a mismatch at the -inf positions; a very negative
    # one (-1e4) still gives the same outputs (exp underflows to 0), a mild one (-10) does not.
    for fill, reaches in ((-1e4, False), (-10.0, True)):
        cand = onnx.ModelProto()
        cand.CopyFrom(m)
        finite = np.zeros((1, 4), np.float32)
        finite[0, 2:] = fill
        cand.graph.initializer[0].CopyFrom(numpy_helper.from_array(finite, "mask"))
        c2 = compare(m, cand)
        assert c2.passed is not reaches
        assert c2.first_divergence["node_id"] == "add_mask"
        assert c2.first_divergence["max_abs"] == np.inf
        assert c2.first_divergence["reaches_outputs"] is reaches


def test_reference_given_as_a_dict():
    lab = onnx_lab.open("sample:convnet")
    feeds = onnx_lab.numerics.make_feeds(lab, seed=3)
    ref = {}
    for chunk in capture(lab.model, feeds):
        ref.update(chunk)
    ref["not_a_tensor"] = np.zeros(3)
    cand = scaled_copy(convnet(), "block2.conv.weight", 2.0)
    c = compare({**ref, **feeds}, cand)  # inputs taken from the dict
    assert c.first_divergence["node_id"] == "/block2/conv/Conv"
    assert not c.passed
    a = c.alignment.set_index("tensor")
    assert "dict reference aligns by name only" in a.loc["not_a_tensor", "reason"]
    assert c.reference is None
    # Without inputs in the dict, feeds are required.
    with pytest.raises(onnx_lab.errors.InputError, match="feeds"):
        compare(ref, cand)
    c2 = compare(ref, cand, feeds=feeds)
    pd.testing.assert_frame_equal(c.layers, c2.layers)
    with pytest.raises(onnx_lab.errors.InputError, match="one sample"):
        compare(ref, cand, feeds=[feeds, feeds])


def test_outputs_only_and_several_samples():
    ref = convnet()
    cand = scaled_copy(ref, "head.fc.bias", 1.5)
    feeds = onnx_lab.numerics.make_feeds(onnx_lab.open(ref), n=3)
    c = compare(ref, cand, feeds=feeds, layerwise=False)
    assert len(c.layers) == 0 and len(c.outputs) == 1
    assert c.outputs["numel"].iloc[0] == 30  # 3 samples x 10 logits
    assert not c.passed and c.first_divergence is None


@pytest.mark.slow
def test_views_plot_hist_scatter_html():
    from matplotlib.figure import Figure

    ref = convnet()
    c = compare(ref, scaled_copy(ref, "block1.conv.weight", 1.5))
    assert isinstance(c.plot(), Figure)
    assert isinstance(c.hist("/block1/conv/Conv_output_0"), Figure)
    assert isinstance(c.scatter("logits"), Figure)
    r, k = c.values("/block2/relu/Relu_output_0")
    assert r.shape == k.shape == (1, 16, 8, 8)
    # hist then scatter of one layer (a drift debugger click) share one capture.
    again = c.values("/block2/relu/Relu_output_0")
    assert again[0] is r and again[1] is k
    assert c.values("/block1/conv/Conv_output_0")[0] is not r
    html = c.to_html()
    assert "first divergence" in html and "<svg" in html
    with pytest.raises(onnx_lab.errors.UnknownNameError, match="Close matches"):
        c.hist("/block1/conv/Conv_output")


def test_render_overlays_the_error():
    pytest.importorskip("onnx_lab.render.graph", reason="renderer not merged yet")
    ref = convnet()
    c = compare(ref, scaled_copy(ref, "block1.conv.weight", 1.5))
    r = c.render()
    assert "/block1/conv/Conv" in r.nodes


def test_lab_compare_and_provider_pair():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 2, "seq": 4})
    c = lab.compare(lab, providers=(["CPUExecutionProvider"], ["CPUExecutionProvider"]))
    assert c.passed and c.layers["shape"].iloc[0][:2] == [2, 4]
    with pytest.raises(onnx_lab.errors.ProviderError):
        lab.compare(lab, providers="NoSuchExecutionProvider")
    if "CUDAExecutionProvider" not in onnx_lab.runtime.session.available_providers():
        with pytest.raises(onnx_lab.errors.ProviderError, match="not available"):
            lab.compare(lab, providers=(["cpu"], ["cuda"]))
    else:  # a GPU build: CPU vs CUDA agree within float32 kernel differences
        c = lab.compare(lab, providers=(["cpu"], ["cuda"]), atol=1e-3, rtol=1e-3)
        assert c.passed and c.providers[1] == ["CUDAExecutionProvider"]


def test_lab_compare_against_its_original():
    lab = onnx_lab.open("sample:convnet")
    c = lab.compare()  # nothing applied: the original against itself
    assert c.passed and (c.layers["max_abs"] == 0).all()
    try:
        lab.apply("fuse_conv_bn", verify=False)
    except (AttributeError, onnx_lab.LabError) as e:
        pytest.skip(f"transforms not available: {e}")
    c = lab.compare()
    assert c.passed
    a = c.alignment.set_index("tensor")
    # The fused Conv carries the BatchNormalization's output name (the value it now computes);
    # the Conv's own pre-BN output no longer exists and is listed with the reason.
    for scope in ("/stem", "/block1"):
        bn = f"{scope}/bn/BatchNormalization_output_0"
        assert a.loc[bn, "match"] == "exact"
        assert a.loc[bn, "cand_node_id"] == f"{scope}/conv/Conv"
        conv = f"{scope}/conv/Conv_output_0"
        assert "fused into" in a.loc[conv, "reason"]


def test_first_nonfinite_names_the_fp16_overflow():
    # light bvlc_alexnet in fp16: first_divergence is rounding at conv 3, the NaN outputs
    # start at an overflowing Conv two layers later; the summary names both.
    c300 = numpy_helper.from_array(np.array(300.0, np.float32), "c300")
    m = make_model([helper.make_node("Mul", ["x", "c300"], ["a"], name="scale1"),
                    helper.make_node("Mul", ["a", "c300"], ["b"], name="scale2"),
                    helper.make_node("Softmax", ["b"], ["y"], name="softmax")],
                   [vi("x", [2, 64])], [vi("y", [2, 64])], [c300])
    lab = onnx_lab.open(m)
    half = onnx_lab.to_fp16(lab)
    c = compare(lab, half, feeds={"x": np.full((2, 64), 3.0, np.float32)})
    f = c.first_nonfinite
    assert f is not None and f["tensor"] == "b" and f["node_id"] == "scale2"
    assert f["inf_cand"] == 128 and f["nan_cand"] == 0
    assert "first non-finite values: b" in c.summary_text()
    assert compare(lab, lab).first_nonfinite is None


def test_an_int8_candidate_is_judged_as_int8_by_default():
    # float32's element-wise rule called a healthy int8 model out of tolerance
    from onnx_lab import to_int8_static

    lab = onnx_lab.open("sample:convnet")
    q = to_int8_static(lab, n=2)
    c = compare(lab, q)
    assert c.preset == "int8" and c.passed, c.summary_text()
    assert compare(q, lab).preset != "int8"  # the float model is no int8 candidate
    assert compare(lab, q, atol=1e-4, rtol=1e-3).preset != "int8"  # tolerances by hand
    assert compare(lab, lab).preset != "int8"
    # a real difference still fails: the candidate's logits scaled by 1.5 (SQNR ~6 dB)
    q.add_node("logits", "Mul", inputs=[1.5], verify=False)
    assert not compare(lab, q).passed


def test_confirm_cuts_a_qdq_candidates_node_out_with_its_quantize_pair():
    # the counterpart of a Conv's output in a QDQ model is the DequantizeLinear after it,
    # whose QuantizeLinear input has no counterpart: confirm said "not confirmed: no
    # counterpart" for every int8 divergence
    from onnx_lab import to_int8_static

    lab = onnx_lab.open("sample:convnet")
    q = to_int8_static(lab, n=2)
    q.scale_initializer("block2.conv.weight_scale", 3.0, verify=False)  # the planted bug
    fd = compare(lab, q, confirm=True).first_divergence
    assert fd["node_id"] == "/block2/conv/Conv" and fd["confirmed"] is True
    assert "cut out with /block2/conv/Conv_output_0_QuantizeLinear, /block2/conv/Conv" \
        in fd["confirm_note"]
    # healthy: fed the reference's inputs, the quantized Conv agrees
    from onnx_lab.numerics.confirm import local_check

    c = compare(lab, to_int8_static(lab, n=2))
    check = local_check(c, {"cand_node_id": "/block2/conv/Conv_output_0_DequantizeLinear",
                            "node_id": "/block2/conv/Conv"})
    assert check.region[1:] == ["/block2/conv/Conv_output_0_QuantizeLinear", "/block2/conv/Conv"]
    assert list(check.feeds) == ["/block1/pool/MaxPool_output_0_DequantizeLinear_Output"]
    assert check.passed


def test_a_cut_whose_node_also_makes_a_fed_tensor_is_refused_not_run():
    # onnxruntime's EmbedLayerNormalization: output 0 has a counterpart (fed), output 1 (the
    # mask index) has none; reaching up to the node made a model defining output 0 twice,
    # and compare(confirm=True) raised RuntimeLoadError instead of giving a note
    from onnx_lab.core.model import LabModel
    from onnx_lab.numerics.confirm import _region_inputs

    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Split", ["x"], ["p", "q"], name="split", axis=0,
                               num_outputs=2),
         onnx.helper.make_node("Add", ["p", "q"], ["z"], name="add")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2])])
    m = LabModel(onnx_lab.open(onnx.helper.make_model(
        g, opset_imports=[onnx.helper.make_opsetid("", 18)])).model.ir)
    assert _region_inputs(m, "add", ["p", "q"], {"p": "p", "z": "z"}, {"x"}, set()) == ([], [])
    # with no counterpart for either output the cut reaches the graph input
    assert _region_inputs(m, "add", ["p", "q"], {"z": "z"}, {"x"}, set()) == (["x"],
                                                                              ["add", "split"])


def test_confirm_cuts_an_if_out_with_the_values_its_branches_read():
    # silero-vad: a weight inside the If's branch was wrong; the cut left out the audio the
    # branches read from the main graph and onnx_ir raised a raw ValueError
    def model(scale: float) -> onnx.ModelProto:
        h = onnx.helper
        w = onnx.numpy_helper.from_array(np.full(4, scale, np.float32), "w")
        then = h.make_graph([h.make_node("Mul", ["a", "w"], ["t"])], "then", [],
                            [h.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [4])], [w])
        other = h.make_graph([h.make_node("Neg", ["a"], ["e"])], "else", [],
                             [h.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [4])])
        g = h.make_graph(
            [h.make_node("Relu", ["x"], ["a"], name="relu"),
             h.make_node("Greater", ["sr", "k"], ["c"], name="gt"),
             h.make_node("If", ["c"], ["f"], name="if", then_branch=then, else_branch=other),
             h.make_node("Tanh", ["f"], ["y"], name="tanh")], "g",
            [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4]),
             h.make_tensor_value_info("sr", onnx.TensorProto.INT64, [])],
            [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
            [onnx.numpy_helper.from_array(np.array(8000, np.int64), "k")])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])

    feeds = {"x": np.linspace(-1, 1, 4, dtype=np.float32), "sr": np.array(16000, np.int64)}
    fd = compare(model(1.0), model(1.1), feeds=feeds, confirm=True).first_divergence
    assert fd["node_id"] == "if" and fd["confirmed"] is True, fd
    from onnx_lab.numerics.confirm import local_check

    check = local_check(compare(model(1.0), model(1.1), feeds=feeds))
    assert sorted(check.feeds) == ["a", "c"]


def test_a_failing_outputs_only_comparison_says_where_to_look():
    # "FAILED ... 0 layers compared ... no divergence" read as a contradiction
    ref = convnet()
    cand = scaled_copy(ref, "block2.conv.weight", 1.5)
    text = compare(ref, cand, layerwise=False).summary_text()
    assert "FAILED" in text and "no divergence" not in text
    assert "first divergence not searched: only the outputs were compared" in text
    assert "first divergence:" in compare(ref, cand).summary_text()


def test_a_divergence_under_a_passing_verdict_says_the_outputs_stay_within_tolerance():
    # "does not reach the outputs" read as if the outputs had not moved; they moved, within
    # tolerance (a weight 1 % off, then scaled down by 1e-3)
    def model(factor: float) -> onnx.ModelProto:
        w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * factor
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Mul", ["m", "s"], ["y"], name="scale")], "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])],
            [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(1e-3, np.float32), "s")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    c = compare(model(1.0), model(1.01))
    assert c.passed and c.first_divergence["node_id"] == "mm"
    text = c.summary_text()
    assert "max_abs=" in text and "the outputs stay within tolerance; cause: weights" in text
    assert "does not reach" not in text
    failing = compare(model(1.0), model(1.5)).summary_text()
    assert "reaches the failing outputs" in failing


def test_a_transpose_that_moves_a_dim_of_one_is_named_for_its_shape_not_its_input():
    # a swapped perm over a dim of size 1 keeps the values (flattened) and changes the shape:
    # the divergence said "the error comes in through that input", whose max_abs was 0
    def model(perm):
        shape = numpy_helper.from_array(np.array([2, 3], np.int64), "s")
        return make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=perm),
                           helper.make_node("Reshape", ["t", "s"], ["y"], name="reshape")],
                          [vi("x", [2, 1, 3])], [vi("y", [2, 3])], [shape])

    c = compare(model([1, 0, 2]), model([0, 1, 2]))
    d = c.first_divergence
    assert d["node_id"] == "tr" and d["cause"] == "computation", d
    assert "another shape, [2, 1, 3] instead of [1, 2, 3]" in d["message"]
    assert "comes in through" not in d["message"]


def _overflowing_pair(scale: float = 1000.0) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A float16 model whose ``m`` overflows (clipped after), and the same computation as
    onnxruntime's optimizer writes it for CPU: float32 between Casts, ``m`` kept in float32."""
    f16, f32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT

    def const(name, value, dtype):
        return numpy_helper.from_array(np.array(value, dtype), name)

    ref = helper.make_model(helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["m"], name="mul"),
         helper.make_node("Clip", ["m", "lo", "hi"], ["y"], name="clip")],
        "ref", [helper.make_tensor_value_info("x", f16, [1, 4])],
        [helper.make_tensor_value_info("y", f16, [1, 4])],
        [const("k", 1000.0, np.float16), const("lo", 0.0, np.float16),
         const("hi", 6.0, np.float16)]), opset_imports=[helper.make_opsetid("", 17)])
    cand = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["x"], ["x32"], name="cast_in", to=f32),
         helper.make_node("Mul", ["x32", "k"], ["m"], name="mul"),
         helper.make_node("Clip", ["m", "lo", "hi"], ["y32"], name="clip"),
         helper.make_node("Cast", ["y32"], ["y"], name="cast_out", to=f16)],
        "cand", [helper.make_tensor_value_info("x", f16, [1, 4])],
        [helper.make_tensor_value_info("y", f16, [1, 4])],
        [const("k", scale, np.float32), const("lo", 0.0, np.float32),
         const("hi", 6.0, np.float32)]), opset_imports=[helper.make_opsetid("", 17)])
    return ref, cand


def test_a_float32_candidate_keeps_what_the_float16_reference_overflowed():
    # 100 * 1000 is inf in float16 and 1e5 in the candidate's float32, clipped to 6 on both
    # sides: the outputs are equal, and `m` used to fail at max_abs inf ("computes
    # differently"), as did the verification of onnxruntime's step on such a model
    from onnx_lab.numerics.verify import verify

    feeds = {"x": np.array([[0.5, 100.0, -100.0, 70.0]], np.float16)}
    ref, cand = _overflowing_pair()
    c = compare(ref, cand, feeds=feeds)
    assert c.passed and c.first_divergence is None
    assert c.layers["passed"].all() and "m" in set(c.layers["tensor"])
    report = verify(onnx_lab.open(ref), onnx_lab.open(cand), feeds=feeds)
    assert report.attrs["passed"] and report["passed"].all()
    # a wrong constant still fails where the reference did not overflow, and where it did
    c = compare(ref, _overflowing_pair(scale=10.0)[1], feeds=feeds)
    assert c.first_divergence["tensor"] == "m"
    assert not verify(onnx_lab.open(ref), onnx_lab.open(_overflowing_pair(scale=-1000.0)[1]),
                      feeds=feeds).attrs["passed"]
