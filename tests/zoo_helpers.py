"""Small model zoos for the audit tests: real models built with onnx.helper, one broken file,
one that runs forever and one that allocates past a memory limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from models import save_external
from onnx import TensorProto, helper, numpy_helper


def _model(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="onnx_lab.tests")
    m.ir_version = 8
    return m


def conv_bn(seed: int = 0, channels: int = 4) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> Identity: the safe preset fuses and removes."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w", rng.normal(0, 0.3, (c, 3, 3, 3))), ("b", rng.normal(0, 0.1, c)),
        ("scale", rng.uniform(0.5, 1.5, c)), ("bias", rng.normal(0, 0.1, c)),
        ("mean", rng.normal(0, 0.1, c)), ("var", rng.uniform(0.5, 1.5, c)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"],
                              ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["y"], name="id")]
    g = helper.make_graph(nodes, "conv_bn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])],
                          inits)
    return _model(g)


def matmul_add(seed: int = 1, batch_dim: str | None = "batch") -> onnx.ModelProto:
    """MatMul + Add with a dynamic batch dim ``batch`` (``batch_dim``; None: unnamed, as
    skl2onnx writes it)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, (16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Tanh", ["a"], ["y"], name="tanh")]
    g = helper.make_graph(nodes, "matmul_add",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 8])],
                          inits)
    return _model(g)


def endless_loop() -> onnx.ModelProto:
    """A Loop whose trip count (10^15, from an input-dependent value) never ends: it runs as
    soon as onnxruntime runs the model (the safe preset's verification, after removing the
    Identity, is the first stage that does)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    inits = [numpy_helper.from_array(np.array(10**15, np.int64), "big"),
             numpy_helper.from_array(np.array(True), "cond")]
    nodes = [helper.make_node("Identity", ["x"], ["x1"]),
             helper.make_node("Shape", ["x1"], ["s"]),
             helper.make_node("ReduceProd", ["s"], ["p"], keepdims=0),
             helper.make_node("Mul", ["p", "big"], ["trips"]),
             helper.make_node("Loop", ["trips", "cond", "x1"], ["y"], body=body)]
    g = helper.make_graph(nodes, "endless",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits)
    return _model(g)


def huge_allocation(gib: float = 2.0) -> onnx.ModelProto:
    """ConstantOfShape of ``gib`` GiB of float32 whose size comes from an input's dim at run
    time (nothing to fold at session creation), summed to a scalar."""
    n = int(gib * (1 << 30) / 4)
    inits = [numpy_helper.from_array(np.array([n], np.int64), "n")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Mul", ["s", "n"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["big"],
                              value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)]
    g = helper.make_graph(nodes, "huge",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["k"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits)
    return _model(g)


def make_zoo(folder: Path, *, bad: bool = True) -> Path:
    """A folder of models: two good ones at the top, one with external data in a subfolder,
    a dynamic one, and (``bad``) a truncated file."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(conv_bn(0), folder / "conv_bn.onnx")
    onnx.save(conv_bn(3, channels=6), folder / "conv_bn6.onnx")
    (folder / "nested").mkdir(exist_ok=True)
    save_external(conv_bn(5), folder / "nested" / "external.onnx")
    onnx.save(matmul_add(), folder / "nested" / "dynamic.onnx")
    if bad:
        data = conv_bn(7).SerializeToString()
        (folder / "broken.onnx").write_bytes(data[: len(data) // 2])
    return folder
