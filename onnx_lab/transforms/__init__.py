"""onnx_lab.transforms: passes with provenance, selective application, verification, history.

Example:
    >>> from onnx_lab import transforms
    >>> transforms.available()[["name", "summary"]]
    >>> lab.apply("fuse_conv_bn"); transforms.origins(lab.model)
"""

from __future__ import annotations

from onnx_lab.transforms.base import (
    Match,
    PassResult,
    available,
    get_pass,
    origins,
    register_pass,
)

__all__ = ["available", "get_pass", "register_pass", "origins", "PassResult", "Match"]

try:  # the teaching texts live in their own module (bound here so the name is the function)
    from onnx_lab.transforms.explain import explain  # noqa: F401 - re-exported
except ModuleNotFoundError as _e:  # pragma: no cover - until explain.py lands
    if _e.name != "onnx_lab.transforms.explain":
        raise
else:
    __all__.append("explain")
