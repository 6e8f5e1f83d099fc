"""What the sweeps share: default budgets, the no-spin session config, timing one point
adaptively and racing several interleaved, per-point statistics and verdicts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_lab._progress import Progress
from onnx_lab.errors import InputError
from onnx_lab.profiling._timing import (
    MIN_POINT_RUNS,
    Budget,
    cancelled,
    measure,
)
from onnx_lab.profiling.run import _check_counts
from onnx_lab.profiling.stats import (
    busy_note,
    clearly_slower,
    compare_samples,
    decided,
    stable,
    summarize,
)
from onnx_lab.runtime.session import run_session

# Doubling the batch must raise throughput by at least this factor to be worth it.
KNEE_GAIN = 1.2
#: Default time budgets (seconds, session creation included) when ``runs`` is None: each
#: keeps a Profiler widget action under ~10 s on a 2-core machine.
LEVELS_BUDGET_S = 6.0
BATCH_BUDGET_S = 6.0
THREADS_BUDGET_S = 3.0
#: Warm-up runs of adaptive points (fixed runs use ``warmup``).
_AUTO_WARMUP = 2
#: Session config of the sessions that run interleaved (levels, thread_sweep, compare_models):
#: onnxruntime's worker threads spin after each run waiting for more work, so with spinning on,
#: an idle session's threads keep the cores busy while the next session runs. Measured on the
#: 2-core machine with the YOLO-like detector (benchmarks/bench_profile.py): four levels
#: interleaved ran 2-3x slower with spinning on (medians 46/42/47/30 ms, p10-p90 spread up to
#: 120%) than with it off (18.0/17.9/17.2/14.1 ms, within 1 ms), and switching sessions in
#: blocks of 5 runs did not cure it. Off, every point pays the same small wake-up cost, so the
#: points stay comparable with each other.
NO_SPIN = {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}
#: Warm-up rounds of an adaptive race: one run absorbs a session's first-run allocations;
#: the race's medians and its conservative retirement test (after 5 runs: every run of the
#: slower point 5% above every run of the faster) are not moved by one slow run after it.
_RACE_WARMUP = 1
#: Rounds of an adaptive race (levels, thread counts) before a clearly slower point leaves it.
RACE_MIN_RUNS = 5

STAT_COLUMNS = ["runs", "mean_ms", "p10_ms", "p50_ms", "p90_ms", "std_ms", "ci_low_ms",
                "ci_high_ms", "rel_ci"]


def _check_budget(runs: Any, warmup: Any, budget_s: Any) -> None:
    _check_counts(1 if runs is None else runs, warmup)
    if budget_s is not None and (not isinstance(budget_s, (int, float)) or budget_s <= 0):
        raise InputError(f"budget_s must be a positive number of seconds, got {budget_s!r}.",
                         fix="Use e.g. budget_s=5.")


def _time_point(sess, feed: dict, runs: int | None, warmup: int, budget: Budget,
                reporter: Progress, cancel: Any, rel_ci: float, t_point: float,
                prev_feed: dict | None = None
                ) -> tuple[np.ndarray, str, float, np.ndarray | None]:
    """Wall ms of one sweep point: ``runs`` fixed runs, or until stable / its budget share
    (what is left of it after the time already spent on this point since ``t_point``: its
    feeds, the session's creation for the first point), never past the budget's deadline.

    Adaptive with ``prev_feed`` (the previous size's inputs, same session): the sizes
    alternate, so a change of load on the machine hits both sizes alike and their ratio (the
    gain that decides the knee) does not move with it; each size's timed run is the second of
    two in a row (the first after a change of input shape pays for the change).

    Returns:
        (timed ms, why they stopped, ms of the first warm-up run (0 without warm-up), the
        previous size's interleaved ms or None).
    """
    run = sess.run
    first = [True]

    def one() -> None:
        if first[0]:  # the point's first run is checked (a failure translated)
            first[0] = False
            run_session(sess, feed, what="the model")
        else:
            run(None, feed)

    if runs is not None:
        ms, why = measure(one, runs=runs, warmup=warmup, cancel=cancel, tick=reporter.update)
        return ms, why, 0.0, None
    # The first warm-up run is timed here: at a new input shape it also allocates, and the
    # next point's cost is estimated from it.
    n_warm = min(warmup, _AUTO_WARMUP)
    first_ms = 0.0
    if n_warm:
        t = time.perf_counter()
        one()
        first_ms = (time.perf_counter() - t) * 1e3
    share = max((budget.share() or 0.0) - (time.perf_counter() - t_point), 0.0)
    if prev_feed is None:
        ms, why = measure(one, warmup=max(n_warm - 1, 0), budget_s=share, cancel=cancel,
                          rel_ci=rel_ci, deadline=budget.deadline)
        reporter.update()
        return ms, why, first_ms, None
    cur: list[float] = []
    pre: list[float] = []
    perf = time.perf_counter

    def pair() -> None:
        # each size's timed run follows one of its own: the first run after a change of
        # input shape pays for it (re-planned buffers: a MobileNet's batch 1 at 0.45 ms ran
        # at 0.70-0.86 ms right after batch 2), which made gains out of nothing
        run(None, prev_feed)
        t = perf()
        run(None, prev_feed)
        t1 = perf()
        run(None, feed)
        t2 = perf()
        run(None, feed)
        pre.append(t1 - t)
        cur.append(perf() - t2)

    # measure times the pairs: its stability test, share and deadline apply to a round
    ms, why = measure(pair, warmup=max(n_warm - 1, 0), budget_s=share, cancel=cancel,
                      rel_ci=rel_ci, deadline=budget.deadline)
    reporter.update()
    n = len(ms)  # the warm-up pairs come first in the lists
    return (np.array(cur[len(cur) - n:]) * 1e3, why, first_ms,
            np.array(pre[len(pre) - n:]) * 1e3)


def _interleaved(sessions: list, feed: dict, runs: int | None, warmup: int,
                 budget_s: float | None, t_start: float, reporter: Progress, cancel: Any,
                 rel_ci: float, labels: Sequence[str] | None = None, warmed: int = 0
                 ) -> tuple[list[np.ndarray], list[str]]:
    """Wall ms of each session, run round-robin (a, b, c, a, b, c...): a change of load on
    the machine hits every session alike instead of the one that happened to run then.

    Fixed ``runs``: that many rounds. Adaptive (``runs=None``): a race for the fastest. After
    :data:`RACE_MIN_RUNS` rounds, a session whose median is clearly slower than the fastest
    one's (its 95% interval lies more than 5% above the fastest's:
    :func:`~onnx_lab.profiling.stats.clearly_slower`) leaves the rotation: more runs of it
    would not change which is fastest. The race ends when one session is left, when every session left
    is stable or decided against the fastest (within 5% of it, or clearly apart), or before
    a round that the previous round's run times say would end past ``budget_s`` (counted
    from ``t_start``, the call); after at least one round (a note says when fewer than
    :data:`~onnx_lab.profiling._timing.MIN_POINT_RUNS` fit).

    ``warmed``: untimed runs each session already had (counted against an adaptive warm-up).

    Returns:
        (samples per session, notes naming the sessions that left the race and why).
    """
    labels = list(labels) if labels is not None else [str(i) for i in range(len(sessions))]
    n_warm = warmup if runs is not None else max(min(warmup, _RACE_WARMUP) - warmed, 0)
    # each session's first run is checked (a failure translated), the timed ones are not
    check = not warmed
    for _ in range(n_warm):
        for sess, label in zip(sessions, labels, strict=True):
            if check:
                run_session(sess, feed, what=f"the model ({label})")
            else:
                sess.run(None, feed)
            if runs is not None:
                reporter.update()
        check = False
    out: list[list[float]] = [[] for _ in sessions]
    active = list(range(len(sessions)))
    notes: list[str] = []
    perf = time.perf_counter
    limit = runs if runs is not None else 2000
    deadline = t_start + budget_s if budget_s is not None and runs is None else None
    rounds = 0
    while rounds < limit:
        if rounds and cancelled(cancel):
            break
        if rounds and deadline is not None and perf() + sum(out[i][-1] for i in active) / 1e3 \
                + _tail_s(len(sessions), rounds) > deadline:
            break
        for i in active:
            t = perf()
            if check:
                run_session(sessions[i], feed, what=f"the model ({labels[i]})")
            else:
                sessions[i].run(None, feed)
            out[i].append((perf() - t) * 1e3)
            if runs is not None:
                reporter.update()
        check = False
        rounds += 1
        if runs is not None:
            continue
        if budget_s is not None and perf() - t_start >= budget_s:
            break
        if rounds >= RACE_MIN_RUNS and len(active) > 1:
            arrays = {i: np.array(out[i]) for i in active}
            best = min(active, key=lambda i: float(np.median(arrays[i])))
            for i in [i for i in active if i != best]:
                if clearly_slower(arrays[best], arrays[i]):
                    active.remove(i)
                    notes.append(f"{labels[i]} left the race after {len(out[i])} runs: "
                                 f"clearly slower than {labels[best]} (median "
                                 f"{np.median(arrays[i]):.2f} vs {np.median(arrays[best]):.2f} ms)")
            if len(active) > 1 and rounds >= 10 and rounds % 5 == 0 and (
                    all(stable(arrays[i], rel_ci) for i in active)
                    or all(decided(arrays[best], arrays[i]) for i in active if i != best)):
                break
        if len(active) == 1 and len(sessions) > 1:
            break
        if len(sessions) == 1 and rounds >= 10 and stable(np.array(out[0]), rel_ci):
            break
    if runs is None:
        reporter.update(len(sessions))
        if rounds < MIN_POINT_RUNS and not cancelled(cancel):
            notes.append(f"only {rounds} round(s) fit in the {budget_s:g} s budget "
                         "(raise budget_s for medians with intervals)")
    return [np.array(x) for x in out], notes


def _tail_s(points: int, runs: int) -> float:
    """Seconds the verdicts after a sweep's runs take (each point against the first, with a
    bootstrap of the ratio of medians: ~0.05 s at 50 runs each, ~0.45 s at 2000 on the 2-core
    machine), reserved within the budget."""
    return (points - 1) * (0.03 + 2.2e-4 * runs)


def _stats(ms: np.ndarray) -> dict[str, float]:
    st = summarize(ms)
    return {c: st[c] for c in STAT_COLUMNS}


def _busy(samples: list[np.ndarray], label: str) -> list[str]:
    """One busy-machine warning for a sweep (the most spread point decides)."""
    for ms in sorted(samples, key=lambda m: -summarize(m)["spread"] if len(m) else 0):
        note = busy_note(ms, label)
        return [note] if note else []
    return []


def _verdicts(samples: list[np.ndarray], labels: list[str]) -> list[str]:
    """Each point against the first, in words ('' for the first)."""
    out = [""]
    for s, lab in zip(samples[1:], labels[1:], strict=True):
        out.append(compare_samples(samples[0], s, labels=(labels[0], lab)).text
                   if len(s) and len(samples[0]) else "")
    return out
