"""The views of result objects: figures, graph renderings and HTML, registered with _display.

``Comparison``, ``Diff``, ``Profile``, ``BatchSweep``, ``Cost`` and ``Summary`` hold data and
sit below ``render/``; their ``plot()``, ``render()``, ``to_html()`` and ``_repr_html_()`` call
``onnx_lab._display.draw(self, kind, ...)``, which lands here. ``import onnx_lab`` imports this
module, so it stays light: matplotlib is imported when a figure is drawn, and ``render_model``
(graph layout, ~35 ms of imports) is looked up on the ``onnx_lab.render`` package, which loads
it on first use.

Example:
    >>> from onnx_lab.render import results
    >>> results.comparison_html(onnx_lab.compare(ref, cand))
"""

from __future__ import annotations

import html
import io
from typing import TYPE_CHECKING, Any

import onnx_lab.render as _render
from onnx_lab._display import register
from onnx_lab.errors import InputError
from onnx_lab.render.compare_plots import hist_figure, layer_error_figure, scatter_figure
from onnx_lab.render.plots import histogram_figure
from onnx_lab.render.profile_plots import batch_sweep_figure, profile_figure
from onnx_lab.render.tables import format_bytes, frame_html, summary_html

if TYPE_CHECKING:
    import numpy as np

    from onnx_lab.analysis.cost import Cost
    from onnx_lab.numerics.compare import Comparison
    from onnx_lab.numerics.diff import Diff
    from onnx_lab.profiling.run import Profile
    from onnx_lab.profiling.sweep import BatchSweep

__all__ = ["comparison_plot", "comparison_hist", "comparison_scatter", "comparison_render",
           "comparison_html", "diff_render", "diff_html", "profile_render", "profile_html",
           "batch_sweep_html", "cost_html", "array_histogram"]


# ---------------------------------------------------------------------------- Comparison
def comparison_plot(c: Comparison):
    """Error per layer along depth (log scale), tolerance line, divergence marked."""
    return layer_error_figure(c.layers, c.atol, c.first_divergence)


def comparison_hist(c: Comparison, tensor: str, sample: int = 0, bins: int = 100):
    """Histograms of reference and candidate values of ``tensor`` and of their difference."""
    ref, cand = c.values(tensor, sample)
    return hist_figure(ref, cand, tensor, bins=bins)


def comparison_scatter(c: Comparison, tensor: str, sample: int = 0, max_points: int = 50_000):
    """Candidate vs reference values of one tensor (subsampled), with the y = x line."""
    ref, cand = c.values(tensor, sample)
    return scatter_figure(ref, cand, tensor, max_points=max_points)


def comparison_render(c: Comparison, column: str = "max_abs", **kw: Any):
    """The reference graph (the candidate's for a dict reference) coloured by ``column``.

    Centred on the first divergence when there is one; keywords go to ``render_model``.
    """
    lab = c.reference if c.reference is not None else c.candidate
    div = c.first_divergence
    if div is not None:
        kw.setdefault("around", div["node_id"])
        kw.setdefault("highlight", [div["node_id"]])
    kw.setdefault("overlay_label", column)
    kw.setdefault("dims", lab.dims)
    kw.setdefault("shapes", lab.shapes)
    return _render.render_model(lab.model, overlay=c.error_series(column), **kw)


def comparison_html(c: Comparison, max_rows: int = 30) -> str:
    """HTML report: verdict, divergence, outputs, the worst layers and the error plot."""
    head = html.escape(c.summary_text()).replace("\n", "<br>")
    colour = "#2a7" if c.passed else "#c33"
    parts = [f"<div style='border-left:4px solid {colour};padding-left:6px'>{head}</div>",
             frame_html(c.outputs, caption="outputs")]
    if len(c.layers):
        worst = c.layers.sort_values("max_abs", ascending=False).head(max_rows)
        parts.append(frame_html(worst, max_rows=max_rows,
                                caption="layers, largest max_abs first"))
        try:
            buf = io.StringIO()
            c.plot().savefig(buf, format="svg")
            parts.append(buf.getvalue())
        except ImportError:  # matplotlib missing: the tables are the report
            pass
    unmatched = int(c.alignment["cand_tensor"].isna().sum())
    parts.append(f"<div style='color:#666'>{unmatched} reference tensors not aligned "
                 "(see .alignment)</div>")
    return "<div class='onnx-lab-compare'>" + "".join(parts) + "</div>"


# ---------------------------------------------------------------------------- Diff
def diff_render(d: Diff, side: str = "b", **kw: Any):
    """Model ``b`` (or ``a`` with ``side="a"``) with the changes coloured.

    Raises:
        InputError: ``side`` is neither ``"a"`` nor ``"b"``.
    """
    if side not in ("a", "b"):
        raise InputError(f"side must be 'a' or 'b', got {side!r}.", fix="Use side='a'.")
    lab = d.b if side == "b" else d.a
    kw.setdefault("highlight", d.highlight(side))
    return _render.render_model(lab.model, **kw)


def diff_html(d: Diff) -> str:
    """Counts of added, removed and changed nodes, and the diff table."""
    c = d.counts
    head = (f"<b>{c['added']}</b> added, <b>{c['removed']}</b> removed, "
            f"<b>{c['changed']}</b> changed nodes")
    view = d.table.copy()
    for col in ("attributes", "inputs", "weights"):
        view[col] = view[col].map(lambda x: ", ".join(x))
    return f"<div class='onnx-lab-diff'><div>{head}</div>{frame_html(view)}</div>" \
        if len(view) else f"<div>{html.escape('no differences')}</div>"


# ---------------------------------------------------------------------------- profiling
def profile_render(p: Profile, session: str | None = None, **kw: Any):
    """The graph with each node coloured by its time (``render_model(overlay=...)``)."""
    kw.setdefault("overlay_label", "time_ms")
    return _render.render_model(p.model, overlay=p.overlay(session), **kw)


def profile_html(p: Profile) -> str:
    """Run settings, latency, op types, the ten slowest nodes and the notes."""
    top = p.nodes.sort_values("total_ms", ascending=False).head(10)
    notes = "".join(f"<li>{n}</li>" for n in p.notes)
    return ("<div><b>onnx_lab Profile</b> — "
            f"{p.runs} runs after {p.warmup} warm-up, opt_level={p.opt_level}"
            + frame_html(p.latency_stats, caption="latency")
            + frame_html(p.ops.head(15), caption="op types")
            + frame_html(top.drop(columns=["components"]), caption="top nodes")
            + (f"<ul>{notes}</ul>" if notes else "") + "</div>")


def batch_sweep_html(s: BatchSweep) -> str:
    """The swept dim, the knee and the table."""
    return (f"<div><b>Batch sweep</b> over {s.dim!r}, knee: {s.knee}"
            + frame_html(s.table) + "</div>")


# ---------------------------------------------------------------------------- analysis
def cost_html(c: Cost) -> str:
    """Totals, the 15 nodes with the most FLOPs and the notes."""
    t = c.total
    head = (f"<div><b>Cost</b>: {t['flops'] / 1e9:.3f} GFLOPs, {t['macs'] / 1e9:.3f} GMACs, "
            f"{t['params']:,} params ({format_bytes(t['param_bytes'])}), peak activations "
            f"{format_bytes(t['peak_activation_bytes'])} at {html.escape(str(t['peak_node']))}"
            f", {t['unknown_nodes']} unknown nodes")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in c.notes)
    top = c.nodes.sort_values("flops", ascending=False).head(15)
    return head + frame_html(top, caption="top nodes by FLOPs") + (
        f"<ul>{notes}</ul>" if notes else "") + "</div>"


def array_histogram(values: np.ndarray, *, title: str = "", bins: int = 100):
    """Histogram of an array's values (log count axis): ``weight_histogram``'s figure."""
    return histogram_figure(values, title=title, bins=bins)


# ---------------------------------------------------------------------------- registry
# Types by qualified name: registering imports none of the modules that define them.
_COMPARISON = "onnx_lab.numerics.compare.Comparison"
_DIFF = "onnx_lab.numerics.diff.Diff"
_PROFILE = "onnx_lab.profiling.run.Profile"
_SWEEP = "onnx_lab.profiling.sweep.BatchSweep"

for _type, _kind, _fn in (
        (_COMPARISON, "plot", comparison_plot),
        (_COMPARISON, "hist", comparison_hist),
        (_COMPARISON, "scatter", comparison_scatter),
        (_COMPARISON, "render", comparison_render),
        (_COMPARISON, "html", comparison_html),
        (_DIFF, "render", diff_render),
        (_DIFF, "html", diff_html),
        (_PROFILE, "plot", profile_figure),
        (_PROFILE, "render", profile_render),
        (_PROFILE, "html", profile_html),
        (_SWEEP, "plot", batch_sweep_figure),
        (_SWEEP, "html", batch_sweep_html),
        ("onnx_lab.analysis.cost.Cost", "html", cost_html),
        ("onnx_lab.analysis.summary.Summary", "html", summary_html),
        ("numpy.ndarray", "histogram", array_histogram),
):
    register(_type, _kind, _fn)
del _type, _kind, _fn

# The precision doctor's plan (render/precision_plots.py: bar chart, graph overlay, report).
from onnx_lab.render.precision_plots import VIEWS as _PRECISION_VIEWS  # noqa: E402

for _kind, _fn in _PRECISION_VIEWS:
    register("onnx_lab.numerics.precision.PrecisionPlan", _kind, _fn)
del _kind, _fn
