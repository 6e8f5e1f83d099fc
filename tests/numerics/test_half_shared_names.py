"""float16 conversion of an If whose branches define the same tensor name with different
types, distilled from optimum's T5 merged decoder (``decoder_model_merged.onnx``, optimum-onnx
0.1 / transformers 4.57, opset 18): ``/decoder/Cast_2_output_0`` is a float32 mask
(``Cast(ConstantOfShape(...))``) in ``else_branch`` and an int64 length feeding ``Range``'s
limit in ``then_branch``. Typed by name alone, the then-branch tensor read as float32, the
conversion cast it to float for the blocked ``Range`` and onnx's checker stopped on "Range_47:
limit has inconsistent type tensor(float)" (``block_list=["Range"]`` too).

The optional last test exports a tiny random T5 with optimum when it is importable."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.runtime.feeds import branch_feeds

SHARED = "/decoder/Cast_2_output_0"


def shared_name_if(float_in_else: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W")

    def mask_branch(p: str) -> list[onnx.NodeProto]:  # the float32 SHARED
        return [helper.make_node("Shape", ["x"], [f"{p}sh"], name=f"{p}Shape"),
                helper.make_node("ConstantOfShape", [f"{p}sh"], [f"{p}ones"], name=f"{p}Cos",
                                 value=helper.make_tensor("v", T.FLOAT, [1], [1.0])),
                helper.make_node("Cast", [f"{p}ones"], [SHARED], to=T.FLOAT, name="Cast_80"),
                helper.make_node("Mul", ["x", SHARED], [f"{p}m"], name=f"{p}Mul"),
                helper.make_node("MatMul", [f"{p}m", "W"], [f"{p}y"], name=f"{p}MatMul")]

    def range_branch(p: str) -> list[onnx.NodeProto]:  # the int64 SHARED, Range's limit
        return [helper.make_node("Shape", ["x"], [f"{p}sh"], name=f"{p}Shape"),
                helper.make_node("Gather", [f"{p}sh", "one"], [f"{p}len"], axis=0,
                                 name=f"{p}Gather"),
                helper.make_node("Cast", [f"{p}len"], [SHARED], to=T.INT64, name="Cast_46"),
                helper.make_node("Constant", [], [f"{p}st"], name=f"{p}Constant",
                                 value=helper.make_tensor("v", T.INT64, [], [0])),
                helper.make_node("Range", [f"{p}st", SHARED, "one"], [f"{p}r"], name="Range_47"),
                helper.make_node("Cast", [f"{p}r"], [f"{p}rf"], to=T.FLOAT, name=f"{p}CastF"),
                helper.make_node("Unsqueeze", [f"{p}rf", "ax"], [f"{p}ru"], name=f"{p}Unsq"),
                helper.make_node("Add", ["x", f"{p}ru"], [f"{p}a"], name=f"{p}Add"),
                helper.make_node("MatMul", [f"{p}a", "W"], [f"{p}y"], name=f"{p}MatMul")]

    def branch(tag: str, nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
        p = f"{tag}/"
        return helper.make_graph(nodes, tag, [],
                                 [helper.make_tensor_value_info(f"{p}y", T.FLOAT, None)])

    then, else_ = (range_branch, mask_branch) if float_in_else else (mask_branch, range_branch)
    # helper.make_node sorts its attributes: else_branch comes first, as in the export.
    g = helper.make_graph(
        [helper.make_node("If", ["use_cache_branch"], ["y"], name="optimum::if",
                          then_branch=branch("then", then("then/")),
                          else_branch=branch("else", else_("else/")))], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, "s", 8]),
         helper.make_tensor_value_info("use_cache_branch", T.BOOL, [1])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, "s", 8])],
        initializer=[w, helper.make_tensor("one", T.INT64, [], [1]),
                     helper.make_tensor("ax", T.INT64, [1], [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


FEEDS = [{"x": np.random.default_rng(i).standard_normal((1, 5, 8)).astype(np.float32),
          "use_cache_branch": np.array([b])} for i, b in enumerate((True, False))]


def _fresh(path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("float_in_else", [True, False])
@pytest.mark.parametrize("block", [None, ["Range"]])
def test_fp16_of_branches_sharing_a_name_loads_and_agrees(tmp_path, float_in_else, block):
    m = shared_name_if(float_in_else)
    onnx.save(m, tmp_path / "ref.onnx")
    half = onnx_lab.to_fp16(onnx_lab.open(tmp_path / "ref.onnx"), block_list=block)
    path = half.save(tmp_path / "half.onnx")
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved, full_check=True)
    ref, got = _fresh(tmp_path / "ref.onnx"), _fresh(path)
    for f in FEEDS:
        want, = ref.run(None, f)
        have, = got.run(None, f)
        assert np.allclose(have, want, atol=2e-2, rtol=1e-2)
    # both branches really compute in float16 (the MatMuls read the narrow weight) ...
    if_node = next(n for n in saved.graph.node if n.op_type == "If")
    w16 = {t.name for t in saved.graph.initializer if t.data_type == T.FLOAT16}
    for a in if_node.attribute:
        mm = next(n for n in a.g.node if n.op_type == "MatMul")
        assert set(mm.input) & w16, a.name
        # ... and the int64 tensor of the same name is still Range's int64 limit
        r = [n for n in a.g.node if n.op_type == "Range"]
        for n in r:
            assert n.input[1] == SHARED
    # a real drift is still caught by the comparison of the converted model
    changed = shared_name_if(float_in_else)
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        numpy_helper.to_array(changed.graph.initializer[0]) * 3, "W"))
    assert not onnx_lab.compare(half, changed, feeds=FEEDS).passed


def test_fp16_search_on_branches_sharing_a_name(tmp_path):
    lab = onnx_lab.open(shared_name_if(), dims={"s": 5})
    plan = lab.find_precision("fp16", feeds=FEEDS)
    assert plan.passed and plan.n_candidates > 0
    path = lab.save(tmp_path / "plan.onnx")
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    for f in FEEDS:
        _fresh(path).run(None, f)


@pytest.mark.skipif(importlib.util.find_spec("optimum") is None
                    or importlib.util.find_spec("transformers") is None,
                    reason="optimum (optimum-onnx) is not installed")
def test_optimum_t5_merged_decoder_fp16(tmp_path, monkeypatch):  # pragma: no cover - optional
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        from optimum.exporters.onnx import main_export
        from transformers import T5Config, T5ForConditionalGeneration
    except Exception as e:  # noqa: BLE001 - an incompatible optimum/transformers pair
        pytest.skip(f"optimum cannot export here: {e}")
    cfg = T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=1, num_decoder_layers=1,
                   num_heads=4, vocab_size=128, decoder_start_token_id=0, pad_token_id=0,
                   eos_token_id=1)
    T5ForConditionalGeneration(cfg).save_pretrained(tmp_path / "src")
    main_export(str(tmp_path / "src"), output=str(tmp_path / "onnx"),
                task="text2text-generation-with-past")
    src = tmp_path / "onnx" / "decoder_model_merged.onnx"
    dims = {"batch_size": 1, "decoder_sequence_length": 3, "past_decoder_sequence_length": 4,
            "encoder_sequence_length": 5}
    lab = onnx_lab.open(src, dims=dims)
    assert lab.cost().total["unknown_nodes"] == 0  # every body node, both branches
    feeds = branch_feeds(lab)  # use_cache_branch True (past 4), then False (past 0)
    assert [bool(f["use_cache_branch"][0]) for f in feeds] == [True, False]
    path = onnx_lab.to_fp16(lab).save(tmp_path / "half.onnx")
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    sess = _fresh(path)
    for f in feeds:
        logits = sess.run(["logits"], f)[0]
        assert np.isfinite(logits.astype(np.float32)).all()
