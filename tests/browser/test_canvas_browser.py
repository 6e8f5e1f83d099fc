"""The graph canvas in a real JupyterLab (headless Chromium) on real-world-style models.

A YOLOv8-like detector (313 nodes, dynamic height/width) and a BERT-sized encoder (1,399
nodes), both built by ``_models.py``. Checks: the overview shows nodes inside the view after
open (pixels, not blank); zoom and pan change the view; search centres the node; a click on a
node shows its attributes and shapes in the side panel; setting height/width in the run-context
bar lets Profile run; a tick in the DriftDebugger centres the node in an Explorer on the same
Lab. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import io

import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx, onnx_lab, _models\n"
    "from onnx_lab.widgets import Explorer, Profiler, DriftDebugger\n"
    "onnx.save(_models.detector(), 'det.onnx'); onnx.save(_models.bert_like(), 'bert.onnx')",
    "lab = onnx_lab.open('det.onnx')\nex = Explorer(lab, tab='Graph')\nex",
    "bert = onnx_lab.open('bert.onnx', dims={'batch': 1, 'sequence': 16})\n"
    "exb = Explorer(bert, tab='Graph')\nexb",
    "prof = Profiler(lab, runs=2, warmup=1)\nprof",
    "dd = DriftDebugger(lab, lab, dims={'height': 64, 'width': 64})\ndd",
]


@pytest.fixture(scope="module")
def canvas_page(tmp_path_factory):
    work = tmp_path_factory.mktemp("jupyterlab")
    with lab_in_browser(work, {"canvas.ipynb": CELLS}, models=True) as (url, page):
        run_all_cells(page, url, "canvas.ipynb")
        cells = page.locator(".jp-Notebook .jp-Cell")
        # The DriftDebugger is the last widget: when it shows, every cell has run.
        cells.nth(4).locator(".onnx-lab-widget").first.wait_for(timeout=120_000)
        yield page, cells


def _canvas(cells, i):
    root = cells.nth(i).locator(".olc-root").first
    root.wait_for(timeout=60_000)
    root.locator("svg g.node").first.wait_for(timeout=60_000)
    return root


def _ink(png: bytes) -> float:
    """Fraction of pixels that are not (near) white."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    hist = img.histogram()
    return 1.0 - sum(hist[235:]) / max(1, img.width * img.height)


def _centre_offset(page, root, key: str) -> tuple[float, float]:
    port = root.locator(".olc-port").bounding_box()
    g = root.locator(f"svg g.node[id='n:{key}']").bounding_box()
    return (g["x"] + g["width"] / 2 - (port["x"] + port["width"] / 2),
            g["y"] + g["height"] / 2 - (port["y"] + port["height"] / 2))


@pytest.mark.parametrize("cell,name,query", [(1, "detector", "/model.12/Concat"),
                                              (2, "bert", "/encoder/layer.7/attention/self/Softmax")])
def test_overview_zoom_pan_search_click(canvas_page, cell, name, query):
    page, cells = canvas_page
    root = _canvas(cells, cell)
    port = root.locator(".olc-port")
    try:
        root.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        # Fit on open: the drawing lies inside the view and is not blank.
        assert _ink(port.screenshot()) > 0.01
        box = port.bounding_box()
        svg = root.locator(".olc-stage svg").bounding_box()
        assert svg["width"] <= box["width"] + 2
        if root.get_attribute("data-fit") == "whole":
            assert svg["height"] <= box["height"] + 2
        else:  # a long strip opens at a readable scale from its top; the minimap shows all
            assert root.locator(".olc-mini").is_visible()
        page.screenshot(path=str(ARTIFACTS / f"canvas_{name}_overview.png"), full_page=False)
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_overview_port.png"))

        k0 = float(root.get_attribute("data-k"))
        root.locator(".olc-zoom-in").click()
        k1 = float(root.get_attribute("data-k"))
        assert k1 > k0
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.wheel(0, -400)
        page.wait_for_timeout(100)
        k2 = float(root.get_attribute("data-k"))
        assert k2 > k1
        x0 = float(root.get_attribute("data-x"))
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 120, box["y"] + box["height"] / 2 + 40,
                        steps=5)
        page.mouse.up()
        assert abs(float(root.get_attribute("data-x")) - x0 - 120) < 2

        # Search centres the node (or the collapsed box holding it).
        root.locator(".olc-search").fill(query)
        root.locator(".olc-search").press("Enter")
        key = root.get_attribute("data-selected")
        assert key and (key == query or key.startswith("scope:"))
        dx, dy = _centre_offset(page, root, key)
        assert abs(dx) < 3 and abs(dy) < 3
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_search.png"))

        # Click a box: it expands; then click a node: its details show in the side panel.
        rendered = int(root.get_attribute("data-rendered"))
        if key.startswith("scope:"):
            g = root.locator(f"svg g.node[id='{'n:' + key}']")
            g.click()
            page.wait_for_function(
                f"() => +document.querySelectorAll('.olc-root')[{cell - 1}].dataset.rendered"
                f" > {rendered}", timeout=30_000)
            root.locator("svg g.node.onnx-op").first.wait_for(timeout=30_000)
        root.locator(".olc-fit").click()
        op = root.locator("svg g.node.onnx-op").filter(
            has_text="Conv" if name == "detector" else "MatMul").first
        root.locator(".olc-search").fill(op.get_attribute("id")[2:])
        root.locator(".olc-search").press("Enter")
        op.click()
        panel = root.locator(".olc-panel")
        panel.locator(".olc-inputs").wait_for(timeout=30_000)
        text = panel.inner_text()
        assert "inputs" in text and "outputs" in text and "×" in text
        if name == "detector":
            assert "kernel_shape" in text and "weight" in text
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_click.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / f"canvas_{name}_page.png"))


def test_bar_dims_then_profile(canvas_page):
    page, cells = canvas_page
    prof = cells.nth(3).locator(".onnx-lab-profiler")
    try:
        prof.scroll_into_view_if_needed()
        prof.locator("button", has_text="Profile").first.click()
        prof.locator(".onnx-lab-missing").first.wait_for(timeout=30_000)  # bar points at dims
        for dim in ("height", "width"):
            field = prof.locator(f".onnx-lab-dim-{dim} input")
            field.fill("64")
            field.press("Enter")
        prof.locator("button", has_text="Profile").first.click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.onnx-lab-profiler')].some("
            "e => e.innerText.includes('p50'))", timeout=90_000)
        assert prof.locator(".onnx-lab-error").count() == 0
    finally:
        prof.screenshot(path=str(ARTIFACTS / "profiler_bar_browser.png"))


def test_drift_tick_centres_node_in_explorer(canvas_page):
    page, cells = canvas_page
    dd = cells.nth(4).locator(".onnx-lab-widget").first
    root = _canvas(cells, 1)
    try:
        dd.scroll_into_view_if_needed()
        dd.locator("button", has_text="Run").first.click()
        rows = dd.locator(".onnx-lab-layers input.olt-check")
        rows.nth(3).wait_for(timeout=120_000)
        focused = root.get_attribute("data-focused") or "0"
        rows.nth(3).check()
        page.wait_for_function(
            f"() => (document.querySelector('.olc-root').dataset.focused || '0') !== '{focused}'",
            timeout=60_000)
        key = root.get_attribute("data-selected")
        root.scroll_into_view_if_needed()
        dx, dy = _centre_offset(page, root, key)
        assert abs(dx) < 3 and abs(dy) < 3
        root.locator(".olc-port").screenshot(path=str(ARTIFACTS / "canvas_linked_from_drift.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / "drift_link_page.png"))
