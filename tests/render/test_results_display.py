"""Result objects draw through onnx_lab._display; render/results registers every view."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from matplotlib.figure import Figure

import onnx_lab
from onnx_lab import _display
from onnx_lab._display import notebook_html
from onnx_lab._pandas import pd
from onnx_lab.analysis.cost import Cost, GenerationCost
from onnx_lab.analysis.summary import Summary
from onnx_lab.errors import InputError, LabError, RenderError
from onnx_lab.numerics.compare import Comparison
from onnx_lab.numerics.diff import Diff
from onnx_lab.numerics.llm import LLMComparison
from onnx_lab.numerics.precision import PrecisionPlan
from onnx_lab.numerics.torch_compare import TorchComparison
from onnx_lab.numerics.weight_only import WeightOnlyPlan
from onnx_lab.profiling.generate import GenerationProfile
from onnx_lab.profiling.run import Profile
from onnx_lab.profiling.sweep import BatchSweep
from onnx_lab.render import results
from onnx_lab.render.view import Rendering
from onnx_lab.transforms.base import PassResult


@pytest.fixture
def views(monkeypatch):
    """A private copy of the registry, taken after the pending loaders ran, and a private list
    of loaders: a test's registrations and loaders do not leak."""
    _display.kinds(object)  # runs the pending loaders (onnx_lab.render.results)
    monkeypatch.setattr(_display, "_VIEWS", dict(_display._VIEWS))
    monkeypatch.setattr(_display, "_LOADERS", [])
    monkeypatch.setattr(_display, "_FAILED", [])
    return _display._VIEWS


@pytest.mark.parametrize("cls, kinds", [
    (Comparison, ["hist", "html", "plot", "render", "scatter"]),
    (Diff, ["html", "render"]),
    (Profile, ["html", "plot", "render"]),
    (BatchSweep, ["html", "plot"]),
    (Cost, ["html"]),
    (Summary, ["html"]),
    (np.ndarray, ["histogram"]),
    (GenerationCost, ["html"]),
    (GenerationProfile, ["html", "plot"]),
    (PassResult, ["html"]),
    (PrecisionPlan, ["html", "plot", "render"]),
    (LLMComparison, ["html", "plot"]),
    (WeightOnlyPlan, ["html", "plot", "render"]),
    (TorchComparison, ["html", "plot"]),
])
def test_import_onnx_lab_registers_every_result_view(cls, kinds):
    assert _display.kinds(cls) == kinds


def _run(code: str) -> list[str]:
    """The stdout lines of ``code`` run in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True).stdout.splitlines()


@pytest.mark.slow
def test_registration_is_light_and_comes_with_import_onnx_lab():
    # A fresh interpreter: the result modules find their views with only `import onnx_lab`,
    # and registering them loads neither matplotlib nor the graph layout.
    code = ("import sys, onnx_lab\n"
            "from onnx_lab import _display\n"
            "from onnx_lab.analysis.summary import Summary\n"
            "print(_display.kinds(Summary), 'matplotlib' in sys.modules,\n"
            "      'onnx_lab.render.view' in sys.modules)\n")
    assert _run(code) == ["['html'] False False"]


@pytest.mark.slow
def test_import_onnx_lab_imports_no_result_module_until_a_result_is_drawn():
    # The registrations (and the result modules they import) load at the first drawing.
    code = ("import sys, onnx_lab\n"
            "mods = ('onnx_lab.render.results', 'onnx_lab.numerics.compare',\n"
            "        'onnx_lab.profiling.run', 'onnx_lab.numerics.llm')\n"
            "print([m for m in mods if m in sys.modules])\n"
            "html = onnx_lab.open('sample:convnet').summary()._repr_html_()\n"
            "print(html.startswith(\"<div class=\\\"mathjax_ignore\\\"><div class='onnx-lab-summary'>\"),\n"
            "      [m for m in mods if m in sys.modules], 'matplotlib' in sys.modules)\n")
    assert _run(code) == ["[]", "True ['onnx_lab.render.results', 'onnx_lab.numerics.compare', "
                                "'onnx_lab.profiling.run', 'onnx_lab.numerics.llm'] False"]


@pytest.mark.slow
def test_a_result_draws_in_a_process_that_imported_only_its_module():
    # `from onnx_lab.numerics.compare import compare` runs onnx_lab/__init__ first, which
    # leaves the loader: no `import onnx_lab` or render import is needed to draw.
    code = ("from onnx_lab.numerics.compare import compare\n"
            "from onnx_lab.core.samples import build\n"
            "from matplotlib.figure import Figure\n"
            "c = compare(build('convnet'), build('convnet'))\n"
            "print(c._repr_html_().startswith(\"<div class=\\\"mathjax_ignore\\\"><div class='onnx-lab-compare'>\"),\n"
            "      isinstance(c.plot(), Figure))\n")
    assert _run(code) == ["True True"]


def test_a_loader_runs_once_at_the_first_draw_not_when_added(views):
    class Report:
        pass

    calls = []

    def load():
        calls.append(1)
        _display.register(Report, "html", lambda r: "report")
        assert _display.kinds(Report) == ["html"]  # a loader may draw: it is not run again

    _display.add_loader(load)
    assert calls == [] and ("html" not in _display.kinds(object))
    assert calls == [1]  # kinds() ran it
    assert _display.draw(Report(), "html") == "report"
    assert _display.draw(Report(), "html") == "report"
    assert calls == [1] and _display._LOADERS == []


def test_a_draw_waits_for_the_loader_another_thread_is_running(views):
    class Report:
        pass

    started = threading.Event()

    def slow():
        started.set()
        time.sleep(0.3)  # the other thread looks up meanwhile
        _display.register(Report, "html", lambda r: "report")

    _display.add_loader(slow)
    first = threading.Thread(target=_display.kinds, args=(Report,))
    first.start()
    assert started.wait(30)
    assert _display.draw(Report(), "html") == "report"  # no "No view" half-way through
    first.join()


def test_an_interrupted_loader_stays_pending(views):
    class Report:
        pass

    calls = []

    def interrupted_once():
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        _display.register(Report, "html", lambda r: "report")

    _display.add_loader(interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        _display.draw(Report(), "html")
    assert _display.draw(Report(), "html") == "report" and calls == [1, 1]


def test_a_failing_loader_raises_once_and_is_named_by_later_errors(views):
    class Report:
        pass

    calls = []

    def broken():
        calls.append(1)
        raise ImportError("no module named 'mypkg.views'")

    _display.add_loader(broken)
    with pytest.raises(RenderError, match=r"Registering the result views failed in .*broken: "
                                          r"ImportError: no module named 'mypkg.views'") as e:
        _display.draw(Report(), "html")
    assert isinstance(e.value.__cause__, ImportError)
    # Not retried: the next drawing says what is missing and which registrations failed.
    with pytest.raises(RenderError, match=r"No 'html' view.*failed earlier: .*broken: "
                                          r"ImportError"):
        _display.draw(Report(), "html")
    assert calls == [1]
    # The views registered before the failure, and those of other loaders, still draw.
    _display.register(Report, "html", lambda r: "report")
    assert _display.draw(Report(), "html") == "report"


@pytest.mark.parametrize("bad", ["onnx_lab.analysis.cost.Cost", np.zeros(1)])
def test_register_takes_a_class_only(views, bad):
    before = dict(views)
    with pytest.raises(TypeError, match="register\\(\\) takes a class") as e:
        _display.register(bad, "html", lambda r: "")
    if isinstance(bad, str):
        assert "pass it: register(TheClass, kind, fn)" in str(e.value)
    assert views == before


@pytest.fixture(scope="module")
def convnet():
    return onnx_lab.open("sample:convnet")


@pytest.mark.slow
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
    assert c._repr_html_().startswith(notebook_html("<div class='onnx-lab-compare'>")[:-6])


def test_diff_views(convnet):
    same = onnx_lab.diff(convnet, convnet)
    assert same.to_html() == "<div>no differences</div>"
    assert same._repr_html_() == notebook_html(same.to_html())
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
    assert s._repr_html_().startswith(
        notebook_html("<div><b>Batch sweep</b> over &#x27;N&#x27;, knee: 2")[:-6])


def test_pass_results_and_backend_reports_are_drawn_by_render():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("fuse_conv_bn")
    html = r._repr_html_()
    assert html == notebook_html(results.pass_result_html(r))
    assert "<th style='text-align:left'>name</th><td>fuse_conv_bn</td>" in html
    table = pd.DataFrame({"backend": ["cpu"], "median_ms": [1.5]})
    out = results.backend_report_html(table, table.iloc[:0], ["openvino <not installed>"])
    assert "<b>Backends</b>" in out and "1.5" in out
    assert "openvino &lt;not installed&gt;" in out  # notes are text, escaped


def test_analysis_views(convnet):
    assert "<b>Cost</b>" in convnet.cost()._repr_html_()
    summary = convnet.summary()
    assert summary._repr_html_() == notebook_html(results.summary_html(summary))
    fig = convnet.weight_histogram("stem.conv.weight", bins=5)
    assert isinstance(fig, Figure) and fig.axes[0].get_title().startswith("stem.conv.weight")


def test_register_by_class_and_subclasses_inherit(views):
    class Report:
        pass

    class Detailed(Report):
        pass

    _display.register(Report, "html", lambda r, bold=False: "<b>r</b>" if bold else "r")
    assert _display.draw(Detailed(), "html", bold=True) == "<b>r</b>"
    # The subclass's own view wins over the inherited one; a later registration of the
    # same pair replaces the first.
    _display.register(Detailed, "html", lambda r: "first")
    _display.register(Detailed, "html", lambda r: "detailed")
    assert _display.draw(Detailed(), "html") == "detailed"
    assert _display.draw(Report(), "html") == "r"
    assert _display.kinds(Detailed) == ["html"]
    # Two classes of the same qualified name (a reloaded module) do not share views.
    Twin = type("Report", (), {"__module__": Report.__module__, "__qualname__":
                               Report.__qualname__})
    assert _display.kinds(Twin) == []


def test_missing_view_says_what_to_import(views):
    class Report:
        pass

    with pytest.raises(RenderError) as e:
        _display.draw(Report(), "plot")
    assert isinstance(e.value, LabError)
    msg = str(e.value)
    assert "No 'plot' view is registered for" in msg and "Report" in msg
    assert "Import onnx_lab.render.results" in msg and "No view of it" in msg
    assert f"register({Report.__qualname__}, 'plot', fn)" in msg and __name__ in msg

    _display.register(Report, "html", lambda r: "")
    with pytest.raises(RenderError, match="Registered views of it: html"):
        _display.draw(Report(), "plot")


def test_a_result_without_its_registration_raises_the_clear_error(views, convnet):
    views.pop((Cost, "html"))
    with pytest.raises(RenderError, match=r"onnx_lab\.analysis\.cost\.Cost.*onnx_lab\.render"):
        convnet.cost()._repr_html_()


def test_cost_totals_give_every_figure_its_unit():
    # onnx-tool's MACs were printed raw ("39200726.0") beside formatted totals
    from onnx_lab.render.results import cost_totals_html

    html = cost_totals_html(onnx_lab.open("sample:convnet").cost())
    row = next(r for r in html.split("<tr>") if ">macs_onnx_tool<" in r)
    assert "MMACs" in row and ".0<" not in row


def test_a_sensitivity_of_zeros_is_said_not_drawn_as_bars():
    # every estimate 0 (the full conversion passed): 20 equal bars at the log floor looked
    # like data
    import pandas as pd

    from onnx_lab.render.precision_plots import sensitivity_figure

    sens = pd.DataFrame({"node_id": [f"n{i}" for i in range(5)], "est_drop": [0.0] * 5,
                         "measured_drop": [float("nan")] * 5})
    fig = sensitivity_figure(sens)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("no node's error drop is above 0" in t for t in texts)
    assert not any(ax.patches for ax in fig.axes)  # no bars
