"""Names with ``$`` are drawn literally: matplotlib's mathtext never parses a model string."""

from __future__ import annotations

import io

import onnx
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.render.plots import _figure, literal

BAD = "$\\frac{}$ relu"  # not valid mathtext: parsed, it raises ValueError at draw time


def _model() -> onnx.ModelProto:
    n1 = helper.make_node("Relu", ["x"], ["$x^$"], name=BAD)
    n2 = helper.make_node("Relu", ["$x^$"], ["y"], name="r2 $a$b$")
    g = helper.make_graph([n1, n2], "g$",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _draw(fig) -> list[str]:
    fig.savefig(io.BytesIO(), format="png")
    return [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]


def test_profile_plot_shows_dollar_names_literally():
    lab = onnx_lab.open(_model())
    labels = _draw(lab.profile(runs=3, warmup=1).plot())
    assert literal(BAD) + " (Relu)" in labels and "r2 \\$a\\$b\\$ (Relu)" in labels


def test_titles_and_labels_escaped_but_log_ticks_keep_their_mathtext():
    fig = _figure()
    ax = fig.add_subplot()
    ax.semilogy([1, 2, 3], [1e-3, 1e-2, 1e-1], label=BAD)
    ax.set_title(BAD)
    ax.set_xlabel("cost $x^$")
    ax.legend()
    ticks = _draw(fig)
    assert ax.get_title() == literal(BAD) and ax.get_xlabel() == "cost \\$x^\\$"
    assert any("\\mathdefault" in t and "\\$" not in t for t in ticks)
    _draw(fig)  # a second draw escapes nothing twice
    assert ax.get_title() == literal(BAD)


def test_literal_escapes_each_dollar_once():
    assert literal("a $b$ \\$c") == "a \\$b\\$ \\$c"
    assert literal("no dollars") == "no dollars"
