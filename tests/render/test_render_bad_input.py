"""Every bad request raises a specific LabError naming the value (with close matches)."""

from __future__ import annotations

import pandas as pd
import pytest

from onnx_lab.cli import main
from onnx_lab.errors import RenderError, SaveError, UnknownNameError


def test_unknown_node_in_nodes(convnet):
    with pytest.raises(UnknownNameError, match=r"'/stem/conv/Cnv'.*Close matches: "
                                               r"'/stem/conv/Conv'"):
        convnet.render(["/stem/conv/Cnv"])


def test_unknown_name_in_around(convnet):
    with pytest.raises(UnknownNameError, match=r"around.*'/block1/relu/Relu_out'"):
        convnet.render(around="/block1/relu/Relu_out")


def test_unknown_name_in_highlight(convnet):
    with pytest.raises(UnknownNameError, match=r"highlight.*'/dead/Mull'.*'/dead/Mul'"):
        convnet.render(highlight=["/dead/Mull"])
    with pytest.raises(UnknownNameError, match="nope"):
        convnet.render(highlight={"nope": "red"})


def test_unknown_graph_path(control_flow):
    with pytest.raises(UnknownNameError, match=r"graph path 'If_2/then'.*'If_2/then_branch'"):
        control_flow.render(graph="If_2/then")


def test_around_outside_requested_graph(control_flow):
    with pytest.raises(RenderError, match=r"lies in graph 'If_2/else_branch'.*graph="):
        control_flow.render(around="If_2/else_branch/Neg_0", graph="Loop_3/body")


def test_unknown_scope_in_expand(block):
    with pytest.raises(UnknownNameError, match=r"scope '/layer.0/atention'.*"
                                               r"'/layer.0/attention'"):
        block.render(collapse=2, expand="/layer.0/atention")


def test_negative_radius(convnet):
    with pytest.raises(RenderError, match=r"radius=-1"):
        convnet.render(around="/dead/Mul", radius=-1)


@pytest.mark.parametrize("value", [0, -2, "deep", True, 1.5, "0"])
def test_bad_collapse(convnet, value):
    with pytest.raises(RenderError, match="collapse="):
        convnet.render(collapse=value)


@pytest.mark.parametrize("kwargs, match", [
    ({"direction": "sideways"}, "direction='sideways'"),
    ({"max_nodes": 0}, "max_nodes=0"),
    ({"timeout": 0}, "timeout=0"),
    ({"around": []}, "around= is empty"),
])
def test_bad_options(convnet, kwargs, match):
    with pytest.raises(RenderError, match=match):
        convnet.render(**kwargs)


def test_bad_nodes_tables(convnet):
    with pytest.raises(RenderError, match="no 'node_id' column"):
        convnet.render(pd.DataFrame({"x": [1]}))
    with pytest.raises(RenderError, match="mask has 2 rows"):
        convnet.render(pd.Series([True, False]))


def test_bad_overlay(convnet):
    with pytest.raises(UnknownNameError, match="'missing'"):
        convnet.render(overlay=pd.Series({"missing": 1.0}))
    with pytest.raises(RenderError, match="not a number"):
        convnet.render(overlay=pd.Series({"/dead/Mul": "high"}))
    # Partly unknown keys: drawn, with a note.
    r = convnet.render(overlay=pd.Series({"/dead/Mul": 1.0, "other": 2.0}))
    assert any("1 key(s) match no node" in n for n in r.notes)


def test_bad_save_targets(convnet, tmp_path):
    r = convnet.render(around="/dead/Mul", radius=0)
    with pytest.raises(RenderError, match=r"'\.jpeg'"):
        r.save(tmp_path / "x.jpeg")
    with pytest.raises(SaveError, match="Cannot write"):
        r.save(tmp_path / "missing" / "x.svg")


def test_cli_errors_exit_2(capsys, tmp_path):
    assert main(["render", "sample:convnet", "-o", str(tmp_path / "x.svg"),
                 "--around", "nope"]) == 2
    assert "Unknown node id or tensor name in around 'nope'" in capsys.readouterr().err
    assert main(["render", "sample:convnet", "-o", str(tmp_path / "x.svg"),
                 "--collapse", "many"]) == 2
    assert main(["render", "sample:control_flow", "-o", str(tmp_path / "x.svg"),
                 "--graph", "If_9/body"]) == 2
