"""External data stays in the folder a model was opened from.

At open the model's folder is resolved to an absolute real path and the identity (device,
inode) of the folder and of each data file is recorded on the model's external tensors
(:class:`PinnedExternalTensor`). Every later read checks the identity again, so changing the
current folder (``os.chdir``, a notebook's ``%cd``) or replacing the folder (or a data file)
by a link to another one after open cannot make the model read other files: the read either
comes from the file recorded at open or ends in an :class:`~onnx_lab.errors.ExternalDataError`.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx_ir as ir

from onnx_lab.core._location import user_path
from onnx_lab.errors import ExternalDataError

__all__ = ["PinnedExternalTensor", "pin_external", "pin_like", "verify_files", "opened_path",
           "read_attribute_tensors", "hard_link_error", "external_attributes_read",
           "tensor_attributes"]

_Id = tuple[int, int]


def _identity(path: str) -> _Id | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class PinnedExternalTensor(ir.ExternalTensor):
    """An external tensor that reads only the file and folder identified at open."""

    __slots__ = ("_pin",)

    _pin: tuple[str, _Id | None, _Id | None]

    def verify(self) -> None:
        """Raise ExternalDataError when the folder or the data file is no longer the one
        recorded at open (moved, replaced by a link, deleted)."""
        pin = getattr(self, "_pin", None)
        if pin is None:
            return
        folder, folder_id, file_id = pin
        if os.fspath(self.base_dir) != folder:
            return  # pointed elsewhere on purpose (set_base_dir): not the folder of the open
        now_folder = _identity(folder)
        path = os.path.join(folder, os.fspath(self.location))
        now_file = _identity(path)
        if now_folder is None or now_file is None:
            raise ExternalDataError(
                f"Weight {self.name!r}: its external data file {str(self.location)!r} is "
                f"gone from {folder!r} since the model was opened.",
                fix="Put the model's folder back, or open the model again.")
        if now_folder != folder_id or now_file != file_id:
            raise ExternalDataError(
                f"Weight {self.name!r}: the folder {folder!r} or its data file "
                f"{str(self.location)!r} was replaced since the model was opened (another "
                "file or a link now stands there); onnx_lab reads only the files it opened.",
                fix="Open the model again from the folder you mean.")

    def _load(self) -> None:
        self.verify()
        # onnx_ir refuses to read a file with several hard links (a raw ValueError): said
        # first. onnxruntime reads it (sessions get the path), so only onnx_lab's own reads
        # (weight values, a save) stop here.
        if _links(os.path.join(os.fspath(self.base_dir), os.fspath(self.location))) > 1:
            raise hard_link_error(self.name, os.fspath(self.location))
        super()._load()


def _links(path: str) -> int:
    try:
        return os.stat(path).st_nlink
    except OSError:
        return 1


def hard_link_error(name: str | None, location: str) -> ExternalDataError:
    """The error for a data file with several hard links, which onnx_ir and onnx both refuse
    to read (a hard link can expose a file from outside the model's folder): named before any
    of them reads it (their own errors were a raw ValueError and a ValidationError)."""
    return ExternalDataError(
        f"Cannot read weight {name!r}: its external data file {location!r} has several hard "
        "links, which onnx_ir and onnx refuse to read (a hard link can expose a file from "
        "outside the model's folder).",
        fix="Replace the link by a copy (cp, not ln) so the file has a single link.")


def _pinned(t: ir.ExternalTensor, folder: str, folder_id: _Id | None,
            ids: dict[str, _Id | None]) -> PinnedExternalTensor:
    loc = os.fspath(t.location)
    if loc not in ids:
        ids[loc] = _identity(os.path.join(folder, loc))
    new = PinnedExternalTensor(loc, t.offset, t.length, t.dtype, shape=t.shape, name=t.name,
                               doc_string=t.doc_string, metadata_props=dict(t.metadata_props),
                               base_dir=folder)
    new._pin = (folder, folder_id, ids[loc])
    return new


def _graphs(model: ir.Model) -> Iterator[ir.Graph | ir.Function]:
    yield from model.graphs()
    for f in model.functions.values():
        yield f
        todo: list = [f]  # (not onnx_ir's RecursiveGraphIterator: it raised TypeError on a
        while todo:  # graph attribute taken by reference, which has no value here)
            for node in todo.pop():
                for a in node.attributes.values():
                    if a.is_ref():
                        continue
                    if a.type == ir.AttributeType.GRAPH:
                        yield a.value
                        todo.append(a.value)
                    elif a.type == ir.AttributeType.GRAPHS:
                        yield from a.value
                        todo.extend(a.value)


def tensor_attributes(model: ir.Model) -> list[tuple[ir.Node, str, ir.Attr]]:
    """(node, name, attribute) of every TENSOR and TENSORS attribute of every graph, body and
    function of ``model`` (a list: callers replace attributes while they go)."""
    return [(node, key, a) for g in _graphs(model) for node in g
            for key, a in node.attributes.items()
            if a.type in (ir.AttributeType.TENSOR, ir.AttributeType.TENSORS)]


def _swap(model: ir.Model, fn: Any, initializers: bool = True) -> None:
    """Replace every external tensor ``t`` (initializers, TENSOR/TENSORS attributes of every
    graph, body and function) by ``fn(t)``; ``initializers`` False: those of attributes."""
    if initializers:
        for g in _graphs(model):
            for v in g.initializers.values() if isinstance(g, ir.Graph) else ():
                if isinstance(v.const_value, ir.ExternalTensor):
                    v.const_value = fn(v.const_value)
    for node, key, a in tensor_attributes(model):
        if a.type == ir.AttributeType.TENSOR and isinstance(a.value, ir.ExternalTensor):
            node.attributes[key] = ir.AttrTensor(key, fn(a.value), doc_string=a.doc_string)
        elif a.type == ir.AttributeType.TENSORS and any(
                isinstance(t, ir.ExternalTensor) for t in a.value):
            node.attributes[key] = ir.AttrTensors(
                key, [fn(t) if isinstance(t, ir.ExternalTensor) else t for t in a.value],
                doc_string=a.doc_string)


def pin_external(model: ir.Model, folder: str | os.PathLike) -> str:
    """Point every external tensor of ``model`` at ``folder`` resolved to its real absolute
    path, recording the identity of the folder and of each data file; returns that path."""
    real = os.path.realpath(folder)
    folder_id = _identity(real)
    ids: dict[str, _Id | None] = {}
    _swap(model, lambda t: _pinned(t, real, folder_id, ids))
    return real


def _in_memory(t: ir.ExternalTensor) -> ir.Tensor:
    return ir.Tensor(t.numpy(), dtype=t.dtype, name=t.name, doc_string=t.doc_string,
                     metadata_props=dict(t.metadata_props))


def read_attribute_tensors(model: ir.Model) -> int:
    """Read the external tensors of node attributes (a Constant's ``value`` saved by
    ``onnx.save(..., convert_attribute=True)``, weights held in Constants) into memory, in
    every graph, body and function; how many. Initializers stay external (read on use).

    onnx_ir writes and reads initializers' external data only (``unload_from_model``,
    ``load_to_model``): a saved model's Constant kept the source's location and offset, which
    in the new data file held another weight (outputs off by 1605, no error) or nothing (it
    did not load), and a tool given the weights read the Constant from its own folder.
    Read at open (once, checked against the files pinned there), they are plain tensors
    everywhere after.
    """
    count = 0

    def fn(t: ir.ExternalTensor) -> ir.TensorProtocol:
        nonlocal count
        count += 1
        return _in_memory(t)

    _swap(model, fn, initializers=False)
    if count:
        _READ_AT_OPEN[model] = count
    return count


# Models whose attribute tensors were external in their file (read at open): a save with
# external_data="auto" keeps a data file for them, as for external initializers.
_READ_AT_OPEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def external_attributes_read(model: ir.Model) -> int:
    """How many external attribute tensors :func:`read_attribute_tensors` read for
    ``model`` at open (0: none, or another model)."""
    return _READ_AT_OPEN.get(model, 0)


def _iter_external(model: ir.Model) -> Iterator[ir.ExternalTensor]:
    for g in _graphs(model):
        for v in g.initializers.values() if isinstance(g, ir.Graph) else ():
            if isinstance(v.const_value, ir.ExternalTensor):
                yield v.const_value
    for _node, _key, a in tensor_attributes(model):
        values = [a.value] if a.type == ir.AttributeType.TENSOR else a.value
        yield from (t for t in values if isinstance(t, ir.ExternalTensor))


def verify_files(model: ir.Model) -> None:
    """Check, before a reader outside onnx_ir (onnxruntime, a save, onnx's loader) opens the
    data files by path, that the folder and files are the ones recorded at open.

    Raises:
        ExternalDataError: a folder or data file was replaced or removed since open.
    """
    seen: set[tuple[str, str]] = set()
    for t in _iter_external(model):
        if isinstance(t, PinnedExternalTensor):
            key = (os.fspath(t.base_dir), os.fspath(t.location))
            if key not in seen:
                seen.add(key)
                t.verify()


def opened_path(path: str | os.PathLike) -> Path:
    """``path`` with its folder made absolute and real (links and ``..`` resolved) and its
    file name kept (a link in a snapshot folder stays that link: its data files lie beside
    it, not beside the blob it points to); a leading ``~`` is the home folder."""
    p = os.path.abspath(user_path(path))
    return Path(os.path.realpath(os.path.dirname(p))) / os.path.basename(p)


def pin_like(model: ir.Model, like: ir.Model) -> None:
    """Give the external tensors of ``model`` (a copy of ``like`` through its message) the
    identities recorded on ``like``'s, matched by folder and location."""
    pins = {(os.fspath(t.base_dir), os.fspath(t.location)): t._pin
            for t in _iter_external(like) if isinstance(t, PinnedExternalTensor)
            and getattr(t, "_pin", None) is not None}
    if not pins:
        return

    def fn(t: ir.ExternalTensor) -> ir.ExternalTensor:
        pin = pins.get((os.fspath(t.base_dir), os.fspath(t.location)))
        if pin is None or isinstance(t, PinnedExternalTensor):
            return t
        new = PinnedExternalTensor(os.fspath(t.location), t.offset, t.length, t.dtype,
                                   shape=t.shape, name=t.name, doc_string=t.doc_string,
                                   metadata_props=dict(t.metadata_props), base_dir=pin[0])
        new._pin = pin
        return new

    _swap(model, fn)
