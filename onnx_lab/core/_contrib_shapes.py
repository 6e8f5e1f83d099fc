"""Shapes through onnxruntime's fused operators (``com.microsoft``), which ONNX does not know.

ONNX shape inference has no schema for ``FusedConv``, ``Attention``,
``SkipLayerNormalization``, ``BiasGelu``... — the ops onnxruntime's optimizers write — so it
leaves their outputs untyped, and with them everything downstream: after ``ort:extended`` a
ResNet-50 had 88 of 198 tensors without a shape and a cost of "0 GFLOPs, 88 unknown nodes".

:func:`complete` fills the gap after inference ran: it walks the graph in order and types each
still-untyped output whose inputs are typed, by a rule for the fused ops (their output shapes
follow from their inputs as onnxruntime's contrib op schemas define them) and by ONNX's own
per-node inference for the standard ops behind them. ONNX-ML ops whose ONNX inference gives
no shape (DictVectorizer, Scaler, Normalizer, Imputer, LinearRegressor, SVMRegressor,
ArrayFeatureExtractor) get
rules too (:data:`ML_RULES`, checked against onnxruntime's kernels). Ops without a rule stay
untyped (never guessed). One standard op gets a fallback too: a Reshape whose target ONNX could not evaluate
keeps the rank its target's length gives (:func:`_reshape_rank`). The rules were checked against the shapes onnxruntime produces
(tests/core/test_contrib_shapes.py runs the fused models and compares).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

import onnx

from onnx_lab.core._proto import attribute_bodies

logger = logging.getLogger(__name__)

__all__ = ["complete", "needs_completion", "CONTRIB_DOMAIN", "RULES", "ML_DOMAIN", "ML_RULES"]

CONTRIB_DOMAIN = "com.microsoft"

Dim = int | str | None
#: (elem type, dims or None for unknown rank)
Typed = tuple[int, list[Dim] | None]


def _named(d: onnx.TensorShapeProto.Dimension) -> bool:
    """A dim with a value or a real name (``unk__3`` is ONNX inference's "unknown")."""
    return d.HasField("dim_value") or (d.HasField("dim_param") and bool(d.dim_param)
                                       and not d.dim_param.startswith("unk__"))


def _typed(tp: onnx.TypeProto | None) -> Typed | None:
    if tp is None or not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    dims: list[Dim] = []
    for d in tt.shape.dim:
        dims.append(None if not _named(d) else int(d.dim_value) if d.HasField("dim_value")
                    else d.dim_param)
    return (tt.elem_type, dims)


def _type_proto(elem: int, dims: Sequence[Dim] | None) -> onnx.TypeProto:
    return onnx.helper.make_tensor_type_proto(
        elem, None if dims is None else [d if isinstance(d, (int, str)) else None for d in dims])


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _div(d: Dim, k: int) -> Dim:
    return d // k if isinstance(d, int) and k and d % k == 0 else None


def _mul(d: Dim, k: int) -> Dim:
    return d * k if isinstance(d, int) else None


# ------------------------------------------------------------------------------- rules
# A rule gets the node and the types of its inputs (None where absent or untyped) and returns
# the types of its outputs (None for an output it cannot type), or None to give up.
Rule = Callable[[onnx.NodeProto, list[Typed | None]], list[Typed | None] | None]


def _like_input0(node, ins):
    """Elementwise (Gelu, FastGelu, BiasGelu, QuickGelu, RotaryEmbedding...): out = in0."""
    return [ins[0]] if ins and ins[0] is not None else None


def _layer_norm(node, ins):
    """SkipLayerNormalization / SkipSimplifiedLayerNormalization / (Simplified)LayerNorm:
    output, then mean / inv_std_var ([..., 1], float), then the input+skip sum."""
    x = ins[0] if ins else None
    if x is None or x[1] is None:
        return None
    stat = (onnx.TensorProto.FLOAT, list(x[1][:-1]) + [1])
    if node.op_type.startswith("Skip"):
        return [x, stat, stat, x]
    if node.op_type == "SimplifiedLayerNormalization":
        return [x, stat]
    return [x, stat, stat]


def _attention(node, ins):
    """Attention: input [B, S, H_in], weights [H_in, 3·H] (qkv_hidden_sizes: the value's
    width is its last entry) -> [B, S, H_v]."""
    x, w = (ins + [None, None])[:2]
    if x is None or x[1] is None or len(x[1]) != 3 or w is None or w[1] is None \
            or len(w[1]) != 2:
        return None
    sizes = _attr(node, "qkv_hidden_sizes")
    hv = int(sizes[2]) if sizes else _div(w[1][1], 3)
    return [(x[0], [x[1][0], x[1][1], hv])]


def _mha(node, ins):
    """MultiHeadAttention: query [B, S, D] -> [B, S, D_v] (D_v from a [B, L, D_v] value or
    a [B, N, L, H] one, else D); packed [B, S, N, 3, H] query -> [B, S, N·H]."""
    q = ins[0] if ins else None
    if q is None or q[1] is None:
        return None
    v = ins[2] if len(ins) > 2 else None
    heads = _attr(node, "num_heads")
    if len(q[1]) == 5:
        n, h = q[1][2], q[1][4]
        return [(q[0], [q[1][0], q[1][1], n * h if isinstance(n, int) and isinstance(h, int)
                        else None])]
    if len(q[1]) != 3:
        return None
    dv: Dim = q[1][2]
    if v is not None and v[1] is not None:
        if len(v[1]) == 3:
            dv = v[1][2]
        elif len(v[1]) == 4 and heads:
            dv = _mul(v[1][3], int(heads))
        else:
            return None
    return [(q[0], [q[1][0], q[1][1], dv])]


def _gqa(node, ins):
    """GroupQueryAttention: query [B, S, D] -> [B, S, num_heads·head_size] (head_size =
    D / num_heads, or D / (num_heads + 2·kv_num_heads) when Q, K, V come packed)."""
    q = ins[0] if ins else None
    heads, kv = _attr(node, "num_heads"), _attr(node, "kv_num_heads")
    if q is None or q[1] is None or len(q[1]) != 3 or not heads:
        return None
    packed = len(ins) < 2 or ins[1] is None
    if packed and not kv:
        return None
    head = _div(q[1][2], int(heads) + (2 * int(kv) if packed else 0))
    out: list[Typed | None] = [(q[0], [q[1][0], q[1][1], _mul(head, int(heads))])]
    # present_key / present_value [B, kv_num_heads, past + new, head_size] (a separate past
    # buffer; with a shared one the length is the buffer's, which the declared type gives).
    past = ins[3] if len(ins) > 3 else None
    if kv and past is not None and past[1] is not None and len(past[1]) == 4:
        p, s = past[1][2], q[1][1]
        total = p + s if isinstance(p, int) and isinstance(s, int) else None
        out += [(past[0], [q[1][0], int(kv), total, head])] * 2
    return out


def _embed_layer_norm(node, ins):
    """EmbedLayerNormalization: input_ids [B, S], word_embedding [V, H] -> output [B, S, H],
    mask_index [B] (int32), embedding_sum [B, S, H]."""
    ids = ins[0] if ins else None
    word = ins[2] if len(ins) > 2 else None
    if ids is None or ids[1] is None or len(ids[1]) != 2 or word is None \
            or word[1] is None or len(word[1]) != 2:
        return None
    out = (word[0], [ids[1][0], ids[1][1], word[1][1]])
    return [out, (onnx.TensorProto.INT32, [ids[1][0]]), out]


def _matmul_nbits(node, ins):
    """MatMulNBits: A [..., K] -> [..., N] (attribute N)."""
    a, n = (ins[0] if ins else None), _attr(node, "N")
    if a is None or a[1] is None or not n:
        return None
    return [(a[0], list(a[1][:-1]) + [int(n)])]


def _as_standard(op_type: str, drop: Sequence[str] = (), n_inputs: int | None = None,
                 elem: int | None = None) -> Rule:
    """A fused op whose shape is that of a standard op (FusedConv is a Conv with an
    activation, FusedGemm a Gemm, DynamicQuantizeMatMul a MatMul): ONNX's own inference of
    that op on the node without its extra attributes and inputs."""

    def rule(node, ins):
        std = onnx.NodeProto()
        std.CopyFrom(node)
        std.op_type, std.domain = op_type, ""
        keep = [a for a in std.attribute if a.name not in drop]
        del std.attribute[:]
        std.attribute.extend(keep)
        if n_inputs is not None:
            del std.input[n_inputs:]
        # The stand-in's inputs typed alike (ONNX's MatMul would reject int8 weights beside
        # float activations, which these ops take).
        same = [None if t is None else (elem or t[0], t[1]) for t in ins[:len(std.input)]]
        out = _standard(std, same)
        if out is None:
            return None
        if elem is not None:
            out = [None if t is None else (elem, t[1]) for t in out]
        return out + [None] * (len(node.output) - len(out))

    return rule


def _fused_matmul(node, ins):
    """FusedMatMul: alpha·op(A)·op(B), transA/transB on the last two dims."""
    if _attr(node, "transBatchA", 0) or _attr(node, "transBatchB", 0):
        return None
    a, b = (ins + [None, None])[:2]
    if a is None or b is None or a[1] is None or b[1] is None:
        return None

    def t(x: Typed, flag: str) -> Typed:
        if not _attr(node, flag, 0) or len(x[1]) < 2:  # type: ignore[arg-type]
            return x
        d = list(x[1])  # type: ignore[arg-type]
        d[-1], d[-2] = d[-2], d[-1]
        return (x[0], d)

    std = onnx.helper.make_node("MatMul", list(node.input[:2]), list(node.output[:1]))
    return _standard(std, [t(a, "transA"), t(b, "transB")])


_ACTIVATION = ("activation", "activation_params", "activation_alpha", "activation_beta",
               "activation_gamma")

#: Output-type rules of onnxruntime's fused ops (domain ``com.microsoft``).
RULES: dict[str, Rule] = {
    **dict.fromkeys(("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "RotaryEmbedding"),
                    _like_input0),
    **dict.fromkeys(("SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                     "LayerNormalization", "SimplifiedLayerNormalization"), _layer_norm),
    "Attention": _attention,
    "MultiHeadAttention": _mha,
    "GroupQueryAttention": _gqa,
    "EmbedLayerNormalization": _embed_layer_norm,
    "MatMulNBits": _matmul_nbits,
    "FusedConv": _as_standard("Conv", _ACTIVATION, n_inputs=3),
    "FusedGemm": _as_standard("Gemm", _ACTIVATION),
    "FusedMatMul": _fused_matmul,
    "DynamicQuantizeMatMul": _as_standard("MatMul", n_inputs=2, elem=onnx.TensorProto.FLOAT),
    "MatMulIntegerToFloat": _as_standard("MatMul", n_inputs=2, elem=onnx.TensorProto.FLOAT),
}

# ------------------------------------------------------------------------------- ONNX-ML
ML_DOMAIN = "ai.onnx.ml"


def _float_like_input0(node, ins):
    """Scaler, Normalizer: float32 of the input's shape (onnx infers no shape for them)."""
    if not ins or ins[0] is None:
        return None
    return [(onnx.TensorProto.FLOAT, ins[0][1])]


def _same_as_input0(node, ins):
    """Imputer: the input's type and shape."""
    return [ins[0]] if ins and ins[0] is not None else None


def _rows(ins) -> Dim | None:
    """The row count of a model's [N, C] input ([C]: one row), None when unknown."""
    if not ins or ins[0] is None or ins[0][1] is None:
        return None
    dims = ins[0][1]
    return 1 if len(dims) == 1 else dims[0] if len(dims) == 2 else None


def _linear_regressor(node, ins):
    """LinearRegressor: [N, targets] float32 (onnxruntime's kernel; onnx infers nothing)."""
    rows = _rows(ins)
    if rows is None:
        return None
    return [(onnx.TensorProto.FLOAT, [rows, int(_attr(node, "targets", 1))])]


def _svm_regressor(node, ins):
    rows = _rows(ins)
    if rows is None:
        return None
    return [(onnx.TensorProto.FLOAT, [rows, 1])]


def _dict_vectorizer(node, ins):
    """DictVectorizer: [1, len(vocabulary)] of the map's value type (one map, one row, as
    onnxruntime's kernel writes it)."""
    vocab = _attr(node, "int64_vocabulary") or _attr(node, "string_vocabulary")
    if not vocab or not ins or ins[0] is None:
        return None
    return [(ins[0][0], [1, len(vocab)])]


def _array_feature_extractor(node, ins):
    """ArrayFeatureExtractor: X with its last dim replaced by the number of indices in Y
    (every index, whatever Y's shape); a 1-D X gives [1, indices] (onnxruntime's kernel).
    skl2onnx's nearest-neighbour and label outputs read their classes through it."""
    if len(ins) < 2 or ins[0] is None or ins[1] is None or not ins[0][1] \
            or ins[1][1] is None:
        return None
    sizes = [d for d in ins[1][1] if d != 1]
    if all(isinstance(d, int) for d in sizes):
        count: Dim = math.prod(sizes)
    elif len(sizes) == 1 and isinstance(sizes[0], str):
        count = sizes[0]
    else:
        return None  # a product of named dims: no single name for it
    x = list(ins[0][1])
    return [(ins[0][0], [1, count] if len(x) == 1 else [*x[:-1], count])]


#: Output-shape rules of ONNX-ML ops whose ONNX inference leaves the shape unknown.
ML_RULES: dict[str, Rule] = {
    "Scaler": _float_like_input0,
    "Normalizer": _float_like_input0,
    "Imputer": _same_as_input0,
    "LinearRegressor": _linear_regressor,
    "SVMRegressor": _svm_regressor,
    "DictVectorizer": _dict_vectorizer,
    "ArrayFeatureExtractor": _array_feature_extractor,
}


_WATCHED = frozenset(RULES) | frozenset(ML_RULES)  # op types needs_completion looks at


def _ml_rule(node: onnx.NodeProto) -> Rule | None:
    return ML_RULES.get(node.op_type) if node.domain == ML_DOMAIN else None


def _map_values(graph: onnx.GraphProto) -> dict[str, Typed]:
    """Map-typed values of ``graph`` as (value elem type, no shape): what DictVectorizer's
    rule reads."""
    out: dict[str, Typed] = {}
    for vi in (*graph.input, *graph.value_info):
        if vi.type.HasField("map_type"):
            vt = vi.type.map_type.value_type
            if vt.HasField("tensor_type"):
                out[vi.name] = (vt.tensor_type.elem_type, None)
    return out


# ------------------------------------------------------------------------------- the walk
_OPSET = 17  # standard schemas for the rules' stand-in ops (Conv, Gemm, MatMul)


def _standard(node: onnx.NodeProto, ins: Sequence[Typed | None],
              opset: int = _OPSET, data: Mapping[str, onnx.TensorProto] | None = None
              ) -> list[Typed | None] | None:
    """ONNX's inference of one standard node from its inputs' types (None when it fails)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001 - no such op at that opset
        return None
    types = {}
    for name, t in zip(node.input, ins):
        if name:
            if t is None:
                return None
            types[name] = _type_proto(*t)
    data = data or {}
    try:
        # the data of this node's inputs (not a pass over every tensor of the graph per
        # node: that made completing a graph of 20,000 nodes take 10 s)
        out = onnx.shape_inference.infer_node_outputs(
            schema, node, types, {k: data[k] for k in types if k in data})
    except Exception:  # noqa: BLE001 - inference rejects the node: leave it untyped
        return None
    return [_typed(out.get(o)) if o else None for o in node.output]


def _valued(t: onnx.TypeProto | None) -> bool:
    """Typed with a value for every dim (nothing left for the walk to fill)."""
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in t.tensor_type.shape.dim)


def _merge(old: Typed | None, new: Typed) -> Typed | None:
    """``old`` with the dims it lacks taken from ``new``; None when that adds nothing or
    the two disagree (a declared type is kept then)."""
    if new[1] is None:
        return None
    if old is None or old[1] is None:
        return (old[0] if old and old[0] else new[0], list(new[1]))
    if len(old[1]) != len(new[1]):
        return None
    dims: list[Dim] = []
    better = False
    for a, b in zip(old[1], new[1]):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            return None
        if (a is None and b is not None) or (isinstance(a, str) and isinstance(b, int)):
            # an unknown dim, or a declared symbol the inputs' sizes give a value (as ONNX's
            # own inference merges a declared output: TorchScript declares a BERT's
            # last_hidden_state ['LayerNormalizationlast_hidden_state_dim_0', ..., 64])
            better = True
            dims.append(b)
        else:
            dims.append(a)
    return (old[0] or new[0], dims) if better else None


def _unknown_to_onnx(node: onnx.NodeProto, opset: int) -> bool:
    """A fused op ONNX has no schema for: onnxruntime's domain, or a standard-domain op its
    optimizer writes below the opset that defines it (LayerNormalization at opset 14)."""
    if node.domain == CONTRIB_DOMAIN:
        return True
    return node.domain in ("", "ai.onnx") and node.op_type in RULES and \
        not onnx.defs.has(node.op_type, opset, "")


def _opset(opsets: Mapping[str, int]) -> int:
    return int(opsets.get("", opsets.get("ai.onnx", _OPSET)) or _OPSET)


def _reshape_rank(node: onnx.NodeProto, ins: list[Typed | None]) -> list[Typed | None] | None:
    """Reshape: the output's rank is the target's length, whatever its values. Before
    opset 14, ONNX's Reshape inference gives up on the whole shape when the target is
    computed (PP-OCRv4's recognizer, a Paddle export at opset 12: ``[batch, 120, -1]`` from
    ``Shape``), leaving everything after it untyped."""
    data = ins[0] if ins else None
    target = ins[1] if len(ins) > 1 else None
    if data is None or target is None or target[1] is None or len(target[1]) != 1 \
            or not isinstance(target[1][0], int):
        return None
    return [(data[0], [None] * target[1][0])]


def _rankless_reshapes(graph: onnx.GraphProto, reshapes: list[onnx.NodeProto]) -> bool:
    """Whether some Reshape's output has no rank though its target's length is known
    (``reshapes``: the graph's standard Reshape nodes with a target)."""
    if not reshapes:
        return False
    # Only the types the Reshapes read or write: a whole-graph map costs more than the
    # check on graphs of 10^5 nodes.
    wanted = {x for n in reshapes for x in (n.output[0], n.input[1])}
    shaped = {vi.name: vi.type for vi in (*graph.input, *graph.value_info, *graph.output)
              if vi.name in wanted}
    for t in graph.initializer:
        if t.name in wanted:
            shaped[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
    for n in reshapes:
        if not _known(shaped.get(n.output[0])):
            target = _typed(shaped.get(n.input[1]))
            if target is not None and target[1] is not None and len(target[1]) == 1 \
                    and isinstance(target[1][0], int):
                return True
    return False


def _known(t: onnx.TypeProto | None) -> bool:
    """Typed with a rank."""
    return t is not None and t.HasField("tensor_type") and t.tensor_type.HasField("shape")


def needs_completion(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> bool:
    """Whether ``graph`` or an If/Loop/Scan body in it has a fused op
    (:func:`_unknown_to_onnx`) with an output inference left untyped, or a Reshape inference
    left without a rank (:func:`_reshape_rank`)."""
    opset = _opset(opsets)
    return any(_needs_completion(g, opset) for g in _graphs(graph))


# The ops that hold graphs in their attributes (ONNX's and onnxruntime's generation ops): only
# their attributes are read (reading every node's made needs_completion 7x slower on 200k nodes)
_BODY_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap", "BeamSearch", "GreedySearch",
                       "Sampling", "WhisperBeamSearch"})


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every body under it."""
    out, todo = [], [graph]
    while todo:
        g = todo.pop()
        out.append(g)
        for n in g.node:
            if n.op_type not in _BODY_OPS:
                continue
            for a in n.attribute:
                todo.extend(body for _, body in attribute_bodies(a))
    return out


def _needs_completion(graph: onnx.GraphProto, opset: int) -> bool:
    # One pass over the nodes, reading a node's domain only for the op types that matter
    # (graphs of 10^5 nodes have few of them).
    fused: list[onnx.NodeProto] = []
    reshapes: list[onnx.NodeProto] = []
    for n in graph.node:
        op = n.op_type
        if op == "Reshape":  # (neither in RULES nor in ML_RULES)
            if n.domain in ("", "ai.onnx") and len(n.input) > 1:
                reshapes.append(n)
        elif op in _WATCHED and ((op in RULES and _unknown_to_onnx(n, opset))
                                 or _ml_rule(n) is not None):
            fused.append(n)
    if fused:
        typed = {vi.name for vi in (*graph.value_info, *graph.output) if _valued(vi.type)}
        if any(o and o not in typed for n in fused for o in n.output):
            return True
    return _rankless_reshapes(graph, reshapes)


def complete(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> int:
    """Type, in ``graph`` and the If/Loop/Scan bodies in it, in node order, the outputs
    inference left untyped or with unknown dims: fused ops by :data:`RULES`, standard ops by
    ONNX's per-node inference. A declared value is never changed; unknown dims are filled, and
    so are declared symbols the inputs' sizes give a value (as ONNX's inference does). Writes
    into ``graph.value_info`` (or the graph output's entry; a body's own); returns how many
    outputs gained. A body reads the outer values typed before its node: a merged decoder
    quantized to MatMulNBits holds them all in its If branches, where nothing after the
    first MatMulNBits had a shape (a cost of 80 unknown nodes and no KV cache)."""
    return _complete(graph, _opset(opsets), {}, {})


def _complete(graph: onnx.GraphProto, opset: int, outer: Mapping[str, onnx.TypeProto],
              outer_data: Mapping[str, onnx.TensorProto]) -> int:
    types: dict[str, onnx.TypeProto] = dict(outer)
    entries: dict[str, onnx.ValueInfoProto] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type
    for vi in (*graph.value_info, *graph.output):
        entries.setdefault(vi.name, vi)
    data: dict[str, onnx.TensorProto] = dict(outer_data)
    for t in graph.initializer:
        types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
        data[t.name] = t
    added = 0
    gained: set[str] = set()  # outputs this walk typed
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.domain in ("", "ai.onnx"):
            value = _attr(node, "value")
            if isinstance(value, onnx.TensorProto):
                data[node.output[0]] = value
        for a in node.attribute if node.op_type in _BODY_OPS else ():
            for _, body in attribute_bodies(a):
                if any(_needs_completion(g, opset) for g in _graphs(body)):
                    added += _complete(body, opset, types, data)
        todo = [o for o in node.output if o and not _valued(types.get(o))]
        if not todo:
            continue
        ins = [_typed(types.get(i)) if i else None for i in node.input]
        ml = _ml_rule(node)
        if ml is not None:
            if node.op_type == "DictVectorizer":
                ins = [_map_values(graph).get(i) for i in node.input]
            try:
                outs = ml(node, ins)
            except Exception:  # noqa: BLE001 - a malformed node: leave it untyped
                logger.debug("no shape for %s %s", node.op_type, node.name, exc_info=True)
                outs = None
        elif _unknown_to_onnx(node, opset):
            rule = RULES.get(node.op_type)
            try:
                outs = rule(node, ins) if rule is not None else None
            except Exception:  # noqa: BLE001 - a malformed node: leave it untyped
                logger.debug("no shape for %s %s", node.op_type, node.name, exc_info=True)
                outs = None
        elif node.domain in ("", "ai.onnx") and (
                node.op_type == "Reshape" or any(i in gained for i in node.input)) and not any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute):
            # Only where this walk typed an input (or a Reshape ONNX gave up on): inference
            # already did the rest, and a node costs ~50 us here.
            outs = _standard(node, ins, opset, data)
            if node.op_type == "Reshape" and (not outs or outs[0] is None or outs[0][1] is None):
                outs = _reshape_rank(node, ins)
        else:
            outs = None
        for name, t in zip(node.output, outs or ()):
            if name not in todo or t is None:
                continue
            merged = _merge(_typed(types.get(name)), t)
            if merged is None:
                continue
            entry = entries.get(name)
            if entry is None:
                entry = entries[name] = graph.value_info.add()
                entry.name = name
            entry.type.CopyFrom(_type_proto(*merged))
            types[name] = entry.type
            gained.add(name)
            added += 1
    return added
