"""Result objects draw through onnx_lab._display; render/results registers every view."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure

import onnx_lab
from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.analysis.cost import Cost
from onnx_lab.analysis.summary import Summary
from onnx_lab.errors import InputError, LabError, RenderError
from onnx_lab.numerics.compare import Comparison
from onnx_lab.numerics.diff import Diff
from onnx_lab.profiling.run import Profile
from onnx_lab.profiling.sweep import BatchSweep
from onnx_lab.render import results
from onnx_lab.render.view import Rendering


@pytest.fixture
def views(monkeypatch):
    """A private copy of the registry: a test's registrations do not leak."""
    monkeypatch.setattr(_display, "_VIEWS", dict(_display._VIEWS))
    return _display._VIEWS


@pytest.mark.parametrize("cls, kinds", [
    (Comparison, ["hist", "html", "plot", "render", "scatter"]),
    (Diff, ["html", "render"]),
    (Profile, ["html", "plot", "render"]),
    (BatchSweep, ["html", "plot"]),
    (Cost, ["html"]),
    (Summary, ["html"]),
    (np.ndarray, ["histogram"]),
])
def test_import_onnx_lab_registers_every_result_view(cls, kinds):
    assert _display.kinds(cls) == kinds


def test_registration_is_light_and_comes_with_import_onnx_lab():
    # A fresh interpreter: the result modules find their views with only `import onnx_lab`,
    # and registering them loads neither matplotlib nor the graph layout.
    code = ("import sys, onnx_lab\n"
            "from onnx_lab import _display\n"
            "from onnx_lab.analysis.summary import Summary\n"
            "print(_display.kinds(Summary), 'matplotlib' in sys.modules,\n"
            "      'onnx_lab.render.view' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip()
    assert out == "['html'] False False"


@pytest.fixture(scope="module")
def convnet():
    return onnx_lab.open("sample:convnet")


def test_comparison_views(convnet):
    c = onnx_lab.compare(convnet, convnet)
    tensor = c.layers["tensor"].iloc[0]
    assert isinstance(c.plot(), Figure)
    assert isinstance(c.hist(tensor, bins=10), Figure)
    assert isinstance(c.scatter(tensor, max_points=100), Figure)
    r = c.render()
    assert isinstance(r, Rendering) and r.view.legend is not None
    html = c.to_html(max_rows=3)
    assert html.startswith("<div class='onnx-lab-compare'>") and "PASSED" in html
    assert "<svg" in html and "layers, largest max_abs first" in html
    assert c._repr_html_().startswith("<div class='onnx-lab-compare'>")


def test_diff_views(convnet):
    same = onnx_lab.diff(convnet, convnet)
    assert same.to_html() == same._repr_html_() == "<div>no differences</div>"
    assert isinstance(same.render(side="a"), Rendering)
    with pytest.raises(InputError, match="side must be 'a' or 'b'"):
        same.render(side="c")


def test_profile_and_batch_sweep_views(convnet):
    p = onnx_lab.profile(convnet, runs=2, warmup=0, providers="cpu")
    assert len(p.plot(top=3).axes) >= 3
    assert isinstance(p.render(), Rendering)
    assert "onnx_lab Profile" in p._repr_html_()
    s = BatchSweep(table=pd.DataFrame({"batch": [1, 2, 4], "latency_ms": [1.0, 1.5, 3.0],
                                       "items_per_s": [1000.0, 1333.0, 1333.0]}),
                   knee=2, dim="N")
    assert s.plot().axes[0].get_xlabel() == "N"
    assert s._repr_html_().startswith("<div><b>Batch sweep</b> over 'N', knee: 2")


def test_pass_results_and_backend_reports_are_drawn_by_render():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("fuse_conv_bn")
    html = r._repr_html_()
    assert html == results.pass_result_html(r)
    assert "<th style='text-align:left'>name</th><td>fuse_conv_bn</td>" in html
    table = pd.DataFrame({"backend": ["cpu"], "median_ms": [1.5]})
    out = results.backend_report_html(table, table.iloc[:0], ["openvino <not installed>"])
    assert "<b>Backends</b>" in out and "1.5" in out
    assert "openvino &lt;not installed&gt;" in out  # notes are text, escaped


def test_analysis_views(convnet):
    assert "<b>Cost</b>" in convnet.cost()._repr_html_()
    summary = convnet.summary()
    assert summary._repr_html_() == results.summary_html(summary)
    fig = convnet.weight_histogram("stem.conv.weight", bins=5)
    assert isinstance(fig, Figure) and fig.axes[0].get_title().startswith("stem.conv.weight")


def test_register_by_class_or_name_and_subclasses_inherit(views):
    class Report:
        pass

    class Detailed(Report):
        pass

    _display.register(Report, "html", lambda r, bold=False: "<b>r</b>" if bold else "r")
    assert _display.draw(Detailed(), "html", bold=True) == "<b>r</b>"
    # By qualified name, without the class at hand; a later registration replaces the first.
    _display.register(f"{__name__}.{Detailed.__qualname__}", "html", lambda r: "detailed")
    assert _display.draw(Detailed(), "html") == "detailed"
    assert _display.draw(Report(), "html") == "r"
    assert _display.kinds(Detailed) == ["html"]


def test_missing_view_says_what_to_import(views):
    class Report:
        pass

    with pytest.raises(RenderError) as e:
        _display.draw(Report(), "plot")
    assert isinstance(e.value, LabError)
    msg = str(e.value)
    assert "No 'plot' view is registered for" in msg and "Report" in msg
    assert "Import onnx_lab.render.results" in msg and "No view of it" in msg

    _display.register(Report, "html", lambda r: "")
    with pytest.raises(RenderError, match="Registered views of it: html"):
        _display.draw(Report(), "plot")


def test_a_result_without_its_registration_raises_the_clear_error(views, convnet):
    views.pop(("onnx_lab.analysis.cost.Cost", "html"))
    with pytest.raises(RenderError, match=r"onnx_lab\.analysis\.cost\.Cost.*onnx_lab\.render"):
        convnet.cost()._repr_html_()
