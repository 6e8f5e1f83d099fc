"""Builders of the sample models with onnx.helper; all weights come from a seeded generator."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, *shape: int, scale: float = 0.3) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, inputs: list[str], name: str | None, outputs: list[str] | None = None,
             **attrs) -> str:
        out = outputs or [f"{name or op}_out"]
        self.nodes.append(helper.make_node(op, inputs, out, name=name or "", **attrs))
        return out[0]

    def model(self, graph_name: str, inputs, outputs, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="onnx_lab.samples", producer_version="1")
        model.ir_version = 8
        model.doc_string = doc
        onnx.checker.check_model(model, full_check=True)
        return model


def _conv_bn_relu(b: _Builder, x: str, scope: str, cin: int, cout: int, stride: int = 1,
                  bias: bool = True) -> str:
    w = b.weight(f"{scope}.conv.weight", cout, cin, 3, 3, scale=(2.0 / (cin * 9)) ** 0.5)
    ins = [x, w]
    if bias:
        ins.append(b.weight(f"{scope}.conv.bias", cout, scale=0.1))
    y = b.node("Conv", ins, f"/{scope}/conv/Conv", [f"/{scope}/conv/Conv_output_0"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])
    return _bn_relu(b, y, scope, cout)


def _bn_relu(b: _Builder, y: str, scope: str, c: int) -> str:
    gamma = b.init(f"{scope}.bn.weight", b.rng.uniform(0.5, 1.5, c).astype(np.float32))
    beta = b.init(f"{scope}.bn.bias", (b.rng.standard_normal(c) * 0.1).astype(np.float32))
    mean = b.init(f"{scope}.bn.running_mean", (b.rng.standard_normal(c) * 0.1).astype(np.float32))
    var = b.init(f"{scope}.bn.running_var", b.rng.uniform(0.5, 1.5, c).astype(np.float32))
    y = b.node("BatchNormalization", [y, gamma, beta, mean, var], f"/{scope}/bn/BatchNormalization",
               [f"/{scope}/bn/BatchNormalization_output_0"], epsilon=1e-5)
    return b.node("Relu", [y], f"/{scope}/relu/Relu", [f"/{scope}/relu/Relu_output_0"])


def build_convnet() -> onnx.ModelProto:
    b = _Builder(seed=0)
    x = _conv_bn_relu(b, "input", "stem", 3, 8)
    x = b.node("Identity", [x], "/stem/identity/Identity", ["/stem/identity/Identity_output_0"])
    # A dead branch: computed, never used.
    two = b.init("dead.scale", np.array(2.0, dtype=np.float32))
    d = b.node("Mul", [x, two], "/dead/Mul", ["/dead/Mul_output_0"])
    b.node("Relu", [d], "/dead/Relu", ["/dead/Relu_output_0"])
    x = _conv_bn_relu(b, x, "block1", 8, 16, stride=2, bias=False)
    x = b.node("MaxPool", [x], "/block1/pool/MaxPool", ["/block1/pool/MaxPool_output_0"],
               kernel_shape=[2, 2], strides=[2, 2])
    # Conv without bias followed by an Add of a per-channel bias.
    w = b.weight("block2.conv.weight", 16, 16, 3, 3, scale=(2.0 / 144) ** 0.5)
    y = b.node("Conv", [x, w], "/block2/conv/Conv", ["/block2/conv/Conv_output_0"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    bias = b.init("block2.bias", (b.rng.standard_normal((1, 16, 1, 1)) * 0.1).astype(np.float32))
    y = b.node("Add", [y, bias], "/block2/bias/Add", ["/block2/bias/Add_output_0"])
    x = _bn_relu(b, y, "block2", 16)
    # Two Transposes that cancel.
    x = b.node("Transpose", [x], "/block2/to_nhwc/Transpose", ["/block2/to_nhwc/Transpose_output_0"],
               perm=[0, 2, 3, 1])
    x = b.node("Transpose", [x], "/block2/to_nchw/Transpose", ["/block2/to_nchw/Transpose_output_0"],
               perm=[0, 3, 1, 2])
    x = b.node("GlobalAveragePool", [x], "/head/pool/GlobalAveragePool",
               ["/head/pool/GlobalAveragePool_output_0"])
    x = b.node("Flatten", [x], "/head/flatten/Flatten", ["/head/flatten/Flatten_output_0"], axis=1)
    x = b.node("Dropout", [x], "/head/dropout/Dropout", ["/head/dropout/Dropout_output_0"])
    # The head weight is stored flat and reshaped at run time: foldable.
    flat = b.init("head.fc.weight_flat", (b.rng.standard_normal(160) * 0.25).astype(np.float32))
    shape = b.init("head.fc.weight_shape", np.array([10, 16], dtype=np.int64))
    wfc = b.node("Reshape", [flat, shape], "/head/fc/Reshape", ["/head/fc/Reshape_output_0"])
    fcb = b.weight("head.fc.bias", 10, scale=0.1)
    b.node("Gemm", [x, wfc, fcb], "/head/fc/Gemm", ["logits"], transB=1)
    return b.model(
        "convnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        "A small CNN with fusion opportunities: Conv+BN+Relu, Conv+Add bias, Identity, "
        "dead branch, foldable Reshape, Dropout, cancelling Transposes.",
    )


def _layer_norm(b: _Builder, x: str, scope: str, d: int) -> str:
    p = f"/{scope}"
    mean = b.node("ReduceMean", [x], f"{p}/ReduceMean", [f"{p}/ReduceMean_output_0"], axes=[-1])
    cen = b.node("Sub", [x, mean], f"{p}/Sub", [f"{p}/Sub_output_0"])
    two = b.init(f"{scope}.pow_exp", np.array(2.0, dtype=np.float32))
    sq = b.node("Pow", [cen, two], f"{p}/Pow", [f"{p}/Pow_output_0"])
    var = b.node("ReduceMean", [sq], f"{p}/ReduceMean_1", [f"{p}/ReduceMean_1_output_0"], axes=[-1])
    eps = b.init(f"{scope}.eps", np.array(1e-5, dtype=np.float32))
    ve = b.node("Add", [var, eps], f"{p}/Add", [f"{p}/Add_output_0"])
    sd = b.node("Sqrt", [ve], f"{p}/Sqrt", [f"{p}/Sqrt_output_0"])
    nx = b.node("Div", [cen, sd], f"{p}/Div", [f"{p}/Div_output_0"])
    g = b.init(f"{scope}.weight", b.rng.uniform(0.8, 1.2, d).astype(np.float32))
    be = b.init(f"{scope}.bias", (b.rng.standard_normal(d) * 0.05).astype(np.float32))
    y = b.node("Mul", [nx, g], f"{p}/Mul", [f"{p}/Mul_output_0"])
    return b.node("Add", [y, be], f"{p}/Add_1", [f"{p}/Add_1_output_0"])


def _linear(b: _Builder, x: str, scope: str, din: int, dout: int) -> str:
    p = f"/{scope}"
    w = b.weight(f"{scope}.weight", din, dout, scale=din ** -0.5)
    bias = b.weight(f"{scope}.bias", dout, scale=0.05)
    y = b.node("MatMul", [x, w], f"{p}/MatMul", [f"{p}/MatMul_output_0"])
    return b.node("Add", [y, bias], f"{p}/Add", [f"{p}/Add_output_0"])


def build_transformer_block() -> onnx.ModelProto:
    d, heads, dh, ffn = 32, 4, 8, 64
    b = _Builder(seed=1)
    h = _layer_norm(b, "x", "layer.0/ln", d)
    split = b.init("attn.split_heads", np.array([0, 0, heads, dh], dtype=np.int64))
    merge = b.init("attn.merge_heads", np.array([0, 0, d], dtype=np.int64))
    qkv = {}
    for part in ("query", "key", "value"):
        y = _linear(b, h, f"layer.0/attention/{part}", d, d)
        p = f"/layer.0/attention/{part}"
        y = b.node("Reshape", [y, split], f"{p}/Reshape", [f"{p}/Reshape_output_0"])
        perm = [0, 2, 3, 1] if part == "key" else [0, 2, 1, 3]
        qkv[part] = b.node("Transpose", [y], f"{p}/Transpose", [f"{p}/Transpose_output_0"],
                           perm=perm)
    p = "/layer.0/attention/core"
    s = b.node("MatMul", [qkv["query"], qkv["key"]], f"{p}/MatMul", [f"{p}/MatMul_output_0"])
    scale = b.init("attn.scale", np.array(dh ** 0.5, dtype=np.float32))
    s = b.node("Div", [s, scale], f"{p}/Div", [f"{p}/Div_output_0"])
    a = b.node("Softmax", [s], f"{p}/Softmax", [f"{p}/Softmax_output_0"], axis=-1)
    c = b.node("MatMul", [a, qkv["value"]], f"{p}/MatMul_1", [f"{p}/MatMul_1_output_0"])
    c = b.node("Transpose", [c], f"{p}/Transpose", [f"{p}/Transpose_output_0"], perm=[0, 2, 1, 3])
    c = b.node("Reshape", [c, merge], f"{p}/Reshape", [f"{p}/Reshape_output_0"])
    o = _linear(b, c, "layer.0/attention/output", d, d)
    x1 = b.node("Add", ["x", o], "/layer.0/residual/Add", ["/layer.0/residual/Add_output_0"])
    f = _linear(b, x1, "layer.0/mlp/fc1", d, ffn)
    f = b.node("Relu", [f], "/layer.0/mlp/act/Relu", ["/layer.0/mlp/act/Relu_output_0"])
    f = _linear(b, f, "layer.0/mlp/fc2", ffn, d)
    b.node("Add", [x1, f], "/layer.0/residual/Add_1", ["y"])
    return b.model(
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])],
        "One transformer encoder block with a LayerNorm built from primitive ops.",
    )


def _bert_attention(b: _Builder, h: str, mask: str, scope: str, d: int, heads: int) -> str:
    """BERT self-attention as exporters write it: Q/K/V Linear → Reshape [0, 0, heads, dh] →
    Transpose, scores / sqrt(dh) + mask → Softmax → · V → Transpose → Reshape → output Linear."""
    dh = d // heads
    split = b.init(f"{scope}.split_heads", np.array([0, 0, heads, dh], dtype=np.int64))
    merge = b.init(f"{scope}.merge_heads", np.array([0, 0, d], dtype=np.int64))
    qkv = {}
    for part in ("query", "key", "value"):
        y = _linear(b, h, f"{scope}/{part}", d, d)
        p = f"/{scope}/{part}"
        y = b.node("Reshape", [y, split], f"{p}/Reshape", [f"{p}/Reshape_output_0"])
        perm = [0, 2, 3, 1] if part == "key" else [0, 2, 1, 3]
        qkv[part] = b.node("Transpose", [y], f"{p}/Transpose", [f"{p}/Transpose_output_0"],
                           perm=perm)
    p = f"/{scope}/core"
    s = b.node("MatMul", [qkv["query"], qkv["key"]], f"{p}/MatMul", [f"{p}/MatMul_output_0"])
    scale = b.init(f"{scope}.scale", np.array(dh ** 0.5, dtype=np.float32))
    s = b.node("Div", [s, scale], f"{p}/Div", [f"{p}/Div_output_0"])
    s = b.node("Add", [s, mask], f"{p}/Add", [f"{p}/Add_output_0"])
    a = b.node("Softmax", [s], f"{p}/Softmax", [f"{p}/Softmax_output_0"], axis=-1)
    c = b.node("MatMul", [a, qkv["value"]], f"{p}/MatMul_1", [f"{p}/MatMul_1_output_0"])
    c = b.node("Transpose", [c], f"{p}/Transpose", [f"{p}/Transpose_output_0"], perm=[0, 2, 1, 3])
    c = b.node("Reshape", [c, merge], f"{p}/Reshape", [f"{p}/Reshape_output_0"])
    return _linear(b, c, f"{scope}/output", d, d)


def _erf_gelu(b: _Builder, x: str, scope: str) -> str:
    """Exact Gelu from primitives: 0.5 · x · (1 + erf(x / sqrt(2)))."""
    p = f"/{scope}"
    sqrt2 = b.init(f"{scope}.sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    one = b.init(f"{scope}.one", np.array(1.0, dtype=np.float32))
    half = b.init(f"{scope}.half", np.array(0.5, dtype=np.float32))
    y = b.node("Div", [x, sqrt2], f"{p}/Div", [f"{p}/Div_output_0"])
    y = b.node("Erf", [y], f"{p}/Erf", [f"{p}/Erf_output_0"])
    y = b.node("Add", [y, one], f"{p}/Add", [f"{p}/Add_output_0"])
    y = b.node("Mul", [x, y], f"{p}/Mul", [f"{p}/Mul_output_0"])
    return b.node("Mul", [y, half], f"{p}/Mul_1", [f"{p}/Mul_1_output_0"])


def build_bert_block(extra_mask_cast: bool = False) -> onnx.ModelProto:
    """A BERT encoder layer as the TorchScript exporter writes it, small (hidden 32, 4 heads).

    ``x`` [batch, seq, 32] → LayerNorm (primitive ops, like an embedding LayerNorm) → self-
    attention with the additive mask ``(1 - mask[:, None, None, :]) * -10000`` → output Linear
    + residual → LayerNorm → Linear → exact Gelu (Erf) → Linear + residual → LayerNorm → ``y``.
    onnxruntime's transformer optimizer (model_type="bert") fuses it into LayerNormalization,
    Attention, BiasGelu and SkipLayerNormalization. ``extra_mask_cast=True`` puts a second
    Cast in the mask path, between the two Unsqueezes (a near-miss of the Attention fusion,
    made on purpose).
    """
    d, heads, ffn = 32, 4, 64
    b = _Builder(seed=2)
    h = _layer_norm(b, "x", "embeddings/ln", d)
    ax1 = b.init("mask.axes1", np.array([1], dtype=np.int64))
    ax2 = b.init("mask.axes2", np.array([2], dtype=np.int64))
    m = b.node("Unsqueeze", ["attention_mask", ax1], "/mask/Unsqueeze", ["/mask/Unsqueeze_output_0"])
    if extra_mask_cast:  # a Cast between the two Unsqueezes: the fusion's mask path breaks
        m = b.node("Cast", [m], "/mask/Cast_1", ["/mask/Cast_1_output_0"], to=TensorProto.FLOAT)
    m = b.node("Unsqueeze", [m, ax2], "/mask/Unsqueeze_1", ["/mask/Unsqueeze_1_output_0"])
    m = b.node("Cast", [m], "/mask/Cast", ["/mask/Cast_output_0"], to=TensorProto.FLOAT)
    one = b.init("mask.one", np.array(1.0, dtype=np.float32))
    big = b.init("mask.neg", np.array(-10000.0, dtype=np.float32))
    m = b.node("Sub", [one, m], "/mask/Sub", ["/mask/Sub_output_0"])
    m = b.node("Mul", [m, big], "/mask/Mul", ["/mask/Mul_output_0"])
    o = _bert_attention(b, h, m, "layer.0/attention", d, heads)
    x1 = b.node("Add", [o, h], "/layer.0/attention/residual/Add",
                ["/layer.0/attention/residual/Add_output_0"])
    x1 = _layer_norm(b, x1, "layer.0/attention/ln", d)
    f = _linear(b, x1, "layer.0/intermediate", d, ffn)
    f = _erf_gelu(b, f, "layer.0/intermediate/gelu")
    f = _linear(b, f, "layer.0/output", ffn, d)
    x2 = b.node("Add", [f, x1], "/layer.0/output/residual/Add",
                ["/layer.0/output/residual/Add_output_0"])
    _ln_out = _layer_norm(b, x2, "layer.0/output/ln", d)
    b.node("Identity", [_ln_out], "/output/Identity", ["y"])
    return b.model(
        "bert_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])],
        "One BERT encoder layer (attention with mask, LayerNorms and Erf Gelu from primitive "
        "ops) that onnxruntime's transformer optimizer fuses.",
    )


def build_control_flow() -> onnx.ModelProto:
    b = _Builder(seed=2)
    fl = TensorProto.FLOAT
    b.init("zero", np.array(0.0, dtype=np.float32))
    b.init("two", np.array(2.0, dtype=np.float32))
    b.init("one", np.array(1.0, dtype=np.float32))
    b.init("trip", np.array(3, dtype=np.int64))
    b.init("keep_going", np.array(True))
    s = b.node("ReduceSum", ["x"], None, ["sum_x"], keepdims=0)
    cond = b.node("Greater", [s, "zero"], None, ["is_positive"])
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["then_out"])],
                               "then_branch", [], [helper.make_tensor_value_info("then_out", fl, [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["neg_x"]),
         helper.make_node("Add", ["neg_x", "one"], ["else_out"])],
        "else_branch", [], [helper.make_tensor_value_info("else_out", fl, [2, 3])])
    b.nodes.append(helper.make_node("If", [cond], ["branch_out"], then_branch=then_g,
                                    else_branch=else_g))
    # Loop: acc = acc + (x * 2 if i is even-sized else -x); a nested If inside the body.
    inner_then = helper.make_graph([helper.make_node("Add", ["acc_in", "branch_out"], ["it_out"])],
                                   "inner_then", [], [helper.make_tensor_value_info("it_out", fl, [2, 3])])
    inner_else = helper.make_graph([helper.make_node("Sub", ["acc_in", "x"], ["ie_out"])],
                                   "inner_else", [], [helper.make_tensor_value_info("ie_out", fl, [2, 3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("If", ["cond_in"], ["acc_out"], name="inner_if",
                          then_branch=inner_then, else_branch=inner_else)],
        "loop_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", fl, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", fl, [2, 3])],
    )
    b.nodes.append(helper.make_node("Loop", ["trip", "keep_going", "x"], ["loop_out"],
                                    body=body))
    b.node("Add", ["loop_out", "branch_out"], None, ["y"])
    return b.model(
        "control_flow",
        [helper.make_tensor_value_info("x", fl, [2, 3])],
        [helper.make_tensor_value_info("y", fl, [2, 3])],
        "An If with two bodies and a Loop whose body holds another If.",
    )
