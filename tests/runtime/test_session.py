"""make_session: providers, levels, extra outputs, profiling output location."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from models import save_external

import onnx_lab
from onnx_lab.errors import InputError, ProviderError
from onnx_lab.runtime.feeds import make_feeds
from onnx_lab.runtime.session import make_session, resolve_providers


def test_profiling_trace_never_lands_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lab = onnx_lab.open("sample:convnet")
    sess = make_session(lab.model, profile=True)
    sess.run(None, make_feeds(lab))
    trace = sess.end_profiling()
    try:
        assert not str(trace).startswith(str(tmp_path)) and "onnx_lab_ort_profile" in trace
        assert list(tmp_path.iterdir()) == []
    finally:
        Path(trace).unlink(missing_ok=True)  # the suite leaves nothing in the temp folder


def test_extra_outputs_expose_intermediates():
    lab = onnx_lab.open("sample:convnet")
    sess = make_session(lab.model, extra_outputs=["/stem/relu/Relu_output_0"])
    names = [o.name for o in sess.get_outputs()]
    assert names == ["logits", "/stem/relu/Relu_output_0"]
    logits, relu = sess.run(None, make_feeds(lab))
    assert relu.shape == (1, 8, 32, 32) and (relu >= 0).all() and np.isfinite(logits).all()


def test_provider_names():
    assert resolve_providers("cpu") == ["CPUExecutionProvider"]
    with pytest.raises(ProviderError, match="Unknown execution provider 'gpux'"):
        resolve_providers(["gpux"])
    with pytest.raises(InputError, match="Unknown optimization level"):
        make_session(onnx_lab.open("sample:convnet").model, opt_level="max")


# ------------------------------------------------------------ weights handed over in memory
def _weights_everywhere() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Large weights used in the main graph (``w``), only inside an If branch (``wi``), in
    bfloat16 (``wb``, which numpy cannot hand to onnxruntime) and not at all (``unused``)."""
    import ml_dtypes
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    wi = rng.standard_normal((256, 256)).astype(np.float32)
    wb = (rng.standard_normal((16, 256)) * 0.1).astype(ml_dtypes.bfloat16)
    then = helper.make_graph([helper.make_node("MatMul", ["z", "wi"], ["o_then"])], "then",
                             [], [helper.make_tensor_value_info("o_then", TensorProto.FLOAT,
                                                                [2, 256])])
    other = helper.make_graph([helper.make_node("Identity", ["z"], ["o_else"])], "else", [],
                              [helper.make_tensor_value_info("o_else", TensorProto.FLOAT,
                                                             [2, 256])])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
         helper.make_node("Cast", ["wb"], ["wf"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("ReduceSum", ["wf", "axes"], ["bias"], keepdims=0, name="sum"),
         helper.make_node("Add", ["y", "bias"], ["z"], name="add"),
         helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other,
                          name="if")],
        "weights_everywhere",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 256])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wi, "wi"),
         numpy_helper.from_array(wb, "wb"), numpy_helper.from_array(np.array([0], np.int64),
                                                                   "axes"),
         numpy_helper.from_array(np.zeros((128, 128), np.float32), "unused")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, {"w": w, "wi": wi, "wb": wb.astype(np.float32)}


@pytest.mark.parametrize("source", ["file", "proto"])
def test_weights_go_to_onnxruntime_in_memory_with_the_same_results(tmp_path, source):
    proto, arr = _weights_everywhere()
    if source == "file":
        onnx.save(proto, str(tmp_path / "m.onnx"))
        lab = onnx_lab.open(tmp_path / "m.onnx")
    else:
        lab = onnx_lab.open(proto)
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    z = x @ arr["w"] + arr["wb"].sum(axis=0)
    for level in ("disable", "all"):
        sess = make_session(lab.model, opt_level=level)
        for c, expected in ((True, z @ arr["wi"]), (False, z)):
            got = sess.run(None, {"x": x, "c": np.array(c)})[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
    # The two float32 weights went over as OrtValues, not inside the serialized graph;
    # bfloat16 and the unused tensor stayed in it.
    light, names, folder = lab.model.cached(("runtime", "light_graph"), None)
    assert sorted(names) == ["w", "wi"] and folder is None
    assert len(light.SerializeToString()) < 100_000 < proto.ByteSize()


def test_external_data_files_and_in_memory_weights_in_one_session(tmp_path):
    # Weights in a data file stay there (onnxruntime maps them); the weights a pass made
    # in memory are handed over: both in one session.
    path = save_external(onnx_lab.samples.build("convnet"), tmp_path / "convnet.onnx",
                         size_threshold=1024)
    lab = onnx_lab.open(path)
    assert lab.model.has_external_data
    r = lab.apply("fuse_conv_bn")
    assert r.modified and r.verify_passed
    feeds = make_feeds(lab)
    import onnxruntime as ort

    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = make_session(lab.model).run(None, feeds)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-4)
    _light, names, folder = lab.model.cached(("runtime", "light_graph"), None)
    assert names and folder == str(tmp_path)
    assert all(not isinstance(lab.model.graph.initializers[n].const_value, ir.ExternalTensor)
               for n in names)


def test_ort_offline_levels_write_the_handed_over_weights(tmp_path):
    proto, arr = _weights_everywhere()
    onnx.save(proto, str(tmp_path / "m.onnx"))
    lab = onnx_lab.open(tmp_path / "m.onnx")
    r = lab.apply("ort:basic")
    assert r.verify_passed
    inits = lab.model.graph.initializers
    np.testing.assert_array_equal(inits["w"].const_value.numpy(), arr["w"])


def test_providers_that_compile_the_graph_get_the_whole_model():
    from onnx_lab.runtime.session import _light_session_data

    lab = onnx_lab.open(_weights_everywhere()[0])
    assert _light_session_data(lab.model, ["CPUExecutionProvider"], None, ()) is not None
    assert _light_session_data(lab.model, ["TensorrtExecutionProvider",
                                           "CPUExecutionProvider"], None, ()) is None


def test_run_session_returns_named_outputs_and_translates_runtime_failures():
    from onnx_lab.errors import RuntimeLoadError
    from onnx_lab.runtime.session import run_session

    lab = onnx_lab.open("sample:convnet")
    sess = make_session(lab.model)
    feeds = make_feeds(lab.model, dims=lab.dims)
    out = run_session(sess, feeds)
    assert list(out) == [o.name for o in sess.get_outputs()]
    assert all(isinstance(v, np.ndarray) for v in out.values())
    bad = {k: v[..., :1] for k, v in feeds.items()}  # a spatial size the convs cannot take
    with pytest.raises(RuntimeLoadError, match="onnxruntime failed to run the candidate: ") as e:
        run_session(sess, bad, what="the candidate", fix="Keep the node in fp32.")
    assert e.value.fix == "Keep the node in fp32."


def test_onnxruntime_messages_keep_the_reason_not_the_source_location():
    # The reason used to sit past the 400 characters of source path and C++ signature kept
    # (a float16 conversion onnxruntime rejects at load, a kernel's check at run time).
    from onnx_lab.runtime.session import _explain_ort_error, _ort_text, run_failure

    load = ("[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/graph.cc:"
            "1483 onnxruntime::Graph::Graph(const onnxruntime::Model&, onnx::GraphProto*, const "
            "std::unordered_map<std::__cxx11::basic_string<char>, int>&, onnxruntime::Version, "
            "onnxruntime::IOnnxRuntimeOpSchemaCollectionPtr, onnxruntime::Graph*, const "
            "onnxruntime::Node*, const onnxruntime::logging::Logger&, bool) [ONNXRuntimeError] "
            ": 1 : FAIL : Tensor element type mismatch. 10 != 1")
    assert _explain_ort_error(RuntimeError(load)) == (
        "onnxruntime cannot load or run the model: [ONNXRuntimeError] : 1 : FAIL : Tensor "
        "element type mismatch. 10 != 1")
    conv = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Conv "
            "node. Name:'c' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/"
            "nn/conv.cc:123 onnxruntime::common::Status onnxruntime::Conv<float>::Compute("
            "onnxruntime::OpKernelContext*) const X num_dims does not match W num_dims.")
    assert _ort_text(conv).endswith("Status Message: X num_dims does not match W num_dims.")
    assert "onnxruntime_src" not in run_failure(RuntimeError(conv)).problem
    plain = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions\n index: 0"
    assert _ort_text(plain) == plain


def test_a_long_run_failure_keeps_its_end():
    # nested If/LSTM failures put the reason at the end: cut at 400 characters from the
    # start it read "Input X must have 3 dimensions on"
    from onnx_lab.runtime.session import run_failure

    nested = ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : " + "Non-zero status code returned "
              "while running If node. Name:'If_0' Status Message: " * 6
              + "Input X must have 3 dimensions only. Actual:{1,1,1,128,2}")
    problem = run_failure(RuntimeError(nested)).problem
    assert problem.endswith("Input X must have 3 dimensions only. Actual:{1,1,1,128,2}")
    assert " … " in problem and len(problem) < 480


def test_a_long_load_failure_keeps_its_reason(tmp_path):
    # the load check cut onnxruntime's message at its first 400 characters: a long node
    # name pushed "No Op registered for ..." out of it
    from onnx_lab.runtime.session import load_problem

    h = onnx.helper
    vi = h.make_tensor_value_info
    g = h.make_graph([h.make_node("NoSuchOp", ["x"], ["y"], name="n" * 600)], "g",
                     [vi("x", onnx.TensorProto.FLOAT, [2])], [vi("y", onnx.TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    problem = load_problem(path)
    assert "NoSuchOp" in problem.split(" … ")[-1] and len(problem) <= 400, problem
