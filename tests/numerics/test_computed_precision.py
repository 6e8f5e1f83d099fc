"""Rewrites of models that compute in float16 behind float32 inputs and outputs (what
``keep_io_types=True`` conversions write): the float32 outputs carry float16 rounding, so a
correct fusion is judged by the float16 rule there (no false alarm), and a wrong one still
fails."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.numerics.align import computed_precision
from onnx_lab.numerics.verify import verify


def _keep_io_fp16(layers: int = 3, seed: int = 0) -> onnx.ModelProto:
    """x (float32) -> Cast -> [Conv -> BatchNormalization -> Relu] x layers in float16 ->
    Cast -> y (float32); a float32 side output ``m`` computed from ``x`` alone."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TP.FLOAT16, name="in_cast"),
             helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0, name="mean")]
    inits, cur, c = [], "h", 3
    for i in range(layers):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((16, c, 3, 3)) * 0.3).astype(np.float16), f"w{i}"))
        for n, v in (("s", 1 + 0.2 * rng.standard_normal(16)), ("b", 0.2 * rng.standard_normal(16)),
                     ("mu", 0.2 * rng.standard_normal(16)), ("var", 1 + 0.5 * rng.random(16))):
            inits.append(numpy_helper.from_array(v.astype(np.float16), f"{n}{i}"))
        nodes += [
            helper.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                             name=f"/l{i}/conv/Conv"),
            helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"mu{i}",
                                                    f"var{i}"], [f"n{i}"], name=f"/l{i}/bn/BN"),
            helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"/l{i}/relu/Relu")]
        cur, c = f"r{i}", 16
    nodes.append(helper.make_node("Cast", [cur], ["y"], to=TP.FLOAT, name="out_cast"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 16, 16, 16]),
                           helper.make_tensor_value_info("m", TP.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_computed_precision_follows_the_float16_computation():
    prec = computed_precision(onnx_lab.open(_keep_io_fp16()).model)
    assert prec["h"] == prec["c0"] == prec["r2"] == "float16"
    assert prec["y"] == "float16"  # float32, cast from a float16 computation
    assert "m" not in prec and "x" not in prec  # float32 all the way


@pytest.mark.parametrize("verify_mode", [True, "full"])
def test_fusing_bn_behind_float32_outputs_is_not_a_false_alarm(verify_mode):
    lab = onnx_lab.open(_keep_io_fp16())
    results = lab.apply_preset("safe", verify=verify_mode)
    fused = [r for r in results if r.name == "fuse_conv_bn"]
    assert fused and fused[0].modified
    assert all(r.verify_passed is not False for r in results), [r.notes for r in results]
    assert "BatchNormalization" not in set(lab.nodes.op_type)


def test_a_wrong_rewrite_still_fails_by_the_float16_rule():
    from numerics_helpers import scaled_copy

    before = onnx_lab.open(_keep_io_fp16()).model
    report = verify(before, onnx_lab.open(scaled_copy(_keep_io_fp16(), "s1", 1.1)).model)
    y = report.set_index("tensor").loc["y"]
    assert not report.attrs["passed"] and not y.passed
    assert y.preset == "fp16" and y.rule.endswith("(float32, computed through float16)")
    # the float32 side output, computed without float16, keeps the float32 rule
    assert report.set_index("tensor").loc["m"].preset == "fp32"


def test_final_check_against_a_plain_run_when_exposing_tensors_changes_the_original():
    # light ZFNet-512 in float16 (constant weights): with every intermediate exposed,
    # onnxruntime's CPU keeps float16 Casts that overflow to inf (NaN outputs); run plainly
    # the outputs are finite. The preset's result runs plainly: judged against the captured
    # outputs the correct preset failed.
    from pathlib import Path

    from onnx_lab import to_fp16

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    lab = to_fp16(onnx_lab.open(str(light / "light_zfnet512.onnx")), keep_io_types=True)
    results = lab.apply_preset("safe")
    assert all(r.verify_passed is not False for r in results), [r.notes for r in results]
    final = [r for r in results if r.verify_passed is not None][-1]
    rows = final._verification.rows
    out = [r for r in rows if r["match"] == "preset_output"]
    assert out and all(r["passed"] for r in out)
    assert "run alone" in out[0]["note"] and np.isfinite(final.max_abs_err)
