"""An Imputer's missing value is in the generated feeds: skl2onnx's SimpleImputer exports
``Imputer(replaced_value_float=NaN)``, and standard-normal feeds never hold NaN, so a wrong
imputed value passed ``compare`` and a removed Imputer was verified as changing nothing."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics import make_feeds

F = TensorProto.FLOAT


def _imputer_model(imputed: float = 3.0) -> onnx.ModelProto:
    # skl2onnx's ColumnTransformer layout: two float columns joined, then imputed and scaled
    nodes = [
        helper.make_node("Concat", ["age", "income"], ["merged"], name="Concat", axis=1),
        helper.make_node("Imputer", ["merged"], ["imputed"], domain="ai.onnx.ml",
                         name="Imputer", imputed_value_floats=[imputed, 1.0],
                         replaced_value_float=float("nan")),
        helper.make_node("Scaler", ["imputed"], ["y"], domain="ai.onnx.ml", name="Scaler",
                         offset=[0.5, 0.5], scale=[2.0, 2.0]),
    ]
    g = helper.make_graph(nodes, "imputer",
                          [helper.make_tensor_value_info("age", F, ["N", 1]),
                           helper.make_tensor_value_info("income", F, ["N", 1])],
                          [helper.make_tensor_value_info("y", F, ["N", 2])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def test_feeds_hold_the_missing_value_an_imputer_replaces():
    lab = onnx_lab.open(_imputer_model(), dims={"N": 8})
    f = make_feeds(lab)
    for name in ("age", "income"):
        nan = np.isnan(f[name])
        assert nan.any() and not nan.all()
    # an input that something computes with directly gets no NaN
    m = _imputer_model()
    m.graph.node.append(helper.make_node("Relu", ["age"], ["r"], name="Relu"))
    m.graph.output.append(helper.make_tensor_value_info("r", F, ["N", 1]))
    f = make_feeds(onnx_lab.open(m, dims={"N": 8}))
    assert not np.isnan(f["age"]).any() and np.isnan(f["income"]).any()


def test_a_wrong_imputed_value_fails_compare(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_imputer_model(3.0), a)
    onnx.save(_imputer_model(8.0), b)
    assert onnx_lab.compare(str(a), str(a), dims={"N": 8}).passed
    c = onnx_lab.compare(str(a), str(b), dims={"N": 8})
    assert not c.passed
    assert c.first_divergence["node_id"] == "Imputer"


def test_removing_the_imputer_is_seen_by_verification():
    lab = onnx_lab.open(_imputer_model(), dims={"N": 8})
    r = lab.apply("remove_node", node_id="Imputer")
    assert r.modified
    assert lab.history["outputs_changed"].iloc[-1]
    assert not any("outputs unchanged" in n for n in r.notes)
