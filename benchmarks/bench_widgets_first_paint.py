"""Cell → first paint of every onnx_lab widget, beside the HTML report's and Netron's load.

One headless Chromium (Debian's ``/usr/bin/chromium``), the same files:

- each widget (Explorer, FusionLab, Extractor, DiffView, Profiler, DriftDebugger,
  PrecisionDoctor, Editor) in JupyterLab: the widget's cell re-run with Shift+Enter on a
  kernel whose Lab is already open; *frame* is until the new widget is in the page, *filled*
  until its first tab has no progress line left (and the cell has finished);
- the HTML report of the same model (``lab.report``) opened from disk: until its graph is drawn;
- Netron (``pip install netron``, optional: skipped with a message when absent), serving the
  file on localhost: until its graph is drawn (its cookie notice, shown on every visit in a
  headless profile, clicked away inside the time).

Prints one row per widget and model with the ratios frame/report and frame/Netron::

    .venv/bin/python benchmarks/bench_widgets_first_paint.py [--models cnn,transformer]
        [--rounds 2] [--shots DIR]

``--shots DIR`` also saves a screenshot of every widget at 1,280, 1,920 and 600 px wide.
The models: onnx's light Inception v1 (``onnx/backend/test/data/light``, a CNN) and a
12-layer BERT-like encoder built with ``onnx.helper`` (``tests/browser/_models.py``).
Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDGETS = {
    "Explorer": "Explorer(lab)",
    "FusionLab": "FusionLab(lab)",
    "Extractor": "Extractor(lab)",
    "DiffView": "DiffView(lab, lab2)",
    "Profiler": "Profiler(lab)",
    "DriftDebugger": "DriftDebugger(lab, lab2)",
    "PrecisionDoctor": "PrecisionDoctor(lab)",
    "Editor": "Editor(lab)",
}


def _models(work: Path, which: list[str]) -> dict[str, tuple[Path, dict]]:
    import onnx

    sys.path.append(str(ROOT / "tests" / "browser"))
    import _models as tm  # the browser tests' model builders

    out: dict[str, tuple[Path, dict]] = {}
    if "cnn" in which:
        light = Path(onnx.__file__).parent / "backend/test/data/light/light_inception_v1.onnx"
        out["cnn"] = (light, {})
    if "transformer" in which:
        path = work / "bert12.onnx"
        onnx.save(tm.bert_like(layers=12, hidden=64), str(path))
        out["transformer"] = (path, {"batch": 1, "sequence": 16})
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_js(page, js: str, timeout_ms: int = 120_000) -> float:
    t0 = time.perf_counter()
    page.wait_for_function(js, timeout=timeout_ms, polling=20)
    return time.perf_counter() - t0


def _report_load(page, html: Path) -> float:
    t0 = time.perf_counter()
    page.goto(html.as_uri(), wait_until="commit")
    page.wait_for_function("() => document.querySelector('svg g.node')", timeout=120_000,
                           polling=20)
    return time.perf_counter() - t0


def _netron_loads(page, model: Path, rounds: int) -> list[float]:
    """Netron serving ``model``: the seconds from navigation to its graph drawn, per round
    (after a first visit that accepts its cookie notice, which a returning user has done).
    Netron's page refuses ``eval``, so this waits with locators, not page functions."""
    try:
        import netron
    except ImportError:
        return []
    address = ("127.0.0.1", _free_port())
    netron.start(str(model), address=address, browse=False)
    url = f"http://{address[0]}:{address[1]}/"
    try:
        times = []
        # Netron adds its nodes unplaced and transparent, measures their text, then lays them
        # out: drawn is a node placed and shown.
        node = page.locator("g.node[transform]:not([style*='opacity: 0'])").first
        accept = page.get_by_text("Accept")
        for _ in range(rounds + 1):  # the first visit warms the server up
            t0 = time.perf_counter()
            page.goto(url, wait_until="commit")
            node.or_(accept).first.wait_for(timeout=120_000)
            if not node.count():  # its cookie notice (Netron asks on every visit here)
                accept.click()
                node.wait_for(timeout=120_000)
            times.append(time.perf_counter() - t0)
        return times[1:]
    finally:
        with contextlib.suppress(Exception):
            netron.stop(address)


def _widget_times(page, cells, i: int) -> tuple[float, float]:
    """Re-run cell ``i``: (seconds to the new widget's frame, seconds to its first tab)."""
    cell = cells.nth(i)
    cell.evaluate("c => c.querySelectorAll('.onnx-lab-widget').forEach("
                  "w => w.dataset.old = '1')")
    cell.locator(".jp-InputArea").click()
    page.keyboard.press("Escape")
    n = i
    frame_js = (f"() => {{ const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[{n}];"
                " return c && c.querySelector('.onnx-lab-widget:not([data-old])'); }")
    filled_js = (f"() => {{ const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[{n}];"
                 " const w = c && c.querySelector('.onnx-lab-widget:not([data-old])');"
                 " const p = c && c.querySelector('.jp-InputPrompt');"
                 " return w && !w.querySelector('.onnx-lab-busy') && p &&"
                 " !p.textContent.includes('*'); }")
    t0 = time.perf_counter()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(frame_js, timeout=300_000, polling=20)
    frame = time.perf_counter() - t0
    page.wait_for_function(filled_js, timeout=600_000, polling=50)
    return frame, time.perf_counter() - t0


def main() -> int:
    args = sys.argv[1:]
    which = (args[args.index("--models") + 1] if "--models" in args else "cnn,transformer")
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 2
    shots = Path(args[args.index("--shots") + 1]) if "--shots" in args else None
    if not Path("/usr/bin/chromium").exists():
        print("skipped: /usr/bin/chromium missing")
        return 0
    sys.path.insert(0, str(ROOT / "tests" / "browser"))
    from _jupyter import chromium_page, jupyter_lab, run_all_cells, write_notebook

    import onnx_lab

    work = Path(tempfile.mkdtemp(prefix="bench_first_paint_"))
    root = work / "root"
    root.mkdir()
    models = _models(work, which.split(","))
    try:
        import netron  # noqa: F401
        have_netron = True
    except ImportError:
        have_netron = False
        print("Netron: skipped (pip install netron to compare)")
    results = []
    for name, (path, dims) in models.items():
        lab = onnx_lab.open(str(path), dims=dims or None)
        html = lab.report(work / f"{name}.html")
        setup = ("import onnx_lab\nfrom onnx_lab.widgets import *\n"
                 f"lab = onnx_lab.open({str(path)!r}, dims={dims!r} or None)\n"
                 f"lab2 = onnx_lab.open({str(path)!r}, dims={dims!r} or None)\n"
                 "lab.summary(); lab.nodes; lab2.nodes")
        nb = f"{name}.ipynb"
        write_notebook(root / nb, [setup, *WIDGETS.values()])
        with jupyter_lab(root, work, timeout=120) as url, \
                chromium_page(work / f"profile-{name}", width=1280, height=1000) as page:
            report = [_report_load(page, html) for _ in range(rounds)]
            net = _netron_loads(page, path, rounds) if have_netron else []
            run_all_cells(page, url, nb, timeout_ms=300_000)
            cells = page.locator(".jp-Notebook .jp-Cell")
            cells.nth(len(WIDGETS)).locator(".onnx-lab-widget").first.wait_for(timeout=600_000)
            page.wait_for_function(
                "() => !document.querySelector('.jp-Notebook .jp-InputPrompt') || ![...document"
                ".querySelectorAll('.jp-Notebook .jp-InputPrompt')].some("
                "p => p.textContent.includes('*'))", timeout=600_000)
            for i, widget in enumerate(WIDGETS, start=1):
                times = [_widget_times(page, cells, i) for _ in range(rounds)]
                frame = statistics.median(t[0] for t in times)
                filled = statistics.median(t[1] for t in times)
                results.append((name, widget, frame, filled, statistics.median(report),
                                statistics.median(net) if net else None))
                r = results[-1]
                ratio_n = f"{frame / r[5]:6.2f}" if r[5] else "     —"
                print(f"{name:11s} {widget:15s} frame {frame:6.2f} s  filled {filled:6.2f} s"
                      f"  report {r[4]:5.2f} s  netron {r[5] or float('nan'):5.2f} s"
                      f"  frame/report {frame / r[4]:5.2f}  frame/netron {ratio_n}",
                      flush=True)
            if shots:
                _screenshots(page, cells, shots, name)
    return 0


def _screenshots(page, cells, shots: Path, name: str) -> None:
    shots.mkdir(parents=True, exist_ok=True)
    # The DriftDebugger's layers table shows after a run.
    dd = page.locator(".onnx-lab-drift").first
    dd.locator("button", has_text="Run").first.click()
    dd.locator(".onnx-lab-verdict").wait_for(timeout=300_000)
    dd.locator(".olt-row").nth(1).wait_for(timeout=60_000)
    for width in (1280, 1920, 600):
        page.set_viewport_size({"width": width, "height": 3000})
        if width == 600:  # a narrow pane: the notebook alone, ~600 px wide
            page.keyboard.press("Control+b")
        page.wait_for_timeout(800)
        for i, widget in enumerate(WIDGETS, start=1):
            out = cells.nth(i).locator(".jp-OutputArea").first
            out.scroll_into_view_if_needed()
            out.screenshot(path=str(shots / f"{name}_{widget}_{width}.png"))


if __name__ == "__main__":
    raise SystemExit(main())
