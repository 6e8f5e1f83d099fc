"""Generation profiling of decoder LLMs: prefill and decode timed in a real greedy loop.

A generation is one prefill (the prompt of ``P`` tokens with an empty KV cache) and ``N``
decode steps (one token each, the cache growing by one). The loop feeds each step's
``present.*`` outputs back as the next step's ``past_key_values.*`` inputs (onnxruntime-genai
and optimum naming, see :mod:`onnx_lab.profiling._kv`), fills ``attention_mask``,
``position_ids`` and the other bookkeeping inputs the model has, and picks the next token by
argmax of the last position's logits: a real generation, not a replay of random inputs.

Timing follows :func:`onnx_lab.profile`: warm-up generations are dropped, a few generations
run under onnxruntime's profiler (the per-operator shares of each phase), then unprofiled
generations time the latency; with ``runs=None`` they go on until the medians are stable or
``budget_s`` is spent.

Example:
    >>> import onnx_lab
    >>> g = onnx_lab.profile_generation("model.onnx", prompt=32, new_tokens=16, budget_s=5)
    >>> g.latency_stats[["phase", "p50_ms", "ci_low_ms", "ci_high_ms", "tokens_per_s"]]
    >>> g.ops.loc[g.ops.phase == "decode"].head()
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.branches import branch_switches
from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.errors import CacheError, InputError, ProviderError, strict_keywords
from onnx_lab.profiling._kv import CacheLayout, cache_layout
from onnx_lab.profiling._mapping import map_trace, wants_graph
from onnx_lab.profiling._timing import Budget, MemoryWatch, cancelled
from onnx_lab.profiling.parse import parse_trace
from onnx_lab.profiling.run import (
    NODE_COLUMNS,
    OP_COLUMNS,
    PROFILE_BUDGET_S,
    SessionSettings,
    _check_budget_level,
    _check_counts,
    _node_table,
    _op_table,
    _Ticker,
    backends,
    open_session,
    run_sessions,
)
from onnx_lab.profiling.stats import STABLE_REL_CI, busy_note, stable, summarize
from onnx_lab.runtime.feeds import _gather_vocab
from onnx_lab.runtime.session import run_failure

logger = logging.getLogger(__name__)

__all__ = ["profile_generation", "GenerationProfile", "cache_layout", "GENERATE_PROFILE_RUNS",
           "MAX_GENERATIONS"]

#: Generations run under onnxruntime's profiler by default (each is 1 + N runs).
GENERATE_PROFILE_RUNS = 2
#: Adaptive mode stops after this many timed generations.
MAX_GENERATIONS = 500
PHASES = ("prefill", "decode")

STEP_COLUMNS = ["session", "generation", "step", "phase", "context", "tokens_in", "wall_ms",
                "warmup", "profiled", "token", "kv_cache_bytes"]
GEN_COLUMNS = ["session", "generation", "warmup", "profiled", "complete", "prefill_ms",
               "decode_ms", "decode_steps", "decode_ms_per_token", "tokens_per_s", "total_ms"]
STATS_COLUMNS = ["session", "phase", "tokens", "runs", "mean_ms", "p10_ms", "p50_ms", "p90_ms",
                 "p99_ms", "min_ms", "max_ms", "std_ms", "ci_low_ms", "ci_high_ms", "rel_ci",
                 "spread", "tokens_per_s", "tokens_per_s_low", "tokens_per_s_high",
                 "generations", "profiled_generations", "latency_from", "stopped"]
PHASE_OP_COLUMNS = ["phase", *OP_COLUMNS]
PHASE_NODE_COLUMNS = ["phase", *NODE_COLUMNS]
MEMORY_COLUMNS = ["session", "rss_before_bytes", "peak_rss_bytes", "session_peak_bytes",
                  "weights_bytes", "kv_cache_bytes", "predicted_kv_cache_bytes", "context"]
SESSION_COLUMNS = ["session", "providers", "opt_level", "io_binding", "load_ms", "init_ms",
                   "create_ms", "nodes_run"]


@dataclass
class GenerationProfile:
    """The result of :func:`profile_generation`.

    Attributes:
        steps: one row per ``session.run`` of every generation: session, generation (0-based,
            warm-up included), step (0: the prefill, then 1..N), phase ('prefill' or
            'decode'), context (tokens in the cache before the step), tokens_in (tokens fed:
            P, then 1), wall_ms (the step: feeds, run, argmax), warmup, profiled (bool),
            token (the id picked for batch row 0), kv_cache_bytes (the cache after the step).
        generations: one row per generation: session, generation, warmup, profiled,
            complete (False when cancelled midway), prefill_ms, decode_ms (all decode steps),
            decode_steps, decode_ms_per_token, tokens_per_s (batch x decode steps /
            decode seconds), total_ms (wall time of the whole generation).
        latency_stats: one row per session and phase: tokens (fed per run: P or 1), runs
            (samples: one prefill per generation, every decode step), mean_ms, p10_ms,
            p50_ms, p90_ms, p99_ms, min_ms, max_ms, std_ms, ci_low_ms, ci_high_ms (95%
            interval of the median), rel_ci, spread, tokens_per_s (batch x tokens / p50),
            tokens_per_s_low, tokens_per_s_high (from the interval of the median),
            generations, profiled_generations, latency_from ('unprofiled' or 'profiled'),
            stopped ('runs', 'stable', 'budget', 'max_runs', 'cancelled').
        ops: per session, phase, provider and op_type: count, calls and total_ms (per run
            of that phase: per prefill, per decode step), share (of the phase's kernel time),
            mean_ms (per call). Empty when ``profile_runs=0``.
        nodes: per session and phase, as :attr:`onnx_lab.profiling.Profile.nodes` (node_id,
            provider, op_type, calls, mean_ms, median_ms, p90_ms, total_ms, share, mapped,
            ort_name, components, how).
        memory: per session: rss_before_bytes, peak_rss_bytes (process peak during session
            creation and the generations), session_peak_bytes (peak - before), weights_bytes
            (the model's initializers), kv_cache_bytes (the present tensors after the last
            step, measured), predicted_kv_cache_bytes (from the cache's shapes at the final
            context; ``Lab.profile_generation`` puts the cost model's figure there), context
            (P + N).
        session: per session: providers, opt_level, io_binding, load_ms, init_ms, create_ms,
            nodes_run.
        tokens: the ids the last complete generation produced, shape (batch, N + 1) (the
            prefill's token, then one per decode step; greedy, so every generation agrees).
        prompt_ids: the prompt fed, shape (batch, P).
        layout: the :class:`~onnx_lab.profiling._kv.CacheLayout` (pairs, roles, limits).
    """

    model: LabModel
    prompt_tokens: int
    new_tokens: int
    batch: int
    steps: pd.DataFrame
    generations: pd.DataFrame
    latency_stats: pd.DataFrame
    ops: pd.DataFrame
    nodes: pd.DataFrame
    memory: pd.DataFrame
    session: pd.DataFrame
    tokens: np.ndarray
    prompt_ids: np.ndarray
    layout: CacheLayout
    runs: int
    warmup: int
    profiled_generations: int
    opt_level: str
    io_binding: bool
    notes: list[str] = field(default_factory=list)
    budget_s: float | None = None
    cancelled: bool = False
    trace_paths: dict[str, str] = field(default_factory=dict)

    def stats(self, phase: str, session: str | None = None) -> pd.Series:
        """The ``latency_stats`` row of ``phase`` ('prefill' or 'decode') of a session
        (default the first)."""
        if phase not in PHASES:
            raise InputError(f"Unknown phase {phase!r}.", fix="Use 'prefill' or 'decode'.")
        st = self.latency_stats
        session = session or st.session.iloc[0]
        return st.loc[(st.session == session) & (st.phase == phase)].iloc[0]

    @property
    def prefill_ms(self) -> float:
        """Median prefill latency (ms) of the first session."""
        return float(self.stats("prefill").p50_ms)

    @property
    def decode_ms_per_token(self) -> float:
        """Median decode step (ms per generated token) of the first session."""
        return float(self.stats("decode").p50_ms)

    @property
    def tokens_per_s(self) -> float:
        """Decode throughput of the first session (batch x 1000 / median decode ms)."""
        return float(self.stats("decode").tokens_per_s)

    def samples(self, phase: str, session: str | None = None) -> np.ndarray:
        """Wall ms behind ``latency_stats`` for one phase and session."""
        row = self.stats(phase, session)
        s = self.steps
        m = (s.session == row.session) & (s.phase == phase) & ~s.warmup
        if row.latency_from == "unprofiled":
            m &= ~s.profiled
        return s.loc[m, "wall_ms"].to_numpy()

    def plot(self, session: str | None = None):
        """A matplotlib Figure: op-type shares of prefill and decode side by side, and the
        step latency along the generation (the context growing)."""
        return _display.draw(self, "plot", session=session)

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        """JSON-friendly summary (used by the CLI): settings, latency per phase, memory,
        session, the top op types per phase, the generated tokens and the notes."""
        ops = self.ops.groupby(["session", "phase"], sort=False).head(top) \
            if len(self.ops) else self.ops
        return {
            "prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens,
            "batch": self.batch, "runs": self.runs, "warmup": self.warmup,
            "profiled_generations": self.profiled_generations, "opt_level": self.opt_level,
            "io_binding": self.io_binding, "budget_s": self.budget_s,
            "cancelled": self.cancelled,
            "latency": self.latency_stats.to_dict(orient="records"),
            "generations": self.generations.to_dict(orient="records"),
            "memory": self.memory.to_dict(orient="records"),
            "session": self.session.to_dict(orient="records"),
            "ops": ops.to_dict(orient="records"),
            "cache": self.layout.to_dict(),
            "tokens": self.tokens.tolist(),
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        parts = []
        for sess in dict.fromkeys(self.latency_stats.session):
            p, d = self.stats("prefill", sess), self.stats("decode", sess)
            parts.append(f"{sess}: prefill {p.p50_ms:.3f} ms [{p.ci_low_ms:.3f}-"
                         f"{p.ci_high_ms:.3f}], decode {d.p50_ms:.3f} ms/token "
                         f"[{d.ci_low_ms:.3f}-{d.ci_high_ms:.3f}], {d.tokens_per_s:.1f} tokens/s")
        return (f"<GenerationProfile prompt {self.prompt_tokens}, {self.new_tokens} new tokens"
                f" ({'; '.join(parts)})>")

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


def _prompt_ids(prompt: Any, batch: int, layout: CacheLayout, lm: LabModel,
                seed: int) -> np.ndarray:
    if isinstance(prompt, (int, np.integer)) and not isinstance(prompt, bool):
        if prompt < 1:
            raise InputError(f"prompt must be >= 1 token, got {prompt}.",
                             fix="Use prompt=16 or pass token ids.")
        vocab = layout.vocab or _embedding_rows(lm, layout.roles["input_ids"]) or 2
        rng = np.random.default_rng(seed)
        return rng.integers(0, vocab, size=(batch, int(prompt)), dtype=np.int64)
    try:
        ids = np.asarray(prompt)
    except (TypeError, ValueError) as e:
        raise InputError(f"prompt must be a token count or token ids, got {prompt!r}.",
                         fix="Use prompt=16 or prompt=[1, 2, 3].") from e
    if ids.ndim == 1:
        ids = np.broadcast_to(ids, (batch, len(ids)))
    if ids.ndim != 2 or ids.shape[1] < 1 or ids.dtype.kind not in "iu":
        raise InputError(f"prompt ids must be integers shaped (tokens,) or (batch, tokens), "
                         f"got dtype {ids.dtype} shape {list(ids.shape)}.",
                         fix="Pass a list of token ids.")
    vocab = layout.vocab or _embedding_rows(lm, layout.roles["input_ids"])
    if ids.min() < 0 or (vocab is not None and ids.max() >= vocab):
        where = f"in [0, {vocab}) (the vocabulary of {layout.logits!r})" if vocab is not None \
            else ">= 0"
        raise InputError(f"prompt ids must lie {where}, got {int(ids.min())}.."
                         f"{int(ids.max())}.", fix="Pass token ids of this model's tokenizer.")
    return np.ascontiguousarray(ids, dtype=np.int64)


def _embedding_rows(lm: LabModel, name: str) -> int | None:
    return _gather_vocab(lm, name)


def _check_context(layout: CacheLayout, prompt: int, new_tokens: int) -> None:
    mx = layout.max_context
    if mx is None:
        return
    why = "; ".join(layout.max_context_from)
    if prompt > mx:
        raise CacheError(
            f"The prompt of {prompt} tokens is longer than the model's maximum context of "
            f"{mx} tokens ({why}).", fix=f"Use a prompt of at most {mx} tokens.")
    if prompt + new_tokens > mx:
        raise CacheError(
            f"A prompt of {prompt} tokens and {new_tokens} new tokens need a context of "
            f"{prompt + new_tokens}, longer than the model's maximum of {mx} tokens ({why}).",
            fix=f"Use at most {mx - prompt} new tokens after this prompt.")


class _Loop:
    """One greedy generation at a time on one session, with the feeding of the layout."""

    def __init__(self, sess: Any, layout: CacheLayout, prompt_ids: np.ndarray,
                 new_tokens: int, io_binding: bool) -> None:
        self.sess, self.layout = sess, layout
        self.prompt = prompt_ids
        self.b, self.P = prompt_ids.shape
        self.N = int(new_tokens)
        total = self.P + self.N
        r = layout.roles
        dt = {k: np.dtype(v) for k, v in layout.input_dtypes.items()}
        self.outs = [o.name for o in sess.get_outputs()]
        self.li = self.outs.index(layout.logits)
        self.logits_name = layout.logits
        self.pi = [(p, self.outs.index(o)) for p, o in layout.pairs]
        self.io_binding = io_binding
        provider = sess.get_providers()[0]
        self.device = "cuda" if provider in ("CUDAExecutionProvider",
                                             "TensorrtExecutionProvider") else "cpu"
        # Every step's bookkeeping feeds are views of arrays made once.
        self.mask = r.get("attention_mask")
        self.mask_full = np.ones((self.b, total), dt.get(self.mask, np.int64))
        self.pos = r.get("position_ids")
        self.pos_full = np.ascontiguousarray(np.broadcast_to(
            np.arange(total, dtype=dt.get(self.pos, np.int64)), (self.b, total)))
        self.cpos = r.get("cache_position")
        self.cpos_full = np.arange(total, dtype=dt.get(self.cpos, np.int64))
        self.seqlens = r.get("seqlens_k")
        self.total_len = r.get("total_sequence_length")
        self.branch = r.get("use_cache_branch")
        self.ttype = r.get("token_type_ids")
        self.dt = dt
        self.empty = {}
        for p in layout.past_shapes:
            shape = [self.b if d == -1 else d for d in layout.past_shapes[p]]
            self.empty[p] = np.zeros(shape, np.dtype(layout.dtypes[p]))
        self.ids = r["input_ids"]
        self.ids_dt = dt.get(self.ids, np.int64)

    def _feeds(self, ids: np.ndarray, past_len: int) -> dict[str, np.ndarray]:
        n = ids.shape[1]
        end = past_len + n
        f = {self.ids: ids}
        if self.mask:
            f[self.mask] = self.mask_full[:, :end] if self.b == 1 else \
                np.ascontiguousarray(self.mask_full[:, :end])
        if self.pos:
            f[self.pos] = np.ascontiguousarray(self.pos_full[:, past_len:end])
        if self.cpos:
            f[self.cpos] = self.cpos_full[past_len:end]
        if self.seqlens:
            f[self.seqlens] = np.full((self.b,), end - 1, self.dt[self.seqlens])
        if self.total_len:
            f[self.total_len] = np.array(end, self.dt[self.total_len])
        if self.branch:
            f[self.branch] = np.array([past_len > 0], self.dt[self.branch])
        if self.ttype:
            f[self.ttype] = np.zeros(ids.shape, self.dt[self.ttype])
        return f

    def _next(self, logits: np.ndarray) -> np.ndarray:
        last = logits[:, -1] if logits.ndim == 3 else logits
        return last.argmax(-1).astype(self.ids_dt).reshape(self.b, 1)

    def generate(self, ms: np.ndarray, cancel: Any = None) -> tuple[np.ndarray, int, list]:
        """Run one generation, writing each step's wall ms into ``ms`` (length N + 1).

        Python's cyclic garbage collector is paused during the generation (as ``timeit``
        does) and runs after it: a collection of the process's objects is not the model's
        time, and it would land on whichever step allocated last.

        Returns:
            (tokens (batch, steps), steps done, the last present values).
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._generate(ms, cancel)
        finally:
            if was_enabled:
                gc.enable()

    def _generate(self, ms: np.ndarray, cancel: Any) -> tuple[np.ndarray, int, list]:
        perf = time.perf_counter
        tokens = np.empty((self.b, self.N + 1), np.int64)
        ids = self.prompt.astype(self.ids_dt, copy=False)
        past: dict[str, Any] = self.empty
        past_len = 0
        run = self.sess.run
        outs = self.outs
        done = 0
        res: list = []
        for step in range(self.N + 1):
            if step and cancel is not None and cancelled(cancel):
                break
            t = perf()
            f = self._feeds(ids, past_len)
            if self.io_binding:
                io = self.sess.io_binding()
                for k, v in f.items():
                    io.bind_cpu_input(k, v)
                for k, v in past.items():
                    if isinstance(v, np.ndarray):
                        io.bind_cpu_input(k, v)
                    else:
                        io.bind_ortvalue_input(k, v)
                for o in outs:
                    # The cache stays on the device; the logits come to the host for argmax.
                    io.bind_output(o, "cpu" if o == self.logits_name else self.device)
                self.sess.run_with_iobinding(io)
                res = io.get_outputs()
                logits = res[self.li].numpy()
            else:
                f.update(past)
                res = run(outs, f)
                logits = res[self.li]
            nxt = self._next(logits)
            ms[step] = (perf() - t) * 1e3
            tokens[:, step] = nxt[:, 0]
            past_len += ids.shape[1]
            past = {p: res[i] for p, i in self.pi}
            ids = nxt
            done = step + 1
        return tokens[:, :done], done, [res[i] for _, i in self.pi] if done else []


def _untaken_in(lm: LabModel, phase: str) -> frozenset[str]:
    """The bodies a phase does not run: a KV-cache switch (optimum's ``use_cache_branch``)
    takes its cache branch at a decode step only."""
    cache = phase == "decode"
    return frozenset(p for s in branch_switches(lm) if s.cache_value is not None
                     for p in s.taken.get(s.cache_value != cache, ()))


_ORT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16",
               "tensor(double)": "float64", "tensor(bfloat16)": "uint16",
               "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int32)": "int32",
               "tensor(int64)": "int64"}


def _nbytes(values: list) -> int:
    """Bytes of numpy arrays or OrtValues (read from their shape and type: no copy)."""
    total = 0
    for v in values:
        if isinstance(v, np.ndarray):
            total += v.nbytes
        else:
            n = int(np.prod(v.shape(), dtype=np.int64))
            total += n * np.dtype(_ORT_DTYPES.get(v.data_type(), "float32")).itemsize
    return total


@strict_keywords  # a misspelt keyword is an InputError with its close matches
def profile_generation(model: Any, *, prompt: int | Sequence[int] | np.ndarray = 16,
                       new_tokens: int = 32, batch: int = 1,
                       providers: str | Sequence[str] | None = None, runs: int | None = None,
                       warmup: int = 1, budget_s: float | None = None,
                       profile_runs: int | None = None, dims: Mapping[str, int] | None = None,
                       threads: int | None = None, opt_level: str = "all",
                       io_binding: bool = True, seed: int = 0, progress: Any = None,
                       map_fused: bool = True, keep_trace: bool = False, cancel: Any = None,
                       rel_ci: float = STABLE_REL_CI) -> GenerationProfile:
    """Profile greedy generation: prefill latency, decode ms/token and tokens/s, with the
    per-operator share of each phase and the memory beside the KV cache.

    Each provider gets its own session. Per session: ``warmup`` generations are dropped;
    ``profile_runs`` generations run under onnxruntime's profiler (each prefill and decode
    step is one ORT run, so the trace gives the op-type shares of both phases); the profiler
    is ended, and the remaining generations time the latency without it. The prefill of a
    generation feeds the prompt with an empty cache (past length 0); each of the
    ``new_tokens`` decode steps feeds the previous step's token and its ``present.*`` as
    ``past_key_values.*``.

    Args:
        model: a Lab, LabModel, path, bytes, ModelProto or ``"sample:NAME"`` of a decoder with
            KV-cache inputs and outputs (onnxruntime-genai or optimum layout).
        prompt: the prompt length P (seeded random ids below the vocabulary size), or the
            token ids (a list, or an array shaped (batch, P)).
        new_tokens: decode steps N after the prefill (>= 1).
        batch: rows generated at once (ignored when ``prompt`` gives 2-D ids).
        providers: as :func:`onnx_lab.profile` (onnxruntime providers only).
        runs: timed generations per session, profiled ones included. None (default): until
            the decode and prefill medians are stable (``rel_ci``) or ``budget_s`` is spent.
        warmup: generations dropped first (>= 0; default 1).
        budget_s: seconds for the whole call (default :data:`PROFILE_BUDGET_S` when ``runs``
            is None), shared by the sessions; session creation counts. With ``runs`` it is an
            upper bound. A generation always finishes (with ``cancel`` it stops at the step).
        profile_runs: generations under ORT's profiler (default
            ``min(runs, GENERATE_PROFILE_RUNS)``); 0 skips the profiler (no op shares, the
            cheapest call: e.g. for tokens/s in a search).
        dims: sizes of symbolic cache dims other than batch and length (heads, head size)
            when the model leaves them open.
        threads, opt_level, map_fused, keep_trace, cancel, rel_ci, progress: as
            :func:`onnx_lab.profile`.
        io_binding: feed the cache through onnxruntime's IOBinding (outputs stay
            ``OrtValue`` on the session's device and go back in without a copy); False uses
            ``session.run`` with numpy arrays.
        seed: the seed of the random prompt.

    Returns:
        A :class:`GenerationProfile`.

    Raises:
        InputError: bad counts, a model without a KV cache, cache inputs and outputs that
            cannot be paired (names them), a prompt (plus new tokens) longer than the model's
            maximum context (names the tensor or file that sets it).
        DimError: a symbolic cache dim (heads, head size) without a value.
        ProviderError, RuntimeLoadError: as :func:`onnx_lab.profile`.

    Example:
        >>> g = onnx_lab.profile_generation(lab, prompt=32, new_tokens=16, runs=5)
        >>> g.prefill_ms, g.decode_ms_per_token, g.tokens_per_s
        >>> g.ops.loc[g.ops.phase == "decode", ["op_type", "share"]].head()
    """
    t_call = time.perf_counter()  # the budget counts from the call, as profile()'s does
    _check_counts(1 if runs is None else runs, warmup)
    for name, v in (("new_tokens", new_tokens), ("batch", batch)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise InputError(f"{name} must be a positive int, got {v!r}.",
                             fix=f"Use {name}=1 or more.")
    _check_budget_level(budget_s, opt_level)
    if profile_runs is not None and (not isinstance(profile_runs, (int, np.integer))
                                     or isinstance(profile_runs, bool) or profile_runs < 0):
        raise InputError(f"profile_runs must be an int >= 0, got {profile_runs!r}.",
                         fix="Use profile_runs=2 (0: no per-operator shares).")
    lm, dims, _shapes = resolve(model, dims, None)
    layout = cache_layout(lm, dims)
    prompt_ids = _prompt_ids(prompt, int(batch), layout, lm, seed)
    _check_context(layout, prompt_ids.shape[1], int(new_tokens))
    notes: list[str] = []
    provs, explicit = backends(providers, notes, openvino=False)
    if runs is None and budget_s is None:
        budget_s = PROFILE_BUDGET_S
    n_prof = GENERATE_PROFILE_RUNS if profile_runs is None else int(profile_runs)
    if runs is not None:
        n_prof = min(n_prof, int(runs))

    budget = Budget(budget_s, len(provs), start=t_call)
    reporter = Progress(progress, len(provs) * (int(runs) + int(warmup)) if runs is not None
                        else 100 * len(provs), "generating", min_steps=3)
    settings = _Settings(layout=layout, prompt_ids=prompt_ids, new_tokens=int(new_tokens),
                         runs=runs, n_prof=n_prof, warmup=int(warmup), threads=threads,
                         opt_level=opt_level, map_fused=map_fused, reporter=reporter,
                         budget=budget, cancel=cancel, rel_ci=rel_ci, io_binding=io_binding)
    results, trace_paths = run_sessions(
        provs, lambda p, tmp: _profile_one(lm, p, tmp, settings),
        budget=budget, reporter=reporter, cancel=cancel, explicit=explicit, notes=notes,
        keep_trace=keep_trace)
    if not results:
        raise ProviderError("No provider could run the generation.", fix="; ".join(notes))
    g = _assemble(lm, layout, prompt_ids, int(new_tokens), results, int(warmup), opt_level,
                  io_binding, notes)
    g.runs = int(runs) if runs is not None else max(r["timed"] for r in results)
    g.budget_s = budget_s
    g.trace_paths = trace_paths
    g.cancelled = any(r["stopped"] == "cancelled" for r in results) or cancelled(cancel)
    if g.cancelled:
        g.notes.append("cancelled: the tables hold the generations measured before the cancel")
    return g


@dataclass(frozen=True)
class _Settings(SessionSettings):
    """:func:`profile_generation`'s: the cache layout, the prompt, the tokens to generate and
    whether to bind the cache to the session."""

    layout: CacheLayout | None = None
    prompt_ids: np.ndarray | None = None
    new_tokens: int = 0
    io_binding: bool = False


def _profile_one(lm: LabModel, provider: str, tmp: Path, settings: _Settings) -> dict:
    s = settings
    layout, prompt_ids, new_tokens = s.layout, s.prompt_ids, s.new_tokens
    runs, n_prof, warmup, threads, opt_level = s.runs, s.n_prof, s.warmup, s.threads, s.opt_level
    map_fused, reporter, budget, cancel = s.map_fused, s.reporter, s.budget, s.cancel
    rel_ci, io_binding = s.rel_ci, s.io_binding
    short = provider.replace("ExecutionProvider", "").lower()
    profiled = n_prof > 0
    write_opt = (profiled and map_fused and wants_graph(lm, opt_level)
                 and provider != "TensorrtExecutionProvider")
    opt_path = tmp / f"{short}_gen_optimized.onnx" if write_opt else None
    share = budget.share()
    t_start = time.perf_counter()
    mem = MemoryWatch()
    sess = open_session(lm, provider, opt_level=opt_level, threads=threads, profile=profiled,
                        profile_prefix=str(tmp / f"ort_gen_{short}"),
                        optimized_model_path=str(opt_path) if opt_path else None)
    create_ms = (time.perf_counter() - t_start) * 1e3
    ticker = _Ticker(reporter, share, runs is not None, f"generating {short}")
    loop = _Loop(sess, layout, prompt_ids, new_tokens, io_binding)
    n_steps = new_tokens + 1
    gens: list[dict] = []
    step_ms: list[np.ndarray] = []
    state = {"tokens": None, "presents": []}

    def one(kind: str) -> bool:
        ms = np.full(n_steps, np.nan)
        t = time.perf_counter()
        toks, done, presents = loop.generate(ms, cancel)
        total = (time.perf_counter() - t) * 1e3
        gens.append({"kind": kind, "steps": done, "total_ms": total})
        step_ms.append(ms[:done])
        if done == n_steps:
            state["tokens"] = toks
            state["presents"] = presents
        ticker()
        return done == n_steps

    def spent(limit: float | None) -> bool:
        return limit is not None and time.perf_counter() - t_start >= limit

    trace_file = None
    why = "runs"
    try:
        # Budget mode: the warm-up gets at most a fifth of the share, the profiled
        # generations a third (each at least one), the rest times the latency.
        for i in range(warmup):
            if cancelled(cancel) or (i and share is not None and spent(share / 5)):
                break
            if not one("warmup"):
                break
        n_done_prof = 0
        if profiled:
            for i in range(n_prof):
                if cancelled(cancel) or (i and share is not None and runs is None
                                         and spent(share / 3)):
                    break
                if i and runs is not None and share is not None and spent(share):
                    break
                n_done_prof += 1
                if not one("profiled"):
                    break
            trace_file = sess.end_profiling()
        limit = int(runs) - n_done_prof if runs is not None else MAX_GENERATIONS
        why = "runs" if runs is not None else "max_runs"
        n = 0
        while n < limit:
            if cancelled(cancel):
                why = "cancelled"
                break
            if share is not None and spent(share) and (runs is not None or n >= 1
                                                       or n_done_prof > 0):
                why = "budget"
                break
            complete = one("timed")
            n += 1
            if not complete:
                why = "cancelled"
                break
            if runs is None and n >= 3:
                timed = [m for g, m in zip(gens, step_ms) if g["kind"] == "timed"]
                dec = np.concatenate([m[1:] for m in timed])
                pre = np.array([m[0] for m in timed])
                if stable(dec, rel_ci, 10) and stable(pre, rel_ci, 5):
                    why = "stable"
                    break
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        if profiled and trace_file is None:
            sess.end_profiling()
        if isinstance(e, InputError):
            raise
        raise run_failure(e, f"the generation on {provider}",
                          fix="Check lab.check() and the cache layout "
                              "(GenerationProfile.layout).") from e
    ticker.finish()
    memory = mem.stop()
    optimized = None
    if opt_path is not None and opt_path.exists():
        import onnx

        optimized = onnx.load(str(opt_path), load_external_data=False)
    # The phase of every ORT run in the trace (warm-up and profiled generations, in order).
    phases = []
    n_warm_runs = 0
    for g in gens:
        if g["kind"] == "timed":
            break
        kinds = ["prefill"] + ["decode"] * (g["steps"] - 1)
        if g["kind"] == "warmup":
            n_warm_runs += g["steps"]
        phases.extend(kinds)
    parsed = parse_trace(trace_file, warmup=n_warm_runs) if trace_file else None
    return {"provider": provider, "providers": sess.get_providers(), "create_ms": create_ms,
            "gens": gens, "step_ms": step_ms, "trace": trace_file, "parsed": parsed,
            "phases": phases, "optimized": optimized, "stopped": why, "memory": memory,
            "tokens": state["tokens"], "kv_bytes": _nbytes(state["presents"]),
            "timed": sum(1 for g in gens if g["kind"] != "warmup")}


def _rows_of(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` (some rows of a trace's) with ``parent`` renumbered to their positions
    (-1 where the parent call is not among them)."""
    rows = kernels.index.to_numpy()
    pos = pd.Series(np.arange(len(rows)), index=rows)
    parent = kernels["parent"].to_numpy()
    inside = parent >= 0
    new = np.full(len(rows), -1, dtype=np.int64)
    hit = pos.reindex(parent[inside]).to_numpy()
    new[inside] = np.where(np.isnan(hit), -1, hit).astype(np.int64)
    return kernels.assign(parent=new).reset_index(drop=True)


def _rate(tokens: int, ms: float) -> float:
    """Tokens per second of ``tokens`` in ``ms`` milliseconds (NaN for no time)."""
    return tokens * 1e3 / ms if ms and ms > 0 else float("nan")


def _assemble(lm: LabModel, layout: CacheLayout, prompt_ids: np.ndarray, new_tokens: int,
              results: list[dict], warmup: int, opt_level: str, io_binding: bool,
              notes: list[str]) -> GenerationProfile:
    b, P = prompt_ids.shape
    per_token = layout.kv_bytes_per_token(b)
    step_frames, gen_rows, stat_rows, op_frames, node_frames = [], [], [], [], []
    mem_rows, sess_rows = [], []
    for res in results:
        p = res["provider"]
        rows = []
        for gi, (g, ms) in enumerate(zip(res["gens"], res["step_ms"])):
            n = len(ms)
            steps = np.arange(n)
            ctx = np.where(steps == 0, 0, P + steps - 1)
            rows.append(pd.DataFrame({
                "session": p, "generation": gi, "step": steps,
                "phase": np.where(steps == 0, "prefill", "decode"), "context": ctx,
                "tokens_in": np.where(steps == 0, P, 1), "wall_ms": ms,
                "warmup": g["kind"] == "warmup", "profiled": g["kind"] == "profiled"}))
            dec = ms[1:]
            dsum = float(dec.sum())
            gen_rows.append({
                "session": p, "generation": gi, "warmup": g["kind"] == "warmup",
                "profiled": g["kind"] == "profiled", "complete": n == new_tokens + 1,
                "prefill_ms": float(ms[0]) if n else float("nan"), "decode_ms": dsum,
                "decode_steps": len(dec),
                "decode_ms_per_token": dsum / len(dec) if len(dec) else float("nan"),
                "tokens_per_s": b * len(dec) / dsum * 1e3 if dsum > 0 else float("nan"),
                "total_ms": g["total_ms"]})
        steps_df = pd.concat(rows, ignore_index=True)
        tok = res["tokens"]
        if tok is not None:
            # Every complete generation is greedy from the same prompt: the same tokens.
            steps_df = steps_df.assign(token=np.resize(tok[0], len(steps_df)))
        else:
            steps_df = steps_df.assign(token=-1)
        after = np.where(steps_df.step.to_numpy() == 0, P, P + steps_df.step.to_numpy())
        steps_df = steps_df.assign(kv_cache_bytes=after * per_token)
        step_frames.append(steps_df[STEP_COLUMNS])
        n_prof_gens = sum(1 for g in res["gens"] if g["kind"] == "profiled")
        n_unprof = sum(1 for g in res["gens"] if g["kind"] == "timed")
        for phase, tokens in (("prefill", P), ("decode", 1)):
            sel = steps_df.loc[(steps_df.phase == phase) & ~steps_df.warmup]
            unprof = sel.loc[~sel.profiled]
            use = unprof if len(unprof) else sel
            st = summarize(use.wall_ms.to_numpy())
            stat_rows.append({
                "session": p, "phase": phase, "tokens": tokens,
                **{c: st[c] for c in ("runs", "mean_ms", "p10_ms", "p50_ms", "p90_ms",
                                      "p99_ms", "min_ms", "max_ms", "std_ms", "ci_low_ms",
                                      "ci_high_ms", "rel_ci", "spread")},
                "tokens_per_s": _rate(b * tokens, st["p50_ms"]),
                "tokens_per_s_low": _rate(b * tokens, st["ci_high_ms"]),
                "tokens_per_s_high": _rate(b * tokens, st["ci_low_ms"]),
                "generations": n_unprof if len(unprof) else n_prof_gens,
                "profiled_generations": n_prof_gens,
                "latency_from": "unprofiled" if len(unprof) else "profiled",
                "stopped": res["stopped"]})
            busy = busy_note(use.wall_ms.to_numpy(), f"{p} {phase}")
            if busy and busy not in notes:
                notes.append(busy)
        trace = res["parsed"]
        n_nodes = 0
        if trace is not None:
            notes.extend(f"{p}: {n}" for n in trace.notes)
            k = trace.kernels
            phases = np.asarray(res["phases"] or ["prefill"], dtype=object)
            run = k.run.to_numpy()
            k = k.assign(session=p, phase=phases[np.clip(run, 0, len(phases) - 1)])
            kept = trace.runs.loc[~trace.runs.warmup, "run"].to_numpy()
            for phase in PHASES:
                kp = k.loc[k.phase == phase]
                n_runs = int(sum(1 for r in kept if r < len(phases) and phases[r] == phase))
                if not len(kp) or not n_runs:
                    continue
                # each phase maps to the branch it runs (a merged decoder's bodies share
                # their node names: the trace cannot tell them apart)
                graph, mapping = map_trace(lm, _rows_of(kp), res["optimized"], opt_level,
                                           _untaken_in(lm, phase))
                kp = kp.assign(graph=graph)
                nodes = _node_table(kp, mapping, n_runs, p)
                node_frames.append(nodes.assign(phase=phase)[PHASE_NODE_COLUMNS])
                op_frames.append(_op_table(nodes, kp, n_runs, p).assign(phase=phase)[
                    PHASE_OP_COLUMNS])
                n_nodes = max(n_nodes, len(nodes))
        m = res["memory"]
        mem_rows.append({"session": p, **{c: m.get(c, float("nan")) for c in MEMORY_COLUMNS[1:4]},
                         "weights_bytes": lm.weights_nbytes(),
                         "kv_cache_bytes": res["kv_bytes"],
                         "predicted_kv_cache_bytes": per_token * (P + new_tokens),
                         "context": P + new_tokens})
        sess_rows.append({"session": p, "providers": list(res["providers"]),
                          "opt_level": opt_level, "io_binding": io_binding,
                          "load_ms": trace.load_ms if trace is not None else float("nan"),
                          "init_ms": trace.init_ms if trace is not None else float("nan"),
                          "create_ms": res["create_ms"], "nodes_run": n_nodes})
    if not any(r["parsed"] is not None for r in results):
        notes.append("profile_runs=0: no generation ran under onnxruntime's profiler, so "
                     "there are no per-operator shares")
    last = next((r["tokens"] for r in results if r["tokens"] is not None), None)
    return GenerationProfile(
        model=lm, prompt_tokens=P, new_tokens=new_tokens, batch=b,
        steps=pd.concat(step_frames, ignore_index=True),
        generations=pd.DataFrame(gen_rows, columns=GEN_COLUMNS),
        latency_stats=pd.DataFrame(stat_rows, columns=STATS_COLUMNS),
        ops=pd.concat(op_frames, ignore_index=True) if op_frames
        else pd.DataFrame(columns=PHASE_OP_COLUMNS),
        nodes=pd.concat(node_frames, ignore_index=True) if node_frames
        else pd.DataFrame(columns=PHASE_NODE_COLUMNS),
        memory=pd.DataFrame(mem_rows, columns=MEMORY_COLUMNS),
        session=pd.DataFrame(sess_rows, columns=SESSION_COLUMNS),
        tokens=last if last is not None else np.empty((b, 0), np.int64),
        prompt_ids=prompt_ids, layout=layout, runs=0, warmup=warmup,
        profiled_generations=max(sum(1 for g in r["gens"] if g["kind"] == "profiled")
                                 for r in results),
        opt_level=opt_level, io_binding=io_binding, notes=notes)
