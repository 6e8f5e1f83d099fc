"""The Editor in JupyterLab + headless Chromium, driven with the mouse: on sample:convnet
change a BatchNormalization's epsilon, add a graph output, rename the input, undo twice; on
sample:transformer_block delete the MLP's Relu (reconnected), add the attention probabilities
as an output, rename the input, undo twice. Screenshots go to ``test-artifacts/editor_*.png``."""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

BN = "/stem/bn/BatchNormalization"
CELLS = [
    "import onnx_lab\nlab = onnx_lab.open('sample:convnet')\ned = lab.edit()\ned",
]
TRANSFORMER = [
    "import onnx_lab\nlab = onnx_lab.open('sample:transformer_block', "
    "dims={'batch': 1, 'seq': 8})\ned = lab.edit()\ned",
]


def _select(root, key: str) -> None:
    """Click the drawn element ``key`` on the canvas (centred first by the search box)."""
    canvas = root.locator(".olc-root")
    canvas.locator(".olc-search").fill(key)
    canvas.locator(".olc-search").press("Enter")
    canvas.locator(f"svg g.node[id='n:{key}']").click()


def _wait_message(page, root, text: str) -> str:
    msg = root.locator(".onnx-lab-ed-message")
    msg.filter(has_text=text).wait_for(timeout=60_000)
    return msg.inner_text()


def test_editor_edit_undo_in_the_browser(tmp_path_factory):
    work = tmp_path_factory.mktemp("jupyterlab-editor")
    with lab_in_browser(work, {"editor.ipynb": CELLS}, width=1400) as (url, page):
        try:
            run_all_cells(page, url, "editor.ipynb")
            root = page.locator(".onnx-lab-editor").first
            root.locator(".olc-root svg g.node").first.wait_for(timeout=120_000)

            # 1. epsilon of the stem's BatchNormalization
            _select(root, BN)
            root.locator(".onnx-lab-ed-title", has_text=BN).wait_for(timeout=30_000)
            root.locator(".onnx-lab-ed-attribute select").select_option("epsilon")
            field = root.locator(".onnx-lab-ed-attr-value input")
            field.fill("0.001")
            field.press("Tab")
            root.locator(".onnx-lab-ed-set-attr-button").click()
            text = _wait_message(page, root, "set_attribute")
            assert "outputs changed (expected for this edit)" in text
            assert "lab.set_attribute(" in root.locator(".onnx-lab-code").inner_text()
            root.screenshot(path=str(ARTIFACTS / "editor_epsilon.png"))

            # 2. the stem's Relu output becomes a graph output
            _select(root, "/stem/relu/Relu")
            root.locator(".onnx-lab-ed-title", has_text="/stem/relu/Relu").wait_for(
                timeout=30_000)
            root.locator(".onnx-lab-ed-add-output-button").click()
            text = _wait_message(page, root, "add_output")
            assert "outputs unchanged (verified" in text
            root.locator("svg g.node[id='n:output:/stem/relu/Relu_output_0']").wait_for(
                timeout=30_000)

            # 3. rename the model input
            _select(root, "input:input")
            root.locator(".onnx-lab-ed-title", has_text="input").wait_for(timeout=30_000)
            name = root.locator(".onnx-lab-ed-tensor-name input")
            name.fill("image")
            name.press("Tab")
            root.locator(".onnx-lab-ed-rename-tensor-button").click()
            _wait_message(page, root, "rename_tensor")
            root.locator("svg g.node[id='n:input:image']").wait_for(timeout=30_000)
            history = root.locator(".onnx-lab-ed-history-html")
            # the table comes after the message and the drawing: wait for its last row
            history.locator("tr.onnx-lab-history-row[data-step='3']").wait_for(timeout=60_000)
            assert history.locator("tr.onnx-lab-history-row").count() == 4
            assert history.locator(".onnx-lab-changed").count() == 1
            root.screenshot(path=str(ARTIFACTS / "editor_after_edits.png"))

            # 4. undo twice: back to the step with only the epsilon change
            root.locator(".onnx-lab-ed-undo-button").click()
            _wait_message(page, root, "back to step 2")
            root.locator(".onnx-lab-ed-undo-button").click()
            _wait_message(page, root, "back to step 1")
            current = history.locator("tr.onnx-lab-history-row[data-step='1']",
                                      has_text="◀ current")
            current.wait_for(timeout=60_000)
            root.locator("svg g.node[id='n:input:input']").wait_for(timeout=30_000)
            # the redraw follows the table: wait until the added output's box is gone
            expect(root.locator("svg g.node[id='n:output:/stem/relu/Relu_output_0']")
                   ).to_have_count(0, timeout=30_000)
            root.screenshot(path=str(ARTIFACTS / "editor_undo_twice.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "editor_page.png"))


def _rename_input(root, old: str, new: str) -> None:
    _select(root, f"input:{old}")
    root.locator(".onnx-lab-ed-title", has_text=old).wait_for(timeout=30_000)
    name = root.locator(".onnx-lab-ed-tensor-name input")
    name.fill(new)
    name.press("Tab")
    root.locator(".onnx-lab-ed-rename-tensor-button").click()
    root.locator(f"svg g.node[id='n:input:{new}']").wait_for(timeout=60_000)


def test_editor_on_a_transformer_in_the_browser(tmp_path_factory):
    work = tmp_path_factory.mktemp("jupyterlab-editor-tf")
    relu, probs = "/layer.0/mlp/act/Relu", "/layer.0/attention/core/Softmax"
    with lab_in_browser(work, {"tf.ipynb": TRANSFORMER}, width=1400) as (url, page):
        try:
            run_all_cells(page, url, "tf.ipynb")
            root = page.locator(".onnx-lab-editor").first
            root.locator(".olc-root svg g.node").first.wait_for(timeout=120_000)

            _select(root, relu)  # delete the activation, its input wired to its consumer
            root.locator(".onnx-lab-ed-title", has_text=relu).wait_for(timeout=30_000)
            root.locator(".onnx-lab-ed-remove-mode select").select_option(
                label="reconnect its input to its consumers")
            root.locator(".onnx-lab-ed-preview-button").click()
            _wait_message(page, root, "removes 1 node(s)")
            root.locator(".onnx-lab-ed-remove-button").click()
            text = _wait_message(page, root, "remove_node")
            assert "outputs changed (expected for this edit)" in text
            # the redraw follows the message: wait until the removed node's box is gone
            expect(root.locator(f"svg g.node[id='n:{relu}']")).to_have_count(0, timeout=30_000)

            _select(root, probs)
            root.locator(".onnx-lab-ed-title", has_text=probs).wait_for(timeout=30_000)
            root.locator(".onnx-lab-ed-add-output-button").click()
            assert "outputs unchanged (verified" in _wait_message(page, root, "add_output")

            _rename_input(root, "x", "hidden")
            history = root.locator(".onnx-lab-ed-history-html")
            history.locator("tr.onnx-lab-history-row[data-step='3']").wait_for(timeout=60_000)
            root.screenshot(path=str(ARTIFACTS / "editor_transformer_edits.png"))

            root.locator(".onnx-lab-ed-undo-button").click()
            _wait_message(page, root, "back to step 2")
            root.locator(".onnx-lab-ed-undo-button").click()
            _wait_message(page, root, "back to step 1")
            history.locator("tr.onnx-lab-history-row[data-step='1']",
                            has_text="◀ current").wait_for(timeout=60_000)
            root.locator("svg g.node[id='n:input:x']").wait_for(timeout=30_000)
            root.screenshot(path=str(ARTIFACTS / "editor_transformer_undo.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "editor_transformer_page.png"))
