"""ORT's Chrome-trace profile JSON -> DataFrames (kernel calls, runs, session events).

onnxruntime's profiler writes one JSON list of Chrome-trace events. The fields we read:
``cat`` ("Session" or "Node"), ``tid``, ``name`` (node events end in ``_kernel_time``; session
events are ``model_loading_*``, ``session_initialization``, ``model_run``), ``ts`` and ``dur`` in
microseconds since the profiler started, and for kernels ``args.op_name``, ``args.provider``
and ``args.node_index``. Traces in ORT's own layout (one event per line, fixed key order) are
read with two regexes over the bytes; anything else goes through ``json.load``. Either way the
columns go into numpy arrays and vectorized pandas (no per-event objects), so a BERT-base x 50
runs trace parses well under 1 s.

Example:
    >>> trace = parse_trace("onnxruntime_profile_2024.json", warmup=5)
    >>> trace.kernels.groupby("op_type").dur_us.sum()
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.core._location import user_path
from onnx_lab.errors import InputError

__all__ = ["Trace", "parse_trace", "load_events", "load_columns"]

_KERNEL_SUFFIX = "_kernel_time"
_LOAD_EVENTS = ("model_loading_array", "model_loading_uri", "model_loading_from_saved_proto")


@dataclass
class Trace:
    """A parsed profile.

    Attributes:
        kernels: one row per kernel call after the warm-up runs: ort_name (the node name in
            ORT's optimized graph), op_type (the kernel's op), provider, node_index (ORT's
            node index), run (0-based run index counted over all runs, warm-up included),
            ts_us, dur_us (an If/Loop/Scan call's own time, its body's calls left out), tid
            (the thread), parent (the row of the If/Loop/Scan call whose body ran it, -1
            for the main graph's calls).
        runs: one row per ``model_run`` event: run, ts_us, dur_ms, warmup (bool).
        session: one row per session-level event other than runs: event, ts_us, dur_ms.
        warmup: number of runs dropped.
        notes: anything unusual (no run events, fewer runs than warm-up...).
    """

    kernels: pd.DataFrame
    runs: pd.DataFrame
    session: pd.DataFrame
    warmup: int
    notes: list[str] = field(default_factory=list)

    @property
    def load_ms(self) -> float:
        """Model loading time (ms) as ORT measured it (NaN if not recorded)."""
        s = self.session
        return float(s.loc[s.event.isin(_LOAD_EVENTS), "dur_ms"].sum()) if len(s) else float("nan")

    @property
    def init_ms(self) -> float:
        """Session initialization time (ms): graph optimization, kernel creation."""
        s = self.session
        hit = s.loc[s.event == "session_initialization", "dur_ms"]
        return float(hit.sum()) if len(hit) else float("nan")


def load_events(source: str | Path | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The event list of a trace file (or the list itself)."""
    if isinstance(source, list):
        return source
    path = user_path(source)
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except FileNotFoundError as e:
        raise InputError(f"Profile file {str(path)!r} does not exist.",
                         fix="Pass the path ORT's end_profiling() returned.") from e
    except (ValueError, OSError) as e:
        raise InputError(f"Profile file {str(path)!r} is not a Chrome-trace JSON: {e}.",
                         fix="Pass the JSON file onnxruntime's profiler wrote.") from e
    if isinstance(data, dict):  # the Chrome-trace object form {"traceEvents": [...]}
        data = data.get("traceEvents", [])
    if not isinstance(data, list):
        raise InputError(f"Profile file {str(path)!r} holds no event list.",
                         fix="Pass the JSON file onnxruntime's profiler wrote.")
    return data


_Columns = dict[str, Any]

# onnxruntime writes one event per line with the top-level keys in this order; reading those
# few fields with regexes (C speed, no dict per event) is ~5x faster than json.loads of the
# whole file, whose bulk is per-kernel thread and memory statistics we do not use.
_STR = rb'"([^"\\]*(?:\\.[^"\\]*)*)"'  # a JSON string body (escapes allowed)
_HEAD = re.compile(
    rb'\{"cat" ?: ?"([^"]*)", ?"pid" ?: ?-?\d+, ?"tid" ?: ?(-?\d+), ?"dur" ?: ?(-?\d+), ?'
    rb'"ts" ?: ?(-?\d+), ?"ph" ?: ?"[^"]*", ?"name" ?: ?' + _STR + rb', ?"args" ?: ?\{')
_ARGS = {key: re.compile(rb'"' + key.encode() + rb'" ?: ?' + _STR)
         for key in ("op_name", "provider", "node_index")}


def _fast_columns(data: bytes) -> _Columns | None:
    """Columns of an ORT-written trace, or None when the text is not in ORT's layout."""
    heads = list(_HEAD.finditer(data))
    if not heads or data.count(b'"cat"') != len(heads):
        return None
    starts = np.fromiter((m.start() for m in heads), dtype=np.int64, count=len(heads))
    n = len(heads)
    cols: _Columns = {
        "cat": np.array([m.group(1).decode() for m in heads], dtype=object),
        "name": np.array([_unescape(m.group(5)) for m in heads], dtype=object),
        "tid": np.fromiter((int(m.group(2)) for m in heads), dtype=np.int64, count=n),
        "dur": np.fromiter((int(m.group(3)) for m in heads), dtype=np.float64, count=n),
        "ts": np.fromiter((int(m.group(4)) for m in heads), dtype=np.float64, count=n),
    }
    for key in _ARGS:
        cols[key] = np.full(n, None, dtype=object)
    # Attribute each args field to the event whose header precedes it.
    for key, rx in _ARGS.items():
        found = list(rx.finditer(data))
        if found:
            pos = np.fromiter((m.start() for m in found), dtype=np.int64, count=len(found))
            owner = np.searchsorted(starts, pos, side="right") - 1
            cols[key][owner] = [_unescape(m.group(1)) for m in found]
    return cols


def _unescape(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    return json.loads(f'"{text}"') if "\\" in text else text


def _json_columns(events: list[dict[str, Any]]) -> _Columns:
    args = [e.get("args") or {} if isinstance(e.get("args"), dict) else {} for e in events]
    return {
        "cat": np.array([e.get("cat") for e in events], dtype=object),
        "name": np.array([e.get("name", "") for e in events], dtype=object),
        "tid": np.array([_int(e.get("tid")) for e in events], dtype=np.int64),
        "ts": np.array([e.get("ts", 0) for e in events], dtype=np.float64),
        "dur": np.array([e.get("dur", 0) for e in events], dtype=np.float64),
        "op_name": np.array([a.get("op_name") for a in args], dtype=object),
        "provider": np.array([a.get("provider") for a in args], dtype=object),
        "node_index": np.array([a.get("node_index") for a in args], dtype=object),
    }


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def load_columns(source: str | Path | list[dict[str, Any]]) -> _Columns:
    """Per-event columns (cat, name, tid, ts, dur, op_name, provider, node_index) of a trace."""
    if isinstance(source, list):
        return _json_columns(source)
    path = user_path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise InputError(f"Profile file {str(path)!r} does not exist.",
                         fix="Pass the path ORT's end_profiling() returned.") from e
    except OSError as e:
        raise InputError(f"Profile file {str(path)!r} cannot be read: {e}.",
                         fix="Pass the JSON file onnxruntime's profiler wrote.") from e
    cols = _fast_columns(data)
    if cols is not None:
        return cols
    return _json_columns(load_events(path))


def parse_trace(source: str | Path | list[dict[str, Any]], *, warmup: int = 0) -> Trace:
    """Parse an onnxruntime profile into DataFrames, dropping the first ``warmup`` runs.

    Kernel calls are assigned to runs by timestamp (the ``model_run`` event that contains
    them); calls before the first kept run (warm-up, tuning) are dropped.

    Args:
        source: the JSON path or the already loaded event list.
        warmup: runs at the start to drop (their kernels include allocation and tuning).

    Returns:
        A :class:`Trace`.

    Example:
        >>> t = parse_trace(path, warmup=1)
        >>> t.kernels.head()
    """
    if not isinstance(warmup, int) or warmup < 0:
        raise InputError(f"warmup must be an int >= 0, got {warmup!r}.", fix="Use warmup=0 or more.")
    c = load_columns(source)
    notes: list[str] = []
    cats, names, ts, dur = c["cat"], c["name"], c["ts"], c["dur"]

    is_session = cats == "Session"
    run_mask = is_session & (names == "model_run")
    run_ts = ts[run_mask]
    order = np.argsort(run_ts, kind="stable")
    run_ts = run_ts[order]
    run_dur = dur[run_mask][order]
    runs = pd.DataFrame({"run": np.arange(len(run_ts)), "ts_us": run_ts,
                         "dur_ms": run_dur / 1000.0, "warmup": np.arange(len(run_ts)) < warmup})
    if len(run_ts) == 0:
        notes.append("the trace has no model_run events: no warm-up could be dropped")
    elif warmup >= len(run_ts):
        notes.append(f"warm-up ({warmup}) covers all {len(run_ts)} runs in the trace")

    other = is_session & ~run_mask
    session = pd.DataFrame({"event": names[other].astype(str), "ts_us": ts[other],
                            "dur_ms": dur[other] / 1000.0})

    kmask = (cats == "Node") & np.fromiter((n.endswith(_KERNEL_SUFFIX) for n in names),
                                           dtype=bool, count=len(names))
    idx = np.flatnonzero(kmask)
    k_ts = ts[idx]
    if len(run_ts):
        run = np.searchsorted(run_ts, k_ts, side="right") - 1
    else:
        run = np.zeros(len(idx), dtype=np.int64)
    kernels = pd.DataFrame({
        "ort_name": [n[: -len(_KERNEL_SUFFIX)] for n in names[idx]],
        "op_type": c["op_name"][idx],
        "provider": c["provider"][idx],
        "node_index": pd.array(c["node_index"][idx], dtype="string"),
        "run": run.astype(np.int64),
        "ts_us": k_ts,
        "dur_us": dur[idx],
        "tid": c["tid"][idx],
    })
    if len(run_ts):
        kernels = kernels.loc[kernels.run >= warmup].reset_index(drop=True)
    cf = kernels["op_type"].isin(_CONTROL_FLOW).to_numpy()
    if cf.any():
        parent = _parents(kernels, cf)
        kernels = kernels.assign(parent=parent)
        kernels = _exclusive_control_flow(kernels, cf, parent)
        notes.append("If/Loop/Scan rows hold their own time: their bodies' nodes, which "
                     "onnxruntime's trace also nests inside them, are their own rows")
    else:
        kernels = kernels.assign(parent=np.full(len(kernels), -1, dtype=np.int64))
    return Trace(kernels=kernels, runs=runs, session=session, warmup=warmup, notes=notes)


#: Ops whose trace event spans their bodies' kernels.
_CONTROL_FLOW = ("If", "Loop", "Scan")


def _parents(kernels: pd.DataFrame, cf: np.ndarray) -> np.ndarray:
    """The row of the innermost If/Loop/Scan call each kernel call ran inside, -1 for none.

    onnxruntime runs a body's nodes inside its control-flow node's kernel, on the same
    thread: their events lie within that node's event (which is written after them). The
    trace names a body node as its own graph does ("Mul_0" in a body and in the main graph
    alike), so this nesting is what tells the graphs apart.
    """
    ts = kernels["ts_us"].to_numpy()
    end = ts + kernels["dur_us"].to_numpy().astype(np.float64)
    tid = kernels["tid"].to_numpy()
    # by thread, then start; of two events starting together the longer one encloses
    order = np.lexsort((-end, ts, tid))
    parent = np.full(len(ts), -1, dtype=np.int64)
    stack: list[int] = []  # open control-flow calls (rows)
    last_tid = None
    for i in order.tolist():
        if tid[i] != last_tid:
            stack.clear()
            last_tid = tid[i]
        while stack and ts[i] >= end[stack[-1]]:
            stack.pop()
        if stack and end[i] <= end[stack[-1]]:
            parent[i] = stack[-1]
        if cf[i]:
            stack.append(i)
    return parent


def _exclusive_control_flow(kernels: pd.DataFrame, cf: np.ndarray, parent: np.ndarray
                            ) -> pd.DataFrame:
    """``kernels`` with each If/Loop/Scan event's duration less the events nested in it
    (onnxruntime's event of a control-flow node spans its body's kernels, which are events of
    their own: summed, the body counted twice, a Loop of 50 MatMuls took 52% of the time)."""
    dur = kernels["dur_us"].to_numpy().astype(np.float64)
    inside = parent >= 0
    nested = np.bincount(parent[inside], weights=dur[inside], minlength=len(dur))
    own = np.where(cf, np.maximum(dur - nested, 0.0), dur)
    out = kernels.copy()
    out["dur_us"] = own.astype(kernels["dur_us"].dtype, copy=False) \
        if kernels["dur_us"].dtype.kind == "f" else np.rint(own).astype(np.int64)
    return out
