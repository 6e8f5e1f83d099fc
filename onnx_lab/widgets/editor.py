"""Editor: the graph canvas with an edit panel bound to the selected node, input or output.

Select a node on the canvas (or call :meth:`Editor.select`) and the panel offers the edits that
apply: its attributes with typed fields from the op schema, rename, removal (reconnect, cascade
with the list of what goes, or outputs as inputs), and for its output tensors: add as graph
output, rename, insert a node after it; for its initializer inputs: replace from a .npy/.npz or
scale. A graph input offers rename and shape; a graph output rename and removal. Every edit is
one Lab call (shown under the widget), a verified step of ``lab.history``; errors stay inside
the widget (at the top and beside the form) and leave the model as it was. After an edit the
canvas keeps the user's zoom and selection: the edited element (or what took the place of a
removed one) stays where it was on the screen. Undo/redo move through the history, the table
shows it, *Save* writes the current version (``lab.save``), and :meth:`Editor.script` is the
session as a Python script.

Example:
    >>> ed = lab.edit()
    >>> ed.select("/stem/bn/BatchNormalization")
    >>> ed.attribute.value = "epsilon"; ed.attr_value.value = "1e-3"; ed.set_attr_button.click()
    >>> ed.code.value   # Python: lab.set_attribute('/stem/bn/BatchNormalization', 'epsilon', 0.001)
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import ipywidgets as w
import numpy as np

from onnx_lab.core.history import step_call
from onnx_lab.core.shapes import value_type
from onnx_lab.errors import InputError, LabError
from onnx_lab.lab import as_lab
from onnx_lab.numerics.verify import failed_where
from onnx_lab.render._html import esc_text
from onnx_lab.render.graph import owner_in_graph, shape_text
from onnx_lab.transforms.edit import (
    EDIT_OPS,
    attribute_form,
    edit_provenance,
    parse_attribute_text,
)
from onnx_lab.widgets._common import View, code_html, error_html, history_html, info_html

__all__ = ["Editor"]

_WIDE = w.Layout(width="300px")
_CANVAS_MIN_PX = 360  # below this beside the form, the form goes under the canvas
_FORM_PX = 470  # the form column: fixed, so a long attribute doc never narrows the canvas
_FORM_MIN_PX = 330  # ... down to this on a narrow row (its fields are 300 px)
_CANVAS_ROOM_PX = 500  # the canvas's share of a row before the form narrows
_READ_K = 1.0  # the least zoom of a neighbourhood view: labels at their drawn size (the 1:1)


def _button(text: str, tip: str = "", style: str = "") -> w.Button:
    return w.Button(description=text, tooltip=tip or text, button_style=style,
                    layout=w.Layout(width="auto", flex="0 0 auto"))


def _row_field() -> w.Layout:
    """A field sharing a line with its button: up to the 300 px of the form's other fields,
    narrower on a narrow form (348 px beside the canvas of a 1280 px window) so the button
    stays on the field's line."""
    return w.Layout(width="auto", flex="1 1 auto", min_width="150px", max_width="300px")


def _row(children: list[w.Widget]) -> w.HBox:
    """A field and its button(s) on one line, never wrapped."""
    return w.HBox(children, layout=w.Layout(flex_flow="row nowrap", align_items="center",
                                            width="100%"))


def _json_field(text: str, what: str, default: Any) -> Any:
    if not text.strip():
        return default
    try:
        return json.loads(text)
    except ValueError as e:
        raise InputError(f"{what} {text!r} is not JSON.",
                         fix='Write e.g. {"axis": 1} for attributes, [0.5] for inputs.') from e


_NODE_G = re.compile(r'<g id="n:([^"]*)" class="node[^"]*">(.*?)</g>\s*</g>', re.S)
_PAIR = re.compile(r"(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?)")
_ELLIPSE = re.compile(r'<ellipse[^>]*cx="(-?[\d.]+)" cy="(-?[\d.]+)"')
_GRAPH_T = re.compile(r'<g id="graph0"[^>]*transform="scale\(([\d.]+)(?: ([\d.]+))?\)'
                      r'[^"]*translate\((-?[\d.]+) (-?[\d.]+)\)"')


def drawn_centres(svg: str | None, drawn: Mapping[str, str] | None = None
                  ) -> dict[str, tuple[float, float]]:
    """Centre of every drawn element of a graphviz SVG, by drawn key, in the drawing's own
    units (what the canvas's view ``{x, y, k}`` maps to the screen: screen = centre * k + x).
    ``drawn``: the drawing's map of SVG ids to keys (``rendering.drawn``), so an element whose
    SVG id is not its key (a control character as its picture, a long name cut:
    :func:`~onnx_lab.render._html.dot_safe`) is found by its key.

    Read from the SVG text (the shapes' points), so Python can keep an element where it was
    on the screen when a redraw moves it in the layout.
    """
    if not svg:
        return {}
    t = _GRAPH_T.search(svg)
    sx, sy, tx, ty = 1.0, 1.0, 0.0, 0.0
    if t:
        sx = float(t.group(1))
        sy = float(t.group(2) or t.group(1))
        tx, ty = float(t.group(3)), float(t.group(4))
    out: dict[str, tuple[float, float]] = {}
    real = drawn or {}
    for m in _NODE_G.finditer(svg):
        body = m.group(2)
        shape = re.search(r'\s(?:points|d)="([^"]*)"', body)
        pts = [(float(a), float(b)) for a, b in _PAIR.findall(shape.group(1))] if shape else []
        if not pts:
            e = _ELLIPSE.search(body)
            pts = [(float(e.group(1)), float(e.group(2)))] if e else []
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        cx, cy = (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2
        key = html.unescape(m.group(1))
        out[real.get(key, key)] = ((cx + tx) * sx, (cy + ty) * sy)
    return out


def _inside(at: float, size: float, margin: float) -> float:
    """``at`` moved into ``[margin, size - margin]`` (the margin at most a quarter of size)."""
    m = min(margin, size / 4)
    return min(max(at, m), size - m)


def _fmt(x: Any) -> str:
    # ONNX float attributes are float32: show the shortest text that reads back the same
    return str(np.float32(x)) if isinstance(x, float) else str(x)


class Editor(View):
    """Edit a model on its graph: each edit a verified, undoable step.

    Args:
        lab: a Lab (or anything ``onnx_lab.open`` takes).
        height: canvas height in px.
        neighbourhood: when the whole drawing has more elements than this, an edit, undo or
            redo redraws only the neighbourhood of what it changed (``lab.render(around=...,
            radius=radius)``) and *Show whole graph* lays the whole one out again; None or 0:
            always the whole drawing.
        radius: hops around the changed nodes in a neighbourhood view.

    Attributes:
        lab: the Lab edited (its history holds every step).
        canvas: the :class:`~onnx_lab.widgets.canvas.GraphCanvas` (``canvas.selected``).
        target: what the panel edits: ``("node", id)``, ``("input", name)``,
            ``("output", name)`` or None.
        result: the PassResult of the last edit (or the removal plan after *preview*).
        panel, message, history_html: the edit form, the last step's verdict, the history.
        form_error: a refused edit, shown beside the form (and in ``status``).
        save_path, overwrite, save_button: *Save* (``lab.save``; over the source file only
            with *overwrite* ticked, ``overwrite=True``).
        partial: True while the canvas shows the neighbourhood of the last edit;
            ``whole_button`` (*Show whole graph*, :meth:`show_whole`) and ``scope_note`` above
            the canvas say so.

    After an edit, undo or redo the canvas keeps ``canvas.view["k"]`` (at least 1:1 in a
    neighbourhood view) and sets the pan so the selected element (or the one that took its
    place) stays where it was on the screen; the widget has the class ``onnx-lab-ed-busy``
    until that redraw is done.
    """

    def __init__(self, lab: Any, *, height: int = 520, neighbourhood: int | None = 150,
                 radius: int = 3) -> None:
        from onnx_lab.widgets.canvas import GraphCanvas

        for what, v in (("neighbourhood", neighbourhood), ("radius", radius)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise InputError(f"Editor({what}={v!r}): it must be an int >= 0.",
                                 fix="Use e.g. Editor(lab, neighbourhood=150, radius=3); "
                                 "neighbourhood=None always redraws the whole graph.")
        self.lab = as_lab(lab)
        self.neighbourhood = neighbourhood or 0
        self.radius = radius
        self.partial = False
        self._full_size = 0  # drawn elements of the last whole drawing
        self.result: Any = None
        self.target: tuple[str, str] | None = None
        self._form_node: str | None = None  # the node whose form is shown
        self._expand: list[str] = []
        self.canvas = GraphCanvas(self.lab, height=height)
        self.canvas.keep_view = True  # a redraw after an edit keeps the pan and zoom
        # beside the form from a width of its own (the row wraps below that): a basis of its
        # content's width made the form wrap under the canvas whenever the view's title was
        # long (a whole 2,000-node graph) and come back beside it on a short one (the
        # neighbourhood of an edit), so the canvas changed width under the user after an edit
        self.canvas.layout.flex = "1 1 0%"
        self.canvas.layout.min_width = f"{_CANVAS_MIN_PX}px"
        self.canvas.on_select(self._guard(self._selected))
        self.canvas.on_expand = self._guard(self._expand_box)
        # If/Loop/Scan bodies are drawn in the Explorer; here a double click says so (the
        # page had shown "opening …" with nothing to come)
        self.canvas.on_open = self._guard(self._body_note)
        # The form beside the canvas is this widget's details panel: the canvas's own panel
        # would float over the (narrower) drawing and hide the nodes being clicked, and the
        # page moved the view away from it. Its error panels still show.
        self.canvas.float_details = False

        # node form
        self.attribute = w.Dropdown(description="attribute", options=[], layout=_WIDE)
        self.attr_hint = w.HTML("")
        self.attr_value = w.Text(description="value", layout=_row_field())
        self.set_attr_button = _button("Set attribute", style="primary")
        self.node_name = w.Text(description="new name", layout=_row_field())
        self.rename_node_button = _button("Rename node")
        self.remove_mode = w.Dropdown(description="remove", layout=_WIDE, options=[
            # short enough to read whole in the form's 210 px dropdown ("reconnect its input
            # to its consum" was all it showed); the tooltip says what each does
            ("reconnect (bypass it)", "reconnect"),
            ("cascade (all after it)", "cascade"),
            ("outputs become inputs", "inputs")], value="reconnect")
        self.remove_mode.tooltip = ("reconnect: its input goes to its consumers; cascade: it "
                                    "and everything after it; inputs: its outputs become "
                                    "model inputs")
        self.preview_button = _button("Preview removal", "list what would be removed")
        self.remove_button = _button("Remove", style="danger")
        # tensor form (outputs of the node, or the selected input/output)
        self.tensor = w.Dropdown(description="tensor", options=[], layout=_WIDE)
        self.add_output_button = _button("Add as graph output")
        self.tensor_name = w.Text(description="new name", layout=_row_field())
        self.rename_tensor_button = _button("Rename tensor")
        self.op_type = w.Combobox(description="insert op", options=list(EDIT_OPS),
                                  value="Identity", ensure_option=False, layout=_WIDE)
        self.op_attributes = w.Text(description="attributes", placeholder='{"axis": -1}',
                                    layout=_WIDE)
        self.op_inputs = w.Text(description="inputs", placeholder="[0.5] (constants)",
                                layout=_WIDE)
        self.add_node_button = _button("Insert after tensor")
        self.shape = w.Text(description="shape", placeholder="1x3x224x224",
                            layout=_row_field())
        self.shape_button = _button("Set input shape")
        self.remove_output_button = _button("Remove graph output", style="danger")
        # initializer form
        self.initializer = w.Dropdown(description="weight", options=[], layout=_WIDE)
        self.init_path = w.Text(description="from file", placeholder="w.npy or w.npz",
                                layout=_row_field())
        self.replace_button = _button("Replace weight")
        self.factor = w.FloatText(description="factor", value=1.0, layout=_row_field())
        self.scale_button = _button("Scale weight")
        # history
        self.undo_button = _button("Undo")
        self.redo_button = _button("Redo")
        self.save_path = w.Text(description="save as", placeholder="edited.onnx",
                                layout=_WIDE)
        # the source is written over only when this is ticked (lab.save's overwrite=True,
        # which a refused save names as the fix)
        self.overwrite = w.Checkbox(value=False, description="overwrite", indent=False,
                                    layout=w.Layout(width="100px"))
        self.save_button = _button("Save", "write the current version (checked to load in "
                                   "a fresh onnxruntime session; over the source only with "
                                   "'overwrite' ticked)")
        self.message = w.HTML("")
        self.history_html = w.HTML("")
        self.title = w.HTML("")
        self.panel = w.VBox([])
        self.form_error = w.HTML("")  # a refused edit, next to the form it came from
        self.scope_note = w.HTML("")
        self.whole_button = _button("Show whole graph", "lay out and show the whole graph")
        self.scope_bar = w.HBox([self.scope_note, self.whole_button],
                                layout=w.Layout(display="none", align_items="center"))

        for b, fn in ((self.set_attr_button, self.set_attribute),
                      (self.rename_node_button, self.rename_node),
                      (self.preview_button, self.preview_removal),
                      (self.remove_button, self.remove),
                      (self.add_output_button, self.add_output),
                      (self.rename_tensor_button, self.rename_tensor),
                      (self.add_node_button, self.add_node),
                      (self.shape_button, self.set_shape),
                      (self.remove_output_button, self.remove_output),
                      (self.replace_button, self.replace_initializer),
                      (self.scale_button, self.scale_initializer),
                      (self.undo_button, self.undo), (self.redo_button, self.redo),
                      (self.whole_button, self.show_whole),
                      (self.save_button, self.save)):
            b.on_click(self._guard(lambda _b, fn=fn: fn()))
        self.attribute.observe(self._guard(self._attr_picked), names="value")
        # class names for the browser test and for styling
        for name in ("attribute", "attr_value", "set_attr_button", "node_name",
                     "rename_node_button", "remove_mode", "preview_button", "remove_button",
                     "tensor", "add_output_button", "tensor_name", "rename_tensor_button",
                     "op_type", "op_attributes", "op_inputs", "add_node_button", "shape",
                     "shape_button", "remove_output_button", "initializer", "init_path",
                     "replace_button", "factor", "scale_button", "undo_button", "redo_button",
                     "save_path", "overwrite", "save_button", "scope_note", "whole_button",
                     "scope_bar",
                     "message", "history_html", "title", "panel", "form_error"):
            getattr(self, name).add_class("onnx-lab-ed-" + name.replace("_", "-"))
        self._result_panels = (self.message,)
        # the neighbourhood line is a row of its own above the canvas and the form: wrapping
        # the canvas in a column would change how the row shares its width
        # the form's width is its own (a long attribute doc never narrows the canvas), down
        # to _FORM_MIN_PX when the row is short: a 1280 px window left the canvas 378 px.
        # The row wraps (frame.css), so flex-shrink never narrowed the form: a row too short
        # for 360 + 470 px put the form under the canvas instead. Its width is worked out from
        # the row's instead (percent: of the row), leaving the canvas _CANVAS_ROOM_PX first.
        form = w.VBox([self.title, self.form_error, self.panel],
                      layout=w.Layout(width=f"clamp({_FORM_MIN_PX}px, calc(100% - "
                                            f"{_CANVAS_ROOM_PX}px), {_FORM_PX}px)",
                                      min_width=f"{_FORM_MIN_PX}px", flex="0 0 auto"))
        super().__init__([self.scope_bar, w.HBox([self.canvas, form]),
                          self.message, w.HBox([self.undo_button, self.redo_button, self.save_path,
                                  self.overwrite, self.save_button]),
                          self.history_html])
        self.add_class("onnx-lab-editor")
        self._defer(self._redraw, "Drawing the graph…")  # after the frame shows

    # ------------------------------------------------------------------ selection
    def select(self, name: str) -> None:
        """Edit ``name``: a node id, ``input:NAME`` / ``output:NAME``, or a graph input or
        output name (what a click on the canvas does)."""
        inside = name in self.lab.index.entries and not self.lab.index.entries[name].graph
        # a node of the main graph in a collapsed box: the box opens (on_expand) and the node
        # is selected; a body node is edited from the form (the Editor draws the main graph)
        key = self.canvas.reveal(name) if inside else self.canvas.focus(name)
        if key != name:
            self._target_for(name)  # not drawn as itself: edit it anyway
            self._build_panel()

    def _body_note(self, graph: str) -> None:
        self.canvas.clear_busy()
        self.message.value = info_html(
            f"The Editor draws the main graph: the body {graph!r} is drawn in the Explorer "
            "(lab.explore(), double-click its node). Its nodes are edited here: search one "
            "and press Enter, or ed.select(node_id).")

    def _signature_html(self, kind: str, name: str) -> str:
        """The selected element's tensors with dtype and shape (what the canvas panel said)."""
        m = self.lab.model
        types = m.types(dims=self.lab.dims or None)

        def tensors(values: Any) -> str:
            return ", ".join(f"{v.name} [{shape_text(value_type(m, v, types))}]"
                             for v in values if v is not None and v.name) or "none"

        if kind == "node":
            node = m.index.node(name)
            text = f"in: {tensors(node.inputs)}\nout: {tensors(node.outputs)}"
        else:
            values = m.graph.inputs if kind == "input" else m.graph.outputs
            text = tensors(v for v in values if v.name == name)
        return ("<div class='onnx-lab-ed-signature' style='font-size:11px;color:#555;"
                "white-space:pre-wrap;overflow-wrap:anywhere;line-height:1.35;margin:2px 0 6px 0'>" + esc_text(text)
                + "</div>")

    def _show_error(self, e: Exception) -> None:
        super()._show_error(e)
        self.form_error.value = error_html(e)
        # the whole message beside the form, under the selection's title; above the canvas
        # one line that points there (the full box there, 154 px, pushed the form's copy
        # below a 1280x800 window)
        what = e.problem if isinstance(e, LabError) else str(e)
        short = what if len(what) <= 140 else what[:139] + "…"
        self.status.value = (f"<div class='onnx-lab-error' style='font-size:12px;"
                             f"color:#611a15;white-space:nowrap;overflow:hidden;"
                             f"text-overflow:ellipsis'><b>{esc_text(type(e).__name__)}</b>: "
                             f"{esc_text(short)} (the whole message beside the form)</div>")

    def _selected(self, key: str) -> None:
        self.form_error.value = ""
        self._target_for(key)
        self._build_panel()

    def _target_for(self, key: str) -> None:
        m = self.lab.model
        ins = {v.name for v in m.graph.inputs}
        outs = {v.name for v in m.graph.outputs}
        if key in m.index.entries:
            self.target = ("node", key)
        elif key.startswith("input:") and key[6:] in ins:
            self.target = ("input", key[6:])
        elif key.startswith("output:") and key[7:] in outs:
            self.target = ("output", key[7:])
        elif key in ins:
            self.target = ("input", key)
        elif key in outs:
            self.target = ("output", key)
        else:
            self.target = None

    def _build_panel(self) -> None:
        t = self.target
        m = self.lab.model
        if t is None:
            self.title.value = info_html("Select a node, an input or an output on the graph "
                                         "to edit it.")
            self.panel.children = []
            return
        kind, name = t
        # a name has nothing to break at: it wraps anywhere (1,500 characters had run
        # 11,000 px past the editor's edge)
        self.title.value = (f"<div style='overflow-wrap:anywhere;line-height:1.45'>"
                            f"<b>{esc_text(kind)}</b> <code>{esc_text(name)}</code>"
                            + (f" ({esc_text(m.index.node(name).op_type)})"
                               if kind == "node" else "") + self._signature_html(kind, name)
                            + "</div>")
        row = _row
        if kind == "node":
            node = m.index.node(name)
            form = attribute_form(m, name)
            self._form = {a["name"]: a for a in form}
            editable = [a["name"] for a in form if a["type"] in
                        ("FLOAT", "INT", "STRING", "INTS", "FLOATS", "STRINGS")]
            # the same node redrawn after an edit, undo or redo keeps the attribute the user
            # picked: resetting it to the first one sent the next value typed to another
            # attribute (LayerNormalization: epsilon -> axis)
            keep = self.attribute.value if self._form_node == name else None
            self._form_node = name
            self.attribute.options = editable
            self.attribute.value = keep if keep in editable else (editable[0] if editable else None)
            self._attr_picked()
            self.node_name.value = ""
            outs = [v.name for v in node.outputs if v.name]
            self.tensor.options = outs
            self.tensor.value = outs[0] if outs else None
            inits = [v.name for v in node.inputs if v is not None and v.is_initializer()]
            self.initializer.options = inits
            self.initializer.value = inits[0] if inits else None
            parts: list[w.Widget] = [w.HTML("<b>Attributes</b>")]
            parts += ([self.attribute, self.attr_hint, row([self.attr_value,
                                                            self.set_attr_button])]
                      if editable else [w.HTML("<i>no editable attributes</i>")])
            parts += [w.HTML("<b>Node</b>"), row([self.node_name, self.rename_node_button]),
                      self.remove_mode, row([self.preview_button, self.remove_button])]
            if outs:
                parts += [w.HTML("<b>Output tensor</b>"), self.tensor,
                          self.add_output_button, row([self.tensor_name,
                                                       self.rename_tensor_button]),
                          self.op_type, self.op_attributes, self.op_inputs,
                          self.add_node_button]
            if inits:
                parts += [w.HTML("<b>Weights</b>"), self.initializer,
                          row([self.init_path, self.replace_button]),
                          row([self.factor, self.scale_button])]
            self.panel.children = parts
        else:
            self.tensor.options = [name]
            self.tensor.value = name
            self.tensor_name.value = ""
            parts = [row([self.tensor_name, self.rename_tensor_button]),
                     self.op_type, self.op_attributes, self.op_inputs, self.add_node_button]
            if kind == "input":
                v = next(v for v in m.graph.inputs if v.name == name)
                dims = [str(d) if d is not None else "?" for d in (v.shape or [])]
                self.shape.value = "x".join(dims)
                parts += [row([self.shape, self.shape_button])]
            else:
                parts += [self.remove_output_button]
            self.panel.children = parts

    def _attr_picked(self, _change: Any = None) -> None:
        a = getattr(self, "_form", {}).get(self.attribute.value)
        if a is None:
            self.attr_hint.value = ""
            return
        current = a["value"] if a["value"] is not None else a["default"]
        self.attr_value.value = "" if current is None else (
            ", ".join(_fmt(x) for x in current) if isinstance(current, list) else _fmt(current))
        bits = [a["type"]]
        if a["allowed"]:
            bits.append("one of " + ", ".join(a["allowed"]))
        if a["value"] is None and a["default"] is not None:
            bits.append(f"default {a['default']}")
        if a["required"]:
            bits.append("required")
        self.attr_hint.value = (f"<small>{esc_text('; '.join(bits))}</small>"
                                f"<div style='font-size:11px;color:#666;line-height:1.35'>"
                                f"{esc_text(a['doc'])}</div>")

    # ------------------------------------------------------------------ edits
    def _node(self) -> str:
        if self.target is None or self.target[0] != "node":
            raise InputError("No node is selected.", fix="Click a node on the graph first.")
        return self.target[1]

    def _edit(self, method: str, *args: Any, follow: str | None = None, **kw: Any) -> Any:
        """Run ``lab.<method>(*args, **kw)``; show its verdict, the call, the history."""
        with self._busy():
            return self._edit_step(method, *args, follow=follow, **kw)

    @contextlib.contextmanager
    def _busy(self) -> Iterator[None]:
        # class onnx-lab-ed-busy from the click until the canvas and the table are redrawn
        # (the verdict shows first): what a page script or test waits on
        self.add_class("onnx-lab-ed-busy")
        try:
            yield
        finally:
            self.remove_class("onnx-lab-ed-busy")

    def _call(self, fn: Any, *args: Any, code: str | None = None, busy: str | None = None,
              **kwargs: Any) -> Any:
        # the line under the widget shows the call tried, refused or not: it had kept the
        # last call that worked (lab.undo() under a SaveError, a set_input_shape under a
        # refused rename), so the error could not be reproduced from it
        if code is not None:
            self.code.value = code_html(code)
        return super()._call(fn, *args, code=code, busy=busy, **kwargs)

    def _edit_step(self, method: str, *args: Any, follow: str | None, **kw: Any) -> Any:
        tried = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kw.items()])
        r = self._call(getattr(self.lab, method), *args, busy="Editing and verifying…",
                       code=f"lab.{method}({tried})", **kw)
        if r is None:
            return None
        self.result = r
        self.form_error.value = ""
        if follow and r.modified and self.target is not None and self._form_node == \
                self.target[1]:
            self._form_node = follow  # a renamed node keeps the attribute chosen in its form
        self.code.value = code_html(step_call(r))
        prov = edit_provenance(r)
        what = "; ".join(f"{k}: {', '.join(v)}" for k, v in prov.items() if v)
        if not r.modified:
            verdict, kind = f"nothing changed: {r.reason}", "warn"
        elif r.verify_passed is False:
            verdict, kind = f"VERIFICATION FAILED{failed_where(r)}", "warn"
        elif r.outputs_changed:
            # its note: the max_abs, where values start to differ, NaN or inf it brought
            verdict = next((n for n in reversed(r.notes) if n.startswith("outputs changed")),
                           f"outputs changed (expected for this edit): max_abs "
                           f"{r.max_abs_err:.3g}")
            kind = "warn" if r.max_abs_err is not None and not math.isfinite(r.max_abs_err) \
                else "info"
        elif r.outputs_changed is False and r.verify_passed is None:  # intermediates only
            verdict, kind = r.notes[-1], "info"
        elif r.verify_passed:
            verdict, kind = (f"outputs unchanged (verified, max_abs {r.max_abs_err:.3g})",
                             "ok")
        else:
            verdict, kind = "not verified", "info"
        # an edit that changed nothing is no step (the history stays where it was)
        where = f"step {self.lab.version_history.current}" if r.modified else "no new step"
        self.message.value = (info_html(f"{where}: {r.name} — {verdict}", kind=kind)
                              + f"<div class='onnx-lab-ed-provenance' style='font-size:12px;"
                              f"overflow-wrap:anywhere'>{esc_text(what)}</div>")
        self._redraw(follow, around=self._changed(r, follow))
        return r

    def set_attribute(self) -> Any:
        nid = self._node()
        a = self._form.get(self.attribute.value)
        if a is None:
            raise InputError("No attribute is chosen.", fix="Pick one in the list.")
        value = parse_attribute_text(self.attr_value.value, a["type"])
        return self._edit("set_attribute", nid, a["name"], value)

    def rename_node(self) -> Any:
        new = self.node_name.value.strip()
        return self._edit("rename_node", self._node(), new, follow=new)

    def preview_removal(self) -> dict:
        """What *Remove* would remove (``lab.removal_plan``), shown without removing."""
        nid, mode = self._node(), self.remove_mode.value
        plan = self._call(self.lab.removal_plan, nid, mode,
                          code=f"lab.removal_plan({nid!r}, {mode!r})")
        if plan is None:
            return {}
        self.result = plan
        lines = [f"removes {len(plan['nodes'])} node(s): {', '.join(plan['nodes'])}"]
        if plan["outputs"]:
            lines.append(f"graph outputs that go: {', '.join(plan['outputs'])}")
        if plan["initializers"]:
            lines.append(f"weights that go: {', '.join(plan['initializers'])}")
        if plan["problem"]:
            lines.append(f"refused: {plan['problem']}")
        self.message.value = info_html("; ".join(lines),
                                       kind="warn" if plan["problem"] else "info")
        return plan

    def remove(self) -> Any:
        nid, mode = self._node(), self.remove_mode.value
        if mode == "cascade":
            r = self._edit("remove_node_cascade", nid)
        else:
            r = self._edit("remove_node", nid, reconnect=mode == "reconnect")
        return r  # the redraw selected what took its place (a consumer or the producer)

    def _tensor(self) -> str:
        if not self.tensor.value:
            raise InputError("No tensor is chosen.", fix="Select a node with outputs, or an "
                             "input or output.")
        return str(self.tensor.value)

    def add_output(self) -> Any:
        return self._edit("add_output", self._tensor())

    def rename_tensor(self) -> Any:
        old, new = self._tensor(), self.tensor_name.value.strip()
        kind = self.target[0] if self.target else ""
        follow = f"{kind}:{new}" if kind in ("input", "output") else None
        return self._edit("rename_tensor", old, new, follow=follow)

    def add_node(self) -> Any:
        attrs = _json_field(self.op_attributes.value, "attributes", {})
        inputs = _json_field(self.op_inputs.value, "inputs", None)
        if not isinstance(attrs, dict):
            raise InputError(f"attributes must be a JSON object, got {attrs!r}.",
                             fix='Write e.g. {"axis": -1}.')
        if inputs is not None and not isinstance(inputs, list):
            inputs = [inputs]
        return self._edit("add_node", self._tensor(), self.op_type.value.strip(), attrs,
                          inputs)

    def set_shape(self) -> Any:
        if self.target is None or self.target[0] != "input":
            raise InputError("No graph input is selected.", fix="Click an input first.")
        dims: list[int | str] = []
        for d in self.shape.value.replace(",", "x").split("x"):
            d = d.strip()
            if d:  # isdecimal, not isdigit: '²' is a digit int() cannot read
                dims.append(int(d) if d.isdecimal() else d)
        return self._edit("set_input_shape", self.target[1], dims)

    def remove_output(self) -> Any:
        if self.target is None or self.target[0] != "output":
            raise InputError("No graph output is selected.", fix="Click an output first.")
        return self._edit("remove_output", self.target[1])

    def replace_initializer(self) -> Any:
        if not self.initializer.value:
            raise InputError("No weight is chosen.", fix="Select a node with weights.")
        return self._edit("replace_initializer", self.initializer.value,
                          self.init_path.value.strip())

    def scale_initializer(self) -> Any:
        if not self.initializer.value:
            raise InputError("No weight is chosen.", fix="Select a node with weights.")
        return self._edit("scale_initializer", self.initializer.value, float(self.factor.value))

    # ------------------------------------------------------------------ history
    def undo(self) -> None:
        with self._busy():
            if self._call(self.lab.undo, code="lab.undo()") is None and self.error is None:
                self.form_error.value = ""  # a refused edit's error is about another version
                h = self.lab.version_history
                self.message.value = info_html(f"back to step {h.current}")
                r = h.versions[h.current + 1].result
                follow = self._stepped(r, back=True)
                self._redraw(follow, around=self._changed(r, follow))

    def redo(self) -> None:
        with self._busy():
            if self._call(self.lab.redo, code="lab.redo()") is None and self.error is None:
                self.form_error.value = ""  # a refused edit's error is about another version
                h = self.lab.version_history
                self.message.value = info_html(f"forward to step {h.current}")
                r = h.version.result
                follow = self._stepped(r, back=False)
                self._redraw(follow, around=self._changed(r, follow))

    def _stepped(self, result: Any, *, back: bool) -> str | None:
        """The selected node's id after undoing (``back``) or redoing ``result``: the node it
        was renamed from or to (its provenance), when the selection is such a node."""
        old, idx = self.canvas.selected or "", self.lab.model.index
        if not hasattr(result, "provenance") or not old or old in idx.entries:
            return None
        if back:
            cands = list(result.provenance.get(old, ()))
        else:
            cands = [n for n, src in result.provenance.items() if old in src]
        return next((n for n in cands if n in idx.entries), None)

    def save(self) -> Any:
        """Write the current version to the *save as* path (``lab.save``: it must load in a
        fresh onnxruntime session; the source and the data files the model reads are
        refused)."""
        path = self.save_path.value.strip()
        if not path:
            raise InputError("No file to save to.", fix="Type a path in 'save as', e.g. "
                             "edited.onnx.")
        # a few seconds (the written file is loaded in a fresh session): said, and the last
        # save's error cleared, while it runs (the old SaveError stayed on screen meanwhile)
        self.form_error.value = ""
        self.message.value = ""
        kwargs = {"overwrite": True} if self.overwrite.value else {}
        code = f"lab.save({path!r}" + (", overwrite=True" if kwargs else "") + ")"
        with self._busy():
            out = self._call(self.lab.save, path, **kwargs, code=code,
                             busy="Saving, then loading the file in a fresh onnxruntime "
                                  "session…")
        if out is not None:
            self.form_error.value = ""
            h = self.lab.version_history
            r = h.version.result
            if r is not None and r.verify_passed is False:  # saved as asked, said plainly
                self.message.value = info_html(
                    f"step {h.current} saved to {out}, but this step FAILED verification"
                    f"{failed_where(r)}: Undo and save again to keep the version before it",
                    kind="warn")
            else:
                self.message.value = info_html(f"step {h.current} saved to {out} (loads in a "
                                               "fresh onnxruntime session)", kind="ok")
        return out

    def script(self, source: str | None = None) -> str:
        """The session as a Python script (``lab.to_script``)."""
        return self.lab.to_script(source)

    # ------------------------------------------------------------------ drawing
    def _expand_box(self, scope: str) -> None:
        if scope not in self._expand:
            self._expand.append(scope)
        self._redraw()

    def show_whole(self) -> None:
        """Lay out and show the whole (collapsed) graph again after a neighbourhood view,
        keeping the zoom and the selected element where it is on the screen."""
        with self._busy():
            self._redraw()

    def _changed(self, result: Any, follow: str | None = None) -> list[str]:
        """Node ids and tensor names of the current model around which an edit (or the step
        undone or redone) changed the drawing: the nodes its provenance touched, created,
        removed or replaced that exist now, the selection (renamed: ``follow``), and when the
        selection is gone, its neighbours in the drawing before. Body nodes stand for the
        main-graph node that owns them."""
        idx = self.lab.model.index
        names: list[str] = []
        if result is not None and hasattr(result, "provenance") and hasattr(result, "removed"):
            prov = edit_provenance(result)
            names += prov["touched"] + prov["created"] + prov["removed"]
            names += [s for src in result.provenance.values() for s in src]
        old = self.canvas.selected or ""
        names += [n for n in (follow, old) if n]

        def resolve(n: str) -> str | None:
            if n.startswith(("input:", "output:")):
                n = n.split(":", 1)[1]
            if n in idx.entries:
                return owner_in_graph(idx, n, "")
            if n in idx.producer or n in idx.consumers:
                return n
            return None

        out = [r for r in map(resolve, names) if r]
        if old and resolve(old) is None:
            out += [r for r in map(resolve, self._neighbours(old)) if r]
        return list(dict.fromkeys(out))

    def _big(self) -> bool:
        return bool(self.neighbourhood) and self._full_size > self.neighbourhood

    def _neighbours(self, key: str) -> list[str]:
        """Drawn keys next to ``key`` in the current drawing, consumers first: what takes
        its place on the canvas when an edit removes it."""
        r = self.canvas.rendering
        if not key or r is None:
            return []
        after = [t for s, t, _ in r.edges if s == key]
        before = [s for s, t, _ in r.edges if t == key]
        return list(dict.fromkeys(k for k in after + before if k != key))

    def _show_scope(self, rendering: Any) -> None:
        """The line above the canvas that says a neighbourhood is shown, with its size."""
        if not self.partial or rendering is None:
            self.scope_note.value = ""
            self.scope_bar.layout.display = "none"
            return
        n, total = len(rendering.nodes), len(self.lab.index)
        self.scope_note.value = info_html(
            f"Showing the neighbourhood of the edit: {n} of {total:,} nodes "
            f"({self.radius} hops)")
        self.scope_bar.layout.display = None

    def _redraw(self, follow: str | None = None, around: list[str] | None = None) -> None:
        """Draw the current version, keeping the user's place.

        With ``around`` (what an edit changed, see :meth:`_changed`) on a graph whose whole
        drawing is bigger than ``neighbourhood``, only the neighbourhood of those elements is
        laid out and shown (``partial``); otherwise the whole collapsed graph.

        The selection stays (``follow`` when the edit renamed it; the nearest surviving
        neighbour when it was removed) and so does the zoom: the view ``k`` is kept (raised to
        at least 1:1 in a neighbourhood view, so its labels read) and the pan is set so the
        selected element stays where it was on the screen. Without a selection the view is
        kept as it was.
        """
        kwargs: dict[str, Any] = {"collapse": "auto"}
        if self._expand:
            kwargs["expand"] = list(self._expand)
        old = self.canvas.selected or ""
        old_at = drawn_centres(self.canvas.rendering.svg, self.canvas.rendering.drawn) \
            if self.canvas.rendering else {}
        old_keys = set(self.canvas.rendering.view.nodes) if self.canvas.rendering else set()
        near = self._neighbours(old)
        partial = bool(around) and self._big() and len(self.lab.index) > 0
        rendering = None
        if partial:
            try:
                rendering = self.lab.render(around=around, radius=self.radius, graph="",
                                            max_nodes=max(2 * self.neighbourhood // 3, 20))
            except LabError:  # e.g. a seed only inside a body: draw the whole graph
                partial = False
        if not partial:
            rendering = self._call(self.lab.render, **kwargs) if len(self.lab.index) else None
            self._full_size = len(rendering.view.nodes) if rendering is not None else 0
        self.partial = partial
        self._show_scope(rendering)
        view = dict(self.canvas.view or {})
        with self.canvas.hold_sync():
            self.canvas.show(rendering, model=self.lab, keep_selection=True)
            # an input or output renamed by undo/redo: the one of its kind that appeared
            kind = old.split(":", 1)[0] + ":" if old.startswith(("input:", "output:")) else ""
            fresh = [k for k in (rendering.view.nodes if rendering is not None else ())
                     if kind and k.startswith(kind) and k not in old_keys]
            key = ""
            for cand in ([follow] if follow else []) + [old] + fresh[:1] * (len(fresh) == 1) \
                    + near:
                k = self.canvas.key_for(cand) if cand else None
                if k:
                    key = k
                    break
            new_at = drawn_centres(rendering.svg, rendering.drawn) \
                if rendering is not None else {}
            anchor = old if old in old_at else next((n for n in near if n in old_at), "")
            if view.get("k") and key in new_at and (anchor or partial):
                k = float(view["k"])
                nk = max(k, _READ_K) if partial else k
                nx, ny = new_at[key]
                if anchor:  # the element's place on the screen: screen = centre * k + x
                    ox, oy = old_at[anchor]
                    sx, sy = ox * k + float(view.get("x", 0.0)), oy * k + float(view.get("y", 0.0))
                else:  # nothing to keep in place: centre it
                    sx = float(view.get("width", 800)) / 2
                    sy = float(view.get("height", self.canvas.height)) / 2
                if partial:  # a neighbourhood is read around the element: keep it in view
                    sx, sy = _inside(sx, float(view.get("width", 800)), 120), \
                        _inside(sy, float(view.get("height", self.canvas.height)), 80)
                view.update(k=nk, x=sx - nx * nk, y=sy - ny * nk)
                self.canvas.view = view
            if self.canvas.selected != key:
                self.canvas.selected = key
        # the target may be gone (removed) or renamed: rebuild from what is selected
        self._target_for(self.canvas.selected or (self.target[1] if self.target else ""))
        self._build_panel()
        self.history_html.value = history_html(self.lab.history)
        self.undo_button.disabled = self.lab.version_history.current == 0
        self.redo_button.disabled = self.lab.version_history.current + 1 >= len(self.lab.version_history)
