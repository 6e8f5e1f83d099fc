"""Verification by region (numerics/region.py through steps): planted bugs caught at the same
node as the whole-model check, a bug inside the region, the fallbacks, unchanged steps that
run nothing, and the final output check catching differences that each region let through."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from _machinery import chain_lab, chain_proto
from onnx import helper, numpy_helper
from onnxruntime.transformers.float16 import convert_float_to_float16

import onnx_lab
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array
from onnx_lab.errors import InputError
from onnx_lab.numerics.region import find_region, step_diff
from onnx_lab.runtime import _runner
from onnx_lab.transforms.base import LabPass, Match, Param, Rewrite, register_pass

MODES = ["region", "full"]


@pytest.fixture
def runs(monkeypatch):
    """Counts the verification runs (the real runner runs them)."""
    count = {"n": 0}
    real = _runner.run

    def counted(*a, **k):
        count["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(_runner, "run", counted)
    return count


@register_pass("test_region_nudge", kind="test")
class Nudge(LabPass):
    """Test pass (deliberately wrong by a little): add ``delta`` to one MatMul's weight."""

    params = (Param("node_id", str, "n0_MatMul", "the MatMul"),
              Param("delta", float, 2e-5, "added to every weight"))

    def find(self, model: LabModel) -> list[Match]:
        nid = self.options["node_id"]
        return [Match(f"test_region_nudge:{nid}", "nudge", self.name, [nid], nid, "nudge")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = model.index.node(self.options["node_id"])
        w = const_array(node.inputs[1])
        new = rw.add_initializer(node.graph, f"nudged_{node.name}", w + self.options["delta"])
        node.replace_input_with(1, new)
        rw.record(node, [node])


def _nudge(name: str, node_id: str, delta: float, doc: str) -> None:
    """Register a Nudge on another MatMul or by another delta (presets take no params)."""
    params = (Param("node_id", str, node_id, "the MatMul"),
              Param("delta", float, delta, "added to every weight"))
    register_pass(name, kind="test")(type(name, (Nudge,), {"params": params, "__doc__": doc}))


_nudge("test_region_nudge_second", "n4_MatMul", 2e-5, "Test pass: the same nudge on the second "
       "MatMul.")
_nudge("test_region_nudge_fp16", "n0_MatMul", 2e-3, "Test pass: a float16-sized nudge on the "
       "first MatMul.")
_nudge("test_region_nudge_fp16_second", "n4_MatMul", 2e-3, "Test pass: the same on the second.")


@register_pass("test_region_nudge_chain", kind="test")
class NudgeChain(LabPass):
    """Test pass: nudges the first MatMul (within float16's tolerance) and gives the second,
    which reads it through a Relu, an equal copy of its weight: one region whose second
    node is exact when fed the reference's values."""

    params = (Param("delta", float, 4e-3, "added to the first MatMul's weights"),)

    def find(self, model: LabModel) -> list[Match]:
        return [Match("test_region_nudge_chain:n0", "chain", self.name,
                      ["n0_MatMul", "n4_MatMul"], "n0_MatMul", "chain")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for nid, delta in (("n0_MatMul", self.options["delta"]), ("n4_MatMul", 0.0)):
            node = model.index.node(nid)
            w = const_array(node.inputs[1])
            node.replace_input_with(1, rw.add_initializer(node.graph, f"{nid}_w", w + delta))
            rw.record(node, [node])


register_pass("test_region_nudge_chain_fp32", kind="test")(type(
    "NudgeChain32", (NudgeChain,), {"params": (Param("delta", float, 2e-5, "the nudge"),),
                                    "__doc__": "Test pass: the chain, float32-sized."}))


@register_pass("test_region_wrong_pair", kind="test")
class WrongPair(LabPass):
    """Test pass (wrong): rewrites the first MatMul and the Identity after it; the MatMul's
    output, read only by the Identity, is wrong (a value inside the region)."""

    def find(self, model: LabModel) -> list[Match]:
        return [Match("test_region_wrong_pair:n0", "pair", self.name, ["n0_MatMul",
                      "n1_Identity"], "n0_MatMul", "pair")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        mm, ident = model.index.node("n0_MatMul"), model.index.node("n1_Identity")
        w = const_array(mm.inputs[1])
        mm.replace_input_with(1, rw.add_initializer(mm.graph, "W1_bad", w * 1.5))
        rw.record(mm, [mm])
        rw.record(ident, [ident])


# ---------------------------------------------------------------------------- planted bugs
@pytest.mark.parametrize("mode", MODES)
def test_planted_bug_is_caught_at_the_same_node_in_both_modes(mode):
    lab = chain_lab()
    r = lab.apply("test_perturb_weight", node_id="n4_MatMul", delta=0.5, verify=mode)
    assert r.verified_by == mode
    assert r.verify_passed is False and r.first_failure == "h2"
    row = r.verification.set_index("tensor").loc["h2"]
    assert row["node_id"] == "n4_MatMul" and row["match"] == "provenance" and not row["passed"]
    assert r.max_abs_err > 0.1  # over the model's outputs
    assert lab.history.loc[1, "verified_by"] == mode


@pytest.mark.parametrize("mode", MODES)
def test_planted_bug_in_the_first_matmul_fails_first_there_in_both_modes(mode):
    lab = chain_lab()
    r = lab.apply("test_perturb_weight", node_id="n0_MatMul", verify=mode)
    assert r.first_failure == "h1" and r.verify_passed is False
    failing = r.verification.loc[~r.verification.passed, "tensor"].tolist()
    assert failing[0] == "h1" and "y" in failing


@pytest.mark.parametrize("mode", MODES)
def test_a_value_broken_inside_the_region_is_named(mode):
    lab = chain_lab()
    r = lab.apply("test_region_wrong_pair", verify=mode)
    assert r.verified_by == mode and r.verify_passed is False
    assert r.first_failure == "h1"  # read only inside the region, compared all the same
    if mode == "region":
        region = r.verification.attrs["region"]
        assert region["nodes"] == 2 and region["inputs"] == ["x"]
        assert region["outputs"] == ["i1"]


@pytest.mark.parametrize("mode", ["auto", "full"])
def test_a_planted_bug_in_a_preset_is_caught_at_its_step(mode):
    lab = chain_lab()
    verify = True if mode == "auto" else "full"
    rs = lab.apply_preset(["test_drop_identity", "test_perturb_weight"], verify=verify)
    drop, bad = rs
    assert drop.verify_passed and bad.verify_passed is False
    assert bad.first_failure in ("h2", "y")  # the identities are gone: h2 may be y itself
    rep = bad.verification
    own = rep.loc[rep.match != "preset_output"].set_index("tensor")
    assert own.loc[bad.first_failure, "node_id"] == "n4_MatMul"


# ---------------------------------------------------------------------------- no false alarm
def test_the_safe_preset_verifies_by_region_and_passes(runs):
    lab = onnx_lab.open("sample:convnet")
    rs = [r for r in lab.apply_preset("safe") if r.modified]
    assert all(r.verify_passed for r in rs), [(r.name, r.notes) for r in rs]
    by = {r.name: r.verified_by for r in rs}
    assert by["fuse_conv_bn"] == "region" and by["eliminate_dead_nodes"] == "unchanged"
    assert set(lab.history.verified_by.dropna()) <= {"region", "full", "unchanged"}
    # the reference once, a region per region step, a whole model per fallback, the outputs
    fallbacks = sum(r.verified_by == "full" for r in rs)
    regions = sum(r.verified_by == "region" for r in rs)
    assert runs["n"] <= 1 + regions + 2 * fallbacks + 1
    last = [r for r in rs if r.verify_passed is not None][-1]
    final = last.verification.loc[last.verification.match == "preset_output"]
    assert len(final) == 1 and final.passed.all() and last.max_abs_err < 1e-4
    full = onnx_lab.open("sample:convnet")
    fr = [r for r in full.apply_preset("safe", verify="full") if r.modified]
    assert all(r.verify_passed and r.verified_by == "full" for r in fr)
    assert [r.name for r in fr] == [r.name for r in rs]


def test_a_step_that_changes_no_value_runs_nothing(runs):
    lab = chain_lab()
    lab.apply("test_drop_identity", matches=["test_drop_identity:n1_Identity"], verify=False)
    # an unused initializer left behind: removing it changes no value
    rs = lab.apply_preset(["remove_unused_initializers"])
    assert runs["n"] == 0
    if rs[0].modified:
        assert rs[0].verified_by == "unchanged" and rs[0].verify_passed


def test_unchanged_when_only_dead_nodes_go(runs):
    g = onnx.parser.parse_graph("""
    g (float[2, 3] x) => (float[2, 3] y) {
        y = Relu(x)
        dead = Sigmoid(x)
    }""")
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    (r,) = lab.apply_preset(["eliminate_dead_nodes"])
    assert r.modified and r.verified_by == "unchanged" and r.verify_passed
    assert runs["n"] == 0


# ---------------------------------------------------------------------------- fallbacks
def test_a_region_of_most_of_the_graph_falls_back_to_the_full_run():
    lab = chain_lab()
    r = lab.apply("test_drop_identity", verify="region")
    assert r.verified_by == "full" and r.verify_passed
    assert r.verification.attrs["region_fallback"].startswith("the region holds")
    assert any("verified on the whole model: the region holds" in n for n in r.notes)


def _if_model() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="body_relu")],
                             "then", [], [helper.make_tensor_value_info("t", 1, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="body_neg")],
                              "else", [], [helper.make_tensor_value_info("e", 1, [2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["z"], name="if", then_branch=then,
                              else_branch=other),
             helper.make_node("Identity", ["z"], ["y"], name="out")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("y", 1, [2])],
                          [numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@register_pass("test_region_body_op", kind="test")
class BodyOp(LabPass):
    """Test pass (wrong unless ``op`` is Relu): the Relu inside the If's then-branch
    becomes ``op``."""

    params = (Param("op", str, "Sigmoid", "the new op type"),)

    def find(self, model: LabModel) -> list[Match]:
        nid = next(n for n, e in model.index.entries.items() if e.node.name == "body_relu")
        return [Match(f"test_region_body_op:{nid}", "body", self.name, [nid], nid, "body")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = model.index.node(matches[0].anchor)
        node.op_type = self.options["op"]
        rw.record(node, [node])


def test_a_rewrite_inside_a_body_is_checked_by_its_owner():
    before = onnx_lab.open(_if_model()).model
    after = LabModel(before.ir.clone())
    body = next(e for e in after.index.entries.values() if e.node.name == "body_relu")
    body.node.op_type = "Sigmoid"  # changed in place, under its id
    after.invalidate()
    diff = step_diff(before, after)
    assert not diff.bodies and diff.nodes == ["if"] and "z" in diff.names
    region, why = find_region(after, diff)
    assert why is None and region.nodes == ["if"]
    assert set(region.inputs) == {"c", "x"}  # x: read by the bodies from the main graph


@pytest.mark.parametrize("mode", MODES)
def test_a_bug_planted_inside_a_body_is_caught_at_its_owner_in_both_modes(mode):
    for feeds in ({"x": np.array([1.0, 2.0], np.float32)},  # the then-branch runs
                  {"x": np.array([-1.0, -2.0], np.float32)}):  # the else-branch runs
        lab = onnx_lab.open(_if_model())
        r = lab.apply("test_region_body_op", verify={"mode": mode, "feeds": feeds})
        assert r.verified_by == mode
        if feeds["x"][0] > 0:  # the rewritten branch ran: caught at the If's output
            assert r.verify_passed is False and r.first_failure == "z"
            row = r.verification.set_index("tensor").loc["z"]
            assert row["node_id"] == "if" and not row["passed"]
        else:
            assert r.verify_passed, r.notes


def test_a_correct_rewrite_inside_a_body_passes_by_region(runs):
    lab = onnx_lab.open(_if_model())
    r = lab.apply("test_region_body_op", op="Relu", verify={
        "mode": "region", "feeds": {"x": np.array([1.0, 2.0], np.float32)}})
    assert r.modified and r.verified_by == "region" and r.verify_passed, r.notes
    assert r.verification.attrs["region"]["nodes"] == 1
    assert runs["n"] == 2  # the reference, then the final run with the region's tensors


def test_a_boundary_renamed_away_falls_back():
    # A region whose input has no reference value: drop it from the reference and ask.
    from onnx_lab.numerics.region import capture_reference, region_report

    lab = chain_lab()
    before = lab.model
    from onnx_lab.transforms.apply import run_pass

    result = run_pass(before, "test_perturb_weight", node_id="n4_MatMul")
    ref, why = capture_reference(before, result.model, dims={"batch": 2})
    assert ref is not None and why is None
    report, how = region_report(ref, before, result.model, result)
    assert report is not None and how == "region"
    del ref.values["i2"]
    report, how = region_report(ref, before, result.model, result)
    assert report is None and "'i2' has no reference value" in how


def test_an_unknown_mode_is_refused():
    lab = chain_lab()
    with pytest.raises(InputError, match="verification mode"):
        lab.apply("test_drop_identity", verify="fast")
    with pytest.raises(InputError, match="verification mode"):
        lab.apply_preset("safe", verify={"mode": "partial"})


# ---------------------------------------------------------------------------- drift
def test_the_final_check_catches_differences_each_region_let_through():
    # Each nudge alone keeps the outputs within tolerance (checked below step by step on the
    # whole model), the two together do not: only the preset's final check sees it.
    lab = chain_lab()
    rs = lab.apply_preset(["test_region_nudge", "test_region_nudge_second"])
    first, second = rs
    assert first.verified_by == "region" and first.verify_passed
    assert second.verified_by == "region"
    rows = second.verification
    own = rows.loc[rows.match != "preset_output"]
    assert own.passed.all()  # every region within tolerance
    final = rows.loc[rows.match == "preset_output"]
    assert not final.passed.all()
    assert second.verify_passed is False and second.first_failure == "y"
    assert any("added up through the network and over the steps" in n for n in second.notes)
    # the whole-model check compares each step with the one before: each passes
    full = chain_lab().apply_preset(["test_region_nudge", "test_region_nudge_second"],
                                    verify="full")
    assert all(r.verified_by == "full" and r.verify_passed for r in full)


def test_differences_that_add_up_in_a_float16_model_say_so():
    lab = onnx_lab.open(convert_float_to_float16(chain_proto(), keep_io_types=False),
                        dims={"batch": 2})
    first, second = lab.apply_preset(["test_region_nudge_fp16",
                                      "test_region_nudge_fp16_second"])
    assert first.verify_passed and first.verified_by == "region"
    own = second.verification.loc[second.verification.match != "preset_output"]
    assert own.passed.all()
    assert second.verify_passed is False and second.first_failure == "y"
    note = second.notes[-1]
    assert "each rewritten node was within tolerance" in note
    assert "computed in float16" in note and "float32 model" in note


def test_a_reference_too_large_leaves_out_values_computed_from_constants(runs):
    # A weight filled by ConstantOfShape (as onnx's light models hold theirs): with it the
    # reference's tensors pass max_bytes // 2, without it they fit; the region that reads it
    # computes it itself.
    g = onnx.parser.parse_graph("""
    g (float[2, 8] x) => (float[2, 4096] y) {
        shape = Constant <value = int64[2] {8, 4096}> ()
        w = ConstantOfShape <value = float[1] {0.5}> (shape)
        i = Identity(x)
        y = MatMul(i, w)
    }""")
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    (r,) = lab.apply_preset(["eliminate_identity"], verify={"max_bytes": 200_000})
    assert r.verified_by == "region" and r.verify_passed, r.notes
    assert r.verification.attrs["region"]["inputs"] == ["x"]  # w computed in the region
    full = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    (f,) = full.apply_preset(["eliminate_identity"], verify={"max_bytes": 200_000,
                                                             "mode": "full"})
    assert f.verified_by == "full" and f.verify_passed


def test_a_reference_with_sizes_that_depend_on_the_values_is_still_captured(runs):
    # NonZero's output size depends on the values: the plan sizes it as the largest known
    # tensor, which would pass max_bytes // 2; the known ones fit, so it is captured too
    # (a graph output: kept for the final check) and the step is checked by its region.
    g = onnx.parser.parse_graph("""
    g (float[4096] x) => (float[4096] y, int64[1, n] nz) {
        i = Identity(x)
        y = Relu(i)
        nz = NonZero(x)
    }""")
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (r,) = onnx_lab.open(model).apply_preset(["eliminate_identity"],
                                             verify={"max_bytes": 110_000})
    assert r.verified_by == "region" and r.verify_passed, r.notes
    final = r.verification.loc[r.verification.match == "preset_output", "tensor"].tolist()
    assert sorted(final) == ["nz", "y"]
    assert runs["n"] == 2


def _two_step_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Sigmoid", ["x"], ["p"], name="sig"),
             helper.make_node("Identity", ["p"], ["a"], name="id"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("MatMul", ["b", "W0"], ["h1"], name="n0_MatMul"),
             helper.make_node("Relu", ["h1"], ["r"], name="relu2"),
             helper.make_node("MatMul", ["r", "W4"], ["h2"], name="n4_MatMul"),
             helper.make_node("Add", ["h2", "h1"], ["y"], name="add")]
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), n)
             for n in ("W0", "W4")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 8])],
                          [helper.make_tensor_value_info("y", 1, [2, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_waiting_regions_share_the_final_run(runs):
    # The Identity's removal (its region: the Sigmoid, now writing "a") waits while the
    # nudge changes a value: the final run computes the Sigmoid as a copy fed the
    # reference's values and reads the
    # nudged MatMul from the final model itself: 2 runs (the reference, the final run).
    lab = onnx_lab.open(_two_step_model())
    drop, nudge = lab.apply_preset(["eliminate_identity", "test_region_nudge"])
    assert drop.verified_by == nudge.verified_by == "region"
    assert drop.verify_passed and nudge.verify_passed, (drop.notes, nudge.notes)
    assert drop.verification.attrs["region"]["run"] == "as a copy in the final run"
    assert nudge.verification.attrs["region"]["run"] == "with the final outputs"
    assert drop.max_abs_err is None and nudge.verification.attrs["final_check"]
    assert runs["n"] == 2


@pytest.mark.parametrize("mode", ["auto", "full"])
def test_a_bug_after_a_waiting_region_is_caught_at_its_step_in_both_modes(mode):
    lab = onnx_lab.open(_two_step_model())
    drop, bad = lab.apply_preset(["eliminate_identity", "test_perturb_weight"],
                                 verify=True if mode == "auto" else "full")
    assert drop.verify_passed, drop.notes
    assert bad.verify_passed is False and bad.first_failure in ("h2", "y")
    own = bad.verification.loc[bad.verification.match != "preset_output"].set_index("tensor")
    assert own.loc["h2", "node_id"] == "n4_MatMul" and not own.loc["h2", "passed"]


def test_a_bug_in_a_region_run_as_a_copy_is_caught(runs):
    # the wrong step comes first: its region runs as a copy in the final run, the nudge's is
    # read from the final model and, since the first step changed its inputs' values, runs
    # alone after all
    lab = onnx_lab.open(_two_step_model())
    bad, nudge = lab.apply_preset(["test_perturb_weight", "test_region_nudge"])
    assert bad.verified_by == "region" and bad.verify_passed is False
    assert bad.first_failure == "h2"
    assert nudge.verify_passed is False  # the outputs, with the bug, differ at the end
    own = nudge.verification.loc[nudge.verification.match != "preset_output"]
    assert own.passed.all()  # its own region within tolerance
    assert runs["n"] == 3


def test_a_region_that_feeds_itself_is_judged_again_on_the_reference_values(runs):
    # One step rewrote both MatMuls of a float16 model; the second reads the first through a
    # Relu outside the region. Read from the final run, the second MatMul's input carries
    # the first one's nudge and the second MatMul, exact, fails by the difference of the
    # chain (a float16 ResNet-50's Conv+BN fusion failed so: 53 fused Convs in one region).
    # Judged again on the reference's values, alone, it is within one float16 step (4 to 8
    # here: 0.0039; onnxruntime's CPU computes a float16 MatMul through float32).
    lab = onnx_lab.open(convert_float_to_float16(_two_step_model(), keep_io_types=False))
    (step,) = lab.apply_preset(["test_region_nudge_chain"])
    assert step.verified_by == "region"
    assert step.verification.attrs["region"]["run"] == "alone"
    own = step.verification.loc[step.verification.match != "preset_output"].set_index("tensor")
    assert own.passed.all(), own
    assert own.loc["h1", "max_abs"] > 0
    assert own.loc["h2", "max_abs"] <= 2 ** -8
    # the reference, the final run, the region alone; and the original's outputs run alone,
    # as the final check of a float16 model does when an output fails (the nudge adds up)
    assert runs["n"] == 4
    # a pass read from the final run stands: the float32 model's chain is within tolerance
    lab = onnx_lab.open(_two_step_model())
    (step,) = lab.apply_preset(["test_region_nudge_chain_fp32"])
    assert step.verify_passed and step.verification.attrs["region"]["run"] == \
        "with the final outputs"


def test_a_whole_model_failure_in_a_float16_model_points_to_the_region_check():
    half = onnx_lab.open(convert_float_to_float16(chain_proto(), keep_io_types=False),
                         dims={"batch": 2})
    r = half.apply("test_perturb_weight")
    assert r.verify_passed is False and r.verified_by == "full"
    assert any("computes in float16" in n and "apply_preset(['test_perturb_weight'])" in n
               for n in r.notes), r.notes
    r = chain_lab().apply("test_perturb_weight")
    assert r.verify_passed is False and not any("computes in" in n for n in r.notes)


def test_a_final_run_refused_for_memory_is_not_a_failed_verification(monkeypatch):
    # an audit under --memory-gb: the preset's final run hit the memory limit, and the step
    # read "verification failed ... the differences added up through the network" where the
    # outputs match without the limit. The final check runs here under a real 1-byte limit
    from onnx_lab import steps
    from onnx_lab.core.limits import run_limits
    from onnx_lab.numerics.region import NOT_CHECKED, final_check

    def limited(*a, **k):
        with run_limits(memory=1):
            return final_check(*a, **k)

    monkeypatch.setattr(steps, "final_check", limited)
    lab = chain_lab()
    (r,) = lab.apply_preset(["test_region_nudge"])
    assert r.verified_by == "region" and r.verify_passed is None, r.notes
    assert any(n.startswith("the preset's outputs were not checked: " + NOT_CHECKED)
               for n in r.notes), r.notes
    assert not any("added up" in n or "verification failed" in n for n in r.notes), r.notes
    monkeypatch.undo()
    (r,) = chain_lab().apply_preset(["test_region_nudge"])
    assert r.verify_passed  # without the limit the same step verifies


@register_pass("test_region_blowup", kind="test")
class Blowup(LabPass):
    """Test pass (right in its numbers, ruinous in memory): Relu(a) as the Relu of the maximum
    over 2**36 broadcast copies of ``a`` (a buffer of terabytes onnxruntime cannot allocate)."""

    def find(self, model: LabModel) -> list[Match]:
        return [Match(f"test_region_blowup:{nid}", "blowup", self.name, [nid], nid, "blowup")
                for nid in model.index.topo_order("")
                if model.index.node(nid).op_type == "Relu"]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        import onnx_ir as ir

        for m in matches:
            relu = model.index.node(m.anchor)
            g = relu.graph
            axes = rw.add_initializer(g, "blowup_axes", np.array([0], np.int64))
            shape = rw.add_initializer(g, "blowup_shape", np.array([1 << 36, 1, 1], np.int64))
            un = ir.node("Unsqueeze", [relu.inputs[0], axes])
            ex = ir.node("Expand", [un.outputs[0], shape])
            mx = ir.node("ReduceMax", [ex.outputs[0]], attributes={"axes": [0], "keepdims": 0})
            new = ir.node("Relu", [mx.outputs[0]], name=relu.name)
            rw.replace([relu], [un, ex, mx, new], [relu.outputs[0]], [new.outputs[0]])


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_onnxruntime_cannot_allocate_is_not_verified_not_failed(mode):
    # the run of the new version fails for want of memory ("Failed to allocate memory for
    # requested buffer"): its numbers were not compared, so the step is not verified, not
    # failed (and without the run limit, which would refuse it before the run)
    from onnx_lab.core.limits import run_limits

    with run_limits(memory=None):
        (r,) = chain_lab().apply_preset(["test_region_blowup"], verify=mode)
    assert r.modified and r.verify_passed is None, (r.verify_passed, r.notes)
    assert any("not checked: the new model could not be run within the memory here" in n
               and "allocate" in n for n in r.notes), r.notes
    assert not any(n.startswith("verification failed") for n in r.notes), r.notes


@register_pass("test_region_double_out", kind="test")
class DoubleOut(LabPass):
    """Test pass (wrong): casts the first MatMul's output to double, which the second MatMul
    (float32 weight) refuses when the whole model loads; the region alone runs and agrees."""

    def find(self, model: LabModel) -> list[Match]:
        return [Match("test_region_double_out:n0", "double", self.name, ["n0_MatMul"],
                      "n0_MatMul", "double")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        import onnx_ir as ir

        node = model.index.node("n0_MatMul")
        out = node.outputs[0]
        users = list(out.uses())
        cast = ir.Node("", "Cast", [out], attributes=[ir.AttrInt64("to", 11)],
                       name="n0_double", num_outputs=1)
        node.graph.insert_after(node, cast)
        for u in users:
            u.node.replace_input_with(u.idx, cast.outputs[0])
        cast.outputs[0].name = "n0_double_out"
        rw.record(node, [node, cast])


def test_a_failure_that_quotes_a_name_mentioning_memory_is_not_a_want_of_memory():
    # the second MatMul named "mm bad_alloc": onnxruntime's type error for it quotes the name,
    # and the preset's final check read "not checked: the optimized model could not be run
    # within the memory here" (verify_passed None) for a model that does not load at all
    import onnx_lab.errors as errors
    from onnx_lab.core.limits import run_limits
    from onnx_lab.runtime.session import out_of_memory

    for name in ("n4_MatMul", "mm bad_alloc", "Failed to allocate memory"):
        proto = chain_proto()
        for n in proto.graph.node:
            if n.name == "n4_MatMul":
                n.name = name
        lab = onnx_lab.open(proto, dims={"batch": 2})
        (r,) = lab.apply_preset(["test_region_double_out"])
        assert r.verify_passed is False, (name, r.notes)
        assert not any("not checked" in n for n in r.notes), (name, r.notes)
        assert any("the optimized model does not run" in n for n in r.notes), (name, r.notes)
    # a run stopped at the time limit did not finish: no want of memory either
    slow = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64 n, float[4] x) => (float[4] y) {
            c = Constant<value = bool {1}>()
            y = Loop(n, c, x) <body = b (int64 i, bool ci, float[4] v) => (bool co, float[4] w) {
                co = Identity(ci)
                w = Sin(v)
            }>
        }""")
    with run_limits(timeout_s=0.3):
        with pytest.raises(errors.RunLimitError) as stopped:
            _runner.run(onnx_lab.open(slow).model, {"n": np.array(10**9), "x": np.ones(4, np.float32)},
                        ["y"])
    assert stopped.value.limit == "time" and not out_of_memory(stopped.value)
    with run_limits(memory=1), pytest.raises(errors.RunLimitError) as refused:
        _runner.run(chain_lab().model, {"x": np.ones((2, 8), np.float32)}, ["y"])
    assert refused.value.limit == "memory" and out_of_memory(refused.value)
