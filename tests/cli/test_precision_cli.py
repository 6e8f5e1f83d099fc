"""`onnx-lab precision --keep NODE`: the node stays in float32 (out of int8) in the plan; an
unknown id is an error (exit 2) naming close matches; int4's --keep stays a storage level."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx

from onnx_lab.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "numerics"))
from test_precision_keep import mlp  # noqa: E402


def test_keep_flag_forces_nodes(tmp_path, capsys):
    m = tmp_path / "m.onnx"
    onnx.save(mlp(), m)
    code = main(["precision", str(m), "--target", "fp16", "--atol", "0.05", "--rtol", "0.05",
                 "--keep", "/fc2/MatMul", "--keep", "/act/Relu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"] is True
    assert set(out["kept"]) >= {"/fc2/MatMul", "/act/Relu"}
    assert out["forced"] == ["/act/Relu", "/fc2/MatMul"]
    code = main(["precision", str(m), "--target", "fp16", "--atol", "0.05", "--rtol", "0.05",
                 "--keep", "/fc2/MatMul"])
    text = capsys.readouterr().out
    assert code == 0 and "keep /fc2/MatMul (--keep)" in text


def test_keep_flag_unknown_node_exits_2(tmp_path, capsys):
    m = tmp_path / "m.onnx"
    onnx.save(mlp(), m)
    code = main(["precision", str(m), "--target", "int8", "--keep", "/fc2/Matmul"])
    err = capsys.readouterr().err
    assert code == 2 and "/fc2/MatMul" in err
    code = main(["precision", str(m), "--target", "int4", "--keep", "/fc2/MatMul"])
    assert code == 2 and "int8, float or auto" in capsys.readouterr().err


def test_int8_on_a_merged_decoder_says_what_it_cannot_reach(tmp_path, capsys):
    from test_precision_keep import merged_decoder

    m = tmp_path / "merged.onnx"
    onnx.save(merged_decoder(), m)
    code = main(["precision", str(m), "--target", "int8", "--dims", "decoder_sequence_length=5"])
    err = capsys.readouterr().err
    assert code == 2 and "inside If/Loop bodies" in err and "passed" not in err
    h = tmp_path / "head.onnx"
    onnx.save(merged_decoder(head=True), h)
    code = main(["precision", str(h), "--target", "int8", "--dims", "decoder_sequence_length=5"])
    out = capsys.readouterr().out
    assert "note: 16 of 17 float nodes" in out and "does not reach" in out


def test_a_candidate_that_fails_to_run_is_reported_not_fatal(tmp_path, capsys):
    import numpy as np
    from test_precision_keep import T5_FEEDS, gather_from_quantized

    m, f = tmp_path / "t5.onnx", tmp_path / "x.npz"
    onnx.save(gather_from_quantized(), m)
    np.savez(f, **T5_FEEDS[0])
    code = main(["precision", str(m), "--target", "int8", "--feeds", str(f)])
    out = capsys.readouterr().out
    assert code == 0 and "keep /pos/Add" in out
    assert "note: " in out and "failed to run" in out and "out of data bounds" in out
