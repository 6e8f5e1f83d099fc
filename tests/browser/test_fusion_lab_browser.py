"""The widgets and rich displays in a real JupyterLab, driven in Debian's headless Chromium.

One JupyterLab server and one browser serve the module. The FusionLab test runs all cells of a
notebook showing ``FusionLab(lab)`` on ``sample:convnet``, ticks a Conv+BN match, clicks Apply and
checks that a verified history row with fewer nodes appears. Screenshots are saved under
``test-artifacts/``.
"""

from __future__ import annotations

import re

import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

pytestmark = pytest.mark.browser

FUSION_CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import FusionLab\n"
    "lab = onnx_lab.open('sample:convnet')",
    "fl = FusionLab(lab)\nfl",
]
DISPLAY_CELLS = [
    "import onnx_lab\nlab = onnx_lab.open('sample:convnet')\nlab",
    "lab.summary()",
    "lab.render(around=['/stem/conv/Conv'], radius=1)",
    "onnx_lab.compare(lab, lab)",
    "onnx_lab.profile(lab, runs=3, warmup=1)",
]


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory):
    """(base url, Playwright page) of a JupyterLab serving a temporary folder of notebooks."""
    work = tmp_path_factory.mktemp("jupyterlab")
    with lab_in_browser(work, {"fusion_lab.ipynb": FUSION_CELLS,
                               "displays.ipynb": DISPLAY_CELLS}) as (url, page):
        yield url, page


def test_fusion_lab_apply_in_jupyterlab(lab_page):
    url, page = lab_page
    try:
        run_all_cells(page, url, "fusion_lab.ipynb")
        page.wait_for_selector(".onnx-lab-fusion-lab .onnx-lab-matches", timeout=90_000)
        history = page.locator(".onnx-lab-history")
        history.wait_for(timeout=30_000)
        assert history.locator("tr.onnx-lab-history-row").count() == 1  # step 0 only
        # Nothing ticked: Apply is disabled and looks it (it stayed bright blue, pointer cursor)
        apply = page.locator("button.onnx-lab-apply")
        look = apply.evaluate("b => [b.disabled, getComputedStyle(b).opacity, "
                              "getComputedStyle(b).cursor]")
        assert look[0] is True and float(look[1]) < 0.5 and look[2] == "not-allowed", look

        # Tick the first Conv+BN match (pattern conv_bn or conv_bn_relu).
        row = page.locator(".onnx-lab-matches .olt-row").filter(
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
        # The explanation panel renders the markdown with its math.
        assert "BatchNormalization" in page.locator(".onnx-lab-fusion-lab").inner_text()
    finally:
        page.screenshot(path=str(ARTIFACTS / "fusion_lab_browser.png"))


def test_rich_displays_in_jupyterlab(lab_page):
    url, page = lab_page
    try:
        run_all_cells(page, url, "displays.ipynb")
        # The last cell (profiling) finishes last: its HTML means every cell has run.
        page.get_by_text("onnx_lab Profile").first.wait_for(timeout=90_000)
        outputs = page.locator(".jp-OutputArea-output")
        text = page.locator(".jp-Notebook").inner_text()
        assert "onnx_lab.Lab" in text  # Lab._repr_html_
        assert page.locator(".onnx-lab-summary").count() >= 2  # Lab and Summary
        assert outputs.locator("svg").count() >= 1  # Rendering (SVG from dot)
        assert page.locator(".onnx-lab-compare").count() == 1 and "PASSED" in text
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                            ).filter(has_text="Traceback").count() == 0
    finally:
        page.screenshot(path=str(ARTIFACTS / "rich_displays_browser.png"))
