"""Honest latency statistics: spread, a confidence interval of the median, and whether two
timing samples differ by more than the noise.

Everything here is numpy on arrays of milliseconds (no scipy): the confidence interval of the
median is the distribution-free one from order statistics (the binomial interval), the
comparison is a Mann-Whitney U test (normal approximation with the tie correction) together
with a bootstrap interval of the ratio of the medians.

Example:
    >>> import numpy as np
    >>> from onnx_lab.profiling.stats import summarize, compare_samples
    >>> a = np.random.default_rng(0).normal(10, 0.3, 40)
    >>> summarize(a)["rel_ci"] < 0.05
    True
    >>> compare_samples(a, a * 2).different
    True
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["summarize", "median_ci", "compare_samples", "clearly_slower", "Difference", "busy_note",
           "load_per_core", "STABLE_REL_CI", "MIN_EFFECT", "BUSY_SPREAD", "BUSY_LOAD",
           "BUSY_MIN_SPREAD_MS"]

#: A point is stable once the 95% interval of its median is within +-2% of the median.
STABLE_REL_CI = 0.02
#: Differences of the medians below 5% are called noise even when a test finds them
#: significant: on a shared machine the load drifts by that much between two sessions.
MIN_EFFECT = 0.05
#: (p90 - p10) / p50 above this: the runs are too spread to trust small differences.
BUSY_SPREAD = 0.25
#: Runnable processes per core (1-minute load average / cores) above this: the machine is busy.
BUSY_LOAD = 1.0
#: A p10-p90 spread below this many ms is no sign of other load, whatever its share of the
#: median: one run's thread wake-ups and the Python call cost tens of microseconds (a 0.09 ms
#: convnet on an idle 2-core machine spreads by 12-21% of its median, 0.01-0.02 ms).
BUSY_MIN_SPREAD_MS = 0.1


def median_ci(ms: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (order statistics).

    The ranks ``n/2 -+ z·sqrt(n)/2`` bound the median with probability ``level`` whatever the
    distribution (normal approximation of the binomial). Fewer than 6 runs: (min, max).
    """
    x = np.sort(np.asarray(ms, dtype=float))
    n = len(x)
    if n == 0:
        return float("nan"), float("nan")
    if n < 6:
        return float(x[0]), float(x[-1])
    z = _z(level)
    lo = int(math.floor(n / 2 - z * math.sqrt(n) / 2))
    hi = int(math.ceil(n / 2 + z * math.sqrt(n) / 2))
    return float(x[max(lo, 0)]), float(x[min(hi, n - 1)])


def _z(level: float) -> float:
    return {0.9: 1.6449, 0.95: 1.96, 0.99: 2.5758}.get(round(level, 2), 1.96)


def summarize(ms: Any) -> dict[str, float]:
    """Statistics of one timing sample (milliseconds).

    Returns:
        dict: runs, mean_ms, p10_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms, std_ms, ci_low_ms,
        ci_high_ms (95% interval of the median), rel_ci (half its width / the median), spread
        ((p90 - p10) / p50).
    """
    x = np.asarray(ms, dtype=float)
    if not len(x):
        nan = float("nan")
        return {k: nan for k in ("mean_ms", "p10_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms",
                                 "max_ms", "std_ms", "ci_low_ms", "ci_high_ms", "rel_ci",
                                 "spread")} | {"runs": 0}
    p10, p50, p90, p99 = np.percentile(x, [10, 50, 90, 99])
    lo, hi = median_ci(x)
    return {"runs": int(len(x)), "mean_ms": float(x.mean()), "p10_ms": float(p10),
            "p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99),
            "min_ms": float(x.min()), "max_ms": float(x.max()), "std_ms": float(x.std()),
            "ci_low_ms": lo, "ci_high_ms": hi,
            "rel_ci": float((hi - lo) / 2 / p50) if p50 > 0 else float("nan"),
            "spread": float((p90 - p10) / p50) if p50 > 0 else float("nan")}


def stable(ms: np.ndarray, rel_ci: float = STABLE_REL_CI, min_runs: int = 10) -> bool:
    """Whether the median of ``ms`` is known to within ``rel_ci`` (and ``min_runs`` ran)."""
    if len(ms) < min_runs:
        return False
    lo, hi = median_ci(ms)
    med = float(np.median(ms))
    return med > 0 and (hi - lo) / 2 / med <= rel_ci


def decided(a: np.ndarray, b: np.ndarray, min_effect: float = MIN_EFFECT) -> bool:
    """Whether more runs could still change the verdict between ``a`` and ``b``: False while
    the (conservative) interval of the ratio of medians, from the two medians' 95% intervals,
    straddles a ``min_effect`` boundary. Decided means b is clearly slower, clearly faster,
    or clearly within +-``min_effect`` of a (an equivalence test)."""
    if len(a) < 10 or len(b) < 10:
        return False
    la, ha = median_ci(a)
    lb, hb = median_ci(b)
    if la <= 0 or ha <= 0:
        return False
    lo, hi = lb / ha, hb / la
    return lo > 1 + min_effect or hi < 1 - min_effect or (
        lo >= 1 - min_effect and hi <= 1 + min_effect)


def clearly_slower(best: np.ndarray, b: np.ndarray, min_runs: int = 5,
                   min_effect: float = MIN_EFFECT) -> bool:
    """Whether ``b`` is clearly slower than ``best``: the 95% interval of its median lies above
    that of ``best`` by more than ``min_effect`` (5%; with fewer than 6 runs the interval is
    (min, max): every run of ``b`` took 5% longer than every run of ``best``, which chance
    gives with p < 1/252 for 5 runs each). Smaller gaps are noise on a shared machine, as in
    :func:`compare_samples`.

    A sweep uses it to retire a point from the race for the fastest: once it cannot be the
    fastest, more runs of it would not change the answer.
    """
    if len(best) < min_runs or len(b) < min_runs:
        return False
    return median_ci(b)[0] > median_ci(best)[1] * (1 + min_effect)


@dataclass(frozen=True)
class Difference:
    """Whether two timing samples differ beyond the noise (:func:`compare_samples`).

    Attributes:
        a, b: labels of the two samples.
        median_a_ms, median_b_ms: their medians.
        ratio: median_b / median_a (2.0: b takes twice as long).
        ratio_low, ratio_high: 95% bootstrap interval of the ratio.
        p_value: two-sided Mann-Whitney U test.
        different: True when p < alpha, the interval of the ratio excludes 1 and the
            medians differ by at least ``min_effect``.
        text: the verdict in words.
    """

    a: str
    b: str
    median_a_ms: float
    median_b_ms: float
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    different: bool
    text: str

    def __str__(self) -> str:
        return self.text


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return float("nan")
    both = np.concatenate([a, b])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(len(both))
    sorted_v = both[order]
    # average ranks of ties
    _, first, counts = np.unique(sorted_v, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    tie = float((counts ** 3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = (u1 - n1 * n2 / 2.0) / math.sqrt(var)
    return float(math.erfc(abs(z) / math.sqrt(2.0)))


def compare_samples(a: Any, b: Any, *, labels: tuple[str, str] = ("A", "B"),
                    alpha: float = 0.01, min_effect: float = MIN_EFFECT, n_boot: int = 2000,
                    seed: int = 0) -> Difference:
    """Does ``b`` take longer (or less) than ``a`` by more than the noise?

    Two conditions, both needed: the samples differ by a Mann-Whitney U test at ``alpha`` (with
    the 95% bootstrap interval of the ratio of the medians excluding 1), and the medians
    differ by at least ``min_effect`` (5%): a shared machine's load drifts that much between
    two sessions, so smaller "significant" differences are not reported as real. Interleave
    the runs of both (as :func:`onnx_lab.profiling.compare_models` does) for the fairest test.

    Args:
        a, b: wall times in ms (arrays or sequences).
        labels: names used in the verdict.

    Returns:
        A :class:`Difference` (``str()`` gives the verdict in words).

    Example:
        >>> compare_samples([10.0, 10.2, 9.9] * 10, [20.1, 19.8, 20.3] * 10).text
        'B takes 1.99x as long as A (median 20.10 vs 10.00 ms, 95% CI of the ratio ...'
    """
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    la, lb = labels
    ma, mb = float(np.median(x)), float(np.median(y))
    ratio = mb / ma if ma > 0 else float("nan")
    rng = np.random.default_rng(seed)
    bx = np.median(x[rng.integers(0, len(x), (n_boot, len(x)))], axis=1)
    by = np.median(y[rng.integers(0, len(y), (n_boot, len(y)))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = (float(v) for v in np.percentile(by / bx, [2.5, 97.5]))
    p = mann_whitney_p(x, y)
    different = bool(p < alpha and (lo > 1 or hi < 1) and abs(ratio - 1) >= min_effect)
    detail = (f"median {mb:.2f} vs {ma:.2f} ms, 95% CI of the ratio {lo:.2f}-{hi:.2f}, "
              f"Mann-Whitney p={p:.2g}, {len(x)} and {len(y)} runs")
    if different:
        text = (f"{lb} takes {ratio:.2f}x as long as {la} ({detail}): a difference beyond "
                "noise")
    else:
        why = (f"under {min_effect:.0%}" if p < alpha and (lo > 1 or hi < 1)
               else "within the run-to-run spread")
        text = f"no difference beyond noise between {la} and {lb} (ratio {ratio:.2f}, {why}; {detail})"
    return Difference(la, lb, ma, mb, ratio, lo, hi, p, different, text)


def load_per_core() -> float:
    """The 1-minute load average per CPU core (NaN where the OS does not say)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return float("nan")


def busy_note(ms: Any, label: str = "", load: float | None = None) -> str | None:
    """A warning when the runs look disturbed (wide spread, or other load on the machine)."""
    s = summarize(ms)
    load = load_per_core() if load is None else load
    why = []
    if s["runs"] >= 5 and s["spread"] > BUSY_SPREAD and \
            s["p90_ms"] - s["p10_ms"] > BUSY_MIN_SPREAD_MS:
        why.append(f"the runs spread by {s['spread']:.0%} of the median (p10-p90)")
    if load == load and load > BUSY_LOAD:
        why.append(f"load average {load:.1f} per core")
    if not why:
        return None
    return (f"{label + ': ' if label else ''}the machine looks busy ({'; '.join(why)}): "
            "small differences are not meaningful; trust the medians and their intervals")
