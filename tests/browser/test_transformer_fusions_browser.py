"""FusionLab applies onnxruntime's transformer fusions in a real JupyterLab (headless Chromium)
and shows where each fused Attention came from.

The notebook shows ``FusionLab(lab)`` on ``sample:bert_block`` (a BERT encoder block the
optimizer recognises); the test picks "ORT transformer fusions (bert)", clicks the button, waits
for a verified history step, opens the panel of fused nodes and checks that an Attention row
lists the Softmax and MatMuls it replaced. A second test plants an extra Cast in the mask path
and checks that the "Not fused, because" panel names it. Screenshots are saved under
``test-artifacts/``.
"""

from __future__ import annotations

import contextlib

import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import FusionLab\n"
    "lab = onnx_lab.open('sample:bert_block', dims={'batch': 1, 'seq': 8})",
    "fl = FusionLab(lab)\nfl",
]


def _apply_bert_fusions(page, url: str, notebook: str):
    """Run the notebook, pick "ORT transformer fusions (bert)" in its FusionLab, apply it and
    wait for a verified step 1; returns the widget's locator."""
    run_all_cells(page, url, notebook)
    widget = page.locator(".onnx-lab-fusion-lab")
    widget.wait_for(timeout=90_000)
    level = widget.locator("select").filter(
        has=page.locator("option", has_text="ORT transformer fusions"))
    level.select_option(label="ORT transformer fusions (bert)")
    widget.locator("button", has_text="apply ORT level").click()
    step1 = page.locator(".onnx-lab-history tr.onnx-lab-history-row[data-step='1']")
    step1.wait_for(timeout=120_000)
    assert "ort_transformers" in step1.inner_text()
    assert step1.locator(".onnx-lab-badge").inner_text().strip() == "passed"
    assert page.locator(".onnx-lab-error").count() == 0
    return widget


def test_fusion_lab_applies_transformer_fusions_and_shows_attention_origins(tmp_path):
    with lab_in_browser(tmp_path, {"transformers.ipynb": CELLS}) as (url, page):
        try:
            widget = _apply_bert_fusions(page, url, "transformers.ipynb")
            widget.get_by_text("Nodes the last step fused", exact=False).first.click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-fusion-lab table tr')]"
                ".some(tr => tr.innerText.includes('Attention') && "
                "tr.innerText.includes('Softmax'))", timeout=30_000)
            rows = [t for t in widget.locator("table tr").all_inner_texts()
                    if "Attention" in t and "fused" in t]
            assert rows and "Softmax" in rows[0] and "MatMul" in rows[0]
        finally:
            page.screenshot(path=str(ARTIFACTS / "fusion_lab_transformers_browser.png"),
                            full_page=True)


NEAR_MISS_CELLS = [
    "import onnx_lab\nfrom onnx_lab.core._sample_models import build_bert_block\n"
    "from onnx_lab.widgets import FusionLab\n"
    "lab = onnx_lab.open(build_bert_block(extra_mask_cast=True), dims={'batch': 1, 'seq': 8})",
    "fl = FusionLab(lab)\nfl",
]


def test_fusion_lab_says_why_an_attention_was_not_fused(tmp_path):
    """A second Cast planted in the mask path: after the transformer step the "Not fused,
    because" panel names the Cast and carries onnxruntime's own log line."""
    with lab_in_browser(tmp_path, {"near_miss.ipynb": NEAR_MISS_CELLS}) as (url, page):
        try:
            widget = _apply_bert_fusions(page, url, "near_miss.ipynb")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-fusion-lab table tr')]"
                ".some(tr => tr.innerText.includes('unexpected Cast'))", timeout=30_000)
            rows = [t for t in widget.locator("table tr").all_inner_texts()
                    if "unexpected Cast" in t]
            assert "Attention" in rows[0] and "/mask/Cast_1" in rows[0]
            assert "failed to match mask path" in widget.inner_text()
            assert page.locator(".onnx-lab-error").count() == 0
        finally:
            with contextlib.suppress(Exception):  # show the panel, whatever failed above
                widget.locator("tr", has_text="unexpected Cast").first.evaluate(
                    "e => e.scrollIntoView({block: 'center'})")
            page.screenshot(path=str(ARTIFACTS / "fusion_lab_near_miss_browser.png"),
                            full_page=True)


NAN_GUARD_CELLS = [
    "import numpy as np, onnx_lab\nfrom onnx import helper, numpy_helper\n"
    "from onnx_lab.core._sample_models import build_bert_block\n"
    "from onnx_lab.widgets import FusionLab\n"
    "m = build_bert_block(); g = m.graph\n"
    "sm = next(n for n in g.node if n.op_type == 'Softmax'); p = sm.output[0]\n"
    "mm = next(n for n in g.node if n.op_type == 'MatMul' and p in n.input)\n"
    "g.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), 'zero'))\n"
    "at = list(g.node).index(mm)\n"
    "g.node.insert(at, helper.make_node('IsNaN', [p], ['isnan'], name='/attn/IsNaN'))\n"
    "g.node.insert(at + 1, helper.make_node('Where', ['isnan', 'zero', p], ['guarded'],"
    " name='/attn/Where'))\n"
    "mm.input[list(mm.input).index(p)] = 'guarded'\n"
    "lab = onnx_lab.open(m, dims={'batch': 1, 'seq': 8})",
    "fl = FusionLab(lab)\nfl",
]


def test_fusion_lab_names_the_nan_guard_that_stopped_the_attention(tmp_path):
    """torch's sdpa NaN guard between the Softmax and the values' MatMul (a transformers
    BertModel export): the panel names the Where node and the QK path."""
    with lab_in_browser(tmp_path, {"nan_guard.ipynb": NAN_GUARD_CELLS}) as (url, page):
        try:
            widget = _apply_bert_fusions(page, url, "nan_guard.ipynb")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-fusion-lab table tr')]"
                ".some(tr => tr.innerText.includes('QK path'))", timeout=30_000)
            rows = [t for t in widget.locator("table tr").all_inner_texts() if "QK path" in t]
            assert "Attention" in rows[0] and "/attn/Where" in rows[0]
            assert "NaN guard" in rows[0]
            assert page.locator(".onnx-lab-error").count() == 0
        finally:
            with contextlib.suppress(Exception):
                widget.locator("tr", has_text="QK path").first.evaluate(
                    "e => e.scrollIntoView({block: 'center'})")
            page.screenshot(path=str(ARTIFACTS / "fusion_lab_nan_guard_browser.png"),
                            full_page=True)
