"""The Explorer's first view (Summary) keeps its columns apart, in JupyterLab + headless
Chromium.

On light ResNet-50 and a TorchScript BERT the summary's tables had no cell padding: the
inputs/outputs read "attention_mask int64", "float32 [1, 16, 32]" and the header "kind name
dtype shape" with a 2-4 px gap, and "Dynamic dims" touched its value. Each column now starts
at least 8 px after the widest text of the one before. The screenshot goes to
``test-artifacts/summary_spacing.png``.
"""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells

pytestmark = pytest.mark.browser

CELLS = ["import onnx_lab\nfrom onnx_lab.widgets import Explorer\n"
         "lab = onnx_lab.open('sample:transformer_block', dims={'batch': 1, 'seq': 8})\n"
         "Explorer(lab)"]

# For each table of the summary: the smallest gap between the text of a cell and the start of
# the next cell's text in its row (a Range measures the text itself, not the cell).
GAPS = """() => {
  const gaps = [];
  for (const t of document.querySelectorAll('.onnx-lab-summary table')) {
    let least = Infinity;
    for (const tr of t.rows) {
      const cells = [...tr.cells];
      for (let i = 0; i + 1 < cells.length; i++) {
        const a = document.createRange(), b = document.createRange();
        a.selectNodeContents(cells[i]); b.selectNodeContents(cells[i + 1]);
        const ra = a.getBoundingClientRect(), rb = b.getBoundingClientRect();
        if (ra.width && rb.width) least = Math.min(least, rb.left - ra.right);
      }
    }
    gaps.push(least);
  }
  return gaps;
}"""


def test_summary_columns_are_apart(tmp_path):
    with lab_in_browser(tmp_path, {"summary.ipynb": CELLS}) as (url, page):
        run_all_cells(page, url, "summary.ipynb")
        page.locator(".onnx-lab-summary table").nth(1).wait_for(timeout=120_000)
        page.wait_for_timeout(500)
        gaps = page.evaluate(GAPS)
        page.locator(".onnx-lab-summary").first.screenshot(
            path=str(ARTIFACTS / "summary_spacing.png"))
        assert len(gaps) == 2 and min(gaps) >= 8, gaps
