"""onnx_lab.numerics: alignment, metrics, comparison, verification, diff, fp16/int8 candidates.

Feeds, sessions and capture live in :mod:`onnx_lab.runtime`; ``onnx_lab.to_fp16`` and the int8
functions wrap the candidates made here in Labs.

Heavy modules (onnxruntime) are imported on first use of the names below. Functions that share
their submodule's name are not re-exported here (the submodule would shadow them): use
``onnx_lab.compare`` / ``onnx_lab.diff``, ``onnx_lab.numerics.align.align`` and
``onnx_lab.runtime.capture.capture``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    "make_feeds": "onnx_lab.runtime.feeds",
    "as_feed_list": "onnx_lab.runtime.feeds",
    "tensor_metrics": "onnx_lab.numerics.metrics",
    "Comparison": "onnx_lab.numerics.compare",
    "Diff": "onnx_lab.numerics.diff",
    "fp16_model": "onnx_lab.numerics.quantize",
    "int8_dynamic_model": "onnx_lab.numerics.quantize",
    "int8_static_model": "onnx_lab.numerics.quantize",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnx_lab.numerics' has no attribute {name!r}")
