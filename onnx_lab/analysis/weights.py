"""Per-weight statistics and histograms, reading one tensor at a time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.analysis.tables import constant_tensors, initializers_table
from onnx_lab.core._files import hard_link_error
from onnx_lab.core.model import LabModel, mapped_briefly
from onnx_lab.core.values import const_array
from onnx_lab.errors import ExternalDataError, InputError, unknown_name

__all__ = ["weight_stats", "weight_histogram", "weight_values"]

STATS_COLUMNS = ["name", "dtype", "shape", "numel", "min", "max", "mean", "std", "abs_max",
                 "zeros_frac", "nan_count", "inf_count", "outlier_score", "source", "note"]


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
        deserves a look); source ('initializer' or 'constant'); note: how the values
        were read where they are not the stored ones ("4-bit MatMulNBits weights,
        dequantized ([N, K])": the packed bytes of a MatMulNBits or GatherBlockQuantized are
        unpacked with their scales and zero points), else empty.
        Non-numeric tensors (strings) have None statistics.

    Example:
        >>> lab.weight_stats().sort_values("outlier_score", ascending=False).head()
    """
    table = initializers_table(model)
    if names is not None:
        if not isinstance(names, (str, Iterable)) or isinstance(names, Mapping):
            raise InputError(f"names must be a weight name or a list of them, got "
                             f"{type(names).__name__} {names!r}.",
                             fix="Pass e.g. names=['conv1.weight'] (lab.initializers lists "
                             "them).")
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
            values, note = _as_weights(model, r.name, _read(r.name, t))
            rows.append((r.name, r.dtype, r.shape, r.numel, *_stats(values), r.source, note))
            del values
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


# Ops whose input (at this position) is a weight of packed low-bit integers: statistics of
# its bytes (min 0, max 255, mean ~131 for 4 bits) say nothing about the weights it holds
_PACKED_INPUT = {("com.microsoft", "MatMulNBits"): 1,
                 ("com.microsoft", "GatherBlockQuantized"): 0}


def _as_weights(model: LabModel, name: str, values: np.ndarray) -> tuple[np.ndarray, str]:
    """(the weights ``values`` of weight ``name`` hold, how they were read: "" for the stored
    values, else the note of packed low-bit data unpacked, :func:`_dequantized`)."""
    reader = _packed_reader(model, name)
    return (values, "") if reader is None else _dequantized(model, reader, values)


def _packed_reader(model: LabModel, name: str) -> ir.Node | None:
    """The MatMulNBits / GatherBlockQuantized that reads weight ``name`` as its packed data."""
    idx = model.index
    for nid in idx.consumers.get(name, ()):
        node = idx.node(nid)
        pos = _PACKED_INPUT.get((node.domain, node.op_type))
        if pos is not None and len(node.inputs) > pos and node.inputs[pos] is not None \
                and node.inputs[pos].name == name:
            return node
    return None


def _unpack(q: np.ndarray, bits: int) -> np.ndarray:
    """Bytes along the last axis -> their ``bits``-wide unsigned fields, low bits first."""
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    fields = (q.astype(np.uint8)[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return fields.reshape(*q.shape[:-1], q.shape[-1] * per)


def _const(node: ir.Node, i: int) -> np.ndarray | None:
    """Input ``i``'s constant value (an initializer or a Constant node's), else None."""
    return const_array(node.inputs[i], stored=True) if _given(node, i) else None


def _given(node: ir.Node, i: int) -> bool:
    return len(node.inputs) > i and node.inputs[i] is not None


def _dequantized(model: LabModel, node: ir.Node, data: np.ndarray
                 ) -> tuple[np.ndarray, str]:
    """(the float weights ``data`` packs for ``node``, what the row says): MatMulNBits' B
    (``[N, blocks, blob]``, scales per block, zero points packed like it or float, default
    2^(bits-1)) as its ``[N, K]`` weights; GatherBlockQuantized's table (blocks along its last
    axis). Where they cannot be unpacked (act-order g_idx, another layout) the data is kept
    and the note says its statistics are of packed bytes."""
    op = node.op_type
    bits = node.attributes.get_int("bits", 4)
    packed = f"packed {bits}-bit {op} data: statistics of its bytes, not of the weights"
    try:
        scales = _const(node, 2)
        zp = _const(node, 3)
        if scales is None or bits not in (2, 4, 8) or (zp is None and _given(node, 3)):
            return data, packed  # (zero points that are not constant: not the default's)
        scales = scales.astype(np.float32)
        if op == "MatMulNBits":
            k, n = node.attributes.get_int("K", 0), node.attributes.get_int("N", 0)
            block = node.attributes.get_int("block_size", 0)
            if _const(node, 4) is not None or data.dtype != np.uint8 or data.ndim != 3 \
                    or data.shape[0] != n or not k or not block:
                return data, packed
            blocks = data.shape[1]
            q = _unpack(data, bits).astype(np.float32)  # [N, blocks, block]
            scale = scales.reshape(n, blocks)
            if zp is None:
                zero = np.full((n, blocks), float(1 << (bits - 1)), np.float32)
            elif zp.dtype == np.uint8:
                zero = _unpack(zp.reshape(n, -1), bits)[:, :blocks].astype(np.float32)
            else:
                zero = zp.astype(np.float32).reshape(n, blocks)
            w = (q - zero[..., None]) * scale[..., None]
            return w.reshape(n, -1)[:, :k], f"{bits}-bit {op} weights, dequantized ([N, K])"
        axis = node.attributes.get_int("quantize_axis", 1)
        block = node.attributes.get_int("block_size", 128)
        if axis not in (-1, data.ndim - 1) or not block:
            return data, packed
        if data.dtype == np.uint8:
            q, offset = _unpack(data, bits).astype(np.float32), float(1 << (bits - 1))
        else:  # a typed int4/uint4 table (ml_dtypes): onnxruntime's default zero point is 0
            q, offset = data.astype(np.float32), 0.0
        cols = q.shape[-1]
        if zp is None:
            zero = np.float32(offset)
        else:
            z = _unpack(zp, bits) if zp.dtype == np.uint8 else zp
            zero = np.repeat(z.astype(np.float32), block, axis=-1)[..., :cols]
        w = (q - zero) * np.repeat(scales, block, axis=-1)[..., :cols]
        return w, f"{bits}-bit {op} table, dequantized"
    except (ValueError, TypeError, IndexError):  # shapes that do not fit the attributes
        return data, packed


#: numpy.histogram's bin rules by name
_BIN_RULES = ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")


def weight_histogram(model: LabModel, name: str, bins: int = 100):
    """A matplotlib Figure with the histogram of weight ``name`` (log count axis); of the
    weights packed 4-bit data holds, as :func:`weight_stats` describes them.

    Example:
        >>> fig = lab.weight_histogram("stem.conv.weight")
    """
    # numpy's own ValueError otherwise; numpy's bin edges (a sequence) pass as they are
    if isinstance(bins, bool) or (isinstance(bins, (int, np.integer))
                                  and not 1 <= bins <= 10**6) \
            or (isinstance(bins, str) and bins not in _BIN_RULES):
        raise InputError(f"bins must be a number of bins from 1 to 1,000,000 or one of "
                         f"numpy's rules ({', '.join(_BIN_RULES)}), got {bins!r}.",
                         fix="Pass e.g. bins=100.")
    values, note = _as_weights(model, name, weight_values(model, name))
    title = f"{name} {tuple(values.shape)}" + (f": {note}" if note else "")
    # Drawn by onnx_lab.render (the "histogram" view of an array), through _display.
    return _display.draw(values, "histogram", title=title, bins=bins)
