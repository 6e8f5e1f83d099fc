"""Feeds for models whose input dims are expressions of other dims."""

from __future__ import annotations

import pytest
from expr_models import DIMS, TOTAL, optimum_decoder

import onnx_lab
from onnx_lab.errors import DimError
from onnx_lab.runtime.feeds import as_feed_list, make_feeds, resolve_input_shapes
from onnx_lab.runtime.session import make_session, run_session


def test_the_mask_is_sized_past_plus_new_and_the_model_runs():
    lab = onnx_lab.open(optimum_decoder(), dims=DIMS)
    feeds = make_feeds(lab)
    assert feeds["attention_mask"].shape == (1, 7) and (feeds["attention_mask"] == 1).all()
    assert feeds["input_ids"].shape == (1, 3)
    assert feeds["past_key_values.1.value"].shape == (1, 2, 4, 16)
    out = run_session(make_session(lab.model), feeds, ["logits", "present.0.key"],
                      what="the model")
    assert out["logits"].shape == (1, 3, 64) and out["present.0.key"].shape == (1, 2, 7, 16)
    # An empty cache (past 0) is a prefill: the mask is the new tokens only.
    assert make_feeds(lab, dims={"past_sequence_length": 0})["attention_mask"].shape == (1, 3)


def test_a_missing_length_is_asked_for_by_name_never_the_expression():
    model = optimum_decoder()
    with pytest.raises(DimError) as e:
        resolve_input_shapes(onnx_lab.open(model).model, {"batch": 1, "sequence_length": 3})
    msg = str(e.value)
    assert "'past_sequence_length' (used by attention_mask[1], past_key_values.0.key[2]" in msg
    assert f"'{TOTAL}'" not in msg and "'sequence_length'" not in msg
    assert e.value.dims == ["past_sequence_length"]


def test_given_feeds_are_checked_against_the_declared_shapes():
    lab = onnx_lab.open(optimum_decoder(), dims=DIMS)
    feeds = make_feeds(lab)
    assert as_feed_list(feeds, lab)[0]["attention_mask"].shape == (1, 7)
    with pytest.raises(DimError, match="a size cannot be negative"):
        make_feeds(onnx_lab.open(_minus_model()), dims={"seq": 2})


def _minus_model():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "minus",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq - 4"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq - 4"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cost_and_profile_size_the_model_by_the_evaluated_dims():
    lab = onnx_lab.open(optimum_decoder(), dims=DIMS)
    c = lab.cost()
    rows = c.nodes.set_index("node_id")
    # scores: [1, 2, 3, 16] x [1, 2, 16, 7] (the key grows to past + new = 7)
    assert int(rows.loc["h.0/scores", "macs"]) == 1 * 2 * 3 * 16 * 7
    assert int(rows.loc["h.1/context", "macs"]) == 1 * 2 * 3 * 7 * 16
    assert c.kv_cache is not None and c.kv_cache["context"] == 7
    longer = lab.cost(dims={"past_sequence_length": 8})
    assert int(longer.nodes.set_index("node_id").loc["h.0/scores", "macs"]) == 2 * 3 * 16 * 11
    p = lab.profile(runs=3, warmup=1, providers="cpu", progress=False)
    assert p.latency_stats is not None and len(p.ops) > 0
