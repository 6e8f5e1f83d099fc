"""Models in the styles real exporters write: each opens and gives all tables and a summary."""

from __future__ import annotations

import onnx
import pytest
from models import ALL_STYLES, dynamo_export, save_external, torchscript_export

import onnx_lab
from onnx_lab.analysis.tables import INITIALIZER_COLUMNS, NODE_COLUMNS, TENSOR_COLUMNS


def _check_everything(lab: onnx_lab.Lab) -> dict:
    nodes, inits, tensors = lab.nodes, lab.initializers, lab.tensors
    assert list(nodes.columns) == NODE_COLUMNS and len(nodes) == len(lab.index)
    assert list(inits.columns) == INITIALIZER_COLUMNS
    assert list(tensors.columns) == TENSOR_COLUMNS
    assert nodes["node_id"].is_unique and tensors["name"].is_unique
    # Every tensor a node reads or writes has a row.
    names = set(tensors["name"])
    for ins, outs in zip(nodes["inputs"], nodes["outputs"]):
        assert {n for n in ins + outs if n} <= names
    s = lab.summary()
    assert s["num_nodes"] == len(nodes)
    assert "<table" in s._repr_html_()
    lab.weight_stats()
    return s


@pytest.mark.parametrize("style", sorted(ALL_STYLES))
def test_style_opens_from_file(style, tmp_path):
    proto = ALL_STYLES[style]()
    path = tmp_path / f"{style}.onnx"
    onnx.save_model(proto, str(path))
    _check_everything(onnx_lab.open(path))


@pytest.mark.parametrize("style", ["tf2onnx", "paddle", "quantized", "fp16"])
def test_style_with_external_data(style, tmp_path):
    path = save_external(ALL_STYLES[style](), tmp_path / f"{style}.onnx", size_threshold=64)
    s = _check_everything(onnx_lab.open(path))
    assert s["external_data"] is (style != "paddle")  # Constant nodes stay in the graph


def test_tf2onnx():
    lab = onnx_lab.open(ALL_STYLES["tf2onnx"]())
    s = lab.summary()
    assert s["producer"] == "tf2onnx 1.16.1 15c810"
    assert s["dynamic_dims"] == {"unk__12": ["input_1:0"]}
    assert s["inputs"] == [{"name": "input_1:0", "dtype": "float32",
                            "shape": ["unk__12", 16, 16, 3]}]
    assert lab.nodes["scope"].iloc[0] == "StatefulPartitionedCall/model/conv2d"


def test_paddle_weights_in_constant_nodes():
    lab = onnx_lab.open(ALL_STYLES["paddle"]())
    s = lab.summary()
    assert s["num_initializers"] == 0 and s["num_constant_tensors"] == 5
    assert s["num_params"] == 8 * 27 + 8 + 80 + 10 + 2
    inits = lab.initializers
    assert (inits["source"] == "constant").all()
    assert inits.set_index("name").loc["conv2d_0.w_0", "constant_node"] == \
        "p2o.Constant.conv2d_0.w_0"
    assert set(lab.weight_stats()["name"]) == set(inits["name"])
    assert s["inputs"][0]["shape"] == [None, 3, None, None]


def test_quantized():
    s = onnx_lab.open(ALL_STYLES["quantized"]()).summary()
    assert s["opsets"] == {"": 13, "com.microsoft": 1}
    assert s["op_counts"]["com.microsoft::Gelu"] == 1
    assert s["op_counts"]["DynamicQuantizeLinear"] == 2
    assert s["op_families"]["quantization"] == 4  # 2 DQL, QuantizeLinear, DequantizeLinear
    assert s["op_families"]["custom domain"] == 1
    assert s["op_families"]["convolution"] == 1  # ConvInteger
    assert s["op_families"]["matmul/gemm"] == 1  # MatMulInteger


def test_fp16():
    lab = onnx_lab.open(ALL_STYLES["fp16"]())
    assert set(lab.initializers["dtype"]) == {"float16"}
    t = lab.tensors.set_index("name")
    assert t.loc["m", "dtype"] == "float16" and t.loc["y", "dtype"] == "float32"
    st = lab.weight_stats().set_index("name")
    assert st.loc["conv.weight", "std"] > 0


# --------------------------------------------------------------------------- torch
@pytest.fixture(scope="module")
def torch_exports(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")  # torch.onnx's exporters need it
    folder = tmp_path_factory.mktemp("torch_exports")
    return {"torchscript": torchscript_export(folder), "dynamo": dynamo_export(folder)}


@pytest.mark.slow
def test_torchscript_export(torch_exports):
    lab = onnx_lab.open(torch_exports["torchscript"])
    s = _check_everything(lab)
    assert s["producer"].startswith("pytorch")
    assert s["dynamic_dims"] == {"batch": ["x"]}
    assert "/conv" in set(lab.nodes["scope"])
    assert lab.tensors.set_index("name").loc["y", "shape"] == ("batch", 4)


def test_dynamo_export(torch_exports):
    path = torch_exports["dynamo"]
    proto = onnx.load(str(path), load_external_data=False)
    assert len(proto.graph.value_info) > 0
    assert (path.parent / "dynamo.onnx.data").exists()
    lab = onnx_lab.open(path)
    assert all(t.raw is None for t in lab.model.external_tensors())
    s = _check_everything(lab)
    assert s["external_data"] is True
    assert set(s["dynamic_dims"]) == {"batch", "height"}
    # Exporter dim expressions survive shape inference as strings.
    dims = {d for shape in lab.tensors["shape"] if shape for d in shape if isinstance(d, str)}
    assert any("height" in d and d != "height" for d in dims), dims
    assert any(sc.startswith("/") for sc in lab.nodes["scope"])
    lab = onnx_lab.open(path, dims={"batch": 1, "height": 32})
    assert lab.tensors.set_index("name").loc["y", "shape"] == (1, 4)
    assert not lab.tensors["dynamic"].any()
