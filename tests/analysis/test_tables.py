"""The nodes, initializers, tensors, inputs and outputs tables: every column."""

from __future__ import annotations

import numpy as np
import onnx
from models import control_flow_model, paddle_style, save_external
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.analysis.tables import (
    INITIALIZER_COLUMNS,
    IO_COLUMNS,
    NODE_COLUMNS,
    TENSOR_COLUMNS,
)


def test_nodes_columns_and_values():
    nodes = onnx_lab.open("sample:convnet").nodes
    assert list(nodes.columns) == NODE_COLUMNS == [
        "node_id", "name", "op_type", "domain", "graph", "inputs", "outputs", "attributes",
        "scope", "topo", "module", "module_class", "source_file", "source_line",
        "source_function", "source_code", "source_kind", "source_modules"]
    r = nodes.set_index("node_id").loc["/stem/conv/Conv"]
    assert r["name"] == "/stem/conv/Conv" and r["op_type"] == "Conv" and r["domain"] == ""
    assert r["graph"] == "" and r["scope"] == "/stem/conv" and r["topo"] == 0
    assert r["inputs"] == ["input", "stem.conv.weight", "stem.conv.bias"]
    assert r["outputs"] == ["/stem/conv/Conv_output_0"]
    assert r["attributes"] == {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    assert nodes["topo"].tolist() == list(range(len(nodes)))


def test_attribute_values_are_plain_python():
    w = numpy_helper.from_array(np.zeros((2, 3), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=w, name="const"),
         helper.make_node("Clip", ["c", "", "hi"], ["clipped"], name="clip"),
         helper.make_node("LeakyRelu", ["clipped"], ["l"], alpha=0.25, name="leaky"),
         helper.make_node("Cast", ["l"], ["y"], to=TensorProto.FLOAT16, name="cast"),
         helper.make_node("Custom", ["y"], ["z"], domain="my.domain", mode="fast",
                          names=["a", "b"], name="custom")], "attrs", [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT16, [2, 3])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "hi")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("my.domain", 1)])
    nodes = onnx_lab.open(m).nodes.set_index("node_id")
    assert nodes.loc["const", "attributes"] == {"value": "float32[2x3]"}
    assert nodes.loc["clip", "inputs"] == ["c", "", "hi"]  # omitted optional input: ''
    assert nodes.loc["leaky", "attributes"] == {"alpha": 0.25}
    assert nodes.loc["cast", "attributes"] == {"to": TensorProto.FLOAT16}
    assert nodes.loc["custom", "attributes"] == {"mode": "fast", "names": ["a", "b"]}
    assert nodes.loc["custom", "domain"] == "my.domain"


def test_subgraph_attributes_are_node_counts():
    nodes = onnx_lab.open(control_flow_model()).nodes.set_index("node_id")
    assert nodes.loc["If_2", "attributes"] == {"else_branch": "<graph: 2 nodes>",
                                                "then_branch": "<graph: 1 nodes>"}
    # The Loop body holds an Identity and an If with one node per branch.
    assert nodes.loc["Loop_3", "attributes"] == {"body": "<graph: 4 nodes>"}
    assert nodes.loc["If_2/then_branch/Add_0", "graph"] == "If_2/then_branch"
    assert nodes.loc["If_2/then_branch/Add_0", "name"] == "add"


def test_initializers_columns_and_values():
    inits = onnx_lab.open("sample:convnet").initializers
    assert list(inits.columns) == INITIALIZER_COLUMNS == [
        "name", "dtype", "shape", "numel", "nbytes", "external", "location", "consumers",
        "graph", "source", "constant_node"]
    r = inits.set_index("name").loc["stem.conv.weight"]
    assert r["dtype"] == "float32" and r["shape"] == (8, 3, 3, 3)
    assert r["numel"] == 216 and r["nbytes"] == 864
    assert not r["external"] and r["location"] is None
    assert r["consumers"] == ["/stem/conv/Conv"] and r["graph"] == ""
    assert r["source"] == "initializer" and r["constant_node"] is None
    scalar = inits.set_index("name").loc["dead.scale"]
    assert scalar["shape"] == () and scalar["numel"] == 1


def test_initializers_external_location(tmp_path):
    path = save_external(onnx_lab.samples.build("convnet"), tmp_path / "c.onnx",
                         data_name="weights.bin", size_threshold=1024)
    inits = onnx_lab.open(path).initializers.set_index("name")
    assert inits.loc["block2.conv.weight", "external"]
    assert inits.loc["block2.conv.weight", "location"] == "weights.bin"
    assert not inits.loc["head.fc.bias", "external"]  # 40 bytes: stays in the model
    assert inits.loc["head.fc.bias", "location"] is None


def test_constant_tensors_in_initializers_table():
    inits = onnx_lab.open(paddle_style()).initializers.set_index("name")
    r = inits.loc["linear_0.w_0"]
    assert r["source"] == "constant" and r["constant_node"] == "p2o.Constant.linear_0.w_0"
    assert r["shape"] == (8, 10) and r["nbytes"] == 320 and r["consumers"] == ["p2o.MatMul.0"]


def test_body_initializers_have_their_graph():
    body_init = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "three"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])],
                               [body_init])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g,
                                            else_branch=else_g)], "m",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    r = lab.initializers.set_index("name").loc["three"]
    assert r["graph"] == "If_0/then_branch" and r["consumers"] == ["If_0/then_branch/Mul_0"]
    t = lab.tensors.set_index("name").loc["three"]
    assert t["kind"] == "initializer" and t["graph"] == "If_0/then_branch"


def test_tensors_columns_and_kinds():
    lab = onnx_lab.open(paddle_style())
    t = lab.tensors
    assert list(t.columns) == TENSOR_COLUMNS == [
        "name", "dtype", "shape", "kind", "producer", "consumers", "dynamic", "graph"]
    t = t.set_index("name")
    assert t.loc["x", "kind"] == "input" and t.loc["x", "producer"] is None
    assert t.loc["x", "consumers"] == ["p2o.Conv.0"] and t.loc["x", "dynamic"]
    assert t.loc["conv2d_0.w_0", "kind"] == "constant"
    assert t.loc["conv2d_0.w_0", "producer"] == "p2o.Constant.conv2d_0.w_0"
    assert t.loc["relu_0.tmp_0", "kind"] == "intermediate"
    assert t.loc["relu_0.tmp_0", "producer"] == "p2o.Relu.0"
    assert t.loc["save_infer_model/scale_0.tmp_0", "kind"] == "output"
    assert t.loc["save_infer_model/scale_0.tmp_0", "consumers"] == []
    assert t.loc["conv2d_0.w_0", "dtype"] == "float32" and not t.loc["conv2d_0.w_0", "dynamic"]
    kinds = onnx_lab.open("sample:convnet").tensors.set_index("name")["kind"]
    assert kinds["stem.conv.weight"] == "initializer" and kinds["logits"] == "output"


def test_body_tensors():
    t = onnx_lab.open(control_flow_model()).tensors.set_index("name")
    assert t.loc["acc", "kind"] == "input" and t.loc["acc", "graph"] == "Loop_3/body"
    assert t.loc["e_mid", "kind"] == "intermediate" and t.loc["e_mid", "graph"] == \
        "If_2/else_branch"
    assert t.loc["e_mid", "producer"] == "If_2/else_branch/Sub_0"


def test_unknown_shapes_are_none_not_nan():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    t = onnx_lab.open(helper.make_model(g)).tensors
    assert t["shape"].tolist() == [None, None]
    assert t["dynamic"].tolist() == [True, True]


def test_initializer_listed_as_input_is_not_an_input():
    # Old exporters (IR < 4) list every initializer among graph inputs too.
    m = onnx_lab.samples.build("convnet")
    for init in m.graph.initializer:
        m.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                           list(init.dims)))
    m.ir_version = 3
    lab = onnx_lab.open(m)
    assert lab.inputs["name"].tolist() == ["input"]
    assert lab.tensors.set_index("name").loc["stem.conv.weight", "kind"] == "initializer"
    assert lab.summary()["dynamic_dims"] == {}


def test_io_tables():
    lab = onnx_lab.open("sample:transformer_block")
    assert list(lab.inputs.columns) == IO_COLUMNS == ["name", "dtype", "shape", "dynamic"]
    r = lab.inputs.iloc[0]
    assert (r["name"], r["dtype"], r["shape"], r["dynamic"]) == ("x", "float32",
                                                                 ("batch", "seq", 32), True)
    r = lab.outputs.iloc[0]
    assert (r["name"], r["shape"]) == ("y", ("batch", "seq", 32))
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 4})
    assert lab.outputs.iloc[0]["shape"] == (1, 4, 32) and not lab.outputs.iloc[0]["dynamic"]


def test_tables_are_fresh_copies():
    lab = onnx_lab.open("sample:convnet")
    nodes = lab.nodes
    nodes.loc[0, "op_type"] = "Changed"
    assert lab.nodes.loc[0, "op_type"] == "Conv"
    assert onnx.checker.check_model(lab.model.to_proto()) is None


def test_tables_cached_per_model_and_dropped_by_invalidate():
    from onnx_lab.analysis.tables import nodes_table, tensors_table

    lab = onnx_lab.open("sample:transformer_block")
    model = lab.model.clone()
    a, b = nodes_table(model), nodes_table(model)
    assert a is not b and a.equals(b)
    assert tensors_table(model, {"batch": 2}).set_index("name").loc["y", "shape"] == \
        (2, "seq", 32)
    assert tensors_table(model).set_index("name").loc["y", "shape"] == ("batch", "seq", 32)
    model.ir.graph.remove(next(iter(model.ir.graph)), safe=False)
    assert len(nodes_table(model)) == 36  # still the cached table until invalidated
    model.invalidate()
    assert len(nodes_table(model)) == 35


def test_dangling_input_is_a_missing_tensor():
    g = helper.make_graph([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    t = lab.tensors.set_index("name")
    assert t.loc["nowhere", "kind"] == "missing" and t.loc["nowhere", "consumers"] == ["add"]
    assert lab.index.undefined == {"nowhere"}
    assert lab.summary()["num_nodes"] == 1


def test_a_branch_constant_does_not_make_the_if_output_of_its_name_a_constant():
    # optimum's merged decoders: the no-cache branch computes `present.0.encoder.key`, the
    # cache branch holds a Constant placeholder of the same name, and the If outputs it.
    f32 = TensorProto.FLOAT
    name = "present.0.encoder.key"
    computes = helper.make_graph(
        [helper.make_node("Relu", ["enc"], [name], name="/no_past/Relu")], "no_past", [],
        [helper.make_tensor_value_info(name, f32, None)])
    placeholder = helper.make_graph(
        [helper.make_node("Constant", [], [name], name="/with_past/Constant",
                          value=numpy_helper.from_array(np.zeros(1, np.float32)))],
        "with_past", [], [helper.make_tensor_value_info(name, f32, None)])
    g = helper.make_graph(
        [helper.make_node("If", ["use_cache_branch"], [name], name="optimum::if",
                          then_branch=placeholder, else_branch=computes)], "merged",
        [helper.make_tensor_value_info("enc", f32, [2, 3]),
         helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info(name, f32, None)])
    t = onnx_lab.open(helper.make_model(g)).tensors
    kinds = {row.graph: row.kind for row in t[t["name"] == name].itertuples()}
    assert kinds == {"": "output", "optimum::if/then_branch": "constant",
                     "optimum::if/else_branch": "intermediate"}, kinds
