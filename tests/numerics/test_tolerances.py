"""Verification that never cries wolf, and still catches real errors: presets, scale-aware
intermediates, blame on the consumer of a differing weight, confirm mode."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.errors import UnknownNameError
from onnx_lab.numerics.confirm import local_check
from onnx_lab.numerics.metrics import PRESETS, Rule, rule_for, tensor_metrics
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.passes.fuse_conv_bn import FuseConvBN

# ---------------------------------------------------------------------------- models


def _vi(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def cancelling_conv_bn_stack(blocks: int = 3, channels: int = 8, seed: int = 0
                             ) -> onnx.ModelProto:
    """A deep Conv+BN stack in the style of PaddleOCR's detector: each block adds two
    Conv+BN branches of large magnitude that nearly cancel, so the sums hold elements near
    zero next to large ones; the output is a Sigmoid. Folding a BN into its Conv reorders float
    sums: the near-zero elements of the Adds move by the rounding of their large summands,
    which an element-wise test of those intermediates calls a failure although the output
    moves by ~1e-7."""
    rng = np.random.default_rng(seed)
    c = channels
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 100
        delta = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.01
        for side, (weight, sign) in enumerate(((w, 1.0), (-(w + delta), 1.0))):
            p = f"b{b}s{side}"
            scale = rng.uniform(0.5, 1.5, c).astype(np.float32) * sign
            mean = rng.standard_normal(c).astype(np.float32)
            var = rng.uniform(0.5, 1.5, c).astype(np.float32)
            bias = rng.standard_normal(c).astype(np.float32)
            inits += [numpy_helper.from_array(weight, f"{p}_W"),
                      numpy_helper.from_array(scale, f"{p}_scale"),
                      numpy_helper.from_array(bias if side == 0 else bias * 0, f"{p}_B"),
                      numpy_helper.from_array(mean * (1 if side == 0 else 0), f"{p}_mean"),
                      numpy_helper.from_array(var, f"{p}_var")]
            nodes += [helper.make_node("Conv", [x, f"{p}_W"], [f"{p}_conv"], name=f"{p}_conv",
                                       pads=[1, 1, 1, 1]),
                      helper.make_node("BatchNormalization",
                                       [f"{p}_conv", f"{p}_scale", f"{p}_B", f"{p}_mean",
                                        f"{p}_var"], [f"{p}_bn"], name=f"{p}_bn", epsilon=1e-5)]
        nodes.append(helper.make_node("Add", [f"b{b}s0_bn", f"b{b}s1_bn"], [f"b{b}_sum"],
                                      name=f"b{b}_add"))
        nodes.append(helper.make_node("Mul", [f"b{b}_sum", "tenth"], [f"b{b}_out"],
                                      name=f"b{b}_scale"))
        x = f"b{b}_out"
    inits.append(numpy_helper.from_array(np.array(0.1, np.float32), "tenth"))
    nodes.append(helper.make_node("Sigmoid", [x], ["y"], name="sigmoid"))
    return _model(nodes, [_vi("x", [1, c, 16, 16])], [_vi("y", [1, c, 16, 16])], inits)


@register_pass("test_fuse_conv_bn_wrong_epsilon", kind="test")
class _WrongEpsilon(FuseConvBN):
    """fuse_conv_bn, made wrong on purpose: it folds with epsilon 1e-1 instead of the node's."""

    def apply(self, m, nodes, rw):  # noqa: D102 - the fault is the point
        nodes[1].attributes["epsilon"] = onnx_lab_attr("epsilon", 1e-1)
        super().apply(m, nodes, rw)


@register_pass("test_swap_conv_channels", kind="test")
class _SwapChannels(LabPass):
    """Swap output channels 0 and 1 of one Conv's weight (a wrong rewrite)."""

    no_match_reason = "no Conv"

    def find(self, model):
        nid = next(n for n, e in model.index.entries.items() if e.node.op_type == "Conv")
        return [Match(f"{self.name}:{nid}", "swap", self.name, [nid], nid, "swap",
                      data={"node": model.index.node(nid)})]

    def rewrite(self, model, matches: list[Match], rw: Rewrite) -> None:
        from onnx_lab.core.values import const_array

        node = matches[0].data["node"]
        w = const_array(node.inputs[1]).copy()
        w[[0, 1]] = w[[1, 0]]
        rw.set_const_input(node, 1, w)
        rw.record(node, [node])


def onnx_lab_attr(name: str, value: float):
    import onnx_ir as ir

    return ir.AttrFloat32(name, value)


# ---------------------------------------------------------------------------- presets


def test_the_one_table_has_presets_per_dtype_and_purpose():
    assert {"exact", "fp32", "fp16", "bf16", "int8"} <= set(PRESETS)
    name, rule = rule_for("float32", output=True)
    assert (name, rule.kind, rule.atol, rule.rtol) == ("fp32", "elementwise", 1e-4, 1e-3)
    assert rule_for("float32", output=False)[1].kind == "scaled"
    assert rule_for("float16", output=True)[0] == "fp16"
    assert rule_for("int64", output=False, preset="fp16") == ("exact", PRESETS["exact"].outputs)
    assert rule_for("float32", output=True, preset="int8")[1].kind == "sqnr"
    with pytest.raises(UnknownNameError, match="tolerance preset"):
        rule_for("float32", output=True, preset="fp17")


def test_scaled_rule_accepts_rounding_near_zero_and_rejects_real_errors():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(10_000).astype(np.float32) * 10
    ref[:100] = 1e-6  # elements that cancelled to ~0
    noisy = ref + rng.standard_normal(ref.size).astype(np.float32) * 1e-3  # rounding-sized
    scaled, elementwise = Rule("scaled", 1e-4, 1e-3), Rule("elementwise", 1e-4, 1e-3)
    assert not tensor_metrics(ref, noisy, rule=elementwise)["passed"]  # the false alarm
    assert tensor_metrics(ref, noisy, rule=scaled)["passed"]
    wrong = ref.copy()
    wrong[5000] += 1.0  # one element really wrong
    assert not tensor_metrics(ref, wrong, rule=scaled)["passed"]
    nan = ref.copy()
    nan[7] = np.nan
    assert not tensor_metrics(ref, nan, rule=scaled)["passed"]
    assert math.isinf(tensor_metrics(ref, nan, rule=scaled)["max_abs"])


def test_an_output_wholly_below_atol_says_the_rule_cannot_see_its_errors(tmp_path):
    # y = x * 1e-6 against y = 0: every |value| is under atol 1e-4, so the element-wise rule
    # passed it with cosine 0 and no word. It still passes (an output that small may be a
    # cancellation whose rounding is as large as itself), and says why that pass means little.
    ref = np.linspace(-2e-6, 2e-6, 32, dtype=np.float32)
    rule = Rule("elementwise", 1e-4, 1e-3)
    m = tensor_metrics(ref, np.zeros_like(ref), rule=rule)
    assert m["passed"] and "every |value| is below atol 0.0001" in m["note"]
    assert "SQNR 0.0 dB, cosine 0.000" in m["note"] and "atol=2e-09" in m["note"]
    # its own rounding is no news: no note; nor a reference of zeros (no scale to judge by)
    assert tensor_metrics(ref, ref * np.float32(1 + 1e-6), rule=rule)["note"] == ""
    assert tensor_metrics(np.zeros(4, np.float32), np.full(4, 1e-9, np.float32),
                          rule=rule)["note"] == ""
    # nor a tensor of ordinary scale
    big = np.linspace(-2, 2, 32, dtype=np.float32)
    assert tensor_metrics(big, big + np.float32(5e-5), rule=rule)["note"] == ""
    # through compare, on two saved models, in the summary a user reads
    for name, scale in (("a", 1e-6), ("b", 0.0)):
        onnx.save(_model([helper.make_node("Mul", ["x", "s"], ["y"])], [_vi("x", [4, 8])],
                         [_vi("y", [4, 8])],
                         [numpy_helper.from_array(np.array(scale, np.float32), "s")]),
                  tmp_path / f"{name}.onnx")
    c = onnx_lab.compare(tmp_path / "a.onnx", tmp_path / "b.onnx")
    assert c.passed and "the rule cannot see an error at this scale" in c.summary_text()
    tight = onnx_lab.compare(tmp_path / "a.onnx", tmp_path / "b.onnx", atol=1e-9)
    assert not tight.passed  # the advice in the note works


# ---------------------------------------------------------------------------- verification


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "region"])
def test_safe_preset_has_no_false_alarm_on_a_cancelling_conv_bn_stack(mode):
    lab = onnx_lab.open(cancelling_conv_bn_stack())
    results = lab.apply_preset("safe", verify={"mode": mode})
    fused = [r for r in results if r.name == "fuse_conv_bn"][0]
    assert fused.modified and fused.verify_passed, fused.notes
    assert fused.verified_by == mode
    rep = fused.verification.set_index("tensor")
    assert rep.loc["y", "rule"].endswith("per element") and rep.loc["y", "preset"] == "fp32"
    # The model reproduces the false alarm of an element-wise test of intermediates: the
    # near-zero sums moved by more than 1e-4 + 1e-3*|ref| while the output barely moved.
    # The whole-model check judges the sums; the region check judges the region's own
    # outputs (the fused convolutions'), and the sums lie outside it.
    sums = [t for t in rep.index if t.endswith("_sum")]
    judged = sums if mode == "full" else [t for t in rep.index if t.endswith("_bn")]
    assert judged and (rep.loc[judged, "rule"].str.startswith("max|err|")).all()
    if mode == "region":  # the sums, which the element-wise test would flag, from the model
        sums = [o.name for n in lab.original.model.graph for o in n.outputs
                if o.name.endswith("_sum")]
    assert rep.loc["y", "passed"] and rep.loc["y", "max_abs"] < 1e-5
    before, after = lab.original.model, lab.model
    from onnx_lab.runtime.capture import run

    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    a, b = run(before, feeds, outputs=sums), run(after, feeds, outputs=sums)
    elementwise = [tensor_metrics(a[t], b[t], rule=Rule("elementwise", 1e-4, 1e-3))["passed"]
                   for t in sums]
    assert not all(elementwise)


@pytest.mark.parametrize("wrong_pass, failing", [
    ("test_fuse_conv_bn_wrong_epsilon", "b0s0_bn"),
    ("test_swap_conv_channels", "b0s0_conv"),
])
def test_a_wrong_rewrite_still_fails_at_the_right_tensor(wrong_pass, failing):
    lab = onnx_lab.open(cancelling_conv_bn_stack())
    r = lab.apply(wrong_pass)
    assert r.modified and r.verify_passed is False
    assert r.first_failure == failing, r.verification[["tensor", "passed", "max_abs"]]
    assert any("rule" in n for n in r.notes)


@pytest.mark.slow
def test_light_models_verify_under_the_safe_preset():
    import os

    import onnx.backend.test

    root = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light")
    names = sorted(f for f in os.listdir(root) if f.endswith(".onnx"))
    assert len(names) >= 5
    for f in names:
        lab = onnx_lab.open(os.path.join(root, f))
        lab.fix_dims({}) if False else None
        dims = {d: 1 for d in lab.summary()["dynamic_dims"] if d != "?"}
        if dims:
            lab = onnx_lab.open(os.path.join(root, f), dims=dims)
        bad = [r for r in lab.apply_preset("safe") if r.verify_passed is False]
        assert not bad, (f, [(r.name, r.first_failure, r.notes[-1:]) for r in bad])


# ---------------------------------------------------------------------------- compare


def _constant_conv(scale: float = 1.0) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    const = helper.make_node("Constant", [], ["conv7_linear_weights"], name="Constant_47",
                             value=numpy_helper.from_array(w * scale))
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"), const,
             helper.make_node("Conv", ["r", "conv7_linear_weights"], ["c"], name="Conv@26",
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu1")]
    return _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 8, 8])], [])


def test_a_planted_weight_in_a_constant_node_is_blamed_on_its_consumer():
    c = onnx_lab.compare(_constant_conv(), _constant_conv(1.3))
    d = c.first_divergence
    assert not c.passed and d is not None
    assert d["node_id"] == "Conv@26" and d["op_type"] == "Conv" and d["cause"] == "weights"
    assert d["constant"] == "Constant_47" and d["constant_tensor"] == "conv7_linear_weights"
    assert d["constant_max_abs"] > 0.1 and "conv7_linear_weights" in d["message"]
    assert "cause: weights" in c.summary_text()


def test_a_planted_weight_in_an_initializer_is_blamed_as_weights():
    def model(scale):
        w = np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32)
        return _model([helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1] * 4),
                       helper.make_node("Relu", ["c"], ["y"], name="relu")],
                      [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 8, 8])],
                      [numpy_helper.from_array(w * scale, "W")])

    d = onnx_lab.compare(model(1.0), model(1.3)).first_divergence
    assert d["node_id"] == "conv" and d["cause"] == "weights" and d["constant"] == "W"
    assert onnx_lab.compare(model(1.0), model(1.0)).first_divergence is None


def test_fp16_candidates_are_judged_by_the_fp16_preset_both_ways():
    ref = onnx_lab.open("sample:convnet")
    ok = onnx_lab.compare(ref, onnx_lab.to_fp16(ref))
    assert ok.preset == "fp16" and ok.passed, ok.summary_text()
    assert "preset fp16" in ok.summary_text()
    assert set(ok.layers["preset"]) <= {"fp16", "exact"}
    # The planted overflow of notebook 03: big = 5 * 3000 * 8 = 120000 > 65504 (fp16 max).
    def overflow_model(w_value: float, scale: float) -> onnx.ModelProto:
        return _model([helper.make_node("Add", ["x", "one"], ["h"], name="add"),
                       helper.make_node("MatMul", ["h", "W"], ["big"], name="big_matmul"),
                       helper.make_node("Mul", ["big", "scale"], ["y"], name="scale_mul")],
                      [_vi("x", [1, 8])], [_vi("y", [1, 8])],
                      [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                       numpy_helper.from_array(np.full((8, 8), w_value, np.float32), "W"),
                       numpy_helper.from_array(np.array(scale, np.float32), "scale")])

    feeds = {"x": np.full((1, 8), 4.0, np.float32)}
    lab = onnx_lab.open(overflow_model(3000.0, 1e-3))
    bad = onnx_lab.compare(lab, onnx_lab.to_fp16(lab), feeds=feeds)
    assert bad.preset == "fp16" and not bad.passed
    assert bad.first_nonfinite["node_id"] == "big_matmul"
    assert bad.first_divergence["node_id"] == "big_matmul"
    folded = onnx_lab.open(overflow_model(3.0, 1.0))  # the fix: scale folded into W
    assert onnx_lab.compare(folded, onnx_lab.to_fp16(folded), feeds=feeds).passed


def _amplifier(gain: float) -> onnx.ModelProto:
    """t = x*gain (x ~ 100), u = t - 100: a tiny relative change of t is a large one of u."""
    inits = [numpy_helper.from_array(np.array(gain, np.float32), "g"),
             numpy_helper.from_array(np.array(100.0, np.float32), "h")]
    nodes = [helper.make_node("Mul", ["x", "g"], ["t"], name="gain"),
             helper.make_node("Sub", ["t", "h"], ["u"], name="centre"),
             helper.make_node("Relu", ["u"], ["y"], name="relu")]
    return _model(nodes, [_vi("x", [64])], [_vi("y", [64])], inits)


def test_confirm_tells_a_node_that_receives_different_inputs_from_one_that_computes_them():
    feeds = {"x": (100 + np.random.default_rng(5).standard_normal(64)).astype(np.float32)}
    c = onnx_lab.compare(_amplifier(1.0), _amplifier(1.0005), feeds=feeds, confirm=True)
    d = c.first_divergence
    # t agrees within its own scale, u does not: the first divergence is the Sub...
    assert d["node_id"] == "centre" and d["cause"] == "inputs"
    # ...but fed the reference's t it computes the same u: the difference comes in.
    assert d["confirmed"] is False and d["local_passed"] and d["local_max_abs"] == 0.0
    assert "comes in through its inputs" in d["confirm_note"]
    check = local_check(c)
    assert list(check.feeds) == ["t"] and check.passed
    # A node that computes differently is confirmed.
    w = onnx_lab.compare(_constant_conv(), _constant_conv(1.3), confirm=True).first_divergence
    assert w["confirmed"] is True and w["cause"] == "weights" and w["local_max_abs"] > 0.1


# ---------------------------------------------------------------------------- repro


def test_repro_runs_on_its_own_in_a_fresh_process(tmp_path):
    import subprocess
    import sys

    c = onnx_lab.compare(_constant_conv(), _constant_conv(1.3))
    r = onnx_lab.repro(c, tmp_path / "repro")
    assert {p.name for p in (tmp_path / "repro").iterdir()} == {
        "node.onnx", "inputs.npz", "expected.npz", "names.json", "repro.py"}
    assert len(r.script.read_text().splitlines()) <= 20
    node = onnx.load(r.model)
    # The node alone, with the Constant node that holds its weight.
    assert [n.op_type for n in node.graph.node] == ["Constant", "Conv"]
    out = subprocess.run([sys.executable, str(r.script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, check=True).stdout
    first, line = out.strip().splitlines()[:2]
    assert first == f"node {r.check.node_id!r}"  # names read from names.json, printed escaped
    assert line.startswith("'c': max_abs ")
    assert math.isclose(float(line.split()[2].rstrip(",")), r.check.max_abs, rel_tol=1e-5)
    assert r.check.max_abs > 0.1
    with pytest.raises(onnx_lab.errors.SaveError, match="not empty"):
        onnx_lab.repro(c, tmp_path / "repro")
    with pytest.raises(onnx_lab.errors.InputError, match="no divergence"):
        onnx_lab.repro(onnx_lab.compare(_constant_conv(), _constant_conv()), tmp_path / "x")


def test_repro_and_compare_commands(tmp_path):
    import contextlib
    import io

    from onnx_lab.cli import main

    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(_constant_conv(), ref)
    onnx.save(_constant_conv(1.3), cand)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["repro", str(ref), str(cand), str(tmp_path / "r")]) == 0
    assert "cause: weights" in buf.getvalue() and (tmp_path / "r" / "repro.py").exists()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["compare", str(ref), str(cand), "--confirm", "--preset", "fp32"]) == 1
    assert "confirmed:" in buf.getvalue() and "preset fp32" in buf.getvalue()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["repro", str(ref), str(ref), str(tmp_path / "s")]) == 2
    assert "no divergence" in err.getvalue()


def test_int8_preset_judges_by_sqnr_both_ways():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    q = onnx_lab.to_int8_dynamic(lab)
    ok = onnx_lab.compare(lab, q, preset="int8")
    assert ok.passed, ok.summary_text()
    assert (ok.outputs["rule"] == "sqnr >= 20 dB").all() and ok.outputs["sqnr_db"].min() >= 20
    assert not onnx_lab.compare(lab, q, preset="exact").passed
    # A candidate whose output is noise fails the int8 preset too.
    noisy = _model([helper.make_node("Add", ["x", "n"], ["y"], name="noise")],
                   [_vi("x", [64])], [_vi("y", [64])],
                   [numpy_helper.from_array(np.full(64, 0.5, np.float32), "n")])
    clean = _model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                   [_vi("x", [64])], [_vi("y", [64])], [])
    feeds = {"x": np.random.default_rng(2).standard_normal(64).astype(np.float32)}
    assert not onnx_lab.compare(clean, noisy, feeds=feeds, preset="int8").passed


@pytest.mark.slow
def test_weights_computed_by_nodes_are_blamed_on_the_first_consumer():
    # onnx's light squeezenet computes every weight with ConstantOfShape: those nodes come
    # first in topological order, but the divergence is the first Conv, for its weight.
    import os

    import onnx.backend.test

    path = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light",
                        "light_squeezenet.onnx")
    lab = onnx_lab.open(path)
    d = onnx_lab.compare(lab, onnx_lab.to_fp16(lab), preset="exact").first_divergence
    assert d["node_id"] == "n0" and d["op_type"] == "Conv" and d["cause"] == "weights"
    assert d["constant_tensor"] == "conv1_w_0" and d["constant"].startswith("ConstantOfShape")


# ---------------------------------------------------------------------------- default presets
def _two_heads(w_scale: float = 1.0, qdq: bool = False, half_init: bool = False
               ) -> onnx.ModelProto:
    """y1 = x @ W (float32 only); y2 = x @ V, through a QuantizeLinear/DequantizeLinear pair
    when ``qdq``; an unused float16 weight when ``half_init``."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 8)) * w_scale).astype(np.float32)
    v = rng.standard_normal((16, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y1"], name="mm1")]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V")]
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
                  helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dq"),
                  helper.make_node("MatMul", ["xd", "V"], ["y2"], name="mm2")]
        inits += [numpy_helper.from_array(np.array(0.02, np.float32), "s"),
                  numpy_helper.from_array(np.array(0, np.int8), "zp")]
    else:
        nodes.append(helper.make_node("MatMul", ["x", "V"], ["y2"], name="mm2"))
    if half_init:
        inits.append(numpy_helper.from_array(np.ones(4, np.float16), "unused_half"))
    return _model(nodes, [_vi("x", [4, 16])], [_vi("y1", [4, 8]), _vi("y2", [4, 8])], inits)


def test_a_default_preset_judges_only_what_is_computed_through_it():
    # a QDQ pair on y2 put y1, pure float32, on the int8 rule: 26 dB passed a 5 % weight
    # error; an unused float16 weight put everything on the fp16 rule
    ok = onnx_lab.compare(_two_heads(), _two_heads(qdq=True), progress=False)
    assert ok.passed, ok.summary_text()
    presets = ok.outputs.set_index("tensor")["preset"]
    assert presets["y2"] == "int8" and presets["y1"] == "fp32"
    assert "[judged by fp32]" in ok.summary_text()
    bad = onnx_lab.compare(_two_heads(), _two_heads(1.05, qdq=True), progress=False)
    assert not bad.passed and not bad.outputs.set_index("tensor").loc["y1", "passed"]
    unused = onnx_lab.compare(_two_heads(), _two_heads(1.008, half_init=True), progress=False)
    assert not unused.passed and unused.preset == "by dtype", unused.summary_text()
    # the preset a user names judges every tensor
    assert onnx_lab.compare(_two_heads(), _two_heads(1.05, qdq=True), preset="int8",
                            progress=False).outputs["preset"].eq("int8").all()


def test_two_int4_builds_with_the_same_weights_are_judged_as_float():
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    def int4(bias_scale: float, block_size: int = 32) -> onnx.ModelProto:
        rng = np.random.default_rng(0)
        m = _model([helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                    helper.make_node("Add", ["h", "b"], ["y"], name="bias")],
                   [_vi("x", [8, 64])], [_vi("y", [8, 64])],
                   [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2)
                                            .astype(np.float32), "W"),
                    numpy_helper.from_array((rng.standard_normal(64) * bias_scale)
                                            .astype(np.float32), "b")])
        q = MatMulNBitsQuantizer(m, block_size=block_size, is_symmetric=True)
        q.process()
        return q.model.model

    same = onnx_lab.compare(int4(1.0), int4(1.0), progress=False)
    assert same.passed and same.preset == "by dtype"
    # a float bias 60 % too large passed the int4 rule (8 dB)
    assert not onnx_lab.compare(int4(1.0), int4(1.6), progress=False).passed
    # so did scales 1.5x too large (the same integers: 6.02 dB against the int4 rule's 6)
    scaled = int4(1.0)
    nbits = next(n for n in scaled.graph.node if n.op_type == "MatMulNBits")
    scales = next(t for t in scaled.graph.initializer if t.name == nbits.input[2])
    scales.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scales) * 1.5, scales.name))
    bad = onnx_lab.compare(int4(1.0), scaled, progress=False)
    assert not bad.passed and bad.preset == "by dtype"
    # another quantization (other integers: block size 16) keeps the int4 rule
    assert onnx_lab.compare(int4(1.0), int4(1.0, 16), progress=False).preset == "int4"
    # int4 against its float32 source keeps the int4 rule
    rng = np.random.default_rng(0)
    src = _model([helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                  helper.make_node("Add", ["h", "b"], ["y"], name="bias")],
                 [_vi("x", [8, 64])], [_vi("y", [8, 64])],
                 [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2)
                                          .astype(np.float32), "W"),
                  numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")])
    assert onnx_lab.compare(src, int4(1.0), progress=False).preset == "int4"


def test_a_concat_of_a_graph_input_rounded_to_fp16_is_blamed_on_that_rounding():
    # to_fp16 keeps a KV cache's past float32 at the interface and rounds it inside: the
    # Concat of past and new was blamed on the new input, "0.000812 by no more than 0.000482"
    m = _model([helper.make_node("Floor", ["x"], ["fl"], name="floor"),
                helper.make_node("Add", ["fl", "b"], ["new"], name="add"),  # exact in fp16
                helper.make_node("Concat", ["past", "new"], ["present"], name="cat", axis=0)],
               [_vi("past", [4, 8]), _vi("x", [2, 8])], [_vi("present", [6, 8])],
               [numpy_helper.from_array(np.full(8, 0.25, np.float32), "b")])
    ref = onnx_lab.open(m)
    c = onnx_lab.compare(ref, onnx_lab.to_fp16(ref), atol=1e-6, rtol=0.0, progress=False)
    div = c.first_divergence
    assert div["node_id"] == "cat" and div["cause"] == "inputs", div
    assert "reads graph input 'past' through a Cast to float16" in div["message"]
    assert "no more than" not in div["message"]


def test_a_dynamically_quantized_embedding_output_keeps_the_int8_rule():
    # the quantizer writes Gather(uint8 table) -> DequantizeLinear: outside the scope of the
    # activation quantizers, the embedding output was judged by float32's rule (42 dB failed)
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Gather", ["W", "ids"], ["emb"], name="gather"),
         helper.make_node("MatMul", ["emb", "W2"], ["proj"], name="mm")], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [8])],
        [_vi("emb", [8, 32]), _vi("proj", [8, 32])],
        [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "W"),
         numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.2).astype(np.float32),
                                 "W2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    ref = onnx_lab.open(m)
    c = onnx_lab.compare(ref, onnx_lab.to_int8_dynamic(ref), progress=False)
    assert c.passed, c.summary_text()
    assert set(c.outputs["preset"]) == {"int8"}


def test_two_int4_builds_of_other_accuracy_levels_keep_the_int4_rule():
    # the same packed weights, accuracy_level 0 against 4 (int8 activations): judged as
    # float, their 45 dB apart failed
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(0)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
               [_vi("x", [4, 256])], [_vi("y", [4, 128])],
               [numpy_helper.from_array((rng.standard_normal((256, 128)) * 0.1)
                                        .astype(np.float32), "W")])

    def build(level: int) -> onnx.ModelProto:
        src = onnx.ModelProto()
        src.CopyFrom(m)  # (the quantizer rewrites its model in place)
        q = MatMulNBitsQuantizer(src, block_size=32, is_symmetric=True, accuracy_level=level)
        q.process()
        return q.model.model

    c = onnx_lab.compare(build(0), build(4), progress=False)
    assert c.preset == "int4" and c.passed, c.summary_text()
    assert onnx_lab.compare(build(0), build(0), progress=False).preset == "by dtype"


def test_a_float16_model_without_value_info_is_judged_by_the_fp16_rule():
    # onnx-lab precision's fp16 squeezenet (weights ConstantOfShape -> Cast, no value_info):
    # its float16 tensors declare no type, and float32's rule called 53 layers out of
    # tolerance
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)
    ref = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                 [_vi("x", [4, 16])], [_vi("y", [4, 16])], [numpy_helper.from_array(w, "W")])
    cand = _model([helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
                   helper.make_node("Cast", ["W"], ["W16"], to=TensorProto.FLOAT16),
                   helper.make_node("MatMul", ["x16", "W16"], ["y16"], name="mm"),
                   helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT)],
                  [_vi("x", [4, 16])], [_vi("y", [4, 16])], [numpy_helper.from_array(w, "W")])
    c = onnx_lab.compare(ref, cand, progress=False)
    assert c.preset == "fp16" and c.passed, c.summary_text()
