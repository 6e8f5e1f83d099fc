"""matplotlib figures (imported only on use: `import onnx_lab` needs no display)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["histogram_figure", "literal"]


def _figure(figsize=(6, 3.2)):
    """A bare Figure (no pyplot: no global state, no GUI backend) that displays itself.

    Jupyter shows a Figure inline only when pyplot's inline backend is active; the figures of
    onnx_lab carry their own PNG representation so they show in any notebook without
    ``%matplotlib inline``.
    """
    return _figure_class()(figsize=figsize, layout="constrained")


def _figure_class():
    # Defined on first use so that importing this module does not import matplotlib; kept as
    # a module attribute so figures pickle.
    cls = globals().get("LabFigure")
    if cls is None:
        from matplotlib.figure import Figure

        class LabFigure(Figure):
            def draw(self, renderer):  # noqa: ANN001, ANN202 - matplotlib's signature
                _literal_dollars(self)
                return super().draw(renderer)

            def _repr_png_(self) -> bytes:
                import io

                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100, bbox_inches="tight")
                return buf.getvalue()

        LabFigure.__module__ = __name__
        LabFigure.__qualname__ = "LabFigure"
        globals()["LabFigure"] = cls = LabFigure
    return cls


_DOLLAR = re.compile(r"(?<!\\)\$")


def literal(text: str) -> str:
    """``text`` as matplotlib shows it literally: each ``$`` escaped, so a name like
    ``cost $x^$`` is not parsed as mathtext (which draws it wrong or raises ValueError)."""
    return _DOLLAR.sub(r"\\$", str(text))


def _literal_dollars(fig: Any) -> None:
    """Before each draw: every text onnx_lab put on ``fig`` (titles, axis labels, legends,
    annotations, tick labels given as strings: names from the model) shows ``$`` literally.
    onnx_lab writes no mathtext of its own; what matplotlib's own formatters make (log-scale
    ``10^{-3}``, an axis offset) is left as it is."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    keep: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            keep.add(id(axis.offsetText))  # "1e3" / "$\\times10^{3}$" of a scalar axis
            for minor in (False, True):
                fmt = axis.get_minor_formatter() if minor else axis.get_major_formatter()
                labels = axis.get_minorticklabels() if minor else axis.get_majorticklabels()
                # String labels (set_yticks(y, names) makes a FuncFormatter or a
                # FixedFormatter): escaped, now and whenever the axis makes them again.
                given = isinstance(fmt, (FixedFormatter, FuncFormatter))
                if given and not getattr(fmt, "_onnx_lab_literal", False):
                    lit = FuncFormatter(lambda x, pos, f=fmt: literal(f(x, pos)))
                    lit._onnx_lab_literal = True
                    (axis.set_minor_formatter if minor else axis.set_major_formatter)(lit)
                for t in labels:
                    if given and "$" in t.get_text():
                        t.set_text(literal(t.get_text()))
                    keep.add(id(t))
    for t in fig.findobj(Text):
        if id(t) not in keep and "$" in t.get_text():
            t.set_text(literal(t.get_text()))


def histogram_figure(values: np.ndarray, *, title: str = "", bins: int = 100):
    """Histogram of finite values with a log count axis; NaN/Inf counts in the title."""
    fig = _figure()
    ax = fig.add_subplot()
    x = np.asarray(values, dtype=np.float64).ravel()
    finite = x[np.isfinite(x)]
    ax.hist(finite, bins=bins, color="#4c78a8", log=True)
    bad = x.size - finite.size
    ax.set_title(title + (f"  ({bad} non-finite)" if bad else ""), fontsize=9)
    ax.set_xlabel("value")
    ax.set_ylabel("count")
    return fig
