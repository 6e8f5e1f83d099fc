"""Issue 14, finding 6 (and the CLI side of 3): every user error of ``onnx-lab`` is one line on
stderr with exit code 2, numeric options are checked, outputs never replace inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import big_weight_model, save_external
from onnx import TensorProto, helper, numpy_helper

from onnx_lab.cli import main

EXE = Path(sys.executable).with_name("onnx-lab")


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-lab: error: "), err
    assert "Traceback" not in err and "usage:" not in err
    return lines[0]


@pytest.fixture
def model(tmp_path) -> Path:
    p = tmp_path / "m.onnx"
    onnx.save(big_weight_model(seed=7), str(p))
    return p


@pytest.fixture
def damaged(tmp_path) -> Path:
    """A model whose node name is not UTF-8 (a TypeError in every command before)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="\x01NAME\x01")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "bad.onnx"
    p.write_bytes(m.SerializeToString().replace(b"\x01NAME\x01", b"\xff\xfe\x80\x80\x80\x80"))
    return p


# --------------------------------------------------------------------------- argparse
@pytest.mark.parametrize("argv", [
    [], ["bogus"], ["summary"], ["summary", "x.onnx", "--unknown"], ["weights", "m", "--top", "x"],
    ["profile", "m", "--runs", "1.5"], ["render", "m"], ["compare", "a"],
    ["optimize", "a", "b", "--preset", "x", "--passes", "y"],
])
def test_usage_errors_are_one_line_exit_2(capsys, argv):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    _one_line(err)


def test_help_is_unchanged(capsys):
    with pytest.raises(SystemExit) as e:
        main(["summary", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: onnx-lab summary") and "--json" in out


@pytest.mark.slow
def test_console_script_usage_error_is_one_line():
    if not EXE.exists():
        pytest.skip(f"console script {EXE} is not installed")
    p = subprocess.run([str(EXE), "weights"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    line = _one_line(p.stderr)
    assert "required: model" in line


# --------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("argv,flag", [
    (["weights", "{m}", "--top", "-3"], "--top"),
    (["profile", "{m}", "--threads", "-2"], "--threads"),
    (["profile", "{m}", "--warmup", "-1"], "--warmup"),
    (["profile", "{m}", "--batch-sweep", "1,-2"], "--batch-sweep"),
    (["cost", "{m}", "--top", "0"], "--top"),
    (["render", "{m}", "-o", "g.dot", "--max-nodes", "-1"], "--max-nodes"),
    (["render", "{m}", "-o", "g.dot", "--timeout", "nan"], "--timeout"),
    (["render", "{m}", "-o", "g.dot", "--timeout", "1e9"], "--timeout"),  # an OverflowError
    (["compare", "{m}", "{m}", "--atol", "-1e-3"], "--atol"),
    (["compare", "{m}", "{m}", "--rtol", "inf"], "--rtol"),
    (["compare", "{m}", "{m}", "--max-bytes", "0"], "--max-bytes"),
])
def test_numeric_options_out_of_range_are_refused(capsys, model, argv, flag):
    code, out, err = _run(capsys, *[a.replace("{m}", str(model)) for a in argv])
    assert code == 2
    assert flag in _one_line(err)


# --------------------------------------------------------------------------- damaged input
@pytest.mark.parametrize("argv", [
    ["summary", "{b}"], ["tables", "{b}", "--out", "{t}/t"], ["weights", "{b}"],
    ["render", "{b}", "-o", "{t}/g.dot"], ["patterns", "{b}"],
    ["optimize", "{b}", "{t}/o.onnx", "--no-verify"],
    ["extract", "{b}", "{t}/e.onnx", "--outputs", "y", "--no-verify"],
    ["fix-dims", "{b}", "{t}/f.onnx", "n=1", "--no-verify"],
    ["compare", "{b}", "{b}"], ["diff", "{b}", "{b}"], ["profile", "{b}", "--runs", "1"],
    ["cost", "{b}"], ["check", "{b}"],
])
def test_every_model_command_refuses_a_damaged_model_in_one_line(capsys, damaged, tmp_path,
                                                                  argv):
    code, out, err = _run(capsys, *[a.replace("{b}", str(damaged)).replace("{t}", str(tmp_path))
                                    for a in argv])
    assert code == 2
    assert "not valid UTF-8" in _one_line(err)


# --------------------------------------------------------------------------- failed writes
@pytest.mark.parametrize("argv", [
    ["tables", "{m}", "--out", "{f}/t"],
    ["optimize", "{m}", "{f}/o.onnx", "--passes", "eliminate_identity", "--no-verify"],
    ["extract", "{m}", "{f}/e.onnx", "--outputs", "y", "--no-verify"],
    ["fix-dims", "sample:transformer_block", "{f}/f.onnx", "batch=1", "--no-verify"],
])
def test_a_failed_write_is_one_line(capsys, model, tmp_path, argv):
    blocker = tmp_path / "afile"
    blocker.write_bytes(b"x")  # a parent path that is a file
    code, out, err = _run(capsys, *[a.replace("{m}", str(model)).replace("{f}", str(blocker))
                                    for a in argv])
    assert code == 2
    assert "afile" in _one_line(err)


# --------------------------------------------------------------------------- inputs kept
def test_compare_csv_over_an_input_is_refused(capsys, model, tmp_path):
    before = model.read_bytes()
    other = tmp_path / "c.onnx"
    other.write_bytes(before)
    for target in (model, other):
        code, _, err = _run(capsys, "compare", str(model), str(other), "--csv", str(target))
        assert code == 2 and "destroy the input" in _one_line(err)
    assert model.read_bytes() == before and other.read_bytes() == before


def test_render_over_its_model_is_refused(capsys, model):
    before = model.read_bytes()
    code, _, err = _run(capsys, "render", str(model), "-o", str(model))
    assert code == 2 and "destroy the input" in _one_line(err)
    assert model.read_bytes() == before


def test_tables_never_write_over_a_data_file_of_the_model(capsys, tmp_path):
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                          [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = save_external(m, tmp_path / "m.onnx", data_name="nodes.csv")
    data = (tmp_path / "nodes.csv").read_bytes()
    code, _, err = _run(capsys, "tables", str(path), "--out", str(tmp_path))
    assert code == 2 and "nodes.csv" in _one_line(err)
    assert (tmp_path / "nodes.csv").read_bytes() == data
    # tables into the model's folder are fine when no file is an input
    plain = tmp_path / "plain" / "p.onnx"
    plain.parent.mkdir()
    onnx.save(m, str(plain))
    assert _run(capsys, "tables", str(plain), "--out", str(plain.parent))[0] == 0


def test_a_defect_exits_3_with_its_traceback_not_1_which_a_gate_reads_as_a_verdict(
        capsys, monkeypatch, model):
    # exit 1 is compare's and optimize's "outputs drift / verification failed"; a crash inside
    # onnx_lab used to exit 1 too (Python's default), so a CI gate read a defect as a verdict
    import onnx_lab.analysis.summary as summary

    def broken(*args, **kwargs):
        raise ValueError("No cast function available.\nmore")

    monkeypatch.setattr(summary, "summarize", broken)
    code, _out, err = _run(capsys, "summary", str(model), "--json")
    assert code == 3
    assert "Traceback" in err and err.strip().splitlines()[-1] == (
        "onnx-lab: internal error: ValueError: No cast function available. (a defect of "
        "onnx_lab, not a verdict on the model: please report it with the traceback above)")


def test_model_strings_never_reach_the_terminal_as_escape_sequences(tmp_path, capsys):
    # a node or input name holding ESC [2J, an OSC 8 link or an OSC 52 clipboard write went
    # to the terminal raw in every text output and in error lines
    import json

    import onnx
    from onnx import helper

    esc = "\x1b[2J\x1b]52;c;cHduZWQ=\x07\u202e\r"
    g = helper.make_graph([helper.make_node("Relu", ["x" + esc], ["y"], name="n" + esc)], "g",
                          [helper.make_tensor_value_info("x" + esc, 1, ["d" + esc, 4])],
                          [helper.make_tensor_value_info("y", 1, ["d" + esc, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.producer_name = "p" + esc
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\r" not in out
    assert "\\x1b[2J" in out and "\\x0d" in out  # a carriage return rewrote its line
    assert main(["profile", str(path)]) == 2  # an unresolved dim, named in the error line
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err
    assert main(["summary", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["producer"].startswith("p" + esc)  # JSON keeps the value, escaped by json


@pytest.mark.parametrize("argv,says,not_says", [
    # the library's Python fix (dims={...}, to open() or to this call) as flags
    (["cost", "sample:transformer_block"], "Pass --dims batch=1 --dims seq=1.",
     ["dims={", "open()", "this call"]),
    (["compare", "sample:transformer_block", "sample:transformer_block", "--dims", "foo=3"],
     "give whole shapes with --shape INPUT:AxBxC.", ["shapes={"]),
    # ids come from the tables the CLI writes, not from a Lab's DataFrame
    (["render", "sample:convnet", "--around", "nope", "-o", "{tmp}/v.svg"],
     "nodes.csv's node_id column (onnx-lab tables MODEL)", ["lab.nodes", "lab.tensors"]),
    (["extract", "sample:convnet", "{tmp}/e.onnx", "--nodes", "nope"],
     "Use node ids from nodes.csv (onnx-lab tables MODEL).", ["lab.nodes"]),
])
def test_errors_give_their_fix_in_the_words_of_the_command_line(capsys, tmp_path, argv, says,
                                                                 not_says):
    code, _, err = _run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    line = _one_line(err)
    assert code == 2 and says in line, line
    assert not any(s in line for s in not_says), line


def test_command_line_advice_quotes_a_model_dim_name_for_the_shell():
    from onnx_lab.cli._advice import command_line_text
    from onnx_lab.errors import DimError

    text = command_line_text(DimError("Unresolved dims.", fix="Pass dims={'seq len': 1, "
                                      "'h': ...} and shapes={'x': [...]}."))
    assert text.endswith("Pass --dims 'seq len=1' --dims h=N and --shape x:AxBxC."), text
    # an unparsable literal keeps the generic flag, never half a dict
    assert command_line_text(DimError("p.", fix="dims={a b}.")).endswith("--dims NAME=V."), text


def test_command_line_advice_leaves_the_users_paths_and_names_alone(capsys, tmp_path):
    # the rewriting ran over the whole message: a file 'collab.nodes.onnx' was reported as
    # 'colnodes.csv (onnx-lab tables MODEL).onnx', a dim named 'lab.nodes' likewise
    missing = tmp_path / "collab.nodes.onnx"
    code, _, err = _run(capsys, "summary", str(missing))
    assert code == 2 and str(missing) in _one_line(err)
    odd = tmp_path / "dims={'a': 1}.onnx"
    code, _, err = _run(capsys, "summary", str(odd))
    assert code == 2 and "dims={'a': 1}.onnx" in _one_line(err)
    code, _, err = _run(capsys, "summary", "sample:convnet", "--dims", "lab.nodes=3")
    line = _one_line(err)
    assert code == 2 and "'lab.nodes'" in line and "--shape INPUT:AxBxC" in line


def test_dim_names_no_flag_can_carry_keep_the_librarys_words():
    from onnx_lab.cli._advice import command_line_text
    from onnx_lab.errors import DimError

    for name, flag in (("a\\b", "--dims 'a\\b=1'"), ("a}b", "--dims 'a}b=1'")):
        text = command_line_text(DimError("p.", fix=f"Pass dims={{{name!r}: 1}}."))
        assert text.endswith(f"Pass {flag}."), text
    # '=' and ',' split the flag: the Python form is kept rather than a flag that misparses
    text = command_line_text(DimError("p.", fix="Pass dims={'a=b': 1}."))
    assert text.endswith("Pass dims={'a=b': 1}."), text


def test_check_fixes_name_the_fix_dims_command():
    from onnx_lab.cli._advice import command_line_words

    text = command_line_words("Pass dims={'batch': 1} / shapes= to analyse and run it; "
                              "static-shape runtimes need lab.fix_dims({'batch': 1}).")
    assert text == ("Pass --dims batch=1 / --shape INPUT:AxBxC to analyse and run it; "
                    "static-shape runtimes need onnx-lab fix-dims MODEL OUT batch=1.")
    assert command_line_words("the dims (lab.fix_dims) if") == "the dims (onnx-lab fix-dims) if"


def test_check_fixes_name_the_convert_opset_flag():
    from onnx_lab.cli._advice import command_line_words

    assert command_line_words("Convert it down: lab.convert_opset(21), or upgrade.") == \
        "Convert it down: onnx-lab edit MODEL OUT --convert-opset 21, or upgrade."
    assert command_line_words("(lab.convert_opset, a decomposition)") == \
        "(onnx-lab edit --convert-opset, a decomposition)"


def test_a_newline_in_a_model_string_never_starts_a_line_of_its_own(tmp_path, capsys):
    # a node named "r\nerror: ..." printed a line 'error: ...' of its own after the cost
    # line's "peak activations at", and an op type with a newline split the note naming it
    fake = "\nerror: fake verdict"
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y1"], name="r" + fake),
         helper.make_node("Mystery" + fake, ["y1"], ["y"], name="m", domain="custom.x")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("custom.x", 1)])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    code, out, err = _run(capsys, "cost", str(path))
    assert code == 0, err
    lines = out.splitlines()
    assert not [ln for ln in lines if ln.startswith("error:")], out
    assert "at 'r\\nerror: fake verdict'" in lines[0]  # the peak node, quoted
    (i,) = [i for i, ln in enumerate(lines) if ln.startswith("note: ") and "unknown" in ln]
    assert lines[i + 1] == " " * len("note: ") + "error: fake verdict"  # the note goes on


def test_print_note_keeps_a_note_one_note():
    import io

    from onnx_lab.cli._terminal import print_note

    buf = io.StringIO()
    print_note("a\nb\r\nc\rd", indent="  ", file=buf)
    assert buf.getvalue() == "  note: a\n        b\n        c\\rd\n"
