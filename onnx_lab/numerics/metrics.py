"""Error metrics between a reference and a candidate tensor, accumulated slice by slice.

Metrics are accumulated (:class:`MetricAccumulator`) so a tensor can be fed in slices and over
several samples without ever materialising float64 copies of whole activations: memory stays
bounded by ``_SLICE`` elements per step whatever the tensor size.

Non-finite values are compared position by position: the same infinity (``-inf`` attention
masks) or NaN on both sides is a match; a NaN or infinity on one side only is a mismatch and
makes ``max_abs`` infinite, except a float16 (bfloat16) infinity facing the largest finite
float16 (bfloat16) value of the same sign when both tensors have that dtype: both overflowed.
The error statistics (``mean_abs``, ``max_rel``, ``cosine``, ``sqnr_db``) are computed over
positions finite on both sides.

Example:
    >>> import numpy as np
    >>> from onnx_lab.numerics.metrics import tensor_metrics
    >>> tensor_metrics(np.ones(4, np.float32), np.ones(4, np.float32) + 1e-6)["passed"]
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnx_lab.errors import unknown_name

# By job, every name importable from here: the next-token judge and a run's value kinds.
from onnx_lab.numerics._next_token import (  # noqa: F401  (re-exports)
    NEXT_TOKEN,
    NEXT_TOKEN_COLUMNS,
    TIE_MARGIN,
    NextToken,
    next_token_metrics,
)
from onnx_lab.numerics._values import (  # noqa: F401  (re-exports)
    _leaves,
    _structure_kind,
    as_value,
    is_structured,
    numeric_pair,
    value_dtype,
)

__all__ = ["MetricAccumulator", "tensor_metrics", "judge", "METRIC_COLUMNS", "TOLERANCES",
           "COMPARED_AS", "as_value", "value_dtype", "is_structured", "numeric_pair",
           "tolerance", "Rule", "RuleKind", "RULES", "RULE_KINDS", "Preset", "PRESETS", "rule_for", "get_preset",
           "preset_for_dtype",
           "NextToken", "NEXT_TOKEN", "next_token_metrics", "NEXT_TOKEN_COLUMNS",
           "TIE_MARGIN"]

# Elements converted to float64 at a time (8 MB per temporary).
_SLICE = 1 << 18

METRIC_COLUMNS = ["shape", "cand_shape", "dtype", "cand_dtype", "max_abs", "mean_abs",
                  "max_rel", "cosine", "sqnr_db", "passed", "n_fail", "numel", "nan_ref",
                  "nan_cand", "inf_ref", "inf_cand", "note", "max_ref", "rule", "compared_as"]

#: How a pair was measured (the ``compared_as`` column): numbers under the rule; strings for
#: equality (never converted to float); a sequence element by element (its length must
#: match); a map key by key (its keys must match); a sequence of maps both ways.
COMPARED_AS = ("numeric", "equality", "sequence", "map", "seq(map)", "optional")


# ---------------------------------------------------------------------------- tolerances
#: An element-wise pass whose tensor lies wholly below the atol is noted (not failed) when its
#: SQNR at its own scale is under this: the rule could not see the error.
UNRESOLVED_SQNR_DB = 20.0


@dataclass(frozen=True)
class Rule:
    """How one tensor is judged; every rule also gives a *score*, <= 1 passes (lower is better).

    Kinds:
        ``elementwise``: every element within ``atol + rtol·|ref|`` (outputs: what a user of
            the model sees, checked strictly); score = the worst ``|err| / (atol + rtol·|ref|)``.
        ``scaled``: the largest error within ``atol + rtol·max|ref|``, the tensor's own scale
            (intermediates: an element near zero whose summands were large differs by the
            rounding of those summands, which an element-wise test calls a failure); score =
            ``max|err| / (atol + rtol·max|ref|)``.
        ``max_abs``: the largest error within ``atol``; score = ``max|err| / atol``.
        ``sqnr``: signal-to-quantization-noise ratio ``10·log10(Σref²/Σerr²)`` of at least
            ``min_sqnr_db`` (int8, where every element moves by design); score = noise energy
            over the allowed noise energy, ``10^((min_sqnr_db - sqnr)/10)``.
        ``cosine``: cosine similarity of at least ``min_cosine``; score =
            ``(1 - cos) / (1 - min_cosine)``.

    Any NaN or infinity on one side only fails every rule (score ``inf``).
    """

    kind: str
    atol: float = 0.0
    rtol: float = 0.0
    min_sqnr_db: float | None = None
    min_cosine: float | None = None

    def describe(self) -> str:
        """The rule as a short formula (shown in reports)."""
        return RULES[self.kind].describe(self)

    def with_tolerances(self, atol: float | None, rtol: float | None) -> Rule:
        """The rule with the user's atol/rtol in place of the preset's (sqnr and cosine
        unchanged; ``max_abs`` takes ``atol``)."""
        if not RULES[self.kind].tolerances or (atol is None and rtol is None):
            return self
        return Rule(self.kind, self.atol if atol is None else float(atol),
                    self.rtol if rtol is None else float(rtol), self.min_sqnr_db,
                    self.min_cosine)


@dataclass(frozen=True)
class RuleKind:
    """One row of :data:`RULES`: what a :class:`Rule` kind is and how every part of onnx_lab
    that offers or judges it reads it.

    Attributes:
        name: the kind (``Rule.kind``, the precision search's ``metric=``).
        describe: the rule as a short formula (reports' ``rule`` column).
        score: the accumulator's score under this kind, <= 1 passes (the cases every kind
            shares, nothing compared and non-finite mismatches, are handled before it).
        tolerances: judged by ``atol``/``rtol`` (the user's numbers replace the preset's; the
            drift view's atol/rtol boxes).
        statistics: needs the accumulated sums (cosine, SQNR) rather than the errors alone.
        threshold: the :class:`Rule` field a single number sets (``find_precision``'s
            ``tolerance=``; None: the kind takes the ``atol``/``rtol`` pair).
        default_threshold: that number when the preset's own rule is of another kind (None:
            the preset's ``threshold`` field).
        search: offered as a ``find_precision`` metric (``METRICS``, the CLI's ``--metric``).
        label: its name in the precision widget's metric dropdown (None: not offered there);
        threshold_label: the description of the widget's threshold box.
    """

    name: str
    describe: Callable[[Rule], str]
    score: Callable[[MetricAccumulator], float]
    tolerances: bool
    statistics: bool = False
    threshold: str | None = None
    default_threshold: float | None = None
    search: bool = False
    label: str | None = None
    threshold_label: str = "min"


def _score_elementwise(acc: MetricAccumulator) -> float:
    q = acc.max_ratio if acc.scored else 0.0
    if acc.n_fail:  # the verdict (exact) wins where a division rounded to 1
        return max(q, math.nextafter(1.0, math.inf)) if acc.scored else math.inf
    return min(q, 1.0)


def _bounded(err: float, bound: float) -> float:
    if bound > 0:
        return err / bound
    return 0.0 if err == 0 else math.inf


def _score_sqnr(acc: MetricAccumulator) -> float:
    if acc.n_finite == 0:
        return 0.0
    sqnr = acc._sqnr()  # identical tensors: infinite; an all-zero reference: none
    if sqnr == math.inf:
        return 0.0
    return 10 ** ((acc.rule.min_sqnr_db - sqnr) / 10) if math.isfinite(sqnr) else math.inf


def _score_cosine(acc: MetricAccumulator) -> float:
    if acc.n_finite == 0:
        return 0.0
    cosine = acc._cosine()
    lim = acc.rule.min_cosine
    if lim < 1:
        return max(0.0, (1 - cosine) / (1 - lim))
    return 0.0 if cosine >= 1 else math.inf


#: The one table of rule kinds (see :class:`Rule` for their math): the accumulator, the
#: reports, compare, verification, the precision search (``METRICS``), its CLI flag and its
#: widget, and the drift view read it. A new kind is one row here plus its test.
RULES: dict[str, RuleKind] = {k.name: k for k in (
    RuleKind("elementwise",
             lambda r: f"|err| <= {r.atol:g} + {r.rtol:g}*|ref| per element",
             _score_elementwise, tolerances=True, search=True,
             label="element-wise atol/rtol"),
    RuleKind("scaled", lambda r: f"max|err| <= {r.atol:g} + {r.rtol:g}*max|ref|",
             lambda a: _bounded(a.max_abs, a.atol + a.rtol * a.max_ref), tolerances=True),
    RuleKind("max_abs", lambda r: f"max|err| <= {r.atol:g}",
             lambda a: _bounded(a.max_abs, a.atol), tolerances=True, threshold="atol",
             search=True),
    RuleKind("sqnr", lambda r: f"sqnr >= {r.min_sqnr_db:g} dB", _score_sqnr,
             tolerances=False, statistics=True, threshold="min_sqnr_db",
             default_threshold=30.0, search=True, label="SQNR (dB)", threshold_label="min dB"),
    RuleKind("cosine", lambda r: f"cosine >= {r.min_cosine:g}", _score_cosine,
             tolerances=False, statistics=True, threshold="min_cosine",
             default_threshold=0.999, search=True, label="cosine",
             threshold_label="min cos"),
)}

#: Kinds of :class:`Rule` (the keys of :data:`RULES`).
RULE_KINDS = tuple(RULES)


@dataclass(frozen=True)
class Preset:
    """The two rules of one purpose: ``outputs`` (strict) and ``intermediates``."""

    name: str
    outputs: Rule
    intermediates: Rule
    summary: str


def _float_preset(name: str, atol: float, rtol: float, what: str) -> Preset:
    return Preset(name, Rule("elementwise", atol, rtol), Rule("scaled", atol, rtol), what)


#: The one tolerance table: verification, compare, the drift debugger and the CLI read it.
PRESETS: dict[str, Preset] = {
    "exact": Preset("exact", Rule("elementwise"), Rule("elementwise"),
                    "bit-for-bit: integer and bool tensors, rewrites that must not change a bit"),
    "fp64": _float_preset("fp64", 1e-7, 1e-6, "float64 models"),
    "fp32": _float_preset("fp32", 1e-4, 1e-3, "float32 models and rewrites of them"),
    "fp16": _float_preset("fp16", 1e-2, 1e-2, "models that compute in float16"),
    "bf16": _float_preset("bf16", 5e-2, 2e-2, "models that compute in bfloat16"),
    "fp8": _float_preset("fp8", 1e-1, 1e-1, "float8 and other narrow floats"),
    "int8": Preset("int8", Rule("sqnr", min_sqnr_db=20.0), Rule("sqnr", min_sqnr_db=15.0),
                   "int8-quantized candidates against their float reference"),
    # 4-bit blocks give a MatMul ~20-22 dB (a step of range/15 on Gaussian weights); the
    # noise of every quantized MatMul adds up along the residual stream, so an 8-layer
    # decoder's logits sit near 12-14 dB. A block ruined by an outlier weight drops its
    # MatMul to a few dB. LLM outputs are judged by next-token metrics (NEXT_TOKEN).
    "int4": Preset("int4", Rule("sqnr", min_sqnr_db=8.0), Rule("sqnr", min_sqnr_db=6.0),
                   "weight-only int4 (MatMulNBits) candidates against their float reference"),
}

_DTYPE_PRESET = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

#: Default (atol, rtol) per dtype name (the output rule of its preset).
TOLERANCES: dict[str, tuple[float, float]] = {
    dt: (PRESETS[p].outputs.atol, PRESETS[p].outputs.rtol) for dt, p in _DTYPE_PRESET.items()}


def preset_for_dtype(dtype: str) -> str:
    """The preset that judges a tensor of ``dtype`` by default (ints and bools: exact)."""
    if _kind(dtype) != "f":
        return "exact"
    return _DTYPE_PRESET.get(dtype, "fp8")


def get_preset(name: str) -> Preset:
    """The preset ``name`` (UnknownNameError listing them otherwise)."""
    if name not in PRESETS:
        raise unknown_name("tolerance preset", name, PRESETS,
                           fix=f"Presets: {', '.join(PRESETS)}.")
    return PRESETS[name]


def rule_for(dtype: str, *, output: bool, preset: str | None = None,
             atol: float | None = None, rtol: float | None = None) -> tuple[str, Rule]:
    """(preset name, rule) that judges a tensor.

    Args:
        dtype: the reference tensor's dtype name; integer and bool tensors always compare
            exactly, whatever the preset.
        output: a graph output (strict rule) or an intermediate tensor (scale-aware rule).
        preset: the preset (None: the one of ``dtype``).
        atol, rtol: the user's numbers in place of the preset's.
    """
    if _kind(dtype) != "f":
        return "exact", PRESETS["exact"].outputs
    name = preset or preset_for_dtype(dtype)
    p = get_preset(name)
    return name, (p.outputs if output else p.intermediates).with_tolerances(atol, rtol)


def judging_dtype(dtype: str, computed: str | None) -> str:
    """The dtype whose preset judges a tensor of ``dtype`` that was computed through
    ``computed`` (:func:`~onnx_lab.numerics.align.computed_precision`): ``computed`` when it
    is a coarser float (a float32 output of a float16 graph carries float16 rounding), else
    ``dtype``. Integer and bool tensors stay exact."""
    if computed is None or computed == dtype or _kind(dtype) != "f":
        return dtype
    coarse = PRESETS[preset_for_dtype(computed)].outputs.atol or 0.0
    own = PRESETS[preset_for_dtype(dtype)].outputs.atol or 0.0
    return computed if coarse > own else dtype


def tolerance(dtype: str, atol: float | None = None, rtol: float | None = None
              ) -> tuple[float, float]:
    """(atol, rtol) of the output rule for a dtype name; user values override the defaults.

    Integer and bool tensors always compare exactly (0, 0).
    """
    _, rule = rule_for(dtype, output=True, atol=atol, rtol=rtol)
    return rule.atol, rule.rtol


def _kind(dtype: str) -> str:
    if dtype == "string" or dtype == "object":
        return "S"  # strings: equality, the exact preset
    if dtype in TOLERANCES or dtype.startswith("float") or dtype.startswith("bfloat"):
        return "f"
    try:
        return np.dtype(dtype).kind if np.dtype(dtype).kind != "c" else "f"
    except TypeError:
        return "f"


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum, not np.dot: BLAS dot spins up threads, ~10x slower on busy small machines.
    return float(np.einsum("i,i->", a, b))


#: The largest finite value of the narrow floats whose overflow both sides may show
#: differently (infinity on one, this value on the other): both overflowed.
_OVERFLOW_AT = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


class MetricAccumulator:
    """Running metrics of one (reference, candidate) tensor pair over slices and samples.

    Args:
        atol, rtol: an element passes when ``|cand - ref| <= atol + rtol * |ref|`` (the
            ``elementwise`` rule; ``n_fail`` always counts such elements).
        statistics: also accumulate mean_abs, cosine and SQNR (False: only max_abs, max_rel
            and the failing count, what a pass/fail verdict needs; cosine and sqnr_db are
            then NaN and mean_abs too). The ``sqnr`` rule needs them.
        rule: the :class:`Rule` that decides ``passed`` (its atol/rtol replace the
            arguments); default the elementwise rule of ``atol``/``rtol``.
        scored: also track what :meth:`score` needs under an ``elementwise`` rule (the worst
            ``|err| / (atol + rtol·|ref|)``, one more division per element); without it that
            score is 0 or ``inf``, the verdict alone.
        key_order: a ZipMap's class labels, the order of the tensor's columns a sequence of
            its maps is paired with (default: the maps' keys sorted).
    """

    def __init__(self, atol: float = 0.0, rtol: float = 0.0, *, statistics: bool = True,
                 rule: Rule | None = None, scored: bool = False,
                 key_order: Sequence | None = None) -> None:
        self.rule = rule if rule is not None else Rule("elementwise", float(atol), float(rtol))
        self.key_order = list(key_order) if key_order is not None else None
        if self.rule.kind not in RULES:
            raise ValueError(f"unknown rule kind {self.rule.kind!r}; kinds: {tuple(RULES)}")
        self.atol = float(self.rule.atol)
        self.rtol = float(self.rule.rtol)
        self.statistics = statistics or RULES[self.rule.kind].statistics
        self.scored = scored and self.rule.kind == "elementwise"
        self.max_ratio = 0.0
        self.max_ref = 0.0
        self.shape: tuple | None = None
        self.cand_shape: tuple | None = None
        self.dtype: str | None = None
        self.cand_dtype: str | None = None
        self.notes: list[str] = []
        self.comparable = True
        self.numel = 0
        self.n_finite = 0
        self.max_abs = 0.0
        #: The largest error over positions finite on both sides (``max_abs`` is ``inf`` as
        #: soon as a NaN or infinity is on one side only).
        self.max_abs_finite = 0.0
        self.sum_abs = 0.0
        self.max_rel = 0.0
        self.dot = 0.0
        self.sum_r2 = 0.0
        self.sum_c2 = 0.0
        self.sum_e2 = 0.0
        self.n_fail = 0
        self.nan_ref = self.nan_cand = self.inf_ref = self.inf_cand = 0
        self.compared_as = "numeric"
        self.strings = False  # equality only: no cosine, SQNR or mean error

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def add(self, ref: Any, cand: Any) -> None:
        """Accumulate one sample of the pair (arrays of any dtype; mismatches are noted).

        Strings are compared for equality; a sequence (list) element by element, a map (dict)
        key by key (``compared_as`` says which); their numeric leaves go under the rule."""
        if ref is None or cand is None or is_structured(ref) or is_structured(cand):
            self._add_structured(ref, cand)
            return
        ref = np.asarray(ref)
        cand = np.asarray(cand)
        if ref.dtype.kind in "OSU" or cand.dtype.kind in "OSU":
            self._add_strings(ref, cand)
            return
        if self.shape is None:
            self.shape, self.cand_shape = tuple(ref.shape), tuple(cand.shape)
            self.dtype, self.cand_dtype = str(ref.dtype), str(cand.dtype)
        if ref.dtype != cand.dtype:
            self._note(f"dtype differs ({ref.dtype} vs {cand.dtype}): compared as float64")
        if ref.shape != cand.shape:
            if ref.size == cand.size:
                self._note(f"shape differs ({list(ref.shape)} vs {list(cand.shape)}), same size: "
                           "compared flattened")
            else:
                self._note(f"shape mismatch: {list(ref.shape)} vs {list(cand.shape)}")
                self.comparable = False
                return
        if not self.comparable:
            return
        if cand.dtype == np.float16 and ref.dtype.kind == "f" and ref.dtype.itemsize > 2:
            # a float16 tensor holds at most 65504: a reference value beyond it (BERT's mask
            # fill at float32's minimum) is compared at that limit, which a conversion writes;
            # an overflow to inf still fails (and is first_nonfinite)
            top = _OVERFLOW_AT["float16"]
            big = np.isfinite(ref) & (np.abs(ref) > top)
            if big.any():
                # the error only: max_ref stays the reference's (an overflow search reads it)
                beyond = float(np.abs(ref[big]).max())
                ref = np.where(big, np.sign(ref) * top, ref).astype(ref.dtype)
                self._note("reference values beyond float16's range compared at its limit "
                           "(65504)")
                self._add_clipped(ref, cand)
                self.max_ref = max(self.max_ref, beyond)
                return
        top = _OVERFLOW_AT.get(str(ref.dtype))
        if top is not None and cand.dtype.kind == "f" and cand.dtype.itemsize > \
                ref.dtype.itemsize:
            cand = self._overflowed_alike(ref, cand, top)
        self._add_clipped(ref, cand)

    def _overflowed_alike(self, ref: np.ndarray, cand: np.ndarray, top: float) -> np.ndarray:
        """A wider candidate against a narrow float reference (float16, bfloat16): where the
        reference overflowed (its infinity, or its largest value from a saturating kernel)
        and the candidate holds a value of the same sign beyond that float's range, both
        computed the same overflowing quantity, the candidate without rounding it to the
        narrow float. onnxruntime's optimized float16 model on CPU keeps the float32 of the
        Casts it inserts around float16 ops: a Conv's 506708 there against the reference's
        inf, exposed as float16, failed a step whose outputs were bit-identical. The
        candidate's value is compared as the reference's there; elsewhere as it is."""
        r, c = _widened(ref).reshape(-1), cand.reshape(-1)  # same size, maybe another shape
        with np.errstate(invalid="ignore"):
            r_over = np.isinf(r) | (np.abs(r) == top)
            alike = r_over & np.isfinite(c) & (np.abs(c) > top) & (np.sign(c) == np.sign(r))
        if not alike.any():
            return cand
        self._note(f"candidate values beyond {ref.dtype}'s range compared as the reference's "
                   "overflow")
        return np.where(alike, r.astype(cand.dtype), c).reshape(cand.shape)

    def _add_clipped(self, ref: np.ndarray, cand: np.ndarray) -> None:
        """The numeric comparison of one sample, in slices."""
        # bfloat16, float8, int4 values (ml_dtypes arrays, kind "V"): compared in float
        ref, cand = _widened(ref), _widened(cand)
        if ref.dtype.kind not in "biufc" or cand.dtype.kind not in "biufc":
            self._note(f"not numeric ({ref.dtype} / {cand.dtype})")
            self.comparable = False
            return
        r_flat = ref.reshape(-1)
        c_flat = cand.reshape(-1)
        for start in range(0, r_flat.size, _SLICE):
            self._add_slice(r_flat[start:start + _SLICE], c_flat[start:start + _SLICE])

    def _add_structured(self, ref: Any, cand: Any) -> None:
        kind = _structure_kind(ref, cand)
        self.compared_as = kind
        if self.shape is None:
            n = len(ref) if isinstance(ref, (list, tuple, dict)) else None
            m = len(cand) if isinstance(cand, (list, tuple, dict)) else None
            self.shape, self.cand_shape = (n,) if n is not None else (), \
                (m,) if m is not None else ()
            self.dtype, self.cand_dtype = value_dtype(ref), value_dtype(cand)
        if not self.comparable:
            return
        pairs: list[tuple[np.ndarray, np.ndarray]] = []
        bad = _leaves(ref, cand, "", pairs, self.notes, self.key_order)
        if bad:
            self._note(bad)
            self.comparable = False
            return
        if not pairs:
            return
        r = np.concatenate([p[0] for p in pairs])
        c = np.concatenate([p[1] for p in pairs])
        if r.dtype.kind in "OSU" or c.dtype.kind in "OSU":
            self._add_strings(r, c, kind)
            return
        for start in range(0, r.size, _SLICE):
            self._add_slice(r[start:start + _SLICE], c[start:start + _SLICE])

    def _add_strings(self, ref: np.ndarray, cand: np.ndarray, kind: str = "equality") -> None:
        """Strings: equal or not, element by element (a mismatch is an infinite error)."""
        self.compared_as = kind
        self.strings = True
        if self.shape is None:
            self.shape, self.cand_shape = tuple(ref.shape), tuple(cand.shape)
            self.dtype, self.cand_dtype = "string", value_dtype(cand)
        if ref.shape != cand.shape and ref.size != cand.size:
            self._note(f"shape mismatch: {list(ref.shape)} vs {list(cand.shape)}")
            self.comparable = False
            return
        r = [x.decode() if isinstance(x, bytes) else x for x in ref.reshape(-1).tolist()]
        c = [x.decode() if isinstance(x, bytes) else x for x in cand.reshape(-1).tolist()]
        self.numel += len(r)
        self.n_finite += len(r)
        differ = sum(1 for a, b in zip(r, c) if a != b)
        if differ:
            self.n_fail += differ
            self.max_abs = self.max_rel = math.inf
            first = next(i for i, (a, b) in enumerate(zip(r, c)) if a != b)
            self._note(f"{differ} strings differ (first at {first}: {str(r[first])[:40]!r} vs "
                       f"{str(c[first])[:40]!r})")

    def _add_slice(self, r: np.ndarray, c: np.ndarray) -> None:
        if r.dtype.kind in "biu" and c.dtype.kind in "biu":
            self._add_ints(r, c)
            return
        self._add_values(r, c)

    def _add_ints(self, r: np.ndarray, c: np.ndarray) -> None:
        """Integer and bool slices (shape tensors, token ids, masks) compare exactly: an
        element fails when its value differs, whatever the tolerances (float64 would merge
        int64 values beyond 2**53)."""
        n_fail = self.n_fail
        self._add_values(r.astype(np.float64), c.astype(np.float64))
        differ = int(np.count_nonzero(r != c))
        self.n_fail = n_fail + differ
        if differ:
            self.max_abs = max(self.max_abs, 1.0)
            self.max_abs_finite = max(self.max_abs_finite, 1.0)

    def _add_values(self, r: np.ndarray, c: np.ndarray) -> None:
        self.numel += r.size
        if r.dtype == c.dtype and r.dtype.kind == "f" and np.array_equal(r, c):
            # Identical slices (the common case when comparing optimized graphs): one pass.
            if not self.statistics and not np.isnan(r).any():
                self.n_finite += r.size  # infinities equal on both sides match
                finite = r[np.isfinite(r)] if r.size else r
                if finite.size:
                    self.max_ref = max(self.max_ref, float(np.abs(finite).max()))
                return
            if np.isfinite(r).all():
                r64 = r.astype(np.float64)
                if r64.size:
                    self.max_ref = max(self.max_ref, float(np.abs(r64).max()))
                sq = float(_dot(r64, r64))
                self.n_finite += r.size
                self.dot += sq
                self.sum_r2 += sq
                self.sum_c2 += sq
                return
        if not self.statistics and not self.scored and r.dtype == c.dtype == np.float32 and \
                self._add_f32(r, c):
            return
        r = r.astype(np.float64)
        c = c.astype(np.float64)
        if self.statistics:
            sum_r2 = float(_dot(r, r))
            sum_c2 = float(_dot(c, c))
            # NaN/inf anywhere make these sums non-finite (float64 sums of float32 squares
            # cannot overflow), so the per-element masks below are only built when needed.
            finite = math.isfinite(sum_r2) and math.isfinite(sum_c2)
        else:
            sum_r2 = sum_c2 = 0.0
            finite = bool(np.isfinite(r).all() and np.isfinite(c).all())
        if not finite:
            r, c = self._nonfinite(r, c)
            if r.size == 0:
                return
            if self.statistics:
                sum_r2 = float(_dot(r, r))
                sum_c2 = float(_dot(c, c))
        err = c - r
        np.abs(err, out=err)
        absr = np.abs(r)
        self.n_finite += r.size
        self.max_ref = max(self.max_ref, float(absr.max()))
        top = float(err.max())
        self.max_abs = max(self.max_abs, top)
        self.max_abs_finite = max(self.max_abs_finite, top)
        if self.statistics:
            self.sum_abs += float(err.sum())
            self.sum_e2 += float(_dot(err, err))
            self.dot += float(_dot(r, c))
            self.sum_r2 += sum_r2
            self.sum_c2 += sum_c2
        tol = absr * self.rtol
        tol += self.atol
        self.n_fail += int(np.count_nonzero(err > tol))
        if self.scored:  # err / tol; a zero tolerance allows no error at all
            q = np.divide(err, tol, out=np.where(err > 0, np.inf, 0.0), where=tol > 0)
            self.max_ratio = max(self.max_ratio, float(q.max()))
        # Relative error over nonzero reference elements (reuses the tol buffer).
        rel = np.divide(err, absr, out=np.zeros_like(err), where=absr > 0)
        self.max_rel = max(self.max_rel, float(rel.max()))

    def _add_f32(self, r: np.ndarray, c: np.ndarray) -> bool:
        """The verdict fields of a finite float32 slice, computed in float32 (4-6x faster
        than float64 on 1M elements: verification of a 640x640 detector spent half its
        time here) with the same results: the failing count, max_abs and max_ref exactly as
        float64 gives them, max_rel to float32 rounding.

        ``|c - r|`` in float32 is exact where c and r are within a factor 2 (Sterbenz) and
        otherwise off by at most 2**-24 relative, the tolerance by a few ulps: an element
        is decided in float32 only when its error is more than 1e-6 relative away from its
        tolerance; the others, and the candidates for the maximum, are recomputed in
        float64 (so is max_rel when it overflows float32). False (nothing added) when the
        slice holds NaN or inf."""
        if not (np.isfinite(r).all() and np.isfinite(c).all()):
            return False
        err = c - r
        np.abs(err, out=err)
        absr = np.abs(r)
        tol = absr * np.float32(self.rtol)
        tol += np.float32(self.atol)
        fail = err > tol * np.float32(1 + 1e-6)
        near = (err >= tol * np.float32(1 - 1e-6)) & ~fail
        near |= tol < np.float32(1e-30)  # subnormal products lose their relative precision
        n_fail = int(np.count_nonzero(fail))
        if near.any():
            i = np.flatnonzero(near)
            r64, c64 = r[i].astype(np.float64), c[i].astype(np.float64)
            n_fail += int(np.count_nonzero(np.abs(c64 - r64) > self.atol + self.rtol *
                                           np.abs(r64)))
        self.n_fail += n_fail
        self.n_finite += r.size
        if r.size:
            self.max_ref = max(self.max_ref, float(absr.max()))
            top = float(err.max())
            i = np.flatnonzero(err >= np.float32(top * (1 - 1e-6)))
            top = float(np.abs(c[i].astype(np.float64) - r[i].astype(np.float64)).max())
            self.max_abs = max(self.max_abs, top)
            self.max_abs_finite = max(self.max_abs_finite, top)
            with np.errstate(over="ignore"):  # beyond float32 next to a tiny reference
                rel = np.divide(err, absr, out=np.zeros_like(err), where=absr > 0)
            top = float(rel.max())
            if not math.isfinite(top):
                nz = absr > 0
                top = float((np.abs(c[nz].astype(np.float64) - r[nz].astype(np.float64))
                             / absr[nz].astype(np.float64)).max())
            self.max_rel = max(self.max_rel, top)
        return True

    def _nonfinite(self, r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count NaN/inf, score mismatched non-finite positions; return the finite pairs."""
        r_fin = np.isfinite(r)
        c_fin = np.isfinite(c)
        r_nan = np.isnan(r)
        c_nan = np.isnan(c)
        self.nan_ref += int(r_nan.sum())
        self.nan_cand += int(c_nan.sum())
        self.inf_ref += int((~r_fin & ~r_nan).sum())
        self.inf_cand += int((~c_fin & ~c_nan).sum())
        both = r_fin & c_fin
        if r_fin.any():  # max_ref: every finite reference element, whatever the candidate
            self.max_ref = max(self.max_ref, float(np.abs(r[r_fin]).max()))
        # Same NaN-ness and the same infinity on both sides match; anything else does not.
        same = (r_nan & c_nan) | (~r_nan & ~c_nan & ~r_fin & ~c_fin & (r == c))
        top = _OVERFLOW_AT.get(self.dtype or "") if self.dtype == self.cand_dtype else None
        if top is not None:
            # Both overflowed a narrow float: one side rounded to the infinity, the other
            # kept the largest finite value of the same sign (a kernel that saturates, or a
            # value just under the rounding boundary: float16 rounds to inf from 65520 on).
            r_inf, c_inf = ~r_fin & ~r_nan, ~c_fin & ~c_nan
            same |= (r_inf & (c == np.where(r > 0, top, -top))) \
                | (c_inf & (r == np.where(c > 0, top, -top)))
        bad = int((~both & ~same).sum())
        if bad:
            self.n_fail += bad
            self.max_abs = math.inf
            self.max_rel = math.inf
        return r[both], c[both]

    def result(self) -> dict[str, Any]:
        """The metrics as a dict with the keys of :data:`METRIC_COLUMNS`."""
        ok = self.comparable and self.shape is not None
        nan = math.nan
        if ok and self.n_finite and self.statistics and not self.strings:
            mean_abs = self.sum_abs / self.n_finite
            cosine = self._cosine()
            sqnr = self._sqnr()
        else:
            mean_abs = cosine = sqnr = nan
        passed = bool(ok and self._passes())
        if passed and self.rule.kind == "elementwise" and 0 < self.max_abs \
                and 0 < self.max_ref < self.rule.atol and sqnr < UNRESOLVED_SQNR_DB:
            # Every value is smaller than the absolute tolerance: the rule passes any
            # candidate of the same scale (zeros passed, cosine 0). Not failed: an output
            # that small may be a cancellation whose rounding is as large as itself.
            self._note(f"every |value| is below atol {self.rule.atol:g} (max {self.max_ref:.3g}), "
                       f"so the rule cannot see an error at this scale: at its own scale "
                       f"SQNR {sqnr:.1f} dB, cosine {cosine:.3f}; judge it with a smaller atol "
                       f"(atol={self.max_ref * 1e-3:.2g})")
        return {
            "shape": list(self.shape) if self.shape is not None else None,
            "cand_shape": list(self.cand_shape) if self.cand_shape is not None else None,
            "dtype": self.dtype,
            "cand_dtype": self.cand_dtype,
            "max_abs": self.max_abs if ok else nan,
            "mean_abs": mean_abs,
            "max_rel": self.max_rel if ok else nan,
            "cosine": cosine,
            "sqnr_db": sqnr,
            "passed": passed,
            "n_fail": self.n_fail if ok else None,
            "numel": self.numel,
            "nan_ref": self.nan_ref,
            "nan_cand": self.nan_cand,
            "inf_ref": self.inf_ref,
            "inf_cand": self.inf_cand,
            "note": "; ".join(self.notes),
            "max_ref": self.max_ref if ok else nan,
            "rule": self.rule.describe(),
            "compared_as": self.compared_as,
        }

    def _cosine(self) -> float:
        denom = math.sqrt(self.sum_r2 * self.sum_c2)
        return self.dot / denom if denom > 0 else (1.0 if self.sum_e2 == 0 else 0.0)

    def _sqnr(self) -> float:
        if self.sum_e2 == 0:
            return math.inf
        if self.sum_r2 == 0:
            return -math.inf
        return 10.0 * math.log10(self.sum_r2 / self.sum_e2)

    def score(self) -> float:
        """The rule's score, <= 1 passes (see :class:`Rule`); ``inf`` for a NaN or infinity on
        one side only and for tensors that cannot be compared. It agrees with ``passed``."""
        if not self.comparable:
            return math.inf
        if self.shape is None:  # nothing was added: nothing to judge
            return 0.0
        if math.isinf(self.max_abs) or (self.strings and self.n_fail):
            return math.inf  # NaN/inf on one side only; strings that differ
        return RULES[self.rule.kind].score(self)

    def _passes(self) -> bool:
        """The verdict of :attr:`rule` (non-finite mismatches fail every rule)."""
        if self.rule.kind == "elementwise":
            return self.n_fail == 0
        return self.score() <= 1.0


def _widened(a: np.ndarray) -> np.ndarray:
    """An ml_dtypes array (bfloat16, float8, int4/int2, float4) as float32 (exact for every
    such value); any other array as it is."""
    if a.dtype.kind == "V" and type(a.dtype).__module__.startswith("ml_dtypes"):
        return a.astype(np.float32)
    return a


def tensor_metrics(ref: Any, cand: Any, atol: float = 1e-4, rtol: float = 1e-3, *,
                   statistics: bool = True, rule: Rule | None = None) -> dict[str, Any]:
    """Metrics of one pair of arrays (see :data:`METRIC_COLUMNS`); mismatches noted, not raised.

    Keys: shape, cand_shape, dtype, cand_dtype, max_abs, mean_abs, max_rel (over nonzero
    reference elements), cosine, sqnr_db (10·log10(Σref² / Σerr²), inf when equal), passed
    (by ``rule``, default element-wise), n_fail (elements outside ``atol + rtol·|ref|``),
    numel, nan_ref, nan_cand, inf_ref, inf_cand, note (shape/dtype differences), max_ref
    (max |ref| over finite elements), rule (the rule as a formula).

    Example:
        >>> tensor_metrics([1.0, -np.inf], [1.0, -np.inf])["passed"]
        True
    """
    acc = MetricAccumulator(atol, rtol, statistics=statistics, rule=rule)
    acc.add(ref, cand)
    return acc.result()


def judge(rule: Rule, refs: Any, cands: Any) -> dict[str, Any]:
    """One tensor judged by ``rule`` over several samples (pairs of arrays, sample by sample).

    Returns:
        score (<= 1 passes; see :class:`Rule`), max_abs, sqnr_db, cosine (over every sample
        together), passed. Tensors that cannot be compared (a shape of another size, not
        numeric) score ``inf`` with max_abs ``inf``.

    Example:
        >>> judge(Rule("sqnr", min_sqnr_db=20), [ref], [cand])["score"]
    """
    acc = MetricAccumulator(rule=rule, scored=True)
    for r, c in zip(refs, cands):
        acc.add(r, c)
    score = acc.score()
    if not acc.comparable:
        return {"score": math.inf, "max_abs": math.inf, "sqnr_db": -math.inf, "cosine": 0.0,
                "passed": False}
    empty = acc.n_finite == 0  # nothing finite to compare: no noise, no angle
    return {"score": float(score), "max_abs": float(acc.max_abs),
            "sqnr_db": math.inf if empty else acc._sqnr(),
            "cosine": 1.0 if empty else acc._cosine(), "passed": bool(score <= 1.0)}
