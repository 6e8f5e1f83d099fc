"""One way to turn whatever a user holds into a model: :func:`resolve`.

Every function below the façade takes "a model" in any of these forms and calls ``resolve``:
a path, bytes, an ``onnx.ModelProto``, an ``onnx_ir.Model``, a :class:`LabModel`,
``"sample:NAME"``, or any object with ``.model``, ``.dims`` and ``.shapes`` (a Lab, a History).
No lower layer needs to know the façade's types.

Example:
    >>> from onnx_lab.core.source import resolve
    >>> model, dims, shapes = resolve("sample:transformer_block", dims={"batch": 1, "seq": 8})
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from onnx_lab.core import samples
from onnx_lab.core.load import load_model
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import check_dim_arguments, validate_dims

__all__ = ["resolve", "load_source", "Resolved"]


class Resolved(NamedTuple):
    """A model with the dim values and input shapes that apply to it (what :func:`resolve`
    returns; unpacks as ``model, dims, shapes``)."""

    model: LabModel
    dims: dict[str, int]
    shapes: dict[str, list[int]]


def load_source(source: Any, *, mmap: bool = False, lazy: bool = False,
                base_dir: str | os.PathLike | None = None) -> LabModel:
    """The LabModel of ``source`` (without dims): see :func:`resolve` for the accepted forms.

    Args:
        mmap: map a model file instead of reading it (see :func:`~onnx_lab.core.load.load_model`).
        lazy: for a large file, leave the weights in the file and read them on use (compare).
        base_dir: the folder external data files of an in-memory source (bytes, ModelProto,
            onnx_ir.Model) lie in; without it such a source may not refer to any.
    """
    model = getattr(source, "model", None)
    if isinstance(model, LabModel):
        return model
    if isinstance(source, str) and source.startswith("sample:"):
        source = samples.path(source.split(":", 1)[1])
    elif lazy and base_dir is None and isinstance(source, (str, os.PathLike)):
        # on use: `import onnx_lab` does not load it
        from onnx_lab.core._lazyload import open_lazy

        opened = open_lazy(source)
        if opened is not None:
            return opened
    return load_model(source, mmap=mmap, base_dir=base_dir)


def resolve(source: Any, dims: Mapping[str, int] | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None, *, mmap: bool = False,
            lazy: bool = False, validate: bool = False) -> Resolved:
    """(model, dims, shapes) of ``source``; the given dims/shapes are merged over its own.

    Args:
        source: a path, bytes, ``onnx.ModelProto``, ``onnx_ir.Model``, LabModel,
            ``"sample:NAME"``, or an object with ``.model``/``.dims``/``.shapes`` (a Lab).
        dims, shapes: values for symbolic dims and whole input shapes.
        mmap, lazy: how a file is read (see :func:`load_source`).
        validate: check that the dims and shapes name real dims and inputs (DimError).

    Raises:
        ModelLoadError, ExternalDataError, InputError: the source cannot be opened.
        DimError, UnknownNameError: with ``validate``, dims or shapes that do not fit.

    Example:
        >>> model, dims, shapes = resolve(lab, dims={"batch": 4})
    """
    model = load_source(source, mmap=mmap, lazy=lazy)
    own = getattr(source, "model", None) is model  # a Lab or History: start from its dims
    base_dims = dict(getattr(source, "dims", None) or {}) if own else {}
    base_shapes = {k: list(v) for k, v in (getattr(source, "shapes", None) or {}).items()} \
        if own else {}
    check_dim_arguments(dims, shapes)
    merged_dims = {**base_dims, **dict(dims or {})}
    merged_shapes = {**base_shapes, **{k: list(v) for k, v in (shapes or {}).items()}}
    if validate:
        validate_dims(model, merged_dims, merged_shapes)
    return Resolved(model, merged_dims, merged_shapes)
