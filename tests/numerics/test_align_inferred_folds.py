"""compare() of a candidate a tool folded nodes into without recording it (a file onnxsim,
onnxoptimizer or onnxruntime wrote outside onnx_lab): the fold is read from the rewiring."""

from __future__ import annotations

import numpy as np
import onnx
from numerics_helpers import make_model, vi
from onnx import helper, numpy_helper

import onnx_lab


def _conv_bn(fold: bool, bias_error: float = 0.0) -> onnx.ModelProto:
    """x -> Conv -> BatchNormalization -> Relu -> GlobalAveragePool, or (``fold``) the same
    with the BatchNormalization folded into the Conv as onnxsim does it: the Conv keeps its
    name and its output's, the Relu reads that output."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    scale, shift = rng.uniform(0.5, 2, 4), rng.normal(size=4)
    mean, var = rng.normal(size=4), rng.uniform(0.5, 2, 4)
    inits = []
    if fold:
        k = scale / np.sqrt(var + 1e-5)
        inits += [numpy_helper.from_array((w * k[:, None, None, None]).astype(np.float32), "w"),
                  numpy_helper.from_array(((b - mean) * k + shift + bias_error)
                                          .astype(np.float32), "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
                 helper.make_node("Relu", ["c"], ["r"], name="relu")]
    else:
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")] + [
            numpy_helper.from_array(a.astype(np.float32), n)
            for a, n in ((scale, "s"), (shift, "t"), (mean, "m"), (var, "v"))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
                 helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["bn"],
                                  name="bn", epsilon=1e-5),
                 helper.make_node("Relu", ["bn"], ["r"], name="relu")]
    nodes.append(helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap"))
    return make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 1, 1])], inits)


def test_a_fold_no_origin_records_is_compared_at_the_folded_nodes_output():
    # onnxsim's BatchNormalization fold of a TorchScript export (or of light ResNet-50):
    # the Conv's output, which keeps its name, was compared with the reference's Conv output
    # ("computes differently", max_abs 7.5 on ResNet-50) and the nodes after it were not
    # compared at all ("a name kept on another computation")
    ref, cand = _conv_bn(fold=False), _conv_bn(fold=True)
    c = onnx_lab.compare(ref, cand)
    assert c.passed and c.first_divergence is None and c.layers["passed"].all()
    from onnx_lab.numerics.align import inferred_fusions

    assert inferred_fusions(onnx_lab.open(ref).model, onnx_lab.open(cand).model) == {
        "conv": ["conv", "bn"]}
    a = c.alignment.set_index("tensor")
    assert (a.loc["bn", "cand_tensor"], a.loc["bn", "match"]) == ("c", "structure")
    assert "'bn' (BatchNormalization) folded into candidate node 'conv'" in a.loc["bn", "reason"]
    assert pd_isna(a.loc["c", "cand_tensor"]) and "fused into" in a.loc["c", "reason"]
    assert {"bn", "r", "y"} <= set(c.layers["tensor"])
    # a wrong fold still fails, at the folded Conv
    c = onnx_lab.compare(ref, _conv_bn(fold=True, bias_error=0.5))
    assert not c.passed and c.first_divergence["tensor"] == "bn"
    assert c.first_divergence["node_id"] == "bn"
    # the same model on both sides: nothing inferred
    assert inferred_fusions(onnx_lab.open(ref).model, onnx_lab.open(ref).model) == {}


def pd_isna(x: object) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


def _conv_add_transpose(sunk: bool) -> onnx.ModelProto:
    """x -> Conv -> Add(bias) -> Transpose -> Relu, or (``sunk``) as onnxruntime's optimizer
    leaves it: the bias folded into the Conv and the Transpose pushed below the Relu under a
    new name. Channels = height = width, so every tensor has the same shape."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(5, 3, 3, 3)).astype(np.float32)
    b = rng.normal(size=5).astype(np.float32)
    if sunk:
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"),
                 helper.make_node("Transpose", ["r"], ["y"], name="tr_sunk", perm=[0, 2, 3, 1])]
    else:
        inits = [numpy_helper.from_array(w, "w"),
                 numpy_helper.from_array(b.reshape(1, 5, 1, 1), "b")]
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
                 helper.make_node("Add", ["c", "b"], ["a"], name="add"),
                 helper.make_node("Transpose", ["a"], ["t"], name="tr", perm=[0, 2, 3, 1]),
                 helper.make_node("Relu", ["t"], ["y"], name="relu")]
    return make_model(nodes, [vi("x", [1, 3, 5, 5])], [vi("y", [1, 5, 5, 5])], inits)


def test_a_node_the_candidate_moved_is_not_read_as_folded():
    # the Transpose is in the candidate (renamed, below the Relu): the Conv stood for the
    # Transpose's output, and compare named a divergence at the Transpose (max_abs 26) on a
    # candidate whose every value agrees
    from onnx_lab.numerics.align import inferred_fusions

    ref, cand = _conv_add_transpose(sunk=False), _conv_add_transpose(sunk=True)
    assert inferred_fusions(onnx_lab.open(ref).model, onnx_lab.open(cand).model) == {
        "conv": ["conv", "add"]}
    c = onnx_lab.compare(ref, cand)
    assert c.passed and c.first_divergence is None and c.layers["passed"].all()
    a = c.alignment.set_index("tensor")
    assert (a.loc["a", "cand_tensor"], a.loc["a", "match"]) == ("c", "structure")
    assert pd_isna(a.loc["t", "cand_tensor"])
