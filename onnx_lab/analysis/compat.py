"""Compatibility report: what may keep a model from loading or running well somewhere.

``check(model)`` returns one row per finding: the ONNX checker (full check), ops whose output
shapes depend on values, custom and non-standard domains, opsets above what the installed
onnxruntime supports, ops a provider cannot run (a real session load per provider), dynamic
dims, external data files and their sizes, fp16/bf16 tensors, and the 2 GB protobuf limit.

Example:
    >>> findings = onnx_lab.open("model.onnx").check()
    >>> findings.loc[findings.severity == "error"]
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.analysis.summary import constant_computed
from onnx_lab.core._proto import graph_protos
from onnx_lab.core.derived import derived_dims, length_sums
from onnx_lab.core.llm import decoder_io
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import (
    _skeleton_graph,
    dynamic_dims,
    guard_label_encoders,
    shape_tuple,
    value_type,
)
from onnx_lab.core.source import resolve
from onnx_lab.core.units import format_bytes
from onnx_lab.core.values import is_constant
from onnx_lab.errors import CacheError, RuntimeLoadError
from onnx_lab.runtime.session import (
    default_providers,
    fallback_chain,
    make_session,
    missing_locale,
    ort_max_opsets,
    ort_registered_ops,
    ort_version,
    resolve_providers,
)

logger = logging.getLogger(__name__)

__all__ = ["check", "FINDING_COLUMNS", "SEVERITIES"]

FINDING_COLUMNS = ["severity", "code", "node_id", "message", "fix"]
SEVERITIES = ("error", "warning", "info")

_STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"}
# Output shapes that depend on input values, whatever the inputs' shapes are.
_VALUE_SHAPED = {
    "NonZero": "the number of non-zero elements",
    "Unique": "the number of unique values",
    "NonMaxSuppression": "the number of boxes kept",
    "Compress": "the number of true conditions",
    "StringSplit": "the number of substrings",
}
# Output shapes that depend on the values of these inputs unless they are constants.
_SHAPE_INPUTS = {"TopK": (1, "k"), "Reshape": (1, "shape"), "Expand": (1, "shape"),
                 "Tile": (1, "repeats"), "ConstantOfShape": (0, "shape"), "Range": (1, "limit"),
                 "Resize": (3, "sizes"), "Upsample": (1, "scales"), "OneHot": (1, "depth"),
                 "Pad": (1, "pads"), "Slice": (1, "starts")}
_PROTO_LIMIT = 2 * 1024**3
_PROTO_WARN = int(1.6 * 1024**3)


def _row(severity: str, code: str, node_id: str | None, message: str, fix: str) -> dict:
    return {"severity": severity, "code": code, "node_id": node_id, "message": message,
            "fix": fix}


def check(model: Any, *, providers: str | Sequence[str] | None = None,
          load: bool = True) -> pd.DataFrame:
    """Findings that affect whether and where the model runs.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        providers: providers to test-load the model on (default: every installed one of CPU,
            CUDA and TensorRT).
        load: False skips the session loads (fast, static checks only).

    Returns:
        DataFrame(severity ('error', 'warning', 'info'), code, node_id (None for model-level
        findings), message, fix), errors first. Codes: checker, value_dependent_shape,
        custom_domain, opset_unsupported, provider_load, dynamic_dim, initializer_input,
        external_data, external_data_missing, external_value_input (a shape input such as
        a Reshape's shape or a ReduceMean's axes stored in the external data file, which
        onnxruntime cannot load), low_precision, proto_size,
        model_local_function, runtime_constants, onnxruntime_op (a default-domain op ONNX
        does not define and onnxruntime registers: a warning, onnxruntime only),
        stale_value_info (an intermediate's declared shape differs from the inferred one, or
        fixes a dim the inputs leave free), baked_dim (a node fixes a dim the inputs declare
        free: broadcast against a fixed size, or reshaped to a fixed shape),
        kv_cache_pairing (a decoder's past_key_values.* inputs and present.* outputs cannot
        be paired: a generation loop cannot feed its cache back).

    Example:
        >>> check("sample:convnet").code.tolist()
    """
    return pd.DataFrame(check_rows(model, providers=providers, load=load),
                        columns=FINDING_COLUMNS)


def check_rows(model: Any, *, providers: str | Sequence[str] | None = None,
               load: bool = True) -> list[dict]:
    """:func:`check`'s findings as rows (dicts of its columns), errors first: what
    ``onnx-lab check --json`` prints, without building a DataFrame (nor importing pandas).

    Example:
        >>> [r["code"] for r in check_rows("sample:convnet", load=False)]
    """
    lm, dims, shapes = resolve(model)
    rows: list[dict] = []
    rows += _checker(lm)
    rows += _value_shapes(lm, dims, shapes)
    rows += _op_contracts(lm, dims, shapes)
    rows += _domains(lm)
    rows += _opsets(lm)
    rows += _dynamic(lm, dims, shapes)
    rows += _declared_fixed(lm)
    rows += _baked_dims(lm)
    rows += _kv_cache(lm)
    rows += _initializer_inputs(lm)
    rows += _unread_inputs(lm)
    rows += _external(lm)
    rows += _external_value_inputs(lm)
    rows += _precision(lm)
    rows += _runtime_constants(lm)
    rows += _proto_size(lm)
    if load:
        rows += _loads(lm, providers)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    rows = [{c: r.get(c) for c in FINDING_COLUMNS} for r in rows]
    return sorted(rows, key=lambda r: order.get(r["severity"], len(order)))  # stable


def _checker(lm: LabModel) -> list[dict]:
    """onnx.checker (full check) on a weight-free skeleton plus a per-tensor check.

    Serializing the whole model for the checker costs seconds on BERT-base and fails past
    2 GB; the graph structure, node attributes, small constants and strict shape inference
    are all checked on the skeleton (weights as typed inputs), and each weight on its own.
    """
    import onnx

    m = lm.ir
    try:
        proto = _skeleton(lm)
    except Exception as e:  # noqa: BLE001 - serialization problems are findings
        return [_row("error", "checker", None, f"The model cannot be serialized: {e}",
                     "Fix the graph (lab.nodes shows it) and save again.")]
    rows = _tensor_checks(lm)
    if (m.ir_version or 0) < 4:
        listed = {v.name for v in m.graph.inputs}
        missing = [n for n in m.graph.initializers if n not in listed]
        if missing:
            rows.append(_row("error", "checker", None,
                             f"onnx.checker: initializer {missing[0]!r} is not a graph input "
                             f"(required before IR version 4; {len(missing)} such).",
                             "List the initializers as graph inputs, or raise ir_version."))
    checked = _ort_ops_set_aside(proto, lm)
    if (m.ir_version or 0) < 4:
        checked = _initializers_listed(checked)
    guard_label_encoders(checked)  # onnx's inference would end the process on some
    stale: list[str] = []
    for _ in range(_STALE_RETRIES):
        try:
            onnx.checker.check_model(checked, full_check=True)
        except onnx.checker.ValidationError as e:
            text = str(e).strip()
            first = text.splitlines()[0] if text else "validation failed"
            m2 = re.search(r"node (?:name|with name)[:\s]+'?([^'\s)]+)", text)
            return rows + _stale_rows(stale) + [_row(
                "error", "checker", m2.group(1) if m2 else None, f"onnx.checker: {first[:500]}",
                _ir_version_fix(m.ir_version, onnx.IR_VERSION, "onnx")
                if _IR_TOO_NEW_CHECKER.search(text) else
                "Fix the node or attribute named; lab.nodes shows the graph.")]
        except onnx.shape_inference.InferenceError as e:
            text = str(e).strip().splitlines()[0] if str(e).strip() else "shape inference failed"
            node = _inference_node(text)
            dropped = _drop_stale_value_info(checked, node) if "existing shape" in text else []
            if dropped:
                stale += dropped
                continue
            return rows + _stale_rows(stale) + [_row(
                "error", "checker", node, f"onnx.checker (strict shape inference): {text[:500]}",
                "Make the shapes consistent (lab.tensors shows the inferred ones).")]
        break
    return rows + _stale_rows(stale)


def _initializers_listed(proto):
    """A copy of ``proto`` (IR < 4) whose initializers are all graph inputs: the row above
    already reports the ones that are not, and the checker, which stops at its first error,
    said it again ("W in initializer but not in graph input": two errors for one problem, the
    rest of the model unchecked)."""
    import onnx

    listed = {v.name for v in proto.graph.input}
    missing = [t for t in proto.graph.initializer if t.name not in listed]
    if not missing:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)  # the skeleton is cached and shared with the provider loads
    out.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                list(t.dims)) for t in missing)
    return out


# A stale declared shape of an intermediate tensor is dropped from the checker's copy and the
# check runs again, this many times at most (each finds the next one).
_STALE_RETRIES = 20


def _drop_stale_value_info(proto, node_name: str | None) -> list[str]:
    """Remove (from the checker's copy) the value_info of ``node_name``'s outputs when they
    are intermediate tensors; their names. onnxruntime does not hold a model to a declared
    intermediate shape (it keeps the inferred one), so such a mismatch is a warning."""
    if not node_name:
        return []
    node = next((n for n in proto.graph.node if n.name == node_name), None)
    if node is None:
        return []
    outputs = {o.name for o in proto.graph.output}
    names = [o for o in node.output if o and o not in outputs]
    keep = [v for v in proto.graph.value_info if v.name not in names]
    if len(keep) == len(proto.graph.value_info):
        return []
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(keep)
    return names


def _stale_rows(names: list[str]) -> list[dict]:
    if not names:
        return []
    shown = ", ".join(repr(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")
    return [_row("warning", "stale_value_info", None,
                 f"The declared shape (value_info) of {len(names)} intermediate tensor(s) "
                 f"differs from the inferred one: {shown}. onnxruntime keeps the inferred "
                 "shape and runs the model; tools that trust value_info may not.",
                 "Re-export, or drop the stale value_info (lab.tensors shows the inferred "
                 "shapes).")]


# The domain the checker's copy of the model puts onnxruntime's default-domain ops in: ONNX
# has no schema for them (the checker would stop at the first), onnxruntime runs them.
_SET_ASIDE = "onnx_lab.onnxruntime_registered"


def _ort_only_ops(lm: LabModel) -> dict[str, list[str]]:
    """{op: node ids} of default-domain ops ONNX does not define and onnxruntime registers
    (``SimplifiedLayerNormalization``, which onnxruntime-genai's builder writes)."""
    import onnx

    try:
        registered = ort_registered_ops()
    except (ImportError, AttributeError) as e:  # an unusual onnxruntime build
        logger.info("cannot read onnxruntime's op schemas: %s", e)
        return {}
    out: dict[str, list[str]] = defaultdict(list)
    for nid, e in lm.index.entries.items():
        n = e.node
        if n.domain in ("", "ai.onnx") and ("", n.op_type) in registered \
                and not onnx.defs.has(n.op_type, ""):
            out[n.op_type].append(nid)
    return dict(out)


def _ort_ops_set_aside(proto, lm: LabModel):
    """``proto`` (not modified) with onnxruntime's own default-domain ops moved to a domain of
    their own, so the checker checks everything else instead of stopping at them."""
    import onnx

    ops = set(_ort_only_ops(lm))
    if not ops:
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)

    for g in graph_protos(copy.graph):
        for n in g.node:
            if n.domain in ("", "ai.onnx") and n.op_type in ops:
                n.domain = _SET_ASIDE
    copy.opset_import.add(domain=_SET_ASIDE, version=1)
    return copy


def _weights(lm: LabModel):
    """(owner, tensor) for every initializer and Constant-node tensor of every graph."""
    for g in lm.ir.graphs():
        for name, v in g.initializers.items():
            if v.const_value is not None:
                yield name, v.const_value
        for n in g:
            a = n.attributes.get("value")
            if n.op_type == "Constant" and a is not None and a.type == ir.AttributeType.TENSOR:
                yield n.name or (n.outputs[0].name if n.outputs else "Constant"), a.value


def _tensor_checks(lm: LabModel) -> list[dict]:
    """What onnx.checker checks per tensor (a known dtype, data that matches the dims),
    without serializing the weights: protobuf-backed tensors go through
    onnx.checker.check_tensor; array-backed ones compare their element count."""
    import numpy as np
    import onnx

    for name, t in _weights(lm):
        problem = None
        if isinstance(t, ir.ExternalTensor):
            continue  # checked against its file in _external
        if t.dtype == ir.DataType.UNDEFINED:
            problem = "has no data type"
        elif any(not isinstance(d, int) or d < 0 for d in t.shape):
            problem = f"has invalid dims {list(t.shape)}"
        elif isinstance(t.raw, onnx.TensorProto):
            try:
                onnx.checker.check_tensor(t.raw)
            except onnx.checker.ValidationError as e:
                problem = str(e).strip().splitlines()[0][:300]
        elif isinstance(t.raw, np.ndarray) and t.raw.size != t.size:
            problem = f"holds {t.raw.size} values for dims {list(t.shape)}"
        if problem:
            return [_row("error", "checker", None, f"onnx.checker: tensor {name!r} {problem}.",
                         "Re-export the model, or replace the tensor "
                         "(lab.initializers shows it).")]
    return []


def _skeleton(lm: LabModel):
    """The model without its weights (those over 4 KB become typed graph inputs), cached on
    the (immutable) LabModel; shared by the checker and the provider loads."""
    return lm.cached(("compat", "skeleton"), lambda: _build_skeleton(lm))


def _build_skeleton(lm: LabModel):
    import onnx

    m = lm.ir
    proto = onnx.ModelProto(ir_version=m.ir_version, producer_name=m.producer_name or "",
                            producer_version=m.producer_version or "",
                            domain=m.domain or "", model_version=m.model_version or 0)
    for domain, version in m.opset_imports.items():
        proto.opset_import.add(domain=domain, version=version)
    for f in m.functions.values():
        ir.serde.serialize_function_into(proto.functions.add(), f)
    # Stored node order (not topological): the checker reports an unsorted graph.
    _skeleton_graph(m.graph, proto.graph, {}, {}, top=True)
    # The checker resolves external files against the working directory, not the model's
    # folder: small external tensors kept in the skeleton become typed inputs too (the files
    # get their own checks).
    return _without_external(proto)


def _without_external(proto):
    import onnx

    keep, moved = [], []
    for t in proto.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            moved.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    if proto.ir_version < 4:
        return proto
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(keep)
    proto.graph.input.extend(moved)
    return proto


def _value_shapes(lm: LabModel, dims: dict, shapes: dict) -> list[dict]:
    # With every input dim concrete (placeholders where not given), whatever shape
    # inference still cannot resolve depends on values, not on shapes.
    placeholders = {d: 2 for d in dynamic_dims(lm) if d != "?"}
    types = lm.types({**placeholders, **dims}, shapes)
    rows = []
    for nid, e in lm.index.entries.items():
        n = e.node
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type in _VALUE_SHAPED:
            rows.append(_row("warning", "value_dependent_shape", nid,
                             f"{n.op_type} output shape depends on {_VALUE_SHAPED[n.op_type]} "
                             "(not known before running).",
                             "Static-shape runtimes (TensorRT, CoreML, NPUs) need a fixed upper "
                             "bound or a rewrite (mask instead of select)."))
        elif n.op_type in _SHAPE_INPUTS:
            i, what = _SHAPE_INPUTS[n.op_type]
            v = n.inputs[i] if len(n.inputs) > i else None
            out = value_type(lm, n.outputs[0], types) if n.outputs else None
            # Computed shapes that inference still resolves (to ints or named dims, e.g.
            # [batch, seq, 12, 64] in transformer exports) are not a problem.
            inferred = out is not None and out.shape is not None and all(
                d is not None for d in out.shape)
            if v is not None and not is_constant(v) and (n.op_type == "TopK" or not inferred):
                sev = "warning" if n.op_type == "TopK" else "info"
                rows.append(_row(sev, "value_dependent_shape", nid,
                                 f"{n.op_type} takes its {what} from a computed tensor "
                                 f"{v.name!r}: the output shape depends on values.",
                                 "Fold it to a constant (lab.apply('fold_constants') after "
                                 "lab.fix_dims) if it only depends on shapes."))
    return rows


def _op_contracts(lm: LabModel, dims: dict, shapes: dict) -> list[dict]:
    """Shape contracts of opset-23 ops that ONNX shape inference does not check and
    onnxruntime refuses at run time: RotaryEmbedding's cos/sin cache without position ids
    is [batch, sequence, rotary/2] of its input's batch and sequence (torch 2.13's dynamo
    export at opset 23 writes a batch of 1: it runs at batch 1 only), Attention's query
    heads are a multiple of its key/value heads and its mask's last dim is the key/value
    length, RMSNormalization's scale broadcasts to the normalized dims."""
    given = {d for d in dynamic_dims(lm) if d != "?"} - set(dims)
    placeholders = {d: 2 for d in given}
    types = lm.types({**placeholders, **dims}, shapes)
    at = (f" at the placeholder dims {', '.join(f'{d}=2' for d in sorted(given))} (give "
          "dims= to check yours)") if given else ""
    rows = []

    def shape(v: ir.Value | None) -> tuple | None:
        if v is None or not v.name:
            return None
        t = value_type(lm, v, types)
        return tuple(t.shape) if t is not None and t.shape is not None else None

    def ints(*ds: Any) -> bool:
        return all(isinstance(d, int) for d in ds)

    for nid, e in lm.index.entries.items():
        n = e.node
        if n.domain not in ("", "ai.onnx"):
            continue
        why = None
        if n.op_type == "RotaryEmbedding" and len(n.inputs) >= 3 and (
                len(n.inputs) < 4 or n.inputs[3] is None or not n.inputs[3].name):
            x, cos = shape(n.inputs[0]), shape(n.inputs[1])
            if x is not None and cos is not None and len(cos) == 3 and len(x) in (3, 4):
                seq = x[2] if len(x) == 4 else x[1]
                if ints(x[0], cos[0]) and x[0] != cos[0]:
                    why = (f"its cos/sin cache {n.inputs[1].name!r} has batch {cos[0]} while "
                           f"its input has {x[0]}")
                elif ints(seq, cos[1]) and seq != cos[1]:
                    why = (f"its cos/sin cache {n.inputs[1].name!r} has sequence {cos[1]} "
                           f"while its input has {seq}")
        elif n.op_type == "Attention" and len(n.inputs) >= 3:
            q, k = shape(n.inputs[0]), shape(n.inputs[1])
            if q is not None and k is not None and len(q) == len(k) == 4:
                qh, kh = q[1], k[1]
            else:
                qh = n.attributes.get_int("q_num_heads", 0)
                kh = n.attributes.get_int("kv_num_heads", 0)
            if ints(qh, kh) and qh and kh and qh % kh:
                why = f"its {qh} query heads are not a multiple of its {kh} key/value heads"
            mask = shape(n.inputs[3]) if len(n.inputs) > 3 else None
            past = shape(n.inputs[4]) if len(n.inputs) > 4 else None
            if why is None and mask and k is not None and len(k) in (3, 4):
                kv = k[2] if len(k) == 4 else k[1]
                total = kv + past[2] if past is not None and len(past) == 4 and \
                    ints(kv, past[2]) else (kv if past is None else None)
                if ints(mask[-1], total) and mask[-1] != total:
                    why = (f"its mask {n.inputs[3].name!r} ends in {mask[-1]} while the "
                           f"key/value length is {total}")
        elif n.op_type == "RMSNormalization" and len(n.inputs) >= 2:
            x, sc = shape(n.inputs[0]), shape(n.inputs[1])
            axis = n.attributes.get_int("axis", -1)
            if x is not None and sc is not None and x:
                norm = x[axis % len(x):]
                if len(sc) > len(norm) or any(
                        ints(a, b) and a != 1 and a != b
                        for a, b in zip(reversed(sc), reversed(norm))):
                    why = (f"its scale {n.inputs[1].name!r} of shape {list(sc)} does not "
                           f"broadcast to the normalized dims {list(norm)}")
        if why:
            rows.append(_row("warning" if given else "error", "op_contract", nid,
                             f"{n.op_type} {nid!r}: {why}{at}: onnxruntime refuses it when "
                             "it runs.",
                             "Re-export with shapes that agree (torch's opset-23 RotaryEmbedding"
                             ": a cos/sin cache per batch, or position ids), or fix the dims "
                             "(lab.fix_dims) to the ones it runs at."))
    return rows


def _domains(lm: LabModel) -> list[dict]:
    funcs = {(f.domain, f.name) for f in lm.ir.functions.values()}
    rows = []
    for op, ids in _ort_only_ops(lm).items():
        count = f" ({len(ids)} nodes)" if len(ids) > 1 else ""
        rows.append(_row("warning", "onnxruntime_op", ids[0],
                         f"{op} is not an ONNX op; onnxruntime registers it in the default "
                         f"domain{count}: onnxruntime only.",
                         "Keep onnxruntime as the runtime; for another one, re-export with "
                         "standard ops (e.g. RMSNorm as Pow/ReduceMean/Sqrt/Div/Mul)."))
    try:
        registered = ort_registered_ops()
    except (ImportError, AttributeError):
        registered = {}
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for nid, e in lm.index.entries.items():
        n = e.node
        if n.domain not in _STANDARD_DOMAINS:
            seen[(n.domain, n.op_type)].append(nid)
    for (domain, op), ids in seen.items():
        count = f" ({len(ids)} nodes)" if len(ids) > 1 else ""
        if (domain, op) in funcs:
            rows.append(_row("info", "model_local_function", ids[0],
                             f"{domain}::{op} is a function defined in the model{count}.",
                             "Runtimes inline it; nothing to do unless a tool rejects "
                             "functions (onnx.inliner.inline_local_functions)."))
        elif domain.startswith("com.microsoft") and (not registered
                                                     or (domain, op) in registered):
            rows.append(_row("warning", "custom_domain", ids[0],
                             f"{domain}::{op} is an onnxruntime contrib op{count}: onnxruntime "
                             "only (other runtimes cannot run it).",
                             "Keep onnxruntime as the runtime, or export without ORT fusions "
                             "(opt_level='basic' or the original export)."))
        elif domain.startswith("com.microsoft"):
            rows.append(_row("warning", "custom_domain", ids[0],
                             f"{domain}::{op}{count} is in onnxruntime's domain, but onnxruntime "
                             f"{ort_version()} registers no such op.",
                             "Check the op name, or use the onnxruntime version (or build) the "
                             "model was made for."))
        else:
            rows.append(_row("warning", "custom_domain", ids[0],
                             f"{domain}::{op} is a custom op{count}: it needs a custom op "
                             "library in every runtime.",
                             "Register the library (SessionOptions.register_custom_ops_library)"
                             " or replace the op with standard ONNX ops."))
    return rows


def _opsets(lm: LabModel) -> list[dict]:
    try:
        maxes = ort_max_opsets()
    except (ImportError, AttributeError) as e:  # an unusual onnxruntime build
        logger.info("cannot read onnxruntime's opsets: %s", e)
        return []

    rows = []
    for domain, version in lm.ir.opset_imports.items():
        key = domain or ""
        if key not in maxes and key not in _STANDARD_DOMAINS:
            continue
        top = maxes.get(key, maxes.get("", 0))
        if version > top:
            rows.append(_row("error", "opset_unsupported", None,
                             f"Opset {version} of domain {domain or 'ai.onnx'!r} is above what "
                             f"onnxruntime {ort_version()} supports ({top}).",
                             f"Convert it down: lab.convert_opset({top}), or upgrade "
                             "onnxruntime."))
    return rows


def _input_symbols(lm: LabModel) -> set[str]:
    """The symbolic dims of the main graph's inputs (``batch``, ``seq``)."""
    return {d for v in lm.ir.graph.inputs for d in shape_tuple(v.shape) or ()
            if isinstance(d, str)}


def _declared_fixed(lm: LabModel) -> list[dict]:
    """Intermediates and outputs whose declared shape (value_info) fixes a dim that the
    inputs leave free: the inference from the inputs and weights alone gives a symbol of
    the model's own (``batch``) where the file says a number. onnxruntime's optimizer
    trusts the declaration (a Shape of it becomes a constant), so the model fails at other
    sizes; with its optimizations off it runs."""
    symbols = _input_symbols(lm)
    if not symbols:
        return []  # no dim the inputs leave free (and no second inference to pay)
    types = lm.types(declared=False)
    if types is lm.types():
        return []  # nothing declared that inference might not give
    found: list[tuple[str, tuple, tuple]] = []
    for g in lm.index.graphs.values():
        for node in g:
            for v in node.outputs:
                said = shape_tuple(v.shape) if v.const_value is None else None
                if not v.name or said is None or not any(isinstance(d, int) for d in said):
                    continue
                info = value_type(lm, v, types)
                free = info.shape if info is not None else None
                if free is None or len(free) != len(said):
                    continue
                if any(isinstance(a, int) and isinstance(b, str) and b in symbols
                       for a, b in zip(said, free)):
                    found.append((v.name, said, free))
    if not found:
        return []
    name, said, free = found[0]
    shown = ", ".join(repr(n) for n, _, _ in found[:5]) + (" ..." if len(found) > 5 else "")
    return [_row("warning", "stale_value_info", None,
                 f"The declared shape (value_info) of {len(found)} tensor(s) fixes dims the "
                 f"model's inputs leave free ({shown}): {name!r} is declared "
                 f"{_shape_text(said)}, the inputs give {_shape_text(free)}. onnxruntime's "
                 "optimizer folds declared shapes in (a Shape of such a tensor becomes a "
                 "constant), so at other sizes the model fails or computes other shapes "
                 "(not with graph_optimization_level ORT_DISABLE_ALL); onnx_lab's passes use "
                 "only the shapes the inputs give.",
                 "Re-export, or drop the stale value_info before saving (onnx: "
                 "del model.graph.value_info[:]; onnx.shape_inference.infer_shapes "
                 "writes it again from the inputs).")]


#: Ops whose inputs broadcast against each other (numpy rules, aligned from the right).
_BROADCAST_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "Equal",
    "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "PRelu",
    "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


def _baked_dims(lm: LabModel) -> list[dict]:
    """Input dims the graph fixes after all: a node broadcasts a free dim (``seq``) against a
    fixed size (a TorchScript export traced at length 8 keeps ``torch.arange(8)`` as a
    constant), or a Reshape makes a tensor of free dims a fixed shape. onnxruntime then runs
    the model at that one size only (or 1, where it broadcasts), whatever the input declares.
    Dims the model determines by design (:func:`~onnx_lab.core.derived.derived_dims`: a KV
    cache's head size) are not reported."""
    symbols = _input_symbols(lm)
    if not symbols:
        return []
    symbols -= set(derived_dims(lm))
    if not symbols:
        return []
    types = lm.types(declared=False)
    idx = lm.index
    found: dict[str, tuple[str, str, int | None, tuple, tuple]] = {}
    for nid in idx.topo_order(""):
        node = idx.entries[nid].node
        if node.domain not in ("", "ai.onnx") or not node.outputs:
            continue
        if node.op_type not in _BROADCAST_OPS and node.op_type != "Reshape":
            continue
        info = value_type(lm, node.outputs[0], types)
        out = info.shape if info is not None else None
        if not out:
            continue
        ins = node.inputs[:1] if node.op_type == "Reshape" else node.inputs
        for v in ins:
            t = value_type(lm, v, types) if v is not None else None
            shape = t.shape if t is not None else None
            if not shape or len(shape) > len(out):
                continue
            if node.op_type == "Reshape":
                free = [d for d in shape if isinstance(d, str) and d in symbols]
                if free and all(isinstance(d, int) for d in out):
                    for d in free:
                        found.setdefault(d, (nid, v.name, None, shape, out))
                continue
            for d, o in zip(shape, out[len(out) - len(shape):]):
                if isinstance(d, str) and d in symbols and isinstance(o, int) and o > 1:
                    found.setdefault(d, (nid, v.name, o, shape, out))
    rows = []
    for dim, (nid, tensor, size, shape, out) in found.items():
        if size is not None:
            how = (f"node {nid!r} ({idx.node(nid).op_type}) broadcasts {tensor!r} "
                   f"{_shape_text(shape)} to {_shape_text(out)}: the model runs only at "
                   f"{dim!r} = {size} (or 1)")
            feed = f"{{{dim!r}: {size}}}"
        else:
            how = (f"the Reshape {nid!r} makes {tensor!r} {_shape_text(shape)} the fixed shape "
                   f"{_shape_text(out)}: the model runs only where {dim!r} gives that many "
                   "elements")
            feed = None
        rows.append(_row(
            "warning", "baked_dim", nid,
            f"Input dim {dim!r} is declared free, but {how}. A TorchScript export traced at "
            "one size keeps sizes computed from Python ints (torch.arange(n), a view with a "
            "constant) as constants.",
            (f"Pass dims={feed}, the one size it runs at; or re-export" if feed else
             "Re-export") + " with the size taken from the input (x.shape[1]) or with "
            "torch.onnx.export(..., dynamo=True), which refuses a dynamic dim the code "
            "fixes."))
    return rows


def _shape_text(shape: tuple) -> str:
    """``shape`` as text: named dims quoted, an unknown dim as ``?`` (as the tables show it)."""
    return "[" + ", ".join(repr(d) if isinstance(d, str) else "?" if d is None else str(d)
                           for d in shape) + "]"


def _dynamic(lm: LabModel, dims: Mapping[str, int] | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None) -> list[dict]:
    derived = derived_dims(lm, dims)
    sums = length_sums(lm)
    rows = []
    for dim, inputs in dynamic_dims(lm).items():
        name = "unnamed dims" if dim == "?" else f"dim {dim!r}"
        example = f"{{{dim!r}: 1}}" if dim != "?" else "{...}"  # repr: a name is hostile
        if dims and dim in dims:  # the Lab was given it: nothing to pass
            rows.append(_row("info", "dynamic_dim", None,
                             f"Dynamic {name} in input(s) {', '.join(inputs)}: {dims[dim]} "
                             "here (the dims given).",
                             f"Nothing to pass; static-shape runtimes need "
                             f"lab.fix_dims({{{dim!r}: {dims[dim]}}})."))
            continue
        if shapes and all(n in shapes for n in inputs):  # the Lab was given their shapes
            sizes = ", ".join(f"{n} {list(shapes[n])}" for n in inputs)
            rows.append(_row("info", "dynamic_dim", None,
                             f"Dynamic {name} in input(s) {', '.join(inputs)}: {sizes} here "
                             "(the shapes given).",
                             "Nothing to pass; static-shape runtimes need lab.set_input_shape("
                             f"{inputs[0]!r}, {list(shapes[inputs[0]])})"
                             + (" and the same for the others." if len(inputs) > 1 else ".")))
            continue
        if dim in derived and dim in sums:  # a decoder's total length, from the dims given
            d = derived[dim]
            parts = {n: dims[n] for n in sums[dim].split(" + ") if dims and n in dims}
            rows.append(_row("info", "dynamic_dim", None,
                             f"Dynamic {name} in input(s) {', '.join(inputs)}: {d.value} here "
                             f"({sums[dim]}).",
                             "Nothing to pass (it is filled in); static-shape runtimes need "
                             f"lab.fix_dims({parts!r}), which fixes it too."))
            continue
        if dim in derived:
            d = derived[dim]
            rows.append(_row("info", "dynamic_dim", None,
                             f"Dynamic {name} in input(s) {', '.join(inputs)}: the model "
                             f"determines it ({d.value}, {d.source}).",
                             f"Nothing to pass (it is filled in); static-shape runtimes need "
                             f"lab.fix_dims({{{dim!r}: {d.value}}})."))
            continue
        if dim in sums:
            rows.append(_row("info", "dynamic_dim", None,
                             f"Dynamic {name} in input(s) {', '.join(inputs)}: {sums[dim]}, "
                             "filled in once those are given.",
                             "Pass the past and new lengths (0 past tokens for a prefill)."))
            continue
        if dim == "?":  # no name to give a size to: whole shapes, and set_input_shape
            first = inputs[0]
            rows.append(_row("info", "dynamic_dim", None,
                             f"Dynamic {name} in input(s) {', '.join(inputs)}.",
                             f"Pass shapes={{{first!r}: [...]}} to analyse and run it; "
                             "static-shape runtimes need the whole shape set: "
                             f"lab.set_input_shape({first!r}, [...])."))
            continue
        rows.append(_row("info", "dynamic_dim", None,
                         f"Dynamic {name} in input(s) {', '.join(inputs)}.",
                         f"Pass dims={example} / shapes= to analyse and run it; static-shape "
                         f"runtimes need lab.fix_dims({example})."))
    return rows


def _kv_cache(lm: LabModel) -> list[dict]:
    """A decoder whose past_key_values.* inputs and present.* outputs cannot be paired: it
    runs once, but a generation loop cannot feed its cache back."""
    try:
        decoder_io(lm)
    except CacheError as e:
        return [_row("warning", "kv_cache_pairing", None, e.problem, e.fix or "")]
    return []


def _initializer_inputs(lm: LabModel) -> list[dict]:
    # From IR 4 on, an initializer also listed as a graph input is a default the caller may
    # override, so neither onnx_lab's passes nor onnxruntime fold or fuse what reads it
    # (IR < 4 required the listing, and those count as constants).
    if (lm.ir.ir_version or 0) < 4:
        return []
    graph = lm.graph
    names = [v.name for v in graph.inputs if v.name in graph.initializers]
    if not names:
        return []
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return [_row("warning", "initializer_input", None,
                 f"{len(names)} initializer(s) are also graph inputs ({shown}): they can be "
                 "overridden at run time, so optimizers (onnx_lab's passes, onnxruntime) do not "
                 "fold or fuse the nodes that read them.",
                 "lab.apply('remove_initializer_inputs') makes them plain weights (or "
                 "re-export with torch.onnx.export(..., keep_initializers_as_inputs=False)).")]


def _unread_inputs(lm: LabModel) -> list[dict]:
    """Graph inputs no node reads (in any graph): onnxruntime still asks for each at run time
    (a session refuses to run without them; tf2onnx leaves a Keras Normalization layer's mean
    and variance so)."""
    g = lm.graph
    # (an input that is also a graph output passes through: it is read)
    names = [v.name for v in g.inputs if v.name not in g.initializers and not v.uses()
             and not v.is_graph_output()]
    read = [v.name for v in g.inputs if v.name not in g.initializers and v.uses()]
    if not names:
        return []
    shown = ", ".join(map(repr, names[:5])) + (f" and {len(names) - 5} more"
                                              if len(names) > 5 else "")
    outputs = [v.name for v in g.outputs]
    call = (f"lab.extract(inputs={read!r}, outputs={outputs!r})"
            if len(read) + len(outputs) <= 12 and sum(map(len, read + outputs)) <= 600 else
            "lab.extract(inputs=[the other inputs], outputs=[the outputs])")
    return [_row("warning", "unread_input", None,
                 f"{len(names)} graph input(s) are read by no node ({shown}): onnxruntime still "
                 "requires a value for each at run time.",
                 f"{call} gives the model without them (or feed any value of their shape)."
                 if read else
                 "Feed any value of their shape; the outputs do not depend on them.")]


def _external(lm: LabModel) -> list[dict]:
    tensors = lm.external_tensors()
    if not tensors:
        return []
    files: dict[str, list[ir.ExternalTensor]] = defaultdict(list)
    for t in tensors:
        files[t.location].append(t)
    rows = []
    for loc, ts in files.items():
        base = Path(ts[0].base_dir) if ts[0].base_dir else (lm.base_dir or Path("."))
        path = base / loc
        need = max((t.offset or 0) + (t.length or t.nbytes) for t in ts)
        total = sum(t.nbytes for t in ts)
        if not path.is_file():
            rows.append(_row("error", "external_data_missing", None,
                             f"External data file {str(path)!r} ({len(ts)} tensors) is missing.",
                             "Put the data file next to the model (same relative path) or "
                             "re-save the model with its weights."))
            continue
        size = path.stat().st_size
        if size < need:
            rows.append(_row("error", "external_data_missing", None,
                             f"External data file {str(path)!r} is {size:,} bytes; its tensors "
                             f"need {need:,}.", "The file is truncated: copy it again."))
        else:
            rows.append(_row("info", "external_data", None,
                             f"External data file {loc!r}: {len(ts)} tensors, {total:,} bytes "
                             f"of weights (file {size:,} bytes).",
                             "Ship the file with the model; keep the relative path."))
    return rows


# Inputs whose values ONNX's shape inference reads, which onnxruntime runs when it loads a
# file: an initializer there stored in an external data file stops the load ("Cannot parse
# data from external tensors. Please load external data into raw data"), whatever its size.
# (A torch.onnx dynamo export saved with onnx.save(..., size_threshold=0) held a ReduceMean's
# axes there: onnx_lab ran it from memory, every onnxruntime session of the file refused it.)
_REDUCES = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
_VALUE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,), "Pad": (1, 2, 3),
    "Resize": (1, 2, 3), "Upsample": (1,), "Split": (1,), "TopK": (1,), "OneHot": (1,),
    "CenterCropPad": (1,), "Col2Im": (1, 2), "MaxUnpool": (2,), **{r: (1,) for r in _REDUCES}}


def _external_value_inputs(lm: LabModel) -> list[dict]:
    """Initializers in an external data file that a node's shape inference reads: the file
    does not load in onnxruntime (its load-time inference cannot read external data there)."""
    if not lm.external_tensors():
        return []
    found: list[tuple[str, str, str, int]] = []  # (node id, op, tensor, input index)
    for nid, e in lm.index.entries.items():
        node = e.node
        idx = _VALUE_INPUTS.get(node.op_type)
        if idx is None or node.domain not in ("", "ai.onnx"):
            continue
        for i in idx:
            v = node.inputs[i] if i < len(node.inputs) else None
            if v is not None and isinstance(v.const_value, ir.ExternalTensor):
                found.append((nid, node.op_type, v.name, i))
    if not found:
        return []
    nid, op, name, i = found[0]
    loc = lm.ir.graph.initializers[name].const_value.location \
        if name in lm.ir.graph.initializers else "its data file"
    more = f" ({len(found)} such inputs)" if len(found) > 1 else ""
    return [_row("error", "external_value_input", nid,
                 f"onnxruntime does not load this file: {op} {nid!r} reads {name!r} (its input "
                 f"{i}) to work out its output's shape, and that tensor is stored in the "
                 f"external data file {str(loc)!r}, which onnxruntime's load-time shape "
                 f"inference cannot read ('Cannot parse data from external tensors'){more}. "
                 "onnx_lab runs the model from memory, so its own runs are not affected.",
                 "Save the model again with lab.save(path): onnx_lab keeps tensors up to 4 KiB "
                 "inline (with onnx.save: save_as_external_data=True, size_threshold=1024 or "
                 "more).")]


def _precision(lm: LabModel) -> list[dict]:
    counts: Counter[str] = Counter()
    for g in lm.ir.graphs():
        for v in g.initializers.values():
            dt = v.dtype or (v.const_value.dtype if v.const_value is not None else None)
            if dt in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
                counts[dt.name.lower()] += 1
        for n in g:
            for v in n.outputs:
                if v.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
                    counts[v.dtype.name.lower()] += 1
        for v in g.inputs:
            if v.dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
                counts[v.dtype.name.lower()] += 1
    rows = []
    if counts.get("float16"):
        rows.append(_row("info", "low_precision", None,
                         f"{counts['float16']} tensors are float16.",
                         "float16 is fast on GPUs; on CPU many ops are missing or slow — "
                         "compare with onnx_lab.compare before deploying."))
    if counts.get("bfloat16"):
        rows.append(_row("warning", "low_precision", None,
                         f"{counts['bfloat16']} tensors are bfloat16.",
                         "Few CPU kernels support bfloat16; check the provider loads below or "
                         "convert to float32/float16."))
    return rows


def _runtime_constants(lm: LabModel) -> list[dict]:
    found = constant_computed(lm)
    if not found:
        return []

    total = sum(t["nbytes"] for t in found)
    ops = Counter(t["op_type"] for t in found)
    shown = ", ".join(f"{op}×{n}" for op, n in ops.most_common(4))
    return [_row("warning", "runtime_constants", found[0]["node_id"],
                 f"{len(found)} tensors ({format_bytes(total)}, {total:,} bytes) are computed "
                 f"from constants only, at every run ({shown}); onnxruntime does not fold all "
                 "of them (never ConstantOfShape), which can make the model several times "
                 "slower, and they are not counted as weights.",
                 f"lab.apply('fold_constants', max_growth_bytes={max(2 * total, 16 << 20):_}) "
                 "stores them as initializers (twice their bytes: smaller constants fold too; the "
                 "default refuses folds that grow the model "
                 "by more than 16 MB, and the safe preset keeps it).")]


def _proto_size(lm: LabModel) -> list[dict]:
    inline = 0
    for g in lm.ir.graphs():
        for v in g.initializers.values():
            t = v.const_value
            if t is not None and not isinstance(t, ir.ExternalTensor):
                inline += t.nbytes
    if inline >= _PROTO_LIMIT:
        return [_row("error", "proto_size", None,
                     f"{inline:,} bytes of weights are stored inside the model: over protobuf's "
                     "2 GB limit, it cannot be saved as one file.",
                     "lab.save(path, external_data=True) writes the weights to a .data file.")]
    if inline >= _PROTO_WARN:
        return [_row("warning", "proto_size", None,
                     f"{inline:,} bytes of weights are stored inside the model, close to "
                     "protobuf's 2 GB limit.",
                     "Save with external data (lab.save(path, external_data=True)) before it "
                     "grows.")]
    return []


_NO_KERNEL = re.compile(r"implementation for (\w+)\((\d+)\) node with name '([^']*)'")
_NO_OP_TAIL = ") is not a registered function/op"

# a model file of an IR version newer than the reader: onnx's checker and onnxruntime's words
_IR_TOO_NEW_CHECKER = re.compile(r"ir_version (\d+) is higher than the checker's")
_IR_TOO_NEW_ORT = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: "
                             r"(\d+)")


def _ir_version_fix(version: int | None, top: int, reader: str) -> str:
    """The fix for a file whose IR version (the file format's, not an opset) ``reader``
    does not read: no op conversion changes it."""
    return (f"The file says IR version {version}; this {reader} reads up to {top}. Upgrade "
            f"{reader} (pip install -U {reader}), or, if the exporter wrote a higher number "
            f"than the file needs, write the model again with ir_version {top} (onnx: "
            f"m = onnx.load(path); m.ir_version = {top}; onnx.save(m, new_path)) and check "
            "that copy.")


def _inference_node(text: str) -> str | None:
    """The node an ONNX inference error names (``... Node (name) ...``), found with str.find:
    onnxruntime and onnx repeat tensor and node names, which a model controls, so no regex
    with an unbounded repeat runs over this text (``Node \\(([^)]*)\\)`` is quadratic in a
    name full of ``Node (``)."""
    i = text.find("Node (")
    j = text.find(")", i + 6) if i >= 0 else -1
    if j >= 0:
        return text[i + 6:j]
    # "(op_type:Constant, node name: /model/constants/[1]): ..." (a name may hold brackets)
    i = text.find("node name: ")
    j = text.find("): ", i + 11) if i >= 0 else -1
    return text[i + 11:j] if j >= 0 else None


def _unregistered_op(text: str) -> tuple[str, str, str] | None:
    """(domain, op, version) of onnxruntime's ``dom.ain:Op(7) is not a registered
    function/op``, parsed backwards from the fixed tail in linear time. (The regex this
    replaces, ``([\\w.]+):(\\w+)\\((-?\\d+)\\) is not...``, retried every start position in a
    long name: 27 s for a 64k-character tensor name.)"""
    end = text.find(_NO_OP_TAIL)
    if end < 0:
        return None
    head, paren, version = text[:end].rpartition("(")
    digits = version[1:] if version.startswith("-") else version
    if not paren or not digits.isdigit() or not digits.isascii():
        return None
    rest, colon, op = head.rpartition(":")
    if not colon or not op or not all(c.isalnum() or c == "_" for c in op):
        return None
    i = len(rest)
    while i > 0 and (rest[i - 1].isalnum() or rest[i - 1] in "._"):
        i -= 1
    domain = rest[i:]
    return (domain, op, version) if domain else None


def _loads(lm: LabModel, providers) -> list[dict]:
    provs = default_providers()[0] if providers is None else resolve_providers(providers)
    # A session load costs about as much as a run's setup (~2 s on BERT-base): its outcome is
    # kept per provider on the (immutable) LabModel, so a Lab version is loaded once.
    cache: dict[str, list[dict]] = lm.cached(("compat", "loads"), dict)
    rows = []
    for p in provs:
        if p not in cache:
            cache[p] = _load_rows(lm, p)
        rows += [dict(r) for r in cache[p]]
    return rows


def _load_rows(lm: LabModel, p: str) -> list[dict]:
    rows = []
    # Whether a provider has a kernel for every node does not depend on the weights' values:
    # load the weight-free skeleton first (~0.1 s instead of ~2 s on BERT-base, where the
    # weights are serialized and copied). Only when that fails is the model loaded with its
    # weights, so a reported failure is always the real model's (a kernel that insists on a
    # constant weight only costs the full load).
    try:
        skeleton = LabModel(ir.serde.deserialize_model(_skeleton(lm)))
        make_session(skeleton, providers=fallback_chain(p), opt_level="disable")
        return rows
    except Exception as e:  # noqa: BLE001 - any failure: decided by the full load below
        logger.debug("skeleton load on %s failed (%s); loading the model itself", p, e)
    try:
        make_session(lm, providers=fallback_chain(p), opt_level="disable")
    except RuntimeLoadError as e:
        text = str(e.__cause__ or e)
        m = _NO_KERNEL.search(text)
        node_id = None
        if m:
            node_id = m.group(3) if m.group(3) in lm.index.entries else None
            if node_id is None and not m.group(3):
                # an unnamed node (onnxruntime says ''): the id onnx_lab gives it everywhere
                node_id = next((nid for nid, en in lm.index.entries.items()
                                if en.node.op_type == m.group(1) and not en.node.name
                                and not en.graph), None)
            msg = (f"{p} has no kernel for {m.group(1)} (opset {m.group(2)}) at node "
                   f"{node_id or m.group(3)!r}: the model does not load.")
        elif (found := _unregistered_op(text)) is not None:
            domain, op = found[0], found[1]
            node_id = next((nid for nid, en in lm.index.entries.items()
                            if en.node.op_type == op and en.node.domain == domain), None)
            msg = (f"{p} does not know the op {domain}::{op}: the model does not load.")
        elif (missing := missing_locale(text, lm)) is not None:
            node_id, locale, fix = missing
            rows.append(_row("error", "provider_load", node_id,
                             f"{p} cannot load the model: this machine has no locale "
                             f"{locale!r}, which StringNormalizer {node_id!r} needs.", fix))
            return rows
        else:
            msg = f"{p} cannot load the model: {e.problem}"
        ir_max = _IR_TOO_NEW_ORT.search(text)
        rows.append(_row("error", "provider_load", node_id, msg,
                         _ir_version_fix(lm.ir.ir_version, int(ir_max.group(2)), "onnxruntime")
                         if ir_max else
                         "Replace or convert the op (lab.convert_opset, a decomposition), "
                         "or use a provider/onnxruntime build that has it."))
    return rows
