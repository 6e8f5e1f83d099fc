from __future__ import annotations

import numpy as np
import pytest

import onnx_lab
from onnx_lab import to_fp16
from onnx_lab.widgets import DriftDebugger


def test_drift_code_line_without_arguments_has_no_trailing_comma(sample_lab):
    # The default controls pass no argument: the line is a call one can paste, not "(a, b, )".
    d = DriftDebugger(sample_lab, sample_lab)
    assert ", )" not in d._code() and ", )" not in d.code.value
    if not sample_lab.dims:
        assert d._code() == "c = onnx_lab.compare(reference, candidate)"


def test_drift_tolerance_boxes_wrap_together(sample_lab, holder):
    # "my tolerances:", atol and rtol are one unit: a narrow notebook put rtol alone on a line.
    d = DriftDebugger(sample_lab, sample_lab)
    group = holder(d, d.atol)
    assert group is holder(d, d.rtol) is holder(d, d.custom_tolerances)
    assert d.preset not in group.children
    assert "wrap" not in (group.layout.flex_flow or "") or "nowrap" in group.layout.flex_flow


@pytest.mark.slow
def test_drift_same_model_passes_on_every_sample(sample_lab, no_error):
    d = DriftDebugger(sample_lab, sample_lab)
    no_error(d)
    d.run_button.click()
    no_error(d)
    c = d.result
    assert c.passed and c.first_divergence is None
    assert "PASSED" in d.verdict.value
    assert d.progress.value == d.progress.max >= 1  # compare reported its progress
    assert d.layer == {} and "onnx_lab.compare(reference, candidate" in d.code.value


@pytest.mark.slow
def test_drift_fp16_opens_on_first_divergence(no_error):
    ref = onnx_lab.open("sample:convnet")
    d = DriftDebugger(ref, to_fp16(ref))
    d.atol.value = 1e-6
    d.rtol.value = 0.0
    d.run_button.click()
    no_error(d)
    c = d.result
    div = c.first_divergence
    assert div is not None
    assert d.layers.selected == [div["tensor"]] and d.layer["tensor"] == div["tensor"]
    assert "first divergence" in d.layer_title.value
    # Its row is on the page shown, ticked and flagged.
    assert div["tensor"] in d.layers.page_keys() and d.layers.checkbox(div["tensor"]).value
    assert d.layers.html.value.count("⚑") == 1
    assert d.hist_html.value.startswith("<img") and d.scatter_html.value.startswith("<img")
    assert d.layer["rendering"] is not None and div["node_id"] in d.layer["rendering"].nodes
    assert d.plot_html.value.startswith("<img")
    # Layers are listed largest error first.
    shown = d.layers.df["max_abs"].dropna().tolist()
    assert shown == sorted(shown, reverse=True)
    # Picking another layer shows that one.
    other = [t for t in d.layers.page_keys() if t != div["tensor"]][0]
    d.layers.checkbox(other).value = True
    no_error(d)
    assert d.layer["tensor"] == other and d.layers.selected == [other]
    d.layers.clear.click()
    assert d.layer == {} and d.hist_html.value == ""
    # Outputs only.
    d.layerwise.value = False
    d.run_button.click()
    no_error(d)
    assert "layerwise=False" in d.code.value


@pytest.mark.slow
def test_drift_npz_feeds_and_errors(tmp_path, no_error):
    ref = onnx_lab.open("sample:convnet")
    d = DriftDebugger(ref, ref)
    d.feed_mode.value = "npz"
    d.run_button.click()
    assert "npz" in d.status.value and d.result is None
    path = tmp_path / "inputs.npz"
    np.savez(path, input=np.ones((1, 3, 32, 32), np.float32))
    d.npz_path.value = str(path)
    d.run_button.click()
    no_error(d)
    assert d.result.passed and "feeds=" in d.code.value
    d.npz_path.value = str(tmp_path / "missing.npz")
    d.run_button.click()
    assert d.error is not None and "onnx-lab-error" in d.status.value
    d.feed_mode.value = "random"
    d.atol.value = -1.0
    d.run_button.click()
    assert type(d.error).__name__ == "InputError"


@pytest.mark.slow
def test_drift_unresolved_dims_show_in_widget():
    tb = onnx_lab.open("sample:transformer_block")
    d = DriftDebugger(tb, tb)
    d.run_button.click()  # must not raise
    assert type(d.error).__name__ == "DimError" and "batch" in d.status.value
    ok = DriftDebugger(tb, tb, dims={"batch": 1, "seq": 4})
    ok.run_button.click()
    assert ok.error is None and ok.result.passed and "dims=" in ok.code.value


@pytest.mark.slow
def test_drift_layer_views_share_one_capture_and_are_kept(no_error):
    from onnx_lab.widgets.drift import SCATTER_POINTS

    ref = onnx_lab.open("sample:convnet")
    d = DriftDebugger(ref, to_fp16(ref))
    # fp16 candidates are judged by the fp16 preset; zero tolerances make an intermediate layer
    # the first divergence (its views are recaptured, unlike an output's).
    d.atol.value = 1e-6
    d.rtol.value = 0.0
    d.run_button.click()
    no_error(d)
    c = d.result
    first = d.layer["tensor"]
    # One capture for both figures of a layer (the comparison kept that pair)...
    assert c._last_values[0][:2] == c._pair(first)
    views = dict(d._shown[first])
    assert views["hist_html"] == d.hist_html.value and views["scatter_html"].startswith("<img")
    # ...the scatter is a subsample, the histograms one step artist per side...
    big = np.random.default_rng(1).standard_normal(3 * SCATTER_POINTS)
    from onnx_lab.render.compare_plots import hist_figure, scatter_figure

    sc = scatter_figure(big, big + 1e-3, "t", max_points=SCATTER_POINTS)
    assert len(sc.axes[0].lines[0].get_xdata()) == SCATTER_POINTS
    h = hist_figure(big, big + 1e-3, "t")
    assert [p.get_label() for p in h.axes[0].patches] == ["reference", "candidate"]
    assert len(h.axes[1].patches) == 1 and h.axes[0].get_yscale() == "log"
    # ...and going back to a layer shows its views again without capturing or drawing.
    outputs = set(c.outputs["tensor"])  # kept by compare: never recaptured
    other = [t for t in d.layers.page_keys() if t != first and t not in outputs][0]
    d.layers.checkbox(other).value = True
    no_error(d)
    assert c._last_values[0][:2] == c._pair(other) and set(d._shown) == {first, other}
    d.layers.checkbox(first).value = True
    no_error(d)
    assert c._last_values[0][:2] == c._pair(other)  # no recapture
    assert d.hist_html.value == views["hist_html"] and d.layer["hist"] is views["hist"]
    assert f"max_points={SCATTER_POINTS}" in d.code.value
    # A new run starts from fresh views.
    d.run_button.click()
    no_error(d)
    assert set(d._shown) == {d.layer["tensor"]}


@pytest.mark.slow
def test_drift_preset_and_confirm_controls(no_error):
    ref = onnx_lab.open("sample:convnet")
    d = DriftDebugger(ref, to_fp16(ref))
    assert d.preset.value == "auto" and not d.custom_tolerances.value
    d.run_button.click()
    no_error(d)
    assert d.result.preset == "fp16" and "atol=" not in d.code.value  # the preset's numbers
    d.preset.value = "exact"  # fp16 rounding fails it: a divergence to confirm
    d.confirm.value = True
    d.run_button.click()
    no_error(d)
    assert d.result.preset == "exact" and "preset='exact'" in d._code()
    assert "confirm=True" in d.code.value
    div = d.result.first_divergence
    assert div is not None and "confirmed" in div and "cause" in div
    d.atol.value = 0.5  # typing a tolerance ticks "my tolerances"
    assert d.custom_tolerances.value and "atol=0.5" in d._code()


def test_a_first_divergence_computed_from_weights_is_shown():
    # An output computed from weights alone (Mul of two initializers), one of them changed:
    # the first divergence is that Mul, which the constant-layer filter hid, so the table and
    # the plot showed only layers with no error under a failed verdict.
    from onnx import TensorProto, helper, numpy_helper

    def model(w):
        inits = [numpy_helper.from_array(np.array(w, np.float32), "W1"),
                 numpy_helper.from_array(np.full(4, 2, np.float32), "W2")]
        nodes = [helper.make_node("Relu", ["X"], ["Y"], name="relu"),
                 helper.make_node("Mul", ["W1", "W2"], ["Z"], name="scale")]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                         [1, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4]),
                               helper.make_tensor_value_info("Z", TensorProto.FLOAT, [4])],
                              inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    d = DriftDebugger(onnx_lab.open(model([1, 1, 1, 1])), onnx_lab.open(model([1, 1, 5, 1])))
    d.run()
    assert d.result.first_divergence["node_id"] == "scale"
    assert "scale" in list(d.shown_layers()["node_id"])
    assert "Z" in d.layers.page_keys()
