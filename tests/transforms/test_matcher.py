"""The shared matcher: a declared pattern, a check with reasons, a rewrite per match."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from _passkit import assert_same_outputs, model_from_text, ops

from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import Match, Rewrite
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass, sole_reader


class NegPair(PatternPass):
    """Test pass (not registered): Neg(Neg(x)) is x."""

    name = "test_neg_pair"
    no_match_reason = "no Neg follows a Neg"
    pattern = Pattern("neg_pair", "Neg", producer="Neg", disjoint=True)

    def check(self, b: Binding) -> str | None:
        return sole_reader(b.model, b.value, b.root)

    def describe(self, b: Binding) -> Found:
        return Found(f"{b.producer_id} and {b.root_id} cancel", saving_nodes=2)

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        first, second = nodes
        second.replace_input_with(0, first.inputs[0])
        if rw.bypass(second):
            rw.remove(first)


class AddZero(PatternPass):
    """Test pass (not registered): x + 0 on either side, after a Relu."""

    name = "test_add_zero"
    pattern = Pattern("add_zero", "Add", producer="Relu", inputs=(0, 1), arity=2,
                      where=lambda b: const_array(b.other))

    def check(self, b: Binding) -> str | None:
        return None if not np.any(b.fit) else f"{b.root_id} adds a non-zero constant"

    def describe(self, b: Binding) -> Found:
        return Found(f"{b.root_id} adds zero", data={"side": b.input})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        rw.bypass(nodes[1], input_index=m.data["side"])


def test_pattern_matches_and_rewrites():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) {
        a = Neg(x)  b = Neg(a)  y = Relu(b) }""")
    p = NegPair()
    (match,) = p.find(m)
    assert (match.match_id, match.pattern, match.pass_name) == \
        ("test_neg_pair:Neg_0", "neg_pair", "test_neg_pair")
    assert match.node_ids == ["Neg_0", "Neg_1"] and match.anchor == "Neg_0"
    assert (match.description, match.saving_nodes, match.saving_bytes) == \
        ("Neg_0 and Neg_1 cancel", 2, 0)
    r = NegPair().run(m)
    assert r.modified and ops(r.model) == ["Relu"]
    assert sorted(r.removed) == ["Neg_0", "Neg_1"] and r.matches == ["test_neg_pair:Neg_0"]
    assert_same_outputs(m, r.model)


def test_check_rejection_reason_is_recorded():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        a = Neg(x)  y = Neg(a)  z = Relu(a) }""")
    p = NegPair()
    assert p.find(m) == []
    # The reason is given under the head of the chain (the producer).
    assert p.skipped == ["Neg_0: its output is also read by Relu_2"]
    r = NegPair().run(m)
    assert r.modified is False and r.reason == "Neg_0: its output is also read by Relu_2"


def test_rejections_become_notes_when_something_else_matched():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        a = Neg(x)  b = Neg(a)  c = Relu(a)  d = Neg(b)  e = Neg(d)  y = Relu(e)
        z = Relu(c) }""")
    r = NegPair().run(m)
    # Neg_0 is rejected (and stays free), so Neg_1 pairs with Neg_3; Neg_4 then finds its
    # producer taken.
    assert r.modified and r.matches == ["test_neg_pair:Neg_1"]
    assert r.notes == ["skipped Neg_0: its output is also read by Relu_2"]
    assert_same_outputs(m, r.model)


def test_no_op_case():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) { a = Neg(x)  y = Relu(a) }""")
    r = NegPair().run(m)
    assert r.modified is False and r.reason == "no Neg follows a Neg"
    assert r.model is m and r.provenance == {} and r.removed == []


def test_disjoint_chain_gives_one_pair():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) {
        a = Neg(x)  b = Neg(a)  c = Neg(b)  y = Relu(c) }""")
    assert [x.match_id for x in NegPair().find(m)] == ["test_neg_pair:Neg_0"]


def test_other_domains_are_not_matched():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) {
        a = Neg(x)  b = Neg(a)  y = Relu(b) }""")
    for node in m.ir.graph:
        if node.op_type == "Neg":
            node.domain = "custom"
    assert NegPair().find(m) == []


def test_where_tries_each_input_and_rejects_silently():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        r = Relu(x)  y = Add(zero, r)  s = Relu(x)  z = Add(s, x) }""",
                        {"zero": np.zeros((2, 3), np.float32)})
    p = AddZero()
    (match,) = p.find(m)
    # The Relu feeds input 1; the Add of two tensors is no candidate, so no reason is given.
    assert match.match_id == "test_add_zero:Relu_0" and match.data["side"] == 1
    assert p.skipped == []
    r = AddZero().run(m)
    assert ops(r.model) == ["Relu", "Relu", "Add"]
    assert_same_outputs(m, r.model)


def test_where_result_reaches_the_check():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) { r = Relu(x)  y = Add(r, one) }""",
                        {"one": np.ones((2, 3), np.float32)})
    r = AddZero().run(m)
    assert r.modified is False and r.reason == "Relu_0: Add_1 adds a non-zero constant"


# ---------------------------------------------------------------------------- chains
from onnx_lab.transforms.matcher import Step, consumer, producer_chain  # noqa: E402


class ReluChain(PatternPass):
    """Test pass (not registered): Exp ← Abs ← Neg → Relu read by one Sigmoid: a producer
    chain and a consumer, bound in data-flow order."""

    name = "test_relu_chain"
    pattern = Pattern("relu_chain", "Relu", producer="Neg", chain=(Step("Abs", 0),
                                                                     Step("Exp", 0)),
                      consumer="Sigmoid")

    def describe(self, b: Binding) -> Found:
        return Found(" → ".join(n.op_type for n in b.nodes))

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        raise NotImplementedError


def test_producer_chain_names_the_step_that_failed_and_what_it_found():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) {
        a = Exp(x)  b = Abs(a)  c = Neg(b)  d = Relu(c)  y = Sigmoid(d) }""")
    relu = next(e.node for e in m.index.entries.values() if e.node.op_type == "Relu")
    ok = producer_chain(relu, [Step("Neg", 0), Step("Abs", 0), Step("Exp", 0)])
    assert ok.ok and [n.op_type for n in ok.nodes] == ["Neg", "Abs", "Exp"]
    bad = producer_chain(relu, [Step("Neg", 0), ("Sqrt", 0)])
    assert not bad.ok and bad.step == 1 and bad.at.op_type == "Neg"
    assert bad.failed == "expected Sqrt before Neg, found Abs"
    assert [n.op_type for n in bad.nodes] == ["Neg"]
    reader, why = consumer(relu, "Sigmoid")
    assert reader.op_type == "Sigmoid" and why == ""
    none, why = consumer(relu, "Tanh")
    assert none is None and why == "no Tanh after Relu (found Sigmoid)"


def test_a_step_whose_input_is_picked_by_a_function_walks_any_op():
    # The mask path's walk: up through the input that is not a constant, whatever the op.
    m = model_from_text("""g (float[2,3] x, float[2,3] k) => (float[2,3] y) {
        one = Constant <value = float {1.0}> ()  a = Abs(x)  s = Sub(one, a)  c = Cast <to = 1> (s)
        y = Mul(c, k) }""")
    mul = next(e.node for e in m.index.entries.values() if e.node.op_type == "Mul")

    def first_variable(node):  # not a Constant node's output; None: stop
        for i, v in enumerate(node.inputs):
            p = v.producer() if v is not None else None
            if p is not None and p.op_type != "Constant":
                return i
        return None

    c = producer_chain(mul, [Step(None, first_variable)] * 8)
    assert [n.op_type for n in c.nodes] == ["Cast", "Sub", "Abs"]
    assert not c.ok and c.at.op_type == "Abs" and c.step == 3
    assert c.failed == "expected any before Abs, found nothing"


def test_pattern_binds_a_producer_chain_and_a_consumer():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        a = Exp(x)  b = Abs(a)  c = Neg(b)  d = Relu(c)  y = Sigmoid(d)
        e = Neg(x)  f = Relu(e)  z = Sigmoid(f) }""")
    found = ReluChain().find(m)
    # The second Relu has no Abs ← Exp above its Neg: not a candidate.
    assert len(found) == 1
    match = found[0]
    assert match.description == "Exp → Abs → Neg → Relu → Sigmoid"
    assert match.match_id == "test_relu_chain:Exp_0" and len(match.node_ids) == 5
    assert ReluChain.pattern.size == 5
