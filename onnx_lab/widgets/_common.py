"""Shared pieces of the widgets: error boxes, the call guard, paged selectable tables, figures.

Widgets are views (STYLE.md rule 1): every callback calls one public function through
:meth:`View._call`, which catches :class:`~onnx_lab.errors.LabError` and shows it inside the
widget instead of raising into the kernel log, and records the one-line Python equivalent.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anywidget
import ipywidgets as w
import traitlets as t

from onnx_lab._display import NO_MATH
from onnx_lab._pandas import pd
from onnx_lab.errors import DimError, LabError
from onnx_lab.render._html import Markup, clean_html, clean_svg, esc_attr, esc_text, safe_url
from onnx_lab.render.tables import frame_html
from onnx_lab.widgets._context import missing_dims

log = logging.getLogger(__name__)

_STATIC = Path(__file__).with_name("static")

__all__ = ["View", "SelectableTable", "PagedTable", "lazy_tabs", "error_html", "info_html", "code_html",
           "figure_html", "rendering_html", "badge", "badge_html", "short"]

# overflow-wrap: a model's names have no spaces to break at (a 3,000-character node name in
# a verdict ran 20,000 px past the widget's edge, cut there, unreadable)
_BOX = ("padding:6px 10px;border-radius:4px;margin:4px 0;font-size:13px;"
        "font-family:var(--jp-ui-font-family, sans-serif);overflow-wrap:anywhere")
_WRAP = "overflow-wrap:anywhere"


def error_html(exc: BaseException) -> str:
    """An HTML error box for ``exc`` (LabErrors show problem and fix; others their type)."""
    if isinstance(exc, LabError):
        title = type(exc).__name__
        body = esc_text(exc.problem)
        fix = f"<div><b>Fix:</b> {esc_text(exc.fix)}</div>" if exc.fix else ""
    else:
        title = f"Unexpected {type(exc).__name__} (please report it)"
        body = esc_text(str(exc))
        fix = ""
    return (f"<div class='onnx-lab-error' style='{_BOX};background:#fdecea;"
            f"border:1px solid #f5c2c0;color:#611a15'><b>{esc_text(title)}</b>: "
            f"{body}{fix}</div>")


def info_html(text: str, *, kind: str = "info") -> str:
    """A small status line (``kind``: info, ok, busy, warn); ``text`` is escaped."""
    colours = {"info": ("#eef4fb", "#1a3e6e"), "ok": ("#e8f5e9", "#1b5e20"),
               "busy": ("#fff8e1", "#6d4c00"), "warn": ("#fff3e0", "#8a4b00")}
    bg, fg = colours.get(kind, colours["info"])
    return (f"<div class='onnx-lab-{esc_attr(kind)}' style='{_BOX};background:{esc_attr(bg)};"
            f"color:{esc_attr(fg)}'>"
            f"{esc_text(text)}</div>")


def code_html(code: str) -> str:
    """The equivalent Python call, shown under a widget so every click is reproducible."""
    if not code:
        return ""
    return (f"<div style='font-size:12px;color:#555;{_WRAP}'>Python: <code "
            "class='onnx-lab-code' style='background:#f6f8fa;padding:2px 4px'>"
            + esc_text(code) + "</code></div>")


def badge_html(passed: bool | None) -> str:
    """A pass/fail/unknown badge for verification results."""
    if passed is None:
        txt, bg = "not verified", "#9e9e9e"
    elif passed:
        txt, bg = "passed", "#2e7d32"
    else:
        txt, bg = "FAILED", "#c62828"
    return (f"<span class='onnx-lab-badge' style='background:{esc_attr(bg)};color:white;"
            f"padding:1px 6px;border-radius:8px;font-size:11px'>{txt}</span>")


badge = badge_html  # the older name


_CHANGED = Markup("<span class='onnx-lab-badge onnx-lab-changed' style='background:#1565c0;"
                  "color:white;padding:1px 6px;border-radius:8px;font-size:11px'>changed "
                  "(expected)</span>")


def history_html(history: pd.DataFrame) -> str:
    """The history table (FusionLab, Editor): one row per step with its verdict — a
    verification badge, or "changed (expected)" for an edit whose outputs were meant to
    change (``outputs_changed``) — and the current step marked."""
    head = ("<tr><th>step</th><th>pass</th><th>params</th><th>modified</th><th>nodes</th>"
            "<th>verification</th><th>max_abs_err</th><th>seconds</th></tr>")
    rows = []
    for r in history.to_dict("records"):
        err = r.get("max_abs_err")
        err_txt = "" if err is None or pd.isna(err) else f"{err:.3g}"
        verified = r.get("verify_passed")
        if verified is not None and pd.isna(verified):
            verified = None
        if r["step"] == 0:
            ver = ""
        elif r.get("outputs_changed") is True:
            ver = _CHANGED
        else:
            ver = badge_html(None if verified is None else bool(verified))
        current = bool(r.get("current", False))
        style = " style='background:#e3f2fd;font-weight:bold'" if current else ""
        rows.append(
            f"<tr class='onnx-lab-history-row' data-step='{int(r['step'])}'{style}>"
            # the marker beside the step number: in a last column it was off screen at first
            # in a 1280 px JupyterLab (and 285 px out in a narrow pane)
            f"<td style='white-space:nowrap'>{int(r['step'])}"
            f"{' ◀ current' if current else ''}</td><td>{esc_text(str(r['pass']))}</td>"
            f"<td>{short(r['params'] or '', 40)}</td><td>{'yes' if r['modified'] else 'no'}</td>"
            f"<td class='onnx-lab-nodes' data-before='{int(r['nodes_before'])}' "
            f"data-after='{int(r['nodes_after'])}'>{int(r['nodes_before'])} → "
            f"{int(r['nodes_after'])}</td>"
            f"<td>{ver}</td><td>{err_txt}</td><td>{float(r['seconds']):.2f}</td></tr>")
    return ("<table class='onnx-lab-history onnx-lab-table' style='font-size:12px'>"
            + head + "".join(rows) + "</table>")


#: Table columns whose long values are cut in the middle (the end tells rows apart).
_MIDDLE_CUT = frozenset({"node_id", "name", "scope"})


def short(value: Any, limit: int = 48) -> str:
    """A compact, escaped text for a table cell (lists joined, long text cut)."""
    if isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value)
    elif value is None:
        text = ""
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return esc_text(text)


def figure_html(fig: Any, *, width: int | None = None) -> str:
    """A matplotlib Figure as an inline PNG ``<img>`` (works in any frontend, no JS)."""
    if fig is None:
        return ""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    style = f" style='max-width:{int(width):d}px'" if width else " style='max-width:100%'"
    return f"<img class='onnx-lab-figure' src='{safe_url('data:image/png;base64,' + data)}'{style}/>"


def rendering_html(rendering: Any) -> str:
    """HTML of a :class:`~onnx_lab.render.Rendering` (its SVG or fallback, with its notes)."""
    if rendering is None:
        return ""
    body = rendering._repr_html_() if hasattr(rendering, "_repr_html_") else esc_text(
        str(rendering))
    return "<div class='onnx-lab-graph' style='overflow:auto;max-height:720px'>" + body + "</div>"


class _Live(anywidget.AnyWidget):
    """A one-line note under every widget, hidden while a kernel answers its ping.

    In the page it pings the kernel on render; the kernel answers (and the widget runs the
    work it deferred until it was on screen, :meth:`View._defer`). Restored from a notebook's
    saved widget state after a kernel restart, nothing answers, so it says that this is the
    last view saved and to re-run the cell.
    """

    _esm = _STATIC / "live.js"
    _css = _STATIC / "frame.css"  # the frames' shared rules (narrow panes)
    note = t.Unicode("").tag(sync=True)
    wait_ms = t.Int(4000).tag(sync=True)

    def __init__(self, owner: str, on_ready: Callable[[], None]) -> None:
        super().__init__(note=f"{owner}: the last view saved with this notebook, not live (the "
                              "kernel that drew it is gone): re-run the cell for the live widget.")
        self._on_ready = on_ready
        self.on_msg(self._message)

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("ping"):
            _PINGED[:] = [True]
            self.send({"pong": 1})
            self._on_ready()


_OWN_VIEW = frozenset({"ready", "snapshot_html"})
_NAMES: dict[type, frozenset[str]] = {}
_WAITING: list[Any] = []  # weak references to Views with deferred work


def _class_names(cls: type) -> frozenset[str]:
    """Names the classes between ``cls`` and :class:`View` define (cached per class)."""
    names = _NAMES.get(cls)
    if names is None:
        found: set[str] = set()
        for c in cls.__mro__:
            if c is View:
                break
            found.update(vars(c))
        names = _NAMES[cls] = frozenset(found)
    return names


_PINGED: list[bool] = []  # a widget's page has pinged this kernel


def _live_frontend() -> bool:
    """Whether a page that renders widgets live runs this code's cell."""
    if _PINGED:
        return True
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ipywidgets depends on IPython
        return False
    kernel = getattr(get_ipython(), "kernel", None)
    try:
        parent = kernel.get_parent() if kernel is not None else None
    except (AttributeError, TypeError):
        return False
    meta = (parent or {}).get("metadata") or {}
    return isinstance(meta, dict) and bool(meta.get("cellId"))


def _after_cell(view: View) -> None:
    """Run ``view``'s deferred work once the running cell has finished (IPython only)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - ipywidgets depends on IPython
        return
    ip = get_ipython()
    if ip is None:
        return
    _WAITING.append(weakref.ref(view))
    if len(_WAITING) == 1:
        ip.events.register("post_run_cell", _run_waiting)


# Set while no cell runs: background work of a widget (the Explorer's layouts drawn ahead)
# waits for it, so the notebook's own cells do not share the kernel with it.
_CELL_IDLE = threading.Event()
_CELL_IDLE.set()
_idle_hooks: list[bool] = []


def wait_for_idle_kernel(timeout: float | None = None) -> bool:
    """Block until no cell is running in this IPython kernel (at once outside IPython)."""
    if not _idle_hooks:
        _idle_hooks.append(True)
        try:
            from IPython import get_ipython

            ip = get_ipython()
        except ImportError:  # pragma: no cover - ipywidgets depends on IPython
            ip = None
        if ip is not None:
            ip.events.register("pre_run_cell", lambda *_a: _CELL_IDLE.clear())
            ip.events.register("post_run_cell", lambda *_a: _CELL_IDLE.set())
    return _CELL_IDLE.wait(timeout)


def _run_waiting(*_args: Any) -> None:
    from IPython import get_ipython

    ip = get_ipython()
    if ip is not None:
        with contextlib.suppress(ValueError):
            ip.events.unregister("post_run_cell", _run_waiting)
    refs = list(_WAITING)
    _WAITING.clear()
    for ref in refs:
        view = ref()
        if view is not None:
            view._run_pending()


class View(w.VBox):
    """Base of every onnx_lab widget: a VBox with a status line, a code line and a guard.

    Attributes:
        error: the last exception a callback caught (None after a successful call).
    """

    def __init__(self, children: Sequence[w.Widget] = (), **kwargs: Any) -> None:
        self.status = w.HTML(value="", layout=w.Layout(width="100%"))
        self.code = w.HTML(value="")
        self.error: BaseException | None = None
        self._pending: list[tuple[Callable[[], Any], str]] = []
        self._live = _Live(type(self).__name__, self._run_pending)
        # Status first: in a long widget the result of a click must be seen without scrolling.
        kwargs.setdefault("layout", w.Layout(max_width="100%", overflow="auto"))
        super().__init__(children=[self._live, self.status, *children, self.code], **kwargs)
        self.add_class("onnx-lab-widget")

    # ------------------------------------------------------------------ deferred work
    def _defer(self, fn: Callable[[], Any], busy: str) -> None:
        """Run ``fn`` after the cell that made the widget has shown it, so its frame and
        ``busy`` (the progress line) appear at once.

        Only where a page shows the widget live (a ping from an onnx_lab widget came, or the
        cell was run from JupyterLab/Notebook, whose requests name the cell); elsewhere ``fn``
        runs at once. It runs, whichever comes first: when the cell has finished (IPython's
        ``post_run_cell``: the widget's display is already on its way to the page), when the
        page pings the kernel, when :meth:`ready` is called, or when Python reads anything
        the widget's own class defines (``dv.result``, ``f.matches``...): the Python API
        reads as if ``fn`` had run in ``__init__``.
        """
        if not _live_frontend():
            # A script, a test, nbclient: nobody waits for a frame, and the display-time
            # snapshot (text/html) should show the result.
            line = info_html(busy, kind="busy")
            self.__dict__["status"].value = line
            self._guard(fn)()
            if self.error is None and self.__dict__["status"].value == line:
                self.__dict__["status"].value = ""
            return
        self._pending.append((fn, busy))
        status = self.__dict__["status"]  # (reading self.status would run the work now)
        if not status.value:
            status.value = info_html(busy, kind="busy")
        _after_cell(self)

    def _fill_lazily(self, box: w.Box, build: Callable[[], Any], text: str) -> Any:
        """Build a tab's content on its first opening: ``box`` shows ``text`` as a progress
        line while ``build`` runs (the page gets the line before the work starts)."""
        box.children = [w.HTML(info_html(text, kind="busy"))]
        return build()

    def ready(self) -> View:
        """Run the work deferred until the widget is shown (a no-op once done); returns self."""
        self._run_pending()
        return self

    def _run_pending(self) -> None:
        d = self.__dict__
        pending = d.get("_pending")
        if not pending or d.get("_running"):
            return
        d["_running"] = True
        try:
            while pending:
                fn, busy = pending.pop(0)
                line = info_html(busy, kind="busy")
                self.status.value = line
                self._guard(fn)()
                if self.error is None and self.status.value == line:
                    self.status.value = ""
        finally:
            d["_running"] = False

    def __getattribute__(self, name: str) -> Any:
        # Deferred work runs before the first read of anything the subclass defines (an
        # attribute its __init__ set, a method, a property); ipywidgets' own attributes and
        # traits (what displaying and syncing read) do not trigger it.
        if name[0] != "_":
            d = object.__getattribute__(self, "__dict__")
            if d.get("_pending") and not d.get("_running") and name not in _OWN_VIEW and (
                    name in d or name in _class_names(type(self))):
                object.__getattribute__(self, "_run_pending")()
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # An attribute the deferred work creates (not there yet): run it, then read again.
        d = self.__dict__
        if name[0] != "_" and d.get("_pending") and not d.get("_running"):
            self._run_pending()
            return object.__getattribute__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ snapshot
    def snapshot_html(self) -> str:
        """The widget's current view as static HTML (its tables, SVG and figures).

        What a notebook shows without a kernel: :meth:`_repr_mimebundle_` puts it next to the
        widget view as ``text/html`` (frontends with no widget manager, untrusted notebooks,
        nbconvert); JupyterLab with *Save Widget State Automatically* (``make lab`` turns it
        on) restores the widget itself from the notebook's widget state.
        """
        # The widgets' HTML values are built with the escaping helpers; the snapshot runs
        # where no CSP applies, so it is cleaned once more as a whole.
        parts = clean_html("".join(snapshot_of_html(c) for c in self.children))
        name = esc_text(type(self).__name__)
        # (mathjax_ignore: nbconvert's page and JupyterLab typeset $...$ in HTML outputs; a
        # model's names are text, see _display.NO_MATH)
        return (f"<div class='onnx-lab-snapshot {NO_MATH}' "
                "style='max-width:100%;overflow:auto'>"
                f"<div style='font-size:11px;color:#777'>{name}: static snapshot (re-run the "
                f"cell for the live widget)</div>{parts}</div>")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        try:
            bundle["text/html"] = self.snapshot_html()
        except Exception:  # noqa: BLE001 - a snapshot must never stop the widget showing
            log.exception("snapshot of %s failed", type(self).__name__)
        return bundle

    def _clear_results(self) -> None:
        """Blank the panels that show the last result (an error replaces the last result).

        Subclasses list those panels in ``_result_panels``.
        """
        for panel in getattr(self, "_result_panels", ()):
            if isinstance(panel, w.HTML):
                panel.value = ""
            elif hasattr(panel, "show"):  # a GraphCanvas
                panel.show(None)
            elif hasattr(panel, "set"):  # PagedTable
                panel.set(pd.DataFrame(), caption="")

    def _call(self, fn: Callable[..., Any], *args: Any, code: str | None = None,
              busy: str | None = None, **kwargs: Any) -> Any:
        """Run one public function; on error show it in the widget and return None.

        LabErrors are the expected, user-facing failures. Anything else is a bug, but a
        callback that raises only reaches the kernel log where nobody looks, so it is shown
        in the widget too (and logged with its traceback).
        """
        self.status.value = info_html(busy, kind="busy") if busy else ""
        self.error = None
        try:
            out = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - shown in the widget, see docstring
            self._show_error(e)
            return None
        if busy and self.error is None:
            self.status.value = ""
        if code is not None:
            self.code.value = code_html(code)
        return out

    def _show_error(self, e: Exception) -> None:
        if not isinstance(e, LabError):
            log.error("widget callback failed", exc_info=e)
        self.error = e
        self.status.value = error_html(e)
        self._clear_results()
        # A missing dim inside a widget with a run-context bar: point at the bar's field
        # instead of asking the user to copy code.
        context = getattr(self, "context", None)

        if context is not None and isinstance(e, DimError):
            names = [n for n in missing_dims(e) if n in context.dim_fields]
            if names:
                context.focus_dims(names)
                self.status.value = info_html(
                    f"Set {', '.join(names)} in the run-context bar below, then run again.",
                    kind="warn") + error_html(e)

    def _guard(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap an event handler so nothing it raises escapes into the kernel log.

        Unlike :meth:`_call` it leaves the status line alone on success, so an error shown
        by a :meth:`_call` inside the handler stays visible.
        """

        def handler(*args: Any, **kwargs: Any) -> Any:
            self._run_pending()  # a click before the deferred first view: that view first
            self.error = None
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - shown in the widget
                self._show_error(e)
                return None

        return handler


def lazy_tabs(tabs: w.Tab) -> w.Tab:
    """Put only the open tab's content in the page; each other tab's content joins the page
    when that tab is first opened (the page draws one tab, not all of them, when the widget
    appears). The contents stay the same Python objects, filled by the widget as before;
    ``tabs.children[i]`` is a box holding content ``i`` once opened."""
    contents = list(tabs.children)
    holders = [w.Box(layout=w.Layout(display="block")) for _ in contents]

    def open_tab(index: int | None) -> None:
        i = index or 0
        if 0 <= i < len(holders) and not holders[i].children:
            holders[i].children = [contents[i]]

    open_tab(tabs.selected_index)
    tabs.children = holders
    tabs.observe(lambda change: open_tab(change["new"]), names="selected_index")
    return tabs


def snapshot_of_html(widget: Any) -> str:
    """Static HTML of one widget subtree (hidden parts, inputs and buttons left out)."""
    layout = getattr(widget, "layout", None)
    if layout is not None and getattr(layout, "display", None) == "none":
        return ""
    svg = getattr(widget, "svg", None)
    if isinstance(svg, str):  # the graph canvas: its SVG, scrollable
        return graph_snapshot(svg, getattr(widget, "title", "") or "",
                              getattr(widget, "details_html", "") or "")
    if isinstance(widget, w.HTML):
        return widget.value
    if isinstance(widget, _TableModel):
        return table_snapshot(widget.table_html, widget.pos)
    if isinstance(widget, w.Tab) or isinstance(widget, w.Accordion):
        i = widget.selected_index
        kids = widget.children
        if i is None or not 0 <= i < len(kids):
            return ""
        title = widget.get_title(i) if hasattr(widget, "get_title") else ""
        return (f"<div><b>{esc_text(title or '')}</b></div>" if title else "") + \
            snapshot_of_html(kids[i])
    if isinstance(widget, w.Box):
        inner = "".join(snapshot_of_html(c) for c in widget.children)
        if not inner:
            return ""
        flow = "display:flex;flex-wrap:wrap;gap:4px" if isinstance(widget, w.HBox) else ""
        return f"<div style='{flow}'>{inner}</div>"
    return ""


def table_snapshot(body: str, pos: str = "") -> str:
    """Static HTML of a paged table's current page (checkboxes dropped)."""
    if not body:
        return ""
    body = body.replace("<input type='checkbox' class='olt-check'", "<input type='hidden'")
    foot = (f"<div style='font-size:11px;color:#666'>{esc_text(pos.strip())}</div>"
            if pos.strip() else "")
    return f"<div class='onnx-lab-snapshot-table' style='max-width:100%;overflow-x:auto'>" \
        f"{clean_html(body)}{foot}</div>"


def graph_snapshot(svg: str, title: str = "", details: str = "") -> str:
    """Static HTML of a graph canvas: its SVG (scrollable) and the selected node's panel
    (both cleaned of script, handlers and links: a snapshot runs where no CSP applies)."""
    if not svg:
        return ""
    panel = (f"<div class='onnx-lab-snapshot-details' style='font-size:11px;border:1px solid "
             f"#e0e0e0;padding:2px 6px;margin-top:2px'>{clean_html(details)}</div>"
             if details else "")
    head = f"<div style=font-size:11px>{esc_text(title)}</div>" if title else ""
    return (f"<div class='onnx-lab-snapshot-graph' style='max-width:100%;max-height:"
            f"600px;overflow:auto;border:1px solid #e0e0e0'>"
            f"{head}{clean_svg(svg)}</div>{panel}")


class _Control:
    """A stand-in for a pager button (``click()``, ``disabled``, ``description``): the
    buttons are drawn by the table's JavaScript, so a table stays one widget model."""

    def __init__(self, description: str, action: Callable[[], None]) -> None:
        self.description = description
        self.disabled = False
        self._action = action

    def click(self) -> None:
        if not self.disabled:
            self._action()


class _Text:
    """``.value`` of the table's current page HTML (what ``w.HTML().value`` gave before)."""

    def __init__(self, owner: Any, trait: str) -> None:
        self._owner, self._trait = owner, trait

    @property
    def value(self) -> str:
        return getattr(self._owner, self._trait)


class _TableModel(anywidget.AnyWidget):
    """One widget model for a whole paged table: the page's HTML, the pager and, for a
    :class:`SelectableTable`, its checkboxes (``checked``: one bool per row of the page).

    A table used to be a widget per row (checkbox, HBox, HTML and their layouts and styles:
    ~200 models per page, and a fresh set per page turn), which made a notebook with a few
    widgets save thousands of widget models and stall on reload.
    """

    _esm = "\n".join((_STATIC / f).read_text(encoding="utf-8") for f in ("markup.js", "table.js"))
    _css = _STATIC / "table.css"
    table_html = t.Unicode("").tag(sync=True)
    pos = t.Unicode("").tag(sync=True)
    page = t.Int(0).tag(sync=True)
    pages = t.Int(1).tag(sync=True)
    selectable = t.Bool(False).tag(sync=True)
    checked = t.List(t.Bool()).tag(sync=True)


class PagedTable(_TableModel):
    """A read-only paged view of a DataFrame (``frame_html``), with prev/next buttons.

    ``html.value`` is the current page's HTML; ``next.click()`` / ``prev.click()`` page.
    """

    def __init__(self, df: pd.DataFrame | None = None, *, page_size: int = 25,
                 caption: str | None = None) -> None:
        super().__init__()
        self.add_class("onnx-lab-paged")
        self.page_size = page_size
        self.caption = caption
        self.df = pd.DataFrame() if df is None else df
        self.html = _Text(self, "table_html")
        self.prev = _Control("◀", lambda: self.go(self.page - 1))
        self.next = _Control("▶", lambda: self.go(self.page + 1))
        self.on_msg(self._message)
        self._draw()

    @property
    def n_pages(self) -> int:
        return max(1, -(-len(self.df) // self.page_size))

    def set(self, df: pd.DataFrame, *, caption: str | None = None) -> None:
        self.df = df
        if caption is not None:
            self.caption = caption
        self.page = 0
        self._draw()

    def go(self, page: int) -> None:
        self.page = min(max(0, page), self.n_pages - 1)
        self._draw()

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and isinstance(content.get("go"), int):
            self.go(content["go"])

    def _draw(self) -> None:
        self.table_html = frame_html(self.df, max_rows=self.page_size, page=self.page,
                                     caption=self.caption)
        self.pages = self.n_pages
        self.pos = f" page {self.page + 1}/{self.pages} ({len(self.df)} rows) "
        self.prev.disabled = self.page == 0
        self.next.disabled = self.page >= self.pages - 1


class _RowBox:
    """The checkbox of one row on the shown page: ``.value`` reads and sets its tick."""

    def __init__(self, table: SelectableTable, key: Any) -> None:
        self._table, self._key = table, key

    @property
    def value(self) -> bool:
        return self._key in self._table.selected

    @value.setter
    def value(self, on: bool) -> None:
        self._table._toggle(self._key, bool(on))


class SelectableTable(_TableModel):
    """A paged table whose rows on the current page have checkboxes.

    The whole table is one widget model (rows drawn as HTML, ticks in the ``checked``
    traitlet), so a 1,400-row table opens as fast as a 25-row one and a saved notebook
    holds one model per table. The selection (keys of ``key`` column) survives paging and
    filtering.

    Args:
        key: the column that identifies a row (``node_id``, ``match_id``, ``name``).
        columns: [(column, width px[, header label])] shown per row; cells are formatted
            with :func:`short`.
        on_change: called with the sorted list of selected keys after every change.
        formatters: optional {column: callable(value) -> html} for special cells.
    """

    def __init__(self, key: str, columns: Sequence[tuple], *, page_size: int = 25,
                 on_change: Callable[[list[Any]], None] | None = None,
                 formatters: dict[str, Callable[[Any], str]] | None = None,
                 single: bool = False) -> None:
        super().__init__(selectable=True)
        self.add_class("onnx-lab-selectable")
        self.key = key
        # (column, width) or (column, width, header label)
        self.columns = [(c[0], c[1]) for c in columns]
        self.labels = {c[0]: (c[2] if len(c) > 2 else c[0]) for c in columns}
        self.page_size = page_size
        self.on_change = on_change
        self.formatters = formatters or {}
        self.single = single
        self.df = pd.DataFrame(columns=[key])
        self.selected: list[Any] = []
        self._keys: list[Any] = []
        self.html = _Text(self, "table_html")
        self.prev = _Control("◀", lambda: self.go(self.page - 1))
        self.next = _Control("▶", lambda: self.go(self.page + 1))
        self.clear = _Control("clear selection", lambda: self.select([]))
        self.on_msg(self._message)
        self._draw()

    # ---------------------------------------------------------------- data
    @property
    def n_pages(self) -> int:
        return max(1, -(-len(self.df) // self.page_size))

    def set(self, df: pd.DataFrame, *, keep_selection: bool = True) -> None:
        """Show ``df`` (already filtered/sorted), from its first page."""
        self.df = df
        self.page = 0
        if not keep_selection:
            self.selected = []
        self._draw()

    def go(self, page: int) -> None:
        self.page = min(max(0, page), self.n_pages - 1)
        self._draw()

    def select(self, keys: Iterable[Any]) -> None:
        """Set the selection (keys of the ``key`` column) and notify ``on_change``."""
        keys = list(dict.fromkeys(keys))
        if self.single:
            keys = keys[-1:]
        self.selected = keys
        self._sync_boxes()
        if self.on_change is not None:
            self.on_change(list(self.selected))

    def show(self, key: Any) -> None:
        """Go to the page that holds row ``key`` (no-op when it is filtered out)."""
        keys = list(self.df[self.key])
        if key in keys:
            self.go(keys.index(key) // self.page_size)

    def page_keys(self) -> list[Any]:
        """Keys of the rows on the current page."""
        return list(self._keys)

    def checkbox(self, key: Any) -> _RowBox:
        """The checkbox of row ``key`` on the current page (KeyError when not shown)."""
        if key not in self._keys:
            raise KeyError(key)
        return _RowBox(self, key)

    def _toggle(self, key: Any, on: bool) -> None:
        keys = [k for k in self.selected if k != key]
        if on:
            keys.append(key)
        self.select(keys)

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if isinstance(content.get("go"), int):
            self.go(content["go"])
        elif content.get("clear"):
            self.select([])
        elif isinstance(content.get("toggle"), int) and 0 <= content["toggle"] < len(self._keys):
            self._toggle(self._keys[content["toggle"]], bool(content.get("value")))

    # ---------------------------------------------------------------- drawing
    def _cell(self, col: str, value: Any) -> str:
        if col in self.formatters:
            return self.formatters[col](value)
        return short(value)

    def _row_html(self, row: dict[str, Any], *, header: bool = False, i: int = -1) -> str:
        cells = []
        for col, width in self.columns:
            value = None if header else row.get(col)
            title = ""
            if header:
                text = esc_text(str(row[col]))
            elif col in _MIDDLE_CUT and col not in self.formatters and isinstance(value, str) \
                    and len(value) > max(10, int(width) // 7):
                # ids of nodes in bodies share a long head ("optimum::if/else_branch/...")
                # and differ at the end: cut in the middle, the whole id in the tooltip
                n = max(10, int(width) // 7)
                text = esc_text(value[:n // 3] + "…" + value[-(n - n // 3 - 1):])
                title = f" title='{esc_attr(value, 2000)}'"
            else:
                text = clean_html(self._cell(col, value))
            cls = "olt-head" if header else "olt-cell"
            cells.append(f"<span class='{cls}' style='width:{int(width):d}px'{title}>{text}"
                         "</span>")
        if header:
            tick = "<span class='olt-tick'></span>"
        else:
            tick = (f"<label class='olt-tick'><input type='checkbox' class='olt-check' "
                    f"data-i='{int(i):d}'/></label>")
        cls = "olt-row olt-header" if header else "olt-row"
        return f"<div class='{cls}'>{tick}" + "".join(cells) + "</div>"

    def _draw(self) -> None:
        start = self.page * self.page_size
        page = self.df.iloc[start:start + self.page_size]
        cols = [c for c, _ in self.columns]
        rows = [self._row_html(dict(self.labels), header=True)]
        keys = []
        for i, rec in enumerate(page.to_dict("records")):
            keys.append(rec[self.key])
            rows.append(self._row_html({c: rec.get(c) for c in cols}, i=i))
        self._keys = keys
        self.pages = self.n_pages
        self.table_html = "<div class='olt-rows'>" + "".join(rows) + "</div>"
        self._sync_boxes()
        self.prev.disabled = self.page == 0
        self.next.disabled = self.page >= self.pages - 1

    def _sync_boxes(self) -> None:
        chosen = set(self.selected)
        self.checked = [k in chosen for k in self._keys]
        n = len(self.df)
        start = self.page * self.page_size
        shown = f"rows {start + 1}–{min(start + self.page_size, n)} of {n}" if n else "no rows"
        self.pos = (f" {shown}, page {self.page + 1}/{self.pages}; "
                    f"{len(self.selected)} selected ")
