"""Run model versions for verification with their weights fed as graph inputs.

``numerics.session.make_session`` hands the large weights to onnxruntime as initializers
(``add_external_initializers``): onnxruntime then pre-packs or copies them at session creation
(~0.1 s per BERT-base session even with pre-packing off). Verification builds one session per
model version and runs it once, and the versions of one Lab share almost all their weight
tensors, so here the same weight-less graph (``numerics.session.weightless_proto``) turns its
large initializers into graph inputs fed with numpy arrays at run time (made once per tensor
object and shared by every version that holds it): onnxruntime reads input arrays where they
are (session creation ~0.02 s). Graph optimizations are off, so an input and an initializer
run the same kernels. Anything this path cannot express falls back to
``numerics.capture.run``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._files import verify_files
from onnx_lab.core.limits import check_run_memory, memory_limit
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import guard_label_encoders
from onnx_lab.errors import RunLimitError
from onnx_lab.runtime._paths import ort_path
from onnx_lab.runtime.capture import run as capture_run
from onnx_lab.runtime.session import (
    bounded_run,
    resolve_providers,
    seed_random_ops,
    weight_array,
    weightless_proto,
)

logger = logging.getLogger(__name__)

__all__ = ["run", "quick_sizes"]

_INLINE_BYTES = 1024  # small tensors (shape vectors, axes) stay in the graph
_ARRAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tensor -> array


def _array(tensor: Any) -> np.ndarray | None:
    """:func:`weight_array`, cached per tensor (protobuf tensors copy on ``.numpy()``, and the
    versions of a Lab share most of their tensors)."""
    arr = _ARRAYS.get(tensor)
    if arr is None:
        arr = weight_array(tensor)
        if arr is None:
            return None
        _ARRAYS[tensor] = arr
    return arr


def _prepare(model: LabModel) -> tuple[onnx.ModelProto, list[str], list[Any], str | None]:
    return model.cached(("runtime", "runner_graph"), lambda: _build(model))


def _build(model: LabModel) -> tuple[onnx.ModelProto, list[str], list[Any], str | None]:
    # onnxruntime's shape inference reads small constants (Reshape targets) from the graph
    # itself, before inputs have values: they stay inline.
    proto, names, values, folder = weightless_proto(model, _INLINE_BYTES, array=_array)
    seed_random_ops(proto)
    # The placeholders become graph inputs of their dtype and shape (an initializer that is
    # already an input, as IR < 4 allows, keeps its entry).
    fed = set(names)
    inputs = {i.name for i in proto.graph.input}
    kept = [t for t in proto.graph.initializer if t.name not in fed]
    for t in proto.graph.initializer:
        if t.name in fed and t.name not in inputs:
            proto.graph.input.append(onnx.helper.make_tensor_value_info(
                t.name, t.data_type, list(t.dims)))
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    return proto, names, values, folder


def quick_sizes(model: LabModel, names: Sequence[str],
                input_shapes: Mapping[str, Sequence[int]]) -> dict[str, int | None] | None:
    """Bytes of ``names`` from ONNX shape inference (with data propagation) on the graph
    prepared for running (weights stripped, so it is small); None when inference fails.

    The full estimate (``LabModel.types``: a skeleton graph, inference, then folding shape
    computations) costs ~0.2 s on BERT-base; this ~0.04 s and knows all but its Range
    outputs. Unknown sizes are None. Cached on the model per input shapes.
    """
    key = ("runtime", "quick_sizes",
           tuple(sorted((k, tuple(int(d) for d in v)) for k, v in input_shapes.items())))
    known = model.cached(key, lambda: _infer_sizes(model, input_shapes))
    if known is None:
        return None
    return {n: known.get(n) for n in names}


def _infer_sizes(model: LabModel, input_shapes: Mapping[str, Sequence[int]]
                 ) -> dict[str, int] | None:
    try:
        proto = _prepare(model)[0]
        p = onnx.ModelProto()
        p.CopyFrom(proto)
        for i in p.graph.input:
            shape = input_shapes.get(i.name)
            if shape is None:
                continue
            dims = i.type.tensor_type.shape.dim
            if len(dims) != len(shape):
                return None
            for d, n in zip(dims, shape):
                d.Clear()
                d.dim_value = int(n)
        del p.graph.value_info[:]  # declared symbolic shapes would stay symbolic
        guard_label_encoders(p)  # onnx's inference would end the process on some
        inferred = onnx.shape_inference.infer_shapes(p, data_prop=True)
    except Exception as e:  # noqa: BLE001 - any failure: the caller's full estimate
        logger.debug("quick shape inference failed (%s)", e)
        return None
    known: dict[str, int] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
        except (KeyError, TypeError, ValueError):
            continue
        known[vi.name] = int(np.prod([d.dim_value for d in tt.shape.dim], dtype=np.int64)
                             ) * itemsize
    return known


def _check_memory(model: LabModel, shapes: Mapping[str, Sequence[int]]) -> None:
    """:func:`check_run_memory`, skipped when even every activation alive at once fits the
    limit by the quick sizes (an upper bound of the liveness estimate's peak, which needs
    the model's full types: ~0.05-0.2 s per model version on a CNN, seconds on a detector's
    post-processing). Sizes that depend on the values (NonZero, NMS) are unknown to both
    estimates and count as nothing in the liveness one; here the known ones must then fit
    in half the limit."""
    limit, _how = memory_limit()
    if limit is None:
        return
    idx = model.index
    graph = model.graph
    names = [v.name for v in graph.inputs if v.name and v.name not in graph.initializers]
    names += [v.name for nid in idx.topo_order("") for v in idx.entries[nid].node.outputs
              if v.name]
    sizes = quick_sizes(model, names, shapes)
    if sizes is not None:
        known = [v for v in sizes.values() if v is not None]
        if sum(known) <= (limit if len(known) == len(sizes) else limit // 2):
            return
    check_run_memory(model, shapes)


def _fast(model: LabModel, feeds: Mapping[str, np.ndarray], outputs: Sequence[str],
          providers: Any) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    for g in model.ir.graphs():
        if g is not model.graph and any(isinstance(v.const_value, ir.ExternalTensor)
                                        for v in g.initializers.values()):
            raise ValueError("external tensors inside subgraphs")  # make_session reads them
    proto, names, values, folder = _prepare(model)
    kept = list(proto.graph.output)
    try:
        del proto.graph.output[:]
        for n in outputs:
            proto.graph.output.add().name = n
        data = proto.SerializeToString()
    finally:
        del proto.graph.output[:]
        proto.graph.output.extend(kept)
    so = ort.SessionOptions()
    so.log_severity_level = 4  # failures are raised with their message
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # Each session runs once: pre-packing every MatMul weight (MLAS) would cost more than the
    # run itself (BERT-base: ~1 s of a 1.3 s session start).
    so.add_session_config_entry("session.disable_prepacking", "1")
    # No arena: it grows in large fresh (kernel-zeroed) chunks per session, while plain
    # allocations reuse the memory the previous version's captures freed (BERT-base, 3 runs:
    # -0.05 s and -33 MB peak).
    so.enable_cpu_mem_arena = False
    # Short one-shot runs: spinning worker threads only steal cores from the caller.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if folder:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    ort_path(folder))
    sess = ort.InferenceSession(data, so, providers=resolve_providers(providers))
    got = bounded_run(sess, list(outputs), {**dict(zip(names, values)), **feeds},
                      what="the model")
    return dict(zip(outputs, got))


def run(model: LabModel, feeds: Mapping[str, np.ndarray], outputs: Sequence[str],
        providers: Any = None) -> dict[str, np.ndarray]:
    """Values of ``outputs`` for one sample (graph optimizations disabled), within the run
    limits (:mod:`onnx_lab.core.limits`: the memory estimate first, then the time limit)."""
    verify_files(model.ir)
    # tensors only: a sequence (list, its elements of any shapes), map or optional feed has
    # no shape of its own
    _check_memory(model, {k: list(v.shape) for k, v in feeds.items()
                          if isinstance(v, np.ndarray)})
    try:
        return _fast(model, feeds, outputs, providers)
    except RunLimitError:
        raise  # a stopped run is not retried the slow way
    except Exception as e:  # noqa: BLE001 - any failure: the reference path decides and explains
        logger.debug("in-memory weights path failed (%s); using make_session", e)

    return capture_run(model, feeds, outputs=list(outputs), providers=providers)
