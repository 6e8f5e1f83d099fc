"""How compare, verification and the precision search measure what is not a float tensor:
sequences element by element, maps key by key, strings for equality (never as float). Both
directions: the model against itself passes; a changed leaf weight or label mapping fails."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ml_models import (
    linear_zipmap,
    optional_model,
    sequence_model,
    string_pipeline,
    tree_zipmap,
)
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import InputError
from onnx_lab.numerics.metrics import MetricAccumulator, Rule, tensor_metrics, value_dtype

CITY = {"city": np.array(["brest", "lyon", "paris", "nowhere", "lille", "lyon"], dtype=object)}


def _row(cmp, name):
    return cmp.outputs.set_index("tensor").loc[name]


def test_strings_compared_for_equality():
    m = tensor_metrics(np.array(["a", "b"], dtype=object), np.array(["a", "b"], dtype=object))
    assert m["passed"] and m["compared_as"] == "equality" and m["max_abs"] == 0
    assert math.isnan(m["cosine"])  # no angle between strings
    m = tensor_metrics(np.array(["a", "b", "c"], dtype=object),
                       np.array(["a", "x", "c"], dtype=object))
    assert not m["passed"] and m["n_fail"] == 1 and "1 strings differ" in m["note"]
    assert "'b' vs 'x'" in m["note"]
    # Whatever the rule: a string that differs is never within a tolerance.
    acc = MetricAccumulator(rule=Rule("sqnr", min_sqnr_db=1.0))
    acc.add(np.array(["a"]), np.array(["b"]))
    assert acc.score() == math.inf


def test_sequences_and_maps_are_walked():
    parts = [np.ones((2, 1), np.float32), np.ones((2, 3), np.float32)]
    m = tensor_metrics(parts, [p.copy() for p in parts])
    assert m["passed"] and m["compared_as"] == "sequence" and m["numel"] == 8
    moved = [parts[0], parts[1] + np.float32(0.5)]
    m = tensor_metrics(parts, moved)
    assert not m["passed"] and m["max_abs"] == pytest.approx(0.5)
    m = tensor_metrics(parts, parts[:1])
    assert not m["passed"] and "length differs (2 vs 1)" in m["note"]
    maps = [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]
    m = tensor_metrics(maps, [dict(d) for d in maps])
    assert m["passed"] and m["compared_as"] == "seq(map)" and m["dtype"] == "float32"
    m = tensor_metrics(maps, [{0: 0.25, 1: 0.75}, {0: 0.5, 2: 0.5}])
    assert not m["passed"] and "keys differ" in m["note"]
    m = tensor_metrics({"a": 1.0}, {"a": 1.0})
    assert m["passed"] and m["compared_as"] == "map"
    # The maps against the tensor they were zipped from (remove_zipmap): rows in key order.
    table = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    assert tensor_metrics(maps, table)["passed"]
    assert not tensor_metrics(maps, table[:, ::-1])["passed"]
    assert value_dtype(maps) == "float32" and value_dtype(np.array(["x"])) == "string"


@pytest.mark.parametrize("build,dims", [
    (linear_zipmap, {"N": 4}), (tree_zipmap, {"N": 4}), (string_pipeline, {"N": 6}),
    (sequence_model, None), (optional_model, None)])
def test_model_against_itself_has_no_divergence(build, dims):
    lab = onnx_lab.open(build(), dims=dims)
    feeds = CITY if build is string_pipeline else None
    cmp = onnx_lab.compare(lab, lab, feeds=feeds)
    assert cmp.passed, cmp.outputs.to_string()
    assert not len(cmp.layers) or cmp.layers["passed"].all(), cmp.layers.to_string()
    assert "compared_as" in cmp.outputs.columns


def test_string_model_against_itself_with_user_feeds():
    # The report's case: a Gather-like reader of the string input was a false "divergence".
    p = string_pipeline()
    cmp = onnx_lab.compare(p, p, feeds=CITY)
    assert cmp.passed
    assert _row(cmp, "region")["compared_as"] == "equality"
    assert _row(cmp, "region")["dtype"] == "string"
    assert _row(cmp, "region")["preset"] == "exact"


def test_uneven_split_to_sequence_compares():
    cmp = onnx_lab.compare(sequence_model(), sequence_model())
    assert cmp.passed
    assert _row(cmp, "parts")["compared_as"] == "sequence"


def test_a_changed_leaf_weight_is_caught():
    ref = onnx_lab.open(tree_zipmap(), dims={"N": 64})
    drift = onnx_lab.open(tree_zipmap(leaf_delta=0.05), dims={"N": 64})
    cmp = onnx_lab.compare(ref, drift)
    assert not cmp.passed
    row = _row(cmp, "output_probability")
    assert row["compared_as"] == "seq(map)" and not row["passed"]
    assert row["max_abs"] == pytest.approx(0.05, rel=1e-3)
    assert _row(cmp, "output_label")["compared_as"] == "numeric"


def test_a_changed_label_mapping_is_caught():
    cmp = onnx_lab.compare(string_pipeline(), string_pipeline(swap=True), feeds=CITY)
    assert not cmp.passed
    row = _row(cmp, "region")
    assert not row["passed"] and row["n_fail"] == 2 and "'rhone' vs 'auvergne'" in row["note"]
    assert _row(cmp, "score")["passed"] and _row(cmp, "city_id")["passed"]


def test_verification_of_a_step_on_maps_and_strings():
    lab = onnx_lab.open(linear_zipmap(), dims={"N": 4})
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed
    lab = onnx_lab.open(string_pipeline(), dims={"N": 4})
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed, r.verification


def test_precision_search_skips_strings():
    lab = onnx_lab.open(string_pipeline(), dims={"N": 6})
    sens = lab.sensitivity("fp16", feeds=CITY)
    assert list(sens["op_type"]) == ["MatMul"]
    plan = lab.find_precision("fp16", feeds=CITY)
    assert plan.passed


def test_int8_with_nothing_to_quantize_says_so_before_calibrating():
    lab = onnx_lab.open(tree_zipmap(zipmap=False, ml_only=True), dims={"N": 4})
    with pytest.raises(InputError, match="ai.onnx.ml ops \\(TreeEnsembleClassifier\\)") as e:
        lab.find_precision("int8")
    assert "calibration" not in str(e.value)
    with pytest.raises(InputError, match="Nothing to convert to fp16"):
        lab.find_precision("fp16")


def test_plots_draw_the_numbers_of_maps_and_refuse_strings():
    pytest.importorskip("matplotlib")
    ref = onnx_lab.open(tree_zipmap(), dims={"N": 16})
    cmp = onnx_lab.compare(ref, onnx_lab.open(tree_zipmap(leaf_delta=0.05), dims={"N": 16}))
    assert cmp.hist("output_probability") is not None
    assert cmp.scatter("output_probability") is not None
    s = onnx_lab.compare(string_pipeline(), string_pipeline(swap=True), feeds=CITY)
    with pytest.raises(InputError, match="'region' cannot be drawn as numbers: strings"):
        s.hist("region")


def test_confirm_mode_on_a_string_drift():
    cmp = onnx_lab.compare(string_pipeline(), string_pipeline(swap=True), feeds=CITY,
                           confirm=True)
    d = cmp.first_divergence
    assert d["node_id"] == "RegionEncoder" and d["confirmed"] and not d["local_passed"]


def test_cli_precision_on_ml_models(tmp_path, capsys):
    import onnx

    from onnx_lab.cli import main

    xgb, strings = tmp_path / "xgb.onnx", tmp_path / "strings.onnx"
    onnx.save(tree_zipmap(zipmap=False, ml_only=True), xgb)
    onnx.save(string_pipeline(), strings)
    assert main(["precision", str(xgb), "--target", "int8", "--dims", "N=4"]) == 2
    err = capsys.readouterr().err
    assert "Nothing to convert to int8" in err and "calibration failed" not in err
    assert main(["precision", str(strings), "--target", "fp16", "--dims", "N=4"]) == 0
    assert "fp16:" in capsys.readouterr().out


def _relabelled(labels: list[int], zipmap: bool = True):
    """linear_zipmap with class labels ``labels`` (the probabilities' columns follow them);
    without its ZipMap, the probabilities tensor is the output."""
    import onnx
    from onnx import TensorProto, helper

    m = linear_zipmap()
    for n in m.graph.node:
        for a in n.attribute:
            if a.name in ("classlabels_ints", "classlabels_int64s"):
                a.ints[:] = labels
    if not zipmap:
        zm = next(n for n in m.graph.node if n.op_type == "ZipMap")
        m.graph.node.remove(zm)
        out = next(o for o in m.graph.output if o.name == "output_probability")
        out.CopyFrom(helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                                   ["N", 3]))
    onnx.checker.check_model(m)
    return m


def test_zipmap_maps_pair_with_the_tensor_by_its_labels():
    # labels [2, 0, 1]: the tensor's columns follow them; the maps were read in sorted-key
    # order and a correct copy without its ZipMap failed (max_abs 0.99)
    same = onnx_lab.compare(_relabelled([2, 0, 1]), _relabelled([2, 0, 1], zipmap=False),
                            dims={"N": 8})
    assert same.passed, same.summary_text()
    # columns really out of the labels' order still fail (a Gather permutes them)
    from onnx import helper, numpy_helper

    swapped = _relabelled([2, 0, 1], zipmap=False)
    lc = next(n for n in swapped.graph.node if n.op_type == "LinearClassifier")
    lc.output[1] = "p_raw"
    swapped.graph.initializer.append(numpy_helper.from_array(np.array([1, 2, 0]), "perm"))
    swapped.graph.node.append(helper.make_node("Gather", ["p_raw", "perm"], ["probabilities"],
                                               axis=1))
    bad = onnx_lab.compare(_relabelled([2, 0, 1]), swapped, dims={"N": 8})
    assert not bad.passed
    assert bad.outputs.set_index("tensor").loc["output_label", "passed"]


def _class_labels_model(labels):
    # skl2onnx's options={'output_class_labels': True}: the classes as a third output, an
    # Identity of a constant
    from onnx import TensorProto, helper, numpy_helper

    coef = np.arange(9, dtype=np.float32) / 9
    nodes = [helper.make_node("Identity", ["class_labels_cst"], ["class_labels"], name="N2"),
             helper.make_node("LinearClassifier", ["X"], ["label", "probabilities"],
                              domain="ai.onnx.ml", name="LinearClassifier",
                              classlabels_ints=[0, 1, 2], coefficients=coef.tolist(),
                              intercepts=[0.1, -0.2, 0.05], multi_class=1,
                              post_transform="SOFTMAX")]
    g = helper.make_graph(
        nodes, "labels", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("class_labels", TensorProto.INT64, [3])],
        [numpy_helper.from_array(np.array(labels, np.int64), "class_labels_cst")])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 15),
                                            helper.make_operatorsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    return m


def test_an_output_made_of_weights_alone_is_a_divergence():
    ref = onnx_lab.open(_class_labels_model([0, 1, 2]), dims={"N": 4})
    assert onnx_lab.compare(ref, ref).first_divergence is None
    c = onnx_lab.compare(ref, onnx_lab.open(_class_labels_model([2, 1, 0]), dims={"N": 4}))
    assert not c.passed
    div = c.first_divergence
    assert div is not None and div["tensor"] == "class_labels" and div["node_id"] == "N2"
    assert div["cause"] == "weights" and div["constant_tensor"] == "class_labels_cst"


def test_a_candidate_that_refuses_what_the_reference_takes_is_named_as_such():
    # an encoder that lost a category refused one the reference knows; the fix blamed the
    # seeded inputs ("may be invalid for this model: pass feeds= of real values")
    from onnx_lab.errors import RuntimeLoadError

    def encoder(cats):
        g = helper.make_graph(
            [helper.make_node("OneHotEncoder", ["c"], ["hot"], domain="ai.onnx.ml",
                              cats_strings=cats, zeros=0)],
            "ohe", [helper.make_tensor_value_info("c", TensorProto.STRING, ["N"])],
            [helper.make_tensor_value_info("hot", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 3)])
        m.ir_version = 8
        return m

    with pytest.raises(RuntimeLoadError) as e:
        onnx_lab.compare(encoder(["red", "green", "blue"]), encoder(["red", "green", "bleu"]),
                         dims={"N": 6})
    assert "candidate" in e.value.problem and "Unknown Category" in e.value.problem
    assert "reference model ran on these same inputs" in e.value.fix
    assert "feeds= of real values" not in e.value.fix
