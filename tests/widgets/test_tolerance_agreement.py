"""DriftDebugger, PrecisionDoctor and the CLI judge by one tolerance table, and their boxes show
the numbers in force: on the same fp16 model they give the same verdict, both ways."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab import to_fp16
from onnx_lab.cli import main as cli_main
from onnx_lab.numerics.metrics import NEXT_TOKEN, PRESETS
from onnx_lab.widgets import DriftDebugger, PrecisionDoctor

BERT_DIMS = {"batch": 2, "seq": 8}


def _offset_model() -> onnx.ModelProto:
    """y = ((x · 1e5) · 1e-5) @ W: in float16 x · 1e5 overflows to infinity for |x| > 0.66
    — a real drift no fp16 tolerance accepts."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W")
    c = numpy_helper.from_array(np.array(1e5, np.float32), "c")
    c2 = numpy_helper.from_array(np.array(1e-5, np.float32), "c2")
    nodes = [helper.make_node("Mul", ["x", "c"], ["a"], name="scale_up"),
             helper.make_node("Mul", ["a", "c2"], ["s"], name="scale_down"),
             helper.make_node("MatMul", ["s", "W"], ["y"], name="proj")]
    g = helper.make_graph(nodes, "offset", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8])], [w, c, c2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _verdicts(source, dims=None):
    ref = onnx_lab.open(source, dims=dims)
    d = DriftDebugger(ref, to_fp16(ref))
    p = PrecisionDoctor(onnx_lab.open(source, dims=dims), background=False)
    return d, p


@pytest.mark.slow  # an fp16 conversion and a precision search in two widgets
def test_fp16_bert_block_passes_in_both_widgets_with_the_same_numbers(no_error):
    d, p = _verdicts("sample:bert_block", BERT_DIMS)
    fp16 = PRESETS["fp16"].outputs
    # The boxes hold the numbers in force before any run.
    assert (d.atol.value, d.rtol.value) == (fp16.atol, fp16.rtol)
    assert (p.atol.value, p.rtol.value) == (fp16.atol, fp16.rtol)
    assert "preset fp16" in d.rule_line.value and not d.custom_tolerances.value
    d.run()
    p.run()
    no_error(d)
    no_error(p)
    assert d.result.passed and d.result.preset == "fp16"
    assert (d.result.atol, d.result.rtol) == (d.atol.value, d.rtol.value)
    plan = p.result
    assert plan.tolerance.atol == p.atol.value and plan.tolerance.rtol == p.rtol.value
    assert plan.passed and bool(plan.trials.iloc[0]["passed"]) and plan.kept == []
    # The widget's former stricter numbers (1e-3/1e-2) fail this very model: the
    # disagreement the table removes.
    old = onnx_lab.open("sample:bert_block", dims=BERT_DIMS).find_precision(
        "fp16", atol=1e-3, rtol=1e-2, progress=False)
    assert not bool(old.trials.iloc[0]["passed"])


def test_a_real_fp16_drift_fails_in_both_widgets(no_error):
    d, p = _verdicts(_offset_model())
    d.run()
    p.run()
    no_error(d)
    no_error(p)
    assert not d.result.passed and d.result.first_divergence is not None
    plan = p.result
    assert not bool(plan.trials.iloc[0]["passed"])  # everything converted fails too
    assert plan.passed and {"scale_up", "scale_down"} & set(plan.kept)


def test_the_cli_reads_the_same_table(tmp_path, capsys):
    ref = tmp_path / "m.onnx"
    cand = tmp_path / "m16.onnx"
    lab = onnx_lab.open("sample:bert_block", dims=BERT_DIMS)
    lab.save(str(ref))
    to_fp16(lab).save(str(cand))
    rc = cli_main(["compare", str(ref), str(cand), "--dims", "batch=2,seq=8",
                   "--json"])
    out = json.loads(capsys.readouterr().out)
    d = DriftDebugger(onnx_lab.open(str(ref), dims=BERT_DIMS),
                      onnx_lab.open(str(cand), dims=BERT_DIMS))
    assert (out["atol"], out["rtol"]) == (d.atol.value, d.rtol.value)
    assert rc == 0 and out["passed"] is True and out["preset"] == "fp16"


def test_drift_boxes_follow_the_preset_and_the_users_numbers():
    ref = onnx_lab.open("sample:convnet")
    d = DriftDebugger(ref, ref)
    fp32 = PRESETS["fp32"].outputs
    assert (d.atol.value, d.rtol.value) == (fp32.atol, fp32.rtol)
    assert "by dtype" in d.rule_line.value
    d.preset.value = "bf16"
    assert (d.atol.value, d.rtol.value) == (PRESETS["bf16"].outputs.atol,
                                            PRESETS["bf16"].outputs.rtol)
    assert "atol=" not in d._code() and "preset='bf16'" in d._code()
    d.preset.value = "int8"  # judged by SQNR: the boxes do not apply
    assert d.atol.disabled and "sqnr &gt;= 20 dB" in d.rule_line.value
    d.preset.value = "fp32"
    d.atol.value = 0.5  # typing makes them the user's, passed to the run
    assert d.custom_tolerances.value and "atol=0.5" in d._code()
    assert "with your atol/rtol" in d.rule_line.value and "0.5 + 0.001" in d.rule_line.value
    d.custom_tolerances.value = False  # back to the preset's numbers
    assert (d.atol.value, d.rtol.value) == (fp32.atol, fp32.rtol) and "atol=" not in d._code()


def test_doctor_boxes_follow_the_target():
    p = PrecisionDoctor(onnx_lab.open("sample:convnet"), background=False)
    assert p.metric.value == "elementwise" and p.atol.value == PRESETS["fp16"].outputs.atol
    p.target.value = "int8"
    assert p.metric.value == "sqnr" and p.threshold.value == PRESETS["int8"].outputs.min_sqnr_db
    assert "metric='sqnr', tolerance=20.0" in p.code_for()
    p.target.value = "bf16"
    assert p.metric.value == "elementwise"
    assert (p.atol.value, p.rtol.value) == (PRESETS["bf16"].outputs.atol,
                                            PRESETS["bf16"].outputs.rtol)
    p.target.value = "int4"
    assert (p.min_top1.value, p.max_kl.value) == (NEXT_TOKEN["int4"].min_top1,
                                                  NEXT_TOKEN["int4"].max_kl)


def test_drift_on_paths_shows_the_preset_the_run_used(tmp_path, no_error):
    lab = onnx_lab.open("sample:bert_block", dims=BERT_DIMS)
    ref, cand = tmp_path / "m.onnx", tmp_path / "m16.onnx"
    lab.save(str(ref))
    to_fp16(lab).save(str(cand))
    d = DriftDebugger(str(ref), str(cand), dims=BERT_DIMS)
    assert "preset fp32" in d.rule_line.value  # nothing loaded yet: the float32 rule
    d.run()
    no_error(d)
    assert d.result.preset == "fp16" and "preset fp16" in d.rule_line.value
    assert (d.atol.value, d.rtol.value) == (d.result.atol, d.result.rtol) == (0.01, 0.01)
