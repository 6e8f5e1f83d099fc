"""Error metrics between a reference and a candidate tensor, accumulated slice by slice.

Metrics are accumulated (:class:`MetricAccumulator`) so a tensor can be fed in slices and over
several samples without ever materialising float64 copies of whole activations: memory stays
bounded by ``_SLICE`` elements per step whatever the tensor size.

Non-finite values are compared position by position: the same infinity (``-inf`` attention
masks) or NaN on both sides is a match; a NaN or infinity on one side only is a mismatch and
makes ``max_abs`` infinite. The error statistics (``mean_abs``, ``max_rel``, ``cosine``,
``sqnr_db``) are computed over positions finite on both sides.

Example:
    >>> import numpy as np
    >>> from onnx_lab.numerics.metrics import tensor_metrics
    >>> tensor_metrics(np.ones(4, np.float32), np.ones(4, np.float32) + 1e-6)["passed"]
    True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MetricAccumulator", "tensor_metrics", "METRIC_COLUMNS", "TOLERANCES", "tolerance"]

# Elements converted to float64 at a time (8 MB per temporary).
_SLICE = 1 << 20

METRIC_COLUMNS = ["shape", "cand_shape", "dtype", "cand_dtype", "max_abs", "mean_abs",
                  "max_rel", "cosine", "sqnr_db", "passed", "n_fail", "numel", "nan_ref",
                  "nan_cand", "inf_ref", "inf_cand", "note"]


#: Default (atol, rtol) per dtype name; integer and bool tensors compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-6),
    "float32": (1e-4, 1e-3),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 2e-2),
}
_FLOAT_FALLBACK = (1e-1, 1e-1)  # fp8 and other narrow floats


def tolerance(dtype: str, atol: float | None = None, rtol: float | None = None
              ) -> tuple[float, float]:
    """(atol, rtol) for a dtype name; user values override the float defaults.

    Integer and bool tensors always compare exactly (0, 0).
    """
    kind = _kind(dtype)
    if kind != "f":
        return 0.0, 0.0
    a, r = TOLERANCES.get(dtype, _FLOAT_FALLBACK)
    return (a if atol is None else float(atol)), (r if rtol is None else float(rtol))


def _kind(dtype: str) -> str:
    if dtype in TOLERANCES or dtype.startswith("float") or dtype.startswith("bfloat"):
        return "f"
    try:
        return np.dtype(dtype).kind if np.dtype(dtype).kind != "c" else "f"
    except TypeError:
        return "f"


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum, not np.dot: BLAS dot spins up threads, ~10x slower on busy small machines.
    return float(np.einsum("i,i->", a, b))


class MetricAccumulator:
    """Running metrics of one (reference, candidate) tensor pair over slices and samples.

    Args:
        atol, rtol: an element passes when ``|cand - ref| <= atol + rtol * |ref|``.
        statistics: also accumulate mean_abs, cosine and SQNR (False: only max_abs, max_rel
            and the failing count, what a pass/fail verdict needs; cosine and sqnr_db are
            then NaN and mean_abs too).
    """

    def __init__(self, atol: float, rtol: float, *, statistics: bool = True) -> None:
        self.atol = float(atol)
        self.rtol = float(rtol)
        self.statistics = statistics
        self.shape: tuple | None = None
        self.cand_shape: tuple | None = None
        self.dtype: str | None = None
        self.cand_dtype: str | None = None
        self.notes: list[str] = []
        self.comparable = True
        self.numel = 0
        self.n_finite = 0
        self.max_abs = 0.0
        self.sum_abs = 0.0
        self.max_rel = 0.0
        self.dot = 0.0
        self.sum_r2 = 0.0
        self.sum_c2 = 0.0
        self.sum_e2 = 0.0
        self.n_fail = 0
        self.nan_ref = self.nan_cand = self.inf_ref = self.inf_cand = 0

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def add(self, ref: Any, cand: Any) -> None:
        """Accumulate one sample of the pair (arrays of any dtype; mismatches are noted)."""
        ref = np.asarray(ref)
        cand = np.asarray(cand)
        if self.shape is None:
            self.shape, self.cand_shape = tuple(ref.shape), tuple(cand.shape)
            self.dtype, self.cand_dtype = str(ref.dtype), str(cand.dtype)
        if ref.dtype != cand.dtype:
            self._note(f"dtype differs ({ref.dtype} vs {cand.dtype}): compared as float64")
        if ref.shape != cand.shape:
            if ref.size == cand.size:
                self._note(f"shape differs ({list(ref.shape)} vs {list(cand.shape)}), same size: "
                           "compared flattened")
            else:
                self._note(f"shape mismatch: {list(ref.shape)} vs {list(cand.shape)}")
                self.comparable = False
                return
        if not self.comparable:
            return
        if ref.dtype.kind not in "biufc" or cand.dtype.kind not in "biufc":
            self._note(f"not numeric ({ref.dtype} / {cand.dtype})")
            self.comparable = False
            return
        r_flat = ref.reshape(-1)
        c_flat = cand.reshape(-1)
        for start in range(0, r_flat.size, _SLICE):
            self._add_slice(r_flat[start:start + _SLICE], c_flat[start:start + _SLICE])

    def _add_slice(self, r: np.ndarray, c: np.ndarray) -> None:
        self.numel += r.size
        if r.dtype == c.dtype and r.dtype.kind == "f" and np.array_equal(r, c):
            # Identical slices (the common case when comparing optimized graphs): one pass.
            if not self.statistics and not np.isnan(r).any():
                self.n_finite += r.size  # infinities equal on both sides match
                return
            if np.isfinite(r).all():
                r64 = r.astype(np.float64)
                sq = float(_dot(r64, r64))
                self.n_finite += r.size
                self.dot += sq
                self.sum_r2 += sq
                self.sum_c2 += sq
                return
        r = r.astype(np.float64)
        c = c.astype(np.float64)
        if self.statistics:
            sum_r2 = float(_dot(r, r))
            sum_c2 = float(_dot(c, c))
            # NaN/inf anywhere make these sums non-finite (float64 sums of float32 squares
            # cannot overflow), so the per-element masks below are only built when needed.
            finite = math.isfinite(sum_r2) and math.isfinite(sum_c2)
        else:
            sum_r2 = sum_c2 = 0.0
            finite = bool(np.isfinite(r).all() and np.isfinite(c).all())
        if not finite:
            r, c = self._nonfinite(r, c)
            if r.size == 0:
                return
            if self.statistics:
                sum_r2 = float(_dot(r, r))
                sum_c2 = float(_dot(c, c))
        err = c - r
        np.abs(err, out=err)
        absr = np.abs(r)
        self.n_finite += r.size
        self.max_abs = max(self.max_abs, float(err.max()))
        if self.statistics:
            self.sum_abs += float(err.sum())
            self.sum_e2 += float(_dot(err, err))
            self.dot += float(_dot(r, c))
            self.sum_r2 += sum_r2
            self.sum_c2 += sum_c2
        tol = absr * self.rtol
        tol += self.atol
        self.n_fail += int(np.count_nonzero(err > tol))
        # Relative error over nonzero reference elements (reuses the tol buffer).
        rel = np.divide(err, absr, out=np.zeros_like(err), where=absr > 0)
        self.max_rel = max(self.max_rel, float(rel.max()))

    def _nonfinite(self, r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count NaN/inf, score mismatched non-finite positions; return the finite pairs."""
        r_fin = np.isfinite(r)
        c_fin = np.isfinite(c)
        r_nan = np.isnan(r)
        c_nan = np.isnan(c)
        self.nan_ref += int(r_nan.sum())
        self.nan_cand += int(c_nan.sum())
        self.inf_ref += int((~r_fin & ~r_nan).sum())
        self.inf_cand += int((~c_fin & ~c_nan).sum())
        both = r_fin & c_fin
        # Same NaN-ness and the same infinity on both sides match; anything else does not.
        same = (r_nan & c_nan) | (~r_nan & ~c_nan & ~r_fin & ~c_fin & (r == c))
        bad = int((~both & ~same).sum())
        if bad:
            self.n_fail += bad
            self.max_abs = math.inf
            self.max_rel = math.inf
        return r[both], c[both]

    def result(self) -> dict[str, Any]:
        """The metrics as a dict with the keys of :data:`METRIC_COLUMNS`."""
        ok = self.comparable and self.shape is not None
        nan = math.nan
        if ok and self.n_finite and self.statistics:
            mean_abs = self.sum_abs / self.n_finite
            denom = math.sqrt(self.sum_r2 * self.sum_c2)
            cosine = self.dot / denom if denom > 0 else (1.0 if self.sum_e2 == 0 else 0.0)
            if self.sum_e2 == 0:
                sqnr = math.inf
            elif self.sum_r2 == 0:
                sqnr = -math.inf
            else:
                sqnr = 10.0 * math.log10(self.sum_r2 / self.sum_e2)
        else:
            mean_abs = cosine = sqnr = nan
        return {
            "shape": list(self.shape) if self.shape is not None else None,
            "cand_shape": list(self.cand_shape) if self.cand_shape is not None else None,
            "dtype": self.dtype,
            "cand_dtype": self.cand_dtype,
            "max_abs": self.max_abs if ok else nan,
            "mean_abs": mean_abs,
            "max_rel": self.max_rel if ok else nan,
            "cosine": cosine,
            "sqnr_db": sqnr,
            "passed": bool(ok and self.n_fail == 0),
            "n_fail": self.n_fail if ok else None,
            "numel": self.numel,
            "nan_ref": self.nan_ref,
            "nan_cand": self.nan_cand,
            "inf_ref": self.inf_ref,
            "inf_cand": self.inf_cand,
            "note": "; ".join(self.notes),
        }


def tensor_metrics(ref: Any, cand: Any, atol: float = 1e-4, rtol: float = 1e-3, *,
                   statistics: bool = True) -> dict[str, Any]:
    """Metrics of one pair of arrays (see :data:`METRIC_COLUMNS`); mismatches noted, not raised.

    Keys: shape, cand_shape, dtype, cand_dtype, max_abs, mean_abs, max_rel (over nonzero
    reference elements), cosine, sqnr_db (10·log10(Σref² / Σerr²), inf when equal), passed,
    n_fail (elements outside ``atol + rtol·|ref|``), numel, nan_ref, nan_cand, inf_ref,
    inf_cand, note (shape/dtype differences).

    Example:
        >>> tensor_metrics([1.0, -np.inf], [1.0, -np.inf])["passed"]
        True
    """
    acc = MetricAccumulator(atol, rtol, statistics=statistics)
    acc.add(ref, cand)
    return acc.result()
