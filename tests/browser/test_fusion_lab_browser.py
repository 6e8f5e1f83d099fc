"""FusionLab in a real JupyterLab, driven in Debian's headless Chromium.

Runs all cells of a notebook showing ``FusionLab(lab)`` on ``sample:convnet``, ticks a Conv+BN
match, clicks Apply and checks that a verified history row with fewer nodes appears. The
screenshot is saved as ``test-artifacts/fusion_lab_browser.png``.
"""

from __future__ import annotations

import re

import pytest
from _jupyter import (
    ARTIFACTS,
    chromium_page,
    jupyter_lab,
    require_chromium,
    run_all_cells,
    write_notebook,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import FusionLab\n"
    "lab = onnx_lab.open('sample:convnet')",
    "fl = FusionLab(lab)\nfl",
]


def test_fusion_lab_apply_in_jupyterlab(tmp_path):
    require_chromium()
    root = tmp_path / "root"
    root.mkdir()
    write_notebook(root / "fusion_lab.ipynb", CELLS)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "fusion_lab_browser.png"
    with jupyter_lab(root, tmp_path) as url, chromium_page(tmp_path / "profile") as page:
        try:
            run_all_cells(page, url, "fusion_lab.ipynb")
            page.wait_for_selector(".onnx-lab-fusion-lab .onnx-lab-matches", timeout=90_000)
            history = page.locator(".onnx-lab-history")
            history.wait_for(timeout=30_000)
            assert history.locator("tr.onnx-lab-history-row").count() == 1  # step 0 only

            # Tick the first Conv+BN match (pattern conv_bn or conv_bn_relu).
            row = page.locator(".onnx-lab-matches .widget-hbox").filter(
                has_text=re.compile(r"conv_bn")).first
            row.locator("input[type=checkbox]").check()
            page.locator("button.onnx-lab-apply").click()

            step1 = page.locator(".onnx-lab-history tr.onnx-lab-history-row[data-step='1']")
            step1.wait_for(timeout=90_000)
            assert "fuse_conv_bn" in step1.inner_text()
            assert step1.locator(".onnx-lab-badge").inner_text().strip() == "passed"
            nodes = step1.locator(".onnx-lab-nodes")
            before = int(nodes.get_attribute("data-before"))
            after = int(nodes.get_attribute("data-after"))
            assert after < before
            assert page.locator(".onnx-lab-error").count() == 0
            step1.scroll_into_view_if_needed()
        finally:
            page.screenshot(path=str(shot), full_page=True)
