"""How results draw themselves without importing render/: a registry of views, keyed by type.

Result objects (``Comparison``, ``Profile``, ``Cost``...) live below ``render/`` in the layer
order, so they cannot import it. They keep their public display methods as one-liners that call
:func:`draw`; ``render/`` registers the function behind each (class, kind) pair with
:func:`register`.

Registering by class means importing the modules that define the classes, which ``import
onnx_lab`` should not pay for. So the registrations load lazily, by injection: ``onnx_lab.render``
(imported by ``import onnx_lab``, hence by any ``import onnx_lab.<module>``) hands this module a
loader with :func:`add_loader`, and the first :func:`draw` or :func:`kinds` runs it; the loader
imports ``onnx_lab.render.results``, which registers the views of onnx_lab's own results. This
module never imports render/ itself (that would point against the layer order).

A loader runs once. One that raises is not run again: the first call that ran it raises a
:class:`~onnx_lab.errors.RenderError` chained to the cause, and the later "no view" errors name
the failed loader (a KeyboardInterrupt is no failure: the loader stays pending). While one
thread runs the loaders, the others' lookups wait for them.

Example:
    >>> from onnx_lab import _display
    >>> _display.register(Report, "html", lambda r: "<b>report</b>")
    >>> _display.draw(report, "html")
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from onnx_lab.errors import RenderError

__all__ = ["register", "add_loader", "draw", "kinds", "notebook_html", "NO_MATH"]

# (class, kind) -> view function.
_VIEWS: dict[tuple[type, str], Callable[..., Any]] = {}

# Zero-argument functions that register views, run once before the first lookup.
_LOADERS: list[Callable[[], Any]] = []
# "module.name: error" of each loader that raised (named by the later "no view" errors).
_FAILED: list[str] = []
# One thread runs the pending loaders while the others wait, so that none looks a view up
# half-way through the registrations. Reentrant: a loader may itself call draw or kinds.
_LOCK = threading.RLock()

# Where the views of onnx_lab's own results are registered (named in the error message).
_REGISTRATIONS = "onnx_lab.render.results"


#: The class of the element that holds every ``_repr_html_``: JupyterLab's MathJax leaves its
#: text alone. A model's names are text: ``$\\href{https://...}{Conv}$`` as a node name was
#: typeset into a link reading "Conv" (MathJax's safe mode drops ``javascript:`` links only).
#: pandas' tables get the same from ``display.html.use_mathjax`` (:mod:`onnx_lab._pandas`).
NO_MATH = "mathjax_ignore"


def notebook_html(html: str) -> str:
    """``html`` (markup a view drew with ``render/_html``'s helpers) as a notebook output:
    inside an element MathJax does not typeset."""
    return '<div class="' + NO_MATH + '">' + html + "</div>"


def _name(cls: type) -> str:
    """``module.QualName`` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register(result_type: type, kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``fn(obj, *args, **kw)`` the ``kind`` view ("plot", "html"...) of ``result_type``.

    Args:
        result_type: the class (subclasses inherit the view).
        kind: the view's name; a later registration of the same pair replaces the earlier one.
        fn: called with the result first, then the arguments given to :func:`draw`.

    Returns:
        ``fn`` (so a module can register and keep the name).

    Raises:
        TypeError: ``result_type`` is not a class (a ``"module.Class"`` string, for one).
    """
    if not isinstance(result_type, type):
        hint = (" Import the class and pass it: register(TheClass, kind, fn); the registry is "
                "keyed by types, and its registrations load lazily (add_loader)."
                if isinstance(result_type, str) else "")
        raise TypeError(f"register() takes a class, got {result_type!r}.{hint}")
    _VIEWS[(result_type, kind)] = fn
    return fn


def add_loader(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn()`` (which registers views) once, before the next :func:`draw` or :func:`kinds`.

    A loader that raises is dropped, not retried: that call raises a ``RenderError`` from the
    cause, and later missing views name it.

    Returns:
        ``fn``.
    """
    with _LOCK:
        _LOADERS.append(fn)
    return fn


def _load() -> None:
    """Run the pending loaders, each once, in the order they were added."""
    with _LOCK:  # also when none is pending: another thread may be running the last one
        while _LOADERS:
            fn = _LOADERS.pop(0)  # popped first: a failing or reentrant loader runs once
            try:
                fn()
            except (KeyboardInterrupt, SystemExit):  # interrupted, not failed: run it again
                _LOADERS.insert(0, fn)
                raise
            except Exception as e:
                where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
                _FAILED.append(f"{where}: {type(e).__name__}: {e}")
                raise RenderError(
                    f"Registering the result views failed in {where}: "
                    f"{type(e).__name__}: {e}",
                    fix="Fix the error above (the traceback shows where it was raised); the "
                        "views it would have registered stay missing in this process.") from e


def kinds(obj_or_type: Any) -> list[str]:
    """The view kinds registered for an object's type or its base classes, sorted."""
    _load()
    cls = obj_or_type if isinstance(obj_or_type, type) else type(obj_or_type)
    mro = set(cls.__mro__)
    return sorted({k for (t, k) in _VIEWS if t in mro})


def draw(obj: Any, kind: str, /, *args: Any, **kw: Any) -> Any:
    """Call the ``kind`` view registered for ``obj``'s type (or its nearest base class).

    Raises:
        RenderError: no ``kind`` view is registered for that type; the message names the
            module whose import registers onnx_lab's views, and the kinds that exist. Also
            when a pending loader fails (see :func:`add_loader`).
    """
    _load()
    for cls in type(obj).__mro__:
        fn = _VIEWS.get((cls, kind))
        if fn is not None:
            return fn(obj, *args, **kw)
    cls = type(obj)
    have = kinds(obj)
    known = (f" Registered views of it: {', '.join(have)}." if have
             else " No view of it is registered at all.")
    failed = (" These registrations failed earlier: " + "; ".join(_FAILED) + "."
              if _FAILED else "")
    raise RenderError(
        f"No {kind!r} view is registered for {_name(cls)}.{known}{failed}",
        fix=f"Import {_REGISTRATIONS} (`import onnx_lab` loads it at the first drawing), or "
            f"register one: onnx_lab._display.register({cls.__qualname__}, {kind!r}, fn) "
            f"with {cls.__qualname__} from {cls.__module__}.")
