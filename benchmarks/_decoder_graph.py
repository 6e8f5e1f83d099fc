"""A Llama-shaped decoder graph as a TorchScript export writes it, built with ``onnx.helper``.

Every layer is what ``torch.onnx.export`` of a Llama block leaves unfused: RMSNorm spelt out
(Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul), the q/k/v projections, the shape arithmetic
of every view (Shape, Gather, Unsqueeze, Concat, Reshape with their Constant nodes), rotary
embeddings (Slice, Neg, Concat, Mul, Add), the KV cache's Concat, grouped-query ``repeat_kv``
(Unsqueeze, Expand, Reshape), the scaled, masked Softmax attention and the SwiGLU MLP, under
names such as ``/model/layers.3/self_attn/q_proj/MatMul``. About 176 nodes a layer: 32
layers make ~5,600 nodes (a Llama-2-7B export's count), 91 layers ~16,000. Hidden sizes are
tiny, so the file is small; the graph's structure is what the canvas benchmarks draw.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def llama_like(layers: int = 32, *, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
               ffn: int = 64, vocab: int = 128) -> onnx.ModelProto:
    """A decoder of ``layers`` Llama-style layers (~176 nodes each) with a KV cache."""
    rng = np.random.default_rng(0)
    hd = hidden // heads
    rep = heads // kv_heads
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    counter = [0]

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.02).astype(np.float32), name))
        return name

    def node(op: str, name: str, inputs: list[str], n_out: int = 1, **attrs) -> str:
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0]

    def const(scope: str, value, dtype=np.int64) -> str:
        counter[0] += 1
        name = f"{scope}/Constant_{counter[0]}"
        t = numpy_helper.from_array(np.asarray(value, dtype=dtype), f"{name}_value")
        return node("Constant", name, [], value=t)

    def dim(x: str, scope: str, axis: int) -> str:
        """Shape -> Gather(axis) -> Unsqueeze: one dim of x as a 1-D tensor."""
        s = node("Shape", f"{scope}/Shape_{counter[0]}", [x])
        g = node("Gather", f"{scope}/Gather_{counter[0]}", [s, const(scope, axis)], axis=0)
        return node("Unsqueeze", f"{scope}/Unsqueeze_{counter[0]}", [g, const(scope, [0])])

    def view(x: str, scope: str, tail: list[int]) -> str:
        """x.view(batch, seq, *tail) with the shape computed the way TorchScript exports do."""
        b, s = dim(x, scope, 0), dim(x, scope, 1)
        shape = node("Concat", f"{scope}/Concat_{counter[0]}",
                     [b, s, const(scope, tail)], axis=0)
        return node("Reshape", f"{scope}/Reshape_{counter[0]}", [x, shape])

    def rms(x: str, scope: str) -> str:
        x = node("Cast", f"{scope}/Cast", [x], to=TensorProto.FLOAT)
        p = node("Pow", f"{scope}/Pow", [x, const(scope, 2.0, np.float32)])
        m = node("ReduceMean", f"{scope}/ReduceMean", [p], axes=[-1], keepdims=1)
        a = node("Add", f"{scope}/Add", [m, const(scope, 1e-6, np.float32)])
        s = node("Sqrt", f"{scope}/Sqrt", [a])
        r = node("Reciprocal", f"{scope}/Reciprocal", [s])
        n = node("Mul", f"{scope}/Mul", [x, r])
        n = node("Cast", f"{scope}/Cast_1", [n], to=TensorProto.FLOAT)
        return node("Mul", f"{scope}/Mul_1", [n, w(f"{scope.strip('/')}.weight", hidden)])

    def rotate(x: str, cos: str, sin: str, scope: str) -> str:
        half = hd // 2
        x1 = node("Slice", f"{scope}/Slice", [x, const(scope, [0]), const(scope, [half]),
                                               const(scope, [-1])])
        x2 = node("Slice", f"{scope}/Slice_1", [x, const(scope, [half]), const(scope, [hd]),
                                                 const(scope, [-1])])
        n = node("Neg", f"{scope}/Neg", [x2])
        r = node("Concat", f"{scope}/Concat", [n, x1], axis=-1)
        a = node("Mul", f"{scope}/Mul", [x, cos])
        b = node("Mul", f"{scope}/Mul_1", [r, sin])
        return node("Add", f"{scope}/Add", [a, b])

    def repeat_kv(x: str, scope: str) -> str:
        """[b, kv, s, d] -> [b, kv * rep, s, d] (Unsqueeze, Expand, Reshape)."""
        u = node("Unsqueeze", f"{scope}/Unsqueeze", [x, const(scope, [2])])
        b, s = dim(x, scope, 0), dim(x, scope, 2)
        shape = node("Concat", f"{scope}/Concat", [b, const(scope, [kv_heads, rep]), s,
                                                   const(scope, [hd])], axis=0)
        e = node("Expand", f"{scope}/Expand", [u, shape])
        shape2 = node("Concat", f"{scope}/Concat_1", [b, const(scope, [heads]), s,
                                                      const(scope, [hd])], axis=0)
        return node("Reshape", f"{scope}/Reshape", [e, shape2])

    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                         ["batch", "past_seq+seq"]),
           helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]
    x = node("Gather", "/model/embed_tokens/Gather", [w("model.embed_tokens.weight", vocab,
                                                        hidden), "input_ids"])
    # rotary tables and the causal mask, once (as the export hoists them)
    sc = "/model/rotary_emb"
    inv = w("model.rotary_emb.inv_freq", hd // 2)
    pf = node("Cast", f"{sc}/Cast", ["position_ids"], to=TensorProto.FLOAT)
    pu = node("Unsqueeze", f"{sc}/Unsqueeze", [pf, const(sc, [2])])
    fr = node("Mul", f"{sc}/Mul", [pu, inv])
    emb = node("Concat", f"{sc}/Concat", [fr, fr], axis=-1)
    cos = node("Unsqueeze", f"{sc}/Unsqueeze_1", [node("Cos", f"{sc}/Cos", [emb]),
                                                   const(sc, [1])])
    sin = node("Unsqueeze", f"{sc}/Unsqueeze_2", [node("Sin", f"{sc}/Sin", [emb]),
                                                   const(sc, [1])])
    mc = "/model/mask"
    mf = node("Cast", f"{mc}/Cast", ["attention_mask"], to=TensorProto.FLOAT)
    m1 = node("Sub", f"{mc}/Sub", [const(mc, 1.0, np.float32), mf])
    m2 = node("Mul", f"{mc}/Mul", [m1, const(mc, -1e9, np.float32)])
    mask = node("Unsqueeze", f"{mc}/Unsqueeze", [m2, const(mc, [1, 2])])
    for i in range(layers):
        p = f"/model/layers.{i}"
        ins += [helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", TensorProto.FLOAT,
                                              ["batch", kv_heads, "past_seq", hd])
                for kv in ("key", "value")]
        outs += [helper.make_tensor_value_info(f"present.{i}.{kv}", TensorProto.FLOAT,
                                               ["batch", kv_heads, "past_seq+seq", hd])
                 for kv in ("key", "value")]
        h = rms(x, f"{p}/input_layernorm")
        a = f"{p}/self_attn"
        q, k, v = (node("MatMul", f"{a}/{n}_proj/MatMul",
                        [h, w(f"model.layers.{i}.self_attn.{n}_proj.weight", hidden,
                              (heads if n == "q" else kv_heads) * hd)])
                   for n in ("q", "k", "v"))
        q = node("Transpose", f"{a}/Transpose", [view(q, a, [heads, hd])], perm=[0, 2, 1, 3])
        k = node("Transpose", f"{a}/Transpose_1", [view(k, a, [kv_heads, hd])],
                 perm=[0, 2, 1, 3])
        v = node("Transpose", f"{a}/Transpose_2", [view(v, a, [kv_heads, hd])],
                 perm=[0, 2, 1, 3])
        q = rotate(q, cos, sin, f"{a}/rotary_q")
        k = rotate(k, cos, sin, f"{a}/rotary_k")
        k = node("Concat", f"{a}/Concat_k", [f"past_key_values.{i}.key", k], axis=2)
        v = node("Concat", f"{a}/Concat_v", [f"past_key_values.{i}.value", v], axis=2)
        nodes.append(helper.make_node("Identity", [k], [f"present.{i}.key"],
                                      name=f"{a}/present_key"))
        nodes.append(helper.make_node("Identity", [v], [f"present.{i}.value"],
                                      name=f"{a}/present_value"))
        k = repeat_kv(k, f"{a}/repeat_k")
        v = repeat_kv(v, f"{a}/repeat_v")
        kt = node("Transpose", f"{a}/Transpose_3", [k], perm=[0, 1, 3, 2])
        s = node("MatMul", f"{a}/MatMul", [q, kt])
        s = node("Div", f"{a}/Div", [s, const(a, float(np.sqrt(hd)), np.float32)])
        cut = node("Slice", f"{a}/Slice", [mask, const(a, [0]), dim(k, a, 2), const(a, [3])])
        s = node("Add", f"{a}/Add", [s, cut])
        s = node("Softmax", f"{a}/Softmax", [s], axis=-1)
        o = node("MatMul", f"{a}/MatMul_1", [s, v])
        o = node("Transpose", f"{a}/Transpose_4", [o], perm=[0, 2, 1, 3])
        o = view(o, a, [hidden])
        o = node("MatMul", f"{a}/o_proj/MatMul",
                 [o, w(f"model.layers.{i}.self_attn.o_proj.weight", hidden, hidden)])
        x = node("Add", f"{p}/Add", [x, o])
        h = rms(x, f"{p}/post_attention_layernorm")
        m = f"{p}/mlp"
        g = node("MatMul", f"{m}/gate_proj/MatMul",
                 [h, w(f"model.layers.{i}.mlp.gate_proj.weight", hidden, ffn)])
        g = node("Mul", f"{m}/act_fn/Mul", [g, node("Sigmoid", f"{m}/act_fn/Sigmoid", [g])])
        u = node("MatMul", f"{m}/up_proj/MatMul",
                 [h, w(f"model.layers.{i}.mlp.up_proj.weight", hidden, ffn)])
        d = node("MatMul", f"{m}/down_proj/MatMul",
                 [node("Mul", f"{m}/Mul", [g, u]),
                  w(f"model.layers.{i}.mlp.down_proj.weight", ffn, hidden)])
        x = node("Add", f"{p}/Add_1", [x, d])
    x = rms(x, "/model/norm")
    nodes.append(helper.make_node("MatMul", [x, w("lm_head.weight", hidden, vocab)], ["logits"],
                                  name="/lm_head/MatMul"))
    graph = helper.make_graph(nodes, "llama_like", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="pytorch", producer_version="2.5.0")
    model.ir_version = 8
    return model
