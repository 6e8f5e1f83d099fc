"""Open an .onnx file with embedded weights without reading them: weights stay in the file.

A comparison runs two models through onnxruntime; holding both models' weights in Python as
well (plus the serialized copies handed to ORT) dominates its memory. Here the file is
memory-mapped and walked at the protobuf wire level; every large ``raw_data`` of a main-graph
initializer becomes an external-data reference *into the .onnx file itself* (its byte offset
and length), so onnx_ir reads it lazily and onnxruntime reads it from disk. Neither onnx nor
onnx_ir can load a model this way (they parse every field), hence this small wire walker.
"""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import onnx

from onnx_lab.core._files import opened_path
from onnx_lab.core._wire import encode_varint, iter_fields, len_field
from onnx_lab.core.load import build_model
from onnx_lab.core.model import LabModel
from onnx_lab.errors import LabError

logger = logging.getLogger(__name__)

# Tensors smaller than this stay embedded (shape vectors, scalars: cheap and often needed).
_MIN_EXTERNAL = 1024
# Files smaller than this are loaded the ordinary way.
MIN_FILE_BYTES = 8 << 20

_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
_TENSOR_EXTERNAL_DATA = 13
_TENSOR_DATA_LOCATION = 14


def _entry(key: str, value: str) -> bytes:
    return len_field(1, key.encode()) + len_field(2, value.encode())


def _tensor(buf, start: int, end: int, location: str) -> bytes:
    """A TensorProto's bytes with a large raw_data replaced by a reference into the file."""
    raw = None
    for num, wt, _fs, vs, ve in iter_fields(buf, start, end):
        if num == _TENSOR_RAW_DATA and wt == 2:
            raw = (vs, ve)
        elif num in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            return bytes(buf[start:end])  # already external
    if raw is None or raw[1] - raw[0] < _MIN_EXTERNAL:
        return bytes(buf[start:end])
    out = bytearray()
    for num, _wt, fs, _vs, ve in iter_fields(buf, start, end):
        if num != _TENSOR_RAW_DATA:
            out += buf[fs:ve]
    for key, value in (("location", location), ("offset", str(raw[0])),
                       ("length", str(raw[1] - raw[0]))):
        out += len_field(_TENSOR_EXTERNAL_DATA, _entry(key, value))
    out += encode_varint(_TENSOR_DATA_LOCATION << 3) + encode_varint(1)  # EXTERNAL
    return bytes(out)


def skeleton_bytes(path: Path) -> bytes:
    """The model at ``path`` serialized with its large embedded weights as references into it."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        out = bytearray()
        for num, wt, fs, vs, ve in iter_fields(buf, 0, len(buf)):
            if num != _MODEL_GRAPH or wt != 2:
                out += buf[fs:ve]
                continue
            graph = bytearray()
            for gnum, gwt, gfs, gvs, gve in iter_fields(buf, vs, ve):
                if gnum == _GRAPH_INITIALIZER and gwt == 2:
                    graph += len_field(_GRAPH_INITIALIZER, _tensor(buf, gvs, gve, path.name))
                else:
                    graph += buf[gfs:gve]
            out += len_field(_MODEL_GRAPH, bytes(graph))
        return bytes(out)


def open_lazy(path: str | Path) -> LabModel | None:
    """A LabModel of ``path`` whose large weights are read from the file on use, or None when
    the ordinary loader should be used (small file, or anything unexpected)."""
    p = opened_path(path)
    try:
        if not p.is_file() or p.stat().st_size < MIN_FILE_BYTES:
            return None
        proto = onnx.load_from_string(skeleton_bytes(p))
    except Exception as e:  # noqa: BLE001 - any surprise: fall back to the normal loader
        logger.info("lazy open of %s failed (%s); loading normally", p, e)
        return None
    try:
        # The same checks as every other source: names, types, tensors, and each reference
        # (those into the .onnx file itself included) against the model's folder.
        model = build_model(proto, repr(str(p)), p.parent)
    except LabError:
        raise
    except Exception as e:  # noqa: BLE001 - any surprise: the normal loader explains it
        logger.info("lazy open of %s failed (%s); loading normally", p, e)
        return None
    return LabModel(model, path=p)
