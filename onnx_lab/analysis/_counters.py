"""Per-op counters of the static cost model: FLOPs and MACs of one node from its concrete
shapes and attributes (see :mod:`onnx_lab.analysis.cost` for the definitions), and the
parameters a node's weight inputs hold.

Each counter is registered for its op types with ``@_register``; an op without one falls back
to :func:`_generic` (data movement, element-wise, reductions, normalizations, softmax).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from onnx_lab.core.shapes import TensorInfo, type_at
from onnx_lab.core.values import constant_tensor

Shape = tuple[int, ...]

# Ops that only move, view or convert data: 0 FLOPs, known.
_MOVE_OPS = frozenset("""Reshape Transpose Squeeze Unsqueeze Flatten Identity Concat Split Slice
Gather GatherElements GatherND Scatter ScatterElements ScatterND Shape Size Cast CastLike Pad
Expand Tile Constant ConstantOfShape Range Dropout DepthToSpace SpaceToDepth Where OneHot
EyeLike NonZero Compress ReverseSequence Trilu Optional OptionalGetElement OptionalHasElement
SequenceAt SequenceConstruct SequenceEmpty SequenceInsert SequenceLength SplitToSequence
ConcatFromSequence Unique TopK MaxUnpool ArgMax ArgMin BitShift Col2Im CenterCropPad Mod StringConcat
TensorScatter
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

    def __init__(self, node, types: Mapping[str, TensorInfo], graph: str = "") -> None:
        self.node = node
        # a body node reads the names its own graph defines (sibling branches reuse names)
        self.ins: list[Shape | None] = [_concrete(types, v, graph) for v in node.inputs]
        self.outs: list[Shape | None] = [_concrete(types, v, graph) for v in node.outputs]

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.node.attributes.get(name)
        return default if a is None else a.value

    def need(self, *shapes: Shape | None) -> bool:
        return all(s is not None for s in shapes)


def _concrete(types: Mapping[str, TensorInfo], v, graph: str = "") -> Shape | None:
    if v is None or not v.name:
        return None
    # a constant's stored dims first: a value_info may say otherwise (an onnxruntime-genai
    # build declares its [1024, 32] shape constant a scalar)
    t = constant_tensor(v)
    if t is not None:
        return tuple(int(d) for d in t.shape)
    info = type_at(types, v.name, graph)
    if info is None or info.shape is None or any(not isinstance(d, int) or d < 0
                                                 for d in info.shape):
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
    # the bias: QLinearConv's input 8, Conv's input 2; ConvInteger has none (its input 2 is
    # x_zero_point, which was counted as a bias add per output)
    bidx = {"QLinearConv": 8, "ConvInteger": None}.get(c.node.op_type, 2)
    bias = _numel(y) if bidx is not None and len(c.ins) > bidx \
        and c.node.inputs[bidx] is not None else 0
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


@_register("GatherBlockQuantized")
def _gather_block_quantized(c: _Ctx):
    # com.microsoft's gather from a block-quantized table (onnxruntime-genai's int4 embedding):
    # rows are gathered (data movement), then each gathered weight is dequantized, its zero
    # point subtracted and its block's scale multiplied: 2 FLOPs per output element.
    y = c.outs[0] if c.outs else None
    if y is None:
        data, idx = (c.ins + [None, None])[:2]
        if data is None or idx is None:
            return None
        axis = c.attr("gather_axis", 0) % len(data)
        qaxis = c.attr("quantize_axis", 1) % len(data)
        per_byte = _packed_per_byte(c.node, 0)
        full = tuple(d * per_byte if k == qaxis else d for k, d in enumerate(data))
        y = full[:axis] + tuple(idx) + full[axis + 1:]
    return 2.0 * _numel(y), 0.0


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
    if node.op_type == "GatherBlockQuantized" and node.domain == "com.microsoft":
        # data (input 0) packs 8/bits weights per uint8; scales and zero points count none
        return n * _packed_per_byte(node, 0) if i == 0 else 0 if i in (2, 3) else n
    return n


def _packed_per_byte(node, i: int) -> int:
    """Weights per stored element of input ``i``: 8 // bits for a uint8 (or int8) tensor that
    packs them (GatherBlockQuantized's ``bits`` 4 or 2), else 1 (int4/uint4 tensors hold one
    weight per element already)."""
    bits = node.attributes.get("bits")
    v = node.inputs[i] if i < len(node.inputs) else None
    dtype = v.dtype if v is not None else None
    packed = dtype is not None and dtype.name in ("UINT8", "INT8")
    n_bits = int(bits.value) if bits is not None else 4  # onnxruntime's default: 4
    return 8 // n_bits if packed and 0 < n_bits < 8 else 1


# The learned numbers ONNX-ML ops hold in attributes (a tree's thresholds and leaf weights, a
# linear model's or an SVM's coefficients, a scaler's offsets): their params. The trees'
# structure (node ids, feature ids, modes) is not counted. Each name also in its
# ``*_as_tensor`` form (double precision).
ML_PARAMS = {
    "TreeEnsembleClassifier": ("nodes_values", "class_weights", "base_values"),
    "TreeEnsembleRegressor": ("nodes_values", "target_weights", "base_values"),
    "TreeEnsemble": ("nodes_splits", "leaf_weights"),
    "LinearClassifier": ("coefficients", "intercepts"),
    "LinearRegressor": ("coefficients", "intercepts"),
    "SVMClassifier": ("support_vectors", "coefficients", "rho", "prob_a", "prob_b"),
    "SVMRegressor": ("support_vectors", "coefficients", "rho"),
    "Scaler": ("offset", "scale"),
    "Imputer": ("imputed_value_floats", "imputed_value_int64s"),
}


def ml_params(node: Any) -> tuple[int, int]:
    """(elements, bytes) of the learned attributes of an ONNX-ML node (:data:`ML_PARAMS`);
    (0, 0) for any other node."""
    if node.domain != "ai.onnx.ml":
        return 0, 0
    n = nbytes = 0
    for name in ML_PARAMS.get(node.op_type, ()):
        for key in (name, f"{name}_as_tensor"):
            a = node.attributes.get(key)
            if a is None:
                continue
            value = a.value
            if hasattr(value, "nbytes") and hasattr(value, "shape"):  # a TENSOR attribute
                n += int(np.prod(tuple(value.shape), dtype=np.int64))
                nbytes += int(value.nbytes)
            elif isinstance(value, (list, tuple)) and all(
                    isinstance(x, (int, float)) for x in value):
                count = len(value)
                if name == "nodes_values":  # one per node: a leaf's is no threshold
                    modes = node.attributes.get("nodes_modes")
                    if modes is not None and len(modes.value) == count:
                        count -= sum(1 for m in modes.value if m == "LEAF")
                n += count
                nbytes += count * (8 if value and isinstance(value[0], int) else 4)
    return n, nbytes


def _nbits_note(c: _Ctx, pbytes: float) -> str:
    k, n = c.attr("K"), c.attr("N")
    bits, block = c.attr("bits", 4), c.attr("block_size")
    if not k or not n:
        return ""
    return f"{bits}-bit, block {block}: {8 * pbytes / (k * n):.2f} bits/weight with scales"
