"""Profiling and cost-model benchmarks (prints figures; asserts nothing).

1. Overhead: ``onnx_lab.profile(resnet50, runs=50, warmup=5)`` total wall time against a bare
   onnxruntime loop doing the same work (session creation at the same level + 55 runs), run
   alternately; target <= 1.2x.
2. Parsing: the trace of BERT-base (batch 1, sequence 128) x 50 runs through ``parse_trace``;
   target < 1 s. The mapping/aggregation step is timed too.
3. Cost: ResNet-50 total MACs from ``lab.cost()`` against onnxsim 0.8's
   ``onnxsim.model_info.ModelInfo(model).macs`` (the count ``onnxsim`` prints in its table);
   target within 5%.

    .venv/bin/python benchmarks/bench_profile.py [--runs 50] [--repeat 2] [--skip-bert]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _models  # noqa: E402

import onnx_lab  # noqa: E402
from onnx_lab.runtime.feeds import make_feeds  # noqa: E402
from onnx_lab.runtime.session import make_session  # noqa: E402


def bare_loop(lab, runs: int, warmup: int, threads) -> tuple[float, float]:
    """(seconds, median run ms) for what profile() does, without the profiler: create the
    session, warm up, run."""
    import numpy as np

    feeds = make_feeds(lab)
    t0 = time.perf_counter()
    sess = make_session(lab.model, opt_level="all", threads=threads)
    for _ in range(warmup):
        sess.run(None, feeds)
    ms = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        ms.append((time.perf_counter() - t) * 1e3)
    return time.perf_counter() - t0, float(np.median(ms))


def profiled(lab, runs: int, warmup: int, threads) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = onnx_lab.profile(lab, runs=runs, warmup=warmup, providers="cpu", opt_level="all",
                         threads=threads, progress=False)
    return time.perf_counter() - t0, float(p.latency_stats.p50_ms.iloc[0])


def bench_overhead(runs: int, repeat: int, threads) -> None:
    lab = onnx_lab.open(str(_models.resnet50()))
    # One untimed pass of each warms the OS file cache and the allocator.
    bare_loop(lab, 1, 0, threads)
    profiled(lab, 1, 0, threads)
    bare, prof = [], []
    for _ in range(repeat):  # alternate, so load from other processes hits both alike
        bare.append(bare_loop(lab, runs, 5, threads))
        prof.append(profiled(lab, runs, 5, threads))
    bs = [b[0] for b in bare]
    ps = [p[0] for p in prof]
    print(f"[overhead] ResNet-50, {runs} runs + 5 warm-up, CPU, threads={threads}, {repeat} "
          f"alternating repeats: bare ORT loop {', '.join(f'{x:.2f}' for x in bs)} s; "
          f"onnx_lab.profile {', '.join(f'{x:.2f}' for x in ps)} s -> ratio of the best "
          f"{min(ps) / min(bs):.3f}x, of the medians "
          f"{statistics.median(ps) / statistics.median(bs):.3f}x (target <= 1.2x); median run "
          f"{statistics.median(p[1] for p in prof):.1f} ms profiled vs "
          f"{statistics.median(b[1] for b in bare):.1f} ms bare")


def bench_parse(runs: int) -> None:
    from onnx_lab.profiling.parse import parse_trace
    from onnx_lab.profiling.run import _assemble

    lab = onnx_lab.open(str(_models.bert_base()), dims={"batch": 1, "sequence": 128})
    t0 = time.perf_counter()
    p = onnx_lab.profile(lab, runs=runs, warmup=5, providers="cpu", keep_trace=True,
                         progress=False)
    total = time.perf_counter() - t0
    path = Path(p.trace_paths["CPUExecutionProvider"])
    size = path.stat().st_size
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        trace = parse_trace(path, warmup=5)
        times.append(time.perf_counter() - t0)
    res = {"provider": "CPUExecutionProvider", "providers": ["CPUExecutionProvider"],
           "create_ms": 0.0, "wall_ms": p.latency.wall_ms.to_numpy(), "parsed": trace,
           "optimized": None}
    t0 = time.perf_counter()
    _assemble(lab.model, [res], runs, 5, "all", [], {})
    agg = time.perf_counter() - t0
    print(f"[parse] BERT-base b1 s128 x {runs} runs: trace {size / 1e6:.1f} MB, "
          f"{len(trace.kernels)} kernel calls kept; parse_trace {min(times):.3f} s "
          f"(best of 3; target < 1 s), mapping+tables {agg:.3f} s; whole profile {total:.1f} s, "
          f"mean latency {p.latency_stats.mean_ms.iloc[0]:.1f} ms, "
          f"{int(p.nodes.mapped.sum())}/{len(p.nodes)} ORT nodes mapped")
    path.unlink()
    path.parent.rmdir()


def bench_cost() -> None:
    import onnx
    from onnxsim.model_info import ModelInfo

    path = str(_models.resnet50())
    t0 = time.perf_counter()
    c = onnx_lab.open(path).cost()
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = ModelInfo(onnx.load(path)).macs
    ref_s = time.perf_counter() - t0
    ours = c.total["macs"]
    print(f"[cost] ResNet-50 MACs: onnx_lab {ours:,.0f} ({ours_s:.2f} s incl. open), "
          f"onnxsim 0.8 ModelInfo {int(ref):,} ({ref_s:.2f} s incl. load) -> ratio "
          f"{ours / float(ref):.4f} (target within 5%); FLOPs {c.total['flops']:,.0f}, params "
          f"{c.total['params']:,}, peak activations {c.total['peak_activation_bytes']:,} B, "
          f"unknown nodes {c.total['unknown_nodes']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip-bert", action="store_true")
    args = ap.parse_args()
    bench_cost()
    bench_overhead(args.runs, args.repeat, args.threads)
    if not args.skip_bert:
        bench_parse(args.runs)


if __name__ == "__main__":
    main()
