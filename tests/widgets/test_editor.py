"""Editor widget, headless: select on the canvas, fill the typed fields, click, read the
verdict, the Python call, the history; errors stay in the widget and change nothing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _machinery import scoped_layers

import onnx_lab
from onnx_lab.core.shapes import shape_tuple
from onnx_lab.samples import build
from onnx_lab.widgets import Editor

BN = "/stem/bn/BatchNormalization"


def _lab(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(path))
    return onnx_lab.open(path)


def _text(lab):
    return onnx.printer.to_text(lab.model.to_proto())


def test_select_a_node_and_edit_an_attribute(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = lab.edit()
    assert isinstance(ed, Editor) and ed.undo_button.disabled
    ed.canvas.click(BN)  # what a click in the page does
    assert ed.target == ("node", BN)
    assert "epsilon" in ed.attribute.options
    ed.attribute.value = "epsilon"
    assert "FLOAT" in ed.attr_hint.value and ed.attr_value.value.startswith("1e-05")
    ed.attr_value.value = "1e-3"
    ed.set_attr_button.click()
    no_error(ed)
    assert lab.index.node(BN).attributes["epsilon"].value == np.float32(1e-3)
    assert "outputs changed (expected for this edit): max_abs" in ed.message.value
    assert f"lab.set_attribute(&#x27;{BN}&#x27;, &#x27;epsilon&#x27;, 0.001)" in ed.code.value
    assert "changed (expected)" in ed.history_html.value
    assert not ed.undo_button.disabled and ed.target == ("node", BN)
    # the same value again: no step (undo would step over it), and the message says so
    ed.set_attr_button.click()
    no_error(ed)
    assert "no new step: set_attribute — nothing changed" in ed.message.value
    assert len(lab.history) == 2 and lab.version_history.current == 1


def test_a_bad_value_is_shown_in_the_widget_and_changes_nothing(tmp_path):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    before = _text(lab)

    def refused(*words):
        # the whole message beside the form, a line pointing there above the canvas
        assert "onnx-lab-error" in ed.form_error.value
        assert all(w in ed.form_error.value for w in words), ed.form_error.value
        assert "onnx-lab-error" in ed.status.value and "beside the form" in ed.status.value
        assert _text(lab) == before and len(lab.history) == 1 and lab.version_history.current == 0

    ed.select(BN)
    ed.attribute.value = "epsilon"
    ed.attr_value.value = "tiny"  # an attribute value of the wrong type
    ed.set_attr_button.click()
    refused("FLOAT")
    ed.select("/stem/conv/Conv")
    assert ed.form_error.value == ""  # a new selection clears it
    ed.attribute.value = "kernel_shape"
    ed.attr_value.value = "3.5, 2"
    ed.set_attr_button.click()
    refused("INTS")
    ed.attribute.value = "auto_pad"
    ed.attr_value.value = "WRONG"  # a value the schema does not allow
    ed.set_attr_button.click()
    refused("SAME_UPPER")
    ed.remove_mode.value = "reconnect"  # 3 channels in, 8 out
    ed.remove_button.click()
    refused("shape")
    ed.select("input:input")  # a rename onto an existing tensor
    ed.tensor_name.value = "logits"
    ed.rename_tensor_button.click()
    refused("exists")
    ed.select("/head/fc/Gemm")  # a rename onto an existing node
    ed.node_name.value = "/stem/conv/Conv"
    ed.rename_node_button.click()
    refused("exists")
    # removals that would disconnect the only graph output, in every mode
    for mode, words in (("reconnect", ("shape",)), ("cascade", ("every output",)),
                        ("inputs", ("passed straight through", "remove_output"))):
        ed.remove_mode.value = mode
        ed.remove_button.click()
        refused(*words)
    ed.select("/stem/identity/Identity")  # an Identity onto the graph output's producer
    ed.select("output:logits")
    ed.remove_output_button.click()
    refused("only graph output")
    ed.select("/block1/conv/Conv")  # a weight of the wrong shape, then of the wrong dtype
    np.save(tmp_path / "w.npy", np.ones((8, 8, 3, 3), np.float32))
    ed.init_path.value = str(tmp_path / "w.npy")
    ed.replace_button.click()
    refused("shape")
    w = lab.model.graph.initializers["block1.conv.weight"].const_value.numpy()
    np.save(tmp_path / "w64.npy", w.astype(np.float64))
    ed.init_path.value = str(tmp_path / "w64.npy")
    ed.replace_button.click()
    refused("float64")
    ed.init_path.value = str(tmp_path / "missing.npy")
    ed.replace_button.click()
    refused("missing.npy")
    # and a good edit after all that clears the panel's error
    ed.factor.value = 0.5
    ed.scale_button.click()
    assert ed.form_error.value == "" and len(lab.history) == 2


def test_remove_preview_then_cascade_then_undo_twice(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select("/head/flatten/Flatten")
    ed.add_output_button.click()  # the tensor list holds the node's outputs
    no_error(ed)
    assert "outputs unchanged (verified" in ed.message.value
    ed.select("/head/dropout/Dropout")
    ed.remove_mode.value = "cascade"
    ed.preview_button.click()
    assert "/head/fc/Gemm" in ed.message.value and "logits" in ed.message.value
    assert len(lab.history) == 2  # a preview is not a step
    ed.remove_button.click()
    no_error(ed)
    assert "/head/fc/Gemm" not in lab.index.entries
    # the selection moves to what takes the removed node's place: its producer here
    assert ed.target == ("node", "/head/flatten/Flatten")
    ed.undo_button.click()
    ed.undo_button.click()
    no_error(ed)
    assert lab.version_history.current == 0 and not ed.redo_button.disabled
    ed.redo_button.click()
    assert lab.version_history.current == 1 and "lab.redo()" in ed.code.value


def test_inputs_outputs_weights_and_inserted_nodes(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select("input:input")
    assert ed.target == ("input", "input") and ed.shape.value == "1x3x32x32"
    ed.tensor_name.value = "image"
    ed.rename_tensor_button.click()
    no_error(ed)
    assert [v.name for v in lab.model.graph.inputs] == ["image"]
    assert ed.target == ("input", "image")  # the panel follows the rename
    ed.select("output:logits")
    ed.op_type.value = "Softmax"
    ed.op_attributes.value = '{"axis": -1}'
    ed.add_node_button.click()
    no_error(ed)
    assert "lab.add_node(&#x27;logits&#x27;, &#x27;Softmax&#x27;" in ed.code.value
    ed.select("/block1/conv/Conv")
    assert ed.initializer.options == ("block1.conv.weight",)
    ed.factor.value = 0.5
    ed.scale_button.click()
    no_error(ed)
    w = np.ones((2, 2), np.float32)
    np.save(tmp_path / "bad.npy", w)
    ed.init_path.value = str(tmp_path / "bad.npy")
    ed.replace_button.click()
    assert "shape" in ed.status.value
    ed.select("/head/fc/Gemm")
    ed.node_name.value = "classifier"
    ed.rename_node_button.click()
    no_error(ed)
    assert ed.target == ("node", "classifier")
    script = ed.script()
    ns: dict = {}
    exec(script, ns)
    assert _text(ns["lab"]) == _text(lab)


def _on_screen(ed, key):
    """Where ``key`` is on the screen under the canvas's view (screen = drawing * k + x)."""
    from onnx_lab.widgets.editor import drawn_centres

    x, y = drawn_centres(ed.canvas.rendering.svg)[key]
    v = ed.canvas.view
    return x * v["k"] + v["x"], y * v["k"] + v["y"]


def test_an_edit_keeps_the_zoom_and_the_selection_where_it_was(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    assert ed.canvas.keep_view  # the page keeps the view over a new drawing
    ed.select(BN)
    # what the page reports after the user zoomed in and panned
    ed.canvas.view = {"x": -40.0, "y": -150.0, "k": 2.5, "width": 800, "height": 520}
    where = _on_screen(ed, BN)
    ed.attribute.value = "epsilon"
    ed.attr_value.value = "1e-3"
    ed.set_attr_button.click()
    no_error(ed)
    assert ed.canvas.view["k"] == 2.5 and ed.canvas.selected == BN
    assert _on_screen(ed, BN) == pytest.approx(where, abs=0.01)
    # an edit that moves the layout (a new output box beside the node): pan follows the node
    ed.select("/stem/relu/Relu")
    ed.canvas.view = {"x": 10.0, "y": -300.0, "k": 1.7, "width": 800, "height": 520}
    where = _on_screen(ed, "/stem/relu/Relu")
    ed.add_output_button.click()
    no_error(ed)
    assert "output:/stem/relu/Relu_output_0" in ed.canvas.rendering.view.nodes
    assert ed.canvas.view["k"] == 1.7 and ed.canvas.selected == "/stem/relu/Relu"
    assert _on_screen(ed, "/stem/relu/Relu") == pytest.approx(where, abs=0.01)
    # a rename: the renamed node stays selected and in place
    ed.select("/head/fc/Gemm")
    where = _on_screen(ed, "/head/fc/Gemm")
    ed.node_name.value = "classifier"
    ed.rename_node_button.click()
    no_error(ed)
    assert ed.canvas.selected == "classifier" and ed.canvas.view["k"] == 1.7
    assert _on_screen(ed, "classifier") == pytest.approx(where, abs=0.01)
    # a removal: the node that takes its place is selected where it was
    ed.select("/head/dropout/Dropout")
    where = _on_screen(ed, "/head/dropout/Dropout")
    ed.remove_mode.value = "reconnect"
    ed.remove_button.click()
    no_error(ed)
    assert ed.canvas.selected == "classifier" and ed.target == ("node", "classifier")
    assert _on_screen(ed, "classifier") == pytest.approx(where, abs=0.01)
    # undo: the view's zoom stays too
    ed.undo_button.click()
    no_error(ed)
    assert ed.canvas.view["k"] == 1.7 and ed.canvas.selected == "classifier"
    # a renamed input stays selected, and so does its old name after an undo
    ed.select("input:input")
    ed.tensor_name.value = "image"
    ed.rename_tensor_button.click()
    no_error(ed)
    assert ed.canvas.selected == "input:image"
    ed.undo_button.click()
    assert ed.canvas.selected == "input:input" and ed.target == ("input", "input")
    ed.redo_button.click()
    assert ed.canvas.selected == "input:image" and ed.canvas.view["k"] == 1.7


def test_without_a_view_from_the_page_nothing_is_moved(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select(BN)
    ed.canvas.view = {}
    ed.attribute.value = "epsilon"
    ed.attr_value.value = "1e-3"
    ed.set_attr_button.click()
    no_error(ed)
    assert ed.canvas.view == {} and ed.canvas.selected == BN  # the page fits on first draw


def test_save_writes_what_a_fresh_onnxruntime_session_runs_and_never_the_source(tmp_path,
                                                                                no_error):
    import onnxruntime as ort

    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.save_button.click()
    assert "save as" in ed.form_error.value  # no path yet
    ed.select("/head/flatten/Flatten")
    ed.add_output_button.click()
    no_error(ed)
    ed.save_path.value = str(tmp_path / "edited.onnx")
    ed.save_button.click()
    no_error(ed)
    assert "saved to" in ed.message.value and "lab.save(" in ed.code.value
    sess = ort.InferenceSession(str(tmp_path / "edited.onnx"),
                                providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == ["logits", "/head/flatten/Flatten_output_0"]
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = sess.run(None, {"input": x})
    (want,) = ort.InferenceSession(str(tmp_path / "convnet.onnx"),
                                   providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_array_equal(got[0], want)  # an added output changes nothing else
    assert got[1].shape == (1, 16)
    source = (tmp_path / "convnet.onnx").read_bytes()
    ed.save_path.value = str(tmp_path / "convnet.onnx")
    ed.save_button.click()
    assert "onnx-lab-error" in ed.form_error.value
    assert (tmp_path / "convnet.onnx").read_bytes() == source
    # the refusal's fix (overwrite=True) is a control of the Editor: ticked, the source is
    # written over, as the Python line says
    assert "overwrite=True" in ed.form_error.value
    ed.overwrite.value = True
    ed.save_button.click()
    no_error(ed)
    assert "lab.save(" in ed.code.value and "overwrite=True" in ed.code.value
    assert (tmp_path / "convnet.onnx").read_bytes() != source
    got = ort.InferenceSession(str(tmp_path / "convnet.onnx"),
                               providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert [g.shape for g in got] == [want.shape, (1, 16)]
    ed.overwrite.value = False
    # while a save runs (seconds: the fresh-session check) the page says so, and the last
    # save's error is gone (it stayed on screen during a save that succeeded)
    seen = {}
    save = lab.save

    def watched(*args, **kwargs):
        seen.update(status=ed.status.value, error=ed.form_error.value,
                    busy="onnx-lab-ed-busy" in ed._dom_classes)
        return save(*args, **kwargs)
    lab.save = watched
    ed.save_path.value = str(tmp_path / "again.onnx")
    ed.save_button.click()
    assert "Saving" in seen["status"] and seen["error"] == "" and seen["busy"]
    assert "saved to" in ed.message.value and ed.status.value == ""


def test_editor_on_every_sample(sample_lab, no_error):
    ed = Editor(sample_lab)
    no_error(ed)
    node = next(iter(sample_lab.index.entries))
    ed.select(node)
    assert ed.target == ("node", node) and ed.panel.children
    out = ed.tensor.value
    if out and not sample_lab.index.value(out).is_graph_output() \
            and sample_lab.index.value_graph.get(out, "") == "":
        ed.add_output_button.click()
        no_error(ed)
        assert ed.result.verify_passed is True and ed.result.max_abs_err == 0
        ed.undo_button.click()
        no_error(ed)
    assert sample_lab.version_history.current == 0


def test_hostile_names_are_shown_as_text():
    from onnx import helper

    bad = "<img src=x onerror=alert(1)>"
    g = helper.make_graph([helper.make_node("Relu", ["x"], [bad + "y"], name=bad),
                           helper.make_node("Neg", [bad + "y"], ["z"], name="neg")], "g",
                          [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("z", 1, [2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    ed = Editor(lab)
    ed.select(bad)
    assert ed.target == ("node", bad)
    assert "<img" not in ed.title.value and "&lt;img" in ed.title.value
    ed.add_output_button.click()
    assert "<img" not in ed.message.value + ed.code.value + ed.history_html.value
    assert lab.model.graph.outputs[-1].name == bad + "y"


RELU = "/layers.20/act/Relu"


def _big_editor(n=80, neighbourhood=40):
    lab = onnx_lab.open(scoped_layers(n))
    ed = Editor(lab, neighbourhood=neighbourhood)
    assert not ed.partial and ed.scope_bar.layout.display == "none"
    assert len(ed.canvas.rendering.view.nodes) > neighbourhood  # 80 boxes
    assert ed.canvas.reveal(RELU) == RELU  # its box opened, the node selected
    assert ed.target == ("node", RELU)
    _place(ed, RELU, 300.0, 200.0, 0.4)  # the user zoomed out, the node in view
    return lab, ed


def _place(ed, key, sx, sy, k):
    """The view the page reports when ``key`` is at (sx, sy) on an 800x520 canvas."""
    from onnx_lab.widgets.editor import drawn_centres

    x, y = drawn_centres(ed.canvas.rendering.svg)[key]
    ed.canvas.view = {"x": sx - x * k, "y": sy - y * k, "k": k, "width": 800, "height": 520}


def test_an_edit_on_a_big_graph_redraws_only_its_neighbourhood(no_error):
    lab, ed = _big_editor()
    where = _on_screen(ed, RELU)
    whole = len(ed.canvas.rendering.view.nodes)
    ed.tensor.value = "t20_2"
    ed.add_output_button.click()
    no_error(ed)
    r = ed.canvas.rendering
    assert ed.partial and ed.scope_bar.layout.display is None
    note = ed.scope_note.value
    assert "neighbourhood of the edit" in note and "of 480 nodes" in note
    assert RELU in r.nodes and "output:t20_2" in r.view.nodes  # the change is drawn
    assert 5 <= len(r.view.nodes) < 40 and len(r.view.nodes) < whole  # only the region
    assert all(n.startswith(("/layers.19/", "/layers.20/", "/layers.21/")) for n in r.nodes)
    # the view stays readable (at least 1:1) and the edited node where it was on the screen
    assert ed.canvas.selected == RELU and ed.target == ("node", RELU)
    assert ed.canvas.view["k"] == 1.0
    assert _on_screen(ed, RELU) == pytest.approx(where, abs=0.01)
    # "Show whole graph" lays the whole (collapsed) graph out again, in place, zoom kept
    ed.whole_button.click()
    no_error(ed)
    full = lab.render(collapse="auto", expand=["/layers.20"])
    assert not ed.partial and ed.scope_bar.layout.display == "none"
    assert set(ed.canvas.rendering.view.nodes) == set(full.view.nodes)
    assert "output:t20_2" in ed.canvas.rendering.view.nodes
    assert ed.canvas.selected == RELU and ed.canvas.view["k"] == 1.0
    assert _on_screen(ed, RELU) == pytest.approx(where, abs=0.01)


def test_undo_redo_and_removal_on_a_big_graph_draw_their_neighbourhood(no_error):
    lab, ed = _big_editor()
    ed.node_name.value = "relu20"
    ed.rename_node_button.click()
    no_error(ed)
    assert ed.partial and ed.canvas.selected == "relu20"
    assert "relu20" in ed.canvas.rendering.nodes
    ed.undo_button.click()
    no_error(ed)
    assert lab.version_history.current == 0 and ed.partial
    assert ed.canvas.selected == RELU and RELU in ed.canvas.rendering.nodes
    assert "relu20" not in ed.canvas.rendering.view.nodes
    ed.redo_button.click()
    no_error(ed)
    assert ed.partial and ed.canvas.selected == "relu20" and ed.target == ("node", "relu20")
    # a removal: the neighbourhood is drawn around what took the node's place
    ed.select("/layers.20/gate/Sigmoid")  # drawn in the neighbourhood view
    _place(ed, "/layers.20/gate/Sigmoid", 500.0, 300.0, 1.5)
    ed.remove_mode.value = "reconnect"
    ed.remove_button.click()
    no_error(ed)
    r = ed.canvas.rendering
    assert ed.partial and "/layers.20/gate/Sigmoid" not in r.view.nodes
    assert ed.canvas.selected == "/layers.20/gate/Mul" and "relu20" in r.nodes
    assert ed.canvas.view["k"] == 1.5  # a zoom over 1:1 is kept
    assert _on_screen(ed, "/layers.20/gate/Mul") == pytest.approx((500.0, 300.0), abs=0.01)
    # an element at the edge of the view (or past it) is brought in, by a margin
    ed.select("/layers.20/gate/Mul")
    _place(ed, "/layers.20/gate/Mul", 790.0, -60.0, 1.5)
    ed.tensor.value = "t20_4"
    ed.add_output_button.click()
    no_error(ed)
    assert ed.canvas.selected == "/layers.20/gate/Mul"
    assert _on_screen(ed, "/layers.20/gate/Mul") == pytest.approx((680.0, 80.0), abs=0.01)
    assert len(r.view.nodes) < 40
    # undo three times, then the whole graph is the original one again
    for _ in range(3):
        ed.undo_button.click()
    no_error(ed)
    assert lab.version_history.current == 0 and RELU in ed.canvas.rendering.nodes
    ed.show_whole()
    assert set(ed.canvas.rendering.view.nodes) == set(
        lab.render(collapse="auto", expand=["/layers.20"]).view.nodes)


def test_a_small_graph_or_neighbourhood_none_redraws_the_whole_graph(no_error):
    lab = onnx_lab.open(scoped_layers(20))  # 122 drawn (depth 2): under the default threshold
    for ed in (Editor(lab), Editor(lab, neighbourhood=None)):
        assert 100 < len(ed.canvas.rendering.view.nodes) <= 150
        assert ed.canvas.reveal("/layers.10/act/Relu") == "/layers.10/act/Relu"
        ed.add_output_button.click()
        no_error(ed)
        assert not ed.partial and len(ed.canvas.rendering.view.nodes) > 100
        ed.undo_button.click()
        assert not ed.partial
    for bad in (-1, 1.5, True):
        with pytest.raises(onnx_lab.errors.InputError, match="int >= 0"):
            Editor(lab, neighbourhood=bad)


def test_an_edit_onnxruntime_cannot_run_is_refused_and_the_next_edit_works(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select("/stem/conv/Conv")
    # onnx's checker takes a 5x5 kernel on 3x3 weights; onnxruntime refuses to run it
    ed.attribute.value = "kernel_shape"
    ed.attr_value.value = "5, 5"
    ed.set_attr_button.click()
    assert "the edited model does not run" in ed.form_error.value
    assert "kernel_shape" in ed.form_error.value and len(lab.history) == 1
    # it was kept as a failed step, after which every edit was refused
    ed.attribute.value = "kernel_shape"  # the choice stays after a refusal too
    ed.node_name.value = "stem_conv"
    ed.rename_node_button.click()
    no_error(ed)
    assert len(lab.history) == 2 and "stem_conv" in lab.index.entries


def test_the_chosen_attribute_stays_after_an_edit_undo_and_redo(tmp_path, no_error):
    # it went back to the first one (LayerNormalization: epsilon -> axis), so the next value
    # typed landed on another attribute
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select(BN)
    first = ed.attribute.options[0]
    ed.attribute.value = "momentum" if first != "momentum" else "epsilon"
    chosen = ed.attribute.value
    ed.attr_value.value = "0.5"
    ed.set_attr_button.click()
    no_error(ed)
    assert ed.attribute.value == chosen
    for button in (ed.undo_button, ed.redo_button):
        button.click()
        no_error(ed)
        assert ed.target == ("node", BN) and ed.attribute.value == chosen
    ed.select("/stem/conv/Conv")  # another node starts at its own first attribute
    assert ed.attribute.value == ed.attribute.options[0]


def test_nan_is_refused_and_an_edit_that_brings_nan_says_so(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select(BN)
    ed.attribute.value = "epsilon"
    for text, words in (("nan", "cannot be NaN"), ("1e40", "does not fit the float32")):
        ed.attr_value.value = text
        ed.set_attr_button.click()
        assert words in ed.form_error.value and len(lab.history) == 1
    ed.attr_value.value = "-1000"  # sqrt of a negative variance: NaN outputs
    ed.set_attr_button.click()
    no_error(ed)
    assert "NaN or inf in logits on one side only" in ed.message.value
    assert "class='onnx-lab-warn'" in ed.message.value


def test_errors_of_another_version_go_on_undo_and_save(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select("/head/flatten/Flatten")
    ed.add_output_button.click()
    no_error(ed)
    ed.node_name.value = "/stem/conv/Conv"  # refused: the name exists
    ed.rename_node_button.click()
    assert "exists" in ed.form_error.value
    ed.undo_button.click()
    assert ed.form_error.value == ""
    ed.save_path.value = str(tmp_path / "convnet.onnx")  # refused: the source
    ed.save_button.click()
    assert "onnx-lab-error" in ed.form_error.value
    ed.save_path.value = str(tmp_path / "out.onnx")
    ed.save_button.click()
    assert ed.form_error.value == "" and "saved to" in ed.message.value
    assert "class='onnx-lab-ok'" in ed.message.value
    # a version whose verification failed is saved as asked, and said so
    ed.redo_button.click()
    lab.version_history.version.result.verify_passed = False
    ed.save_path.value = str(tmp_path / "out2.onnx")
    ed.save_button.click()
    assert "FAILED verification" in ed.message.value and "Undo" in ed.message.value
    assert "class='onnx-lab-warn'" in ed.message.value and (tmp_path / "out2.onnx").exists()


def test_a_double_click_on_an_if_says_where_bodies_are_drawn(no_error):
    lab = onnx_lab.open("sample:control_flow")
    ed = Editor(lab)
    ed._run_pending()
    sent = []
    ed.canvas.send_state = lambda key=None: sent.append(key)
    ed.canvas._on_msg(ed.canvas, {"type": "open", "key": "If_2"}, [])
    assert "busy" in sent and ed.canvas.busy == ""
    assert "Explorer" in ed.message.value and "If_2/" in ed.message.value


def test_select_of_a_node_in_a_collapsed_box_opens_it_and_edits_the_node(no_error):
    # it selected the box and left nothing to edit (target None)
    lab = onnx_lab.open(scoped_layers(80))
    ed = Editor(lab, neighbourhood=40)
    ed._run_pending()
    assert ed.canvas.key_for(RELU) == "scope:/layers.20"
    ed.select(RELU)
    no_error(ed)
    assert ed.target == ("node", RELU) and ed.canvas.selected == RELU
    assert "Relu" in ed.title.value


def test_a_renamed_node_keeps_the_attribute_chosen_in_its_form(tmp_path, no_error):
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select(BN)
    ed.attribute.value = "momentum" if ed.attribute.options[0] != "momentum" else "epsilon"
    chosen = ed.attribute.value
    ed.node_name.value = "bn0"
    ed.rename_node_button.click()
    no_error(ed)
    assert ed.target == ("node", "bn0") and ed.attribute.value == chosen


def test_drawn_centres_find_an_element_whose_svg_id_is_not_its_key():
    # a node named with a control character (drawn as its picture) or past 2,000 characters
    # (cut, with a hash): its centre was keyed by the SVG id, so the Editor could not keep it
    # in place after an edit, and the Explorer never drew a box so named ahead
    import onnx

    from onnx_lab.widgets.editor import drawn_centres

    nodes = [onnx.helper.make_node("Relu", ["X"], ["r"], name="a\x01b"),
             onnx.helper.make_node("Neg", ["r"], ["Y"], name="x" * 2500)]
    g = onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1])])
    r = onnx_lab.open(onnx.helper.make_model(
        g, opset_imports=[onnx.helper.make_opsetid("", 17)])).render()
    if not r.svg:
        pytest.skip("no graphviz")
    centres = drawn_centres(r.svg, r.drawn)
    assert {"a\x01b", "x" * 2500} <= set(centres)


def test_a_shape_field_with_a_superscript_or_a_decimal_number(no_error):
    """'²' passed str.isdigit, and int('²') raised a bare ValueError ("Unexpected ValueError
    (please report it)"); '1.5' became a dim named '1.5'. Both are said as LabErrors now."""
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    ed = Editor(lab)
    ed.select("input:x")
    ed.shape.value = "1x1.5x32"
    ed.shape_button.click()
    assert "DimError" in ed.form_error.value and "number written as text" in ed.form_error.value
    ed.shape.value = "²x8x32"
    ed.shape_button.click()
    assert "Unexpected" not in ed.form_error.value + ed.status.value
    # not a dim named '²' either (it had been one, verified and pushed as a step)
    assert "DimError" in ed.form_error.value and "number written as text" in ed.form_error.value
    assert len(lab.history) == 1 and "²" not in lab.dims
    ed.shape.value = "1x８x32"  # a full-width 8 is a decimal digit: int() reads it
    ed.shape_button.click()
    no_error(ed)
    assert shape_tuple(lab.model.graph.inputs[0].shape)[1] == 8


def test_the_python_line_shows_the_refused_call(tmp_path):
    """After a refused edit or save the line under the widget showed the last call that
    worked (``lab.undo()`` under a SaveError): it shows the call that was refused."""
    lab = _lab(tmp_path)
    ed = Editor(lab)
    ed.select("/head/fc/Gemm")
    ed.node_name.value = "classifier"
    ed.rename_node_button.click()
    assert "lab.rename_node(" in ed.code.value
    ed.node_name.value = BN  # a name that exists: refused
    ed.rename_node_button.click()
    assert "PassError" in ed.form_error.value
    assert "lab.rename_node(&#x27;classifier&#x27;, &#x27;/stem/bn/BatchNormalization" \
        in ed.code.value
    ed.undo_button.click()
    ed.save_path.value = str(tmp_path / "convnet.onnx")  # the source: refused
    ed.save_button.click()
    assert "SaveError" in ed.form_error.value and "lab.save(" in ed.code.value
    ed.remove_mode.value = "cascade"
    ed.select("/stem/conv/Conv")
    ed.remove_button.click()  # would remove every output: refused
    assert "lab.remove_node_cascade(&#x27;/stem/conv/Conv&#x27;)" in ed.code.value
