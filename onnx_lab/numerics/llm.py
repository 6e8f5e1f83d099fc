"""Decoder LLMs compared as they generate: next-token metrics and the layers that lose most.

A quantized LLM (weight-only int4 above all) moves every activation by design, so an
element-wise verdict calls every layer out of tolerance. What matters is whether it still
predicts the same tokens, and where the precision goes. :func:`compare_llm` answers both:

1. **A sequence both sides see.** The tokens are given, or a seeded prompt continued greedily by
   the *reference* (``new_tokens``). Each side then runs once over the whole sequence with an
   empty KV cache (a prefill: teacher forcing on the reference's tokens, so both predict from
   the same context at every position).
2. **Next-token metrics** at every position (:func:`~onnx_lab.numerics.metrics.next_token_metrics`):
   top-1 agreement, top-5 overlap, KL(reference || candidate) and each side's perplexity on
   the same tokens, judged against the preset's :data:`~onnx_lab.numerics.metrics.NEXT_TOKEN`
   targets (``int4`` when a side holds MatMulNBits).
3. **Layer by layer** (:func:`onnx_lab.compare` on the same prefill, the ``int4`` preset's SQNR
   rules) and a **ranking** (:func:`sqnr_losses`): each node's *local* SQNR, the noise it adds
   beyond what its inputs bring, lowest first: the quantized MatMuls that lose most.

Inputs and outputs are found by :func:`onnx_lab.core.llm.decoder_io`, in both builders'
layouts: onnxruntime-genai (``input_ids``, ``attention_mask``, ``past_key_values.N.key`` ->
``present.N.key``, ``logits``) and optimum/torch exports (the same plus ``position_ids``). The
reference's continuation comes from :func:`greedy_decode`, the one decode loop of this module
(it feeds ``present.*`` back as ``past_key_values.*``).

Example:
    >>> import onnx_lab
    >>> c = onnx_lab.compare_llm("model_fp32.onnx", "model_int4.onnx", new_tokens=24)
    >>> c.metrics["top1_agreement"], c.metrics["kl_mean"], c.losses.head()
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.derived import with_derived
from onnx_lab.core.llm import decoder_io as core_decoder_io
from onnx_lab.core.llm import max_context
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import Resolved
from onnx_lab.core.values import is_constant
from onnx_lab.errors import CacheError, InputError, LabError, strict_keywords
from onnx_lab.numerics.compare import (
    Comparison,
    _check_known,
    _load,
    _session,
    compare,
    default_preset,
)
from onnx_lab.numerics.metrics import (
    NEXT_TOKEN,
    NEXT_TOKEN_COLUMNS,
    TIE_MARGIN,
    NextToken,
    Rule,
    get_preset,
    next_token_metrics,
    rule_for,
)
from onnx_lab.runtime.feeds import input_specs
from onnx_lab.runtime.session import (
    check_memory_of,
    make_session,
    resolve_providers,
    run_session,
)

logger = logging.getLogger(__name__)

__all__ = ["compare_llm", "LLMComparison", "DecoderIO", "decoder_io", "prefill_feeds",
           "greedy_decode", "Decode", "sqnr_losses", "POSITION_COLUMNS", "LOSS_COLUMNS",
           "layer_of"]

#: Columns of :attr:`LLMComparison.positions`.
POSITION_COLUMNS = ["sample", *NEXT_TOKEN_COLUMNS, "generated", "logits_max_abs",
                    "logits_within_rule"]
#: Columns of :attr:`LLMComparison.losses` (and of :func:`sqnr_losses`).
LOSS_COLUMNS = ["rank", "node_id", "op_type", "cand_op_type", "layer", "tensor", "sqnr_db",
                "sqnr_in_db", "local_sqnr_db", "quantized", "passed"]


# ---------------------------------------------------------------------------- decoder I/O
_LAYER = re.compile(r"(?:layers?|blocks?|\.h|/h|decoder\.layers)[._/](\d+)(?:[._/]|$)")


@dataclass(frozen=True)
class DecoderIO:
    """The roles a comparison needs: the KV-cache pairing of :func:`onnx_lab.core.llm.decoder_io`
    (None for a decoder without cache) plus the token input and the logits output.

    Attributes:
        cache: the core :class:`~onnx_lab.core.llm.DecoderIO` (None: no KV cache).
        tokens: the token-id input. logits: the logits output ``[batch, sequence, vocab]``.
        mask, positions: the attention-mask and position-id inputs (None when absent).
        extra: other inputs and the value they get (``num_logits_to_keep``: 0, all).
        branch: optimum's merged decoders' ``use_cache_branch`` (bool [1]): False for a run
            with an empty cache (the prefill), True once the cache holds tokens.
    """

    cache: Any
    tokens: str
    logits: str
    mask: str | None = None
    positions: str | None = None
    extra: tuple[tuple[str, int], ...] = ()
    branch: str | None = None

    @property
    def past(self) -> list[tuple[str, str]]:
        """(cache input, cache output) pairs."""
        return [] if self.cache is None else [(s.past, s.present) for s in self.cache.cache]


def decoder_io(model: LabModel) -> DecoderIO:
    """The token, mask, position, logits and cache tensors of a decoder LLM.

    Raises:
        InputError: no token-id input or no logits output (not a decoder LLM), an input of
            unknown role. CacheError: cache inputs and outputs that cannot be paired (named).

    Example:
        >>> decoder_io(lab.model).past[0]
        ('past_key_values.0.key', 'present.0.key')
    """
    core = core_decoder_io(model)
    names = [n for n, _, _ in input_specs(model)]
    outs = [v.name for v in model.graph.outputs]
    if core is not None:
        tokens, logits = core.input_ids, core.logits
        mask, positions, others = core.attention_mask, core.position_ids, core.other_inputs
    else:
        low = {n.lower(): n for n in names}
        tokens = next((low[k] for k in ("input_ids", "tokens", "ids") if k in low), None)
        logits = "logits" if "logits" in outs else (outs[0] if outs else None)
        mask = low.get("attention_mask")
        positions = low.get("position_ids")
        others = tuple(n for n in names if n not in (tokens, mask, positions))
    if tokens is None or logits is None:
        raise InputError(
            f"Not a decoder LLM: no token-id input and logits output found (inputs {names}, "
            f"outputs {outs}).", fix="compare_llm needs a model taking input_ids and "
            "returning logits; use onnx_lab.compare for other models.")
    extra = tuple((n, 0) for n in others if "logits_to_keep" in n)
    # optimum's merged decoder: an If on use_cache_branch (False: no cache, True: the cache)
    branch = next((n for n in others if n.lower() == "use_cache_branch"), None)
    unknown = [n for n in others if "logits_to_keep" not in n and n != branch]
    if unknown:
        raise InputError(f"Decoder input(s) {unknown} have no known role (token ids, "
                         "attention mask, position ids, KV cache).",
                         fix="Extract a model with the standard decoder inputs, or compare it "
                         "with onnx_lab.compare(feeds=...).")
    return DecoderIO(core, tokens, logits, mask, positions, extra, branch)


def _cache_dims(model: LabModel, io: DecoderIO, dims: Mapping[str, int]) -> dict[str, int]:
    """``dims`` plus the dims the graph fixes (the head size, KV heads: core/derived.py)."""
    return with_derived(model, dims)


def prefill_feeds(model: LabModel, tokens: Sequence[int], *, io: DecoderIO | None = None,
                  dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """The feeds of one run over ``tokens`` (batch 1) with an empty KV cache.

    Example:
        >>> feeds = prefill_feeds(lab.model, [1, 5, 9]); sorted(feeds)[:2]
    """
    io = io or decoder_io(model)
    specs = {n: (d, s) for n, d, s in input_specs(model)}
    ids = np.asarray(tokens, dtype=np.int64).reshape(1, -1)
    extra = {n: np.asarray(v, dtype=_dtype(specs, n, np.int64)) for n, v in io.extra}
    if io.branch:
        extra[io.branch] = np.array([False])  # an empty cache: the branch without it
    if io.cache is not None:
        past = io.cache.empty_cache(1, _cache_dims(model, io, dims or {}))
        return io.cache.step_feeds(ids, past, past_length=0, extra=extra)
    feeds: dict[str, np.ndarray] = {io.tokens: ids.astype(_dtype(specs, io.tokens, np.int64))}
    if io.mask:
        feeds[io.mask] = np.ones(ids.shape, dtype=_dtype(specs, io.mask, np.int64))
    if io.positions:
        feeds[io.positions] = np.arange(ids.shape[1], dtype=_dtype(
            specs, io.positions, np.int64)).reshape(1, -1)
    feeds.update(extra)
    return feeds


def _dtype(specs: Mapping[str, tuple], name: str, default: Any) -> np.dtype:
    d = specs[name][0]
    return np.dtype({"int32": np.int32, "int64": np.int64, "float16": np.float16,
                     "float32": np.float32, "float64": np.float64}.get(d or "", default))


# ---------------------------------------------------------------------------- decode loop
@dataclass
class Decode:
    """What :func:`greedy_decode` produced and how fast.

    Attributes:
        tokens: the prompt followed by the generated tokens.
        prompt_length: tokens of the prompt.
        prefill_ms: the first run (the whole prompt, empty cache).
        decode_ms: median time of one decode step's run (one token, the cache fed back;
            the memory check before it not counted), each step the first run at its length.
        tokens_per_s: decode throughput, ``1000 / decode_ms``.
    """

    tokens: list[int]
    prompt_length: int
    prefill_ms: float
    decode_ms: float
    tokens_per_s: float


def greedy_decode(model: LabModel, prompt: Sequence[int], new_tokens: int, *,
                  io: DecoderIO | None = None, dims: Mapping[str, int] | None = None,
                  providers: Any = None, opt_level: str = "all", session: Any = None
                  ) -> Decode:
    """Greedy generation: a prefill over ``prompt``, then one token per step with the cache
    fed back (``present.*`` -> ``past_key_values.*``); a model without cache reruns the whole
    sequence each step.

    Args:
        opt_level: onnxruntime's graph optimizations (``all``: as deployed).
        session: an existing session of ``model`` to reuse.

    Raises:
        RuntimeLoadError: onnxruntime cannot run the model (a prompt longer than its
            maximum length among the causes: the message says so).

    Example:
        >>> d = greedy_decode(lab.model, [1, 2, 3], 16); d.tokens[3:], d.tokens_per_s
    """
    io = io or decoder_io(model)
    sess = session or make_session(model, providers=resolve_providers(providers),
                                   opt_level=opt_level)
    names = [io.logits, *[p for _, p in io.past]]
    tokens = [int(t) for t in prompt]
    feeds = prefill_feeds(model, tokens, io=io, dims=dims)
    vals, prefill = _generate_run(sess, feeds, names, len(tokens))
    steps = 0
    times: list[float] = []  # the runs alone: the memory check before each (shape inference
    # at a new past length, 0.25 s) made a 5000 tokens/s decoder report 5-11
    for _ in range(new_tokens):
        tokens.append(int(np.argmax(vals[io.logits][0, -1])))
        if len(tokens) - len(prompt) >= new_tokens:
            break
        if io.cache is not None:
            feeds = _step_feeds(io, tokens[-1], vals, len(tokens) - 1)
        else:
            feeds = prefill_feeds(model, tokens, io=io, dims=dims)
        vals, seconds = _generate_run(sess, feeds, names, len(tokens), cached=len(
            tokens) - 1 if io.cache is not None else None)
        times.append(seconds)
        steps += 1
    decode = float(np.median(times)) if times else 0.0
    return Decode(tokens, len(prompt), prefill * 1e3, decode * 1e3,
                  1.0 / decode if steps and decode > 0 else math.nan)


def _step_feeds(io: DecoderIO, token: int, vals: Mapping[str, Any], past: int
                ) -> dict[str, np.ndarray]:
    """The feeds of one decode step: ``token`` with the cache the run before returned
    (``vals``' ``present.*``) as its ``past`` tokens."""
    extra = {n: np.asarray(v) for n, v in io.extra}
    if io.branch:
        extra[io.branch] = np.array([past > 0])  # the cache's branch once it holds tokens
    return io.cache.step_feeds(np.asarray([[int(token)]]), io.cache.next_past(vals),
                               past_length=past, extra=extra)


def _generate_run(sess: Any, feeds: Mapping[str, np.ndarray], names: list[str], length: int,
                  cached: int | None = None) -> tuple[dict[str, np.ndarray], float]:
    """One run's outputs and its seconds (the run alone, not the memory check before it).
    ``cached``: the run is a decode step with that many tokens in the KV cache."""
    try:
        # along the loop: a decode step grows with its cache, a full run with its tokens
        check_memory_of(sess, feeds, "the decoder model",
                        along=("step", cached) if cached is not None else ("full", length))
        t0 = time.perf_counter()
        values = run_session(sess, feeds, names, what="the decoder model", check_memory=False)
        return values, time.perf_counter() - t0
    except LabError as e:
        if cached is not None:
            raise type(e)(f"{e.problem} (a decode step: token {length} with {cached} tokens "
                          "in the KV cache; the runs before it, the prompt's among them, "
                          "ran)", fix="The model cannot run a generation step with its "
                          "cache: run the same step in onnxruntime to see it (a builder's or "
                          "onnxruntime's defect is reported so).") from e
        raise type(e)(f"{e.problem} (at a sequence of {length} tokens: a sequence longer than "
                      "the model's maximum length, its rotary or position table, fails so)",
                      fix="Use fewer tokens (prompt_length + new_tokens), or check the "
                      "feeds against lab.inputs.") from e


def _logits(model: LabModel, io: DecoderIO, tokens: Sequence[int], sess: Any,
            dims: Mapping[str, int]) -> np.ndarray:
    """``[positions, vocab]`` logits of one teacher-forced run over ``tokens``."""
    feeds = prefill_feeds(model, tokens, io=io, dims=dims)
    out = _generate_run(sess, feeds, [io.logits], len(tokens))[0][io.logits]
    out = np.asarray(out)
    if out.ndim == 3:
        out = out[0]
    if out.ndim != 2 or out.shape[0] != len(tokens):
        raise InputError(f"Output {io.logits!r} has shape {list(out.shape)}, not [1, "
                         f"{len(tokens)}, vocab]: the model does not return logits for every "
                         "position.", fix="Export the decoder with logits for the whole "
                         "sequence (no num_logits_to_keep / last-token slicing).")
    return out


def _cached_logits(model: LabModel, io: DecoderIO, tokens: Sequence[int], sess: Any,
                   dims: Mapping[str, int], prefill: int) -> np.ndarray:
    """``[positions, vocab]`` logits of ``tokens`` as generation computes them: a prefill
    over the first ``prefill`` tokens, then one token per run with the KV cache fed back
    (teacher-forced: the given tokens, not the model's picks). ``sess`` returns the logits
    and the ``present.*`` outputs. A model without a cache: one run over all of them."""
    if io.cache is None or prefill >= len(tokens):
        return _logits(model, io, tokens, sess, dims)
    feeds = prefill_feeds(model, tokens[:prefill], io=io, dims=dims)
    names = [io.logits, *[p for _, p in io.past]]
    vals = _generate_run(sess, feeds, names, prefill)[0]
    rows = [_logits_rows(vals, io, prefill)]
    for k in range(prefill, len(tokens)):
        vals = _generate_run(sess, _step_feeds(io, tokens[k], vals, k), names, k + 1,
                             cached=k)[0]
        rows.append(_logits_rows(vals, io, 1))
    return np.concatenate(rows, axis=0)


def _logits_rows(vals: Mapping[str, Any], io: DecoderIO, n: int) -> np.ndarray:
    """The ``[n, vocab]`` logits of a run over ``n`` new tokens (batch 1)."""
    out = np.asarray(vals[io.logits])
    if out.ndim == 3:
        out = out[0]
    if out.ndim != 2 or out.shape[0] < 1:
        raise InputError(f"Output {io.logits!r} has shape {list(out.shape)}, not [1, "
                         f"{n}, vocab].", fix="Export the decoder with logits for the whole "
                         "sequence (no num_logits_to_keep / last-token slicing).")
    return out[-n:]


# ---------------------------------------------------------------------------- SQNR ranking
def layer_of(name: str | None) -> int | None:
    """The decoder-layer number in a node or tensor name (``/model/layers.3/...``,
    ``transformer.h.3``, ``blocks_3``), or None."""
    if not isinstance(name, str):
        return None
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def _noise(sqnr_db: float) -> float:
    """Relative noise energy of an SQNR (0 for identical tensors)."""
    if sqnr_db is None or (isinstance(sqnr_db, float) and math.isnan(sqnr_db)):
        return math.nan
    return 0.0 if math.isinf(sqnr_db) and sqnr_db > 0 else 10 ** (-sqnr_db / 10)


# Attention ops whose outputs past the first are the KV cache they write (the past and the
# new keys or values, copied from a slice of their input): they add no noise of their own,
# and the whole packed QKV input's noise, subtracted from a slice's, ranked them first.
_CACHE_WRITERS = frozenset({"GroupQueryAttention", "MultiHeadAttention", "Attention",
                            "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention"})


def _float_name(dtype: Any) -> bool:
    """Whether a layers table's dtype is a float type (unknown counts as float)."""
    return not isinstance(dtype, str) or "float" in dtype


def sqnr_losses(layers: pd.DataFrame, model: LabModel, cand: LabModel | None = None
                ) -> pd.DataFrame:
    """Rank the nodes of a layerwise comparison by the precision each one loses.

    A node's ``local_sqnr_db`` is the SQNR its output would have if its inputs were exact:
    ``-10·log10(noise_out - Σ noise_in)``, with noise the relative noise energy
    ``10^(-sqnr/10)`` of its output and of each compared data input (a product or a sum of
    noisy inputs carries about the sum of their noise; what a node adds beyond it is its
    own). A healthy int4 MatMul sits near 20 dB; one whose 4-bit blocks an outlier weight
    ruined drops to a few dB whatever its depth, while the plain SQNR of every later tensor
    falls too.

    Args:
        layers: :attr:`Comparison.layers` (tensor, node_id, sqnr_db, cand_node_id...).
        model: the reference model (its index gives each node's inputs).
        cand: the candidate, for ``cand_op_type`` (``MatMulNBits`` where quantized).

    Returns:
        One row per compared float node output (not the ``present.*`` outputs of attention
        ops, which copy their inputs), lowest ``local_sqnr_db`` first (:data:`LOSS_COLUMNS`):
        rank, node_id, op_type, cand_op_type, layer (decoder-layer number from the name, or
        None), tensor, sqnr_db, sqnr_in_db (of the summed input
        noise; inf: exact inputs), local_sqnr_db (inf: no noise added; NaN, ranked last:
        an input of the node has no counterpart to compare), quantized (the candidate's node
        is a weight-only quantized op), passed.

    Example:
        >>> sqnr_losses(c.layers, ref_lab.model).head(3)
    """
    if not len(layers):
        return pd.DataFrame(columns=LOSS_COLUMNS)
    idx = model.index
    sq = dict(zip(layers["tensor"], layers["sqnr_db"].astype(float)))
    rows = []
    for r in layers.itertuples(index=False):
        nid = r.node_id
        if not isinstance(nid, str) or nid not in idx.entries:
            continue
        if not _float_name(getattr(r, "dtype", None)):
            continue  # packed int4 bytes (a tied lm_head's weight reshaped): no signal
        node = idx.node(nid)
        if node.op_type in _CACHE_WRITERS and node.outputs and r.tensor != node.outputs[0].name:
            continue  # a present.* output: the past and a slice of the packed QKV, copied
        ins = [v.name for v in node.inputs if v is not None and v.name
               and not is_constant(v, stored=True)]
        noise_in = sum(_noise(sq[n]) for n in ins if n in sq and not math.isnan(sq[n]))
        noise_out = _noise(float(r.sqnr_db))
        if math.isnan(noise_out):
            continue
        added = noise_out - noise_in
        local = math.inf if added <= 0 else -10 * math.log10(added)
        # An input computed by the graph but not compared (no counterpart): what the node
        # adds cannot be told from what it receives; it is not ranked.
        if any(n not in sq and idx.producer.get(n) is not None for n in ins):
            local = math.nan
        cand_op = None
        if cand is not None and isinstance(r.cand_node_id, str) \
                and r.cand_node_id in cand.index.entries:
            cand_op = cand.index.node(r.cand_node_id).op_type
        if cand_op is None and cand is not None:
            cand_op = _quantized_twin(cand, nid)
        rows.append({"node_id": nid, "op_type": r.op_type, "cand_op_type": cand_op,
                     "layer": layer_of(nid) if layer_of(nid) is not None else layer_of(r.tensor),
                     "tensor": r.tensor, "sqnr_db": float(r.sqnr_db),
                     "sqnr_in_db": math.inf if noise_in == 0 else -10 * math.log10(noise_in),
                     "local_sqnr_db": local,
                     "quantized": cand_op in ("MatMulNBits", "GatherBlockQuantized"),
                     "passed": bool(r.passed)})
    df = pd.DataFrame(rows, columns=LOSS_COLUMNS[1:])
    df = df.sort_values(["local_sqnr_db", "sqnr_db"], kind="stable").reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    return df


def _quantized_twin(cand: LabModel, nid: str) -> str | None:
    """The op of the candidate's node named after ``nid`` by onnxruntime's quantizer
    (``<name>_Q4``, ``<name>_Q8``), where alignment paired the tensor by name only."""
    for suffix in ("_Q4", "_Q8", "_Q2"):
        e = cand.index.entries.get(nid + suffix)
        if e is not None:
            return e.node.op_type
    e = cand.index.entries.get(nid)
    return e.node.op_type if e is not None else None


# ---------------------------------------------------------------------------- compare_llm
def _token_lists(tokens: Any) -> list[list[int]] | None:
    if tokens is None:
        return None
    arr = [np.asarray(t).reshape(-1) for t in tokens] if (
        isinstance(tokens, (list, tuple)) and tokens and isinstance(
            tokens[0], (list, tuple, np.ndarray))) else [np.asarray(tokens)]
    if len(arr) == 1 and arr[0].ndim == 2:
        arr = list(arr[0])
    out = []
    for a in arr:
        a = np.asarray(a).reshape(-1)
        if a.dtype.kind not in "iu" or a.size < 2 or (a < 0).any():
            raise InputError(f"tokens must be non-negative integer ids, at least 2 per "
                             f"sequence; got {a.dtype} of {a.size}.",
                             fix="Pass tokens=[[id, id, ...], ...] or one list of ids.")
        out.append([int(x) for x in a])
    return out


def _vocab(model: LabModel, io: DecoderIO, sess: Any, dims: Mapping[str, int]) -> int:
    shape = next((v.shape for v in model.graph.outputs if v.name == io.logits), None)
    last = shape[len(shape) - 1] if shape is not None and len(shape) else None
    if isinstance(last, int) and last > 0:
        return last
    return int(_logits(model, io, [0], sess, dims).shape[-1])


def check_vocab(seqs: Sequence[Sequence[int]], model: LabModel, io: DecoderIO, sess: Any,
                dims: Mapping[str, int]) -> None:
    """Given token ids must index the model's vocabulary: an id past it failed inside
    onnxruntime's Gather, in a message that blamed the sequence's length."""
    hi = max(max(s) for s in seqs)
    vocab = _vocab(model, io, sess, dims)
    if hi >= vocab:
        lo = min(min(s) for s in seqs)
        raise InputError(f"tokens must lie in [0, {vocab}) (the vocabulary of {io.logits!r}), "
                         f"got {lo}..{hi}.", fix="Pass token ids of this model's tokenizer.")


@strict_keywords  # a misspelt keyword is an InputError with its close matches
def compare_llm(reference: Any, candidate: Any, tokens: Any = None, *,
                prompt_length: int = 8, new_tokens: int = 24, seed: int = 0,
                layerwise: bool = True, preset: str | None = None,
                min_top1: float | None = None, max_kl: float | None = None,
                dims: Mapping[str, int] | None = None, providers: Any = None,
                max_bytes: int = 1 << 30, progress: Any = None) -> LLMComparison:
    """Compare two versions of a decoder LLM (fp32, fp16, int4...) by what they generate.

    Args:
        reference, candidate: Labs, paths, ModelProtos or ``"sample:NAME"``; the inputs and
            outputs may follow different builders' names (genai, optimum).
        tokens: the sequence(s) both sides are scored on (a list of ids, or a list of lists /
            a 2-D array for several). None: a seeded random prompt of ``prompt_length`` ids
            continued greedily by the reference for ``new_tokens``. The reference runs each
            sequence at once; the candidate as generation does, the prompt (the first half
            of given tokens) in one run and then a token a run with its KV cache fed back.
        prompt_length, new_tokens, seed: the generated sequence (``tokens=None``).
        layerwise: also compare every aligned intermediate tensor on the first sequence's
            prefill (:func:`onnx_lab.compare`) and rank the nodes by local SQNR
            (:func:`sqnr_losses`); needs both models to take the same inputs.
        preset: the tolerance preset (None: ``int4`` when a side holds MatMulNBits,
            ``fp16``/``bf16`` when the candidate computes so, else ``fp32``): the layer rules
            and the next-token targets (:data:`~onnx_lab.numerics.metrics.NEXT_TOKEN`).
        min_top1, max_kl: the next-token targets in place of the preset's.
        dims: values for symbolic dims the cache shapes need (head counts, head size).
        providers: onnxruntime providers for both sides.
        max_bytes: bound on captured activations held at once (layerwise).
        progress: None (tqdm when interactive), False, or a callable(done, total, label).

    Returns:
        An :class:`LLMComparison`; ``passed`` when the next-token targets are met.

    Raises:
        InputError: not a decoder (no input_ids / logits), unpaired cache tensors, bad
            tokens. DimError: a cache dim without value. RuntimeLoadError: onnxruntime
            cannot run a side (a sequence beyond the model's maximum length among them).

    Example:
        >>> c = onnx_lab.compare_llm("llm_fp32.onnx", "llm_int4.onnx")
        >>> c.passed, c.metrics, c.losses.head(5), c.plot()
    """
    t_all = time.perf_counter()
    for name, v in (("min_top1", min_top1), ("max_kl", max_kl)):
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)
                              or not 0 <= v or (name == "min_top1" and v > 1)
                              or math.isnan(v)):
            raise InputError(f"{name} must be a number in [0, 1] (top-1) or >= 0 (KL), got "
                             f"{v!r}.", fix="E.g. min_top1=0.9, max_kl=0.1.")
    if not isinstance(new_tokens, int) or new_tokens < 1 or not isinstance(
            prompt_length, int) or prompt_length < 1:
        raise InputError(f"prompt_length and new_tokens must be positive ints, got "
                         f"{prompt_length!r}, {new_tokens!r}.", fix="E.g. prompt_length=8, "
                         "new_tokens=24.")
    if preset is not None:
        get_preset(preset)
    ref = _load(reference, "reference", dims, None)
    cand = _load(candidate, "candidate", dims, None)
    _check_known([("reference", ref), ("candidate", cand)], dims, None)  # a typo: DimError
    # Two versions of one model share their cache dims: what the graph of either fixes (an
    # fp16 model with float32 inputs casts its cache before the attention, where the head
    # size is read) serves both.
    shared = {**with_derived(cand.model, {}), **with_derived(ref.model, {})}
    rdims = {**shared, **ref.dims, **(dims or {})}
    cdims = {**shared, **cand.dims, **(dims or {})}
    io_r, io_c = decoder_io(ref.model), decoder_io(cand.model)
    # compare()'s rule: int4 for weight-only ops, int8 for a candidate that quantizes
    # activations (a healthy dynamic-int8 decoder failed float32's KL 1e-3), fp16/bf16
    preset = preset or default_preset(cand.model, ref.model) or "fp32"
    target = NEXT_TOKEN.get(preset, NEXT_TOKEN["fp32"])
    target = NextToken(target.min_top1 if min_top1 is None else float(min_top1),
                       target.max_kl if max_kl is None else float(max_kl))
    prov = resolve_providers(providers)
    seqs = _token_lists(tokens)
    _check_context([("reference", ref.model), ("candidate", cand.model)],
                   prompt_length + new_tokens if seqs is None else max(map(len, seqs)),
                   (prompt_length, new_tokens) if seqs is None else None)
    notes: list[str] = []
    steps = (1 if seqs is None else 0) + 2 + (1 if layerwise else 0)
    with Progress(progress, steps, "compare_llm") as bar:
        s_ref = _session(ref.model, [io_r.logits, *[p for _, p in io_r.past]], prov,
                         "reference")
        if seqs is None:
            vocab = _vocab(ref.model, io_r, s_ref, rdims)
            prompt = np.random.default_rng(seed).integers(0, vocab, prompt_length).tolist()
            decode = greedy_decode(ref.model, prompt, new_tokens, io=io_r, dims=rdims,
                                   session=s_ref)
            seqs = [decode.tokens]
            bar.step("reference: greedy continuation")
            start = prompt_length
        else:
            check_vocab(seqs, ref.model, io_r, s_ref, rdims)
            start = 0
        ref_logits = [_logits(ref.model, io_r, s, s_ref, rdims) for s in seqs]
        del s_ref
        bar.step("reference: teacher-forced logits")
        # The candidate computes as generation does: the prompt in one run, then a token a
        # run with its own KV cache fed back (a cache read at half its value passed when it
        # ran one prefill over the whole sequence, as did an fp16 build that could not run
        # a single decode step). Given tokens: the first half is the prompt.
        s_cand = _session(cand.model, [io_c.logits, *[p for _, p in io_c.past]], prov,
                          "candidate")
        cand_logits = [_cached_logits(cand.model, io_c, s, s_cand, cdims,
                                      start or max(1, len(s) // 2)) for s in seqs]
        del s_cand
        bar.step("candidate: teacher-forced logits, decoded with its cache")
        frames = []
        rule = _LOGITS_RULE.get(preset)
        for i, (s, r, c) in enumerate(zip(seqs, ref_logits, cand_logits)):
            if r.shape != c.shape:
                raise InputError(f"The logits differ in shape: reference {list(r.shape)}, "
                                 f"candidate {list(c.shape)} (a different vocabulary?).",
                                 fix="Compare two versions of the same model.")
            m = next_token_metrics(r, c, [*s[1:], -1])
            df = pd.DataFrame(m, columns=NEXT_TOKEN_COLUMNS)
            df.insert(0, "sample", i)
            df["generated"] = df["position"] >= start - 1 if start else False
            df["logits_max_abs"], df["logits_within_rule"] = _logits_rule(r, c, rule)
            frames.append(df)
        positions = pd.concat(frames, ignore_index=True)[POSITION_COLUMNS]
        comparison = None
        losses = pd.DataFrame(columns=LOSS_COLUMNS)
        if layerwise:
            same = ({n for n, _, _ in input_specs(ref.model)}
                    == {n for n, _, _ in input_specs(cand.model)})
            if same:
                feeds = prefill_feeds(ref.model, seqs[0], io=io_r, dims=rdims)
                comparison = compare(ref, cand, feeds=feeds, preset=preset, providers=prov,
                                     max_bytes=max_bytes, progress=False, dims=dims)
                losses = sqnr_losses(comparison.layers, ref.model, cand.model)
            else:
                notes.append("layerwise comparison skipped: the models take different inputs "
                             "(different builders' layouts); the next-token metrics compare "
                             "them all the same")
            bar.step("layerwise")
    # No throughput here: the greedy decode runs each length once, its first run (25x the
    # steady step of a small decoder); profile_generation measures tokens/s
    metrics = _summary(positions, target, _TIE_MARGINS.get(preset, TIE_MARGIN))
    within = positions["logits_within_rule"]
    metrics["logits_max_abs"] = float(positions["logits_max_abs"].astype(float).max())
    metrics["logits_rule"] = rule.describe() if rule is not None else None
    metrics["logits_within_rule"] = None if rule is None else bool(within.astype(bool).all())
    return LLMComparison(
        tokens=seqs, prompt_length=start, positions=positions, metrics=metrics, target=target,
        preset=preset, passed=bool(metrics["score"] <= 1.0
                                   and metrics["logits_within_rule"] is not False),
        comparison=comparison,
        losses=losses, notes=notes, reference=ref, candidate=cand,
        seconds=time.perf_counter() - t_all)


def _check_context(models: Sequence[tuple[str, LabModel]], length: int,
                   generated: tuple[int, int] | None) -> None:
    """A sequence longer than either side's maximum context (genai_config.json, the rotary
    cache, a position table) is refused before anything runs: it failed in onnxruntime's
    Gather or GroupQueryAttention at the first position past it, reported as a defect of the
    model's cache path. ``generated``: (prompt_length, new_tokens) when no tokens were given.
    """
    for side, model in models:
        longest = max_context(model)
        if longest is None or length <= longest[0]:
            continue
        mx, why = longest
        if generated is None:
            raise CacheError(f"tokens of {length} ids are longer than the {side}'s maximum "
                             f"context of {mx} tokens ({why}).",
                             fix=f"Pass at most {mx} tokens per sequence.")
        prompt, new = generated
        fix = (f"Use at most {mx - prompt} new tokens after this prompt (new_tokens="
               f"{mx - prompt})." if prompt < mx else f"Use prompt_length + new_tokens <= {mx}.")
        raise CacheError(f"A prompt of {prompt} tokens and {new} new tokens need a context of "
                         f"{length}, longer than the {side}'s maximum of {mx} tokens ({why}).",
                         fix=fix)


def _rule(preset: str) -> Rule:
    return rule_for("float32", output=True, preset=preset)[1]


#: The element-wise rule the logits of every position (prefill and decode steps) are judged by
#: under the presets of exact float rewrites: the next-token metrics alone passed a gpt2 whose
#: cache path halved a past (KL 3e-4, logits 0.10 off, the same greedy tokens). ``exact``
#: judges by fp32's numbers: the reference runs each length whole, the candidate with its
#: cache, which is not bit-identical even for the same model.
_LOGITS_RULE = {"exact": _rule("fp32"), "fp32": _rule("fp32"), "fp64": _rule("fp64")}


def _logits_rule(ref: np.ndarray, cand: np.ndarray, rule: Rule | None
                 ) -> tuple[np.ndarray, Any]:
    """Per position: the largest absolute logit difference, and whether every logit meets
    ``rule`` (None without a rule)."""
    vocab = ref.shape[-1]
    r = np.asarray(ref, np.float64).reshape(-1, vocab)
    c = np.asarray(cand, np.float64).reshape(-1, vocab)
    err = np.abs(r - c)
    err[np.isnan(r) & np.isnan(c)] = 0.0
    err = np.nan_to_num(err, nan=np.inf)  # NaN on one side only: as far off as can be
    worst = err.max(axis=1)
    if rule is None:
        return worst, None
    return worst, (err <= rule.atol + rule.rtol * np.abs(r)).all(axis=1)


#: The tie margin (nats) of the presets of exact float rewrites: TIE_MARGIN's 0.05 nats is the
#: rounding of int4/int8/fp16, but an fp32 rewrite moves logits by ~1e-6, so a flip between
#: tokens 0.01 nats apart is a different prediction (a merged llama whose cache branch halved
#: layer 0's past values passed: its 7 flips in 32 positions all sat under 0.05 nats, and its
#: greedy generation differed from the 5th token).
_TIE_MARGINS = {"exact": 0.0, "fp64": 1e-6, "fp32": 1e-3}


def _summary(positions: pd.DataFrame, target: NextToken, margin: float = TIE_MARGIN
             ) -> dict[str, Any]:
    """The aggregate next-token metrics of a positions table (``margin``: below it, the
    reference's top two tokens are a tie, not judged)."""
    nll_r = positions["nll_ref"].astype(float)
    nll_c = positions["nll_cand"].astype(float)
    kl = positions["kl"].astype(float)
    agree = positions["agree"].astype(bool)
    top1 = float(agree.mean()) if len(positions) else math.nan
    decisive = positions["margin"].astype(float) >= margin
    top1_dec = float(agree[decisive].mean()) if decisive.any() else 1.0
    kl_mean = float(kl.mean()) if len(kl) else math.nan
    gen = positions.loc[positions["generated"].astype(bool)]
    return {
        "positions": int(len(positions)),
        "top1_agreement": top1,
        "top5_overlap": float(positions["top5_overlap"].astype(float).mean()),
        "kl_mean": kl_mean,
        "kl_max": float(kl.max()) if len(kl) else math.nan,
        "perplexity_ref": float(np.exp(nll_r.mean())) if nll_r.notna().any() else math.nan,
        "perplexity_cand": float(np.exp(nll_c.mean())) if nll_c.notna().any() else math.nan,
        "top1_agreement_generated": float(gen["agree"].astype(bool).mean()) if len(gen)
        else math.nan,
        "decisive_positions": int(decisive.sum()),
        "top1_agreement_decisive": top1_dec,
        "score": target.score(top1_dec, kl_mean),
        "min_top1": target.min_top1,
        "max_kl": target.max_kl,
    }


# ---------------------------------------------------------------------------- result
@dataclass
class LLMComparison:
    """The result of :func:`compare_llm`.

    Attributes:
        tokens: the sequence(s) both sides were scored on (lists of ids).
        prompt_length: the generated sequence's prompt (0 when the tokens were given).
        positions: one row per scored position (:data:`POSITION_COLUMNS`): sample, position,
            target (the next token; -1 at the end), ref_top1, cand_top1, agree,
            top5_overlap, kl (nats), nll_ref, nll_cand, ref_prob, generated (the position
            predicts a token the reference generated), logits_max_abs, logits_within_rule
            (every logit meets the preset's output rule: ``exact``, ``fp32`` (fp32's
            numbers for both) and ``fp64``; None for the rounding presets).
        metrics: positions, top1_agreement (all positions), decisive_positions,
            top1_agreement_decisive (where the reference's top-1 leads by TIE_MARGIN nats:
            what the target judges), top5_overlap, kl_mean, kl_max, perplexity_ref,
            perplexity_cand (both on the same tokens), top1_agreement_generated, score
            (<= 1 meets the targets), min_top1, max_kl (throughput is
            :func:`onnx_lab.profile_generation`'s: the greedy decode here runs each length
            once, its first run), logits_max_abs, logits_rule and logits_within_rule (None
            for the rounding presets).
        target: the :class:`~onnx_lab.numerics.metrics.NextToken` targets.
        preset: the tolerance preset (layer rules and targets).
        passed: the next-token targets are met, and under ``exact``/``fp32``/``fp64`` every
            position's logits meet the output rule.
        comparison: the layerwise :class:`~onnx_lab.numerics.compare.Comparison` of the
            first sequence's prefill (None without ``layerwise`` or when the inputs differ).
        losses: nodes ranked by local SQNR, lowest first (:data:`LOSS_COLUMNS`).
        notes: what could not be done and why.
    """

    tokens: list[list[int]]
    prompt_length: int
    positions: pd.DataFrame
    metrics: dict[str, Any]
    target: NextToken
    preset: str
    passed: bool
    comparison: Comparison | None
    losses: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    reference: Resolved | None = field(default=None, repr=False)
    candidate: Resolved | None = field(default=None, repr=False)
    seconds: float = 0.0

    def worst(self, n: int = 5) -> pd.DataFrame:
        """The ``n`` nodes that lose most precision (lowest local SQNR)."""
        return self.losses.head(n)

    def by_layer(self) -> pd.DataFrame:
        """Per decoder layer: layer, n_nodes, min_local_sqnr_db, worst_node, sqnr_db_out
        (the SQNR of the layer's last compared tensor), failing (nodes out of tolerance)."""
        df = self.losses.dropna(subset=["layer"])
        if not len(df):
            return pd.DataFrame(columns=["layer", "n_nodes", "min_local_sqnr_db", "worst_node",
                                         "sqnr_db_out", "failing"])
        rows = []
        order = {t: i for i, t in enumerate(self.comparison.layers["tensor"])} \
            if self.comparison is not None else {}
        for layer, g in df.groupby("layer", sort=True):
            worst = g.sort_values("local_sqnr_db", kind="stable").iloc[0]
            last = g.loc[g["tensor"].map(lambda t: order.get(t, -1)).idxmax()]
            rows.append({"layer": int(layer), "n_nodes": len(g),
                         "min_local_sqnr_db": float(worst["local_sqnr_db"]),
                         "worst_node": worst["node_id"], "sqnr_db_out": float(last["sqnr_db"]),
                         "failing": int((~g["passed"].astype(bool)).sum())})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``onnx-lab compare --llm --json``): passed, preset, targets, metrics,
        tokens, positions, losses (the top 20), notes and the layerwise verdict."""
        def clean(v: Any) -> Any:
            if isinstance(v, (np.floating, np.integer, np.bool_)):
                v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                return None if math.isnan(v) else str(v)
            return v

        def records(df: pd.DataFrame) -> list[dict]:
            return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]

        c = self.comparison
        return {"passed": self.passed, "preset": self.preset,
                "targets": {"min_top1": self.target.min_top1, "max_kl": self.target.max_kl},
                "metrics": {k: clean(v) for k, v in self.metrics.items()},
                "tokens": self.tokens, "prompt_length": self.prompt_length,
                "positions": records(self.positions), "losses": records(self.losses.head(20)),
                "layerwise": None if c is None else {
                    "passed": c.passed, "layers": len(c.layers),
                    "out_of_tolerance": int((~c.layers["passed"].astype(bool)).sum()),
                    "first_divergence": c.first_divergence},
                "notes": list(self.notes), "seconds": round(self.seconds, 3)}

    def summary_text(self) -> str:
        """A few lines for terminals."""
        m = self.metrics
        lines = [f"{'PASSED' if self.passed else 'FAILED'} (preset {self.preset}: "
                 f"{self.target.describe()}) over {m['positions']} positions: top-1 agreement "
                 f"{m['top1_agreement_decisive']:.3f} on {m['decisive_positions']} decisive "
                 f"positions ({m['top1_agreement']:.3f} on all), top-5 overlap {m['top5_overlap']:.3f}, KL mean "
                 f"{m['kl_mean']:.4g} (max {m['kl_max']:.3g}), perplexity reference "
                 f"{m['perplexity_ref']:.4g} / candidate {m['perplexity_cand']:.4g}"]
        c = self.comparison
        if c is not None:
            n_fail = int((~c.layers["passed"].astype(bool)).sum())
            lines.append(f"layerwise ({c.preset}): {len(c.layers)} tensors, {n_fail} out of "
                         "tolerance")
            # a node that loses nothing (local SQNR inf: an If's outputs, the same on both
            # sides) is no answer to "what loses most"; each node once
            lossy = self.losses.loc[np.isfinite(self.losses["local_sqnr_db"].astype(float))]
            for r in lossy.drop_duplicates("node_id").head(3).itertuples(index=False):
                lines.append(f"  loses most: {r.node_id} ({r.op_type}"
                             f"{' -> ' + r.cand_op_type if r.cand_op_type and r.cand_op_type != r.op_type else ''}"  # noqa: E501
                             f"), local SQNR {r.local_sqnr_db:.1f} dB, output {r.sqnr_db:.1f} dB")
        if m.get("logits_within_rule") is False:
            p = self.positions
            bad = p.loc[~p["logits_within_rule"].astype(bool)]
            first = bad.iloc[0]
            step = " (a decode step with the cache)" if bool(first["generated"]) else ""
            lines.insert(1, f"logits beyond the rule {m['logits_rule']} at {len(bad)} of "
                            f"{len(p)} positions (max_abs {m['logits_max_abs']:.3g}), first at "
                            f"position {int(first['position'])}{step}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<onnx_lab.LLMComparison {self.summary_text().splitlines()[0]}>"

    def plot(self, top: int = 8):
        """Local SQNR per node along depth (the ``top`` worst named) and KL per position."""
        return _display.draw(self, "plot", top=top)

    def to_html(self) -> str:
        """HTML report: verdict, metrics, the worst layers and the plot."""
        return _display.draw(self, "html")

    def _repr_html_(self) -> str:
        return _display.notebook_html(self.to_html())
