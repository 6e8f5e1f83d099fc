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
from onnx_lab.transforms.explain import explain  # the function (shadows its module)

__all__ = ["available", "get_pass", "register_pass", "origins", "PassResult", "Match", "explain"]
