"""Explorer: Summary | Nodes | Initializers | Tensors | Graph tabs over one Lab.

A view only: the tables are ``lab.nodes`` / ``lab.initializers`` / ``lab.tensors`` /
``lab.weight_stats()`` filtered with pandas, the graph is ``lab.render(...)``. Tabs fill on
first view, and the graph never lays out the whole model: with no selection it shows the
``collapse="auto"`` overview, otherwise the neighbourhood of the selected rows.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import ipywidgets as w

from onnx_lab.lab import as_lab
from onnx_lab.render._html import esc_text
from onnx_lab.render.details import graph_owners
from onnx_lab.render.dot import in_background
from onnx_lab.render.tables import format_bytes, frame_html
from onnx_lab.widgets._common import (
    SelectableTable,
    View,
    code_html,
    figure_html,
    short,
    wait_for_idle_kernel,
)
from onnx_lab.widgets._links import selection
from onnx_lab.widgets.editor import drawn_centres

__all__ = ["Explorer"]

TAB_NAMES = ["Summary", "Nodes", "Initializers", "Tensors", "Graph"]
SUMMARY, NODES, INITS, TENSORS, GRAPH = range(5)
ALL = "*"  # dropdown value for "no filter" (None would show an empty dropdown)
_AHEAD_MAX = 400  # layouts drawn ahead kept per Explorer (a few hundred KB of SVG each)
_AHEAD_BLIND = 3  # drawn ahead before a page reports the canvas's view (where the view opens)
# The Explorer whose graph was shown or moved last: the only one drawing ahead (a cell re-run
# leaves the Explorer it replaced alive in the kernel; its layouts ahead would compete with
# the new one's first layout and every layout a user waits for).
_ACTIVE: list[weakref.ref] = []


def _graph_label(path: str) -> str:
    return "main graph" if path == "" else path


class Explorer(View):
    """Browse a model: summary, filtered node/weight/tensor tables and graph neighbourhoods.

    Args:
        lab: a :class:`~onnx_lab.lab.Lab` (or anything ``onnx_lab.open`` takes).
        page_size: rows per table page.
        prefetch: how many collapsed boxes of each graph view shown (the overview, an
            expanded box) have their expanded layouts drawn ahead in a background thread
            after the first paint, the ones nearest the middle of the canvas's view first
            (re-read before each layout, so a pan or zoom reorders them), so clicking one
            swaps drawings; None (the default): every box (until a page shows the canvas
            and reports its view, only the first 3: a kernel with no page lays out no more);
            0: none. One Explorer draws ahead at a time: the one whose graph was shown or
            moved last (a re-run cell's new Explorer, not the one it replaced). A box a
            search's first hits lie in is laid out first, and its layouts run at a lower CPU
            priority than those a user waits for.

    Attributes:
        result: the object behind the visible tab: the Summary, the filtered nodes DataFrame,
            the selected weight's stats row (or the weight table), the filtered tensors
            DataFrame, or the graph Rendering.

    Example:
        >>> import onnx_lab
        >>> lab = onnx_lab.open("sample:convnet")
        >>> lab.explore()          # or onnx_lab.widgets.Explorer(lab)
    """

    def __init__(self, lab: Any, *, page_size: int = 25, tab: str | int = 0,
                 height: int = 560, prefetch: int | None = None) -> None:
        self.lab = as_lab(lab)
        self.page_size = page_size
        self._results: dict[int, Any] = {}
        self._codes: dict[int, str] = {}
        self._built: set[int] = set()
        self._graph_dirty = True
        self._muted = False
        self._body = ""  # graph path opened by a double click on an If/Loop/Scan node
        self._shown_expand = ""  # the scope drawn open in the graph shown
        # Layouts of the expands of the boxes shown (and of the views shown themselves),
        # drawn ahead in a background thread after the first paint: an expand or a collapse
        # is a swap of drawings.
        self.prefetch = prefetch
        self._ahead: dict[tuple[int, str], Any] = {}  # (id of the model, code) -> Rendering
        self._ahead_thread: threading.Thread | None = None
        self._ahead_jobs: list[list[tuple[dict[str, Any], str, tuple[float, float]]]] = []
        self._ahead_views: list[tuple[Any, dict[str, Any]]] = []  # shown, not yet queued
        self._ahead_lock = threading.Lock()
        self._ahead_done = threading.Condition(self._ahead_lock)  # a layout ahead landed
        self._ahead_running = ""  # the code of the layout the thread is drawing now
        self._wanted: list[str] = []  # scopes of boxes a search needs: laid out first
        self._fg_idle = threading.Event()  # cleared while the kernel lays a view out itself
        self._fg_idle.set()
        self._ahead_blind = 0  # layouts drawn ahead before the page reported a view
        self._height = height
        self.tabs = w.Tab(children=[w.VBox() for _ in TAB_NAMES])
        for i, name in enumerate(TAB_NAMES):
            self.tabs.set_title(i, name)
        super().__init__([self.tabs])
        self.add_class("onnx-lab-explorer")
        self._build_nodes_controls()
        self._build_graph_controls()
        first = TAB_NAMES.index(tab) if isinstance(tab, str) else int(tab)
        self.tabs.selected_index = first
        self.tabs.observe(self._guard(self._on_tab), names="selected_index")
        self.link = selection(self.lab)
        self.link.subscribe(self, self._guard(self.reveal))
        # The first tab fills after the frame shows (or on the first read of e.result...).
        self._defer(lambda: self._show_tab(first), f"Computing {TAB_NAMES[first]}…")

    # ------------------------------------------------------------------ public state
    @property
    def result(self) -> Any:
        """The object behind what the visible tab shows (see class docstring)."""
        return self._results.get(self.tabs.selected_index or 0)

    @property
    def selected_nodes(self) -> list[str]:
        """Node ids ticked in the Nodes tab."""
        return list(self.nodes_table.selected)

    @property
    def selected_tensors(self) -> list[str]:
        """Tensor names ticked in the Tensors tab."""
        return list(self.tensors_table.selected) if hasattr(self, "tensors_table") else []

    def show_graph(self) -> None:
        """Switch to the Graph tab (renders the current selection)."""
        self.tabs.selected_index = GRAPH

    def reveal(self, name: str) -> str | None:
        """Centre, select and highlight ``name`` (node id or tensor name) in the Graph tab's
        canvas (a node inside a collapsed box: the box). Widgets on the same Lab call this
        through the shared selection. Returns the drawn key, or None when not drawn."""
        if (self.tabs.selected_index or 0) != GRAPH:
            self.show_graph()
        key = self.canvas.focus(name)
        if key is None and self._body:
            # The node lies outside the body shown: back to the main overview.
            self._body = ""
            self._clear_expand()
            self._render_graph()
            key = self.canvas.focus(name)
        return key

    # ------------------------------------------------------------------ tabs
    def _on_tab(self, change: dict) -> None:
        self._show_tab(change["new"])

    def _show_tab(self, index: int | None) -> None:
        index = index or 0
        if index not in self._built:
            self._built.add(index)
            self._fill_lazily(self.tabs.children[index], [
                self._build_summary, self._build_nodes, self._build_inits, self._build_tensors,
                self._build_graph][index], f"Computing {TAB_NAMES[index]}…")
        if index == GRAPH and self._graph_dirty:
            self._render_graph()
        self.code.value = code_html(self._codes.get(index, ""))

    def _set_result(self, index: int, result: Any, code: str) -> None:
        self._results[index] = result
        self._codes[index] = code
        if (self.tabs.selected_index or 0) == index:
            self.code.value = code_html(code)

    # ------------------------------------------------------------------ Summary
    def _build_summary(self) -> None:
        s = self._call(self.lab.summary)
        box = self.tabs.children[SUMMARY]
        if s is None:
            box.children = [w.HTML(self.status.value)]
            return
        box.children = [w.HTML(s._repr_html_())]
        self._set_result(SUMMARY, s, "lab.summary()")

    # ------------------------------------------------------------------ Nodes
    def _build_nodes_controls(self) -> None:
        self.op_filter = w.SelectMultiple(description="op types", rows=6,
                                          layout=w.Layout(width="300px"))
        self.name_filter = w.Text(description="name", placeholder="id, name or scope contains",
                                  continuous_update=False, layout=w.Layout(width="300px"))
        self.graph_filter = w.Dropdown(description="graph", layout=w.Layout(width="300px"))
        self.show_button = w.Button(description="Show selected in Graph", icon="project-diagram",
                                    layout=w.Layout(width="220px"))
        self.nodes_table = SelectableTable(
            "node_id", [("node_id", 170), ("op_type", 120), ("name", 170), ("scope", 170),
                        ("graph", 110), ("inputs", 170), ("outputs", 150)],
            page_size=self.page_size, on_change=self._guard(self._on_nodes_selected))
        self.nodes_count = w.HTML()
        self.node_details = w.HTML()

    def _build_nodes(self) -> None:
        nodes = self._call(lambda: self.lab.nodes)
        if nodes is None:
            return
        self._nodes = nodes
        counts = nodes["op_type"].value_counts()
        self.op_filter.options = [(f"{op} ({n})", op) for op, n in
                                  sorted(counts.items(), key=lambda kv: kv[0])]
        graphs = list(self.lab.index.graphs)
        self.graph_filter.options = [("all graphs", ALL)] + [(_graph_label(g), g)
                                                              for g in graphs]
        self.graph_filter.value = ALL
        for ctl in (self.op_filter, self.name_filter, self.graph_filter):
            ctl.observe(self._guard(self._filter_nodes), names="value")
        self.show_button.on_click(self._guard(lambda _b: self.show_graph()))
        controls = w.HBox([self.op_filter, w.VBox([self.name_filter, self.graph_filter,
                                                   self.show_button])])
        self.tabs.children[NODES].children = [controls, self.nodes_count, self.nodes_table,
                                              self.node_details]
        self._filter_nodes()

    def _filter_nodes(self, _change: Any = None) -> None:
        df = self._nodes
        conds = []
        ops = list(self.op_filter.value)
        if ops:
            df = df[df["op_type"].isin(ops)]
            conds.append(f"lab.nodes.op_type.isin({ops!r})")
        text = self.name_filter.value.strip()
        if text:
            hit = (df["node_id"].str.contains(text, case=False, regex=False)
                   | df["name"].str.contains(text, case=False, regex=False)
                   | df["scope"].str.contains(text, case=False, regex=False)
                   | df["module"].fillna("").astype(str).str.contains(text, case=False,
                                                                      regex=False))
            df = df[hit]
            conds.append(f"lab.nodes.node_id.str.contains({text!r}, case=False, regex=False)")
        graph = self.graph_filter.value
        if graph not in (ALL, None):
            df = df[df["graph"] == graph]
            conds.append(f"(lab.nodes.graph == {graph!r})")
        self.nodes_table.set(df)
        self.nodes_count.value = f"<small>{len(df)} of {len(self._nodes)} nodes</small>"
        code = "lab.nodes" if not conds else "lab.nodes[" + " & ".join(
            c if c.startswith("(") else f"({c})" for c in conds) + "]"
        self._set_result(NODES, df, code)

    def _on_nodes_selected(self, keys: list[str]) -> None:
        self._show_node_details()
        # A new selection is a new view: the scope opened in the last one may not exist in
        # it (lab.render would refuse it as an unknown scope).
        self._muted = True
        try:
            self.expand.value = ""
        finally:
            self._muted = False
        self._graph_dirty = True
        if (self.tabs.selected_index or 0) == GRAPH:
            self._render_graph()

    def _show_node_details(self) -> None:
        """Attributes, inputs and outputs of the last ticked node (a row of ``lab.nodes``)."""
        nodes = getattr(self, "_nodes", None)
        keys = self.selected_nodes
        if nodes is None or not keys:
            self.node_details.value = ""
            return
        row = nodes.loc[nodes["node_id"] == keys[-1]]
        if not len(row):
            return
        r = row.iloc[0]
        attrs = "".join(f"<tr><td>{esc_text(str(k))}</td><td>{short(v, 120)}</td></tr>"
                        for k, v in r["attributes"].items()) or "<tr><td>none</td></tr>"
        ios = "".join(f"<tr><td>{esc_text(kind)}</td><td>{short(v, 400)}</td></tr>"
                      for kind, v in (("inputs", r["inputs"]), ("outputs", r["outputs"])))
        where = esc_text(f"graph {r['graph']!r}, scope {r['scope']!r}, topo {r['topo']}")
        self.node_details.value = (
            f"<div class='onnx-lab-node-details'><b>{esc_text(r['node_id'])}</b> "
            f"({esc_text(r['op_type'])}{', ' + esc_text(r['domain']) if r['domain'] else ''})"
            f" — {where}<table><tr><th colspan=2 style='text-align:left'>attributes</th></tr>"
            f"{attrs}{ios}</table></div>")

    # ------------------------------------------------------------------ Initializers
    def _build_inits(self) -> None:
        table = self._call(lambda: self.lab.initializers)
        if table is None:
            return
        self._inits = table
        self.init_sort = w.Dropdown(
            description="sort by",
            options=[("size (nbytes)", "nbytes"), ("outlier score", "outlier_score"),
                     ("name", "name")], value="nbytes")
        self.init_filter = w.Text(description="name", placeholder="contains",
                                  continuous_update=False)
        self.inits_table = SelectableTable(
            "name", [("name", 240), ("dtype", 70), ("shape", 130), ("nbytes", 90),
                     ("outlier_score", 90), ("source", 80), ("consumers", 170)],
            page_size=self.page_size, single=True,
            formatters={"nbytes": _bytes_cell},
            on_change=self._guard(self._on_weight_selected))
        self.weight_stats_html = w.HTML()
        self.weight_plot = w.HTML()
        self.init_sort.observe(self._guard(self._sort_inits), names="value")
        self.init_filter.observe(self._guard(self._sort_inits), names="value")
        self.tabs.children[INITS].children = [
            w.HBox([self.init_sort, self.init_filter]), self.inits_table,
            self.weight_stats_html, self.weight_plot]
        self._sort_inits()

    def _sort_inits(self, _change: Any = None) -> None:
        key = self.init_sort.value
        df = self._inits
        if key == "outlier_score":
            # Reads every weight once (one at a time): only when asked for.
            stats = self._call(self.lab.weight_stats, busy="Computing weight statistics…")
            if stats is None:
                return
            df = stats.merge(self._inits[["name", "nbytes", "consumers"]], on="name",
                             how="left")
            df = df.sort_values("outlier_score", ascending=False, na_position="last")
            code = 'lab.weight_stats().sort_values("outlier_score", ascending=False)'
        elif key == "nbytes":
            df = df.sort_values("nbytes", ascending=False, kind="stable")
            code = 'lab.initializers.sort_values("nbytes", ascending=False)'
        else:
            df = df.sort_values("name", kind="stable")
            code = 'lab.initializers.sort_values("name")'
        text = self.init_filter.value.strip()
        if text:
            df = df[df["name"].str.contains(text, case=False, regex=False)]
            code += f"  # name contains {text!r}"
        self.inits_table.set(df)
        self._set_result(INITS, df, code)

    def _on_weight_selected(self, keys: list[str]) -> None:
        if not keys:
            self.weight_stats_html.value = ""
            self.weight_plot.value = ""
            return
        name = keys[0]
        stats = self._call(self.lab.weight_stats, [name])
        if stats is None:
            return
        fig = self._call(self.lab.weight_histogram, name)

        self.weight_stats_html.value = frame_html(stats, caption=f"weight {name}")
        self.weight_plot.value = figure_html(fig)
        self._set_result(INITS, stats, f"lab.weight_stats([{name!r}]); "
                                       f"lab.weight_histogram({name!r})")

    # ------------------------------------------------------------------ Tensors
    def _build_tensors(self) -> None:
        table = self._call(lambda: self.lab.tensors, busy="Inferring shapes…")
        if table is None:
            self.tabs.children[TENSORS].children = [w.HTML(self.status.value)]
            return
        self._tensors = table
        kinds = sorted(table["kind"].unique())
        self.tensor_kind = w.Dropdown(description="kind", options=[("all", ALL)] + [(k, k) for k in kinds])
        self.tensor_filter = w.Text(description="name", placeholder="contains",
                                    continuous_update=False)
        self.tensors_table = SelectableTable(
            "name", [("name", 240), ("dtype", 70), ("shape", 150), ("kind", 90),
                     ("producer", 150), ("consumers", 200)],
            page_size=self.page_size, on_change=self._guard(self._on_nodes_selected))
        self.tensor_kind.observe(self._guard(self._filter_tensors), names="value")
        self.tensor_filter.observe(self._guard(self._filter_tensors), names="value")
        self.tabs.children[TENSORS].children = [
            w.HBox([self.tensor_kind, self.tensor_filter]), self.tensors_table]
        self._filter_tensors()

    def _filter_tensors(self, _change: Any = None) -> None:
        df = self._tensors
        code = "lab.tensors"
        if self.tensor_kind.value != ALL:
            df = df[df["kind"] == self.tensor_kind.value]
            code = f"lab.tensors.query('kind == {self.tensor_kind.value!r}')"
        text = self.tensor_filter.value.strip()
        if text:
            df = df[df["name"].str.contains(text, case=False, regex=False)]
            code += f"  # name contains {text!r}"
        self.tensors_table.set(df)
        self._set_result(TENSORS, df, code)

    # ------------------------------------------------------------------ Graph
    def _build_graph_controls(self) -> None:
        self.radius = w.IntSlider(description="radius", value=2, min=0, max=8,
                                  continuous_update=False)
        self.collapse = w.ToggleButton(description="collapse scopes", value=True,
                                       tooltip="group nodes by name scope (collapse='auto')")
        self.expand = w.Dropdown(description="expand", options=[("—", "")],
                                 layout=w.Layout(width="320px"))
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        self.canvas = GraphCanvas(self.lab, height=self._height)
        self.canvas.on_expand = self._guard(self._expand_from_canvas)
        self.canvas.on_open = self._guard(self._open_body)
        self.canvas.on_want = self._guard(self._want)
        self.canvas.on_select(self._guard(self._canvas_selected))
        self.canvas.observe(self._resume_ahead, names="view")
        self.graph_info = w.HTML()
        # Out of an If/Loop/Scan body (a double click opened it): the graph that holds it
        self.up_button = w.Button(description="↑ main graph", layout=w.Layout(
            width="auto", display="none"), tooltip="back to the graph that holds this body")
        self.up_button.add_class("onnx-lab-up")
        self.up_button.on_click(self._guard(lambda _b: self.leave_body()))

    def _build_graph(self) -> None:
        for ctl in (self.radius, self.collapse, self.expand):
            ctl.observe(self._guard(self._graph_control), names="value")
        self.tabs.children[GRAPH].children = [
            w.HBox([self.up_button, self.radius, self.collapse, self.expand]), self.graph_info,
            self.canvas]

    def _owner(self, body: str) -> Any:
        """The index entry of the If/Loop/Scan node that holds ``body``, or None."""
        nid = graph_owners(self.lab).get(body)
        return self.lab.index.entries.get(nid) if nid is not None else None

    def _outer_graph(self, body: str) -> str:
        """The graph path of the node that holds ``body`` ('' for the main graph)."""
        owner = self._owner(body)
        return owner.graph if owner is not None else ""

    def leave_body(self) -> None:
        """Out of the If/Loop/Scan body shown (*↑ main graph*): the graph that holds it is
        drawn, with the node that owns the body selected."""
        if not self._body:
            return
        owner = self._owner(self._body)
        self._body = owner.graph if owner is not None else ""
        self._clear_expand()  # the box opened in the body is no scope of the graph around it
        self._render_graph()
        if owner is not None:
            self.canvas.focus(owner.node_id)

    def _expand_from_canvas(self, key: str) -> None:
        options = [v for _, v in self.expand.options]
        if key not in options and key.startswith("/"):  # a module breadcrumb of the panel
            self._muted = True
            try:
                self.expand.options = [*self.expand.options, (key, key)]
            finally:
                self._muted = False
            options.append(key)
        if key in options:
            self.expand.value = key

    def _draw_ahead(self, shown: Any, kwargs: dict[str, Any]) -> None:
        """Queue the expands of the boxes of view ``shown`` (drawn by ``lab.render(**kwargs)``)
        and lay them out in a background thread: the boxes of the newest view first, each
        time the one nearest the middle of the canvas's view. (The thread reads the boxes'
        places in the drawing: nothing of it delays the view shown.)"""
        if self.prefetch == 0:
            return
        with self._ahead_lock:
            self._ahead_views.append((shown, kwargs))
        wait_for_idle_kernel(0)  # (its IPython hooks registered from this thread)
        self._resume_ahead()

    def _queue_views(self) -> None:
        """(In the thread drawing ahead) the views queued by :meth:`_draw_ahead` become
        batches of layouts to draw, the newest first."""
        with self._ahead_lock:
            views, self._ahead_views = self._ahead_views, []
        model = self.lab.model
        for shown, kwargs in views:
            centres = drawn_centres(shown.svg, shown.drawn)
            base = {k: v for k, v in kwargs.items() if k != "expand"}
            jobs = []
            for key, n in shown.view.nodes.items():
                if n.kind != "box" or key not in centres:
                    continue
                kw = {**base, "expand": key.split(":", 1)[1]}
                code = "lab.render(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")"
                if (id(model), code) not in self._ahead:
                    jobs.append((kw, code, centres[key]))
            if self.prefetch:
                jobs = sorted(jobs, key=self._distance)[:self.prefetch]
            with self._ahead_lock:
                # another model's layouts are of no use any more
                self._ahead = {k: r for k, r in self._ahead.items() if k[0] == id(model)}
                self._ahead_jobs = [jobs, *self._ahead_jobs][:4]

    def _resume_ahead(self, _change: Any = None) -> None:
        """(Re)start the thread drawing ahead when layouts are queued (the page's first view
        lets it go past the first few); this Explorer becomes the one drawing ahead."""
        _ACTIVE[:] = [weakref.ref(self)]
        if self._ahead_thread and self._ahead_thread.is_alive():
            return
        if not any(self._ahead_jobs) and not self._ahead_views:
            return
        self._ahead_thread = threading.Thread(target=self._ahead_loop, args=(self.lab.model,),
                                              name="onnx-lab-draw-ahead", daemon=True)
        self._ahead_thread.start()

    def _want(self, scopes: list[str]) -> None:
        """The boxes of ``scopes`` are what a search needs (its first hits lie in them):
        their expands are laid out next (by this Explorer: the one in use)."""
        with self._ahead_lock:
            self._wanted = list(scopes)
        self._resume_ahead()

    def _distance(self, job: tuple[Any, str, tuple[float, float]]) -> float:
        """How far a queued box is from the middle of the canvas's view (0 for all before
        the page has said where the view is: their order in the drawing then)."""
        v = self.canvas.view or {}
        k = float(v.get("k") or 0)
        if not k:
            return 0.0
        mx = (float(v.get("width", 0)) / 2 - float(v.get("x", 0))) / k
        my = (float(v.get("height", 0)) / 2 - float(v.get("y", 0))) / k
        return (job[2][0] - mx) ** 2 + (job[2][1] - my) ** 2

    def _next_ahead(self) -> tuple[dict[str, Any], str] | None:
        """The queued expand to lay out next: of the newest view, nearest the middle of the
        canvas's view."""
        if not _ACTIVE or _ACTIVE[0]() is not self:
            return None  # another Explorer was shown or moved since: it draws ahead now
        self._queue_views()
        with self._ahead_lock:
            while self._ahead_jobs and not self._ahead_jobs[0]:
                self._ahead_jobs.pop(0)
            if not self._ahead_jobs:
                return None
            # a box a search needs first, wherever it is queued
            for batch in self._ahead_jobs:
                for i, job in enumerate(batch):
                    if job[0].get("expand") in self._wanted:
                        batch.pop(i)
                        self._ahead_running = job[1]
                        return job[0], job[1]
            if not (self.canvas.view or {}).get("k"):
                if self._ahead_blind >= _AHEAD_BLIND:
                    return None
                self._ahead_blind += 1
            batch = self._ahead_jobs[0]
            i = min(range(len(batch)), key=lambda j: self._distance(batch[j]))
            kw, code, _ = batch.pop(i)
            self._ahead_running = code
        return kw, code

    def _ahead_loop(self, model: Any) -> None:
        try:
            while (wait_for_idle_kernel() and self._fg_idle.wait()
                   and (job := self._next_ahead()) is not None):
                kw, code = job
                if self.lab.model is not model:
                    return  # the model changed: these layouts would be of the old one
                if (id(model), code) in self._ahead:
                    continue
                try:
                    with in_background():  # below the layouts a user waits for
                        drawn = self.lab.render(**kw)
                    self.canvas.prepare(drawn)  # its search text and placement too
                except Exception:  # noqa: BLE001 - a layout ahead is a bonus; the click redraws
                    drawn = None
                self._keep_ahead(model, code, drawn)
        finally:
            with self._ahead_lock:
                self._ahead_running = ""
                self._ahead_done.notify_all()

    def _keep_ahead(self, model: Any, code: str, drawn: Any) -> None:
        """Keep layout ``drawn`` of ``code`` (None: it failed; a wait for it ends)."""
        with self._ahead_lock:
            if drawn is not None:
                self._ahead[(id(model), code)] = drawn
            while len(self._ahead) > _AHEAD_MAX:
                self._ahead.pop(next(iter(self._ahead)))
            if code == self._ahead_running:
                self._ahead_running = ""
            self._ahead_done.notify_all()

    def _laid_out(self, kwargs: dict[str, Any], code: str) -> Any:
        """The layout of ``code``: drawn ahead, being drawn ahead (waited for), or drawn
        now; the canvas's bar says which it waits on meanwhile."""
        key = (id(self.lab.model), code)
        what = kwargs.get("expand") or "the graph"
        if self._ahead_running == code and key not in self._ahead:
            self.canvas.busy = f"waiting for the layout of {what}, being drawn ahead…"
            with self._ahead_lock:
                self._ahead_done.wait_for(lambda: self._ahead_running != code, timeout=120)
        rendering = self._ahead.get(key)
        if rendering is None:
            if kwargs.get("expand"):
                self.canvas.busy = f"laying out {what} (not drawn ahead yet)…"
            with self._ahead_lock:  # drawn here: not again in the background
                for batch in self._ahead_jobs:
                    batch[:] = [j for j in batch if j[1] != code]
            self._fg_idle.clear()  # and no new layout ahead beside it
            try:
                rendering = self._call(self.lab.render, busy="Laying out the graph…", **kwargs)
            finally:
                self._fg_idle.set()
        return rendering

    def _keep_in_view(self, before: Any, after: Any, opened: str) -> None:
        """After an expand, centre the opened box's first drawn member at a readable size;
        after a collapse, the box it became (not a re-fit of the whole graph)."""
        closed, self._shown_expand = self._shown_expand, opened
        if before is None or opened == closed:
            return
        nodes = after.view.nodes
        if opened:
            old = before.view.nodes.get(f"scope:{opened}")
            members = list(old.node_ids) if old is not None else []
            if not members:
                members = [k for k in nodes if k in self.lab.index.entries]
            key = next((m for m in members if m in nodes), None)
        else:
            key = f"scope:{closed}" if f"scope:{closed}" in nodes else None
        if key is not None:
            self.canvas.centre(key)

    def _open_body(self, graph: str) -> None:
        self._body = graph
        self._clear_expand()
        self._render_graph()

    def _clear_expand(self) -> None:
        """No box open, without a redraw: the graph shown is about to change."""
        self._muted = True
        try:
            self.expand.value = ""
        finally:
            self._muted = False

    def _canvas_selected(self, key: str) -> None:
        if key in self.lab.index.entries:
            self.link.select(key, source=self)

    def _graph_control(self, _change: Any = None) -> None:
        if self._muted:
            return
        self._graph_dirty = True
        if (self.tabs.selected_index or 0) == GRAPH:
            self._render_graph()

    def graph_call(self) -> tuple[dict[str, Any], str]:
        """The keyword arguments of ``lab.render`` for the current controls, and its code."""
        around = self.selected_nodes + self.selected_tensors
        kwargs: dict[str, Any] = {}
        if around:
            kwargs["around"] = around
            kwargs["radius"] = int(self.radius.value)
            kwargs["highlight"] = list(self.selected_nodes)
            if self.collapse.value:
                kwargs["collapse"] = "auto"
        else:
            # No selection: the overview. Always collapsed, so no control lays out the
            # whole graph of a large model.
            kwargs["collapse"] = "auto"
            graph = self._body or self.graph_filter.value
            if graph not in (ALL, "", None):
                kwargs["graph"] = graph
        if self.expand.value and kwargs.get("collapse"):  # a box of the main graph or a body
            kwargs["expand"] = self.expand.value
        code = "lab.render(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
        return kwargs, code

    def _render_graph(self) -> None:
        self._graph_dirty = False
        if GRAPH not in self._built:
            return
        kwargs, code = self.graph_call()
        n = len(kwargs.get("around", []))
        self.graph_info.value = (f"<small>neighbourhood of {n:d} selected item(s)</small>" if n
                                 else "<small>overview (collapsed by scope); tick rows in "
                                      "Nodes or Tensors to see their neighbourhood</small>")
        rendering = self._laid_out(kwargs, code)
        self.canvas.busy = ""
        if self._body:
            outer = self._outer_graph(self._body)
            self.up_button.description = f"↑ {outer}" if outer else "↑ main graph"
        self.up_button.layout.display = None if self._body else "none"
        if rendering is None:
            self.canvas.show(None)
            return
        if not kwargs.get("around") and not self._body:  # a collapse back to it is a swap
            self._keep_ahead(self.lab.model, code, rendering)
        before = self.canvas.rendering
        with self.canvas.hold_sync():  # the drawing and where to show it in one message
            self.canvas.show(rendering, title=code)
            self._keep_in_view(before, rendering, kwargs.get("expand") or "")
        if self.selected_nodes:
            self.canvas.highlight = [k for k in (self.canvas.key_for(n)
                                                 for n in self.selected_nodes) if k]
        self._set_result(GRAPH, rendering, code)
        if not kwargs.get("around") and not self._body:
            self._draw_ahead(rendering, kwargs)
        # The scopes one can open are the collapsed boxes of this view (plus the open one).
        keys = sorted(getattr(rendering, "groups", {}) or {})
        current = self.expand.value
        if current and current not in keys:
            keys = [current, *keys]
        self._muted = True
        try:
            self.expand.options = [("—", "")] + [(k, k) for k in keys]
            self.expand.value = current if current in keys else ""
        finally:
            self._muted = False


def _bytes_cell(value: Any) -> str:
    try:
        return format_bytes(value)
    except (TypeError, ValueError):
        return ""
