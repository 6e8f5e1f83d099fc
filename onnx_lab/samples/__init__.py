"""Deterministic teaching models built by code (no downloads).

- ``convnet``: Conv+BN+Relu blocks, MaxPool, a Gemm head, plus an Identity, a dead branch, a
  Reshape of an initializer that can be constant-folded, a Conv followed by a bias Add, a
  Dropout, and a pair of Transposes that cancel. Input ``input`` [1, 3, 32, 32].
- ``transformer_block``: one encoder block with dynamic ``batch`` and ``seq`` dims: a LayerNorm
  written out of primitive ops, Q/K/V MatMul+Add, Softmax attention, a ReLU MLP. Input ``x``
  [batch, seq, 32].
- ``control_flow``: an If with two bodies and a Loop whose body holds another If. Input ``x``
  [2, 3].

Example:
    >>> from onnx_lab import samples
    >>> lab = samples.load("convnet")
    >>> samples.path("convnet").suffix
    '.onnx'
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from onnx_lab.errors import unknown_name
from onnx_lab.samples._builders import build_control_flow, build_convnet, build_transformer_block

if TYPE_CHECKING:
    from onnx_lab.lab import Lab

__all__ = ["names", "build", "path", "load"]

_BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "convnet": build_convnet,
    "transformer_block": build_transformer_block,
    "control_flow": build_control_flow,
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


def load(name: str) -> Lab:
    """Open sample ``name`` as a :class:`~onnx_lab.lab.Lab`."""
    from onnx_lab.lab import open_lab

    return open_lab(path(name))
