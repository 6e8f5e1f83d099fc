"""Drawings of LLM results: an :class:`~onnx_lab.numerics.llm.LLMComparison` (local SQNR per
node along depth with the worst named, KL per position) and a weight-only precision plan
(:class:`~onnx_lab.numerics.weight_only.WeightOnlyPlan`: trials' accuracy beside decode
speed, the ranking with the kept nodes).

Registered with ``_display`` in :mod:`onnx_lab.render.results`; matplotlib loads on use.

Example:
    >>> from onnx_lab.render.llm_plots import loss_figure
    >>> loss_figure(c.losses, c.positions)
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import onnx_lab.render as _render
from onnx_lab._pandas import pd
from onnx_lab.numerics.metrics import get_preset
from onnx_lab.render._html import esc_text
from onnx_lab.render.plots import _figure
from onnx_lab.render.tables import frame_html

if TYPE_CHECKING:
    from onnx_lab.numerics.llm import LLMComparison
    from onnx_lab.numerics.weight_only import WeightOnlyPlan

__all__ = ["sqnr_layers_figure", "loss_figure", "llm_comparison_plot", "llm_comparison_html", "plan_figure",
           "int4_plan_plot", "int4_plan_render", "int4_plan_html", "LLM_VIEWS", "PLAN_VIEWS"]

_CAP_DB = 60.0  # exact tensors (infinite SQNR) drawn at the top of the axis


def _short(name: str, n: int = 44) -> str:
    return name if len(name) <= n else "…" + name[-(n - 1):]


def loss_figure(losses: pd.DataFrame, positions: pd.DataFrame | None = None, *, top: int = 8,
                min_db: float | None = None, kept: Any = (), title: str = ""):
    """Local SQNR (dB) of each node in topological order (quantized nodes in blue, exact ones
    drawn at 60 dB), the ``top`` worst as named bars, and KL per position when ``positions``
    is given.

    Args:
        losses: :func:`onnx_lab.numerics.llm.sqnr_losses` rows.
        min_db: a rule's threshold, drawn as a dashed line.
        kept: node ids drawn in green (a plan's kept nodes).
    """
    kw = positions is not None and len(positions)
    worst = losses.loc[losses["local_sqnr_db"].astype(float) < _CAP_DB].sort_values(
        "local_sqnr_db", kind="stable").head(top)
    heights = [2.6, 0.25 * max(len(worst), 3) + 0.7] + ([2.4] if kw else [])
    fig = _figure(figsize=(8, sum(heights) + 0.6))
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights})
    ax, bars = axes[0], axes[1]
    kept = set(kept)
    df = losses.copy()
    order = "depth" if "depth" in df.columns else None
    ordered = (df.sort_values(order, kind="stable") if order else df).reset_index(drop=True)
    ys = [min(float(v), _CAP_DB) if not math.isnan(float(v)) else _CAP_DB
          for v in ordered["local_sqnr_db"]]

    def colour(nid: str, quantized: bool) -> str:
        return "#1a9e3f" if nid in kept else ("#48a" if quantized else "#bbb")

    ax.scatter(range(len(ys)), ys, s=14, c=[colour(n, bool(q)) for n, q in zip(
        ordered["node_id"], ordered["quantized"])])
    if min_db is not None:
        for a in (ax, bars):
            a.axvline(min_db, ls="--", c="#c33", lw=1) if a is bars else \
                a.axhline(min_db, ls="--", c="#c33", lw=1)
        ax.text(0, min_db, f" rule {min_db:g} dB", va="bottom", fontsize=7, color="#c33")
    ax.set_ylabel("local SQNR (dB)")
    ax.set_xlabel("node (topological order); blue: quantized, grey: float, exact at 60"
                  + (", green: kept" if kept else ""))
    ax.set_title(title or "precision lost per node (lower is worse)", fontsize=9)
    names = [_short(str(n), 56) for n in worst["node_id"]][::-1]
    vals = [float(v) for v in worst["local_sqnr_db"]][::-1]
    bars.barh(range(len(vals)), vals, color=[colour(n, bool(q)) for n, q in zip(
        worst["node_id"][::-1], worst["quantized"][::-1])])
    bars.set_yticks(range(len(vals)), names, fontsize=7)
    bars.set_xlabel(f"local SQNR (dB) of the {len(vals)} nodes that lose most")
    if kw:
        ax2 = axes[2]
        for s, g in positions.groupby("sample"):
            kl = g["kl"].astype(float).clip(lower=1e-6)
            ax2.plot(g["position"], kl, lw=1, label=f"sample {s}")
            bad = ~g["agree"].astype(bool)
            ax2.scatter(g["position"][bad], kl[bad], c="#c33", s=12, zorder=3)
        ax2.set_yscale("log")
        ax2.set_xlabel("position (red: top-1 differs)")
        ax2.set_ylabel("KL(ref || cand), nats")
    return fig


def sqnr_layers_figure(layers: pd.DataFrame, min_db: float, divergence: dict | None = None):
    """SQNR (dB) per compared tensor along topological depth, the rule's threshold dashed, the
    first divergence marked: the view of a comparison judged by an SQNR preset (int8, int4),
    where every tensor moves and max_abs against an atol says nothing."""
    fig = _figure(figsize=(8, 3.4))
    ax = fig.add_subplot()
    if not len(layers):
        ax.text(0.5, 0.5, "no layers compared", ha="center", va="center")
        return fig
    y = [min(float(v), _CAP_DB) for v in layers["sqnr_db"].astype(float)]
    ok = layers["passed"].astype(bool).tolist()
    xs = range(len(y))
    ax.plot(list(xs), y, color="#999", lw=0.8, zorder=1)
    ax.scatter([x for x, o in zip(xs, ok) if o], [v for v, o in zip(y, ok) if o], s=10,
               color="#4c78a8", label="within tolerance", zorder=2)
    ax.scatter([x for x, o in zip(xs, ok) if not o], [v for v, o in zip(y, ok) if not o], s=14,
               color="#e45756", label="out of tolerance", zorder=3)
    ax.axhline(min_db, color="#54a24b", ls="--", lw=1, label=f"intermediates >= {min_db:g} dB")
    if divergence is not None:
        hit = [i for i, t in enumerate(layers["tensor"]) if t == divergence["tensor"]]
        if hit:
            ax.axvline(hit[0], color="#e45756", lw=1, alpha=0.6)
            right = hit[0] > 0.6 * max(1, len(y) - 1)  # label on the side with room
            ax.annotate(f"first divergence\n{divergence['node_id']}", (hit[0], y[hit[0]]),
                        xytext=(-6 if right else 6, 6), textcoords="offset points",
                        ha="right" if right else "left", fontsize=8, color="#b00")
    ax.set_xlabel("layer (topological order)")
    ax.set_ylabel(f"SQNR (dB; exact at {_CAP_DB:g})")
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=3, frameon=False)
    return fig


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


# ---------------------------------------------------------------------------- comparison
def _with_depth(losses: pd.DataFrame, comparison: Any) -> pd.DataFrame:
    """``losses`` with each tensor's topological depth from the layerwise comparison."""
    if comparison is None or not len(losses):
        return losses
    depth = dict(zip(comparison.layers["tensor"], comparison.layers["depth"]))
    return losses.assign(depth=losses["tensor"].map(depth))


def llm_comparison_plot(c: LLMComparison, top: int = 8):
    """The comparison's ranking and KL per position."""
    rule = get_preset(c.preset).intermediates
    return loss_figure(_with_depth(c.losses, c.comparison), c.positions, top=top,
                       min_db=rule.min_sqnr_db if rule.kind == "sqnr" else None,
                       title=f"{c.preset}: local SQNR per node, the {top} worst named")


def llm_comparison_html(c: LLMComparison) -> str:
    """Verdict, metrics, the worst nodes, per-layer summary and the plot."""
    colour = "#2a7" if c.passed else "#c33"
    head = esc_text(c.summary_text()).replace("\n", "<br>")
    metrics = pd.DataFrame([{k: v for k, v in c.metrics.items()}])
    parts = [f"<div style='border-left:4px solid {colour};padding-left:6px'>{head}</div>",
             frame_html(metrics, caption="next-token metrics")]
    if len(c.losses):
        parts.append(frame_html(c.worst(10), caption="nodes that lose most (local SQNR)"))
        try:
            parts.append(_svg(c.plot()))
        except ImportError:  # matplotlib missing: the tables are the report
            pass
    return "<div class='onnx-lab-llm'>" + "".join(parts) + "</div>"


LLM_VIEWS = (("plot", llm_comparison_plot), ("html", llm_comparison_html))


# ---------------------------------------------------------------------------- int4 plan
def plan_figure(trials: pd.DataFrame, target_top1: float | None = None,
                target_kl: float | None = None):
    """Each trial's accuracy (top-1 agreement, KL) beside its decode tokens/s."""
    fig = _figure(figsize=(8, 3.2))
    ax = fig.add_subplot(1, 2, 1)
    ok = trials["passed"].astype(bool)
    for mask, colour, label in ((ok, "#2a7", "meets"), (~ok, "#c33", "misses")):
        sub = trials.loc[mask]
        ax.scatter(sub["tokens_per_s"], sub["top1_agreement"], c=colour, s=22, label=label)
    for r in trials.itertuples(index=False):
        ax.annotate(str(r.trial), (r.tokens_per_s, r.top1_agreement), fontsize=6,
                    xytext=(3, 2), textcoords="offset points")
    if target_top1 is not None:
        ax.axhline(target_top1, ls="--", c="#888", lw=1)
    ax.set_xlabel("decode tokens/s")
    ax.set_ylabel("top-1 agreement")
    ax.legend(fontsize=7)
    ax2 = fig.add_subplot(1, 2, 2)
    ax2.scatter(trials["size_mb"], trials["kl_mean"].astype(float).clip(lower=1e-5),
                c=["#2a7" if p else "#c33" for p in ok], s=22)
    if target_kl is not None:
        ax2.axhline(target_kl, ls="--", c="#888", lw=1)
    ax2.set_yscale("log")
    ax2.set_xlabel("weights (MB)")
    ax2.set_ylabel("mean KL (nats)")
    fig.suptitle("trials: accuracy beside speed and size", fontsize=9)
    return fig


def int4_plan_plot(plan: WeightOnlyPlan, top: int = 8, kind: str = "ranking"):
    """``kind="ranking"``: local SQNR per node of the all-int4 model, kept nodes in green;
    ``"trials"``: accuracy beside tokens/s and size per trial."""
    if kind == "trials":
        return plan_figure(plan.trials, plan.tolerance.min_top1, plan.tolerance.max_kl)
    return loss_figure(_with_depth(plan.sensitivity, plan.comparison), None, top=top,
                       kept=plan.kept, title=f"int4: local SQNR per MatMul, {len(plan.kept)} "
                       "kept")


def int4_plan_render(plan: WeightOnlyPlan, **kw: Any):
    """The float graph coloured by lost precision (dB below 30), kept nodes highlighted."""
    s = plan.sensitivity
    overlay = pd.Series({r.node_id: max(0.0, 30.0 - min(float(r.local_sqnr_db), 30.0))
                         for r in s.itertuples(index=False)}, dtype=float)
    kw.setdefault("highlight", list(plan.kept))
    if plan.kept:
        kw.setdefault("around", plan.kept[0])
    kw.setdefault("overlay_label", "dB lost")
    return _render.render_model(plan.source, overlay=overlay, **kw)


def int4_plan_html(plan: WeightOnlyPlan, max_rows: int = 15) -> str:
    """Verdict, kept nodes with their cost, the trials and the ranking."""
    colour = "#2a7" if plan.passed else "#c33"
    notes = "".join(f"<li>{esc_text(n)}</li>" for n in plan.notes)
    parts = [f'<div style="color:{colour}"><b>{esc_text(plan.summary_text())}</b></div>',
             f'<ul style="color:#a60">{notes}</ul>' if notes else "",
             "<h4>kept nodes and their cost</h4>", frame_html(plan.costs),
             "<h4>trials</h4>", frame_html(plan.trials.head(max_rows)),
             "<h4>ranking (all int4)</h4>", frame_html(plan.sensitivity.head(max_rows))]
    return "\n".join(parts)


PLAN_VIEWS = (("plot", int4_plan_plot), ("render", int4_plan_render), ("html", int4_plan_html))
