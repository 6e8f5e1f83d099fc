"""Open at scale: ``onnx_lab.open(path)`` + ``lab.summary()`` vs ``onnx.load`` + ``infer_shapes``.

Synthetic decoder graphs in the shape of an unfused torch export (built with ``onnx.helper``,
saved to a temporary folder): repeated blocks of primitive ops — LayerNorm spelt out
(ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add), Q/K/V MatMul+Add, Reshape/Transpose into heads,
scaled MatMul, Softmax, the output projection and a Gelu-free MLP (MatMul/Add/Relu) — with small
weights, node names such as ``/model/layers.N/self_attn/q_proj/MatMul`` and dynamic dims
``batch`` and ``seq``. Each block has 46 nodes; ``--nodes`` picks how many blocks.

The anchor is ``onnx.load(path)`` + ``onnx.shape_inference.infer_shapes(model)`` with its
default arguments (no ``data_prop``): that is what a user runs to get a typed graph, and it is
the closest to what ``open`` + ``summary`` does (read the graph, type every tensor, count).
``data_prop=True`` is also printed for reference. Each measurement runs in a fresh subprocess
(imports before the clock), ``--repeat`` times interleaved (A B C A B C ...) so drifting load
on a shared machine hits all alike; the table shows the medians (wall time, and the CPU time
of the measuring process, which the load of other processes moves less) and the ratios to the
anchor.

Target: onnx_lab <= 2x the anchor at 20,000 and 200,000 nodes.

``floor`` times ``onnx.load`` + ``onnx_ir.serde.deserialize_model`` (the cyclic garbage
collector off, as ``open`` has it) + ``infer_shapes``: the
part of ``open`` + ``summary`` that a design reading the model into onnx_ir and typing it with
ONNX's inference cannot avoid (onnx_lab's checks of hostile input, its index, the folding of
shape computations and the tables come on top). Its ratio to the anchor bounds onnx_lab's from
below.

Usage::

    .venv/bin/python benchmarks/bench_open_scale.py                    # 20k and 200k nodes
    .venv/bin/python benchmarks/bench_open_scale.py --nodes 20000 --repeat 3
    .venv/bin/python benchmarks/bench_open_scale.py --nodes 2000 --before /tmp/old  # before/after
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN, HEADS, FFN = 16, 2, 32
NODES_PER_BLOCK = 46


def build(n_nodes: int, path: Path) -> int:
    """Write a decoder of ~``n_nodes`` nodes to ``path``; return its node count."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes: list = []
    inits: list = []

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.02).astype(np.float32), name))
        return name

    def c(name: str, values, dtype=np.int64) -> str:
        inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def node(op: str, name: str, inputs: list[str], **attrs) -> str:
        out = f"{name}_output_0"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    c("const_heads_shape", [0, 0, HEADS, HIDDEN // HEADS])
    c("const_merge_shape", [0, 0, HIDDEN])
    c("const_two", 2.0, np.float32)
    c("const_eps", 1e-5, np.float32)
    c("const_scale", 1.0 / np.sqrt(HIDDEN // HEADS), np.float32)

    def layer_norm(x: str, p: str) -> str:
        mean = node("ReduceMean", f"{p}/ReduceMean", [x], axes=[-1], keepdims=1)
        d = node("Sub", f"{p}/Sub", [x, mean])
        sq = node("Pow", f"{p}/Pow", [d, "const_two"])
        var = node("ReduceMean", f"{p}/ReduceMean_1", [sq], axes=[-1], keepdims=1)
        ve = node("Add", f"{p}/Add", [var, "const_eps"])
        sd = node("Sqrt", f"{p}/Sqrt", [ve])
        n = node("Div", f"{p}/Div", [d, sd])
        g = node("Mul", f"{p}/Mul", [n, w(f"{p}.weight", HIDDEN)])
        return node("Add", f"{p}/Add_1", [g, w(f"{p}.bias", HIDDEN)])

    def linear(x: str, p: str, n_in: int, n_out: int) -> str:
        m = node("MatMul", f"{p}/MatMul", [x, w(f"{p}.weight", n_in, n_out)])
        return node("Add", f"{p}/Add", [m, w(f"{p}.bias", n_out)])

    x = "hidden_states"
    blocks = max(1, round(n_nodes / NODES_PER_BLOCK))
    for i in range(blocks):
        p = f"/model/layers.{i}"
        h = layer_norm(x, f"{p}/input_layernorm")
        heads = []
        for proj in ("q_proj", "k_proj", "v_proj"):
            t = linear(h, f"{p}/self_attn/{proj}", HIDDEN, HIDDEN)
            r = node("Reshape", f"{p}/self_attn/{proj}/Reshape", [t, "const_heads_shape"])
            heads.append(node("Transpose", f"{p}/self_attn/{proj}/Transpose", [r],
                              perm=[0, 2, 1, 3]))
        q, k, v = heads
        kt = node("Transpose", f"{p}/self_attn/Transpose", [k], perm=[0, 1, 3, 2])
        s = node("MatMul", f"{p}/self_attn/MatMul", [q, kt])
        s = node("Mul", f"{p}/self_attn/Mul", [s, "const_scale"])
        a = node("Softmax", f"{p}/self_attn/Softmax", [s], axis=-1)
        o = node("MatMul", f"{p}/self_attn/MatMul_1", [a, v])
        o = node("Transpose", f"{p}/self_attn/Transpose_1", [o], perm=[0, 2, 1, 3])
        o = node("Reshape", f"{p}/self_attn/Reshape", [o, "const_merge_shape"])
        o = linear(o, f"{p}/self_attn/o_proj", HIDDEN, HIDDEN)
        x = node("Add", f"{p}/Add", [x, o])
        h = layer_norm(x, f"{p}/post_attention_layernorm")
        h = linear(h, f"{p}/mlp/up_proj", HIDDEN, FFN)
        h = node("Relu", f"{p}/mlp/act_fn/Relu", [h])
        h = linear(h, f"{p}/mlp/down_proj", FFN, HIDDEN)
        x = node("Add", f"{p}/Add_1", [x, h])
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/model/Identity"))

    graph = helper.make_graph(
        nodes, "decoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT,
                                       ["batch", "seq", HIDDEN])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "seq", HIDDEN])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="pytorch", producer_version="2.5.0")
    onnx.save(model, str(path))
    return len(nodes)


def _child(kind: str, path: str) -> None:
    """Run one measurement in this (fresh) process and print a JSON line."""
    import onnx
    import onnx.shape_inference

    import onnx_lab

    # ``onnx_lab.open`` is resolved on first access (``import onnx_lab`` stays light): that
    # import (onnx_lab.lab, onnx_ir, sympy: ~0.5 s) happens here, before the clock, as the
    # anchor's ``import onnx`` does.
    open_lab = onnx_lab.open
    parts: dict[str, float] = {}
    t0 = time.perf_counter()
    c0 = time.process_time()
    if kind == "floor":
        # What any open built on onnx_ir that types its tensors with ONNX's inference cannot
        # do without: the parse, onnx_ir's deserialization, and the anchor's own inference
        # (no onnx_lab code: its checks, index, folding and tables come on top). The cyclic
        # garbage collector is off while onnx_ir builds the graph, as in ``open``
        # (onnx_lab/core/_gc.py): with it, deserialization takes about twice as long.
        import gc

        import onnx_ir as ir

        t = time.perf_counter()
        m = onnx.load(path)
        parts["load"] = time.perf_counter() - t
        t = time.perf_counter()
        gc.disable()
        ir.serde.deserialize_model(m)
        gc.enable()
        parts["deserialize"] = time.perf_counter() - t
        t = time.perf_counter()
        onnx.shape_inference.infer_shapes(m)
        parts["infer_shapes"] = time.perf_counter() - t
    elif kind.startswith("onnx.load"):
        t = time.perf_counter()
        m = onnx.load(path)
        parts["load"] = time.perf_counter() - t
        t = time.perf_counter()
        onnx.shape_inference.infer_shapes(m, data_prop="data_prop" in kind)
        parts["infer_shapes"] = time.perf_counter() - t
    else:
        t = time.perf_counter()
        lab = open_lab(path)
        parts["open"] = time.perf_counter() - t
        t = time.perf_counter()
        lab.summary()
        parts["summary"] = time.perf_counter() - t
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                      "parts": parts}))


def _run_child(kind: str, path: Path) -> dict:
    env = None
    if "@" in kind:  # another copy of the package (e.g. an older commit's), for before/after
        env = {**os.environ, "PYTHONPATH": kind.split("@", 1)[1]}
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


KINDS = ["onnx.load+infer_shapes", "onnx.load+infer_shapes(data_prop)",
         "onnx_lab.open+summary", "floor"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", metavar="DIR", help="also time onnx_lab imported from "
                        "DIR (e.g. `git archive OLD onnx_lab | tar -x -C DIR`), interleaved")
    parser.add_argument("--keep", metavar="DIR", help="write the models here and keep them")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"{'nodes':>8s}  {'measure':40s} {'time':>8s} {'cpu':>8s}  breakdown")
        for n in args.nodes:
            path = folder / f"decoder_{n}.onnx"
            count = build(n, path)
            kinds = KINDS + ([f"onnx_lab.open+summary@{args.before}"] if args.before else [])
            runs: dict[str, list[dict]] = {k: [] for k in kinds}
            for _ in range(args.repeat):
                for k in kinds:
                    runs[k].append(_run_child(k, path))
            med, cpu = {}, {}
            for k, rs in runs.items():
                med[k] = statistics.median(r["seconds"] for r in rs)
                cpu[k] = statistics.median(r["cpu"] for r in rs)
                parts = " ".join(
                    f"{p}={statistics.median(r['parts'][p] for r in rs):.2f}s"
                    for p in rs[0]["parts"])
                print(f"{count:8d}  {k[:40]:40s} {med[k]:7.2f}s {cpu[k]:7.2f}s  {parts}")
            ref, lab = "onnx.load+infer_shapes", "onnx_lab.open+summary"
            print(f"{count:8d}  ratio onnx_lab / (onnx.load+infer_shapes): "
                  f"{med[lab] / med[ref]:.2f}x  (CPU time: {cpu[lab] / cpu[ref]:.2f}x; vs "
                  f"data_prop: {med[lab] / med['onnx.load+infer_shapes(data_prop)']:.2f}x)",
                  flush=True)
            print(f"{count:8d}  floor (load + onnx_ir deserialization + infer_shapes) / "
                  f"(onnx.load+infer_shapes): {med['floor'] / med[ref]:.2f}x", flush=True)
            if args.before:
                print(f"{count:8d}  ratio before (--before) / (onnx.load+infer_shapes): "
                      f"{med[kinds[-1]] / med[ref]:.2f}x  (CPU time: "
                      f"{cpu[kinds[-1]] / cpu[ref]:.2f}x)", flush=True)

if __name__ == "__main__":
    main()
