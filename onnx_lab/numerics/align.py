"""Which candidate tensor holds the value of each reference tensor.

Stages, each only for tensors the previous ones left unmatched:

1. ``exact``: the same tensor name in the candidate (unless the candidate's provenance says
   that name now holds a fused result, see 2).
2. ``provenance``: the candidate node's ``onnx_lab.origin`` metadata lists the reference nodes
   it replaced; its outputs align to the outputs of the topologically last of them (a
   Conv+BN+Relu fused into one Conv aligns to the Relu output).
3. ``structure``: a heuristic, flagged as such: a candidate node of the same op type reading the
   aligned inputs (or carrying the same node name), or an Identity/Dropout removed in the
   candidate (its output has the value of its input).

Quantized candidates: when the aligned candidate tensor feeds a QuantizeLinear→DequantizeLinear
pair, the DequantizeLinear output is used instead (match ``dequantize``) so the error includes
that tensor's own quantization, layer by layer.

Every proposed pair must then pass :class:`SameQuantity` (both sides compute the same
quantity, decided in the candidate's topological order): a node that kept its name but reads
another tensor, or a fused pair whose reader took over part of its work, is refused with a
reason starting ``not the same quantity:``. :func:`align_versions` applies the same test.

Every reference tensor gets a row; unmatched ones carry the reason. Optional outputs that
nothing reads (a Dropout's mask) are not aligned: opsets define their dtype and values
differently.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.provenance import ORIGIN_KEY, node_origin, origins
from onnx_lab.core.values import const_array, is_constant, weight_makers
from onnx_lab.errors import LabError

logger = logging.getLogger(__name__)

__all__ = ["align", "ALIGN_COLUMNS", "origins_of", "SUBGRAPH_REASON", "SameQuantity",
           "kept_node", "computed_precision", "through_float_casts"]

ALIGN_COLUMNS = ["tensor", "node_id", "op_type", "graph", "depth", "is_output", "cand_tensor",
                 "cand_node_id", "match", "reason"]

SUBGRAPH_REASON = "inside a subgraph body: cannot be exposed"
UNREAD_REASON = ("an optional output nothing reads (a Dropout mask...): its dtype and values "
                 "may differ across opsets and runtimes; not compared")
_PASS_THROUGH = {"Identity", "Dropout"}


def inferred_fusions(reference: LabModel, candidate: LabModel) -> dict[str, list[str]]:
    """{candidate node id: the reference nodes it stands for} for the candidate nodes a tool
    folded others into without recording it (no ``onnx_lab.origin``: a file onnxsim,
    onnxoptimizer or onnxruntime wrote outside onnx_lab), read from the rewiring as
    ``transforms`` reads a tool's result: where a node both models hold (same id and op type)
    reads tensor T in the candidate but T' in the reference, and T' is computed from T by
    reference nodes the candidate lacks, one data input each, T's producer took them in
    (onnxsim folds a BatchNormalization into the Conv, which keeps its output name, and the
    activation after it now reads that name). A chain of Identity/Dropout alone folds no work.
    A chain node the candidate holds under a new name after the reading node (one of its op and
    attributes) was moved, not folded, and ends the fold: onnxruntime's transpose optimizer pushes a Transpose below
    the Relu after it, and a Conv with its bias Add folded in stood for the Transpose's output
    (a square tensor, so no shape refused it: a divergence at the Transpose with equal outputs).
    Without this, the Conv's output was compared with the reference's pre-normalization
    value (a TorchScript export with its BatchNormalizations, light ResNet-50: every Conv
    "computes differently", and what followed it was not compared)."""
    ridx, cidx = reference.index, candidate.index
    made = _constant_made(reference)  # weights filled by ConstantOfShape, BN scales...

    def below(xid: str, limit: int = 64) -> list[Any]:
        # the candidate nodes after xid the reference has no id for (the first `limit` met)
        seen, todo, found = {xid}, [xid], []
        while todo and len(seen) < limit:
            for v in cidx.node(todo.pop(0)).outputs:
                for u in cidx.consumers.get(v.name, ()):
                    if u not in seen and not cidx.entries[u].graph:
                        seen.add(u)
                        todo.append(u)
                        if u not in ridx.entries:
                            found.append(cidx.node(u))
        return found

    def moved(p: str, after: list[Any]) -> bool:
        # a chain node the candidate holds after the reading node, under a new name, with its
        # op and attributes, was moved, not folded (onnxruntime's transpose optimizer pushes
        # a Transpose below the Relu after it): the fold ends before it
        r = ridx.node(p)
        return any((c.op_type, c.domain) == (r.op_type, r.domain) and _same_attrs(r, c)
                   for c in after)

    out: dict[str, list[str]] = {}
    for xid, ce in cidx.entries.items():
        re_ = ridx.entries.get(xid)
        if ce.graph or re_ is None or re_.graph or re_.node.op_type != ce.node.op_type:
            continue
        for a, b in zip(re_.node.inputs, ce.node.inputs):
            t_ref, t_cand = _name(a), _name(b)
            if not t_ref or not t_cand or t_ref == t_cand:
                continue
            chain: list[str] = []
            cur = t_ref
            while cur != t_cand:
                p = ridx.producer.get(cur)
                if p is None or p in cidx.entries or ridx.entries[p].graph or p in chain:
                    break
                chain.append(p)
                data = [v.name for v in ridx.node(p).inputs if _name(v) and not _is_const(v)
                        and v.name not in made]
                if len(data) != 1:
                    break
                cur = data[0]
            if cur != t_cand:
                continue
            folded = list(reversed(chain))  # as the data flows, from T
            after = below(xid)
            kept = next((i for i, p in enumerate(folded) if moved(p, after)), len(folded))
            folded = folded[:kept]
            if all(ridx.node(p).op_type in _PASS_THROUGH for p in folded):
                continue
            c, r = cidx.producer.get(t_cand), ridx.producer.get(t_cand)
            if c is None or c != r or cidx.entries[c].graph or \
                    ORIGIN_KEY in cidx.node(c).metadata_props or \
                    cidx.node(c).op_type != ridx.node(r).op_type:
                continue
            group = out.setdefault(c, [c])
            group.extend(p for p in folded if p not in group)
    return out


def origins_of(model: LabModel) -> dict[str, list[str]]:
    """{node id: original node ids} from ``onnx_lab.origin`` metadata (own id when absent)."""
    return origins(model)


def _capturable(model: LabModel) -> dict[str, str]:
    """Main-graph node outputs of ``model``: {tensor: producer node id}.

    Tensors in onnxruntime's NCHWc blocked layout (``ort:all``) are left out: same shape as
    the NCHW tensor they stand for, different element order.
    """
    # on use: `import onnx_lab` loads align, not this
    from onnx_lab.core._layout import blocked_layout_tensors

    idx = model.index
    blocked = blocked_layout_tensors(model)
    return {name: nid for name, nid in idx.producer.items()
            if idx.entries[nid].graph == "" and name not in blocked}


def _dequantized(model: LabModel, tensor: str, capt: dict[str, str]) -> str | None:
    """Output of DequantizeLinear(QuantizeLinear(tensor)) in ``model``, if there is one."""
    idx = model.index
    for q in idx.consumers.get(tensor, ()):
        qn = idx.node(q)
        if qn.op_type != "QuantizeLinear" or not qn.inputs or qn.inputs[0] is None \
                or qn.inputs[0].name != tensor:
            continue
        for d in idx.consumers.get(qn.outputs[0].name, ()):
            dn = idx.node(d)
            if dn.op_type == "DequantizeLinear" and dn.outputs[0].name in capt:
                return dn.outputs[0].name
    return None


def align(reference: LabModel | None, candidate: LabModel, *,
          ref_tensors: Iterable[str] | None = None) -> pd.DataFrame:
    """Align every reference tensor to a candidate tensor.

    Args:
        reference: the reference model, or None when the reference is a dict of arrays; then
            ``ref_tensors`` lists its names, the candidate gives the structure, and only exact
            names align.
        candidate: the model compared against the reference.
        ref_tensors: restrict the reference tensors (default: every node output of every graph).

    Returns:
        DataFrame, one row per reference tensor, in the reference's topological order:
        tensor, node_id (its producer), op_type, graph (``""`` main graph), depth (topological
        position), is_output (a graph output), cand_tensor (None when unmatched),
        cand_node_id, match (``exact``, ``provenance``, ``dequantize``, ``structure`` or None),
        reason (why there is no match, or what the structural guess rests on).

    Example:
        >>> a = align(onnx_lab.open("sample:convnet").model, fused.model)
        >>> a.match.value_counts()
    """
    if reference is None:
        return _align_dict(list(ref_tensors or ()), candidate)
    ridx, cidx = reference.index, candidate.index
    capt = _capturable(candidate)
    rows: dict[str, dict] = {}
    order: list[str] = []
    ref_outputs = {v.name for v in reference.graph.outputs}
    wanted = set(ref_tensors) if ref_tensors is not None else None
    unread: set[str] = set()
    for nid, e in ridx.entries.items():
        for k, v in enumerate(e.node.outputs):
            if not v.name or v.name in rows or (wanted is not None and v.name not in wanted):
                continue
            reason = SUBGRAPH_REASON if e.graph else None
            if k > 0 and not e.graph and not ridx.consumers.get(v.name) \
                    and v.name not in ref_outputs:
                unread.add(v.name)
                reason = UNREAD_REASON
            rows[v.name] = {"tensor": v.name, "node_id": nid, "op_type": e.node.op_type,
                            "graph": e.graph, "depth": e.topo, "is_output": v.name in ref_outputs,
                            "cand_tensor": None, "cand_node_id": None, "match": None,
                            "reason": reason}
            order.append(v.name)

    # Provenance: reference tensor -> candidate tensor, and fused intermediates.
    prov: dict[str, str] = {}
    fused_into: dict[str, str] = {}
    last_of: dict[str, str] = {}  # candidate node id -> reference node id it stands for
    blocked_as: dict[str, str] = {}  # reference tensor -> its NCHWc-layout candidate tensor
    for cnid, orig in origins_of(candidate).items():
        ce = cidx.entries[cnid]
        known = [o for o in orig if o in ridx.entries and ridx.entries[o].graph == ""]
        # Only recorded provenance counts; a bare node name is a structural hint at most.
        if ce.graph or not known or ORIGIN_KEY not in ce.node.metadata_props:
            continue
        last = max(known, key=lambda o: ridx.entries[o].topo)
        last_of[cnid] = last
        r_outs = [v.name for v in ridx.node(last).outputs]
        unmapped = len(known) > 1 and _parts(ce.node) and \
            len(ce.node.outputs) > len(r_outs) and not _parts(ridx.node(last))
        if unmapped:
            # a Split that ends a fusion of parallel branches (onnxsim fuses a
            # ViT's q, k and v projections into one MatMul and a Split) gives each branch's
            # value, in an order no position tells: its first output was compared with the
            # last branch's (v against q: max_abs 0.54, the outputs equal)
            r_outs = []
        for k, v in enumerate(ce.node.outputs):
            if k < len(r_outs) and v.name and r_outs[k] and v.name not in capt:
                blocked_as.setdefault(r_outs[k], v.name)
            if k < len(r_outs) and v.name in capt and r_outs[k]:
                prev = prov.get(r_outs[k])
                if prev is None or cidx.entries[capt[prev]].topo < ce.topo:
                    prov[r_outs[k]] = v.name
        for o in known:
            if o != last or unmapped:
                for v in ridx.node(o).outputs:
                    fused_into.setdefault(v.name, cnid)
    same = SameQuantity(reference, candidate)
    # Folds no origin records, read from the rewiring: the fused node's output stands for
    # the last folded node's output (a structural guess, flagged with what it rests on).
    inferred: dict[str, tuple[str, str]] = {}  # reference tensor -> (candidate tensor, why)
    for cnid, group in same.inferred.items():
        if cnid in last_of:
            continue
        last = max(group, key=lambda o: ridx.entries[o].topo)
        last_of[cnid] = last
        folded = ", ".join(f"{o!r} ({ridx.node(o).op_type})" for o in group if o != cnid)
        r_outs = [v.name for v in ridx.node(last).outputs]
        for k, v in enumerate(cidx.node(cnid).outputs):
            if k < len(r_outs) and r_outs[k] and v.name in capt and r_outs[k] not in inferred:
                inferred[r_outs[k]] = (v.name, (
                    f"structural guess: {folded} folded into candidate node {cnid!r} "
                    f"({cidx.node(cnid).op_type}): the nodes after it read {v.name!r} where "
                    f"the reference's read {r_outs[k]!r}"))
        for o in group:
            if o != last:
                for v in ridx.node(o).outputs:
                    fused_into.setdefault(v.name, cnid)

    def _set(row: dict, cand: str, kind: str, reason: str | None = None) -> None:
        row.update(cand_tensor=cand, cand_node_id=capt.get(cand), match=kind, reason=reason)

    taken_nodes: set[str] = set()
    for name in order:
        row = rows[name]
        if row["graph"] or name not in capt or name in unread:
            continue
        last = last_of.get(capt[name])
        # A name kept by a fused node holds the fused result, not this intermediate, unless
        # the node still computes exactly what the reference's producer computes (its
        # provenance then over-claims: onnxsim's GELU fold stamps the Mul before the folded
        # ``* 0.5`` with both).
        if not (name in fused_into and last is not None and last != row["node_id"]) \
                or same.same_node(row["node_id"], capt[name]):
            _set(row, name, "exact")
            same.pair(name, name)
            taken_nodes.add(capt[name])
    claimed = {r["cand_tensor"] for r in rows.values() if r["cand_tensor"]}
    for name in order:
        row = rows[name]
        if not row["graph"] and not row["cand_tensor"] and name in prov \
                and prov[name] not in claimed and name not in unread:
            if _reshape_target(prov[name], cidx):  # as align_versions: not the same tensor
                row["reason"] = (f"rewritten into the Reshape target {prov[name]!r} (0 or -1 "
                                 "for a dim it computed: the same reshape, another tensor); "
                                 "the Reshape's output is compared")
                continue
            _set(row, prov[name], "provenance")
            claimed.add(prov[name])
            taken_nodes.add(capt[prov[name]])
    for name in order:
        row = rows[name]
        if not row["graph"] and not row["cand_tensor"] and name in inferred \
                and inferred[name][0] not in claimed and name not in unread:
            cand, why = inferred[name]
            _set(row, cand, "structure", why)
            claimed.add(cand)
            taken_nodes.add(capt[cand])

    # Structure, in topological order so chains of guesses propagate.
    matched = {r["tensor"]: r["cand_tensor"] for r in rows.values() if r["cand_tensor"]}
    used = set(matched.values())
    for name in order:
        row = rows[name]
        # An intermediate of a recorded fusion has no counterpart: a node of its op type
        # reading the same inputs is the fused node, which computes the whole group (the
        # pre-BatchNormalization Conv output against the fused Conv's, renamed by to_fp16)
        if row["graph"] or row["cand_tensor"] or name in unread or name in fused_into:
            continue
        guess = _structural(reference, candidate, row, matched, capt, taken_nodes, used)
        if guess is not None:
            cand, why = guess
            _set(row, cand, "structure", why)
            matched[name] = cand
            used.add(cand)
            taken_nodes.add(capt[cand])

    # Quantized candidates: compare against the dequantized value.
    if any(e.node.op_type == "DequantizeLinear" for e in cidx.entries.values()):
        for row in rows.values():
            if row["cand_tensor"]:
                dq = _dequantized(candidate, row["cand_tensor"], capt)
                if dq is not None:
                    row.update(cand_tensor=dq, cand_node_id=capt[dq], match="dequantize")

    _refuse_other_quantities(rows, order, candidate, same)
    cand_inits = set(candidate.graph.initializers)
    for name in order:
        row = rows[name]
        if row["cand_tensor"] or row["reason"]:
            continue
        if name in fused_into:
            row["reason"] = (f"fused into candidate node {fused_into[name]!r} "
                             "(an intermediate of the fusion)")
        elif name in cand_inits:
            row["reason"] = "folded into a constant (initializer) in the candidate"
        elif name in blocked_as or (name in cidx.producer
                                    and cidx.entries[cidx.producer[name]].graph == ""):
            row["reason"] = (f"held in onnxruntime's NCHWc blocked layout in the candidate "
                             f"({blocked_as.get(name, name)!r}, another element order): "
                             "not compared")
        elif name in cidx.producer:
            row["reason"] = "candidate " + SUBGRAPH_REASON
        else:
            row["reason"] = (f"node {row['node_id']!r} ({row['op_type']}) has no counterpart in "
                             "the candidate (removed or fused)")
    return pd.DataFrame([rows[n] for n in order], columns=ALIGN_COLUMNS)


def _parts(node: Any) -> bool:
    """Whether ``node``'s outputs are parts of one tensor (a Split)."""
    return node.op_type in ("Split", "SplitToSequence") and node.domain in ("", "ai.onnx")


def _refuse_other_quantities(rows: dict[str, dict], order: list[str], candidate: LabModel,
                             same: SameQuantity) -> None:
    """Unpair (in place, with the reason) the rows whose candidate tensor does not compute the
    reference tensor's quantity (:class:`SameQuantity`), in the candidate's topological order
    so each decision rests on the final decisions about the node's inputs."""
    by_cand: dict[str, list[dict]] = {}
    for name in order:
        row = rows[name]
        if row["cand_tensor"]:
            by_cand.setdefault(row["cand_tensor"], []).append(row)
    same.held = {k: v for k, v in same.held.items() if k not in by_cand}
    cand_outputs = {v.name for v in candidate.graph.outputs}
    idx = candidate.index
    for nid in idx.topo_order(""):
        for v in idx.node(nid).outputs:
            for row in by_cand.get(v.name, ()):
                if row["is_output"] and v.name in cand_outputs:
                    same.pair(v.name, row["tensor"])  # the outputs are always judged
                    continue
                why = same.why_not(v.name, row["tensor"],
                                   weak=row["match"] in ("provenance", "structure"))
                if why is None:
                    same.pair(v.name, row["tensor"])
                else:
                    row.update(cand_tensor=None, cand_node_id=None, match=None, reason=why)


def _structural(reference: LabModel, candidate: LabModel, row: dict, matched: dict[str, str],
                capt: dict[str, str], taken: set[str], used: set[str]
                ) -> tuple[str, str] | None:
    """(candidate tensor, why) for a reference tensor no name or provenance explains.

    ``used``: candidate tensors already aligned (never reused, except for removed
    pass-through nodes whose value is their input's).
    """
    ridx, cidx = reference.index, candidate.index
    node = ridx.node(row["node_id"])
    k = next(i for i, v in enumerate(node.outputs) if v.name == row["tensor"])
    cand_inputs = {v.name for v in candidate.graph.inputs}

    def cand_of(name: str) -> str | None:
        if name in matched:
            return matched[name]
        if name in cand_inputs:
            return name
        return None

    def output_k(cnid: str) -> str | None:
        outs = cidx.node(cnid).outputs
        name = outs[k].name if k < len(outs) else None
        return name if name in capt and name not in used else None

    if node.op_type in _PASS_THROUGH and k == 0 and node.inputs and node.inputs[0] is not None:
        src = cand_of(node.inputs[0].name)
        if src is not None and src in capt:
            return src, f"structural guess: {node.op_type} removed in the candidate, same value " \
                        "as its input"
    # A node of the same op type reading the aligned activations (the strongest evidence).
    acts = [(i, v.name) for i, v in enumerate(node.inputs)
            if v is not None and v.name and v.name not in reference.graph.initializers
            and v.const_value is None]
    mapped: list[tuple[int, str]] | None = []
    for i, name in acts:
        c = cand_of(name)
        if c is None:
            mapped = None
            break
        mapped.append((i, c))
    if acts and mapped:
        cands: set[str] | None = None
        for _i, c in mapped:
            users = set(cidx.consumers.get(c, ()))
            cands = users if cands is None else cands & users
        # same attributes too: a Transpose of the same tensor with another perm (onnxscript's
        # SDPA rewrite transposes the key cache [0, 2, 1, 3] where the reference's kT was
        # [0, 1, 3, 2]) is another quantity
        hits = [c for c in (cands or ()) if c not in taken
                and cidx.node(c).op_type == node.op_type and cidx.entries[c].graph == ""
                and _same_attrs(node, cidx.node(c))
                and all(len(cidx.node(c).inputs) > i and cidx.node(c).inputs[i] is not None
                        and cidx.node(c).inputs[i].name == m for i, m in mapped)]
        if len(hits) == 1 and output_k(hits[0]) is not None:
            return output_k(hits[0]), f"structural guess: same op type ({node.op_type}) " \
                                      "reading the aligned inputs"
    # The same node name and op type, output renamed.
    nid = row["node_id"]
    if nid in cidx.entries and nid not in taken and cidx.entries[nid].graph == "" \
            and cidx.node(nid).op_type == node.op_type and output_k(nid) is not None:
        return output_k(nid), "structural guess: same node name and op type"
    return None


def _align_dict(names: Sequence[str], candidate: LabModel) -> pd.DataFrame:
    """Alignment of a dict reference: names only; depth and producers from the candidate."""
    cidx = candidate.index
    capt = _capturable(candidate)
    outs = {v.name for v in candidate.graph.outputs}
    rows = []
    for name in names:
        nid = cidx.producer.get(name)
        e = cidx.entries.get(nid) if nid else None
        row = {"tensor": name, "node_id": nid, "op_type": e.node.op_type if e else None,
               "graph": e.graph if e else None, "depth": e.topo if e else None,
               "is_output": name in outs, "cand_tensor": None, "cand_node_id": None,
               "match": None, "reason": None}
        if name in capt:
            row.update(cand_tensor=name, cand_node_id=nid, match="exact")
        elif e is not None:
            row["reason"] = "candidate " + SUBGRAPH_REASON
        elif name in {v.name for v in candidate.graph.inputs}:
            row["reason"] = "a graph input of the candidate (the feeds): nothing to compare"
        else:
            row["reason"] = ("no tensor of this name in the candidate (a dict reference aligns "
                             "by name only)")
        rows.append(row)
    df = pd.DataFrame(rows, columns=ALIGN_COLUMNS)
    key = df["depth"].fillna(1 << 30)
    return df.iloc[key.argsort(kind="stable")].reset_index(drop=True)


# ---------------------------------------------------------------------------- versions
@dataclass
class VersionPair:
    """A tensor of a new version and the one it is compared with in the previous version."""

    tensor: str          # name in the candidate (after)
    ref: str             # name in the reference (before)
    node_id: str | None  # producer in the candidate
    ref_node_id: str | None
    match: str           # 'output' | 'name' | 'provenance'
    topo: int
    #: The candidate node is the reference tensor's producer reading the same data (only its
    #: constants may differ): a shape of its own is a failure, not another layout.
    kept: bool = False
    #: Both producers are Shape nodes: dims in another order are the shape of the tensor in
    #: another layout (see :func:`~onnx_lab.numerics.verify._judge`).
    shapes: bool = False


def version_tensors(model: LabModel) -> list[tuple[str, str, int]]:
    """(tensor, producer id, topo) of main-graph node outputs, topological order.

    Tensors in onnxruntime's NCHWc blocked layout (``ort:all``) are left out: their element
    order differs from the NCHW tensors they stand for. So are outputs nothing reads (an
    inference Dropout's mask, whose dtype and values opsets define differently): they cannot
    change the model's results.
    """
    # Called several times per step for each model (align, then the capture list).
    return model.cached(("verify_main_outputs",), lambda: _scanversion_tensors(model))


def _scanversion_tensors(model: LabModel) -> list[tuple[str, str, int]]:
    # on use: `import onnx_lab` loads align, not this
    from onnx_lab.core._layout import blocked_layout_tensors

    idx = model.index
    out = []
    seen: set[str] = blocked_layout_tensors(model)
    graph_outputs = {v.name for v in model.graph.outputs}
    for nid in idx.topo_order(""):
        e = idx.entries[nid]
        for v in e.node.outputs:
            if not idx.consumers.get(v.name) and v.name not in graph_outputs:
                continue
            if v.name and v.name not in seen:
                seen.add(v.name)
                out.append((v.name, nid, e.topo))
    return out


#: Float dtypes narrower than float32, by how coarse they are (the widest judging rule wins).
_NARROW = {"float16": 1, "bfloat16": 2, "float8e4m3fn": 3, "float8e4m3fnuz": 3,
           "float8e5m2": 3, "float8e5m2fnuz": 3, "float8e8m0": 3, "float4e2m1": 4}


def computed_precision(model: LabModel) -> dict[str, str]:
    """{main-graph tensor: the narrowest float dtype computed on its way}, for tensors that a
    float16 / bfloat16 / float8 computation feeds, directly or through other nodes.

    A float32 output behind a float16 graph (``keep_io_types=True`` conversions cast only the
    graph's inputs and outputs) carries float16 rounding: two correct versions of the model
    differ there by float16 steps, so its values are judged by the float16 rule, not the
    float32 one. Graph inputs and constants do not count (a float16 value cast to float32 is
    exact; a float16 weight is the same number in both versions); what only constants feed
    (a Cast of a weight) does not either.
    """
    return model.cached(("computed_precision",), lambda: _scan_precision(model))


def _scan_precision(model: LabModel) -> dict[str, str]:
    # on use: core.shapes pulls in shape inference
    from onnx_lab.core.shapes import value_type
    from onnx_lab.core.values import foldable_nodes

    idx = model.index
    folded = {nid for nid, _n in foldable_nodes(model).values()}
    types = None
    out: dict[str, str] = {}
    for nid in idx.topo_order(""):
        if nid in folded:
            continue
        node = idx.entries[nid].node
        narrowest = None
        for v in node.inputs:
            got = out.get(v.name) if v is not None and v.name else None
            if got is not None and (narrowest is None or _NARROW[got] > _NARROW[narrowest]):
                narrowest = got
        for o in node.outputs:
            if not o.name:
                continue
            if types is None:
                types = model.types()
            info = value_type(model, o, types)
            own = info.dtype if info is not None and info.dtype in _NARROW else None
            best = narrowest if own is None or (
                narrowest is not None and _NARROW[narrowest] > _NARROW[own]) else own
            if best is not None:
                out[o.name] = best
    return out


def align_versions(before: LabModel, after: LabModel, result: Any = None, *,
                   rejected: dict[str, str] | None = None,
                   wanted: Collection[str] | None = None) -> list[VersionPair]:
    """Tensor pairs to compare between two versions of one model (``after``'s topological
    order): graph outputs, unchanged producers by name, and fused nodes through the step's
    provenance (``result.provenance``: new node id -> ids in ``before``) or the
    ``onnx_lab.origin`` stamps. Unlike :func:`align`, which pairs any two models, this knows
    which producers the step changed, so a kept name on a changed node is not a match.

    Every pair but the outputs must pass :class:`SameQuantity` (both sides compute the same
    quantity); ``rejected`` (a dict, filled when given) receives {reference tensor: reason}
    for the pairs it refused.

    ``wanted``: the candidate tensors the caller keeps pairs of (a region's); every tensor is
    still aligned (each pair decides the next ones), but a pair's ``kept`` is worked out
    only for those (False for the others)."""
    b_idx, a_idx = before.index, after.index
    b_outs = [v.name for v in before.graph.outputs]
    a_outs = [v.name for v in after.graph.outputs]
    same = SameQuantity(before, after)
    pairs: dict[str, VersionPair] = {}
    topo_of = {name: t for name, _nid, t in version_tensors(after)}
    for i, name in enumerate(a_outs):
        ref = name if name in b_outs else (b_outs[i] if i < len(b_outs) else None)
        if ref is None:
            continue
        pairs[name] = VersionPair(name, ref, a_idx.producer.get(name), b_idx.producer.get(ref),
                            "output", topo_of.get(name, -1))
        same.pair(name, ref)
    b_main = {name: nid for name, nid, _t in version_tensors(before)}
    b_topo = {nid: b_idx.entries[nid].topo for nid in b_main.values()}
    by_origin: dict[str, list[str]] = {}
    for nid in b_main.values():
        for o in node_origin(b_idx.entries[nid].node, nid):
            by_origin.setdefault(o, []).append(nid)
    b_origin = {nid: set(node_origin(b_idx.entries[nid].node, nid)) for nid in b_main.values()}
    used_refs = {p.ref for p in pairs.values()}
    prov = dict(result.provenance) if result is not None else {}

    def accept(name: str, ref: str, nid: str, ref_nid: str, match: str, topo: int, *,
               weak: bool, identical: bool = False) -> None:
        why = None if identical else same.why_not(name, ref, weak=weak)
        if why is not None:
            if rejected is not None:
                rejected.setdefault(ref, why)
            return
        # (``kept`` reads both versions' types per pair: only for the pairs the caller keeps)
        keep = wanted is None or name in wanted
        pairs[name] = VersionPair(name, ref, nid, ref_nid, match, topo,
                                  kept=identical or (keep and _kept(before, after, ref_nid,
                                                                    nid, same.holds)),
                                  shapes=a_idx.entries[nid].node.op_type == "Shape"
                                  and b_idx.entries[ref_nid].node.op_type == "Shape")
        used_refs.add(ref)
        same.pair(name, ref)

    for name, nid, topo in version_tensors(after):
        if name in pairs:
            continue
        node = a_idx.entries[nid].node
        # A tensor name means the same value only when its producer is unchanged: a fused
        # node may keep its first part's output name while computing the last part's value.
        # A node the tool made whose origin is unknown (``prov`` lists it with no source)
        # writing a kept name stands for that tensor; a changed node that still computes
        # what its reference node computes holds that node's outputs, whatever its
        # provenance claims.
        unknown = nid in prov and not prov[nid] and nid not in b_idx.entries
        changed = (nid in prov and not unknown) or (
            nid in b_idx.entries and set(node_origin(node, nid)) != b_origin.get(nid, {nid}))
        if name in b_main and not changed:
            accept(name, name, nid, b_main[name], "name", topo, weak=False)
            continue
        k = list(node.outputs).index(next(v for v in node.outputs if v.name == name))
        if name in b_main and _output_index(b_idx, b_main[name], name) == k \
                and same.same_node(b_main[name], nid):
            accept(name, name, nid, b_main[name], "name", topo, weak=False, identical=True)
            continue
        # The node's sources in the previous model: the pass's provenance, else the
        # before-nodes whose origins are all among this node's origins.
        sources = [s for s in prov.get(nid, []) if s in b_idx.entries]
        if not sources:
            origin = set(node_origin(node, nid))
            cands = {c for o in origin for c in by_origin.get(o, ())}
            sources = [c for c in cands if b_origin[c] <= origin]
        if not sources or (len(sources) > 1 and len(node.outputs) > 1):
            continue  # a multi-output node made of several nodes: no output-to-output map
        last = max(sources, key=lambda s: b_idx.entries[s].topo)
        last_node = b_idx.entries[last].node
        if len(last_node.outputs) != len(node.outputs) and k > 0:
            continue
        if len(node.outputs) > len(last_node.outputs) and node.op_type != last_node.op_type:
            continue  # a fused op with more outputs (SkipLayerNormalization) than its source
        if _reshape_target(name, a_idx):
            continue  # a rewritten Reshape target may say 0 or -1 for a dim it computed before
        ref_v = last_node.outputs[k] if k < len(last_node.outputs) else None
        if len(last_node.outputs) != len(node.outputs):
            # A node standing for one output of a multi-output source (onnxruntime pushes a
            # Transpose through a Split: one Transpose per Split output, each stamped with
            # the Split) holds the output whose name it kept, not the source's k-th.
            kept = [v for v in last_node.outputs if v is not None and v.name == name]
            if kept:
                ref_v = kept[0]
        if ref_v is None or not ref_v.name or ref_v.name in used_refs:
            continue
        if b_topo.get(last) is None or _split(last_node, node, a_idx):
            continue
        accept(name, ref_v.name, nid, last, "provenance", topo, weak=True)
    return sorted(pairs.values(), key=lambda p: p.topo)


def _output_index(idx: Any, nid: str, name: str) -> int:
    return next(i for i, v in enumerate(idx.node(nid).outputs) if v.name == name)


def kept_node(reference: LabModel, candidate: LabModel, ref_tensor: str, cand_tensor: str
              ) -> bool:
    """Whether ``cand_tensor``'s producer is ``ref_tensor``'s producer (same node id and op)
    reading the same data tensors by name: only its constants may differ, so a shape of its
    own is a failure (a wrong Reshape target), not another layout."""
    nid = candidate.index.producer.get(cand_tensor)
    return _kept(reference, candidate, reference.index.producer.get(ref_tensor), nid,
                 lambda name: {name})


def _kept(before: LabModel, after: LabModel, ref_nid: str | None, nid: str | None,
          holds: Any) -> bool:
    """Whether ``after``'s node ``nid`` is ``before``'s node ``ref_nid`` reading the same data
    tensors, by name (its constants may differ: a wrong weight, a rewritten Reshape
    target)."""
    if ref_nid is None or ref_nid != nid or nid not in after.index.entries:
        return False
    r, c = before.index.node(ref_nid), after.index.node(nid)
    if r.op_type != c.op_type or len(r.inputs) != len(c.inputs):
        return False
    # The same tensor names, paired (a fused neighbour's output may hold the value in another
    # shape: a 2-D Gemm for a 3-D MatMul + Add), or a constant in place of an input.
    for a, b in zip(r.inputs, c.inputs):
        if _name(a) and not _is_const(a) and not (_name(b) and _is_const(b)) and (
                _name(b) != a.name or a.name not in holds(b.name)):
            return False
    # The same data in another rank (onnxsim makes a MatMul + Add 2-D: the Erf after it
    # reads [8, 64] where it read [1, 8, 64]): its output follows that shape, which is a
    # layout, not another computation.
    before_types, after_types = before.types(), after.types()
    for a, b in zip(r.inputs, c.inputs):
        if _name(a) and _name(b) and not _is_const(a) and not _is_const(b):
            ta, tb = before_types.get(a.name), after_types.get(b.name)
            if ta is not None and tb is not None and ta.shape is not None \
                    and tb.shape is not None and len(ta.shape) != len(tb.shape):
                return False
    return True


def _split(ref: Any, node: Any, a_idx: Any) -> bool:
    """Whether ``ref``'s weights went partly to ``node`` and partly to a node next to it.

    onnxruntime's GPT-2 fusion turns a Gemm into MatMul(x, W) and hands the bias to the
    fused op that reads the MatMul (FastGelu, SkipLayerNormalization): neither holds the
    Gemm's value, so neither is compared with it.
    """
    mine = {v.name for v in node.inputs if v is not None}
    outs = {v.name for v in node.outputs}
    for w in ref.inputs:
        if w is None or not w.name or w.name in mine:
            continue
        if not (w.is_initializer() or (w.producer() is not None
                                        and w.producer().op_type == "Constant")):
            continue
        for reader in a_idx.consumers.get(w.name, ()):
            rn = a_idx.entries[reader].node  # reads the node's output, or writes its input
            if any(v is not None and v.name in outs for v in rn.inputs) or \
                    any(v.name in mine for v in rn.outputs):
                return True
    return False


def _reshape_target(name: str, a_idx: Any) -> bool:
    """Whether ``name`` is read only as the shape input of Reshape nodes (onnxruntime's
    FusionReshape writes a Constant with 0 for "copy this dim" where a Concat computed it: the
    same reshape, another tensor; the Reshape's output is compared instead)."""
    readers = a_idx.consumers.get(name, ())
    for r in readers:
        n = a_idx.entries[r].node
        if n.op_type != "Reshape" or any(v is not None and v.name == name
                                         for v in n.inputs[:1]):
            return False
    return bool(readers)


# ---------------------------------------------------------------------------- same quantity
class SameQuantity:
    """Whether a candidate tensor and a reference tensor hold the same quantity, decided
    inductively over the pairs accepted so far (callers go in topological order).

    The stages of :func:`align` and :func:`align_versions` propose pairs from names and
    provenance; a name or an origin is a claim, not a proof. This refuses the claims the
    graphs contradict, with the reason:

    - a node that kept its name (or its output's name) but reads a tensor holding a
      reference value its reference node does not read is another computation
      (onnxruntime's TransposeOptimizer moves a Shape above a Transpose: same node name,
      another input);
    - a fused or renamed pair whose candidate tensor is read by a node that holds other
      constants than its reference counterpart while replacing no node itself: the rewrite
      folded part of the work into that reader (onnxsim folds GELU's ``* 0.5`` into the next
      Conv's weights; the provenance then says the Mul before it absorbed the ``* 0.5``).

    A candidate node that is the same computation as a reference node (:meth:`same_node`:
    same op, attributes, equal constants, inputs holding the same reference tensors) holds
    that node's outputs whatever its provenance says.
    """

    def __init__(self, reference: LabModel, candidate: LabModel) -> None:
        self.ref, self.cand = reference, candidate
        ridx = reference.index
        self.by_origin: dict[str, set[str]] = {}
        for nid, e in ridx.entries.items():
            if e.graph == "":
                for o in node_origin(e.node, nid):
                    self.by_origin.setdefault(o, set()).add(nid)
        #: folds no origin records, read from the rewiring (:func:`inferred_fusions`)
        self.inferred = inferred_fusions(reference, candidate)
        r_inputs = {v.name for v in reference.graph.inputs}
        self.held: dict[str, set[str]] = {v.name: {v.name} for v in candidate.graph.inputs
                                          if v.name in r_inputs}

    def holds(self, cand_tensor: str) -> set[str]:
        """The reference tensors ``cand_tensor`` is paired with (graph inputs: themselves)."""
        return self.held.get(cand_tensor, set())

    def pair(self, cand_tensor: str, ref_tensor: str) -> None:
        held = self.held.setdefault(cand_tensor, set())
        held.add(ref_tensor)
        # What an Identity (or inference Dropout) of the reference tensor holds is its value.
        ridx = self.ref.index
        stack = [ref_tensor]
        while stack:
            for r in ridx.consumers.get(stack.pop(), ()):
                n = ridx.node(r)
                if n.op_type in _PASS_THROUGH and n.outputs and _name(n.outputs[0]) \
                        and n.outputs[0].name not in held and ridx.entries[r].graph == "":
                    held.add(n.outputs[0].name)
                    stack.append(n.outputs[0].name)
        # A node that merged duplicates (onnxruntime's common-subexpression elimination keeps
        # one of two Shape(x)) holds the outputs of every node of its group it equals.
        ridx, cidx = self.ref.index, self.cand.index
        r_nid, c_nid = ridx.producer.get(ref_tensor), cidx.producer.get(cand_tensor)
        if r_nid is None or c_nid is None:
            return
        k = next((i for i, v in enumerate(ridx.node(r_nid).outputs) if v.name == ref_tensor), 0)
        for g in self.group(c_nid, r_nid) - {r_nid}:
            outs = ridx.node(g).outputs
            if k < len(outs) and outs[k].name and self.same_node(g, c_nid):
                held.add(outs[k].name)

    def unpair(self, cand_tensor: str, ref_tensor: str) -> None:
        self.held.get(cand_tensor, set()).discard(ref_tensor)

    def same_node(self, ref_node: str, cand_node: str) -> bool:
        """Whether candidate node ``cand_node`` computes exactly what reference node
        ``ref_node`` computes: same op, domain and attributes, and every input the same
        value (a tensor paired with the reference input, the same graph input, or an equal
        constant)."""
        r, c = self.ref.index.node(ref_node), self.cand.index.node(cand_node)
        if (r.op_type, r.domain) != (c.op_type, c.domain) or len(r.outputs) != len(c.outputs):
            return False
        ri, ci = _trimmed(r.inputs), _trimmed(c.inputs)
        if len(ri) != len(ci) or not _same_attrs(r, c):
            return False
        for a, b in zip(ri, ci):
            if not _name(a) or not _name(b):
                if _name(a) or _name(b):
                    return False
                continue
            ka, kb = _is_const(a), _is_const(b)
            if ka or kb:
                if not (ka and kb and _const_equal(a, b)):
                    return False
            elif a.name not in self.holds(b.name):
                return False
        return True

    def group(self, cand_node: str, ref_node: str) -> set[str]:
        """The reference nodes ``cand_node`` stands for: those its provenance names (with the
        node of its own id), when they include ``ref_node``; else ``{ref_node}``."""
        ridx = self.ref.index
        out = {n for o in node_origin(self.cand.index.node(cand_node), cand_node)
               for n in self.by_origin.get(o, ())}
        out.update(self.inferred.get(cand_node, ()))
        if cand_node in ridx.entries and ridx.entries[cand_node].graph == "":
            out.add(cand_node)
        return out if ref_node in out else {ref_node}

    def why_not(self, cand_tensor: str, ref_tensor: str, *, weak: bool) -> str | None:
        """Why ``cand_tensor`` does not hold ``ref_tensor``'s quantity, or None.

        ``weak``: the pair rests on provenance or structure (a fused node, a renamed output),
        not on a tensor name kept by its own node.
        """
        # on use: `import onnx_lab` loads align, not this
        from onnx_lab.core._layout import layout_marks

        marks = layout_marks(self.cand).get(cand_tensor), layout_marks(self.ref).get(ref_tensor)
        if marks[0] != marks[1]:
            return (f"another order of axes: candidate {cand_tensor!r} and the reference's "
                    f"{ref_tensor!r} are held in different layouts (a pass moved a region "
                    "out of its Transposes on one side)")
        ridx, cidx = self.ref.index, self.cand.index
        r_nid, c_nid = ridx.producer.get(ref_tensor), cidx.producer.get(cand_tensor)
        if r_nid is None or c_nid is None:
            return None
        rn, cn = ridx.node(r_nid), cidx.node(c_nid)
        if rn.op_type in _PASS_THROUGH and rn.inputs and _name(rn.inputs[0]) \
                and rn.inputs[0].name in self.holds(cand_tensor):
            return None  # an Identity removed in the candidate: the value of its input
        kinds = _kind(self.cand, cand_tensor), _kind(self.ref, ref_tensor)
        if None not in kinds and kinds[0] != kinds[1]:
            # onnxruntime's QDQS8ToU8 makes a uint8 QuantizeLinear whose provenance names the
            # float DequantizeLinear after the int8 one: quantized codes are not its values
            return (f"not the same quantity: candidate {cand_tensor!r} is "
                    f"{self.cand.types()[cand_tensor].dtype}, the reference's "
                    f"{ref_tensor!r} {self.ref.types()[ref_tensor].dtype}")
        if weak and cand_tensor != ref_tensor:  # the same name: a shape change is the news
            why = _shapes_differ(self.ref, ref_tensor, self.cand, cand_tensor)
            if why is not None:
                return why
            if cand_tensor in _constant_made(self.cand) and \
                    ref_tensor in _constant_made(self.ref):
                # onnxoptimizer/onnxsim fold a BatchNormalization into the Conv weights a
                # Constant node held (PaddlePaddle exports): the new weight node keeps the old
                # one's origin and differs from it by design; what reads it is compared
                return (f"a weight the rewrite computed anew: candidate {cand_tensor!r} is made "
                        f"from constants, as the reference's {ref_tensor!r} is; the nodes that "
                        "read it are compared")
        if rn.op_type == cn.op_type == "Shape":
            why = self._shape_of_another(rn, cn, c_nid, r_nid)
            if why is not None:
                return why
        group = self.group(c_nid, r_nid)
        touched: set[str] = set()
        for g in group:
            n = ridx.node(g)
            touched.update(_name(v) for v in (*n.inputs, *n.outputs))
        for v in cn.inputs:
            if not _name(v) or _is_const(v):
                continue
            # unpaired (its producer was rewritten, e.g. a Reshape target): its name is the
            # claim (onnxruntime's TransposeOptimizer points the Shape of a Transpose at the
            # Transpose's input, the Shape keeping its name)
            held = self.holds(v.name) or ({v.name} if v.name in ridx.producer else set())
            if held and not held & touched:
                return (f"not the same quantity: candidate node {c_nid!r} ({cn.op_type}) reads "
                        f"{v.name!r}, which holds the reference's {min(held)!r}; reference "
                        f"node {r_nid!r} ({rn.op_type}) does not read it (a name kept on "
                        "another computation)")
        if not (weak or len(group) > 1 or rn.op_type != cn.op_type):
            return None
        why = self._took_in(c_nid, cn, group)
        if why is not None:
            return why
        for reader in cidx.consumers.get(cand_tensor, ()):
            why = self._absorbed(reader, cand_tensor, ref_tensor)
            if why is not None:
                return why
        return None

    def _shape_of_another(self, rn: Any, cn: Any, c_nid: str, r_nid: str) -> str | None:
        """Why candidate Shape node ``cn`` reads a tensor of another shape than reference
        Shape node ``rn`` (the part its ``start``/``end`` keep): onnxruntime's transpose
        optimizer keeps a Shape's name while pointing it at the transposed tensor, often a
        tensor of its own whose value nothing pairs. Decided from the inferred shapes: ranks
        that differ, a dim concrete on both sides that differs, or a graph input's free dim
        (the batch) found at another position on the other side."""
        if not (rn.inputs and cn.inputs and _name(rn.inputs[0]) and _name(cn.inputs[0])):
            return None
        ra, ca = self.ref.types().get(rn.inputs[0].name), \
            self.cand.types().get(cn.inputs[0].name)
        if ra is None or ca is None or ra.shape is None or ca.shape is None:
            return None
        rs, cs = _shape_part(rn, ra.shape), _shape_part(cn, ca.shape)
        free = _free_dims(self.ref) | _free_dims(self.cand)

        def moved(x: list[Any], y: list[Any]) -> bool:  # a free dim of x elsewhere in y
            return any(isinstance(a, str) and a in free and a != b and a in y
                       for a, b in zip(x, y))
        # (a free dim against a number is no difference: a tool may have fixed the input)
        if not (_sizes_differ(rs, cs) or moved(rs, cs) or moved(cs, rs)):
            return None
        return (f"not the same quantity: candidate node {c_nid!r} (Shape) reads "
                f"{cn.inputs[0].name!r} of shape {_dims_text(ca.shape)}, reference node "
                f"{r_nid!r} reads {rn.inputs[0].name!r} of shape {_dims_text(ra.shape)}: the "
                "shape of another tensor (a layout rewrite moved it)")

    def _took_in(self, c_nid: str, cn: Any, group: set[str]) -> str | None:
        """Why fused or renamed node ``c_nid`` computes more than the reference nodes it
        stands for (``group``): it reads a constant of the reference (same name and shape)
        that only reference nodes outside the group read. onnxruntime's MatMulAddFusion makes
        a Gemm stamped with the MatMul alone that reads the Add's bias: its output is
        MatMul + bias, not the MatMul's value. The values need not be equal: the bias of
        that Add may be the very bug (doubled), or a conversion's (float16) — the Gemm holds
        it either way, and comparing its output with the MatMul's reported the bias itself as
        the MatMul's error."""
        ridx, ref_graph = self.ref.index, self.ref.graph
        for v in cn.inputs:
            if not _name(v) or not _is_const(v):
                continue
            rv = ref_graph.initializers.get(v.name)
            shape = _const_shape(v)
            if rv is None or shape is None or _const_shape(rv) != shape:
                continue
            readers = _readers_through_identity(ridx, v.name)
            if readers and not readers & group:
                other = min(readers)
                return (f"not the same quantity: candidate node {c_nid!r} ({cn.op_type}) "
                        f"reads the constant {v.name!r}, which in the reference only "
                        f"{other!r} ({ridx.node(other).op_type}) reads, a node it does not "
                        "stand for: the rewrite folded that node's work into it")
        return None

    def _absorbed(self, reader: str, cand_tensor: str, ref_tensor: str) -> str | None:
        """Why ``reader`` (reading ``cand_tensor``) took over part of the work: the same node
        in both models, reading ``ref_tensor`` there, replacing no other node, yet holding
        other constants."""
        ce, re_ = self.cand.index.entries[reader], self.ref.index.entries.get(reader)
        if ce.graph or re_ is None or re_.graph:
            return None
        rn, cn = re_.node, ce.node
        if rn.op_type != cn.op_type or len(rn.inputs) != len(cn.inputs):
            return None
        if not set(node_origin(cn, reader)) <= set(node_origin(rn, reader)):
            return None  # a fused node: its constants change for its own reasons
        if not any(_name(b) == cand_tensor and _name(a) == ref_tensor
                   for a, b in zip(rn.inputs, cn.inputs)):
            return None
        for k, (a, b) in enumerate(zip(rn.inputs, cn.inputs)):
            # Both constants, other values (a weight moved behind a DequantizeLinear is
            # quantization, not a fold).
            if _name(a) and _name(b) and _is_const(a) and _is_const(b) \
                    and not _const_equal(a, b):
                return (f"not the same quantity: its reader {reader!r} ({cn.op_type}) holds "
                        f"another constant at input {k} though it replaced no other node: the "
                        "rewrite folded part of this computation into it")
        return None


def _readers_through_identity(idx: Any, name: str) -> set[str]:
    """Main-graph nodes reading ``name``, through Identity nodes: the torch exporter
    deduplicates equal initializers and the other users read them as
    ``Identity(embeddings.LayerNorm.weight)`` (every LayerNorm of a random-init BERT)."""
    out: set[str] = set()
    todo, seen = [name], {name}
    while todo:
        for r in idx.consumers.get(todo.pop(), ()):
            if idx.entries[r].graph != "":
                continue
            node = idx.node(r)
            if node.op_type == "Identity" and node.domain in ("", "ai.onnx") and node.outputs \
                    and node.outputs[0].name and node.outputs[0].name not in seen:
                seen.add(node.outputs[0].name)
                todo.append(node.outputs[0].name)
            else:
                out.add(r)
    return out


def _name(v: Any) -> str:
    return v.name if v is not None and v.name else ""


def _shape_part(node: Any, shape: Sequence[Any]) -> list[Any]:
    """The dims of ``shape`` a Shape node returns (its ``start`` and ``end``, opset 15)."""
    start = node.attributes.get_int("start", 0)
    end = node.attributes.get_int("end", len(shape))
    return list(shape)[start:end]


def _free_dims(model: LabModel) -> set[str]:
    """The symbolic dims the main graph's inputs declare: sizes the caller chooses."""
    return {d for v in model.graph.inputs if v.shape is not None
            for d in (str(x) for x in v.shape if not isinstance(x, int))}


def _dims_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _constant_made(model: LabModel) -> frozenset[str]:
    """Main-graph tensors computed from constants only: the outputs of the nodes that make
    weights (:func:`~onnx_lab.core.values.weight_makers`: Constant nodes, and nodes reading
    nothing else, such as a Mul of a weight and a BatchNormalization's scale)."""
    def build() -> frozenset[str]:
        idx = model.index
        return frozenset(v.name for nid in weight_makers(model) for v in idx.node(nid).outputs
                         if v.name)

    return model.cached(("align_constant_made",), build)


def _sizes_differ(rs: Sequence[Any], cs: Sequence[Any]) -> bool:
    """Whether two inferred shapes cannot be one tensor's: another rank, a dim known on both
    sides that differs, or a known size that moved (:func:`_size_moved`). A size known on one
    side only is no difference: a tool may have fixed the input."""
    return len(rs) != len(cs) or _size_moved(rs, cs) or any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(rs, cs))


def _size_moved(rs: Sequence[Any], cs: Sequence[Any]) -> bool:
    """Whether a size one side knows stands where the other side knows none, and the other
    side has it where the first knows none: the axis moved. tf2onnx's NHWC tensors
    ``[N, ?, ?, 8]`` against the NCHW ones ``[N, 8, ?, ?]`` that onnxruntime's
    TransposeOptimizer makes under the same node names (spatial dims that inference leaves
    unknown), where no position holds two different numbers."""
    def moved(x: Sequence[Any], y: Sequence[Any]) -> bool:
        return any(isinstance(a, int) and not isinstance(b, int) and any(
            c == a and not isinstance(d, int) for c, d in zip(y, x)) for a, b in zip(x, y))
    return len(rs) == len(cs) and (moved(rs, cs) or moved(cs, rs))


def _shapes_differ(ref: LabModel, ref_tensor: str, cand: LabModel, cand_tensor: str
                   ) -> str | None:
    """Why a guessed pair cannot hold one quantity by its inferred shapes (another rank, or a
    size both sides know that differs), or None. onnxruntime's PadFusion folds a Pad into the
    Conv after it, and a provenance that credits the Pad to the node before paired the
    Pad's [1, 48, 49, 49] with that node's [1, 48, 48, 48]."""
    ri, ci = ref.types().get(ref_tensor), cand.types().get(cand_tensor)
    rs = ri.shape if ri is not None else None
    cs = ci.shape if ci is not None else None
    if rs is None or cs is None:
        return None
    if _sizes_differ(rs, cs):
        return (f"not the same quantity: candidate {cand_tensor!r} has shape {list(cs)}, the "
                f"reference's {ref_tensor!r} {list(rs)}")
    return None


def _kind(model: LabModel, name: str) -> str | None:
    """A tensor's kind of element: float, signed or unsigned integer, bool (None: unknown;
    widths aside: a float16 tensor may stand for a float32 one, an int32 for an int64)."""
    info = model.types().get(name)
    dt = info.dtype if info is not None else None
    if not dt:
        return None
    for prefix, kind in (("float", "f"), ("bfloat", "f"), ("uint", "u"), ("int", "i"),
                         ("bool", "b")):
        if dt.startswith(prefix):
            return kind
    return None


def through_float_casts(cand: LabModel, ref_of: dict[str, str]) -> None:
    """A float-to-float Cast's output holds its input's quantity (rounded): ``ref_of`` gains
    the candidate's cast of a paired tensor. ``to_fp16`` keeps a TopK in float32 behind a
    Cast named ``p1__fp32``; unpaired, the TopK's near-tie flip was a divergence."""
    for entry in cand.index.entries.values():  # topological: a chain of casts follows
        node = entry.node
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.inputs \
                or node.inputs[0] is None or not node.outputs:
            continue
        src, out = node.inputs[0], node.outputs[0]
        # (the types inference gives: a model saved without value_info declares none)
        if src.name in ref_of and out.name and out.name not in ref_of and \
                _kind(cand, src.name) == "f" == _kind(cand, out.name):
            ref_of[out.name] = ref_of[src.name]


def _trimmed(values: Sequence[Any]) -> list[Any]:
    out = list(values)
    while out and not _name(out[-1]):
        out.pop()
    return out


def _is_const(v: Any) -> bool:
    return is_constant(v, stored=True)


def _const_shape(v: Any) -> tuple[int, ...] | None:
    """The shape of a constant value (its tensor's dims, else its array's), or None."""
    t = v.const_value
    if t is not None:
        return tuple(int(d) for d in t.shape)
    arr = const_array(v, stored=True)
    return None if arr is None else tuple(arr.shape)


def _const_equal(a: Any, b: Any) -> bool:
    """Whether two constant values hold the same array (dtype, shape and values)."""
    if a.const_value is not None and a.const_value is b.const_value:
        return True  # versions of one model share their tensors
    x, y = const_array(a, stored=True), const_array(b, stored=True)
    if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype:
        return False
    return bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))


def _same_attrs(r: Any, c: Any, ref: LabModel | None = None,
                cand: LabModel | None = None) -> bool:
    """Equal attributes (scalars, strings and lists; tensors and graphs count as different);
    one left out equals its schema default (onnxruntime writes ``Shape(start=0)``), an axis
    counted from the end the same axis counted from the start (:func:`_attr_pairs`)."""
    for _k, a, b, va, vb in _attr_pairs(r, c, ref, cand):
        if a is not None and (a.is_ref() or (b is not None and a.type != b.type)):
            return False
        if b is not None and b.is_ref():
            return False
        if va is None or not attr_equal(va, vb):
            return False
    return True


def attr_equal(a: Any, b: Any) -> bool:
    """Two plain attribute values alike, NaN equal to NaN (an Imputer's
    ``replaced_value_float`` is NaN on both sides: it read as changed, "nan -> nan")."""
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        return a != a and b != b
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return all(attr_equal(x, y) for x, y in zip(a, b))
    return False


def _attr_pairs(r: Any, c: Any, ref: LabModel | None = None, cand: LabModel | None = None
                ) -> Iterator[tuple[str, Any, Any, Any, Any]]:
    """(name, r's attribute, c's attribute, r's value, c's value) of every attribute either
    node sets, sorted by name: the values plain (:func:`_plain`: None for a tensor or a
    graph), one left out at its schema default in the node's opset (None without one).

    Values that differ as written but mean the same are given alike (:func:`_meaning`): an
    axis counted from the end and the same axis counted from the start (Softmax's ``axis``
    -1 and 1 on a rank-2 input), a list of axes in another order, an attribute whose default
    depends on the input left out and written out at it (a Transpose's reversed ``perm``, a
    Conv's zero ``pads``, unit ``strides``, its weight's ``kernel_shape``). ``ref`` and
    ``cand`` (the nodes' models, optional) give ranks and opsets a node does not carry.
    onnxruntime writes Softmax's ``axis=1`` into an opset 9 model whose Softmax left it out
    (the default there is 1): the divergence read "attribute 'axis' -1 -> 1"."""
    ra, ca = dict(r.attributes), dict(c.attributes)
    for k in sorted(set(ra) | set(ca)):
        a, b = ra.get(k), ca.get(k)
        va = _plain(a.value) if a is not None else _default(r.op_type, r.domain, k,
                                                              _opset(r, ref))
        vb = _plain(b.value) if b is not None else _default(c.op_type, c.domain, k,
                                                              _opset(c, cand))
        if not (va is not None and vb is not None and attr_equal(va, vb)) and \
                (r.op_type, r.domain) == (c.op_type, c.domain):
            # (a tensor or graph attribute, plain None, means nothing here)
            ma = _meaning(r, k, va, ref) if a is None or va is not None else None
            mb = _meaning(c, k, vb, cand) if b is None or vb is not None else None
            # an axis means the same only on inputs of one rank (axis 1 of a [2, 3, 4]
            # input and -1 of a [6, 4] one: dims of 3 and 4, which normalized read alike)
            if ma is not None and mb is not None and attr_equal(ma, mb) and \
                    _axis_rank(r, k, ref) == _axis_rank(c, k, cand):
                va, vb = ma, mb
        yield k, a, b, va, vb


#: Attributes that name axes of input 0 (counted from its end when negative), by op of the
#: default domain; a list of axes is a set (Reduce*, Squeeze, MVN: the order is no meaning).
_AXIS_OF_INPUT = {
    "axis": frozenset({"Softmax", "LogSoftmax", "Hardmax", "Concat", "Gather",
                       "GatherElements", "ScatterElements", "Scatter", "Split", "Flatten",
                       "ArgMax", "ArgMin", "LayerNormalization", "RMSNormalization",
                       "Compress", "TopK", "Unique", "QuantizeLinear", "DequantizeLinear",
                       "LpNormalization"}),
    "axes": frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                       "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                       "ReduceSumSquare", "Squeeze", "MeanVarianceNormalization"}),
}
#: Attributes that name axes of output 0 (Unsqueeze's new axes, OneHot's new axis).
_AXIS_OF_OUTPUT = {"axes": frozenset({"Unsqueeze"}), "axis": frozenset({"OneHot"})}
#: Ops whose pads, strides and dilations default to 0 and 1 along each spatial axis.
_WINDOWED = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                       "AveragePool", "LpPool"})
#: The weight input of the convolutions (its spatial dims are the default kernel_shape).
_WEIGHT_INPUT = {"Conv": 1, "ConvTranspose": 1, "ConvInteger": 1, "QLinearConv": 3}


def _meaning(node: Any, name: str, value: Any, model: LabModel | None) -> Any:
    """``value`` of attribute ``name`` of ``node`` as what it means, where that depends on a
    rank or a shape this side knows: axes counted from the start (a list of them sorted),
    a left-out ``perm``, ``pads``, ``strides``, ``dilations``, ``output_padding`` or
    ``kernel_shape`` as the value it defaults to. None when it cannot be said (an unknown
    rank, an axis out of range, a value of another kind): the value is then shown as
    written."""
    if node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if value is None:
        if op == "Transpose" and name == "perm":
            rank = _rank(node.inputs[0] if node.inputs else None, model)
            return tuple(range(rank - 1, -1, -1)) if rank is not None else None
        if op in _WINDOWED and name in ("pads", "strides", "dilations", "output_padding"):
            rank = _rank(node.inputs[0] if node.inputs else None, model)
            if rank is None or rank < 3:
                return None
            n = rank - 2
            if name == "pads":
                return (0,) * (2 * n)
            return (0 if name == "output_padding" else 1,) * n
        if name == "kernel_shape" and op in _WEIGHT_INPUT:
            i = _WEIGHT_INPUT[op]
            w = node.inputs[i] if len(node.inputs) > i else None
            shape = _shape(w, model)
            return tuple(shape[2:]) if shape is not None and all(
                isinstance(d, int) for d in shape[2:]) else None
        return None
    of_output = op in _AXIS_OF_OUTPUT.get(name, ())
    if not of_output and op not in _AXIS_OF_INPUT.get(name, ()):
        return value
    if of_output:
        rank = _rank(node.outputs[0] if node.outputs else None, model)
    else:
        rank = _rank(node.inputs[0] if node.inputs else None, model)
    if rank is None:
        return None
    top = rank + 1 if op == "Flatten" else rank  # Flatten's axis runs over [-r, r]
    many = isinstance(value, tuple)
    axes = value if many else (value,)
    if not all(isinstance(x, int) and -rank <= x < top for x in axes):
        return None
    norm = tuple(x + rank if x < 0 else x for x in axes)
    return tuple(sorted(norm)) if many else norm[0]


def _axis_rank(node: Any, name: str, model: LabModel | None) -> int | None:
    """The rank attribute ``name`` of ``node`` counts axes on (:data:`_AXIS_OF_INPUT`,
    :data:`_AXIS_OF_OUTPUT`), None for other attributes or an unknown rank."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in _AXIS_OF_OUTPUT.get(name, ()):
        return _rank(node.outputs[0] if node.outputs else None, model)
    if node.op_type in _AXIS_OF_INPUT.get(name, ()):
        return _rank(node.inputs[0] if node.inputs else None, model)
    return None


def _shape(v: Any, model: LabModel | None) -> tuple | None:
    """The shape of value ``v`` as the file declares it or, given ``model``, inference gives
    it; None when unknown."""
    if v is None or not v.name:
        return None
    if v.shape is not None:
        return tuple(d if isinstance(d, int) else None for d in v.shape)
    if model is not None:
        try:
            info = model.types().get(v.name)
        except LabError:
            return None
        if info is not None and info.shape is not None:
            return tuple(d if isinstance(d, int) else None for d in info.shape)
    return None


def _rank(v: Any, model: LabModel | None) -> int | None:
    shape = _shape(v, model)
    return len(shape) if shape is not None else None


def _opset(node: Any, model: LabModel | None) -> int | None:
    """The opset version of ``node``'s domain: its own, its graph's, else ``model``'s (a
    body's graph imports none); None when none says (the latest schema then)."""
    if node.version is not None:
        return int(node.version)
    domain = node.domain or ""
    for imports in (getattr(node.graph, "opset_imports", None),
                    model.ir.opset_imports if model is not None else None):
        if imports:
            v = imports.get(domain, imports.get("ai.onnx") if domain == "" else None)
            if v is not None:
                return int(v)
    return None


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        v = tuple(v)
        return v if all(isinstance(x, (int, float, str, bytes)) for x in v) else None
    return v if isinstance(v, (int, float, str, bytes)) else None


@functools.lru_cache(maxsize=512)
def _default(op_type: str, domain: str, name: str, opset: int | None = None) -> Any:
    """The schema default of an attribute in ``opset`` (None: the latest; Softmax's axis is
    1 up to opset 12, -1 from 13), None without a schema or a default."""
    import onnx  # on use: only attribute comparisons need the schemas

    try:
        schema = (onnx.defs.get_schema(op_type, opset, domain=domain) if opset is not None
                  else onnx.defs.get_schema(op_type, domain=domain))
        attr = schema.attributes.get(name)
    except onnx.defs.SchemaError:
        return None
    if attr is None or not attr.default_value.name:
        return None
    return _plain(onnx.helper.get_attribute_value(attr.default_value))
