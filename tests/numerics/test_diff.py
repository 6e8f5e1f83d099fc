"""diff(): added, removed and changed nodes, provenance, structure, rendering."""

from __future__ import annotations

import json

import onnx
from ml_models import tree_zipmap
from numerics_helpers import convnet, fuse_stem_bn, scaled_copy
from onnx import helper

import onnx_lab
from onnx_lab.numerics.diff import DIFF_COLUMNS, diff


def _modified():
    m = scaled_copy(convnet(), "block1.conv.weight", 2.0)
    g = m.graph
    for n in g.node:
        if n.name == "/block1/pool/MaxPool":
            for a in n.attribute:
                if a.name == "kernel_shape":
                    a.ints[:] = [3, 3]
    ident = next(n for n in g.node if n.op_type == "Identity")
    for n in g.node:
        for i, x in enumerate(n.input):
            if x == ident.output[0]:
                n.input[i] = ident.input[0]
    g.node.remove(ident)
    for n in g.node:
        if n.output[0] == "logits":
            n.output[0] = "pre"
    g.node.append(helper.make_node("Neg", ["pre"], ["logits"], name="neg"))
    return m


def test_identical_models_have_no_differences():
    d = diff("sample:convnet", "sample:convnet")
    assert d.empty and list(d.table.columns) == DIFF_COLUMNS
    assert d.counts == {"added": 0, "removed": 0, "changed": 0}


def test_added_removed_changed():
    d = diff(convnet(), _modified())
    t = d.table.set_index(d.table["node_id_a"].fillna(d.table["node_id_b"]))
    assert d.counts == {"added": 1, "removed": 1, "changed": 2}
    assert t.loc["/stem/identity/Identity", "change"] == "removed"
    assert t.loc["neg", "change"] == "added"
    conv = t.loc["/block1/conv/Conv"]
    assert conv["weights"] == ["block1.conv.weight"] and "values changed" in conv["details"]
    assert conv["inputs"] == []  # reads the Relu output directly: the removed Identity's value
    assert "/dead/Mul" not in t.index  # same: not a change
    pool = t.loc["/block1/pool/MaxPool"]
    assert pool["attributes"] == ["kernel_shape"] and "[2, 2] -> [3, 3]" in pool["details"]
    hl = d.highlight("b")
    assert hl["neg"] == "green" and hl["/block1/pool/MaxPool"] == "orange"
    assert d.highlight("a")["/stem/identity/Identity"] == "red"
    assert "<table" in d.to_html()


def test_fusion_matched_by_provenance():
    ref = convnet()
    fused = fuse_stem_bn(ref, keep_conv_name=False)
    # Rename the fused node so only provenance can match it.
    for n in fused.graph.node:
        if n.name == "/stem/conv/Conv":
            n.name = "fused_conv"
    d = diff(ref, fused)
    t = d.table.set_index(d.table["node_id_a"].fillna(d.table["node_id_b"]))
    conv = t.loc["/stem/conv/Conv"]
    assert conv["match"] == "provenance" and conv["node_id_b"] == "fused_conv"
    assert "fused from" in conv["details"] and conv["weights"]
    bn = t.loc["/stem/bn/BatchNormalization"]
    assert bn["change"] == "removed" and "fused into 'fused_conv'" in bn["details"]
    assert d.counts["added"] == 0


def test_structure_matches_renamed_nodes():
    m = onnx.ModelProto()
    m.CopyFrom(convnet())
    for n in m.graph.node:
        n.name = ""  # ids become Op_position, mostly unlike the original names
    d = diff(convnet(), m)
    assert d.counts["added"] == 0 and d.counts["removed"] == 0
    assert set(d.table["match"]) <= {"structure", "name"}
    assert (d.table["details"].str.startswith("renamed")).all()


def test_render_colours_changes():
    d = diff(convnet(), _modified())
    r = d.render()
    assert "neg" in r.nodes
    assert "orange" in r.dot


def test_lab_diff_and_cli_json(capsys):
    from onnx_lab.cli import main

    lab = onnx_lab.open("sample:convnet")
    assert lab.diff(lab).empty
    assert main(["diff", "sample:convnet", "sample:convnet", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {"added": 0, "removed": 0, "changed": 0} and out["nodes"] == []


def test_diff_after_real_transforms():
    import pytest

    from onnx_lab.errors import LabError

    orig = onnx_lab.open("sample:convnet")
    lab = onnx_lab.open("sample:convnet")
    try:
        lab.apply("fuse_conv_bn", verify=False)
    except (AttributeError, LabError) as e:
        pytest.skip(f"transforms not available: {e}")
    d = diff(orig, lab)
    t = d.table.set_index("node_id_a")
    assert t.loc["/stem/bn/BatchNormalization", "details"] == "fused into '/stem/conv/Conv'"
    assert "fused from" in t.loc["/stem/conv/Conv", "details"]
    assert "/stem/relu/Relu" not in t.index  # its input is the fused value: unchanged
    c = onnx_lab.compare(orig, lab)
    assert c.passed and c.first_divergence is None
    a = c.alignment.set_index("tensor")
    assert a.loc["/stem/bn/BatchNormalization_output_0", "match"] == "exact"  # fused Conv keeps its name


def test_constant_node_folded_into_an_initializer_is_not_a_change_of_its_consumer():
    import numpy as np
    from numerics_helpers import make_model, vi
    from onnx import numpy_helper

    shape = np.array([3, 2], np.int64)
    a = make_model([helper.make_node("Constant", [], ["s"], name="const",
                                     value=numpy_helper.from_array(shape)),
                    helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
                   [vi("x", [2, 3])], [vi("y", [3, 2])])
    b = make_model([helper.make_node("Reshape", ["x", "shape_init"], ["y"], name="reshape")],
                   [vi("x", [2, 3])], [vi("y", [3, 2])],
                   [numpy_helper.from_array(shape, "shape_init")])
    d = diff(a, b)
    assert d.counts == {"added": 0, "removed": 1, "changed": 0}
    c = diff(a, make_model([helper.make_node("Reshape", ["x", "s2"], ["y"], name="reshape")],
                           [vi("x", [2, 3])], [vi("y", [3, 2])],
                           [numpy_helper.from_array(np.array([1, 6], np.int64), "s2")]))
    row = c.table.set_index("node_id_a").loc["reshape"]
    assert row["weights"] == ["s2"] and "values changed" in row["details"]
    assert onnx_lab.diff is diff


def test_links_op_counts_and_the_reverse_direction():
    ref = convnet()
    fused = fuse_stem_bn(ref, keep_conv_name=False)
    for n in fused.graph.node:
        if n.op_type == "Conv" and "stem" in n.name:
            n.name = "fused_conv"
    d = diff(ref, fused)
    a2b, b2a = d.links()
    assert sorted(b2a["fused_conv"]) == ["/stem/bn/BatchNormalization", "/stem/conv/Conv"]
    assert a2b["/stem/bn/BatchNormalization"] == ["fused_conv"]
    assert a2b["/block1/conv/Conv"] == ["/block1/conv/Conv"]  # unchanged: one to one
    ops = d.op_counts().set_index("op_type")
    assert ops.loc["BatchNormalization", "delta"] == -1
    assert ops.loc["BatchNormalization", "removed"] == 1
    assert ops.loc["Conv", "delta"] == 0 and ops.loc["Conv", "changed"] == 1
    assert ops.index[0] in ("BatchNormalization", "Conv")  # what moved comes first
    # The other way round (a is the later version): its stamps still link the fusion.
    r = diff(fused, ref)
    t = r.table.set_index(r.table["node_id_a"].fillna(r.table["node_id_b"]))
    assert t.loc["fused_conv", "match"] == "provenance"
    assert t.loc["/stem/bn/BatchNormalization", "change"] == "added"
    assert t.loc["/stem/bn/BatchNormalization", "related"] == ["fused_conv"]
    assert r.links()[1]["/stem/bn/BatchNormalization"] == ["fused_conv"]


def test_output_types_reported_only_for_changed_nodes():
    d = diff(convnet(), _modified())
    t = d.table.set_index(d.table["node_id_a"].fillna(d.table["node_id_b"]))
    pool = t.loc["/block1/pool/MaxPool"]
    assert pool["outputs"] == ["0"] and "output 0:" in pool["details"]
    # Nodes after the pool see other shapes but did not change: no row for them.
    assert "/block2/conv/Conv" not in t.index


def test_an_attribute_written_out_at_its_default_is_no_change():
    # ort:extended writes Gather's axis=0 and LayerNormalization's stash_type=1 out: 11 of
    # the 24 "changed" nodes of optimum BERT's diff were only that
    def model(**attrs):
        g = helper.make_graph(
            [helper.make_node("Gather", ["x", "i"], ["g"], name="gather", **attrs),
             helper.make_node("Relu", ["g"], ["y"], name="relu")], "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 2])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])],
            [onnx.numpy_helper.from_array(__import__("numpy").array([0, 3]), "i")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    assert diff(model(), model(axis=0)).empty
    assert diff(model(axis=0), model()).empty
    d = diff(model(), model(axis=1))  # another value is a change
    assert d.table.set_index("node_id_a").loc["gather", "attributes"] == ["axis"]


def test_a_long_list_attribute_shows_what_differs():
    # a tree ensemble's thresholds: one changed value printed both lists whole (264 floats
    # each for a 10-tree forest, a line of 6.7 KB) and did not say which value changed
    a, b = tree_zipmap(), tree_zipmap()
    values = next(x for x in b.graph.node[0].attribute if x.name == "nodes_values")
    values.floats[2] += 0.25
    row = diff(onnx_lab.open(a), onnx_lab.open(b)).table.set_index("node_id_a").loc[
        "TreeEnsembleClassifier"]
    assert row["attributes"] == ["nodes_values"]
    assert "nodes_values: 14 values, 1 differ (first at [2]: -0.5 -> -0.25, max_abs 0.25)" \
        in row["details"]
    assert len(row["details"]) < 200
    # short lists stay whole
    c = tree_zipmap()
    labels = next(x for n in c.graph.node for x in n.attribute if x.name == "classlabels_int64s")
    labels.ints[:] = [1, 0]
    row = diff(onnx_lab.open(a), onnx_lab.open(c)).table.set_index("node_id_a").loc[
        "TreeEnsembleClassifier"]
    assert "classlabels_int64s: [0, 1] -> [1, 0]" in row["details"]


def test_a_nan_in_an_attribute_is_no_change():
    # NaN != NaN: an Imputer's replaced_value_float=NaN (scikit-learn's SimpleImputer) made a
    # model and its own copy one changed node, and a list of more than 8 floats holding a NaN
    # raised IndexError (no element differed)
    def model(vals, replaced):
        node = helper.make_node("Imputer", ["x"], ["y"], domain="ai.onnx.ml",
                                imputed_value_floats=vals, replaced_value_float=replaced)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            "x", onnx.TensorProto.FLOAT, [2, len(vals)])], [helper.make_tensor_value_info(
                "y", onnx.TensorProto.FLOAT, [2, len(vals)])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 3)])

    nan = float("nan")
    assert diff(model([0.0, 1.0, 2.0], nan), model([0.0, 1.0, 2.0], nan)).empty
    long = [0.0] * 9
    long[3] = nan
    assert diff(model(long, -1.0), model(list(long), -1.0)).empty
    other = list(long)
    other[5] = 0.5
    d = diff(model(long, -1.0), model(other, -1.0))
    assert "9 values, 1 differ (first at [5]: 0.0 -> 0.5, max_abs 0.5)" in \
        d.table.iloc[0]["details"]
