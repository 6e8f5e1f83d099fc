from __future__ import annotations

import onnx
import pytest

import onnx_lab
from onnx_lab.widgets import Extractor


@pytest.mark.slow
def test_extractor_on_every_sample_by_nodes(sample_lab, no_error, tmp_path):
    x = Extractor(sample_lab)
    no_error(x)
    x.extract_button.click()  # nothing chosen: a hint
    assert "first" in x.status.value and x.result is None
    x.save_button.click()
    assert "Extract a subgraph first" in x.status.value
    x.mode.value = "nodes"
    assert x.tensor_box.layout.display == "none" and x.node_box.layout.display is None
    op = sample_lab.nodes["op_type"].iloc[0]
    x.node_filter.value = op
    assert set(x.nodes.df["op_type"]) >= {op} and len(x.nodes.df) <= len(sample_lab.nodes)
    x.node_filter.value = ""
    main = sample_lab.nodes.query("graph == ''")["node_id"].tolist()
    pick = main[:2]
    for nid in pick:
        x.nodes.checkbox(nid).value = True
    x.preview_button.click()
    no_error(x)
    # Issue 12: the preview marks the cut inside the model (its neighbours drawn outside it).
    assert set(pick) <= set(x.result.nodes) and set(x.preview_cut["inside"]) == set(pick)
    assert set(x.result.nodes) - set(pick) == set(x.preview_cut["outside"])
    x.extract_button.click()
    no_error(x)
    sub = x.result
    assert sub is x.sub and len(sub.index) >= len(pick)
    assert "nodes extracted" in x.info.value and ">passed<" in x.info.value
    assert "sub = lab.extract(nodes=" in x.code.value
    out = tmp_path / "sub.onnx"
    x.save_path.value = str(out)
    x.save_button.click()
    no_error(x)
    onnx.checker.check_model(str(out))


def test_extractor_by_boundary_tensors(no_error):
    lab = onnx_lab.open("sample:convnet")
    x = Extractor(lab)
    assert "/block1/conv/Conv_output_0" in x.tensor_pick.options
    x.tensor_pick.value = "/block1/conv/Conv_output_0"
    x.add_input.click()
    x.tensor_pick.value = "/block1/relu/Relu_output_0"
    x.add_output.click()
    x.add_output.click()  # empty pick: nothing added
    assert x.inputs.value == "/block1/conv/Conv_output_0"
    assert x.outputs.value == "/block1/relu/Relu_output_0"
    x.preview_button.click()
    no_error(x)
    assert "/block1/bn/BatchNormalization" in x.result.nodes
    x.extract_button.click()
    no_error(x)
    sub = x.result
    assert list(sub.inputs["name"]) == ["/block1/conv/Conv_output_0"]
    assert list(sub.outputs["name"]) == ["/block1/relu/Relu_output_0"]
    assert sorted(sub.nodes["op_type"]) == ["BatchNormalization", "Relu"]
    # The shown call reproduces the same subgraph.
    again = lab.extract(inputs=["/block1/conv/Conv_output_0"],
                        outputs=["/block1/relu/Relu_output_0"])
    assert list(again.nodes["node_id"]) == list(sub.nodes["node_id"])
    # Verified against the same tensors of the full model.
    assert ">passed<" in x.info.value


def test_extractor_errors_show_in_widget():
    lab = onnx_lab.open("sample:convnet")
    x = Extractor(lab)
    x.outputs.value = "no_such_tensor"
    x.extract_button.click()  # must not raise
    assert x.error is not None and "onnx-lab-error" in x.status.value
    assert "no_such_tensor" in x.status.value
    x.preview_button.click()
    assert x.error is not None and "onnx-lab-error" in x.status.value


def test_extractor_preview_marks_the_labs_nodes_not_the_cuts_own_ids(no_error):
    # Unnamed nodes take their ids from their place: the cut's ConstantOfShape_0 is the Lab's
    # ConstantOfShape_1. The preview had marked the Lab's ConstantOfShape_0 (feeding the last
    # node) as inside the cut and drawn that far end of the graph as its neighbourhood.
    from onnx import TensorProto, helper

    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["c_late"], value=one),
        helper.make_node("ConstantOfShape", ["shape"], ["c_early"], value=one),
        helper.make_node("Add", ["x", "c_early"], ["t"], name="add"),
        helper.make_node("Relu", ["t"], ["t2"], name="relu"),
        helper.make_node("Neg", ["t2"], ["t3"], name="neg"),
        helper.make_node("Mul", ["t3", "c_late"], ["y"], name="mul"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          initializer=[shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lab = onnx_lab.open(m)
    early = lab.index.producer["c_early"]
    late = lab.index.producer["c_late"]
    x = Extractor(lab)
    x.inputs.value, x.outputs.value = "x", "t"
    x.preview()
    no_error(x)
    assert set(x.preview_cut["inside"]) == {early, "add"}
    assert late not in x.preview_cut["inside"] and "mul" not in x.preview_cut["inside"]
