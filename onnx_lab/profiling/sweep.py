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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.source import resolve
from onnx_lab.errors import DimError, InputError
from onnx_lab.profiling.run import _check_counts

__all__ = ["levels", "batch_sweep", "thread_sweep", "BatchSweep", "KNEE_GAIN"]

# Doubling the batch must raise throughput by at least this factor to be worth it.
KNEE_GAIN = 1.2


def _time_runs(sess, feed: dict, runs: int, warmup: int, reporter: Progress) -> np.ndarray:
    """Wall ms of ``runs`` timed runs after ``warmup`` untimed ones."""
    run = sess.run
    for _ in range(warmup):
        run(None, feed)
        reporter.update()
    out = np.empty(runs)
    perf = time.perf_counter
    for i in range(runs):
        t = perf()
        run(None, feed)
        out[i] = (perf() - t) * 1e3
        reporter.update()
    return out


def _stats(ms: np.ndarray) -> dict[str, float]:
    return {"mean_ms": float(ms.mean()), "p50_ms": float(np.percentile(ms, 50)),
            "p90_ms": float(np.percentile(ms, 90)), "std_ms": float(ms.std())}


def levels(model: Any, *, runs: int = 20, warmup: int = 3, feeds: Any = None,
           dims: Mapping[str, int] | None = None, shapes: Mapping[str, Sequence[int]] | None = None,
           providers: str | Sequence[str] | None = None, threads: int | None = None,
           progress: Any = None) -> pd.DataFrame:
    """Session init time, latency and node count at each ORT optimization level.

    Args:
        model: a Lab, LabModel, path or ``"sample:NAME"``.
        runs, warmup: timed and untimed runs per level.
        feeds, dims, shapes: inputs as for :func:`onnx_lab.profile`.
        providers: one provider (default CPU).
        threads: intra-op threads.
        progress: None (bar in terminals), False, or ``callable(done, total, label)``.

    Returns:
        DataFrame, one row per level (disable, basic, extended, all): opt_level, init_ms (wall
        time of creating the session), mean_ms, p50_ms, p90_ms, std_ms, nodes (in ORT's
        optimized graph, main graph), nodes_model (main graph of the model), speedup (mean_ms
        of 'disable' / mean_ms).

    Example:
        >>> levels("sample:convnet", runs=10)[["opt_level", "nodes", "mean_ms"]]
    """
    from onnx_lab.runtime.feeds import as_feed_list
    from onnx_lab.runtime.session import OPT_LEVELS, make_session

    _check_counts(runs, warmup)
    lm, dims, shapes = resolve(model, dims, shapes)
    feed = as_feed_list(feeds, lm, dims, shapes)[0]
    rows = []
    nested = any(g != "" for g in lm.index.graphs)
    reporter = Progress(progress, len(OPT_LEVELS) * (runs + warmup), "levels", min_steps=20)
    try:
        with tempfile.TemporaryDirectory(prefix="onnx_lab_levels_") as tmp:
            for level in OPT_LEVELS:
                # One session per level: created with the profiler on (as cheap as without)
                # so that one profiled run lists the kernels of ORT's optimized graph, then
                # the profiler is ended before the timed runs. Writing the optimized model
                # from a second session (its weights re-serialized) cost 2-3 s per level on
                # BERT-base; it is kept for models with subgraphs, whose nodes the trace
                # does not tell apart from the main graph's.
                t0 = time.perf_counter()
                sess = make_session(lm, providers=providers, opt_level=level, threads=threads,
                                    profile=not nested,
                                    profile_prefix=str(Path(tmp) / f"levels_{level}"))
                init_ms = (time.perf_counter() - t0) * 1e3
                if nested:
                    nodes = _written_node_count(lm, level, providers, threads, Path(tmp))
                else:
                    sess.run(None, feed)
                    nodes = _traced_node_count(sess.end_profiling())
                ms = _time_runs(sess, feed, runs, warmup, reporter)
                rows.append({"opt_level": level, "init_ms": init_ms, **_stats(ms),
                             "nodes": nodes, "nodes_model": lm.graph.num_nodes()})
    finally:
        reporter.close()
    df = pd.DataFrame(rows)
    return df.assign(speedup=df.mean_ms.iloc[0] / df.mean_ms)


def _traced_node_count(trace_file: str) -> int:
    """Distinct kernels (nodes of ORT's optimized graph) in a one-run profiler trace."""
    from onnx_lab.profiling.parse import _KERNEL_SUFFIX, load_columns

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

    from onnx_lab.runtime.session import make_session

    path = tmp / f"{level}.onnx"
    make_session(lm, providers=providers, opt_level=level, threads=threads,
                 optimized_model_path=str(path))
    return len(onnx.load(str(path), load_external_data=False).graph.node)


@dataclass
class BatchSweep:
    """Result of :func:`batch_sweep`.

    Attributes:
        table: one row per batch size: batch, latency_ms (median of the runs), mean_ms,
            p90_ms, std_ms, items_per_s (batch / latency_ms), gain_per_doubling (throughput
            ratio to the previous batch, per doubling of the batch).
        knee: the first batch where doubling gains less than ``KNEE_GAIN`` (1.2x) throughput,
            or None when every step still gains.
        dim: the dim that was swept.
        notes: why a batch was skipped (out of memory, failure).
    """

    table: pd.DataFrame
    knee: int | None
    dim: str
    notes: list[str] = field(default_factory=list)

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
                dim: str = "batch", runs: int = 20, warmup: int = 3,
                dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None,
                providers: str | Sequence[str] | None = None, threads: int | None = None,
                opt_level: str = "all", progress: Any = None) -> BatchSweep:
    """Latency and throughput for each batch size, and the knee of the throughput curve.

    One session (the model keeps its dynamic batch dim) runs seeded inputs of each size.

    Args:
        model: a Lab, LabModel, path or ``"sample:NAME"`` with a symbolic dim ``dim``.
        batch_sizes: increasing positive sizes.
        dim: the symbolic dim to sweep (``"batch"``, ``"N"``...).
        runs, warmup: timed and untimed runs per size.
        dims, shapes: values of the other dynamic dims.
        providers, threads, opt_level: session settings (default CPU, ORT threads, 'all').
        progress: None (bar in terminals), False, or ``callable(done, total, label)``.

    Raises:
        DimError: the model has no dynamic dim ``dim`` (fix its other dims with ``dims``/
            ``shapes``, or make the batch symbolic with ``lab.set_input_shape``), or other dims
            are unresolved.
        InputError: bad batch sizes, runs or warmup.

    Example:
        >>> s = batch_sweep("sample:transformer_block", (1, 2, 4), dims={"seq": 16})
        >>> s.table[["batch", "items_per_s"]]
    """
    from onnx_lab.core.shapes import dynamic_dims
    from onnx_lab.runtime.feeds import make_feeds
    from onnx_lab.runtime.session import make_session

    _check_counts(runs, warmup)
    sizes = list(batch_sizes)
    if not sizes or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b <= 0
                        for b in sizes) or sorted(set(sizes)) != sizes:
        raise InputError(f"batch_sizes must be increasing positive ints, got {sizes!r}.",
                         fix="Use e.g. (1, 2, 4, 8, 16, 32).")
    lm, dims, shapes = resolve(model, dims, shapes)
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
    rows, notes = [], []
    sess = make_session(lm, providers=providers, opt_level=opt_level, threads=threads)
    reporter = Progress(progress, len(sizes) * (runs + warmup), "batch sweep", min_steps=20)
    try:
        for b in sizes:
            feed = make_feeds(lm, {**dims, dim: int(b)}, shapes)
            try:
                ms = _time_runs(sess, feed, runs, warmup, reporter)
            except Exception as e:  # noqa: BLE001 - ORT raises several types (OOM, shape)
                notes.append(f"batch {b} failed: {str(e).splitlines()[0][:200]}")
                break
            st = _stats(ms)
            # The median resists the outliers other processes cause; the mean is kept too.
            rows.append({"batch": int(b), "latency_ms": st["p50_ms"], "mean_ms": st["mean_ms"],
                         "p90_ms": st["p90_ms"], "std_ms": st["std_ms"],
                         "items_per_s": b / (st["p50_ms"] / 1e3)})
    finally:
        reporter.close()
    table = pd.DataFrame(rows, columns=["batch", "latency_ms", "mean_ms", "p90_ms", "std_ms",
                                        "items_per_s"])
    knee, gains = find_knee(table.batch.tolist(), table.items_per_s.tolist())
    table = table.assign(gain_per_doubling=gains if len(table) else [])
    if knee is None and len(table):
        notes.append(f"throughput still grows >= {KNEE_GAIN}x per doubling at batch "
                     f"{int(table.batch.iloc[-1])}: try larger batches")
    return BatchSweep(table=table, knee=knee, dim=dim, notes=notes)


def thread_sweep(model: Any, threads: Sequence[int] = (1, 2, 4), *, runs: int = 20,
                 warmup: int = 3, feeds: Any = None, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 providers: str | Sequence[str] | None = None, opt_level: str = "all",
                 progress: Any = None) -> pd.DataFrame:
    """Latency per intra-op thread count.

    Returns:
        DataFrame(threads, mean_ms, p50_ms, p90_ms, std_ms, speedup (vs the first row)).

    Example:
        >>> thread_sweep("sample:convnet", (1, 2), runs=10)
    """
    from onnx_lab.runtime.feeds import as_feed_list
    from onnx_lab.runtime.session import make_session

    _check_counts(runs, warmup)
    counts = list(threads)
    if not counts or any(not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t <= 0
                         for t in counts):
        raise InputError(f"threads must be positive ints, got {counts!r}.",
                         fix="Use e.g. (1, 2, 4).")
    lm, dims, shapes = resolve(model, dims, shapes)
    feed = as_feed_list(feeds, lm, dims, shapes)[0]
    rows = []
    reporter = Progress(progress, len(counts) * (runs + warmup), "thread sweep", min_steps=20)
    try:
        for t in counts:
            sess = make_session(lm, providers=providers, opt_level=opt_level, threads=int(t))
            rows.append({"threads": int(t), **_stats(_time_runs(sess, feed, runs, warmup,
                                                                reporter))})
    finally:
        reporter.close()
    df = pd.DataFrame(rows)
    return df.assign(speedup=df.mean_ms.iloc[0] / df.mean_ms)
