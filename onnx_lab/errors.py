"""The exceptions users see.

Every error a user can trigger is a :class:`LabError` subclass whose message names the thing
(file, node, tensor, dim) and the fix. The CLI maps them to one line on stderr and exit code 2;
widgets show them inside the widget.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "LabError",
    "ModelLoadError",
    "ExternalDataError",
    "TensorDataError",
    "UnknownNameError",
    "DimError",
    "InputError",
    "PassError",
    "SaveError",
    "WriteError",
    "ExtractError",
    "RuntimeLoadError",
    "RunLimitError",
    "CacheError",
    "ProviderError",
    "RenderError",
    "ConversionBug",
    "close_matches",
]


class LabError(Exception):
    """Base class of every error onnx_lab raises on purpose.

    Attributes:
        fix: a short hint of what to do about it (also part of the message).
    """

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.problem = message
        self.fix = fix
        super().__init__(f"{message} {fix}" if fix else message)


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
    (:mod:`onnx_lab.core.limits`): refused before it started, or stopped."""


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
