"""``render_model``: choose what to draw, build the graph view, lay it out; and ``Rendering``.

Choosing what to draw is the feature: ``dot`` needs about 90 s for a whole 24-layer GPT-2
export on a laptop core, so a view is a selection (nodes, a neighbourhood, collapsed scopes)
capped at ``max_nodes`` drawn elements, with "+N more" stubs where the view was cut.
"""

from __future__ import annotations

import logging
import math
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_lab._display import notebook_html
from onnx_lab.core.outputs import input_files, refuse_inputs, write_atomic
from onnx_lab.errors import InputError, RenderError, strict_keywords, unknown_name
from onnx_lab.render import collapse as _collapse
from onnx_lab.render import dot as _dot
from onnx_lab.render._html import clean_svg, drawn_keys, esc_text
from onnx_lab.render.graph import GraphView, build_view, is_folded_constant, owner_in_graph
from onnx_lab.render.overlays import aggregate, format_value, make_scale, resolve_overlay
from onnx_lab.render.tables import frame_html

if TYPE_CHECKING:
    import pandas as pd

    from onnx_lab.core.index import ModelIndex
    from onnx_lab.core.model import LabModel

logger = logging.getLogger(__name__)

__all__ = ["render_model", "Rendering"]

_DIRECTIONS = ("both", "up", "down")


class Rendering:
    """A drawn view of a model.

    Attributes:
        svg: the SVG text, or None (no ``dot`` on PATH, or every layout attempt timed out).
        dot: the DOT source (always set).
        nodes: model node ids drawn as nodes of their own, in topological order.
        groups: collapsed boxes: group key (scope such as ``'/h.3'``, or ``'block2'``) ->
            member node ids.
        edges: (source, target, tensor) per drawn tensor edge; sources/targets are node ids or
            ``input:<t>``, ``output:<t>``, ``outer:<t>``, ``weight:<t>``, ``scope:<key>``,
            ``stub:up:<key>``/``stub:down:<key>``; stub edges carry tensor ``''``.
        notes: what was cut, folded, collapsed or degraded, and why there is no SVG.
        graph: the graph path drawn ('' is the main graph).
        seconds: wall time of the whole call (selection, DOT, layout).

    Example:
        >>> r = onnx_lab.open("sample:convnet").render(collapse="auto")
        >>> r.save("convnet.svg")
    """

    def __init__(self, *, dot: str, svg: str | None, nodes: list[str],
                 edges: list[tuple[str, str, str]], notes: list[str],
                 groups: dict[str, list[str]], graph: str, view: GraphView,
                 engine: str | None, args: tuple[str, ...], timeout: float,
                 seconds: float, source: Any = None) -> None:
        self.dot = dot
        self._sources = [source] if source is not None else []  # never saved over
        self.svg = svg
        self.nodes = nodes
        self.edges = edges
        self.notes = notes
        self.groups = groups
        self.graph = graph
        self.view = view
        self.engine = engine
        self._args = args
        self._timeout = timeout
        self.seconds = seconds
        self._drawn: dict[str, str] | None = None

    @property
    def drawn(self) -> dict[str, str]:
        """{an SVG id's key: the element's key} for the elements not drawn under their own key
        (a control character as its picture, a long name cut:
        :func:`~onnx_lab.render._html.dot_safe`), worked out once per drawing: what the page
        translates the ids it reads back with, and what Python reads the SVG with."""
        if getattr(self, "_drawn", None) is None:  # (a Rendering unpickled from before)
            self._drawn = drawn_keys(self.view.nodes)
        return self._drawn

    def __repr__(self) -> str:
        what = "SVG" if self.svg is not None else "no SVG"
        return (f"<Rendering {self.graph or 'main graph'}: {len(self.nodes)} nodes, "
                f"{len(self.groups)} boxes, {len(self.edges)} edges, {what}>")

    # -- display ----------------------------------------------------------------------------
    def _repr_svg_(self) -> str | None:
        return self.svg

    def _notes_html(self) -> str:
        if not self.notes:
            return ""
        items = "".join(f"<li>{esc_text(n)}</li>" for n in self.notes)
        return f"<ul style='color:#666;font-size:90%;margin:2px 0'>{items}</ul>"

    def _repr_html_(self) -> str:
        if self.svg is not None:
            svg = clean_svg(self.svg)
            return notebook_html(
                f"<div class='onnx-lab-render' style='overflow:auto;max-height:900px'>"
                f"{svg}</div>{self._notes_html()}")
        return notebook_html(self.fallback_html())

    def fallback_html(self) -> str:
        """Tables of drawn nodes and edges, the notes and the DOT source (no ``dot`` needed)."""
        import pandas as pd

        nodes = pd.DataFrame(
            [(n.key, n.kind, n.title, " · ".join(x for x in n.lines if x),
              n.value_text or "") for n in self.view.nodes.values()],
            columns=["id", "kind", "title", "details", "value"])
        edges = pd.DataFrame([(e.src, e.dst, ", ".join(t for t in e.tensors if t), e.label)
                              for e in self.view.edges],
                             columns=["source", "target", "tensors", "shape"])
        return ("<div class='onnx-lab-render'><b>Graph view without an image</b>"
                f"{self._notes_html()}"
                + frame_html(nodes, caption=f"{len(nodes)} drawn elements")
                + frame_html(edges, caption=f"{len(edges)} edges")
                + "<details><summary>DOT source</summary><pre style='font-size:80%'>"
                + esc_text(self.dot) + "</pre></details></div>")

    # -- files ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the view to ``path``; the suffix picks the format: .svg, .png, .pdf, .dot/.gv.

        PNG and PDF run Graphviz again with the settings that produced the SVG.

        Raises:
            RenderError: unknown suffix; no ``dot`` on PATH (the message names the install
                command) or no layout within the timeout, for svg/png/pdf.
            SaveError: the file cannot be written (WriteError; the old file is kept), or it
                is the drawn model or one of its data files.
        """
        path = Path(path)
        inputs = input_files(self._sources)
        refuse_inputs(path, inputs)
        fmt = path.suffix.lower().lstrip(".")
        if fmt in ("dot", "gv"):
            data: bytes = self.dot.encode("utf-8")
        elif fmt == "svg":
            if self.svg is None:
                if _dot.find_dot() is None:
                    raise RenderError(f"Cannot write {str(path)!r}: no SVG because the "
                                      "Graphviz 'dot' binary is not on PATH.",
                                      fix=_dot.INSTALL_HINT + " Or save as .dot.")
                raise RenderError(f"Cannot write {str(path)!r}: the view has no SVG "
                                  f"({'; '.join(self.notes[-1:])}).",
                                  fix="Draw fewer nodes or raise timeout=, or save as .dot.")
            data = self.svg.encode("utf-8")
        elif fmt in ("png", "pdf"):
            try:
                data = _dot.run_graphviz(self.dot, fmt, engine=self.engine or "dot",
                                         args=self._args, timeout=max(self._timeout, 30.0))
            except subprocess.TimeoutExpired as e:
                raise RenderError(f"Graphviz did not write {fmt} within "
                                  f"{max(self._timeout, 30.0):g} s.",
                                  fix="Draw fewer nodes, or save as .svg/.dot.") from e
        else:
            check_save_suffix(path)
        # a fresh temporary renamed over the file: a full disk leaves the old one intact
        return write_atomic(path, data, sources=inputs)


def check_save_suffix(path: str | Path) -> None:
    """RenderError unless ``path``'s suffix is one :meth:`Rendering.save` writes (the CLI
    asks before it draws: a layout of seconds was thrown away for a typo)."""
    path = Path(path)
    if path.suffix.lower().lstrip(".") not in SAVE_FORMATS:
        kind = path.suffix or "a file without suffix"
        raise RenderError(f"Cannot save a rendering as {kind!r} ({str(path)!r}).",
                          fix="Use a .svg, .png, .pdf or .dot path.")


#: The suffixes :meth:`Rendering.save` writes.
SAVE_FORMATS = ("svg", "png", "pdf", "dot", "gv")


# ----------------------------------------------------------------------------- selection
def _as_list(x: Any, what: str = "nodes") -> list:
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    if not isinstance(x, Iterable) or isinstance(x, (bytes, Mapping)):
        raise InputError(f"{what} must be a node id, a tensor name or a list of them, got "
                         f"{type(x).__name__} {x!r:.60}.",
                         fix=f"Pass e.g. {what}='/stem/conv/Conv' (lab.nodes.node_id lists "
                         "the ids).")
    return list(x)


def _resolve_name(idx: ModelIndex, name: str, what: str) -> list[str]:
    """Node ids for a node id or a tensor name (its producer, else its consumers)."""
    name = str(name)
    if name in idx.entries:
        return [name]
    if name in idx.producer:
        return [idx.producer[name]]
    if name in idx.consumers:
        return list(idx.consumers[name])
    raise unknown_name(f"node id or tensor name in {what}", name,
                       list(idx.entries) + list(idx.values),
                       fix="Use ids from lab.nodes.node_id or names from lab.tensors.name.")


def _resolve_nodes(idx: ModelIndex, nodes: Any) -> list[str] | None:
    """``nodes`` as node ids: ids/tensor names, a DataFrame with node_id, or a boolean mask."""
    if nodes is None:
        return None
    import pandas as pd

    if isinstance(nodes, pd.DataFrame):
        if "node_id" not in nodes.columns:
            raise RenderError("nodes= DataFrame has no 'node_id' column.",
                              fix="Pass rows of lab.nodes, e.g. lab.nodes.query(\"op_type == "
                              "'Conv'\").")
        ids = [str(x) for x in nodes["node_id"]]
    elif isinstance(nodes, pd.Series) and nodes.dtype == bool:
        # lab.nodes has one row per index entry, in the index's order.
        table = list(idx.entries)
        if len(nodes) != len(table):
            raise RenderError(f"nodes= boolean mask has {len(nodes)} rows, lab.nodes has "
                              f"{len(table)}.", fix="Build the mask from lab.nodes.")
        ids = [nid for nid, keep in zip(table, nodes.to_numpy()) if keep]
    else:
        ids = [str(x) for x in _as_list(nodes)]
    out: list[str] = []
    for x in ids:
        out.extend(_resolve_name(idx, x, "nodes"))
    return list(dict.fromkeys(out))


def _neighbours(idx: ModelIndex, nid: str, graph: str, up: bool, fold: bool) -> list[str]:
    e = idx.entries[nid]
    out: list[str] = []
    if up:
        names = [v.name for v in e.node.inputs if v is not None and v.name]
        names.extend(e.implicit_inputs)
        for t in names:
            p = idx.producer.get(t)
            if p is not None and idx.entries[p].graph == graph:
                if not (fold and is_folded_constant(idx.entries[p].node)):
                    out.append(p)
    else:
        for o in e.node.outputs:
            for c in idx.consumers.get(o.name, ()):
                owner = owner_in_graph(idx, c, graph)
                if owner is not None and owner != nid:
                    out.append(owner)
    return out


def _neighbourhood(idx: ModelIndex, seeds: Sequence[str], graph: str, radius: int,
                   direction: str, fold: bool) -> list[str]:
    """Seeds first, then nodes by hop distance (upstream and downstream BFS, not mixed)."""
    dist: dict[str, int] = {s: 0 for s in seeds}
    order = list(seeds)
    for up in ((True, False) if direction == "both" else ((direction == "up"),)):
        seen = {s: 0 for s in seeds}
        q = deque(seeds)
        while q:
            n = q.popleft()
            d = seen[n]
            if d >= radius:
                continue
            for m in _neighbours(idx, n, graph, up, fold):
                if m not in seen:
                    seen[m] = d + 1
                    q.append(m)
                    if m not in dist or dist[m] > d + 1:
                        dist[m] = d + 1
    seed_set = set(seeds)
    order.extend(n for n in dist if n not in seed_set)
    # Stable by distance: nearer nodes survive a cut.
    return sorted(order, key=lambda n: dist[n])


def _in_graph(idx: ModelIndex, ids: Iterable[str], graph: str) -> tuple[list[str], list[str]]:
    """Map ids into ``graph`` (a body node stands for its owner there); (mapped, dropped)."""
    kept: dict[str, None] = {}  # ordered, and a set: a list's `in` made a box's view of
    dropped: list[str] = []     # 12,481 members 11 s (the report pre-draws every box)
    for nid in ids:
        owner = owner_in_graph(idx, nid, graph)
        if owner is None:
            dropped.append(nid)
        else:
            kept.setdefault(owner)
    return list(kept), dropped


def _check_args(radius, direction, max_nodes, timeout) -> None:
    if isinstance(radius, bool) or not isinstance(radius, int) or radius < 0:
        raise RenderError(f"radius={radius!r} must be an int >= 0.",
                          fix="Use radius=0 for the nodes alone, radius=2 for two hops.")
    if direction not in _DIRECTIONS:
        raise RenderError(f"direction={direction!r} is not one of {_DIRECTIONS}.",
                          fix="Use 'up' (producers), 'down' (consumers) or 'both'.")
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise RenderError(f"max_nodes={max_nodes!r} must be an int >= 1.",
                          fix="Use max_nodes=300 (the default) or another positive cap.")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0 \
            or math.isnan(timeout):
        raise RenderError(f"timeout={timeout!r} must be a positive number of seconds.",
                          fix="Use timeout=10.")


# ----------------------------------------------------------------------------- entry point
@strict_keywords  # the results' .render(**kw) pass their keywords here: a typo is an InputError
def render_model(model: LabModel, nodes: Any = None, *, around: str | Iterable[str] | None = None,
                 radius: int = 2, direction: str = "both", graph: str = "",
                 collapse: int | str | None = None, expand: str | Iterable[str] | None = None,
                 max_nodes: int = 300, show_initializers: bool = False, show_shapes: bool = True,
                 overlay: pd.Series | Mapping[str, float] | None = None,
                 overlay_label: str | None = None, overlay_log: bool | None = None,
                 highlight: Iterable[str] | Mapping[str, str] | None = None,
                 timeout: float = 10, title: str | None = None,
                 dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None) -> Rendering:
    """Draw part of a model: chosen nodes, a neighbourhood, collapsed scopes, with overlays.

    Args:
        model: the LabModel (``lab.model``; ``lab.render`` passes the Lab's dims/shapes).
        nodes: node ids (or tensor names: their producers), rows of ``lab.nodes`` (a DataFrame
            with ``node_id``), or a boolean Series aligned with ``lab.nodes``. None: all nodes
            of ``graph`` (unless ``around`` is given).
        around: node ids or tensor names whose neighbourhood is drawn.
        radius: hops from ``around`` (0: the nodes alone).
        direction: 'up' (producers), 'down' (consumers) or 'both'.
        graph: '' (main) or a body path such as ``'If_0/then_branch'``; values a body reads
            from enclosing graphs are drawn as dashed inputs. When left '' and every requested
            node lies in one body, that body is drawn.
        collapse: None, ``'auto'`` (the deepest scope depth whose view fits ``max_nodes``) or
            a scope depth >= 1. Without scopes, repeated blocks or topological chunks.
        expand: scope (e.g. ``'/layer.3'``) drawn open inside a collapsed view.
        max_nodes: most drawn nodes/boxes; over it the view is cut in topological (or
            hop-distance) order and "+N more" stubs mark the boundary.
        show_initializers: draw weights and Constant nodes as nodes (else summarized inside
            their consumers as "W 64×3×7×7").
        show_shapes: label edges with shape and dtype (after shape inference with dims/shapes).
        overlay: numbers keyed by node id or tensor name (a tensor's value goes to its
            producer): fill colour and a label line; collapsed boxes show the max (the sum for
            labels ending in ``_ms`` or containing ``time``).
        overlay_label: name of the quantity in labels and legend (default: the Series name).
        overlay_log: log colour scale; None: auto (values >= 0 spanning more than 3 decades).
        highlight: node ids/tensor names to outline, or ``{node_id: colour}``.
        timeout: seconds per layout attempt (dot, dot with cheap settings, sfdp).
        title: a title drawn above the graph.
        dims, shapes: symbolic dims / input shapes for edge shapes.

    Returns:
        A :class:`Rendering` (``.svg`` None with an explanation in ``.notes`` when ``dot`` is
        missing or every layout timed out; never raises for those).

    Raises:
        UnknownNameError: unknown node id/tensor name in nodes/around/highlight, unknown graph
            path, unknown scope in expand.
        RenderError: radius < 0, bad direction/collapse/max_nodes/timeout, ``around`` outside
            the requested graph.

    Example:
        >>> lab = onnx_lab.open("sample:transformer_block")
        >>> r = render_model(lab.model, around="/layer.0/attention/core/Softmax", radius=2)
        >>> r.nodes[:3], r.notes
    """
    t0 = time.perf_counter()
    if not hasattr(model, "types") and hasattr(model, "model"):
        model = model.model  # a Lab passed instead of a LabModel: use its current model
    _check_args(radius, direction, max_nodes, timeout)
    collapse = _collapse.check_collapse(collapse)
    idx = model.index
    graph = graph or ""
    idx.graph(graph)  # UnknownNameError listing the known paths
    notes: list[str] = []
    fold = not show_initializers
    graph, picked, seeds = _requested(idx, nodes, around, graph, notes)
    selected, plan = _select(model, graph, picked, seeds, radius, direction, collapse, expand,
                             max_nodes, fold, notes)
    types = model.types(dims, shapes) if show_shapes else {}
    view = build_view(model, graph, selected, groups=plan.groups, types=types,
                      show_initializers=show_initializers, show_shapes=show_shapes,
                      expanded=plan.expanded)
    _label_boxes(view, idx)
    notes.extend(view.notes)
    if overlay is not None:
        _apply_overlay(view, idx, overlay, overlay_label, overlay_log, notes)
    if highlight is not None:
        _apply_highlight(view, idx, highlight, notes)
    view.title = title
    source = _dot.to_dot(view)
    lay = _dot.layout(source, timeout=float(timeout), elements=len(view.nodes))
    notes.extend(lay.notes)
    edges = [(e.src, e.dst, t) for e in view.edges for t in (e.tensors or [""])]
    groups = {n.key.split(":", 1)[1]: list(n.node_ids) for n in view.nodes.values()
              if n.kind == "box"}
    return Rendering(dot=source, svg=lay.svg, nodes=view.op_node_ids(), edges=edges,
                     notes=notes, groups=groups, graph=graph, view=view, engine=lay.engine,
                     args=lay.args, timeout=float(timeout),
                     seconds=time.perf_counter() - t0, source=model)


def _requested(idx: Any, nodes: Any, around: str | Iterable[str] | None, graph: str,
               notes: list[str]) -> tuple[str, list[str] | None, list[str] | None]:
    """(the graph drawn, the picked node ids in it or None, the ``around`` seeds in it or
    None). An unspecified graph follows the nodes asked for when they all lie in one body."""
    picked = _resolve_nodes(idx, nodes)
    seeds: list[str] | None = None
    if around is not None:
        seeds = []
        for name in _as_list(around, "around"):
            seeds.extend(_resolve_name(idx, name, "around"))
        seeds = list(dict.fromkeys(seeds))
        if not seeds:
            raise RenderError("around= is empty.", fix="Pass node ids or tensor names.")
    if not graph:
        asked = (picked or []) + (seeds or [])
        gs = {idx.entries[n].graph for n in asked}
        if len(gs) == 1 and "" not in gs:
            graph = gs.pop()
            notes.append(f"drawing graph {graph!r}, where the requested nodes lie.")
    if seeds is not None:
        mapped, dropped = _in_graph(idx, seeds, graph)
        if dropped:
            raise RenderError(f"around={dropped[0]!r} lies in graph "
                              f"{idx.entries[dropped[0]].graph!r}, not in {graph!r}.",
                              fix=f"Pass graph={idx.entries[dropped[0]].graph!r}.")
        seeds = mapped
    if picked is not None:
        picked, dropped = _in_graph(idx, picked, graph)
        if dropped:
            notes.append(f"{len(dropped)} requested node(s) lie outside graph {graph!r} and "
                         f"are not drawn (e.g. {dropped[0]!r}).")
    return graph, picked, seeds


def _select(model: LabModel, graph: str, picked: list[str] | None, seeds: list[str] | None,
            radius: int, direction: str, collapse: Any, expand: Any, max_nodes: int,
            fold: bool, notes: list[str]) -> tuple[list[str], _collapse.CollapsePlan]:
    """(the node ids drawn, in topological order; the collapse plan): the neighbourhood of
    the seeds and the picked nodes (every node without either), collapsed into boxes or cut
    to ``max_nodes``."""
    idx = model.index
    topo_all = idx.topo_order(graph)
    pos = {n: i for i, n in enumerate(topo_all)}
    if picked is None and seeds is None:
        order = topo_all
    else:
        order = list(seeds and _neighbourhood(idx, seeds, graph, radius, direction, fold) or [])
        order.extend(sorted((picked or []), key=pos.__getitem__))
        order = list(dict.fromkeys(order))

    def live(ids: Iterable[str]) -> list[str]:
        return [n for n in ids if not (fold and is_folded_constant(idx.entries[n].node))]

    # Cut before collapsing only when not collapsing: boxes are how big views fit.
    plan = _collapse.CollapsePlan()
    if collapse is None and expand is None:
        drawn = live(order)
        if len(drawn) > max_nodes:
            notes.append(f"cut: drawing {max_nodes} of {len(drawn)} nodes (max_nodes="
                         f"{max_nodes}); '+N more' stubs mark the boundary. Use "
                         "collapse='auto', around=... or a larger max_nodes.")
            keep = set(drawn[:max_nodes])
            order = [n for n in order if n in keep]
    else:
        order_topo = sorted(order, key=pos.__getitem__)
        plan = _collapse.plan_collapse(model, graph, order_topo, collapse, max_nodes, expand,
                                       fold_constants=fold)
        notes.extend(plan.notes)
        order = _cut_units(order_topo, order, plan, live, max_nodes, notes,
                           users=lambda n: _users_in_graph(idx, n, graph))
    selected = sorted(order, key=pos.__getitem__)
    if not selected:
        notes.append("nothing to draw: the selection is empty.")
    return selected, plan


def _users_in_graph(idx: ModelIndex, nid: str, graph: str) -> set[str]:
    """The nodes of ``graph`` that read an output of ``nid`` (a body's reader: its owner)."""
    out: set[str] = set()
    for o in idx.entries[nid].node.outputs:
        for c in idx.consumers.get(o.name, ()):
            owner = owner_in_graph(idx, c, graph)
            if owner is not None:
                out.add(owner)
    return out


def _cut_units(order: list[str], priority: list[str], plan: _collapse.CollapsePlan, live,
               max_nodes: int, notes: list[str], users=None) -> list[str]:
    """Keep the first ``max_nodes`` drawn units (boxes count once) in ``priority`` order
    (hop distance for neighbourhoods, else topological). A folded Constant (not a unit: drawn
    inside its consumer) stays only when a consumer it feeds stays (``users``); every
    Constant of the cut part was drawn on its own, with a '+N more' stub: 1,393 of them, a
    260,000 px wide drawing, for the cut expand of a 24-layer Llama's root box."""
    box_of = {m: k for k, g in plan.groups.items() for m in g.members}
    units: list[str] = []
    seen: set[str] = set()
    for n in live(priority):
        u = box_of.get(n, n)
        if u not in seen:
            seen.add(u)
            units.append(u)
    if len(units) <= max_nodes:
        return order
    keep_units = set(units[:max_nodes])
    notes.append(f"cut: drawing {max_nodes} of {len(units)} boxes/nodes (max_nodes="
                 f"{max_nodes}); '+N more' stubs mark the boundary.")
    for k in list(plan.groups):
        if k not in keep_units:
            del plan.groups[k]
    live_set = set(live(order))
    kept = {n for n in order if n in live_set and box_of.get(n, n) in keep_units}
    return [n for n in order if n in kept or (
        n not in live_set and (users is None or not users(n).isdisjoint(kept)))]


def _label_boxes(view: GraphView, idx: ModelIndex) -> None:
    """Box labels: scope, node count and the most frequent op types."""
    from collections import Counter

    for n in view.nodes.values():
        if n.kind != "box":
            continue
        ops = Counter(idx.entries[m].node.op_type for m in n.node_ids)
        top = ", ".join(f"{op}×{c}" for op, c in ops.most_common(3))
        more = len(ops) - 3
        n.lines = [f"{len(n.node_ids)} nodes", top + (f", +{more} types" if more > 0 else "")]
        n.tooltip = f"{n.title}: {len(n.node_ids)} nodes; expand={n.key.split(':', 1)[1]!r}"


def _apply_overlay(view: GraphView, idx: ModelIndex, overlay, label: str | None,
                   log: bool | None, notes: list[str]) -> None:
    values, more = resolve_overlay(idx, overlay)
    notes.extend(more)
    label = label or (str(overlay.name) if getattr(overlay, "name", None) is not None
                      else "value")
    scale = make_scale(list(values.values()), log=log, label=label)
    if scale is None and values:
        notes.append("overlay: no finite value; NaN/Inf nodes are marked.")
    above = 0
    for n in view.nodes.values():
        if n.kind not in ("op", "box"):
            continue
        vals = [values[m] for m in n.node_ids if m in values]
        if not vals:
            if n.kind == "op" or scale is not None:
                n.fill = "#f4f4f4"
            continue
        v = vals[0] if n.kind == "op" else aggregate(vals, label)
        n.value = v
        n.value_text = f"{label} {format_value(v)}"
        if scale is not None and math.isfinite(v) and v > scale.vmax:
            # A collapsed block's sum (times) can pass the largest node value the scale is
            # made of: it gets the top colour, and says so.
            n.value_text += " ▲ above the scale"
            above += 1
        fill = scale.color(v) if scale is not None else "#c51b8a"
        n.fill = fill
        n.font_color = scale.font_for(fill) if scale is not None else "white"
    if scale is not None:
        view.legend = scale
    if above:
        notes.append(f"overlay: {above} collapsed block(s) sum above the colour scale's max "
                     f"({format_value(scale.vmax)}): drawn in its top colour, marked ▲.")


def _apply_highlight(view: GraphView, idx: ModelIndex, highlight, notes: list[str]) -> None:
    if isinstance(highlight, Mapping):
        items = [(str(k), str(v)) for k, v in highlight.items()]
    else:
        items = [(str(k), _dot.HIGHLIGHT_COLOR) for k in _as_list(highlight)]
    colour: dict[str, str] = {}
    for name, c in items:
        for nid in _resolve_name(idx, name, "highlight"):
            colour[nid] = c
    drawn = {m for n in view.nodes.values() if n.kind in ("op", "box") for m in n.node_ids}
    # A highlighted Constant drawn inside its consumers' labels outlines those consumers.
    inside: set[str] = set()
    for nid, c in list(colour.items()):
        e = idx.entries.get(nid)
        if nid in drawn or e is None or not is_folded_constant(e.node):
            continue
        users = [u for v in e.node.outputs for u in idx.consumers.get(v.name, ()) if u in drawn]
        for u in users:
            colour.setdefault(u, c)
        if users:
            inside.add(nid)
    shown: set[str] = set(inside)
    for n in view.nodes.values():
        if n.kind not in ("op", "box"):
            continue
        shown.update(n.node_ids)
        for m in n.node_ids:
            if m in colour:
                n.outline = colour[m]
                break
    missing = [k for k in colour if k not in shown]
    if missing:
        notes.append(f"highlight: {len(missing)} node(s) are outside this view "
                     f"(e.g. {missing[0]!r}).")
