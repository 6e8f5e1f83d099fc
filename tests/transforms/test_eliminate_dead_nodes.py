from __future__ import annotations

import numpy as np
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, sample

from onnx_lab.errors import UnknownNameError
from onnx_lab.transforms.base import get_pass


def test_convnet_dead_branch():
    before = sample("convnet")
    found = get_pass("eliminate_dead_nodes").find(before)
    assert [(m.match_id, m.node_ids, m.saving_nodes) for m in found] == [
        ("eliminate_dead_nodes:/dead/Mul", ["/dead/Mul", "/dead/Relu"], 2)]
    assert found[0].saving_bytes == 4  # the dead.scale scalar goes too
    r = apply("eliminate_dead_nodes", before)
    assert sorted(r.removed) == ["/dead/Mul", "/dead/Relu"]
    assert "dead.scale" not in r.model.ir.graph.initializers
    assert_same_outputs(before, r.model)


def test_chains_clusters_and_selection():
    text = """g (float[3] x) => (float[3] y) {
        y = Relu(x)
        a = Neg(x)
        b = Exp(a)
        c = Sigmoid(x)
    }"""
    m = model_from_text(text)
    found = get_pass("eliminate_dead_nodes").find(m)
    assert [f.node_ids for f in found] == [["Neg_1", "Exp_2"], ["Sigmoid_3"]]
    r = apply("eliminate_dead_nodes", m, matches=["eliminate_dead_nodes:Sigmoid_3"])
    assert ops(r.model) == ["Relu", "Neg", "Exp"]
    r = apply("eliminate_dead_nodes", m)
    assert ops(r.model) == ["Relu"]
    assert_same_outputs(m, r.model)
    with pytest.raises(UnknownNameError):
        apply("eliminate_dead_nodes", m, matches=["eliminate_dead_nodes:Exp_2"])


def test_dead_nodes_inside_bodies_and_outer_reads():
    text = """g (bool c, float[2] x) => (float[2] y) {
        s = Sigmoid(x)
        u = Neg(x)
        y = If (c) <then_branch = t () => (float[2] a) { d = Exp(x)  a = Neg(s) },
                    else_branch = e () => (float[2] b) { b = Abs(x) }>
    }"""
    m = model_from_text(text)
    r = apply("eliminate_dead_nodes", m)
    # Neg u is dead; Sigmoid is read by the live then-body; Exp inside the body is dead.
    assert sorted(r.removed) == ["If_2/then_branch/Exp_0", "Neg_1"]
    for c in (True, False):
        from onnx_lab.runtime.capture import run
        feeds = {"c": np.array(c), "x": np.array([1.0, -2.0], dtype=np.float32)}
        np.testing.assert_array_equal(run(m, feeds)["y"], run(r.model, feeds)["y"])


def test_no_op_reason():
    m = model_from_text("""g (float[2] x) => (float[2] y) { y = Relu(x) }""")
    r = apply("eliminate_dead_nodes", m)
    assert r.modified is False
    assert r.reason == "no dead node: every node contributes to a graph output"
