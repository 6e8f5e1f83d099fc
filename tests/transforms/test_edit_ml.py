"""Edits on what ONNX-ML exports hold: string initializers (a classifier's class labels),
string tensors and a ZipMap's seq(map) output. Each ended in a raw exception."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ml_models import linear_zipmap
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.errors import InputError, PassError


def _labelled() -> onnx.ModelProto:
    """label = classes[argmax(X)]: the string class labels of a GaussianNB as skl2onnx
    writes them, a STRING initializer read by an index."""
    classes = numpy_helper.from_array(np.array([b"cat", b"dog", b"eel"], dtype=object),
                                      "classes")
    nodes = [helper.make_node("ArgMax", ["X"], ["idx"], name="argmax", axis=1, keepdims=0),
             helper.make_node("Gather", ["classes", "idx"], ["label"], name="gather")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                     ["N", 3])],
                          [helper.make_tensor_value_info("label", TensorProto.STRING, ["N"])],
                          [classes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


X = np.array([[0, 1, 0], [3, 1, 2], [0, 0, 5]], np.float32)


def _labels(path) -> list[str]:
    return list(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"X": X})[0])


@pytest.mark.parametrize("as_file", [False, True])
def test_class_labels_are_replaced_by_strings(tmp_path, as_file):
    src = tmp_path / "m.onnx"
    onnx.save(_labelled(), src)
    lab = onnx_lab.open(src, dims={"N": 3})
    new = np.array(["Cat", "Dog", "Eel"])  # numpy strings, as numpy.save keeps them
    if as_file:
        np.save(tmp_path / "classes.npy", new)
        new = str(tmp_path / "classes.npy")
    r = lab.apply("replace_initializer", initializer="classes", value=new)
    assert r.modified and r.outputs_changed is True
    out = lab.save(tmp_path / "out" / "m.onnx")
    assert _labels(src) == ["dog", "cat", "eel"]
    assert _labels(out) == ["Dog", "Cat", "Eel"]


def test_class_labels_refuse_numbers_and_an_object_npy_says_what_to_save(tmp_path):
    lab = onnx_lab.open(_labelled(), dims={"N": 3})
    with pytest.raises(PassError, match="holds int64 values; the initializer holds strings"):
        lab.apply("replace_initializer", initializer="classes", value=np.arange(3))
    np.save(tmp_path / "obj.npy", np.array(["a", "b", "c"], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match=r"arr\.astype\(str\)"):
        lab.apply("replace_initializer", initializer="classes", value=str(tmp_path / "obj.npy"))


def test_a_node_after_a_string_output_is_added_and_verified():
    lab = onnx_lab.open(_labelled(), dims={"N": 3})
    r = lab.apply("add_node", tensor="label", op_type="Identity")
    assert r.modified and r.verify_passed


def test_a_node_after_a_zipmap_output_is_checked_by_onnx_not_a_raw_error():
    lab = onnx_lab.open(linear_zipmap(), dims={"N": 3})
    # no standard op takes seq(map) (ONNX's type constraints): refused, saying why, with
    # the model unchanged
    n = len(lab.version_history)
    for op in ("Identity", "SequenceLength"):
        with pytest.raises(PassError, match="seq\\(map"):
            lab.apply("add_node", tensor="output_probability", op_type=op)
    assert len(lab.version_history) == n


def test_an_output_onnx_cannot_type_is_typed_from_a_run(tmp_path):
    # ONNX has no type inference for TreeEnsembleClassifier: add_output("probabilities")
    # said "its dtype is unknown ... Set the input shapes first", which cannot help
    from ml_models import tree_zipmap

    m = tree_zipmap()
    for imp in m.opset_import:  # skl2onnx's ai.onnx.ml 1, whose classifier ONNX cannot type
        if imp.domain == "ai.onnx.ml":
            imp.version = 1
    lab = onnx_lab.open(m, dims={"N": 4})
    assert lab.tensors.set_index("name").loc["probabilities", "shape"] is None
    r = lab.apply("add_output", tensor="probabilities")
    assert r.modified and r.verify_passed
    assert any("type and rank read from one run (ai.onnx.ml::TreeEnsembleClassifier" in n
               for n in r.notes), r.notes
    row = lab.outputs.set_index("name").loc["probabilities"]
    assert row["dtype"] == "float32" and len(row["shape"]) == 2
    out = lab.save(tmp_path / "m.onnx")
    x = np.array([[0.1, -1], [2, 3]], np.float32)
    probs, maps = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        ["probabilities", "output_probability"], {"X": x})
    assert probs.shape == (2, 2)
    np.testing.assert_array_equal(probs, [[m[0], m[1]] for m in maps])  # what ZipMap zips



def test_a_scalar_weight_keeps_its_rank_when_replaced_or_scaled(tmp_path):
    # every dynamo export holds 0-d initializers; np.ascontiguousarray made them 1-d and the
    # step was refused ("rank (1) vs (0)") or, scaled, saved as [1]
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                          [helper.make_tensor("b", TensorProto.FLOAT, [], [1.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    for value in (np.array(2.0, np.float32), np.float32(2.0)):
        lab = onnx_lab.open(m)
        r = lab.replace_initializer("b", value)
        assert r.modified and r.outputs_changed is True
        assert list(lab.model.to_proto().graph.initializer[0].dims) == []
    lab = onnx_lab.open(m)
    lab.scale_initializer("b", 3.0)
    init = lab.model.to_proto().graph.initializer[0]
    assert list(init.dims) == [] and numpy_helper.to_array(init) == 3.0


@pytest.mark.parametrize("cut", [{"inputs": ["X"], "outputs": ["probabilities"]},
                                 {"nodes": ["ZipMap"]}])
def test_extract_at_a_tensor_onnx_cannot_type(tmp_path, cut):
    # skl2onnx's RandomForest: extract failed "Field 'type' of 'value_info' is required"
    from ml_models import tree_zipmap

    m = tree_zipmap()
    for imp in m.opset_import:
        if imp.domain == "ai.onnx.ml":
            imp.version = 1
    lab = onnx_lab.open(m, dims={"N": 4})
    sub = lab.extract(**cut)
    assert sub.results[0].verify_passed
    out = sub.save(tmp_path / "sub.onnx")
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    x = np.array([[0.1, -1], [2, 3]], np.float32)
    maps = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        ["output_probability"], {"X": x})[0]
    want = np.array([[d[0], d[1]] for d in maps], np.float32)  # what the ZipMap zipped
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    if "nodes" in cut:  # the ZipMap alone, fed the probabilities
        maps = sess.run(None, {"probabilities": want})[0]
        np.testing.assert_array_equal([[d[0], d[1]] for d in maps], want)
    else:
        np.testing.assert_array_equal(sess.run(None, {"X": x})[0], want)
