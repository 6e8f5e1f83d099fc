"""A stored weight as a node reads it, through the nodes that keep its values.

float16 conversions (``to_fp16``, onnxconverter-common's ``keep_io_types``, onnxruntime's
``ort:basic`` output of a float16 model) store a weight as float16 behind a Cast to float32;
QDQ quantization stores it as integers behind a DequantizeLinear. The blame of a divergence
compares the weights a node reads on both sides: a node's direct initializer inputs alone
missed every weight behind such a chain ("computes differently: its inputs agree").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array

# ops that give a weight's values unchanged (moved, or cast to a type that holds them all);
# input 0 is the weight, the others (a target shape, axes) must be stored constants
_MOVES = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"})
_HOLDS = {  # float dtype -> the float dtypes a Cast to which keeps every value
    np.dtype(np.float16): {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)},
    np.dtype(np.float32): {np.dtype(np.float32), np.dtype(np.float64)},
    np.dtype(np.float64): {np.dtype(np.float64)},
}
_MAX_CHAIN = 8


@dataclass
class ReadWeight:
    """``values``: what the node reads; ``name``: the stored tensor they come from;
    ``stored``: its float dtype where narrower than the read one (rounded to it), else None;
    ``step``: a DequantizeLinear's largest scale (its values are rounded to multiples of it),
    ``qdtype`` its integer dtype, ``scales`` its stored scale and zero point (name, values);
    ``through``: the op types between, stored side first."""

    name: str
    values: np.ndarray
    stored: np.dtype | None = None
    step: float | None = None
    qdtype: str | None = None
    scales: tuple[tuple[str, np.ndarray], ...] = ()
    through: tuple[str, ...] = ()


def read_weight(value: ir.Value | None, model: LabModel | None) -> ReadWeight | None:
    """The stored weight ``value`` holds, directly or through a chain of value-preserving
    nodes (Identity, Reshape/Transpose/Squeeze/Unsqueeze/Flatten, a Cast between floats that
    holds every value, a DequantizeLinear of stored integers, scale and zero point); None when
    it is no such weight or a node of the chain cannot be evaluated."""
    if value is None:
        return None
    direct = const_array(value, stored=True)
    if direct is not None:
        return ReadWeight(value.name or "", direct)
    if model is None:
        return None
    chain: list[ir.Node] = []
    v = value
    while True:
        node = v.producer()
        if node is None or node.domain not in ("", "ai.onnx") or len(chain) >= _MAX_CHAIN \
                or not node.inputs or node.inputs[0] is None or node.graph is not model.graph:
            return None
        if node.op_type not in _MOVES and node.op_type not in ("Cast", "DequantizeLinear"):
            return None
        if any(i is not None and i.name and const_array(i, stored=True) is None
               for i in node.inputs[1:]):
            return None
        chain.append(node)
        v = node.inputs[0]
        stored = const_array(v, stored=True)
        if stored is not None:
            break
    return _evaluate(v.name or "", stored, chain[::-1], model)


def _evaluate(name: str, arr: np.ndarray, chain: list[ir.Node], model: LabModel
              ) -> ReadWeight | None:
    """Run ``chain`` (stored side first) on ``arr`` with onnx's reference evaluator, checking
    that each node keeps the values."""
    narrow: np.dtype | None = arr.dtype if arr.dtype.kind == "f" else None
    step = qdtype = None
    scales: tuple[tuple[str, np.ndarray], ...] = ()
    for node in chain:
        if node.op_type == "Cast":
            to = node.attributes.get_int("to", 0)
            try:
                dst = np.dtype(ir.DataType(to).numpy())
            except (ValueError, TypeError):
                return None
            if dst not in _HOLDS.get(arr.dtype, ()):
                return None  # a narrowing or integer cast changes the values
        elif node.op_type == "DequantizeLinear":
            if arr.dtype.kind not in "iu" or step is not None or narrow is not None:
                return None
            scale = const_array(node.inputs[1], stored=True) if len(node.inputs) > 1 else None
            if scale is None or scale.dtype.kind != "f" or not scale.size or \
                    not np.isfinite(scale).all():
                return None
            step, qdtype = float(np.abs(scale.astype(np.float64)).max()), arr.dtype.name
            scales = tuple((v.name or "", const_array(v, stored=True)) for v in node.inputs[1:3]
                           if v is not None and v.name)
        out = _run(node, arr, model)
        if out is None:
            return None
        arr = out
        if node.op_type == "DequantizeLinear":
            narrow = None
    through = tuple(n.op_type for n in chain)
    if narrow is not None and (arr.dtype.kind != "f" or narrow.itemsize >= arr.dtype.itemsize):
        narrow = None
    return ReadWeight(name, arr, narrow, step, qdtype, scales, through)


def _run(node: ir.Node, arr: np.ndarray, model: LabModel) -> np.ndarray | None:
    """``node``'s first output given ``arr`` for input 0 and its stored other inputs."""
    import onnx  # on use: only a divergence's blame evaluates a chain
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    feeds = {proto.input[0]: arr}
    for i, v in enumerate(node.inputs[1:], 1):
        if v is not None and v.name:
            feeds[proto.input[i]] = const_array(v, stored=True)
    if not proto.output or not proto.output[0]:
        return None
    opset = model.ir.opset_imports.get("", 0) or model.ir.opset_imports.get("ai.onnx", 0)
    if node.op_type == "DequantizeLinear":
        # the evaluator implements it from opset 19 on, which computes the integer inputs of
        # opsets 10 and 13 alike (19 adds float8 inputs)
        opset = max(opset, 19)
    try:
        graph = onnx.helper.make_graph(
            [proto], "weight",
            [onnx.helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(a.dtype),
                                                a.shape) for k, a in feeds.items()],
            [onnx.helper.make_empty_tensor_value_info(proto.output[0])])
        m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        with np.errstate(all="ignore"):
            out = ReferenceEvaluator(m).run([proto.output[0]], feeds)[0]
    except Exception:  # noqa: BLE001 - a hostile or unsupported node: no weight to compare
        return None
    return np.asarray(out)
