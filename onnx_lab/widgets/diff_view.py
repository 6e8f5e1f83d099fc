"""DiffView: two versions of a model side by side, linked node to node.

A view over :func:`onnx_lab.diff`: two graph canvases (model ``a`` left, ``b`` right) with
added (green), removed (red) and changed (orange) nodes outlined; pan and zoom move both
sides; a click on a node selects its counterpart on the other side, and a fused node (an
onnxruntime Attention) outlines every node it replaced. The side panel adds the change, how
the node was matched, the attribute, shape and weight differences
(:func:`onnx_lab.render.report.diff_panels`); below, counts per op type
(``Diff.op_counts()``) and the table of differing nodes (``Diff.table``).

Example:
    >>> from onnx_lab.widgets import DiffView
    >>> before = onnx_lab.open("bert.onnx"); after = onnx_lab.open("bert.onnx")
    >>> after.apply("ort_transformers", model_type="bert")
    >>> dv = DiffView(before, after); dv
    >>> dv.select("a", "/layer.0/attention/core/Softmax"); dv.right.highlight
"""

from __future__ import annotations

import time
from typing import Any

import ipywidgets as w

from onnx_lab.numerics.diff import diff
from onnx_lab.render.report import diff_panels
from onnx_lab.widgets._common import PagedTable, View, code_html, info_html

__all__ = ["DiffView"]


class DiffView(View):
    """Two canvases with synced pan, zoom and selection over ``onnx_lab.diff(a, b)``.

    Args:
        a, b: the two versions (Labs, paths, ``sample:NAME``...); ``a`` is drawn left.
        height: height of each canvas in px.

    Attributes:
        result: the :class:`~onnx_lab.numerics.diff.Diff` shown.
        left, right: the two :class:`~onnx_lab.widgets.canvas.GraphCanvas`.
        links: ``(a2b, b2a)`` from ``Diff.links()``.
    """

    def __init__(self, a: Any, b: Any, *, height: int = 520) -> None:
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        self.result: Any = None
        self.links: tuple[dict[str, list[str]], dict[str, list[str]]] = ({}, {})
        self._panels: dict[str, dict[str, str]] = {"a": {}, "b": {}}
        self._busy = False
        self._last_view: dict[str, dict] = {"a": {}, "b": {}}
        # Moves the page makes itself (centring a selection on the other side) arrive ~200 ms
        # later as view changes: they are not the user's and are not mirrored. The first
        # view change of that side within a few seconds is taken as it.
        self._quiet_until: dict[str, float] = {"a": 0.0, "b": 0.0}
        self.sync_view = w.Checkbox(value=True, description="sync pan and zoom", indent=False)
        self.counts = w.HTML()
        self.left = GraphCanvas(height=height)
        self.right = GraphCanvas(height=height)
        # Side by side where each side gets 360 px, one above the other below that: at 700 px
        # (~290 px a side) the titles had no room left and the first view cut the drawing's
        # left side to show its inputs whole.
        for c in (self.left, self.right):
            c.layout.flex = "1 1 360px"
            c.layout.min_width = "0"
        self.ops = PagedTable(page_size=15)
        self.table = PagedTable(page_size=15)
        super().__init__([self.counts, self.sync_view, w.HBox(
                              [self.left, self.right],
                              layout=w.Layout(width="100%", flex_flow="row wrap")),
                          self.ops, self.table])
        self.add_class("onnx-lab-diff-view")
        self._result_panels = [self.counts]
        self.left.on_expand = self._guard(lambda key: self._draw("a", expand=key))
        self.right.on_expand = self._guard(lambda key: self._draw("b", expand=key))
        self.left.on_select(self._guard(lambda key: self._follow("a", key)))
        self.right.on_select(self._guard(lambda key: self._follow("b", key)))
        self.left.observe(self._guard(lambda ch: self._pan("a", ch["new"])), names="view")
        self.right.observe(self._guard(lambda ch: self._pan("b", ch["new"])), names="view")
        # After the frame shows (or on the first read of dv.result, dv.links...).
        self._defer(lambda: self._call(
            self._load, a, b, busy="Matching the two models…",
            code="d = onnx_lab.diff(a, b); d.table, d.op_counts(), d.links()"),
            "Matching the two models…")

    # ------------------------------------------------------------------ content
    def _load(self, a: Any, b: Any) -> None:
        d = diff(a, b)
        self.result = d
        self.links = d.links()
        self._panels = {"a": diff_panels(d, "a", buttons=False),
                        "b": diff_panels(d, "b", buttons=False)}
        c = d.counts
        self.counts.value = (
            f"<div><b style='color:#2da44e'>{c['added']:d} added</b>, "
            f"<b style='color:#cf222e'>{c['removed']:d} removed</b>, "
            f"<b style='color:#d97706'>{c['changed']:d} changed</b>, {len(d.matches)} matched "
            "· a click selects the counterpart on the other side</div>")
        self.ops.set(d.op_counts(), caption="op types")
        view = d.table.copy()
        for col in ("attributes", "inputs", "outputs", "weights", "related"):
            view[col] = view[col].map(lambda x: ", ".join(x))
        # a removed node has no side b (an added one no side a): an empty cell, not "NaN"
        text = view.select_dtypes(include="object").columns
        view[text] = view[text].astype(object).where(view[text].notna(), "")
        self.table.set(view, caption="nodes that differ")
        self._draw("a")
        self._draw("b")

    def _draw(self, side: str, expand: str | None = None) -> None:
        d = self.result
        canvas = self.left if side == "a" else self.right
        r = d.render(side, collapse="auto", expand=expand, dims=(d.a if side == "a" else d.b)
                     .dims, shapes=(d.a if side == "a" else d.b).shapes)
        label = "A" if side == "a" else "B"
        canvas.show(r, model=d.a if side == "a" else d.b,
                    title=f"{label}: d.render({side!r}, collapse='auto'"
                          + (f", expand={expand!r})" if expand else ")"))
        self._last_view[side] = {}
        self.code.value = code_html(f"d = onnx_lab.diff(a, b); d.render({side!r}, "
                                    f"collapse='auto'{', expand=' + repr(expand) if expand else ''})")

    # ------------------------------------------------------------------ linking
    def select(self, side: str, node_id: str) -> list[str]:
        """Select ``node_id`` on side ``"a"`` or ``"b"`` (as a click does); returns the
        counterparts outlined on the other side."""
        canvas = self.left if side == "a" else self.right
        canvas.focus(node_id)
        return list(self.links[0 if side == "a" else 1].get(node_id, []))

    def _follow(self, side: str, key: str) -> None:
        src = self.left if side == "a" else self.right
        dst = self.right if side == "a" else self.left
        extra = self._panels[side].get(key, "")
        if extra:
            src.details_html = src.details_html + extra
        if self._busy:
            return
        peers = self.links[0 if side == "a" else 1].get(key, [])
        other = "b" if side == "a" else "a"
        self._busy = True
        try:
            keys = [k for k in (dst.key_for(p) for p in peers) if k]
            if keys:
                self._quiet_until[other] = time.monotonic() + 4.0
                dst.focus(peers[0])
                dst.highlight = list(dict.fromkeys(keys))
            else:
                dst.highlight = []
                if peers:
                    self.status.value = info_html(
                        f"{len(peers)} counterpart(s) of {key!r} are outside the other view.",
                        kind="info")
        finally:
            self._busy = False

    def _pan(self, side: str, view: dict) -> None:
        """Move the other canvas by the screen transform this one just made."""
        prev, self._last_view[side] = self._last_view[side], dict(view or {})
        if "by" in (view or {}):  # the page says whose move it was: mirror the user's only
            self._quiet_until[side] = 0.0
            if view["by"] != "user":
                return
        elif time.monotonic() < self._quiet_until[side]:
            self._quiet_until[side] = 0.0  # the page's centring: taken, not mirrored
            return
        if self._busy or not self.sync_view.value or not prev.get("k") or not view.get("k"):
            return
        other = "b" if side == "a" else "a"
        dst = self.right if side == "a" else self.left
        dv = dict(dst.view or {})
        if not dv.get("k"):
            return
        s = float(view["k"]) / float(prev["k"])
        tx = float(view["x"]) - s * float(prev["x"])
        ty = float(view["y"]) - s * float(prev["y"])
        dv.update(k=dv["k"] * s, x=s * dv["x"] + tx, y=s * dv["y"] + ty)
        self._busy = True
        try:
            self._last_view[other] = dv
            dst.view = dv
        finally:
            self._busy = False
