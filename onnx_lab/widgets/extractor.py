"""Extractor: cut a subgraph out of a model, by boundary tensors or by selected nodes.

Preview calls ``lab.render(...)`` on the selection; Extract calls ``lab.extract(inputs=...,
outputs=...)`` or ``lab.extract(nodes=[...])`` (which verifies the subgraph's outputs against
the same tensors of the full model) and shows the new Lab; Save calls ``sub.save(path)``.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from onnx_lab._pandas import pd
from onnx_lab.lab import as_lab
from onnx_lab.render._html import esc_text
from onnx_lab.widgets._common import (
    SelectableTable,
    View,
    badge_html,
    code_html,
    info_html,
)
from onnx_lab.widgets._context import RunContext
from onnx_lab.widgets._links import selection

__all__ = ["Extractor", "INSIDE", "OUTSIDE"]

#: Outline colours of the preview: nodes inside the cut, and their neighbours outside it.
INSIDE, OUTSIDE = "#2e7d32", "#9e9e9e"


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.replace("\n", ",").split(",") if t.strip()]


class Extractor(View):
    """Pick a boundary (input/output tensors) or nodes, preview, extract, verify and save.

    Args:
        lab: a :class:`~onnx_lab.lab.Lab` (or anything ``onnx_lab.open`` takes).
        page_size: rows per page of the node table.

    Attributes:
        result: the extracted Lab after Extract (the preview Rendering after Preview, the
            saved path after Save).
        sub: the last extracted Lab.

    Example:
        >>> import onnx_lab
        >>> from onnx_lab.widgets import Extractor
        >>> Extractor(onnx_lab.open("sample:convnet"))
    """

    def __init__(self, lab: Any, *, page_size: int = 15) -> None:
        self.lab = as_lab(lab)
        self.result: Any = None
        self.sub: Any = None
        self.mode = w.ToggleButtons(options=[("boundary tensors", "tensors"),
                                             ("selected nodes", "nodes")], value="tensors")
        names = self._tensor_names()
        self.tensor_pick = w.Combobox(options=names, placeholder="tensor name (type to search)",
                                      ensure_option=False, layout=w.Layout(width="360px"))
        self.add_input = w.Button(description="+ input", layout=w.Layout(width="90px"))
        self.add_output = w.Button(description="+ output", layout=w.Layout(width="90px"))
        self.inputs = w.Textarea(description="inputs", placeholder="tensor names, comma separated",
                                 layout=w.Layout(width="480px", height="48px"))
        self.outputs = w.Textarea(description="outputs",
                                  placeholder="tensor names, comma separated",
                                  layout=w.Layout(width="480px", height="48px"))
        self.node_filter = w.Text(description="filter", placeholder="id, op type or scope",
                                  continuous_update=False)
        self.nodes = SelectableTable(
            "node_id", [("node_id", 220), ("op_type", 120), ("scope", 180), ("inputs", 200),
                        ("outputs", 180)], page_size=page_size)
        self.preview_button = w.Button(description="Preview", icon="eye")
        self.extract_button = w.Button(description="Extract", icon="scissors",
                                       button_style="primary")
        self.save_path = w.Text(placeholder="subgraph.onnx", description="save as",
                                layout=w.Layout(width="360px"))
        self.save_button = w.Button(description="Save", icon="save")
        self.info = w.HTML()
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        # Dims/shapes for the cut's shapes and its verification; verify can be turned off.
        self.context = RunContext(self.lab, verify=True)
        self.verify = self.context.verify
        self.canvas = GraphCanvas(self.lab, height=460)
        self.legend = w.HTML()
        self.tensor_box = w.VBox([w.HBox([self.tensor_pick, self.add_input, self.add_output]),
                                  self.inputs, self.outputs])
        self.node_box = w.VBox([self.node_filter, self.nodes])
        self.add_input.on_click(self._clicked(lambda: self._add(self.inputs)))
        self.add_output.on_click(self._clicked(lambda: self._add(self.outputs)))
        self.preview_button.on_click(self._clicked(self.preview))
        self.extract_button.on_click(self._clicked(self.extract))
        self.save_button.on_click(self._clicked(self.save))
        self.mode.observe(self._guard(self._mode), names="value")
        self.node_filter.observe(self._guard(self._filter), names="value")
        self.nodes.on_change = self._guard(self._ticked)
        wrap = w.Layout(flex_flow="row wrap")
        super().__init__([
            self.mode, self.tensor_box, self.node_box, self.context,
            w.HBox([self.preview_button, self.extract_button], layout=wrap),
            w.HBox([self.save_path, self.save_button], layout=wrap),
            self.info, self.legend, self.canvas,
        ])
        self.add_class("onnx-lab-extractor")
        self._result_panels = (self.info, self.legend, self.canvas)
        self._nodes_df: pd.DataFrame | None = None

        self.link = selection(self.lab)
        self.link.subscribe(self, self._guard(self.canvas.focus))
        self._mode()

    # ------------------------------------------------------------------ helpers
    def _clicked(self, fn):
        guarded = self._guard(fn)
        return lambda _b: guarded()

    def _ticked(self, keys: list[str]) -> None:
        """Linked selection: the last ticked node is selected in the other widgets."""
        if keys and keys[-1] in self.lab.index.entries:
            self.link.select(keys[-1], source=self)
            self.canvas.focus(keys[-1])

    def _tensor_names(self) -> list[str]:
        # Main-graph values only: a boundary inside an If/Loop body cannot be cut.
        idx = self.lab.index
        return [n for n, g in idx.value_graph.items() if g == ""]

    def _add(self, box: w.Textarea) -> None:
        name = self.tensor_pick.value.strip()
        if not name:
            return
        names = _names(box.value)
        if name not in names:
            box.value = ", ".join([*names, name])
        self.tensor_pick.value = ""

    def _mode(self, _change: Any = None) -> None:
        tensors = self.mode.value == "tensors"
        self.tensor_box.layout.display = None if tensors else "none"
        self.node_box.layout.display = "none" if tensors else None
        if not tensors and self._nodes_df is None:
            df = self._call(lambda: self.lab.nodes)
            if df is None:
                return
            self._nodes_df = df
            self._filter()

    def _filter(self, _change: Any = None) -> None:
        df = self._nodes_df
        if df is None:
            return
        text = self.node_filter.value.strip()
        if text:
            hit = (df["node_id"].str.contains(text, case=False, regex=False)
                   | df["op_type"].str.contains(text, case=False, regex=False)
                   | df["scope"].str.contains(text, case=False, regex=False)
                   | df["module"].fillna("").astype(str).str.contains(text, case=False,
                                                                      regex=False))
            df = df[hit]
        self.nodes.set(df)

    def extract_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``lab.extract`` for the current controls."""
        if self.mode.value == "nodes":
            return {"nodes": list(self.nodes.selected)}
        kw: dict[str, Any] = {}
        ins, outs = _names(self.inputs.value), _names(self.outputs.value)
        if ins:
            kw["inputs"] = ins
        if outs:
            kw["outputs"] = outs
        return kw

    def _empty(self, kw: dict[str, Any]) -> bool:
        if not any(kw.values()):
            self.status.value = info_html(
                "Tick nodes, or give output tensors (and optionally input tensors) first.",
                kind="warn")
            return True
        return False

    def _start(self) -> None:
        """A new action: the last result (or error) goes, the bar's dims go to the Lab."""
        self.info.value = self.legend.value = ""
        self.canvas.show(None)
        self.context.apply()

    def _kw_code(self, kw: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in kw.items())

    @staticmethod
    def counts_html(lab: Any) -> str:
        """'12 compute nodes + 3 Constant nodes' for a Lab (main graph and bodies)."""
        ops = lab.nodes["op_type"]
        n_const = int((ops == "Constant").sum())
        return (f"<b>{len(ops) - n_const:d}</b> compute node{'s' if len(ops) - n_const != 1 else ''}"
                f" + <b>{n_const}</b> Constant node{'s' if n_const != 1 else ''}")

    # ------------------------------------------------------------------ actions
    def preview(self) -> None:
        """Draw the cut in the full model: what is inside (green) and its neighbours outside.

        What is inside comes from ``lab.extract(..., verify=False)`` (the same cut Extract
        makes); the drawing is ``lab.render(around=inside, radius=1, highlight={...})``.
        """
        kw = self.extract_kwargs()
        if self._empty(kw):
            return
        self._start()
        sub = self._call(self.lab.extract, busy="Finding the cut…", verify=False, **kw)
        if sub is None:
            return
        # The sub-model's own ids are not the Lab's: an unnamed node gets its id from its place
        # (ConstantOfShape_1 of the cut was the Lab's ConstantOfShape_5, while the Lab's
        # ConstantOfShape_1 fed the classifier): its node is the one that makes its outputs.
        producer, entries = self.lab.index.producer, self.lab.index.entries
        inside = list(dict.fromkeys(
            n for outs, nid in zip(sub.nodes["outputs"], sub.nodes["node_id"])
            if (n := next((producer[o] for o in outs if o in producer),
                          nid if not len(outs) else None)) is not None and n in entries))
        args: dict[str, Any] = {"around": inside, "radius": 1}
        if len(inside) > 150:
            args["collapse"] = "auto"
        r0 = self._call(self.lab.render, busy="Laying out…", **args)
        if r0 is None:
            return
        chosen = set(inside)
        outside = [n for n in r0.nodes if n not in chosen]
        marks = {**{n: INSIDE for n in inside}, **{n: OUTSIDE for n in outside}}
        args["highlight"] = marks
        r = self._call(self.lab.render, **args)
        if r is None:
            return
        self.canvas.show(r, model=self.lab, title="preview of the cut")
        self.legend.value = (
            f"<div class='onnx-lab-cut-legend' style='font-size:12px'>"
            f"<span style='border:2px solid {INSIDE};padding:0 4px'>inside the cut</span> "
            f"{self.counts_html(sub)}; "
            f"<span style='border:2px solid {OUTSIDE};padding:0 4px'>outside</span> "
            f"{len(outside)} neighbouring node{'s' if len(outside) != 1 else ''} drawn; "
            f"inputs: {esc_text(', '.join(sub.inputs['name']))}; outputs: "
            f"{esc_text(', '.join(sub.outputs['name']))}</div>")
        self.result = r
        self.preview_cut = {"inside": inside, "outside": outside, "sub": sub}
        self.code.value = code_html(
            f"sub = lab.extract({self._kw_code(kw)}, verify=False); inside = "
            f"[lab.index.producer[o[0]] for o in sub.nodes.outputs]; "
            f"lab.render(around=inside, radius=1, highlight={{...}})")

    def extract(self) -> None:
        """``lab.extract(...)``: the subgraph as a new, verified Lab."""
        kw = self.extract_kwargs()
        if self._empty(kw):
            return
        self._start()
        verify, vcode = self.context.verify_arg(), self.context.verify_code()
        sub = self._call(self.lab.extract, busy="Extracting" + (" and verifying…" if verify
                                                                 is not False else "…"),
                         verify=verify, **kw)
        if sub is None:
            return
        self.sub = sub
        self.result = sub
        bar = self.context.code()
        code = ((bar + "; ") if bar else "") + "sub = lab.extract(" + self._kw_code(kw) + (
            f", {vcode}" if vcode else "") + ")"
        if "image_feeds(" in code:
            code = "from onnx_lab.widgets._context import image_feeds; " + code
        ins = ", ".join(esc_text(n) for n in sub.inputs["name"])
        outs = ", ".join(esc_text(n) for n in sub.outputs["name"])
        verified = None
        hist = getattr(sub, "history", None)
        if isinstance(hist, pd.DataFrame) and len(hist) and "verify_passed" in hist:
            v = hist["verify_passed"].iloc[0]
            verified = None if v is None or pd.isna(v) else bool(v)
        self.info.value = (f"<div class='onnx-lab-extracted'><b>{len(sub.index)}</b> nodes "
                           f"extracted ({self.counts_html(sub)}) {badge_html(verified)}<br>inputs: "
                           f"{ins}<br>outputs: {outs}</div>")
        r = self._call(sub.render, collapse="auto")
        if r is not None:
            self.canvas.show(r, model=sub, title="extracted subgraph")
        self.code.value = code_html(code + '; sub.render(collapse="auto")')

    def save(self) -> None:
        """``sub.save(path)`` for the last extracted subgraph."""
        if self.sub is None:
            self.status.value = info_html("Extract a subgraph first.", kind="warn")
            return
        path = self.save_path.value.strip()
        if not path:
            self.status.value = info_html("Type a file name (e.g. subgraph.onnx).", kind="warn")
            return
        out = self._call(self.sub.save, path, busy=f"Saving {path}…")
        if self.error is None:
            self.result = out if out is not None else path
            self.status.value = info_html(f"Saved to {self.result}", kind="ok")
            self.code.value = code_html(f"sub.save({path!r})")
