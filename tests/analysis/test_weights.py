"""weight_stats and weight_histogram: values against numpy, outliers, lazy reading."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import paddle_style, quantized, save_external
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.analysis.weights import STATS_COLUMNS, weight_values
from onnx_lab.errors import ExternalDataError, UnknownNameError


def _model_with(**weights: np.ndarray) -> onnx.ModelProto:
    names = list(weights)
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in names]
    outs = [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None) for n in names]
    g = helper.make_graph(nodes, "w", [], outs,
                          [numpy_helper.from_array(a, n) for n, a in weights.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_stats_match_numpy():
    proto = onnx_lab.samples.build("convnet")
    stats = onnx_lab.open(proto).weight_stats()
    assert list(stats.columns) == STATS_COLUMNS
    assert len(stats) == len(proto.graph.initializer)
    for t in proto.graph.initializer:
        a = numpy_helper.to_array(t).astype(np.float64)
        r = stats.set_index("name").loc[t.name]
        assert r["numel"] == a.size and r["shape"] == a.shape
        assert r["min"] == pytest.approx(a.min()) and r["max"] == pytest.approx(a.max())
        assert r["mean"] == pytest.approx(a.mean()) and r["std"] == pytest.approx(a.std())
        assert r["abs_max"] == pytest.approx(np.abs(a).max())
        assert r["zeros_frac"] == pytest.approx((a == 0).mean())
        assert r["nan_count"] == 0 and r["inf_count"] == 0
        want = (max(abs(a.max() - a.mean()), abs(a.min() - a.mean())) / a.std()
                if a.std() > 0 else 0.0)
        assert r["outlier_score"] == pytest.approx(want)
        assert r["source"] == "initializer"


def test_outlier_score_flags_a_spike():
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(10_000).astype(np.float32)
    spiked = normal.copy()
    spiked[123] = 500.0
    stats = onnx_lab.open(_model_with(normal=normal, spiked=spiked)).weight_stats()
    score = stats.set_index("name")["outlier_score"]
    assert score["normal"] < 6
    a = spiked.astype(np.float64)
    assert score["spiked"] == pytest.approx((500 - a.mean()) / a.std())
    assert score["spiked"] > 50


def test_nan_inf_and_zeros():
    a = np.array([0.0, 0.0, 1.0, -3.0, np.nan, np.inf, -np.inf, 2.0], np.float32)
    r = onnx_lab.open(_model_with(w=a)).weight_stats().iloc[0]
    assert r["nan_count"] == 1 and r["inf_count"] == 2
    assert r["zeros_frac"] == pytest.approx(2 / 8)
    finite = np.array([0, 0, 1, -3, 2], np.float64)
    assert r["min"] == -3 and r["max"] == 2 and r["abs_max"] == 3
    assert r["mean"] == pytest.approx(finite.mean()) and r["std"] == pytest.approx(finite.std())
    const = onnx_lab.open(_model_with(c=np.full(4, 7.0, np.float32))).weight_stats().iloc[0]
    assert const["std"] == 0 and const["outlier_score"] == 0


def test_integer_and_constant_weights():
    stats = onnx_lab.open(quantized()).weight_stats().set_index("name")
    assert stats.loc["conv.w_q", "dtype"] == "uint8"
    want = numpy_helper.to_array(quantized().graph.initializer[0]).astype(np.float64)
    assert stats.loc["conv.w_q", "mean"] == pytest.approx(want.mean())
    paddle = onnx_lab.open(paddle_style()).weight_stats().set_index("name")
    assert (paddle["source"] == "constant").all()
    w = numpy_helper.to_array(paddle_style().graph.node[0].attribute[0].t)
    assert paddle.loc["conv2d_0.w_0", "std"] == pytest.approx(w.astype(np.float64).std())


def test_names_filter():
    lab = onnx_lab.open("sample:convnet")
    assert lab.weight_stats("head.fc.bias")["name"].tolist() == ["head.fc.bias"]
    assert sorted(lab.weight_stats(["head.fc.bias", "dead.scale"])["name"]) == \
        ["dead.scale", "head.fc.bias"]
    with pytest.raises(UnknownNameError, match="'head.fc.bais'.*'head.fc.bias'"):
        lab.weight_stats("head.fc.bais")


def test_weight_values():
    proto = onnx_lab.samples.build("convnet")
    lab = onnx_lab.open(proto)
    np.testing.assert_array_equal(weight_values(lab.model, "stem.conv.weight"),
                                  numpy_helper.to_array(proto.graph.initializer[0]))
    with pytest.raises(UnknownNameError):
        weight_values(lab.model, "nope")


def test_histogram_is_a_figure():
    from matplotlib.figure import Figure

    lab = onnx_lab.open("sample:convnet")
    fig = lab.weight_histogram("stem.conv.weight", bins=20)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.patches) == 20 and "stem.conv.weight" in ax.get_title()
    with pytest.raises(UnknownNameError):
        lab.weight_histogram("nope")
    nan = onnx_lab.open(_model_with(w=np.array([1, np.nan, 2], np.float32)))
    assert "1 non-finite" in nan.weight_histogram("w").axes[0].get_title()


def test_external_weights_read_lazily_and_errors_name_the_file(tmp_path):
    path = save_external(onnx_lab.samples.build("convnet"), tmp_path / "m.onnx")
    lab = onnx_lab.open(path)
    assert all(t.raw is None for t in lab.model.external_tensors())
    lab.weight_stats("stem.conv.weight")
    gone = onnx_lab.open(path)
    (tmp_path / "m.onnx.data").unlink()
    with pytest.raises(ExternalDataError, match="'stem.conv.weight'.*'m.onnx.data'"):
        gone.weight_stats()


def test_weight_stats_unmaps_what_it_mapped(tmp_path):
    path = save_external(onnx_lab.samples.build("convnet"), tmp_path / "m.onnx")
    lab = onnx_lab.open(path)
    held = weight_values(lab.model, "head.fc.bias")  # mapped by the caller: stays mapped
    stats = lab.weight_stats()
    assert len(stats) == 21
    mapped = {t.name for t in lab.model.external_tensors() if t.raw is not None}
    assert mapped == {"head.fc.bias"}
    assert held.shape == (10,)


def test_bool_and_int_weights():
    r = onnx_lab.open(_model_with(b=np.array([True, False, True, True]))).weight_stats().iloc[0]
    assert r["mean"] == 0.75 and r["zeros_frac"] == 0.25 and r["max"] == 1
    r = onnx_lab.open(_model_with(i=np.array([-5, 0, 5, 10], np.int64))).weight_stats().iloc[0]
    assert (r["min"], r["max"], r["abs_max"]) == (-5, 10, 10)
    assert r["mean"] == 2.5 and r["std"] == pytest.approx(np.std([-5, 0, 5, 10]))
