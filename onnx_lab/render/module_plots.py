"""Time, error and FLOPs per PyTorch module, side by side (matplotlib, imported on use).

The tables come from the results' own ``by_module`` (``Profile.by_module``,
``Comparison.by_module``, ``Cost.by_module``); this module joins them on the module and draws
them::

    from onnx_lab.render.module_plots import modules_table, modules_figure
    modules_figure(profile=lab.profile(), comparison=onnx_lab.compare(lab, fp16), depth=2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.errors import InputError
from onnx_lab.render._html import esc_text
from onnx_lab.render.plots import _figure

__all__ = ["modules_table", "modules_figure", "torch_comparison_figure"]

_SMALL = 9
_BLUE, _RED, _GREY, _GREEN = "#4c78a8", "#e45756", "#9d9d9d", "#54a24b"


def modules_table(*, profile: Any = None, comparison: Any = None, cost: Any = None,
                  depth: int | None = None) -> pd.DataFrame:
    """One row per PyTorch module with the columns of each result given, in model order.

    Columns: module, module_class, first_topo, then ``time_ms``, ``time_share`` (profile),
    ``max_abs``, ``n_failed``, ``first_divergence`` (comparison), ``flops``,
    ``flops_share`` (cost), for those given.

    Raises:
        InputError: no result given.
    """
    parts: list[pd.DataFrame] = []
    if profile is not None:
        parts.append(profile.by_module(depth)[["module", "module_class", "first_topo",
                                               "time_ms", "share"]]
                     .rename(columns={"share": "time_share"}))
    if comparison is not None:
        parts.append(comparison.by_module(depth)[["module", "module_class", "first_topo",
                                                  "max_abs", "n_failed",
                                                  "first_divergence"]])
    if cost is not None:
        parts.append(cost.by_module(depth)[["module", "module_class", "first_topo", "flops",
                                            "share"]].rename(columns={"share": "flops_share"}))
    if not parts:
        raise InputError("modules_table needs a profile, a comparison or a cost.",
                         fix="Pass profile=lab.profile() and/or comparison=onnx_lab.compare(...)")
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p, on="module", how="outer", suffixes=("", "_r"))
        for c in ("module_class", "first_topo"):
            out[c] = out[c].where(out[c].notna(), out.pop(f"{c}_r")) if f"{c}_r" in out \
                else out[c]
    return out.sort_values("first_topo", kind="stable").reset_index(drop=True)


def _error_bars(ax: Any, y: np.ndarray, vals: np.ndarray, failed: np.ndarray,
                first: np.ndarray) -> None:
    """Largest error per row, log scale: red out of tolerance, the first divergence
    outlined."""
    bars = ax.barh(y, np.maximum(vals, 1e-12), color=[_RED if f else _BLUE for f in failed])
    for b, f in zip(bars, first):
        if f:
            b.set_edgecolor("black")
            b.set_linewidth(1.8)
    ax.set_xscale("log")
    ax.set_xlabel("largest |error| (red: out of tolerance, outlined: first divergence)",
                  fontsize=_SMALL)
    ax.set_title("error per module", fontsize=10)


def torch_comparison_figure(r: Any):
    """:func:`onnx_lab.compare_torch`'s result: the largest error of each matched module, in
    the order PyTorch finished them (red: out of tolerance, outlined: the first divergence)."""
    df = r.modules.loc[r.modules.tensor.notna()].reset_index(drop=True)
    fig = _figure(figsize=(7.5, max(2.6, 0.24 * len(df) + 1.2)))
    ax = fig.subplots()
    y = np.arange(len(df))[::-1]
    first = df.module.eq((r.first_divergence or {}).get("module")).to_numpy()
    _error_bars(ax, y, df.max_abs.astype(float).fillna(0.0).to_numpy(),
                ~df.passed.fillna(True).astype(bool).to_numpy(), first)
    ax.set_title("ONNX against PyTorch, per module", fontsize=10)
    ax.set_yticks(y, [m if len(m) <= 40 else "…" + m[-39:] for m in df.module],
                  fontsize=_SMALL)
    ax.tick_params(labelsize=_SMALL)
    return fig


def torch_comparison_html(c: Any) -> str:
    """The notebook view of compare_torch's result: verdict, first divergence, the table."""
    fd = c.first_divergence
    msg = esc_text(fd["message"]) if fd else "no module diverges"
    cols = ["order", "module", "module_class", "tensor", "match", "max_abs", "cosine",
            "passed"]
    verdict = "passed" if c.passed else "FAILED"
    return (f"<div><b>compare_torch: {verdict}</b> — {msg}</div>"
            + c.modules[cols].to_html(index=False, na_rep="", escape=True))


#: (kind, view) of ``TorchComparison`` (compare_torch's result), registered by render/results.py.
VIEWS = (("plot", torch_comparison_figure), ("html", torch_comparison_html))


def modules_figure(*, profile: Any = None, comparison: Any = None, cost: Any = None,
                   depth: int | None = None, top: int = 30):
    """Bars per module, one panel per result: kernel time (ms per run), the largest error
    (log scale; red: out of tolerance, outlined: the first divergence), FLOPs.

    Modules run top to bottom in model order; with more than ``top`` modules, those with
    the most time (else error, else FLOPs) are kept.
    """
    df = modules_table(profile=profile, comparison=comparison, cost=cost, depth=depth)
    key = next((c for c in ("time_ms", "max_abs", "flops") if c in df), None)
    if len(df) > top and key is not None:
        keep = df[key].fillna(-1).nlargest(top).index
        df = df.loc[sorted(keep)]
    labels = [m if m else "(root)" for m in df.module.replace("?", "(unknown)")]
    panels = [c for c in ("time_ms", "max_abs", "flops") if c in df]
    fig = _figure(figsize=(4.2 * len(panels) + 2.5, max(2.6, 0.26 * len(df) + 1.2)))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    y = np.arange(len(df))[::-1]
    for ax, col in zip(axes, panels):
        vals = df[col].astype(float).fillna(0.0).to_numpy()
        if col == "max_abs":
            failed = df.get("n_failed", pd.Series(0, index=df.index)).fillna(0).to_numpy() > 0
            first = df.get("first_divergence", pd.Series(False, index=df.index)) \
                .fillna(False).astype(bool).to_numpy()
            _error_bars(ax, y, vals, failed, first)
        elif col == "time_ms":
            ax.barh(y, vals, color=_BLUE)
            ax.set_xlabel("ms per run", fontsize=_SMALL)
            ax.set_title("kernel time per module", fontsize=10)
        else:
            ax.barh(y, vals / 1e6, color=_GREEN)
            ax.set_xlabel("MFLOPs", fontsize=_SMALL)
            ax.set_title("FLOPs per module", fontsize=10)
        ax.tick_params(labelsize=_SMALL)
    axes[0].set_yticks(y, [lb if len(lb) <= 40 else "…" + lb[-39:] for lb in labels],
                       fontsize=_SMALL)
    return fig
