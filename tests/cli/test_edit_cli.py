"""CLI: onnx-lab edit — each flag a step in command-line order, the saved model loads in a
fresh onnxruntime session, bad input is one line and exit code 2 with nothing written."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnx_lab.cli import main
from onnx_lab.samples import build

BN = "/stem/bn/BatchNormalization"


@pytest.fixture
def convnet(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(path))
    return path


def test_edit_steps_in_order_and_the_result_runs(convnet, tmp_path, capsys):
    w = onnx.numpy_helper.to_array(next(i for i in build("convnet").graph.initializer
                                        if i.name == "block1.conv.weight"))
    np.save(tmp_path / "w.npy", w * 0.5)
    out, script = tmp_path / "out.onnx", tmp_path / "replay.py"
    code = main(["edit", str(convnet), str(out), "--set-attr", f"{BN}:epsilon=1e-3",
                 "--remove", "/head/dropout/Dropout", "--rename", "input=image",
                 "--rename", "/head/fc/Gemm=fc", "--add-output", "/stem/relu/Relu_output_0",
                 "--replace-init", f"block1.conv.weight={tmp_path / 'w.npy'}",
                 "--set-attr", "/block1/pool/MaxPool:auto_pad=NOTSET",
                 "--script", str(script), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    names = [s["name"] for s in doc["steps"]]
    assert names == ["set_attribute", "remove_node", "rename_tensor", "rename_node",
                     "add_output", "replace_initializer", "set_attribute"]
    first = doc["steps"][0]
    assert first["outputs_changed"] is True and first["touched"] == [BN]
    assert first["call"] == f"lab.set_attribute('{BN}', 'epsilon', 0.001)"
    assert doc["steps"][2]["verify_passed"] is True  # a rename: bit-identical, checked
    assert doc["steps"][1]["removed"] == ["/head/dropout/Dropout"]
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["image"]
    assert [o.name for o in sess.get_outputs()] == ["logits", "/stem/relu/Relu_output_0"]
    res = sess.run(None, {"image": np.zeros((1, 3, 32, 32), np.float32)})
    assert res[1].ndim == 4
    text = script.read_text()
    assert text.count("# step") == 7 and f"onnx_lab.open({str(convnet)!r})" in text


def test_edit_text_output_says_what_changed(convnet, tmp_path, capsys):
    assert main(["edit", str(convnet), str(tmp_path / "o.onnx"), "--set-attr",
                 f"{BN}:epsilon=0.1", "--add-output", "/stem/relu/Relu_output_0"]) == 0
    out = capsys.readouterr().out
    assert "outputs changed (expected for this edit): max_abs" in out
    assert "--add-output /stem/relu/Relu_output_0: 21 -> 21 nodes, outputs unchanged " \
           "(verified)" in out


@pytest.mark.parametrize("flags, message", [
    (["--set-attr", f"{BN}:epsilon=abc"], "FLOAT"),
    (["--set-attr", f"{BN}epsilon=1"], "NODE:NAME=VALUE"),
    (["--rename", "input=logits"], "exists"),
    (["--remove", "/stem/conv/Conv"], "shape"),
    (["--replace-init", "block1.conv.weight=WRONG"], "shape"),
    (["--input-shape", "input:1x3x64x64"], "fixed"),
    # '²' passed str.isdigit and int() raised: an internal error with a traceback
    (["--input-shape", "input:²x3x32x32"], "number written as text"),
    (["--input-shape", "input:1.5x3x32x32"], "number written as text"),
    ([], "at least one edit"),
])
def test_bad_edits_are_one_line_and_exit_2(convnet, tmp_path, capsys, flags, message):
    np.save(tmp_path / "wrong.npy", np.zeros((2, 2), np.float32))
    flags = [f.replace("WRONG", str(tmp_path / "wrong.npy")) for f in flags]
    out = tmp_path / "out.onnx"
    assert main(["edit", str(convnet), str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onnx-lab: error:") and message in err and "\n" not in err
    assert not out.exists()


def test_edit_never_writes_over_its_input(convnet, capsys):
    before = convnet.read_bytes()
    assert main(["edit", str(convnet), str(convnet), "--add-output",
                 "/stem/relu/Relu_output_0"]) == 2
    assert "overwrite" in capsys.readouterr().err
    assert convnet.read_bytes() == before


@pytest.mark.parametrize("which", ["input", "output"])
def test_edit_script_over_the_input_or_the_output_is_refused(convnet, tmp_path, capsys, which):
    out = tmp_path / "o.onnx"
    before = convnet.read_bytes()
    target = convnet if which == "input" else out
    code = main(["edit", str(convnet), str(out), "--set-attr", f"{BN}:epsilon=0.1",
                 "--script", str(target)])
    assert code != 0
    assert "--script" in capsys.readouterr().err
    assert convnet.read_bytes() == before and not out.exists()


def test_add_node_flags_schema_driven_with_json(convnet, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    code = main(["edit", str(convnet), str(out),
                 "--add-node", "/head/flatten/Flatten_output_0:Mul:inputs=[0.5]",
                 "--add-node", "logits:Softmax:axis=-1",
                 "--add-node", "logits:Cast:to=FLOAT16", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in doc["steps"]] == ["add_node"] * 3
    assert doc["steps"][2]["call"] == "lab.add_node('logits', 'Cast', attributes={'to': 'FLOAT16'})"
    assert doc["nodes_after"] == doc["nodes_before"] + 3
    assert all(s["created"] for s in doc["steps"])
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert sess.get_outputs()[0].type == "tensor(float16)"
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (y,) = sess.run(None, {"input": x})
    assert y.dtype == np.float16 and abs(float(y.astype(np.float32).sum()) - 1.0) < 1e-2
    types = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert types[-2:] == ["Softmax", "Cast"] and "Mul" in types


@pytest.mark.parametrize("spec, words", [
    ("logits", "TENSOR:OP"),                         # no op
    ("logits:Cast:to=FLOAT17", "data type"),         # not a dtype name
    ("logits:Softmax:axis=x,", "INT"),               # wrong attribute type
    ("logits:Softmax:axes", "'logits:Softmax'"),     # no '=': a tensor 'logits:Softmax'
    ("logits:Softmax:banana=1", "banana"),           # not in the schema
    ("nope:Relu", "nope"),                           # unknown tensor
])
def test_add_node_bad_specs_are_one_line_and_nothing_is_written(convnet, tmp_path, capsys,
                                                                 spec, words):
    out = tmp_path / "out.onnx"
    assert main(["edit", str(convnet), str(out), "--add-node", spec]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not out.exists()


def test_names_holding_equals_and_colons_are_addressed(tmp_path, capsys):
    # a node 'mul:a=b' and an initializer 'k=v' (exporters write such names): the flags split
    # at the sign whose left side is a known name, not at the first '='
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["in:0"], ["r"], name="r"),
         helper.make_node("LeakyRelu", ["r"], ["l=1"], name="leak:a=b", alpha=0.1),
         helper.make_node("Mul", ["l=1", "k=v"], ["out:0"], name="mul")], "g",
        [helper.make_tensor_value_info("in:0", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("out:0", TensorProto.FLOAT, [2])],
        [helper.make_tensor("k=v", TensorProto.FLOAT, [2], [1.0, 2.0])])
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    assert main(["edit", str(src), str(out), "--scale-init", "k=v=2",
                 "--set-attr", "leak:a=b:alpha=0.5", "--rename", "l=1=l2", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [s["name"] for s in steps] == ["scale_initializer", "set_attribute", "rename_tensor"]
    m = onnx.load(str(out))
    assert onnx.numpy_helper.to_array(m.graph.initializer[0]).tolist() == [2.0, 4.0]
    assert m.graph.node[1].attribute[0].f == 0.5 and m.graph.node[1].output[0] == "l2"
    x = np.array([-1.0, 3.0], np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"in:0": x})[0]
    np.testing.assert_allclose(got, np.maximum(x, 0) * [2.0, 4.0])


def test_the_replay_script_opens_the_model_from_any_folder(convnet, tmp_path, monkeypatch,
                                                           capsys):
    # the path was recorded as typed: a relative one replayed only from the edit's folder
    import shutil
    import subprocess
    import sys

    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(convnet, work / "m.onnx")
    monkeypatch.chdir(work)
    assert main(["edit", "m.onnx", "out.onnx", "--rename", "logits=scores",
                 "--script", "replay.py"]) == 0
    text = (work / "replay.py").read_text()
    assert f"onnx_lab.open({str(work / 'm.onnx')!r})" in text
    r = subprocess.run([sys.executable, str(work / "replay.py")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-500:]


def test_convert_opset_flag_converts_verifies_and_the_result_runs(convnet, tmp_path, capsys):
    out = tmp_path / "o16.onnx"
    assert main(["edit", str(convnet), str(out), "--convert-opset", "16", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["steps"][0]
    assert step["name"] == "convert_opset" and step["verify_passed"] is True
    saved = onnx.load(str(out))
    assert {o.domain: o.version for o in saved.opset_import}[""] == 16
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(str(convnet)).run(None, {"input": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert main(["edit", str(convnet), str(tmp_path / "x.onnx"), "--convert-opset", "x"]) == 2
    assert "not an integer" in capsys.readouterr().err
