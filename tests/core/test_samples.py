"""Embedded sample models: deterministic, valid, runnable, with the teaching features."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_lab
from onnx_lab import samples
from onnx_lab.errors import UnknownNameError


def test_names():
    assert samples.names() == ["convnet", "transformer_block", "control_flow", "bert_block",
                               "tiny_llm", "tiny_llm_int4"]


@pytest.mark.parametrize("name", ["convnet", "transformer_block", "control_flow"])
def test_deterministic_valid_and_runnable(name):
    a, b = samples.build(name).SerializeToString(), samples.build(name).SerializeToString()
    assert a == b
    onnx.checker.check_model(samples.build(name), full_check=True)
    assert samples.path(name).read_bytes() == a
    sess = ort.InferenceSession(a, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in i.shape])
             .astype(np.float32) for i in sess.get_inputs()}
    for out in sess.run(None, feeds):
        assert np.isfinite(out).all()


def test_path_is_cached_and_rewritten_when_changed():
    p = samples.path("convnet")
    mtime = p.stat().st_mtime_ns
    assert samples.path("convnet") == p and p.stat().st_mtime_ns == mtime
    p.write_bytes(b"stale")
    assert samples.path("convnet").read_bytes() == samples.build("convnet").SerializeToString()


def test_load_returns_lab():
    lab = samples.load("control_flow")
    assert isinstance(lab, onnx_lab.Lab) and lab.summary()["subgraphs"] == 5


def test_unknown_sample():
    with pytest.raises(UnknownNameError, match="'convnt'.*'convnet'"):
        samples.build("convnt")


def test_convnet_teaching_features():
    lab = samples.load("convnet")
    ops = lab.nodes["op_type"].tolist()
    assert ops.count("Conv") == 3 and ops.count("BatchNormalization") == 3
    for op in ("MaxPool", "Gemm", "Identity", "Dropout", "Reshape"):
        assert op in ops
    assert ops.count("Transpose") == 2
    # The dead branch: /dead/Relu's output is consumed by nobody and is not a graph output.
    dead = lab.tensors.set_index("name").loc["/dead/Relu_output_0"]
    assert dead["consumers"] == [] and dead["kind"] == "intermediate"
    # The Reshape reads only initializers: constant-foldable.
    inits = set(lab.initializers["name"])
    reshape = lab.nodes.set_index("node_id").loc["/head/fc/Reshape"]
    assert set(reshape["inputs"]) <= inits


def test_transformer_block_features():
    lab = samples.load("transformer_block")
    assert lab.summary()["dynamic_dims"] == {"batch": ["x"], "seq": ["x"]}
    ops = lab.nodes["op_type"].tolist()
    assert "Softmax" in ops and ops.count("MatMul") >= 6
    assert "LayerNormalization" not in ops and "ReduceMean" in ops and "Sqrt" in ops


def test_control_flow_features():
    lab = samples.load("control_flow")
    assert set(lab.nodes["op_type"]) >= {"If", "Loop"}
    assert "Loop_3/body/inner_if/then_branch" in lab.index.graphs
