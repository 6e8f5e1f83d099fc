"""Lab: the object a user holds — the current model version plus every feature as a method.

A facade only: each method calls one function of ``core``, ``analysis``, ``transforms``,
``numerics``, ``profiling`` or ``render`` on :attr:`Lab.model`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from onnx_lab.core.load import load_model
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import validate_dims

if TYPE_CHECKING:
    import onnx_ir as ir

    from onnx_lab.analysis.summary import Summary
    from onnx_lab.core.index import ModelIndex

__all__ = ["Lab", "open_lab", "as_lab"]


def open_lab(source: Any, *, dims: Mapping[str, int] | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None) -> Lab:
    """Open a model for exploration, optimization and debugging.

    Args:
        source: a path, bytes, an ``onnx.ModelProto``, an ``onnx_ir.Model``, or
            ``"sample:NAME"`` for an embedded sample (``convnet``, ``transformer_block``,
            ``control_flow``). External data is not read now; weights are read on use.
        dims: values for symbolic dims, e.g. ``{"batch": 1}``.
        shapes: full shapes for inputs whose dims are unnamed, ``-1`` or ``?``,
            e.g. ``{"x": [1, 3, 48, 192]}``.

    Raises:
        ModelLoadError, ExternalDataError, DimError, UnknownNameError.

    Example:
        >>> import onnx_lab
        >>> lab = onnx_lab.open("sample:convnet")
        >>> lab.nodes.op_type.value_counts().head(3)
    """
    if isinstance(source, Lab):
        source = source.model
    if isinstance(source, str) and source.startswith("sample:"):
        from onnx_lab import samples

        source = samples.path(source.split(":", 1)[1])
    model = load_model(source)
    return Lab(model, dims=dims, shapes=shapes)


def as_lab(source: Any, *, dims: Mapping[str, int] | None = None,
           shapes: Mapping[str, Sequence[int]] | None = None) -> Lab:
    """``source`` itself when it is a Lab, else :func:`open_lab` of it."""
    if isinstance(source, Lab):
        return source
    return open_lab(source, dims=dims, shapes=shapes)


class Lab:
    """A model opened with :func:`onnx_lab.open`.

    Attributes:
        dims: symbolic dim values given at open (used for shapes, feeds, cost, profiling).
        shapes: full input shapes given at open.
    """

    def __init__(self, model: LabModel, *, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        validate_dims(model, dims, shapes)
        self._model = model
        self._original = model
        self.dims: dict[str, int] = dict(dims or {})
        self.shapes: dict[str, list[int]] = {k: list(v) for k, v in (shapes or {}).items()}
        self._init_history()

    # ------------------------------------------------------------------ model and index
    @property
    def model(self) -> LabModel:
        """The current model version (changes with apply/undo/redo/checkout)."""
        return self._model

    @property
    def ir(self) -> ir.Model:
        """The current model as ``onnx_ir.Model`` (treat as read-only; use lab.apply to edit)."""
        return self._model.ir

    @property
    def index(self) -> ModelIndex:
        """The index of the current version: node ids, producers, consumers, topo order."""
        return self._model.index

    @property
    def path(self) -> Path | None:
        """The file the model was opened from (never modified by onnx_lab)."""
        return self._original.path

    def _set_model(self, model: LabModel) -> None:
        """Make ``model`` the current version (used by transforms' history)."""
        self._model = model

    # ------------------------------------------------------------------ tables
    @property
    def nodes(self) -> pd.DataFrame:
        """One row per node (all graphs). See :func:`onnx_lab.analysis.tables.nodes_table`."""
        from onnx_lab.analysis.tables import nodes_table

        return nodes_table(self._model)

    @property
    def initializers(self) -> pd.DataFrame:
        """One row per weight (initializers and Constant tensors).

        See :func:`onnx_lab.analysis.tables.initializers_table`."""
        from onnx_lab.analysis.tables import initializers_table

        return initializers_table(self._model)

    @property
    def tensors(self) -> pd.DataFrame:
        """One row per value, with inferred dtype/shape.

        See :func:`onnx_lab.analysis.tables.tensors_table`."""
        from onnx_lab.analysis.tables import tensors_table

        return tensors_table(self._model, self.dims, self.shapes)

    @property
    def inputs(self) -> pd.DataFrame:
        """Graph inputs (initializers excluded): name, dtype, shape, dynamic."""
        from onnx_lab.analysis.tables import io_table

        return io_table(self._model, "inputs", self.dims, self.shapes)

    @property
    def outputs(self) -> pd.DataFrame:
        """Graph outputs: name, dtype, shape, dynamic."""
        from onnx_lab.analysis.tables import io_table

        return io_table(self._model, "outputs", self.dims, self.shapes)

    def summary(self) -> Summary:
        """Versions, sizes, inputs/outputs, dynamic dims, op counts and families.

        Example:
            >>> lab.summary()["num_params"]
        """
        from onnx_lab.analysis.summary import summarize

        return summarize(self._model, self.dims, self.shapes)

    def weight_stats(self, names: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Statistics and an outlier score per weight, read lazily.

        See :func:`onnx_lab.analysis.weights.weight_stats`."""
        from onnx_lab.analysis.weights import weight_stats

        return weight_stats(self._model, names)

    def weight_histogram(self, name: str, bins: int = 100):
        """A matplotlib Figure with the histogram of weight ``name``."""
        from onnx_lab.analysis.weights import weight_histogram

        return weight_histogram(self._model, name, bins=bins)

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        src = str(self.path) if self.path else "<memory>"
        return (f"<onnx_lab.Lab {src}: {len(self.index)} nodes, "
                f"{self._model.graph.num_nodes()} in the main graph>")

    def _repr_html_(self) -> str:
        src = html.escape(str(self.path) if self.path else "in-memory model")
        return f"<div><b>onnx_lab.Lab</b> — {src}</div>" + self.summary()._repr_html_()

    # ================================================================== render (issue 3)

    # ================================================================== transforms (issue 4)
    def _init_history(self) -> None:
        """Start the version history (transforms)."""

    # ================================================================== numerics (issue 5)

    # ================================================================== profiling (issue 6)

    # ================================================================== widgets (issue 7)
    def explore(self, **kwargs: Any):
        """The Explorer widget on this Lab (Summary | Nodes | Initializers | Tensors | Graph).

        Example:
            >>> onnx_lab.open("sample:convnet").explore()
        """
        from onnx_lab.widgets.explorer import Explorer

        return Explorer(self, **kwargs)
