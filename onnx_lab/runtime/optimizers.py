"""onnxruntime's offline graph optimization, and which of its optimizers changed a model.

``optimize(model, level, path)`` writes the graph onnxruntime would run (optionally with some
optimizers turned off through ``disabled_optimizers``). ``optimize(..., trace=True)`` also
returns the names of the graph transformers that modified the model, read from onnxruntime's
own log ("GraphTransformer ConvActivationFusion modified: 1" at severity INFO): onnxruntime
has no API that lists its optimizers, and its log names exactly the ones that acted on this
model, under the names ``disabled_optimizers`` accepts.

The rewrite rules inside the rule-based transformers (``Level1_RuleBasedTransformer``:
``ConvBNFusion``, ``EliminateIdentity``...) are not logged one by one.
:func:`effective_rules` finds the ones that act on a model: a rule counts when turning it off
alone changes the optimized graph. The candidates are the rule names of onnxruntime's
``GenerateRewriteRules`` (onnxruntime/core/optimizer/graph_transformer_utils.cc), listed in
:data:`RULE_CANDIDATES`; onnxruntime silently ignores a name it does not know, so a name this
list gets wrong (or that a later onnxruntime renames) is never reported, never invented.

Example:
    >>> from onnx_lab.runtime.optimizers import optimize
    >>> names = optimize(lab.model, "extended", "/tmp/opt.onnx", trace=True)
    >>> names   # ['Level1_RuleBasedTransformer', 'ConstantFolding', 'ConvActivationFusion']
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from onnx_lab.core._proto import graph_protos
from onnx_lab.core.model import LabModel
from onnx_lab.core.save import INLINE_MAX_BYTES
from onnx_lab.runtime._paths import ort_path
from onnx_lab.runtime.session import _ort_text, make_session

__all__ = ["optimize", "effective_rules", "RULE_CANDIDATES"]

#: Rewrite rules of onnxruntime's rule-based transformers (graph_transformer_utils.cc,
#: GenerateRewriteRules, levels 1 and 2), by the name ``disabled_optimizers`` takes.
RULE_CANDIDATES = (
    "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout",
    "ExpandElimination", "CastElimination", "CastChainElimination", "PreShapeNodeElimination",
    "NoopElimination", "DivMulFusion", "FuseReluClip", "GemmSumFusion", "GemmTransposeFusion",
    "NotWhereFusion", "ConvAddFusion", "ConvMulFusion", "ConvBNFusion", "ClipQuantRewrite",
    "ReluQuantRewrite", "LabelEncoderFusion", "ConvAddActivationFusion",
)

logger = logging.getLogger(__name__)
_MODIFIED = re.compile(r"GraphTransformer (\S+) modified: 1")
_ORT_LINE = re.compile(r"^\S+ \S+ \[[VIWEF]:onnxruntime:")
_FD_LOCK = threading.Lock()


def _stderr_captured(fn: Callable[[], object]) -> tuple[object, str]:
    """Run ``fn`` with file descriptor 2 redirected; returns (its result, what was written).

    onnxruntime logs through its C++ default sink (stderr) and offers Python no log callback.
    Lines that are not onnxruntime's (another thread's output) are written back to stderr.
    """
    with _FD_LOCK, tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            out = fn()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode("utf-8", errors="replace")
    other = "".join(line for line in text.splitlines(keepends=True) if not _ORT_LINE.match(line)
                    and "onnxruntime" not in line)
    if other.strip():
        sys.stderr.write(other)
    return out, text


def reload_problem(path: str) -> str | None:
    """Why onnxruntime at its default options (every optimization on, CPU) cannot load the
    optimized model file at ``path``, or None. onnxruntime re-optimizes a model it wrote
    offline, and some of its own outputs fail there (1.2x: a BERT optimized at 'basic' stops
    with "Attempt to replace the existing tensor"); its documentation advises loading an
    offline-optimized model with optimizations at its level or off."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # the failure is returned, not logged
    so.enable_cpu_mem_arena = False
    so.add_session_config_entry("session.disable_prepacking", "1")
    try:
        ort.InferenceSession(ort_path(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        text = _ort_text(str(e).strip())
        return text.splitlines()[0][:300] if text else type(e).__name__
    return None


def optimize(model: LabModel, level: str, path: str, *, disabled: Sequence[str] = (),
             trace: bool = False) -> list[str]:
    """Write onnxruntime's optimized graph of ``model`` at ``level`` to ``path``, its
    weights above 4 KiB in ``<path>.data`` beside it.

    Args:
        level: 'basic', 'extended' or 'all'.
        disabled: optimizer or rule names to turn off (``disabled_optimizers``).
        trace: read onnxruntime's log for the transformers that modified the graph.

    Returns:
        The names of the transformers that modified the graph, in the order they first did
        (empty unless ``trace``).

    Raises:
        RuntimeLoadError: onnxruntime cannot load the model.
    """
    # The optimized model's weights go to its own data file beside it (regular files, small
    # tensors inline: core/save.py's rule). Without it onnxruntime writes the weights it read
    # from the model's data file as references to that file's name, which the folder of
    # ``path`` does not hold.
    entries = {"session.optimized_model_external_initializers_file_name":
               f"{os.path.basename(path)}.data",
               "session.optimized_model_external_initializers_min_size_in_bytes":
               str(INLINE_MAX_BYTES + 1)}

    def _make() -> object:
        return make_session(model, opt_level=level, optimized_model_path=path,
                            disabled_optimizers=tuple(disabled), log_severity=1 if trace else 4,
                            config_entries=entries)

    if not trace:
        _make()
        names: list[str] = []
    else:
        _, text = _stderr_captured(_make)
        names = list(dict.fromkeys(_MODIFIED.findall(text)))
    if _nested_constant(model):
        _drop_doubled_constants(path)
    return names


def _nested_constant(model: LabModel) -> bool:
    """Whether a body inside a body (an If in a Loop's body...) holds a Constant node: a
    body whose parent graph is itself a body (``ModelIndex.parent``)."""
    idx = model.index
    return any(e.graph and idx.parent.get(e.graph) and e.node.op_type == "Constant"
               and e.node.domain in ("", "ai.onnx") for e in idx.entries.values())


def _constant_array(node: onnx.NodeProto, folder: str) -> np.ndarray | None:
    """The value of a Constant node of a protobuf graph, or None (a sparse value)."""
    for attr in node.attribute:
        if attr.name == "value":
            return onnx.numpy_helper.to_array(attr.t, base_dir=folder)
        if attr.name in ("value_float", "value_floats"):
            return np.asarray(onnx.helper.get_attribute_value(attr), dtype=np.float32)
        if attr.name in ("value_int", "value_ints"):
            return np.asarray(onnx.helper.get_attribute_value(attr), dtype=np.int64)
        if attr.name in ("value_string", "value_strings"):
            return np.asarray(onnx.helper.get_attribute_value(attr), dtype=object)
    return None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same dtype, shape and bits (NaNs included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()


def _drop_doubled_constants(path: str) -> None:
    """Repair onnxruntime's optimized model at ``path`` where it wrote a Constant node of a
    body nested two levels deep (an If inside a Loop's body) also as an initializer of the same
    name and value, keeping the node: with the external-initializer entries :func:`optimize`
    sets, onnxruntime (1.32) converts those Constants to initializers without removing the
    nodes (one level deep it does both), which declares the name twice, and no ONNX reader
    loads the file. The initializer is dropped where its value equals the node's; any other
    clash is left for the reader to report."""
    folder = os.path.dirname(path)
    proto = onnx.load(path, load_external_data=False)
    dropped = 0
    for g in graph_protos(proto.graph):
        consts = {n.output[0]: n for n in g.node
                  if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output}
        if not consts:
            continue
        keep = []
        for t in g.initializer:
            node = consts.get(t.name)
            value = _constant_array(node, folder) if node is not None else None
            if value is not None and _same(onnx.numpy_helper.to_array(t, base_dir=folder),
                                           value):
                dropped += 1
            else:
                keep.append(t)
        if len(keep) != len(g.initializer):
            del g.initializer[:]
            g.initializer.extend(keep)
    if dropped:
        logger.debug("onnxruntime wrote %d nested Constant(s) also as initializers; dropped",
                     dropped)
        onnx.save(proto, path)


def _structure(proto: onnx.ModelProto) -> tuple:
    g = proto.graph
    return (tuple((n.op_type, n.domain, tuple(n.input), tuple(n.output)) for n in g.node),
            tuple(sorted(t.name for t in g.initializer)))


def effective_rules(model: LabModel, level: str, disabled: Sequence[str] = (),
                    candidates: Sequence[str] = RULE_CANDIDATES) -> list[str]:
    """The rewrite rules whose removal alone changes onnxruntime's optimized graph.

    One optimization per candidate (no model run); ``disabled`` stays off throughout.
    """
    with tempfile.TemporaryDirectory(prefix="onnx_lab_ort_rules_") as tmp:
        def _graph(extra: Sequence[str]) -> tuple:
            target = os.path.join(tmp, "optimized.onnx")
            optimize(model, level, target, disabled=[*disabled, *extra])
            return _structure(onnx.load_model(target, load_external_data=False))

        base = _graph(())
        return [r for r in candidates if r not in disabled and _graph([r]) != base]
