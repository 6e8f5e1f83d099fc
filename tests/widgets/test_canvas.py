"""Headless tests of the graph canvas's traitlet API, the run-context bar and linked selection."""

from __future__ import annotations

import pytest

import onnx_lab
from onnx_lab.widgets import DriftDebugger, Explorer, Profiler
from onnx_lab.widgets._links import selection
from onnx_lab.widgets.canvas import GraphCanvas


def test_canvas_show_focus_select_details():
    lab = onnx_lab.open("sample:convnet")
    c = GraphCanvas(lab)
    r = lab.render()
    c.show(r)
    assert c.svg.startswith("<?xml") or "<svg" in c.svg
    assert 'id="n:/stem/conv/Conv"' in c.svg  # the JS maps clicks through these ids
    assert "/stem/conv/Conv" in c.items and "conv" in c.items["/stem/conv/Conv"]
    assert c.focus("/stem/conv/Conv") == "/stem/conv/Conv"
    assert c.selected == "/stem/conv/Conv" and c._focus["key"] == "/stem/conv/Conv"
    assert "kernel_shape" in c.details_html and "stem.conv.weight" in c.details_html
    seq = c._focus["seq"]
    # A tensor name focuses its producer; an unknown name changes nothing.
    assert c.focus("/stem/conv/Conv_output_0") == "/stem/conv/Conv" and c._focus["seq"] == seq + 1
    assert c.focus("nope") is None and c.selected == "/stem/conv/Conv"
    assert c.search("relu")[0].endswith("Relu")
    seen = []
    c.on_select(seen.append)
    c.selected = "input:input"
    assert seen == ["input:input"] and "input" in c.details_html
    c.view = {"x": 0.0, "y": 0.0, "k": 1.0, "width": 800, "height": 560}
    c.zoom(2.0)
    assert c.view["k"] == 2.0 and c.view["x"] == -400.0
    n = c._fit
    c.fit()
    assert c._fit == n + 1
    c.show(None)
    assert c.svg == "" and c.selected == ""


def test_canvas_box_click_expands_and_bodies_open():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    e = Explorer(lab, tab="Graph")
    boxes = [k for k in e.canvas.items if k.startswith("scope:")]
    if boxes:
        e.canvas.click(boxes[0])
        assert e.expand.value == boxes[0].split(":", 1)[1] and e.error is None
    cf = onnx_lab.open("sample:control_flow")
    x = Explorer(cf, tab="Graph")
    x.canvas._on_msg(x.canvas, {"type": "open", "key": "If_2"}, [])
    assert x.result.graph.startswith("If_2/") and x.error is None
    assert x.canvas.focus("If_2") is None  # not in the body drawn
    assert x.reveal("If_2") == "If_2"  # the Explorer goes back to the main graph to show it
    assert x.result.graph == ""


def test_small_graph_is_not_chunked():
    r = onnx_lab.open("sample:control_flow").render(collapse="auto")
    assert not r.groups


@pytest.mark.slow
def test_run_context_bar_dims_focus_and_profile():
    lab = onnx_lab.open("sample:transformer_block")
    p = Profiler(lab, runs=1, warmup=0)
    bar = p.context
    assert set(bar.dim_fields) >= {"batch", "seq"}
    assert all(f.value == "" for f in bar.dim_fields.values())  # unresolved: empty, named
    p.run_profile()
    assert type(p.error).__name__ == "DimError" and set(bar.missing) == {"batch", "seq"}
    assert "onnx-lab-missing" in bar.dim_fields["seq"]._dom_classes
    bar.set_dims({"batch": 1, "seq": 8})
    p.run_profile()
    assert p.error is None and p.profile_result is not None
    assert lab.dims == {"batch": 1, "seq": 8} and bar.missing == []
    assert "lab.dims = " in p.code.value
    assert bar.feeds() is None


@pytest.mark.slow
def test_linked_selection_drift_tick_centres_explorer():
    lab = onnx_lab.open("sample:convnet")
    e = Explorer(lab, tab="Graph")
    d = DriftDebugger(lab, lab)
    d.run()
    rows = d.result.layers.dropna(subset=["node_id"])
    tensor, node = rows["tensor"].iloc[-1], rows["node_id"].iloc[-1]
    d.layers.select([tensor])
    assert e.canvas.selected == e.canvas.key_for(node)
    assert selection(lab).node == node


def test_an_empty_canvas_is_hidden_until_it_shows_a_graph():
    import onnx_lab
    from onnx_lab.widgets.canvas import GraphCanvas

    lab = onnx_lab.open("sample:convnet")
    c = GraphCanvas(lab)
    c.show(None)
    assert c.layout.display == "none" and c.svg == ""
    c.show(lab.render(around="/stem/conv/Conv", radius=1))
    assert c.layout.display is None and c.svg


@pytest.mark.slow
def test_profiler_latency_on_the_canvas_and_a_slow_node_tick_centres_explorer():
    from onnx_lab.widgets import Profiler

    lab = onnx_lab.open("sample:convnet")
    e = Explorer(lab, tab="Graph")
    p = Profiler(lab, runs=3, warmup=1, background=False)
    p.run_profile()
    p.render_latency()
    assert p.error is None and p.canvas.svg and p.canvas.overlay_label == "time_ms"
    slow = p.slow_nodes.df
    assert len(slow) and list(slow.columns) == ["node_id", "op_type", "time_ms"]
    assert slow["time_ms"].is_monotonic_decreasing
    node = slow["node_id"].iloc[0]
    p.slow_nodes.select([node])
    assert selection(lab).node == node
    assert e.canvas.selected == e.canvas.key_for(node)
    assert p.canvas.selected == p.canvas.key_for(node)


@pytest.mark.slow
def test_dims_bar_of_a_decoder_llm_empty_cache_and_derived_dims():
    """The run-context bar shows the dims the model determines as placeholders (left empty,
    they are filled in), takes 0 for an empty KV cache and refuses a negative length."""
    lab = onnx_lab.open("sample:tiny_llm")
    p = Profiler(lab, runs=1, warmup=0)
    bar = p.context
    head = bar.dim_fields["kv_cache_dim"]
    assert head.value == "" and head.placeholder == "16 (derived)"
    assert "GroupQueryAttention" in head.tooltip
    assert "onnx-lab-dim-derived" in head._dom_classes
    total = bar.dim_fields["total_sequence_length"]
    assert total.placeholder == "past + new"
    assert "past_sequence_length + sequence_length" in total.tooltip
    bar.set_dims({"batch_size": 1, "sequence_length": 8, "past_sequence_length": -1})
    p.run_profile()
    assert type(p.error).__name__ == "DimError" and ">= 0, got -1" in str(p.error)
    bar.set_dims({"past_sequence_length": 0})
    p.run_profile()
    assert p.error is None and p.profile_result is not None
    assert lab.dims == {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0}
