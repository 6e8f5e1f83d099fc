"""Small graph queries shared by the passes (all read the LabModel's index and onnx_ir values)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import Match, const_array, overridable

STANDARD_DOMAINS = ("", "ai.onnx")


def walk(model: LabModel, main_only: bool = False) -> Iterator[tuple[str, ir.Node]]:
    """(node_id, node) in whole-model topological order (bodies follow their owner)."""
    for nid, e in model.index.entries.items():
        if main_only and e.graph != "":
            continue
        yield nid, e.node


def is_std(node: ir.Node, op_type: str | Sequence[str] | None = None) -> bool:
    """Node in the default ONNX domain (and of one of ``op_type``)."""
    if node.domain not in STANDARD_DOMAINS:
        return False
    if op_type is None:
        return True
    return node.op_type == op_type if isinstance(op_type, str) else node.op_type in op_type


def users(value: ir.Value | None) -> list[ir.Node]:
    """Distinct nodes reading ``value`` (body nodes reading an outer value included)."""
    if value is None:
        return []
    out: list[ir.Node] = []
    for u in value.uses():
        if all(u.node is not n for n in out):
            out.append(u.node)
    return out


def sole_user(value: ir.Value | None) -> ir.Node | None:
    """The only node reading ``value`` when it is also not a graph output, else None."""
    if value is None or value.is_graph_output():
        return None
    us = users(value)
    return us[0] if len(us) == 1 else None


def nid(model: LabModel, node: ir.Node) -> str:
    return model.index.node_id(node)


def names_of(model: LabModel, nodes: Sequence[ir.Node]) -> str:
    return ", ".join(nid(model, n) for n in nodes)


def static_shape(model: LabModel, value: ir.Value | None) -> tuple[int, ...] | None:
    """The concrete shape of ``value`` (declared, else inferred), or None when not static."""
    if value is None:
        return None
    arr = const_array(value)
    if arr is not None:
        return tuple(arr.shape)
    shape = value.shape
    if shape is not None and all(isinstance(d, int) for d in shape):
        return tuple(int(d) for d in shape)
    info = model.types().get(value.name or "")
    if info is not None and info.shape is not None and not info.dynamic:
        return tuple(int(d) for d in info.shape)  # type: ignore[arg-type]
    return None


def rank(model: LabModel, value: ir.Value | None) -> int | None:
    """Rank of ``value`` (declared, else inferred), or None."""
    if value is None:
        return None
    if value.shape is not None:
        return len(value.shape)
    arr = const_array(value)
    if arr is not None:
        return arr.ndim
    info = model.types().get(value.name or "")
    if info is not None and info.shape is not None:
        return len(info.shape)
    return None


def dtype(model: LabModel, value: ir.Value | None) -> str | None:
    """dtype name of ``value`` (``"float32"``), declared or inferred."""
    if value is None:
        return None
    if value.dtype is not None:
        from onnx_lab.core.shapes import dtype_name

        return dtype_name(value.dtype)
    info = model.types().get(value.name or "")
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


def match(pass_name: str, pattern: str, model: LabModel, anchor: ir.Node,
          others: Sequence[ir.Node], description: str, saving_nodes: int, saving_bytes: int = 0,
          **data) -> Match:
    """A Match anchored on ``anchor`` with the id ``"{pass_name}:{anchor id}"``."""
    aid = nid(model, anchor)
    ids = [aid] + [nid(model, n) for n in others if n is not anchor]
    return Match(f"{pass_name}:{aid}", pattern, pass_name, ids, aid, description, saving_nodes,
                 int(saving_bytes), dict(data, nodes=[anchor, *others]))


def alive(*nodes: ir.Node) -> bool:
    """All nodes still belong to a graph (an earlier match in the same pass may have removed
    them)."""
    return all(n.graph is not None for n in nodes)


def perm_of(model: LabModel, node: ir.Node) -> list[int] | None:
    """The ``perm`` of a Transpose (the default reverses the axes; needs the rank)."""
    attr = node.attributes.get("perm")
    if attr is not None:
        return list(attr.as_ints())
    r = rank(model, node.inputs[0])
    return list(range(r))[::-1] if r is not None else None


def as_float(arr: np.ndarray) -> np.ndarray:
    return arr.astype(np.float64)


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
