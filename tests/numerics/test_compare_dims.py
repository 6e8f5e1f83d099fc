"""compare() sizes the feeds by the reference's dims, through either door, against candidates
that are static (onnxsim fixed the input shapes) or name their dims otherwise."""

from __future__ import annotations

import numpy as np
import onnx
import onnxsim
import pytest
from expr_models import DIMS, optimum_decoder, with_batch_named

import onnx_lab
from onnx_lab.errors import DimError


def _static(past: int) -> onnx.ModelProto:
    shapes = {"input_ids": [1, 3], "position_ids": [1, 3], "attention_mask": [1, past + 3]}
    for i in range(2):
        for k in ("key", "value"):
            shapes[f"past_key_values.{i}.{k}"] = [1, 2, past, 16]
    out, ok = onnxsim.simplify(optimum_decoder(), overwrite_input_shapes=shapes)
    assert ok
    return out


@pytest.fixture(scope="module")
def ref():
    return onnx_lab.open(optimum_decoder(), dims=DIMS)


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    path = tmp_path_factory.mktemp("static") / "static.onnx"
    onnx.save(_static(4), path)
    return str(path)


def _same_feeds(a, b):
    assert len(a.feeds) == len(b.feeds) == 1
    fa, fb = a.feeds[0], b.feeds[0]
    assert set(fa) == set(fb)
    for k in fa:
        np.testing.assert_array_equal(fa[k], fb[k])


def test_both_doors_compare_a_static_candidate_by_the_references_dims(ref, static):
    a = onnx_lab.compare(ref, static)
    b = ref.compare(static)
    assert a.passed and b.passed
    _same_feeds(a, b)
    assert a.feeds[0]["attention_mask"].shape == (1, 7)
    assert a.feeds[0]["past_key_values.0.key"].shape == (1, 2, 4, 16)
    assert len(a.layers) > 0 and a.layers["passed"].all()


@pytest.mark.parametrize("door", ["function", "method"])
def test_a_candidate_naming_its_batch_otherwise_takes_the_references_feeds(ref, door):
    cand = with_batch_named(optimum_decoder(), "batch_size")
    c = onnx_lab.compare(ref, cand) if door == "function" else ref.compare(cand)
    assert c.passed and c.feeds[0]["attention_mask"].shape == (1, 7)
    # a candidate Lab with its own dims under other names
    cand_lab = onnx_lab.open(cand, dims={"batch_size": 1, "past_sequence_length": 4,
                                         "sequence_length": 3})
    c = onnx_lab.compare(ref, cand_lab) if door == "function" else ref.compare(cand_lab)
    assert c.passed


def test_a_static_candidate_fixed_to_other_sizes_is_a_clear_dim_error(ref):
    other = _static(5)
    for call in (lambda: onnx_lab.compare(ref, other), lambda: ref.compare(other)):
        with pytest.raises(DimError, match=r"candidate: .*attention_mask.*reference's dims "
                                           r"\(batch=1, past_sequence_length=4"):
            call()
    # the dims that fit the candidate compare it
    assert onnx_lab.compare(ref, other, dims={"past_sequence_length": 5}).passed
    assert ref.compare(other, dims={**DIMS, "past_sequence_length": 5}).passed


def test_without_dims_a_static_candidate_sizes_the_feeds(static, tmp_path):
    path = tmp_path / "dec.onnx"
    onnx.save(optimum_decoder(), path)
    c = onnx_lab.compare(str(path), static)
    assert c.passed and c.feeds[0]["attention_mask"].shape == (1, 7)


def test_a_dim_no_side_has_is_refused_with_the_close_name(ref, static):
    with pytest.raises(DimError, match="reference: Unknown dim name 'past_sequence_lenght'.*"
                                       "Did you mean 'past_sequence_length'"):
        onnx_lab.compare(ref, static, dims={"past_sequence_lenght": 4})


def test_a_wrong_static_candidate_still_fails(ref):
    bad = _static(4)
    w = next(t for t in bad.graph.initializer if t.name == "lm_head")
    arr = onnx.numpy_helper.to_array(w).copy()
    arr[0, 0] += 1.0
    w.CopyFrom(onnx.numpy_helper.from_array(arr, "lm_head"))
    c = onnx_lab.compare(ref, bad)
    assert not c.passed
    assert not c.outputs.set_index("tensor").loc["logits", "passed"]
    assert c.outputs.set_index("tensor").loc["present.1.value", "passed"]
