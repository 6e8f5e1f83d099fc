"""Every writer of a model on sources with external data: the rule (one data file beside the
model, small tensors inline, never the source's data file or a temporary folder), the check
that the written file loads in a fresh onnxruntime session, and verification that never
passes a model whose saved file would not load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from external_models import (
    assert_written_model_is_sound,
    check_layout,
    external_sources,
    feeds_for,
    fresh_run,
    reference_run,
    snapshot,
)
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.core.handoff import ir_with_weights
from onnx_lab.core.model import LabModel
from onnx_lab.core.save import INLINE_MAX_BYTES, write_model
from onnx_lab.errors import PassError, SaveError
from onnx_lab.runtime import session


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return external_sources(tmp_path_factory.mktemp("writer_sources"))


@pytest.fixture(params=["helpers", "dynamo"])
def src(request, sources):
    if request.param not in sources:
        pytest.skip("torch (with its dynamo exporter) is not installed")
    path = sources[request.param]
    before = snapshot(path)
    yield path
    assert snapshot(path) == before  # the user's files: same bytes, not even rewritten


def _dims(path):
    return {"batch": 1} if path.name == "m.onnx" else None


def _open(path):
    return onnx_lab.open(path, dims=_dims(path))


def _sound(out, src, atol=1e-4, rtol=1e-3):
    feeds = feeds_for(src)
    assert_written_model_is_sound(out, src, reference_run(src, feeds), feeds, atol=atol,
                                  rtol=rtol)


# ---------------------------------------------------------------------------- the rule
@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_save_keeps_small_tensors_inline_and_the_big_ones_in_its_own_data_file(src, tmp_path):
    lab = _open(src)
    out = lab.save(tmp_path / "copy.onnx")
    _sound(out, src)
    m = onnx.load(str(out), load_external_data=False)
    for t in m.graph.initializer:
        external = t.data_location == TensorProto.EXTERNAL
        size = int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        assert external == (size > INLINE_MAX_BYTES), t.name
    assert (tmp_path / "copy.onnx.data").is_file()


def test_a_model_with_only_small_tensors_is_one_file(tmp_path):
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "W")  # 1024 bytes
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w])
    src = tmp_path / "src" / "small.onnx"
    src.parent.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(src),
              save_as_external_data=True, size_threshold=0, location="small.onnx.data")
    out = onnx_lab.open(src).save(tmp_path / "small.onnx", external_data=True)
    assert not (tmp_path / "small.onnx.data").exists()
    _sound(out, src)


@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_write_model_never_writes_into_the_source_data_file(src, tmp_path):
    lab = _open(src)
    out = write_model(lab.model, tmp_path / "w.onnx", "w.onnx.data")
    assert check_layout(out, src) == []


# ---------------------------------------------------------------------------- the writers
@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_fp16_and_int8_results_save_files_that_load(src, tmp_path):
    lab = _open(src)
    for name, other, tol in [("fp16", lambda: onnx_lab.to_fp16(lab), 5e-2),
                             ("int8", lambda: onnx_lab.to_int8_dynamic(lab), 0.5)]:
        result = other()
        for ext in ("auto", True):
            out = result.save(tmp_path / f"{name}_{ext}.onnx", external_data=ext)
            _sound(out, src, atol=tol, rtol=tol)


@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_find_precision_plan_and_step_save_files_that_load(src, tmp_path):
    lab = _open(src)
    plan = lab.find_precision("fp16", atol=5e-2, rtol=5e-2, max_trials=4, progress=False)
    assert plan.result.verify_passed
    out = plan.save(tmp_path / "plan.onnx")  # follows the source: a data file when it had
    _sound(out, src, atol=5e-2, rtol=5e-2)
    out2 = lab.save(tmp_path / "step.onnx")
    _sound(out2, src, atol=5e-2, rtol=5e-2)
    with pytest.raises(SaveError, match="source"):
        plan.save(src)


@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_extract_and_fix_dims_save_files_that_load(src, tmp_path):
    lab = _open(src)
    sub = lab.extract(outputs=[lab.model.graph.outputs[0].name])
    assert sub.results[0].verify_passed
    _sound(sub.save(tmp_path / "sub.onnx"), src)
    if _dims(src):
        r = lab.fix_dims({"batch": 1})
        assert r.verify_passed
    _sound(lab.save(tmp_path / "fixed.onnx"), src)


@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_the_cli_writers_write_files_that_load(src, tmp_path, capsys):
    dims = ["--dims", "batch=1"] if _dims(src) else []
    out = tmp_path / "cli"
    assert main(["optimize", str(src), str(out / "safe.onnx"), *dims]) == 0
    assert main(["optimize", str(src), str(out / "ort.onnx"), "--tool", "ort:basic",
                 *dims]) == 0
    assert main(["extract", str(src), str(out / "sub.onnx"), "--outputs",
                 onnx.load(str(src), load_external_data=False).graph.output[0].name,
                 *dims]) == 0
    written = ["safe", "ort", "sub"]
    if _dims(src):
        assert main(["fix-dims", str(src), str(out / "fixed.onnx"), "batch=1"]) == 0
        written.append("fixed")
    for name in written:
        _sound(out / f"{name}.onnx", src)
    code = main(["precision", str(src), "--target", "fp16", "--atol", "5e-2", "--rtol", "5e-2",
                 "--max-trials", "4", "--out", str(out / "fp16.onnx"), *dims])
    assert code == 0
    _sound(out / "fp16.onnx", src, atol=5e-2, rtol=5e-2)
    code = main(["precision", str(src), "--target", "int8", "--max-trials", "2", "--out",
                 str(out / "int8.onnx"), *dims])
    assert code in (0, 1)  # whether int8 meets its preset here is not the question
    assert check_layout(out / "int8.onnx", src) == []
    fresh_run(out / "int8.onnx", feeds_for(src))
    capsys.readouterr()


# ---------------------------------------------------------------------------- the check
_W = np.random.default_rng(3).standard_normal((64, 600)).astype(np.float32)
_X = {"x": np.ones((1, 64), np.float32)}


def _long_split(folder, *, weights_external: bool):
    """x [1, 64] -> MatMul(W 64x600) -> Identity -> Split into 600 pieces, the first is the
    output: the Split's sizes (4800 bytes of int64) are read by onnxruntime's shape
    inference, so a file that stores them in a data file does not load. W in a data file
    with ``weights_external``; the sizes always inside the source file."""
    sizes = numpy_helper.from_array(np.ones(600, np.int64), "sizes")
    w = numpy_helper.from_array(_W, "W")
    pieces = [f"p{i}" for i in range(600)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
         helper.make_node("Identity", ["m"], ["i"], name="id"),
         helper.make_node("Split", ["i", "sizes"], pieces, axis=1, name="split")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("p0", TensorProto.FLOAT, [1, 1])], [sizes, w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "long.onnx"
    if weights_external:
        from onnx.external_data_helper import set_external_data

        t = model.graph.initializer[1]
        with open(folder / "long.onnx.data", "wb") as f:
            f.write(t.raw_data)
        set_external_data(t, "long.onnx.data")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
    onnx.save(model, str(path))
    return path


def _expected():
    return (_X["x"] @ _W)[:, :1]


def test_a_file_that_would_not_load_is_refused_and_nothing_is_replaced(tmp_path):
    path = _long_split(tmp_path / "src", weights_external=True)
    lab = onnx_lab.open(path)
    target = tmp_path / "out.onnx"
    target.write_bytes(b"\x08\x08old")  # an earlier model (ir_version 8, then junk)
    with pytest.raises(SaveError, match="would not load in onnxruntime") as e:
        lab.save(target)  # auto: external like the source, the shape goes out with it
    assert "Cannot parse data from external tensors" in e.value.problem
    assert str(target) in e.value.problem
    assert target.read_bytes() == b"\x08\x08old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx", "src"]
    # one file keeps the shape inline: saved, and it loads
    out = lab.save(target, external_data=False)
    np.testing.assert_allclose(fresh_run(out, _X)[0], _expected(), rtol=1e-5)


def test_verification_fails_a_step_whose_saved_file_would_not_load(tmp_path):
    path = _long_split(tmp_path / "ext", weights_external=True)
    r = onnx_lab.open(path).apply("eliminate_identity")
    assert r.modified and r.verify_passed is False
    assert "would not load in onnxruntime" in " ".join(r.notes)


def test_no_false_alarm_when_the_model_is_saved_as_one_file(tmp_path):
    path = _long_split(tmp_path / "inline", weights_external=False)
    lab = onnx_lab.open(path)
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed, r.notes
    out = lab.save(tmp_path / "o.onnx")  # auto: one file, like the source
    assert not (tmp_path / "o.onnx.data").exists()
    np.testing.assert_allclose(fresh_run(out, _X)[0], _expected(), rtol=1e-5)


def test_check_false_skips_the_load_check(tmp_path):
    path = _long_split(tmp_path / "src", weights_external=True)
    out = onnx_lab.open(path).save(tmp_path / "unchecked.onnx", check=False)
    with pytest.raises(Exception, match="Cannot parse data from external tensors"):
        np.testing.assert_allclose(fresh_run(out, _X)[0], _expected(), rtol=1e-5)


@pytest.mark.slow  # round trips of exported sources through files and fresh sessions
def test_the_runtime_temporary_file_for_large_models_follows_the_rule(src, monkeypatch):
    # Past 2 GB onnxruntime gets the whole model as a temporary file: written by the rule.
    model = LabModel(ir_with_weights(_open(src).model, "test"))  # weights in memory
    monkeypatch.setattr(session, "_PROTO_LIMIT", 1000)
    path, tmp = session._serialize(model, session.runtime_proto(model))
    try:
        assert Path(path).with_name("model.onnx.data").is_file()
        assert check_layout(Path(path), src) == []
        fresh_run(Path(path), feeds_for(src))
    finally:
        tmp.cleanup()


def test_a_model_onnxruntime_cannot_run_at_all_is_still_saved(tmp_path):
    # An op of a domain this onnxruntime does not know (a model for another runtime): the
    # file is not what is wrong, so the check does not refuse it.
    graph = helper.make_graph(
        [helper.make_node("Foo", ["x"], ["y"], domain="com.example")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.example", 1)])
    out = onnx_lab.open(model).save(tmp_path / "foreign.onnx")
    assert onnx.load(str(out)).graph.node[0].op_type == "Foo"
    assert session.load_problem(out) is not None  # onnxruntime does refuse it


def test_a_model_an_edit_broke_is_refused_although_onnxruntime_refuses_it_in_memory_too(tmp_path):
    # The excuse above ("onnxruntime cannot load it from memory either") holds only when the
    # original cannot load either: an attribute value onnxruntime refuses broke this one.
    graph = helper.make_graph(
        [helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.1),
         helper.make_node("LinearClassifier", ["y"], ["label", "scores"], domain="ai.onnx.ml",
                          coefficients=[1.0, -1.0, 0.5, 0.5], intercepts=[0.0, 0.1],
                          classlabels_ints=[0, 1], post_transform="NONE")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    lab = onnx_lab.open(model)
    assert lab.save(tmp_path / "fine.onnx").is_file()
    # verified, the edit is refused (the new model does not run); kept unverified when asked
    with pytest.raises(PassError, match="the edited model does not run"):
        lab.set_attribute(lab.nodes.node_id.iloc[1], "post_transform", "SOFTMAXX")
    r = lab.set_attribute(lab.nodes.node_id.iloc[1], "post_transform", "SOFTMAXX",
                          verify=False)
    assert r.modified and r.verify_passed is None
    target = tmp_path / "broken.onnx"
    with pytest.raises(SaveError, match="a step broke it") as e:
        lab.save(target)
    assert "lab.undo()" in e.value.fix
    assert not target.exists()
    assert lab.save(target, check=False).is_file()  # written as it is when asked
