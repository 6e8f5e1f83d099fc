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
from onnx_lab.core.values import const_array

__all__ = ["COLUMNS", "NearMiss", "near_misses", "pattern_near_misses",
           "transformer_near_misses"]

COLUMNS = ["source", "fusion", "anchor", "node_ids", "reason", "description", "log"]


@dataclass
class NearMiss:
    """One place a fusion almost applied.

    Attributes:
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


def _frame(rows: Sequence[NearMiss]) -> pd.DataFrame:
    return pd.DataFrame([(r.source, r.fusion, r.anchor, list(r.node_ids), r.reason,
                          r.description, list(r.log)) for r in rows], columns=COLUMNS)


# ---------------------------------------------------------------------------- own patterns
def pattern_near_misses(model: LabModel) -> list[NearMiss]:
    """Candidates of onnx_lab's graph passes that a check rejected, with the check's reason."""
    from onnx_lab.transforms.base import _REGISTRY, get_pass, pass_names
    from onnx_lab.transforms.matcher import PatternPass

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
def _prod(node: ir.Node | None, i: int) -> ir.Node | None:
    if node is None or i >= len(node.inputs) or node.inputs[i] is None:
        return None
    return node.inputs[i].producer()


def _readers(node: ir.Node, i: int = 0) -> list[ir.Node]:
    out: list[ir.Node] = []
    for u in node.outputs[i].uses():
        if all(u.node is not n for n in out):
            out.append(u.node)
    return out


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
    """Follow producers from ``start``: each step (op type(s), input index or None for any).

    Returns (nodes found, None) or (nodes found so far, what was found instead).
    """
    found: list[ir.Node] = []
    cur = start
    for ops, idx in steps:
        ops = (ops,) if isinstance(ops, str) else ops
        cands = [idx] if idx is not None else range(len(cur.inputs))
        nxt = None
        got = []
        for i in cands:
            p = _prod(cur, i)
            if p is not None and p.op_type in ops:
                nxt = p
                break
            got.append(p.op_type if p is not None else
                       (f"input {cur.inputs[i].name!r}" if i < len(cur.inputs)
                        and cur.inputs[i] is not None else "nothing"))
        if nxt is None:
            return found, f"expected {'/'.join(ops)} before {cur.op_type}, found " \
                          f"{' or '.join(dict.fromkeys(got)) or 'nothing'}"
        found.append(nxt)
        cur = nxt
    return found, None


class _Ids:
    def __init__(self, model: LabModel) -> None:
        self.model = model

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


def _chain_up(v: ir.Value | None, limit: int = 8) -> list[ir.Node]:
    """Producers up from ``v`` through the non-constant input of each node (a mask path)."""
    out: list[ir.Node] = []
    while v is not None and len(out) < limit:
        p = v.producer()
        if p is None or p.op_type in ("Constant",):
            break
        out.append(p)
        nxt = [x for x in p.inputs if x is not None and const_array(x) is None]
        v = nxt[-1] if p.op_type == "Sub" and len(nxt) == 2 else (nxt[0] if nxt else None)
    return out


def _check_mask(mask: ir.Value | None) -> tuple[list[ir.Node], str | None]:
    chain = _chain_up(mask)
    ops = tuple(n.op_type for n in chain)
    src = chain[-1].inputs[0] if chain and chain[-1].inputs and chain[-1].inputs[0] is not None \
        else None
    if ops[:len(_MASK_FORMS[0])] in _MASK_FORMS or ops[:len(_MASK_FORMS[1])] in _MASK_FORMS:
        form = next(f for f in _MASK_FORMS if ops[:len(f)] == f)
        mul = chain[0]
        _, c = _const_side(mul)
        if c is None or c >= 0:
            return chain[:len(form)], (f"mask scale: {mul.name or 'the mask Mul'} multiplies by "
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
        return chain, (f"mask path: an unexpected Cast ({extra[0].name}) in {found}; the "
                       f"optimizer expects {expect}")
    unsq = [n for n in chain if n.op_type == "Unsqueeze"]
    if len(unsq) == 1:
        axes = const_array(unsq[0].inputs[1]) if len(unsq[0].inputs) > 1 else None
        ax = axes.tolist() if axes is not None else unsq[0].attributes.get_ints("axes", None)
        return chain, (f"mask path: one Unsqueeze ({unsq[0].name}, axes {ax}) makes the 4-D "
                       f"mask; the optimizer expects two Unsqueeze nodes: {found} instead of "
                       f"{expect}")
    return chain, f"mask path: {found} instead of {expect}"


def _attention(model: LabModel, sm: ir.Node) -> tuple[list[ir.Node], str] | None:
    """Why the attention around Softmax ``sm`` was not fused (None: not attention-like)."""
    nodes: list[ir.Node] = [sm]
    qkv = next((r for r in _readers(sm) if r.op_type == "MatMul"), None)
    if qkv is None:
        return None  # a Softmax that does not weight values: a classifier head, not attention
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
            return nodes, f"scores path: the scale {scale.op_type} {scale.name} is not by a constant"
    if qk is None or qk.op_type != "MatMul":
        return nodes, "scores path: the scale does not follow a MatMul(Q, K)"
    nodes.append(qk)
    # Output: MatMul(probs, V) → Transpose → Reshape → MatMul → (Add bias | SkipLayerNorm).
    cur = qkv
    for want in ("Transpose", "Reshape", "MatMul"):
        nxt = [r for r in _readers(cur)]
        if len(nxt) != 1 or nxt[0].op_type != want:
            return nodes, (f"output path: after {cur.op_type} {cur.name} the optimizer expects "
                           f"{want}, found {', '.join(r.op_type for r in nxt) or 'nothing'}")
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
        chain, err = _check_mask(mask_v)
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
def _layer_norm(model: LabModel, rm: ir.Node) -> tuple[list[ir.Node], str] | None:
    subs = [r for r in _readers(rm) if r.op_type == "Sub"]
    if not subs:
        return None
    sub = subs[0]
    nodes = [rm, sub]
    sq = next((r for r in _readers(sub) if r.op_type in ("Pow", "Mul")), None)
    if sq is None:
        return nodes, "variance: the centred input is neither squared by Pow(2) nor Mul(x, x)"
    nodes.append(sq)
    if sq.op_type == "Pow":
        e = _scalar(sq.inputs[1])
        if e != 2.0:
            return nodes, f"variance: Pow exponent is {e}, the optimizer needs 2"
    rm2 = next((r for r in _readers(sq) if r.op_type == "ReduceMean"), None)
    if rm2 is None:
        return nodes, "variance: no ReduceMean after the square"
    nodes.append(rm2)
    nxt = _readers(rm2)
    if len(nxt) != 1 or nxt[0].op_type != "Add" or _const_side(nxt[0])[1] is None:
        found = ", ".join(f"{n.op_type}" for n in nxt) or "nothing"
        extra = ""
        if nxt and nxt[0].op_type == "Sqrt":
            after = _readers(nxt[0])
            if after and after[0].op_type == "Add" and _const_side(after[0])[1] is not None:
                extra = (f": epsilon is added after the Sqrt ({after[0].name}), not to the "
                         "variance before it")
                nodes += [nxt[0], after[0]]
        return nodes, (f"epsilon in a different place: the variance ReduceMean is followed by "
                       f"{found}, the optimizer expects Add(epsilon) → Sqrt{extra}")
    add = nxt[0]
    nodes.append(add)
    sqrt = _readers(add)
    if len(sqrt) != 1 or sqrt[0].op_type != "Sqrt":
        return nodes, "no Sqrt after variance + epsilon"
    nodes.append(sqrt[0])
    div = _readers(sqrt[0])
    if len(div) != 1 or div[0].op_type != "Div" or div[0].inputs[0] is not sub.outputs[0]:
        return nodes, "the centred input is not divided by the standard deviation (Div)"
    nodes.append(div[0])
    axes = rm.attributes.get_ints("axes", None)
    if axes is None and len(rm.inputs) > 1:
        a = const_array(rm.inputs[1])
        axes = a.tolist() if a is not None else None
    if axes is not None and list(axes) not in ([-1],):
        shp = rm.inputs[0].shape if rm.inputs[0] is not None else None
        if not (shp is not None and list(axes) == [len(shp) - 1]):
            return nodes, f"ReduceMean over axes {list(axes)}, the optimizer needs the last axis"
    return nodes, ("the structure matches a LayerNorm; the optimizer declined (scale/bias "
                   "Mul/Add not constant, or an output read elsewhere: see the log)")


# ---------------------------------------------------------------------------- gelu
def _gelu(model: LabModel, erf: ir.Node) -> tuple[list[ir.Node], str] | None:
    nodes = [erf]
    pre = _prod(erf, 0)
    if pre is None or pre.op_type not in ("Div", "Mul"):
        return nodes, "Erf's input is not x / sqrt(2) (Div) or x * 0.7071 (Mul)"
    nodes.insert(0, pre)
    _, c = _const_side(pre)
    want = np.sqrt(2.0) if pre.op_type == "Div" else 1 / np.sqrt(2.0)
    if c is None or abs(c - want) > 1e-3:
        return nodes, f"Erf's input is scaled by {c}, the exact Gelu needs {want:.4f}"
    add = _readers(erf)
    if len(add) != 1 or add[0].op_type != "Add" or _const_side(add[0])[1] != 1.0:
        return nodes, "erf(x/√2) is not followed by Add(1)"
    nodes.append(add[0])
    mul = _readers(add[0])
    if len(mul) != 1 or mul[0].op_type != "Mul":
        return nodes, "1 + erf(x/√2) is not multiplied by x (Mul)"
    nodes.append(mul[0])
    half = _readers(mul[0])
    if not (half and half[0].op_type == "Mul" and _const_side(half[0])[1] == 0.5) and \
            _const_side(mul[0])[1] != 0.5:
        return nodes, "x·(1 + erf(x/√2)) is not multiplied by 0.5"
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
                            structural_only: bool = False) -> pd.DataFrame:
    """The attention / LayerNorm / Erf-Gelu subgraphs of ``model`` left unfused, and why.

    Args:
        model: usually the result of a transformer fusion step.
        calls: onnxruntime's captured debug log
            (:class:`~onnx_lab.transforms.transformers.FusionCall`), attributed to a row when
            the row's anchor lies in the region the fusion tried.
        source: the step that would have fused them.
        structural_only: leave out subgraphs whose structure fits the fusion (before a fusion
            step ran they are candidates, not near-misses).

    Returns:
        One row per unfused subgraph, columns :data:`COLUMNS` (fusion: ``Attention``,
        ``LayerNormalization`` or ``Gelu``; anchor: the Softmax, first ReduceMean or Erf).
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
        rows.append(NearMiss(source, fusion, nid, ids(nodes), why,
                             f"{fusion} not fused at {nid}: {why}", log))
    return _frame(rows)


def near_misses(model: LabModel, *, transformers: bool = True) -> pd.DataFrame:
    """Near-misses of onnx_lab's own patterns and (``transformers=True``) unfused transformer
    subgraphs, one table (:data:`COLUMNS`).

    Columns:
        source (str: the pass that would apply), fusion (str: pattern or fused op), anchor
        (str: node id), node_ids (list[str]: the subgraph), reason (str: the condition that
        failed), description (str: "Conv → BatchNormalization: ..."), log (list[str]:
        onnxruntime's debug messages, when captured).

    Example:
        >>> near_misses(lab.model).loc[lambda d: d.source == "fuse_conv_bn", "description"]
    """
    own = _frame(pattern_near_misses(model))
    if not transformers:
        return own
    tr = transformer_near_misses(model, structural_only=True)
    if tr.empty:
        return own
    if own.empty:
        return tr
    return pd.concat([own, tr], ignore_index=True)
