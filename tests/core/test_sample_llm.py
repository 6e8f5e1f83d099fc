"""``sample:tiny_llm`` and ``sample:tiny_llm_int4``: onnxruntime-genai's decoder layout, built by
code, runnable in onnxruntime for a prefill (empty cache) and decode steps, and behaving like a
language model (peaked logits, greedy tokens that move)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnx_lab import samples
from onnx_lab.core._sample_llm import TINY_LLM

LAYERS, KVH, HD, VOCAB = (TINY_LLM["num_layers"], TINY_LLM["num_kv_heads"],
                          TINY_LLM["head_size"], TINY_LLM["vocab_size"])


def _session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(str(samples.path(name)), providers=["CPUExecutionProvider"])


def _step(sess, ids: np.ndarray, past: dict, total: int) -> dict:
    feeds = {"input_ids": ids, "attention_mask": np.ones((ids.shape[0], total), np.int64), **past}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _empty(batch: int = 1) -> dict:
    return {f"past_key_values.{i}.{k}": np.zeros((batch, KVH, 0, HD), np.float32)
            for i in range(LAYERS) for k in ("key", "value")}


def _greedy(sess, prompt: list[int], n: int) -> tuple[list[int], dict]:
    ids = np.array([prompt], np.int64)
    out = _step(sess, ids, _empty(), len(prompt))
    tokens = []
    for _ in range(n):
        tokens.append(int(out["logits"][0, -1].argmax()))
        past = {f"past_key_values.{i}.{k}": out[f"present.{i}.{k}"]
                for i in range(LAYERS) for k in ("key", "value")}
        out = _step(sess, np.array([[tokens[-1]]], np.int64), past, len(prompt) + len(tokens))
    return tokens, out


def test_genai_layout():
    m = samples.build("tiny_llm")
    # (onnx.checker refuses it, as it refuses genai's models: SimplifiedLayerNormalization is
    # an onnxruntime op registered in the default domain.)
    assert m.SerializeToString() == samples.build("tiny_llm").SerializeToString()
    ins = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
           for i in m.graph.input}
    assert ins["input_ids"] == ["batch_size", "sequence_length"]
    assert ins["attention_mask"] == ["batch_size", "total_sequence_length"]
    assert ins["past_key_values.1.value"] == ["batch_size", KVH, "past_sequence_length",
                                              "kv_cache_dim"]
    outs = [o.name for o in m.graph.output]
    assert outs[0] == "logits" and "present.1.value" in outs and len(outs) == 1 + 2 * LAYERS
    ops = {(n.domain, n.op_type) for n in m.graph.node}
    assert {("com.microsoft", "GroupQueryAttention"),
            ("com.microsoft", "SkipSimplifiedLayerNormalization"),
            ("", "SimplifiedLayerNormalization"), ("", "MatMul")} <= ops
    gqa = next(n for n in m.graph.node if n.op_type == "GroupQueryAttention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gqa.attribute}
    assert attrs["num_heads"] == TINY_LLM["num_heads"] and attrs["kv_num_heads"] == KVH
    assert attrs["do_rotary"] == 1


@pytest.mark.parametrize("name", ["tiny_llm", "tiny_llm_int4"])
def test_prefill_and_decode_run_in_onnxruntime(name):
    sess = _session(name)
    prompt = [5, 6, 7, 8, 9, 10]
    out = _step(sess, np.array([prompt], np.int64), _empty(), len(prompt))
    assert out["logits"].shape == (1, len(prompt), VOCAB)
    assert out["present.0.key"].shape == (1, KVH, len(prompt), HD)
    tokens, last = _greedy(sess, prompt, 8)
    assert last["present.1.value"].shape == (1, KVH, len(prompt) + 8, HD)
    assert np.isfinite(last["logits"]).all()
    # Behaves like an LM: not constant, mostly counting up from the prompt, not saturated.
    assert len(set(tokens)) >= 6
    assert tokens[0] == 11
    logits = out["logits"][0]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert 0.05 < p.max(-1).mean() < 0.95
    assert logits.std(-1).min() > 0.1


def test_decode_with_cache_equals_the_full_prefill():
    """The cache is a real cache: a decode step after a prefill gives the logits the
    whole sequence gives in one run."""
    sess = _session("tiny_llm")
    seq = [3, 40, 41, 42, 200, 17, 18]
    full = _step(sess, np.array([seq], np.int64), _empty(), len(seq))["logits"][0, -1]
    first = _step(sess, np.array([seq[:-1]], np.int64), _empty(), len(seq) - 1)
    past = {f"past_key_values.{i}.{k}": first[f"present.{i}.{k}"]
            for i in range(LAYERS) for k in ("key", "value")}
    step = _step(sess, np.array([seq[-1:]], np.int64), past, len(seq))["logits"][0, -1]
    np.testing.assert_allclose(step, full, rtol=1e-4, atol=1e-4)


def test_int4_is_made_by_onnxruntimes_quantizer():
    m = samples.build("tiny_llm_int4")
    nbits = [n for n in m.graph.node if n.op_type == "MatMulNBits"]
    assert len(nbits) == 5 * LAYERS + 1  # qkv, o, gate, up, down per layer + lm_head
    assert not [n for n in m.graph.node if n.op_type == "MatMul"]
    for n in nbits:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["bits"] == 4 and attrs["block_size"] == 32
    assert m.SerializeToString() == samples.build("tiny_llm_int4").SerializeToString()
    # Weight-only int4 drifts a little: same top-1 on most positions, not all logits equal.
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (2, 48)).astype(np.int64)
    a = _step(_session("tiny_llm"), ids, _empty(2), 48)["logits"]
    b = _step(_session("tiny_llm_int4"), ids, _empty(2), 48)["logits"]
    agree = (a.argmax(-1) == b.argmax(-1)).mean()
    assert agree > 0.8 and not np.allclose(a, b, atol=1e-3)
