"""DiffView in a real JupyterLab (headless Chromium): sample:bert_block before and after
onnxruntime's transformer fusions; a click on the fused Attention (right) selects and outlines
the nodes it replaced (left). Screenshot: ``test-artifacts/diff_view_browser.png``."""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import DiffView\n"
    "before = onnx_lab.open('sample:bert_block', dims={'batch': 1, 'seq': 8})\n"
    "after = onnx_lab.open('sample:bert_block', dims={'batch': 1, 'seq': 8})\n"
    "after.apply('ort_transformers', model_type='bert')",
    "dv = DiffView(before, after)\ndv",
]


def test_diff_view_links_attention_to_its_originals(tmp_path):
    with lab_in_browser(tmp_path, {"diff.ipynb": CELLS}) as (url, page):
        try:
            run_all_cells(page, url, "diff.ipynb")
            widget = page.locator(".onnx-lab-diff-view")
            widget.wait_for(timeout=120_000)
            canvases = widget.locator(".olc-root")
            canvases.nth(1).locator("svg g.node").first.wait_for(timeout=60_000)
            left, right = canvases.nth(0), canvases.nth(1)
            node = right.locator("g.node[id='n:Attention_0']")
            node.scroll_into_view_if_needed()
            node.click()
            page.wait_for_function(
                "() => document.querySelectorAll('.onnx-lab-diff-view .olc-root')[0]"
                ".querySelectorAll('g.node.olc-hit').length >= 5", timeout=60_000)
            assert left.evaluate("e => e.dataset.selected")
            panel = right.locator(".olc-panel").inner_text()
            assert "Attention" in panel and "replaced" in panel
            assert page.locator(".onnx-lab-error").count() == 0
        finally:
            page.screenshot(path=str(ARTIFACTS / "diff_view_browser.png"), full_page=True)
