"""PrecisionDoctor headless: a run shows the plan, kept nodes, the chart; errors stay inside."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import onnx_lab

# The model builders of tests/numerics/test_precision.py (same file name: load it by path).
_spec = importlib.util.spec_from_file_location(
    "_numerics_test_precision", Path(__file__).resolve().parents[1] / "numerics" /
    "test_precision.py")
_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_models)
NORM_NODES, rms_overflow, sigmoid_tail = (_models.NORM_NODES, _models.rms_overflow,
                                          _models.sigmoid_tail)


def test_precision_widget_runs_and_saves(tmp_path):
    from onnx_lab.widgets import PrecisionDoctor

    lab = onnx_lab.open(rms_overflow())
    wdg = PrecisionDoctor(lab, background=False)
    wdg.run()
    plan = wdg.result
    assert plan is not None and plan.passed and NORM_NODES <= set(plan.kept)
    assert "kept" in wdg.verdict.value and "<img" in wdg.chart.value
    # Why everything converted fails: the overflow, which the CPU run alone would not show.
    assert "everything converted fails: fp16 overflow" in wdg.verdict.value
    assert not plan.outputs["passed_before"].any() and plan.outputs["passed_after"].all()
    html = wdg.outputs_html.value
    assert "score_after" in html
    # the verdict columns come first (at 1280 px passed_after sat behind a scroll)
    assert html.index("passed_after") < html.index("max_abs_before")
    # Every kept node is drawn and outlined on the canvas.
    assert not any("outside this view" in n for n in wdg.canvas.rendering.notes)
    assert set(plan.kept) <= set(wdg.canvas.highlight)
    # The tolerance fields follow the metric.
    assert wdg.threshold.layout.display == "none" and wdg.atol.layout.display is None
    wdg.metric.value = "sqnr"
    assert wdg.atol.layout.display == "none" and wdg.threshold.layout.display is None
    assert "metric='sqnr'" in wdg.code_for()
    assert "find_precision(" in wdg.code.value and wdg.code_for().startswith("plan = lab")
    wdg.save_path.value = str(tmp_path / "m.fp16.onnx")
    wdg.save()
    assert (tmp_path / "m.fp16.onnx").is_file()


def test_precision_widget_shows_errors():
    from onnx_lab.widgets import PrecisionDoctor

    wdg = PrecisionDoctor(onnx_lab.open("sample:convnet"), background=False)
    wdg.atol.value, wdg.rtol.value = 0.0, 0.0
    wdg.run()
    assert wdg.result is None and "Loosen" in wdg.status.value
    assert not wdg.run_button.disabled


def test_precision_widget_shows_the_plans_notes():
    from onnx_lab.widgets import PrecisionDoctor

    wdg = PrecisionDoctor(onnx_lab.open(sigmoid_tail()), background=False)
    wdg.target.value, wdg.metric.value, wdg.threshold.value = "int8", "sqnr", 20.0
    wdg.run()
    assert wdg.result is not None and wdg.result.notes
    assert "note: output &#x27;prob&#x27; barely varies" in wdg.verdict.value


@pytest.mark.slow  # a whole precision search
def test_precision_bar_is_not_full_before_the_search_ends():
    """The bar follows the search's trials: value < max at every report before the end (a
    search longer than its first estimate re-estimates), full once it has ended."""
    from onnx_lab.widgets import PrecisionDoctor

    wdg = PrecisionDoctor(onnx_lab.open(rms_overflow()), background=False)
    seen: list[tuple[int, int, int]] = []  # (value, max, trials so far) at every report
    hook = wdg._on_progress

    def recording(done, total, label):
        hook(done, total, label)
        seen.append((wdg.progress.value, wdg.progress.max, done))

    wdg._on_progress = recording
    wdg.run()
    plan = wdg.result
    assert plan is not None and plan.passed and len(plan.trials) > 3
    *during, last = seen
    assert during and all(v < m for v, m, _ in during), during
    assert last[0] == last[1] == last[2] == len(plan.trials) + 1  # + the layerwise capture
    assert wdg.progress.value == wdg.progress.max and "done:" in wdg.progress_label.value


def test_search_progress_stays_ahead_of_its_trials_past_the_first_estimate():
    """A small first estimate (recheck=0, max_trials=2): the search re-estimates instead of
    reporting done >= total while trials remain."""
    calls: list[tuple[int, int]] = []
    plan = onnx_lab.open(rms_overflow()).find_precision(
        "fp16", recheck=0, max_trials=2, progress=lambda d, t, _label: calls.append((d, t)))
    *during, last = calls
    assert all(d < t for d, t in during), calls
    assert last[0] == last[1] and plan.passed


def test_no_progress_bar_before_a_search_or_after_one_that_failed():
    # The widget opened with an empty progress bar (at 0, no label) on a row of its own at
    # 1280 px, as if a search were under way; after a failed search it stayed half full.
    from onnx_lab.widgets import PrecisionDoctor

    wdg = PrecisionDoctor(onnx_lab.open(rms_overflow()), background=False)
    assert wdg.progress.layout.display == "none"
    wdg.feeds.value = "missing.npz"  # the search fails at once: InputError in the widget
    wdg.run()
    assert wdg.error is not None and wdg.progress.layout.display == "none"
    assert wdg.progress_label.value == ""
    wdg.feeds.value = ""
    wdg.run()
    assert wdg.result is not None and wdg.progress.layout.display != "none"
    assert wdg.progress.value == wdg.progress.max and "done:" in wdg.progress_label.value
