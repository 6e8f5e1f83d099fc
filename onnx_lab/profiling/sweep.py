"""Sweeps: ORT optimization levels, batch sizes (with the throughput knee), thread counts.

Example:
    >>> from onnx_lab.profiling import levels, batch_sweep
    >>> levels("sample:convnet", runs=10)
    >>> sweep = batch_sweep("sample:transformer_block", (1, 2, 4, 8), dims={"seq": 16})
    >>> sweep.knee, sweep.table
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd, prefetch
from onnx_lab._progress import Progress
from onnx_lab.core.shapes import dynamic_dims
from onnx_lab.core.source import resolve
from onnx_lab.errors import DimError, InputError, RuntimeLoadError
from onnx_lab.profiling._timing import (
    MIN_POINT_RUNS,
    Budget,
    MemoryWatch,
    PointCost,
    cancelled,
    measure,
)
from onnx_lab.profiling.parse import _KERNEL_SUFFIX, load_columns
from onnx_lab.profiling.run import _check_counts, open_session
from onnx_lab.profiling.stats import (
    STABLE_REL_CI,
    busy_note,
    clearly_slower,
    compare_samples,
    decided,
    stable,
    summarize,
)
from onnx_lab.runtime.feeds import as_feed_list, make_feeds
from onnx_lab.runtime.openvino import BACKEND_PREFIX, is_openvino, openvino_device
from onnx_lab.runtime.session import OPT_LEVELS, make_session, resolve_providers, run_session

__all__ = ["levels", "batch_sweep", "thread_sweep", "compare_models", "BatchSweep",
           "KNEE_GAIN", "LEVELS_BUDGET_S", "BATCH_BUDGET_S", "THREADS_BUDGET_S"]

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

    Adaptive with ``prev_feed`` (the previous size's inputs, same session): each timed run
    of ``feed`` follows one of ``prev_feed``, so a change of load on the machine hits both
    sizes alike and their ratio (the gain that decides the knee) does not move with it.

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
        t = perf()
        run(None, prev_feed)
        t1 = perf()
        run(None, feed)
        pre.append(t1 - t)
        cur.append(perf() - t1)

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


def levels(model: Any, *, runs: int | None = None, warmup: int = 3, feeds: Any = None,
           dims: Mapping[str, int] | None = None, shapes: Mapping[str, Sequence[int]] | None = None,
           providers: str | Sequence[str] | None = None, threads: int | None = None,
           progress: Any = None, budget_s: float | None = None, cancel: Any = None,
           rel_ci: float = STABLE_REL_CI) -> pd.DataFrame:
    """Session init time, latency and node count at each ORT optimization level.

    Args:
        model: a Lab, LabModel, path or ``"sample:NAME"``.
        runs, warmup: timed and untimed runs per level (fixed). ``runs=None`` (default): the
            levels race, interleaved, for the fastest: a level clearly slower than the fastest
            leaves after 5 runs (a note says so), the others run until they are stable or
            settled against the fastest, or ``budget_s`` is spent.
        feeds, dims, shapes: inputs as for :func:`onnx_lab.profile`.
        providers: one provider (default CPU).
        threads: intra-op threads.
        progress: None (bar in terminals), False, or ``callable(done, total, label)``.
        budget_s: seconds from the call to the result (default :data:`LEVELS_BUDGET_S` when
            ``runs`` is None): session creation, the traced run and every run count. The
            sessions of 'disable' and 'all' are created first; a level whose session and
            first race rounds are estimated not to fit (from the sessions before it) is left
            out with a note.
        cancel: a ``threading.Event``: the levels measured so far are returned.

    Returns:
        DataFrame, one row per level (disable, basic, extended, all): opt_level, init_ms (wall
        time of creating the session), mean_ms, p50_ms, p90_ms, std_ms, nodes (in ORT's
        optimized graph, main graph), nodes_model (main graph of the model), speedup (p50_ms
        of 'disable' / p50_ms), runs, p10_ms, ci_low_ms, ci_high_ms, rel_ci, verdict (against
        'disable', in words: whether the difference exceeds the noise). ``df.attrs['notes']``:
        levels left out for the budget, levels that left the race, a busy-machine warning, a
        cancel.

    Example:
        >>> levels("sample:convnet", runs=10)[["opt_level", "nodes", "mean_ms"]]
    """
    t_start = time.perf_counter()
    _check_budget(runs, warmup, budget_s)
    if runs is None and budget_s is None:
        budget_s = LEVELS_BUDGET_S
    prefetch()  # the tables' pandas import counts against the budget too: now, not after
    lm, dims, shapes = resolve(model, dims, shapes)
    feed = as_feed_list(feeds, lm, dims, shapes)[0]
    rows, samples, notes = [], [], []
    nested = any(g != "" for g in lm.index.graphs)
    reporter = Progress(progress, len(OPT_LEVELS) * ((runs + warmup) if runs is not None else 1),
                        "levels", min_steps=20 if runs is not None else 1)
    budget = Budget(budget_s if runs is None else None, len(OPT_LEVELS), start=t_start)
    # In budget mode the baseline and the default level are created first: when the budget
    # cannot hold four sessions, the levels left out are the in-between ones.
    order = OPT_LEVELS if runs is not None else ("disable", "all", "extended", "basic")
    try:
        with tempfile.TemporaryDirectory(prefix="onnx_lab_levels_") as tmp:
            sessions = []
            create_s: list[float] = []
            for k, level in enumerate(order):
                if rows and cancelled(cancel):
                    notes.append(f"cancelled before level {level!r}")
                    break
                if rows and runs is None:
                    why_not = _level_wont_fit(budget, create_s, rows)
                    if why_not:
                        notes.append(f"levels {', '.join(order[k:])} not created: {why_not} "
                                     "(raise budget_s)")
                        break
                # One session per level: created with the profiler on (as cheap as without)
                # so that one profiled run lists the kernels of ORT's optimized graph, then
                # the profiler is ended before the timed runs. Writing the optimized model
                # from a second session (its weights re-serialized) cost 2-3 s per level on
                # BERT-base; it is kept for models with subgraphs, whose nodes the trace
                # does not tell apart from the main graph's.
                t0 = time.perf_counter()
                sess = make_session(lm, providers=providers, opt_level=level, threads=threads,
                                    profile=not nested, config_entries=NO_SPIN,
                                    profile_prefix=str(Path(tmp) / f"levels_{level}"))
                init_ms = (time.perf_counter() - t0) * 1e3
                if nested:
                    nodes = _written_node_count(lm, level, providers, threads, Path(tmp))
                    first_ms = float("nan")
                else:
                    t1 = time.perf_counter()
                    run_session(sess, feed, what=f"the model at level {level!r}")
                    first_ms = (time.perf_counter() - t1) * 1e3
                    nodes = _traced_node_count(sess.end_profiling())
                create_s.append(time.perf_counter() - t0 - (0 if nested else first_ms / 1e3))
                sessions.append(sess)
                rows.append({"opt_level": level, "init_ms": init_ms, "nodes": nodes,
                             "nodes_model": lm.graph.num_nodes(), "_first_ms": first_ms})
            # The levels run interleaved, so a load change hits them alike.
            samples, raced = _interleaved(sessions, feed, runs, warmup, budget_s, t_start,
                                          reporter, cancel, rel_ci,
                                          [f"level {r['opt_level']}" for r in rows],
                                          warmed=0 if nested else 1)
            notes.extend(raced)
            del sessions
            for row, ms in zip(rows, samples, strict=True):
                row.update(_stats(ms))
    finally:
        reporter.close()
    rank = {lv: i for i, lv in enumerate(OPT_LEVELS)}
    keep = sorted(range(len(rows)), key=lambda i: rank[rows[i]["opt_level"]])
    rows, samples = [rows[i] for i in keep], [samples[i] for i in keep]
    df = pd.DataFrame(rows)
    df = df[["opt_level", "init_ms", "mean_ms", "p50_ms", "p90_ms", "std_ms", "nodes",
             "nodes_model", "runs", "p10_ms", "ci_low_ms", "ci_high_ms", "rel_ci"]]
    df = df.assign(speedup=df.p50_ms.iloc[0] / df.p50_ms,
                   verdict=_verdicts(samples, [f"level {lv}" for lv in df.opt_level]))
    df = df[["opt_level", "init_ms", "mean_ms", "p50_ms", "p90_ms", "std_ms", "nodes",
             "nodes_model", "speedup", "runs", "p10_ms", "ci_low_ms", "ci_high_ms", "rel_ci",
             "verdict"]]
    notes.extend(_busy(samples, "levels"))
    df.attrs["notes"] = notes
    return df


def _level_wont_fit(budget: Budget, create_s: Sequence[float], rows: Sequence[dict]) -> str:
    """Why one more level's session cannot be added in what is left of ``budget`` ('' when
    it can): its creation and first run (the slowest seen so far) and the race's first
    :data:`MIN_POINT_RUNS` rounds with it (every session's first run, the slowest again)."""
    runs = [r["_first_ms"] / 1e3 for r in rows if r["_first_ms"] == r["_first_ms"]]
    run_s = max(runs, default=0.0)
    est = max(create_s) + run_s + MIN_POINT_RUNS * (sum(runs) + run_s)
    if budget.fits(est):
        return ""
    return (f"a session ({max(create_s):.2f} s to create) and {MIN_POINT_RUNS} interleaved "
            f"rounds with it need ~{est:.2f} s and {budget.left():.2f} s of the "
            f"{budget.total_s:g} s budget are left")


def _traced_node_count(trace_file: str) -> int:
    """Distinct kernels (nodes of ORT's optimized graph) in a one-run profiler trace."""
    cols = load_columns(trace_file)
    Path(trace_file).unlink(missing_ok=True)
    # node_index identifies a node even when ORT left it unnamed.
    nodes = {idx if idx is not None else n
             for c, n, idx in zip(cols["cat"], cols["name"], cols["node_index"], strict=True)
             if c == "Node" and n.endswith(_KERNEL_SUFFIX)}
    return len(nodes)


def _written_node_count(lm, level: str, providers, threads, tmp: Path) -> int:
    """Main-graph nodes of ORT's optimized graph, written by a second session."""
    import onnx

    path = tmp / f"{level}.onnx"
    make_session(lm, providers=providers, opt_level=level, threads=threads,
                 optimized_model_path=str(path))
    return len(onnx.load(str(path), load_external_data=False).graph.node)


@dataclass
class BatchSweep:
    """Result of :func:`batch_sweep`.

    Attributes:
        table: one row per batch size (and backend): batch, latency_ms (median of the
            runs), mean_ms, p90_ms, std_ms, items_per_s (batch / latency_ms),
            gain_per_doubling (throughput ratio to the previous batch, per doubling of the
            batch; in budget mode from this size's runs interleaved with runs of the previous
            size in the same session, so that a change of load between the sizes does not
            move it), backend, runs, p10_ms, ci_low_ms, ci_high_ms (95% interval of the
            median), rel_ci, items_per_s_low, items_per_s_high (throughput at the interval's
            ends), gain_beyond_noise (whether the latency per item differs from the previous
            batch's beyond the noise; interleaved runs in budget mode), peak_rss_bytes (process peak during this batch's
            runs), rss_growth_bytes (that peak minus the process before the session),
            predicted_activation_bytes (the cost model's peak; filled by ``Lab.batch_sweep``).
        knee: the first batch where doubling gains less than ``KNEE_GAIN`` (1.2x) throughput,
            or None when every step still gains (the first backend's; ``knees`` per backend).
        dim: the dim that was swept.
        notes: why a batch was skipped (out of memory, failure, past the knee, not started
            because its estimated cost did not fit in the budget left, cancelled), a knee not
            reached within the budget, busy-machine warnings.
        knees: backend -> knee.
        cancelled: the sweep was cancelled (the table holds the batches measured before).
        elapsed_s: wall time of the sweep, from the call to the result.
        sessions: sessions created (one per backend, reused across batch sizes).
        budget_s: the time budget (None with fixed runs).
    """

    table: pd.DataFrame
    knee: int | None
    dim: str
    notes: list[str] = field(default_factory=list)
    knees: dict[str, int | None] = field(default_factory=dict)
    cancelled: bool = False
    elapsed_s: float = 0.0
    sessions: int = 0
    budget_s: float | None = None

    def backend(self, name: str) -> pd.DataFrame:
        """The rows of one backend."""
        return self.table.loc[self.table.backend == name].reset_index(drop=True)

    def plot(self):
        """Latency and throughput against batch size, the knee marked."""
        return _display.draw(self, "plot")

    def _repr_html_(self) -> str:
        return _display.draw(self, "html")


def find_knee(batches: Sequence[int], items_per_s: Sequence[float],
              gain: float = KNEE_GAIN) -> tuple[int | None, list[float]]:
    """(knee batch, gain per doubling of each step; NaN for the first)."""
    gains = [float("nan")]
    knee = None
    for i in range(1, len(batches)):
        ratio = items_per_s[i] / items_per_s[i - 1] if items_per_s[i - 1] > 0 else float("nan")
        steps = math.log2(batches[i] / batches[i - 1])
        g = ratio ** (1.0 / steps) if steps > 0 and ratio > 0 else float("nan")
        gains.append(g)
        if knee is None and g == g and g < gain:
            knee = int(batches[i - 1])
    return knee, gains


def batch_sweep(model: Any, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), *,
                dim: str = "batch", runs: int | None = None, warmup: int = 3,
                dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None,
                providers: str | Sequence[str] | None = None, threads: int | None = None,
                opt_level: str = "all", progress: Any = None, budget_s: float | None = None,
                stop_at_knee: bool | None = None, cancel: Any = None,
                rel_ci: float = STABLE_REL_CI,
                predict: Callable[[int], float] | None = None) -> BatchSweep:
    """Latency and throughput for each batch size, and the knee of the throughput curve.

    One session per backend (the model keeps its dynamic batch dim) runs seeded inputs of
    each size, smallest first: 1, 2, 4... while each doubling still gains throughput, and in
    budget mode the sweep stops past the knee (larger sizes cannot move it).

    Args:
        model: a Lab, LabModel, path or ``"sample:NAME"`` with a symbolic dim ``dim``.
        batch_sizes: increasing positive sizes.
        dim: the symbolic dim to sweep (``"batch"``, ``"N"``...).
        runs, warmup: timed and untimed runs per size (fixed). ``runs=None`` (default): each
            size runs until its median is stable or its share of ``budget_s`` is spent.
        dims, shapes: values of the other dynamic dims.
        providers: one ORT provider (default CPU), or several backends side by side, e.g.
            ``["cpu", "openvino"]`` (the OpenVINO runtime, optional extra).
        threads, opt_level: session settings (default ORT threads, 'all').
        progress: None (bar in terminals), False, or ``callable(done, total, label)``.
        budget_s: seconds from the call to the result (default :data:`BATCH_BUDGET_S` per
            backend when ``runs`` is None): session creation, feeds, warm-up, ``predict``
            and every run count. Before each size the sweep estimates what its warm-up and
            3 runs will take (from the previous size's runs, scaled by the batch); a size
            that cannot fit in what is left is not started, and a note says so.
        stop_at_knee: stop a backend's sweep once throughput stopped rising (the knee is
            found; larger sizes would only confirm it). Default: True in budget mode, False
            with fixed ``runs``.
        cancel: a ``threading.Event``: the sizes measured so far are returned.
        predict: ``predict(batch) -> bytes``, the cost model's activation peak of a size
            (``Lab.batch_sweep`` passes it): called for each size started, before its runs,
            within the budget; fills ``predicted_activation_bytes``.

    Raises:
        DimError: the model has no dynamic dim ``dim`` (fix its other dims with ``dims``/
            ``shapes``, or make the batch symbolic with ``lab.set_input_shape``), or other dims
            are unresolved.
        InputError: bad batch sizes, runs or warmup.

    Example:
        >>> s = batch_sweep("sample:transformer_block", (1, 2, 4), dims={"seq": 16})
        >>> s.table[["batch", "items_per_s"]], s.notes
    """
    t_start = time.perf_counter()
    _check_budget(runs, warmup, budget_s)
    sizes = _check_sizes(batch_sizes)
    lm, dims, shapes = resolve(model, dims, shapes)
    _check_sweep_dim(lm, dim)
    backends = _backends(providers)
    if stop_at_knee is None:
        stop_at_knee = runs is None
    if runs is None and budget_s is None:
        budget_s = BATCH_BUDGET_S * len(backends)
    prefetch()  # the tables' pandas import counts against the budget too: now, not after
    adaptive = runs is None
    # The first size's feeds before any session: a DimError for the other dims comes first.
    # The others are made when their size is reached (a sweep that stops at the knee never
    # pays for the feeds of batch 32).
    feeds = {sizes[0]: make_feeds(lm, {**dims, dim: int(sizes[0])}, shapes)}
    whole = Budget(budget_s if adaptive else None, len(backends), start=t_start)
    rows, notes, knees = [], [], {}
    n_sessions = 0
    reporter = Progress(progress, len(backends) * len(sizes) * (
        (runs + warmup) if runs is not None else 1), "batch sweep",
        min_steps=20 if runs is not None else 1)
    plan = _Sweep(lm, dim, sizes, dims, shapes, runs, warmup, budget_s, t_start, opt_level,
                  threads, reporter, cancel, rel_ci, predict, stop_at_knee)
    is_cancelled = False
    try:
        for bi, backend in enumerate(backends):
            if cancelled(cancel):
                is_cancelled = True
                notes.append(f"{backend}: not run (cancelled)")
                continue
            if adaptive and bi and whole.spent():
                notes.append(f"{backend}: not run: the {budget_s:g} s budget is spent "
                             "(raise budget_s)")
                continue
            # Each backend gets an equal share of what is left.
            budget = Budget(None if not adaptive else whole.left() / (len(backends) - bi),
                            len(sizes))
            n_sessions += 1
            run = _sweep_backend(plan, backend, budget, feeds, notes)
            is_cancelled = is_cancelled or run.cancelled
            name, table_b, knee = _backend_table(run, backend, is_cancelled, notes)
            knees[name] = knee
            rows.append(table_b)
    finally:
        reporter.close()
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=_SWEEP_COLUMNS)
    table = table[_SWEEP_COLUMNS]
    first = next(iter(knees.values()), None)
    return BatchSweep(table=table, knee=first, dim=dim, notes=notes, knees=knees,
                      cancelled=is_cancelled or cancelled(cancel),
                      elapsed_s=time.perf_counter() - t_start, sessions=n_sessions,
                      budget_s=budget_s if adaptive else None)


def _check_sizes(batch_sizes: Sequence[int]) -> list[int]:
    sizes = list(batch_sizes)
    if not sizes or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b <= 0
                        for b in sizes) or sorted(set(sizes)) != sizes:
        raise InputError(f"batch_sizes must be increasing positive ints, got {sizes!r}.",
                         fix="Use e.g. (1, 2, 4, 8, 16, 32).")
    return sizes


def _check_sweep_dim(lm: Any, dim: str) -> None:
    dyn = dynamic_dims(lm)
    if dim not in dyn or dim == "?":
        named = sorted(d for d in dyn if d != "?")
        raise DimError(
            f"The model has no dynamic dim {dim!r} to sweep "
            f"({'its dynamic dims: ' + ', '.join(map(repr, named)) if named else 'its inputs have fixed shapes'}).",
            fix=("Pass dim= one of those names" if named else
                 "Make the batch dim symbolic first (lab.set_input_shape(input, ['batch', ...]) "
                 "or lab.fix_dims for the other dims)") + "; give the other dims with "
            "dims={...} or shapes={...}.")


@dataclass
class _Sweep:
    """What a :func:`batch_sweep` call asked for, the same for every backend."""

    lm: Any
    dim: str
    sizes: list[int]
    dims: Mapping[str, int]
    shapes: Mapping[str, Sequence[int]]
    runs: int | None
    warmup: int
    budget_s: float | None
    t_start: float
    opt_level: str
    threads: int | None
    reporter: Progress
    cancel: Any
    rel_ci: float
    predict: Callable[[int], float] | None
    stop_at_knee: bool


@dataclass
class _BackendRun:
    """One backend's sweep: a row per size, per-item ms per size, the interleaved steps."""

    rows: list[dict] = field(default_factory=list)
    samples: list[np.ndarray] = field(default_factory=list)
    # per size: (per-item ms of the previous size, of this one) from their interleaved runs
    # (adaptive), or None
    steps: list[tuple[np.ndarray, np.ndarray] | None] = field(default_factory=list)
    stopped_for_budget: bool = False
    cancelled: bool = False


def _sweep_backend(plan: _Sweep, backend: str, budget: Budget, feeds: dict,
                   notes: list[str]) -> _BackendRun:
    """One session on ``backend`` runs the sizes, smallest first, until the budget, the knee
    (with ``stop_at_knee``), a failure or a cancel stops it."""
    lm, dim, sizes, cancel = plan.lm, plan.dim, plan.sizes, plan.cancel
    adaptive = plan.runs is None
    out = _BackendRun()
    b_rows, steps = out.rows, out.steps
    t0 = time.perf_counter()
    watch = MemoryWatch()
    rss0 = watch.rss_before
    sess = open_session(lm, backend, opt_level=plan.opt_level, threads=plan.threads)
    create_s = time.perf_counter() - t0
    prev: tuple[int, PointCost] | None = None
    for i, b in enumerate(sizes):
        if b_rows and cancelled(cancel):
            out.cancelled = True
            notes.append(f"{backend}: cancelled before batch {b}")
            break
        if adaptive and (prev is not None or i):
            why_not = _wont_fit(budget, b, prev, plan.budget_s, create_s)
            if why_not:
                notes.append(f"{backend}: batch {b} not started: {why_not}; not run: "
                             f"{sizes[i:]} (raise budget_s)")
                out.stopped_for_budget = True
                break
            # The time left is shared by the sizes that can still fit, not by all
            # sizes left: the larger ones cost more per run.
            budget.points = budget.done + _sizes_that_fit(budget, sizes[i:], prev)
        elif adaptive and budget.spent():
            # Nothing is known of a run before one ran: the first size still gets a
            # warm-up and one timed run, so the call returns a measurement.
            notes.append(f"{backend}: the budget ({plan.budget_s:g} s) was spent before "
                         f"batch {b} ({time.perf_counter() - plan.t_start:.2f} s since the "
                         f"call, creating the session took {create_s:.2f} s): batch {b} "
                         f"runs once; not run: {sizes[1:]} (raise budget_s)")
            out.stopped_for_budget = True
        t_point = time.perf_counter()
        watch = MemoryWatch() if b_rows else watch
        if b not in feeds:
            feeds[b] = make_feeds(lm, {**plan.dims, dim: int(b)}, plan.shapes)
        feed_s = time.perf_counter() - t_point
        # The prediction before the runs: its cost is unknown until it ran once (the
        # cost model's shape inference: 0.2-0.4 s on YOLOv8n, seconds under load), and
        # this way the runs get what it leaves.
        t_pred = time.perf_counter()
        predicted = float("nan")
        if plan.predict is not None and not (adaptive and budget.spent()):
            predicted = float(plan.predict(int(b)))
        elif plan.predict is not None:
            notes.append(f"{backend}: batch {b}: no time left in the budget for the "
                         "cost model's prediction (predicted_activation_bytes NaN)")
        pred_s = time.perf_counter() - t_pred
        prev_feed = feeds.get(b_rows[-1]["batch"]) if adaptive and b_rows else None
        try:
            ms, _why, first_ms, ms_prev = _time_point(
                sess, feeds[b], plan.runs, plan.warmup, budget, plan.reporter, cancel,
                plan.rel_ci, t_point=t0 if not b_rows else t_point, prev_feed=prev_feed)
        except Exception as e:  # noqa: BLE001 - ORT raises several types (OOM, shape)
            # the point's first run is checked: onnxruntime's own words are its cause
            why = e.__cause__ if isinstance(e, RuntimeLoadError) and e.__cause__ else e
            notes.append(f"{backend}: batch {b} failed: {str(why).splitlines()[0][:200]}")
            break
        finally:
            # a large batch's inputs are not kept; the previous size's are, for the
            # next size's interleaved runs
            for old in [x for x in feeds if x < b]:
                del feeds[old]
        budget.next()
        if not len(ms):
            break
        mem = watch.stop()
        st = _stats(ms)
        prev = (int(b), PointCost(fixed_s=pred_s,
                                  scaled_s=feed_s, first_ms=first_ms,
                                  run_ms=st["p50_ms"],
                                  paired_ms=st["p50_ms"] if adaptive else 0.0))
        steps.append(None if ms_prev is None or not len(ms_prev)
                     else (ms_prev / b_rows[-1]["batch"], ms / b))
        if adaptive and st["runs"] < MIN_POINT_RUNS:
            notes.append(f"{backend}: batch {b}: only {st['runs']} timed run(s) fit in "
                         f"the budget (raise budget_s for a median with an interval)")
        out.samples.append(ms / b)  # latency per item: what a gain is about
        b_rows.append(_point_row(b, st, backend, mem, rss0, predicted))
        knee, _g = _knee(b_rows, steps)
        if out.stopped_for_budget:
            break
        if plan.stop_at_knee and knee is not None and b != sizes[-1]:
            skipped = [x for x in sizes if x > b]
            notes.append(f"{backend}: stopped past the knee ({knee}); "
                         f"not run: {skipped}")
            break
    del sess
    return out


def _point_row(b: int, st: dict[str, float], backend: str, mem: dict, rss0: int,
               predicted: float) -> dict:
    """The table row of batch size ``b`` from its run statistics ``st``."""
    return {"batch": int(b), "latency_ms": st["p50_ms"],
            "mean_ms": st["mean_ms"], "p90_ms": st["p90_ms"],
            "std_ms": st["std_ms"], "items_per_s": b / (st["p50_ms"] / 1e3),
            "backend": backend, "runs": st["runs"],
            "p10_ms": st["p10_ms"], "ci_low_ms": st["ci_low_ms"],
            "ci_high_ms": st["ci_high_ms"], "rel_ci": st["rel_ci"],
            "items_per_s_low": b / (st["ci_high_ms"] / 1e3),
            "items_per_s_high": b / (st["ci_low_ms"] / 1e3),
            "peak_rss_bytes": mem["peak_rss_bytes"],
            "rss_growth_bytes": mem["peak_rss_bytes"] - rss0,
            "predicted_activation_bytes": predicted}


def _backend_table(run: _BackendRun, backend: str, is_cancelled: bool, notes: list[str]
                   ) -> tuple[str, pd.DataFrame, int | None]:
    """(the backend's name, its table with the gains per doubling, its knee); notes on a
    missing knee and a busy machine."""
    b_rows, samples, steps = run.rows, run.samples, run.steps
    table_b = pd.DataFrame(b_rows) if b_rows else pd.DataFrame(columns=_SWEEP_COLUMNS)
    knee, gains = _knee(b_rows, steps)
    beyond = [None] + [compare_samples(*(steps[i] or (samples[i - 1], samples[i])))
                       .different for i in range(1, len(samples))]
    table_b = table_b.assign(gain_per_doubling=gains if len(table_b) else [],
                             gain_beyond_noise=beyond if len(table_b) else [])
    name = table_b.backend.iloc[0] if len(table_b) else backend
    if knee is None and len(table_b) and not is_cancelled:
        last = int(table_b.batch.iloc[-1])
        if run.stopped_for_budget:
            notes.append(f"{name}: no knee found: batch {last} is the largest that fit "
                         "in the budget (raise budget_s)")
        elif len(table_b) > 1:
            notes.append(f"{name}: throughput still grows >= {KNEE_GAIN}x per doubling "
                         f"at batch {last}: try larger batches")
    notes.extend(_busy(samples, name))
    return name, table_b, knee


def _knee(rows: Sequence[dict], steps: Sequence[tuple[np.ndarray, np.ndarray] | None]
          ) -> tuple[int | None, list[float]]:
    """(knee, gain per doubling of each size): :func:`find_knee` on the rows' throughput, or,
    for a size timed interleaved with the previous one, on the throughput ratio of those
    interleaved runs (the medians of their per-item ms)."""
    batches = [r["batch"] for r in rows]
    if not any(st is not None for st in steps):
        return find_knee(batches, [r["items_per_s"] for r in rows])
    gains = [float("nan")]
    knee = None
    for i in range(1, len(rows)):
        st = steps[i]
        if st is None:
            ratio = rows[i]["items_per_s"] / rows[i - 1]["items_per_s"]
        else:
            ratio = float(np.median(st[0]) / np.median(st[1]))
        doublings = math.log2(batches[i] / batches[i - 1])
        g = ratio ** (1.0 / doublings) if ratio > 0 else float("nan")
        gains.append(g)
        if knee is None and g == g and g < KNEE_GAIN:
            knee = int(batches[i - 1])
    return knee, gains


def _sizes_that_fit(budget: Budget, rest: Sequence[int], prev: tuple[int, PointCost] | None
                    ) -> int:
    """How many of the sizes ``rest``, in order, fit in what is left at their minimum cost
    (at least 1)."""
    if prev is None or budget.total_s is None:
        return max(len(rest), 1)
    pb, cost = prev
    left, n = budget.left() or 0.0, 0
    for b in rest:
        left -= cost.estimate(b / pb, MIN_POINT_RUNS)
        if left < 0:
            break
        n += 1
    return max(n, 1)


def _wont_fit(budget: Budget, b: int, prev: tuple[int, PointCost] | None, budget_s: float,
              create_s: float) -> str:
    """Why batch ``b`` cannot be started in what is left of ``budget`` ('' when it can): its
    warm-up and :data:`MIN_POINT_RUNS` runs estimated from the previous size's."""
    left = budget.left() or 0.0
    if prev is None:  # the previous size failed to give a time: nothing to scale from
        return "" if left > 0 else f"the {budget_s:g} s budget is spent"
    pb, cost = prev
    est = cost.estimate(b / pb, MIN_POINT_RUNS)
    if budget.fits(est):
        return ""
    return (f"its warm-up and {MIN_POINT_RUNS} runs need ~{est:.2f} s (runs of ~"
            f"{cost.run_ms * b / pb:.3g} ms, scaled from batch {pb}) and {left:.2f} s of the "
            f"{budget_s:g} s budget are left")


_SWEEP_COLUMNS = ["batch", "latency_ms", "mean_ms", "p90_ms", "std_ms", "items_per_s",
                  "gain_per_doubling", "backend", "runs", "p10_ms", "ci_low_ms", "ci_high_ms",
                  "rel_ci", "items_per_s_low", "items_per_s_high", "gain_beyond_noise",
                  "peak_rss_bytes", "rss_growth_bytes", "predicted_activation_bytes"]


def _backends(providers: Any) -> list[str]:
    """ORT providers and OpenVINO backends, validated (default CPU)."""
    if providers is None:
        return ["CPUExecutionProvider"]
    names = [p.strip() for p in providers.split(",")] if isinstance(providers, str) \
        else list(providers)
    out: list[str] = []
    for n in names:
        full = ([f"{BACKEND_PREFIX}:{openvino_device(n)}"] if is_openvino(n)
                else resolve_providers([n]))
        out.extend(f for f in full if f not in out)
    return out


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


def compare_models(a: Any, b: Any, *, runs: int | None = None, warmup: int = 3,
                   budget_s: float = 4.0, feeds: Any = None,
                   dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None,
                   providers: str | Sequence[str] | None = None, opt_level: str = "all",
                   threads: int | None = None, labels: tuple[str, str] = ("A", "B"),
                   cancel: Any = None):
    """Is model ``b`` faster or slower than ``a`` beyond the noise?

    Both sessions run interleaved (a, b, a, b...), so a change of load on the machine hits
    both alike, until both medians are stable or ``budget_s`` (from the call to the result,
    the sessions and warm-up included) is spent (or ``runs`` each).
    The feeds are made for ``a`` (both models must take the same inputs).

    Returns:
        A :class:`~onnx_lab.profiling.stats.Difference` (``.text``: the verdict in words,
        e.g. "no difference beyond noise between A and B (...)").

    Example:
        >>> compare_models("sample:convnet", "sample:convnet").different
        False
    """
    perf = time.perf_counter
    t_start = perf()
    _check_budget(runs, warmup, budget_s)
    la, dims_a, shapes_a = resolve(a, dims, shapes)
    lb, _, _ = resolve(b, dims, shapes)
    feed = as_feed_list(feeds, la, dims_a, shapes_a)[0]
    sa = make_session(la, providers=providers, opt_level=opt_level, threads=threads,
                      config_entries=NO_SPIN)
    sb = make_session(lb, providers=providers, opt_level=opt_level, threads=threads,
                      config_entries=NO_SPIN)
    last = 0.0  # seconds of the latest round: the estimate of the next one
    checked = False  # each session's first run is checked (a failure translated)
    for i in range(warmup):
        if i and runs is None and perf() + last > t_start + budget_s:
            break
        t = perf()
        if checked:
            sa.run(None, feed)
            sb.run(None, feed)
        else:
            run_session(sa, feed, what=f"model {labels[0]}")
            run_session(sb, feed, what=f"model {labels[1]}")
            checked = True
        last = perf() - t
    xa, xb = [], []
    limit = runs if runs is not None else 2000
    while len(xa) < limit:
        if xa and cancelled(cancel):
            break
        if xa and runs is None and perf() + (xa[-1] + xb[-1]) / 1e3 > t_start + budget_s:
            break
        for sess, out, label in ((sa, xa, labels[0]), (sb, xb, labels[1])):
            t = perf()
            if checked:
                sess.run(None, feed)
            else:
                run_session(sess, feed, what=f"model {label}")
            out.append((perf() - t) * 1e3)
        checked = True
        if runs is None:
            if perf() - t_start >= budget_s and len(xa) >= 3:
                break
            if len(xa) >= 20 and len(xa) % 5 == 0 and stable(np.array(xa)) \
                    and stable(np.array(xb)):
                break
    return compare_samples(np.array(xa), np.array(xb), labels=labels)
