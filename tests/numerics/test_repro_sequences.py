"""The repro of a divergence at a node that makes a sequence: local_check turned the
reference's sequence into one numpy array (elements of different shapes raised ValueError,
equal ones became a tensor the script compared with onnxruntime's list), and repro.py's
element-by-element compare raised on elements of another shape or with no element."""

from __future__ import annotations

import numpy as np
import pytest
from numerics_helpers import run_repro
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def _split(split=None, swap=False):
    """X -> SplitToSequence(split, axis 1) -> ConcatFromSequence -> Y (or, with ``swap``, a
    SequenceConstruct of two inputs, in the other order when ``split`` is None)."""
    if split is None:
        a, b = ("B", "A") if swap else ("A", "B")
        nodes = [helper.make_node("SequenceConstruct", [a, b], ["seq"], name="split"),
                 helper.make_node("ConcatFromSequence", ["seq"], ["Y"], name="cat", axis=1)]
        ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in "AB"]
        inits = []
    else:
        nodes = [helper.make_node("SplitToSequence", ["X", "s"], ["seq"], name="split", axis=1),
                 helper.make_node("ConcatFromSequence", ["seq"], ["Y"], name="cat", axis=1)]
        ins = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4])]
        inits = [numpy_helper.from_array(np.array(split, np.int64), "s")]
    g = helper.make_graph(nodes, "g", ins,
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("ref, cand", [(([2, 2],), ([1, 3],)), (([2, 2],), ([0, 4],)),
                                       ((None, False), (None, True))],
                         ids=["other shapes", "an empty element", "same shapes"])
def test_repro_of_a_sequence_divergence_runs(tmp_path, ref, cand):
    lab = onnx_lab.open(_split(*ref))
    c = onnx_lab.compare(lab, onnx_lab.open(_split(*cand)))
    assert c.first_divergence["node_id"] == "split"
    r = lab.repro(c, tmp_path / "repro")
    assert isinstance(r.check.expected["seq"], list)  # a sequence, not one tensor
    out = run_repro(r.folder)
    assert "'seq': 0 keys or items on one side only" in out
    assert "max_abs 0 " not in out


def _concat(axis):
    s = numpy_helper.from_array(np.array([2, 2], np.int64), "s")
    nodes = [helper.make_node("SplitToSequence", ["X", "s"], ["seq"], name="split", axis=1),
             helper.make_node("ConcatFromSequence", ["seq"], ["Y"], name="cat", axis=axis)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                     [2, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [s])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_repro_of_a_node_fed_a_sequence_that_changes_a_shape_runs(tmp_path):
    # the cut node's input is a sequence: it had no type (onnxruntime refused node.onnx);
    # its output has another shape: the script's subtraction raised a broadcast error
    lab = onnx_lab.open(_concat(1))
    c = onnx_lab.compare(lab, onnx_lab.open(_concat(0)))
    assert c.first_divergence["node_id"] == "cat"
    r = lab.repro(c, tmp_path / "repro")
    out = run_repro(r.folder)
    assert "'Y': shape [4, 2], expected [2, 4]" in out
