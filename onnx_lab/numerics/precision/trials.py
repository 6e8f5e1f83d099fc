"""The precision doctor's trials: what a search judges by, how it builds and runs a candidate.

A *trial* converts the model with a set of nodes kept in higher precision (:class:`Converter`:
fp16 and bf16 by :mod:`onnx_lab.numerics.half`, int8 by onnxruntime's quantizer with one reused
calibration), runs it on the search's feeds (:func:`run_outputs`, onnxruntime through
:func:`onnx_lab.runtime.session.run_session`) and judges every output against the reference's
with one :class:`~onnx_lab.numerics.metrics.Rule` (:func:`make_tolerance`;
:func:`onnx_lab.numerics.metrics.judge` scores it). :class:`Search` holds what the trials of
one search share: the reference outputs, the rows of the trials table, what is known to pass
or fail, the timings.

Example:
    >>> s, cands = start_search("sample:convnet", "fp16", None, None, 8, None, None, None,
    ...                         None, 1e-3, 1e-2)
    >>> s.trial((), "full")["passed"]
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab._progress import Progress
from onnx_lab.core.branches import branch_labels, unexercised
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.errors import (
    InputError,
    LabError,
    RuntimeLoadError,
    close_matches,
    unknown_name,
)
from onnx_lab.numerics.align import through_float_casts
from onnx_lab.numerics.compare import runnable_samples
from onnx_lab.numerics.half import (
    FLOAT16,
    HalfRules,
    check_converted,
    conversion_bug,
    convert_half,
    emulate_bf16,
    node_ids,
    passes_checker,
    rename_to_ids,
    to_fp16_array,
)
from onnx_lab.numerics.metrics import RULES, Rule, get_preset, judge, rule_for
from onnx_lab.numerics.quantize import (
    CALIBRATION_SEED,
    Calibration,
    SavedSource,
    _full_proto,
    _lifted,
    _quantize_with,
    calibrate_int8,
)
from onnx_lab.numerics.selection import (
    PICKING_OPS,
    Sides,
    judge_selections,
    paired_values,
    selection_nodes,
)
from onnx_lab.runtime._runner import run as run_model
from onnx_lab.runtime.feeds import as_feed_list, cache_length_feeds, past_length
from onnx_lab.runtime.session import (
    PLACEHOLDER,
    is_placeholder,
    make_session,
    run_session,
    weightless_proto,
)

logger = logging.getLogger(__name__)

__all__ = ["TARGETS", "METRICS", "FP16_MAX", "TRIAL_COLUMNS", "PrecisionCancelled",
           "ToleranceUnreachable", "make_tolerance", "Converter", "CONVERTED", "run_outputs",
           "Search", "start_search"]

TARGETS = ("fp16", "bf16", "int8")
#: The metrics find_precision offers (the rows of numerics.metrics.RULES marked search).
METRICS = tuple(k.name for k in RULES.values() if k.search)
FP16_MAX = 65504.0

#: Columns of :attr:`PrecisionPlan.trials`.
TRIAL_COLUMNS = ["trial", "phase", "kept", "n_kept", "score", "max_abs", "sqnr_db", "cosine",
                 "passed", "seconds", "note"]


class PrecisionCancelled(LabError):
    """The search was cancelled before any plan met the tolerance."""


class ToleranceUnreachable(InputError):
    """No plan can meet the tolerance: the float32 model itself (optimized by onnxruntime, or
    with every node kept) misses it."""


class NothingToConvert(InputError):
    """The model has no node the target's conversion changes (trees and encoders of the
    ai.onnx.ml domain only, an already converted model): there is no plan to search."""


# ---------------------------------------------------------------------------- tolerance
def search_metrics() -> tuple[str, ...]:
    """The metrics find_precision offers now: the rows of ``numerics.metrics.RULES`` marked
    ``search`` (:data:`METRICS` is the same at import)."""
    return tuple(k.name for k in RULES.values() if k.search)


def make_tolerance(target: str, metric: str | None = None, tolerance: Any = None,
                   atol: float | None = None, rtol: float | None = None) -> Rule:
    """The :class:`~onnx_lab.numerics.metrics.Rule` that judges a search's outputs: the
    target's preset unless told otherwise.

    ``metric``: ``elementwise`` (atol/rtol per element), ``max_abs``, ``sqnr`` or ``cosine``
    (:data:`METRICS`). ``tolerance`` is a preset name (``"fp16"``), a number (the threshold of
    ``metric``: max|err|, dB or cosine), a pair ``(atol, rtol)`` or a dict
    ``{"atol": .., "rtol": ..}``.
    """
    for v in (atol, rtol):
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
            raise InputError(f"atol and rtol must be non-negative numbers, got {atol!r}, {rtol!r}.",
                             fix="Use e.g. atol=1e-3, rtol=1e-2.")
    metrics = search_metrics()
    if metric is not None and metric not in metrics:
        raise unknown_name("precision metric", metric, metrics,
                           fix=f"Metrics: {', '.join(metrics)}.")
    preset = get_preset("int8" if target == "int8" else target)
    if isinstance(tolerance, str):
        preset = get_preset(tolerance)
        tolerance = None
    if isinstance(tolerance, Mapping):
        atol = tolerance.get("atol", atol)
        rtol = tolerance.get("rtol", rtol)
        tolerance = None
    elif isinstance(tolerance, (tuple, list)) and len(tolerance) == 2:
        atol, rtol = tolerance
        tolerance = None
    if metric is None:
        if atol is not None or rtol is not None or preset.outputs.kind != "sqnr":
            metric = "elementwise"
        else:
            metric = "sqnr"
    if metric == "elementwise":
        base = preset.outputs if preset.outputs.kind != "sqnr" else get_preset("fp32").outputs
        return Rule("elementwise", float(base.atol if atol is None else atol),
                    float(base.rtol if rtol is None else rtol))
    kind = RULES[metric]
    if tolerance is None:  # the preset's number if its rule is of this kind, else the row's
        if kind.threshold == "atol" and atol is not None:
            tolerance = atol
        elif preset.outputs.kind == metric or kind.default_threshold is None:
            tolerance = getattr(preset.outputs, kind.threshold)
        else:
            tolerance = kind.default_threshold
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool):
        raise InputError(f"tolerance for metric {metric!r} must be a number, got {tolerance!r}.",
                         fix="E.g. metric='sqnr', tolerance=25 (dB), or metric='cosine', "
                         "tolerance=0.999.")
    return Rule(metric, **{kind.threshold: float(tolerance)})

# ---------------------------------------------------------------------------- converters
def _named(model: LabModel) -> LabModel:
    """A copy whose node names are the node ids (the converters select nodes by name, and
    ids are names when names are unique, so the ids of the copy are those of ``model``)."""
    copy = LabModel(ir.serde.deserialize_model(_full_proto(model)))
    changed = False
    for nid, e in copy.index.entries.items():
        if e.node.name != nid:
            e.node.name = nid
            changed = True
    if changed:
        copy.invalidate()
    return copy


class Converter:
    """Builds the candidate for a kept set; one per search (shared preparation).

    fp16 and bf16 follow :class:`onnx_lab.numerics.half.HalfRules` (the op schemas' type
    constraints; bf16 with float16's rules, since the emulation runs on any opset); int8
    follows onnxruntime's quantizer registry."""

    def __init__(self, model: LabModel, target: str, calibration: Calibration | None) -> None:
        self.model = model
        self.target = target
        self.calibration = calibration
        self._named: LabModel | None = None
        self._rules: HalfRules | None = None
        # fp16/bf16: the graph with node names set to node ids; its large main-graph weights
        # are placeholders (the light path) unless the model keeps weights in external files.
        self._light: onnx.ModelProto | None | bool = None
        self._base: onnx.ModelProto | None = None
        self._checked = False  # whether onnx's checker accepts the original
        self._half: dict[str, np.ndarray] = {}
        # int8: the named model saved once for every trial's quantization.
        self._saved: SavedSource | None = None
        if target == "int8":
            from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

            self.quant_ops = set(QDQRegistry) | set(QLinearOpsRegistry)

    def close(self) -> None:
        """Remove the int8 trials' saved source (also done when the converter is collected)."""
        if self._saved is not None:
            self._saved.close()
            self._saved = None

    @property
    def named(self) -> LabModel:
        """A copy of the model whose node names are the node ids (int8), with the float
        weights Constant nodes hold lifted into initializers as ``to_int8_static`` lifts
        them: quantized as weights, not as activations, so a trial is the conversion a
        user gets from the plan's exclusions."""
        if self._named is None:
            self._named = _lifted(_named(self.model))
        return self._named

    @property
    def rules(self) -> HalfRules:
        """fp16/bf16: which nodes convert and how (computed once)."""
        if self._rules is None:
            self._rules = HalfRules(self.model, FLOAT16)
        return self._rules

    def candidates(self) -> list[str]:
        """Node ids the conversion changes (those a plan can keep)."""
        if self.target != "int8":
            return list(self.rules.candidates)
        return [nid for nid in self._quantizable() if not self.model.index.entries[nid].graph]

    def _quantizable(self) -> list[str]:
        # onnxruntime's quantizer quantizes float32/float16 tensors only: a float64 MatMul (an
        # skl2onnx export with DoubleTensorType) comes out as it was, and "0 of 6 excluded"
        # was reported as a passing int8 plan of a model with no QuantizeLinear
        return [nid for nid, e in self.model.index.entries.items()
                if e.node.op_type in self.quant_ops and e.node.domain in ("", "ai.onnx")
                and not _computes_in_double(self.model, e.node)]

    def unreachable(self) -> list[str]:
        """Nodes of a kind the conversion changes that it cannot reach: int8, those inside
        If/Loop/Scan bodies (onnxruntime's QDQ quantizer walks the main graph only: an optimum
        merged decoder, all of whose compute sits in an If on ``use_cache_branch``, comes out
        with 0 QuantizeLinear). fp16/bf16 convert bodies: none."""
        if self.target != "int8":
            return []
        return [nid for nid in self._quantizable() if self.model.index.entries[nid].graph]

    def unreachable_note(self) -> str | None:
        """The note that says so (None when every node is reachable)."""
        body = self.unreachable()
        if not body:
            return None
        total = len(body) + len(self.candidates())
        return (f"{len(body)} of {total} float nodes the int8 quantizer changes are inside "
                "If/Loop bodies, which the int8 quantizer does not reach: they stay in float32 "
                "whatever the plan (e.g. " + ", ".join(repr(n) for n in body[:3]) + ")")

    def light(self) -> onnx.ModelProto | None:
        """The graph with its large main-graph weights as in-memory placeholders and node
        names set to node ids; None when the model keeps weights in external files (then
        :meth:`base` holds every weight)."""
        if self._light is None:
            proto, _names, _arrays, folder = weightless_proto(self.model, 4096, array=None)
            if folder is None:
                rename_to_ids(proto.graph, self.model.graph, node_ids(self.model))
                self._light = proto
            else:
                self._light = False
        return self._light or None

    def base(self) -> onnx.ModelProto:
        """The graph the conversion starts from (:meth:`light`, else the whole model)."""
        if self._base is None:
            light = self.light()
            if light is None:
                light = _full_proto(self.model)
                rename_to_ids(light.graph, self.model.graph, node_ids(self.model))
            self._base = light
            self._checked = passes_checker(light, is_placeholder)
        return self._base

    def _weight(self, name: str, to: int | None) -> np.ndarray:
        arr = self.model.graph.initializers[name].const_value.numpy()
        if to is None:
            return arr
        if name not in self._half:
            half = to_fp16_array(arr)
            half.flags.writeable = False
            self._half[name] = half
        return self._half[name]

    def convert(self, kept: Sequence[str]) -> LabModel:
        if self.target == "int8":
            assert self.calibration is not None
            if self._saved is None:
                self._saved = SavedSource(self.named)
            return _quantize_with(self.named, self.calibration, list(kept), self._saved)
        proto = onnx.ModelProto()
        proto.CopyFrom(self.base())
        if self.target == "bf16":
            out = emulate_bf16(proto, self.rules, kept, external=is_placeholder)
            if self._checked:
                check_converted(out, "bfloat16 emulation", external=is_placeholder)
            return self._restore(out, {})
        out, fill = convert_half(proto, self.rules, kept, external=is_placeholder)
        if self._checked:
            check_converted(out, "float16 conversion", external=is_placeholder)
        return self._restore(out, fill)

    def _restore(self, out: onnx.ModelProto, fill: dict[str, tuple[str, int]]) -> LabModel:
        """The converted graph with the in-memory weights back: the float16 copy (converted
        once per search) or the original array."""
        m = ir.serde.deserialize_model(out)
        for name, v in m.graph.initializers.items():
            t = v.const_value
            if not isinstance(t, ir.ExternalTensor) or t.location != PLACEHOLDER:
                continue
            src, to = fill.get(name, (name, None))
            v.const_value = ir.Tensor(self._weight(src, to), name=name)
        return LabModel(m)



# ---------------------------------------------------------------------------- running
#: What a candidate of each target is, when this module wrote it (int8: onnxruntime's quantizer).
CONVERTED = {"fp16": "float16 conversion", "bf16": "bfloat16 emulation"}


#: A run of the model the search starts from failing on the feeds: the feeds, not a node.
ORIGINAL_FAILS = ("the original model", "The original model itself does not run on these "
                  "feeds: check their values and shapes against lab.inputs, or pass feeds=.")


def run_outputs(model: LabModel, feed_list: list[dict], names: list[str],
                 opt_level: str = "disable", converted: str | None = None,
                 clock: Search | None = None, *, original: bool = False) -> list[dict]:
    """The ``names`` outputs of ``model`` on each feed. ``converted``: the model is a
    conversion of this module's own (``"float16 conversion"``): a load or run failure is a
    :class:`~onnx_lab.numerics.half.ConversionBug`, not advice to the user. ``original``:
    the model is the one the search starts from (a failure is the feeds', not a node's to
    keep). ``clock``: the search whose timings get the session and run times."""
    t0 = time.perf_counter()
    try:
        sess = make_session(model, outputs=names, arena=False, opt_level=opt_level)
    except RuntimeLoadError as e:
        if converted:
            raise conversion_bug(converted, e) from e
        raise
    if clock is not None:
        t0 = clock.clock("trial: onnxruntime session", t0)
    try:
        return _run_feeds(sess, feed_list, names, converted, original)
    finally:
        if clock is not None:
            clock.clock("trial: onnxruntime run", t0)


def _run_feeds(sess, feed_list: list[dict], names: list[str], converted: str | None,
               original: bool = False) -> list[dict]:
    what, fix = ORIGINAL_FAILS if original else (
        "the candidate", "Keep the failing node in higher precision.")
    out = []
    for f in feed_list:
        try:
            out.append(run_session(sess, f, names, what=what, fix=fix))
        except RuntimeLoadError as e:
            if converted:
                raise conversion_bug(converted, e.__cause__ or e) from e
            raise
    return out


@dataclass
class Search:
    """State shared by the trials of one search."""

    model: LabModel
    target: str
    tol: Rule
    feed_list: list[dict]
    conv: Converter
    out_names: list[str]
    ref_outputs: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    outputs_of: dict[tuple, dict] = field(default_factory=dict)
    models: dict[tuple, LabModel] = field(default_factory=dict)
    should_stop: Callable[[], bool] | None = None
    bar: Progress | None = None
    # fp16: node id -> the tensor beyond float16's range it produces or reads; a plan that
    # converts such a node stores the tensor in float16 (inf), whatever this runtime's CPU
    # kernels absorb (they may compute in float32 between two fp16 nodes).
    required: dict[str, str] = field(default_factory=dict)
    #: fp16: the tensors beyond float16's range whose overflow the full conversion absorbs
    #: (:func:`~onnx_lab.numerics.precision.ranking.absorbed_overflows`): no constraint.
    absorbed: set = field(default_factory=set)
    _pinned: set = field(default_factory=set)
    _passed: dict[tuple, bool] = field(default_factory=dict)
    _failed: list[frozenset] = field(default_factory=list)
    # The reference run with onnxruntime's optimizations (the confirmation's reference).
    ref_optimized: list[dict] | None = None
    #: Seconds by stage (:attr:`PrecisionPlan.timings`).
    timings: dict[str, float] = field(default_factory=dict)
    #: fp16: the reference's captured activations (one dict per feed), from the first capture
    #: to the sensitivity's (then dropped).
    ref_values: list[dict] | None = None
    #: The node onnxruntime named when the full conversion failed to run (None: it ran).
    broken_at: str | None = None
    #: Nodes the user kept (``keep=``): part of every trial's kept set, never searched.
    forced: frozenset = frozenset()
    #: Caveats found before any trial (kept ids the conversion does not change, nodes it
    #: cannot reach); they join :attr:`PrecisionPlan.notes`.
    notes: list[str] = field(default_factory=list)
    #: Per feed sample, the If branches it runs (``use_cache_branch=True
    #: (optimum::if/then_branch)``); empty for a model without a branch switch.
    branches: list[str] = field(default_factory=list)
    #: Whether the model holds a selection (TopK, NMS, ...: :mod:`~onnx_lab.numerics.
    #: selection`) whose near-tie flips a float16 trial's failing outputs are judged by.
    _selective: bool | None = None
    #: The float32 model's own outputs change with onnxruntime's optimizations, below its
    #: selections (a fused Conv+BatchNormalization flips a TopK's near-tie): the confirmation
    #: with optimizations, judged by the outputs alone, cannot tell a plan's error from that.
    flips_when_optimized: bool = False
    #: The last trial's outputs, {name: metrics} (the confirmation reads which missed).
    last_outputs: dict = field(default_factory=dict)

    def key(self, kept: Sequence[str]) -> tuple[str, ...]:
        """The sorted kept set of a trial: ``kept`` and the user's :attr:`forced` nodes."""
        return tuple(sorted(set(kept) | self.forced))

    def clock(self, key: str, t0: float) -> float:
        """Add the time since ``t0`` to ``timings[key]``; returns now."""
        now = time.perf_counter()
        self.timings[key] = self.timings.get(key, 0.0) + now - t0
        return now

    def stopped(self) -> bool:
        return bool(self.should_stop is not None and self.should_stop())

    def known(self, kept: Sequence[str]) -> bool | None:
        """Whether keeping ``kept`` passes, when a trial already told (None: unknown). A
        subset of a failing set fails, as the whole search assumes (keeping more never
        hurts); a set without an fp16 overflow constraint fails."""
        key = self.key(kept)
        if key in self._passed:
            return self._passed[key]
        ks = frozenset(key)
        if any(r not in ks for r in self.required):
            return False
        if any(ks <= f for f in self._failed):
            return False
        return None

    def passes(self, kept: Sequence[str], phase: str) -> bool:
        """:meth:`known`, else a trial."""
        known = self.known(kept)
        if known is not None:
            return known
        return bool(self.trial(kept, phase)["passed"])

    def trial(self, kept: Sequence[str], phase: str, model: LabModel | None = None,
              keep_model: bool = False, optimized: bool = False) -> dict:
        """Convert with ``kept`` kept, run, judge: one row. ``optimized``: both sides run with
        onnxruntime's graph optimizations (phase ``confirm``; recorded apart from the search's
        memory of passing and failing sets)."""
        key = self.key(kept)
        t0 = time.perf_counter()
        self.last_outputs = {}  # (a trial that does not run measures none)
        if optimized and self.ref_optimized is None:
            self.ref_optimized = run_outputs(self.model, self.feed_list, self.out_names,
                                              opt_level="all", clock=self, original=True)
            t0 = time.perf_counter()
        ref = self.ref_optimized if optimized else self.ref_outputs
        try:
            if model is None:
                model = self.models.get(key) or self.conv.convert(key)
            self.clock("trial: convert", t0)
            cand = run_outputs(model, self.feed_list, self.out_names,
                                opt_level="all" if optimized else "disable",
                                converted=CONVERTED.get(self.target), clock=self)
        except LabError as e:
            # A candidate onnxruntime cannot build or run (T5 int8: a Gather's indices
            # computed from quantized values run out of bounds) is a failed trial: keeping
            # more nodes is how the search gets past it.
            return self._broken(key, phase, e, t0, optimized)
        t = time.perf_counter()
        per_out = {}
        for name in self.out_names:
            per_out[name] = judge(self.tol, [r[name] for r in ref], [c[name] for c in cand])
        flips = None if optimized else self._near_ties(model, per_out)
        self.clock("trial: judge", t)
        missing = [nid for nid in self.required if nid not in key]
        note = "both sides run with onnxruntime's optimizations" if optimized else (flips or "")
        if self.branches and not all(m["passed"] for m in per_out.values()):
            note = "; ".join(x for x in (note, self._failing_branches(ref, cand)) if x)
        if missing:
            note = (f"fp16 overflow: {self.required[missing[0]]!r} (beyond 65504) would be "
                    f"stored in float16 by {missing[0]!r}"
                    + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        row = {"trial": len(self.rows), "phase": phase, "kept": list(key),
               "n_kept": len(key),
               "score": math.inf if missing else max(m["score"] for m in per_out.values()),
               "max_abs": max(m["max_abs"] for m in per_out.values()),
               "sqnr_db": min(m["sqnr_db"] for m in per_out.values()),
               "cosine": min(m["cosine"] for m in per_out.values()),
               "passed": all(m["passed"] for m in per_out.values()) and not missing,
               "seconds": time.perf_counter() - t0, "note": note}
        self.rows.append(row)
        if self.bar is not None:
            if self.bar.done + 1 >= self.bar.total:  # past the estimate: one more
                self.bar.expect(2)
            self.bar.step(f"{phase}: {len(key)} kept, score {row['score']:.3g}")
        self.last_outputs = per_out
        if optimized:
            return row
        self.outputs_of[key] = per_out
        self._passed[key] = row["passed"]
        if not row["passed"]:
            self._failed.append(frozenset(key))
        if keep_model:
            self.models[key] = model
        elif row["passed"]:
            # The plan is always the last passing trial: keep only that model (a BERT-base
            # fp16 copy is ~220 MB), plus the ones asked for (the full conversion).
            for k in [k for k in self.models if k not in self._pinned]:
                del self.models[k]
            self.models[key] = model
        if keep_model:
            self._pinned.add(key)
        return row


    def _near_ties(self, model: LabModel, per_out: dict[str, dict]) -> str | None:
        """A float16/bfloat16 trial whose failing outputs are all downstream of selections
        that flipped near-ties (:func:`~onnx_lab.numerics.selection.judge_selections`, as
        ``compare`` judges them, the candidate's nodes below a flip checked on their own):
        those outputs pass (``per_out`` updated) and the note says which flipped. A
        detector's class scores are nearly tied: each of its TopKs and its NMS picks other
        boxes in float16, and a RetinaNet's plan kept 697 of 718 nodes in float32."""
        failing = [n for n, m in per_out.items() if not m["passed"]]
        if not failing or self.target == "int8":
            return None
        if self._selective is None:
            # picking ops only: a merged decoder's If holds the comparisons of its masks, and
            # judging every failing trial would run both of its branches again
            self._selective = bool(selection_nodes(self.model)) and any(
                n.op_type in PICKING_OPS and n.domain in ("", "ai.onnx")
                for g in self.model.ir.graphs() for n in g)
        if not self._selective:
            return None
        ref = self.model
        ref_names = set(ref.index.values) | set(ref.graph.initializers)
        ref_of = {n: n for n in [*model.index.values, *model.graph.initializers]
                  if n in ref_names}
        through_float_casts(model, ref_of)
        values = paired_values(model, ref, ref_of, [(f, f) for f in self.feed_list],
                               lambda m, f, ns: run_model(m, f, ns))

        def rule(dtype: str, output: bool = False) -> Rule:
            name, r = rule_for(dtype, output=output, preset=self.target)
            return self.tol if output and name != "exact" else r

        sides = Sides(model, ref, ref_of.get, values, rule, lambda nid: True)
        try:
            sel = judge_selections(sides, {n: bool(m["passed"]) for n, m in per_out.items()})
        except LabError as e:  # a judgement that cannot be made: the trial fails as measured
            logger.debug("near-ties of the trial not judged (%s)", e)
            return None
        excused = [n for n in failing if (n in sel.not_comparable and n not in sel.unchecked)
                   or sel.alone.get(n, {}).get("passed")]
        if len(excused) < len(failing):
            return None
        for n in excused:
            per_out[n] = {**per_out[n], "passed": True}
        return sel.note(excused)

    def _failing_branches(self, ref: list[dict], cand: list[dict]) -> str:
        """``fails with use_cache_branch=True (optimum::if/then_branch)``: the branches of
        the samples on which some output misses the tolerance."""
        bad = [label for i, label in enumerate(self.branches)
               if not all(judge(self.tol, [ref[i][n]], [cand[i][n]])["passed"]
                          for n in self.out_names)]
        return f"fails with {'; '.join(dict.fromkeys(bad))}" if bad else ""

    def _broken(self, key: tuple[str, ...], phase: str, e: LabError, t0: float,
                optimized: bool) -> dict:
        """The row of a candidate that failed to convert or run (score inf, the reason in
        ``note``); remembered as failing, and the node the error names (when it is a
        candidate) in :attr:`broken_at`."""
        text = " ".join(str(e.problem if hasattr(e, "problem") else e).split())[:300]
        m = _NODE_IN_ERROR.search(text)
        node = next((g for g in m.groups() if g), None) if m else None
        if node and key == self.key(()):
            self.broken_at = node
        row = {"trial": len(self.rows), "phase": phase, "kept": list(key), "n_kept": len(key),
               "score": math.inf, "max_abs": math.inf, "sqnr_db": -math.inf,
               "cosine": math.nan, "passed": False,
               "seconds": time.perf_counter() - t0,
               "note": f"{FAILED_TO_RUN}: {text}"}
        self.rows.append(row)
        if self.bar is not None:
            if self.bar.done + 1 >= self.bar.total:  # past the estimate: one more
                self.bar.expect(2)
            self.bar.step(f"{phase}: {len(key)} kept, failed to run")
        if not optimized:
            self.outputs_of[key] = {n: {"max_abs": math.inf, "sqnr_db": -math.inf,
                                        "cosine": math.nan, "score": math.inf,
                                        "passed": False} for n in self.out_names}
            self._passed[key] = False
            self._failed.append(frozenset(key))
        return row

    def failed_to_run(self, row: dict) -> bool:
        """Whether a trial's row is a candidate that failed to convert or run."""
        return str(row.get("note", "")).startswith(FAILED_TO_RUN)


#: The start of the note of a trial whose candidate failed to convert or run.
FAILED_TO_RUN = "candidate failed to run"
# onnxruntime names the node it was running: "... running Gather node. Name:'/bias/Gather' ..."
_NODE_IN_ERROR = re.compile(r"Name:'([^']*)'|node name: ([^)]*)\)|[Nn]ode \(([^)]*)\)")


def _converted_nodes(model: LabModel) -> list[str]:
    """Nodes that quantize or cast to a narrow float type: the model is converted already."""
    return [nid for nid, e in model.index.entries.items()
            if e.node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear")
            or (e.node.op_type == "Cast" and any(
                a.name == "to" and a.value in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16, 10, 16)
                for a in e.node.attributes.values()))]


def _prepare(source: Any, target: str, feeds: Any, calibration: Any, n_calibration: int,
             dims, shapes) -> tuple[LabModel, list[dict], Converter]:
    if target not in TARGETS:
        raise unknown_name("precision target", target, TARGETS,
                           fix=f"Targets: {', '.join(TARGETS)}.")
    model, rdims, rshapes = resolve(source)
    dims = {**rdims, **(dims or {})}
    shapes = {**rshapes, **(shapes or {})}
    done = _converted_nodes(model)
    if done:
        original = getattr(source, "original", None)  # a Lab: its step 0
        earlier = original is not None and not _converted_nodes(original.model)
        raise NothingToConvert(
            f"The model is already converted (node {done[0]!r} casts to a narrow type or "
            "quantizes): a precision search starts from the float32 model.",
            fix="Search on the original: lab.checkout(0) (or the step before the conversion), "
            "or pass lab.original." if earlier else "It was converted before it was opened: "
            "search on the float32 model it was converted from (that file, or the Lab "
            "before the conversion).")
    # One sample per branch a boolean input decides (optimum's use_cache_branch): a plan is
    # judged on every branch, not on the one the seeded feeds happen to take.
    feed_list = as_feed_list(feeds, model, dims, shapes, branches=True)
    cal_feeds = feeds
    if feeds is None and len(feed_list) == 1:
        # A KV-cache decoder is judged at both kinds of step: an int8 plan judged at a past
        # of 4 alone passed at 31 dB and gave 3 dB at the prefill
        other = _other_step(model, dims, shapes)
        if other is not None:
            feed_list.append(other)
            if target == "int8" and calibration is None:
                # (not the judged samples' seeds: see quantize.CALIBRATION_SEED)
                cal_feeds = [f for seed in range(max(1, n_calibration // 2))
                             for f in cache_length_feeds(model, dims, shapes,
                                                         seed=CALIBRATION_SEED + seed)]
    cal = None
    if target == "int8" and not Converter(model, target, None).candidates():
        # Before calibrating: onnxruntime's quantizer fails on a graph without one standard
        # node it quantizes ("Failed to find proper ai.onnx domain" on an ai.onnx.ml-only
        # XGBoost export), which says nothing of the reason; a merged decoder's If bodies
        # hold every node and the quantizer does not enter them (0 of N quantized must not
        # come back as a passing plan).
        raise _nothing_to_convert(model, target, Converter(model, target, None).unreachable())
    if target == "int8":
        if isinstance(calibration, Calibration):
            cal = calibration
        else:
            cal = calibrate_int8(model, calibration if calibration is not None else
                                 cal_feeds, n_calibration, dims=dims, shapes=shapes)
    conv = Converter(model, target, cal)
    return model, feed_list, conv


def _other_step(model: LabModel, dims: Mapping[str, int], shapes: Mapping[str, Any]
                ) -> dict | None:
    """A KV-cache decoder's sample at the other kind of step (prefill or decode,
    :func:`~onnx_lab.runtime.feeds.cache_length_feeds`) when the model runs on it, else
    None (other models; an export that cannot take an empty past)."""
    extra = cache_length_feeds(model, dims, shapes)[1:]
    if not extra:
        return None
    try:
        run_outputs(model, extra, [v.name for v in model.graph.outputs], original=True)
    except LabError as e:
        logger.info("the decoder does not run at the other past length (%s): judged at the "
                    "given one only", e.problem)
        return None
    return extra[0]


_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")


def _computes_in_double(model: LabModel, node: ir.Node) -> bool:
    """Whether ``node``'s float inputs are float64 (stored or inferred dtypes; a node whose
    inputs have no known float type is not)."""
    from onnx_lab.core.shapes import dtype_name, value_type

    names = []
    for v in node.inputs:
        if v is None:
            continue
        if v.dtype is not None:
            name = dtype_name(v.dtype)
        else:
            t = value_type(model, v)
            name = t.dtype if t is not None else None
        if name in _FLOAT_NAMES:
            names.append(name)
    return bool(names) and all(n == "float64" for n in names)


def _nothing_to_convert(model: LabModel, target: str, unreachable: Sequence[str] = ()
                        ) -> NothingToConvert:
    """No node the conversion changes: the true reason, and for an ONNX-ML model (trees,
    linear models, encoders of the ai.onnx.ml domain, which neither float16 conversion nor the
    int8 quantizer touch) which ops it holds; ``unreachable``: nodes it would change but
    cannot reach (int8: inside If/Loop bodies)."""
    if unreachable:
        # graph paths are "{owner node id}/{attribute}"
        owners = sorted({model.index.entries[n].graph.rsplit("/", 1)[0] for n in unreachable})
        return NothingToConvert(
            f"Nothing to quantize to {target}: all {len(unreachable)} float nodes the int8 "
            "quantizer changes are inside If/Loop bodies (of "
            + ", ".join(repr(o) for o in owners[:3]) + "), which the int8 quantizer does not "
            "reach; a plan would quantize 0 of them.",
            fix="Quantize a model without control flow: the decoder exported unmerged (a "
            "with-past model.onnx, as optimum-onnx 0.1 writes by default; older optimum "
            "releases write decoder_with_past_model.onnx with --no-post-process); or "
            "onnx_lab.to_int8_dynamic, which quantizes inside the bodies; or target='fp16', "
            "which converts bodies.")
    double = sorted({e.node.op_type for e in model.index.entries.values()
                     if e.node.domain in ("", "ai.onnx") and _computes_in_double(model, e.node)})
    if double:
        return NothingToConvert(
            f"Nothing to convert to {target}: the model computes in float64 (double: "
            f"{', '.join(double[:6])}), and {target} conversion changes float32 computation "
            "only.",
            fix="Export the model in float32 (skl2onnx: FloatTensorType inputs) and search "
            "on that; there is no precision plan to search here.")
    ml = sorted({e.node.op_type for e in model.index.entries.values()
                 if e.node.domain == "ai.onnx.ml"})
    if ml:
        return NothingToConvert(
            f"Nothing to convert to {target}: the model's computation is in ai.onnx.ml ops "
            f"({', '.join(ml[:6])}), which {target} conversion does not change, and it has no "
            "standard float op that it does.",
            fix="Keep the model in float32 (its trees and encoders run in float32 or double "
            "whatever the target); there is no precision plan to search.")
    return NothingToConvert(f"The model has no node that {target} conversion changes (no "
                            "float computation to keep or convert).",
                            fix="Pass a float32 model; an already converted model has "
                            "nothing left to search.")


def start_search(source: Any, target: str, feeds: Any, calibration: Any, n_calibration: int,
                 dims: Mapping[str, int] | None, shapes: Mapping[str, Sequence[int]] | None,
                 metric: str | None, tolerance: Any, atol: float | None, rtol: float | None,
                 should_stop: Callable[[], bool] | None = None,
                 keep: Sequence[str] | None = None) -> tuple[Search, list[str]]:
    """The search over ``source``'s candidate nodes (sensitivity and find_precision).
    ``keep``: node ids every trial keeps (the user's choice; not searched)."""
    forced = _check_keep(keep)
    model, feed_list, conv = _prepare(source, target, feeds, calibration, n_calibration,
                                      dims, shapes)
    tol = make_tolerance(target, metric, tolerance, atol, rtol)
    cands = conv.candidates()
    if not cands:
        raise _nothing_to_convert(model, target)
    out_names = [v.name for v in model.graph.outputs]
    feed_list, not_run = _runnable_branches(model, feed_list, feeds is None)
    s = Search(model, target, tol, feed_list, conv, out_names, should_stop=should_stop,
               branches=branch_labels(model, feed_list) if len(feed_list) > 1 else [])
    s.notes.extend(not_run)
    missed = [] if not_run else unexercised(model, feed_list)  # not_run says it already
    steps = [past_length(model, f) for f in feed_list] if feeds is None and \
        not s.branches and len(feed_list) == 2 else []
    if steps and None not in steps:
        s.notes.append(f"judged at a decode and a prefill step of the KV cache: past lengths "
                       f"{steps[0]} and {steps[1]}")
    if s.branches and not missed and not not_run:
        s.notes.append("judged on every branch a boolean input decides, one sample each: "
                       + "; ".join(dict.fromkeys(s.branches)))
    if missed:
        s.notes.append("the feeds never run " + "; ".join(missed) + ": the plan is not "
                       "judged there (pass feeds with both values, or feeds=None)")
    note = conv.unreachable_note()
    if note:
        logger.warning("%s", note)
        s.notes.append(note)
    if forced:
        ids = model.index.entries
        for nid in forced:
            if nid not in ids:
                near = close_matches(nid, list(ids))
                hint = f" Close matches: {', '.join(repr(m) for m in near)}." if near else ""
                raise InputError(f"keep names node {nid!r}, which the model does not have."
                                 f"{hint}", fix="Pass node ids from lab.nodes['node_id'] "
                                 "(or plan.sensitivity['node_id']).")
        cset = set(cands)
        idle = [nid for nid in forced if nid not in cset]
        if idle:
            what = "excluded from int8" if target == "int8" else "kept in float32"
            s.notes.append(f"keep: {', '.join(repr(n) for n in idle[:5])}"
                           f"{f' and {len(idle) - 5} more' if len(idle) > 5 else ''} "
                           f"{'is' if len(idle) == 1 else 'are'} not changed by {target} "
                           f"conversion ({what} anyway)")
        s.forced = frozenset(n for n in forced if n in cset)
        cands = [c for c in cands if c not in s.forced]
    return s, cands


def _runnable_branches(model: LabModel, feed_list: list[dict], generated: bool
                       ) -> tuple[list[dict], list[str]]:
    """The generated samples of the other branches the float model runs on, and a note for
    each it does not (given feeds are left to fail as they are)."""
    if not generated or len(feed_list) < 2:
        return feed_list, []
    keep, problems = runnable_samples(model, feed_list)
    labels = branch_labels(model, feed_list)
    dropped = [label for f, label in zip(feed_list, labels) if not any(f is k for k in keep)]
    return keep, [f"the float32 model does not run {label} with these dims ({problem}): the "
                  "plan is not judged there" for label, problem in zip(dropped, problems)]


def _check_keep(keep: Any) -> list[str]:
    """``keep`` as a list of node ids (InputError for anything else)."""
    if keep is None:
        return []
    if isinstance(keep, str):
        keep = [keep]
    try:
        ids = list(keep)
    except TypeError:
        ids = None
    if ids is None or not all(isinstance(n, str) for n in ids):
        raise InputError(f"keep must be a list of node ids, got {keep!r}.",
                         fix="E.g. keep=['/encoder/Gather_3'] (ids from lab.nodes['node_id']).")
    return list(dict.fromkeys(ids))
