"""Every widget in a 1,280 px wide JupyterLab, then a kernel restart and a page reload.

On the YOLO-like detector of ``_models.py``: Explorer (Graph tab), FusionLab, Extractor and
DriftDebugger and Profiler show without overflowing the notebook (anything wider scrolls inside its own
box), and in a ~600 px pane no checkbox label or table is cut; after saving the notebook, restarting the kernel and reloading the page, the saved
notebook shows each widget's last view (widget state saved with the notebook), not "Error
displaying widget: model not found". Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx, onnx_lab, _models\n"
    "from onnx_lab.widgets import Explorer, FusionLab, Extractor, DriftDebugger, Profiler\n"
    "onnx.save(_models.detector(), 'det.onnx')\n"
    "lab = onnx_lab.open('det.onnx', dims={'height': 64, 'width': 64})",
    "ex = Explorer(lab, tab='Graph')\nex",
    "fl = FusionLab(lab)\nfl",
    "xt = Extractor(lab)\nxt",
    "dd = DriftDebugger(lab, lab)\ndd",
    "pr = Profiler(lab)\npr",
]


def _overflows(page) -> list[str]:
    """Widgets whose content reaches past the notebook's output area (JS measure)."""
    return page.evaluate("""() => {
      const bad = [];
      for (const w of document.querySelectorAll('.jp-OutputArea-output .onnx-lab-widget')) {
        const area = w.closest('.jp-OutputArea-output').getBoundingClientRect();
        for (const el of w.querySelectorAll('*')) {
          const r = el.getBoundingClientRect();
          if (!r.width) continue;
          // Inside a box that scrolls on its own: fine.
          let p = el.parentElement, clipped = false;
          while (p && p !== w.parentElement) {
            const o = getComputedStyle(p).overflowX;
            if ((o === 'auto' || o === 'scroll' || o === 'hidden') && p !== el) {
              if (p.getBoundingClientRect().right <= area.right + 1) { clipped = true; break; }
            }
            p = p.parentElement;
          }
          if (!clipped && r.right > area.right + 1) {
            bad.push((el.className || el.tagName) + ' ' + Math.round(r.right) + '>'
                     + Math.round(area.right));
            break;
          }
        }
      }
      return bad;
    }""")


def _cut_in_narrow_pane(page) -> list[str]:
    """Checkbox labels cut short, and tables wider than an HTML box that hides its overflow
    (JS measure)."""
    return page.evaluate("""() => {
      const bad = [];
      for (const l of document.querySelectorAll(
          '.onnx-lab-widget .widget-checkbox label, .onnx-lab-widget .widget-checkbox span')) {
        if (l.offsetParent && l.scrollWidth > l.clientWidth + 1)
          bad.push('checkbox label cut: ' + l.textContent.trim());
      }
      for (const t of document.querySelectorAll('.onnx-lab-widget .widget-html-content table')) {
        const box = t.closest('.widget-html-content');
        if (!t.offsetParent || t.getBoundingClientRect().right <= box.getBoundingClientRect().right + 1)
          continue;
        const o = getComputedStyle(box).overflowX;
        if (o !== 'auto' && o !== 'scroll') bad.push('table cut: ' + (t.className || 'table'));
      }
      return bad;
    }""")


def test_widgets_fit_1280_and_survive_restart(tmp_path_factory):
    work = tmp_path_factory.mktemp("jupyterlab-widgets")
    with lab_in_browser(work, {"widgets.ipynb": CELLS}, models=True, width=1280) as (url, page):
        try:
            run_all_cells(page, url, "widgets.ipynb")
            cells = page.locator(".jp-Notebook .jp-Cell")
            for i in range(1, 6):
                cells.nth(i).locator(".onnx-lab-widget").first.wait_for(timeout=120_000)
            cells.nth(1).locator(".olc-root svg g.node").first.wait_for(timeout=60_000)
            # Work with the widgets so their last view differs from the first: an Extractor
            # preview of a cut and a DriftDebugger run.
            xt = cells.nth(3).locator(".onnx-lab-extractor")
            xt.locator("textarea").nth(1).fill("/model.2/m.0/Add_output_0")
            xt.locator("textarea").nth(1).press("Tab")
            xt.locator("button", has_text="Preview").first.click()
            xt.locator(".onnx-lab-cut-legend").wait_for(timeout=60_000)
            dd = cells.nth(4).locator(".onnx-lab-drift")
            dd.locator("button", has_text="Run").first.click()
            dd.locator(".onnx-lab-verdict").wait_for(timeout=120_000)
            page.wait_for_timeout(500)
            assert _overflows(page) == []
            # The Profiler's hidden progress bar stays on the row of its buttons: at 260 px it
            # wrapped onto a line of its own, an empty row above the dim row.
            pr = cells.nth(5).locator(".onnx-lab-profiler")
            bar = pr.locator(".widget-hprogress").bounding_box()
            profile = pr.locator("button", has_text="Profile").first.bounding_box()
            assert abs(bar["y"] - profile["y"]) < 4
            for i, name in enumerate(["explorer", "fusion_lab", "extractor", "drift"], start=1):
                cells.nth(i).locator(".jp-OutputArea").first.screenshot(
                    path=str(ARTIFACTS / f"widget_{name}_1280.png"))

            # A narrow pane (~600 px of notebook): checkbox labels whole, tables in HTML
            # boxes scroll sideways instead of being cut by ipywidgets' hidden overflow.
            page.set_viewport_size({"width": 700, "height": 1000})
            page.keyboard.press("Control+b")  # the file browser away: the notebook alone
            page.wait_for_timeout(800)
            assert _cut_in_narrow_pane(page) == []
            page.keyboard.press("Control+b")
            page.set_viewport_size({"width": 1280, "height": 1000})

            # Save, restart the kernel, reload the page.
            page.keyboard.press("Control+s")
            page.wait_for_timeout(1500)
            page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
            page.locator("li.lm-Menu-item", has_text="Restart Kernel").first.click()
            accept = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
            accept.first.wait_for(timeout=10_000)
            accept.first.click()
            page.wait_for_timeout(2000)
            page.goto(f"{url}/lab/tree/widgets.ipynb", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            cells = page.locator(".jp-Notebook .jp-Cell")
            for i in range(1, 5):
                cells.nth(i).locator(".onnx-lab-widget, .onnx-lab-snapshot").first.wait_for(
                    timeout=60_000)
            page.wait_for_timeout(1500)
            text = page.locator(".jp-Notebook").inner_text()
            assert "model not found" not in text
            # The last views: the detector's canvas, the Extractor's cut, the drift verdict.
            assert cells.nth(1).locator(".olc-root svg g.node").count() > 0
            assert cells.nth(3).locator(".onnx-lab-cut-legend").count() == 1
            assert cells.nth(4).locator(".onnx-lab-verdict").count() == 1
            cells.nth(1).locator(".jp-OutputArea").first.screenshot(
                path=str(ARTIFACTS / "widget_explorer_after_restart.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "widgets_1280_page.png"), full_page=False)
