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

import html
import io
import math
from typing import TYPE_CHECKING, Any

import onnx_lab.render as _render
from onnx_lab._pandas import pd
from onnx_lab.render.plots import _figure
from onnx_lab.render.tables import frame_html

if TYPE_CHECKING:
    from onnx_lab.numerics.llm import LLMComparison
    from onnx_lab.numerics.weight_only import WeightOnlyPlan

__all__ = ["loss_figure", "llm_comparison_plot", "llm_comparison_html", "plan_figure",
           "int4_plan_plot", "int4_plan_render", "int4_plan_html", "LLM_VIEWS", "PLAN_VIEWS"]

_CAP_DB = 60.0  # exact tensors (infinite SQNR) drawn at the top of the axis


def _short(name: str, n: int = 44) -> str:
    return name if len(name) <= n else "…" + name[-(n - 1):]


def loss_figure(losses: pd.DataFrame, positions: pd.DataFrame | None = None, *, top: int = 8,
                min_db: float | None = None, kept: Any = (), title: str = ""):
    """Local SQNR (dB) of each node in topological order, quantized nodes in blue, the
    ``top`` worst named; a second panel with KL per position when ``positions`` is given.

    Args:
        losses: :func:`onnx_lab.numerics.llm.sqnr_losses` rows.
        min_db: a rule's threshold, drawn as a dashed line.
        kept: node ids drawn in green (a plan's kept nodes).
    """
    panels = 2 if positions is not None and len(positions) else 1
    fig = _figure(figsize=(8, 3.0 * panels + 0.4))
    ax = fig.add_subplot(panels, 1, 1)
    df = losses.copy()
    if "topo" not in df.columns:
        df["topo"] = range(len(df))
    kept = set(kept)
    ordered = df.sort_values("depth" if "depth" in df.columns else "topo", kind="stable")
    ordered = ordered.reset_index(drop=True)
    ys = [min(float(v), _CAP_DB) if not math.isnan(float(v)) else _CAP_DB
          for v in ordered["local_sqnr_db"]]
    colours = ["#1a9e3f" if n in kept else ("#48a" if q else "#bbb")
               for n, q in zip(ordered["node_id"], ordered["quantized"].astype(bool))]
    ax.scatter(range(len(ys)), ys, c=colours, s=14)
    if min_db is not None:
        ax.axhline(min_db, ls="--", c="#c33", lw=1)
        ax.text(0, min_db, f" rule {min_db:g} dB", va="bottom", fontsize=7, color="#c33")
    worst = df.sort_values("local_sqnr_db", kind="stable").head(top)
    pos = {n: i for i, n in enumerate(ordered["node_id"])}
    for r in worst.itertuples(index=False):
        if not math.isfinite(float(r.local_sqnr_db)):
            continue
        ax.annotate(_short(str(r.node_id)), (pos[r.node_id], float(r.local_sqnr_db)),
                    fontsize=6, xytext=(4, -3), textcoords="offset points", color="#a22")
    ax.set_ylabel("local SQNR (dB)")
    ax.set_xlabel("node (topological order); blue: quantized, grey: float"
                  + (", green: kept" if kept else ""))
    ax.set_title(title or "precision lost per node (lower is worse)", fontsize=9)
    if panels == 2:
        ax2 = fig.add_subplot(2, 1, 2)
        for s, g in positions.groupby("sample"):
            ax2.plot(g["position"], g["kl"].astype(float).clip(lower=1e-8), lw=1,
                     label=f"sample {s}")
            bad = g.loc[~g["agree"].astype(bool)]
            ax2.scatter(bad["position"], bad["kl"].astype(float).clip(lower=1e-8), c="#c33",
                        s=12, zorder=3)
        ax2.set_yscale("log")
        ax2.set_xlabel("position (red: top-1 differs)")
        ax2.set_ylabel("KL(ref || cand), nats")
    return fig


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


# ---------------------------------------------------------------------------- comparison
def llm_comparison_plot(c: LLMComparison, top: int = 8):
    """The comparison's ranking and KL per position."""
    from onnx_lab.numerics.metrics import get_preset

    rule = get_preset(c.preset).intermediates
    losses = c.losses
    if c.comparison is not None and len(losses):
        depth = dict(zip(c.comparison.layers["tensor"], c.comparison.layers["depth"]))
        losses = losses.assign(depth=losses["tensor"].map(depth))
    return loss_figure(losses, c.positions, top=top,
                       min_db=rule.min_sqnr_db if rule.kind == "sqnr" else None,
                       title=f"{c.preset}: local SQNR per node, the {top} worst named")


def llm_comparison_html(c: LLMComparison) -> str:
    """Verdict, metrics, the worst nodes, per-layer summary and the plot."""
    colour = "#2a7" if c.passed else "#c33"
    head = html.escape(c.summary_text()).replace("\n", "<br>")
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
    ax2.scatter(trials["size_mb"], trials["kl_mean"].astype(float).clip(lower=1e-8),
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
    return loss_figure(plan.sensitivity, None, top=top, kept=plan.kept,
                       title=f"int4: local SQNR per node, {len(plan.kept)} kept")


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
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in plan.notes)
    parts = [f'<div style="color:{colour}"><b>{html.escape(plan.summary_text())}</b></div>',
             f'<ul style="color:#a60">{notes}</ul>' if notes else "",
             "<h4>kept nodes and their cost</h4>", frame_html(plan.costs),
             "<h4>trials</h4>", frame_html(plan.trials.head(max_rows)),
             "<h4>ranking (all int4)</h4>", frame_html(plan.sensitivity.head(max_rows))]
    return "\n".join(parts)


PLAN_VIEWS = (("plot", int4_plan_plot), ("render", int4_plan_render), ("html", int4_plan_html))
