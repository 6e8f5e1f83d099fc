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
import time
from collections.abc import Mapping, Sequence
from typing import Any

from onnx_lab._progress import Progress
from onnx_lab.core._gc import paused
from onnx_lab.core.history import History
from onnx_lab.core.shapes import fit_dims
from onnx_lab.errors import InputError, RuntimeLoadError, check_keywords, keyword_names
from onnx_lab.numerics.verify import fill_result, report_of, verify_extract
from onnx_lab.transforms.apply import preset_passes, run_pass
from onnx_lab.transforms.base import PassResult, pass_kind, pass_traits
from onnx_lab.transforms.extract import extract_model

logger = logging.getLogger(__name__)

__all__ = ["apply", "apply_preset", "extract", "find_precision", "VERIFY_OPTIONS"]

#: Keys accepted in ``verify={...}``.
VERIFY_OPTIONS = ("feeds", "atol", "rtol", "seed", "max_bytes", "intermediates", "providers",
                  "preset")


def verify_options(verify_arg: bool | Mapping[str, Any]) -> dict[str, Any] | None:
    """The options of ``verify=`` (None: do not verify); InputError on unknown keys."""
    if verify_arg is False or verify_arg is None:
        return None
    if verify_arg is True:
        return {}
    if isinstance(verify_arg, Mapping):
        bad = [k for k in verify_arg if k not in VERIFY_OPTIONS]
        if bad:
            raise InputError(f"Unknown verification option(s) {bad}.",
                             fix=f"Use any of {', '.join(VERIFY_OPTIONS)}.")
        return dict(verify_arg)
    raise InputError(f"verify must be True, False or a dict of options, got {verify_arg!r}.",
                     fix="Pass verify=True (default), verify=False or verify={'atol': 1e-3}.")


def apply(history: History, pass_name: str, matches: Sequence[str] | str | None = None,
          verify: bool | Mapping[str, Any] = True, *, _cache: dict | None = None,
          _record_noop: bool = True, **params: Any) -> PassResult:
    """Apply a pass to all matches, or only to the chosen match ids, as a new version.

    The pass runs on a clone (the user's file and the previous versions stay as they were).
    When the model changed and ``verify`` is not False, the new version is compared with the
    previous one (:func:`onnx_lab.numerics.verify.verify`; for edits that change semantics
    the report shows the difference). The step is pushed on the history — also when nothing
    changed, with the reason.

    Args:
        history: the versions (``Lab.apply`` passes its own).
        pass_name: a registered pass (see :func:`onnx_lab.transforms.available`).
        matches: match ids from ``lab.patterns()`` (None: all matches of the pass).
        verify: True, False, or a dict of options (feeds, atol, rtol, seed, max_bytes,
            intermediates, providers).
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
        before, dims, shapes = history.model, dict(history.dims), dict(history.shapes)
        result = run_pass(before, pass_name, matches, model_dims=dims, model_shapes=shapes,
                          **params)
        preserving, preset = pass_traits(pass_name)
        if preset is not None and opts is not None:
            opts.setdefault("preset", preset)  # renames, outputs: bit-identical
        if result.modified and opts is not None:
            t0 = time.perf_counter()
            try:
                # Inputs sized by the Lab's dims, which the new version must take (a tool
                # that fixed the input shapes), except where the step edits shapes.
                report = report_of(before, result.model, result, dims=dims, shapes=shapes,
                                   cache=_cache, reference_shapes=pass_kind(pass_name) != "edit",
                                   **opts)
            except RuntimeLoadError as e:  # the reference itself does not run
                raise RuntimeLoadError(f"Cannot verify {pass_name}: {e.problem}",
                                       fix=(e.fix or "") + " Or apply with verify=False "
                                       "(--no-verify).") from e
            fill_result(result, report, time.perf_counter() - t0)
            if not preserving:
                _expected_change(result)
            if _cache is not None:
                # Only the new version can be the next step's reference: drop older captures
                # (BERT-base at sequence 128: 320 MB per version).
                for k in [k for k, v in _cache.items() if v[0] is not result.model]:
                    del _cache[k]
            if result.verify_passed is False:
                logger.warning("%s: verification failed at %s", pass_name, result.first_failure)
        if result.modified or _record_noop:
            new_dims, new_shapes = fit_dims(result.model, dims, shapes)
            history.push(result, dims=new_dims, shapes=new_shapes)
        return result


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
    report = result._verification
    rows = report.rows if hasattr(report, "rows") else report.to_dict("records")
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
    result.notes.append("outputs changed (expected for this edit): max_abs "
                        + (f"{err:.3g}" if err is not None else "n/a") + where)


def apply_preset(history: History, preset: str | Sequence[str] = "safe",
                 verify: bool | Mapping[str, Any] = True, *, progress: Any = None
                 ) -> list[PassResult]:
    """Apply the passes of a preset in order, each as its own verified step.

    Verification reuses the captured tensors of each step as the reference of the next, so
    the model runs about once per modifying step. Only passes that changed the model become
    history steps; the returned list holds every pass's result (with the reason when it did
    nothing).

    Args:
        preset: a preset name (``"safe"``) or a list of pass names.
        progress: None (tqdm when interactive), False, or a callable(done, total, label):
            one step per pass, labelled with the pass about to run.

    Example:
        >>> [r.name for r in lab.apply_preset("safe") if r.modified]
    """
    names = preset_passes(preset)
    cache: dict = {}
    out: list[PassResult] = []
    with paused(), Progress(progress, len(names), f"preset: {names[0] if names else ''}") as bar:
        # a step's graph objects are no garbage: see core._gc
        for k, name in enumerate(names):
            out.append(apply(history, name, None, verify, _cache=cache, _record_noop=False))
            bar.step(f"preset: {names[k + 1]}" if k + 1 < len(names) else "preset: done")
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
    takes = keyword_names(search)
    check_keywords(f"find_precision({target!r})", kw, takes)
    opts = verify_options(verify)
    with paused():  # a step's graph objects are no garbage: see core._gc
        before, dims, shapes = history.model, dict(history.dims), dict(history.shapes)
        kw.setdefault("dims", dims)
        if "shapes" in takes:  # an LLM's shapes follow from its dims
            kw.setdefault("shapes", shapes)
        plan = search(history, target, feeds, **kw)
        n_before, n_after = len(before.index), len(plan.model.index)
        result = PassResult(
            name=f"precision:{target}",
            params={"target": target, "kept": list(plan.kept),
                    "tolerance": plan.tolerance.describe()},
            modified=True, nodes_before=n_before, nodes_after=n_after, provenance={},
            removed=[], reason=None, seconds=plan.seconds,
            notes=[plan.summary_text()], model=plan.model)
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
