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

__all__ = ["VisibleText", "visible", "print_note"]


def print_note(text: Any, *, indent: str = "", file: TextIO | None = None) -> None:
    r"""Print ``note: TEXT`` as one note: a note quotes model strings, and a newline in one
    (a node named ``"x\nerror: ..."``) began a line of its own that read as the command's,
    a carriage return wrote over the ``note:`` before it. Each line break continues the note
    indented under its text, and a carriage return is written ``\r``."""
    prefix = f"{indent}note: "
    body = str(text).replace("\r\n", "\n").replace("\r", "\\r")
    print(prefix + body.replace("\n", "\n" + " " * len(prefix)), file=file)


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
