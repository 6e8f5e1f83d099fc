"""The LayerNorm and Gelu near-miss checks (onnx_lab.transforms.near_miss), condition by
condition, against what onnxruntime's transformer optimizer really fuses.

Each model is the subgraph alone, written in ONNX text: the correct form must be fused by
``ort_transformers`` and never listed as a near-miss; each broken form (one condition changed on
purpose) must stay unfused and be listed with a reason naming that condition and the value
found.
"""

from __future__ import annotations

import re

import onnx
import onnx.parser
import pytest

import onnx_lab
from onnx_lab.errors import PassError
from onnx_lab.transforms.near_miss import COLUMNS, transformer_near_misses

H = 16


def _model(body: str, consts: str, shape: str = f"2, 8, {H}") -> onnx.ModelProto:
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[{shape}] x) => (float[{shape}] y)
<{consts}>
{{
{body}
}}"""
    m = onnx.parser.parse_model(text)
    onnx.checker.check_model(m, full_check=True)
    return m


def _vec(value: float) -> str:
    return "{" + ",".join([str(value)] * H) + "}"


def layer_norm(*, pow_exp: float = 2.0, eps: float = 1e-5, eps_after_sqrt: bool = False,
               square_by_mul: bool = False, axis: int = -1, shape: str = f"2, 8, {H}"
               ) -> onnx.ModelProto:
    """x → ReduceMean → Sub → Pow(2) → ReduceMean → Add(ε) → Sqrt → Div → Mul(γ) → Add(β),
    with one condition changed on request."""
    square = "sq = Mul(d, d)" if square_by_mul else "sq = Pow(d, p)"
    power = "" if square_by_mul else f"float p = {{{pow_exp}}}, "
    if eps_after_sqrt:
        std = "s0 = Sqrt(var)\n std = Add(s0, eps)"
    else:
        std = "ve = Add(var, eps)\n std = Sqrt(ve)"
    body = f"""
 mean = ReduceMean <axes=[{axis}]> (x)
 d = Sub(x, mean)
 {square}
 var = ReduceMean <axes=[{axis}]> (sq)
 {std}
 n = Div(d, std)
 s = Mul(n, gamma)
 y = Add(s, beta)"""
    consts = (f"float eps = {{{eps}}}, {power}float[{H}] gamma = {_vec(1.5)}, "
              f"float[{H}] beta = {_vec(0.25)}")
    return _model(body, consts, shape)


def gelu(*, divisor: float = 1.4142135, one: float = 1.0, half: float = 0.5,
         arrangement: str = "x_then_half") -> onnx.ModelProto:
    """Relu → x / √2 → Erf → Add(1) → the x and 0.5 products in one of the three
    arrangements onnxruntime's FusionGelu accepts, with one constant changed on request.

    The Relu is there because the Keras arrangement is fused only below a node (the
    optimizer's ``get_parent(div, 0)``), not on a graph input.
    """
    tail = {
        "x_then_half": "m = Mul(r, a)\n y = Mul(m, h)",     # x·(1+erf) · 0.5 (PyTorch)
        "half_x": "xh = Mul(r, h)\n y = Mul(xh, a)",         # (0.5·x)·(1+erf)
        "half_then_x": "m = Mul(a, h)\n y = Mul(m, r)",      # (1+erf)·0.5 · x (Keras)
    }[arrangement]
    body = f"""
 r = Relu(x)
 t = Div(r, s2)
 e = Erf(t)
 a = Add(e, one)
 {tail}"""
    return _model(body, f"float s2 = {{{divisor}}}, float one = {{{one}}}, float h = {{{half}}}")


def _tool_rows(df):
    return df.loc[df.kind == "tool"]


# ---------------------------------------------------------------------------- correct forms
@pytest.mark.parametrize("model, fused", [
    (layer_norm(), "LayerNormalization"),
    (gelu(), "Gelu"),
    (gelu(arrangement="half_x"), "Gelu"),
    (gelu(arrangement="half_then_x"), "Gelu"),
], ids=["layer_norm", "gelu", "gelu_half_x", "gelu_half_then_x"])
def test_correct_forms_are_fused_and_never_near_misses(model, fused):
    lab = onnx_lab.open(model)
    assert _tool_rows(lab.patterns(near_misses=True)).empty
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.fusions == {fused: 1}
    assert r.verify_passed, r.verification.loc[~r.verification.passed]
    assert list(lab.nodes.op_type) == ([fused] if fused != "Gelu" else ["Relu", fused])
    assert r.near_misses.empty


# ---------------------------------------------------------------------------- broken forms
BROKEN = [
    ("ln_pow3", layer_norm(pow_exp=3.0), "LayerNormalization",
     "variance: Pow exponent is 3 (Pow_2), the optimizer needs 2"),
    ("ln_eps_after_sqrt", layer_norm(eps_after_sqrt=True), "LayerNormalization",
     "epsilon in a different place: the variance ReduceMean ReduceMean_3 is followed by Sqrt, "
     "the optimizer expects Add(epsilon) → Sqrt: epsilon is added after the Sqrt (Add_5 adds "
     "1e-05 to the standard deviation), not to the variance before it"),
    ("ln_eps_too_large", layer_norm(eps=1e-3), "LayerNormalization",
     "epsilon is 0.001 (Add_4); the optimizer fuses only 0 < epsilon ≤ 0.0001"),
    ("gelu_divisor", gelu(divisor=1.5), "Gelu",
     "Erf's input is divided by 1.5 (Div_1); the exact Gelu divides x by √2 ≈ 1.4142 (the "
     "optimizer allows ±0.001)"),
    ("gelu_add_two", gelu(one=2.0), "Gelu", "erf(x/√2) + 2 (Add_3): the exact Gelu adds 1"),
    ("gelu_half", gelu(half=0.6), "Gelu",
     "the product is multiplied by 0.6 (Mul_5); the exact Gelu multiplies by 0.5"),
    ("gelu_half_x_half", gelu(half=0.6, arrangement="half_x"), "Gelu",
     "the product is multiplied by 0.6 (Mul_4); the exact Gelu multiplies by 0.5"),
]


@pytest.mark.parametrize("model, fusion, reason", [b[1:] for b in BROKEN],
                         ids=[b[0] for b in BROKEN])
def test_one_broken_condition_is_a_near_miss_naming_it(model, fusion, reason):
    lab = onnx_lab.open(model)
    anchor = "ReduceMean_0" if fusion == "LayerNormalization" else "Erf_2"
    # Before any step: a candidate that cannot fuse, with the condition.
    df = lab.patterns(near_misses=True)
    assert list(df.columns) == COLUMNS
    rows = _tool_rows(df)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row.source, row.fusion, row.anchor, row.reason) == (
        "ort_transformers", fusion, anchor, reason)
    assert row.description == f"{fusion} not fused at {anchor}: {reason}"
    named = [nid for nid in lab.index.entries if re.search(rf"\b{nid}\b", reason)]
    assert named and {anchor, *named} <= set(row.node_ids)  # lab.render(nodes=...) shows them
    # onnxruntime agrees: the step fuses nothing and names the same condition.
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.modified is False and r.fusions == {}
    assert list(r.near_misses.reason) == [reason]
    assert reason in r.reason
    assert r.nodes_after == r.nodes_before == len(lab.index)


def test_layer_norm_squared_by_mul_crashes_onnxruntime_and_names_the_switch():
    # d·d instead of Pow(d, 2): our check names it, and onnxruntime's
    # FusionSimplifiedLayerNormalization (run for model_type bert too) raises a TypeError on
    # it (onnxruntime 1.32: ``reduce_mean_parent[0]`` on a NodeProto). The step says which
    # fusion failed and the switch that avoids it.
    lab = onnx_lab.open(layer_norm(square_by_mul=True))
    rows = _tool_rows(lab.patterns(near_misses=True))
    assert list(rows.reason) == [
        "variance: the centred input is squared by Mul(d, d) (Mul_2); the optimizer's "
        "LayerNorm fusion matches Pow(d, 2) only"]
    try:
        r = lab.apply("ort_transformers", model_type="bert")
    except PassError as e:  # the onnxruntime bug
        assert "failed in FusionSimplifiedLayerNormalization: TypeError" in e.problem
        assert "disable=['layer_norm']" in e.fix
        r = lab.apply("ort_transformers", model_type="bert", disable=["layer_norm"])
    assert r.modified is False and r.fusions == {}
    assert list(r.near_misses.reason) == list(rows.reason)


def test_layer_norm_over_another_axis_is_fused_by_onnxruntime_and_caught_by_verification():
    # onnxruntime's FusionLayerNormalization never looks at the ReduceMean axes: a
    # normalization over axis 1 becomes a LayerNormalization over the last axis. Not a
    # near-miss (the optimizer does fuse it): a wrong fusion, which verification reports.
    lab = onnx_lab.open(layer_norm(axis=1, shape=f"2, {H}, {H}"))
    assert _tool_rows(lab.patterns(near_misses=True)).empty
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.fusions == {"LayerNormalization": 1}
    assert r.verify_passed is False and r.first_failure == "y"
    assert r.max_abs_err > 0.1


def test_transformer_near_misses_on_a_model_without_candidates_is_an_empty_table():
    df = transformer_near_misses(onnx_lab.open("sample:convnet").model)
    assert df.empty and list(df.columns) == COLUMNS
