"""A planted outlier for the LLM tests: ``sample:tiny_llm`` with one layer's 4-bit blocks ruined.

``plant_outlier`` makes a change that leaves the float function as it was and ruins 4-bit blocks:
one hidden channel's post-attention norm weight divided by ``factor`` and that row of the MLP's
gate and up projections multiplied by it. Every 4-bit block holding the row then spends its 15
steps on one huge weight and rounds the others to zero.
"""

from __future__ import annotations

import onnx
from onnx import numpy_helper

import onnx_lab


def tiny_llm() -> onnx.ModelProto:
    """``sample:tiny_llm`` (a 2-layer decoder in onnxruntime-genai's layout) as a proto."""
    return onnx.load(onnx_lab.samples.path("tiny_llm"))


def plant_outlier(model: onnx.ModelProto, layer: int = 1, channel: int = 5,
                  factor: float = 64.0) -> onnx.ModelProto:
    """A copy of ``model`` with an outlier row in ``layer``'s gate and up projections."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in m.graph.initializer}

    def scale(name: str, by: float) -> None:
        a = numpy_helper.to_array(inits[name]).copy()
        a[channel] *= by
        inits[name].CopyFrom(numpy_helper.from_array(a, name))

    scale(f"model.layers.{layer}.post_attention_layernorm.weight", 1 / factor)
    for n in m.graph.node:
        if n.op_type == "MatMul" and f"layers.{layer}/mlp/" in n.name and "down" not in n.name:
            scale(n.input[1], factor)
    return m


def int4(model: onnx.ModelProto, **kw) -> onnx.ModelProto:
    """``model`` with its MatMuls quantized to 4 bits by onnxruntime's MatMulNBits quantizer."""
    from onnx_lab.numerics.weight_only import quantize_weight_only

    return quantize_weight_only(model, **kw)
