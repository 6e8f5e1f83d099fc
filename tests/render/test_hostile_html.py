"""Hostile models without a browser: the HTML onnx_lab builds from them holds no markup of
theirs, graphviz draws them, and the names still read as they are.

The same artifacts as ``tests/browser/test_hostile_browser.py`` (which also runs them in
Chromium), read here with the standard library's HTML tokenizer: an element with an
``on...`` handler, a ``javascript:`` link, an ``<img src=x>`` or a ``<b data-pwn>`` means a
payload of ``tests/hostile_models.py`` was written as markup.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser

import pytest
from hostile_artifacts import fragments
from hostile_models import NODE_NAMES, PAYLOADS, READABLE, exotic, hostile, known_injection

import onnx_lab


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.text: list[str] = []
        self.script = False

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k.startswith("on"):
                self.found.append(f"{tag}[{k}]")
            if k in ("href", "src", "xlink:href", "action") and v and \
                    v.strip().lower().startswith("javascript:"):
                self.found.append(f"{tag}[{k}=javascript:]")
        a = dict(attrs)
        if (tag == "img" and a.get("src") == "x") or (tag == "b" and "data-pwn" in a):
            self.found.append(tag)
        if tag == "script":
            t = (a.get("type") or "").lower()
            self.script = not t or "javascript" in t or t == "module"

    def handle_endtag(self, tag):
        if tag == "script":
            self.script = False

    def handle_data(self, data):
        if self.script and ("__pwned" in data or "onerror=" in data):
            self.found.append("script with a payload")
        self.text.append(data)


def _scan(html: str) -> _Markup:
    p = _Markup()
    p.feed(html)
    p.close()
    return p


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    return {name: fn() for name, fn in fragments().items()}


def test_no_payload_is_written_as_markup(built):
    for name, html in built.items():
        assert _scan(html).found == [], name


def test_notebook_outputs_are_not_typeset(built):
    """JupyterLab's MathJax typesets $...$ in HTML outputs (a name's \\href became a link
    reading "Conv"): every result's output is held in an element it skips, and onnx_lab's
    tables turn pandas' MathJax off. (The browser test sees it in JupyterLab.)"""
    import pandas as pd

    for name, html in built.items():
        if name.endswith(("_fallback", "details")) or name == "check":
            continue  # parts of an output, and a DataFrame's to_html
        assert html.startswith('<div class="mathjax_ignore">'), name
    onnx_lab.open(hostile()).nodes  # noqa: B018 - a table is built
    assert pd.get_option("display.html.use_mathjax") is False
    assert "mathjax_ignore" in onnx_lab.open(hostile()).tensors._repr_html_()
    # the widgets' static snapshots (nbconvert's page, untrusted notebooks) too
    from onnx_lab.widgets import Explorer

    snap = Explorer(onnx_lab.open(hostile()), tab="Nodes").snapshot_html()
    assert snap.startswith("<div class='onnx-lab-snapshot mathjax_ignore'")


def test_names_read_as_they_are(built):
    text = " ".join(" ".join(_scan(h).text) for h in built.values())
    for r in READABLE:
        assert r in text
    # The details panels show every node's name (cut to a panel's width, never mangled).
    details = " ".join(_scan(built["details"]).text)
    for n in NODE_NAMES:
        assert n[:40] in details, n


def test_a_known_injection_is_text_and_a_non_integer_source_line_is_no_line():
    lab = onnx_lab.open(known_injection())
    # A non-integer line is no line (it was pyarrow's ArrowInvalid in lab.nodes).
    import pandas as pd

    assert pd.isna(lab.nodes.loc[0, "source_line"])
    from onnx_lab.render.details import node_details, node_details_html

    html = node_details_html(node_details(lab.model, lab.nodes.node_id[0]))
    assert "onerror" not in html and "model.py:None" in html


@pytest.mark.parametrize("build", [hostile, exotic, known_injection])
def test_graphviz_draws_hostile_names_as_text(build):
    """The DOT path: quotes, backslashes, newlines, control characters and HTML-like text in
    ids, labels and tooltips neither break dot nor become markup in its SVG."""
    from onnx_lab.render.dot import find_dot

    if find_dot() is None:
        pytest.skip("graphviz dot is not installed")
    lab = onnx_lab.open(build())
    r = lab.render()
    assert r.svg is not None, r.notes
    scan = _scan(r.svg)
    assert scan.found == []
    assert not re.search(r"<(img|b|script|svg onload)[\s>]", r.svg.split("<svg", 1)[1][3:])
    # Every node is drawn with its id (the canvas maps clicks back through it).
    ids = set(re.findall(r'<g id="n:([^"]*)" class="node', r.svg))
    assert len(ids) >= len(lab.nodes), ids
    text = " ".join(scan.text)
    if build is hostile:
        assert any(n[:20] in text for n in NODE_NAMES)


def test_dot_quoting_round_trips_through_graphviz():
    """Names that end in a backslash, hold quotes, newlines or ``\\N``-like escapes stay one
    node each and keep their text."""
    from onnx import TensorProto, helper

    from onnx_lab.render.dot import find_dot

    if find_dot() is None:
        pytest.skip("graphviz dot is not installed")
    names = ["ends with \\", 'a "quoted" name', "two\nlines", "\\N \\G \\L", "<TABLE>", "]",
             "&lt;b&gt; &amp; &#65;", "cr\rhere"]
    nodes, prev = [], "x"
    for i, n in enumerate(names):
        nodes.append(helper.make_node("Relu", [prev], [f"t{i}"], name=n))
        prev = f"t{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                          ir_version=8))
    r = lab.render()
    assert r.svg is not None, r.notes
    import html

    ids = [html.unescape(x) for x in re.findall(r'<g id="n:([^"]*)" class="node onnx(?:&#45;|-)op"',
                                                 r.svg)]
    assert sorted(ids) == sorted(lab.nodes.node_id), ids
    assert "&lt;TABLE&gt;" in r.svg and "<TABLE>" not in r.svg


def test_payloads_cover_every_context():
    joined = "".join(PAYLOADS)
    for needle in ("<img", "</script>", '">', "'>", "javascript:", "{{", "${", "\\", "\n",
                   "\x01", "\u202e", "$"):
        assert needle in joined, needle
    assert max(len(p) for p in PAYLOADS) > 2000


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs graphviz dot")
def test_a_name_too_long_for_graphviz_is_drawn_cut_and_maps_back():
    # graphviz refuses strings over ~16,000 characters: one node named with 17,000 left
    # every drawing of the model empty (render, report, Explorer, DiffView)
    import onnx

    from onnx_lab.render._html import dot_safe
    from onnx_lab.widgets.canvas import GraphCanvas

    h = onnx.helper
    long = "N" * 17_000 + "&<x>"
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name=long)], "g",
                     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    lab = onnx_lab.open(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    r = lab.render()
    assert r.svg is not None and "…#" in r.svg
    cut = dot_safe(long)
    assert len(cut) <= 2000 and cut != dot_safe("N" * 17_000 + "&<y>")
    canvas = GraphCanvas()
    canvas.show(r)
    assert canvas._drawn(cut) == long


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs graphviz dot")
def test_names_that_differ_only_by_a_control_character_are_two_drawn_nodes():
    # "n\x01" is drawn as "n␁" (graphviz reads C strings): a second node named "n␁" was the
    # same DOT node, so the drawing showed one of the two (the Relu was gone)
    import re

    import onnx

    from onnx_lab.widgets.canvas import GraphCanvas

    h, F = onnx.helper, onnx.TensorProto.FLOAT
    g = h.make_graph([h.make_node("Relu", ["x"], ["a\x01"], name="n\x01"),
                      h.make_node("Neg", ["x"], ["a\u2401"], name="n\u2401"),
                      h.make_node("Add", ["a\x01", "a\u2401"], ["y"], name="add")], "g",
                     [h.make_tensor_value_info("x", F, [2])], [h.make_tensor_value_info("y", F, [2])])
    lab = onnx_lab.open(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    r = lab.render()
    assert r.svg is not None and ">Relu<" in r.svg and ">Neg<" in r.svg
    ids = re.findall(r'<g id="n:([^"]*)" class="node', r.svg)
    assert len(ids) == len(set(ids)) == 5  # x, the two nodes, add, y
    canvas = GraphCanvas()
    canvas.show(r)
    assert {canvas._drawn(i) for i in ids} >= {"n\x01", "n\u2401", "add"}


def test_a_short_name_written_as_a_long_names_cut_form_is_its_own_drawn_node():
    # a long name is drawn as its start, '…#' and a hash of the whole: a second node named
    # with exactly that text (its author knows the hash) was the same DOT node
    import re

    import onnx

    from onnx_lab.render._html import dot_safe

    long = "L" * 5_000
    forged = dot_safe(long)
    assert len(forged) <= 2000 and dot_safe(forged) != forged
    h, F = onnx.helper, onnx.TensorProto.FLOAT
    g = h.make_graph([h.make_node("Relu", ["x"], ["a"], name=long),
                      h.make_node("Neg", ["x"], ["b"], name=forged),
                      h.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
                     [h.make_tensor_value_info("x", F, [2])], [h.make_tensor_value_info("y", F, [2])])
    r = onnx_lab.open(h.make_model(g, opset_imports=[h.make_opsetid("", 17)])).render()
    assert r.svg is not None and ">Relu<" in r.svg and ">Neg<" in r.svg
    ids = re.findall(r'<g id="n:([^"]*)" class="node', r.svg)
    assert len(ids) == len(set(ids)) == 5
    # a plain name is its own id; one with a picture or the mark is shown with a hash
    assert dot_safe("conv/Relu_1") == "conv/Relu_1"
    assert re.fullmatch("n\u2400…#[0-9a-f]{24}", dot_safe("n\x00"))

@pytest.mark.skipif(shutil.which("dot") is None, reason="needs graphviz dot")
def test_a_name_that_escaping_lengthens_is_still_drawn():
    # the cut came once more after escaping and could end inside an entity ("&l…"): a node
    # named "<" * 700 (2,800 characters escaped) emptied the drawing
    import onnx

    h = onnx.helper
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="<" * 700)], "g",
                     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    assert onnx_lab.open(h.make_model(g, opset_imports=[h.make_opsetid("", 17)])).render().svg


def test_a_panel_cuts_the_model_strings_it_shows():
    # a 1 MB node name, input and attribute value made a 4.2 MB side panel (the id, the
    # tensors' tooltips, the where line); only the id attribute keeps the whole key
    from onnx import TensorProto, helper

    from onnx_lab.render.details import node_details, node_details_html

    big = "n" * 1_000_000
    g = helper.make_graph(
        [helper.make_node("Relu", ["x" + big], ["y"], name=big),
         helper.make_node("Cast", ["y"], ["z"], name="c", to=TensorProto.FLOAT,
                          doc_string="")],
        "g", [helper.make_tensor_value_info("x" + big, TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    g.node[1].attribute.append(helper.make_attribute("note", "v" * 1_000_000))
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    html = node_details_html(node_details(lab.model, big))
    assert len(html) < 1_050_000 and html.count(big) == 1  # the data-node-id only
    assert len(node_details_html(node_details(lab.model, "c"))) < 20_000
