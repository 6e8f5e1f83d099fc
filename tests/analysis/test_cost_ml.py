"""Cost rules of the ai.onnx.ml ops (formulas in analysis/cost.py's docstrings), and cost of
models with sequence inputs: counted where it can be, unknown with a reason elsewhere."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ml_models import (
    dict_input_model,
    linear_zipmap,
    sequence_input_model,
    string_pipeline,
    tree_zipmap,
)
from onnx import TensorProto, helper

import onnx_lab

F = TensorProto.FLOAT


def _rows(model, dims=None):
    return onnx_lab.open(model, dims=dims).cost().nodes.set_index("op_type")


def _one_op(node: onnx.NodeProto, x_shape, y_shape, y_type=F, ml_version=3):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", F, x_shape)],
                          [helper.make_tensor_value_info("Y", y_type, y_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml",
                                                                      ml_version)])
    m.ir_version = 8
    return m


def test_linear_classifier_is_its_matmul():
    row = _rows(linear_zipmap(), {"N": 5}).loc["LinearClassifier"]
    # N=5, F=3, K=3: macs 45; 2*45 + intercepts 15 + softmax 5*15 + argmax 15
    assert row["known"] and row["macs"] == 45 and row["flops"] == 2 * 45 + 15 + 75 + 15


def test_tree_ensemble_counts_comparisons_per_tree_and_depth():
    row = _rows(tree_zipmap(), {"N": 10}).loc["TreeEnsembleClassifier"]
    # 2 trees of depth 2, 2 classes: 10 * (2 + 2 + 2 * 2)
    assert row["known"] and row["flops"] == 80 and row["macs"] == 0
    assert "2 trees, depth up to 2" in row["note"]


def test_zipmap_moves_data_with_a_note_never_a_silent_zero():
    row = _rows(tree_zipmap(), {"N": 10}).loc["ZipMap"]
    assert row["known"] and row["flops"] == 0 and "data movement" in row["note"]


def test_encoders_are_elementwise():
    rows = _rows(string_pipeline(), {"N": 7})
    assert rows.loc["OneHotEncoder", "flops"] == 7 * 5  # one per output element
    assert list(rows.loc["LabelEncoder", "flops"]) == [7, 7]
    assert rows["known"].all()


def test_scaler_normalizer_binarizer_imputer():
    cases = {
        "Scaler": (dict(offset=[0.0] * 4, scale=[1.0] * 4), 2),
        "Normalizer": (dict(norm="L2"), 3),
        "Binarizer": (dict(threshold=0.5), 1),
        "Imputer": (dict(imputed_value_floats=[0.0], replaced_value_float=np.nan), 1),
    }
    for op, (attrs, per) in cases.items():
        m = _one_op(helper.make_node(op, ["X"], ["Y"], domain="ai.onnx.ml", **attrs),
                    [6, 4], [6, 4])
        row = _rows(m).loc[op]
        assert row["known"] and row["flops"] == 24 * per, op


def test_tree_ensemble_of_ml_opset_5():
    # TreeEnsemble (ai.onnx.ml 5): one tree, root 0 -> node 1 (true, a split) / leaf (false);
    # node 1 -> two leaves: depth 2.
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1, aggregate_function=1,
        post_transform=0, tree_roots=[0], nodes_modes=helper.make_tensor(
            "m", TensorProto.UINT8, [2], [0, 0]), nodes_featureids=[0, 1],
        nodes_splits=helper.make_tensor("s", F, [2], [0.0, 0.5]),
        nodes_truenodeids=[1, 0], nodes_trueleafs=[0, 1], nodes_falsenodeids=[0, 1],
        nodes_falseleafs=[1, 1], leaf_targetids=[0, 0, 0],
        leaf_weights=helper.make_tensor("w", F, [3], [1.0, 2.0, 3.0]))
    m = _one_op(node, [4, 2], [4, 1], ml_version=5)
    row = _rows(m).loc["TreeEnsemble"]
    assert row["known"] and row["flops"] == 4 * (2 + 1), row["note"]


def test_svm_linear_without_support_vectors_is_a_matmul():
    node = helper.make_node("SVMRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            coefficients=[0.5, -0.5, 1.0], kernel_type="LINEAR",
                            n_supports=0, rho=[0.1])
    row = _rows(_one_op(node, [8, 3], [8, 1])).loc["SVMRegressor"]
    assert row["known"] and row["macs"] == 8 * 3


def test_malformed_tree_attributes_give_a_reason():
    m = tree_zipmap()
    tree = m.graph.node[0]
    a = next(a for a in tree.attribute if a.name == "nodes_truenodeids")
    del a.ints[-1]
    row = _rows(m, {"N": 2}).loc["TreeEnsembleClassifier"]
    assert not row["known"] and "disagree in length" in row["note"]


def test_an_ml_name_in_another_domain_has_no_formula():
    node = helper.make_node("Scaler", ["X"], ["Y"], domain="my.domain")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", F, [2])],
                          [helper.make_tensor_value_info("Y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("my.domain", 1)])
    row = onnx_lab.open(m).cost().nodes.iloc[0]
    assert not row["known"] and row["note"] == "no cost formula for my.domain::Scaler"


@pytest.mark.parametrize("element_shape", [(2, 3), None])
def test_sequence_input_does_not_stop_cost(element_shape):
    c = onnx_lab.open(sequence_input_model(element_shape)).cost()
    rows = c.nodes.set_index("op_type")
    assert rows.loc["ConcatFromSequence", "known"] and rows.loc["SequenceLength", "known"]
    assert not rows.loc["Relu", "known"] and rows.loc["Relu", "note"] == "shapes unknown"


def test_map_input_counts_its_vectorizer():
    rows = _rows(dict_input_model())
    assert rows.loc["DictVectorizer", "known"]
    assert "map" in rows.loc["DictVectorizer", "note"]


def test_onnx_ml_models_count_the_numbers_their_attributes_learned():
    # a tree's thresholds (its branch nodes', not its leaves') and leaf weights, a linear
    # model's coefficients and intercepts: held in attributes, their params were 0
    tree = onnx_lab.open(tree_zipmap(), dims={"N": 2}).cost()
    assert tree.total["params"] == 6 + 16 and tree.total["param_bytes"] == 22 * 4
    assert tree.nodes.set_index("op_type").loc["TreeEnsembleClassifier", "params"] == 22
    linear = onnx_lab.open(linear_zipmap(), dims={"N": 2}).cost()
    assert linear.total["params"] == 3 * 3 + 3


def test_peak_memory_names_a_node_when_only_the_inputs_have_a_size():
    # ai.onnx.ml 1's TreeEnsembleRegressor (LightGBM / skl2onnx exports) has no shape
    # inference: its output's size is unknown, the input X is the whole peak, and the peak
    # was reported "at None" (`onnx-lab cost`: "peak activations 480 bytes at None")
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            name="trees", n_targets=1, nodes_treeids=[0, 0, 0],
                            nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                            nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                            nodes_values=[0.5, 0.0, 0.0], nodes_truenodeids=[1, 0, 0],
                            nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
                            target_nodeids=[1, 2], target_ids=[0, 0],
                            target_weights=[1.0, 2.0])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", F, [20, 6])],
                          [helper.make_tensor_value_info("Y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 13),
                                            helper.make_operatorsetid("ai.onnx.ml", 1)])
    c = onnx_lab.open(m).cost()
    assert c.total["peak_activation_bytes"] == 20 * 6 * 4
    assert c.total["peak_node"] == "trees"
