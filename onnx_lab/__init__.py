"""onnx_lab: understand, optimize and debug ONNX models in notebooks, Python and the shell.

Example:
    >>> import onnx_lab
    >>> lab = onnx_lab.open("sample:convnet")
    >>> lab.summary()["num_nodes"]

``import onnx_lab`` needs no display, no ``dot`` binary and no GPU: heavy modules
(onnxruntime, graphviz, matplotlib, ipywidgets) are imported on use, and so are the views of the
results (``onnx_lab.render.results``, at the first drawing) and the façade itself (``open``,
``Lab``, ``samples``...: ``onnx_lab.lab`` and onnx_ir behind it, at the first access), so that
``onnx-lab --help``, a submodule of this package, does not pay for them.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from onnx_lab import errors
from onnx_lab import render as _render  # noqa: F401 - its loader registers the result views
from onnx_lab.errors import LabError

if TYPE_CHECKING:
    from onnx_lab import samples
    from onnx_lab.lab import Lab, merge, profile, repro, to_fp16, to_int8_dynamic, to_int8_static
    from onnx_lab.lab import open_lab as open  # noqa: A001 - the public name is onnx_lab.open

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

# The façade (onnx_lab.lab, and onnx_lab.samples that opens Labs): loaded on first access, so
# that ``onnx-lab --help`` (a submodule of this package) does not pay onnx_ir and the sympy it
# imports (about a second; see docs/core.md's CLI section). Public name -> attribute of lab.py.
_FACADE: dict[str, str] = {"open": "open_lab", "Lab": "Lab", "merge": "merge", "repro": "repro",
                           "to_fp16": "to_fp16", "to_int8_dynamic": "to_int8_dynamic",
                           "to_int8_static": "to_int8_static", "profile": "profile"}

# Public functions defined in modules that import heavy dependencies: loaded on first access.
_LAZY: dict[str, str] = {
    "compare": "onnx_lab.numerics.compare",
    "compare_llm": "onnx_lab.numerics.llm",
    "compare_torch": "onnx_lab.numerics.torch_compare",
    "diff": "onnx_lab.numerics.diff",
    "profile_generation": "onnx_lab.profiling.generate",
    "write_report": "onnx_lab.reporting",
    "write_diff_report": "onnx_lab.reporting",
    "audit": "onnx_lab.zoo",
}

# Subpackages reachable as attributes after ``import onnx_lab`` (imported on first access).
_SUBPACKAGES = frozenset({"analysis", "core", "numerics", "profiling", "render", "runtime",
                          "transforms", "widgets", "zoo"})

__all__ = ["open", "Lab", "LabError", "errors", "samples", "merge", "repro", "to_fp16",
           "to_int8_dynamic", "to_int8_static", "profile", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _FACADE:
        return getattr(importlib.import_module("onnx_lab.lab"), _FACADE[name])
    if name == "samples" or name in _SUBPACKAGES:
        # ``onnx_lab.transforms.available()`` after a plain ``import onnx_lab``, as the docs
        # write it
        return importlib.import_module(f"onnx_lab.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnx_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the public names, the lazily loaded ones too, for tab completion: not this module's own
    # imports (``importlib``, ``Any``, ``TYPE_CHECKING``...) nor its private tables
    return sorted(set(__all__) | _SUBPACKAGES | {"__version__"})
