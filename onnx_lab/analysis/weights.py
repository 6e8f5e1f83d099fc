"""Per-weight statistics and histograms, reading one tensor at a time."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.analysis.tables import constant_tensors, initializers_table
from onnx_lab.core._files import hard_link_error
from onnx_lab.core.model import LabModel, mapped_briefly
from onnx_lab.errors import ExternalDataError, InputError, unknown_name

__all__ = ["weight_stats", "weight_histogram", "weight_values"]

STATS_COLUMNS = ["name", "dtype", "shape", "numel", "min", "max", "mean", "std", "abs_max",
                 "zeros_frac", "nan_count", "inf_count", "outlier_score", "source"]


def weight_values(model: LabModel, name: str) -> np.ndarray:
    """The values of weight ``name`` (initializer or Constant node) as a numpy array.

    External data is read (memory-mapped) only now.

    Raises:
        UnknownNameError: no weight is called ``name``.
        ExternalDataError: its external data file changed or vanished since open.
    """
    idx = model.index
    for g in idx.graphs.values():
        v = g.initializers.get(name)
        if v is not None and v.const_value is not None:
            return _read(name, v.const_value)

    for out, t, _nid, _g in constant_tensors(model):
        if out == name:
            return t.numpy()
    names = initializers_table(model)["name"].tolist()
    raise unknown_name("weight", name, names, fix="See lab.initializers for the weight names.")


def _weight_tensors(model: LabModel) -> dict[str, ir.TensorProtocol]:
    """Weight name -> tensor (initializers of every graph, then Constant node values)."""
    out: dict[str, ir.TensorProtocol] = {}
    for g in model.index.graphs.values():
        for name, v in g.initializers.items():
            if v.const_value is not None:
                out.setdefault(name, v.const_value)
    for name, t, _nid, _g in constant_tensors(model):
        out.setdefault(name, t)
    return out


def _read(name: str, tensor) -> np.ndarray:
    try:
        return tensor.numpy()
    except (OSError, ValueError) as e:
        if isinstance(tensor, ir.ExternalTensor) and "hard link" in str(e):
            raise hard_link_error(name, str(tensor.location)) from e
        if isinstance(tensor, ir.ExternalTensor):
            raise ExternalDataError(
                f"Cannot read weight {name!r} from external data file {tensor.location!r}: {e}.",
                fix="The file changed or disappeared after the model was opened: restore it, "
                "or open the model again.") from e
        raise InputError(f"Cannot read the values of weight {name!r}: {e}.",
                         fix="Check that the model file is complete.") from e


def _stats(a: np.ndarray) -> tuple:
    if a.dtype.kind == "V" and a.dtype.names is None:
        # bfloat16 / float8 (ml_dtypes) convert to float; packed int4 and others do not.
        try:
            a = a.astype(np.float32)
        except (TypeError, ValueError):
            return (None,) * 9
    if a.dtype.kind not in "fiub" or a.size == 0:
        return (None,) * 9
    x = a.reshape(-1)
    if x.dtype == np.bool_:
        x = x.view(np.uint8)
    nan = inf = 0
    finite = x
    if x.dtype.kind == "f":
        ok = np.isfinite(x)
        bad = x.size - int(np.count_nonzero(ok))
        if bad:
            nan = int(np.count_nonzero(np.isnan(x)))
            inf = bad - nan
            finite = x[ok]
        del ok
    zeros = float(np.count_nonzero(x == 0) / x.size)
    if finite.size == 0:
        return (None, None, None, None, None, zeros, nan, inf, None)
    # Work in the weight's own dtype and accumulate in float64: no float64 copy of a
    # multi-GB tensor, one tensor's temporaries at a time.
    mn, mx = float(finite.min()), float(finite.max())
    mean = float(finite.mean(dtype=np.float64))
    std = float(finite.std(dtype=np.float64))
    # How many standard deviations the most extreme value lies from the mean: large values
    # mark weights that will quantize badly or hint at a corrupted tensor.
    outlier = float(max(mx - mean, mean - mn) / std) if std > 0 else 0.0
    return (mn, mx, mean, std, max(abs(mn), abs(mx)), zeros, nan, inf, outlier)


def weight_stats(model: LabModel, names: Iterable[str] | None = None) -> pd.DataFrame:
    """Statistics per weight (initializers and Constant tensors), one tensor in memory at a time.

    Columns:
        name, dtype, shape, numel; min, max, mean, std, abs_max (over finite values);
        zeros_frac (fraction exactly 0); nan_count, inf_count;
        outlier_score (max |x - mean| / std: 3-5 is normal for Gaussian-like weights, > 20
        deserves a look); source ('initializer' or 'constant').
        Non-numeric tensors (strings) have None statistics.

    Example:
        >>> lab.weight_stats().sort_values("outlier_score", ascending=False).head()
    """
    table = initializers_table(model)
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        known = set(table["name"])
        for n in names:
            if n not in known:
                raise unknown_name("weight", n, known,
                                   fix="See lab.initializers for the weight names.")
        table = table[table["name"].isin(names)]
    tensors = _weight_tensors(model)
    rows = []
    for r in table.itertuples():
        t = tensors[r.name]
        # External weights this call maps are unmapped again after their statistics, so
        # peak memory stays at one weight even for multi-GB models.
        with mapped_briefly(t):
            values = _read(r.name, t)
            rows.append((r.name, r.dtype, r.shape, r.numel, *_stats(values), r.source))
            del values
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


def weight_histogram(model: LabModel, name: str, bins: int = 100):
    """A matplotlib Figure with the histogram of weight ``name`` (log count axis).

    Example:
        >>> fig = lab.weight_histogram("stem.conv.weight")
    """
    values = weight_values(model, name)
    # Drawn by onnx_lab.render (the "histogram" view of an array), through _display.
    return _display.draw(values, "histogram", title=f"{name} {tuple(values.shape)}", bins=bins)
