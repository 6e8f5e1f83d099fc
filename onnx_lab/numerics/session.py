"""onnxruntime sessions for a LabModel: providers, optimization levels, extra outputs.

The one place that turns a LabModel into an ``ort.InferenceSession``. Models with external data
are passed as bytes with ORT's external-initializers folder set to the model's folder, so the
weights are read where they lie (never copied); models whose serialized graph would pass the
2 GB protobuf limit are written once to a temporary folder with external data.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import onnx
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.errors import InputError, ProviderError, RuntimeLoadError

logger = logging.getLogger(__name__)

__all__ = ["available_providers", "resolve_providers", "make_session", "OPT_LEVELS",
           "runtime_proto"]

OPT_LEVELS = ("disable", "basic", "extended", "all")
_PROTO_LIMIT = 2_000_000_000

KNOWN_PROVIDERS = (
    "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider",
    "ROCMExecutionProvider", "MIGraphXExecutionProvider", "DmlExecutionProvider",
    "CoreMLExecutionProvider", "OpenVINOExecutionProvider", "DnnlExecutionProvider",
    "QNNExecutionProvider", "XnnpackExecutionProvider", "AzureExecutionProvider",
    "WebGpuExecutionProvider", "NvTensorRTRTXExecutionProvider", "VitisAIExecutionProvider",
)


def available_providers() -> list[str]:
    """Execution providers of the installed onnxruntime (CPU always among them)."""
    import onnxruntime as ort

    return list(ort.get_available_providers())


def resolve_providers(providers: str | Sequence[str] | None) -> list[str]:
    """Validate provider names (``"cuda"`` and ``"CUDA"`` mean ``CUDAExecutionProvider``).

    Raises:
        ProviderError: an unknown name, or one this onnxruntime build does not have.
    """
    avail = available_providers()
    if providers is None:
        return ["CPUExecutionProvider"]
    if isinstance(providers, str):
        providers = [p for p in providers.split(",") if p.strip()]
    out = []
    for p in providers:
        p = p.strip()
        full = p if p.endswith("ExecutionProvider") else None
        if full is None:
            for k in KNOWN_PROVIDERS:
                if k.lower().startswith(p.lower()) and len(p) >= 3:
                    full = k
                    break
        if full is None or full not in KNOWN_PROVIDERS:
            raise ProviderError(f"Unknown execution provider {p!r}.",
                                fix=f"Use one of the installed ones: {', '.join(avail)}.")
        if full not in avail:
            raise ProviderError(
                f"Execution provider {full} is not available in this onnxruntime build "
                f"(installed: {', '.join(avail)}).",
                fix="Install the matching onnxruntime package (onnxruntime-gpu for CUDA) or "
                "leave that provider out.")
        if full not in out:
            out.append(full)
    if not out:
        raise ProviderError("No execution provider given.", fix="Pass e.g. ['CPUExecutionProvider'].")
    return out


def runtime_proto(model: LabModel) -> onnx.ModelProto:
    """The model as a ModelProto for onnxruntime, cached on the (immutable) LabModel."""
    cached = getattr(model, "_runtime_proto", None)
    if cached is None:
        cached = model.to_proto()
        if model.base_dir is not None:
            _inline_small_external(cached, str(model.base_dir))
        model._runtime_proto = cached  # type: ignore[attr-defined]
    return cached


_INLINE_BYTES = 4096


def _inline_small_external(proto: onnx.ModelProto, base_dir: str) -> None:
    """Embed tiny external tensors (shape vectors, axes): ORT's shape inference cannot read
    external data of a model given as bytes ("Cannot parse data from external tensors")."""
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for t in proto.graph.initializer:
        if uses_external_data(t):
            info = {e.key: e.value for e in t.external_data}
            if int(info.get("length", _INLINE_BYTES)) < _INLINE_BYTES:
                load_external_data_for_tensor(t, base_dir)
                t.data_location = onnx.TensorProto.DEFAULT
                del t.external_data[:]


def _value_info(name: str) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name
    return vi


def make_session(model: LabModel, *, providers: str | Sequence[str] | None = None,
                 opt_level: str = "disable", extra_outputs: Sequence[str] = (),
                 outputs: Sequence[str] | None = None, threads: int | None = None,
                 profile: bool = False, profile_prefix: str | None = None,
                 optimized_model_path: str | None = None,
                 provider_options: Sequence[dict[str, Any]] | None = None,
                 arena: bool = True):
    """Create an ``onnxruntime.InferenceSession`` for ``model``.

    Args:
        providers: provider names (default CPU); see :func:`resolve_providers`.
        opt_level: 'disable' (default: nothing fused away, for numerics), 'basic',
            'extended' or 'all'.
        extra_outputs: intermediate tensor names to expose as additional outputs.
        outputs: if given, replace the graph outputs with exactly these tensor names.
        threads: intra-op threads (None: onnxruntime's default).
        profile, profile_prefix: enable ORT's profiler.
        optimized_model_path: write ORT's optimized graph there.
        arena: use ORT's CPU memory arena (False for one-off runs exposing many outputs: the
            arena grows in large steps and keeps its memory until the session is released).

    Raises:
        RuntimeLoadError: onnxruntime cannot load the model (names the op and domain).
    """
    import onnxruntime as ort

    provs = resolve_providers(providers)
    if opt_level not in OPT_LEVELS:
        raise InputError(f"Unknown optimization level {opt_level!r}.",
                         fix=f"Use one of {', '.join(OPT_LEVELS)}.")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[opt_level]
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    if not arena:
        so.enable_cpu_mem_arena = False
    if profile:
        so.enable_profiling = True
        # ORT writes its trace next to the current folder by default: never litter the
        # user's working directory.
        so.profile_file_prefix = profile_prefix or os.path.join(
            tempfile.gettempdir(), "onnx_lab_ort_profile")
    if optimized_model_path:
        so.optimized_model_filepath = str(optimized_model_path)

    proto = runtime_proto(model)
    graph_outputs = list(proto.graph.output)
    try:
        if outputs is not None or extra_outputs:
            keep = {o.name: o for o in graph_outputs}
            names = list(outputs) if outputs is not None else [o.name for o in graph_outputs]
            names += [n for n in extra_outputs if n not in names]
            del proto.graph.output[:]
            proto.graph.output.extend(keep.get(n) or _value_info(n) for n in names)
        data, tmpdir = _serialize(model, proto)
    finally:
        del proto.graph.output[:]
        proto.graph.output.extend(graph_outputs)
    if model.base_dir is not None and tmpdir is None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    str(model.base_dir))
    try:
        return ort.InferenceSession(data, so, providers=provs,
                                    provider_options=list(provider_options)
                                    if provider_options else None)
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        raise RuntimeLoadError(_explain_ort_error(e),
                               fix="Check lab.check() for unsupported ops and domains; "
                               "ops of custom domains need their provider or a custom op "
                               "library.") from e
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()


def _serialize(model: LabModel, proto: onnx.ModelProto):
    """Bytes (or a temp file path) onnxruntime can load; temp folder to clean up or None."""
    # upb's ByteSize() encodes the whole message, doubling the cost of serializing: skip it
    # when the embedded weights are far below the limit (protobuf refuses > 2 GB itself).
    embedded = sum(v.const_value.nbytes for g in model.ir.graphs()
                   for v in g.initializers.values()
                   if v.const_value is not None and not isinstance(v.const_value,
                                                                   ir.ExternalTensor))
    if embedded < _PROTO_LIMIT // 2:
        try:
            return proto.SerializeToString(), None
        except ValueError:
            pass
    if proto.ByteSize() < _PROTO_LIMIT:
        return proto.SerializeToString(), None
    tmp = tempfile.TemporaryDirectory(prefix="onnx_lab_rt_")
    path = os.path.join(tmp.name, "model.onnx")
    m = ir.serde.deserialize_model(proto)
    if model.base_dir is not None:
        ir.external_data.set_base_dir(m.graph, str(model.base_dir))
    ir.save(m, path, external_data="model.onnx.data")
    return path, tmp


def _explain_ort_error(e: Exception) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    if len(first) > 400:
        first = first[:400] + "…"
    return f"onnxruntime cannot load or run the model: {first}"
