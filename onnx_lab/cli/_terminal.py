"""What the command writes to a terminal: model strings as text, never as terminal commands.

A node, tensor or dim name, a producer, an op type or a file name may carry escape sequences
(``ESC [2J`` clears the screen, ``ESC ] 8`` makes a fake hyperlink, ``ESC ] 52`` writes the
clipboard on some terminals) or bidirectional overrides that reorder what a line shows. The
command's standard output and error go through :class:`VisibleText`, which writes every such
character as its escape (``\\x1b``, ``\\u202e``); tab, newline and carriage return (progress
lines) pass. ``--json`` is unchanged by it: ``json.dumps`` already escapes control characters.
"""

from __future__ import annotations

import io
import re
from typing import Any, TextIO

__all__ = ["VisibleText", "visible"]

# C0 controls but tab and newline (a carriage return in a name rewrote the start of its
# line; progress bars write to the stream underneath); DEL and the C1 controls; the line and
# paragraph separators; the bidirectional marks, embeddings, overrides and isolates.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """``text`` with the characters a terminal would act on written as their escapes."""
    return _HIDDEN.sub(_escape, text)


class VisibleText(io.TextIOBase):
    """A text stream that writes :func:`visible` text to ``stream`` (everything else, such
    as ``buffer``, ``isatty`` or ``encoding``, is the stream's)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    @property
    def raw_stream(self) -> TextIO:
        """The stream underneath, for onnx_lab's own progress bars (their cursor moves are
        theirs; their labels are onnx_lab's text)."""
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
