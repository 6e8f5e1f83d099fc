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
    assert x.result.graph == "If_2/then_branch" and x.error is None  # then before else
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


# ----------------------------------------------------------------------------- search index
def _browser_models():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "browser" / "_models.py"
    spec = importlib.util.spec_from_file_location("_browser_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_index_holds_every_node_of_every_graph_and_where_it_is_drawn():
    from onnx_lab.render.details import graph_owners

    cf = onnx_lab.open("sample:control_flow")
    c = GraphCanvas(cf)
    c.show(cf.render(collapse="auto"))
    ix, pl = c.index, c.placement
    assert ix["ids"] == list(cf.index.entries)  # bodies included
    assert len(ix["text"]) == len(ix["label"]) == len(ix["graph"]) == len(ix["ids"])
    i = ix["ids"].index("Loop_3/body/inner_if/then_branch/Add_0")
    assert "add" in ix["text"][i] and ix["graph"][i] == "Loop_3/body/inner_if/then_branch"
    # A node two bodies deep is drawn by the Loop of the main graph holding it (not open).
    assert pl["keys"][pl["at"][i]] == "Loop_3" and pl["open"][i] == 0
    j = ix["ids"].index("Add_4")
    assert pl["keys"][pl["at"][j]] == "Add_4" and pl["open"][j] == 1
    assert graph_owners(cf)["Loop_3/body/inner_if/else_branch"] == "inner_if"
    # The index is built once per model, the placement once per view.
    before = c.index
    c.show(cf.render(around="ReduceSum_0", radius=0))
    assert c.index is before and c.placement["at"][i] == -1  # the Loop is not drawn


def test_index_words_tensors_and_sources_and_reveal_opens_the_box():
    lab = onnx_lab.open(_browser_models().detector())
    e = Explorer(lab, tab="Graph")
    ix, pl = e.canvas.index, e.canvas.placement
    inside = [n for n, a, o in zip(ix["ids"], pl["at"], pl["open"]) if a >= 0 and not o]
    assert inside, "the detector's overview has collapsed boxes"
    nid = inside[-1]
    i = ix["ids"].index(nid)
    out = lab.index.entries[nid].node.outputs[0].name
    assert out.lower() in ix["text"][i]  # tensor names find their producer
    box = pl["keys"][pl["at"][i]]
    assert box.startswith("scope:") and nid not in e.canvas.rendering.view.nodes
    assert e.canvas.find(nid)[0] == nid and e.canvas.find(out) == [nid]
    # Choosing the hit in the page sends one 'reveal': the box opens and the node is focused.
    e.canvas._on_msg(e.canvas, {"type": "reveal", "key": nid}, [])
    assert e.error is None and e.canvas.error is None
    assert e.canvas.selected == nid and nid in e.canvas.rendering.view.nodes
    assert e.canvas._focus["key"] == nid and e.expand.value == box.split(":", 1)[1]
    k = e.canvas.placement["at"][i]
    assert e.canvas.placement["keys"][k] == nid and e.canvas.placement["open"][i] == 1


def test_reveal_shows_the_nodes_details_before_the_box_is_laid_out():
    """A search hit inside a box: the node is selected with its panel first (sent before any
    layout), then the box opens; the page never selects the box (no late selection of it
    can reach Python after the reveal), and the bar says what the view waits on."""
    lab = onnx_lab.open(_browser_models().detector())
    e = Explorer(lab, tab="Graph", prefetch=0)
    c = e.canvas
    ix, pl = c.index, c.placement
    i = next(i for i, (a, o) in enumerate(zip(pl["at"], pl["open"])) if a >= 0 and not o)
    nid, box = ix["ids"][i], pl["keys"][pl["at"][i]]
    seen, busy = [], []
    expand = c.on_expand

    def on_expand(scope):
        seen.append((c.selected, c.details_html))
        expand(scope)

    c.on_expand = on_expand
    c.observe(lambda ch: busy.append(ch["new"]), names="busy")
    c._on_msg(c, {"type": "reveal", "key": nid}, [])
    assert seen and seen[0][0] == nid and "olc-inputs" in seen[0][1]
    assert c.selected == nid and nid in c.rendering.view.nodes and box not in c.rendering.view.nodes
    assert "olc-inputs" in c.details_html and c._focus["key"] == nid
    assert busy[0] == f"laying out {box.split(':', 1)[1]} (not drawn ahead yet)…"
    assert c.busy == ""
    # A selection from the page is taken as it comes, also of an element not drawn.
    other = next(k for k in c.rendering.view.nodes if k != nid)
    c.set_state({"selected": other})
    assert c.selected == other


def test_a_search_wants_its_box_laid_out_first():
    """The page sends the boxes of the first hits as the user types ('want'): the Explorer
    lays their expands out before the others, and a reveal then swaps the drawing in."""
    lab = onnx_lab.open(_browser_models().detector())
    e = Explorer(lab, tab="Graph")
    c = e.canvas
    e._ahead_thread.join(timeout=120)  # the few laid out before a page reports its view
    pl = c.placement
    boxes = [pl["keys"][a] for a, o in zip(pl["at"], pl["open"]) if a >= 0 and not o]
    calls = dict(e._ahead)
    last = boxes[-1]
    scope = last.split(":", 1)[1]
    assert not any(f"expand={scope!r}" in k[1] for k in calls)
    c._on_msg(c, {"type": "want", "keys": [last]}, [])
    e._ahead_thread.join(timeout=120)
    ahead = [k[1] for k in e._ahead]
    assert any(f"expand={scope!r}" in k for k in ahead), ahead
    drawn = next(r for k, r in e._ahead.items() if f"expand={scope!r}" in k[1])
    assert getattr(drawn, "_canvas_data", None) is not None  # its search data made ahead too
    nid = next(n for n, a in zip(c.index["ids"], pl["at"]) if a >= 0 and pl["keys"][a] == last)
    busy = []
    c.observe(lambda ch: busy.append(ch["new"]), names="busy")
    c.reveal(nid)
    assert c.rendering is drawn and c.selected == nid and busy in ([], [""])


def test_reveal_opens_a_body_and_a_double_click_message_opens_if():
    cf = onnx_lab.open("sample:control_flow")
    x = Explorer(cf, tab="Graph")
    assert x.canvas.reveal("Loop_3/body/Identity_0") == "Loop_3/body/Identity_0"
    assert x.result.graph == "Loop_3/body" and x.error is None
    assert x.canvas.selected == "Loop_3/body/Identity_0"
    assert x.canvas.reveal("no such node") is None


def test_show_selected_after_expanding_a_box_is_not_an_unknown_scope():
    lab = onnx_lab.open(_browser_models().detector())
    e = Explorer(lab, tab="Graph")
    box = next(k for k in e.canvas.items if k.startswith("scope:"))
    e.canvas.click(box)
    assert e.expand.value == box.split(":", 1)[1] and e.error is None
    # The opened box is kept in view: the canvas centres its first member (not a re-fit).
    assert e.canvas._focus.get("select") is False
    assert e.canvas._focus["key"] in e.canvas.rendering.view.nodes
    last = list(lab.index.entries)[-1]
    e.nodes_table.select([last])
    e.show_graph()
    assert e.error is None, repr(e.error)
    assert e.result is not None and last in e.result.view.nodes


def test_first_view_policy_is_a_traitlet():
    lab = onnx_lab.open("sample:convnet")
    c = GraphCanvas(lab)
    assert c.first_view == "readable"
    c.first_view = "fit"
    c.first_view = "/stem/conv/Conv"
    c.show(lab.render())
    assert c.first_view == "/stem/conv/Conv" and 'id="n:/stem/conv/Conv"' in c.svg


def test_weight_values_sliced_like_netron_and_escaped():
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnx_lab.render.details import node_details, node_details_html, weight_values

    lab = onnx_lab.open("sample:convnet")
    v = weight_values(lab.model, "stem.conv.weight")
    assert v["shape"] == [8, 3, 3, 3] and v["index"] == "[0, 0, :3, :3]" and v["more"]
    want = lab.model.graph.initializers["stem.conv.weight"].const_value.numpy()[0, 0]
    assert [float(x) for x in v["rows"][1]] == pytest.approx(want[1].tolist(), rel=1e-4)
    big = np.arange(10 * 300 * 400, dtype=np.float32).reshape(10, 300, 400)
    hostile = "<img src=x onerror=alert(1)>"
    g = helper.make_graph(
        [helper.make_node("Add", ["x", hostile], ["y"], name="<b>add</b>"),
         helper.make_node("Gather", ["s", "i"], ["z"], name="g")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 300, 400]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10, 300, 400]),
         helper.make_tensor_value_info("z", TensorProto.STRING, [1])],
        [numpy_helper.from_array(big, hostile),
         numpy_helper.from_array(np.array([b"<script>alert(2)</script>"], dtype=object), "s")])
    m = onnx.helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    hl = onnx_lab.open(m)
    w = weight_values(hl.model, hostile)
    assert w["index"] == "[0, :8, :8]" and len(w["rows"]) == 8 and len(w["rows"][0]) == 8
    assert w["rows"][1][0] == "400"
    html = node_details_html(node_details(hl.model, hl.nodes.node_id.iloc[0]))
    assert "<img" not in html and "&lt;img" in html and "<b>add" not in html
    assert html.count("<td>") < 200  # bounded: a sliced table, not 1.2 M values
    k11 = numpy_helper.from_array(np.ones((32, 64, 1, 1), np.float32), "k11")
    g2 = helper.make_graph([helper.make_node("Conv", ["x", "k11"], ["y"], name="c")], "g2",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [k11])
    one = weight_values(onnx_lab.open(onnx.helper.make_model(
        g2, opset_imports=[helper.make_opsetid("", 17)])).model, "k11")
    assert one["index"] == "[:8, :8, 0, 0]" and len(one["rows"]) == 8  # not one value
    s = weight_values(hl.model, "s")
    assert s["rows"] == [["<script>alert(2)</script>"]]
    c = GraphCanvas(hl)
    c.show(hl.render(show_initializers=True))
    c.selected = "weight:s"
    assert "<script>" not in c.details_html and "&lt;script&gt;" in c.details_html
    assert "olc-values" in c.details_html


def test_hostile_names_go_into_the_index_as_text():
    import onnx
    from onnx import TensorProto, helper

    bad = "</script><svg onload=alert(1)>"
    g = helper.make_graph([helper.make_node("Relu", ["x"], [bad], name=bad + "n")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info(bad, TensorProto.FLOAT, [1])])
    lab = onnx_lab.open(onnx.helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    c = GraphCanvas(lab)
    c.show(lab.render())
    # Plain strings for textContent in the page (never markup): kept verbatim, lower-cased.
    assert c.index["ids"] == [bad + "n"] and bad.lower() in c.index["text"][0]
    assert c.index["label"] == [f"Relu  {bad}n"]
    assert c.placement["keys"] == [bad + "n"]


def _expands(e):
    return {code: r for (mid, code), r in e._ahead.items()
            if mid == id(e.lab.model) and "expand=" in code}


def test_expands_of_the_boxes_are_drawn_ahead_and_swapped_in():
    lab = onnx_lab.open(_browser_models().detector())
    e = Explorer(lab, tab="Graph", prefetch=2)
    e._ahead_thread.join(timeout=120)
    assert len(_expands(e)) == 2  # the first two boxes (no view from the page yet)
    first = next(k for k, n in e.canvas.rendering.view.nodes.items() if n.kind == "box")
    ahead = next(r for code, r in _expands(e).items() if repr(first.split(":", 1)[1]) in code)
    overview = e.canvas.rendering
    e.canvas.click(first)
    assert e.error is None and e.canvas.rendering is ahead  # a swap, no layout
    # the opened box's first member is centred, sent with the drawing
    assert e.canvas._focus["key"] in ahead.view.nodes and e.canvas._focus["select"] is False
    e._ahead_thread.join(timeout=120)  # the boxes of the expanded view, drawn ahead in turn
    e.expand.value = ""
    assert e.canvas.rendering is overview  # collapsing: the overview again, no layout
    assert e.canvas._focus["key"] == first
    none = Explorer(lab, tab="Graph", prefetch=0)
    assert none._ahead_thread is None and not _expands(none)


def test_draw_ahead_starts_nearest_the_view():
    lab = onnx_lab.open(_browser_models().detector())
    e = Explorer(lab, tab="Graph", prefetch=0)
    shown = e.canvas.rendering
    from onnx_lab.widgets.editor import drawn_centres

    centres = drawn_centres(shown.svg)
    boxes = [k for k, n in shown.view.nodes.items() if n.kind == "box" and k in centres]
    last = max(boxes, key=lambda k: centres[k][1])  # the bottom of the layout
    x, y = centres[last]
    e.canvas.view = {"x": 400 - x, "y": 300 - y, "k": 1.0, "width": 800, "height": 600}
    e.prefetch = 1
    e._draw_ahead(shown, {"collapse": "auto"})
    e._ahead_thread.join(timeout=300)
    assert [repr(last.split(":", 1)[1]) in c for c in _expands(e)] == [True]


def test_only_the_explorer_in_use_draws_ahead():
    """A second Explorer (a re-run cell) takes over drawing ahead: the first one's thread
    stops after the layout it is drawing, and resumes when its own view moves again."""
    lab = onnx_lab.open(_browser_models().detector())
    first = Explorer(lab, tab="Graph")
    first._ahead_thread.join(timeout=120)
    first.canvas.view = {"x": 0, "y": 0, "k": 0.5, "width": 900, "height": 560}  # a page
    second = Explorer(onnx_lab.open(_browser_models().detector()), tab="Graph")
    first._ahead_thread.join(timeout=120)
    left = sum(len(b) for b in first._ahead_jobs)
    assert left > 0 and not first._ahead_thread.is_alive()  # stopped with boxes queued
    second._ahead_thread.join(timeout=120)
    first.canvas.view = {"x": 10, "y": 0, "k": 0.5, "width": 900, "height": 560}  # moved
    assert first._ahead_thread.is_alive() or sum(len(b) for b in first._ahead_jobs) < left


def test_a_nul_in_a_name_is_drawn_as_its_picture_and_clicks_map_back():
    # graphviz reads DOT as C strings: a NUL in a node name ended the line, and the rest
    # (here a URL attribute) was parsed as DOT; the name is drawn with "␀" instead, and a
    # click on it (the page reads the key back from the SVG id) selects the node
    import re

    import onnx
    from onnx import TensorProto, helper

    name = 'a\x00 ]; inj [label="INJECTED" URL="javascript:alert(1)"]; z [\x01\x7f'
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name=name)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    lab = onnx_lab.open(m)
    r = lab.render()
    assert "\x00" not in r.dot and "\u2400" in r.dot
    if r.svg is not None:  # with graphviz: three drawn elements, no injected one, no link
        titles = re.findall(r"<title>(.*?)</title>", r.svg)
        assert len([t for t in titles if "&#45;&gt;" not in t]) == 4  # graph, x, node, y
        assert "inj" not in titles and 'href="javascript' not in r.svg
        c = GraphCanvas(lab)
        c.show(r)
        from onnx_lab.render._html import dot_safe

        drawn = dot_safe(name)  # the key as the page reads it back from the SVG id
        assert drawn.startswith(name.replace("\x00", "\u2400").replace("\x01", "\u2401")
                                .replace("\x7f", "\u2421") + "…#")
        assert c.drawn[drawn] == name  # the page translates the id it reads back
        c.selected = drawn  # (an id sent as it is still maps to its node)
        assert c.selected == name and "Relu" in c.details_html


def test_leaving_a_body_goes_back_to_the_graph_that_holds_it():
    cf = onnx_lab.open("sample:control_flow")
    x = Explorer(cf, tab="Graph")
    assert x.up_button.layout.display == "none"
    x.canvas.reveal("Loop_3/body/Identity_0")
    assert x.result.graph == "Loop_3/body"
    assert x.up_button.layout.display is None and x.up_button.description == "↑ main graph"
    x.up_button.click()
    assert x.error is None and x.result.graph == "" and x._body == ""
    assert x.canvas.selected == "Loop_3"  # the node that holds the body, in view
    assert x.up_button.layout.display == "none"


def test_a_reveal_that_opens_nothing_clears_the_pages_busy_line():
    # the Editor draws the main graph only: the page's "opening …" must not stay
    cf = onnx_lab.open("sample:control_flow")
    canvas = GraphCanvas(cf)
    canvas.show(cf.render())
    sent = []
    canvas.send_state = lambda key=None: sent.append(key)
    canvas.reveal("Loop_3/body/Identity_0")
    assert "busy" in sent and canvas.busy == ""


def test_reveal_reaches_a_node_cut_from_the_opened_view():
    """A 400-layer model: the overview is one root box, opened it holds 400 layer boxes, cut
    at 300. A search hit in layer 350 is in no drawn element: the reveal opens its layer (as
    its module breadcrumb does) instead of stopping with the bar saying 'opening …'."""
    from _machinery import scoped_layers

    m = scoped_layers(400)
    for node in m.graph.node:
        node.name = "/model" + node.name
    e = Explorer(onnx_lab.open(m), tab="Graph", prefetch=0)
    nid = "/model/layers.350/gate/Sigmoid"
    e.canvas._on_msg(e.canvas, {"type": "reveal", "key": nid}, [])
    assert e.error is None and e.canvas.error is None
    assert e.canvas.selected == nid and nid in e.canvas.rendering.view.nodes
    assert e.canvas._focus["key"] == nid and e.canvas.busy == ""


def test_find_lists_the_node_whose_op_type_is_the_query_first():
    # shown the Loop's body, every body id holds "loop": the Loop node itself (hidden: not in
    # this view) came after all of them, as the If of a merged decoder after 1,018 body ids
    cf = onnx_lab.open("sample:control_flow")
    c = GraphCanvas(cf)
    c.show(cf.render(graph="Loop_3/body"))
    hits = c.find("loop")
    assert hits[0] == "Loop_3", hits[:5]
    assert len(hits) > 1 and all(h.startswith("Loop_3/body") for h in hits[1:])
    op = {nid: e.node.op_type for nid, e in cf.index.entries.items()}
    adds = c.find("add")
    n_add = sum(1 for h in adds if op[h] == "Add")
    assert all(op[h] == "Add" for h in adds[:n_add])  # the Adds, then what merely holds "add"
