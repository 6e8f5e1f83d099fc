"""A step: run a pass, verify the new version, push it on the history — in one place.

This sits above ``transforms`` (which rewrites models) and ``numerics`` (which verifies them):
``Lab.apply``, ``Lab.apply_preset``, ``Lab.extract``, the FusionLab widget and ``onnx-lab
optimize`` all go through these functions, with the Lab's :class:`~onnx_lab.core.history.History`.

Example:
    >>> from onnx_lab import steps
    >>> r = steps.apply(lab.version_history, "fuse_conv_bn")   # what lab.apply does
    >>> r.verify_passed, r.first_failure
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from onnx_lab._progress import Progress
from onnx_lab.core._gc import paused
from onnx_lab.core.history import History
from onnx_lab.core.limits import memory_limit
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import fit_dims, shape_tuple
from onnx_lab.core.source import resolve
from onnx_lab.errors import (
    InputError,
    LabError,
    PassError,
    RuntimeLoadError,
    check_keywords,
    keyword_names,
    unknown_name,
)
from onnx_lab.numerics.align import computed_precision
from onnx_lab.numerics.quantize import computed_weights, named_by_id
from onnx_lab.numerics.region import (
    NOT_CHECKED,
    PresetReference,
    capture_reference,
    final_check,
    find_region,
    judge_final,
    judge_region,
    region_report,
    step_diff,
    unchanged_report,
)
from onnx_lab.numerics.selection import flipped, selection_tensors
from onnx_lab.numerics.verify import (
    NOT_RUN,
    Report,
    _saved_form_problem,
    did_not_run,
    failed_where,
    fill_result,
    report_of,
    report_rows,
    verify_extract,
)
from onnx_lab.runtime.feeds import read_feeds_file
from onnx_lab.runtime.session import (
    default_load_ahead,
    default_load_problem,
    default_load_regression,
    warm_default_load,
)
from onnx_lab.transforms.apply import preset_passes, run_pass
from onnx_lab.transforms.base import PassResult, get_pass, pass_kind, pass_traits
from onnx_lab.transforms.extract import extract_model
from onnx_lab.transforms.interface import fed_inputs

logger = logging.getLogger(__name__)

__all__ = ["apply", "apply_preset", "extract", "find_precision", "VERIFY_OPTIONS"]

#: Keys accepted in ``verify={...}`` (``mode``: see :data:`VERIFY_MODES`).
VERIFY_OPTIONS = ("feeds", "atol", "rtol", "seed", "max_bytes", "intermediates", "providers",
                  "preset", "mode")
#: How a step is verified: ``"auto"`` (``verify=True``: a preset's steps by the region they
#: rewrote, a lone ``apply`` on the whole model), ``"region"`` (also a lone ``apply``: one
#: capture, the region, the outputs), ``"full"`` (every step on the whole model).
VERIFY_MODES = ("auto", "region", "full")


def verify_options(verify_arg: bool | str | Mapping[str, Any]) -> dict[str, Any] | None:
    """The options of ``verify=`` for :func:`onnx_lab.numerics.verify.report_of` (None: do
    not verify; the mode is read by :func:`verify_mode`); InputError on unknown keys."""
    if verify_arg is False or verify_arg is None:
        return None
    if verify_arg is True:
        return {}
    if isinstance(verify_arg, str):
        verify_mode(verify_arg)  # InputError on an unknown mode
        return {}
    if isinstance(verify_arg, Mapping):
        bad = [k for k in verify_arg if k not in VERIFY_OPTIONS]
        if bad:
            raise InputError(f"Unknown verification option(s) {bad}.",
                             fix=f"Use any of {', '.join(VERIFY_OPTIONS)}.")
        verify_mode(verify_arg)
        opts = {k: v for k, v in verify_arg.items() if k != "mode"}
        if isinstance(opts.get("feeds"), (str, os.PathLike)):
            # read now: a step that changes nothing never verifies, and a missing or unreadable
            # file went unnoticed (onnx-lab optimize --feeds nope.npz saved and exited 0)
            opts["feeds"] = read_feeds_file(opts["feeds"])
        return opts
    raise InputError(f"verify must be True, False, 'full', 'region' or a dict of options, got "
                     f"{verify_arg!r}.",
                     fix="Pass verify=True (default), verify='full', verify=False or "
                     "verify={'atol': 1e-3}.")


def verify_mode(verify_arg: bool | str | Mapping[str, Any]) -> str:
    """The mode of ``verify=`` (one of :data:`VERIFY_MODES`); InputError on another."""
    mode = verify_arg if isinstance(verify_arg, str) else (
        verify_arg.get("mode", "auto") if isinstance(verify_arg, Mapping) else "auto")
    if mode not in VERIFY_MODES:
        raise InputError(f"Unknown verification mode {mode!r}.",
                         fix=f"Use one of {', '.join(map(repr, VERIFY_MODES))} (verify='full' "
                         "checks every step on the whole model).")
    return mode


_PENDING = object()  # a step whose region runs later (steps._Regions.finish)


class _Regions:
    """A preset's region verification: the reference captured once (at the first step that
    changes a value), each step checked by its region (``numerics.region``), and the outputs
    compared with the original's once at the end (:meth:`finish`).

    A step's region is not run at once: the preset's final run computes it too. The last
    one (when the final model still computes its tensors with the same nodes) is read from
    the final model itself, whose inputs to it are then the reference's values exactly
    (every earlier step reproduced the reference bit for bit; when one did not, it runs
    alone after all), unless its own nodes feed it (a chain of fused Convs reading each
    other through a Relu): the final model's values there carry the differences of the
    whole chain, as the whole-model check's do: a pass there stands, and a failure is
    judged again with the region run alone on the reference's values; every earlier one runs as a copy inside the same run, fed the
    reference's values (``numerics.region.with_copies``). The steps are judged in their
    order after that run; a region whose inputs an earlier step's judgment dropped from the
    reference runs alone then (or the whole model is checked). A step checked on the whole
    model first has the waiting regions judged, alone."""

    def __init__(self) -> None:
        self.ref: PresetReference | None = None
        self.off: str | None = None  # why no region can be checked any more
        self.last: PassResult | None = None
        self.regions = 0
        self.opts: dict[str, Any] = {}
        self.diff: Any = None  # the current step's numerics.region.StepDiff
        self.passed = True  # every step verified so far passed
        self.exact = True  # every compared value so far bit-identical to the reference
        # planned regions, in step order: (PendingRegion, result, diff, dims, shapes, opts,
        # {input: the reference's array it is fed})
        self.waiting: list[tuple] = []

    def report(self, before: Any, result: PassResult, kind: str | None, preserving: bool,
               opts: dict[str, Any], dims: dict, shapes: dict) -> tuple[Any, str | None]:
        """(report, None) by the region (``_PENDING``: planned, run later), or (None, why
        the whole model is checked)."""
        self.diff = None
        if self.off:
            return None, self.off
        self.diff = step_diff(before, result.model, result)
        region, _why = find_region(result.model, self.diff,
                                   self.ref.values if self.ref is not None else None)
        empty = region is not None and region.empty
        if not (region is not None and (region.exact or region.nodes)):
            self.flush()  # judged now: the waiting steps first, in their order
        if not preserving or kind == "edit":
            self.flush()
            return None, "the step is meant to change values"
        if opts.get("intermediates") is False:
            self.flush()
            return None, "intermediates=False compares the outputs of the whole model"
        if empty and not _saved_form_problem(before, result.model):
            return unchanged_report(), None  # nothing ran (nor is captured yet)
        if self.ref is None:
            self.opts = opts
            self.ref, why = capture_reference(
                before, result.model, feeds=opts.get("feeds"), dims=dims, shapes=shapes,
                seed=opts.get("seed", 0), providers=opts.get("providers"),
                max_bytes=opts.get("max_bytes", 1 << 30))
            if self.ref is None:
                self.off = why
                return None, why
        report, how = region_report(self.ref, before, result.model, result,
                                    diff=self.diff, atol=opts.get("atol"),
                                    rtol=opts.get("rtol"), preset=opts.get("preset"),
                                    providers=opts.get("providers"), defer=True)
        if report is None:
            self.flush()
            return None, how
        self.regions += how in ("region", "pending")
        if how == "pending":
            fed = {n: self.ref.values[n] for n in report.region.inputs}
            self.waiting.append((report, result, self.diff, dims, shapes, opts, fed))
            self.last = result
            result.verified_by = "region"
            return _PENDING, None
        return report, None

    def advance(self, result: PassResult) -> None:
        """After a step's report is filled: keep the reference's values true."""
        self.last = result
        self.passed = self.passed and result.verify_passed is not False
        report = result._verification if isinstance(result._verification, Report) else None
        self.exact = self.exact and report is not None and all(
            r["passed"] and r["max_abs"] == 0 for r in report.rows)
        if self.ref is not None and self.diff is not None:
            self.ref.advance(self.diff, report)

    def flush(self) -> None:
        """Judge every waiting region, alone, in step order."""
        while self.waiting:
            self._judge(self.waiting.pop(0), None)

    def _judge(self, item: tuple, values: Mapping[str, Any] | None, copy: bool = False,
               recheck: bool = False) -> None:
        """Fill a waiting step's report: from ``values`` (the final run's), or its region
        run alone (``values`` None, or fed other values than the reference holds now; or
        ``recheck`` and the values fail: the region feeds itself, see ``finish``)."""
        plan, result, diff, dims, shapes, opts, fed = item
        if values is not None and any(self.ref.values.get(n) is not a for n, a in fed.items()):
            values = None  # an earlier step's judgment changed its inputs' reference values
        t0 = time.perf_counter()
        try:
            report = judge_region(self.ref, plan, values, copy=copy)
            if recheck and values is not None and not report.attrs["passed"]:
                report = judge_region(self.ref, plan)
        except (LabError, ValueError, KeyError) as e:  # not alone (any more): the whole model
            report = report_of(plan.before, plan.after, result, dims=dims, shapes=shapes,
                               reference_shapes=True, **opts)
            report.attrs["region_fallback"] = f"the region does not run on its own: {e}"
            result.notes.append(f"verified on the whole model: {report.attrs['region_fallback']}")
        fill_result(result, report, (result.verify_seconds or 0.0) + time.perf_counter() - t0)
        result.verified_by = report.attrs.get("verified_by", "full")
        if result.verify_passed is False:
            logger.warning("%s: verification failed%s", result.name, failed_where(result))
        saved, self.diff = self.diff, diff
        try:
            self.advance(result)
        finally:
            self.diff = saved

    def finish(self, model: Any) -> None:
        """The preset's outputs against the original's, into the last verified step, in one
        run that also computes the waiting regions (see the class)."""
        ref = self.ref
        if self.last is None or ref is None or not self.regions:
            self.flush()
            return
        direct = self.waiting[-1] if self.waiting and \
            self.waiting[-1][0].still_computed(model) else None
        copies = [w for w in self.waiting if w is not direct]
        self.waiting = []
        t0 = time.perf_counter()
        kw = {"atol": self.opts.get("atol"), "rtol": self.opts.get("rtol"),
              "providers": self.opts.get("providers")}
        # the selections' values, in case an output below one differs (judge_final)
        extra = [*(direct[0].region.tensors if direct else ()), *selection_tensors(model)]
        try:
            rows, values, copied = final_check(ref, model, extra=extra or None,
                                               copies=[c[0] for c in copies], **kw)
        except (LabError, ValueError, KeyError) as e:  # the shared run failed: each alone
            logger.debug("the final run with the regions failed (%s)", e)
            self.waiting = [*copies, *([direct] if direct else [])]
            self.flush()
            rows, values, copied = final_check(ref, model, **kw)
            direct, copies = None, []
        seconds = time.perf_counter() - t0  # the regions' share goes to their steps below
        for item, got in zip(copies, copied):
            self._judge(item, got, copy=True)
        if direct is not None:
            # read from the final model: exact only when every earlier step was, and
            # judged alone after all when its own nodes feed it and that read fails
            self._judge(direct, values if self.exact else None,
                        recheck=direct[0].feeds_itself(model))
        t0 = time.perf_counter()
        # outputs below a selection that flipped a near-tie (TopK, NMS...) are not compared
        selections = judge_final(ref, model, rows, preset=self.opts.get("preset"),
                                 values=values, **kw)
        seconds += time.perf_counter() - t0
        last = self.last
        report = last._verification
        if isinstance(report, Report):
            report.rows.extend(rows)
            report.attrs["final_check"] = True
            if selections is not None and not selections.empty:
                report.attrs.setdefault("not_comparable", {}).update(
                    {r["ref_tensor"]: selections.not_comparable[r["tensor"]] for r in rows
                     if r["tensor"] in selections.not_comparable})
                report.attrs["selections"] = [*report.attrs.get("selections", []),
                                              *selections.to_dict()]
        last.verify_seconds = (last.verify_seconds or 0.0) + seconds
        compared = [float(r["max_abs"]) for r in rows if not flipped(r)]
        if rows:
            last.max_abs_err = max(compared) if compared else None
        note = selections.note([r["tensor"] for r in rows if flipped(r)]) \
            if selections is not None else None
        if note:
            last.notes.append(note)
        bad = [r for r in rows if not r["passed"]]
        if not bad:
            if compared or not note:
                last.notes.append("the preset's outputs match the original's"
                                  + (f" (max_abs {last.max_abs_err:.3g})"
                                     if last.max_abs_err is not None else ""))
            return
        if all((b["note"] or "").startswith(NOT_CHECKED) for b in bad):
            # the run was refused for want of memory: the outputs are unchecked, not wrong
            # (an audit under --memory-gb read "verification failed ... the differences added
            # up through the network" on a preset whose outputs match without the limit)
            last.notes.append(f"the preset's outputs were not checked: {bad[0]['note']}; "
                              "each step was checked on its own region (verify='full', or "
                              "more memory, checks the outputs)")
            if last.verify_passed is not False:
                last.verify_passed = None
            return
        r = bad[0]
        detail = r["note"] or f"max_abs {r['max_abs']:.3g} outside the {r['preset']} rule " \
            f"{r['rule']}"
        note = f"verification failed: the preset's output {r['tensor']!r} differs from the " \
            f"original's ({detail})"
        if last.verify_passed is not False and self.passed:
            note += ("; each rewritten node was within tolerance fed the original's values, "
                     "so the differences added up through the network"
                     + (" and over the steps" if self.regions > 1 else "")
                     + " (verify='full' checks each step on the whole model)")
            narrow = r["dtype"] if r["dtype"] in ("float16", "bfloat16") else \
                computed_precision(ref.model).get(r["ref_tensor"])
            if narrow:
                note += (f"; the outputs are computed in {narrow}: constants a step rewrote "
                         f"are rounded to {narrow} once more, and in a deep network that "
                         "rounding can add up past the rule (docs/transforms.md, known "
                         "limits); compare both with the float32 model to judge")
        last.notes.append(note)
        if last.verify_passed is not False:
            last.verify_passed = False
            last.first_failure = r["tensor"]
            if isinstance(report, Report):
                report.attrs.update(passed=False, first_failure=r["tensor"])


def apply(history: History, pass_name: str, matches: Sequence[str] | str | None = None,
          verify: bool | str | Mapping[str, Any] = True, *, _cache: dict | None = None,
          _record_noop: bool = True, _regions: _Regions | None = None,
          _load_check: bool = True, **params: Any) -> PassResult:
    """Apply a pass to all matches, or only to the chosen match ids, as a new version.

    The pass runs on a clone (the user's file and the previous versions stay as they were).
    When the model changed and ``verify`` is not False, the new version is compared with the
    previous one (:func:`onnx_lab.numerics.verify.verify`; for edits that change semantics
    the report shows the difference); with ``verify="region"`` only the region the pass
    rewrote runs, on the captured values at its boundary, then the outputs once
    (:mod:`onnx_lab.numerics.region`). ``result.verified_by`` says which check ran. The step
    is pushed on the history — also when nothing changed, with the reason.

    A verified step of a whole-model tool (onnxsim, onnxoptimizer, onnxslim; not
    onnxruntime's own levels, whose results onnxruntime advises loading at that level) is
    also loaded as a deployment loads it: onnxruntime at its default options (every graph
    optimization on), in a child process. When that load fails while the model before the
    step loads, the step fails (``verify_passed`` False, onnxruntime's message in the notes),
    as a step whose numbers differ does: ``lab.undo()`` goes back. A preset checks its last
    version so (:func:`apply_preset`); a lone pass's step is checked by the save.

    Args:
        history: the versions (``Lab.apply`` passes its own).
        pass_name: a registered pass (see :func:`onnx_lab.transforms.available`).
        matches: match ids from ``lab.patterns()`` (None: all matches of the pass).
        verify: True, False, ``"full"``, ``"region"`` or a dict of options (feeds, atol,
            rtol, seed, max_bytes, intermediates, providers, mode: see
            :data:`VERIFY_MODES`).
        **params: the pass's parameters (checked: PassError on unknown names or wrong types).

    Returns:
        The PassResult, with ``verification``, ``verify_passed``, ``max_abs_err`` and
        ``first_failure`` filled when verified.

    Raises:
        UnknownNameError: unknown pass or match id. PassError: bad parameters, failing tool.
        DimError: verification needs values for symbolic dims.

    Example:
        >>> r = lab.apply("fuse_conv_bn", matches=["fuse_conv_bn:/stem/conv/Conv"])
    """
    with paused():  # a step's graph objects are no garbage: see core._gc
        opts = verify_options(verify)
        mode = verify_mode(verify) if opts is not None else "full"
        kind = pass_kind(pass_name)
        # (a pass's lone step is left to the save's check: a default-options session of the
        # whole model per click, BERT-base ~1-2 s, is a tool's price, not a pass's)
        load_check = _load_check and opts is not None and kind == "tool" \
            and not pass_name.startswith("ort:")
        if load_check:
            warm_default_load()  # its child imports onnxruntime while the step runs
        before, dims, shapes = history.model, dict(history.dims), dict(history.shapes)
        result = run_pass(before, pass_name, matches, model_dims=dims, model_shapes=shapes,
                          **params)
        if result.modified and shapes:
            shapes = _renamed_input_shapes(before, result.model, shapes)
        preserving, preset = pass_traits(pass_name)
        if result.modified and kind == "edit":
            dims = {**_carried_dims(before, result.model, dims), **dims}
        if preset is not None and opts is not None:
            opts.setdefault("preset", preset)  # renames, outputs: bit-identical
        lone = None
        if mode == "region" and _regions is None:
            _regions = lone = _Regions()  # a one-step preset
        if mode == "full":
            _regions = None
        if result.modified and opts is not None:
            t0 = time.perf_counter()
            report, why = None, None
            if _regions is not None:
                report, why = _regions.report(before, result, kind, preserving, opts, dims,
                                              shapes)
            if report is None:
                try:
                    # Inputs sized by the Lab's dims, which the new version must take (a tool
                    # that fixed the input shapes), except where the step edits shapes.
                    report = report_of(before, result.model, result, dims=dims, shapes=shapes,
                                       cache=_cache, reference_shapes=kind != "edit", **opts)
                except RuntimeLoadError as e:  # the reference itself does not run
                    raise RuntimeLoadError(f"Cannot verify {pass_name}: the model before it "
                                           f"does not run{_at_new_sizes(before, result)}, so "
                                           f"there is nothing to compare with ({e.problem})",
                                           fix=(e.fix or "") + " Inputs it runs on can be "
                                           "given: verify={'feeds': {name: array}} or a .npz "
                                           "path (--feeds); or apply with verify=False "
                                           "(--no-verify).") from e
                if why is not None:
                    report.attrs["region_fallback"] = why
                    result.notes.append(f"verified on the whole model: {why}")
            if report is _PENDING:  # its region runs later (_Regions.flush)
                result.verify_seconds = time.perf_counter() - t0
            else:
                fill_result(result, report, time.perf_counter() - t0)
                result.verified_by = report.attrs.get("verified_by", "full")
                if _regions is not None:
                    _regions.advance(result)
            if kind == "edit" and result.verify_passed is False \
                    and did_not_run(report_rows(result)) and opts.get("feeds") is None \
                    and _same_inputs(before, result.model):
                # onnx's checker let the edit through, onnxruntime cannot run the result on
                # the inputs the model before ran on: a version nothing can be compared with,
                # and every later edit would be refused ("the model before it does not run").
                # Refused like a checker failure. (An edit of the inputs themselves, or feeds
                # the user gave, may be what does not fit: kept as a failed step.)
                note = next(str(r.get("note") or "") for r in report_rows(result)
                            if str(r.get("note") or "").startswith(NOT_RUN))
                why = note.split(": ", 1)[-1][:400]
                if pass_name == "convert_opset":
                    # no value of the user's made it: onnx's version converter wrote a node
                    # the target opset does not define (ReduceMean keeping opset 18's
                    # noop_with_empty_axes at 17)
                    fix = ("The model is unchanged; onnx.version_converter's result is not "
                           "valid at that opset: try another target, or re-export the model "
                           "at that opset.")
                else:
                    fix = ("The model is unchanged; pass values the op accepts (the op's "
                           "definition says which). verify=False (--no-verify) keeps an edit "
                           "without running it.")
                raise PassError(f"{pass_name} refused: the edited model does not run: {why}",
                                fix=fix)
            if not preserving:
                _expected_change(result)
            if load_check:
                _default_load_check(before, result)
            if _cache is not None:
                # Only the new version can be the next step's reference: drop older captures
                # (BERT-base at sequence 128: 320 MB per version).
                for k in [k for k, v in _cache.items() if v[0] is not result.model]:
                    del _cache[k]
            if result.verify_passed is False:
                logger.warning("%s: verification failed%s", pass_name, failed_where(result))
        # An edit that changes nothing (an attribute set to the value it holds) is no step:
        # undo would step over it. A pass that found nothing is recorded, as asked.
        if result.modified or (_record_noop and kind != "edit"):
            new_dims, new_shapes = fit_dims(result.model, dims, shapes)
            history.push(result, dims=new_dims, shapes=new_shapes)
        if lone is not None:
            lone.finish(result.model)
        return result


def _default_load_check(before: Any, result: Any) -> None:
    """Fail a tool's step whose result onnxruntime cannot load at its default options while it
    loads the model before (verification runs with optimizations off: onnxsim's silero-vad
    passed, and every deployment's session refused it). onnxruntime's own levels (``ort:*``)
    are not asked: onnxruntime advises loading a model it optimized at that level."""
    problem = default_load_regression(result.model, before)
    if problem is None:
        return
    result.verify_passed = False
    result.notes.append(f"verification failed: the new model does not load: {problem}. "
                        "Keep the version before it (lab.undo()), or load the result with "
                        "SessionOptions.graph_optimization_level = ORT_DISABLE_ALL")


def _keep_loading(history: History, start: Any, names: Sequence[str],
                  out: list[PassResult], verify: Any, params: Mapping[str, Any]
                  ) -> list[PassResult]:
    """A preset's last version must load at onnxruntime's default options when its first
    did: one such load of the last version (a child process; the first version is asked
    only when it fails), and on a failure the steps are bisected for the first version
    that does not load (each version asked once, cached on it). That step is dropped: the
    history goes back to the version before it and the preset's passes after it run again
    from there (which checks its own last version in turn). Returns the results, the
    dropped step's with ``dropped`` set and a note naming the pass and onnxruntime's
    message."""
    if history.model is start.model:
        return out
    problem = default_load_regression(history.model, start.model)
    if problem is None:
        return out
    made = history.versions[start.step + 1:history.current + 1]
    lo, hi = -1, len(made) - 1  # made[hi] fails; made[lo] (start at -1) loads
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if default_load_problem(made[mid].model) is None:
            lo = mid
        else:
            hi = mid
    bad = made[hi]
    j = next((k for k, r in enumerate(out) if r is bad.result), None)
    if j is None:  # not a step of this preset (cannot happen): leave it to the save
        return out
    why = default_load_problem(bad.model) or problem
    back = bad.step - 1
    history.checkout(back)
    history.drop_redo()
    r = bad.result
    r.dropped = (f"onnxruntime at its default options (graph optimizations on, as a "
                 f"deployment loads it) does not load the model after it, while it loads "
                 f"the one before: {why}")
    rest = list(names[j + 1:])
    r.notes.append(f"dropped: {r.dropped}. The preset went on without it from step {back}"
                   + (f" (the {len(rest)} passes after it ran again)" if rest else "")
                   + (f"; lab.apply({r.name!r}) alone would fail the same way"
                      if pass_kind(r.name) == "tool" and not r.name.startswith("ort:") else
                      # a pass's lone step is not loaded at default options: the save is
                      f"; lab.apply({r.name!r}) alone makes the same version, which "
                      "lab.save() refuses"))
    logger.warning("%s: dropped from the preset: %s", r.name, why)
    if not rest:
        return out[:j + 1]
    again = apply_preset(history, rest, verify, progress=False,
                         params={k: v for k, v in params.items() if k in rest})
    return [*out[:j + 1], *again]


def _renamed_input_shapes(before: Any, after: Any, shapes: dict[str, list[int]]
                          ) -> dict[str, list[int]]:
    """``shapes`` (input -> shape, given for unnamed dims: every skl2onnx model) with the
    shape of each input the step renamed under its new name too (same position, same rank):
    the new version's verification and the history's shapes read them by name. A shape the
    step fixed in the model to other sizes (``set_input_shape``) is dropped: the model now
    says it."""
    b_in = list(fed_inputs(before.graph).values())
    a_in = list(fed_inputs(after.graph).values())
    out = dict(shapes)
    for a in a_in:
        dims = list(a.shape) if a.shape is not None else None
        if a.name in out and dims is not None and all(isinstance(d, int) for d in dims) \
                and [int(d) for d in dims] != list(out[a.name]):
            del out[a.name]
    if len(b_in) != len(a_in):
        return out
    a_names, b_names = {v.name for v in a_in}, {v.name for v in b_in}
    for b, a in zip(b_in, a_in):
        if b.name in shapes and b.name not in a_names and a.name not in b_names \
                and a.name not in out and a.shape is not None \
                and len(a.shape) == len(shapes[b.name]):
            out[a.name] = list(shapes[b.name])
    return out


def _carried_dims(before: Any, after: Any, dims: Mapping[str, int]) -> dict[str, int]:
    """Sizes for the symbolic dims an edit gave an input (``set_input_shape(x, [1,
    'sequence'])`` where the input said ``seq``, sized 8): the size the input had at that
    position before, so the edited model runs on the same inputs (the Editor had no field for
    a new dim's size, and refused the edit with "Unresolved dims")."""
    old = {v.name: v for v in before.graph.inputs}
    out: dict[str, int] = {}
    for v in after.graph.inputs:
        o = old.get(v.name)
        if o is None or o.shape is None or v.shape is None or len(o.shape) != len(v.shape):
            continue
        for od, nd in zip(o.shape, v.shape):
            name = getattr(nd, "value", nd)
            was = getattr(od, "value", od)
            if not isinstance(name, str) or name in dims or name in out:
                continue
            size = was if isinstance(was, int) else dims.get(was) if isinstance(was, str) \
                else None
            if isinstance(size, int):
                out[name] = size
    return out


def _same_inputs(before: Any, after: Any) -> bool:
    """Whether ``after`` takes the inputs ``before`` takes (names, dtypes, shapes)."""
    def sig(m: Any) -> list:
        return [(v.name, v.dtype, str(v.shape)) for v in m.ir.graph.inputs]
    return sig(before) == sig(after)


def _expected_change(result: PassResult) -> None:
    """For an edit meant to change values (an attribute, a weight, a removed node): a
    difference is what the user asked for, reported as such, not as a failed verification.

    ``outputs_changed`` is judged on the model outputs alone; a change only in intermediate
    tensors (outputs within tolerance) is said so."""
    err = result.max_abs_err
    if result.verify_passed:
        result.outputs_changed = False
        result.notes.append("outputs unchanged within tolerance"
                            + (f" (max_abs {err:.3g})" if err is not None else ""))
        return
    rows = report_rows(result)
    if did_not_run(rows):
        return  # the edit broke the model (onnxruntime cannot run it): a failure, not a change
    outputs = [r for r in rows if r.get("match") == "output"]
    result.notes[:] = [n for n in result.notes if not n.startswith("verification failed")]
    result.verify_passed = None  # first_failure stays: where the values start to differ
    where = f", first at {result.first_failure!r}" if result.first_failure else ""
    if outputs and all(bool(r.get("passed")) for r in outputs):
        result.outputs_changed = False
        result.notes.append("outputs unchanged within tolerance"
                            + (f" (max_abs {err:.3g})" if err is not None else "")
                            + f"; intermediate values changed (expected for this edit){where}")
        return
    result.outputs_changed = True
    # an inf difference: one side NaN or inf where the other is not (an edit to
    # epsilon=-0.001 made every output NaN; one to a Selu's gamma may make them finite again)
    broken = [str(r["tensor"]) for r in outputs
              if r.get("max_abs") is not None and not math.isfinite(float(r["max_abs"]))]
    result.notes.append("outputs changed (expected for this edit): max_abs "
                        + (f"{err:.3g}" if err is not None else "n/a") + where
                        + (f"; NaN or inf in {', '.join(broken[:3])} on one side only (the "
                           "model before or the edited one)" if broken else ""))


def apply_preset(history: History, preset: str | Sequence[str] = "safe",
                 verify: bool | str | Mapping[str, Any] = True, *, progress: Any = None,
                 params: Mapping[str, Mapping[str, Any]] | None = None) -> list[PassResult]:
    """Apply the passes of a preset in order, each as its own verified step.

    By default (``verify=True``) the model before the preset runs once with every
    intermediate tensor captured; each step that changed the model is verified by running
    only the region it rewrote, fed with the captured values at the region's boundary, and
    compared with the captured values (:mod:`onnx_lab.numerics.region`); a step that changed
    no value is not run (``verified_by="unchanged"``); a region that cannot be cut cleanly is
    checked on the whole model (``"full"``, the reason in the notes); the preset's outputs
    are compared with the original's once at the end (in the last verified step's report,
    rows ``match == "preset_output"``). ``verify="full"`` checks every step on the whole model
    against the previous version, reusing each step's capture as the next one's reference.
    Only passes that changed the model become history steps; the returned list holds every
    pass's result (with the reason when it did nothing).

    When verifying, the preset's last version is also loaded as a deployment loads it
    (onnxruntime at its default options, in a child process), once; when it does not load
    while the version the preset started from does, the steps are bisected for the first
    one whose version does not load, that step is dropped (``result.dropped`` says why, the
    notes name onnxruntime's message) and the passes after it run again without it. The
    preset so never leaves a version a default session refuses where it started from one
    that loads.

    Args:
        preset: a preset name (``"safe"``) or a list of pass names.
        verify: as :func:`apply`'s.
        progress: None (tqdm when interactive), False, or a callable(done, total, label):
            one step per pass, labelled with the pass about to run.
        params: pass name -> that pass's parameters, e.g. ``{"fold_constants":
            {"max_growth_bytes": 1 << 30}}`` (checked as :func:`apply`'s; a pass the preset
            does not run is an error).

    Example:
        >>> [(r.name, r.verified_by) for r in lab.apply_preset("safe") if r.modified]
    """
    names = preset_passes(preset)
    if params is not None and not isinstance(params, Mapping):  # dict('x'): a ValueError
        raise PassError(f"params is {type(params).__name__}, not a mapping of pass names to "
                        "their parameters.", fix="Write params={'fold_constants': "
                        "{'max_growth_bytes': 1 << 30}}.")
    params = dict(params or {})
    for name, p in params.items():
        if name not in names:
            raise unknown_name("pass of the preset", name, names,
                               fix="Give parameters to the passes it runs: "
                               f"{', '.join(dict.fromkeys(names))}.")
        if not isinstance(p, Mapping):
            raise PassError(f"params[{name!r}] is {type(p).__name__}, not a mapping of "
                            "parameter names to values.",
                            fix=f"Write params={{{name!r}: {{'name': value}}}}.")
    cache: dict = {}
    opts = verify_options(verify)
    regions = _Regions() if opts is not None and verify_mode(verify) != "full" else None
    out: list[PassResult] = []
    start = history.version
    if opts is not None:
        warm_default_load()  # the final load check's child starts while the passes run
    with paused(), Progress(progress, len(names), f"preset: {names[0] if names else ''}") as bar:
        # a step's graph objects are no garbage: see core._gc
        for k, name in enumerate(names):
            out.append(apply(history, name, None, verify, _cache=cache, _record_noop=False,
                             _regions=regions, _load_check=False, **params.get(name, {})))
            bar.step(f"preset: {names[k + 1]}" if k + 1 < len(names) else "preset: done")
        if opts is not None and regions is not None and history.model is not start.model:
            # the final load check's question goes to its child first: onnxruntime there
            # loads the last version while this process runs the final check
            with default_load_ahead(history.model):
                regions.finish(history.model)
        elif regions is not None:
            regions.finish(history.model)
        if opts is not None:
            out = _keep_loading(history, start, names, out, verify, params)
    return out


def extract(history: History, inputs: Sequence[str] | None = None,
            outputs: Sequence[str] | None = None, nodes: Sequence[str] | None = None,
            verify: bool | Mapping[str, Any] = True) -> History:
    """A new history whose step 0 is the subgraph of ``history``'s current model.

    See :func:`onnx_lab.transforms.extract.extract_model` for the arguments. With ``verify``
    (True or a dict of feeds, atol, rtol, seed), the full model runs on seeded inputs, the
    captured boundary tensors are fed to the subgraph and its outputs compared
    (:func:`onnx_lab.numerics.verify.verify_extract`); the report is step 0's verification.
    """
    opts = verify_options(verify)
    model, dims, shapes = history.model, history.dims, history.shapes
    result, sub_dims, sub_shapes = extract_model(model, inputs, outputs, nodes, dims=dims,
                                                 shapes=shapes)
    ins, outs = result.params["inputs"], result.params["outputs"]
    if opts is not None:
        # the subgraph's outputs only: verify={...} takes the options that judge those
        check_keywords("extract(verify={...})", opts,
                       [k for k in keyword_names(verify_extract) if k in VERIFY_OPTIONS])
        tv = time.perf_counter()
        report = verify_extract(model, result.model, ins, outs, dims=dims, shapes=shapes,
                                **opts)
        fill_result(result, report, time.perf_counter() - tv)
    src = str(history.source_path) if history.source_path else "an in-memory model"
    return History(result.model, dims=sub_dims, shapes=sub_shapes, result=result,
                   derived_from=f"subgraph extracted from {src} ({len(ins)} inputs, "
                   f"{len(outs)} outputs)", source_path=history.source_path)


def _generation_speed(model: Any, prompt: list, new_tokens: int, providers: list,
                      dims: Mapping[str, int]):
    """A weight-only trial's decode speed by the generation profiler (2 timed generations
    after a warm-up, no ORT trace)."""
    # on use: `import onnx_lab` loads steps, not these
    from onnx_lab.numerics.weight_only import Speed
    from onnx_lab.profiling.generate import profile_generation

    g = profile_generation(model, prompt=prompt, new_tokens=new_tokens, runs=2, warmup=1,
                           profile_runs=0, providers=providers, dims=dict(dims),
                           progress=False)
    return Speed(float(g.tokens_per_s), float(g.decode_ms_per_token))


class Stored:
    """The source the int8 quantizers get (:func:`weights_stored`): ``.model``/``.dims``/
    ``.shapes`` as :func:`~onnx_lab.core.source.resolve` reads them, and the sentence the
    result's ``derived_from`` ends with."""

    def __init__(self, model: LabModel, dims: Mapping[str, int],
                 shapes: Mapping[str, Sequence[int]], note: str = "",
                 folded: Sequence[str] = ()) -> None:
        self.model, self.dims, self.shapes, self.note = model, dims, shapes, note
        #: the source's node ids the fold replaced by stored tensors (a weight's Transpose)
        self.folded = frozenset(folded)

    def unfolded(self, ids: Any) -> Any:
        """``ids`` (``nodes_to_exclude``, ``keep``: node ids of the source) without the
        nodes the fold stored: they compute weights from stored tensors and stay in float
        as stored tensors. They read "Unknown node id" from the copy, though ``lab.nodes``
        lists them (every node of a layer, by scope, holds its weight's Transpose in a
        dynamo export with ``optimize=False``). Anything else as it is (checked later)."""
        if not self.folded or ids is None:
            return ids
        ids = [ids] if isinstance(ids, str) else ids
        try:
            given = list(ids)
        except TypeError:
            return ids
        out = [n for n in given if not (isinstance(n, str) and n in self.folded)]
        if len(out) < len(given):
            logger.info("node ids that compute weights folded into stored tensors (they stay "
                        "in float): %s", [n for n in given if n not in out])
        return out


def weights_stored(source: Any) -> Stored:
    """``source`` with the MatMul/Conv/Gemm weights (and biases) that nodes compute from
    stored tensors alone folded into stored tensors, on a copy: onnxruntime's quantizers take
    stored weights only (:func:`onnx_lab.numerics.quantize.computed_weights`): the dynamic one
    stopped at the first Conv with a bias (7 of the onnx package's 9 light CNNs, whose weights
    are ConstantOfShape fills) and quantized the other weights at every run, stored in float.
    ``fold_constants`` runs on those weights' matches alone, within the run memory limit;
    the nodes are named by their ids first, so the node ids of the copy are the source's
    (``nodes_to_exclude``, the ids a refusal names, an int8 plan's ``kept``). The source when
    there is none. The int8 conversions (``onnx_lab.to_int8_dynamic``, ``to_int8_static``)
    and the int8 precision search start from it, so a plan's trial is the conversion
    ``to_int8_static`` gives with the plan's exclusions."""
    model, dims, shapes = resolve(source)
    if not computed_weights(model):
        return Stored(model, dims, shapes)
    model = named_by_id(model)
    weights = computed_weights(model)
    wanted = {id(v) for v in weights}
    ids = [m.match_id for m in get_pass("fold_constants").find(model)
           if any(id(o) in wanted for o in m.data["frontier"])]
    if not ids:  # (an Identity of a weight: fold_constants leaves it to eliminate_identity)
        return Stored(model, dims, shapes)
    # the weights' own bytes are the growth: bounded by what a run may take, not by the
    # pass's 16 MB default (light DenseNet-121's 32 MB of ConstantOfShape fills)
    limit = memory_limit()[0]
    r = run_pass(model, "fold_constants", ids, model_dims=dims, model_shapes=shapes,
                 max_growth_bytes=int(limit) if limit is not None else 1 << 62)
    if not r.modified:
        logger.warning("weights computed by nodes could not be folded for the quantizer: %s",
                       "; ".join(r.notes) or r.reason)
        return Stored(model, dims, shapes)
    left = computed_weights(r.model)
    if left:
        logger.warning("%d weight(s) computed by nodes could not be folded for the quantizer "
                       "(%s): %s", len(left), ", ".join(repr(v.name) for v in left[:3]),
                       "; ".join(n for n in r.notes if "refused" in n or "skipped" in n))
    done = len(weights) - len(left)
    folded = [nid for nid in model.index.entries if nid not in r.model.index.entries]
    first = next((v.name for v in weights if v.name), "")
    note = (f" (its {done} weight and bias tensor(s) that nodes compute from stored tensors, "
            f"such as {first!r}, folded first: onnxruntime's quantizer takes stored weights "
            "only)")
    logger.info("int8 quantization: %d computed weight(s) folded first", done)
    return Stored(r.model, dims, shapes, note, folded)


def find_precision(history: History, target: str = "fp16", feeds: Any = None,
                   verify: bool | Mapping[str, Any] = True, **kw: Any):
    """Search which nodes to keep in higher precision and push the converted model as a step.

    Runs :func:`onnx_lab.numerics.precision.find_precision` on the current version, then
    verifies the converted model against it like any step (outputs only, on the search's
    feeds, with the target's preset and the search's atol/rtol) and pushes it on the history
    (pass ``precision:<target>``, params ``kept``). Returns the
    :class:`~onnx_lab.numerics.precision.PrecisionPlan`, with ``plan.result`` the PassResult.

    Example:
        >>> plan = steps.find_precision(lab.version_history, "fp16", atol=1e-3, rtol=1e-2)
    """
    # each target's own search, one name
    from onnx_lab.numerics.precision import find_precision as search

    if target == "int4":  # weight-only (MatMulNBits) plans take LLM keywords (min_top1...)
        from onnx_lab.numerics.weight_only import find_weight_only as search

        kw.setdefault("speed", _generation_speed)
        if "tokens" in kw:  # find_weight_only's name for what feeds carries here
            if feeds is not None:
                raise InputError("find_precision('int4') takes the token ids once: as tokens= "
                                 "or as feeds, not both.", fix="Drop feeds (tokens=[...]).")
            feeds = kw.pop("tokens")
    takes = keyword_names(search)
    check_keywords(f"find_precision({target!r})", kw, takes)
    opts = verify_options(verify)
    with paused():  # a step's graph objects are no garbage: see core._gc
        before, dims, shapes = history.model, dict(history.dims), dict(history.shapes)
        kw.setdefault("dims", dims)
        if "shapes" in takes:  # an LLM's shapes follow from its dims
            kw.setdefault("shapes", shapes)
        stored = weights_stored(history) if target == "int8" else None
        if stored is not None and kw.get("keep") is not None:
            kw["keep"] = stored.unfolded(kw["keep"])
        plan = search(history if stored is None else stored, target, feeds, **kw)
        n_before, n_after = len(before.index), len(plan.model.index)
        result = PassResult(
            name=f"precision:{target}",
            params={"target": target, "kept": list(plan.kept),
                    "tolerance": plan.tolerance.describe()},
            modified=True, nodes_before=n_before, nodes_after=n_after, provenance={},
            removed=[], reason=None, seconds=plan.seconds,
            notes=[plan.summary_text()], model=plan.model)
        if stored is not None and stored.note:
            result.notes.append(stored.note.strip(" ()"))
        if opts is not None:
            opts = dict(opts)
            opts.setdefault("feeds", plan.feeds)
            opts.setdefault("intermediates", False)
            opts.setdefault("preset", target)
            if getattr(plan.tolerance, "metric", None) == "elementwise":
                opts.setdefault("atol", plan.tolerance.atol)
                opts.setdefault("rtol", plan.tolerance.rtol)
            t0 = time.perf_counter()
            report = report_of(before, plan.model, result, dims=dims, shapes=shapes, **opts)
            fill_result(result, report, time.perf_counter() - t0)
        new_dims, new_shapes = fit_dims(result.model, dims, shapes)
        history.push(result, dims=new_dims, shapes=new_shapes)
        plan.result = result
        return plan


def _at_new_sizes(before: Any, result: PassResult) -> str:
    """`` at the sizes this step sets (x [0, 8])`` for a step that changed input shapes: its
    reference runs at them (a batch of 0 BERT's Reshape refuses read as if the model before
    it were broken), else ``""``."""
    old = {v.name: shape_tuple(v.shape) for v in before.graph.inputs}
    new = [f"{v.name} {list(shape_tuple(v.shape) or [])}" for v in result.model.graph.inputs
           if v.name in old and shape_tuple(v.shape) != old[v.name]]
    return f" at the sizes this step sets ({', '.join(new)})" if new else ""

