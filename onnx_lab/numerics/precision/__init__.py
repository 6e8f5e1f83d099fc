"""The precision doctor: which nodes must stay in higher precision, found automatically.

``find_precision`` answers "which layers must stay in float32 (or out of int8) so the outputs
meet my tolerance?" in five stages:

1. **One reference run, then the full conversion.** The fp32 model runs once over the feeds
   (fp16: every tensor captured in memory-bounded chunks, for values beyond 65504); its
   outputs are kept for every later trial. When the fully converted model meets the
   tolerance, that is the plan (one conversion, one run). Otherwise the fp32 model and the
   fully converted candidate run tensor by tensor (the capture of :func:`onnx_lab.compare`).
2. **Sensitivity.** Each node's *local* error (its output's error beyond the worst error of its
   inputs, relative to the tensor's own scale; noise energy for int8), flags for fp16 overflow
   (a reference value beyond 65504 in or out) and non-finite values; for int8 the activation
   range statistics (outlier ratio, saturation against the calibrated range). The top few
   nodes are re-checked exactly: a trial with that node alone kept.
3. **Bisect** over the ranked list (int8: each node followed by its tensors' producers and
   readers): prefixes of doubling length, then a bisection, for the shortest passing prefix.
4. **Prune** by group testing: a minimal subset of that prefix (no node can be dropped alone),
   each necessary node found by bisecting the rest, the unneeded ones dropped in chunks.
5. **Confirm** the plan as a deployment runs it (onnxruntime's optimizations on both sides);
   when it only just passed without them and misses with them, the next smallest passing set.

Each trial is one conversion and one run of the outputs; int8 trials reuse one calibration
(:func:`onnx_lab.numerics.quantize.calibrate_int8`); fp16 trials convert a weight-free graph
and reuse each weight converted once. Every trial is a row of
:attr:`PrecisionPlan.trials` and :meth:`PrecisionPlan.reproduce` rebuilds it.

The work is split by job: :mod:`.trials` (targets, the tolerance rule, building and running
one candidate), :mod:`.ranking` (the sensitivity analysis, stage 2), :mod:`.search` (stages 1
and 3-5, :func:`find_precision`) and :mod:`.plan` (:class:`PrecisionPlan`). Outputs are judged
by one :class:`~onnx_lab.numerics.metrics.Rule` of the tolerance table
(:func:`onnx_lab.numerics.metrics.judge`), like every other comparison in onnx_lab.

Targets: ``fp16`` (:mod:`onnx_lab.numerics.half`: the op schemas' type constraints decide
what converts together, Casts at kept-node borders; every candidate passes onnx's checker),
``int8`` (static QDQ, kept = ``nodes_to_exclude``) and ``bf16``, *emulated* with the same
rules: onnxruntime's CPU kernels have no bfloat16 arithmetic, so weights of converted nodes are
rounded to bfloat16 and their other inputs and float outputs round-trip through bfloat16.

Example:
    >>> from onnx_lab.numerics.precision import find_precision
    >>> plan = find_precision("model.onnx", "fp16", atol=1e-3, rtol=1e-2)
    >>> plan.kept, plan.trials
"""

from __future__ import annotations

from onnx_lab.numerics.metrics import Rule
from onnx_lab.numerics.precision.plan import OUTPUT_COLUMNS, PrecisionPlan
from onnx_lab.numerics.precision.ranking import SENSITIVITY_COLUMNS, sensitivity
from onnx_lab.numerics.precision.search import find_precision
from onnx_lab.numerics.precision.trials import (
    FP16_MAX,
    METRICS,
    TARGETS,
    TRIAL_COLUMNS,
    NothingToConvert,
    PrecisionCancelled,
    ToleranceUnreachable,
    make_tolerance,
)

#: How a search judges its outputs: a :class:`~onnx_lab.numerics.metrics.Rule` (the name
#: ``plan.tolerance`` has; :func:`make_tolerance` builds it).
Tolerance = Rule

__all__ = ["find_precision", "sensitivity", "PrecisionPlan", "Tolerance", "make_tolerance",
           "TARGETS", "METRICS", "FP16_MAX", "TRIAL_COLUMNS", "SENSITIVITY_COLUMNS",
           "OUTPUT_COLUMNS", "PrecisionCancelled", "ToleranceUnreachable",
           "NothingToConvert"]
