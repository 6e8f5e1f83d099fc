"""Report size and build time: ``write_report`` on BERT-base and on encoders of growing depth.

The report carries no weights: the graph views (pre-drawn SVGs), side panels and tables grow
with the number of nodes, not with the bytes of the weights. Measured:

- BERT-base (``_models.bert_base()``, 1,394 nodes, 438 MB of weights): file size, build time,
  pre-drawn views, and the share of each part of the payload (uncompressed);
- the BERT-like encoder of ``tests/browser/_models.py`` (small hidden size) with 2, 6, 12 and
  24 layers: size per node, to say how the file scales.

Run: ``.venv/bin/python benchmarks/bench_report.py [bert_base] [scaling]``.
Target: BERT-base report <= 5 MB.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
BROWSER_MODELS = HERE.parent / "tests" / "browser" / "_models.py"


def _browser_models():
    """tests/browser/_models.py (its name clashes with benchmarks/_models.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("browser_models", BROWSER_MODELS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def payload(text: str) -> dict:
    """The report's JSON payload (base64 of gzip in #olr-data)."""
    m = re.search(r"id='olr-data'>([^<]*)</script>", text)
    return json.loads(gzip.decompress(base64.b64decode(m.group(1))))


def measure(source, name: str, **kw) -> dict:
    import onnx_lab
    from onnx_lab.reporting import write_report

    lab = onnx_lab.open(source, dims=kw.pop("dims", None))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "report.html"
        t0 = time.perf_counter()
        write_report(lab, out, **kw)
        seconds = time.perf_counter() - t0
        text = out.read_text(encoding="utf-8")
    data = payload(text)
    main = data["canvases"].get("main", {})
    parts = {
        "svg": sum(len(v["svg"]) for v in main.get("views", {}).values()),
        "items": len(json.dumps([v["items"] for v in main.get("views", {}).values()])),
        "details": len(json.dumps(main.get("details", {}))),
        "tables": len(json.dumps(data["tables"])),
    }
    n = len(lab.index)
    row = {"model": name, "nodes": n, "mb": len(text.encode()) / 1e6,
           "kb_per_node": len(text.encode()) / 1e3 / n, "seconds": seconds,
           "views": len(main.get("views", {})),
           **{f"{k}_mb_raw": v / 1e6 for k, v in parts.items()}}
    print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in row.items()), flush=True)
    return row


def bench_bert_base() -> dict:
    from _models import bert_base

    row = measure(str(bert_base()), "bert_base", dims={"batch": 1, "sequence": 128})
    verdict = "OK" if row["mb"] <= 5 else "OVER"
    print(f"bert_base report: {row['mb']:.2f} MB (target <= 5 MB): {verdict}")
    return row


def bench_scaling() -> list[dict]:
    browser_models = _browser_models()
    rows = []
    for layers in (2, 6, 12, 24):
        model = browser_models.bert_like(layers=layers)
        rows.append(measure(model, f"bert_like_{layers}", dims={"batch": 1, "sequence": 16}))
    a, b = rows[0], rows[-1]
    slope = (b["mb"] - a["mb"]) / max(1, b["nodes"] - a["nodes"]) * 1e3
    print(f"scaling: {slope:.2f} KB per node between {a['nodes']} and {b['nodes']} nodes")
    return rows


if __name__ == "__main__":
    which = sys.argv[1:] or ["bert_base", "scaling"]
    if "bert_base" in which:
        bench_bert_base()
    if "scaling" in which:
        bench_scaling()
