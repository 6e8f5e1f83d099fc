"""Profiler: where does the time go? A view over ``onnx_lab.profile`` and friends.

Profile calls ``onnx_lab.profile(lab, providers=..., runs=..., warmup=..., opt_level=...)``;
Levels calls ``onnx_lab.profiling.levels``; Batch sweep calls
``onnx_lab.profiling.batch_sweep``; Cost calls ``lab.cost()`` and ``Cost.roofline(...)``.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from onnx_lab.widgets._common import (
    PagedTable,
    View,
    code_html,
    figure_html,
    info_html,
    rendering_html,
)

__all__ = ["Profiler"]


def _parse_sizes(text: str) -> list[int] | None:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        return None


class Profiler(View):
    """Per-operator profiling, latency, optimization levels, batch sweep and cost/roofline.

    Args:
        lab: a :class:`~onnx_lab.lab.Lab` (or anything ``onnx_lab.open`` takes).
        runs, warmup: defaults of the run count boxes.

    Attributes:
        result: the object behind the last action: a Profile, the levels DataFrame, a
            BatchSweep, a Cost (with ``roofline`` the roofline DataFrame/dict), or the
            latency-overlay Rendering.

    Example:
        >>> import onnx_lab
        >>> from onnx_lab.widgets import Profiler
        >>> Profiler(onnx_lab.open("sample:convnet"))
    """

    def __init__(self, lab: Any, *, runs: int = 20, warmup: int = 3,
                 page_size: int = 15) -> None:
        from onnx_lab.lab import as_lab
        from onnx_lab.runtime.session import PROFILED_PROVIDERS, available_providers

        from onnx_lab.widgets._context import RunContext

        self.lab = as_lab(lab)
        self.result: Any = None
        self.profile_result: Any = None
        self.context = RunContext(self.lab, feeds=False)
        avail = [p for p in PROFILED_PROVIDERS if p in available_providers()]
        self.providers = [w.Checkbox(value=p == "CPUExecutionProvider", description=p,
                                     indent=False, layout=w.Layout(width="260px"))
                          for p in avail]
        self.runs = w.BoundedIntText(value=runs, min=1, max=100000, description="runs",
                                     layout=w.Layout(width="160px"))
        self.warmup = w.BoundedIntText(value=warmup, min=0, max=10000, description="warm-up",
                                       layout=w.Layout(width="160px"))
        self.opt_level = w.Dropdown(options=["disable", "basic", "extended", "all"], value="all",
                                    description="ORT level", layout=w.Layout(width="220px"))
        self.profile_button = w.Button(description="Profile", icon="play",
                                       button_style="primary")
        self.levels_button = w.Button(description="Compare ORT levels", icon="list",
                                      layout=w.Layout(width="180px"))
        dyn = self._dynamic_dims()
        self.sweep_dim = w.Dropdown(options=dyn or ["batch"], value=(dyn or ["batch"])[0],
                                    description="dim", layout=w.Layout(width="180px"))
        self.sweep_sizes = w.Text(value="1,2,4,8", description="sizes",
                                  layout=w.Layout(width="220px"))
        self.sweep_button = w.Button(description="Batch sweep", icon="line-chart")
        self.peak_tflops = w.FloatText(value=1.0, description="peak TFLOP/s",
                                       style={"description_width": "initial"},
                                       layout=w.Layout(width="180px"))
        self.bandwidth = w.FloatText(value=50.0, description="GB/s",
                                     layout=w.Layout(width="160px"))
        self.cost_button = w.Button(description="Cost / roofline", icon="calculator")
        self.render_button = w.Button(description="Latency on graph", icon="project-diagram",
                                      tooltip="Profile.render(): time per node as a colour",
                                      layout=w.Layout(width="170px"))
        self.progress = w.IntProgress(value=0, min=0, max=1,
                                      layout=w.Layout(width="260px", visibility="hidden"))
        # Outputs
        self.summary_html = w.HTML()
        self.plot_html = w.HTML()
        self.ops_table = PagedTable(page_size=page_size, caption="op types")
        self.nodes_table = PagedTable(page_size=page_size, caption="top nodes")
        self.latency_html = w.HTML()
        self.levels_html = w.HTML()
        self.sweep_html = w.HTML()
        self.cost_html = w.HTML()
        self.cost_table = PagedTable(page_size=page_size, caption="cost per node")
        self.roof_table = PagedTable(page_size=page_size, caption="roofline per node")
        self.roofline: Any = None
        self.graph_html = w.HTML()
        self.tabs = w.Tab(children=[
            w.VBox([self.summary_html, self.plot_html]),
            self.ops_table, self.nodes_table, self.latency_html,
            self.levels_html, self.sweep_html, w.VBox([self.cost_html, self.roof_table, self.cost_table]),
            self.graph_html])
        for i, t in enumerate(["Overview", "Op types", "Top nodes", "Latency", "ORT levels",
                               "Batch sweep", "Cost", "Graph"]):
            self.tabs.set_title(i, t)
        for b, fn in [(self.profile_button, self.run_profile),
                      (self.levels_button, self.run_levels),
                      (self.sweep_button, self.run_sweep), (self.cost_button, self.run_cost),
                      (self.render_button, self.render_latency)]:
            b.on_click(self._clicked(fn))
        super().__init__([
            self.context,
            w.HBox([w.HTML("<b>providers</b>&nbsp;"), *self.providers]),
            w.HBox([self.runs, self.warmup, self.opt_level]),
            w.HBox([self.profile_button, self.render_button, self.levels_button,
                    self.progress]),
            w.HBox([self.sweep_dim, self.sweep_sizes, self.sweep_button]),
            w.HBox([self.peak_tflops, self.bandwidth, self.cost_button]),
            self.tabs,
        ])
        self.add_class("onnx-lab-profiler")
        self.code.value = code_html(self._profile_code())

    # ------------------------------------------------------------------ helpers
    def _clicked(self, fn):
        guarded = self._guard(fn)
        return lambda _b: guarded()

    def _dynamic_dims(self) -> list[str]:
        from onnx_lab.core.shapes import dynamic_dims

        return [d for d in dynamic_dims(self.lab.model) if d not in self.lab.dims]

    @property
    def selected_providers(self) -> list[str]:
        return [cb.description for cb in self.providers if cb.value]

    def _profile_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"providers": self.selected_providers,
                              "runs": int(self.runs.value), "warmup": int(self.warmup.value)}
        if self.opt_level.value != "all":
            kw["opt_level"] = self.opt_level.value
        return kw

    def _profile_code(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._profile_kwargs().items())
        ctx = self.context.code() if hasattr(self, "context") else ""
        return (ctx + "; " if ctx else "") + f"p = onnx_lab.profile(lab, {args})"

    def _progress(self, done: int, total: int, label: str) -> None:
        self.progress.max = max(1, int(total))
        self.progress.value = min(int(done), self.progress.max)
        self.progress.description = str(label)[:12]

    def _run(self, fn, *args, busy: str, **kwargs):
        if self._call(self.context.apply) is None and self.error is not None:
            return None
        self.progress.layout.visibility = "visible"
        self.progress.value = 0
        try:
            return self._call(fn, *args, busy=busy, **kwargs)
        finally:
            self.progress.layout.visibility = "hidden"

    # ------------------------------------------------------------------ actions
    def run_profile(self) -> None:
        """``onnx_lab.profile(lab, ...)``: op-type share, top nodes, latency."""
        import onnx_lab

        kw = self._profile_kwargs()
        if not kw["providers"]:
            self.status.value = info_html("Tick at least one provider.", kind="warn")
            return
        p = self._run(onnx_lab.profile, self.lab, progress=self._progress,
                      busy=f"Profiling {kw['runs']} runs…", **kw)
        if p is None:
            return
        from onnx_lab.render.tables import frame_html

        self.profile_result = p
        self.result = p
        stats = p.latency_stats
        lines = [f"{r.session}: mean {r.mean_ms:.3f} ms, p50 {r.p50_ms:.3f}, "
                 f"p90 {r.p90_ms:.3f}, p99 {r.p99_ms:.3f}" for r in stats.itertuples()]
        notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in p.notes)
        self.summary_html.value = ("<b>Latency</b><br>" + "<br>".join(map(html.escape, lines))
                                   + (f"<ul>{notes}</ul>" if notes else ""))
        self.plot_html.value = figure_html(p.plot())
        self.ops_table.set(p.ops.sort_values("total_ms", ascending=False))
        self.nodes_table.set(p.nodes.drop(columns=["components"], errors="ignore")
                             .sort_values("total_ms", ascending=False))
        self.latency_html.value = (frame_html(stats, caption="latency per session")
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
        self.graph_html.value = rendering_html(r)
        self.result = r
        self.tabs.selected_index = 7
        self.code.value = code_html(self._profile_code() + '; p.render(collapse="auto")')

    def run_levels(self) -> None:
        """``onnx_lab.profiling.levels(lab, runs=...)``."""
        from onnx_lab.profiling import levels
        from onnx_lab.render.tables import frame_html

        runs, warmup = int(self.runs.value), int(self.warmup.value)
        df = self._run(levels, self.lab, runs=runs, warmup=warmup, progress=self._progress,
                       busy="Timing each ORT optimization level…")
        if df is None:
            return
        self.levels_html.value = frame_html(df, caption="ORT optimization levels")
        self.result = df
        self.tabs.selected_index = 4
        self.code.value = code_html(
            f"onnx_lab.profiling.levels(lab, runs={runs}, warmup={warmup})")

    def run_sweep(self) -> None:
        """``onnx_lab.profiling.batch_sweep(lab, sizes, dim=...)``."""
        from onnx_lab.profiling import batch_sweep
        from onnx_lab.render.tables import frame_html

        sizes = _parse_sizes(self.sweep_sizes.value)
        if not sizes:
            self.status.value = info_html("Sizes must be comma-separated ints, e.g. 1,2,4,8.",
                                          kind="warn")
            return
        runs, warmup = int(self.runs.value), int(self.warmup.value)
        dim = self.sweep_dim.value
        s = self._run(batch_sweep, self.lab, tuple(sizes), dim=dim, runs=runs, warmup=warmup,
                      progress=self._progress, busy=f"Sweeping {dim} over {sizes}…")
        if s is None:
            return
        notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in s.notes)
        self.sweep_html.value = (f"<b>knee:</b> {s.knee}" + frame_html(s.table)
                                 + figure_html(s.plot())
                                 + (f"<ul>{notes}</ul>" if notes else ""))
        self.result = s
        self.tabs.selected_index = 5
        self.code.value = code_html(f"onnx_lab.profiling.batch_sweep(lab, {tuple(sizes)!r}, "
                                    f"dim={dim!r}, runs={runs}, warmup={warmup})")

    def run_cost(self) -> None:
        """``lab.cost()`` and ``cost.roofline(peak_flops, bandwidth)``."""

        cost = self._call(self.lab.cost, busy="Counting FLOPs and bytes…")
        if cost is None:
            return
        peak = float(self.peak_tflops.value) * 1e12
        bw = float(self.bandwidth.value) * 1e9
        roof = self._call(cost.roofline, peak, bw)
        total = cost.total
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                       f"<td>{html.escape(_num(v))}</td></tr>" for k, v in total.items())
        roof_html = ""
        if roof is not None:
            roof_html = "<b>Roofline lower bound</b><table>" + "".join(
                f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                f"<td>{html.escape(_num(v))}</td></tr>" for k, v in dict(roof).items()
            ) + "</table>"
            self.roof_table.set(roof.nodes.sort_values("time_ms", ascending=False))
        self.roofline = roof
        self.cost_html.value = f"<b>Totals</b><table>{rows}</table>{roof_html}"
        nodes = cost.nodes
        if "flops" in nodes:
            nodes = nodes.sort_values("flops", ascending=False, na_position="last")
        self.cost_table.set(nodes)
        self.result = cost
        self.tabs.selected_index = 6
        self.code.value = code_html(f"cost = lab.cost(); cost.roofline({peak:.3g}, {bw:.3g})")


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
