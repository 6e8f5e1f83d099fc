"""Invariants of views on random DAGs (hypothesis): caps hold, edges join drawn elements,
every drawn op's inputs are accounted for (an edge, a weight, or a stub)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def random_dag(seed: int, n: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, names = [], ["x"]
    for i in range(n):
        a = names[int(rng.integers(max(0, len(names) - 6), len(names)))]
        if rng.random() < 0.4:
            b = names[int(rng.integers(0, len(names)))]
            nodes.append(helper.make_node("Add", [a, b], [f"t{i}"], name=f"/s{i % 3}/add{i}"))
        elif rng.random() < 0.2:
            nodes.append(helper.make_node("Mul", [a, "w"], [f"t{i}"], name=f"/s{i % 3}/mul{i}"))
        else:
            nodes.append(helper.make_node("Relu", [a], [f"t{i}"], name=f"/s{i % 3}/relu{i}"))
        names.append(f"t{i}")
    graph = helper.make_graph(
        nodes, "dag", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), radius=st.integers(0, 4),
       cap=st.integers(1, 40), direction=st.sampled_from(["both", "up", "down"]),
       collapse=st.sampled_from([None, "auto", 1, 2]))
def test_view_invariants(seed, n, radius, cap, direction, collapse):
    lab = onnx_lab.open(random_dag(seed, n))
    ids = lab.index.topo_order("")
    around = ids[seed % len(ids)]
    r = lab.render(around=around, radius=radius, direction=direction, max_nodes=cap,
                   collapse=collapse)
    v = r.view
    assert len(r.nodes) + len(r.groups) <= cap
    for e in v.edges:
        assert e.src in v.nodes and e.dst in v.nodes
    drawn = {m: n.key for n in v.nodes.values() if n.kind in ("op", "box") for m in n.node_ids}
    assert around in drawn  # the seed is never cut
    keys = {(e.src, e.dst) for e in v.edges}
    for nid, key in drawn.items():
        for p in lab.index.predecessors(nid):
            if p in drawn:
                assert drawn[p] == key or (drawn[p], key) in keys
            else:
                assert (f"stub:up:{key}", key) in keys
    # The SVG was produced without degrading.
    assert r.svg is not None and not any("exceeded" in x for x in r.notes)
