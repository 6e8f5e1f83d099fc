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

from onnx_lab.core.samples import build, cache_dir, names, path
from onnx_lab.lab import Lab, open_lab

__all__ = ["names", "build", "path", "load", "cache_dir"]


def load(name: str) -> Lab:
    """Open sample ``name`` as a :class:`~onnx_lab.lab.Lab`."""
    return open_lab(path(name))
