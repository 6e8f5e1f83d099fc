"""Opening cost: ``onnx.load`` vs ``onnx_lab.open`` + the three tables (+ summary).

Models (built once and cached by ``benchmarks/_models.py``):

(a) ``bert_base``: BERT-base, 1,394 nodes, ~438 MB of weights embedded in the .onnx file.
(b) ``big_external``: 48 MatMuls of 4096x4096 fp32, 3.2 GB of weights in an external data file.

Each measurement runs in a fresh subprocess (imports done before the clock starts), ``--repeat``
times, interleaved with the other measurements; the table shows the median wall time and the
peak RSS of the process (``ru_maxrss``, which includes the ~0.1 GB of imported libraries). ``onnx.load`` reads external data by default,
so for (b) the reference is also shown with ``load_external_data=False`` (graph only).

Targets: (a) ``onnx_lab.open(path)`` with default arguments + the three tables <= 1.0x
``onnx.load`` (the row "open+3 tables"; with the summary too <= 1.5x); (b) onnx_lab < 1 s and
< 0.5 GB peak RSS. onnx_lab's time includes waiting for every weight's values (``open`` reads
them in the background); ``ready`` in the breakdown is when the tables (and summary) were
there, before that wait.

Usage::

    .venv/bin/python benchmarks/bench_open.py                 # both models, 3 repeats
    .venv/bin/python benchmarks/bench_open.py --models bert_base --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(kind: str, path: str) -> None:
    """Run one measurement in this (fresh) process and print a JSON line."""
    import resource
    import time

    import onnx

    import onnx_lab  # noqa: F401 - imported before the clock starts

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    parts: dict[str, float] = {}
    t0 = time.perf_counter()
    if kind == "onnx.load":
        onnx.load(path)
    elif kind == "onnx.load(no external)":
        onnx.load(path, load_external_data=False)
    else:
        dims = {"batch": 1, "sequence": 128} if kind.endswith("dims") else None
        t = time.perf_counter()
        lab = onnx_lab.open(path, dims=dims)
        parts["open"] = time.perf_counter() - t
        for name in ("nodes", "initializers", "tensors"):
            t = time.perf_counter()
            getattr(lab, name)
            parts[name] = time.perf_counter() - t
        if "summary" in kind:
            t = time.perf_counter()
            lab.summary()
            parts["summary"] = time.perf_counter() - t
        # What the user has so far needs no weight: ``open`` reads them in the background.
        # The total waits for them too (every weight's values in memory, as after onnx.load).
        parts["ready"] = time.perf_counter() - t0
        t = time.perf_counter()
        for v in lab.model.ir.graph.initializers.values():
            if v.const_value is not None and v.const_value.nbytes >= 1 << 16:
                v.const_value.numpy()
        parts["weights"] = time.perf_counter() - t
    seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"seconds": seconds, "peak_rss_gb": rss * 1024 / 1e9,
                      "import_rss_gb": rss0 * 1024 / 1e9, "parts": parts}))


def _run_child(kind: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure(kinds: list[str], path: Path, repeat: int) -> dict[str, dict]:
    # Interleave the kinds (A B C A B C ...) so drifting load on a shared machine hits all
    # of them alike.
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(repeat):
        for k in kinds:
            runs[k].append(_run_child(k, path))
    out = {}
    for k, rs in runs.items():
        parts = {p: statistics.median(r["parts"][p] for r in rs) for p in rs[0]["parts"]}
        out[k] = {"seconds": statistics.median(r["seconds"] for r in rs),
                  "peak_rss_gb": max(r["peak_rss_gb"] for r in rs),
                  "import_rss_gb": rs[0]["import_rss_gb"], "parts": parts}
    return out


def _size_gb(path: Path) -> float:
    size = path.stat().st_size
    data = path.with_name(path.name + ".data")
    return (size + (data.stat().st_size if data.exists() else 0)) / 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert_base", "big_external"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return

    sys.path.insert(0, str(HERE))
    import _models

    print(f"{'model':14s} {'size':>8s}  {'measure':34s} {'time':>8s} {'peak RSS':>9s}  breakdown")
    for name in args.models:
        path = getattr(_models, name)()
        kinds = ["onnx.load", "onnx_lab open+3 tables", "onnx_lab open+tables+summary"]
        if name == "big_external":
            kinds.insert(1, "onnx.load(no external)")
        if name == "bert_base":  # fully static shapes: shape-value folding runs too
            kinds.append("onnx_lab ...+summary, with dims")
        results = _measure(kinds, path, args.repeat)
        for k, r in results.items():
            parts = " ".join(f"{p}={v * 1000:.0f}ms" for p, v in r["parts"].items())
            print(f"{name:14s} {_size_gb(path):7.2f}G  {k:34s} {r['seconds']:7.3f}s "
                  f"{r['peak_rss_gb']:7.2f}GB  {parts}")
        ref = results["onnx.load"]
        for k in ("onnx_lab open+3 tables", "onnx_lab open+tables+summary"):
            lab = results[k]
            print(f"{name:14s} ratio {k} / onnx.load: time "
                  f"{lab['seconds'] / ref['seconds']:.2f}x, peak RSS "
                  f"{lab['peak_rss_gb'] / ref['peak_rss_gb']:.2f}x "
                  f"(imports alone: {lab['import_rss_gb']:.2f} GB)")


if __name__ == "__main__":
    main()
