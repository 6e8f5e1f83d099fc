"""Alignment: every reference tensor listed, subgraph bodies, removed nodes, structure."""

from __future__ import annotations

import onnx
import pandas as pd
from numerics_helpers import convnet, fuse_stem_bn, make_model, vi
from onnx import helper

import onnx_lab
from onnx_lab.numerics.align import ALIGN_COLUMNS, SUBGRAPH_REASON, align


def test_identity_alignment_lists_every_tensor():
    lab = onnx_lab.open("sample:convnet")
    a = align(lab.model, lab.model)
    assert list(a.columns) == ALIGN_COLUMNS
    assert len(a) == len(lab.index)  # one output per node
    assert (a["match"] == "exact").all()
    assert a["is_output"].sum() == 1 and a.loc[a["is_output"], "tensor"].iloc[0] == "logits"
    assert list(a["depth"]) == sorted(a["depth"])


def test_subgraph_tensors_are_listed_with_the_reason():
    lab = onnx_lab.open("sample:control_flow")
    a = align(lab.model, lab.model).set_index("tensor")
    for t in ("then_out", "neg_x", "else_out", "acc_out", "it_out"):
        assert pd.isna(a.loc[t, "cand_tensor"])
        assert a.loc[t, "reason"] == SUBGRAPH_REASON
    assert a.loc["branch_out", "match"] == "exact"
    c = onnx_lab.compare(lab, lab)
    assert c.passed and "it_out" not in set(c.layers["tensor"])


def test_fused_intermediate_has_a_reason():
    ref = convnet()
    a = align(onnx_lab.open(ref).model, onnx_lab.open(fuse_stem_bn(ref, False)).model)
    a = a.set_index("tensor")
    assert a.loc["/stem/bn/BatchNormalization_output_0", "cand_tensor"] == "fused_stem_out"
    assert "fused into" in a.loc["/stem/conv/Conv_output_0", "reason"]


def _chain(names):
    # x -> Relu -> Identity -> Neg -> Sigmoid -> y, with tensor names chosen by the caller
    t0, t1, t2, t3 = names
    nodes = [helper.make_node("Relu", ["x"], [t0], name="n0"),
             helper.make_node("Identity", [t0], [t1], name="n1"),
             helper.make_node("Neg", [t1], [t2], name="n2"),
             helper.make_node("Sigmoid", [t2], [t3], name="n3")]
    return make_model(nodes, [vi("x", [2, 3])], [vi(t3, [2, 3])])


def test_structural_guesses_are_flagged():
    ref = onnx_lab.open(_chain(["a", "b", "c", "y"]))
    # Renamed tensors and nodes, Identity removed.
    m = _chain(["A", "B", "C", "y"])
    g = m.graph
    ident = g.node[1]
    g.node[2].input[0] = "A"
    g.node.remove(ident)
    for n in g.node:
        n.name = n.name.upper()
    a = align(ref.model, onnx_lab.open(m).model).set_index("tensor")
    assert a.loc["y", "match"] == "exact"
    assert a.loc["a", "match"] == "structure" and a.loc["a", "cand_tensor"] == "A"
    assert a.loc["b", "match"] == "structure" and "Identity removed" in a.loc["b", "reason"]
    assert a.loc["c", "cand_tensor"] == "C" and "structural guess" in a.loc["c", "reason"]
    c = onnx_lab.compare(ref, m)
    assert c.passed and len(c.layers) == 4


def test_removed_node_without_counterpart():
    ref = convnet()
    cand = onnx.ModelProto()
    cand.CopyFrom(ref)
    # Drop the dead branch in the candidate.
    dead = [n for n in cand.graph.node if n.name.startswith("/dead/")]
    for n in dead:
        cand.graph.node.remove(n)
    a = align(onnx_lab.open(ref).model, onnx_lab.open(cand).model).set_index("tensor")
    assert "has no counterpart" in a.loc["/dead/Mul_output_0", "reason"]


def test_unread_optional_outputs_are_not_compared():
    # opset 9 Dropout's mask is float, bool from opset 10: comparing light squeezenet with its
    # opset-17 conversion named the mask as the first divergence.
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Dropout", ["r"], ["d", "mask"], name="drop", ratio=0.5),
             helper.make_node("Relu", ["d"], ["y"], name="out")]
    m9 = helper.make_model(helper.make_graph(nodes, "g", [vi("x", [2, 3])], [vi("y", [2, 3])]),
                           opset_imports=[helper.make_opsetid("", 9)])
    lab = onnx_lab.open(m9)
    lab.convert_opset(13)
    c = onnx_lab.compare(lab.original, lab)
    assert c.passed and c.first_divergence is None
    a = c.alignment.set_index("tensor")
    assert pd.isna(a.loc["mask", "cand_tensor"]) and "nothing reads" in a.loc["mask", "reason"]
    assert a.loc["d", "match"] == "exact"
