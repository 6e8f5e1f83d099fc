"""Small decoder LLMs in the onnxruntime-genai layout, built with onnx.helper for the LLM tests.

``decoder()`` builds a Llama-style decoder: Gather embedding, SimplifiedLayerNormalization,
q/k/v MatMuls into GroupQueryAttention (rotary inside, ``past_key_values.{i}.key/value`` in,
``present.{i}.key/value`` out, ``seqlens_k``/``total_sequence_length`` from the attention mask),
SkipSimplifiedLayerNormalization, a SiLU-gated MLP and an ``lm_head`` MatMul to ``logits``.
Weights are seeded. ``plant_outlier`` makes the function-preserving change that ruins 4-bit
blocks: one hidden channel's norm weight divided by ``factor`` and that row of the MLP's gate
and up projections multiplied by it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def decoder(*, layers: int = 4, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
            inter: int = 128, vocab: int = 256, max_len: int = 128, seed: int = 0,
            outlier: tuple[int, int] | None = None, factor: float = 64.0,
            branch: float = 0.3) -> onnx.ModelProto:
    """A genai-layout decoder; ``outlier=(layer, channel)`` plants an outlier row.

    ``branch`` scales the attention and MLP outputs: trained decoders add small updates to a
    residual stream that dominates them, which keeps int4's noise from compounding.
    """
    rng = np.random.default_rng(seed)
    head = hidden // heads
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def lin(name: str, k: int, n: int) -> np.ndarray:
        return rng.standard_normal((k, n)).astype(np.float32) / np.sqrt(k)

    def node(op, ins, outs, name, domain="", **kw):
        nodes.append(helper.make_node(op, ins, outs, name=name, domain=domain, **kw))
        return outs[0]

    embed = rng.standard_normal((vocab, hidden)).astype(np.float32)
    x = node("Gather", [w("model.embed_tokens.weight", embed), "input_ids"],
             ["/model/embed_tokens/Gather/output_0"], "/model/embed_tokens/Gather")
    # seqlens_k = sum(mask) - 1 and total_sequence_length, as the genai builder computes them.
    node("ReduceSum", ["attention_mask", w_i64(inits, "/model/one_axis", [1])],
         ["/model/attn_mask_reformat/ReduceSum/output_0"], "/model/attn_mask_reformat/ReduceSum",
         keepdims=0)
    node("Sub", ["/model/attn_mask_reformat/ReduceSum/output_0",
                 w_i64(inits, "/model/one", 1)], ["/model/attn_mask_reformat/Sub/output_0"],
         "/model/attn_mask_reformat/Sub")
    node("Cast", ["/model/attn_mask_reformat/Sub/output_0"], ["seqlens_k"],
         "/model/attn_mask_reformat/Cast", to=TensorProto.INT32)
    node("Shape", ["attention_mask"], ["/model/attn_mask_reformat/Shape/output_0"],
         "/model/attn_mask_reformat/Shape", start=1, end=2)
    node("Cast", ["/model/attn_mask_reformat/Shape/output_0"], ["total_seq_1d"],
         "/model/attn_mask_reformat/Cast_1", to=TensorProto.INT32)
    node("Squeeze", ["total_seq_1d"], ["total_sequence_length"],
         "/model/attn_mask_reformat/Squeeze")
    pos = np.arange(max_len, dtype=np.float32)[:, None]
    inv = 1.0 / (10000 ** (np.arange(0, head, 2, dtype=np.float32) / head))
    w("cos_cache", np.cos(pos * inv))
    w("sin_cache", np.sin(pos * inv))

    norm_in = node("SimplifiedLayerNormalization",
                   [x, w("model.layers.0.input_layernorm.weight", np.ones(hidden))],
                   ["/model/layers.0/input_layernorm/output_0"],
                   "/model/layers.0/input_layernorm/LayerNorm", axis=-1, epsilon=1e-6)
    residual = x
    for i in range(layers):
        p = f"/model/layers.{i}"
        proj = {}
        for t, n in (("q", hidden), ("k", kv_heads * head), ("v", kv_heads * head)):
            proj[t] = node("MatMul", [norm_in, w(f"model.layers.{i}.attn.{t}_proj.weight",
                                                 lin(t, hidden, n))],
                           [f"{p}/attn/{t}_proj/MatMul/output_0"], f"{p}/attn/{t}_proj/MatMul")
        attn = node("GroupQueryAttention",
                    [proj["q"], proj["k"], proj["v"], f"past_key_values.{i}.key",
                     f"past_key_values.{i}.value", "seqlens_k", "total_sequence_length",
                     "cos_cache", "sin_cache"],
                    [f"{p}/attn/GroupQueryAttention/output_0", f"present.{i}.key",
                     f"present.{i}.value"], f"{p}/attn/GroupQueryAttention",
                    domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads,
                    do_rotary=1)
        o = node("MatMul", [attn, w(f"model.layers.{i}.attn.o_proj.weight",
                                    branch * lin("o", hidden, hidden))],
                 [f"{p}/attn/o_proj/MatMul/output_0"], f"{p}/attn/o_proj/MatMul")
        gamma = np.ones(hidden, np.float32)
        gate_w, up_w = lin("g", hidden, inter), lin("u", hidden, inter)
        if outlier is not None and outlier[0] == i:
            c = outlier[1]
            gamma[c] /= factor
            gate_w[c] *= factor
            up_w[c] *= factor
        node("SkipSimplifiedLayerNormalization",
             [residual, o, w(f"model.layers.{i}.post_attention_layernorm.weight", gamma)],
             [f"{p}/post_attention_layernorm/output_0", "", "",
              f"{p}/post_attention_layernorm/output_3"],
             f"{p}/post_attention_layernorm/SkipLayerNorm", domain="com.microsoft",
             epsilon=1e-6)
        h = f"{p}/post_attention_layernorm/output_0"
        residual = f"{p}/post_attention_layernorm/output_3"
        gate = node("MatMul", [h, w(f"model.layers.{i}.mlp.gate_proj.weight", gate_w)],
                    [f"{p}/mlp/gate_proj/MatMul/output_0"], f"{p}/mlp/gate_proj/MatMul")
        up = node("MatMul", [h, w(f"model.layers.{i}.mlp.up_proj.weight", up_w)],
                  [f"{p}/mlp/up_proj/MatMul/output_0"], f"{p}/mlp/up_proj/MatMul")
        sig = node("Sigmoid", [gate], [f"{p}/mlp/act_fn/Sigmoid/output_0"],
                   f"{p}/mlp/act_fn/Sigmoid")
        act = node("Mul", [gate, sig], [f"{p}/mlp/act_fn/Mul/output_0"], f"{p}/mlp/act_fn/Mul")
        prod = node("Mul", [act, up], [f"{p}/mlp/Mul/output_0"], f"{p}/mlp/Mul")
        down = node("MatMul", [prod, w(f"model.layers.{i}.mlp.down_proj.weight",
                                       branch * lin("d", inter, hidden))],
                    [f"{p}/mlp/down_proj/MatMul/output_0"], f"{p}/mlp/down_proj/MatMul")
        nxt = f"/model/layers.{i + 1}" if i + 1 < layers else "/model/norm"
        name = f"model.layers.{i + 1}.input_layernorm.weight" if i + 1 < layers else \
            "model.norm.weight"
        node("SkipSimplifiedLayerNormalization",
             [residual, down, w(name, np.ones(hidden))],
             [f"{nxt}/input_layernorm/output_0", "", "", f"{nxt}/input_layernorm/output_3"],
             f"{nxt}/input_layernorm/SkipLayerNorm", domain="com.microsoft", epsilon=1e-6)
        norm_in = f"{nxt}/input_layernorm/output_0"
        residual = f"{nxt}/input_layernorm/output_3"
    # A peaked next-token distribution, as trained models have: a larger lm_head scale.
    node("MatMul", [norm_in, w("lm_head.weight", 4 * lin("lm", hidden, vocab))], ["logits"],
         "/lm_head/MatMul")

    kv = [kv_heads, "past_sequence_length", head]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                            ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["batch_size", "sequence_length", vocab])]
    for i in range(layers):
        for t in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{t}", TensorProto.FLOAT, ["batch_size", *kv]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{t}", TensorProto.FLOAT,
                ["batch_size", kv_heads, "total_sequence_length", head]))
    graph = helper.make_graph(nodes, "tiny_decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="onnx_lab tests")
    model.ir_version = 10
    return model


def w_i64(inits: list, name: str, value) -> str:
    inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
    return name


def int4(model: onnx.ModelProto, *, block_size: int = 32, exclude=(),
         accuracy_level: int | None = None) -> onnx.ModelProto:
    """``model`` with its MatMuls quantized to 4 bits by onnxruntime's MatMulNBits quantizer."""
    from onnx_lab.numerics.weight_only import quantize_weight_only

    return quantize_weight_only(model, block_size=block_size, exclude=exclude,
                                accuracy_level=accuracy_level)
