"""The static cost of generating with a KV-cache decoder: the cache's size at any context
(:func:`kv_cache_bytes`) and a prefill plus one decode step (:func:`generation_cost`).

Example:
    >>> g = generation_cost("sample:tiny_llm", prompt=32, context=128)
    >>> g.table()[["phase", "flops", "kv_cache_bytes"]]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.analysis.cost import Cost, cost
from onnx_lab.core.branches import branch_switches
from onnx_lab.core.derived import with_derived
from onnx_lab.core.llm import max_context, require_decoder_io
from onnx_lab.core.shapes import resolve_dim
from onnx_lab.core.source import resolve
from onnx_lab.core.units import itemsize
from onnx_lab.errors import CacheError, DimError, InputError

__all__ = ["kv_cache_bytes", "generation_cost", "GenerationCost", "PHASE_COLUMNS"]


def kv_cache_bytes(model: Any, context: int, *, batch: int = 1,
                   dims: Mapping[str, int] | None = None) -> int:
    """Bytes of a decoder's whole KV cache (every layer's keys and values) holding
    ``context`` tokens per sequence, in the cache's own dtype.

    Heads and head size come from the model's declared cache shape, the dims it determines
    (``kv_cache_dim``: :mod:`onnx_lab.core.derived`) or ``dims``.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        context: tokens in the cache (past + new), ``>= 0``.
        batch: sequences.
        dims: sizes of other symbolic cache dims.

    Raises:
        CacheError: the model has no KV cache, or its caches cannot be paired.
        DimError: a cache dim has no size.

    Example:
        >>> kv_cache_bytes("sample:tiny_llm", 128)  # 2 layers x K,V x 2 heads x 128 x 16 x 4 B
        65536
    """
    for name, v in (("context", context), ("batch", batch)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise InputError(f"{name} must be an int >= 0, got {v!r}.",
                             fix=f"Pass {name}=1 or another count of tokens/sequences.")
    lm, given, _ = resolve(model, dims)
    io = require_decoder_io(lm)
    sizes = with_derived(lm, given)
    total = 0
    for slot in io.cache:
        if slot.shape is None:
            raise DimError(f"Cache input {slot.past!r} declares no shape.",
                           fix="Give it one (lab.set_input_shape) to size the cache.")
        n = 1
        for axis, d in enumerate(slot.shape):
            if axis == slot.past_axis:
                n *= int(context)
            elif isinstance(d, int):
                n *= d
            elif d == io.batch_dim:
                n *= int(batch)
            elif isinstance(d, str) and isinstance(resolve_dim(d, sizes), int):
                n *= int(resolve_dim(d, sizes))  # a name, or an expression of given names
            else:
                raise DimError(f"Cache input {slot.past!r} {list(slot.shape)}: dim {axis} "
                               f"({d!r}) has no size.", fix=f"Pass dims={{{d!r}: ...}}.")
        total += n * (itemsize(slot.dtype) or 4)
    return int(total)


PHASE_COLUMNS = ["phase", "batch", "new_tokens", "context", "flops", "macs", "flops_per_token",
                 "param_bytes", "activation_bytes", "kv_cache_bytes", "bytes_moved",
                 "intensity", "unknown_nodes"]


@dataclass
class GenerationCost:
    """Result of :func:`generation_cost`: the static cost of a prefill and of one decode step.

    Attributes:
        prefill: the :class:`Cost` of the prompt's run (``prompt`` new tokens, empty cache).
        decode: the :class:`Cost` of one decode step at ``context`` (one new token attending
            to ``context`` tokens: ``context - 1`` cached).
        prompt, context, batch: what was asked.
        kv_cache_bytes: the cache after the decode step (``context`` tokens).
        kv_bytes_per_token: what each token adds to the cache (all layers, K and V).
    """

    prefill: Cost
    decode: Cost
    prompt: int
    context: int
    batch: int
    kv_cache_bytes: int
    kv_bytes_per_token: float

    def table(self) -> pd.DataFrame:
        """One row per phase (``prefill``, ``decode``). Columns: phase, batch, new_tokens,
        context (tokens attended after the step), flops, macs, flops_per_token, param_bytes
        (weights read), activation_bytes (node outputs), kv_cache_bytes (the cache the step
        returns), bytes_moved (every node's inputs and outputs: weights, cache and
        activations), intensity (flops / bytes_moved), unknown_nodes."""
        rows = []
        for phase, c, new, ctx in (("prefill", self.prefill, self.prompt, self.prompt),
                                   ("decode", self.decode, 1, self.context)):
            t = c.total
            moved = float(c.nodes.input_bytes.sum() + c.nodes.output_bytes.sum())
            rows.append((phase, self.batch, new, ctx, t["flops"], t["macs"],
                         t["flops"] / (new * self.batch) if new else np.nan,
                         t["param_bytes"], t["activation_bytes"], t["kv_cache_bytes"], moved,
                         t["flops"] / moved if moved else np.nan, t["unknown_nodes"]))
        return pd.DataFrame(rows, columns=PHASE_COLUMNS)

    def __repr__(self) -> str:
        p, d = self.prefill.total, self.decode.total
        return (f"<GenerationCost prefill {self.prompt} tokens: {p['flops'] / 1e9:.3f} GFLOPs; "
                f"decode at context {self.context}: {d['flops'] / 1e6:.3f} MFLOPs/token; "
                f"KV cache {self.kv_cache_bytes:,} B ({self.kv_bytes_per_token:,.0f} B/token)>")

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


def generation_cost(model: Any, prompt: int, context: int | None = None, *, batch: int = 1,
                    dims: Mapping[str, int] | None = None) -> GenerationCost:
    """The static cost of generating with a KV-cache decoder: a prefill of ``prompt`` tokens
    (empty cache) and one decode step at ``context`` (one new token, ``context - 1`` cached).

    The dims of each phase are set from the decoder's own dim names (batch, new tokens, past
    length; the total length and head size are derived), so this is ``cost(model, dims=...)``
    twice with the right dims. A merged decoder (optimum's ``If`` on ``use_cache_branch``)
    counts the branch each phase runs: the no-cache branch for the prefill, the cache branch
    for the decode step.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        prompt: tokens of the prompt, ``>= 1``.
        context: tokens the decode step attends to (default ``prompt + 1``: the first token
            generated after the prompt).
        batch: sequences.
        dims: values for other symbolic dims.

    Raises:
        CacheError: the model has no KV cache, its caches cannot be paired, or ``context``
            exceeds the longest sequence the model can run (genai_config.json's context_length
            or its rotary cache).

    Example:
        >>> g = generation_cost("sample:tiny_llm", prompt=32, context=128)
        >>> g.table()[["phase", "flops", "kv_cache_bytes"]]
    """
    context = prompt + 1 if context is None else context
    for name, v, low in (("prompt", prompt, 1), ("context", context, 1), ("batch", batch, 1)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise InputError(f"{name} must be an int >= {low}, got {v!r}.",
                             fix=f"Pass {name}=1 or more.")
    lm, given, shapes = resolve(model, dims)
    io = require_decoder_io(lm)
    longest = max_context(lm)
    for what, n in (("prompt", prompt), ("context", context)):
        if longest is not None and n > longest[0]:
            raise CacheError(f"A {what} of {n} tokens is longer than the model's maximum of "
                             f"{longest[0]} ({longest[1]}).",
                             fix=f"Use at most {longest[0]} tokens.")
    missing = [label for label, d in (("new tokens", io.sequence_dim),
                                      ("past length", io.past_dim)) if d is None]
    if missing:
        raise DimError(f"The decoder's {' and '.join(missing)} dim is not symbolic: its phases "
                       "cannot be set.", fix="Use cost(model, dims=...) with the shapes it has.")
    base = dict(given)
    if io.batch_dim:
        base[io.batch_dim] = batch
    # A merged decoder (optimum's If on use_cache_branch) runs one branch per phase: the
    # no-cache branch for the prefill, the cache branch for a decode step. Both counted made
    # each phase cost twice the with-past export of the same weights.
    pre_br = {sw.input: not sw.cache_value for sw in branch_switches(lm)
              if sw.cache_value is not None}
    dec_br = {name: not value for name, value in pre_br.items()}
    prefill = cost(lm, {**base, io.sequence_dim: prompt, io.past_dim: 0}, shapes,
                   branches=pre_br or None)
    decode = cost(lm, {**base, io.sequence_dim: 1, io.past_dim: context - 1}, shapes,
                  branches=dec_br or None)
    kv = kv_cache_bytes(lm, context, batch=batch, dims=given)
    return GenerationCost(prefill=prefill, decode=decode, prompt=int(prompt),
                          context=int(context), batch=int(batch), kv_cache_bytes=kv,
                          kv_bytes_per_token=kv / context)
