"""Small graph queries shared by the passes (all read the LabModel's index and onnx_ir values)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import TensorInfo, dtype_name, shape_tuple, value_type
from onnx_lab.core.values import const_array, overridable
from onnx_lab.transforms.matcher import Binding, users


def constant_other(b: Binding) -> np.ndarray | None:
    """The root's other input as a constant (``Pattern.where`` of bias Adds: an Add of two
    tensors, such as a residual, is no bias Add)."""
    return const_array(b.other)


def sole_user(value: ir.Value | None) -> ir.Node | None:
    """The only node reading ``value`` when it is also not a graph output, else None."""
    if value is None or value.is_graph_output():
        return None
    us = users(value)
    return us[0] if len(us) == 1 else None


def _inferred(model: LabModel, value: ir.Value) -> TensorInfo | None:
    """What shape inference knows of ``value`` (when its declaration says nothing)."""
    return value_type(model, value)


def _concrete(info: TensorInfo | None) -> tuple[int, ...] | None:
    if info is None or info.shape is None or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in info.shape):
        return None
    return tuple(int(d) for d in info.shape)


def free_shape(model: LabModel, value: ir.Value | None) -> tuple | None:
    """The shape of ``value`` with the dims the model leaves free as symbols (or None where
    unknown): a graph input's declared one, else what inference computes from the inputs and
    weights alone (a declared value_info may be stale: see :func:`static_shape`)."""
    if value is None:
        return None
    if value.is_graph_input():
        return shape_tuple(value.shape)
    info = value_type(model, value, model.types(declared=False))
    return tuple(info.shape) if info is not None and info.shape is not None else None


def static_shape(model: LabModel, value: ir.Value | None) -> tuple[int, ...] | None:
    """The shape of ``value`` when the model fixes every dim, else None: a constant's, a
    graph input's declared one, else what shape inference computes from the inputs and
    weights. A shape the file declares for an intermediate or an output (value_info) counts
    only where inference computes it too: a value_info written at batch 1 into a model whose
    input says ``batch`` is stale (onnxruntime's own optimizer folds it in, and the model then
    fails at batch 2; with its optimizations off it runs), and a rewrite that baked it in
    would make that true. Inferred without the Lab's dims: a size given for one run is no
    property of the model."""
    if value is None:
        return None
    arr = const_array(value)
    if arr is not None:
        return tuple(arr.shape)
    if value.is_graph_input():
        declared = shape_tuple(value.shape)
        if declared is not None and all(isinstance(d, int) for d in declared):
            return tuple(int(d) for d in declared)
    if _concrete(_inferred(model, value)) is None:
        return None  # (the cheap answer first: one inference, the one every pass reads)
    return _concrete(value_type(model, value, model.types(declared=False)))


def rank(model: LabModel, value: ir.Value | None) -> int | None:
    """Rank of ``value`` (declared, else inferred), or None."""
    if value is None:
        return None
    if value.shape is not None:
        return len(value.shape)
    arr = const_array(value)
    if arr is not None:
        return arr.ndim
    info = _inferred(model, value)
    return len(info.shape) if info is not None and info.shape is not None else None


def dtype(model: LabModel, value: ir.Value | None) -> str | None:
    """dtype name of ``value`` (``"float32"``), declared or inferred."""
    if value is None:
        return None
    if value.dtype is not None:
        return dtype_name(value.dtype)
    info = _inferred(model, value)
    return info.dtype if info is not None else None


def const_ints(value: ir.Value | None) -> list[int] | None:
    arr = const_array(value)
    if arr is None or arr.dtype.kind not in "iu":
        return None
    return [int(x) for x in arr.reshape(-1)]


def axes_of(node: ir.Node, input_index: int = 1) -> list[int] | None:
    """``axes`` of Squeeze/Unsqueeze/Reduce*: the attribute (old opsets) or constant input."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return list(attr.as_ints())
    if len(node.inputs) > input_index and node.inputs[input_index] is not None:
        return const_ints(node.inputs[input_index])
    return []


def nbytes(value: ir.Value | None) -> int:
    """Bytes of a constant value (0 when not constant)."""
    if value is None:
        return 0
    if value.const_value is not None:
        return int(value.const_value.nbytes)
    arr = const_array(value)
    return int(arr.nbytes) if arr is not None else 0


def freed_bytes(values: Sequence[ir.Value | None], dropped: Sequence[ir.Node]) -> int:
    """Bytes of constants in ``values`` that nothing outside ``dropped`` reads."""
    drop = {id(n) for n in dropped}
    seen: set[int] = set()
    total = 0
    for v in values:
        if v is None or id(v) in seen or v.is_graph_output() or overridable(v):
            continue
        seen.add(id(v))
        if all(id(u.node) in drop for u in v.uses()):
            total += nbytes(v)
    return total


def perm_of(model: LabModel, node: ir.Node) -> list[int] | None:
    """The ``perm`` of a Transpose (the default reverses the axes; needs the rank)."""
    attr = node.attributes.get("perm")
    if attr is not None:
        return list(attr.as_ints())
    r = rank(model, node.inputs[0])
    return list(range(r))[::-1] if r is not None else None


def not_constant(value: ir.Value | None, what: str) -> str:
    """Why ``value`` (``what``: "its weight") is not a constant, as a skip reason.

    Initializers also listed as graph inputs (``keep_initializers_as_inputs=True`` exports)
    look like weights but may be overridden: say so, or the reason reads as a contradiction.
    """
    name = f" {value.name!r}" if value is not None and value.name else ""
    if value is not None and value.is_initializer() and overridable(value):
        return (f"{what}{name} is also a graph input, which callers may override "
                "(see lab.check(), code initializer_input)")
    return f"{what}{name} is not a constant"
