"""Paths as onnxruntime's Python binding takes them.

The binding takes a path only as a ``str`` that encodes to UTF-8. On Linux a folder name may
hold any bytes; Python gives such a name back with surrogate escapes (``'\\udcff'``), and
handing it to ``InferenceSession`` or to a session's config entry raised ``TypeError``
("incompatible function arguments"): a profile of a model in such a folder ended in that
traceback, and ``lab.save`` there refused a good model as one that "would not load".
:func:`ort_path` gives such a path through a symbolic link made for it in a temporary folder
whose name is UTF-8 (one per folder and process, removed at exit); any other path is
returned as it is.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

__all__ = ["ort_path"]

_lock = threading.Lock()
_root: str | None = None
_links: dict[tuple[int, str], str] = {}


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _link_root() -> str:
    """The temporary folder that holds the links of this process (under ``_lock``)."""
    global _root
    if _root is None or not os.path.isdir(_root):
        _root = tempfile.mkdtemp(prefix="onnx_lab_paths_")
        atexit.register(shutil.rmtree, _root, True)  # the links only: rmtree follows none
    return _root


def _folder_link(folder: str) -> str:
    """A UTF-8 path that leads to ``folder`` (under ``_lock``)."""
    key = (os.getpid(), folder)
    link = _links.get(key)
    if link is None or not os.path.islink(link):
        link = os.path.join(_link_root(), f"d{len(_links)}")
        os.symlink(folder, link)
        _links[key] = link
    return link


def ort_path(path: str | os.PathLike) -> str:
    """``path`` (a file or a folder) as a ``str`` onnxruntime's binding takes: itself when it
    is UTF-8, else a path through a link whose own name is UTF-8. A file is reached through
    a link to its folder, so the external data files beside it resolve as they do from the
    file itself; a file whose own name is not UTF-8 gets a folder of links of its own: the
    file as ``model.onnx`` and every file beside it whose name is UTF-8 (external data
    locations are UTF-8 strings in the model)."""
    path = os.path.abspath(os.fsdecode(os.fspath(path)))
    if _utf8(path):
        return path
    folder, name = os.path.split(path)
    with _lock:
        if os.path.isdir(path):
            return _folder_link(path)
        if _utf8(name):
            return os.path.join(_folder_link(folder), name)
        own = tempfile.mkdtemp(prefix="m", dir=_link_root())
        os.symlink(path, os.path.join(own, "model.onnx"))
        for other in os.listdir(folder):
            if other != name and _utf8(other):
                os.symlink(os.path.join(folder, other), os.path.join(own, other))
        return os.path.join(own, "model.onnx")
