"""Figures of a layer-by-layer comparison (matplotlib, imported on use)."""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.render.plots import _figure

__all__ = ["layer_error_figure", "hist_figure", "scatter_figure"]


def layer_error_figure(layers: pd.DataFrame, atol: float, divergence: dict[str, Any] | None,
                       column: str = "max_abs"):
    """``column`` per compared tensor along topological depth, log scale, tolerance line."""
    fig = _figure(figsize=(8, 3.4))
    ax = fig.add_subplot()
    if not len(layers):
        ax.text(0.5, 0.5, "no layers compared", ha="center", va="center")
        return fig
    x = np.arange(len(layers))
    y = layers[column].astype(float).to_numpy()
    finite = np.isfinite(y)
    # Zeros and infinities cannot sit on a log axis: draw them at the plot's floor/ceiling.
    pos = y[finite & (y > 0)]
    floor = min(pos.min(), atol) / 10 if pos.size else atol / 100
    ceil = max(pos.max(), atol) * 10 if pos.size else atol * 100
    shown = np.where(np.isnan(y), np.nan, np.where(y <= 0, floor, np.where(np.isinf(y), ceil, y)))
    passed = layers["passed"].astype(bool).to_numpy()
    ax.plot(x, shown, color="#999", lw=0.8, zorder=1)
    ax.scatter(x[passed], shown[passed], s=10, color="#4c78a8", label="within tolerance",
               zorder=2)
    ax.scatter(x[~passed], shown[~passed], s=14, color="#e45756", label="out of tolerance",
               zorder=3)
    if np.isinf(y).any():
        ax.scatter(x[np.isinf(y)], shown[np.isinf(y)], marker="^", s=30, color="#b00",
                   label="inf / nan mismatch", zorder=4)
    ax.axhline(atol, color="#54a24b", ls="--", lw=1, label=f"atol {atol:g}")
    if divergence is not None:
        hit = np.flatnonzero(layers["tensor"].to_numpy() == divergence["tensor"])
        if hit.size:
            ax.axvline(hit[0], color="#e45756", lw=1, alpha=0.6)
            # Label on the side of the line with room (a label past the right edge is cut).
            right = hit[0] > 0.6 * max(1, len(layers) - 1)
            # Below a point in the top of the axes (an inf sits at the ceiling): above it, the
            # label went past the axes into the legend's row.
            yv = shown[hit[0]]
            if not np.isfinite(yv):  # a NaN (shapes or lengths that differ): not drawn at
                yv = ceil  # all, the label with it; at the ceiling, as an inf
            # (a floor or ceiling of 0, all errors 0: no log span, no warning)
            span = np.log10(ceil) - np.log10(floor) if ceil > 0 and floor > 0 else 0.0
            high = bool(np.isfinite(yv) and yv > 0 and span > 0
                        and np.log10(yv) > np.log10(floor) + 0.7 * span)
            ax.annotate(f"first divergence\n{divergence['op_type']} {divergence['node_id']}",
                        (hit[0], yv), xytext=(-8 if right else 8, -8 if high else 8),
                        textcoords="offset points", ha="right" if right else "left",
                        va="top" if high else "bottom",
                        fontsize=9, color="#b00",
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none",
                              "alpha": 0.8})
    ax.set_yscale("log")
    ax.set_xlabel("layer (topological order)")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole positions
    ax.set_ylabel(column + (" (exact 0 at bottom)" if (y == 0).any() else ""))
    # Above the axes, never over the points or the first-divergence label.
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=4,
              frameon=False, borderaxespad=0.0, handletextpad=0.3, columnspacing=1.0)
    ax.tick_params(labelsize=9)
    return fig


def _fixed_layout(fig, **margins: float) -> None:
    """Fixed margins instead of constrained layout: laying out log axes measures every tick
    label and took about half of a figure's time (0.4 s of a DriftDebugger click)."""
    fig.set_layout_engine("none")
    # subplots_adjust refuses after constrained layout was set; axes made later read these.
    fig.subplotpars.update(**margins)


def _log_counts(ax) -> None:
    """Log count axis with decade ticks only: the minor ticks of a log axis are ~100 tick
    artists per figure, most of its drawing time, for no information on a count axis."""
    from matplotlib.ticker import NullLocator

    ax.set_yscale("log")
    ax.yaxis.set_minor_locator(NullLocator())


def hist_figure(ref: np.ndarray, cand: np.ndarray, title: str, bins: int = 100):
    """Value histograms of both sides and the histogram of ``cand - ref``.

    Counts come from ``np.histogram`` and are drawn as one filled step artist per histogram
    (``ax.hist`` draws one patch per bar: 300 artists to lay out and rasterize).
    """
    fig = _figure(figsize=(8, 3.4))
    _fixed_layout(fig, left=0.08, right=0.98, bottom=0.16, top=0.88, wspace=0.25)
    a1, a2 = fig.subplots(1, 2)
    r = np.asarray(ref, dtype=np.float64).ravel()
    c = np.asarray(cand, dtype=np.float64).ravel()
    rf, cf = r[np.isfinite(r)], c[np.isfinite(c)]
    lo = min(rf.min(initial=0), cf.min(initial=0))
    hi = max(rf.max(initial=1), cf.max(initial=1))
    edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    for values, label, colour in ((rf, "reference", "#4c78a8"), (cf, "candidate", "#f58518")):
        counts, _ = np.histogram(values, bins=edges)
        a1.stairs(counts, edges, fill=True, alpha=0.6, label=label, color=colour)
    _log_counts(a1)
    short = title if len(title) <= 40 else "…" + title[-39:]
    a1.set_title(f"values: {short}", fontsize=10)
    a1.set_xlabel("value", fontsize=9)
    a1.set_ylabel("count (log)", fontsize=9)
    a1.legend(fontsize=8, frameon=False)
    if r.size == c.size:
        d = c - r
        d = d[np.isfinite(d)]
        if d.size:
            counts, dedges = np.histogram(d, bins=bins)
            a2.stairs(counts, dedges, fill=True, color="#e45756")
            _log_counts(a2)
    a2.set_title("candidate − reference", fontsize=10)
    a2.set_xlabel("difference", fontsize=9)
    for ax in (a1, a2):
        ax.tick_params(labelsize=9)
        ax.xaxis.get_major_formatter().set_powerlimits((-3, 4))
    return fig


def scatter_figure(ref: np.ndarray, cand: np.ndarray, title: str, max_points: int = 50_000):
    """Candidate against reference values (a seeded subsample), with the y = x line."""
    fig = _figure(figsize=(4.2, 4))
    _fixed_layout(fig, left=0.17, right=0.96, bottom=0.12, top=0.92)
    ax = fig.add_subplot()
    r = np.asarray(ref, dtype=np.float64).ravel()
    c = np.asarray(cand, dtype=np.float64).ravel()
    if r.size != c.size:
        ax.text(0.5, 0.5, f"sizes differ: {r.size} vs {c.size}", ha="center", va="center")
        return fig
    if r.size > max_points:
        pick = np.random.default_rng(0).choice(r.size, max_points, replace=False)
        r, c = r[pick], c[pick]
    ok = np.isfinite(r) & np.isfinite(c)
    # One marker line (rasterized) rather than a scatter collection: same dots, cheaper draw.
    ax.plot(r[ok], c[ok], ls="", marker="o", ms=1.2, mew=0, alpha=0.4, color="#4c78a8",
            rasterized=True)
    if ok.any():
        lo, hi = float(min(r[ok].min(), c[ok].min())), float(max(r[ok].max(), c[ok].max()))
        ax.plot([lo, hi], [lo, hi], color="#e45756", lw=1)
    ax.set_xlabel("reference")
    ax.set_ylabel("candidate")
    ax.set_title(title, fontsize=9)
    return fig
