"""``onnx-lab render`` writes real files."""

from __future__ import annotations

from onnx_lab.cli import main


def test_cli_writes_svg(tmp_path, capsys):
    out = tmp_path / "convnet.svg"
    assert main(["render", "sample:convnet", "-o", str(out)]) == 0
    text = out.read_text()
    assert "<svg" in text and "/stem/conv/Conv" in text
    assert f"{out}: 21 nodes" in capsys.readouterr().out


def test_cli_options(tmp_path, capsys):
    out = tmp_path / "tb.svg"
    assert main(["render", "sample:transformer_block", "-o", str(out), "--collapse", "2",
                 "--expand", "/layer.0/attention", "--dims", "batch=1", "--dims", "seq=4",
                 "--title", "block"]) == 0
    text = out.read_text()
    assert "/layer.0/attention/core/Softmax" in text and "1×4×32 f32" in text
    captured = capsys.readouterr()
    assert "3 boxes" in captured.out and "note: collapsed by name scope" in captured.err
    dot = tmp_path / "n.dot"
    assert main(["render", "sample:transformer_block", "-o", str(dot), "--around",
                 "/layer.0/mlp/act/Relu", "--radius", "1", "--direction", "up"]) == 0
    assert '"/layer.0/mlp/fc1/Add" -> "/layer.0/mlp/act/Relu"' in dot.read_text()
    body = tmp_path / "body.png"
    assert main(["render", "sample:control_flow", "-o", str(body), "--graph",
                 "Loop_3/body", "--max-nodes", "5"]) == 0
    assert body.read_bytes()[:4] == b"\x89PNG"


def test_an_unknown_suffix_is_refused_before_the_layout(tmp_path, capsys):
    # it drew the graph (a "cut" note on a big one) and then refused the extension
    assert main(["render", "sample:convnet", "-o", str(tmp_path / "v.xyz")]) == 2
    err = capsys.readouterr().err
    assert "Cannot save a rendering as '.xyz'" in err and "note:" not in err
    assert not list(tmp_path.iterdir())
