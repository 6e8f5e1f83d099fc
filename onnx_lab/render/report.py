"""One self-contained HTML file per model, and a side-by-side diff of two versions.

A report is what a pull request, a CI artifact or a message to a colleague can carry: one
file, every script and style inlined, no network request, opened from disk with nothing
running. It holds the interactive graph canvas (the widgets' own ``canvas.js``, driven by a
small static host in ``render/static/report.js`` instead of a kernel), the summary,
sortable node / initializer / tensor tables, the check findings and the cost; on request
the history with each step's verification, a profile, a comparison against another model
(numbers and the structural diff side by side) and a precision plan.

Collapsed scopes cannot call back into Python, so every box is drawn ahead of time as a
view of its own (its members, boxed again when they do not fit): a click on a box opens that
view, a breadcrumb leads back. Views, side-panel details and tables travel as one gzip'd
JSON payload that the page inflates with the browser's ``DecompressionStream`` (BERT-base:
see ``benchmarks/bench_report.py``). A section that fails (a profile of a model onnxruntime
cannot run) becomes a note in its place; the file is always written.

Render draws what it is given: :mod:`onnx_lab.reporting` (the façade's ``write_report``,
``lab.report``, ``onnx-lab report``) runs the analyses and hands their results here
(:class:`ReportResults`, a :class:`~onnx_lab.numerics.diff.Diff`).

Example:
    >>> from onnx_lab.reporting import write_diff_report, write_report
    >>> write_report("model.onnx", "model.html", profile=True)
    >>> write_diff_report("model.onnx", "model_fused.onnx", "diff.html")
"""

from __future__ import annotations

import base64
import datetime as _dt
import gzip
import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnx_lab import _display
from onnx_lab.analysis.weights import weight_stats
from onnx_lab.core.history import History
from onnx_lab.core.source import Resolved, resolve
from onnx_lab.errors import LabError, clip_text
from onnx_lab.render._html import (
    Markup,
    csp_meta,
    esc_attr,
    esc_text,
    inline_script,
    inline_style,
    safe_url,
)
from onnx_lab.render.details import (
    canvas_items,
    canvas_legend_html,
    graph_owners,
    group_details_html,
    node_details,
    node_details_html,
    search_index,
)
from onnx_lab.render.graph import shape_text
from onnx_lab.render.results import comparison_html, cost_totals_html, profile_html
from onnx_lab.render.tables import summary_html
from onnx_lab.render.view import render_model

logger = logging.getLogger(__name__)

__all__ = ["ReportResults", "report_page", "diff_page", "canvas_payload", "diff_panels",
           "REPORT_SECTIONS"]

#: The sections of a report, in page order (keywords of :func:`onnx_lab.reporting.write_report`
#: turn them on).
REPORT_SECTIONS = ("summary", "graph", "check", "cost", "nodes", "initializers", "tensors",
                   "history", "profile", "comparison", "diff", "precision")

_HERE = Path(__file__).resolve().parent
_CANVAS_JS = _HERE.parent / "widgets" / "static" / "canvas.js"
_MARKUP_JS = _HERE.parent / "widgets" / "static" / "markup.js"  # setMarkup, before canvas.js
_SCENE_JS = _HERE.parent / "widgets" / "static" / "scene.js"  # sceneOf, before canvas.js
_CANVAS_CSS = _HERE.parent / "widgets" / "static" / "canvas.css"
_REPORT_JS = _HERE / "static" / "report.js"
_REPORT_CSS = _HERE / "static" / "report.css"
_MAX_TABLE_ROWS = 20_000


# ----------------------------------------------------------------------------- assets
def _canvas_script() -> str:
    """``canvas.js`` (an ES module for anywidget) as a classic script defining
    ``window.OnnxLabCanvas``: an inline module could not be reached from file:// pages."""
    src = _CANVAS_JS.read_text(encoding="utf-8")
    tail = "export default { render };"
    if tail not in src:  # the widget's module changed shape: say so instead of a blank page
        raise LabError(f"{_CANVAS_JS} no longer ends with {tail!r}; the report cannot inline it.",
                       fix="Keep `export default { render };` as the module's export.")
    body = src.replace(tail, "window.OnnxLabCanvas = { render };")
    return ("(function () {\n" + _MARKUP_JS.read_text(encoding="utf-8") + "\n"
            + _SCENE_JS.read_text(encoding="utf-8") + "\n" + body + "\n})();")


def _payload(data: Any) -> str:
    raw = json.dumps(data, separators=(",", ":"), default=_json_default).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


# ----------------------------------------------------------------------------- canvas data
def _element_details_html(rendering: Any, model: Any, key: str) -> str:
    """Side panel of a drawn element that is not a node: a box, an input, a weight, a stub."""
    node = rendering.view.nodes.get(key)
    if node is None:
        return ""
    if node.kind == "box":
        ops = [model.index.entries[n].node.op_type for n in node.node_ids
               if n in model.index.entries]
        return group_details_html(key.split(":", 1)[1], node.node_ids, ops)
    lines = "".join(f"<div class='olc-where'>{esc_text(x)}</div>" for x in node.lines if x)
    return (f"<div class='olc-details'><div class='olc-title'><b>{esc_text(node.title)}</b>"
            f"</div><div class='olc-id'>{esc_text(node.kind)}</div>{lines}</div>")


def canvas_payload(source: Any, *, highlight: Mapping[str, str] | None = None,
                   max_nodes: int = 300, overview_nodes: int = 60, max_views: int = 300,
                   budget_s: float = 120.0,
                   timeout: float = 10.0, extra_details: Mapping[str, str] | None = None,
                   extra_views: Mapping[str, tuple[str, Sequence[str]]] | None = None
                   ) -> dict[str, Any]:
    """Everything the static canvas needs for one model: pre-drawn views and side panels.

    The overview is ``render_model(collapse="auto")``; every collapsed box becomes a view of
    its members (collapsed again when they do not fit), breadth first, and every If/Loop/Scan
    body a view of its own, until ``max_views`` views or ``budget_s`` seconds; a box left
    undrawn says so in its panel.

    Args:
        source: a Lab, path, LabModel... (:func:`onnx_lab.core.source.resolve`).
        highlight: {node id: colour} outlined in every view that shows the node (a box
            holding one is outlined too).
        max_nodes: drawn elements per view.
        overview_nodes: drawn elements of the overview: a coarse first view (a 313-node
            detector as its 20 top scopes rather than 92 small boxes) that reads at a
            glance; its boxes open into views of up to ``max_nodes``.
        extra_details: HTML appended to a node's panel, by node id (the diff's section).
        extra_views: more views, {view key: (label, node ids)}, drawn after the others
            (the diff draws the nodes a fused node replaced together).

    Returns:
        dict with ``views`` ({view key: {svg, items, legend, label, parent, kind,
        notes}}; ``""`` is the overview, a scope or group key a box's view, ``graph:<path>``
        a body), ``details`` ({node id or drawn key: panel HTML}, every node included),
        ``where`` ({node id: [view key, drawn key]} where the node is drawn as itself),
        ``undrawn`` (the other nodes, by the element of the deepest pre-drawn view that
        holds them: ``[view key, drawn key, where text, note HTML, node ids]``, see
        :func:`_undrawn`), ``index`` (the canvas's search index of every node,
        :func:`~onnx_lab.render.details.search_index`: the page works out from ``where``,
        ``undrawn`` and the views' parents which box of the view shown holds each),
        ``notes``.

    Example:
        >>> p = canvas_payload("sample:transformer_block")
        >>> sorted(p["views"])[:3]
    """
    r = resolve(source)
    model, dims, shapes = r.model, r.dims, r.shapes
    idx = model.index
    t0 = time.perf_counter()
    views: dict[str, dict[str, Any]] = {}
    details: dict[str, str] = {}
    where: dict[str, list[str]] = {}
    drawn: dict[str, str] = {}
    notes: list[str] = []
    box_of_view: dict[str, dict[str, str]] = {}  # view -> {drawn box key: child view key}
    hl = dict(highlight or {})
    extra = dict(extra_details or {})

    def draw(view_key: str, label: str, parent: str | None, kind: str, **kw: Any) -> None:
        ids = kw.get("nodes")
        members = set(ids) if ids is not None else None
        graph = kw.get("graph", "")
        vh = {k: c for k, c in hl.items() if k in idx.entries and (
            members is None or k in members) and (members is not None
                                                  or idx.entries[k].graph == graph)}
        cap = overview_nodes if view_key == "" else max_nodes
        rendering = render_model(model, collapse="auto", max_nodes=cap, timeout=timeout,
                                 dims=dims, shapes=shapes, highlight=vh or None, **kw)
        views[view_key] = {
            "svg": rendering.svg or "", "label": label, "parent": parent, "kind": kind,
            "items": canvas_items(rendering, model),
            "legend": canvas_legend_html(rendering),
            "fallback": "" if rendering.svg else (
                "no drawing: " + "; ".join(rendering.notes[-1:])),
            "notes": list(rendering.notes)}
        boxes: dict[str, str] = {}
        # the keys the page reads back from the drawing where they are not the keys
        # themselves (render._html.dot_safe): the page translates them (canvas.js realOf)
        drawn.update(rendering.drawn)
        for key, n in rendering.view.nodes.items():
            if n.kind == "op" and n.node_ids:
                nid = n.node_ids[0]
                where.setdefault(nid, [view_key, key])
            elif n.kind == "box":
                boxes[key] = key.split(":", 1)[1] if view_key == "" else \
                    f"{view_key}|{key.split(':', 1)[1]}"
                details.setdefault(boxes[key], _element_details_html(rendering, model, key))
            elif key not in details:
                details[key] = _element_details_html(rendering, model, key)
        box_of_view[view_key] = boxes
        views[view_key]["boxes"] = boxes
        views[view_key]["members"] = {k: list(rendering.view.nodes[k].node_ids)
                                      for k in boxes}

    draw("", "overview", None, "overview")
    n_main = len(idx.topo_order(""))
    if views[""]["boxes"]:
        notes.append(f"{n_main} nodes in the main graph: drawn as a collapsed overview; click "
                     "a box to open it (the breadcrumb leads back).")
    queue: deque[tuple[str, str, list[str]]] = deque()
    for key, child in views[""]["boxes"].items():
        queue.append((child, key.split(":", 1)[1], views[""]["members"][key]))
    bodies = [g for g in idx.graphs if g]
    skipped, limit = 0, ""
    while queue or bodies:
        if len(views) >= max_views or time.perf_counter() - t0 > budget_s:
            skipped = len(queue) + len(bodies)
            limit = (f"its size budget, max_views={max_views}" if len(views) >= max_views
                     else f"its time budget, budget_s={budget_s:g}")
            break
        if queue:
            child, label, members = queue.popleft()
            parent = child.rsplit("|", 1)[0] if "|" in child else ""
            try:
                draw(child, label, parent, "box", nodes=members)
            except LabError as e:
                notes.append(f"box {label!r} not drawn: {e}")
                continue
            for key, grand in views[child]["boxes"].items():
                queue.append((grand, key.split(":", 1)[1], views[child]["members"][key]))
        else:
            g = bodies.pop(0)
            try:
                draw(f"graph:{g}", g, None, "body", graph=g)
            except LabError as e:
                notes.append(f"body {g!r} not drawn: {e}")
    for vk, (label, ids) in (extra_views or {}).items():
        if len(views) >= max_views + len(extra_views or {}) or \
                time.perf_counter() - t0 > budget_s:
            break
        ids = [n for n in ids if n in idx.entries]
        graphs = {idx.entries[n].graph for n in ids}
        if not ids or len(graphs) != 1:
            continue
        try:
            draw(vk, label, "", "extra", nodes=ids, graph=graphs.pop())
        except LabError as e:
            notes.append(f"view {label!r} not drawn: {e}")
    if skipped:
        notes.append(f"{skipped} boxes/bodies were not pre-drawn (max_views={max_views}, "
                     f"budget {budget_s:g} s); their panels list their members, and search "
                     "shows each of their nodes' panels inside its box.")
    undrawn = _undrawn(model, views, where, limit)
    # Side panels of every node, drawn on its own or not (search, focus and a table row
    # land on these); the weights' statistics once for all (one pass over the weights, not
    # one per node).
    try:
        stats = {r["name"]: r for r in weight_stats(model).to_dict("records")}
    except LabError as e:
        stats = None
        notes.append(f"weight statistics left out of the side panels: {e}")
    for nid in [*where, *(n for u in undrawn for n in u[4])]:
        try:
            d = node_details(model, nid, dims=dims, shapes=shapes, stats=stats)
            if nid not in where:  # the weights' first values, random digits that gzip
                d["values"] = []  # cannot shrink, were 40% of these panels (the note says)
            details[nid] = node_details_html(d) + extra.get(nid, "")
        except LabError as e:
            details[nid] = f"<div class='olc-details'>{esc_text(str(e))}</div>"
    return {"views": views, "details": details, "where": where, "undrawn": undrawn,
            "notes": notes, "drawn": drawn, "index": search_index(model),
            "seconds": time.perf_counter() - t0}


def _undrawn(model: Any, views: dict[str, dict[str, Any]], where: Mapping[str, list[str]],
             limit: str) -> list[list[Any]]:
    """Where the report shows each node no view draws as itself (its box or body was left
    out by the view budget, or its view was cut): the element of the deepest pre-drawn view
    that holds it, a collapsed box, or the If/Loop/Scan node whose body holds it.

    Returns ``[view key, drawn key, where text, panel note HTML, node ids]`` per element
    (``None, None`` for a node no view holds): the page lists a hit as ``in /layers.35 (not
    drawn)`` and, on a choice, opens that view, selects the element and shows the node's
    panel under the note. Grouped by element, so a note is sent once per box. Pops the
    views' ``members``.
    """
    idx = model.index
    # node id -> (view key, drawn key, where the node lies, name of the drawn element)
    place: dict[str, tuple[str, str, str, str]] = {}
    # Breadth first: a deeper view is drawn later and its box wins.
    for vk, v in views.items():
        members = v.pop("members", {})
        if v["kind"] == "extra":  # the diff's own views: not where a node lives
            continue
        for key, ids in members.items():
            name = key.split(":", 1)[1]
            for m in ids:
                if m not in where:
                    place[m] = (vk, key, name, name)
    owners = graph_owners(model) if len(idx.graphs) > 1 else {}
    by_graph: dict[str, list[str]] = {}
    for nid, e in idx.entries.items():
        if e.graph:
            by_graph.setdefault(e.graph, []).append(nid)
    for g in sorted(by_graph, key=len):  # an enclosing body's path is a prefix: first
        o = owners.get(g, "")
        at = (*where[o], o) if o in where else place[o][:2] + place[o][3:] \
            if o in place else None
        for nid in by_graph[g]:
            if nid not in where and nid not in place and at is not None:
                place[nid] = (at[0], at[1], f"body of {o}", at[2])
    groups: dict[tuple[Any, ...], list[str]] = {}
    for nid in idx.entries:
        if nid not in where:
            groups.setdefault(place.get(nid, (None, None, "", "")), []).append(nid)
    why = esc_text(f"the report stopped drawing views at {limit}" if limit
                   else "it was cut or failed to draw: see the notes above the graph")
    how = ("To see it drawn, and its weights' first values: open the model in the widget "
           "(<code>onnx_lab.open(path).explore()</code>), or write the report with a larger "
           "<code>" + ("budget_s" if "budget_s" in limit else "max_views") + "</code>.")
    out: list[list[Any]] = []
    for (vk, key, name, shown), ids in groups.items():
        if vk is None:
            text = "not drawn in this report"
            note = ("<div class='olr-note olr-undrawn'>Not drawn: no view of this report "
                    f"draws this node ({why}). {how}</div>")
        else:
            text = f"in {name} (not drawn)"
            kind = "box" if key.startswith("scope:") else "node"
            lies = (f"the {kind} <b>{esc_text(shown, 200)}</b>, selected on the graph"
                    if name == shown else f"<b>{esc_text(name, 200)}</b>; the {kind} "
                    f"<b>{esc_text(shown, 200)}</b> that holds it is selected on the graph")
            note = ("<div class='olr-note olr-undrawn'>Not pre-drawn: this node's own view "
                    f"is not in the report ({why}). It lies in {lies}. {how}</div>")
        out.append([vk, key, text, note, ids])
    return out


# ----------------------------------------------------------------------------- tables
def _clipped(x: Any) -> str:
    """One part of a list cell: a model's dim text repeats in the shape of every tensor it
    reaches (a 200 KB dim, 2,000 tensors: 400 MB of table), so a long part is cut."""
    s = str(x)
    return s if len(s) <= _MAX_PART_CHARS else clip_text(s, _MAX_PART_CHARS)


_MAX_PART_CHARS = 300


def _cell(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, float):
        return None if math.isnan(v) else (v if math.isfinite(v) else str(v))
    if isinstance(v, (bool, int, str)):
        return v
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return _cell(v.item())
    if isinstance(v, (list, tuple)):
        return ", ".join(_clipped(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{_clipped(k)}={_clipped(x)}" for k, x in v.items())
    try:
        import pandas as pd

        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return str(v)


def _table(df: Any, *, key: str | None = None, limit: int = _MAX_TABLE_ROWS) -> dict[str, Any]:
    """A DataFrame as {columns, rows, total, key}: what report.js sorts and filters."""
    total = len(df)
    view = df.iloc[:limit]
    rows = [[_cell(x) for x in r] for r in view.itertuples(index=False, name=None)]
    return {"columns": [str(c) for c in df.columns], "rows": rows, "total": total,
            "key": key}


# ----------------------------------------------------------------------------- sections
class _Page:
    """Collects sections; a failing builder leaves a note in its section instead."""

    def __init__(self) -> None:
        self.sections: list[tuple[str, str, str]] = []  # (id, title, html)
        self.tables: dict[str, Any] = {}
        self.notes: list[str] = []

    def add(self, sid: str, title: str, build: Callable[[], str]) -> None:
        t = time.perf_counter()
        try:
            body = build()
        except Exception as e:  # noqa: BLE001 - a section's failure is a note, never no file
            if not isinstance(e, LabError):
                logger.exception("report section %s failed", sid)
            fix = getattr(e, "fix", None)
            body = (f"<div class='olr-note olr-failed'><b>{esc_text(title)} could not be "
                    f"built:</b> {esc_text(str(e) or type(e).__name__)}"
                    + (f"<br>{esc_text(fix)}" if fix and fix not in str(e) else "")
                    + "</div>")
            self.notes.append(f"{title}: {e}")
        logger.debug("report section %s: %.2f s", sid, time.perf_counter() - t)
        self.sections.append((sid, title, body))

    def table_html(self, name: str, df: Any, *, key: str | None = None, caption: str = "") -> str:
        self.tables[name] = _table(df, key=key)
        more = ""
        if len(df) > _MAX_TABLE_ROWS:
            more = (f"<div class='olr-note'>first {_MAX_TABLE_ROWS:,} of {len(df):,} rows "
                    "(the library's DataFrame has them all).</div>")
        cap = f"<div class='olr-caption'>{esc_text(caption)}</div>" if caption else ""
        return f"{cap}<div class='olr-table' data-table='{esc_text(name)}'></div>{more}"


def _history_of(source: Any) -> History | None:
    if isinstance(source, History):
        return source
    h = getattr(source, "version_history", None)
    return h if isinstance(h, History) else None


def _history_html(page: _Page, hist: History) -> str:
    df = hist.table()
    parts = [page.table_html("history", df, caption=f"{len(df)} versions (step 0: as opened)")]
    for v in hist.versions[1:]:
        r = v.result
        if r is None:
            continue
        verdict = ("not verified" if r.verify_passed is None else
                   "verification passed" if r.verify_passed else "verification FAILED")
        head = (f"step {v.step:d}: {esc_text(str(r.name))} — {verdict}"
                + (f", max_abs {r.max_abs_err:.3g}" if r.max_abs_err is not None else ""))
        body = ""
        ver = r.verification
        if ver is not None and len(ver):
            name = f"verification_{v.step}"
            body = page.table_html(name, ver)
        if r.first_failure:
            body += f"<div class='olr-note'>first failure: {esc_text(r.first_failure)}</div>"
        if r.notes:
            body += "<ul>" + "".join(f"<li>{esc_text(n)}</li>" for n in r.notes) + "</ul>"
        if not r.modified and r.reason:
            body += f"<div class='olr-note'>not modified: {esc_text(r.reason)}</div>"
        parts.append(f"<details class='olr-step' data-step='{v.step:d}'><summary>{head}"
                     f"</summary>{body or '<i>no verification report</i>'}</details>")
    return "".join(parts)


def _given(result: Any) -> Any:
    """A section's result; the exception that stopped it is raised here, inside the section,
    so that it becomes the section's note (:meth:`_Page.add`)."""
    if isinstance(result, BaseException):
        raise result
    return result


def _cost_html(page: _Page, c: Any) -> str:
    notes = "".join(f"<li>{esc_text(n)}</li>" for n in c.notes)
    top = c.nodes.sort_values("flops", ascending=False)
    by_op = c.by_op().reset_index()
    return (cost_totals_html(c) + (f"<ul class='olr-notes'>{notes}</ul>" if notes else "")
            + page.table_html("cost_by_op", by_op, caption="per op type")
            + page.table_html("cost_nodes", top, key="node_id", caption="per node (most FLOPs "
                         "first; click a row to find it on the graph)"))


def _check_html(page: _Page, df: Any) -> str:
    if not len(df):
        return "<div class='olr-ok'>no findings</div>"
    counts = df["severity"].value_counts()
    head = ", ".join(f"{int(n)} {esc_text(str(s))}" for s, n in counts.items())
    return f"<div>{head}</div>" + page.table_html("check", df, key="node_id")


def _title_of(r: Resolved, title: str | None, source: Any) -> str:
    if title:
        return title
    path = r.model.path or getattr(source, "path", None)
    return Path(path).name if path else (r.model.ir.graph.name or "model")


# ----------------------------------------------------------------------------- pages
def _section_html(sid: str, title: str, body: Markup) -> str:
    return (f"<section id='{esc_attr(sid)}' class='olr-section'><h2>{esc_text(title)}</h2>"
            f"{body}</section>")


def _page_html(title: str, subtitle: Markup, sections: Sequence[tuple[str, str, str]],
               data: Mapping[str, Any], notes: Sequence[str]) -> str:
    nav = " · ".join(f"<a href='{safe_url('#' + sid)}'>{esc_text(t)}</a>"
                     for sid, t, _ in sections)
    body = "".join(_section_html(sid, t, b) for sid, t, b in sections)
    note_html = ("<div class='olr-notes-top'>" + "".join(
        f"<div class='olr-note'>{esc_text(n)}</div>" for n in notes) + "</div>"
        if notes else "")
    css = _CANVAS_CSS.read_text(encoding="utf-8") + "\n" + _REPORT_CSS.read_text(
        encoding="utf-8")
    scripts = [_canvas_script(), _REPORT_JS.read_text(encoding="utf-8")]
    # No external URL anywhere: scripts, styles and data are inline; the CSP lets only the
    # package's own two scripts run (by hash) and nothing load.
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            + csp_meta(scripts)
            + "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<meta name='generator' content='onnx_lab'><title>{esc_text(title)}</title>"
            + inline_style(css) + "</head><body class='olr-body'>"
            f"<header class='olr-header'><h1>{esc_text(title)}</h1>"
            f"<div class='olr-sub'>{subtitle}</div><nav class='olr-nav'>{nav}</nav></header>"
            f"{note_html}<main>{body}</main>"
            f"<script type='application/octet-stream' id='olr-data'>{esc_text(_payload(data))}"
            "</script>" + "".join(inline_script(js) for js in scripts) + "</body></html>")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnx_lab")
    except PackageNotFoundError:
        return "(not installed)"


def _subtitle_html(r: Resolved, source: Any, extra: Markup | None = None) -> str:
    path = r.model.path or getattr(source, "path", None)
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    dims = ", ".join(f"{k}={v}" for k, v in r.dims.items())
    parts = [esc_text(str(path)) if path else "in-memory model",
             f"{len(r.model.index)} nodes"] + ([f"dims {esc_text(dims)}"] if dims else []) \
        + [esc_text(f"onnx_lab {_version()}"), when]
    return " · ".join(parts) + (extra or "")


@dataclass
class ReportResults:
    """What one model's report draws, computed by the façade (:mod:`onnx_lab.reporting`).

    Each section holds its result, the exception that stopped it (drawn as a note in its
    place: the file is always written) or None (the section is left out). The graph section
    is drawn here from the model itself (``graph``: whether to draw it).

    Attributes:
        model: the resolved model (its dims and shapes).
        source: what the report was asked for (its path names the page).
        title: the page title (default: the model's file name or graph name).
        summary: a :class:`~onnx_lab.analysis.summary.Summary`.
        check: the :func:`~onnx_lab.analysis.compat.check` findings (DataFrame).
        cost: a :class:`~onnx_lab.analysis.cost.Cost`.
        nodes, initializers, tensors: the tables (DataFrames).
        history: a :class:`~onnx_lab.core.history.History`.
        profile: a :class:`~onnx_lab.profiling.run.Profile`.
        against: the other model of ``comparison`` and ``diff`` (its name labels side B).
        comparison: a :class:`~onnx_lab.numerics.compare.Comparison`.
        diff: a :class:`~onnx_lab.numerics.diff.Diff`.
        precision: a precision plan (anything with an HTML drawing).
        max_nodes, max_views, budget_s, timeout: the canvases' pre-drawing limits.
    """

    model: Resolved
    source: Any = None
    title: str | None = None
    summary: Any = None
    graph: bool = True
    check: Any = None
    cost: Any = None
    nodes: Any = None
    initializers: Any = None
    tensors: Any = None
    history: Any = None
    profile: Any = None
    against: Any = None
    comparison: Any = None
    diff: Any = None
    precision: Any = None
    max_nodes: int = 300
    max_views: int = 300
    budget_s: float = 120.0
    timeout: float = 10.0

    def failures(self) -> list[tuple[str, BaseException]]:
        """The sections that could not be built, in page order: ``(name, exception)``.

        Example:
            >>> [name for name, e in res.failures()]
            ['cost', 'profile', 'comparison']
        """
        return [(name, value) for name in REPORT_SECTIONS
                if isinstance(value := getattr(self, name, None), BaseException)]


def report_page(res: ReportResults) -> str:
    """The report of one model as one self-contained HTML document, from its results.

    Example:
        >>> from onnx_lab.reporting import report_results
        >>> text = report_page(report_results("sample:convnet", profile=True))
    """
    r = res.model
    page = _Page()
    data: dict[str, Any] = {"canvases": {}, "tables": page.tables}
    page.add("summary", "Summary", lambda: summary_html(_given(res.summary)))
    if res.graph:
        def build_graph() -> str:
            p = canvas_payload(r, max_nodes=res.max_nodes, max_views=res.max_views,
                               budget_s=res.budget_s, timeout=res.timeout)
            data["canvases"]["main"] = p
            notes = "".join(f"<div class='olr-note'>{esc_text(n)}</div>" for n in p["notes"])
            return notes + "<div class='olr-canvas' data-canvas='main'></div>"
        page.add("graph", "Graph", build_graph)
    if res.check is not None:
        page.add("check", "Check findings", lambda: _check_html(page, _given(res.check)))
    if res.cost is not None:
        page.add("cost", "Cost", lambda: _cost_html(page, _given(res.cost)))
    if res.nodes is not None:
        page.add("nodes", "Nodes", lambda: page.table_html("nodes", _given(res.nodes),
                                                      key="node_id"))
    if res.initializers is not None:
        page.add("initializers", "Initializers",
                 lambda: page.table_html("initializers", _given(res.initializers)))
    if res.tensors is not None:
        page.add("tensors", "Tensors", lambda: page.table_html("tensors",
                                                          _given(res.tensors)))
    if res.history is not None:
        page.add("history", "History", lambda: _history_html(page, _given(res.history)))
    if res.profile is not None:
        page.add("profile", "Profile", lambda: profile_html(_given(res.profile)))
    if res.comparison is not None:
        page.add("comparison", "Comparison",
                 lambda: comparison_html(_given(res.comparison)))
    if res.diff is not None:
        page.add("diff", "Diff", lambda: _diff_body(
            page, data, _given(res.diff), "diff", max_nodes=res.max_nodes,
            max_views=res.max_views, budget_s=res.budget_s, timeout=res.timeout,
            label_a=_label(r, "this model"), label_b=_label(res.against, "against")))
    if res.precision is not None:
        page.add("precision", "Precision plan",
                 lambda: _display.draw(_given(res.precision), "html"))
    return _page_html(_title_of(r, res.title, res.source), _subtitle_html(r, res.source),
                      page.sections, data, page.notes)


# ----------------------------------------------------------------------------- diff
_CHANGE_COLOURS = {"added": "#2da44e", "removed": "#cf222e", "changed": "#d97706",
                   "unchanged": "#8c959f"}


def diff_panels(d: Any, side: str, *, buttons: bool = True) -> dict[str, str]:
    """The diff part of each node's side panel, by node id of side ``"a"`` or ``"b"``:
    the change, how it was matched, the attribute/input/weight/shape differences, the
    counterparts on the other side (buttons with ``data-olr-side``/``data-olr-node`` when
    ``buttons``) and, for a one-to-one match, both outputs' dtypes and shapes.

    Example:
        >>> panels = diff_panels(onnx_lab.diff(before, after), "b")
        >>> panels["Attention_0"]  # lists the MatMuls, Softmax... it replaced
    """
    links = d.links()[0 if side == "a" else 1]
    t = d.table
    col = "node_id_a" if side == "a" else "node_id_b"
    other = "b" if side == "a" else "a"
    rows = {row[col]: row for row in t.to_dict("records") if isinstance(row[col], str)}
    other_model = (d.b if side == "a" else d.a).model
    this = (d.a if side == "a" else d.b)
    types = _safe_types(this)
    other_types = _safe_types(d.b if side == "a" else d.a)
    pairs = d.matches if side == "a" else {y: x for x, y in d.matches.items()}
    out: dict[str, str] = {}
    ids = set(rows) | set(links)
    for nid in ids:
        row = rows.get(nid)
        change = row["change"] if row else "unchanged"
        peers = links.get(nid, [])
        colour = _CHANGE_COLOURS.get(change, "#8c959f")
        parts = [f"<div class='olr-diff-panel olr-change-{esc_attr(change)}' style='border-left:"
                 f"4px solid {esc_attr(colour)};padding:2px 6px;"
                 f"margin-top:6px'><div><b>{esc_text(change)}</b>"
                 + (f" · matched by {esc_text(row['match'])}"
                    if row and isinstance(row["match"], str) else "") + "</div>"]
        if row and row["details"] and row["details"] not in (change,):
            parts.append("<ul class='olr-diff-details'>" + "".join(
                f"<li>{esc_text(x)}</li>" for x in str(row["details"]).split("; ")) + "</ul>")
        if peers:
            label = ("replaced" if len(peers) > 1 and side == "b" else
                     "fused into" if change == "removed" else "in " + other.upper())
            tag = "button" if buttons else "span"
            items = "".join(
                f"<{tag} class='olr-peer' data-olr-side='{other}' data-olr-node="
                f"'{esc_attr(p)}'>{esc_text(_op_of(other_model, p))} "
                f"{esc_text(p)}</{tag}> " for p in peers)
            parts.append(f"<div class='olr-peers'>{label}: {items}</div>")
            if pairs.get(nid) == peers[0]:  # one-to-one: output types side by side
                parts.append(_shape_rows(this.model, nid, types, other_model, peers[0],
                                         other_types, side))
        parts.append("</div>")
        out[nid] = "".join(parts)
    return out


def _op_of(model: Any, nid: str) -> str:
    e = model.index.entries.get(nid)
    return e.node.op_type if e is not None else "?"


def _safe_types(r: Resolved) -> dict[str, Any]:
    try:
        return r.model.types(r.dims, r.shapes)
    except LabError:
        return {}


def _type_text(types: Mapping[str, Any], name: str) -> str:
    return shape_text(types.get(name)) or "?"


def _shape_rows(model: Any, nid: str, types: Mapping[str, Any], other: Any, oid: str,
                other_types: Mapping[str, Any], side: str) -> str:
    """Output dtypes and shapes of a node and its counterpart, side by side."""
    a = model.index.entries.get(nid)
    b = other.index.entries.get(oid)
    if a is None or b is None:
        return ""
    rows = []
    for i, (x, y) in enumerate(zip(a.node.outputs, b.node.outputs)):
        tx, ty = _type_text(types, x.name), _type_text(other_types, y.name)
        if side == "b":
            tx, ty = ty, tx
        mark = "" if tx == ty else " class='olr-differs'"
        rows.append(f"<tr{mark}><td>output {i:d}</td><td>{esc_text(tx)}</td>"
                    f"<td>{esc_text(ty)}</td></tr>")
    return ("<table class='olr-shapes'><tr><th></th><th>A</th><th>B</th></tr>"
            + "".join(rows) + "</table>") if rows else ""


def _diff_data(d: Any, *, max_nodes: int, max_views: int, budget_s: float,
               timeout: float) -> dict[str, Any]:
    a2b, b2a = d.links()

    def fusions(links: Mapping[str, list[str]], other: str) -> dict[str, tuple[str, list]]:
        # The nodes one fused node replaced, drawn together on the other side.
        return {f"fused:{k}": (f"replaced by {k} ({other})", v) for k, v in links.items()
                if len(v) > 1}

    pa = canvas_payload(d.a, highlight=d.highlight("a"), max_nodes=max_nodes,
                        max_views=max_views, budget_s=budget_s / 2, timeout=timeout,
                        extra_details=diff_panels(d, "a"), extra_views=fusions(b2a, "B"))
    pb = canvas_payload(d.b, highlight=d.highlight("b"), max_nodes=max_nodes,
                        max_views=max_views, budget_s=budget_s / 2, timeout=timeout,
                        extra_details=diff_panels(d, "b"), extra_views=fusions(a2b, "A"))
    return {"a": pa, "b": pb, "a2b": a2b, "b2a": b2a}


def _diff_body(page: _Page, data: dict[str, Any], d: Any, name: str, *, max_nodes: int,
               max_views: int, budget_s: float, timeout: float, label_a: str,
               label_b: str) -> str:
    c = d.counts
    dd = _diff_data(d, max_nodes=max_nodes, max_views=max_views, budget_s=budget_s,
                    timeout=timeout)
    data.setdefault("diffs", {})[name] = dd
    head = (f"<div class='olr-diff-counts'><span class='olr-chip olr-added'>{c['added']:d} "
            f"added</span> <span class='olr-chip olr-removed'>{c['removed']:d} removed</span> "
            f"<span class='olr-chip olr-changed'>{c['changed']:d} changed</span> "
            f"· {len(d.matches)} matched ({esc_text(_match_counts(d))})</div>")
    key = esc_attr(name)
    table = d.table.copy()
    notes = "".join(f"<div class='olr-note'>{esc_text(n)}</div>"
                    for n in dd["a"]["notes"] + dd["b"]["notes"])
    return (head + notes
            + f"<div class='olr-diff' data-diff='{key}'>"
            f"<div class='olr-diff-side'><div class='olr-side-label'>A · {esc_text(label_a)}"
            f"</div><div class='olr-canvas' data-canvas='{key}:a'></div></div>"
            f"<div class='olr-diff-side'><div class='olr-side-label'>B · {esc_text(label_b)}"
            f"</div><div class='olr-canvas' data-canvas='{key}:b'></div></div></div>"
            + page.table_html(f"{name}_ops", d.op_counts(), caption="op types")
            + page.table_html(f"{name}_nodes", table, caption="nodes that differ"))


def _match_counts(d: Any) -> str:
    """How the matched nodes were paired: ``12 by provenance, 80 by name``."""
    kinds = Counter(d.match_kinds.values()) if hasattr(d, "match_kinds") else Counter()
    return ", ".join(f"{n} by {k}" for k, n in kinds.most_common()) or "by name and structure"


def _label(source: Any, default: str) -> str:
    path = getattr(getattr(source, "model", None), "path", None) or getattr(source, "path",
                                                                          None)
    if path:
        return Path(path).name
    return source if isinstance(source, str) else default


def diff_page(d: Any, a: Any = None, b: Any = None, *, title: str | None = None,
              max_nodes: int = 300, max_views: int = 300, budget_s: float = 120.0,
              timeout: float = 10.0) -> str:
    """The side-by-side diff of two models as one self-contained HTML document, from their
    :class:`~onnx_lab.numerics.diff.Diff` (``a``, ``b``: what was compared, for the labels;
    default the Diff's sides).

    Two canvases with synced pan, zoom and selection: a click on a node selects its
    counterpart on the other side (a fused node highlights every node it replaced); added
    (green), removed (red) and changed (orange) nodes are outlined; the side panel shows
    the change, the match, attribute, shape and weight differences; below, counts per op type
    and the table of differing nodes.

    Example:
        >>> text = diff_page(onnx_lab.diff("bert.onnx", "bert_fused.onnx"))
    """
    page = _Page()
    data: dict[str, Any] = {"canvases": {}, "tables": page.tables}
    la, lb = _label(d.a if a is None else a, "A"), _label(d.b if b is None else b, "B")
    page.add("diff", "Diff", lambda: _diff_body(page, data, d, "diff", max_nodes=max_nodes,
                                                max_views=max_views, budget_s=budget_s,
                                                timeout=timeout, label_a=la, label_b=lb))
    t = title or f"{la} → {lb}"
    return _page_html(t, _subtitle_html(d.a, d.a if a is None else a,
                                        Markup(f" · against {esc_text(lb)}")),
                      page.sections, data, page.notes)


# The doors that run the analyses moved to the façade layer (render only draws).
_MOVED = ("write_report", "report_html", "write_diff_report", "diff_report_html")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        also = f" (and onnx_lab.{name})" if name.startswith("write") else ""
        raise ImportError(f"onnx_lab.render.report.{name} is now onnx_lab.reporting.{name}"
                          f"{also}: the façade runs the analyses, render only draws them.",
                          name=name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
