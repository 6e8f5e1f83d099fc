"""The interface guard: a step that changes the model's inputs or outputs without declaring it,
or whose result lost its graph, is refused before verification; the history is unchanged."""

from __future__ import annotations

import onnx
import pytest
from expr_models import DIMS, optimum_decoder
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import PassError
from onnx_lab.transforms import base
from onnx_lab.transforms._whole import WholeModelPass
from onnx_lab.transforms.base import register_pass


def _relu(out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    if out_type != TensorProto.FLOAT:
        nodes[-1] = helper.make_node("Neg", ["r"], ["n"], name="neg")
        nodes.append(helper.make_node("Cast", ["n"], ["y"], to=out_type, name="cast"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 3])],
                          [helper.make_tensor_value_info("y", out_type, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _merged_decoder() -> onnx.ModelProto:
    """All compute inside an If on ``use_cache_branch`` (optimum's merged layout)."""
    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"], name=f"{name}_op")],
                                 name, [], [helper.make_tensor_value_info(f"{name}_out",
                                                                          TensorProto.FLOAT,
                                                                          [2, 3])])

    node = helper.make_node("If", ["use_cache_branch"], ["logits"], name="optimum::if",
                            then_branch=branch("then", "Relu"), else_branch=branch("else", "Neg"))
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL,
                                                         [])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def fake_tool():
    """Register a test-only tool pass whose result is ``make(model)``; unregistered after."""
    names: list[str] = []

    def register(name: str, make, kind: str = "tool") -> str:
        class _Tool(WholeModelPass):
            """Test-only tool."""

            def rebuild(self, model):
                return make(model)

        register_pass(name, kind=kind)(_Tool)
        names.append(name)
        return name

    yield register
    for n in names:
        base._REGISTRY.pop(n, None)


def _emptied(model):
    m = model.ir
    for node in list(m.graph):
        m.graph.remove(node, safe=False)
    return m


def test_onnxslim_dropping_the_empty_past_inputs_is_refused():
    dims = {k: (0 if "past" in k else v) for k, v in DIMS.items()}
    lab = onnx_lab.open(optimum_decoder(), dims=dims)
    n = len(lab.version_history)
    with pytest.raises(PassError) as e:
        lab.apply("onnxslim")
    msg = str(e.value)
    assert msg.startswith("onnxslim removed input(s) past_key_values.0.key")
    assert "past_key_values.1.value" in msg
    assert "a dim given as 0 (past_sequence_length)" in msg
    assert "give past_sequence_length >= 1" in msg
    assert len(lab.version_history) == n
    assert "past_key_values.0.key" in [v.name for v in lab.model.graph.inputs]


def test_an_input_the_model_declares_empty_is_not_blamed_on_a_dim_the_user_gave():
    # onnx's test_castlike_*_expanded: an input 'like' of shape [0] that only its type is
    # read from; onnxslim drops it. No dim was given, and none would help.
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("like", TensorProto.FLOAT, [0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(PassError) as e:
        lab.apply("onnxslim")
    msg = str(e.value)
    assert msg.startswith("onnxslim removed input(s) like")
    assert "the model declares them empty (like[0]: no values)" in msg
    assert "a dim given as 0" not in msg and "give those dims" not in msg


def test_onnxslim_with_a_past_length_of_one_passes_the_guard():
    lab = onnx_lab.open(optimum_decoder(), dims={**DIMS, "past_sequence_length": 1})
    r = lab.apply("onnxslim")
    assert r.modified and r.verify_passed, r.verification
    assert "past_key_values.0.key" in [v.name for v in lab.model.graph.inputs]


def test_an_empty_graph_is_refused_with_the_tool_and_the_cause(fake_tool):
    name = fake_tool("test_emptying_tool", _emptied)
    lab = onnx_lab.open(_merged_decoder())
    n = len(lab.version_history)
    with pytest.raises(PassError) as e:
        lab.apply(name)
    msg = str(e.value)
    assert msg.startswith(f"{name} left no nodes (3 -> 0)"), msg
    assert "refused before verification" in msg
    assert "inside If/Loop bodies" in msg
    assert len(lab.version_history) == n and len(lab.model.index) == 3


def test_a_graph_output_nothing_produces_is_refused(fake_tool):
    def drop_neg(model):
        m = model.ir
        m.graph.remove([n for n in m.graph if n.op_type == "Neg"][0], safe=False)
        return m

    name = fake_tool("test_output_losing_tool", drop_neg)
    lab = onnx_lab.open(_relu())
    with pytest.raises(PassError, match=r"output\(s\) y nothing produces"):
        lab.apply(name)
    assert len(lab.version_history) == 1


def test_a_changed_output_dtype_fails_the_step(fake_tool):
    name = fake_tool("test_fp16_output_tool",
                     lambda model: WholeModelPass.from_proto(_relu(TensorProto.FLOAT16), model))
    lab = onnx_lab.open(_relu())
    with pytest.raises(PassError, match="changed output y from float to float16"):
        lab.apply(name)
    assert len(lab.version_history) == 1


def test_a_renamed_input_fails_a_tool_step(fake_tool):
    def rename(model):
        m = model.ir
        m.graph.inputs[0].name = "x2"
        return m

    name = fake_tool("test_renaming_tool", rename)
    lab = onnx_lab.open(_relu())
    with pytest.raises(PassError, match=r"removed input\(s\) x; added input\(s\) x2"):
        lab.apply(name)


def test_a_pass_declared_as_edit_may_change_the_interface(fake_tool):
    def rename(model):
        m = model.ir
        m.graph.inputs[0].name = "x2"
        return m

    name = fake_tool("test_renaming_edit", rename, kind="edit")
    lab = onnx_lab.open(_relu())
    r = lab.apply(name, verify=False)
    assert r.modified and [v.name for v in lab.model.graph.inputs] == ["x2"]


def test_rename_tensor_of_an_input_is_allowed():
    lab = onnx_lab.open(_relu())
    r = lab.apply("rename_tensor", old="x", new="pixels")
    assert r.modified
    assert [v.name for v in lab.model.graph.inputs] == ["pixels"]


@pytest.mark.parametrize("sample,dims", [("sample:convnet", None),
                                         ("sample:transformer_block", {"batch": 1, "seq": 8})])
def test_no_false_alarm_on_the_safe_preset_and_the_tools(sample, dims):
    lab = onnx_lab.open(sample, dims=dims)
    results = lab.apply_preset("safe")
    assert all(r.verify_passed is not False for r in results)
    for tool in ("ort:basic", "onnxsim"):
        r = lab.apply(tool)
        assert r.verify_passed is not False, (tool, r.first_failure)
    assert len(lab.version_history) >= 3  # the guard ran on real, modified results
