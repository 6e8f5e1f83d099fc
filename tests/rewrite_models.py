"""Models whose correct rewrites move work between nodes, and planted faults in them.

- :func:`optimum_decoder`: a Llama-style decoder as optimum's torch export writes it:
  ``input_ids``, ``attention_mask``, ``past_key_values.{i}.key/value`` in, ``logits`` and
  ``present.{i}.key/value`` out, heads split and merged by ``Shape → Gather → Unsqueeze →
  Concat → Reshape`` chains and Transposes, q and kᵀ scaled by √scale before their MatMul (as
  torch's SDPA export does), a ``Shape`` of the transposed keys giving the key length.
  onnxruntime's TransposeOptimizer moves that Shape above its Transpose (same node name,
  another input, a new Gather permuting its result into the old tensor name).
- :func:`gelu_conv`: Conv → GELU (``x * (erf(x/√2) + 1) * 0.5``) → Conv; onnxsim folds the
  ``* 0.5`` into the second Conv's weights. :func:`gelu_folded` is that fold made by hand (no
  provenance at all).
- :func:`move_shape_above_transpose`, :func:`plant_reshape_target`, :func:`plant_weight`:
  a correct rewrite and two planted faults, on ModelProtos.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper as nph
from onnx import TensorProto as TP
from onnx import helper as H

__all__ = ["optimum_decoder", "DECODER_DIMS", "gelu_conv", "gelu_folded",
           "move_shape_above_transpose", "plant_reshape_target", "plant_weight"]

#: Dims for :func:`optimum_decoder`: one decoding step (a Reshape target of the last layer
#: with heads and sequence swapped still runs: the same elements, another layout).
DECODER_DIMS = {"batch": 1, "sequence_length": 1, "past_sequence_length": 3}


def optimum_decoder(layers: int = 2, vocab: int = 32, hidden: int = 16, heads: int = 2,
                    seed: int = 0, static: dict[str, int] | None = None) -> onnx.ModelProto:
    """The decoder of the module docstring; ``static``: fixed dims instead of symbolic ones
    (what onnxsim needs)."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def init(name, arr):
        inits.append(nph.from_array(np.asarray(arr), name))

    init("embed", rng.standard_normal((vocab, hidden)).astype(np.float32))
    for name, v in (("i0", 0), ("i1", 1), ("i3", 3), ("ax0", [0]), ("ax12", [1, 2]),
                    ("ax_last", [3]), ("heads", [heads]), ("hd", [hd]), ("hidden", [hidden])):
        init(name, np.array(v, np.int64))
    init("sqrt_scale", np.array(hd ** -0.25, np.float32))
    init("neg", np.array(-1e4, np.float32))
    init("one_f", np.array(1, np.float32))
    d = static or {}
    b, s, p = (d.get(k, k) for k in ("batch", "sequence_length", "past_sequence_length"))
    total = p + s if static else "past_sequence_length + sequence_length"
    ins = [H.make_tensor_value_info("input_ids", TP.INT64, [b, s]),
           H.make_tensor_value_info("attention_mask", TP.INT64, [b, total])]
    outs = [H.make_tensor_value_info("logits", TP.FLOAT, [b, s, vocab])]
    nodes += [
        H.make_node("Gather", ["embed", "input_ids"], ["/model/embed/Gather_output_0"],
                    name="/model/embed/Gather"),
        H.make_node("Cast", ["attention_mask"], ["/model/mask/Cast_output_0"],
                    name="/model/mask/Cast", to=TP.FLOAT),
        H.make_node("Unsqueeze", ["/model/mask/Cast_output_0", "ax12"],
                    ["/model/mask/Unsqueeze_output_0"], name="/model/mask/Unsqueeze"),
        H.make_node("Sub", ["one_f", "/model/mask/Unsqueeze_output_0"],
                    ["/model/mask/Sub_output_0"], name="/model/mask/Sub"),
        H.make_node("Mul", ["/model/mask/Sub_output_0", "neg"], ["/model/mask/Mul_output_0"],
                    name="/model/mask/Mul"),
    ]
    x = "/model/embed/Gather_output_0"
    for i in range(layers):
        a = f"/model/layers.{i}/self_attn"
        pk, pv = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        ok, ov = f"present.{i}.key", f"present.{i}.value"

        def t(name, a=a):
            return name if name.startswith(("present.", "past_key")) else f"{a}/{name}"

        def n(op, inputs, outputs, name, a=a, t=t, **kw):
            known = {i.name for i in inits}  # weights and constants keep their names
            nodes.append(H.make_node(op, [v if v in known or v.startswith("/") else t(v)
                                          for v in inputs],
                                     [t(v) for v in outputs], name=f"{a}/{name}", **kw))

        for nm in (pk, pv):
            ins.append(H.make_tensor_value_info(nm, TP.FLOAT, [b, heads, p, hd]))
        for nm in (ok, ov):
            outs.append(H.make_tensor_value_info(nm, TP.FLOAT, [b, heads, total, hd]))
        for w in "qkvo":
            init(f"model.layers.{i}.self_attn.{w}_proj.weight",
                 (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32))
        n("Shape", [x], ["Shape_output_0"], "Shape")
        n("Gather", ["Shape_output_0", "i0"], ["Gather_output_0"], "Gather", axis=0)
        n("Shape", [x], ["Shape_1_output_0"], "Shape_1")
        n("Gather", ["Shape_1_output_0", "i1"], ["Gather_1_output_0"], "Gather_1", axis=0)
        n("Unsqueeze", ["Gather_output_0", "ax0"], ["Unsqueeze_output_0"], "Unsqueeze")
        n("Unsqueeze", ["Gather_1_output_0", "ax0"], ["Unsqueeze_1_output_0"], "Unsqueeze_1")
        n("Concat", ["Unsqueeze_output_0", "Unsqueeze_1_output_0", "heads", "hd"],
          ["Concat_output_0"], "Concat", axis=0)
        for w in "qkv":
            n("MatMul", [x, f"model.layers.{i}.self_attn.{w}_proj.weight"],
              [f"{w}_proj/MatMul_output_0"], f"{w}_proj/MatMul")
            n("Reshape", [f"{w}_proj/MatMul_output_0", "Concat_output_0"],
              [f"Reshape_{w}_output_0"], f"Reshape_{w}")
            n("Transpose", [f"Reshape_{w}_output_0"], [f"Transpose_{w}_output_0"],
              f"Transpose_{w}", perm=[0, 2, 1, 3])
        n("Concat", [pk, "Transpose_k_output_0"], [ok], "Concat_k", axis=2)
        n("Concat", [pv, "Transpose_v_output_0"], [ov], "Concat_v", axis=2)
        n("Transpose", [ok], ["Transpose_3_output_0"], "Transpose_3", perm=[0, 1, 3, 2])
        n("Shape", ["Transpose_3_output_0"], ["Shape_3_output_0"], "Shape_3")
        n("Gather", ["Shape_3_output_0", "i3"], ["Gather_3_output_0"], "Gather_3", axis=0)
        n("Mul", ["Transpose_q_output_0", "sqrt_scale"], ["Mul_output_0"], "Mul")
        n("Mul", ["Transpose_3_output_0", "sqrt_scale"], ["Mul_1_output_0"], "Mul_1")
        n("MatMul", ["Mul_output_0", "Mul_1_output_0"], ["MatMul_output_0"], "MatMul")
        n("Add", ["MatMul_output_0", "/model/mask/Mul_output_0"], ["Add_output_0"], "Add")
        n("Unsqueeze", ["Gather_3_output_0", "ax0"], ["Unsqueeze_3_output_0"], "Unsqueeze_3")
        n("Slice", ["Add_output_0", "ax0", "Unsqueeze_3_output_0", "ax_last"],
          ["Slice_output_0"], "Slice")
        n("Softmax", ["Slice_output_0"], ["Softmax_output_0"], "Softmax", axis=-1)
        n("MatMul", ["Softmax_output_0", ov], ["MatMul_1_output_0"], "MatMul_1")
        n("Transpose", ["MatMul_1_output_0"], ["Transpose_4_output_0"], "Transpose_4",
          perm=[0, 2, 1, 3])
        n("Shape", ["Transpose_4_output_0"], ["Shape_4_output_0"], "Shape_4")
        n("Gather", ["Shape_4_output_0", "i0"], ["Gather_4_output_0"], "Gather_4", axis=0)
        n("Gather", ["Shape_4_output_0", "i1"], ["Gather_5_output_0"], "Gather_5", axis=0)
        n("Unsqueeze", ["Gather_4_output_0", "ax0"], ["Unsqueeze_4_output_0"], "Unsqueeze_4")
        n("Unsqueeze", ["Gather_5_output_0", "ax0"], ["Unsqueeze_5_output_0"], "Unsqueeze_5")
        n("Concat", ["Unsqueeze_4_output_0", "Unsqueeze_5_output_0", "hidden"],
          ["Concat_1_output_0"], "Concat_1", axis=0)
        n("Reshape", ["Transpose_4_output_0", "Concat_1_output_0"], ["Reshape_output_0"],
          "Reshape")
        n("MatMul", ["Reshape_output_0", f"model.layers.{i}.self_attn.o_proj.weight"],
          ["o_proj/MatMul_output_0"], "o_proj/MatMul")
        nodes.append(H.make_node("Add", [x, f"{a}/o_proj/MatMul_output_0"],
                                 [f"/model/layers.{i}/Add_output_0"],
                                 name=f"/model/layers.{i}/Add"))
        x = f"/model/layers.{i}/Add_output_0"
    init("lm_head", (rng.standard_normal((hidden, vocab)) / 4).astype(np.float32))
    nodes.append(H.make_node("MatMul", [x, "lm_head"], ["logits"], name="/lm_head/MatMul"))
    model = H.make_model(H.make_graph(nodes, "decoder", ins, outs, inits),
                         opset_imports=[H.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def gelu_conv(seed: int = 0) -> onnx.ModelProto:
    """x → Conv → GELU as exported (``/Mul`` = x·(erf(x/√2)+1), ``/Mul_1`` = ·0.5) → Conv → y."""
    rng = np.random.default_rng(seed)
    inits = [nph.from_array((rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32), "c1.w"),
             nph.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "c1.b"),
             nph.from_array((rng.standard_normal((6, 8, 1, 1)) * 0.3).astype(np.float32), "c2.w"),
             nph.from_array((rng.standard_normal(6) * 0.1).astype(np.float32), "c2.b"),
             nph.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
             nph.from_array(np.array(1, np.float32), "one"),
             nph.from_array(np.array(0.5, np.float32), "half")]
    nodes = [
        H.make_node("Conv", ["x", "c1.w", "c1.b"], ["/conv1/Conv_output_0"], name="/conv1/Conv",
                    pads=[1, 1, 1, 1]),
        H.make_node("Div", ["/conv1/Conv_output_0", "sqrt2"], ["/Div_output_0"], name="/Div"),
        H.make_node("Erf", ["/Div_output_0"], ["/Erf_output_0"], name="/Erf"),
        H.make_node("Add", ["/Erf_output_0", "one"], ["/Add_output_0"], name="/Add"),
        H.make_node("Mul", ["/conv1/Conv_output_0", "/Add_output_0"], ["/Mul_output_0"],
                    name="/Mul"),
        H.make_node("Mul", ["/Mul_output_0", "half"], ["/Mul_1_output_0"], name="/Mul_1"),
        H.make_node("Conv", ["/Mul_1_output_0", "c2.w", "c2.b"], ["y"], name="/conv2/Conv"),
    ]
    g = H.make_graph(nodes, "gelu", [H.make_tensor_value_info("x", TP.FLOAT, [1, 4, 8, 8])],
                     [H.make_tensor_value_info("y", TP.FLOAT, [1, 6, 8, 8])], inits)
    model = H.make_model(g, opset_imports=[H.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _init(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def gelu_folded(model: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """:func:`gelu_conv` with the ``* 0.5`` folded into the second Conv's weights by hand: the
    same outputs, ``/Mul_1`` gone, the Conv reading ``/Mul_output_0``."""
    m = onnx.ModelProto()
    m.CopyFrom(model if model is not None else gelu_conv())
    m.graph.node.remove(_node(m, "/Mul_1"))
    conv = _node(m, "/conv2/Conv")
    conv.input[0] = "/Mul_output_0"
    conv.input[1] = "c2.w_half"
    w = nph.to_array(_init(m, "c2.w"))
    m.graph.initializer.append(nph.from_array((w * np.float32(0.5)).astype(np.float32),
                                              "c2.w_half"))
    return m


def move_shape_above_transpose(model: onnx.ModelProto, shape_node: str) -> onnx.ModelProto:
    """What onnxruntime's TransposeOptimizer does to ``Shape(Transpose(x, perm))``: the Shape
    node keeps its name but reads ``x`` and writes a new tensor named after itself; a new
    Gather permutes it into the old output name. A correct rewrite."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    shape = _node(m, shape_node)
    tr = next(n for n in m.graph.node if n.output[0] == shape.input[0])
    perm = [a.ints for a in tr.attribute if a.name == "perm"][0]
    old_out = shape.output[0]
    shape.input[0] = tr.input[0]
    shape.output[0] = shape_node
    perm_name = f"{shape_node}/perm"
    m.graph.initializer.append(nph.from_array(np.array(list(perm), np.int64), perm_name))
    at = list(m.graph.node).index(shape) + 1
    m.graph.node.insert(at, H.make_node("Gather", [shape_node, perm_name], [old_out],
                                        name=f"{shape_node}/Gather", axis=0))
    return m


def plant_reshape_target(model: onnx.ModelProto, reshape_node: str,
                         target: list[int]) -> onnx.ModelProto:
    """A wrong rewrite: ``reshape_node`` reshapes to the constant ``target`` (the same number
    of elements, another layout)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    name = f"{reshape_node}/planted_shape"
    m.graph.initializer.append(nph.from_array(np.array(target, np.int64), name))
    _node(m, reshape_node).input[1] = name
    return m


def plant_weight(model: onnx.ModelProto, weight: str, delta: float = 0.5) -> onnx.ModelProto:
    """A wrong rewrite: ``delta`` added to the first element of initializer ``weight``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    t = _init(m, weight)
    w = nph.to_array(t).copy()
    w.flat[0] += delta
    t.CopyFrom(nph.from_array(w, weight))
    return m
