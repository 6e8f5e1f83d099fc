"""float16 conversion of optimum-like merged decoders: an If on ``use_cache_branch`` whose
branches hold a ``Range`` fed by float arithmetic on ``Shape`` (``Cast(Gather(Shape))``, an
outer-scope ``Add`` with a past length, body Constants), with node names repeated across the
branches (``Range_50`` in both, as optimum's merge leaves them) and a tensor name whose type
differs between the branches. Each conversion (``block_list`` or not, every plan of the
search) is saved and loaded by a fresh onnxruntime session, whose outputs are compared with
the float32 model's.

The reported failure on a real optimum export ("limit has inconsistent type") came from a name
defined in both branches with different types: ``test_half_shared_names.py`` holds that
structure; these layouts guard the neighbouring ones."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnx_lab


def merged(variant: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", T.FLOAT, [8, 8], rng.standard_normal(64).astype(np.float32))
    outer = [helper.make_node("Shape", ["x"], ["s"], name="Shape_1"),
             helper.make_node("Gather", ["s", "one"], ["len"], axis=0, name="Gather_2"),
             helper.make_node("Cast", ["len"], ["lenf"], to=T.FLOAT, name="Cast_3"),
             helper.make_node("Add", ["lenf", "pastf"], ["limo"], name="Add_4")]

    def branch(tag: str, typed_int: bool) -> onnx.GraphProto:
        nodes = []
        if typed_int:  # the same tensor names, int64 in this branch
            nodes += [helper.make_node("Identity", ["len"], ["lim"], name="Cast_49"),
                      helper.make_node("Constant", [], ["st"], name="Constant_48",
                                       value=helper.make_tensor("v", T.INT64, [], [0])),
                      helper.make_node("Constant", [], ["dl"], name="Constant_47",
                                       value=helper.make_tensor("v", T.INT64, [], [1])),
                      helper.make_node("Range", ["st", "lim", "dl"], ["ri"], name="Range_50"),
                      helper.make_node("Cast", ["ri"], ["r"], to=T.FLOAT, name="Cast_51")]
        else:
            lim = {0: "lenf", 1: "limo"}[variant]
            nodes += [helper.make_node("Constant", [], ["st"], name="Constant_48",
                                       value=helper.make_tensor("v", T.FLOAT, [], [0.0])),
                      helper.make_node("Range", ["st", lim, "onef"], ["r"], name="Range_50")]
        nodes += [helper.make_node("Unsqueeze", ["r", "ax"], ["ru"], name="Unsqueeze_52"),
                  helper.make_node("Add", ["x", "ru"], ["xa"], name="Add_53"),
                  helper.make_node("MatMul", ["xa", "W"], ["mm"], name="MatMul_54"),
                  helper.make_node("Softmax", ["mm"], [f"y_{tag}"], axis=-1, name="Softmax_55")]
        return helper.make_graph(nodes, tag, [],
                                 [helper.make_tensor_value_info(f"y_{tag}", T.FLOAT, None)])

    g = helper.make_graph(
        outer + [helper.make_node("If", ["use_cache_branch"], ["y"], name="optimum::if",
                                  then_branch=branch("then", False),
                                  else_branch=branch("else", variant == 1))], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, "s", 8]),
         helper.make_tensor_value_info("use_cache_branch", T.BOOL, [1])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, "s", 8])],
        initializer=[w, helper.make_tensor("one", T.INT64, [], [1]),
                     helper.make_tensor("ax", T.INT64, [1], [1]),
                     helper.make_tensor("onef", T.FLOAT, [], [1.0]),
                     helper.make_tensor("pastf", T.FLOAT, [], [0.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


FEEDS = [{"x": np.random.default_rng(i).standard_normal((1, 8, 8)).astype(np.float32),
          "use_cache_branch": np.array([i % 2 == 0])} for i in range(2)]


def _fresh(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("variant", [0, 1])
@pytest.mark.parametrize("block", [None, ["Range"]])
def test_to_fp16_saved_file_loads_and_agrees(tmp_path, variant, block):
    m = merged(variant)
    lab = onnx_lab.open(m, dims={"s": 8})
    half = lab.to_fp16(block_list=block)
    path = half.save(tmp_path / "half.onnx")
    onnx.save(m, tmp_path / "ref.onnx")
    ref = _fresh(tmp_path / "ref.onnx")
    for f in FEEDS:
        want, = ref.run(None, f)
        got, = _fresh(path).run(None, f)
        assert np.allclose(got, want, atol=1e-2, rtol=1e-2)
    # the narrow type is really used inside the branches
    body = next(n for n in onnx.load(str(path)).graph.node if n.op_type == "If").attribute[0].g
    assert any(n.op_type == "MatMul" for n in body.node)
    assert any(i.data_type == T.FLOAT16 for i in onnx.load(str(path)).graph.initializer)


@pytest.mark.parametrize("variant", [0, 1])
def test_fp16_search_plan_saved_and_loaded(tmp_path, variant):
    lab = onnx_lab.open(merged(variant), dims={"s": 8})
    plan = lab.find_precision("fp16", feeds=FEEDS)
    assert plan.passed and plan.n_candidates > 0
    path = lab.save(tmp_path / "plan.onnx")
    _fresh(path).run(None, FEEDS[0])
    # a real drift is still caught: the float16 model against a copy with a changed weight
    changed = merged(variant)
    changed.graph.initializer[0].CopyFrom(helper.make_tensor(
        "W", T.FLOAT, [8, 8], (np.asarray(onnx.numpy_helper.to_array(
            changed.graph.initializer[0])) * 3).astype(np.float32)))
    assert not onnx_lab.compare(lab, changed, feeds=FEEDS).passed
