"""The only way HTML is built in onnx_lab: escape every value, in its context.

Every string in a model file is hostile (a node named ``<img src=x onerror=...>``), and so is
everything derived from one (module paths, ``file:line``, error messages). Markup is therefore
built from the package's own constant text plus values passed through these helpers:

- :func:`esc_text` for text between tags, :func:`esc_attr` for a quoted attribute value;
- :func:`safe_url` for ``href``/``src``: only ``#anchors`` and ``data:image/...;base64`` the
  package made, anything else becomes ``#``;
- :func:`tag` builds one element (children escaped unless they are :class:`Markup`, the
  result of these helpers), :func:`join_html` joins fragments.

``tests/render/test_html_safety.py`` reads the package's source and fails on an f-string that
writes HTML around a value these helpers did not produce.

Example:
    >>> tag("td", "<b>", title="a\\"b")
    '<td title="a&quot;b">&lt;b&gt;</td>'
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable, Sequence
from html.parser import HTMLParser
from typing import Any

__all__ = ["Markup", "esc_text", "esc_attr", "esc_label", "safe_url", "tag", "join_html",
           "clean_html", "clean_svg", "inline_script", "inline_style", "csp_meta"]

_ATTR_NAME = re.compile(r"[a-z][a-z0-9_-]*\Z")
_TAG_NAME = re.compile(r"[a-z][a-z0-9]*\Z")
_ANCHOR = re.compile(r"#[A-Za-z0-9_.:-]*\Z")
_RELATIVE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\Z")
_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=]*\Z")
# Control characters (not tab/newline) and lone surrogates would reach the page as they are:
# replaced by U+FFFD so a name stays one readable line and never an encoding error.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
# What clean_html leaves out.
# (SVG's animate and set can set an href to a javascript: URL after the cleaning: a click on
# the link ran it; a form's button submits, navigating the page away)
_DROPPED = frozenset({"script", "style", "iframe", "object", "embed", "foreignobject", "frame",
                      "frameset", "base", "link", "meta", "template", "noscript", "xmp",
                      "animate", "set", "animatemotion", "animatetransform", "discard",
                      "form"})
#: A style that may load something: url(...), image-set('http://...') and the other image
#: functions take a plain string; a CSS escape (``\75 rl(``) spells any of them.
_STYLE_LOADS = re.compile(r"\\|@import|(?:url|image|image-set|cross-fade|element|src|"
                          r"expression)\s*\(")
_URL_ATTRS = frozenset({"href", "xlink:href", "src", "action", "formaction", "srcset",
                        "poster", "data", "background"})
_ATTR_OK = re.compile(r"[a-z_:][a-z0-9_:.-]*\Z")
_VOID = frozenset({"br", "hr", "img", "input", "meta", "col", "wbr"})


class Markup(str):
    """HTML the package built with these helpers (already escaped): :func:`tag` and
    :func:`join_html` keep it as it is; any other string is escaped as text."""

    __slots__ = ()


def _text(x: Any, limit: int | None) -> str:
    text = f"{x:.4g}" if isinstance(x, float) else str(x)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return _CONTROL.sub("\ufffd", text)


def esc_text(x: Any, limit: int | None = None) -> Markup:
    """``x`` as text between tags: ``& < > " '`` escaped, control characters replaced,
    floats as ``.4g``, cut to ``limit`` characters (with an ellipsis) when given."""
    if isinstance(x, Markup):
        return x
    return Markup(html.escape(_text(x, limit), quote=True))


def esc_attr(x: Any, limit: int | None = None) -> Markup:
    """``x`` as a quoted attribute value (either quote): text escaping plus newlines and
    tabs as character references, so the value survives on one line."""
    s = html.escape(_text(x, limit), quote=True)
    return Markup(s.replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
                  .replace("`", "&#96;"))


#: C0 control characters but tab, newline and carriage return (and DEL) as their Control
#: Pictures (U+2400...): graphviz reads a DOT file as C strings, so a NUL in a name ended the
#: line there and made the rest DOT syntax (bogus nodes, or no drawing at all).
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(0x20) if c not in (9, 10, 13)} | {0x7F: 0x2421}


#: graphviz refuses a string over about 16,000 characters (the whole drawing fails): longer
#: names are cut to their first characters, an ellipsis and a hash of the whole (unique).
DOT_MAX_CHARS = 2000


#: What a name may not hold as it is in a DOT id: a control character graphviz cannot hold,
#: a Control Picture (U+2400-U+2421: what a control character is shown as), or the mark a
#: shown name ends in (``…#``).
_NOT_AS_IS = re.compile("[" + "".join(map(chr, _CONTROL_PICTURES)) + "\u2400-\u2421]|…#")


def dot_safe(s: str) -> str:
    """``s`` as a DOT node id: as it is when it can be, else one to one with ``s`` — its
    start with control characters as their pictures (``␀``), ``…#`` and 24 hex digits of a
    hash of the whole (``name…#1a2b…``).

    Cut past :data:`DOT_MAX_CHARS`: one node named with 17,000 characters left every drawing
    of its model empty. One to one, as graphviz needs of node names: ``n\x01`` and a second
    node named ``n␁`` were one DOT node, drawn as whichever came last, and so was a short name
    written as the cut form of a long one (a name shown otherwise always ends in the mark and
    its hash, and a name that holds the mark is shown otherwise too)."""
    if len(s) <= DOT_MAX_CHARS and not _NOT_AS_IS.search(s):
        return s
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"{s[:DOT_MAX_CHARS - 30]}".translate(_CONTROL_PICTURES) + "…#" + digest


def drawn_keys(keys: Iterable[str]) -> dict[str, str]:
    """{an SVG id's key: the key} for the ``keys`` not drawn as they are (:func:`dot_safe`):
    what the page translates the ids it reads back with."""
    return {d: k for k in keys if (d := dot_safe(k)) != k}


def dot_text(s: str) -> str:
    """``s`` as DOT text (a label or tooltip, not a node name): control characters as their
    pictures, cut past :data:`DOT_MAX_CHARS` to its start, ``…#`` and a short hash."""
    return _cut(s).translate(_CONTROL_PICTURES)


def _cut(s: str) -> str:
    if len(s) <= DOT_MAX_CHARS:
        return s
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{s[:DOT_MAX_CHARS - 10]}…#{digest}"


def esc_label(x: Any) -> Markup:
    """``x`` as text of a graphviz HTML-like label (``<<B>...</B>>``): escaped as text, on
    one line, brackets as character references (dot 2.43's label lexer rejects some of them,
    a lone ']' inside <FONT>), control characters as their pictures (:func:`dot_safe`)."""
    # cut before escaping: a cut escaped text could end inside an entity ("&am")
    # (the escaped text is not cut again: at most 6 characters per character stay far
    # below graphviz's limit)
    s = str(esc_text(_cut(str(x)))).translate(_CONTROL_PICTURES).replace(
        "[", "&#91;").replace("]", "&#93;")
    return Markup(s.replace("\r\n", " ").replace("\n", " ").replace("\r", " "))


def safe_url(url: Any, *, relative: bool = False) -> Markup:
    """An ``href``/``src`` value: a ``#anchor`` or a ``data:image/...;base64,`` URL, escaped;
    with ``relative``, also a relative path of the package's own files (``reports/m.html``:
    letters, digits, ``._-/``, no ``..``, no scheme). Anything else (``javascript:``,
    ``http:``, ``//host``) becomes ``#``."""
    u = str(url)
    if _ANCHOR.match(u) or _DATA_IMAGE.match(u) or (
            relative and _RELATIVE.match(u) and ".." not in u.split("/")):
        return esc_attr(u)
    return Markup("#")


def _child(c: Any) -> str:
    if c is None or c is False:
        return ""
    return c if isinstance(c, Markup) else esc_text(c)


def join_html(sep: str, items: Iterable[Any]) -> Markup:
    """``items`` joined by ``sep`` (package text, escaped too): Markup kept, the rest escaped."""
    return Markup(esc_text(sep).join(_child(c) for c in items))


def tag(name: str, *children: Any, **attrs: Any) -> Markup:
    """One element: ``tag("a", "text", class_="x", data_key=key, href="#sec")``.

    Children that are :class:`Markup` are kept, None/False are skipped, anything else is
    escaped text. Attribute names: ``class_`` is ``class``, ``_`` becomes ``-``; a value of
    None/False leaves the attribute out, True writes it bare; ``href``/``src`` go through
    :func:`safe_url`; event handlers (``on...``) are refused.
    """
    if not _TAG_NAME.match(name):
        raise ValueError(f"not a tag name: {name!r}")
    parts = [name]
    for k, v in attrs.items():
        key = k.rstrip("_").replace("_", "-")
        if not _ATTR_NAME.match(key) or key.startswith("on"):
            raise ValueError(f"attribute {key!r} is not allowed")
        if v is None or v is False:
            continue
        if v is True:
            parts.append(key)
            continue
        val = safe_url(v) if key in ("href", "src", "xlink:href") else esc_attr(v)
        parts.append(f'{key}="{val}"')
    head = "<" + " ".join(parts) + ">"
    if name in _VOID:
        return Markup(head)
    return Markup(head + "".join(_child(c) for c in children) + f"</{name}>")


def clean_html(text: str | None) -> Markup:
    """Markup the package built, cleaned once more before it goes where no CSP applies (a
    widget snapshot, a notebook export, a drawing): parsed as HTML (the standard library's
    tokenizer, so text inside attribute values stays text) and written back without script,
    style, iframe, object, embed, foreignObject, SVG animations (``<set>`` can make an
    ``href`` a ``javascript:`` URL), forms and the like, ``on...`` handlers, styles that may
    load (``url(``, ``image-set(``, CSS escapes) and links other than ``#anchors`` and
    ``data:image``. A second wall
    behind the escaping, not a sanitizer for foreign HTML."""
    p = _Cleaner()
    p.feed(text or "")
    p.close()
    return Markup("".join(p.out))


class _Cleaner(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0  # inside a dropped element

    def _tag(self, name: str, attrs: list[tuple[str, str | None]], close: str) -> None:
        if self.skip:
            return
        parts = [name]
        for k, v in attrs:
            k = k.lower()
            if not _ATTR_OK.match(k) or k.startswith("on"):
                continue
            val = "" if v is None else v
            low = val.strip().lower()
            if k in _URL_ATTRS and not (_ANCHOR.match(val.strip()) or _DATA_IMAGE.match(low)):
                continue
            if k == "style" and _STYLE_LOADS.search(low):
                continue
            parts.append(k if v is None else f'{k}="{esc_attr(val)}"')
        self.out.append("<" + " ".join(parts) + close + ">")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag.lower() in _DROPPED:
            if tag.lower() not in _VOID:
                self.skip += 1
            return
        self._tag(tag, attrs, "")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag.lower() not in _DROPPED:
            self._tag(tag, attrs, "/")

    def handle_endtag(self, tag: str) -> None:
        if tag.lower() in _DROPPED:
            self.skip = max(0, self.skip - 1)
        elif not self.skip:
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.out.append(html.escape(data, quote=False))


def clean_svg(svg: str | None) -> Markup:
    """Graphviz's SVG for a page: from ``<svg`` on (no XML prolog), cleaned by
    :func:`clean_html`. Its labels were escaped when the DOT was written (render/dot.py);
    this is the second wall, for a graphviz that passes markup through."""
    text = svg or ""
    i = text.find("<svg")
    return clean_html(text[i:] if i >= 0 else text)


# ----------------------------------------------------------------------------- whole pages
def _script_body(js: str) -> str:
    # "</script" inside a script would end it early; "<\/" is the same string to JS.
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def inline_script(js: str) -> Markup:
    """One of the package's own scripts, inlined (its hash goes into :func:`csp_meta`)."""
    return Markup("<script>" + _script_body(js) + "</script>")


def inline_style(css: str) -> Markup:
    """The package's own style sheet, inlined."""
    return Markup("<style>" + css.replace("</style", "<\\/style") + "</style>")


def csp_meta(scripts: Sequence[str]) -> Markup:
    """The Content-Security-Policy of a written page: nothing loads from anywhere
    (``default-src 'none'``, no network, no forms, no base URL), scripts run only when their
    text is one of ``scripts`` (the package's own, by SHA-256 of what :func:`inline_script`
    writes), styles inline, images only ``data:``. A model string that slipped through the
    escaping can neither run script (no inline handler, no injected ``<script>``) nor fetch."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(_script_body(js).encode("utf-8")).digest())
        .decode("ascii") + "'" for js in scripts)
    policy = (f"default-src 'none'; script-src {hashes or chr(39) + 'none' + chr(39)}; "
              "style-src 'unsafe-inline'; img-src data:; font-src data:; connect-src 'none'; "
              "base-uri 'none'; form-action 'none'; object-src 'none'")
    # The policy is the package's own text (constants and base64): no quote to escape.
    return Markup('<meta http-equiv="Content-Security-Policy" content="' + policy + '">')
