"""Numerical verification of one model version against the previous one.

Both models run in onnxruntime with graph optimizations disabled on the same seeded inputs;
the final outputs and every intermediate tensor that survives the step are compared:

- ``output``: the graph outputs (by name, else by position);
- ``name``: a main-graph tensor with the same name in both models;
- ``provenance``: the output of a new (fused) node against the output of the topologically
  last node of the previous model it replaced (read from ``PassResult.provenance`` or the
  ``onnx_lab.origin`` node metadata).

A pair is compared only when both sides compute the same quantity
(:class:`~onnx_lab.numerics.align.SameQuantity`); the refused ones are listed in
``report.attrs["not_comparable"]`` with the reason. A selection (TopK, NMS...) that picked
otherwise on near-tied inputs makes the failing tensors after it not comparable too
(:mod:`~onnx_lab.numerics.selection`; ``report.attrs["selections"]``), the step's rewritten
nodes below it checked on their own.

Tensors are captured in chunks whose estimated size stays under ``max_bytes`` (both models'
tensors of a chunk are held at once, then dropped). Tolerances are per dtype; an element
passes when ``|cand - ref| <= atol + rtol * |ref|``; NaN/inf at the same place on both sides
match. The report is a DataFrame (built when first read after ``apply``: see
:class:`Report`); only tests turn it into assertions.

Example:
    >>> from onnx_lab.numerics.verify import verify
    >>> report = verify(lab.original.model, lab.model, dims={"batch": 1})
    >>> report.attrs["passed"], report.attrs["first_failure"]
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.core.branches import branch_labels, unexercised
from onnx_lab.core.model import LabModel
from onnx_lab.core.save import wants_external
from onnx_lab.core.shapes import fit_dims
from onnx_lab.core.source import load_source
from onnx_lab.core.subgraph import upstream_model
from onnx_lab.core.values import const_array
from onnx_lab.errors import DimError, InputError, LabError, RuntimeLoadError, strict_keywords
from onnx_lab.numerics._branches_run import changed_branches, changed_loops, unrun, untaken
from onnx_lab.numerics._stepdiff import step_diff
from onnx_lab.numerics.align import (
    VersionPair,
    align_versions,
    computed_precision,
    version_tensors,
)
from onnx_lab.numerics.metrics import (
    TOLERANCES,
    Rule,
    as_value,
    get_preset,
    is_structured,
    judging_dtype,
    rule_for,
    tensor_metrics,
    tolerance,
    value_dtype,
)
from onnx_lab.numerics.selection import (
    Sides,
    fetch,
    flipped,
    judge_selections,
    scale_along,
    selection_nodes,
)
from onnx_lab.runtime.capture import estimate_bytes, plan_chunks
from onnx_lab.runtime.capture import run as capture_run
from onnx_lab.runtime.feeds import as_feed_list, input_specs, missing_value, resolve_input_shapes
from onnx_lab.runtime.session import out_of_memory, saved_form_problem

# The step's transforms.base.PassResult: read (provenance) and filled (verify_passed...) by
# duck typing, since numerics does not import transforms.
PassResult = Any

logger = logging.getLogger(__name__)

__all__ = ["verify", "report_of", "Report", "tolerance", "REPORT_COLUMNS", "TOLERANCES",
           "fill_result", "verify_extract"]

REPORT_COLUMNS = ["tensor", "node_id", "match", "dtype", "max_abs", "max_rel", "passed",
                  "atol", "rtol", "ref_tensor", "ref_node_id", "shape", "note", "preset", "rule"]

# ---------------------------------------------------------------------------- feeds
def _feeds(before: LabModel, after: LabModel, feeds: Any, dims, shapes, seed: int,
           reference_shapes: bool = False
           ) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """(reference feeds, candidate feeds) per sample.

    ``reference_shapes``: the inputs are sized by the reference's dims and the candidate
    must take them (a tool that fixed the input shapes fixed them to those: DimError
    otherwise); else the candidate's own shapes lead (``fix_dims`` to other sizes).
    """

    a_dims, a_shapes = fit_dims(after, dims, shapes)
    b_dims, b_shapes = fit_dims(before, dims, shapes)
    a_names = [s[0] for s in input_specs(after)]
    b_names = [s[0] for s in input_specs(before)]
    try:
        if feeds is not None:
            base = as_feed_list(feeds, before, b_dims, b_shapes, seed)
        elif reference_shapes and _resolves(before, b_dims, b_shapes):
            # One sample per branch a boolean input decides (optimum's use_cache_branch).
            base = as_feed_list(None, before, b_dims, b_shapes, seed, branches=True)
            if any(n not in base[0] for n in a_names):  # inputs only the new model has
                base = _filled(base, as_feed_list(None, after, a_dims, a_shapes, seed,
                                                  branches=True))
            _accepts(after, base[0], b_dims)
            # A branch sample the new model cannot take (a tool fixed the past length the
            # first sample has) is left out; the report names the branch it would have run.
            base = base[:1] + [f for f in base[1:] if _accepted(after, f)]
        else:
            # The candidate is usually the more constrained model (fix_dims), so generate
            # for it and fill what only the reference needs from the reference.
            base = as_feed_list(None, after, a_dims, a_shapes, seed, branches=True)
            if any(n not in base[0] for n in b_names):
                base = _filled(base, as_feed_list(None, before, b_dims, b_shapes, seed,
                                                  branches=True))
            base = _with_missing_values(before, after, base, b_dims, b_shapes, seed)
    except DimError as e:
        raise DimError(e.problem, fix=(e.fix or "") + " Or skip verification with "
                       "verify=False (--no-verify).") from e
    out = []
    for f in base:
        ref = {n: f[n] for n in b_names if n in f}
        cand = {n: f[n] for n in a_names if n in f}
        missing = [n for n in a_names if n not in f]
        if missing:
            raise InputError(f"Feeds have no value for input(s) {missing} of the new model.",
                             fix="Pass feeds for every input of both models.")
        out.append((ref, cand))
    return out


def _with_missing_values(before: LabModel, after: LabModel, base: list[dict], dims, shapes,
                         seed: int) -> list[dict]:
    """``base`` (made for the new model) with the inputs in which the model before the step
    holds an Imputer's missing value taken from the reference's own feeds: a step that
    dropped the Imputer (or changed what it replaces) was fed no missing value and passed."""
    names = [n for n, _, _ in input_specs(before)
             if n in base[0] and missing_value(before, n) is not None
             and repr(missing_value(after, n)) != repr(missing_value(before, n))]
    if not names:
        return base
    try:
        ref = as_feed_list(None, before, dims, shapes, seed, branches=True)
    except LabError:  # the reference's dims leave something open: the new model's feeds
        return base
    out = []
    for i, f in enumerate(base):
        r = ref[min(i, len(ref) - 1)]
        out.append({**f, **{n: r[n] for n in names if n in r
                            and np.shape(r[n]) == np.shape(f[n])}})
    return out


def _filled(base: list[dict], extra: list[dict]) -> list[dict]:
    """Each sample of ``base`` with the inputs it lacks from the matching one of ``extra``."""
    return [{**extra[min(i, len(extra) - 1)], **f} for i, f in enumerate(base)]


def _accepted(after: LabModel, feeds: Mapping[str, np.ndarray]) -> bool:
    try:
        _accepts(after, feeds, {})
    except DimError:
        return False
    return True


def _resolves(model: LabModel, dims, shapes) -> bool:
    try:
        resolve_input_shapes(model, dims, shapes)
    except DimError:
        return False
    return True


def _accepts(after: LabModel, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
             ) -> None:
    """DimError when the new model fixed an input to sizes other than the reference's."""
    for name, _dtype, shape in input_specs(after):
        arr = feeds.get(name)
        if arr is None or shape is None:
            continue
        bad = len(shape) != arr.ndim or any(
            isinstance(d, int) and d > 0 and d != a for d, a in zip(shape, arr.shape))
        if bad:
            given = ", ".join(f"{k}={v}" for k, v in dims.items()) or "none"
            raise DimError(
                f"The new model's input {name!r} is {list(shape)}, but the reference's dims "
                f"({given}) give it {list(arr.shape)}: the step fixed the input shapes to "
                "other sizes.",
                fix="Open the model with the dims the tool should fix (dims=...), or run the "
                "tool with the Lab's dims.")


def _fingerprint(feeds: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha1()
    for k in sorted(feeds):
        if is_structured(feeds[k]) or feeds[k] is None:  # a sequence, map or empty optional
            h.update(k.encode())
            h.update(repr(feeds[k]).encode()[:1 << 20])
            continue
        a = np.ascontiguousarray(feeds[k])
        h.update(k.encode())
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes()[:1 << 20])
    return h.hexdigest()


# ---------------------------------------------------------------------------- comparison
def _compare(ref: np.ndarray, cand: np.ndarray, rule: Rule) -> tuple[float, float, bool, str]:
    """(max_abs, max_rel, passed, note) of two arrays, by numerics' one comparator and
    ``rule``."""
    if is_structured(ref) or is_structured(cand) or ref is None or cand is None:
        # A sequence element by element, a map key by key (numerics' comparator).
        m = tensor_metrics(ref, cand, rule=rule, statistics=False)
        return m["max_abs"], m["max_rel"], m["passed"], m["note"]
    ref, cand = np.asarray(ref), np.asarray(cand)
    if ref.shape != cand.shape:
        return math.inf, math.inf, False, f"shape {list(cand.shape)} != reference " \
            f"{list(ref.shape)}"
    if ref.dtype == cand.dtype and np.array_equal(ref, cand):
        return 0.0, 0.0, True, ""  # the common case of a step: bit-identical values
    if ref.dtype.kind in "OSU" or cand.dtype.kind in "OSU":
        return math.inf, math.inf, False, ""  # strings that differ
    m = tensor_metrics(ref, cand, rule=rule, statistics=False)
    return m["max_abs"], m["max_rel"], m["passed"], ""


def _same_order(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether reshaping ``a`` to ``b`` only merges or splits adjacent dims (unit dims aside),
    so both list the elements in the same order: the boundaries (running products) of one
    shape are all boundaries of the other."""
    def bounds(shape: tuple[int, ...]) -> set[int]:
        out, n = set(), 1
        for d in shape:
            n *= int(d)
            out.add(n)
        return out

    if int(np.prod(a, dtype=np.int64)) != int(np.prod(b, dtype=np.int64)):
        return False
    ba, bb = bounds(a), bounds(b)
    return ba <= bb or bb <= ba


def _dtype_name(arr: Any) -> str:
    return value_dtype(arr)  # sees through sequences and maps; strings are "string"


def _shape_of(value: Any) -> list | None:
    """An array's shape; a sequence's or map's length as a 1-entry list; None for None."""
    if value is None:
        return None
    return [len(value)] if is_structured(value) else list(np.shape(value))


# ---------------------------------------------------------------------------- runs
def _run(model: LabModel, feeds: dict[str, np.ndarray], names: list[str], providers,
         cache: dict | None, key: str, extra: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Values of ``names`` for one sample, reusing ``cache`` when it holds them."""
    # on use: tests stand in for run on its module
    from onnx_lab.runtime._runner import run

    if cache is not None:
        entry = cache.get(id(model))
        if entry is not None and entry[0] is model and key in entry[1]:
            have = entry[1][key]
            if all(n in have for n in names):
                return {n: have[n] for n in names}
    want = list(dict.fromkeys([*names, *extra]))
    values = run(model, feeds, want, providers=providers)
    if cache is not None:
        slot = cache.setdefault(id(model), (model, {}))
        if slot[0] is not model:  # a dead model's id was reused
            slot = cache[id(model)] = (model, {})
        slot[1].setdefault(key, {}).update(values)
    return {n: values[n] for n in names}


def _cached_sizes(before: LabModel, pairs: list[VersionPair], sample: tuple[dict, dict],
                  cache: dict | None) -> dict[str, int | None] | None:
    """Sizes from the reference's captured values (a preset's previous step), else None."""
    if cache is None or not pairs:
        return None
    entry = cache.get(id(before))
    if entry is None or entry[0] is not before:
        return None
    have = entry[1].get(_fingerprint(sample[0]) + _fingerprint(sample[1]))
    if have is None or any(p.ref not in have for p in pairs):
        return None
    return {p.tensor: _nbytes(have[p.ref]) for p in pairs}


def _nbytes(value: Any) -> int | None:
    if is_structured(value):
        return None  # a sequence or map: sized like an unknown tensor
    return 0 if value is None else int(np.asarray(value).nbytes)


def _estimate(model: LabModel, names: Sequence[str], feeds: Mapping[str, np.ndarray]
              ) -> dict[str, int | None]:
    # on use: `import onnx_lab` loads verify
    from onnx_lab.runtime._runner import quick_sizes

    shapes = {k: np.asarray(v).shape for k, v in feeds.items()
              if v is not None and not is_structured(v)}
    quick = quick_sizes(model, names, shapes)
    # A few unknown sizes (a Range of computed length) are planned as the largest known
    # one, as plan_chunks does for the full estimate's unknowns; more: the full estimate.
    if quick is not None and sum(v is None for v in quick.values()) <= len(names) // 100:
        return quick
    return estimate_bytes(model, names, shapes)


# ---------------------------------------------------------------------------- public
def verify(before: LabModel, after: LabModel, result: PassResult | None = None, *,
           feeds: Any = None, dims: Mapping[str, int] | None = None,
           shapes: Mapping[str, Sequence[int]] | None = None, atol: float | None = None,
           rtol: float | None = None, seed: int = 0, max_bytes: int = 1 << 30,
           intermediates: bool = True, providers: Any = None,
           cache: dict | None = None, preset: str | None = None,
           reference_shapes: bool = False) -> pd.DataFrame:
    """Compare ``after`` against ``before`` numerically; one row per compared tensor.

    Args:
        before, after: the reference and candidate LabModels (or Labs).
        result: the PassResult that made ``after`` (its provenance aligns fused nodes).
        feeds: None (seeded random inputs), a dict, a list of dicts or an ``.npz`` path.
        dims, shapes: values for symbolic dims / full input shapes.
        atol, rtol: override the preset's numbers (defaults per dtype: float32 1e-4/1e-3,
            float16 1e-2/1e-2, bfloat16 5e-2/2e-2, float64 1e-7/1e-6; ints and bools exact).
            Outputs are judged element-wise (``|err| <= atol + rtol·|ref|``), intermediate
            tensors against their own scale (``max|err| <= atol + rtol·max|ref|``): rounding
            of reordered float sums moves elements near zero by the size of their summands.
        seed: seed of the generated inputs.
        max_bytes: about how many bytes of captured tensors (both models) are held at once.
        intermediates: also compare surviving intermediate tensors (default True).
        providers: onnxruntime providers (default CPU).
        cache: a dict shared across calls (e.g. the steps of a preset): captured values of a
            model are reused when it is the reference of the next step.
        preset: a tolerance preset of :data:`onnx_lab.numerics.metrics.PRESETS` (None: each
            tensor's dtype picks its own; ``exact`` for rewrites that must not change a bit).
        reference_shapes: size the generated inputs by ``before``'s dims (dim expressions
            evaluated), which ``after`` must take: DimError naming the input when ``after``
            fixed other sizes (what a tool step checks). False: ``after``'s own shapes lead
            (a ``fix_dims`` to other sizes).

    Returns:
        DataFrame with columns tensor (name in ``after``), node_id (its producer in
        ``after``), match ('output' | 'name' | 'provenance'), dtype, max_abs, max_rel
        (float, over all samples), passed (bool), atol, rtol (the tolerances used),
        ref_tensor, ref_node_id (the compared tensor in ``before``), shape (list),
        note (str: why a row failed without numbers), preset and rule (which preset and
        which rule judged the tensor, as a formula). Rows are in the topological order of
        ``after``. ``report.attrs`` holds ``passed`` (bool), ``first_failure`` (the first
        failing tensor in topological order, or None), ``max_abs_err`` (largest max_abs over
        the model outputs), ``samples``, ``branches`` (per sample, the If branches a
        boolean input such as optimum's ``use_cache_branch`` takes: the seeded inputs are one
        sample per value, see :func:`onnx_lab.runtime.feeds.branch_feeds`) and
        ``unexercised`` (those no sample took, also in ``note``), and when a selection
        flipped a near-tie ``selections`` (one dict per flip) and ``selection_note``.

    Raises:
        DimError: symbolic dims without a value (listing them and how to pass them).
        InputError: bad feeds or tolerances (rtol must be in [0, 1)).
        RuntimeLoadError: the reference model cannot run in onnxruntime.

    Example:
        >>> report = verify(before, after, dims={"batch": 1})
        >>> report.loc[~report.passed, ["tensor", "max_abs"]]
    """
    return report_of(before, after, result, feeds=feeds, dims=dims, shapes=shapes,
                     atol=atol, rtol=rtol, seed=seed, max_bytes=max_bytes,
                     intermediates=intermediates, providers=providers, cache=cache,
                     preset=preset, reference_shapes=reference_shapes).frame()


@dataclass
class Report:
    """A verification report before it becomes a DataFrame (see :func:`verify`).

    ``apply`` keeps this in ``PassResult.verification`` and builds the DataFrame when it is
    first read, so commands that only need the verdict (``onnx-lab optimize``) never import
    pandas.
    """

    rows: list[dict[str, Any]]
    attrs: dict[str, Any]

    def row(self, tensor: str | None) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["tensor"] == tensor), None)

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows, columns=REPORT_COLUMNS)
        df.attrs.update(self.attrs)
        return df


def report_of(before: LabModel, after: LabModel, result: PassResult | None = None, *,
              feeds: Any = None, dims: Mapping[str, int] | None = None,
              shapes: Mapping[str, Sequence[int]] | None = None, atol: float | None = None,
              rtol: float | None = None, seed: int = 0, max_bytes: int = 1 << 30,
              intermediates: bool = True, providers: Any = None,
              cache: dict | None = None, preset: str | None = None,
              reference_shapes: bool = False) -> Report:
    """:func:`verify` without the DataFrame: its rows and attrs.

    ``reference_shapes``: size the inputs by the reference's dims, which the new model must
    take (a tool's step; ``steps.apply`` sets it for every pass but the shape edits)."""
    before, after = load_source(before), load_source(after)
    for label, v in (("atol", atol), ("rtol", rtol)):
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                              or not 0 <= v < (1 if label == "rtol" else math.inf)):
            raise InputError(f"{label} must be a number in [0, {'1' if label == 'rtol' else 'inf'}"
                             f"), got {v!r}.", fix="rtol=1 would accept any value; use e.g. "
                             "atol=1e-3, rtol=1e-2.")
    if preset is not None:
        get_preset(preset)  # UnknownNameError listing the presets
    if not isinstance(max_bytes, int) or max_bytes <= 0:
        raise InputError(f"max_bytes must be a positive int, got {max_bytes!r}.",
                         fix="Pass e.g. max_bytes=1 << 30.")
    not_comparable: dict[str, str] = {}
    pairs = align_versions(before, after, result, rejected=not_comparable)
    if not intermediates:
        pairs = [p for p in pairs if p.match == "output"]
    samples = _feeds(before, after, feeds, dims, shapes, seed, reference_shapes)
    stats: dict[str, dict[str, Any]] = {p.tensor: _new_stats() for p in pairs}
    sizes = _cached_sizes(before, pairs, samples[0], cache)
    if sizes is None:
        sizes = _estimate(after, [p.tensor for p in pairs], samples[0][1]) if pairs else {}
    # Both models' tensors of a chunk are alive at once.
    chunks = _plan([p for p in pairs], sizes, max_bytes // 2)
    single = len(chunks) <= 1
    a_all = [n for n, _i, _t in version_tensors(after)] if (cache is not None and single) else []
    precision = computed_precision(before) if preset is None else {}
    steps = _quant_steps(before, pairs) \
        if preset is None and getattr(result, "requantized", False) else {}
    skipped: list[str] = []
    labels = branch_labels(before, [r for r, _c in samples])
    not_run: list[str] = []  # generated branch samples the reference itself cannot run
    for i, (ref_feeds, cand_feeds) in enumerate(samples):
        key = _fingerprint(ref_feeds) + _fingerprint(cand_feeds)
        for chunk in chunks:
            try:
                refs = _run(before, ref_feeds, list(dict.fromkeys(p.ref for p in chunk)),
                            providers, cache if single else None, key)
            except RuntimeLoadError as e:
                if i == 0 or feeds is not None or not labels:
                    raise
                # The other branch, sized as generated, does not run in the reference
                # either: it cannot judge the step; said as unexercised, not a failure.
                not_run.append(f"{labels[i]} (the reference does not run on it: "
                               f"{e.problem})")
                break
            try:
                cands = _run(after, cand_feeds, [p.tensor for p in chunk], providers,
                             cache if single else None, key, extra=a_all)
            except RuntimeLoadError as e:
                # for want of memory (an allocation onnxruntime could not make): nothing
                # compared, which is no failure of the step's numbers (the run limit's
                # RunLimitError is raised before the run, as it was)
                why = f"{NOT_CHECKED}: {e.problem}" if out_of_memory(e, after) else \
                    f"the new model does not run: {e.problem}"
                for p in chunk:
                    s = stats[p.tensor]
                    s.update(passed=False, max_abs=math.inf, max_rel=math.inf, note=why)
                    if labels:
                        s["fails_with"].append(labels[i])
                continue
            for p in chunk:
                passed = stats[p.tensor]["passed"]
                if not _judge(p, refs[p.ref], cands[p.tensor], stats[p.tensor], preset=preset,
                              atol=atol, rtol=rtol, computed=precision.get(p.ref),
                              quant_step=steps.get(p.ref)):
                    skipped.append(p.tensor)
                elif labels and passed and not stats[p.tensor]["passed"]:
                    stats[p.tensor]["fails_with"].append(labels[i])
            del refs, cands
    saved = _saved_form_problem(before, after)
    if saved:  # runs here, but its saved file would not load: every output fails
        for p in pairs:
            if p.match == "output":
                stats[p.tensor].update(passed=False, note=saved)
    pairs = [p for p in pairs if p.tensor not in set(skipped)]
    rows = [_row(p, stats[p.tensor]) for p in pairs]
    if not all(r["passed"] for r in rows) and selection_nodes(after):
        # near-tie flips of selections (TopK, NMS...): judged by their inputs
        sides = _selection_sides(before, after, result, pairs, samples, providers,
                                 cache if single else None, preset=preset, atol=atol,
                                 rtol=rtol)
        selections = judge_selections(sides, {r["tensor"]: r["passed"] for r in rows})
        selections.apply(rows, not_comparable)
    else:
        selections = None
    changed = changed_branches(before, after, result)
    if changed:  # a branch a computed condition decides, which the step changed
        not_run += untaken(changed, [r for r, _c in samples],
                           lambda f, names: _run(before, dict(f), list(names), providers, None,
                                                 ""))
    loops = changed_loops(before, after, result)
    if loops:  # a Loop body the step changed that ran 0 times was never checked
        not_run += unrun(loops, [r for r, _c in samples],
                         lambda f, names: fetch(before, dict(f), list(names), lambda ns: _run(
                             before, dict(f), list(ns), providers, None, "")))
    failing = [r["tensor"] for r in rows if not r["passed"]]
    unchecked = bool(failing) and all(str(r["note"] or "").startswith(NOT_CHECKED)
                                      for r in rows if not r["passed"])
    # over the outputs compared: one downstream of a flipped near-tie differs by the flip
    outs = [r["max_abs"] for r in rows if r["match"] == "output" and not flipped(r)]
    attrs: dict[str, Any] = {
        "passed": None if unchecked else not failing,
        "first_failure": str(failing[0]) if failing and not unchecked else None,
        "max_abs_err": float(max(outs)) if outs else None, "samples": len(samples),
        "skipped": sorted(set(skipped)), "not_comparable": not_comparable,
        "verified_by": "full", "branches": labels,
        "unexercised": unexercised(before, [r for r, _c in samples]) + not_run}
    if selections is not None and not selections.empty:
        attrs["selections"] = selections.to_dict()
        attrs["selection_note"] = selections.note(
            [r["tensor"] for r in rows if r["match"] == "output" and flipped(r)])
    if not pairs:
        attrs["note"] = "no tensor of the new model corresponds to one of the reference"
    elif attrs["unexercised"]:
        attrs["note"] = ("not exercised by the feeds (never checked): "
                         + "; ".join(attrs["unexercised"]))
    return Report(rows, attrs)



def _selection_sides(before: LabModel, after: LabModel, result: Any, pairs: list[VersionPair],
                     samples: list[tuple[dict, dict]], providers: Any, cache: dict | None, *,
                     preset: str | None, atol: float | None, rtol: float | None) -> Sides:
    """The two versions as the selection judge sees them: tensors paired as verified (graph
    inputs and constants by name), their values from the same runs (the cache's when it
    holds them), the step's rewritten nodes (``step_diff``) checked on their own."""
    ref_of = {p.tensor: p.ref for p in pairs}
    b_names = set(before.index.values) | set(before.graph.initializers)
    for name in [*(v.name for v in after.graph.inputs), *after.graph.initializers]:
        if name in b_names:
            ref_of.setdefault(name, name)

    def values(names: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        out = []
        for ref_feeds, cand_feeds in samples:
            key = _fingerprint(ref_feeds) + _fingerprint(cand_feeds)
            cand = fetch(after, cand_feeds, names, lambda ns, f=cand_feeds, k=key: _run(
                after, f, ns, providers, cache, k))
            wanted = {n: ref_of[n] for n in names if n in ref_of}
            refs = fetch(before, ref_feeds, list(wanted.values()),
                         lambda ns, f=ref_feeds, k=key: _run(before, f, ns, providers, cache, k))
            out.append(({n: refs[m] for n, m in wanted.items() if m in refs}, cand))
        return out

    diff = step_diff(before, after, result)
    changed = set(diff.nodes)
    consts = set(diff.constants)
    idx = after.index

    def rewritten(nid: str) -> bool:
        node = idx.entries[nid].node
        return nid in changed or any(v is not None and v.name in consts for v in node.inputs)

    return Sides(after, before, ref_of.get, values,
                 lambda dt, output=False: rule_for(dt, output=output, preset=preset,
                                                   atol=atol, rtol=rtol)[1],
                 rewritten, providers)


def _permuted_dims(r: Any, c: Any) -> bool:
    """Whether ``r`` and ``c`` are 1-D integer vectors holding the same values in another
    order."""
    if not (isinstance(r, np.ndarray) and isinstance(c, np.ndarray)) or r.ndim != 1 \
            or r.shape != c.shape or r.dtype.kind not in "iu" or c.dtype.kind not in "iu":
        return False
    return not np.array_equal(r, c) and np.array_equal(np.sort(r), np.sort(c))


def _judge(p: VersionPair, ref: Any, cand: Any, s: dict[str, Any], *, preset: str | None,
           atol: float | None, rtol: float | None, computed: str | None = None,
           quant_step: tuple[np.ndarray, int] | None = None) -> bool:
    """Compare one pair's values into its stats ``s`` (in place); False when the pair is not
    comparable element by element (a transposed layout kept under the name: skipped).

    ``computed``: the narrowest float dtype the reference computed the tensor through
    (:func:`~onnx_lab.numerics.align.computed_precision`); without a preset it picks the rule
    when it is coarser than the tensor's own dtype's.

    ``quant_step``: (scale, axis) of the DequantizeLinear that computes the reference tensor,
    for a step that moved Q/DQ into integer kernels (:func:`_quant_steps`): elements within
    one quantization step of the reference pass, as the kernels' rounding."""
    r, c = as_value(ref), as_value(cand)
    bound = _step_bound(quant_step, r) if quant_step is not None else None
    dt = _dtype_name(r)
    judged_as = dt if preset is not None else judging_dtype(dt, computed)
    why = f" ({dt}, computed through {judged_as})" if judged_as != dt else ""
    pname, rule = rule_for(judged_as, output=p.match == "output", preset=preset, atol=atol,
                           rtol=rtol)
    if p.match != "output" and not p.kept and not is_structured(r) and r is not None \
            and c is not None and not is_structured(c) and r.shape != c.shape:
        # A tool may keep a name on a reshaped tensor (2-D Gemm inside a 3-D MatMul chain):
        # compare the values when one shape only merges adjacent dims of the other (the
        # element order is the same); a transposed layout of the same size is not comparable
        # element by element: skip it. A node that reads the same data as before (p.kept)
        # and gives another shape computes something else: that fails below.
        if not _same_order(r.shape, c.shape):
            return False
        r = r.reshape(c.shape)
        bound = bound.reshape(c.shape) if bound is not None else None
        s["note"] = s["note"] or f"reference shape {list(r.shape)} compared flat"
    if p.shapes and p.match != "output" and not p.kept and _permuted_dims(r, c):
        # Two Shapes whose dims are one another's in another order: the candidate's reads
        # the tensor in another layout (onnxruntime's transpose optimizer keeps a Shape's
        # name on the NCHW twin of an NHWC tensor, a Gather reorders its dims after it; ort:all
        # leaves no inferred shape to tell it beforehand). Not comparable element by element,
        # as a transposed layout kept under a name; what reads the dims is still compared.
        return False
    mabs, mrel, ok, note = _compare(r, c, rule)
    if not ok and bound is not None and np.shape(c) == bound.shape \
            and np.asarray(c).dtype.kind == "f":
        d = np.abs(np.asarray(c, np.float64) - np.asarray(r, np.float64))
        same_nan = np.isnan(np.asarray(r, np.float64)) & np.isnan(np.asarray(c, np.float64))
        if bool(np.all((d <= bound) | same_nan)):
            ok = True
            note = note or ("within one quantization step of its DequantizeLinear: integer "
                            "kernels round where the QDQ graph computed in float")
    s.update(dtype=dt, shape=_shape_of(c), atol=rule.atol, rtol=rule.rtol, preset=pname,
             rule=rule.describe() + why, max_abs=max(s["max_abs"], mabs),
             max_rel=max(s["max_rel"], mrel), passed=s["passed"] and ok, note=s["note"] or note)
    return True


def _quant_steps(before: LabModel, pairs: list[VersionPair]) -> dict[str, tuple[np.ndarray, int]]:
    """Reference tensor -> (scale, axis) of the DequantizeLinear computing it, for the pairs
    whose reference is one with a constant scale (block-wise quantization left out)."""
    idx, out = before.index, {}
    for p in pairs:
        nid = idx.producer.get(p.ref)
        node = idx.node(nid) if nid is not None else None
        if node is None or node.op_type != "DequantizeLinear" \
                or node.domain not in ("", "ai.onnx", "com.microsoft") or len(node.inputs) < 2:
            continue
        block, axis = node.attributes.get("block_size"), node.attributes.get("axis")
        if block is not None and block.value:
            continue
        scale = const_array(node.inputs[1]) if node.inputs[1] is not None else None
        if scale is None or np.asarray(scale).dtype.kind != "f":
            continue
        out[p.ref] = (np.asarray(scale), int(axis.value) if axis is not None else 1)
    return out


def _step_bound(step: tuple[np.ndarray, int], ref: Any) -> np.ndarray | None:
    """One quantization step per element of ``ref`` (a little over, for float rounding), or
    None when the scale does not fit its shape."""
    scale, axis = step
    if not isinstance(ref, np.ndarray):
        return None
    try:
        return np.broadcast_to(np.abs(scale_along(scale, axis, ref.ndim)) * (1 + 1e-3),
                               ref.shape)
    except ValueError:  # a scale of another size than the axis it runs along
        return None


def _new_stats() -> dict[str, Any]:
    return {"max_abs": 0.0, "max_rel": 0.0, "passed": True, "dtype": None, "shape": None,
            "note": "", "atol": None, "rtol": None, "preset": None, "rule": None,
            "fails_with": []}


def _row(p: VersionPair, s: dict[str, Any]) -> dict[str, Any]:
    # The first sample it failed on, by the branches that sample runs.
    where = f"fails with {s['fails_with'][0]}" if s["fails_with"] else ""
    return {"tensor": p.tensor, "node_id": p.node_id, "match": p.match, "dtype": s["dtype"],
            "max_abs": s["max_abs"], "max_rel": s["max_rel"], "passed": s["passed"],
            "atol": s["atol"], "rtol": s["rtol"], "ref_tensor": p.ref,
            "ref_node_id": p.ref_node_id, "shape": s["shape"],
            "note": "; ".join(x for x in (s["note"], where) if x),
            "preset": s["preset"], "rule": s["rule"]}


def _saved_form_problem(before: LabModel, after: LabModel) -> str | None:
    """Why ``after``, saved as ``lab.save`` would (with external data when the models read
    some or pass 2 GB), would not load in onnxruntime, or None (see
    :func:`onnx_lab.runtime.session.saved_form_problem`: free for models without large
    integer initializers)."""
    if not (before.has_external_data or wants_external(after)):
        return None  # written as one file: every tensor inline, as the runner has them
    problem = saved_form_problem(after)
    if problem is None:
        return None
    return f"saved with external data, the new model would not load in onnxruntime: {problem}"


def _plan(pairs: list[VersionPair], sizes: Mapping[str, int | None], max_bytes: int
          ) -> list[list[VersionPair]]:
    if not pairs:
        return []
    by_name = {p.tensor: p for p in pairs}
    return [[by_name[n] for n in chunk]
            for chunk in plan_chunks({p.tensor: sizes.get(p.tensor) for p in pairs},
                                     max(max_bytes, 1))]


#: How a row's note begins when nothing could be compared: the new version does not run.
NOT_RUN = ("the new model does not run", "the optimized model does not run")
#: How a row's note begins when the new version could not be run for want of memory (the
#: run limit, or onnxruntime's allocation failed): nothing was compared, and the step is not
#: verified (``verify_passed`` None) rather than failed.
NOT_CHECKED = "not checked: the new model could not be run within the memory here"


def report_rows(result: PassResult) -> list[dict[str, Any]]:
    """The rows of a step's verification report, without making the DataFrame of a report
    not yet read as one: its rows may still be filled (a region judged in the preset's final
    run). Empty when the step was not verified."""
    report = getattr(result, "_verification", None)
    if report is None:
        report = getattr(result, "verification", None)
    if report is None:
        return []
    return report.rows if isinstance(report, Report) else report.to_dict("records")


def did_not_run(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a report's rows say the new version does not run (nothing was compared)."""
    return any(str(r.get("note") or "").startswith(NOT_RUN) for r in rows)


def failed_where(result: PassResult) -> str:
    """Where a step's verification failed, for a one-line verdict: ``at TENSOR``, or why
    nothing could be compared (the new model does not run: every row fails with that, and
    its first tensor says nothing)."""
    first = next((str(r.get("note") or "") for r in report_rows(result)
                  if not r.get("passed")), "")
    if first.startswith(NOT_RUN):
        return f": {first[:300]}"
    return f" at {result.first_failure}"


def fill_result(result: PassResult, report: pd.DataFrame | Report, seconds: float
                ) -> PassResult:
    """Write a report's verdict into ``result`` (in place) and return it."""
    result.verification = report
    passed = report.attrs.get("passed", True)
    result.verify_passed = None if passed is None else bool(passed)  # None: not checked
    result.max_abs_err = report.attrs.get("max_abs_err")
    result.first_failure = report.attrs.get("first_failure")
    result.verify_seconds = seconds
    if report.attrs.get("unexercised"):  # branches no sample ran: said, not hidden
        result.notes.append(f"verification {report.attrs['note']}")
    if report.attrs.get("selection_note"):  # near-tie flips: said plainly
        result.notes.append(f"verification: {report.attrs['selection_note']}")
    if result.verify_passed is None:
        first = next(str(r.get("note")) for r in (report.rows if isinstance(report, Report)
                                                  else report.to_dict("records"))
                     if not r.get("passed"))
        result.notes.append(f"not verified: {first}")
        return result
    if not result.verify_passed:
        if isinstance(report, Report):
            row = report.row(result.first_failure)
        else:
            row = report.loc[report["tensor"] == result.first_failure].iloc[0]
        numbers = f"max_abs {row['max_abs']:.3g} outside the {row['preset']} rule " \
            f"{row['rule']}"
        note = str(row["note"] or "")
        # a branch's name alone says where, not by how much
        detail = note if note and not note.startswith("fails with ") else "; ".join(
            x for x in (numbers, note) if x)
        if note.startswith(NOT_RUN):  # no tensor was compared: naming one would mislead
            result.notes.append(f"verification failed: {note}")
        else:
            result.notes.append(f"verification failed first at tensor "
                                f"{result.first_failure!r} (node {row['node_id']}): {detail}")
        narrow = _narrow_float(row)
        if narrow and report.attrs.get("verified_by", "full") == "full" and result.name:
            result.notes.append(
                f"the model computes in {narrow}, and the whole-model check compares each "
                "tensor after everything upstream of it changed: the rounding of rewritten "
                f"constants to {narrow} can add up through a deep network; "
                f"lab.apply_preset([{result.name!r}]) judges each rewritten node on the "
                "original's values (a wrong node fails there), then the outputs "
                "(docs/transforms.md, known limits)")
    return result


def _narrow_float(row: Mapping[str, Any]) -> str | None:
    """float16 / bfloat16 when a report row's tensor is, or is computed through, one."""
    for narrow in ("float16", "bfloat16"):
        if row.get("dtype") == narrow or f"computed through {narrow}" in str(row.get("rule")):
            return narrow
    return None


@strict_keywords
def verify_extract(full: LabModel, sub: LabModel, ins: list[str], outs: list[str], *,
                   dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None, feeds: Any = None,
                   atol: float | None = None, rtol: float | None = None, seed: int = 0,
                   preset: str | None = None) -> pd.DataFrame:
    """Verification of an extracted subgraph: the full model runs on seeded inputs (``dims``,
    ``shapes``), its boundary tensors are fed to ``sub`` and ``sub``'s outputs compared with
    the full model's (one report row per output, as :func:`verify`)."""
    samples = as_feed_list(feeds, full, dims, shapes, seed)
    rows: dict[str, dict[str, Any]] = {}
    graph_inputs = {v.name for v in full.graph.inputs}
    wanted = list(dict.fromkeys([n for n in ins if n not in graph_inputs] + outs))
    reference = upstream_model(full, wanted)
    for f in samples:
        ref = capture_run(reference, {k: v for k, v in f.items()
                              if k in {i.name for i in reference.graph.inputs}},
                  outputs=wanted)
        sub_feeds = {n: (f[n] if n in graph_inputs else ref[n]) for n in ins}
        got = capture_run(sub, sub_feeds)
        for n in outs:
            r, c = as_value(ref[n]), as_value(got[n])
            dt = _dtype_name(r)
            pname, rule = rule_for(dt, output=True, preset=preset, atol=atol, rtol=rtol)
            mabs, mrel, ok, note = _compare(r, c, rule)
            row = rows.setdefault(n, {"tensor": n, "node_id": sub.index.producer.get(n),
                                      "match": "output", "dtype": dt, "max_abs": 0.0,
                                      "max_rel": 0.0, "passed": True, "atol": rule.atol,
                                      "rtol": rule.rtol, "ref_tensor": n,
                                      "ref_node_id": full.index.producer.get(n),
                                      "shape": _shape_of(c), "note": "", "preset": pname,
                                      "rule": rule.describe()})
            row.update(max_abs=max(row["max_abs"], mabs), max_rel=max(row["max_rel"], mrel),
                       passed=row["passed"] and ok, note=row["note"] or note)
    report = pd.DataFrame(list(rows.values()), columns=REPORT_COLUMNS)
    failing = report.loc[~report["passed"], "tensor"]
    report.attrs.update(passed=bool(len(failing) == 0),
                        first_failure=str(failing.iloc[0]) if len(failing) else None,
                        max_abs_err=float(report["max_abs"].max()) if len(report) else None,
                        samples=len(samples))
    return report
