"""One door, one answer: onnx_lab.profile(x) and lab.profile() are one function."""
from __future__ import annotations

import math

import onnx_lab
from onnx_lab.analysis.peak import predicted_peak


def test_module_and_method_profile_return_the_same_tables():
    lab = onnx_lab.open("sample:convnet")
    a = onnx_lab.profile(lab, runs=3, warmup=1)
    b = lab.profile(runs=3, warmup=1)
    c = onnx_lab.profile("sample:convnet", runs=3, warmup=1)  # any source, not only a Lab
    want = predicted_peak(lab)
    assert want > 0
    for p in (a, b, c):
        assert list(p.memory.columns) == list(b.memory.columns)
        assert list(p.ops.columns) == list(b.ops.columns)
        assert list(p.nodes.columns) == list(b.nodes.columns)
        got = p.memory.predicted_activation_bytes
        assert len(got) and not got.isna().any() and (got == want).all()


def test_prediction_is_nan_where_the_cost_model_cannot_count():
    # dynamic batch/seq without values: the cost model cannot count, the profile still runs
    assert math.isnan(predicted_peak("sample:transformer_block"))
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    assert predicted_peak(lab) > 0
    assert (lab.profile(runs=2, warmup=1).memory.predicted_activation_bytes
            == predicted_peak(lab)).all()
