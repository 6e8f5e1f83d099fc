"""Builders of small models in the styles real exporters produce (shared by all test areas).

``tests/`` is on ``sys.path`` (pytest's rootdir conftest), so any test can do::

    from models import paddle_style, save_external

Every builder is deterministic (seeded weights) and returns an ``onnx.ModelProto``, except the
torch exporters, which write into a folder and return the path (call
``pytest.importorskip("torch")`` before them).

- :func:`tf2onnx_style`: NHWC input ``input_1:0`` [unk__12, 16, 16, 3], ``:0`` tensor names,
  ``StatefulPartitionedCall/...`` node names, producer tf2onnx, opset 13.
- :func:`paddle_style`: every weight in a Constant node (zero initializers), input dims
  ``[-1, 3, "?", "?"]`` (``-1`` as dim_value, ``?`` as dim_param), producer PaddlePaddle.
- :func:`quantized`: DynamicQuantizeLinear, ConvInteger, MatMulInteger, QuantizeLinear /
  DequantizeLinear and ``com.microsoft::Gelu``; runs in onnxruntime.
- :func:`fp16_model`: fp32 I/O with Casts around an fp16 MatMul/Add/Relu/Conv body.
- :func:`control_flow_model`: an If whose branches hold nodes with the same names, a Loop whose
  body holds an If, and a Scan.
- :func:`symbolic_expr_model`: dims such as ``floor(height/2)+1`` on value_info and outputs.
- :func:`unsorted_model`: a valid graph whose nodes are stored in reverse topological order.
- :func:`reshape_computed_shape`: a Reshape whose target shape is computed (Shape, Gather,
  Concat), so only data propagation finds the output shape.
- :func:`named_model`: nodes with duplicate and empty names.
- :func:`conv_bn_scale_from_input`: Conv → BatchNormalization whose scale is a graph input
  (fuse_conv_bn's near-miss: the scale is not a constant).
- :func:`torchscript_export`, :func:`dynamo_export`: tiny torch models exported for real
  (dynamo: weights saved as external data, value_info present).
- :func:`save_external`: save a ModelProto with its tensors in one external data file.
- :func:`function_reading_default`: a local function whose Constant reads the function's
  default attribute value (ir_version 9) by reference.
- :func:`genai_build`: a random-weight tiny Llama built by onnxruntime-genai's model builder
  (fp32 or int4), as deployed decoder LLMs are (``genai_model`` fixture in conftest).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "tf2onnx_style", "paddle_style", "quantized", "fp16_model", "control_flow_model",
    "symbolic_expr_model", "unsorted_model", "reshape_computed_shape", "named_model",
    "torchscript_export", "dynamo_export", "save_external", "function_reading_default",
    "ALL_STYLES",
]

F = TensorProto.FLOAT


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _init(name: str, a: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(a), name)


def _model(graph: onnx.GraphProto, opset: int = 17, producer: str = "onnx_lab.tests",
           version: str = "", extra_opsets: dict[str, int] | None = None,
           ir_version: int = 8) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    m = helper.make_model(graph, opset_imports=opsets, producer_name=producer,
                          producer_version=version)
    m.ir_version = ir_version
    return m


# --------------------------------------------------------------------------- tf2onnx
def tf2onnx_style() -> onnx.ModelProto:
    """A Keras-like CNN as tf2onnx writes it: ``:0`` names, ``unk__`` batch dims, NHWC input."""
    r = _rng(10)
    p = "StatefulPartitionedCall/model/"
    inits = [
        _init(f"{p}conv2d/Conv2D/ReadVariableOp:0",
              (r.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32)),
        _init(f"{p}conv2d/BiasAdd/ReadVariableOp:0", np.zeros(8, np.float32)),
        _init(f"{p}dense/MatMul/ReadVariableOp:0",
              (r.standard_normal((8, 10)) * 0.3).astype(np.float32)),
        _init(f"{p}dense/BiasAdd/ReadVariableOp:0", (r.standard_normal(10) * 0.1).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Transpose", ["input_1:0"], [f"{p}conv2d/Conv2D__6:0"],
                         name=f"{p}conv2d/Conv2D__6", perm=[0, 3, 1, 2]),
        helper.make_node("Conv", [f"{p}conv2d/Conv2D__6:0", inits[0].name, inits[1].name],
                         [f"{p}conv2d/BiasAdd:0"], name=f"{p}conv2d/BiasAdd",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [f"{p}conv2d/BiasAdd:0"], [f"{p}conv2d/Relu:0"],
                         name=f"{p}conv2d/Relu"),
        helper.make_node("ReduceMean", [f"{p}conv2d/Relu:0"],
                         [f"{p}global_average_pooling2d/Mean:0"],
                         name=f"{p}global_average_pooling2d/Mean", axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", [f"{p}global_average_pooling2d/Mean:0", inits[2].name],
                         [f"{p}dense/MatMul:0"], name=f"{p}dense/MatMul"),
        helper.make_node("Add", [f"{p}dense/MatMul:0", inits[3].name], [f"{p}dense/BiasAdd:0"],
                         name=f"{p}dense/BiasAdd"),
        helper.make_node("Softmax", [f"{p}dense/BiasAdd:0"], ["dense:0"],
                         name=f"{p}dense/Softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "tf2onnx",
        [helper.make_tensor_value_info("input_1:0", F, ["unk__12", 16, 16, 3])],
        [helper.make_tensor_value_info("dense:0", F, ["unk__13", 10])], inits)
    return _model(graph, opset=13, producer="tf2onnx", version="1.16.1 15c810")


# --------------------------------------------------------------------------- PaddlePaddle
def paddle_style() -> onnx.ModelProto:
    """Paddle2ONNX style: weights in Constant nodes, no initializers, ``-1`` and ``?`` dims."""
    r = _rng(11)

    def const(name: str, a: np.ndarray) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], name=f"p2o.Constant.{name}",
                                value=numpy_helper.from_array(np.asarray(a), name))

    nodes = [
        const("conv2d_0.w_0", (r.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32)),
        const("conv2d_0.b_0", (r.standard_normal((1, 8, 1, 1)) * 0.1).astype(np.float32)),
        const("linear_0.w_0", (r.standard_normal((8, 10)) * 0.3).astype(np.float32)),
        const("linear_0.b_0", (r.standard_normal(10) * 0.1).astype(np.float32)),
        const("reshape_0.shape", np.array([0, -1], np.int64)),
        helper.make_node("Conv", ["x", "conv2d_0.w_0"], ["conv2d_0.tmp_0"], name="p2o.Conv.0",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["conv2d_0.tmp_0", "conv2d_0.b_0"], ["conv2d_0.tmp_1"],
                         name="p2o.Add.0"),
        helper.make_node("Relu", ["conv2d_0.tmp_1"], ["relu_0.tmp_0"], name="p2o.Relu.0"),
        helper.make_node("GlobalAveragePool", ["relu_0.tmp_0"], ["pool2d_0.tmp_0"],
                         name="p2o.GlobalAveragePool.0"),
        helper.make_node("Reshape", ["pool2d_0.tmp_0", "reshape_0.shape"], ["flatten_0.tmp_0"],
                         name="p2o.Reshape.0"),
        helper.make_node("MatMul", ["flatten_0.tmp_0", "linear_0.w_0"], ["linear_0.tmp_0"],
                         name="p2o.MatMul.0"),
        helper.make_node("Add", ["linear_0.tmp_0", "linear_0.b_0"], ["linear_0.tmp_1"],
                         name="p2o.Add.1"),
        helper.make_node("Softmax", ["linear_0.tmp_1"], ["save_infer_model/scale_0.tmp_0"],
                         name="p2o.Softmax.0", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "paddle",
        [helper.make_tensor_value_info("x", F, [-1, 3, "?", "?"])],
        [helper.make_tensor_value_info("save_infer_model/scale_0.tmp_0", F, [-1, 10])])
    return _model(graph, opset=11, producer="PaddlePaddle", ir_version=7)


# --------------------------------------------------------------------------- quantized
def quantized() -> onnx.ModelProto:
    """A dynamically quantized CNN head: DynamicQuantizeLinear, ConvInteger, MatMulInteger,
    QuantizeLinear/DequantizeLinear and com.microsoft::Gelu. Input ``x`` [1, 3, 8, 8]."""
    r = _rng(12)
    inits = [
        _init("conv.w_q", r.integers(0, 255, (4, 3, 3, 3), dtype=np.uint8)),
        _init("conv.w_zp", np.array(128, np.uint8)),
        _init("conv.w_scale", np.array(0.01, np.float32)),
        _init("fc.w_q", r.integers(0, 255, (144, 10), dtype=np.uint8)),
        _init("fc.w_zp", np.array(127, np.uint8)),
        _init("fc.w_scale", np.array(0.02, np.float32)),
        _init("flat_shape", np.array([1, 144], np.int64)),
        _init("out.scale", np.array(0.05, np.float32)),
        _init("out.zp", np.array(0, np.int8)),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"],
                         name="/conv/DynamicQuantizeLinear"),
        helper.make_node("ConvInteger", ["x_q", "conv.w_q", "x_zp", "conv.w_zp"], ["conv_i32"],
                         name="/conv/ConvInteger", kernel_shape=[3, 3]),
        helper.make_node("Cast", ["conv_i32"], ["conv_f"], name="/conv/Cast", to=F),
        helper.make_node("Mul", ["x_scale", "conv.w_scale"], ["conv_scale"], name="/conv/Mul"),
        helper.make_node("Mul", ["conv_f", "conv_scale"], ["conv_out"], name="/conv/Mul_1"),
        helper.make_node("Gelu", ["conv_out"], ["act"], name="/act/Gelu", domain="com.microsoft"),
        helper.make_node("Reshape", ["act", "flat_shape"], ["flat"], name="/flatten/Reshape"),
        helper.make_node("DynamicQuantizeLinear", ["flat"], ["f_q", "f_scale", "f_zp"],
                         name="/fc/DynamicQuantizeLinear"),
        helper.make_node("MatMulInteger", ["f_q", "fc.w_q", "f_zp", "fc.w_zp"], ["fc_i32"],
                         name="/fc/MatMulInteger"),
        helper.make_node("Cast", ["fc_i32"], ["fc_f"], name="/fc/Cast", to=F),
        helper.make_node("Mul", ["f_scale", "fc.w_scale"], ["fc_scale"], name="/fc/Mul"),
        helper.make_node("Mul", ["fc_f", "fc_scale"], ["fc_out"], name="/fc/Mul_1"),
        helper.make_node("QuantizeLinear", ["fc_out", "out.scale", "out.zp"], ["y_q"],
                         name="/out/QuantizeLinear"),
        helper.make_node("DequantizeLinear", ["y_q", "out.scale", "out.zp"], ["y"],
                         name="/out/DequantizeLinear"),
    ]
    graph = helper.make_graph(nodes, "quantized",
                              [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 10])], inits)
    return _model(graph, opset=13, producer="onnxruntime.quantization", version="1.20",
                  extra_opsets={"com.microsoft": 1})


# --------------------------------------------------------------------------- fp16
def fp16_model() -> onnx.ModelProto:
    """fp32 input/output, fp16 inside: Cast -> Conv -> Relu -> Flatten -> MatMul -> Add -> Cast."""
    r = _rng(13)
    h = TensorProto.FLOAT16
    inits = [
        _init("conv.weight", (r.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float16)),
        _init("conv.bias", (r.standard_normal(4) * 0.1).astype(np.float16)),
        _init("fc.weight", (r.standard_normal((64, 5)) * 0.2).astype(np.float16)),
        _init("fc.bias", (r.standard_normal(5) * 0.1).astype(np.float16)),
    ]
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], name="graph_input_cast_0", to=h),
        helper.make_node("Conv", ["x16", "conv.weight", "conv.bias"], ["c"], name="/conv/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="/flatten/Flatten", axis=1),
        helper.make_node("MatMul", ["f", "fc.weight"], ["m"], name="/fc/MatMul"),
        helper.make_node("Add", ["m", "fc.bias"], ["y16"], name="/fc/Add"),
        helper.make_node("Cast", ["y16"], ["y"], name="graph_output_cast_0", to=F),
    ]
    graph = helper.make_graph(nodes, "fp16",
                              [helper.make_tensor_value_info("x", F, ["batch", 2, 4, 4])],
                              [helper.make_tensor_value_info("y", F, ["batch", 5])], inits)
    return _model(graph, opset=17, producer="onnxconverter-common float16")


# --------------------------------------------------------------------------- control flow
def control_flow_model() -> onnx.ModelProto:
    """If (both branches hold a node named ``add``), Loop with a nested If, and a Scan.

    Input ``x`` float [2, 3]; outputs ``y`` [2, 3] and ``scan_sum`` [3].
    """
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t_out"], name="add")],
                               "then", [], [vi("t_out", F, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e_mid"], name="add"),
                                helper.make_node("Neg", ["e_mid"], ["e_out"])],
                               "else", [], [vi("e_out", F, [2, 3])])
    in_then = helper.make_graph([helper.make_node("Mul", ["acc", "two"], ["it"])],
                                "in_then", [], [vi("it", F, [2, 3])])
    in_else = helper.make_graph([helper.make_node("Add", ["acc", "if_out"], ["ie"])],
                                "in_else", [], [vi("ie", F, [2, 3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("If", ["cond"], ["acc_out"], name="inner", then_branch=in_then,
                          else_branch=in_else)],
        "body", [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []),
                 vi("acc", F, [2, 3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [2, 3])])
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"])], "scan_body",
        [vi("s_in", F, [3]), vi("row", F, [3])], [vi("s_out", F, [3])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["if_out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "go", "x"], ["loop_out"], body=body),
        helper.make_node("Add", ["loop_out", "if_out"], ["y"]),
        helper.make_node("Scan", ["zeros3", "x"], ["scan_sum"], body=scan_body,
                         num_scan_inputs=1),
    ]
    inits = [_init("zero", np.array(0.0, np.float32)), _init("one", np.array(1.0, np.float32)),
             _init("two", np.array(2.0, np.float32)), _init("trip", np.array(2, np.int64)),
             _init("go", np.array(True)), _init("zeros3", np.zeros(3, np.float32))]
    graph = helper.make_graph(nodes, "control_flow", [vi("x", F, [2, 3])],
                              [vi("y", F, [2, 3]), vi("scan_sum", F, [3])], inits)
    return _model(graph)


# --------------------------------------------------------------------------- symbolic exprs
def symbolic_expr_model() -> onnx.ModelProto:
    """Dims like ``floor(height/2)+1`` as dynamo exports write them (on value_info, output).

    A 1x1 Conv with stride 2 and one leading pad: out = floor(height/2)+1.
    """
    r = _rng(14)
    out_shape = ["batch", 4, "floor(height/2)+1", "floor(width/2)+1"]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], name="node_conv", kernel_shape=[1, 1],
                         strides=[2, 2], pads=[1, 1, 0, 0]),
        helper.make_node("Relu", ["conv"], ["y"], name="node_relu"),
    ]
    graph = helper.make_graph(
        nodes, "symbolic",
        [helper.make_tensor_value_info("x", F, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", F, out_shape)],
        [_init("w", (r.standard_normal((4, 3, 1, 1))).astype(np.float32))],
        value_info=[helper.make_tensor_value_info("conv", F, out_shape)])
    return _model(graph, producer="pytorch", version="2.13")


# --------------------------------------------------------------------------- structure cases
def big_weight_model(seed: int = 1) -> onnx.ModelProto:
    """``x -> Identity -> MatMul(w) -> Add(b) -> z`` with ``w`` of 256 KiB (weights of
    64 KiB and more become views of the file at open)."""
    w = _rng(seed).standard_normal((256, 256)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x1"], name="id"),
         helper.make_node("MatMul", ["x1", "w"], ["y"], name="mm"),
         helper.make_node("Add", ["y", "b"], ["z"], name="add")],
        "big_weight", [helper.make_tensor_value_info("x", F, [2, 256])],
        [helper.make_tensor_value_info("z", F, [2, 256])],
        [_init("w", w), _init("b", np.ones(256, np.float32))])
    return _model(graph)


def unsorted_model() -> onnx.ModelProto:
    """``x -> A(Relu) -> B(Neg) -> C(Add with x) -> y`` stored as C, B, A (reverse order)."""
    nodes = [
        helper.make_node("Add", ["b", "x"], ["y"], name="C"),
        helper.make_node("Neg", ["a"], ["b"], name="B"),
        helper.make_node("Relu", ["x"], ["a"], name="A"),
    ]
    graph = helper.make_graph(nodes, "unsorted", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    return _model(graph)


def reshape_computed_shape() -> onnx.ModelProto:
    """``x`` [2, 3, 4] reshaped to [2, 12] by a shape computed from ``Shape(x)`` at run time."""
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "idx0"], ["batch_dim"], name="gather", axis=0),
        helper.make_node("Concat", ["batch_dim", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "reshape_computed", [vi("x", F, [2, 3, 4])],
                              [vi("y", F, None)],
                              [_init("idx0", np.array([0], np.int64)),
                               _init("minus_one", np.array([-1], np.int64))])
    return _model(graph)


def named_model() -> onnx.ModelProto:
    """Five Relu nodes named ``dup``, ``dup``, ``""``, ``Relu_1`` and ``last``: the second
    ``dup`` would get the derived id ``Relu_1``, which another node uses as its name."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="dup"),
        helper.make_node("Relu", ["a"], ["b"], name="dup"),
        helper.make_node("Relu", ["b"], ["c"], name=""),
        helper.make_node("Relu", ["c"], ["d"], name="Relu_1"),
        helper.make_node("Relu", ["d"], ["y"], name="last"),
    ]
    graph = helper.make_graph(nodes, "named", [helper.make_tensor_value_info("x", F, [3])],
                              [helper.make_tensor_value_info("y", F, [3])])
    return _model(graph)


ALL_STYLES = {
    "tf2onnx": tf2onnx_style, "paddle": paddle_style, "quantized": quantized,
    "fp16": fp16_model, "control_flow": control_flow_model, "symbolic_expr": symbolic_expr_model,
    "unsorted": unsorted_model, "reshape_computed": reshape_computed_shape, "named": named_model,
}


# --------------------------------------------------------------------------- files
def conv_bn_scale_from_input() -> onnx.ModelProto:
    """Conv → BatchNormalization whose ``scale`` is a graph input, not a constant."""
    rng = _rng(0)
    inits = [_init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))]
    inits += [_init(n, a.astype(np.float32)) for n, a in
              (("bias", np.zeros(4)), ("mean", np.full(4, 0.1)), ("var", np.ones(4)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"],
                              ["y"], name="/bn/BatchNormalization")]
    g = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return _model(g)


def save_external(model: onnx.ModelProto, path: str | Path, data_name: str | None = None,
                  size_threshold: int = 0) -> Path:
    """Save ``model`` to ``path`` with tensors over ``size_threshold`` bytes in one data file
    (``<name>.data`` next to it). Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_name or path.name + ".data", size_threshold=size_threshold)
    return path


# --------------------------------------------------------------------------- torch exports
def _tiny_torch_module():
    import torch

    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.norm = torch.nn.LayerNorm(8)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            y = torch.relu(self.conv(x)).mean((2, 3))
            return self.fc(self.norm(y))

    return Tiny().eval()


def torchscript_export(folder: str | Path) -> Path:
    """Export a tiny CNN with the TorchScript exporter (dynamic batch), opset 17, one file."""
    import torch

    path = Path(folder) / "torchscript.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_tiny_torch_module(), (torch.randn(2, 3, 16, 16),), str(path),
                          input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    return path


def dynamo_export(folder: str | Path) -> Path:
    """Export a tiny CNN with the dynamo exporter (dynamic batch and height), weights saved as
    external data (``dynamo.onnx.data``); the graph carries value_info with dim expressions."""
    import logging

    import torch

    path = Path(folder) / "dynamo.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = torch.export.Dim("batch")
    height = torch.export.Dim("height", min=4, max=512)
    logging.getLogger("torch").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(_tiny_torch_module(), (torch.randn(2, 3, 16, 16),),
                                    dynamo=True, dynamic_shapes=({0: batch, 2: height},),
                                    input_names=["x"], output_names=["y"], verbose=False)
    program.save(str(path), external_data=True)
    return path


# --------------------------------------------------------------------------- LLM builders
def genai_build(folder: str | Path, precision: str = "fp32") -> Path:
    """Build a random-weight tiny Llama (4 layers, hidden 64, 4 heads, 2 KV heads, vocab 512,
    context 256) with onnxruntime-genai's model builder (``-p fp32|int4 -e cpu``) from a local
    folder (config, safetensors and a locally trained tokenizer: nothing from a hub). Returns
    the ``model.onnx`` path; ``genai_config.json`` lies beside it. Needs ``onnxruntime_genai``,
    ``transformers`` and ``torch`` (call ``pytest.importorskip`` first). The builder runs in a
    subprocess (it imports torch and transformers)."""
    import subprocess
    import sys

    def run(*args: str) -> None:
        p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
        if p.returncode:
            raise RuntimeError(f"{' '.join(args[:3])} failed:\n{p.stderr[-3000:]}")

    folder = Path(folder)
    hf = folder / "hf_tiny_llama"
    if not (hf / "config.json").exists():
        run("-c", _HF_TINY_LLAMA, str(hf))
    out = folder / f"genai_{precision}"
    if not (out / "model.onnx").exists():
        run("-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out), "-p",
            precision, "-e", "cpu", "-c", str(folder / "genai_cache"))
    return out / "model.onnx"


_HF_TINY_LLAMA = """
import sys, torch, transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
transformers.LlamaForCausalLM(cfg).eval().save_pretrained(sys.argv[1])
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
text = [f"the quick brown fox {i} jumps over the lazy dog {i * 7 % 13}" for i in range(500)]
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                     unk_token="<unk>").save_pretrained(sys.argv[1])
"""


def tiny_decoder(seed: int = 0, layers: int = 2, d: int = 32, heads: int = 4):
    """A decoder in plain torch (RMSNorm, causal attention through
    ``F.scaled_dot_product_attention``, a SiLU MLP; two layers of width 32 by default), for
    export and for ``compare_torch``. Input ``ids[1, 8]`` (int64 < 64)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.manual_seed(seed)

    class RMSNorm(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    class Attention(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
            self.v_proj, self.o_proj = nn.Linear(d, d), nn.Linear(d, d)

        def forward(self, x):
            b, s, d = x.shape
            q = self.q_proj(x).view(b, s, self.heads, -1).transpose(1, 2)
            k = self.k_proj(x).view(b, s, self.heads, -1).transpose(1, 2)
            v = self.v_proj(x).view(b, s, self.heads, -1).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(y.transpose(1, 2).reshape(b, s, d))

    class MLP(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

        def forward(self, x):
            return self.down(F.silu(self.up(x)))

    class Layer(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.norm1, self.attn = RMSNorm(d), Attention(d, heads)
            self.norm2, self.mlp = RMSNorm(d), MLP(d)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class Decoder(nn.Module):
        def __init__(self, vocab: int = 64, d: int = 32, heads: int = 4, n: int = 2) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer(d, heads) for _ in range(n))
            self.norm = RMSNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, ids):
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    return Decoder(d=d, heads=heads, n=layers).eval()


def decoder_export(folder: str | Path, module=None) -> Path:
    """Export :func:`tiny_decoder` (or ``module``) with the dynamo exporter, one file
    ``decoder.onnx`` (input ``ids[1, 8]``)."""
    import logging

    import torch

    path = Path(folder) / "decoder.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("torch").setLevel(logging.ERROR)
    module = module if module is not None else tiny_decoder()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (torch.zeros(1, 8, dtype=torch.int64),),
                                    dynamo=True, input_names=["ids"], output_names=["logits"],
                                    verbose=False)
    program.save(str(path))
    return path


def bert_block_with_nan_guard():
    """sample:bert_block with torch's scaled_dot_product_attention NaN guard between the
    Softmax and the MatMul that weights the values: ``p = Where(IsNaN(p), 0, p)`` (what the
    TorchScript export of a transformers BertModel with sdpa attention writes). onnxruntime's
    Attention fusion stops at its QK path there."""
    import numpy as np
    from onnx import helper, numpy_helper

    from onnx_lab.core._sample_models import build_bert_block

    m = build_bert_block()
    g = m.graph
    sm = next(n for n in g.node if n.op_type == "Softmax")
    probs = sm.output[0]
    reader = next(n for n in g.node if n.op_type == "MatMul" and probs in n.input)
    g.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "nan_guard.zero"))
    guard = [helper.make_node("IsNaN", [probs], ["/attn/IsNaN_out"], name="/attn/IsNaN"),
             helper.make_node("Where", ["/attn/IsNaN_out", "nan_guard.zero", probs],
                              ["/attn/Where_out"], name="/attn/Where")]
    reader.input[list(reader.input).index(probs)] = "/attn/Where_out"
    at = list(g.node).index(reader)
    for k, n in enumerate(guard):
        g.node.insert(at + k, n)
    return m


def tensor_scatter_model() -> onnx.ModelProto:
    """Opset 24's KV-cache update alone: TensorScatter(past [2, 8, 4], new [2, 1, 4], write
    indices [2]) -> cache, along axis 1 (a data move; OpenVINO 2026.4 has no conversion)."""
    g = helper.make_graph(
        [helper.make_node("TensorScatter", ["past", "new", "idx"], ["cache"], axis=1,
                          name="ts")], "g",
        [helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, 8, 4]),
         helper.make_tensor_value_info("new", TensorProto.FLOAT, [2, 1, 4]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("cache", TensorProto.FLOAT, [2, 8, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
    m.ir_version = 10
    return m


def function_reading_default(default: TensorProto) -> onnx.ModelProto:
    """x [2] → a local function F (``local`` domain) adding a Constant whose value is F's
    attribute ``w`` (``value=@w``), given the default ``default`` (ir_version 9)."""
    const = helper.make_node("Constant", [], ["c"])
    const.attribute.append(onnx.AttributeProto(name="value", ref_attr_name="w",
                                               type=onnx.AttributeProto.TENSOR))
    fn = helper.make_function("local", "F", ["fx"], ["fy"],
                              [const, helper.make_node("Add", ["fx", "c"], ["fy"])],
                              [helper.make_opsetid("", 17)])
    fn.attribute_proto.append(onnx.AttributeProto(name="w", type=onnx.AttributeProto.TENSOR,
                                                  t=default))
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g",
                          [vi("x", F, [2])], [vi("y", F, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("local", 1)],
                             ir_version=9, functions=[fn])
