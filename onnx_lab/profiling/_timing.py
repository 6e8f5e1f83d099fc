"""The timing loop every profiling function uses: fixed runs, or runs until the median is stable
or the time budget is spent; cancellable; the process's peak memory during the runs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnx_lab.profiling.stats import STABLE_REL_CI, stable

__all__ = ["measure", "cancelled", "MemoryWatch", "Budget"]

#: Adaptive loops run at least this many timed runs (fewer only when one run exceeds the budget).
MIN_RUNS = 10
#: ... and at most this many.
MAX_RUNS = 2000


def cancelled(cancel: Any) -> bool:
    """Whether ``cancel`` (None, a ``threading.Event`` or a callable) asks to stop."""
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


@dataclass
class Budget:
    """A time budget shared by the points of a sweep: each point gets an equal share of what
    is left (so a point that stabilizes early leaves its time to the next ones)."""

    total_s: float | None
    points: int
    start: float = 0.0
    done: int = 0

    def __post_init__(self) -> None:
        self.start = time.perf_counter()

    def share(self) -> float | None:
        if self.total_s is None:
            return None
        left = self.total_s - (time.perf_counter() - self.start)
        return max(left, 0.0) / max(self.points - self.done, 1)

    def spent(self) -> bool:
        return self.total_s is not None and time.perf_counter() - self.start >= self.total_s

    def next(self) -> None:
        self.done += 1


def measure(run: Callable[[], Any], *, runs: int | None = None, warmup: int = 0,
            budget_s: float | None = None, rel_ci: float = STABLE_REL_CI,
            min_runs: int = MIN_RUNS, max_runs: int = MAX_RUNS, cancel: Any = None,
            tick: Callable[[], None] | None = None) -> tuple[np.ndarray, str]:
    """Wall ms of timed calls of ``run`` after ``warmup`` untimed ones.

    With ``runs``: that many (unless cancelled, or ``budget_s`` is given and spent: then it is
    an upper bound). Without: until the 95% interval of the median is within ``rel_ci`` of it
    (after ``min_runs``), ``budget_s`` is spent (warm-up included), or ``max_runs``. A spent
    budget also cuts the warm-up short (after one run): on a model whose single run takes
    seconds the budget, not the counts, decides.

    Returns:
        (milliseconds, why it stopped: 'runs', 'stable', 'budget', 'max_runs', 'cancelled').
    """
    t_start = time.perf_counter()
    for i in range(warmup):
        if cancelled(cancel):
            return np.empty(0), "cancelled"
        if i and budget_s is not None and time.perf_counter() - t_start >= budget_s / 2:
            break
        run()
        if tick is not None:
            tick()
    limit = int(runs) if runs is not None else int(max_runs)
    out = np.empty(limit)
    perf = time.perf_counter
    n = 0
    why = "runs" if runs is not None else "max_runs"
    check_every = 1
    while n < limit:
        if n and cancelled(cancel):
            why = "cancelled"
            break
        t = perf()
        run()
        t1 = perf()
        out[n] = (t1 - t) * 1e3
        n += 1
        if tick is not None:
            tick()
        if budget_s is not None and t1 - t_start >= budget_s and (
                runs is not None or n >= min(3, limit)):
            why = "budget"
            break
        if runs is None:
            # The interval check sorts the sample: every few runs once there are many.
            if n >= min_runs and n % check_every == 0:
                if stable(out[:n], rel_ci, min_runs):
                    why = "stable"
                    break
                check_every = max(1, n // 20)
    return out[:n].copy(), why


_HWM = re.compile(rb"VmHWM:\s+(\d+)\s+kB")
_RSS = re.compile(rb"VmRSS:\s+(\d+)\s+kB")


def _status() -> bytes | None:
    try:
        with open("/proc/self/status", "rb") as f:
            return f.read()
    except OSError:
        return None


class MemoryWatch:
    """The process's resident memory before a session and its peak until :meth:`stop`.

    Linux: the kernel's high-water mark (VmHWM) is reset when the watch starts (writing 5 to
    ``/proc/self/clear_refs``) and read at the end, so the peak is exact and costs nothing
    during the runs. Elsewhere the values are NaN. What it measures: the whole process
    (Python, the model's weights, onnxruntime's arena and pre-packed weights, the feeds,
    the outputs), not activations alone.
    """

    def __init__(self) -> None:
        self.exact = False
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.exact = True
        except OSError:
            pass
        # Read after the reset: the high-water mark starts at the resident size of that
        # moment, and a page freed between a read before it and the reset made the peak come
        # out 16 KB below the "before" (a flaky test).
        st = _status()
        m = _RSS.search(st) if st else None
        self.rss_before = int(m.group(1)) * 1024 if m else float("nan")

    def stop(self) -> dict[str, float]:
        """{'rss_before_bytes', 'peak_rss_bytes', 'session_peak_bytes' (peak - before)}."""
        st = _status()
        m = _HWM.search(st) if st else None
        peak = int(m.group(1)) * 1024 if (m and self.exact) else float("nan")
        if peak == peak and self.rss_before == self.rss_before:
            peak = max(peak, self.rss_before)  # the kernel updates the mark lazily
        return {"rss_before_bytes": self.rss_before, "peak_rss_bytes": peak,
                "session_peak_bytes": peak - self.rss_before}
