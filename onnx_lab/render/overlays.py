"""Numbers on the graph: map an overlay Series onto nodes, colour it, and draw a legend.

An overlay is a pandas Series keyed by node id or tensor name (a tensor stands for the node
that produces it), for example the max abs error per layer of a comparison or the time per
node of a profile. Values become a fill colour on a colormap (log scale for quantities that
span decades, such as errors) and a line in the node label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnx_lab.errors import RenderError, unknown_name
from onnx_lab.render._html import esc_attr, esc_text

if TYPE_CHECKING:
    import pandas as pd

    from onnx_lab.core.index import ModelIndex

__all__ = ["ColorScale", "resolve_overlay", "make_scale", "format_value", "aggregate",
           "NAN_COLOR", "NO_VALUE_COLOR"]

CMAP = "YlOrRd"
NAN_COLOR = "#c51b8a"  # NaN / Inf stand out from every colour of the map
NO_VALUE_COLOR = "#f4f4f4"
LOG_AUTO_DECADES = 3.0


def format_value(v: float | None) -> str:
    """Compact number for labels: ``3.2e-05``, ``12.5``, ``nan``."""
    if v is None:
        return ""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-2:
        return f"{v:.2e}"
    return f"{v:.3g}"


def resolve_overlay(index: ModelIndex, overlay: pd.Series | Mapping) -> tuple[dict[str, float],
                                                                               list[str]]:
    """Map overlay keys to node ids: node id, else the producer of a tensor.

    Several tensors of one node keep the largest value. Keys that name nothing are skipped
    with a note; when no key matches at all, UnknownNameError names the first.

    Returns:
        (node id -> value, notes)
    """
    items = list(overlay.items())
    out: dict[str, float] = {}
    missing: list[str] = []
    for key, value in items:
        key = str(key)
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise RenderError(f"overlay value {value!r} for {key!r} is not a number.",
                              fix="Pass a numeric pandas Series.") from None
        nid = key if key in index.entries else index.producer.get(key)
        if nid is None:
            missing.append(key)
            continue
        if nid not in out or _gt(v, out[nid]):
            out[nid] = v
    if items and not out:
        raise unknown_name("node id or tensor name", missing[0],
                           list(index.entries) + list(index.producer),
                           fix="Key the overlay Series by lab.nodes.node_id or tensor names.")
    notes = []
    if missing:
        notes.append(f"overlay: {len(missing)} key(s) match no node or produced tensor "
                     f"(e.g. {missing[0]!r}).")
    return out, notes


def _gt(a: float, b: float) -> bool:
    if math.isnan(a):
        return True
    return not math.isnan(b) and a > b


def aggregate(values: list[float], label: str | None) -> float:
    """Value of a collapsed box: the sum for times (``*_ms``, ``time*``), else the max."""
    vals = [v for v in values if not math.isnan(v)]
    if len(vals) < len(values):
        return math.nan
    lab = (label or "").lower()
    if lab.endswith("_ms") or lab.endswith("_us") or "time" in lab:
        return float(sum(vals))
    return float(max(vals))


@dataclass
class ColorScale:
    """A value -> colour map (linear or log) with its legend.

    Attributes:
        vmin, vmax: the range of finite values (positive ones only on a log scale).
        log: log10 scale.
        label: the quantity's name shown in the legend.
    """

    vmin: float
    vmax: float
    log: bool
    label: str
    cmap: str = CMAP

    def _t(self, v: float) -> float:
        if self.vmax == self.vmin:
            return 0.0  # all values equal (e.g. every error 0): nothing stands out
        if self.log:
            v = max(v, self.vmin)
            return (math.log10(v) - math.log10(self.vmin)) / (math.log10(self.vmax)
                                                              - math.log10(self.vmin))
        return (v - self.vmin) / (self.vmax - self.vmin)

    def color(self, v: float | None) -> str:
        """Fill colour (``#rrggbb``) of a value; NaN/Inf get :data:`NAN_COLOR`."""
        if v is None:
            return NO_VALUE_COLOR
        if not math.isfinite(v):
            return NAN_COLOR
        return _sample(self.cmap, min(1.0, max(0.0, self._t(v))))

    @staticmethod
    def font_for(fill: str) -> str:
        """Black or white text, whichever reads better on ``fill``."""
        r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
        return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"

    def legend_label(self) -> str:
        """An HTML-like DOT label: title, five colour cells with their values."""
        if self.log:
            lo, hi = math.log10(self.vmin), math.log10(self.vmax)
            ticks = [10 ** (lo + (hi - lo) * i / 4) for i in range(5)]
        else:
            ticks = [self.vmin + (self.vmax - self.vmin) * i / 4 for i in range(5)]
        cells = "".join(
            f'<TD BGCOLOR="{esc_attr(self.color(t))}" WIDTH="46"><FONT POINT-SIZE="9" COLOR="'
            f'{esc_attr(self.font_for(self.color(t)))}">{esc_text(format_value(t))}</FONT></TD>'
            for t in ticks)
        title = esc_text(self.label + (" (log scale)" if self.log else ""))
        return (f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">'
                f'<TR><TD COLSPAN="6"><B>{title}</B>  min {esc_text(format_value(self.vmin))}'
                f'  max {esc_text(format_value(self.vmax))}</TD></TR>'
                f'<TR>{cells}<TD BGCOLOR="{NAN_COLOR}"><FONT POINT-SIZE="9" COLOR="white">'
                f'nan/inf</FONT></TD></TR></TABLE>>')


_CMAP_CACHE: dict[str, list[tuple[float, float, float]]] = {}


def _sample(name: str, t: float) -> str:
    table = _CMAP_CACHE.get(name)
    if table is None:
        # matplotlib's colormap, sampled once into a 256-entry table (import on use only).
        import matplotlib

        cmap = matplotlib.colormaps[name]
        table = [tuple(cmap(i / 255)[:3]) for i in range(256)]
        _CMAP_CACHE[name] = table
    r, g, b = table[int(round(t * 255))]
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def make_scale(values: list[float], *, log: bool | None = None,
               label: str | None = None) -> ColorScale | None:
    """A ColorScale over the finite values; ``log=None`` picks log when they span > 3 decades.

    Returns None when no value is finite.
    """
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    pos = [v for v in finite if v > 0]
    if log is None:
        # Errors and times are >= 0 and span decades; exact zeros (bit-equal layers) are
        # drawn at the bottom of the scale.
        log = min(finite) >= 0 and len(pos) >= 2 and max(pos) / min(pos) > 10 ** LOG_AUTO_DECADES
    if log:
        if not pos:
            log = False
        else:
            return ColorScale(min(pos), max(pos), True, label or "value")
    return ColorScale(min(finite), max(finite), False, label or "value")
