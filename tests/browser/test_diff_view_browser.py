"""DiffView in a real JupyterLab (headless Chromium): sample:bert_block before and after
onnxruntime's transformer fusions.

- a click on the fused Attention (right) selects and outlines the nodes it replaced (left),
  and the right canvas keeps showing its graph (the clicked node stays in view);
- "sync pan and zoom" moves the other canvas, both ways (a wheel zoom on the left zooms the
  right by the same factor; a drag on the right pans the left), and not when unticked;
- the tables' rows are one line each (no 240 px tall rows);
- each side's title ("A: d.render('a', ...)") shows whole, and in a 700 px window the sides stack.

Screenshot: ``test-artifacts/diff_view_browser.png``.
"""

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

_IN_VIEW = """(root) => {
  const port = root.querySelector('.olc-port').getBoundingClientRect();
  let n = 0;
  for (const g of root.querySelectorAll('svg g.node')) {
    const r = g.getBoundingClientRect();
    if (r.right > port.left && r.left < port.right && r.bottom > port.top && r.top < port.bottom)
      n += 1;
  }
  return n;
}"""


def _titles(widget) -> list[str]:
    """The canvases' titles shown whole (JS measure)."""
    return widget.evaluate("""w => [...w.querySelectorAll('.olc-title-text')]
      .filter(t => t.clientWidth > 0 && t.scrollWidth <= t.clientWidth + 1)
      .map(t => t.textContent)""")


def _k(canvas) -> float:
    return float(canvas.get_attribute("data-k") or "0")


def _wait_k_change(page, index: int, before: float, timeout: int = 30_000) -> None:
    page.wait_for_function(
        "([i, k]) => Math.abs(parseFloat(document.querySelectorAll("
        "'.onnx-lab-diff-view .olc-root')[i].dataset.k) - k) > 1e-3",
        arg=[index, before], timeout=timeout)


def test_diff_view_click_sync_and_rows(tmp_path):
    with lab_in_browser(tmp_path, {"diff.ipynb": CELLS}) as (url, page):
        try:
            run_all_cells(page, url, "diff.ipynb")
            widget = page.locator(".onnx-lab-diff-view")
            widget.wait_for(timeout=120_000)
            canvases = widget.locator(".olc-root")
            canvases.nth(1).locator("svg g.node").first.wait_for(timeout=60_000)
            left, right = canvases.nth(0), canvases.nth(1)
            page.wait_for_timeout(1500)  # the initial fits reach the kernel

            # Compact rows in the "nodes that differ" table.
            heights = widget.locator(".olt-body table.onnx-lab-table tr").evaluate_all(
                "rows => rows.map(r => r.getBoundingClientRect().height)")
            assert heights and max(heights) < 40, heights
            # Both canvases start at one height whatever notes one side shows (a note on one
            # side pushed its canvas below the other's): the left legend hidden as the page
            # hides an empty one, its canvas stays level with the right's.
            page.evaluate("() => { document.querySelectorAll('.onnx-lab-diff-view "
                          ".olc-legend')[0].style.display = 'none'; }")
            tops = [c.locator(".olc-port").bounding_box()["y"] for c in (left, right)]
            assert abs(tops[0] - tops[1]) < 2, tops

            # A click on the right: its counterparts outlined left, the right still drawn.
            node = right.locator("g.node[id='n:Attention_0']")
            node.scroll_into_view_if_needed()
            node.click()
            page.wait_for_function(
                "() => document.querySelectorAll('.onnx-lab-diff-view .olc-root')[0]"
                ".querySelectorAll('g.node.olc-hit').length >= 5", timeout=60_000)
            assert left.evaluate("e => e.dataset.selected")
            panel = right.locator(".olc-panel").inner_text()
            assert "Attention" in panel and "replaced" in panel
            page.wait_for_timeout(2500)  # the left's centring has come and gone
            assert right.evaluate(_IN_VIEW) > 0
            box, port = node.bounding_box(), right.locator(".olc-port").bounding_box()
            assert port["x"] <= box["x"] + box["width"] / 2 <= port["x"] + port["width"]
            assert port["y"] <= box["y"] + box["height"] / 2 <= port["y"] + port["height"]

            # Sync: a wheel zoom on the left zooms the right by the same factor.
            lk, rk = _k(left), _k(right)
            lp = left.locator(".olc-port")
            lp.hover()
            page.mouse.wheel(0, -300)
            _wait_k_change(page, 1, rk)
            page.wait_for_timeout(800)
            assert _k(right) / rk == pytest.approx(_k(left) / lk, rel=0.05)
            assert right.evaluate(_IN_VIEW) > 0
            # ... and a drag on the right pans the left.
            lx = float(left.get_attribute("data-x"))
            rb = right.locator(".olc-port").bounding_box()
            page.mouse.move(rb["x"] + 40, rb["y"] + rb["height"] - 40)
            page.mouse.down()
            page.mouse.move(rb["x"] + 140, rb["y"] + rb["height"] - 40, steps=5)
            page.mouse.up()
            page.wait_for_function(
                "x => Math.abs(parseFloat(document.querySelectorAll("
                "'.onnx-lab-diff-view .olc-root')[0].dataset.x) - x) > 50",
                arg=lx, timeout=30_000)
            # Unticked: no sync.
            widget.locator("label", has_text="sync pan and zoom").locator("input").uncheck()
            page.wait_for_timeout(500)
            rk = _k(right)
            lp.hover()
            page.mouse.wheel(0, -300)
            page.wait_for_timeout(1500)
            assert _k(right) == pytest.approx(rk)
            assert page.locator(".onnx-lab-error").count() == 0
            # Each side's title whole at 1,400 px and in a 700 px window, where the sides
            # stack (side by side, ~290 px each, the titles were left out and the drawing cut).
            assert _titles(widget) == ["A: d.render('a', collapse='auto')",
                                       "B: d.render('b', collapse='auto')"]
            page.set_viewport_size({"width": 700, "height": 1000})
            page.keyboard.press("Control+b")  # the file browser away: the notebook alone
            page.wait_for_timeout(1500)
            assert len(_titles(widget)) == 2
            lb, rb = (c.locator(".olc-port").bounding_box() for c in (left, right))
            assert rb["y"] >= lb["y"] + lb["height"] and rb["width"] > 500
        finally:
            page.screenshot(path=str(ARTIFACTS / "diff_view_browser.png"), full_page=True)
