"""DriftDebugger: where do two models start to disagree? A view over ``onnx_lab.compare``.

Run calls ``onnx_lab.compare(reference, candidate, ...)``; the per-layer plot is
``Comparison.plot()``, the layer table is ``Comparison.layers`` sorted by error, and selecting a
layer shows ``Comparison.hist(t)``, ``Comparison.scatter(t)`` and ``Comparison.render(...)``
(the graph neighbourhood with the error overlay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w

from onnx_lab.core.values import weight_makers
from onnx_lab.numerics.compare import default_preset
from onnx_lab.numerics.metrics import PRESETS, RULES
from onnx_lab.render._html import esc_text
from onnx_lab.render.compare_plots import layer_error_figure
from onnx_lab.runtime.session import available_providers
from onnx_lab.widgets._common import (
    SelectableTable,
    View,
    code_html,
    figure_html,
    info_html,
    short,
)
from onnx_lab.widgets._context import RunContext
from onnx_lab.widgets._links import selection

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
        self.reference = reference
        self.candidate = candidate
        self.dims = dict(dims or {})
        self.shapes = dict(shapes or {})
        self.result: Any = None
        self.layer: dict[str, Any] = {}
        # Per-tensor views of the current result: ticking a layer again shows them at once.
        self._shown: dict[str, dict[str, Any]] = {}
        provs = available_providers()
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        # The run-context bar of the candidate (dims, shapes, feeds). It does not write to
        # either Lab: its values go to compare(dims=..., shapes=..., feeds=...).
        side = candidate if hasattr(candidate, "model") else reference
        self.context = RunContext(side, write=False, dims=self.dims, shapes=self.shapes,
                                  seeded=False) if hasattr(side, "model") else None
        self.feed_mode = self.context.feed_mode if self.context else w.Dropdown(
            options=[("random (seeded)", "random"), (".npz file", "npz")], value="random")
        self.npz_path = self.context.feed_path if self.context else w.Text(
            placeholder="inputs.npz", description="path")

        # The preset judges outputs element-wise and intermediates against their own scale;
        # typing a tolerance replaces the preset's numbers (the box ticks itself).
        self.preset = w.Dropdown(options=[("auto (by dtype; fp16 candidates: fp16)", "auto")]
                                 + [(f"{k}: {p.summary}", k) for k, p in PRESETS.items()],
                                 value="auto", description="preset",
                                 layout=w.Layout(width="420px"))
        self.custom_tolerances = w.Checkbox(value=False, description="my tolerances:",
                                            indent=False, layout=w.Layout(width="120px"))
        # The boxes hold the numbers in force: the preset's (PRESETS, the one table) until
        # the user types their own; a run passes them only when they are the user's.
        self.atol = w.FloatText(value=0.0, description="atol", layout=w.Layout(width="180px"))
        self.rtol = w.FloatText(value=0.0, description="rtol", layout=w.Layout(width="180px"))
        self.rule_line = w.HTML()
        self._syncing = False
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
            # the verdict and the errors first: at 1280 px cosine and passed sat behind a
            # horizontal scroll
            "tensor", [("tensor", 230), ("passed", 70), ("max_abs", 80), ("max_rel", 80),
                       ("cosine", 80), ("op_type", 100), ("node_id", 200), ("match", 80)],
            page_size=page_size, single=True, on_change=self._guard(self._on_layer),
            formatters={"passed": lambda v: "✔" if v else "<b style='color:#c62828'>✘</b>",
                        "tensor": self._tensor_cell_html})
        self.layers.add_class("onnx-lab-layers")
        self.layer_title = w.HTML()
        self.hist_html = w.HTML(layout=w.Layout(width="60%", min_width="360px"))
        self.scatter_html = w.HTML(layout=w.Layout(width="38%", min_width="260px"))
        self.canvas = GraphCanvas(side if hasattr(side, "model") else None, height=420)
        self.show_constants = w.Checkbox(value=False, indent=False, description="show constant "
                                         "layers", layout=w.Layout(width="200px"))
        self.order = w.Dropdown(options=[("largest error first", "error"),
                                         ("topological order", "topology")], value="error",
                                description="order", layout=w.Layout(width="280px"))
        self.layers_title = w.HTML()
        self.run_button.on_click(lambda _b: self._guard(self.run)())
        for box in (self.atol, self.rtol):
            box.observe(self._typed, names="value")
        self.preset.observe(lambda _c: self._sync_tolerances(), names="value")
        self.custom_tolerances.observe(lambda _c: self._sync_tolerances(), names="value")
        self._sync_tolerances()
        self.show_constants.observe(self._guard(self._show_layers), names="value")
        self.order.observe(self._guard(self._show_layers), names="value")
        wrap = w.Layout(flex_flow="row wrap")
        super().__init__([
            *([self.context] if self.context else [w.HBox([self.feed_mode, self.npz_path])]),
            # the tick and its two boxes wrap as one: at ~850 px "rtol" went alone to a line
            # of its own, away from "my tolerances:" and atol
            w.HBox([self.preset, w.HBox([self.custom_tolerances, self.atol, self.rtol],
                                        layout=w.Layout(flex_flow="row nowrap"))], layout=wrap),
            self.rule_line,
            w.HBox([self.layerwise, self.confirm], layout=wrap),
            w.HBox([self.ref_provider, self.cand_provider], layout=wrap),
            w.HBox([self.run_button, self.progress, self.progress_label], layout=wrap),
            self.verdict, self.plot_html,
            w.HBox([self.layers_title, self.order, self.show_constants], layout=wrap),
            self.layers, self.layer_title,
            w.HBox([self.hist_html, self.scatter_html], layout=wrap), self.canvas,
        ])
        self.add_class("onnx-lab-drift")
        self._result_panels = (self.verdict, self.plot_html, self.layer_title, self.hist_html,
                               self.scatter_html, self.canvas)

        for lab in {id(x): x for x in (candidate, reference) if hasattr(x, "index")}.values():
            selection(lab).subscribe(self, self._guard(self.canvas.focus))
        self.code.value = code_html(self._code())

    # ------------------------------------------------------------------ tolerances
    def preset_in_force(self) -> str:
        """The preset a run judges by: the dropdown's, or for *auto* the one
        :func:`~onnx_lab.numerics.compare.default_preset` picks for the candidate (``fp32``,
        the float32 rule, when each tensor's dtype picks its own)."""
        if self.preset.value != "auto":
            return self.preset.value
        cand = getattr(self.candidate, "model", None)
        ref = getattr(self.reference, "model", None)
        if cand is None:  # a path: the last run's choice, once there is one
            ran = getattr(self.result, "preset", None)
            return ran if ran in PRESETS else "fp32"
        return default_preset(cand, ref) or "fp32"

    def _typed(self, _change: Any) -> None:
        if not self._syncing:
            self.custom_tolerances.value = True
            self._sync_tolerances()

    def _sync_tolerances(self) -> None:
        """Fill the boxes with the preset's output numbers (unless they are the user's) and
        say which rules are in force."""
        name = self.preset_in_force()
        p = PRESETS[name]
        numeric = RULES[p.outputs.kind].tolerances
        if not self.custom_tolerances.value and numeric:
            self._syncing = True
            try:
                self.atol.value, self.rtol.value = p.outputs.atol, p.outputs.rtol
            finally:
                self._syncing = False
        for box in (self.atol, self.rtol):
            box.disabled = not numeric
        out, mid = p.outputs, p.intermediates
        if self.custom_tolerances.value and numeric:
            out = out.with_tolerances(self.atol.value, self.rtol.value)
            mid = mid.with_tolerances(self.atol.value, self.rtol.value)
        by = " (by dtype: float32 tensors)" if self.preset.value == "auto" and name == "fp32" \
            else ""
        self.rule_line.value = (f"<small>in force: preset {esc_text(name)}{esc_text(by)}"
                                f"{' with your atol/rtol' if self.custom_tolerances.value else ''}"
                                f" — outputs {esc_text(out.describe())}; intermediates "
                                f"{esc_text(mid.describe())}</small>")

    # ------------------------------------------------------------------ helpers
    def _kwargs(self, *, code: bool = False) -> dict[str, Any]:
        """compare()'s keywords from the controls (``code``: feeds as their Python text)."""
        kw: dict[str, Any] = {}
        if self.preset.value != "auto":
            kw["preset"] = self.preset.value
        if self.custom_tolerances.value:
            kw.update(atol=float(self.atol.value), rtol=float(self.rtol.value))
        if self.confirm.value:
            kw["confirm"] = True
        if self.context is not None:
            if self.feed_mode.value != "random":
                if code:
                    try:
                        kw["feeds"] = _Code(self.context.feeds_code())
                    except Exception:  # noqa: BLE001 - the call itself reports it
                        kw["feeds"] = _Code("...")
                else:
                    kw["feeds"] = self.context.feeds()
        elif self.feed_mode.value == "npz":
            kw["feeds"] = self.npz_path.value.strip()
        if not self.layerwise.value:
            kw["layerwise"] = False
        if self.ref_provider.value != self.cand_provider.value:
            kw["providers"] = ([self.ref_provider.value], [self.cand_provider.value])
        elif self.ref_provider.value != "CPUExecutionProvider":
            kw["providers"] = [self.ref_provider.value]
        dims = {**self.dims, **(self.context.dims if self.context else {})}
        shapes = {**self.shapes, **(self.context.shapes if self.context else {})}
        if dims:
            kw["dims"] = dims
        if shapes:
            kw["shapes"] = shapes
        return kw

    def _code(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs(code=True).items())
        pre = "from onnx_lab.widgets._context import image_feeds; " if "image_feeds(" in args \
            else ""
        return f"{pre}c = onnx_lab.compare(reference, candidate{', ' + args if args else ''})"

    def _tensor_cell_html(self, value: Any) -> str:
        d = self.result.first_divergence if self.result is not None else None
        text = short(value, 40)
        if d is not None and value == d["tensor"]:
            return f"<b style='color:#c62828' title='first divergence'>⚑ {text}</b>"
        return text

    def _progress(self, done: int, total: int, label: str) -> None:
        self.progress.max = max(1, int(total))
        self.progress.value = min(int(done), self.progress.max)
        self.progress_label.value = f"<small>{esc_text(str(label))} {int(done):d}/{int(total):d}</small>"

    # ------------------------------------------------------------------ actions
    def run(self) -> None:
        """``onnx_lab.compare(reference, candidate, ...)`` with the controls' values."""
        # the façade, loaded after this package
        import onnx_lab

        if self.context is not None:
            self.context.apply()  # clears the bar's missing-dim marks
        elif self.feed_mode.value == "npz" and not self.npz_path.value.strip():
            self.status.value = info_html("Type the path of an .npz file with the inputs.",
                                          kind="warn")
            return
        kw = self._kwargs()
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
        if not self.custom_tolerances.value:
            self._sync_tolerances()  # the preset the run used, its numbers in the boxes
        self.code.value = code_html(self._code())
        d = c.first_divergence
        colour = "#2e7d32" if c.passed else "#c62828"
        text = esc_text(c.summary_text()).replace("\n", "<br>")
        self.verdict.value = (f"<div class='onnx-lab-verdict' style='border-left:4px solid "
                              f"{colour};padding-left:8px'>{text}</div>")
        self._show_layers()
        if d is not None:
            # Open on the layer that introduced the drift, on the page that lists it.
            self.layers.show(d["tensor"])
            self.layers.select([d["tensor"]])
        else:
            self._on_layer([])

    def shown_layers(self) -> Any:
        """``c.layers`` as the table lists them: Constant layers dropped unless *show Constant
        layers* is ticked, by error or in topological order (compare's row order)."""
        c = self.result
        layers = c.layers
        if not self.show_constants.value and len(layers):
            layers = layers[~self._constant(layers)]
        if self.order.value == "error":
            layers = layers.sort_values("max_abs", ascending=False, na_position="last",
                                        kind="stable")
        return layers

    def _constant(self, layers: Any) -> Any:
        """Which rows of ``layers`` are constants: Constant nodes, and the nodes of the
        reference that compute weights from constants alone (a ConstantOfShape fill: a
        ResNet-50 with 239 of them filled the plot's left at the floor)."""
        mask = layers["op_type"] == "Constant"
        ref = getattr(self.reference, "model", None)
        if ref is not None and hasattr(ref, "index"):
            mask = mask | layers["node_id"].isin(weight_makers(ref))
        # never the first divergence (an output made of weights alone, a weight changed):
        # hidden, the table and plot showed only the layers that agree, under a failed verdict
        d = self.result.first_divergence if self.result is not None else None
        if d is not None and d.get("tensor") is not None:
            mask = mask & (layers["tensor"] != d["tensor"])
        return mask

    def _show_layers(self, _change: Any = None) -> None:
        c = self.result
        if c is None:
            return

        layers = self.shown_layers()
        n_const = int(self._constant(c.layers).sum()) if len(c.layers) else 0
        self.show_constants.description = f"show constant layers ({n_const})"
        # The plot follows the table's filter, always along topological order.
        topo = layers.sort_index() if self.order.value == "error" else layers
        self.plot_html.value = figure_html(layer_error_figure(topo, c.atol, c.first_divergence)) \
            if len(topo) else ""
        keep = [t for t in self.layers.selected if t in set(layers["tensor"])]
        self.layers.set(layers, keep_selection=False)
        self.layers.selected = keep
        self.layers._sync_boxes()
        self.layers_title.value = ("<b>Layers, " + ("largest error first" if self.order.value
                                                    == "error" else "in topological order")
                                   + "</b> (tick one to inspect it)&nbsp;")

    def _on_layer(self, keys: list[str]) -> None:
        c = self.result
        if c is None or not keys:
            self.layer = {}
            self.layer_title.value = self.hist_html.value = self.scatter_html.value = ""
            self.canvas.show(None)
            return
        tensor = keys[0]
        row = c.layers.loc[c.layers["tensor"] == tensor]
        node_id = row["node_id"].iloc[0] if len(row) else None
        d = c.first_divergence
        first = d is not None and d["tensor"] == tensor
        self.layer_title.value = (
            f"<b>{esc_text(tensor)}</b>" + (f" — node {esc_text(str(node_id))}"
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
        rendering = shown["rendering"]
        if rendering is not None:
            errors = c.layers.dropna(subset=["node_id"]).groupby("node_id")["max_abs"].max()
            self.canvas.show(rendering, overlay=errors, overlay_label="max_abs",
                             title=f"{tensor}: error on the graph")
            if isinstance(node_id, str):
                self.canvas.focus(node_id)
        else:
            self.canvas.show(None)
        self.layer = {"tensor": tensor, "hist": shown["hist"], "scatter": shown["scatter"],
                      "rendering": rendering}
        if isinstance(node_id, str):
            # Linked selection: an Explorer (or other widget) on the same Lab centres it.

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
                "hist_html": figure_html(hist), "scatter_html": figure_html(scatter)}


class _Code(str):
    """Text shown as is in the code line (``repr`` without quotes)."""

    def __repr__(self) -> str:
        return str(self)
