"""Precision doctor benchmark: find_precision("fp16") on ResNet-50, BERT-base, a YOLO-like
detector and a model with If bodies, side by side with onnxconverter-common's
``auto_convert_mixed_precision``; int8 on ResNet-50 with a planted activation outlier.

Every written model is checked in an independent onnxruntime session (default options, the
way a deployment loads it) against the float32 model's outputs on the same feeds.

Both tools are warmed up once on a tiny model before anything is timed (imports of
onnxruntime's and onnxconverter-common's converters are not part of either figure); with
``--repeat N`` each side runs N times and the fastest run of each is quoted.
The machine is shared: quote ratios from one run, not absolute seconds.

Run: ``.venv/bin/python benchmarks/bench_precision.py [--skip-bert] [--only NAME[,NAME]] [--repeat N]``
(NAME: cancellation, overflow_mlp, if_model, transformer_block, resnet50, resnet50_centred,
detector, bert, int8; ``real`` or ``real:det,vad,yolov8n,...``: the real exports, only when
asked).

``resnet50_centred`` is the search-time figure: ResNet-50 with three convs whose outputs are
centred around ~1000 (:func:`plant_centering`), so a plan must find 6 of 125 nodes. Every
fp16 row prints where the time went (stages, and across trials the conversion, onnxruntime's
session creation and runs, the judging).

``real`` converts every real export (PP-OCRv4 det/rec/cls and Silero VAD from PyPI wheels,
an ultralytics YOLOv8n export, the onnx package's backend test models), loads and runs it,
then searches an fp16 plan (int8 too on YOLOv8n and the VAD); onnxruntime's own float16
converter is tried beside it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import onnx_lab  # noqa: E402
from onnx_lab.numerics.precision import find_precision  # noqa: E402

ATOL, RTOL = 1e-3, 1e-2


def _ort_outputs(model_or_path, feeds):
    import onnxruntime as ort

    data = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _meets(ref, got) -> tuple[bool, float]:
    worst, ok = 0.0, True
    for r, g in zip(ref, got):
        r64, g64 = np.asarray(r, np.float64), np.asarray(g, np.float64)
        err = np.abs(g64 - r64)
        ok &= bool(np.all(err <= ATOL + RTOL * np.abs(r64)))
        worst = max(worst, float(err.max()) if err.size else 0.0)
    return ok, worst


def _sqnr(ref, got) -> float:
    r = np.concatenate([np.asarray(a, np.float64).ravel() for a in ref])
    g = np.concatenate([np.asarray(a, np.float64).ravel() for a in got])
    e = float(((g - r) ** 2).sum())
    return float("inf") if e == 0 else 10 * np.log10(float((r ** 2).sum()) / e)


# ---------------------------------------------------------------------------- models
def if_model() -> onnx.ModelProto:
    """Two conv branches under an If (the taken one overflows fp16 in an RMS norm)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(np.array(True), "use_a"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]

    def w(name, *shape, scale=1.0):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
            name))
        return name

    def branch(p, gain):
        nodes = [helper.make_node("Conv", ["x", w(f"{p}w1", 32, 3, 3, 3, scale=gain)], [f"{p}c1"],
                                  name=f"/{p}/conv1/Conv", pads=[1] * 4),
                 helper.make_node("Relu", [f"{p}c1"], [f"{p}r1"], name=f"/{p}/relu1/Relu"),
                 helper.make_node("Pow", [f"{p}r1", "two"], [f"{p}sq"], name=f"/{p}/norm/Pow"),
                 helper.make_node("ReduceMean", [f"{p}sq"], [f"{p}ms"], name=f"/{p}/norm/ReduceMean",
                                  axes=[1], keepdims=1),
                 helper.make_node("Add", [f"{p}ms", "eps"], [f"{p}mse"], name=f"/{p}/norm/Add"),
                 helper.make_node("Sqrt", [f"{p}mse"], [f"{p}rms"], name=f"/{p}/norm/Sqrt"),
                 helper.make_node("Div", [f"{p}r1", f"{p}rms"], [f"{p}n"], name=f"/{p}/norm/Div"),
                 helper.make_node("Conv", [f"{p}n", w(f"{p}w2", 16, 32, 3, 3)], [f"{p}out"],
                                  name=f"/{p}/conv2/Conv", pads=[1] * 4)]
        return helper.make_graph(nodes, p, [], [helper.make_tensor_value_info(
            f"{p}out", TensorProto.FLOAT, [1, 16, 32, 32])])

    nodes = [helper.make_node("If", ["use_a"], ["feat"], name="/branch/If",
                              then_branch=branch("a", 2000.0), else_branch=branch("b", 1.0)),
             helper.make_node("GlobalAveragePool", ["feat"], ["gap"], name="/head/gap"),
             helper.make_node("Flatten", ["gap"], ["flat"], name="/head/Flatten"),
             helper.make_node("Gemm", ["flat", w("wf", 10, 16), ], ["logits"], name="/head/Gemm",
                              transB=1)]
    g = helper.make_graph(nodes, "if_model",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def overflow_mlp(hidden: int = 256) -> onnx.ModelProto:
    """An MLP with an RMS norm built from primitives whose Pow overflows fp16 (no If)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, hidden)) * 60).astype(np.float32),
                                     "w_up"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(np.array([1, 1, hidden], np.int64), "g"),
             numpy_helper.from_array(np.array([1, hidden], np.int64), "s")]
    nodes = [helper.make_node("MatMul", ["x", "w_up"], ["h"], name="/up/MatMul")]
    cur = "h"
    for i in range(4):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"], name=f"/l{i}/MatMul"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"/l{i}/Tanh"))
        cur = f"t{i}"
    nodes += [helper.make_node("Pow", ["h", "two"], ["sq"], name="/norm/Pow"),
              helper.make_node("Reshape", ["sq", "g"], ["sqg"], name="/norm/Reshape"),
              helper.make_node("ReduceMean", ["sqg"], ["ms"], name="/norm/ReduceMean", axes=[-1],
                               keepdims=0),
              helper.make_node("Expand", ["ms", "s"], ["mse0"], name="/norm/Expand"),
              helper.make_node("Add", ["mse0", "eps"], ["mse"], name="/norm/Add"),
              helper.make_node("Sqrt", ["mse"], ["rms"], name="/norm/Sqrt"),
              helper.make_node("Div", [cur, "rms"], ["y0"], name="/norm/Div"),
              helper.make_node("Mul", ["y0", "rms"], ["y"], name="/out/Mul")]
    g = helper.make_graph(nodes, "overflow_mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, hidden])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cancellation_mlp(layers: int = 40, hidden: int = 256) -> onnx.ModelProto:
    """A deep tanh MLP with one catastrophic cancellation, ``(h + 2048) - 2048``: float16's
    step at 2048 is 2, so that pair must stay in float32 and nothing else needs to."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.array(2048.0, np.float32), "big")]
    nodes, cur = [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"m{i}"], name=f"/l{i}/MatMul"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"/l{i}/Tanh"))
        cur = f"t{i}"
        if i == layers // 2:
            nodes.append(helper.make_node("Add", [cur, "big"], ["shifted"], name="/shift/Add"))
            nodes.append(helper.make_node("Sub", ["shifted", "big"], ["back"], name="/shift/Sub"))
            cur = "back"
    g = helper.make_graph(nodes, "cancellation_mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, hidden])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def plant_outlier(model: onnx.ModelProto, conv_name: str, value: float = 200.0):
    """Channel 0 of ``conv_name``'s bias set to ``value`` and ignored by the next conv: an
    activation outlier that stretches the int8 range of the Relu after it."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    conv = next(n for n in g.node if n.name == conv_name)
    bias = numpy_helper.to_array(inits[conv.input[2]]).copy()
    bias[0] = value
    inits[conv.input[2]].CopyFrom(numpy_helper.from_array(bias, conv.input[2]))
    relu = next(n for n in g.node if n.input and n.input[0] == conv.output[0])
    nxt = next(n for n in g.node if n.op_type == "Conv" and n.input[0] == relu.output[0])
    wt = numpy_helper.to_array(inits[nxt.input[1]]).copy()
    wt[:, 0] = 0.0
    inits[nxt.input[1]].CopyFrom(numpy_helper.from_array(wt, nxt.input[1]))
    return relu.name


def plant_centering(model: onnx.ModelProto, sites: int = 3) -> list[str]:
    """``sites`` conv2 convs of ResNet-50 (spread over its stages) get a per-channel offset
    near 1000 in their bias and a ``Sub`` of the same offset after them: a normalization
    folded around a large running mean computes this, and float16's step of 0.5 near 1000
    ruins the centred values unless the conv and the Sub both stay float32 (the only places
    a plan needs). Returns the names of the planted Subs."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    convs = [n for n in g.node if n.op_type == "Conv" and n.name.endswith("conv2/Conv")]
    picks = [convs[round(i * (len(convs) - 1) / max(sites - 1, 1))] for i in range(sites)]
    rng = np.random.default_rng(0)
    nodes, subs = list(g.node), []
    for c in picks:
        b = inits[c.input[2]]
        off = (1000 + rng.random(b.dims[0])).astype(np.float32)
        b.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(b) + off, b.name))
        mean = c.name.strip("/").replace("/", "_") + "_mean"
        g.initializer.append(numpy_helper.from_array(off.reshape(-1, 1, 1), mean))
        centred = c.output[0] + "_centred"
        for n in nodes:
            for i, x in enumerate(n.input):
                if x == c.output[0]:
                    n.input[i] = centred
        sub = helper.make_node("Sub", [c.output[0], mean], [centred],
                               name=c.name.replace("/Conv", "/center/Sub"))
        nodes.insert(nodes.index(c) + 1, sub)
        subs.append(sub.name)
    del g.node[:]
    g.node.extend(nodes)
    return subs


# ---------------------------------------------------------------------------- fp16
REPEAT = 1


def warm_up() -> None:
    """One untimed run of each tool on a tiny model (module imports, first sessions)."""
    import contextlib
    import io

    m = cancellation_mlp(layers=2, hidden=8)
    feeds = {"x": np.ones((1, 8), np.float32)}
    find_precision(onnx_lab.open(m), "fp16", feeds=feeds, atol=ATOL, rtol=RTOL, progress=False)
    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    with contextlib.redirect_stdout(io.StringIO()):
        auto_convert_mixed_precision(m, feeds, rtol=RTOL, atol=ATOL, keep_io_types=True)


def bench_fp16(name: str, model, feeds: dict, *, theirs: bool = True, **kw) -> dict:
    lab = onnx_lab.open(model)
    ours_s = cpu_s = float("inf")
    for _ in range(REPEAT):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = find_precision(lab, "fp16", feeds=feeds, atol=ATOL, rtol=RTOL, progress=False,
                              **kw)
        ours_s = min(ours_s, time.perf_counter() - t0)
        # CPU seconds of the process, onnxruntime's threads included: what the search costs
        # whatever else the shared cores run (its wall time on two free cores is at most this).
        cpu_s = min(cpu_s, time.process_time() - c0)
    proto = onnx_lab.Lab(plan.model).model.to_proto()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "m.fp16.onnx")
        onnx.save(proto, path)
        ref = _ort_outputs(lab.model.to_proto(), feeds)
        ok, worst = _meets(ref, _ort_outputs(path, feeds))
    body = sum(1 for k in plan.kept if lab.index.entries[k].graph)
    row = {"model": name, "ours_kept": len(plan.kept), "candidates": plan.n_candidates,
           "ours_s": ours_s, "trials": len(plan.trials), "independent_ok": ok,
           "max_abs": worst, "kept_in_bodies": body}
    confirmed = {None: "no search", True: "confirmed", False: "NOT confirmed"}[plan.confirmed]
    print(f"[fp16] {name}: onnx_lab keeps {len(plan.kept)}/{plan.n_candidates} nodes in fp32 "
          f"({body} inside If bodies), {len(plan.trials)} trials ({confirmed} with ORT's "
          f"optimizations), {ours_s:.2f} s ({cpu_s:.1f} CPU s); independent "
          f"ORT run meets atol {ATOL} rtol {RTOL}: {ok} (max_abs {worst:.3g})", flush=True)
    print_timings(plan)
    if theirs:
        row.update(bench_theirs(name, model, feeds))
    return row


def print_timings(plan) -> None:
    """Where the search's time went: stages (with their trials) and, across trials, the
    conversion, onnxruntime's session creation and runs, the judging; as shares."""
    t = plan.timings
    total = max(plan.seconds, 1e-9)
    stages = ["reference run", "full conversion", "sensitivity", "bisect", "prune", "confirm"]
    parts = [k for k in t if k.startswith("trial: ")]
    print("    stages: " + ", ".join(f"{k} {t[k] / total:.0%}" for k in stages if k in t)
          + f"; over {len(plan.trials)} trials: "
          + ", ".join(f"{k[7:]} {t[k] / total:.0%}" for k in parts), flush=True)


def bench_theirs(name: str, model, feeds: dict) -> dict:
    import contextlib
    import io

    from onnxconverter_common.auto_mixed_precision import auto_convert_mixed_precision

    proto = onnx_lab.open(model).model.to_proto() if not isinstance(model, onnx.ModelProto) \
        else model
    t0 = time.perf_counter()
    try:
        # It prints every attempt's node list: kept out of the figures' way.
        with contextlib.redirect_stdout(io.StringIO()):
            out = auto_convert_mixed_precision(proto, feeds, rtol=RTOL, atol=ATOL,
                                               keep_io_types=True)
    except Exception as e:  # noqa: BLE001 - we report whatever it raises
        s = time.perf_counter() - t0
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        print(f"[fp16] {name}: auto_convert_mixed_precision FAILED after {s:.1f} s: "
              f"{type(e).__name__}: {msg}", flush=True)
        return {"theirs_s": s, "theirs_kept": None, "theirs_error": msg}
    s = time.perf_counter() - t0
    for _ in range(REPEAT - 1):  # the fastest of REPEAT runs (one already done above)
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            auto_convert_mixed_precision(proto, feeds, rtol=RTOL, atol=ATOL, keep_io_types=True)
        s = min(s, time.perf_counter() - t0)
    kept = _fp32_nodes(out)
    try:
        ok, worst = _meets(_ort_outputs(proto, feeds), _ort_outputs(out, feeds))
    except Exception as e:  # noqa: BLE001
        ok, worst = False, float("nan")
        print(f"  its model does not run: {str(e)[:120]}")
    over = _stored_overflows(proto, out, feeds)
    print(f"[fp16] {name}: auto_convert_mixed_precision keeps {kept} nodes in fp32, {s:.1f} s; "
          f"independent run meets the tolerance: {ok} (max_abs {worst:.3g})"
          + (f"; but its model types {len(over)} tensor(s) float16 whose values exceed 65504 "
             f"({', '.join(repr(t) for t in over[:3])}): inf wherever float16 kernels run them "
             "(CUDA, TensorRT), hidden here by onnxruntime's CPU, which computes such nodes in "
             "float32" if over else ""), flush=True)
    return {"theirs_s": s, "theirs_kept": kept, "theirs_ok": ok, "theirs_overflows": len(over)}


def _stored_overflows(fp32: onnx.ModelProto, fp16: onnx.ModelProto, feeds: dict) -> list[str]:
    """Tensors of the main graph that ``fp16`` types float16 and whose float32 values (from
    ``fp32`` on ``feeds``) exceed float16's largest finite value."""
    import onnxruntime as ort

    typed = onnx.shape_inference.infer_shapes(fp16).graph
    half = {vi.name for vi in list(typed.value_info) + list(typed.output)
            if vi.type.tensor_type.elem_type == TensorProto.FLOAT16}
    produced = {o for n in fp32.graph.node for o in n.output}
    names = sorted(half & produced)
    if not names:
        return []
    m = onnx.ModelProto()
    m.CopyFrom(fp32)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    vals = sess.run(names, feeds)
    return [n for n, v in zip(names, vals, strict=True)
            if np.issubdtype(np.asarray(v).dtype, np.floating) and v.size
            and float(np.nanmax(np.abs(v))) > 65504]


def _fp32_nodes(model: onnx.ModelProto) -> int:
    """Non-Cast nodes of every graph whose outputs are float32 (value_info after inference)."""
    m = onnx.shape_inference.infer_shapes(model)
    types = {}
    stack = [m.graph]
    graphs = []
    while stack:
        g = stack.pop()
        graphs.append(g)
        for vi in list(g.value_info) + list(g.output) + list(g.input):
            types[vi.name] = vi.type.tensor_type.elem_type
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
    return sum(1 for g in graphs for n in g.node if n.op_type not in ("Cast", "If")
               and any(types.get(o) == TensorProto.FLOAT for o in n.output))


# ---------------------------------------------------------------------------- real exports
def real_models() -> dict[str, tuple[str, dict, object]]:
    """name -> (path, input shapes, feeds builder or None): the PyPI-wheel models of
    bench_wheels.py, the ultralytics YOLOv8n export (benchmarks/_yolo.py) and the onnx
    package's backend test models."""
    import bench_wheels
    from _yolo import yolov8n

    out = {k: (str(p), bench_wheels.MODELS[k][1], bench_wheels.MODELS[k][2])
           for k, p in bench_wheels.fetch().items()}
    out["yolov8n"] = (str(yolov8n()), {"images": [1, 3, 320, 320]}, None)
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    for p in sorted(light.glob("*.onnx")):
        out[p.stem] = (str(p), {}, None)
    return out


def _theirs_loads(path: str, feeds: dict) -> str:
    """Whether onnxruntime's own float16 converter (what find_precision used before) writes
    a model that loads and runs."""
    import onnxruntime as ort
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        half = convert_float_to_float16(onnx.load(path), keep_io_types=True)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ort.InferenceSession(half.SerializeToString(), so,
                             providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as e:  # noqa: BLE001 - we report whatever it raises
        return "FAILS: " + str(e).strip().splitlines()[0][:140]
    return "loads and runs"


def bench_real(names: list[str] | None = None, int8: tuple[str, ...] = ("yolov8n", "vad")) -> None:
    """fp16 on every real export: our conversion checked, loaded and run, then the search's
    plan (or its reason); onnxruntime's converter beside it; int8 on the detector and the VAD."""
    from onnx_lab.errors import LabError
    from onnx_lab.numerics.half import HalfRules, half_proto
    from onnx_lab.runtime.feeds import make_feeds

    for name, (path, shapes, build) in real_models().items():
        if names and name not in names:
            continue
        lab = onnx_lab.open(path, shapes=shapes or None)
        feeds = build() if build else make_feeds(lab, seed=1)
        t0 = time.perf_counter()
        rules = HalfRules(lab.model)
        half = half_proto(lab.model, rules=rules)
        conv_s = time.perf_counter() - t0
        _ort_outputs(half, feeds)
        # Random kept sets, as the search tries them (the old path failed on every one for
        # YOLOv8n and the VAD): each one checked, loaded and run.
        rng = np.random.default_rng(0)
        for _ in range(4):
            kept = [c for c in rules.candidates if rng.random() < 0.3]
            _ort_outputs(half_proto(lab.model, kept, rules=rules), feeds)
        line = (f"[real] {name}: conversion checked, loads and runs ({conv_s:.2f} s), and with "
                f"4 random kept sets; onnxruntime's converter: {_theirs_loads(path, feeds)}")
        for target in ("fp16", "int8") if name in int8 else ("fp16",):
            kw = {"atol": ATOL, "rtol": RTOL} if target == "fp16" else {}
            t0 = time.perf_counter()
            try:
                plan = find_precision(lab, target, feeds=feeds, progress=False, **kw)
                line += (f"; {target}: {len(plan.kept)}/{plan.n_candidates} kept, passed "
                         f"{plan.passed}, confirmed {plan.confirmed}, {len(plan.trials)} trials, "
                         f"{time.perf_counter() - t0:.1f} s"
                         + (f" (note: {plan.notes[0][:90]}...)" if plan.notes else ""))
            except LabError as e:
                line += f"; {target}: no plan ({type(e).__name__}: {e.problem[:160]})"
        print(line, flush=True)


# ---------------------------------------------------------------------------- int8
def bench_int8_resnet(path: str, max_trials: int = 48) -> None:
    from onnx_lab.runtime.feeds import make_feeds

    model = onnx.load(path)
    convs = [n.name for n in model.graph.node if n.op_type == "Conv" and len(n.input) == 3]
    target = next(c for c in convs if "layer3" in c and c.endswith("conv2/Conv"))
    planted = onnx.ModelProto()
    planted.CopyFrom(model)
    relu = plant_outlier(planted, target)
    healthy = onnx_lab.open(model)
    lab = onnx_lab.open(planted)
    feeds = make_feeds(lab, n=4, seed=1)
    calib = make_feeds(lab, n=8, seed=2)
    # The tolerance: 2 dB under what the healthy model reaches fully quantized.
    h = find_precision(healthy, "int8", feeds=feeds, calibration=calib, metric="sqnr",
                       tolerance=0.0, progress=False, recheck=0)
    healthy_db = float(h.trials.iloc[0]["sqnr_db"])
    tol_db = round(healthy_db - 2.0, 1)
    t0 = time.perf_counter()
    plan = find_precision(lab, "int8", feeds=feeds, calibration=calib, metric="sqnr",
                          tolerance=tol_db, progress=False, max_trials=max_trials)
    s = time.perf_counter() - t0
    top3 = list(plan.sensitivity.head(3)["node_id"])
    ranks = dict(zip(plan.sensitivity["node_id"], plan.sensitivity["rank"]))
    full_db = float(plan.trials.iloc[0]["sqnr_db"])
    ref = _ort_outputs(planted, feeds[0])
    got = _ort_outputs(onnx_lab.Lab(plan.model).model.to_proto(), feeds[0])
    phases = ", ".join(f"{k} {v}" for k, v in plan.trials["phase"].value_counts().items())
    print(f"[int8] ResNet-50, outlier planted after {target} (its Relu {relu!r}): healthy full "
          f"int8 {healthy_db:.1f} dB -> tolerance sqnr >= {tol_db} dB; planted full int8 "
          f"{full_db:.1f} dB (passed {bool(plan.trials.iloc[0]['passed'])}); plan excludes "
          f"{len(plan.excluded)} nodes {plan.excluded} -> "
          f"{plan.outputs['sqnr_db_after'].min():.1f} dB (passed {plan.passed}, confirmed "
          f"with ORT's optimizations {plan.confirmed}); independent run "
          f"{_sqnr(ref, got):.1f} dB on sample 0; top 3 of the sensitivity {top3}; planted "
          f"Relu ranks {ranks.get(relu)}, its conv {ranks.get(target)}; planted in top 3: "
          f"{relu in top3 or target in top3}, in the exclusion set: "
          f"{relu in plan.excluded or target in plan.excluded}; {len(plan.trials)} trials "
          f"({phases}), calibration {plan.calibration.seconds:.1f} s once, {s:.1f} s in all",
          flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-bert", action="store_true")
    ap.add_argument("--only", default=None)
    ap.add_argument("--repeat", type=int, default=1,
                    help="fp16: runs per side, the fastest quoted")
    ap.add_argument("--max-trials", type=int, default=48, help="int8: the pruning's budget")
    args = ap.parse_args(argv)
    import warnings

    # onnxconverter-common warns once per small weight it rounds ("the float32 number ... will
    # be truncated"): thousands of lines on BERT-base.
    warnings.filterwarnings("ignore", message="the float32 number", category=UserWarning)
    global REPEAT
    REPEAT = max(1, args.repeat)
    if args.only != "int8" and not (args.only or "").startswith("real"):
        warm_up()
    from _models import bert_base, resnet50
    from bench_profile import detector

    from onnx_lab.runtime.feeds import make_feeds

    rows = []

    def want(n):
        return args.only is None or n in args.only.split(",")

    if want("cancellation"):
        m = cancellation_mlp()
        rows.append(bench_fp16("cancellation MLP", m, make_feeds(onnx_lab.open(m), seed=1)))
    if want("overflow_mlp"):
        m = overflow_mlp()
        rows.append(bench_fp16("overflow MLP", m, make_feeds(onnx_lab.open(m), seed=1)))
    if want("if_model"):
        m = if_model()
        rows.append(bench_fp16("If bodies", m, make_feeds(onnx_lab.open(m), seed=1)))
    if want("transformer_block"):
        lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 16})
        m = lab.model.to_proto()
        rows.append(bench_fp16("transformer block", m, make_feeds(lab, seed=1)))
    if want("resnet50"):
        p = str(resnet50())
        rows.append(bench_fp16("ResNet-50", p, make_feeds(onnx_lab.open(p), seed=1)))
    if want("resnet50_centred"):
        m = onnx.load(str(resnet50()))
        subs = plant_centering(m)
        print(f"[fp16] ResNet-50 with centring Subs after {subs}: a plan needs those and their "
              "convs", flush=True)
        rows.append(bench_fp16("ResNet-50 (3 centred convs)", m,
                               make_feeds(onnx_lab.open(m), seed=1)))
    if want("detector"):
        m = detector()
        lab = onnx_lab.open(m, dims={"batch": 1, "height": 320, "width": 320})
        rows.append(bench_fp16("YOLO-like detector", lab.model.to_proto(),
                               make_feeds(lab, seed=1)))
    if want("bert") and not args.skip_bert:
        p = str(bert_base())
        lab = onnx_lab.open(p, dims={"batch": 1, "sequence": 32})
        rows.append(bench_fp16("BERT-base", p, make_feeds(lab, seed=1), theirs=True,
                               dims=lab.dims))
    if want("int8"):
        bench_int8_resnet(str(resnet50()), max_trials=args.max_trials)
    if args.only is not None and (args.only == "real" or args.only.startswith("real:")):
        bench_real(args.only[5:].split(",") if ":" in args.only else None)
    for r in rows:
        if r.get("theirs_kept") is not None:
            print(f"[side by side] {r['model']}: kept {r['ours_kept']} vs {r['theirs_kept']}, "
                  f"time {r['ours_s']:.2f} s vs {r['theirs_s']:.2f} s "
                  f"({r['ours_s'] / max(r['theirs_s'], 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
