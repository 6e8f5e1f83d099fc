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
from typing import Any, TextIO

from onnx_lab.errors import visible

__all__ = ["VisibleText", "visible"]

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
