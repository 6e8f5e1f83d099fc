"""FusionLab, Extractor and DriftDebugger: the graph canvas, the run-context bar, linked
selection, snapshots in the mimebundle, and each widget's ordering and toggles (headless)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

import onnx_lab
from onnx_lab import to_fp16
from onnx_lab.widgets import DriftDebugger, Explorer, Extractor, FusionLab
from onnx_lab.widgets.fusion_lab import sort_matches


def test_fusion_lab_order_housekeeping_and_changes(no_error):
    lab = onnx_lab.open("sample:convnet")
    f = FusionLab(lab)
    df = f.patterns
    fusion = df["pass"].str.startswith("fuse_").tolist()
    assert fusion == sorted(fusion, reverse=True)  # real fusions first
    shown = f.matches.df
    assert not shown["housekeeping"].any() and df["housekeeping"].any()
    assert "(" in f.show_housekeeping.description
    f.show_housekeeping.value = True
    assert len(f.matches.df) == len(df)
    assert sort_matches(lab.patterns())["match_id"].tolist() == df["match_id"].tolist()
    f.onnxsim_button.click()
    no_error(f)
    ch = f.changes.df
    assert {"fused", "removed"} <= set(ch["change"])
    fused = ch[ch["change"] == "fused"].iloc[0]
    assert len(fused["from"]) > 1 and "fused" in f.changes.html.value


def test_fusion_lab_preview_canvas_cleared_on_change_and_keeps_shapes(no_error):
    lab = onnx_lab.open("sample:convnet")
    f = FusionLab(lab)
    f.select(list(f.patterns["match_id"].iloc[:1]))
    f.preview_button.click()
    no_error(f)
    assert f.before_canvas.svg and f.after_canvas.svg
    after = f.result["after"]
    assert "×" in after.dot and " f32" in after.dot  # shapes on its edges
    f.apply_button.click()
    no_error(f)
    assert f.before_canvas.svg == "" and f.after_canvas.svg == ""  # model changed


def test_fusion_lab_bar_feeds_verify_and_dim_error(tmp_path, no_error):
    tb = onnx_lab.open("sample:transformer_block")
    f = FusionLab(tb)
    f.ort_button.click()
    assert type(f.error).__name__ == "DimError" and set(f.context.missing) == {"batch", "seq"}
    assert "run-context bar" in f.status.value
    f.context.set_dims({"batch": 1, "seq": 4})
    f.ort_button.click()
    no_error(f)
    assert tb.dims == {"batch": 1, "seq": 4} and "lab.dims = " in f.code.value
    lab = onnx_lab.open("sample:convnet")
    f = FusionLab(lab)
    path = tmp_path / "in.npz"
    np.savez(path, input=np.random.default_rng(0).standard_normal((1, 3, 32, 32))
             .astype(np.float32))
    f.context.feed_mode.value = "npz"
    f.context.feed_path.value = str(path)
    f.select([f.matches.page_keys()[0]])
    f.apply_button.click()
    no_error(f)
    assert f.result.verify_passed is True and "verify={&#x27;feeds&#x27;" in f.code.value
    f.context.feed_path.value = ""
    f.safe_button.click()
    assert type(f.error).__name__ == "InputError" and f.verification.df.empty


def test_linked_selection_from_fusion_lab_history_and_extractor():
    lab = onnx_lab.open("sample:convnet")
    e = Explorer(lab, tab="Graph")
    f = FusionLab(lab)
    mid = f.matches.page_keys()[0]
    anchor = f.patterns.set_index("match_id").loc[mid, "anchor"]
    f.matches.checkbox(mid).value = True
    assert e.canvas.selected == e.canvas.key_for(anchor)
    x = Extractor(lab)
    x.mode.value = "nodes"
    node = x.nodes.page_keys()[3]
    x.nodes.checkbox(node).value = True
    assert e.canvas.selected == e.canvas.key_for(node)
    f.select([m for m in f.patterns["match_id"] if m.startswith("fuse_conv_bn")][:1])
    f.apply_button.click()
    made = list(lab.results[1].provenance)
    f.step.value = 0
    f.step.value = 1  # a history step: the node it made
    assert e.canvas.selected == e.canvas.key_for(made[0])


def test_extractor_verify_toggle_counts_and_replacement(no_error):
    lab = onnx_lab.open("sample:convnet")
    x = Extractor(lab)
    x.outputs.value = "/block1/relu/Relu_output_0"
    x.verify.value = False
    x.extract_button.click()
    no_error(x)
    assert "verify=False" in x.code.value and ">not verified<" in x.info.value
    assert "compute node" in x.info.value and "Constant node" in x.info.value
    assert x.canvas.svg
    x.preview_button.click()
    no_error(x)
    assert "inside the cut" in x.legend.value and x.info.value == ""  # replaced
    marks = x.result.view  # the canvas shows the cut
    assert x.canvas.svg and marks is not None
    x.outputs.value = "nope"
    x.extract_button.click()
    assert x.error is not None and x.canvas.svg == "" and x.legend.value == ""


def _with_constants():
    m = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 4] x) => (float[2, 4] y) {
        c = Constant <value = float[4] {1.0, 2.0, 3.0, 4.0}> ()
        a = Add(x, c)
        r = Relu(a)
        d = Constant <value = float[4] {0.5, 0.5, 0.5, 0.5}> ()
        y = Mul(r, d)
    }""")
    return onnx_lab.open(m)


@pytest.mark.slow
def test_drift_hides_constants_orders_and_bar(no_error, tmp_path):
    lab = _with_constants()
    d = DriftDebugger(lab, to_fp16(lab))
    d.run_button.click()
    no_error(d)
    c = d.result
    if (c.layers["op_type"] == "Constant").any():
        assert "Constant" not in set(d.layers.df["op_type"])
        d.show_constants.value = True
        assert "Constant" in set(d.layers.df["op_type"])
        d.show_constants.value = False

    d.order.value = "topology"
    assert list(d.layers.df["tensor"]) == [t for t in c.layers["tensor"]
                                           if t in set(d.layers.df["tensor"])]
    assert "topological" in d.layers_title.value
    assert d.context is not None and d.plot_html.value.startswith("<img")
    # Feeds from the bar: an image resized to the input.
    from PIL import Image

    conv = onnx_lab.open("sample:convnet")
    img = tmp_path / "x.png"
    Image.fromarray((np.random.default_rng(0).random((50, 70, 3)) * 255).astype(np.uint8)) \
        .save(img)
    dd = DriftDebugger(conv, conv)
    dd.feed_mode.value = "image"
    dd.npz_path.value = str(img)
    dd.run_button.click()
    no_error(dd)
    assert dd.result.passed and "image_feeds(" in dd.code.value


@pytest.mark.slow
def test_drift_hides_weights_computed_from_constants(no_error):
    """A weight filled by ConstantOfShape is a constant layer too (old ResNet-50 exports
    make 239): hidden with the Constant nodes, and counted in the box."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([4], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["b"], name="fill",
                          value=numpy_helper.from_array(np.array([0.5], np.float32))),
         helper.make_node("Add", ["x", "b"], ["h"], name="add"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [shape])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    d = DriftDebugger(lab, to_fp16(lab))
    d.run_button.click()
    no_error(d)
    assert "fill" in set(d.result.layers["node_id"])
    assert "fill" not in set(d.layers.df["node_id"])
    assert d.show_constants.description == "show constant layers (1)"
    d.show_constants.value = True
    assert "fill" in set(d.layers.df["node_id"])


def test_snapshots_in_mimebundle():
    lab = onnx_lab.open("sample:convnet")
    e = Explorer(lab, tab="Graph")
    b = e._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in b
    assert "onnx-lab-snapshot" in b["text/html"] and "<svg" in b["text/html"]
    f = FusionLab(lab)
    html = f._repr_mimebundle_()["text/html"]
    assert "FusionLab" in html and "onnx-lab-history" in html
