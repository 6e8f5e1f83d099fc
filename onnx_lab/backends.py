"""Which runtime is fastest here, and does it compute the same? onnxruntime's providers and
OpenVINO (optional extra) side by side: latency with its spread, throughput at the batch knee,
and each backend's outputs compared against onnxruntime CPU with the tolerance presets.

A layer-4 module: it joins profiling (timings) and numerics (the comparison), which do not
import each other.

Example:
    >>> import onnx_lab
    >>> r = onnx_lab.compare_backends("resnet50.onnx", batch_sizes=(1, 2, 4, 8))
    >>> r.table[["backend", "median_ms", "p10_ms", "p90_ms", "items_per_s_at_knee",
    ...          "outputs_agree"]]
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx_lab._display import notebook_html
from onnx_lab._pandas import pd
from onnx_lab.core.source import resolve
from onnx_lab.errors import ProviderError, RuntimeLoadError
from onnx_lab.numerics.align import computed_precision
from onnx_lab.numerics.metrics import judging_dtype, rule_for, tensor_metrics, value_dtype
from onnx_lab.profiling.run import open_session, profile
from onnx_lab.profiling.sweep import batch_sweep
from onnx_lab.render.results import backend_report_html
from onnx_lab.runtime.feeds import as_feed_list
from onnx_lab.runtime.session import available_providers, make_session, run_session

__all__ = ["compare_backends", "BackendReport", "BACKEND_COLUMNS"]

BACKEND_COLUMNS = ["backend", "median_ms", "p10_ms", "p90_ms", "ci_low_ms", "ci_high_ms",
                   "runs", "vs_reference", "knee", "knee_found", "items_per_s_at_knee",
                   "items_per_s_low", "items_per_s_high", "outputs_agree", "max_abs",
                   "preset", "rule", "peak_rss_bytes"]

REFERENCE = "CPUExecutionProvider"


@dataclass
class BackendReport:
    """Result of :func:`compare_backends`.

    Attributes:
        table: one row per backend: backend, median_ms, p10_ms, p90_ms, ci_low_ms,
            ci_high_ms (95% interval of the median), runs, vs_reference (the latency
            against onnxruntime CPU, in words: beyond the noise or not), knee (batch where
            throughput stops rising, else the largest batch measured; NaN without a sweep),
            knee_found (False: throughput still rose at the largest batch), items_per_s_at_knee (and its
            interval: items_per_s_low/high), outputs_agree (every output within the preset's
            output rule against onnxruntime CPU with its optimizations off; the CPU row's
            session, timed with every optimization, too), max_abs (largest element difference),
            preset, rule, peak_rss_bytes (process peak during that backend's profile).
        outputs: per backend and output: backend, output, passed, max_abs, max_rel, cosine,
            rule.
        profile: the :class:`~onnx_lab.profiling.run.Profile` of the backends.
        sweep: the :class:`~onnx_lab.profiling.sweep.BatchSweep` (None without batch sizes).
        notes: skipped backends (with how to add them), busy-machine warnings.
    """

    table: pd.DataFrame
    outputs: pd.DataFrame
    profile: Any
    sweep: Any = None
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def _repr_html_(self) -> str:
        return notebook_html(backend_report_html(self.table, self.outputs, self.notes))


def _default_backends(notes: list[str]) -> list[str]:
    # on use: tests stand in for openvino_available on its module
    from onnx_lab.runtime.openvino import INSTALL_HINT, openvino_available

    avail = available_providers()
    out = [REFERENCE]
    if openvino_available():
        out.append("openvino:CPU")
    else:
        notes.append(INSTALL_HINT)
    for p, label in (("CUDAExecutionProvider", "CUDA"), ("TensorrtExecutionProvider", "TensorRT")):
        if p in avail:
            out.append(p)
        else:
            notes.append(f"{label}: not in this onnxruntime build (needs a GPU and "
                         "onnxruntime-gpu); skipped")
    return out


def compare_backends(model: Any, backends: Sequence[str] | None = None, *,
                     batch_sizes: Sequence[int] | None = None, dim: str = "batch",
                     budget_s: float | None = None, preset: str | None = None,
                     feeds: Any = None, dims: Mapping[str, int] | None = None,
                     shapes: Mapping[str, Sequence[int]] | None = None,
                     threads: int | None = None, progress: Any = None,
                     cancel: Any = None) -> BackendReport:
    """onnxruntime CPU, OpenVINO CPU (and CUDA/TensorRT where present) side by side.

    Times each backend (:func:`onnx_lab.profile`, budget mode), sweeps the batch when
    ``batch_sizes`` are given (the knee and the throughput there, per backend), and compares
    each backend's outputs on the same seeded inputs with onnxruntime CPU (graph
    optimizations off: the reference of verification) under the tolerance preset.

    Args:
        model: a Lab, LabModel, path or ``"sample:NAME"``.
        backends: e.g. ``["cpu", "openvino"]``; None: onnxruntime CPU plus every installed
            one of OpenVINO, CUDA and TensorRT (the missing ones noted with how to add them).
        batch_sizes, dim: the batch sweep (needs a symbolic ``dim``).
        budget_s: seconds for the timings (default: the profile's 6 s plus the sweep's 6 s per
            backend).
        preset: tolerance preset for the outputs (None: by dtype, ``fp32`` for float32).
        feeds, dims, shapes, threads: as for :func:`onnx_lab.profile`.
        cancel: a ``threading.Event``.

    Raises:
        ProviderError: a named backend is not installed (OpenVINO: how to add it).

    Example:
        >>> r = compare_backends("sample:convnet", ["cpu", "openvino"])
        >>> r.table[["backend", "median_ms", "outputs_agree"]]
    """
    # on use: tests stand in for openvino_available on its module
    from onnx_lab.runtime.openvino import INSTALL_HINT, is_openvino, openvino_available

    t0 = time.perf_counter()
    notes: list[str] = []
    if backends is None:
        names = _default_backends(notes)
    else:
        names = list(backends)
        if any(is_openvino(b) for b in names) and not openvino_available():
            raise ProviderError("OpenVINO was asked for but is not installed.",
                                fix="pip install openvino")
    lm, dims_r, shapes_r = resolve(model, dims, shapes)
    sweep_dims = dict(dims_r)
    if batch_sizes and dim not in sweep_dims:
        dims_r = {**dims_r, dim: int(batch_sizes[0])}
    try:
        prof = profile(lm, providers=names, dims=dims_r, shapes=shapes_r, feeds=feeds,
                       threads=threads, budget_s=budget_s, progress=progress, cancel=cancel,
                       map_fused=False)
    except RuntimeLoadError as e:
        # a backend the defaults added (not one the user named) that cannot take the model:
        # the others are still compared, and the note says why it is missing (an opset-24
        # model OpenVINO cannot convert aborted the whole call)
        if backends is not None or not e.problem.startswith("OpenVINO") or \
                not any(is_openvino(b) for b in names):
            raise
        names = [b for b in names if not is_openvino(b)]
        notes.append(f"OpenVINO skipped: {e.problem} ({e.fix})")
        prof = profile(lm, providers=names, dims=dims_r, shapes=shapes_r, feeds=feeds,
                       threads=threads, budget_s=budget_s, progress=progress, cancel=cancel,
                       map_fused=False)
    notes.extend(n for n in prof.notes if n not in notes)
    sweep = None
    if batch_sizes:
        sweep = batch_sweep(lm, tuple(batch_sizes), dim=dim, dims=sweep_dims, shapes=shapes_r,
                            providers=names, threads=threads, progress=progress,
                            budget_s=None if budget_s is None else budget_s,
                            cancel=cancel)
        notes.extend(n for n in sweep.notes if n not in notes)
    # Outputs: every backend on the same seeded sample, against ORT CPU without optimizations.
    feed = as_feed_list(feeds, lm, dims_r, shapes_r)[0]
    ref_sess = make_session(lm)
    out_names = [o.name for o in ref_sess.get_outputs()]
    ref = run_session(ref_sess, feed, out_names, what="the model on onnxruntime CPU")
    del ref_sess
    out_rows = []
    precision = computed_precision(lm)
    sessions = list(prof.latency_stats.session)
    for s in sessions:
        # onnxruntime CPU too: its timed session runs with every optimization, and those
        # rewrites can change values (a QDQ model's fused int8 kernels by whole steps)
        sess = open_session(lm, s, opt_level="all", threads=threads)
        by_name = run_session(sess, feed, what=f"the model on {s}")
        for o in out_names:
            r = ref[o]
            # value_dtype sees through a ZipMap's maps (float32) and names strings; a float32
            # output of a float16 computation is judged by float16's rule
            pname, rule = rule_for(judging_dtype(value_dtype(r), precision.get(o)),
                                   output=True, preset=preset)
            c = by_name.get(o)
            if c is None:
                out_rows.append({"backend": s, "output": o, "passed": False,
                                 "max_abs": float("nan"), "max_rel": float("nan"),
                                 "cosine": float("nan"), "preset": pname,
                                 "rule": rule.describe(), "note": "output missing"})
                continue
            m = tensor_metrics(r, c, rule=rule)
            out_rows.append({"backend": s, "output": o, "passed": bool(m["passed"]),
                             "max_abs": m["max_abs"], "max_rel": m["max_rel"],
                             "cosine": m["cosine"], "preset": pname, "rule": m["rule"],
                             "note": m["note"]})
        del sess
    outputs = pd.DataFrame(out_rows, columns=["backend", "output", "passed", "max_abs",
                                              "max_rel", "cosine", "preset", "rule", "note"])
    rows = []
    st = prof.latency_stats.set_index("session")
    mem = prof.memory.set_index("session")
    for s in sessions:
        r = st.loc[s]
        vs = "reference" if s == REFERENCE else (
            prof.compare(REFERENCE, s).text if REFERENCE in sessions else "")
        knee = items = lo = hi = float("nan")
        found = None
        if sweep is not None and len(sweep.table):
            tb = sweep.backend(s)
            k = sweep.knees.get(s)
            if len(tb):
                at = tb.loc[tb.batch == k] if k is not None else tb.iloc[[-1]]
                if len(at):
                    found = k is not None
                    knee = float(at.batch.iloc[0])
                    items = float(at.items_per_s.iloc[0])
                    lo = float(at.items_per_s_low.iloc[0])
                    hi = float(at.items_per_s_high.iloc[0])
        o = outputs.loc[outputs.backend == s]
        rows.append({"backend": s, "median_ms": r.p50_ms, "p10_ms": r.p10_ms,
                     "p90_ms": r.p90_ms, "ci_low_ms": r.ci_low_ms, "ci_high_ms": r.ci_high_ms,
                     "runs": int(r.runs), "vs_reference": vs, "knee": knee, "knee_found": found,
                     "items_per_s_at_knee": items, "items_per_s_low": lo,
                     "items_per_s_high": hi,
                     "outputs_agree": bool(o.passed.all()) if len(o) else None,
                     "max_abs": float(o.max_abs.max()) if len(o) else float("nan"),
                     "preset": o.preset.iloc[0] if len(o) else preset or "",
                     "rule": o.rule.iloc[0] if len(o) else "",
                     "peak_rss_bytes": float(mem.loc[s, "peak_rss_bytes"])
                     if s in mem.index else float("nan")})
    if not any(is_openvino(s) for s in sessions) and not openvino_available() \
            and INSTALL_HINT not in notes:
        notes.append(INSTALL_HINT)
    return BackendReport(table=pd.DataFrame(rows, columns=BACKEND_COLUMNS), outputs=outputs,
                         profile=prof, sweep=sweep, notes=notes,
                         elapsed_s=time.perf_counter() - t0)
