"""Random ops (a train-mode Dropout, RandomNormalLike...) draw the same numbers in every run
onnx_lab makes (runtime.session.seed_random_ops): a model compared with a byte-identical copy
failed at its Dropout ("computes differently"), and so did the verification of any correct
step on it. The saved model keeps its own (seedless) semantics."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import onnxruntime as ort

import onnx_lab

_TRAIN_DROPOUT = '''<ir_version: 8, opset_import: ["" : 17]> g (float[64,64] x) => (float[64,64] y) {
  i = Identity(x)
  ratio = Constant<value=float {0.1}>()
  tm = Constant<value=bool {1}>()
  dd, msk = Dropout(i, ratio, tm)
  y = Relu(dd) }'''


def _train_dropout(tmp_path, scale: float | None = None) -> str:
    text = _TRAIN_DROPOUT if scale is None else _TRAIN_DROPOUT.replace(
        "y = Relu(dd)", f"r = Relu(dd)\n  k = Constant<value=float {{{scale}}}>()\n  y = Mul(r, k)")
    path = tmp_path / ("m.onnx" if scale is None else "scaled.onnx")
    onnx.save(onnx.parser.parse_model(text), path)
    return str(path)


def test_a_train_mode_dropout_compares_equal_to_its_copy(tmp_path):
    x = {"x": np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)}
    src = _train_dropout(tmp_path)
    copy = tmp_path / "copy.onnx"
    shutil.copy(src, copy)
    # the model itself draws a new mask per run (the premise)
    runs = [ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, x)[0]
            for _ in range(3)]
    assert any(not np.array_equal(runs[0], r) for r in runs[1:])
    c = onnx_lab.compare(src, str(copy), progress=False)
    assert c.passed and c.first_divergence is None, c.summary_text()
    lab = onnx_lab.open(src)
    r = lab.apply("eliminate_identity")
    assert r.verify_passed is True, r.notes
    # a real change after the Dropout still fails
    assert not onnx_lab.compare(src, _train_dropout(tmp_path, 1.05), progress=False).passed
    # the saved model is the user's: no seed written into it
    lab.save(tmp_path / "out.onnx")
    saved = onnx.load(str(tmp_path / "out.onnx"))
    assert not any(a.name == "seed" for n in saved.graph.node for a in n.attribute)
    assert not any(a.name == "seed" for n in onnx.load(src).graph.node for a in n.attribute)


def test_random_normal_like_is_seeded_alike_on_both_sides():
    m = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
g (float[16] x) => (float[16] y) { n = RandomNormalLike(x) y = Add(x, n) }''')
    c = onnx_lab.compare(m, m, progress=False)
    assert c.passed, c.summary_text()


def test_two_random_ops_merged_into_one_still_fail():
    # one seed for every random op made two noises identical: a tool merging them into one
    # (y = x + n1 - n1) passed against y = x + n1 - n2
    def noisy(merged: bool) -> onnx.ModelProto:
        second = "n1" if merged else "n2"
        extra = "" if merged else "n2 = RandomNormalLike(x)\n"
        return onnx.parser.parse_model(
            '<ir_version: 8, opset_import: ["" : 17]> g (float[2,64] x) => (float[2,64] y) {'
            f"n1 = RandomNormalLike(x)\n{extra}a = Add(x, n1)\ny = Sub(a, {second}) }}")

    assert onnx_lab.compare(noisy(False), noisy(False), progress=False).passed
    assert not onnx_lab.compare(noisy(False), noisy(True), progress=False).passed


def test_the_seeds_stay_in_the_sessions_a_plan_or_a_saved_model_has_none(tmp_path):
    # the seeds were written where the precision plan's base graph is made: a plan of a
    # train-mode model would have saved them
    m = onnx.parser.parse_model('''<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x) => (float[4,8] y) {
  w = Constant<value=float[8,8] {1,0,0,0,0,0,0,0, 0,1,0,0,0,0,0,0, 0,0,1,0,0,0,0,0,
      0,0,0,1,0,0,0,0, 0,0,0,0,1,0,0,0, 0,0,0,0,0,1,0,0, 0,0,0,0,0,0,1,0, 0,0,0,0,0,0,0,1}>()
  h = MatMul(x, w)
  n = RandomNormalLike(h)
  y = Add(h, n) }''')
    lab = onnx_lab.open(m)
    plan = lab.find_precision("fp16", progress=False)
    lab.save(tmp_path / "plan.onnx")
    for proto in (plan.model.to_proto(), onnx.load(str(tmp_path / "plan.onnx"))):
        assert not any(a.name == "seed" for n in proto.graph.node for a in n.attribute)
