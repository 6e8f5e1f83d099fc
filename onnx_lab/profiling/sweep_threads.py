"""Thread-count sweep: one interleaved race of a session per intra-op thread count."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_lab._pandas import pd, prefetch
from onnx_lab._progress import Progress
from onnx_lab.core.source import resolve
from onnx_lab.errors import InputError
from onnx_lab.profiling._sweep_common import (
    NO_SPIN,
    THREADS_BUDGET_S,
    _busy,
    _check_budget,
    _interleaved,
    _stats,
    _verdicts,
)
from onnx_lab.profiling._timing import Budget
from onnx_lab.profiling.stats import STABLE_REL_CI
from onnx_lab.profiling.sweep_levels import _level_wont_fit
from onnx_lab.runtime.feeds import as_feed_list
from onnx_lab.runtime.session import make_session, run_session

__all__ = ["thread_sweep"]


def thread_sweep(model: Any, threads: Sequence[int] = (1, 2, 4), *, runs: int | None = None,
                 warmup: int = 3, feeds: Any = None, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 providers: str | Sequence[str] | None = None, opt_level: str = "all",
                 progress: Any = None, budget_s: float | None = None, cancel: Any = None,
                 rel_ci: float = STABLE_REL_CI) -> pd.DataFrame:
    """Latency per intra-op thread count.

    Args:
        runs, warmup: fixed runs per count; ``runs=None`` (default): the counts race,
            interleaved, for the fastest (as in :func:`levels`) until one is left, the rest
            are stable or settled, or ``budget_s`` (default :data:`THREADS_BUDGET_S`, from the
            call to the result, session creation included) is spent; a count whose session
            and first rounds are estimated not to fit is left out with a note.
        cancel: a ``threading.Event``: the counts measured so far are returned.

    Returns:
        DataFrame(threads, mean_ms, p50_ms, p90_ms, std_ms, speedup (p50 of the first row /
        p50), runs, p10_ms, ci_low_ms, ci_high_ms, rel_ci, verdict (against the first row,
        in words)); ``df.attrs['notes']``.

    Example:
        >>> thread_sweep("sample:convnet", (1, 2), runs=10)
    """
    t_start = time.perf_counter()
    _check_budget(runs, warmup, budget_s)
    counts = list(threads)
    if not counts or any(not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t <= 0
                         for t in counts):
        raise InputError(f"threads must be positive ints, got {counts!r}.",
                         fix="Use e.g. (1, 2, 4).")
    if runs is None and budget_s is None:
        budget_s = THREADS_BUDGET_S
    prefetch()  # the tables' pandas import counts against the budget too: now, not after
    lm, dims, shapes = resolve(model, dims, shapes)
    feed = as_feed_list(feeds, lm, dims, shapes)[0]
    notes: list[str] = []
    reporter = Progress(progress, len(counts) * ((runs + warmup) if runs is not None else 1),
                        "thread sweep", min_steps=20 if runs is not None else 1)
    budget = Budget(budget_s if runs is None else None, len(counts), start=t_start)
    try:
        sessions, create_s, rows = [], [], []
        for k, t in enumerate(counts):
            if rows and runs is None:
                why_not = _level_wont_fit(budget, create_s, rows)
                if why_not:
                    notes.append(f"{', '.join(_threads(c) for c in counts[k:])} not created: "
                                 f"{why_not} (raise budget_s)")
                    break
            t0 = time.perf_counter()
            sessions.append(make_session(lm, providers=providers, opt_level=opt_level,
                                         threads=int(t), config_entries=NO_SPIN))
            create_s.append(time.perf_counter() - t0)
            first_ms = float("nan")
            if runs is None:  # the race's warm-up round, timed: the estimate of the next one
                t1 = time.perf_counter()
                run_session(sessions[-1], feed, what=f"the model on {_threads(t)}")
                first_ms = (time.perf_counter() - t1) * 1e3
            rows.append({"threads": int(t), "_first_ms": first_ms})
        samples, raced = _interleaved(sessions, feed, runs, warmup, budget_s, t_start,
                                      reporter, cancel, rel_ci,
                                      [_threads(r["threads"]) for r in rows],
                                      warmed=1 if runs is None else 0)
        notes.extend(raced)
        del sessions
        rows = [{"threads": r["threads"], **_stats(ms)} for r, ms in zip(rows, samples,
                                                                         strict=True)]
    finally:
        reporter.close()
    df = pd.DataFrame(rows)
    df = df.assign(speedup=df.p50_ms.iloc[0] / df.p50_ms,
                   verdict=_verdicts(samples, [_threads(t) for t in df.threads]))
    df = df[["threads", "mean_ms", "p50_ms", "p90_ms", "std_ms", "speedup", "runs", "p10_ms",
             "ci_low_ms", "ci_high_ms", "rel_ci", "verdict"]]
    notes.extend(_busy(samples, "thread sweep"))
    df.attrs["notes"] = notes
    return df


def _threads(t: int) -> str:
    return f"{int(t)} thread" + ("" if int(t) == 1 else "s")
