"""CLI errors give their fix in the words of the command line, not a Lab's (found by running
the CLI on exporter-written models: a verification that cannot run, a save whose model would
not load, a batch sweep over fixed inputs and an unknown --tool named lab.check(),
verify={'feeds': ...}, verify=False, lab.history / lab.checkout(N), check=False,
lab.set_input_shape(...) and onnx_lab.transforms.available())."""

from __future__ import annotations

import re

import onnx
import pytest
from onnx import TensorProto, helper

from onnx_lab.cli import main
from onnx_lab.cli._advice import command_line_text
from onnx_lab.errors import SaveError

PYTHON_ONLY = ("verify=", "check=False", "external_data=False", "onnx_lab.transforms",
               "set_input_shape")


def _line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-lab: error: "), lines
    return lines[0]


def _no_python(line: str) -> None:
    assert not re.search(r"\blab\.", line), line  # lab.check(), lab.history ("onnx_lab." is fine)
    assert not any(p in line for p in PYTHON_ONLY), line


@pytest.fixture
def unrunnable(tmp_path):
    """Identity, then an op of a domain onnxruntime has no kernel for: opens, does not run."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"], name="id"),
         helper.make_node("Foo", ["t"], ["y"], name="foo", domain="my.domain")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("my.domain", 1)])
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    return p


def test_a_verification_that_cannot_run_names_feeds_and_no_verify(capsys, unrunnable, tmp_path):
    code = main(["optimize", str(unrunnable), str(tmp_path / "o.onnx"),
                 "--passes", "eliminate_identity"])
    line = _line(capsys)
    assert code == 2 and "--feeds FILE.npz" in line and "--no-verify" in line, line
    assert "onnx-lab check MODEL" in line, line
    _no_python(line)


def test_a_batch_sweep_over_fixed_inputs_names_the_edit_flag(capsys, tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    p = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    code = main(["profile", str(p), "--batch-sweep", "1,2", "--runs", "2"])
    line = _line(capsys)
    assert code == 2 and "--input-shape" in line, line
    _no_python(line)


def test_an_unknown_tool_names_the_passes_command(capsys, tmp_path):
    code = main(["optimize", "sample:convnet", str(tmp_path / "o.onnx"), "--tool", "tvm"])
    line = _line(capsys)
    assert code == 2 and "onnx-lab passes" in line, line
    _no_python(line)


def test_a_save_that_would_not_load_says_what_the_command_line_can_do():
    # the SaveError of core/save.py (its fix) with lab.py's sentence about the first step
    # that does not load (in its problem), as `onnx-lab precision --out` printed it
    e = SaveError("'out.onnx' would not load in onnxruntime from its folder: it crashed. "
                  "Step 1 (precision:fp16) is the first version that does not load so: "
                  "lab.checkout(0) goes back before it (its verification ran with the "
                  "optimizations off; the steps after it can be applied again without it)",
                  fix="Nothing was replaced. lab.history shows the steps (a failed one, or the "
                  "one the message names: lab.undo() or lab.checkout(N) goes back before it); "
                  "save with external_data=False to keep every tensor inside the file, "
                  "check=False to write it as it is, or report the model to onnx_lab.")
    text = command_line_text(e)
    _no_python(text)
    assert "Step 1 (precision:fp16) is the first version that does not load so" in text, text
    assert text.endswith("Nothing was replaced. Leave out the step the message names "
                         "(optimize --passes/--skip, precision --keep), or report the model "
                         "to onnx_lab."), text
