"""Transformer fusions as tool steps: onnxruntime's transformer optimizer and onnxscript's
rewriter.

``ort_transformers`` wraps ``onnxruntime.transformers.optimizer.optimize_model`` at
``opt_level=0`` (only its Python fusions run, no onnxruntime graph optimization): Attention,
MultiHeadAttention, SkipLayerNormalization, LayerNormalization, EmbedLayerNormalization,
BiasGelu / FastGelu / Gelu and the rest of its list. ``num_heads`` and ``hidden_size`` are read
from the model when not given (:func:`infer_heads`). Like every tool step the result is traced
(``_whole.trace_provenance``: an Attention maps back to the MatMul/Add/Softmax/... it
replaced) and verified by ``lab.apply``; on top, the result carries:

- ``result.fusions``: ``{fused op type: count}`` from the optimizer's own
  ``get_fused_operator_statistics()`` (zeros dropped), also one line of ``result.notes``;
- ``result.near_misses``: the attention / layer-norm / gelu subgraphs left unfused, with the
  condition that failed (:mod:`onnx_lab.transforms.near_miss`) and the optimizer's own debug
  log for that place (its fusion classes log "failed to match ..." at DEBUG; we capture it
  while the optimizer runs and attribute each message to the node the fusion started from).

``onnxscript_rewrite`` runs ``onnxscript.rewriter.ort_fusions.optimize_for_ort`` (where
onnxscript is installed): onnxscript's pattern-rewriter fusions for the same ops.

Example:
    >>> r = lab.apply("ort_transformers", model_type="bert")
    >>> r.fusions
    {'SkipLayerNormalization': 24, 'BiasGelu': 12, 'EmbedLayerNormalization': 1}
    >>> r.near_misses[["fusion", "anchor", "reason"]]
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core.handoff import ir_with_weights
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array
from onnx_lab.errors import PassError, close_matches
from onnx_lab.runtime.session import implemented_ops
from onnx_lab.transforms._whole import WholeModelPass
from onnx_lab.transforms.base import Param, PassContext, PassResult, register_pass
from onnx_lab.transforms.near_miss import transformer_near_misses

logger = logging.getLogger(__name__)

__all__ = ["OrtTransformersPass", "OnnxscriptRewritePass", "FusionCall", "infer_heads",
           "missing_kernels", "MODEL_TYPES", "FUSED_OPS"]

#: The model types offered (onnxruntime's optimizer knows more; these are the encoder/decoder
#: families whose fusions run at opt_level 0 on CPU).
MODEL_TYPES = ("bert", "gpt2", "vit", "clip", "t5", "bart", "swin", "phi", "gpt_neox")

#: Fused op types of the transformer optimizers (for counting and for FusionLab's groups).
FUSED_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding",
             "EmbedLayerNormalization", "SkipLayerNormalization", "LayerNormalization",
             "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "BiasGelu",
             "FastGelu", "Gelu", "QuickGelu", "GemmFastGelu", "BiasAdd", "BiasSplitGelu",
             "FusedMatMul", "RMSNormalization")


@dataclass
class FusionCall:
    """One call of an onnxruntime fusion class on one node that fused nothing but logged.

    Attributes:
        fusion: the fusion's description (``Attention``, ``LayerNormalization``...).
        anchor: name of the node the fusion started from (a LayerNormalization, SkipLayer
            Normalization, ReduceMean, Erf...), as named in the optimizer's working model.
        region: names of the nodes within a few producer steps above the anchor (the
            subgraph the fusion tried), to attribute the messages to an unfused subgraph.
        messages: the optimizer's log lines of that call, in order (``fuse_attention: failed
            to match mask path``, ``Expect Unsqueeze, Got Cast``...).
    """

    fusion: str
    anchor: str
    region: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _ort_module(name: str) -> Any:
    # onnxruntime.transformers puts its own folder on sys.path and its modules import each other
    # by bare name (``from fusion_base import Fusion``): the classes the optimizer uses live in
    # the bare-named modules, which are the ones to patch and whose loggers to listen to.
    mod = sys.modules.get(name)
    if mod is None:
        import importlib

        mod = importlib.import_module(f"onnxruntime.transformers.{name}")
    return mod


@contextlib.contextmanager
def capture_fusion_log(depth: int = 7) -> Iterator[list[FusionCall]]:
    """Record onnxruntime's fusion debug log, one :class:`FusionCall` per unfused attempt.

    The fusion classes (``Fusion.fuse(node, ...)``) log why a match failed at DEBUG on loggers
    named after their modules; while this context is open those loggers are set to DEBUG (and
    do not propagate, so nothing reaches the user's handlers) and each ``fuse`` call is wrapped
    to know which node the messages belong to. Everything is restored on exit.
    """
    from onnxruntime.transformers import optimizer  # noqa: F401 - registers the bare modules

    fusion_base = _ort_module("fusion_base")
    handler = _Collect()
    loggers = [lg for n, lg in logging.Logger.manager.loggerDict.items()
               if isinstance(lg, logging.Logger) and (n.startswith(("fusion", "onnx_model"))
                                                      or n.startswith("onnxruntime.transformers"))]
    saved = [(lg, lg.level, lg.propagate) for lg in loggers]
    calls: list[FusionCall] = []
    orig_apply = fusion_base.Fusion.apply

    def apply(self: Any) -> Any:
        inner = self.fuse

        def fuse(node: Any, input_name_to_nodes: Any, output_name_to_node: Any) -> Any:
            start, added = len(handler.lines), len(self.nodes_to_add)
            out = inner(node, input_name_to_nodes, output_name_to_node)
            msgs = handler.lines[start:]
            if msgs and len(self.nodes_to_add) == added:
                calls.append(FusionCall(self.description or self.fused_op_type, node.name,
                                        _region(node, output_name_to_node, depth), list(msgs)))
            return out

        self.fuse = fuse
        try:
            return orig_apply(self)
        except Exception as e:
            # Which fusion class raised: the step's error names it and the switch to turn off.
            if not hasattr(e, "onnx_lab_fusion"):
                e.onnx_lab_fusion = type(self).__name__  # type: ignore[attr-defined]
            raise
        finally:
            del self.fuse

    for lg in loggers:
        lg.setLevel(logging.DEBUG)
        lg.propagate = False
        lg.addHandler(handler)
    fusion_base.Fusion.apply = apply
    try:
        yield calls
    finally:
        fusion_base.Fusion.apply = orig_apply
        for lg, level, prop in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = prop


def _region(node: Any, output_name_to_node: dict[str, Any], depth: int) -> set[str]:
    """Names of ``node`` and the nodes up to ``depth`` producer steps above it (NodeProtos)."""
    seen = {node.name}
    frontier = [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for name in n.input:
                p = output_name_to_node.get(name)
                if p is not None and p.name not in seen:
                    seen.add(p.name)
                    nxt.append(p)
        frontier = nxt
    return seen


# ---------------------------------------------------------------------------- heads
def _const(value: ir.Value | None) -> np.ndarray | None:
    return None if value is None else const_array(value)


def infer_heads(model: LabModel) -> tuple[int, int]:
    """``(num_heads, hidden_size)`` read from the model, 0 where it cannot tell.

    hidden_size: the size of a LayerNormalization's scale (or of the constant a primitive
    LayerNorm's Mul applies after ReduceMean...Div). num_heads: from the split-heads Reshape
    (a constant target ``[.., .., heads, head_size]`` or a Concat ending in constants
    ``[heads]``, ``[head_size]``), else hidden / head_size with head_size = scale² of the
    attention's Div/Mul before the Softmax.

    Example:
        >>> infer_heads(onnx_lab.open("sample:bert_block").model)
        (4, 32)
    """
    hidden = 0
    sizes: dict[int, int] = {}
    for _, e in model.index.entries.items():
        n = e.node
        if n.op_type in ("LayerNormalization", "SkipLayerNormalization") and len(n.inputs) > 1:
            w = _const(n.inputs[1] if n.op_type == "LayerNormalization" else n.inputs[2])
            if w is not None and w.ndim == 1:
                sizes[w.size] = sizes.get(w.size, 0) + 1
        elif n.op_type == "Mul" and n.inputs[0] is not None and n.inputs[0].producer() \
                is not None and n.inputs[0].producer().op_type == "Div":
            div = n.inputs[0].producer()
            sq = div.inputs[1].producer() if div.inputs[1] is not None else None
            w = _const(n.inputs[1])
            if sq is not None and sq.op_type == "Sqrt" and w is not None and w.ndim == 1:
                sizes[w.size] = sizes.get(w.size, 0) + 1
    if sizes:
        hidden = max(sizes, key=lambda k: sizes[k])
    heads = 0
    for _, e in model.index.entries.items():
        n = e.node
        if n.op_type != "Reshape" or len(n.inputs) < 2:
            continue
        target = _const(n.inputs[1])
        if target is None and n.inputs[1] is not None and n.inputs[1].producer() is not None \
                and n.inputs[1].producer().op_type == "Concat":
            parts = [_const(v) for v in n.inputs[1].producer().inputs]
            if len(parts) >= 2 and parts[-1] is not None and parts[-2] is not None:
                target = np.concatenate([np.ravel(parts[-2]), np.ravel(parts[-1])])
            elif parts and parts[-1] is not None and parts[-1].size == 2:
                target = np.ravel(parts[-1])
            elif len(parts) >= 3 and parts[-2] is not None and parts[-2].size == 1 and hidden \
                    and any(u.node.op_type == "Transpose" for u in n.outputs[0].uses()):
                # GPT-2's split_heads: view(*x.size()[:-1], n_head, x.size(-1) // n_head),
                # a constant head count before a computed head size, then a permute.
                h = int(np.ravel(parts[-2])[0])
                if h > 1 and hidden % h == 0:
                    heads = h
                    break
        if target is None or target.size < 2:
            continue
        h, d = int(target[-2]), int(target[-1])
        if h > 0 and d > 0 and (not hidden or h * d == hidden):
            heads = h
            hidden = hidden or h * d
            break
    if not heads and hidden:
        for _, e in model.index.entries.items():
            n = e.node
            if n.op_type != "Softmax" or n.inputs[0] is None:
                continue
            p = n.inputs[0].producer()
            while p is not None and p.op_type in ("Add", "Where"):
                # Add(scores, mask) reads the scores first; Where(mask, scores, fill) second.
                k = 1 if p.op_type == "Where" else 0
                p = p.inputs[k].producer() if len(p.inputs) > k and p.inputs[k] is not None \
                    else None
            if p is not None and p.op_type in ("Div", "Mul"):
                c = _const(p.inputs[1])
                if c is not None and c.size == 1 and float(c) > 0:
                    dh = round(float(c) ** 2 if p.op_type == "Div" else float(c) ** -2)
                    if dh and hidden % dh == 0:
                        heads = hidden // dh
                        break
    return heads, hidden


#: The FusionOptions switch (without ``enable_``) that turns a fusion class off.
_SWITCHES = (("Skip", "skip_layer_norm"), ("BiasGelu", "bias_gelu"), ("Embed", "embed_layer_norm"),
             ("LayerNorm", "layer_norm"), ("Gelu", "gelu"), ("Rotary", "rotary_embeddings"),
             ("Attention", "attention"))


def _switch_of(fusion_class: str | None) -> str | None:
    """``FusionSimplifiedLayerNormalization`` -> ``layer_norm`` (None when unknown)."""
    if not fusion_class:
        return None
    if "BiasSkip" in fusion_class:
        return "bias_skip_layer_norm"
    return next((sw for key, sw in _SWITCHES if key in fusion_class), None)


def missing_kernels(proto: Any) -> dict[str, int]:
    """``{op type: count}`` of the com.microsoft ops in ``proto`` (a ModelProto) that no
    execution provider of the installed onnxruntime implements.

    The transformer optimizer writes ops some builds cannot run: T5's RelativePositionBias,
    Stable Diffusion's GroupNorm, NhwcConv, BiasSplitGelu have CUDA kernels only. We ask
    onnxruntime's own kernel registry rather than keep a list (it changes between releases);
    empty when the registry cannot be read, and verification then reports what fails.

    Example:
        >>> missing_kernels(onnx.load("t5_fused.onnx"))  # CPU build
        {'RelativePositionBias': 1}
    """
    have = implemented_ops("com.microsoft")
    if have is None:
        return {}
    out: dict[str, int] = {}
    for n in proto.graph.node:
        if n.domain == "com.microsoft" and n.op_type not in have:
            out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


# ---------------------------------------------------------------------------- passes
class _FusionStep(WholeModelPass):
    """Shared by the transformer fusion steps: counts and near-misses on the result."""

    fused_ops = True

    def run(self, model: LabModel, context: PassContext | None = None) -> PassResult:
        self.fusions: dict[str, int] = {}
        self.calls: list[FusionCall] = []
        result = super().run(model, context)
        result.fusions = dict(self.fusions)  # type: ignore[attr-defined]
        if self.fusions:
            result.notes.insert(0, "fused: " + ", ".join(f"{k} {v}"
                                                         for k, v in self.fusions.items()))

        result.near_misses = transformer_near_misses(  # type: ignore[attr-defined]
            result.model, self.calls, source=self.name,
            model_type=self.options.get("model_type"))
        if not result.modified and not result.near_misses.empty:
            result.reason = (f"{result.reason}; {len(result.near_misses)} near-miss(es): "
                             f"{result.near_misses.description.iloc[0]}")
        return result


class OrtTransformersPass(_FusionStep):
    """onnxruntime's transformer optimizer fusions (Attention, SkipLayerNorm, Gelu...), opt_level 0."""

    params = (
        Param("model_type", str, "bert", "bert, gpt2, vit, clip, t5, bart, swin, phi, gpt_neox"),
        Param("num_heads", int, 0, "attention heads (0: read from the model)"),
        Param("hidden_size", int, 0, "hidden size (0: read from the model)"),
        Param("disable", (list, tuple), None, "fusions to turn off, FusionOptions names "
              "without 'enable_' (attention, skip_layer_norm, embed_layer_norm, bias_gelu, "
              "gelu, layer_norm, bias_skip_layer_norm, gelu_approximation...)"),
        Param("use_multi_head_attention", bool, False, "fuse MultiHeadAttention instead of "
              "Attention"),
        Param("allow_missing_kernels", bool, False, "keep a result with fused ops this "
              "onnxruntime has no kernel for (T5's RelativePositionBias is CUDA-only): to save "
              "it for another machine; it cannot be verified here"),
    )
    needs_weights = True
    no_match_reason = "onnxruntime's transformer optimizer fused nothing"

    def _options(self) -> Any:
        from onnxruntime.transformers.fusion_options import FusionOptions

        opts = FusionOptions(self.options["model_type"])
        known = sorted(k[len("enable_"):] for k in vars(opts) if k.startswith("enable_"))
        for name in self.options["disable"] or []:
            if name not in known:
                near = close_matches(str(name), known)
                raise PassError(f"onnxruntime's FusionOptions has no switch enable_{name}"
                                + (f" (close: {', '.join(near)})" if near else "") + ".",
                                fix=f"Known: {', '.join(known)}.")
            setattr(opts, f"enable_{name}", False)
        opts.use_multi_head_attention = self.options["use_multi_head_attention"]
        return opts

    def rebuild(self, model: LabModel) -> ir.Model | None:
        mt = self.options["model_type"]
        if mt not in MODEL_TYPES:
            near = close_matches(mt, list(MODEL_TYPES))
            raise PassError(f"ort_transformers has no model_type {mt!r}"
                            + (f" (close: {', '.join(near)})" if near else "") + ".",
                            fix=f"Known: {', '.join(MODEL_TYPES)}.")
        from onnxruntime.transformers.optimizer import optimize_model

        heads, hidden = self.options["num_heads"], self.options["hidden_size"]
        if not heads or not hidden:
            h, d = infer_heads(model)
            heads, hidden = heads or h, hidden or d
            if heads and hidden:
                self.notes.append(f"num_heads={heads}, hidden_size={hidden} read from the model")
            else:
                # The optimizer asserts both or neither; with neither its fusions read the
                # heads from the graph where they can (BERT, CLIP, T5), else they stay unfused.
                # (no hint for a model that holds its attention as one op already)
                if not any(e.node.op_type in ("Attention", "MultiHeadAttention",
                                              "GroupQueryAttention")
                           for e in model.index.entries.values()):
                    self.notes.append(
                        f"num_heads/hidden_size could not be read from the model (got "
                        f"{heads or '?'}/{hidden or '?'}): the optimizer detects them per "
                        "fusion; give num_heads= and hidden_size= if an Attention is missing")
                heads = hidden = 0
        if heads and hidden % heads:
            raise PassError(f"ort_transformers: hidden_size {hidden} is not a multiple of "
                            f"num_heads {heads}.",
                            fix="Give num_heads= and hidden_size= of the model's attention "
                            "(hidden_size = num_heads * head_size).")
        opts = self._options()
        if mt == "phi" and not model.ir.functions:
            # onnxruntime's phi path rewrites the local functions of the dynamo export of
            # Phi-2 ("'method' object is not iterable" on any other export)
            raise PassError("ort_transformers model_type='phi' works on the dynamo export of "
                            "Phi-2 only (it rewrites that export's local functions), and "
                            "this model has no local functions.",
                            fix="Use model_type='gpt2' for other Phi exports (optimum's, "
                            "TorchScript's): its fusions (rotary embedding, SkipLayerNorm) "
                            "apply to them.")
        proto = self.proto_with_weights(model)
        try:
            with capture_fusion_log() as calls:
                opt = optimize_model(proto, model_type=mt, num_heads=heads, hidden_size=hidden,
                                     optimization_options=opts, opt_level=0, use_gpu=False)
        except Exception as e:  # noqa: BLE001 - the optimizer raises whatever its fusions raise
            where = getattr(e, "onnx_lab_fusion", None)
            switch = _switch_of(where)
            text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            raise PassError(
                "onnxruntime's transformer optimizer failed"
                + (f" in {where}" if where else "") + f": {type(e).__name__}"
                + (f": {text}" if text else ""),
                fix=(f"Turn that fusion off: disable=[{switch!r}]; or try another model_type, "
                     "or give num_heads=/hidden_size=." if switch else
                     "Try another model_type, give num_heads=/hidden_size=, or turn the "
                     "failing fusion off (disable=[...]).")) from e
        self.calls = calls
        # its statistics count the ops of the result: those the export already held are no
        # fusion of this step (an opset-23 export's Attention and RotaryEmbedding were said
        # "fused" on a model left unchanged)
        held: dict[str, int] = {}
        for e in model.index.entries.values():
            held[e.node.op_type] = held.get(e.node.op_type, 0) + 1
        stats = opt.get_fused_operator_statistics()
        self.fusions = {k: int(v) - held.get(k, 0) for k, v in stats.items()
                        if v and int(v) > held.get(k, 0)}
        missing = missing_kernels(opt.model)
        if missing:
            import onnxruntime

            what = ", ".join(f"{op} ({n})" for op, n in missing.items())
            providers = ", ".join(onnxruntime.get_available_providers())
            if not self.options["allow_missing_kernels"]:
                raise PassError(
                    f"ort_transformers model_type={mt!r} fused {what}, which onnxruntime "
                    f"{onnxruntime.__version__} has no kernel for on its providers here "
                    f"({providers}): the result would not run on this machine.",
                    fix="Run the step where onnxruntime-gpu provides the kernel (CUDA), or "
                    "pass allow_missing_kernels=True, verify=False to keep the fused model for "
                    "such a machine (save it; it cannot be verified here).")
            self.notes.append(f"{what}: no kernel in onnxruntime {onnxruntime.__version__} "
                              f"here ({providers}); the result does not run on this machine")
        return self.from_proto(opt.model, model)


class OnnxscriptRewritePass(_FusionStep):
    """onnxscript's rewriter fusions for onnxruntime (optimize_for_ort: SDPA, MHA, GQA, norms, Gelu)."""

    no_match_reason = "onnxscript's rewriter fused nothing"

    def rebuild(self, model: LabModel) -> ir.Model | None:
        try:
            from onnxscript.rewriter.ort_fusions import optimize_for_ort
        except ImportError as e:  # an onnxscript without the ORT fusions
            raise PassError(f"this onnxscript has no rewriter.ort_fusions ({e})",
                            fix="pip install -U onnxscript, or use ort_transformers.") from e

        # The rewriter edits in place: give it its own copy (weights in memory), so the
        # model ``run`` traces provenance against keeps its structure.
        work = ir_with_weights(model, self.name)
        # onnx_ir's passes inside it log a WARNING per initializer they leave alone (807
        # lines for light ResNet-50, whose weights are graph inputs): not the user's concern
        chatty = logging.getLogger("onnx_ir.passes")
        level = chatty.level
        chatty.setLevel(logging.ERROR)
        try:
            out, counts = optimize_for_ort(work)
        except Exception as e:  # noqa: BLE001 - rewrite rules raise whatever they raise
            raise PassError(f"onnxscript's optimize_for_ort failed: "
                            f"{str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__}",
                            fix="Use ort_transformers, or onnx_lab's own passes.") from e
        finally:
            chatty.setLevel(level)
        self.fusions = {k: int(v) for k, v in counts.items() if v}
        # as every tool's result: IR < 4 initializers listed as inputs again (its passes drop
        # them: light ResNet-50's result did not load, "initializer_arg was false")
        return self.from_ir(out, model)


def onnxscript_available() -> bool:
    """Whether onnxscript is installed (the step says so if its rewriter lacks the ORT
    fusions). Only the top-level package is looked up: finding a submodule imports its
    parents, and importing onnxscript costs ~0.1 s that every first pass lookup (``onnx-lab
    optimize``) would pay."""
    import importlib.util

    try:
        return importlib.util.find_spec("onnxscript") is not None
    except (ImportError, ValueError):
        return False


def _register() -> None:
    register_pass("ort_transformers", kind="tool")(OrtTransformersPass)
    if onnxscript_available():
        register_pass("onnxscript_rewrite", kind="tool")(OnnxscriptRewritePass)
