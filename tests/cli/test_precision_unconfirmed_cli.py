"""A precision plan whose model does not hold as onnxruntime deploys it (``confirmed`` False:
it does not load at the default options, or misses with the optimizations) is not "met":
``onnx-lab precision`` exited 0 and ``onnx-lab audit --fp16`` wrote ``fp16_passed`` True for a
tiny ViT whose fp16 model made onnxruntime 1.32 abort (signal 11) at its default options, while
the note said "save refuses it"."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.numerics.precision import search


@pytest.fixture
def model(tmp_path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(
        np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"]),
                           helper.make_node("Relu", ["t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    p = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return p


@pytest.fixture
def crashes_when_deployed(monkeypatch):
    """Every fp16 plan's model 'does not load' at onnxruntime's default options, and keeping
    no op type helps (as the ViT's did)."""
    monkeypatch.setattr(search, "default_load_regression",
                        lambda model, original: "onnxruntime aborted the process (signal 11)")
    monkeypatch.setattr(search, "load_blocker", lambda convert, original, rest: None)


def test_precision_exits_1_for_a_plan_that_does_not_load_as_deployed(
        capsys, model, crashes_when_deployed):
    code = main(["precision", str(model), "--target", "fp16"])
    out = capsys.readouterr().out
    assert "save refuses it" in out, out
    assert code == 1, out


def test_precision_still_exits_0_for_a_plan_that_holds(capsys, model):
    assert main(["precision", str(model), "--target", "fp16"]) == 0, capsys.readouterr().out


def test_audit_row_does_not_pass_an_unconfirmed_fp16_plan(tmp_path, model,
                                                            crashes_when_deployed):
    from onnx_lab.zoo._worker import _Audit

    a = _Audit({"path": str(model), "result": str(tmp_path / "r.json")})
    a.lab = onnx_lab.open(model)
    a.fp16()
    assert a.row["fp16_passed"] is False and "save refuses it" in a.row["fp16_note"], a.row
