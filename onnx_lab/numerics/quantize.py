"""Candidates made easy: fp16 and int8 (dynamic, static QDQ) versions of a model.

float16 by :mod:`onnx_lab.numerics.half` (the op schemas' type constraints); int8 by thin
wrappers over ``onnxruntime.quantization``: they work on files or ModelProtos with weights in
memory, so the model is materialised once; the result is a new in-memory :class:`~onnx_lab.lab.Lab` with the
same dims/shapes. Intermediate tensor names are kept by these tools, so :func:`onnx_lab.compare`
aligns the result to the original layer by layer (QDQ models through DequantizeLinear outputs).

Example:
    >>> lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    >>> onnx_lab.compare(lab, to_int8_dynamic(lab)).layers[["tensor", "max_abs"]]
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core._location import user_path
from onnx_lab.core.handoff import read_output, work_folder
from onnx_lab.core.model import LabModel
from onnx_lab.core.outputs import write_atomic
from onnx_lab.core.save import wants_external, write_model
from onnx_lab.core.source import resolve
from onnx_lab.core.values import QUANTIZATION_OPS, foldable_nodes, is_constant
from onnx_lab.errors import InputError, PassError, unknown_name
from onnx_lab.numerics.half import full_proto as _full_proto  # noqa: F401 - trials read it here
from onnx_lab.numerics.half import half_proto
from onnx_lab.runtime.cpu import int8_saturates
from onnx_lab.runtime.feeds import as_feed_list, make_feeds

logger = logging.getLogger(__name__)

__all__ = ["fp16_model", "int8_dynamic_model", "int8_static_model", "Calibration",
           "calibrate_int8", "calibration_samples", "RANGE_COLUMNS"]

#: Columns of :attr:`Calibration.ranges`.
RANGE_COLUMNS = ["tensor", "lowest", "highest", "abs_max", "node_id", "op_type"]


def _model_from(proto: onnx.ModelProto) -> LabModel:
    return LabModel(ir.serde.deserialize_model(proto))


def _save(model: LabModel, path: Path) -> None:
    """``model`` written for onnxruntime's quantizers, by the one rule of
    :func:`onnx_lab.core.save.write_model` (a data file of its own beside it when the model
    reads external data or passes 2 GB, small tensors inline)."""
    write_model(model, path, f"{path.name}.data" if wants_external(model) else None)


def named_by_id(model: LabModel, node_ids: Iterable[str] | None = None) -> LabModel:
    """``model``, or a copy whose nodes (``node_ids``: those alone) whose name is not their
    node id (unnamed: onnx-caffe2's exports name none; or a name several nodes share) are
    named by it: onnxruntime's quantizers select nodes by name. The node ids of the copy are
    those of ``model``."""
    ids = list(model.index.entries) if node_ids is None else list(node_ids)
    renamed = [nid for nid in ids if model.index.node(nid).name != nid]
    if not renamed:
        return model
    copy = model.clone()
    for nid in renamed:
        copy.index.node(nid).name = nid
    copy.invalidate()
    return copy


def _node_names(model: LabModel, ids: Iterable[str] | None) -> tuple[LabModel, list[str]]:
    """(``model`` with its nodes named by their ids (:func:`named_by_id`), the node names of
    ``ids`` in it, which are the ids): the quantizers select nodes by name, and the ids a
    refusal names are then the model's, also after the Constant nodes are lifted out.
    UnknownNameError (with close matches) for an id that is no node's."""
    ids = list(dict.fromkeys([ids] if isinstance(ids, str) else ids or ()))  # one id: not its letters
    for nid in ids:
        model.index.node(nid)  # UnknownNameError with close matches
    return named_by_id(model), ids


def fp16_model(source: Any, keep_io_types: bool = True,
               block_list: Sequence[str] | None = None) -> LabModel:
    """A float16 copy of the model; ``onnx_lab.to_fp16`` wraps it in a Lab.

    The conversion follows the op schemas (:mod:`onnx_lab.numerics.half`): inputs that must
    share a type are converted together, index computations keep their types, and casts for
    values read inside If/Loop/Scan bodies live where every body sees them. Node names
    become the node ids. The result passes onnx's checker (a failure is a
    :class:`~onnx_lab.numerics.half.ConversionBug`, a bug report).

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        keep_io_types: keep float32 inputs/outputs (Casts inserted), so the fp16 model takes the
            same feeds as the original.
        block_list: op types (``"Softmax"``) and/or node ids kept in float32.

    Example:
        >>> half = fp16_model("sample:transformer_block", block_list=["Softmax"])
    """
    model = resolve(source)[0]
    ops = {e.node.op_type for e in model.index.entries.values()}
    kept: set[str] = set()
    for item in ([block_list] if isinstance(block_list, str) else block_list or ()):
        if item in model.index.entries:
            kept.add(item)
        elif item in ops:
            kept.update(nid for nid, e in model.index.entries.items() if e.node.op_type == item)
        else:
            raise unknown_name("node id or op type", item, list(model.index.entries) + sorted(ops))
    _refuse_bfloat16(model)
    return _model_from(half_proto(model, kept, keep_io_types=keep_io_types))


def _refuse_bfloat16(model: LabModel) -> None:
    """InputError for a model that computes in bfloat16 (a torch ``.to(torch.bfloat16)``
    export): the conversion changes float32 only, so its result was the bfloat16 model
    itself, unchanged, under a float16 label."""
    from onnx_lab.numerics.half import HalfRules

    if HalfRules(model).candidates:
        return
    half = sum(1 for g in model.ir.graphs() for v in g.initializers.values()
               if v.dtype == ir.DataType.BFLOAT16)
    half += sum(1 for v in model.ir.graph.inputs if v.dtype == ir.DataType.BFLOAT16)
    if not half:
        return
    raise InputError("The fp16 conversion has nothing to convert: it changes float32 "
                     "computation, and this model computes in bfloat16 (its result would be "
                     "the bfloat16 model, unchanged).",
                     fix="Export the model in float32 (before .to(torch.bfloat16)) and "
                     "convert that.")


class _NoPreprocessAdvice(logging.Filter):
    """Drops onnxruntime.quantization's "consider pre-processing" root warning, printed on
    every call (a retried exclusion set would print it once per trial), and its other
    per-trial chatter named below."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        # ... nor "Expected bias X to be an initializer", once per conv per trial on exports
        # whose biases pass through an Identity (YOLOv8): the conv is quantized, its bias
        # stays float; nor "failed to infer the type of tensor ...", once per tensor its own
        # inference cannot type (a ZipMap's outputs, a contrib op's): the nodes it leaves
        # float are what the plan's comparison measures.
        return "pre-process" not in msg and not msg.startswith(("Expected bias",
                                                                 "failed to infer"))


_ADVICE_FILTER = _NoPreprocessAdvice()


def _quantize(model: LabModel, fn, **kw) -> LabModel:
    root = logging.getLogger()
    root.addFilter(_ADVICE_FILTER)
    try:
        try:
            return _quantize_files(model, fn, **kw)
        except PassError as e:
            if "Unable to find data type" not in e.problem:
                raise
            # onnxruntime's contrib ops (GroupQueryAttention, RotaryEmbedding, the fused
            # LayerNorms of a genai build) have no ONNX shape inference, so their outputs
            # have no type and the quantizer stops; they are the model's float type
            extra = {**(kw.pop("extra_options", None) or {}),
                     "DefaultTensorType": _float_type(model)}
            return _quantize_files(model, fn, extra_options=extra, **kw)
    finally:
        root.removeFilter(_ADVICE_FILTER)


def _float_type(model: LabModel) -> int:
    """The float type of ``model``'s weights (``onnx.TensorProto`` code): float16 when most
    float weights are, else float32."""
    half = full = 0
    for g in model.ir.graphs():
        for v in g.initializers.values():
            if v.dtype == ir.DataType.FLOAT16:
                half += 1
            elif v.dtype == ir.DataType.FLOAT:
                full += 1
    return onnx.TensorProto.FLOAT16 if half > full else onnx.TensorProto.FLOAT


def _quantize_files(model: LabModel, fn, source: Path | None = None, **kw) -> LabModel:
    """``fn(src, dst, **kw)`` on ``model`` saved to a temporary file (or on ``source``, the
    same model already saved there by :class:`SavedSource`)."""
    with work_folder("quantize") as tmp:
        src, dst = tmp / "model.onnx", tmp / "model.int8.onnx"
        if source is not None:
            src = source
        else:
            _save(model, src)
        try:
            # A tensor of one value calibrates to a zero range: the quantizer divides by its
            # zero scale (numpy warnings on the console, here and in calibrate_int8); the
            # candidate is judged anyway (T5's relative_attention_bias Gather then fails to
            # run: a failed trial).
            with np.errstate(divide="ignore", invalid="ignore"):
                fn(str(src), str(dst), **kw)
        except Exception as e:  # noqa: BLE001 - the quantizer raises assorted errors
            msg = str(e).strip()
            if re.search(r"Expected (\S+) to be an initializer", msg):
                raise _unstored_conv_weights(model, msg) from e
            raise PassError(f"quantization failed: {msg[:400]}",
                            fix="Exclude the failing nodes (nodes_to_exclude=[...]).") from e
        return LabModel(read_output(dst, "quantization"))


def _unstored_conv_weights(model: LabModel, msg: str) -> PassError:
    """The refusal of onnxruntime's dynamic quantizer at a Conv with a bias whose weight is
    no stored tensor ("Expected w to be an initializer"): every such Conv named, with what
    its weight is, and the fix that works: the nodes kept out (``nodes_to_exclude``), after
    which the quantizer takes the others; folding where the weights are computed from stored
    tensors alone (what ``onnx_lab.to_int8_dynamic`` does itself, within the run memory
    limit). It read "computed by a node ... fold constants first" of a weight fed as a graph
    input, which no folding stores."""
    foldable = {id(v) for v in computed_weights(model)}
    blocked = [(nid, e.node.inputs[1]) for nid, e in model.index.entries.items()
               if e.node.op_type == "Conv" and e.node.domain in ("", "ai.onnx")
               and len(e.node.inputs) > 2 and e.node.inputs[2] is not None
               and e.node.inputs[1] is not None and e.node.inputs[1].const_value is None]
    if not blocked:
        return PassError(f"quantization failed: {msg[:400]}",
                         fix="Exclude the failing nodes (nodes_to_exclude=[...]).")

    def what(v: ir.Value) -> str:
        if v.is_graph_input():
            return "a graph input, fed at run time"
        p = v.producer()
        by = f"{p.op_type} {model.index.node_id(p)!r}" if p is not None else "a node"
        return f"computed by {by}" + (" from stored tensors" if id(v) in foldable else
                                      " at run time")

    shown = "; ".join(f"Conv {nid!r} reads {v.name!r} ({what(v)})" for nid, v in blocked[:3])
    more = f"; and {len(blocked) - 3} more" if len(blocked) > 3 else ""
    ids = [nid for nid, _ in blocked]
    fold = all(id(v) in foldable for _, v in blocked)
    return PassError(f"quantization failed: onnxruntime's dynamic quantizer takes a Conv with "
                     f"a bias only when its weight is a stored tensor, and {len(blocked)} "
                     f"Conv node(s) read a weight that is not: {shown}{more}.",
                     fix=("Fold constants first, with a limit the weights fit in "
                          "(lab.apply('fold_constants', max_growth_bytes=1 << 30): the "
                          "default 16 MB refuses larger folds), then quantize the result; or "
                          f"keep them in float: nodes_to_exclude={ids!r}." if fold else
                          f"Keep them in float: nodes_to_exclude={ids!r} (the quantizer takes "
                          "the others)."))


def reduce_range_for(reduce_range: bool | None) -> bool:
    """``reduce_range`` as given, or (None) what this CPU needs: 7-bit weights where
    onnxruntime's U8S8 kernels saturate (:func:`onnx_lab.runtime.cpu.int8_saturates`)."""
    return int8_saturates() if reduce_range is None else bool(reduce_range)


def int8_dynamic_model(source: Any, nodes_to_exclude: Sequence[str] | None = None,
                       reduce_range: bool | None = None) -> LabModel:
    """Dynamic int8 quantization (weights int8, activations quantized at run time);
    ``onnx_lab.to_int8_dynamic`` wraps it in a Lab.

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        nodes_to_exclude: node ids kept in float.
        reduce_range: quantize weights to 7 bits. None (default): where this CPU's int8
            kernels saturate (x86-64 with AVX2 and no VNNI, :mod:`onnx_lab.runtime.cpu`),
            whose full-range results err several times more.

    Example:
        >>> q = int8_dynamic_model("sample:transformer_block")
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = resolve(source)[0]
    model, exclude = _node_names(model, nodes_to_exclude)
    _refuse_without_onnx_ops(model)
    _refuse_half_activations(model)
    model = _lifted(model)
    model, kept = _standard_attention_kept(model)
    exclude = list(dict.fromkeys([*exclude, *kept]))
    kw = {"weight_type": QuantType.QInt8, "nodes_to_exclude": exclude,
          "reduce_range": reduce_range_for(reduce_range)}
    if not _has_bodies(model):
        return _something_quantized(_quantize(model, quantize_dynamic, **kw), "dynamic",
                                    model, excluded=bool(exclude))
    # If/Loop/Scan bodies (an optimum merged decoder: every MatMul inside an If on
    # use_cache_branch): onnxruntime's dynamic quantizer enters them with EnableSubgraph
    try:
        out = _quantize(model, quantize_dynamic, extra_options={"EnableSubgraph": True}, **kw)
    except PassError as e:
        logger.warning("int8 dynamic quantization of the If/Loop bodies failed (%s): only the "
                       "main graph is quantized, the bodies stay in float32", e.problem)
        out = _quantize(model, quantize_dynamic, **kw)
    return _something_quantized(out, "dynamic", model, excluded=bool(exclude))


def _standard_attention_kept(model: LabModel) -> tuple[LabModel, list[str]]:
    """(the model, the names of its ONNX-domain Attention nodes, opset 23): onnxruntime's
    dynamic quantizer takes every op named Attention for com.microsoft's and writes a
    QAttention that does not load ("every opset-23 transformer export refused"); they stay
    in float32, their MatMuls around them quantized. Unnamed ones get their ids as names,
    on a copy."""
    found = [(nid, e.node) for nid, e in model.index.entries.items()
             if e.node.op_type == "Attention" and e.node.domain in ("", "ai.onnx")]
    if not found:
        return model, []
    if any(not n.name for _, n in found):
        model = model.clone()
        found = [(nid, model.index.entries[nid].node) for nid, _ in found]
        for nid, node in found:
            node.name = node.name or nid
        model.invalidate()
    logger.info("ONNX Attention kept in float32 by the dynamic quantizer: %s",
                [n.name for _, n in found])
    return model, [n.name for _, n in found]


def _refuse_without_onnx_ops(model: LabModel) -> None:
    """InputError for a model with no op of the ONNX domain (an ai.onnx.ml-only
    LinearClassifier, a tree ensemble): onnxruntime's quantizer stops with "Failed to find
    proper ai.onnx domain", and there is nothing an int8 conversion could take."""
    domains = {n.domain or "ai.onnx" for g in model.ir.graphs() for n in g}
    if not domains or "ai.onnx" in domains:
        return
    raise InputError(f"int8 quantization has nothing to take: every op of the model is in "
                     f"{', '.join(sorted(map(repr, domains)))}, none in the ONNX domain "
                     "(MatMul, Conv, Gemm).",
                     fix="Keep the model in float32: int8 does not apply to it.")


def _refuse_half_activations(model: LabModel) -> None:
    """InputError for a float16 model (a torch ``.half()`` export): onnxruntime's dynamic
    quantizer puts a DynamicQuantizeLinear, which takes float32 only, before each op it
    quantizes, so its result never loads, whatever nodes are kept out."""
    if _float_type(model) != onnx.TensorProto.FLOAT16 or not _computes_in_half(model):
        return
    raise InputError("The dynamic int8 quantization takes a float32 model: this model "
                     "computes in float16, and the DynamicQuantizeLinear that onnxruntime's "
                     "dynamic quantizer puts before each quantized op takes float32 only "
                     "(its result would not load, whatever nodes are kept out).",
                     fix="Quantize the float32 model (export it before .half()), or use "
                     "to_int8_static, whose QuantizeLinear takes float16.")


def _computes_in_half(model: LabModel) -> bool:
    """Whether most MatMul/Conv/Gemm nodes of the main graph read float16 data (True when no
    type is known). Weights stored in float16 and cast up (``MatMul(x, Cast(w16))``) make a
    float32 model: refused as a float16 one, with the advice to export it before .half(),
    where folding its constants lets the quantizer take it."""
    from onnx_lab.core.shapes import value_type

    types = model.types()
    seen = [info.dtype for n in model.ir.graph
            if n.op_type in ("MatMul", "Conv", "Gemm") and n.domain in ("", "ai.onnx")
            and n.inputs and n.inputs[0] is not None
            and (info := value_type(model, n.inputs[0], types)) is not None and info.dtype]
    return not seen or 2 * seen.count("float16") > len(seen)


_QUANTIZED_OPS = ("QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
                  "QLinearMatMul", "QLinearConv", "DynamicQuantizeMatMul", "QAttention",
                  "QGemm", "QLinearAdd", "QLinearMul")


def _something_quantized(model: LabModel, kind: str, source: LabModel | None = None,
                         excluded: bool = True) -> LabModel:
    """``model``, or InputError when the quantizer changed no op (every weight it
    could take was excluded, or the compute is out of its reach: ``source``'s MatMul, Conv
    and Gemm all inside If/Loop bodies, which the static quantizer does not enter)."""
    if any(n.op_type in _QUANTIZED_OPS for g in model.ir.graphs() for n in g):
        return model
    main = {id(n) for n in source.ir.graph} if source is not None else set()
    compute = [(n, g) for g in (source.ir.graphs() if source is not None else ()) for n in g
               if n.op_type in ("MatMul", "Conv", "Gemm") and id(n) not in main]
    inside = len(compute)
    # a body's weight that is no stored tensor (a TF while_loop carries its MatMul's weight
    # as a loop variable): neither of onnxruntime's quantizers takes it (an initializer of
    # the outer graph, an optimum merged decoder's, the dynamic one does)
    outer = sum(1 for n, _g in compute
                if not (len(n.inputs) > 1 and is_constant(n.inputs[1], stored=True)))
    owner_of = {id(b): n.op_type for g in (source.ir.graphs() if source is not None else ())
                for n in g for a in n.attributes.values()
                for b in (a.value if isinstance(a.value, list) else [a.value])
                if isinstance(b, ir.Graph)}
    owners = {owner_of.get(id(g), "") for _, g in compute}
    bodies = "If/Loop bodies" + (" (an optimum merged decoder's use_cache_branch)"
                                 if owners <= {"If"} and "If" in owners else "")
    if inside and not any(n.op_type in ("MatMul", "Conv", "Gemm") for n in source.ir.graph):
        if outer == inside:
            raise InputError(f"The {kind} int8 quantization quantized nothing: all {inside} "
                             f"MatMul/Conv/Gemm nodes of the model are inside {bodies} and "
                             "read their weights from values that are no stored tensor (a "
                             "loop variable), which neither of onnxruntime's quantizers "
                             "takes.",
                             fix="The model stays in float32; int8 would need the weights "
                             "inside the bodies (a re-export).")
        if kind == "static":
            raise InputError(f"The static int8 quantization quantized nothing: all {inside} "
                             f"MatMul/Conv/Gemm nodes of the model are inside {bodies}, "
                             "which onnxruntime's static (QDQ) quantizer does not enter.",
                             fix="to_int8_dynamic quantizes them inside the bodies; or "
                             "quantize the decoder exported without the merge (one model "
                             "per step).")
    folded = [] if excluded or source is None else _computed_weights(source)
    if folded:
        shown = ", ".join(repr(w) for w in folded[:3]) + (", ..." if len(folded) > 3 else "")
        raise InputError(f"The {kind} int8 quantization quantized nothing: the weights of the "
                         f"model's MatMul/Conv/Gemm nodes are computed from stored tensors "
                         f"by nodes ({shown}: a Transpose of the weight, as torch's dynamo "
                         "export with optimize=False writes), and onnxruntime's quantizer "
                         "takes stored weights only.",
                         fix="Fold constants first, with a limit the weights fit in "
                         "(lab.apply('fold_constants', max_growth_bytes=1 << 30): the safe "
                         "preset's 16 MB refuses larger folds), then quantize the result.")
    raise InputError(f"The {kind} int8 quantization quantized nothing: onnxruntime's "
                     "quantizer found no MatMul, Conv or Gemm with a weight it could take "
                     + ("(all excluded, or none in the model)." if excluded else
                        "(none in the model with a stored weight)."),
                     fix=("Check nodes_to_exclude, and lab.nodes for the ops to quantize; "
                          "the model as it is stays in float." if excluded else
                          "The model as it is stays in float."))


#: The inputs onnxruntime's quantizers take as weights (a Conv's and a Gemm's bias too): a
#: stored tensor, or a value computed from stored tensors alone that folding stores.
WEIGHT_INPUTS = {"MatMul": (1,), "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2)}


def computed_weights(model: LabModel) -> list[ir.Value]:
    """The main graph's MatMul/Conv/ConvTranspose/Gemm weights and biases
    (:data:`WEIGHT_INPUTS`) that nodes compute from stored tensors alone: a Transpose or Cast
    of an initializer (torch's dynamo export with ``optimize=False``), a ConstantOfShape
    (onnx-caffe2's exports, the onnx package's light CNNs). onnxruntime's quantizers take
    stored weights only: the dynamic one stops at a Conv with a bias ("Expected ... to be an
    initializer") and quantizes the others' weights at every run as activations, the static
    one calibrates them as activations. Folding (``fold_constants``) stores them; a weight
    that is already quantized (a DequantizeLinear's output) is not listed."""
    fold = foldable_nodes(model, keep=QUANTIZATION_OPS)
    found: dict[int, ir.Value] = {}
    for n in model.ir.graph:
        if n.domain not in ("", "ai.onnx"):
            continue
        for i in WEIGHT_INPUTS.get(n.op_type, ()):
            v = n.inputs[i] if len(n.inputs) > i else None
            p = v.producer() if v is not None else None
            if p is not None and id(p) in fold:
                found.setdefault(id(v), v)
    return list(found.values())


def _computed_weights(model: LabModel) -> list[str]:
    """Names of :func:`computed_weights` (input 1: the weights, not the biases)."""
    weights = {id(v) for v in computed_weights(model)}
    return [n.inputs[1].name for n in model.ir.graph
            if n.op_type in WEIGHT_INPUTS and n.domain in ("", "ai.onnx") and len(n.inputs) > 1
            and n.inputs[1] is not None and id(n.inputs[1]) in weights]


def _lifted(model: LabModel) -> LabModel:
    """``model`` with the float weights Constant nodes hold (PaddlePaddle exports, the
    bodies of silero-vad's If) turned into initializers of the same name in their graph:
    onnxruntime's quantizer only takes initializers ("Expected ... to be an initializer",
    or a body quantized to nothing). ``model`` itself when there are none."""
    def lift(graph: ir.Graph) -> list[ir.Node]:
        return [n for n in graph if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                and len(n.attributes) == 1 and "value" in n.attributes
                and n.attributes["value"].type == ir.AttributeType.TENSOR
                and n.attributes["value"].value.dtype in _FLOAT_TYPES
                and n.outputs and n.outputs[0].name and not n.outputs[0].is_graph_output()]

    if not any(lift(g) for g in model.ir.graphs()):
        return model
    copy = model.clone()
    for graph in list(copy.ir.graphs()):
        for node in lift(graph):
            v = node.outputs[0]
            name = v.name
            arr = np.array(node.attributes["value"].value.numpy())  # a copy: nothing shared
            tensor = ir.Tensor(arr, name=f"{name}__lifted")
            init = ir.Value(name=f"{name}__lifted", shape=tensor.shape,
                            type=ir.TensorType(tensor.dtype), const_value=tensor)
            graph.register_initializer(init)
            v.replace_all_uses_with(init)
            graph.remove(node, safe=True)
            v.name = None
            init.name = name  # onnx_ir renames the initializer entry too
            tensor.name = name
    copy.invalidate()
    return copy


_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16,
                ir.DataType.DOUBLE)


def _has_bodies(model: LabModel) -> bool:
    """Whether the model has If/Loop/Scan bodies (a graph besides the main one)."""
    return sum(1 for _ in model.ir.graphs()) > 1


def int8_static_model(source: Any, feeds: Any = None, n: int = 8,
                      nodes_to_exclude: Sequence[str] | None = None,
                      calibration: Calibration | None = None,
                      reduce_range: bool | None = None) -> LabModel:
    """Static int8 quantization in QDQ format, calibrated on ``feeds`` (or ``n`` seeded
    samples); ``onnx_lab.to_int8_static`` wraps it in a Lab.

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes (its dims and shapes
            shape the generated samples).
        feeds: calibration inputs (dict, list of dicts or ``.npz``); default ``n`` seeded
            samples from :func:`~onnx_lab.runtime.feeds.make_feeds`.
        n: number of generated calibration samples.
        nodes_to_exclude: node ids kept in float.
        calibration: ranges from :func:`calibrate_int8` (then ``feeds``/``n`` are not used and
            no calibration runs: one conversion, no inference).
        reduce_range: 7-bit weights; None (default) where this CPU's int8 kernels saturate
            (as :func:`int8_dynamic_model`).

    Example:
        >>> q = int8_static_model("sample:convnet", n=4)
        >>> cal = calibrate_int8("sample:convnet", n=4)           # once
        >>> q2 = int8_static_model("sample:convnet", nodes_to_exclude=["/head/fc/Gemm"],
        ...                        calibration=cal)               # no recalibration
    """
    model = resolve(source)[0]
    _refuse_without_onnx_ops(model)
    if calibration is None:
        calibration = calibrate_int8(source, feeds, n)
    model, exclude = _node_names(model, nodes_to_exclude)
    return _something_quantized(_quantize_with(_lifted(model), calibration, exclude,
                                               reduce_range=reduce_range), "static", model,
                                excluded=bool(exclude))


# ---------------------------------------------------------------------------- calibration
class Calibration:
    """Activation ranges of one static-int8 calibration, reusable for any exclusion set.

    onnxruntime >= 1.22's ``quantize_static(calibration_cache_path=...)`` skips calibration when
    the JSON cache file exists; we keep that JSON in memory (``payload``) and write it to a
    temporary file for each conversion, so retrying an exclusion set costs one conversion.

    Attributes:
        payload: the JSON dict ``onnxruntime.quantization.calibrate.save_tensors_data`` wrote.
        method: the calibration method name (``MinMax``).
        samples: number of calibration samples.
        seconds: time of the calibration run.
    """

    def __init__(self, payload: dict, method: str, samples: int, seconds: float,
                 model: LabModel | None = None) -> None:
        self.payload = payload
        self.method = method
        self.samples = samples
        self.seconds = seconds
        self._model = model

    def range_of(self, tensor: str) -> tuple[float, float] | None:
        """(lowest, highest) calibrated for ``tensor``, None when not calibrated."""
        d = self.payload.get("data", {}).get(tensor)
        if not d:
            return None
        lo, hi = d.get("lowest"), d.get("highest")
        if lo is None or hi is None:
            return None
        return float(np.asarray(_json_array(lo)).min()), float(np.asarray(_json_array(hi)).max())

    @property
    def ranges(self) -> pd.DataFrame:
        """One row per calibrated tensor.

        Columns: tensor, lowest, highest (float: calibrated range), abs_max (float),
        node_id (producer, None for graph inputs), op_type (producer's op type).
        """
        rows = []
        idx = self._model.index if self._model is not None else None
        for name in self.payload.get("data", {}):
            r = self.range_of(name)
            if r is None:
                continue
            nid = idx.producer.get(name) if idx is not None else None
            rows.append({"tensor": name, "lowest": r[0], "highest": r[1],
                         "abs_max": max(abs(r[0]), abs(r[1])), "node_id": nid,
                         "op_type": idx.node(nid).op_type if nid else None})
        return pd.DataFrame(rows, columns=RANGE_COLUMNS)

    def __repr__(self) -> str:
        return (f"Calibration({self.method}, {len(self.payload.get('data', {}))} tensors, "
                f"{self.samples} samples, {self.seconds:.2f} s)")


def _json_array(v: Any) -> Any:
    # CalibrationCacheEncoder writes numpy arrays as {"__ndarray__": ..., "dtype": ...} or lists.
    if isinstance(v, dict):
        for key in ("data", "__ndarray__", "values"):
            if key in v:
                return v[key]
    return v


#: The seed of generated calibration samples: other samples than the seeded ones a
#: comparison or a verification judges on (seed 0 and the seeds after it).
CALIBRATION_SEED = 104_729


def calibration_samples(source: Any, feeds: Any = None, n: int = 8, *,
                        dims: Mapping[str, int] | None = None,
                        shapes: Mapping[str, Sequence[int]] | None = None) -> list[dict]:
    """Calibration inputs: ``feeds`` (dict, list of dicts, an ``.npz`` file or a folder of
    ``.npz`` files) or ``n`` seeded random samples (seeded with :data:`CALIBRATION_SEED`, so
    no generated calibration sample is one a comparison judges on). ``dims``/``shapes`` are
    merged over the source's own (a Lab's)."""
    model, rdims, rshapes = resolve(source)
    dims = {**rdims, **(dims or {})}
    shapes = {**rshapes, **(shapes or {})}
    if feeds is None:
        # Not seed 0, which compare, verification and the precision search judge on: a
        # model judged on its own calibration sample passed at 31 dB and gave 17 dB on the
        # next input of the same distribution.
        samples = make_feeds(model, dims, shapes, n=n, seed=CALIBRATION_SEED)
        return samples if isinstance(samples, list) else [samples]
    if isinstance(feeds, (str, Path)) and user_path(feeds).is_dir():  # ('~/calib' too)
        files = sorted(user_path(feeds).glob("*.npz"))
        if not files:
            raise InputError(f"Calibration folder {str(feeds)!r} holds no .npz file.",
                             fix="Put one .npz per sample (arrays named like the inputs) there.")
        out: list[dict] = []
        for f in files:
            out.extend(as_feed_list(str(f), model, dims, shapes))
        return out
    return as_feed_list(feeds, model, dims, shapes)


def calibrate_int8(source: Any, feeds: Any = None, n: int = 8,
                   method: str = "MinMax", *, dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None) -> Calibration:
    """Run static-int8 calibration once; the ranges are cached on the model.

    ``dims``/``shapes`` size the seeded samples of a model with dynamic inputs (merged over
    a Lab's own).

    The same model and the same samples (by content) return the cached :class:`Calibration`
    (``LabModel.cached``), so every later conversion reuses it.

    Example:
        >>> cal = calibrate_int8("sample:convnet", n=4)
        >>> cal.ranges.sort_values("abs_max").tail()
    """
    import hashlib
    import json
    import time

    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        quantize_static,
    )

    model = resolve(source)[0]
    samples = calibration_samples(source, feeds, n, dims=dims, shapes=shapes)
    if not hasattr(CalibrationMethod, method):
        raise InputError(f"Unknown calibration method {method!r}.",
                         fix="Use one of " + ", ".join(m.name for m in CalibrationMethod) + ".")
    h = hashlib.sha1()
    for s in samples:
        for k in sorted(s):
            a = np.ascontiguousarray(s[k])
            h.update(k.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())

    def build() -> Calibration:
        class _Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self._it = iter(samples)

            def get_next(self):
                return next(self._it, None)

        t0 = time.perf_counter()
        with work_folder("calibration") as tmp:
            src, dst = tmp / "model.onnx", tmp / "model.int8.onnx"
            cache = tmp / "ranges.json"
            _save(model, src)
            logging.getLogger().addFilter(_ADVICE_FILTER)
            try:
                with np.errstate(divide="ignore", invalid="ignore"):  # zero ranges: see above
                    quantize_static(str(src), str(dst), calibration_data_reader=_Reader(),
                                    quant_format=QuantFormat.QDQ,
                                    calibrate_method=getattr(CalibrationMethod, method),
                                    calibration_cache_path=str(cache))
            except Exception as e:  # noqa: BLE001 - the quantizer raises assorted errors
                raise PassError(f"int8 calibration failed: {str(e).strip()[:400]}",
                                fix="Check the calibration feeds against lab.inputs.") from e
            finally:
                logging.getLogger().removeFilter(_ADVICE_FILTER)
            payload = json.loads(cache.read_text())
        return Calibration(payload, method, len(samples), time.perf_counter() - t0, model)

    return model.cached(("onnx_lab.int8_calibration", method, h.hexdigest()), build)


class SavedSource:
    """``model`` saved once to a temporary file, for a series of quantizations of it (a
    precision search's trials): each trial then costs the quantizer and its run, not
    serializing and writing the whole model again (ResNet-50: ~0.2 s a trial). The file is
    removed by :meth:`close` or when the object is garbage-collected."""

    def __init__(self, model: LabModel) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="onnx_lab_src_")
        self.path = Path(self._tmp.name) / "model.onnx"
        _save(model, self.path)

    def close(self) -> None:
        self._tmp.cleanup()


def _quantize_with(model: LabModel, calibration: Calibration, exclude: Sequence[str],
                   source: SavedSource | None = None,
                   reduce_range: bool | None = None) -> LabModel:
    """A QDQ model of ``model`` with cached ranges: the quantizer runs, calibration does not.
    ``source``: ``model`` already saved (:class:`SavedSource`); ``reduce_range``: see
    :func:`reduce_range_for`."""
    import json

    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

    with tempfile.TemporaryDirectory(prefix="onnx_lab_q_") as tmp:
        cache = Path(tmp) / "ranges.json"
        write_atomic(cache, json.dumps(calibration.payload))
        return _quantize(model, quantize_static, calibration_data_reader=None,
                         source=None if source is None else source.path,
                         quant_format=QuantFormat.QDQ,
                         calibrate_method=getattr(CalibrationMethod, calibration.method),
                         calibration_cache_path=str(cache), nodes_to_exclude=list(exclude),
                         reduce_range=reduce_range_for(reduce_range))
