"""Figures of profiling results (matplotlib, imported only on use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnx_lab.render.plots import _figure

if TYPE_CHECKING:
    from onnx_lab.profiling.run import Profile
    from onnx_lab.profiling.sweep import BatchSweep

__all__ = ["profile_figure", "batch_sweep_figure", "levels_figure", "roofline_figure",
           "generation_figure"]

# Figures are shown at 90 dpi in widgets: 9 pt is 11 px, the smallest label drawn.
_SMALL = 9

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
    a1.set_yticks(range(len(ops))[::-1], ops.op_type, fontsize=_SMALL)
    a1.set_xlabel("% of kernel time")
    a1.set_title("op types", fontsize=10)

    colors = [_BLUE if m else _GREY for m in nodes.mapped]
    a2.barh(range(len(nodes))[::-1], nodes.total_ms, color=colors)
    a2.set_yticks(range(len(nodes))[::-1],
                  [_short(f"{n} ({o})") for n, o in zip(nodes.node_id, nodes.op_type)],
                  fontsize=_SMALL)
    a2.set_xlabel("ms per run")
    a2.set_title(f"top {len(nodes)} nodes (grey: not a model node)", fontsize=10)

    x = lat.wall_ms.to_numpy()
    if len(x):
        a3.hist(x, bins=min(30, max(5, len(x) // 2)), color=_BLUE)
        for q, style in ((50, "-"), (90, "--"), (99, ":")):
            a3.axvline(np.percentile(x, q), color=_ORANGE, linestyle=style,
                       label=f"p{q} {np.percentile(x, q):.3g} ms")
        a3.legend(fontsize=_SMALL)
    a3.set_xlabel("wall ms per run")
    a3.set_title(f"latency, {len(x)} runs ({(session or '').replace('ExecutionProvider', '')})",
                 fontsize=10)
    return fig


def batch_sweep_figure(sweep: BatchSweep):
    """Throughput (with the interval of its median) and latency against batch size (log2 x
    axis), one line per backend, the knee marked. Both y axes start at zero: a 7% gain must
    not look like a cliff."""
    t = sweep.table
    fig = _figure(figsize=(7.5, 3.6))
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    backends = list(dict.fromkeys(t.backend)) if "backend" in t and len(t) else [None]
    colors = [_BLUE, "#54a24b", "#b279a2", "#e45756"]
    for i, b in enumerate(backends):
        tb = t if b is None else t.loc[t.backend == b]
        c = colors[i % len(colors)]
        name = "" if len(backends) == 1 else f" {str(b).replace('ExecutionProvider', '')}"
        ax.plot(tb.batch, tb.items_per_s, "o-", color=c, label=f"items/s{name}")
        if "items_per_s_low" in tb:
            ax.fill_between(tb.batch, tb.items_per_s_low, tb.items_per_s_high, color=c,
                            alpha=0.2, linewidth=0)
        ax2.plot(tb.batch, tb.latency_ms, "s--", color=_ORANGE if i == 0 else c, alpha=0.8,
                 label=f"latency{name}")
    ax.set_xscale("log", base=2)
    if len(t):
        ticks = sorted(set(int(b) for b in t.batch))
        ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.set_xlabel(f"{sweep.dim}")
    ax.set_ylabel("items / s", color=_BLUE)
    ax2.set_ylabel("latency ms (median)", color=_ORANGE)
    ax.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    if sweep.knee is not None:
        ax.axvline(sweep.knee, color=_GREY, linestyle=":")
        ax.annotate(f"knee {sweep.knee}", (sweep.knee, ax.get_ylim()[1]), fontsize=_SMALL,
                    ha="left", va="top")
    if len(backends) > 1:
        ax.legend(fontsize=_SMALL, loc="lower right")
    ax.set_title("batch sweep (band: 95% interval of the median)", fontsize=10)
    return fig


def roofline_figure(cost, roof):
    """The roofline: attainable FLOP/s against arithmetic intensity (FLOPs per byte), the
    device's two roofs, and each known node at its intensity and roofline bound."""
    fig = _figure(figsize=(6.5, 3.8))
    ax = fig.add_subplot()
    n = roof.nodes
    n = n.loc[(n.flops > 0) & (n.bytes > 0)] if len(n) else n
    ridge = roof.peak_flops / roof.bandwidth
    if len(n):
        x = (n.flops / n.bytes).to_numpy(dtype=float)
        lo, hi = max(min(x.min(), ridge) / 4, 1e-3), max(x.max(), ridge) * 4
    else:
        lo, hi = ridge / 100, ridge * 100
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(roof.peak_flops, xs * roof.bandwidth) / 1e9, color=_GREY)
    ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, roof.peak_flops / 1e9), fontsize=_SMALL,
                ha="left", va="bottom")
    if len(n):
        attain = np.minimum(roof.peak_flops, x * roof.bandwidth) / 1e9
        mem = n.bound.to_numpy() == "memory"
        ax.scatter(x[mem], attain[mem], s=14, color=_ORANGE, label="memory-bound nodes")
        ax.scatter(x[~mem], attain[~mem], s=14, color=_BLUE, label="compute-bound nodes")
        ax.legend(fontsize=_SMALL, loc="lower right")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title(f"roofline: {roof.peak_flops / 1e12:.3g} TFLOP/s, "
                 f"{roof.bandwidth / 1e9:.3g} GB/s", fontsize=10)
    return fig


def levels_figure(table):
    """Mean latency and node count per ORT optimization level (a :func:`levels` table)."""
    fig = _figure(figsize=(6.5, 3.2))
    ax = fig.add_subplot()
    x = np.arange(len(table))
    med = table.p50_ms if "p50_ms" in table else table.mean_ms
    if "ci_low_ms" in table:
        err = np.vstack([med - table.ci_low_ms, table.ci_high_ms - med])
        ax.bar(x, med, color=_BLUE, yerr=err, capsize=4)
    else:
        ax.bar(x, med, color=_BLUE)
    ax.set_xticks(x, table.opt_level)
    ax.set_ylabel("median ms (95% interval)")
    ax.set_ylim(bottom=0)
    for xi, (ms, n) in enumerate(zip(med, table.nodes)):
        ax.annotate(f"{n} nodes", (xi, ms), ha="center", va="bottom", fontsize=_SMALL)
    ax.set_title("ORT optimization levels", fontsize=10)
    return fig


def generation_figure(g, *, session: str | None = None, top: int = 10):
    """Two panels of a :class:`~onnx_lab.profiling.generate.GenerationProfile`: the share of
    kernel time per op type in prefill and in decode side by side, and the decode step
    latency along the generation (median over the timed generations, p10-p90 band) with the
    KV cache growing on the right axis."""
    sessions = list(dict.fromkeys(g.latency_stats.session))
    session = session or (sessions[0] if sessions else None)
    ops = g.ops.loc[g.ops.session == session] if len(g.ops) else g.ops
    fig = _figure(figsize=(12.5, 3.8))
    a1, a2 = fig.subplots(1, 2, width_ratios=[1, 1.25])
    if len(ops):
        share = ops.pivot_table(index="op_type", columns="phase", values="share",
                                aggfunc="sum", fill_value=0.0)
        for ph in ("prefill", "decode"):
            if ph not in share:
                share[ph] = 0.0
        share = share.loc[share.max(axis=1).sort_values(ascending=False).index[:top]]
        y = np.arange(len(share))[::-1]
        a1.barh(y + 0.2, share.prefill * 100, height=0.4, color=_ORANGE, label="prefill")
        a1.barh(y - 0.2, share.decode * 100, height=0.4, color=_BLUE, label="decode")
        a1.set_yticks(y, share.index, fontsize=_SMALL)
        a1.legend(fontsize=_SMALL, loc="lower right")
    else:
        a1.text(0.5, 0.5, "no profiled generation\n(profile_runs=0)", ha="center",
                va="center", transform=a1.transAxes, fontsize=_SMALL)
        a1.set_yticks([])
    a1.set_xlabel("% of the phase's kernel time")
    a1.set_title("op types per phase", fontsize=10)

    s = g.steps
    s = s.loc[(s.session == session) & ~s.warmup & (s.phase == "decode")]
    st = g.latency_stats.set_index(["session", "phase"])
    if len(s) and (session, "decode") in st.index:
        if st.loc[(session, "decode"), "latency_from"] == "unprofiled":
            s = s.loc[~s.profiled]
        by = s.groupby("context").wall_ms
        ctx = np.asarray(by.median().index, dtype=float)
        a2.plot(ctx, by.median().to_numpy(), color=_BLUE, label="decode step (median)")
        a2.fill_between(ctx, by.quantile(0.1).to_numpy(), by.quantile(0.9).to_numpy(),
                        color=_BLUE, alpha=0.2, linewidth=0, label="p10-p90")
        # A few disturbed steps (other load) must not flatten the curve: the axis stops at
        # twice the slowest step of the typical ones (the 90th percentile of the medians).
        a2.set_ylim(0, max(2 * float(np.percentile(by.median().to_numpy(), 90)), 1e-6))
        kv = s.groupby("context").kv_cache_bytes.first()
        unit, div = ("MiB", 2**20) if kv.max() >= 2**20 else ("KiB", 2**10)
        a3 = a2.twinx()
        a3.plot(np.asarray(kv.index, dtype=float), kv.to_numpy() / div, color=_GREY,
                linestyle="--", label="KV cache")
        a3.set_ylabel(f"KV cache {unit} (dashed)", color=_GREY)
        a3.set_ylim(bottom=0)
        a2.legend(fontsize=_SMALL, loc="lower left")
        pre, dec = st.loc[(session, "prefill")], st.loc[(session, "decode")]
        a2.set_title(f"prefill {pre.p50_ms:.3g} ms ({g.prompt_tokens} tokens); decode "
                     f"{dec.p50_ms:.3g} ms/token, {dec.tokens_per_s:.4g} tokens/s", fontsize=10)
    a2.set_xlabel("context (tokens in the cache)")
    a2.set_ylabel("ms per decode step")
    return fig
