"""The cost model's predicted activation peak, the one figure every measured memory table
shows beside the measured one (``predicted_activation_bytes`` of a profile, a batch sweep and
the report's profile section)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from onnx_lab.errors import LabError

__all__ = ["predicted_peak"]


def predicted_peak(model: Any, dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None) -> float:
    """Peak activation bytes by the cost model (:func:`onnx_lab.analysis.cost.cost`), NaN
    where it cannot count (dynamic dims without values, unknown shapes).

    Example:
        >>> predicted_peak("sample:convnet")
    """
    from onnx_lab.analysis.cost import cost

    try:
        return float(cost(model, dims=dims, shapes=shapes).total["peak_activation_bytes"])
    except LabError:
        return float("nan")
