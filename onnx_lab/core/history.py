"""Model versions: step 0 is the model as opened, every apply/edit adds a step.

A :class:`History` owns the current model with its dims and shapes: a list of
:class:`Version` objects and a pointer to the current one. The façade (``Lab``) holds one and
reads its model from it; steps (``onnx_lab.steps``) push onto it and ``core.save`` reads it.
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.source_map import carry_sources, source_share
from onnx_lab.errors import InputError

# A version's result is a transforms.base.PassResult (or None for step 0); core does not
# import transforms, so it is typed by what History reads of it.
PassResult = Any

__all__ = ["Version", "History", "HISTORY_COLUMNS", "step_call"]

HISTORY_COLUMNS = ["step", "pass", "params", "modified", "nodes_before", "nodes_after",
                   "verify_passed", "max_abs_err", "outputs_changed", "verified_by", "seconds",
                   "source_share"]


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
                    "max_abs_err": None, "outputs_changed": None, "verified_by": None,
                    "seconds": 0.0,
                    "source_share": source_share(self.model)}
        return {"step": self.step, "pass": r.name, "params": dict(r.params),
                "modified": r.modified, "nodes_before": r.nodes_before,
                "nodes_after": r.nodes_after, "verify_passed": r.verify_passed,
                "max_abs_err": r.max_abs_err,
                "outputs_changed": getattr(r, "outputs_changed", None),
                "verified_by": getattr(r, "verified_by", None),
                "seconds": r.seconds + (r.verify_seconds or 0.0),
                "source_share": source_share(self.model)}


class History:
    """Versions of a model and the current pointer.

    Attributes:
        versions: every version, step 0 first.
        current: the step the history shows.
        derived_from: for a history that does not start from a file (an extracted subgraph,
            a converted model), a sentence saying what it was derived from.
        source_path: the file the first model of the chain was opened from (also for derived
            histories), which ``save`` never overwrites without ``overwrite=True``.
        protected: other files a derived history came from (the second model of a merge),
            which ``save`` never replaces.
    """

    def __init__(self, model: LabModel, *, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 result: PassResult | None = None, derived_from: str | None = None,
                 source_path: Path | None = None, protected: Sequence[Path] = ()) -> None:
        self.versions: list[Version] = [Version(0, model, result, dict(dims or {}),
                                                {k: list(v) for k, v in (shapes or {}).items()})]
        self.current = 0
        self.derived_from = derived_from
        self.source_path = source_path if source_path is not None else model.path
        self.protected: list[Path] = [Path(p) for p in protected]

    # -- the current version ---------------------------------------------------------------
    @property
    def model(self) -> LabModel:
        """The current version's model."""
        return self.version.model

    @property
    def dims(self) -> dict[str, int]:
        """Dim values valid for the current version."""
        return self.version.dims

    @dims.setter
    def dims(self, dims: Mapping[str, int]) -> None:
        self.version.dims = dict(dims)

    @property
    def shapes(self) -> dict[str, list[int]]:
        """Input shapes valid for the current version."""
        return self.version.shapes

    @shapes.setter
    def shapes(self, shapes: Mapping[str, Sequence[int]]) -> None:
        self.version.shapes = {k: list(v) for k, v in shapes.items()}

    @property
    def path(self) -> Path | None:
        """The file step 0 was opened from (where external weights are read from)."""
        return self.original.model.path

    def files_read(self) -> set[Path]:
        """External data files any version reads from (a save must not replace them)."""
        files: set[Path] = set()
        for v in self.versions:
            for t in v.model.external_tensors():
                files.add((Path(t.base_dir) / t.location).resolve())
        return files

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
            outputs_changed (bool or None: for edits meant to change values, whether they
            did; such a step's verify_passed is None), verified_by (str or None: 'region',
            'full' or 'unchanged', see ``PassResult.verified_by``),
            seconds (float: pass plus verification), source_share (float or None: the share of
            nodes whose PyTorch module is known, see :mod:`onnx_lab.core.source_map`),
            current (bool: the version the Lab shows).
        """
        rows = [v.row() for v in self.versions]
        df = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
        df["current"] = [v.step == self.current for v in self.versions]
        return df

    def __len__(self) -> int:
        return len(self.versions)

    # -- moving --------------------------------------------------------------------------
    def push(self, result: PassResult, *, dims: Mapping[str, int],
             shapes: Mapping[str, Sequence[int]]) -> Version:
        """Add ``result.model`` as a version after the current one, dropping any redo tail.

        The new nodes get the merged PyTorch source of the nodes they replaced
        (:func:`~onnx_lab.core.source_map.carry_sources`; passes do it already, this covers
        every other step: precision conversions, quantization, merges).
        """
        if result.model is not self.model:
            carry_sources(self.model, result.model)
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

    def drop_redo(self) -> None:
        """Forget the versions after the current one (what the next push would do)."""
        del self.versions[self.current + 1:]

    # -- replay ------------------------------------------------------------------------------
    def to_script(self, source: str | None = None, known: set[str] | None = None) -> str:
        """A Python script that replays the history up to the current step:
        ``lab = onnx_lab.open(...)`` then one Lab call per step.

        Args:
            source: the model path to open (default: the file step 0 was opened from).
            known: names of the passes that can be replayed (``Lab.to_script`` passes the
                registry); other steps (a precision search, a merge) raise InputError.

        Example:
            >>> print(lab.version_history.to_script())
        """
        return _to_script(self, source, known)


# Steps whose Lab method reads better than lab.apply(...): pass -> (method, positional params).
_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "set_attribute": ("set_attribute", ("node_id", "attribute", "value")),
    "rename_tensor": ("rename_tensor", ("old", "new")),
    "rename_node": ("rename_node", ("node_id", "new")),
    "add_output": ("add_output", ("tensor",)),
    "remove_output": ("remove_output", ("output",)),
    "replace_initializer": ("replace_initializer", ("initializer", "value")),
    "scale_initializer": ("scale_initializer", ("initializer", "factor")),
    "fix_dims": ("fix_dims", ("dims",)),
    "set_input_shape": ("set_input_shape", ("input", "shape")),
    "convert_opset": ("convert_opset", ("target",)),
}


def _literal(v: Any, where: str) -> str:
    """``v`` as Python source that evaluates back to it (InputError for what cannot)."""
    if v is None or isinstance(v, (bool, str)):
        return repr(v)
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return repr(f) if np.isfinite(f) else f"float({str(f)!r})"
    if isinstance(v, Path):
        return repr(str(v))
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_literal(x, where) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_literal(k, where)}: {_literal(x, where)}"
                               for k, x in v.items()) + "}"
    if isinstance(v, np.ndarray):
        if v.size > 4096:
            raise InputError(f"{where} holds a {list(v.shape)} array, too large for a script.",
                             fix="Pass the array as a .npy path (np.save) so the script can "
                             "name the file.")
        return f"np.array({_literal(v.tolist(), where)}, dtype={str(v.dtype)!r})"
    raise InputError(f"{where}: a {type(v).__name__} value cannot be written as Python source.",
                     fix="Pass numbers, strings, lists, dicts, arrays or file paths.")


def step_call(result: PassResult, var: str = "lab") -> str:
    """The Lab call that makes the step of ``result``, e.g.
    ``lab.set_attribute('/bn', 'epsilon', 0.001)`` (InputError for values that have no
    source form); a step made with ``verify=False`` is replayed so (its verification may
    need dims the session never had)."""
    call = _step_call(result, var)
    if result.modified and getattr(result, "_verification", None) is None \
            and result.verified_by is None:
        call = f"{call[:-1]}, verify=False)"
    return call


def _step_call(result: PassResult, var: str) -> str:
    name, params = result.name, dict(result.params)
    where = f"step {name}"
    if name in _CALLS:
        method, pos = _CALLS[name]
        args = [_literal(params.pop(k, None), where) for k in pos]
        args += [f"{k}={_literal(v, where)}" for k, v in params.items()]
        return f"{var}.{method}({', '.join(args)})"
    if name == "remove_node":
        nid = _literal(params["node_id"], where)
        mode = params.get("mode") or ("reconnect" if params.get("reconnect", True) else "inputs")
        return (f"{var}.remove_node_cascade({nid})" if mode == "cascade" else
                f"{var}.remove_node({nid}, reconnect={mode == 'reconnect'})")
    if name == "add_node":
        args = [_literal(params[k], where) for k in ("tensor", "op_type")]
        if params.get("attributes"):
            args.append(f"attributes={_literal(params['attributes'], where)}")
        if params.get("inputs") is not None:
            args.append(f"inputs={_literal(params['inputs'], where)}")
        if params.get("node_name"):
            args.append(f"name={_literal(params['node_name'], where)}")
        return f"{var}.add_node({', '.join(args)})"
    args = [_literal(name, where)]
    if result.matches:
        args.append(f"matches={_literal(list(result.matches), where)}")
    args += [f"{k}={_literal(v, where)}" for k, v in params.items()]
    return f"{var}.apply({', '.join(args)})"


def _to_script(history: History, source: str | None, known: set[str] | None) -> str:
    if history.derived_from and source is None:
        raise InputError(f"This history does not start from a file ({history.derived_from}).",
                         fix="Pass to_script(source='model.onnx') naming the model of step 0.")
    src = source if source is not None else (str(history.source_path)
                                             if history.source_path else None)
    if src is None:
        raise InputError("The model was opened from memory: the script cannot name it.",
                         fix="Pass to_script(source='model.onnx') or open the model from a "
                         "file.")
    v0 = history.original
    extra = ""
    if v0.dims:
        extra += f", dims={_literal(v0.dims, 'step 0')}"
    if v0.shapes:
        extra += f", shapes={_literal(v0.shapes, 'step 0')}"
    lines = ['"""Replays an onnx_lab session (generated by History.to_script)."""',
             "import numpy as np  # noqa: F401  (arrays in parameters)", "",
             "import onnx_lab", "", f"lab = onnx_lab.open({src!r}{extra})"]
    for v in history.versions[1:history.current + 1]:
        r = v.result
        if r is None or (known is not None and r.name not in known):
            raise InputError(f"Step {v.step} ({r.name if r is not None else '?'}) is not a "
                             "registered pass and cannot be replayed as lab.apply.",
                             fix="Script the steps before it (checkout) or redo it by hand.")
        lines.append(step_call(r) + f"  # step {v.step}")
    return "\n".join(lines) + "\n"
