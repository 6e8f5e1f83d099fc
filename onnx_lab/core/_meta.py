"""Reading structured values out of a model's metadata strings, which are hostile input.

A metadata value may be megabytes long or nested thousands of levels deep (``json.loads``
then raises RecursionError, ``ast.literal_eval`` MemoryError). These readers bound the size
and the nesting before parsing and return None for anything they cannot read: a bad value
is ignored (``check()`` may report it), never an exception.
"""

from __future__ import annotations

import ast
import json
from typing import Any

__all__ = ["load_json", "load_str_list", "MAX_META_BYTES", "MAX_META_DEPTH"]

#: The longest metadata value parsed (longer ones are ignored).
MAX_META_BYTES = 1 << 20
#: The deepest nesting of lists/objects parsed.
MAX_META_DEPTH = 16


def nesting(raw: str, limit: int) -> int:
    """The bracket nesting of ``raw`` outside string literals, counted up to ``limit + 1``."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for ch in raw:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif ch in "]})":
            depth -= 1
    return deepest


def _readable(raw: object, max_depth: int) -> bool:
    return (isinstance(raw, str) and 0 < len(raw) <= MAX_META_BYTES
            and nesting(raw, max_depth) <= max_depth)


def load_json(raw: object, *, max_depth: int = MAX_META_DEPTH) -> Any:
    """The JSON value of ``raw``, or None (not a string, too long, too deep, not JSON)."""
    if not _readable(raw, max_depth):
        return None
    try:
        return json.loads(raw)  # type: ignore[arg-type]
    except (ValueError, RecursionError, MemoryError):
        return None


def load_str_list(raw: object) -> list[str] | None:
    """A flat list of strings written as a Python or JSON literal (``"['', 'layers.0']"``,
    what torch.onnx writes for name scopes), or None for anything else."""
    if not _readable(raw, 1):
        return None
    try:
        value = ast.literal_eval(raw)  # type: ignore[arg-type]
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return None
    if not isinstance(value, (list, tuple)):
        return None
    return [str(v) for v in value]
