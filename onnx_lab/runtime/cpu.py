"""What the CPU does to int8 arithmetic in onnxruntime's kernels.

On x86-64 CPUs with AVX2 (or AVX-512) but without VNNI, onnxruntime computes uint8 x int8
products (the U8S8 kernels every int8 model here uses) with ``VPMADDUBSW``, which adds two
products into a saturating int16: with full 8-bit weights a sum can clip, and a quantized
model then errs far more than its rounding explains (onnxruntime's quantization docs: use
``reduce_range`` — 7-bit weights — or U8U8 there). CPUs with VNNI (``avx512_vnni``,
``avx_vnni``, AMX) and ARM do not saturate. The answer is read from ``/proc/cpuinfo``; where
that is not available (macOS, Windows) it is False (no known risk), and
``ONNX_LAB_INT8_REDUCE_RANGE=0|1`` sets it by hand.

Example:
    >>> from onnx_lab.runtime.cpu import int8_saturates
    >>> int8_saturates()  # True on an AVX2 EPYC without VNNI
"""

from __future__ import annotations

import functools
import os
import platform

__all__ = ["int8_saturates", "cpu_flags"]

_VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def int8_saturates() -> bool:
    """Whether onnxruntime's U8S8 int8 kernels may saturate on this CPU (x86-64 with AVX2 and
    no VNNI), so 8-bit weights should be quantized with ``reduce_range`` (7 bits)."""
    forced = os.environ.get("ONNX_LAB_INT8_REDUCE_RANGE", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    flags = cpu_flags()
    return "avx2" in flags and not any(f in flags for f in _VNNI)
