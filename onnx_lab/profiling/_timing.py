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

__all__ = ["measure", "cancelled", "MemoryWatch", "Budget", "PointCost", "MIN_POINT_RUNS"]

#: Adaptive loops run at least this many timed runs (fewer only when one run exceeds the budget).
MIN_RUNS = 10
#: ... and at most this many.
MAX_RUNS = 2000
#: Timed runs a sweep point needs for a median with an interval: a point whose warm-up and
#: this many runs are estimated not to fit in the budget left is not started.
MIN_POINT_RUNS = 3


def cancelled(cancel: Any) -> bool:
    """Whether ``cancel`` (None, a ``threading.Event`` or a callable) asks to stop."""
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


@dataclass
class Budget:
    """A time budget: a promise about the wall time from the call to the result.

    ``start`` is the moment of the call (``time.perf_counter()``; default: now), so session
    creation, feeds, warm-up and every run count against ``total_s``. The points of a sweep
    each get an equal share of what is left (:meth:`share`: a point that stabilizes early
    leaves its time to the next ones); :meth:`fits` says whether a point whose cost is
    estimated beforehand can still be started; :attr:`deadline` is the hard end that
    :func:`measure` never runs past once it has a first timed run.
    """

    total_s: float | None
    points: int
    start: float | None = None
    done: int = 0

    def __post_init__(self) -> None:
        if self.start is None:
            self.start = time.perf_counter()

    @property
    def deadline(self) -> float | None:
        """``start + total_s`` (a ``perf_counter`` time), or None without a budget."""
        return None if self.total_s is None else self.start + self.total_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float | None:
        """Seconds left (>= 0), or None without a budget."""
        return None if self.total_s is None else max(self.total_s - self.elapsed(), 0.0)

    def share(self) -> float | None:
        left = self.left()
        return None if left is None else left / max(self.points - self.done, 1)

    def spent(self) -> bool:
        return self.total_s is not None and self.elapsed() >= self.total_s

    def fits(self, cost_s: float) -> bool:
        """Whether something estimated to take ``cost_s`` ends before the deadline."""
        return self.total_s is None or cost_s <= self.left()

    def next(self) -> None:
        self.done += 1


@dataclass
class PointCost:
    """What one point of a sweep cost, to estimate the next point before starting it.

    ``fixed_s``: time that does not grow with the point's size (a cost-model prediction, a
    session's creation); ``scaled_s``: time that grows with it (making its feeds);
    ``first_ms``: its first (warm-up) run, which at a new input shape also allocates;
    ``run_ms``: the median of its timed runs; ``paired_ms``: what the next point runs of this
    one beside each of its own timed runs (a batch sweep times each size interleaved with the
    previous one: this point's ``run_ms``, unscaled).
    """

    fixed_s: float = 0.0
    scaled_s: float = 0.0
    first_ms: float = 0.0
    run_ms: float = 0.0
    paired_ms: float = 0.0

    def estimate(self, scale: float = 1.0, timed: int = 3) -> float:
        """Seconds a point ``scale`` times this one's size needs for its warm-up run and
        ``timed`` timed runs. Run time is taken as proportional to the size: an upper bound
        wherever a larger size still gains throughput (below the knee), and the cost itself
        above it."""
        return (self.fixed_s + scale * (self.scaled_s + (self.first_ms + timed * self.run_ms) / 1e3)
                + timed * self.paired_ms / 1e3)


def measure(run: Callable[[], Any], *, runs: int | None = None, warmup: int = 0,
            budget_s: float | None = None, rel_ci: float = STABLE_REL_CI,
            min_runs: int = MIN_RUNS, max_runs: int = MAX_RUNS, cancel: Any = None,
            tick: Callable[[], None] | None = None, deadline: float | None = None
            ) -> tuple[np.ndarray, str]:
    """Wall ms of timed calls of ``run`` after ``warmup`` untimed ones.

    With ``runs``: that many (unless cancelled, or ``budget_s`` is given and spent: then it is
    an upper bound). Without: until the 95% interval of the median is within ``rel_ci`` of it
    (after ``min_runs``), ``budget_s`` is spent (warm-up included), or ``max_runs``. A spent
    budget also cuts the warm-up short (after one run): on a model whose single run takes
    seconds the budget, not the counts, decides.

    ``budget_s`` is this loop's share (soft: at least :data:`MIN_POINT_RUNS` timed runs in
    adaptive mode); ``deadline`` (a ``time.perf_counter()`` time) is the caller's hard end:
    no run is started that the previous run's duration says would end past it (a warm-up
    run not even once the deadline has passed), except the first timed run: nothing is known
    of a run before one ran, and the caller gets one measurement.

    Returns:
        (milliseconds, why it stopped: 'runs', 'stable', 'budget' (the share or the
        deadline), 'max_runs', 'cancelled').
    """
    perf = time.perf_counter
    t_start = perf()
    last = 0.0  # seconds of the latest run: the estimate of the next one

    def past_deadline() -> bool:
        return deadline is not None and perf() + last > deadline

    for i in range(warmup):
        if cancelled(cancel):
            return np.empty(0), "cancelled"
        if past_deadline() or i and budget_s is not None and perf() - t_start >= budget_s / 2:
            break
        t = perf()
        run()
        last = perf() - t
        if tick is not None:
            tick()
    limit = int(runs) if runs is not None else int(max_runs)
    out = np.empty(limit)
    n = 0
    why = "runs" if runs is not None else "max_runs"
    check_every = 1
    while n < limit:
        if n and cancelled(cancel):
            why = "cancelled"
            break
        if n and past_deadline():
            why = "budget"
            break
        t = perf()
        run()
        t1 = perf()
        last = t1 - t
        out[n] = last * 1e3
        n += 1
        if tick is not None:
            tick()
        if budget_s is not None and t1 - t_start >= budget_s and (
                runs is not None or n >= min(MIN_POINT_RUNS, limit)):
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
