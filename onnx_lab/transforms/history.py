"""Model versions of a Lab: step 0 is the original, every apply/edit adds a step.

A :class:`History` is a list of :class:`Version` objects and a pointer to the current one.
``undo``/``redo``/``checkout`` move the pointer; applying after an undo drops the versions
after the pointer (the redo tail), as editors do. Versions share unchanged tensors (LabModels
are immutable once indexed), so keeping them costs the graph structure, not the weights.

Example:
    >>> lab.apply("eliminate_identity")
    >>> lab.history[["step", "pass", "nodes_after"]]
    >>> lab.undo()          # back to step 0
    >>> lab.checkout(1)     # forward again
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.errors import InputError

if TYPE_CHECKING:
    from onnx_lab.transforms.base import PassResult

__all__ = ["Version", "History", "HISTORY_COLUMNS"]

HISTORY_COLUMNS = ["step", "pass", "params", "modified", "nodes_before", "nodes_after",
                   "verify_passed", "max_abs_err", "seconds"]


@dataclass
class Version:
    """One model version.

    Attributes:
        step: its place in the history (0 = the model as opened).
        model: the LabModel of this version.
        result: the PassResult that produced it (None for step 0 unless it was extracted).
        dims, shapes: the dim/shape values valid for this version (fix_dims removes dims).
    """

    step: int
    model: LabModel
    result: PassResult | None = None
    dims: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        r = self.result
        n = len(self.model.index)
        if r is None:
            return {"step": self.step, "pass": "original", "params": {}, "modified": False,
                    "nodes_before": n, "nodes_after": n, "verify_passed": None,
                    "max_abs_err": None, "seconds": 0.0}
        return {"step": self.step, "pass": r.name, "params": dict(r.params),
                "modified": r.modified, "nodes_before": r.nodes_before,
                "nodes_after": r.nodes_after, "verify_passed": r.verify_passed,
                "max_abs_err": r.max_abs_err,
                "seconds": r.seconds + (r.verify_seconds or 0.0)}


class History:
    """Versions of a model and the current pointer."""

    def __init__(self, model: LabModel, *, dims: dict[str, int] | None = None,
                 shapes: dict[str, list[int]] | None = None,
                 result: PassResult | None = None) -> None:
        self.versions: list[Version] = [Version(0, model, result, dict(dims or {}),
                                                {k: list(v) for k, v in (shapes or {}).items()})]
        self.current = 0

    # -- reading -------------------------------------------------------------------------
    @property
    def version(self) -> Version:
        """The current version."""
        return self.versions[self.current]

    @property
    def original(self) -> Version:
        """Step 0."""
        return self.versions[0]

    def table(self) -> pd.DataFrame:
        """One row per version.

        Columns:
            step (int), pass (str: 'original' for step 0), params (dict), modified (bool),
            nodes_before, nodes_after (int, all graphs), verify_passed (bool or None when not
            verified), max_abs_err (float or None: largest error over the model outputs),
            seconds (float: pass plus verification), current (bool: the version the Lab shows).
        """
        rows = [v.row() for v in self.versions]
        df = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
        df["current"] = [v.step == self.current for v in self.versions]
        return df

    def __len__(self) -> int:
        return len(self.versions)

    # -- moving --------------------------------------------------------------------------
    def push(self, result: PassResult, *, dims: dict[str, int], shapes: dict[str, list[int]]
             ) -> Version:
        """Add a version after the current one, dropping any redo tail."""
        del self.versions[self.current + 1:]
        v = Version(len(self.versions), result.model, result, dict(dims),
                    {k: list(s) for k, s in shapes.items()})
        self.versions.append(v)
        self.current = v.step
        return v

    def undo(self) -> Version:
        """Move to the previous version (InputError at step 0)."""
        if self.current == 0:
            raise InputError("Nothing to undo: the Lab shows the original model (step 0).",
                             fix="See lab.history for the steps.")
        self.current -= 1
        return self.version

    def redo(self) -> Version:
        """Move to the next version (InputError when there is none)."""
        if self.current + 1 >= len(self.versions):
            raise InputError(f"Nothing to redo: step {self.current} is the latest version.",
                             fix="Redo is possible only after undo (applying drops the redo "
                             "steps).")
        self.current += 1
        return self.version

    def checkout(self, step: int) -> Version:
        """Move to version ``step`` (negative counts from the end, like a list)."""
        if not isinstance(step, int) or isinstance(step, bool):
            raise InputError(f"checkout step must be an int, got {type(step).__name__} "
                             f"{step!r}.", fix="Pass a step number from lab.history.")
        n = len(self.versions)
        k = step + n if step < 0 else step
        if not 0 <= k < n:
            raise InputError(f"No step {step}: the history has steps 0..{n - 1}.",
                             fix="Pass a step number from lab.history.")
        self.current = k
        return self.version
