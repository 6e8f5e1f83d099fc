"""Derived dims (core/derived.py) and zero-length dims: a decoder LLM opens, feeds, runs and
costs with only batch and lengths given, an empty KV cache (past length 0) included."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.core.derived import derived_dims, with_derived
from onnx_lab.core.load import load_model
from onnx_lab.core.source import load_source
from onnx_lab.errors import DimError
from onnx_lab.runtime.feeds import make_feeds

LENGTHS = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0}


def _run(lab_or_path, feeds):
    path = getattr(lab_or_path, "path", lab_or_path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def test_head_size_from_the_attention_and_total_from_the_lengths():
    model = load_source("sample:tiny_llm")
    d = derived_dims(model)
    assert list(d) == ["kv_cache_dim"] and d["kv_cache_dim"].value == 16
    assert d["kv_cache_dim"].kind == "graph"
    assert "GroupQueryAttention" in d["kv_cache_dim"].source
    assert "128 / (4 + 2·2 kv) heads" in d["kv_cache_dim"].source
    d = derived_dims(model, {"sequence_length": 3, "past_sequence_length": 5})
    assert d["total_sequence_length"].value == 8 and d["total_sequence_length"].kind == "lengths"
    # Given dims win, and only what is missing is derived.
    assert with_derived(model, {"total_sequence_length": 9, "sequence_length": 3,
                                "past_sequence_length": 5})["total_sequence_length"] == 9
    assert "kv_cache_dim" not in derived_dims(model, {"kv_cache_dim": 16})


@pytest.mark.parametrize("past", [0, 5])
def test_prefill_and_decode_feeds_from_batch_and_lengths_only(past):
    seq = 8 if past == 0 else 1
    lab = onnx_lab.open("sample:tiny_llm", dims={"batch_size": 1, "sequence_length": seq,
                                                 "past_sequence_length": past})
    feeds = make_feeds(lab)
    assert feeds["past_key_values.0.key"].shape == (1, 2, past, 16)
    assert feeds["attention_mask"].shape == (1, past + seq)
    out = _run(lab, feeds)
    assert out["logits"].shape == (1, seq, 256)
    assert out["present.1.value"].shape == (1, 2, past + seq, 16)
    s = lab.summary()
    assert s["derived_dims"]["kv_cache_dim"]["value"] == 16
    assert s["derived_dims"]["total_sequence_length"]["value"] == past + seq
    assert "Derived dims" in s._repr_html_() and "kv_cache_dim = 16" in s._repr_html_()
    shapes = lab.tensors.set_index("name")["shape"]
    assert list(shapes["present.0.key"]) == [1, 2, past + seq, 16]


def test_zero_length_dims_and_negative_ones():
    lab = onnx_lab.open("sample:tiny_llm", dims=LENGTHS)
    assert lab.dims["past_sequence_length"] == 0
    c = lab.cost()
    assert c.total["flops"] > 0
    with pytest.raises(DimError, match="'past_sequence_length' must be an int >= 0, got -1"):
        onnx_lab.open("sample:tiny_llm", dims={**LENGTHS, "past_sequence_length": -1})
    # A zero in a whole input shape is accepted too; a negative one is not.
    onnx_lab.open("sample:tiny_llm", shapes={"past_key_values.0.key": [1, 2, 0, 16]})
    with pytest.raises(DimError, match="dim 2 must be an int >= 0, got -2"):
        onnx_lab.open("sample:tiny_llm", shapes={"past_key_values.0.key": [1, 2, -2, 16]})


def test_a_given_dim_that_contradicts_the_graph_is_refused_by_name():
    with pytest.raises(DimError, match=r"'kv_cache_dim' is 16 in this model "
                                       r"\(GroupQueryAttention .*\), not 32"):
        onnx_lab.open("sample:tiny_llm", dims={**LENGTHS, "kv_cache_dim": 32})
    assert onnx_lab.open("sample:tiny_llm", dims={**LENGTHS, "kv_cache_dim": 16})


def test_a_model_without_derivable_dims_derives_nothing():
    assert derived_dims(load_source("sample:transformer_block")) == {}
    assert derived_dims(load_source("sample:convnet")) == {}


def _mha_decoder(heads: int = 4, hidden: int = 32) -> onnx.ModelProto:
    """com.microsoft.MultiHeadAttention with past_key/past_value [batch, heads, past, head]
    whose heads and head size are symbolic in the declared inputs."""
    fl = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", fl, [hidden, hidden],
                           rng.standard_normal(hidden * hidden).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["q"]),
             helper.make_node("MultiHeadAttention", ["q", "q", "q", "", "", "", "past_key",
                                                     "past_value"],
                              ["y", "present_key", "present_value"], domain="com.microsoft",
                              num_heads=heads, name="mha")]
    cache = ["batch", "heads", "past", "head"]
    graph = helper.make_graph(
        nodes, "mha",
        [helper.make_tensor_value_info("x", fl, ["batch", "seq", hidden]),
         helper.make_tensor_value_info("past_key", fl, cache),
         helper.make_tensor_value_info("past_value", fl, cache)],
        [helper.make_tensor_value_info("y", fl, ["batch", "seq", hidden]),
         helper.make_tensor_value_info("present_key", fl, ["batch", "heads", "total", "head"]),
         helper.make_tensor_value_info("present_value", fl, ["batch", "heads", "total", "head"])],
        [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def test_multi_head_attention_heads_and_head_size_and_onnxruntime_agrees(tmp_path):
    path = tmp_path / "mha.onnx"
    onnx.save(_mha_decoder(), path)
    d = derived_dims(load_model(path))
    assert (d["heads"].value, d["head"].value) == (4, 8)
    assert "query width 32 / 4 heads" in d["head"].source
    lab = onnx_lab.open(path, dims={"batch": 2, "seq": 3, "past": 0})
    out = _run(lab, make_feeds(lab))
    assert out["present_key"].shape == (2, 4, 3, 8)


def test_concat_of_the_cache_with_a_fixed_width_tensor(tmp_path):
    fl = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Concat", ["past_key_values.0.key", "new"], ["present.0.key"],
                          axis=2, name="cat")],
        "cat", [helper.make_tensor_value_info("past_key_values.0.key", fl,
                                              ["b", 2, "past", "head_dim"]),
                helper.make_tensor_value_info("new", fl, ["b", 2, "seq", 8])],
        [helper.make_tensor_value_info("present.0.key", fl, ["b", 2, "total", "head_dim"])])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    d = derived_dims(model)
    assert d["head_dim"].value == 8 and "Concat 'cat'" in d["head_dim"].source


def _save_cache_passthrough(path) -> None:
    """A one-layer cache whose head size no node fixes (past -> Identity -> present)."""
    fl = TensorProto.FLOAT
    cache = ["batch_size", "kv_heads", "past_sequence_length", "kv_cache_dim"]
    graph = helper.make_graph(
        [helper.make_node("Identity", [f"past_key_values.0.{k}"], [f"present.0.{k}"])
         for k in ("key", "value")],
        "g", [helper.make_tensor_value_info(f"past_key_values.0.{k}", fl, cache)
              for k in ("key", "value")],
        [helper.make_tensor_value_info(f"present.0.{k}", fl, cache) for k in ("key", "value")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_genai_config_beside_the_model(tmp_path):
    """A cache whose head size no node fixes: genai_config.json gives it."""
    _save_cache_passthrough(tmp_path / "model.onnx")
    assert derived_dims(load_model(tmp_path / "model.onnx")) == {}
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"decoder": {
        "filename": "model.onnx", "head_size": 8, "num_key_value_heads": 2}}}))
    d = derived_dims(load_model(tmp_path / "model.onnx"))
    assert (d["kv_cache_dim"].value, d["kv_heads"].value) == (8, 2)
    assert d["kv_cache_dim"].kind == "config" and "genai_config.json" in d["kv_cache_dim"].source
    # A config of another file in the folder does not apply; an unreadable one is skipped.
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"decoder": {
        "filename": "other.onnx", "head_size": 8}}}))
    assert derived_dims(load_model(tmp_path / "model.onnx")) == {}
    (tmp_path / "genai_config.json").write_text("{not json")
    assert derived_dims(load_model(tmp_path / "model.onnx")) == {}


def test_genai_config_true_is_not_a_count(tmp_path):
    """JSON's true is an int to Python: a head_size of true fixed the cache's dim to 1, a
    context_length of true made the model's maximum 1 token ('a maximum of True')."""
    from onnx_lab.core.llm import max_context

    _save_cache_passthrough(tmp_path / "model.onnx")
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {
        "context_length": True, "decoder": {"head_size": True, "num_key_value_heads": 2}}}))
    model = load_model(tmp_path / "model.onnx")
    assert {k: d.value for k, d in derived_dims(model).items()} == {"kv_heads": 2}
    assert max_context(model) is None

@pytest.mark.parametrize("config", [{"model": "<img src=x onerror=alert(1)>"}, {"model": [1]},
                                    {"model": {"decoder": "model.onnx"}},
                                    {"model": {"decoder": [8, 2]}}, ["model"]])
def test_genai_config_of_another_shape_is_skipped(tmp_path, config):
    """A genai_config.json beside the model is a file of whoever wrote the folder: a 'model'
    or 'model.decoder' that is not an object raised AttributeError from open() of any
    model with a symbolic dim there; it is skipped like an unreadable one."""
    fl = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", fl, ["batch", 4])],
                              [helper.make_tensor_value_info("y", fl, ["batch", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "model.onnx")
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    model = load_model(tmp_path / "model.onnx")
    assert derived_dims(model) == {}
    lab = onnx_lab.open(tmp_path / "model.onnx", dims={"batch": 2})
    assert lab.summary()["num_nodes"] == 1

@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_genai_built_model_opens_feeds_runs_and_costs(genai_model, precision):
    path = genai_model(precision)
    lab = onnx_lab.open(path, dims=LENGTHS)
    assert lab.summary()["derived_dims"]["kv_cache_dim"]["value"] == 16
    feeds = make_feeds(lab)
    assert feeds["past_key_values.3.value"].shape == (1, 2, 0, 16)
    assert _run(lab, feeds)["logits"].shape == (1, 8, 512)
    assert lab.cost().total["flops"] > 0


def test_group_query_attention_with_separate_key_and_value(tmp_path):
    """Q, K and V as three inputs (a decoder fed embeddings): the head size is the key's
    width / kv_num_heads, the total length past + new; onnxruntime runs with those sizes."""
    fl = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    nh, kvh, head, d = 4, 2, 8, 32

    def w(name, n):
        return helper.make_tensor(name, fl, [d, n], rng.standard_normal(d * n).astype(np.float32))

    ones = helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
        "one", TensorProto.INT64, [1], [1]))
    nodes = [ones,
             helper.make_node("MatMul", ["inputs_embeds", "wq"], ["q"]),
             helper.make_node("MatMul", ["inputs_embeds", "wk"], ["k"]),
             helper.make_node("MatMul", ["inputs_embeds", "wv"], ["v"]),
             helper.make_node("ReduceSum", ["mask", "one"], ["len"], keepdims=0),
             helper.make_node("Sub", ["len", "one"], ["len1"]),
             helper.make_node("Cast", ["len1"], ["seqlens"], to=TensorProto.INT32),
             helper.make_node("Shape", ["mask"], ["mshape"], start=1, end=2),
             helper.make_node("Squeeze", ["mshape"], ["tot64"]),
             helper.make_node("Cast", ["tot64"], ["total"], to=TensorProto.INT32),
             helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_key_values.0.key", "past_key_values.0.value", "seqlens",
                                                      "total"],
                              ["y", "present.0.key", "present.0.value"], domain="com.microsoft", num_heads=nh,
                              kv_num_heads=kvh, name="gqa")]
    cache = ["batch", "kv_heads", "past", "head"]
    graph = helper.make_graph(
        nodes, "gqa",
        [helper.make_tensor_value_info("inputs_embeds", fl, ["batch", "seq", d]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "total_len"]),
         helper.make_tensor_value_info("past_key_values.0.key", fl, cache),
         helper.make_tensor_value_info("past_key_values.0.value", fl, cache)],
        [helper.make_tensor_value_info("y", fl, ["batch", "seq", nh * head]),
         helper.make_tensor_value_info("present.0.key", fl, ["batch", "kv_heads", "total_len", "head"]),
         helper.make_tensor_value_info("present.0.value", fl, ["batch", "kv_heads", "total_len", "head"])],
        [w("wq", nh * head), w("wk", kvh * head), w("wv", kvh * head)])
    path = tmp_path / "gqa.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.microsoft", 1)]),
              path)
    d_ = derived_dims(load_model(path))
    assert (d_["kv_heads"].value, d_["head"].value) == (kvh, head)
    assert "key width 16 / 2 kv heads" in d_["head"].source
    lab = onnx_lab.open(path, dims={"batch": 1, "seq": 3, "past": 4})
    out = _run(lab, make_feeds(lab))
    assert out["present.0.key"].shape == (1, kvh, 7, head)


def test_unresolved_dims_of_a_decoder_ask_only_for_batch_and_lengths():
    lab = onnx_lab.open("sample:tiny_llm")
    with pytest.raises(DimError) as e:
        lab.cost()
    msg = str(e.value)
    assert "'total_sequence_length' is past_sequence_length + sequence_length, filled in" in msg
    assert "'kv_cache_dim'" not in msg and "Choose the size" not in msg
    fix = "dims={'batch_size': 1, 'past_sequence_length': 0, 'sequence_length': 1}"
    assert fix in msg
    # Following the fix word for word works.
    assert onnx_lab.open("sample:tiny_llm", dims={"batch_size": 1, "past_sequence_length": 0,
                                                  "sequence_length": 1}).cost().total["flops"]
    rows = lab.check(load=False).set_index("message")
    assert any("the model determines it (16" in m for m in rows.index)
    assert any("past_sequence_length + sequence_length, filled in" in m for m in rows.index)
