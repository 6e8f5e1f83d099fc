"""int8 inside If bodies (optimum's merged decoders): onnxruntime's dynamic quantizer enters
them (``EnableSubgraph``), so ``to_int8_dynamic`` quantizes the branches' MatMuls; the static
QDQ quantizer of onnxruntime 1.32 does not (QDQ ignores the option, QOperator with it raises),
so the int8 precision search keeps saying which body nodes it cannot reach
(tests/numerics/test_precision_keep.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_precision_keep import MERGED_FEEDS, merged_decoder

import onnx_lab
from onnx_lab import to_int8_dynamic


def _ops(proto_graph, depth=0, out=None):
    out = {} if out is None else out
    for n in proto_graph.node:
        out.setdefault(depth, []).append(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _ops(a.g, depth + 1, out)
    return out


def test_int8_dynamic_quantizes_the_matmuls_of_both_branches():
    lab = onnx_lab.open(merged_decoder(), dims={"decoder_sequence_length": 5})
    q = to_int8_dynamic(lab)
    ops = _ops(q.model.to_proto().graph)
    body = ops.get(1, [])
    # 3 weight MatMuls per branch (q, k, o) become MatMulInteger; none is left with a weight
    assert body.count("MatMulInteger") == 6, body
    assert "DynamicQuantizeLinear" in body
    # the quantized model runs both branches, near the float one, and compare says so
    c = onnx_lab.compare(lab, q, feeds=MERGED_FEEDS, atol=0.3, rtol=0.1)
    assert c.passed, c
    # ... and a real error is still caught at a tight tolerance
    tight = onnx_lab.compare(lab, q, feeds=MERGED_FEEDS, atol=1e-6, rtol=1e-6)
    assert not tight.passed


def test_int8_dynamic_exclusion_reaches_the_bodies():
    lab = onnx_lab.open(merged_decoder(), dims={"decoder_sequence_length": 5})
    q = to_int8_dynamic(lab, nodes_to_exclude=["/with_past/q/MatMul"])
    body = _ops(q.model.to_proto().graph)[1]
    assert body.count("MatMulInteger") == 5


def test_int8_static_search_still_refuses_an_all_in_body_model():
    from onnx_lab.errors import InputError
    from onnx_lab.numerics.precision import find_precision

    with pytest.raises(InputError, match="does not reach"):
        find_precision(merged_decoder(), "int8", MERGED_FEEDS)


def test_main_graph_only_model_unchanged():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    q = to_int8_dynamic(lab)
    assert (q.nodes["op_type"] == "MatMulInteger").sum() == 6
    assert np.isfinite(onnx_lab.compare(lab, q, atol=0.5, rtol=0.5).outputs["max_abs"]).all()
