"""onnxruntime sessions for a LabModel: providers, optimization levels, extra outputs.

The one place that turns a LabModel into an ``ort.InferenceSession``. The graph goes to
onnxruntime as bytes without its large weights: main-graph initializers held in memory are
handed over as ``OrtValue`` views of their numpy arrays (``add_external_initializers``), and
initializers in external data files are read by onnxruntime where they lie (its
external-initializers folder set to the model's folder). Serializing BERT-base's 435 MB of
weights into the protobuf for every session cost ~1.1 s of the ~1.9 s session start; now
~0.5 s, the rest being onnxruntime's own setup (MatMul pre-packing). Sessions for providers
that compile the graph themselves (TensorRT, OpenVINO...) and models the light path cannot
express get the whole model as before: bytes, or, past the 2 GB protobuf limit, a temporary
folder with external data.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import tempfile
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._files import hard_link_error, verify_files
from onnx_lab.core.limits import (
    check_run_memory,
    estimate_run_memory,
    memory_limit,
    run_timeout,
)
from onnx_lab.core.model import LabModel, mapped_briefly
from onnx_lab.core.save import INLINE_MAX_BYTES, write_model
from onnx_lab.errors import (
    InputError,
    LabError,
    ProviderError,
    RunLimitError,
    RuntimeLoadError,
    SaveError,
    WriteError,
    clip_text,
)
from onnx_lab.runtime import _default_load
from onnx_lab.runtime._paths import ort_path
from onnx_lab.runtime.typed import SPECIAL_OUTPUT_TYPES, from_ortvalue, needs_ortvalue, to_ortvalue

logger = logging.getLogger(__name__)

__all__ = ["available_providers", "default_providers", "fallback_chain", "PROFILED_PROVIDERS",
           "resolve_providers", "make_session", "OPT_LEVELS", "ort_max_opsets", "ort_version",
           "ort_registered_ops", "runtime_proto", "weightless_proto", "weight_array",
           "PLACEHOLDER", "is_placeholder", "run_session", "run_failure", "implemented_ops",
           "load_problem", "saved_form_problem", "out_of_memory"]

OPT_LEVELS = ("disable", "basic", "extended", "all")
_PROTO_LIMIT = 2_000_000_000

KNOWN_PROVIDERS = (
    "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider",
    "ROCMExecutionProvider", "MIGraphXExecutionProvider", "DmlExecutionProvider",
    "CoreMLExecutionProvider", "OpenVINOExecutionProvider", "DnnlExecutionProvider",
    "QNNExecutionProvider", "XnnpackExecutionProvider", "AzureExecutionProvider",
    "WebGpuExecutionProvider", "NvTensorRTRTXExecutionProvider", "VitisAIExecutionProvider",
)


PROFILED_PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider")


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
    given = providers  # 5, [5], a dict: a TypeError or AttributeError below
    providers = list(given) if isinstance(given, Iterable) and not isinstance(given, Mapping) \
        else None
    if providers is None or not all(isinstance(p, str) for p in providers):
        raise ProviderError(f"providers must be a provider name or a list of them, got "
                            f"{clip_text(repr(given), 200)}.",
                            fix="Pass e.g. providers=['CPUExecutionProvider'] or 'cpu'.")
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


# ---------------------------------------------------------------------------- light graphs
#: The external-data location of weights handed to onnxruntime in memory.
PLACEHOLDER = "__onnx_lab_in_memory__"


def is_placeholder(t: onnx.TensorProto) -> bool:
    """Whether an initializer proto stands for an array handed over in memory
    (:data:`PLACEHOLDER`), not data in a file."""
    return t.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == PLACEHOLDER for e in t.external_data)

_NUMPY_OK = {np.dtype(t) for t in ("float32", "float64", "float16", "int8", "uint8", "int16",
                                   "uint16", "int32", "uint32", "int64", "uint64", "bool")}
# Guards the temporary changes to a model (placeholders) and to cached protos (outputs).
_SWAP_LOCK = threading.RLock()
# Providers that take initializers from the session like the CPU provider does; the others
# (TensorRT, OpenVINO, ...) compile the graph themselves and get the whole model.
_LIGHT_PROVIDERS = {"CPUExecutionProvider", "CUDAExecutionProvider", "ROCMExecutionProvider"}


def weight_array(tensor: Any) -> np.ndarray | None:
    """``tensor`` as a contiguous numpy array onnxruntime can take as is, else None.

    Free for weights opened from a file (read-only views of its bytes); a copy for tensors
    parsed from a protobuf message.
    """
    arr = np.ascontiguousarray(tensor.numpy())
    return arr if arr.dtype in _NUMPY_OK else None


def weightless_proto(model: LabModel, inline_bytes: int,
                     array: Callable[[Any], np.ndarray | None] | None = weight_array
                     ) -> tuple[onnx.ModelProto, list[str], list[np.ndarray], str | None]:
    """The model as a ModelProto without its large in-memory main-graph weights.

    Used initializers of more than ``inline_bytes`` that ``array`` can express (it returns
    None for the others) become external tensors at the location :data:`PLACEHOLDER`
    (their names and arrays are returned, in the same order; with ``array=None`` the dtype
    alone decides and no arrays are made); unused ones stay in the graph; smaller external-data
    tensors are embedded (onnxruntime's shape inference reads shape vectors and axes from
    the graph itself); larger ones keep their files, whose folder is returned. The model's
    tensors are swapped for placeholders while it is serialized (under a lock, restored
    after).

    Raises:
        ValueError: external data in several folders.
    """
    names: list[str] = []
    values: list[np.ndarray] = []
    folders: set[str] = set()
    swapped: list[tuple[ir.Value, Any]] = []
    # Serialize the model itself with placeholders swapped in (restored below) rather than a
    # clone: cloning a 1,400-node graph costs more than the swap.
    with _SWAP_LOCK:
        try:
            for name, v in model.graph.initializers.items():
                t = v.const_value
                if t is None:
                    continue
                if t.nbytes <= inline_bytes:
                    if isinstance(t, ir.ExternalTensor):
                        swapped.append((v, t))
                        # not one whole-file map kept per shape vector (ResNet-50 compared:
                        # +40 MB resident)
                        with mapped_briefly(t):
                            v.const_value = ir.Tensor(np.array(t.numpy()), name=name)
                    continue
                if isinstance(t, ir.ExternalTensor):
                    folders.add(str(t.base_dir))
                    continue
                if not v.uses() and not v.is_graph_output() and not v.is_graph_input():
                    # onnxruntime drops unused initializers before it looks for handed ones
                    continue
                if array is None:
                    if not _numpy_dtype(t):
                        continue
                else:
                    arr = array(t)
                    if arr is None:
                        continue
                    values.append(arr)
                swapped.append((v, t))
                v.const_value = ir.ExternalTensor(PLACEHOLDER, 0, t.nbytes, t.dtype,
                                                  shape=t.shape, name=name)
                names.append(name)
            if len(folders) > 1:
                raise ValueError(f"external data in several folders {sorted(folders)}")
            proto = ir.to_proto(model.ir)
        finally:
            for v, t in swapped:
                v.const_value = t
    return proto, names, values, next(iter(folders), None)


#: Ops that draw random numbers when they run (standard domain) and take a ``seed``
#: attribute; Dropout only from opset 12 (before, it has neither training mode nor seed).
RANDOM_OPS = frozenset({"Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike",
                        "RandomUniformLike", "Bernoulli", "Multinomial"})


def seed_random_ops(proto: onnx.ModelProto) -> int:
    """Give every random op of ``proto`` without a ``seed`` a seed of its own (in place), from
    the name of its first output: each run of a session onnx_lab builds then draws the same
    numbers, and two versions holding the same random op (the same output name) draw the
    same ones, while two random ops draw different ones (one seed for all let a tool that
    merged two noises into one pass). A train-mode Dropout drew a new mask per run: a model
    compared with a byte-identical copy failed ("computes differently"), and so did the
    verification of any correct step on it. Returns the number of ops seeded."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    graphs = [proto.graph]
    count = 0
    while graphs:
        g = graphs.pop()
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    graphs.extend(a.graphs)
            if node.op_type not in RANDOM_OPS or node.domain not in ("", "ai.onnx") or \
                    (node.op_type == "Dropout" and opset < 12) or \
                    any(a.name == "seed" for a in node.attribute):
                continue
            # (Dropout's seed is an int, the others' a float: both exact below 2**24)
            seed = zlib.crc32((node.output[0] if node.output else node.name).encode()) % (1 << 24)
            node.attribute.append(onnx.helper.make_attribute(
                "seed", seed if node.op_type == "Dropout" else float(seed)))
            count += 1
    return count


def _light_graph(model: LabModel) -> tuple[onnx.ModelProto, list[str], str | None]:
    """:func:`weightless_proto` for sessions, cached on the (immutable) LabModel without the
    arrays (a few MB for BERT-base)."""
    def build() -> tuple[onnx.ModelProto, list[str], str | None]:
        proto, names, _none, folder = weightless_proto(model, _INLINE_BYTES, array=None)
        seed_random_ops(proto)  # (for sessions only: the precision plan's base is the model's)
        return proto, names, folder

    return model.cached(("runtime", "light_graph"), build)


def _numpy_dtype(tensor: Any) -> bool:
    """Whether :func:`weight_array` will express ``tensor`` (without reading it)."""
    try:
        return tensor.dtype.numpy() in _NUMPY_OK
    except (AttributeError, TypeError, ValueError):
        return False


def runtime_proto(model: LabModel) -> onnx.ModelProto:
    """The model as a ModelProto for onnxruntime, cached on the (immutable) LabModel under
    :data:`RUNTIME_PROTO_KEY` (a copy of the weights: callers that run once forget it)."""
    def build() -> onnx.ModelProto:
        proto = model.to_proto()
        if model.base_dir is not None:
            _inline_small_external(proto, str(model.base_dir))
        seed_random_ops(proto)
        return proto

    return model.cached(RUNTIME_PROTO_KEY, build)


# The tensors a saved file keeps inline are the ones sessions get inline (core/save.py's
# rule): onnxruntime's shape inference reads shape vectors and axes only from the graph, so
# a session built here fails exactly when the saved file would.
_INLINE_BYTES = INLINE_MAX_BYTES
RUNTIME_PROTO_KEY = ("runtime", "runtime_proto")


def _inline_small_external(proto: onnx.ModelProto, base_dir: str) -> None:
    """Embed tiny external tensors (shape vectors, axes): ORT's shape inference cannot read
    external data of a model given as bytes ("Cannot parse data from external tensors")."""
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for t in proto.graph.initializer:
        if uses_external_data(t):
            info = {e.key: e.value for e in t.external_data}
            if int(info.get("length", _INLINE_BYTES + 1)) <= _INLINE_BYTES:
                try:
                    load_external_data_for_tensor(t, base_dir)
                except onnx.checker.ValidationError as e:
                    if "hard link" not in str(e):
                        raise
                    raise hard_link_error(t.name, info.get("location", "")) from e
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
                 arena: bool = True, disabled_optimizers: Sequence[str] = (),
                 log_severity: int = 4, config_entries: Mapping[str, str] | None = None):
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
        disabled_optimizers: names of onnxruntime graph transformers or rewrite rules to turn
            off (``ConvBNFusion``...); onnxruntime ignores names it does not know.
        log_severity: onnxruntime's log level for this session (1 logs which transformers
            changed the graph, see :mod:`onnx_lab.runtime.optimizers`).
        config_entries: extra onnxruntime session config entries (profiling writes its
            optimized graph with the weights in a side file:
            ``session.optimized_model_external_initializers_file_name``).

    Raises:
        RuntimeLoadError: onnxruntime cannot load the model (names the op and domain).
    """
    import onnxruntime as ort

    provs = resolve_providers(providers)
    if opt_level not in OPT_LEVELS:
        raise InputError(f"Unknown optimization level {opt_level!r}.",
                         fix=f"Use one of {', '.join(OPT_LEVELS)}.")
    if threads is not None and (isinstance(threads, bool) or not isinstance(
            threads, (int, np.integer)) or threads < 0):  # -1 was taken as it came
        raise InputError(f"threads must be an int >= 0 (0: onnxruntime's default), got "
                         f"{threads!r}.", fix="Pass e.g. threads=1, or leave it out.")

    def _options() -> Any:
        so = ort.SessionOptions()
        so.log_severity_level = int(log_severity)
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
            so.profile_file_prefix = ort_path(profile_prefix or os.path.join(
                tempfile.gettempdir(), "onnx_lab_ort_profile"))
        if optimized_model_path:
            so.optimized_model_filepath = ort_path(optimized_model_path)
        for k, v in (config_entries or {}).items():
            so.add_session_config_entry(str(k), str(v))
        return so

    # onnxruntime opens the data files by path: they must still be those of the open
    verify_files(model.ir)
    light = _light_session_data(model, provs, outputs, extra_outputs)
    if light is not None and set(provs) != {"CPUExecutionProvider"}:
        # Providers other than CPU take in-memory initializers like it in onnxruntime's
        # design, but only the CPU one is tested here: if the light session fails, the
        # whole model decides (and explains).
        try:
            return _create(model, _options(), provs, provider_options, outputs,
                           extra_outputs, light, disabled_optimizers)
        except RuntimeLoadError as e:
            logger.debug("in-memory weights on %s failed (%s); passing the whole model",
                         provs, e.problem)
            light = None
    return _create(model, _options(), provs, provider_options, outputs, extra_outputs, light,
                   disabled_optimizers)


def _create(model: LabModel, so: Any, provs: list[str], provider_options: Any,
            outputs: Sequence[str] | None, extra_outputs: Sequence[str],
            light: tuple[bytes, list[str], str | None] | None,
            disabled_optimizers: Sequence[str] = ()):
    import onnxruntime as ort

    weights: list[Any] = []
    if light is not None:
        data, names, folder = light
        if names:
            inits = model.graph.initializers
            weights = [ort.OrtValue.ortvalue_from_numpy(weight_array(inits[n].const_value))
                       for n in names]
            so.add_external_initializers(names, weights)
        if folder is not None:
            so.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", ort_path(folder))
        tmpdir = None
    else:
        data, tmpdir = _with_outputs(runtime_proto(model), outputs, extra_outputs,
                                     lambda proto: _serialize(model, proto))
        if model.base_dir is not None and tmpdir is None:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                        ort_path(model.base_dir))
    try:
        sess = ort.InferenceSession(data, so, providers=provs,
                                    provider_options=list(provider_options)
                                    if provider_options else None,
                                    disabled_optimizers=set(disabled_optimizers) or None)
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        missing = missing_locale(str(e), model)
        raise RuntimeLoadError(_explain_ort_error(e),
                               fix=missing[2] if missing else
                               "Check lab.check() for unsupported ops and domains; "
                               "ops of custom domains need their provider or a custom op "
                               "library.") from e
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    # The OrtValues are views of the model's arrays: they live as long as the session.
    sess._onnx_lab_weights = weights
    sess._onnx_lab_model = model  # run_session estimates a run's memory from it
    return sess


def _with_outputs(proto: onnx.ModelProto, outputs: Sequence[str] | None,
                  extra_outputs: Sequence[str], serialize: Callable[[onnx.ModelProto], Any]):
    """``serialize(proto)`` with the graph outputs replaced or extended (restored after)."""
    with _SWAP_LOCK:
        graph_outputs = list(proto.graph.output)
        try:
            if outputs is not None or extra_outputs:
                keep = {o.name: o for o in graph_outputs}
                names = (list(outputs) if outputs is not None
                         else [o.name for o in graph_outputs])
                names += [n for n in extra_outputs if n not in names]
                del proto.graph.output[:]
                proto.graph.output.extend(keep.get(n) or _value_info(n) for n in names)
            return serialize(proto)
        finally:
            del proto.graph.output[:]
            proto.graph.output.extend(graph_outputs)


def _light_session_data(model: LabModel, providers: Sequence[str],
                        outputs: Sequence[str] | None, extra_outputs: Sequence[str]
                        ) -> tuple[bytes, list[str], str | None] | None:
    """(graph bytes without the in-memory weights, their names, external-data folder), or
    None when the whole model must go to onnxruntime (see the module docstring)."""
    if not set(providers) <= _LIGHT_PROVIDERS:
        return None
    try:
        proto, names, folder = _light_graph(model)
        data = _with_outputs(proto, outputs, extra_outputs, lambda p: p.SerializeToString())
    except ValueError as e:  # several data folders, or still over 2 GB (Constant weights)
        logger.debug("whole model for onnxruntime: %s", e)
        return None
    if folder is None and model.base_dir is not None:
        folder = str(model.base_dir)  # external tensors of subgraphs or Constant nodes
    return data, names, folder


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
    # core/save.py's rule: its own data file beside it, tensors up to 4 KiB inline
    write_model(LabModel(m), path, "model.onnx.data")
    return path, tmp


def load_problem(path: str | os.PathLike, model: LabModel | None = None,
                 loaded_from: LabModel | None = None) -> str | None:
    """Why a fresh ``onnxruntime.InferenceSession(path)`` cannot load the model file at
    ``path`` (external data resolved against its own folder, as a user's program would), or
    None when it loads. Graph optimizations off, CPU.

    With ``model`` (what the file holds): when onnxruntime cannot load that model with
    every tensor inside the graph either (ops this build has no kernel for, a model for
    another runtime), the file is not what is wrong: None, and a log line. This second
    session is only made when the first fails (and not past 2 GB of weights).

    With ``loaded_from`` (the version the model was made from, such as the file a Lab
    opened), that excuse holds only when onnxruntime cannot load ``loaded_from`` either: a
    model whose source loads and that no longer does was broken on the way (an edit's
    attribute value onnxruntime refuses), and the file's problem is returned.

    Example:
        >>> save(history, "out.onnx", check=lambda p: load_problem(p, lab.model))
    """
    import onnxruntime as ort

    so = _load_check_options()
    try:
        ort.InferenceSession(ort_path(path), so, providers=["CPUExecutionProvider"])
        return None
    except Exception as e:  # noqa: BLE001 - ORT raises several exception types
        problem = _load_text(e)
    if model is not None and model.weights_nbytes() < _PROTO_LIMIT // 2:
        other = _embedded_problem(model)
        if other is not None and loaded_from is not None and loaded_from is not model \
                and loaded_from.weights_nbytes() < _PROTO_LIMIT // 2 \
                and _embedded_problem(loaded_from) is None:
            return f"{problem} (the version it was made from loads: a step broke it)"
        if other is not None:
            logger.info("%s: onnxruntime loads neither the file nor the model with its "
                        "weights inside (%s)", path, other)
            return None
    return problem


def _load_check_options() -> Any:
    """Options of a session made only to see whether a model loads: no optimizations, no
    MatMul pre-packing (most of a session's start on large weights, useless for no run),
    no arena."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4  # failures are raised with their message
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_cpu_mem_arena = False
    so.add_session_config_entry("session.disable_prepacking", "1")
    return so


def _embedded_problem(model: LabModel) -> str | None:
    """Why onnxruntime cannot load ``model`` given as one message with every tensor inside
    (the most it can be offered), or None."""
    import onnxruntime as ort

    try:
        copy = model.clone().ir
        if model.has_external_data:
            ir.external_data.load_to_model(copy)
        ort.InferenceSession(ir.to_proto(copy).SerializeToString(), _load_check_options(),
                             providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT (or serializing a malformed model) raises any type
        return _load_text(e)
    return None


def _load_text(e: Exception) -> str:
    """onnxruntime's reason for refusing a model, on one line: without its source locations,
    within 400 characters with its end kept (:func:`clipped`; the reason comes last)."""
    text = _ort_text(str(e).strip())
    return clipped(text.splitlines()[0]) if text else type(e).__name__


def saved_form_problem(model: LabModel) -> str | None:
    """Why onnxruntime would refuse ``model`` once saved with external data, or None.

    onnxruntime's shape inference reads shape and axes inputs only from the model file, and
    a saved file keeps only tensors up to 4 KiB inline (``core.save.INLINE_MAX_BYTES``).
    Verification's runner feeds the large weights as inputs, which shape inference does not
    read, so a model whose large *integer* initializer is such an input runs there but not
    from its file. Only those models get a check: the model is written the way a save
    writes it (``core.save.write_model``, into a temporary folder) and loaded by a fresh
    session from there (:func:`load_problem`); the others (float weights only) cost a scan
    of their initializers.
    """
    ints = {ir.DataType.INT64, ir.DataType.INT32}
    suspect = any(t is not None and t.dtype in ints and t.nbytes > _INLINE_BYTES
                  for g in model.ir.graphs() for v in g.initializers.values()
                  for t in (v.const_value,))
    if not suspect:
        return None
    with tempfile.TemporaryDirectory(prefix="onnx_lab_saved_form_") as tmp:
        path = os.path.join(tmp, "model.onnx")
        try:
            write_model(model, path, "model.onnx.data")
        except WriteError as e:  # the temporary folder's disk, not the model
            logger.warning("saved-form check skipped: %s", e.problem)
            return None
        except SaveError as e:  # the model cannot be written at all
            return e.problem
        return load_problem(path, model)


_FEEDS_FIX = ("Check the feeds' shapes and dtypes against lab.inputs; without feeds=, the inputs "
              "are seeded random values, which may be invalid for this model (indices, axes, "
              "sizes, divisors): pass feeds= of real values.")


def run_session(sess: Any, feeds: Mapping[str, Any], names: Sequence[str] | None = None, *,
                what: str = "the model", fix: str = _FEEDS_FIX,
                runtime: str = "onnxruntime", check_memory: bool = True) -> dict[str, Any]:
    """One run of ``sess`` (onnxruntime's, or the OpenVINO session-like object) as
    {output name: array}; every runtime failure becomes a :class:`RuntimeLoadError` naming
    ``what`` ran and the first line of the message of ``runtime`` (the engine, for the
    error's wording).

    The one checked runner: compare, precision, verification and backends run sessions through
    it; profiling's timing loops call ``sess.run`` directly after a first checked run.

    ``check_memory=False``: the caller made the memory check (:func:`check_memory_of`)
    outside what it times.

    Example:
        >>> out = run_session(make_session(lab.model), feeds, what="the candidate")
    """
    if names is None:
        names = (sess.get_outputs_names() if hasattr(sess, "get_outputs_names")
                 else [o.name for o in sess.get_outputs()])
    names = list(names)
    if check_memory:
        check_memory_of(sess, feeds, what)
    if runtime != "onnxruntime" or not hasattr(sess, "run_with_ort_values"):
        try:
            values = sess.run(names, dict(feeds))
        except Exception as e:  # noqa: BLE001 - each runtime raises its own types
            raise run_failure(e, what, fix, runtime=runtime) from e
    else:
        values = bounded_run(sess, names, feeds, what=what, fix=fix)
    return dict(zip(names, values, strict=True))


#: In a series of runs that grow (``check_memory_of(along=...)``), a run is checked exactly
#: again when the line through the last two exact estimates, times this, reaches the limit.
_ALONG_MARGIN = 1.5


def check_memory_of(sess: Any, feeds: Mapping[str, Any], what: str = "the model", *,
                    along: tuple[str, int] | None = None) -> None:
    """The memory check :func:`run_session` makes before a run of ``sess`` on ``feeds``
    (:func:`onnx_lab.core.limits.check_run_memory`; its estimate is shape inference at new
    shapes: 0.25 s per new past length of a decoder, 1.8 s on an optimum merged decoder).

    ``along``: (series, n) for a run of a series whose activations grow linearly with ``n``
    (a decode loop's past length, a sequence growing one token per run). The first two sizes
    of a series are estimated exactly; a later one is checked on the line through the last
    two exact estimates, and exactly again once that line times 1.5 comes within the limit
    (compare_llm on a merged llama spent 90 of its 93 s in these estimates, one per token).
    """
    model = getattr(sess, "_onnx_lab_model", None)
    if model is None:
        return
    shapes = _feed_shapes(feeds)
    if along is None:
        check_run_memory(model, shapes, what=what)
        return
    limit, _how = memory_limit()
    if limit is None:
        return
    series, n = along
    # a series is one kind of run at one batch: a session reused at another batch starts anew
    key = (series, tuple(sorted((k, v[0] if v else None) for k, v in shapes.items())))
    book = getattr(sess, "_onnx_lab_along", None)
    if book is None:
        book = {}
        with contextlib.suppress(AttributeError):  # a session-like object without a dict
            sess._onnx_lab_along = book
    points = book.setdefault(key, [])
    if len(points) >= 2:
        (n0, e0), (n1, e1) = points[-2], points[-1]
        slope = max((e1 - e0) / (n1 - n0), 0.0) if n1 != n0 else 0.0
        if (e1 + slope * max(n - n1, 0)) * _ALONG_MARGIN < limit:
            return
    peak = estimate_run_memory(model, shapes)["peak_bytes"]
    if peak > limit:
        check_run_memory(model, shapes, what=what)  # raises, naming the peak and the limit
    if not points or points[-1][0] != n:
        points.append((n, float(peak)))


_POOL: list[Any] = []
_POOL_LOCK = threading.Lock()


def _runner_pool() -> futures.ThreadPoolExecutor:
    """The threads runs go on in (kept: a fresh thread per run would cost onnxruntime's
    per-thread set-up, ~1 ms, every time)."""
    with _POOL_LOCK:
        # a forked child has none of its parent's threads: it makes its own pool
        if not _POOL or _POOL[0] != os.getpid():
            _POOL[:] = [os.getpid(), futures.ThreadPoolExecutor(
                max_workers=32, thread_name_prefix="onnx_lab-run")]
        return _POOL[1]


def _feed_shapes(feeds: Mapping[str, Any]) -> dict[str, list[int]]:
    # tensors only: a sequence (list), map (dict) or optional feed has no shape of its own
    return {k: list(v.shape) for k, v in feeds.items() if isinstance(v, np.ndarray)}


_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


def bounded_run(sess: Any, names: Sequence[str] | None, feeds: Mapping[str, Any], *,
                what: str = "the model", fix: str = _FEEDS_FIX,
                model: LabModel | None = None) -> list[Any]:
    """``sess.run(names, feeds)`` of an onnxruntime session, stopped after the time limit
    (:func:`onnx_lab.core.limits.run_timeout`) or on Ctrl-C through ``RunOptions.terminate``.
    With ``model``, the run's memory is checked first (:func:`check_run_memory`).

    The run goes on in a helper thread while this one waits, so that Ctrl-C (which Python
    delivers to the main thread only between bytecodes, never inside onnxruntime) and the
    timer can stop it.

    Raises:
        RunLimitError: the estimate passes the memory limit, or the run took too long (naming
            the node onnxruntime was running and the limit).
        RuntimeLoadError: onnxruntime failed to run the model.
        KeyboardInterrupt: Ctrl-C (the run is stopped first).
    """
    import onnxruntime as ort

    if model is not None:
        check_run_memory(model, _feed_shapes(feeds), what=what)
    limit = run_timeout()
    ro = ort.RunOptions()
    ro.log_severity_level = 4  # the stop is reported here, not in onnxruntime's log
    box: dict[str, Any] = {}

    typed = _typed_run(sess, names, feeds)

    def target() -> None:
        try:
            if typed:
                box["values"] = _run_ortvalues(sess, names, feeds, ro)
            else:
                box["values"] = sess.run(None if names is None else list(names), dict(feeds),
                                         ro)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e

    start = time.monotonic()
    timed_out = False
    done = _runner_pool().submit(target)
    try:
        while not done.done():
            left = None if limit is None else limit - (time.monotonic() - start)
            if left is not None and left <= 0:
                timed_out = True
                ro.terminate = True
                futures.wait([done])
                break
            futures.wait([done], timeout=0.2 if left is None else min(0.2, left))
    except BaseException:  # Ctrl-C: stop the run, then let the interrupt go on
        ro.terminate = True
        futures.wait([done])
        raise
    if "error" in box:
        e = box["error"]
        if timed_out or "terminate flag" in str(e):
            m = _NODE.search(str(e))
            node = f" in {m.group(1)} node {m.group(2)!r}" if m else ""
            raise RunLimitError(
                f"Running {what} was stopped after {time.monotonic() - start:.1f} s{node}: "
                f"over the time limit of {limit:g} s.",
                fix="Check the model's loops (trip counts) and inputs, or raise the limit: "
                "onnx_lab.core.limits.set_run_limits(timeout_s=3600), "
                "ONNX_LAB_RUN_TIMEOUT=3600, or onnx-lab --run-timeout 3600.",
                limit="time") from e
        if isinstance(e, LabError):
            raise e
        if not isinstance(e, Exception):
            raise e
        raise run_failure(e, what, fix) from e
    return box["values"]


def _typed_run(sess: Any, names: Sequence[str] | None, feeds: Mapping[str, Any]) -> bool:
    """Whether this run goes through OrtValues (:mod:`onnx_lab.runtime.typed`): a feed or an
    asked output of a type the binding cannot take or return as numpy (bfloat16, float8,
    int4...), and every feed a tensor (a sequence or map feed has no OrtValue here)."""
    if not hasattr(sess, "run_with_ort_values"):
        return False
    special = any(needs_ortvalue(v) for v in feeds.values())
    try:
        want = None if names is None else set(names)
        outs = [o for o in sess.get_outputs() if want is None or o.name in want]
    except Exception:  # noqa: BLE001 - a session-like object without output metadata
        return False
    special = special or any(o.type in SPECIAL_OUTPUT_TYPES for o in outs)
    if not special:
        return False
    # tensors in and out only: a sequence, map or optional has no OrtValue path here
    return all(isinstance(v, np.ndarray) and v.dtype.kind not in "OUS"
               for v in feeds.values()) and all(o.type.startswith("tensor(") for o in outs)


def _run_ortvalues(sess: Any, names: Sequence[str] | None, feeds: Mapping[str, Any],
                   ro: Any) -> list[Any]:
    """``sess.run`` with the feeds as typed OrtValues and the outputs read back as
    (ml_dtypes) numpy arrays."""
    if names is None:
        names = [o.name for o in sess.get_outputs()]
    ovs = {k: to_ortvalue(v) for k, v in feeds.items()}
    return [from_ortvalue(o) for o in sess.run_with_ort_values(list(names), ovs, ro)]


_NO_MEMORY = re.compile(r"Failed to allocate memory|bad_alloc|out of memory", re.IGNORECASE)


def out_of_memory(e: BaseException, model: LabModel | None = None) -> bool:
    """Whether a run failed for want of memory (onnxruntime's "Failed to allocate memory",
    a ``bad_alloc``, or onnx_lab's own memory limit refusing it): a fact about the machine and
    its limit, not about the model, which a verification must not read as a wrong result.

    The time limit is not memory (a run stopped after it is a run that did not finish). With
    ``model``, the strings of the model the message quotes are not read: a node named
    "mm bad_alloc" made onnxruntime's type error for it read as a want of memory."""
    if isinstance(e, RunLimitError):
        return getattr(e, "limit", None) != "time"
    text = str(e)
    if model is not None and _NO_MEMORY.search(text):
        for name in sorted(_memory_words(model), key=len, reverse=True):
            text = text.replace(name, "")
    return bool(_NO_MEMORY.search(text))


def _memory_words(model: LabModel) -> set[str]:
    """The model's strings (names of nodes, values and graphs, op types, domains, its path)
    that say what :func:`out_of_memory` looks for."""
    found: set[str] = set()

    def see(s: Any) -> None:
        if isinstance(s, str) and s and _NO_MEMORY.search(s):
            found.add(s)

    see(str(model.path) if getattr(model, "path", None) is not None else None)
    for e in model.index.entries.values():
        n = e.node
        for s in (n.name, n.op_type, n.domain, e.graph):
            see(s)
        for v in (*n.inputs, *n.outputs):
            see(v.name if v is not None else None)
    g = model.graph
    for v in (*g.inputs, *g.outputs):
        see(v.name)
    for name in g.initializers:
        see(name)
    see(g.name)
    return found


def run_failure(e: BaseException, what: str = "the model", fix: str = _FEEDS_FIX, *,
                runtime: str = "onnxruntime") -> RuntimeLoadError:
    """The :class:`RuntimeLoadError` for ``e`` raised by a session run: "``runtime`` failed
    to run ``what``" and the first line of its message. :func:`run_session` raises it; loops
    that time ``sess.run`` themselves raise it for a failure after their first checked run.
    """
    text = _ort_text(str(e).strip())
    first = clipped(text.splitlines()[0]) if text else type(e).__name__
    unfeedable = _MAP_FEED.search(text) if runtime == "onnxruntime" else None
    if unfeedable is not None:
        given, wanted = (re.sub(r"tensor\((\w+)\)", r"\1", g) for g in unfeedable.groups())
        # onnxruntime's Python binding makes every dict a map of float values: no feed,
        # generated or given, reaches a map(int64,double) input (the fix said "check the
        # feeds' dtypes", which no dict can meet)
        fix = (f"onnxruntime's Python API passes a dict only as a map of float values "
               f"(map(int64,float) or map(string,float): it became {given}); no dict fed from "
               f"Python is a {wanted}, so this model runs only from onnxruntime's C, C++, C# "
               "or Java API. To use it here, make the input a map of float values (the "
               "exporter's value type, e.g. skl2onnx's DictionaryType(..., FloatTensorType"
               "([1])))).")
    return RuntimeLoadError(f"{runtime} failed to run {what}: {first}", fix=fix)


_MAP_FEED = re.compile(r"Unexpected input data type\. Actual: \(\((map\(\w+,tensor\(\w+\)\))\)\)"
                       r" , expected: \(\((map\(\w+,tensor\(\w+\)\))\)\)")


def clipped(text: str, limit: int = 400) -> str:
    """``text`` within ``limit`` characters, its end kept: onnxruntime nests the reason at the
    end of a run failure ("... Status Message: Input X must have 3 dimensions only.
    Actual:{1,1,1,128,2}"), which a cut at the start lost mid-word."""
    return clip_text(text, limit, head_share=1 / 3, counted=False)


_ORT_TAG = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
# "/onnxruntime_src/onnxruntime/core/graph/graph.cc:1483 onnxruntime::Graph::Graph(...) "
# (ORT_WHERE: the file, the line and the function's signature, always together)
_ORT_SOURCE = re.compile(r"/onnxruntime_src/\S+:\d+ (?:[^()\n]*?\(.*?\)(?: const)? )?")


def _ort_text(text: str) -> str:
    """onnxruntime's message without its source locations and C++ signatures (which filled
    the 400 characters kept before the reason came): a message that repeats the
    ``[ONNXRuntimeError]`` tag keeps its last, innermost part."""
    lines = text.splitlines()
    if not lines:
        return text
    first = lines[0]
    tags = list(_ORT_TAG.finditer(first))
    if len(tags) > 1:
        first = first[tags[-1].start():]
    return "\n".join([_ORT_SOURCE.sub("", first), *lines[1:]])


_LOCALE = re.compile(r"Failed to construct locale with name:\s*([^\s:]+)")


def missing_locale(text: str, model: LabModel) -> tuple[str | None, str, str] | None:
    """(node id, locale, fix) when onnxruntime failed because this machine lacks the locale
    a StringNormalizer names (``en_US.UTF-8`` when the node sets none, as skl2onnx's text
    vectorizers leave it), else None."""
    m = _LOCALE.search(text)
    if m is None:
        return None
    locale = m.group(1)
    node_id = next((nid for nid, e in model.index.entries.items()
                    if e.node.op_type == "StringNormalizer"
                    and (e.node.attributes.get_string("locale") or "en_US.UTF-8") == locale),
                   None)
    node = node_id or "NODE"
    return node_id, locale, (
        f"onnxruntime's StringNormalizer needs the locale {locale!r}, which this machine does "
        f"not have: install it (Debian/Ubuntu: apt-get install locales, then locale-gen "
        f"{locale}), or set the node's locale to one it has (`locale -a`): "
        f"lab.set_attribute({node!r}, 'locale', 'C.UTF-8', verify=False) (the model "
        "before it does not run to compare with), on the command line onnx-lab edit IN OUT "
        f"--set-attr '{node}:locale=C.UTF-8' --no-verify.")


def _explain_ort_error(e: Exception) -> str:
    text = _ort_text(str(e).strip())
    first = clipped(text.splitlines()[0]) if text else type(e).__name__
    return f"onnxruntime cannot load or run the model: {first}"


def default_providers() -> tuple[list[str], list[str]]:
    """(providers to profile by default, notes on the skipped ones)."""
    avail = available_providers()
    use = [p for p in PROFILED_PROVIDERS if p in avail]
    notes = [f"{p} is not available in this onnxruntime build (installed: {', '.join(avail)}); "
             "skipped" for p in PROFILED_PROVIDERS if p not in avail]
    return use, notes


def fallback_chain(p: str) -> list[str]:
    """The providers of a session that profiles or test-loads on ``p``: CPU runs the ops a
    device provider cannot (the trace says who ran each node)."""
    if p == "TensorrtExecutionProvider":
        return [p, "CUDAExecutionProvider", "CPUExecutionProvider"]
    if p == "CPUExecutionProvider":
        return [p]
    return [p, "CPUExecutionProvider"]


def ort_max_opsets() -> dict[str, int]:
    """Highest opset per domain the installed onnxruntime registers (from its op schemas)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    out: dict[str, int] = defaultdict(int)
    for s in C.get_all_operator_schema():
        out[s.domain] = max(out[s.domain], int(s.since_version))
    out.setdefault("ai.onnx", out.get("", 0))
    return dict(out)


def implemented_ops(domain: str = "com.microsoft") -> set[str] | None:
    """Op types of ``domain`` that some available execution provider of the installed
    onnxruntime has a kernel for (its own kernel registry, not a list kept here); None when
    this build cannot list its kernels."""
    import onnxruntime

    try:
        from onnxruntime.capi import _pybind_state

        defs = _pybind_state.get_all_opkernel_def()
    except (ImportError, AttributeError, RuntimeError):  # a build without the registry call
        return None
    avail = set(onnxruntime.get_available_providers())
    return {d.op_name for d in defs if d.domain == domain and d.provider in avail}


def ort_registered_ops() -> dict[tuple[str, str], int]:
    """``{(domain, op): first opset}`` of every op schema the installed onnxruntime registers
    (ONNX's ops, its contrib ops in ``com.microsoft``, and the few it registers in the default
    domain that ONNX does not define, such as ``SimplifiedLayerNormalization``). Read once
    from onnxruntime's own schema list."""
    return dict(_ort_registered_ops())


@functools.lru_cache(maxsize=1)
def _ort_registered_ops() -> tuple[tuple[tuple[str, str], int], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    out: dict[tuple[str, str], int] = {}
    for s in C.get_all_operator_schema():
        key = ("" if s.domain == "ai.onnx" else s.domain, s.name)
        out[key] = min(out.get(key, int(s.since_version)), int(s.since_version))
    return tuple(out.items())


def ort_version() -> str:
    """The installed onnxruntime's version string."""
    import onnxruntime as ort

    return ort.__version__


def default_load_problem(model: LabModel, step: str = "load check",
                         timeout: float = 600.0) -> str | None:
    """Why a fresh ``onnxruntime.InferenceSession`` at its *default* options (every graph
    optimization on, CPU) cannot load ``model`` saved as ``lab.save`` writes it, or None.

    Verification and the save check load with optimizations off; a deployment loads with
    them on, where some rewrites of other tools stop onnxruntime's own optimizers (onnxsim's
    silero-vad: "First input tensor must have rank 3" in an LSTM of an If branch) or abort
    the process (a C++ assertion on a dynamic-int8 LSTM). So the session is made in a child
    process (:func:`default_path_problem`): an abort is a problem named here, never the end
    of the caller's kernel. Cached on ``model``.
    """
    from onnx_lab.core.handoff import model_folder

    def build() -> tuple[str | None]:
        with model_folder(model, step) as path:
            return (default_path_problem(path, timeout),)

    return model.cached(("default_load_problem",), build)[0]


def warm_default_load() -> None:
    """Start the child that answers :func:`default_path_problem` now, without waiting: its
    ``import onnxruntime`` overlaps the caller's work (a step's rewrite and verification)."""
    _default_load.warm()


def default_path_problem(path: str | os.PathLike, timeout: float = 600.0) -> str | None:
    """Why onnxruntime at its default options cannot load the model file at ``path``, asked
    in a child process (see :func:`default_load_problem`; one child kept for these questions,
    :mod:`onnx_lab.runtime._default_load`), or None (also when the check ran past
    ``timeout`` seconds: no claim either way)."""
    return _load_answer(path, *_default_load.ask(path, timeout), timeout)


def _load_answer(path: str | os.PathLike, how: str, text: str | None, timeout: float
                 ) -> str | None:
    """The problem :func:`default_path_problem` names for the child's answer."""
    if how == "ok":
        return None
    if how == "timeout":
        logger.info("%s: the default-options load check ran past %.0f s", path, timeout)
        return None
    if how == "signal":
        return (f"onnxruntime aborted the process (signal {text}) while loading it at its "
                "default options")
    if how == "exit":
        return f"exit code {text}"
    return clipped(_ort_text(text or ""))


@contextlib.contextmanager
def default_load_ahead(model: LabModel, step: str = "load check", timeout: float = 600.0
                       ) -> Iterator[None]:
    """Ask :func:`default_load_problem` of ``model`` when the block starts; the child loads it
    while the block runs, and its answer is cached on ``model`` when the block ends (so the
    question after it does not wait again). Nothing is asked when the answer is cached, or
    past 2 GB of weights (:func:`default_load_regression` skips those); a block that raises
    gives the question up (the child goes)."""
    key = ("default_load_problem",)
    if model.is_cached(key) or model.weights_nbytes() > _PROTO_LIMIT:
        yield
        return
    from onnx_lab.core.handoff import model_folder

    with model_folder(model, step) as path:
        pending = _default_load.ask_ahead(path, timeout)
        try:
            yield
        except BaseException:
            pending.cancel()
            raise
        problem = _load_answer(path, *pending.answer(), timeout)
    model.cached(key, lambda: (problem,))


def default_load_regression(path: str | os.PathLike | LabModel, loaded_from: LabModel | None
                            ) -> str | None:
    """Why the model file at ``path`` (or a LabModel) does not load in onnxruntime at its
    default options while ``loaded_from`` (the version it was made from) does, or None.
    Skipped (None) past 2 GB of weights: the child process holds a second copy, and
    onnxruntime's optimizers run over it."""
    if loaded_from is None or loaded_from.weights_nbytes() > _PROTO_LIMIT:
        return None
    problem = default_load_problem(path) if isinstance(path, LabModel) else \
        default_path_problem(path)
    if problem is None or default_load_problem(loaded_from) is not None:
        return None
    return (f"onnxruntime at its default options (graph optimizations on, as a deployment "
            f"loads it) does not load it, while it loads the version it was made from: "
            f"{problem}")
