"""Real-world-style models for the browser tests, built with onnx.helper (no downloads).

- :func:`detector`: a YOLOv8-like detector (~340 nodes): SiLU convs, C2f blocks with Split and
  Concat, SPPF, an upsampling neck and three heads, input ``images[1, 3, height, width]``
  (height and width dynamic; multiples of 32 run).
- :func:`bert_like`: BERT-sized structure (~1,400 nodes: 24 BERT-style layers, TorchScript-style
  ``/encoder/layer.N/...`` names, shape arithmetic before every Reshape) with a small hidden
  size so it stays light.
- :func:`scoped_layers`: ``/model/layers.N/{attn,mlp}`` name scopes (two nodes each), an If
  in layer 2 whose branches hold one node each, and one layer whose scope carries markup:
  for a report whose views do not all fit its budget.

This file is copied next to the test notebooks and imported there too.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


class _G:
    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def init(self, name: str, a: np.ndarray) -> str:
        self.inits.append(onnx.numpy_helper.from_array(a, name))
        return name

    def node(self, op: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> list[str]:
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs

    def model(self, inputs, outputs, opset: int = 17) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, "g", inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pytorch")
        m.ir_version = 8
        return m


def _conv(g: _G, x: str, cin: int, cout: int, scope: str, k: int = 3, s: int = 1) -> str:
    w = g.init(f"{scope}.conv.weight",
               (g.rng.standard_normal((cout, cin, k, k)) * (1.0 / np.sqrt(cin * k * k)))
               .astype(np.float32))
    b = g.init(f"{scope}.conv.bias", np.zeros(cout, np.float32))
    p = k // 2
    (y,) = g.node("Conv", [x, w, b], f"{scope}/conv/Conv", kernel_shape=[k, k],
                  strides=[s, s], pads=[p, p, p, p])
    (sg,) = g.node("Sigmoid", [y], f"{scope}/act/Sigmoid")
    (out,) = g.node("Mul", [y, sg], f"{scope}/act/Mul")
    return out


def _c2f(g: _G, x: str, cin: int, cout: int, scope: str, n: int = 3) -> str:
    h = cout // 2
    y = _conv(g, x, cin, cout, f"{scope}/cv1", k=1)
    split = g.init(f"{scope}.split", np.array([h, h], np.int64))
    a, b = g.node("Split", [y, split], f"{scope}/Split", n_out=2, axis=1)
    parts = [a, b]
    cur = b
    for i in range(n):
        t = _conv(g, cur, h, h, f"{scope}/m.{i}/cv1")
        t = _conv(g, t, h, h, f"{scope}/m.{i}/cv2")
        (cur,) = g.node("Add", [cur, t], f"{scope}/m.{i}/Add")
        parts.append(cur)
    (cat,) = g.node("Concat", parts, f"{scope}/Concat", axis=1)
    return _conv(g, cat, h * (2 + n), cout, f"{scope}/cv2", k=1)


def detector(seed: int = 0) -> onnx.ModelProto:
    """A YOLOv8-like detector with dynamic height/width (see the module docstring)."""
    g = _G(seed)
    c = [8, 16, 16, 32, 32]
    x = _conv(g, "images", 3, c[0], "/model.0", s=2)
    feats = []
    for i in range(1, 5):
        x = _conv(g, x, c[i - 1], c[i], f"/model.{2 * i - 1}", s=2)
        x = _c2f(g, x, c[i], c[i], f"/model.{2 * i}", n=3 if i < 4 else 2)
        feats.append(x)
    # SPPF
    y = _conv(g, x, c[4], c[4] // 2, "/model.9/cv1", k=1)
    pools = [y]
    for j in range(3):
        (y,) = g.node("MaxPool", [y], f"/model.9/m_{j}/MaxPool", kernel_shape=[5, 5],
                      strides=[1, 1], pads=[2, 2, 2, 2])
        pools.append(y)
    (cat,) = g.node("Concat", pools, "/model.9/Concat", axis=1)
    p5 = _conv(g, cat, c[4] * 2, c[4], "/model.9/cv2", k=1)
    scales = g.init("up.scales", np.array([1, 1, 2, 2], np.float32))
    (u,) = g.node("Resize", [p5, "", scales], "/model.10/Resize", mode="nearest")
    (cat,) = g.node("Concat", [u, feats[2]], "/model.11/Concat", axis=1)
    p4 = _c2f(g, cat, c[4] + c[3], c[3], "/model.12", n=3)
    (u,) = g.node("Resize", [p4, "", scales], "/model.13/Resize", mode="nearest")
    (cat,) = g.node("Concat", [u, feats[1]], "/model.14/Concat", axis=1)
    p3 = _c2f(g, cat, c[3] + c[2], c[2], "/model.15", n=3)
    d = _conv(g, p3, c[2], c[2], "/model.16", s=2)
    (cat,) = g.node("Concat", [d, p4], "/model.17/Concat", axis=1)
    n4 = _c2f(g, cat, c[2] + c[3], c[3], "/model.18", n=3)
    d = _conv(g, n4, c[3], c[3], "/model.19", s=2)
    (cat,) = g.node("Concat", [d, p5], "/model.20/Concat", axis=1)
    n5 = _c2f(g, cat, c[3] + c[4], c[4], "/model.21", n=3)
    outs = []
    shape = g.init("head.shape", np.array([1, 20, -1], np.int64))
    for i, (f, ch) in enumerate([(p3, c[2]), (n4, c[3]), (n5, c[4])]):
        branches = []
        for br, cout in (("cv2", 16), ("cv3", 4)):
            t = _conv(g, f, ch, 16, f"/model.22/{br}.{i}/{br}.{i}.0")
            t = _conv(g, t, 16, 16, f"/model.22/{br}.{i}/{br}.{i}.1")
            w = g.init(f"model.22.{br}.{i}.2.weight",
                       (g.rng.standard_normal((cout, 16, 1, 1)) * 0.25).astype(np.float32))
            (t,) = g.node("Conv", [t, w], f"/model.22/{br}.{i}/{br}.{i}.2/Conv",
                          kernel_shape=[1, 1])
            branches.append(t)
        (cat,) = g.node("Concat", branches, f"/model.22/Concat_{i}", axis=1)
        (r,) = g.node("Reshape", [cat, shape], f"/model.22/Reshape_{i}")
        outs.append(r)
    (cat,) = g.node("Concat", outs, "/model.22/Concat_3", axis=2)
    (out,) = g.node("Sigmoid", [cat], "/model.22/Sigmoid")
    g.nodes.append(helper.make_node("Identity", [out], ["output0"], name="/model.22/Identity"))
    return g.model(
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 20, None])])


def bert_like(layers: int = 24, hidden: int = 32, heads: int = 4, seed: int = 0
              ) -> onnx.ModelProto:
    """BERT-base-shaped graph structure with a small hidden size (see the module docstring)."""
    g = _G(seed)
    r = g.rng
    hd = hidden // heads

    def lin(x: str, cin: int, cout: int, scope: str) -> str:
        w = g.init(f"{scope}.weight".lstrip("/").replace("/", "."),
                   (r.standard_normal((cin, cout)) * 0.05).astype(np.float32))
        b = g.init(f"{scope}.bias".lstrip("/").replace("/", "."), np.zeros(cout, np.float32))
        (y,) = g.node("MatMul", [x, w], f"{scope}/MatMul")
        (y,) = g.node("Add", [b, y], f"{scope}/Add")
        return y

    def ln(x: str, scope: str) -> str:
        s = g.init(f"{scope}.weight".lstrip("/").replace("/", "."), np.ones(hidden, np.float32))
        b = g.init(f"{scope}.bias".lstrip("/").replace("/", "."), np.zeros(hidden, np.float32))
        (y,) = g.node("LayerNormalization", [x, s, b], f"{scope}/LayerNormalization", axis=-1)
        return y

    def heads_shape(x: str, scope: str, tail: list[int]) -> str:
        # What a TorchScript export computes before each Reshape: Shape/Gather/Unsqueeze/Concat.
        (shp,) = g.node("Shape", [x], f"{scope}/Shape")
        dims = []
        for j in range(2):
            idx = g.init(f"{scope}.idx{j}".lstrip("/").replace("/", "."), np.array(j, np.int64))
            (gd,) = g.node("Gather", [shp, idx], f"{scope}/Gather_{j}", axis=0)
            ax = g.init(f"{scope}.ax{j}".lstrip("/").replace("/", "."), np.array([0], np.int64))
            (u,) = g.node("Unsqueeze", [gd, ax], f"{scope}/Unsqueeze_{j}")
            dims.append(u)
        t = g.init(f"{scope}.tail".lstrip("/").replace("/", "."), np.array(tail, np.int64))
        (cat,) = g.node("Concat", [*dims, t], f"{scope}/Concat", axis=0)
        return cat

    emb = g.init("embeddings.word_embeddings.weight",
                 (r.standard_normal((100, hidden)) * 0.1).astype(np.float32))
    (x,) = g.node("Gather", [emb, "input_ids"], "/embeddings/word_embeddings/Gather")
    x = ln(x, "/embeddings/LayerNorm")
    (m,) = g.node("Cast", ["attention_mask"], "/Cast", to=TensorProto.FLOAT)
    ax = g.init("mask.axes", np.array([1, 2], np.int64))
    (m,) = g.node("Unsqueeze", [m, ax], "/Unsqueeze")
    one = g.init("mask.one", np.array(1.0, np.float32))
    (m,) = g.node("Sub", [one, m], "/Sub")
    big = g.init("mask.big", np.array(-10000.0, np.float32))
    (mask,) = g.node("Mul", [m, big], "/Mul")
    for i in range(layers):
        s = f"/encoder/layer.{i}/attention/self"
        qkv = []
        for nm in ("query", "key", "value"):
            y = lin(x, hidden, hidden, f"{s}/{nm}")
            shp = heads_shape(y, f"{s}/{nm}_shape", [heads, hd])
            (y,) = g.node("Reshape", [y, shp], f"{s}/{nm}/Reshape")
            perm = [0, 2, 3, 1] if nm == "key" else [0, 2, 1, 3]
            (y,) = g.node("Transpose", [y], f"{s}/{nm}/Transpose", perm=perm)
            qkv.append(y)
        (sc,) = g.node("MatMul", [qkv[0], qkv[1]], f"{s}/MatMul")
        d = g.init(f"{s}.scale".lstrip("/").replace("/", "."), np.array(np.sqrt(hd), np.float32))
        (sc,) = g.node("Div", [sc, d], f"{s}/Div")
        (sc,) = g.node("Add", [sc, mask], f"{s}/Add")
        (p,) = g.node("Softmax", [sc], f"{s}/Softmax", axis=-1)
        (ctx,) = g.node("MatMul", [p, qkv[2]], f"{s}/MatMul_1")
        (ctx,) = g.node("Transpose", [ctx], f"{s}/Transpose", perm=[0, 2, 1, 3])
        shp = heads_shape(ctx, f"{s}/ctx_shape", [hidden])
        (ctx,) = g.node("Reshape", [ctx, shp], f"{s}/Reshape")
        o = f"/encoder/layer.{i}/attention/output"
        y = lin(ctx, hidden, hidden, f"{o}/dense")
        (y,) = g.node("Add", [y, x], f"{o}/Add")
        x = ln(y, f"{o}/LayerNorm")
        it = f"/encoder/layer.{i}/intermediate"
        h = lin(x, hidden, hidden * 4, f"{it}/dense")
        c = g.init(f"{it}.sqrt2".lstrip("/").replace("/", "."), np.array(1.4142135, np.float32))
        (t,) = g.node("Div", [h, c], f"{it}/intermediate_act_fn/Div")
        (t,) = g.node("Erf", [t], f"{it}/intermediate_act_fn/Erf")
        c1 = g.init(f"{it}.one".lstrip("/").replace("/", "."), np.array(1.0, np.float32))
        (t,) = g.node("Add", [t, c1], f"{it}/intermediate_act_fn/Add")
        (t,) = g.node("Mul", [h, t], f"{it}/intermediate_act_fn/Mul")
        c5 = g.init(f"{it}.half".lstrip("/").replace("/", "."), np.array(0.5, np.float32))
        (t,) = g.node("Mul", [t, c5], f"{it}/intermediate_act_fn/Mul_1")
        o = f"/encoder/layer.{i}/output"
        y = lin(t, hidden * 4, hidden, f"{o}/dense")
        (y,) = g.node("Add", [y, x], f"{o}/Add")
        x = ln(y, f"{o}/LayerNorm")
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity"))
    return g.model(
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                       ["batch", "sequence"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "sequence", hidden])])


def grid_svg(n: int = 5000, cols: int = 50) -> str:
    """A graphviz-like SVG of ``n`` nodes (two text lines each) and about ``n`` edges on a
    grid, for measuring the canvas's pan/zoom frames at scale without a dot layout."""
    dx, dy, w, h = 150, 64, 120, 36
    rows = -(-n // cols)
    width, height = cols * dx + 20, rows * dy + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}pt" height="{height}pt" '
           f'viewBox="0.00 0.00 {width} {height}"><g id="graph0" class="graph">']
    for i in range(n):
        r, c = divmod(i, cols)
        x, y = 10 + c * dx, 10 + r * dy
        out.append(f'<g id="n:node{i}" class="node onnx-op"><title>node{i}</title>'
                   f'<path fill="#f3f3f3" stroke="#5b6b7f" d="M{x},{y}h{w}v{h}h-{w}z"/>'
                   f'<text text-anchor="middle" x="{x + w / 2}" y="{y + 15}" '
                   f'font-family="Helvetica" font-size="10">MatMul {i}</text>'
                   f'<text text-anchor="middle" x="{x + w / 2}" y="{y + 29}" '
                   f'font-family="Helvetica" font-size="8">1×128×768</text></g>')
        if r + 1 < rows:
            out.append(f'<g class="edge"><path fill="none" stroke="#7a7a7a" '
                       f'd="M{x + w / 2},{y + h}C{x + w / 2},{y + h + 10} {x + w / 2},'
                       f'{y + dy - 10} {x + w / 2},{y + dy}"/></g>')
    out.append("</g></svg>")
    return "".join(out)


HOSTILE_SCOPE = "/model/layers.39<img src=x onerror=window.__olr_pwned=1>"


def scoped_layers(layers: int = 40, d: int = 4) -> onnx.ModelProto:
    """``/model/layers.N/{attn,mlp}/{MatMul,Relu}`` for N < ``layers``; layer 2 ends in an If
    (``then_branch``: a Neg, ``else_branch``: an Abs); the last layer's scope is
    :data:`HOSTILE_SCOPE` (its nodes' names carry an ``<img onerror>``)."""
    g = _G()
    x = "x"
    for i in range(layers):
        layer = HOSTILE_SCOPE if i == layers - 1 else f"/model/layers.{i}"
        for part in ("attn", "mlp"):
            s = f"{layer}/{part}"
            w = g.init(f"{s}.weight", g.rng.standard_normal((d, d)).astype(np.float32))
            (mm,) = g.node("MatMul", [x, w], f"{s}/MatMul")
            (x,) = g.node("Relu", [mm], f"{s}/Relu")
        if i == 2:
            (total,) = g.node("ReduceSum", [x], f"{layer}/ReduceSum", keepdims=0)
            zero = g.init(f"{layer}.zero", np.zeros((), np.float32))
            (cond,) = g.node("Greater", [total, zero], f"{layer}/Greater")
            branches = {
                name: helper.make_graph(
                    [helper.make_node(op, [x], [f"{name}_out"], name=f"{layer}/{name}/{op}")],
                    name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT,
                                                             [1, d])])
                for name, op in (("then", "Neg"), ("else", "Abs"))}
            (x,) = g.node("If", [cond], f"{layer}/If", then_branch=branches["then"],
                          else_branch=branches["else"])
    return g.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
                   [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, d])])
