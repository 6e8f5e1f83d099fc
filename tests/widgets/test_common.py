from __future__ import annotations

import pandas as pd
import pytest

from onnx_lab.errors import DimError
from onnx_lab.widgets._common import (
    PagedTable,
    SelectableTable,
    View,
    badge,
    error_html,
    figure_html,
)


def test_error_html_shows_problem_and_fix_escaped():
    html = error_html(DimError("dim <batch> has no value.", fix="Pass dims={'batch': 1}."))
    assert "DimError" in html and "&lt;batch&gt;" in html and "Fix:" in html


def test_view_call_catches_lab_errors_and_unexpected_ones():
    v = View()

    def fail():
        raise DimError("dim 'seq' has no value.", fix="Pass dims.")

    assert v._call(fail) is None
    assert isinstance(v.error, DimError) and "onnx-lab-error" in v.status.value
    assert v._call(lambda: 1 / 0) is None
    assert isinstance(v.error, ZeroDivisionError) and "Unexpected" in v.status.value
    assert v._call(lambda: 42, code="lab.x()") == 42
    assert v.error is None and v.status.value == "" and "lab.x()" in v.code.value
    # A guarded handler never raises, and keeps an error shown by an inner call.
    handler = v._guard(lambda: v._call(fail))
    handler()
    assert isinstance(v.error, DimError) and "DimError" in v.status.value


@pytest.mark.slow
def test_selectable_table_pages_and_keeps_selection():
    df = pd.DataFrame({"k": [f"n{i}" for i in range(53)], "v": range(53)})
    seen = []
    t = SelectableTable("k", [("k", 80), ("v", 40)], page_size=20, on_change=seen.append)
    t.set(df)
    assert t.pages == 3 and len(t.page_keys()) == 20
    t.checkbox("n3").value = True
    t.next.click()
    assert t.page == 1 and t.page_keys()[0] == "n20" and len(t.page_keys()) == 20
    t.checkbox("n25").value = True
    assert seen[-1] == ["n3", "n25"]
    t.next.click()
    assert len(t.page_keys()) == 13 and t.next.disabled
    t.prev.click()
    t.prev.click()
    assert t.checkbox("n3").value is True
    t.clear.click()
    assert t.selected == [] and t.checkbox("n3").value is False
    single = SelectableTable("k", [("k", 80)], single=True)
    single.set(df)
    single.checkbox("n1").value = True
    single.checkbox("n2").value = True
    assert single.selected == ["n2"] and single.checkbox("n1").value is False


def test_paged_table_never_dumps_all_rows():
    df = pd.DataFrame({"a": range(1400)})
    t = PagedTable(df, page_size=25)
    assert t.html.value.count("<tr") <= 27 and "of 1400" in t.html.value
    t.next.click()
    assert "rows 26–50" in t.html.value


def test_badge_and_figure():
    assert "passed" in badge(True) and "FAILED" in badge(False) and "not verified" in badge(None)
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([1, 2])
    assert figure_html(fig).startswith("<img") and figure_html(None) == ""


def test_history_html_badges_and_current_step():
    from onnx_lab.widgets._common import history_html

    hist = pd.DataFrame({
        "step": [0, 1, 2], "pass": ["original", "fuse_conv_bn", "my_edit"],
        "params": [{}, {}, {"k": 1}], "modified": [False, True, True],
        "nodes_before": [21, 21, 20], "nodes_after": [21, 20, 20],
        "verify_passed": [None, True, False], "max_abs_err": [None, 2e-7, 0.5],
        "seconds": [0.0, 0.1, 0.2], "current": [False, False, True]})
    out = history_html(hist)
    assert out.count("onnx-lab-history-row") == 3
    assert ">passed<" in out and ">FAILED<" in out and "◀ current" in out
    assert "data-step='2' style='background" in out and "data-before='21' data-after='20'" in out
    # the marker sits beside the step number (a last column was off screen at first)
    assert ">2 ◀ current</td><td>my_edit<" in out and out.count("◀ current") == 1


def test_table_is_one_model_and_answers_page_messages():
    """A page of 25 rows is one widget model; the page's clicks arrive as messages."""
    from ipywidgets.widgets.widget import _instances

    df = pd.DataFrame({"k": [f"n{i}" for i in range(60)], "v": range(60)})
    seen = []
    before = len(_instances)
    t = SelectableTable("k", [("k", 80), ("v", 40)], page_size=25, on_change=seen.append)
    t.set(df)
    assert len(_instances) - before <= 2  # the table and its layout
    assert t.html.value.count("olt-check") == 25 and t.checked == [False] * 25
    t._message(t, {"toggle": 2, "value": True}, [])
    assert seen[-1] == ["n2"] and t.checked[2] is True
    t._message(t, {"go": 1}, [])
    assert t.page == 1 and t.page_keys()[0] == "n25" and t.checked == [False] * 25
    t._message(t, {"toggle": 99, "value": True}, [])  # not a row of the page: ignored
    t._message(t, {"clear": True}, [])
    assert t.selected == [] and "0 selected" in t.pos
    # Cells are escaped (model strings are hostile).
    t.set(pd.DataFrame({"k": ["<img src=x onerror=alert(1)>"], "v": [1]}))
    assert "<img" not in t.html.value and "&lt;img" in t.html.value
    p = PagedTable(df, page_size=25)
    p._message(p, {"go": 2}, [])
    assert p.page == 2 and "rows 51–60" in p.html.value and p.next.disabled


def test_deferred_work_runs_on_first_read_or_ping():
    """With a live page the work waits for the frame; reading the widget's own attributes
    (or the page's ping) runs it first, so the Python API reads as before."""
    from onnx_lab.widgets import _common

    class Slow(View):
        def __init__(self) -> None:
            self.calls = 0
            super().__init__()
            self._defer(self._work, "Computing…")

        def _work(self) -> None:
            self.calls += 1
            self.answer = 42

    v = Slow()  # no live page (no IPython kernel here): ran at once
    assert v.__dict__["calls"] == 1 and v.status.value == ""
    _common._PINGED[:] = [True]
    try:
        v = Slow()
        assert v.__dict__["calls"] == 0 and "Computing" in v.__dict__["status"].value
        assert v.children  # ipywidgets' own traits do not run it
        assert v.__dict__["calls"] == 0
        assert v.answer == 42 and v.calls == 1 and v.status.value == ""
        v = Slow()
        v._live._message(v._live, {"ping": 1}, [])  # the page's ping
        assert v.__dict__["calls"] == 1
        assert v.ready() is v and v.calls == 1
        v = Slow()
        v._guard(lambda: None)()  # a click handler: the deferred view comes first
        assert v.__dict__["calls"] == 1
    finally:
        _common._PINGED[:] = []


def test_table_snapshots_show_the_page_without_inputs():
    """The static views of a one-model table: the display-time snapshot and the one
    nbconvert rebuilds from saved widget state both show the page's rows, no checkbox."""
    from onnx_lab.widgets.nbconvert import _view_html

    t = SelectableTable("k", [("k", 80), ("v", 40)])
    t.set(pd.DataFrame({"k": ["a<b>", "c"], "v": [1, 2]}))
    v = View([t])
    snap = v.snapshot_html()
    assert "a&lt;b&gt;" in snap and "olt-row" in snap and "checkbox" not in snap
    state = {"t": {"model_name": "AnyModel", "state": t.get_state()}}
    saved = _view_html(state, "t")
    assert "a&lt;b&gt;" in saved and "checkbox" not in saved
    assert "rows 1–2 of 2" in saved


def test_lazy_tabs_put_a_tab_in_the_page_when_first_opened():
    import ipywidgets as w

    from onnx_lab.widgets._common import lazy_tabs

    a, b = w.HTML("a"), w.HTML("b")
    tabs = w.Tab(children=[a, b])
    tabs.set_title(0, "A")
    tabs.set_title(1, "B")
    lazy_tabs(tabs)
    assert tabs.titles == ("A", "B")
    assert list(tabs.children[0].children) == [a] and not tabs.children[1].children
    tabs.selected_index = 1
    assert list(tabs.children[1].children) == [b]
    b.value = "filled later"  # the widget keeps filling the same objects
    assert "filled later" in View([tabs]).snapshot_html()


def test_long_ids_are_cut_in_the_middle_with_the_whole_id_in_the_tooltip():
    # body node ids share a long head: cut at the end, every row of a merged decoder's
    # Nodes table read "optimum::if/else_branch/I..." and the part that differs was lost
    head = "optimum::if/else_branch/transformer/h.0/attn/"
    ids = [head + "MatMul_3", head + "Softmax_12", "Add_1"]
    t = SelectableTable("node_id", [("node_id", 170), ("op_type", 120)])
    t.set(pd.DataFrame({"node_id": ids, "op_type": ["MatMul", "Softmax", "Add"]}))
    html = t.html.value
    for nid in ids[:2]:
        assert f"title='{nid}'" in html, html
        cell = html.split(f"title='{nid}'>")[1].split("</span>")[0]
        assert "…" in cell and cell.endswith(nid.rsplit("/", 1)[1]), cell  # the distinct end
    assert ">Add_1</span>" in html and "title='Add_1'" not in html  # short ids as they are
    # a hostile id stays text
    t.set(pd.DataFrame({"node_id": ["<img src=x onerror=alert(1)>" * 5], "op_type": ["X"]}))
    assert "<img" not in t.html.value
