"""A saved notebook is also a report: ``jupyter nbconvert --to html`` keeps onnx_lab widgets'
views as static HTML (no kernel, no widget manager, no network).

A real kernel runs the notebook (nbclient, widget state stored as JupyterLab's *Save Widget
State* does); a later cell selects a node on the Explorer's canvas and one on a DiffView.
Without the saved state, nbconvert shows the display-time snapshot (``text/html`` of the
display); with :class:`onnx_lab.widgets.nbconvert.LastViews`, the last views: the selected
node's panel, the diff's counterpart.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
HTMLExporter = pytest.importorskip("nbconvert").HTMLExporter

from onnx_lab.widgets.nbconvert import WIDGET_VIEW, LastViews, export_html  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import Explorer, DiffView\n"
    "lab = onnx_lab.open('sample:convnet')\nex = Explorer(lab, tab='Graph')\nex",
    "ex.canvas.focus('/block1/conv/Conv')",
    "after = onnx_lab.open('sample:convnet'); after.apply('fuse_conv_bn')\n"
    "dv = DiffView(lab, after)\ndv",
    "dv.select('a', '/stem/bn/BatchNormalization')",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    from nbclient import NotebookClient

    work = tmp_path_factory.mktemp("nb")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    path = work / "analysis.ipynb"
    nbformat.write(nb, str(path))
    return path


def _body(text: str) -> str:
    """The page without its scripts (what shows without JavaScript)."""
    return re.sub(r"<script.*?</script>", "", text, flags=re.S)


@pytest.mark.slow
def test_widget_outputs_carry_a_static_snapshot(executed):
    nb = nbformat.read(str(executed), as_version=4)
    bundles = [o["data"] for c in nb.cells for o in c.get("outputs", []) if "data" in o]
    widgets = [b for b in bundles if WIDGET_VIEW in b]
    assert len(widgets) == 2 and all("onnx-lab-snapshot" in b["text/html"] for b in widgets)


@pytest.mark.slow
def test_plain_nbconvert_without_widget_state_shows_the_snapshot(executed):
    nb = nbformat.read(str(executed), as_version=4)
    nb.metadata.pop("widgets", None)  # saved without widget state (JupyterLab's default)
    body, _ = HTMLExporter().from_notebook_node(nb)
    page = _body(body)
    assert page.count("onnx-lab-snapshot ") + page.count("onnx-lab-snapshot'") >= 2
    assert "<svg" in page and "Explorer: static snapshot" in page


@pytest.mark.slow
def test_last_views_from_the_saved_widget_state(executed, tmp_path):
    nb = nbformat.read(str(executed), as_version=4)
    assert nb.metadata["widgets"]  # nbclient saved the state, as JupyterLab can
    # Plain nbconvert prefers the widget view here (blank without the CDN widget manager).
    plain, _ = HTMLExporter().from_notebook_node(copy.deepcopy(nb))
    assert "/block1/conv/Conv</div>" not in _body(plain)
    out = export_html(executed, tmp_path / "analysis.html")
    page = _body(out.read_text(encoding="utf-8"))
    assert page.count("last view saved with the notebook") == 2
    # The Explorer's canvas shows the node selected by the later cell, with its panel.
    assert "/block1/conv/Conv</div>" in page and "kernel_shape" in page
    # The DiffView: the BN selected on the left, the fused Conv it went into on the right.
    assert "fused into" in page and "/stem/conv/Conv" in page
    assert page.count("<svg") >= 3
    assert "onnx-lab-snapshot" in page


@pytest.mark.slow
def test_preprocessor_from_the_command_line(executed, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    jupyter = Path(sys.executable).with_name("jupyter")
    r = subprocess.run([str(jupyter), "nbconvert", "--to", "html",
                        "--HTMLExporter.preprocessors=onnx_lab.widgets.nbconvert.LastViews",
                        str(executed), "--output-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    page = _body((tmp_path / "analysis.html").read_text(encoding="utf-8"))
    assert "last view saved with the notebook" in page and "/block1/conv/Conv</div>" in page


@pytest.mark.slow
def test_plain_nbconvert_keeps_last_views_once_the_config_is_installed(executed, tmp_path):
    """What ``make setup`` installs in the environment: plain ``jupyter nbconvert --to html``
    then exports the last views (the config read from JUPYTER_CONFIG_DIR here)."""
    from onnx_lab.widgets.nbconvert import install_config

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "jupyter_nbconvert_config.json").write_text('{"HTMLExporter": {"exclude_input": false}}')
    path = install_config(conf)
    assert install_config(conf) == path  # idempotent: listed once, other settings kept
    cfg = json.loads(path.read_text())
    assert cfg["HTMLExporter"] == {"exclude_input": False,
                                   "preprocessors": ["onnx_lab.widgets.nbconvert.LastViews"]}
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(conf), PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    jupyter = Path(sys.executable).with_name("jupyter")
    r = subprocess.run([str(jupyter), "nbconvert", "--to", "html", str(executed),
                        "--output-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    page = _body((tmp_path / "analysis.html").read_text(encoding="utf-8"))
    assert "last view saved with the notebook" in page and "/block1/conv/Conv</div>" in page


def test_other_widgets_are_left_alone():
    nb = nbformat.v4.new_notebook()
    out = nbformat.v4.new_output("display_data", data={
        WIDGET_VIEW: {"model_id": "x", "version_major": 2, "version_minor": 0},
        "text/plain": "IntSlider(value=3)"})
    nb.cells = [nbformat.v4.new_code_cell("w", outputs=[out])]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {
        "x": {"model_name": "IntSliderModel", "state": {"value": 3}}}}}
    nb2, _ = LastViews().preprocess(nb, {})
    assert WIDGET_VIEW in nb2.cells[0].outputs[0]["data"]


def test_export_never_writes_over_the_notebook(tmp_path):
    from onnx_lab.errors import SaveError

    nb = tmp_path / "a.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                              "nbformat_minor": 5}))
    before = nb.read_bytes()
    with pytest.raises(SaveError, match="the notebook"):
        export_html(nb, nb)
    assert nb.read_bytes() == before
    out = export_html(nb, tmp_path / "a.html")  # elsewhere: written, nothing stray beside it
    assert "<html" in out.read_text(encoding="utf-8").lower()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "a.ipynb"]
