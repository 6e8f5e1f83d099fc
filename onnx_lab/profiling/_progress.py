"""Progress reporting for long profiling loops: a callback, tqdm in terminals, or nothing."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

Progress = Callable[[int, int, str], None] | None

# Below this many steps a bar is noise.
_MIN_STEPS_FOR_BAR = 20


class Reporter:
    """Calls ``progress(done, total, label)`` or drives a tqdm bar; ``progress=False`` silences."""

    def __init__(self, progress, total: int, label: str) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self._cb = progress if callable(progress) else None
        self._bar = None
        if progress is None and total >= _MIN_STEPS_FOR_BAR and _interactive():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=label, leave=False)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._cb is not None:
            self._cb(self.done, self.total, self.label)
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _interactive() -> bool:
    # Silent in tests and pipes; a bar in terminals (stderr a tty).
    if "PYTEST_CURRENT_TEST" in os.environ:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
