"""onnx_lab's viewers beside Netron and Google Model Explorer on real exports, one headless
Chromium (Debian's ``/usr/bin/chromium``, 1,400×1,000), the same files.

Models (random weights, built once by ``benchmarks/_models.py``, cached and gitignored; nothing
fetched): ``bert`` BERT-base, TorchScript export (1,394 nodes, 438 MB inside the file);
``gpt2`` transformers' GPT-2 with 24 layers, ``torch.onnx.export(dynamo=True)``, external data
(1,225 nodes); ``llama32`` a transformers Llama decoder of 32 layers, dynamo export (6,050 nodes);
``llama96`` the same with 96 layers (~17,800 nodes; opt-in, it is slow).

For each model and tool (the Explorer widget in JupyterLab, the HTML report ``lab.report``,
Netron, Model Explorer):

- **load**: file → graph drawn. The widget: a cell ``Explorer(onnx_lab.open(path), tab=
  'Graph')`` re-run with Shift+Enter until the new canvas shows nodes (the kernel is warm,
  graphviz's layout cache is cleared first: ``onnx_lab.render.dot.clear_cache()``); the
  report: the HTML file opened until its graph is drawn (writing it is not counted); Netron:
  navigation to its server (``netron FILE``) until its SVG has nodes (its cookie notice, asked on
  every visit in a fresh profile, clicked away inside the time); Model Explorer: navigation to its
  server (``model-explorer FILE --extensions=model_explorer_onnx``, which converts the model on
  request) until its WebGL canvas has ink (polled by screenshots: ±0.2 s);
- **first view**: the median on-screen height of the labels of the nodes drawn inside the view
  and how many nodes that is (SVG tools; Model Explorer draws text in WebGL: not measured);
- **search → details**: the name of the middle layer's Softmax typed into the tool's search,
  the hit picked, until the node's details (name, inputs) show; for onnx_lab's canvas also
  until the node is drawn in the view and selected (*drawn*: the widget lays the hit's box out
  then, unless it was drawn ahead), and for the widget the same search again after going
  back to the overview (*laid out*: the box's expand is ready, a swap of drawings);
- **frames**: ``requestAnimationFrame`` intervals while 40 wheel-zoom steps and a 40-step drag
  are scripted with the real mouse (Ctrl+wheel for Netron and Model Explorer, whose plain wheel
  scrolls), p50 / p95 in ms.

Then each widget cell (Explorer, FusionLab, Extractor, DriftDebugger, Profiler, PrecisionDoctor,
DiffView, Editor on a Lab already open) → first paint (*frame*: the widget in the page; *filled*:
its first tab without a progress line), beside the report's and Netron's load.

Medians of ``--rounds`` rounds (3), the tools' order rotated each round; ratios against the
report and Netron printed. Netron and Model Explorer are optional (``pip install
'onnx-lab[viewers]'``, or a venv of their own passed as ``--viewers VENV``); a tool that is
absent is skipped with a line saying so, one that fails or passes ``--timeout`` (300 s) is
reported as such and not retried::

    .venv/bin/python benchmarks/bench_viewers.py [--models bert,gpt2,llama32[,llama96]]
        [--rounds 3] [--viewers /path/to/venv] [--shots DIR] [--no-widgets] [--timeout 300]
        [--tools widget,report,netron,model_explorer]

``--shots DIR`` saves each tool's first view and every widget at 1,280, 1,920 and 600 px wide.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _models  # noqa: E402  (benchmarks/ on the path first: tests/browser has its own)
from bench_widgets_first_paint import WIDGETS, _free_port, _screenshots, _widget_times  # noqa: E402

MODELS: dict[str, tuple[Callable[[], Path], dict]] = {
    "bert": (_models.bert_base, {"batch": 1, "sequence": 128}),
    "gpt2": (_models.gpt2_dynamo, {"batch": 1, "sequence": 16}),
    "llama32": (lambda: _models.llama_dynamo(32), {}),
    "llama96": (lambda: _models.llama_dynamo(96), {}),
}
TOOLS = ["widget", "report", "netron", "model_explorer"]
WIDTH, HEIGHT = 1400, 1000


class Failed(Exception):
    """A tool failed or passed the time limit: reported, not retried."""


# ------------------------------------------------------------------------ page helpers
class Page:
    """A Playwright page and a CDP session on it. Netron replaces ``window.eval`` with a
    function that throws, which breaks Playwright's ``evaluate``; ``Runtime.evaluate`` over CDP
    does not go through it, so every tool is read the same way."""

    def __init__(self, page) -> None:
        self.page = page
        self.cdp = page.context.new_cdp_session(page)
        self.crashed = False
        page.on("crash", lambda _p: setattr(self, "crashed", True))

    def js(self, expr: str):
        # A call into a crashed page never returns (Netron's renderer on the 32-layer Llama).
        if self.crashed:
            raise Failed("the page crashed (Chromium's renderer, out of memory)")
        r = self.cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                               "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"].get("text", "") + " " + str(
                r["exceptionDetails"].get("exception", {}).get("description", ""))[:300])
        return r["result"].get("value")

    def until(self, expr: str, timeout: float, every: float = 0.02) -> float:
        """Seconds until ``expr`` is truthy in the page (raises Failed past ``timeout``)."""
        t0 = time.perf_counter()
        while True:
            with contextlib.suppress(RuntimeError):  # a navigation in progress
                if self.js(expr):
                    return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise Failed(f"timeout after {timeout:.0f} s")
            self.page.wait_for_timeout(every * 1000)


def _ink(png: bytes) -> float:
    """Fraction of pixels that are neither near white nor the background grey."""
    from PIL import Image

    hist = Image.open(io.BytesIO(png)).convert("L").histogram()
    return 1.0 - sum(hist[225:]) / max(1, sum(hist))


# In-page measures. Nodes drawn inside the view (the rectangle ``port``) and the median
# height of their first label line.
_LABELS = """((portSel, nodeSel) => {
    const port = portSel ? document.querySelector(portSel) : null;
    const p = port ? port.getBoundingClientRect()
                   : {left: 0, top: 0, right: innerWidth, bottom: innerHeight};
    const hs = []; let nodes = 0;
    for (const g of document.querySelectorAll(nodeSel)) {
        const b = g.getBoundingClientRect();
        if (b.width === 0 || b.right < p.left || b.left > p.right || b.bottom < p.top
            || b.top > p.bottom) continue;
        nodes++;
        const t = g.querySelector('text');
        if (t) hs.push(t.getBoundingClientRect().height);
    }
    hs.sort((a, b) => a - b);
    return {nodes, median: hs.length ? hs[hs.length >> 1] : 0};
})(%s, %s)"""

_FRAMES_START = """(() => { window.__frames = []; window.__framesOn = true;
    let last = performance.now();
    const tick = (now) => { window.__frames.push(now - last); last = now;
                            if (window.__framesOn) requestAnimationFrame(tick); };
    requestAnimationFrame(tick); return true; })()"""
_FRAMES_STOP = """(async () => { window.__framesOn = false;
    await new Promise(r => requestAnimationFrame(() => r()));
    const s = window.__frames.slice(1).sort((a, b) => a - b);
    const q = (f) => s[Math.min(s.length - 1, Math.floor(s.length * f))];
    return {frames: s.length, p50: q(0.5), p95: q(0.95), max: s[s.length - 1]}; })()"""


def _frames(pg: Page, box: dict, ctrl: bool) -> dict:
    """rAF intervals while 40 wheel steps (out, then in) and a 40-step drag are scripted."""
    page = pg.page
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(cx, cy)
    pg.js(_FRAMES_START)
    if ctrl:
        page.keyboard.down("Control")
    for i in range(40):
        page.mouse.wheel(0, 100 if i < 20 else -100)
    if ctrl:
        page.keyboard.up("Control")
    page.mouse.down()
    page.mouse.move(cx + 300, cy + 150, steps=40)
    page.mouse.up()
    return pg.js(_FRAMES_STOP)


# ------------------------------------------------------------------------ the tools
class Tool:
    name = ""
    portsel = "null"     # JS expression: the CSS selector of the view, or null for the window
    nodesel = "'g.node'"
    ctrl_wheel = False

    def __init__(self, pg: Page, timeout: float) -> None:
        self.pg, self.timeout = pg, timeout

    def load(self) -> float:
        raise NotImplementedError

    def first_view(self) -> dict | None:
        return self.pg.js(_LABELS % (self.portsel, self.nodesel))

    def search(self, query: str) -> float:
        raise NotImplementedError

    def view_box(self) -> dict:
        return {"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT}

    def goto(self, url: str) -> float:
        """Bring the tool's page to the front and navigate: the start of a load."""
        self.pg.page.bring_to_front()
        t0 = time.perf_counter()
        self.pg.page.goto(url, wait_until="commit")
        return t0

    def frames(self) -> dict:
        self.pg.page.bring_to_front()
        return _frames(self.pg, self.view_box(), self.ctrl_wheel)

    def shot(self, path: Path) -> None:
        self.pg.page.screenshot(path=str(path))


class CanvasTool(Tool):
    """onnx_lab's canvas (widget and report): search box, Enter, the side panel."""

    root = ".olc-root"

    @property
    def portsel(self) -> str:  # type: ignore[override]
        return repr(f"{self.root} .olc-port")

    @property
    def nodesel(self) -> str:  # type: ignore[override]
        return repr(f"{self.root} .olc-stage g.node")

    def view_box(self) -> dict:
        return self.pg.page.locator(f"{self.root} .olc-port").first.bounding_box()

    drawn_s: float | None = None  # the last search: until the node was drawn and selected

    def search(self, query: str) -> float:
        """Until the node's details show; ``drawn_s``: until it is drawn in the view and
        selected (its box opened where it was in one)."""
        page = self.pg.page
        page.bring_to_front()
        box = page.locator(f"{self.root} .olc-search").first
        t0 = time.perf_counter()
        box.fill(query)
        box.press("Enter")
        q = repr(query)
        self.pg.until(f"(() => {{ const p = document.querySelector('{self.root} .olc-panel');"
                      f" return p && p.querySelector('.olc-inputs') && p.offsetParent &&"
                      f" p.innerText.includes({q}); }})()", self.timeout)
        details = time.perf_counter() - t0
        self.pg.until(f"(() => {{ const r = document.querySelector('{self.root}'); return r &&"
                      f" r.dataset.selected === {q} && !!r.querySelector('.olc-stage g.node[id='"
                      f" + CSS.escape('n:' + {q}) + ']'); }})()", self.timeout)
        self.drawn_s = time.perf_counter() - t0
        return details


class Report(CanvasTool):
    name = "report"

    def __init__(self, pg: Page, timeout: float, html: Path) -> None:
        super().__init__(pg, timeout)
        self.html = html

    def load(self) -> float:
        t0 = self.goto(self.html.as_uri())
        self.pg.until("!!document.querySelector('.olc-root svg g.node')", self.timeout)
        return time.perf_counter() - t0


class Widget(CanvasTool):
    """The Explorer in JupyterLab: cell ``cell`` re-run; the new widget's canvas drawn."""

    name = "widget"

    def __init__(self, pg: Page, timeout: float, cells, cell: int) -> None:
        super().__init__(pg, timeout)
        self.cells, self.cell = cells, cell
        self.root = f".jp-Notebook .jp-Cell:nth-child({cell + 1}) .olc-root"

    def load(self) -> float:
        page = self.pg.page
        page.bring_to_front()
        cell = self.cells.nth(self.cell)
        cell.evaluate("c => c.querySelectorAll('.onnx-lab-widget').forEach("
                      "w => w.dataset.old = '1')")
        cell.locator(".jp-InputArea").click()
        page.keyboard.press("Escape")
        t0 = time.perf_counter()
        page.keyboard.press("Shift+Enter")
        self.pg.until(f"!!document.querySelector('.jp-Notebook .jp-Cell:nth-child("
                      f"{self.cell + 1}) .onnx-lab-widget:not([data-old]) .olc-root svg g.node')",
                      self.timeout)
        dt = time.perf_counter() - t0
        self.pg.js(f"document.querySelector({self.root!r}).scrollIntoView({{block: 'center'}})")
        page.wait_for_timeout(300)
        return dt

    def search_ready(self, query: str) -> tuple[float, float]:
        """Back to the overview (the Graph tab's *expand* set to none), then the same search:
        the hit's box is laid out by now (the search before opened it), so its expand is a
        swap of drawings. (details, drawn) seconds."""
        page = self.pg.page
        page.bring_to_front()
        cell = f".jp-Notebook .jp-Cell:nth-child({self.cell + 1})"
        n = self.pg.js(f"+document.querySelector({self.root!r}).dataset.rendered")
        page.locator(f"{cell} .widget-dropdown", has_text="expand").locator("select").first \
            .select_option(index=0)  # "—"
        self.pg.until(f"+document.querySelector({self.root!r}).dataset.rendered > {n}",
                      self.timeout)
        page.locator(f"{self.root} .olc-search").first.fill("")
        page.wait_for_timeout(1000)  # the overview shown and settled
        details = self.search(query)
        return details, self.drawn_s


class Netron(Tool):
    name = "netron"
    ctrl_wheel = True

    def __init__(self, pg: Page, timeout: float, url: str) -> None:
        super().__init__(pg, timeout)
        self.url = url

    def load(self) -> float:
        """Waited for with locators (Playwright's isolated world, which Netron's page leaves
        alone and which fail on a crashed renderer instead of hanging)."""
        page = self.pg.page
        # Netron adds its nodes unplaced and transparent, measures their text, then lays them
        # out (its "This large graph layout might take a very long time" is progress): drawn
        # is a node placed and shown.
        node = page.locator("g.node[transform]:not([style*='opacity: 0'])").first
        accept = page.get_by_text("Accept", exact=True)
        t0 = self.goto(self.url)
        try:
            node.or_(accept).first.wait_for(timeout=self.timeout * 1000)
            if not node.count():  # its cookie notice (asked on every visit here)
                accept.click()
                node.wait_for(timeout=self.timeout * 1000)
        except Exception as e:
            if self.pg.crashed or "crash" in str(e).lower():
                raise Failed("the page crashed (Chromium's renderer, out of memory)") from e
            raise Failed(f"no graph within {self.timeout:.0f} s") from e
        return time.perf_counter() - t0

    def search(self, query: str) -> float:
        page = self.pg.page
        page.bring_to_front()
        t0 = time.perf_counter()
        page.keyboard.press("Control+f")
        field = page.locator("#search")
        field.fill(query)
        hit = page.locator(".sidebar-find-content li", has_text=query).first
        hit.wait_for(timeout=self.timeout * 1000)
        hit.click()
        # The node's properties: Netron selects the node; its sidebar opens on a click of it.
        page.locator("g.node.select, g.select").first.wait_for(timeout=self.timeout * 1000)
        sel = page.locator("g.select").first
        sel.click()
        self.pg.until(f"(() => {{ const t = document.querySelector('#sidebar-title'); const c = "
                      f"document.querySelector('#sidebar-content'); return t && c && "
                      f"/properties/i.test(t.textContent) && c.innerText.includes({query!r}); }})()",
                      self.timeout)
        return time.perf_counter() - t0


class ModelExplorer(Tool):
    name = "model_explorer"
    ctrl_wheel = True

    def __init__(self, pg: Page, timeout: float, url: str) -> None:
        super().__init__(pg, timeout)
        self.url = url

    def _canvas_box(self) -> dict | None:
        return self.pg.js("(() => { const cs = [...document.querySelectorAll('canvas')].map(c => "
                          "c.getBoundingClientRect()).filter(b => b.width > 200 && b.height > "
                          "200); if (!cs.length) return null; const b = cs[0]; return {x: b.x, "
                          "y: b.y, width: b.width, height: b.height}; })()")

    def load(self) -> float:
        page = self.pg.page
        t0 = self.goto(self.url)
        while True:
            box = None
            with contextlib.suppress(RuntimeError):
                box = self._canvas_box()
            if box:
                # The graph area under the toolbar (the legend sits at the bottom left).
                clip = {"x": box["x"] + 130, "y": box["y"] + 70,
                        "width": max(50, min(box["width"], WIDTH - box["x"]) - 160),
                        "height": max(50, min(box["height"], HEIGHT - box["y"]) - 90)}
                if _ink(page.screenshot(clip=clip)) > 0.002:
                    return time.perf_counter() - t0
                err = self.pg.js("document.body.innerText.match(/error[^\\n]*/i)?.[0] || ''")
                if err and "rror" in err and "bug_report" not in err:
                    raise Failed(err[:200])
            if time.perf_counter() - t0 > self.timeout:
                raise Failed(f"timeout after {self.timeout:.0f} s")
            page.wait_for_timeout(50)

    def first_view(self) -> dict | None:
        return None  # text drawn in WebGL

    def view_box(self) -> dict:
        return self._canvas_box() or super().view_box()

    def search(self, query: str) -> float:
        page = self.pg.page
        page.bring_to_front()
        t0 = time.perf_counter()
        field = page.get_by_placeholder("Search nodes/layers by regex")
        field.fill(query)
        field.press("Enter")
        hit = page.locator(".search-results-container mat-tree-node").filter(
            has_text="Softmax").last
        hit.wait_for(timeout=self.timeout * 1000)
        hit.click(modifiers=["Alt"])  # locate and select the node: its info panel shows
        self.pg.until(f"(() => {{ const p = [...document.querySelectorAll('.info-panel, "
                      f"info-panel, .side-panel')].map(e => e.innerText).join(' '); return "
                      f"p.includes({query!r}) && /inputs/i.test(p); }})()", self.timeout)
        return time.perf_counter() - t0


# ------------------------------------------------------------------------ servers
def _viewer_bin(name: str, venv: Path | None) -> Path | None:
    for folder in ([venv / "bin"] if venv else []) + [Path(sys.executable).parent]:
        if (folder / name).exists():
            return folder / name
    found = shutil.which(name)
    return Path(found) if found else None


@contextlib.contextmanager
def _server(cmd: list[str], url: str, log: Path, timeout: float = 120) -> Iterator[str]:
    """Run ``cmd`` (its own process group) until ``url`` answers; stop it on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise Failed(f"{cmd[0]} exited: {log.read_text()[-500:]}")
            try:
                with urllib.request.urlopen(url, timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise Failed(f"{cmd[0]} did not start") from None
                time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


# ------------------------------------------------------------------------ one model
def _query(path: Path) -> str:
    """The name of the middle layer's Softmax (a node every tool can search for)."""
    import onnx

    names = [n.name for n in onnx.load(str(path), load_external_data=False).graph.node
             if n.op_type == "Softmax"]
    return names[len(names) // 2]


def _med(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _fmt(x: float | None, unit: str = "s", digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f} {unit}".rstrip()


def bench_model(name: str, args: dict, browser_ctx, work: Path, jupyter_url: str,
                root: Path) -> dict:
    import onnx_lab

    build, dims = MODELS[name]
    path = build()
    query = _query(path)
    lab = onnx_lab.open(str(path), dims=dims or None)
    t0 = time.perf_counter()
    html = lab.report(work / f"{name}.html")
    print(f"\n== {name}: {path.name}, {len(lab.index)} nodes; search '{query}'; "
          f"report written in {time.perf_counter() - t0:.1f} s", flush=True)
    del lab
    from _jupyter import run_all_cells, write_notebook

    setup = ("import onnx_lab\nfrom onnx_lab.widgets import *\n"
             "from onnx_lab.render.dot import clear_cache\n"
             f"PATH, DIMS = {str(path)!r}, {dims!r} or None\n"
             "lab = onnx_lab.open(PATH, dims=DIMS)\nlab2 = onnx_lab.open(PATH, dims=DIMS)\n"
             "lab.summary(); lab.nodes; lab2.nodes")
    # Each timed cell starts without the layouts an earlier run left in graphviz's cache.
    cells = [setup, "clear_cache()\nExplorer(onnx_lab.open(PATH, dims=DIMS), tab='Graph')"]
    if not args["no_widgets"]:
        cells += [f"clear_cache()\n{code}" for code in WIDGETS.values()]
    write_notebook(root / f"{name}.ipynb", cells)
    pages = {t: Page(browser_ctx.new_page()) for t in TOOLS}
    timeout = args["timeout"]
    nb_page = pages["widget"].page
    run_all_cells(nb_page, jupyter_url, f"{name}.ipynb", timeout_ms=600_000)
    nb_cells = nb_page.locator(".jp-Notebook .jp-Cell")
    nb_cells.nth(1).locator(".olc-root svg g.node").first.wait_for(timeout=600_000)
    nb_page.wait_for_function(
        "() => ![...document.querySelectorAll('.jp-Notebook .jp-InputPrompt')].some("
        "p => p.textContent.includes('*'))", timeout=1_200_000, polling=200)

    tools: dict[str, Tool] = {"widget": Widget(pages["widget"], timeout, nb_cells, 1),
                              "report": Report(pages["report"], timeout, html)}
    stack = contextlib.ExitStack()
    venv = args["viewers"]
    netron = _viewer_bin("netron", venv)
    if netron:
        port = _free_port()
        url = stack.enter_context(_server(
            [str(netron), str(path), "--port", str(port), "--host", "127.0.0.1"],
            f"http://127.0.0.1:{port}/", work / f"netron-{name}.log"))
        tools["netron"] = Netron(pages["netron"], timeout, url)
    else:
        print("Netron: skipped (pip install netron, or --viewers VENV)")
    me = _viewer_bin("model-explorer", venv)
    if me:
        port = _free_port()
        data = urllib.request.quote(json.dumps({"models": [{"url": str(path)}]}), safe="")
        stack.enter_context(_server(
            [str(me), str(path), "--extensions=model_explorer_onnx", "--no_open_in_browser",
             "--port", str(port), "--host", "127.0.0.1"],
            f"http://127.0.0.1:{port}/", work / f"me-{name}.log"))
        tools["model_explorer"] = ModelExplorer(pages["model_explorer"], timeout,
                                                f"http://127.0.0.1:{port}/?data={data}")
    else:
        print("Model Explorer: skipped (pip install ai-edge-model-explorer model-explorer-onnx,"
              " or --viewers VENV)")

    res: dict[str, dict[str, list]] = {t: {"load": [], "search": [], "drawn": [], "ready": [],
                                           "ready_drawn": [], "p50": [], "p95": [],
                                           "labels": [], "nodes": []} for t in tools}
    failed: dict[str, str] = {}
    shots = args["shots"]
    order = [t for t in tools if t in args["tools"]]
    with stack:
        for r in range(args["rounds"]):
            for t in order[r % len(order):] + order[:r % len(order)]:
                if t in failed:
                    continue
                tool = tools[t]
                try:
                    res[t]["load"].append(tool.load())
                    tool.pg.page.wait_for_timeout(500)
                    fv = tool.first_view()
                    if fv:
                        res[t]["labels"].append(fv["median"])
                        res[t]["nodes"].append(fv["nodes"])
                    if shots and r == 0:
                        with contextlib.suppress(Exception):  # a busy page: no picture
                            tool.shot(shots / f"{name}_{t}_first_view.png")
                    fr = tool.frames()
                    res[t]["p50"].append(fr["p50"])
                    res[t]["p95"].append(fr["p95"])
                    res[t]["search"].append(tool.search(query))
                    if isinstance(tool, CanvasTool):
                        res[t]["drawn"].append(tool.drawn_s)
                    if shots and r == 0:
                        with contextlib.suppress(Exception):
                            tool.shot(shots / f"{name}_{t}_search.png")
                    if isinstance(tool, Widget):
                        details, drawn = tool.search_ready(query)
                        res[t]["ready"].append(details)
                        res[t]["ready_drawn"].append(drawn)
                except Exception as e:  # noqa: BLE001 - a tool failing is a figure
                    failed[t] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    print(f"  {t}: failed ({failed[t]})", flush=True)
                    with contextlib.suppress(Exception):
                        tool.shot(work / f"{name}_{t}_failed.png")
                        if shots:
                            tool.shot(shots / f"{name}_{t}_failed.png")
                else:
                    v = res[t]
                    if t != "widget":  # an idle page: nothing left running beside the next tool
                        with contextlib.suppress(Exception):
                            tool.pg.page.goto("about:blank")
                    print(f"  round {r + 1} {t:15s} load {v['load'][-1]:6.2f} s  search "
                          f"{v['search'][-1]:6.2f} s"
                          + (f" (drawn {v['drawn'][-1]:.2f} s)" if v["drawn"] else "")
                          + (f"  laid out: {v['ready'][-1]:.2f} s (drawn "
                             f"{v['ready_drawn'][-1]:.2f} s)" if v["ready"] else "")
                          + f"  frames p50/p95 {v['p50'][-1]:5.0f}/"
                          f"{v['p95'][-1]:5.0f} ms"
                          + (f"  labels {v['labels'][-1]:.1f} px, {v['nodes'][-1]} nodes"
                             if fv else ""), flush=True)
    table = {t: {k: _med(v) for k, v in res[t].items()} for t in tools}
    for t, why in failed.items():
        table[t]["failed"] = why
    _print_table(name, table)
    widgets = []
    if not args["no_widgets"]:
        nb_page.bring_to_front()
        rep = table["report"]["load"]
        net = table.get("netron", {}).get("load")
        for i, widget in enumerate(WIDGETS, start=2):
            times = [_widget_times(nb_page, nb_cells, i) for _ in range(args["rounds"])]
            frame = statistics.median(t[0] for t in times)
            filled = statistics.median(t[1] for t in times)
            widgets.append((widget, frame, filled))
            print(f"  {widget:15s} frame {frame:6.2f} s  filled {filled:6.2f} s  "
                  f"frame/report {frame / rep:5.2f}  "
                  + (f"frame/netron {frame / net:5.2f}" if net else "frame/netron —")
                  + (f"  filled/netron {filled / net:5.2f}" if net else ""), flush=True)
        if shots:
            _widget_shots(nb_page, nb_cells, shots, name)
    with contextlib.suppress(Exception):
        _stop_kernels(nb_page)
    for p in pages.values():
        p.page.close()
    return {"table": table, "widgets": widgets, "query": query}


def _stop_kernels(page) -> None:
    """Shut the model's kernels down before the next model (their Labs hold the weights),
    through JupyterLab's page (the server wants its XSRF cookie on a DELETE)."""
    page.evaluate("""async () => {
        const x = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
        const ks = await (await fetch('/api/kernels')).json();
        for (const k of ks) await fetch('/api/kernels/' + k.id,
                                        {method: 'DELETE', headers: {'X-XSRFToken': x}});
    }""")


def _widget_shots(page, cells, shots: Path, name: str) -> None:
    """Every widget at 1,280, 1,920 and a ~600 px pane (cell 1 is the load cell)."""

    class Shifted:  # _screenshots counts widgets from cell 1
        def nth(self, i):
            return cells.nth(i + 1)

    try:
        _screenshots(page, Shifted(), shots, name)
    finally:
        page.set_viewport_size({"width": WIDTH, "height": HEIGHT})


def _print_table(name: str, table: dict) -> None:
    base = table["widget"]
    print(f"\n  {name}: medians                    load    search   drawn  laid out: search"
          "   drawn  frame p95  labels  nodes   load/widget")
    for t, v in table.items():
        if "failed" in v and v["load"] is None:
            print(f"  {t:32s} failed: {v['failed']}")
            continue
        ratio = (f"{v['load'] / base['load']:.2f}×" if v["load"] and base["load"] else "—")
        print(f"  {t:32s} {_fmt(v['load']):>7s} {_fmt(v['search']):>8s} "
              f"{_fmt(v.get('drawn')):>7s} {_fmt(v.get('ready')):>16s} "
              f"{_fmt(v.get('ready_drawn')):>7s} "
              f"{_fmt(v['p95'], 'ms', 0):>9s} {_fmt(v['labels'], 'px', 1):>7s} "
              f"{'—' if v['nodes'] is None else int(v['nodes']):>5}   {ratio}")
    w, r, n, m = (table[t]["load"] if t in table else None
                  for t in ("widget", "report", "netron", "model_explorer"))
    ratios = [f"widget/report {w / r:.2f}" if w and r else "",
              f"widget/Netron {w / n:.2f}" if w and n else "",
              f"widget/Model Explorer {w / m:.2f}" if w and m else "",
              f"report/Netron {r / n:.2f}" if r and n else "",
              f"report/Model Explorer {r / m:.2f}" if r and m else ""]
    print("  load ratios: " + ", ".join(x for x in ratios if x))
    sw, sr, sn, sm = (table[t]["search"] if t in table else None
                      for t in ("widget", "report", "netron", "model_explorer"))
    ratios = [f"widget/Netron {sw / sn:.2f}" if sw and sn else "",
              f"widget/Model Explorer {sw / sm:.2f}" if sw and sm else "",
              f"widget/report {sw / sr:.2f}" if sw and sr else "",
              f"report/Netron {sr / sn:.2f}" if sr and sn else ""]
    print("  search → details ratios: " + ", ".join(x for x in ratios if x), flush=True)
    dw, dr = table["widget"].get("drawn"), (table.get("report") or {}).get("drawn")
    rw = table["widget"].get("ready_drawn")
    ratios = [f"widget/report {dw / dr:.2f}" if dw and dr else "",
              f"laid out widget/report {rw / dr:.2f}" if rw and dr else "",
              f"widget/Netron's details {dw / sn:.2f}" if dw and sn else ""]
    print("  search → node drawn ratios: " + ", ".join(x for x in ratios if x), flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0

    def opt(flag: str, default=None):
        return argv[argv.index(flag) + 1] if flag in argv else default

    args = {"rounds": int(opt("--rounds", 3)), "timeout": float(opt("--timeout", 300)),
            "viewers": Path(opt("--viewers")) if opt("--viewers") else None,
            "shots": Path(opt("--shots")) if opt("--shots") else None,
            "no_widgets": "--no-widgets" in argv,
            "tools": opt("--tools", ",".join(TOOLS)).split(",")}
    which = opt("--models", "bert,gpt2,llama32").split(",")
    if not Path("/usr/bin/chromium").exists():
        print("skipped: /usr/bin/chromium missing")
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: torch is needed to export the models (benchmarks/_models.py)")
        return 0
    if args["shots"]:
        args["shots"].mkdir(parents=True, exist_ok=True)
    sys.path.append(str(ROOT / "tests" / "browser"))
    from _jupyter import CHROMIUM, CHROMIUM_ARGS, jupyter_lab
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="bench_viewers_"))
    root = work / "root"
    root.mkdir()
    out = {}
    try:
        with jupyter_lab(root, work, timeout=120) as url, sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(work / "profile"), executable_path=CHROMIUM, headless=True,
                args=CHROMIUM_ARGS, viewport={"width": WIDTH, "height": HEIGHT})
            try:
                for name in which:
                    out[name] = bench_model(name, args, ctx, work, url, root)
            finally:
                ctx.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nsummary (medians; load: file → graph drawn)")
    for name, o in out.items():
        _print_table(name, o["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
