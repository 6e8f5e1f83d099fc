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


def _constant_weights(in_if: bool) -> onnx.ModelProto:
    """y = x @ W + b with W and b held by Constant nodes (PaddlePaddle exports; silero-vad's
    If branches), in the main graph or inside both branches of an If on a graph input."""
    h = onnx.helper
    rng = np.random.default_rng(0)

    def body(tag: str) -> list:
        w = onnx.numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
        return [h.make_node("Constant", [], [f"w_{tag}"], value=w, name=f"const_{tag}"),
                h.make_node("MatMul", ["x", f"w_{tag}"], [f"y_{tag}"], name=f"mm_{tag}")]

    vi = h.make_tensor_value_info
    if not in_if:
        nodes = body("main") + [h.make_node("Relu", ["y_main"], ["y"], name="relu")]
        inputs = [vi("x", onnx.TensorProto.FLOAT, [4, 8])]
    else:
        then = h.make_graph(body("a"), "then", [], [vi("y_a", onnx.TensorProto.FLOAT, [4, 8])])
        other = h.make_graph(body("b"), "else", [], [vi("y_b", onnx.TensorProto.FLOAT, [4, 8])])
        nodes = [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                             name="if")]
        inputs = [vi("x", onnx.TensorProto.FLOAT, [4, 8]), vi("c", onnx.TensorProto.BOOL, [])]
    g = h.make_graph(nodes, "g", inputs, [vi("y", onnx.TensorProto.FLOAT, [4, 8])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("in_if", [False, True])
def test_weights_held_in_constant_nodes_are_quantized(in_if):
    # onnxruntime's quantizer takes initializers only: PP-OCR rec raised "Expected ... to be
    # an initializer" (with advice that did not help), silero-vad's branches came back
    # unquantized under an "int8" label
    lab = onnx_lab.open(_constant_weights(in_if))
    q = to_int8_dynamic(lab)
    ops = [op for level in _ops(q.model.to_proto().graph).values() for op in level]
    assert ops.count("MatMulInteger") == (2 if in_if else 1), ops
    assert "Constant" not in ops
    feeds = {"x": np.ones((4, 8), np.float32), **({"c": np.array(True)} if in_if else {})}
    c = onnx_lab.compare(lab, q, feeds=feeds)
    assert c.preset == "int8" and c.passed, c.summary_text()
    assert "Constant" in set(lab.nodes.op_type)  # the source Lab is untouched


def test_the_int8_search_quantizes_constant_node_weights_as_weights(tmp_path):
    # the search's trials quantized a Constant-node weight as an activation (a
    # QuantizeLinear on the Constant's output): the plan judged another model than the
    # to_int8_static a user runs with the plan's exclusions
    lab = onnx_lab.open(_constant_weights(False))
    plan = lab.find_precision("int8")
    saved = plan.save(tmp_path / "plan.onnx")
    ops = [n.op_type for n in onnx.load(saved).graph.node]
    assert "Constant" not in ops, ops
    static = onnx_lab.to_int8_static(onnx_lab.open(_constant_weights(False)))  # lab holds the plan
    assert sorted(ops) == sorted(static.nodes["op_type"]), (ops, list(static.nodes["op_type"]))


def test_a_quantization_that_quantizes_nothing_says_so():
    from onnx_lab.errors import InputError

    lab = onnx_lab.open(_constant_weights(False))
    with pytest.raises(InputError, match="quantized nothing"):
        to_int8_dynamic(lab, nodes_to_exclude=["mm_main"])


def test_static_int8_of_a_merged_decoder_says_its_compute_is_in_the_bodies():
    # "no MatMul, Conv or Gemm it could take (all excluded, or none in the model)" was untrue:
    # every MatMul is inside the If on use_cache_branch, which the QDQ quantizer does not enter
    from onnx_lab.errors import InputError

    lab = onnx_lab.open(merged_decoder())
    with pytest.raises(InputError, match="inside If/Loop bodies") as e:
        onnx_lab.to_int8_static(lab, feeds=MERGED_FEEDS)
    assert "to_int8_dynamic" in e.value.fix


def test_an_ml_only_model_is_refused_before_the_quantizer():
    # onnxruntime's "Failed to find proper ai.onnx domain" came back with "Exclude the
    # failing nodes (nodes_to_exclude=[...])", which could not help
    import sys
    from pathlib import Path

    from onnx_lab.errors import InputError

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from ml_models import tree_zipmap

    lab = onnx_lab.open(tree_zipmap(ml_only=True))
    for convert in (to_int8_dynamic, onnx_lab.to_int8_static):
        with pytest.raises(InputError, match="in 'ai.onnx.ml', none in the ONNX domain") as e:
            convert(lab)
        assert "nodes_to_exclude" not in e.value.fix and "float32" in e.value.fix


def _loop_carried_weight() -> onnx.ModelProto:
    """A TF while_loop as tf2onnx writes it: the MatMul's weight is a loop variable."""
    from onnx import TensorProto, helper, numpy_helper

    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"], name="keep"),
         helper.make_node("MatMul", ["y", "w"], ["y_out"], name="mm"),
         helper.make_node("Identity", ["w"], ["w_out"], name="carry")], "body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []),
         vi("y", TensorProto.FLOAT, [1, 4]), vi("w", TensorProto.FLOAT, [4, 4])],
        [vi("c_out", TensorProto.BOOL, []), vi("y_out", TensorProto.FLOAT, [1, 4]),
         vi("w_out", TensorProto.FLOAT, [4, 4])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x", "W"], ["y", "w_last"], name="loop",
                          body=body)], "g",
        [vi("x", TensorProto.FLOAT, [1, 4])], [vi("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "W"),
         numpy_helper.from_array(np.array(3, np.int64), "n")])
    return onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_a_loop_carried_weight_is_named_not_advised_to_the_other_quantizer():
    # to_int8_static advised to_int8_dynamic, which then "quantized nothing ... Check
    # nodes_to_exclude" with nothing excluded
    from onnx_lab.errors import InputError

    lab = onnx_lab.open(_loop_carried_weight())
    for convert in (to_int8_dynamic, onnx_lab.to_int8_static):
        with pytest.raises(InputError, match="no stored tensor \\(a loop variable\\)") as e:
            convert(lab)
        assert "to_int8_dynamic" not in e.value.fix and "nodes_to_exclude" not in e.value.fix
