"""Reading models from paths, bytes, ModelProto or onnx_ir.Model, with clear errors.

External data is never read here: tensors stay :class:`onnx_ir.ExternalTensor` (memory-mapped on
first use), so opening a multi-GB model costs the size of its graph, not its weights.
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from onnx_lab._pandas import prefetch
from onnx_lab.core import _mltypes  # noqa: F401 - onnx_ir reads ONNX-ML map types from here on
from onnx_lab.core._files import opened_path, pin_external, read_attribute_tensors
from onnx_lab.core._gc import paused
from onnx_lab.core._location import data_file
from onnx_lab.core._proto import graph_protos
from onnx_lab.core._validate import (
    check_ir_model,
    check_structure,
    expected_nbytes,
    ir_tensors,
    mark_unreadable,
    remark_unreadable,
)
from onnx_lab.core._wire import nesting_depth, split_raw_data
from onnx_lab.core.model import LabModel
from onnx_lab.errors import ExternalDataError, InputError, LabError, ModelLoadError

logger = logging.getLogger(__name__)

__all__ = ["load_model", "check_external_data", "build_model"]

_ZIP_MAGIC = b"PK\x03\x04"
_KNOWN_DTYPES = frozenset(int(d) for d in ir.DataType)


@paused()
def load_model(source: object, *, mmap: bool = False,
               base_dir: str | os.PathLike | None = None) -> LabModel:
    """Load ``source`` (path, bytes, ``onnx.ModelProto`` or ``onnx_ir.Model``) into a LabModel.

    Every source kind goes through the same checks (``core._validate``: names, types,
    attributes, writers, tensors; :func:`check_external_data`: external references), so no
    source reads a file outside its folder and none leaks a non-LabError later.

    Args:
        mmap: for a path, map the file into memory instead of reading it: the weights stay
            in the operating system's page cache and are paged in on use (opening BERT-base
            takes ~0.05 s instead of ~0.3 s, and the weights do not count twice in RAM).
            The file must then not be rewritten in place while the model is in use: the
            process would crash (SIGBUS) on the next access to a weight. ``Lab.save``
            replaces files atomically, so saving over the source is safe; another program
            writing the file is not. The ``onnx-lab`` command maps; the Python API reads by
            default.
        base_dir: for an in-memory source (bytes, ``ModelProto``, ``onnx_ir.Model``), the
            folder its external data files lie in. Without it, bytes and protos that refer
            to external data are refused (their location would be resolved against the
            current folder); an ``onnx_ir.Model`` may carry the folder it was loaded from
            (``ir.load`` records it). A path's external data is always read from the path's
            own folder.

    Raises:
        ModelLoadError: the source is missing, empty, a directory, not an ONNX protobuf, or
            its graph is malformed (names that are not UTF-8, unknown types, two writers of
            one tensor...).
        ExternalDataError: external data files are missing, truncated, escape the folder, or
            an in-memory source refers to them without ``base_dir``.
        InputError: an object onnx_lab cannot open, or ``base_dir`` with a path.
    """
    if isinstance(source, LabModel):
        return source
    base = _base_dir(base_dir)
    if isinstance(source, ir.Model):
        return _from_ir(source, base)
    if isinstance(source, onnx.ModelProto):
        return LabModel(build_model(source, "the ModelProto", base))
    if isinstance(source, (bytes, bytearray, memoryview)):
        proto = _parse_bytes(bytes(source), "the given bytes")
        return LabModel(build_model(proto, "the given bytes", base), source=proto)
    if isinstance(source, (str, os.PathLike)):
        if not os.fspath(source):  # Path('') is '.': it read "the current folder is a folder"
            raise ModelLoadError("The model path is empty.",
                                 fix="Pass the path of the .onnx file, e.g. 'model.onnx'.")
        if base is not None and base != Path(source).parent.resolve():
            raise InputError(
                f"base_dir={str(base_dir)!r} was given with the path {str(source)!r}: a model "
                "file's external data is always read from the file's own folder.",
                fix="Drop base_dir, or move the data files next to the model.")
        return _load_path(opened_path(source), mmap)
    raise InputError(
        f"Cannot open an object of type {type(source).__name__}.",
        fix="Pass a path, bytes, an onnx.ModelProto, an onnx_ir.Model or 'sample:NAME'.",
    )


def _base_dir(base_dir: str | os.PathLike | None) -> Path | None:
    if base_dir is None:
        return None
    if not isinstance(base_dir, (str, os.PathLike)):
        raise InputError(f"base_dir must be a folder path, got {type(base_dir).__name__}.",
                         fix="Pass base_dir='path/to/folder'.")
    base = Path(base_dir)
    if not base.is_dir():
        raise ExternalDataError(f"base_dir {str(base_dir)!r} is not a folder.",
                                fix="Pass the folder that holds the model's data files.")
    return base.resolve()


def build_model(proto: onnx.ModelProto, what: str, base: Path | None,
                skip: frozenset[int] | set[int] = frozenset()) -> ir.Model:
    """The onnx_ir model of a parsed ``proto``, after every check: what ONNX requires of the
    message, the graph structure (``core._validate``) and its external references, resolved
    against ``base`` (None: an in-memory source without a folder, where references are
    refused). Tensors whose data disagrees with their dims become ``UnreadableTensor``.

    Args:
        skip: positions in the main graph's initializers whose raw_data the caller took out
            of the message (checked by the caller).
    """
    _check_proto(proto, what)
    bad, external = check_structure(proto, what, skip=skip)
    if external:  # the structure walk saw every tensor: without a reference, nothing to check
        check_external_data(proto, base, what=what)
    model = _deserialize(proto, what)
    mark_unreadable(model, bad)
    if base is not None and external:
        pin_external(model, base)
        read_attribute_tensors(model)
    return model


def _deserialize(proto: onnx.ModelProto, what: str) -> ir.Model:
    try:
        return ir.serde.deserialize_model(proto)
    except LabError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever onnx_ir refuses is a malformed model
        cause: BaseException = e
        while cause.__cause__ is not None:
            cause = cause.__cause__
        raise ModelLoadError(
            f"{what} cannot be read as an ONNX graph: {type(cause).__name__}: "
            f"{str(cause)[:300]}",
            fix="Re-export the model; onnx.checker.check_model(model) names what is wrong.",
        ) from e


def _from_ir(model: ir.Model, base: Path | None) -> LabModel:
    """Check an ``onnx_ir.Model`` built in memory: names, tensors, external references."""
    what = "the onnx_ir model"
    check_ir_model(model, what)
    sizes: dict = {}
    for desc, t in ir_tensors(model):
        raw = t.raw if isinstance(t, ir.serde.TensorProtoTensor) else None
        if raw is not None and raw.data_type not in _KNOWN_DTYPES:
            raise ModelLoadError(f"{what[:1].upper() + what[1:]}: {desc} has the unknown data "
                                 f"type {raw.data_type}.", fix="Known types: FLOAT=1 ... "
                                 "FLOAT6E3M2=28.")
        if any(d < 0 for d in t.shape):
            raise ModelLoadError(f"{what[:1].upper() + what[1:]}: {desc} has negative dims "
                                 f"{list(t.shape)}.", fix="Tensor dims are sizes, never "
                                 "negative.")
    remark_unreadable(model)
    for desc, t in ir_tensors(model):
        if not isinstance(t, ir.ExternalTensor):
            continue
        folder = base if base is not None else (Path(t.base_dir).resolve() if t.base_dir
                                                else None)
        _check_reference(t.name or desc, t.location, t.offset, t.length, int(t.dtype),
                         list(t.shape.numpy()) if t.shape.is_static() else None, folder,
                         sizes, what)
    if base is not None:
        pin_external(model, base)
        read_attribute_tensors(model)
    return LabModel(model)


def _map(path: Path, f) -> mmap.mmap | None:
    """A read-only map of the open file ``f``, or None where the file system cannot map it."""
    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        logger.debug("cannot map %s (%s); reading it", path, e)
        return None


class _Reader(threading.Thread):
    """Reads a whole open file into a private buffer in the background, then closes it.

    ``open`` without ``mmap`` must own its weights (a file rewritten later must not change or
    crash the Lab), so the file is read once; the read releases the GIL, so it overlaps the
    parsing and the graph deserialization the opening thread does meanwhile, and whatever the
    user does next until a weight is first needed (``_Pending``). It reads the file the graph
    was parsed from (the same open file, so a file replaced by a rename meanwhile does not
    mix in), and a file written in place while it is read (its size or modification time
    moved) is an error, never a silent mix of two versions.
    """

    def __init__(self, path: Path, f) -> None:
        super().__init__(name="onnx_lab-read", daemon=True)
        self.path, self.f = path, f
        self.before = os.fstat(f.fileno())
        self.buf: bytes = b""
        self.error: BaseException | None = None

    def run(self) -> None:
        # One read() into a new bytes object: the read releases the GIL and its buffer is
        # plain malloc memory. (A numpy buffer of this size asks the kernel for huge pages,
        # whose compaction stalls made BERT-base's read take 0.14-1.3 s instead of ~0.3 s;
        # a bytearray would be zero-filled first, holding the GIL.)
        try:
            with self.f:
                self.buf = self.f.read()  # from the start: nothing else reads ``f``
                after = os.fstat(self.f.fileno())
            size = self.before.st_size
            if (len(self.buf) != size or after.st_size != size
                    or after.st_mtime_ns != self.before.st_mtime_ns):
                raise ModelLoadError(
                    f"Model file {str(self.path)!r} was written to while it was read "
                    f"({len(self.buf)} of {size} bytes read; it now has {after.st_size}).",
                    fix="Open it again once the program writing it has finished.")
        except BaseException as e:  # noqa: BLE001 - re-raised where a weight is first used
            self.buf = b""
            self.error = e

    def result(self) -> bytes:
        self.join()
        if isinstance(self.error, LabError):
            raise self.error
        if self.error is not None:
            raise ModelLoadError(f"Cannot read model file {str(self.path)!r}: {self.error}",
                                 fix="Check the file's permissions and the disk.") from self.error
        if len(self.buf) != self.before.st_size:  # a process forked while the read ran
            raise ModelLoadError(
                f"The weights of {str(self.path)!r} were still being read when this process "
                "was forked from the one that opened it, so they are not here.",
                fix="Open the model in this process (or touch a weight before forking, "
                "e.g. lab.weight_stats()).")
        return self.buf


def _load_path(path: Path, use_mmap: bool = False) -> LabModel:
    try:
        return _read_path(path, use_mmap)
    except OSError as e:  # unreadable (permissions), a file vanishing while read, EIO...
        reason = e.strerror or type(e).__name__
        raise ModelLoadError(f"Cannot read model file {str(path)!r}: {reason.lower()}.",
                             fix="Check the file's permissions (it must be readable by "
                             "you) and the disk.") from e


def _read_path(path: Path, use_mmap: bool = False) -> LabModel:
    if not path.exists() and path.is_symlink():  # a loop, or a link to nothing
        raise ModelLoadError(f"Model file {str(path)!r} is a symbolic link that leads to no "
                             f"file (to {os.readlink(path)!r}: a loop of links, or a "
                             "missing target).",
                             fix="Point the link at the model file, or pass the file itself.")
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
    f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below or by the reader
    reader = None
    try:
        _check_magic(f.read(512), repr(str(path)))
        f.seek(0)
        mapped = _map(path, f)
        data: bytes | mmap.mmap = mapped if mapped is not None else f.read()
        try:
            stripped, spans = split_raw_data(data, _VIEW_MIN_BYTES)
        except (ValueError, IndexError):  # not well-formed: protobuf below says so
            stripped, spans = data, []
        if not isinstance(stripped, bytes):  # nothing stripped from a map: protobuf wants bytes
            stripped = bytes(stripped)
        # Without mmap=True the weights are read into memory the process owns, in the
        # background while the graph is parsed; the map only serves to find them (headers,
        # no data).
        if spans and mapped is not None and not use_mmap:
            started = _Reader(path, f)
            started.start()
            reader = started  # from here on the reader closes ``f``
    finally:
        if reader is None:
            f.close()
    failed = True
    try:
        try:
            proto = onnx.ModelProto()
            proto.ParseFromString(stripped)
        except (DecodeError, RuntimeError, ValueError) as e:
            raise _not_protobuf(f"Model file {str(path)!r} ({size} bytes)", data) from e
        what = repr(str(path))
        _check_proto(proto, what)
        viewable = _viewable(proto, spans, data)
        model = build_model(proto, what, path.parent, skip={k for k, *_ in viewable})
        lab_model = LabModel(model, path=path, source=proto)
        if reader is not None:
            # Every feature reads the index: build it while the weights are still being read.
            lab_model.index  # noqa: B018 - the property builds and caches it
            if reader.is_alive():
                # Still reading (the read releases the GIL): the first table's pandas import
                # overlaps it (nothing once pandas is imported, as in a warm kernel). Small
                # models (no background read) and mmap=True (the command line) never import
                # it here.
                prefetch()
        failed = False
    finally:
        if reader is not None and failed:
            # joined on errors: an error of the parse above is the one the user sees
            reader.join()
    if reader is not None:
        # The read may still run (it releases the GIL): each weight arrives when first used,
        # so the user's next cell (a summary, a drawing) runs meanwhile. The same whether or
        # not it has finished, so a weight's type never depends on timing.
        _close(mapped)  # it only served to find the weights
        _attach_pending(model, viewable, reader)
        return lab_model
    for _, name, arr in _weight_views(viewable, data):
        v = model.graph.initializers[name]
        old = v.const_value
        v.const_value = ir.Tensor(arr, dtype=old.dtype, name=name, doc_string=old.doc_string,
                                  metadata_props=dict(old.metadata_props))
    return lab_model


class _Pending:
    """The weights of a file whose background read is still running when ``open`` returns.

    Each weight is an ``ir.LazyTensor``: its first use waits for the read (the read's error,
    such as a file that changed size, is raised there as a ModelLoadError) and every weight
    then becomes a read-only view of the buffer the process owns, as if ``open`` had waited.
    Thread-safe: a widget's thread and the kernel may ask at once.
    """

    def __init__(self, reader: _Reader,
                 viewable: list[tuple[int, str, str, tuple[int, ...], int, int]]) -> None:
        self._reader: _Reader | None = reader
        self._viewable = viewable
        self._views: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def tensor(self, name: str, dtype: ir.DataType) -> ir.Tensor:
        with self._lock:
            if self._reader is not None:
                data = self._reader.result()  # raises the read's error on every use
                self._views = {n: arr for _, n, arr in _weight_views(self._viewable, data)}
                self._reader = None
            return ir.Tensor(self._views[name], dtype=dtype, name=name)


def _attach_pending(model: ir.Model, viewable, reader: _Reader) -> None:
    """Every weight the read brings, as a tensor that waits for it on first use."""
    pending = _Pending(reader, viewable)
    for _, name, *_ in viewable:
        v = model.graph.initializers[name]
        old = v.const_value
        v.const_value = ir.LazyTensor(
            lambda name=name, dtype=old.dtype: pending.tensor(name, dtype), old.dtype,
            old.shape, cache=True, name=name, doc_string=old.doc_string,
            metadata_props=dict(old.metadata_props))


def _not_protobuf(what: str, data) -> ModelLoadError:
    """The error for bytes protobuf cannot parse: nesting past protobuf's limit, or damage."""
    depth = nesting_depth(data, _PROTOBUF_DEPTH + 1)
    if depth is not None and depth > _PROTOBUF_DEPTH:
        return ModelLoadError(
            f"{what} nests its subgraphs (If/Loop/Scan bodies) more than {_PROTOBUF_DEPTH} "
            "messages deep, past protobuf's recursion limit, so it cannot be parsed.",
            fix="Flatten the nested control flow (e.g. with onnxsim or by re-exporting "
            "with fewer nested conditionals).")
    return ModelLoadError(
        f"{what} is not a valid ONNX protobuf: it is truncated or corrupted.",
        fix="Re-export the model, or check that the copy/download completed (bytes: "
        "serialize with model.SerializeToString()).")


# protobuf's default recursion limit for parsing nested messages
_PROTOBUF_DEPTH = 100
_VIEW_MIN_BYTES = 1 << 16
_VIEW_DTYPES = {onnx.TensorProto.FLOAT: "<f4", onnx.TensorProto.DOUBLE: "<f8",
                onnx.TensorProto.FLOAT16: "<f2", onnx.TensorProto.INT8: "i1",
                onnx.TensorProto.UINT8: "u1", onnx.TensorProto.INT16: "<i2",
                onnx.TensorProto.UINT16: "<u2", onnx.TensorProto.INT32: "<i4",
                onnx.TensorProto.UINT32: "<u4", onnx.TensorProto.INT64: "<i8",
                onnx.TensorProto.UINT64: "<u8", onnx.TensorProto.BOOL: "?"}


def _viewable(proto: onnx.ModelProto, spans: list[tuple[int, int, int]], data
              ) -> list[tuple[int, str, str, tuple[int, ...], int, int]]:
    """The stripped initializers numpy can express exactly: (position, name, dtype, shape,
    offset, length) each. The others get their raw_data back from ``data`` and stay protobuf
    tensors (checked against their dims like any other).

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
        # math.prod, not numpy's: dims of 2**62 must not wrap around to a matching length
        ok = (dtype is not None and type(t.name) is str and t.name and counts[t.name] == 1
              and not t.HasField("segment") and all(d >= 0 for d in shape)
              and t.data_location != onnx.TensorProto.EXTERNAL
              and not any(len(getattr(t, f)) for f in _TYPED_FIELDS)
              and math.prod(shape) * np.dtype(dtype).itemsize == length)
        if ok:
            out.append((k, t.name, dtype, shape, offset, length))
        else:
            t.raw_data = bytes(data[offset:offset + length])
    return out


_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                 "string_data")


def _weight_views(viewable: list[tuple[int, str, str, tuple[int, ...], int, int]], data
                  ) -> list[tuple[int, str, np.ndarray]]:
    """Read-only numpy views of ``data`` (the file's bytes, read or mapped) for ``viewable``."""
    views = []
    for k, name, dtype, shape, offset, length in viewable:
        arr = np.frombuffer(data, dtype=dtype, count=length // np.dtype(dtype).itemsize,
                            offset=offset).reshape(shape)
        views.append((k, name, arr))
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
        lines = sample.decode("utf-8", "replace").strip().splitlines()
        start = f"it starts with {lines[0][:60]!r}" if lines else "it holds only whitespace"
        raise ModelLoadError(
            f"{what} is a text file ({start}), not a binary ONNX model.",
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
    except (DecodeError, RuntimeError, ValueError) as e:
        raise _not_protobuf(what[:1].upper() + what[1:], data) from e
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
    """Every TensorProto of ``graph`` and its bodies: initializers, TENSOR and TENSORS
    attributes (sparse tensors are refused before this runs)."""
    for g in graph_protos(graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors


def _external_tensors(proto: onnx.ModelProto):
    for t in _iter_tensors(proto.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            yield t
    for f in proto.functions:
        # a function body's nodes, and the bodies of its If/Loop/Scan nodes
        for t in _iter_tensors(onnx.GraphProto(node=f.node)):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                yield t


def check_external_data(proto: onnx.ModelProto, base_dir: Path | None, *,
                        what: str = "the model") -> None:
    """Check every external data reference of ``proto`` against ``base_dir``.

    A reference must name a location (no NUL byte, not absolute, no ``..``, no link out of
    the folder) of a regular file inside ``base_dir`` that holds the tensor's bytes at a
    well-formed, non-negative offset, with a length that matches the tensor's dims. With
    ``base_dir=None`` (an in-memory source whose folder nobody named) any reference is
    refused: it would be resolved against the current folder.

    Raises:
        ExternalDataError: naming the tensor and the file.
    """
    base = base_dir.resolve() if base_dir is not None else None
    sizes: dict = {}
    for t in _external_tensors(proto):
        info: dict[str, str] = {}
        for e in t.external_data:  # the last entry of a key wins, as in onnx and onnx_ir
            if type(e.key) is not str or type(e.value) is not str:
                raise ExternalDataError(
                    f"Tensor {t.name!r} has external data entries that are not valid UTF-8.",
                    fix="Re-export the model with its external data.")
            info[e.key] = e.value
        _check_reference(t.name, info.get("location"), info.get("offset"),
                         info.get("length"), t.data_type, list(t.dims), base, sizes, what)


def _check_reference(name: str, location: str | None, offset: str | int | None,
                     length: str | int | None, dtype: int, dims: list[int] | None,
                     base: Path | None, sizes: dict, what: str) -> None:
    """One external reference (see :func:`check_external_data`); ``sizes`` caches file
    sizes (and resolved locations) across the references of a model."""
    if base is None and location and "\x00" not in location:  # (those: data_file says)
        raise ExternalDataError(
            f"{what[:1].upper() + what[1:]} refers to the external data file {location!r} "
            f"(tensor {name!r}), which cannot be found without the model's folder.",
            fix="Pass the path of the .onnx file instead of its bytes, or name the folder "
            "of its data files with base_dir=.")
    # A model's references name a few files: each is resolved once (a realpath per tensor
    # took 0.4 s for 7,000 weights).
    target = sizes.get(("target", base, location))
    if target is None:
        target = data_file(base or Path(), location, name)
    if target not in sizes:
        try:
            regular = target.is_file()
            size = target.stat().st_size if regular else 0
        except OSError:
            regular, size = False, 0
        if not regular:
            kind = ("a folder, not a file" if target.is_dir() else "missing"
                    if not target.exists() else "not a regular file (a device or FIFO)")
            raise ExternalDataError(
                f"External data file {location!r} (needed by tensor {name!r}) is {kind} "
                f"in {str(base)!r}." if kind != "missing" else
                f"External data file {location!r} (needed by tensor {name!r}) is missing "
                f"from {str(base)!r}.",
                fix="Copy the data file next to the .onnx file; it must keep its name."
                if kind == "missing" else "Put the data file itself there, as a regular file.",
            )
        sizes[target] = size
    sizes[("target", base, location)] = target
    start, n = _int_entry(offset, "offset", name, 0), _int_entry(length, "length", name, None)
    if dtype in (0, onnx.TensorProto.STRING) or dims is None or any(d < 0 for d in dims):
        raise ExternalDataError(
            f"Tensor {name!r} is external data of type {dtype} with dims {dims}: no data "
            "file can hold it.", fix="Re-export the model with its external data.")
    want = expected_nbytes(dtype, math.prod(dims))
    if n is not None and n != want:
        raise ExternalDataError(
            f"Tensor {name!r} declares dims {dims} ({want:,} bytes) but its external data "
            f"length is {n:,} bytes.", fix="Re-export the model with its external data.")
    end = start + want
    if end > sizes[target] and str(location).lower().endswith(".onnx"):
        raise ExternalDataError(
            f"Tensor {name!r} refers to {location!r} as its external data file: an .onnx "
            f"file, which holds a model, not weights (it needs bytes {start}..{end}; the "
            f"file has {sizes[target]}).",
            fix="Point the location at the model's data file (onnx.save(model, path, "
            "save_as_external_data=True, location='model.onnx.data')), or re-export.")
    if end > sizes[target]:
        raise ExternalDataError(
            f"External data file {location!r} is truncated: tensor {name!r} needs bytes "
            f"{start}..{end} but the file has {sizes[target]}.",
            fix="Copy the complete data file again.",
        )


def _int_entry(value: str | int | None, key: str, name: str, default: int | None
               ) -> int | None:
    """A non-negative integer ``offset``/``length`` entry (None: absent)."""
    if value is None:
        return default
    try:
        n = value if isinstance(value, int) else int(value.strip(), 10)
    except ValueError:
        n = -1
    if isinstance(n, bool) or n < 0:
        raise ExternalDataError(
            f"Tensor {name!r} has a malformed external data {key} {value!r} (not a "
            "non-negative integer).", fix="Re-export the model with its external data.")
    return n
