"""Progress reporting for every long loop (compare's chunks, profiling runs, sweeps): a
callable(done, total, label) from the user, tqdm, or nothing.

``progress=None`` means automatic: a tqdm bar (``tqdm.auto``: a widget bar in notebooks) when a
human is watching (a terminal or a notebook kernel) and the loop has at least ``min_steps``
steps, nothing under pytest or in pipes. ``progress=False`` silences it; a callable receives
``(done, total, label)``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

ProgressFn = Callable[[int, int, str], None]


def _interactive() -> bool:
    if "PYTEST_CURRENT_TEST" in os.environ:
        return False
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
            return True
    except ImportError:
        pass
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class Progress:
    """Reports progress of ``total`` steps; use as a context manager (or call :meth:`close`).

    Args:
        min_steps: below this many steps no automatic bar is drawn (noise for short loops).
    """

    def __init__(self, progress: Any, total: int, label: str = "", *, min_steps: int = 2
                 ) -> None:
        self.total = total
        self.done = 0
        self.label = label
        self._fn: ProgressFn | None = progress if callable(progress) else None
        self._bar = None
        if progress is None and total >= min_steps and _interactive():
            from tqdm.auto import tqdm

            # the command line's stderr escapes control characters of model strings
            # (cli._terminal): the bar's own cursor moves go to the terminal underneath
            stream = getattr(sys.stderr, "raw_stream", sys.stderr)
            self._bar = tqdm(total=total, desc=label, leave=False, file=stream)

    def step(self, label: str | None = None, n: int = 1) -> None:
        self.done += n
        if label is not None:
            self.label = label
        if self._fn is not None:
            self._fn(self.done, self.total, self.label)
        if self._bar is not None:
            if label:  # before the update, which redraws the bar with it
                self._bar.set_description(label, refresh=False)
            self._bar.update(n)

    def expect(self, more: int) -> None:
        """Re-estimate: ``more`` steps remain from here (a search that learns its length as
        it goes). The total never falls to ``done`` before :meth:`finish`, so a bar is not
        full while work remains."""
        self.total = self.done + max(1, int(more))
        if self._fn is not None:
            self._fn(self.done, self.total, self.label)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def finish(self) -> None:
        """The work is done: the total becomes the steps taken (a full bar)."""
        self.total = self.done
        if self._fn is not None:
            self._fn(self.done, self.total, self.label)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def __enter__(self) -> Progress:
        if self._fn is not None:
            self._fn(0, self.total, self.label)
        return self

    def update(self, n: int = 1) -> None:
        """Advance by ``n`` steps without changing the label."""
        self.step(None, n)

    def close(self) -> None:
        """Close the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __exit__(self, *exc: object) -> None:
        self.close()
