"""Where a fused node came from in the PyTorch code, in a real JupyterLab (headless Chromium).

A two-layer decoder written in plain torch (``tests/models.py``) is exported with torch.onnx's
dynamo exporter; the notebook applies onnxscript's fusions (the attention of each layer
becomes one ``MultiHeadAttention``) and shows the Explorer's graph. The test searches the fused
node, clicks it and checks that the side panel names its module (breadcrumbs ``layers.0 ›
attn``), its class and the lines of ``models.py`` it came from; then searches a module path
(``layers.1.mlp.up``) and follows a breadcrumb, which redraws the graph with that module open
among the boxes of its level. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import Explorer\n"
    "lab = onnx_lab.open('decoder.onnx')\nr = lab.apply('onnxscript_rewrite')\nr",
    "ex = Explorer(lab, tab='Graph')\nex",
]


def test_click_a_fused_attention_and_see_its_modules_and_lines(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    import onnx
    from models import decoder_export

    proto = onnx.load(decoder_export(tmp_path / "export"))
    with lab_in_browser(tmp_path, {"source.ipynb": CELLS},
                        files={"decoder.onnx": proto}) as (url, page):
        try:
            run_all_cells(page, url, "source.ipynb")
            root = page.locator(".olc-root").first
            root.wait_for(timeout=120_000)
            root.locator("svg g.node").first.wait_for(timeout=60_000)
            root.scroll_into_view_if_needed()
            search = root.locator(".olc-search")
            search.fill("MultiHeadAttention")
            search.press("Enter")
            key = root.get_attribute("data-selected")
            assert key and not key.startswith("scope:"), key
            root.locator(f"svg g.node[id='n:{key}']").click()
            panel = root.locator(".olc-panel")
            panel.locator(".olc-source").wait_for(timeout=30_000)
            text = panel.locator(".olc-source").inner_text()
            assert "layers.0" in text and "attn" in text, text
            assert "Attention" in text  # the module's class
            assert "models.py:" in text and "came from" in text, text
            crumbs = panel.locator(".olc-crumb")
            assert crumbs.all_inner_texts() == ["layers.0", "attn"]
            root.screenshot(path=str(ARTIFACTS / "source_fused_attention.png"))

            # Search by module path finds the node of that module.
            search.fill("layers.1.mlp.up")
            search.press("Enter")
            up = root.get_attribute("data-selected")
            assert up and up != key
            panel.locator(".olc-source", has_text="layers.1.mlp.up").wait_for(timeout=30_000)

            # A breadcrumb shows its module: layers.1 opens among the boxes of its level.
            rendered = int(root.get_attribute("data-rendered"))
            panel.locator(".olc-crumb", has_text="layers.1").first.click()
            page.wait_for_function(
                f"() => +document.querySelector('.olc-root').dataset.rendered > {rendered}",
                timeout=60_000)
            root.locator("svg g.node[id='n:scope:/layers.0']").wait_for(timeout=30_000)
            root.screenshot(path=str(ARTIFACTS / "source_module_open.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "source_page.png"))
