"""Turning tables, graphs and numbers into HTML, SVG and figures (display formatting lives here).

``render_model`` / ``Rendering`` are loaded on first access so ``import onnx_lab.render`` stays
light.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["render_model", "Rendering"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("onnx_lab.render.view"), name)
    raise AttributeError(f"module 'onnx_lab.render' has no attribute {name!r}")
