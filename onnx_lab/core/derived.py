"""Dims the model itself determines, filled in so a user only gives batch and lengths.

onnxruntime-genai's builder declares the KV cache as ``[batch_size, kv_heads,
past_sequence_length, kv_cache_dim]``: ``kv_cache_dim`` is symbolic, yet the graph fixes it (the
head size, hidden / heads, of the attention that reads the cache). :func:`derived_dims` finds
such dims and says where each value came from:

- **graph**: an attention op reading the cache input (``GroupQueryAttention``,
  ``MultiHeadAttention``, ``Attention``: its ``num_heads`` / ``kv_num_heads`` attributes and the
  width of its query or weights), or a ``Concat`` joining the input with a tensor whose dim on
  that axis is fixed (unfused exports: ``Concat(past_key, new_key)``);
- **config**: ``genai_config.json`` beside the model file (``head_size``,
  ``num_key_value_heads``);
- **lengths**: the total length of a decoder's step, past + new tokens (``total_sequence_length``
  = ``past_sequence_length`` + ``sequence_length``), once both are given. That is the layout of
  separate past and present buffers; with onnxruntime-genai's shared buffer
  (``past_present_share_buffer``) the past input is the whole buffer and the total is shorter:
  give it explicitly then.

A dim the user gives always wins over a derived one; :func:`with_derived` merges them, and
:meth:`LabModel.types <onnx_lab.core.model.LabModel.types>` and the feeds use it, so
``open(path, dims={"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0})`` is
enough for cost, profile and compare.

Example:
    >>> from onnx_lab.core.derived import derived_dims
    >>> {n: (d.value, d.kind) for n, d in derived_dims(model, {"sequence_length": 8,
    ...     "past_sequence_length": 0}).items()}
    {'kv_cache_dim': (16, 'graph'), 'total_sequence_length': (8, 'lengths')}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx_ir as ir

from onnx_lab.core.llm import config_count, decoder_io, genai_config
from onnx_lab.core.shapes import dynamic_dims, infer_types, shape_tuple
from onnx_lab.errors import CacheError

if TYPE_CHECKING:
    from onnx_lab.core.model import LabModel

__all__ = ["DerivedDim", "derived_dims", "with_derived", "length_sums"]

_MS = ("com.microsoft",)


@dataclass(frozen=True)
class DerivedDim:
    """A dim value the model determines.

    Attributes:
        name: the symbolic dim.
        value: its size.
        kind: ``"graph"``, ``"config"`` or ``"lengths"`` (see the module docstring).
        source: where it came from, in words (the node or file and the arithmetic).
    """

    name: str
    value: int
    kind: str
    source: str

    def to_dict(self) -> dict:
        return {"value": self.value, "kind": self.kind, "source": self.source}


def derived_dims(model: LabModel, dims: Mapping[str, int] | None = None
                 ) -> dict[str, DerivedDim]:
    """The dims of ``model``'s inputs that the model determines and ``dims`` does not give.

    Args:
        dims: the dims the user gave (they are never overridden; a total length is derived
            from the past and new lengths among them).

    Example:
        >>> derived_dims(lab.model)["kv_cache_dim"].source
        "GroupQueryAttention '/model/layers.0/attn/GroupQueryAttention': packed query width 128 / (4 + 2·2 kv) heads"
    """
    dims = dict(dims or {})
    out = {n: d for n, d in _static(model).items() if n not in dims}
    total = _total_length(model, dims)
    if total is not None and total.name not in dims:
        out[total.name] = total
    return out


def with_derived(model: LabModel, dims: Mapping[str, int] | None) -> dict[str, int]:
    """``dims`` with the derived dims it lacks added (what inference and feeds use)."""
    dims = dict(dims or {})
    return {**{n: d.value for n, d in derived_dims(model, dims).items()}, **dims}


def length_sums(model: LabModel) -> dict[str, str]:
    """{dim: "past + new"} for the total-length dim of a KV-cache decoder, which
    :func:`derived_dims` fills in once the past and new lengths are given (empty otherwise).

    Example:
        >>> length_sums(model)
        {'total_sequence_length': 'past_sequence_length + sequence_length'}
    """
    try:
        io = decoder_io(model)
    except CacheError:  # reported by decoder_io's users (check, generation)
        return {}
    if io is None or not io.past_dim or not io.sequence_dim:
        return {}
    probe = derived_dims(model, {io.past_dim: 0, io.sequence_dim: 1})
    return {n: f"{io.past_dim} + {io.sequence_dim}" for n, d in probe.items()
            if d.kind == "lengths"}


def _static(model: LabModel) -> dict[str, DerivedDim]:
    """Dims fixed by the graph or by genai_config.json (cached on the model)."""
    return model.cached(("derived_dims",), lambda: _find_static(model))


def _find_static(model: LabModel) -> dict[str, DerivedDim]:
    symbolic = {d for d in dynamic_dims(model) if d != "?"}
    if not symbolic:
        return {}
    found: dict[str, DerivedDim] = {}
    g = model.graph
    widths = _Widths(model)
    for v in g.inputs:
        if v.name in g.initializers:
            continue
        shape = shape_tuple(v.shape)
        if not shape or not any(isinstance(d, str) for d in shape):
            continue
        for use in v.uses():
            node, slot = use.node, use.idx
            for axis, value, why in _from_consumer(node, slot, shape, widths):
                name = shape[axis]
                if isinstance(name, str) and name in symbolic and name not in found \
                        and isinstance(value, int) and value > 0:
                    found[name] = DerivedDim(name, value, "graph", why)
    for name, d in _from_genai_config(model, symbolic).items():
        found.setdefault(name, d)
    return found


class _Widths:
    """The last-dim size of a value, read from weights and attributes where possible
    (MatMul by a weight, MatMulNBits' N, a bias Add), else from shape inference (run once)."""

    def __init__(self, model: LabModel) -> None:
        self.model = model
        self._types = None

    def last(self, v: ir.Value | None) -> int | None:
        for _ in range(4):
            if v is None:
                return None
            shape = shape_tuple(v.shape)
            if shape and isinstance(shape[-1], int) and shape[-1] > 0:
                return shape[-1]
            if v.const_value is not None:
                dims = v.const_value.shape
                return int(dims[-1]) if len(dims) else None
            node = v.producer()
            if node is None:
                break
            if node.op_type == "MatMul" and len(node.inputs) > 1:
                w = node.inputs[1]
                if w is not None and w.const_value is not None and len(w.const_value.shape) >= 2:
                    return int(w.const_value.shape[-1])
            if node.op_type == "MatMulNBits" and "N" in node.attributes:
                return int(node.attributes["N"].value)
            if node.op_type == "Add" and len(node.inputs) > 1:
                b = node.inputs[1]
                if b is not None and b.const_value is not None and len(b.const_value.shape) >= 1:
                    return int(b.const_value.shape[-1])
                v = node.inputs[0]
                continue
            break
        return self._inferred(v)

    def _inferred(self, v: ir.Value | None) -> int | None:
        if v is None or not v.name:
            return None
        if self._types is None:
            self._types = infer_types(self.model)  # raw: no derived dims (no recursion)
        info = self._types.get(v.name)
        if info is None or not info.shape or not isinstance(info.shape[-1], int):
            return None
        return info.shape[-1] or None


def _attr(node: ir.Node, name: str) -> int | None:
    a = node.attributes.get(name)
    return int(a.value) if a is not None and isinstance(a.value, int) else None


def _in(node: ir.Node, i: int) -> ir.Value | None:
    return node.inputs[i] if len(node.inputs) > i else None


def _from_consumer(node: ir.Node, slot: int, shape: tuple, widths: _Widths):
    """(axis, value, source) for the dims of a graph input that ``node`` reads at ``slot``."""
    label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
    rank = len(shape)
    if node.domain in _MS and node.op_type == "GroupQueryAttention" and slot in (3, 4) \
            and rank == 4:
        # past_key / past_value [batch, kv_num_heads, past, head_size]
        heads, kv = _attr(node, "num_heads"), _attr(node, "kv_num_heads")
        if not heads or not kv:
            return
        yield 1, kv, f"{label}: kv_num_heads={kv}"
        key = _in(node, 1)
        if key is not None:
            w = widths.last(key)
            if w and w % kv == 0:
                yield 3, w // kv, f"{label}: key width {w} / {kv} kv heads"
            return
        w = widths.last(_in(node, 0))
        if w and w % (heads + 2 * kv) == 0:
            yield 3, w // (heads + 2 * kv), (f"{label}: packed query width {w} / ({heads} + "
                                             f"2·{kv} kv) heads")
    elif node.domain in _MS and node.op_type == "MultiHeadAttention" and slot in (6, 7) \
            and rank == 4:
        # past_key / past_value [batch, num_heads, past, head_size]
        heads = _attr(node, "num_heads")
        if not heads:
            return
        yield 1, heads, f"{label}: num_heads={heads}"
        src = _in(node, 0) if slot == 6 else (_in(node, 2) or _in(node, 0))
        w = widths.last(src)
        packed = src is not None and src.shape is not None and len(src.shape) != 3
        if w and w % heads == 0 and not packed:  # a packed [B, S, N, 3, H] query is not D
            yield 3, w // heads, f"{label}: {'query' if slot == 6 else 'value'} width {w} / " \
                                 f"{heads} heads"
    elif node.domain in _MS and node.op_type == "Attention" and slot == 4 and rank == 5:
        # past [2, batch, num_heads, past, head_size]
        heads = _attr(node, "num_heads")
        if not heads:
            return
        yield 2, heads, f"{label}: num_heads={heads}"
        sizes = node.attributes.get("qkv_hidden_sizes")
        w = _in(node, 1)
        hidden = None
        if sizes is not None:
            hidden = int(list(sizes.value)[0])
        elif w is not None and w.const_value is not None and len(w.const_value.shape) == 2:
            hidden = int(w.const_value.shape[1]) // 3
        if hidden and hidden % heads == 0:
            yield 4, hidden // heads, f"{label}: hidden {hidden} / {heads} heads"
    elif node.op_type == "Concat" and node.domain in ("", "ai.onnx"):
        axis = _attr(node, "axis")
        if axis is None:
            return
        axis %= rank
        for other in node.inputs:
            if other is None or other is node.inputs[slot]:
                continue
            oshape = shape_tuple(other.shape)
            if other.const_value is not None:
                oshape = tuple(other.const_value.shape)
            if not oshape or len(oshape) != rank:
                continue
            for a, d in enumerate(oshape):
                if a != axis and isinstance(d, int) and d > 0:
                    yield a, d, f"{label}: joined on axis {axis} with {other.name!r} " \
                                f"(dim {a} = {d})"


def _from_genai_config(model: LabModel, symbolic: set[str]) -> dict[str, DerivedDim]:
    """``head_size`` and ``num_key_value_heads`` of genai_config.json for the cache's dims."""
    cfg = genai_config(model)
    if not cfg:
        return {}
    decoder = (cfg.get("model") or {}).get("decoder") or {}
    try:
        io = decoder_io(model)
    except CacheError:  # reported by decoder_io's users (check, generation)
        return {}
    if io is None or not io.cache:
        return {}
    shape = io.cache[0].shape or ()
    out: dict[str, DerivedDim] = {}
    where = f"{cfg.get('_path', 'genai_config.json')}"
    if len(shape) == 4:
        for axis, key in ((3, "head_size"), (1, "num_key_value_heads")):
            name, value = shape[axis], decoder.get(key)
            if isinstance(name, str) and name in symbolic and config_count(value):
                out[name] = DerivedDim(name, value, "config", f"{where}: model.decoder.{key}")
    return out


def _total_length(model: LabModel, dims: Mapping[str, int]) -> DerivedDim | None:
    """total = past + new tokens of a KV-cache decoder, once both lengths are given."""
    try:
        io = decoder_io(model)
    except CacheError:  # reported by decoder_io's users (check, generation)
        return None
    if io is None:
        return None
    past, new = io.past_dim, io.sequence_dim
    total = io.total_dim
    mask = _mask_length_dim(model, io.attention_mask)
    symbolic = dynamic_dims(model)
    name = total if total in symbolic else mask
    if not name or name in (past, new) or name not in symbolic:
        return None
    if past in dims and new in dims:
        return DerivedDim(name, int(dims[past]) + int(dims[new]), "lengths",
                          f"{past} + {new} (the cache grows by the new tokens)")
    return None


def _mask_length_dim(model: LabModel, mask: str | None) -> str | None:
    if not mask:
        return None
    v = next((v for v in model.graph.inputs if v.name == mask), None)
    shape = shape_tuple(v.shape) if v is not None else None
    return shape[1] if shape and len(shape) == 2 and isinstance(shape[1], str) else None
