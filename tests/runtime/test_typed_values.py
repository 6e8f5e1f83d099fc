"""bfloat16, float8 and int4 values through onnxruntime (runtime/typed.py, session.bounded_run):
feeds made as ml_dtypes arrays, passed as typed OrtValues, outputs read back as ml_dtypes and
compared in float. Both directions: a model compared with itself passes, a real drift in a
bfloat16 / float8 / int4 output is caught."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnx_lab
from onnx_lab.runtime.feeds import as_feed_list, make_feeds
from onnx_lab.runtime.typed import _pack, _unpack, from_ortvalue, to_ortvalue

TYPES = [(T.BFLOAT16, ml_dtypes.bfloat16), (T.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
         (T.FLOAT8E5M2, ml_dtypes.float8_e5m2), (T.INT4, ml_dtypes.int4),
         (T.UINT4, ml_dtypes.uint4)]


def scaled(elem: int, scale: float = 2.0) -> onnx.ModelProto:
    """x (elem) -> float -> Identity -> * scale -> elem."""
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT),
         helper.make_node("Identity", ["xf"], ["xi"]),
         helper.make_node("Mul", ["xi", "s"], ["yf"]),
         helper.make_node("Cast", ["yf"], ["y"], to=elem)], "g",
        [helper.make_tensor_value_info("x", elem, ["n", 4])],
        [helper.make_tensor_value_info("y", elem, ["n", 4])],
        initializer=[helper.make_tensor("s", T.FLOAT, [], [scale])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("elem,dt", TYPES)
def test_feeds_are_ml_dtypes_arrays(elem, dt):
    feeds = make_feeds(scaled(elem), dims={"n": 3})
    assert feeds["x"].dtype == np.dtype(dt) and feeds["x"].shape == (3, 4)
    if "int" in str(np.dtype(dt)):  # in the type's range
        assert ml_dtypes.iinfo(dt).min <= feeds["x"].astype(np.int64).min()
        assert feeds["x"].astype(np.int64).max() <= ml_dtypes.iinfo(dt).max
    # a user's float32 array for a bfloat16 input is taken (cast); strings are not
    got = as_feed_list({"x": np.ones((3, 4), np.float32 if "float" in str(np.dtype(dt))
                                     else np.int64)}, scaled(elem), dims={"n": 3})
    assert got[0]["x"].dtype == np.dtype(dt)
    with pytest.raises(onnx_lab.errors.InputError):
        as_feed_list({"x": np.array([["a"] * 4] * 3, dtype=object)}, scaled(elem),
                     dims={"n": 3})


@pytest.mark.parametrize("elem,dt", TYPES)
def test_ortvalue_round_trip(elem, dt):
    import onnxruntime as ort

    x = np.array([[0, 1, 2, 3], [4, 5, 6, 7], [1, 0, 1, 0]]).astype(dt)
    sess = ort.InferenceSession(scaled(elem, 1.0).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    (out,) = sess.run_with_ort_values(None, {"x": to_ortvalue(x)})
    y = from_ortvalue(out)
    assert y.dtype == np.dtype(dt) and y.shape == x.shape
    assert np.array_equal(y.astype(np.float32), x.astype(np.float32))


def test_sub_byte_packing_is_onnx_layout():
    x = np.array([-3, -2, -1, 0, 1, 7, -8]).astype(ml_dtypes.int4)
    packed = _pack(x.view(np.uint8), 4)
    assert packed.tolist() == [0xED, 0x0F, 0x71, 0x08]  # element 0 in the low nibble
    assert np.array_equal(_unpack(packed, 4, 7).view(ml_dtypes.int4), x)


@pytest.mark.parametrize("elem,dt", TYPES)
def test_compare_and_verify_both_directions(elem, dt):
    m = scaled(elem)
    same = onnx_lab.compare(m, m, dims={"n": 3})
    assert same.passed, same
    lab = onnx_lab.open(m, dims={"n": 3})
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed is True
    # a real drift (scale 2 -> 2.5 on values 0..9) is caught in every type
    drift = onnx_lab.compare(m, scaled(elem, 2.5), dims={"n": 3})
    assert not drift.passed
    assert drift.first_divergence is not None


def test_bfloat16_small_drift_caught_and_rounding_not_flagged():
    """1 ulp of bfloat16 at the preset's tolerance is no alarm; a 10 % drift is one."""
    m = scaled(T.BFLOAT16, 2.0)
    ulp = onnx_lab.compare(m, scaled(T.BFLOAT16, 2.0 * (1 + 2 ** -9)), dims={"n": 3})
    assert ulp.passed, ulp
    big = onnx_lab.compare(m, scaled(T.BFLOAT16, 2.2), dims={"n": 3})
    assert not big.passed
