"""Saving a history's current version, never over the user's source file unless asked.

Node provenance (``onnx_lab.origin`` metadata) is saved with the nodes, so ``origins``
survive save/load. External data: ``"auto"`` writes weights to ``<file>.data`` when the model
was opened with external data or would pass protobuf's 2 GB limit; a data file the model still
reads from is never overwritten (a new name is chosen), so earlier versions stay valid. The
.onnx file is written to a temporary name and then renamed over the target, so a failed save
leaves the old file intact and saving over a memory-mapped source is safe.

Example:
    >>> lab.apply_preset("safe")
    >>> lab.save("model.opt.onnx")
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from onnx_lab.core._wire import encode_varint as _varint
from onnx_lab.core.history import History
from onnx_lab.errors import SaveError

logger = logging.getLogger(__name__)

__all__ = ["save"]

_LIMIT = 2_000_000_000
_GRAPH_MARGIN = 64 << 20  # room for the graph itself next to the weights


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def save(history: History, path: str | os.PathLike, *, external_data: bool | str = "auto",
         overwrite: bool = False) -> Path:
    """Write the history's current version to ``path`` (``Lab.save`` calls this).

    Args:
        path: the .onnx file to write (its folder is created).
        external_data: "auto" (external when the source had external data or the model
            passes 2 GB), True (``<file name>.data``), False (one file), or a data file name
            (relative, in the same folder).
        overwrite: allow writing over the file the model was opened from.

    Returns:
        The path written.

    Raises:
        SaveError: the path is the source file (without ``overwrite=True``), a folder, or
            the model is too large for one file.

    Example:
        >>> lab.save("out/model.onnx", external_data=True)   # calls save(lab.history, ...)
    """
    target = Path(path)
    if target.is_dir():
        raise SaveError(f"{str(target)!r} is a folder.", fix="Pass a file path such as "
                        f"{str(target / 'model.onnx')!r}.")
    source = history.source_path
    if source is not None and not overwrite and (
            _same(target, source) or target.resolve() == Path(source).resolve()):
        raise SaveError(f"Refusing to overwrite the source model {str(source)!r}.",
                        fix="Save to another path, or pass overwrite=True.")
    if not isinstance(external_data, (bool, str)):
        raise SaveError(f"external_data must be 'auto', True, False or a file name, got "
                        f"{external_data!r}.", fix="Pass external_data=True.")
    model = history.model
    size = model.weights_nbytes()
    if external_data == "auto":
        use_external = history.original.model.has_external_data or \
            size + _GRAPH_MARGIN >= _LIMIT
        data_name = f"{target.name}.data"
    elif external_data is True:
        use_external, data_name = True, f"{target.name}.data"
    elif external_data is False:
        use_external, data_name = False, ""
    else:
        if os.path.isabs(external_data) or Path(external_data).name != external_data:
            raise SaveError(f"external_data {external_data!r} must be a file name in the "
                            "model's folder.", fix="Pass e.g. 'model.onnx.data'.")
        use_external, data_name = True, external_data
    if not use_external and size + _GRAPH_MARGIN >= _LIMIT:
        raise SaveError(f"The model's weights take {size / 1e9:.2f} GB; one .onnx file is "
                        "limited to 2 GB.", fix="Pass external_data=True.")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _replacing(target) as tmp:
        if use_external:
            reading = history.files_read()
            base, k = data_name, 1
            while (target.parent / data_name).resolve() in reading:
                data_name = f"{base}.{k}"
                k += 1
            if data_name != base:
                logger.info("%s is read by the model; writing weights to %s", base, data_name)
            ir.save(model.ir, tmp, external_data=data_name)
        else:
            m = model.ir
            if model.has_external_data:
                m = model.clone().ir
                ir.external_data.load_to_model(m)
            if target.suffix != ".onnx" or not _write_streamed(m, tmp):
                ir.save(m, tmp)
    return target


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[Path]:
    """A temporary path in ``target``'s folder that replaces ``target`` when the block ends.

    The old file is never truncated: a model opened with ``mmap=True`` (the command line)
    keeps reading its weights from the old file while the new one is written, and a failed
    or interrupted save leaves the old file as it was. A symbolic link is followed (the file
    it points to is replaced); the old file's permissions are kept.
    """
    final = target.resolve() if target.is_symlink() else target
    tmp = final.with_name(f".{final.stem}.{os.getpid()}.tmp{final.suffix}")
    try:
        yield tmp
        if final.exists():
            os.chmod(tmp, final.stat().st_mode & 0o7777)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------- one-file writer
# ir.save / onnx.save copy every weight into a ModelProto, then serialize that message into
# one more buffer before writing: for BERT-base (435 MB) ~1.1 s of copies before the 0.4 s
# write. Neither library can write a message part by part, so the large initializers are
# written here as protobuf fields next to the (small) serialized rest of the model: the file
# is a valid ModelProto that parses to the same message ir.save writes (fields of a message
# may come in any order and a repeated field's entries are concatenated in order).
_STREAM_MIN_BYTES = 1 << 16
_PLAIN = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.INT8,
          ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16, ir.DataType.INT32,
          ir.DataType.UINT32, ir.DataType.INT64, ir.DataType.UINT64, ir.DataType.BOOL}
_GRAPH_FIELD, _INITIALIZER_FIELD, _RAW_DATA_FIELD = 7, 5, 9


def _key(field: int) -> bytes:
    return bytes([(field << 3) | 2])  # length-delimited; fields < 16 fit one byte


def _raw(t: ir.TensorProtocol) -> bytes | memoryview:
    """The tensor's bytes in ONNX raw_data layout, without a copy where numpy holds them."""
    if isinstance(t, ir.Tensor) and t.dtype in _PLAIN:
        arr = t.numpy()
        if (isinstance(arr, np.ndarray) and arr.flags.c_contiguous
                and arr.dtype.byteorder in "=<|" and arr.nbytes == t.nbytes):
            return memoryview(arr.reshape(-1).view(np.uint8))
    return t.tobytes()


def _write_streamed(m: ir.Model, target: Path) -> bool:
    """Write ``m`` (no external data) to ``target``; False when nothing is worth streaming."""
    big: dict[str, tuple[ir.Value, ir.TensorProtocol]] = {}
    for name, v in m.graph.initializers.items():
        t = v.const_value
        if (t is not None and not isinstance(t, (ir.ExternalTensor, ir.StringTensor))
                and t.nbytes >= _STREAM_MIN_BYTES):
            big[name] = (v, t)
    if not big:
        return False
    try:
        # Serialize with placeholders (no data) in place of the large tensors; restored below.
        for name, (v, t) in big.items():
            v.const_value = ir.ExternalTensor(
                "-", 0, t.nbytes, t.dtype, shape=t.shape, name=name,
                doc_string=t.doc_string, metadata_props=dict(t.metadata_props))
        proto = ir.to_proto(m)
    finally:
        for v, t in big.values():
            v.const_value = t
    inits = list(proto.graph.initializer)
    del proto.graph.initializer[:]
    entries: list[list[bytes | memoryview]] = []
    for tp in inits:
        if tp.name in big and tp.data_location == onnx.TensorProto.EXTERNAL:
            del tp.external_data[:]
            tp.ClearField("data_location")
            data = _raw(big[tp.name][1])
            head = tp.SerializeToString()
            n = len(data) if isinstance(data, bytes) else data.nbytes
            raw_key = _key(_RAW_DATA_FIELD) + _varint(n)
            body = len(head) + len(raw_key) + n
            entries.append([_key(_INITIALIZER_FIELD) + _varint(body) + head + raw_key, data])
        else:
            body_bytes = tp.SerializeToString()
            entries.append([_key(_INITIALIZER_FIELD) + _varint(len(body_bytes)) + body_bytes])
    graph_rest = proto.graph.SerializeToString()
    proto.ClearField("graph")
    top = proto.SerializeToString()
    graph_len = len(graph_rest) + sum(
        len(p) if isinstance(p, bytes) else p.nbytes for e in entries for p in e)
    with open(target, "wb") as f:
        f.write(top)
        f.write(_key(_GRAPH_FIELD) + _varint(graph_len))
        f.write(graph_rest)
        for e in entries:
            for p in e:
                f.write(p)
    return True
