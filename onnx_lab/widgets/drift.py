"""DriftDebugger: where do two models start to disagree? A view over ``onnx_lab.compare``.

Run calls ``onnx_lab.compare(reference, candidate, ...)``; the per-layer plot is
``Comparison.plot()``, the layer table is ``Comparison.layers`` sorted by error, and selecting a
layer shows ``Comparison.hist(t)``, ``Comparison.scatter(t)`` and ``Comparison.render(...)``
(the graph neighbourhood with the error overlay).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w

from onnx_lab.widgets._common import (
    SelectableTable,
    View,
    code_html,
    figure_html,
    info_html,
    rendering_html,
    short,
)

__all__ = ["DriftDebugger"]

# Points in the widget's scatter plot (a seeded subsample of the tensor).
SCATTER_POINTS = 20_000


class DriftDebugger(View):
    """Compare a candidate model with a reference layer by layer and find the first divergence.

    Args:
        reference: a Lab (or anything ``onnx_lab.open`` takes, or a dict of captured arrays).
        candidate: the model under test.
        dims, shapes: values for symbolic dims / full input shapes.
        page_size: rows per page of the layer table.

    Attributes:
        result: the :class:`~onnx_lab.numerics.compare.Comparison` of the last run.
        layer: ``{"tensor", "hist", "scatter", "rendering"}`` of the selected layer.

    Example:
        >>> import onnx_lab
        >>> from onnx_lab import to_fp16
        >>> from onnx_lab.widgets import DriftDebugger
        >>> ref = onnx_lab.open("sample:convnet")
        >>> DriftDebugger(ref, to_fp16(ref))
    """

    def __init__(self, reference: Any, candidate: Any, *,
                 dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None, page_size: int = 15) -> None:
        from onnx_lab.runtime.session import available_providers

        self.reference = reference
        self.candidate = candidate
        self.dims = dict(dims or {})
        self.shapes = dict(shapes or {})
        self.result: Any = None
        self.layer: dict[str, Any] = {}
        # Per-tensor views of the current result: ticking a layer again shows them at once.
        self._shown: dict[str, dict[str, Any]] = {}
        provs = available_providers()
        self.feed_mode = w.ToggleButtons(options=[("random (seeded)", "random"),
                                                  (".npz file", "npz")], value="random")
        self.npz_path = w.Text(placeholder="inputs.npz", description="npz",
                               layout=w.Layout(width="320px"))
        from onnx_lab.numerics.metrics import PRESETS

        # The preset judges outputs element-wise and intermediates against their own scale;
        # typing a tolerance replaces the preset's numbers (the box ticks itself).
        self.preset = w.Dropdown(options=[("auto (by dtype; fp16 candidates: fp16)", "auto")]
                                 + [(f"{k}: {p.summary}", k) for k, p in PRESETS.items()],
                                 value="auto", description="preset",
                                 layout=w.Layout(width="420px"))
        self.custom_tolerances = w.Checkbox(value=False, description="my tolerances:",
                                            indent=False, layout=w.Layout(width="120px"))
        self.atol = w.FloatText(value=1e-4, description="atol", layout=w.Layout(width="180px"))
        self.rtol = w.FloatText(value=1e-3, description="rtol", layout=w.Layout(width="180px"))
        self.confirm = w.Checkbox(value=False, description="confirm the culprit on the "
                                  "reference's inputs", indent=False)
        self.layerwise = w.Checkbox(value=True, description="layer by layer", indent=False)
        self.ref_provider = w.Dropdown(options=provs, value="CPUExecutionProvider"
                                       if "CPUExecutionProvider" in provs else provs[0],
                                       description="reference EP", style={"description_width":
                                                                          "initial"})
        self.cand_provider = w.Dropdown(options=provs, value=self.ref_provider.value,
                                        description="candidate EP",
                                        style={"description_width": "initial"})
        self.run_button = w.Button(description="Run", icon="play", button_style="primary")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="",
                                      layout=w.Layout(width="300px", visibility="hidden"))
        self.progress_label = w.HTML()
        self.verdict = w.HTML()
        self.plot_html = w.HTML()
        self.layers = SelectableTable(
            "tensor", [("tensor", 230), ("node_id", 200), ("op_type", 100), ("match", 80),
                       ("max_abs", 80), ("max_rel", 80), ("cosine", 80), ("passed", 70)],
            page_size=page_size, single=True, on_change=self._guard(self._on_layer),
            formatters={"passed": lambda v: "✔" if v else "<b style='color:#c62828'>✘</b>",
                        "tensor": self._tensor_cell})
        self.layer_title = w.HTML()
        self.hist_html = w.HTML(layout=w.Layout(width="50%"))
        self.scatter_html = w.HTML(layout=w.Layout(width="50%"))
        self.graph_html = w.HTML()
        self.run_button.on_click(lambda _b: self._guard(self.run)())
        for box in (self.atol, self.rtol):
            box.observe(lambda _c: setattr(self.custom_tolerances, "value", True), names="value")
        self.feed_mode.observe(self._guard(self._mode), names="value")
        self._mode()
        super().__init__([
            w.HBox([self.feed_mode, self.npz_path]),
            w.HBox([self.preset, self.custom_tolerances, self.atol, self.rtol]),
            w.HBox([self.layerwise, self.confirm]),
            w.HBox([self.ref_provider, self.cand_provider]),
            w.HBox([self.run_button, self.progress, self.progress_label]),
            self.verdict, self.plot_html,
            w.HTML("<b>Layers, largest error first</b> (tick one to inspect it)"), self.layers,
            self.layer_title, w.HBox([self.hist_html, self.scatter_html]), self.graph_html,
        ])
        self.add_class("onnx-lab-drift")
        self.code.value = code_html(self._code())

    # ------------------------------------------------------------------ helpers
    def _mode(self, _change: Any = None) -> None:
        self.npz_path.layout.display = None if self.feed_mode.value == "npz" else "none"

    def _kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self.preset.value != "auto":
            kw["preset"] = self.preset.value
        if self.custom_tolerances.value:
            kw.update(atol=float(self.atol.value), rtol=float(self.rtol.value))
        if self.confirm.value:
            kw["confirm"] = True
        if self.feed_mode.value == "npz":
            kw["feeds"] = self.npz_path.value.strip()
        if not self.layerwise.value:
            kw["layerwise"] = False
        if self.ref_provider.value != self.cand_provider.value:
            kw["providers"] = ([self.ref_provider.value], [self.cand_provider.value])
        elif self.ref_provider.value != "CPUExecutionProvider":
            kw["providers"] = [self.ref_provider.value]
        if self.dims:
            kw["dims"] = self.dims
        if self.shapes:
            kw["shapes"] = self.shapes
        return kw

    def _code(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs().items())
        return f"c = onnx_lab.compare(reference, candidate, {args})"

    def _tensor_cell(self, value: Any) -> str:
        d = self.result.first_divergence if self.result is not None else None
        text = short(value, 40)
        if d is not None and value == d["tensor"]:
            return f"<b style='color:#c62828' title='first divergence'>⚑ {text}</b>"
        return text

    def _progress(self, done: int, total: int, label: str) -> None:
        self.progress.max = max(1, int(total))
        self.progress.value = min(int(done), self.progress.max)
        self.progress_label.value = f"<small>{html.escape(str(label))} {done}/{total}</small>"

    # ------------------------------------------------------------------ actions
    def run(self) -> None:
        """``onnx_lab.compare(reference, candidate, ...)`` with the controls' values."""
        import onnx_lab

        kw = self._kwargs()
        if kw.get("feeds") == "":
            self.status.value = info_html("Type the path of an .npz file with the inputs.",
                                          kind="warn")
            return
        self.progress.layout.visibility = "visible"
        self.progress.value = 0
        c = self._call(onnx_lab.compare, self.reference, self.candidate, progress=self._progress,
                       busy="Comparing…", **kw)
        self.progress.layout.visibility = "hidden"
        self.progress_label.value = ""
        if c is None:
            return
        self.result = c
        self._shown = {}
        self.code.value = code_html(self._code())
        d = c.first_divergence
        colour = "#2e7d32" if c.passed else "#c62828"
        text = html.escape(c.summary_text()).replace("\n", "<br>")
        self.verdict.value = (f"<div class='onnx-lab-verdict' style='border-left:4px solid "
                              f"{colour};padding-left:8px'>{text}</div>")
        self.plot_html.value = figure_html(c.plot()) if len(c.layers) else ""
        layers = c.layers.sort_values("max_abs", ascending=False, na_position="last")
        self.layers.set(layers, keep_selection=False)
        if d is not None:
            # Open on the layer that introduced the drift, on the page that lists it.
            self.layers.show(d["tensor"])
            self.layers.select([d["tensor"]])
        else:
            self._on_layer([])

    def _on_layer(self, keys: list[str]) -> None:
        c = self.result
        if c is None or not keys:
            self.layer = {}
            self.layer_title.value = self.hist_html.value = self.scatter_html.value = ""
            self.graph_html.value = ""
            return
        tensor = keys[0]
        row = c.layers.loc[c.layers["tensor"] == tensor]
        node_id = row["node_id"].iloc[0] if len(row) else None
        d = c.first_divergence
        first = d is not None and d["tensor"] == tensor
        self.layer_title.value = (
            f"<b>{html.escape(tensor)}</b>" + (f" — node {html.escape(str(node_id))}"
                                               if node_id else "")
            + (" <span style='background:#c62828;color:white;padding:1px 6px;"
               "border-radius:8px'>first divergence</span>" if first else ""))
        shown = self._shown.get(tensor)
        if shown is None:
            shown = self._layer_views(c, tensor, node_id)
            if shown["hist"] is not None:  # failures are not kept: a retry may succeed
                self._shown[tensor] = shown
        self.hist_html.value = shown["hist_html"]
        self.scatter_html.value = shown["scatter_html"]
        self.graph_html.value = shown["graph_html"]
        rendering = shown["rendering"]
        self.layer = {"tensor": tensor, "hist": shown["hist"], "scatter": shown["scatter"],
                      "rendering": rendering}
        if isinstance(node_id, str):
            # Linked selection: an Explorer (or other widget) on the same Lab centres it.
            from onnx_lab.widgets._links import selection

            sides = {id(x): x for x in (self.candidate, self.reference) if hasattr(x, "index")}
            for side in sides.values():
                selection(side).select(node_id, source=self)
        self.code.value = code_html(
            self._code() + f"; c.hist({tensor!r}); c.scatter({tensor!r}, "
            f"max_points={SCATTER_POINTS})"
            + (f"; c.render(around={node_id!r}, radius=2, highlight=[{node_id!r}])"
               if rendering is not None else ""))

    def _layer_views(self, c: Any, tensor: str, node_id: Any) -> dict[str, Any]:
        """Histogram, scatter and graph neighbourhood of one layer, with their HTML.

        Both figures use one capture (``Comparison.values`` keeps the last pair) and the
        scatter a smaller seeded subsample than the default, which is plenty at widget size.
        """
        hist = self._call(c.hist, tensor, busy=f"Capturing {tensor}…")
        scatter = self._call(c.scatter, tensor, max_points=SCATTER_POINTS) \
            if hist is not None else None
        rendering = None
        if node_id is not None and isinstance(node_id, str):
            rendering = self._call(c.render, around=node_id, radius=2, highlight=[node_id])
        return {"hist": hist, "scatter": scatter, "rendering": rendering,
                "hist_html": figure_html(hist), "scatter_html": figure_html(scatter),
                "graph_html": rendering_html(rendering)}
