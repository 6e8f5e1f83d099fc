"""The report's orchestration: run the analyses a report shows, then hand their results to
:mod:`onnx_lab.render.report`, which only draws them.

``onnx_lab.write_report``, ``lab.report`` and ``onnx-lab report`` are :func:`write_report`;
``onnx_lab.write_diff_report`` and ``onnx-lab diff --html`` are :func:`write_diff_report`.
A section that fails (a profile of a model onnxruntime cannot run) is kept as its exception
and drawn as a note in its place; the file is always written.

Example:
    >>> from onnx_lab.reporting import write_diff_report, write_report
    >>> write_report("model.onnx", "model.html", profile=True)
    >>> write_diff_report("model.onnx", "model_fused.onnx", "diff.html")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from onnx_lab.analysis.compat import check as run_check
from onnx_lab.analysis.cost import cost as run_cost
from onnx_lab.analysis.summary import summarize
from onnx_lab.analysis.tables import initializers_table, nodes_table, tensors_table
from onnx_lab.core.history import History
from onnx_lab.core.outputs import input_files, refuse_inputs, write_atomic
from onnx_lab.core.source import load_source, resolve
from onnx_lab.errors import LabError, strict_keywords
from onnx_lab.lab import profile as lab_profile  # the one door: the run and the cost's peak
from onnx_lab.numerics.compare import compare as run_compare
from onnx_lab.numerics.diff import Diff, diff
from onnx_lab.numerics.precision import find_precision
from onnx_lab.profiling.run import Profile
from onnx_lab.render.report import REPORT_SECTIONS, ReportResults, diff_page, report_page

__all__ = ["write_report", "report_html", "report_results", "write_report_results",
           "write_diff_report", "diff_report_html", "REPORT_SECTIONS"]


def _run(build: Callable[[], Any]) -> Any:
    """``build()``, or the exception that stopped it: the report draws it as the section's
    note (render logs the traceback of one that is not a LabError)."""
    try:
        return build()
    except Exception as e:  # noqa: BLE001 - a section's failure is a note, never no file
        return e


def _history_of(source: Any) -> History | None:
    if isinstance(source, History):
        return source
    h = getattr(source, "version_history", None)
    return h if isinstance(h, History) else None


def _no_history() -> LabError:
    return LabError("no history: the report was given a model, not a Lab.",
                    fix="Pass the Lab (lab.report(path)) to include its steps.")


def _profile(r: Any, profile: Any) -> Any:
    if isinstance(profile, Profile):
        return profile
    kw = dict(profile) if isinstance(profile, Mapping) else {}
    kw.setdefault("runs", 20)
    kw.setdefault("warmup", 3)
    kw.setdefault("dims", r.dims)
    kw.setdefault("shapes", r.shapes)
    return lab_profile(r.model, **kw)


def _comparison(r: Any, other: Any, compare_kw: Mapping[str, Any]) -> Any:
    kw = dict(compare_kw)
    kw.setdefault("dims", r.dims)
    kw.setdefault("shapes", r.shapes)
    return run_compare(r, other, **kw)


def _precision(r: Any, precision: Any) -> Any:
    if isinstance(precision, str):
        return find_precision(r.model, precision, dims=r.dims, shapes=r.shapes)
    return precision


def report_results(source: Any, *, title: str | None = None, graph: bool = True,
                   tables: bool = True, check: bool = True, cost: bool = True,
                   history: bool | None = None, profile: Any = False, against: Any = None,
                   compare: Mapping[str, Any] | None = None, precision: Any = None,
                   dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None, max_nodes: int = 300,
                   max_views: int = 300, budget_s: float = 120.0,
                   timeout: float = 10.0) -> ReportResults:
    """Run what the report of ``source`` shows (keywords as :func:`write_report`) and return
    the results for :func:`onnx_lab.render.report.report_page`.

    Example:
        >>> res = report_results("sample:convnet", profile={"runs": 5})
        >>> res.profile.memory.predicted_activation_bytes
    """
    r = resolve(source, dims, shapes)
    if isinstance(against, (str, PathLike)):
        # a path that opens no model (a typo, a folder) is the caller's error, not a section
        # that failed: nothing is written (the graph is read here, its weights when used)
        load_source(against, lazy=True)
    res = ReportResults(model=r, source=source, title=title, graph=graph, against=against,
                        max_nodes=max_nodes, max_views=max_views, budget_s=budget_s,
                        timeout=timeout)
    res.summary = _run(lambda: summarize(r.model, r.dims, r.shapes))
    if check:
        res.check = _run(lambda: run_check(r))
    if cost:
        res.cost = _run(lambda: run_cost(r.model, dims=r.dims, shapes=r.shapes))
    if tables:
        res.nodes = _run(lambda: nodes_table(r.model))
        res.initializers = _run(lambda: initializers_table(r.model))
        res.tensors = _run(lambda: tensors_table(r.model, r.dims, r.shapes))
    hist = _history_of(source)
    if history or (history is None and hist is not None and len(hist) > 1):
        res.history = hist if hist is not None else _no_history()
    if profile is not False and profile is not None:
        res.profile = _run(lambda: _profile(r, profile))
    if against is not None:
        res.comparison = _run(lambda: _comparison(r, against, compare or {}))
        res.diff = _run(lambda: diff(r, against))
    if precision is not None:
        res.precision = _run(lambda: _precision(r, precision))
    return res


@strict_keywords
def report_html(source: Any, *, title: str | None = None, graph: bool = True,
                tables: bool = True, check: bool = True, cost: bool = True,
                history: bool | None = None, profile: Any = False, against: Any = None,
                compare: Mapping[str, Any] | None = None, precision: Any = None,
                dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, max_nodes: int = 300,
                max_views: int = 300, budget_s: float = 120.0, timeout: float = 10.0) -> str:
    """The report of one model as one self-contained HTML document (see :func:`write_report`).

    Example:
        >>> text = report_html("sample:convnet", profile=True)
        >>> Path("convnet.html").write_text(text, encoding="utf-8")
    """
    return report_page(report_results(
        source, title=title, graph=graph, tables=tables, check=check, cost=cost,
        history=history, profile=profile, against=against, compare=compare,
        precision=precision, dims=dims, shapes=shapes, max_nodes=max_nodes,
        max_views=max_views, budget_s=budget_s, timeout=timeout))


@strict_keywords
def write_report(source: Any, path: str | Path, *, title: str | None = None, graph: bool = True,
                 tables: bool = True, check: bool = True, cost: bool = True,
                 history: bool | None = None, profile: Any = False, against: Any = None,
                 compare: Mapping[str, Any] | None = None, precision: Any = None,
                 dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None, max_nodes: int = 300,
                 max_views: int = 300, budget_s: float = 120.0,
                 timeout: float = 10.0) -> Path:
    """Write the report of ``source`` to ``path``: one HTML file that opens from disk.

    Args:
        source: a Lab (its current version, and its history), a path, a LabModel...
        path: the ``.html`` file to write (its folder must exist).
        title: the page title (default: the model's file name).
        graph, tables, check, cost: the sections on by default.
        history: the Lab's steps with their verification (None: when the Lab has steps).
        profile: True, a dict of :func:`onnx_lab.profile` keywords, or a Profile.
        against: another model: a comparison and a side-by-side diff.
        compare: keywords of :func:`onnx_lab.compare`.
        precision: ``"fp16"``... to run
            :func:`~onnx_lab.numerics.precision.find_precision`, or a PrecisionPlan.
        dims, shapes: values for dynamic dims.
        max_nodes, max_views, budget_s, timeout: pre-drawing limits (per view, views,
            seconds in all, seconds per layout).

    Returns:
        The path written. A section that fails is a note in the report, never a missing file.

    Raises:
        SaveError: the file cannot be written (WriteError), or it is the model, one of its
            data files or the `against` model (refused before any work).
        LabError: ``source`` cannot be opened.
        InputError: an unknown keyword (with its close matches).

    Example:
        >>> write_report(lab, "report.html", profile=True, against="model_fp16.onnx")
    """
    refuse_inputs(path, input_files([source, against]))  # before the work: it would replace one
    return write_report_results(report_results(
        source, title=title, graph=graph, tables=tables, check=check, cost=cost,
        history=history, profile=profile, against=against, compare=compare,
        precision=precision, dims=dims, shapes=shapes, max_nodes=max_nodes,
        max_views=max_views, budget_s=budget_s, timeout=timeout), path)


def write_report_results(res: ReportResults, path: str | Path) -> Path:
    """Write the page of ``res`` (from :func:`report_results`) to ``path``: what
    :func:`write_report` does once its sections are computed. ``onnx-lab report`` calls the two
    steps itself, to name on stderr the sections that could not be built
    (``res.failures()``): without them a report of a model with symbolic dims and no
    ``--dims`` was written with its cost, profile and comparison replaced by notes, and the
    command said only its size.

    Raises:
        SaveError: as :func:`write_report` (the path is the model, one of its data files or
            the `against` model; the file cannot be written).

    Example:
        >>> res = report_results(lab, profile=True)
        >>> [name for name, e in res.failures()]
        >>> write_report_results(res, "report.html")
    """
    inputs = input_files([res.source, res.against])
    refuse_inputs(path, inputs)
    return write_atomic(path, report_page(res), sources=inputs)


@strict_keywords
def diff_report_html(a: Any, b: Any, *, title: str | None = None, max_nodes: int = 300,
                     max_views: int = 300, budget_s: float = 120.0,
                     timeout: float = 10.0) -> str:
    """The side-by-side diff of two models as one self-contained HTML document
    (:func:`onnx_lab.render.report.diff_page`). ``a`` and ``b`` may be Labs, paths...; or
    ``a`` a :class:`~onnx_lab.numerics.diff.Diff` (``b`` is then ignored).

    Example:
        >>> text = diff_report_html("bert.onnx", "bert_fused.onnx")
    """
    if isinstance(a, Diff):
        return diff_page(a, title=title, max_nodes=max_nodes, max_views=max_views,
                         budget_s=budget_s, timeout=timeout)
    return diff_page(diff(a, b), a, b, title=title, max_nodes=max_nodes, max_views=max_views,
                     budget_s=budget_s, timeout=timeout)


@strict_keywords
def write_diff_report(a: Any, b: Any, path: str | Path, *, title: str | None = None,
                      max_nodes: int = 300, max_views: int = 300, budget_s: float = 120.0,
                      timeout: float = 10.0) -> Path:
    """Write :func:`diff_report_html` of ``a`` and ``b`` to ``path``.

    Example:
        >>> write_diff_report("bert.onnx", "bert_fused.onnx", "diff.html")
    """
    inputs = input_files([a.a, a.b] if isinstance(a, Diff) else [a, b])
    refuse_inputs(path, inputs)
    text = diff_report_html(a, b, title=title, max_nodes=max_nodes, max_views=max_views,
                            budget_s=budget_s, timeout=timeout)
    return write_atomic(path, text, sources=inputs)
