"""Map the nodes ORT ran (names in its optimized graph) back to the model's node ids.

ORT keeps a node's name when it only rewrites it, names a fused node after its first member
(Conv+BN+Relu -> FusedConv "/stem/conv/Conv"), appends the fusion to the name
("/ln/Mul/LayerNormFusion/") or names layout nodes after the tensor they make
("/stem/relu/Relu_output_0_nchwc"), copies a QDQ DequantizeLinear that two quantized nodes
read ("x_DequantizeLinear/duplicated") and runs a float16 node that has no float16 kernel in
float32 between Casts it inserts, renaming what it touches with "InsertedPrecisionFreeCast_".
When ORT also wrote its optimized graph, the members of a
fused node are recovered from the tensors: walking back from the fused node's outputs through
original tensors that no longer exist in the optimized graph. Nodes ORT inserted (layout
reorders, memcpy) have no model node: ``mapped`` is False.

No library maps ORT's runtime names back to a source model, hence this module.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel

__all__ = ["map_ort_nodes", "INSERTED_OPS"]

INSERTED_OPS = frozenset({"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost",
                          "MemcpyToDevice", "MemcpyFromDevice"})
_SUFFIXES = (re.compile(r"_token_\d+$"), re.compile(r"_nchwc$"),
             re.compile(r"/[A-Za-z0-9]*Fusion[A-Za-z0-9_]*/?$"), re.compile(r"_fused$"),
             re.compile(r"/duplicated$"), re.compile(r"/$"),
             # ORT's float16 handling on CPU: a node without a float16 kernel runs in float32
             # between Casts it inserts, its output tensor (and the nodes named after it,
             # an NCHWc Conv) renamed with this prefix
             re.compile(r"^InsertedPrecisionFreeCast_"))
# The Casts ORT inserts around a float16 node that runs in float32 (even at 'disable').
_PRECISION_CAST = "InsertedPrecisionFreeCast_"
_MAX_COMPONENTS = 64
_PASS_THROUGH = frozenset({"Identity", "Dropout"})


def _stems(name: str) -> list[str]:
    """``name`` and the names left after stripping ORT's suffixes one by one."""
    out = [name]
    cur = name
    changed = True
    while changed and cur:
        changed = False
        for rx in _SUFFIXES:
            new = rx.sub("", cur)
            if new != cur and new:
                cur = new
                out.append(cur)
                changed = True
    return out


class _Optimized:
    """What we need of ORT's optimized graph: node outputs/inputs by name, all tensor names."""

    def __init__(self, proto) -> None:
        self.outputs: dict[str, list[str]] = {}
        # every graph's outputs of a node name: sibling If branches (optimum's merged
        # decoders) name their nodes alike, and the first graph's were taken whichever branch
        # ran (map_ort_nodes picks the branch that ran)
        self.all_outputs: dict[str, list[list[str]]] = defaultdict(list)
        self.tensors: set[str] = set()
        self.node_names: set[str] = set()
        graphs = [proto.graph]
        while graphs:
            g = graphs.pop()
            self.tensors.update(v.name for v in g.input)
            self.tensors.update(v.name for v in g.output)
            self.tensors.update(t.name for t in g.initializer)
            for n in g.node:
                self.node_names.add(n.name)
                # a tensor computed in float32 between ORT's inserted Casts is the model's
                # tensor renamed ("InsertedPrecisionFreeCast_/Softmax_output_0"): the node
                # making it makes the model's
                outs = [_unprefixed(x) for x in n.output]
                self.outputs.setdefault(n.name, outs)
                self.all_outputs[n.name].append(outs)
                self.tensors.update(x for x in n.output if x)
                self.tensors.update(x for x in n.input if x)
                for a in n.attribute:
                    if a.HasField("g"):
                        graphs.append(a.g)
                    graphs.extend(a.graphs)
        # a tensor that runs in float32 between ORT's inserted Casts is still there, renamed
        # ("InsertedPrecisionFreeCast_/pool/MaxPool_output_0"): a fused node's walk back
        # stops at it, as at any tensor ORT kept (it went on to the model's inputs, and every
        # Conv of a float16 ResNet was a member of a FusedConv and of the final Flatten)
        self.tensors.update(t[len(_PRECISION_CAST):] for t in list(self.tensors)
                            if t.startswith(_PRECISION_CAST))


def _unprefixed(name: str) -> str:
    return name[len(_PRECISION_CAST):] if name.startswith(_PRECISION_CAST) else name


def map_ort_nodes(model: LabModel, keys: pd.DataFrame, optimized=None,
                  opt_level: str = "all", untaken: Iterable[str] = ()) -> pd.DataFrame:
    """Map each executed ORT node to a model node id.

    Args:
        model: the model that was loaded into the session.
        keys: unique (ort_name, node_index, op_type) rows from the trace.
        optimized: ORT's optimized graph (``onnx.ModelProto``) or None.
        opt_level: the session's level; at 'disable', unnamed nodes map by node_index.
        untaken: body graph paths the runs did not take (``core.branches.untaken_bodies``):
            ORT's trace names a body node by its name alone, which sibling branches share
            (optimum's merged decoders: both If branches hold ``/model/layers.0/...``), so
            without them such a node mapped to no node at 'disable' and to the no-cache
            branch at 'all', whichever branch ran.

    Returns:
        DataFrame(ort_name, node_index, node_id, mapped, components, how) where how is
        'name' (same node), 'index' (an unnamed node by ORT's node index), 'renamed' (one model node under
        another name), 'fused' (components lists the model nodes it covers), 'inserted' (ORT's
        own node, e.g. a layout reorder) or 'unmapped'.
    """
    idx = model.index
    skip = _under(frozenset(untaken))
    entries = {nid: e for nid, e in idx.entries.items() if not skip(e.graph)}
    producer = idx.producer
    if untaken:
        # a name defined in sibling branches: its definition in the branch that ran
        producer = dict(producer)
        producer.update({name: nid for (g, name), nid in idx.producer_at.items()
                         if not skip(g)})
    by_name: dict[str, str] = {}
    dup: set[str] = set()
    for nid, e in entries.items():
        nm = e.node.name
        if nm:
            if nm in by_name:
                dup.add(nm)
            by_name[nm] = nid
    for nm in dup:
        by_name.pop(nm, None)
    ort_index = _ort_indices(idx)
    main_pos = {ort_index[nid]: nid for nid, e in idx.entries.items()
                if e.graph == "" and nid in ort_index}
    # ORT names unnamed nodes "{op_type}_{node index}" within their graph (bodies included),
    # its index counting the nodes it keeps: use that where it points at exactly one unnamed
    # model node.
    local: dict[str, list[str]] = defaultdict(list)
    for nid, e in entries.items():
        if not e.node.name and nid in ort_index:
            local[f"{e.node.op_type}_{ort_index[nid]}"].append(nid)
    main_pos = {**{("local", k): v[0] for k, v in local.items() if len(v) == 1}, **main_pos}
    opt = _Optimized(optimized) if optimized is not None else None
    if opt is not None and untaken:
        # a node name sibling branches share: the outputs of the branch that ran (those of
        # the other made a cache branch's Concat a fusion of the no-cache branch's, and every
        # node of the branch that did not run read 'removed', not 'not run')
        def ran(outs: list[str]) -> bool:
            return not any(t in producer and skip(idx.entries[producer[t]].graph)
                           for t in outs)

        opt.outputs = {name: next((o for o in cands if ran(o)), [])
                       for name, cands in opt.all_outputs.items()}

    keys = keys[["ort_name", "node_index", "op_type"]]
    found = [_anchors(idx, producer, by_name, main_pos, opt, n, i, op, opt_level)
             for n, i, op in keys.itertuples(index=False, name=None)]
    # Model nodes another ORT node stands for: a fused node's walk back stops there.
    claimed = {a for _, anchors, _ in found for a in anchors}
    rows = []
    for (ort_name, node_index, op_type), (primary, anchors, how) in zip(
            keys.itertuples(index=False, name=None), found):
        comps: tuple[str, ...] = tuple(anchors)
        if opt is not None and anchors:
            comps = _components(idx, producer, opt, ort_name, anchors,
                                claimed - set(anchors))
        if how == "name" and comps != (primary,):
            how = "fused"
        if primary is None and anchors:
            # The member running the kernel's op (Conv for an NCHWc Conv or a FusedConv);
            # else the node that made the output tensor.
            op = op_type or ""
            kin = {op, op.removeprefix("Fused")}
            same = [c for c in comps if idx.entries[c].node.op_type in kin]
            primary = same[0] if same else anchors[0]
        if how == "fused" and comps == (primary,):
            how = "renamed"
        rows.append((ort_name, node_index, primary if primary is not None else ort_name,
                     primary is not None, comps, how))
    return pd.DataFrame(rows, columns=["ort_name", "node_index", "node_id", "mapped",
                                       "components", "how"])


def _under(paths: frozenset[str]):
    """Whether a graph path is one of ``paths`` or inside one."""
    if not paths:
        return lambda graph: False
    return lambda graph: bool(graph) and (graph in paths or any(
        graph.startswith(p + "/") for p in paths))


def _ort_indices(idx) -> dict[str, int]:
    """node id -> the index onnxruntime gives the node in its graph: its place in the graph's
    stored order among the nodes ORT keeps. ORT turns every Constant node into an
    initializer when it loads a graph, so each Constant before a node lowers its index by one
    (a Cast at position 1 after a Constant is ORT's "Cast_0"); Constants have none."""
    out: dict[str, int] = {}
    by_graph: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for nid, e in idx.entries.items():
        by_graph[e.graph].append((e.position, nid))
    for members in by_graph.values():
        k = 0
        for _pos, nid in sorted(members):
            node = idx.entries[nid].node
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                continue
            out[nid] = k
            k += 1
    return out


def _anchors(idx, producer, by_name, main_pos, opt, ort_name, node_index, op_type,
             opt_level):
    """(primary node id or None, anchor node ids, how) of one ORT node."""
    if op_type in INSERTED_OPS or (op_type == "Cast" and ort_name.startswith(_PRECISION_CAST)):
        return None, [], "inserted"
    # an unnamed node's id ("Mul_4", from its stored position) is no name ORT knows: ORT's own
    # name for an unnamed node ("Mul_3", from its node index) may equal another node's id
    direct = by_name.get(ort_name) or (ort_name if ort_name in idx.entries
                                       and idx.entries[ort_name].node.name else None)
    if direct is not None:
        anchors = [direct]
        if opt is not None:
            anchors += [producer[t] for t in opt.outputs.get(ort_name, ())
                        if t in producer and producer[t] not in anchors]
        return direct, anchors, "name"
    if ("local", ort_name) in main_pos and not by_name.get(ort_name):
        nid = main_pos[("local", ort_name)]
        if idx.entries[nid].node.op_type == op_type or opt_level == "disable":
            return nid, [nid], "index"
    if not ort_name and opt_level == "disable" and node_index is not None:
        try:
            pos = int(node_index)
        except (TypeError, ValueError):
            pos = -1
        if pos in main_pos:
            return main_pos[pos], [main_pos[pos]], "index"
    # Fused/renamed: a stem that is a model node, or tensors the node produces.
    primary = None
    anchors: list[str] = []
    for stem in _stems(ort_name)[1:]:
        nid = by_name.get(stem) or (stem if stem in idx.entries else None)
        if nid is not None:
            primary = nid
            anchors.append(nid)
            break
        if stem in producer:
            anchors.append(producer[stem])
            break
    if opt is not None:
        for t in opt.outputs.get(ort_name, ()):
            if t in producer and producer[t] not in anchors:
                anchors.append(producer[t])
    if not anchors:
        return None, [], "unmapped"
    return primary, anchors, "fused"


def _components(idx, producer, opt, ort_name: str, anchors: Iterable[str], stop: set[str]
                ) -> tuple[str, ...]:
    """Model nodes a fused ORT node covers, in topological order."""
    seen: set[str] = set()
    stack = list(anchors)
    while stack and len(seen) < _MAX_COMPONENTS:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        for inp in idx.entries[nid].node.inputs:
            if inp is None or not inp.name or inp.name in opt.tensors:
                continue
            p = producer.get(inp.name)
            if p is None or p in seen or p in stop:
                continue
            pname = idx.entries[p].node.name
            if pname and pname in opt.node_names and pname != ort_name:
                continue  # that node still runs on its own
            stack.append(p)
    # Pass-through nodes ORT deleted (Identity, inference Dropout) did not run inside the
    # fused kernel: walk through them, but do not count them as members.
    anchors_set = set(anchors)
    members = [n for n in seen if n in anchors_set or idx.entries[n].node.op_type
               not in _PASS_THROUGH]
    return tuple(sorted(members, key=lambda n: idx.entries[n].topo))
