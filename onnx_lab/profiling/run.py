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
from onnx_lab._pandas import pd, prefetch
from onnx_lab._progress import Progress
from onnx_lab.core.branches import untaken_bodies
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.core.source_map import group_by_module
from onnx_lab.errors import InputError, LabError, ProviderError, RuntimeLoadError
from onnx_lab.profiling._mapping import UNKNOWN_BRANCH, map_trace, wants_graph
from onnx_lab.profiling._timing import Budget, MemoryWatch, cancelled, measure
from onnx_lab.profiling.parse import Trace, parse_trace
from onnx_lab.profiling.stats import (
    STABLE_REL_CI,
    Difference,
    busy_note,
    compare_samples,
    summarize,
)
from onnx_lab.runtime.capture import run as capture_run
from onnx_lab.runtime.feeds import as_feed_list
from onnx_lab.runtime.openvino import BACKEND_PREFIX, OpenVINOSession, is_openvino, openvino_device
from onnx_lab.runtime.session import (
    OPT_LEVELS,
    default_providers,
    fallback_chain,
    make_session,
    resolve_providers,
    run_failure,
    run_session,
)

logger = logging.getLogger(__name__)

__all__ = ["profile", "Profile"]

# Providers profiled by default, when this onnxruntime build has them.

NODE_COLUMNS = ["session", "node_id", "provider", "op_type", "calls", "mean_ms", "median_ms",
                "p90_ms", "total_ms", "share", "mapped", "ort_name", "components", "how"]
OP_COLUMNS = ["session", "provider", "op_type", "count", "calls", "total_ms", "share", "mean_ms"]
LATENCY_COLUMNS = ["session", "run", "wall_ms", "warmup"]
STATS_COLUMNS = ["session", "runs", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms",
                 "std_ms", "kernel_ms", "ort_run_ms", "p10_ms", "ci_low_ms", "ci_high_ms",
                 "rel_ci", "spread", "profiled_runs", "latency_from", "stopped"]
MEMORY_COLUMNS = ["session", "rss_before_bytes", "peak_rss_bytes", "session_peak_bytes",
                  "predicted_activation_bytes"]
SESSION_COLUMNS = ["session", "providers", "opt_level", "load_ms", "init_ms", "create_ms",
                   "nodes_run"]


def _check_budget_level(budget_s: Any, opt_level: Any) -> None:
    if budget_s is not None and (not isinstance(budget_s, (int, float)) or budget_s <= 0):
        raise InputError(f"budget_s must be a positive number of seconds, got {budget_s!r}.",
                         fix="Use e.g. budget_s=5.")
    if opt_level not in OPT_LEVELS:
        raise InputError(f"Unknown optimization level {opt_level!r}.",
                         fix=f"Use one of {', '.join(OPT_LEVELS)}.")


def backends(providers: str | Sequence[str] | None, notes: list[str], *,
             openvino: bool = True) -> tuple[list[str], bool]:
    """(backend names to run, whether the user named them): the default providers (the
    skipped ones noted in ``notes``), or the user's list ("cpu,cuda", "openvino:GPU") resolved.
    ``openvino=False``: the OpenVINO runtime is refused (ProviderError), onnxruntime's OpenVINO
    execution provider is not."""
    if providers is None:
        provs, skipped = default_providers()
        notes.extend(skipped)
        return provs, False
    names = [p.strip() for p in providers.split(",")] if isinstance(providers, str) \
        else list(providers)
    if not names or not any(isinstance(n, str) and n.strip() for n in names):
        resolve_providers(names)  # [] or '': "No execution provider given" with its fix
    if not openvino and any(is_openvino(n) for n in names):
        raise ProviderError("Generation profiling runs onnxruntime sessions only.",
                            fix="Use providers='cpu' (or cuda).")
    provs: list[str] = []
    for n in names:
        if is_openvino(n):
            provs.append(_openvino_name(n))
        else:
            provs.extend(p for p in resolve_providers([n]) if p not in provs)
    return provs, True


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
            ``session.run``), warmup (bool), profiled (bool: run under ORT's profiler).
        latency_stats: per session: runs (those the statistics come from: the unprofiled
            runs, or the profiled ones when none ran without the profiler), mean_ms, p50_ms,
            p90_ms, p99_ms, min_ms, max_ms, std_ms, kernel_ms (sum of kernel time per
            profiled run), ort_run_ms (ORT's run time), p10_ms, ci_low_ms, ci_high_ms (95%
            interval of the median), rel_ci (its half width / the median), spread ((p90 -
            p10) / p50), profiled_runs, latency_from ('unprofiled' or 'profiled'), stopped
            (why the runs stopped: 'runs', 'stable', 'budget', 'max_runs', 'cancelled').
        memory: per session: rss_before_bytes (process RSS before the session), peak_rss_bytes
            (process peak during session creation and the runs), session_peak_bytes (the
            difference: what the session and its runs added at their peak),
            predicted_activation_bytes (the cost model's peak, filled by ``onnx_lab.profile`` and
            ``Lab.profile``, the façade's one door).
        session: per session: providers, opt_level, load_ms and init_ms (ORT's Session
            events), create_ms (wall time of creating the session), nodes_run.
        kernels: every kept kernel call (session, ort_name, op_type, provider, run, dur_us...).
        notes: skipped providers and anything unusual.
        dims, shapes: the dims and input shapes the runs were sized by (:meth:`render`
            draws those sizes).
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
    memory: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MEMORY_COLUMNS))
    profiled_runs: int = 0
    budget_s: float | None = None
    cancelled: bool = False
    #: The dims and input shapes the runs were sized by (its drawing shows those sizes).
    dims: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)

    def samples(self, session: str | None = None) -> np.ndarray:
        """Wall ms of the runs behind ``latency_stats`` for one session (default the first)."""
        st = self.latency_stats.set_index("session")
        session = session or st.index[0]
        lat = self.latency.loc[(self.latency.session == session) & ~self.latency.warmup]
        if st.loc[session, "latency_from"] == "unprofiled":
            lat = lat.loc[~lat.profiled]
        return lat.wall_ms.to_numpy()

    def compare(self, a: str, b: str) -> Difference:
        """Whether session ``b`` takes longer or less than ``a`` beyond the noise.

        The sessions ran one after the other: a load change in between shows as a difference
        (interleaved runs, :func:`onnx_lab.profiling.compare_models`, avoid that).
        """
        return compare_samples(self.samples(a), self.samples(b), labels=(a, b))

    def differences(self) -> pd.DataFrame:
        """Every session against the first: session, vs, ratio, ratio_low, ratio_high,
        p_value, different, verdict (in words)."""
        sess = list(self.latency_stats.session)
        rows = []
        for s in sess[1:]:
            d = self.compare(sess[0], s)
            rows.append({"session": s, "vs": sess[0], "ratio": d.ratio,
                         "ratio_low": d.ratio_low, "ratio_high": d.ratio_high,
                         "p_value": d.p_value, "different": d.different, "verdict": d.text})
        return pd.DataFrame(rows, columns=["session", "vs", "ratio", "ratio_low", "ratio_high",
                                           "p_value", "different", "verdict"])

    def overlay(self, session: str | None = None) -> pd.Series:
        """Per-run time_ms of each mapped model node: the sum of the ORT nodes whose
        ``node_id`` it is (fused nodes on their primary node); :meth:`coverage` gives a node
        that ran the same time."""
        df = self.nodes.loc[self.nodes.mapped]
        if session is not None:
            df = df.loc[df.session == session]
        elif len(df):
            df = df.loc[df.session == df.session.iloc[0]]
        s = df.groupby("node_id")["total_ms"].sum()
        s.name = "time_ms"
        return s

    def by_module(self, depth: int | None = None, session: str | None = None) -> pd.DataFrame:
        """Kernel time per run per PyTorch module (see :mod:`onnx_lab.core.source_map`),
        slowest first; a kernel onnxruntime fused counts for its primary node's module.

        Columns: module ('?' for nodes of unknown source), module_class, n_nodes,
        first_topo, time_ms (per run), share (of the mapped kernel time).

        Example:
            >>> lab.profile().by_module(depth=2).head()
        """
        s = self.overlay(session)
        frame = pd.DataFrame({"node_id": s.index.astype(str), "time_ms": s.to_numpy()})
        out = group_by_module(frame, self.model, {"time_ms": "sum"}, depth=depth,
                              sort="time_ms")
        total = out.time_ms.sum()
        return out.assign(share=out.time_ms / total if total else np.nan)

    def coverage(self, session: str | None = None) -> pd.DataFrame:
        """Where each model node went in ORT's graph.

        Returns:
            DataFrame, one row per model node: node_id, op_type, status ('ran': an ORT node
            of its own, 'fused': part of another ORT node, 'removed': optimized away, e.g. an
            Identity or a constant-folded node, 'not run': in an If/Loop body none of whose
            nodes ran: a branch these inputs did not take), ort_name (the ORT node that ran it;
            the slowest where several did), time_ms (per run of the ORT nodes that ran it,
            summed where several did, as :meth:`overlay` sums them: ORT's copies of a
            DequantizeLinear, the kernels of a node ORT runs as its function body; a fused
            node's time is shared by all its members).
        """
        df = self.nodes
        if session is not None:
            df = df.loc[df.session == session]
        elif len(df):
            df = df.loc[df.session == df.session.iloc[0]]
        # Several ORT nodes standing for one model node are distinct kernels that each ran
        # (each row is one ORT node): the node's time is their sum. Rows come slowest first.
        ran: dict[str, list] = {}
        for r in df.loc[df.mapped].itertuples():
            for c in r.components or (r.node_id,):
                status = "ran" if c == r.node_id else "fused"
                cur = ran.get(c)
                if cur is None or (cur[0] == "fused" and status == "ran"):
                    ran[c] = [status, r.ort_name, float(r.total_ms)]
                elif cur[0] == status:
                    cur[2] += float(r.total_ms)
        entries = self.model.index.entries
        # a body none of whose nodes ran is a branch these inputs did not take (or a loop of
        # no iteration): its nodes were not run, not optimized away
        bodies_ran = {entries[c].graph for c in ran if c in entries}
        rows = []
        for nid, e in entries.items():
            missing = "not run" if e.graph and e.graph not in bodies_ran else "removed"
            status, ort_name, ms = ran.get(nid, (missing, None, float("nan")))
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
            "profiled_runs": self.profiled_runs, "budget_s": self.budget_s,
            "cancelled": self.cancelled,
            "latency": self.latency_stats.to_dict(orient="records"),
            "session": self.session.to_dict(orient="records"),
            "memory": self.memory.to_dict(orient="records"),
            "ops": self.ops.to_dict(orient="records"),
            "nodes": self.nodes.drop(columns=["components"]).assign(
                components=self.nodes.components.map(list)).head(top).to_dict(orient="records")
            if len(self.nodes) else [],
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        parts = [f"{r.session}: median {r.p50_ms:.3f} ms [{r.ci_low_ms:.3f}-{r.ci_high_ms:.3f}],"
                 f" p10-p90 {r.p10_ms:.3f}-{r.p90_ms:.3f} ms"
                 for r in self.latency_stats.itertuples()]
        return f"<Profile {self.runs} runs ({'; '.join(parts)})>"

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


#: Default time budget of :func:`profile` (all sessions together), in seconds.
PROFILE_BUDGET_S = 6.0
#: Profiled runs (the per-operator shares) at most; the other runs go unprofiled.
PROFILE_RUNS = 10


def profile(model: Any, *, providers: str | Sequence[str] | None = None,
            runs: int | None = None, warmup: int = 5, budget_s: float | None = None,
            profile_runs: int | None = None, feeds: Any = None,
            dims: Mapping[str, int] | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None, threads: int | None = None,
            opt_level: str = "all", progress: Any = None, map_fused: bool = True,
            keep_trace: bool = False, cancel: Any = None,
            rel_ci: float = STABLE_REL_CI) -> Profile:
    """Profile a model per operator with onnxruntime's profiler, and time it honestly.

    Each provider (or backend) gets its own session. The first ``warmup`` runs are dropped;
    then a few runs go through ORT's profiler (``profile_runs``: the per-operator shares),
    the profiler is ended, and the remaining runs of the same session time the latency without
    it. ``p.latency_stats`` says how many of each (``profiled_runs``, ``runs``).

    Args:
        model: a Lab, LabModel, path, bytes, ModelProto or ``"sample:NAME"``.
        providers: names such as ``"cpu"``, ``["CUDAExecutionProvider"]``, and ``"openvino"``
            / ``"openvino:CPU"`` (the OpenVINO runtime, with the optional extra installed;
            timings only); None profiles every installed one of CPU, CUDA and TensorRT.
        runs: timed runs per session, profiled ones included (fixed, for reproducible
            scripts). None (default): runs until the median is stable (the 95% interval of
            the median within ``rel_ci`` of it) or ``budget_s`` is spent.
        warmup: runs dropped first (>= 0).
        budget_s: seconds for the whole call (default :data:`PROFILE_BUDGET_S` when ``runs``
            is None), shared by the sessions; session creation counts.
        profile_runs: runs recorded by ORT's profiler (default ``min(runs, 10)``).
        feeds: None (seeded random inputs), a dict, a list of dicts (cycled) or an ``.npz``.
        dims, shapes: values for dynamic dims (merged over a Lab's).
        threads: intra-op threads (None: ORT's default).
        opt_level: ORT graph optimization level: disable, basic, extended, all.
        progress: None (a bar in terminals), False (silent) or ``callable(done, total, label)``.
        map_fused: also let ORT write its optimized graph so fused nodes map to all the model
            nodes they cover (small cost at session creation).
        keep_trace: keep ORT's JSON files (paths in ``trace_paths``).
        cancel: a ``threading.Event`` (or callable): when set, the runs stop and what was
            measured is returned (``p.cancelled`` True, a note says so).
        rel_ci: the stability target of adaptive runs.

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
        >>> onnx_lab.profile("sample:convnet", budget_s=3).latency_stats  # adaptive
    """
    t_call = time.perf_counter()  # the budget counts from the call
    _check_counts(1 if runs is None else runs, warmup)
    _check_budget_level(budget_s, opt_level)
    lm, dims, shapes = resolve(model, dims, shapes)
    notes: list[str] = []
    provs, explicit = backends(providers, notes)
    feed_list = as_feed_list(feeds, lm, dims, shapes)
    if runs is None and budget_s is None:
        budget_s = PROFILE_BUDGET_S
    n_prof = min(int(runs), PROFILE_RUNS) if profile_runs is None and runs is not None \
        else PROFILE_RUNS if profile_runs is None else int(profile_runs)
    if runs is not None:
        n_prof = min(n_prof, int(runs))
    if n_prof < 1:
        raise InputError(f"profile_runs must be >= 1, got {profile_runs!r}.",
                         fix="Use profile_runs=5 or more (the per-operator shares).")

    prefetch()  # the tables' pandas import counts against the budget: now, not in the tail
    budget = Budget(budget_s, len(provs), start=t_call)
    reporter = Progress(progress, len(provs) * (int(runs) + int(warmup)) if runs is not None
                        else 100 * len(provs), "profiling", min_steps=20)
    settings = _Settings(runs=runs, n_prof=n_prof, warmup=int(warmup), feed_list=feed_list,
                         threads=threads, opt_level=opt_level, map_fused=map_fused,
                         reporter=reporter, budget=budget, cancel=cancel, rel_ci=rel_ci)
    results, trace_paths = run_sessions(
        provs, lambda p, tmp: _profile_one(lm, p, tmp, settings),
        budget=budget, reporter=reporter, cancel=cancel, explicit=explicit, notes=notes,
        keep_trace=keep_trace)
    if not results:
        raise ProviderError("No provider could profile the model.", fix="; ".join(notes))
    prof = _assemble(lm, results, int(runs) if runs is not None else
                     max(len(r["wall_ms"]) - int(warmup) for r in results),
                     int(warmup), opt_level, notes, trace_paths,
                     untaken_bodies(lm, feed_list), branch_oracle(lm, feed_list))
    prof.budget_s = budget_s
    prof.dims, prof.shapes = dict(dims or {}), {k: list(v) for k, v in (shapes or {}).items()}
    prof.cancelled = any(r["stopped"] == "cancelled" for r in results) or cancelled(cancel)
    if prof.cancelled:
        prof.notes.append("cancelled: the tables hold the runs measured before the cancel")
    return prof


def run_sessions(provs: Sequence[str], one: Any, *, budget: Budget, reporter: Progress,
                 cancel: Any, explicit: bool, notes: list[str], keep_trace: bool
                 ) -> tuple[list[dict], dict[str, str]]:
    """``one(provider, folder)`` for each provider in a temporary folder, in budget order.

    A provider that cannot load the model is skipped with a note unless it was asked for
    explicitly (or is the CPU); once cancelled, the rest are noted as not run. With
    ``keep_trace`` each result's ``trace`` file is moved out of the folder first.

    Returns:
        (the results, provider -> kept trace path).
    """
    tmp = tempfile.TemporaryDirectory(prefix="onnx_lab_prof_")
    results: list[dict] = []
    trace_paths: dict[str, str] = {}
    try:
        for p in provs:
            if results and cancelled(cancel):
                notes.append(f"{p}: not run (cancelled)")
                continue
            try:
                res = one(p, Path(tmp.name))
            except RuntimeLoadError as e:
                if explicit or p == "CPUExecutionProvider":
                    raise
                notes.append(f"{p} cannot load the model ({e.problem}); skipped")
                budget.next()
                continue
            budget.next()
            results.append(res)
            if keep_trace and res["trace"]:
                keep = Path(tempfile.mkdtemp(prefix="onnx_lab_trace_")) / Path(res["trace"]).name
                Path(res["trace"]).replace(keep)
                trace_paths[p] = str(keep)
    finally:
        reporter.close()
        tmp.cleanup()
    return results, trace_paths


def _openvino_name(name: str) -> str:
    return f"{BACKEND_PREFIX}:{openvino_device(name)}"


class _Ticker:
    """Progress of one session: counts in fixed mode, elapsed budget share (0-100) else."""

    def __init__(self, reporter: Progress, share: float | None, fixed: bool, label: str):
        self.reporter, self.share, self.fixed = reporter, share, fixed
        self.t0 = time.perf_counter()
        self.sent = 0
        reporter.label = label

    def __call__(self) -> None:
        if self.fixed:
            self.reporter.update()
            return
        pct = min(99, int(100 * (time.perf_counter() - self.t0) / self.share)) \
            if self.share else 99
        if pct > self.sent:
            self.reporter.update(pct - self.sent)
            self.sent = pct

    def finish(self) -> None:
        if not self.fixed and self.sent < 100:
            self.reporter.update(100 - self.sent)
            self.sent = 100


def open_session(lm: LabModel, backend: str, *, opt_level: str = "all",
                 threads: int | None = None, profile: bool = False,
                 profile_prefix: str | None = None, optimized_model_path: str | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None):
    """An ORT session with the fallback chain of ``backend``, or an OpenVINO session."""
    if is_openvino(backend):
        return OpenVINOSession(lm, device=openvino_device(backend), threads=threads,
                               shapes=shapes)
    config = None
    if optimized_model_path:
        # Weights in a side file: the graph alone is read back (writing them into the
        # protobuf and parsing it again cost ~0.3 s on ResNet-50).
        config = {"session.optimized_model_external_initializers_file_name":
                  Path(optimized_model_path).name + ".data",
                  "session.optimized_model_external_initializers_min_size_in_bytes": "1024"}
    return make_session(lm, providers=fallback_chain(backend), opt_level=opt_level,
                        threads=threads, profile=profile, profile_prefix=profile_prefix,
                        optimized_model_path=optimized_model_path, config_entries=config)


@dataclass(frozen=True)
class SessionSettings:
    """What every provider's session of one profiling call runs with (:func:`profile` and
    :func:`onnx_lab.profiling.generate.profile_generation` add their own)."""

    runs: int | None
    n_prof: int
    warmup: int
    threads: int | None
    opt_level: str
    map_fused: bool
    reporter: Progress
    budget: Budget
    cancel: Any
    rel_ci: float


@dataclass(frozen=True)
class _Settings(SessionSettings):
    """:func:`profile`'s: the feeds, cycled over the runs."""

    feed_list: Sequence[dict] = ()


def _profile_one(lm: LabModel, provider: str, tmp: Path, settings: _Settings) -> dict:
    s = settings
    runs, n_prof, warmup, feed_list = s.runs, s.n_prof, s.warmup, s.feed_list
    threads, opt_level, map_fused = s.threads, s.opt_level, s.map_fused
    reporter, budget, cancel, rel_ci = s.reporter, s.budget, s.cancel, s.rel_ci
    ov = is_openvino(provider)
    short = provider.replace("ExecutionProvider", "").replace(":", "_").lower()
    # Compiled providers (TensorRT) cannot serialize their optimized graph.
    write_opt = (map_fused and wants_graph(lm, opt_level) and not ov
                 and provider != "TensorrtExecutionProvider")
    opt_path = tmp / f"{short}_optimized.onnx" if write_opt else None
    share = budget.share()
    t_start = time.perf_counter()
    mem = MemoryWatch()
    sess = open_session(lm, provider, opt_level=opt_level, threads=threads, profile=not ov,
                        profile_prefix=str(tmp / f"ort_{short}"),
                        optimized_model_path=str(opt_path) if opt_path else None)
    create_ms = (time.perf_counter() - t_start) * 1e3
    ticker = _Ticker(reporter, share, runs is not None, f"profiling {short}")
    n = len(feed_list)
    state = {"i": 0}
    run = sess.run
    engine = "OpenVINO" if ov else "onnxruntime"
    fix = "Check the feeds (dtype/shape) and lab.check()."

    def one() -> None:
        if state["i"]:
            run(None, feed_list[state["i"] % n])
        else:  # the first run is checked: a failure is translated there
            run_session(sess, feed_list[0], what=f"the model on {provider}", fix=fix,
                        runtime=engine)
        state["i"] += 1

    trace_file = parsed = None
    tail_s = 0.0
    try:
        # In budget mode the warm-up and the profiled runs get at most a fifth and a third of
        # the session's share (a model whose run takes a second must not spend it all there).
        spent = time.perf_counter() - t_start
        warm, _ = measure(one, runs=warmup, cancel=cancel, tick=ticker,
                          budget_s=None if share is None else max(share / 5 - spent, 0.0))
        if ov:
            prof_ms = np.empty(0)
            n_prof = 0
        else:
            spent = time.perf_counter() - t_start
            prof_ms, why = measure(one, runs=n_prof if runs is None else min(n_prof, runs),
                                   cancel=cancel, tick=ticker,
                                   budget_s=None if share is None or runs is not None
                                   else max(share / 3 - spent, 0.0))
            trace_file = sess.end_profiling()
            n_prof = len(prof_ms)
            # Parsed before the unprofiled runs, so the budget holds it; the tables after the
            # runs take about as long again (YOLOv8n: 0.27 s and 0.26 s), reserved below.
            t_parse = time.perf_counter()
            parsed = parse_trace(trace_file, warmup=len(warm))
            tail_s = time.perf_counter() - t_parse
        left = None if share is None else share - (time.perf_counter() - t_start)
        if runs is not None:
            rest, why = measure(one, runs=max(runs - n_prof, 0), cancel=cancel, tick=ticker,
                                budget_s=left)
        elif cancelled(cancel):
            rest, why = np.empty(0), "cancelled"
        else:
            rest, why = measure(one, budget_s=max(left or 0.0, 0.0), cancel=cancel,
                                tick=ticker, rel_ci=rel_ci,
                                deadline=budget.deadline and budget.deadline - tail_s)
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        if trace_file is None and not ov:
            sess.end_profiling()
        # the first run's failure, translated; or any other LabError (a bad
        # ONNX_LAB_RUN_TIMEOUT), which already names its problem and fix: wrapped, it read
        # "onnxruntime failed to run the model ... Check the feeds"
        if isinstance(e, LabError):
            raise
        raise run_failure(e, f"the model on {provider}", fix, runtime=engine) from e
    ticker.finish()
    memory = mem.stop()
    optimized = None
    if opt_path is not None and opt_path.exists():
        import onnx

        # Structure only: weights are not needed to follow tensor names.
        optimized = onnx.load(str(opt_path), load_external_data=False)
    wall = np.concatenate([warm, prof_ms, rest])
    return {"provider": provider, "providers": sess.get_providers(), "create_ms": create_ms,
            "wall_ms": wall, "warmup": len(warm), "profiled": n_prof, "trace": trace_file,
            "parsed": parsed, "optimized": optimized, "stopped": why, "memory": memory,
            "spent_s": time.perf_counter() - t_start}


def _assemble(lm: LabModel, results: list[dict], runs: int, warmup: int, opt_level: str,
              notes: list[str], trace_paths: dict[str, str],
              untaken: frozenset[str] = frozenset(), taken: Any = None) -> Profile:
    node_frames, op_frames, lat_frames, stat_rows, sess_rows, kern_frames = [], [], [], [], [], []
    mem_rows = []
    for res in results:
        p = res["provider"]
        trace: Trace | None = res["parsed"]
        wall = res["wall_ms"]
        n_warm = res.get("warmup", warmup)
        n_prof = res.get("profiled", len(wall) - n_warm)
        if trace is not None:
            notes.extend(f"{p}: {n}" for n in trace.notes)
            graph, mapping = map_trace(lm, trace.kernels, res["optimized"], opt_level,
                                       untaken, taken)
            k = trace.kernels.assign(session=p, graph=graph)
            kept_runs = max(int((~trace.runs.warmup).sum()), 1) if len(trace.runs) \
                else max(n_prof, 1)
            notes.extend(f"{p}: {n}" for n in unknown_branch_notes(graph))
            nodes = _node_table(k, mapping, kept_runs, p)
            node_frames.append(nodes)
            op_frames.append(_op_table(nodes, k, kept_runs, p))
            kern_frames.append(k)
            ort_runs = trace.runs.loc[~trace.runs.warmup, "dur_ms"]
            kernel_ms = float(nodes.total_ms.sum())
        else:
            nodes = pd.DataFrame(columns=NODE_COLUMNS)
            ort_runs = pd.Series(dtype=float)
            kernel_ms = float("nan")
        idx = np.arange(len(wall))
        lat_frames.append(pd.DataFrame({"session": p, "run": idx, "wall_ms": wall,
                                        "warmup": idx < n_warm,
                                        "profiled": (idx >= n_warm) & (idx < n_warm + n_prof)}))
        unprof = wall[n_warm + n_prof:]
        timed = unprof if len(unprof) else wall[n_warm:]
        st = summarize(timed)
        stat_rows.append({
            "session": p, **{c: st[c] for c in ("runs", "mean_ms", "p50_ms", "p90_ms",
                                                "p99_ms", "min_ms", "max_ms", "std_ms")},
            "kernel_ms": kernel_ms,
            "ort_run_ms": float(ort_runs.mean()) if len(ort_runs) else float("nan"),
            "p10_ms": st["p10_ms"], "ci_low_ms": st["ci_low_ms"],
            "ci_high_ms": st["ci_high_ms"], "rel_ci": st["rel_ci"], "spread": st["spread"],
            "profiled_runs": int(n_prof), "latency_from": "unprofiled" if len(unprof)
            else "profiled", "stopped": res.get("stopped", "runs")})
        busy = busy_note(timed, p)
        if busy and busy not in notes:
            notes.append(busy)
        if trace is None:  # the OpenVINO runtime: no per-operator trace to read
            notes.append(f"{p}: latency and memory only; OpenVINO gives no per-operator "
                         "times here (onnxruntime's providers fill the op and node tables)")
        if np.isfinite(kernel_ms) and st["p50_ms"] > 0 and kernel_ms > 1.5 * st["p50_ms"]:
            # the per-node times come from runs under ORT's profiler, which costs most on
            # small models: by_module and the node times were read as milliseconds of a run
            notes.append(f"{p}: per-node times come from the profiled runs, "
                         f"{kernel_ms / st['p50_ms']:.1f}x slower than the timed ones "
                         f"(kernel time {kernel_ms:.3g} ms per run, median latency "
                         f"{st['p50_ms']:.3g} ms): read nodes, ops and by_module as shares")
        sess_rows.append({"session": p, "providers": list(res["providers"]),
                          "opt_level": opt_level if trace is not None else "openvino",
                          "load_ms": trace.load_ms if trace is not None else float("nan"),
                          "init_ms": trace.init_ms if trace is not None else float("nan"),
                          "create_ms": res["create_ms"], "nodes_run": len(nodes)})
        m = res.get("memory") or {}
        mem_rows.append({"session": p, **{c: m.get(c, float("nan")) for c in MEMORY_COLUMNS[1:4]},
                         "predicted_activation_bytes": float("nan")})
    prof = Profile(
        model=lm,
        nodes=pd.concat(node_frames, ignore_index=True) if node_frames else
        pd.DataFrame(columns=NODE_COLUMNS),
        ops=pd.concat(op_frames, ignore_index=True) if op_frames else
        pd.DataFrame(columns=OP_COLUMNS),
        latency=pd.concat(lat_frames, ignore_index=True),
        latency_stats=pd.DataFrame(stat_rows, columns=STATS_COLUMNS),
        session=pd.DataFrame(sess_rows, columns=SESSION_COLUMNS),
        kernels=pd.concat(kern_frames, ignore_index=True) if kern_frames else pd.DataFrame(),
        runs=runs, warmup=warmup, opt_level=opt_level, notes=notes, trace_paths=trace_paths)
    prof.memory = pd.DataFrame(mem_rows, columns=MEMORY_COLUMNS)
    prof.profiled_runs = max((int(r.get("profiled", 0)) for r in results), default=0)
    return prof


def _node_table(k: pd.DataFrame, mapping: pd.DataFrame, kept_runs: int, session: str
                ) -> pd.DataFrame:
    if not len(k):
        return pd.DataFrame(columns=NODE_COLUMNS)
    keys = ["graph", "ort_name", "node_index"]
    if "graph" not in k:
        k = k.assign(graph="")
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


def branch_oracle(lm: LabModel, feed_list: Sequence[dict]):
    """``taken(if node id, run) -> body path or None``: the branch a main-graph If took in a
    run, from its condition's value on that run's feeds (run ``r`` was fed
    ``feed_list[r % len(feed_list)]``). Asked only where the trace cannot tell the branches
    apart (both alike); one extra run per feed at level 'disable', whose outputs are the
    conditions."""
    idx = lm.index
    conds = {nid: e.node.inputs[0].name for nid, e in idx.entries.items()
             if e.graph == "" and e.node.op_type == "If" and e.node.domain in ("", "ai.onnx")
             and e.node.inputs and e.node.inputs[0] is not None and e.node.inputs[0].name}
    values: dict[int, dict[str, Any]] = {}
    n = len(feed_list)

    def taken(nid: str, run: int) -> str | None:
        if nid not in conds or not n:
            return None
        k = run % n
        if k not in values:
            feeds = feed_list[k]
            need = sorted({c for c in conds.values() if c not in feeds})
            try:
                got = capture_run(lm, feeds, outputs=need) if need else {}
            except LabError:  # not computable here: the branch stays unknown
                got = {}
            values[k] = {**{c: feeds[c] for c in conds.values() if c in feeds}, **got}
        v = values[k].get(conds[nid])
        if v is None or np.size(v) != 1:
            return None
        body = f"{nid}/{'then_branch' if bool(np.asarray(v).reshape(-1)[0]) else 'else_branch'}"
        return body if body in idx.graphs else None

    return taken


def unknown_branch_notes(graph: np.ndarray) -> list[str]:
    """A note per If whose branch neither the trace nor the feeds told (its calls unmapped)."""
    suffix = "/" + UNKNOWN_BRANCH
    ifs = sorted({g[: -len(suffix)] for g in set(graph.tolist()) if g.endswith(suffix)})
    return [f"If {nid!r}: its branches hold alike nodes and the branch that ran is not known "
            "(its condition is computed in a body): its body's calls are unmapped"
            for nid in ifs]


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
