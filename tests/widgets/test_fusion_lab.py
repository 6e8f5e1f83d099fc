from __future__ import annotations

import onnx
import pytest
from models import conv_bn_scale_from_input

import onnx_lab
from onnx_lab.core._sample_models import build_bert_block
from onnx_lab.widgets import FusionLab


@pytest.mark.slow
def test_fusion_lab_every_sample_select_preview_apply_undo(sample_lab, no_error, tmp_path):
    f = FusionLab(sample_lab)
    no_error(f)
    pats = sample_lab.patterns()
    # Issue 12 changes the order: real fusions first, by saving (nodes, bytes).
    assert sorted(f.patterns["match_id"]) == sorted(pats["match_id"])
    assert f.result.equals(pats) and "lab.patterns()" in f.code.value
    assert "<tr class='onnx-lab-history-row' data-step='0'" in f.history_html.value
    assert f.undo_button.disabled and f.redo_button.disabled
    n0 = len(sample_lab.index)
    # Nothing ticked: a hint, nothing applied.
    f.apply_button.click()
    assert len(sample_lab.history) == 1
    if len(pats):
        _select_preview_apply_undo(f, sample_lab, pats, n0, no_error)
    f.safe_button.click()
    no_error(f)
    assert isinstance(f.result, list) and all(x.verify_passed is not False for x in f.result)
    out = tmp_path / "optimized.onnx"
    f.save_path.value = str(out)
    f.save_button.click()
    no_error(f)
    onnx.checker.check_model(str(out))
    assert len(onnx.load(str(out)).graph.node) == sample_lab.model.graph.num_nodes()


@pytest.mark.slow
def test_fusion_lab_pattern_filter_explanation_and_tools(no_error):
    lab = onnx_lab.open("sample:convnet")
    f = FusionLab(lab)
    patterns = [v for _, v in f.pattern_filter.options if v != "*"]
    conv_bn = next(p for p in patterns if p.startswith("conv_bn"))
    f.pattern_filter.value = conv_bn
    assert set(f.matches.df["pattern"]) == {conv_bn}
    mid = f.matches.page_keys()[0]
    f.matches.checkbox(mid).value = True
    text = "".join(o["data"]["text/markdown"] for o in f.explanation.outputs)
    assert "BatchNormalization" in text and "γ" in text  # the folding math
    f.pattern_filter.value = "*"
    assert f.selected == [mid]  # the selection survives filtering
    f.apply_button.click()
    no_error(f)
    assert f.result.name == "fuse_conv_bn" and f.result.matches == [mid]
    f.ort_level.value = "ort:extended"
    f.ort_button.click()
    no_error(f)
    assert f.result.name == "ort:extended" and "lab.apply(&#x27;ort:extended&#x27;)" in f.code.value
    f.onnxsim_button.click()
    no_error(f)
    assert f.result.name == "onnxsim"
    hist = lab.history
    assert list(hist["pass"]) == ["original", "fuse_conv_bn", "ort:extended", "onnxsim"]


def test_fusion_lab_errors_show_in_widget(tmp_path):
    lab = onnx_lab.open("sample:transformer_block")  # dims unresolved: verification needs them
    f = FusionLab(lab)
    assert f.error is None
    f.ort_button.click()  # verification needs dims: must not raise
    assert type(f.error).__name__ == "DimError" and "onnx-lab-error" in f.status.value
    assert "batch" in f.status.value and len(lab.history) == 1
    f.redo_button.click()  # nothing to redo: InputError in the widget
    assert type(f.error).__name__ == "InputError"
    f.save_button.click()
    assert "file name" in f.status.value
    conv = onnx_lab.open("sample:convnet")
    fc = FusionLab(conv)
    fc.save_path.value = str(conv.path)  # the source file: refused without overwrite
    fc.save_button.click()
    assert type(fc.error).__name__ == "SaveError"
    fc.step.max = 5
    fc.step.value = 5
    fc.checkout_button.click()
    assert type(fc.error).__name__ == "InputError"


def _select_preview_apply_undo(f, sample_lab, pats, n0, no_error):
    f.select_all.click()
    # "select all shown": housekeeping rows are hidden by default.
    assert f.selected == list(f.matches.df["match_id"])
    f.preview_button.click()
    no_error(f)
    prev = f.result
    assert prev["result"].modified and prev["before"].svg is not None or prev["before"].dot
    assert len(sample_lab.history) == 1  # preview leaves the history alone
    f.matches.clear.click()
    first = f.matches.page_keys()[0]
    f.matches.checkbox(first).value = True
    f.apply_button.click()
    no_error(f)
    r = f.result
    assert r.modified and r.verify_passed is True
    assert len(sample_lab.index) == r.nodes_after < n0
    assert "data-step='1'" in f.history_html.value and ">passed<" in f.history_html.value
    assert "tensors compared" in f.verification.html.value  # the step's verification report
    assert f"lab.apply({r.name!r}, matches=[{first!r}])".replace("'", "&#x27;") in f.code.value
    assert f.selected == [] and first not in set(f.patterns["match_id"])
    f.undo_button.click()
    no_error(f)
    assert len(sample_lab.index) == n0 and f.undo_button.disabled
    f.redo_button.click()
    no_error(f)
    assert len(sample_lab.index) == r.nodes_after
    f.step.value = 0
    f.checkout_button.click()
    no_error(f)
    assert len(sample_lab.index) == n0 and "lab.checkout(0)" in f.code.value


def test_fusion_lab_without_verification_and_overwrite(tmp_path, no_error):
    src = tmp_path / "model.onnx"
    src.write_bytes(onnx_lab.samples.path("convnet").read_bytes())
    lab = onnx_lab.open(src)
    f = FusionLab(lab)
    f.verify.value = False
    f.select([m for m in f.patterns["match_id"] if m.startswith("eliminate_identity")])
    f.apply_button.click()
    no_error(f)
    assert f.result.verify_passed is None and "verify=False" in f.code.value
    assert ">not verified<" in f.history_html.value
    f.save_path.value = str(src)
    f.save_button.click()  # the source file: refused unless overwrite is ticked
    assert type(f.error).__name__ == "SaveError"
    assert len(onnx.load(str(src)).graph.node) == 21
    f.overwrite.value = True
    f.save_button.click()
    no_error(f)
    assert "overwrite=True" in f.code.value
    assert len(onnx.load(str(src)).graph.node) == lab.model.graph.num_nodes() == 20


# ---------------------------------------------------------------------------- not fused


def test_not_fused_panel_lists_our_patterns_near_misses_when_the_widget_opens(no_error):
    lab = onnx_lab.open(conv_bn_scale_from_input())
    f = FusionLab(lab)
    no_error(f)
    assert "fuse_conv_bn" not in set(f.patterns["pass"])  # not an opportunity...
    df = f.near_miss_rows  # ...but a near-miss, with the check that rejected it
    assert df.equals(lab.patterns(near_misses=True))
    assert list(df.kind) == ["pattern"]
    row = df.iloc[0]
    assert (row.source, row.fusion, row.anchor) == ("fuse_conv_bn", "conv_bn", "/conv/Conv")
    assert row.node_ids == ["/conv/Conv", "/bn/BatchNormalization"]
    assert "'scale' is not a constant" in row.reason
    assert f.details.get_title(4) == "Not fused, because (1)"
    shown = f.near_misses.html.value
    assert "<td>pattern</td>" in shown and "<td>fuse_conv_bn</td>" in shown
    assert "is not a constant" in shown and "lab.patterns(near_misses=True)" in shown
    # A model with nothing almost fused says so.
    g = FusionLab(onnx_lab.open("sample:convnet"))
    assert g.near_miss_rows.empty and g.details.get_title(4) == "Not fused, because"
    assert "no near-misses" in g.near_misses.html.value


def test_not_fused_panel_is_searched_when_first_opened(no_error):
    lab = onnx_lab.open(conv_bn_scale_from_input())
    f = FusionLab(lab)
    no_error(f)
    assert f._near_stale and "is not a constant" not in f.near_misses.html.value
    f.details.selected_index = 4  # opening the panel looks for them
    assert not f._near_stale and f.details.get_title(4) == "Not fused, because (1)"
    assert "is not a constant" in f.near_misses.html.value
    f.details.selected_index = 0
    f.refresh()  # a refresh with the panel closed: found again on its next opening
    assert f._near_stale
    f.details.selected_index = 4
    assert not f._near_stale and "is not a constant" in f.near_misses.html.value


def test_not_fused_panel_puts_the_tool_steps_near_misses_next_to_ours(no_error):
    # A BERT block whose attention mask path has an extra Cast: onnxruntime fuses everything
    # else; our fuse_matmul_add rejects the 3-D MatMuls.
    lab = onnx_lab.open(build_bert_block(extra_mask_cast=True), dims={"batch": 2, "seq": 8})
    f = FusionLab(lab)
    no_error(f)
    df = f.near_miss_rows
    assert set(df.kind) == {"pattern", "tool"}
    assert set(df.loc[df.kind == "pattern", "source"]) == {"fuse_matmul_add"}
    tool = df.loc[df.kind == "tool"]
    assert list(tool.fusion) == ["Attention"] and list(tool.source) == ["ort_transformers"]
    assert "unexpected Cast (/mask/Cast_1)" in tool.reason.iloc[0]
    assert tool.log.iloc[0] == []  # nothing ran yet
    # The tool rows come first in the table: they are few and explain a step's result.
    shown = f.near_misses.html.value
    assert shown.index("<td>tool</td>") < shown.index("<td>pattern</td>")

    labels = dict((v, k) for k, v in f.ort_level.options)
    assert labels["ort_transformers:gpt2"] == "ORT transformer fusions (gpt2)"
    f.ort_level.value = "ort_transformers:bert"
    f.ort_button.click()
    no_error(f)
    assert f.result.name == "ort_transformers" and f.result.verify_passed
    assert "model_type=&#x27;bert&#x27;" in f.code.value
    df = f.near_miss_rows
    tool = df.loc[df.kind == "tool"]
    assert list(tool.anchor) == ["/layer.0/attention/core/Softmax"]
    # Now the step's own row: onnxruntime's log for that place.
    assert "fuse_attention: failed to match mask path" in tool.log.iloc[0]
    assert tool.reason.iloc[0] == f.result.near_misses.reason.iloc[0]
    assert (df.kind == "pattern").sum() == 3  # the attention's MatMul+Adds were fused away
    assert f.details.selected_index == 4 and f.details.get_title(4) == "Not fused, because (4)"
    assert "near_misses(lab.model, step=lab.results[1])" in f.near_misses.html.value
    # Undo: the first version again, whose rows are the structural ones.
    f.undo_button.click()
    no_error(f)
    assert f.near_miss_rows.equals(lab.patterns(near_misses=True))
    assert len(f.near_miss_rows) == 7


def test_not_fused_panel_names_the_nan_guard_that_stops_the_attention_fusion(no_error):
    """torch's sdpa export puts Where(IsNaN(p), 0, p) between the Softmax and the values'
    MatMul: onnxruntime fuses no Attention, and the panel names the node and the op."""
    from models import bert_block_with_nan_guard

    lab = onnx_lab.open(bert_block_with_nan_guard(), dims={"batch": 2, "seq": 8})
    f = FusionLab(lab)
    f.ort_level.value = "ort_transformers:bert"
    f.ort_button.click()
    no_error(f)
    assert "Attention" not in f.result.fusions and f.result.verify_passed
    tool = f.near_miss_rows.loc[f.near_miss_rows.kind == "tool"]
    att = tool.loc[tool.fusion == "Attention"]
    assert list(att.anchor) == ["/layer.0/attention/core/Softmax"]
    reason = att.reason.iloc[0]
    assert reason.startswith("QK path: the MatMul(probs, V)") and "reads Where /attn/Where" in reason
    assert "NaN guard" in reason and {"/attn/Where", "/layer.0/attention/core/Softmax"} <= set(
        att.node_ids.iloc[0])
    assert "QK path: the MatMul(probs, V)" in f.near_misses.html.value


def test_safe_preset_reports_one_step_per_pass_and_where_its_time_went(no_error):
    from onnx_lab.transforms.apply import preset_passes

    lab = onnx_lab.open(build_bert_block(), dims={"batch": 2, "seq": 8})
    f = FusionLab(lab)
    seen: list[tuple[int, int, str]] = []
    hook = f._on_progress

    def recording(done, total, label):
        hook(done, total, label)
        seen.append((f.progress.value, f.progress.max, label))

    f._on_progress = recording
    f.safe_button.click()
    no_error(f)
    n = len(preset_passes("safe"))
    assert [v for v, _, _ in seen] == list(range(n + 1)) and {m for _, m, _ in seen} == {n}
    assert seen[0][2] == f"preset: {preset_passes('safe')[0]}" and seen[-1][2] == "preset: done"
    assert f.progress.layout.visibility == "hidden"  # hidden again once the step is shown
    assert set(f.timing) == {"call_s", "view_s"} and f.timing["view_s"] >= 0
    assert "s in the library call" in f.status.value and "s redrawing" in f.status.value


def test_preview_panel_says_why_it_is_empty(no_error):
    # After a step the preview of the older version is cleared: the open panel said only
    # "before" and "after" over two empty canvases.
    lab = onnx_lab.open("sample:convnet")
    f = FusionLab(lab)
    no_error(f)
    assert f.preview_note.layout.display != "none" and "Nothing previewed" in f.preview_note.value
    assert all(b.layout.display == "none" for b in f.preview_box.children[1:])
    f.matches.checkbox(f.matches.page_keys()[0]).value = True
    f.preview_button.click()
    no_error(f)
    assert f.preview_note.layout.display == "none"
    assert all(b.layout.display != "none" for b in f.preview_box.children[1:])
    f.apply_button.click()
    no_error(f)
    assert f.preview_note.layout.display != "none" and "earlier version" in f.preview_note.value
    assert all(b.layout.display == "none" for b in f.preview_box.children[1:])


def test_a_step_the_preset_dropped_is_shown_dropped(tmp_path, no_error):
    # ONNX's test_affine_grid_2d_expanded: the safe preset drops fold_shapes (its version
    # does not load at onnxruntime's defaults) and runs the passes after it again. The widget
    # said 'fold_shapes: 113 → 112 nodes, verification passed' in green and listed its
    # changes, none of which are in the current version.
    import numpy as np
    from onnx.backend.test.case import node

    from onnx_lab.runtime.session import default_load_problem

    case = next((t for t in node.collect_testcases() if t.name == "test_affine_grid_2d_expanded"),
                None)
    if case is None:
        pytest.skip("this onnx has no affine_grid case")
    inputs, _ = case.data_sets[0]
    np.savez(tmp_path / "feeds.npz", **dict(zip([i.name for i in case.model.graph.input],
                                                inputs)))
    lab = onnx_lab.open(case.model)
    folded = onnx_lab.open(case.model)
    folded.apply("fold_shapes", verify=False)
    if default_load_problem(lab.model) is not None or default_load_problem(folded.model) is None:
        pytest.skip("this onnxruntime does not refuse the folded case")
    f = FusionLab(lab)
    f.context.feed_mode.value = "npz"
    f.context.feed_path.value = str(tmp_path / "feeds.npz")
    f.safe_button.click()
    no_error(f)
    dropped = [r.name for r in f.result if r.dropped]
    assert dropped == ["fold_shapes"]
    assert "fold_shapes: dropped" in f.status.value and "onnx-lab-warn" in f.status.value
    assert "fold_shapes" not in set(f.changes.df.get("step", ()))
    assert "fold_shapes" not in list(lab.history["pass"])


def test_verification_and_changes_panels_say_why_they_are_empty(no_error):
    # Before any step both panels opened on nothing at all (an empty table, no line), and
    # after a step without verification the verification panel stayed blank.
    lab = onnx_lab.open("sample:convnet")
    f = FusionLab(lab)
    no_error(f)
    assert "No step applied yet" in f.verification.html.value
    assert "No step applied yet" in f.changes.html.value
    f.verify.value = False
    f.select([m for m in f.patterns["match_id"] if m.startswith("eliminate_identity")])
    f.apply_button.click()
    no_error(f)
    assert "not verified" in f.verification.html.value
    assert "removed" in f.changes.html.value


def _housekeeping_only():
    """An Identity before a Relu: its only match (eliminate_identity) is housekeeping."""
    return onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) {
            i = Identity(x)
            y = Relu(i)
        }""")


def test_a_table_of_hidden_housekeeping_rows_says_so(no_error):
    # A dynamo BERT's 13 matches are all housekeeping: the line read "13 opportunities found"
    # over a table reading "no rows", with nothing saying the rows were hidden.
    f = FusionLab(onnx_lab.open(_housekeeping_only()))
    no_error(f)
    assert len(f.patterns) and f.patterns["housekeeping"].all()
    assert f.matches.page_keys() == []
    assert "housekeeping row(s) hidden" in f.summary_html.value
    f.show_housekeeping.value = True
    assert f.matches.page_keys() and "hidden" not in f.summary_html.value


def _explained(f) -> str:
    return "".join(o["data"].get("text/markdown", "") + o["data"].get("text/html", "")
                   for o in f.explanation.outputs)


def test_the_explanation_is_of_a_pattern_the_table_shows(no_error):
    # The Explanation panel (open by default) explained a dynamo BERT's first match, a hidden
    # housekeeping one ('constant_subgraph' of fold_constants), over a table of no rows.
    f = FusionLab(onnx_lab.open(_housekeeping_only()))
    no_error(f)
    assert f.details.selected_index == 0 and f.matches.page_keys() == []
    text = _explained(f)
    assert "No pattern is shown in the table" in text and "eliminate_identity" not in text
    f.show_housekeeping.value = True
    assert "eliminate_identity" in _explained(f)
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 4] y) {
            i = Identity(x)
            w = Constant<value = float[3, 4] {1,2,3,4,5,6,7,8,9,10,11,12}>()
            b = Constant<value = float[4] {1,2,3,4}>()
            mm = MatMul(i, w)
            y = Add(mm, b)
        }""")
    f = FusionLab(onnx_lab.open(m))
    f.pattern_filter.value = "identity"  # a housekeeping pattern, its rows hidden
    assert f.matches.page_keys() == [] and "No pattern is shown" in _explained(f)
    f.pattern_filter.value = "*"
    assert "fuse_matmul_add" in _explained(f)
