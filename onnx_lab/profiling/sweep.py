"""Sweeps: ORT optimization levels, batch sizes (with the throughput knee), thread counts, and
one model against another. One module per sweep (``sweep_levels``, ``sweep_batch``,
``sweep_threads``, ``sweep_models``; what they share in ``_sweep_common``); this module keeps
the import path of all of them.

Example:
    >>> from onnx_lab.profiling import levels, batch_sweep
    >>> levels("sample:convnet", runs=10)
    >>> sweep = batch_sweep("sample:transformer_block", (1, 2, 4, 8), dims={"seq": 16})
    >>> sweep.knee, sweep.table
"""

from __future__ import annotations

from onnx_lab.profiling._sweep_common import (
    _AUTO_WARMUP,
    _RACE_WARMUP,
    BATCH_BUDGET_S,
    KNEE_GAIN,
    LEVELS_BUDGET_S,
    NO_SPIN,
    RACE_MIN_RUNS,
    STAT_COLUMNS,
    THREADS_BUDGET_S,
    _interleaved,
    _time_point,
)
from onnx_lab.profiling.sweep_batch import BatchSweep, _knee, batch_sweep, find_knee
from onnx_lab.profiling.sweep_levels import levels
from onnx_lab.profiling.sweep_models import compare_models
from onnx_lab.profiling.sweep_threads import thread_sweep

__all__ = ["levels", "batch_sweep", "thread_sweep", "compare_models", "BatchSweep",
           "KNEE_GAIN", "LEVELS_BUDGET_S", "BATCH_BUDGET_S", "THREADS_BUDGET_S"]

# Private names tests and benchmarks read from here.
_REEXPORTED = (_AUTO_WARMUP, _RACE_WARMUP, NO_SPIN, RACE_MIN_RUNS, STAT_COLUMNS, _interleaved,
               _time_point, _knee, find_knee)
