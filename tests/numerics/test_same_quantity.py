"""Verification and compare judge a pair only when both sides compute the same quantity: correct
rewrites that move work between nodes (onnxruntime's TransposeOptimizer moving a Shape above a
Transpose, onnxsim folding GELU's ``* 0.5`` into the next Conv) pass; planted faults (a wrong
Reshape target, a wrong weight) are still caught at their node."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
import pytest
from rewrite_models import (
    DECODER_DIMS,
    gelu_conv,
    gelu_folded,
    move_shape_above_transpose,
    optimum_decoder,
    plant_reshape_target,
    plant_weight,
)

import onnx_lab
from onnx_lab.numerics.metrics import rule_for, tensor_metrics
from onnx_lab.numerics.verify import verify

L0 = "/model/layers.0/self_attn"
L1 = "/model/layers.1/self_attn"


@pytest.fixture(scope="module")
def decoder():
    return optimum_decoder()


@pytest.mark.parametrize("tool", ["ort:basic", "ort:extended", "ort:all"])
def test_the_decoder_verifies_under_every_ort_level(decoder, tool):
    lab = onnx_lab.open(decoder, dims=DECODER_DIMS)
    r = lab.apply(tool)
    assert r.modified and r.verify_passed, (r.first_failure, r.notes)
    rep = r.verification
    # the moved Shape (same node name, now reading present.0.key) is not compared with the
    # Shape of the transposed keys: listed with the reason
    why = rep.attrs["not_comparable"][f"{L0}/Shape_3_output_0"]
    assert "not the same quantity" in why and "present.0.key" in why
    # the Gather that writes the old name again holds the same value: judged, exactly
    row = rep.set_index("tensor").loc[f"{L0}/Shape_3_output_0"]
    assert row["passed"] and row["dtype"] == "int64" and row["rule"].startswith("|err| <= 0 ")
    outs = rep.loc[rep.match == "output"]
    assert set(outs.tensor) == {"logits", "present.0.key", "present.0.value", "present.1.key",
                                "present.1.value"} and outs.passed.all()
    c = onnx_lab.compare(lab.original, lab, dims=DECODER_DIMS)
    assert c.passed and c.first_divergence is None
    assert len(c.layers) > 40  # the unchanged attention is still compared layer by layer


def test_the_decoder_verifies_under_onnxsim():
    static = optimum_decoder(static=DECODER_DIMS)
    lab = onnx_lab.open(static)
    r = lab.apply("onnxsim")
    assert r.modified and r.verify_passed, r.first_failure
    c = onnx_lab.compare(lab.original, lab)
    assert c.passed and c.first_divergence is None


def test_a_shape_moved_above_its_transpose_is_not_paired(decoder):
    moved = move_shape_above_transpose(decoder, f"{L0}/Shape_3")
    ref = onnx_lab.open(decoder, dims=DECODER_DIMS)
    rep = verify(ref, onnx_lab.open(moved, dims=DECODER_DIMS), dims=DECODER_DIMS)
    assert rep.attrs["passed"] and rep.attrs["first_failure"] is None
    assert f"{L0}/Shape_3_output_0" in rep.attrs["not_comparable"]
    assert f"{L0}/Shape_3" not in set(rep.tensor)  # the new Shape's own output: no pair
    c = onnx_lab.compare(decoder, moved, dims=DECODER_DIMS)
    assert c.passed and c.first_divergence is None
    a = c.alignment.set_index("tensor")
    assert a.loc[f"{L0}/Shape_3_output_0", "match"] == "exact"  # the Gather's, same value


def test_gelu_folded_into_the_conv_by_onnxsim_passes():
    lab = onnx_lab.open(gelu_conv())
    r = lab.apply("onnxsim")
    assert r.modified and r.verify_passed and r.max_abs_err == 0.0
    assert set(r.provenance.get("/Mul", [])) == {"/Mul", "/Mul_1"}  # the over-claim
    rep = r.verification.set_index("tensor")
    # /Mul still computes x·(erf+1): compared with the reference's /Mul, not with the ·0.5
    assert rep.loc["/Mul_output_0", "ref_tensor"] == "/Mul_output_0"
    assert "/Mul_1_output_0" not in set(rep.ref_tensor)
    c = onnx_lab.compare(lab.original, lab)
    assert c.passed and c.first_divergence is None
    a = c.alignment.set_index("tensor")
    assert a.loc["/Mul_output_0", "cand_tensor"] == "/Mul_output_0"
    assert pd.isna(a.loc["/Mul_1_output_0", "cand_tensor"]) and a.loc["/Mul_1_output_0",
                                                                      "reason"]


def test_gelu_folded_by_hand_passes_both_ways():
    ref, cand = gelu_conv(), gelu_folded()
    c = onnx_lab.compare(ref, cand)
    assert c.passed and c.first_divergence is None
    rep = verify(onnx_lab.open(ref), onnx_lab.open(cand))
    assert rep.attrs["passed"]


def test_a_fused_pair_whose_reader_took_the_constant_is_not_compared():
    # The provenance claims /Mul absorbed /Mul_1 (what the tools' tracing says); /Mul is
    # rewritten (another constant input) so it is no longer the same node as before, and the
    # Conv reading it holds other weights: its output is not the reference's /Mul_1 output.
    ref = gelu_conv()
    cand = gelu_folded()
    for n in cand.graph.node:
        if n.name == "/Mul":
            n.input[1] = "add_copy"
    add = next(n for n in cand.graph.node if n.name == "/Add")
    cand.graph.node.insert(list(cand.graph.node).index(add) + 1, onnx.helper.make_node(
        "Identity", ["/Add_output_0"], ["add_copy"], name="/Add/copy"))
    meta = cand.graph.node[[n.name for n in cand.graph.node].index("/Mul")].metadata_props
    meta.add(key="onnx_lab.origin", value='["/Mul", "/Mul_1"]')
    c = onnx_lab.compare(ref, cand)
    assert c.passed and c.first_divergence is None
    reason = c.alignment.set_index("tensor").loc["/Mul_1_output_0", "reason"]
    assert "its reader '/conv2/Conv'" in reason and "folded" in reason


def test_a_planted_reshape_target_is_caught_at_the_reshape(decoder):
    bad = plant_reshape_target(decoder, f"{L1}/Reshape_q", [1, 2, 1, 8])  # heads, seq swapped
    rep = verify(onnx_lab.open(decoder, dims=DECODER_DIMS), onnx_lab.open(bad, dims=DECODER_DIMS),
                 dims=DECODER_DIMS)
    assert not rep.attrs["passed"] and rep.attrs["first_failure"] == f"{L1}/Reshape_q_output_0"
    assert "shape" in rep.set_index("tensor").loc[f"{L1}/Reshape_q_output_0", "note"]
    c = onnx_lab.compare(decoder, bad, dims=DECODER_DIMS)
    assert not c.passed
    assert c.first_divergence["node_id"] == f"{L1}/Reshape_q"


def test_a_planted_weight_error_is_caught_at_its_node(decoder):
    w = "model.layers.0.self_attn.q_proj.weight"
    bad = plant_weight(decoder, w)
    rep = verify(onnx_lab.open(decoder, dims=DECODER_DIMS), onnx_lab.open(bad, dims=DECODER_DIMS),
                 dims=DECODER_DIMS)
    assert rep.attrs["first_failure"] == f"{L0}/q_proj/MatMul_output_0"
    c = onnx_lab.compare(decoder, bad, dims=DECODER_DIMS)
    d = c.first_divergence
    assert not c.passed and d["node_id"] == f"{L0}/q_proj/MatMul" and d["cause"] == "weights"
    assert d["constant_tensor"] == w


def test_integer_tensors_compare_exactly():
    _, rule = rule_for("int64", output=False, preset="fp16")
    a = np.array([1, 2, 3, 2**60], np.int64)
    assert tensor_metrics(a, a.copy(), rule=rule)["passed"]
    assert tensor_metrics(a, a.astype(np.int32).astype(np.int64), rule=rule)["passed"] is False
    b = a.copy()
    b[-1] += 1  # beyond float64's 2**53: still a difference
    m = tensor_metrics(a, b, rule=rule)
    assert not m["passed"] and m["n_fail"] == 1 and m["max_abs"] >= 1
    assert tensor_metrics(a[:3], a[:3].astype(np.int32), rule=rule)["passed"]  # same values
    assert not tensor_metrics(np.array([True, False]), np.array([True, True]), rule=rule)[
        "passed"]


def test_fused_conv_bn_after_a_removed_identity_is_still_compared():
    # onnxsim folds the BN into the Conv and drops the Identity the Conv read: the fused Conv
    # now reads the Relu output, which holds the Identity's value: still the same quantity.
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxsim")
    assert r.verify_passed
    rep = r.verification.set_index("ref_tensor")
    assert rep.loc["/block1/bn/BatchNormalization_output_0", "node_id"] == "/block1/conv/Conv"
    assert "/block1/bn/BatchNormalization_output_0" not in r.verification.attrs["not_comparable"]


def _shape_onto_transposed(moved: bool) -> onnx.ModelProto:
    """Reference (``moved=False``): Relu → Transpose, and a Shape of the Relu's output whose
    first dim (the batch) is gathered. ``moved``: what a layout rewrite such as onnxruntime's
    transpose optimizer makes of it on tf2onnx's recurrent layers: the Transpose goes above
    the Relu into a tensor of its own, the Shape keeps its name (and its provenance) but
    reads that transposed tensor, and a new Gather takes dim 1. A correct rewrite."""
    f32, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    H = onnx.helper
    stamp = {"onnx_lab.origin": None}

    def node(op, ins, outs, name, **kw):
        n = H.make_node(op, ins, outs, name=name, **kw)
        if moved:
            stamp["onnx_lab.origin"] = f'["{name}"]'
            H.set_metadata_props(n, stamp)
        return n
    if moved:
        nodes = [H.make_node("Transpose", ["x"], ["x_t"], name="T_new", perm=[1, 0, 2]),
                 node("Relu", ["x_t"], ["t"], "R"),
                 node("Shape", ["x_t"], ["S_out"], "S"),
                 H.make_node("Gather", ["S_out", "one"], ["b"], name="G_new", axis=0)]
    else:
        nodes = [node("Relu", ["x"], ["r"], "R"),
                 node("Transpose", ["r"], ["t"], "T", perm=[1, 0, 2]),
                 node("Shape", ["r"], ["s"], "S"),
                 node("Gather", ["s", "zero"], ["b"], "G", axis=0)]
    g = H.make_graph(nodes, "m", [H.make_tensor_value_info("x", f32, ["batch", 7, 16])],
                     [H.make_tensor_value_info("t", f32, [7, "batch", 16]),
                      H.make_tensor_value_info("b", i64, [])],
                     [onnx.numpy_helper.from_array(np.array(k, np.int64), n)
                      for n, k in (("zero", 0), ("one", 1))])
    return onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_a_shape_pointed_at_a_transposed_tensor_of_its_own_is_not_paired():
    ref, cand = _shape_onto_transposed(False), _shape_onto_transposed(True)
    dims = {"batch": 2}
    rep = verify(onnx_lab.open(ref, dims=dims), onnx_lab.open(cand, dims=dims), dims=dims)
    assert rep.attrs["passed"] and rep.attrs["first_failure"] is None, rep.attrs.get("note")
    why = rep.attrs["not_comparable"]["s"]
    assert why.startswith("not the same quantity: candidate node 'S' (Shape) reads 'x_t' of "
                          "shape [7, batch, 16], reference node 'S' reads 'r' of shape "
                          "[batch, 7, 16]"), why
    c = onnx_lab.compare(ref, cand, dims=dims)
    assert c.passed and c.first_divergence is None
    assert pd.isna(c.alignment.set_index("tensor").loc["s", "cand_tensor"])
    # a candidate whose input a tool fixed (batch 2) reads the same tensor: still compared
    fixed = _shape_onto_transposed(False)
    fixed.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    c = onnx_lab.compare(ref, fixed, dims=dims)
    assert c.passed and c.alignment.set_index("tensor").loc["s", "cand_tensor"] == "s"
    # a planted wrong Gather index is caught at the Gather
    wrong = _shape_onto_transposed(True)
    wrong.graph.node[3].input[1] = "zero"
    bad = onnx_lab.compare(ref, wrong, dims=dims)
    assert not bad.passed and bad.first_divergence["tensor"] == "b"


def _shape_of_nhwc(moved: bool) -> onnx.ModelProto:
    """tf2onnx's NHWC layout: Conv (NCHW) -> Transpose -> Relu (NHWC) -> Shape. With symbolic
    H and W the Conv's spatial dims are unknown to shape inference (``[batch, ?, ?, 8]``).
    ``moved``: what onnxruntime's TransposeOptimizer makes of it: the Relu runs in NCHW, the
    Shape (same name) reads the NCHW tensor and a new Gather puts its dims back in NHWC order.
    A correct rewrite: every output is the same."""
    f32, H = onnx.TensorProto.FLOAT, onnx.helper

    def node(op, ins, outs, name, **kw):
        n = H.make_node(op, ins, outs, name=name, **kw)
        if moved:
            H.set_metadata_props(n, {"onnx_lab.origin": f'["{name}"]'})
        return n
    conv = node("Conv", ["x", "w"], ["c"], "C", pads=[1, 1, 1, 1])
    if moved:
        nodes = [conv, node("Relu", ["c"], ["r_nchw"], "R"),
                 H.make_node("Transpose", ["r_nchw"], ["r"], name="T_new", perm=[0, 2, 3, 1]),
                 node("Shape", ["r_nchw"], ["S_out"], "S"),
                 H.make_node("Gather", ["S_out", "perm"], ["s"], name="G_new", axis=0)]
    else:
        nodes = [conv, node("Transpose", ["c"], ["t"], "T", perm=[0, 2, 3, 1]),
                 node("Relu", ["t"], ["r"], "R"), node("Shape", ["r"], ["s"], "S")]
    nodes.append(node("Cast", ["s"], ["sf"], "K", to=f32))
    rng = np.random.default_rng(0)
    g = H.make_graph(nodes, "m", [H.make_tensor_value_info("x", f32, ["batch", 3, "h", "w"])],
                     [H.make_tensor_value_info("r", f32, None),
                      H.make_tensor_value_info("sf", f32, [4])],
                     [onnx.numpy_helper.from_array(
                         rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
                      onnx.numpy_helper.from_array(np.array([0, 2, 3, 1], np.int64), "perm")])
    return onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_a_shape_pointed_at_the_nchw_tensor_with_unknown_spatial_dims_is_not_paired():
    # tf2onnx export + ort:basic: the channels (8) stand last in the reference's shape and
    # second in the candidate's, the spatial dims unknown on both sides; comparing the two
    # Shapes failed a correct step (max_abs 8 under the exact rule)
    ref, cand = _shape_of_nhwc(False), _shape_of_nhwc(True)
    dims = {"batch": 2, "h": 6, "w": 5}
    rep = verify(onnx_lab.open(ref, dims=dims), onnx_lab.open(cand, dims=dims), dims=dims)
    assert rep.attrs["passed"] and rep.attrs["first_failure"] is None, rep.loc[~rep.passed]
    why = rep.attrs["not_comparable"]["s"]
    assert why.startswith("not the same quantity: candidate node 'S' (Shape) reads 'r_nchw' "
                          "of shape [batch, 8, ?, ?]"), why
    # layer by layer too: the Relu that now runs in NCHW (same node name) is not a divergence
    c = onnx_lab.compare(ref, cand, dims=dims, confirm=True)
    assert c.passed and c.first_divergence is None, c.first_divergence
    # a planted wrong Gather order is still caught at the output
    wrong = _shape_of_nhwc(True)
    wrong.graph.initializer[1].CopyFrom(
        onnx.numpy_helper.from_array(np.array([0, 3, 2, 1], np.int64), "perm"))
    bad = verify(onnx_lab.open(ref, dims=dims), onnx_lab.open(wrong, dims=dims), dims=dims)
    assert not bad.attrs["passed"] and bad.attrs["first_failure"] == "s"


def test_a_shape_of_the_nchw_twin_with_no_inferred_shapes_is_not_compared_by_its_values():
    # ort:all on a tf2onnx export: the NCHWc nodes leave no inferred shape downstream, so the
    # pair cannot be refused beforehand; the two Shapes give [2, 6, 5, 8] and [2, 8, 6, 5]
    # (one another's dims in another order), which failed a correct step under the exact rule
    ref, cand = _shape_of_nhwc(False), _shape_of_nhwc(True)
    for m in (ref, cand):  # an input of unknown rank: inference knows no shape below it
        m.graph.input[0].type.tensor_type.ClearField("shape")
    x = {"x": np.random.default_rng(1).standard_normal((2, 3, 6, 5)).astype(np.float32)}
    rep = verify(onnx_lab.open(ref), onnx_lab.open(cand), feeds=x)
    assert rep.attrs["passed"] and rep.attrs["first_failure"] is None, rep.loc[~rep.passed]
    assert "S_out" in rep.attrs["skipped"]  # not comparable element by element
    assert (rep.loc[rep.tensor == "sf", "max_abs"] == 0).all()  # what reads the dims is
    wrong = _shape_of_nhwc(True)
    wrong.graph.input[0].type.tensor_type.ClearField("shape")
    wrong.graph.initializer[1].CopyFrom(
        onnx.numpy_helper.from_array(np.array([0, 3, 2, 1], np.int64), "perm"))
    bad = verify(onnx_lab.open(ref), onnx_lab.open(wrong), feeds=x)
    # caught where the dims are put back (a Gather, not a Shape: compared by value)
    assert not bad.attrs["passed"] and bad.attrs["first_failure"] == "s"
