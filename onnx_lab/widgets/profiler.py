"""Profiler: where does the time go? A view over ``onnx_lab.profile`` and friends.

Profile calls ``lab.profile(providers=..., runs=... | budget_s=..., warmup=..., opt_level=...)``;
Levels calls ``onnx_lab.profiling.levels``; Batch sweep calls ``lab.batch_sweep``; Cost calls
``lab.cost()`` and ``Cost.roofline(...)``; Profile generation (decoder LLMs with a KV cache)
calls ``lab.profile_generation(prompt=..., new_tokens=...)`` and shows prefill and decode side
by side.

Long actions (Profile, ORT levels, Batch sweep) run in a background thread inside a notebook
kernel: the progress bar moves, Cancel stops them at the next run, and what was measured
before the cancel is shown.
"""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets as w

from onnx_lab._pandas import pd
from onnx_lab.core.shapes import dynamic_dims
from onnx_lab.errors import LabError
from onnx_lab.lab import as_lab
from onnx_lab.profiling import levels
from onnx_lab.profiling.advice import profile_advice, sweep_advice
from onnx_lab.profiling.generate import cache_layout
from onnx_lab.render._html import esc_text
from onnx_lab.render.profile_plots import levels_figure, roofline_figure
from onnx_lab.render.results import (
    batch_sweep_html,
    cost_totals_html,
    generation_summary_html,
    generation_tables_html,
    profile_summary_html,
)
from onnx_lab.render.tables import frame_html
from onnx_lab.runtime.session import PROFILED_PROVIDERS, available_providers
from onnx_lab.widgets._common import (
    PagedTable,
    SelectableTable,
    View,
    code_html,
    figure_html,
    info_html,
    lazy_tabs,
)
from onnx_lab.widgets._context import RunContext
from onnx_lab.widgets._links import selection

__all__ = ["Profiler"]


def _slow_frame(times: Any, entries: Any) -> Any:
    """node_id, op_type, time_ms of the slowest nodes (for the tickable list)."""
    return pd.DataFrame({"node_id": list(times.index),
                         "op_type": [entries[n].node.op_type if n in entries else ""
                                     for n in times.index],
                         "time_ms": [round(float(v), 3) for v in times.to_numpy()]})


def _parse_sizes(text: str) -> list[int] | None:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        return None


class Profiler(View):
    """Per-operator profiling, latency, optimization levels, batch sweep and cost/roofline.

    Args:
        lab: a :class:`~onnx_lab.lab.Lab` (or anything ``onnx_lab.open`` takes).
        runs: fixed runs per point; None (0 in the box): run until the median is stable or
            the time budget is spent.
        warmup: default of the warm-up box.
        budget_s: the time budget of one action (default 6 s: with session creation, the
            trace and the tables each action stays under ~10 s on a 2-core machine).
        background: run long actions in a thread (cancellable; default: inside a notebook
            kernel only). :meth:`wait` joins the running action.

    Attributes:
        result: the object behind the last action: a Profile, the levels DataFrame, a
            BatchSweep, a Cost (with ``roofline`` the roofline DataFrame/dict), or the
            latency-overlay Rendering.

    Example:
        >>> import onnx_lab
        >>> from onnx_lab.widgets import Profiler
        >>> Profiler(onnx_lab.open("sample:convnet"))
    """

    def __init__(self, lab: Any, *, runs: int | None = None, warmup: int = 3,
                 budget_s: float = 6.0, page_size: int = 15,
                 background: bool | None = None) -> None:
        # on use: tests stand in for openvino_available on its module
        from onnx_lab.runtime.openvino import INSTALL_HINT, openvino_available

        self.lab = as_lab(lab)
        self.result: Any = None
        self.profile_result: Any = None
        self.context = RunContext(self.lab, feeds=False)
        self.background = _in_kernel() if background is None else bool(background)
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        avail = [p for p in PROFILED_PROVIDERS if p in available_providers()]
        if openvino_available():
            avail.append("OpenVINO:CPU")
        self.providers = [w.Checkbox(value=p == "CPUExecutionProvider", description=p,
                                     indent=False, layout=w.Layout(width="220px"))
                          for p in avail]
        self.backend_note = w.HTML("" if openvino_available() else
                                   f"<span style='color:#666;font-size:12px'>"
                                   f"{esc_text(INSTALL_HINT)}</span>")
        self.runs = w.BoundedIntText(value=int(runs or 0), min=0, max=100000,
                                     description="runs",
                                     tooltip="0: until the median is stable or the budget is "
                                     "spent", layout=w.Layout(width="160px"))
        self.budget = w.BoundedFloatText(value=float(budget_s), min=0.5, max=3600.0, step=1.0,
                                         description="budget s",
                                         layout=w.Layout(width="170px"))
        self.warmup = w.BoundedIntText(value=warmup, min=0, max=10000, description="warm-up",
                                       layout=w.Layout(width="160px"))
        # "budget too small: N runs; a budget of ~X s gives >= M runs", with a button that
        # puts X in the budget box and runs the same action again.
        self.budget_hint = w.HTML()
        self.budget_apply = w.Button(description="use that budget", icon="clock-o",
                                     layout=w.Layout(width="auto", display="none"))
        self.advice: Any = None
        self._advised: Any = None
        self.budget_apply.on_click(lambda _b: self._use_advised_budget())
        self.opt_level = w.Dropdown(options=["disable", "basic", "extended", "all"], value="all",
                                    description="ORT level", layout=w.Layout(width="220px"))
        self.profile_button = w.Button(description="Profile", icon="play",
                                       button_style="primary")
        self.levels_button = w.Button(description="Compare ORT levels", icon="list",
                                      layout=w.Layout(width="180px"))
        dyn = self._dynamic_dims()
        # Any named dynamic dim can be swept (the others keep the Lab's values); the dims
        # the Lab leaves open come first. A model without one has nothing to sweep.
        self.sweep_dim = w.Dropdown(options=dyn, value=dyn[0] if dyn else None,
                                    description="dim", layout=w.Layout(width="180px"))
        self.sweep_sizes = w.Text(value="1,2,4,8", description="sizes",
                                  layout=w.Layout(width="220px"))
        self.sweep_button = w.Button(description="Batch sweep", icon="line-chart")
        self.gen_prompt = w.BoundedIntText(value=16, min=1, max=1_000_000,
                                           description="prompt",
                                           tooltip="prompt tokens (the prefill)",
                                           layout=w.Layout(width="160px"))
        self.gen_tokens = w.BoundedIntText(value=32, min=1, max=1_000_000,
                                           description="new tokens",
                                           style={"description_width": "initial"},
                                           tooltip="decode steps after the prefill",
                                           layout=w.Layout(width="160px"))
        self.generate_button = w.Button(description="Profile generation", icon="comments",
                                        layout=w.Layout(width="170px"))
        self._long_buttons = [self.profile_button, self.levels_button]
        why_not = self._why_no_generation()
        if why_not is None:
            self._long_buttons.append(self.generate_button)
        else:
            self.generate_button.disabled = True
            self.generate_button.tooltip = why_not
        if dyn:
            self._long_buttons.append(self.sweep_button)
        else:
            self.sweep_button.disabled = True
            self.sweep_button.tooltip = "the model has no named dynamic dim to sweep"
        self.peak_tflops = w.FloatText(value=1.0, description="peak TFLOP/s",
                                       style={"description_width": "initial"},
                                       layout=w.Layout(width="180px"))
        self.bandwidth = w.FloatText(value=50.0, description="GB/s",
                                     layout=w.Layout(width="160px"))
        self.cost_button = w.Button(description="Cost / roofline", icon="calculator")
        self.render_button = w.Button(description="Latency on graph", icon="project-diagram",
                                      tooltip="Profile.render(): time per node as a colour",
                                      layout=w.Layout(width="170px"))
        # Hidden, the bar keeps its place in the row (the row does not jump when it shows); at
        # a fixed 260 px it did not fit after the four buttons of a 1280 px window and wrapped
        # onto a line of its own, an empty row above the dim row. It takes what is left of
        # the line now (60-260 px).
        self.progress = w.IntProgress(value=0, min=0, max=1,
                                      layout=w.Layout(flex="1 1 60px", min_width="60px",
                                                      max_width="260px", width="auto",
                                                      visibility="hidden"))
        # What is being timed, whole: as the bar's description it was cut to 12 characters
        # ("profiling cp" for "profiling cpu").
        self.progress_label = w.HTML(layout=w.Layout(visibility="hidden", min_width="0",
                                                     flex="0 1 auto"))
        self.cancel_button = w.Button(description="Cancel", icon="stop", disabled=True,
                                      button_style="warning", layout=w.Layout(width="100px"))
        self.cancel_button.on_click(lambda _b: self.cancel())
        # Outputs. Until its button fills it, each tab says which button that is (the
        # Overview was an empty box, Cost two bare captions over nothing).
        profile_hint = "Click Profile to time the model: {} show here."
        self.summary_html = w.HTML(info_html(profile_hint.format(
            "the latency, op-type shares, top nodes and memory")))
        self.plot_html = w.HTML()
        self.ops_table = PagedTable(page_size=page_size,
                                    caption=profile_hint.format("the time per op type"))
        self.nodes_table = PagedTable(page_size=page_size,
                                      caption=profile_hint.format("the slowest nodes"))
        self.latency_html = w.HTML(info_html(profile_hint.format(
            "the latency per session, the memory and the session's settings")))
        self.levels_html = w.HTML(info_html(
            "Click Compare ORT levels to time onnxruntime's optimization levels side by side."))
        self.sweep_html = w.HTML(info_html(
            "Pick a dim and its sizes, then click Batch sweep: the latency per size and the "
            "knee show here." if dyn else
            "Batch sweep needs a named dynamic dim (a batch) to vary: this model has none."))
        self.gen_html = w.HTML(info_html(
            "Click Profile generation to time the prefill and each decode step."
            if why_not is None else f"Profile generation needs a decoder with a KV cache: "
                                    f"{why_not}"))
        self.gen_plot = w.HTML()
        self.gen_ops = PagedTable(page_size=page_size, caption="")
        self.cost_html = w.HTML(info_html(
            "Click Cost / roofline to count the FLOPs and bytes of every node and place them "
            "under the peak TFLOP/s and GB/s above."))
        self.cost_table = PagedTable(page_size=page_size, caption="")
        self.roof_table = PagedTable(page_size=page_size, caption="")
        self.roofline: Any = None
        # on use: anywidget loads with the first graph view
        from onnx_lab.widgets.canvas import GraphCanvas

        # Latency on the graph: the canvas, and the slowest nodes to tick (a tick centres the
        # node here and in every widget on the same Lab).
        self.canvas = GraphCanvas(self.lab, height=520)
        self.slow_nodes = SelectableTable(
            "node_id", [("node_id", 260), ("op_type", 120), ("time_ms", 90)],
            page_size=10, single=True, on_change=self._guard(self._on_slow_node))
        self.slow_nodes.add_class("onnx-lab-slow-nodes")
        self.link = selection(self.lab)
        self.link.subscribe(self, self._guard(self.canvas.focus))
        self.canvas.on_select(self._guard(lambda nid: self.link.select(nid, source=self)))
        # until the graph is drawn, the tab says how to draw it (it showed an empty table)
        self.graph_hint = w.HTML(info_html("Profile, then click 'Latency on graph' to draw "
                                           "the time per node here."))
        self.graph_box = w.VBox([
            self.graph_hint,
            w.HTML("<b>Slowest nodes</b> (tick one to centre it here and in other widgets on "
                   "this Lab)"), self.slow_nodes, self.canvas])
        self.tabs = w.Tab(children=[
            w.VBox([self.summary_html, self.plot_html]),
            self.ops_table, self.nodes_table, self.latency_html,
            self.levels_html, self.sweep_html, w.VBox([self.cost_html, self.roof_table, self.cost_table]),
            self.graph_box, w.VBox([self.gen_html, self.gen_plot, self.gen_ops])])
        for i, t in enumerate(["Overview", "Op types", "Top nodes", "Latency", "ORT levels",
                               "Batch sweep", "Cost", "Graph", "Generation"]):
            self.tabs.set_title(i, t)
        lazy_tabs(self.tabs)  # the page draws a tab's content when it is first opened
        for b, fn in [(self.cost_button, self.run_cost),
                      (self.render_button, self.render_latency)]:
            b.on_click(self._clicked(fn))
        for b, fn in [(self.profile_button, self.run_profile),
                      (self.levels_button, self.run_levels),
                      (self.sweep_button, self.run_sweep),
                      (self.generate_button, self.run_generation)]:
            b.on_click(lambda _b, fn=fn: self._long(fn))
        super().__init__([
            self.context,
            w.HBox([w.HTML("<b>providers</b>&nbsp;"), *self.providers, self.backend_note],
                   layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.runs, self.budget, self.warmup, self.opt_level],
                   layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.budget_hint, self.budget_apply], layout=w.Layout(flex_flow="row wrap")),
            # Cancel beside the actions it stops, the progress after it: the progress is hidden
            # (not removed, so the row does not jump) and took its 260 px between them, which
            # left Cancel far to the right (1920 px) or alone on a second line (1280 px).
            w.HBox([self.profile_button, self.render_button, self.levels_button,
                    self.cancel_button, self.progress, self.progress_label],
                   layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.sweep_dim, self.sweep_sizes, self.sweep_button]),
            w.HBox([self.gen_prompt, self.gen_tokens, self.generate_button]),
            w.HBox([self.peak_tflops, self.bandwidth, self.cost_button]),
            self.tabs,
        ])
        self.add_class("onnx-lab-profiler")
        self.code.value = code_html(self._profile_code())

    # ------------------------------------------------------------------ budget advice
    def _show_advice(self, advice: Any, action: Any) -> None:
        """Say when the budget gave too few runs (:mod:`onnx_lab.profiling.advice`) and
        offer the budget that would give enough."""
        self.advice = advice
        self._advised = action if advice is not None else None
        if advice is None:
            self.budget_hint.value = ""
            self.budget_apply.layout.display = "none"
            return
        self.budget_hint.value = info_html(advice.text, kind="warn")
        self.budget_apply.description = f"use {advice.suggested_s:g} s and run again"
        self.budget_apply.layout.display = None

    def _use_advised_budget(self) -> None:
        """The advised budget in the box, then the action that asked for it again."""
        if self.advice is None:
            return
        self.budget.value = min(float(self.advice.suggested_s), float(self.budget.max))
        action = self._advised
        if action is not None:
            self._long(action)

    # ------------------------------------------------------------------ helpers
    def _on_slow_node(self, keys: list[str]) -> None:
        """A ticked slow node: centred in this canvas and selected in linked widgets."""
        if keys:
            self.canvas.focus(keys[0])
            self.link.select(keys[0], source=self)

    def _clicked(self, fn):
        guarded = self._guard(fn)
        return lambda _b: guarded()

    def _why_no_generation(self) -> str | None:
        """None when the model has a KV cache the generation loop can feed, else why not."""
        try:
            cache_layout(self.lab.model, self.lab.dims)
        except LabError as e:
            return str(e)
        return None

    def _dynamic_dims(self) -> list[str]:
        named = [d for d in dynamic_dims(self.lab.model) if d != "?"]
        return sorted(named, key=lambda d: d in self.lab.dims)

    @property
    def selected_providers(self) -> list[str]:
        """The ticked providers (OpenVINO:CPU is the OpenVINO runtime)."""
        return [cb.description for cb in self.providers if cb.value]

    def _timing_kwargs(self) -> dict[str, Any]:
        """runs=N (fixed) or budget_s=S (until stable), and warmup."""
        if int(self.runs.value) > 0:
            return {"runs": int(self.runs.value), "warmup": int(self.warmup.value)}
        return {"budget_s": float(self.budget.value), "warmup": int(self.warmup.value)}

    def _profile_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"providers": self.selected_providers, **self._timing_kwargs()}
        if self.opt_level.value != "all":
            kw["opt_level"] = self.opt_level.value
        return kw

    def _profile_code(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._profile_kwargs().items())
        ctx = self.context.code() if hasattr(self, "context") else ""
        return (ctx + "; " if ctx else "") + f"p = lab.profile({args})"

    def _progress(self, done: int, total: int, label: str) -> None:
        self.progress.max = max(1, int(total))
        self.progress.value = min(int(done), self.progress.max)
        self.progress_label.value = f"<small>{esc_text(str(label))}</small>"

    def _run(self, fn, *args, busy: str, **kwargs):
        if self._call(self.context.apply) is None and self.error is not None:
            return None
        self.progress.layout.visibility = self.progress_label.layout.visibility = "visible"
        self.progress.value = 0
        self.progress_label.value = ""
        try:
            return self._call(fn, *args, busy=busy, cancel=self._cancel, **kwargs)
        finally:
            self.progress.layout.visibility = self.progress_label.layout.visibility = "hidden"

    # ------------------------------------------------------------------ long actions
    @property
    def running(self) -> bool:
        """Whether a long action is running in the background."""
        return self._thread is not None and self._thread.is_alive()

    def cancel(self) -> None:
        """Stop the running action at its next run; its partial results are shown."""
        if self.running or not self.cancel_button.disabled:
            self._cancel.set()
            self.status.value = info_html("Cancelling: stopping at the next run…", kind="busy")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running action (True when none is left running)."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.running

    def _long(self, fn) -> None:
        """Run ``fn`` (an action) with Cancel enabled: in a thread inside a kernel."""
        if self.running:
            self.status.value = info_html("An action is running: wait or cancel it.",
                                          kind="warn")
            return
        self._cancel.clear()
        for b in self._long_buttons:
            b.disabled = True
        self.cancel_button.disabled = False

        def body() -> None:
            try:
                self._guard(fn)()
            finally:
                for b in self._long_buttons:
                    b.disabled = False
                self.cancel_button.disabled = True

        if self.background:
            self._thread = threading.Thread(target=body, name="onnx-lab-profiler", daemon=True)
            self._thread.start()
        else:
            body()

    # ------------------------------------------------------------------ actions
    def run_profile(self) -> None:
        """``onnx_lab.profile(lab, ...)``: op-type share, top nodes, latency."""

        kw = self._profile_kwargs()
        if not kw["providers"]:
            self.status.value = info_html("Tick at least one provider.", kind="warn")
            return
        what = (f"{kw['runs']} runs" if "runs" in kw else
                f"until stable, at most {kw['budget_s']:g} s")
        p = self._run(self.lab.profile, progress=self._progress,
                      busy=f"Profiling ({what})…", **kw)
        if p is None:
            return

        self.profile_result = p
        self.result = p
        self._show_advice(profile_advice(p), self.run_profile)
        stats = p.latency_stats
        self.summary_html.value = profile_summary_html(p)
        self.plot_html.value = figure_html(p.plot())
        self.ops_table.set(p.ops.sort_values("total_ms", ascending=False), caption="op types")
        self.nodes_table.set(p.nodes.drop(columns=["components"], errors="ignore")
                             .sort_values("total_ms", ascending=False), caption="top nodes")
        self.latency_html.value = (frame_html(stats, caption="latency per session")
                                   + frame_html(p.memory, caption="memory: measured process "
                                                "peak beside the cost model's activations")
                                   + frame_html(p.session, caption="session"))
        self.tabs.selected_index = 0
        self.code.value = code_html(self._profile_code() + "; p.plot()")

    def render_latency(self) -> None:
        """``p.render(collapse="auto")``: the graph coloured by time per node."""
        if self.profile_result is None:
            self.status.value = info_html("Click Profile first.", kind="warn")
            return
        r = self._call(self.profile_result.render, collapse="auto", busy="Laying out…")
        if r is None:
            return
        times = self.profile_result.overlay()
        self.canvas.show(r, overlay=times, overlay_label="time_ms",
                         title="time per node (ms per run)")
        nodes = self.lab.index.entries
        slow = times.sort_values(ascending=False).head(30)
        self.slow_nodes.set(_slow_frame(slow, nodes), keep_selection=False)
        self.graph_hint.value = ""
        self.result = r
        self.tabs.selected_index = 7
        self.code.value = code_html(self._profile_code() + '; p.render(collapse="auto")')

    def run_levels(self) -> None:
        """``onnx_lab.profiling.levels(lab, runs=...)``."""
        kw = self._timing_kwargs()
        df = self._run(levels, self.lab, progress=self._progress,
                       busy="Timing each ORT optimization level (interleaved)…", **kw)
        if df is None:
            return

        notes = "".join(f"<li>{esc_text(str(n))}</li>" for n in df.attrs.get("notes", []))
        verdicts = "".join(f"<li>{esc_text(v)}</li>" for v in df.verdict if v)
        self.levels_html.value = (frame_html(df.drop(columns=["verdict"]),
                                             caption="ORT optimization levels")
                                  + figure_html(levels_figure(df))
                                  + (f"<ul>{verdicts}</ul>" if verdicts else "")
                                  + (f"<ul>{notes}</ul>" if notes else ""))
        self.result = df
        self.tabs.selected_index = 4
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        self.code.value = code_html(f"onnx_lab.profiling.levels(lab, {args})")

    def run_sweep(self) -> None:
        """``onnx_lab.profiling.batch_sweep(lab, sizes, dim=...)``."""

        sizes = _parse_sizes(self.sweep_sizes.value)
        if not sizes:
            self.status.value = info_html("Sizes must be comma-separated ints, e.g. 1,2,4,8.",
                                          kind="warn")
            return
        kw = self._timing_kwargs()
        provs = self.selected_providers or ["CPUExecutionProvider"]
        if provs != ["CPUExecutionProvider"]:
            kw["providers"] = provs
        dim = self.sweep_dim.value
        s = self._run(self.lab.batch_sweep, tuple(sizes), dim=dim, progress=self._progress,
                      busy=f"Sweeping {dim} over {sizes}…", **kw)
        if s is None:
            return

        self.sweep_html.value = batch_sweep_html(s) + figure_html(s.plot())
        self._show_advice(sweep_advice(s, sizes), self.run_sweep)
        self.result = s
        self.tabs.selected_index = 5
        args = "".join(f", {k}={v!r}" for k, v in kw.items())
        self.code.value = code_html(f"lab.batch_sweep({tuple(sizes)!r}, dim={dim!r}{args})")

    def run_generation(self) -> None:
        """``lab.profile_generation(prompt=P, new_tokens=N, ...)``: prefill and decode."""
        kw = self._profile_kwargs()
        if not kw["providers"]:
            self.status.value = info_html("Tick at least one provider.", kind="warn")
            return
        if "warmup" in kw:
            kw["warmup"] = min(int(kw["warmup"]), 1)
        P, N = int(self.gen_prompt.value), int(self.gen_tokens.value)
        g = self._run(self.lab.profile_generation, prompt=P, new_tokens=N,
                      progress=self._progress,
                      busy=f"Generating: prefill of {P} tokens, {N} decode steps…", **kw)
        if g is None:
            return

        self.result = g
        self.gen_html.value = generation_summary_html(g) + generation_tables_html(g)
        self.gen_plot.value = figure_html(g.plot())
        self.gen_ops.set(g.ops, caption="op types per phase")
        self.tabs.selected_index = 8
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        self.code.value = code_html(f"g = lab.profile_generation(prompt={P}, new_tokens={N}, "
                                    f"{args}); g.plot()")

    def run_cost(self) -> None:
        """``lab.cost()`` and ``cost.roofline(peak_flops, bandwidth)``."""

        cost = self._call(self.lab.cost, busy="Counting FLOPs and bytes…")
        if cost is None:
            return
        peak = float(self.peak_tflops.value) * 1e12
        bw = float(self.bandwidth.value) * 1e9
        roof = self._call(cost.roofline, peak, bw)

        fig = ""
        if roof is not None:
            self.roof_table.set(roof.nodes.sort_values("time_ms", ascending=False),
                                caption="roofline per node")
            fig = figure_html(roofline_figure(cost, roof))
        self.roofline = roof
        self.cost_html.value = cost_totals_html(cost, roof) + fig
        nodes = cost.nodes
        if "flops" in nodes:
            nodes = nodes.sort_values("flops", ascending=False, na_position="last")
        self.cost_table.set(nodes, caption="cost per node")
        self.result = cost
        self.tabs.selected_index = 6
        self.code.value = code_html(f"cost = lab.cost(); cost.roofline({peak:.3g}, {bw:.3g})")


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


