"""matplotlib figures (imported only on use: `import onnx_lab` needs no display)."""

from __future__ import annotations

import numpy as np

__all__ = ["histogram_figure"]


def _figure(figsize=(6, 3.2)):
    # A bare Figure (no pyplot): no global state, no GUI backend, shows inline in Jupyter.
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


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
