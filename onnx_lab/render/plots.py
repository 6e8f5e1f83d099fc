"""matplotlib figures (imported only on use: `import onnx_lab` needs no display)."""

from __future__ import annotations

import numpy as np

__all__ = ["histogram_figure"]


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
            def _repr_png_(self) -> bytes:
                import io

                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100, bbox_inches="tight")
                return buf.getvalue()

        LabFigure.__module__ = __name__
        LabFigure.__qualname__ = "LabFigure"
        globals()["LabFigure"] = cls = LabFigure
    return cls


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
