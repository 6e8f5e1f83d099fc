"""The blame of a first divergence planted at a known node: what it names and why."""

from __future__ import annotations

import numpy as np
import onnx
from numerics_helpers import make_model, vi
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.numerics.compare import compare


def _two_matmuls() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32) * 0.3, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    return make_model(nodes, [vi("x", [4, 16])], [vi("y", [4, 8])], [w1, w2])


def _fp16_with(ref: onnx.ModelProto, weight: str, factor: float) -> onnx.ModelProto:
    half = onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()
    for t in half.graph.initializer:
        if t.name == weight:
            a = numpy_helper.to_array(t).astype(np.float32) * factor
            t.CopyFrom(numpy_helper.from_array(a.astype(np.float16), t.name))
    return half


def test_a_weight_changed_in_a_float16_candidate_is_blamed_on_the_weight():
    # fp32 reference, fp16 candidate whose second MatMul's weight is 8 % larger: the weights'
    # dtypes differ, and the weight was not compared ("computes differently: its inputs
    # agree"), though it differs far beyond its rounding to float16
    ref = _two_matmuls()
    c = compare(ref, _fp16_with(ref, "w2", 1.08))
    d = c.first_divergence
    assert d["node_id"] == "mm2"
    assert d["cause"] == "weights" and d["constant"] == "w2"
    assert "beyond its rounding to float16" in d["message"]


def test_a_float16_candidate_whose_weights_are_only_rounded_blames_no_weight():
    ref = _two_matmuls()
    for factor in (1.0, 1.0 + 2.0 ** -12):  # the rounding itself, and a nudge within it
        c = compare(ref, _fp16_with(ref, "w2", factor))
        d = c.first_divergence
        assert d is None or d.get("cause") != "weights", d


def _residual(rewired: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, "w")
    g = numpy_helper.from_array(np.ones(16, np.float32), "g")
    nodes = [helper.make_node("Relu", ["x"], ["n1"], name="act"),
             helper.make_node("MatMul", ["n1", "w"], ["h"], name="mm"),
             # the residual Add: x + h; the bug reads the activation instead of x
             helper.make_node("Add", ["n1" if rewired else "x", "h"], ["r"], name="add"),
             helper.make_node("LayerNormalization", ["r", "g"], ["y"], name="ln", axis=-1)]
    return make_model(nodes, [vi("x", [4, 16])], [vi("y", [4, 16])], [w, g])


def test_confirm_names_the_rewired_node_above_an_unchanged_one():
    # The rewired Add is "not the same quantity" and not compared; the LayerNormalization it
    # feeds is the first failing tensor, of cause "inputs" with the Add upstream. Confirm cut
    # it out with the Add and said "LayerNormalization ln computes differently".
    ref, cand = _residual(False), _residual(True)
    d = compare(ref, cand).first_divergence
    assert d["node_id"] == "ln" and d["cause"] == "inputs" and d["upstream"] == ["add"]
    d = compare(ref, cand, confirm=True).first_divergence
    assert d["confirmed"] is True and d["cause"] == "inputs", d
    assert "so Add 'add' computes differently" in d["message"]
    assert "ln computes differently" not in d["message"]
    assert "ln itself is unchanged" in d["confirm_note"]


def test_confirm_still_blames_a_changed_node_cut_out_with_the_rewired_one():
    # the same cut, but the LayerNormalization's epsilon changed too: it computes differently
    ref, cand = _residual(False), _residual(True)
    for n in cand.graph.node:
        if n.name == "ln":
            n.attribute.append(helper.make_attribute("epsilon", 0.5))
    d = compare(ref, cand, confirm=True).first_divergence
    assert d["node_id"] == "ln" and d["confirmed"] is True and d["cause"] == "computation"


def test_a_changed_weight_under_another_name_is_named_on_both_sides():
    # the candidate's mm2 reads its own copy of w2, changed; w2 itself is unchanged there,
    # and the message named w2 alone
    ref = _two_matmuls()
    cand = onnx.ModelProto()
    cand.CopyFrom(ref)
    w2 = next(t for t in cand.graph.initializer if t.name == "w2")
    cand.graph.initializer.append(numpy_helper.from_array(
        numpy_helper.to_array(w2) * np.float32(1.1), "w2_copy"))
    next(n for n in cand.graph.node if n.name == "mm2").input[1] = "w2_copy"
    d = compare(ref, cand).first_divergence
    assert d["node_id"] == "mm2" and d["cause"] == "weights" and d["constant"] == "w2"
    assert "its weight 'w2' (in the candidate 'w2_copy'), which differs" in d["message"]


def test_a_node_that_computes_differently_names_the_attributes_that_differ():
    # an epsilon, or a Gelu's approximation, changed: blamed "computes differently" with no
    # word of which attribute; the values are the model's, shown short
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from onnx_lab.numerics.compare import compare

    def model(eps: float, approx: str = "none"):
        w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * 0.1
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("LayerNormalization", ["m", "s", "b"], ["n"], name="ln",
                              epsilon=eps),
             helper.make_node("Gelu", ["n"], ["y"], name="gelu", approximate=approx)], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(8, np.float32), "s"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])

    d = compare(model(1e-5), model(0.05)).first_divergence
    assert d["node_id"] == "ln" and d["cause"] == "computation"
    assert d["message"].endswith("; in the candidate attribute 'epsilon' 1e-05 -> 0.05")
    d = compare(model(1e-5), model(1e-5, "tanh")).first_divergence
    assert d["node_id"] == "gelu"
    assert d["message"].endswith("in the candidate attribute 'approximate' 'none' -> 'tanh'")



def _overflowing(hand_made: bool) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A float32 model whose MatMul reaches ~1.06e5 (beyond float16's 65504) and its float16
    copy: by to_fp16, or written by hand (float16 throughout)."""
    w = np.full((8, 8), 30000.0 / 8, np.float32)
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"),
             helper.make_node("Add", ["a", "one"], ["a1"], name="add"),
             helper.make_node("MatMul", ["a1", "w"], ["m"], name="mm"),
             helper.make_node("Div", ["m", "k"], ["d"], name="div"),
             helper.make_node("Tanh", ["d"], ["y"], name="tanh")]

    def build(np_dtype):
        inits = [numpy_helper.from_array(w.astype(np_dtype), "w"),
                 numpy_helper.from_array(np.array(3.0, np_dtype), "one"),
                 numpy_helper.from_array(np.array(1e5 if np_dtype == np.float32 else 6e4,
                                                  np_dtype), "k")]
        body = [*nodes]
        if np_dtype == np.float16:  # float32 at the interface, float16 inside
            body[0] = helper.make_node("Abs", ["x16"], ["a"], name="abs")
            body[-1] = helper.make_node("Tanh", ["d"], ["y16"], name="tanh")
            body = [helper.make_node("Cast", ["x"], ["x16"], to=onnx.TensorProto.FLOAT16),
                    *body, helper.make_node("Cast", ["y16"], ["y"], to=onnx.TensorProto.FLOAT)]
        return make_model(body, [vi("x", [1, 8])], [vi("y", [1, 8])], inits)

    ref = build(np.float32)
    if hand_made:
        return ref, build(np.float16)
    return ref, onnx_lab.to_fp16(onnx_lab.open(ref)).model.to_proto()


def test_an_fp16_overflow_is_named_on_the_divergence_line():
    # the divergence read "MatMul mm computes differently: its inputs agree, its output
    # differs (max_abs inf)"; only the non-finite line under it hinted at an overflow
    import onnxruntime as ort

    for hand_made in (False, True):
        ref, cand = _overflowing(hand_made)
        # the truth, from fresh sessions with m as an output: the reference's m is finite
        # beyond 65504, the candidate's inf
        x = {"x": np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)}
        got = []
        for m in (ref, cand):
            exposed = onnx.ModelProto()
            exposed.CopyFrom(m)
            exposed.graph.output.append(onnx.ValueInfoProto(name="m"))
            got.append(ort.InferenceSession(exposed.SerializeToString()).run(["m"], x)[0])
        assert np.isfinite(got[0]).all() and np.abs(got[0]).max() > 65504
        assert np.isinf(got[1]).all()
        c = compare(ref, cand)
        d = c.first_divergence
        assert d["node_id"] == "mm" and d["cause"] == "computation", d
        assert d["overflow"]["dtype"] == "float16" and d["overflow"]["inf_cand"] == 8
        assert d["overflow"]["max_ref"] > 65504
        assert "the candidate overflows float16 here" in d["message"], d["message"]
        assert "beyond float16's largest finite value 65504" in d["message"]
        assert "computes differently" not in d["message"]
        assert "overflows float16" in c.summary_text()


def test_inputs_read_in_another_order_are_named():
    # a Sub's, a MatMul's operands or a Concat's parts swapped were blamed "computes
    # differently: its inputs agree" with no word of the order
    def model(op: str, order: tuple[int, ...], const: bool = False) -> onnx.ModelProto:
        w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 8, "w")
        parts = ["a", "b", "c"] if op == "Concat" else ["a", "w" if const else "b"]
        nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                 helper.make_node("Neg", ["x"], ["b"], name="neg"),
                 helper.make_node("Sigmoid", ["x"], ["c"], name="sig"),
                 helper.make_node(op, [parts[i] for i in order], ["y"], name="op",
                                  **({"axis": 1} if op == "Concat" else {}))]
        return make_model(nodes, [vi("x", [4, 4])], [vi("y", None)], [w])

    for op, order, const, said in [
            ("Sub", (1, 0), False, "inputs 0 and 1 swapped ('a' and 'b')"),
            ("MatMul", (1, 0), False, "inputs 0 and 1 swapped ('a' and 'b')"),
            ("MatMul", (1, 0), True, "inputs 0 and 1 swapped ('a' and 'w')"),
            ("Concat", (1, 0, 2), False, "inputs 0 and 1 swapped ('a' and 'b')"),
            ("Concat", (2, 0, 1), False, "its inputs read in another order: the reference's "
             "[2, 0, 1]")]:
        ref = model(op, tuple(range(len(order))), const)
        cand = model(op, order, const)
        d = compare(ref, cand).first_divergence
        assert d["node_id"] == "op" and d["cause"] == "computation", d
        assert d["message"].endswith(f"; in the candidate {said}"), d["message"]
    # the same order: no divergence at all
    d = compare(model("Sub", (0, 1)), model("Sub", (0, 1))).first_divergence
    assert d is None


def test_swapped_inputs_are_not_an_unchanged_node_amplifying_its_inputs():
    # the same Sub with its operands swapped, under a MatMul whose weight moved by 1e-6: the
    # Sub was "unchanged in the candidate (same op, attributes and weights) ... amplifies"
    # its input's 4e-06, and blame went upstream to the MatMul
    def model(swap: bool, f: float) -> onnx.ModelProto:
        w = np.arange(16, dtype=np.float32).reshape(4, 4) / 8 * np.float32(f)
        nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
                 helper.make_node("Neg", ["x"], ["b"], name="neg"),
                 helper.make_node("Sub", ["b", "a"] if swap else ["a", "b"], ["y"], name="op")]
        return make_model(nodes, [vi("x", [4, 4])], [vi("y", None)],
                          [numpy_helper.from_array(w, "w")])

    d = compare(model(False, 1.0), model(True, 1 + 1e-6)).first_divergence
    assert d["node_id"] == "op" and d["cause"] == "computation", d
    assert "unchanged" not in d["message"] and "upstream" not in d
    assert d["message"].endswith("inputs 0 and 1 swapped ('a' and 'b')")


def test_an_output_of_another_shape_names_the_attribute_that_made_it():
    # a Transpose's perm or a Gather's axis changed: "its output has another shape, [8, 1, 4]
    # instead of [1, 8, 4]" with no word of the perm (the LSTM exports' Transposes, a Gather
    # of the last step)
    def model(perm, axis):
        idx = numpy_helper.from_array(np.array(0, np.int64), "i")
        return make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=perm),
                           helper.make_node("Gather", ["t", "i"], ["y"], name="g", axis=axis)],
                          [vi("x", [8, 1, 4])], [vi("y", None)], [idx])

    d = compare(model([1, 0, 2], 1), model([0, 1, 2], 1)).first_divergence
    assert d["node_id"] == "tr" and d["cause"] == "computation", d
    assert d["message"].endswith("its output has another shape, [8, 1, 4] instead of [1, 8, 4]"
                                 "; in the candidate attribute 'perm' (1, 0, 2) -> (0, 1, 2)"), \
        d["message"]
    d = compare(model([1, 0, 2], 1), model([1, 0, 2], 0)).first_divergence
    assert d["node_id"] == "g", d
    assert d["message"].endswith("; in the candidate attribute 'axis' 1 -> 0"), d["message"]


def test_a_cast_to_another_type_names_its_to_attribute():
    # the TorchScript CNN's int32 Cast made a bool one: the Cast after it was the divergence,
    # pointing upstream at the first Cast as "not the same quantity" with no word of 'to'
    import onnxruntime as ort

    def model(to: int) -> onnx.ModelProto:
        return make_model([helper.make_node("Cast", ["x"], ["c"], name="cast", to=to),
                           helper.make_node("Cast", ["c"], ["y"], name="back",
                                            to=onnx.TensorProto.FLOAT)],
                          [vi("x", [2, 3])], [vi("y", [2, 3])])

    ref, cand = model(onnx.TensorProto.INT32), model(onnx.TensorProto.BOOL)
    x = {"x": np.array([[0.0, 1.5, 2.0], [-3.0, 0.0, 4.0]], np.float32)}
    got = [ort.InferenceSession(m.SerializeToString()).run(None, x)[0] for m in (ref, cand)]
    assert not np.array_equal(*got)  # the truth: the outputs differ (2 against 1)
    d = compare(ref, cand, feeds=x).first_divergence
    assert d["upstream"] == ["cast"], d
    assert d["message"].endswith("(in the candidate attribute 'to' 'int32' -> 'bool')"), \
        d["message"]


def test_a_commutative_ops_operands_reordered_are_not_another_computation():
    # Min(a, 6) as Min(6, a) (a correct rewrite may pick either order) under an Add whose bias
    # moved by 0.05: the Min carries its input's error (the Add's, within its larger scale).
    # The reorder read "Min computes differently: its inputs agree ...; in the candidate
    # inputs 0 and 1 swapped" and the blame stayed on the Min, which computes the same
    def model(bias: float, swap: bool) -> onnx.ModelProto:
        nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
                 helper.make_node("Min", ["hi", "a"] if swap else ["a", "hi"], ["y"],
                                  name="op")]
        return make_model(nodes, [vi("x", [64])], [vi("y", [64])],
                          [numpy_helper.from_array(np.array(bias, np.float32), "b"),
                           numpy_helper.from_array(np.array(6, np.float32), "hi")])

    x = {"x": np.linspace(0, 60, 64, dtype=np.float32)}
    assert compare(model(0.0, False), model(0.0, True), feeds=x).first_divergence is None
    same = compare(model(0.0, False), model(0.05, False), feeds=x).first_divergence
    d = compare(model(0.0, False), model(0.05, True), feeds=x).first_divergence
    assert same["cause"] == "inputs"
    assert d["node_id"] == "op" and d["cause"] == "inputs", d
    assert "swapped" not in d["message"] and d["message"] == same["message"]
    # a Sub's operands swapped are still named (test_inputs_read_in_another_order_are_named)


def test_an_fp16_overflow_names_what_the_candidates_node_sets_otherwise():
    # a float16 LeakyRelu whose alpha went from 0.01 to 1e5: fresh sessions give 64 inf where
    # the reference holds values up to 0.1; the overflow line said only "its arithmetic
    # overflows on the way there", the changed attribute that causes it left unnamed
    def model(alpha: float) -> onnx.ModelProto:
        return make_model([helper.make_node("Neg", ["x"], ["n"], name="neg"),
                           helper.make_node("LeakyRelu", ["n"], ["y"], name="op", alpha=alpha)],
                          [vi("x", [64], onnx.TensorProto.FLOAT16)],
                          [vi("y", [64], onnx.TensorProto.FLOAT16)])

    x = {"x": np.linspace(1, 10, 64).astype(np.float16)}
    d = compare(model(0.01), model(1e5), feeds=x).first_divergence
    assert d["node_id"] == "op" and d["overflow"]["inf_cand"] == 64, d
    assert "overflows float16" in d["message"]
    assert d["message"].endswith("; in the candidate attribute 'alpha' 0.01 -> 100000"), d


def test_an_unnamed_upstream_root_is_not_matched_by_its_position():
    # unnamed nodes' ids come from their position: with an Identity removed before it, the
    # candidate's "Cast_2" is the other Cast, whose 'to' (float) is not the root's change
    def model(first_to: int, identities: int) -> onnx.ModelProto:
        names = ["x", *(f"i{k}" for k in range(identities))]
        nodes = [helper.make_node("Identity", [a], [b]) for a, b in zip(names, names[1:])]
        nodes += [helper.make_node("Cast", [names[-1]], ["c"], to=first_to),
                  helper.make_node("Cast", ["c"], ["y"], to=onnx.TensorProto.FLOAT)]
        return make_model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])

    x = {"x": np.array([[0.0, 1.5, 2.0], [3.0, 0.0, 4.0]], np.float32)}
    ref, cand = model(onnx.TensorProto.INT32, 2), model(onnx.TensorProto.BOOL, 1)
    assert onnx_lab.open(cand).model.index.node("Cast_2").attributes["to"].value == 1
    d = compare(ref, cand, feeds=x).first_divergence
    assert d["upstream"] == ["Cast_2"], d
    assert "'float'" not in d["message"] and "(in the candidate attribute" not in d["message"], d


def test_a_nan_attribute_on_both_sides_is_no_change():
    # an Imputer's replaced_value_float is NaN in both models: it was named as a change,
    # "'replaced_value_float' nan -> nan", beside the one that was
    import onnxruntime as ort

    def model(fill: float) -> onnx.ModelProto:
        return make_model([helper.make_node("Imputer", ["x"], ["y"], domain="ai.onnx.ml",
                                            imputed_value_floats=[fill, fill, fill],
                                            replaced_value_float=float("nan"), name="imp")],
                          [vi("x", [2, 3])], [vi("y", [2, 3])],
                          extra_opsets=[helper.make_opsetid("ai.onnx.ml", 1)])

    x = {"x": np.array([[np.nan, 1.0, 2.0], [3.0, np.nan, 4.0]], np.float32)}
    ref, cand = model(0.0), model(5.0)
    outs = [ort.InferenceSession(m.SerializeToString()).run(None, x)[0] for m in (ref, cand)]
    assert np.abs(outs[0] - outs[1]).max() == 5.0  # the truth: the fill changed
    d = compare(ref, cand, feeds=x).first_divergence
    assert d["node_id"] == "imp" and "imputed_value_floats" in d["message"], d
    assert "replaced_value_float" not in d["message"], d["message"]


def _clip_model(hi: float, opset: int = 17) -> onnx.ModelProto:
    # float16 throughout: x * 1e4 overflows to inf beyond |x| 6.55, the Clip's max (65504,
    # float16's largest finite value) saturates it, the Div scales it back
    f16 = onnx.TensorProto.FLOAT16
    attrs = {"min": -65504.0, "max": float(hi)} if opset < 11 else {}
    names = ["b"] if opset < 11 else ["b", "lo", "hi"]
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=f16),
             helper.make_node("Mul", ["x16", "big"], ["b"], name="mul"),
             helper.make_node("Clip", names, ["c"], name="clip", **attrs),
             helper.make_node("Div", ["c", "k"], ["s"], name="div"),
             helper.make_node("Cast", ["s"], ["y"], to=onnx.TensorProto.FLOAT)]
    values = [("big", 1e4), ("k", 1e4)] + ([("lo", -65504), ("hi", hi)] if opset >= 11 else [])
    inits = [numpy_helper.from_array(np.array(v, np.float16), n) for n, v in values]
    return make_model(nodes, [vi("x", [2, 4])], [vi("y", [2, 4])], inits, opset=opset)


def test_a_clip_at_float16s_max_that_became_inf_is_the_divergence():
    # The candidate's Clip max is inf instead of 65504. Its output holds inf where the
    # reference's holds 65504, which the metrics take for one overflow shown two ways (a
    # float16 Conv saturates at 65504 where another kernel gives inf: c6a595d) and pass; the
    # Div after it was blamed, 'its inputs agree'. In fresh sessions the Clip is the first
    # node whose output differs while its inputs agree.
    import onnxruntime as ort

    x = {"x": np.linspace(-20, 20, 8, dtype=np.float32).reshape(2, 4)}
    for opset, cause in ((17, "weights"), (10, "computation")):
        ref, cand = _clip_model(65504.0, opset), _clip_model(np.inf, opset)
        got = []
        for m in (ref, cand):  # the truth, in fresh sessions with every tensor exposed
            exposed = onnx.ModelProto()
            exposed.CopyFrom(m)
            for n in ("b", "c", "s"):
                exposed.graph.output.append(onnx.ValueInfoProto(name=n))
            got.append(dict(zip(["y", "b", "c", "s"], ort.InferenceSession(
                exposed.SerializeToString()).run(["y", "b", "c", "s"], x))))
        np.testing.assert_array_equal(got[0]["b"], got[1]["b"])  # the Clip's input agrees
        assert np.isfinite(got[0]["c"]).all() and (got[0]["c"] == 65504).sum() == 3
        assert np.isinf(got[1]["c"]).sum() == 3  # its output differs

        c = compare(ref, cand, feeds=x, confirm=True)
        assert not c.passed
        d = c.first_divergence
        assert d["node_id"] == "clip" and d["cause"] == cause, d
        assert d["confirmed"] is True, d  # fed the reference's inf, it gives inf, not 65504
        assert d["max_abs"] == np.inf
        assert "3 inf where the reference holds float16's largest finite value" in d["message"]
        assert "Div div after it" in d["message"]
        if cause == "weights":
            assert d["constant"] == "hi" and d["constant_max_abs"] == np.inf
        else:
            assert "attribute 'max' 65504 -> inf" in d["message"], d["message"]
        assert compare(ref, ref, feeds=x).passed  # the 65504s agree with themselves


def _pair(ref_node: onnx.NodeProto, cand_node: onnx.NodeProto, shape: list[int],
          opset: int, inits: tuple = ()) -> str:
    """What _attribute_changes says of ``cand_node`` against ``ref_node`` (both named "n",
    reading "x" of ``shape``)."""
    from onnx_lab.numerics._divergence import _attribute_changes

    def model(node: onnx.NodeProto):
        return onnx_lab.open(make_model([node], [vi("x", shape)], [vi("y", None)], inits,
                                        opset=opset)).model

    ref, cand = model(ref_node), model(cand_node)
    return _attribute_changes(ref.index.node("n"), cand, "n", ref)


def test_an_attribute_that_means_the_same_is_no_change():
    # onnxruntime writes Softmax's axis=1 into light ZFNet-512's opset 9 Softmax, which left
    # it out (the default there is 1): the divergence read "in the candidate attribute 'axis'
    # -1 -> 1", the latest schema's default against a value that means the same axis
    def node(op, **attrs):
        return helper.make_node(op, ["x"] + (["w"] if op == "Conv" else []), ["y"], name="n",
                                **attrs)

    assert _pair(node("Softmax"), node("Softmax", axis=1), [1, 1000], 9) == ""
    # the same axis counted from the end and from the start
    assert _pair(node("Softmax", axis=-1), node("Softmax", axis=1), [1, 1000], 13) == ""
    assert _pair(node("Flatten", axis=-1), node("Flatten", axis=2), [2, 3, 4], 13) == ""
    assert _pair(node("ReduceMean", axes=[-1, 0]), node("ReduceMean", axes=[0, 2]),
                 [2, 3, 4], 13) == ""
    # defaults that depend on the input, written out or left out
    assert _pair(node("Transpose"), node("Transpose", perm=[2, 1, 0]), [2, 3, 4], 13) == ""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    assert _pair(node("Conv"), node("Conv", pads=[0, 0, 0, 0], strides=[1, 1],
                                    dilations=[1, 1], kernel_shape=[3, 3], group=1),
                 [1, 3, 8, 8], 13, (w,)) == ""


def test_an_attribute_that_means_another_thing_is_still_named():
    def node(op, **attrs):
        return helper.make_node(op, ["x"] + (["w"] if op == "Conv" else []), ["y"], name="n",
                                **attrs)

    # axis -1 is 2 on a rank-3 input, not 1; the default of opset 13 is -1
    assert _pair(node("Softmax", axis=-1), node("Softmax", axis=1), [2, 3, 4], 13) == \
        "attribute 'axis' -1 -> 1"
    assert _pair(node("Softmax"), node("Softmax", axis=1), [2, 3, 4], 13) == \
        "attribute 'axis' -1 -> 1"
    assert _pair(node("Transpose"), node("Transpose", perm=[0, 2, 1]), [2, 3, 4], 13) == \
        "attribute 'perm' unset -> (0, 2, 1)"
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    assert _pair(node("Conv"), node("Conv", pads=[1, 1, 1, 1]), [1, 3, 8, 8], 13, (w,)) == \
        "attribute 'pads' unset -> (1, 1, 1, 1)"


def test_a_softmax_of_another_opset_is_named_by_its_opset_not_its_axis():
    # opset 9's Softmax (axis left out: 1) normalizes a rank-3 input over dims 1 and 2,
    # opset 13's Softmax(axis=1) over dim 1: the outputs differ (fresh sessions), and the
    # cause read "attribute 'axis' -1 -> 1", a value that did not change
    import onnxruntime as ort

    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32), "w")

    def model(opset, **attrs):
        return make_model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                           helper.make_node("Softmax", ["m"], ["y"], name="sm", **attrs)],
                          [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], [w], opset=opset)

    ref, cand = model(9), model(13, axis=1)
    x = {"x": np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)}
    outs = [ort.InferenceSession(m.SerializeToString()).run(None, x)[0] for m in (ref, cand)]
    assert np.abs(outs[0] - outs[1]).max() > 0.05  # the truth: they compute otherwise
    d = compare(ref, cand, feeds=x).first_divergence
    assert d["node_id"] == "sm" and d["cause"] == "computation", d
    assert "'axis'" not in d["message"], d["message"]
    assert d["message"].endswith(
        "; in the candidate opset 9 -> 13 ('Softmax' is defined anew in opset 13)"), d


def test_a_reshape_target_written_with_0_or_minus_1_is_no_weight_change():
    # [0, -1] and [2, 12] give a [2, 3, 4] input the same shape: no differing weight to
    # blame; [3, 8] is another shape, and is named
    from onnx_lab.numerics._divergence import _differing_weights

    def model(target):
        t = numpy_helper.from_array(np.array(target, np.int64), "t")
        return onnx_lab.open(make_model([helper.make_node("Reshape", ["x", "t"], ["y"],
                                                          name="n")],
                                        [vi("x", [2, 3, 4])], [vi("y", None)], [t])).model

    ref = model([0, -1])
    assert _differing_weights(ref.index.node("n"), model([2, 12]), "n", ref) is None
    assert _differing_weights(ref.index.node("n"), model([-1, 12]), "n", ref) is None
    got = _differing_weights(ref.index.node("n"), model([3, 8]), "n", ref)
    assert got is not None and got[0] == "t", got


def test_an_axis_on_inputs_of_another_rank_is_still_named(tmp_path):
    # the candidate flattens the input to [6, 4] and takes Softmax over axis -1 (the dim of
    # 4) where the reference took axis 1 of [2, 3, 4] (the dim of 3): each axis counted on
    # its own rank read 1, and the cause went unnamed
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)

    def model(cand):
        mid = ["Reshape", ["r0", "sh"]] if cand else ["Identity", ["r0"]]
        back = ["Reshape", ["s", "sh2"]] if cand else ["Identity", ["s"]]
        nodes = [helper.make_node("Relu", ["x"], ["r0"], name="relu"),
                 helper.make_node(mid[0], mid[1], ["r"], name="rs"),
                 helper.make_node("Softmax", ["r"], ["s"], name="sm", axis=-1 if cand else 1),
                 helper.make_node(back[0], back[1], ["s3"], name="rs2"),
                 helper.make_node("Neg", ["s3"], ["y"], name="neg")]
        inits = [numpy_helper.from_array(np.array(v, np.int64), k)
                 for k, v in (("sh", [6, 4]), ("sh2", [2, 3, 4]))] if cand else []
        g = helper.make_graph(nodes, "g", [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        path = tmp_path / ("b.onnx" if cand else "a.onnx")
        onnx.save(m, path)
        return path

    c = compare(model(False), model(True), feeds={"x": x})
    assert not c.passed
    assert "attribute 'axis' 1 -> -1" in c.first_divergence["message"]
