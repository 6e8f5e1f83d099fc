"""ONNX-ML models open and every feature reads them: maps, sequences of maps (ZipMap),
sequences of tensors, optionals and string tensors (models built in tests/ml_models.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ml_models import (
    CITIES,
    dict_input_model,
    linear_zipmap,
    optional_model,
    sequence_input_model,
    sequence_model,
    string_pipeline,
    tree_zipmap,
)
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import InputError, ModelLoadError, PassError, RuntimeLoadError
from onnx_lab.numerics import make_feeds
from onnx_lab.runtime.feeds import as_feed_list

ALL = {
    "linear_zipmap": (linear_zipmap, {"N": 3}),
    "tree_zipmap": (tree_zipmap, {"N": 3}),
    "strings": (string_pipeline, {"N": 3}),
    "sequence": (sequence_model, None),
    "sequence_input": (sequence_input_model, None),
    "optional": (optional_model, None),
    "dict_input": (dict_input_model, None),
    "xgboost": (lambda: tree_zipmap(zipmap=False, ml_only=True), {"N": 3}),
}


@pytest.fixture(params=sorted(ALL))
def ml_lab(request, tmp_path):
    build, dims = ALL[request.param]
    path = tmp_path / f"{request.param}.onnx"
    onnx.save(build(), path)
    return onnx_lab.open(path, dims=dims)


def test_type_column_spells_containers():
    lab = onnx_lab.open(linear_zipmap(), dims={"N": 3})
    out = lab.outputs.set_index("name")
    assert out.loc["output_probability", "dtype"] == "seq(map(int64,float))"
    assert out.loc["output_probability", "shape"] is None
    assert out.loc["output_label", "dtype"] == "int64"
    tensors = lab.tensors.set_index("name")
    assert tensors.loc["probabilities", "dtype"] == "float32"
    assert tensors.loc["output_probability", "dtype"] == "seq(map(int64,float))"
    assert onnx_lab.open(sequence_model()).tensors.set_index("name").loc[
        "parts", "dtype"] == "seq(float)"
    assert onnx_lab.open(optional_model()).outputs.set_index("name").loc[
        "maybe", "dtype"] == "optional(float)"
    assert list(onnx_lab.open(dict_input_model()).inputs["dtype"]) == ["map(int64,float)"]
    assert list(onnx_lab.open(string_pipeline(), dims={"N": 2}).inputs["dtype"]) == ["string"]


def test_every_feature_reads_the_model(ml_lab, tmp_path):
    assert "<" in ml_lab.summary()._repr_html_()
    ml_lab.check()
    assert len(ml_lab.nodes) == len(ml_lab.model.index.entries)
    svg = ml_lab.render()._repr_svg_() if hasattr(ml_lab.render(), "_repr_svg_") else \
        str(ml_lab.render())
    assert svg
    ml_lab.patterns()
    c = ml_lab.cost()
    assert len(c.nodes) == len(ml_lab.nodes)
    cmp = onnx_lab.compare(ml_lab, ml_lab)
    assert cmp.passed, cmp.outputs.to_string()
    results = ml_lab.apply_preset("safe")
    assert all(r.verify_passed is not False for r in results)
    prof = ml_lab.profile(runs=2, warmup=1)
    assert prof is not None
    report = ml_lab.report(tmp_path / "report.html")
    assert report.read_text().startswith("<!")


def test_save_round_trip_keeps_the_map_type(tmp_path):
    lab = onnx_lab.open(linear_zipmap(), dims={"N": 3})
    lab.apply("eliminate_identity")
    out = lab.save(tmp_path / "saved.onnx")
    proto = onnx.load(out)
    t = next(o for o in proto.graph.output if o.name == "output_probability").type
    assert t.sequence_type.elem_type.map_type.key_type == TensorProto.INT64
    assert t.sequence_type.elem_type.map_type.value_type.tensor_type.elem_type == \
        TensorProto.FLOAT
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"X": np.ones((2, 3), np.float32)})
    assert isinstance(got[1], list) and set(got[1][0]) == {0, 1, 2}


def test_map_with_a_float_key_is_refused():
    m = dict_input_model()
    m.graph.input[0].type.map_type.key_type = TensorProto.FLOAT
    with pytest.raises(ModelLoadError, match="key type"):
        onnx_lab.open(m)


def test_string_feeds_come_from_the_graph_vocabulary():
    lab = onnx_lab.open(string_pipeline(), dims={"N": 16})
    a, b = make_feeds(lab, seed=3), make_feeds(lab, seed=3)
    city = a["city"]
    assert city.dtype == object and city.shape == (16,)
    assert set(city) <= set(CITIES) and len(set(city)) > 1
    assert list(city) == list(b["city"])  # deterministic
    assert list(make_feeds(lab, seed=4)["city"]) != list(city)


def test_string_feeds_reach_the_vocabulary_through_a_column_gather():
    # skl2onnx's ColumnTransformer picks the column with a Gather before a OneHotEncoder
    # with zeros=0 (an unknown category fails the run): made-up words made every fp16/int8
    # search of such a pipeline fail on the generated feeds.
    g = helper.make_graph(
        [helper.make_node("Gather", ["city", "col"], ["picked"], name="pick", axis=1),
         helper.make_node("OneHotEncoder", ["picked"], ["onehot"], domain="ai.onnx.ml",
                          name="OneHotEncoder", cats_strings=CITIES, zeros=0),
         # the other way: ids index a table whose values a LabelEncoder knows; the ids are
         # not those values (7, 8, 9 would be out of the table's bounds)
         helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0),
         helper.make_node("LabelEncoder", ["rows"], ["code"], domain="ai.onnx.ml",
                          name="LabelEncoder", keys_int64s=[7, 8, 9], values_int64s=[1, 2, 3])],
        "cols", [helper.make_tensor_value_info("city", TensorProto.STRING, ["N", 2]),
                 helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("onehot", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("code", TensorProto.INT64, ["N"])],
        [helper.make_tensor("col", TensorProto.INT64, [1], [0]),
         helper.make_tensor("table", TensorProto.INT64, [3], [7, 8, 9])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    lab = onnx_lab.open(m, dims={"N": 6})
    feeds = make_feeds(lab, seed=0)
    assert set(feeds["city"].ravel()) <= set(CITIES)
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 3
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    onehot, code = sess.run(None, feeds)
    assert onehot.sum() == 6 and set(code) <= {1, 2, 3}
    assert onnx_lab.compare(m, m, dims={"N": 6}).passed


def test_string_feeds_without_a_vocabulary_are_short_words():
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g",
                          [helper.make_tensor_value_info("s", TensorProto.STRING, [4])],
                          [helper.make_tensor_value_info("t", TensorProto.STRING, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17)])
    m.ir_version = 8
    s = make_feeds(onnx_lab.open(m))["s"]
    assert s.shape == (4,) and all(isinstance(x, str) and 0 < len(x) < 10 for x in s)
    assert onnx_lab.compare(m, m).passed


def test_sequence_and_map_feeds():
    seq = make_feeds(onnx_lab.open(sequence_input_model()))["sequence"]
    assert isinstance(seq, list) and len(seq) == 2
    assert all(x.shape == (2, 3) and x.dtype == np.float32 for x in seq)
    feats = make_feeds(onnx_lab.open(dict_input_model()))["features"]
    assert isinstance(feats, dict) and set(feats) == {1, 2, 3}  # DictVectorizer's vocabulary
    assert all(isinstance(v, float) for v in feats.values())


def test_a_sequence_without_element_shape_is_demanded_by_name():
    lab = onnx_lab.open(sequence_input_model(None))
    with pytest.raises(InputError, match="'sequence'") as e:
        make_feeds(lab)
    assert "feeds=" in e.value.fix
    feeds = {"sequence": [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)]}
    cmp = onnx_lab.compare(lab, lab, feeds=feeds)
    assert cmp.passed
    with pytest.raises(InputError, match="list of numpy arrays"):
        as_feed_list({"sequence": np.ones((2, 3), np.float32)}, lab)


def test_string_feed_of_numbers_is_refused():
    lab = onnx_lab.open(string_pipeline(), dims={"N": 2})
    with pytest.raises(InputError, match="strings"):
        as_feed_list({"city": np.array([1.0, 2.0])}, lab)


def test_onnxslim_on_an_ml_only_model_gives_the_true_reason():
    pytest.importorskip("onnxslim")
    lab = onnx_lab.open(tree_zipmap(zipmap=False, ml_only=True), dims={"N": 3})
    with pytest.raises(PassError, match="ai.onnx opset") as e:
        lab.apply("onnxslim")
    assert "skip_fusion_patterns" not in str(e.value) + e.value.fix


def test_onnxslim_on_a_zipmap_output_points_to_remove_zipmap():
    pytest.importorskip("onnxslim")
    lab = onnx_lab.open(tree_zipmap(), dims={"N": 3})
    with pytest.raises(PassError, match="changed output output_probability") as e:
        lab.apply("onnxslim")
    assert "lab.apply('remove_zipmap') first turns output_probability into the " \
        "probabilities tensor" in str(e.value)
    lab.apply("remove_zipmap")  # what the message says, then onnxslim verifies
    r = lab.apply("onnxslim")
    assert r.verify_passed in (True, None)


def test_onnxslim_failing_on_a_map_input_says_it_is_the_map():
    pytest.importorskip("onnxslim")
    from ml_models import dict_input_model

    lab = onnx_lab.open(dict_input_model())
    try:
        r = lab.apply("onnxslim")
    except PassError as e:  # onnxslim 0.1.98 fails on it
        assert e.fix.startswith("onnxslim handles tensor inputs, and 'features' is a map or "
                                "sequence")
        assert "dims= at open" not in e.fix
    else:  # a later onnxslim that handles it is verified as any other
        assert r.verify_passed in (True, None)


# ----------------------------------------------------------------- real exporters (optional)
def test_skl2onnx_classifier_with_zipmap_opens_and_compares(tmp_path):
    skl2onnx = pytest.importorskip("skl2onnx")
    sklearn = pytest.importorskip("sklearn")
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    del sklearn
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1)
    for est in (LogisticRegression(max_iter=200), RandomForestClassifier(4, max_depth=3,
                                                                          random_state=0)):
        est.fit(x, y)
        onx = skl2onnx.to_onnx(est, x[:1])
        lab = onnx_lab.open(onx, shapes={onx.graph.input[0].name: [8, 4]})
        assert "seq(map(int64,float))" in set(lab.outputs["dtype"])
        assert onnx_lab.compare(lab, lab).passed
        c = lab.cost()
        assert not c.nodes.loc[c.nodes.domain == "ai.onnx.ml", "known"].eq(False).any()
        r = lab.apply("remove_zipmap")
        assert r.modified and r.verify_passed


def test_onnxmltools_lightgbm_classifier():
    pytest.importorskip("onnxmltools")
    lightgbm = pytest.importorskip("lightgbm")
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    rng = np.random.default_rng(1)
    x = rng.standard_normal((80, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    est = lightgbm.LGBMClassifier(n_estimators=4, num_leaves=4, verbose=-1).fit(x, y)
    onx = onnxmltools.convert_lightgbm(est, initial_types=[("X", FloatTensorType([None, 4]))],
                                       zipmap=True)
    lab = onnx_lab.open(onx, shapes={"X": [8, 4]})
    assert "seq(map(int64,float))" in set(lab.outputs["dtype"])
    assert onnx_lab.compare(lab, lab).passed
    tree = lab.cost().nodes.set_index("op_type").loc["TreeEnsembleClassifier"]
    assert tree["known"] and tree["flops"] > 0
    with pytest.raises(InputError, match="Nothing to convert to int8"):
        lab.find_precision("int8")
    r = lab.apply("remove_zipmap")
    assert r.modified and r.verify_passed


def test_precision_search_on_feeds_the_original_cannot_run_blames_the_feeds():
    g = helper.make_graph(
        [helper.make_node("OneHotEncoder", ["city"], ["onehot"], domain="ai.onnx.ml",
                          name="OneHotEncoder", cats_strings=CITIES, zeros=0),
         helper.make_node("Reshape", ["onehot", "flat"], ["rows"], name="rows"),
         helper.make_node("MatMul", ["rows", "w"], ["y"], name="score")],
        "onehot", [helper.make_tensor_value_info("city", TensorProto.STRING, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1])],
        [helper.make_tensor("flat", TensorProto.INT64, [2], [4, len(CITIES)]),
         helper.make_tensor("w", TensorProto.FLOAT, [len(CITIES), 1],
                            np.linspace(0.1, 1, len(CITIES)).tolist())])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    lab = onnx_lab.open(m)
    bad = {"city": np.array(["nowhere"] * 4, dtype=object)}
    for target in ("fp16", "bf16"):
        with pytest.raises(RuntimeLoadError, match="failed to run the original model") as e:
            lab.find_precision(target, feeds=bad)
        assert "Keep the failing node" not in str(e.value) + (e.value.fix or "")
        assert "feeds" in e.value.fix
    assert lab.find_precision("fp16").passed  # the generated feeds are categories it knows
