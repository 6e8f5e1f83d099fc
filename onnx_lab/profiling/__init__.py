"""onnx_lab.profiling: per-operator profiles with onnxruntime, sweeps, trace parsing.

``onnx_lab.profile`` is :func:`onnx_lab.profiling.run.profile`. Importing this package does not
import onnxruntime (sessions are created inside the functions).

Example:
    >>> from onnx_lab.profiling import profile, levels, batch_sweep
    >>> p = profile("sample:convnet", runs=10, warmup=2)
    >>> g = profile_generation("decoder.onnx", prompt=32, new_tokens=16)  # prefill vs decode
"""

from __future__ import annotations

from onnx_lab.profiling.generate import GenerationProfile, profile_generation
from onnx_lab.profiling.parse import Trace, parse_trace
from onnx_lab.profiling.run import Profile, profile
from onnx_lab.profiling.stats import Difference, compare_samples, summarize
from onnx_lab.profiling.sweep import BatchSweep, batch_sweep, compare_models, levels, thread_sweep

__all__ = ["profile", "Profile", "levels", "batch_sweep", "thread_sweep", "BatchSweep",
           "compare_models", "compare_samples", "summarize", "Difference",
           "parse_trace", "Trace", "profile_generation", "GenerationProfile"]
