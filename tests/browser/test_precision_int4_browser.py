"""The PrecisionDoctor's int4 target in a real JupyterLab (headless Chromium): on
``sample:tiny_llm`` with a planted outlier row in layer 1's MLP (tests/numerics/int4_models.py),
the weight-only search is run from the page. Checks: the target switches the tolerance fields to
top-1/KL, the search ends with a plan that keeps layer 1's gate/up MatMuls, the trials (accuracy
beside tokens/s) and the kept nodes' costs are shown, no error. The widget is saved to
``test-artifacts/precision_int4_browser.png``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import PrecisionDoctor\n"
    "lab = onnx_lab.open('tiny_llm_outlier.onnx')",
    "doc = PrecisionDoctor(lab)\ndoc",
]


def _planted():
    path = Path(__file__).resolve().parents[1] / "numerics" / "int4_models.py"
    spec = importlib.util.spec_from_file_location("_llm_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.plant_outlier(mod.tiny_llm())


def test_precision_doctor_int4_search_in_jupyterlab(tmp_path):
    with lab_in_browser(tmp_path, {"int4.ipynb": CELLS},
                        files={"tiny_llm_outlier.onnx": _planted()}, height=2400) as (url, page):
        try:
            run_all_cells(page, url, "int4.ipynb")
            doc = page.locator(".onnx-lab-precision")
            doc.wait_for(timeout=120_000)
            doc.locator("select").first.select_option("int4")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-precision label')]"
                ".some(e => e.innerText.includes('max KL') && e.offsetParent !== null)",
                timeout=30_000)
            doc.locator("button", has_text="Find").first.click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-precision')]"
                ".some(e => e.innerText.includes('the plan meets'))", timeout=180_000)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-precision')]"
                ".some(e => e.innerText.includes('what each kept node costs'))",
                timeout=60_000)
            text = doc.inner_text()
            assert "kept out of 4 bits" in text and "does NOT meet" not in text
            kept_line = next(line for line in text.splitlines() if line.startswith("kept:"))
            assert "/model/layers.1/mlp/" in kept_line, kept_line
            assert "tokens_per_s" in text and doc.locator(".onnx-lab-error").count() == 0
            assert doc.locator("img").count() >= 2  # the ranking and the trials charts
        finally:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            doc = page.locator(".onnx-lab-precision")
            if doc.count():
                doc.first.screenshot(path=str(ARTIFACTS / "precision_int4_browser.png"))
