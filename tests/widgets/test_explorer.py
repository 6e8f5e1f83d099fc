from __future__ import annotations

import pandas as pd
import pytest
from _machinery import scoped_layers

import onnx_lab
from onnx_lab.widgets import Explorer


@pytest.mark.slow
def test_explore_every_sample_every_tab(sample_lab, no_error):
    e = sample_lab.explore()
    assert isinstance(e, Explorer)
    no_error(e)
    assert e.result["num_nodes"] == len(sample_lab.index)
    assert "lab.summary()" in e.code.value
    for i in range(5):
        e.tabs.selected_index = i
        no_error(e)
        assert e.result is not None
    assert len(e.tabs.children[4].children) == 3
    # Graph with nothing selected: the collapsed overview, never a plain whole-graph layout.
    e.tabs.selected_index = 4
    assert "collapse=&#x27;auto&#x27;" in e.code.value
    assert e.result.nodes or e.result.groups


def test_nodes_filters_selection_and_graph(no_error):
    lab = onnx_lab.open("sample:convnet")
    e = Explorer(lab)
    e.tabs.selected_index = 1
    e.op_filter.value = ("Conv",)
    assert set(e.result["op_type"]) == {"Conv"} and len(e.result) == 3
    assert "isin([&#x27;Conv&#x27;])" in e.code.value
    pd.testing.assert_frame_equal(e.result, lab.nodes[lab.nodes.op_type.isin(["Conv"])])
    e.name_filter.value = "block1"
    assert list(e.result["node_id"]) == ["/block1/conv/Conv"]
    e.name_filter.value = ""
    e.op_filter.value = ()
    e.graph_filter.value = ""
    assert len(e.result) == len(lab.nodes)
    e.nodes_table.checkbox("/stem/bn/BatchNormalization").value = True
    assert e.selected_nodes == ["/stem/bn/BatchNormalization"]
    assert "epsilon" in e.node_details.value and "stem.bn.running_var" in e.node_details.value
    e.show_button.click()
    assert e.tabs.selected_index == 4
    no_error(e)
    r = e.result
    assert "/stem/bn/BatchNormalization" in r.nodes and "/stem/conv/Conv" in r.nodes
    e.radius.value = 0
    assert e.result.nodes == ["/stem/bn/BatchNormalization"]
    assert "radius=0" in e.code.value
    e.collapse.value = False
    no_error(e)
    assert "collapse" not in e.code.value
    # The Rendering shown is exactly what the one-line call gives.
    again = lab.render(around=["/stem/bn/BatchNormalization"], radius=0,
                       highlight=["/stem/bn/BatchNormalization"])
    assert again.nodes == e.result.nodes


def test_graph_expand_scope_in_collapsed_view(no_error):
    # 360 nodes in /layers.i scopes: the overview is collapsed into one box per layer
    lab = onnx_lab.open(scoped_layers(60))
    e = Explorer(lab, prefetch=0)
    e.tabs.selected_index = 4
    keys = [v for _, v in e.expand.options if v]
    assert "/layers.0" in keys
    e.expand.value = "/layers.0"
    no_error(e)
    assert "expand=&#x27;/layers.0&#x27;" in e.code.value
    assert any(n.startswith("/layers.0/") for n in e.result.nodes)


@pytest.mark.slow
def test_initializers_sort_and_weight_histogram(no_error):
    lab = onnx_lab.open("sample:convnet")
    e = Explorer(lab)
    e.tabs.selected_index = 2
    assert list(e.result["nbytes"]) == sorted(e.result["nbytes"], reverse=True)
    e.init_sort.value = "outlier_score"
    no_error(e)
    scores = e.result["outlier_score"].dropna().tolist()
    assert scores == sorted(scores, reverse=True)
    e.init_sort.value = "name"
    assert list(e.result["name"]) == sorted(e.result["name"])
    e.init_filter.value = "stem"
    assert all("stem" in n for n in e.result["name"])
    e.inits_table.checkbox("stem.conv.weight").value = True
    no_error(e)
    assert list(e.result["name"]) == ["stem.conv.weight"]
    assert e.weight_plot.value.startswith("<img") and "stem.conv.weight" in e.weight_stats_html.value
    e.inits_table.clear.click()
    assert e.weight_plot.value == ""


def test_tensors_filter_and_graph_around_tensor(no_error):
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    e = Explorer(lab)
    e.tabs.selected_index = 3
    e.tensor_kind.value = "input"
    assert list(e.result["name"]) == ["x"]
    assert tuple(e.result["shape"].iloc[0]) == (1, 4, 32)
    e.tensor_kind.value = "*"
    e.tensor_filter.value = "softmax"
    assert len(e.result) >= 1
    e.tensors_table.checkbox(e.tensors_table.page_keys()[0]).value = True
    e.show_graph()
    no_error(e)
    assert any("Softmax" in n for n in e.result.nodes)


def test_unresolved_dims_show_in_widget_not_raised(no_error):
    lab = onnx_lab.open("sample:transformer_block")  # no dims
    e = Explorer(lab)
    for i in range(5):
        e.tabs.selected_index = i  # must not raise
    assert e.tabs.children[0].children  # the summary still shows


def test_explorer_accepts_a_source_string(no_error):
    e = Explorer("sample:control_flow")
    e.tabs.selected_index = 1
    e.graph_filter.value = "If_2/then_branch" if "If_2/then_branch" in [
        v for _, v in e.graph_filter.options] else e.graph_filter.options[-1][1]
    no_error(e)
    assert len(e.result) >= 1 and e.result["graph"].nunique() == 1


def test_graph_tab_draws_the_filtered_body(no_error):
    lab = onnx_lab.open("sample:control_flow")
    e = Explorer(lab)
    e.tabs.selected_index = 1
    body = next(v for _, v in e.graph_filter.options if v not in ("*", ""))
    e.graph_filter.value = body
    e.show_graph()
    no_error(e)
    assert e.result.graph == body and f"graph=&#x27;{body}&#x27;" in e.code.value
    assert set(e.result.nodes) <= set(lab.nodes.query("graph == @body")["node_id"])


def _scoped_body_model():
    """An If whose then-branch holds 8 name-scoped layers of 40 Relus each (over 300 nodes:
    the body's overview is collapsed into boxes) and whose else-branch is one Identity."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    nodes, prev = [], "x"
    for layer in range(8):
        for j in range(40):
            out = f"/layers.{layer}/act/Relu_{j}_output_0"
            nodes.append(helper.make_node("Relu", [prev], [out],
                                          name=f"/layers.{layer}/act/Relu_{j}"))
            prev = out
    then_out = helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 3])
    then = helper.make_graph(nodes, "then", [], [then_out])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="keep")],
                              "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT,
                                                                         [2, 3])])
    main = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
            helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then,
                             else_branch=other)]
    g = helper.make_graph(main, "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [2, 3])],
        [onnx.numpy_helper.from_array(__import__("numpy").float32(0), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_box_inside_a_body_expands_and_the_main_graph_comes_back(no_error):
    # Inside an If body the expand dropdown listed the body's boxes, but the drawing ignored
    # the choice (a click on a box, or a search hit in one, did nothing), and *↑ main graph*
    # then drew the main graph with that body scope: "UnknownNameError: Unknown scope
    # '/layers.2'" and no canvas (an optimum merged decoder's /transformer/h.0/attn).
    lab = onnx_lab.open(_scoped_body_model())
    e = Explorer(lab, tab="Graph", prefetch=0)
    body = "branch/then_branch"
    e.canvas.on_open(body)
    no_error(e)
    assert "/layers.2/act" in [v for _, v in e.expand.options]
    e.canvas.on_expand("/layers.2/act")
    no_error(e)
    kwargs, _code = e.graph_call()
    assert kwargs.get("expand") == "/layers.2/act" and kwargs.get("graph") == body
    assert "/layers.2/act/Relu_0" in e.result.nodes  # the box is drawn open
    e.leave_body()
    no_error(e)
    assert e.expand.value == "" and "graph" not in e.graph_call()[0]
    assert "branch" in e.result.nodes  # the main graph, its If drawn
