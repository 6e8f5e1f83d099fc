"""The feeding plan of a generation loop: the KV-cache pairs and roles of
:func:`onnx_lab.core.llm.decoder_io`, the bookkeeping inputs a model may add (``seqlens_k``,
``total_sequence_length``, ``use_cache_branch``, ``token_type_ids``), the empty cache's shape,
and the longest context the model takes.

Example:
    >>> layout = cache_layout(lab.model, dims={"kv_cache_dim": 16})
    >>> layout.pairs[0], layout.max_context
    (('past_key_values.0.key', 'present.0.key'), 128)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from onnx_lab.core.derived import with_derived
from onnx_lab.core.llm import config_count, genai_config, require_decoder_io
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import dtype_name, resolve_dim, shape_tuple
from onnx_lab.errors import CacheError, DimError

__all__ = ["CacheLayout", "cache_layout", "EXTRA_ROLES"]

#: Inputs beyond decoder_io's roles that the loop knows how to feed (lower-case names):
#: onnxruntime-genai's models for some providers take seqlens_k / total_sequence_length,
#: optimum's merged decoders use_cache_branch, encoder-style exports token_type_ids.
EXTRA_ROLES = {
    "seqlens_k": ("seqlens_k",),
    "total_sequence_length": ("total_sequence_length", "total_seq_len"),
    "use_cache_branch": ("use_cache_branch",),
    "token_type_ids": ("token_type_ids",),
}


@dataclass
class CacheLayout:
    """The feeding plan of a decoder (see :func:`cache_layout`).

    Attributes:
        pairs: (past input, present output) per cache tensor, by layer, key then value.
        seq_axis: past input -> the axis that grows by one per generated token.
        past_shapes: past input -> its shape with the growing axis 0 and the batch -1.
        dtypes: past input -> numpy dtype name.
        roles: role -> input name (input_ids, attention_mask, position_ids, cache_position,
            seqlens_k, total_sequence_length, use_cache_branch, token_type_ids), where present.
        input_dtypes: input name -> numpy dtype name (the bookkeeping inputs).
        logits: the output the next token is read from.
        vocab: its last dim when the model fixes it (else None).
        max_context: the longest context the model takes (None: no limit found).
        max_context_from: what sets it (tensor and node names, or genai_config.json).
    """

    pairs: list[tuple[str, str]]
    seq_axis: dict[str, int]
    past_shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    roles: dict[str, str]
    input_dtypes: dict[str, str]
    logits: str
    vocab: int | None = None
    max_context: int | None = None
    max_context_from: list[str] = field(default_factory=list)

    def kv_bytes_per_token(self, batch: int) -> int:
        """Bytes the cache grows by per token of context (all pairs, keys and values)."""
        total = 0
        for past, _ in self.pairs:
            n = 1
            for i, d in enumerate(self.past_shapes[past]):
                if i != self.seq_axis[past]:
                    n *= batch if d == -1 else d
            total += n * np.dtype(self.dtypes[past]).itemsize
        return total

    def to_dict(self) -> dict:
        return {"pairs": [list(p) for p in self.pairs], "roles": dict(self.roles),
                "logits": self.logits, "vocab": self.vocab, "max_context": self.max_context,
                "max_context_from": list(self.max_context_from)}


def cache_layout(model: LabModel, dims: Mapping[str, int] | None = None) -> CacheLayout:
    """What the generation loop feeds: :func:`~onnx_lab.core.llm.decoder_io`'s pairs and
    roles, the extra bookkeeping inputs, the empty cache's shape and the context limit.

    Raises:
        CacheError: no cache, cache tensors that cannot be paired (named), a pair whose
            dtype or rank differ, an input the loop cannot feed, no logits output.
        DimError: a cache dim other than batch and length that is symbolic, not in ``dims`` and
            not determined by the model (:mod:`onnx_lab.core.derived`).
    """
    dims = with_derived(model, dims)  # the head size and KV heads the graph fixes
    io = require_decoder_io(model)
    g = model.graph
    values = {v.name: v for v in g.inputs} | {v.name: v for v in g.outputs}
    roles = {r: n for r, n in (("input_ids", io.input_ids),
                               ("attention_mask", io.attention_mask),
                               ("position_ids", io.position_ids),
                               ("cache_position", io.cache_position)) if n}
    unknown = []
    for name in io.other_inputs:
        role = next((r for r, names in EXTRA_ROLES.items() if name.lower() in names), None)
        if role is None:
            unknown.append(name)
        else:
            roles[role] = name
    if "input_ids" not in roles:
        raise CacheError(f"No input_ids input among {[v.name for v in g.inputs]}.",
                         fix="The generation loop feeds token ids to an input named input_ids.")
    if unknown:
        raise CacheError(
            f"The generation loop does not know how to feed input(s) {unknown} (it feeds "
            "input_ids, the past_* cache, attention_mask, position_ids, cache_position, "
            f"{', '.join(EXTRA_ROLES)}).",
            fix="Extract or edit the model so that only those inputs remain.")
    if io.logits is None:
        raise CacheError(f"No logits output among {[v.name for v in g.outputs]}.",
                         fix="The loop reads the next token from an output named logits.")
    seq_axis, past_shapes, dtypes = {}, {}, {}
    for s in io.cache:
        o = values[s.present]
        ps, os_ = s.shape, shape_tuple(o.shape)
        od = dtype_name(o.dtype)
        if s.dtype != od or (ps is not None and os_ is not None and len(ps) != len(os_)):
            raise CacheError(
                f"Cache input {s.past!r} ({s.dtype}, shape {list(ps or [])}) and output "
                f"{s.present!r} ({od}, shape {list(os_ or [])}) do not match: the present "
                "tensor cannot be fed back as the past one.",
                fix="Pair tensors of the same dtype and rank (check the export).")
        if ps is None or s.past_axis is None:
            raise CacheError(f"Cache input {s.past!r} declares no shape, so the loop cannot "
                             "build its empty cache.",
                             fix="Re-export with shapes, or lab.set_input_shape(...).")
        shape = []
        for i, d in enumerate(ps):
            if i == s.past_axis:
                shape.append(0)
            elif isinstance(d, int) and d >= 0:
                shape.append(d)
            elif d == io.batch_dim or (d is None and i == 0):
                shape.append(-1)
            elif isinstance(d, str) and isinstance(resolve_dim(d, dims), int):
                shape.append(int(resolve_dim(d, dims)))  # a name or an expression of names
            else:
                raise DimError(
                    f"Dim {d!r} (axis {i}) of cache input {s.past!r} {list(ps)} is symbolic: "
                    "the loop needs its size to build the empty cache.",
                    fix=f"Pass dims={{{d!r}: N}} (the head size or the number of KV heads).")
        seq_axis[s.past] = s.past_axis
        past_shapes[s.past] = tuple(shape)
        dtypes[s.past] = s.dtype or "float32"
    lshape = shape_tuple(values[io.logits].shape) or ()
    vocab = lshape[-1] if lshape and isinstance(lshape[-1], int) and lshape[-1] > 0 else None
    input_dtypes = {n: dtype_name(values[n].dtype) or "int64" for n in roles.values()}
    max_ctx, why = _max_context(model, roles)
    return CacheLayout(pairs=[(s.past, s.present) for s in io.cache], seq_axis=seq_axis,
                       past_shapes=past_shapes, dtypes=dtypes, roles=roles,
                       input_dtypes=input_dtypes, logits=io.logits, vocab=vocab,
                       max_context=max_ctx, max_context_from=why)


def _init_rows(model: LabModel, name: str | None) -> int | None:
    if not name or name not in model.graph.initializers:
        return None
    v = model.graph.initializers[name]
    shape = shape_tuple(v.shape) or (shape_tuple(v.const_value.shape)
                                     if v.const_value is not None else None)
    return int(shape[0]) if shape and isinstance(shape[0], int) else None


def _max_context(model: LabModel, roles: Mapping[str, str]) -> tuple[int | None, list[str]]:
    """The longest context: the rows of rotary caches (RotaryEmbedding, GroupQueryAttention
    with do_rotary) and of a position table indexed by position_ids, and ``context_length``
    of a ``genai_config.json`` beside the model. Returns (the smallest, what sets it: one
    phrase per tensor or file at that size)."""
    # tensor -> (rows, what kind of table, the nodes reading it)
    tables: dict[str, tuple[int, str, list[str]]] = {}
    idx = model.index

    def add(name: str | None, what: str, nid: str) -> None:
        rows = _init_rows(model, name)
        if rows:
            tables.setdefault(name, (rows, what, []))[2].append(nid)

    for nid, e in idx.entries.items():
        n = e.node
        slot = {"RotaryEmbedding": 2, "GroupQueryAttention": 7}.get(n.op_type)
        if slot is not None and n.domain in ("com.microsoft", "") and len(n.inputs) > slot \
                and n.inputs[slot] is not None:
            add(n.inputs[slot].name, f"rotary cache of {n.op_type}", nid)
    pos = roles.get("position_ids")
    for nid in idx.consumers.get(pos, ()) if pos else ():
        n = idx.node(nid)
        if n.op_type == "Gather" and len(n.inputs) > 1 and n.inputs[1] is not None \
                and n.inputs[1].name == pos and n.inputs[0] is not None:
            add(n.inputs[0].name, f"position table indexed by {pos!r}", nid)
    found = [(rows, f"{name!r} has {rows} rows ({what} {nids[0]!r}"
                    + (f" and {len(nids) - 1} more" if len(nids) > 1 else "") + ")")
             for name, (rows, what, nids) in tables.items()]
    cfg = genai_config(model)
    ctx = (cfg.get("model") or {}).get("context_length") if cfg else None
    if config_count(ctx):
        found.append((ctx, f"context_length {ctx} in {cfg['_path']!r}"))
    if not found:
        return None, []
    best = min(r for r, _ in found)
    return best, [w for r, w in found if r == best]
