"""Hostile models in a real browser: no string of a model file ever runs as script.

``tests/hostile_models.py`` puts payloads (``<img onerror>``, ``</script><script>``,
``"><svg onload>``, ``javascript:`` URLs, ``{{ }}`` / ``${}``, quotes, backslashes, newlines,
control characters, very long strings, right-to-left marks, ``$...$``) into every string
field of a model; ``tests/hostile_artifacts.py`` builds every HTML artifact from them (the
results' ``_repr_html_``, every node's details panel, the widget snapshots, the report with
every section, the diff report, the audit index, the nbconvert export). Each is opened in
headless Chromium from file://, clicked (every drawn node), searched and filtered with the
payloads; then the Explorer runs inside JupyterLab and its nodes are clicked.

A test fails when any script of a payload runs: ``alert``/``confirm``/``prompt`` are hooked
before the page's own scripts, ``window.__pwned`` is what the other payloads set, a JupyterLab
dialog counts, and so does a DOM marker a parsed payload leaves (an element with an ``on...``
handler, ``img[src=x]``, ``b[data-pwn]``). It fails when any request leaves the page (a parsed
``<img src=x>`` asks for ``file:///.../x``), on a page error and, on the pages that carry a
CSP, on any CSP violation (the report's own scripts run under it: a violation means either an
injected script or a broken report). And the names must still read as they are: the escaped
text shows in the page.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from _jupyter import ARTIFACTS, CHROMIUM, lab_in_browser, require_chromium, run_all_cells

pytestmark = pytest.mark.browser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hostile_artifacts import build, notebook_export  # noqa: E402
from hostile_models import NODE_NAMES, READABLE  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost"]

# Runs before any script of the page: a payload that calls these is recorded, not shown.
HOOKS = """
window.__calls = [];
for (const f of ["alert", "confirm", "prompt"]) {
  window[f] = (...a) => { window.__calls.push(f + ":" + a.join(",")); };
}
void 0;  // page.evaluate calls a script whose value is a function: end on none
"""

# A payload that was parsed as markup leaves one of these in the document.
MARKERS = """() => {
  const found = [];
  const all = [document, ...Array.from(document.querySelectorAll('iframe'))
      .map(f => { try { return f.contentDocument; } catch (e) { return null; } })
      .filter(Boolean)];
  for (const d of all) {
    for (const el of d.querySelectorAll('*')) {
      for (const a of el.attributes) {
        if (/^on/i.test(a.name)) found.push(el.localName + '[' + a.name + ']');
        if (/^(href|src|xlink:href|action)$/i.test(a.name) && /^\\s*javascript:/i.test(a.value))
          found.push(el.localName + '[' + a.name + '=javascript:]');
      }
    }
    d.querySelectorAll('img[src="x"], b[data-pwn]').forEach(el => found.push(el.outerHTML.slice(0, 80)));
    // An executable script (no type, or a JavaScript one) with a payload's text: data
    // scripts (the report's payload, a notebook's widget state) are not run.
    d.querySelectorAll('script').forEach(el => {
      const t = (el.type || '').toLowerCase();
      const runs = !t || t === 'module' || /javascript|ecmascript/.test(t);
      if (runs && /__pwned|onerror=/.test(el.textContent)) found.push(el.outerHTML.slice(0, 80));
    });
  }
  return found;
}"""


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    require_chromium()
    out = tmp_path_factory.mktemp("hostile")
    files = build(out)
    files["nbconvert"] = notebook_export(out)
    return files


@pytest.fixture
def browser():  # per test: the JupyterLab test starts Playwright on its own
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


class Watched:
    """A page whose requests, console, errors and dialogs are recorded."""

    def __init__(self, browser, url: str, *, template: tuple[str, ...] = ()) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.url = url
        self.requests: list[str] = []
        self.console: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page = self.page
        page.add_init_script(HOOKS)

        def route(r):
            u = r.request.url
            if u == url or u.startswith(("data:", "blob:")):
                r.continue_()
            else:
                if not u.startswith(template):
                    self.requests.append(u)
                r.abort()

        page.route("**/*", route)
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.goto(url)

    def check(self, what: str, *, csp: bool) -> None:
        page = self.page
        pwned = page.evaluate("[window.__pwned, window.__calls]")
        assert pwned == [None, []], (what, pwned)
        assert not self.dialogs, (what, self.dialogs)
        assert page.evaluate(MARKERS) == [], what
        assert self.requests == [], (what, self.requests)
        assert self.errors == [], (what, self.errors)
        if csp:
            violations = [m for m in self.console if "Content Security Policy" in m
                          or "Refused to" in m]
            assert violations == [], (what, violations)

    def text(self) -> str:
        return self.page.evaluate("document.body.textContent")


def _readable(text: str, what: str) -> None:
    for r in READABLE:
        assert r in text, (what, r)


NBCONVERT_TEMPLATE = ("https://cdnjs.cloudflare.com/ajax/libs/require.js/",
                      "https://cdnjs.cloudflare.com/ajax/libs/mathjax/",
                      "https://unpkg.com/@jupyter-widgets/html-manager@")

FRAGMENTS = ["lab", "lab_exotic", "summary", "summary_exotic", "cost", "check", "render",
             "render_exotic", "render_fallback", "compare", "profile", "pass_result", "diff",
             "precision", "details", "widget_explorer", "widget_fusion_lab", "widget_drift",
             "widget_profiler", "widget_precision", "widget_diff_view", "widget_extractor"]


def test_fragments_and_snapshots_run_nothing(artifacts, browser):
    """Each result's ``_repr_html_``, every details panel and each widget snapshot, as a
    notebook shows them (no CSP: only the escaping protects them)."""
    seen = []
    for name in FRAGMENTS:
        w = Watched(browser, artifacts[name].as_uri())
        try:
            w.page.wait_for_load_state("load")
            w.page.wait_for_timeout(50)
            w.check(name, csp=False)
            seen.append(w.text())
        finally:
            w.page.close()
    _readable(" ".join(seen), "fragments")
    # The details panel shows the node names and the source line of the known injection.
    details = artifacts["details"].read_text(encoding="utf-8")
    assert "&lt;img src=x onerror=alert(document.domain)&gt;" not in details  # line: not an int
    assert "model.py:None" in details


def _open_report(browser, path: Path) -> Watched:
    w = Watched(browser, path.as_uri())
    w.page.wait_for_function("document.body.dataset.ready", timeout=30_000)
    assert w.page.evaluate("document.body.dataset.ready") == "1", (w.errors, w.console)
    return w


def _click_every_node(w: Watched) -> int:
    """Click each drawn node of every canvas on the page (its panel opens); the count."""
    page = w.page
    n = 0
    for canvas in page.locator(".olr-canvas").all():
        canvas.scroll_into_view_if_needed()
        nodes = canvas.locator(".olc-stage g.node")
        for i in range(min(nodes.count(), 30)):
            g = nodes.nth(i)
            box = g.bounding_box()
            if box is None:
                continue
            port = canvas.locator(".olc-port").bounding_box()
            x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
            if not (port["x"] < x < port["x"] + port["width"]
                    and port["y"] < y < port["y"] + port["height"]):
                continue
            page.mouse.click(x, y)
            n += 1
    return n


def _search_and_filter(w: Watched, queries: list[str]) -> None:
    page = w.page
    for q in queries:
        for box in page.locator(".olc-search").all():
            box.fill(q)
            box.press("Enter")
        for f in page.locator(".olr-filter").all()[:4]:
            f.fill(q)
    for th in page.locator(".olr-grid th").all()[:3]:
        th.click()


@pytest.mark.parametrize("name", ["report", "report_exotic", "report_injection",
                                  "diff_report"])
def test_reports_run_nothing_and_show_the_names(artifacts, browser, name):
    """The report (every section: graph, check, cost, tables, history, profile, comparison,
    diff, precision), the exotic model's report, the issue's injection and the diff page:
    under their CSP, clicked, searched, filtered and sorted."""
    w = _open_report(browser, artifacts[name])
    try:
        clicked = _click_every_node(w)
        assert clicked >= 2, name
        w.check(name + " (clicks)", csp=True)
        # Every node's own panel, through the host (a node in a box is reached too).
        shown = w.page.evaluate("""() => {
            const out = [];
            for (const h of Object.values(window.onnxLabReport.hosts)) {
              for (const id of Object.keys(h.payload.where)) {
                if (h.focus(id, true)) out.push(h.el.querySelector('.olc-panel-body').textContent);
              }
            }
            return out;
        }""")
        assert shown, name
        w.check(name + " (every panel)", csp=True)
        _search_and_filter(w, [NODE_NAMES[0], NODE_NAMES[2], "onerror", "${", "{{"])
        w.check(name + " (search)", csp=True)
        if name in ("report", "diff_report"):
            _readable(w.text() + " ".join(shown), name)
        if name == "report_injection":
            assert any("model.py:None" in s for s in shown), shown
        csp = w.page.evaluate("""document.querySelector(
            'meta[http-equiv="Content-Security-Policy"]').content""")
        assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp.split(";")[1]
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        w.page.screenshot(path=str(ARTIFACTS / f"hostile_{name}.png"))
        w.page.close()


def test_audit_index_and_nbconvert_export_run_nothing(artifacts, browser):
    w = Watched(browser, artifacts["audit_index"].as_uri())
    try:
        w.page.wait_for_load_state("load")
        for th in w.page.locator("table.audit th").all()[:4]:
            th.click()
        links = w.page.evaluate("Array.from(document.querySelectorAll('a')).map(a => "
                                "a.getAttribute('href'))")
        assert "#" in links and not any(str(x).startswith("javascript") for x in links)
        w.check("audit index", csp=True)
        _readable(w.text(), "audit index")
    finally:
        w.page.close()
    # nbconvert's own HTML template asks for require.js, MathJax and the widget manager from
    # their CDNs (aborted here: the page is offline); anything else would be a payload's.
    w = Watched(browser, artifacts["nbconvert"].as_uri(), template=NBCONVERT_TEMPLATE)
    try:
        w.page.wait_for_load_state("load")
        w.page.wait_for_timeout(300)
        w.check("nbconvert export", csp=False)
        text = w.text()
        _readable(text, "nbconvert export")
        assert "onnx-lab-snapshot-graph" in w.page.content()  # the last views, not blanks
    finally:
        w.page.close()


def test_explorer_in_jupyterlab_runs_nothing(tmp_path):
    """The issue's attack: the Explorer in JupyterLab, the hostile nodes clicked. A payload
    there would run in the Jupyter origin; one that PUTs /api/contents would write a file."""
    tests = str(Path(__file__).resolve().parents[1])
    cells = [
        f"import sys, onnx_lab\nsys.path.insert(0, {tests!r})\n"
        "from hostile_models import hostile\nfrom onnx_lab.widgets import Explorer\n"
        "ex = Explorer(onnx_lab.open(hostile()), tab='Graph')\nex",
    ]
    with lab_in_browser(tmp_path, {"hostile.ipynb": cells}) as (url, page):
        dialogs: list[str] = []
        outside: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: outside.append(r.url)
                if not r.url.startswith((url, "data:", "blob:")) else None)
        page.add_init_script(HOOKS)
        run_all_cells(page, url, "hostile.ipynb")
        root = page.locator(".olc-root[data-rendered]").first
        root.wait_for(timeout=120_000)
        page.evaluate(HOOKS)
        nodes = root.locator(".olc-stage g.node")
        nodes.first.wait_for(timeout=30_000)
        clicked = 0
        for i in range(nodes.count()):
            g = nodes.nth(i)
            g.scroll_into_view_if_needed()
            box = g.bounding_box()
            if box is None:
                continue
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(400)
            clicked += 1
        assert clicked >= 4
        panel = root.locator(".olc-panel-body")
        panel.wait_for(timeout=30_000)
        search = root.locator(".olc-search")
        for q in (NODE_NAMES[0], NODE_NAMES[1], "onerror"):
            search.fill(q)
            search.press("Enter")
            page.wait_for_timeout(300)
        text = root.evaluate("r => r.textContent")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "hostile_explorer_lab.png"))
        assert page.evaluate("[window.__pwned, window.__calls]") == [None, []]
        assert dialogs == [] and page.evaluate(MARKERS) == []
        assert outside == [], outside
        assert not (tmp_path / "root" / "PWNED.txt").exists()
        assert re.search(r"<img src=x onerror=alert\(1\)>|\"><svg onload=alert\(2\)>", text)
