from __future__ import annotations

import numpy as np
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops

from onnx_lab.transforms.base import get_pass


@pytest.mark.parametrize("body,inits,pattern", [
    ("h = Transpose <perm=[0,1,2]> (x)", {}, "noop_transpose"),
    ("h = Reshape(x, s)", {"s": np.array([2, 3, 4])}, "noop_reshape"),
    ("h = Reshape(x, s)", {"s": np.array([0, -1, 4])}, "noop_reshape"),
    ("h = Cast <to=1> (x)", {}, "noop_cast"),
    ("h = Slice(x, st, en)", {"st": np.array([0, 0]), "en": np.array([2, 2**63 - 1])},
     "noop_slice"),
    ("h = Pad(x, p)", {"p": np.zeros(6, dtype=np.int64)}, "noop_pad"),
    ("h = Concat <axis=0> (x)", {}, "noop_concat"),
    ("h = Expand(x, s)", {"s": np.array([1, 4])}, "noop_expand"),
    ("h = Mul(one, x)", {"one": np.ones((1, 1), np.float32)}, "noop_arith"),
    ("h = Sub(x, z)", {"z": np.zeros(4, np.float32)}, "noop_arith"),
])
def test_noops(body, inits, pattern):
    text = f"""g (float[2,3,4] x) => (float[2,3,4] y) {{ {body}  y = Relu(h) }}"""
    m = model_from_text(text, inits)
    found = get_pass("eliminate_noop").find(m)
    assert [f.pattern for f in found] == [pattern]
    r = apply("eliminate_noop", m)
    assert ops(r.model) == ["Relu"]
    assert not r.model.ir.graph.initializers  # the unused constants went with the node
    assert_same_outputs(m, r.model)


@pytest.mark.parametrize("body,inits", [
    ("h = Transpose <perm=[0,2,1]> (x)", {}),
    ("h = Reshape(x, s)", {"s": np.array([6, 4])}),
    ("h = Cast <to=10> (x)", {}),
    ("h = Slice(x, st, en)", {"st": np.array([0]), "en": np.array([1])}),
    ("h = Mul(x, two)", {"two": np.full((1,), 2.0, np.float32)}),
    ("h = Add(x, z)", {"z": np.zeros((3, 2, 3, 4), np.float32)}),  # broadcasts to more
])
def test_not_noops(body, inits):
    m = model_from_text(f"""g (float[2,3,4] x) => (float y) {{ {body}  y = ReduceSum(h) }}""",
                        inits)
    r = apply("eliminate_noop", m)
    assert r.modified is False and r.reason == "no node returns its input unchanged"


def test_symbolic_reshape_noop_and_output_name():
    text = """g (float[N,3,4] x) => (float[N,3,4] y) { y = Reshape(x, s) }"""
    m = model_from_text(text, {"s": np.array([-1, 3, 4])})
    r = apply("eliminate_noop", m)
    # The Reshape maps the graph input straight to the output: it must stay.
    assert r.modified is False and "both names must survive" in r.reason
    text = """g (float[N,3,4] x) => (float[N,3,4] y) { h = Relu(x)  y = Reshape(h, s) }"""
    m = model_from_text(text, {"s": np.array([-1, 3, 4])})
    r = apply("eliminate_noop", m)
    assert ops(r.model) == ["Relu"] and r.model.ir.graph.outputs[0].name == "y"
    assert_same_outputs(m, r.model, dims={"N": 2})


def test_selective():
    text = """g (float[2,3] x) => (float[2,3] y) {
        a = Transpose <perm=[0,1]> (x)  b = Relu(a)  c = Cast <to=1> (b)  y = Neg(c) }"""
    m = model_from_text(text)
    found = get_pass("eliminate_noop").find(m)
    assert [f.match_id for f in found] == ["eliminate_noop:Transpose_0", "eliminate_noop:Cast_2"]
    r = apply("eliminate_noop", m, matches=["eliminate_noop:Cast_2"])
    assert ops(r.model) == ["Transpose", "Relu", "Neg"]
    assert_same_outputs(m, r.model)
