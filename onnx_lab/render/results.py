"""The views of result objects: figures, graph renderings and HTML, registered with _display.

``Comparison``, ``Diff``, ``Profile``, ``BatchSweep``, ``Cost``, ``Summary``... hold data and
sit below ``render/``; their ``plot()``, ``render()``, ``to_html()`` and ``_repr_html_()`` call
``onnx_lab._display.draw(self, kind, ...)``, which lands here. The views are registered by class,
so this module imports every result module; ``import onnx_lab`` does not import it but leaves
a loader with ``_display`` (in ``onnx_lab.render``), which imports it at the first drawing.
matplotlib is imported when a figure is drawn, and ``render_model`` (graph layout, ~35 ms of
imports) is looked up on the ``onnx_lab.render`` package, which loads it on first use.

Example:
    >>> from onnx_lab.render import results
    >>> results.comparison_html(onnx_lab.compare(ref, cand))
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

import onnx_lab.render as _render
from onnx_lab._display import register
from onnx_lab.analysis.cost import Cost, GenerationCost
from onnx_lab.analysis.summary import Summary
from onnx_lab.errors import InputError
from onnx_lab.numerics.compare import Comparison
from onnx_lab.numerics.diff import Diff
from onnx_lab.numerics.llm import LLMComparison
from onnx_lab.numerics.metrics import PRESETS, numeric_pair
from onnx_lab.numerics.precision import PrecisionPlan
from onnx_lab.numerics.torch_compare import TorchComparison
from onnx_lab.numerics.weight_only import WeightOnlyPlan
from onnx_lab.profiling.generate import GenerationProfile
from onnx_lab.profiling.run import Profile
from onnx_lab.profiling.sweep import BatchSweep
from onnx_lab.render._html import esc_text
from onnx_lab.render.compare_plots import hist_figure, layer_error_figure, scatter_figure
from onnx_lab.render.llm_plots import LLM_VIEWS, PLAN_VIEWS, sqnr_layers_figure
from onnx_lab.render.module_plots import VIEWS as MODULE_VIEWS
from onnx_lab.render.plots import histogram_figure
from onnx_lab.render.precision_plots import VIEWS as PRECISION_VIEWS
from onnx_lab.render.profile_plots import batch_sweep_figure, generation_figure, profile_figure
from onnx_lab.render.tables import format_bytes, frame_html, summary_html
from onnx_lab.transforms.base import PassResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["comparison_plot", "comparison_hist", "comparison_scatter", "comparison_render",
           "comparison_html", "diff_render", "diff_html", "profile_render", "profile_html",
           "batch_sweep_html", "cost_html", "array_histogram", "profile_summary_html",
           "cost_totals_html", "pass_result_html", "backend_report_html",
           "generation_summary_html", "generation_html", "generation_tables_html"]


# ---------------------------------------------------------------------------- Comparison
def comparison_plot(c: Comparison):
    """Error per layer along depth (log scale), tolerance line, divergence marked; SQNR per
    layer against the rule's threshold under an SQNR preset (int8, int4)."""
    rule = PRESETS[c.preset].intermediates if c.preset in PRESETS else None
    if rule is not None and rule.kind == "sqnr":
        return sqnr_layers_figure(c.layers, rule.min_sqnr_db, c.first_divergence)
    return layer_error_figure(c.layers, c.atol, c.first_divergence)


def _numbers(c: Comparison, tensor: str, sample: int) -> tuple[np.ndarray, np.ndarray]:
    """The numbers of one compared value: a tensor's, a sequence's or map's numeric leaves;
    InputError for strings (compared for equality, see the ``note`` column)."""
    pair = numeric_pair(*c.values(tensor, sample))
    if isinstance(pair, str):
        raise InputError(f"{tensor!r} cannot be drawn as numbers: {pair}.",
                         fix="Read its row of comparison.outputs / .layers (compared_as, "
                         "passed, note).")
    return pair


def comparison_hist(c: Comparison, tensor: str, sample: int = 0, bins: int = 100):
    """Histograms of reference and candidate values of ``tensor`` and of their difference."""
    ref, cand = _numbers(c, tensor, sample)
    return hist_figure(ref, cand, tensor, bins=bins)


def comparison_scatter(c: Comparison, tensor: str, sample: int = 0, max_points: int = 50_000):
    """Candidate vs reference values of one tensor (subsampled), with the y = x line."""
    ref, cand = _numbers(c, tensor, sample)
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
    head = esc_text(c.summary_text()).replace("\n", "<br>")
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
    head = (f"<b>{c['added']:d}</b> added, <b>{c['removed']:d}</b> removed, "
            f"<b>{c['changed']:d}</b> changed nodes")
    view = d.table.copy()
    for col in ("attributes", "inputs", "outputs", "weights", "related"):
        if col in view.columns:
            view[col] = view[col].map(lambda x: ", ".join(x))
    return f"<div class='onnx-lab-diff'><div>{head}</div>{frame_html(view)}</div>" \
        if len(view) else f"<div>{esc_text('no differences')}</div>"


# ---------------------------------------------------------------------------- profiling
def profile_render(p: Profile, session: str | None = None, **kw: Any):
    """The graph with each node coloured by its time (``render_model(overlay=...)``)."""
    kw.setdefault("overlay_label", "time_ms")
    kw.setdefault("dims", p.dims or None)  # the sizes the runs had, not the symbols
    kw.setdefault("shapes", p.shapes or None)
    return _render.render_model(p.model, overlay=p.overlay(session), **kw)


def profile_html(p: Profile) -> str:
    """Run settings, latency, op types, the ten slowest nodes and the notes."""
    top = p.nodes.sort_values("total_ms", ascending=False).head(10)
    return ("<div><b>onnx_lab Profile</b> — "
            f"{p.warmup:d} warm-up, then {p.profiled_runs:d} profiled runs and the latency "
            f"runs, opt_level={esc_text(p.opt_level)}<br>" + profile_summary_html(p)
            + frame_html(p.latency_stats, caption="latency")
            + frame_html(p.ops.head(15), caption="op types")
            + frame_html(top.drop(columns=["components"]), caption="top nodes") + "</div>")


def profile_summary_html(p: Profile) -> str:
    """Per session: the median with its 95% interval, p10-p90, how many runs were profiled and
    how many timed without the profiler, memory, comparisons and notes (in words)."""
    lines = []
    mem = p.memory.set_index("session") if len(p.memory) else None
    for r in p.latency_stats.itertuples():
        line = (f"<b>{esc_text(str(r.session))}</b>: median (p50) {r.p50_ms:.3f} ms "
                f"(95% CI {r.ci_low_ms:.3f}-{r.ci_high_ms:.3f}), p10-p90 {r.p10_ms:.3f}-"
                f"{r.p90_ms:.3f} ms, mean {r.mean_ms:.3f} ms; {r.profiled_runs:d} profiled "
                f"runs for the operator shares, "
                f"{r.runs:d} {esc_text(str(r.latency_from))} runs for the latency "
                f"(stopped: {esc_text(str(r.stopped))})")
        if mem is not None and r.session in mem.index:
            m = mem.loc[r.session]
            line += (f"; process peak {format_bytes(m.peak_rss_bytes)} (+"
                     f"{format_bytes(m.session_peak_bytes)} for the session), predicted "
                     f"activations {format_bytes(m.predicted_activation_bytes)}")
        lines.append(line)
    diffs = p.differences() if len(p.latency_stats) > 1 else None
    verdicts = "".join(f"<li>{esc_text(v)}</li>" for v in diffs.verdict) \
        if diffs is not None else ""
    notes = "".join(f"<li>{esc_text(str(n))}</li>" for n in p.notes)
    return ("<b>Latency</b><br>" + "<br>".join(lines)
            + (f"<ul>{verdicts}</ul>" if verdicts else "")
            + (f"<ul>{notes}</ul>" if notes else ""))


def generation_summary_html(g: GenerationProfile) -> str:
    """Per session: prefill and decode medians with their 95% intervals, tokens/s, how many
    generations were profiled and timed, memory beside the KV cache, and the notes."""
    lines = []
    st = g.latency_stats.set_index(["session", "phase"])
    mem = g.memory.set_index("session") if len(g.memory) else None
    for sess in dict.fromkeys(g.latency_stats.session):
        pre, dec = st.loc[(sess, "prefill")], st.loc[(sess, "decode")]
        line = (f"<b>{esc_text(str(sess))}</b>: <b>prefill</b> of {g.prompt_tokens:d} tokens "
                f"median {pre.p50_ms:.3f} ms (95% CI {pre.ci_low_ms:.3f}-{pre.ci_high_ms:.3f}), "
                f"{esc_text(_si(pre.tokens_per_s))} tokens/s; <b>decode</b> median {dec.p50_ms:.3f} "
                f"ms/token (95% CI {dec.ci_low_ms:.3f}-{dec.ci_high_ms:.3f}), "
                f"{dec.tokens_per_s:.1f} tokens/s ({dec.tokens_per_s_low:.1f}-"
                f"{dec.tokens_per_s_high:.1f}) over {g.new_tokens:d} new tokens; "
                f"{int(dec.profiled_generations)} profiled generations for the operator shares, "
                f"{int(dec.generations)} {esc_text(str(dec.latency_from))} for the latency "
                f"(stopped: {esc_text(str(dec.stopped))})")
        if mem is not None and sess in mem.index:
            m = mem.loc[sess]
            line += (f"; process peak {format_bytes(m.peak_rss_bytes)} (+"
                     f"{format_bytes(m.session_peak_bytes)} for the session), weights "
                     f"{format_bytes(m.weights_bytes)}, KV cache at {int(m.context)} tokens "
                     f"{format_bytes(m.kv_cache_bytes)} measured, "
                     f"{format_bytes(m.predicted_kv_cache_bytes)} predicted")
        lines.append(line)
    notes = "".join(f"<li>{esc_text(str(n))}</li>" for n in g.notes)
    return ("<b>Generation</b><br>" + "<br>".join(lines)
            + (f"<ul>{notes}</ul>" if notes else ""))


def generation_tables_html(g: GenerationProfile) -> str:
    """Prefill and decode statistics (ms to 3 decimals, tokens/s to 1) and the memory table
    (bytes with units), formatted on copies for display."""
    cols = ["session", "phase", "tokens", "runs", "p50_ms", "ci_low_ms", "ci_high_ms", "p10_ms",
            "p90_ms", "tokens_per_s", "tokens_per_s_low", "tokens_per_s_high", "generations",
            "stopped"]
    st = g.latency_stats[cols].copy()
    for c in ("p50_ms", "ci_low_ms", "ci_high_ms", "p10_ms", "p90_ms"):
        st[c] = st[c].map(lambda v: f"{v:.3f}")
    for c in ("tokens_per_s", "tokens_per_s_low", "tokens_per_s_high"):
        st[c] = st[c].map(lambda v: f"{v:.1f}")
    mem = g.memory.copy()
    for c in ("rss_before_bytes", "peak_rss_bytes", "session_peak_bytes", "weights_bytes",
              "kv_cache_bytes", "predicted_kv_cache_bytes"):
        mem[c] = mem[c].map(format_bytes)
    return (frame_html(st, caption="prefill and decode")
            + frame_html(mem, caption="memory: measured process peak beside the weights and "
                         "the KV cache"))


def generation_html(g: GenerationProfile) -> str:
    """Settings, the summary, latency per phase, memory and the top op types of each phase."""
    ops = g.ops.groupby(["session", "phase"], sort=False).head(8) if len(g.ops) else g.ops
    return ("<div><b>onnx_lab GenerationProfile</b> — "
            f"prompt {g.prompt_tokens:d} tokens, {g.new_tokens:d} new tokens, batch {g.batch:d}, "
            f"{g.warmup:d} warm-up generations, opt_level={esc_text(g.opt_level)}, "
            f"io_binding={esc_text(g.io_binding)}<br>" + generation_summary_html(g)
            + generation_tables_html(g) + frame_html(ops, caption="op types per phase")
            + "</div>")


def batch_sweep_html(s: BatchSweep) -> str:
    """The swept dim, the knee per backend, the table (throughput with its interval, memory
    measured and predicted) and the notes."""
    knees = ", ".join(f"{esc_text(str(b))}: {esc_text(k)}" for b, k in s.knees.items()) \
        if len(s.knees) > 1 else esc_text(s.knee)
    cols = [c for c in ("backend", "batch", "latency_ms", "p10_ms", "p90_ms", "items_per_s",
                        "items_per_s_low", "items_per_s_high", "gain_per_doubling",
                        "gain_beyond_noise", "runs", "peak_rss_bytes",
                        "predicted_activation_bytes") if c in s.table]
    view = s.table[cols].copy()
    for c in ("peak_rss_bytes", "predicted_activation_bytes"):
        if c in view:
            view[c] = view[c].map(format_bytes)
    notes = "".join(f"<li>{esc_text(str(n))}</li>" for n in s.notes)
    return (f"<div><b>Batch sweep</b> over {esc_text(repr(s.dim))}, knee: {knees}"
            + (" <i>(cancelled: partial)</i>" if s.cancelled else "")
            + f", {s.elapsed_s:.1f} s" + frame_html(view)
            + (f"<ul>{notes}</ul>" if notes else "") + "</div>")


def _si(v: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' (k, M, G, T)."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return str(v)
    if v != v:
        return "n/a"
    for div, pre in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g} {pre}{unit}"
    return f"{v:.3g} {unit}".rstrip()


def cost_totals_html(c: Cost, roof: Any = None) -> str:
    """The Cost tab's totals with units (k/M/G, MB, ms) and the roofline's bounds."""
    t = c.total
    fmt = {"flops": lambda v: _si(v, "FLOPs"), "macs": lambda v: _si(v, "MACs"),
           "params": _si, "param_bytes": format_bytes, "activation_bytes": format_bytes,
           "peak_activation_bytes": format_bytes, "nodes": _si, "unknown_nodes": _si,
           "kv_cache_bytes": lambda v: "—" if v is None else format_bytes(v),
           "macs_onnx_tool": lambda v: "—" if v is None or v != v else _si(v, "MACs")}

    def row(k: str, v: Any) -> str:
        text = fmt[k](v) if k in fmt else ", ".join(map(str, v)) if isinstance(v, (list, tuple)) \
            else str(v)
        return (f"<tr><th style='text-align:left'>{esc_text(k)}</th>"
                f"<td>{esc_text(text)}</td></tr>")

    out = "<b>Totals</b><table>" + "".join(row(k, v) for k, v in t.items()) + "</table>"
    if roof is not None:
        rf = {"total_ms": f"{roof.total_ms:.3g} ms", "compute_ms": f"{roof.compute_ms:.3g} ms",
              "memory_ms": f"{roof.memory_ms:.3g} ms",
              "peak_flops": _si(roof.peak_flops, "FLOP/s"),
              "bandwidth": _si(roof.bandwidth, "B/s"), "unknown_nodes": str(roof.unknown_nodes)}
        out += ("<b>Roofline lower bound</b><table>" + "".join(
            f"<tr><th style='text-align:left'>{esc_text(k)}</th><td>{esc_text(v)}</td></tr>"
            for k, v in rf.items()) + "</table>")
    return out


# ---------------------------------------------------------------------------- analysis
def cost_html(c: Cost) -> str:
    """Totals, the 15 nodes with the most FLOPs and the notes."""
    t = c.total
    head = (f"<div><b>Cost</b>: {t['flops'] / 1e9:.3f} GFLOPs, {t['macs'] / 1e9:.3f} GMACs, "
            f"{t['params']:,} params ({format_bytes(t['param_bytes'])}), peak activations "
            f"{format_bytes(t['peak_activation_bytes'])} at {esc_text(str(t['peak_node']))}"
            f", {t['unknown_nodes']:d} unknown nodes")
    kv = getattr(c, "kv_cache", None)
    if kv:
        head += (f"; KV cache {format_bytes(kv['bytes'])} for {kv['context']} tokens "
                 f"({format_bytes(kv['bytes_per_token'] or 0)}/token, {kv['layers']} layers)")
    notes = "".join(f"<li>{esc_text(n)}</li>" for n in c.notes)
    top = c.nodes.sort_values("flops", ascending=False).head(15)
    return head + frame_html(top, caption="top nodes by FLOPs") + (
        f"<ul>{notes}</ul>" if notes else "") + "</div>"


def pass_result_html(r: PassResult) -> str:
    """A PassResult's plain fields as a two-column table (``r.summary()``, empty ones left out)."""
    rows = "".join(f"<tr><th style='text-align:left'>{esc_text(k)}</th>"
                   f"<td>{esc_text(str(v))}</td></tr>"
                   for k, v in r.summary().items() if v not in (None, [], {}))
    return f"<table class='onnx-lab-pass'>{rows}</table>"


def backend_report_html(table: pd.DataFrame, outputs: pd.DataFrame, notes: list[str]) -> str:
    """``compare_backends``' report: the timing table, the outputs against onnxruntime CPU and
    the notes (skipped backends, busy-machine warnings)."""
    items = "".join(f"<li>{esc_text(n)}</li>" for n in notes)
    return ("<div><b>Backends</b>" + frame_html(table)
            + frame_html(outputs, caption="outputs against onnxruntime CPU")
            + (f"<ul>{items}</ul>" if items else "") + "</div>")


def generation_cost_html(g: GenerationCost) -> str:
    """A GenerationCost: one row per phase (prefill, decode) with units."""
    t = g.table()
    shown = t.assign(**{c: t[c].map(lambda v, u=u: _si(v, u)) for c, u in (
        ("flops", "FLOPs"), ("macs", "MACs"), ("flops_per_token", "FLOPs"))},
        **{c: t[c].map(lambda v: "—" if v is None or v != v else format_bytes(v))
           for c in ("param_bytes", "activation_bytes", "kv_cache_bytes", "bytes_moved")},
        intensity=t.intensity.map(lambda v: f"{v:.3g}"))
    return (f"<div><b>Generation cost</b>: prefill of {g.prompt:d} tokens, decode at context "
            f"{g.context:d}; KV cache {format_bytes(g.kv_cache_bytes)} "
            f"({format_bytes(g.kv_bytes_per_token)}/token)"
            + frame_html(shown, caption="per phase") + "</div>")


def array_histogram(values: np.ndarray, *, title: str = "", bins: int = 100):
    """Histogram of an array's values (log count axis): ``weight_histogram``'s figure."""
    return histogram_figure(values, title=title, bins=bins)


# ---------------------------------------------------------------------------- registry
for _type, _kind, _fn in (
        (Comparison, "plot", comparison_plot),
        (Comparison, "hist", comparison_hist),
        (Comparison, "scatter", comparison_scatter),
        (Comparison, "render", comparison_render),
        (Comparison, "html", comparison_html),
        (Diff, "render", diff_render),
        (Diff, "html", diff_html),
        (Profile, "plot", profile_figure),
        (Profile, "render", profile_render),
        (Profile, "html", profile_html),
        (BatchSweep, "plot", batch_sweep_figure),
        (BatchSweep, "html", batch_sweep_html),
        (GenerationProfile, "plot", generation_figure),
        (GenerationProfile, "html", generation_html),
        (Cost, "html", cost_html),
        (GenerationCost, "html", generation_cost_html),
        (Summary, "html", summary_html),
        (np.ndarray, "histogram", array_histogram),
        (PassResult, "html", pass_result_html),
        # The precision doctor's plan (render/precision_plots.py: bar chart, overlay, report).
        *((PrecisionPlan, k, f) for k, f in PRECISION_VIEWS),
        # LLM results (render/llm_plots.py): the next-token comparison, the weight-only plan.
        *((LLMComparison, k, f) for k, f in LLM_VIEWS),
        *((WeightOnlyPlan, k, f) for k, f in PLAN_VIEWS),
        # Per PyTorch module (render/module_plots.py): compare_torch's result.
        *((TorchComparison, k, f) for k, f in MODULE_VIEWS),
):
    register(_type, _kind, _fn)
del _type, _kind, _fn
