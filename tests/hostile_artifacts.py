"""Every HTML artifact onnx_lab makes, built from the hostile models of ``hostile_models``.

:func:`build` writes them into a folder and returns {name: path}: each result's
``_repr_html_`` (as Jupyter would show it: a bare fragment, no CSP), the details panel of
every node, the widget snapshots (Explorer, FusionLab, DriftDebugger, Profiler,
PrecisionDoctor, DiffView, Extractor), the report with every section, the diff report and the
audit index. The nbconvert export needs a kernel: :func:`notebook_export`.

``tests/browser/test_hostile_browser.py`` opens each in Chromium; ``tests/render/
test_hostile_html.py`` reads them without a browser.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from hostile_models import PAYLOADS, exotic, hostile, known_injection

import onnx_lab

# A fragment as a notebook cell output shows it: inside a page with no CSP of its own.
PAGE = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>" \
       "<body><div id='artifact'>{body}</div></body></html>"


def _page(path: Path, body: str, title: str) -> Path:
    path.write_text(PAGE.replace("{title}", title).replace("{body}", body), encoding="utf-8")
    return path


def fragments() -> dict[str, Callable[[], str]]:
    """{name: builder of an HTML fragment}: the results' ``_repr_html_`` and the panels."""
    from onnx_lab.render.details import canvas_legend_html, node_details, node_details_html

    lab = onnx_lab.open(hostile())
    ex = onnx_lab.open(exotic())
    inj = onnx_lab.open(known_injection())
    after = onnx_lab.open(hostile())

    def details() -> str:
        parts = []
        for m in (lab, ex, inj):
            for nid in m.nodes.node_id:
                parts.append(node_details_html(node_details(m.model, nid)))
            parts.append(canvas_legend_html(m.render()))
        return "".join(parts)

    def applied() -> str:
        r = after.apply("fuse_conv_bn")
        return r._repr_html_() + after.history._repr_html_() \
            if hasattr(after.history, "_repr_html_") else r._repr_html_()

    return {
        "lab": lab._repr_html_,
        "lab_exotic": ex._repr_html_,
        "summary": lambda: lab.summary()._repr_html_(),
        "summary_exotic": lambda: ex.summary()._repr_html_(),
        "cost": lambda: lab.cost()._repr_html_(),
        "check": lambda: ex.check().to_html(),
        "render": lambda: lab.render()._repr_html_(),
        "render_exotic": lambda: ex.render()._repr_html_(),
        "render_fallback": lambda: lab.render().fallback_html(),
        "compare": lambda: onnx_lab.compare(lab, after)._repr_html_(),
        "profile": lambda: lab.profile(runs=3, warmup=1)._repr_html_(),
        "pass_result": applied,
        "diff": lambda: onnx_lab.diff(lab, after)._repr_html_(),
        "precision": lambda: lab.find_precision("fp16", max_trials=6)._repr_html_(),
        "details": details,
    }


def _widgets(lab: Any, after: Any) -> dict[str, Callable[[], str]]:
    from onnx_lab.widgets import (
        DiffView,
        DriftDebugger,
        Explorer,
        Extractor,
        FusionLab,
        PrecisionDoctor,
        Profiler,
    )

    def explorer() -> str:
        e = Explorer(lab, tab="Graph")
        e.canvas.focus(lab.nodes.node_id.iloc[1])
        return e.snapshot_html()

    def fusion() -> str:
        f = FusionLab(lab)
        return f.snapshot_html()

    def drift() -> str:
        d = DriftDebugger(lab, after)
        d.run_button.click()
        return d.snapshot_html()

    def profiler() -> str:
        p = Profiler(lab, runs=3, warmup=1, background=False)
        p.profile_button.click()
        p.cost_button.click()
        return p.snapshot_html()

    def precision() -> str:
        d = PrecisionDoctor(lab, background=False)
        d.run()
        return d.snapshot_html()

    def diffview() -> str:
        v = DiffView(lab, after)
        v.select("a", lab.nodes.node_id.iloc[1])
        return v.snapshot_html()

    def extractor() -> str:
        x = Extractor(lab)
        return x.snapshot_html()

    return {"widget_explorer": explorer, "widget_fusion_lab": fusion, "widget_drift": drift,
            "widget_profiler": profiler, "widget_precision": precision,
            "widget_diff_view": diffview, "widget_extractor": extractor}


def audit_table() -> pd.DataFrame:
    """An audit table as onnx_lab.zoo writes it, every string hostile."""
    rows = []
    for i, p in enumerate(PAYLOADS[:6]):
        rows.append({"model": f"{p}#{i}", "status": ["ok", "error", p][i % 3],
                     "error_type": p if i % 2 else None, "error": p * 2 if i % 2 else None,
                     "error_stage": p if i % 2 else None, "num_nodes": 4, "nodes_after": 3,
                     "optimize_steps": 2, "optimize_verified": 1, "optimize_failed": p,
                     "fp16_passed": True, "fp16_kept": p, "check_errors": 0,
                     "check_warnings": 1, "file_bytes": 1234, "flops": 1e6,
                     "latency_ms": 1.5, "seconds": 0.3, "reused": False})
    return pd.DataFrame(rows)


def build(out: Path, *, widgets: bool = True) -> dict[str, Path]:
    """Write every artifact into ``out``; {name: file}."""
    from onnx_lab.render.audit import audit_index_html
    from onnx_lab.reporting import write_diff_report, write_report

    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for name, fn in fragments().items():
        files[name] = _page(out / f"{name}.html", fn(), name)
    if widgets:
        lab, after = onnx_lab.open(hostile()), onnx_lab.open(hostile())
        after.apply("fuse_conv_bn")
        for name, fn in _widgets(lab, after).items():
            files[name] = _page(out / f"{name}.html", fn(), name)
    lab = onnx_lab.open(hostile())
    lab.apply("fuse_conv_bn")
    files["report"] = write_report(lab, out / "report.html", profile={"runs": 3, "warmup": 1},
                                   against=hostile(), precision="fp16", history=True,
                                   title=PAYLOADS[1])
    files["report_exotic"] = write_report(exotic(), out / "report_exotic.html",
                                          title=PAYLOADS[2])
    files["report_injection"] = write_report(known_injection(), out / "report_injection.html")
    files["diff_report"] = write_diff_report(hostile(), lab, out / "diff_report.html",
                                             title=PAYLOADS[3])
    links = {r: f"reports/{i}.html" for i, r in enumerate(audit_table().model)}
    links[audit_table().model[1]] = "javascript:window.__pwned='link'"
    files["audit_index"] = out / "audit_index.html"
    files["audit_index"].write_text(audit_index_html(
        audit_table(), title=PAYLOADS[0], links=links, note=PAYLOADS[4],
        gate=pd.DataFrame({"model": [PAYLOADS[0]], "check": [PAYLOADS[2]],
                           "detail": [PAYLOADS[3]], "worse": [True]})), encoding="utf-8")
    return files


NOTEBOOK_CELLS = [
    "import sys, onnx_lab\nsys.path.insert(0, {tests!r})\n"
    "from hostile_models import hostile, NODE_NAMES\n"
    "from onnx_lab.widgets import Explorer, DiffView\n"
    "lab = onnx_lab.open(hostile())\nex = Explorer(lab, tab='Graph')\nex",
    "ex.canvas.focus(lab.nodes.node_id.iloc[1])",
    "after = onnx_lab.open(hostile()); after.apply('fuse_conv_bn')\n"
    "dv = DiffView(lab, after)\ndv",
    "dv.select('a', lab.nodes.node_id.iloc[1])",
    "lab.summary()",
]


def notebook_export(work: Path) -> Path:
    """Run a notebook that shows the hostile model in an Explorer and a DiffView (a real
    kernel, widget state saved), and export it with :class:`LastViews`."""
    import nbformat
    from nbclient import NotebookClient

    from onnx_lab.widgets.nbconvert import export_html

    tests = str(Path(__file__).resolve().parent)
    root = str(Path(__file__).resolve().parents[1])
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.replace("{tests!r}", repr(tests)))
                for c in NOTEBOOK_CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, env_path) if p)
    try:
        # nbclient stores the widget state in the notebook, as JupyterLab's "Save Widget
        # State Automatically" does: LastViews rebuilds the last views from it.
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    path = work / "hostile.ipynb"
    nbformat.write(nb, str(path))
    return export_html(path, work / "hostile_nb.html")


def manifest(files: dict[str, Path]) -> str:
    return json.dumps({k: str(v) for k, v in files.items()}, indent=1)
