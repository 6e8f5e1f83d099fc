"""The profiling doors of the façade, each a run with the cost model's prediction beside
what it measured: :func:`profile` (``onnx_lab.profile(x)`` and ``lab.profile()``: the
predicted activation peak in ``memory``), ``lab.profile_generation()`` (the predicted KV
cache) and ``lab.batch_sweep()`` (the predicted peak per batch size). Importable from
:mod:`onnx_lab.lab`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from onnx_lab.core.source import resolve
from onnx_lab.errors import forwards

# Each function imports the analysis and the profiler on use, as the façade's methods do:
# `import onnx_lab` loads neither (tests/core/test_light_import.py).


@forwards("onnx_lab.profiling.run:profile")
def profile(model: Any, **kw: Any):
    """Per-operator profile of ``model`` with onnxruntime (``onnx_lab.profile(x)`` and
    ``lab.profile()`` are this one function): :func:`onnx_lab.profiling.run.profile` (runs,
    warmup, budget_s, providers, opt_level...) with the cost model's
    ``predicted_activation_bytes`` beside the measured peak in ``memory``.

    Example:
        >>> onnx_lab.profile("sample:convnet", runs=20).memory
    """
    from onnx_lab.analysis.peak import predicted_peak
    from onnx_lab.profiling.run import PROFILE_BUDGET_S
    from onnx_lab.profiling.run import profile as run

    # The cost model's prediction first, inside the budget (its shape inference is
    # 0.2-0.4 s on YOLOv8n, seconds under load): the profile gets what it leaves.
    t0 = time.perf_counter()
    model, dims, shapes = resolve(model, kw.get("dims"), kw.get("shapes"))
    kw = {**kw, "dims": dims, "shapes": shapes}
    peak = predicted_peak(model, dims, shapes)
    budget = kw.get("budget_s")
    if budget is None and kw.get("runs") is None:
        budget = PROFILE_BUDGET_S
    if budget is not None and isinstance(budget, (int, float)) and budget > 0:
        kw["budget_s"] = max(budget - (time.perf_counter() - t0), 1e-3)
    p = run(model, **kw)
    if budget is not None and p.budget_s is not None:
        p.budget_s = budget
    if len(p.memory):
        p.memory = p.memory.assign(predicted_activation_bytes=peak)
        p.notes.extend(below_prediction(p.memory, lambda r: r.session, "session_peak_bytes"))
    return p


def below_prediction(memory: Any, label: Any, measured: str) -> list[str]:
    """Notes for the rows of ``memory`` whose measured growth is below the predicted
    activation peak: the prediction is the stored node order's, every activation alive until
    its last reader; onnxruntime may run the nodes in another order and reuse buffers (light
    ResNet-50 at 'disable': 106.6 MB predicted, 73.5 MB measured for the whole process)."""
    from onnx_lab.core.units import format_bytes

    notes = []
    for r in memory.itertuples():
        got, pred = getattr(r, measured), r.predicted_activation_bytes
        if got == got and pred == pred and 0 <= got < pred:
            notes.append(
                f"{label(r)}: the measured growth ({format_bytes(got)}) is below the "
                f"predicted activation peak ({format_bytes(pred)}): the prediction keeps every "
                "activation of the model's stored node order alive until its last reader, "
                "and onnxruntime may run the nodes in another order, fold constant subgraphs "
                "and reuse buffers in place; read it as that order's peak, not as a bound")
    return notes


def profile_generation_predicted(lab: Any, **kw: Any):
    """``lab.profile_generation(**kw)``: :func:`onnx_lab.profiling.generate.profile_generation`
    with the cost model's KV cache at the final context as ``predicted_kv_cache_bytes``."""
    from onnx_lab.analysis.cost import kv_cache_bytes
    from onnx_lab.profiling.generate import profile_generation

    g = profile_generation(lab, **kw)
    if len(g.memory):
        # The cost model's KV cache at the final context (P + N).
        ctx = int(g.memory.context.iloc[0])
        g.memory = g.memory.assign(predicted_kv_cache_bytes=kv_cache_bytes(
            lab, ctx, batch=g.batch, dims=kw.get("dims")))
    return g


def batch_sweep_predicted(lab: Any, batch_sizes: Sequence[int], **kw: Any):
    """``lab.batch_sweep(batch_sizes, **kw)``: :func:`onnx_lab.profiling.sweep.batch_sweep`
    with the cost model's predicted activation peak per measured batch size."""
    from onnx_lab.analysis.peak import predicted_peak
    from onnx_lab.profiling.sweep import batch_sweep

    dim = kw.get("dim", "batch")
    peaks: dict[int, float] = {}

    def predict(b: int) -> float:
        # Called by the sweep for each measured size: its shape inference counts against
        # the budget (0.2-0.4 s per size on YOLOv8n); one count per size for all backends.
        if b not in peaks:
            peaks[b] = predicted_peak(lab, {**(kw.get("dims") or {}), dim: b},
                                      kw.get("shapes"))
        return peaks[b]

    s = batch_sweep(lab, batch_sizes, predict=predict, **kw)
    s.notes.extend(below_prediction(s.table, lambda r: f"{r.backend}: batch {r.batch}",
                                    "rss_growth_bytes"))
    return s
