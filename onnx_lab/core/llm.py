"""The inputs and outputs of a decoder LLM with a KV cache, found once, for every feature.

A decoder exported for generation takes the cache of earlier tokens as inputs and returns it,
grown by the new tokens, as outputs: ``past_key_values.{i}.key`` / ``.value`` in and
``present.{i}.key`` / ``.value`` out (onnxruntime-genai's model builder and optimum both write
that naming; older exports write ``past_{i}`` / ``present_{i}`` holding key and value in one
tensor, or ``past_key_{i}`` / ``present_key_{i}``). :func:`decoder_io` reads the graph's inputs
and outputs, pairs every past tensor with its present tensor by (layer, key/value) and names the
other roles (``input_ids``, ``attention_mask``, ``position_ids``, ``logits``) and the symbolic
dims (batch, new tokens, past length, total length). The generation profiler and the LLM
comparison feed ``present.*`` back as ``past_key_values.*`` through :meth:`DecoderIO.next_past`
and build each step's feeds with :meth:`DecoderIO.step_feeds`.

Example:
    >>> from onnx_lab.core.derived import with_derived
    >>> from onnx_lab.core.llm import decoder_io
    >>> from onnx_lab.core.source import load_source
    >>> model = load_source("sample:tiny_llm")
    >>> io = decoder_io(model)
    >>> io.num_layers, io.cache[0].past, io.cache[0].present
    (2, 'past_key_values.0.key', 'present.0.key')
    >>> past = io.empty_cache(batch=1, dims=with_derived(model, {}))  # kv_cache_dim: 16
    >>> feeds = io.step_feeds(np.array([[5, 6, 7]]), past)
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from onnx_lab.core.shapes import Dim, dtype_name, resolve_dim, shape_tuple
from onnx_lab.errors import CacheError

if TYPE_CHECKING:
    from onnx_lab.core.model import LabModel

logger = logging.getLogger(__name__)

__all__ = ["CacheSlot", "DecoderIO", "decoder_io", "require_decoder_io", "cache_key",
           "config_count", "genai_config", "max_context"]

#: Graph-input names of the non-cache roles, in order of preference (lower-cased).
_ROLE_NAMES = {
    "input_ids": ("input_ids", "input", "tokens", "ids"),
    "attention_mask": ("attention_mask", "mask", "attn_mask"),
    "position_ids": ("position_ids", "positions"),
    "cache_position": ("cache_position",),
    "inputs_embeds": ("inputs_embeds", "input_embeds", "inputs_embeddings"),
}
_KINDS = {"key": "key", "k": "key", "keys": "key", "value": "value", "v": "value",
          "values": "value"}


@dataclass(frozen=True)
class CacheSlot:
    """One cache tensor of one layer: the graph input it is read from and the graph output
    its grown version is written to.

    Attributes:
        layer: the layer index written in the names.
        kind: ``"key"``, ``"value"``, or ``"kv"`` for a tensor holding both; prefixed
            ``"cross."`` for an encoder-decoder's cross-attention cache.
        past: the graph input (``past_key_values.0.key``).
        present: the graph output (``present.0.key``).
        shape: the input's declared shape (ints, dim names, None for unnamed dims).
        dtype: the input's element type (``"float32"``, ``"float16"``...).
        past_axis: the axis of that shape that grows with each token.
    """

    layer: int
    kind: str
    past: str
    present: str
    shape: tuple[Dim, ...] | None
    dtype: str | None
    past_axis: int | None


@dataclass(frozen=True)
class DecoderIO:
    """The roles of a KV-cache decoder's inputs and outputs (see :func:`decoder_io`).

    Attributes:
        cache: one :class:`CacheSlot` per past/present pair, by layer then key, value.
        input_ids, attention_mask, position_ids, cache_position, inputs_embeds: the graph
            inputs with those roles, None where the model has none (a decoder fed
            embeddings has ``inputs_embeds`` [batch, new tokens, hidden] instead of ids).
        logits: the output with the next-token scores (``logits``, else the first output
            that is not a cache tensor).
        other_inputs: graph inputs with none of these roles (the caller must feed them),
            such as an encoder-decoder's cross-attention cache when the model returns no
            present for it (``past_key_values.0.encoder.key``: computed once, fed as is).
        batch_dim, sequence_dim, past_dim, total_dim: the symbolic dim names of the batch,
            the new tokens of a step, the cached tokens and past + new (None where a model
            fixes that dim or does not show it).
        naming: which naming was recognised: ``"past_key_values/present"`` (genai, optimum),
            ``"past/present"`` or ``"other"``.
    """

    cache: tuple[CacheSlot, ...]
    input_ids: str | None
    attention_mask: str | None
    position_ids: str | None
    cache_position: str | None
    inputs_embeds: str | None
    logits: str | None
    other_inputs: tuple[str, ...]
    batch_dim: str | None
    sequence_dim: str | None
    past_dim: str | None
    total_dim: str | None
    naming: str
    input_dtypes: Mapping[str, str | None] = field(default_factory=dict, repr=False)

    @property
    def num_layers(self) -> int:
        return len({s.layer for s in self.cache})

    @property
    def past_names(self) -> list[str]:
        return [s.past for s in self.cache]

    @property
    def present_names(self) -> list[str]:
        return [s.present for s in self.cache]

    def next_past(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The next step's cache feeds: each ``present`` output under its ``past`` name.

        Raises:
            CacheError: ``outputs`` lacks a present tensor.
        """
        missing = [s.present for s in self.cache if s.present not in outputs]
        if missing:
            raise CacheError(f"The run returned no {', '.join(map(repr, missing[:4]))}"
                             f"{' ...' if len(missing) > 4 else ''}: the cache cannot be fed "
                             "back.", fix="Run the session with every present.* output.")
        return {s.past: outputs[s.present] for s in self.cache}

    def empty_cache(self, batch: int = 1, dims: Mapping[str, int] | None = None
                    ) -> dict[str, np.ndarray]:
        """Zero-length cache feeds (past length 0) for a prefill.

        Args:
            batch: the batch size.
            dims: sizes of the other symbolic dims of the cache (heads, head size): pass
                ``onnx_lab.core.derived.with_derived(model, lab.dims)``, which adds the ones
                the model determines (genai's ``kv_cache_dim``).

        Raises:
            CacheError: a cache dim has no size in ``dims``.
        """
        dims = dict(dims or {})
        out: dict[str, np.ndarray] = {}
        for s in self.cache:
            if s.shape is None:
                raise CacheError(f"Cache input {s.past!r} declares no shape, so an empty cache "
                                 "cannot be built.", fix="Feed the cache tensors yourself.")
            shape = []
            for axis, d in enumerate(s.shape):
                if axis == s.past_axis:
                    shape.append(0)
                elif isinstance(d, int):
                    shape.append(d)
                elif d == self.batch_dim or (d is None and axis == 0):
                    shape.append(batch)
                elif isinstance(d, str) and isinstance(resolve_dim(d, dims), int):
                    shape.append(int(resolve_dim(d, dims)))  # a name or an expression
                else:
                    raise CacheError(
                        f"Cache input {s.past!r} {list(s.shape)}: dim {axis} ({d!r}) has no "
                        "size.", fix=f"Pass dims={{{d!r}: ...}} (the head size or heads).")
            out[s.past] = np.zeros(shape, dtype=np.dtype(s.dtype or "float32"))
        return out

    def step_feeds(self, input_ids: np.ndarray, past: Mapping[str, np.ndarray], *,
                   past_length: int | None = None, attention_mask: np.ndarray | None = None,
                   extra: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Feeds of one step: the new tokens, the cache, and the mask/positions they imply.

        ``attention_mask`` defaults to ones over past + new tokens, ``position_ids`` to
        ``past_length .. past_length + new - 1`` per row (``cache_position`` likewise), each in
        the dtype the model declares.

        Args:
            input_ids: [batch, new tokens] int.
            past: the cache feeds (from :meth:`empty_cache` or :meth:`next_past`).
            past_length: tokens already cached; read from ``past`` when not given.
            attention_mask: an explicit mask [batch, past + new] (padding).
            extra: feeds for :attr:`other_inputs`.

        Raises:
            CacheError: ``past`` lacks a cache input.
        """
        ids = np.asarray(input_ids)
        if ids.ndim == 1:
            ids = ids[None, :]
        batch, new = ids.shape
        missing = [n for n in self.past_names if n not in past]
        if missing:
            raise CacheError(f"No feed for cache input(s) {', '.join(map(repr, missing[:4]))}.",
                             fix="Start from io.empty_cache(...) and continue with "
                                 "io.next_past(outputs).")
        if past_length is None:
            s = self.cache[0]
            past_length = int(past[s.past].shape[s.past_axis]) if s.past_axis is not None else 0
        feeds: dict[str, np.ndarray] = dict(past)
        if self.input_ids:
            feeds[self.input_ids] = ids.astype(self._dtype(self.input_ids, np.int64))
        if self.attention_mask:
            mask = np.ones((batch, past_length + new)) if attention_mask is None \
                else np.asarray(attention_mask)
            feeds[self.attention_mask] = mask.astype(self._dtype(self.attention_mask, np.int64))
        positions = np.arange(past_length, past_length + new)
        if self.position_ids:
            feeds[self.position_ids] = np.broadcast_to(positions, (batch, new)).astype(
                self._dtype(self.position_ids, np.int64))
        if self.cache_position:
            feeds[self.cache_position] = positions.astype(self._dtype(self.cache_position,
                                                                      np.int64))
        feeds.update(extra or {})
        return feeds

    def _dtype(self, name: str, default: type) -> np.dtype:
        dt = self.input_dtypes.get(name)
        return np.dtype(dt) if dt else np.dtype(default)


def cache_key(name: str) -> tuple[str, int, str] | None:
    """(role, layer, kind) of a cache tensor's name, None when the name is not one.

    role is ``"past"`` or ``"present"``; kind ``"key"``, ``"value"`` or ``"kv"``.

    Example:
        >>> cache_key("past_key_values.3.value"), cache_key("present_0"), cache_key("logits")
        (('past', 3, 'value'), ('present', 0, 'kv'), None)
    """
    low = name.lower()
    # "past_key_values" is one word (the role), not a key and a value.
    low = re.sub(r"past_key_values?", "past", low)
    low = re.sub(r"present_key_values?", "present", low)
    tokens = [t for t in re.split(r"[^a-z0-9]+", low) if t]
    role = next((t for t in tokens if t in ("past", "present")), None)
    if role is None:
        return None
    layers = [int(t) for t in tokens if t.isdigit()]
    if len(layers) != 1:
        return None
    kinds = {_KINDS[t] for t in tokens if t in _KINDS}
    if len(kinds) > 1:
        return None
    kind = kinds.pop() if kinds else "kv"
    # Encoder-decoder models (Whisper, T5 from optimum) hold two caches per layer: the
    # decoder's own (grows) and the cross-attention one over the encoder (fixed).
    if any(t in ("encoder", "cross") for t in tokens):
        kind = f"cross.{kind}"
    return role, layers[0], kind


def _pick(names: Sequence[str], wanted: Sequence[str]) -> str | None:
    low = {n.lower(): n for n in names}
    for w in wanted:
        if w in low:
            return low[w]
    return None


def decoder_io(model: LabModel) -> DecoderIO | None:
    """The KV-cache roles of ``model``'s inputs and outputs; None when it has no cache.

    Pairs every past input with the present output of the same layer and kind (key, value or
    both in one tensor). Cached on the model.

    Raises:
        CacheError: cache inputs or outputs that cannot be paired (a past without a present or
            the reverse, two tensors for one layer and kind, a key without its value), named.

    Example:
        >>> io = decoder_io(lab.model)
        >>> io.past_dim, [s.present for s in io.cache][:2]
        ('past_sequence_length', ['present.0.key', 'present.0.value'])
    """
    return model.cached(("decoder_io",), lambda: _decoder_io(model))


def require_decoder_io(model: LabModel) -> DecoderIO:
    """:func:`decoder_io`, raising :class:`CacheError` when the model has no KV cache."""
    io = decoder_io(model)
    if io is None:
        inputs = [v.name for v in model.graph.inputs if v.name not in model.graph.initializers]
        past = [n for n in inputs if (cache_key(n) or ("",))[0] == "past"]
        present = [v.name for v in model.graph.outputs
                   if (cache_key(v.name) or ("",))[0] == "present"]
        if past or present:
            have, lack = (("inputs", "outputs"), ("outputs", "inputs"))[bool(present)]
            names = past or present
            raise CacheError(
                f"The model has cache {have} {', '.join(map(repr, names[:4]))}"
                f"{' ...' if len(names) > 4 else ''} but no cache {lack} to pair them with: "
                "the cache cannot be fed back.",
                fix="Export with the present.* outputs (use_cache=True) and the "
                    "past_key_values.* inputs.")
        # (a block whose inputs are the Attention op's own past_key/past_value is no decoder
        # of tokens: "no KV-cache inputs (its inputs are [..., 'past_key', ...])" read as
        # a contradiction)
        unpaired = [n for n in inputs if "past" in n.lower()]
        why = (f": {', '.join(map(repr, unpaired[:4]))} "
               f"{'is' if len(unpaired) == 1 else 'are'} not named per layer "
               "(past_key_values.<layer>.key/.value, past.<layer>.key...)" if unpaired else "")
        raise CacheError(
            f"The model has no KV-cache inputs of a decoder (its inputs are {inputs[:6]}"
            f"{' ...' if len(inputs) > 6 else ''}){why}: it is not a decoder exported with a "
            "cache.",
            fix="Export the whole decoder with use_cache / past_key_values (onnxruntime-genai's "
                "builder or optimum's '-with-past' tasks); a single attention block has no "
                "tokens to generate.")
    return io


def _decoder_io(model: LabModel) -> DecoderIO | None:
    g = model.graph
    inputs = [v for v in g.inputs if v.name not in g.initializers]
    outputs = list(g.outputs)
    past: dict[tuple[int, str], list] = {}
    present: dict[tuple[int, str], list] = {}
    static: list[str] = []  # cross-attention caches fed without a present to pair
    for v in inputs:
        key = cache_key(v.name)
        if key is not None and key[0] == "past":
            past.setdefault(key[1:], []).append(v)
    for v in outputs:
        key = cache_key(v.name)
        if key is not None and key[0] == "present" and key[2].startswith("cross."):
            break
    else:  # no cross-attention present outputs: the encoder's cache is an input only
        for k in [k for k in past if k[1].startswith("cross.")]:
            static += [v.name for v in past.pop(k)]
    for v in outputs:
        key = cache_key(v.name)
        if key is not None and key[0] == "present":
            present.setdefault(key[1:], []).append(v)
    if not past or not present:
        # Past-like inputs without any present-like output (or the reverse) are not a KV cache
        # (a streaming model's "past_state" input...): not a decoder, no false alarm.
        return None
    problems: list[str] = []
    for side, found in (("input", past), ("output", present)):
        for (layer, kind), vs in sorted(found.items()):
            if len(vs) > 1:
                problems.append(f"{len(vs)} cache {side}s for layer {layer} {kind}: "
                                f"{', '.join(repr(v.name) for v in vs)}")
    lonely_past = sorted(k for k in past if k not in present)
    lonely_present = sorted(k for k in present if k not in past)
    if lonely_past:
        problems.append("no present output for " + ", ".join(
            repr(past[k][0].name) for k in lonely_past))
    if lonely_present:
        problems.append("no past input for " + ", ".join(
            repr(present[k][0].name) for k in lonely_present))
    kinds_by_layer: dict[int, set[str]] = {}
    for layer, kind in past:
        kinds_by_layer.setdefault(layer, set()).add(kind.removeprefix("cross."))
    for layer, kinds in sorted(kinds_by_layer.items()):
        if kinds not in ({"key", "value"}, {"kv"}):
            problems.append(f"layer {layer} has cache tensors of kinds {sorted(kinds)} "
                            "(expected a key and a value, or one tensor holding both)")
    if problems:
        raise CacheError(
            "The KV-cache inputs and outputs cannot be paired: " + "; ".join(problems) + ".",
            fix="Each past_key_values.N.key/.value input needs the present.N.key/.value "
                "output of the same layer (and the reverse); rename or re-export the model.")
    in_names = [v.name for v in inputs]
    roles = {role: _pick(in_names, names) for role, names in _ROLE_NAMES.items()}
    slots: list[CacheSlot] = []
    order = {"key": 0, "value": 1, "kv": 0, "cross.key": 2, "cross.value": 3, "cross.kv": 2}
    dims_seen: dict[str, list[str]] = {"past": [], "total": []}
    for layer, kind in sorted(past, key=lambda k: (k[0], order[k[1]])):
        pv, ov = past[(layer, kind)][0], present[(layer, kind)][0]
        shape = shape_tuple(pv.shape)
        out_shape = shape_tuple(ov.shape)
        axis = _growing_axis(shape, out_shape)
        # A cross-attention cache does not grow (its length is the encoder's): it names
        # neither the past nor the total length (T5's would say encoder_sequence_length).
        grows = not kind.startswith("cross.")
        if grows and axis is not None and shape is not None and isinstance(shape[axis], str):
            dims_seen["past"].append(shape[axis])
        if grows and axis is not None and out_shape is not None \
                and isinstance(out_shape[axis], str):
            dims_seen["total"].append(out_shape[axis])
        slots.append(CacheSlot(layer, kind, pv.name, ov.name, shape, dtype_name(pv.dtype), axis))
    cache_names = {s.past for s in slots}  # a static encoder cache stays in other_inputs
    known = cache_names | {n for n in roles.values() if n}
    logits = _pick([v.name for v in outputs], ("logits",)) or next(
        (v.name for v in outputs if v.name not in {s.present for s in slots}), None)
    ids_shape = next((shape_tuple(v.shape) for v in inputs if v.name == roles["input_ids"]),
                     None)
    if ids_shape is None:  # a decoder fed embeddings [batch, new tokens, hidden]
        emb = next((shape_tuple(v.shape) for v in inputs if v.name == roles["inputs_embeds"]),
                   None)
        ids_shape = emb[:2] if emb is not None and len(emb) == 3 else None
    batch_dim = seq_dim = None
    if ids_shape is not None and len(ids_shape) == 2:
        batch_dim = ids_shape[0] if isinstance(ids_shape[0], str) else None
        seq_dim = ids_shape[1] if isinstance(ids_shape[1], str) else None
    if batch_dim is None and slots and slots[0].shape and isinstance(slots[0].shape[0], str):
        batch_dim = slots[0].shape[0]
    total_dim = _most_common(dims_seen["total"])
    mask_shape = next((shape_tuple(v.shape) for v in inputs if v.name == roles["attention_mask"]),
                      None)
    if total_dim is None and mask_shape is not None and len(mask_shape) == 2 \
            and isinstance(mask_shape[1], str):
        total_dim = mask_shape[1]
    naming = "past_key_values/present" if all(
        s.past.lower().startswith("past_key_values") for s in slots) else (
        "past/present" if all(s.past.lower().startswith("past") for s in slots) else "other")
    return DecoderIO(
        cache=tuple(slots), input_ids=roles["input_ids"], attention_mask=roles["attention_mask"],
        position_ids=roles["position_ids"], cache_position=roles["cache_position"],
        inputs_embeds=roles["inputs_embeds"],
        logits=logits, other_inputs=tuple(n for n in in_names if n not in known),
        batch_dim=batch_dim, sequence_dim=seq_dim, past_dim=_most_common(dims_seen["past"]),
        total_dim=total_dim, naming=naming,
        input_dtypes={v.name: dtype_name(v.dtype) for v in inputs})


def _growing_axis(past: tuple[Dim, ...] | None, present: tuple[Dim, ...] | None) -> int | None:
    """The axis where past and present differ (past length vs total length).

    Declared shapes name both (``past_sequence_length`` / ``total_sequence_length``); where
    they do not, a cache is [batch, heads, length, head_size] (axis -2), or
    [2, batch, heads, length, head_size] for a combined key/value tensor.
    """
    if past is None:
        return None
    if present is not None and len(present) == len(past):
        differ = [i for i, (a, b) in enumerate(zip(past, present, strict=True)) if a != b]
        if len(differ) == 1:
            return differ[0]
    return len(past) - 2 if len(past) >= 3 else None


def _most_common(names: list[str]) -> str | None:
    return max(set(names), key=names.count) if names else None


def config_count(value: object) -> bool:
    """Whether a number read from genai_config.json is a count (a positive int): JSON's
    ``true`` is an int to Python, and a context_length of ``true`` was taken as 1 token."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def genai_config(model: LabModel) -> dict | None:
    """onnxruntime-genai's ``genai_config.json`` beside the model file, parsed (its path under
    ``"_path"``); None when there is none or it cannot be read (logged). Cached on the model.

    Its ``model.decoder`` holds ``head_size``, ``num_key_value_heads``, ``num_hidden_layers``,
    and ``model.context_length`` the longest sequence the model was built for.
    """
    def read() -> dict | None:
        if model.path is None:
            return None
        path = model.path.parent / "genai_config.json"
        if not path.is_file():
            return None
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            logger.warning("Cannot read %s (%s); dims are not taken from it.", path, e)
            return None
        # A file beside the model is as hostile as the model: "model" or "model.decoder"
        # that is not an object (a string, a list) made every .get below raise
        # AttributeError, and open() of any model with a symbolic dim in that folder with it.
        section = cfg.get("model") if isinstance(cfg, dict) else None
        decoder = section.get("decoder") if isinstance(section, dict) else None
        if not isinstance(cfg, dict) or not isinstance(section or {}, dict) \
                or not isinstance(decoder or {}, dict):
            logger.warning("%s is not onnxruntime-genai's config (its 'model' and "
                           "'model.decoder' are not objects); dims are not taken from it.",
                           path)
            return None
        if (decoder or {}).get("filename") not in (None, model.path.name):
            return None  # the config of another file in the folder (a vision encoder...)
        return {**cfg, "_path": str(path)}

    return model.cached(("genai_config",), read)


def max_context(model: LabModel) -> tuple[int, str] | None:
    """The longest sequence (past + new tokens) the decoder can run, and where that comes from:
    ``model.context_length`` of genai_config.json, else the rows of the rotary cos/sin cache
    its attention reads (positions past them have no rotation) or of a position table
    indexed by ``position_ids`` (GPT-2's ``wpe``), the smallest. None when none says.

    Example:
        >>> max_context(load_source("sample:tiny_llm"))
        (128, "cos_cache of GroupQueryAttention '/model/layers.0/attn/GroupQueryAttention' (128 positions)")
    """
    cfg = genai_config(model)
    length = ((cfg or {}).get("model") or {}).get("context_length")
    if config_count(length):
        return length, f"{cfg['_path']}: model.context_length"
    best: tuple[int, str] | None = None
    for node in model.graph:
        slot = {"GroupQueryAttention": 7, "RotaryEmbedding": 2}.get(node.op_type)
        if node.op_type == "RotaryEmbedding" and node.domain in ("", "ai.onnx"):
            slot = 1
        if slot is None or len(node.inputs) <= slot or node.inputs[slot] is None:
            continue
        if node.op_type == "GroupQueryAttention" and not (
                node.attributes.get("do_rotary") and node.attributes["do_rotary"].value):
            continue
        cos = node.inputs[slot].const_value
        if cos is None or len(cos.shape) != 2:
            continue
        rows = int(cos.shape[0])
        if best is None or rows < best[0]:
            best = (rows, f"cos_cache of {node.op_type} {node.name!r} ({rows} positions)")
    # a learned position table indexed by position_ids (GPT-2's wpe; inside the If branches
    # of a merged decoder too): a position past its rows fails in the Gather
    g = model.graph
    pos = _pick([v.name for v in g.inputs if v.name not in g.initializers],
                _ROLE_NAMES["position_ids"])
    for graph in model.ir.graphs() if pos else ():
        for node in graph:
            if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") \
                    or len(node.inputs) < 2 or node.inputs[1] is None \
                    or node.inputs[1].name != pos or node.inputs[0] is None:
                continue
            table = node.inputs[0].const_value
            if table is None or len(table.shape) != 2:
                continue
            rows = int(table.shape[0])
            if best is None or rows < best[0]:
                best = (rows, f"{node.inputs[0].name!r} has {rows} rows (position table "
                              f"indexed by {pos!r} in {node.name!r})")
    return best
