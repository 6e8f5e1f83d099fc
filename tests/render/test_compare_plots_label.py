"""The DriftDebugger's per-layer plot: the first-divergence label stays clear of the legend."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_lab._pandas import pd

pytest.importorskip("matplotlib")


def _drawn(fig):
    """(the first-divergence label, its box, the legend's box, the axes' box), drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    r = canvas.get_renderer()
    ax = fig.axes[0]
    label = next(t for t in ax.texts if t.get_text().startswith("first divergence"))
    return (label, label.get_window_extent(r), ax.get_legend().get_window_extent(r),
            ax.get_window_extent(r))


@pytest.mark.parametrize("at", [5, 35])  # left and right of the 60% mark
def test_divergence_label_at_the_ceiling_does_not_cover_the_legend(at):
    from onnx_lab.render.compare_plots import layer_error_figure

    n = 40
    y = np.geomspace(1e-4, 1e2, n)
    y[at:] = np.inf  # an fp16 overflow: the first divergence is drawn at the plot's ceiling
    layers = pd.DataFrame({"tensor": [f"t{i}" for i in range(n)], "max_abs": y,
                           "passed": np.arange(n) < at})
    fig = layer_error_figure(layers, 0.01, {"tensor": f"t{at}", "op_type": "Conv",
                                            "node_id": f"n{at}"})
    _label, box, legend, axes = _drawn(fig)
    assert not box.overlaps(legend), (box, legend)
    assert box.y1 <= axes.y1 + 1  # inside the axes, not over the title row


def test_divergence_label_of_a_nan_error_is_drawn():
    # a first divergence whose error is NaN (shapes or sequence lengths that differ) was
    # annotated at y = NaN: matplotlib drew no label at all, only the vertical line
    from onnx_lab.render.compare_plots import layer_error_figure

    layers = pd.DataFrame({"tensor": ["a", "b", "c"], "max_abs": [0.0, np.nan, 1.0],
                           "passed": [True, False, False]})
    fig = layer_error_figure(layers, 1e-4, {"tensor": "b", "op_type": "SplitToSequence",
                                            "node_id": "split"})
    label, box, legend, _axes = _drawn(fig)
    assert np.isfinite(label.xy[1]) and box.width > 0
    assert not box.overlaps(legend)
