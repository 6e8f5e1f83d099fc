"""The canvas's view port is never scrolled: find in page, ``scrollIntoView`` or a focused
element inside scroll even an ``overflow: hidden`` box, which put the drawing off by that much
for good (after a click on a box at the port's edge of a 24-layer Llama overview, *fit*
showed an empty canvas). The port clips (``overflow: clip``): a scroll does nothing."""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells

pytestmark = pytest.mark.browser

CELLS = ["import onnx_lab\nfrom onnx_lab.widgets import Explorer\n"
         "ex = Explorer(onnx_lab.open('sample:convnet'), tab='Graph')\nex"]


def test_the_port_never_scrolls_and_fit_shows_the_drawing(tmp_path):
    with lab_in_browser(tmp_path, {"scroll.ipynb": CELLS}, width=1280, height=800) as (url, page):
        run_all_cells(page, url, "scroll.ipynb")
        root = page.locator(".olc-root").first
        root.locator("svg g.node").first.wait_for(timeout=120_000)
        root.scroll_into_view_if_needed()
        for _ in range(5):  # a drawing larger than the port: there is something to scroll to
            root.locator(".olc-zoom-in").click()
        page.wait_for_timeout(500)
        def offset():  # the drawing's place in the port (the page itself may scroll)
            svg, port = (root.locator(s).first.bounding_box() for s in ("svg", ".olc-port"))
            return svg["x"] - port["x"], svg["y"] - port["y"]
        before = offset()
        # what find in page or a click's scrollIntoView does to bring a label into view
        page.evaluate("() => { const p = document.querySelector('.olc-port');"
                      " p.scrollLeft = 300; p.scrollTop = 40;"
                      " const n = p.querySelectorAll('g.node'); n[n.length - 1].scrollIntoView(); }")
        page.wait_for_timeout(500)
        assert page.evaluate("() => { const p = document.querySelector('.olc-port');"
                             " return [p.scrollLeft, p.scrollTop]; }") == [0, 0]
        after = offset()
        assert abs(after[0] - before[0]) < 1 and abs(after[1] - before[1]) < 1
        root.locator(".olc-fit").click()
        page.wait_for_timeout(500)
        svg = root.locator("svg").first.bounding_box()
        port = root.locator(".olc-port").bounding_box()
        root.screenshot(path=str(ARTIFACTS / "canvas_scrolled_port_fit.png"))
        assert svg["x"] >= port["x"] - 1 and svg["x"] + svg["width"] <= port["x"] + port["width"] + 1
