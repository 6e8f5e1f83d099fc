"""Small models for the numerics tests, built with onnx.helper."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_lab import samples


def make_model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = 8
    return m


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def scaled_copy(model: onnx.ModelProto, weight: str, factor: float) -> onnx.ModelProto:
    """A copy of ``model`` with initializer ``weight`` multiplied by ``factor``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name == weight:
            old = numpy_helper.to_array(t)  # its dtype kept (float16 weights stay so)
            t.CopyFrom(numpy_helper.from_array((old * factor).astype(old.dtype), t.name))
            return out
    raise KeyError(weight)


def fuse_stem_bn(model: onnx.ModelProto, keep_conv_name: bool = True) -> onnx.ModelProto:
    """Fold the stem BatchNormalization of the convnet sample into its Conv, by hand, and stamp
    ``onnx_lab.origin`` metadata the way the transforms do."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    conv = next(n for n in g.node if n.name == "/stem/conv/Conv")
    bn = next(n for n in g.node if n.name == "/stem/bn/BatchNormalization")
    w = numpy_helper.to_array(inits[conv.input[1]])
    b = numpy_helper.to_array(inits[conv.input[2]])
    gamma, beta, mean, var = (numpy_helper.to_array(inits[x]) for x in bn.input[1:])
    s = gamma / np.sqrt(var + 1e-5)
    inits[conv.input[1]].CopyFrom(numpy_helper.from_array(
        (w * s[:, None, None, None]).astype(np.float32), conv.input[1]))
    inits[conv.input[2]].CopyFrom(numpy_helper.from_array(
        ((b - mean) * s + beta).astype(np.float32), conv.input[2]))
    if not keep_conv_name:
        conv.output[0] = "fused_stem_out"
    bn_out = bn.output[0]
    for n in g.node:
        for i, x in enumerate(n.input):
            if x == bn_out:
                n.input[i] = conv.output[0]
    g.node.remove(bn)
    for n in g.node:
        origin = ["/stem/conv/Conv", "/stem/bn/BatchNormalization"] if n is conv else [n.name]
        entry = n.metadata_props.add()
        entry.key, entry.value = "onnx_lab.origin", json.dumps(origin)
    return m


def convnet() -> onnx.ModelProto:
    return samples.build("convnet")


def run_repro(folder) -> str:
    """Run the ``repro.py`` a repro folder holds, in that folder, with this interpreter: it
    must exit 0; its stdout."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "repro.py"], cwd=folder, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout
