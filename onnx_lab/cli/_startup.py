"""Start-up of the ``onnx-lab`` process: sympy loaded when it is first used, not at import.

onnx_ir imports sympy at module level (``onnx_ir/_core.py`` and ``onnx_ir/_symbolic_shapes.py``,
whose table of functions reads ``sympy.Max``... as it is imported), which is 1-2.5 s of a
command's start on a loaded two-core machine (``python -X importtime``); onnx_ir only calls
sympy to do arithmetic on symbolic dims (``SymbolicDim`` expressions), which ``summary``,
``cost`` and ``check`` of most models never do.

:func:`defer_sympy` puts two placeholder modules in ``sys.modules`` before onnx_ir is imported:
``sympy`` and ``onnx_ir._symbolic_shapes``. ``import sympy`` finds the placeholder; its first
attribute read (``sympy.Expr``, ``sympy.sympify``...) imports the real module, which replaces
the placeholder in ``sys.modules``, and every later read goes to it, so every result is the
one the real module gives. A placeholder has a real ``__spec__`` (not initializing), which is
what the import system reads of a module already in ``sys.modules``: ``importlib``'s own
``LazyLoader`` module loads on that read, so it cannot defer a plain ``import`` statement.

Only the console command installs them (``main()`` without ``argv``): a process that calls
``main([...])`` or imports onnx_lab as a library keeps its modules as they are.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["defer_sympy", "DEFERRED"]

#: The modules deferred, in the order their placeholders are installed.
DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _Deferred(types.ModuleType):
    """A module imported on its first attribute read (see the module docstring)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        self.__dict__["_onnx_lab_deferred"] = True

    def __getattr__(self, attr: str) -> Any:  # only for what the placeholder lacks
        return getattr(_load(self.__name__), attr)

    def __dir__(self) -> list[str]:
        return dir(_load(self.__name__))


def _load(name: str) -> types.ModuleType:
    current = sys.modules.get(name)
    if isinstance(current, _Deferred):
        del sys.modules[name]
    return importlib.import_module(name)


def defer_sympy() -> bool:
    """Install the placeholders when neither sympy nor onnx_ir is loaded yet; True if it did.

    Example:
        >>> defer_sympy()  # first thing in the process, before anything imports onnx_ir
        True
    """
    if any(m in sys.modules for m in ("sympy", "onnx_ir", "onnx_ir._core")):
        return False
    for name in DEFERRED:
        sys.modules[name] = _Deferred(name)
    return True
