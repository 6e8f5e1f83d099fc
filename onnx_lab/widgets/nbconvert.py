"""Saved notebooks as reports: every onnx_lab widget exported as the static HTML of its last view.

Each widget's display carries a static ``text/html`` snapshot next to the widget view
(:meth:`onnx_lab.widgets._common.View._repr_mimebundle_`), which ``jupyter nbconvert --to
html`` uses when the notebook was saved without widget state. A notebook saved *with* widget
state (``nbconvert --execute``, or JupyterLab's *Save Widget State Automatically*) makes
nbconvert prefer the widget view instead, which needs the widget manager from a CDN and is
blank offline; and the display-time snapshot is the widget's first view, not its last.

:class:`LastViews` fixes both: it rebuilds each onnx_lab widget's view from the widget state
saved in the notebook (its last state: the graph shown, the selected node's panel, the tab
open, the tables) and leaves that static HTML as the output, with no script::

    jupyter nbconvert --to html --HTMLExporter.preprocessors=onnx_lab.widgets.nbconvert.LastViews nb.ipynb

or in Python :func:`export_html`. Other libraries' widgets are left as they are.

To make a plain ``jupyter nbconvert --to html`` do it, :func:`install_config` adds the
preprocessor to ``jupyter_nbconvert_config.json`` of an environment (``make setup`` does it for
the project's ``.venv``; elsewhere ``python -m onnx_lab.widgets.nbconvert --install-config``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbconvert.preprocessors import Preprocessor

from onnx_lab.core.outputs import write_atomic
from onnx_lab.errors import InputError
from onnx_lab.render._html import clean_html, esc_text
from onnx_lab.widgets._common import graph_snapshot, table_snapshot

__all__ = ["LastViews", "last_view_html", "export_html", "install_config"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_OURS = ("onnx-lab-widget", "onnx-lab-canvas")


def _ref(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith("IPY_MODEL_"):
        return value[len("IPY_MODEL_"):]
    return None


def _view_html(state: dict[str, Any], model_id: str, depth: int = 0) -> str:
    """Static HTML of one saved widget model and its children (hidden parts left out)."""
    entry = state.get(model_id)
    if entry is None or depth > 64:
        return ""
    s = entry.get("state", {})
    layout = state.get(_ref(s.get("layout")) or "", {}).get("state", {})
    if layout.get("display") == "none":
        return ""
    name = entry.get("model_name", "")
    if isinstance(s.get("svg"), str):  # the graph canvas
        return graph_snapshot(s["svg"], s.get("title") or "", s.get("details_html") or "")
    if isinstance(s.get("table_html"), str):  # a paged table (one model, see _common)
        return table_snapshot(s["table_html"], s.get("pos") or "")
    if name in ("HTMLModel", "HTMLMathModel"):
        return s.get("value") or ""
    kids = [_ref(c) for c in s.get("children", []) or []]
    kids = [k for k in kids if k]
    if name in ("TabModel", "AccordionModel", "StackModel"):
        i = s.get("selected_index")
        if i is None or not 0 <= i < len(kids):
            return ""
        titles = s.get("titles") or []
        title = titles[i] if i < len(titles) else ""
        return ((f"<div><b>{esc_text(str(title))}</b></div>" if title else "")
                + _view_html(state, kids[i], depth + 1))
    if kids:
        inner = "".join(_view_html(state, k, depth + 1) for k in kids)
        if not inner:
            return ""
        flow = "display:flex;flex-wrap:wrap;gap:4px" if name == "HBoxModel" else ""
        return f"<div style='{flow}'>{inner}</div>"
    return ""


def last_view_html(state: dict[str, Any], model_id: str) -> str | None:
    """The static HTML of the onnx_lab widget ``model_id`` from a notebook's saved widget
    state, or None when that model is not an onnx_lab widget (or not in the state)."""
    entry = state.get(model_id)
    if entry is None:
        return None
    classes = entry.get("state", {}).get("_dom_classes", []) or []
    if not any(c in classes for c in _OURS):
        return None
    kind = "GraphCanvas" if "onnx-lab-canvas" in classes else next(
        (c[len("onnx-lab-"):] for c in classes
         if c.startswith("onnx-lab-") and c not in _OURS), "widget")
    return (f"<div class='onnx-lab-snapshot onnx-lab-last-view' style='max-width:100%;"
            f"overflow:auto'><div style='font-size:11px;color:#777'>onnx_lab "
            f"{esc_text(kind)}: last view saved with the notebook</div>"
            + clean_html(_view_html(state, model_id)) + "</div>")


class LastViews(Preprocessor):
    """nbconvert preprocessor: onnx_lab widget outputs become the static HTML of their last
    view, rebuilt from the notebook's saved widget state (see the module docstring)."""

    def preprocess(self, nb: Any, resources: Any) -> tuple[Any, Any]:
        widgets = (nb.metadata.get("widgets") or {}).get(WIDGET_STATE) or {}
        state = widgets.get("state") or {}
        for cell in nb.cells:
            for out in cell.get("outputs", []) or []:
                data = out.get("data") or {}
                view = data.get(WIDGET_VIEW)
                if not view:
                    continue
                page = last_view_html(state, view.get("model_id", "")) if state else None
                if page is not None:
                    data["text/html"] = page
                if "text/html" in data and (page is not None or _is_ours(data)):
                    # The static view is what is shown: no widget manager, no CDN needed.
                    del data[WIDGET_VIEW]
        return nb, resources


def _is_ours(data: dict[str, Any]) -> bool:
    return "onnx-lab-snapshot" in str(data.get("text/html", ""))


def export_html(notebook: str | Path, out: str | Path | None = None) -> Path:
    """``jupyter nbconvert --to html`` with :class:`LastViews`: one HTML file per notebook
    whose onnx_lab widgets show their last views without a kernel or a network.

    Example:
        >>> export_html("analysis.ipynb")  # writes analysis.html next to it
    """
    import nbformat
    from nbconvert import HTMLExporter

    notebook = Path(notebook)
    out = Path(out) if out is not None else notebook.with_suffix(".html")
    nb = nbformat.read(str(notebook), as_version=4)
    exporter = HTMLExporter()
    exporter.register_preprocessor(LastViews, enabled=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {
        "name": notebook.stem, "path": str(notebook.parent)}})
    # a fresh temporary renamed over ``out``; never over the notebook itself
    write_atomic(out, body, sources={Path(os.path.realpath(notebook)): "the notebook"},
                 flag="the export")
    return out


PREPROCESSOR = "onnx_lab.widgets.nbconvert.LastViews"


def install_config(config_dir: str | Path | None = None) -> Path:
    """Add :class:`LastViews` to ``HTMLExporter.preprocessors`` in ``jupyter_nbconvert_config.json``
    of ``config_dir`` (default: this environment's ``{sys.prefix}/etc/jupyter``, which every
    ``jupyter`` command of the environment reads), keeping what the file already says.

    Returns the file's path. Running it again changes nothing.

    Example:
        >>> install_config()   # then: jupyter nbconvert --to html analysis.ipynb
    """
    import json
    import sys

    folder = Path(config_dir) if config_dir is not None else \
        Path(sys.prefix) / "etc" / "jupyter"
    path = folder / "jupyter_nbconvert_config.json"
    config: dict[str, Any] = {}
    if path.exists():
        try:
            config = json.loads(path.read_text(encoding="utf-8") or "{}")
        except json.JSONDecodeError as e:
            raise InputError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}).",
                             fix="Fix or remove that file, then run this again.") from e
    exporter = config.setdefault("HTMLExporter", {})
    pre = list(exporter.get("preprocessors") or [])
    if PREPROCESSOR not in pre:
        exporter["preprocessors"] = [*pre, PREPROCESSOR]
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(config, indent=2) + "\n")
    return path


if __name__ == "__main__":  # python -m onnx_lab.widgets.nbconvert --install-config [DIR]
    import sys as _sys

    if len(_sys.argv) >= 2 and _sys.argv[1] == "--install-config":
        print(install_config(_sys.argv[2] if len(_sys.argv) > 2 else None))
    else:
        raise SystemExit("usage: python -m onnx_lab.widgets.nbconvert --install-config [DIR]")
