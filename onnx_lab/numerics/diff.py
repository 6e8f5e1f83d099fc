"""Structural diff of two models: added, removed and changed nodes.

Nodes are matched by recorded provenance first (``onnx_lab.origin`` metadata: a fused node
matches the original node of the same op type, the other originals are reported as removed,
"fused into" it; a fused node of a new op type, such as onnxruntime's Attention, is added and
linked to every node it replaced), then by node id (name), then structurally (same op type
reading the matched inputs). Matched nodes are compared: op type, attributes, inputs (through
the matching, so a renamed tensor is not a change), output shapes and dtypes, and weight
values. The ``related`` column carries the links across a fusion both ways.

Example:
    >>> d = onnx_lab.diff("model.onnx", "model_optimized.onnx")
    >>> d.table.change.value_counts()
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import Resolved, resolve
from onnx_lab.core.values import const_array
from onnx_lab.errors import LabError, strict_keywords
from onnx_lab.numerics.align import _default, _opset, _plain, origins_of

__all__ = ["diff", "Diff", "DIFF_COLUMNS", "DIFF_COLOURS", "OP_COUNT_COLUMNS"]

DIFF_COLUMNS = ["change", "node_id_a", "node_id_b", "op_type", "op_type_b", "match",
                "attributes", "inputs", "outputs", "weights", "related", "details"]
OP_COUNT_COLUMNS = ["op_type", "count_a", "count_b", "delta", "added", "removed", "changed"]
DIFF_COLOURS = {"added": "green", "removed": "red", "changed": "orange"}
_ORIGIN_KEY = "onnx_lab.origin"
_PASS_THROUGH = {"Identity", "Dropout"}


def _attr_key(attr: ir.Attr) -> Any:
    """A comparable form of an attribute value."""
    t = attr.type
    if t == ir.AttributeType.TENSOR:
        arr = attr.value.numpy()
        return ("tensor", str(arr.dtype), arr.shape, hashlib.sha1(arr.tobytes()).hexdigest())
    if t == ir.AttributeType.GRAPH:
        return ("graph", tuple(n.op_type for n in attr.value))
    if t == ir.AttributeType.GRAPHS:
        return ("graphs", tuple(tuple(n.op_type for n in g) for g in attr.value))
    if t == ir.AttributeType.TENSORS:
        return ("tensors", tuple(hashlib.sha1(x.numpy().tobytes()).hexdigest()
                                 for x in attr.value))
    v = attr.value
    if isinstance(v, (list, tuple)):
        return tuple(_NAN if _is_nan(x) else x for x in v)
    return _NAN if _is_nan(v) else v


#: A NaN's place in :func:`_attr_key`: NaN != NaN, so an Imputer's replaced_value_float=NaN
#: (every scikit-learn SimpleImputer) was a change between a model and its own copy.
_NAN = ("float", "nan")


def _is_nan(x: Any) -> bool:
    return isinstance(x, float) and x != x


def _show(attr: ir.Attr | None) -> str:
    if attr is None:
        return "unset"
    if attr.type in (ir.AttributeType.TENSOR, ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS,
                     ir.AttributeType.TENSORS):
        return f"<{attr.type.name.lower()}>"
    v = attr.value
    return str(list(v) if isinstance(v, (list, tuple)) else v)


_LIST_SHOWN = 8  # list attributes up to this many values are shown whole


def _show_change(x: ir.Attr | None, y: ir.Attr | None) -> str:
    """``old -> new`` for a changed attribute; a long list (a tree ensemble's thresholds,
    thousands of them) as what differs in it: both lists whole made one line of kilobytes
    that did not say which value changed."""
    xv = x.value if x is not None else None
    yv = y.value if y is not None else None
    if isinstance(xv, (list, tuple)) and isinstance(yv, (list, tuple)) and \
            max(len(xv), len(yv)) > _LIST_SHOWN:
        if len(xv) != len(yv):
            return f"{len(xv)} values -> {len(yv)} values"
        diff = [i for i, (a, b) in enumerate(zip(xv, yv)) if a != b and not (
            isinstance(a, float) and isinstance(b, float) and a != a and b != b)]
        if not diff:  # (values equal element by element: shown whole)
            return f"{_show(x)} -> {_show(y)}"
        i = diff[0]
        text = (f"{len(xv)} values, {len(diff)} differ (first at [{i}]: {xv[i]!r} -> "
                f"{yv[i]!r})")
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xv + yv):
            err = max(abs(float(xv[k]) - float(yv[k])) for k in diff)
            text = text[:-1] + f", max_abs {err:.3g})"
        return text
    return f"{_show(x)} -> {_show(y)}"


class _Matcher:
    def __init__(self, a: LabModel, b: LabModel) -> None:
        self.a, self.b = a, b
        self.ai, self.bi = a.index, b.index
        self.a2b: dict[str, str] = {}
        self.kind: dict[str, str] = {}
        self.fused_into: dict[str, str] = {}  # a node id -> b node id
        self._by_op: dict[str, list[str]] | None = None
        self.fused_from: dict[str, list[str]] = {}
        self.fused_in_a: dict[str, list[str]] = {}  # a node id -> b node ids it replaced
        self.unfused: dict[str, str] = {}  # b node id -> the a node that replaced it
        self.types_a: dict[str, Any] = {}
        self.types_b: dict[str, Any] = {}
        self._sig_cache: dict[str, tuple] = {}

    def _pair(self, x: str, y: str, kind: str) -> None:
        self.a2b[x] = y
        self.kind[x] = kind

    def run(self) -> None:
        ai, bi = self.ai, self.bi
        taken: set[str] = set()
        # 1. provenance: a stamped node of b names the nodes of a it was made from. A fused
        # node pairs with the original of its own op type (Conv+BN -> Conv); the others are
        # "fused into" it. A node whose origin is only itself pairs by name.
        self.fused_from: dict[str, list[str]] = {}  # b node id -> a node ids it replaced
        for bid, orig in origins_of(self.b).items():
            node = bi.node(bid)
            if _ORIGIN_KEY not in node.metadata_props:
                continue
            known = [o for o in orig if o in ai.entries]
            same = [o for o in known if o not in self.a2b and ai.node(o).op_type == node.op_type]
            if bid in same:  # its own id first: a kept node, or a fusion that kept the name
                same.remove(bid)
                same.insert(0, bid)
            if same:
                kind = "name" if known == [bid] else "provenance"
                self._pair(same[0], bid, kind)
                taken.add(bid)
            if len(known) > 1 or (known and not same):
                self.fused_from[bid] = known
            for o in known:
                if o not in self.a2b:
                    self.fused_into.setdefault(o, bid)
        # 1b. the other direction (a is the later version: a report of the current model
        # against the file it came from): a stamped node of a names nodes of b it replaced.
        for aid, orig in origins_of(self.a).items():
            node = ai.node(aid)
            if aid in self.a2b or aid in self.fused_into \
                    or _ORIGIN_KEY not in node.metadata_props:
                continue
            known = [o for o in orig if o in bi.entries and o not in taken]
            if len(known) < 2 and (not known or known == [aid]):
                continue
            same = [o for o in known if bi.node(o).op_type == node.op_type]
            if aid in same:
                same.remove(aid)
                same.insert(0, aid)
            if same:
                self._pair(aid, same[0], "provenance")
                taken.add(same[0])
            self.fused_in_a[aid] = known
            for o in known:
                if o not in taken:
                    self.unfused.setdefault(o, aid)
        # 2. node id (name)
        for nid in ai.entries:
            if nid in bi.entries and nid not in self.a2b and nid not in taken \
                    and nid not in self.fused_into and nid not in self.unfused:
                self._pair(nid, nid, "name")
                taken.add(nid)
        # 3. structure, in topological order so matches propagate
        for nid, e in ai.entries.items():
            if nid in self.a2b or nid in self.fused_into:
                continue
            hit = self._structural(e.node, taken)
            if hit is not None:
                self._pair(nid, hit, "structure")
                taken.add(hit)

    @staticmethod
    def type_text(types: dict[str, Any], name: str) -> str | None:
        """``float32[1,8,768]`` for a value with a known type, else None."""
        info = types.get(name)
        if info is None or getattr(info, "dtype", None) is None:
            return None
        shape = getattr(info, "shape", None)
        return f"{info.dtype}" + ("[?]" if shape is None else
                                  "[" + ",".join(str(d) for d in shape) + "]")

    def map_tensor(self, name: str, depth: int = 0) -> str | None:
        """The b tensor holding what a tensor ``name`` holds in a (None if unknown)."""
        p = self.ai.producer.get(name)
        if p is None:
            return name if name in self.bi.values else None
        node = self.ai.node(p)
        outs = [v.name for v in node.outputs]
        k = outs.index(name)
        q = self.a2b.get(p) or self.fused_into.get(p)
        if q is None:
            if node.op_type in _PASS_THROUGH and k == 0 and node.inputs \
                    and node.inputs[0] is not None and depth < 64:
                return self.map_tensor(node.inputs[0].name, depth + 1)  # removed Identity
            return None
        b_outs = self.bi.node(q).outputs
        return b_outs[k].name if k < len(b_outs) else None

    def _structural(self, node: ir.Node, taken: set[str]) -> str | None:
        acts = [(i, v.name) for i, v in enumerate(node.inputs)
                if v is not None and v.name and v.const_value is None
                and v.name not in self.a.graph.initializers]
        if not acts:
            return self._by_signature(node, taken)
        mapped = []
        for i, name in acts:
            m = self.map_tensor(name)
            if m is None:
                return None
            mapped.append((i, m))
        cands: set[str] | None = None
        for _i, m in mapped:
            users = set(self.bi.consumers.get(m, ()))
            cands = users if cands is None else cands & users
        hits = []
        for c in cands or ():
            cn = self.bi.node(c)
            if c in taken or cn.op_type != node.op_type:
                continue
            if all(i < len(cn.inputs) and cn.inputs[i] is not None and cn.inputs[i].name == m
                   for i, m in mapped):
                hits.append(c)
        return hits[0] if len(hits) == 1 else None


    def _signature(self, node: ir.Node) -> tuple:
        ins = []
        for v in node.inputs:
            arr = const_array(v, stored=True)
            ins.append(None if arr is None else
                       (str(arr.dtype), arr.shape, hashlib.sha1(arr.tobytes()).hexdigest()))
        attrs = tuple(sorted((k, _attr_key(a)) for k, a in node.attributes.items()))
        return (node.op_type, tuple(ins), attrs)

    def _by_signature(self, node: ir.Node, taken: set[str]) -> str | None:
        """A node without activation inputs (Constant, a Reshape of weights): same op, same
        constant inputs and attributes, unique among unmatched nodes."""
        if self._by_op is None:
            self._by_op = {}
            for c, e in self.bi.entries.items():
                self._by_op.setdefault(e.node.op_type, []).append(c)
        sig = self._signature(node)
        hits = []
        for c in self._by_op.get(node.op_type, ()):
            if c in taken:
                continue
            if c not in self._sig_cache:  # hashing weights is the cost: once per node
                self._sig_cache[c] = self._signature(self.bi.node(c))
            if self._sig_cache[c] == sig:
                hits.append(c)
        return hits[0] if len(hits) == 1 else None


def _is_default(node: ir.Node, attr: ir.Attr, name: str) -> bool:
    """Whether ``attr`` holds the schema default of ``node``'s op (a tool that writes
    Gather's ``axis=0`` or LayerNormalization's ``stash_type=1`` out changed nothing)."""
    default = _default(node.op_type, node.domain or "", name, _opset(node, None))
    if default is None:
        return False
    try:
        return _plain(attr.value) == default
    except (TypeError, ValueError):
        return False


def _compare_nodes(m: _Matcher, a_id: str, b_id: str) -> dict[str, Any] | None:
    an, bn = m.ai.node(a_id), m.bi.node(b_id)
    details: list[str] = []
    attrs: list[str] = []
    inputs: list[str] = []
    weights: list[str] = []
    if an.op_type != bn.op_type:
        details.append(f"op {an.op_type} -> {bn.op_type}")
    if a_id != b_id:
        details.append(f"renamed {a_id!r} -> {b_id!r}")
    for name in sorted(set(an.attributes) | set(bn.attributes)):
        x, y = an.attributes.get(name), bn.attributes.get(name)
        if (x is None) != (y is None) and an.op_type == bn.op_type and \
                _is_default(an, x if x is not None else y, name):
            continue  # written out at its schema default on one side: the same node
        if x is None or y is None or _attr_key(x) != _attr_key(y):
            attrs.append(name)
            details.append(f"attribute {name}: {_show_change(x, y)}")
    n_in = max(len(an.inputs), len(bn.inputs))
    for i in range(n_in):
        x = an.inputs[i] if i < len(an.inputs) else None
        y = bn.inputs[i] if i < len(bn.inputs) else None
        xa, ya = const_array(x, stored=True), const_array(y, stored=True)
        if xa is not None and ya is not None:
            if xa.shape != ya.shape or xa.dtype != ya.dtype:
                weights.append(y.name)
                details.append(f"weight {y.name!r}: {xa.dtype}{list(xa.shape)} -> "
                               f"{ya.dtype}{list(ya.shape)}")
            elif not np.array_equal(xa, ya, equal_nan=xa.dtype.kind == "f"):
                weights.append(y.name)
                diff = float(np.max(np.abs(xa.astype(np.float64) - ya.astype(np.float64))))
                details.append(f"weight {y.name!r} values changed (max_abs {diff:.3g})")
            continue
        xn = x.name if x is not None else ""
        yn = y.name if y is not None else ""
        if not xn and not yn:
            continue
        want = m.map_tensor(xn) if xn else ""
        if want != yn and xn != yn:
            inputs.append(str(i))
            kind = " (now a constant)" if ya is not None else (
                " (was a constant)" if xa is not None else "")
            details.append(f"input {i}: {xn or '<none>'!r} -> {yn or '<none>'!r}{kind}")
    # Output types follow from upstream changes: reported for a node that changed, never a
    # change on their own (a changed pooling size would mark everything after it).
    outputs: list[str] = []
    for i, (x, y) in enumerate(zip(an.outputs, bn.outputs)):
        tx, ty = m.type_text(m.types_a, x.name), m.type_text(m.types_b, y.name)
        if tx is not None and ty is not None and tx != ty:
            outputs.append(str(i))
            details.append(f"output {i}: {tx} -> {ty}")
    fused = [o for o, b in m.fused_into.items() if b == b_id]
    fused += [o for o in m.fused_in_a.get(a_id, []) if o != b_id]
    if fused:
        details.append("fused from " + ", ".join(repr(o) for o in [a_id, *fused]))
    if len(details) == len(outputs):
        return None
    return {"change": "changed", "node_id_a": a_id, "node_id_b": b_id, "op_type": an.op_type,
            "op_type_b": bn.op_type, "match": m.kind[a_id], "attributes": attrs,
            "inputs": inputs, "outputs": outputs, "weights": weights, "related": fused,
            "details": "; ".join(details)}


@strict_keywords  # a misspelt keyword is an InputError with its close matches
def diff(a: Any, b: Any) -> Diff:
    """Nodes added, removed and changed from model ``a`` to model ``b``.

    Args:
        a, b: Labs, paths, ModelProtos, ``"sample:NAME"``...

    Returns:
        A :class:`Diff`; its ``.table`` has one row per differing node: change (``added``,
        ``removed``, ``changed``), node_id_a, node_id_b, op_type (in a, else b), op_type_b,
        match (``provenance``, ``name``, ``structure``; None for added/removed), attributes
        (changed attribute names), inputs (changed input positions), outputs (output positions
        whose inferred dtype or shape changed), weights (names of weight inputs whose values,
        shape or dtype changed), related (the other nodes of a fusion: for an added fused
        node, the nodes of a it replaced; for a removed node, the node of b it went into; for
        a changed fused node, the other originals; when a is the later version, the nodes of
        b its fused node replaced), details (a readable sentence).

    Example:
        >>> d = onnx_lab.diff("sample:convnet", lab_after_fusion)
        >>> d.table[["change", "node_id_a", "details"]]
    """
    la, lb = resolve(a), resolve(b)
    m = _Matcher(la.model, lb.model)
    m.types_a = _types(la)
    m.types_b = _types(lb)
    m.run()
    rows: list[dict[str, Any]] = []

    def empty() -> dict[str, Any]:
        return {"attributes": [], "inputs": [], "outputs": [], "weights": []}

    for nid, e in m.ai.entries.items():
        if nid in m.a2b:
            r = _compare_nodes(m, nid, m.a2b[nid])
            if r is not None:
                rows.append(r)
        else:
            into = m.fused_into.get(nid)
            group = [b for b, orig in m.fused_from.items() if nid in orig]
            if len(group) > 1:  # fused into a group: name the one that stands for it
                into = max(group, key=lambda b: _affinity(m.a, nid, m.b, b))
            rows.append({"change": "removed", "node_id_a": nid, "node_id_b": None,
                         "op_type": e.node.op_type, "op_type_b": None, "match": None,
                         **empty(), "related": [into] if into else [],
                         "details": f"fused into {into!r}" if into else "removed"})
    matched_b = set(m.a2b.values())
    for nid, e in m.bi.entries.items():
        if nid not in matched_b:
            orig = m.fused_from.get(nid, [])
            into = m.unfused.get(nid)
            details = ("fused from " + ", ".join(repr(o) for o in orig) if orig else
                       f"fused into {into!r} in a" if into else "added")
            rows.append({"change": "added", "node_id_a": None, "node_id_b": nid,
                         "op_type": e.node.op_type, "op_type_b": e.node.op_type, "match": None,
                         **empty(), "related": list(orig) or ([into] if into else []),
                         "details": details})
    out = Diff(pd.DataFrame(rows, columns=DIFF_COLUMNS), la, lb, dict(m.a2b),
               {k: list(v) for k, v in m.fused_from.items()})
    out.fused_in_a = {k: list(v) for k, v in m.fused_in_a.items()}
    out.match_kinds = dict(m.kind)
    return out


def _types(r: Resolved) -> dict[str, Any]:
    """Inferred value types of one side ({} when inference cannot run: shapes are extra)."""
    try:
        return r.model.types(r.dims, r.shapes)
    except LabError:
        return {}


def _affinity(model: LabModel, nid: str, other: LabModel, oid: str) -> int:
    """How strongly node ``oid`` of ``other`` stands for node ``nid`` of ``model``: same op
    type, tensors both read or write (by name), weights it carries."""
    a, b = model.index.entries[nid].node, other.index.entries[oid].node
    names = {v.name for v in (*a.inputs, *a.outputs) if v is not None and v.name}
    shared = sum(1 for v in (*b.inputs, *b.outputs) if v is not None and v.name in names)
    weights = sum(1 for v in b.inputs if v is not None and v.name in other.graph.initializers)
    return 100 * (a.op_type == b.op_type) + 10 * shared + weights


class Diff:
    """The result of :func:`diff`.

    Attributes:
        table: the DataFrame described in :func:`diff`.
        a, b: the two models (``.model``, ``.dims``, ``.shapes``).
        matches: {node id in a: node id in b} for every matched node.
        fused_from: {node id in b: node ids in a it replaced} for fused nodes (provenance).
        match_kinds: {node id in a: 'provenance', 'name' or 'structure'}.
    """

    def __init__(self, table: pd.DataFrame, a: Resolved, b: Resolved,
                 matches: dict[str, str], fused_from: dict[str, list[str]] | None = None
                 ) -> None:
        self.table = table
        self.a = a
        self.b = b
        self.matches = matches
        self.fused_from = fused_from or {}
        #: {node id in a: node ids in b it replaced} when ``a`` is the later version.
        self.fused_in_a: dict[str, list[str]] = {}
        #: {node id in a: how it was matched ('provenance', 'name', 'structure')}.
        self.match_kinds: dict[str, str] = {}

    def links(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Counterparts across the two models: ({a node id: b node ids}, {b node id: a node
        ids}). A matched pair links one to one; a node fused into another links to it, and a
        fused node links to every node it replaced (an Attention to its MatMuls, Softmax...).

        Example:
            >>> a2b, b2a = onnx_lab.diff(before, after).links()
            >>> b2a["Attention_0"]
            ['/attn/MatMul', '/attn/Softmax', ...]
        """
        a2b: dict[str, list[str]] = {}
        b2a: dict[str, list[str]] = {}

        def link(x: str, y: str) -> None:
            if y not in a2b.setdefault(x, []):
                a2b[x].append(y)
            if x not in b2a.setdefault(y, []):
                b2a[y].append(x)

        for x, y in self.matches.items():
            link(x, y)
        for y, xs in self.fused_from.items():
            for x in xs:
                link(x, y)
        for x, ys in self.fused_in_a.items():
            for y in ys:
                link(x, y)
        # One original can go into a group of new nodes (onnxruntime's attention fusion adds
        # a Cast and a ReduceSum for the mask next to the Attention): the counterpart that
        # shares a tensor with it, then the one that carries weights, comes first.
        for mine, theirs, table in ((self.a.model, self.b.model, a2b),
                                    (self.b.model, self.a.model, b2a)):
            for k, peers in table.items():
                if len(peers) > 1:
                    table[k] = sorted(peers, key=lambda p, k=k, m=mine, o=theirs:
                                      -_affinity(m, k, o, p))
        return a2b, b2a

    def op_counts(self) -> pd.DataFrame:
        """Per op type: count_a, count_b, delta (b - a), and the added, removed and changed
        nodes of that type (a node's type in ``a``, for added nodes in ``b``); the op types
        that changed first.

        Example:
            >>> onnx_lab.diff(before, after).op_counts().head()
        """
        from collections import Counter

        ca = Counter(e.node.op_type for e in self.a.model.index.entries.values())
        cb = Counter(e.node.op_type for e in self.b.model.index.entries.values())
        rows = []
        t = self.table
        for op in sorted(set(ca) | set(cb)):
            sel = t.loc[t["op_type"] == op, "change"].value_counts()
            rows.append({"op_type": op, "count_a": ca.get(op, 0), "count_b": cb.get(op, 0),
                         "delta": cb.get(op, 0) - ca.get(op, 0),
                         **{k: int(sel.get(k, 0)) for k in ("added", "removed", "changed")}})
        df = pd.DataFrame(rows, columns=OP_COUNT_COLUMNS)
        moved = (df["delta"] != 0) | (df[["added", "removed", "changed"]].sum(axis=1) > 0)
        return df.assign(_m=moved).sort_values(["_m", "op_type"], ascending=[False, True]) \
            .drop(columns="_m").reset_index(drop=True)

    @property
    def counts(self) -> dict[str, int]:
        """{"added": n, "removed": n, "changed": n}."""
        vc = self.table["change"].value_counts()
        return {k: int(vc.get(k, 0)) for k in ("added", "removed", "changed")}

    @property
    def empty(self) -> bool:
        """True when the models have no node differences."""
        return len(self.table) == 0

    def highlight(self, side: str = "b") -> dict[str, str]:
        """{node id: colour} for the renderer: added green, removed red, changed orange."""
        col = "node_id_b" if side == "b" else "node_id_a"
        kinds = ("added", "changed") if side == "b" else ("removed", "changed")
        df = self.table.loc[self.table["change"].isin(kinds)]
        return {nid: DIFF_COLOURS[c] for nid, c in zip(df[col], df["change"])
                if isinstance(nid, str)}

    def render(self, side: str = "b", **kw: Any):
        """Model ``b`` (or ``a`` with ``side="a"``) with the changes coloured.

        Keywords go to :func:`onnx_lab.render.render_model`.
        """
        return _display.draw(self, "render", side, **kw)

    def __repr__(self) -> str:
        c = self.counts
        return (f"<onnx_lab.Diff {c['added']} added, {c['removed']} removed, "
                f"{c['changed']} changed>")

    def to_html(self) -> str:
        """Counts of added, removed and changed nodes, and the diff table."""
        return _display.draw(self, "html")

    def _repr_html_(self) -> str:
        return _display.notebook_html(self.to_html())
