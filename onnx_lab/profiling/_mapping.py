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
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel

__all__ = ["map_trace", "wants_graph", "INSERTED_OPS", "UNKNOWN_BRANCH"]

INSERTED_OPS = frozenset({"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost",
                          "MemcpyToDevice", "MemcpyFromDevice"})
_ADDED_RESHAPE = re.compile(r"(?:^|/)gemm_(?:input|output)_reshape(?:_token_\d+)?$")
# A Reshape ORT made in place of one (ReshapeFusion: the model's Reshape with its shape
# computation folded, a member of it) or around a Gemm: ORT's own only where nothing maps it.
_NEW_RESHAPE = re.compile(r"_new_reshape(?:_token_\d+)?$")
# The Transposes ORT's layout transformer puts around a node it runs channels-last (a QDQ
# Conv's QLinearConv at 'all'), named as ORT names a node it adds: 'Transpose',
# 'Transpose_token_33'.
_ADDED_TRANSPOSE = re.compile(r"Transpose(?:_token_\d+)?")
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


def _added(ort_name: str, op_type: str | None) -> bool:
    """Whether ``ort_name`` is a node ORT added around others (where no model node has the
    name): the Reshapes around a Gemm it fused from a MatMul of rank > 2
    ('gemm_input_reshape_token_12') and its layout Transposes."""
    if op_type == "Reshape":
        return bool(_ADDED_RESHAPE.search(ort_name))
    return op_type == "Transpose" and bool(_ADDED_TRANSPOSE.fullmatch(ort_name))


class _Optimized:
    """What we need of ORT's optimized graph: node outputs/inputs by name, all tensor names."""

    def __init__(self, proto, model_names: set[str]) -> None:
        self.outputs: dict[str, list[str]] = {}
        # every graph's: ORT names the nodes of a body as it names the main graph's (a fused
        # node in a Loop body and one in the main graph are both "fused /MatMulAddFusion")
        self.all_outputs: dict[str, list[list[str]]] = defaultdict(list)
        self.tensors: set[str] = set()
        self.node_names: set[str] = set()
        # the main graph's nodes in stored order: (name, op_type, outputs, the node)
        self.main: list[tuple[str, str, list[str], Any]] = []
        # (ORT name, node index) of a trace call -> its main-graph node, where the name alone
        # does not tell (see :meth:`align`)
        self.by_key: dict[tuple, tuple[str, str, list[str], Any]] = {}
        # whether the main graph has a node without a name or with another's
        self.ambiguous = False
        main_names: set[str] = set()
        graphs = [proto.graph]
        while graphs:
            g = graphs.pop()
            main = g is proto.graph
            self.tensors.update(v.name for v in g.input)
            self.tensors.update(v.name for v in g.output)
            self.tensors.update(t.name for t in g.initializer)
            # tensor -> the outputs list of the node that makes it, through the nodes ORT
            # adds after others: the Transpose after a channels-last QLinearConv makes the
            # model's tensor its QuantizeLinear made, the Reshape after a Gemm the tensor of
            # the Add fused into it; the fused node computed those (each ORT node was taken
            # for the model node, which the fused node lost)
            made: dict[str, list[str]] = {}
            for n in g.node:  # stored in topological order
                self.node_names.add(n.name)
                # a tensor computed in float32 between ORT's inserted Casts is the model's
                # tensor renamed ("InsertedPrecisionFreeCast_/Softmax_output_0"): the node
                # making it makes the model's
                outs = [_unprefixed(x) for x in n.output]
                src = _unprefixed(n.input[0]) if n.input else ""
                # ORT's own node after another: an added Reshape/Transpose, or a Cast it put
                # after a node it ran in float32 (the Gemm of a float16 MatMul + Add, then
                # its Reshape back to rank 3, which makes the Add's tensor)
                if src in made and n.name not in model_names and (
                        _added(n.name, n.op_type)
                        or (n.op_type == "Cast" and n.name.startswith(_PRECISION_CAST))):
                    made[src].extend(outs)
                    made.update(dict.fromkeys(outs, made[src]))
                    outs = []
                else:
                    made.update(dict.fromkeys(outs, outs))
                self.outputs.setdefault(n.name, outs)
                self.all_outputs[n.name].append(outs)
                if main:
                    self.main.append((n.name, n.op_type, outs, n))
                    if not n.name or n.name in main_names:
                        self.ambiguous = True
                    main_names.add(n.name)
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


    def align(self, keys: Iterable[tuple]) -> None:
        """Tie the main graph's calls (``keys``: (ORT name, node index, op) in the order they
        first ran) to the nodes of the optimized graph where names do not: ORT writes an
        unnamed node (a QLinearAdd or QGemm it made from an unnamed Add or Gemm, an unnamed
        Conv it fused a BatchNormalization into) with no name and the trace calls it
        ``{op_type}_{node index}``, an index counted in ORT's graph that the written graph
        does not hold (a node ORT made takes the next free one); a name several nodes share
        ('/QuickGeluFusion/' of unnamed Muls) is no key either. ORT writes its graph in the
        topological order it runs the nodes in, so the k-th such node of an op (and name) is
        the k-th such call; a group whose counts differ is left out."""
        counts: dict[str, int] = defaultdict(int)
        for r in self.main:
            counts[r[0]] += 1
        groups: dict[tuple[str, str], list] = defaultdict(list)
        for r in self.main:
            if not r[0] or counts[r[0]] > 1:
                groups[(r[0], r[1])].append(r)
        if not groups:
            return
        calls: dict[tuple[str, str], list[tuple]] = defaultdict(list)
        for name, i, op in keys:
            if counts.get(name, 0) > 1:
                calls[(name, op)].append((name, i))
            elif name not in counts and i is not None and name == f"{op}_{i}":
                calls[("", op)].append((name, i))
        for g, recs in groups.items():
            ks = calls.get(g, ())
            if len(ks) == len(recs):
                self.by_key.update(zip(ks, recs))

    def outs_of(self, ort_name: str, node_index, unnamed: bool = False) -> list[str]:
        """The outputs of ORT's node (model tensors: through the nodes ORT added after it);
        of a node written without a name only where ``unnamed``."""
        rec = self.by_key.get((ort_name, node_index))
        if rec is not None and (rec[0] or unnamed):
            return rec[2]
        return self.outputs.get(ort_name, [])


def _unprefixed(name: str) -> str:
    return name[len(_PRECISION_CAST):] if name.startswith(_PRECISION_CAST) else name


class _Scope:
    """One graph's lookups: its unique node names, and its unnamed nodes by the name ORT gives
    them (``{op_type}_{node index}``) and by node index."""

    __slots__ = ("names", "local", "pos")

    def __init__(self) -> None:
        self.names: dict[str, str | None] = {}  # None: a name the graph holds twice
        self.local: dict[str, str] = {}
        self.pos: dict[int, str] = {}


class _Context:
    """What mapping needs of the model: the whole model's lookups (the main graph's events,
    which may run nodes ORT inlined from a body) and each graph's own (a body's events)."""

    def __init__(self, model: LabModel, optimized, opt_level: str,
                 untaken: Iterable[str]) -> None:
        idx = self.idx = model.index
        self.opt_level = opt_level
        self.untaken = frozenset(untaken)
        skip = _under(self.untaken)
        entries = {nid: e for nid, e in idx.entries.items() if not skip(e.graph)}
        producer = idx.producer
        if self.untaken:
            # a name defined in sibling branches: its definition in the branch that ran
            producer = dict(producer)
            producer.update({name: nid for (g, name), nid in idx.producer_at.items()
                             if not skip(g)})
        self.producer = producer
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
        self.by_name = by_name
        ort_index = self.ort_index = _ort_indices(idx)
        self.main_pos = {ort_index[nid]: nid for nid, e in idx.entries.items()
                         if e.graph == "" and nid in ort_index}
        # ORT names unnamed nodes "{op_type}_{node index}" within their graph (bodies
        # included), its index counting the nodes it keeps: without knowing the graph, use
        # that where it points at exactly one unnamed model node.
        local: dict[str, list[str]] = defaultdict(list)
        for nid, e in entries.items():
            if not e.node.name and nid in ort_index:
                local[f"{e.node.op_type}_{ort_index[nid]}"].append(nid)
        self.local = {("local", k): v[0] for k, v in local.items() if len(v) == 1}
        self.main_pos = {**self.local, **self.main_pos}
        self.scopes: dict[str, _Scope] = {}
        for nid, e in idx.entries.items():
            sc = self.scopes.get(e.graph)
            if sc is None:
                sc = self.scopes[e.graph] = _Scope()
            nm = e.node.name
            if nm:
                sc.names[nm] = None if nm in sc.names else nid
            k = ort_index.get(nid)
            if k is not None:
                sc.pos[k] = nid
                if not nm:
                    sc.local[f"{e.node.op_type}_{k}"] = nid
        self.opt = _Optimized(optimized, {e.node.name for e in idx.entries.values()}) \
            if optimized is not None else None
        self._bodies: dict[str, list[str]] | None = None
        self._fits: dict[tuple, bool] = {}

    def producer_of(self, graph: str):
        """tensor name -> its producer as a node of ``graph`` reads it."""
        if not graph:
            return self.producer.get
        return lambda name: self.idx.producer_in(name, graph)

    def bodies(self, nid: str) -> list[str]:
        """The body graph paths of node ``nid`` (then_branch before else_branch)."""
        if self._bodies is None:
            by_owner: dict[str, list[str]] = defaultdict(list)
            idx = self.idx
            for path in idx.graphs:
                if path:
                    by_owner[path.rsplit("/", 1)[0]].append(path)
            # a body's path starts with its owner's path: the owner's id where that id
            # carries its graph's path (an unnamed body node), else graph path + id
            self._bodies = {}
            for owner_id, e in idx.entries.items():
                g = e.graph
                owner = owner_id if not g or owner_id.startswith(g + "/") else f"{g}/{owner_id}"
                if owner in by_owner:
                    self._bodies[owner_id] = by_owner[owner]
        return self._bodies.get(nid, [])

    def anchors(self, graph: str, ort_name: str, node_index, op_type):
        """(primary node id or None, anchor node ids, how) of one ORT node of ``graph``."""
        if op_type in INSERTED_OPS or (op_type == "Cast" and ort_name.startswith(_PRECISION_CAST)):
            return None, [], "inserted"
        found = self._in_scope(graph, ort_name, node_index, op_type)
        if found is not None:
            return found
        if graph:
            # a body's node ORT renamed past what its graph's lookups follow: the model's
            # lookups, where they land inside this body (a nested body's node ORT inlined)
            primary, anchors, how = _anchors(self.idx, self.producer, self.by_name,
                                             self.local, self.opt, ort_name, node_index,
                                             op_type, self.opt_level)
            inside = _under(frozenset({graph}))
            if anchors and all(inside(self.idx.entries[a].graph) for a in anchors):
                return primary, anchors, how
            return None, [], "inserted" if how == "inserted" else "unmapped"
        return _anchors(self.idx, self.producer, self.by_name, self.main_pos, self.opt,
                        ort_name, node_index, op_type, self.opt_level)

    def _in_scope(self, graph: str, ort_name: str, node_index, op_type):
        sc = self.scopes.get(graph)
        if sc is None:
            return None
        idx = self.idx
        producer = self.producer_of(graph)
        made = self._made(graph, ort_name, node_index)
        direct = sc.names.get(ort_name)
        if direct is not None:
            return direct, [direct] + [p for p in made if p != direct], "name"
        nid = sc.local.get(ort_name)
        if nid is not None and ort_name not in sc.names and (
                idx.entries[nid].node.op_type == op_type or self.opt_level == "disable"):
            # as a named node's: with the model nodes making its outputs (the
            # BatchNormalization fused into an unnamed Conv, a QDQ Flatten's QuantizeLinear)
            made = self._made(graph, ort_name, node_index, unnamed=True)
            return nid, [nid] + [p for p in made if p != nid], "index"
        if not ort_name and self.opt_level == "disable" and node_index is not None:
            try:
                nid = sc.pos.get(int(node_index))
            except (TypeError, ValueError):
                nid = None
            if nid is not None:
                return nid, [nid], "index"
        if _added(ort_name, op_type):
            return None, [], "inserted"
        primary = None
        anchors: list[str] = []
        for stem in _stems(ort_name)[1:]:
            nid = sc.names.get(stem)
            if nid is not None:
                primary = nid
                anchors.append(nid)
                break
            p = producer(stem)
            if p is not None and idx.entries[p].graph == graph:
                anchors.append(p)
                break
        anchors += [p for p in made if p not in anchors]
        if not anchors:
            return None
        return primary, anchors, "fused"

    def _made(self, graph: str, ort_name: str, node_index=None,
              unnamed: bool = False) -> list[str]:
        """The model nodes of ``graph`` that made the outputs of ORT's node ``ort_name`` in
        the optimized graph (of the graph whose ORT node of that name makes some; in the main
        graph, of the node :meth:`_Optimized.align` tied the call to, one written without a
        name only where ``unnamed``)."""
        if self.opt is None:
            return []
        producer = self.producer_of(graph)
        entries = self.idx.entries
        by_key = self.opt.by_key
        rec = by_key.get((ort_name, node_index)) if by_key and not graph else None
        if rec is not None and (rec[0] or unnamed):
            return list(dict.fromkeys(
                p for t in rec[2] if (p := producer(t)) is not None and entries[p].graph == ""))
        for outs in self.opt.all_outputs.get(ort_name, ()):
            made = list(dict.fromkeys(
                p for t in outs if (p := producer(t)) is not None and entries[p].graph == graph))
            if made:
                return made
        return []

    def fits(self, graph: str, key: tuple) -> bool:
        """Whether the ORT node ``key`` (ort_name, node_index, op_type) is one of ``graph``'s."""
        hit = self._fits.get((graph, key))
        if hit is None:
            found = self._in_scope(graph, *key)
            hit = self._fits[(graph, key)] = found is not None
        return hit

    def branch(self, nid: str, keys: set[tuple], run: int, taken) -> str | None:
        """The body of control-flow node ``nid`` whose nodes ran as ``keys`` in one call, None
        when the trace cannot tell (both branches of an If hold such nodes)."""
        bodies = self.bodies(nid)
        if len(bodies) <= 1:
            return bodies[0] if bodies else None
        # the branch holding the most of the nodes that ran (ORT's own nodes fit both)
        real = [k for k in keys if k[2] not in INSERTED_OPS
                and not (k[2] == "Cast" and k[0].startswith(_PRECISION_CAST))]
        score = {b: sum(self.fits(b, k) for k in real) for b in bodies}
        best = max(score.values())
        cands = [b for b in bodies if score[b] == best]
        if len(cands) > 1:
            # the feeds' branch inputs (optimum's use_cache_branch) say which ran
            ran = [b for b in cands if b not in self.untaken]
            cands = ran or cands
        if len(cands) > 1 and taken is not None:
            # the condition's value in this run
            body = taken(nid, run)
            if body in cands:
                cands = [body]
        if len(cands) > 1 and self.opt_level == "disable":
            # nothing is removed at 'disable': the branch every node of which ran
            full = [b for b in cands if self._runs_whole(b, real)]
            cands = full if len(full) == 1 else cands
        return cands[0] if len(cands) == 1 else None

    def _runs_whole(self, graph: str, keys: list[tuple]) -> bool:
        ran = {self._in_scope(graph, *k)[0] for k in keys if self.fits(graph, k)}
        idx = self.idx
        return all(nid in ran for nid in idx.topo_order(graph)
                   if not (idx.entries[nid].node.op_type == "Constant"
                           and idx.entries[nid].node.domain in ("", "ai.onnx")))


def wants_graph(model: LabModel, opt_level: str) -> bool:
    """Whether mapping a trace at ``opt_level`` needs ORT's optimized graph: at every level but
    'disable', where nothing is fused; there too where an unnamed DequantizeLinear is in the
    main graph: ORT copies one that two quantized nodes read at every level, and names the
    copy '/duplicated' after the empty name (a named one's 'x_dq/duplicated' tells)."""
    if opt_level != "disable":
        return True
    return any(e.graph == "" and not e.node.name and e.node.op_type == "DequantizeLinear"
               for e in model.index.entries.values())


#: ``graph`` of a call in an If whose branch the trace cannot tell: ``{If node id}/?``.
UNKNOWN_BRANCH = "?"


def map_trace(model: LabModel, kernels: pd.DataFrame, optimized=None, opt_level: str = "all",
              untaken: Iterable[str] = (), taken=None) -> tuple[np.ndarray, pd.DataFrame]:
    """Map each kernel call of a trace to the model node that ran it.

    onnxruntime names a node by its name in its own graph (an unnamed one
    ``{op_type}_{node index}``, bodies included): a body's ``Mul_0`` and the main graph's
    share their name and node index. A body's calls run inside their If/Loop/Scan node's
    call (``parse.Trace.kernels.parent``), so each call is mapped in the graph it ran in: the
    main graph, a Loop/Scan's body, or the If branch whose nodes the call's body ran.

    Args:
        model: the model that was loaded into the session.
        kernels: the trace's kernel calls (``parse.Trace.kernels``: ort_name, node_index,
            op_type, run, parent).
        optimized: ORT's optimized graph (``onnx.ModelProto``) or None.
        opt_level: the session's level; at 'disable', unnamed nodes map by node_index.
        untaken: body graph paths the runs did not take (``core.branches.untaken_bodies``):
            where the names in an If call fit both branches (optimum's merged decoders: both
            hold ``/model/layers.0/...``), the other one ran.
        taken: ``taken(if node id, run) -> body path or None``: which branch of an If ran in
            a run, asked where the trace cannot tell (both branches alike).

    Returns:
        (graph of each call: the graph path it ran in, ``"{If node id}/?"`` for a call in an
        If whose branch nothing told; the mapping: DataFrame(graph, ort_name, node_index,
        node_id, mapped, components, how), one row per (graph, ort_name, node_index)) where
        how is 'name' (same node), 'index' (an unnamed node by ORT's node index), 'renamed'
        (one model node under another name), 'fused' (components lists the model nodes it
        covers), 'inserted' (ORT's own node, e.g. a layout reorder) or 'unmapped'.
    """
    ctx = _Context(model, optimized, opt_level, untaken)
    n = len(kernels)
    parent = kernels["parent"].to_numpy() if "parent" in kernels else np.full(n, -1)
    if ctx.opt is not None and ctx.opt.ambiguous:
        # the main graph's calls in the order they first ran (one thread runs them in turn)
        main = kernels.loc[parent < 0, ["ort_name", "node_index", "op_type"]] \
            .drop_duplicates(["ort_name", "node_index"])
        ctx.opt.align((name, None if i is pd.NA else i, op)
                      for name, i, op in main.itertuples(index=False, name=None))
    graph = np.full(n, "", dtype=object)
    found: dict[tuple, tuple] = {}
    if (parent < 0).all():  # no bodies ran: every call is the main graph's
        keys = kernels[["ort_name", "node_index", "op_type"]].drop_duplicates(
            ["ort_name", "node_index"])
        for name, i, op in keys.itertuples(index=False, name=None):
            i = None if i is pd.NA else i
            found[("", name, i)] = (op, ctx.anchors("", name, i, op))
    else:
        names = kernels["ort_name"].to_numpy(dtype=object)
        ops = kernels["op_type"].to_numpy(dtype=object)
        nidx = kernels["node_index"].astype(object).where(kernels["node_index"].notna(), None) \
            .to_numpy(dtype=object)
        runs = kernels["run"].to_numpy() if "run" in kernels else np.zeros(n, np.int64)
        children: dict[int, list[int]] = defaultdict(list)
        for i, p in enumerate(parent.tolist()):
            if p >= 0:
                children[p].append(i)
        level = np.flatnonzero(parent < 0).tolist()
        while level:
            nxt: list[int] = []
            for i in level:
                g = graph[i]
                k = (g, names[i], nidx[i])
                if k not in found:
                    found[k] = (ops[i], ctx.anchors(g, names[i], nidx[i], ops[i])
                                if not g.endswith(UNKNOWN_BRANCH)
                                else (None, [], "unmapped"))
                kids = children.get(i)
                if not kids:
                    continue
                nid = found[k][1][0]
                body = None
                if nid is not None:
                    keys = {(names[c], nidx[c], ops[c]) for c in kids}
                    body = ctx.branch(nid, keys, int(runs[i]), taken)
                label = body if body is not None else \
                    f"{nid or names[i]}/{UNKNOWN_BRANCH}"
                for c in kids:
                    graph[c] = label
                nxt.extend(kids)
            level = nxt
    _expanded(ctx, found)
    _unnamed(ctx, found)
    # Model nodes another ORT node stands for: a fused node's walk back stops there.
    claimed = {a for _, (_, anchors, _) in found.values() for a in anchors}
    idx, opt = ctx.idx, ctx.opt
    rows = []
    for (g, ort_name, node_index), (op_type, (primary, anchors, how)) in found.items():
        comps: tuple[str, ...] = tuple(anchors)
        if opt is not None and anchors and how != "renamed":  # renamed: a body's kernel
            comps = _components(idx, ctx.producer_of(g), opt, ort_name, anchors,
                                claimed - set(anchors))
        if len(comps) > 1:
            # one rule for every fusion, named or not: the name ORT kept (a member's, or
            # none in an unnamed model) does not choose the member
            primary = _primary(idx, comps, op_type or "")
            if how in ("name", "index"):
                how = "fused"
        elif primary is None and anchors:
            primary = comps[0] if comps else anchors[0]
        if how == "fused" and comps == (primary,):
            how = "renamed"
        rows.append((g, ort_name, node_index, primary if primary is not None else ort_name,
                     primary is not None, comps, how))
    mapping = pd.DataFrame(rows, columns=["graph", "ort_name", "node_index", "node_id",
                                          "mapped", "components", "how"])
    mapping["node_index"] = pd.array(mapping["node_index"], dtype="string")
    return graph, mapping


# The name ORT gives an unnamed node of its graph: '{op_type}_{node index}'.
_ORT_LOCAL = re.compile(r"(?P<op>[A-Za-z][A-Za-z0-9]*)_(?P<k>\d+)")


def _expanded(ctx: _Context, found: dict[tuple, tuple]) -> None:
    """Map the kernels of the nodes ORT ran as their function body to those nodes.

    A node without a kernel for its types (a float16 Softmax or HardSwish on CPU) is replaced
    by its ONNX function body when ORT partitions the graph: the body's nodes are unnamed
    ('ReduceMax_13', 'Sub_14', ... in the trace, at every level) and get the next node
    indices, one per body node but its Constants (a CastLike ORT folds keeps its index), in
    the order of the body, the expanded nodes taken in node index order. A run of unmapped
    ``{op}_{k}`` calls whose ops sit at their offsets in a node's body, its last node (the one
    making the node's output) among them, is that node's; anything else stays unmapped.
    """
    keys: dict[str, list[tuple[int, str, tuple]]] = defaultdict(list)
    for key, (op, (_, _, how)) in found.items():
        g, name, i = key
        if how != "unmapped" or not name or g.endswith(UNKNOWN_BRANCH):
            continue
        m = _ORT_LOCAL.fullmatch(name)
        if m is None or m["op"] != op or (i is not None and str(i) != m["k"]):
            continue
        keys[g].append((int(m["k"]), op, key))
    if not keys:
        return
    claimed = {a for _, (_, anchors, _) in found.values() for a in anchors}
    idx, opt = ctx.idx, ctx.opt
    opset = _onnx_opset(idx)
    for g, calls in keys.items():
        calls.sort()
        cands = sorted((ctx.ort_index[nid], nid) for nid in idx.topo_order(g)
                       if nid not in claimed and nid in ctx.ort_index)
        start, floor = 0, -1
        for _, nid in cands:
            node = idx.entries[nid].node
            # a node ORT fused or removed (its output gone from the optimized graph) was not
            # expanded
            if opt is not None and not all(v is None or not v.name or v.name in opt.tensors
                                           for v in node.outputs):
                continue
            ops = _body_ops(node, opset)
            if not ops:
                continue
            hit = _body_run(calls, start, floor, ops)
            if hit is None:
                continue
            members, start, floor = hit
            for key in members:
                found[key] = (found[key][0], (nid, [nid], "renamed"))


def _from_unnamed(name: str) -> bool:
    """Whether ``name`` is one ORT gives a node it made in place of an unnamed one: nothing
    but its suffixes ('_token_2' of a channels-last QLinearConv, '/duplicated' of a copied
    DequantizeLinear, '/QuickGeluFusion/_token_0'), or none."""
    cur, changed = name, True
    while changed and cur:
        changed = False
        for rx in _SUFFIXES:
            new = rx.sub("", cur)
            if new != cur:
                cur, changed = new, True
    return not cur


_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


def _unnamed(ctx: _Context, found: dict[tuple, tuple]) -> None:
    """Map the main graph's calls still unmapped that ORT made from unnamed model nodes.

    A named model's fused node keeps a member's name ('/add/Add' of a QLinearAdd,
    '/c1/Conv_token_1' of a channels-last QLinearConv); an unnamed model's is written without
    a name (the trace's ``QLinearAdd_37``: :meth:`_Optimized.align` finds it) or named by
    the empty name ('_token_2', '/duplicated'). Its members are then found from tensors: the
    model nodes making its outputs (through the nodes ORT added after it); else, for a copy of
    a DequantizeLinear, the model's DequantizeLinear reading the same inputs; else the one
    model node whose op the kernel's op names (Add of QLinearAdd, Conv of QLinearConv) among
    the readers of its inputs, through the QuantizeLinear/DequantizeLinear pairs no other call
    stands for (inside ORT's channels-last region no model tensor is left to follow).
    Runs after :func:`_expanded`: a float16 Softmax's body makes the Softmax's tensor too.
    """
    opt = ctx.opt
    if opt is None or not any(how == "unmapped" and not g
                              for (g, _, _), (_, (_, _, how)) in found.items()):
        return
    by_name: dict[str, list] = defaultdict(list)
    for r in opt.main:
        by_name[r[0]].append(r)
    idx, producer = ctx.idx, ctx.producer

    def rec_of(name: str, i) -> tuple | None:
        rec = opt.by_key.get((name, i))
        if rec is None and len(by_name.get(name, ())) == 1:
            rec = by_name[name][0]
        return rec

    todo = []
    for key, (op, (_, _, how)) in found.items():
        g, name, i = key
        if how != "unmapped" or g:
            continue
        rec = rec_of(name, i)
        if rec is not None and _from_unnamed(rec[0]):
            todo.append((key, op, rec))
    if not todo:
        return
    claimed: set[str] | None = None
    made_by: dict[str, list[str]] | None = None  # ORT tensor -> anchors of the call making it
    for key, op, rec in todo:
        anchors = list(dict.fromkeys(p for t in rec[2] if (p := producer.get(t)) is not None))
        if not anchors:
            if claimed is None:
                claimed = {a for _, (_, a, _) in found.values() for a in a}
                made_by = {}
                for (g, name, i), (_, (_, a, _)) in found.items():
                    r = rec_of(name, i) if not g and a else None
                    if r is not None:
                        made_by.update(dict.fromkeys(r[2], a))
            nid = _by_inputs(idx, opt, rec, op or "", claimed, made_by or {})
            if nid is None:
                continue
            anchors = [nid]
        if claimed is not None:
            claimed.update(anchors)
            if made_by is not None:
                made_by.update(dict.fromkeys(rec[2], anchors))
        found[key] = (op, (None, anchors, "fused"))


def _by_inputs(idx, opt: _Optimized, rec, op_type: str, claimed: set[str],
               made_by: dict[str, list[str]]) -> str | None:
    """The model node ORT's node ``rec`` (of kernel op ``op_type``) stands for, from its
    inputs (see :func:`_unnamed`); None when not exactly one."""
    entries, consumers = idx.entries, idx.consumers
    inputs = [_unprefixed(t) for t in rec[3].input if t]
    if not inputs:
        return None
    if op_type == "DequantizeLinear":
        same = [c for c in consumers.get(inputs[0], ()) if entries[c].graph == ""
                and entries[c].node.op_type == "DequantizeLinear"
                and [v.name if v is not None else "" for v in entries[c].node.inputs] == inputs]
        return same[0] if len(same) == 1 else None
    # each input votes for the nodes it reaches: a node's output scale is also read by the
    # DequantizeLinear before the next node
    votes: dict[str, int] = defaultdict(int)
    for t in dict.fromkeys(inputs):
        found: set[str] = set()
        seen: set[str] = set()
        stack = list(consumers.get(t, ()))
        while stack:
            c = stack.pop()
            if c in seen or c in claimed or entries[c].graph != "":
                continue
            seen.add(c)
            node = entries[c].node
            if node.op_type in _QDQ and node.domain in ("", "ai.onnx"):
                for v in node.outputs:
                    if v is not None and v.name and v.name not in opt.tensors:
                        stack.extend(consumers.get(v.name, ()))
            elif _names_op(op_type, node.op_type):
                found.add(c)
        for c in found:
            votes[c] += 1
    if not votes:
        return _after(idx, opt, rec, claimed, made_by)
    best = max(votes.values())
    top = [c for c, v in votes.items() if v == best]
    return top[0] if len(top) == 1 else None


def _after(idx, opt: _Optimized, rec, claimed: set[str], made_by: dict[str, list[str]]
           ) -> str | None:
    """The model node ORT's node ``rec`` stands for, from the call making its first input
    (an unnamed QuickGelu between two channels-last Convs reads and makes ORT's tensors
    alone): the readers of the model tensors that call's nodes make, none of them another
    call's, none of their outputs left in ORT's graph, where they make one chain (a Sigmoid
    and the Mul reading it): its last node. None otherwise."""
    first = _unprefixed(rec[3].input[0]) if rec[3].input else ""
    entries, consumers = idx.entries, idx.consumers
    cands: dict[str, None] = {}
    for a in made_by.get(first, ()):
        for v in entries[a].node.outputs:
            if v is None or not v.name:
                continue
            for c in consumers.get(v.name, ()):
                node = entries[c].node
                if c in claimed or entries[c].graph != "" or any(
                        o is not None and o.name in opt.tensors for o in node.outputs):
                    continue
                cands[c] = None
    sinks = [c for c in cands
             if not any(d in cands for v in entries[c].node.outputs if v is not None
                        for d in consumers.get(v.name, ()))]
    return sinks[0] if len(sinks) == 1 else None


def _body_run(calls: list[tuple[int, str, tuple]], start: int, floor: int,
              ops: tuple[str, ...]):
    """(keys, next start, last index) of the first run of ``calls`` from ``start`` that is
    one expansion of a body of ``ops``, above node index ``floor``; None when there is none."""
    n = len(ops)
    for s in range(start, len(calls)):
        k0, op0 = calls[s][0], calls[s][1]
        for j0 in (j for j, op in enumerate(ops) if op == op0):
            base = k0 - j0
            if base <= floor:
                continue
            t, members, ok = s, [], True
            while t < len(calls) and calls[t][0] < base + n:
                k, op, key = calls[t]
                if ops[k - base] != op:
                    ok = False
                    break
                members.append(key)
                t += 1
            if ok and calls[t - 1][0] == base + n - 1:
                return members, t, base + n - 1
    return None


def _onnx_opset(idx) -> int:
    """The model's ONNX opset (the default domain's)."""
    for g in idx.graphs.values():
        imports = getattr(g, "opset_imports", None) or {}
        v = imports.get("", imports.get("ai.onnx"))
        if v:
            return int(v)
    return 0


def _body_ops(node, opset: int) -> tuple[str, ...]:
    """The op types of the ONNX function body of ``node`` at ``opset``, without its Constants
    (ORT makes them initializers): () for a node with none."""
    if node.domain not in ("", "ai.onnx") or not opset:
        return ()
    import onnx  # heavy third-party module: only for a trace with unmapped unnamed calls

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        if schema.has_context_dependent_function:
            versions = [v for v in schema.context_dependent_function_opset_versions
                        if v <= opset]
            if not versions:
                return ()
            types = [onnx.helper.make_tensor_type_proto(
                v.dtype.value if v is not None and v.dtype is not None else 1, None
            ).SerializeToString() for v in node.inputs]
            body = schema.get_context_dependent_function_with_opset_version(
                max(versions), ir.serde.serialize_node(node).SerializeToString(), types)
        elif schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= opset]
            if not versions:
                return ()
            body = schema.get_function_with_opset_version(max(versions))
        else:
            return ()
        fn = onnx.FunctionProto.FromString(body) if isinstance(body, bytes) else body
    except Exception:  # noqa: BLE001 - onnx raises SchemaError, ValueError, RuntimeError...
        return ()
    return tuple(n.op_type for n in fn.node
                 if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx")))


def _primary(idx, comps: tuple[str, ...], op_type: str) -> str:
    """The member of a fused ORT node its row stands for: the member whose op the kernel's op
    names (Conv of a FusedConv, QLinearConv or NCHWc Conv; MatMul of a FusedMatMul or
    MatMulNBits; the longest such op, then the first in topological order), the MatMul of a
    Gemm ORT fused from MatMul + Add; else the first member in topological order that is not
    a Constant. ``comps`` are in topological order."""
    best, size = None, 0
    for c in comps:
        t = idx.entries[c].node.op_type
        if len(t) > size and (_names_op(op_type, t) or (op_type == "Gemm" and t == "MatMul")):
            best, size = c, len(t)
    if best is not None:
        return best
    for c in comps:
        node = idx.entries[c].node
        if not (node.op_type == "Constant" and node.domain in ("", "ai.onnx")):
            return c
    return comps[0]


def _names_op(kernel_op: str, op: str) -> bool:
    """Whether ``op`` is a word of ``kernel_op`` ('Conv' of 'QLinearConv', 'MatMul' of
    'MatMulNBits'; not 'Exp' of 'Expand')."""
    i = kernel_op.find(op)
    while i >= 0:
        end = i + len(op)
        if end == len(kernel_op) or kernel_op[end].isupper():
            return True
        i = kernel_op.find(op, i + 1)
    return False


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
            anchors = [nid]
            if opt is not None:
                # as a named node's: the model nodes making its outputs (a QDQ Flatten's
                # QuantizeLinear, a BatchNormalization fused into an unnamed Conv)
                anchors += [p for t in opt.outs_of(ort_name, node_index, unnamed=True)
                            if (p := producer.get(t)) is not None and p not in anchors]
            return nid, anchors, "index"
    if not ort_name and opt_level == "disable" and node_index is not None:
        try:
            pos = int(node_index)
        except (TypeError, ValueError):
            pos = -1
        if pos in main_pos:
            return main_pos[pos], [main_pos[pos]], "index"
    if _added(ort_name, op_type):
        return None, [], "inserted"
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
        for t in opt.outs_of(ort_name, node_index):
            if t in producer and producer[t] not in anchors:
                anchors.append(producer[t])
    if not anchors:
        if op_type == "Reshape" and _NEW_RESHAPE.search(ort_name):
            return None, [], "inserted"
        return None, [], "unmapped"
    return primary, anchors, "fused"


def _passive(node) -> bool:
    """A node that runs no kernel: a pass-through ORT deletes, or a Constant."""
    return node.op_type in _PASS_THROUGH or (node.op_type == "Constant"
                                             and node.domain in ("", "ai.onnx"))


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
            p = producer(inp.name)
            if p is None or p in seen or p in stop:
                continue
            pname = idx.entries[p].node.name
            if pname and pname in opt.node_names and pname != ort_name:
                continue  # that node still runs on its own
            stack.append(p)
    # Pass-through nodes ORT deleted (Identity, inference Dropout) did not run inside the
    # fused kernel: walk through them, but do not count them as members; nor Constant nodes,
    # which ORT makes initializers when it loads a graph (a Reshape reading one read 'fused'
    # with it at 'basic' and 'name' at 'disable', where the Constant read 'removed').
    anchors_set = set(anchors)
    members = [n for n in seen if n in anchors_set or not _passive(idx.entries[n].node)]
    return tuple(sorted(members, key=lambda n: idx.entries[n].topo))
