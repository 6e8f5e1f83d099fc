"""float16 / bfloat16 conversion by the op schemas (onnx_lab.numerics.half): every converted
model passes onnx's checker and runs in onnxruntime, whatever is kept; the failure classes of
real exports (YOLOv8's Range anchors, Silero's If branches reading outer weights) are built
here small; the onnx package's backend models and the samples convert, load and run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.core import samples
from onnx_lab.numerics.half import (
    BFLOAT16,
    ConversionBug,
    HalfRules,
    check_converted,
    half_proto,
)
from onnx_lab.numerics.precision import find_precision
from onnx_lab.runtime.capture import run
from onnx_lab.runtime.feeds import make_feeds

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _session(proto: onnx.ModelProto):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _types(proto: onnx.ModelProto) -> dict[str, int]:
    typed = onnx.shape_inference.infer_shapes(proto)
    out = {}
    stack = [typed.graph]
    while stack:
        g = stack.pop()
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            out[vi.name] = vi.type.tensor_type.elem_type
        out.update({t.name: t.data_type for t in g.initializer})
        for n in g.node:
            stack.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
    return out


def anchors_model() -> onnx.ModelProto:
    """YOLOv8's anchor grid: Range over a float start and a limit cast from the feature map's
    Shape (an index computation), added to the conv output; opset 12 like the export."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.5, np.float32), "start"),
             numpy_helper.from_array(np.array(1.0, np.float32), "step"),
             numpy_helper.from_array(np.array([3], np.int64), "axis_w"),
             numpy_helper.from_array(np.array(8.0, np.float32), "stride")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c"], ["s"], name="/Shape"),
             helper.make_node("Gather", ["s", "axis_w"], ["wdim"], name="/Gather", axis=0),
             helper.make_node("Squeeze", ["wdim"], ["wsc"], name="/Squeeze"),
             helper.make_node("Cast", ["wsc"], ["limit"], name="/Cast", to=TP.FLOAT),
             helper.make_node("Add", ["limit", "start"], ["limit2"], name="/limit/Add"),
             helper.make_node("Range", ["start", "limit2", "step"], ["grid"], name="/Range"),
             helper.make_node("Mul", ["grid", "stride"], ["pix"], name="/pix/Mul"),
             helper.make_node("Add", ["c", "pix"], ["y0"], name="/head/Add"),
             helper.make_node("Sigmoid", ["y0"], ["y"], name="/head/Sigmoid")]
    g = helper.make_graph(nodes, "anchors", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])


def outer_weight_if_model() -> onnx.ModelProto:
    """Silero VAD's shape: an If whose branches read an outer-scope float weight and an outer
    computed tensor (the sample rate picks the branch); a nested If reads them too."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) / 4).astype(np.float32), "basis"),
             numpy_helper.from_array(np.array(16000, np.int64), "sr16k"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    inner = helper.make_graph(
        [helper.make_node("MatMul", ["h", "basis"], ["deep"], name="/inner/MatMul")], "inner", [],
        [helper.make_tensor_value_info("deep", TP.FLOAT, [1, 16])])
    inner_else = helper.make_graph(
        [helper.make_node("Identity", ["h"], ["deep2"], name="/inner/Identity")], "inner_else", [],
        [helper.make_tensor_value_info("deep2", TP.FLOAT, [1, 16])])
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "basis"], ["a"], name="/then/MatMul"),
         helper.make_node("Mul", ["a", "half"], ["a2"], name="/then/Mul"),
         helper.make_node("If", ["is16"], ["a3"], name="/then/If", then_branch=inner,
                          else_branch=inner_else),
         helper.make_node("Add", ["a2", "a3"], ["t_out"], name="/then/Add")], "then", [],
        [helper.make_tensor_value_info("t_out", TP.FLOAT, [1, 16])])
    else_g = helper.make_graph(
        [helper.make_node("Tanh", ["h"], ["e_out"], name="/else/Tanh")], "else", [],
        [helper.make_tensor_value_info("e_out", TP.FLOAT, [1, 16])])
    nodes = [helper.make_node("Equal", ["sr", "sr16k"], ["is16"], name="/Equal"),
             helper.make_node("Relu", ["x"], ["h"], name="/Relu"),
             helper.make_node("If", ["is16"], ["b"], name="/If", then_branch=then_g,
                              else_branch=else_g),
             helper.make_node("Sigmoid", ["b"], ["y"], name="/Sigmoid")]
    g = helper.make_graph(nodes, "outer_if",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16]),
                           helper.make_tensor_value_info("sr", TP.INT64, [])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def loop_model() -> onnx.ModelProto:
    """A Loop whose body reads an outer-scope weight and carries a float state (its inputs
    and outputs keep float32; the weight's float16 copy lives outside the loop)."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) / 4).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(3, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "go")]
    body = helper.make_graph(
        [helper.make_node("MatMul", ["v", "w"], ["vm"], name="/body/MatMul"),
         helper.make_node("Tanh", ["vm"], ["v_out"], name="/body/Tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="/body/Identity")],
        "body", [helper.make_tensor_value_info("i", TP.INT64, []),
                 helper.make_tensor_value_info("cond_in", TP.BOOL, []),
                 helper.make_tensor_value_info("v", TP.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("cond_out", TP.BOOL, []),
         helper.make_tensor_value_info("v_out", TP.FLOAT, [1, 16])])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="/Relu"),
             helper.make_node("Loop", ["trips", "go", "h"], ["v_final"], name="/Loop", body=body),
             helper.make_node("Sigmoid", ["v_final"], ["y"], name="/Sigmoid")]
    g = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def shared_types_model() -> onnx.ModelProto:
    """One node of each kind whose inputs must share a type: Where, Concat, Max/Min/Sum/Mean,
    Equal/Greater, Pad's constant value, Clip's bounds, Resize's roi and scales, Expand,
    Tile, CastLike, ConstantOfShape, Constant."""
    f = lambda v, n: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    i64 = lambda v, n: numpy_helper.from_array(np.asarray(v, np.int64), n)  # noqa: E731
    inits = [f(0.25, "thr"), f(np.ones((1, 2, 4, 4)) * 0.5, "other"), f(-1.0, "lo"), f(1.0, "hi"),
             f(0.1, "padv"), i64([0, 0, 1, 1, 0, 0, 1, 1], "pads"), f([], "roi"),
             f([1, 1, 2, 2], "scales"), i64([1, 2, 4, 4], "shape4"), i64([1, 1, 1, 1], "reps"),
             i64([1, 2, 4, 4], "cshape")]
    nodes = [
        helper.make_node("Greater", ["x", "thr"], ["gt"], name="/Greater"),
        helper.make_node("Where", ["gt", "x", "other"], ["wh"], name="/Where"),
        helper.make_node("Max", ["wh", "other", "x"], ["mx"], name="/Max"),
        helper.make_node("Min", ["mx", "hi"], ["mn"], name="/Min"),
        helper.make_node("Sum", ["mn", "x"], ["sm"], name="/Sum"),
        helper.make_node("Mean", ["sm", "other"], ["me"], name="/Mean"),
        helper.make_node("Equal", ["me", "other"], ["eq"], name="/Equal"),
        helper.make_node("Cast", ["eq"], ["eqf"], name="/Cast", to=TP.FLOAT),
        helper.make_node("Clip", ["me", "lo", "hi"], ["cl"], name="/Clip"),
        helper.make_node("Pad", ["cl", "pads", "padv"], ["pd"], name="/Pad"),
        helper.make_node("Resize", ["x", "roi", "scales"], ["rs"], name="/Resize", mode="linear"),
        helper.make_node("MaxPool", ["rs"], ["rp"], name="/MaxPool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Expand", ["rp", "shape4"], ["ex"], name="/Expand"),
        helper.make_node("Tile", ["ex", "reps"], ["tl"], name="/Tile"),
        helper.make_node("ConstantOfShape", ["cshape"], ["zeros"], name="/ConstantOfShape",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Constant", [], ["k"], name="/Constant", value_float=2.0),
        helper.make_node("CastLike", ["eqf", "tl"], ["eql"], name="/CastLike"),
        helper.make_node("Mul", ["tl", "k"], ["tk"], name="/Mul"),
        helper.make_node("Add", ["tk", "zeros"], ["tz"], name="/Add"),
        helper.make_node("Add", ["tz", "eql"], ["te"], name="/Add2"),
        helper.make_node("Concat", ["te", "other"], ["cc"], name="/Concat", axis=1),
        helper.make_node("Slice", ["pd", "starts", "ends", "axes"], ["pds"], name="/Slice"),
        helper.make_node("Concat", ["cc", "pds"], ["y"], name="/Concat2", axis=1),
    ]
    inits += [i64([1, 1], "starts"), i64([5, 5], "ends"), i64([2, 3], "axes")]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 6, 4, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


BUILT = {"anchors": anchors_model, "outer_if": outer_weight_if_model, "loop": loop_model,
         "shared": shared_types_model}


def _feeds(name: str, lab) -> dict:
    if name == "outer_if":
        x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
        return {"x": x, "sr": np.array(16000, np.int64)}
    return make_feeds(lab, seed=0)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_kept_set_type_checks_loads_and_runs(name):
    """Nothing kept, everything kept, and seeded random kept sets: onnx's checker accepts the
    model, onnxruntime runs it, the outputs stay close to float32's."""
    proto = BUILT[name]()
    lab = onnx_lab.open(proto)
    feeds = _feeds(name, lab)
    ref = run(lab.model, feeds)
    rules = HalfRules(lab.model)
    cands = rules.candidates
    rng = np.random.default_rng(7)
    sets = [[], list(cands)] + [[c for c in cands if rng.random() < 0.5] for _ in range(8)]
    for kept in sets:
        half = half_proto(lab.model, kept, rules=rules)  # checks
        got = _session(half).run(None, feeds)
        for (k, r), g in zip(ref.items(), got):
            assert g.dtype == np.float32, k
            assert np.allclose(g, r, atol=2e-2, rtol=2e-2), (name, kept)
    # float16 I/O too, and the bfloat16 typing (checked, not run: no CPU kernels).
    raw = half_proto(lab.model, keep_io_types=False)
    assert _types(raw)[raw.graph.input[0].name] == TP.FLOAT16
    half_proto(lab.model, to=BFLOAT16, rules=HalfRules(lab.model, BFLOAT16))


def test_range_anchors_stay_an_index_computation():
    lab = onnx_lab.open(anchors_model())
    rules = HalfRules(lab.model)
    # Range and what sizes it stay float32; the values it feeds into are converted.
    assert {"limit", "limit2", "start", "step"} <= rules.index_values
    for nid in ("/Range", "/Cast", "/limit/Add"):
        assert nid not in rules.candidates, rules.rules[nid].why
    assert {"/conv/Conv", "/pix/Mul", "/head/Add"} <= set(rules.candidates)
    t = _types(half_proto(lab.model))
    assert t["grid"] == t["limit2"] == TP.FLOAT and t["c"] == t["pix"] == TP.FLOAT16
    plan = find_precision(lab, "fp16", atol=1e-3, rtol=1e-2, progress=False)
    assert plan.passed and "/Range" not in plan.kept


def test_outer_scope_weight_cast_lives_where_every_branch_sees_it():
    lab = onnx_lab.open(outer_weight_if_model())
    half = half_proto(lab.model)
    main_made = {o for n in half.graph.node for o in n.output}
    main_made |= {t.name for t in half.graph.initializer}
    # The float16 copy of the outer weight is defined in the main graph; the branches read it.
    assert "basis" in main_made and _types(half)["basis"] == TP.FLOAT16
    then_g = next(a.g for n in half.graph.node if n.op_type == "If"
                  for a in n.attribute if a.name == "then_branch")
    assert any("basis" in n.input for n in then_g.node)
    feeds = _feeds("outer_if", lab)
    ref = run(lab.model, feeds)["y"]
    got = _session(half).run(None, feeds)[0]
    assert np.allclose(got, ref, atol=1e-2)
    # The body's outputs keep their declared float32 type: the If's output is float32.
    assert _types(half)["b"] == TP.FLOAT
    plan = find_precision(lab, "fp16", feeds=feeds, atol=1e-4, rtol=1e-4, progress=False)
    assert plan.passed
    body_kept = [k for k in plan.kept if lab.index.entries[k].graph]
    assert set(body_kept) <= set(HalfRules(lab.model).candidates)


def test_a_conversion_that_does_not_type_check_is_a_bug_report():
    proto = anchors_model()
    broken = onnx.ModelProto()
    broken.CopyFrom(proto)
    rng = next(n for n in broken.graph.node if n.op_type == "Range")
    broken.graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "i0"))
    rng.input[0] = "i0"  # start int64, limit float: what onnxruntime's converter wrote
    with pytest.raises(ConversionBug, match="bug in onnx_lab") as e:
        check_converted(broken)
    assert "/Range" in str(e.value) and isinstance(e.value, onnx_lab.errors.LabError)
    assert onnx_lab.errors.ConversionBug is ConversionBug


LIGHT_MODELS = sorted(p.name for p in LIGHT.glob("*.onnx")) if LIGHT.is_dir() else []
#: The dims a user gives the samples with symbolic inputs (the decoders: a prefill of 8 tokens
#: on an empty cache).
SAMPLE_DIMS = {
    "transformer_block": {"batch": 1, "seq": 8},
    "bert_block": {"batch": 1, "seq": 8},
    "tiny_llm": {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0},
    "tiny_llm_int4": {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS + [f"sample:{s}" for s in samples.names()])
def test_real_models_convert_load_and_run(name):
    """The onnx package's backend models and the package samples: one conversion (checked),
    one load, one run with the original's output shapes and types. (Whether the values meet a
    tolerance is the search's question: inception_v1's constant weights overflow float16.)"""
    source = name if name.startswith("sample:") else str(LIGHT / name)
    dims = SAMPLE_DIMS.get(name.removeprefix("sample:"))
    lab = onnx_lab.open(source, dims=dims)
    feeds = make_feeds(lab, seed=0)
    rules = HalfRules(lab.model)
    assert rules.candidates
    half = half_proto(lab.model, rules=rules)
    got = _session(half).run(None, feeds)
    ref = run(lab.model, feeds)
    for (k, r), g in zip(ref.items(), got):
        assert g.shape == r.shape and g.dtype == r.dtype, k


@pytest.mark.slow
@pytest.mark.parametrize("name", samples.names())
def test_search_finds_a_plan_on_every_sample(name):
    lab = onnx_lab.open(f"sample:{name}", dims=SAMPLE_DIMS.get(name))
    plan = find_precision(lab, "fp16", atol=1e-3, rtol=1e-2, progress=False)
    assert plan.passed and set(plan.kept) <= set(HalfRules(lab.model).candidates)
    got = run(plan.model, plan.feeds[0])
    ref = run(lab.model, plan.feeds[0])
    for k, r in ref.items():
        assert np.allclose(got[k], r, atol=1e-3, rtol=1e-2), k


@pytest.mark.parametrize("name", sorted(BUILT))
def test_bf16_emulation_rounds_only_what_a_conversion_would(name):
    """The bf16 emulation follows the same rules: converted groups round (Casts through
    bfloat16), index computations and Range/Resize's size inputs never do."""
    from onnx_lab.numerics.precision.trials import Converter as _Converter

    lab = onnx_lab.open(BUILT[name]())
    feeds = _feeds(name, lab)
    conv = _Converter(lab.model, "bf16", None)
    emulated = conv.convert(())
    ref, got = run(lab.model, feeds), run(emulated, feeds)
    for k, r in ref.items():
        assert got[k].shape == r.shape and np.allclose(got[k], r, atol=5e-2, rtol=5e-2), k
    def rounding(m):  # Cast through bfloat16 (opset >= 13) or the split (opset 12)
        return [n for n in m.graph.all_nodes() if n.name.endswith(("/to_bf16", "/split_hi"))]

    assert rounding(emulated)
    if name == "anchors":
        rng = next(n for n in emulated.graph if n.op_type == "Range")
        assert [v.name for v in rng.inputs] == ["start", "limit2", "step"]
        # opset 12 has no bfloat16 Cast: the split rounds exactly like the Cast would
        x = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 100
        c = x * np.float32(65537.0)
        assert np.array_equal(c - (c - x), precision_bf16_round(x))
    assert not rounding(conv.convert(conv.candidates()))


def precision_bf16_round(x):
    from onnx_lab.numerics.half import bf16_round

    return bf16_round(x)


@pytest.mark.parametrize("name", ["light_squeezenet.onnx", "light_resnet50.onnx"])
def test_narrow_io_keeps_the_declared_type_of_initializers_listed_as_inputs(name):
    # IR 3 lists every weight as a graph input too: keep_io_types=False narrowed their
    # declared type while their data stayed float32, which the checker refused (ConversionBug
    # on 7 of the 9 light models).
    lab = onnx_lab.open(str(LIGHT / name))
    half = half_proto(lab.model, keep_io_types=False)
    inits = {t.name for t in half.graph.initializer}
    declared = {i.name: i.type.tensor_type.elem_type for i in half.graph.input}
    real = [n for n in declared if n not in inits]
    assert real and all(declared[n] == TP.FLOAT16 for n in real)
    assert all(declared[n] == t.data_type for t in half.graph.initializer
               for n in [t.name] if n in declared)
    feeds = make_feeds(lab, seed=0)
    out = _session(half).run(None, {k: v.astype(np.float16) for k, v in feeds.items()})
    ref = run(lab.model, feeds)[lab.model.graph.outputs[0].name]
    assert out[0].dtype == np.float16 and out[0].shape == ref.shape


def _already_half_model() -> onnx.ModelProto:
    """A float16 model as torch writes one after ``model.half()``: float16 input, weights
    and output."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 4)) * 0.3).astype(np.float16), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float16), "b")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Add", ["h", "b"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")],
        "half", [helper.make_tensor_value_info("x", TP.FLOAT16, [2, 8])],
        [helper.make_tensor_value_info("y", TP.FLOAT16, [2, 4])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_already_float16_model_converts_without_a_bug_report():
    """keep_io_types keeps each output's declared type: a float16 output stays float16 (it
    used to get a Cast to float32 under its float16 declaration: ConversionBug)."""
    proto = _already_half_model()
    half = onnx_lab.to_fp16(onnx_lab.open(proto))
    assert list(half.outputs["dtype"]) == ["float16"]
    converted = half.model.to_proto()
    check_converted(converted)
    x = {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float16)}
    np.testing.assert_array_equal(_session(converted).run(None, x)[0],
                                  _session(proto).run(None, x)[0])
