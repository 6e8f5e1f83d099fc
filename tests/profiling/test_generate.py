"""profile_generation(): a real greedy loop on small decoders in the onnxruntime-genai and the
optimum layouts, prefill and decode tables, per-phase operator shares, memory beside the KV
cache, budgets and cancel, and one clear error for each bad input."""

from __future__ import annotations

import gc
import json
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from llm_models import gqa_decoder, unfused_decoder

import onnx_lab
from onnx_lab.errors import CacheError, DimError, InputError
from onnx_lab.profiling import GenerationProfile, profile_generation
from onnx_lab.profiling.generate import (
    GEN_COLUMNS,
    MAX_GENERATIONS,
    MEMORY_COLUMNS,
    PHASE_OP_COLUMNS,
    STATS_COLUMNS,
    STEP_COLUMNS,
)


def _reference_tokens(model: onnx.ModelProto, prompt: np.ndarray, n: int) -> list[int]:
    """Greedy tokens without the cache: every step recomputes the whole sequence."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ins = {i.name: i for i in sess.get_inputs()}
    seq = list(prompt)
    out = []
    for _ in range(n + 1):
        ids = np.array([seq], np.int64)
        f = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "position_ids" in ins:
            f["position_ids"] = np.arange(len(seq))[None]
        for name, i in ins.items():
            if name.startswith("past"):
                f[name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
        tok = int(sess.run(["logits"], f)[0][0, -1].argmax())
        out.append(tok)
        seq.append(tok)
    return out


@pytest.fixture(scope="module")
def gqa():
    return gqa_decoder()


@pytest.fixture(scope="module")
def unfused():
    return unfused_decoder()


@pytest.fixture(scope="module")
def gqa_prof(gqa):
    return profile_generation(gqa, prompt=[3, 5, 7, 9, 11, 13], new_tokens=10, runs=4, warmup=1,
                              providers="cpu", progress=False)


@pytest.mark.parametrize("which", ["gqa", "unfused"])
@pytest.mark.parametrize("io_binding", [True, False])
def test_the_loop_generates_what_recomputing_the_sequence_gives(which, io_binding, request):
    model = request.getfixturevalue(which)
    prompt = np.array([3, 5, 7, 9, 11, 13])
    g = profile_generation(model, prompt=prompt, new_tokens=10, runs=1, warmup=0,
                           profile_runs=0, providers="cpu", io_binding=io_binding,
                           progress=False)
    assert g.tokens.shape == (1, 11)
    assert g.tokens[0].tolist() == _reference_tokens(model, prompt, 10)
    assert g.prompt_ids.tolist() == [prompt.tolist()]


def test_tables_have_both_phases(gqa_prof):
    g = gqa_prof
    assert isinstance(g, GenerationProfile)
    assert list(g.steps.columns) == STEP_COLUMNS
    assert list(g.generations.columns) == GEN_COLUMNS
    assert list(g.latency_stats.columns) == STATS_COLUMNS
    assert list(g.ops.columns) == PHASE_OP_COLUMNS
    assert list(g.memory.columns) == MEMORY_COLUMNS
    # 1 warm-up + 4 timed generations (2 of them profiled), 11 runs each
    assert len(g.generations) == 5 and len(g.steps) == 5 * 11
    assert g.generations.warmup.tolist() == [True, False, False, False, False]
    assert g.generations.profiled.tolist() == [False, True, True, False, False]
    assert g.generations.complete.all() and (g.generations.decode_steps == 10).all()
    one = g.steps.loc[g.steps.generation == 1]
    assert one.phase.tolist() == ["prefill"] + ["decode"] * 10
    assert one.context.tolist() == [0] + list(range(6, 16))
    assert one.tokens_in.tolist() == [6] + [1] * 10
    assert (one.kv_cache_bytes.diff().iloc[1:] == one.kv_cache_bytes.iloc[1] // 7).all()
    st = g.latency_stats.set_index("phase")
    assert st.loc["prefill", "tokens"] == 6 and st.loc["decode", "tokens"] == 1
    # latency from the two unprofiled generations: 2 prefills, 20 decode steps
    assert st.loc["prefill", "runs"] == 2 and st.loc["decode", "runs"] == 20
    assert (st.latency_from == "unprofiled").all() and (st.stopped == "runs").all()
    assert st.loc["decode", "tokens_per_s"] == pytest.approx(1e3 / st.loc["decode", "p50_ms"])
    assert st.loc["prefill", "tokens_per_s"] == pytest.approx(
        6e3 / st.loc["prefill", "p50_ms"])
    assert st.loc["decode", "tokens_per_s_low"] <= st.loc["decode", "tokens_per_s"] \
        <= st.loc["decode", "tokens_per_s_high"]
    assert g.decode_ms_per_token == st.loc["decode", "p50_ms"]
    assert g.prefill_ms == st.loc["prefill", "p50_ms"]
    dec = g.samples("decode")
    assert len(dec) == 20 and np.median(dec) == pytest.approx(g.decode_ms_per_token)


def test_operator_shares_per_phase(gqa_prof, gqa):
    ops = gqa_prof.ops
    assert set(ops.phase) == {"prefill", "decode"}
    for _phase, df in ops.groupby("phase"):
        assert df.share.sum() == pytest.approx(1.0)
        # every decode step and every prefill runs both attention nodes once
        gqa_row = df.loc[df.op_type == "GroupQueryAttention"]
        assert gqa_row["count"].iloc[0] == 2 and gqa_row.calls.iloc[0] == pytest.approx(2.0)
    nodes = gqa_prof.nodes
    attn = nodes.loc[nodes.node_id == "layers.0/attn/GroupQueryAttention"]
    assert set(attn.phase) == {"prefill", "decode"} and attn.mapped.all()


def test_memory_beside_the_kv_cache(gqa_prof):
    m = gqa_prof.memory.iloc[0]
    # 2 layers x (key + value) x batch 1 x 2 kv heads x 16 head size x 4 bytes per token
    per_token = 2 * 2 * 2 * 16 * 4
    assert m.context == 16
    assert m.kv_cache_bytes == m.predicted_kv_cache_bytes == 16 * per_token
    assert m.peak_rss_bytes >= m.rss_before_bytes > 0
    assert m.weights_bytes > 0


def test_views_and_json(gqa_prof):
    d = gqa_prof.to_dict()
    json.dumps(d)  # JSON-ready
    assert [r["phase"] for r in d["latency"]] == ["prefill", "decode"]
    assert d["cache"]["pairs"][0] == ["past_key_values.0.key", "present.0.key"]
    assert d["cache"]["max_context"] == 64
    html = gqa_prof._repr_html_()
    assert "prefill" in html and "decode" in html and "tokens/s" in html
    fig = gqa_prof.plot()
    assert len(fig.axes) == 3
    assert "prefill" in repr(gqa_prof) and "tokens/s" in repr(gqa_prof)


def test_lab_facade_random_prompt_and_batch(tmp_path, gqa):
    path = tmp_path / "model.onnx"
    onnx.save(gqa, path)
    lab = onnx_lab.open(str(path))
    g = lab.profile_generation(prompt=5, new_tokens=3, batch=2, runs=1, warmup=0,
                               profile_runs=0, providers="cpu", progress=False)
    assert g.prompt_ids.shape == (2, 5) and g.tokens.shape == (2, 4)
    assert (g.prompt_ids < 64).all()  # below the vocabulary (the logits' last dim)
    # measured == the cost model's prediction (the façade's) at context 5 + 3
    assert g.memory.kv_cache_bytes.iloc[0] == 2 * 8 * (2 * 2 * 2 * 16 * 4) \
        == g.memory.predicted_kv_cache_bytes.iloc[0] == lab.kv_cache_bytes(8, batch=2)
    assert len(g.ops) == 0 and any("profile_runs=0" in n for n in g.notes)
    assert g.stats("decode").tokens_per_s == pytest.approx(2e3 / g.decode_ms_per_token)
    assert onnx_lab.profile_generation is profile_generation
    assert gc.isenabled()  # paused during each generation only


@pytest.mark.parametrize("names", [
    (("past_key.{i}", "past_value.{i}"), ("present_key.{i}", "present_value.{i}")),
    (("past_key_values_{i}_key", "past_key_values_{i}_value"),
     ("present_{i}_key", "present_{i}_value")),
])
def test_other_cache_naming(names):
    model = unfused_decoder(past_names=names[0], present_names=names[1])
    g = profile_generation(model, prompt=[1, 2, 3], new_tokens=4, runs=1, warmup=0,
                           profile_runs=0, providers="cpu", progress=False)
    assert [p for p, _ in g.layout.pairs] == [names[0][j].format(i=i) for i in range(2)
                                              for j in range(2)]
    assert g.tokens[0].tolist() == _reference_tokens(model, np.array([1, 2, 3]), 4)


def test_one_cache_tensor_per_layer():
    # past.{i} [2, batch, heads, past, head] holds key and value (older GPT-2 exports)
    model = unfused_decoder(combined=True)
    g = profile_generation(model, prompt=[5, 1, 4], new_tokens=4, runs=1, warmup=0,
                           profile_runs=0, providers="cpu", progress=False)
    assert g.layout.pairs == [("past.0", "present.0"), ("past.1", "present.1")]
    assert g.layout.seq_axis["past.0"] == 3
    assert g.tokens[0].tolist() == _reference_tokens(unfused_decoder(), np.array([5, 1, 4]), 4)
    assert g.memory.kv_cache_bytes.iloc[0] == 2 * 2 * 2 * 7 * 16 * 4


def test_positions_from_the_mask_without_position_ids():
    model = unfused_decoder(position_ids=False)
    g = profile_generation(model, prompt=[4, 2], new_tokens=5, runs=1, warmup=0,
                           profile_runs=0, providers="cpu", progress=False)
    assert "position_ids" not in g.layout.roles
    assert g.tokens[0].tolist() == _reference_tokens(model, np.array([4, 2]), 5)


@pytest.mark.slow
def test_budget_mode_stops_by_itself(gqa):
    g = profile_generation(gqa, prompt=4, new_tokens=4, budget_s=1.0, providers="cpu",
                           progress=False)
    st = g.latency_stats
    # a quiet machine can finish the generation cap inside the budget: a self-stop too,
    # but only with the cap really reached
    assert set(st.stopped) <= {"stable", "budget", "max_runs"}
    assert (st.runs[st.stopped == "max_runs"] >= MAX_GENERATIONS).all()
    assert g.budget_s == 1.0 and (st.runs > 0).all()
    assert (st.latency_from == "unprofiled").all()


@pytest.mark.slow
def test_budget_bounds_fixed_runs(gqa):
    g = profile_generation(gqa, prompt=4, new_tokens=4, runs=100_000, budget_s=0.5,
                           providers="cpu", progress=False)
    assert set(g.latency_stats.stopped) == {"budget"}
    assert 1 <= len(g.generations) < 100_000 and g.runs == 100_000


def test_cancel_returns_what_was_measured(gqa):
    ev = threading.Event()
    ticks = []

    def progress(done, total, label):
        ticks.append(done)
        if len(ticks) >= 3:
            ev.set()

    g = profile_generation(gqa, prompt=4, new_tokens=4, runs=1000, warmup=0,
                           profile_runs=1, providers="cpu", progress=progress, cancel=ev)
    assert g.cancelled and any("cancelled" in n for n in g.notes)
    assert 1 <= len(g.generations) < 1000


# ---------------------------------------------------------------------------- bad input
def test_prompt_longer_than_the_rotary_cache(gqa):
    with pytest.raises(InputError, match=r"65 tokens is longer .* maximum context of 64.*"
                                         r"'cos_cache' has 64 rows"):
        profile_generation(gqa, prompt=65, new_tokens=1, runs=1, providers="cpu")
    with pytest.raises(InputError, match=r"need a context of 70.*at most 4 new tokens"):
        profile_generation(gqa, prompt=60, new_tokens=10, runs=1, providers="cpu")
    # exactly at the limit: runs
    g = profile_generation(gqa, prompt=60, new_tokens=4, runs=1, warmup=0, profile_runs=0,
                           providers="cpu", progress=False)
    assert g.memory.context.iloc[0] == 64


def test_prompt_longer_than_the_position_table(unfused):
    with pytest.raises(InputError, match=r"'wpe' has 64 rows \(position table indexed by 'position_ids'"):
        profile_generation(unfused, prompt=80, new_tokens=1, runs=1, providers="cpu")


def test_genai_config_context_length(tmp_path, gqa):
    path = tmp_path / "model.onnx"
    onnx.save(gqa, path)
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"context_length": 12}}))
    with pytest.raises(InputError, match=r"maximum of 12 tokens.*genai_config.json"):
        profile_generation(str(path), prompt=10, new_tokens=5, runs=1, providers="cpu")


def test_unpaired_cache_tensors_are_named():
    m = gqa_decoder()
    for node in m.graph.node:
        node.output[:] = ["present.7.key" if o == "present.1.key" else o for o in node.output]
    next(o for o in m.graph.output if o.name == "present.1.key").name = "present.7.key"
    with pytest.raises(CacheError) as e:
        profile_generation(m, prompt=4, new_tokens=2, runs=1, providers="cpu")
    msg = str(e.value)
    assert "cannot be paired" in msg
    assert "'past_key_values.1.key'" in msg and "'present.7.key'" in msg


def test_mismatched_pair_and_model_without_cache():
    m = unfused_decoder()
    m.graph.input[3].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    with pytest.raises(InputError, match=r"'past_key_values.0.key' \(float16.*'present.0.key' "
                                         r"\(float32"):
        profile_generation(m, prompt=4, new_tokens=2, runs=1, providers="cpu")
    with pytest.raises(InputError, match="no KV-cache inputs"):
        profile_generation("sample:convnet", prompt=4, new_tokens=2, runs=1)


def test_symbolic_head_dims_derived_or_asked_for():
    # GroupQueryAttention fixes the head size: derived, nothing to pass
    m = gqa_decoder()
    for v in list(m.graph.input)[2:]:
        v.type.tensor_type.shape.dim[3].dim_param = "head_size"
    g = profile_generation(m, prompt=4, new_tokens=2, runs=1, warmup=0, profile_runs=0,
                           providers="cpu", progress=False)
    assert g.tokens.shape == (1, 3) and g.layout.past_shapes["past_key_values.0.key"] == (
        -1, 2, 0, 16)
    # the unfused export's cache feeds only Concats: the heads cannot be read off the graph
    m = unfused_decoder()
    for v in list(m.graph.input)[3:]:
        v.type.tensor_type.shape.dim[1].dim_param = "num_heads"
    with pytest.raises(DimError, match=r"'num_heads'.*past_key_values.0.key"):
        profile_generation(m, prompt=4, new_tokens=2, runs=1, providers="cpu")
    g = profile_generation(m, prompt=4, new_tokens=2, runs=1, warmup=0, profile_runs=0,
                           providers="cpu", dims={"num_heads": 2}, progress=False)
    assert g.tokens.shape == (1, 3)


@pytest.mark.parametrize("kw", [{"new_tokens": 0}, {"batch": 0}, {"prompt": 0},
                                {"prompt": [[1.5, 2.0]]}, {"prompt": [3, 64]},
                                {"prompt": [-1, 2]}, {"profile_runs": -1},
                                {"budget_s": 0}, {"runs": 0}])
def test_bad_counts(gqa, kw):
    args = {"prompt": 4, "new_tokens": 2, "runs": 1, "providers": "cpu", **kw}
    with pytest.raises(InputError):
        profile_generation(gqa, **args)
