"""Metrics: exact values, non-finite handling, mismatches reported not raised, slicing."""

from __future__ import annotations

import math

import numpy as np

from onnx_lab.numerics import metrics
from onnx_lab.numerics.metrics import METRIC_COLUMNS, MetricAccumulator, tensor_metrics


def test_known_values():
    r = np.array([1.0, -2.0, 4.0], np.float32)
    c = np.array([1.5, -2.0, 4.0], np.float32)
    m = tensor_metrics(r, c, atol=0.1, rtol=0.0)
    assert list(m) == METRIC_COLUMNS
    assert m["max_abs"] == 0.5 and math.isclose(m["mean_abs"], 0.5 / 3)
    assert m["max_rel"] == 0.5 and m["n_fail"] == 1 and not m["passed"]
    assert math.isclose(m["sqnr_db"], 10 * math.log10(21 / 0.25))
    assert 0.99 < m["cosine"] < 1.0


def test_identical_and_tolerance_edges():
    x = np.linspace(-3, 3, 100).astype(np.float32)
    m = tensor_metrics(x, x)
    assert m["passed"] and m["max_abs"] == 0 and m["sqnr_db"] == math.inf and m["cosine"] == 1
    m = tensor_metrics([0.0], [1e-4], atol=1e-4, rtol=0)
    assert m["passed"]  # |err| <= atol counts as within tolerance
    assert tensor_metrics(np.zeros(3), np.zeros(3))["cosine"] == 1.0


def test_nonfinite_positions():
    r = np.array([-np.inf, np.inf, np.nan, 1.0])
    m = tensor_metrics(r, r.copy())
    assert m["passed"] and m["max_abs"] == 0
    assert (m["inf_ref"], m["nan_ref"], m["inf_cand"], m["nan_cand"]) == (2, 1, 2, 1)
    m = tensor_metrics(r, np.array([-np.inf, -np.inf, np.nan, 1.0]))  # wrong sign of inf
    assert not m["passed"] and m["n_fail"] == 1 and m["max_abs"] == math.inf
    m = tensor_metrics(r, np.array([-np.inf, np.inf, 0.0, 1.0]))  # NaN on one side only
    assert not m["passed"] and m["n_fail"] == 1
    m = tensor_metrics([np.nan, np.nan], [np.nan, np.nan])  # nothing finite to compare
    assert m["passed"] and math.isnan(m["mean_abs"])


def test_shape_and_dtype_mismatches_are_reported():
    m = tensor_metrics(np.zeros((2, 3)), np.zeros((3, 3)))
    assert not m["passed"] and "shape mismatch" in m["note"] and math.isnan(m["max_abs"])
    assert m["shape"] == [2, 3] and m["cand_shape"] == [3, 3]
    m = tensor_metrics(np.ones((1, 6)), np.ones(6))
    assert m["passed"] and "compared flattened" in m["note"]
    m = tensor_metrics(np.ones(4, np.float32), np.ones(4, np.float16))
    assert m["passed"] and "dtype differs" in m["note"] and m["cand_dtype"] == "float16"
    m = tensor_metrics(np.array([1, 2], np.int64), np.array([1, 3], np.int64), atol=0, rtol=0)
    assert m["max_abs"] == 1 and not m["passed"]
    m = tensor_metrics(np.array(["a"]), np.array(["a"]))
    assert not m["passed"] and "not numeric" in m["note"]


def test_slices_and_samples_accumulate_exactly(monkeypatch):
    rng = np.random.default_rng(0)
    r = rng.standard_normal((3, 1000)).astype(np.float32)
    c = (r + rng.standard_normal(r.shape) * 1e-3).astype(np.float32)
    whole = tensor_metrics(r, c)
    monkeypatch.setattr(metrics, "_SLICE", 7)
    sliced = tensor_metrics(r, c)
    for k in ("max_abs", "max_rel", "n_fail", "numel"):
        assert whole[k] == sliced[k]
    for k in ("mean_abs", "cosine", "sqnr_db"):
        assert math.isclose(whole[k], sliced[k], rel_tol=1e-9)
    acc = MetricAccumulator(1e-4, 1e-3)
    for i in range(3):
        acc.add(r[i], c[i])
    per_sample = acc.result()
    assert per_sample["max_abs"] == whole["max_abs"] and per_sample["numel"] == 3000
    assert per_sample["shape"] == [1000]


def test_properties_of_random_arrays():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import arrays

    floats = st.floats(allow_nan=True, allow_infinity=True, width=32)

    @settings(max_examples=60, deadline=None)
    @given(arrays(np.float32, st.integers(1, 40), elements=floats))
    def check(x):
        same = tensor_metrics(x, x.copy())
        assert same["passed"] and same["n_fail"] == 0 and same["max_abs"] == 0
        assert same["nan_ref"] == int(np.isnan(x).sum())
        y = x.copy()
        y[0] = np.nan if not np.isnan(x[0]) else 1.0
        changed = tensor_metrics(x, y)
        assert not changed["passed"] and changed["max_abs"] == math.inf

    check()


def test_float32_verdicts_equal_the_float64_ones_at_the_tolerance_edge():
    """Verdict fields of float32 pairs are computed in float32 (fast); they must equal the
    float64 path's, also for elements whose error sits on the tolerance itself."""
    from onnx_lab.numerics.metrics import Rule

    rng = np.random.default_rng(7)
    atol, rtol = 1e-4, 1e-3
    for scale in (1e-30, 1e-3, 1.0, 1e3, 1e30):
        r = (rng.normal(0, scale, 50_000)).astype(np.float32)
        tol = atol + rtol * np.abs(r.astype(np.float64))
        # A third just inside, a third on, a third just outside the tolerance (in float64,
        # then rounded to float32: every side of the edge), plus zeros and tiny values.
        side = rng.choice([-1e-7, 0.0, 1e-7], r.size)
        c = (r.astype(np.float64) + np.sign(rng.normal(size=r.size)) * tol * (1 + side))
        c = c.astype(np.float32)
        r[:100] = 0.0
        r[100:200] = np.float32(1e-40)
        for rule in (Rule("elementwise", atol, rtol), Rule("scaled", atol, rtol)):
            fast = tensor_metrics(r, c, rule=rule, statistics=False)
            exact = tensor_metrics(r.astype(np.float64), c.astype(np.float64), rule=rule,
                                   statistics=False)
            for key in ("n_fail", "passed", "max_abs", "max_ref", "numel"):
                assert fast[key] == exact[key], (scale, rule.kind, key)
            assert math.isclose(fast["max_rel"], exact["max_rel"], rel_tol=1e-6)
            assert 0 < fast["n_fail"] < r.size  # the edge really was crossed both ways
    # NaN/inf slices take the float64 path: same fields as before.
    bad = tensor_metrics(np.array([1.0, np.nan], np.float32), np.array([1.0, 2.0], np.float32),
                         statistics=False)
    assert bad["n_fail"] == 1 and not bad["passed"]
