"""LLM comparison and the weight-only int4 plan, both ways: a healthy int4 decoder raises no
alarm; a MatMul whose 4-bit blocks a planted outlier row ruins is ranked first and kept."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_lab
from onnx_lab.errors import InputError
from onnx_lab.numerics.llm import (
    LOSS_COLUMNS,
    POSITION_COLUMNS,
    compare_llm,
    decoder_io,
    greedy_decode,
    layer_of,
    sqnr_losses,
)
from onnx_lab.numerics.metrics import NEXT_TOKEN, next_token_metrics
from onnx_lab.numerics.weight_only import TRIAL_COLUMNS, find_weight_only

sys.path.insert(0, str(Path(__file__).parent))
from int4_models import int4, plant_outlier, tiny_llm  # noqa: E402

PLANTED = ("/model/layers.1/mlp/gate_proj/MatMul", "/model/layers.1/mlp/up_proj/MatMul")
EXE = Path(sys.executable).parent / "onnx-lab"


@pytest.fixture(scope="module")
def healthy():
    m = tiny_llm()
    return m, int4(m)


@pytest.fixture(scope="module")
def planted():
    m = plant_outlier(tiny_llm())
    return m, int4(m)


def test_next_token_metrics_by_hand():
    ref = np.log(np.array([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2]]))
    cand = np.log(np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1]]))
    m = next_token_metrics(ref, cand, [1, -1])
    assert list(m["agree"]) == [True, False]
    kl0 = 0.7 * math.log(0.7 / 0.6) + 0.2 * math.log(0.2 / 0.3)
    assert m["kl"][0] == pytest.approx(kl0, rel=1e-9)
    assert m["nll_ref"][0] == pytest.approx(-math.log(0.2))
    assert math.isnan(m["nll_ref"][1])
    same = next_token_metrics(ref, ref)
    assert np.all(same["kl"] < 1e-12) and same["agree"].all()


@pytest.mark.slow
def test_compare_picks_the_int4_preset(healthy):
    """compare(fp32, int4) judges by the int4 preset: a healthy model has no failing layer
    (the fp32 preset called nearly every layer out of tolerance)."""
    ref, cand = healthy
    io = decoder_io(onnx_lab.open(ref).model)
    from onnx_lab.numerics.llm import prefill_feeds

    feeds = prefill_feeds(onnx_lab.open(ref).model, list(range(1, 17)), io=io)
    c = onnx_lab.compare(ref, cand, feeds=feeds, progress=False)
    assert c.preset == "int4"
    assert c.passed and c.layers["passed"].all() and c.first_divergence is None
    strict = onnx_lab.compare(ref, cand, feeds=feeds, preset="fp32", progress=False)
    assert (~strict.layers["passed"]).sum() > len(strict.layers) // 2


def test_healthy_int4_raises_no_alarm(healthy):
    ref, cand = healthy
    c = compare_llm(ref, cand, progress=False)
    assert c.passed, c.summary_text()
    assert c.preset == "int4" and c.comparison is not None and c.comparison.passed
    assert list(c.positions.columns) == POSITION_COLUMNS
    assert list(c.losses.columns) == LOSS_COLUMNS
    # Every quantized MatMul loses about what 4 bits cost, none collapses.
    q = c.losses.loc[c.losses["quantized"]]
    assert len(q) == 11 and q["local_sqnr_db"].min() > 15
    assert c.metrics["perplexity_cand"] / c.metrics["perplexity_ref"] < 1.2
    d = json.loads(json.dumps(c.to_dict()))
    assert d["passed"] and d["metrics"]["top1_agreement"] > 0.8


def test_fp32_against_itself_is_exact(healthy):
    ref, _ = healthy
    c = compare_llm(ref, ref, new_tokens=8, progress=False)
    assert c.passed and c.preset == "fp32"
    assert c.metrics["top1_agreement"] == 1.0 and c.metrics["kl_max"] < 1e-9
    # the greedy decode's first runs at each length (and their memory checks) gave 5-11
    # tokens/s for a 5000 tokens/s decoder: throughput is profile_generation's
    assert not any("tokens_per_s" in k for k in c.metrics)


def test_a_dynamic_int8_decoder_is_judged_by_the_int8_targets(healthy):
    # compare() picked int8 for the pair, compare_llm float32's targets (KL <= 1e-3): a
    # healthy quantize_dynamic decoder failed. The genai layout's contrib ops have no ONNX
    # shape inference: the quantizer stopped ("Unable to find data type") before
    ref, _ = healthy
    q = onnx_lab.to_int8_dynamic(ref)
    assert "MatMulInteger" in set(q.nodes.op_type)
    c = compare_llm(ref, q, new_tokens=4, progress=False)
    assert c.preset == "int8" and c.passed
    assert compare_llm(ref, ref, new_tokens=2, progress=False).preset == "fp32"


@pytest.mark.slow  # int4 versions of an LLM, compared token by token
def test_planted_outlier_is_ranked_first(planted):
    ref, cand = planted
    c = compare_llm(ref, cand, progress=False)
    assert not c.passed  # KL beyond the int4 target
    assert set(c.losses["node_id"].head(2)) == set(PLANTED)
    assert c.losses["local_sqnr_db"].iloc[0] < 8 < c.losses["local_sqnr_db"].iloc[2]
    assert c.comparison.first_divergence["node_id"] in PLANTED
    by = c.by_layer()
    assert by.loc[by["min_local_sqnr_db"].idxmin(), "layer"] == 1
    assert c.plot() is not None and "loses most" in c.summary_text()


def test_given_tokens_and_bad_input(healthy):
    ref, cand = healthy
    c = compare_llm(ref, cand, tokens=[[1, 2, 3, 4, 5], [9, 8, 7, 6]], layerwise=False,
                    progress=False)
    assert len(c.positions) == 9 and c.comparison is None and c.prompt_length == 0
    with pytest.raises(InputError, match="tokens"):
        compare_llm(ref, cand, tokens=[1])
    with pytest.raises(InputError, match="min_top1"):
        compare_llm(ref, cand, min_top1=1.5)
    plain = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]))
    with pytest.raises(InputError, match="decoder"):
        compare_llm(plain, plain)


def test_given_token_ids_past_the_vocabulary_are_refused(healthy):
    # A Llama tokenizer's ids (docs/compare.md: --tokens 1,15043,29892) on a model of 256
    # logits failed inside onnxruntime's Gather, and the message blamed the sequence's length
    # ("at a sequence of 3 tokens: a sequence longer than the model's maximum length").
    ref, cand = healthy
    with pytest.raises(InputError, match=r"\[0, 256\) \(the vocabulary of 'logits'\), got "
                       r"1\.\.29892"):
        compare_llm(ref, cand, tokens=[1, 15043, 29892], layerwise=False, progress=False)
    with pytest.raises(InputError, match="vocabulary"):
        find_weight_only(ref, "int4", [1, 15043, 29892], progress=False)


def test_greedy_decode_feeds_the_cache_back(healthy):
    """The cached loop generates what rerunning the whole sequence without cache predicts."""
    ref, _ = healthy
    model = onnx_lab.open(ref).model
    d = greedy_decode(model, [3, 1, 4, 1, 5], 6, opt_level="disable")
    assert len(d.tokens) == 11 and d.tokens_per_s > 0
    from onnx_lab.numerics.llm import _cache_dims, _logits
    from onnx_lab.runtime.session import make_session

    io = decoder_io(model)
    assert _cache_dims(model, io, {}) == {"kv_cache_dim": 16}  # head size from the GQA
    logits = _logits(model, io, d.tokens, make_session(model), {})
    assert list(logits[4:-1].argmax(-1)) == d.tokens[5:]


def test_layer_of():
    assert layer_of("/model/layers.12/mlp/MatMul") == 12
    assert layer_of("transformer.h.3.attn") == 3
    assert layer_of("/lm_head/MatMul") is None


@pytest.mark.slow
def test_int4_plan_keeps_the_planted_layer(planted):
    ref, _ = planted
    lab = onnx_lab.open(ref)
    plan = lab.find_precision("int4", min_top1=0.85, max_kl=0.05, progress=False)
    assert plan.passed and set(plan.kept) == set(PLANTED)
    assert list(plan.trials.columns) == TRIAL_COLUMNS
    full = plan.trials.iloc[0]
    assert full["phase"] == "full" and not full["passed"]
    assert (plan.trials["tokens_per_s"] > 0).all() and (plan.trials["size_mb"] > 0).all()
    assert plan.sensitivity["node_id"].iloc[0] in PLANTED
    # The kept node costs its int8 bytes over its int4 bytes.
    cost = plan.costs.iloc[0]
    assert cost["level"] == "int8" and cost["kept_bytes"] > cost["int4_bytes"] > 0
    ops = {e.node.op_type for e in plan.model.index.entries.values()}
    assert "MatMulNBits" in ops
    assert lab.history["pass"].iloc[-1] == "precision:int4"
    assert plan.plot() is not None and plan.plot(kind="trials") is not None


@pytest.mark.slow  # a whole int4 plan search
def test_int4_plan_on_a_healthy_model_keeps_nothing(healthy):
    ref, _ = healthy
    plan = find_weight_only(ref, "int4", progress=False)
    assert plan.passed and plan.kept == [] and len(plan.trials) == 2
    assert plan.tolerance.min_top1 == NEXT_TOKEN["int4"].min_top1
    with pytest.raises(InputError, match="already weight-only"):
        find_weight_only(int4(ref), "int4")
    with pytest.raises(InputError, match="block_size"):
        find_weight_only(ref, "int4", block_size=24)
    with pytest.raises(InputError, match="token ids"):
        find_weight_only(ref, "int4", "inputs.npz")


@pytest.mark.slow
def test_cli_compare_llm_and_precision(planted, tmp_path):
    ref, cand = planted
    onnx.save(ref, tmp_path / "fp32.onnx")
    onnx.save(cand, tmp_path / "int4.onnx")
    p = subprocess.run([str(EXE), "compare", str(tmp_path / "fp32.onnx"),
                        str(tmp_path / "int4.onnx"), "--llm", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert d["losses"][0]["node_id"] in PLANTED and not d["passed"]
    p = subprocess.run([str(EXE), "precision", str(tmp_path / "fp32.onnx"), "--target", "int4",
                        "--min-top1", "0.85", "--max-kl", "0.05"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "keep /model/layers.1/mlp/" in p.stdout and "bytes" in p.stdout


@pytest.mark.slow
def test_precision_doctor_int4(planted):
    from onnx_lab.widgets import PrecisionDoctor

    w = PrecisionDoctor(onnx_lab.open(planted[0]), background=False)
    w.target.value = "int4"
    assert w.min_top1.layout.display is None and w.atol.layout.display == "none"
    assert w.code_for().startswith("plan = lab.find_precision('int4', min_top1=")
    w.run_button.click()
    assert w.error is None and w.result.kept[0] in PLANTED
    assert "what each kept node costs" in w.outputs_html.value


@pytest.mark.slow  # int4 versions of an LLM, compared token by token
def test_fp32_fp16_int4_versions(healthy):
    """fp32 -> fp16 (float32 I/O: Casts before the attention) and fp16 -> int4 compare; nodes
    whose inputs have no counterpart (the fp16 model's output Casts) are not ranked."""
    ref, cand = healthy
    half = onnx_lab.to_fp16(onnx_lab.open(ref), keep_io_types=True)
    c = compare_llm(ref, half, new_tokens=8, progress=False)
    assert c.preset == "fp16" and c.passed and c.metrics["kl_mean"] < 1e-4
    c = compare_llm(half, cand, new_tokens=8, progress=False)
    assert c.preset == "int4" and c.passed
    outputs = {v.name for v in half.model.graph.outputs}
    casts = c.losses.loc[(c.losses["op_type"] == "Cast") & c.losses["tensor"].isin(outputs)]
    assert len(casts) and casts["local_sqnr_db"].isna().all()
    assert c.losses["quantized"].head(3).any()


def test_assembled_trials_match_the_quantizer(planted):
    """A trial assembled from the 4- and 8-bit parts computes what onnxruntime's quantizer
    run with the same exclusions gives."""
    from onnx_lab.numerics.llm import prefill_feeds
    from onnx_lab.numerics.weight_only import _named_proto, _Parts, quantize_weight_only
    from onnx_lab.runtime.capture import run

    model = onnx_lab.open(planted[0]).model
    proto = _named_proto(model)
    opts = {"block_size": 32, "accuracy_level": None, "is_symmetric": True}
    parts = _Parts(proto, opts)
    feeds = prefill_feeds(model, list(range(3, 15)))
    for int8, floats in (({PLANTED[0]}, set()), ({PLANTED[0]}, {PLANTED[1], "/lm_head/MatMul"}),
                         (set(), set())):
        a = onnx_lab.open(parts.assemble(int8, floats)).model
        b = onnx_lab.open(quantize_weight_only(proto, exclude=sorted(floats), int8=sorted(int8),
                                               **opts)).model
        ops = sorted(e.node.op_type for e in a.index.entries.values())
        assert ops == sorted(e.node.op_type for e in b.index.entries.values())
        ya, yb = run(a, feeds, outputs=["logits"]), run(b, feeds, outputs=["logits"])
        np.testing.assert_array_equal(ya["logits"], yb["logits"])


def test_genai_builder_fp32_vs_int4(genai_model):
    """The issue's case: onnxruntime-genai's builder, fp32 vs int4 (MatMulNBits, block 32,
    accuracy level 4). The fp32 preset called nearly every layer out of tolerance; the int4
    preset and the next-token metrics find a healthy model."""
    fp32, q4 = genai_model("fp32"), genai_model("int4")
    c = compare_llm(fp32, q4, new_tokens=16, progress=False)
    assert c.passed and c.preset == "int4", c.summary_text()
    assert c.comparison is not None and c.comparison.passed
    assert c.comparison.layers["passed"].all()
    assert c.losses["quantized"].sum() >= 20


def test_comparison_plot_under_the_int4_preset(planted):
    """compare(fp32, int4).plot() shows SQNR per layer against the int4 rule, not max_abs
    against an atol."""
    from onnx_lab.numerics.llm import prefill_feeds

    ref, cand = planted
    feeds = prefill_feeds(onnx_lab.open(ref).model, list(range(3, 20)))
    c = onnx_lab.compare(ref, cand, feeds=feeds, progress=False)
    assert c.first_divergence["node_id"] in PLANTED
    ax = c.plot().axes[0]
    assert ax.get_ylabel().startswith("SQNR") and "intermediates >= 6 dB" in [
        t.get_text() for t in ax.get_legend().get_texts()]


def test_a_precision_plan_of_a_decoder_is_judged_at_a_prefill_and_a_decode_step(healthy):
    # judged (and calibrated) at the dims' past length alone, an int8 plan of optimum's Llama
    # passed at a past of 4 (31 dB) and gave 3 dB at the prefill
    from onnx_lab.runtime.feeds import cache_length_feeds, past_length

    ref, _ = healthy
    dims = {"batch_size": 1, "sequence_length": 3, "past_sequence_length": 4}
    lab = onnx_lab.open(ref, dims=dims)
    assert [past_length(lab.model, f) for f in cache_length_feeds(lab)] == [4, 0]
    plan = lab.find_precision("fp16", progress=False)
    assert "judged at a decode and a prefill step of the KV cache: past lengths 4 and 0" \
        in plan.notes
    prefill = onnx_lab.open(ref, dims={**dims, "past_sequence_length": 0})
    assert [past_length(prefill.model, f) for f in cache_length_feeds(prefill)] == [0, 1]


def _fails_at_the_prefill_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` whose logits gain 1.0 when the past is empty: right at every decode step,
    wrong at the prefill."""
    from onnx import helper, numpy_helper

    c = onnx.ModelProto.FromString(model.SerializeToString())
    logits = c.graph.output[0].name
    for n in c.graph.node:
        n.output[:] = ["logits_raw" if o == logits else o for o in n.output]
    c.graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "no_past"))
    c.graph.node.extend([
        helper.make_node("Shape", ["past_key_values.0.key"], ["past_len"], start=2, end=3),
        helper.make_node("Equal", ["past_len", "no_past"], ["is_prefill"]),
        helper.make_node("Cast", ["is_prefill"], ["prefill_f"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Add", ["logits_raw", "prefill_f"], [logits])])
    return c


def _wrong_at_decode_steps(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` whose logits are 5x sharper when the past is not empty: right at the
    prefill, wrong at every decode step (a cache path's bug)."""
    from onnx import helper, numpy_helper

    c = onnx.ModelProto.FromString(model.SerializeToString())
    logits = c.graph.output[0].name
    for n in c.graph.node:
        n.output[:] = ["logits_raw" if o == logits else o for o in n.output]
    c.graph.initializer.extend([numpy_helper.from_array(np.array(0, np.int64), "zero"),
                                numpy_helper.from_array(np.array(4, np.float32), "four"),
                                numpy_helper.from_array(np.array(1, np.float32), "one")])
    c.graph.node.extend([
        helper.make_node("Shape", ["past_key_values.0.key"], ["past_len"], start=2, end=3),
        helper.make_node("Greater", ["past_len", "zero"], ["decoding"]),
        helper.make_node("Cast", ["decoding"], ["decoding_f"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Mul", ["decoding_f", "four"], ["extra"]),
        helper.make_node("Add", ["extra", "one"], ["sharpen"]),
        helper.make_node("Mul", ["logits_raw", "sharpen"], [logits])])
    return c


def test_compare_llm_runs_the_candidate_with_its_cache(healthy):
    # the candidate ran one prefill over the whole sequence: a cache path that halved the
    # past's values passed with KL 0 (onnxruntime-genai's generation differed at the 2nd
    # token), as did an fp16 build that could not run one decode step
    ref, _ = healthy
    bad = _wrong_at_decode_steps(ref)
    c = compare_llm(ref, bad, new_tokens=8, progress=False, layerwise=False)
    assert not c.passed
    decoded = c.positions.position >= c.prompt_length  # the prompt's run: its logits right
    assert (c.positions[decoded].kl > 1e-3).all() and (c.positions[~decoded].kl < 1e-6).all()
    given = compare_llm(ref, bad, tokens=list(range(1, 11)), progress=False, layerwise=False)
    assert not given.passed  # the given tokens' second half is decoded with the cache
    assert compare_llm(ref, ref, tokens=list(range(1, 11)), progress=False,
                       layerwise=False).passed


def test_compare_judges_a_decoder_at_a_prefill_and_a_decode_step():
    # compare() judged a with-past decoder at the dims' past length alone: a candidate that
    # breaks the prefill passed at a past of 4
    m = tiny_llm()
    dims = {"batch_size": 1, "sequence_length": 3, "past_sequence_length": 4}
    c = onnx_lab.compare(m, _fails_at_the_prefill_only(m), dims=dims, progress=False)
    assert not c.passed and len(c.feeds) == 2
    assert "a KV-cache decoder: judged at a decode and a prefill step, past lengths 4 and 0" \
        in c.feeds_notes
    assert "the outputs fail on past 0 (the prefill) only; they pass on past 4 (a decode " \
        "step)" in c.summary_text()
    same = onnx_lab.compare(m, m, dims={**dims, "past_sequence_length": 0}, layerwise=False,
                            progress=False)
    assert same.passed and [f["past_key_values.0.key"].shape[2] for f in same.feeds] == [0, 1]
    assert not any("fail on" in n for n in same.feeds_notes)
    # given feeds are judged as given
    one = onnx_lab.compare(m, m, feeds=same.feeds[0], progress=False)
    assert len(one.feeds) == 1 and one.feeds_notes == []


def _past_fixed_to(model: onnx.ModelProto, value: int) -> onnx.ModelProto:
    """``model`` with its past length declared as ``value`` (a static export)."""
    fixed = onnx.ModelProto.FromString(model.SerializeToString())
    for i in fixed.graph.input:
        for d in i.type.tensor_type.shape.dim:
            if d.dim_param == "past_sequence_length":
                d.dim_value = value  # (clears dim_param: one field of a oneof)
    return fixed


def test_a_candidate_fixed_to_the_given_past_says_the_prefill_was_not_judged():
    m = tiny_llm()
    fixed = _past_fixed_to(m, 4)
    dims = {"batch_size": 1, "sequence_length": 3, "past_sequence_length": 4}
    c = onnx_lab.compare(m, fixed, dims=dims, layerwise=False, progress=False)
    assert c.passed and len(c.feeds) == 1
    assert not any("judged at a decode and a prefill" in n for n in c.feeds_notes)
    assert any(n.startswith("the sample for past 0 (the prefill) was not run: the candidate's "
                            "inputs are fixed") for n in c.feeds_notes), c.feeds_notes


def test_given_atol_rtol_judge_an_int4_candidate_element_wise():
    # the int4 preset's SQNR rule was kept under atol=1e-6: passed at max_abs 0.8
    dims = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0}
    ref, cand = onnx_lab.open("sample:tiny_llm"), onnx_lab.open("sample:tiny_llm_int4")
    strict = onnx_lab.compare(ref, cand, atol=1e-6, rtol=0.0, layerwise=False, dims=dims,
                              progress=False)
    assert not strict.passed and set(strict.outputs["preset"]) == {"fp32"}
    assert strict.outputs["rule"].str.startswith("|err| <= 1e-06").all()
    default = onnx_lab.compare(ref, cand, layerwise=False, dims=dims, progress=False)
    assert set(default.outputs["preset"]) == {"int4"}


def test_a_candidate_fixed_to_an_empty_past_is_judged_at_the_prefill_only():
    # a declared past dim of 0 was taken for an open one: the decode sample (past 1) reached
    # onnxruntime and compare raised "Got invalid dimensions"
    m = tiny_llm()
    prefill = _past_fixed_to(m, 0)
    dims = {"batch_size": 1, "sequence_length": 3, "past_sequence_length": 0}
    c = onnx_lab.compare(m, prefill, dims=dims, layerwise=False, progress=False)
    assert c.passed and len(c.feeds) == 1
    assert any(n.startswith("the sample for past 1 (a decode step) was not run") and
               "dim 2 must be 0" in n for n in c.feeds_notes), c.feeds_notes
    with pytest.raises(onnx_lab.errors.DimError, match="dim 2 must be 0"):
        onnx_lab.compare(m, prefill, dims={**dims, "past_sequence_length": 4}, progress=False)


def test_whole_input_shapes_give_a_consistent_prefill_sample():
    # with shapes= the prefill sample kept the mask of past + new tokens at the decode's
    # length: the reference "did not run at 0" and a prefill-only bug passed
    m = tiny_llm()
    shapes = {"input_ids": [1, 4], "attention_mask": [1, 8],
              **{f"past_key_values.{i}.{kv}": [1, 2, 4, 16] for i in range(2)
                 for kv in ("key", "value")}}
    c = onnx_lab.compare(m, _fails_at_the_prefill_only(m), shapes=shapes, layerwise=False,
                         progress=False)
    assert not c.passed
    assert [f["attention_mask"].shape for f in c.feeds] == [(1, 8), (1, 4)]
    assert "the outputs fail on past 0 (the prefill) only" in c.summary_text()


def test_dims_of_the_wrong_kind_are_a_dim_error():
    for dims in ([("batch_size", 1)], "batch_size=1"):
        with pytest.raises(onnx_lab.errors.DimError, match="dims must be a dict"):
            onnx_lab.compare("sample:tiny_llm", "sample:tiny_llm", dims=dims)
    with pytest.raises(onnx_lab.errors.DimError, match="Did you mean 'past_sequence_length'"):
        onnx_lab.compare_llm("sample:tiny_llm", "sample:tiny_llm_int4",
                             dims={"past_seq": 3}, progress=False)


def test_an_empty_batch_into_group_query_attention_is_refused_not_run(tmp_path):
    # onnxruntime 1.32 ends the process (SIGFPE) on a genai decoder's empty batch at any past
    # length: neither the user's sample nor one made from it is run (a child process: a crash
    # fails the test instead of ending the run)
    code = ("import numpy as np, onnx_lab\n"
            "feeds = {'input_ids': np.zeros((0, 1), np.int64),\n"
            "         'attention_mask': np.ones((0, 1), np.int64)}\n"
            "for i in range(2):\n"
            "    for kv in ('key', 'value'):\n"
            "        feeds[f'past_key_values.{i}.{kv}'] = np.zeros((0, 2, 0, 16), np.float32)\n"
            "for kw in ({'dims': {'batch_size': 0, 'sequence_length': 3,\n"
            "                     'past_sequence_length': 4}},\n"
            "           {'dims': {'batch_size': 0, 'sequence_length': 3,\n"
            "                     'past_sequence_length': 0}}, {'feeds': feeds}):\n"
            "    try:\n"
            "        onnx_lab.compare('sample:tiny_llm', 'sample:tiny_llm', progress=False,\n"
            "                         **kw)\n"
            "        print('returned')\n"
            "    except onnx_lab.errors.InputError as e:\n"
            "        print('refused', 'batch of 0' in e.problem)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    assert r.stdout.split() == ["refused", "True"] * 3
    # a decoder without GroupQueryAttention runs an empty batch: no second step is made of it
    from onnx_lab.runtime.feeds import cache_length_feeds

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from llm_models import unfused_decoder

    feeds = cache_length_feeds(unfused_decoder(), {"batch": 0, "seq": 3, "past_seq": 4})
    assert len(feeds) == 1


def test_dims_and_partial_shapes_give_a_consistent_prefill_sample():
    # the past length was read from shapes only: with the past in dims and the mask in
    # shapes, the prefill sample kept the decode's mask
    m = tiny_llm()
    c = onnx_lab.compare(m, m, dims={"batch_size": 1, "past_sequence_length": 4},
                         shapes={"input_ids": [1, 1], "attention_mask": [1, 5]},
                         layerwise=False, progress=False)
    assert [f["attention_mask"].shape for f in c.feeds] == [(1, 5), (1, 1)]
    assert c.passed and "past lengths 4 and 0" in " ".join(c.feeds_notes)


def test_sqnr_losses_rank_neither_cache_copies_nor_packed_bytes():
    # a genai int4 decoder: GroupQueryAttention's present.* copy the past and a slice of the
    # packed QKV, whose whole noise was subtracted from the slice's (ranked first), and a tied
    # lm_head's packed uint8 weight reshaped for GatherBlockQuantized was "8.6 dB"
    import pandas as pd
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["qkv"], name="qkv_proj"),
         helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_k", "past_v", "lens",
                                                  "total"], ["attn", "present_k", "present_v"],
                          name="gqa", domain="com.microsoft", num_heads=2, kv_num_heads=1),
         helper.make_node("Reshape", ["packed", "shape"], ["packed_2d"], name="pack")],
        "g", [helper.make_tensor_value_info(n, f, None) for n in ("x", "past_k", "past_v")]
        + [helper.make_tensor_value_info(n, TensorProto.INT32, None) for n in ("lens", "total")]
        + [helper.make_tensor_value_info(n, t, None) for n, t in (
            ("w", f), ("packed", TensorProto.UINT8), ("shape", TensorProto.INT64))],
        [helper.make_tensor_value_info(n, f, None) for n in ("attn", "present_k", "present_v")]
        + [helper.make_tensor_value_info("packed_2d", TensorProto.UINT8, None)])
    model = onnx_lab.open(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])).model
    layers = pd.DataFrame({
        "tensor": ["qkv", "attn", "present_k", "present_v", "packed_2d"],
        "node_id": ["qkv_proj", "gqa", "gqa", "gqa", "pack"],
        "op_type": ["MatMul", "GroupQueryAttention", "GroupQueryAttention",
                    "GroupQueryAttention", "Reshape"],
        "dtype": ["float32"] * 4 + ["uint8"], "sqnr_db": [18.0, 17.5, 10.7, 11.8, 8.6],
        "cand_node_id": [None] * 5, "passed": [True] * 4 + [False]})
    ranked = sqnr_losses(layers, model)
    assert ranked.tensor.tolist() == ["qkv", "attn"]


def test_an_int4_build_has_the_float_builds_params(healthy):
    # summary() counted the packed uint8 elements (78,404 params for the float build's
    # 143,682 on a genai int4 build); cost() counts K·N per MatMulNBits
    ref, q = healthy
    dims = {"batch_size": 1, "past_sequence_length": 0, "sequence_length": 4}
    a, b = onnx_lab.open(ref, dims=dims), onnx_lab.open(q, dims=dims)
    assert "com.microsoft::MatMulNBits" in b.summary()["op_counts"]
    assert b.summary()["num_params"] == a.summary()["num_params"] == b.cost().total["params"]
    assert b.summary()["param_bytes"] < a.summary()["param_bytes"] / 3  # stored: packed
