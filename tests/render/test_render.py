"""render_model on the samples: nodes, edges, clusters, labels, overlays, highlight, SVG."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from llm_models import MERGED_DIMS, merged_kv_decoder

import onnx_lab
from onnx_lab.render import Rendering, render_model
from onnx_lab.render import dot as dot_backend
from onnx_lab.render.overlays import NAN_COLOR, make_scale


def node_stmt(dot: str, key: str) -> str:
    """The DOT statement of drawn element ``key``."""
    for line in dot.splitlines():
        if line.strip().startswith(f'"{key}" ['):
            return line
    raise AssertionError(f"{key} not drawn")


# ----------------------------------------------------------------------------- structure
def test_whole_convnet_nodes_edges_io(convnet):
    r = convnet.render()
    assert isinstance(r, Rendering)
    assert r.nodes == list(convnet.index.topo_order(""))
    assert ("/stem/conv/Conv", "/stem/bn/BatchNormalization", "/stem/conv/Conv_output_0") \
        in r.edges
    assert ("input:input", "/stem/conv/Conv", "input") in r.edges
    assert ("/head/fc/Gemm", "output:logits", "logits") in r.edges
    # The dead branch is drawn: it is part of the graph.
    assert ("/dead/Mul", "/dead/Relu", "/dead/Mul_output_0") in r.edges
    assert 'shape="invhouse"' in node_stmt(r.dot, "input:input")
    assert 'shape="house"' in node_stmt(r.dot, "output:logits")
    assert not [e for e in r.edges if e[0].startswith("stub:")]


def test_clusters_by_scope(convnet):
    r = convnet.render()
    for scope in ("stem", "block1", "block2", "head"):
        assert f'label="{scope}"; tooltip="/{scope}"' in r.dot
    # Nested: /head/fc inside /head.
    head = r.dot.index('tooltip="/head";')
    fc = r.dot.index('tooltip="/head/fc";')
    assert fc > head
    assert r.view.nodes["/head/fc/Gemm"].cluster == "/head/fc"
    assert r.view.clusters["/head/fc"].parent == "/head"


def test_labels_attributes_weights_shapes(convnet):
    r = convnet.render()
    conv = r.view.nodes["/block1/conv/Conv"]
    assert conv.title == "Conv"
    assert "k 3×3  s 2  p 1" in conv.lines
    assert "W 16×8×3×3" in conv.lines
    assert "B 8" in r.view.nodes["/stem/conv/Conv"].lines
    assert "perm [0, 2, 3, 1]" in r.view.nodes["/block2/to_nhwc/Transpose"].lines
    assert "axis 1" in r.view.nodes["/head/flatten/Flatten"].lines
    assert "transB" in r.view.nodes["/head/fc/Gemm"].lines
    bn = r.view.nodes["/stem/bn/BatchNormalization"].lines
    assert not any("epsilon" in x for x in bn)
    assert bn == ["scale·B·mean·var 8"]
    # Edge labels carry shape and dtype.
    assert 'label="1×16×16×16 f32"' in r.dot


def test_cast_and_axes_labels():
    import onnx
    from onnx import helper

    g = onnx.parser.parse_graph("""
        g (float[2, 3] x) => (float16[2] y) {
            r = ReduceSum <keepdims = 0> (x, axes)
            y = Cast <to = 10> (r)
        }""")
    axes = onnx.numpy_helper.from_array(__import__("numpy").array([1], "int64"), "axes")
    g.initializer.append(axes)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(m)
    r = lab.render()
    cast = next(n for n in r.view.nodes.values() if n.title == "Cast")
    assert cast.lines == ["to float16"]
    rs = next(n for n in r.view.nodes.values() if n.title == "ReduceSum")
    assert rs.lines == ["keepdims 0", "axes [1]"]


def test_dims_reach_edge_shapes(block):
    r = block.render(show_shapes=True)
    assert 'label="batch×seq×32 f32"' in r.dot
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    r = lab.render()
    assert 'label="1×4×32 f32"' in r.dot
    assert "label=\"1×4×32 f32\"" not in lab.render(show_shapes=False).dot


def test_nodes_as_ids_dataframe_mask_and_tensor(convnet):
    convs = convnet.nodes.query("op_type == 'Conv'")
    r = convnet.render(convs)
    assert r.nodes == list(convs.node_id)
    mask = convnet.nodes.op_type == "Conv"
    assert convnet.render(mask).nodes == r.nodes
    assert convnet.render(list(convs.node_id)).nodes == r.nodes
    # A tensor name stands for its producer.
    assert convnet.render(["/stem/relu/Relu_output_0"]).nodes == ["/stem/relu/Relu"]


def test_around_radius_and_direction(convnet):
    seed = "/block1/relu/Relu"
    r0 = convnet.render(around=seed, radius=0)
    assert r0.nodes == [seed]
    r1 = convnet.render(around=seed, radius=1)
    assert set(r1.nodes) == {"/block1/bn/BatchNormalization", seed, "/block1/pool/MaxPool"}
    up = convnet.render(around=seed, radius=2, direction="up")
    assert set(up.nodes) == {"/block1/conv/Conv", "/block1/bn/BatchNormalization", seed}
    down = convnet.render(around=seed, radius=2, direction="down")
    assert set(down.nodes) == {seed, "/block1/pool/MaxPool", "/block2/conv/Conv"}
    # Stubs mark what lies beyond the neighbourhood.
    assert "stub:up:/block1/bn/BatchNormalization" in r1.view.nodes
    assert r1.view.nodes["stub:down:/block1/pool/MaxPool"].title == "+1 more"
    assert ("stub:up:/block1/bn/BatchNormalization", "/block1/bn/BatchNormalization", "") \
        in r1.edges


def test_around_tensor_name_uses_producer(block):
    r = block.render(around="/layer.0/attention/core/Softmax_output_0", radius=1)
    assert set(r.nodes) == {"/layer.0/attention/core/Div", "/layer.0/attention/core/Softmax",
                            "/layer.0/attention/core/MatMul_1"}
    # A graph input as "around": its consumers.
    r = block.render(around="x", radius=0)
    assert "/layer.0/ln/ReduceMean" in r.nodes and "/layer.0/residual/Add" in r.nodes


def test_show_initializers_draws_weights(convnet):
    r = convnet.render(around="/stem/conv/Conv", radius=0, show_initializers=True)
    assert ("weight:stem.conv.weight", "/stem/conv/Conv", "stem.conv.weight") in r.edges
    assert r.view.nodes["/stem/conv/Conv"].lines == ["k 3×3  p 1"]


# ----------------------------------------------------------------------------- subgraphs
def test_control_flow_labels_show_body_sizes(control_flow):
    r = control_flow.render()
    assert r.nodes == ["ReduceSum_0", "Greater_1", "If_2", "Loop_3", "Add_4"]
    lines = r.view.nodes["If_2"].lines
    assert "then_branch: 1 node" in lines and "else_branch: 2 nodes" in lines
    assert "body: 4 nodes" in r.view.nodes["Loop_3"].lines
    # The tooltip tells how to draw a body.
    assert "graph='If_2/then_branch'" in r.view.nodes["If_2"].tooltip
    # Outer values read by bodies are edges into the owner.
    assert ("input:x", "If_2", "x") in r.edges
    assert ("If_2", "Loop_3", "branch_out") in r.edges


def test_render_body_with_outer_inputs(control_flow):
    r = control_flow.render(graph="If_2/else_branch")
    assert r.graph == "If_2/else_branch"
    assert r.nodes == ["If_2/else_branch/Neg_0", "If_2/else_branch/Add_1"]
    assert ("outer:x", "If_2/else_branch/Neg_0", "x") in r.edges
    assert 'style="filled,dashed"' in node_stmt(r.dot, "outer:x")
    assert ("If_2/else_branch/Add_1", "output:else_out", "else_out") in r.edges
    body = control_flow.render(graph="Loop_3/body")
    assert set(body.nodes) == {"Loop_3/body/Identity_0", "inner_if"}
    assert ("input:acc_in", "inner_if", "acc_in") in body.edges
    assert ("outer:branch_out", "inner_if", "branch_out") in body.edges
    assert body.svg is not None
    # the outer value says where it comes from, not a dim alias of those words
    assert r.view.nodes["outer:x"].lines[0] == "from enclosing graph"
    assert not any("enclosing" in v for v in r.view.aliases.values())


def test_body_picked_from_nodes(control_flow):
    r = control_flow.render(["If_2/else_branch/Neg_0"])
    assert r.graph == "If_2/else_branch"
    assert any("If_2/else_branch" in n for n in r.notes)
    r = control_flow.render(around="Loop_3/body/inner_if/then_branch/Add_0", radius=1)
    assert r.graph == "Loop_3/body/inner_if/then_branch"


# ----------------------------------------------------------------------------- overlays
def test_overlay_colours_values_and_legend(convnet):
    ov = pd.Series({"/stem/conv/Conv": 1.0, "/block1/conv/Conv_output_0": 3.0,
                    "/block2/conv/Conv": 5.0, "/head/fc/Gemm": math.nan}, name="max_abs")
    r = convnet.render(overlay=ov)
    scale = make_scale([1.0, 3.0, 5.0])
    assert not scale.log
    top = node_stmt(r.dot, "/block2/conv/Conv")
    assert f'fillcolor="{scale.color(5.0)}"' in top and scale.color(5.0) == "#800026"
    assert 'fontcolor="white"' in top
    assert f'fillcolor="{scale.color(1.0)}"' in node_stmt(r.dot, "/stem/conv/Conv")
    # The tensor key colours its producer.
    assert r.view.nodes["/block1/conv/Conv"].value == 3.0
    assert "max_abs 3" in node_stmt(r.dot, "/block1/conv/Conv")
    assert f'fillcolor="{NAN_COLOR}"' in node_stmt(r.dot, "/head/fc/Gemm")
    assert 'fillcolor="#f4f4f4"' in node_stmt(r.dot, "/stem/relu/Relu")
    assert '"legend:"' in r.dot and "max_abs" in r.dot and "max 5" in r.dot


def test_overlay_log_scale_auto_and_forced(convnet):
    ov = pd.Series({"/stem/conv/Conv": 1e-7, "/block1/conv/Conv": 1e-5, "/block2/conv/Conv": 1e-1})
    r = convnet.render(overlay=ov, overlay_label="err")
    assert r.view.legend.log
    assert "err (log scale)" in r.dot
    mid = make_scale(list(ov), log=True).color(1e-5)
    assert f'fillcolor="{mid}"' in node_stmt(r.dot, "/block1/conv/Conv")
    assert not convnet.render(overlay=ov, overlay_log=False).view.legend.log
    small = pd.Series({"/stem/conv/Conv": 1.0, "/block1/conv/Conv": 2.0})
    assert not convnet.render(overlay=small).view.legend.log
    assert convnet.render(overlay=small, overlay_log=True).view.legend.log


def test_overlay_on_collapsed_boxes(block):
    ids = block.nodes.node_id
    attn = [n for n in ids if n.startswith("/layer.0/attention/")]
    ov = pd.Series({n: float(i) for i, n in enumerate(attn)})
    r = block.render(collapse=2, overlay=ov, overlay_label="max_abs")
    box = r.view.nodes["scope:/layer.0/attention"]
    assert box.value == float(len(attn) - 1)  # max of members
    t = pd.Series({n: 1.5 for n in attn})
    r = block.render(collapse=2, overlay=t, overlay_label="time_ms")
    assert r.view.nodes["scope:/layer.0/attention"].value == pytest.approx(1.5 * len(attn))


def test_highlight_list_and_dict(convnet):
    r = convnet.render(highlight=["/stem/conv/Conv", "/head/flatten/Flatten_output_0"])
    s = node_stmt(r.dot, "/stem/conv/Conv")
    assert 'color="#d62728"' in s and 'penwidth="3"' in s
    assert 'penwidth="3"' in node_stmt(r.dot, "/head/flatten/Flatten")
    assert 'penwidth' not in node_stmt(r.dot, "/stem/relu/Relu")
    r = convnet.render(highlight={"/stem/conv/Conv": "green", "/dead/Mul": "red"})
    assert 'color="green"' in node_stmt(r.dot, "/stem/conv/Conv")
    assert 'color="red"' in node_stmt(r.dot, "/dead/Mul")
    r = convnet.render(around="/stem/conv/Conv", radius=0, highlight=["/dead/Mul"])
    assert any("outside this view" in n for n in r.notes)


# ----------------------------------------------------------------------------- output
def test_real_svg_and_save_formats(convnet, tmp_path):
    r = convnet.render(title="convnet")
    assert r.svg is not None and "<svg" in r.svg
    assert "<title>/stem/conv/Conv</title>" in r.svg
    assert r._repr_svg_() == r.svg
    assert r._repr_html_().startswith("<div class=\"mathjax_ignore\"><div class='onnx-lab-render'")
    assert (tmp_path / "a.svg") == r.save(tmp_path / "a.svg")
    assert "<svg" in (tmp_path / "a.svg").read_text()
    r.save(tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    r.save(tmp_path / "a.pdf")
    assert (tmp_path / "a.pdf").read_bytes()[:4] == b"%PDF"
    r.save(tmp_path / "a.dot")
    assert (tmp_path / "a.dot").read_text() == r.dot


def test_svg_cache_by_dot_hash(convnet):
    dot_backend.clear_cache()
    r1 = convnet.render(around="/stem/relu/Relu", radius=1)
    lay = dot_backend.layout(r1.dot)
    assert lay.cached and lay.svg == r1.svg


def test_missing_dot_gives_fallback_html(convnet, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    dot_backend.clear_cache()
    r = convnet.render(around="/stem/conv/Conv", radius=1)
    assert r.svg is None and r._repr_svg_() is None
    assert r.dot.startswith("digraph")
    assert any("apt-get install graphviz" in n and "brew install graphviz" in n for n in r.notes)
    page = r._repr_html_()
    assert "<table" in page and "/stem/conv/Conv" in page and "apt-get install graphviz" in page
    assert "DOT source" in page
    with pytest.raises(onnx_lab.errors.RenderError, match="apt-get install graphviz"):
        r.save(tmp_path / "x.svg")
    with pytest.raises(onnx_lab.errors.RenderError, match="apt-get install graphviz"):
        r.save(tmp_path / "x.png")
    r.save(tmp_path / "x.dot")
    assert (tmp_path / "x.dot").read_text() == r.dot


def test_timeout_falls_back_and_reports(block):
    dot_backend.clear_cache()
    r = block.render(timeout=0.001)
    text = " ".join(r.notes)
    assert "exceeded the 0.001 s timeout; retried with dot (cheap settings)" in text
    assert "retried with sfdp" in text
    assert r.svg is None and "no SVG" in text
    dot_backend.clear_cache()


def test_a_view_as_large_as_one_that_timed_out_starts_cheap(block):
    dot_backend.clear_cache()
    block.render(timeout=0.001)  # full quality ran past it: remembered for this timeout
    again = block.render(around="/layer.0/mlp/act/Relu", radius=30, timeout=0.001)
    text = " ".join(again.notes)
    assert "laid out with cheap dot settings" in text and "from the start" in text
    assert "dot exceeded" not in text  # the full-quality attempt was not tried again
    fine = block.render(around="/layer.0/mlp/act/Relu", radius=30)  # a longer timeout
    assert not any("from the start" in n for n in fine.notes) and fine.svg
    dot_backend.clear_cache()


def test_render_model_function_matches_lab(block):
    a = render_model(block.model, around="/layer.0/mlp/act/Relu", radius=1)
    b = block.render(around="/layer.0/mlp/act/Relu", radius=1)
    assert a.nodes == b.nodes and a.dot == b.dot
    assert re.search(r"Rendering main graph: \d+ nodes", repr(a))


def test_names_with_dot_and_html_special_characters():
    from onnx import TensorProto, helper

    n1 = helper.make_node("Relu", ["x"], ['a"b'], name='we"ird\\ <name> & co')
    n2 = helper.make_node("Neg", ['a"b'], ["y"], name="line\nbreak/]")
    g = helper.make_graph([n1, n2], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    r = lab.render()
    assert r.svg is not None and not r.notes
    assert (n1.name, n2.name, 'a"b') in r.edges


def test_render_model_accepts_a_lab(convnet):
    assert render_model(convnet, around="/dead/Mul", radius=0).nodes == ["/dead/Mul"]


def test_overlay_of_equal_values_is_not_alarming(convnet):
    ov = pd.Series({"/stem/conv/Conv": 0.0, "/dead/Mul": 0.0}, name="max_abs")
    r = convnet.render(overlay=ov)
    fill = make_scale([0.0, 0.0]).color(0.0)
    assert fill == make_scale([0.0, 1.0]).color(0.0)  # the bottom of the map
    assert f'fillcolor="{fill}"' in node_stmt(r.dot, "/dead/Mul")


def _constant_add_lab() -> onnx_lab.Lab:
    """``y = x + c`` with ``c`` from a Constant node."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    k = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "k")
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=k, name="const"),
         helper.make_node("Add", ["x", "c"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    return lab


def test_a_constant_selected_alone_is_drawn():
    # Explorer: ticking a Constant row and "Show selected in Graph" drew an empty graph.
    lab = _constant_add_lab()
    alone = lab.render(nodes=["const"])
    assert alone.nodes == ["const"]
    assert not any("drawn inside" in n for n in alone.notes)
    both = lab.render(nodes=["const", "add"])  # with its consumer: inside the Add's label
    assert both.nodes == ["add"] and any("drawn inside" in n for n in both.notes)


def test_highlighting_a_constant_outlines_the_node_drawn_around_it():
    # The note used to say the Constant was "outside this view" while its value was drawn
    # inside the consumer's label.
    lab = _constant_add_lab()
    r = lab.render(around="const", radius=1, highlight=["const"])
    assert r.nodes == ["add"]
    assert not any(n.startswith("highlight:") for n in r.notes)
    assert dot_backend.HIGHLIGHT_COLOR in node_stmt(r.dot, "add")
    plain = lab.render(around="const", radius=1)
    assert dot_backend.HIGHLIGHT_COLOR not in node_stmt(plain.dot, "add")


def test_collapsed_block_times_above_the_colour_scale_are_marked():
    import pandas as pd

    import onnx_lab

    lab = onnx_lab.open("sample:convnet")
    times = pd.Series({n: 1.0 for n in lab.nodes.node_id}, name="time_ms")
    r = lab.render(collapse=1, overlay=times)
    boxes = [n for n in r.view.nodes.values() if n.kind == "box"]
    assert boxes and all("above the scale" in n.value_text for n in boxes)
    assert any("above the colour scale" in note for note in r.notes)
    errors = pd.Series({n: 1.0 for n in lab.nodes.node_id}, name="max_abs")  # max, not sum
    r = lab.render(collapse=1, overlay=errors)
    assert not any("above the scale" in (n.value_text or "") for n in r.view.nodes.values())


def test_branches_sharing_names_draw_their_own_shapes_and_edges():
    """optimum's merged decoders define the same names in both If branches with other
    shapes: a branch's drawing takes its producers, consumers and edge labels from its own
    definitions."""
    lab = onnx_lab.open(merged_kv_decoder(shared=True), dims=MERGED_DIMS)
    for graph, total, first in (("optimum::if/else_branch", 5, "no_past"),
                                ("optimum::if/then_branch", 8, "with_past")):
        r = lab.render(graph=graph, max_nodes=100)
        # q·kᵀ scores: 1×4×5×total, drawn from this branch's MatMul to its own bias Add
        assert (f"/{first}/attn/MatMul", f"/{first}/bias/Add", "dec_s") in r.edges
        assert f'label="1×4×5×{total} f32"' in r.dot
        assert not any(n.startswith("/with_past" if first == "no_past" else "/no_past")
                       for n in r.nodes)


def _children_nice(name: str) -> list[int]:
    """The nice values of this process's running children called ``name`` (Linux /proc)."""
    import os
    from pathlib import Path

    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        fields = rest.split()
        if comm == name and int(fields[1]) == os.getpid():
            out.append(int(fields[16]))
    return out


@pytest.mark.skipif(not dot_backend.find_dot() or not __import__("os").path.isdir("/proc"),
                    reason="needs the dot binary and /proc")
def test_layouts_drawn_ahead_run_below_the_callers_priority():
    """A layout inside in_background() (the Explorer's layouts ahead) runs its Graphviz
    process at a lower CPU priority than the caller's; outside, at the caller's."""
    import os
    import threading

    n = 22  # a grid: a deterministic layout of a few tenths of a second
    src = "digraph{" + ";".join(f"n{i}_{j}->n{i + 1}_{j};n{i}_{j}->n{i}_{j + 1}"
                                 for i in range(n) for j in range(n)) + "}"
    own = os.getpriority(os.PRIO_PROCESS, 0)
    for background, want in ((True, min(19, own + 10)), (False, own)):
        seen: list[int] = []
        done: list[bytes] = []

        def run(background=background, done=done):
            if background:
                with dot_backend.in_background():
                    done.append(dot_backend.run_graphviz(src, timeout=60))
            else:
                done.append(dot_backend.run_graphviz(src, timeout=60))

        t = threading.Thread(target=run)
        t.start()
        while t.is_alive():
            seen += _children_nice("dot")
            t.join(0.002)
        assert done and done[0].startswith(b"<?xml")
        if seen:  # (a layout may end before it is seen on a fast machine)
            assert set(seen) == {want}, (background, seen)


def test_drawing_the_nodes_of_a_large_box_is_not_quadratic():
    """render(nodes=...) of a box's members (the report pre-draws every box this way) mapped
    each id into the graph with a list's ``in``: 11 s for a 12,481-node box."""
    import time

    from onnx_lab.render.view import _in_graph

    class _Idx:  # owner_in_graph reads entries[nid].graph only for a main-graph node
        def __init__(self, ids):
            self.entries = {n: type("E", (), {"graph": "", "node_id": n})() for n in ids}

    ids = [f"n{i}" for i in range(30_000)]
    t = time.perf_counter()
    kept, dropped = _in_graph(_Idx(ids), ids + ids[:10], "")
    assert kept == ids and dropped == []
    # (a list's `in` took 11 s at 12,481 ids, ~70 s at 30,000: a loaded machine took 2.4 s
    # for the linear walk, so the bound only tells linear from quadratic)
    assert time.perf_counter() - t < 15.0


def test_a_title_underscore_does_not_touch_the_line_below():
    # graphviz spaced the 8 pt shape line 8.4 pt under a 10 pt title: the underscores of an
    # input 'gpu_0/data_0' (light ResNet-50) touched the shape's digits.
    import onnx

    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] gpu_0_data_0) => (float[1, 3, 8, 8] y) {
            y = Relu(gpu_0_data_0)
        }""")
    svg = onnx_lab.open(m).render().svg
    node = svg[svg.index('id="n:input:gpu_0_data_0"'):]
    node = node[:node.index("</g>")]
    ys = {t: float(y) for y, t in re.findall(r'<text[^>]* y="([-\d.]+)"[^>]*>([^<]+)</text>', node)}
    assert ys["1×3×8×8 f32"] - ys["gpu_0_data_0"] >= 10.0
