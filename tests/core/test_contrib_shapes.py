"""Shapes through onnxruntime's fused ops: every rule against the shape onnxruntime produces."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.core import _contrib_shapes
from onnx_lab.runtime.capture import capture
from onnx_lab.runtime.feeds import make_feeds

F, I8, U8, I32, I64 = (TensorProto.FLOAT, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32,
                       TensorProto.INT64)
MS = "com.microsoft"
_NP = {F: np.float32, I8: np.int8, U8: np.uint8, I32: np.int32, I64: np.int64}


def _w(name: str, shape, elem=F, value=None):
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    if value is None:
        value = rng.normal(0, 0.5, shape) if elem == F else rng.integers(0, 4, shape)
    return numpy_helper.from_array(np.asarray(value).astype(_NP[elem]).reshape(shape), name)


# (op, domain, attrs, inputs as (name, elem, shape) or a TensorProto weight or "" for absent,
#  outputs, opset)
CASES = {
    "Gelu": ("Gelu", MS, {}, [("x", F, [2, 3, 8])], ["y"], 17),
    "FastGelu": ("FastGelu", MS, {}, [("x", F, [2, 3, 8]), _w("b", [8])], ["y"], 17),
    "BiasGelu": ("BiasGelu", MS, {}, [("x", F, [2, 3, 8]), _w("b", [8])], ["y"], 17),
    "QuickGelu": ("QuickGelu", MS, {"alpha": 1.702}, [("x", F, [2, 3, 8])], ["y"], 17),
    "RotaryEmbedding": ("RotaryEmbedding", MS, {"num_heads": 2},
                        [("x", F, [1, 4, 16]), _w("pos", [1, 4], I64, [[0, 1, 2, 3]]),
                         _w("cos", [8, 4]), _w("sin", [8, 4])], ["y"], 17),
    "SkipLayerNormalization": ("SkipLayerNormalization", MS, {"epsilon": 1e-5},
                               [("x", F, [2, 3, 8]), ("skip", F, [2, 3, 8]), _w("g", [8]),
                                _w("b", [8])], ["y", "", "", "sum"], 17),
    "SkipSimplifiedLayerNormalization": (
        "SkipSimplifiedLayerNormalization", MS, {"epsilon": 1e-5},
        [("x", F, [2, 3, 8]), ("skip", F, [2, 3, 8]), _w("g", [8])], ["y", "", "", "sum"], 17),
    "SimplifiedLayerNormalization": ("SimplifiedLayerNormalization", "", {"axis": -1},
                                     [("x", F, [2, 3, 8]), _w("g", [8])], ["y"], 14),
    "LayerNormalization@14": ("LayerNormalization", "", {"axis": -1},
                              [("x", F, [2, 3, 8]), _w("g", [8]), _w("b", [8])], ["y"], 14),
    "Attention": ("Attention", MS, {"num_heads": 2},
                  [("x", F, [2, 4, 16]), _w("w", [16, 48]), _w("b", [48])], ["y"], 17),
    "Attention qkv_hidden_sizes": (
        "Attention", MS, {"num_heads": 2, "qkv_hidden_sizes": [16, 16, 8]},
        [("x", F, [2, 4, 16]), _w("w", [16, 40]), _w("b", [40])], ["y"], 17),
    "MultiHeadAttention": ("MultiHeadAttention", MS, {"num_heads": 2},
                           [("q", F, [2, 4, 16]), ("k", F, [2, 5, 16]), ("v", F, [2, 5, 16])],
                           ["y"], 17),
    "MultiHeadAttention BNSH": ("MultiHeadAttention", MS, {"num_heads": 2},
                                [("q", F, [2, 4, 16]), ("k", F, [2, 2, 5, 8]),
                                 ("v", F, [2, 2, 5, 8])], ["y"], 17),
    "GroupQueryAttention": ("GroupQueryAttention", MS, {"num_heads": 2, "kv_num_heads": 1},
                            [("q", F, [1, 4, 16]), ("k", F, [1, 4, 8]), ("v", F, [1, 4, 8]), "",
                             "", _w("seqlens", [1], I32, [3]), _w("total", [], I32, 4)],
                            ["y"], 17),
    "GroupQueryAttention packed": (
        "GroupQueryAttention", MS, {"num_heads": 2, "kv_num_heads": 1},
        [("q", F, [1, 4, 32]), "", "", "", "", _w("seqlens", [1], I32, [3]),
         _w("total", [], I32, 4)], ["y"], 17),
    "EmbedLayerNormalization": (
        "EmbedLayerNormalization", MS, {"epsilon": 1e-5},
        [("ids", I32, [2, 4]), ("seg", I32, [2, 4]), _w("word", [10, 8]), _w("pos", [16, 8]),
         _w("segw", [2, 8]), _w("g", [8]), _w("b", [8])], ["y", "mask_index"], 17),
    "MatMulNBits": ("MatMulNBits", MS, {"K": 16, "N": 8, "bits": 4, "block_size": 16},
                    [("a", F, [2, 3, 16]), _w("q", [8, 1, 8], U8), _w("s", [8])], ["y"], 17),
    "FusedConv": ("FusedConv", MS, {"activation": "Relu", "pads": [1, 1, 1, 1]},
                  [("x", F, [1, 3, 8, 8]), _w("w", [4, 3, 3, 3]), _w("b", [4])], ["y"], 17),
    "FusedGemm": ("FusedGemm", MS, {"activation": "Relu", "transB": 1},
                  [("a", F, [3, 5]), _w("b", [4, 5]), _w("c", [4])], ["y"], 17),
    "FusedMatMul": ("FusedMatMul", MS, {"transA": 1, "alpha": 0.5},
                    [("a", F, [2, 5, 3]), ("b", F, [2, 5, 4])], ["y"], 17),
    "FusedMatMul transB": ("FusedMatMul", MS, {"transB": 1},
                           [("a", F, [2, 3, 5]), ("b", F, [4, 5])], ["y"], 17),
    "DynamicQuantizeMatMul": ("DynamicQuantizeMatMul", MS, {},
                              [("a", F, [2, 3, 5]), _w("b", [5, 4], I8), _w("bs", [1]),
                               _w("bz", [1], I8, [0])], ["y"], 17),
    "MatMulIntegerToFloat": ("MatMulIntegerToFloat", MS, {},
                             [("a", U8, [2, 3, 5]), _w("b", [5, 4], I8), _w("as", [1]),
                              _w("bs", [1])], ["y"], 17),
}


def _model(op, domain, attrs, inputs, outputs, opset) -> tuple[onnx.ModelProto, dict]:
    """The fused op fed by an Identity (so it is not the graph's first node) and read by a
    Relu (so a standard op after it needs its type too)."""
    graph_inputs, inits, names, feeds = [], [], [], {}
    rng = np.random.default_rng(0)
    for spec in inputs:
        if spec == "":
            names.append("")
        elif isinstance(spec, onnx.TensorProto):
            inits.append(spec)
            names.append(spec.name)
        else:
            name, elem, shape = spec
            graph_inputs.append(helper.make_tensor_value_info(name, elem, shape))
            feeds[name] = (rng.normal(0, 1, shape) if elem == F  # ids below every table size
                           else rng.integers(0, 2, shape)).astype(_NP[elem])
            names.append(name)
    first = names[0]
    nodes = [helper.make_node("Identity", [first], ["x_in"]),
             helper.make_node(op, ["x_in"] + names[1:], outputs, domain=domain, **attrs),
             helper.make_node("Identity", [outputs[0]], ["z"])]
    graph = helper.make_graph(nodes, "g", graph_inputs, [helper.make_tensor_value_info(
        "z", F, None)], inits)
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8), feeds


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_gives_the_shape_onnxruntime_produces(case):
    model, feeds = _model(*CASES[case])
    outputs = [o for o in CASES[case][4] if o]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    del sess  # the model runs on CPU here (else the case would not prove anything)
    lab = onnx_lab.open(model)
    types = lab.model.types()
    got = next(capture(lab.model, feeds, outputs + ["z"]))
    for name in outputs + ["z"]:
        info = types[name]
        assert info.shape == got[name].shape, (case, name, info, got[name].shape)
        assert info.dtype == str(got[name].dtype), (case, name, info, got[name].dtype)


def test_every_rule_is_tested():
    tested = {spec[0] for spec in CASES.values()}
    assert set(_contrib_shapes.RULES) <= tested


def _fused_bert_block():
    lab = onnx_lab.open("sample:bert_block", dims={"batch": 2, "seq": 8})
    lab.apply("ort_transformers", model_type="bert")
    return lab


def test_transformer_fusions_keep_every_tensor_typed_and_import_their_domain(tmp_path):
    lab = _fused_bert_block()
    fused = {n.op_type for n in lab.model.graph if n.domain == MS}
    assert {"Attention", "SkipLayerNormalization", "BiasGelu"} <= fused
    # The optimizer's in-memory model lacked the com.microsoft import: invalid ONNX, and
    # inference stopped at the first fused node.
    assert lab.model.ir.opset_imports.get(MS) == 1
    path = tmp_path / "fused.onnx"
    lab.save(path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    types = lab.model.types(dims={"batch": 2, "seq": 8})
    names = [v.name for n in lab.model.graph for v in n.outputs if v.name]
    feeds = make_feeds(lab)
    got = {}
    for chunk in capture(lab.model, feeds, names):
        got.update(chunk)
    for name in names:
        assert types[name].shape == got[name].shape, (name, types[name], got[name].shape)


def test_cost_after_onnxruntime_fusions_counts_the_fused_ops():
    lab = onnx_lab.open("sample:convnet")
    before = lab.cost()
    lab.apply("ort:extended")
    assert any(n.op_type == "FusedConv" for n in lab.model.graph)
    after = lab.cost()
    assert after.total["unknown_nodes"] == 0
    assert after.total["macs"] == pytest.approx(before.total["macs"], rel=1e-6)
    bert = _fused_bert_block().cost()
    assert bert.total["unknown_nodes"] == 0


def _paddle_flatten() -> onnx.ModelProto:
    """x [b, 120, h, w] -> Reshape(x, Concat(Shape(x)[0:2], [-1])) -> Transpose at opset 12:
    the flatten of PP-OCRv4's recognizer (a Paddle export), whose output ONNX's Reshape-5
    inference leaves without even a rank (opset 14's gives [b, 120, ?])."""
    g = helper.make_graph([
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["s2"]),
        helper.make_node("Concat", ["s2", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Transpose", ["flat"], ["y"], perm=[0, 2, 1])], "flatten",
        [helper.make_tensor_value_info("x", F, ["b", 120, "h", "w"])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([2], np.int64), "two"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus_one")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])


def test_a_reshape_onnx_gives_up_on_keeps_its_rank():
    types = onnx_lab.open(_paddle_flatten()).model.types()
    assert types["flat"].shape is not None and len(types["flat"].shape) == 3
    assert types["y"].shape is not None and len(types["y"].shape) == 3
    # With every dim given, the target folds to values and the shapes come out whole.
    lab = onnx_lab.open(_paddle_flatten(), dims={"b": 2, "h": 4, "w": 5})
    got = next(capture(lab.model, make_feeds(lab), ["flat", "y"]))
    types = lab.model.types(dims={"b": 2, "h": 4, "w": 5})
    assert types["flat"].shape == got["flat"].shape == (2, 120, 20)
    assert types["y"].shape == got["y"].shape == (2, 20, 120)


def test_fused_ops_inside_if_bodies_are_typed():
    # a merged decoder quantized to MatMulNBits holds them in its If branches, which the
    # completion did not enter: nothing after the first one had a shape (optimum's merged
    # Llama quantized by onnxruntime's MatMulNBitsQuantizer: 80 nodes of unknown cost and no
    # KV cache size, where the float model had none)
    from llm_models import MERGED_DIMS, merged_kv_decoder

    from onnx_lab.numerics.weight_only import quantize_weight_only

    fp32 = merged_kv_decoder()
    q = quantize_weight_only(fp32, block_size=16)
    bodies = [a.g for n in q.graph.node for a in n.attribute
              if a.type == onnx.AttributeProto.GRAPH]
    assert sum(n.op_type == "MatMulNBits" for g in bodies for n in g.node) == 4
    lab = onnx_lab.open(q, dims=MERGED_DIMS)
    feeds = make_feeds(lab)
    sess = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    for use_cache in (True, False):
        got, want = (onnx_lab.open(m, dims=MERGED_DIMS).cost(
            branches={"use_cache_branch": use_cache}) for m in (q, fp32))
        assert got.total["unknown_nodes"] == 0, use_cache
        assert got.total["macs"] == want.total["macs"] > 0
        # the branch's outputs typed as onnxruntime returns them
        feeds["use_cache_branch"] = np.array([use_cache])
        outs = sess.run(["probs", "present.0.decoder.key"], feeds)
        tag = "with_past" if use_cache else "no_past"
        graph = next(e.graph for e in lab.model.index.entries.values()
                     if e.node.name == f"/{tag}/Softmax")
        types = lab.model.types(MERGED_DIMS)
        for name, out in zip((f"{tag}_p", f"{tag}_pres"), outs):
            assert types.at(name, graph).shape == out.shape, (name, types.at(name, graph))
    # each MatMulNBits output: [batch, new tokens, 16] in both branches
    types = lab.model.types(MERGED_DIMS)
    seen = 0
    for e in lab.model.index.entries.values():
        if e.node.op_type == "MatMulNBits":
            t = types.at(e.node.outputs[0].name, e.graph)
            assert t is not None and t.shape == (1, 5, 16), (e.graph, t)
            seen += 1
    assert seen == 4


def test_a_declared_symbol_the_inputs_give_a_value_is_sized():
    # TorchScript declares a BERT's outputs with dims of its own making (dynamic_axes names
    # the inputs only): last_hidden_state ['LayerNormalizationlast_hidden_state_dim_0', ...].
    # ONNX's inference sizes them from the inputs; after onnxruntime's transformer fusions a
    # SkipLayerNormalization makes that output, and the declared symbols stayed: the pooler's
    # Gemm and Tanh behind it had unknown cost at any dims
    sym = ["LayerNormalizationlast_hidden_state_dim_0", "LayerNormalizationlast_hidden_state_dim_1"]
    idx = numpy_helper.from_array(np.array(0, np.int64), "idx")
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "b"], ["h"],
                              domain=MS, epsilon=1e-5, name="sln"),
             helper.make_node("Gather", ["h", "idx"], ["first"], axis=1, name="pick"),
             helper.make_node("Gemm", ["first", "w"], ["p"], transB=1, name="pool"),
             helper.make_node("Tanh", ["p"], ["pooled"], name="tanh")]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, ["batch", "seq", 8])
                     for n in ("x", "skip")],
        [helper.make_tensor_value_info("h", F, [*sym, 8]),
         helper.make_tensor_value_info("pooled", F, [sym[0], 8])],
        [_w("g", [8]), _w("b", [8]), _w("w", [8, 8]), idx])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)])
    feeds = {n: np.ones((2, 5, 8), np.float32) for n in ("x", "skip")}
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    assert [o.shape for o in got] == [(2, 5, 8), (2, 8)]
    lab = onnx_lab.open(m, dims={"batch": 2, "seq": 5})
    types = lab.model.types({"batch": 2, "seq": 5}, {})
    assert types["h"].shape == (2, 5, 8) and types["pooled"].shape == (2, 8)
    c = lab.cost()
    assert c.total["unknown_nodes"] == 0
    assert c.nodes.set_index("node_id").loc["pool", "macs"] == 2 * 8 * 8
    # without values the declared symbols stay
    assert onnx_lab.open(m).outputs.set_index("name").loc["h", "shape"][0] == sym[0]
