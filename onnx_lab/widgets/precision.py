"""PrecisionDoctor: which nodes to keep in fp32 (or out of int8), found by a search.

A view over ``lab.find_precision`` (:func:`onnx_lab.steps.find_precision`): pick the target,
tolerance and feeds, run (in a background thread, with progress and cancel), see the ranked
sensitivity (``plan.plot()``), the before/after error per output (``plan.outputs``), the kept
nodes highlighted on the graph canvas (``plan.render()``), and save the converted model.
"""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets as w

from onnx_lab.errors import InputError
from onnx_lab.numerics.metrics import NEXT_TOKEN, RULES
from onnx_lab.numerics.precision.trials import make_tolerance
from onnx_lab.render._html import esc_text
from onnx_lab.render.tables import frame_html
from onnx_lab.widgets._common import View, code_html, figure_html, info_html

__all__ = ["PrecisionDoctor"]

#: Outline of the kept nodes on the graph: green stands out from the sensitivity colours
#: (yellow to dark red), where the render's default red outline vanished on the top ranks.
KEPT_OUTLINE = "#1a9e3f"


class PrecisionDoctor(View):
    """Search the fewest nodes to keep in higher precision so the outputs meet a tolerance.

    Args:
        lab: the Lab (its current version is the float32 reference; the plan becomes a new
            version of its history).
        background: run the search in a thread (the notebook stays responsive and Cancel
            works); False runs it in the callback (tests, scripts).

    Attributes:
        result: the :class:`~onnx_lab.numerics.precision.PrecisionPlan` of the last run.

    Example:
        >>> from onnx_lab.widgets import PrecisionDoctor
        >>> PrecisionDoctor(onnx_lab.open("model.onnx"))
    """

    def __init__(self, lab: Any, *, background: bool = True) -> None:
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        self.lab = lab
        self.background = background
        self.result: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.target = w.Dropdown(options=["fp16", "bf16", "int8", "int4"], value="fp16",
                                 description="target", layout=w.Layout(width="180px"))
        # int4 (decoder LLMs): next-token targets in place of the element-wise tolerance.
        # Every box starts at the number in force for the target (the one tolerance table,
        # numerics.metrics: PRESETS and NEXT_TOKEN) and a run passes the boxes' values.
        self.min_top1 = w.FloatText(value=NEXT_TOKEN["int4"].min_top1, description="min top-1",
                                    layout=w.Layout(width="170px"))
        self.max_kl = w.FloatText(value=NEXT_TOKEN["int4"].max_kl, description="max KL",
                                  layout=w.Layout(width="170px"))
        self.atol = w.FloatText(value=0.0, description="atol", layout=w.Layout(width="170px"))
        self.rtol = w.FloatText(value=0.0, description="rtol", layout=w.Layout(width="170px"))
        self.metric = w.Dropdown(options=[(k.label, k.name) for k in RULES.values()
                                          if k.label and k.search],
                                 value="elementwise", description="metric",
                                 layout=w.Layout(width="260px"))
        self.threshold = w.FloatText(value=20.0, description="min", layout=w.Layout(
            width="150px"))
        self.feeds = w.Text(placeholder="inputs.npz (empty: one seeded sample)",
                            description="feeds", layout=w.Layout(width="360px"))
        self.run_button = w.Button(description="Find", icon="search", button_style="primary")
        self.cancel_button = w.Button(description="Cancel", icon="stop", disabled=True)
        # Shown from the first run on (an idle bar at 0 read as a search under way).
        self.progress = w.IntProgress(value=0, min=0, max=1,
                                      layout=w.Layout(width="260px", display="none"))
        self.progress_label = w.HTML()
        self.verdict = w.HTML()
        self.chart = w.HTML()
        self.outputs_html = w.HTML()
        self.canvas = GraphCanvas(lab, height=480)
        self.save_path = w.Text(placeholder="model.fp16.onnx", description="save as",
                                layout=w.Layout(width="320px"))
        self.save_button = w.Button(description="Save", icon="save", disabled=True)
        self._result_panels = (self.verdict, self.chart, self.outputs_html)
        self._setting = False  # True while _target_defaults sets the metric itself
        self.metric.observe(lambda _c: self._metric_defaults(), names="value")
        self.target.observe(lambda _c: self._target_defaults(), names="value")
        self._target_defaults()
        self.run_button.on_click(lambda _b: self._guard(self.run)())
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.save_button.on_click(lambda _b: self._guard(self.save)())
        wrap = w.Layout(flex_flow="row wrap")
        super().__init__([
            w.HBox([self.target, self.metric, self.atol, self.rtol, self.threshold,
                    self.min_top1, self.max_kl], layout=wrap),
            w.HBox([self.feeds, self.run_button, self.cancel_button, self.progress,
                    self.progress_label], layout=wrap),
            self.verdict, self.chart, self.outputs_html, self.canvas,
            w.HBox([self.save_path, self.save_button], layout=wrap),
        ])
        self.add_class("onnx-lab-precision")

    def _target_defaults(self) -> None:
        """The target's default rule (:func:`~onnx_lab.numerics.precision.trials.make_tolerance`,
        the table compare and the CLI read): its metric and numbers in the boxes."""
        rule = make_tolerance(self.target.value)
        self._setting = True
        try:
            offered = {v for _, v in self.metric.options}
            self.metric.value = rule.kind if rule.kind in offered else "elementwise"
        finally:
            self._setting = False
        self._metric_defaults()

    def _metric_defaults(self) -> None:
        """The boxes of the chosen metric at the target's numbers for it."""
        if self._setting:
            return
        target = self.target.value if self.target.value != "int4" else "fp32"
        rule = make_tolerance(target, self.metric.value)
        threshold = RULES[rule.kind].threshold
        if threshold is None:
            self.atol.value, self.rtol.value = rule.atol, rule.rtol
        else:
            self.threshold.value = getattr(rule, threshold)
        nt = NEXT_TOKEN["int4"]
        self.min_top1.value, self.max_kl.value = nt.min_top1, nt.max_kl
        self._metric_fields()

    def _metric_fields(self) -> None:
        """atol/rtol for the element-wise metric, the threshold for the others; int4: the
        next-token targets (top-1 agreement, KL) only."""
        int4 = self.target.value == "int4"
        elementwise = self.metric.value == "elementwise"
        for box in (self.atol, self.rtol):
            box.layout.display = None if elementwise and not int4 else "none"
        self.threshold.layout.display = "none" if elementwise or int4 else None
        self.metric.layout.display = "none" if int4 else None
        self.feeds.layout.display = "none" if int4 else None
        for box in (self.min_top1, self.max_kl):
            box.layout.display = None if int4 else "none"
        self.save_path.placeholder = f"model.{self.target.value}.onnx"
        self.threshold.description = RULES[self.metric.value].threshold_label

    # ------------------------------------------------------------------ actions
    def _kwargs(self) -> dict[str, Any]:
        if self.target.value == "int4":
            return {"min_top1": float(self.min_top1.value), "max_kl": float(self.max_kl.value)}
        kw: dict[str, Any] = {"feeds": self.feeds.value.strip() or None}
        if self.metric.value == "elementwise":
            kw.update(atol=float(self.atol.value), rtol=float(self.rtol.value))
        else:
            kw.update(metric=self.metric.value, tolerance=float(self.threshold.value))
        return kw

    def code_for(self) -> str:
        """The one line of Python this run is."""
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs().items() if v is not None)
        return f"plan = lab.find_precision({self.target.value!r}, {args})"

    def run(self) -> None:
        """Start the search (in a thread unless ``background=False``)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self.run_button.disabled, self.cancel_button.disabled = True, False
        self.progress.value = 0
        self.progress_label.value = ""
        self.progress.layout.display = None
        if self.background:
            self._thread = threading.Thread(target=self._search, daemon=True)
            self._thread.start()
        else:
            self._search()

    def cancel(self) -> None:
        """Stop after the current trial; the best plan so far is kept (if one passed)."""
        self._stop.set()
        self.progress_label.value = "cancelling after this trial..."

    def _on_progress(self, done: int, total: int, label: str) -> None:
        """The search's own count: ``total`` is re-estimated as the search learns its length
        (never reached before the last trial), so the bar fills only when it ends."""
        total = max(int(total), 1)
        if total < self.progress.value:  # shrinking below the value: lower the value first
            self.progress.value = min(int(done), total)
        self.progress.max = total
        self.progress.value = min(int(done), total)
        self.progress_label.value = esc_text(f"{label} (trial {int(done)} of "
                                             f"{'' if done >= total else 'about '}{total})")

    def _search(self) -> None:
        try:
            plan = self._call(self.lab.find_precision, self.target.value,
                              progress=self._on_progress, should_stop=self._stop.is_set,
                              busy="searching...", code=self.code_for(), **self._kwargs())
            if plan is not None:
                self.show(plan)
                # The bar's total was an estimate: a finished search fills it.
                self.progress.value = self.progress.max
                self.progress_label.value = esc_text(
                    f"done: {len(plan.trials)} trials, {plan.seconds:.1f} s")
            else:  # failed or cancelled with nothing that passed: the status says which
                self.progress.layout.display = "none"
                self.progress_label.value = ""
        finally:
            self.run_button.disabled, self.cancel_button.disabled = False, True

    def show(self, plan: Any) -> None:
        """Show a PrecisionPlan: verdict, sensitivity chart, outputs, kept nodes on the graph."""
        self.result = plan
        kind = "ok" if plan.passed else "warn"
        full = plan.trials.iloc[0]
        why = ""
        if not full["passed"]:  # why everything converted fails (an fp16 overflow...)
            why = full["note"] or f"score {full['score']:.3g} > 1"
            why = f"<div>everything converted fails: {esc_text(why)}</div>"
        why += "".join(f"<div>note: {esc_text(n)}</div>" for n in plan.notes)
        self.verdict.value = info_html(plan.summary_text(), kind=kind) + why + (
            f"<div>kept: {esc_text(', '.join(plan.kept)) or 'none'}</div>")
        self.chart.value = figure_html(plan.plot(top=20))
        # the plan's verdict first: at 1280 px passed_after sat behind a horizontal scroll
        first = [c for c in ("tensor", "passed_after", "passed_before") if c in plan.outputs]
        outputs = plan.outputs[first + [c for c in plan.outputs.columns if c not in first]]
        self.outputs_html.value = frame_html(outputs, caption="error per output: "
                                             "everything converted (before) vs the plan (after)")
        if plan.target == "int4":  # accuracy beside speed per trial, and each kept node's cost
            self.chart.value += figure_html(plan.plot(kind="trials"))
            self.outputs_html.value += frame_html(
                plan.trials.drop(columns=["kept"]), caption="trials: accuracy beside decode "
                "speed and size") + frame_html(plan.costs, caption="what each kept node costs")
        self._show_graph(plan)
        self.save_button.disabled = False

    def _show_graph(self, plan: Any) -> None:
        """The graph coloured by sensitivity around every kept node (one hop, so each is
        drawn at a readable scale; the whole graph when nothing is kept), the kept nodes
        outlined on the canvas."""
        if plan.kept:
            kw: dict[str, Any] = {"around": list(plan.kept), "radius": 1}
        else:
            kw = {"around": None, "collapse": None if len(plan.source.index) <= 120 else "auto"}
        noun = {"int8": "excluded from int8", "int4": "kept out of int4"}.get(
            plan.target, "kept in float32")
        kw["highlight"] = {nid: KEPT_OUTLINE for nid in plan.kept}
        try:
            self.canvas.show(plan.render(**kw), model=plan.source,
                             title=f"{len(plan.kept)} nodes {noun}: outlined in green")
        except Exception:  # noqa: BLE001 - a graph that cannot be drawn leaves the rest shown
            self.canvas.show(None)
            return
        self.canvas.highlight = sorted({k for k in map(self.canvas.key_for, plan.kept) if k})

    def save(self) -> None:
        """Save the converted model (the Lab's current version) to the path box."""
        path = self.save_path.value.strip()
        if not path:
            raise InputError("No path to save to.", fix="Type a file name in 'save as'.")
        self._call(self.lab.save, path, code=f"lab.save({path!r})")
        if self.error is None:
            self.status.value = info_html(f"saved {path}", kind="ok")
            self.code.value = code_html(f"lab.save({path!r})")
