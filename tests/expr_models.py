"""Models whose dims are expressions of other dims, built with onnx helpers (no downloads).

- :func:`optimum_decoder`: the layout of ``optimum-cli export onnx`` decoders: ``input_ids``
  ``[batch, sequence_length]``, ``attention_mask [batch, past_sequence_length +
  sequence_length]``, ``past_key_values.{i}.key/value [batch, heads, past_sequence_length,
  head]`` and ``present.{i}.*`` outputs sized ``past_sequence_length + sequence_length``
  (unfused attention with standard ops: ``Shape -> Gather -> Range`` builds the causal mask).
- :func:`scaled_inputs`: inputs sized ``2*seq``, ``floor(height/32)`` and ``ceil(width/32)``
  beside the plain ``seq``, ``height``, ``width``.
"""

from __future__ import annotations

import numpy as np
import onnx
from llm_models import unfused_decoder
from onnx import TensorProto, helper

TOTAL = "past_sequence_length + sequence_length"
DIMS = {"batch": 1, "past_sequence_length": 4, "sequence_length": 3}
_RENAME = {"past_seq+seq": TOTAL, "seq": "sequence_length", "past_seq": "past_sequence_length",
           "batch": "batch"}


def optimum_decoder(**kw) -> onnx.ModelProto:
    """An optimum-style 2-layer decoder with expression dims (see the module docstring)."""
    m = unfused_decoder(**kw)
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_param = _RENAME[d.dim_param]
    onnx.checker.check_model(m)
    return m


def with_batch_named(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """A copy of ``model`` whose ``batch`` dim is called ``name`` (another exporter's naming)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param == "batch":
                d.dim_param = name
    return m


def scaled_inputs() -> onnx.ModelProto:
    """x [batch, 2*seq] + concat(y, y) with y [batch, seq]; a feature map
    [1, 4, floor(height/32), ceil(width/32)] added to the image [1, 3, height, width] through a
    1x1 Conv to 4 channels and a 32x32 AveragePool with ceil_mode (give a height that 32
    divides): every dim must come out right for onnxruntime to run it."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 1, 1],
                           np.linspace(-1, 1, 12, dtype=np.float32).tolist())
    nodes = [
        helper.make_node("Concat", ["y", "y"], ["yy"], axis=1, name="concat"),
        helper.make_node("Add", ["x", "yy"], ["sum"], name="add"),
        helper.make_node("Conv", ["img", "w"], ["c"], name="conv"),
        helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[32, 32], strides=[32, 32],
                         ceil_mode=1, name="pool"),
        helper.make_node("Add", ["p", "fm"], ["out"], name="add_fm"),
    ]
    inits = [w]
    g = helper.make_graph(
        nodes, "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "2*seq"]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, "height", "width"]),
         helper.make_tensor_value_info("fm", TensorProto.FLOAT,
                                       [1, 4, "floor(height/32)", "ceil(width/32)"])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["batch", "2*seq"]),
         helper.make_tensor_value_info("out", TensorProto.FLOAT,
                                       [1, 4, "floor(height/32)", "ceil(width/32)"])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m
