"""The details panel keeps a tensor's name readable beside a long symbolic shape, in
JupyterLab + headless Chromium.

On optimum's merged GPT-2 decoder a MatMul of the attention has the output shape
``?×?×sequence_length×sequence_length f32``: the shape cell never wrapped, so the name
column of the 300 px panel shrank to one character a line ("/ t r a n s f o r m e r ...")
and the kind was cut at the panel's edge. A shape now wraps after a "×" where it must, and
the name keeps a readable width. The screenshot goes to
``test-artifacts/details_long_shape.png``.
"""

from __future__ import annotations

import pytest
from _jupyter import ARTIFACTS, lab_in_browser, run_all_cells, select_by_search

pytestmark = pytest.mark.browser

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch_size, num_heads, sequence_length, head_size] q,
   float[batch_size, num_heads, head_size, past_sequence_length_plus_sequence_length] k)
   => (float[batch_size, num_heads, sequence_length, past_sequence_length_plus_sequence_length] y) {
    y = MatMul (q, k)
}"""
CELLS = ["import onnx, onnx_lab\nfrom onnx_lab.widgets import Explorer\n"
         f"m = onnx.parser.parse_model('''{MODEL}''')\n"
         "m.graph.node[0].name = '/transformer/h.0/attn/MatMul'\n"
         "m.graph.node[0].output[0] = m.graph.output[0].name = "
         "'/transformer/h.0/attn/MatMul_output_0'\n"
         "lab = onnx_lab.open(m)\nExplorer(lab, tab='Graph')"]

MEASURE = """() => {
  const p = document.querySelector('.olc-panel');
  const out = [];
  for (const t of p.querySelectorAll('.olc-inputs, .olc-outputs')) {
    for (const tr of [...t.rows].slice(1)) {
      out.push({name: tr.cells[0].getBoundingClientRect().width,
                right: tr.getBoundingClientRect().right,
                kindRight: tr.cells[2].getBoundingClientRect().right});
    }
  }
  return {rows: out, panelRight: p.getBoundingClientRect().right - p.clientLeft};
}"""


def test_a_long_symbolic_shape_leaves_the_name_readable(tmp_path):
    with lab_in_browser(tmp_path, {"shape.ipynb": CELLS}) as (url, page):
        run_all_cells(page, url, "shape.ipynb")
        root = page.locator(".olc-root").first
        key = select_by_search(root, "MatMul")
        root.locator(f"svg g.node[id='n:{key}']").click()
        root.locator(".olc-panel .olc-outputs").wait_for(timeout=30_000)
        page.wait_for_timeout(300)
        m = page.evaluate(MEASURE)
        root.screenshot(path=str(ARTIFACTS / "details_long_shape.png"))
        assert len(m["rows"]) == 3, m
        for row in m["rows"]:
            assert row["name"] >= 60, m  # not a column of single letters
            assert row["kindRight"] <= m["panelRight"] + 1, m  # the kind is not cut off
