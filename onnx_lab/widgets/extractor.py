"""Extractor: cut a subgraph out of a model, by boundary tensors or by selected nodes.

Preview calls ``lab.render(...)`` on the selection; Extract calls ``lab.extract(inputs=...,
outputs=...)`` or ``lab.extract(nodes=[...])`` (which verifies the subgraph's outputs against
the same tensors of the full model) and shows the new Lab; Save calls ``sub.save(path)``.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from onnx_lab._pandas import pd
from onnx_lab.widgets._common import (
    SelectableTable,
    View,
    badge,
    code_html,
    info_html,
    rendering_html,
)

__all__ = ["Extractor"]


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
        from onnx_lab.lab import as_lab

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
        self.graph_html = w.HTML()
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
        super().__init__([
            self.mode, self.tensor_box, self.node_box,
            w.HBox([self.preview_button, self.extract_button]),
            w.HBox([self.save_path, self.save_button]),
            self.info, self.graph_html,
        ])
        self.add_class("onnx-lab-extractor")
        self._nodes_df: pd.DataFrame | None = None
        self._mode()

    # ------------------------------------------------------------------ helpers
    def _clicked(self, fn):
        guarded = self._guard(fn)
        return lambda _b: guarded()

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
                   | df["scope"].str.contains(text, case=False, regex=False))
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

    # ------------------------------------------------------------------ actions
    def preview(self) -> None:
        """Render the selection in the full model (nodes, or around the boundary tensors)."""
        kw = self.extract_kwargs()
        if self._empty(kw):
            return
        if "nodes" in kw:
            args = {"nodes": kw["nodes"], "highlight": kw["nodes"]}
        else:
            around = kw.get("inputs", []) + kw.get("outputs", [])
            args = {"around": around, "radius": 1}
        r = self._call(self.lab.render, busy="Laying out…", **args)
        if r is None:
            return
        self.graph_html.value = rendering_html(r)
        self.result = r
        self.code.value = code_html("lab.render(" + ", ".join(f"{k}={v!r}"
                                                              for k, v in args.items()) + ")")

    def extract(self) -> None:
        """``lab.extract(...)``: the subgraph as a new, verified Lab."""
        kw = self.extract_kwargs()
        if self._empty(kw):
            return
        sub = self._call(self.lab.extract, busy="Extracting and verifying…", **kw)
        if sub is None:
            return
        self.sub = sub
        self.result = sub
        code = "sub = lab.extract(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")"
        ins = ", ".join(html.escape(n) for n in sub.inputs["name"])
        outs = ", ".join(html.escape(n) for n in sub.outputs["name"])
        verified = None
        hist = getattr(sub, "history", None)
        if isinstance(hist, pd.DataFrame) and len(hist) and "verify_passed" in hist:
            v = hist["verify_passed"].iloc[0]
            verified = None if v is None or pd.isna(v) else bool(v)
        self.info.value = (f"<div class='onnx-lab-extracted'><b>{len(sub.index)}</b> nodes "
                           f"extracted {badge(verified)}<br>inputs: {ins}<br>outputs: {outs}"
                           "</div>")
        r = self._call(sub.render, collapse="auto")
        self.graph_html.value = rendering_html(r)
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
