"""remove_zipmap: a classifier's seq(map) output becomes the probabilities tensor; structure,
values against the unmodified model's maps, the refusals and the no-op case."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from _passkit import apply, ops
from ml_models import linear_zipmap, sequence_model, tree_zipmap
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.runtime.capture import run
from onnx_lab.runtime.feeds import make_feeds


def _open(proto, n=6):
    return onnx_lab.open(proto, dims={"N": n}).model


def test_zipmap_output_becomes_the_tensor():
    before = _open(linear_zipmap())
    r = apply("remove_zipmap", before)
    assert r.modified and r.removed == ["ZipMap"]
    assert ops(r.model) == ["LinearClassifier", "Identity"]
    out = {v.name: v for v in r.model.ir.graph.outputs}
    assert list(out) == ["output_label", "output_probability"]  # the names stay
    assert out["output_probability"].type == ir.TensorType(ir.DataType.FLOAT)
    assert any("now a float tensor" in n for n in r.notes)
    lab = onnx_lab.open(r.model, dims={"N": 6})
    assert lab.outputs.set_index("name").loc["output_probability", "dtype"] == "float32"
    assert lab.outputs.set_index("name").loc["output_probability", "shape"] == (6, 3)
    # The tensor holds the maps' values, row by row in label order.
    feeds = make_feeds(before, dims={"N": 6})
    maps = run(before, feeds)["output_probability"]
    table = run(r.model, feeds)["output_probability"]
    assert table.shape == (6, 3)
    np.testing.assert_array_equal(table, np.array([[m[k] for k in (0, 1, 2)] for m in maps],
                                                   np.float32))
    onnx.checker.check_model(r.model.to_proto())


def test_the_step_is_verified_and_the_saved_model_loads(tmp_path):
    lab = onnx_lab.open(tree_zipmap(), dims={"N": 8})
    r = lab.apply("remove_zipmap")
    assert r.modified and r.verify_passed
    row = r.verification.set_index("tensor").loc["output_probability"]
    assert row["passed"] and row["shape"] == [8, 2]
    path = lab.save(tmp_path / "tensors.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.get_outputs()[1].type == "tensor(float)"


def test_a_drift_against_the_maps_is_caught():
    # The tensor of a drifted tree against the original's maps: compare sees the change.
    ref = onnx_lab.open(tree_zipmap(), dims={"N": 64})
    same = onnx_lab.open(tree_zipmap(), dims={"N": 64})
    same.apply("remove_zipmap")
    assert onnx_lab.compare(ref, same).passed
    drift = onnx_lab.open(tree_zipmap(leaf_delta=0.05), dims={"N": 64})
    drift.apply("remove_zipmap")
    cmp = onnx_lab.compare(ref, drift)
    assert not cmp.passed
    assert not cmp.outputs.set_index("tensor").loc["output_probability", "passed"]


def test_unsorted_labels_are_kept_with_the_reason():
    m = linear_zipmap()
    zm = next(n for n in m.graph.node if n.op_type == "ZipMap")
    next(a for a in zm.attribute if a.name == "classlabels_int64s").ints[:] = [2, 0, 1]
    r = apply("remove_zipmap", _open(m))
    assert r.modified is False
    assert "not in ascending order" in r.reason


def test_maps_read_by_another_node_are_kept():
    m = linear_zipmap()
    m.graph.node.append(helper.make_node("SequenceLength", ["output_probability"], ["n"],
                                         name="count"))
    m.graph.output.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    r = apply("remove_zipmap", _open(m))
    assert r.modified is False and "also read by node 'count'" in r.reason


def test_no_zipmap():
    r = apply("remove_zipmap", onnx_lab.open(sequence_model()).model)
    assert r.modified is False and r.reason == "no ai.onnx.ml ZipMap node"


def test_not_in_any_preset():
    from onnx_lab.transforms.presets import PRESETS

    assert all("remove_zipmap" not in passes for passes in PRESETS.values())


def test_an_empty_batch_is_no_false_alarm():
    # A ZipMap of no rows is [], the tensor remove_zipmap leaves is (0, 3): no maps on either
    # side, nothing differs. It failed with "value: a sequence against a ndarray".
    lab = onnx_lab.open(linear_zipmap(), dims={"N": 0})
    r = lab.apply("remove_zipmap")
    assert r.modified and r.verify_passed, r.verification
    assert onnx_lab.compare(lab.original, lab).passed
    assert onnx_lab.compare(lab, lab.original).passed  # the other way round too


def test_compared_as_names_the_maps_on_either_side():
    lab = onnx_lab.open(linear_zipmap(), dims={"N": 5})
    lab.apply("remove_zipmap")
    for a, b in ((lab.original, lab), (lab, lab.original)):  # the maps as the candidate too
        row = onnx_lab.compare(a, b).outputs.set_index("tensor").loc["output_probability"]
        assert row["compared_as"] == "seq(map)" and row["passed"]


def test_a_probabilities_tensor_without_inferred_shape_gets_one(tmp_path):
    # skl2onnx's RandomForest imports ai.onnx.ml 1, whose TreeEnsembleClassifier ONNX infers
    # no shape for: the new output had a type without a shape, which onnx's checker refuses
    # ("Field 'shape' of 'type' is required but missing"), and onnxsim after it failed so
    m = tree_zipmap()
    del m.opset_import[:]
    m.opset_import.extend([helper.make_operatorsetid("", 13),
                           helper.make_operatorsetid("ai.onnx.ml", 1)])
    lab = onnx_lab.open(m, dims={"N": 6})
    r = lab.apply("remove_zipmap")
    assert r.modified and r.verify_passed
    path = tmp_path / "no_zipmap.onnx"
    lab.save(path)
    saved = onnx.load(path)
    onnx.checker.check_model(saved, full_check=True)
    probs = next(o for o in saved.graph.output if o.name == "output_probability")
    assert [d.dim_value for d in probs.type.tensor_type.shape.dim][1:] == [2]
    got = ort.InferenceSession(str(path)).run(None, {"X": np.zeros((4, 2), np.float32)})[1]
    assert got.shape == (4, 2)
    assert lab.apply("onnxsim").verify_passed
