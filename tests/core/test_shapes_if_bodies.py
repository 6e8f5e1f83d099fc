"""Shapes inside If bodies of an optimum-like merged decoder: once the user's dims are given,
every body tensor is sized from the outer scope (a Reshape target computed in the body from
Shape(x), the KV cache concatenated with an outer past), the outputs' expression dims are
evaluated, and cost() counts the branches' MatMul/Softmax instead of leaving them unknown."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.errors import DimError


def kv_decoder():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), n)
             for n in ("wq", "wk")]
    inits += [numpy_helper.from_array(np.array([1], np.int64), "i1"),
              numpy_helper.from_array(np.array([4, 4], np.int64), "heads")]

    def branch(tag, past):
        def nd(op, ins, outs, name, **kw):
            return helper.make_node(op, ins, outs, name=f"/{tag}/{name}", **kw)
        n = [nd("Shape", ["x"], [f"{tag}_sh"], "Shape"),
             nd("Gather", [f"{tag}_sh", "i1"], [f"{tag}_len"], "Gather", axis=0),
             nd("Concat", ["i1", f"{tag}_len", "heads"], [f"{tag}_shape"], "Concat", axis=0),
             nd("MatMul", ["x", "wk"], [f"{tag}_k"], "k/MatMul"),
             nd("Reshape", [f"{tag}_k", f"{tag}_shape"], [f"{tag}_k4"], "Reshape"),
             nd("Transpose", [f"{tag}_k4"], [f"{tag}_kt"], "T", perm=[0, 2, 1, 3]),
             nd("MatMul", ["x", "wq"], [f"{tag}_q"], "q/MatMul"),
             nd("Reshape", [f"{tag}_q", f"{tag}_shape"], [f"{tag}_q4"], "qReshape"),
             nd("Transpose", [f"{tag}_q4"], [f"{tag}_qt"], "qT", perm=[0, 2, 1, 3])]
        n.append(nd("Concat", ["past_key", f"{tag}_kt"], [f"{tag}_pres"], "kv/Concat", axis=2)
                 if past else nd("Identity", [f"{tag}_kt"], [f"{tag}_pres"], "kv/Id"))
        n += [nd("Transpose", [f"{tag}_pres"], [f"{tag}_pt"], "pT", perm=[0, 1, 3, 2]),
              nd("MatMul", [f"{tag}_qt", f"{tag}_pt"], [f"{tag}_s"], "attn/MatMul"),
              nd("Softmax", [f"{tag}_s"], [f"{tag}_p"], "Softmax", axis=-1)]
        return helper.make_graph(n, tag, [], [
            helper.make_tensor_value_info(f"{tag}_p", TP.FLOAT, None),
            helper.make_tensor_value_info(f"{tag}_pres", TP.FLOAT, None)])

    total = "past_decoder_sequence_length + decoder_sequence_length"
    nodes = [helper.make_node("If", ["use_cache_branch"], ["probs", "present.0.decoder.key"],
                              name="optimum::if", then_branch=branch("with_past", True),
                              else_branch=branch("no_past", False))]
    g = helper.make_graph(nodes, "merged", [
        helper.make_tensor_value_info("x", TP.FLOAT, [1, "decoder_sequence_length", 16]),
        helper.make_tensor_value_info("past_key", TP.FLOAT, [1, 4, "past_decoder_sequence_length", 4]),
        helper.make_tensor_value_info("use_cache_branch", TP.BOOL, [1])],
        [helper.make_tensor_value_info("probs", TP.FLOAT, [1, 4, "decoder_sequence_length", total]),
         helper.make_tensor_value_info("present.0.decoder.key", TP.FLOAT, [1, 4, total, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


DIMS = {"decoder_sequence_length": 5, "past_decoder_sequence_length": 3}


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
