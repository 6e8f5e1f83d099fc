"""``tiny_llm``: a small decoder LLM in onnxruntime-genai's model-builder layout, built by code.

The graph mirrors what ``onnxruntime_genai.models.builder`` writes for a Llama-family model
(checked against its output for a random-weight LlamaConfig): ``input_ids`` [batch_size,
sequence_length] int64, ``attention_mask`` [batch_size, total_sequence_length] int64,
``past_key_values.{i}.key/.value`` [batch_size, kv_heads, past_sequence_length, kv_cache_dim]
in, ``logits`` and ``present.{i}.key/.value`` out; an embedding Gather, SimplifiedLayerNorm
and SkipSimplifiedLayerNorm (RMSNorm), one packed QKV MatMul per layer feeding
``com.microsoft.GroupQueryAttention`` (rotary inside: ``do_rotary=1`` with cos/sin caches;
``seqlens_k`` and ``total_sequence_length`` computed from the mask), a SwiGLU MLP and an
``lm_head`` MatMul. ``kv_cache_dim`` is the head size, left symbolic as the builder writes it.

The weights are seeded and shaped so the model behaves like a language model, not noise:
``lm_head`` reads the embedding of token ``t`` as a vote for ``t + 1`` (a "count up" prior)
that attention and the MLP perturb, so the logits are peaked but not saturated and greedy
decoding moves through the vocabulary. ``tiny_llm_int4`` is the same model with every MatMul
weight quantized to 4 bits (block 32, symmetric) by onnxruntime's own
``MatMulNBitsQuantizer``, as a weight-only int4 model is made in practice.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_lab.core._sample_models import _Builder

#: Sizes of ``tiny_llm`` (a dict so tests and docs read the same numbers).
TINY_LLM = {"vocab_size": 256, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
            "num_kv_heads": 2, "head_size": 16, "intermediate_size": 128,
            "context_length": 128}
_OPSET = 21
_EPS = 1e-5
# Strength of the count-up prior in lm_head and of what attention and the MLP write back into
# the residual stream. Tuned so that, on random token sequences, the top-1 probability is ~0.26
# on average, ~89% of greedy picks are "t + 1", and the int4 variant agrees with fp32 on ~95%
# of top-1 tokens (KL ~0.02): peaked like an LM, with int4 drift that next-token metrics see.
_PRIOR = 1.0
_MIX = 1.25


def _rms_weight(b: _Builder, name: str, d: int) -> str:
    return b.init(name, b.rng.uniform(0.9, 1.1, d).astype(np.float32))


def build_tiny_llm() -> onnx.ModelProto:
    """The fp32 ``tiny_llm`` (see the module docstring)."""
    c = TINY_LLM
    v, d, nl = c["vocab_size"], c["hidden_size"], c["num_layers"]
    nh, kvh, hd, ffn, ctx = (c["num_heads"], c["num_kv_heads"], c["head_size"],
                             c["intermediate_size"], c["context_length"])
    b = _Builder(seed=21)
    # Token embeddings of norm ~sqrt(d); lm_head column t+1 is embedding t (scaled), so the
    # residual stream of token t votes for t+1.
    emb = (b.rng.standard_normal((v, d))).astype(np.float32)
    b.init("model.embed_tokens.weight", emb)
    lm_head = np.roll(emb, 1, axis=0).T * (_PRIOR / np.sqrt(d))
    lm_head += b.rng.standard_normal(lm_head.shape) * (0.6 / np.sqrt(d))
    # Mask → seqlens_k (valid tokens - 1, int32) and total_sequence_length (int32), as genai.
    p = "/model/attn_mask_reformat/attn_mask_subgraph"
    b.init("/model/constants/INT64/[1]", np.array([1], dtype=np.int64))
    b.init("/model/constants/INT64/1", np.array(1, dtype=np.int64))
    s = b.node("ReduceSum", ["attention_mask", "/model/constants/INT64/[1]"], f"{p}/ReduceSum",
               [f"{p}/ReduceSum/output_0"], keepdims=0)
    s = b.node("Sub", [s, "/model/constants/INT64/[1]"], f"{p}/Sub", [f"{p}/Sub/output_0"])
    seqlens = b.node("Cast", [s], f"{p}/Sub/Cast", [f"{p}/Sub/Cast/output_0"],
                     to=TensorProto.INT32)
    shp = b.node("Shape", ["attention_mask"], f"{p}/Shape", [f"{p}/Shape/output_0"])
    tot = b.node("Gather", [shp, "/model/constants/INT64/1"], f"{p}/Gather",
                 [f"{p}/Gather/output_0"], axis=0)
    total = b.node("Cast", [tot], f"{p}/Gather/Cast", [f"{p}/Gather/Cast/output_0"],
                   to=TensorProto.INT32)
    # Rotary caches [context, head_size / 2] (non-interleaved halves, base 10000).
    inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(np.arange(ctx, dtype=np.float64), inv)
    b.init("cos_cache", np.cos(ang).astype(np.float32))
    b.init("sin_cache", np.sin(ang).astype(np.float32))
    x = b.node("Gather", ["model.embed_tokens.weight", "input_ids"], "/model/embed_tokens/Gather",
               ["/model/embed_tokens/Gather/output_0"])
    residual = x
    h = b.node("SimplifiedLayerNormalization", [x, _rms_weight(
        b, "model.layers.0.input_layernorm.weight", d)], "/model/layers.0/input_layernorm/LayerNorm",
        ["/model/layers.0/input_layernorm/output_0"], epsilon=_EPS, axis=-1, stash_type=1)
    for i in range(nl):
        L = f"/model/layers.{i}"
        w = f"model.layers.{i}"
        qkv_w = b.weight(f"{w}.attn.qkv_proj.MatMul.weight", d, (nh + 2 * kvh) * hd,
                         scale=d ** -0.5)
        qkv = b.node("MatMul", [h, qkv_w], f"{L}/attn/qkv_proj/MatMul",
                     [f"{L}/attn/qkv_proj/MatMul/output_0"])
        attn = b.node("GroupQueryAttention",
                      [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                       seqlens, total, "cos_cache", "sin_cache"],
                      f"{L}/attn/GroupQueryAttention",
                      [f"{L}/attn/GroupQueryAttention/output_0", f"present.{i}.key",
                       f"present.{i}.value"],
                      domain="com.microsoft", num_heads=nh, kv_num_heads=kvh,
                      scale=float(hd ** -0.5), local_window_size=-1, do_rotary=1,
                      rotary_interleaved=0)
        o_w = b.weight(f"{w}.attn.o_proj.MatMul.weight", nh * hd, d, scale=_MIX * d ** -0.5)
        o = b.node("MatMul", [attn, o_w], f"{L}/attn/o_proj/MatMul",
                   [f"{L}/attn/o_proj/MatMul/output_0"])
        h, _, _, residual = _skip_norm(b, residual, o, f"{L}/post_attention_layernorm",
                                       f"{w}.post_attention_layernorm.weight", d)
        gate = b.node("MatMul", [h, b.weight(f"{w}.mlp.gate_proj.MatMul.weight", d, ffn,
                                             scale=d ** -0.5)],
                      f"{L}/mlp/gate_proj/MatMul", [f"{L}/mlp/gate_proj/MatMul/output_0"])
        up = b.node("MatMul", [h, b.weight(f"{w}.mlp.up_proj.MatMul.weight", d, ffn,
                                           scale=d ** -0.5)],
                    f"{L}/mlp/up_proj/MatMul", [f"{L}/mlp/up_proj/MatMul/output_0"])
        sg = b.node("Sigmoid", [gate], f"{L}/mlp/act_fn/Sigmoid", [f"{L}/mlp/act_fn/Sigmoid/output_0"])
        act = b.node("Mul", [gate, sg], f"{L}/mlp/act_fn/Mul", [f"{L}/mlp/act_fn/Mul/output_0"])
        m = b.node("Mul", [act, up], f"{L}/mlp/Mul", [f"{L}/mlp/Mul/output_0"])
        down = b.node("MatMul", [m, b.weight(f"{w}.mlp.down_proj.MatMul.weight", ffn, d,
                                             scale=_MIX * ffn ** -0.5)],
                      f"{L}/mlp/down_proj/MatMul", [f"{L}/mlp/down_proj/MatMul/output_0"])
        last = i == nl - 1
        scope = f"/model/layers.{nl}/final_norm_layernorm" if last \
            else f"/model/layers.{i + 1}/input_layernorm"
        weight = f"model.layers.{nl}.final_norm_layernorm.weight" if last \
            else f"model.layers.{i + 1}.input_layernorm.weight"
        h, _, _, residual = _skip_norm(b, residual, down, scope, weight, d, keep_sum=not last)
    b.init("lm_head.MatMul.weight", lm_head.astype(np.float32))
    b.node("MatMul", [h, "lm_head.MatMul.weight"], "/lm_head/MatMul", ["logits"])
    cache = ["batch_size", kvh, "past_sequence_length", "kv_cache_dim"]
    present = ["batch_size", kvh, "total_sequence_length", "kv_cache_dim"]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                            ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch_size", "sequence_length", v])]
    for kind in ("key", "value"):
        inputs += [helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT,
                                                 cache) for i in range(nl)]
    for i in range(nl):
        outputs += [helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT,
                                                  present) for kind in ("key", "value")]
    graph = helper.make_graph(b.nodes, "tiny_llm", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="onnx_lab.samples", producer_version="1")
    model.ir_version = 10
    model.doc_string = (
        f"A {nl}-layer decoder LLM (hidden {d}, {nh} heads, {kvh} KV heads, vocab {v}) in "
        "onnxruntime-genai's layout: GroupQueryAttention with rotary, RMSNorms, SwiGLU, "
        "past_key_values.* in, present.* out.")
    return model


def _skip_norm(b: _Builder, residual: str, x: str, scope: str, weight: str, d: int,
               keep_sum: bool = True) -> tuple[str, ...]:
    """SkipSimplifiedLayerNormalization: (normed, '', '', residual + x) as genai writes it."""
    outs = [f"{scope}/output_0"] + (["", "", f"{scope}/output_3"] if keep_sum else [])
    b.nodes.append(helper.make_node(
        "SkipSimplifiedLayerNormalization", [residual, x, _rms_weight(b, weight, d)], outs,
        name=f"{scope}/SkipLayerNorm", domain="com.microsoft", epsilon=_EPS))
    return (outs[0], "", "", outs[3] if keep_sum else "")


def build_tiny_llm_int4() -> onnx.ModelProto:
    """``tiny_llm`` with every MatMul weight in 4 bits (block 32, symmetric), quantized by
    onnxruntime's ``MatMulNBitsQuantizer`` (weight-only: activations stay float32)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (  # heavy: loaded on use
        MatMulNBitsQuantizer,
    )

    quant = MatMulNBitsQuantizer(build_tiny_llm(), bits=4, block_size=32, is_symmetric=True,
                                 accuracy_level=4)
    logger = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = logger.level
    logger.setLevel(logging.WARNING)  # it logs every node it visits at INFO
    try:
        quant.process()
    finally:
        logger.setLevel(level)
    model = quant.model.model
    model.graph.name = "tiny_llm_int4"
    model.producer_name = "onnx_lab.samples"
    model.producer_version = "1"
    model.doc_string = "tiny_llm with its MatMul weights quantized to int4 (MatMulNBits, block 32)."
    return model
