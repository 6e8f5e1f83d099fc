"""The graph canvas in a real JupyterLab (headless Chromium) on real-world-style models.

A YOLOv8-like detector (313 nodes, dynamic height/width) and a BERT-sized encoder (1,399
nodes), both built by ``_models.py``, the control-flow sample and a generated 5,000-node
drawing. Checks: the first view is readable (labels >= 11 px, no node under 30 px wide) from
the graph's inputs and the overview is one key away; zoom and pan change the view; one search
query finds a node inside a collapsed box (the box opens, the node is centred and its details
show) and Enter cycles; a click shows attributes, shapes and a weight's first values in the
side panel, which does not cover the selection; a double click opens a Loop body; pan/zoom
frame times at 5,000 nodes (p95 printed and saved); setting height/width in the run-context
bar lets Profile run; a tick in the DriftDebugger centres the node in an Explorer on the same
Lab. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import io
import json

import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx, onnx_lab, _models\n"
    "from onnx_lab.widgets import Explorer, Profiler, DriftDebugger\n"
    "onnx.save(_models.detector(), 'det.onnx'); onnx.save(_models.bert_like(), 'bert.onnx')",
    "lab = onnx_lab.open('det.onnx')\nex = Explorer(lab, tab='Graph')\nex",
    "bert = onnx_lab.open('bert.onnx', dims={'batch': 1, 'sequence': 16})\n"
    "exb = Explorer(bert, tab='Graph')\nexb",
    "prof = Profiler(lab, runs=2, warmup=1)\nprof",
    "dd = DriftDebugger(lab, lab, dims={'height': 64, 'width': 64})\ndd",
    "cf = onnx_lab.open('sample:control_flow')\nexcf = Explorer(cf, tab='Graph')\nexcf",
    "from onnx_lab.widgets.canvas import GraphCanvas\n"
    "big = GraphCanvas(height=560)\nbig.svg = _models.grid_svg(5000)\n"
    "big.items = {f'node{i}': f'matmul {i}' for i in range(5000)}\n"
    "big.layout.display = None\nbig",
    # nothing drawn ahead: a search hit's box is laid out when chosen (its own Lab: no link)
    "bert2 = onnx_lab.open('bert.onnx', dims={'batch': 1, 'sequence': 16})\n"
    "exn = Explorer(bert2, tab='Graph', prefetch=0)\nexn",
]


@pytest.fixture(scope="module")
def canvas_page(tmp_path_factory):
    work = tmp_path_factory.mktemp("jupyterlab")
    with lab_in_browser(work, {"canvas.ipynb": CELLS}, models=True) as (url, page):
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        run_all_cells(page, url, "canvas.ipynb")
        cells = page.locator(".jp-Notebook .jp-Cell")
        try:
            # The DriftDebugger and the big canvas are the last widgets: every cell has run.
            cells.nth(4).locator(".onnx-lab-widget").first.wait_for(timeout=240_000)
            cells.nth(6).locator(".olc-root svg g.node").first.wait_for(timeout=240_000)
        except Exception as e:
            page.screenshot(path=str(ARTIFACTS / "canvas_setup_failed.png"), full_page=True)
            raise AssertionError(f"the cells did not all show; console errors: {errors[-5:]}") \
                from e
        yield page, cells


def _canvas(cells, i):
    root = cells.nth(i).locator(".olc-root").first
    root.wait_for(timeout=60_000)
    root.locator("svg g.node").first.wait_for(timeout=60_000)
    return root


def _ink(png: bytes) -> float:
    """Fraction of pixels that are not (near) white."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    hist = img.histogram()
    return 1.0 - sum(hist[235:]) / max(1, img.width * img.height)


def _centre_offset(page, root, key: str, free: bool = False) -> tuple[float, float]:
    """Offset of element ``key`` from the centre of the view (free: of the part the details
    panel leaves free)."""
    port = root.locator(".olc-port").bounding_box()
    g = root.locator(f"svg g.node[id={json.dumps('n:' + key)}]").bounding_box()
    width = port["width"]
    panel = root.locator(".olc-panel")
    if free and panel.is_visible():
        pb = panel.bounding_box()
        if port["width"] - pb["width"] - 12 > port["width"] * 0.4:
            width = port["width"] - pb["width"] - 12
    return (g["x"] + g["width"] / 2 - (port["x"] + width / 2),
            g["y"] + g["height"] / 2 - (port["y"] + port["height"] / 2))


def _labels(root) -> dict:
    """Drawn nodes inside the view: how many, the median on-screen height of their first
    label line (px), how many are under 30 px wide, how many are graph inputs."""
    return root.evaluate("""(r) => {
        const p = r.querySelector('.olc-port').getBoundingClientRect();
        const hs = []; let nodes = 0, narrow = 0, inputs = 0;
        for (const g of r.querySelectorAll('.olc-stage g.node')) {
            const b = g.getBoundingClientRect();
            if (b.right < p.left || b.left > p.right || b.bottom < p.top || b.top > p.bottom)
                continue;
            nodes++;
            if (b.width < 30) narrow++;
            if ((g.id || '').startsWith('n:input:')) inputs++;
            const t = g.querySelector('text');
            if (t) hs.push(t.getBoundingClientRect().height);
        }
        hs.sort((a, b) => a - b);
        return {nodes, narrow, inputs, median: hs.length ? hs[hs.length >> 1] : 0,
                k: +r.dataset.k};
    }""")


def _first_inputs(root) -> list[dict]:
    """The graph inputs of the first screen (their tops within half a view of the topmost
    input's), where they are against the view (px from its left and right edges)."""
    return root.evaluate("""(r) => {
        const p = r.querySelector('.olc-port').getBoundingClientRect();
        const ins = [...r.querySelectorAll('.olc-stage g.node[id^="n:input:"]')].map((g) => {
            const b = g.getBoundingClientRect();
            return {id: g.id, top: b.top, left: b.left - p.left, right: p.right - b.right};
        });
        if (!ins.length) return [];
        const top = Math.min(...ins.map((i) => i.top));
        return ins.filter((i) => i.top < top + p.height / 2);
    }""")


# Records, in the page, each change of the canvas's selection, drawing, busy line and panel
# (what the panel shows: the node ``q``'s details or not), with the drawing shown at the time.
_RECORD = """(r, q) => {
    const log = [], panel = r.querySelector('.olc-panel');
    const note = (what) => log.push({what, rendered: +r.dataset.rendered,
        busy: r.querySelector('.olc-busy').textContent, selected: r.dataset.selected || '',
        node: panel.offsetParent !== null && !!panel.querySelector('.olc-inputs')
              && panel.innerText.includes(q)});
    new MutationObserver(() => note('root')).observe(r, {attributes: true,
        attributeFilter: ['data-rendered', 'data-selected', 'data-busy']});
    new MutationObserver(() => note('panel')).observe(panel, {childList: true, subtree: true,
                                                              attributes: true});
    new MutationObserver(() => note('busy')).observe(r.querySelector('.olc-busy'),
                                                     {childList: true, characterData: true,
                                                      subtree: true});
    r.__log = log;
    return +r.dataset.rendered;
}"""


def _not_covered(root, key: str) -> None:
    """Neither the details panel nor the search's result list covers drawn element ``key``
    (the list closes on Enter: the chosen node is in view, the counter says which hit)."""
    root.page.wait_for_timeout(300)
    g = root.locator(f"svg g.node[id={json.dumps('n:' + key)}]").bounding_box()
    for cover in (".olc-panel", ".olc-results"):
        panel = root.locator(cover)
        if not panel.is_visible():
            continue
        p = panel.bounding_box()
        overlap = not (g["x"] + g["width"] <= p["x"] or g["x"] >= p["x"] + p["width"]
                       or g["y"] + g["height"] <= p["y"] or g["y"] >= p["y"] + p["height"])
        assert not overlap, (cover, g, p)


@pytest.mark.parametrize("cell,name,query", [(1, "detector", "/model.12/Concat"),
                                              (2, "bert", "/encoder/layer.7/attention/self/Softmax")])
def test_overview_zoom_pan_search_click(canvas_page, cell, name, query):
    page, cells = canvas_page
    root = _canvas(cells, cell)
    port = root.locator(".olc-port")
    try:
        root.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        # Open readable: not blank, labels >= 11 px from the inputs, the overview one key away.
        assert _ink(port.screenshot()) > 0.01
        box = port.bounding_box()
        seen = _labels(root)
        assert seen["nodes"] >= 3 and seen["median"] >= 11 and seen["narrow"] == 0, seen
        if root.get_attribute("data-fit") == "readable":
            assert root.locator(".olc-mini").is_visible()
            assert root.locator("svg g.node[id^='n:input:']").count() == 0 or seen["inputs"], seen
            # From the inputs' left edge: the leftmost input of the first screen is whole in
            # view (centring on their middle put the BERT-like's input_ids off its left edge)
            first = _first_inputs(root)
            if first:
                leftmost = min(first, key=lambda i: i["left"])
                assert 0 <= leftmost["left"] and 0 <= leftmost["right"], first
        page.screenshot(path=str(ARTIFACTS / f"canvas_{name}_overview.png"), full_page=False)
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_overview_port.png"))
        port.focus()
        page.keyboard.press("f")
        svg = root.locator(".olc-stage svg").bounding_box()
        assert root.get_attribute("data-fit") == "whole"
        assert svg["width"] <= box["width"] + 2 and svg["height"] <= box["height"] + 2
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_fit_port.png"))
        root.locator(".olc-readable").click()
        assert root.get_attribute("data-fit") in ("readable", "whole")

        k0 = float(root.get_attribute("data-k"))
        root.locator(".olc-zoom-in").click()
        k1 = float(root.get_attribute("data-k"))
        assert k1 > k0
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.wheel(0, -400)
        page.wait_for_timeout(100)
        k2 = float(root.get_attribute("data-k"))
        assert k2 > k1
        x0 = float(root.get_attribute("data-x"))
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 120, box["y"] + box["height"] / 2 + 40,
                        steps=5)
        page.mouse.up()
        assert abs(float(root.get_attribute("data-x")) - x0 - 120) < 2

        # One query finds the node, also inside a collapsed box: the box opens (one message
        # to Python), the node itself is centred at a readable size and selected.
        rendered = int(root.get_attribute("data-rendered"))
        search = root.locator(".olc-search")
        search.fill(query)
        first = root.locator(".olc-results .olc-result").first
        first.wait_for(timeout=5_000)
        assert query in first.inner_text()
        search_ms = float(root.get_attribute("data-search-ms"))
        root.evaluate(_RECORD, query)
        search.press("Enter")
        page.wait_for_function("([r, q]) => r.dataset.selected === q",
                               arg=[root.element_handle(), query], timeout=120_000)
        root.locator(f"svg g.node[id={json.dumps('n:' + query)}]").wait_for(timeout=30_000)
        page.wait_for_timeout(400)
        dx, dy = _centre_offset(page, root, query, free=True)
        assert abs(dx) < 4 and abs(dy) < 4, (dx, dy)
        assert _labels(root)["median"] >= 11
        root.locator(".olc-panel .olc-inputs").wait_for(timeout=30_000)
        # the page never selected the hit's box on the way (only the node)
        assert not [e for e in root.evaluate("r => r.__log") if e["selected"].startswith("scope:")]
        _not_covered(root, query)
        print(f"{name}: search over the index {search_ms:.2f} ms; opened a box: "
              f"{int(root.get_attribute('data-rendered')) > rendered}")
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_search.png"))

        root.locator(".olc-fit").click()
        op = root.locator("svg g.node.onnx-op").filter(
            has_text="Conv" if name == "detector" else "MatMul").first
        root.locator(".olc-search").fill(op.get_attribute("id")[2:])
        root.locator(".olc-search").press("Enter")
        op_id = op.get_attribute("id")[2:]
        op.click()
        panel = root.locator(".olc-panel")
        panel.locator(".olc-inputs").wait_for(timeout=30_000)
        # the panel of this node (the kernel may still be drawing boxes ahead)
        page.wait_for_function("([p, k]) => p.innerText.includes(k)",
                               arg=[panel.element_handle(), op_id], timeout=30_000)
        text = panel.inner_text()
        assert "inputs" in text and "outputs" in text and "×" in text
        if name == "detector":
            assert "kernel_shape" in text and "weight" in text
            # The weights' first values, sliced like Netron's (a bounded table per weight).
            table = panel.locator(".olc-values-table").first
            table.wait_for(timeout=10_000)
            assert panel.locator(".olc-values-table td").count() >= 2
            assert "values" in panel.locator(".olc-values summary").first.inner_text()
        _not_covered(root, op.get_attribute("id")[2:])
        port.screenshot(path=str(ARTIFACTS / f"canvas_{name}_click.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / f"canvas_{name}_page.png"))


def test_bar_dims_then_profile(canvas_page):
    page, cells = canvas_page
    prof = cells.nth(3).locator(".onnx-lab-profiler")
    try:
        prof.scroll_into_view_if_needed()
        prof.locator("button", has_text="Profile").first.click()
        prof.locator(".onnx-lab-missing").first.wait_for(timeout=30_000)  # bar points at dims
        for dim in ("height", "width"):
            field = prof.locator(f".onnx-lab-dim-{dim} input")
            field.fill("64")
            field.press("Enter")
        prof.locator("button", has_text="Profile").first.click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.onnx-lab-profiler')].some("
            "e => e.innerText.includes('p50'))", timeout=90_000)
        assert prof.locator(".onnx-lab-error").count() == 0
    finally:
        prof.screenshot(path=str(ARTIFACTS / "profiler_bar_browser.png"))


def test_drift_tick_centres_node_in_explorer(canvas_page):
    page, cells = canvas_page
    dd = cells.nth(4).locator(".onnx-lab-widget").first
    root = _canvas(cells, 1)
    try:
        dd.scroll_into_view_if_needed()
        dd.locator("button", has_text="Run").first.click()
        rows = dd.locator(".onnx-lab-layers input.olt-check")
        rows.nth(3).wait_for(timeout=120_000)
        focused = root.get_attribute("data-focused") or "0"
        rows.nth(3).check()
        page.wait_for_function(
            f"() => (document.querySelector('.olc-root').dataset.focused || '0') !== '{focused}'",
            timeout=60_000)
        key = root.get_attribute("data-selected")
        root.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        dx, dy = _centre_offset(page, root, key, free=True)  # in the part the panel leaves free
        assert abs(dx) < 3 and abs(dy) < 3, (dx, dy)
        root.locator(".olc-port").screenshot(path=str(ARTIFACTS / "canvas_linked_from_drift.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / "drift_link_page.png"))


def test_double_click_opens_a_loop_body(canvas_page):
    page, cells = canvas_page
    root = _canvas(cells, 5)
    try:
        root.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        rendered = int(root.get_attribute("data-rendered"))
        # On the node's label (a child element): the port holds the pointer capture, so the
        # event's own target is the port; the canvas resolves the node under the pointer.
        g = root.locator("svg g.node[id='n:Loop_3']")
        g.dblclick()
        # this cell's canvas itself: an index into the page's canvases changes with the
        # tabs other cells have drawn so far
        handle = root.element_handle()
        page.wait_for_function("([r, n]) => +r.dataset.rendered > n", arg=[handle, rendered],
                               timeout=60_000)
        root.locator("svg g.node[id='n:Loop_3/body/Identity_0']").wait_for(timeout=30_000)
        port = root.locator(".olc-port")
        port.screenshot(path=str(ARTIFACTS / "canvas_loop_body_dblclick.png"))
        # One query from the body finds a node two bodies deep in the other branch.
        search = root.locator(".olc-search")
        search.fill("then_branch/add_0")
        root.locator(".olc-results .olc-result").first.wait_for(timeout=5_000)
        search.press("Enter")
        key = "Loop_3/body/inner_if/then_branch/Add_0"
        page.wait_for_function("([r, k]) => r.dataset.selected === k", arg=[handle, key],
                               timeout=60_000)
        root.locator(f"svg g.node[id='n:{key}']").wait_for(timeout=30_000)
        port.screenshot(path=str(ARTIFACTS / "canvas_search_in_body.png"))
        # From inside the body every id holds "loop": the Loop node itself (an op type the
        # query names) comes first, not after the body's drawn nodes
        search.fill("loop")
        first = root.locator(".olc-results .olc-result .olc-result-label").first
        first.wait_for(timeout=5_000)
        assert first.inner_text().startswith("Loop"), first.inner_text()
    finally:
        page.screenshot(path=str(ARTIFACTS / "canvas_loop_page.png"))


_FRAMES = """async (r) => {
    const port = r.querySelector('.olc-port'), b = port.getBoundingClientRect();
    const mini = r.querySelector('.olc-mini');
    const frame = () => new Promise((res) => requestAnimationFrame(res));
    const times = [];
    await frame();
    let last = performance.now();
    for (let i = 0; i < 160; i++) {
        if (i < 80) {  // zoom out and back in about the centre (crosses the detail level)
            const out = Math.floor(i / 20) % 2 === 0;
            port.dispatchEvent(new WheelEvent('wheel', {deltaY: out ? 80 : -80,
                clientX: b.left + b.width / 2, clientY: b.top + b.height / 2,
                bubbles: true, cancelable: true}));
        } else if (mini && mini.style.display === 'block') {  // pan across via the minimap
            const m = mini.getBoundingClientRect(), t = (i - 80) / 80;
            mini.dispatchEvent(new PointerEvent('pointerdown', {clientX: m.left + m.width * t,
                clientY: m.top + m.height * (0.2 + 0.6 * t), bubbles: true, button: 0}));
        }
        await frame();
        const now = performance.now();
        times.push(now - last);
        last = now;
    }
    const s = times.slice().sort((a, b) => a - b);
    const q = (f) => s[Math.min(s.length - 1, Math.floor(s.length * f))];
    return {frames: times.length, p50: q(0.5), p95: q(0.95), max: s[s.length - 1],
            nodes: +r.dataset.nodes};
}"""


def _settled(page, root, n: int) -> int:
    """Wait until the large drawing's SVG is back (settled more than ``n`` times)."""
    page.wait_for_function(
        "([r, n]) => r.dataset.layer === 'svg' && +(r.dataset.settled || 0) > n",
        arg=[root.element_handle(), n], timeout=15_000)
    return int(root.get_attribute("data-settled"))


def test_pan_zoom_frames_at_5000_nodes(canvas_page):
    """Frame times of zoom (wheel) and pan at 5,000 drawn nodes (benchmarks/
    bench_canvas_frames.py measures them properly; here the figure is printed and saved and
    the bound is loose: a loaded 2-core machine, software rendering). Only what is in view
    is drawn: a node brought into view by a drag is there and clickable, a search for a node
    far away draws it, and the far level is the canvas layer, not the SVG."""
    page, cells = canvas_page
    root = _canvas(cells, 6)
    port = root.locator(".olc-port")
    try:
        root.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        assert int(root.get_attribute("data-nodes")) == 5000 and root.get_attribute("data-big")
        n = _settled(page, root, 0)
        seen = _labels(root)
        assert seen["median"] >= 11 and seen["narrow"] == 0, seen
        drawn = root.locator(".olc-stage svg g.node").count()
        assert 20 < drawn < 1000, drawn  # the view and a margin, not the 5,000
        assert root.locator("svg g.node[id='n:node4999']").count() == 0

        # Drag: a node that was out of view (and out of the page) comes into view, drawn
        # and clickable where it shows.
        key = root.evaluate("""(r) => {
            const p = r.querySelector('.olc-port').getBoundingClientRect();
            const k = +r.dataset.k, x = +r.dataset.x, y = +r.dataset.y;
            // grid_svg: node i at (10 + 150 (i % 50), 10 + 64 floor(i / 50)), 120 x 36
            for (let i = 0; i < 5000; i++) {
                const sx = (10 + 150 * (i % 50) + 60) * k + x, sy = (10 + 64 * Math.floor(i / 50) + 18) * k + y;
                if (sy > p.height * 1.9 && sy < p.height * 2.3 && sx > p.width * 0.3 && sx < p.width * 0.7
                    && !document.getElementById('n:node' + i)) return 'node' + i;
            }
            return '';
        }""")
        assert key, "no node out of the view below it"
        box = port.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] - 20)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] - 20 - 1.3 * box["height"],
                        steps=12)
        page.mouse.up()
        n = _settled(page, root, n)
        g = root.locator(f"svg g.node[id='n:{key}']")
        g.wait_for(timeout=5_000)
        g.click()
        page.wait_for_function("([r, k]) => r.dataset.selected === k",
                               arg=[root.element_handle(), key], timeout=5_000)
        port.screenshot(path=str(ARTIFACTS / "canvas_5000_dragged.png"))

        # Search a node far away: centred, drawn, selected.
        search = root.locator(".olc-search")
        search.fill("matmul 4999")
        search.press("Enter")
        n = _settled(page, root, n)
        root.locator("svg g.node[id='n:node4999']").wait_for(timeout=5_000)
        assert root.get_attribute("data-selected") == "node4999"
        dx, dy = _centre_offset(page, root, "node4999")
        assert abs(dx) < 4 and abs(dy) < 4, (dx, dy)
        assert root.locator("svg g.node[id='n:node0']").count() == 0

        res = root.evaluate(_FRAMES)
        print("5,000-node canvas frames (ms):", res)
        (ARTIFACTS / "canvas_frames_5000.json").write_text(json.dumps(res, indent=1))
        assert res["frames"] == 160 and res["p95"] < 600, res
        port.focus()
        page.keyboard.press("f")  # the whole drawing: too much for the SVG, the layer stays
        page.wait_for_function("r => r.dataset.painter === 'coarse'", arg=root.element_handle(),
                               timeout=15_000)
        assert root.get_attribute("data-layer") == "canvas"
        assert "olc-lod-far" in (root.get_attribute("class") or "")
        port.screenshot(path=str(ARTIFACTS / "canvas_5000_fit.png"))
        # A click there still selects the node under the pointer (the scene's hit test).
        page.keyboard.press("1")
        n = _settled(page, root, n)
        inside = root.evaluate("""(r) => {
            const p = r.querySelector('.olc-port').getBoundingClientRect();
            const g = [...r.querySelectorAll('.olc-stage g.node')].find((n) => {
                const b = n.getBoundingClientRect();
                return b.left > p.left + 40 && b.right < p.right - 200 && b.top > p.top + 40
                    && b.bottom < p.bottom - 40;
            });
            return g ? g.id.slice(2) : '';
        }""")
        assert inside
        root.locator(f"svg g.node[id='n:{inside}']").click()
        page.wait_for_function("([r, k]) => r.dataset.selected === k",
                               arg=[root.element_handle(), inside], timeout=5_000)
    finally:
        page.screenshot(path=str(ARTIFACTS / "canvas_5000_page.png"))


def test_expand_keeps_the_opened_box_in_view(canvas_page):
    """A click on a box of the detector's overview opens it (drawn ahead: a swap) and the
    view centres its first member at a readable size, in the same message as the drawing."""
    page, cells = canvas_page
    root = _canvas(cells, 1)
    try:
        root.locator(".olc-search").fill("")
        root.scroll_into_view_if_needed()
        port = root.locator(".olc-port")
        port.focus()
        page.keyboard.press("1")
        page.wait_for_timeout(300)
        boxes = root.locator(".olc-stage svg g.node.onnx-box")
        box = None
        for i in range(boxes.count()):
            b = boxes.nth(i)
            bb = b.bounding_box()
            pb = port.bounding_box()
            if bb and pb["y"] < bb["y"] and bb["y"] + bb["height"] < pb["y"] + pb["height"]:
                box = b
                break
        assert box is not None
        scope = box.get_attribute("id")[len("n:scope:"):]
        rendered = int(root.get_attribute("data-rendered"))
        t0 = page.evaluate("performance.now()")
        box.click()
        page.wait_for_function("([r, n]) => +r.dataset.rendered > n",
                               arg=[root.element_handle(), rendered], timeout=60_000)
        page.wait_for_function("([r, s]) => (r.dataset.centred || '').startsWith(s + '/')",
                               arg=[root.element_handle(), scope], timeout=10_000)
        seconds = (page.evaluate("performance.now()") - t0) / 1000
        key = root.get_attribute("data-centred")
        page.wait_for_timeout(300)
        # centred (in the part of the view the details panel left free when it was centred:
        # the box's panel closes once the drawing no longer holds the box)
        dx, dy = _centre_offset(page, root, key)
        assert abs(dx) < 0.2 * port.bounding_box()["width"] and abs(dy) < 4, (dx, dy)
        assert _labels(root)["median"] >= 11
        print(f"expand {scope}: click to drawn and centred {seconds:.2f} s")
        port.screenshot(path=str(ARTIFACTS / "canvas_expand_kept.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / "canvas_expand_page.png"))


def test_search_hit_in_a_box_not_laid_out_shows_its_details_first(canvas_page):
    """A hit inside a box whose expand is not laid out (``prefetch=0``), chosen right after a
    pan (the view's sync to Python in flight): the node's details show before the box is
    drawn open, the bar says what the view waits on meanwhile, the box is never selected,
    then the node is drawn, centred and selected, and its panel stays."""
    page, cells = canvas_page
    root = _canvas(cells, 7)
    port = root.locator(".olc-port")
    query = "/encoder/layer.11/attention/self/Softmax"
    try:
        root.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        shown = root.evaluate(_RECORD, query)
        box = port.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 - 80, box["y"] + box["height"] / 2 - 30,
                        steps=4)
        page.mouse.up()
        search = root.locator(".olc-search")
        search.fill(query)
        search.press("Enter")
        handle = root.element_handle()
        page.wait_for_function("([r, q]) => r.dataset.centred === q && r.dataset.selected === q",
                               arg=[handle, query], timeout=120_000)
        root.locator(f"svg g.node[id={json.dumps('n:' + query)}]").wait_for(timeout=30_000)
        page.wait_for_timeout(1000)  # nothing late takes the node's panel away
        log = root.evaluate("r => r.__log")
        first = next(e for e in log if e["node"])
        assert first["rendered"] == shown, log  # the details came before the opened box
        waits = [e["busy"] for e in log if e["rendered"] == shown and e["busy"]]
        assert any(w.startswith("laying out /encoder/layer.11") and "not drawn ahead" in w
                   for w in waits), waits
        assert not [e for e in log if e["selected"].startswith("scope:")], log
        assert root.locator(".olc-busy").inner_text() == ""
        assert root.get_attribute("data-selected") == query
        panel = root.locator(".olc-panel")
        assert panel.is_visible() and query in panel.inner_text()
        dx, dy = _centre_offset(page, root, query, free=True)
        assert abs(dx) < 4 and abs(dy) < 4, (dx, dy)
        port.screenshot(path=str(ARTIFACTS / "canvas_search_not_ahead.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / "canvas_search_not_ahead_page.png"))


def test_a_narrowed_canvas_keeps_its_selection_in_view(canvas_page):
    # A form or panel opening beside the canvas narrows it: a selection centred in the wide
    # canvas was left half under the new right edge (the Editor's form after a search). One
    # the user had panned out of view stays where it is.
    page, cells = canvas_page
    root = _canvas(cells, 1)
    port = root.locator(".olc-port")
    key = "/model.12/Concat"
    node = root.locator(f"svg g.node[id={json.dumps('n:' + key)}]")

    def whole() -> bool:
        n, p = node.bounding_box(), port.bounding_box()
        return (n["x"] >= p["x"] and n["x"] + n["width"] <= p["x"] + p["width"]
                and n["y"] >= p["y"] and n["y"] + n["height"] <= p["y"] + p["height"])

    try:
        root.scroll_into_view_if_needed()
        search = root.locator(".olc-search")
        search.fill(key)
        search.press("Enter")
        page.wait_for_function(
            f"() => document.querySelector('.olc-root').dataset.centred === {json.dumps(key)}",
            timeout=30_000)
        page.keyboard.press("Escape")  # (a panel left open is allowed for: whole() is judged on the port)
        root.locator(".olc-port").focus()
        page.wait_for_timeout(300)
        wide = port.bounding_box()["width"]
        n = node.bounding_box()
        # put the node just left of the canvas's middle, then narrow the canvas to 45 %
        dx = port.bounding_box()["x"] + wide * 0.40 - (n["x"] + n["width"] / 2)
        start = port.bounding_box()
        page.mouse.move(start["x"] + start["width"] / 2, start["y"] + start["height"] / 2)
        page.mouse.down()
        page.mouse.move(start["x"] + start["width"] / 2 + dx, start["y"] + start["height"] / 2,
                        steps=8)
        page.mouse.up()
        root.evaluate("r => { r.style.width = '45%'; }")
        page.wait_for_timeout(400)
        assert port.bounding_box()["width"] < wide * 0.6
        assert whole(), (node.bounding_box(), port.bounding_box())
        # widened again, then the node dragged out of view: a narrowing leaves it there
        root.evaluate("r => { r.style.width = ''; }")
        page.wait_for_timeout(400)
        p = port.bounding_box()
        page.mouse.move(p["x"] + 20, p["y"] + p["height"] / 2)
        page.mouse.down()
        page.mouse.move(p["x"] + 20 - 3 * p["width"], p["y"] + p["height"] / 2, steps=8)
        page.mouse.up()
        away = node.bounding_box()
        assert away["x"] + away["width"] < p["x"]
        root.evaluate("r => { r.style.width = '45%'; }")
        page.wait_for_timeout(400)
        assert node.bounding_box()["x"] + node.bounding_box()["width"] < port.bounding_box()["x"]
    finally:
        root.evaluate("r => { r.style.width = ''; }")
        page.screenshot(path=str(ARTIFACTS / "canvas_narrowed.png"))
