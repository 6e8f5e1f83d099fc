"""DiffView: two canvases over onnx_lab.diff, linked by selection, pan and zoom (headless)."""

from __future__ import annotations

import pytest

import onnx_lab
from onnx_lab.errors import LabError
from onnx_lab.widgets import DiffView


@pytest.fixture(scope="module")
def bert_pair():
    before = onnx_lab.open("sample:bert_block", dims={"batch": 1, "seq": 8})
    after = onnx_lab.open("sample:bert_block", dims={"batch": 1, "seq": 8})
    r = after.apply("ort_transformers", model_type="bert")
    assert r.verify_passed
    return before, after


def test_attention_links_to_the_nodes_it_replaced(bert_pair, no_error):
    dv = DiffView(*bert_pair)
    no_error(dv)
    c = dv.result.counts
    assert c["added"] >= 1 and c["removed"] > 10
    assert "added" in dv.counts.value and "op_type" in dv.ops.html.value
    # Added green, removed red on the drawings.
    assert "green" in dv.right.svg and "red" in dv.left.svg
    originals = dv.select("b", "Attention_0")
    assert "/layer.0/attention/core/Softmax" in originals
    assert sum("MatMul" in o for o in originals) >= 4
    # The left canvas outlines them (drawn keys: the nodes, or the boxes holding them).
    keys = {dv.left.key_for(o) for o in originals}
    assert set(dv.left.highlight) == keys and dv.left.selected in keys
    # The panel says what the Attention replaced.
    assert "added" in dv.right.details_html and "replaced" in dv.right.details_html
    assert "Softmax" in dv.right.details_html
    # The other way: the query MatMul selects the Attention (its counterpart that shares a
    # tensor with it and carries the weights), not the mask's Cast.
    assert dv.select("a", "/layer.0/attention/query/MatMul")[0] == "Attention_0"
    assert dv.right.selected == dv.right.key_for("Attention_0")
    assert "removed" in dv.left.details_html and "Attention_0" in dv.left.details_html
    # a removed node's missing side b is an empty cell, not "NaN"
    assert ">NaN<" not in dv.table.html.value and ">None<" not in dv.table.html.value


def test_pan_and_zoom_move_both_sides(bert_pair):
    dv = DiffView(*bert_pair)
    dv.left.view = {"x": 0.0, "y": 0.0, "k": 1.0, "width": 600, "height": 500}
    dv.right.view = {"x": 10.0, "y": 20.0, "k": 0.5, "width": 600, "height": 500}
    dv.left.view = {"x": -100.0, "y": 50.0, "k": 2.0, "width": 600, "height": 500}
    # The same screen transform (scale 2, then the shift) applied to the right side.
    assert dv.right.view["k"] == pytest.approx(1.0)
    assert dv.right.view["x"] == pytest.approx(2 * 10 - 100)
    assert dv.right.view["y"] == pytest.approx(2 * 20 + 50)
    dv.sync_view.value = False
    dv.left.view = {"x": 0.0, "y": 0.0, "k": 1.0}
    assert dv.right.view["k"] == pytest.approx(1.0)  # not followed


def test_identical_models_no_false_alarm(no_error):
    dv = DiffView("sample:convnet", "sample:convnet")
    no_error(dv)
    assert dv.result.empty
    assert dv.result.highlight("a") == {} and dv.result.highlight("b") == {}
    assert "0 added" in dv.counts.value and "0 changed" in dv.counts.value
    peers = dv.select("a", "/block1/conv/Conv")
    assert peers == ["/block1/conv/Conv"]
    assert dv.right.selected == "/block1/conv/Conv"
    assert "unchanged" in dv.left.details_html


@pytest.mark.slow
def test_box_click_expands_that_side(no_error):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))
    from _models import bert_like

    big = onnx_lab.open(bert_like(layers=8), dims={"batch": 1, "sequence": 8})
    dv = DiffView(big, big)
    no_error(dv)
    boxes = sorted(dv.left.rendering.groups)
    assert boxes, "an 8-layer encoder is drawn collapsed"
    dv.left.click("scope:" + boxes[0])
    no_error(dv)
    assert boxes[0] not in dv.left.rendering.groups  # drawn open now
    assert "expand=" in dv.left.title


def test_bad_input_is_shown_in_the_widget(tmp_path):
    dv = DiffView(tmp_path / "missing.onnx", "sample:convnet")
    assert isinstance(dv.error, LabError)
    assert "onnx-lab-error" in dv.status.value
    assert dv.result is None


def test_centring_a_selection_is_not_mirrored(bert_pair):
    dv = DiffView(*bert_pair)
    dv.left.view = {"x": 0.0, "y": 0.0, "k": 1.0}
    dv.right.view = {"x": 10.0, "y": 20.0, "k": 0.5}
    dv.select("b", "Attention_0")
    # The page reports the left canvas's centring on the Attention's originals...
    dv.left.view = {"x": -400.0, "y": -300.0, "k": 1.2}
    # ...which must not throw the right side (showing the Attention) away.
    assert dv.right.view["x"] == pytest.approx(10.0) and dv.right.view["k"] == 0.5


def test_only_the_users_moves_are_mirrored(bert_pair):
    # The page says whose move a view change was: a centring it made itself ("page"), late
    # or repeated, never moves the other side; the user's wheel or drag ("user") does.
    dv = DiffView(*bert_pair)
    dv.left.view = {"x": 0.0, "y": 0.0, "k": 1.0, "by": "page"}
    dv.right.view = {"x": 10.0, "y": 20.0, "k": 0.5, "by": "page"}
    for x in (-400.0, -420.0, -380.0):  # the page's centring, reported several times
        dv.left.view = {"x": x, "y": -300.0, "k": 1.2, "by": "page"}
        assert dv.right.view["x"] == pytest.approx(10.0) and dv.right.view["k"] == 0.5
    dv.left.view = {"x": -380.0, "y": -300.0, "k": 2.4, "by": "user"}  # a wheel zoom x2
    assert dv.right.view["k"] == pytest.approx(1.0)
    assert dv.right.view["x"] == pytest.approx(2 * 10 + 380.0)
