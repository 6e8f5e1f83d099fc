"""HTML is built by escaping helpers only: a static check of the package's source.

An f-string that writes HTML (an opening or closing tag) may interpolate only values that
are escaped or markup the package built: calls of ``onnx_lab.render._html`` helpers
(``esc_text``, ``esc_attr``, ``safe_url``, ``tag``, ``join_html``), calls of the package's
HTML builders (functions named ``*_html``, themselves checked here), numbers (a numeric
format spec such as ``:.3f`` or ``:,``, or ``int``/``len``), module constants (UPPER_CASE),
local variables every assignment of which is such a value (a loop over a literal binds its
items), and parameters annotated ``Markup`` (their callers pass what the helpers built; a
``Markup(x)`` call must itself wrap a proven value). A value read from a
parameter, an attribute or a subscript (``d['name']``, ``p.line``) fails the test: wrap it
in ``esc_text``/``esc_attr``.

The checker is tested both ways below: it flags the injection that was found
(``p['line']`` in the details panel) and accepts the escaped forms.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hostile_models import SECOND_WALL

import onnx_lab
from onnx_lab.render._html import esc_attr, esc_text, join_html, safe_url, tag

PKG = Path(onnx_lab.__file__).resolve().parent
# The helpers themselves are the trusted base (tag names and attribute names are validated).
EXEMPT = {PKG / "render" / "_html.py"}
HELPERS = {"esc_text", "esc_attr", "esc_label", "safe_url", "tag", "join_html", "clean_svg",
           "clean_html", "short"}  # short: widgets._common, escapes (tested below)
NUMERIC_CALLS = {"int", "len", "float", "round", "format_bytes"}
# Tags of HTML, SVG and graphviz HTML-like labels: "<Profile 3 runs>" is a repr, not HTML.
_TAGS = ("a|b|i|u|br|hr|p|div|span|table|thead|tbody|tr|td|th|ul|ol|li|h[1-6]|details|"
         "summary|button|input|label|select|option|pre|code|small|style|script|section|nav|"
         "header|main|meta|title|html|head|body|img|svg|g|text|font|em|strong|sup|sub|"
         "caption|col|colgroup|!doctype|iframe|object|embed|link|form|textarea|source")
HTML_TAG = re.compile(rf"<(/|({_TAGS})[\s>/])", re.IGNORECASE)
_NUM_SPEC = re.compile(r"[^a-zA-Z]*[bdeEfFgGnoxX%]\Z|.*,.*\Z")


def _spec(fv: ast.FormattedValue) -> str | None:
    if fv.format_spec is None:
        return None
    return "".join(v.value for v in fv.format_spec.values if isinstance(v, ast.Constant))


def _fname(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


class _Checker:
    """Decides whether an expression is markup-safe within one function body."""

    def __init__(self, scope: ast.AST) -> None:
        self.assigns: dict[str, list[ast.AST | None]] = {}
        loops: list[ast.For | ast.comprehension] = []
        for n in ast.walk(scope):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    self._target(t, n.value)
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                self._target(n.target, n.value)
            elif isinstance(n, (ast.For, ast.comprehension)):
                loops.append(n)
            elif isinstance(n, (ast.FunctionDef, ast.Lambda)) and n is not scope:
                pass
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                    isinstance(n.func.value, ast.Name) and n.func.attr in ("append", "extend",
                                                                         "insert"):
                arg = n.args[-1] if n.args else None
                if n.func.attr == "extend" and arg is not None:
                    arg = ast.List(elts=[ast.Starred(value=arg)])
                self.assigns.setdefault(n.func.value.id, []).append(arg)
        for n in loops:  # after the assignments: a loop may iterate a local literal
            self._loop(n.target, n.iter)
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = scope.args
            for p in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
                if p is None:
                    continue
                # A parameter is unknown, unless annotated Markup: its callers pass markup
                # the helpers built (an explicit Markup(...) is checked where it is made).
                ann = ast.unparse(p.annotation) if p.annotation is not None else ""
                marked = ann.replace(" ", "") in ("Markup", "Markup|None", "str|Markup")
                self.assigns.setdefault(p.arg, []).append(ast.Constant("") if marked else None)
        self.busy: set[str] = set()

    def _target(self, t: ast.AST, value: ast.AST) -> None:
        if isinstance(t, ast.Name):
            self.assigns.setdefault(t.id, []).append(value)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:  # unpacking: safe only when the value is a literal of safe items
                self._target(e, value if isinstance(value, (ast.Tuple, ast.List)) else None)

    def _loop(self, target: ast.AST, it: ast.AST) -> None:
        # A loop over a literal (or a local name assigned only literals) binds each target
        # name to the matching items; over anything else the names are unknown.
        items = self._literal_items(it)
        if isinstance(target, ast.Name):
            self.assigns.setdefault(target.id, []).extend(items if items is not None else [None])
            return
        for i, n in enumerate(target.elts if isinstance(target, (ast.Tuple, ast.List)) else []):
            if not isinstance(n, ast.Name):
                continue
            if items is None:
                self.assigns.setdefault(n.id, []).append(None)
                continue
            for x in items:
                ok = isinstance(x, (ast.Tuple, ast.List)) and len(x.elts) == len(target.elts)
                self.assigns.setdefault(n.id, []).append(x.elts[i] if ok else None)

    def _literal_items(self, it: ast.AST, depth: int = 0) -> list[ast.AST] | None:
        if isinstance(it, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in it.elts):
            return list(it.elts)
        if isinstance(it, ast.Name) and depth < 3:
            vals = self.assigns.get(it.id, [])
            out: list[ast.AST] = []
            for v in vals:
                sub = None if v is None else self._literal_items(v, depth + 1)
                if sub is None:
                    return None
                out += sub
            return out if vals else None
        return None

    def safe(self, e: ast.AST | None) -> bool:  # noqa: C901 - one case per node type
        if e is None:
            return False
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.JoinedStr):
            return all(self.safe_value(v) for v in e.values if isinstance(v, ast.FormattedValue))
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            return self.safe(e.left) and self.safe(e.right)
        if isinstance(e, ast.IfExp):
            return self.safe(e.body) and self.safe(e.orelse)
        if isinstance(e, ast.BoolOp):
            return all(self.safe(v) for v in e.values)
        if isinstance(e, (ast.List, ast.Tuple)):
            return all(self.safe(x.value if isinstance(x, ast.Starred) else x) for x in e.elts)
        if isinstance(e, (ast.ListComp, ast.GeneratorExp)):
            return self.safe(e.elt)
        if isinstance(e, ast.Starred):
            return self.safe(e.value)
        if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice):
            return self.safe(e.value)  # a slice of markup (svg[svg.find("<svg"):])
        if isinstance(e, ast.Name):
            if e.id.isupper() or (e.id.startswith("_") and e.id[1:].isupper()):
                return True  # a module constant
            if e.id in self.busy:
                return True  # a loop of assignments: decided by the others
            vals = self.assigns.get(e.id)
            if not vals:
                return False
            self.busy.add(e.id)
            try:
                return all(self.safe(v) for v in vals)
            finally:
                self.busy.discard(e.id)
        if isinstance(e, ast.Call):
            name = _fname(e)
            if name == "Markup":  # declares its argument markup: it must be proven so
                return len(e.args) == 1 and self.safe(e.args[0])
            if name in HELPERS or name.endswith("_html") or name in NUMERIC_CALLS:
                return True
            # markup.replace("\n", "<br>"): a safe string changed by constants stays safe
            if isinstance(e.func, ast.Attribute) and name in ("replace", "strip", "rstrip", "upper", "lower") \
                    and all(isinstance(a, ast.Constant) for a in e.args):
                return self.safe(e.func.value)
            # "sep".join(items) with a constant separator and safe items
            if name == "join" and isinstance(e.func, ast.Attribute) and \
                    isinstance(e.func.value, ast.Constant) and len(e.args) == 1:
                return self.safe(e.args[0])
            return False
        return False

    def safe_value(self, fv: ast.FormattedValue) -> bool:
        spec = _spec(fv)
        if spec and _NUM_SPEC.match(spec) and fv.conversion == -1:
            return True  # a number: a str there raises instead of printing
        return fv.conversion in (-1,) and self.safe(fv.value)


def violations(source: str, filename: str = "<src>") -> list[str]:
    """``file:line: code`` of every HTML f-string with a value that is not proven safe."""
    tree = ast.parse(source)
    out: list[str] = []
    scopes: list[ast.AST] = [tree] + [n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    seen: set[int] = set()
    # Innermost scope first: a nested function's f-strings are judged by its own names.
    for scope in reversed(scopes):
        checker = _Checker(scope)
        for n in ast.walk(scope):
            if not isinstance(n, ast.JoinedStr) or id(n) in seen:
                continue
            seen.add(id(n))
            text = "".join(v.value for v in n.values if isinstance(v, ast.Constant))
            if not HTML_TAG.search(text):
                continue
            bad = [v for v in n.values if isinstance(v, ast.FormattedValue)
                   and not checker.safe_value(v)]
            for v in bad:
                out.append(f"{filename}:{v.lineno}: {{{ast.unparse(v.value)}}} in an HTML "
                           "f-string: wrap it in esc_text/esc_attr (onnx_lab.render._html)")
        for n in ast.walk(scope):
            if isinstance(n, ast.Call) and _fname(n) == "Markup" and id(n) not in seen:
                seen.add(id(n))
                if not checker.safe(n):
                    out.append(f"{filename}:{n.lineno}: Markup({ast.unparse(n.args[0]) if n.args else ''}) "
                               "declares a value markup that is not built by the helpers")
    return out


def _package_files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if p not in EXEMPT)


def test_no_unescaped_value_in_html_fstrings() -> None:
    found = []
    for p in _package_files():
        found += violations(p.read_text(encoding="utf-8"), str(p.relative_to(PKG.parent)))
    assert not found, "\n".join(found)


def test_no_percent_or_format_html() -> None:
    # "%s" % x and "{}".format(x) into markup escape the f-string rule: none in the package.
    bad = []
    for p in _package_files():
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            fmt = None
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and \
                    isinstance(n.left, ast.Constant) and isinstance(n.left.value, str):
                fmt = n.left.value
            elif isinstance(n, ast.Call) and _fname(n) == "format" and \
                    isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Constant):
                fmt = str(n.func.value.value)
            if fmt is not None and HTML_TAG.search(fmt):
                bad.append(f"{p.relative_to(PKG.parent)}:{n.lineno}")
    assert not bad, bad


# ----------------------------------------------------------------------------- the checker
_UNSAFE = [
    # the injection that was found: a metadata value straight into the details panel
    "def f(p):\n    return f\"<span>{p['line']}</span>\"\n",
    "def f(d):\n    x = d.name\n    return f\"<td title='{x}'>\"\n",
    "def f(names):\n    rows = ''.join(f'<li>{n}</li>' for n in names)\n    return rows\n",
    "def f(n):\n    return f'<b>{n!r}</b>'\n",
    "def f(n):\n    return f'<b>{n:>10}</b>'\n",
    "def f(n):\n    parts = []\n    parts.append(n)\n    return f'<div>{\"\".join(parts)}</div>'\n",
    "def f(ns):\n    for n in ns:\n        return f'</td>{n}'\n",
    "def f(h):\n    return tag('td', Markup(h))\n",
    "def f(r):\n    cells = [(r.a, 'num'), ('', '')]\n"
    "    return ''.join(f\"<td class='{c}'>{h}</td>\" for h, c in cells)\n",
]
_SAFE = [
    "def f(p):\n    return f\"<span>{esc_text(p['line'])}</span>\"\n",
    "def f(d):\n    x = esc_attr(d.name)\n    return f\"<td title='{x}'>\"\n",
    "def f(names):\n    rows = ''.join(f'<li>{esc_text(n)}</li>' for n in names)\n"
    "    return f'<ul>{rows}</ul>'\n",
    "def f(c):\n    return f\"<b>{c['n']:,}</b> nodes, {c['t']:.3f} ms <i>{len(c)}</i>\"\n",
    "def f(x):\n    return f'<div>{summary_html(x)}{COLOUR}</div>'\n",
    "def f(ns):\n    parts = ['<ul>']\n    parts.append(tag('li', ns[0]))\n"
    "    return f'<div>{\"\".join(parts)}</div>'\n",
    "def f(n):\n    return f'<Profile {n} runs>'\n",  # a repr, not HTML
    "def f(r):\n    cells = [(esc_text(r.a), 'num'), ('', '')]\n"
    "    return ''.join(f\"<td class='{c}'>{h}</td>\" for h, c in cells)\n",
]


@pytest.mark.parametrize("src", _UNSAFE)
def test_checker_flags_unescaped_values(src: str) -> None:
    assert violations(src), src


@pytest.mark.parametrize("src", _SAFE)
def test_checker_accepts_escaped_values(src: str) -> None:
    assert not violations(src), violations(src)


# ----------------------------------------------------------------------------- the helpers
PAYLOADS = ["<img src=x onerror=alert(1)>", "</script><script>alert(1)</script>",
            "\"><svg onload=alert(1)>", "'; alert(1); '", "a\nb\tc\rd", "\x01\x1f\x7f"]


@pytest.mark.parametrize("p", PAYLOADS)
def test_helpers_leave_no_markup(p: str) -> None:
    for out in (esc_text(p), esc_attr(p), tag("td", p, title=p, data_key=p),
                join_html(" · ", [p, p])):
        inner = out[out.index(">") + 1:out.rindex("<")] if out.startswith("<td") else out
        assert "<" not in inner and ">" not in inner.replace("&gt;", "")
        assert "\"" not in esc_attr(p) and "'" not in esc_attr(p) and "\n" not in esc_attr(p)
    assert not any(c in esc_text(p) for c in "\x01\x1f\x7f")


def test_tag_keeps_markup_children_and_refuses_handlers() -> None:
    inner = tag("b", "x<y")
    assert tag("td", inner, class_="c") == '<td class="c"><b>x&lt;y</b></td>'
    with pytest.raises(ValueError):
        tag("img", src="#", onerror="alert(1)")
    with pytest.raises(ValueError):
        tag("img onerror=alert(1)")


@pytest.mark.parametrize("url,ok", [
    ("#summary", True), ("data:image/png;base64,iVBORw0KGgo=", True),
    ("javascript:alert(1)", False), ("JaVaScRiPt:alert(1)", False), ("http://x.test/a", False),
    ("data:text/html;base64,PHNjcmlwdD4=", False), ("#a\"onmouseover=alert(1)", False),
    ("//evil.test", False), ("data:image/svg+xml,<svg onload=alert(1)>", False)])
def test_safe_url(url: str, ok: bool) -> None:
    assert (safe_url(url) == url) is ok
    assert tag("a", "x", href=url).startswith('<a href="' + (url if ok else "#") + '"')


def test_short_escapes() -> None:
    from onnx_lab.widgets._common import short

    assert short("<img src=x onerror=alert(1)>", 400) == "&lt;img src=x onerror=alert(1)&gt;"
    assert short(["<b>", "'"]) == "&lt;b&gt;, &#x27;"


def test_clean_html_removes_what_runs() -> None:
    from onnx_lab.render._html import clean_html, clean_svg

    dirty = ("<a href='#x'>ok</a><a href=\"javascript:alert(1)\">b</a><img src=x "
             "onerror=alert(1)><script>alert(1)</script><svg onload=\"x\"><div style=\""
             "background:url(http://x.test)\">t</div><img src=\"data:image/png;base64,AA==\">"
             "<foreignObject><body onload=x></foreignObject><iframe src=//x.test></iframe>")
    out = clean_html(dirty)
    for bad in ("javascript:", "onerror", "onload", "<script", "url(", "<iframe", "x.test",
                "foreignObject"):
        assert bad not in out, (bad, out)
    for kept in ('<a href="#x">ok</a>', "data:image/png;base64,AA==", ">t</div>"):
        assert kept in out, (kept, out)
    # Text inside an attribute value is text: it is neither cut nor taken for an attribute.
    g = clean_html('<g id="n:&lt;img src=x onerror=alert(1)&gt;" class="node onnx-op"></g>')
    assert g == '<g id="n:&lt;img src=x onerror=alert(1)&gt;" class="node onnx-op"></g>'
    svg = clean_svg("<?xml version='1.0'?><!DOCTYPE svg><svg><g id='n:a'><title>a</title>"
                    "<a xlink:href=\"http://x.test\"><text>a</text></a></g></svg>")
    assert svg.startswith("<svg>") and "x.test" not in svg and '<g id="n:a">' in svg


@pytest.mark.parametrize("name", SECOND_WALL)
def test_clean_html_drops_animations_forms_and_styles_that_load(name: str) -> None:
    from onnx_lab.render._html import clean_html

    out = clean_html(SECOND_WALL[name])
    for bad in ("javascript:", "<set", "<animate", "<form", "x.test", "style="):
        assert bad not in out, (bad, out)
    if name != "form":  # (a dropped element goes with its content)
        assert "click" in out
    # the package's own styles stay
    assert clean_html("<div style='border-left:4px solid #c33;max-width:100%'>x</div>") == \
        '<div style="border-left:4px solid #c33;max-width:100%">x</div>'


def test_scripts_never_parse_strings_as_markup() -> None:
    # The canvas and the report's host set model strings with textContent; markup from
    # Python goes through canvas.js's setMarkup (parsed inert, cleaned). No other door.
    static = [*(PKG / "widgets" / "static").glob("*.js"), *(PKG / "render" / "static").glob("*.js")]
    assert static
    door = re.compile(r"\.innerHTML\b|\.outerHTML\b|insertAdjacentHTML|document\.write|"
                      r"\beval\(|new Function\(|setTimeout\(\s*[\"'`]")
    bad = [f"{p.name}:{i}" for p in static
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if door.search(line)]
    assert not bad, bad


def test_written_pages_carry_a_csp_with_their_script_hashes() -> None:
    import base64
    import hashlib

    import pandas as pd

    from onnx_lab.render.audit import audit_index_html

    page = audit_index_html(pd.DataFrame({"model": ["m"], "status": ["ok"]}))
    meta = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert meta and "default-src 'none'" in meta.group(1) and "connect-src 'none'" in meta.group(1)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    assert scripts
    for js in scripts:
        h = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode()
        assert f"'sha256-{h}'" in meta.group(1)
    assert "'unsafe-inline'" not in meta.group(1).split("script-src", 1)[1].split(";")[0]
