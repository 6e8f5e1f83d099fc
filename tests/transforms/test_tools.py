"""Tool wrappers (onnxsim, onnxoptimizer:*, ort:*) as passes with provenance and verification."""

from __future__ import annotations

import onnx
import onnxoptimizer
import pytest
from _machinery import export_tiny_bert, ir3_conv_bn_proto, save_external

import onnx_lab
from onnx_lab.errors import PassError
from onnx_lab.samples import build
from onnx_lab.transforms import available
from onnx_lab.transforms.base import get_pass

STEM = {"/stem/conv/Conv", "/stem/bn/BatchNormalization"}


def test_every_onnxoptimizer_pass_is_registered():
    names = set(available().name)
    for p in onnxoptimizer.get_available_passes():
        assert f"onnxoptimizer:{p}" in names
    assert {"onnxsim", "ort:basic", "ort:extended", "ort:all"} <= names
    df = available().set_index("name")
    assert df.loc["onnxsim", "kind"] == "tool"
    assert "skip_fuse_bn" in df.loc["onnxsim", "parameters"]


def test_onnxsim_with_provenance_and_verification():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxsim")
    assert r.modified and r.nodes_after < r.nodes_before
    assert r.verify_passed, r.verification.loc[~r.verification.passed]
    assert set(lab.origins["/stem/conv/Conv"]) == STEM
    assert set(r.provenance["/stem/conv/Conv"]) == STEM
    assert "/stem/bn/BatchNormalization" in r.removed
    # the fused conv output is compared with the BN output it stands for
    rep = r.verification.set_index("node_id")
    assert rep.loc["/stem/conv/Conv", "ref_node_id"] == "/stem/bn/BatchNormalization"


def test_onnxsim_params_are_passed_and_checked():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxsim", skip_fuse_bn=True)
    assert r.params["skip_fuse_bn"] is True
    assert "BatchNormalization" in set(lab.nodes.op_type)
    with pytest.raises(PassError, match="skip_fuse_bn"):
        lab.apply("onnxsim", skip_fuse_bn="no")


def test_onnxsim_fixes_input_shapes_from_the_lab_dims():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("onnxsim")
    assert r.verify_passed
    assert any("input shapes" in n for n in r.notes)
    assert lab.inputs.loc[0, "shape"] == (1, 8, 32)
    assert lab.dims == {}  # the dims are fixed now


def test_onnxoptimizer_pass_fuse_bn_into_conv():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxoptimizer:fuse_bn_into_conv")
    assert r.modified and r.verify_passed
    assert "BatchNormalization" in set(lab.original.nodes.op_type)
    assert set(lab.origins["/block1/conv/Conv"]) == {"/block1/conv/Conv",
                                                     "/block1/bn/BatchNormalization"}


def test_onnxoptimizer_noop_has_a_reason():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxoptimizer:fuse_consecutive_concats")
    assert r.modified is False and "unchanged" in r.reason


@pytest.mark.parametrize("level", ["basic", "extended"])
def test_ort_offline_levels(level):
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply(f"ort:{level}")
    assert r.modified and r.verify_passed
    assert STEM <= set(lab.origins["/stem/conv/Conv"])
    if level == "extended":
        assert "FusedConv" in set(lab.nodes.op_type)
        assert any("com.microsoft" in n for n in r.notes)
        assert "/stem/relu/Relu" in lab.origins["/stem/conv/Conv"]


def test_ort_all_marks_unknown_provenance():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("ort:all")
    assert r.modified and r.verify_passed
    assert any("machine" in n for n in r.notes)
    unknown = [k for k, v in r.provenance.items() if v == []]
    assert all(lab.origins[k] == [] for k in unknown)


def test_tools_on_a_model_with_external_data(tmp_path):
    path = tmp_path / "convnet.onnx"
    save_external(build("convnet"), path)
    before = path.read_bytes(), (tmp_path / "convnet.onnx.data").read_bytes()
    lab = onnx_lab.open(path)
    assert lab.model.has_external_data
    for name in ("onnxsim", "ort:basic"):
        lab.checkout(0)
        r = lab.apply(name)
        assert r.modified and r.verify_passed, name
    assert lab.original.model.has_external_data  # step 0 still reads the file
    assert (path.read_bytes(), (tmp_path / "convnet.onnx.data").read_bytes()) == before


def test_ort_fusions_of_a_transformer_block_are_traced():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("ort:extended")
    assert r.verify_passed
    ln = [k for k in r.provenance if "LayerNormFusion" in k]
    assert ln and {"/layer.0/ln/ReduceMean", "/layer.0/ln/Sqrt", "/layer.0/ln/Add_1"} <= \
        set(lab.origins[ln[0]])
    scale = [k for k in r.provenance if "MatMulScaleFusion" in k]
    assert scale and set(lab.origins[scale[0]]) == {"/layer.0/attention/core/MatMul",
                                                     "/layer.0/attention/core/Div"}
    # the fused LayerNorm output is compared with the last node it replaced
    rep = r.verification.set_index("node_id")
    assert rep.loc[ln[0], "match"] in ("name", "provenance")


def test_ort_result_of_an_ir3_model_stays_valid_for_the_next_tool():
    # onnxruntime keeps IR 3 but does not list the weights it creates as graph inputs; the
    # next tool (onnxsim) and the checker refused the result.
    m = ir3_conv_bn_proto()
    lab = onnx_lab.open(m)
    r = lab.apply("ort:basic")
    assert r.modified and r.verify_passed
    assert "BatchNormalization" not in set(lab.nodes.op_type)
    proto = lab.model.to_proto()
    assert proto.ir_version == 3
    onnx.checker.check_model(proto)
    # The entries of the folded weights are not left behind as inputs to feed.
    assert list(lab.inputs.name) == ["x"]
    assert {i.name for i in proto.graph.input} == {"x"} | {t.name for t in proto.graph.initializer}
    assert lab.apply("onnxsim").verify_passed is not False
    assert list(lab.inputs.name) == ["x"]


def test_onnxslim_is_a_verified_and_traced_tool_step():
    df = available().set_index("name")
    assert df.loc["onnxslim", "kind"] == "tool" and df.loc["onnxoptimizer", "kind"] == "tool"
    assert "skip_fusion_patterns" in df.loc["onnxslim", "parameters"]
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxslim")
    assert r.modified and r.nodes_after < r.nodes_before
    assert r.verify_passed, r.verification.loc[~r.verification.passed]
    assert "BatchNormalization" not in set(lab.nodes.op_type)
    fused = [k for k, v in lab.origins.items() if "/stem/bn/BatchNormalization" in v]
    assert len(fused) == 1 and set(lab.origins[fused[0]]) == STEM
    assert lab.history.iloc[-1]["pass"] == "onnxslim"


def test_onnxslim_switches_and_params():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxslim", skip_fusion_patterns=["FusionConvBN"])
    assert r.verify_passed and "BatchNormalization" in set(lab.nodes.op_type)
    with pytest.raises(PassError, match="FusionConvBN"):  # a close match is named
        lab.apply("onnxslim", skip_fusion_patterns=["FusionConvBM"])
    with pytest.raises(PassError, match="optimization 'folding'"):
        lab.apply("onnxslim", skip_optimizations=["folding"])
    p = get_pass("onnxslim", skip_optimizations=["weight_tying"])
    names = [s.name for s in p.switches(lab.model)]
    assert "FusionConvBN" in names and "constant_folding" in names
    assert "weight_tying" not in names and "graph_fusion" not in names
    assert p.params_without([p.switch_named("FusionConvBN"),
                             p.switch_named("constant_folding")]) == {"skip_fusion_patterns": ["FusionConvBN"],
                                  "skip_optimizations": ["weight_tying", "constant_folding"],
                                  "no_shape_infer": False}
    # graph_fusion off: no pattern is a switch any more
    names = [s.name for s in get_pass("onnxslim", skip_optimizations=["graph_fusion"])
             .switches(lab.model)]
    assert not any(n.startswith(("Fusion", "Elimination")) for n in names)


def test_onnxslim_fixes_input_shapes_from_the_lab_dims():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("onnxslim")
    assert r.verify_passed
    assert any("input shapes" in n for n in r.notes)
    assert lab.inputs.loc[0, "shape"] == (1, 8, 32)


def test_onnxoptimizer_pass_list_step():
    lab = onnx_lab.open("sample:convnet")
    p = get_pass("onnxoptimizer")
    assert [s.name for s in p.switches(lab.model)] == \
        onnxoptimizer.get_fuse_and_elimination_passes()
    r = lab.apply("onnxoptimizer", passes=["fuse_bn_into_conv", "eliminate_identity"],
                  skip_passes=["eliminate_identity"])
    assert r.modified and r.verify_passed
    assert "Identity" in set(lab.nodes.op_type)
    bns = [(v.nodes.op_type == "BatchNormalization").sum() for v in (lab.original, lab)]
    assert bns == [3, 1]  # block2's BatchNormalization follows an Add, not the Conv
    with pytest.raises(PassError, match="no pass 'fuse_bn'"):
        lab.apply("onnxoptimizer", passes=["fuse_bn"])
    with pytest.raises(PassError, match="no pass in this run 'eliminate_identity'"):
        lab.apply("onnxoptimizer", passes=["fuse_bn_into_conv"], skip_passes=["eliminate_identity"])
    r = lab.apply("onnxoptimizer", passes=["eliminate_identity"],
                  skip_passes=["eliminate_identity"])
    assert r.modified is False and "skipped" in r.reason


def test_onnxsim_switches_are_its_default_optimizers_and_constant_folding():
    lab = onnx_lab.open("sample:convnet")
    p = get_pass("onnxsim", skip_fuse_bn=True, skipped_optimizers=["eliminate_identity"])
    names = [s.name for s in p.switches(lab.model)]
    assert "fuse_consecutive_transposes" in names and names[-1] == "constant_folding"
    assert "fuse_bn_into_conv" not in names and "eliminate_identity" not in names
    assert p.params_without([p.switch_named("constant_folding"), p.switch_named("nop")])[
        "skip_constant_folding"] is True
    with pytest.raises(PassError, match="default optimizer 'fuse_everything'"):
        p.switch_named("fuse_everything")


def test_ort_disabled_optimizers_and_switches():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("ort:basic", disabled_optimizers=["ConvBNFusion"])
    assert r.modified and r.verify_passed and r.params["disabled_optimizers"] == ["ConvBNFusion"]
    assert "BatchNormalization" in set(lab.nodes.op_type)
    lab.undo()
    # Switches: what onnxruntime's log says changed this model, rule-based transformers split
    # into the rules that act; those already disabled are not switches.
    p = get_pass("ort:basic", disabled_optimizers=["EliminateDropout"])
    names = [s.name for s in p.switches(lab.model)]
    assert {"ConvBNFusion", "ConvAddFusion", "EliminateIdentity", "ConstantFolding"} <= set(names)
    assert "EliminateDropout" not in names and not any("RuleBased" in n for n in names)


def test_a_tool_that_changes_only_a_weight_is_a_verified_change():
    # A wrong constant fold keeps the structure; the step must still be seen and verified.
    from onnx_lab.transforms._whole import WholeModelPass

    class Scale(WholeModelPass):
        """Test tool: scale the first initializer by 1.3."""

        def rebuild(self, model):
            proto = model.to_proto()
            t = proto.graph.initializer[0]
            t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t) * 1.3, t.name))
            return self.from_proto(proto, model)

    Scale.name = "test_scale"
    lab = onnx_lab.open("sample:convnet")
    r = Scale().run(lab.model)
    assert r.modified and r.nodes_after == r.nodes_before


def test_ort_fusing_qdq_into_int8_kernels_says_so():
    # extended fuses DequantizeLinear -> Conv -> QuantizeLinear into QLinearConv, which
    # rounds in integers: the step's notes name the fusion and the int8 comparison.
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    import onnx_lab

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.uint8), "z"),
             numpy_helper.from_array(rng.integers(-50, 50, (4, 3, 3, 3)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             helper.make_node("Conv", ["xd", "w"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 4, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    lab = onnx_lab.open(m)
    r = lab.apply("ort:extended", verify=False)
    assert "QLinearConv" in set(lab.nodes.op_type)
    assert any("into int8 kernels" in n and "preset='int8'" in n for n in r.notes), r.notes
    r = onnx_lab.open(m).apply("ort:basic", verify=False)
    assert not any("int8 kernels" in n for n in r.notes)


def test_a_gemm_that_took_in_the_bias_is_not_compared_with_the_matmul():
    # Static shapes let onnxruntime's MatMulAddFusion make Reshape -> Gemm -> Reshape; the Gemm
    # is stamped with the MatMul alone but reads the Add's bias: comparing it with the
    # MatMul's output failed a correct step (max_abs 0.1, outputs within 7e-7).
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    lab.fix_dims({"batch": 1, "seq": 8})
    r = lab.apply("ort:extended")
    assert "Gemm" in set(lab.nodes.op_type)
    assert r.verify_passed, r.notes
    why = r.verification.attrs["not_comparable"]["/layer.0/attention/key/MatMul_output_0"]
    # the Gemm works on the flattened [8, 32] (its shape is the first reason given; the bias
    # it took in is the second, tested in numerics/test_divergence_fusions.py)
    assert "has shape [8, 32], the reference's '/layer.0/attention/key/MatMul_output_0'" \
        " [1, 8, 32]" in why


def test_a_layout_kept_under_a_name_follows_its_reshaped_input():
    # onnxsim turns the MatMul + Add before GELU 2-D: the Erf keeps its name and reads the
    # same data as [8, 64] instead of [1, 8, 64]; it is compared flat, not failed on shape.
    lab = onnx_lab.open("sample:bert_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("onnxsim")
    assert r.verify_passed, r.notes
    rows = r.verification.set_index("tensor")
    erf = rows.loc["/layer.0/intermediate/gelu/Erf_output_0"]
    assert bool(erf.passed) and "compared flat" in erf.note


def _qdq_int8_cnn(tmp_path, *, per_channel: bool = False):
    """Conv -> Relu, quantized by onnxruntime's quantize_static (QDQ, int8), saved."""
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(0)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale)
                                       .astype(np.float32), name)

    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2]),
         helper.make_node("Relu", ["c2"], ["r2"]),
         helper.make_node("ReduceMean", ["r2"], ["m"], axes=[2, 3], keepdims=0),
         helper.make_node("MatMul", ["m", "w3"], ["h"]),
         helper.make_node("Add", ["h", "b3"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["y"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 10])],
        [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 16, 8, 3, 3, scale=0.2),
         init("b2", 16, scale=0.1), init("w3", 16, 10), init("b3", 10, scale=0.1)])
    src, q = tmp_path / "f.onnx", tmp_path / f"q{int(per_channel)}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                              for _ in range(4)])

        def get_next(self):
            return next(self.data, None)

    quantize_static(str(src), str(q), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    per_channel=per_channel)
    return q


def test_quantized_codes_are_not_compared_with_float_values(tmp_path):
    # onnxruntime's QDQS8ToU8 (extended) makes uint8 QuantizeLinears whose provenance names
    # the float DequantizeLinear after the int8 one: codes against values failed at max_abs
    # 216; that pair is not comparable, the outputs still are.
    lab = onnx_lab.open(_qdq_int8_cnn(tmp_path))
    r = lab.apply("ort:extended")
    rep = r.verification
    bad = rep[~rep.passed]
    assert set(bad.match) <= {"output"}, bad[["tensor", "ref_tensor", "max_abs"]]
    assert any("uint8" in why for why in rep.attrs["not_comparable"].values()), \
        rep.attrs["not_comparable"]


@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_kernels_may_round_one_quantization_step_apart(tmp_path, per_channel):
    # extended fuses Q/DQ into QLinearConv, which rounds in integers where the QDQ graph, run
    # as written, computed in float: the output (a DequantizeLinear's) came out one step
    # (1/255) apart and the correct step failed. One step passes, with a note; more fails.
    import numpy as np

    from onnx_lab.numerics.verify import verify

    lab = onnx_lab.open(_qdq_int8_cnn(tmp_path, per_channel=per_channel))
    r = lab.apply("ort:extended")
    import onnx_ir as ir

    assert r.requantized and r.verify_passed, r.notes
    assert "QLinearConv" in set(lab.nodes.op_type)
    rounded = r.verification.note.str.contains("within one quantization step")
    if not per_channel:  # this model's output lands one step apart on the verify sample
        assert rounded.any()
    # the same step with the fused Conv's weights doubled: many steps off, it fails
    broken = r.model.clone()
    conv = next(n for n in broken.graph if n.op_type == "QLinearConv")
    w = conv.inputs[3].const_value.numpy()
    conv.inputs[3].const_value = ir.Tensor(np.clip(w.astype(np.int32) * 2, -127, 127)
                                           .astype(w.dtype), name=conv.inputs[3].name)
    rep = verify(lab.original.model, broken, r)
    assert not rep.attrs["passed"]


@pytest.mark.slow
def test_an_ort_result_that_ort_defaults_cannot_reload_says_how_to_load_it(tmp_path):
    # onnxruntime re-optimizes a model it optimized offline; its 'basic' output of a dynamo
    # BERT export stops there ("Attempt to replace the existing tensor"). The step says so
    # and how to load it, exactly when a fresh default session fails on the saved file.
    import onnxruntime as ort

    path = tmp_path / "bert.onnx"
    export_tiny_bert(path, dynamo=True)
    lab = onnx_lab.open(path)
    r = lab.apply("ort:basic")
    assert r.verify_passed
    saved = lab.save(tmp_path / "basic.onnx")
    try:
        ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"])
        fails = False
    except Exception:  # noqa: BLE001 - what the user's default session does
        fails = True
    notes = [n for n in r.notes if "at its default options" in n]
    assert bool(notes) == fails, r.notes
    if fails:
        assert "ORT_ENABLE_BASIC or lower" in notes[0]
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        ort.InferenceSession(str(saved), so, providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_a_shape_moved_above_its_transpose_is_not_compared_with_the_old_one(tmp_path):
    # onnxruntime's TransposeOptimizer (basic) points the Shape of a Transpose at the
    # Transpose's input (a Gather of the perm after it), the Shape keeping its name; its
    # input's Reshape was rewritten, so nothing paired it: compared with the reference's
    # Shape, a correct step failed at max_abs 6 on a TorchScript BERT export.
    path = tmp_path / "bert.onnx"
    export_tiny_bert(path, dynamo=False)
    lab = onnx_lab.open(path, dims={"batch": 1, "seq": 8})
    r = lab.apply("ort:basic")
    assert r.verify_passed, r.notes
    reasons = r.verification.attrs["not_comparable"]
    assert any("(Shape) reads" in why and "does not read it" in why
               for why in reasons.values()), reasons


def test_an_onnxsim_failure_with_every_shape_given_does_not_ask_for_shapes():
    # skl2onnx's random forest, ZipMap removed, shapes given at open: onnxsim still fails
    # ("Field 'shape' of 'type' is required but missing"); the fix names what is left to try
    # instead of asking for the shapes the user gave.
    pytest.importorskip("skl2onnx")
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier

    from onnx_lab.errors import LabError

    rng = np.random.RandomState(0)
    x = rng.randn(200, 4).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 1)
    rf = RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(x, y)
    m = to_onnx(rf, x[:1], options={RandomForestClassifier: {"zipmap": True}},
                target_opset={"": 17, "ai.onnx.ml": 3})
    lab = onnx_lab.open(m, shapes={"X": [3, 4]})
    assert lab.apply("remove_zipmap").verify_passed
    try:
        r = lab.apply("onnxsim")
    except LabError as e:
        assert "Give the input shapes" not in e.fix and "every input shape given" in e.fix
    else:  # an onnxsim that handles it: verified like any tool step
        assert r.verify_passed is not False


def _paddle_conv_bn() -> onnx.ModelProto:
    """Conv + BatchNormalization + Relu whose weights are Constant nodes, as PaddlePaddle
    exports (PP-OCR) write them."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)

    def const(name, arr):
        return helper.make_node("Constant", [], [name], name=f"{name}_c",
                                value=numpy_helper.from_array(arr.astype(np.float32), name))

    nodes = [const("w", rng.standard_normal((4, 3, 3, 3))), const("cb", rng.standard_normal(4)),
             const("scale", rng.uniform(0.5, 2, 4)), const("bias", rng.standard_normal(4)),
             const("mean", rng.standard_normal(4)), const("var", rng.uniform(0.5, 2, 4)),
             helper.make_node("Conv", ["x", "w", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"],
                              name="bn"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", 1, [1, 4, 8, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("tool", ["onnxoptimizer", "onnxsim"])
def test_a_batchnorm_folded_into_constant_node_weights_is_no_false_alarm(tool):
    # the tool's new weight node (a Mul W*scale, a new Constant) keeps the old weight's
    # origin: it was compared with the unfolded weight and the step failed (PP-OCR cls/rec/det)
    lab = onnx_lab.open(_paddle_conv_bn())
    r = lab.apply(tool)
    assert r.modified and r.verify_passed, r.notes
    assert "BatchNormalization" not in set(lab.nodes.op_type)


def _branchy(broken: bool) -> onnx.ModelProto:
    """y = If(sum(x) > 1e9): then-branch never taken by real inputs. Its input's rank comes
    from a Squeeze with computed axes: onnxruntime learns it (rank 2) only by constant
    folding, at its default options; ``broken`` puts an LSTM (rank 3 only) in the branch,
    so the model loads with optimizations off and not with them on (onnxsim's silero-vad)."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    h = 4
    then_nodes = [helper.make_node("ReduceSum", ["xr"], ["t"], keepdims=0)]
    if broken:
        then_nodes = [helper.make_node("LSTM", ["xr", "W", "R"], ["Y"], hidden_size=h),
                      helper.make_node("ReduceSum", ["Y"], ["t"], keepdims=0)]
    then = helper.make_graph(then_nodes, "then", [],
                             [helper.make_tensor_value_info("t", T.FLOAT, None)])
    other = helper.make_graph([helper.make_node("ReduceMax", ["xr"], ["e"], keepdims=0)],
                              "else", [], [helper.make_tensor_value_info("e", T.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("Add", ["a1", "a2"], ["ax"], name="axes"),
         helper.make_node("Squeeze", ["x", "ax"], ["xr"], name="squeeze"),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
         helper.make_node("Greater", ["s", "big"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
        "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 5, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.array([0], np.int64), "a1"),
         numpy_helper.from_array(np.array([0], np.int64), "a2"),
         numpy_helper.from_array(np.array(1e9, np.float32), "big"),
         numpy_helper.from_array(np.ones((1, 4 * h, 3), np.float32), "W"),
         numpy_helper.from_array(np.ones((1, 4 * h, h), np.float32), "R")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_tool_result_a_default_session_cannot_load_fails_its_step(tmp_path):
    # verification runs with optimizations off; a deployment loads with them on: onnxsim's
    # silero-vad passed its step and lab.save, and every default session refused the file
    from onnx_lab.transforms._whole import WholeModelPass
    from onnx_lab.transforms.base import register_pass

    @register_pass("test_tool_breaking_default_load", kind="tool")
    class _Breaks(WholeModelPass):
        """Test tool (wrong for a deployment): the untaken branch gets an LSTM."""

        def rebuild(self, model):
            return self.from_proto(_branchy(broken=True), model)

    import onnxruntime as ort

    lab = onnx_lab.open(_branchy(broken=False))
    r = lab.apply("test_tool_breaking_default_load")
    assert r.modified and r.verify_passed is False
    assert any("does not load" in n and "First input tensor must have rank 3" in n
               for n in r.notes), r.notes
    with pytest.raises(onnx_lab.errors.SaveError, match="as a deployment loads it"):
        lab.save(tmp_path / "broken.onnx")
    out = lab.save(tmp_path / "broken.onnx", check=False)
    with pytest.raises(Exception, match="rank 3"):
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])  # as noted


def test_onnxsims_advice_follows_what_was_tried():
    # a tf2onnx StringLookup export: onnxsim fails ("Field 'shape' of 'type' is required but
    # missing") whatever is switched off, and its advice repeated skip_constant_folding=True
    from onnx import TensorProto, helper

    nodes = [helper.make_node("CategoryMapper", ["words"], ["ids"], domain="ai.onnx.ml",
                              cats_strings=["a", "b"], cats_int64s=[0, 1], default_int64=0,
                              name="map"),
             helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Relu", ["f"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("words", TensorProto.STRING, ["n", 4])],
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, None),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 2)]), dims={"n": 1})
    fixes = []
    for kw in ({}, {"skip_constant_folding": True},
               {"skip_constant_folding": True, "skip_shape_inference": True}):
        with pytest.raises(PassError) as e:
            lab.apply("onnxsim", **kw)
        fixes.append(e.value.fix)
    assert "skip_constant_folding=True" in fixes[0]
    assert "skip_shape_inference=True" in fixes[1] and "skip_constant_folding" not in fixes[1]
    assert "skipped_optimizers" not in fixes[2] and "apply_preset('safe')" in fixes[2]


def test_onnxslim_not_installed_is_a_pass_error(monkeypatch):
    # onnxslim is an extra (slim): a plain pip install offered the step and raised a bare
    # ModuleNotFoundError (the CLI's "internal error", exit 3)
    import sys

    for name in ("onnxslim", "onnxslim.core.optimization", "onnxslim.core.pattern.registry"):
        monkeypatch.setitem(sys.modules, name, None)
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(PassError, match="pip install onnxslim"):
        lab.apply("onnxslim")
    assert len(lab.history) == 1
