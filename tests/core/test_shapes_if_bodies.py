"""Shapes inside If bodies of an optimum-like merged decoder: once the user's dims are given,
every body tensor is sized from the outer scope (a Reshape target computed in the body from
Shape(x), the KV cache concatenated with an outer past), the outputs' expression dims are
evaluated, and cost() counts the branches' MatMul/Softmax instead of leaving them unknown."""

from __future__ import annotations

import pytest
from llm_models import MERGED_DIMS as DIMS
from llm_models import merged_kv_decoder as kv_decoder

import onnx_lab
from onnx_lab.errors import DimError


def test_body_tensors_are_sized_from_the_outer_scope():
    lab = onnx_lab.open(kv_decoder(), dims=DIMS)
    t = lab.tensors.set_index("name")
    body = t[t["graph"] != ""]
    assert len(body) >= 26 and not body["dynamic"].any()
    assert tuple(t.loc["with_past_pres", "shape"]) == (1, 4, 8, 4)  # the KV cache: 3 + 5
    assert tuple(t.loc["no_past_pres", "shape"]) == (1, 4, 5, 4)
    assert tuple(t.loc["with_past_s", "shape"]) == (1, 4, 5, 8)
    out = lab.outputs.set_index("name")
    assert tuple(out.loc["present.0.decoder.key", "shape"]) == (1, 4, 8, 4)  # expression evaluated
    assert tuple(out.loc["probs", "shape"]) == (1, 4, 5, 8)


def test_cost_counts_the_branches():
    c = onnx_lab.open(kv_decoder(), dims=DIMS).cost()
    assert c.nodes["known"].all()
    n = c.nodes.set_index("node_id")
    # q·kᵀ over 4 heads: 4·5·8·4 MACs with the cache, 4·5·5·4 without
    assert n.loc["/with_past/attn/MatMul", "macs"] == 4 * 5 * 8 * 4
    assert n.loc["/no_past/attn/MatMul", "macs"] == 4 * 5 * 5 * 4
    assert n.loc["/with_past/Softmax", "flops"] > n.loc["/no_past/Softmax", "flops"] > 0
    assert any("both branches" in x for x in c.notes)


def test_without_the_dims_cost_names_them():
    with pytest.raises(DimError, match="decoder_sequence_length"):
        onnx_lab.open(kv_decoder()).cost()


def test_branches_that_share_names_are_typed_each_by_its_own_graph():
    """The same names in both branches with other shapes: each definition has its own row,
    type and producer, cost counts every body node, and the folded position bias has the
    branch's own length (the other branch's would have broken the Add)."""
    lab = onnx_lab.open(kv_decoder(shared=True), dims=DIMS)
    idx = lab.model.index
    assert {"dec_pres", "dec_s", "dec_pos"} <= idx.shared
    t = lab.tensors
    rows = t[t["name"] == "dec_pres"].set_index("graph")
    assert tuple(rows.loc["optimum::if/then_branch", "shape"]) == (1, 4, 8, 4)
    assert tuple(rows.loc["optimum::if/else_branch", "shape"]) == (1, 4, 5, 4)
    assert rows.loc["optimum::if/then_branch", "producer"] == "/with_past/kv/Concat"
    assert rows.loc["optimum::if/else_branch", "consumers"] == ["/no_past/pT", "/no_past/pShape"]
    pos = t[t["name"] == "dec_pos"].set_index("graph")["shape"]
    assert tuple(pos["optimum::if/then_branch"]) == (8,)
    assert tuple(pos["optimum::if/else_branch"]) == (5,)
    types = lab.model.types(DIMS)
    assert types.at("dec_sb", "optimum::if/then_branch").shape == (1, 4, 5, 8)
    assert types.at("dec_sb", "optimum::if/else_branch").shape == (1, 4, 5, 5)
    out = lab.outputs.set_index("name")
    assert tuple(out.loc["present.0.decoder.key", "shape"]) == (1, 4, 8, 4)
    c = lab.cost()
    assert c.total["unknown_nodes"] == 0
    n = c.nodes.set_index("node_id")
    assert n.loc["/with_past/attn/MatMul", "macs"] == 4 * 5 * 8 * 4
    assert n.loc["/no_past/attn/MatMul", "macs"] == 4 * 5 * 5 * 4
    assert n.loc["/with_past/bias/Add", "flops"] == 4 * 5 * 8


def test_a_shape_computed_in_one_branch_does_not_size_its_namesake_in_the_other():
    """ONNX's data propagation keeps the shape values it computes by tensor name across the
    whole model: T5's merged decoder builds its relative position bias as
    ConstantOfShape(Shape(...)) under the same names in both branches, and the no-cache branch
    took the cache branch's length (its attention then mixed a length of 5 with 1: 113 tensors
    unknown, cost 78 nodes short). Each branch is sized by its own values."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as H
    from onnx import numpy_helper

    def branch(tag, length):
        nodes = [H.make_node("Constant", [], ["pos"], name=f"/{tag}/pos", value=(
                     numpy_helper.from_array(np.zeros((1, length), np.float32)))),
                 H.make_node("Add", ["pos", "x"], ["scores"], name=f"/{tag}/Add"),
                 H.make_node("Shape", ["scores"], ["sh"], name=f"/{tag}/Shape"),
                 H.make_node("ConstantOfShape", ["sh"], ["bias"], name=f"/{tag}/Bias"),
                 H.make_node("Add", ["scores", "bias"], ["out"], name=f"/{tag}/Out")]
        return H.make_graph(nodes, tag, [], [H.make_tensor_value_info("out", T.FLOAT, None)])
    g = H.make_graph(
        [H.make_node("If", ["use_cache_branch"], ["y"], name="optimum::if",
                     then_branch=branch("with_past", 5), else_branch=branch("no_past", 1))],
        "merged", [H.make_tensor_value_info("use_cache_branch", T.BOOL, [1]),
                   H.make_tensor_value_info("x", T.FLOAT, [1, 1])],
        [H.make_tensor_value_info("y", T.FLOAT, None)])
    lab = onnx_lab.open(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]))
    types = lab.model.types()
    for name in ("scores", "bias", "out"):
        assert types.at(name, "optimum::if/then_branch").shape == (1, 5), name
        assert types.at(name, "optimum::if/else_branch").shape == (1, 1), name
    t = lab.tensors
    rows = t[t["name"] == "bias"].set_index("graph")["shape"]
    assert tuple(rows["optimum::if/else_branch"]) == (1, 1)
    n = lab.cost().nodes.set_index("node_id")
    assert n.loc["/no_past/Out", "flops"] == 1 and n.loc["/with_past/Out", "flops"] == 5


def _scripted_loop():
    """torch's TorchScript export of ``for i in range(x.shape[0]): y = tanh(l(y)) + x[i]``:
    the Loop body declares its carried input ``y.9`` as ``[n, 4]``, the graph input's ``n``."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    body = h.make_graph(
        [h.make_node("Gemm", ["y.9", "w", "b"], ["gemm"], name="/l/Gemm", transB=1),
         h.make_node("Tanh", ["gemm"], ["tanh"], name="/Tanh"),
         h.make_node("Gather", ["x", "i.1"], ["row"], name="/Gather_1"),
         h.make_node("Add", ["tanh", "row"], ["sum"], name="/Add"),
         h.make_node("Identity", ["cond"], ["cond_out"], name="/Identity")],
        "body",
        [h.make_tensor_value_info("i.1", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
         h.make_tensor_value_info("y.9", T.FLOAT, ["n", 4])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("sum", T.FLOAT, ["Loopy_dim_0", "Loopy_dim_1"])])
    graph = h.make_graph(
        [h.make_node("Constant", [], ["true"], name="/Constant",
                     value=numpy_helper.from_array(np.array(True))),
         h.make_node("Shape", ["x"], ["shape"], name="/Shape"),
         h.make_node("Gather", ["shape", "zero"], ["trips"], name="/Gather", axis=0),
         h.make_node("Loop", ["trips", "true", "x"], ["y"], name="/Loop", body=body)],
        "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 4])],
        [h.make_tensor_value_info("y", T.FLOAT, ["n", 4])],
        [numpy_helper.from_array(np.zeros((4, 4), np.float32), "w"),
         numpy_helper.from_array(np.zeros(4, np.float32), "b"),
         numpy_helper.from_array(np.array(0, np.int64), "zero")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])


def test_the_dims_given_size_what_a_loop_body_declares_with_their_names():
    # ONNX's inference keeps a body input's declared symbol over the size it is fed: with
    # dims={"n": 5} the body stayed (n, 4) and cost() counted 0 MACs for its Gemm
    lab = onnx_lab.open(_scripted_loop(), dims={"n": 5})
    t = lab.tensors.set_index("name")
    assert t.loc["x", "shape"] == (5, 4)
    assert t.loc["y.9", "shape"] == (5, 4) and t.loc["gemm", "shape"] == (5, 4)
    c = lab.cost()
    assert c.total["unknown_nodes"] == 0
    # the trip count Gather(Shape(x), 0) folds to n = 5: the body runs 5 times
    rows = c.nodes.set_index("node_id")
    assert rows.loc["/l/Gemm", "calls"] == 5
    assert rows.loc["/l/Gemm", "macs"] == 5 * (5 * 4 * 4)
    assert any("body counted 5 times per run (its trip count, computed from the input "
               "shapes" in n for n in c.notes), c.notes
    # another n, another count
    c = onnx_lab.open(_scripted_loop(), dims={"n": 3}).cost()
    assert c.nodes.set_index("node_id").loc["/l/Gemm", "calls"] == 3
