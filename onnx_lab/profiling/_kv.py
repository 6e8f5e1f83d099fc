"""How a decoder's inputs are fed in a generation loop: which output feeds which cache input,
the cache's sequence axis, the bookkeeping inputs, the logits and the longest context.

Example:
    >>> layout = cache_layout(lab.model, dims={"batch_size": 1})
    >>> layout.pairs[0]
    ('past_key_values.0.key', 'present.0.key')
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import dtype_name, shape_tuple
from onnx_lab.errors import DimError, InputError

__all__ = ["CacheLayout", "cache_layout", "ROLE_INPUTS"]

_PAST = re.compile(r"^(past_key_values|past)", re.I)
_PRESENT = re.compile(r"^(present_key_values|present)", re.I)
#: Bookkeeping inputs the loop feeds, by role (lower-case names).
ROLE_INPUTS = {
    "input_ids": ("input_ids", "input", "tokens", "token_ids"),
    "attention_mask": ("attention_mask",),
    "position_ids": ("position_ids",),
    "cache_position": ("cache_position",),
    "seqlens_k": ("seqlens_k",),
    "total_sequence_length": ("total_sequence_length", "total_seq_len"),
    "use_cache_branch": ("use_cache_branch",),
    "token_type_ids": ("token_type_ids",),
}


def _key(name: str, rx: re.Pattern) -> str:
    """The part of a cache tensor's name after past/present, separators unified."""
    rest = rx.sub("", name, count=1)
    return re.sub(r"[._/\-]+", ".", rest).strip(".").lower()


@dataclass
class CacheLayout:
    """The feeding plan of a decoder (see :func:`cache_layout`).

    Attributes:
        pairs: (past input, present output) per cache tensor, in input order.
        seq_axis: past input -> the axis that grows by one per generated token.
        past_shapes: past input -> its shape with the sequence axis as 0 (ints) and the batch
            as -1 (filled per call).
        dtypes: past input -> numpy dtype name.
        roles: role -> input name (input_ids, attention_mask, position_ids, cache_position,
            seqlens_k, total_sequence_length, use_cache_branch, token_type_ids).
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
        import numpy as np

        total = 0
        for past, _ in self.pairs:
            n = 1
            for i, d in enumerate(self.past_shapes[past]):
                if i == self.seq_axis[past]:
                    continue
                n *= batch if d == -1 else d
            total += n * np.dtype(self.dtypes[past]).itemsize
        return total

    def to_dict(self) -> dict:
        return {"pairs": [list(p) for p in self.pairs], "roles": dict(self.roles),
                "logits": self.logits, "vocab": self.vocab, "max_context": self.max_context,
                "max_context_from": list(self.max_context_from)}


def cache_layout(model: LabModel, dims: Mapping[str, int] | None = None) -> CacheLayout:
    """Pair ``past*`` inputs with ``present*`` outputs and find what else the loop feeds.

    Naming: onnxruntime-genai and optimum (``past_key_values.0.key`` ↔ ``present.0.key``),
    older torch exports (``past_key.0`` ↔ ``present_key.0``, ``past.0`` ↔ ``present.0``):
    the part after ``past``/``past_key_values`` must equal the part after ``present``.

    Raises:
        InputError: no cache inputs, cache tensors that cannot be paired (names them all),
            pairs whose dtype or rank differ, an input the loop cannot feed, no logits.
        DimError: a cache dim other than batch and length that is symbolic and not in ``dims``.
    """
    dims = dict(dims or {})
    g = model.graph
    inputs = [v for v in g.inputs if v.name not in g.initializers]
    outputs = list(g.outputs)
    past = [v for v in inputs if _PAST.match(v.name)]
    present = [v for v in outputs if _PRESENT.match(v.name)]
    if not past:
        raise InputError(
            f"The model has no KV-cache inputs (names starting with 'past'): inputs are "
            f"{[v.name for v in inputs]}.",
            fix="Generation profiling needs a decoder exported with its cache "
                "(past_key_values.* inputs, present.* outputs); profile() times one run.")
    by_key = {}
    for v in present:
        by_key.setdefault(_key(v.name, _PRESENT), v)
    pairs, lonely_past = [], []
    for v in past:
        o = by_key.pop(_key(v.name, _PAST), None)
        if o is None:
            lonely_past.append(v.name)
        else:
            pairs.append((v, o))
    if lonely_past or by_key:
        parts = []
        if lonely_past:
            parts.append(f"inputs without a present output: {lonely_past}")
        if by_key:
            parts.append(f"outputs without a past input: {[v.name for v in by_key.values()]}")
        raise InputError(
            "KV-cache tensors cannot be paired (" + "; ".join(parts) + "): each "
            "past_key_values.{i}.key/value input needs a present.{i}.key/value output "
            f"(paired so far: {[(p.name, o.name) for p, o in pairs]}).",
            fix="Export the decoder with matching cache names (onnxruntime-genai or optimum "
                "naming), or rename tensors with lab.rename_tensor(old, new).")
    ids_v = inputs[0] if inputs else None
    roles: dict[str, str] = {}
    lower = {v.name.lower(): v.name for v in inputs}
    for role, names in ROLE_INPUTS.items():
        for n in names:
            if n in lower:
                roles[role] = lower[n]
                break
    if "input_ids" not in roles:
        raise InputError(f"No input_ids input among {[v.name for v in inputs]}.",
                         fix="The generation loop feeds token ids to an input named input_ids.")
    ids_v = next(v for v in inputs if v.name == roles["input_ids"])
    ids_shape = shape_tuple(ids_v.shape) or ()
    batch_dim = ids_shape[0] if ids_shape else None
    fed = {p.name for p, _ in pairs} | set(roles.values())
    unknown = [v.name for v in inputs if v.name not in fed]
    if unknown:
        raise InputError(
            f"The generation loop does not know how to feed input(s) {unknown} (it feeds "
            f"input_ids, the past_* cache, attention_mask, position_ids, cache_position, "
            f"seqlens_k, total_sequence_length, use_cache_branch, token_type_ids).",
            fix="Extract or edit the model so that only those inputs remain.")
    seq_axis, past_shapes, dtypes = {}, {}, {}
    for p, o in pairs:
        ps, os_ = shape_tuple(p.shape), shape_tuple(o.shape)
        pd_, od = dtype_name(p.dtype), dtype_name(o.dtype)
        if pd_ != od or (ps is not None and os_ is not None and len(ps) != len(os_)):
            raise InputError(
                f"Cache input {p.name!r} ({pd_}, shape {list(ps or [])}) and output {o.name!r} "
                f"({od}, shape {list(os_ or [])}) do not match: the present tensor cannot be "
                "fed back as the past one.",
                fix="Pair tensors of the same dtype and rank (check the export).")
        if ps is None:
            raise InputError(f"Cache input {p.name!r} has no declared shape.",
                             fix="Re-export with shapes, or lab.set_input_shape(...).")
        axis = _seq_axis(ps, os_, batch_dim)
        if axis is None:
            raise InputError(
                f"Cannot tell which axis of cache input {p.name!r} {list(ps)} grows with the "
                f"context (compared with {o.name!r} {list(os_ or [])}).",
                fix="Name the length dim symbolically (e.g. past_sequence_length).")
        seq_axis[p.name] = axis
        shape = []
        for i, d in enumerate(ps):
            if i == axis:
                shape.append(0)
            elif isinstance(d, int) and d >= 0:
                shape.append(d)
            elif d == batch_dim and d is not None:
                shape.append(-1)
            elif isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                raise DimError(
                    f"Dim {d!r} (axis {i}) of cache input {p.name!r} is symbolic: the loop "
                    "needs its size to build the empty cache.",
                    fix=f"Pass dims={{{d!r}: N}} (N from the model's config).")
        past_shapes[p.name] = tuple(shape)
        dtypes[p.name] = pd_ or "float32"
    logits = next((o.name for o in outputs if o.name.lower() == "logits"), None)
    if logits is None:
        rest = [o.name for o in outputs if not _PRESENT.match(o.name)]
        if len(rest) != 1:
            raise InputError(f"No 'logits' output among {[o.name for o in outputs]}.",
                             fix="The loop reads the next token from an output named logits.")
        logits = rest[0]
    lshape = shape_tuple(next(o for o in outputs if o.name == logits).shape) or ()
    vocab = lshape[-1] if lshape and isinstance(lshape[-1], int) and lshape[-1] > 0 else None
    input_dtypes = {name: dtype_name(v.dtype) or "int64" for v in inputs
                    for name in [v.name] if name in roles.values()}
    max_ctx, why = _max_context(model, roles)
    return CacheLayout(pairs=[(p.name, o.name) for p, o in pairs], seq_axis=seq_axis,
                       past_shapes=past_shapes, dtypes=dtypes, roles=roles,
                       input_dtypes=input_dtypes, logits=logits, vocab=vocab,
                       max_context=max_ctx, max_context_from=why)


def _seq_axis(ps: tuple, os_: tuple | None, batch_dim) -> int | None:
    """The axis whose size differs between past and present (symbolically), else one named
    like a length, else the third of four (B, heads, S, head_size)."""
    if os_ is not None and len(os_) == len(ps):
        diff = [i for i, (a, b) in enumerate(zip(ps, os_)) if a != b and a != batch_dim]
        if len(diff) == 1:
            return diff[0]
    named = [i for i, d in enumerate(ps) if isinstance(d, str) and d != batch_dim
             and re.search(r"past|seq|len|total|cache", d, re.I)]
    if len(named) == 1:
        return named[0]
    if len(ps) == 4 and not isinstance(ps[2], int):
        return 2
    return None


def _init_rows(model: LabModel, name: str | None) -> int | None:
    if not name or name not in model.graph.initializers:
        return None
    v = model.graph.initializers[name]
    shape = shape_tuple(v.shape) or (shape_tuple(v.const_value.shape)
                                     if v.const_value is not None else None)
    return int(shape[0]) if shape and isinstance(shape[0], int) else None


def _max_context(model: LabModel, roles: Mapping[str, str]) -> tuple[int | None, list[str]]:
    """The longest context: rotary caches' rows, a position table's rows indexed by
    position_ids, and ``context_length`` of a ``genai_config.json`` beside the model."""
    found: list[tuple[int, str]] = []
    idx = model.index
    for nid, e in idx.entries.items():
        n = e.node
        slots = {"RotaryEmbedding": (2,), "GroupQueryAttention": (7,)}.get(n.op_type)
        if not slots or n.domain not in ("com.microsoft", ""):
            continue
        for s in slots:
            if len(n.inputs) > s and n.inputs[s] is not None:
                rows = _init_rows(model, n.inputs[s].name)
                if rows:
                    found.append((rows, f"{n.inputs[s].name!r} has {rows} rows ({n.op_type} "
                                        f"{nid!r})"))
    pos = roles.get("position_ids")
    if pos:
        for nid in idx.consumers.get(pos, ()):
            n = idx.node(nid)
            if n.op_type == "Gather" and len(n.inputs) > 1 and n.inputs[1] is not None \
                    and n.inputs[1].name == pos:
                rows = _init_rows(model, n.inputs[0].name if n.inputs[0] is not None else None)
                if rows:
                    found.append((rows, f"position table {n.inputs[0].name!r} has {rows} rows "
                                        f"(Gather {nid!r} on {pos!r})"))
    if model.path is not None:
        cfg = model.path.parent / "genai_config.json"
        if cfg.is_file():
            try:
                ctx = json.loads(cfg.read_text()).get("model", {}).get("context_length")
            except (OSError, ValueError):
                ctx = None
            if isinstance(ctx, int) and ctx > 0:
                found.append((ctx, f"context_length {ctx} in {str(cfg)!r}"))
    if not found:
        return None, []
    best = min(r for r, _ in found)
    seen: list[str] = []
    for r, w in found:
        if r == best and w not in seen:
            seen.append(w)
    return best, seen[:3]
