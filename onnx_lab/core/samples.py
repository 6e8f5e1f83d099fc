"""Embedded sample models built by code (deterministic, no downloads).

``resolve("sample:NAME")`` reads them from here; :mod:`onnx_lab.samples` is the public door
(it adds ``load``, which returns a Lab).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

from onnx_lab.core._sample_llm import build_tiny_llm, build_tiny_llm_int4
from onnx_lab.core._sample_models import (
    build_bert_block,
    build_control_flow,
    build_convnet,
    build_transformer_block,
)
from onnx_lab.errors import unknown_name

__all__ = ["names", "build", "path", "cache_dir"]
_BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "convnet": build_convnet,
    "transformer_block": build_transformer_block,
    "control_flow": build_control_flow,
    "bert_block": build_bert_block,
    "tiny_llm": build_tiny_llm,
    "tiny_llm_int4": build_tiny_llm_int4,
}


def names() -> list[str]:
    """Names of the embedded sample models."""
    return list(_BUILDERS)


def build(name: str) -> onnx.ModelProto:
    """Build sample ``name`` as a fresh ModelProto (deterministic, seeded)."""
    if name not in _BUILDERS:
        raise unknown_name("sample", name, _BUILDERS, fix=f"Samples: {', '.join(_BUILDERS)}.")
    return _BUILDERS[name]()


def cache_dir() -> Path:
    """Folder where sample files are written (``$ONNX_LAB_CACHE`` or ``~/.cache/onnx_lab``)."""
    root = os.environ.get("ONNX_LAB_CACHE") or Path.home() / ".cache" / "onnx_lab"
    return Path(root) / "samples"


def path(name: str) -> Path:
    """Path of sample ``name`` as an .onnx file, written (atomically) on first use."""
    data = build(name).SerializeToString()
    folder = cache_dir()
    target = folder / f"{name}.onnx"
    if target.is_file() and target.read_bytes() == data:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, target)
    return target
