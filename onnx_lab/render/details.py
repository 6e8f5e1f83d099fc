"""What the graph canvas shows for one clicked node: ``node_details`` (data) and its HTML.

The side panel of :class:`onnx_lab.widgets.canvas.GraphCanvas` calls these two public
functions; the same facts are one line of Python away::

    d = onnx_lab.render.details.node_details(lab.model, "/stem/conv/Conv", dims=lab.dims)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_lab.analysis.tables import attribute_value
from onnx_lab.analysis.weights import weight_stats
from onnx_lab.core.index import node_scope
from onnx_lab.core.provenance import node_origin
from onnx_lab.core.shapes import type_at
from onnx_lab.core.source_map import scope_key, source_map
from onnx_lab.core.values import const_array, is_constant
from onnx_lab.errors import unknown_name
from onnx_lab.render._html import esc_attr, esc_text
from onnx_lab.render.graph import shape_text
from onnx_lab.render.overlays import format_value

if TYPE_CHECKING:
    import pandas as pd

    from onnx_lab.core.model import LabModel

__all__ = ["node_details", "node_details_html", "group_details_html", "canvas_items", "drawn_key",
           "canvas_legend_html", "source_html", "box_module", "search_index", "placement",
           "graph_owners", "weight_values", "weight_values_html"]

_STAT_COLS = ("min", "max", "mean", "std", "abs_max", "zeros_frac", "outlier_score")


def _as_model(model: Any) -> Any:
    """A Lab passed instead of a LabModel: its current model."""
    if not hasattr(model, "types") and hasattr(model, "model"):
        return model.model
    return model


def _shape_html(text: str, limit: int) -> str:
    """A shape text, escaped, that may wrap after each "×" where the details panel is too
    narrow (``?×?×sequence_length×sequence_length f32`` never wrapped: the tensor's name
    beside it shrank to one letter a line). The dim names are the model's strings: escaped
    before the break opportunities go in."""
    return str(esc_text(text, limit)).replace("×", "×<wbr>")


def _tensor_row(model: LabModel, types: Mapping[str, Any], name: str, graph: str = ""
                ) -> dict[str, Any]:
    info = type_at(types, name, graph)  # as a node of ``graph`` reads it
    idx = model.index
    if name in model.graph.initializers:
        kind = "weight"
    elif name in {v.name for v in model.graph.inputs}:
        kind = "input"
    elif name in {v.name for v in model.graph.outputs}:
        kind = "output"
    elif name in idx.producer and is_constant_value(model, name):
        kind = "constant"
    else:
        kind = "activation"
    shape = None if info is None or info.shape is None else list(info.shape)
    return {"name": name, "kind": kind, "dtype": None if info is None else info.dtype,
            "shape": shape, "text": shape_text(info)}


def is_constant_value(model: LabModel, name: str) -> bool:
    """True when ``name`` is produced by a Constant-like node (drawn inside its consumer)."""
    v = model.index.values.get(name)
    try:
        return bool(v is not None and is_constant(v))
    except Exception:  # noqa: BLE001 - an exotic value is simply "not constant" here
        return False


def node_details(model: Any, node_id: str, *, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 overlay: pd.Series | Mapping[str, float] | None = None,
                 overlay_label: str | None = None,
                 stats: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the canvas side panel shows about one node, as plain data.

    Args:
        model: a LabModel (or a Lab: its current model).
        node_id: the node's id (``lab.nodes.node_id``).
        dims, shapes: resolve symbolic dims for the tensor shapes.
        overlay: the values drawn on the graph (error, time, FLOPs) keyed by node id or
            tensor name; the node's own value (or the max over its outputs) is reported.
        stats: {weight name: its record of ``weight_stats(model)``}, computed once by a
            caller asking for many nodes (the HTML report); None computes the node's own.

    Returns:
        dict with ``node_id, op_type, domain, name, graph, scope, attributes`` ({name:
        value}), ``inputs`` / ``outputs`` (lists of {name, kind, dtype, shape, text}),
        ``weights`` (records of :func:`onnx_lab.analysis.weights.weight_stats` for its
        initializer/constant inputs), ``values`` (:func:`weight_values` of up to four of
        them: the first values, as a sliced table), ``origins`` (original node ids it was fused from),
        ``source`` (None, or {kind, module, module_class, crumbs: [{name, key}] (each module
        level and its collapsed-box key), parts: [{module, module_class, file, line,
        function, code}] (one per PyTorch module and line it comes from)}),
        ``bodies`` (graph paths of its If/Loop/Scan bodies), ``overlay`` ({label, value, text}
        or None).

    Raises:
        UnknownNameError: ``node_id`` is not a node of the model.

    Example:
        >>> node_details(lab.model, "/stem/conv/Conv")["inputs"][1]["shape"]
        [16, 3, 3, 3]
    """
    model = _as_model(model)
    idx = model.index
    if node_id not in idx.entries:
        raise unknown_name("node id", node_id, list(idx.entries),
                           fix="Use ids from lab.nodes.node_id.")
    entry = idx.entries[node_id]
    node = entry.node
    types = model.types(dims, shapes)
    ins = [v.name for v in node.inputs if v is not None]
    outs = [v.name for v in node.outputs if v is not None]
    attrs = {k: attribute_value(a) for k, a in node.attributes.items()}
    weight_names = [n for n in ins if n in model.graph.initializers
                    or is_constant_value(model, n)]
    weights: list[dict[str, Any]] = []
    if weight_names and stats is not None:
        weights = [dict(stats[n]) for n in weight_names if n in stats]
    elif weight_names:
        try:
            df = weight_stats(model, weight_names)
            weights = df.to_dict("records")
        except Exception:  # noqa: BLE001 - stats are extra; the panel still shows the rest
            weights = []
    # Body paths are "<owner>/<attr>", the owner being the id, prefixed by the graph path
    # unless the id already carries it (as core/index.py names them).
    path = entry.graph
    owner = node_id if (not path or node_id.startswith(path + "/")) else f"{path}/{node_id}"
    bodies = [p for p in idx.graphs if p.startswith(owner + "/")
              and "/" not in p[len(owner) + 1:]]
    ov = None
    if overlay is not None:
        vals = [overlay.get(k) for k in [node_id, *outs] if k in overlay]
        vals = [float(v) for v in vals if v is not None]
        if vals:
            v = max(vals, key=lambda x: (not math.isnan(x), abs(x)))
            label = overlay_label or getattr(overlay, "name", None) or "value"
            ov = {"label": str(label), "value": v, "text": format_value(v)}
    return {
        "node_id": node_id, "op_type": node.op_type, "domain": node.domain or "",
        "name": node.name or "", "graph": entry.graph, "scope": node_scope(node),
        "attributes": attrs,
        "inputs": [_tensor_row(model, types, n, entry.graph) for n in ins],
        "outputs": [_tensor_row(model, types, n, entry.graph) for n in outs],
        "weights": weights,
        "values": [x for x in (weight_values(model, n) for n in weight_names[:4]) if x],
        "origins": [o for o in node_origin(node, node_id)],
        "source": _source(model, node_id),
        "bodies": bodies,
        "overlay": ov,
    }


def _source(model: LabModel, node_id: str) -> dict[str, Any] | None:
    s = source_map(model).get(node_id)
    if s is None:
        return None
    levels = s.levels
    return {"kind": s.kind, "module": s.module, "module_class": s.module_class,
            "crumbs": [{"name": lv, "key": scope_key(levels[:i + 1])}
                       for i, lv in enumerate(levels)],
            "parts": [{"module": p.module, "module_class": p.module_class, "file": p.file,
                       "line": p.line, "function": p.function, "code": p.code}
                      for p in s.parts]}


def source_html(src: Mapping[str, Any] | None) -> str:
    """The side panel's source section: module breadcrumbs (each level a ``data-expand``
    link to its collapsed box), the module's class, and each module and line it came from."""
    if not src:
        return ""
    crumbs = " › ".join(
        f"<a class='olc-crumb' data-expand='{esc_attr(c['key'])}' "
        f"title='show module {esc_attr(c['key'])}'>{esc_text(c['name'], 40)}</a>"
        for c in src["crumbs"]) or "<i>root module</i>"
    kind = " <i>(inferred from node names)</i>" if src["kind"] == "inferred" else ""
    cls = f"<div class='olc-where'>{esc_text(src['module_class'])}</div>" \
        if src.get("module_class") else ""
    rows = []
    for p in src["parts"]:
        where = ""
        if p["file"]:
            short = p["file"].replace("\\", "/").rsplit("/", 1)[-1]
            where = (f"<span title='{esc_attr(p['file'])}'>{esc_text(short)}:"
                     f"{esc_text(p['line'])}</span> in {esc_text(p['function'])}")
        code = f"<div class='olc-code'><code>{esc_text(p['code'], 120)}</code></div>" \
            if p["code"] else ""
        rows.append(f"<tr><td>{esc_text(p['module'] or '(root)', 60)}</td><td>{where}{code}</td>"
                    "</tr>")
    head = "came from" if len(src["parts"]) > 1 else "source"
    return (f"<div class='olc-source'><div class='olc-crumbs'>module: {crumbs}{kind}</div>{cls}"
            f"<table class='olc-source-parts'><tr><th colspan=2>{head}</th></tr>"
            f"{''.join(rows)}</table></div>")


#: Characters of a model string a panel shows (ids, attribute values), of a tooltip, and how
#: many of a fused node's originals it lists.
_CUT, _TIP, _ORIGINS = 300, 2000, 50


def node_details_html(d: Mapping[str, Any]) -> str:
    """The side-panel HTML of :func:`node_details` (tables; body links carry ``data-body``)."""
    # every model string shown cut (a 1 MB node name made a 4.2 MB panel: its id, the tensor
    # names' tooltips, the where line); the id attribute keeps the whole key
    head = (f"<div class='olc-title'><b>{esc_text(d['op_type'], _CUT)}</b>"
            f"{' (' + esc_text(d['domain'], _CUT) + ')' if d['domain'] else ''}</div>"
            f"<div class='olc-id' data-node-id='{esc_attr(d['node_id'])}'>"
            f"{esc_text(d['node_id'], _CUT)}</div>")
    parts = [head]
    if d.get("overlay"):
        o = d["overlay"]
        parts.append(f"<div class='olc-overlay'>{esc_text(o['label'])}: <b>{esc_text(o['text'])}</b>"
                     "</div>")
    where = [f"graph {d['graph'] or 'main'}"] + ([f"scope {d['scope']}"] if d["scope"] else [])
    parts.append(f"<div class='olc-where'>{esc_text(' · '.join(where), _CUT)}</div>")
    parts.append(source_html(d.get("source")))
    if d["attributes"]:
        rows = "".join(f"<tr><td>{esc_text(k, 60)}</td><td>{esc_text(v, _CUT)}</td></tr>"
                       for k, v in d["attributes"].items())
        parts.append(f"<table class='olc-attrs'><tr><th colspan=2>attributes</th></tr>{rows}"
                     "</table>")
    for label, key in (("inputs", "inputs"), ("outputs", "outputs")):
        rows = "".join(
            f"<tr><td title='{esc_attr(t['name'], _TIP)}'>{esc_text(t['name'], 48)}</td>"
            f"<td>{_shape_html(t['text'] or '?', 300)}</td>"
            f"<td>{esc_text(t['kind'])}</td></tr>"
            for t in d[key])
        if rows:
            parts.append(f"<table class='olc-{key}'><tr><th colspan=3>{label}</th></tr>{rows}"
                         "</table>")
    for w in d["weights"]:
        # one statistic a row: a row of seven columns hid max...outlier_score behind a
        # horizontal scroll in the 300 px panel
        rows = "".join(f"<tr><td>{esc_text(c)}</td><td>{esc_text(w.get(c))}</td></tr>"
                       for c in ("shape", *_STAT_COLS))
        parts.append(f"<table class='olc-weights'><tr><th colspan=2 "
                     f"title='{esc_attr(w['name'], _TIP)}'>"
                     f"weight {esc_text(w['name'], 40)}</th></tr>{rows}</table>")
    for i, vals in enumerate(d.get("values") or ()):
        parts.append(weight_values_html(vals, open_=i == 0))
    if d["origins"] and d["origins"] != [d["node_id"]]:
        shown, more = d["origins"][:_ORIGINS], len(d["origins"]) - _ORIGINS
        parts.append("<div class='olc-origins'>fused from: "
                     + ", ".join(esc_text(o, _CUT) for o in shown)
                     + (f" and {more} more" if more > 0 else "") + "</div>")
    for b in d["bodies"]:
        parts.append(f"<button class='olc-body' data-body='{esc_attr(b)}'>"
                     f"open {esc_text(b.rsplit('/', 1)[-1], _CUT)}</button>")
    return "<div class='olc-details'>" + "".join(parts) + "</div>"


def box_module(model: Any, key: str, members: Sequence[str]) -> tuple[str, str | None] | None:
    """(module path, class) of a collapsed box whose key is a module's name scope
    (``/layers.0``), None when its members have no PyTorch source there."""
    levels = tuple(p for p in key.split("/") if p)
    smap = source_map(_as_model(model))
    for nid in members:
        s = smap.get(nid)
        if s is None or not levels or s.levels[:len(levels)] != levels:
            continue
        n = len(levels)
        cls = next((p.classes[n - 1] for p in s.parts if len(p.classes) >= n), None)
        return s.path[n - 1], cls
    return None


def group_details_html(key: str, members: Sequence[str], op_types: Sequence[str],
                       module: tuple[str, str | None] | None = None) -> str:
    """Side-panel HTML of a collapsed box: its scope (and PyTorch module with its class, see
    :func:`box_module`), member count and top op types."""
    from collections import Counter

    top = ", ".join(f"{op} ×{n}" for op, n in Counter(op_types).most_common(6))
    mod = (f"<div class='olc-where'>module {esc_text(module[0])}"
           f"{' (' + esc_text(module[1]) + ')' if module[1] else ''}</div>") if module else ""
    return (f"<div class='olc-details'><div class='olc-title'><b>{esc_text(key)}</b></div>{mod}"
            f"<div class='olc-where'>{len(members)} nodes: {esc_text(top)}</div>"
            "<div class='olc-where'>click the box on the graph to expand it</div></div>")


# ----------------------------------------------------------------------------- canvas data
def canvas_items(rendering: Any, model: Any, *, members: bool = True) -> dict[str, str]:
    """Search text per drawn element of ``rendering``: its key, label, node ids, names, op
    types, the tensors it produces and where they come from in the PyTorch code (module
    paths, classes, ``file.py:line``, functions), lower case, for the canvas search box.

    A collapsed box lists all its members, so searching a node hidden in a box finds the box;
    ``members=False``: its own key and label only (for a page that searches the nodes in
    :func:`search_index`: the members' words of every box, sent again with each view, were
    twice the SVG of an expanded layer of a 32-layer decoder).
    """
    model = _as_model(model)
    idx = model.index
    smap = source_map(model)
    out: dict[str, str] = {}
    for n in rendering.view.nodes.values():
        words = [n.key, n.title, *n.lines]
        for nid in (n.node_ids if members or n.kind != "box" else ()):
            words.extend(_node_words(idx, smap, nid))
        out[n.key] = " ".join(w for w in words if w).lower()
    return out


def _source_words(s: Any) -> list[str]:
    """Search words of a node's source: each part's module path, class, file:line and
    function (``model.layers.0.self_attn.q_proj``, ``modeling_llama.py:244``)."""
    if s is None:
        return []
    words: list[str] = []
    for p in s.parts:
        words += [p.module, p.module_class or ""]
        if p.file:
            short = p.file.replace("\\", "/").rsplit("/", 1)[-1]
            words += [f"{short}:{p.line}", p.function or ""]
    return list(dict.fromkeys(w for w in words if w))


def drawn_key(rendering: Any, model: Any, name: str) -> str | None:
    """The drawn element of ``rendering`` that shows ``name`` (a drawn key, a node id, or a
    tensor name: its producer, else its first consumer), or None when it is not in the view.
    A node inside a collapsed box maps to the box (``scope:<key>``)."""
    if rendering is None:
        return None
    nodes = rendering.view.nodes
    if name in nodes:
        return name
    model = _as_model(model)
    idx = model.index
    cands = [name]
    if name not in idx.entries:
        if name in idx.producer:
            cands = [idx.producer[name]]
        elif name in idx.consumers:
            cands = list(idx.consumers[name])
        for k in (f"input:{name}", f"output:{name}"):
            if k in nodes and not cands:
                return k
    for nid in cands:
        if nid in nodes:
            return nid
        for n in nodes.values():
            if n.kind == "box" and nid in n.node_ids:
                return n.key
    for k in (f"input:{name}", f"output:{name}"):
        if k in nodes:
            return k
    return None


def canvas_legend_html(rendering: Any) -> str:
    """The legend above the canvas: aliases of long symbolic dims, and the view's notes."""
    if rendering is None:
        return ""
    parts = []
    aliases = getattr(rendering.view, "aliases", {}) or {}
    if aliases:
        parts.append("<span class='olc-aliases'><b>dims:</b> " + "; ".join(
            f"<b>{esc_text(a)}</b> = {esc_text(x, 300)}" for a, x in aliases.items()) + "</span>")
    if rendering.notes:
        parts.append("<span class='olc-notes'>" + " · ".join(esc_text(n, 300) for n in
                                                             rendering.notes) + "</span>")
    return "<br/>".join(parts)


# ----------------------------------------------------------------------------- search index
def _node_words(idx: Any, smap: Mapping[str, Any], nid: str) -> list[str]:
    """What finds node ``nid``: its id, op type, name, output tensors and source words."""
    e = idx.entries.get(nid)
    if e is None:
        return []
    words = [nid, e.node.op_type]
    if e.node.name and e.node.name != nid:
        words.append(e.node.name)
    words.extend(v.name for v in e.node.outputs if v is not None and v.name)
    words.extend(_source_words(smap.get(nid)))
    return words


def search_index(model: Any) -> dict[str, list[Any]]:
    """The canvas's client-side search index: one entry per node of every graph (If/Loop/Scan
    bodies included), in the index's order, as parallel lists (compact to send once).

    Returns:
        dict with ``ids`` (node ids), ``text`` (lower-case search text: id, op type, name,
        output tensors, PyTorch module paths and classes, ``file.py:line``, functions),
        ``label`` ("OpType  name" shown in the result list) and ``graph`` (graph path, ""
        for the main graph).

    Example:
        >>> ix = search_index(lab.model)
        >>> ix["ids"][ix["text"].index(next(t for t in ix["text"] if "softmax" in t))]
    """
    model = _as_model(model)
    idx = model.index
    smap = source_map(model)
    ids, text, label, graph = [], [], [], []
    for nid, e in idx.entries.items():
        ids.append(nid)
        text.append(" ".join(w for w in _node_words(idx, smap, nid) if w).lower())
        label.append(f"{e.node.op_type}  {e.node.name or nid}")
        graph.append(e.graph)
    return {"ids": ids, "text": text, "label": label, "graph": graph}


def graph_owners(model: Any) -> dict[str, str]:
    """{body graph path: id of the If/Loop/Scan node that holds it}."""
    idx = _as_model(model).index
    out: dict[str, str] = {}
    for nid, e in idx.entries.items():
        path = e.graph
        owner = nid if (not path or nid.startswith(path + "/")) else f"{path}/{nid}"
        for attr in e.node.attributes.values():
            sub = getattr(attr, "name", None)
            if sub and f"{owner}/{sub}" in idx.graphs:
                out[f"{owner}/{sub}"] = nid
    return out


def placement(rendering: Any, model: Any, ids: Sequence[str]) -> dict[str, list[Any]]:
    """Where each node of ``ids`` shows in ``rendering``: ``keys`` (drawn keys) and ``at``
    (per node, the position in ``keys`` of the element that draws it, -1 when the view does
    not show it) and ``open`` (per node, 1 when drawn as itself, 0 when the drawn element
    holds it: a collapsed box, or the If/Loop node whose body it lies in).

    Example:
        >>> p = placement(lab.render(collapse="auto"), lab.model, search_index(lab)["ids"])
    """
    model = _as_model(model)
    idx = model.index
    nodes = rendering.view.nodes
    graph = rendering.view.graph
    in_box: dict[str, str] = {}
    for n in nodes.values():
        if n.kind == "box":
            for m in n.node_ids:
                in_box.setdefault(m, n.key)
    owners = graph_owners(model) if len(idx.graphs) > 1 else {}
    keys: list[str] = []
    pos: dict[str, int] = {}
    at: list[int] = []
    opened: list[int] = []
    for nid in ids:
        cur, own = nid, True
        e = idx.entries.get(cur)
        while e is not None and e.graph != graph and e.graph in owners:
            cur, own = owners[e.graph], False
            e = idx.entries.get(cur)
        key = None
        if e is not None and e.graph == graph:
            key = cur if cur in nodes else in_box.get(cur)
            if key != cur:
                own = False
        if key is None:
            at.append(-1)
            opened.append(0)
            continue
        if key not in pos:
            pos[key] = len(keys)
            keys.append(key)
        at.append(pos[key])
        opened.append(1 if own else 0)
    return {"keys": keys, "at": at, "open": opened}


# ----------------------------------------------------------------------------- values
def weight_values(model: Any, name: str, *, rows: int = 8, cols: int = 8) -> dict[str, Any] | None:
    """The first values of a weight (initializer or Constant output) along its last two axes
    longer than 1, as Netron shows them: ``{name, dtype, shape, index, rows, more}`` where ``rows`` is a list
    of rows of formatted strings (at most ``rows`` × ``cols``), ``index`` the slice shown
    (``[0, 0, :8, :8]``) and ``more`` whether the tensor holds more. None when ``name`` has
    no readable stored value.

    Example:
        >>> weight_values(lab.model, "stem.conv.weight")["index"]
        '[0, 0, :3, :3]'
    """
    model = _as_model(model)
    v = model.graph.initializers.get(name) or model.index.values.get(name)
    if v is None:
        return None
    try:
        a = const_array(v, stored=True)
    except Exception:  # noqa: BLE001 - unreadable data: the panel shows the statistics only
        a = None
    if a is None:
        return None
    a = np.asarray(a)
    shape = list(a.shape)
    if a.ndim == 0:
        table, index = [[a.item()]], "[]"
    elif a.ndim == 1:
        n = min(a.shape[0], rows * cols)
        flat = a[:n].tolist()
        table, index = [flat[i:i + cols] for i in range(0, n, cols)], f"[:{n}]"
    else:
        # The last two axes longer than 1 (a 1×1 conv's [32, 64, 1, 1] shows [:8, :8, 0, 0]).
        axes = [i for i in range(a.ndim) if a.shape[i] > 1][-2:]
        axes = axes if len(axes) == 2 else list(range(a.ndim))[-2:]
        sl: list[Any] = [0] * a.ndim
        sl[axes[0]], sl[axes[1]] = slice(0, rows), slice(0, cols)
        part = a[tuple(sl)]
        table = part.tolist()
        index = "[" + ", ".join(f":{min(a.shape[i], rows if i == axes[0] else cols)}"
                                if i in axes else "0" for i in range(a.ndim)) + "]"
    shown = sum(len(r) for r in table)
    return {"name": name, "dtype": str(a.dtype), "shape": shape, "index": index,
            "rows": [[_fmt_value(x) for x in r] for r in table], "more": shown < int(a.size)}


def _fmt_value(x: Any) -> str:
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    if isinstance(x, float):
        return f"{x:.5g}"
    return str(x)


def weight_values_html(vals: Mapping[str, Any] | None, *, open_: bool = True) -> str:
    """A sliced table of :func:`weight_values` (escaped: values and names are model data)."""
    if not vals:
        return ""
    body = "".join("<tr>" + "".join(f"<td>{esc_text(c, 24)}</td>" for c in r) + "</tr>"
                   for r in vals["rows"])
    more = " …" if vals["more"] else ""
    head = (f"values {esc_text(vals['name'], 40)}{esc_text(vals['index'])} of "
            f"{esc_text(vals['dtype'])} {esc_text(vals['shape'])}{more}")
    return (f"<details class='olc-values' data-weight='{esc_attr(vals['name'])}'"
            f"{' open' if open_ else ''}><summary>{head}</summary><div class='olc-scroll'>"
            f"<table class='olc-values-table'>{body}</table></div></details>")
