"""A double-click on the graph canvas selects no text, in JupyterLab + headless Chromium.

A double-click is how a body is opened (the Explorer) or asked for (the Editor, which
explains where bodies are drawn); it also selected the word under the pointer in the SVG:
the Editor on ``sample:control_flow`` showed the If's label "two 2" with "2" highlighted in
blue. The screenshot goes to ``test-artifacts/canvas_dblclick_no_selection.png``.
"""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells, select_by_search

pytestmark = pytest.mark.browser

CELLS = ["import onnx_lab\nlab = onnx_lab.open('sample:control_flow')\ned = lab.edit()\ned"]


def test_double_click_on_a_node_selects_no_text(tmp_path):
    with lab_in_browser(tmp_path, {"dbl.ipynb": CELLS}) as (url, page):
        run_all_cells(page, url, "dbl.ipynb")
        root = page.locator(".olc-root").first
        key = select_by_search(root, "If_2")
        texts = root.locator(f"svg g.node[id='n:{key}'] text")
        texts.nth(texts.count() - 2).dblclick()  # a line of the label ("else_branch: ...")
        # the Editor answers the double-click: it draws the main graph, bodies are drawn in
        # the Explorer
        page.locator(".onnx-lab-ed-message", has_text="body").wait_for(timeout=30_000)
        selected = page.evaluate("() => String(window.getSelection())")
        root.screenshot(path=str(ARTIFACTS / "canvas_dblclick_no_selection.png"))
        assert selected == "", selected
