"""profile(): the calls of If/Loop/Scan bodies mapped to the body nodes that ran them.

onnxruntime names an unnamed node ``{op_type}_{node index}`` within its own graph, so a
body's ``Mul_0`` and the main graph's share name and node index: the main graph's unnamed
Mul/Add were "removed", the branch that ran "not run", a Loop body's nodes "removed".
The truth is the same model with every node named, and the condition's value in a fresh
onnxruntime session.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.profiling import profile

F = TensorProto.FLOAT


def _vi(name, dtype=F, shape=(4, 8)):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def _const(name, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(value, dtype)))


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _if_loop_model() -> onnx.ModelProto:
    """Unnamed nodes everywhere: the main graph's Mul_0/Mul_1/Add_2, an If whose two branches
    are alike (Mul_0, Mul_1, Sigmoid_2; only their constant differs) on a computed
    condition, and a Loop body (Mul_0, Tanh_1, Add_2, Identity_3)."""
    def branch(tag, k):
        return helper.make_graph(
            [_const(f"{tag}_c", [k]), helper.make_node("Mul", ["x", f"{tag}_c"], [f"{tag}_m"]),
             helper.make_node("Mul", [f"{tag}_m", f"{tag}_m"], [f"{tag}_m2"]),
             helper.make_node("Sigmoid", [f"{tag}_m2"], [f"{tag}_o"])],
            tag, [], [_vi(f"{tag}_o")])
    body = helper.make_graph(
        [_const("lc", [0.5]), helper.make_node("Mul", ["lv", "lc"], ["lm"]),
         helper.make_node("Tanh", ["lm"], ["lt"]), helper.make_node("Add", ["lt", "lt"], ["lv_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("lv")],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("lv_out")])
    nodes = [_const("c0", [2.0]), helper.make_node("Mul", ["X", "c0"], ["x"]),
             helper.make_node("Mul", ["x", "x"], ["x2"]), _const("c1", [1.0]),
             helper.make_node("Add", ["x2", "c1"], ["x3"]),
             helper.make_node("Sigmoid", ["x3"], ["x4"]), helper.make_node("Add", ["x4", "x"], ["x5"]),
             helper.make_node("ReduceSum", ["x5"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["yif"], then_branch=branch("th", 3.0),
                              else_branch=branch("el", 5.0)),
             helper.make_node("Loop", ["trip", "", "yif"], ["yloop"], body=body),
             helper.make_node("Relu", ["yloop"], ["Y"])]
    return _model(nodes, [_vi("X")], [_vi("Y")],
                  [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                   numpy_helper.from_array(np.array(3, np.int64), "trip")])


def _named(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with every node of every graph named uniquely (``T/<position path>``)."""
    m = onnx.ModelProto.FromString(m.SerializeToString())

    def walk(g, path):
        for i, n in enumerate(g.node):
            n.name = f"T{path}/{i}"
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g, f"{path}/{i}{a.name}")
    walk(m.graph, "")
    return m


def _by_position(lab) -> dict[str, str]:
    """node id -> its position path (the same key in a model and its named copy)."""
    idx = lab.model.index
    out = {}

    def walk(g, path):
        for i, n in enumerate(g):
            out[idx.node_id(n)] = f"{path}/{i}"
            for a in n.attributes.values():
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.value, f"{path}/{i}{a.name}")
    walk(lab.model.ir.graph, "")
    return out


def _branch_taken(m: onnx.ModelProto, x: np.ndarray) -> str:
    """The If's branch, from the condition's value in a fresh onnxruntime session."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    m.graph.output.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    cond = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]
                                ).run(["cond"], {"X": x})[0]
    return "then_branch" if bool(cond) else "else_branch"


def _table(lab, m, x, level):
    p = profile(lab, runs=3, warmup=1, feeds={"X": x}, providers="cpu", opt_level=level,
                progress=False)
    key = _by_position(lab)
    cov = p.coverage()
    return p, {key[r.node_id]: r.status for r in cov.itertuples()}, \
        {key[r.node_id]: r.calls for r in p.nodes.itertuples() if r.mapped}


@pytest.mark.parametrize("level", ["disable", "all"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_unnamed_body_calls_map_to_the_nodes_that_ran_them(level, sign):
    m = _if_loop_model()
    x = (sign * (np.abs(np.random.default_rng(0).standard_normal((4, 8))) + 0.5)
         ).astype(np.float32)
    branch = _branch_taken(m, x)
    assert branch == ("then_branch" if sign > 0 else "else_branch")
    lab = onnx_lab.open(m)
    p, status, calls = _table(lab, m, x, level)
    assert p.nodes.mapped.all(), p.nodes.loc[~p.nodes.mapped, ["ort_name", "how"]]
    st = p.coverage().set_index("node_id").status
    # the main graph's unnamed Mul/Mul/Add ran (they were "removed")
    assert (st[["Mul_1", "Mul_2", "Add_4"]] == "ran").all()
    other = "else_branch" if branch == "then_branch" else "then_branch"
    for op in ("Mul_1", "Mul_2", "Sigmoid_3"):
        assert st[f"If_9/{branch}/{op}"] == "ran"
        assert st[f"If_9/{other}/{op}"] == "not run"
    nodes = p.nodes.set_index("node_id")
    for op in ("Mul_1", "Tanh_2", "Add_3", "Identity_4"):
        assert st[f"Loop_10/body/{op}"] == "ran"
        assert nodes.loc[f"Loop_10/body/{op}", "calls"] == 3  # the Loop's 3 iterations
    assert nodes.loc["Mul_1", "calls"] == 1 and nodes.loc[f"If_9/{branch}/Mul_1", "calls"] == 1
    # the same model with every node named: the same nodes ran, as often
    named = onnx_lab.open(_named(m))
    _, status_n, calls_n = _table(named, _named(m), x, level)
    assert status == status_n
    assert calls == calls_n


def _loop_if_model(alike: bool) -> onnx.ModelProto:
    """A Loop of 5 whose body holds an If on the iteration's parity: its branches differ
    (Mul, Sigmoid / Add, Tanh) or are alike."""
    then = helper.make_graph([helper.make_node("Mul", ["lv", "lv"], ["tm"]),
                              helper.make_node("Sigmoid", ["tm"], ["to"])], "t", [], [_vi("to")])
    ops = ("Mul", "Sigmoid") if alike else ("Add", "Tanh")
    other = helper.make_graph([helper.make_node(ops[0], ["lv", "lv"], ["ea"]),
                               helper.make_node(ops[1], ["ea"], ["eo"])], "e", [], [_vi("eo")])
    body = helper.make_graph(
        [_const("two", 2, np.int64), helper.make_node("Mod", ["i", "two"], ["r"]),
         _const("zero_i", 0, np.int64), helper.make_node("Equal", ["r", "zero_i"], ["even"]),
         helper.make_node("If", ["even"], ["iv"], then_branch=then, else_branch=other),
         helper.make_node("Mul", ["iv", "iv"], ["lv_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("lv")],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("lv_out")])
    return _model([helper.make_node("Mul", ["X", "X"], ["x"]),
                   helper.make_node("Sigmoid", ["x"], ["xs"]),
                   helper.make_node("Loop", ["trip", "", "xs"], ["yl"], body=body),
                   helper.make_node("Add", ["yl", "x"], ["Y"])], [_vi("X")], [_vi("Y")],
                  [numpy_helper.from_array(np.array(5, np.int64), "trip")])


@pytest.mark.parametrize("level", ["disable", "all"])
def test_an_if_in_a_loop_maps_each_call_to_the_branch_it_took(level):
    m = _loop_if_model(alike=False)
    lab = onnx_lab.open(m)
    x = np.ones((4, 8), np.float32)
    p, status, calls = _table(lab, m, x, level)
    assert p.nodes.mapped.all()
    nodes = p.nodes.set_index("node_id")
    then, other = "Loop_2/body/If_4/then_branch", "Loop_2/body/If_4/else_branch"
    # iterations 0, 2, 4 take then_branch, 1 and 3 else_branch
    assert nodes.loc[[f"{then}/Mul_0", f"{then}/Sigmoid_1"], "calls"].tolist() == [3, 3]
    assert nodes.loc[[f"{other}/Add_0", f"{other}/Tanh_1"], "calls"].tolist() == [2, 2]
    # the main graph's Mul_0/Sigmoid_1 once, the body's Mul_3 (ORT's Mul_3 too) 5 times
    assert nodes.loc["Mul_0", "calls"] == 1 and nodes.loc["Sigmoid_1", "calls"] == 1
    assert nodes.loc["Loop_2/body/Mul_5", "calls"] == 5
    named = onnx_lab.open(_named(m))
    _, status_n, calls_n = _table(named, _named(m), x, level)
    assert status == status_n and calls == calls_n


def test_alike_branches_nothing_tells_apart_stay_unmapped_with_a_note():
    # the If's condition is computed in the Loop's body: no feed tells which branch ran, and
    # the two branches' nodes have the same names: no call is given to a branch by guess
    m = _loop_if_model(alike=True)
    p = profile(onnx_lab.open(m), runs=2, warmup=1, providers="cpu", opt_level="disable",
                progress=False)
    body = p.kernels.loc[p.kernels.graph.str.endswith("/?")]
    assert set(body.ort_name) == {"Mul_0", "Sigmoid_1"}
    rows = p.nodes.loc[p.nodes.ort_name.isin(["Mul_0", "Sigmoid_1"]) & ~p.nodes.mapped]
    assert len(rows) == 2 and (rows.how == "unmapped").all()
    assert any("branch that ran is not known" in n for n in p.notes)
    # the main graph's Mul_0 and the rest of the body still map
    nodes = p.nodes.loc[p.nodes.mapped].set_index("node_id")
    assert nodes.loc["Mul_0", "calls"] == 1 and nodes.loc["Loop_2/body/Mul_5", "calls"] == 5


@pytest.mark.parametrize("level", ["disable", "all"])
def test_scan_body_calls_map_to_the_body(level):
    body = helper.make_graph([helper.make_node("Mul", ["s_in", "xi"], ["s1"]),
                              helper.make_node("Add", ["s1", "xi"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["y_i"])], "sb",
                             [_vi("s_in", F, [8]), _vi("xi", F, [8])],
                             [_vi("s_out", F, [8]), _vi("y_i", F, [8])])
    m = _model([helper.make_node("Mul", ["X", "X"], ["x"]),
                helper.make_node("Add", ["x", "X"], ["x1"]),
                helper.make_node("ReduceMean", ["x1"], ["s0"], axes=[0], keepdims=0),
                helper.make_node("Scan", ["s0", "x1"], ["sf", "Y"], body=body, num_scan_inputs=1),
                helper.make_node("Relu", ["sf"], ["Z"])], [_vi("X")], [_vi("Y"), _vi("Z", F, [8])])
    p = profile(onnx_lab.open(m), runs=2, warmup=1, providers="cpu", opt_level=level,
                progress=False)
    assert p.nodes.mapped.all()
    nodes = p.nodes.set_index("node_id")
    assert nodes.loc["Mul_0", "calls"] == 1 and nodes.loc["Add_1", "calls"] == 1
    assert nodes.loc["Scan_3/body/Mul_0", "calls"] == 4  # one per row of X
    assert nodes.loc["Scan_3/body/Add_1", "calls"] == 4


def test_a_fused_node_in_a_loop_body_maps_to_the_bodys_nodes():
    # ORT names the FusedGemm of a body's MatMul+Add+Relu as the main graph's one ("fused
    # /MatMulAddFusion"): the body's mapped to the main graph's nodes, the main one's to none
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(
        np.float32), "W")
    b = numpy_helper.from_array(np.ones(8, np.float32), "B")
    body = helper.make_graph(
        [helper.make_node("MatMul", ["lv", "W"], ["mm"]), helper.make_node("Add", ["mm", "B"], ["ad"]),
         helper.make_node("Relu", ["ad"], ["lv_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("lv")],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("lv_out")])
    m = _model([helper.make_node("MatMul", ["X", "W"], ["x"]),
                helper.make_node("Add", ["x", "B"], ["xa"]), helper.make_node("Relu", ["xa"], ["xr"]),
                helper.make_node("Loop", ["trip", "", "xr"], ["yl"], body=body),
                helper.make_node("Add", ["yl", "xr"], ["Y"])], [_vi("X")], [_vi("Y")],
               [w, b, numpy_helper.from_array(np.array(4, np.int64), "trip")])
    p = profile(onnx_lab.open(m), runs=2, warmup=1, providers="cpu", opt_level="all",
                progress=False)
    assert p.nodes.mapped.all()
    fused = p.nodes.loc[p.nodes.op_type == "FusedGemm"].set_index("calls")
    assert set(fused.loc[1.0, "components"]) == {"MatMul_0", "Add_1", "Relu_2"}
    assert set(fused.loc[4.0, "components"]) == {"Loop_3/body/MatMul_0", "Loop_3/body/Add_1",
                                                 "Loop_3/body/Relu_2"}
    st = p.coverage().set_index("node_id").status
    assert (st[["Loop_3/body/MatMul_0", "Loop_3/body/Add_1", "Loop_3/body/Relu_2"]] != "removed"
            ).all()
