"""Transformer fusions as verified, traced tool steps (ort_transformers, onnxscript_rewrite)
and near-misses: why a fusion did not happen."""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
from _machinery import export_tiny_bert
from models import conv_bn_scale_from_input

import onnx_lab
from onnx_lab.core._sample_models import build_bert_block
from onnx_lab.errors import PassError
from onnx_lab.transforms import available

DIMS = {"batch": 2, "seq": 8}
FUSED = ("Attention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu",
         "FastGelu", "Gelu", "LayerNormalization")


def _ort_stats(proto_or_path) -> dict[str, int]:
    """onnxruntime's own optimize_model(..., model_type='bert', opt_level=0) counts."""
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(proto_or_path, model_type="bert", opt_level=0)
    return {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}


def _traced_share(lab) -> float:
    o = lab.origins
    return sum(1 for v in o.values() if v) / len(o)



def _bench_models():
    """benchmarks/_models.py, loaded under its own name: a bare ``import _models`` would get
    whichever ``_models`` module another test folder imported first."""
    import importlib.util

    name = "_onnx_lab_bench_models"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "_models.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]

def test_registered_as_tool_steps():
    df = available().set_index("name")
    assert df.loc["ort_transformers", "kind"] == "tool"
    assert "model_type" in df.loc["ort_transformers", "parameters"]
    assert "onnxslim" in df.index
    # onnxscript is a default dependency; an environment without it lacks just this step.
    from onnx_lab.transforms.transformers import onnxscript_available

    assert ("onnxscript_rewrite" in df.index) == onnxscript_available()
    if onnxscript_available():
        assert df.loc["onnxscript_rewrite", "kind"] == "tool"


def test_bert_block_fuses_like_onnxruntime_verifies_and_traces():
    lab = onnx_lab.open("sample:bert_block", dims=DIMS)
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.verify_passed, r.verification.loc[~r.verification.passed]
    want = _ort_stats(build_bert_block())
    assert r.fusions == want
    assert want == {"Attention": 1, "SkipLayerNormalization": 2, "LayerNormalization": 1,
                    "BiasGelu": 1}
    ops = Counter(lab.nodes.op_type)
    for op in FUSED:
        assert ops.get(op, 0) == want.get(op, 0), op
    assert any(n.startswith("fused: ") and "Attention 1" in n for n in r.notes)
    assert "num_heads=4, hidden_size=32 read from the model" in r.notes
    assert _traced_share(lab) == 1.0
    att = lab.nodes.loc[lab.nodes.op_type == "Attention", "node_id"].iloc[0]
    origin = set(lab.origins[att])
    assert {"/layer.0/attention/core/Softmax", "/layer.0/attention/query/MatMul",
            "/layer.0/attention/key/Add", "/layer.0/attention/value/Reshape",
            "/mask/Sub"} <= origin
    assert r.near_misses.empty


@pytest.mark.slow
def test_bad_model_type_and_switch_names_are_pass_errors():
    lab = onnx_lab.open("sample:bert_block", dims=DIMS)
    with pytest.raises(PassError, match="model_type 'bret'"):
        lab.apply("ort_transformers", model_type="bret")
    with pytest.raises(PassError, match="enable_atention"):
        lab.apply("ort_transformers", disable=["atention"])
    r = lab.apply("ort_transformers", disable=["attention"])
    assert "Attention" not in r.fusions and r.verify_passed


def test_extra_cast_in_the_mask_path_is_a_named_near_miss():
    lab = onnx_lab.open(build_bert_block(extra_mask_cast=True), dims=DIMS)
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.verify_passed
    assert "Attention" not in r.fusions
    assert r.fusions == _ort_stats(build_bert_block(extra_mask_cast=True))
    nm = r.near_misses
    assert list(nm.fusion) == ["Attention"]
    row = nm.iloc[0]
    assert row.anchor == "/layer.0/attention/core/Softmax"
    assert "unexpected Cast (/mask/Cast_1)" in row.reason
    assert "fuse_attention: failed to match mask path" in row.log
    assert "/mask/Cast_1" in row.node_ids and "/layer.0/attention/query/MatMul" in row.node_ids
    # also from the Lab, without running the optimizer
    df = onnx_lab.open(build_bert_block(extra_mask_cast=True), dims=DIMS).patterns(
        near_misses=True)
    assert df.loc[df.fusion == "Attention", "reason"].str.contains("unexpected Cast").all()
    # the subgraph renders
    svg = lab.render(nodes=list(row.node_ids))
    assert svg is not None




def test_conv_bn_with_a_non_constant_scale_is_a_near_miss_of_fuse_conv_bn():
    lab = onnx_lab.open(conv_bn_scale_from_input())
    assert "fuse_conv_bn" not in set(lab.patterns()["pass"])
    df = lab.patterns(near_misses=True)
    row = df.loc[df.source == "fuse_conv_bn"].iloc[0]
    assert row.fusion == "conv_bn"
    assert row.node_ids == ["/conv/Conv", "/bn/BatchNormalization"]
    assert "'scale' is not a constant" in row.reason
    assert row.description.startswith("Conv → BatchNormalization: ")


def test_onnxscript_rewrite_step():
    pytest.importorskip("onnxscript")
    lab = onnx_lab.open("sample:bert_block", dims=DIMS)
    r = lab.apply("onnxscript_rewrite")
    assert r.modified and r.verify_passed
    assert r.fusions.get("mha2", 0) + r.fusions.get("mha1", 0) >= 1
    assert "MultiHeadAttention" in set(lab.nodes.op_type)
    mha = lab.nodes.loc[lab.nodes.op_type == "MultiHeadAttention", "node_id"].iloc[0]
    assert "/layer.0/attention/core/Softmax" in lab.origins[mha]


# ---------------------------------------------------------------------------- BERT-base
def _bert_dynamo() -> Path:
    """BERT-base exported with torch's current (dynamo) exporter, cached next to the
    benchmark models."""
    torch = pytest.importorskip("torch")
    bench = _bench_models()
    MODELS_DIR, _bert_module = bench.MODELS_DIR, bench._bert_module  # noqa: N806
    path = MODELS_DIR / "bert_base_dynamo_v1.onnx"
    if path.exists():
        return path
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    m = _bert_module().eval()
    ids = torch.randint(0, 30522, (2, 16))
    tt = torch.zeros(2, 16, dtype=torch.int64)
    am = torch.ones(2, 16, dtype=torch.int64)
    b, s = torch.export.Dim("batch"), torch.export.Dim("sequence")
    tmp = path.with_name(path.name + ".tmp")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (ids, tt, am), str(tmp), dynamo=True, external_data=False,
                          input_names=["input_ids", "token_type_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}, {0: b, 1: s}),
                          verbose=False)
    tmp.replace(path)
    return path


@pytest.mark.slow
def test_bert_base_current_exporter_counts_trace_and_attention_near_misses():
    path = _bert_dynamo()
    lab = onnx_lab.open(path, dims={"batch": 1, "sequence": 16})
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.verify_passed, r.first_failure
    want = _ort_stats(str(path))
    assert r.fusions == want
    ops = Counter(lab.nodes.op_type)
    for op in FUSED:
        assert ops.get(op, 0) == want.get(op, 0), op
    assert want.get("SkipLayerNormalization") == 24 and want.get("BiasGelu") == 12
    assert want.get("Attention", 0) == 0
    assert _traced_share(lab) >= 0.99
    att = r.near_misses.loc[r.near_misses.fusion == "Attention"]
    assert len(att) == 12
    assert att.reason.str.startswith("mask path: one Unsqueeze").all()
    assert att.log.map(lambda log: "fuse_attention: failed to match mask path" in log).all()


@pytest.mark.slow
def test_bert_base_torchscript_export_fuses_attention_with_origins():
    pytest.importorskip("torch")
    path = _bench_models().bert_base()
    lab = onnx_lab.open(path, dims={"batch": 1, "sequence": 16})
    # Everything onnxruntime fuses here is no near-miss beforehand (the LayerNorm weights
    # reach their Mul through Identity nodes; Shape nodes read the attention's Transpose).
    before = lab.patterns(near_misses=True)
    assert (before.kind == "tool").sum() == 0, before.loc[before.kind == "tool", "reason"]
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.verify_passed, r.first_failure
    want = _ort_stats(str(path))
    assert r.fusions == want and want["Attention"] == 12
    assert _traced_share(lab) >= 0.99
    origin = lab.origins["Attention_0"]
    assert {"/layer.0/attention/Softmax", "/layer.0/attention/query/MatMul"} <= set(origin)
    assert not any(o.startswith("/norm/") for o in origin)  # the embedding LayerNorm's own


def test_nan_guarded_attention_is_a_named_near_miss_before_and_after_the_step():
    from models import bert_block_with_nan_guard

    lab = onnx_lab.open(bert_block_with_nan_guard(), dims=DIMS)
    before = lab.patterns(near_misses=True)
    row = before.loc[before.fusion == "Attention"].iloc[0]
    assert "reads Where /attn/Where, not the Softmax" in row.reason
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.verify_passed and "Attention" not in r.fusions
    assert r.fusions == _ort_stats(bert_block_with_nan_guard())  # onnxruntime's own answer
    nm = r.near_misses.loc[r.near_misses.fusion == "Attention"]
    assert len(nm) == 1 and nm.reason.iloc[0] == row.reason
    # onnxruntime's own log stops at the same place.
    assert {"Expect Softmax, Got Where", "fuse_attention: failed to match qk path"} <= set(
        nm.log.iloc[0])
    # Without the guard the same block fuses: the guard is the failed condition.
    assert _ort_stats(build_bert_block()).get("Attention") == 1


@pytest.mark.slow
def test_transformers_bert_with_sdpa_attention_names_why_no_attention_fused(tmp_path):
    """A transformers BertModel (random weights, sdpa attention) exported by TorchScript:
    onnxruntime fuses no Attention; every attention's near-miss names the NaN guard."""
    path = tmp_path / "bert.onnx"
    export_tiny_bert(path, dynamo=False, opset=14, vocab=200, heads=4, positions=32,
                     pooled=False, axes=("batch", "sequence"), output_names=["y"])
    lab = onnx_lab.open(path, dims={"batch": 1, "sequence": 8})
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.verify_passed and r.fusions.get("Attention", 0) == 0
    att = r.near_misses.loc[r.near_misses.fusion == "Attention"]
    assert len(att) == 2
    assert att.reason.str.startswith("QK path: the MatMul(probs, V)").all()
    assert att.reason.str.contains("NaN guard").all()


def test_onnxscript_rewrite_of_an_ir3_model_loads_and_stays_quiet(tmp_path, caplog):
    # onnxscript's passes drop IR 3's weight inputs: light ResNet-50's result did not load
    # ("initializer_arg was false"), and onnx_ir logged a WARNING per weight (807 lines on
    # the command line). As every tool's result it now gets them back, and is verified.
    pytest.importorskip("onnxscript")
    import logging

    import numpy as np
    import onnx
    import onnxruntime as ort

    src = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    lab = onnx_lab.open(src)
    with caplog.at_level(logging.WARNING):
        r = lab.apply("onnxscript_rewrite")
    assert not [x for x in caplog.records if x.name.startswith("onnx_ir")]
    assert r.modified and r.verify_passed, r.notes
    out = lab.save(tmp_path / "rewritten.onnx")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    a, b = (ort.InferenceSession(str(p)) for p in (src, out))
    feed = {a.get_inputs()[0].name: x}
    np.testing.assert_array_equal(a.run(None, feed)[0], b.run(None, feed)[0])


def test_the_phi_model_type_on_an_export_it_cannot_read_names_the_one_that_works():
    # onnxruntime's phi path rewrites the local functions of the dynamo Phi-2 export; on
    # optimum's Phi it failed "TypeError: 'method' object is not iterable"
    from onnx_lab.errors import PassError

    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    with pytest.raises(PassError, match="model_type='gpt2'") as e:
        lab.apply("ort_transformers", model_type="phi")
    assert "local functions" in e.value.problem and len(lab.history) == 1


def test_ops_the_export_already_held_are_not_reported_fused():
    # an opset-23 export holds Attention and LayerNormalization itself: the step said "fused:
    # Attention 1, LayerNormalization 1" on a model it left unchanged
    import onnx

    m = onnx.parser.parse_model('''<ir_version: 10, opset_import: ["" : 23]>
g (float[1,2,4,8] q, float[1,2,4,8] k, float[1,2,4,8] v, float[8] s, float[8] b)
  => (float[1,2,4,8] y) {
  a = Attention(q, k, v)
  y = LayerNormalization<axis=-1>(a, s, b) }''')
    r = onnx_lab.open(m).apply("ort_transformers", model_type="bert")
    assert not r.modified
    assert getattr(r, "fusions", {}) == {}, r.notes
    assert not any(n.startswith("fused: ") for n in r.notes), r.notes
    assert not any("num_heads/hidden_size" in n for n in r.notes), r.notes
