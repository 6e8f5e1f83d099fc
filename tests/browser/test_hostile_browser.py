"""Hostile models in a real browser: no string of a model file ever runs as script.

``tests/hostile_models.py`` puts payloads (``<img onerror>``, ``</script><script>``,
``"><svg onload>``, ``javascript:`` URLs, ``{{ }}`` / ``${}``, quotes, backslashes, newlines,
control characters, very long strings, right-to-left marks, ``$...$``) into every string
field of a model; ``tests/hostile_artifacts.py`` builds every HTML artifact from them (the
results' ``_repr_html_``, every node's details panel, the widget snapshots, the report with
every section, the diff report, the audit index, the nbconvert export). Each is opened in
headless Chromium from file://, clicked (every drawn node), searched and filtered with the
payloads. Then every widget runs live in one JupyterLab notebook (one kernel, one page) on the
hostile models: the Explorer, FusionLab (a hostile match ticked, previewed), DriftDebugger
(run, the hostile layers ticked), Profiler (profiled with a tiny budget, cost, latency on the
graph), PrecisionDoctor (the fp16 search run), DiffView and the Editor (``lab.edit()``); each
one's graph nodes are clicked (their details panels open), its search is used, its tables'
rows are clicked and hostile names picked in its dropdowns.

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
from hostile_models import NODE_NAMES, READABLE, SECOND_WALL  # noqa: E402

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


# One notebook, one kernel, one page: every widget live on the hostile models. Profiler and
# PrecisionDoctor run in the kernel's thread (background=False), so an idle kernel means done.
WIDGET_CELLS = [
    "import sys, onnx_lab\nsys.path.insert(0, {tests!r})\n"
    "from hostile_models import hostile\n"
    "from onnx_lab.widgets import (Explorer, FusionLab, DriftDebugger, Profiler,\n"
    "    PrecisionDoctor, DiffView)\n"
    "lab = onnx_lab.open(hostile())\n"
    "after = onnx_lab.open(hostile()); after.apply('fuse_conv_bn')\n"
    "ex = Explorer(lab, tab='Graph')\nex",
    # JupyterLab typesets $...$ in HTML outputs: a name's \\href became a link. The control
    # shows that MathJax ran; the tables and results below must show the names as text.
    "from IPython.display import HTML\nHTML('<span class=\"olab-mathjax-control\">$x^2$</span>')",
    "lab",
    "lab.nodes",
    "lab.tensors",
    "lab.check(load=False)",
    "fl = FusionLab(lab)\nfl",
    "dd = DriftDebugger(lab, after)\ndd",
    "prof = Profiler(lab, runs=3, warmup=1, budget_s=0.5, background=False)\nprof",
    "doc = PrecisionDoctor(lab, background=False)\ndoc",
    "dv = DiffView(lab, after)\ndv",
    "ed = onnx_lab.open(hostile()).edit()\ned",
]
# (widget root, buttons clicked first, buttons clicked once hostile rows are ticked)
WIDGETS = [(".onnx-lab-fusion-lab", (), ("Preview",)), (".onnx-lab-drift", ("Run",), ()),
           (".onnx-lab-profiler", ("Profile", "Cost / roofline", "Latency on graph"), ()),
           (".onnx-lab-precision", ("Find",), ()), (".onnx-lab-diff-view", (), ()),
           (".onnx-lab-editor", (), ())]
HOSTILE_TEXT = re.compile(r"#node|onerror|svg onload")


def _idle(page) -> None:
    """Wait until the kernel has been idle for ~1 s (a click's callback has finished)."""
    idle = page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator"
                        "[data-status='idle']")
    page.wait_for_timeout(300)
    settled = 0
    for _ in range(240):
        settled = settled + 1 if idle.count() else 0
        if settled >= 3:
            return
        page.wait_for_timeout(350)
    pytest.fail("the kernel stayed busy")


def _click_nodes(page, root, limit: int = 12) -> int:
    n = 0
    for canvas in root.locator(".olc-root").all():
        nodes = canvas.locator(".olc-stage g.node")
        for i in range(min(nodes.count(), limit)):
            g = nodes.nth(i)
            # the port clips and never scrolls: a node outside the view is not clickable
            if not g.evaluate("""e => {
                    const p = e.closest('.olc-root').querySelector('.olc-port')
                        .getBoundingClientRect();
                    const r = e.getBoundingClientRect(), x = (r.left + r.right) / 2,
                          y = (r.top + r.bottom) / 2;
                    return r.width > 0 && x > p.left && x < p.right && y > p.top
                        && y < p.bottom; }"""):
                continue
            g.scroll_into_view_if_needed()
            box = g.bounding_box()
            if box is None or box["width"] == 0:
                continue
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(150)
            n += 1
    return n


def _explore(page, root, after: tuple[str, ...] = ()) -> dict[str, int]:
    """Tick the rows of the widget's selectable tables that name hostile nodes (their
    details open: a layer's views, a match's preview after ``after`` buttons), click the
    canvas nodes, search, open every <details>, click the HTML tables' rows and pick the
    hostile names in the widget's dropdowns; what was done, counted."""
    done = {"ticked": 0, "nodes": 0, "search": 0, "details": 0, "rows": 0, "picks": 0}
    rows = root.locator(".olt-row, .widget-hbox").filter(
        has=page.locator("input[type=checkbox]")).filter(has_text=HOSTILE_TEXT)
    for i in range(min(rows.count(), 3)):
        box = rows.nth(i).locator("input[type=checkbox]").first
        if box.is_visible():
            box.click()
            _idle(page)
            done["ticked"] += 1
    for b in after:
        root.locator("button", has_text=b).first.click()
        _idle(page)
    done["nodes"] = _click_nodes(page, root)
    for box in root.locator(".olc-search").all():
        if not box.is_visible():  # a canvas not shown yet (FusionLab: no match picked)
            continue
        for q in (NODE_NAMES[0], NODE_NAMES[1], "onerror", "${"):
            box.fill(q)
            box.press("Enter")
            page.wait_for_timeout(150)
            done["search"] += 1
    for summary in root.locator("details > summary").all()[:12]:
        if summary.is_visible():
            summary.click()
            done["details"] += 1
    from playwright.sync_api import Error as PlaywrightError

    for row in root.locator("table tbody tr").all()[:25]:
        try:  # a click may redraw the table (a row picked): the old rows are gone then
            if row.is_visible():
                row.click(force=True, timeout=3_000)
                done["rows"] += 1
        except PlaywrightError:
            continue
    for sel in root.locator("select").all():
        labels = sel.evaluate("s => Array.from(s.options).map(o => o.label)")
        hostile = [x for x in labels if "#node" in x or "onerror" in x][:3]
        for label in hostile:
            sel.select_option(label=label)
            _idle(page)
            done["picks"] += 1
    _idle(page)
    return done


def test_widgets_live_in_jupyterlab_run_nothing(tmp_path):
    """The issue's attack, for every widget: Explorer, FusionLab, DriftDebugger (run),
    Profiler (profiled, cost), PrecisionDoctor (searched), DiffView and the Editor live in
    one JupyterLab notebook on the hostile models; their nodes clicked (details panels
    open), searched, their <details> opened, their tables' rows clicked and the hostile names
    picked in their dropdowns. A payload there would run in the Jupyter origin; one that
    PUTs /api/contents would write a file."""
    tests = str(Path(__file__).resolve().parents[1])
    cells = [WIDGET_CELLS[0].format(tests=tests), *WIDGET_CELLS[1:]]
    with lab_in_browser(tmp_path, {"hostile.ipynb": cells}, height=1100) as (url, page):
        dialogs: list[str] = []
        outside: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: outside.append(r.url)
                if not r.url.startswith((url, "data:", "blob:")) else None)
        page.add_init_script(HOOKS)

        def check(what: str) -> None:
            assert page.evaluate("[window.__pwned, window.__calls]") == [None, []], what
            assert dialogs == [], (what, dialogs)
            assert page.evaluate(MARKERS) == [], what
            assert outside == [], (what, outside)
            assert not (tmp_path / "root" / "PWNED.txt").exists(), what

        run_all_cells(page, url, "hostile.ipynb")
        page.locator(".onnx-lab-editor .olc-root[data-rendered]").first.wait_for(
            timeout=180_000)  # the last cell
        _idle(page)
        page.evaluate(HOOKS)
        page.locator(".olab-mathjax-control mjx-container").wait_for(timeout=60_000)
        # (FusionLab's teaching text is onnx_lab's own math: the one place typeset)
        typeset = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.jp-OutputArea-output mjx-container')).filter(m => !m.closest(
            '.olab-mathjax-control, .onnx-lab-explanation')).map(m => m.textContent.slice(0, 80))""")
        assert typeset == [], typeset
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        assert any("$\\alpha$ cost" in t for t in outputs)  # the name, as it is
        # The Explorer, as the issue reproduced it.
        root = page.locator(".olc-root[data-rendered]").first
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
            page.wait_for_timeout(300)
            clicked += 1
        assert clicked >= 4
        root.locator(".olc-panel-body").wait_for(timeout=30_000)
        search = root.locator(".olc-search")
        for q in (NODE_NAMES[0], NODE_NAMES[1], "onerror"):
            search.fill(q)
            search.press("Enter")
            page.wait_for_timeout(300)
        text = root.evaluate("r => r.textContent")
        check("explorer")
        assert re.search(r"<img src=x onerror=alert\(1\)>|\"><svg onload=alert\(2\)>", text)
        shown = [text]
        report: dict[str, dict[str, int]] = {}
        for selector, buttons, after_ticks in WIDGETS:
            w = page.locator(selector).first
            w.scroll_into_view_if_needed()
            for b in buttons:
                w.locator("button", has_text=b).first.click()
                _idle(page)
            report[selector] = _explore(page, w, after_ticks)
            check(selector)
            assert w.locator(".onnx-lab-error").count() == 0, (
                selector, w.locator(".onnx-lab-error").first.inner_text())
            shown.append(w.evaluate("r => r.textContent"))
            assert re.search(r"onerror=alert|<svg onload|#node", shown[-1]), selector
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "hostile_widgets_lab.png"), full_page=True)
        (ARTIFACTS / "hostile_widgets_lab.json").write_text(repr(report))
        check("all widgets")
        _readable(" ".join(shown), "widgets in JupyterLab")
        # every widget's graph was clicked, its tables' rows too; the match and the layers
        # that name hostile nodes were ticked (their preview / views opened)
        assert all(r["nodes"] and (r["rows"] or r["ticked"]) for r in report.values()), report
        assert report[".onnx-lab-fusion-lab"]["ticked"] and report[".onnx-lab-drift"]["ticked"]


def test_a_click_on_a_node_drawn_under_another_key_shows_its_own_panel(browser, tmp_path):
    """Names not drawn as they are (a control character, a Control Picture, a short name
    forged as another's drawn form): each click shows the clicked node's own panel, and a
    search goes to it (the page translates the drawing's ids to the keys: canvas.js realOf)."""
    import onnx

    import onnx_lab
    from onnx_lab.render._html import dot_safe
    from onnx_lab.reporting import write_report

    h, F = onnx.helper, onnx.TensorProto.FLOAT
    names = {"Relu": "n\x01", "Neg": dot_safe("n\x01"), "Sigmoid": "n\u2401", "Tanh": "plain"}
    nodes, last = [], "x"
    for i, (op, name) in enumerate(names.items()):
        nodes.append(h.make_node(op, [last], [f"t{i}"], name=name))
        last = f"t{i}"
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F, [2])],
                     [h.make_tensor_value_info(last, F, [2])])
    path = write_report(onnx_lab.open(h.make_model(g, opset_imports=[h.make_opsetid("", 17)])),
                        tmp_path / "r.html")
    w = _open_report(browser, path)
    try:
        canvas = w.page.locator(".olr-canvas").first
        panel = canvas.locator(".olc-panel-body")
        for op, name in names.items():
            node = canvas.locator(".olc-stage g.node", has_text=op).first
            node.scroll_into_view_if_needed()
            box = node.bounding_box()
            w.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            w.page.wait_for_function(
                "([r, k]) => r.dataset.selected === k",
                arg=[canvas.locator(".olc-root").element_handle(), name], timeout=10_000)
            text = panel.inner_text()
            assert op in text and not any(o in text for o in names if o != op), (op, text)
        w.check("drawn keys (clicks)", csp=True)
    finally:
        w.page.screenshot(path=str(ARTIFACTS / "hostile_drawn_keys.png"))
        w.page.close()


def test_set_markup_drops_animations_forms_and_styles_that_load(browser):
    """markup.js's setMarkup, the second wall of every canvas and table: markup that slipped
    through the escaping must not run on a click nor load anything. SVG's animate and set
    made an href a javascript: URL after the cleaning (a click ran it), a form's button
    navigated the page away, image-set() and a CSS escape of url( loaded from the network."""
    markup = (Path(__file__).resolve().parents[2] / "onnx_lab" / "widgets" / "static"
              / "markup.js").read_text(encoding="utf-8")
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url)
            if not r.url.startswith(("about:", "data:")) else None)
    try:
        for name, html in SECOND_WALL.items():
            page.set_content("<div id='host'></div>")
            page.add_script_tag(content=markup)
            page.evaluate("h => setMarkup(document.getElementById('host'), h)", html)
            if page.locator("#t").count():
                page.click("#t")
            page.wait_for_timeout(100)
            assert page.evaluate("[window.__pwned, location.href]") == [None, "about:blank"], name
            assert requests == [], (name, requests)
    finally:
        page.close()
