"""Helpers of the pass tests: build small models from ONNX text, run them, compare outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.core.model import LabModel
from onnx_lab.runtime.capture import run
from onnx_lab.runtime.feeds import make_feeds
from onnx_lab.transforms.base import PassResult, get_pass


def model_from_text(text: str, inits: dict[str, np.ndarray] | None = None,
                    opset: int = 17) -> LabModel:
    """A LabModel from ONNX text (graph only) plus initializers given as arrays."""
    graph = onnx.parser.parse_graph(text)
    for name, arr in (inits or {}).items():
        graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return onnx_lab.open(model).model


def sample(name: str) -> LabModel:
    return onnx_lab.open(f"sample:{name}").model


def apply(name: str, model: LabModel, matches=None, **params) -> PassResult:
    return get_pass(name, matches=matches, **params).run(model)


def ops(model: LabModel) -> list[str]:
    """Op types of the main graph in stored order."""
    return [n.op_type for n in model.ir.graph]


def node_ids(model: LabModel) -> set[str]:
    return set(model.index.entries)


def assert_same_outputs(before: LabModel, after: LabModel, *, dims=None, seed: int = 0,
                        atol: float = 1e-4, rtol: float = 1e-3) -> None:
    """Run both models on the same seeded feeds; outputs must agree (and keep their names)."""
    feeds = make_feeds(before, dims=dims, seed=seed)
    a = run(before, feeds)
    b = run(after, feeds)
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], atol=atol, rtol=rtol, err_msg=k)
    onnx.checker.check_model(after.to_proto())


def rand(*shape: int, seed: int = 0, scale: float = 1.0, low: float | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed + sum(shape))
    if low is not None:
        return rng.uniform(low, low + 1.0, shape).astype(np.float32)
    return (rng.standard_normal(shape) * scale).astype(np.float32)
