"""The PrecisionDoctor in a real JupyterLab (headless Chromium): the fp16 search is run from the
page on a model whose RMS norm, built from primitive ops, overflows float16 (the model of
``notebooks/06_precision.ipynb``). Checks: the search finishes with a verdict that the plan meets
the tolerance, the kept nodes are listed and outlined on the graph canvas, the sensitivity chart
and the before/after error per output are shown, no error. The page is saved to
``test-artifacts/precision_browser.png`` (the widget alone to ``precision_browser_widget.png``)
and the seconds from the click to the verdict to
``test-artifacts/precision_browser.json`` (a figure, not an assertion).
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import onnx
import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

from onnx_lab.widgets.precision import KEPT_OUTLINE

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import PrecisionDoctor\n"
    "lab = onnx_lab.open('rms_overflow.onnx')",
    "doc = PrecisionDoctor(lab)\ndoc",
]
# The overflowing norm (tests/numerics/test_precision.py): these nodes must stay in float32.
NORM_NODES = {"/norm/Pow", "/norm/Reshape", "/norm/ReduceMean", "/norm/Expand", "/norm/Add"}


def _rms_overflow() -> onnx.ModelProto:
    path = Path(__file__).resolve().parents[1] / "numerics" / "test_precision.py"
    spec = importlib.util.spec_from_file_location("_numerics_test_precision", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.rms_overflow()


def test_precision_doctor_fp16_search_in_jupyterlab(tmp_path):
    seconds: dict[str, float] = {}
    # A tall window: the whole widget (controls, verdict, chart, table, graph) in one shot.
    with lab_in_browser(tmp_path, {"precision.ipynb": CELLS},
                        files={"rms_overflow.onnx": _rms_overflow()}, height=2100) as (url, page):
        try:
            run_all_cells(page, url, "precision.ipynb")
            doc = page.locator(".onnx-lab-precision")
            doc.wait_for(timeout=120_000)
            # Before the search: no canvas (it stays hidden until there is a plan to show).
            assert doc.locator(".olc-root svg g.node").count() == 0

            find = doc.locator("button", has_text="Find").first
            t0 = time.perf_counter()
            find.click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-precision')]"
                ".some(e => e.innerText.includes('the plan meets'))", timeout=120_000)
            seconds["fp16_search"] = time.perf_counter() - t0
            page.wait_for_function("b => !b.disabled", arg=find.element_handle(),
                                   timeout=30_000)
            text = doc.inner_text()
            assert "kept in float32" in text and "does NOT meet" not in text
            kept_line = next(line for line in text.splitlines() if line.startswith("kept:"))
            assert all(n in kept_line for n in NORM_NODES), kept_line
            assert doc.locator(".onnx-lab-error").count() == 0

            # The sensitivity chart and the per-output error table, before vs after.
            assert doc.locator("img").count() >= 1
            table = doc.locator("table", has_text="score_after").first
            assert "passed_before" in table.inner_text()

            # Why everything converted fails, though the CPU run alone would pass it.
            assert "everything converted fails: fp16 overflow" in text

            # The graph canvas around the kept nodes: each drawn, outlined in the widget's
            # colour and marked as a hit by the canvas.
            canvas = doc.locator(".olc-root").first
            canvas.locator("svg g.node").first.wait_for(timeout=60_000)
            page.wait_for_timeout(500)
            assert "outside this view" not in canvas.inner_text()
            assert "outlined in green" in canvas.inner_text()
            outlined = canvas.evaluate(
                "(root, colour) => [...root.querySelectorAll('svg g.node')]"
                ".filter(g => [...g.querySelectorAll('path,polygon,ellipse')]"
                ".some(s => (s.getAttribute('stroke') || '').toLowerCase() === colour))"
                ".map(g => g.id)", KEPT_OUTLINE)
            hits = canvas.evaluate("root => [...root.querySelectorAll('svg g.node.olc-hit')]"
                                   ".map(g => g.id)")
            for n in NORM_NODES:
                assert any(n in key for key in outlined), (n, outlined)
                assert any(n in key for key in hits), (n, hits)
            box = canvas.locator(".olc-port").bounding_box()
            assert box and box["width"] > 200 and box["height"] > 150
            doc.screenshot(path=str(ARTIFACTS / "precision_browser_widget.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "precision_browser.png"), full_page=True)
            (ARTIFACTS / "precision_browser.json").write_text(json.dumps(seconds, indent=1))
