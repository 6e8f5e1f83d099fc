"""compare_llm on optimum's merged decoder layout: an If on ``use_cache_branch`` (False with an
empty cache, True once it holds tokens), which compare_llm refused as an input of unknown role."""

import numpy as np
import onnx
from llm_models import unfused_decoder
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics.llm import _step_feeds, decoder_io, prefill_feeds


def _merged(model: onnx.ModelProto, halve_then: bool = False) -> onnx.ModelProto:
    """``model``'s nodes in both branches of an If on a new ``use_cache_branch`` input;
    ``halve_then``: the cache branch's logits halved (a bug only decode steps see). The
    attention mask declares ``[batch, seq]``, as optimum's merged decoders do (the no-cache
    decoder's shape), though the cache branch reads past + new tokens of it."""
    g = model.graph
    for v in g.input:
        if v.name == "attention_mask":
            v.type.tensor_type.shape.dim[1].dim_param = "seq"
    outs = [o.name for o in g.output]

    def body(tag: str, halve: bool) -> onnx.GraphProto:
        nodes = list(g.node)
        extra, names = [], []
        for o in outs:
            src = o
            if halve and o == "logits":
                extra.append(helper.make_node("Mul", [o, "half_c"], [f"{o}_half_{tag}"]))
                src = f"{o}_half_{tag}"
            extra.append(helper.make_node("Identity", [src], [f"{o}_{tag}"]))
            names.append(f"{o}_{tag}")
        return helper.make_graph(nodes + extra, tag, [], [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names])

    inits = list(g.initializer) + [onnx.numpy_helper.from_array(np.array(0.5, np.float32),
                                                                "half_c")]
    node = helper.make_node("If", ["use_cache_branch"], outs, name="optimum::if",
                            then_branch=body("then", halve_then), else_branch=body("else", False))
    merged = helper.make_graph(
        [node], "merged", list(g.input) + [helper.make_tensor_value_info(
            "use_cache_branch", TensorProto.BOOL, [1])], list(g.output), inits)
    m = helper.make_model(merged, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m


def test_merged_decoder_feeds_its_switch_and_passes_itself():
    merged = onnx_lab.open(_merged(unfused_decoder()))
    io = decoder_io(merged.model)
    assert io.branch == "use_cache_branch"
    feeds = prefill_feeds(merged.model, [1, 2, 3], io=io, dims={})
    assert feeds["use_cache_branch"].tolist() == [False]
    c = onnx_lab.compare_llm(merged, merged, prompt_length=4, new_tokens=6, layerwise=False,
                             progress=False)
    assert c.passed and c.metrics["kl_max"] < 1e-9
    plain = onnx_lab.compare_llm(onnx_lab.open(unfused_decoder()), merged, prompt_length=4,
                                 new_tokens=6, layerwise=False, progress=False)
    assert plain.passed and plain.metrics["kl_max"] < 1e-9


def test_merged_decoder_step_takes_the_cache_branch():
    # the cache branch's logits halved: only the decode steps (use_cache_branch=True) see it
    bug = onnx_lab.open(_merged(unfused_decoder(), halve_then=True))
    io = decoder_io(bug.model)
    step = _step_feeds(io, 5, {s.present: np.zeros((1, 2, 3, 16), np.float32)
                               for s in io.cache.cache}, 3)
    assert step["use_cache_branch"].tolist() == [True]
    c = onnx_lab.compare_llm(onnx_lab.open(unfused_decoder()), bug, prompt_length=4,
                             new_tokens=6, layerwise=False, progress=False)
    gen = c.positions.loc[c.positions["position"] >= 4, "kl"].astype(float)
    assert gen.min() > 1e-4  # every decode step differs
    assert c.positions.loc[c.positions["position"] < 3, "kl"].astype(float).max() < 1e-9


def test_merged_decoder_mask_declared_as_new_tokens_runs_the_cache_branch():
    # the seeded samples sized the mask by its declared [batch, seq]: the cache branch's
    # sample did not run, was left out, and a bug only that branch has passed
    dims = {"batch": 1, "seq": 4, "past_seq": 3}
    ref = onnx_lab.open(_merged(unfused_decoder()), dims=dims)
    feeds = onnx_lab.runtime.feeds.make_feeds(ref.model, ref.dims)
    assert feeds["attention_mask"].shape == (1, 7)
    c = onnx_lab.compare(ref, _merged(unfused_decoder(), halve_then=True), dims=dims,
                         progress=False)
    assert not c.passed and not c.unexercised
    same = onnx_lab.compare(ref, _merged(unfused_decoder()), dims=dims, progress=False)
    assert same.passed and not same.unexercised


def test_fp32_judges_flips_between_close_tokens():
    # an fp32 rewrite moves logits by ~1e-6: a flip between tokens 0.01 nats apart is a
    # different prediction, not rounding (int8's 0.05-nat ties stay unjudged)
    import pandas as pd

    from onnx_lab.numerics.llm import _TIE_MARGINS, _summary
    from onnx_lab.numerics.metrics import NEXT_TOKEN, TIE_MARGIN

    rows = [{"position": i, "agree": i % 4 != 0, "margin": 0.01 if i % 4 == 0 else 0.5,
             "kl": 1e-4, "nll_ref": 1.0, "nll_cand": 1.0, "top5_overlap": 1.0,
             "generated": True} for i in range(32)]
    pos = pd.DataFrame(rows)
    fp32 = _summary(pos, NEXT_TOKEN["fp32"], _TIE_MARGINS["fp32"])
    assert fp32["top1_agreement_decisive"] == 0.75 and fp32["score"] > 1
    int8 = _summary(pos, NEXT_TOKEN["int8"], _TIE_MARGINS.get("int8", TIE_MARGIN))
    assert int8["top1_agreement_decisive"] == 1.0 and int8["score"] <= 1


def test_failing_cache_branch_is_the_branch_named():
    # a bug in the cache branch only: each failing output's note named the else_branch
    # ("differs beyond tolerance"), which agreed, since it was the first branch examined
    rng = np.random.default_rng(0)

    def feeds(past, new, use):
        f = {"input_ids": rng.integers(0, 64, (1, new)),
             "attention_mask": np.ones((1, past + new), np.int64),
             "position_ids": np.arange(past, past + new)[None],
             "use_cache_branch": np.array([use])}
        for i in range(2):
            for k in ("key", "value"):
                f[f"past_key_values.{i}.{k}"] = rng.standard_normal(
                    (1, 2, past, 16)).astype(np.float32)
        return f

    c = onnx_lab.compare(_merged(unfused_decoder()), _merged(unfused_decoder(), halve_then=True),
                         feeds=[feeds(0, 4, False), feeds(3, 1, True)], progress=False)
    assert not c.passed
    notes = " ".join(str(n) for n in c.outputs["note"] if isinstance(n, str))
    assert "else_branch" not in notes


def test_tool_given_input_shapes_sizes_the_mask_over_the_past():
    # onnxslim was given the mask's declared [1, seq] while the samples feed [1, past + seq]
    import pytest

    pytest.importorskip("onnxslim")
    lab = onnx_lab.open(_merged(unfused_decoder()), dims={"batch": 1, "seq": 4, "past_seq": 3})
    result = lab.apply("onnxslim")
    assert result.verify_passed
    assert list(lab.inputs.set_index("name").loc["attention_mask", "shape"]) == [1, 7]


def test_a_node_that_loses_nothing_is_not_named_as_losing_most():
    # every ranked row of a merged decoder is the If, at local SQNR inf: "loses most:
    # optimum::if (If), local SQNR inf dB" was printed three times for a model that passed
    merged = onnx_lab.open(_merged(unfused_decoder()))
    c = onnx_lab.compare_llm(merged, merged, prompt_length=4, new_tokens=4, progress=False)
    assert c.passed and "layerwise" in c.summary_text()
    assert "loses most" not in c.summary_text()


def test_fp32_judges_every_positions_logits_element_wise():
    # the next-token metrics alone passed a cache path that scaled a past (same greedy
    # tokens, KL 3e-4, logits 0.10 off): under fp32 the logits of every position, decode
    # steps included, meet the output rule
    ref = onnx_lab.open(_merged(unfused_decoder()))
    same = onnx_lab.compare_llm(ref, ref, prompt_length=4, new_tokens=6, layerwise=False,
                                progress=False)
    assert same.passed and same.metrics["logits_within_rule"] is True
    assert same.metrics["logits_max_abs"] < 1e-5
    assert same.positions["logits_within_rule"].astype(bool).all()
    bug = onnx_lab.compare_llm(ref, _merged(unfused_decoder(), halve_then=True),
                               prompt_length=4, new_tokens=6, layerwise=False, progress=False)
    assert not bug.passed and bug.metrics["logits_within_rule"] is False
    line = bug.summary_text().splitlines()[1]
    assert line.startswith("logits beyond the rule") and "(a decode step with the cache)" in line
    # rounding presets keep their next-token targets alone
    assert onnx_lab.compare_llm(ref, ref, preset="int8", prompt_length=4, new_tokens=4,
                                layerwise=False, progress=False).metrics[
        "logits_within_rule"] is None


def test_a_sequence_past_the_position_table_is_refused_before_running():
    # GPT-2's learned position table (unfused_decoder's wpe: 64 rows): compare_llm ran into
    # onnxruntime's Gather at position 64 and blamed the model's cache path ("a builder's or
    # onnxruntime's defect"); profile_generation named the table
    import pytest

    from onnx_lab.analysis.generation import generation_cost
    from onnx_lab.core.llm import max_context
    from onnx_lab.errors import CacheError
    plain = onnx_lab.open(unfused_decoder(max_len=64))
    merged = onnx_lab.open(_merged(unfused_decoder(max_len=64)))
    assert max_context(plain.model)[0] == max_context(merged.model)[0] == 64
    with pytest.raises(CacheError, match=r"need a context of 80, longer than the reference's "
                       r"maximum of 64 tokens \('wpe' has 64 rows") as e:
        onnx_lab.compare_llm(plain, merged, prompt_length=40, new_tokens=40, progress=False)
    assert "new_tokens=24" in e.value.fix
    with pytest.raises(CacheError, match="tokens of 70 ids are longer than the candidate's"):
        onnx_lab.compare_llm(onnx_lab.open(unfused_decoder(max_len=80)), merged,
                             tokens=list(range(70)), layerwise=False, progress=False)
    with pytest.raises(CacheError, match="maximum of 64"):
        generation_cost(plain, prompt=70)
    c = onnx_lab.compare_llm(plain, merged, prompt_length=40, new_tokens=24, layerwise=False,
                             progress=False)
    assert c.passed


def test_int4_search_on_a_merged_decoder_names_the_if_bodies_it_does_not_reach():
    # every MatMul of a merged decoder sits inside the If on use_cache_branch: the search said
    # "no MatMul with a constant 2-D weight", though onnxruntime's quantizer reaches them
    import pytest

    from onnx_lab.errors import InputError
    merged = onnx_lab.open(_merged(unfused_decoder()))
    with pytest.raises(InputError, match=r"inside If/Loop bodies \(of 'optimum::if': a merged "
                       r"decoder\)") as e:
        merged.find_precision("int4")
    assert "no MatMul with a constant" not in str(e.value)
    assert "without merging" in str(e.value)
