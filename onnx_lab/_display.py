"""How results draw themselves without importing render/: a registry of views.

Result objects (``Comparison``, ``Profile``, ``Cost``...) live below ``render/`` in the layer
order, so they cannot import it. They keep their public display methods as one-liners that call
:func:`draw`; ``render/`` registers the function behind each (type, kind) pair with
:func:`register`. ``import onnx_lab`` imports the registrations (``onnx_lab.render.results``),
so every result that can exist can draw itself.

Example:
    >>> from onnx_lab import _display
    >>> _display.register("mypkg.results.Report", "html", lambda r: "<b>report</b>")
    >>> _display.draw(report, "html")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx_lab.errors import RenderError

__all__ = ["register", "draw", "kinds"]

# (qualified type name, kind) -> view function. Types are keyed by name so that render/ can
# register a view without importing the (possibly heavy) module that defines the type.
_VIEWS: dict[tuple[str, str], Callable[..., Any]] = {}

# Where the views of onnx_lab's own results are registered (named in the error message).
_REGISTRATIONS = "onnx_lab.render.results"


def _name(result_type: type | str) -> str:
    """``module.QualName`` of a class, or the string itself."""
    if isinstance(result_type, str):
        return result_type
    if isinstance(result_type, type):
        return f"{result_type.__module__}.{result_type.__qualname__}"
    raise TypeError(f"result_type must be a class or a 'module.Class' name, got {result_type!r}")


def register(result_type: type | str, kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``fn(obj, *args, **kw)`` the ``kind`` view ("plot", "html"...) of ``result_type``.

    Args:
        result_type: the class, or its qualified name ``"onnx_lab.numerics.compare.Comparison"``
            (no import of the defining module needed). Subclasses inherit the view.
        kind: the view's name; a later registration of the same pair replaces the earlier one.
        fn: called with the result first, then the arguments given to :func:`draw`.

    Returns:
        ``fn`` (so a module can register and keep the name).
    """
    _VIEWS[(_name(result_type), kind)] = fn
    return fn


def kinds(obj_or_type: Any) -> list[str]:
    """The view kinds registered for an object's type or its base classes, sorted."""
    cls = obj_or_type if isinstance(obj_or_type, type) else type(obj_or_type)
    names = {_name(c) for c in cls.__mro__}
    return sorted({k for (t, k) in _VIEWS if t in names})


def draw(obj: Any, kind: str, /, *args: Any, **kw: Any) -> Any:
    """Call the ``kind`` view registered for ``obj``'s type (or its nearest base class).

    Raises:
        RenderError: no ``kind`` view is registered for that type; the message names the
            module whose import registers onnx_lab's views, and the kinds that exist.
    """
    for cls in type(obj).__mro__:
        fn = _VIEWS.get((_name(cls), kind))
        if fn is not None:
            return fn(obj, *args, **kw)
    name = _name(type(obj))
    have = kinds(obj)
    known = (f" Registered views of it: {', '.join(have)}." if have
             else " No view of it is registered at all.")
    raise RenderError(
        f"No {kind!r} view is registered for {name}.{known}",
        fix=f"Import {_REGISTRATIONS} (`import onnx_lab` does it), or register one with "
            f"onnx_lab._display.register({name!r}, {kind!r}, fn).")
