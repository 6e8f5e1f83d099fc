"""Pan/zoom frame times of the graph canvas on LLM-scale drawings, in headless Chromium.

The drawings are graphviz layouts (``lab.render(max_nodes=...)``, cheap dot settings as the
canvas gets them) of the Llama-shaped decoders of ``_decoder_graph.py``: 32 layers (~5,600
nodes, 3,900 drawn elements once the Constant nodes are folded into their consumers) and 91
layers (~16,000 nodes), plus the browser tests' generated 5,000-node grid. Each is shown in a
:class:`~onnx_lab.widgets.canvas.GraphCanvas` in JupyterLab (``--page lab``) or in a bare
page with the same ``canvas.js`` and a stand-in for the widget model (``--page bare``, the
default: no JupyterLab). ``--before CHECKOUT`` measures that checkout's canvas in
the same run, turn about, and prints the ratio of the p95s.

The page is driven the way a user moves: wheel events about the pointer (zoom from the
readable first view out to the whole graph and back) and a drag (pointer events over the
view), one input event per animation frame, from ``requestAnimationFrame`` callbacks in the
page; a frame's time is the interval between two callbacks, so it holds everything the
browser did for that frame (style, layout, paint, raster). Then the same at the far level
(the whole graph in view, ``f``): drag and zoom in. The table gives p50 / p95 / max per
model and phase; the target is p95 <= 33 ms (30 frames a second).

``llama32-dynamo`` is the real 32-layer Llama export of ``bench_viewers.py``
(``_models.llama_dynamo(32)``: transformers, ``torch.onnx.export(dynamo=True)``, 6,050 nodes)
drawn whole the same way.

In JupyterLab each drawing and version gets a notebook of its own, alone in the page (two
canvases in one document slowed each other: every frame restyles the whole document, and the
old canvas holds all of a large SVG in it), its kernel shut down after; a canvas that does not
draw within ``--draw-timeout`` seconds is reported as such and the run goes on (the old
canvas with the 21 MB SVG of the 91-layer decoder never drew within 10 minutes, and the run
used to wait on it for ever).

Layouts are cached under ``--cache`` (the 91-layer one takes a few minutes of dot).

Usage::

    .venv/bin/python benchmarks/bench_canvas_frames.py --before ../main  # 32, 91 layers, grid
    .venv/bin/python benchmarks/bench_canvas_frames.py --models llama32,llama32-dynamo --page lab
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
STATIC = ROOT / "onnx_lab" / "widgets" / "static"
MODELS = {"llama32": 32, "llama91": 91, "grid5000": 0, "llama32-dynamo": 32}


def drawing(name: str, cache: Path) -> Path:
    """The SVG of model ``name`` (cached): a graphviz layout of the whole decoder, or the grid."""
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"{name}.svg"
    if out.exists():
        return out
    if name.startswith("grid"):
        sys.path.insert(0, str(ROOT / "tests" / "browser"))
        import _models

        out.write_text(_models.grid_svg(int(name[4:])))
        return out
    import onnx

    import onnx_lab

    if name.endswith("-dynamo"):  # the real export of bench_viewers (benchmarks/_models.py)
        import _models

        path = _models.llama_dynamo(MODELS[name])
    else:
        import _decoder_graph

        path = cache / f"{name}.onnx"
        onnx.save(_decoder_graph.llama_like(MODELS[name]), str(path))
    lab = onnx_lab.open(path)
    t0 = time.perf_counter()
    r = lab.render(max_nodes=len(lab.index) + 10, timeout=900)
    print(f"{name}: {len(lab.index)} nodes, {len(r.view.nodes)} drawn, laid out in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    out.write_text(r.svg or "")
    return out


# The driver, in the page: one input event per animation frame, frame = rAF interval.
DRIVE = """async (r, steps) => {
    const port = r.querySelector('.olc-port');
    const frame = () => new Promise((res) => requestAnimationFrame(res));
    const b = port.getBoundingClientRect();
    const cx = b.left + b.width / 2, cy = b.top + b.height / 2;
    const out = {};
    const wheel = (dy) => port.dispatchEvent(new WheelEvent('wheel', {deltaY: dy,
        clientX: cx, clientY: cy, bubbles: true, cancelable: true}));
    const ptr = (type, x, y) => port.dispatchEvent(new PointerEvent(type, {clientX: x,
        clientY: y, bubbles: true, cancelable: true, button: 0, buttons: type === 'pointerup'
        ? 0 : 1, pointerId: 1, pointerType: 'mouse', isPrimary: true}));
    async function phase(name, n, act) {
        await frame(); await frame();
        const times = [];
        let last = performance.now();
        const t0 = performance.now();
        for (let i = 0; i < n && performance.now() - t0 < 30000; i++) {  // 30 s at most
            act(i);
            await frame();
            const now = performance.now();
            times.push(now - last);
            last = now;
        }
        out[name] = times;
    }
    // settle: what a still view costs once a move ends (culling, the exact drawing)
    const settle = () => new Promise((res) => setTimeout(res, 600));
    await settle();
    // readable first view: drag across, then zoom out to the whole graph and back in
    ptr('pointerdown', cx, cy);
    await phase('readable: drag', steps, (i) => ptr('pointermove', cx - 12 * (i + 1),
                                                  cy - 8 * (i + 1)));
    ptr('pointerup', cx - 12 * steps, cy - 8 * steps);
    await settle();
    await phase('zoom out', steps, () => wheel(60));
    await settle();
    await phase('zoom in', steps, () => wheel(-60));
    await settle();
    port.focus();
    port.dispatchEvent(new KeyboardEvent('keydown', {key: 'f', bubbles: true}));
    await settle();
    ptr('pointerdown', cx, cy);
    await phase('whole: drag', steps, (i) => ptr('pointermove', cx + 6 * (i + 1),
                                               cy + 4 * (i + 1)));
    ptr('pointerup', cx + 6 * steps, cy + 4 * steps);
    await settle();
    await phase('whole: zoom in', steps, () => wheel(-40));
    await settle();
    return {frames: out, nodes: +r.dataset.nodes, k: +r.dataset.k};
}"""


def _stats(times: list[float]) -> dict:
    s = sorted(times)
    q = lambda f: s[min(len(s) - 1, int(len(s) * f))]  # noqa: E731
    return {"n": len(s), "p50": q(0.5), "p95": q(0.95), "max": s[-1]}


def _scripts(static: Path) -> str:
    """The canvas's JavaScript from a ``widgets/static`` folder (scene.js where it exists)."""
    return "\n".join((static / f).read_text() for f in ("markup.js", "scene.js", "canvas.js")
                     if (static / f).exists())


def _bare_page(svg_path: Path, work: Path, height: int, static: Path = STATIC) -> Path:
    """A page with canvas.js and a stand-in for anywidget's model (get/set/on/send)."""
    js = _scripts(static).replace("export default { render };", "")
    svg = svg_path.read_text()
    page = work / f"bare_{abs(hash((str(svg_path), str(static))))}.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><style>" + (static / "canvas.css").read_text()
        + "body{margin:8px;width:1100px}</style><div id=host></div><script>"
        "window.SVG=" + json.dumps(svg) + ";</script><script>" + js + """
class Model {
  constructor(s) { this.s = s; this.h = {}; }
  get(k) { return this.s[k]; }
  set(k, v) { this.s[k] = v; (this.h['change:' + k] || []).forEach((f) => f()); }
  on(e, f) { (this.h[e] = this.h[e] || []).push(f); }
  save_changes() {}
  send(m) { (window.sent = window.sent || []).push(m); }
}
window.model = new Model({svg: window.SVG, height: HEIGHT, first_view: 'readable', items: {},
                          index: {}, placement: {}, view: {}, highlight: [], selected: ''});
render({model: window.model, el: document.getElementById('host')});
</script>""".replace("HEIGHT", str(height)))
    return page


def measure(names: list[str], page_kind: str, cache: Path, steps: int, rounds: int,
            before: Path | None, draw_s: float = 300) -> dict:
    """{model: {version: [DRIVE result per round, or None: not drawn within ``draw_s``]}},
    versions measured in turn."""
    sys.path.insert(0, str(ROOT / "tests" / "browser"))
    from _jupyter import chromium_page, jupyter_lab, run_all_cells, write_notebook

    svgs = {n: drawing(n, cache) for n in names}
    work = Path(tempfile.mkdtemp(prefix="bench_canvas_"))
    versions = {"after": STATIC}
    if before is not None:
        versions = {"before": before / "onnx_lab" / "widgets" / "static", **versions}
    results: dict = {n: {ver: [] for ver in versions} for n in names}
    if page_kind == "bare":
        with chromium_page(work / "profile", width=1400, height=1000) as page:
            for n, p in svgs.items():
                for _ in range(rounds):
                    for ver, static in versions.items():
                        page.goto(_bare_page(p, work, 800, static).as_uri())
                        root = page.locator(".olc-root").first
                        root.locator("svg g.node").first.wait_for(state="attached",
                                                                   timeout=300_000)
                        results[n][ver].append(root.evaluate(DRIVE, steps))
        return results
    # JupyterLab: one notebook per drawing and version, the only one open (a second canvas
    # in the same document, above all the old one holding the whole SVG, would slow this
    # one's frames: every frame restyles the document), its kernel shut down after.
    root_dir = work / "root"
    root_dir.mkdir()
    with jupyter_lab(root_dir, work, timeout=120) as url, \
            chromium_page(work / "profile", width=1400, height=1000) as page:
        for n, p in svgs.items():
            for ver, static in versions.items():
                nb = f"{n}_{ver}.ipynb"
                write_notebook(root_dir / nb, [
                    "from pathlib import Path\nfrom onnx_lab.widgets.canvas import GraphCanvas",
                    f"class C(GraphCanvas):\n    _esm = {_scripts(static)!r}\n"
                    f"    _css = {(static / 'canvas.css').read_text()!r}\n"
                    f"c = C(height=800)\nc.svg = Path({str(p)!r}).read_text()\n"
                    "c.layout.display = None\nc"])
                t0 = time.perf_counter()
                run_all_cells(page, url, nb, timeout_ms=300_000)
                cell = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").nth(1)
                root = cell.locator(".olc-root").first
                try:
                    # attached: a large drawing keeps off-screen elements out of the document
                    root.locator("svg g.node").first.wait_for(state="attached",
                                                              timeout=draw_s * 1000)
                except Exception:  # noqa: BLE001 - reported, and the run goes on
                    print(f"{n} {ver}: not drawn in JupyterLab within {draw_s:.0f} s "
                          "(reported, not measured)", flush=True)
                    results[n][ver].append(None)
                else:
                    print(f"{n} {ver}: drawn in JupyterLab in {time.perf_counter() - t0:.0f} s",
                          flush=True)
                    for _ in range(rounds):
                        root.scroll_into_view_if_needed()
                        page.wait_for_timeout(800)
                        results[n][ver].append(root.evaluate(DRIVE, steps))
                _close_notebooks(page)
    return results


def _close_notebooks(page) -> None:
    """Shut the kernels down and close every tab (the next notebook is alone in the page)."""
    page.evaluate("""async () => {
        const x = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
        for (const k of await (await fetch('/api/kernels')).json())
            await fetch('/api/kernels/' + k.id, {method: 'DELETE', headers: {'X-XSRFToken': x}});
        if (window.jupyterapp) await window.jupyterapp.commands.execute('application:close-all');
    }""")
    page.goto("about:blank")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="llama32,llama91,grid5000")
    ap.add_argument("--page", choices=["lab", "bare"], default="bare")
    ap.add_argument("--steps", type=int, default=40, help="frames per phase")
    ap.add_argument("--rounds", type=int, default=2, help="drives per model and version")
    ap.add_argument("--before", type=Path,
                    help="a checkout whose canvas to measure alongside (e.g. the main branch)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "onnx_lab_canvas")
    ap.add_argument("--json", type=Path, help="write the raw frame times there")
    ap.add_argument("--draw-timeout", type=float, default=300,
                    help="--page lab: seconds a notebook's canvas may take to draw (a version "
                         "that does not is reported as such and the run goes on)")
    a = ap.parse_args(argv)
    names = [n for n in a.models.split(",") if n]
    res = measure(names, a.page, a.cache, a.steps, a.rounds, a.before, a.draw_timeout)
    vers = list(next(iter(res.values())))
    print(f"\n{'model':14s} {'phase':15s} " + " ".join(
        f"{v + ' p50':>11s} {v + ' p95':>11s} {v + ' max':>11s}" for v in vers)
        + ("   p95 after / before" if len(vers) == 2 else ""))
    for n, by_ver in res.items():
        runs = {v: [r for r in rs if r is not None] for v, rs in by_ver.items()}
        drawn = [v for v in vers if runs[v]]
        if not drawn:
            print(f"{n:14s} not drawn within {a.draw_timeout:.0f} s")
            continue
        phases = list(runs[drawn[0]][0]["frames"])
        for ph in [*phases, "ALL"]:
            row, p95 = [], {}
            for v in vers:
                times = [t for r in runs[v] for name, ts in r["frames"].items()
                         if ph in ("ALL", name) for t in ts]
                if not times:
                    row.append(f"{'not drawn':>35s}")
                    continue
                st = _stats(times)
                p95[v] = st["p95"]
                row.append(f"{st['p50']:11.1f} {st['p95']:11.1f} {st['max']:11.1f}")
            ratio = (f"   {p95['after'] / p95['before']:.2f}" if len(p95) == 2
                     and len(vers) == 2 else "")
            print(f"{n:14s} {ph:15s} " + " ".join(row) + ratio)
        print(f"{n:14s} {runs[drawn[-1]][0]['nodes']} drawn nodes")
    if a.json:
        a.json.write_text(json.dumps(res))


if __name__ == "__main__":
    main()
