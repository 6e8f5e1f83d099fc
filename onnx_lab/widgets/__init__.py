"""Jupyter widgets: thin views over the public API (ipywidgets 8; the one graph canvas is an
anywidget whose JavaScript and CSS ship in ``widgets/static/``, no CDN).

- :class:`Explorer` (``lab.explore()``): summary, node/weight/tensor tables, graph views.
- :class:`FusionLab`: pattern matches, preview, apply with verification, history, undo/redo.
- :class:`Extractor`: cut a subgraph by boundary tensors or nodes, verify, save.
- :class:`DriftDebugger`: layer-by-layer comparison of two models.
- :class:`Profiler`: per-operator profiling, batch sweep, optimization levels, cost.
- :class:`PrecisionDoctor`: which nodes to keep in fp32 / out of int8, found by a search.
- :class:`DiffView`: two versions side by side, synced, fused nodes linked to their originals.
- :class:`Editor` (``lab.edit()``): the canvas with an edit panel; each edit a verified,
  undoable step, the session replayable as a script.

Every widget has ``.result`` (the object behind what it shows) and shows the equivalent
Python call. Imported lazily so ``import onnx_lab.widgets`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Explorer": "onnx_lab.widgets.explorer",
    "FusionLab": "onnx_lab.widgets.fusion_lab",
    "Extractor": "onnx_lab.widgets.extractor",
    "DriftDebugger": "onnx_lab.widgets.drift",
    "Profiler": "onnx_lab.widgets.profiler",
    "PrecisionDoctor": "onnx_lab.widgets.precision",
    "DiffView": "onnx_lab.widgets.diff_view",
    "Editor": "onnx_lab.widgets.editor",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnx_lab.widgets' has no attribute {name!r}")
