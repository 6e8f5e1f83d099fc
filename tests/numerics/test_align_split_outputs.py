"""A single-output node standing for one output of a multi-output source (onnxruntime's basic
level pushes a Transpose through a Split: one Transpose per Split output, each stamped with the
Split as origin, each writing the Split output's name) is paired with the output whose name it
kept, not with the source's first output (found by the conformance sweep on
``test_rotary_embedding_with_interleaved_rotary_dim_expanded`` after ``ort:basic``: a false
verification failure, XNoRotate compared with XToRotate)."""

from __future__ import annotations

import json

from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics.align import align_versions
from onnx_lab.numerics.verify import verify


def _before():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    split = helper.make_tensor("split", TensorProto.INT64, [2], [2, 2])
    nodes = [helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1, name="Split_0"),
             helper.make_node("Neg", ["a"], ["na"], name="Neg_1"),
             helper.make_node("Concat", ["na", "b"], ["y"], axis=1, name="Concat_2")]
    g = helper.make_graph(nodes, "g", [x], [y], initializer=[split])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _after():
    """The Split as two Slices, each stamped with the Split, each keeping its output's name."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v])
             for n, v in (("s0", 0), ("e0", 2), ("s1", 2), ("e1", 4), ("ax", 1))]
    s_a = helper.make_node("Slice", ["x", "s0", "e0", "ax"], ["a"], name="Slice_a")
    s_b = helper.make_node("Slice", ["x", "s1", "e1", "ax"], ["b"], name="Slice_b")
    for n in (s_a, s_b):
        p = n.metadata_props.add()
        p.key, p.value = "onnx_lab.origin", json.dumps(["Split_0"])
    nodes = [s_b, s_a,  # the second output's node first: its own index is 0 as well
             helper.make_node("Neg", ["a"], ["na"], name="Neg_1"),
             helper.make_node("Concat", ["na", "b"], ["y"], axis=1, name="Concat_2")]
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


class _Step:
    """What a tool step's PassResult says: both Slices were made from the Split."""

    provenance = {"Slice_a": ["Split_0"], "Slice_b": ["Split_0"]}


def test_each_slice_pairs_with_the_split_output_it_kept():
    before, after = onnx_lab.open(_before()).model, onnx_lab.open(_after()).model
    pairs = {p.tensor: p.ref for p in align_versions(before, after, _Step())}
    assert pairs.get("b", "b") == "b", pairs
    assert pairs.get("a", "a") == "a", pairs


def test_a_correct_split_rewrite_verifies():
    frame = verify(onnx_lab.open(_before()).model, onnx_lab.open(_after()).model, _Step())
    assert bool(frame["passed"].all()), frame[["tensor", "ref_tensor", "passed"]]


def _branches(fused: bool):
    """x @ wq, x @ wk, x @ wv concatenated; ``fused``: one MatMul of the three weights side by
    side and a Split, stamped with the three MatMuls (onnxsim/onnxslim on a ViT's attention)."""
    import numpy as np
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])
    if not fused:
        inits = [numpy_helper.from_array(w, n) for w, n in zip(ws, ("wq", "wk", "wv"))]
        nodes = [helper.make_node("MatMul", ["x", w], [o], name=n) for w, o, n in
                 (("wq", "q", "mm_q"), ("wk", "k", "mm_k"), ("wv", "v", "mm_v"))]
    else:
        inits = [numpy_helper.from_array(np.concatenate(ws, axis=1), "wqkv"),
                 helper.make_tensor("parts", TensorProto.INT64, [3], [4, 4, 4])]
        split = helper.make_node("Split", ["qkv", "parts"], ["s0", "s1", "s2"], axis=-1,
                                 name="Split_1")
        p = split.metadata_props.add()
        p.key, p.value = "onnx_lab.origin", json.dumps(["mm_v", "mm_k", "mm_q"])
        nodes = [helper.make_node("MatMul", ["x", "wqkv"], ["qkv"], name="MatMul_0"), split]
    outs = ["s0", "s1", "s2"] if fused else ["q", "k", "v"]
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=1, name="cat"))
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_a_split_ending_a_fusion_of_branches_pairs_no_output_by_position():
    # onnxsim on a ViT: its q, k, v projections fused into one MatMul and a Split stamped
    # with the three; the Split's first output (q) was compared with the last branch's
    # (v): a failing row, max_abs 0.54, where the outputs are equal
    import numpy as np
    import onnxruntime as ort

    from onnx_lab.numerics.compare import compare

    ref, cand = _branches(False), _branches(True)
    x = {"x": np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)}
    outs = [ort.InferenceSession(m.SerializeToString()).run(None, x)[0] for m in (ref, cand)]
    assert np.abs(outs[0] - outs[1]).max() < 1e-5  # the truth: the same computation
    c = compare(ref, cand, feeds=x)
    assert c.passed and c.layers["passed"].all(), c.layers[["tensor", "cand_tensor", "max_abs"]]
    a = c.alignment.set_index("tensor")
    for t in ("q", "k", "v"):
        assert not isinstance(a.loc[t, "cand_tensor"], str), a.loc[t]
        assert "fused into candidate node 'Split_1'" in a.loc[t, "reason"]
