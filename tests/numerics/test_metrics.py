"""Metrics: exact values, non-finite handling, mismatches reported not raised, slicing."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
    m = tensor_metrics(np.array(["a"]), np.array(["a"]))  # strings: compared for equality
    assert m["passed"] and m["compared_as"] == "equality"
    assert not tensor_metrics(np.array(["a"]), np.array(["b"]))["passed"]


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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------- rules and scores
RULES = [metrics.Rule("elementwise", 1e-3, 1e-2), metrics.Rule("elementwise"),
         metrics.Rule("scaled", 1e-3, 1e-2), metrics.Rule("max_abs", 1e-2),
         metrics.Rule("max_abs"), metrics.Rule("sqnr", min_sqnr_db=20.0),
         metrics.Rule("cosine", min_cosine=0.999), metrics.Rule("cosine", min_cosine=1.0)]


def test_every_rule_scores_and_the_score_agrees_with_the_verdict():
    """One engine judges every comparison: the precision search's score (<= 1 passes) and
    compare's ``passed`` come from the same accumulator and never disagree."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        r = (rng.standard_normal(int(rng.integers(1, 40))) * 10 ** rng.uniform(-3, 3))
        r = r.astype(np.float32)
        c = (r + rng.standard_normal(r.size) * 10 ** rng.uniform(-7, 0) * np.abs(r).max())
        c = c.astype(np.float32 if rng.random() < 0.5 else np.float16)
        if rng.random() < 0.2:
            c[0] = np.nan
        for rule in RULES:
            acc = MetricAccumulator(rule=rule, scored=True)
            acc.add(r, c)
            got = metrics.judge(rule, [r], [c])
            assert got["passed"] == acc.result()["passed"] == (acc.score() <= 1), rule
            assert got["score"] == acc.score()


def test_judge_scores_each_rule_by_its_formula():
    r = np.array([1.0, -2.0, 4.0], np.float32)
    c = np.array([1.5, -2.0, 4.0], np.float32)
    s = lambda rule: metrics.judge(rule, [r], [c])  # noqa: E731
    assert math.isclose(s(metrics.Rule("elementwise", 0.1, 0.1))["score"], 0.5 / 0.2)
    assert math.isclose(s(metrics.Rule("scaled", 0.1, 0.1))["score"], 0.5 / 0.5)
    assert math.isclose(s(metrics.Rule("max_abs", 1.0))["score"], 0.5)
    sqnr = 10 * math.log10(21 / 0.25)
    assert math.isclose(s(metrics.Rule("sqnr", min_sqnr_db=20))["score"], 10 ** ((20 - sqnr) / 10))
    got = s(metrics.Rule("cosine", min_cosine=0.9))
    assert math.isclose(got["score"], (1 - got["cosine"]) / 0.1) and got["passed"]
    assert math.isclose(got["sqnr_db"], sqnr) and got["max_abs"] == 0.5
    # Over several samples the sums run over all of them.
    two = metrics.judge(metrics.Rule("sqnr", min_sqnr_db=20), [r, r], [c, r])
    assert math.isclose(two["sqnr_db"], 10 * math.log10(42 / 0.25))
    assert metrics.Rule("max_abs", 0.01).describe() == "max|err| <= 0.01"
    assert metrics.Rule("cosine", min_cosine=0.999).describe() == "cosine >= 0.999"


def test_judge_edges_never_pass_a_broken_candidate_nor_fail_an_equal_one():
    x = np.array([1.0, -np.inf, np.nan], np.float32)
    for rule in RULES:
        same = metrics.judge(rule, [x], [x.copy()])
        assert same["passed"] and same["score"] == 0 and same["max_abs"] == 0, rule
        nan = metrics.judge(rule, [x], [np.array([np.nan, -np.inf, np.nan], np.float32)])
        assert not nan["passed"] and nan["score"] == math.inf == nan["max_abs"], rule
        shape = metrics.judge(rule, [np.ones(3)], [np.ones(4)])
        assert not shape["passed"] and shape["score"] == math.inf, rule
        empty = metrics.judge(rule, [np.zeros(0)], [np.zeros(0)])
        assert empty["passed"] and empty["sqnr_db"] == math.inf and empty["cosine"] == 1.0
    # A zero tolerance allows no error at all; integers and bools compare too.
    assert metrics.judge(metrics.Rule("elementwise"), [[1, 2]], [[1, 3]])["score"] == math.inf
    assert metrics.judge(metrics.Rule("max_abs"), [[True]], [[True]])["passed"]


def test_max_ref_and_the_finite_error_see_past_a_one_sided_nan():
    acc = MetricAccumulator(rule=metrics.Rule("sqnr", min_sqnr_db=0))
    acc.add(np.array([70000.0, 1.0, 2.0], np.float32), np.array([np.inf, 1.5, 2.0], np.float32))
    assert acc.max_ref == 70000.0  # the reference's magnitude, whatever the candidate holds
    assert acc.max_abs == math.inf and acc.max_abs_finite == 0.5
    assert (acc.inf_cand, acc.n_finite) == (1, 2)


def test_a_narrow_float_overflow_shown_two_ways_matches():
    # One kernel rounds a float16 overflow to inf, another saturates at 65504 (light ResNet-50
    # in float16, its weights folded or not): both overflowed. Only between tensors of that
    # dtype: a float32 reference's 65504 against a float16 inf is a real overflow.
    import numpy as np

    from onnx_lab.numerics.metrics import tensor_metrics

    r = np.array([np.inf, 1.0, -np.inf], np.float16)
    c = np.array([65504.0, 1.0, -65504.0], np.float16)
    assert tensor_metrics(r, c)["passed"] and tensor_metrics(c, r)["passed"]
    assert not tensor_metrics(r.astype(np.float32), c.astype(np.float32))["passed"]
    assert not tensor_metrics(r[:1], -c[:1])["passed"]  # the other sign
    assert not tensor_metrics(r[:1], np.array([60000.0], np.float16))["passed"]
    assert not tensor_metrics(r[:1].astype(np.float32), c[:1])["passed"]  # fp32 vs fp16


def test_a_reference_beyond_float16_is_compared_at_its_limit():
    # BERT's mask fill at float32's minimum: to_fp16 writes -65504, which float16 holds; the
    # row failed (max_abs 3.4e38, "1 out of tolerance") under a passing verdict
    big = np.finfo(np.float32).min
    r = np.array([big, -2.0, 1e6], np.float32)
    m = tensor_metrics(r, np.array([-65504.0, -2.0, 65504.0], np.float16))
    assert m["passed"] and m["max_abs"] == 0.0
    assert "compared at its limit" in m["note"]
    # an overflow to inf is still one, and a wrong value too
    assert not tensor_metrics(r, np.array([-np.inf, -2.0, 65504.0], np.float16))["passed"]
    assert not tensor_metrics(r, np.array([-65504.0, -3.0, 65504.0], np.float16))["passed"]
    # only for a float16 candidate: float32 against float32 is compared as it is
    assert not tensor_metrics(r, np.array([-65504.0, -2.0, 65504.0], np.float32))["passed"]


def test_a_wider_candidate_beyond_a_narrow_references_range_is_its_overflow():
    # onnxruntime's optimized float16 model on CPU keeps the float32 of the Casts it inserts:
    # where the float16 reference overflowed (inf, or 65504 from a saturating kernel), the
    # candidate holds the float32 value beyond float16's range (light SqueezeNet in float16:
    # 506708 against inf failed `ort:basic` with bit-identical outputs)
    r = np.array([np.inf, 1.0, -np.inf, 65504.0], np.float16)
    c = np.array([506708.0, 1.0, -7e4, 1e5], np.float32)
    m = tensor_metrics(r, c)
    assert m["passed"] and m["max_abs"] == 0.0
    assert "compared as the reference's overflow" in m["note"]
    assert tensor_metrics(r.reshape(2, 2), c)["passed"]  # same size, compared flattened
    # a value float16 holds is not an overflow, the other sign is another value, and the
    # finite elements are compared as ever
    assert not tensor_metrics(r, np.array([60000.0, 1.0, -7e4, 1e5], np.float32))["passed"]
    assert not tensor_metrics(r, np.array([-1e5, 1.0, -7e4, 1e5], np.float32))["passed"]
    assert not tensor_metrics(r, np.array([1e5, 1.5, -7e4, 1e5], np.float32))["passed"]
    # the other way round stays a real overflow: a float16 candidate's inf against float32
    assert not tensor_metrics(c, r)["passed"]
