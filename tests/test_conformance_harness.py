"""The conformance harness's own pieces (scripts/conformance.py), in process: the plain
onnxruntime run of typed values, the dims and verification inputs a case gives, and a few
cases that were refused before (bfloat16 / float8 / int4 values, a label that indexes a
Gather, a sequence with a named element dim) now ``ok`` — with a wrong expected output still
reported as ``wrong``."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import conformance  # noqa: E402

CASES = ("test_cast_FLOAT_to_BFLOAT16", "test_cast_FLOAT_to_FLOAT8E4M3FN",
         "test_cast_FLOAT_to_INT4", "test_sequence_map_add_1_sequence_1_tensor",
         "test_sce_none_weights_expanded")


@pytest.fixture(scope="module")
def cases():
    return {c["id"]: c for c in conformance.collect(include_folders=False) if c["id"] in CASES}


def test_ort_run_returns_ml_dtypes():
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=T.INT4)], "g",
                          [helper.make_tensor_value_info("x", T.BFLOAT16, [3])],
                          [helper.make_tensor_value_info("y", T.INT4, [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    (y,) = conformance.ort_run(m, {"x": np.array([1, -2, 3], ml_dtypes.bfloat16)})
    assert y.dtype == np.dtype(ml_dtypes.int4) and y.astype(int).tolist() == [1, -2, 3]


def test_case_dims_and_verification_inputs():
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(T.FLOAT, ["N"]))
    g = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g",
                          [helper.make_value_info("s", seq),
                           helper.make_tensor_value_info("x", T.FLOAT, ["M", 2])],
                          [helper.make_tensor_value_info("n", T.INT64, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"s": [np.zeros(5, np.float32)], "x": np.zeros((3, 2), np.float32)}
    assert conformance.case_dims(m, [feeds]) == {"N": 5, "M": 3}
    assert conformance._verify_feeds(m, [feeds]) == {"feeds": [feeds]}
    assert conformance._verify_feeds(m, [{"s": feeds["s"]}]) is True  # an input missing


@pytest.mark.slow  # collects onnx's conformance cases and runs each round trip
@pytest.mark.parametrize("cid", CASES)
def test_formerly_refused_cases_are_ok(cid, cases, tmp_path):
    row = conformance.run_case(cases[cid], tmp_path)
    assert row["class"] == "ok", row


@pytest.mark.slow  # collects onnx's conformance cases and runs each round trip
def test_a_wrong_expected_output_is_still_wrong(cases, tmp_path):
    case = dict(cases["test_cast_FLOAT_to_BFLOAT16"])
    model, sets, rtol, atol = conformance.materialize(case)
    feeds, outs = sets[0]
    bad = [(o.astype(np.float32) * 1.5 + 1).astype(o.dtype) for o in outs]
    ok, why = conformance.all_match(bad, conformance.ort_run(model, feeds), rtol, atol)
    assert not ok and "max abs err" in why
