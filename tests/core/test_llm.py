"""core/llm.py: the KV-cache roles of a decoder's inputs and outputs, paired once for the
generation profiler and the LLM comparison; unpairable caches get one CacheError naming them."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_lab.core.llm import cache_key, decoder_io, require_decoder_io
from onnx_lab.core.load import load_model
from onnx_lab.core.source import load_source
from onnx_lab.errors import CacheError


def _decoder(past: list[str], present: list[str], *, position_ids: bool = False,
             kv_shape=("batch", 2, "past_len", 8), out_shape=("batch", 2, "total_len", 8)):
    """A toy decoder: each present is Concat(past, past-shaped new state) along the length;
    logits come from input_ids. Names and shapes are what the pairing reads."""
    fl = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch", "total_len"])]
    if position_ids:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                    ["batch", "seq"]))
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=fl),
             helper.make_node("Unsqueeze", ["ids_f", "axis2"], ["logits"])]
    axis = len(kv_shape) - 2
    for p, q in zip(past, present, strict=False):
        inputs.append(helper.make_tensor_value_info(p, fl, list(kv_shape)))
        nodes.append(helper.make_node("Concat", [p, p], [q], axis=axis))
    outputs = [helper.make_tensor_value_info("logits", fl, ["batch", "seq", 1])]
    outputs += [helper.make_tensor_value_info(q, fl, list(out_shape)) for q in present]
    for p in past[len(present):]:
        inputs.append(helper.make_tensor_value_info(p, fl, list(kv_shape)))
    for q in present[len(past):]:
        nodes.append(helper.make_node("Identity", ["ids_f"], [q]))
        outputs.append(helper.make_tensor_value_info(q, fl, None))
    graph = helper.make_graph(nodes, "toy", inputs, outputs,
                              [helper.make_tensor("axis2", TensorProto.INT64, [1], [2])])
    return load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _names(kind_names, layers=2, past="past_key_values.{i}.{k}", present="present.{i}.{k}"):
    return ([past.format(i=i, k=k) for i in range(layers) for k in kind_names],
            [present.format(i=i, k=k) for i in range(layers) for k in kind_names])


@pytest.mark.parametrize("name, key", [
    ("past_key_values.3.value", ("past", 3, "value")),
    ("present.0.key", ("present", 0, "key")),
    ("present_0", ("present", 0, "kv")),
    ("past_key_5", ("past", 5, "key")),
    ("present_value.12", ("present", 12, "value")),
    ("past_key_values_key_cache_0", ("past", 0, "key")),  # torch.export's flat DynamicCache
    ("logits", None), ("input_ids", None), ("past_sequence_length", None),
    ("pastry.0.key", None),
    ("past_key_values.2.encoder.value", ("past", 2, "cross.value")),
    ("present.2.decoder.key", ("present", 2, "key")),
])
def test_cache_key(name, key):
    assert cache_key(name) == key


def test_tiny_llm_roles_and_a_real_prefill_and_decode():
    model = load_source("sample:tiny_llm")
    io = decoder_io(model)
    assert io.num_layers == 2 and io.naming == "past_key_values/present"
    assert [(s.layer, s.kind, s.past, s.present) for s in io.cache[:2]] == [
        (0, "key", "past_key_values.0.key", "present.0.key"),
        (0, "value", "past_key_values.0.value", "present.0.value")]
    assert (io.input_ids, io.attention_mask, io.position_ids, io.logits) == \
        ("input_ids", "attention_mask", None, "logits")
    assert (io.batch_dim, io.sequence_dim, io.past_dim, io.total_dim) == \
        ("batch_size", "sequence_length", "past_sequence_length", "total_sequence_length")
    assert io.cache[0].past_axis == 2 and io.other_inputs == ()
    sess = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    past = io.empty_cache(batch=1, dims={"kv_cache_dim": 16})
    assert past["past_key_values.1.value"].shape == (1, 2, 0, 16)
    feeds = io.step_feeds(np.array([[5, 6, 7]]), past)
    assert feeds["attention_mask"].tolist() == [[1, 1, 1]]
    out = dict(zip(names, sess.run(None, feeds), strict=True))
    feeds = io.step_feeds(np.array([[8]]), io.next_past(out))
    assert feeds["attention_mask"].shape == (1, 4)
    out = dict(zip(names, sess.run(None, feeds), strict=True))
    assert out["present.0.key"].shape == (1, 2, 4, 16)


def test_optimum_naming_with_position_ids():
    past, present = _names(("key", "value"))
    io = decoder_io(_decoder(past, present, position_ids=True))
    assert io.position_ids == "position_ids" and io.past_dim == "past_len"
    cache = io.empty_cache(batch=2)
    feeds = io.step_feeds(np.array([[1, 2], [3, 4]]), cache)
    assert feeds["position_ids"].tolist() == [[0, 1], [0, 1]]
    grown = {n: np.zeros((2, 2, 5, 8), np.float32) for n in cache}
    feeds = io.step_feeds(np.array([[9], [9]]), grown)
    assert feeds["position_ids"].tolist() == [[5], [5]]
    assert feeds["attention_mask"].shape == (2, 6) and feeds["position_ids"].dtype == np.int64


def test_one_tensor_per_layer_holding_key_and_value():
    past, present = _names(("",), layers=3, past="past_{i}", present="present_{i}")
    io = decoder_io(_decoder(past, present, kv_shape=(2, "batch", 2, "past_len", 8),
                             out_shape=(2, "batch", 2, "total_len", 8)))
    assert [s.kind for s in io.cache] == ["kv"] * 3 and io.naming == "past/present"
    assert io.cache[0].past_axis == 3
    assert io.empty_cache(batch=1)["past_1"].shape == (2, 1, 2, 0, 8)


def test_a_model_without_a_cache():
    model = load_source("sample:transformer_block")
    assert decoder_io(model) is None
    with pytest.raises(CacheError, match="no KV-cache inputs.*'x'"):
        require_decoder_io(model)


def test_an_attention_block_with_the_ops_own_past_inputs_is_named_as_such():
    # "no KV-cache inputs (its inputs are ['x', 'past_key', 'past_value'])" read as a
    # contradiction: they are not named per layer, and a block has no tokens
    g = helper.make_graph(
        [helper.make_node("Concat", ["past_key", "x"], ["present_key"], axis=2),
         helper.make_node("Concat", ["past_value", "x"], ["present_value"], axis=2)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, "p", 4])
         for n in ("x", "past_key", "past_value")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, "t", 4])
         for n in ("present_key", "present_value")])
    model = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(CacheError, match=r"'past_key', 'past_value' are not named per layer") \
            as e:
        require_decoder_io(model)
    assert "a single attention block" in e.value.fix


@pytest.mark.parametrize("drop_past, drop_present, match", [
    ([], ["present.1.value"], r"no present output for 'past_key_values\.1\.value'"),
    (["past_key_values.0.key"], [], r"no past input for 'present\.0\.key'"),
    (["past_key_values.1.value"], ["present.1.value"], r"layer 1 has cache tensors of kinds "
                                                        r"\['key'\]"),
])
def test_unpairable_caches_name_the_tensors(drop_past, drop_present, match):
    past, present = _names(("key", "value"))
    past = [p for p in past if p not in drop_past]
    present = [p for p in present if p not in drop_present]
    # A past without its present is still an input; a present without its past an output.
    model = _decoder(past, present) if len(past) == len(present) else None
    if model is None:
        fl = TensorProto.FLOAT
        inputs = [helper.make_tensor_value_info(p, fl, ["b", 2, "p", 8]) for p in past]
        inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]))
        nodes = [helper.make_node("Identity", [past[0]], [q]) for q in present]
        outputs = [helper.make_tensor_value_info(q, fl, None) for q in present]
        model = load_model(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                                             opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(CacheError, match=match):
        decoder_io(model)


def test_two_tensors_for_one_slot():
    past = ["past_key_values.0.key", "past.0.key", "past_key_values.0.value"]
    present = ["present.0.key", "present.0.value"]
    fl = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(p, fl, ["b", 2, "p", 8]) for p in past]
    nodes = [helper.make_node("Identity", [past[0]], [q]) for q in present]
    outputs = [helper.make_tensor_value_info(q, fl, None) for q in present]
    model = load_model(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                                         opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(CacheError, match=r"2 cache inputs for layer 0 key: "
                                         r"'past_key_values\.0\.key', 'past\.0\.key'"):
        decoder_io(model)


def test_genai_built_model(genai_model):
    io = decoder_io(load_source(genai_model("fp32")))
    assert io.num_layers >= 1 and io.past_dim == "past_sequence_length"
    assert io.cache[0].shape[-1] == "kv_cache_dim"


def test_past_like_inputs_without_present_outputs_are_not_a_decoder():
    """A streaming model's state input named past_*: no KV cache, no false alarm in cost; asking
    for a decoder names what is missing."""
    fl = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "past_state_0"], ["y"])], "g",
        [helper.make_tensor_value_info("x", fl, [1, 4]),
         helper.make_tensor_value_info("past_state_0", fl, [1, 4])],
        [helper.make_tensor_value_info("y", fl, [1, 4])])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert decoder_io(model) is None
    with pytest.raises(CacheError, match="cache inputs 'past_state_0' but no cache outputs"):
        require_decoder_io(model)
    from onnx_lab.analysis.cost import cost

    c = cost(model)
    assert c.kv_cache is None and not any("KV cache" in n for n in c.notes)


def test_encoder_decoder_caches():
    """optimum's Whisper/T5 decoder with past: the decoder's cache is paired, the encoder's
    (cross-attention) cache has no present output and is an input to feed as is."""
    past = [f"past_key_values.{i}.{part}.{k}" for i in range(2) for part in ("decoder", "encoder")
            for k in ("key", "value")]
    present = [f"present.{i}.decoder.{k}" for i in range(2) for k in ("key", "value")]
    fl = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(p, fl, ["b", 2, "past", 8]) for p in past]
    nodes = [helper.make_node("Identity", [p.replace("present", "past_key_values")], [p])
             for p in present]
    outputs = [helper.make_tensor_value_info(q, fl, ["b", 2, "past", 8]) for q in present]
    model = load_model(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                                         opset_imports=[helper.make_opsetid("", 17)]))
    io = decoder_io(model)
    assert [s.present for s in io.cache] == present
    assert set(io.other_inputs) == {p for p in past if ".encoder." in p}
