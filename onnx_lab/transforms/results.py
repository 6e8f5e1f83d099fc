"""The data a pass takes and gives: its parameters (:class:`Param`), a match
(:class:`Match`), the Lab's dims and shapes (:class:`PassContext`) and the result with its
provenance (:class:`PassResult`). Importable from :mod:`onnx_lab.transforms.base`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel


# ---------------------------------------------------------------------------- data types
@dataclass(frozen=True)
class Param:
    """A pass parameter: name, Python type, default and a one-line doc."""

    name: str
    type: type | tuple[type, ...]
    default: Any
    doc: str = ""


@dataclass
class Match:
    """One place where a pass can apply.

    Attributes:
        match_id: stable within one model version, e.g. ``"fuse_conv_bn:/stem/conv/Conv"``.
        pattern: the pattern name (``conv_bn``, ``conv_bn_relu``, ``dead_node`` ...).
        pass_name: the registered pass that rewrites it.
        node_ids: the nodes involved, anchor first.
        anchor: the node the match is named after.
        description: one human sentence.
        saving_nodes, saving_bytes: expected reduction (bytes may be negative for folds).
        data: pass-private details (not shown in tables).
    """

    match_id: str
    pattern: str
    pass_name: str
    node_ids: list[str]
    anchor: str
    description: str
    saving_nodes: int = 0
    saving_bytes: int = 0
    data: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class PassResult:
    """What one pass did. Never a bare ``False``: ``reason`` says why nothing changed.

    Attributes:
        name, params: the pass and the parameters it ran with.
        modified: whether the model changed.
        nodes_before, nodes_after: node counts over all graphs.
        provenance: new or changed node id -> node ids (in the step's input model) it came from.
        removed: node ids of the input model that no longer exist.
        reason: why nothing was done (when modified is False), else None.
        seconds: time of the rewrite (verification not included).
        notes: warnings (refused folds, ops only onnxruntime runs, unknown provenance...).
        model: the resulting LabModel (the input itself when nothing changed).
        matches: the match ids that were applied.
        verification, verify_passed, max_abs_err, first_failure: filled by verification.
        verified_by: which check verified the step: ``"region"`` (the rewritten region on
            the captured values at its boundary), ``"full"`` (the whole model),
            ``"unchanged"`` (no value changed: nothing ran); None when not verified.
        requantized: the step moved QuantizeLinear/DequantizeLinear pairs into integer
            kernels (onnxruntime's QLinearConv, QLinearMatMul...), which round where the QDQ
            graph computed in float: verification lets a DequantizeLinear's output differ by
            one quantization step.
    """

    name: str
    params: dict[str, Any]
    modified: bool
    nodes_before: int
    nodes_after: int
    provenance: dict[str, list[str]]
    removed: list[str]
    reason: str | None
    seconds: float
    notes: list[str]
    model: LabModel
    matches: list[str] = field(default_factory=list)
    # The verification report: a DataFrame, or numerics.verify.Report until first read.
    _verification: Any = field(default=None, repr=False)
    verify_passed: bool | None = None
    max_abs_err: float | None = None
    first_failure: str | None = None
    verify_seconds: float | None = None
    # True when an edit meant to change values did (see steps.apply); None otherwise
    outputs_changed: bool | None = None
    verified_by: str | None = None
    requantized: bool = False
    dropped: str | None = None

    @property
    def verification(self) -> pd.DataFrame | None:
        """The verification report (see ``transforms.verify.verify``), None if not verified.

        Kept as rows until first read, so a run that only needs the verdict builds no
        DataFrame (and does not import pandas).
        """
        v = self._verification
        if hasattr(v, "frame"):  # numerics.verify.Report
            v = self._verification = v.frame()
        return v

    @verification.setter
    def verification(self, report: Any) -> None:
        self._verification = report

    def __repr__(self) -> str:
        status = (f"{self.nodes_before} -> {self.nodes_after} nodes" if self.modified
                  else f"not modified: {self.reason}")
        if self.dropped:
            status += ", dropped by the preset (does not load at onnxruntime's defaults)"
        ver = ""
        if self.verify_passed is not None:
            ver = f", verify {'passed' if self.verify_passed else 'FAILED'}"
            if not self.verify_passed and self.first_failure:
                ver += f" first at {self.first_failure!r}"
            if self.max_abs_err is not None:
                # Over the outputs only: an intermediate can fail while the outputs agree.
                ver += f" (outputs max_abs_err {self.max_abs_err:.3g})"
        return f"PassResult({self.name}: {status}{ver}, {self.seconds:.3f}s)"

    def summary(self) -> dict[str, Any]:
        """The plain fields (for JSON and history rows)."""
        return {"name": self.name, "params": self.params, "modified": self.modified,
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "reason": self.reason, "seconds": round(self.seconds, 6),
                "verify_passed": self.verify_passed, "max_abs_err": self.max_abs_err,
                "first_failure": self.first_failure, "outputs_changed": self.outputs_changed,
                "verified_by": self.verified_by, "dropped": self.dropped,
                "notes": list(self.notes),
                "matches": list(self.matches)}

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


# ---------------------------------------------------------------------------- rewriting


@dataclass(frozen=True)
class PassContext:
    """What a pass may know of the Lab beside the model: its dim values and input shapes.

    Whole-model tools (onnxsim, onnxslim) fix their input shapes from it; node passes ignore
    it. ``run_pass`` builds it from the History's dims and shapes.
    """

    dims: Mapping[str, int] = field(default_factory=dict)
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
