"""The precision doctor: which nodes must stay in higher precision, found automatically.

``find_precision`` answers "which layers must stay in float32 (or out of int8) so the outputs
meet my tolerance?" in five stages:

1. **One reference run, then the full conversion.** The fp32 model runs once over the feeds
   (fp16: every tensor captured in memory-bounded chunks, for values beyond 65504); its
   outputs are kept for every later trial. When the fully converted model meets the
   tolerance, that is the plan (one conversion, one run). Otherwise the fp32 model and the
   fully converted candidate run tensor by tensor (the capture of :func:`onnx_lab.compare`).
2. **Sensitivity.** Each node's *local* error (its output's error beyond the worst error of its
   inputs, relative to the tensor's own scale; noise energy for int8), flags for fp16 overflow
   (a reference value beyond 65504 in or out) and non-finite values; for int8 the activation
   range statistics (outlier ratio, saturation against the calibrated range). The top few
   nodes are re-checked exactly: a trial with that node alone kept.
3. **Bisect** over the ranked list (int8: each node followed by its tensors' producers and
   readers): prefixes of doubling length, then a bisection, for the shortest passing prefix.
4. **Prune** by group testing: a minimal subset of that prefix (no node can be dropped alone),
   each necessary node found by bisecting the rest, the unneeded ones dropped in chunks.
5. **Confirm** the plan as a deployment runs it (onnxruntime's optimizations on both sides);
   when it only just passed without them and misses with them, the next smallest passing set.

Each trial is one conversion and one run of the outputs; int8 trials reuse one calibration
(:func:`onnx_lab.numerics.quantize.calibrate_int8`); fp16 trials convert a weight-free graph
and reuse each weight converted once. Every trial is a row of
:attr:`PrecisionPlan.trials` and :meth:`PrecisionPlan.reproduce` rebuilds it.

Targets: ``fp16`` (:mod:`onnx_lab.numerics.half`: the op schemas' type constraints decide
what converts together, Casts at kept-node borders; every candidate passes onnx's checker),
``int8`` (static QDQ, kept = ``nodes_to_exclude``) and ``bf16``, *emulated* with the same
rules: onnxruntime's CPU kernels have no bfloat16 arithmetic, so weights of converted nodes are
rounded to bfloat16 and their other inputs and float outputs round-trip through bfloat16.

Example:
    >>> from onnx_lab.numerics.precision import find_precision
    >>> plan = find_precision("model.onnx", "fp16", atol=1e-3, rtol=1e-2)
    >>> plan.kept, plan.trials
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core._proto import graph_protos
from onnx_lab.core.index import node_scope
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.core.source_map import group_by_module, module_at
from onnx_lab.errors import InputError, LabError, RuntimeLoadError, unknown_name
from onnx_lab.numerics.half import (
    FLOAT16,
    HalfRules,
    all_names,
    check_converted,
    conversion_bug,
    convert_half,
    node_ids,
    passes_checker,
    rename_to_ids,
    to_bf16_bits,
    to_fp16_array,
)
from onnx_lab.numerics.metrics import get_preset
from onnx_lab.numerics.quantize import (
    Calibration,
    SavedSource,
    _full_proto,
    _quantize_with,
    calibrate_int8,
)
from onnx_lab.numerics.weight_only import find_weight_only
from onnx_lab.runtime.capture import capturable_tensors, estimate_bytes, plan_chunks
from onnx_lab.runtime.feeds import as_feed_list
from onnx_lab.runtime.session import PLACEHOLDER, make_session, run_session, weightless_proto

logger = logging.getLogger(__name__)

__all__ = ["find_precision", "sensitivity", "PrecisionPlan", "Tolerance", "TARGETS",
           "METRICS", "TRIAL_COLUMNS", "SENSITIVITY_COLUMNS", "OUTPUT_COLUMNS",
           "PrecisionCancelled", "ToleranceUnreachable"]

TARGETS = ("fp16", "bf16", "int8")
METRICS = ("elementwise", "max_abs", "sqnr", "cosine")
FP16_MAX = 65504.0

#: Columns of :attr:`PrecisionPlan.trials`.
TRIAL_COLUMNS = ["trial", "phase", "kept", "n_kept", "score", "max_abs", "sqnr_db", "cosine",
                 "passed", "seconds", "note"]
#: Columns of the sensitivity table (``by="node"``).
SENSITIVITY_COLUMNS = ["rank", "node_id", "op_type", "graph", "scope", "est_drop", "rel_err",
                       "overflow", "nonfinite", "score_alone", "drop", "tensor", "ref_abs_max",
                       "outlier_ratio", "cal_min", "cal_max", "saturation"]
#: Columns of :attr:`PrecisionPlan.outputs` (before = everything converted, after = the plan;
#: a side that stores an fp16 overflow scores ``inf`` and fails, as its trial does).
OUTPUT_COLUMNS = ["tensor", "max_abs_before", "max_abs_after", "sqnr_db_before",
                  "sqnr_db_after", "score_before", "score_after", "passed_before",
                  "passed_after"]


class PrecisionCancelled(LabError):
    """The search was cancelled before any plan met the tolerance."""


class ToleranceUnreachable(InputError):
    """No plan can meet the tolerance: the float32 model itself (optimized by onnxruntime, or
    with every node kept) misses it."""


# ---------------------------------------------------------------------------- tolerance
@dataclass(frozen=True)
class Tolerance:
    """How the outputs are judged; ``score`` <= 1 passes (lower is better).

    Metrics:
        ``elementwise``: every element within ``atol + rtol·|ref|``; score = the worst
            ``|err| / (atol + rtol·|ref|)``.
        ``max_abs``: score = ``max|err| / threshold``.
        ``sqnr``: SQNR of at least ``threshold`` dB; score = noise energy / allowed noise
            energy (``10^((threshold - sqnr)/10)``).
        ``cosine``: cosine similarity of at least ``threshold``; score = ``(1-cos)/(1-threshold)``.
    A NaN or infinity on one side only scores ``inf``.
    """

    metric: str
    atol: float = 0.0
    rtol: float = 0.0
    threshold: float | None = None

    def describe(self) -> str:
        if self.metric == "elementwise":
            return f"|err| <= {self.atol:g} + {self.rtol:g}*|ref| per element"
        if self.metric == "max_abs":
            return f"max|err| <= {self.threshold:g}"
        if self.metric == "sqnr":
            return f"sqnr >= {self.threshold:g} dB"
        return f"cosine >= {self.threshold:g}"

    def judge(self, refs: Sequence[np.ndarray], cands: Sequence[np.ndarray]) -> dict[str, Any]:
        """Metrics of one output over samples: score, max_abs, sqnr_db, cosine, passed."""
        max_abs = ratio = 0.0
        s_rr = s_ee = s_rc = s_cc = 0.0
        bad = False
        for r, c in zip(refs, cands):
            r = np.asarray(r, dtype=np.float64).reshape(-1)
            c = np.asarray(c, dtype=np.float64).reshape(-1)
            if r.shape != c.shape:
                bad = True
                continue
            fr, fc = np.isfinite(r), np.isfinite(c)
            same_nf = (~fr & ~fc) & ((np.isnan(r) & np.isnan(c)) | (r == c))
            if np.any(~(fr & fc) & ~same_nf):
                bad = True
            both = fr & fc
            r, c = r[both], c[both]
            if not r.size:
                continue
            err = np.abs(c - r)
            max_abs = max(max_abs, float(err.max()))
            if self.metric == "elementwise":
                tol = self.atol + self.rtol * np.abs(r)
                with np.errstate(divide="ignore", invalid="ignore"):
                    q = np.where(err == 0, 0.0, err / tol)
                ratio = max(ratio, float(q.max()))
            s_rr += float(np.einsum("i,i->", r, r))
            s_ee += float(np.einsum("i,i->", err, err))
            s_rc += float(np.einsum("i,i->", r, c))
            s_cc += float(np.einsum("i,i->", c, c))
        sqnr = math.inf if s_ee == 0 else (10 * math.log10(s_rr / s_ee) if s_rr > 0 else -math.inf)
        denom = math.sqrt(s_rr * s_cc)
        cosine = s_rc / denom if denom > 0 else (1.0 if s_ee == 0 else 0.0)
        if bad:
            score = math.inf
        elif self.metric == "elementwise":
            score = ratio
        elif self.metric == "max_abs":
            score = max_abs / self.threshold if self.threshold else (0.0 if max_abs == 0
                                                                    else math.inf)
        elif self.metric == "sqnr":
            score = 0.0 if math.isinf(sqnr) and sqnr > 0 else (
                math.inf if not math.isfinite(sqnr) else 10 ** ((self.threshold - sqnr) / 10))
        else:
            score = (1 - cosine) / (1 - self.threshold) if self.threshold < 1 else (
                0.0 if cosine >= 1 else math.inf)
        if bad:
            max_abs = math.inf
        return {"score": float(score), "max_abs": max_abs, "sqnr_db": sqnr, "cosine": cosine,
                "passed": bool(score <= 1.0)}


def make_tolerance(target: str, metric: str | None = None, tolerance: Any = None,
                   atol: float | None = None, rtol: float | None = None) -> Tolerance:
    """The :class:`Tolerance` of a search: the target's preset unless told otherwise.

    ``tolerance`` is a preset name (``"fp16"``), a number (the threshold of ``metric``), a pair
    ``(atol, rtol)`` or a dict ``{"atol": .., "rtol": ..}``.
    """
    for v in (atol, rtol):
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
            raise InputError(f"atol and rtol must be non-negative numbers, got {atol!r}, {rtol!r}.",
                             fix="Use e.g. atol=1e-3, rtol=1e-2.")
    if metric is not None and metric not in METRICS:
        raise unknown_name("precision metric", metric, METRICS,
                           fix=f"Metrics: {', '.join(METRICS)}.")
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
        return Tolerance("elementwise", float(base.atol if atol is None else atol),
                         float(base.rtol if rtol is None else rtol))
    if tolerance is None:
        if metric == "sqnr":
            tolerance = preset.outputs.min_sqnr_db if preset.outputs.kind == "sqnr" else 30.0
        elif metric == "cosine":
            tolerance = 0.999
        else:
            tolerance = atol if atol is not None else preset.outputs.atol
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool):
        raise InputError(f"tolerance for metric {metric!r} must be a number, got {tolerance!r}.",
                         fix="E.g. metric='sqnr', tolerance=25 (dB), or metric='cosine', "
                         "tolerance=0.999.")
    return Tolerance(metric, threshold=float(tolerance))


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


_FLOAT_NAMES = ("float32", "float16", "bfloat16", "float64", "FLOAT", "FLOAT16", "BFLOAT16",
                "DOUBLE")


def _is_float(v: ir.Value | None) -> bool:
    return v is not None and v.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16,
                                         ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


#: float32 -> float16 as onnxruntime's converter rounds weights (kept under this name).
_to_fp16 = to_fp16_array
_rename_to_ids = rename_to_ids


class _Converter:
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
        """A copy of the model whose node names are the node ids (int8)."""
        if self._named is None:
            self._named = _named(self.model)
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
        return [nid for nid, e in self.model.index.entries.items()
                if e.node.op_type in self.quant_ops and e.node.domain in ("", "ai.onnx")]

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
            self._checked = passes_checker(light, _is_placeholder)
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
            out = _bf16_emulate(proto, self.rules, set(kept))
            if self._checked:
                check_converted(out, "bfloat16 emulation", external=_is_placeholder)
            return self._restore(out, {})
        out, fill = convert_half(proto, self.rules, kept, external=_is_placeholder)
        if self._checked:
            check_converted(out, "float16 conversion", external=_is_placeholder)
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


def _is_placeholder(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == PLACEHOLDER for e in t.external_data)


def _bf16_round(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = to_bf16_bits(a).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(np.shape(a))


def _bf16_emulate(proto: onnx.ModelProto, rules: HalfRules, kept: set[str]) -> onnx.ModelProto:
    """bf16 emulation: each converted node's convertible groups (the op schema's, see
    :class:`~onnx_lab.numerics.half.HalfRules`) take bfloat16 values: float weights rounded,
    inputs from float32 producers rounded, float outputs rounded (the tensor keeps its name).
    Index computations and fixed-type inputs (``Resize`` scales) are never rounded.

    Rounding is a ``Cast(bfloat16)→Cast(float)`` pair from opset 13 (where Cast takes
    bfloat16); before, Veltkamp's split in float32 arithmetic: ``c = x·(2^16+1)``,
    ``x' = c − (c − x)`` keeps x's 8 leading significant bits, bfloat16's (rounded to
    nearest; |x| beyond ~5e33 overflows there)."""
    from onnx import helper, numpy_helper

    FLOAT, BF16 = onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    split = "__onnx_lab_bf16_split"
    if opset < 13:
        proto.graph.initializer.append(numpy_helper.from_array(
            np.array(65537.0, np.float32), split))

    def rounding(src: str, dst: str, name: str) -> list[onnx.NodeProto]:
        if opset >= 13:
            b = unique(f"{dst}__bf16")
            return [helper.make_node("Cast", [src], [b], name=f"{name}/to_bf16", to=BF16),
                    helper.make_node("Cast", [b], [dst], name=f"{name}/to_fp32", to=FLOAT)]
        c, d = unique(f"{dst}__c"), unique(f"{dst}__d")
        return [helper.make_node("Mul", [src, split], [c], name=f"{name}/split_mul"),
                helper.make_node("Sub", [c, src], [d], name=f"{name}/split_sub"),
                helper.make_node("Sub", [c, d], [dst], name=f"{name}/split_hi")]

    taken = all_names(proto.graph)

    def unique(base: str) -> str:  # unique across every graph (bodies of If included)
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    cands = set(rules.candidates)
    converted_out: set[str] = set()
    for g in graph_protos(proto.graph):
        inits = {t.name: t for t in g.initializer}
        rounded: dict[str, str] = {}
        new_nodes = []
        for n in g.node:
            rule = rules.rules.get(n.name)
            convert = n.name in cands and n.name not in kept and rule is not None
            if convert:
                for gi, _ in rule.groups:
                    for i in gi:
                        name = n.input[i]
                        if name in rounded:
                            n.input[i] = rounded[name]
                            continue
                        t = inits.get(name)
                        if t is not None and t.data_type == FLOAT and not _is_placeholder(t):
                            rname = unique(f"{name}__bf16")
                            arr = _bf16_round(numpy_helper.to_array(t))
                            g.initializer.append(numpy_helper.from_array(arr, rname))
                        elif name not in converted_out:
                            rname = unique(f"{name}__bf16r")
                            new_nodes.extend(rounding(name, rname, rname))
                        else:
                            continue
                        rounded[name] = rname
                        n.input[i] = rname
            new_nodes.append(n)
            if not convert:
                continue
            for _, go in rule.groups:
                for i in go:
                    name = n.output[i]
                    raw = unique(f"{name}__fp32")
                    n.output[i] = raw
                    new_nodes.extend(rounding(raw, name, f"{n.name}/bf16_{i}"))
                    converted_out.add(name)
        del g.node[:]
        g.node.extend(new_nodes)
    return proto


# ---------------------------------------------------------------------------- running
#: What a candidate of each target is, when this module wrote it (int8: onnxruntime's quantizer).
_CONVERTED = {"fp16": "float16 conversion", "bf16": "bfloat16 emulation"}


def _run_outputs(model: LabModel, feed_list: list[dict], names: list[str],
                 opt_level: str = "disable", converted: str | None = None,
                 clock: _Search | None = None) -> list[dict]:
    """The ``names`` outputs of ``model`` on each feed. ``converted``: the model is a
    conversion of this module's own (``"float16 conversion"``): a load or run failure is a
    :class:`~onnx_lab.numerics.half.ConversionBug`, not advice to the user. ``clock``: the
    search whose timings get the session and run times."""
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
        return _run_feeds(sess, feed_list, names, converted)
    finally:
        if clock is not None:
            clock.clock("trial: onnxruntime run", t0)


def _run_feeds(sess, feed_list: list[dict], names: list[str], converted: str | None
               ) -> list[dict]:
    out = []
    for f in feed_list:
        try:
            out.append(run_session(sess, f, names, what="the candidate",
                                   fix="Keep the failing node in higher precision."))
        except RuntimeLoadError as e:
            if converted:
                raise conversion_bug(converted, e.__cause__ or e) from e
            raise
    return out


@dataclass
class _Search:
    """State shared by the trials of one search."""

    model: LabModel
    target: str
    tol: Tolerance
    feed_list: list[dict]
    conv: _Converter
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
        key = tuple(sorted(kept))
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
        key = tuple(sorted(kept))
        t0 = time.perf_counter()
        if model is None:
            model = self.models.get(key) or self.conv.convert(key)
        t = self.clock("trial: convert", t0)
        if optimized and self.ref_optimized is None:
            self.ref_optimized = _run_outputs(self.model, self.feed_list, self.out_names,
                                              opt_level="all", clock=self)
        ref = self.ref_optimized if optimized else self.ref_outputs
        cand = _run_outputs(model, self.feed_list, self.out_names,
                            opt_level="all" if optimized else "disable",
                            converted=_CONVERTED.get(self.target), clock=self)
        t = time.perf_counter()
        per_out = {}
        for name in self.out_names:
            per_out[name] = self.tol.judge([r[name] for r in ref], [c[name] for c in cand])
        self.clock("trial: judge", t)
        missing = [nid for nid in self.required if nid not in key]
        note = "both sides run with onnxruntime's optimizations" if optimized else ""
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
            self.bar.step(f"{phase}: {len(key)} kept, score {row['score']:.3g}")
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


def _layerwise(ref: LabModel, cand: LabModel | None, feed_list: list[dict], target: str,
               max_bytes: int, keep: list[dict] | None = None
               ) -> tuple[dict[str, dict], list[dict]]:
    """Per reference tensor: error stats of the candidate (and the reference's own stats);
    plus the reference outputs. One run of each model per chunk.

    ``cand=None``: the reference alone (its magnitude and non-finite counts, float32
    arithmetic, no error): what the fp16 overflow constraint needs before any candidate runs.

    ``keep``: the reference's captured values, one dict per feed. With ``cand=None`` they are
    filled when the whole capture fits one chunk of ``max_bytes``; with a candidate, a chunk
    whose tensors are all there does not run the reference again (the reference activations
    are captured once per search).
    """
    ref_names = [n for n in capturable_tensors(ref)]
    cand_set = set(capturable_tensors(cand)) if cand is not None else set()
    pairs: list[tuple[str, str | None]] = []
    for n in ref_names:
        v = ref.index.values.get(n)
        if v is not None and v.dtype is not None and not _is_float(v):
            continue
        if cand is None:
            pairs.append((n, None))
            continue
        dq = f"{n}_DequantizeLinear_Output"
        c = dq if dq in cand_set else (n if n in cand_set else None)
        if c is not None:
            pairs.append((n, c))
    out_names = [v.name for v in ref.graph.outputs]
    shapes_in = {k: np.asarray(v).shape for k, v in feed_list[0].items()}
    sizes = estimate_bytes(ref, [p[0] for p in pairs], shapes_in)
    per_sample = 1 if cand is None else 2
    sizes = {p: (sizes.get(p[0]) or (1 << 20)) * (len(feed_list) * per_sample)
             for p in pairs}
    stats: dict[str, dict] = {}
    ref_out: list[dict] = [{} for _ in feed_list]
    for chunk in plan_chunks(sizes, max_bytes) if pairs else []:
        r_names = list(dict.fromkeys([p[0] for p in chunk]))
        # The outputs ride along in the first chunk (no separate run for them).
        if not stats:
            r_names += [n for n in out_names if n not in r_names]
        if keep and all(n in keep[0] for n in r_names):
            rv = keep
        else:
            rv = _run_outputs(ref, feed_list, r_names)
            if keep is not None and cand is None and len(sizes) == len(chunk) and \
                    sum(sizes.values()) <= max_bytes // 2:
                for i, values in enumerate(rv):
                    keep[i].update(values)
        if cand is None:
            for r, _ in chunk:
                stats[r] = _ref_stats([rv[s][r] for s in range(len(feed_list))])
        else:
            c_names = list(dict.fromkeys([p[1] for p in chunk]))
            cv = _run_outputs(cand, feed_list, c_names, converted=_CONVERTED.get(target))
            for r, c in chunk:
                stats[r] = _pair_stats([rv[s][r] for s in range(len(feed_list))],
                                       [cv[s][c] for s in range(len(feed_list))], target)
            del cv
        for s in range(len(feed_list)):
            for n in out_names:
                if n in rv[s]:
                    ref_out[s][n] = rv[s][n]
        del rv
    missing = [n for n in out_names if n not in ref_out[0]]
    if missing:
        extra = _run_outputs(ref, feed_list, missing)
        for s in range(len(feed_list)):
            ref_out[s].update(extra[s])
    return stats, ref_out


def _ref_stats(values: list[np.ndarray]) -> dict:
    """The reference's own statistics of one tensor (no candidate): error fields are zero."""
    st = {"max_abs": 0.0, "max_ref": 0.0, "s_rr": 0.0, "s_ee": 0.0, "numel": 0, "nf_ref": 0,
          "nf_cand": 0, "values": None}
    for a in values:
        a = np.asarray(a)
        if not a.size:
            continue
        if a.dtype.kind != "f":
            a = a.astype(np.float64)
        hi, lo = float(a.max()), float(a.min())  # NaN and inf show here: then count them
        if math.isfinite(hi) and math.isfinite(lo):
            st["numel"] += int(a.size)
            st["max_ref"] = max(st["max_ref"], hi, -lo)
            continue
        finite = np.isfinite(a)
        nf = int(a.size - np.count_nonzero(finite))
        st["nf_ref"] += nf
        st["numel"] += int(a.size) - nf
        if nf < a.size:
            st["max_ref"] = max(st["max_ref"], float(np.abs(a[finite]).max()))
    st["nf_cand"] = st["nf_ref"]
    return st


def _pair_stats(refs: list[np.ndarray], cands: list[np.ndarray], target: str) -> dict:
    """Error statistics of one tensor: the candidate's values against the reference's."""
    st = {"max_abs": 0.0, "max_ref": 0.0, "s_rr": 0.0, "s_ee": 0.0, "numel": 0,
          "nf_ref": 0, "nf_cand": 0, "values": None}
    for ra, ca in zip(refs, cands):
        a = np.asarray(ra, dtype=np.float64).reshape(-1)
        b = np.asarray(ca, dtype=np.float64).reshape(-1)
        if a.shape != b.shape:
            continue
        fa, fb = np.isfinite(a), np.isfinite(b)
        st["nf_ref"] += int((~fa).sum())
        st["nf_cand"] += int((~fb).sum())
        if fa.any():
            st["max_ref"] = max(st["max_ref"], float(np.abs(a[fa]).max()))
        both = fa & fb
        a2, b2 = a[both], b[both]
        if a2.size:
            err = np.abs(b2 - a2)
            st["max_abs"] = max(st["max_abs"], float(err.max()))
            st["s_rr"] += float(np.einsum("i,i->", a2, a2))
            st["s_ee"] += float(np.einsum("i,i->", err, err))
            st["numel"] += int(a2.size)
        if target == "int8" and a2.size:
            # Quantiles for the outlier ratio (a sample of at most 1M values).
            st["values"] = a2 if st["values"] is None else np.concatenate(
                [st["values"], a2])[: 1 << 20]
    if st["values"] is not None and st["values"].size:
        # int8: noise against the bulk of the signal (|ref| clipped at its 99th percentile),
        # so an outlier that stretches the range cannot hide the resolution it costs every
        # other value.
        a = np.abs(st["values"])
        p99 = float(np.quantile(a, 0.99))
        st["p99"] = p99
        st["s_rr_bulk"] = float(np.mean(np.minimum(a, p99) ** 2)) * st["numel"]
    return st


def _rel(st: dict | None, target: str) -> float:
    if st is None:
        return 0.0
    if st["nf_cand"] > st["nf_ref"]:
        return math.inf
    if target == "int8":
        bulk = st.get("s_rr_bulk", st["s_rr"])
        return st["s_ee"] / bulk if bulk > 0 else (0.0 if st["s_ee"] == 0 else math.inf)
    return st["max_abs"] / st["max_ref"] if st["max_ref"] > 0 else (
        0.0 if st["max_abs"] == 0 else math.inf)


def _estimate(model: LabModel, candidates: list[str], stats: dict[str, dict], target: str,
              calibration: Calibration | None) -> pd.DataFrame:
    """The estimated sensitivity of every candidate (no exact columns yet)."""
    idx = model.index
    rows = []
    owner_est: dict[str, float] = {}
    for nid in candidates:
        e = idx.entries[nid]
        node = e.node
        outs = [v.name for v in node.outputs if v is not None and v.name in stats]
        ins = [v.name for v in node.inputs if v is not None and v.name in stats]
        rel_out = max((_rel(stats[n], target) for n in outs), default=0.0)
        rel_in = max((_rel(stats[n], target) for n in ins), default=0.0)
        nonfinite = any(stats[n]["nf_cand"] > stats[n]["nf_ref"] for n in outs) and not any(
            stats[n]["nf_cand"] > stats[n]["nf_ref"] for n in ins)
        overflow = target == "fp16" and any(stats[n]["max_ref"] > FP16_MAX for n in outs + ins)
        if math.isinf(rel_out) and math.isinf(rel_in):
            est = 0.0
        else:
            est = max(0.0, rel_out - rel_in)
        if overflow or nonfinite:
            est = math.inf
        tensor = outs[0] if outs else None
        row = {"node_id": nid, "op_type": node.op_type, "graph": e.graph,
               "scope": node_scope(node), "est_drop": est, "rel_err": rel_out,
               "overflow": overflow, "nonfinite": nonfinite, "score_alone": math.nan,
               "drop": math.nan, "tensor": tensor, "ref_abs_max": math.nan,
               "outlier_ratio": math.nan, "cal_min": math.nan, "cal_max": math.nan,
               "saturation": math.nan, "_topo": e.topo}
        if tensor is not None:
            st = stats[tensor]
            row["ref_abs_max"] = st["max_ref"]
            vals = st.get("values")
            if vals is not None and vals.size:
                a = np.abs(vals)
                p = st.get("p99", float(np.quantile(a, 0.99)))
                row["outlier_ratio"] = float(a.max() / p) if p > 0 else (
                    0.0 if a.max() == 0 else math.inf)
                if calibration is not None:
                    rng = calibration.range_of(tensor)
                    if rng is not None:
                        row["cal_min"], row["cal_max"] = rng
                        row["saturation"] = float(((vals < rng[0]) | (vals > rng[1])).mean())
        if not e.graph:
            owner_est[nid] = est
        rows.append(row)
    # Body nodes cannot be captured: they take the estimate of their outermost owner.
    for row in rows:
        if row["graph"] and row["est_drop"] == 0.0:
            graph, owner = row["graph"], None
            while graph:  # graph paths are "{owner node id}/{attribute}", nested ones chain
                owner = graph.rsplit("/", 1)[0]
                graph = idx.entries[owner].graph if owner in idx.entries else ""
            owner_node = idx.entries.get(owner) if owner else None
            if owner_node is not None:
                outs = [v.name for v in owner_node.node.outputs if v is not None
                        and v.name in stats]
                row["est_drop"] = max((_rel(stats[n], target) for n in outs), default=0.0)
                row["rel_err"] = row["est_drop"]
    df = pd.DataFrame(rows)
    return df


def _rank(df: pd.DataFrame, target: str) -> pd.DataFrame:
    if not len(df):
        return pd.DataFrame(columns=SENSITIVITY_COLUMNS)
    key = df["est_drop"].astype(float)
    if target == "int8":
        # Outliers make per-tensor quantization coarse: break ties (and near-ties) with it.
        key = key + 1e-6 * df["outlier_ratio"].fillna(0.0).astype(float)
    df = df.assign(_key=key).sort_values(["_key", "_topo"], ascending=[False, True],
                                         kind="stable")
    # The exactly re-checked rows (top few) are ordered among themselves by measured drop.
    checked = df["drop"].notna()
    if checked.any():
        # Measured drops reorder the re-checked rows; drops within 5% of the fully converted
        # score are noise and keep the estimated order.
        top = df.loc[checked]
        base = float((top["score_alone"] + top["drop"]).max())
        big = top["drop"].astype(float) > 0.05 * abs(base) if math.isfinite(base) else (
            top["drop"].astype(float) > 0)
        top = top.assign(_big=big, _d=top["drop"].where(big, 0.0))
        top = top.sort_values(["_big", "_d", "_key"], ascending=False, kind="stable")
        df = pd.concat([top.drop(columns=["_big", "_d"]), df.loc[~checked]])
    df = df.drop(columns=["_key", "_topo"]).reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    return df[SENSITIVITY_COLUMNS]


def _group(df: pd.DataFrame, by: str) -> pd.DataFrame:
    if by == "node":
        return df
    if by not in ("op_type", "scope", "module"):
        raise unknown_name("sensitivity grouping", by, ["node", "op_type", "scope", "module"],
                           fix="by='node', by='op_type', by='scope' or by='module'.")
    g = df.groupby(by, sort=False, dropna=False)
    out = g.agg(n_nodes=("node_id", "size"), est_drop=("est_drop", "sum"),
                max_est_drop=("est_drop", "max"), overflow=("overflow", "any"),
                nonfinite=("nonfinite", "any"), outlier_ratio=("outlier_ratio", "max"),
                best_rank=("rank", "min"), node_ids=("node_id", list)).reset_index()
    out = out.sort_values(["est_drop", "best_rank"], ascending=[False, True], kind="stable")
    out = out.reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


# ---------------------------------------------------------------------------- the plan
@dataclass
class PrecisionPlan:
    """The result of :func:`find_precision`.

    Attributes:
        target: ``fp16``, ``bf16`` or ``int8``.
        kept: node ids kept in higher precision (int8: excluded from quantization), most
            sensitive first.
        passed: whether the plan meets the tolerance (False only when cancelled).
        model: the converted model with ``kept`` in higher precision (a LabModel).
        trials: one row per trial (:data:`TRIAL_COLUMNS`): trial, phase (``full``,
            ``recheck``, ``all_kept``, ``guess``, ``bisect``, ``prune``, ``confirm``: judged
            with onnxruntime's optimizations on both sides), kept (node ids), n_kept, score
            (<= 1 passes), max_abs, sqnr_db, cosine (worst output), passed, seconds
            (conversion + run).
        sensitivity: the ranked nodes (:data:`SENSITIVITY_COLUMNS`).
        outputs: per output, error with everything converted and with the plan
            (:data:`OUTPUT_COLUMNS`).
        tolerance: the :class:`Tolerance` the outputs were judged by.
        n_candidates: nodes the conversion changes (what a plan can keep).
        calibration: int8 only, the reused :class:`~onnx_lab.numerics.quantize.Calibration`.
        seconds: wall time of the search.
        cancelled: the search stopped early (the best plan found so far is returned).
    """

    target: str
    kept: list[str]
    passed: bool
    model: LabModel
    trials: pd.DataFrame
    sensitivity: pd.DataFrame
    outputs: pd.DataFrame
    tolerance: Tolerance
    n_candidates: int
    seconds: float
    calibration: Calibration | None = None
    cancelled: bool = False
    feeds: list = field(default_factory=list, repr=False)
    source: LabModel | None = field(default=None, repr=False)
    required: dict[str, str] = field(default_factory=dict, repr=False)
    #: Whether the plan also meets the tolerance with onnxruntime's optimizations on both
    #: sides (a ``confirm`` trial); None when no search was needed (nothing to confirm).
    confirmed: bool | None = None
    #: Caveats about the inputs the plan was judged on (:func:`_weak_reference_notes`).
    notes: list[str] = field(default_factory=list)
    #: The history step's PassResult when the plan was pushed (``lab.find_precision``).
    result: Any = field(default=None, repr=False)
    #: Where the time went, in seconds: the stages (``reference run``, ``full conversion``,
    #: ``sensitivity``, ``bisect``, ``prune``, ``confirm``: each including its trials) and,
    #: across all trials, ``trial: convert``, ``trial: onnxruntime session``,
    #: ``trial: onnxruntime run``, ``trial: judge``.
    timings: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def excluded(self) -> list[str]:
        """``kept`` under its int8 name (nodes excluded from quantization)."""
        return self.kept

    def reproduce(self, trial: int) -> tuple[LabModel, dict[str, Any]]:
        """Rebuild trial ``trial`` from its row: (model, {score, passed, max_abs...}).

        Example:
            >>> model, m = plan.reproduce(3); m["score"] == plan.trials.loc[3, "score"]
        """
        if not 0 <= trial < len(self.trials):
            raise InputError(f"No trial {trial}: the table has trials 0..{len(self.trials) - 1}.",
                             fix="Pick a number from plan.trials['trial'].")
        kept = list(self.trials.loc[trial, "kept"])
        level = "all" if self.trials.loc[trial, "phase"] == "confirm" else "disable"
        conv = _Converter(self.source, self.target, self.calibration)
        model = conv.convert(kept)
        conv.close()
        ref = _run_outputs(self.source, self.feeds, [v.name for v in self.source.graph.outputs],
                           opt_level=level)
        cand = _run_outputs(model, self.feeds, list(ref[0]), opt_level=level)
        per = [self.tolerance.judge([r[n] for r in ref], [c[n] for c in cand]) for n in ref[0]]
        missing = [nid for nid in self.required if nid not in kept]
        return model, {"score": math.inf if missing else max(m["score"] for m in per),
                       "max_abs": max(m["max_abs"] for m in per),
                       "passed": all(m["passed"] for m in per) and not missing}

    def kept_by_module(self, depth: int | None = None) -> pd.DataFrame:
        """The kept nodes per PyTorch module of the source model (see
        :mod:`onnx_lab.core.source_map`): module, module_class, n_nodes (kept), first_topo,
        node_ids.

        Example:
            >>> lab.find_precision("fp16").kept_by_module(depth=2)
        """
        model = self.source if self.source is not None else self.model
        frame = pd.DataFrame({"node_id": list(self.kept)}, dtype=object)
        return group_by_module(frame, model, {"node_ids": ("node_id", list)}, depth=depth)

    def summary_text(self) -> str:
        verdict = "meets" if self.passed else "does NOT meet"
        what = "excluded from int8" if self.target == "int8" else "kept in float32"
        deployed = "" if self.confirmed is None else (
            ", also with onnxruntime's optimizations" if self.confirmed else
            ", but NOT with onnxruntime's optimizations")
        return (f"{self.target}: {len(self.kept)} of {self.n_candidates} nodes {what}; the plan "
                f"{verdict} {self.tolerance.describe()}{deployed} ({len(self.trials)} trials, "
                f"{self.seconds:.1f} s){' [cancelled]' if self.cancelled else ''}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: target, kept, passed, confirmed, notes, tolerance, trials, outputs,
        seconds, timings (:attr:`timings`, rounded)."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            if isinstance(v, (np.floating, np.integer, np.bool_)):
                return clean(v.item())
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        def records(df: pd.DataFrame) -> list[dict]:
            return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]

        return {"target": self.target, "kept": list(self.kept), "passed": self.passed,
                "confirmed": self.confirmed, "notes": list(self.notes),
                "n_candidates": self.n_candidates, "tolerance": self.tolerance.describe(),
                "seconds": round(self.seconds, 3), "cancelled": self.cancelled,
                "timings": {k: round(v, 3) for k, v in self.timings.items()},
                "trials": records(self.trials), "outputs": records(self.outputs)}

    def __repr__(self) -> str:
        return f"PrecisionPlan({self.summary_text()})"

    def plot(self, top: int = 20):
        """Ranked bar chart of the sensitivity, kept nodes marked (a matplotlib figure)."""
        return _display.draw(self, "plot", top=top)

    def render(self, **kw: Any):
        """The graph coloured by sensitivity, kept nodes highlighted."""
        return _display.draw(self, "render", **kw)

    def _repr_html_(self) -> str:
        return _display.draw(self, "html")


def _prepare(source: Any, target: str, feeds: Any, calibration: Any, n_calibration: int,
             dims, shapes) -> tuple[LabModel, list[dict], _Converter]:
    if target not in TARGETS:
        raise unknown_name("precision target", target, TARGETS,
                           fix=f"Targets: {', '.join(TARGETS)}.")
    model, rdims, rshapes = resolve(source)
    dims = {**rdims, **(dims or {})}
    shapes = {**rshapes, **(shapes or {})}
    done = [nid for nid, e in model.index.entries.items()
            if e.node.op_type in ("QuantizeLinear", "DynamicQuantizeLinear")
            or (e.node.op_type == "Cast" and any(
                a.name == "to" and a.value in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16, 10, 16)
                for a in e.node.attributes.values()))]
    if done:
        raise InputError(
            f"The model is already converted (node {done[0]!r} casts to a narrow type or "
            "quantizes): a precision search starts from the float32 model.",
            fix="Search on the original: lab.checkout(0) (or the step before the conversion), "
            "or pass lab.original.")
    feed_list = as_feed_list(feeds, model, dims, shapes)
    cal = None
    if target == "int8":
        if isinstance(calibration, Calibration):
            cal = calibration
        else:
            cal = calibrate_int8(model, calibration if calibration is not None else
                                 (feeds if feeds is not None else None), n_calibration,
                                 dims=dims, shapes=shapes)
    conv = _Converter(model, target, cal)
    return model, feed_list, conv


def _start(source: Any, target: str, feeds: Any, calibration: Any, n_calibration: int,
           dims: Mapping[str, int] | None, shapes: Mapping[str, Sequence[int]] | None,
           metric: str | None, tolerance: Any, atol: float | None, rtol: float | None,
           should_stop: Callable[[], bool] | None = None) -> tuple[_Search, list[str]]:
    """The search over ``source``'s candidate nodes (sensitivity and find_precision)."""
    model, feed_list, conv = _prepare(source, target, feeds, calibration, n_calibration,
                                      dims, shapes)
    tol = make_tolerance(target, metric, tolerance, atol, rtol)
    cands = conv.candidates()
    if not cands:
        raise InputError(f"The model has no node that {target} conversion changes (no float "
                         "computation to keep or convert).",
                         fix="Pass a float32 model; an already converted model has nothing "
                         "left to search.")
    return _Search(model, target, tol, feed_list, conv, [v.name for v in model.graph.outputs],
                   should_stop=should_stop), cands


def sensitivity(source: Any, target: str = "fp16", feeds: Any = None, *, by: str = "node",
                recheck: int = 5, calibration: Any = None, n_calibration: int = 8,
                metric: str | None = None, tolerance: Any = None, atol: float | None = None,
                rtol: float | None = None, dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, max_bytes: int = 1 << 30,
                progress: Any = None, depth: int | None = None) -> pd.DataFrame:
    """Rank nodes by how much the output error drops when that node alone stays in the
    higher precision.

    The estimate (``est_drop``) comes from one layerwise capture of the reference and the fully
    converted model: the error a node adds beyond the worst error of its inputs, relative to
    its tensor's scale (int8: noise energy over signal energy); ``inf`` for an fp16 overflow
    (a reference value beyond 65504 in or out: ``overflow``) or NaN/inf the node creates
    (``nonfinite``). The top ``recheck`` rows are checked exactly: ``score_alone`` is the
    output score (<= 1 passes) with that node (group) alone kept, ``drop`` the fall from the
    fully converted score; they are ordered by ``drop``. Body nodes (If/Loop/Scan), which
    cannot be captured, take their owner's output error.

    Columns (``by="node"``): rank, node_id, op_type, graph, scope, est_drop, rel_err (the
    node's output error), overflow, nonfinite, score_alone, drop, tensor (its first output),
    ref_abs_max, and for int8: outlier_ratio (max|x| / 99th percentile of |x|), cal_min,
    cal_max (calibrated range), saturation (fraction of reference values outside it).
    ``by="module"`` groups by the PyTorch module each node comes from (cut to ``depth``
    levels; see :mod:`onnx_lab.core.source_map`).
    ``by="op_type"``/``"scope"``/``"module"``: rank, the key, n_nodes, est_drop (sum), max_est_drop,
    overflow, nonfinite, outlier_ratio, best_rank, node_ids, score_alone, drop.

    Example:
        >>> sensitivity("sample:convnet", "int8").head(3)
    """
    t_all = time.perf_counter()
    s, cands = _start(source, target, feeds, calibration, n_calibration, dims, shapes, metric,
                      tolerance, atol, rtol)
    with Progress(progress, 2 + recheck, f"sensitivity {target}") as bar:
        s.bar = bar
        df, _ = _sensitivity(s, cands, recheck, max_bytes)
    if by == "module":
        mods = module_at(s.model, depth)
        df = df.assign(module=df.node_id.map(lambda n: mods.get(n)))
    if by != "node":
        grouped = _group(df, by)
        if recheck:
            grouped["score_alone"] = math.nan
            grouped["drop"] = math.nan
            base = s.rows[0]["score"]
            for i in range(min(recheck, len(grouped))):
                row = s.trial(grouped.loc[i, "node_ids"], f"recheck {by}")
                grouped.loc[i, "score_alone"] = row["score"]
                grouped.loc[i, "drop"] = _drop(base, row["score"])
        df = grouped
    s.conv.close()
    df.attrs["trials"] = pd.DataFrame(s.rows, columns=TRIAL_COLUMNS)
    df.attrs["seconds"] = time.perf_counter() - t_all
    return df


def _check_reachable(s: _Search) -> None:
    """InputError when the float32 model itself misses the tolerance once onnxruntime
    optimizes it (fusions reorder float arithmetic): no precision plan can do better."""
    opt = _run_outputs(s.model, s.feed_list, s.out_names, opt_level="all")
    s.ref_optimized = opt
    per = [s.tol.judge([r[n] for r in s.ref_outputs], [o[n] for o in opt]) for n in s.out_names]
    worst = max(per, key=lambda m: m["score"])
    if not worst["passed"]:
        raise ToleranceUnreachable(
            f"The float32 model itself misses the tolerance ({s.tol.describe()}): run with "
            f"onnxruntime's optimizations it differs from its unoptimized run by max_abs "
            f"{worst['max_abs']:.3g} (score {worst['score']:.3g}); no precision plan can meet "
            "it.", fix=f"Loosen the tolerance (e.g. atol >= {max(worst['max_abs'], 1e-7) * 10:.2g}"
            ", rtol >= 1e-4), or use metric='sqnr'/'cosine'.")


def _overflows(s: _Search, stats: dict[str, dict], cands: list[str]) -> None:
    """fp16: the producer and the readers of every tensor beyond float16's range must be
    kept (``s.required``)."""
    if s.target != "fp16":
        return
    cset = set(cands)
    idx = s.model.index
    for t, st in stats.items():
        if st["max_ref"] > FP16_MAX:
            for nid in [idx.producer.get(t), *idx.consumers.get(t, [])]:
                if nid in cset:
                    s.required.setdefault(nid, t)


def _drop(base: float, alone: float) -> float:
    if math.isinf(base) and math.isinf(alone):
        return 0.0
    return float(base - alone)


def _sensitivity(s: _Search, cands: list[str], recheck: int, max_bytes: int,
                 full: LabModel | None = None) -> tuple[pd.DataFrame, LabModel]:
    """Layerwise capture + estimate + exact re-check; fills s.ref_outputs and trial 0."""
    if full is None:
        full = s.conv.convert(())
    stats, ref_out = _layerwise(s.model, full, s.feed_list, s.target, max_bytes,
                                keep=s.ref_values)
    s.ref_values = None
    s.ref_outputs = ref_out
    if s.bar is not None:
        s.bar.step("layerwise capture")
    _overflows(s, stats, cands)
    if not s.rows:
        s.trial((), "full", model=full, keep_model=True)
    if not s.rows[0]["passed"]:
        _check_reachable(s)
    df = _estimate(s.model, cands, stats, s.target, s.conv.calibration)
    df = _rank(df, s.target)
    base = s.rows[0]["score"]
    if recheck and not s.rows[0]["passed"]:
        df = df.assign(_topo=0)
        for i in range(min(recheck, len(df))):
            if s.stopped():
                break
            row = s.trial([df.loc[i, "node_id"]], "recheck")
            df.loc[i, "score_alone"] = row["score"]
            df.loc[i, "drop"] = _drop(base, row["score"])
        df = _rank(df.drop(columns=["rank"]), s.target)
    return df, full


def find_precision(source: Any, target: str = "fp16", feeds: Any = None, *,
                   metric: str | None = None, tolerance: Any = None, atol: float | None = None,
                   rtol: float | None = None, calibration: Any = None, n_calibration: int = 8,
                   recheck: int = 5, max_trials: int = 48, dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None, max_bytes: int = 1 << 30,
                   progress: Any = None, should_stop: Callable[[], bool] | None = None,
                   confirm: bool = True) -> PrecisionPlan:
    """The smallest set of nodes to keep in higher precision so the outputs meet a tolerance.

    Args:
        source: a Lab, path, ModelProto, ``"sample:NAME"``... (the float32 reference).
        target: ``"fp16"``, ``"bf16"`` (emulated, see the module doc) or ``"int8"`` (static
            QDQ; kept nodes are excluded from quantization).
        feeds: the inputs the outputs are judged on (dict, list of dicts, ``.npz``; None: one
            seeded sample).
        metric, tolerance, atol, rtol: how outputs are judged (:func:`make_tolerance`). Default:
            the target's preset (fp16/bf16: element-wise atol/rtol; int8: SQNR >= 20 dB);
            ``atol``/``rtol`` switch to element-wise with those numbers.
        calibration: int8 calibration data (feeds, an ``.npz`` file or folder) or a
            :class:`~onnx_lab.numerics.quantize.Calibration`; None: ``feeds`` when given,
            else ``n_calibration`` seeded samples. Calibration runs once and is cached.
        recheck: how many top-ranked nodes are re-checked exactly.
        max_trials: bound on the number of trials of the pruning stage (past it, the
            smallest passing set found so far is the plan).
        max_bytes: bound on captured activations held at once.
        progress: None (tqdm when interactive), False, or a callable(done, total, label).
        should_stop: called between trials; True stops the search and returns the best plan
            found so far (``cancelled=True``); PrecisionCancelled when none passed yet.
        confirm: after a search, judge the plan once more with onnxruntime's graph
            optimizations on both sides, as a default session deploys it (``confirm`` trials;
            see :attr:`PrecisionPlan.confirmed`). False for runtimes that run the graph as
            written (TensorRT honours QDQ placement).

    Returns:
        A :class:`PrecisionPlan`.

    Raises:
        UnknownNameError: unknown target or metric. InputError: no float node; a tolerance
        that the model misses even with every node kept (the fix names the error reached).

    Example:
        >>> plan = find_precision("sample:convnet", "fp16", atol=1e-3, rtol=1e-2)
        >>> plan.kept, plan.trials[["phase", "n_kept", "score", "passed"]]
    """
    if target == "int4":  # weight-only LLM quantization: its own search (numerics/weight_only)
        return find_weight_only(source, target, feeds, tolerance=tolerance, dims=dims,
                                max_trials=max_trials, max_bytes=max_bytes, progress=progress,
                                should_stop=should_stop)
    t_all = time.perf_counter()
    s, cands = _start(source, target, feeds, calibration, n_calibration, dims, shapes, metric,
                      tolerance, atol, rtol, should_stop)
    model, feed_list, conv, tol = s.model, s.feed_list, s.conv, s.tol
    n = len(cands)
    est_total = 3 + recheck + max(1, math.ceil(math.log2(n + 1))) + min(max_trials, 16)
    with Progress(progress, est_total, f"find_precision {target}") as bar:
        s.bar = bar
        # Quick exit: when the full conversion already passes, the candidate is never
        # captured. fp16 first captures the reference alone (an overflow beyond 65504 may
        # hide behind CPU kernels that compute in float32 and must be kept anyway); the
        # others need only the reference outputs.
        stats: dict[str, dict] = {}
        t = time.perf_counter()
        if target == "fp16":
            s.ref_values = [{} for _ in feed_list]
            stats, s.ref_outputs = _layerwise(model, None, feed_list, target, max_bytes,
                                              keep=s.ref_values)
            _overflows(s, stats, cands)
        else:
            s.ref_outputs = _run_outputs(model, feed_list, s.out_names)
        t = s.clock("reference run", t)
        first = s.trial((), "full", keep_model=True)
        t = s.clock("full conversion", t)
        sens = None
        if first["passed"]:
            sens = _rank(_estimate(model, cands, stats, target, conv.calibration), target)
        else:
            sens, _ = _sensitivity(s, cands, recheck, max_bytes, s.models.get(()))
        t = s.clock("sensitivity", t)
        ranked = list(sens["node_id"])
        best: tuple[str, ...] | None = None
        if s.rows[0]["passed"]:
            best = ()
        else:
            singles = [r for r in s.rows if r["phase"] == "recheck" and r["passed"]]
            if singles:
                best = tuple(min(singles, key=lambda r: r["score"])["kept"])
        order = _search_order(model, ranked, readers=target == "int8",
                              expand=None if target == "int8" else _standouts(sens))
        if best is None and not s.stopped():
            flagged = int(np.isinf(sens["est_drop"].astype(float)).sum())
            best = _bisect(s, order, flagged)
        t = s.clock("bisect", t)
        if best is None:
            raise PrecisionCancelled("The search was cancelled before any plan met "
                                     f"{tol.describe()}.", fix="Run it again to the end.")
        if len(best) > 1 and not s.stopped():
            # The bisection's last node is necessary when the prefix without it failed.
            needed = [best[-1]] if s.known(best[:-1]) is False else []
            best = _prune(s, order, list(best), max_trials, needed)
        t = s.clock("prune", t)
        confirmed = None
        if confirm and not s.rows[0]["passed"] and not s.stopped():
            best, confirmed = _confirm(s, best)
        s.clock("confirm", t)
        bar.total = bar.done
    kept = [nid for nid in ranked if nid in set(best)]
    key = tuple(sorted(best))
    final = s.models.get(key) or conv.convert(key)
    conv.close()
    before, after = s.outputs_of[()], s.outputs_of[key]
    # The fp16 overflow constraint fails a side whatever this CPU run measured (its kernels
    # may compute in float32 where a GPU stores the inf): the outputs table says so too.
    ok_before, ok_after = not s.required, all(r in key for r in s.required)
    outputs = pd.DataFrame([{
        "tensor": name, "max_abs_before": before[name]["max_abs"],
        "max_abs_after": after[name]["max_abs"], "sqnr_db_before": before[name]["sqnr_db"],
        "sqnr_db_after": after[name]["sqnr_db"],
        "score_before": before[name]["score"] if ok_before else math.inf,
        "score_after": after[name]["score"] if ok_after else math.inf,
        "passed_before": before[name]["passed"] and ok_before,
        "passed_after": after[name]["passed"] and ok_after} for name in s.out_names],
        columns=OUTPUT_COLUMNS)
    passed = bool(outputs["passed_after"].all())
    sens = sens.assign(kept=sens["node_id"].isin(set(kept)))
    return PrecisionPlan(target=target, kept=kept, passed=passed, model=final,
                         trials=pd.DataFrame(s.rows, columns=TRIAL_COLUMNS), sensitivity=sens,
                         outputs=outputs, tolerance=tol, n_candidates=n,
                         seconds=time.perf_counter() - t_all, calibration=conv.calibration,
                         cancelled=s.stopped(), feeds=feed_list, source=model,
                         required=dict(s.required), confirmed=confirmed,
                         notes=_weak_reference_notes(s.ref_outputs, s.out_names, tol),
                         timings=dict(s.timings))


#: An output whose reference values span less than this (times max(1, its magnitude)) on the
#: judged inputs "barely varies": a relative metric judges rounding noise there.
WEAK_RANGE = 1e-3


def _weak_reference_notes(ref_outputs: list[dict], out_names: Sequence[str],
                          tol: Tolerance) -> list[str]:
    """A note per output that barely varies on the judged inputs, when the metric is relative
    (sqnr, cosine).

    PP-OCRv4's text detector on seeded random images outputs a probability map of ~0
    everywhere (at most 5.9e-05): int8 rounds it to 0, its SQNR is 0 dB, and the search
    kept 289 of 296 nodes out of int8 — a verdict on noise, which real images would not give.
    """
    if tol.metric not in ("sqnr", "cosine"):
        return []
    notes = []
    for name in out_names:
        arrays = [np.asarray(r[name]) for r in ref_outputs if name in r]
        arrays = [a[np.isfinite(a)] for a in arrays if a.dtype.kind == "f" and a.size]
        arrays = [a for a in arrays if a.size]
        if not arrays:
            continue
        lo, hi = min(float(a.min()) for a in arrays), max(float(a.max()) for a in arrays)
        if hi - lo <= WEAK_RANGE * max(1.0, abs(lo), abs(hi)):
            notes.append(
                f"output {name!r} barely varies on these inputs (from {lo:.3g} to {hi:.3g}): "
                f"{tol.metric} there judges rounding noise, not the model (a plan may keep far "
                "more nodes than real inputs need, or pass what they would fail); judge on "
                "representative inputs (feeds=..., an .npz of real samples)")
    return notes


def _confirm(s: _Search, best: tuple[str, ...], tries: int = 4
             ) -> tuple[tuple[str, ...], bool]:
    """The plan judged once more as a deployment runs it: both sides with onnxruntime's
    graph optimizations (fusions reorder float arithmetic; QDQ pairs become int8 kernels). A
    plan that only just passed without them can miss with them (BERT-base fp16, whose full
    conversion misses by 4%, is at the noise of the fusions). When it misses, the next
    smallest passing sets of the search are confirmed, ``tries`` in all; the first that holds
    is the plan. Returns (plan, whether it held)."""
    best = tuple(sorted(best))
    others = {}
    for r in s.rows:
        key = tuple(r["kept"])
        if r["passed"] and r["phase"] != "confirm" and len(key) > len(best):
            others.setdefault(key, r["score"])
    order = [best] + sorted(others, key=lambda k: (len(k), others[k]))
    for key in order[:tries]:
        if s.stopped():
            break
        if s.trial(key, "confirm", optimized=True)["passed"]:
            return key, True
    return best, False


def _search_order(model: LabModel, ranked: list[str], readers: bool = True,
                  expand: set[str] | None = None) -> list[str]:
    """The ranked nodes, each followed by the producers of its inputs and (``readers``, int8)
    the readers of its outputs (those the search can keep), at their first appearance.
    ``expand``: only these nodes bring their neighbours forward (None: every node).

    Rounding error lives on tensors. int8: the QDQ quantizer quantizes a tensor for its
    producer and for each reader it quantizes: excluding only the node whose output shows
    the error (a Relu after a conv with an outlier channel) leaves that tensor quantized for
    the next conv (on ResNet-50 with a planted outlier, the two convs around the top-ranked
    Relu ranked 68th and 97th). fp16: a node that shows the error (a Sub that centres values
    near 1000) only recovers when the tensor it reads stays float32 too, which takes its
    producer; the producer's own relative error is small, so it ranks far down (on ResNet-50
    with three such centring Subs the bisection needed a prefix of 115 of 125 nodes). Its
    readers are not needed there, and adding them bloats the prefixes of models that need
    many nodes (PP-OCRv4 rec: 505 of 768 kept with readers, the pruning out of trials)."""
    idx = model.index
    cset = set(ranked)
    out: dict[str, None] = {}
    for nid in ranked:
        out.setdefault(nid)
        if expand is not None and nid not in expand:
            continue
        node = idx.entries[nid].node
        for v in node.inputs:
            p = idx.producer.get(v.name) if v is not None else None
            if p in cset:
                out.setdefault(p)
        if not readers:
            continue
        for v in node.outputs:
            for c in idx.consumers.get(v.name, []) if v is not None else []:
                if c in cset:
                    out.setdefault(c)
    return list(out)


def _standouts(sens: pd.DataFrame, share: float = 0.5, most: int = 16) -> set[str]:
    """fp16/bf16: the nodes whose estimated drop stands out (at least ``share`` of the largest
    finite estimate, or infinite; the ``most`` best ranked of them): only those bring their
    producers forward in the search order. A centring Sub stands out and needs its conv; on a
    model whose error is spread (PP-OCRv4 rec) pulling every node's producers forward bloated
    the prefixes (423 of 768 kept instead of 139, the pruning out of trials)."""
    est = sens["est_drop"].astype(float)
    finite = est[np.isfinite(est)]
    top = float(finite.max()) if len(finite) else 0.0
    keep = ~np.isfinite(est) | ((est >= share * top) & (est > 0))
    return set(sens.loc[keep, "node_id"].head(most))


def _bisect(s: _Search, ranked: list[str], flagged: int = 0) -> tuple[str, ...] | None:
    """Shortest passing prefix of ``ranked`` (assumes keeping more never hurts)."""
    n = len(ranked)
    top = s.trial(ranked, "all_kept")
    if not top["passed"]:
        raise ToleranceUnreachable(
            f"The tolerance ({s.tol.describe()}) is missed even with all {n} nodes kept in "
            f"the higher precision (score {top['score']:.3g}, max_abs {top['max_abs']:.3g}): "
            "the reference itself does not reproduce within it.",
            fix=f"Loosen the tolerance (e.g. atol >= {max(top['max_abs'], 1e-12) * 2:.2g}) "
            "or check that the feeds give finite outputs.")
    lo, hi = 0, n  # prefix lo fails, prefix hi passes
    # A first guess: the nodes flagged with certain trouble (overflow / non-finite); then
    # prefixes of doubling length (a good ranking puts the answer near the top: about
    # 2·log2(answer) trials instead of log2(n)), then the bisection between the last two.
    guess = flagged if 0 < flagged < n else 0
    if guess and not s.stopped():
        if s.passes(ranked[:guess], "guess"):
            hi = guess
        else:
            lo = guess
    size = max(2 * lo, 1)
    while size < hi and not s.stopped():
        if s.passes(ranked[:size], "bisect"):
            hi = size
            break
        lo = size
        size *= 2
    while hi - lo > 1 and not s.stopped():
        mid = (lo + hi) // 2
        if s.passes(ranked[:mid], "bisect"):
            hi = mid
        else:
            lo = mid
    return tuple(ranked[:hi])


def _prune(s: _Search, ranked: list[str], kept: list[str], max_trials: int,
           needed: Sequence[str] = ()) -> tuple[str, ...]:
    """A minimal passing subset of ``kept`` (no node can be dropped alone), by group testing.

    ``kept`` passes. Repeatedly: the shortest prefix of the remaining nodes (most sensitive
    first) that passes together with the nodes found necessary so far is bisected; its last
    node is necessary (without it the prefix failed) and every node after it is dropped at
    once. That costs about ``k·log2(n)`` trials for ``k`` necessary nodes among ``n``, where
    dropping nodes one at a time costs ``n``. ``needed``: nodes already known necessary (the
    last node of the bisection's prefix; fp16 overflow constraints). Every trial is a row
    of the table; past ``max_trials`` the smallest passing set found so far is returned.
    """
    order = {nid: i for i, nid in enumerate(ranked)}
    need = [n for n in sorted(set(needed) | (set(s.required) & set(kept)), key=order.get)
            if n in set(kept)]
    rest = [n for n in sorted(kept, key=order.__getitem__) if n not in set(need)]
    start = len(s.rows)

    def budget() -> bool:
        return len(s.rows) - start < max_trials and not s.stopped()

    while rest and budget():
        # Does what is known necessary pass alone? (Known to fail without any node.)
        if need and s.passes(need, "prune"):
            return tuple(need)
        lo, hi = 0, len(rest)  # need + rest[:lo] fails, need + rest[:hi] passes
        while hi - lo > 1 and budget():
            mid = (lo + hi) // 2
            if s.passes(need + rest[:mid], "prune"):
                hi = mid
            else:
                lo = mid
        if hi - lo > 1:  # out of trials: the passing prefix
            return tuple(need + rest[:hi])
        need.append(rest[hi - 1])
        rest = rest[:hi - 1]
    return tuple(need + rest)
