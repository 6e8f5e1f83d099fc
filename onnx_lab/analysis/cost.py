"""Static cost model: FLOPs, MACs, parameters and bytes per node, peak activation memory, roofline.

Counts come from the inferred shapes (``LabModel.types``) and each op's attributes. MACs are
multiply-accumulates of the contraction ops (Conv, ConvTranspose, Gemm, MatMul, Einsum,
attention, RNN/LSTM/GRU and their quantized twins) — the same definition onnxsim and onnx-tool
use for their "MACs". FLOPs count every op: ``2 * MACs`` plus the element-wise work (bias adds,
activations, normalizations, pooling windows, reductions, interpolation). Data-movement ops
(Reshape, Transpose, Gather, Concat, Cast...) cost 0 FLOPs. An op without a formula, or whose
shapes are unknown, is reported as unknown (NaN and ``known`` False), never as zero.

Why our own: onnxsim's ModelInfo counts only the contraction ops and gives no per-node table;
onnx-tool counts unknown ops as zero and miscounts LSTM/GRU (it ignores the sequence length).

Example:
    >>> c = onnx_lab.open("sample:convnet").cost()
    >>> c.total["macs"], c.nodes.sort_values("flops", ascending=False).head()
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import TensorInfo
from onnx_lab.core.source import resolve
from onnx_lab.core.units import itemsize
from onnx_lab.core.values import constant_tensor, is_constant
from onnx_lab.errors import InputError

__all__ = ["cost", "Cost", "Roofline", "NODE_COLUMNS", "itemsize"]

NODE_COLUMNS = ["node_id", "graph", "op_type", "domain", "calls", "flops", "macs", "params",
                "param_bytes", "input_bytes", "output_bytes", "intensity", "known", "note"]

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


# Each counter returns (flops, macs) or None when the shapes it needs are unknown.
Counter = Callable[[_Ctx], tuple[float, float] | None]
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
        return 2.0 * macs, float(macs)
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
        flops, macs = _attention_core(b, nh, s, s, hq // nh, hv // nh)
        return flops + 2.0 * proj + b * s * w[1], macs + proj
    q = c.ins[0]
    k = c.ins[1] if len(c.ins) > 1 else None
    v = c.ins[2] if len(c.ins) > 2 else None
    if not c.need(q, k, v):
        return None
    if len(q) == 4 and len(k) == 4 and len(v) == 4:
        return _attention_core(q[0], q[1], q[2], k[2], q[3], v[3])
    if len(q) == 3 and len(k) == 3 and len(v) == 3:
        qh, kvh = c.attr("q_num_heads", 0), c.attr("kv_num_heads", 0)
        if not qh or not kvh:
            return None
        return _attention_core(q[0], qh, q[1], k[1], q[2] // qh, v[2] // kvh)
    return None


@_register("MultiHeadAttention", "GroupQueryAttention")
def _mha(c: _Ctx):
    q = c.ins[0]
    k = c.ins[1] if len(c.ins) > 1 else None
    v = c.ins[2] if len(c.ins) > 2 else None
    nh = c.attr("num_heads")
    if q is None or not nh:
        return None
    if len(q) == 3 and k is not None and len(k) == 3:
        hv = v[2] if v is not None and len(v) == 3 else q[2]
        return _attention_core(q[0], nh, q[1], k[1], q[2] // nh, hv // nh)
    if len(q) == 3 and k is not None and len(k) == 4:  # key [B, heads, L, head_size]
        return _attention_core(q[0], nh, q[1], k[2], q[2] // nh, k[3])
    if len(q) == 5:  # packed QKV [B, S, heads, 3, head_size]
        return _attention_core(q[0], nh, q[1], q[1], q[4], q[4])
    return None


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
            are NaN), note.
        memory: per main-graph node in topological order: node_id, live_bytes (activations
            alive while it runs).
        total: flops, macs, params, param_bytes (unique weights), activation_bytes (all node
            outputs), peak_activation_bytes, peak_node, nodes, unknown_nodes, unknown_ops.
        notes: caveats (unknown sizes, trip counts used or unknown, If branches).
    """

    nodes: pd.DataFrame
    memory: pd.DataFrame
    total: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    model: LabModel | None = field(default=None, repr=False)

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        """FLOPs, MACs and parameters per PyTorch module (see
        :mod:`onnx_lab.core.source_map`), in model order.

        Columns: module ('?' for nodes of unknown source), module_class, n_nodes, first_topo,
        flops, macs, params, output_bytes, share (of all FLOPs).

        Example:
            >>> lab.cost().by_module(depth=2).sort_values("flops", ascending=False)
        """
        from onnx_lab.core.source_map import group_by_module

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
    from onnx_lab.runtime.feeds import resolve_input_shapes

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
            except (TypeError, ValueError, ZeroDivisionError, IndexError) as err:
                res = None
                note = f"cannot count: {err}"
            if res is None and not note:
                known_op = counter is not None or op in _MOVE_OPS or op in _ELEMENTWISE \
                    or op in _REDUCE or op in _NORM or op in _SOFTMAX
                note = ("shapes unknown" if known_op else
                        f"no cost formula for {node.domain + '::' if node.domain else ''}{op}")
        params = pbytes = ibytes = obytes = 0.0
        for v, s in zip(node.inputs, c.ins):
            if v is None or s is None:
                continue
            size = itemsize(types[v.name].dtype if v.name in types else None) or 0
            n = _prod(s)
            ibytes += n * size
            if is_constant(v, stored=True):
                params += n
                pbytes += n * size
                param_seen[v.name] = (n, n * size)
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
                     intensity, res is not None, note))
    nodes = pd.DataFrame(rows, columns=NODE_COLUMNS)
    nodes = nodes.astype({"calls": "float64", "flops": "float64", "macs": "float64",
                          "known": "bool"})
    memory, peak, peak_node, missing = _liveness(lm, types)
    if missing:
        notes.append(f"{missing} activations of unknown size are left out of the peak memory")
    notes += call_notes
    unknown = nodes.loc[~nodes.known]
    if len(unknown):
        notes.append(f"{len(unknown)} nodes have unknown cost (NaN): "
                     + ", ".join(sorted(set(unknown.op_type))[:10]))
    total = {
        "flops": float(nodes.flops.sum()), "macs": float(nodes.macs.sum()),
        "params": int(sum(n for n, _ in param_seen.values())),
        "param_bytes": int(sum(b for _, b in param_seen.values())),
        "activation_bytes": int(nodes.output_bytes.sum()),
        "peak_activation_bytes": int(peak), "peak_node": peak_node,
        "nodes": len(nodes), "unknown_nodes": int(len(unknown)),
        "unknown_ops": sorted(set(unknown.op_type)),
    }
    return Cost(nodes=nodes, memory=memory, total=total, notes=notes, model=lm)


def _liveness(lm: LabModel, types: dict[str, TensorInfo]) -> tuple[pd.DataFrame, int, str | None,
                                                                   int]:
    """Walk the main graph in topological order keeping every activation alive from its
    producer (or the start, for graph inputs) to its last consumer (or the end, for outputs).

    Weights are not activations. Returns (per-node live bytes, peak, node at the peak, number
    of activations of unknown size).
    """
    idx = lm.index
    g = lm.graph
    order = idx.topo_order("")
    pos = {nid: i for i, nid in enumerate(order)}
    end = len(order)
    outputs = {v.name for v in g.outputs}
    missing = 0
    size: dict[str, int] = {}

    def nbytes(name: str) -> int:
        nonlocal missing
        info = types.get(name)
        item = itemsize(info.dtype) if info else None
        if info is None or info.shape is None or item is None or any(
                not isinstance(d, int) for d in info.shape):
            missing += 1
            return 0
        return int(math.prod(info.shape) * item)

    def last_use(name: str, default: int) -> int:
        if name in outputs:
            return end
        users = [pos[u] for u in idx.consumers.get(name, ()) if u in pos]
        # Body nodes reading outer values keep them alive until their owner runs.
        for u in idx.consumers.get(name, ()):
            if u not in pos:
                owner = idx.entries[u].graph.split("/")[0]
                if owner in pos:
                    users.append(pos[owner])
        return max(users, default=default)

    free_at: dict[int, list[str]] = {}
    live = 0
    for v in g.inputs:
        if v.name in g.initializers or not v.name:
            continue
        size[v.name] = nbytes(v.name)
        live += size[v.name]
        free_at.setdefault(last_use(v.name, -1), []).append(v.name)
    for name in free_at.pop(-1, []):
        live -= size[name]
    peak, peak_node = live, None
    rows = []
    for i, nid in enumerate(order):
        node = idx.entries[nid].node
        for o in node.outputs:
            if not o.name or is_constant(o, stored=True):
                continue
            size[o.name] = nbytes(o.name)
            live += size[o.name]
            free_at.setdefault(last_use(o.name, i), []).append(o.name)
        rows.append((nid, live))
        if live > peak:
            peak, peak_node = live, nid
        for name in free_at.pop(i, []):
            live -= size[name]
    return pd.DataFrame(rows, columns=["node_id", "live_bytes"]), peak, peak_node, missing
