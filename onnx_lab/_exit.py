"""A faster interpreter exit for the ``onnx-lab`` command.

Installed only by the CLI, which owns its process: a library must not change how the
interpreter of a user's script or notebook kernel exits.

At exit CPython runs full garbage collections while it tears the modules down. With onnx_lab
imported (onnx_ir pulls in sympy, plus pandas, onnx, and a loaded model's graph) that means
traversing ~170,000 tracked objects several times: ~0.3 s of a BERT-base optimize run (measured
with perf: the time is in ``gc_collect_main``), more than the run's save. The hook below, run
first among the exit steps registered after it, collects the garbage that exists at that point
(so finalizers of unreachable objects still run, as they would have) and then freezes the
collector: module teardown then frees objects by reference counting only, without traversing
them. Objects kept alive until exit by cycles are reclaimed by the operating system, which
Python permits ("It is not guaranteed that __del__() methods are called for objects that still
exist when the interpreter exits", reference manual, object.__del__). Standard streams and
atexit handlers are unaffected; nothing calls ``os._exit``.

Extension modules built with nanobind that define classes (onnxsim's) print "nanobind: leaked
... instances" for objects still alive at exit, so with one of those loaded the hook does
nothing and the exit is the normal one.
"""

from __future__ import annotations

import atexit
import gc
import sys


def _nanobind_classes_loaded() -> bool:
    """Whether a loaded extension module defines a nanobind class (a few ms to check)."""
    for mod in list(sys.modules.values()):
        # The module's own __file__, read from its dict: a getattr would import a module that
        # is still a placeholder (onnx_lab.cli._startup's deferred sympy) at exit.
        path = getattr(mod, "__dict__", {}).get("__file__") or ""
        if not path.endswith((".so", ".pyd")):
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, type) and type(value).__module__ == "nanobind":
                return True
    return False


def _freeze_at_exit() -> None:
    if _nanobind_classes_loaded():
        return
    gc.collect()
    gc.freeze()


_INSTALLED = False


def install() -> None:
    """Register the exit hook (once); called by :func:`onnx_lab.cli.main`."""
    global _INSTALLED
    if not _INSTALLED:
        atexit.register(_freeze_at_exit)
        _INSTALLED = True
