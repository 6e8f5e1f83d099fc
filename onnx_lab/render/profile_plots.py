"""Figures of profiling results (matplotlib, imported only on use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnx_lab.render.plots import _figure

if TYPE_CHECKING:
    from onnx_lab.profiling.run import Profile
    from onnx_lab.profiling.sweep import BatchSweep

__all__ = ["profile_figure", "batch_sweep_figure", "levels_figure"]

_BLUE = "#4c78a8"
_ORANGE = "#f58518"
_GREY = "#9d9d9d"


def _short(label: str, n: int = 38) -> str:
    return label if len(label) <= n else "…" + label[-(n - 1):]


def profile_figure(profile: Profile, *, top: int = 15, session: str | None = None):
    """Three panels: share of kernel time per op type, the top-N nodes, the latency histogram.

    Args:
        profile: a :class:`~onnx_lab.profiling.run.Profile`.
        top: nodes in the middle panel.
        session: the provider session to show (default the first).
    """
    sessions = list(profile.latency_stats.session)
    session = session or (sessions[0] if sessions else None)
    ops = profile.ops.loc[profile.ops.session == session].head(12)
    nodes = profile.nodes.loc[profile.nodes.session == session].head(top)
    lat = profile.latency.loc[(profile.latency.session == session) & ~profile.latency.warmup]

    fig = _figure(figsize=(13, max(3.2, 0.28 * max(len(nodes), len(ops)) + 1.2)))
    a1, a2, a3 = fig.subplots(1, 3, width_ratios=[1, 1.4, 1])
    a1.barh(range(len(ops))[::-1], ops.share * 100, color=_BLUE)
    a1.set_yticks(range(len(ops))[::-1], ops.op_type, fontsize=8)
    a1.set_xlabel("% of kernel time")
    a1.set_title("op types", fontsize=9)

    colors = [_BLUE if m else _GREY for m in nodes.mapped]
    a2.barh(range(len(nodes))[::-1], nodes.total_ms, color=colors)
    a2.set_yticks(range(len(nodes))[::-1],
                  [_short(f"{n} ({o})") for n, o in zip(nodes.node_id, nodes.op_type)],
                  fontsize=7)
    a2.set_xlabel("ms per run")
    a2.set_title(f"top {len(nodes)} nodes (grey: not a model node)", fontsize=9)

    x = lat.wall_ms.to_numpy()
    if len(x):
        a3.hist(x, bins=min(30, max(5, len(x) // 2)), color=_BLUE)
        for q, style in ((50, "-"), (90, "--"), (99, ":")):
            a3.axvline(np.percentile(x, q), color=_ORANGE, linestyle=style,
                       label=f"p{q} {np.percentile(x, q):.3g} ms")
        a3.legend(fontsize=7)
    a3.set_xlabel("wall ms per run")
    a3.set_title(f"latency, {len(x)} runs ({(session or '').replace('ExecutionProvider', '')})",
                 fontsize=9)
    return fig


def batch_sweep_figure(sweep: BatchSweep):
    """Latency and throughput against batch size (log2 x axis), the knee marked."""
    t = sweep.table
    fig = _figure(figsize=(6.5, 3.4))
    ax = fig.add_subplot()
    ax.plot(t.batch, t.items_per_s, "o-", color=_BLUE, label="items/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(t.batch), [str(b) for b in t.batch])
    ax.set_xlabel(f"{sweep.dim}")
    ax.set_ylabel("items / s", color=_BLUE)
    ax2 = ax.twinx()
    ax2.plot(t.batch, t.latency_ms, "s--", color=_ORANGE, label="latency")
    ax2.set_ylabel("latency ms", color=_ORANGE)
    if sweep.knee is not None:
        ax.axvline(sweep.knee, color=_GREY, linestyle=":")
        ax.annotate(f"knee {sweep.knee}", (sweep.knee, ax.get_ylim()[1]), fontsize=8,
                    ha="left", va="top")
    ax.set_title("batch sweep", fontsize=9)
    return fig


def levels_figure(table):
    """Mean latency and node count per ORT optimization level (a :func:`levels` table)."""
    fig = _figure(figsize=(6.5, 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(table))
    ax.bar(x, table.mean_ms, color=_BLUE)
    ax.set_xticks(x, table.opt_level)
    ax.set_ylabel("mean ms")
    for xi, (ms, n) in enumerate(zip(table.mean_ms, table.nodes)):
        ax.annotate(f"{n} nodes", (xi, ms), ha="center", va="bottom", fontsize=8)
    ax.set_title("ORT optimization levels", fontsize=9)
    return fig
