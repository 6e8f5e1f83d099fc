"""Widgets in a notebook of one's own survive a page reload and a kernel restart.

A notebook the test writes holds three widgets on the YOLO-like detector of ``_models.py``
(Explorer on its Nodes table, DriftDebugger after a run, FusionLab). It is run and saved
(Ctrl+S) in JupyterLab with *Save Widget State Automatically* on, as ``make lab`` sets it:

- the saved file's widget state stays small (a bounded number of widget models and bytes:
  each table is one model, not a widget per row);
- a page reload with the kernel running reattaches every widget live (its kernel answers the
  widget's ping; a click on the Nodes table's next page still pages), and saving again keeps
  the widget state (it is not wiped);
- after a kernel restart and a reload each widget shows its last view from the saved state
  with the note to re-run the cell, and never "Error displaying widget: model not found".

Screenshots go to ``test-artifacts/reload_*.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx, onnx_lab, _models\n"
    "from onnx_lab.widgets import Explorer, FusionLab, DriftDebugger\n"
    "onnx.save(_models.detector(), 'det.onnx')\n"
    "lab = onnx_lab.open('det.onnx', dims={'height': 64, 'width': 64})",
    "ex = Explorer(lab, tab='Nodes')\nex",
    "dd = DriftDebugger(lab, lab)\ndd.run()\ndd",
    "fl = FusionLab(lab)\nfl",
]
WIDGETS = 3
MAX_MODELS = 600  # for three widgets; a widget per table row made thousands
MAX_STATE_BYTES = 3_000_000
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _saved_state(path: Path) -> tuple[dict, list[str]]:
    """(widget state models, model ids the outputs show) of the notebook on disk."""
    nb = json.loads(path.read_text())
    state = ((nb.get("metadata", {}).get("widgets") or {}).get(WIDGET_STATE) or {})
    views = [o["data"][WIDGET_VIEW]["model_id"] for c in nb["cells"]
             for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    return state.get("state", {}) or {}, views


def _save(page, path: Path, since: float) -> None:
    page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    for _ in range(40):
        page.wait_for_timeout(250)
        if path.stat().st_mtime > since:
            break
    page.wait_for_timeout(500)


def _check_state(path: Path) -> int:
    models, views = _saved_state(path)
    size = len(json.dumps(models))
    assert len(views) == WIDGETS
    assert all(v in models for v in views), "an output's widget model is not in the saved state"
    assert 0 < len(models) <= MAX_MODELS, f"{len(models)} widget models saved"
    assert size <= MAX_STATE_BYTES, f"widget state is {size} bytes"
    return len(models)


def _live_notes(page) -> list[str]:
    return page.eval_on_selector_all(".jp-Notebook .oll-live", "els => els.map(e => "
                                     "(e.dataset.live || '') + ':' + e.textContent)")


def test_widgets_reattach_after_reload_and_show_last_view_after_restart(tmp_path):
    with lab_in_browser(tmp_path, {"own.ipynb": CELLS}, models=True, width=1280) as (url, page):
        nb_path = tmp_path / "root" / "own.ipynb"
        try:
            run_all_cells(page, url, "own.ipynb", timeout_ms=180_000)
            cells = page.locator(".jp-Notebook .jp-Cell")
            for i in range(1, WIDGETS + 1):
                cells.nth(i).locator(".onnx-lab-widget").first.wait_for(timeout=180_000)
            page.locator(".onnx-lab-drift .onnx-lab-verdict").wait_for(timeout=180_000)
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .oll-live[data-live=\"1\"]')"
                f".length >= {WIDGETS}", timeout=60_000)
            _save(page, nb_path, nb_path.stat().st_mtime)
            first = _check_state(nb_path)

            # Reload with the kernel running: live again, and the tables still page.
            page.reload(timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .oll-live[data-live=\"1\"]')"
                f".length >= {WIDGETS}", timeout=120_000)
            text = page.locator(".jp-Notebook").inner_text()
            assert "model not found" not in text and "Loading widget" not in text
            nodes = page.locator(".onnx-lab-explorer .olt-root").first
            pos = nodes.locator(".olt-pos").inner_text()
            nodes.locator("button.olt-next").click()
            page.wait_for_function(
                "p => document.querySelector('.onnx-lab-explorer .olt-pos').textContent !== p",
                arg=pos, timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "reload_live.png"))
            # The next save keeps the widgets' state (it used to save 0 models).
            _save(page, nb_path, nb_path.stat().st_mtime)
            again = _check_state(nb_path)
            assert again <= first + 20

            # Restart the kernel, reload: the last views, each with the re-run note.
            page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
            page.locator("li.lm-Menu-item", has_text="Restart Kernel").first.click()
            accept = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
            accept.first.wait_for(timeout=10_000)
            accept.first.click()
            page.wait_for_timeout(2000)
            page.goto(f"{url}/lab/tree/own.ipynb", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .oll-live[data-live=\"0\"]')"
                f".length >= {WIDGETS}", timeout=60_000)
            notes = _live_notes(page)
            assert len([n for n in notes if n.startswith("0:") and "re-run the cell" in n]) \
                == WIDGETS, notes
            text = page.locator(".jp-Notebook").inner_text()
            assert "model not found" not in text
            cells = page.locator(".jp-Notebook .jp-Cell")
            # The last views: the Nodes table's rows, the drift verdict, the fusion matches.
            assert cells.nth(1).locator(".olt-row").count() > 1
            assert cells.nth(2).locator(".onnx-lab-verdict").count() == 1
            assert cells.nth(3).locator(".onnx-lab-matches .olt-row").count() > 1
            page.screenshot(path=str(ARTIFACTS / "reload_after_restart.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "reload_page.png"))
