"""The precision doctor's result: :class:`PrecisionPlan`, the nodes to keep and the evidence.

A plan holds the converted model, the trials table (every trial can be rebuilt with
:meth:`PrecisionPlan.reproduce`), the ranked sensitivity, the outputs before and after, and
where the time went. It draws itself through :mod:`onnx_lab._display` (bar chart, graph
overlay, HTML: :mod:`onnx_lab.render.precision_plots`).

Example:
    >>> plan = find_precision("sample:convnet", "fp16", atol=1e-3, rtol=1e-2)
    >>> plan.summary_text(); plan.reproduce(0)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.history import History
from onnx_lab.core.model import LabModel
from onnx_lab.core.save import save, wants_external
from onnx_lab.core.source_map import group_by_module
from onnx_lab.errors import InputError
from onnx_lab.numerics.metrics import Rule, judge
from onnx_lab.numerics.precision import trials
from onnx_lab.numerics.precision.trials import Converter
from onnx_lab.numerics.quantize import Calibration
from onnx_lab.runtime.session import default_load_regression, load_problem

__all__ = ["PrecisionPlan", "OUTPUT_COLUMNS"]

#: Columns of :attr:`PrecisionPlan.outputs` (before = everything converted, after = the plan;
#: a side that stores an fp16 overflow scores ``inf`` and fails, as its trial does).
OUTPUT_COLUMNS = ["tensor", "max_abs_before", "max_abs_after", "sqnr_db_before",
                  "sqnr_db_after", "score_before", "score_after", "passed_before",
                  "passed_after"]


@dataclass
class PrecisionPlan:
    """The result of :func:`find_precision`.

    Attributes:
        target: ``fp16``, ``bf16`` or ``int8``.
        kept: node ids kept in higher precision (int8: excluded from quantization), most
            sensitive first.
        passed: whether the plan meets the tolerance (False only when cancelled).
        model: the converted model with ``kept`` in higher precision (a LabModel).
        trials: one row per trial (:data:`TRIAL_COLUMNS`): trial, phase (``full``,
            ``recheck``, ``all_kept``, ``guess``, ``bisect``, ``prune``, ``load``: the plan
            with the op type added whose keeping makes it load at onnxruntime's default
            options, ``confirm``: judged with onnxruntime's optimizations on both sides), kept (node ids), n_kept, score
            (<= 1 passes), max_abs, sqnr_db, cosine (worst output), passed, seconds
            (conversion + run).
        sensitivity: the ranked nodes (:data:`SENSITIVITY_COLUMNS`).
        outputs: per output, error with everything converted and with the plan
            (:data:`OUTPUT_COLUMNS`).
        tolerance: the :class:`~onnx_lab.numerics.metrics.Rule` the outputs were judged
            by (``plan.tolerance.describe()``).
        n_candidates: nodes the conversion changes (what a plan can keep).
        calibration: int8 only, the reused :class:`~onnx_lab.numerics.quantize.Calibration`.
        seconds: wall time of the search.
        cancelled: the search stopped early (the best plan found so far is returned).
    """

    target: str
    kept: list[str]
    passed: bool
    model: LabModel
    trials: pd.DataFrame
    sensitivity: pd.DataFrame
    outputs: pd.DataFrame
    tolerance: Rule
    n_candidates: int
    seconds: float
    calibration: Calibration | None = None
    cancelled: bool = False
    feeds: list = field(default_factory=list, repr=False)
    source: LabModel | None = field(default=None, repr=False)
    required: dict[str, str] = field(default_factory=dict, repr=False)
    #: Whether the plan also meets the tolerance with onnxruntime's optimizations on both
    #: sides (a ``confirm`` trial); None when no search was needed (nothing to confirm).
    confirmed: bool | None = None
    #: Caveats: about the inputs the plan was judged on (an output that barely varies), the
    #: ``keep`` ids the conversion does not change, nodes it cannot reach, candidates that
    #: failed to run.
    notes: list[str] = field(default_factory=list)
    #: The nodes kept because the caller asked (``keep=``), part of :attr:`kept`.
    forced: list[str] = field(default_factory=list)
    #: The history step's PassResult when the plan was pushed (``lab.find_precision``).
    result: Any = field(default=None, repr=False)
    #: Where the time went, in seconds: the stages (``reference run``, ``full conversion``,
    #: ``sensitivity``, ``bisect``, ``prune``, ``load check``, ``confirm``: each including its trials) and,
    #: across all trials, ``trial: convert``, ``trial: onnxruntime session``,
    #: ``trial: onnxruntime run``, ``trial: judge``.
    timings: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def excluded(self) -> list[str]:
        """``kept`` under its int8 name (nodes excluded from quantization)."""
        return self.kept

    def reproduce(self, trial: int) -> tuple[LabModel, dict[str, Any]]:
        """Rebuild trial ``trial`` from its row: (model, {score, passed, max_abs...}).

        Example:
            >>> model, m = plan.reproduce(3); m["score"] == plan.trials.loc[3, "score"]
        """
        if not 0 <= trial < len(self.trials):
            raise InputError(f"No trial {trial}: the table has trials 0..{len(self.trials) - 1}.",
                             fix="Pick a number from plan.trials['trial'].")
        kept = list(self.trials.loc[trial, "kept"])
        level = "all" if self.trials.loc[trial, "phase"] == "confirm" else "disable"
        conv = Converter(self.source, self.target, self.calibration)
        model = conv.convert(kept)
        conv.close()
        ref = trials.run_outputs(self.source, self.feeds, [v.name for v in self.source.graph.outputs],
                                 opt_level=level, original=True)
        cand = trials.run_outputs(model, self.feeds, list(ref[0]), opt_level=level)
        per = [judge(self.tolerance, [r[n] for r in ref], [c[n] for c in cand]) for n in ref[0]]
        missing = [nid for nid in self.required if nid not in kept]
        return model, {"score": math.inf if missing else max(m["score"] for m in per),
                       "max_abs": max(m["max_abs"] for m in per),
                       "passed": all(m["passed"] for m in per) and not missing}

    def save(self, path: str | os.PathLike, external_data: bool | str = "auto",
             overwrite: bool = False, check: bool = True) -> Path:
        """Write the converted model (:attr:`model`) to ``path``, as ``Lab.save`` would.

        ``external_data="auto"`` follows the source model (a data file beside ``path`` when
        the source reads external data or the model passes 2 GB); the source file is only
        replaced with ``overwrite=True`` and the source's data files never; with ``check``
        the written file must load in a fresh onnxruntime session from its folder (see
        :func:`onnx_lab.core.save.save`).

        Example:
            >>> find_precision("model.onnx", "fp16").save("model.fp16.onnx")
        """
        src = self.source
        history = History(self.model, source_path=src.path if src is not None else None,
                          protected=sorted(Path(t.base_dir) / t.location
                                           for t in src.external_tensors()) if src else ())
        if external_data == "auto" and src is not None:
            external_data = wants_external(self.model, like=src)
        model = self.model

        def loads(p: Path) -> str | None:  # also as a deployment loads it, where src does
            return load_problem(p, model, src) or default_load_regression(p, src)

        return save(history, path, external_data=external_data, overwrite=overwrite,
                    check=loads if check else None)

    def kept_by_module(self, depth: int | None = None) -> pd.DataFrame:
        """The kept nodes per PyTorch module of the source model (see
        :mod:`onnx_lab.core.source_map`): module, module_class, n_nodes (kept), first_topo,
        node_ids.

        Example:
            >>> lab.find_precision("fp16").kept_by_module(depth=2)
        """
        model = self.source if self.source is not None else self.model
        frame = pd.DataFrame({"node_id": list(self.kept)}, dtype=object)
        return group_by_module(frame, model, {"node_ids": ("node_id", list)}, depth=depth)

    def summary_text(self) -> str:
        verdict = "meets" if self.passed else "does NOT meet"
        what = "excluded from int8" if self.target == "int8" else "kept in float32"
        deployed = "" if self.confirmed is None else (
            ", also with onnxruntime's optimizations" if self.confirmed else
            ", but NOT with onnxruntime's optimizations")
        asked = f" ({len(self.forced)} by keep=)" if self.forced else ""
        return (f"{self.target}: {len(self.kept)} of {self.n_candidates} nodes {what}{asked}; "
                f"the plan "
                f"{verdict} {self.tolerance.describe()}{deployed} ({len(self.trials)} trials, "
                f"{self.seconds:.1f} s){' [cancelled]' if self.cancelled else ''}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: target, kept, passed, confirmed, notes, tolerance, trials, outputs,
        seconds, timings (:attr:`timings`, rounded)."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            if isinstance(v, (np.floating, np.integer, np.bool_)):
                return clean(v.item())
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        def records(df: pd.DataFrame) -> list[dict]:
            return [{k: clean(v) for k, v in r.items()} for r in df.to_dict("records")]

        return {"target": self.target, "kept": list(self.kept), "forced": list(self.forced),
                "passed": self.passed,
                "confirmed": self.confirmed, "notes": list(self.notes),
                "n_candidates": self.n_candidates, "tolerance": self.tolerance.describe(),
                "seconds": round(self.seconds, 3), "cancelled": self.cancelled,
                "timings": {k: round(v, 3) for k, v in self.timings.items()},
                "trials": records(self.trials), "outputs": records(self.outputs)}

    def __repr__(self) -> str:
        return f"PrecisionPlan({self.summary_text()})"

    def plot(self, top: int = 20):
        """Ranked bar chart of the sensitivity, kept nodes marked (a matplotlib figure)."""
        return _display.draw(self, "plot", top=top)

    def render(self, **kw: Any):
        """The graph coloured by sensitivity, kept nodes highlighted."""
        return _display.draw(self, "render", **kw)

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))
