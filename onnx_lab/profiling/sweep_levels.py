"""Sweep of onnxruntime's graph optimization levels: one interleaved race of a session per
level, with the node count each level leaves.

Example:
    >>> from onnx_lab.profiling import levels
    >>> levels("sample:convnet", runs=10)
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_lab._pandas import pd, prefetch
from onnx_lab._progress import Progress
from onnx_lab.core.source import resolve
from onnx_lab.profiling._sweep_common import (
    LEVELS_BUDGET_S,
    NO_SPIN,
    _busy,
    _check_budget,
    _interleaved,
    _stats,
    _verdicts,
)
from onnx_lab.profiling._timing import (
    MIN_POINT_RUNS,
    Budget,
    cancelled,
)
from onnx_lab.profiling.parse import _KERNEL_SUFFIX, load_columns
from onnx_lab.profiling.stats import STABLE_REL_CI
from onnx_lab.runtime.feeds import as_feed_list
from onnx_lab.runtime.session import OPT_LEVELS, make_session, run_session

__all__ = ["levels"]


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
        optimized graph, the nodes of If/Loop/Scan bodies included), nodes_model (of the
        model, bodies included), speedup (p50_ms
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
                             "nodes_model": len(lm.index), "_first_ms": first_ms})
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
    """Nodes of ORT's optimized graph, written by a second session: the main graph's and
    those of every If/Loop/Scan body (ORT fuses inside bodies as in the main graph)."""
    import onnx

    path = tmp / f"{level}.onnx"
    make_session(lm, providers=providers, opt_level=level, threads=threads,
                 optimized_model_path=str(path))
    return _graph_nodes(onnx.load(str(path), load_external_data=False).graph)


def _graph_nodes(graph) -> int:
    """Nodes of an ``onnx.GraphProto`` and of the bodies its nodes hold."""
    count, graphs = 0, [graph]
    while graphs:
        g = graphs.pop()
        count += len(g.node)
        for n in g.node:
            for a in n.attribute:
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)
    return count
