"""Applying a pass to a Lab: run it on a clone, verify the new version, record it in history.

Example:
    >>> lab = onnx_lab.open("sample:convnet")
    >>> r = lab.apply("fuse_conv_bn")          # all matches, verified
    >>> r.verify_passed, r.first_failure
    >>> lab.apply_preset("safe")
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from onnx_lab.errors import InputError, PassError, RuntimeLoadError, unknown_name
from onnx_lab.transforms.base import PassResult, get_pass
from onnx_lab.transforms.verify import fill_result
from onnx_lab.transforms.verify import report_of as _verify

if TYPE_CHECKING:
    from onnx_lab.lab import Lab

logger = logging.getLogger(__name__)

__all__ = ["apply", "apply_preset", "run_pass", "VERIFY_OPTIONS"]

#: Keys accepted in ``verify={...}``.
VERIFY_OPTIONS = ("feeds", "atol", "rtol", "seed", "max_bytes", "intermediates", "providers")


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cycle collector for one step or preset (restored after, also on errors).

    A step allocates tens of thousands of graph objects (a clone, its index, capture tables),
    which triggers full collections over every tracked object of the process (~170,000 with
    onnx_ir, sympy and pandas imported): 0.07 s of BERT-base's ``safe`` preset, for no garbage
    (old versions stay referenced by the history; tensors are freed by reference counting).
    Cycles made meanwhile are collected at the next collection after the step.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _verify_options(verify_arg: bool | Mapping[str, Any]) -> dict[str, Any] | None:
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


def run_pass(lab: Lab, pass_name: str, matches: Sequence[str] | str | None = None,
             **params: Any) -> PassResult:
    """Run pass ``pass_name`` on the Lab's current model; the Lab is not changed."""
    if isinstance(matches, str):
        matches = [matches]
    if matches is not None and not all(isinstance(m, str) for m in matches):
        raise InputError(f"matches must be match ids (str), got {matches!r}.",
                         fix="Pass ids from lab.patterns().match_id.")
    p = get_pass(pass_name, matches=matches, **params)
    # Whole-model tools (onnxsim) read the Lab's dims/shapes for their input shapes.
    p.lab_dims = dict(lab.dims)  # type: ignore[attr-defined]
    p.lab_shapes = {k: list(v) for k, v in lab.shapes.items()}  # type: ignore[attr-defined]
    return p.run(lab.model)


def apply(lab: Lab, pass_name: str, matches: Sequence[str] | str | None = None,
          verify: bool | Mapping[str, Any] = True, *, _cache: dict | None = None,
          _record_noop: bool = True, **params: Any) -> PassResult:
    """Apply a pass to all matches, or only to the chosen match ids, as a new version.

    The pass runs on a clone (the user's file and the previous versions stay as they were).
    When the model changed and ``verify`` is not False, the new version is compared with the
    previous one (:func:`onnx_lab.transforms.verify.verify`; for edits that change semantics
    the report shows the difference). The step is pushed to ``lab.history`` — also when
    nothing changed, with the reason.

    Args:
        lab: the Lab.
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
    with _cyclic_gc_paused():
        return _apply(lab, pass_name, matches, verify, _cache=_cache,
                      _record_noop=_record_noop, **params)


def _apply(lab: Lab, pass_name: str, matches: Sequence[str] | str | None,
           verify: bool | Mapping[str, Any], *, _cache: dict | None,
           _record_noop: bool, **params: Any) -> PassResult:
    opts = _verify_options(verify)
    before = lab.model
    result = run_pass(lab, pass_name, matches, **params)
    dims = dict(lab.dims)
    shapes = {k: list(v) for k, v in lab.shapes.items()}
    if result.modified and opts is not None:
        t0 = time.perf_counter()
        try:
            report = _verify(before, result.model, result, dims=lab.dims, shapes=lab.shapes,
                             cache=_cache, **opts)
        except RuntimeLoadError as e:  # the reference itself does not run
            raise RuntimeLoadError(f"Cannot verify {pass_name}: {e.problem}",
                                   fix=(e.fix or "") + " Or apply with verify=False "
                                   "(--no-verify).") from e
        fill_result(result, report, time.perf_counter() - t0)
        if _cache is not None:
            # Only the new version can be the next step's reference: drop older captures
            # (BERT-base at sequence 128: 320 MB per version).
            for k in [k for k, v in _cache.items() if v[0] is not result.model]:
                del _cache[k]
        if not result.verify_passed:
            logger.warning("%s: verification failed at %s", pass_name, result.first_failure)
    if result.modified or _record_noop:
        _push(lab, result, dims, shapes)
    return result


def _push(lab: Lab, result: PassResult, dims: Mapping[str, int],
          shapes: Mapping[str, Sequence[int]]) -> None:
    from onnx_lab.transforms.verify import _fit

    dims, shapes = _fit(result.model, dims, shapes)
    lab._history.push(result, dims=dims, shapes=shapes)
    lab._set_model(result.model)
    lab.dims = dict(dims)
    lab.shapes = {k: list(v) for k, v in shapes.items()}


def apply_preset(lab: Lab, preset: str | Sequence[str] = "safe",
                 verify: bool | Mapping[str, Any] = True) -> list[PassResult]:
    """Apply the passes of a preset in order, each as its own verified step.

    Verification reuses the captured tensors of each step as the reference of the next, so
    the model runs about once per modifying step. Only passes that changed the model become
    history steps; the returned list holds every pass's result (with the reason when it did
    nothing).

    Args:
        preset: a preset name (``"safe"``) or a list of pass names.

    Example:
        >>> [r.name for r in lab.apply_preset("safe") if r.modified]
    """
    names = _preset_passes(preset)
    cache: dict = {}
    results = []
    with _cyclic_gc_paused():
        for name in names:
            results.append(apply(lab, name, None, verify, _cache=cache, _record_noop=False))
    return results


def _preset_passes(preset: str | Sequence[str]) -> list[str]:
    if isinstance(preset, str):
        try:
            from onnx_lab.transforms.presets import PRESETS
        except ModuleNotFoundError as e:
            if e.name != "onnx_lab.transforms.presets":
                raise
            PRESETS = {}  # noqa: N806 - mirrors the module constant
        if preset not in PRESETS:
            raise unknown_name("preset", preset, PRESETS,
                               fix=f"Presets: {', '.join(PRESETS) or 'none yet'}; or pass a "
                               "list of pass names.")
        return list(PRESETS[preset])
    names = list(preset)
    if not names or not all(isinstance(n, str) for n in names):
        raise PassError(f"A preset must be a name or a non-empty list of pass names, got "
                        f"{preset!r}.", fix="Pass 'safe' or e.g. ['eliminate_identity'].")
    return names
