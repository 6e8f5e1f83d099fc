"""GraphCanvas: the one interactive graph view of every widget (anywidget, JS in the package).

graphviz lays the graph out (``lab.render(...)``); the canvas shows that SVG with fit-to-view
on open, zoom (wheel, +/- buttons and keys), pan (drag), a minimap when the graph is larger
than the view, and a search box that centres and highlights an element by node id, name, op
type or tensor name. A click selects an element and shows its details in a side panel
(``onnx_lab.render.details.node_details``); a click on a collapsed box asks the owner to
expand it; a double click (or the panel's *open* buttons) opens an If/Loop/Scan body.

Everything the JavaScript does is state Python can read and set::

    canvas.selected           # drawn key of the selected element ('' when none)
    canvas.focus("node_id")   # centre, select and highlight (a tensor name: its producer)
    canvas.view               # {'x', 'y', 'k'} pan/zoom after the last change in the page
    canvas.fit(); canvas.zoom(2.0)

The JavaScript (``static/canvas.js``, a plain ES module) ships inside the package: no CDN,
no build step, and a saved notebook carries it in the widget state, so it works offline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

from onnx_lab.core.source_map import scope_key
from onnx_lab.render._html import esc_text
from onnx_lab.render.collapse import node_levels, scope_parts
from onnx_lab.render.details import (
    box_module,
    canvas_items,
    canvas_legend_html,
    drawn_key,
    group_details_html,
    node_details,
    node_details_html,
    placement,
    search_index,
    weight_values,
    weight_values_html,
)

__all__ = ["GraphCanvas"]

_STATIC = Path(__file__).with_name("static")


class GraphCanvas(anywidget.AnyWidget):
    """An interactive graphviz SVG: fit, zoom, pan, minimap, search, click for details.

    Args:
        model: the Lab (or LabModel) the renderings are of (for search and details).
        height: height of the view in px.

    Attributes (traitlets, synced with the page):
        svg: the SVG shown.
        selected: drawn key of the selected element (a node id for an op).
        highlight: drawn keys outlined as hits.
        view: ``{"x", "y", "k"}`` pan and zoom (setting it moves the view).
        details_html: the side panel's HTML for ``selected``.
        float_details: False: no details panel over the drawing (the Editor's form is it).
        legend_html: aliases of long symbolic dims and the view's notes.

    Example:
        >>> c = GraphCanvas(lab)
        >>> c.show(lab.render(collapse="auto"))
        >>> c.focus("/stem/conv/Conv"); c.selected
        '/stem/conv/Conv'
    """

    # markup.js (the one door of markup into the page) and scene.js (a large drawing's
    # spatial index and canvas layer) go first: canvas.js calls setMarkup and sceneOf
    _esm = "\n".join((_STATIC / f).read_text(encoding="utf-8")
                     for f in ("markup.js", "scene.js", "canvas.js"))
    _css = _STATIC / "canvas.css"

    svg = t.Unicode("").tag(sync=True)
    fallback = t.Unicode("").tag(sync=True)
    items = t.Dict().tag(sync=True)
    selected = t.Unicode("").tag(sync=True)
    highlight = t.List(t.Unicode()).tag(sync=True)
    view = t.Dict().tag(sync=True)
    keep_view = t.Bool(False).tag(sync=True)
    details_html = t.Unicode("").tag(sync=True)
    #: whether a selection's details float over the drawing (False: the owner shows them
    #: itself, as the Editor's form does; errors still show). Never sent to the page.
    float_details = t.Bool(True)
    legend_html = t.Unicode("").tag(sync=True)
    title = t.Unicode("").tag(sync=True)
    height = t.Int(560).tag(sync=True)
    #: where the view opens: "readable" (labels at a readable size from the graph's inputs,
    #: the top of the layout), "fit" (the whole drawing), or a node id / drawn key to open on.
    first_view = t.Unicode("readable").tag(sync=True)
    #: every node of the model, searched in the page (:func:`~onnx_lab.render.details.search_index`)
    index = t.Dict().tag(sync=True)
    #: where each node of ``index`` is drawn in this view (:func:`~onnx_lab.render.details.placement`)
    placement = t.Dict().tag(sync=True)
    #: what the view waits on, shown in its bar ("laying out /h.3: not drawn ahead yet…")
    busy = t.Unicode("").tag(sync=True)
    #: {an SVG id's key: the element's key} for the keys not drawn as they are (a control
    #: character as its picture, a long name cut: :func:`~onnx_lab.render._html.dot_safe`):
    #: the page looks every key up, and sends every key, as the element's own
    drawn = t.Dict().tag(sync=True)
    _focus = t.Dict().tag(sync=True)
    # Counts the drawings sent (``svg``); a focus names the drawing it was meant for, so the
    # page applies it once that drawing is there and never again on a later one.
    _drawing = t.Int(0).tag(sync=True)
    _fit = t.Int(0).tag(sync=True)

    def __init__(self, model: Any = None, *, height: int = 560, **kwargs: Any) -> None:
        super().__init__(height=height, **kwargs)
        self.model_source = model
        self.rendering: Any = None
        self.overlay: Any = None
        self.overlay_label: str | None = None
        self.on_expand: Callable[[str], None] | None = None
        self.on_open: Callable[[str], None] | None = None
        #: called with the scopes of the boxes the search's first hits lie in, as the user
        #: types: the owner lays their expands out first
        self.on_want: Callable[[list[str]], None] | None = None
        self._revealing = ""  # the node a reveal is opening the path to
        self._select_callbacks: list[Callable[[str], None]] = []
        self._index_of: Any = None  # the LabModel ``index`` was built for
        self._index_cache: tuple[Any, dict[str, list[Any]]] = (None, {})
        self.error: BaseException | None = None
        self.add_class("onnx-lab-canvas")
        self.layout.display = "none"  # hidden until show() gives it a graph
        self.on_msg(self._on_msg)
        self.observe(self._on_selected, names="selected")

    # ------------------------------------------------------------------ content
    def show(self, rendering: Any, *, model: Any = None, overlay: Any = None,
             overlay_label: str | None = None, title: str | None = None,
             keep_selection: bool = True) -> None:
        """Show a :class:`~onnx_lab.render.Rendering` (fit to view); ``None`` clears.

        ``overlay`` (the Series drawn on the graph) is reported in the details panel.
        """
        if model is not None:
            self.model_source = model
        self.rendering = rendering
        self.overlay, self.overlay_label = overlay, overlay_label
        if rendering is None:
            self._drawing += 1
            self.items, self.svg, self.fallback, self.legend_html = {}, "", "", ""
            self.drawn = {}
            self.selected, self.details_html = "", ""
            self.layout.display = "none"  # an empty box says nothing: hide it until shown
            return
        self.layout.display = None
        keep = self.selected if keep_selection and (
            self.selected in rendering.view.nodes
            or (self.selected and self.selected == self._revealing)) else ""
        m = self._model()
        with self.hold_sync():
            if m is not None and self._index_of is not m:
                self.index, self._index_of = self._search_index(m), m
            self.items, self.placement = self.prepare(rendering) if m else ({}, {})
            self.legend_html = canvas_legend_html(rendering)
            self.title = title or ""
            self.highlight = []
            self.fallback = "" if rendering.svg else "no SVG: " + "; ".join(rendering.notes[-1:])
            self._drawing += 1
            self.drawn = rendering.drawn
            self.svg = rendering.svg or ""
            if self.selected != keep:
                self.selected = keep
            else:
                self._refresh_details()

    def prepare(self, rendering: Any) -> tuple[dict[str, str], dict[str, list[Any]]]:
        """The search text of ``rendering``'s drawn elements and where the model's nodes are
        in it (``items``, ``placement``), computed once per rendering and model: an owner
        drawing views ahead in a thread calls it there, so showing one is a swap."""
        m = self._model()
        cached = getattr(rendering, "_canvas_data", None)
        if cached is not None and cached[0] is m:
            return cached[1], cached[2]
        # (a box's members are in the index the page searches: not sent again with each view)
        items = canvas_items(rendering, m, members=False)
        where = placement(rendering, m, self._search_index(m)["ids"])
        rendering._canvas_data = (m, items, where)
        return items, where

    def _search_index(self, m: Any) -> dict[str, list[Any]]:
        """The search index of model ``m``, built once (also from a thread: not synced here)."""
        if self._index_cache[0] is not m:
            self._index_cache = (m, search_index(m))
        return self._index_cache[1]

    def _model(self) -> Any:
        m = self.model_source
        if m is not None and not hasattr(m, "types") and hasattr(m, "model"):
            m = m.model
        return m

    # ------------------------------------------------------------------ view state
    def key_for(self, name: str) -> str | None:
        """The drawn element showing ``name`` (node id, tensor name or drawn key), or None."""
        return drawn_key(self.rendering, self._model(), name) if self.rendering else None

    def focus(self, name: str) -> str | None:
        """Centre, select and highlight ``name`` (node id, tensor name or drawn key).

        A node inside a collapsed box focuses the box. Returns the drawn key, or None when
        ``name`` is not in the current view (nothing changes then).
        """
        key = self.key_for(name)
        if key is None:
            return None
        self.selected = key
        self._send_focus(key)
        return key

    def centre(self, key: str) -> None:
        """Centre drawn element ``key`` at a readable size without selecting it (what the
        view does after an expand, to keep the opened box in view)."""
        self._send_focus(key, select=False)

    def _send_focus(self, key: str, **extra: Any) -> None:
        # a new request (seq) for the drawing now shown (the page waits for it if it is late)
        self._focus = {"key": key, "seq": int(self._focus.get("seq", 0)) + 1,
                       "drawing": self._drawing, **extra}

    def reveal(self, name: str) -> str | None:
        """Like :meth:`focus`, but a node hidden in a collapsed box or an If/Loop/Scan body is
        first drawn: the owner opens the box (``on_expand``) or the body (``on_open``), at
        most a few levels, then the node is centred at a readable size and selected. What
        choosing a search hit inside a box does in the page. Returns the drawn key (the
        node itself when it could be opened), or None when it is not in the model's view."""
        m = self._model()
        e = m.index.entries.get(name) if m is not None else None
        if e is not None and self.rendering is not None and self.key_for(name) != name:
            # Its details show at once (sent now, before any layout), the view follows.
            self._revealing = name
            self.selected = name
        prev: object = ()  # the key of the last round: no progress ends the walk
        try:
            for _ in range(4):
                key = self.key_for(name)
                if key == name or key == prev or e is None or self.rendering is None:
                    break
                prev = key
                if e.graph != self.rendering.view.graph and self.on_open is not None and (
                        key is None or not key.startswith("scope:")):
                    self.on_open(e.graph)
                elif key is not None and key.startswith("scope:") and self.on_expand is not None:
                    self.on_expand(key.split(":", 1)[1])
                elif key is None and self.on_expand is not None and (
                        scope := self._scope_to_open(name)):
                    # not drawn at all (a view cut at max_nodes: the 300 first of a 480-layer
                    # decoder's layer boxes): open the node's own scope at the level of the
                    # boxes drawn beside it, as its module breadcrumb does
                    self.on_expand(scope)
                else:
                    break
        finally:
            self._revealing = ""
            self.clear_busy()
        return self.focus(name)

    def _scope_to_open(self, name: str) -> str | None:
        """The scope of node ``name`` to draw open when no element of the view shows it: its
        prefix at the depth of the deepest box drawn among its siblings (a layer, when the
        view holds layer boxes), else its whole scope."""
        m = self._model()
        e = m.index.entries.get(name) if m is not None else None
        if e is None or self.rendering is None:
            return None
        parts = node_levels(m, name)
        if not parts:
            return None
        best = 0
        for k in self.rendering.view.nodes:
            if k.startswith("scope:"):
                kp = scope_parts(k.split(":", 1)[1])
                if 1 <= len(kp) <= len(parts) and kp[:-1] == parts[:len(kp) - 1]:
                    best = max(best, len(kp))
        return scope_key(parts[:best or len(parts)])

    def clear_busy(self) -> None:
        """Empty the bar's busy line, also the page's own "opening …" (sent even when
        ``busy`` is already empty on this side: it stayed when nothing could be opened, as
        in the Editor, which draws the main graph only)."""
        self.busy = ""
        self.send_state("busy")
        # the page's own "opening …" is not in the synced state: an update of busy to the ""
        # it already holds fires no change there, and the line stayed for good when the
        # reveal drew nothing new
        self.send({"type": "busy"})

    def fit(self) -> None:
        """Fit the whole drawing into the view (as on open)."""
        self._fit += 1

    def zoom(self, factor: float) -> None:
        """Zoom about the centre of the view by ``factor`` (>1 zooms in)."""
        v = dict(self.view or {})
        k = float(v.get("k", 1.0))
        w, h = float(v.get("width", 800)), float(v.get("height", self.height))
        nk = min(8.0, max(0.02, k * factor))
        f = nk / k
        x, y = float(v.get("x", 0.0)), float(v.get("y", 0.0))
        v.update(k=nk, x=w / 2 - (w / 2 - x) * f, y=h / 2 - (h / 2 - y) * f)
        self.view = v

    def search(self, text: str) -> list[str]:
        """Drawn keys whose search text contains ``text`` (a box: when one of its members
        matches), exact key matches first. :meth:`find` searches every node of the model."""
        q = text.strip().lower()
        if not q:
            return []
        m = self._model()
        items = canvas_items(self.rendering, m) if m is not None and self.rendering else self.items
        exact = [k for k in items if k.lower() == q]
        return exact + [k for k, s in items.items() if q in s and k not in exact]

    def find(self, text: str) -> list[str]:
        """Node ids of the whole model whose index text contains ``text`` (what the page's
        search box lists, in its order: an exact id first, then the nodes whose op type or
        name is the text, then the nodes drawn as themselves, then those inside boxes or
        bodies; :meth:`reveal` goes to one)."""
        q = text.strip().lower()
        ix, pl = self.index or {}, self.placement or {}
        if not q or not ix:
            return []
        keys, at, opened = pl.get("keys", []), pl.get("at", []), pl.get("open", [])
        labels = ix.get("label", [])
        exact, named, shown, hidden = [], [], [], []
        for i, (nid, words) in enumerate(zip(ix["ids"], ix["text"])):
            if q not in words:
                continue
            op, _, name = (labels[i] if i < len(labels) else "").partition("  ")
            drawn = i < len(at) and at[i] >= 0 and opened[i] and keys[at[i]] == nid
            (exact if nid.lower() == q else named if q in (op.lower(), name.lower())
             else shown if drawn else hidden).append(nid)
        return exact + named + shown + hidden

    def click(self, key: str) -> None:
        """Do what a click on element ``key`` does in the page: select it; a collapsed box
        is expanded (``on_expand``)."""
        self.selected = key
        if key.startswith("scope:") and self.on_expand is not None:
            self.on_expand(key.split(":", 1)[1])

    def show_module(self, scope: str) -> str | None:
        """What a click on a module breadcrumb of the panel does: focus the module's
        collapsed box when it is drawn, else ask the owner to draw it open (``on_expand``).
        Returns the focused key, or None."""
        key = f"scope:{scope}"
        if self.rendering is not None and key in self.rendering.view.nodes:
            return self.focus(key)
        if self.on_expand is not None:
            self.on_expand(scope)
        return None

    def on_select(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(drawn_key)`` whenever the selection changes."""
        self._select_callbacks.append(callback)

    # ------------------------------------------------------------------ events
    def _drawn(self, key: str) -> str:
        """The drawn key a key from the page stands for: the page reads keys back from the
        SVG, where a control character of a name shows as its picture (``␀``: graphviz
        cannot hold a NUL)."""
        if self.rendering is None or not key or key in self.rendering.view.nodes:
            return key
        return self.rendering.drawn.get(key, key)

    def _on_msg(self, _widget: Any, content: dict, _buffers: Any) -> None:
        kind = content.get("type")
        if isinstance(content.get("key"), str):
            content = {**content, "key": self._drawn(content["key"])}
        try:
            if kind == "expand":
                self.click(str(content.get("key", "")))
            elif kind == "open":
                self._open_key(str(content.get("key", "")))
            elif kind == "open_body":
                if self.on_open is not None:
                    self.on_open(str(content.get("graph", "")))
            elif kind == "focus":
                self.focus(str(content.get("key", "")))
            elif kind == "reveal":
                self.reveal(str(content.get("key", "")))
            elif kind == "module":
                self.show_module(str(content.get("key", "")))
            elif kind == "want":
                if self.on_want is not None:
                    self.on_want([str(k).split(":", 1)[1] for k in content.get("keys", [])
                                  if str(k).startswith("scope:")])
        except Exception as e:  # noqa: BLE001 - shown in the panel, never in the kernel log
            self.error = e
            self.details_html = _error_panel(e)

    def _open_key(self, key: str) -> None:
        if key.startswith("scope:"):
            self.click(key)
            return
        m = self._model()
        if m is None or self.on_open is None or key not in m.index.entries:
            return

        # an If's then_branch first (its attributes may list else_branch first)
        bodies = sorted(node_details(m, key)["bodies"],
                        key=lambda b: not b.endswith("/then_branch"))
        if bodies:
            self.on_open(bodies[0])

    def _on_selected(self, change: dict) -> None:
        real = self._drawn(change["new"])
        if real != change["new"]:
            self.selected = real  # observed again, with the drawn key
            return
        self._refresh_details()
        for cb in list(self._select_callbacks):
            try:
                cb(change["new"])
            except Exception as e:  # noqa: BLE001 - a listener must not break the canvas
                self.error = e

    def _refresh_details(self) -> None:
        """The side panel for ``selected``: node details, a box's members, or a tensor."""
        key = self.selected
        m = self._model()
        if not key or self.rendering is None or m is None or not self.float_details:
            # (not float_details: no panel was ever sent, so the page never moved the view
            # away from one; the Editor's canvas beside its form put a node a quarter in)
            self.details_html = ""
            return

        self.error = None
        try:
            node = self.rendering.view.nodes.get(key)
            if key in m.index.entries:
                d = node_details(m, key, dims=getattr(self.model_source, "dims", None),
                                 shapes=getattr(self.model_source, "shapes", None),
                                 overlay=self.overlay, overlay_label=self.overlay_label)
                self.details_html = node_details_html(d)
            elif node is not None and node.kind == "box":
                ops = [m.index.entries[n].node.op_type for n in node.node_ids
                       if n in m.index.entries]
                scope = key.split(":", 1)[1]
                self.details_html = group_details_html(scope, node.node_ids, ops,
                                                       box_module(m, scope, node.node_ids))
            elif node is not None:
                lines = "".join(f"<div class='olc-where'>{esc_text(x)}</div>"
                                for x in node.lines if x)
                if node.kind == "weight":
                    lines += weight_values_html(weight_values(m, key.split(":", 1)[1]))
                self.details_html = (f"<div class='olc-details'><div class='olc-title'><b>"
                                     f"{esc_text(node.title)}</b></div><div class='olc-id'>"
                                     f"{esc_text(node.kind)}</div>{lines}</div>")
            else:
                self.details_html = ""
        except Exception as e:  # noqa: BLE001 - shown in the panel
            self.error = e
            self.details_html = _error_panel(e)


def _error_panel(e: BaseException) -> str:
    # on use: _common loads ipywidgets, the canvas anywidget only
    from onnx_lab.widgets._common import error_html

    return error_html(e)
