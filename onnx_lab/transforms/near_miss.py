"""Near-misses: places a fusion almost applied, with the condition that failed.

Two sources, one table (:data:`COLUMNS`):

- onnx_lab's own passes: every candidate a :class:`~onnx_lab.transforms.matcher.PatternPass`
  bound structurally but whose ``check`` rejected it ("Conv → BatchNormalization: a parameter
  of /bn 'bn.scale' is not a constant"), and the skip reasons of the other graph passes;
- transformer fusions (after ``ort_transformers`` / ``onnxscript_rewrite`` ran, or on any
  model): the attention, layer-norm and Erf-Gelu subgraphs still made of primitive ops, each
  walked the way onnxruntime's fusion classes walk it (``fusion_attention.FusionAttention``:
  output path, V path, QK path, Q path, K path, mask path, one shared input) and reported at
  the first condition that fails, with onnxruntime's own debug log for that place when the
  optimizer ran (:func:`onnx_lab.transforms.transformers.capture_fusion_log`).

The transformer walks are written with the one matcher's queries
(:func:`~onnx_lab.transforms.matcher.producer_chain`, :func:`~onnx_lab.transforms.matcher.consumer`,
:func:`~onnx_lab.transforms.matcher.producer`): a producer chain stops at the first step whose
op differs and says what it found at which node, the way onnxruntime's ``match_parent_path``
does, so "not fused, because" names the condition onnxruntime's code stops at (which parent,
which input index, which condition first). They only read the graph; nothing here rewrites it.

Example:
    >>> lab.patterns(near_misses=True)[["source", "fusion", "anchor", "reason"]]
    >>> from onnx_lab.transforms.near_miss import transformer_near_misses
    >>> transformer_near_misses(lab.model)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array as _const_array
from onnx_lab.transforms.base import _REGISTRY, get_pass, pass_names
from onnx_lab.transforms.matcher import PatternPass, Step, consumers, producer, producer_chain


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The constant behind ``value`` as onnxruntime's fusions see it: an initializer counts
    even where a graph input of its name could override it (IR < 4 exports list every weight
    as an input), and Identity nodes are looked through (the optimizer removes them first;
    the TorchScript exporter routes shared weights through them)."""
    for _ in range(8):
        p = value.producer() if value is not None else None
        if p is None or p.op_type != "Identity" or not p.inputs:
            break
        value = p.inputs[0]
    return _const_array(value, stored=True)

__all__ = ["COLUMNS", "KINDS", "BERT_ATTENTION", "NearMiss", "near_misses",
           "pattern_near_misses", "transformer_near_misses"]

COLUMNS = ["kind", "source", "fusion", "anchor", "node_ids", "reason", "description", "log"]

#: ``kind`` of a row: one of onnx_lab's own graph passes, or a tool step's fusion.
KINDS = {"pattern": "onnx_lab pattern", "tool": "tool step (onnxruntime / onnxscript)"}

#: Model types whose attention onnxruntime fuses with ``fusion_attention.FusionAttention``, the
#: BERT layout the attention walker below follows. The others have their own fusion classes
#: (GPT-2: FusionGptAttentionNoPast, CLIP: FusionAttentionClip, T5: FusionT5Attention, BART:
#: FusionBartAttention) and other layouts, so only onnxruntime's log explains them.
BERT_ATTENTION = ("bert", "vit", "swin", "gpt_neox")

# The walker's first conditions describe BERT's attention layout (scores, output, Q/K/V
# paths). A Softmax that fails them is attention of another family or not BERT-shaped at all:
# before a step with a model type has run, that is no near-miss.
_LAYOUT = ("scores path", "output path", "Q path", "K path", "V path", "Q projection",
           "K projection", "V projection")


@dataclass
class NearMiss:
    """One place a fusion almost applied.

    Attributes:
        kind: ``pattern`` (onnx_lab's own graph passes) or ``tool`` (a tool step's fusions:
            ``ort_transformers``, ``onnxscript_rewrite``).
        source: the pass that would fuse it (``fuse_conv_bn``, ``ort_transformers``).
        fusion: the pattern or fused op (``conv_bn``, ``Attention``, ``LayerNormalization``).
        anchor: node id the near-miss is named after (a Softmax, ReduceMean, Erf, the head of
            a pattern).
        node_ids: the subgraph involved (render it with ``lab.render(nodes=node_ids)``).
        reason: the condition that failed.
        log: onnxruntime's own debug messages for that place (empty when not captured).
    """

    source: str
    fusion: str
    anchor: str
    node_ids: list[str]
    reason: str
    description: str = ""
    log: list[str] = field(default_factory=list)
    kind: str = "pattern"


def _frame(rows: Sequence[NearMiss]) -> pd.DataFrame:
    return pd.DataFrame([(r.kind, r.source, r.fusion, r.anchor, list(r.node_ids), r.reason,
                          r.description, list(r.log)) for r in rows], columns=COLUMNS)


# ---------------------------------------------------------------------------- own patterns
def pattern_near_misses(model: LabModel) -> list[NearMiss]:
    """Candidates of onnx_lab's graph passes that a check rejected, with the check's reason."""
    out: list[NearMiss] = []
    for name in pass_names():
        if _REGISTRY[name].kind != "graph":
            continue
        p = get_pass(name)
        p.find(model)
        if isinstance(p, PatternPass):
            for head, ids, why in getattr(p, "near_misses", []):
                ops = " → ".join(model.index.entries[i].node.op_type for i in ids
                                 if i in model.index.entries)
                out.append(NearMiss(name, p.pattern.name, head, list(ids), why,
                                    f"{ops}: {why}"))
        else:
            for msg in p.skipped:
                nid, _, why = msg.partition(": ")
                ids = [nid] if nid in model.index.entries else []
                op = model.index.entries[nid].node.op_type if ids else nid
                out.append(NearMiss(name, name, nid, ids, why or msg, f"{op}: {why or msg}"))
    return out


# ---------------------------------------------------------------------------- helpers
_prod = producer


def _readers(node: ir.Node, i: int = 0) -> list[ir.Node]:
    return consumers(node, None, i)


def _scalar(v: ir.Value | None) -> float | None:
    a = None if v is None else const_array(v)
    return float(a.reshape(-1)[0]) if a is not None and a.size == 1 else None


def _const_side(node: ir.Node) -> tuple[int, float | None]:
    """(index of the non-constant input, the scalar constant on the other side or None)."""
    for i in (1, 0):
        if i < len(node.inputs):
            c = _scalar(node.inputs[i])
            if c is not None:
                return 1 - i, c
    return 0, None


def _path(start: ir.Node, steps: Sequence[tuple[str | tuple[str, ...], int | None]]
          ) -> tuple[list[ir.Node], str | None]:
    """:func:`~onnx_lab.transforms.matcher.producer_chain` as (nodes found, None) or (nodes
    found so far, what was found instead)."""
    c = producer_chain(start, [Step(op, i) for op, i in steps])
    return c.nodes, c.failed


class _Ids:
    def __init__(self, model: LabModel) -> None:
        self.model = model

    def one(self, node: ir.Node) -> str:
        """The node id (ONNX names may be empty or repeated)."""
        return self.model.index.node_id(node) if node.graph is not None else (node.name or "?")

    def __call__(self, nodes: Sequence[ir.Node]) -> list[str]:
        out: list[str] = []
        for n in nodes:
            if n is None or n.graph is None:
                continue
            nid = self.model.index.node_id(n)
            if nid not in out:
                out.append(nid)
        return out


# ---------------------------------------------------------------------------- attention
_Q = (("Transpose", 0), ("Reshape", 0), ("Add", 0), ("MatMul", None))
_MASK_FORMS = (("Mul", "Sub", "Cast", "Unsqueeze", "Unsqueeze"), ("Mul", "Sub", "Unsqueeze",
                                                                    "Unsqueeze"))


def _data_input(node: ir.Node) -> int | None:
    """The input a mask path goes on through: the first that is not a constant (of ``1 -
    mask``, the mask: Sub's second), None where there is none or a Constant node makes it."""
    var = [i for i, x in enumerate(node.inputs) if x is not None and const_array(x) is None]
    i = var[-1] if node.op_type == "Sub" and len(var) == 2 else (var[0] if var else None)
    p = producer(node, i) if i is not None else None
    return i if p is not None and p.op_type != "Constant" else None


def _chain_up(v: ir.Value | None, limit: int = 8) -> list[ir.Node]:
    """Producers up from ``v`` through the non-constant input of each node (a mask path), by
    the matcher's :func:`~onnx_lab.transforms.matcher.producer_chain` with any op per step."""
    p = v.producer() if v is not None else None
    if p is None or p.op_type == "Constant":
        return []
    return [p, *producer_chain(p, [Step(None, _data_input)] * (limit - 1)).nodes]


def _check_mask(model: LabModel, mask: ir.Value | None) -> tuple[list[ir.Node], str | None]:
    chain = _chain_up(mask)
    nid = _Ids(model).one
    ops = tuple(n.op_type for n in chain)
    src = chain[-1].inputs[0] if chain and chain[-1].inputs and chain[-1].inputs[0] is not None \
        else None
    if ops[:len(_MASK_FORMS[0])] in _MASK_FORMS or ops[:len(_MASK_FORMS[1])] in _MASK_FORMS:
        form = next(f for f in _MASK_FORMS if ops[:len(f)] == f)
        mul = chain[0]
        _, c = _const_side(mul)
        if c is None or c >= 0:
            return chain[:len(form)], (f"mask scale: {nid(mul)} multiplies by "
                                       f"{c!r}, the optimizer needs a negative scalar constant "
                                       "(e.g. -10000)")
        base = chain[len(form) - 1].inputs[0]
        shp = base.shape if base is not None else None
        if shp is not None and len(shp) != 2:
            return chain[:len(form)], (f"mask shape: the mask {base.name!r} has rank {len(shp)}; "
                                       "the optimizer's BERT attention takes a 2-D [batch, "
                                       "sequence] mask unsqueezed twice")
        return chain[:len(form)], None
    expect = "Add ← Mul(negative constant) ← Sub(1 - mask) ← [Cast] ← Unsqueeze ← Unsqueeze"
    found = " ← ".join(["Add", *ops]) + (f" ← {src.name!r}" if src is not None
                                         and src.producer() is None else "")
    if not ops:
        return [], (f"mask path: the scores' Add reads {mask.name if mask else None!r} "
                    f"directly; the optimizer expects {expect}")
    # The one Cast the optimizer accepts sits right after Sub (position 2 of the chain).
    extra = [n for k, n in enumerate(chain) if n.op_type == "Cast" and k != 2]
    if extra:
        return chain, (f"mask path: an unexpected Cast ({nid(extra[0])}) in {found}; the "
                       f"optimizer expects {expect}")
    unsq = [n for n in chain if n.op_type == "Unsqueeze"]
    if len(unsq) == 1:
        axes = const_array(unsq[0].inputs[1]) if len(unsq[0].inputs) > 1 else None
        ax = axes.tolist() if axes is not None else unsq[0].attributes.get_ints("axes", None)
        return chain, (f"mask path: one Unsqueeze ({nid(unsq[0])}, axes {ax}) makes the 4-D "
                       f"mask; the optimizer expects two Unsqueeze nodes: {found} instead of "
                       f"{expect}")
    return chain, f"mask path: {found} instead of {expect}"


# Ops that may sit between a Softmax and the MatMul weighting the values without making it
# another computation (a NaN guard, a cast, dropout); they stop onnxruntime's QK path.
_PASS_THROUGH = ("Where", "Cast", "Dropout", "Identity")


def _between_softmax_and_values(sm: ir.Node, depth: int = 3
                                ) -> tuple[list[ir.Node], ir.Node] | None:
    """(the nodes between Softmax ``sm`` and a MatMul reading the probabilities, that MatMul)
    when the probabilities reach one only through :data:`_PASS_THROUGH` ops (an IsNaN beside
    them, the guard's condition, is no path to the values), else None."""
    frontier: list[tuple[ir.Node, list[ir.Node]]] = [(sm, [])]
    for _ in range(depth):
        nxt: list[tuple[ir.Node, list[ir.Node]]] = []
        for node, path in frontier:
            for r in _readers(node):
                if r.op_type == "MatMul" and path:
                    return path, r
                if r.op_type in _PASS_THROUGH:
                    nxt.append((r, [*path, r]))
        frontier = nxt
    return None


def _attention(model: LabModel, sm: ir.Node) -> tuple[list[ir.Node], str] | None:
    """Why the attention around Softmax ``sm`` was not fused (None: not attention-like)."""
    nodes: list[ir.Node] = [sm]
    qkv = next((r for r in _readers(sm) if r.op_type == "MatMul"), None)
    if qkv is None:
        between = _between_softmax_and_values(sm)
        if between is None:
            return None  # a Softmax that weights no values: a classifier head, not attention
        ops, qkv = between
        nid = _Ids(model).one
        guard = any(n.op_type == "IsNaN" for n in _readers(sm))
        return nodes + ops + [qkv], (
            f"QK path: the MatMul(probs, V) {nid(qkv)} reads {ops[-1].op_type} {nid(ops[-1])}, "
            f"not the Softmax {nid(sm)}"
            + (" (Where(IsNaN(p), 0, p): the NaN guard of torch's scaled_dot_product_attention "
               "export)" if guard else f" (between them: {_ops(ops)})")
            + "; the optimizer expects MatMul ← Softmax ← Add(mask) ← Div/Mul(scale) ← "
              "MatMul(Q, K)")
    nodes.append(qkv)
    # Scores: Softmax ← [Add(mask)] ← Div/Mul(scale) ← MatMul(Q, K).
    add = _prod(sm, 0)
    mask_v = None
    scale = add
    if add is not None and add.op_type == "Add":
        k = next((i for i in (0, 1) if _prod(add, i) is not None
                  and _prod(add, i).op_type in ("Div", "Mul", "MatMul")), None)
        if k is None:
            return nodes + [add], ("scores path: the Add before the Softmax has no Div/Mul "
                                   "(scale) or MatMul input")
        scale, mask_v = _prod(add, k), add.inputs[1 - k]
        nodes.append(add)
    if scale is None or scale.op_type not in ("Div", "Mul", "MatMul"):
        return nodes, (f"scores path: the Softmax reads "
                       f"{scale.op_type if scale is not None else 'a graph input'}, expected "
                       "Add(mask) ← Div/Mul(scale) ← MatMul(Q, K)")
    qk = scale if scale.op_type == "MatMul" else _prod(scale, 0)
    if scale.op_type != "MatMul":
        nodes.append(scale)
        _, c = _const_side(scale)
        if c is None:
            return nodes, (f"scores path: the scale {scale.op_type} {_Ids(model).one(scale)} "
                           "is not by a constant")
    if qk is None or qk.op_type != "MatMul":
        return nodes, "scores path: the scale does not follow a MatMul(Q, K)"
    nodes.append(qk)
    # Output: MatMul(probs, V) → Transpose → Reshape → MatMul → (Add bias | SkipLayerNorm).
    cur = qkv
    for want in ("Transpose", "Reshape", "MatMul"):
        # The optimizer walks up from the output projection: other readers of these tensors
        # (the Shape nodes of a traced reshape) do not stop it.
        readers = _readers(cur)
        nxt = [r for r in readers if r.op_type == want]
        if len(nxt) != 1:
            return nodes, (f"output path: after {cur.op_type} {_Ids(model).one(cur)} the "
                           f"optimizer expects {want}, found {_ops(readers)}")
        cur = nxt[0]
        nodes.append(cur)
    # V: Transpose ← Reshape ← Add(bias) ← MatMul.
    paths: dict[str, list[ir.Node]] = {}
    for what, start, steps in (("V", qkv, (("Transpose", 1), *_Q[1:])),
                               ("Q", qk, _Q), ("K", qk, (("Transpose", 1), *_Q[1:]))):
        got, err = _path(start, steps)
        if err and what == "Q":
            got2, err2 = _path(qk, ((("Div", "Mul"), 0), *_Q))
            if not err2:
                got, err = got2, None
        if err and what == "K":
            got2, err2 = _path(qk, (("Transpose", 1), ("Transpose", 0), *_Q[1:]))
            if not err2:
                got, err = got2, None
        nodes += got
        if err:
            if len(got) >= 2 and got[-1].op_type == "Reshape" and "MatMul" in err:
                err = f"{what} projection has no bias Add (its MatMul feeds the Reshape directly)"
            else:
                err = f"{what} path: {err}"
            return nodes, err
        paths[what] = got
    roots = {what: p[-1].inputs[0] for what, p in paths.items()}
    if len({id(v) for v in roots.values()}) != 1:
        return nodes, ("Q, K and V projections read different inputs ("
                       + ", ".join(f"{w}: {v.name if v else None}" for w, v in roots.items())
                       + "); the optimizer fuses self-attention over one input")
    if mask_v is not None:
        chain, err = _check_mask(model, mask_v)
        nodes += chain
        if err:
            return nodes, err
    roots_v = next(iter(roots.values()))
    readers = [r for r in roots_v.uses()] if roots_v is not None else []
    if sum(1 for u in {id(x.node): x.node for x in readers}.values()
           if u.op_type == "MatMul") != 3:
        return nodes, (f"the input {roots_v.name!r} of the projections is read by other "
                       "MatMuls too; the optimizer needs exactly three (Q, K, V)")
    return nodes, ("the structure matches the optimizer's BERT attention; it declined for "
                   "another reason (num_heads/hidden_size, residual Add or LayerNorm after the "
                   "output projection: see the log)")


# ---------------------------------------------------------------------------- layer norm
# onnxruntime's FusionLayerNormalization (fusion_layernorm.py) matches
#   x → ReduceMean → Sub(x, mean) → Pow(·, 2) → ReduceMean → Add(ε) → Sqrt → Div(d, ·)
#     → Mul(γ) → Add(β),  0 < ε ≤ 1e-4,  γ and β 1-D constants
# and declines silently at the first condition that fails: each is checked here in its order.
_EPS_MAX = 1e-4


def _is(value: float | None, want: float, tol: float = 1e-6) -> bool:
    return value is not None and abs(value - want) <= tol


def _ops(nodes: Sequence[ir.Node]) -> str:
    return ", ".join(n.op_type for n in nodes) or "nothing"


def _layer_norm(model: LabModel, rm: ir.Node) -> tuple[list[ir.Node], str] | None:
    nid = _Ids(model).one
    x = rm.inputs[0] if rm.inputs else None
    subs = [r for r in _readers(rm) if r.op_type == "Sub"]
    if not subs:
        return None  # a mean that is not subtracted: not a normalization
    sub = subs[0]
    nodes = [rm, sub]
    if sub.inputs[0] is not x:
        return nodes, (f"centring: {nid(sub)} subtracts the mean from "
                       f"{sub.inputs[0].name if sub.inputs[0] is not None else None!r}, not from "
                       f"the ReduceMean's input {x.name if x is not None else None!r}")
    after = _readers(sub)
    cast = next((r for r in after if r.op_type == "Cast"), None)
    squares = [r for r in (_readers(cast) if cast is not None else after)
               if r.op_type in ("Pow", "Mul")]
    if not squares:
        return nodes, (f"variance: the centred input {nid(sub)} is read by {_ops(after)}, "
                       "not squared by Pow(·, 2)")
    sq = squares[0]
    nodes += ([cast] if cast is not None else []) + [sq]
    if sq.op_type == "Mul":
        return nodes, (f"variance: the centred input is squared by Mul(d, d) ({nid(sq)}); the "
                       "optimizer's LayerNorm fusion matches Pow(d, 2) only")
    e = _scalar(sq.inputs[1]) if len(sq.inputs) > 1 else None
    if not _is(e, 2.0):
        return nodes, (f"variance: Pow exponent is {e:g} ({nid(sq)}), the optimizer needs 2"
                       if e is not None else f"variance: the Pow exponent of {nid(sq)} is not "
                       "a constant, the optimizer needs 2")
    rm2 = next((r for r in _readers(sq) if r.op_type == "ReduceMean"), None)
    if rm2 is None:
        return nodes, f"variance: the square is read by {_ops(_readers(sq))}, not a ReduceMean"
    nodes.append(rm2)
    nxt = _readers(rm2)
    if len(nxt) != 1 or nxt[0].op_type != "Add" or _const_side(nxt[0])[1] is None:
        extra = ""
        if len(nxt) == 1 and nxt[0].op_type == "Sqrt":
            after_sqrt = _readers(nxt[0])
            if after_sqrt and after_sqrt[0].op_type == "Add" \
                    and _const_side(after_sqrt[0])[1] is not None:
                extra = (f": epsilon is added after the Sqrt ({nid(after_sqrt[0])} adds "
                         f"{_const_side(after_sqrt[0])[1]:g} to the standard deviation), not "
                         "to the variance before it")
                nodes += [nxt[0], after_sqrt[0]]
        return nodes, (f"epsilon in a different place: the variance ReduceMean {nid(rm2)} is "
                       f"followed by {_ops(nxt)}, the optimizer expects Add(epsilon) → Sqrt"
                       f"{extra}")
    add = nxt[0]
    nodes.append(add)
    eps = _const_side(add)[1]
    if eps is None or not 0 < eps <= _EPS_MAX:
        return nodes, (f"epsilon is {eps:g} ({nid(add)}); the optimizer fuses only 0 < "
                       f"epsilon ≤ {_EPS_MAX:g}")
    sqrt = _readers(add)
    if len(sqrt) != 1 or sqrt[0].op_type != "Sqrt":
        return nodes, f"variance + epsilon is read by {_ops(sqrt)}, not a Sqrt"
    nodes.append(sqrt[0])
    div = _readers(sqrt[0])
    if len(div) != 1 or div[0].op_type != "Div" or div[0].inputs[0] is not sub.outputs[0]:
        return nodes, ("the centred input is not divided by the standard deviation (Div): "
                       f"the Sqrt is read by {_ops(div)}")
    nodes.append(div[0])
    mul = _readers(div[0])
    if len(mul) != 1 or mul[0].op_type != "Mul":
        return nodes, (f"scale: the normalized value is read by {_ops(mul)}, the optimizer "
                       "expects Mul(γ) then Add(β)")
    nodes.append(mul[0])
    gamma = next((v for v in mul[0].inputs if v is not div[0].outputs[0]), None)
    g = const_array(gamma) if gamma is not None else None
    if g is None or g.ndim != 1:
        return nodes, (f"scale: γ {gamma.name if gamma is not None else None!r} of "
                       f"{nid(mul[0])} is not a 1-D constant")
    bias = _readers(mul[0])
    if len(bias) != 1 or bias[0].op_type != "Add":
        return nodes, (f"bias: γ·x̂ is read by {_ops(bias)}, the optimizer expects Add(β)")
    nodes.append(bias[0])
    beta = next((v for v in bias[0].inputs if v is not mul[0].outputs[0]), None)
    b = const_array(beta) if beta is not None else None
    if b is None or b.ndim != 1:
        return nodes, (f"bias: β {beta.name if beta is not None else None!r} of "
                       f"{nid(bias[0])} is not a 1-D constant")
    return nodes, ("the structure matches a LayerNorm; the optimizer declined (an inner "
                   "value read outside the subgraph: see the log)")


# ---------------------------------------------------------------------------- gelu
# onnxruntime's FusionGelu (fusion_gelu.py) matches, from the Erf:
#   x / √2 (Div by 1.4142 ± 0.001 or by Sqrt(2)), or x · 0.7071 (Mul) → Erf → Add(1)
#   → then one of  Mul(x) → Mul(0.5)  |  Mul(0.5·x)  |  Mul(0.5) → Mul(x).
def _gelu(model: LabModel, erf: ir.Node) -> tuple[list[ir.Node], str] | None:
    nid = _Ids(model).one
    nodes = [erf]
    pre = _prod(erf, 0)
    if pre is None or pre.op_type not in ("Div", "Mul"):
        src = pre.op_type if pre is not None else "a graph input"
        return nodes, f"Erf's input comes from {src}, not x / √2 (Div) or x · 0.7071 (Mul)"
    nodes.insert(0, pre)
    k, c = _const_side(pre)
    if c is None and pre.op_type == "Div":
        sq = _prod(pre, 1)
        two = _scalar(sq.inputs[0]) if sq is not None and sq.op_type == "Sqrt" else None
        if two is not None and two >= 0:
            c, k = float(np.sqrt(two)), 0
            nodes.insert(0, sq)
    if pre.op_type == "Div":
        want, what = float(np.sqrt(2.0)), "divides x by √2 ≈ 1.4142"
    else:
        want, what = float(1 / np.sqrt(2.0)), "multiplies x by 1/√2 ≈ 0.7071"
    if c is None:
        return nodes, (f"Erf's input: {nid(pre)} is not by a constant; the exact Gelu {what}")
    if abs(c - want) > 1e-3:
        return nodes, (f"Erf's input is {'divided' if pre.op_type == 'Div' else 'multiplied'} "
                       f"by {c:g} ({nid(pre)}); the exact Gelu {what} (the optimizer allows "
                       "±0.001)")
    x = pre.inputs[k]
    add = _readers(erf)
    if len(add) != 1 or add[0].op_type != "Add":
        return nodes, f"erf(x/√2) is read by {_ops(add)}, the exact Gelu adds 1 (Add)"
    nodes.append(add[0])
    one = _const_side(add[0])[1]
    if not _is(one, 1.0):
        return nodes, (f"erf(x/√2) + {one:g} ({nid(add[0])}): the exact Gelu adds 1"
                       if one is not None else f"{nid(add[0])} adds a tensor that is not a "
                       "constant to erf(x/√2); the exact Gelu adds 1")
    mul = _readers(add[0])
    if len(mul) != 1 or mul[0].op_type != "Mul":
        return nodes, f"1 + erf(x/√2) is read by {_ops(mul)}, the exact Gelu multiplies (Mul)"
    nodes.append(mul[0])
    other = next((v for v in mul[0].inputs if v is not add[0].outputs[0]), None)
    half_at: ir.Node | None = None
    if other is x:  # x·(1 + erf) → Mul(0.5)
        after = _readers(mul[0])
        half_at = after[0] if len(after) == 1 and after[0].op_type == "Mul" else None
        if half_at is None:
            return nodes, f"x·(1 + erf(x/√2)) is read by {_ops(after)}, not multiplied by 0.5"
    elif other is not None and other.producer() is not None \
            and other.producer().op_type == "Mul" and x in other.producer().inputs:
        half_at = other.producer()  # (0.5·x)·(1 + erf)
    elif _const_side(mul[0])[1] is not None:  # 0.5·(1 + erf) → Mul(x)
        half_at = mul[0]
        after = _readers(mul[0])
        if len(after) != 1 or after[0].op_type != "Mul" or x not in after[0].inputs:
            return nodes, ("0.5·(1 + erf(x/√2)) is not multiplied by x (the Erf's input "
                           f"{x.name if x is not None else None!r})")
        nodes.append(after[0])
    else:
        src = other.producer().op_type if other is not None and other.producer() is not None \
            else repr(other.name if other is not None else None)
        return nodes, (f"1 + erf(x/√2) is multiplied by {src}, not by x, 0.5·x or 0.5 "
                       f"({nid(mul[0])})")
    if half_at is not mul[0]:
        nodes.append(half_at)
    h = _const_side(half_at)[1]
    if not _is(h, 0.5):
        return nodes, (f"the product is multiplied by {h:g} ({nid(half_at)}); the exact Gelu "
                       "multiplies by 0.5" if h is not None else f"{nid(half_at)} multiplies "
                       "by a tensor that is not a constant; the exact Gelu multiplies by 0.5")
    return nodes, "the structure matches Gelu; the optimizer declined (see the log)"


# ---------------------------------------------------------------------------- transformer
def _log_for(name: str, calls: Sequence[Any], fusions: Sequence[str]) -> list[str]:
    """onnxruntime's messages for the subgraph around node ``name``.

    Only calls of the matching fusion classes whose region holds ``name`` and that ended in a
    message of the fusion class itself ("fuse_attention: failed to match mask path"); of each,
    that message and the path-matching lines just before it (which say what was found).
    """
    out: list[str] = []
    for c in calls:
        if name not in c.region or not any(c.fusion.startswith(x) for x in fusions):
            continue
        last = max((i for i, m in enumerate(c.messages) if m.startswith("fuse")), default=None)
        if last is None:
            continue
        # "Expect Unsqueeze, Got Cast" lines say what each tried path found instead.
        for m in c.messages[:last + 1]:
            if (m.startswith(("Expect ", "fuse")) or "failed" in m) and m not in out:
                out.append(m)
    return out


def transformer_near_misses(model: LabModel, calls: Sequence[Any] = (),
                            source: str = "ort_transformers", *,
                            structural_only: bool = False,
                            model_type: str | None = None) -> pd.DataFrame:
    """The attention / LayerNorm / Erf-Gelu subgraphs of ``model`` left unfused, and why.

    Args:
        model: usually the result of a transformer fusion step.
        calls: onnxruntime's captured debug log
            (:class:`~onnx_lab.transforms.transformers.FusionCall`), attributed to a row when
            the row's anchor lies in the region the fusion tried.
        source: the step that would have fused them.
        structural_only: leave out subgraphs whose structure fits the fusion (before a fusion
            step ran they are candidates, not near-misses).
        model_type: the ``model_type`` the step ran with. For the BERT family
            (:data:`BERT_ATTENTION`) an unfused attention is walked the way
            ``FusionAttention`` walks it; for other types its reason is onnxruntime's own log
            (their attention layouts differ); None (no step ran, or onnxscript's): attention
            is reported only where BERT's layout matched and a later condition failed.

    Returns:
        One row per unfused subgraph, columns :data:`COLUMNS` (kind ``tool``; fusion:
        ``Attention``, ``LayerNormalization`` or ``Gelu``; anchor: the Softmax, first
        ReduceMean or Erf).
    """
    ids = _Ids(model)
    rows: list[NearMiss] = []
    checks = {"Softmax": ("Attention", _attention, ("Attention", "MultiHeadAttention")),
              "ReduceMean": ("LayerNormalization", _layer_norm, ("LayerNormalization",
                                                                 "SkipLayerNormalization")),
              "Erf": ("Gelu", _gelu, ("Gelu", "FastGelu", "BiasGelu"))}
    for nid, e in model.index.entries.items():
        n = e.node
        if n.op_type not in checks or n.domain not in ("", "ai.onnx"):
            continue
        fusion, fn, log_names = checks[n.op_type]
        if n.op_type == "ReduceMean" and _prod(n, 0) is not None \
                and _prod(n, 0).op_type in ("Pow", "Mul"):
            continue  # the variance ReduceMean of a chain anchored at its first one
        got = fn(model, n)
        if got is None:
            continue
        nodes, why = got
        if structural_only and why.startswith("the structure matches"):
            continue
        name = n.name or nid
        log = _log_for(name, calls, log_names)
        if fusion == "Attention" and model_type not in BERT_ATTENTION:
            if model_type is None:
                if why.startswith(_LAYOUT):
                    continue  # not BERT-shaped: another family's attention, or no attention
            else:
                said = list(dict.fromkeys(m for m in log if m.startswith("fuse")))
                why = (f"onnxruntime's {model_type} attention fusions did not match here"
                       + (f": {'; '.join(said)}" if said else
                          " (they logged nothing for this Softmax)"))
        rows.append(NearMiss(source, fusion, nid, ids(nodes), why,
                             f"{fusion} not fused at {nid}: {why}", log, kind="tool"))
    return _frame(rows)


def near_misses(model: LabModel, *, transformers: bool = True,
                step: Any = None) -> pd.DataFrame:
    """Near-misses of onnx_lab's own patterns and (``transformers=True``) unfused transformer
    subgraphs, one table (:data:`COLUMNS`).

    Args:
        model: the model version to look at.
        transformers: include the attention / LayerNorm / Erf-Gelu subgraphs.
        step: the result of a transformer fusion step (``ort_transformers``,
            ``onnxscript_rewrite``) whose model is ``model`` (``lab.results[-1]`` right after
            it, or a step that changed nothing): its ``near_misses`` (walked for its model
            type, with onnxruntime's log) stand in for the structural rows of the same
            subgraphs. Ignored for another model version.

    Columns:
        kind (str: ``pattern`` for onnx_lab's own passes, ``tool`` for a tool step's
        fusions), source (str: the pass that would apply: ``fuse_conv_bn``,
        ``ort_transformers``), fusion (str: pattern or fused op), anchor (str: node id),
        node_ids (list[str]: the subgraph), reason (str: the condition that failed),
        description (str: "Conv → BatchNormalization: ..."), log (list[str]: onnxruntime's
        debug messages, when captured).

    Example:
        >>> near_misses(lab.model).loc[lambda d: d.source == "fuse_conv_bn", "description"]
        >>> near_misses(lab.model, step=lab.results[-1])  # after lab.apply("ort_transformers")
    """
    own = _frame(pattern_near_misses(model))
    if not transformers:
        return own
    tr = transformer_near_misses(model, structural_only=True)
    ran = getattr(step, "near_misses", None) if step is not None else None
    if isinstance(ran, pd.DataFrame) and getattr(step, "model", None) is model:
        seen = set(zip(ran["fusion"], ran["anchor"]))
        keep = [k not in seen for k in zip(tr["fusion"], tr["anchor"])]
        tr = pd.concat([f for f in (ran, tr.loc[keep]) if not f.empty] or [tr],
                       ignore_index=True)
    frames = [f for f in (own, tr) if not f.empty]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else \
        (frames[0] if frames else own)
