"""Inputs whose dims have no name (skl2onnx's and onnxmltools' [None, 6]): the advice names
what fixes them. check said "static-shape runtimes need onnx-lab fix-dims({...})" and fix-dims
said "give whole shapes with --shape INPUT:AxBxC", which fix-dims does not take: an unnamed dim
is fixed by setting the input's whole shape (onnx-lab edit --input-shape)."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from onnx_lab.cli import main


@pytest.fixture
def unnamed(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["X"], ["y"])], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 6])])
    p = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return p


def test_check_names_the_shape_flag_and_the_edit_that_fixes_an_unnamed_dim(capsys, unnamed):
    assert main(["check", str(unnamed), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["findings"] if isinstance(rows, dict) else rows
    fix = next(r["fix"] for r in rows if r["code"] == "dynamic_dim")
    assert main(["check", str(unnamed)]) == 0
    text = capsys.readouterr().out
    assert "({...})" not in text and "fix-dims" not in text, text
    assert "--shape X:AxBxC" in text and "onnx-lab edit MODEL OUT --input-shape X:AxBxC" in text, text
    assert "set_input_shape('X'" in fix, fix  # the library's words in the JSON


def test_fix_dims_on_unnamed_dims_points_to_edit_input_shape(capsys, unnamed, tmp_path):
    code = main(["fix-dims", str(unnamed), str(tmp_path / "o.onnx"), "N=3"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--input-shape" in err and "--shape INPUT" not in err, err
    assert not (tmp_path / "o.onnx").exists()
    # the edit it names does fix the dim
    assert main(["edit", str(unnamed), str(tmp_path / "e.onnx"), "--input-shape", "X:3x6"]) == 0
    dims = onnx.load(str(tmp_path / "e.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, 6]
