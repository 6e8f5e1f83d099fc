"""Batch-size sweep: latency, throughput and memory per batch size and backend, with the
throughput knee.

Example:
    >>> from onnx_lab.profiling import batch_sweep
    >>> sweep = batch_sweep("sample:transformer_block", (1, 2, 4, 8), dims={"seq": 16})
    >>> sweep.knee, sweep.table
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd, prefetch
from onnx_lab._progress import Progress
from onnx_lab.core.shapes import dynamic_dims, shape_tuple
from onnx_lab.core.source import resolve
from onnx_lab.errors import DimError, InputError, RuntimeLoadError
from onnx_lab.profiling._sweep_common import (
    BATCH_BUDGET_S,
    KNEE_GAIN,
    _busy,
    _check_budget,
    _stats,
    _time_point,
)
from onnx_lab.profiling._timing import (
    MIN_POINT_RUNS,
    Budget,
    MemoryWatch,
    PointCost,
    cancelled,
)
from onnx_lab.profiling.run import open_session
from onnx_lab.profiling.stats import (
    STABLE_REL_CI,
    compare_samples,
)
from onnx_lab.runtime.feeds import make_feeds
from onnx_lab.runtime.openvino import BACKEND_PREFIX, is_openvino, openvino_device
from onnx_lab.runtime.session import resolve_providers

__all__ = ["batch_sweep", "BatchSweep", "find_knee"]


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
        return _display.notebook_html(_display.draw(self, "html"))


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
        if not named and dyn.get("?"):
            # every scikit-learn / LightGBM export: X [None, 6] — dynamic, but unnamed (it
            # read "its inputs have fixed shapes")
            first = next(v for v in lm.graph.inputs if v.name == dyn["?"][0])
            shape = [None if not (isinstance(d, int) and d >= 0) else d
                     for d in (shape_tuple(first.shape) or ())]
            named_shape = list(shape) if None in shape else [None]
            named_shape[named_shape.index(None)] = dim
            raise DimError(
                f"The model has no dynamic dim {dim!r} to sweep: its dynamic dims are "
                f"unnamed ({', '.join(repr(n) for n in dyn['?'])}; {first.name} "
                f"{shape}), so nothing says which one {dim!r} is.",
                fix=f"Name it first: lab.set_input_shape({first.name!r}, {named_shape!r}) "
                "for each input that has it (on a Lab opened with its input shapes, so the "
                "step is verified), then sweep it; give the other dims with dims={...} or "
                "shapes={...}.")
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
        # adaptive: each timed run of the next size is two of its own and two of this one
        twice = 2.0 if adaptive else 1.0
        prev = (int(b), PointCost(fixed_s=pred_s,
                                  scaled_s=feed_s, first_ms=first_ms,
                                  run_ms=twice * st["p50_ms"],
                                  paired_ms=twice * st["p50_ms"] if adaptive else 0.0))
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
