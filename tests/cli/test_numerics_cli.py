"""`onnx-lab compare` as a CI gate (exit 0/1/2, JSON, CSV) and `onnx-lab diff`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import pytest
from numerics_helpers import convnet, scaled_copy

from onnx_lab.cli import main


def _files(tmp_path):
    ref = tmp_path / "ref.onnx"
    cand = tmp_path / "cand.onnx"
    onnx.save(convnet(), ref)
    onnx.save(scaled_copy(convnet(), "block1.conv.weight", 1.5), cand)
    return str(ref), str(cand)


def test_planted_drift_exits_1_with_the_divergence(tmp_path, capsys):
    ref, cand = _files(tmp_path)
    code = main(["compare", ref, cand, "--layerwise", "--json", "--csv",
                 str(tmp_path / "layers.csv")])
    assert code == 1
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"passed", "outputs", "layers", "first_divergence"}
    assert out["passed"] is False
    assert out["first_divergence"] == {**out["first_divergence"], "node_id": "/block1/conv/Conv",
                                       "op_type": "Conv", "reaches_outputs": True}
    assert out["first_divergence"]["tensor"] == "/block1/conv/Conv_output_0"
    assert len(out["layers"]) == 21 and out["outputs"][0]["tensor"] == "logits"
    csv = pd.read_csv(tmp_path / "layers.csv")
    assert len(csv) == 21 and "max_abs" in csv.columns


def test_identical_exits_0_and_errors_exit_2(tmp_path, capsys):
    ref, _ = _files(tmp_path)
    assert main(["compare", ref, ref]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["compare", ref, "sample:transformer_block"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-lab: error:") and "inputs differ in name" in err
    assert main(["compare", ref, ref, "--feeds", str(tmp_path / "none.npz")]) == 2


def test_feeds_dims_shape_and_tolerances(tmp_path, capsys):
    ref, cand = _files(tmp_path)
    np.savez(tmp_path / "x.npz", input=np.zeros((1, 3, 32, 32), np.float32))
    # A huge tolerance lets the drift pass the gate.
    assert main(["compare", ref, cand, "--feeds", str(tmp_path / "x.npz"), "--atol", "100",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layers"] == [] and out["first_divergence"] is None
    assert main(["compare", "sample:transformer_block", "sample:transformer_block",
                 "--dims", "batch=1", "--shape", "x:1x5x32", "--layerwise"]) == 0
    assert main(["compare", "sample:transformer_block", "sample:transformer_block"]) == 2
    assert "--dims batch=1 --dims seq=1" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_exit_code(tmp_path):
    ref, cand = _files(tmp_path)
    r = subprocess.run([sys.executable, "-m", "onnx_lab.cli", "compare", ref, cand],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "FAILED" in r.stdout and "first divergence:" not in r.stdout
    assert "first divergence not searched" in r.stdout  # and how to search it
    r = subprocess.run([sys.executable, "-m", "onnx_lab.cli", "diff", ref, cand],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "1 changed" in r.stdout and "values changed" in r.stdout


def test_a_failing_output_of_another_shape_is_counted_in_the_verdict_line(tmp_path, capsys):
    # the line read "FAILED ... 1 outputs, 0 layers compared, 0 out of tolerance"
    from onnx import TensorProto, helper, numpy_helper

    def model(flat: bool) -> str:
        nodes = [helper.make_node("Relu", ["x"], ["r" if flat else "y"])]
        inits = []
        if flat:
            nodes.append(helper.make_node("Reshape", ["r", "s"], ["y"]))
            inits.append(numpy_helper.from_array(np.array([8], np.int64), "s"))
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, [2, 4])], [helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, [8] if flat else [2, 4])], inits)
        p = tmp_path / f"{flat}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
        return str(p)

    assert main(["compare", model(False), model(True)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("FAILED") and "1 outputs (1 failing)" in first
