"""Candidates made easy: fp16 and int8 (dynamic, static QDQ) versions of a model.

Thin wrappers over onnxruntime's tools (``onnxruntime.transformers.float16`` and
``onnxruntime.quantization``): they work on files or ModelProtos with weights in memory, so the
model is materialised once; the result is a new in-memory :class:`~onnx_lab.lab.Lab` with the
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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.source import resolve
from onnx_lab.errors import InputError, PassError
from onnx_lab.runtime.feeds import as_feed_list, make_feeds

logger = logging.getLogger(__name__)

__all__ = ["fp16_model", "int8_dynamic_model", "int8_static_model"]

_PROTO_LIMIT = 2_000_000_000


def _full_proto(model: LabModel) -> onnx.ModelProto:
    """A ModelProto with every weight in memory (the ORT tools cannot read lazy references)."""
    proto = model.to_proto()
    if model.has_external_data and model.base_dir is not None:
        onnx.load_external_data_for_model(proto, str(model.base_dir))
    return proto


def _model_from(proto: onnx.ModelProto) -> LabModel:
    return LabModel(ir.serde.deserialize_model(proto))


def _save(proto: onnx.ModelProto, path: Path) -> None:
    if proto.ByteSize() > _PROTO_LIMIT:
        onnx.save(proto, str(path), save_as_external_data=True, location=path.name + ".data")
    else:
        onnx.save(proto, str(path))


def _node_names(model: LabModel, ids: Iterable[str] | None, what: str) -> list[str]:
    """ONNX node names of node ids (ids are names when names are unique)."""
    out = []
    for nid in ids or ():
        node = model.index.node(nid)  # UnknownNameError with close matches
        if not node.name:
            raise InputError(f"{what}: node {nid!r} has no name, which the quantizer needs.",
                             fix="Give the node a name, or exclude by op type.")
        out.append(node.name)
    return out


def fp16_model(source: Any, keep_io_types: bool = True,
               block_list: Sequence[str] | None = None) -> LabModel:
    """A float16 copy of the model (onnxruntime.transformers.float16); ``onnx_lab.to_fp16``
    wraps it in a Lab.

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        keep_io_types: keep float32 inputs/outputs (Casts inserted), so the fp16 model takes the
            same feeds as the original.
        block_list: op types (``"Softmax"``) and/or node ids kept in float32.

    Example:
        >>> half = fp16_model("sample:convnet", block_list=["Softmax"])
    """
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = resolve(source)[0]
    ops = {e.node.op_type for e in model.index.entries.values()}
    op_block, node_block = [], []
    for item in block_list or ():
        if item in model.index.entries:
            node_block.extend(_node_names(model, [item], "to_fp16 block_list"))
        elif item in ops:
            op_block.append(item)
        else:
            from onnx_lab.errors import unknown_name

            raise unknown_name("node id or op type", item, list(model.index.entries) + sorted(ops))
    proto = _full_proto(model)
    try:
        half = convert_float_to_float16(
            proto, keep_io_types=keep_io_types, disable_shape_infer=False,
            op_block_list=list(DEFAULT_OP_BLOCK_LIST) + op_block,
            node_block_list=node_block or None)
    except Exception as e:  # noqa: BLE001 - the converter raises assorted errors
        raise PassError(f"fp16 conversion failed: {e}",
                        fix="Add the failing op types to block_list.") from e
    return _model_from(half)


def _quantize(model: LabModel, fn, **kw) -> LabModel:
    with tempfile.TemporaryDirectory(prefix="onnx_lab_q_") as tmp:
        src, dst = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
        _save(_full_proto(model), src)
        try:
            fn(str(src), str(dst), **kw)
        except Exception as e:  # noqa: BLE001 - the quantizer raises assorted errors
            msg = str(e).strip()
            computed = re.search(r"Expected (\S+) to be an initializer", msg)
            if computed:
                # Old exports compute weights with nodes (ConstantOfShape...): the quantizer
                # only reads initializers.
                fix = (f"Weight {computed.group(1)!r} is computed by a node, not stored: fold "
                       "constants first (lab.apply('fold_constants') or "
                       "lab.apply_preset('safe')), then quantize the result.")
            else:
                fix = "Exclude the failing nodes (nodes_to_exclude=[...])."
            raise PassError(f"quantization failed: {msg[:400]}", fix=fix) from e
        return _model_from(onnx.load(str(dst)))


def int8_dynamic_model(source: Any, nodes_to_exclude: Sequence[str] | None = None) -> LabModel:
    """Dynamic int8 quantization (weights int8, activations quantized at run time);
    ``onnx_lab.to_int8_dynamic`` wraps it in a Lab.

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        nodes_to_exclude: node ids kept in float.

    Example:
        >>> q = int8_dynamic_model("sample:transformer_block")
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = resolve(source)[0]
    return _quantize(model, quantize_dynamic, weight_type=QuantType.QInt8,
                     nodes_to_exclude=_node_names(model, nodes_to_exclude, "nodes_to_exclude"))


def int8_static_model(source: Any, feeds: Any = None, n: int = 8,
                      nodes_to_exclude: Sequence[str] | None = None) -> LabModel:
    """Static int8 quantization in QDQ format, calibrated on ``feeds`` (or ``n`` seeded
    samples); ``onnx_lab.to_int8_static`` wraps it in a Lab.

    Args:
        source: a Lab, LabModel or anything ``onnx_lab.open`` takes (its dims and shapes
            shape the generated samples).
        feeds: calibration inputs (dict, list of dicts or ``.npz``); default ``n`` seeded
            samples from :func:`~onnx_lab.runtime.feeds.make_feeds`.
        n: number of generated calibration samples.
        nodes_to_exclude: node ids kept in float.

    Example:
        >>> q = int8_static_model("sample:convnet", n=4)
    """
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    model, dims, shapes = resolve(source)
    if feeds is None:
        samples = make_feeds(model, dims, shapes, n=n)
        samples = samples if isinstance(samples, list) else [samples]
    else:
        samples = as_feed_list(feeds, model, dims, shapes)

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(samples)

        def get_next(self):
            return next(self._it, None)

    return _quantize(model, quantize_static, calibration_data_reader=_Reader(),
                     quant_format=QuantFormat.QDQ,
                     nodes_to_exclude=_node_names(model, nodes_to_exclude, "nodes_to_exclude"))
