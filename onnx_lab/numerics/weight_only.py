"""Weight-only int4 for decoder LLMs: which MatMuls to keep in 8 bits or float, found by a search.

``find_weight_only(model, "int4")`` quantizes a float decoder with onnxruntime's own
``MatMulNBitsQuantizer`` (MatMulNBits, block-wise 4-bit weights with their scales;
``nodes_to_exclude``, ``block_size``, ``accuracy_level``) and searches the fewest MatMuls to keep
out of 4 bits so the next-token predictions meet a target (top-1 agreement and mean KL against
the float model, :class:`~onnx_lab.numerics.metrics.NextToken`):

1. **The sequence.** A seeded prompt continued greedily by the float model (or ``tokens``);
   every trial runs it teacher-forced, so all trials are judged on the same context.
2. **Everything int4** (trial ``full``): when it meets the target, that is the plan.
3. **Ranking.** The float model and the all-int4 model compared layer by layer on the same
   prefill (:func:`onnx_lab.compare`, preset ``int4``); the MatMuls are ranked by the precision
   each one loses (:func:`~onnx_lab.numerics.llm.sqnr_losses`: local SQNR, lowest first). The
   usual suspects (``lm_head``, the first and last decoder layers) are marked ``suspect``; the
   measurement decides their place.
4. **Keep in 8 bits** the shortest prefix of the ranking that meets the target (doubling, then
   bisection; kept nodes get a second pass of the quantizer with ``bits=8``); when even every
   MatMul in 8 bits misses, kept nodes stay float. **Prune**: a kept node whose removal still
   meets the target is dropped.

The quantizer runs twice per search (every MatMul in 4 bits, every MatMul in 8 bits); each
trial's model is assembled from those parts and the float weights. Every trial (a row of
:attr:`WeightOnlyPlan.trials`) reports its accuracy beside its decode
speed (tokens/s of a greedy loop with the KV cache, onnxruntime's optimizations on) and its
weight size; :attr:`WeightOnlyPlan.costs` says what each kept node costs in bytes and, from the
measured difference in ms/token apportioned by bytes (decode reads every weight once per
token), in speed.

Example:
    >>> plan = lab.find_precision("int4", min_top1=0.9, max_kl=0.05)
    >>> plan.kept, plan.costs, plan.trials[["phase", "top1_agreement", "kl_mean", "tokens_per_s"]]
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.branches import branch_switches
from onnx_lab.core.handoff import proto_with_weights
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.core.values import const_array
from onnx_lab.errors import InputError, LabError, strict_keywords
from onnx_lab.numerics.compare import WEIGHT_ONLY_OPS, _session, compare
from onnx_lab.numerics.llm import (
    _cache_dims,
    _check_context,
    _logits,
    _vocab,
    check_vocab,
    decoder_io,
    greedy_decode,
    layer_of,
    prefill_feeds,
    sqnr_losses,
)
from onnx_lab.numerics.metrics import NEXT_TOKEN, TIE_MARGIN, NextToken, next_token_metrics
from onnx_lab.runtime.session import make_session, resolve_providers

logger = logging.getLogger(__name__)

__all__ = ["find_weight_only", "WeightOnlyPlan", "WeightOnlyTolerance", "WEIGHT_ONLY_TARGETS",
           "TRIAL_COLUMNS", "COST_COLUMNS", "RANK_COLUMNS", "quantize_weight_only", "Speed",
           "SpeedFn"]

WEIGHT_ONLY_TARGETS = ("int4",)
#: Columns of :attr:`WeightOnlyPlan.trials`.
TRIAL_COLUMNS = ["trial", "phase", "kept", "n_kept", "level", "top1_agreement", "top5_overlap",
                 "kl_mean", "score", "passed", "tokens_per_s", "decode_ms", "size_mb",
                 "seconds", "note"]
#: Columns of :attr:`WeightOnlyPlan.costs`.
COST_COLUMNS = ["node_id", "level", "shape", "int4_bytes", "kept_bytes", "extra_bytes",
                "extra_ms_per_token"]
#: Columns of :attr:`WeightOnlyPlan.sensitivity` (the ranking of the candidate MatMuls).
RANK_COLUMNS = ["rank", "node_id", "op_type", "cand_op_type", "layer", "tensor", "sqnr_db",
                "sqnr_in_db", "local_sqnr_db", "quantized", "passed", "suspect", "kept"]


class PlanCancelled(LabError):
    """The search was cancelled before any plan met the target."""


@dataclass(frozen=True)
class WeightOnlyTolerance(NextToken):
    """The next-token target of a weight-only plan (``metric`` is ``next_token``)."""

    metric: str = "next_token"


# ---------------------------------------------------------------------------- quantization
def _quantizer_quiet() -> None:
    # The quantizer logs every node at INFO on a logger whose level it never sets.
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(
        logging.WARNING)


def quantize_weight_only(proto: onnx.ModelProto, *, bits: int = 4, block_size: int = 32,
                         accuracy_level: int | None = None, is_symmetric: bool = True,
                         exclude: Sequence[str] = (), int8: Sequence[str] = ()
                         ) -> onnx.ModelProto:
    """``proto`` with its constant-weight MatMuls quantized by onnxruntime's
    ``MatMulNBitsQuantizer`` (``bits``), except ``exclude`` (node names) which stay float and
    ``int8`` which get 8 bits. ``proto`` is not modified."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    _quantizer_quiet()
    keep = set(exclude) | set(int8)

    def run(model: onnx.ModelProto, nbits: int, skip: set[str]) -> onnx.ModelProto:
        q = MatMulNBitsQuantizer(model, bits=nbits, block_size=block_size,
                                 is_symmetric=is_symmetric, accuracy_level=accuracy_level,
                                 nodes_to_exclude=sorted(skip))
        try:
            q.process()
        except Exception as e:  # noqa: BLE001 - the quantizer raises several types
            raise InputError(f"onnxruntime's MatMulNBits quantizer failed: {e}",
                             fix="Check block_size (a power of 2, >= 16) and that the "
                             "MatMul weights are constant 2-D initializers.") from e
        return q.model.model

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # not SerializeToString: protobuf refuses that past 2 GB
    out = run(copy, bits, keep)
    if int8:
        out = run(out, 8, set(exclude))
    return out


class _Parts:
    """Each candidate MatMul quantized once in 4 bits and once in 8 bits (two runs of
    onnxruntime's quantizer over the whole model); a trial's model is assembled from them
    instead of quantizing again: on a real LLM the quantizer's pass, not the trial's run,
    would otherwise dominate the search. The test suite checks an assembled model against
    the quantizer run with the same ``nodes_to_exclude``, output for output."""

    def __init__(self, proto: onnx.ModelProto, opts: Mapping[str, Any]) -> None:
        self.float = proto
        self.q4 = quantize_weight_only(proto, **opts)
        self.q8 = quantize_weight_only(proto, bits=8, **opts)
        self.inits = {k: {t.name: t for t in p.graph.initializer}
                      for k, p in (("float", proto), ("q4", self.q4), ("q8", self.q8))}
        self.nodes = {k: {n.name: n for n in p.graph.node}
                      for k, p in (("float", proto), ("q8", self.q8))}
        self.shell = onnx.ModelProto()  # q4's opsets, inputs and outputs, no nodes or weights
        self.shell.ir_version = self.q4.ir_version
        self.shell.opset_import.extend(self.q4.opset_import)
        self.shell.producer_name = self.q4.producer_name
        g = self.shell.graph
        g.name = self.q4.graph.name
        g.input.extend(self.q4.graph.input)
        g.output.extend(self.q4.graph.output)
        g.value_info.extend(self.q4.graph.value_info)

    def assemble(self, int8: set[str], floats: set[str]) -> onnx.ModelProto:
        if not (int8 or floats):
            return self.q4
        out = onnx.ModelProto()
        out.CopyFrom(self.shell)
        nodes, source = [], {}
        for n in self.q4.graph.node:
            base = n.name[:-3] if n.name.endswith("_Q4") else None
            if base in floats and base in self.nodes["float"]:
                n = self.nodes["float"][base]
                source[id(n)] = "float"
            elif base in int8 and base + "_Q8" in self.nodes["q8"]:
                n = self.nodes["q8"][base + "_Q8"]
                source[id(n)] = "q8"
            nodes.append(n)
        out.graph.node.extend(nodes)
        seen: set[str] = set()
        for n in nodes:
            pool = self.inits[source.get(id(n), "q4")]
            for name in n.input:
                t = pool.get(name) or self.inits["q4"].get(name)
                if t is not None and name not in seen:
                    seen.add(name)
                    out.graph.initializer.append(t)
        return out


def _named_proto(model: LabModel) -> onnx.ModelProto:
    """The full model with each main-graph node named by its node id (the quantizer selects
    nodes by name; ids are the names when names are unique)."""
    # the quantizer reads arrays: weights in the message (past 2 GB too: never serialized)
    proto = proto_with_weights(model, "int4 quantization", limit=False)
    ids = {id(e.node): nid for nid, e in model.index.entries.items() if e.graph == ""}
    for node, p in zip(model.graph, proto.graph.node):
        nid = ids.get(id(node))
        if nid is not None and p.name != nid:
            p.name = nid
    return proto


def _candidates(model: LabModel, bodies: bool = False) -> list[str]:
    """MatMuls with a constant 2-D float weight: what the quantizer turns into MatMulNBits
    (of the main graph; ``bodies``: those inside If/Loop/Scan bodies instead)."""
    out = []
    for nid, e in model.index.entries.items():
        n = e.node
        if (e.graph == "") == bodies or n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
            continue
        b = n.inputs[1] if len(n.inputs) > 1 else None
        if b is None or b.const_value is None or b.shape is None or len(b.shape) != 2:
            continue
        if b.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
            out.append(nid)
    return out


def _weight_bytes(model: LabModel) -> int:
    return sum(int(v.const_value.nbytes) for g in model.ir.graphs()
               for v in g.initializers.values() if v.const_value is not None)


def _node_bytes(model: LabModel, names: Sequence[str]) -> int | None:
    """Bytes of the constant inputs of the first node among ``names`` found in ``model``."""
    for name in names:
        e = model.index.entries.get(name)
        if e is None:
            continue
        total = 0
        for v in e.node.inputs:
            if v is not None and v.const_value is not None:
                total += int(v.const_value.nbytes)
        return total
    return None


# ---------------------------------------------------------------------------- the search
@dataclass
class _Search:
    model: LabModel
    proto: onnx.ModelProto
    io: Any
    tokens: list[int]
    prompt: list[int]
    ref_logits: np.ndarray
    tol: WeightOnlyTolerance
    opts: dict[str, Any]
    decode_tokens: int
    providers: list[str]
    dims: dict[str, int]
    bar: Progress | None = None
    should_stop: Callable[[], bool] | None = None
    speed_fn: SpeedFn | None = None
    parts: _Parts | None = None
    rows: list[dict] = field(default_factory=list)
    models: dict[tuple, LabModel] = field(default_factory=dict)
    results: dict[tuple, dict] = field(default_factory=dict)

    def stopped(self) -> bool:
        return bool(self.should_stop is not None and self.should_stop())

    def build(self, int8: Sequence[str], floats: Sequence[str]) -> LabModel:
        key = (tuple(sorted(int8)), tuple(sorted(floats)))
        if key not in self.models:
            if self.parts is None:  # every MatMul quantized once in 4 and once in 8 bits
                self.parts = _Parts(self.proto, self.opts)
            proto = self.parts.assemble(set(int8), set(floats))
            self.models[key] = LabModel(ir.serde.deserialize_model(proto))
        return self.models[key]

    def trial(self, int8: Sequence[str], floats: Sequence[str], phase: str) -> dict:
        key = (tuple(sorted(int8)), tuple(sorted(floats)))
        if key in self.results:
            return self.results[key]
        t0 = time.perf_counter()
        model = self.build(int8, floats)
        sess = _session(model, [self.io.logits], self.providers, "candidate")
        cand = _logits(model, self.io, self.tokens, sess, self.dims)
        del sess
        m = next_token_metrics(self.ref_logits, cand, [*self.tokens[1:], -1])
        decisive = m["margin"] >= TIE_MARGIN  # flips between tied tokens are not judged
        top1 = float(np.mean(m["agree"][decisive])) if decisive.any() else 1.0
        kl = float(np.mean(m["kl"]))
        speed = _speed(model, self.io, self.prompt, self.decode_tokens, self.providers,
                       self.dims, self.speed_fn)
        kept = [*int8, *floats]
        row = {"trial": len(self.rows), "phase": phase, "kept": list(kept),
               "n_kept": len(kept), "level": "float" if floats else ("int8" if int8 else ""),
               "top1_agreement": top1, "top5_overlap": float(np.mean(m["top5_overlap"])),
               "kl_mean": kl, "score": self.tol.score(top1, kl),
               "passed": bool(self.tol.score(top1, kl) <= 1.0),
               "tokens_per_s": speed.tokens_per_s, "decode_ms": speed.decode_ms,
               "size_mb": _weight_bytes(model) / 1e6,
               "seconds": time.perf_counter() - t0, "note": ""}
        self.rows.append(row)
        self.results[key] = row
        if self.bar is not None:
            self.bar.step(f"trial {row['trial']} ({phase}, {len(kept)} kept): top-1 "
                          f"{top1:.3f}, KL {kl:.3g}")
        return row


@dataclass
class Speed:
    """A trial's decode speed: tokens/s and ms per decode step."""

    tokens_per_s: float
    decode_ms: float


#: ``speed(model, prompt_ids, new_tokens, providers, dims) -> Speed``: how a trial's decode speed is
#: measured. ``lab.find_precision("int4")`` passes onnx_lab's generation profiler
#: (``profile_generation``, profiling/ cannot be imported from numerics/); the default times
#: :func:`~onnx_lab.numerics.llm.greedy_decode`.
SpeedFn = Callable[[LabModel, list, int, list, dict], Speed]


def _speed(model: LabModel, io: Any, prompt: list[int], n: int, providers: list[str],
           dims: Mapping[str, int], fn: SpeedFn | None = None) -> Speed:
    """Decode speed of ``model`` on ``prompt`` (``fn``, else the greedy loop of
    numerics/llm.py with onnxruntime's optimizations as deployed, a warm-up loop first)."""
    if fn is not None:
        return fn(model, list(prompt), n, providers, _cache_dims(model, io, dims))
    sess = make_session(model, providers=providers, opt_level="all")
    greedy_decode(model, prompt, 2, io=io, dims=dims, session=sess)
    # The faster of two loops: timings on a busy machine only ever err on the slow side.
    runs = [greedy_decode(model, prompt, n, io=io, dims=dims, session=sess) for _ in range(2)]
    best = min(runs, key=lambda d: d.decode_ms)
    return Speed(best.tokens_per_s, best.decode_ms)


def _passing(s: _Search, order: list[str], level: str) -> list[str] | None:
    """The shortest prefix of ``order`` kept at ``level`` that meets the target: doubling,
    then bisection (None when cancelled before one passed)."""
    def ok(k: int) -> bool:
        kept = order[:k]
        row = s.trial(kept if level == "int8" else [], kept if level == "float" else [],
                      "bisect")
        return row["passed"]

    lo, hi = 0, None
    k = 1
    while k <= len(order):
        if s.stopped():
            return None
        if ok(k):
            hi = k
            break
        lo = k
        k = min(2 * k, len(order)) if k < len(order) else len(order) + 1
    if hi is None:
        return None
    while hi - lo > 1 and not s.stopped():
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return order[:hi]


def _prune(s: _Search, kept: list[str], level: str, max_trials: int) -> list[str]:
    """Drop every kept node whose removal still meets the target (least ranked first)."""
    kept = list(kept)
    for nid in reversed(list(kept)):
        if len(kept) <= 1 or s.stopped() or len(s.rows) >= max_trials:
            break
        rest = [k for k in kept if k != nid]
        row = s.trial(rest if level == "int8" else [], rest if level == "float" else [],
                      "prune")
        if row["passed"]:
            kept = rest
    return kept


def _suspects(model: LabModel, cands: list[str], logits: str) -> set[str]:
    """lm_head (the MatMul that makes the logits) and the first and last decoder layers."""
    idx = model.index
    out = set()
    head = idx.producer.get(logits)
    if head in cands:
        out.add(head)
    layers = [layer_of(n) for n in cands if layer_of(n) is not None]
    if layers:
        lo, hi = min(layers), max(layers)
        out |= {n for n in cands if layer_of(n) in (lo, hi)}
    return out


@strict_keywords
def find_weight_only(source: Any, target: str = "int4", tokens: Any = None, *,
                     min_top1: float | None = None, max_kl: float | None = None,
                     tolerance: Any = None, block_size: int = 32,
                     accuracy_level: int | None = None, is_symmetric: bool = True,
                     keep: str = "auto", prompt_length: int = 8, new_tokens: int = 24,
                     decode_tokens: int = 16, seed: int = 0, max_trials: int = 32,
                     dims: Mapping[str, int] | None = None, providers: Any = None,
                     max_bytes: int = 1 << 30, progress: Any = None,
                     should_stop: Callable[[], bool] | None = None,
                     speed: SpeedFn | None = None) -> WeightOnlyPlan:
    """The fewest MatMuls to keep out of 4 bits so a decoder's next tokens meet a target.

    Args:
        source: the float decoder (a Lab, path, ModelProto, ``"sample:NAME"``...).
        target: ``"int4"``.
        tokens: the sequence to judge on (ids); None: a seeded prompt of ``prompt_length``
            continued greedily by the float model for ``new_tokens``.
        min_top1, max_kl: the targets (default the ``int4`` preset's
            :data:`~onnx_lab.numerics.metrics.NEXT_TOKEN`); ``tolerance`` may carry them as
            a dict or a NextToken.
        block_size, accuracy_level, is_symmetric: the quantizer's options (onnxruntime's
            MatMulNBits: block of the scales along K; accuracy level 4 computes with int8
            activations on CPU).
        keep: ``"int8"`` (kept MatMuls get 8-bit weights), ``"float"``, or ``"auto"``: int8,
            and float when even every MatMul in 8 bits misses the target.
        decode_tokens: tokens generated to time each trial's decode speed.
        max_trials: bound on the number of trials.
        dims: values for symbolic dims the cache shapes need.
        providers: onnxruntime providers (accuracy and speed).
        max_bytes: bound on captured activations held at once (the ranking's capture).
        progress, should_stop: a callable(done, total, label); a callable returning True to
            stop after the current trial (the best plan so far is returned).
        speed: how each trial's decode speed is measured (:data:`SpeedFn`); the Lab passes
            the generation profiler.

    Returns:
        A :class:`WeightOnlyPlan`.

    Raises:
        InputError: not a float decoder (already quantized, no MatMul with a constant
            weight, no input_ids/logits), bad targets or options.

    Example:
        >>> plan = find_weight_only("llm_fp32.onnx", "int4", min_top1=0.9, max_kl=0.05)
        >>> plan.kept, plan.costs
    """
    t_all = time.perf_counter()
    if target not in WEIGHT_ONLY_TARGETS:
        raise InputError(f"Unknown weight-only target {target!r}.",
                         fix=f"Targets: {', '.join(WEIGHT_ONLY_TARGETS)}.")
    if keep not in ("auto", "int8", "float"):
        raise InputError(f"keep must be 'auto', 'int8' or 'float', got {keep!r}.",
                         fix="Use keep='auto'.")
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise InputError(f"block_size must be a power of 2 >= 16, got {block_size!r}.",
                         fix="Use block_size=32 (onnxruntime-genai's default) or 128.")
    if isinstance(tolerance, Mapping):
        min_top1 = tolerance.get("min_top1", min_top1)
        max_kl = tolerance.get("max_kl", max_kl)
    elif isinstance(tolerance, NextToken):
        min_top1, max_kl = tolerance.min_top1, tolerance.max_kl
    base = NEXT_TOKEN[target]
    tol = WeightOnlyTolerance(base.min_top1 if min_top1 is None else float(min_top1),
                              base.max_kl if max_kl is None else float(max_kl))
    if not (0 <= tol.min_top1 <= 1 and tol.max_kl >= 0):
        raise InputError(f"min_top1 must be in [0, 1] and max_kl >= 0, got {tol.min_top1}, "
                         f"{tol.max_kl}.", fix="E.g. min_top1=0.9, max_kl=0.05.")
    model, rdims, _ = resolve(source, dims)
    done = [nid for nid, e in model.index.entries.items() if e.node.op_type in WEIGHT_ONLY_OPS]
    if done:
        raise InputError(f"The model is already weight-only quantized (node {done[0]!r} is "
                         f"{model.index.node(done[0]).op_type}): the search starts from the "
                         "float model.", fix="Pass the float (fp32/fp16) decoder.")
    io = decoder_io(model)
    cands = _candidates(model)
    if not cands:
        inside = _candidates(model, bodies=True)
        if inside:
            owners = sorted({model.index.entries[n].graph.split("/")[0] for n in inside})
            merged = ": a merged decoder" if branch_switches(model) else ""
            raise InputError(
                f"All {len(inside)} MatMuls with a constant 2-D weight are inside If/Loop "
                f"bodies (of {', '.join(map(repr, owners[:3]))}{merged}), which "
                "the int4 search does not reach: it quantizes and judges main-graph MatMuls "
                "only.", fix="Search the decoder exported without merging (optimum's "
                "with-past model.onnx, or decoder_with_past_model.onnx), or quantize the "
                "merged one without a search: onnxruntime's MatMulNBitsQuantizer reaches "
                "If bodies; then judge it with onnx_lab.compare_llm(float, int4).")
        raise InputError("The model has no MatMul with a constant 2-D weight: nothing for "
                         "weight-only quantization to change.",
                         fix="Pass a float decoder whose projections are MatMuls of weights.")
    prov = resolve_providers(providers)
    opts = {"block_size": block_size, "accuracy_level": accuracy_level,
            "is_symmetric": is_symmetric}
    est = 4 + max(1, math.ceil(math.log2(len(cands) + 1))) * 2 + min(max_trials, 8)
    with Progress(progress, est, f"find_precision {target}") as bar:
        sess = _session(model, [io.logits, *[p for _, p in io.past]], prov, "reference")
        if tokens is None:
            _check_context([("float model", model)], prompt_length + new_tokens,
                           (prompt_length, new_tokens))
            vocab = _vocab(model, io, sess, rdims)
            prompt = np.random.default_rng(seed).integers(0, vocab, prompt_length).tolist()
            seq = greedy_decode(model, prompt, new_tokens, io=io, dims=rdims,
                                session=sess).tokens
        else:
            arr = np.asarray(tokens) if not isinstance(tokens, (str, bytes)) else np.asarray([])
            if arr.dtype.kind not in "iu" or (arr < 0).any():
                raise InputError(f"tokens must be token ids (non-negative ints), got "
                                 f"{tokens!r:.60}.", fix="Pass tokens=[id, id, ...], or "
                                 "None for a prompt the float model continues.")
            seq = [int(t) for t in arr.reshape(-1)]
            _check_context([("float model", model)], len(seq), None)
            if len(seq) < 2:
                raise InputError("tokens must hold at least 2 ids.", fix="Pass a longer "
                                 "sequence, or tokens=None for a generated one.")
            check_vocab([seq], model, io, sess, rdims)
            prompt = seq[:max(1, min(prompt_length, len(seq) - 1))]
        ref_logits = _logits(model, io, seq, sess, rdims)
        del sess
        bar.step("float model: the sequence and its logits")
        s = _Search(model, _named_proto(model), io, seq, prompt, ref_logits, tol, opts,
                    decode_tokens, prov, rdims, bar, should_stop, speed)
        full = s.trial([], [], "full")
        float_speed = _speed(model, io, prompt, decode_tokens, prov, rdims, speed)
        s.rows.append({"trial": len(s.rows), "phase": "float", "kept": list(cands),
                       "n_kept": len(cands), "level": "float", "top1_agreement": 1.0,
                       "top5_overlap": 1.0, "kl_mean": 0.0, "score": 0.0, "passed": True,
                       "tokens_per_s": float_speed.tokens_per_s,
                       "decode_ms": float_speed.decode_ms,
                       "size_mb": _weight_bytes(model) / 1e6, "seconds": 0.0,
                       "note": "the float model (nothing quantized)"})
        # Ranking: the float and the all-int4 model layer by layer on the same prefill.
        feeds = prefill_feeds(model, seq, io=io, dims=rdims)
        c = compare(model, s.build([], []), feeds=feeds, preset=target, providers=prov,
                    max_bytes=max_bytes, progress=False, dims=rdims)
        bar.step("ranking: float vs all-int4, layer by layer")
        losses = sqnr_losses(c.layers, model, s.build([], []))
        cset = set(cands)
        ranked = [n for n in losses["node_id"] if n in cset]
        ranked += [n for n in cands if n not in set(ranked)]  # not compared: last
        suspects = _suspects(model, cands, io.logits)
        notes: list[str] = []
        kept: list[str] = []
        level = ""
        if not full["passed"]:
            levels = ["int8", "float"] if keep == "auto" else [keep]
            for lv in levels:
                if s.stopped():
                    break
                every = s.trial(ranked if lv == "int8" else [], ranked if lv == "float" else [],
                                f"all_{lv}")
                if not every["passed"]:
                    notes.append(f"every MatMul in {lv} misses the target (top-1 "
                                 f"{every['top1_agreement']:.3f}, KL {every['kl_mean']:.3g})")
                    continue
                found = _passing(s, ranked, lv)
                if found is not None:
                    kept, level = _prune(s, found, lv, max_trials), lv
                    break
            if not level and not s.stopped():
                notes.append("no plan meets the target: even the float model's own rerun "
                             "(every MatMul kept) misses it")
        if not full["passed"] and not level:
            if s.stopped():
                raise PlanCancelled("The search was cancelled before any plan met "
                                    f"{tol.describe()}.", fix="Run it again to the end.")
        bar.total = bar.done
    int8 = kept if level == "int8" else []
    floats = kept if level == "float" else []
    final = s.build(int8, floats)
    row = s.trial(int8, floats, "plan") if kept else full  # a trial already run: its row
    ranking = losses.loc[losses["node_id"].isin(cset)].reset_index(drop=True)
    ranking["rank"] = range(1, len(ranking) + 1)
    ranking["suspect"] = ranking["node_id"].isin(suspects)
    ranking["kept"] = ranking["node_id"].isin(set(kept))
    costs = _costs(model, s.build([], []), final, kept, level, full, row)
    outputs = pd.DataFrame([{
        "tensor": io.logits, "top1_before": full["top1_agreement"],
        "top1_after": row["top1_agreement"], "kl_before": full["kl_mean"],
        "kl_after": row["kl_mean"], "tokens_per_s_before": full["tokens_per_s"],
        "tokens_per_s_after": row["tokens_per_s"], "size_mb_before": full["size_mb"],
        "size_mb_after": row["size_mb"], "passed_before": full["passed"],
        "passed_after": row["passed"]}])
    # Order kept nodes by rank (most damaging first).
    kept = [n for n in ranked if n in set(kept)]
    return WeightOnlyPlan(
        target=target, kept=kept, levels={n: level for n in kept}, passed=bool(row["passed"]),
        model=final, trials=pd.DataFrame(s.rows, columns=TRIAL_COLUMNS),
        sensitivity=ranking[RANK_COLUMNS], costs=costs, outputs=outputs, tolerance=tol,
        n_candidates=len(cands), seconds=time.perf_counter() - t_all,
        cancelled=s.stopped(), feeds=[feeds], source=model, tokens=seq, comparison=c,
        notes=notes, options=dict(opts), plan_trial=int(row["trial"]))


def _costs(model: LabModel, full: LabModel, final: LabModel, kept: list[str], level: str,
           full_row: dict, plan_row: dict) -> pd.DataFrame:
    """What each kept node costs: its weight bytes kept vs in int4, and the measured extra
    ms/token of the plan over all-int4 apportioned by those bytes."""
    rows = []
    for nid in kept:
        node = model.index.node(nid)
        w = const_array(node.inputs[1])
        q4 = _node_bytes(full, [nid + "_Q4", nid]) or 0
        kb = _node_bytes(final, [nid + "_Q8", nid]) if level == "int8" else (
            int(w.nbytes) if w is not None else None)
        rows.append({"node_id": nid, "level": level,
                     "shape": list(w.shape) if w is not None else None,
                     "int4_bytes": q4, "kept_bytes": kb or 0,
                     "extra_bytes": (kb or 0) - q4})
    df = pd.DataFrame(rows, columns=COST_COLUMNS[:-1])
    extra_ms = plan_row["decode_ms"] - full_row["decode_ms"]
    total = float(df["extra_bytes"].sum()) if len(df) else 0.0
    df["extra_ms_per_token"] = [extra_ms * b / total if total > 0 else math.nan
                                for b in df["extra_bytes"]]
    return df


# ---------------------------------------------------------------------------- the plan
@dataclass
class WeightOnlyPlan:
    """The result of :func:`find_weight_only` (``lab.find_precision("int4")``).

    Attributes:
        target: ``int4``.
        kept: MatMul node ids kept out of 4 bits, most damaging first.
        levels: node id -> ``int8`` or ``float``.
        passed: the plan meets the target.
        model: the quantized model (a LabModel).
        trials: one row per trial (:data:`TRIAL_COLUMNS`): trial, phase (``full``: all
            int4; ``float``: the float model, for speed and size; ``all_int8``/``all_float``,
            ``bisect``, ``prune``, ``plan``), kept, n_kept, level, top1_agreement (on the
            decisive positions, see :data:`~onnx_lab.numerics.metrics.TIE_MARGIN`),
            top5_overlap, kl_mean (nats), score (<= 1 meets the target), passed,
            tokens_per_s, decode_ms (greedy decode with the KV cache), size_mb (weights),
            seconds, note.
        sensitivity: the candidate MatMuls ranked by local SQNR in the all-int4 model
            (:data:`RANK_COLUMNS`), with ``suspect`` (lm_head, first/last layer) and ``kept``.
        costs: per kept node (:data:`COST_COLUMNS`): node_id, level, shape, int4_bytes,
            kept_bytes, extra_bytes, extra_ms_per_token (the plan's measured extra decode
            time over all-int4, apportioned by bytes).
        outputs: the logits before (all int4) and after (the plan): top-1, KL, tokens/s, size.
        tolerance: the :class:`WeightOnlyTolerance` (top-1 and KL targets).
        comparison: the layerwise float vs all-int4 comparison behind the ranking.
        feeds: the prefill feeds of the judged sequence (what a verified step replays).
    """

    target: str
    kept: list[str]
    levels: dict[str, str]
    passed: bool
    model: LabModel
    trials: pd.DataFrame
    sensitivity: pd.DataFrame
    costs: pd.DataFrame
    outputs: pd.DataFrame
    tolerance: WeightOnlyTolerance
    n_candidates: int
    seconds: float
    cancelled: bool = False
    feeds: list = field(default_factory=list, repr=False)
    source: LabModel | None = field(default=None, repr=False)
    tokens: list[int] = field(default_factory=list, repr=False)
    comparison: Any = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    #: The history step's PassResult when the plan was pushed (``lab.find_precision``).
    result: Any = field(default=None, repr=False)
    confirmed: bool | None = None
    #: The row of :attr:`trials` that is the plan (0 when nothing is kept).
    plan_trial: int = 0

    def summary_text(self) -> str:
        verdict = "meets" if self.passed else "does NOT meet"
        where = {lv: sum(1 for v in self.levels.values() if v == lv) for lv in ("int8", "float")}
        kept = ", ".join(f"{n} in {lv}" for lv, n in where.items() if n) or "none kept"
        full = self.trials.iloc[0]
        p = self.trials.iloc[self.plan_trial]
        return (f"int4: {len(self.kept)} of {self.n_candidates} MatMuls kept out of 4 bits "
                f"({kept}); the plan {verdict} {self.tolerance.describe()}: top-1 "
                f"{p['top1_agreement']:.3f}, KL {p['kl_mean']:.3g}, {p['tokens_per_s']:.0f} "
                f"tokens/s, {p['size_mb']:.2f} MB (all int4: top-1 {full['top1_agreement']:.3f}"
                f", KL {full['kl_mean']:.3g}, {full['tokens_per_s']:.0f} tokens/s, "
                f"{full['size_mb']:.2f} MB; {len(self.trials)} trials, {self.seconds:.1f} s)"
                f"{' [cancelled]' if self.cancelled else ''}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: target, kept, levels, passed, tolerance, notes, trials, costs,
        outputs, seconds."""
        def clean(v: Any) -> Any:
            if isinstance(v, (np.floating, np.integer, np.bool_)):
                v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                return None if math.isnan(v) else str(v)
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        def records(df: pd.DataFrame) -> list[dict]:
            return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]

        return {"target": self.target, "kept": list(self.kept), "levels": dict(self.levels),
                "passed": self.passed, "tolerance": self.tolerance.describe(),
                "n_candidates": self.n_candidates, "options": dict(self.options),
                "notes": list(self.notes), "seconds": round(self.seconds, 3),
                "cancelled": self.cancelled, "trials": records(self.trials),
                "costs": records(self.costs), "outputs": records(self.outputs),
                "ranking": records(self.sensitivity.head(20))}

    def __repr__(self) -> str:
        return f"WeightOnlyPlan({self.summary_text()})"

    def plot(self, top: int = 8, kind: str = "ranking"):
        """``kind="ranking"``: local SQNR per node, kept in green; ``"trials"``: each trial's
        accuracy beside its decode tokens/s and size."""
        return _display.draw(self, "plot", top=top, kind=kind)

    def render(self, **kw: Any):
        """The float graph coloured by lost precision, kept nodes highlighted."""
        return _display.draw(self, "render", **kw)

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))
