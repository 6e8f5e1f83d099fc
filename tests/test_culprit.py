"""The culprit finder: a fault planted in a tool's rewrite list is named within
⌈log₂P⌉+2 verification runs; a healthy step has no culprit; bad arguments say the fix."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_ir as ir
import onnxoptimizer
import pytest
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab import culprit as culprit_mod
from onnx_lab.cli import main
from onnx_lab.culprit import NO_CULPRIT, find_culprit, run_bound
from onnx_lab.errors import InputError, LabError, PassError, UnknownNameError
from onnx_lab.samples import build
from onnx_lab.transforms import base
from onnx_lab.transforms._whole import Switch, WholeModelPass
from onnx_lab.transforms.base import Param, get_pass, register_pass
from onnx_lab.transforms.tools import OnnxoptimizerListPass

# ---------------------------------------------------------------------------- a test tool
# x -> Mul(w) -> Identity x P -> Relu -> y. Rewrite i removes Identity i (harmless); the
# planted one instead folds a wrong constant (w * 1.3), as a buggy constant folder would.


def _identity_chain(p: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "w"], ["t0"], name="mul")]
    nodes += [helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"], name=f"id{i}")
              for i in range(p)]
    nodes.append(helper.make_node("Relu", [f"t{p}"], ["y"], name="relu"))
    w = numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "w")
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
                          [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _bypass(proto: onnx.ModelProto, name: str) -> None:
    node = next((n for n in proto.graph.node if n.name == name), None)
    if node is None:
        return
    src, dst = node.input[0], node.output[0]
    proto.graph.node.remove(node)
    for n in proto.graph.node:
        for k, v in enumerate(n.input):
            if v == dst:
                n.input[k] = src


class _SwitchedTool(WholeModelPass):
    """Test tool: named rewrites, each switchable (skip=[...])."""

    params = (Param("skip", (list, tuple), None, "rewrites to leave out"),)
    switch_params = ("skip",)
    switch_source = "the test tool's rewrite list"
    rewrites: tuple[str, ...] = ()
    bad: tuple[str, ...] = ()

    def switches(self, model):
        off = self._off("skip")
        return [Switch(n, "skip") for n in self.rewrites if n not in off]

    def rebuild(self, model):
        proto = ir.to_proto(model.ir)
        off = self._off("skip")
        for i, name in enumerate(self.rewrites):
            if name in off:
                continue
            if name in self.bad:
                w = next(t for t in proto.graph.initializer if t.name == "w")
                w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.3),
                                                   "w"))
            else:
                _bypass(proto, f"id{i}")
        return self.from_proto(proto, model)


@pytest.fixture
def tool():
    """Register a test tool with P rewrites, the given ones wrong; unregistered after."""
    made = []

    def make(p: int, bad: tuple[int, ...] = ()) -> tuple[str, list[str]]:
        name = f"test_switched_{len(made)}"
        names = [f"rewrite_{i:02d}" for i in range(p)]
        cls = type(name, (_SwitchedTool,), {"rewrites": tuple(names),
                                            "bad": tuple(names[i] for i in bad),
                                            "__doc__": "Test tool with switchable rewrites."})
        register_pass(name, kind="test")(cls)
        made.append(name)
        return name, names

    yield make
    for name in made:
        base._REGISTRY.pop(name, None)


# Two positions in make check; the rest of the bisection sweep in make test.
@pytest.mark.parametrize("p", [1, 13, *(pytest.param(p, marks=pytest.mark.slow)
                                        for p in (2, 3, 5, 8, 33))])
def test_a_planted_rewrite_is_named_within_the_bound(tool, p):
    for k in sorted({0, p // 2, p - 1}):
        name, rewrites = tool(p, bad=(k,))
        lab = onnx_lab.open(_identity_chain(p))
        c = lab.find_culprit(name)
        assert c.culprit == rewrites[k] and c.confirmed, c
        assert c.switches == rewrites
        assert c.verification_runs <= run_bound(p) == int(np.ceil(np.log2(p))) + 2
        assert c.runs[0].disabled == [] and not c.runs[0].passed
        assert c.runs[-1].passed and rewrites[k] in c.runs[-1].disabled
        assert c.fix == f'lab.apply("{name}", skip=["{rewrites[k]}"])'
        assert c.fix_params == {"skip": [rewrites[k]]}
        assert lab.history.shape[0] == 1  # find_culprit leaves the history alone
        assert lab.apply(name, **c.fix_params).verify_passed is not False


def test_the_runs_say_what_was_off_and_the_verdict(tool):
    name, rewrites = tool(8, bad=(5,))
    c = find_culprit(_identity_chain(8), name)
    t = c.table()
    assert list(t.columns) == ["run", "disabled", "enabled_count", "modified", "verified",
                               "passed", "verdict", "first_failure", "max_abs_err", "seconds",
                               "note"]
    assert t.verified.sum() == c.verification_runs == len(t) <= run_bound(8)
    for r in c.runs:
        assert sorted(r.disabled + r.enabled) == sorted(rewrites)
        assert r.verdict in ("verifies", f"FAILS at {r.first_failure}")
    assert t.loc[0, "first_failure"] == "t0"  # the wrong constant shows at the Mul
    doc = json.loads(json.dumps(c.summary()))
    assert doc["culprit"] == "rewrite_05" and doc["bound"] == 5 and len(doc["runs"]) == len(t)
    assert "rewrite_05" in repr(c)


def test_the_healthy_step_has_no_culprit(tool):
    name, _ = tool(13)
    c = find_culprit(_identity_chain(13), name)
    assert c.culprit is None and c.message == NO_CULPRIT == "no culprit: the step verifies"
    assert c.verification_runs == 1 and c.fix is None


def test_two_planted_faults_are_not_blamed_on_one_switch(tool):
    name, rewrites = tool(8, bad=(1, 6))
    c = find_culprit(_identity_chain(8), name)
    assert c.culprit is None and not c.confirmed
    assert c.message.startswith("no single switch")
    assert c.verification_runs <= run_bound(8)


def test_switches_the_caller_turns_off_are_not_bisected(tool):
    name, rewrites = tool(8, bad=(3,))
    c = find_culprit(_identity_chain(8), name, skip=["rewrite_00", "rewrite_01"])
    assert c.switches == rewrites[2:] and c.culprit == "rewrite_03"
    assert c.fix_params == {"skip": ["rewrite_00", "rewrite_01", "rewrite_03"]}
    assert c.cli_fix is None  # the command has no option for the caller's own parameters


def test_apply_with_find_culprit_reuses_the_steps_verification(tool):
    name, rewrites = tool(5, bad=(4,))
    lab = onnx_lab.open(_identity_chain(5))
    r = lab.apply(name, find_culprit=True)
    assert r.verify_passed is False  # the step stays, as any failed step
    assert lab.history.shape[0] == 2
    c = r.culprit
    assert c.runs[0].note == "the step's own verification" and c.culprit == "rewrite_04"
    assert c.verification_runs <= run_bound(5)
    assert any("rewrite_04" in n for n in r.notes)
    lab.undo()
    ok = lab.apply(name, find_culprit=True, skip=["rewrite_04"])
    assert ok.verify_passed and ok.culprit.message == NO_CULPRIT
    assert ok.culprit.verification_runs == 1


# ---------------------------------------------------------------------------- real tools
@pytest.fixture
def wrong_slim_pattern():
    """A wrong rewrite through onnxslim's own extension point: Relu -> LeakyRelu(0.5)."""
    from onnxslim import register_fusion_pattern
    from onnxslim.core.pattern import Pattern, PatternMatcher
    from onnxslim.core.pattern.registry import DEFAULT_FUSION_PATTERNS

    class WrongRelu(PatternMatcher):
        def __init__(self, priority):
            super().__init__(Pattern("""
                input  input  0 1 relu_0
                Relu   relu_0 1 1 input output
                output output 1 0 relu_0
                """), priority)

        @property
        def name(self):
            return "FusionTestWrongRelu"

        def rewrite(self, opset=11):
            node = self.relu_0
            inputs, outputs = list(node.inputs), list(node.outputs)
            node.inputs.clear()
            node.outputs.clear()
            return {outputs[0].name: {"op": "LeakyRelu", "inputs": inputs, "outputs": outputs,
                                      "name": outputs[0].name, "attrs": {"alpha": 0.5},
                                      "domain": None}}

    register_fusion_pattern(WrongRelu(1))
    yield "FusionTestWrongRelu"
    DEFAULT_FUSION_PATTERNS.pop("FusionTestWrongRelu", None)


def test_a_wrong_onnxslim_pattern_is_named(wrong_slim_pattern):
    lab = onnx_lab.open("sample:convnet")
    c = lab.find_culprit("onnxslim")
    assert wrong_slim_pattern in c.switches and "FusionConvBN" in c.switches
    assert c.culprit == wrong_slim_pattern and c.confirmed
    assert c.verification_runs <= run_bound(len(c.switches))
    assert c.fix == 'lab.apply("onnxslim", skip_fusion_patterns=["FusionTestWrongRelu"])'
    assert c.cli_fix.endswith("--tool onnxslim --skip FusionTestWrongRelu")
    r = lab.apply("onnxslim", skip_fusion_patterns=[wrong_slim_pattern])
    assert r.modified and r.verify_passed
    assert "LeakyRelu" not in set(lab.nodes.op_type)


class _OnnxoptimizerWithWrongPass(OnnxoptimizerListPass):
    """onnxoptimizer's default list with a deliberately wrong pass appended to it."""

    WRONG = "test_fuse_relu_wrongly"

    def pass_list(self):
        off = self._off("skip_passes")
        return [p for p in [*onnxoptimizer.get_fuse_and_elimination_passes(), self.WRONG]
                if p not in off]

    def rebuild(self, model):
        passes = self.pass_list()
        proto = self.proto_with_weights(model)
        real = [p for p in passes if p != self.WRONG]
        out = onnxoptimizer.optimize(proto, real) if real else proto
        if self.WRONG in passes:  # "Relu after a fused Conv": with the wrong slope
            for n in out.graph.node:
                if n.op_type == "Relu":
                    n.op_type = "LeakyRelu"
                    n.attribute.append(helper.make_attribute("alpha", 0.5))
        return self.from_proto(out, model)


def _conv_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        ("b", rng.standard_normal(4).astype(np.float32)),
        ("s", rng.uniform(0.5, 2, 4).astype(np.float32)), ("bb", np.full(4, 0.1, np.float32)),
        ("m", np.full(4, 0.2, np.float32)), ("v", np.full(4, 1.5, np.float32))]]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn"),
         helper.make_node("Identity", ["n"], ["i"], name="id"),
         helper.make_node("Relu", ["i"], ["y"], name="relu")],
        "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_wrong_pass_appended_to_onnxoptimizers_list_is_named():
    register_pass("test_onnxoptimizer_wrong", kind="test")(_OnnxoptimizerWithWrongPass)
    try:
        lab = onnx_lab.open(_conv_model())
        assert lab.apply("onnxoptimizer").verify_passed  # the real list is fine here
        lab.undo()
        c = lab.find_culprit("test_onnxoptimizer_wrong")
        p = len(onnxoptimizer.get_fuse_and_elimination_passes()) + 1
        assert len(c.switches) == p and c.switches[-1] == _OnnxoptimizerWithWrongPass.WRONG
        assert c.culprit == _OnnxoptimizerWithWrongPass.WRONG and c.confirmed
        assert c.verification_runs <= run_bound(p)
        assert c.fix == ('lab.apply("test_onnxoptimizer_wrong", '
                         'skip_passes=["test_fuse_relu_wrongly"])')
    finally:
        base._REGISTRY.pop("test_onnxoptimizer_wrong", None)


@pytest.mark.slow
def test_onnxruntime_optimizer_names_come_from_its_log():
    lab = onnx_lab.open("sample:convnet")
    names = [s.name for s in get_pass("ort:extended").switches(lab.model)]
    # onnxruntime's log names the transformers; the rule-based one is split into its rules
    assert {"ConvBNFusion", "ConvActivationFusion", "EliminateIdentity"} <= set(names)
    assert "Level1_RuleBasedTransformer" not in names
    assert not {"GeluFusionL1", "AttentionFusion"} & set(names)  # nothing to fuse here
    assert all(s.param == "disabled_optimizers" for s in get_pass("ort:basic").switches(
        lab.model))


@pytest.mark.slow
def test_onnxruntime_culprit_under_exact_verification():
    # Folding BatchNormalization into the Conv reorders float sums: exact verification (atol
    # = rtol = 0) fails on it, and only on it among the rewrites onnxruntime makes here.
    lab = onnx_lab.open("sample:convnet")
    assert lab.find_culprit("ort:extended").message == NO_CULPRIT
    c = lab.find_culprit("ort:extended", verify={"atol": 0.0, "rtol": 0.0})
    assert c.culprit == "ConvBNFusion" and c.confirmed
    assert c.verification_runs <= run_bound(len(c.switches))
    assert c.fix == 'lab.apply("ort:extended", disabled_optimizers=["ConvBNFusion"])'


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["onnxslim", "onnxsim", "onnxoptimizer", "ort:basic"])
def test_real_tools_on_a_healthy_model(tool):
    c = find_culprit(_conv_model(), tool)
    assert c.message == NO_CULPRIT and c.verification_runs == 1 and c.switches


# ---------------------------------------------------------------------------- arguments
def test_bad_arguments_say_the_fix():
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(UnknownNameError, match="onnxslim") as e:
        lab.find_culprit("onnxslm")
    assert "Tools with switches" in str(e.value) and isinstance(e.value, LabError)
    with pytest.raises(PassError, match="no switches") as e:
        lab.find_culprit("fuse_conv_bn")
    assert "Tools with switches: " in str(e.value)
    with pytest.raises(PassError, match="one onnxoptimizer pass") as e:
        lab.find_culprit("onnxoptimizer:fuse_bn_into_conv")
    assert "find_culprit('onnxoptimizer'" in str(e.value)
    with pytest.raises(PassError, match="no switches"):
        lab.find_culprit("convert_opset", target=18)
    with pytest.raises(InputError, match="needs verification"):
        lab.find_culprit("onnxslim", verify=False)
    with pytest.raises(InputError, match="needs verification"):
        lab.apply("onnxslim", verify=False, find_culprit=True)
    with pytest.raises(PassError, match="FusionConvBM"):
        lab.find_culprit("onnxslim", skip_fusion_patterns=["FusionConvBM"])
    with pytest.raises(PassError, match="skip_fusion_patterns"):
        lab.find_culprit("onnxslim", skip_fusion_patterns="FusionConvBN")
    assert lab.history.shape[0] == 1


def test_switchable_tools():
    assert set(culprit_mod.switchable_tools()) == {"onnxslim", "onnxsim", "onnxoptimizer",
                                                   "ort:basic", "ort:extended", "ort:all"}


# ---------------------------------------------------------------------------- CLI
@pytest.mark.slow
def test_cli_find_culprit_json_and_exit_codes(wrong_slim_pattern, tmp_path, capsys):
    src = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(src))
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(src), str(out), "--tool", "onnxslim", "--find-culprit",
                 "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verify_passed"] is False and out.exists()
    c = doc["culprit"]
    assert c["culprit"] == wrong_slim_pattern and c["verification_runs"] <= c["bound"]
    assert c["bound"] == run_bound(len(c["switches"]))
    assert c["fix"] == 'lab.apply("onnxslim", skip_fusion_patterns=["FusionTestWrongRelu"])'
    assert main(["optimize", str(src), str(out), "--tool", "onnxslim", "--skip",
                 wrong_slim_pattern, "--find-culprit"]) == 0
    text = capsys.readouterr().out
    assert "onnxslim:" in text and "verified" in text and NO_CULPRIT in text


def test_cli_text_names_the_fix(wrong_slim_pattern, tmp_path, capsys):
    src = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(src))
    assert main(["optimize", str(src), str(tmp_path / "o.onnx"), "--tool", "onnxslim",
                 "--find-culprit"]) == 1
    text = capsys.readouterr().out
    assert f"culprit: {wrong_slim_pattern}" in text
    assert f"fix: onnx-lab optimize {src} {tmp_path / 'o.onnx'} --tool onnxslim --skip " \
        f"{wrong_slim_pattern}" in text


def test_cli_user_errors_exit_2(tmp_path, capsys):
    src = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(src))
    out = str(tmp_path / "o.onnx")
    assert main(["optimize", str(src), out, "--find-culprit"]) == 2
    assert "--tool" in capsys.readouterr().err
    assert main(["optimize", str(src), out, "--tool", "onnxslm", "--find-culprit"]) == 2
    assert "Close matches: 'onnxslim'" in capsys.readouterr().err
    assert main(["optimize", str(src), out, "--tool", "fuse_conv_bn", "--find-culprit"]) == 2
    assert main(["optimize", str(src), out, "--tool", "onnxslim", "--skip", "Nope"]) == 2
    assert main(["optimize", str(src), out, "--tool", "onnxslim", "--find-culprit",
                 "--no-verify"]) == 2


# ---------------------------------------------------------------------------- correct rewrites
# A decoder whose correct rewrites move work between nodes: the finder never blames them.
class _DecoderTool(WholeModelPass):
    """Test tool on the optimum-style decoder: a correct Shape move, planted faults."""

    params = (Param("skip", (list, tuple), None, "rewrites to leave out"),)
    switch_params = ("skip",)
    switch_source = "the test tool's rewrite list"
    rewrites: tuple[str, ...] = ()

    def switches(self, model):
        off = self._off("skip")
        return [Switch(n, "skip") for n in self.rewrites if n not in off]

    def rebuild(self, model):
        from rewrite_models import (
            move_shape_above_transpose,
            plant_reshape_target,
            plant_weight,
        )

        proto = ir.to_proto(model.ir)
        off = self._off("skip")
        for name in self.rewrites:
            if name in off:
                continue
            if name.startswith("move_shape"):
                proto = move_shape_above_transpose(
                    proto, f"/model/layers.{name[-1]}/self_attn/Shape_3")
            elif name == "bad_reshape":
                proto = plant_reshape_target(proto, "/model/layers.1/self_attn/Reshape_q",
                                             [1, 2, 1, 8])
            elif name == "bad_weight":
                proto = plant_weight(proto, "model.layers.0.self_attn.k_proj.weight")
        return self.from_proto(proto, model)


@pytest.fixture
def decoder_tool():
    made = []

    def make(rewrites: tuple[str, ...]) -> str:
        name = f"test_decoder_tool_{len(made)}"
        register_pass(name, kind="test")(type(name, (_DecoderTool,), {
            "rewrites": rewrites, "__doc__": "Test tool on the decoder."}))
        made.append(name)
        return name

    yield make
    for name in made:
        base._REGISTRY.pop(name, None)


@pytest.mark.slow  # a bisection of each decoder tool
@pytest.mark.parametrize("bad", ["bad_reshape", "bad_weight"])
def test_planted_faults_are_named_and_a_correct_shape_move_never(decoder_tool, bad):
    from rewrite_models import DECODER_DIMS, optimum_decoder

    name = decoder_tool(("move_shape_0", bad, "move_shape_1"))
    lab = onnx_lab.open(optimum_decoder(), dims=DECODER_DIMS)
    c = lab.find_culprit(name)
    assert c.culprit == bad and c.confirmed, c
    expected = {"bad_reshape": "/model/layers.1/self_attn/Reshape_q_output_0",
                "bad_weight": "/model/layers.0/self_attn/k_proj/MatMul_output_0"}[bad]
    assert c.runs[0].first_failure == expected
    ok = decoder_tool(("move_shape_0", "move_shape_1"))
    assert lab.find_culprit(ok).message == NO_CULPRIT


@pytest.mark.parametrize("tool", ["ort:basic", "ort:extended"])
def test_onnxruntime_on_the_decoder_has_no_culprit(tool):
    from rewrite_models import DECODER_DIMS, optimum_decoder

    c = find_culprit(optimum_decoder(), tool, dims=DECODER_DIMS)
    assert c.message == NO_CULPRIT and c.culprit is None


def test_a_rewrite_whose_outputs_agree_is_not_blamed(tool):
    # y = x * 0 * w + relu(x): the planted rewrite changes w, an intermediate fails, the
    # output agrees. Nothing to blame.
    nodes = [helper.make_node("Mul", ["x", "w"], ["t0"], name="mul"),
             helper.make_node("Mul", ["t0", "zero"], ["t1"], name="mul0"),
             helper.make_node("Identity", ["t1"], ["t2"], name="id0"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["t2", "r"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(8, np.float32), "zero")]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    name, rewrites = tool(1, bad=(0,))
    lab = onnx_lab.open(m)
    r = lab.apply(name)
    assert r.verify_passed is False and r.first_failure == "t0"
    c = lab.find_culprit(name)
    assert c.culprit is None and c.message.startswith("no culprit: the outputs agree"), c
    assert c.runs[0].outputs_agree and "outputs agree" in c.runs[0].verdict
