"""The exceptions users see.

Every error a user can trigger is a :class:`LabError` subclass whose message names the thing
(file, node, tensor, dim) and the fix. The CLI maps them to one line on stderr and exit code 2;
widgets show them inside the widget.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import re
import types
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "LabError",
    "ModelLoadError",
    "ExternalDataError",
    "TensorDataError",
    "UnknownNameError",
    "DimError",
    "InputError",
    "PassError",
    "PassParameterError",
    "SaveError",
    "WriteError",
    "ExtractError",
    "RuntimeLoadError",
    "RunLimitError",
    "CacheError",
    "ProviderError",
    "RenderError",
    "ConversionBug",
    "clip_text",
    "visible",
    "close_matches",
    "check_keywords",
    "keyword_names",
    "strict_keywords",
    "forwards",
]


class LabError(Exception):
    """Base class of every error onnx_lab raises on purpose.

    Attributes:
        fix: a short hint of what to do about it (also part of the message).
    """

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.problem = _bounded(visible(str(message)))
        self.fix = _bounded(visible(str(fix))) if fix is not None else None
        super().__init__(f"{self.problem} {self.fix}" if fix else self.problem)


# What a terminal acts on, written as escapes (the CLI's streams, every LabError's message: a
# tensor name holding ESC ] 8 made a fake link where a script printed the error): C0
# controls but tab and newline (a carriage return in a name rewrote the start of its line;
# progress bars write to the stream underneath); DEL and the C1 controls; the line and
# paragraph separators; the bidirectional marks, embeddings, overrides and isolates.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """``text`` with the characters a terminal would act on written as their escapes.

    Example:
        >>> visible("a\\x1b[2Jb")
        'a\\\\x1b[2Jb'
    """
    return _HIDDEN.sub(_escape, text)


#: A message quoting a model's strings stays readable: a 1 MB node name was quoted in full.
MESSAGE_MAX_CHARS = 8000


def clip_text(text: str, limit: int, head_share: float = 0.75, counted: bool = True) -> str:
    """``text`` within about ``limit`` characters, its start (``head_share`` of them) and end
    kept; ``counted``: the cut says how many characters it left out.

    Example:
        >>> len(clip_text("x" * 10_000, 100, counted=False))
        100
    """
    text = str(text)
    if len(text) <= limit:
        return text
    head = int(limit * head_share)
    tail = max(0, limit - head - (60 if counted else 3))
    left = len(text) - head - tail
    mark = f" … [{left:,} characters left out] … " if counted else " … "
    return f"{text[:head]}{mark}{text[-tail:] if tail else ''}"


def _bounded(text: str) -> str:
    """``text`` within :data:`MESSAGE_MAX_CHARS`, its start and end kept."""
    return clip_text(text, MESSAGE_MAX_CHARS)


class ModelLoadError(LabError):
    """The source is not a readable ONNX model (missing, empty, not protobuf, a zip...)."""


class ExternalDataError(ModelLoadError):
    """External data of a model is missing, truncated or points outside the model's folder."""


class TensorDataError(ModelLoadError):
    """A tensor's stored data does not match its dims and data type, so its values cannot be
    read (the model opens; tables, summary and ``check()`` show the tensor)."""


class UnknownNameError(LabError, KeyError):
    """A node id, tensor name, graph path, scope, pass or match id does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else ""


class DimError(LabError):
    """Symbolic dims have no value, or a given dim/shape does not fit the model."""


class InputError(LabError):
    """Feeds or parameters passed by the user do not fit the model or the function."""


class CacheError(InputError):
    """A decoder's KV-cache inputs and outputs cannot be paired (``past_key_values.*`` with
    ``present.*``), or a generation does not fit the model (a prompt longer than its context)."""


class PassError(LabError):
    """A transform could not be applied (bad params, unknown match, failing tool)."""


class PassParameterError(InputError, PassError):
    """A pass was given a parameter it does not have: an InputError (with close matches) and
    a PassError (what a pass's bad parameters always raised)."""


class SaveError(LabError):
    """Saving would overwrite the source model or cannot be done as asked."""


class WriteError(SaveError, OSError):
    """The file system refused a write (no space, read-only, a parent that is a file...).

    Also an ``OSError``, so code that handles failed writes keeps working."""


class ExtractError(LabError):
    """A subgraph boundary does not cut the graph or names unknown tensors."""


class RuntimeLoadError(LabError):
    """onnxruntime cannot load or run a model."""


class RunLimitError(LabError):
    """A run of a model would pass, or passed, its memory or time limit
    (:mod:`onnx_lab.core.limits`): refused before it started, or stopped.

    Attributes:
        limit: ``"memory"`` or ``"time"``: which limit (None when not said).
    """

    def __init__(self, message: str, *, fix: str | None = None,
                 limit: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.limit = limit


class ProviderError(LabError):
    """An execution provider is unknown or not installed."""


class RenderError(LabError):
    """A rendering request cannot be drawn as asked."""


class ConversionBug(LabError):
    """onnx_lab's own float16/bfloat16 conversion wrote a model that does not type-check,
    load or run: a bug in onnx_lab to report (with the model), not a problem of the user's
    model."""


def close_matches(value: str, candidates: Iterable[str], n: int = 5) -> list[str]:
    """Return up to ``n`` candidates that look like ``value`` (for 'did you mean' hints)."""
    pool = [c for c in candidates if c]
    found = difflib.get_close_matches(value, pool, n=n, cutoff=0.5)
    if len(found) < n:
        low = value.lower()
        for c in pool:
            if low and low in c.lower() and c not in found:
                found.append(c)
                if len(found) >= n:
                    break
    return found


def unknown_name(kind: str, value: str, candidates: Iterable[str], fix: str | None = None
                 ) -> UnknownNameError:
    """Build an :class:`UnknownNameError` naming ``value`` and listing close matches."""
    pool = list(candidates)
    near = close_matches(str(value), pool)
    hint = f" Close matches: {', '.join(repr(m) for m in near)}." if near else ""
    msg = f"Unknown {kind} {value!r}.{hint}"
    return UnknownNameError(msg, fix=fix or f"Use one of the {len(pool)} known {kind}s "
                            f"(see lab.nodes / lab.tensors).")


# ---------------------------------------------------------------------- keyword arguments
# One rule for every door (onnx_lab.f, lab.f, the steps): an unknown keyword argument is an
# InputError naming it with its close matches, never ignored and never a bare TypeError.


def keyword_names(fn: Callable[..., Any]) -> list[str]:
    """The names ``fn`` accepts as keyword arguments (positional-only and ``*args``/``**kw``
    left out)."""
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def check_keywords(where: str, given: Iterable[str], accepted: Iterable[str]) -> None:
    """Raise :class:`InputError` when ``given`` holds a name that is not in ``accepted``.

    The message names each unknown keyword with its close matches (``min_topl`` → did you
    mean ``min_top1``) and lists the accepted ones.

    Example:
        >>> check_keywords("find_precision('int4')", ["min_topl"], ["min_top1", "max_kl"])
        Traceback (most recent call last):
        InputError: find_precision('int4') got an unknown keyword 'min_topl' (did you mean 'min_top1'?). ...
    """
    ok = list(dict.fromkeys(accepted))
    known = set(ok)
    bad = [k for k in given if k not in known]
    if not bad:
        return
    parts = []
    for k in bad:
        near = close_matches(k, ok, n=3)
        parts.append(f"{k!r}" + (f" (did you mean {' or '.join(repr(m) for m in near)}?)"
                                 if near else ""))
    plural = "s" if len(bad) > 1 else ""
    raise InputError(f"{where} got an unknown keyword{plural} {', '.join(parts)}.",
                     fix=f"It takes: {', '.join(ok)}." if ok else "It takes no keywords.")


def strict_keywords(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: an unknown keyword argument of ``fn`` raises :func:`check_keywords`'s
    InputError (with close matches) instead of Python's TypeError; the signature stays
    ``fn``'s (``help()`` shows it)."""
    names = [n for n in keyword_names(fn) if n != "self"]
    where = f"{fn.__qualname__}()"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        check_keywords(where, kw, names)
        return fn(*args, **kw)

    return wrapper


def strict_methods(cls: type) -> type:
    """Class decorator: every public method with an explicit signature (no ``**kw`` of its
    own) gets :func:`strict_keywords`, so a misspelt keyword is an InputError with close
    matches, as it is for the :func:`forwards` methods.

    Example:
        >>> @strict_methods
        ... class Lab: ...
    """
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        params = inspect.signature(fn).parameters.values()
        if any(p.kind == p.VAR_KEYWORD for p in params):
            continue
        setattr(cls, name, strict_keywords(fn))
    return cls


class _Forwarding:
    """A method whose ``**kw`` go to another function: its signature (``help()``,
    ``inspect.signature``, Jupyter's Shift-Tab) is its own parameters followed by the
    target's keywords, and an unknown keyword raises InputError with close matches before
    anything runs. The target is named by a dotted path and imported on first use, so that
    heavy modules stay unimported until a method needs them."""

    def __init__(self, fn: Callable[..., Any], targets: tuple[str, ...],
                 drop: tuple[str, ...]) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._targets = targets
        self._drop = set(drop)
        self._sig: inspect.Signature | None = None
        self._names: list[str] | None = None

    def _resolve(self) -> None:
        own = inspect.signature(self._fn)
        params = [p for p in own.parameters.values() if p.kind != p.VAR_KEYWORD]
        seen = {p.name for p in params} | self._drop
        extra = []
        for target in self._targets:
            module, _, name = target.partition(":")
            fn = getattr(importlib.import_module(module), name)
            for p in inspect.signature(fn).parameters.values():
                if (p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                        and p.name not in seen):
                    seen.add(p.name)
                    extra.append(p.replace(kind=p.KEYWORD_ONLY))
        self._names = [p.name for p in params[1 if self._is_method(params) else 0:]
                       if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        self._names += [p.name for p in extra]
        self._sig = own.replace(parameters=params + extra)

    @staticmethod
    def _is_method(params: list[inspect.Parameter]) -> bool:
        return bool(params) and params[0].name == "self"

    @property
    def __signature__(self) -> inspect.Signature:
        if self._sig is None:
            self._resolve()
        return self._sig

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kw: Any) -> Any:
        if self._names is None:
            self._resolve()
        check_keywords(f"{self.__qualname__}()", kw, self._names)
        return self._fn(*args, **kw)


def forwards(*targets: str, drop: Iterable[str] = ()) -> Callable[[Callable[..., Any]], Any]:
    """Decorator for a method that passes its ``**kw`` on to ``targets``
    (``"package.module:function"``): see :class:`_Forwarding`. ``drop`` names the target
    parameters the method fills itself (the model, the source...).

    Example:
        >>> class Lab:
        ...     @forwards("onnx_lab.analysis.compat:check", drop=("model",))
        ...     def check(self, **kw): ...
    """
    def wrap(fn: Callable[..., Any]) -> Any:
        return _Forwarding(fn, targets, tuple(drop))

    return wrap
