"""Every tool step on models with external data (onnx helpers with every tensor external, and a
torch dynamo export): the step verifies, the saved result loads in a fresh onnxruntime
session from its own folder with the source's outputs, small tensors stay inline, one data
file of its own, and the source files are untouched."""

from __future__ import annotations

import importlib.util

import onnx
import pytest
from external_models import (
    assert_written_model_is_sound,
    external_sources,
    feeds_for,
    fresh_run,
    reference_run,
    snapshot,
)

import onnx_lab
from onnx_lab.core.handoff import model_folder, proto_with_weights, read_output, tool_errors
from onnx_lab.errors import PassError

STEPS = ["safe", "ort:basic", "ort:extended", "ort:all", "onnxsim", "onnxslim",
         "onnxoptimizer", "ort_transformers", "onnxscript_rewrite"]
_NEEDS = {"onnxsim": "onnxsim", "onnxslim": "onnxslim", "onnxoptimizer": "onnxoptimizer",
          "onnxscript_rewrite": "onnxscript"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return external_sources(tmp_path_factory.mktemp("external_sources"))


def _source(sources, kind):
    if kind not in sources:
        pytest.skip("torch (with its dynamo exporter) is not installed")
    return sources[kind]


def _open(path):
    # the helpers' model names its batch dim; the dynamo export is static
    return onnx_lab.open(path, dims={"batch": 1} if path.name == "m.onnx" else None)


@pytest.mark.slow  # every tool on exported sources with external data: a sweep of round trips
@pytest.mark.parametrize("kind", ["helpers", "dynamo"])
@pytest.mark.parametrize("step", STEPS)
def test_a_tool_step_on_external_data_saves_a_file_that_loads(sources, kind, step, tmp_path):
    if step in _NEEDS and importlib.util.find_spec(_NEEDS[step]) is None:
        pytest.skip(f"{_NEEDS[step]} is not installed")
    src = _source(sources, kind)
    before = snapshot(src)
    feeds = feeds_for(src)
    reference = reference_run(src, feeds)
    lab = _open(src)
    results = lab.apply_preset("safe") if step == "safe" else [lab.apply(step)]
    for r in results:
        assert r.verify_passed in (True, None), (r.name, r.first_failure, r.notes)
    out = lab.save(tmp_path / "out" / "result.onnx")
    assert_written_model_is_sound(out, src, reference, feeds)
    assert snapshot(src) == before


@pytest.mark.slow  # every tool on exported sources with external data: a sweep of round trips
def test_the_original_layout_is_what_broke_onnxruntime(sources, tmp_path):
    # The source itself keeps its int64 axes in the data file: onnxruntime refuses it from
    # its path. That is the layout a save must never write; every saved version above loads.
    src = sources["helpers"]
    with pytest.raises(Exception, match="Cannot parse data from external tensors"):
        fresh_run(src, feeds_for(src))


@pytest.mark.slow  # every tool on exported sources with external data: a sweep of round trips
def test_ort_levels_on_a_dynamo_export_no_longer_raise_a_raw_validation_error(sources):
    # onnxruntime used to write the optimized model's unchanged weights as references to the
    # source's data file name in a temporary folder (ValidationError: not regular file).
    src = _source(sources, "dynamo")
    lab = _open(src)
    r = lab.apply("ort:basic")
    assert r.modified and r.verify_passed
    assert not lab.model.has_external_data  # read back into memory, folder gone


@pytest.mark.slow  # every tool on exported sources with external data: a sweep of round trips
def test_handoff_gives_tools_the_weights_and_leaves_the_model_as_it_was(sources):
    lab = _open(sources["helpers"])
    model = lab.model
    assert model.has_external_data
    proto = proto_with_weights(model, "a tool")
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    assert model.has_external_data  # the Lab's version still reads its file
    with model_folder(model, "a tool") as path:
        written = sorted(p.name for p in path.parent.iterdir())
        assert written == ["model.onnx", "model.onnx.data"]
        back = read_output(path, "a tool")
    assert not path.parent.exists()
    assert {v.name for v in back.graph.initializers.values()} == \
        set(model.graph.initializers)


def test_a_tool_that_writes_no_model_or_raises_is_a_pass_error_naming_the_step(tmp_path):
    with pytest.raises(PassError, match="my tool wrote no model"):
        read_output(tmp_path / "nothing.onnx", "my tool")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(PassError, match="my tool its result cannot be read"):
        read_output(tmp_path / "bad.onnx", "my tool")
    with pytest.raises(PassError, match="my tool failed: boom") as e:
        with tool_errors("my tool", "Do something else."):
            raise RuntimeError("boom\nC++ trace")
    assert e.value.fix == "Do something else."


def test_an_ort_level_onnxruntime_cannot_load_is_a_pass_error_naming_the_step():
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Foo", ["x"], ["y"], domain="com.example")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("com.example", 1)])
    with pytest.raises(PassError, match=r"^ort:basic: onnxruntime cannot load"):
        onnx_lab.open(model).apply("ort:basic")


def test_the_cause_of_an_unreadable_result_is_named(tmp_path):
    # onnx_ir wraps its reason ("... is redeclared") in "Error calling _deserialize_graph
    # with: <graph name>", which alone says nothing
    with pytest.raises(PassError, match=r"my tool failed: Error calling x with: g \(Output "
                       r"'k' is redeclared in the current graph scope\.\)"):
        with tool_errors("my tool", "Do something else."):
            try:
                raise ValueError("Output 'k' is redeclared in the current graph scope.")
            except ValueError as inner:
                raise RuntimeError("Error calling x with: g\nnode: ...") from inner


def _loop_with_constants_in_an_if(big: bool) -> onnx.ModelProto:
    """A Loop whose body holds an If whose branches hold Constant nodes (onnx's
    test_loop16_seq_none has this layout): a body two levels deep."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    n = 2048 if big else 3  # 8 KiB: above the 4 KiB that stays inline

    def const(name, value):
        return h.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.asarray(value, np.float32), name))

    then = h.make_graph([const("k", np.full(n, 2.0)), h.make_node("Mul", ["acc", "k"], ["t"])],
                        "then", [], [h.make_tensor_value_info("t", T.FLOAT, [n])])
    other = h.make_graph([const("k2", np.full(n, -1.0)),
                          h.make_node("Add", ["acc", "k2"], ["e"])],
                         "else", [], [h.make_tensor_value_info("e", T.FLOAT, [n])])
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("If", ["flag"], ["acc_out"], then_branch=then, else_branch=other)],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("acc", T.FLOAT, [n])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("acc_out", T.FLOAT, [n])])
    graph = h.make_graph(
        [h.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "g",
        [h.make_tensor_value_info("trips", T.INT64, []),
         h.make_tensor_value_info("flag", T.BOOL, []),
         h.make_tensor_value_info("x", T.FLOAT, [n])],
        [h.make_tensor_value_info("y", T.FLOAT, [n])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("level", ["ort:extended", "ort:all"])
@pytest.mark.parametrize("big", [False, True])
def test_ort_levels_on_constants_two_bodies_deep_give_a_model_that_loads(tmp_path, level, big):
    # With the external-initializer entries optimize() sets, onnxruntime (1.32) turns a Constant
    # of a body two levels deep into an initializer and keeps the node: the file declared the
    # name twice and the step failed ("its result cannot be read"). The duplicate is dropped.
    import numpy as np
    import onnxruntime as ort

    src = tmp_path / "loop.onnx"
    onnx.save(_loop_with_constants_in_an_if(big), src)
    before = src.read_bytes()
    lab = onnx_lab.open(src)
    r = lab.apply(level)
    assert r.verify_passed in (True, None), (r.first_failure, r.notes)
    out = lab.save(tmp_path / "out" / "opt.onnx")
    n = 2048 if big else 3
    x = np.linspace(-1, 1, n, dtype=np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for flag in (True, False):
        feeds = {"trips": np.array(3, np.int64), "flag": np.array(flag), "x": x}
        want = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"]).run(
            None, feeds)[0]
        got = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(
            None, feeds)[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(want, x * 8 if flag else x - 3)
    assert src.read_bytes() == before
