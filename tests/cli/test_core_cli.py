"""``onnx-lab summary | tables | weights``: JSON keys, files, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pandas as pd
import pytest
from models import paddle_style

from onnx_lab.analysis.weights import STATS_COLUMNS
from onnx_lab.cli import main

SUMMARY_KEYS = ["ir_version", "opsets", "producer", "num_nodes", "num_nodes_main",
                "num_initializers", "num_constant_tensors", "num_params", "param_bytes",
                "inputs", "outputs", "dynamic_dims", "derived_dims", "op_counts", "op_families",
                "subgraphs", "external_data", "constant_computed_tensors",
                "constant_computed_bytes"]
EXE = Path(sys.executable).with_name("onnx-lab")


def _cli(*args: str) -> subprocess.CompletedProcess:
    if not EXE.exists():
        pytest.skip(f"console script {EXE} is not installed")
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=120)


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- console script
@pytest.mark.slow
def test_console_script_summary_json():
    p = _cli("summary", "sample:transformer_block", "--json", "--dims", "batch=2")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert list(data) == SUMMARY_KEYS
    assert data["opsets"] == {"": 17} and data["num_nodes"] == 36
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "shape": [2, "seq", 32]}]
    assert data["dynamic_dims"] == {"batch": ["x"], "seq": ["x"]}


@pytest.mark.slow
def test_console_script_error_is_one_line_exit_2(tmp_path):
    p = _cli("summary", str(tmp_path / "missing.onnx"))
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-lab: error: ")
    assert "missing.onnx" in lines[0] and "Traceback" not in p.stderr


# --------------------------------------------------------------------------- in process
def test_summary_json_keys(capsys):
    code, out, _ = _run(capsys, "summary", "sample:control_flow", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == SUMMARY_KEYS
    assert data["num_nodes"] == 12 and data["num_nodes_main"] == 5 and data["subgraphs"] == 5
    assert data["producer"] == "onnx_lab.samples 1" and data["ir_version"] == 8
    assert data["outputs"] == [{"name": "y", "dtype": "float32", "shape": [2, 3]}]
    assert data["op_counts"]["If"] == 2


def test_summary_text(capsys):
    code, out, _ = _run(capsys, "summary", "sample:convnet")
    assert code == 0
    assert "21 nodes" in out and "input" in out and "Conv 3" in out
    assert "op families: " in out and "convolution 3" in out and "MB" in out


def test_summary_with_shape(tmp_path, capsys):
    path = tmp_path / "paddle.onnx"
    onnx.save_model(paddle_style(), str(path))
    code, out, _ = _run(capsys, "summary", str(path), "--json", "--shape", "x:2x3x20x20")
    assert code == 0
    data = json.loads(out)
    assert data["inputs"][0]["shape"] == [2, 3, 20, 20]
    assert data["outputs"][0]["shape"] == [2, 10]
    assert data["num_initializers"] == 0 and data["num_params"] == 316


def test_tables_writes_three_csvs(tmp_path, capsys):
    out_dir = tmp_path / "tables"
    code, out, _ = _run(capsys, "tables", "sample:convnet", "--out", str(out_dir))
    assert code == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["initializers.csv", "nodes.csv",
                                                         "tensors.csv"]
    nodes = pd.read_csv(out_dir / "nodes.csv")
    assert len(nodes) == 21 and "node_id" in nodes.columns
    assert len(pd.read_csv(out_dir / "initializers.csv")) == 21
    tensors = pd.read_csv(out_dir / "tensors.csv")
    assert {"name", "shape", "kind"} <= set(tensors.columns)
    assert "nodes.csv: 21 rows" in out


def test_tables_with_dims(tmp_path, capsys):
    code, _, _ = _run(capsys, "tables", "sample:transformer_block", "--out", str(tmp_path),
                      "--dims", "batch=1,seq=4")
    assert code == 0
    tensors = pd.read_csv(tmp_path / "tensors.csv").set_index("name")
    assert tensors.loc["y", "shape"] == "(1, 4, 32)"


def test_tables_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    code, out, err = _run(capsys, "tables", "sample:convnet", "--out", str(f))
    assert code == 2 and "file.txt" in err and "not a folder" in err


def test_weights_json(capsys):
    code, out, _ = _run(capsys, "weights", "sample:convnet", "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 21 and list(rows[0]) == STATS_COLUMNS
    code, out, _ = _run(capsys, "weights", "sample:convnet", "--json", "--top", "3")
    rows = json.loads(out)
    scores = [r["outlier_score"] for r in rows]
    assert len(rows) == 3 and scores == sorted(scores, reverse=True)
    code, out, _ = _run(capsys, "weights", "sample:convnet")
    assert code == 0 and "stem.conv.weight" in out and "outlier_score" in out


@pytest.mark.parametrize("args, needle", [
    (["summary", "sample:transformer_block", "--dims", "bacth=1"], "'bacth'"),
    (["summary", "sample:transformer_block", "--dims", "batch"], "NAME=VALUE"),
    (["summary", "sample:transformer_block", "--dims", "batch=one"], "'one' is not an integer"),
    (["summary", "sample:transformer_block", "--shape", "x:2x3"], "rank 2"),
    (["summary", "sample:transformer_block", "--shape", "y:1x2x32"], "input 'y'"),
    (["summary", "sample:transformer_block", "--shape", "x:1xfoo"], "not a list of integers"),
    (["summary", "sample:convnett"], "'convnett'"),
    (["tables", "missing.onnx", "--out", "x"], "missing.onnx"),
    (["weights", "missing.onnx"], "missing.onnx"),
])
def test_errors_are_one_line_exit_2(capsys, args, needle):
    code, out, err = _run(capsys, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-lab: error: ") and needle in lines[0]


def test_bad_file_kinds(tmp_path, capsys):
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "text.onnx").write_text("hello world, this is not a model\n")
    for name, needle in (("empty.onnx", "empty"), ("text.onnx", "text file")):
        code, _, err = _run(capsys, "summary", str(tmp_path / name))
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(capsys, "summary", str(tmp_path))
    assert code == 2 and "directory" in err


def test_summary_and_cost_of_a_decoder_with_an_empty_cache(capsys):
    dims = "batch_size=1,sequence_length=4,past_sequence_length=0"
    code, out, _ = _run(capsys, "summary", "sample:tiny_llm", "--dims", dims)
    assert code == 0
    assert "derived dim: kv_cache_dim = 16 (GroupQueryAttention" in out
    assert "derived dim: total_sequence_length = 4" in out
    code, out, _ = _run(capsys, "cost", "sample:tiny_llm", "--dims", dims)
    assert code == 0 and "0 nodes of unknown cost" in out
    assert "KV cache: 2,048 bytes for 4 tokens (512 bytes/token, 2 layers)" in out
    code, _, err = _run(capsys, "cost", "sample:tiny_llm", "--dims",
                        "batch_size=1,sequence_length=4,past_sequence_length=-1")
    assert code == 2 and "'past_sequence_length' must be an int >= 0, got -1" in err


def test_a_reader_that_closes_the_pipe_is_no_internal_error():
    # `onnx-lab passes | head` printed a BrokenPipeError traceback and "internal error" (3)
    p = subprocess.Popen([str(EXE), "passes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader goes away before the command (seconds to start) writes
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "internal error" not in err


def test_version(capsys):
    # "onnx-lab: error: onnx-lab: the following arguments are required: COMMAND"
    import onnx_lab

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"onnx-lab {onnx_lab.__version__}"
