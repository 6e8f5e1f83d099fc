"""DOT text for a :class:`~onnx_lab.render.graph.GraphView`, and the ``dot`` binary.

Layout runs the Graphviz binary through ``subprocess`` with a timeout (the python ``graphviz``
package adds nothing we need and cannot bound the time). A layout that exceeds the timeout is
retried with cheaper settings (fewer network-simplex and crossing-minimization iterations,
straight edges), then with ``sfdp``; every downgrade is reported. SVG is cached in memory by a
hash of the DOT source, so re-showing a view costs nothing. ``dot`` is looked up on PATH at each
call, so a notebook keeps working (with an HTML fallback) when Graphviz is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from onnx_lab.analysis.summary import op_family
from onnx_lab.errors import RenderError
from onnx_lab.render._html import _CONTROL_PICTURES, dot_safe, dot_text, esc_label
from onnx_lab.render.graph import DrawNode, GraphView

logger = logging.getLogger(__name__)

__all__ = ["INSTALL_HINT", "find_dot", "to_dot", "layout", "run_graphviz", "Layout",
           "ATTEMPTS", "clear_cache", "in_background"]

INSTALL_HINT = ("Install Graphviz to draw graphs: apt-get install graphviz (Debian/Ubuntu), "
                "brew install graphviz (macOS) or conda install -c conda-forge graphviz.")

# (name, engine, extra command-line settings), tried in order when the previous one times out.
ATTEMPTS: list[tuple[str, str, tuple[str, ...]]] = [
    ("dot", "dot", ()),
    ("dot (cheap settings)", "dot",
     ("-Gnslimit=2", "-Gnslimit1=2", "-Gmclimit=0.2", "-Gsplines=false", "-Gsearchsize=10")),
    ("sfdp", "sfdp", ("-Gsplines=false", "-Goverlap=scale")),
]
# Views larger than this skip the full-quality attempt: it would only burn the timeout.
CHEAP_FROM_ELEMENTS = 900

FAMILY_COLORS = {
    "convolution": "#cfe2f3", "normalization": "#d9ead3", "activation": "#fce5cd",
    "pooling": "#d0e0e3", "matmul/gemm": "#c9daf8", "shape ops": "#eeeeee",
    "control flow": "#ead1dc", "quantization": "#fff2cc", "custom domain": "#f4cccc",
    "other": "#f3f3f3",
}
HIGHLIGHT_COLOR = "#d62728"

_CACHE: OrderedDict[str, tuple[str, str, tuple[str, ...]]] = OrderedDict()
_CACHE_SIZE = 64
# Views whose full-quality attempt ran past its timeout in this process: timeout -> the
# fewest elements of such a view. A view at least about as large, with no longer a timeout,
# starts with the cheap settings (the Explorer's expands of one overview would each burn the
# whole timeout first).
_SLOW: dict[float, int] = {}


def clear_cache() -> None:
    """Forget cached SVGs and slow views (benchmarks time cold layouts)."""
    _CACHE.clear()
    _SLOW.clear()


_THREAD = threading.local()
_BACKGROUND_NICE = 10  # how much lower a layout drawn ahead runs than one a user waits for


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """Layouts run by this thread inside the block are drawn ahead of need: their Graphviz
    process runs at a lower CPU priority, so a layout a user waits for is not slowed by them.

    Example:
        >>> with in_background():
        ...     lab.render(collapse="auto", expand="/h.3")
    """
    before = getattr(_THREAD, "background", False)
    _THREAD.background = True
    try:
        yield
    finally:
        _THREAD.background = before


def find_dot() -> str | None:
    """Path of the ``dot`` binary on PATH now, or None."""
    return shutil.which("dot")


def _q(s: str) -> str:
    """A DOT node name: one to one with ``s`` (:func:`dot_safe`), quoted (:func:`_qt`)."""
    return _qt(dot_safe(s))


def _qt(s: str) -> str:
    """A DOT double-quoted string of text (a label, a tooltip). ``&`` as ``&amp;``: graphviz
    reads entities in labels and tooltips and writes entity-looking text unchanged into the
    SVG, so a name ``&lt;b&gt;`` would show as ``<b>``. Control characters as their pictures,
    a text past :data:`~onnx_lab.render._html.DOT_MAX_CHARS` cut (:func:`dot_text`: shown as
    it reads, without the hash a node name needs)."""
    s = dot_text(s).replace("&", "&amp;")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _qid(s: str) -> str:
    """A DOT string graphviz writes back unchanged into the SVG's ``id``: ``&`` (graphviz
    keeps entity-looking text as it is), newlines and carriage returns (``\\n`` would come
    back as two characters) as character references, other control characters as their
    pictures (:func:`dot_safe`: a NUL cannot be in an SVG at all); the canvas maps the id to
    its key. ``s`` is already :func:`dot_safe` (the id is ``"n:" + dot_safe(key)``, so the
    page reads back the key's own form, hash included)."""
    s = s.translate(_CONTROL_PICTURES).replace("&", "&amp;").replace("\\", "\\\\") \
        .replace('"', '\\"')
    return '"' + s.replace("\n", "&#10;").replace("\r", "&#13;") + '"'


_TITLE_GAP = '<BR/><FONT POINT-SIZE="2"> </FONT><BR/>'


def _html_label(title: str, lines: list[str], value_text: str | None, bold: bool = True) -> str:
    parts = [f'<FONT POINT-SIZE="8">{esc_label(ln)}</FONT>' for ln in lines if ln]
    if value_text:
        parts.append(f'<FONT POINT-SIZE="9"><B>{esc_label(value_text)}</B></FONT>')
    head = f"<B>{esc_label(title)}</B>" if bold else esc_label(title)
    if not parts:
        return f"<{head}>"
    # graphviz spaces the smaller lines by their own size: an underscore of the title
    # ('gpu_0/data_0') touched the shape line below. A 2 pt line between them parts them.
    return "<" + head + _TITLE_GAP + "<BR/>".join(parts) + ">"


def _node_stmt(n: DrawNode) -> str:
    attrs: dict[str, str] = {}
    raw: dict[str, str] = {"label": _html_label(n.title, n.lines, n.value_text,
                                                bold=n.kind in ("op", "box"))}
    if n.kind == "op":
        fam = op_family(n.op_type or "", "")
        attrs["fillcolor"] = n.fill or FAMILY_COLORS.get(fam, FAMILY_COLORS["other"])
    elif n.kind == "box":
        attrs.update(shape="box", style="filled,bold", peripheries="2",
                     fillcolor=n.fill or "#fbfbf3", color="#6d6d4e")
    elif n.kind == "input":
        attrs.update(shape="invhouse", style="filled", fillcolor=n.fill or "#d5f5e3",
                     color="#2e7d32")
    elif n.kind == "outer":
        attrs.update(shape="invhouse", style="filled,dashed", fillcolor="#eef7f0",
                     color="#2e7d32")
    elif n.kind == "output":
        attrs.update(shape="house", style="filled", fillcolor=n.fill or "#fdebd0",
                     color="#b9770e")
    elif n.kind == "weight":
        attrs.update(shape="note", style="filled", fillcolor="#f9f9f9", color="#999999",
                     fontsize="8")
    elif n.kind == "stub":
        attrs.update(shape="box", style="dashed,rounded", color="#999999", fontcolor="#777777",
                     fontsize="9")
        raw["label"] = _qt(n.title)
    if n.font_color:
        attrs["fontcolor"] = n.font_color
    if n.outline:
        attrs["color"] = n.outline
        attrs["penwidth"] = "3"
    if n.tooltip:
        attrs["tooltip"] = n.tooltip
    # The SVG <g> of each element carries its key and kind: the graph canvas maps clicks,
    # search hits and focus requests to node ids through them.
    attrs["id"] = "n:" + dot_safe(n.key)
    attrs["class"] = f"onnx-{n.kind}"
    body = ", ".join([f"{k}={v}" for k, v in raw.items()] +
                     [f"{k}={_qid(v) if k == 'id' else _qt(v)}" for k, v in attrs.items()])
    return f"{_q(n.key)} [{body}];"


# Edge labels are virtual nodes in dot's layout (its cost grows fast with them); from this many
# drawn elements on, shapes become xlabels, placed after layout: 3-6x faster on 200 elements.
XLABELS_FROM = 80


def to_dot(view: GraphView, *, rankdir: str = "TB") -> str:
    """DOT source of a view: clusters as nested subgraphs, HTML-like labels, a legend."""
    # An expanded scope (a frame among boxes) needs newrank, or dot ranks the frame on its own
    # and may float it above its producers. newrank with edge labels is slow (4-5 s for 80
    # elements), with xlabels it is not.
    mixed = bool(view.clusters) and any(n.kind == "box" for n in view.nodes.values())
    label_attr = "xlabel" if mixed or len(view.nodes) >= XLABELS_FROM else "label"
    out = [
        "digraph onnx_lab {",
        f'  graph [rankdir={rankdir}, fontname="Helvetica", fontsize=11, nodesep=0.25, '
        'ranksep=0.3, bgcolor="white", labelloc=t, labeljust=l'
        + (", newrank=true];" if mixed else "];"),
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, '
        'color="#5b6b7f", fillcolor="#f3f3f3", margin="0.08,0.03", height=0.3];',
        '  edge [fontname="Helvetica", fontsize=8, color="#7a7a7a", fontcolor="#555555", '
        'arrowsize=0.6];',
    ]
    if view.title:
        out.append(f"  label={_qt(view.title)};")
    children: dict[str | None, list[str]] = {}
    for c in view.clusters.values():
        children.setdefault(c.parent, []).append(c.key)
    members: dict[str | None, list[str]] = {}
    for n in view.nodes.values():
        members.setdefault(n.cluster, []).append(_node_stmt(n))

    def emit(cluster: str | None, indent: str) -> None:
        for stmt in members.get(cluster, ()):
            out.append(indent + stmt)
        for child in children.get(cluster, ()):
            c = view.clusters[child]
            cid = hashlib.sha1(child.encode()).hexdigest()[:10]
            out.append(f'{indent}subgraph "cluster_{cid}" {{')
            out.append(f'{indent}  label={_qt(c.label)}; tooltip={_qt(c.key)}; style="rounded,'
                       f'dashed"; color="#9aa5b1"; fontsize=9; fontcolor="#555555";')
            emit(child, indent + "  ")
            out.append(f"{indent}}}")

    emit(None, "  ")
    for e in view.edges:
        attrs = []
        if e.label:
            attrs.append(f"{label_attr}={_qt(e.label)}")
        if e.dashed:
            attrs.append('style="dashed"')
        src, dst = e.src, e.dst
        if e.backward:
            src, dst = dst, src
            attrs.append("dir=back")
        if e.tensors and e.tensors[0]:
            attrs.append(f"tooltip={_qt(', '.join(e.tensors))}")
        out.append(f"  {_q(src)} -> {_q(dst)}" + (f" [{', '.join(attrs)}];" if attrs else ";"))
    if view.legend is not None:
        out.append(f'  "legend:" [shape=plaintext, style="", margin=0, '
                   f"label={view.legend.legend_label()}];")
    if getattr(view, "aliases", None):
        rows = "".join(f'<TR><TD ALIGN="LEFT"><B>{esc_label(a)}</B></TD><TD ALIGN="LEFT">{esc_label(x)}</TD></TR>'
                       for a, x in view.aliases.items())
        out.append('  "aliases:" [shape=plaintext, style="", margin=0, fontsize=8, '
                   'label=<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0">'
                   f'<TR><TD COLSPAN="2" ALIGN="LEFT"><B>dims</B></TD></TR>{rows}</TABLE>>];')
    out.append("}")
    return "\n".join(out) + "\n"


def run_graphviz(source: str, fmt: str = "svg", *, engine: str = "dot",
                 args: tuple[str, ...] = (), timeout: float = 10.0) -> bytes:
    """Run Graphviz on ``source`` and return the ``fmt`` output.

    Raises:
        RenderError: no ``dot`` on PATH, or Graphviz failed (its message included).
        subprocess.TimeoutExpired: the layout took longer than ``timeout`` (the process is
            killed first).
    """
    exe = find_dot()
    if exe is None:
        raise RenderError("The Graphviz 'dot' binary is not on PATH.", fix=INSTALL_HINT)
    cmd = [exe, f"-K{engine}", f"-T{fmt}", *args]
    background = getattr(_THREAD, "background", False)
    nice = shutil.which("nice") if background else None
    if nice:
        # lowered before dot starts: ``nice`` execs it in the same process (a priority set
        # after the start left dot at the caller's for its first moments)
        cmd = [nice, "-n", str(_BACKGROUND_NICE), *cmd]
    try:
        with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as proc:
            if background and not nice and hasattr(os, "setpriority"):
                with contextlib.suppress(OSError):  # (it may have ended already)
                    os.setpriority(os.PRIO_PROCESS, proc.pid,
                                   os.getpriority(os.PRIO_PROCESS, 0) + _BACKGROUND_NICE)
            try:
                out, err = proc.communicate(source.encode("utf-8"), timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
    except OSError as e:
        raise RenderError(f"Could not run {exe!r}: {e}.", fix=INSTALL_HINT) from e
    if proc.returncode != 0 or not out:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        raise RenderError(f"Graphviz ({engine}) failed: {lines[-1] if lines else 'no output'}.",
                          fix="Report this view (Rendering.dot holds the source).")
    return out


@dataclass
class Layout:
    """Result of :func:`layout`: the SVG (or None), what produced it, and notes."""

    svg: str | None
    engine: str | None = None
    args: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False


def layout(source: str, *, timeout: float = 10.0, elements: int = 0) -> Layout:
    """SVG of ``source``: cached, else ``dot`` with the fallback chain; never raises for time.

    Args:
        timeout: seconds per attempt.
        elements: number of drawn elements (very large views start with cheap settings).
    """
    key = hashlib.sha256(source.encode("utf-8")).hexdigest()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        svg, engine, args = _CACHE[key]
        return Layout(svg, engine, args, cached=True)
    if find_dot() is None:
        return Layout(None, notes=["No SVG: the Graphviz 'dot' binary is not on PATH. "
                                   + INSTALL_HINT])
    res = Layout(None)
    t0 = time.perf_counter()
    attempts = ATTEMPTS
    slow = [e for t, e in _SLOW.items() if t >= timeout and 0 < e <= elements * 1.25]
    if elements > CHEAP_FROM_ELEMENTS:
        attempts = ATTEMPTS[1:]
        res.notes.append(f"{elements} drawn elements: laid out with cheap dot settings "
                         "(nslimit/mclimit, straight edges) from the start.")
    elif slow:
        attempts = ATTEMPTS[1:]
        res.notes.append(f"a view of {min(slow)} elements ran past the {timeout:g} s timeout "
                         f"at full quality: these {elements} laid out with cheap dot settings "
                         "(nslimit/mclimit, straight edges) from the start.")
    for i, (name, engine, args) in enumerate(attempts):
        try:
            out = run_graphviz(source, "svg", engine=engine, args=args, timeout=timeout)
        except subprocess.TimeoutExpired:
            nxt = attempts[i + 1][0] if i + 1 < len(attempts) else None
            msg = f"{name} exceeded the {timeout:g} s timeout"
            res.notes.append(msg + (f"; retried with {nxt}." if nxt else
                                    "; no SVG. Draw fewer nodes (around=, collapse='auto', "
                                    "max_nodes=) or raise timeout="))
            logger.info(msg)
            if engine == "dot" and not args and elements:
                _SLOW[timeout] = min(elements, _SLOW.get(timeout, elements))
            continue
        except RenderError as e:
            # A Graphviz error (not a timeout) on this view: the next engine may still cope.
            nxt = attempts[i + 1][0] if i + 1 < len(attempts) else None
            res.notes.append(f"{name} failed ({e.problem})" + (f"; retried with {nxt}." if nxt
                                                               else "; no SVG."))
            logger.warning("graphviz failed: %s", e)
            continue
        res.svg, res.engine, res.args = out.decode("utf-8", "replace"), engine, args
        _CACHE[key] = (res.svg, engine, args)
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        break
    res.seconds = time.perf_counter() - t0
    return res
