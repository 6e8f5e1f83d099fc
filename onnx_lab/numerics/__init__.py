"""onnx_lab.numerics: feeds, sessions, chunked capture, alignment, metrics, comparison, diff.

Heavy modules (onnxruntime) are imported on first use of the names below. Functions that share
their submodule's name are not re-exported here (the submodule would shadow them): use
``onnx_lab.compare`` / ``onnx_lab.diff``, ``onnx_lab.numerics.align.align`` and
``onnx_lab.numerics.capture.capture``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "make_feeds": "onnx_lab.numerics.feeds",
    "as_feed_list": "onnx_lab.numerics.feeds",
    "make_session": "onnx_lab.numerics.session",
    "run": "onnx_lab.numerics.capture",
    "tensor_metrics": "onnx_lab.numerics.metrics",
    "Comparison": "onnx_lab.numerics.compare",
    "Diff": "onnx_lab.numerics.diff",
    "to_fp16": "onnx_lab.numerics.quantize",
    "to_int8_dynamic": "onnx_lab.numerics.quantize",
    "to_int8_static": "onnx_lab.numerics.quantize",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnx_lab.numerics' has no attribute {name!r}")
