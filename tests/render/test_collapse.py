"""Collapsed views: scope depth, auto depth, expand, fallback grouping, caps and stubs."""

from __future__ import annotations

import pytest
from _machinery import scoped_layers

import onnx_lab
from onnx_lab.render.collapse import OVERVIEW_NODES, _repeated_blocks


def test_collapse_depth_boxes_and_labels(block):
    r = block.render(collapse=2)
    assert set(r.groups) == {"/layer.0/ln", "/layer.0/attention", "/layer.0/mlp",
                             "/layer.0/residual"}
    attn = [n for n in block.nodes.node_id if n.startswith("/layer.0/attention/")]
    assert sorted(r.groups["/layer.0/attention"]) == sorted(attn)
    box = r.view.nodes["scope:/layer.0/attention"]
    assert box.title == "/layer.0/attention"
    assert box.lines[0] == f"{len(attn)} nodes"
    assert "MatMul×6" in box.lines[1] and "Add×4" in box.lines[1]
    # Edges between boxes, inputs and outputs.
    assert ("scope:/layer.0/ln", "scope:/layer.0/attention", "/layer.0/ln/Add_1_output_0") \
        in r.edges
    assert ("input:x", "scope:/layer.0/ln", "x") in r.edges
    assert ("scope:/layer.0/residual", "output:y", "y") in r.edges
    assert 'peripheries="2"' in r.dot
    assert r.nodes == []
    one = block.render(collapse=1)
    assert list(one.groups) == ["/layer.0"]


def test_collapse_auto_picks_deepest_fitting_depth(block):
    live = len(block.nodes)
    # Fits without boxes.
    r = block.render(collapse="auto")
    assert r.groups == {} and len(r.nodes) == live
    r = block.render(collapse="auto", max_nodes=10)
    assert len(r.nodes) + len(r.groups) == 10  # depth 3 gives exactly 10 units
    assert any("depth 3" in n for n in r.notes)
    r = block.render(collapse="auto", max_nodes=9)
    assert any("depth 2" in n for n in r.notes)
    assert len(r.nodes) + len(r.groups) == 4


def test_overview_of_a_large_scoped_graph_reads_at_a_glance():
    """A graph too large to draw whole opens on at most OVERVIEW_NODES boxes (one per layer
    here, not 240 sub-modules in nested frames, which take dot seconds per view);
    an opened box and an explicit depth still get max_nodes."""
    lab = onnx_lab.open(scoped_layers(60))  # 360 nodes, /layers.i/{fc,act,gate,res}
    r = lab.render(collapse="auto")
    assert len(r.groups) == 60 and len(r.view.nodes) <= OVERVIEW_NODES + 2  # + input, output
    assert any("depth 1" in n for n in r.notes)
    r = lab.render(collapse="auto", expand="/layers.3")
    assert "/layers.3/fc/MatMul" in r.nodes and len(r.groups) == 59
    assert len(lab.render(collapse=2).groups) == 120  # fc and gate; act, res drawn as nodes
    # A model that fits max_nodes is still drawn whole.
    small = onnx_lab.open(scoped_layers(20))
    assert small.render(collapse="auto").groups == {}


def test_expand_one_scope(block):
    r = block.render(collapse=2, expand="/layer.0/attention")
    assert "/layer.0/attention" not in r.groups
    attn = [n for n in block.nodes.node_id if n.startswith("/layer.0/attention/")]
    assert set(attn) <= set(r.nodes)
    assert {"/layer.0/ln", "/layer.0/mlp"} <= set(r.groups)
    # The expanded nodes sit in a frame of that scope, sub-scopes nested inside.
    assert "/layer.0/attention" in r.view.clusters
    assert r.view.nodes["/layer.0/attention/core/Softmax"].cluster == "/layer.0/attention/core"
    assert r.view.clusters["/layer.0/attention/core"].parent == "/layer.0/attention"
    # Without collapse=, expand implies auto; a scope without the leading slash is accepted.
    r2 = block.render(expand="layer.0/mlp", max_nodes=12)
    assert "/layer.0/mlp/act/Relu" in r2.nodes and r2.groups


def test_unscoped_helpers_join_their_consumers_box():
    import onnx
    from onnx import helper

    g = onnx.parser.parse_graph("""
        g (float[4] x) => (float[4] y) {
            w = Identity (x)
            a = Relu (w)
            b = Neg (a)
            y = Abs (b)
        }""")
    g.node[1].name, g.node[2].name, g.node[3].name = "/s/a/Relu", "/s/a/Neg", "/t/Abs"
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(m)
    r = lab.render(collapse=1)
    assert sorted(r.groups["/s"]) == sorted(["Identity_0", "/s/a/Relu", "/s/a/Neg"])
    assert r.nodes == ["/t/Abs"]


def test_fallback_repeated_blocks_without_scopes(make_chain):
    block = ("MatMul", "Add", "Relu", "Mul", "Softmax", "Neg")
    ops = list(block) * 6
    bounds, anchor = _repeated_blocks(ops)
    assert anchor in block and len(bounds) >= 5
    lab = onnx_lab.open(make_chain(60, block=("Relu", "Add", "Neg", "Softmax", "Abs", "Tanh")))
    r = lab.render(collapse="auto", max_nodes=20)
    assert r.groups and all(k.startswith("block") for k in r.groups)
    assert any("repeated blocks" in n for n in r.notes)
    assert sum(len(m) for m in r.groups.values()) + len(r.nodes) == 60
    r2 = lab.render(collapse="auto", max_nodes=20, expand="block2")
    assert "block2" not in r2.groups and set(r.groups["block2"]) <= set(r2.nodes)


def test_weight_making_nodes_join_the_block_of_their_user():
    # onnx-caffe2 exports compute every weight with ConstantOfShape, all first in topological
    # order: the first block held half of DenseNet with edges to every other block (3 s).
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])
    nodes, inits, prev = [], [], "x"
    for i in range(6):
        inits.append(numpy_helper.from_array(np.array([4, 4, 1, 1], np.int64), f"s{i}"))
        nodes.append(helper.make_node("ConstantOfShape", [f"s{i}"], [f"w{i}"], value=fill))
    for i in range(6):
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
                  helper.make_node("Sigmoid", [f"r{i}"], [f"g{i}"]),
                  helper.make_node("Neg", [f"g{i}"], [f"n{i}"])]
        prev = f"n{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info(prev, 1, [1, 4, 8, 8])], inits)
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    r = lab.render(collapse="auto", max_nodes=20)
    assert any("repeated blocks" in n for n in r.notes)
    ops = {k: sorted(lab.index.node(m).op_type for m in members)
           for k, members in r.groups.items()}
    assert len(ops) == 6
    assert all(v == ["ConstantOfShape", "Conv", "Neg", "Relu", "Sigmoid"] for v in ops.values())


def test_fallback_topological_chunks(big):
    r = big.render(collapse="auto")
    assert r.groups and all(k.startswith("chunk") for k in r.groups)
    assert len(r.groups) + len(r.nodes) <= 300
    assert any("chunks" in n for n in r.notes)
    first = r.view.nodes["scope:chunk1"]
    assert first.title.startswith("nodes 1–")
    assert r.svg is not None


def test_cap_cuts_with_stubs(convnet):
    r = convnet.render(max_nodes=5)
    assert r.nodes == convnet.index.topo_order("")[:5]
    assert any("cut: drawing 5 of 21 nodes" in n for n in r.notes)
    stubs = [n for n in r.view.nodes.values() if n.kind == "stub"]
    assert stubs and all(n.title.startswith("+") and n.title.endswith(" more") for n in stubs)
    assert '"+1 more"' in r.dot


def test_cap_applies_to_collapsed_units(block):
    r = block.render(collapse=3, max_nodes=4)
    assert len(r.nodes) + len(r.groups) <= 4
    assert any(n.startswith("cut:") for n in r.notes)
    assert any(n.kind == "stub" for n in r.view.nodes.values())


def test_large_graph_stays_under_cap_and_timeout(big):
    assert len(big.index) == 3000
    r = big.render()
    assert len(r.nodes) == 300
    assert r.svg is not None
    assert not any("exceeded" in n for n in r.notes)
    assert any(n.startswith("cut: drawing 300 of 3000") for n in r.notes)
    # A neighbourhood deep inside the graph.
    r = big.render(around="n1500", radius=3)
    assert "n1500" in r.nodes and len(r.nodes) <= 10 and r.svg is not None


@pytest.mark.slow  # a large generated graph
def test_scoped_large_graph_auto_collapse(make_chain):
    lab = onnx_lab.open(make_chain(2000, scoped=True))
    r = lab.render(collapse="auto")
    assert len(r.groups) == 200 and r.nodes == []
    assert r.svg is not None and not any("exceeded" in n for n in r.notes)
    r = lab.render(collapse="auto", expand="/blk150")
    assert {f"/blk150/op{i}" for i in range(1500, 1510)} <= set(r.nodes)


def test_boxes_follow_the_model_not_the_constants_they_build():
    # light ResNet-50 (onnx's test data) builds its weights with ConstantOfShape early in the
    # graph: block 4's median member sat before block 3's and its edge was drawn backwards,
    # block 4 above block 3
    import os

    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_resnet50.onnx")
    if not os.path.exists(path):
        pytest.skip("onnx's light models are not installed")
    view = onnx_lab.open(path).render(collapse="auto").view
    boxes = {n.key for n in view.nodes.values() if n.kind == "box"}
    assert {"scope:block3", "scope:block4"} <= boxes
    assert not [(e.src, e.dst) for e in view.edges if e.backward]


def _layers_with_constants(n: int, root_nodes: int = 3) -> onnx_lab.Lab:
    """``n`` layers ``/model/layers.i`` of Constant -> Add -> Relu, plus ``root_nodes`` Neg
    nodes directly in ``/model`` (its own members, as a decoder's embedding and final norm)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes, x = [], "x"
    for i in range(root_nodes):
        nodes.append(helper.make_node("Neg", [x], [f"r{i}"], name=f"/model/Neg_{i}"))
        x = f"r{i}"
    for i in range(n):
        s = f"/model/layers.{i}"
        c = numpy_helper.from_array(np.full((4,), i, np.float32), f"c{i}")
        nodes.append(helper.make_node("Constant", [], [f"c{i}"], name=f"{s}/Constant", value=c))
        nodes.append(helper.make_node("Add", [x, f"c{i}"], [f"a{i}"], name=f"{s}/Add"))
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"h{i}"], name=f"{s}/Relu"))
        x = f"h{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx_lab.open(m)


def test_a_cut_draws_no_constant_whose_consumers_are_cut():
    """A cut view keeps a folded Constant only with a consumer it feeds: the cut expand of a
    24-layer Llama's root box drew 1,393 Constants of the cut layers, each on its own with a
    '+N more' stub (a 260,641 pt wide drawing Chromium took a minute to paint)."""
    lab = _layers_with_constants(100)
    r = lab.render(collapse="auto", expand="/model", max_nodes=20)
    assert any(n.startswith("cut:") for n in r.notes)
    idx = lab.model.index
    drawn = set(r.view.nodes)
    for key, node in r.view.nodes.items():
        if node.kind == "op" and idx.entries[key].node.op_type == "Constant":
            users = {c for o in idx.entries[key].node.outputs for c in idx.consumers[o.name]}
            assert users & drawn, key
    assert sum(n.kind == "stub" for n in r.view.nodes.values()) <= 3


def _under_model(n: int) -> onnx_lab.Lab:
    """``scoped_layers(n)`` inside a root module ``/model`` (``/model/layers.i/fc/MatMul``...),
    as a decoder's export names them."""
    m = scoped_layers(n)
    for node in m.graph.node:
        node.name = "/model" + node.name
    return onnx_lab.open(m)


def test_a_box_too_large_to_open_whole_opens_one_level():
    """The overview of a deep decoder is its root box; opening it drew its first 300 nodes
    (a few layers) and no box for the others: now each sub-scope is a box."""
    lab = _under_model(100)  # 600 nodes, all under /model
    # the overview itself: one box said nothing (a 96-layer Llama was "/model"), its layers
    overview = lab.render(collapse="auto")
    assert set(overview.groups) == {f"/model/layers.{i}" for i in range(100)}
    assert any("the overview is one box, /model; opened one level" in n
               for n in overview.notes)
    r = lab.render(collapse="auto", expand="/model")
    assert set(r.groups) == {f"/model/layers.{i}" for i in range(100)}
    assert any("opened one level" in n for n in r.notes)
    assert not any(n.startswith("cut:") for n in r.notes)
    # a box that fits opened whole still does: its nodes in nested frames
    r = lab.render(collapse="auto", expand="/model/layers.7")
    assert "/model/layers.7/gate/Sigmoid" in r.nodes and "/model/layers.8" not in r.nodes
