"""Turning tables, graphs and numbers into HTML, SVG and figures (display formatting lives here).

``render_model`` / ``Rendering`` are loaded on first access so ``import onnx_lab.render`` stays
light. So are the views of the result objects: importing this package hands ``onnx_lab._display``
a loader, and the first drawing of any result imports ``onnx_lab.render.results`` (which
imports the result modules and registers their views by class).
"""

from __future__ import annotations

import importlib
from typing import Any

from onnx_lab import _display

__all__ = ["render_model", "Rendering"]


def _load_result_views() -> None:
    """Register the views of onnx_lab's results (run once by ``_display``, on first draw)."""
    importlib.import_module("onnx_lab.render.results")


_display.add_loader(_load_result_views)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("onnx_lab.render.view"), name)
    raise AttributeError(f"module 'onnx_lab.render' has no attribute {name!r}")
