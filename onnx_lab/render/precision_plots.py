"""Drawings of a :class:`~onnx_lab.numerics.precision.PrecisionPlan`: the ranked sensitivity
bar chart, the graph coloured by sensitivity with the kept nodes highlighted, an HTML report.

Registered with ``_display`` in :mod:`onnx_lab.render.results` (``plan.plot()``,
``plan.render()``, ``plan._repr_html_()``); matplotlib and the graph layout load on use.

Example:
    >>> from onnx_lab.render.precision_plots import sensitivity_figure
    >>> sensitivity_figure(plan.sensitivity, kept=plan.kept)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx_lab.render as _render
from onnx_lab._pandas import pd
from onnx_lab.render._html import esc_text
from onnx_lab.render.plots import _figure
from onnx_lab.render.tables import frame_html

if TYPE_CHECKING:
    from onnx_lab.numerics.precision import PrecisionPlan

__all__ = ["sensitivity_figure", "plan_plot", "plan_render", "plan_html", "sensitivity_overlay",
           "VIEWS"]


def _value(row: Any) -> float:
    """The bar length of a row: the measured drop when re-checked, else the estimate."""
    drop = row.get("drop", math.nan)
    est = row.get("est_drop", math.nan)
    v = drop if isinstance(drop, float) and not math.isnan(drop) and drop > 0 else est
    return float(v) if v is not None else 0.0


def sensitivity_figure(sens: pd.DataFrame, kept: Sequence[str] = (), top: int = 20,
                       title: str = "sensitivity"):
    """Horizontal bars of the ``top`` ranked rows (log scale); kept nodes in red, overflows
    and non-finite values (infinite estimates) drawn at the axis end and marked ``∞``."""
    key = "node_id" if "node_id" in sens.columns else sens.columns[1]
    rows = sens.head(top).to_dict("records")
    vals = [_value(r) for r in rows]
    finite = [v for v in vals if math.isfinite(v) and v > 0]
    cap = (max(finite) * 10) if finite else 1.0
    floor = (min(finite) / 10) if finite else 1e-12
    if not finite and not any(math.isinf(v) for v in vals):
        # every estimate 0 (the full conversion passes): equal bars at the log axis' floor
        # looked like data
        fig = _figure(figsize=(7, 1.2))
        ax = fig.add_subplot()
        ax.axis("off")
        ax.text(0.5, 0.5, f"no node's error drop is above 0 ({len(sens)} ranked): converting "
                "each one costs nothing measurable", ha="center", va="center", fontsize=9,
                wrap=True)
        ax.set_title(title, fontsize=9)
        return fig
    fig = _figure(figsize=(7, 0.28 * max(len(rows), 4) + 0.8))
    ax = fig.add_subplot()
    kept_set = set(kept)
    labels, lengths, colours = [], [], []
    for r, v in zip(rows, vals):
        name = str(r[key])
        labels.append(name if len(name) <= 48 else "…" + name[-47:])
        lengths.append(cap if math.isinf(v) else max(v, floor))
        colours.append("#c33" if r.get("node_id") in kept_set or r.get("kept") else "#48a")
    y = list(range(len(rows)))[::-1]
    ax.barh(y, lengths, color=colours)
    for yi, v, length in zip(y, vals, lengths):
        if math.isinf(v):
            ax.text(length, yi, " ∞", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("error drop when kept alone (measured where re-checked, else estimated)")
    ax.set_title(title + ("  (red: kept)" if kept_set else ""), fontsize=9)
    return fig


def sensitivity_overlay(sens: pd.DataFrame) -> pd.Series:
    """node_id -> bar value (infinite estimates capped at 10× the largest finite one)."""
    vals = {r["node_id"]: _value(r) for r in sens.to_dict("records")}
    finite = [v for v in vals.values() if math.isfinite(v)]
    cap = max(finite) * 10 if finite else 1.0
    return pd.Series({k: (cap if math.isinf(v) else v) for k, v in vals.items()}, dtype=float)


def plan_plot(plan: PrecisionPlan, top: int = 20):
    """The plan's ranked sensitivity, kept nodes in red."""
    return sensitivity_figure(plan.sensitivity, plan.kept, top,
                              title=f"{plan.target} sensitivity, {len(plan.kept)} kept")


def plan_render(plan: PrecisionPlan, **kw: Any):
    """The float32 graph coloured by sensitivity, kept nodes highlighted (render_model)."""
    model = plan.source
    kw.setdefault("highlight", list(plan.kept))
    if plan.kept:
        kw.setdefault("around", plan.kept[0])
    kw.setdefault("overlay_label", "sensitivity")
    return _render.render_model(model, overlay=sensitivity_overlay(plan.sensitivity), **kw)


def plan_html(plan: PrecisionPlan, max_rows: int = 15) -> str:
    """Verdict, kept nodes, per-output before/after error, the trials and the top ranks."""
    colour = "#2a7" if plan.passed else "#c33"
    kept = ", ".join(esc_text(k) for k in plan.kept[:30]) or "none"
    notes = "".join(f"<li>{esc_text(n)}</li>" for n in plan.notes)
    parts = [f'<div style="color:{colour}"><b>{esc_text(plan.summary_text())}</b></div>',
             f'<ul style="color:#a60">{notes}</ul>' if notes else "",
             f"<div>kept: {kept}</div>", "<h4>outputs</h4>", frame_html(plan.outputs),
             "<h4>trials</h4>", frame_html(plan.trials.head(max_rows)),
             "<h4>sensitivity</h4>",
             frame_html(plan.sensitivity.head(max_rows).drop(
                 columns=[c for c in ("cal_min", "cal_max") if c in plan.sensitivity]))]
    return "\n".join(parts)


VIEWS = (("plot", plan_plot), ("render", plan_render), ("html", plan_html))
