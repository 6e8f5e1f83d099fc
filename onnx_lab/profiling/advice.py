"""Whether a time budget gave a meaningful measurement, and the budget that would.

In budget mode :func:`onnx_lab.profile` and :func:`onnx_lab.batch_sweep` stop when the budget is
spent; on a large model (BERT, an OCR detector) the default budget may leave one timed run, or
a sweep that stops at its first size. A median of one run says nothing about the noise, so the
result says so and names a budget that gives at least :data:`MIN_RUNS` runs (the widgets offer
it as a button).

Example:
    >>> p = onnx_lab.profile(lab, budget_s=1)
    >>> a = profile_advice(p)
    >>> a.text if a else "enough runs"
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onnx_lab.profiling._timing import MIN_POINT_RUNS

__all__ = ["BudgetAdvice", "profile_advice", "sweep_advice", "MIN_RUNS", "RUN_SHARE"]

#: Timed runs below which a median is not a measurement (``stats.stable`` asks for 10).
MIN_RUNS = 10

#: Share of an adaptive profile's budget its timed runs get (the warm-up takes at most a
#: fifth, the profiled runs a third: see ``profiling.run``); scales the extra time needed.
RUN_SHARE = 0.45


@dataclass(frozen=True)
class BudgetAdvice:
    """A budget too small for a meaningful measurement.

    Attributes:
        runs: the fewest timed runs of a session (profile) or size (sweep).
        min_runs: the runs a meaningful median needs (:data:`MIN_RUNS`).
        budget_s: the budget used.
        suggested_s: a budget that gives at least ``min_runs`` runs (rounded up to seconds).
        what: what was short ("session CPUExecutionProvider", "batch sizes [2, 4, 8] not run").
    """

    runs: int
    min_runs: int
    budget_s: float
    suggested_s: float
    what: str

    @property
    def text(self) -> str:
        """``budget too small: 1 run (...); a budget of ~25 s gives >= 10 runs``."""
        return (f"budget too small: {self.runs} run{'s' if self.runs != 1 else ''} "
                f"({self.what}) in {self.budget_s:g} s; a budget of ~{self.suggested_s:g} s "
                f"gives ≥ {self.min_runs} runs")


def _round_up(seconds: float) -> float:
    return float(max(1, math.ceil(seconds)))


def profile_advice(profile: Any, min_runs: int = MIN_RUNS) -> BudgetAdvice | None:
    """Advice for a :class:`~onnx_lab.profiling.run.Profile` run in budget mode whose session
    with the fewest timed runs stopped for the budget below ``min_runs``; None otherwise
    (enough runs, fixed ``runs``, stable or cancelled)."""
    budget_s = getattr(profile, "budget_s", None)
    stats = getattr(profile, "latency_stats", None)
    if budget_s is None or stats is None or not len(stats):
        return None
    rows = stats.loc[stats["stopped"].isin(["budget", "max_runs"])] \
        if "stopped" in stats.columns else stats
    rows = rows.loc[rows["runs"] < min_runs]
    if not len(rows):
        return None
    worst = rows.sort_values("runs").iloc[0]
    runs = int(worst["runs"])
    per_run_s = float(worst["mean_ms"]) / 1000.0 if math.isfinite(worst["mean_ms"]) else 0.0
    extra = sum(max(min_runs - int(r["runs"]), 0) * float(r["mean_ms"]) / 1000.0
                for _, r in rows.iterrows() if math.isfinite(r["mean_ms"]))
    if per_run_s <= 0:
        return None
    return BudgetAdvice(runs, min_runs, float(budget_s),
                        _round_up(float(budget_s) + extra / RUN_SHARE),
                        f"session {worst['session']}")


def sweep_advice(sweep: Any, batch_sizes: Sequence[int], min_runs: int = MIN_POINT_RUNS
                 ) -> BudgetAdvice | None:
    """Advice for a :class:`~onnx_lab.profiling.sweep.BatchSweep` in budget mode that left
    sizes unmeasured for the budget (its notes say "raise budget_s") or timed a size fewer
    than ``min_runs`` times (the sweep's own minimum per size, ``MIN_POINT_RUNS``); None
    otherwise (a sweep that stopped at its knee is complete).

    The suggestion scales the last measured size's latency to the sizes left (linearly in
    the batch, which over-estimates past the knee) for ``min_runs`` runs each."""
    budget_s = getattr(sweep, "budget_s", None)
    table = getattr(sweep, "table", None)
    if budget_s is None or table is None:
        return None
    notes = " ".join(map(str, getattr(sweep, "notes", [])))
    short = "raise budget_s" in notes
    if not len(table):
        return None
    extra = 0.0
    what: list[str] = []
    fewest = int(table["runs"].min())
    for backend, t in table.groupby("backend", sort=False):
        done = [int(b) for b in t["batch"]]
        last_b, last_ms = done[-1], float(t["latency_ms"].iloc[-1])
        left = [b for b in batch_sizes if b not in done and b > last_b] if short else []
        if left:
            what.append(f"{backend}: batch {left} not run")
        for b in left:
            extra += min_runs * last_ms * (b / last_b) / 1000.0
        for _, r in t.iterrows():
            extra += max(min_runs - int(r["runs"]), 0) * float(r["latency_ms"]) / 1000.0
    if not what and fewest >= min_runs:
        return None
    if fewest < min_runs:
        what.append(f"fewest runs of a size: {fewest}")
    elapsed = float(getattr(sweep, "elapsed_s", budget_s) or budget_s)
    return BudgetAdvice(fewest, min_runs, float(budget_s),
                        _round_up(max(elapsed, float(budget_s)) + extra / RUN_SHARE),
                        "; ".join(what))
