"""Reading models from paths, bytes, ModelProto or onnx_ir.Model, with clear errors.

External data is never read here: tensors stay :class:`onnx_ir.ExternalTensor` (memory-mapped on
first use), so opening a multi-GB model costs the size of its graph, not its weights.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_lab.core._wire import split_raw_data
from onnx_lab.core.model import LabModel
from onnx_lab.errors import ExternalDataError, InputError, LabError, ModelLoadError

logger = logging.getLogger(__name__)

__all__ = ["load_model", "check_external_data"]

_ZIP_MAGIC = b"PK\x03\x04"


def load_model(source: object, *, mmap: bool = False) -> LabModel:
    """Load ``source`` (path, bytes, ``onnx.ModelProto`` or ``onnx_ir.Model``) into a LabModel.

    Args:
        mmap: for a path, map the file into memory instead of reading it: the weights stay
            in the operating system's page cache and are paged in on use (opening BERT-base
            takes ~0.05 s instead of ~0.3 s, and the weights do not count twice in RAM).
            The file must then not be rewritten in place while the model is in use: the
            process would crash (SIGBUS) on the next access to a weight. ``Lab.save``
            replaces files atomically, so saving over the source is safe; another program
            writing the file is not. The ``onnx-lab`` command maps; the Python API reads by
            default.

    Raises:
        ModelLoadError: the source is missing, empty, a directory, not an ONNX protobuf.
        ExternalDataError: external data files are missing, truncated or escape the folder.
    """
    if isinstance(source, LabModel):
        return source
    if isinstance(source, ir.Model):
        return LabModel(source)
    if isinstance(source, onnx.ModelProto):
        _check_proto(source, "the ModelProto")
        return LabModel(ir.serde.deserialize_model(source))
    if isinstance(source, (bytes, bytearray, memoryview)):
        proto = _parse_bytes(bytes(source), "the given bytes")
        if _external_locations(proto):
            raise ExternalDataError(
                "The model bytes refer to external data files, which cannot be found without "
                "the model's folder.",
                fix="Pass the path of the .onnx file instead of its bytes.",
            )
        return LabModel(ir.serde.deserialize_model(proto))
    if isinstance(source, (str, os.PathLike)):
        return _load_path(Path(source), mmap)
    raise InputError(
        f"Cannot open an object of type {type(source).__name__}.",
        fix="Pass a path, bytes, an onnx.ModelProto, an onnx_ir.Model or 'sample:NAME'.",
    )


def _map(path: Path) -> mmap.mmap | None:
    """A read-only map of the file, or None where the file system cannot map it."""
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        logger.debug("cannot map %s (%s); reading it", path, e)
        return None


class _Reader(threading.Thread):
    """Reads a whole file into a private buffer in the background.

    ``open`` without ``mmap`` must own its weights (a file rewritten later must not change or
    crash the Lab), so the file is read once; the read releases the GIL, so it overlaps the
    parsing and the graph deserialization the opening thread does meanwhile (BERT-base: the
    ~0.1 s read hides behind ~0.15 s of deserialization).
    """

    def __init__(self, path: Path, size: int) -> None:
        super().__init__(name="onnx_lab-read", daemon=True)
        self.path, self.size = path, size
        # np.empty, not bytearray(size): no zero-filling of pages the read overwrites anyway
        # (a bytearray of BERT-base's 435 MB costs 0.3 s of memset, holding the GIL).
        self.buf = np.empty(size, dtype=np.uint8)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            view = memoryview(self.buf)
            with open(self.path, "rb", buffering=0) as f:
                pos = 0
                while pos < self.size:
                    n = f.readinto(view[pos:])
                    if not n:
                        raise ModelLoadError(
                            f"Model file {str(self.path)!r} shrank while it was read "
                            f"({pos} of {self.size} bytes).",
                            fix="Open it again once the program writing it has finished.")
                    pos += n
        except BaseException as e:  # noqa: BLE001 - re-raised by the opening thread
            self.error = e

    def result(self) -> np.ndarray:
        self.join()
        if isinstance(self.error, LabError):
            raise self.error
        if self.error is not None:
            raise ModelLoadError(f"Cannot read model file {str(self.path)!r}: {self.error}",
                                 fix="Check the file's permissions and the disk.") from self.error
        return self.buf


def _load_path(path: Path, use_mmap: bool = False) -> LabModel:
    if not path.exists():
        raise ModelLoadError(f"Model file {str(path)!r} does not exist.",
                             fix="Check the path (relative paths start at the current folder "
                             f"{os.getcwd()!r}).")
    if path.is_dir():
        onnx_files = sorted(p.name for p in path.glob("*.onnx"))[:5]
        hint = f" It holds: {', '.join(onnx_files)}." if onnx_files else ""
        raise ModelLoadError(f"{str(path)!r} is a directory, not a model file.{hint}",
                             fix="Pass the path of the .onnx file inside it.")
    size = path.stat().st_size
    if size == 0:
        raise ModelLoadError(f"Model file {str(path)!r} is empty (0 bytes).",
                             fix="Re-export or re-download the model.")
    with open(path, "rb") as f:
        head = f.read(512)
    _check_magic(head, repr(str(path)))
    mapped = _map(path)
    data: bytes | mmap.mmap | np.ndarray = mapped if mapped is not None else path.read_bytes()
    try:
        stripped, spans = split_raw_data(data, _VIEW_MIN_BYTES)
    except (ValueError, IndexError):  # not well-formed: protobuf below says so
        stripped, spans = data, []
    if not isinstance(stripped, bytes):  # nothing stripped from a map: protobuf wants bytes
        stripped = bytes(stripped)
    # Without mmap=True the weights are read into memory the process owns, in the background
    # while the graph is parsed; the map above only served to find them (headers, no data).
    reader = _Reader(path, size) if (spans and mapped is not None and not use_mmap) else None
    if reader is not None:
        reader.start()
    try:
        try:
            proto = onnx.ModelProto()
            proto.ParseFromString(stripped)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise ModelLoadError(
                f"Model file {str(path)!r} ({size} bytes) is not a valid ONNX protobuf: it is "
                "truncated or corrupted.",
                fix="Re-export the model, or check that the copy/download completed.",
            ) from e
        _check_proto(proto, repr(str(path)))
        check_external_data(proto, path.parent)
        viewable = _viewable(proto, spans, data)
        model = ir.serde.deserialize_model(proto)
    finally:
        if reader is not None:
            data = reader.result()  # joined on errors too: no thread outlives the call
    if mapped is not None and data is not mapped:
        _close(mapped)
    for name, arr in _weight_views(viewable, data).items():
        v = model.graph.initializers[name]
        old = v.const_value
        v.const_value = ir.Tensor(arr, dtype=old.dtype, name=name, doc_string=old.doc_string,
                                  metadata_props=dict(old.metadata_props))
    ir.external_data.set_base_dir(model.graph, str(path.parent))
    return LabModel(model, path=path)


_VIEW_MIN_BYTES = 1 << 16
_VIEW_DTYPES = {onnx.TensorProto.FLOAT: "<f4", onnx.TensorProto.DOUBLE: "<f8",
                onnx.TensorProto.FLOAT16: "<f2", onnx.TensorProto.INT8: "i1",
                onnx.TensorProto.UINT8: "u1", onnx.TensorProto.INT16: "<i2",
                onnx.TensorProto.UINT16: "<u2", onnx.TensorProto.INT32: "<i4",
                onnx.TensorProto.UINT32: "<u4", onnx.TensorProto.INT64: "<i8",
                onnx.TensorProto.UINT64: "<u8", onnx.TensorProto.BOOL: "?"}


def _viewable(proto: onnx.ModelProto, spans: list[tuple[int, int, int]], data
              ) -> list[tuple[str, str, tuple[int, ...], int, int]]:
    """The stripped initializers numpy can express exactly: (name, dtype, shape, offset,
    length) each. The others get their raw_data back from ``data`` and stay protobuf tensors.

    The file's bytes are read once and the weights stay in them (parsing with protobuf
    copies them into the message and every later numpy or onnxruntime use copies them
    again: ~1 s for a 435 MB model).
    """
    out = []
    inits = proto.graph.initializer
    counts = Counter(t.name for t in inits)
    for k, offset, length in spans:
        t = inits[k]
        dtype = _VIEW_DTYPES.get(t.data_type)
        shape = tuple(t.dims)
        ok = (dtype is not None and t.name and counts[t.name] == 1
              and not t.HasField("segment")
              and t.data_location != onnx.TensorProto.EXTERNAL
              and int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize == length)
        if ok:
            out.append((t.name, dtype, shape, offset, length))
        else:
            t.raw_data = bytes(data[offset:offset + length])
    return out


def _weight_views(viewable: list[tuple[str, str, tuple[int, ...], int, int]], data
                  ) -> dict[str, np.ndarray]:
    """Read-only numpy views of ``data`` (the file's bytes, read or mapped) for ``viewable``."""
    views: dict[str, np.ndarray] = {}
    for name, dtype, shape, offset, length in viewable:
        arr = np.frombuffer(data, dtype=dtype, count=length // np.dtype(dtype).itemsize,
                            offset=offset).reshape(shape)
        arr.flags.writeable = False  # views of the read buffer would be writable: weights not
        views[name] = arr
    return views


def _close(mapped: mmap.mmap) -> None:
    """Close a map no view points into any more (one that still has views stays open)."""
    try:
        mapped.close()
    except BufferError:
        pass


def _check_magic(head: bytes, what: str) -> None:
    if head.startswith(_ZIP_MAGIC):
        raise ModelLoadError(
            f"{what} is a zip archive, not an ONNX model.",
            fix="Unzip it first and open the .onnx file inside.",
        )
    sample = head[:256]
    if sample and _looks_like_text(sample):
        first = sample.decode("utf-8", "replace").strip().splitlines()[0][:60]
        raise ModelLoadError(
            f"{what} is a text file (it starts with {first!r}), not a binary ONNX model.",
            fix="Open the binary .onnx file (a git-lfs pointer or an HTML error page is "
            "a failed download).",
        )


def _looks_like_text(sample: bytes) -> bool:
    # A serialized ModelProto starts with the tag of ir_version (0x08), which no text file
    # does; after it come names that are mostly printable, so the ratio test alone could
    # take a model with long node names for text.
    if sample[:1] == b"\x08":
        return False
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(sample) - 3:  # not just a character cut at the sample's end
            return False
        text = sample[:e.start].decode("utf-8")
    printable = sum(ch.isprintable() or ch in "\r\n\t" for ch in text)
    return printable / max(len(text), 1) > 0.97


def _parse_bytes(data: bytes, what: str) -> onnx.ModelProto:
    if not data:
        raise ModelLoadError(f"{what} are empty.", fix="Pass the serialized model.")
    _check_magic(data[:512], what)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as e:
        raise ModelLoadError(f"{what} are not a valid ONNX protobuf (truncated or corrupted).",
                             fix="Serialize the model with model.SerializeToString().") from e
    _check_proto(proto, what)
    return proto


def _check_proto(proto: onnx.ModelProto, what: str) -> None:
    # protobuf parses many random byte strings without complaint: require what every
    # ONNX writer emits.
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.opset_import:
        raise ModelLoadError(
            f"{what} parsed as protobuf but is not an ONNX model (no ir_version, graph or "
            "opset_import).",
            fix="Check that this is an .onnx model file and not another protobuf or data file.",
        )


def _iter_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_tensors(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _iter_tensors(g)


def _external_locations(proto: onnx.ModelProto) -> list[tuple[str, dict[str, str]]]:
    out = []
    for t in _iter_tensors(proto.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            out.append((t.name, info))
    return out


def check_external_data(proto: onnx.ModelProto, base_dir: Path) -> None:
    """Check that every external data reference stays inside ``base_dir`` and exists.

    Raises:
        ExternalDataError: naming the tensor and the file.
    """
    base = base_dir.resolve()
    sizes: dict[Path, int] = {}
    for name, info in _external_locations(proto):
        location = info.get("location", "")
        if not location:
            raise ExternalDataError(f"Tensor {name!r} is marked external but has no location.",
                                    fix="Re-export the model with its external data.")
        target = (base / location).resolve()
        normalized = os.path.normpath(location)
        if os.path.isabs(location) or normalized == ".." or normalized.startswith(".." + os.sep):
            raise ExternalDataError(
                f"Tensor {name!r} points to external data {location!r} outside the model's "
                f"folder {str(base)!r}; onnx_lab refuses to read it (a model file must not "
                "read arbitrary files).",
                fix="Move the data file next to the model and set a relative location.",
            )
        if not target.is_relative_to(base):
            # The location is inside the folder but a symbolic link leads out of it (the
            # Hugging Face cache keeps blobs elsewhere); onnx and onnx_ir refuse those too.
            raise ExternalDataError(
                f"External data file {location!r} (tensor {name!r}) is a symbolic link to "
                f"{str(target)!r}, outside the model's folder {str(base)!r}; onnx_lab, like "
                "onnx and onnx_ir, does not follow links out of the folder.",
                fix="Copy the model and its data into one folder as real files (cp -L, or "
                "huggingface_hub.snapshot_download(..., local_dir=DIR)).",
            )
        if target not in sizes:
            if not target.is_file():
                raise ExternalDataError(
                    f"External data file {location!r} (needed by tensor {name!r}) is missing "
                    f"from {str(base)!r}.",
                    fix="Copy the data file next to the .onnx file; it must keep its name.",
                )
            sizes[target] = target.stat().st_size
        try:
            offset = int(info.get("offset", 0) or 0)
            length = info.get("length")
            end = offset + int(length) if length is not None else offset
        except ValueError as e:
            raise ExternalDataError(
                f"Tensor {name!r} has a malformed external data offset/length "
                f"({info.get('offset')!r}, {info.get('length')!r}).",
                fix="Re-export the model with its external data.") from e
        if end > sizes[target]:
            raise ExternalDataError(
                f"External data file {location!r} is truncated: tensor {name!r} needs bytes "
                f"{offset}..{end} but the file has {sizes[target]}.",
                fix="Copy the complete data file again.",
            )
