"""The audit's index.html: links to reports where they exist, escaped names and errors, the
gate's findings on top."""

from __future__ import annotations

import pandas as pd

from onnx_lab.render.audit import audit_index_html
from onnx_lab.zoo import COLUMNS
from onnx_lab.zoo._store import typed_table


def _table():
    return typed_table([
        {"model": "a/<b>.onnx", "status": "ok", "num_nodes": 4, "nodes_after": 2,
         "optimize_steps": 2, "optimize_verified": 2, "latency_ms": 1.5,
         "latency_ci_low_ms": 1.4, "latency_ci_high_ms": 1.6, "flops": 2.5e9,
         "file_bytes": 2048, "check_errors": 0, "check_warnings": 1, "seconds": 3.0,
         "dims_given": "batch=2", "shapes_given": "<x>=1x16"},
        {"model": "broken.onnx", "status": "error", "error_stage": "open",
         "error_type": "ModelLoadError", "error": "not a valid <ONNX> file", "seconds": 1.0},
    ], COLUMNS)


def test_links_only_models_with_a_report_and_escapes():
    page = audit_index_html(_table(), links={"a/<b>.onnx": "reports/a__b.onnx.html"})
    assert "<a href='reports/a__b.onnx.html'>a/&lt;b&gt;.onnx</a>" in page
    assert page.count("<a href") == 1
    assert "[open] ModelLoadError: not a valid &lt;ONNX&gt; file" in page
    assert "2 models: 1 ok, 1 error" in page and "2.5 G" in page and "2.0 KB" in page
    assert "2/2 steps verified" in page and "<script>" in page
    # the sizes the figures were measured at, under the name (input names are the model's)
    assert "<small class='at'>at batch=2; &lt;x&gt;=1x16</small>" in page
    assert page.count("class='at'") == 1  # the broken model ran at nothing


def test_gate_section():
    gate = pd.DataFrame([{"model": "broken.onnx", "check": "status", "worse": True,
                          "old": "ok", "new": "error", "detail": "now fails"}])
    assert "1 regression(s)" in audit_index_html(_table(), gate=gate)
    assert "No regression" in audit_index_html(_table(), gate=gate.iloc[:0])
