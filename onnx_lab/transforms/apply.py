"""Running a pass on a model: the chosen matches, on a clone, with a PassResult.

Verification and the version history are not this layer's business: ``onnx_lab.steps``
runs a pass, verifies the new version with ``numerics.verify`` and pushes it on the history.

Example:
    >>> from onnx_lab.transforms.apply import run_pass
    >>> r = run_pass(lab.model, "fuse_conv_bn")
    >>> r.modified, r.provenance
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from onnx_lab.core.model import LabModel
from onnx_lab.errors import InputError, PassError, unknown_name
from onnx_lab.transforms.base import PassContext, PassResult, get_pass, pass_kind
from onnx_lab.transforms.interface import check_interface
from onnx_lab.transforms.presets import PRESETS

__all__ = ["run_pass", "preset_passes"]


def run_pass(model: LabModel, pass_name: str, matches: Sequence[str] | str | None = None, *,
             model_dims: Mapping[str, int] | None = None,
             model_shapes: Mapping[str, Sequence[int]] | None = None,
             **params: Any) -> PassResult:
    """Run pass ``pass_name`` on a clone of ``model``; ``model`` is not changed.

    Args:
        matches: match ids from ``find_patterns`` (None: every match of the pass).
        model_dims, model_shapes: the model's dim values and input shapes, read by
            whole-model tools (onnxsim) for their input shapes (``dims`` is a parameter of
            the ``fix_dims`` pass).
        **params: the pass's parameters (PassError on unknown names or wrong types).

    Raises:
        PassError: also when the result changed the model's inputs/outputs without the pass
            declaring it (kind ``edit``), or lost its graph
            (:func:`onnx_lab.transforms.interface.check_interface`).
    """
    if isinstance(matches, str):
        matches = [matches]
    if matches is not None and (not isinstance(matches, Iterable)
                                or not all(isinstance(m, str) for m in matches)):
        raise InputError(f"matches must be match ids (str), got {matches!r}.",
                         fix="Pass ids from lab.patterns().match_id.")
    p = get_pass(pass_name, matches=matches, **params)
    context = PassContext(dict(model_dims or {}),
                          {k: list(v) for k, v in (model_shapes or {}).items()})
    result = p.run(model, context)
    check_interface(model, result, kind=pass_kind(pass_name), dims=context.dims,
                    shapes=context.shapes)
    return result


def preset_passes(preset: str | Sequence[str]) -> list[str]:
    """The pass names of a preset name (``"safe"``) or of a list of pass names."""
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise unknown_name("preset", preset, PRESETS,
                               fix=f"Presets: {', '.join(PRESETS)}; or pass a list of pass "
                               "names.")
        return list(PRESETS[preset])
    names = list(preset) if isinstance(preset, Iterable) else []  # None, 5: no list of names
    if not names or not all(isinstance(n, str) for n in names):
        raise PassError(f"A preset must be a name or a non-empty list of pass names, got "
                        f"{preset!r}.", fix="Pass 'safe' or e.g. ['eliminate_identity'].")
    return names
