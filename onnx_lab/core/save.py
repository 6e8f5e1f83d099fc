"""Saving a history's current version, never over a file the model reads unless asked.

Node provenance (``onnx_lab.origin`` metadata) is saved with the nodes, so ``origins``
survive save/load. External data: ``"auto"`` writes weights to ``<file>.data`` when the model
was opened with external data or would pass protobuf's 2 GB limit.

**How external data is written** (the one rule; :func:`write_model` applies it, and every
writer of a model goes through it: ``save``, the temporary files handed to tools by
:mod:`onnx_lab.core.handoff`, the quantizers' inputs):

- one data file per model, named in the model's own folder (a relative location, never a
  temporary folder and never the data file of the model it came from: every weight is
  written again, read from wherever it lies);
- tensors of at most :data:`INLINE_MAX_BYTES` (4 KiB: shape vectors, axes, scalars, biases)
  stay inside the .onnx file, as do STRING and unreadable tensors. onnxruntime's shape
  inference reads shape and axes inputs only from the model file ("Cannot parse data from
  external tensors"); onnx's own default keeps under 1 KiB inline, and 4 KiB is the bound
  onnxruntime sessions of ``onnx_lab.runtime`` use, so the form verification runs is the
  form that is saved;
- a model with no tensor above that bound is written as one file (no data file).

What a save guarantees:

- **Atomic.** The model (and its data file) are written to temporary names in the target
  folder, unique per process and thread; only when both are complete are they renamed over
  the targets, the data file first and the model last, under a per-target lock so two threads
  saving to one path leave one consistent pair. Any failure (no space, a read-only folder, an
  error while serializing, Ctrl-C) removes the temporaries and leaves the old files as they
  were; temporaries of a killed process are removed by the next save to the same target.
  The temporaries live in a private folder created exclusively (``mkdir``, mode 0700, a
  random name, retried on a clash) beside the target, and every file in it is created with
  ``O_EXCL | O_NOFOLLOW``: a link planted at a temporary's name is never followed (the save
  takes another name), and nobody else can put one inside the private folder.
- **Never over what the model reads.** The file the first version was opened from is replaced
  only with ``overwrite=True``, as is an existing file that is no ONNX model (another model's
  ``.data`` file, a script: replacing it would lose it; an earlier ``.onnx`` output is
  replaced as any save replaces it); the data files any version reads (and the files of the models
  a derived Lab came from) are never replaced: an automatic data file name moves aside
  (``.data.1``), an explicit one is refused.
- **Errors are LabErrors.** An ``OSError`` becomes a :class:`~onnx_lab.errors.WriteError`
  (a SaveError that is also an OSError) naming the path and the cause.

Example:
    >>> lab.apply_preset("safe")
    >>> lab.save("model.opt.onnx")
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from google.protobuf.message import EncodeError

from onnx_lab.core._files import tensor_attributes, verify_files
from onnx_lab.core._location import user_path
from onnx_lab.core._validate import UnreadableTensor, kept_inline
from onnx_lab.core._wire import encode_varint as _varint
from onnx_lab.core._wire import read_varint as _read_varint
from onnx_lab.core.history import History
from onnx_lab.core.model import LabModel
from onnx_lab.errors import LabError, SaveError, WriteError

logger = logging.getLogger(__name__)

__all__ = ["save", "protected_files", "write_error", "write_model", "wants_external",
           "INLINE_MAX_BYTES"]

_LIMIT = 2_000_000_000
_GRAPH_MARGIN = 64 << 20  # room for the graph itself next to the weights

#: Tensors of at most this many bytes stay inside the .onnx file when the others go to a data
#: file (see the module docstring); ``onnx_lab.runtime`` hands onnxruntime the same split.
INLINE_MAX_BYTES = 4096


def wants_external(model: LabModel, *, like: LabModel | None = None) -> bool:
    """``external_data="auto"``: whether ``model`` is written with a data file: when ``like``
    (default: the model itself) reads external data, or the weights would pass protobuf's
    2 GB limit."""
    like = model if like is None else like
    return like.has_external_data or model.weights_nbytes() + _GRAPH_MARGIN >= _LIMIT


def _real(p: str | os.PathLike) -> Path:
    """``p`` with links and ``..`` resolved (what a write to it would replace)."""
    return Path(os.path.realpath(p))


def protected_files(history: History) -> dict[Path, str]:
    """Files a save must not replace, with what each is: the source (replaceable with
    ``overwrite=True``), the files of the models a derived Lab came from, and the external
    data files any version reads."""
    out: dict[Path, str] = {}
    for f in history.files_read():
        out[_real(f)] = "a data file the model reads its weights from"
    for f in getattr(history, "protected", ()):
        out.setdefault(_real(f), "a model this Lab was derived from")
    if history.source_path is not None:
        out[_real(history.source_path)] = "source"
    return out


#: ``check(path)``: why the model file written at ``path`` (a temporary name in the target
#: folder, its data file beside it) cannot be loaded, or None (onnx_lab.runtime's
#: ``load_problem``: a fresh onnxruntime session from the path).
Check = Callable[[Path], "str | None"]


def save(history: History, path: str | os.PathLike, *, external_data: bool | str = "auto",
         overwrite: bool = False, check: Check | None = None) -> Path:
    """Write the history's current version to ``path`` (``Lab.save`` calls this).

    Args:
        path: the .onnx file to write (its folder is created).
        external_data: "auto" (external when the source had external data or the model
            passes 2 GB), True (``<file name>.data``), False (one file), or a data file name
            (relative, in the same folder).
        overwrite: allow writing over the file the model was opened from, or over a file
            that is no ONNX model (another model's ``.data`` file, a script).
        check: called on the written file before it replaces anything (``Lab.save`` passes
            a fresh onnxruntime session's load); a problem it returns is a SaveError.

    Returns:
        The path written.

    Raises:
        SaveError: the path is the source file or a file that is no ONNX model (without
            ``overwrite=True``), a data file the model reads, a file a derived Lab came
            from, a folder, the model is too large for one file, or ``check`` found that
            the written file does not load (nothing is replaced then).
        WriteError: the file system refused a write (the message names the path and the
            cause: no space left, read-only, a parent that is a file...).

    Example:
        >>> lab.save("out/model.onnx", external_data=True)   # calls save(lab.history, ...)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise SaveError(f"path must be a file path, got {type(path).__name__}.",
                        fix="Pass e.g. 'model.opt.onnx'.")
    target = user_path(path)
    try:
        is_dir = target.is_dir()
    except OSError as e:
        raise write_error(target, e) from e
    if is_dir:
        raise SaveError(f"{str(target)!r} is a folder.", fix="Pass a file path such as "
                        f"{str(target / 'model.onnx')!r}.")
    protected = protected_files(history)
    kind = protected.get(_real(target))
    source = history.source_path
    if kind == "source" and not overwrite:
        raise SaveError(f"Refusing to overwrite the source model {str(source)!r}.",
                        fix="Save to another path, or pass overwrite=True.")
    if kind is not None and kind != "source":
        raise SaveError(f"Refusing to write {str(target)!r}: it is {kind}, and replacing it "
                        "would break the open model (and overwrite=True does not change that).",
                        fix="Save to another path.")
    if kind is None and not overwrite:
        what = _not_a_model(target)
        if what is not None:  # another model's data file, a script, an archive: lost for good
            raise SaveError(f"Refusing to write {str(target)!r}: the file there is no ONNX "
                            f"model ({what}), and replacing it would lose it.",
                            fix="Save to another path (a .onnx name), or pass "
                            "overwrite=True.")
    if not isinstance(external_data, (bool, str)):
        raise SaveError(f"external_data must be 'auto', True, False or a file name, got "
                        f"{external_data!r}.", fix="Pass external_data=True.")
    model = history.model
    verify_files(model.ir)  # the weights are copied from the files recorded at open
    size = model.weights_nbytes() + sum(t.nbytes for _, _, t in _attribute_tensors(model.ir))
    explicit = isinstance(external_data, str) and external_data != "auto"
    if external_data == "auto":
        use_external = wants_external(model, like=history.original.model) \
            or size + _GRAPH_MARGIN >= _LIMIT
        data_name = _data_name(target)
    elif external_data is True:
        use_external, data_name = True, _data_name(target)
    elif external_data is False:
        use_external, data_name = False, ""
    else:
        if (os.path.isabs(external_data) or Path(external_data).name != external_data
                or external_data in ("", ".", "..") or "\x00" in external_data):
            raise SaveError(f"external_data {external_data!r} must be a file name in the "
                            "model's folder.", fix="Pass e.g. 'model.onnx.data'.")
        use_external, data_name = True, external_data
    if not use_external and size + _GRAPH_MARGIN >= _LIMIT:
        raise SaveError(f"The model's weights take {size / 1e9:.2f} GB; one .onnx file is "
                        "limited to 2 GB.", fix="Pass external_data=True.")
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(target, e) from e
    if use_external:
        base, k = data_name, 1
        while _real(folder / data_name) in protected or _real(folder / data_name) == \
                _real(target):
            if explicit:
                what = protected.get(_real(folder / data_name), "the model file itself")
                raise SaveError(f"Refusing to write external data to {data_name!r}: it is "
                                f"{what}.", fix="Pass another external_data file name.")
            data_name = f"{base}.{k}"
            k += 1
        if data_name != base:
            logger.info("%s is read by the model; writing weights to %s", base, data_name)
    write_model(model, target, data_name if use_external else None, check=check)
    return target


def _data_name(target: Path) -> str:
    """``<file name>.data``: the data file's location is a UTF-8 string in the model, so a
    file name that is not UTF-8 (bytes Linux allows, surrogate escapes in Python) has its
    undecodable bytes written as U+FFFD there."""
    name = f"{target.name}.data"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        name = os.fsencode(name).decode("utf-8", "replace")
    return name


#: ModelProto's fields: number -> wire type (0 varint, 2 length-delimited).
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
#: A model in onnx's text formats (onnx.save(..., format="textproto" / "json")).
_TEXT_MODEL = re.compile(rb'\s*(?:#[^\n]*\n\s*)*(?:(?:ir_version|opset_import|producer_name|'
                         rb'producer_version|domain|model_version|doc_string|graph|'
                         rb'metadata_props|functions)\s*[:{]|\{\s*"(?:irVersion|opsetImport|'
                         rb'producerName|graph)")')


def _model_head(head: bytes, size: int, *, strict: bool = False) -> bool:
    """Whether ``head`` (the first bytes of a file of ``size`` bytes) reads as the start of
    a serialized ModelProto: each whole field in it one of ModelProto's, of its wire type,
    and no length past the file's end. Writers put ir_version (0x08) first, but a model
    without one (onnx.save writes it so) starts with another field. ``strict``: a 0x08 first
    byte alone does not do (a ``.data`` file of weights starts with it one time in 256)."""
    if head[:1] == b"\x08" and not strict:
        return True
    pos = fields = 0
    try:
        while pos < len(head):
            key, pos = _read_varint(head, pos)
            if _MODEL_FIELDS.get(key >> 3) != key & 7:
                return False
            value, pos = _read_varint(head, pos)
            if key & 7 == 2:
                if pos + value > size:
                    return False
                pos += value
            fields += 1
    except IndexError:  # a field cut by the end of the head
        pass
    except ValueError:  # a varint past 64 bits
        return False
    return fields > 0


def _not_a_model(path: Path) -> str | None:
    """What the non-empty regular file at ``path`` is, when it is not an ONNX model (its
    first bytes read as a ModelProto's fields, or a model in onnx's text formats), else None
    (also when there is no file, or it cannot be read: the write says)."""
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return None
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return None
    if _model_head(head, size, strict=path.name.endswith(".data")) or _TEXT_MODEL.match(head):
        return None
    if path.name.endswith(".data"):
        return "a model's external data file, by its name"
    return f"it starts with the bytes {head[:8].hex(' ')}"


def write_model(model: LabModel, target: str | os.PathLike, data_name: str | None, *,
                check: Check | None = None) -> Path:
    """Write ``model`` to ``target`` by the rule of this module: with ``data_name`` (a file
    name in ``target``'s folder), every tensor above :data:`INLINE_MAX_BYTES` goes there
    and the smaller ones stay inline; with None, one file. Atomic (temporaries in the
    target folder, renamed when complete), no checks of what the path is (:func:`save`
    makes those); the model itself is left as it was. ``check`` (see :func:`save`) runs on
    the complete temporaries, before anything is replaced.

    Raises:
        SaveError: the model cannot be serialized, passes 2 GB in one file, or ``check``
            found a problem.
        WriteError: the file system refused a write.

    Example:
        >>> write_model(lab.model, tmp / "model.onnx", "model.onnx.data")
    """
    target = user_path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _target_lock(_real(target)):
            _sweep(target)
            if data_name is not None and _any_external(model.ir):
                _save_pair(model.ir, target, data_name, check)
            else:
                with _replacing(target) as tmp:
                    m = model.ir
                    if model.has_external_data:
                        m = model.clone().ir
                        ir.external_data.load_to_model(m)
                    if target.suffix != ".onnx" or not _write_streamed(m, tmp):
                        _write_proto(_serialize(m, target), tmp)
                    _checked(check, tmp, target)
    except LabError:
        raise
    except OSError as e:
        raise write_error(target, e) from e
    return target


def _checked(check: Check | None, written: Path, target: Path) -> None:
    """SaveError naming ``target`` when ``check`` finds ``written`` does not load."""
    if check is None:
        return
    problem = check(written)
    if problem:
        raise SaveError(f"{str(target)!r} would not load in onnxruntime from its folder: "
                        f"{problem}", fix="Nothing was replaced. lab.history shows the steps (a "
                        "failed one, or the one the message names: lab.undo() or "
                        "lab.checkout(N) goes back before it); save with external_data=False to keep every "
                        "tensor inside the file, check=False to write it as it is, or report "
                        "the model to onnx_lab.")


def _any_external(m: ir.Model) -> bool:
    """Whether some tensor of ``m`` goes to a data file by the rule (above the inline bound,
    and not one that is always kept inline): an initializer, or a Constant's value."""
    return any(t is not None and t.nbytes > INLINE_MAX_BYTES
               and not isinstance(t, (ir.StringTensor, UnreadableTensor))
               for g in m.graphs() for v in g.initializers.values()
               for t in (v.const_value,)) or any(
        t.nbytes > INLINE_MAX_BYTES for _, _, t in _attribute_tensors(m))


def _attribute_tensors(m: ir.Model) -> list[tuple[ir.Node, str, ir.TensorProtocol]]:
    """(node, attribute name, tensor) of every TENSOR attribute holding numbers (a Constant's
    value) in ``m``'s graphs, bodies and functions."""
    return [(n, key, a.value) for n, key, a in tensor_attributes(m)
            if a.type == ir.AttributeType.TENSOR and a.value is not None
            and not isinstance(a.value, (ir.StringTensor, UnreadableTensor))]


def _unload_attributes(m: ir.Model, folder: Path, data_name: str
                       ) -> list[tuple[ir.Node, str, ir.Attr]]:
    """Append the attribute tensors above the inline bound to ``folder / data_name`` and
    point the attributes at them (onnx_ir's ``unload_from_model`` moves initializers only:
    a 300 MB Constant was written inside the .onnx file, a 2.2 GB one could not be written);
    returns the replaced attributes, for the caller to put back."""
    big = [(n, key, t) for n, key, t in _attribute_tensors(m) if t.nbytes > INLINE_MAX_BYTES]
    replaced: list[tuple[ir.Node, str, ir.Attr]] = []
    if not big:
        return replaced
    with open(folder / data_name, "ab") as f:
        for node, key, t in big:
            offset = f.tell()
            pad = (-offset) % _ALIGN
            f.write(b"\0" * pad)
            offset += pad
            data = t.tobytes()
            f.write(data)
            old = node.attributes[key]
            replaced.append((node, key, old))
            node.attributes[key] = ir.AttrTensor(key, ir.ExternalTensor(
                data_name, offset, len(data), t.dtype, shape=t.shape, name=t.name,
                doc_string=t.doc_string, base_dir=str(folder)), doc_string=old.doc_string)
    return replaced


_ALIGN = 64  # offset alignment of the attribute tensors appended to a data file


# ---------------------------------------------------------------------------- atomic writes
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _target_lock(target: Path) -> Iterator[None]:
    """One save at a time per target in this process: two threads saving to one path each
    write their own temporaries, and the renames of one pair never interleave with the
    other's (which would leave one's model next to the other's data)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(target, threading.Lock())
    with lock:
        yield


def _token() -> str:
    """Unique per process, thread and call: temporaries of concurrent saves never collide."""
    return f"{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}"


def _tmp_name(name: str, token: str, suffix: str = "") -> str:
    return f".{name}.{token}.tmp{suffix}"


_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-\d+-[0-9a-f]{8}\.tmp")


def _sweep(target: Path) -> None:
    """Remove temporaries a killed process left next to ``target`` (their pid is gone)."""
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    for entry in entries:
        m = _TMP.match(entry.name)
        if m is None or not m.group("name").startswith(target.name):
            continue
        pid = int(m.group("pid"))
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)  # links inside are removed, never followed
            else:
                os.unlink(entry.path)
            logger.info("removed %s, left by a save that was killed", entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


_REASONS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
            errno.EPERM: "operation not permitted",
            errno.ENOTDIR: "a parent of the path is a file, not a folder",
            errno.EISDIR: "the path is a folder", errno.EEXIST: "a parent of the path is a file",
            errno.ENAMETOOLONG: "the file name is too long",
            errno.EFBIG: "the file is too large for the file system"}


def write_error(target: Path, e: OSError) -> WriteError:
    """``e`` (a failed write of ``target``) as a WriteError naming the path and the cause."""
    reason = _REASONS.get(e.errno or -1) or e.strerror or str(e) or type(e).__name__
    where = f" ({e.filename})" if e.filename and str(e.filename) != str(target) else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "Free space or pick a folder on another disk"
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        what = "Pick a folder you can write to"
    else:
        what = "Free space or pick a writable folder"
    return WriteError(f"Cannot write {str(target)!r}: {reason}{where}.",
                      fix=f"{what}; the old file, if any, is unchanged.")


def _serialize(m: ir.Model, target: Path) -> onnx.ModelProto:
    try:
        return ir.to_proto(m)
    except LabError:
        raise
    except Exception as e:  # noqa: BLE001 - what onnx_ir cannot write is a SaveError
        cause: BaseException = e
        while cause.__cause__ is not None:
            cause = cause.__cause__
        raise SaveError(f"Cannot write {str(target)!r}: the model cannot be serialized "
                        f"({type(cause).__name__}: {str(cause)[:200]}).",
                        fix="lab.check() names what is malformed.") from e


def _write_proto(proto: onnx.ModelProto, path: Path) -> None:
    try:
        data = proto.SerializeToString()
    except (ValueError, EncodeError) as e:  # over 2 GB, or a value protobuf cannot encode
        raise SaveError(f"Cannot write {str(path)!r}: {e}.",
                        fix="Pass external_data=True.") from e
    with _create(path) as f:
        f.write(data)


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _create(path: Path):  # noqa: ANN202 - a binary file object
    """``path`` (a name in a private temporary folder) created exclusively for writing: an
    existing file or a link there is an error, never followed or truncated."""
    return os.fdopen(os.open(path, _NEW, 0o666), "wb")


_ATTEMPTS = 8


@contextlib.contextmanager
def _private_folder(final: Path) -> Iterator[Path]:
    """A fresh folder ``.<name>.<token>.tmp`` beside ``final``, made by ``mkdir`` (which
    fails on anything already there, a planted link included) with mode 0700; removed with
    whatever is left in it when the block ends. A clash takes another token."""
    for attempt in range(_ATTEMPTS):
        tmp = final.with_name(_tmp_name(final.name, _token()))
        try:
            os.mkdir(tmp, 0o700)
            break
        except FileExistsError:
            if attempt == _ATTEMPTS - 1:
                raise WriteError(f"Cannot write {str(final)!r}: {_ATTEMPTS} temporary names "
                                 f"beside it were taken (the last: {tmp.name!r}).",
                                 fix="Remove the stray .*.tmp files or links in that folder, "
                                 "or save elsewhere.") from None
            logger.warning("%s exists (a stray file or a planted link); taking another "
                           "temporary name", tmp)
    try:
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)


def _save_pair(m: ir.Model, target: Path, data_name: str, check: Check | None = None
               ) -> None:
    """Write ``m`` to ``target`` with its initializers in ``data_name`` (same folder): both
    to a private temporary folder first (``check`` runs on the model there: it names its data
    file beside it by the final name), then the data renamed, then the model."""
    final = _real(target) if target.is_symlink() else target
    folder = final.parent
    values = [v for g in m.graphs() for v in g.initializers.values()]
    tensors = [v.const_value for v in values]
    with _private_folder(final) as tmp:
        model_tmp = tmp / final.name
        moved: list[tuple[ir.Node, str, ir.Attr]] = []
        try:
            for v, t in zip(values, tensors, strict=True):
                if isinstance(t, (ir.StringTensor, UnreadableTensor)):
                    v.const_value = kept_inline(t)  # restored below with the others
            # onnx_ir writes the data (in the private folder) and points the tensors at it
            ir.external_data.unload_from_model(m, tmp, data_name,
                                               size_threshold_bytes=INLINE_MAX_BYTES)
            moved += _unload_attributes(m, tmp, data_name)
            proto = _serialize(m, target)
        finally:
            for v, t in zip(values, tensors, strict=True):  # the version stays as it was
                v.const_value = t
            for node, key, attr in moved:
                node.attributes[key] = attr
        _write_proto(proto, model_tmp)
        _checked(check, model_tmp, target)
        if final.exists():
            os.chmod(model_tmp, final.stat().st_mode & 0o7777)
        if (tmp / data_name).exists():
            os.replace(tmp / data_name, folder / data_name)
        os.replace(model_tmp, final)  # last: the new model never points at missing data


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[Path]:
    """A temporary path in ``target``'s folder that replaces ``target`` when the block ends.

    The old file is never truncated: a model opened with ``mmap=True`` (the command line)
    keeps reading its weights from the old file while the new one is written, and a failed
    or interrupted save leaves the old file as it was. A symbolic link is followed (the file
    it points to is replaced); the old file's permissions are kept. The temporary lies in a
    private folder (:func:`_private_folder`) unique per process, thread and call.
    """
    final = _real(target) if target.is_symlink() else target
    with _private_folder(final) as folder:
        tmp = folder / final.name
        yield tmp
        if final.exists():
            os.chmod(tmp, final.stat().st_mode & 0o7777)
        os.replace(tmp, final)


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
    # (a LazyTensor: e.g. a weight ``open`` reads in the background; numpy() is its cache)
    if isinstance(t, (ir.Tensor, ir.LazyTensor)) and t.dtype in _PLAIN:
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
        # An UnreadableTensor stays the message it was read as (written back unchanged).
        if (t is not None and not isinstance(t, (ir.ExternalTensor, ir.StringTensor,
                                                 UnreadableTensor))
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
        proto = _serialize(m, target)
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
    with _create(target) as f:
        f.write(top)
        f.write(_key(_GRAPH_FIELD) + _varint(graph_len))
        f.write(graph_rest)
        for e in entries:
            for p in e:
                f.write(p)
    return True
