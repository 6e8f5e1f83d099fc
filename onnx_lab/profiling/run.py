"""Per-operator profiling with onnxruntime's profiler, on every provider that can run the model.

Example:
    >>> import onnx_lab
    >>> p = onnx_lab.profile("sample:convnet", runs=20, warmup=2)
    >>> p.ops.head()
    >>> p.latency_stats
"""

from __future__ import annotations

import logging
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
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.errors import InputError, ProviderError, RuntimeLoadError
from onnx_lab.profiling.parse import Trace, parse_trace
from onnx_lab.runtime.session import default_providers, fallback_chain

logger = logging.getLogger(__name__)

__all__ = ["profile", "Profile"]

# Providers profiled by default, when this onnxruntime build has them.

NODE_COLUMNS = ["session", "node_id", "provider", "op_type", "calls", "mean_ms", "median_ms",
                "p90_ms", "total_ms", "share", "mapped", "ort_name", "components", "how"]
OP_COLUMNS = ["session", "provider", "op_type", "count", "calls", "total_ms", "share", "mean_ms"]
LATENCY_COLUMNS = ["session", "run", "wall_ms", "warmup"]
STATS_COLUMNS = ["session", "runs", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms",
                 "std_ms", "kernel_ms", "ort_run_ms"]
SESSION_COLUMNS = ["session", "providers", "opt_level", "load_ms", "init_ms", "create_ms",
                   "nodes_run"]


def _check_counts(runs: Any, warmup: Any) -> None:
    if not isinstance(runs, (int, np.integer)) or isinstance(runs, bool) or runs <= 0:
        raise InputError(f"runs must be a positive int, got {runs!r}.",
                         fix="Use runs=1 or more (50 gives stable percentiles).")
    if not isinstance(warmup, (int, np.integer)) or isinstance(warmup, bool) or warmup < 0:
        raise InputError(f"warmup must be an int >= 0, got {warmup!r}.",
                         fix="Use warmup=0 or more (5 skips allocation and tuning runs).")


@dataclass
class Profile:
    """The result of :func:`profile`.

    Attributes:
        nodes: one row per node ORT ran, per session: session (the provider profiled),
            node_id (model node; ORT's name when unmapped), provider (that ran the kernel),
            op_type (the kernel's op, e.g. FusedConv), calls (per run), mean_ms, median_ms,
            p90_ms (per call), total_ms (per run), share (of the session's kernel time),
            mapped (bool), ort_name, components (model node ids a fused node covers), how
            ('name', 'index', 'fused', 'inserted', 'unmapped').
        ops: per session, provider and op_type: count (nodes), calls (per run), total_ms (per
            run), share, mean_ms (per call).
        latency: per run: session, run, wall_ms (Python ``perf_counter`` around
            ``session.run``), warmup (bool).
        latency_stats: per session: runs, mean_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms,
            std_ms, kernel_ms (sum of kernel time per run), ort_run_ms (ORT's run time).
        session: per session: providers, opt_level, load_ms and init_ms (ORT's Session
            events), create_ms (wall time of creating the session), nodes_run.
        kernels: every kept kernel call (session, ort_name, op_type, provider, run, dur_us...).
        notes: skipped providers and anything unusual.
    """

    model: LabModel
    nodes: pd.DataFrame
    ops: pd.DataFrame
    latency: pd.DataFrame
    latency_stats: pd.DataFrame
    session: pd.DataFrame
    kernels: pd.DataFrame
    runs: int
    warmup: int
    opt_level: str
    notes: list[str] = field(default_factory=list)
    trace_paths: dict[str, str] = field(default_factory=dict)

    def overlay(self, session: str | None = None) -> pd.Series:
        """Per-run time_ms of each mapped model node (fused nodes on their primary node)."""
        df = self.nodes.loc[self.nodes.mapped]
        if session is not None:
            df = df.loc[df.session == session]
        elif len(df):
            df = df.loc[df.session == df.session.iloc[0]]
        s = df.groupby("node_id")["total_ms"].sum()
        s.name = "time_ms"
        return s

    def coverage(self, session: str | None = None) -> pd.DataFrame:
        """Where each model node went in ORT's graph.

        Returns:
            DataFrame, one row per model node: node_id, op_type, status ('ran': an ORT node
            of its own, 'fused': part of another ORT node, 'removed': optimized away, e.g. an
            Identity or a constant-folded node), ort_name (the ORT node that ran it), time_ms
            (per run of that ORT node; shared by all members of a fusion).
        """
        df = self.nodes
        if session is not None:
            df = df.loc[df.session == session]
        elif len(df):
            df = df.loc[df.session == df.session.iloc[0]]
        ran: dict[str, tuple[str, str, float]] = {}
        for r in df.loc[df.mapped].itertuples():
            for c in r.components or (r.node_id,):
                status = "ran" if c == r.node_id else "fused"
                if c not in ran or ran[c][0] == "fused":
                    ran[c] = (status, r.ort_name, float(r.total_ms))
        rows = []
        for nid, e in self.model.index.entries.items():
            status, ort_name, ms = ran.get(nid, ("removed", None, float("nan")))
            rows.append((nid, e.node.op_type, status, ort_name, ms))
        return pd.DataFrame(rows, columns=["node_id", "op_type", "status", "ort_name", "time_ms"])

    def plot(self, top: int = 15):
        """A matplotlib Figure: op-type share, the top-N nodes, the latency histogram."""
        return _display.draw(self, "plot", top=top)

    def render(self, session: str | None = None, **kw: Any):
        """The graph with each node coloured by its time (``render_model(overlay=...)``)."""
        return _display.draw(self, "render", session, **kw)

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        """JSON-friendly summary (used by the CLI)."""
        return {
            "runs": self.runs, "warmup": self.warmup, "opt_level": self.opt_level,
            "latency": self.latency_stats.to_dict(orient="records"),
            "session": self.session.to_dict(orient="records"),
            "ops": self.ops.to_dict(orient="records"),
            "nodes": self.nodes.drop(columns=["components"]).assign(
                components=self.nodes.components.map(list)).head(top).to_dict(orient="records")
            if len(self.nodes) else [],
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        parts = [f"{r.session}: mean {r.mean_ms:.3f} ms, p90 {r.p90_ms:.3f} ms"
                 for r in self.latency_stats.itertuples()]
        return f"<Profile {self.runs} runs ({'; '.join(parts)})>"

    def _repr_html_(self) -> str:
        return _display.draw(self, "html")


def profile(model: Any, *, providers: str | Sequence[str] | None = None, runs: int = 50,
            warmup: int = 5, feeds: Any = None, dims: Mapping[str, int] | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None, threads: int | None = None,
            opt_level: str = "all", progress: Any = None, map_fused: bool = True,
            keep_trace: bool = False) -> Profile:
    """Profile a model per operator with onnxruntime's profiler.

    Each provider gets its own session (device providers fall back to CPU for ops they cannot
    run). The first ``warmup`` runs are run and dropped; ``runs`` more are timed both by ORT
    (per kernel) and by ``time.perf_counter`` around each ``session.run`` (wall latency).

    Args:
        model: a Lab, LabModel, path, bytes, ModelProto or ``"sample:NAME"``.
        providers: names such as ``"cpu"``, ``["CUDAExecutionProvider"]``; None profiles every
            installed one of CPU, CUDA and TensorRT (the missing ones are noted and skipped,
            as are device providers that cannot load the model).
        runs: timed runs (>= 1). warmup: runs dropped first (>= 0).
        feeds: None (seeded random inputs), a dict, a list of dicts (cycled) or an ``.npz``.
        dims, shapes: values for dynamic dims (merged over a Lab's).
        threads: intra-op threads (None: ORT's default).
        opt_level: ORT graph optimization level: disable, basic, extended, all.
        progress: None (a bar in terminals), False (silent) or ``callable(done, total, label)``.
        map_fused: also let ORT write its optimized graph so fused nodes map to all the model
            nodes they cover (small cost at session creation).
        keep_trace: keep ORT's JSON files (paths in ``trace_paths``).

    Returns:
        A :class:`Profile`.

    Raises:
        InputError: runs <= 0, warmup < 0, bad feeds or opt_level.
        ProviderError: an unknown provider or one this onnxruntime lacks (names the installed).
        DimError: dynamic dims without values.
        RuntimeLoadError: an explicitly requested provider cannot load the model.

    Example:
        >>> p = onnx_lab.profile("sample:convnet", runs=10, warmup=2)
        >>> p.nodes[["node_id", "op_type", "total_ms", "share"]].head()
    """
    from onnx_lab.runtime.feeds import as_feed_list
    from onnx_lab.runtime.session import OPT_LEVELS, resolve_providers

    _check_counts(runs, warmup)
    if opt_level not in OPT_LEVELS:
        raise InputError(f"Unknown optimization level {opt_level!r}.",
                         fix=f"Use one of {', '.join(OPT_LEVELS)}.")
    lm, dims, shapes = resolve(model, dims, shapes)
    notes: list[str] = []
    if providers is None:
        provs, skipped = default_providers()
        notes.extend(skipped)
        explicit = False
    else:
        provs = resolve_providers(providers)
        explicit = True
    feed_list = as_feed_list(feeds, lm, dims, shapes)

    tmp = tempfile.TemporaryDirectory(prefix="onnx_lab_prof_")
    results = []
    trace_paths: dict[str, str] = {}
    reporter = Progress(progress, len(provs) * (int(runs) + int(warmup)), "profiling", min_steps=20)
    try:
        for p in provs:
            try:
                res = _profile_one(lm, p, int(runs), int(warmup), feed_list, threads, opt_level,
                                   Path(tmp.name), map_fused, reporter)
            except RuntimeLoadError as e:
                if explicit or p == "CPUExecutionProvider":
                    raise
                notes.append(f"{p} cannot load the model ({e.problem}); skipped")
                continue
            results.append(res)
            if keep_trace:
                keep = Path(tempfile.mkdtemp(prefix="onnx_lab_trace_")) / Path(res["trace"]).name
                Path(res["trace"]).replace(keep)
                trace_paths[p] = str(keep)
    finally:
        reporter.close()
        tmp.cleanup()
    if not results:
        raise ProviderError("No provider could profile the model.", fix="; ".join(notes))
    return _assemble(lm, results, int(runs), int(warmup), opt_level, notes, trace_paths)


def _profile_one(lm: LabModel, provider: str, runs: int, warmup: int, feed_list, threads,
                 opt_level: str, tmp: Path, map_fused: bool, reporter: Progress) -> dict:
    from onnx_lab.runtime.session import make_session

    short = provider.replace("ExecutionProvider", "").lower()
    # Compiled providers (TensorRT) cannot serialize their optimized graph.
    write_opt = (map_fused and opt_level != "disable"
                 and provider != "TensorrtExecutionProvider")
    opt_path = tmp / f"{short}_optimized.onnx" if write_opt else None
    t0 = time.perf_counter()
    sess = make_session(lm, providers=fallback_chain(provider), opt_level=opt_level,
                        threads=threads, profile=True, profile_prefix=str(tmp / f"ort_{short}"),
                        optimized_model_path=str(opt_path) if opt_path else None)
    create_ms = (time.perf_counter() - t0) * 1e3
    n = len(feed_list)
    wall = np.empty(warmup + runs)
    run = sess.run
    perf = time.perf_counter
    try:
        for i in range(warmup + runs):
            f = feed_list[i % n]
            t = perf()
            run(None, f)
            wall[i] = perf() - t
            reporter.update()
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        sess.end_profiling()
        raise RuntimeLoadError(f"onnxruntime failed running the model on {provider}: "
                               f"{str(e).splitlines()[0][:300]}",
                               fix="Check the feeds (dtype/shape) and lab.check().") from e
    trace_file = sess.end_profiling()
    optimized = None
    if opt_path is not None and opt_path.exists():
        import onnx

        # Structure only: weights are not needed to follow tensor names.
        optimized = onnx.load(str(opt_path), load_external_data=False)
    return {"provider": provider, "providers": sess.get_providers(), "create_ms": create_ms,
            "wall_ms": wall * 1e3, "trace": trace_file, "parsed": parse_trace(trace_file,
                                                                              warmup=warmup),
            "optimized": optimized}


def _assemble(lm: LabModel, results: list[dict], runs: int, warmup: int, opt_level: str,
              notes: list[str], trace_paths: dict[str, str]) -> Profile:
    from onnx_lab.profiling._mapping import map_ort_nodes

    node_frames, op_frames, lat_frames, stat_rows, sess_rows, kern_frames = [], [], [], [], [], []
    for res in results:
        p = res["provider"]
        trace: Trace = res["parsed"]
        notes.extend(f"{p}: {n}" for n in trace.notes)
        k = trace.kernels.assign(session=p)
        kept_runs = max(int((~trace.runs.warmup).sum()), 1) if len(trace.runs) else runs
        keys = k[["ort_name", "node_index", "op_type"]].drop_duplicates(
            ["ort_name", "node_index"])
        mapping = map_ort_nodes(lm, keys, res["optimized"], opt_level)
        nodes = _node_table(k, mapping, kept_runs, p)
        node_frames.append(nodes)
        op_frames.append(_op_table(nodes, k, kept_runs, p))
        wall = res["wall_ms"]
        lat_frames.append(pd.DataFrame({"session": p, "run": np.arange(len(wall)),
                                        "wall_ms": wall, "warmup": np.arange(len(wall)) < warmup}))
        timed = wall[warmup:]
        ort_runs = trace.runs.loc[~trace.runs.warmup, "dur_ms"]
        stat_rows.append({
            "session": p, "runs": len(timed), "mean_ms": float(timed.mean()),
            "p50_ms": float(np.percentile(timed, 50)), "p90_ms": float(np.percentile(timed, 90)),
            "p99_ms": float(np.percentile(timed, 99)), "min_ms": float(timed.min()),
            "max_ms": float(timed.max()), "std_ms": float(timed.std()),
            "kernel_ms": float(nodes.total_ms.sum()),
            "ort_run_ms": float(ort_runs.mean()) if len(ort_runs) else float("nan")})
        sess_rows.append({"session": p, "providers": list(res["providers"]),
                          "opt_level": opt_level, "load_ms": trace.load_ms,
                          "init_ms": trace.init_ms, "create_ms": res["create_ms"],
                          "nodes_run": len(nodes)})
        kern_frames.append(k)
    return Profile(
        model=lm,
        nodes=pd.concat(node_frames, ignore_index=True) if node_frames else
        pd.DataFrame(columns=NODE_COLUMNS),
        ops=pd.concat(op_frames, ignore_index=True),
        latency=pd.concat(lat_frames, ignore_index=True),
        latency_stats=pd.DataFrame(stat_rows, columns=STATS_COLUMNS),
        session=pd.DataFrame(sess_rows, columns=SESSION_COLUMNS),
        kernels=pd.concat(kern_frames, ignore_index=True),
        runs=runs, warmup=warmup, opt_level=opt_level, notes=notes, trace_paths=trace_paths)


def _node_table(k: pd.DataFrame, mapping: pd.DataFrame, kept_runs: int, session: str
                ) -> pd.DataFrame:
    if not len(k):
        return pd.DataFrame(columns=NODE_COLUMNS)
    keys = ["ort_name", "node_index"]
    ms = k.assign(ms=k.dur_us / 1000.0)
    g = ms.groupby(keys, sort=False, dropna=False)["ms"]
    agg = pd.DataFrame({
        "calls_total": g.size(), "sum_ms": g.sum(), "mean_ms": g.mean(),
        "median_ms": g.median(), "p90_ms": g.quantile(0.9), "first_ts": ms.groupby(
            keys, sort=False, dropna=False)["ts_us"].min()}).reset_index()
    first = ms.drop_duplicates(keys)[keys + ["op_type", "provider"]]
    agg = agg.merge(first, on=keys, how="left").merge(mapping, on=keys, how="left")
    agg = agg.assign(session=session, calls=agg.calls_total / kept_runs,
                     total_ms=agg.sum_ms / kept_runs)
    total = agg.total_ms.sum()
    agg = agg.assign(share=agg.total_ms / total if total > 0 else 0.0,
                     mapped=agg.mapped.fillna(False).astype(bool))
    agg = agg.sort_values("total_ms", ascending=False, kind="stable")
    return agg[NODE_COLUMNS].reset_index(drop=True)


def _op_table(nodes: pd.DataFrame, k: pd.DataFrame, kept_runs: int, session: str
              ) -> pd.DataFrame:
    if not len(nodes):
        return pd.DataFrame(columns=OP_COLUMNS)
    g = nodes.groupby(["provider", "op_type"], sort=False)
    ops = pd.DataFrame({"count": g.size(), "calls": g.calls.sum(),
                        "total_ms": g.total_ms.sum()}).reset_index()
    total = ops.total_ms.sum()
    ops = ops.assign(session=session, share=ops.total_ms / total if total > 0 else 0.0,
                     mean_ms=ops.total_ms / ops.calls)
    return ops.sort_values("total_ms", ascending=False, kind="stable")[OP_COLUMNS].reset_index(
        drop=True)
