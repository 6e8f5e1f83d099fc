"""Profiling and cost-model benchmarks (prints figures; asserts nothing).

1. Overhead: ``onnx_lab.profile(model, runs=50, warmup=5)`` total wall time against a bare
   onnxruntime loop doing the same work (session creation at the same level + 55 runs), run
   alternately, on ResNet-50 and BERT-base (batch 1, sequence 128); target <= 1.1x.
4. Budgets: on a YOLO-like detector built here (dynamic batch, 320x320), the batch sweep, the
   ORT levels and the thread sweep with their default budgets against full sweeps with fixed
   runs (20 + 3 warm-up): same knee / same fastest level / same best thread count, in <= 0.3x
   the time.
5. Real exports (``--only real``): an ultralytics YOLOv8n (320x320, ``_yolo.py``) and the
   PP-OCRv4 det/rec models of the rapidocr wheel (``bench_wheels.fetch()``): each default
   (``lab.batch_sweep``, ``levels``, ``thread_sweep``, ``profile``) timed from the call to the
   result against its budget (target <= 1.1x), the batch sweep's knee against a full fixed-run
   sweep's and the fastest level against a fixed-run ``levels``.
2. Parsing: the trace of BERT-base (batch 1, sequence 128) x 50 runs through ``parse_trace``;
   target < 1 s. The mapping/aggregation step is timed too.
3. Cost: ResNet-50 total MACs from ``lab.cost()`` against onnxsim 0.8's
   ``onnxsim.model_info.ModelInfo(model).macs`` (the count ``onnxsim`` prints in its table);
   target within 5%.

    .venv/bin/python benchmarks/bench_profile.py [--runs 50] [--repeat 3] [--skip-bert]
        [--only overhead,parse,cost,budgets,real] [--real-models yolo,det,rec]
        [--real-repeat 2] [--real-runs 10]
"""

from __future__ import annotations

import argparse
import math
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


def bench_overhead(runs: int, repeat: int, threads, name: str = "ResNet-50") -> None:
    lab = (onnx_lab.open(str(_models.resnet50())) if name == "ResNet-50" else
           onnx_lab.open(str(_models.bert_base()), dims={"batch": 1, "sequence": 128}))
    # One untimed pass of each warms the OS file cache and the allocator.
    bare_loop(lab, 1, 0, threads)
    profiled(lab, 1, 0, threads)
    bare, prof = [], []
    for i in range(repeat):
        # Alternate, so load from other processes hits both alike, in ABBA order: whichever
        # runs right after the other (its freed memory, a state of the machine that lasts a
        # few seconds) is not always the same side.
        if i % 2 == 0:
            bare.append(bare_loop(lab, runs, 5, threads))
            prof.append(profiled(lab, runs, 5, threads))
        else:
            prof.append(profiled(lab, runs, 5, threads))
            bare.append(bare_loop(lab, runs, 5, threads))
    bs = [b[0] for b in bare]
    ps = [p[0] for p in prof]
    print(f"[overhead] {name}, {runs} runs + 5 warm-up, CPU, threads={threads}, {repeat} "
          f"alternating repeats (ABBA): bare ORT loop {', '.join(f'{x:.2f}' for x in bs)} s; "
          f"onnx_lab.profile {', '.join(f'{x:.2f}' for x in ps)} s -> ratio of the best "
          f"{min(ps) / min(bs):.3f}x, of the medians "
          f"{statistics.median(ps) / statistics.median(bs):.3f}x (target <= 1.1x); median run "
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


def detector(width: int = 16):
    """A YOLOv8n-like detector (SiLU convs, C2f blocks, SPPF, an upsampling neck, three heads)
    with a dynamic batch: images[batch, 3, height, width]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    count = [0]

    def name(op):
        count[0] += 1
        return f"/{op}_{count[0]}"

    def init(a):
        n = f"w{len(inits)}"
        inits.append(onnx.numpy_helper.from_array(a.astype(np.float32), n))
        return n

    def node(op, ins, **attrs):
        n = name(op)
        nodes.append(helper.make_node(op, ins, [n + "_out"], name=n, **attrs))
        return n + "_out"

    def conv(x, cin, cout, k=3, s=1):
        w = init(rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k))
        y = node("Conv", [x, w, init(np.zeros(cout))], kernel_shape=[k, k], strides=[s, s],
                 pads=[k // 2] * 4)
        return node("Mul", [y, node("Sigmoid", [y])])

    def c2f(x, cin, cout, n):
        h = cout // 2
        y = conv(x, cin, cout, 1)
        a = name("Split")
        nodes.append(helper.make_node("Split", [y, _split(h)], [a + "_0", a + "_1"], name=a,
                                      axis=1))
        parts, cur = [a + "_0", a + "_1"], a + "_1"
        for _ in range(n):
            t = conv(conv(cur, h, h), h, h)
            cur = node("Add", [cur, t])
            parts.append(cur)
        return conv(node("Concat", parts, axis=1), h * (2 + n), cout, 1)

    split_inits = {}

    def _split(h):
        if h not in split_inits:
            n = f"split{h}"
            inits.append(onnx.numpy_helper.from_array(np.array([h, h], np.int64), n))
            split_inits[h] = n
        return split_inits[h]

    c = [width, 2 * width, 4 * width, 8 * width, 16 * width]
    x = conv("images", 3, c[0], s=2)
    feats = []
    for i in range(1, 5):
        x = conv(x, c[i - 1], c[i], s=2)
        x = c2f(x, c[i], c[i], 1 if i in (1, 4) else 2)
        feats.append(x)
    y = conv(x, c[4], c[4] // 2, 1)
    pools = [y]
    for _ in range(3):
        y = node("MaxPool", [y], kernel_shape=[5, 5], pads=[2, 2, 2, 2])
        pools.append(y)
    p5 = conv(node("Concat", pools, axis=1), c[4] * 2, c[4], 1)
    scales = init(np.array([1, 1, 2, 2]))
    u = node("Resize", [p5, "", scales], mode="nearest")
    p4 = c2f(node("Concat", [u, feats[2]], axis=1), c[4] + c[3], c[3], 1)
    u = node("Resize", [p4, "", scales], mode="nearest")
    p3 = c2f(node("Concat", [u, feats[1]], axis=1), c[3] + c[2], c[2], 1)
    n4 = c2f(node("Concat", [conv(p3, c[2], c[2], s=2), p4], axis=1), c[2] + c[3], c[3], 1)
    n5 = c2f(node("Concat", [conv(n4, c[3], c[3], s=2), p5], axis=1), c[3] + c[4], c[4], 1)
    shape = onnx.numpy_helper.from_array(np.array([0, 84, -1], np.int64), "head_shape")
    inits.append(shape)
    outs = []
    for f, ch in ((p3, c[2]), (n4, c[3]), (n5, c[4])):
        box = conv(conv(f, ch, 64), 64, 64)
        box = node("Conv", [box, init(rng.standard_normal((64, 64, 1, 1)) * 0.1)],
                   kernel_shape=[1, 1])
        cls = conv(conv(f, ch, 80), 80, 80)
        cls = node("Conv", [cls, init(rng.standard_normal((20, 80, 1, 1)) * 0.1)],
                   kernel_shape=[1, 1])
        outs.append(node("Reshape", [node("Concat", [box, cls], axis=1), "head_shape"]))
    out = node("Sigmoid", [node("Concat", outs, axis=2)])
    nodes.append(helper.make_node("Identity", [out], ["output0"], name="/out/Identity"))
    g = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info(
        "images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 84, None])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _samples(df, key: str) -> dict:
    """Each row's (95% interval low, median, interval high) by its key (the sweeps return
    statistics, not the runs): what the verdict below compares."""
    return {k: (lo, p50, hi) for k, lo, p50, hi in
            zip(df[key], df.ci_low_ms, df.p50_ms, df.ci_high_ms, strict=True)}


def _consistent(full: dict, best_full, best_auto) -> bool:
    """The budgeted sweep's answer agrees with the full sweep's when it names the same point,
    or a point the full sweep itself cannot tell apart from its fastest (their 95% intervals
    of the median overlap): a tie within the noise has no single right answer."""
    if best_full == best_auto:
        return True
    lo_a = full[best_auto][0]
    return lo_a <= full[best_full][2]


def bench_budgets(sizes=(1, 2, 4, 8, 16), runs: int = 20) -> None:
    from onnx_lab.profiling import batch_sweep, levels, thread_sweep

    lab = onnx_lab.open(detector(), dims={"height": 320, "width": 320})
    lab1 = onnx_lab.open(detector(), dims={"batch": 1, "height": 320, "width": 320})
    print(f"[budgets] YOLO-like detector {lab.model.graph.num_nodes()} nodes, 320x320, "
          f"GFLOPs/image {lab.cost(dims={'batch': 1}).total['flops'] / 1e9:.2f}")
    batch_sweep(lab, (1,), runs=2, warmup=1, progress=False)  # warm caches
    t0 = time.perf_counter()
    full = batch_sweep(lab, sizes, runs=runs, warmup=3, progress=False)
    t_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    auto = batch_sweep(lab, sizes, progress=False)
    t_auto = time.perf_counter() - t0
    print(f"[budgets] batch sweep {sizes}: full (runs={runs}) {t_full:.1f} s knee {full.knee} "
          f"(items/s {', '.join(f'{x:.0f}' for x in full.table.items_per_s)}); default budget "
          f"{t_auto:.1f} s knee {auto.knee} (batches {auto.table.batch.tolist()}, runs "
          f"{auto.table.runs.tolist()}, items/s "
          f"{', '.join(f'{x:.0f}' for x in auto.table.items_per_s)}) -> time ratio "
          f"{t_auto / t_full:.2f} (target <= 0.3), same knee: {full.knee == auto.knee}")
    t0 = time.perf_counter()
    lf = levels(lab1, runs=runs, warmup=3, progress=False)
    t_lf = time.perf_counter() - t0
    lf_samples = _samples(lf, "opt_level")
    t0 = time.perf_counter()
    la = levels(lab1, progress=False)
    t_la = time.perf_counter() - t0
    best_f = lf.opt_level[lf.p50_ms.idxmin()]
    best_a = la.opt_level[la.p50_ms.idxmin()]
    print(f"[budgets] levels: full {t_lf:.1f} s p50 {', '.join(f'{x:.1f}' for x in lf.p50_ms)} "
          f"ms (fastest {best_f}); default budget {t_la:.1f} s p50 "
          f"{', '.join(f'{x:.1f}' for x in la.p50_ms)} ms, runs {la.runs.tolist()} (fastest "
          f"{best_a}); nodes {lf.nodes.tolist()} vs {la.nodes.tolist()} -> time ratio "
          f"{t_la / t_lf:.2f} (target <= 0.3); same fastest: {best_f == best_a}, consistent: "
          f"{_consistent(lf_samples, best_f, best_a)}; notes: {la.attrs['notes']}")
    t0 = time.perf_counter()
    tf = thread_sweep(lab1, (1, 2), runs=runs, warmup=3, progress=False)
    t_tf = time.perf_counter() - t0
    t0 = time.perf_counter()
    ta = thread_sweep(lab1, (1, 2), progress=False)
    t_ta = time.perf_counter() - t0
    bf, ba = int(tf.threads[tf.p50_ms.idxmin()]), int(ta.threads[ta.p50_ms.idxmin()])
    print(f"[budgets] thread sweep (1, 2): full {t_tf:.1f} s p50 "
          f"{', '.join(f'{x:.1f}' for x in tf.p50_ms)} ms (best {bf})"
          f"; default budget {t_ta:.1f} s p50 {', '.join(f'{x:.1f}' for x in ta.p50_ms)} ms, "
          f"runs {ta.runs.tolist()} (best {ba}) -> time ratio {t_ta / t_tf:.2f} (target <= 0.3);"
          f" same best: {bf == ba}, consistent: {_consistent(_samples(tf, 'threads'), bf, ba)}; "
          f"notes: {ta.attrs['notes']}")


def real_models(only: str = "") -> list[tuple[str, object, str, tuple[int, ...]]]:
    """(name, lab, swept dim, sizes of the full sweep) of real exports, as a user opens them:
    an ultralytics YOLOv8n at 320x320 (``_yolo.yolov8n()``: dims batch/height/width) and the
    PP-OCRv4 text detector (at 320x320) and recognizer (48x320) from the rapidocr wheel
    (``bench_wheels.fetch()``; their dims are Paddle's ``p2o.DynamicDimension.N``, and the
    recognizer's height is an unnamed dim, named here with ``set_input_shape``)."""
    import _yolo
    import bench_wheels

    want = set(only.split(",")) if only else {"yolo", "det", "rec"}
    d0, d1, d2 = (f"p2o.DynamicDimension.{i}" for i in range(3))
    out = []
    if "yolo" in want:
        out.append(("YOLOv8n 320", onnx_lab.open(str(_yolo.yolov8n()), dims={
            "batch": 1, "height": 320, "width": 320}), "batch", (1, 2, 4, 8, 16, 32)))
    paths = bench_wheels.fetch() if want & {"det", "rec"} else {}
    if "det" in want:
        out.append(("PP-OCRv4 det 320", onnx_lab.open(str(paths["det"]), dims={
            d0: 1, d1: 320, d2: 320}), d0, (1, 2, 4, 8)))
    if "rec" in want:
        rec = onnx_lab.open(str(paths["rec"]), dims={d0: 1, d1: 320})
        rec.set_input_shape("x", [d0, 3, 48, d1])
        out.append(("PP-OCRv4 rec 48x320", rec, d0, (1, 2, 4, 8, 16)))
    return out


def _knee_consistent(full, knee_auto) -> bool:
    """The budgeted knee agrees with the full sweep's when it is the same, or when the full
    sweep's own step that separates them is within its noise (the interval of that doubling's
    gain, from the throughput intervals, straddles KNEE_GAIN)."""
    from onnx_lab.profiling.sweep import KNEE_GAIN

    if knee_auto == full.knee:
        return True
    t = full.table.reset_index(drop=True)
    for k in (knee_auto, full.knee):
        if k is None or k not in set(t.batch) or t.batch.iloc[-1] == k:
            continue
        i = int(t.index[t.batch == k][0])
        steps = math.log2(t.batch.iloc[i + 1] / t.batch.iloc[i])
        lo = (t.items_per_s_low.iloc[i + 1] / t.items_per_s_high.iloc[i]) ** (1 / steps)
        hi = (t.items_per_s_high.iloc[i + 1] / t.items_per_s_low.iloc[i]) ** (1 / steps)
        if lo <= KNEE_GAIN <= hi:
            return True
    return False


def bench_real(repeat: int = 2, full_runs: int = 10, only: str = "") -> None:
    """Default budgets on real exports: wall time from the call to the result against the
    budget (target <= 1.1x), and the answers against full fixed-run sweeps (batch sweep with
    every size, levels with ``full_runs`` runs each)."""
    from onnx_lab.profiling import levels, thread_sweep
    from onnx_lab.profiling.run import PROFILE_BUDGET_S
    from onnx_lab.profiling.sweep import BATCH_BUDGET_S, LEVELS_BUDGET_S, THREADS_BUDGET_S

    for name, lab, dim, sizes in real_models(only):
        for r in range(repeat):
            # The defaults first: in the first repeat the first calls of a fresh process (a
            # user's first cell) pay onnxruntime's and pandas' imports inside the budget.
            t0 = time.perf_counter()
            auto = lab.batch_sweep(dim=dim, progress=False)
            t_auto = time.perf_counter() - t0
            t0 = time.perf_counter()
            la = levels(lab, progress=False)
            t_la = time.perf_counter() - t0
            t0 = time.perf_counter()
            ta = thread_sweep(lab, progress=False)
            t_ta = time.perf_counter() - t0
            t0 = time.perf_counter()
            pa = onnx_lab.profile(lab, providers="cpu", progress=False)
            t_pa = time.perf_counter() - t0
            t0 = time.perf_counter()
            full = lab.batch_sweep(sizes, dim=dim, runs=full_runs, warmup=2, progress=False)
            t_full = time.perf_counter() - t0
            t0 = time.perf_counter()
            lf = levels(lab, runs=full_runs, warmup=2, progress=False)
            t_lf = time.perf_counter() - t0
            best_f = lf.opt_level[lf.p50_ms.idxmin()]
            best_a = la.opt_level[la.p50_ms.idxmin()]
            why_end = [n.split(": ", 1)[1][:60] for n in auto.notes
                       if "not started" in n or "past the knee" in n]
            print(f"[real] {name} #{r + 1}: batch_sweep {t_auto:.1f} s / {BATCH_BUDGET_S:g} s "
                  f"-> {t_auto / BATCH_BUDGET_S:.2f}x (batches {auto.table.batch.tolist()}, runs "
                  f"{auto.table.runs.tolist()}, sessions {auto.sessions}, knee {auto.knee}; "
                  f"{'; '.join(why_end) or 'all sizes'}); full sweep runs={full_runs} "
                  f"{t_full:.1f} s knee {full.knee} (items/s "
                  f"{', '.join(f'{x:.1f}' for x in full.table.items_per_s)}) -> "
                  + ("knee not reached in the budget (the sweep says so)"
                     if auto.knee is None and any("no knee found" in n for n in auto.notes)
                     else f"same knee {auto.knee == full.knee}, consistent "
                     f"{_knee_consistent(full, auto.knee)}"))
            print(f"[real] {name} #{r + 1}: levels {t_la:.1f} s / {LEVELS_BUDGET_S:g} s -> "
                  f"{t_la / LEVELS_BUDGET_S:.2f}x (levels {la.opt_level.tolist()}, runs "
                  f"{la.runs.tolist()}, fastest {best_a}); full runs={full_runs} {t_lf:.1f} s "
                  f"fastest {best_f} -> same {best_a == best_f}, consistent "
                  f"{_consistent(_samples(lf, 'opt_level'), best_f, best_a)}; thread_sweep "
                  f"{t_ta:.1f} s / {THREADS_BUDGET_S:g} s -> {t_ta / THREADS_BUDGET_S:.2f}x "
                  f"(runs {ta.runs.tolist()}); profile {t_pa:.1f} s / {PROFILE_BUDGET_S:g} s -> "
                  f"{t_pa / PROFILE_BUDGET_S:.2f}x ({int(pa.latency_stats.runs.iloc[0])} runs)")


def bench_backends() -> None:
    """ResNet-50: onnxruntime CPU and OpenVINO CPU side by side in one call."""
    from onnx_lab.runtime.openvino import INSTALL_HINT, openvino_available

    if not openvino_available():
        print(f"[backends] skipped: {INSTALL_HINT}")
        return
    import onnx

    # The export fixes the batch at 1: make it symbolic for the sweep (inputs, outputs, and
    # no stale value_info), dims={"batch": 1} for the profile.
    m = onnx.load(str(_models.resnet50()))
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    del m.graph.value_info[:]
    lab = onnx_lab.open(m)
    t0 = time.perf_counter()
    r = lab.compare_backends(["cpu", "openvino"], batch_sizes=(1, 2, 4, 8), progress=False)
    el = time.perf_counter() - t0
    rows = [f"{b.backend}: median {b.median_ms:.1f} ms (95% CI {b.ci_low_ms:.1f}-"
            f"{b.ci_high_ms:.1f}, p10-p90 {b.p10_ms:.1f}-{b.p90_ms:.1f}, {b.runs} runs), knee "
            f"{b.knee} ({'found' if b.knee_found else 'still rising'}), "
            f"{b.items_per_s_at_knee:.1f} items/s there, outputs agree {b.outputs_agree} "
            f"(max |err| {b.max_abs:.2g}, preset {b.preset or '-'})"
            for b in r.table.itertuples()]
    print(f"[backends] ResNet-50, compare_backends in {el:.1f} s: " + "; ".join(rows)
          + f"; {r.table.vs_reference.iloc[1]}")


def bench_widget() -> None:
    """The Profiler widget's long actions with their defaults on the detector (headless)."""
    from onnx_lab.widgets import Profiler

    lab = onnx_lab.open(detector(), dims={"batch": 1, "height": 320, "width": 320})
    w = Profiler(lab, background=False)
    out = []
    for name, button in (("Profile", w.profile_button), ("ORT levels", w.levels_button),
                         ("Batch sweep", w.sweep_button)):
        t0 = time.perf_counter()
        button.click()
        out.append(f"{name} {time.perf_counter() - t0:.1f} s"
                   + (f" (error {type(w.error).__name__})" if w.error else ""))
    print(f"[widget] Profiler defaults (budget {w.budget.value:g} s) on the detector, "
          f"headless: {'; '.join(out)} (target <= 10 s each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip-bert", action="store_true")
    ap.add_argument("--real-repeat", type=int, default=2)
    ap.add_argument("--real-runs", type=int, default=10)
    ap.add_argument("--real-models", default="", help="yolo,det,rec (default all)")
    ap.add_argument("--only", default="overhead,parse,cost,budgets,real,widget,backends")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "cost" in only:
        bench_cost()
    if "overhead" in only:
        bench_overhead(args.runs, args.repeat, args.threads)
        if not args.skip_bert:
            bench_overhead(args.runs, args.repeat, args.threads, "BERT-base")
    if "parse" in only and not args.skip_bert:
        bench_parse(args.runs)
    if "budgets" in only:
        bench_budgets()
    if "real" in only:
        bench_real(args.real_repeat, args.real_runs, args.real_models)
    if "widget" in only:
        bench_widget()
    if "backends" in only:
        bench_backends()


if __name__ == "__main__":
    main()
