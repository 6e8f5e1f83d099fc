"""Static cost model: FLOPs, MACs, parameters and bytes per node, peak activation memory, roofline.

Counts come from the inferred shapes (``LabModel.types``) and each op's attributes.

- ``macs``: multiply-accumulates of the contraction ops only — Conv/ConvInteger/QLinearConv
  (``out_elems * Cin/group * prod(kernel)``, the bias not included), ConvTranspose
  (``in_elems * Cout/group * prod(kernel)``), Gemm and MatMul (``M * N * K``, batched and
  broadcast), Einsum (the index product), attention (QK^T and PV, plus packed projections) and
  RNN/LSTM/GRU (every time step). Every other op has 0 MACs: bias adds, activations,
  normalizations (BatchNormalization included), pools, LRN, Softmax, reductions. This is
  onnxsim's definition (``ModelInfo.macs``: equal on ResNet-50), not onnx-tool's.
- ``flops``: every op's arithmetic: ``2 * MACs`` plus the bias adds, and per element the
  factors of ``_ELEMENTWISE`` (1 for add/compare/relu..., Sigmoid/Tanh 4, Gelu 8),
  ``_NORM`` (LayerNorm 8...), ``_SOFTMAX`` (5), ``_REDUCE`` (per input element), pooling
  windows (one per window element of every output), LRN ``2*size+3``, Resize (linear
  ``2*2^k-1``, cubic ``2*4^k-1`` for k resized axes, nearest 0). Data-movement ops (Reshape,
  Transpose, Gather, Concat, Cast...) cost 0 FLOPs.
- ai.onnx.ml ops (scikit-learn, LightGBM, XGBoost exports) have rules of their own: tree
  ensembles count comparisons per tree × depth; linear models and SVMs their matmul; encoders
  and scalers are element-wise; ZipMap and the map ops move data (said in ``note``).
- ``macs_onnx_tool``: onnx-tool 1.0.1's "MACs", for comparing with it: it counts the
  arithmetic of every op as MACs, each operation weighed (add, multiply, compare 1; divide 4;
  sqrt 24; exp 32; log 43), and adds Conv/Gemm bias adds (see ``_onnx_tool_macs``). On the
  onnx package's light CNNs its totals are 0.2% (VGG-19) to 88% (ShuffleNet) above ``macs``,
  while the Conv/Gemm counts agree within 0.74%.

An op without a formula, or whose shapes are unknown, is reported as unknown (NaN and
``known`` False), never as zero.

Why our own: onnxsim's ModelInfo counts only the contraction ops and gives no per-node table;
onnx-tool counts unknown ops as zero and miscounts LSTM/GRU (it ignores the sequence length).

Example:
    >>> c = onnx_lab.open("sample:convnet").cost()
    >>> c.total["macs"], c.nodes.sort_values("flops", ascending=False).head()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.derived import with_derived
from onnx_lab.core.limits import liveness
from onnx_lab.core.llm import decoder_io, max_context, require_decoder_io
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import TensorInfo, resolve_dim
from onnx_lab.core.source import resolve
from onnx_lab.core.source_map import group_by_module
from onnx_lab.core.units import itemsize
from onnx_lab.core.values import constant_tensor, is_constant
from onnx_lab.errors import CacheError, DimError, InputError
from onnx_lab.runtime.feeds import resolve_input_shapes

__all__ = ["cost", "Cost", "Roofline", "NODE_COLUMNS", "itemsize", "kv_cache_bytes",
           "generation_cost", "GenerationCost", "PHASE_COLUMNS"]

NODE_COLUMNS = ["node_id", "graph", "op_type", "domain", "calls", "flops", "macs", "params",
                "param_bytes", "input_bytes", "output_bytes", "intensity", "known", "note",
                "macs_onnx_tool"]

Shape = tuple[int, ...]

# Ops that only move, view or convert data: 0 FLOPs, known.
_MOVE_OPS = frozenset("""Reshape Transpose Squeeze Unsqueeze Flatten Identity Concat Split Slice
Gather GatherElements GatherND Scatter ScatterElements ScatterND Shape Size Cast CastLike Pad
Expand Tile Constant ConstantOfShape Range Dropout DepthToSpace SpaceToDepth Where OneHot
EyeLike NonZero Compress ReverseSequence Trilu Optional OptionalGetElement OptionalHasElement
SequenceAt SequenceConstruct SequenceEmpty SequenceInsert SequenceLength SplitToSequence
ConcatFromSequence Unique TopK MaxUnpool ArgMax ArgMin BitShift Col2Im CenterCropPad Mod StringConcat
""".split())
# Control flow: the body nodes are rows of their own, with the times they run (see _calls).
_CONTROL_OPS = frozenset({"If", "Loop", "Scan"})
# FLOPs per output element of element-wise ops (one per arithmetic op; transcendental and
# composite functions by a rough operation count).
_ELEMENTWISE: dict[str, float] = {
    **dict.fromkeys("""Add Sub Mul Div Neg Abs Relu LeakyRelu PRelu Max Min Sum Mean Floor
    Ceil Round Sign Reciprocal Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor
    Clip ThresholdedRelu Sqrt BitwiseAnd BitwiseOr BitwiseXor BitwiseNot IsNaN IsInf Shrink
    QuantizeLinear DequantizeLinear DynamicQuantizeLinear""".split(), 1.0),
    **dict.fromkeys("Exp Log Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Erf Pow "
                    "Softplus Softsign".split(), 1.0),
    "HardSigmoid": 2.0, "HardSwish": 3.0, "Sigmoid": 4.0, "Tanh": 4.0, "Elu": 3.0, "Selu": 3.0,
    "Celu": 3.0, "Mish": 6.0, "Gelu": 8.0, "FastGelu": 8.0, "BiasGelu": 9.0, "QuickGelu": 5.0,
    "Swish": 5.0,
}
_REDUCE = {"ReduceSum": 1.0, "ReduceMean": 1.0, "ReduceMax": 1.0, "ReduceMin": 1.0,
           "ReduceProd": 1.0, "ReduceL1": 2.0, "ReduceL2": 2.0, "ReduceSumSquare": 2.0,
           "ReduceLogSum": 1.0, "ReduceLogSumExp": 3.0}
# FLOPs per element of normalizations: mean, variance, normalize, scale, shift.
_NORM = {"LayerNormalization": 8.0, "SimplifiedLayerNormalization": 5.0,
         "SkipLayerNormalization": 9.0, "SkipSimplifiedLayerNormalization": 6.0,
         "InstanceNormalization": 8.0, "GroupNormalization": 8.0, "RMSNormalization": 5.0,
         "LpNormalization": 3.0, "MeanVarianceNormalization": 6.0,
         "BatchNormalization": 2.0}  # inference: folded into scale and shift
_SOFTMAX = {"Softmax": 5.0, "LogSoftmax": 5.0, "Hardmax": 1.0}


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


class _Ctx:
    """What a counter sees of one node: concrete shapes (or None), attributes, param flags."""

    def __init__(self, node, types: dict[str, TensorInfo]) -> None:
        self.node = node
        self.ins: list[Shape | None] = [_concrete(types, v) for v in node.inputs]
        self.outs: list[Shape | None] = [_concrete(types, v) for v in node.outputs]

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.node.attributes.get(name)
        return default if a is None else a.value

    def need(self, *shapes: Shape | None) -> bool:
        return all(s is not None for s in shapes)


def _concrete(types: dict[str, TensorInfo], v) -> Shape | None:
    if v is None or not v.name:
        return None
    info = types.get(v.name)
    if info is None or info.shape is None or any(not isinstance(d, int) or d < 0
                                                 for d in info.shape):
        if v.const_value is not None:
            return tuple(int(d) for d in v.const_value.shape)
        return None
    return tuple(int(d) for d in info.shape)


# Each counter returns (flops, macs) or None when the shapes it needs are unknown; it may add a
# note as a third item, or return the reason (a str) when it cannot count.
Counter = Callable[[_Ctx], tuple[float, float] | tuple[float, float, str] | str | None]
_COUNTERS: dict[str, Counter] = {}


def _register(*ops: str):
    def deco(fn: Counter) -> Counter:
        for op in ops:
            _COUNTERS[op] = fn
        return fn
    return deco


def _numel(s: Shape | None) -> int:
    return _prod(s) if s is not None else 0


@_register("Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv")
def _conv(c: _Ctx):
    widx = 3 if c.node.op_type == "QLinearConv" else 1
    w, y = c.ins[widx] if len(c.ins) > widx else None, c.outs[0]
    if not c.need(w, y):
        return None
    # weight [Cout, Cin/group, *k]: each output element reads Cin/group * prod(k) inputs.
    macs = _numel(y) * w[1] * _prod(w[2:])
    bidx = 8 if c.node.op_type == "QLinearConv" else 2
    bias = _numel(y) if len(c.ins) > bidx and c.node.inputs[bidx] is not None else 0
    return 2.0 * macs + bias, float(macs)


@_register("ConvTranspose")
def _conv_transpose(c: _Ctx):
    x, w, y = c.ins[0], c.ins[1], c.outs[0]
    if not c.need(x, w):
        return None
    # weight [Cin, Cout/group, *k]: each input element scatters into Cout/group * prod(k).
    macs = _numel(x) * w[1] * _prod(w[2:])
    bias = _numel(y) if len(c.ins) > 2 and c.node.inputs[2] is not None and y else 0
    return 2.0 * macs + bias, float(macs)


@_register("Gemm", "FusedGemm")
def _gemm(c: _Ctx):
    a, b = c.ins[0], c.ins[1]
    if not c.need(a, b) or len(a) != 2 or len(b) != 2:
        return None
    m, k = (a[1], a[0]) if c.attr("transA", 0) else (a[0], a[1])
    n = b[0] if c.attr("transB", 0) else b[1]
    macs = m * n * k
    extra = m * n if len(c.ins) > 2 and c.node.inputs[2] is not None else 0
    return 2.0 * macs + extra, float(macs)


def _matmul_dims(a: Shape, b: Shape) -> tuple[int, int] | None:
    """(output elements, contraction size) of numpy-style matmul with broadcasting."""
    if len(a) == 0 or len(b) == 0:
        return None
    k = a[-1]
    a2 = a if len(a) > 1 else (1,) + a
    b2 = b if len(b) > 1 else b + (1,)
    try:
        batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
    except ValueError:
        return None
    return _prod(batch) * a2[-2] * b2[-1], k


@_register("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "MatMulNBits",
           "DynamicQuantizeMatMul", "MatMulIntegerToFloat")
def _matmul(c: _Ctx):
    a = c.ins[0]
    bidx = 3 if c.node.op_type == "QLinearMatMul" else 1
    b = c.ins[bidx] if len(c.ins) > bidx else None
    if c.node.op_type == "MatMulNBits":
        n, k = c.attr("N"), c.attr("K")
        if a is None or n is None or k is None:
            return None
        macs = _numel(a) // a[-1] * n * k
        # + dequantization: one multiply (by the block's scale) per weight and run
        return 2.0 * macs + float(n * k), float(macs)
    if c.node.op_type == "FusedMatMul" and (c.attr("transA", 0) or c.attr("transB", 0)):
        # op(A)·op(B) with the last two dims of A and/or B swapped.
        a = a[:-2] + (a[-1], a[-2]) if a is not None and len(a) > 1 and c.attr("transA", 0) \
            else a
        b = b[:-2] + (b[-1], b[-2]) if b is not None and len(b) > 1 and c.attr("transB", 0) \
            else b
    if a is not None and b is not None:
        dims = _matmul_dims(a, b)
        if dims is None:
            return None
        out, k = dims
    elif a is not None and c.outs[0] is not None:
        out, k = _numel(c.outs[0]), a[-1]
    else:
        return None
    macs = out * k
    return 2.0 * macs, float(macs)


@_register("Einsum")
def _einsum(c: _Ctx):
    eq = str(c.attr("equation", "")).replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(c.ins) or not c.need(*c.ins):
        return None
    sizes: dict[str, int] = {}
    ell_rank = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, c.ins)
                    if "..." in t), default=0)
    ell = "".join(chr(0x100 + i) for i in range(ell_rank))  # letters no equation uses
    for t, s in zip(terms, c.ins):
        if "..." in t:
            n = len(s) - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_rank - n:])
        if len(t) != len(s):
            return None
        for ch, d in zip(t, s):
            sizes[ch] = max(sizes.get(ch, 1), int(d))
    if rhs is None:
        letters = "".join(sorted(ch for ch in sizes if lhs.count(ch) == 1))
        rhs = letters
    rhs = rhs.replace("...", ell)
    total = _prod(sizes.values())  # the naive loop nest visits every index combination
    out = _prod(sizes[ch] for ch in rhs if ch in sizes)
    if len(terms) == 1:  # a transpose/diagonal/sum of one operand: additions only
        return float(total if total != out else 0), 0.0
    macs = total * (len(terms) - 1)
    return 2.0 * macs, float(macs)


def _attention_core(batch: int, heads: int, sq: int, skv: int, d: int, dv: int):
    """QK^T and PV matmuls plus scale+softmax."""
    macs = batch * heads * sq * skv * (d + dv)
    return 2.0 * macs + 6.0 * batch * heads * sq * skv, float(macs)


@_register("Attention")
def _attention(c: _Ctx):
    if c.node.domain == "com.microsoft":
        # input [B, S, Din], weights [Din, 3H] (packed QKV projection), num_heads.
        x, w = c.ins[0], c.ins[1] if len(c.ins) > 1 else None
        nh = c.attr("num_heads")
        if not c.need(x, w) or not nh or len(x) != 3:
            return None
        b, s, din = x
        sizes = c.attr("qkv_hidden_sizes")
        hq, hk, hv = (list(sizes) if sizes else [w[1] // 3] * 3)
        proj = b * s * din * w[1]
        past = c.ins[4] if len(c.ins) > 4 else None  # [2, B, heads, past, head_size]
        total = s + (past[3] if past is not None and len(past) == 5 else 0)
        flops, macs = _attention_core(b, nh, s, total, hq // nh, hv // nh)
        return flops + 2.0 * proj + b * s * w[1], macs + proj
    q = c.ins[0]
    k = c.ins[1] if len(c.ins) > 1 else None
    v = c.ins[2] if len(c.ins) > 2 else None
    if not c.need(q, k, v):
        return None
    past = c.ins[4] if len(c.ins) > 4 else None  # past_key [B, kv_heads, past, head]
    extra = past[-2] if past is not None and len(past) == 4 else 0
    if len(q) == 4 and len(k) == 4 and len(v) == 4:
        return _attention_core(q[0], q[1], q[2], k[2] + extra, q[3], v[3])
    if len(q) == 3 and len(k) == 3 and len(v) == 3:
        qh, kvh = c.attr("q_num_heads", 0), c.attr("kv_num_heads", 0)
        if not qh or not kvh:
            return None
        return _attention_core(q[0], qh, q[1], k[1] + extra, q[2] // qh, v[2] // kvh)
    return None


@_register("MultiHeadAttention")
def _mha(c: _Ctx):
    """query [B, S, D] (or packed [B, S, heads, 3, H]); key/value [B, L, D] new tokens, or
    [B, heads, L, H] already projected (cross-attention); past_key (input 6) [B, heads, P, H]
    adds P cached keys to every query's context."""
    q = c.ins[0]
    k = c.ins[1] if len(c.ins) > 1 else None
    v = c.ins[2] if len(c.ins) > 2 else None
    nh = c.attr("num_heads")
    if q is None or not nh:
        return None
    past = c.ins[6] if len(c.ins) > 6 else None
    cached = past[2] if past is not None and len(past) == 4 else 0
    if len(q) == 3 and k is not None and len(k) == 3:
        hv = v[2] if v is not None and len(v) == 3 else q[2]
        return _attention_core(q[0], nh, q[1], k[1] + cached, q[2] // nh, hv // nh)
    if len(q) == 3 and k is not None and len(k) == 4:  # key [B, heads, L, head_size]
        return _attention_core(q[0], nh, q[1], k[2], q[2] // nh, k[3])
    if len(q) == 5:  # packed QKV [B, S, heads, 3, head_size]
        return _attention_core(q[0], nh, q[1], q[1] + cached, q[4], q[4])
    return None


@_register("GroupQueryAttention")
def _gqa(c: _Ctx):
    """GroupQueryAttention of a decoder step: S new tokens attend to the P cached ones and
    themselves (a window of ``local_window_size`` at most), every query head against its
    shared KV head. The query is [B, S, num_heads·H], or Q, K and V packed in one
    [B, S, (num_heads + 2·kv_num_heads)·H] (genai's layout); ``do_rotary`` adds the rotary
    embedding of Q and K. The cache read is in input_bytes (past_key/past_value, inputs 3-4)."""
    q = c.ins[0]
    nh, kvh = c.attr("num_heads"), c.attr("kv_num_heads")
    if q is None or len(q) != 3 or not nh or not kvh:
        return None
    b, s, width = q
    packed = len(c.node.inputs) < 2 or c.node.inputs[1] is None
    head = width // (nh + 2 * kvh) if packed else width // nh
    past = c.ins[3] if len(c.ins) > 3 else None
    present = c.outs[1] if len(c.outs) > 1 else None
    if present is not None and len(present) == 4:
        total = present[2]
    else:
        total = s + (past[2] if past is not None and len(past) == 4 else 0)
    window = c.attr("local_window_size", -1)
    keys = min(total, int(window)) if window and window > 0 else total
    flops, macs = _attention_core(b, nh, s, keys, head, head)
    if c.attr("do_rotary", 0):
        flops += _ROTARY_FLOPS * b * s * (nh + kvh) * head
    return flops, macs


# Rotary embedding per rotated element: x·cos + rotate(x)·sin (two multiplies and an add).
_ROTARY_FLOPS = 3.0


@_register("RotaryEmbedding")
def _rotary(c: _Ctx):
    """com.microsoft and ONNX (opset 23) RotaryEmbedding: input [B, S, D] or [B, heads, S, H];
    the first ``rotary_embedding_dim`` of each head (all of it by default) are rotated."""
    x = c.ins[0]
    if x is None:
        return None
    cos = c.ins[2] if c.node.domain == "com.microsoft" and len(c.ins) > 2 else \
        (c.ins[1] if len(c.ins) > 1 else None)
    rot = c.attr("rotary_embedding_dim", 0) or (2 * cos[-1] if cos else 0)
    heads = c.attr("num_heads", 0)
    head = x[-1] if len(x) == 4 else (x[-1] // heads if heads else rot or x[-1])
    share = min(1.0, rot / head) if rot and head else 1.0
    return _ROTARY_FLOPS * _numel(x) * share, 0.0


def _rnn(gates: int, elementwise: float):
    def count(c: _Ctx):
        x, w, r = c.ins[0], c.ins[1], c.ins[2] if len(c.ins) > 2 else None
        if not c.need(x, w, r):
            return None
        seq, batch = (x[1], x[0]) if c.attr("layout", 0) else (x[0], x[1])
        dirs, gh, inp = w
        hidden = r[2]
        # Every time step of every direction: input and recurrent projections of all gates.
        steps = dirs * seq * batch
        macs = steps * gh * (inp + hidden)
        return 2.0 * macs + steps * hidden * elementwise, float(macs)
    return count


_COUNTERS["LSTM"] = _rnn(4, 17.0)  # biases 8H, gate activations 4H, cell and output 5H
_COUNTERS["GRU"] = _rnn(3, 13.0)
_COUNTERS["RNN"] = _rnn(1, 3.0)


@_register("MaxPool", "AveragePool", "LpPool")
def _pool(c: _Ctx):
    y = c.outs[0]
    ks = c.attr("kernel_shape")
    if y is None or not ks:
        return None
    # One comparison/addition per window element of every output.
    return float(_numel(y) * _prod(ks)), 0.0


@_register("LRN")
def _lrn(c: _Ctx):
    y = c.outs[0]
    size = c.attr("size")
    if y is None or not size:
        return None
    # Per output: `size` squares summed (2*size - 1), then scale, add bias, pow and divide.
    return float(_numel(y) * (2 * int(size) + 3)), 0.0


@_register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(c: _Ctx):
    x = c.ins[0]
    return (float(_numel(x)), 0.0) if x is not None else None


@_register("Resize", "Upsample")
def _resize(c: _Ctx):
    x, y = c.ins[0], c.outs[0]
    if not c.need(x, y):
        return None
    mode = str(c.attr("mode", "nearest"))
    axes = sum(1 for a, b in zip(x, y) if a != b)
    if mode == "nearest":
        return 0.0, 0.0
    taps = (4 if mode == "cubic" else 2) ** axes
    return float(_numel(y) * (2 * taps - 1)), 0.0


@_register("EmbedLayerNormalization")
def _embed_layer_norm(c: _Ctx):
    # Gathers move data; per output element: the word + position (+ segment, input 4) sum,
    # then a LayerNorm.
    y = c.outs[0] if c.outs else None
    seg = c.node.inputs[4] if len(c.node.inputs) > 4 else None
    adds = 2.0 if seg is not None and seg.name else 1.0
    return (float(_numel(y) * (adds + _NORM["LayerNormalization"])), 0.0) if y else None


# ---------------------------------------------------------------------------- ai.onnx.ml
# scikit-learn / LightGBM / XGBoost exports. Their weights are attributes (no initializers),
# so params stay 0; counts are per sample (the first input dim, 1 for a 1-D input) times the
# work of one sample. A count that makes no sense says why (a counter may return a reason).
_ML = "ai.onnx.ml"
# Post transforms of the ML classifiers/regressors, FLOPs per score (SOFTMAX as Softmax).
_POST = {"NONE": 0.0, "SOFTMAX": 5.0, "LOGISTIC": 4.0, "SOFTMAX_ZERO": 5.0, "PROBIT": 8.0}


def _no_formula(c: _Ctx) -> str:
    return f"no cost formula for {c.node.domain + '::' if c.node.domain else ''}" \
        f"{c.node.op_type}"


def _samples(x: Shape | None) -> int | None:
    if x is None:
        return None
    return 1 if len(x) <= 1 else _prod(x[:-1])


def _features(x: Shape | None) -> int | None:
    return None if x is None else (x[-1] if x else 1)


def _tree_depths(c: _Ctx) -> list[int] | str:
    """The depth (splits on the longest root-to-leaf path) of each tree of a tree ensemble:
    the ``nodes_*`` layout of TreeEnsembleClassifier/Regressor, the ``tree_roots`` layout of
    TreeEnsemble (ai.onnx.ml 5)."""
    roots = c.attr("tree_roots")
    if roots is not None:  # TreeEnsemble: node i has children nodes_{true,false}nodeids[i]
        t_ids, f_ids = list(c.attr("nodes_truenodeids", ())), list(c.attr("nodes_falsenodeids", ()))
        t_leaf, f_leaf = list(c.attr("nodes_trueleafs", ())), list(c.attr("nodes_falseleafs", ()))
        if not (len(t_ids) == len(f_ids) == len(t_leaf) == len(f_leaf)):
            return "the tree attributes disagree in length"

        def depth(i: int, seen: int) -> int:
            if seen > len(t_ids):
                raise ValueError("a cycle in the tree")
            best = 0
            for j, leaf in ((int(t_ids[i]), t_leaf[i]), (int(f_ids[i]), f_leaf[i])):
                if not leaf and 0 <= j < len(t_ids):
                    best = max(best, depth(j, seen + 1))
            return 1 + best
        return [depth(int(r), 0) if 0 <= int(r) < len(t_ids) else 0 for r in roots]
    trees = c.attr("nodes_treeids")
    if trees is None:
        return "no tree attributes (nodes_treeids / tree_roots)"
    nodes, modes = list(c.attr("nodes_nodeids", ())), list(c.attr("nodes_modes", ()))
    t_ids, f_ids = list(c.attr("nodes_truenodeids", ())), list(c.attr("nodes_falsenodeids", ()))
    if not (len(trees) == len(nodes) == len(modes) == len(t_ids) == len(f_ids)):
        return "the tree attributes disagree in length"
    by_tree: dict[int, dict[int, int]] = {}
    for i, (t, n) in enumerate(zip(trees, nodes)):
        by_tree.setdefault(int(t), {})[int(n)] = i
    out = []
    for _t, index in sorted(by_tree.items()):
        memo: dict[int, int] = {}

        def depth(n: int, seen: int, index=index, memo=memo) -> int:
            i = index.get(n)
            if i is None or modes[i] in ("LEAF", b"LEAF"):
                return 0
            if seen > len(index):
                raise ValueError("a cycle in the tree")
            if n not in memo:
                memo[n] = 1 + max(depth(int(t_ids[i]), seen + 1), depth(int(f_ids[i]), seen + 1))
            return memo[n]
        out.append(depth(min(index), 0))
    return out


@_register("TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble")
def _tree_ensemble(c: _Ctx):
    """Comparisons per tree × depth: ``flops = N · (Σ_t depth_t + T·K + K·post)``, N the
    samples, depth_t the splits on tree t's longest path (an upper bound: a sample stops at
    its leaf), T trees, K the classes or targets whose leaf weights each tree adds, post the
    FLOPs of the post transform per score (softmax 5, logistic 4). MACs: 0."""
    if c.node.domain != _ML:
        return _no_formula(c)
    n = _samples(c.ins[0])
    if n is None:
        return None
    depths = _tree_depths(c)
    if isinstance(depths, str):
        return f"cannot count: {depths}"
    op = c.node.op_type
    if op == "TreeEnsembleClassifier":
        k = len(c.attr("classlabels_int64s", ()) or c.attr("classlabels_strings", ()) or ())
    else:
        k = int(c.attr("n_targets", 1) or 1)
    post = _POST.get(str(c.attr("post_transform", "NONE")), 0.0)
    flops = n * (sum(depths) + len(depths) * k + k * post)
    return float(flops), 0.0, (f"{len(depths)} trees, depth up to {max(depths, default=0)}: "
                               "comparisons on each tree's longest path (an upper bound)")


@_register("LinearClassifier", "LinearRegressor")
def _linear_model(c: _Ctx):
    """The matmul: ``macs = N · F · K`` (N samples, F features, K classes or targets);
    ``flops = 2·macs + N·K`` (the intercepts) ``+ N·K·post`` (the post transform per score)
    ``+ N·K`` for a classifier's argmax."""
    if c.node.domain != _ML:
        return _no_formula(c)
    x = c.ins[0]
    n, f = _samples(x), _features(x)
    if n is None or f is None:
        return None
    coef = len(c.attr("coefficients", ()) or ())
    if c.node.op_type == "LinearClassifier":
        k = len(c.attr("classlabels_ints", ()) or c.attr("classlabels_strings", ()) or ())
        k = coef // f if f and coef % f == 0 and coef // f else k
    else:
        k = int(c.attr("targets", 1) or 1)
    if not k:
        return "cannot count: no classes or targets"
    macs = n * f * k
    post = _POST.get(str(c.attr("post_transform", "NONE")), 0.0)
    argmax = n * k if c.node.op_type == "LinearClassifier" else 0
    return 2.0 * macs + n * k * (1 + post) + argmax, float(macs)


@_register("SVMClassifier", "SVMRegressor")
def _svm(c: _Ctx):
    """Kernel evaluations: ``macs = N · S · F`` against S support vectors (a LINEAR SVM
    without support vectors: ``N · F · K`` with its K coefficient rows), plus ``N · S · K``
    for the dual coefficients; ``flops = 2·macs + N·S·kernel`` (rbf/sigmoid/poly: 3 more per
    evaluation, linear 0)."""
    if c.node.domain != _ML:
        return _no_formula(c)
    x = c.ins[0]
    n, f = _samples(x), _features(x)
    if n is None or f is None or not f:
        return None
    svs = len(c.attr("support_vectors", ()) or ()) // f
    coef = len(c.attr("coefficients", ()) or ())
    if svs == 0:
        k = coef // f if coef % f == 0 else 0
        if not k:
            return "cannot count: neither support vectors nor a coefficient matrix"
        macs = n * f * k
        return 2.0 * macs + n * k, float(macs)
    k = max(1, coef // svs) if svs else 1
    kernel = str(c.attr("kernel_type", "LINEAR")).upper()
    extra = 0.0 if kernel == "LINEAR" else 3.0
    macs = n * svs * f + n * svs * k
    return 2.0 * macs + n * svs * extra, float(macs)


# Element-wise ML ops: FLOPs per element of the tensor named (input or output).
_ML_ELEMENTWISE: dict[str, tuple[float, str, str]] = {
    "Scaler": (2.0, "in", "(x - offset) · scale: 2 FLOPs per element"),
    "Normalizer": (3.0, "in", "a norm (MAX, L1 or L2) and a division: 3 FLOPs per element"),
    "Binarizer": (1.0, "in", "one comparison per element"),
    "Imputer": (1.0, "in", "one comparison (is it the missing value?) per element"),
    "LabelEncoder": (1.0, "in", "one lookup per element"),
    "CategoryMapper": (1.0, "in", "one lookup per element"),
    "OneHotEncoder": (1.0, "out", "one comparison per output element (category × input)"),
}
# ML ops that move data into or out of maps and tensors: 0 FLOPs, like Gather or Concat.
_ML_MOVES: dict[str, str] = {
    "ZipMap": "builds one map per sample from the scores: data movement",
    "ArrayFeatureExtractor": "selects elements: data movement",
    "FeatureVectorizer": "concatenates its inputs: data movement",
    "CastMap": "writes a map's values into a tensor: data movement",
    "DictVectorizer": "writes a map's values into a tensor: data movement",
}


@_register(*_ML_ELEMENTWISE, *_ML_MOVES)
def _ml_elementwise(c: _Ctx):
    """Element-wise ai.onnx.ml ops: ``flops = elements · per`` with ``per`` from
    ``_ML_ELEMENTWISE`` (Scaler 2, Normalizer 3, Binarizer / Imputer / LabelEncoder /
    CategoryMapper 1 per input element, OneHotEncoder 1 per output element); the ops of
    ``_ML_MOVES`` (ZipMap, ArrayFeatureExtractor, FeatureVectorizer, CastMap,
    DictVectorizer) move data: 0 FLOPs, whatever the size, with that reason as the note."""
    op = c.node.op_type
    if c.node.domain != _ML:
        return _no_formula(c)
    if op in _ML_MOVES:
        return 0.0, 0.0, _ML_MOVES[op]
    per, side, why = _ML_ELEMENTWISE[op]
    shape = (c.ins[0] if c.ins else None) if side == "in" else (c.outs[0] if c.outs else None)
    if shape is None:
        return None
    return float(_numel(shape) * per), 0.0, why


def _generic(c: _Ctx) -> tuple[float, float] | None:
    op = c.node.op_type
    if op in _MOVE_OPS:
        return 0.0, 0.0
    if op in _ELEMENTWISE:
        y = c.outs[0] if c.outs else None
        return (float(_numel(y) * _ELEMENTWISE[op]), 0.0) if y is not None else None
    if op in _REDUCE:
        x = c.ins[0]
        return (float(_numel(x) * _REDUCE[op]), 0.0) if x is not None else None
    if op in _NORM or op in _SOFTMAX:
        x = c.ins[0]
        per = _NORM.get(op, _SOFTMAX.get(op))
        return (float(_numel(x) * per), 0.0) if x is not None else None
    return None


@dataclass
class Roofline:
    """Lower bound on latency from a device's peak compute and memory bandwidth.

    Attributes:
        nodes: per known node: node_id, op_type, flops, bytes, compute_ms, memory_ms, time_ms
            (the larger of the two), bound ('compute' or 'memory').
        total_ms: sum of the per-node bounds (nodes run one after another).
        compute_ms, memory_ms: whole-model compute and memory times.
        unknown_nodes: nodes left out (unknown cost).
    """

    nodes: pd.DataFrame
    total_ms: float
    compute_ms: float
    memory_ms: float
    peak_flops: float
    bandwidth: float
    unknown_nodes: int

    _SUMMARY = ("total_ms", "compute_ms", "memory_ms", "peak_flops", "bandwidth",
                "unknown_nodes")

    def keys(self) -> tuple[str, ...]:
        """Summary fields, so ``dict(roofline)`` gives the totals."""
        return self._SUMMARY

    def __getitem__(self, key: str) -> Any:
        if key not in self._SUMMARY:
            raise KeyError(key)
        return getattr(self, key)

    def __repr__(self) -> str:
        return (f"<Roofline >= {self.total_ms:.3f} ms (compute {self.compute_ms:.3f} ms, "
                f"memory {self.memory_ms:.3f} ms; {self.unknown_nodes} nodes unknown)>")


@dataclass
class Cost:
    """Result of :func:`cost`.

    Attributes:
        nodes: one row per node (all graphs): node_id, graph, op_type, domain, calls (times
            the node runs per model run: 1 in the main graph, × a Loop's constant trip count
            or a Scan's static length inside their bodies), flops, macs, input_bytes,
            output_bytes (per model run: per call × calls), params (elements of weight
            inputs), param_bytes, intensity (flops per byte moved), known (False: flops/macs
            are NaN), note, macs_onnx_tool (onnx-tool 1.0.1's count, per model run; NaN for
            an op outside its rules here or of unknown shapes).
        memory: per main-graph node in topological order: node_id, live_bytes (activations
            alive while it runs).
        total: flops, macs, params, param_bytes (unique weights), activation_bytes (all node
            outputs), peak_activation_bytes, peak_node, nodes, unknown_nodes, unknown_ops,
            macs_onnx_tool (the sum of the column) and macs_onnx_tool_missing (op types it
            leaves out).
        notes: caveats (unknown sizes, trip counts used or unknown, If branches).
        kv_cache: for a decoder with a KV cache (``past_key_values.*`` in, ``present.*``
            out), the cache this run returns: context (tokens it holds: past + new), bytes
            (all layers' keys and values), bytes_per_token, layers; None for other models.
            ``total["kv_cache_bytes"]`` repeats its bytes. :func:`kv_cache_bytes` gives it for
            any context.
    """

    nodes: pd.DataFrame
    memory: pd.DataFrame
    total: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    kv_cache: dict[str, Any] | None = None
    model: LabModel | None = field(default=None, repr=False)

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        """FLOPs, MACs and parameters per PyTorch module (see
        :mod:`onnx_lab.core.source_map`), in model order.

        Columns: module ('?' for nodes of unknown source), module_class, n_nodes, first_topo,
        flops, macs, params, output_bytes, share (of all FLOPs).

        Example:
            >>> lab.cost().by_module(depth=2).sort_values("flops", ascending=False)
        """
        if self.model is None:
            raise InputError("This Cost has no model to read modules from.",
                             fix="Compute it with onnx_lab.analysis.cost.cost(model).")
        out = group_by_module(self.nodes, self.model,
                              {"flops": lambda x: x.sum(min_count=1),
                               "macs": lambda x: x.sum(min_count=1), "params": "sum",
                               "output_bytes": "sum"}, depth=depth)
        total = self.nodes.flops.sum()
        return out.assign(share=out.flops / total if total else np.nan)

    def by_op(self) -> pd.DataFrame:
        """Per op type: count, flops, macs, params, share of flops."""
        g = self.nodes.groupby("op_type")
        df = pd.DataFrame({"count": g.size(), "flops": g.flops.sum(min_count=1),
                           "macs": g.macs.sum(min_count=1), "params": g.params.sum(),
                           "known": g.known.all()}).reset_index()
        total = self.nodes.flops.sum()
        df = df.assign(share=df.flops / total if total else np.nan)
        return df.sort_values("flops", ascending=False, na_position="last").reset_index(
            drop=True)

    def roofline(self, peak_flops: float, bandwidth: float) -> Roofline:
        """Latency lower bound for a device.

        Args:
            peak_flops: peak FLOP/s (e.g. 19.5e12 for an A100 fp32).
            bandwidth: memory bandwidth in bytes/s (e.g. 1.5e12).

        Example:
            >>> lab.cost().roofline(peak_flops=1e12, bandwidth=50e9).total_ms
        """
        for name, v in (("peak_flops", peak_flops), ("bandwidth", bandwidth)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise InputError(f"{name} must be a positive number, got {v!r}.",
                                 fix="Pass e.g. peak_flops=1e12 (FLOP/s), bandwidth=50e9 (B/s).")
        df = self.nodes.loc[self.nodes.known]
        moved = df.input_bytes + df.output_bytes
        compute = df.flops / peak_flops * 1e3
        memory = moved / bandwidth * 1e3
        nodes = pd.DataFrame({"node_id": df.node_id, "op_type": df.op_type, "flops": df.flops,
                              "bytes": moved, "compute_ms": compute, "memory_ms": memory,
                              "time_ms": np.maximum(compute, memory),
                              "bound": np.where(compute >= memory, "compute", "memory")})
        return Roofline(nodes=nodes.reset_index(drop=True), total_ms=float(nodes.time_ms.sum()),
                        compute_ms=float(compute.sum()), memory_ms=float(memory.sum()),
                        peak_flops=float(peak_flops), bandwidth=float(bandwidth),
                        unknown_nodes=int((~self.nodes.known).sum()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: {"total": {...}, "nodes": [...], "notes": [...]} (used by the CLI)."""
        return {"total": dict(self.total), "nodes": self.nodes.to_dict(orient="records"),
                "notes": list(self.notes)}

    def __repr__(self) -> str:
        t = self.total
        return (f"<Cost {t['flops'] / 1e9:.3f} GFLOPs, {t['macs'] / 1e9:.3f} GMACs, "
                f"{t['params']:,} params, peak activations {t['peak_activation_bytes']:,} B, "
                f"{t['unknown_nodes']} unknown nodes>")

    def _repr_html_(self) -> str:
        return _display.draw(self, "html")


# onnx-tool 1.0.1's "MACs" (onnx_tool/node.py, Node.profile), for users comparing with it. It
# counts every op's arithmetic as MACs, each weighed by a per-operation cost (add, mul and
# compare 1; divide 4, sqrt 24, exp and pow 32, sin/cos 39, log 43), over the output elements
# unless said otherwise; Conv, Gemm and MatMul add their bias adds to the multiply-accumulates.
# Ops it has no formula for count 0 there; here they are NaN unless they only move data.
_OT_DIV, _OT_SQRT, _OT_EXP, _OT_LOG, _OT_SIN = 4.0, 24.0, 32.0, 43.0, 39.0
_OT_TANH = _OT_EXP + 2 + _OT_DIV
# Per output element, times max(1, inputs - 1) (its element-wise base classes).
_OT_PER_OUT_N: dict[str, float] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Min", "Max", "Neg", "Abs", "Ceil", "Mod", "Relu",
                     "Sign"), 1.0),
    "LeakyRelu": 2.0, "Sqrt": _OT_SQRT, "Pow": _OT_EXP, "Div": _OT_DIV, "Reciprocal": _OT_DIV,
    "Sin": _OT_SIN, "Cos": _OT_SIN,
    "HardSigmoid": 4.0, "HardSwish": 5.0, "Tanh": 2 * _OT_TANH,
    "Atan": 2 * (_OT_SQRT + 4 + _OT_DIV), "InstanceNormalization": 3 + _OT_DIV,
    "LpNormalization": _OT_EXP + 1,
}
# Per output element, once.
_OT_PER_OUT: dict[str, float] = {
    "Exp": _OT_EXP, "Sigmoid": _OT_EXP, "Softmax": _OT_EXP + _OT_DIV, "Log": _OT_LOG,
    "Softplus": _OT_EXP + 1 + _OT_LOG, "LogSoftmax": _OT_EXP + _OT_DIV + 1 + _OT_LOG,
    "Elu": _OT_EXP + 3, "Gelu": _OT_EXP + 2, "PRelu": 2.0, "Clip": 2.0, "ImageScaler": 2.0,
    "CumSum": 1.0, "QuantizeLinear": 2.0, "DequantizeLinear": 2.0, "Less": 1.0, "LessOrEqual": 1.0,
    "Greater": 1.0, "GreaterOrEqual": 1.0, "Equal": 1.0, "Not": 1.0, "And": 1.0, "Or": 1.0,
    "Xor": 1.0, "Round": 1.0, "Floor": 1.0, "NonZero": 1.0,
    "BatchNormalization": 2 + _OT_SQRT + _OT_DIV + 1,
}
# Per element of the first input.
_OT_PER_IN = {"ReduceMean": 1.0, "ReduceSum": 1.0, "ReduceProd": 1.0, "ReduceMin": 1.0,
              "ReduceMax": 1.0, "ReduceL2": 1 + _OT_SQRT}
# No arithmetic there (its Node.profile default of 0).
_OT_ZERO = (_MOVE_OPS - {"Mod", "NonZero"}) | {"Erf", "Dropout", "Identity", "Constant", "If",
                                                "Loop", "Scan"}


def _onnx_tool_macs(c: _Ctx) -> float | None:
    """onnx-tool 1.0.1's MACs of one node (see the table above), or None: shapes unknown or
    an op outside the table."""
    op, y = c.node.op_type, (c.outs[0] if c.outs else None)
    n_in = sum(1 for v in c.node.inputs if v is not None)
    if op in _OT_ZERO:
        return 0.0
    if op == "Sum":  # n - 1 adds per output element
        return float(_numel(y) * (n_in - 1)) if y is not None else None
    if op in _OT_PER_OUT_N:
        return float(_numel(y) * max(1, n_in - 1) * _OT_PER_OUT_N[op]) if y else None
    if op in _OT_PER_OUT:
        return float(_numel(y) * _OT_PER_OUT[op]) if y is not None else None
    x = c.ins[0] if c.ins else None
    if op in _OT_PER_IN:
        return float(_numel(x) * _OT_PER_IN[op]) if x is not None else None
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w = c.ins[3 if op == "QLinearConv" else 1] if len(c.ins) > 1 else None
        if not c.need(w, y):
            return None
        bias = _numel(y) if op in ("Conv", "ConvTranspose") and n_in > 2 else 0
        return float(_numel(y) * _prod(w[1:]) + bias)
    if op in ("Gemm", "MatMul", "MatMulInteger"):
        w = c.ins[1] if len(c.ins) > 1 else None
        if not c.need(w, y):
            return None
        k = (w[-1] if c.attr("transB", 0) else w[-2]) if op == "Gemm" else \
            (w[-2] if len(w) > 1 else 1)
        return float(_numel(y) * k + (_numel(y) if n_in == 3 else 0))
    if op in ("MaxPool", "AveragePool"):
        ks = c.attr("kernel_shape") or (3, 3)
        return float(_numel(y) * _prod(list(ks)[:2])) if y is not None else None
    if op == "GlobalAveragePool":
        return float(_numel(x) + _numel(y) * _OT_DIV) if c.need(x, y) else None
    if op == "LRN":
        size = c.attr("size")
        return float(_numel(y) * (_OT_DIV + _OT_EXP + 1 + int(size))) if y and size else None
    if op == "LayerNormalization":
        if x is None:
            return None
        axis = int(c.attr("axis", -1)) % len(x) if x else 0
        rest = _numel(x) // x[axis] if x and x[axis] else 0
        return float(_numel(x) * 7 + rest * (1 + _OT_SQRT + _OT_DIV))
    if op in ("Resize", "Upsample"):
        mode = str(c.attr("mode", "nearest"))
        return float(_numel(y) * {"linear": 4, "cubic": 8}.get(mode, 0)) if y else None
    return None


def _or_nan(x: float | None) -> float:
    return np.nan if x is None else x


def _onnx_tool_total(nodes: pd.DataFrame) -> dict[str, Any]:
    """``macs_onnx_tool`` (the sum over the nodes it has a figure for) and
    ``macs_onnx_tool_missing`` (the op types left out: shapes unknown or no rule)."""
    missing = nodes.loc[nodes.macs_onnx_tool.isna()]
    return {"macs_onnx_tool": float(nodes.macs_onnx_tool.sum()),
            "macs_onnx_tool_missing": sorted(set(missing.op_type))}


def _const_int(v) -> int | None:
    """The value of a scalar integer constant (initializer or Constant output), else None."""
    if v is None:
        return None
    try:
        t = constant_tensor(v)  # get_const_tensor would rename tensors other versions share
        a = np.asarray(t.numpy()) if t is not None else None
    except Exception:  # noqa: BLE001 - unreadable constant: unknown
        return None
    if a is None or a.size != 1 or a.dtype.kind not in "iu":
        return None
    return int(a.reshape(-1)[0])


def _calls(lm: LabModel, types: dict[str, TensorInfo]
           ) -> tuple[dict[int, float], dict[int, str], list[str]]:
    """How many times each node runs per model run, by ``id`` of its ir.Node.

    Main graph: 1. Loop body: × the trip count when it is a constant (an upper bound: the
    condition may stop the loop earlier); Scan body: × the length of the first scan input's
    scanned axis when static; If branches: 1 each (only one runs). A body whose count is
    unknown is counted once per run of its owner, with a note. Returns (calls, notes by
    node, model-level notes).
    """
    calls: dict[int, float] = {}
    body_notes: dict[int, str] = {}
    notes: list[str] = []
    ids = {id(e.node): nid for nid, e in lm.index.entries.items()}

    def walk(graph, factor: float, note: str) -> None:
        for node in graph:
            calls[id(node)] = factor
            if note:
                body_notes[id(node)] = note
            subs = [a.value for a in node.attributes.values() if a.type == ir.AttributeType.GRAPH]
            if not subs:
                continue
            f, n = factor, note
            nid = ids.get(id(node), node.name)
            if node.op_type == "Loop":
                m = _const_int(node.inputs[0] if node.inputs else None)
                if m is None:
                    n = f"trip count of Loop {nid!r} unknown: counted once per run of it"
                    notes.append(f"Loop {nid!r}: trip count not a constant, its body is counted "
                                 "once per run")
                else:
                    f = factor * max(m, 0)
                    notes.append(f"Loop {nid!r}: body counted {m} times per run (its constant "
                                 "trip count; an upper bound, the condition may stop it earlier)")
            elif node.op_type == "Scan":
                length = _scan_length(node, types)
                if length is None:
                    n = f"length of Scan {nid!r} unknown: counted once per run of it"
                    notes.append(f"Scan {nid!r}: sequence length unknown, its body is counted "
                                 "once per run")
                else:
                    f = factor * length
            for sg in subs:
                walk(sg, f, n)

    walk(lm.graph, 1.0, "")
    if any(n.op_type == "If" for g in lm.ir.graphs() for n in g):
        notes.append("both branches of each If are counted (only one runs): an upper bound")
    return calls, body_notes, notes


def _scan_length(node, types: dict[str, TensorInfo]) -> int | None:
    """Iterations of a Scan (opset >= 9): the scanned axis of its first scan input."""
    n_scan = node.attributes.get("num_scan_inputs")
    body = node.attributes.get("body")
    # Opset 8's Scan takes sequence_lens first and scans axis 1 per batch item: unknown here.
    if n_scan is None or body is None or len(body.value.inputs) != len(node.inputs):
        return None
    n_state = len(node.inputs) - n_scan.value
    if not 0 <= n_state < len(node.inputs):
        return None
    axes = node.attributes.get("scan_input_axes")
    axis = int(axes.value[0]) if axes is not None and len(axes.value) else 0
    shape = _concrete(types, node.inputs[n_state])
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return int(shape[axis])


def cost(model: Any, dims: Mapping[str, int] | None = None,
         shapes: Mapping[str, Sequence[int]] | None = None) -> Cost:
    """Per-node FLOPs, MACs, parameters and bytes; totals and peak activation memory.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        dims, shapes: values for dynamic dims (merged over a Lab's). Counts need concrete
            shapes, so every dynamic input dim must be given.

    Returns:
        A :class:`Cost`.

    Raises:
        DimError: dynamic input dims without values (lists them and how to pass them).

    Example:
        >>> c = cost("sample:transformer_block", dims={"batch": 1, "seq": 16})
        >>> c.total["flops"]
    """
    lm, dims, shapes = resolve(model, dims, shapes)
    resolve_input_shapes(lm, dims, shapes)  # DimError naming every unresolved dim
    types = lm.types(dims, shapes)
    idx = lm.index
    rows = []
    notes: list[str] = []
    param_seen: dict[str, tuple[int, float]] = {}
    calls_of, body_notes, call_notes = _calls(lm, types)
    for nid, e in idx.entries.items():
        node = e.node
        c = _Ctx(node, types)
        op = node.op_type
        note = ""
        calls = calls_of.get(id(node), 1.0)
        if op in _CONTROL_OPS:
            res: tuple[float, float] | None = (0.0, 0.0)
            note = "its body nodes are rows of their own"
        else:
            counter = _COUNTERS.get(op)
            try:
                res = counter(c) if counter is not None else _generic(c)
            except (TypeError, ValueError, ZeroDivisionError, IndexError, RecursionError
                    ) as err:
                res = None
                note = f"cannot count: {err}"
            if isinstance(res, str):  # the counter's reason
                res, note = None, res
            elif res is not None and len(res) == 3:
                res, note = (res[0], res[1]), res[2]
            if res is None and not note:
                known_op = counter is not None or op in _MOVE_OPS or op in _ELEMENTWISE \
                    or op in _REDUCE or op in _NORM or op in _SOFTMAX
                note = ("shapes unknown" if known_op else
                        f"no cost formula for {node.domain + '::' if node.domain else ''}{op}")
        params = pbytes = ibytes = obytes = 0.0
        for i, (v, s) in enumerate(zip(node.inputs, c.ins)):
            if v is None or s is None:
                continue
            size = itemsize(types[v.name].dtype if v.name in types else None) or 0
            n = _prod(s)
            ibytes += n * size
            if is_constant(v, stored=True):
                weights = _weights_held(node, i, n)
                params += weights
                pbytes += n * size
                param_seen[v.name] = (weights, n * size)
        if op == "MatMulNBits" and res is not None:
            note = _nbits_note(c, pbytes)
        for v, s in zip(node.outputs, c.outs):
            if v is not None and s is not None:
                obytes += _prod(s) * (itemsize(types[v.name].dtype if v.name in types
                                               else None) or 0)
        flops, macs = res if res is not None else (np.nan, np.nan)
        moved = ibytes + obytes
        intensity = flops / moved if moved and res else np.nan
        if id(node) in body_notes:
            note = "; ".join(x for x in (note, body_notes[id(node)]) if x)
        rows.append((nid, e.graph, op, node.domain, calls, flops * calls, macs * calls,
                     int(params), int(pbytes), int(ibytes * calls), int(obytes * calls),
                     intensity, res is not None, note, _or_nan(_onnx_tool_macs(c)) * calls))
    nodes = pd.DataFrame(rows, columns=NODE_COLUMNS)
    nodes = nodes.astype({"calls": "float64", "flops": "float64", "macs": "float64",
                          "known": "bool", "macs_onnx_tool": "float64"})
    memory, peak, peak_node, missing = _liveness(lm, types)
    if missing:
        notes.append(f"{missing} activations of unknown size are left out of the peak memory")
    notes += call_notes
    unknown = nodes.loc[~nodes.known]
    if len(unknown):
        notes.append(f"{len(unknown)} nodes have unknown cost (NaN): "
                     + ", ".join(sorted(set(unknown.op_type))[:10]))
    kv = _kv_cache_of_run(lm, types, notes)
    total = {
        "flops": float(nodes.flops.sum()), "macs": float(nodes.macs.sum()),
        "params": int(sum(n for n, _ in param_seen.values())),
        "param_bytes": int(sum(b for _, b in param_seen.values())),
        "activation_bytes": int(nodes.output_bytes.sum()),
        "peak_activation_bytes": int(peak), "peak_node": peak_node,
        "nodes": len(nodes), "unknown_nodes": int(len(unknown)),
        "unknown_ops": sorted(set(unknown.op_type)),
        "kv_cache_bytes": kv["bytes"] if kv else None,
        **_onnx_tool_total(nodes),
    }
    return Cost(nodes=nodes, memory=memory, total=total, notes=notes, kv_cache=kv,
                model=lm)


def _kv_cache_of_run(lm: LabModel, types: dict[str, TensorInfo], notes: list[str]
                     ) -> dict[str, Any] | None:
    """The present.* outputs of a decoder's run: context, bytes, bytes per token, layers."""
    try:
        io = decoder_io(lm)
    except CacheError as e:
        notes.append(f"KV cache not sized: {e.problem}")
        return None
    if io is None:
        return None
    total, context = 0, None
    for slot in io.cache:
        info = types.get(slot.present)
        size = itemsize(info.dtype) if info is not None else None
        if info is None or info.dynamic or size is None:
            notes.append(f"KV cache not sized: the shape of {slot.present!r} is unknown")
            return None
        total += _prod(info.shape) * size
        if slot.past_axis is not None:
            context = info.shape[slot.past_axis]
    return {"context": context, "bytes": int(total),
            "bytes_per_token": total / context if context else None, "layers": io.num_layers}


def kv_cache_bytes(model: Any, context: int, *, batch: int = 1,
                   dims: Mapping[str, int] | None = None) -> int:
    """Bytes of a decoder's whole KV cache (every layer's keys and values) holding
    ``context`` tokens per sequence, in the cache's own dtype.

    Heads and head size come from the model's declared cache shape, the dims it determines
    (``kv_cache_dim``: :mod:`onnx_lab.core.derived`) or ``dims``.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        context: tokens in the cache (past + new), ``>= 0``.
        batch: sequences.
        dims: sizes of other symbolic cache dims.

    Raises:
        CacheError: the model has no KV cache, or its caches cannot be paired.
        DimError: a cache dim has no size.

    Example:
        >>> kv_cache_bytes("sample:tiny_llm", 128)  # 2 layers x K,V x 2 heads x 128 x 16 x 4 B
        65536
    """
    for name, v in (("context", context), ("batch", batch)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise InputError(f"{name} must be an int >= 0, got {v!r}.",
                             fix=f"Pass {name}=1 or another count of tokens/sequences.")
    lm, given, _ = resolve(model, dims)
    io = require_decoder_io(lm)
    sizes = with_derived(lm, given)
    total = 0
    for slot in io.cache:
        if slot.shape is None:
            raise DimError(f"Cache input {slot.past!r} declares no shape.",
                           fix="Give it one (lab.set_input_shape) to size the cache.")
        n = 1
        for axis, d in enumerate(slot.shape):
            if axis == slot.past_axis:
                n *= int(context)
            elif isinstance(d, int):
                n *= d
            elif d == io.batch_dim:
                n *= int(batch)
            elif isinstance(d, str) and isinstance(resolve_dim(d, sizes), int):
                n *= int(resolve_dim(d, sizes))  # a name, or an expression of given names
            else:
                raise DimError(f"Cache input {slot.past!r} {list(slot.shape)}: dim {axis} "
                               f"({d!r}) has no size.", fix=f"Pass dims={{{d!r}: ...}}.")
        total += n * (itemsize(slot.dtype) or 4)
    return int(total)


PHASE_COLUMNS = ["phase", "batch", "new_tokens", "context", "flops", "macs", "flops_per_token",
                 "param_bytes", "activation_bytes", "kv_cache_bytes", "bytes_moved",
                 "intensity", "unknown_nodes"]


@dataclass
class GenerationCost:
    """Result of :func:`generation_cost`: the static cost of a prefill and of one decode step.

    Attributes:
        prefill: the :class:`Cost` of the prompt's run (``prompt`` new tokens, empty cache).
        decode: the :class:`Cost` of one decode step at ``context`` (one new token attending
            to ``context`` tokens: ``context - 1`` cached).
        prompt, context, batch: what was asked.
        kv_cache_bytes: the cache after the decode step (``context`` tokens).
        kv_bytes_per_token: what each token adds to the cache (all layers, K and V).
    """

    prefill: Cost
    decode: Cost
    prompt: int
    context: int
    batch: int
    kv_cache_bytes: int
    kv_bytes_per_token: float

    def table(self) -> pd.DataFrame:
        """One row per phase (``prefill``, ``decode``). Columns: phase, batch, new_tokens,
        context (tokens attended after the step), flops, macs, flops_per_token, param_bytes
        (weights read), activation_bytes (node outputs), kv_cache_bytes (the cache the step
        returns), bytes_moved (every node's inputs and outputs: weights, cache and
        activations), intensity (flops / bytes_moved), unknown_nodes."""
        rows = []
        for phase, c, new, ctx in (("prefill", self.prefill, self.prompt, self.prompt),
                                   ("decode", self.decode, 1, self.context)):
            t = c.total
            moved = float(c.nodes.input_bytes.sum() + c.nodes.output_bytes.sum())
            rows.append((phase, self.batch, new, ctx, t["flops"], t["macs"],
                         t["flops"] / (new * self.batch) if new else np.nan,
                         t["param_bytes"], t["activation_bytes"], t["kv_cache_bytes"], moved,
                         t["flops"] / moved if moved else np.nan, t["unknown_nodes"]))
        return pd.DataFrame(rows, columns=PHASE_COLUMNS)

    def __repr__(self) -> str:
        p, d = self.prefill.total, self.decode.total
        return (f"<GenerationCost prefill {self.prompt} tokens: {p['flops'] / 1e9:.3f} GFLOPs; "
                f"decode at context {self.context}: {d['flops'] / 1e6:.3f} MFLOPs/token; "
                f"KV cache {self.kv_cache_bytes:,} B ({self.kv_bytes_per_token:,.0f} B/token)>")

    def _repr_html_(self) -> str:
        return _display.draw(self, "html")


def generation_cost(model: Any, prompt: int, context: int | None = None, *, batch: int = 1,
                    dims: Mapping[str, int] | None = None) -> GenerationCost:
    """The static cost of generating with a KV-cache decoder: a prefill of ``prompt`` tokens
    (empty cache) and one decode step at ``context`` (one new token, ``context - 1`` cached).

    The dims of each phase are set from the decoder's own dim names (batch, new tokens, past
    length; the total length and head size are derived), so this is ``cost(model, dims=...)``
    twice with the right dims.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        prompt: tokens of the prompt, ``>= 1``.
        context: tokens the decode step attends to (default ``prompt + 1``: the first token
            generated after the prompt).
        batch: sequences.
        dims: values for other symbolic dims.

    Raises:
        CacheError: the model has no KV cache, its caches cannot be paired, or ``context``
            exceeds the longest sequence the model can run (genai_config.json's context_length
            or its rotary cache).

    Example:
        >>> g = generation_cost("sample:tiny_llm", prompt=32, context=128)
        >>> g.table()[["phase", "flops", "kv_cache_bytes"]]
    """
    context = prompt + 1 if context is None else context
    for name, v, low in (("prompt", prompt, 1), ("context", context, 1), ("batch", batch, 1)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise InputError(f"{name} must be an int >= {low}, got {v!r}.",
                             fix=f"Pass {name}=1 or more.")
    lm, given, shapes = resolve(model, dims)
    io = require_decoder_io(lm)
    longest = max_context(lm)
    for what, n in (("prompt", prompt), ("context", context)):
        if longest is not None and n > longest[0]:
            raise CacheError(f"A {what} of {n} tokens is longer than the model's maximum of "
                             f"{longest[0]} ({longest[1]}).",
                             fix=f"Use at most {longest[0]} tokens.")
    missing = [label for label, d in (("new tokens", io.sequence_dim),
                                      ("past length", io.past_dim)) if d is None]
    if missing:
        raise DimError(f"The decoder's {' and '.join(missing)} dim is not symbolic: its phases "
                       "cannot be set.", fix="Use cost(model, dims=...) with the shapes it has.")
    base = dict(given)
    if io.batch_dim:
        base[io.batch_dim] = batch
    prefill = cost(lm, {**base, io.sequence_dim: prompt, io.past_dim: 0}, shapes)
    decode = cost(lm, {**base, io.sequence_dim: 1, io.past_dim: context - 1}, shapes)
    kv = kv_cache_bytes(lm, context, batch=batch, dims=given)
    return GenerationCost(prefill=prefill, decode=decode, prompt=int(prompt),
                          context=int(context), batch=int(batch), kv_cache_bytes=kv,
                          kv_bytes_per_token=kv / context)


def _weights_held(node, i: int, n: int) -> int:
    """Parameters input ``i`` of ``node`` holds, given its ``n`` stored elements.

    MatMulNBits stores K·N weights packed (two 4-bit ones per byte) in input 1 and block
    scales, zero points and a group index (inputs 2-4) beside them: the parameters are the
    K·N weights (as many as the float MatMul had), the bytes are every stored byte.
    """
    if node.op_type == "MatMulNBits" and node.domain == "com.microsoft":
        if i == 1:
            k, nn = node.attributes.get("K"), node.attributes.get("N")
            return int(k.value) * int(nn.value) if k is not None and nn is not None else n
        if i in (2, 3, 4):
            return 0
    return n


def _nbits_note(c: _Ctx, pbytes: float) -> str:
    k, n = c.attr("K"), c.attr("N")
    bits, block = c.attr("bits", 4), c.attr("block_size")
    if not k or not n:
        return ""
    return f"{bits}-bit, block {block}: {8 * pbytes / (k * n):.2f} bits/weight with scales"


def _liveness(lm: LabModel, types: dict[str, TensorInfo]) -> tuple[pd.DataFrame, int, str | None,
                                                                   int]:
    """Per-node live activation bytes, the peak, the node at the peak and the number of
    activations of unknown size: :func:`onnx_lab.core.limits.liveness`, the walk every run's
    memory check uses too."""
    rows, peak, peak_node, missing, _largest = liveness(lm, types)
    return pd.DataFrame(rows, columns=["node_id", "live_bytes"]), peak, peak_node, missing
