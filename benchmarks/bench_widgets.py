"""Widget responsiveness on a BERT-base export (~1,400 nodes): time to open each widget and
to react to the controls that draw graphs. Target: every figure <= 2 s on this 2-core machine.

Needs torch for the export (benchmarks/_models.py, cached); skips cleanly without it.
Run: .venv/bin/python benchmarks/bench_widgets.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _t(label: str, fn, rows: list) -> object:
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    rows.append((label, dt))
    print(f"{label:58s} {dt:7.3f} s", flush=True)
    return out


def main() -> None:
    try:
        import _models

        path = _models.bert_base()
    except ImportError as e:  # torch missing
        print(f"skipped: {e}")
        return
    import onnx_lab
    from onnx_lab.widgets import DriftDebugger, Explorer, Extractor, FusionLab, Profiler

    rows: list[tuple[str, float]] = []
    lab = _t("open BERT-base (not a widget)", lambda: onnx_lab.open(
        path, dims={"batch": 1, "sequence": 16}), [])
    print(f"{len(lab.index)} nodes")
    e = _t("Explorer: open (Summary tab)", lambda: Explorer(lab), rows)
    for i, name in enumerate(["Nodes", "Initializers", "Tensors", "Graph (collapsed overview)"],
                             start=1):
        _t(f"Explorer: open {name} tab", lambda i=i: setattr(e.tabs, "selected_index", i), rows)
    assert e.error is None, e.error
    e.tabs.selected_index = 1
    _t("Explorer: filter op type MatMul", lambda: setattr(e.op_filter, "value", ("MatMul",)), rows)
    key = e.nodes_table.page_keys()[40 % len(e.nodes_table.page_keys())]
    e.tabs.selected_index = 4
    _t("Explorer: tick a node (graph shown, radius 2)",
       lambda: setattr(e.nodes_table.checkbox(key), "value", True)
       if key in e.nodes_table.page_keys() else e.nodes_table.select([key]), rows)
    _t("Explorer: radius 4", lambda: setattr(e.radius, "value", 4), rows)
    _t("Explorer: collapse off", lambda: setattr(e.collapse, "value", False), rows)
    e.nodes_table.select([])
    e.collapse.value = True
    groups = [v for _, v in e.expand.options if v]
    if groups:
        _t(f"Explorer: expand {groups[len(groups) // 2]}",
           lambda: setattr(e.expand, "value", groups[len(groups) // 2]), rows)
    assert e.error is None, e.error
    # The graph canvas, kernel side (the browser side is in tests/browser: the JS applies
    # fit/zoom/pan/search synchronously on the event; a click waits for these details).
    e.expand.value = ""
    c = e.canvas
    mm = [k for k in c.items if "matmul" in c.items[k]]
    _t("Canvas: focus a node (search/linked selection, kernel side)",
       lambda: c.focus(mm[len(mm) // 2]), rows)
    op = next(n for n in lab.nodes.node_id if lab.index.entries[n].node.op_type == "MatMul")
    _t("Canvas: click a MatMul → node_details (attributes, shapes, weight stats)",
       lambda: c.show(lab.render(around=[op], radius=2)) or setattr(c, "selected", op), rows)
    assert c.error is None and "MatMul" in c.details_html, c.error
    boxes = [k for k in c.items if k.startswith("scope:")]
    e.nodes_table.select([])
    e._render_graph()
    boxes = [k for k in e.canvas.items if k.startswith("scope:")]
    if boxes:
        _t(f"Canvas: click a collapsed box → expand ({boxes[len(boxes) // 2]})",
           lambda: c.click(boxes[len(boxes) // 2]), rows)
    _t("Explorer: Initializers sorted by outlier score (reads all weights)",
       lambda: (setattr(e.tabs, "selected_index", 2),
                setattr(e.init_sort, "value", "outlier_score")), [])
    f = _t("FusionLab: open (finds all patterns)", lambda: FusionLab(lab), rows)
    assert f.error is None, f.error
    print(f"  {len(f.patterns)} matches")
    if len(f.patterns):
        f.matches.checkbox(f.matches.page_keys()[0]).value = True
        _t("FusionLab: Preview one match", f.preview_button.click, rows)
        assert f.error is None, f.error
    _t("Extractor: open", lambda: Extractor(lab), rows)
    _t("DriftDebugger: open", lambda: DriftDebugger(lab, lab), rows)
    _t("Profiler: open (with the run-context bar)", lambda: Profiler(lab), rows)
    worst = max(rows, key=lambda r: r[1])
    print(f"\nworst interactive figure: {worst[0]}: {worst[1]:.3f} s (target <= 2 s)")


if __name__ == "__main__":
    main()
