"""The model index: node ids, graph paths, producers/consumers, topological order."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import control_flow_model, named_model, unsorted_model
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.core.index import ModelIndex, node_scope
from onnx_lab.errors import UnknownNameError


def _index(model: onnx.ModelProto) -> ModelIndex:
    return onnx_lab.open(model).index


# --------------------------------------------------------------------------- ids
def test_unique_names_are_ids():
    idx = onnx_lab.open("sample:convnet").index
    assert list(idx.entries)[:3] == ["/stem/conv/Conv", "/stem/bn/BatchNormalization",
                                     "/stem/relu/Relu"]
    assert idx.node("/head/fc/Gemm").op_type == "Gemm"


def test_duplicate_and_empty_names_get_unique_ids():
    idx = _index(named_model())
    # dup, dup, '', 'Relu_1', 'last': the second derived id would be Relu_1, which a node
    # already uses as its name, so it gets a suffix.
    assert list(idx.entries) == ["Relu_0", "Relu_1_1", "Relu_2", "Relu_1", "last"]
    assert [idx.node(i).name for i in idx.entries] == ["dup", "dup", "", "Relu_1", "last"]
    assert len(set(idx.entries)) == len(idx) == 5


def test_body_ids_and_graph_paths():
    idx = _index(control_flow_model())
    assert set(idx.graphs) == {
        "", "If_2/then_branch", "If_2/else_branch", "Loop_3/body",
        "Loop_3/body/inner/then_branch", "Loop_3/body/inner/else_branch", "Scan_5/body"}
    graph_of = {nid: e.graph for nid, e in idx.entries.items()}
    # Both branches name their node 'add': not unique, so ids are derived with the path.
    assert graph_of["If_2/then_branch/Add_0"] == "If_2/then_branch"
    assert graph_of["If_2/else_branch/Sub_0"] == "If_2/else_branch"
    assert graph_of["If_2/else_branch/Neg_1"] == "If_2/else_branch"
    # A uniquely named node inside a body keeps its name; its bodies nest under it.
    assert graph_of["inner"] == "Loop_3/body"
    assert graph_of["Loop_3/body/inner/then_branch/Mul_0"] == "Loop_3/body/inner/then_branch"
    assert graph_of["Scan_5/body/Add_0"] == "Scan_5/body"
    assert idx.graph("Loop_3/body").name == "body"
    assert len(idx) == 14


def test_nested_unnamed_owner_path():
    vi = helper.make_tensor_value_info
    inner = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "g", [],
                              [vi("n", TensorProto.FLOAT, [1])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("If", ["c"], ["v"], then_branch=inner, else_branch=inner)],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, [])],
        [vi("c_out", TensorProto.BOOL, []), vi("v", TensorProto.FLOAT, [1])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n_iter", "go"], ["out"], body=body)], "m",
        [vi("x", TensorProto.FLOAT, [1]), vi("n_iter", TensorProto.INT64, []),
         vi("go", TensorProto.BOOL, [])], [vi("out", TensorProto.FLOAT, [None, 1])])
    idx = _index(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert "Loop_0/body/If_1/then_branch" in idx.graphs
    assert idx.entries["Loop_0/body/If_1/else_branch/Neg_0"].graph == \
        "Loop_0/body/If_1/else_branch"


def test_ids_stable_after_save_and_load(tmp_path):
    for proto in (control_flow_model(), named_model(), onnx_lab.samples.build("convnet")):
        lab = onnx_lab.open(proto)
        path = tmp_path / "m.onnx"
        onnx.save_model(lab.model.to_proto(), str(path))
        again = onnx_lab.open(path)
        assert list(again.index.entries) == list(lab.index.entries)
        assert {k: e.graph for k, e in again.index.entries.items()} == \
            {k: e.graph for k, e in lab.index.entries.items()}


def test_node_id_of_ir_node():
    lab = onnx_lab.open(named_model())
    node = lab.index.node("Relu_2")
    assert lab.index.node_id(node) == "Relu_2"
    stranger = ir.Node("", "Relu", [])
    with pytest.raises(UnknownNameError):
        lab.index.node_id(stranger)


# --------------------------------------------------------------------------- maps
def test_producer_and_consumers():
    idx = _index(control_flow_model())
    assert idx.producer["if_out"] == "If_2"
    assert idx.producer["t_out"] == "If_2/then_branch/Add_0"
    assert "x" not in idx.producer and "one" not in idx.producer
    # Body nodes that read outer values count as consumers of those values.
    assert sorted(idx.consumers["one"]) == ["If_2/else_branch/Sub_0", "If_2/then_branch/Add_0"]
    assert "Loop_3/body/inner/else_branch/Add_0" in idx.consumers["if_out"]
    assert "Add_4" in idx.consumers["if_out"]
    assert idx.value_graph["e_mid"] == "If_2/else_branch"
    assert idx.value("x").name == "x"


def test_predecessors_include_implicit_inputs():
    idx = _index(control_flow_model())
    # Loop_3 reads if_out only inside its body: still a predecessor.
    assert "If_2" in idx.predecessors("Loop_3")
    assert "Loop_3" in idx.entries["Loop_3"].node_id
    assert "if_out" in idx.entries["Loop_3"].implicit_inputs
    assert set(idx.successors("If_2")) >= {"Add_4", "Loop_3/body/inner/else_branch/Add_0"}
    assert idx.predecessors("ReduceSum_0") == []


def test_topological_order_of_unsorted_graph():
    idx = _index(unsorted_model())
    assert idx.topo_order("") == ["A", "B", "C"]
    assert [idx.entries[n].position for n in ("A", "B", "C")] == [2, 1, 0]
    assert [idx.entries[n].topo for n in ("A", "B", "C")] == [0, 1, 2]
    assert idx.predecessors("C") == ["B"] and idx.successors("A") == ["B"]


def test_topological_order_bodies_follow_owner():
    idx = _index(control_flow_model())
    order = idx.topo_order(None)
    assert order.index("If_2") < order.index("If_2/then_branch/Add_0") < order.index("Loop_3")
    assert idx.topo_order("If_2/else_branch") == ["If_2/else_branch/Sub_0",
                                                   "If_2/else_branch/Neg_1"]
    # Every producer comes before its consumers in the main graph.
    main = idx.topo_order("")
    for nid in main:
        for p in idx.predecessors(nid):
            if p in main:
                assert main.index(p) < main.index(nid)


def test_cycle_does_not_hang():
    g = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["a"], name="A"),
         helper.make_node("Neg", ["a"], ["b"], name="B")], "cycle", [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    idx = _index(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert idx.topo_order("") == ["A", "B"]


# --------------------------------------------------------------------------- errors
def test_unknown_node_id_names_close_matches():
    idx = onnx_lab.open("sample:convnet").index
    with pytest.raises(UnknownNameError, match="'/head/fc/Gem'.*'/head/fc/Gemm'"):
        idx.node("/head/fc/Gem")


def test_unknown_tensor_and_graph():
    idx = _index(control_flow_model())
    with pytest.raises(UnknownNameError, match="tensor 'if_ou'.*'if_out'"):
        idx.value("if_ou")
    with pytest.raises(UnknownNameError, match="graph path 'If_2/then'.*If_2/then_branch"):
        idx.graph("If_2/then")
    with pytest.raises(UnknownNameError):
        idx.topo_order("nope")


# --------------------------------------------------------------------------- scopes
def test_node_scope():
    assert node_scope(ir.Node("", "MatMul", [], name="/encoder/layer.3/attention/MatMul")) \
        == "/encoder/layer.3/attention"
    assert node_scope(ir.Node("", "MatMul", [], name="MatMul_3")) == ""
    assert node_scope(ir.Node("", "MatMul", [], name="")) == ""
    dynamo = ir.Node("", "MatMul", [], name="node_matmul", metadata_props={
        "pkg.torch.onnx.name_scopes": "['', 'encoder', 'layer.3', 'matmul']"})
    assert node_scope(dynamo) == "/encoder/layer.3"
    # Dynamo writes qualified names per module level.
    nested = ir.Node("", "MatMul", [], name="node_linear_1", metadata_props={
        "pkg.torch.onnx.name_scopes":
            "['', 'layer.0', 'layer.0.attention', 'layer.0.attention.key', 'linear_1']"})
    assert node_scope(nested) == "/layer.0/attention/key"
    top = ir.Node("", "Add", [], name="node_add", metadata_props={
        "pkg.torch.onnx.name_scopes": "['', 'add_20']"})
    assert node_scope(top) == ""
    # torch names the root of an op outside any module (a dynamic dim's size) by a
    # placeholder: no scope, not a box of its own.
    hook = ir.Node("", "Shape", [], name="node_Shape_0", metadata_props={
        "pkg.torch.onnx.name_scopes":
            "['_empty_nn_module_stack_from_metadata_hook', 'sym_size_int_112']"})
    assert node_scope(hook) == ""


def test_node_reading_a_tensor_twice_is_one_consumer():
    g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"], name="sq"),
                           helper.make_node("Add", ["y", "x"], ["z"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert lab.index.consumers["x"] == ["sq", "add"]
    assert lab.tensors.set_index("name").loc["x", "consumers"] == ["sq", "add"]
    assert lab.index.predecessors("add") == ["sq"]


# --------------------------------------------------------------------------- properties
_NAMES = ["", "", "a", "a", "b", "Relu_0", "Relu_1", "Add_2", "n"]


@st.composite
def _random_dag(draw):
    n = draw(st.integers(1, 18))
    nodes = []
    for i in range(n):
        avail = ["x"] + [f"t{j}" for j in range(i)]
        if draw(st.booleans()) and len(avail) > 1:
            ins = [draw(st.sampled_from(avail)), draw(st.sampled_from(avail))]
            op = "Add"
        else:
            ins, op = [draw(st.sampled_from(avail))], "Relu"
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=draw(st.sampled_from(_NAMES))))
    perm = draw(st.permutations(range(n)))
    g = helper.make_graph([nodes[i] for i in perm], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info(f"t{n - 1}", TensorProto.FLOAT, [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(_random_dag())
def test_index_properties(proto):
    idx = ModelIndex(ir.serde.deserialize_model(proto))
    names = [n.name for n in proto.graph.node]
    assert len(idx) == len(names) == len(set(idx.entries))
    for nid, e in idx.entries.items():
        if e.node.name and names.count(e.node.name) == 1:
            assert nid == e.node.name
    order = idx.topo_order("")
    for pos, nid in enumerate(order):
        for inp in idx.node(nid).inputs:
            if inp.name in idx.producer:
                assert order.index(idx.producer[inp.name]) < pos
        for c in idx.successors(nid):
            assert nid in idx.predecessors(c)
    again = ModelIndex(ir.serde.deserialize_model(ir.serde.serialize_model(idx.model)))
    assert list(again.entries) == list(idx.entries)
