"""write_report / lab.report / onnx-lab report and the side-by-side diff page (headless).

The page itself is exercised in Chromium by tests/browser/test_report_browser.py; here the
file's content: self-contained (no URL to load), the payload's views, panels and tables,
the sections asked for, a failing section as a note, a model too large to draw whole.
"""

from __future__ import annotations

import base64
import gzip
import json
import re

import numpy as np
import onnx
import pytest
from numerics_helpers import convnet, fuse_stem_bn
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.errors import LabError
from onnx_lab.render.report import canvas_payload
from onnx_lab.reporting import diff_report_html, report_html, report_results, write_report


def payload(text: str) -> dict:
    m = re.search(r"id='olr-data'>([^<]*)</script>", text)
    assert m, "no payload"
    return json.loads(gzip.decompress(base64.b64decode(m.group(1))))


def external_refs(text: str) -> list[str]:
    """Every src/href/url() of the page that would load something (anchors excluded)."""
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", text)
    refs += re.findall(r"url\(([^)]+)\)", text)
    refs += re.findall(r"<link\b[^>]*>", text)
    return [r for r in refs if not r.startswith(("#", "data:"))]


def test_report_is_one_self_contained_file(tmp_path):
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("fuse_conv_bn")
    assert r.modified
    out = lab.report(tmp_path / "convnet.html")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert external_refs(text) == []
    assert "import(" not in text and "fetch(" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    for sid in ("summary", "graph", "check", "cost", "nodes", "initializers", "tensors",
                "history"):
        assert f"<section id='{sid}'" in text, sid
    assert "could not be built" not in text
    data = payload(text)
    main_canvas = data["canvases"]["main"]
    assert main_canvas["views"][""]["svg"].lstrip().startswith(("<?xml", "<svg", "<!--"))
    # Every node drawn on its own has a side panel with its attributes.
    conv = next(n for n in lab.nodes.itertuples() if n.op_type == "Conv")
    assert conv.node_id in main_canvas["where"]
    assert "attributes" in main_canvas["details"][conv.node_id]
    assert "kernel_shape" in main_canvas["details"][conv.node_id]
    assert len(data["tables"]["nodes"]["rows"]) == len(lab.nodes)
    assert data["tables"]["nodes"]["key"] == "node_id"
    # The history with the step's verification report.
    hist = data["tables"]["history"]
    assert len(hist["rows"]) == 2 and "fuse_conv_bn" in json.dumps(hist["rows"])
    assert "verification_1" in data["tables"]
    assert "step 1: fuse_conv_bn — verification passed" in text



def test_a_long_dim_is_not_copied_into_every_row_and_panel(tmp_path):
    # One 100 KB dim_param, 300 tensors of a Relu chain: the tensors table, every node's
    # panel and every view's legend spelled it out in full (a 250 KB file's report took
    # 1.5 GB and 20 s at 2,000 tensors of a 200 KB dim).
    big = "D" * 100_000
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(300)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [big, 4])],
        [helper.make_tensor_value_info("t300", TensorProto.FLOAT, None)])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    text = lab.report(tmp_path / "r.html").read_text(encoding="utf-8")
    raw = json.dumps(payload(text))
    assert len(raw) < 4_000_000, len(raw)  # (it was 93 MB)
    rows = payload(text)["tables"]["tensors"]["rows"]
    assert all(len(str(c)) < 1000 for r in rows for c in r)

def test_sections_only_when_asked(tmp_path):
    text = report_html("sample:convnet", tables=False, cost=False)
    for sid in ("nodes", "tensors", "cost", "history", "profile", "comparison", "diff"):
        assert f"<section id='{sid}'" not in text, sid
    assert "<section id='graph'" in text


def _custom_op_model() -> onnx.ModelProto:
    """A valid model onnxruntime cannot run: an op of an unknown custom domain."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Frobnicate", ["r"], ["y"], name="frob", domain="com.example")]
    g = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.example", 1)])


def test_failing_section_is_a_note_never_a_missing_file(tmp_path):
    out = write_report(_custom_op_model(), tmp_path / "custom.html", profile=True)
    text = out.read_text(encoding="utf-8")
    assert "<section id='profile'" in text
    section = text.split("<section id='profile'", 1)[1].split("</section>", 1)[0]
    assert "Profile could not be built" in section and "olr-failed" in section
    # The rest of the report is there: the graph shows the custom node.
    data = payload(text)
    assert "frob" in data["canvases"]["main"]["where"]
    assert "Frobnicate" in data["canvases"]["main"]["details"]["frob"]


def test_profile_section_on_a_model_that_runs(tmp_path):
    text = report_html("sample:convnet", profile={"runs": 3, "warmup": 1}, tables=False)
    section = text.split("<section id='profile'", 1)[1].split("</section>", 1)[0]
    assert "could not be built" not in section and "latency" in section


def _long_chain(n: int) -> onnx.ModelProto:
    """``n`` unscoped nodes (no name scopes): collapse falls back to blocks or chunks."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    inits = [onnx.numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "c")]
    nodes, cur = [], "x"
    for i in range(n):
        op = "Relu" if i % 3 == 0 else ("Add" if i % 3 == 1 else "Neg")
        ins = [cur, "c"] if op == "Add" else [cur]
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node(op, ins, [out], name=f"n{i}"))
        cur = out
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow
def test_model_too_large_to_draw_whole_gets_a_collapsed_overview(tmp_path):
    out = write_report(_long_chain(3000), tmp_path / "big.html", max_views=12, budget_s=60,
                       tables=False, cost=False, check=False)
    text = out.read_text(encoding="utf-8")
    data = payload(text)
    views = data["canvases"]["main"]["views"]
    assert views[""]["boxes"], "the overview is collapsed"
    assert views[""]["svg"]
    assert len(views) <= 12
    assert "drawn as a collapsed overview" in text
    assert "were not pre-drawn" in text  # the budget is said, not silently dropped


def test_search_index_holds_every_node_and_where_each_is_drawn():
    """The page's search reads every node (also those only drawn in a box's view)."""
    lab = onnx_lab.open("sample:transformer_block")
    p = canvas_payload(lab, overview_nodes=4)
    ix = p["index"]
    assert sorted(ix["ids"]) == sorted(lab.index.entries)
    assert len(ix["text"]) == len(ix["label"]) == len(ix["ids"])
    hidden = [n for n in ix["ids"] if p["where"].get(n, [""])[0] != ""]
    assert hidden and all(p["where"][n][0] in p["views"] for n in hidden)


def test_a_node_whose_view_was_not_pre_drawn_has_a_place_and_a_panel():
    """Every node no pre-drawn view draws as itself (the view budget) is in ``undrawn`` with
    the element of the deepest drawn view that holds it (a box whose own view is missing,
    or the If/Loop whose body was not drawn, nested bodies included) and has its panel."""
    lab = onnx_lab.open("sample:transformer_block")
    p = canvas_payload(lab, overview_nodes=4, max_views=2)
    held = {n: u for u in p["undrawn"] for n in u[4]}
    assert held and not set(held) & set(p["where"])
    assert set(held) | set(p["where"]) == set(lab.index.entries)
    for n, (vk, key, text, note, _) in held.items():
        box = p["views"][vk]["boxes"][key]
        assert key in p["views"][vk]["items"] and box not in p["views"]
        assert text == f"in {key[len('scope:'):]} (not drawn)"
        assert "max_views=2" in note and "explore()" in note
        assert f"data-node-id='{n}'" in p["details"][n]
    assert all("members" not in v for v in p["views"].values())

    flow = onnx_lab.open("sample:control_flow")
    p = canvas_payload(flow, max_views=1)  # the overview only: no body drawn
    held = {n: u[:3] for u in p["undrawn"] for n in u[4]}
    assert held["If_2/then_branch/Mul_0"] == ["", "If_2", "in body of If_2 (not drawn)"]
    # inner_if is in Loop_3's body: its own body's nodes show at Loop_3 too
    assert held["Loop_3/body/inner_if/then_branch/Add_0"] == [
        "", "Loop_3", "in body of inner_if (not drawn)"]
    assert set(held) | set(p["where"]) == set(flow.index.entries)
    assert all(n in p["details"] for n in held)


def test_small_model_is_drawn_whole_without_boxes():
    p = canvas_payload("sample:convnet")
    assert list(p["views"]) == [""] and not p["views"][""]["boxes"]
    assert not p["notes"]


@pytest.mark.slow
def test_against_adds_comparison_and_side_by_side_diff(tmp_path):
    lab = onnx_lab.open("sample:convnet")
    before = tmp_path / "before.onnx"
    lab.save(before)
    lab.apply("fuse_conv_bn")
    text = report_html(lab, against=str(before), tables=False)
    for sid in ("comparison", "diff"):
        assert f"<section id='{sid}'" in text, sid
    cmp = text.split("<section id='comparison'", 1)[1].split("</section>", 1)[0]
    assert "could not be built" not in cmp
    data = payload(text)
    d = data["diffs"]["diff"]
    # this model (fused) is A, the file before the fusion is B: the BN exists only in B.
    bn = "/stem/bn/BatchNormalization"
    assert d["b2a"][bn] == ["/stem/conv/Conv"], "the BN links to the Conv it was fused into"
    assert "fused into &#x27;/stem/conv/Conv&#x27; in a" in d["b"]["details"][bn]
    assert bn in d["a2b"]["/stem/conv/Conv"]


def test_diff_page_links_fused_conv_to_its_originals(tmp_path):
    ref = convnet()
    fused = fuse_stem_bn(ref, keep_conv_name=False)
    for n in fused.graph.node:
        if n.op_type == "Conv" and "stem" in n.name:
            n.name = "fused_conv"
    text = diff_report_html(ref, fused)
    assert external_refs(text) == []
    d = payload(text)["diffs"]["diff"]
    assert sorted(d["b2a"]["fused_conv"]) == ["/stem/bn/BatchNormalization", "/stem/conv/Conv"]
    assert d["a2b"]["/stem/bn/BatchNormalization"] == ["fused_conv"]
    panel = d["b"]["details"]["fused_conv"]
    assert "changed" in panel and "provenance" in panel and "data-olr-node" in panel
    # Removed in red, changed in orange on the drawings.
    assert "red" in d["a"]["views"][""]["svg"] or "#cf222e" in d["a"]["views"][""]["svg"]


def test_identical_models_diff_page_has_no_false_alarm():
    text = diff_report_html("sample:convnet", "sample:convnet")
    assert ">0 added<" in text and ">0 removed<" in text and ">0 changed<" in text
    d = payload(text)["diffs"]["diff"]
    assert all(len(v) == 1 and v[0] == k for k, v in d["a2b"].items())
    assert not d["b"]["details"] or all("unchanged" in d["b"]["details"][k]
                                        for k in d["b"]["where"])


def test_cli_report_and_diff_html(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "sample:convnet", "-o", str(out), "--no-tables"]) == 0
    assert out.exists() and "MB" in capsys.readouterr().out
    a = tmp_path / "a.onnx"
    onnx_lab.open("sample:convnet").save(a)
    lab = onnx_lab.open(a)
    lab.apply("fuse_conv_bn")
    b = lab.save(tmp_path / "b.onnx")
    page = tmp_path / "d.html"
    assert main(["diff", str(a), str(b), "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "olr-diff" in text and external_refs(text) == []


def test_cli_report_names_the_sections_it_could_not_build(tmp_path, capsys):
    # A dynamic-batch model without --dims: the file is written (exit 0) with notes in place
    # of cost and profile; the command says which, with the flags that fix them, instead of
    # only the file's size.
    out = tmp_path / "r.html"
    assert main(["report", "sample:transformer_block", "-o", str(out), "--no-tables",
                 "--profile", "--runs", "2"]) == 0
    cap = capsys.readouterr()
    assert out.exists() and "MB" in cap.out
    notes = [line for line in cap.err.splitlines() if line.startswith("note: ")]
    assert [line.split()[1] for line in notes] == ["cost", "profile"], cap.err
    assert all("Pass --dims batch=1 --dims seq=1" in line and "dims={" not in line
               for line in notes), notes
    assert main(["report", "sample:transformer_block", "-o", str(out), "--no-tables",
                 "--dims", "batch=1", "--dims", "seq=4"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_report_results_failures_lists_the_failed_sections_in_page_order():
    res = report_results("sample:transformer_block", tables=False, graph=False, profile=True,
                         against="sample:transformer_block")
    assert [name for name, _ in res.failures()] == ["cost", "profile", "comparison"]
    assert all(isinstance(e, LabError) for _, e in res.failures())
    assert report_results("sample:convnet", tables=False, graph=False).failures() == []


def test_unwritable_path_is_a_save_error(tmp_path):
    from onnx_lab.errors import SaveError

    with pytest.raises(SaveError, match="Cannot write"):
        write_report("sample:convnet", tmp_path / "missing" / "r.html", tables=False)


def test_bodies_are_views_of_their_own():
    p = canvas_payload("sample:control_flow")
    bodies = [k for k in p["views"] if k.startswith("graph:")]
    assert "graph:If_2/then_branch" in bodies and "graph:Loop_3/body" in bodies
    assert all(p["views"][k]["svg"] for k in bodies)
    # The If node's panel offers its bodies (the page opens the matching view).
    assert "data-body='If_2/then_branch'" in p["details"]["If_2"]
    # The page's search index holds every node, the bodies' too, each drawn in some view.
    import onnx_lab

    ids = list(onnx_lab.open("sample:control_flow").index.entries)
    assert p["index"]["ids"] == ids and len(p["index"]["text"]) == len(ids)
    assert all(p["where"][n][0] in p["views"] for n in ids if n in p["where"])
    assert any(p["where"][n][0].startswith("graph:") for n in ids if n in p["where"])


def test_precision_plan_section():
    text = report_html("sample:convnet", precision="fp16", tables=False, graph=False)
    section = text.split("<section id='precision'", 1)[1].split("</section>", 1)[0]
    assert "could not be built" not in section
    assert "fp16:" in section and "nodes kept in float32" in section


def test_without_graphviz_the_report_still_has_everything_else(tmp_path, monkeypatch):
    from onnx_lab.render import dot

    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on PATH
    dot.clear_cache()  # earlier tests laid the same views out
    out = write_report("sample:convnet", tmp_path / "nodot.html")
    data = payload(out.read_text(encoding="utf-8"))
    view = data["canvases"]["main"]["views"][""]
    assert view["svg"] == "" and view["fallback"].startswith("no drawing:")
    assert len(data["tables"]["nodes"]["rows"]) == 21


def test_render_only_draws_the_results_it_is_given():
    # The analyses run in the façade (onnx_lab.reporting); render/report.py imports none of
    # them, only the drawing of the results it is handed.
    import ast
    from pathlib import Path

    import onnx_lab.render.report as rr

    tree = ast.parse(Path(rr.__file__).read_text(encoding="utf-8"))
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    ran = {m for m in mods if m.startswith(("onnx_lab.numerics", "onnx_lab.profiling"))
           or m in ("onnx_lab.analysis.compat", "onnx_lab.analysis.cost",
                    "onnx_lab.analysis.peak", "onnx_lab.analysis.summary",
                    "onnx_lab.analysis.tables")}
    assert ran == set()


def test_report_profile_is_the_one_door_profile():
    # The report's profile section is onnx_lab.profile's: with the cost model's prediction.
    from onnx_lab.reporting import report_results

    res = report_results("sample:convnet", profile={"runs": 3, "warmup": 1}, tables=False,
                         graph=False, check=False, cost=False)
    assert res.profile.memory.predicted_activation_bytes.iloc[0] > 0
    assert res.check is None and res.cost is None and res.nodes is None


def test_unknown_report_keyword_names_close_matches(tmp_path):
    from onnx_lab.errors import InputError

    with pytest.raises(InputError, match="did you mean 'profile'"):
        write_report("sample:convnet", tmp_path / "r.html", proflie=True)
    with pytest.raises(InputError, match="did you mean 'against'"):
        onnx_lab.open("sample:convnet").report(tmp_path / "r.html", agains="x.onnx")
    assert not (tmp_path / "r.html").exists()


def test_the_old_render_doors_name_their_new_place():
    with pytest.raises(ImportError, match=r"now onnx_lab.reporting.write_report \(and "
                                          r"onnx_lab.write_report\)"):
        from onnx_lab.render.report import write_report as _old  # noqa: F401


def test_a_node_drawn_under_another_key_finds_its_panel():
    """A name with a control character is drawn as its picture and a hash (render._html.
    dot_safe): the page reads that key back from the drawing, and the payload maps it to the
    node's panel (a click on such a node showed an empty panel)."""
    import onnx

    from onnx_lab.render._html import dot_safe

    h, F = onnx.helper, onnx.TensorProto.FLOAT
    g = h.make_graph([h.make_node("Relu", ["x"], ["a"], name="n\x01"),
                      h.make_node("Neg", ["a"], ["y"], name="plain")], "g",
                     [h.make_tensor_value_info("x", F, [2])], [h.make_tensor_value_info("y", F, [2])])
    p = canvas_payload(onnx_lab.open(h.make_model(g, opset_imports=[h.make_opsetid("", 17)])))
    drawn = dot_safe("n\x01")
    assert drawn != "n\x01" and p["drawn"][drawn] == "n\x01"
    assert "Relu" in p["details"][p["drawn"][drawn]]
    assert "plain" not in p["drawn"]  # names drawn as they are need no entry
    assert f'id="n:{drawn}"' in p["views"][""]["svg"]
