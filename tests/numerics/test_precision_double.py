"""A float64 model (skl2onnx with DoubleTensorType: an MLP's MatMul/Add/Relu in double): the
int8 search reported "0 of 6 nodes excluded from int8; the plan meets sqnr >= 20 dB" and
``--out`` wrote the float64 model unchanged (onnxruntime's quantizer quantizes float32/float16
tensors only): a passing int8 plan with no QuantizeLinear. The fp16 search said the model had
"no float computation". Both now say the model computes in float64."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.numerics.precision import NothingToConvert


def _double_mlp():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 16)), "w1"),
             numpy_helper.from_array(rng.standard_normal(16), "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 1)), "w2")]
    g = helper.make_graph([helper.make_node("MatMul", ["X", "w1"], ["m"]),
                           helper.make_node("Add", ["m", "b1"], ["a"]),
                           helper.make_node("Relu", ["a"], ["r"]),
                           helper.make_node("MatMul", ["r", "w2"], ["y"])], "g",
                          [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4, 1])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["int8", "fp16"])
def test_a_float64_model_has_nothing_to_convert(target):
    lab = onnx_lab.open(_double_mlp())
    with pytest.raises(NothingToConvert, match="float64"):
        lab.find_precision(target)


def test_the_cli_writes_no_int8_plan_of_a_float64_model(tmp_path, capsys):
    import onnx

    src = tmp_path / "m.onnx"
    onnx.save(_double_mlp(), str(src))
    code = main(["precision", str(src), "--target", "int8", "--out", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and "float64" in err, err
    assert not (tmp_path / "q.onnx").exists()
