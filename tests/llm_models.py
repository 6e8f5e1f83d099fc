"""Small decoder LLMs with a KV cache, built with onnx.helper (deterministic weights).

- :func:`gqa_decoder`: the onnxruntime-genai layout: ``input_ids``, ``attention_mask``,
  ``past_key_values.{i}.key/value`` in, ``logits`` and ``present.{i}.key/value`` out; attention
  by ``com.microsoft.GroupQueryAttention`` with rotary embeddings from ``cos_cache`` /
  ``sin_cache`` (their rows: the longest context the model takes).
- :func:`unfused_decoder`: the optimum / torch-export layout with standard ops only:
  ``position_ids`` too, a learned position table (its rows: the longest context), attention as
  MatMul/Softmax with a causal mask built from ``position_ids`` and ``attention_mask``.

Both generate the same tokens whether the cache is used or the whole sequence is recomputed,
which is what the generation tests check.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto, helper

__all__ = ["gqa_decoder", "unfused_decoder", "merged_kv_decoder", "MERGED_DIMS"]


def _w(rng, *shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def gqa_decoder(layers: int = 2, vocab: int = 64, hidden: int = 64, heads: int = 4,
                kv_heads: int = 2, max_len: int = 64, seed: int = 0,
                past_names: tuple[str, str] = ("past_key_values.{i}.key",
                                               "past_key_values.{i}.value"),
                present_names: tuple[str, str] = ("present.{i}.key", "present.{i}.value"),
                opset: int = 17) -> onnx.ModelProto:
    """A genai-style decoder with GroupQueryAttention (see the module docstring)."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    inits, nodes = [], []

    def init(name, arr):
        inits.append(onnx.numpy_helper.from_array(arr, name))

    init("embed.weight", _w(rng, vocab, hidden, scale=1.0))
    pos = np.arange(max_len)[:, None] / (10000 ** (np.arange(hd // 2) * 2 / hd))[None, :]
    init("cos_cache", np.cos(pos).astype(np.float32))
    init("sin_cache", np.sin(pos).astype(np.float32))
    init("one", np.array([1], np.int64))
    init("axis1", np.array([1], np.int64))
    nodes += [
        helper.make_node("Gather", ["embed.weight", "input_ids"], ["h0"], name="embed"),
        helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"],
                         name="seqlens/sum", keepdims=0),
        helper.make_node("Sub", ["mask_sum", "one"], ["seqlens_i64"], name="seqlens/sub"),
        helper.make_node("Cast", ["seqlens_i64"], ["seqlens_k"], name="seqlens/cast",
                         to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name="total/shape"),
        helper.make_node("Gather", ["mask_shape", "axis1"], ["total_1"], name="total/gather"),
        helper.make_node("Squeeze", ["total_1"], ["total_i64"], name="total/squeeze"),
        helper.make_node("Cast", ["total_i64"], ["total_len"], name="total/cast",
                         to=TensorProto.INT32),
    ]
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                         ["batch_size", "sequence_length"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                         ["batch_size", "total_sequence_length"])]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                          ["batch_size", "sequence_length", vocab])]
    x = "h0"
    for i in range(layers):
        p = f"layers.{i}"
        pk, pv = (n.format(i=i) for n in past_names)
        ok, ov = (n.format(i=i) for n in present_names)
        for name in (pk, pv):
            ins.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, ["batch_size", kv_heads, "past_sequence_length", hd]))
        for name in (ok, ov):
            outs.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, ["batch_size", kv_heads, "total_sequence_length", hd]))
        for w, n_out in (("q", hidden), ("k", kv_heads * hd), ("v", kv_heads * hd),
                         ("o", hidden), ("up", 2 * hidden)):
            init(f"{p}.{w}.weight", _w(rng, hidden, n_out))
        init(f"{p}.down.weight", _w(rng, 2 * hidden, hidden))
        nodes += [
            helper.make_node("MatMul", [x, f"{p}.q.weight"], [f"{p}/q"], name=f"{p}/q_proj"),
            helper.make_node("MatMul", [x, f"{p}.k.weight"], [f"{p}/k"], name=f"{p}/k_proj"),
            helper.make_node("MatMul", [x, f"{p}.v.weight"], [f"{p}/v"], name=f"{p}/v_proj"),
            helper.make_node("GroupQueryAttention",
                             [f"{p}/q", f"{p}/k", f"{p}/v", pk, pv, "seqlens_k", "total_len",
                              "cos_cache", "sin_cache"],
                             [f"{p}/attn", ok, ov], name=f"{p}/attn/GroupQueryAttention",
                             domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads,
                             do_rotary=1),
            helper.make_node("MatMul", [f"{p}/attn", f"{p}.o.weight"], [f"{p}/o"],
                             name=f"{p}/o_proj"),
            helper.make_node("Add", [x, f"{p}/o"], [f"{p}/r1"], name=f"{p}/residual1"),
            helper.make_node("MatMul", [f"{p}/r1", f"{p}.up.weight"], [f"{p}/up"],
                             name=f"{p}/up_proj"),
            helper.make_node("Relu", [f"{p}/up"], [f"{p}/act"], name=f"{p}/act"),
            helper.make_node("MatMul", [f"{p}/act", f"{p}.down.weight"], [f"{p}/down"],
                             name=f"{p}/down_proj"),
            helper.make_node("Add", [f"{p}/r1", f"{p}/down"], [f"{p}/out"],
                             name=f"{p}/residual2"),
        ]
        x = f"{p}/out"
    init("lm_head.weight", _w(rng, hidden, vocab))
    nodes.append(helper.make_node("MatMul", [x, "lm_head.weight"], ["logits"], name="lm_head"))
    graph = helper.make_graph(nodes, "gqa_decoder", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.microsoft", 1)])


def unfused_decoder(layers: int = 2, vocab: int = 64, hidden: int = 32, heads: int = 2,
                    max_len: int = 64, seed: int = 1, position_ids: bool = True,
                    past_names: tuple[str, str] = ("past_key_values.{i}.key",
                                                   "past_key_values.{i}.value"),
                    present_names: tuple[str, str] = ("present.{i}.key", "present.{i}.value"),
                    combined: bool = False, opset: int = 17) -> onnx.ModelProto:
    """An optimum-style decoder with standard ops only (see the module docstring).

    ``position_ids=False`` drops that input (positions come from ``attention_mask``'s
    cumulative sum, as some exports compute them). ``combined=True``: older GPT-2 exports'
    one cache tensor per layer, ``past.{i}`` [2, batch, heads, past_seq, head] holding key and
    value, returned as ``present.{i}``.
    """
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    inits, nodes = [], []

    def init(name, arr):
        inits.append(onnx.numpy_helper.from_array(arr, name))

    init("wte", _w(rng, vocab, hidden, scale=1.0))
    init("wpe", _w(rng, max_len, hidden, scale=0.5))
    for n, v in (("zero", 0), ("one", 1), ("axis1", 1)):
        init(n, np.array([v], np.int64))
    init("scalar0", np.array(0, np.int64))
    init("scalar1", np.array(1, np.int64))
    init("neg", np.array(-1e9, np.float32))
    init("fzero", np.array(0.0, np.float32))
    init("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    init("split_heads", np.array([0, 0, heads, hd], np.int64))
    init("merge_heads", np.array([0, 0, hidden], np.int64))
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                         ["batch", "past_seq+seq"])]
    if position_ids:
        ins.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                 ["batch", "seq"]))
        pos = "position_ids"
    else:
        # positions = cumsum(mask) - 1, the last `seq` of them
        nodes += [
            helper.make_node("CumSum", ["attention_mask", "scalar1"], ["pos_cum"],
                             name="pos/cumsum"),
            helper.make_node("Sub", ["pos_cum", "one"], ["pos_all"], name="pos/sub"),
            helper.make_node("Shape", ["input_ids"], ["ids_shape"], name="pos/ids_shape"),
            helper.make_node("Gather", ["ids_shape", "axis1"], ["seq_1"], name="pos/seq"),
            helper.make_node("Neg", ["seq_1"], ["neg_seq"], name="pos/neg"),
            helper.make_node("Shape", ["attention_mask"], ["m_shape"], name="pos/m_shape"),
            helper.make_node("Gather", ["m_shape", "axis1"], ["tot_1"], name="pos/tot"),
            helper.make_node("Slice", ["pos_all", "neg_seq", "tot_1", "axis1"], ["pos_ids"],
                             name="pos/slice"),
        ]
        pos = "pos_ids"
    nodes += [
        helper.make_node("Gather", ["wte", "input_ids"], ["tok"], name="wte"),
        helper.make_node("Gather", ["wpe", pos], ["pos_emb"], name="wpe"),
        helper.make_node("Add", ["tok", "pos_emb"], ["h0"], name="embed_add"),
        # causal mask: key position j <= query position i, and attention_mask[j] == 1
        helper.make_node("Shape", ["attention_mask"], ["am_shape"], name="mask/shape"),
        helper.make_node("Gather", ["am_shape", "scalar1"], ["total"], name="mask/total"),
        helper.make_node("Range", ["scalar0", "total", "scalar1"], ["kpos"], name="mask/range"),
        helper.make_node("Unsqueeze", [pos, "axis1"], ["qpos_b1s"], name="mask/q1"),
        helper.make_node("Transpose", ["qpos_b1s"], ["qpos"], name="mask/qT", perm=[0, 2, 1]),
        helper.make_node("LessOrEqual", ["kpos", "qpos"], ["causal"], name="mask/causal"),
        helper.make_node("Cast", ["attention_mask"], ["am_bool"], name="mask/cast",
                         to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["am_bool", "axis1"], ["am_b1t"], name="mask/am"),
        helper.make_node("And", ["causal", "am_b1t"], ["allowed"], name="mask/and"),
        helper.make_node("Where", ["allowed", "fzero", "neg"], ["bias3"], name="mask/where"),
        helper.make_node("Unsqueeze", ["bias3", "axis1"], ["bias"], name="mask/bias"),
    ]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                          ["batch", "seq", vocab])]
    x = "h0"
    for i in range(layers):
        p = f"h.{i}"
        pk, pv = (n.format(i=i) for n in past_names)
        ok, ov = (n.format(i=i) for n in present_names)
        if combined:
            pk, pv, ok, ov = (f"{p}/{n}" for n in ("pk", "pv", "ok", "ov"))
            ins.append(helper.make_tensor_value_info(f"past.{i}", TensorProto.FLOAT,
                                                     [2, "batch", heads, "past_seq", hd]))
            outs.append(helper.make_tensor_value_info(f"present.{i}", TensorProto.FLOAT,
                                                      [2, "batch", heads, "past_seq+seq", hd]))
            nodes += [
                helper.make_node("Split", [f"past.{i}"], [f"{p}/pk1", f"{p}/pv1"],
                                 name=f"{p}/split_past", axis=0),
                helper.make_node("Squeeze", [f"{p}/pk1", "zero"], [pk], name=f"{p}/sq_k"),
                helper.make_node("Squeeze", [f"{p}/pv1", "zero"], [pv], name=f"{p}/sq_v"),
                helper.make_node("Unsqueeze", [ok, "zero"], [f"{p}/ok1"], name=f"{p}/us_k"),
                helper.make_node("Unsqueeze", [ov, "zero"], [f"{p}/ov1"], name=f"{p}/us_v"),
                helper.make_node("Concat", [f"{p}/ok1", f"{p}/ov1"], [f"present.{i}"],
                                 name=f"{p}/present", axis=0),
            ]
        else:
            for name in (pk, pv):
                ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                         ["batch", heads, "past_seq", hd]))
            for name in (ok, ov):
                outs.append(helper.make_tensor_value_info(
                    name, TensorProto.FLOAT, ["batch", heads, "past_seq+seq", hd]))
        for w in ("q", "k", "v", "o"):
            init(f"{p}.{w}", _w(rng, hidden, hidden))
        init(f"{p}.fc", _w(rng, hidden, 2 * hidden))
        init(f"{p}.proj", _w(rng, 2 * hidden, hidden))
        for w in ("q", "k", "v"):
            nodes += [
                helper.make_node("MatMul", [x, f"{p}.{w}"], [f"{p}/{w}"], name=f"{p}/{w}_proj"),
                helper.make_node("Reshape", [f"{p}/{w}", "split_heads"], [f"{p}/{w}4"],
                                 name=f"{p}/{w}_split"),
                helper.make_node("Transpose", [f"{p}/{w}4"], [f"{p}/{w}h"],
                                 name=f"{p}/{w}_heads", perm=[0, 2, 1, 3]),
            ]
        nodes += [
            helper.make_node("Concat", [pk, f"{p}/kh"], [ok], name=f"{p}/cat_k", axis=2),
            helper.make_node("Concat", [pv, f"{p}/vh"], [ov], name=f"{p}/cat_v", axis=2),
            helper.make_node("Transpose", [ok], [f"{p}/kT"], name=f"{p}/kT", perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", [f"{p}/qh", f"{p}/kT"], [f"{p}/s"], name=f"{p}/scores"),
            helper.make_node("Mul", [f"{p}/s", "scale"], [f"{p}/ss"], name=f"{p}/scale"),
            helper.make_node("Add", [f"{p}/ss", "bias"], [f"{p}/sm"], name=f"{p}/mask"),
            helper.make_node("Softmax", [f"{p}/sm"], [f"{p}/pr"], name=f"{p}/softmax", axis=-1),
            helper.make_node("MatMul", [f"{p}/pr", ov], [f"{p}/ctx"], name=f"{p}/context"),
            helper.make_node("Transpose", [f"{p}/ctx"], [f"{p}/ctxT"], name=f"{p}/ctxT",
                             perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [f"{p}/ctxT", "merge_heads"], [f"{p}/attn"],
                             name=f"{p}/merge"),
            helper.make_node("MatMul", [f"{p}/attn", f"{p}.o"], [f"{p}/o"], name=f"{p}/o_proj"),
            helper.make_node("Add", [x, f"{p}/o"], [f"{p}/r1"], name=f"{p}/residual1"),
            helper.make_node("MatMul", [f"{p}/r1", f"{p}.fc"], [f"{p}/fc"], name=f"{p}/fc"),
            helper.make_node("Tanh", [f"{p}/fc"], [f"{p}/act"], name=f"{p}/act"),
            helper.make_node("MatMul", [f"{p}/act", f"{p}.proj"], [f"{p}/mlp"], name=f"{p}/proj"),
            helper.make_node("Add", [f"{p}/r1", f"{p}/mlp"], [f"{p}/out"],
                             name=f"{p}/residual2"),
        ]
        x = f"{p}/out"
    init("lm_head", _w(rng, hidden, vocab))
    nodes.append(helper.make_node("MatMul", [x, "lm_head"], ["logits"], name="lm_head"))
    graph = helper.make_graph(nodes, "unfused_decoder", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def merged_kv_decoder(shared: bool = False) -> onnx.ModelProto:
    """optimum's merged layout: an If on ``use_cache_branch`` whose ``then_branch`` concatenates
    the KV cache (``past_key``) and whose ``else_branch`` does not; attention q·kᵀ and Softmax
    in each, the present key and the probabilities out. ``shared``: both branches name their
    tensors alike (as optimum's merged decoders do: 372 names defined in both branches of
    T5's) and add a position bias ``Range(0, total)``, whose length (8 with the cache, 5
    without) only folding the branch's own values finds."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(
        (rng.standard_normal((16, 16)) * 0.3).astype(np.float32), n) for n in ("wq", "wk")]
    inits += [onnx.numpy_helper.from_array(np.array([1], np.int64), "i1"),
              onnx.numpy_helper.from_array(np.array([4, 4], np.int64), "heads"),
              onnx.numpy_helper.from_array(np.array(2, np.int64), "i2")]

    def branch(branch_tag, past):
        tag = "dec" if shared else branch_tag

        def nd(op, ins, outs, name, **kw):
            return helper.make_node(op, ins, outs, name=f"/{branch_tag}/{name}", **kw)
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
              nd("MatMul", [f"{tag}_qt", f"{tag}_pt"], [f"{tag}_s"], "attn/MatMul")]
        scores = f"{tag}_s"
        if shared:
            scalar = [(f"{tag}_{v}", helper.make_tensor("v", TensorProto.INT64, [], [v]))
                      for v in (0, 1)]
            n += [nd("Constant", [], [name], f"Constant_{i}", value=t)
                  for i, (name, t) in enumerate(scalar)]
            n += [nd("Shape", [f"{tag}_pres"], [f"{tag}_psh"], "pShape"),
                  nd("Gather", [f"{tag}_psh", "i2"], [f"{tag}_total"], "pGather", axis=0),
                  nd("Range", [f"{tag}_0", f"{tag}_total", f"{tag}_1"], [f"{tag}_pos"], "Range"),
                  nd("Cast", [f"{tag}_pos"], [f"{tag}_posf"], "pCast", to=TensorProto.FLOAT),
                  nd("Add", [scores, f"{tag}_posf"], [f"{tag}_sb"], "bias/Add")]
            scores = f"{tag}_sb"
        n.append(nd("Softmax", [scores], [f"{tag}_p"], "Softmax", axis=-1))
        return helper.make_graph(n, branch_tag, [], [
            helper.make_tensor_value_info(f"{tag}_p", TensorProto.FLOAT, None),
            helper.make_tensor_value_info(f"{tag}_pres", TensorProto.FLOAT, None)])

    total = "past_decoder_sequence_length + decoder_sequence_length"
    nodes = [helper.make_node("If", ["use_cache_branch"], ["probs", "present.0.decoder.key"],
                              name="optimum::if", then_branch=branch("with_past", True),
                              else_branch=branch("no_past", False))]
    f32 = TensorProto.FLOAT
    g = helper.make_graph(nodes, "merged", [
        helper.make_tensor_value_info("x", f32, [1, "decoder_sequence_length", 16]),
        helper.make_tensor_value_info("past_key", f32, [1, 4, "past_decoder_sequence_length", 4]),
        helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("probs", f32, [1, 4, "decoder_sequence_length", total]),
         helper.make_tensor_value_info("present.0.decoder.key", f32, [1, 4, total, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


MERGED_DIMS = {"decoder_sequence_length": 5, "past_decoder_sequence_length": 3}
