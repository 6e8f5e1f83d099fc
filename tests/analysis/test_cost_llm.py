"""Cost rules of decoder LLMs against hand counts: GroupQueryAttention, MultiHeadAttention and
Attention with a KV cache, RotaryEmbedding, (Skip)SimplifiedLayerNormalization, MatMulNBits
(int4/int8 weight bytes and block scales); KV-cache bytes and the prefill/decode phases."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.analysis.cost import PHASE_COLUMNS, cost, generation_cost, kv_cache_bytes
from onnx_lab.errors import CacheError, InputError

F = TensorProto.FLOAT
MS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


def _model(nodes, inputs: dict, outputs: dict, inits: dict | None = None, int_inputs=()):
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(np.asarray(v) if not isinstance(v, (list, tuple))
                                    else rng.standard_normal(v).astype(np.float32), n)
            for n, v in (inits or {}).items()]
    vi = [helper.make_tensor_value_info(n, TensorProto.INT32 if n in int_inputs else F, s)
          for n, s in inputs.items()]
    graph = helper.make_graph(nodes, "g", vi,
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
                              init)
    return helper.make_model(graph, opset_imports=MS)


def _row(c, op):
    return c.nodes.loc[c.nodes.op_type == op].iloc[0].to_dict()


def _gqa(b, s, past, nh=4, kvh=2, head=16, rotary=True, window=-1):
    """Packed QKV [b, s, (nh + 2·kvh)·head] with a cache of ``past`` tokens."""
    width = (nh + 2 * kvh) * head
    cache = [b, kvh, past, head]
    ins = ["qkv", "", "", "pk", "pv", "seqlens", "total"]
    inits = {}
    if rotary:
        ins += ["cos", "sin"]
        inits = {"cos": [64, head // 2], "sin": [64, head // 2]}
    node = helper.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"],
                            domain="com.microsoft", num_heads=nh, kv_num_heads=kvh,
                            do_rotary=int(rotary), local_window_size=window, name="gqa")
    return _model([node], {"qkv": [b, s, width], "pk": cache, "pv": cache, "seqlens": [b],
                           "total": []},
                  {"y": [b, s, nh * head]}, inits, int_inputs=("seqlens", "total"))


@pytest.mark.parametrize("b, s, past", [(1, 16, 0), (1, 1, 15), (2, 1, 99)])
def test_group_query_attention_prefill_and_decode(b, s, past):
    r = _row(cost(_gqa(b, s, past)), "GroupQueryAttention")
    nh, kvh, head, total = 4, 2, 16, past + s
    macs = b * nh * s * total * (head + head)  # QK^T and PV, every query head
    assert r["known"] and r["macs"] == macs
    rotary = 3 * b * s * (nh + kvh) * head
    assert r["flops"] == 2 * macs + 6 * b * nh * s * total + rotary
    # The cache read is part of the bytes moved: past K and V, fp32.
    assert r["input_bytes"] >= 2 * b * kvh * past * head * 4


def test_group_query_attention_local_window_and_without_rotary():
    full = _row(cost(_gqa(1, 1, 99, rotary=False)), "GroupQueryAttention")
    window = _row(cost(_gqa(1, 1, 99, rotary=False, window=32)), "GroupQueryAttention")
    assert full["macs"] == 4 * 100 * 32 and window["macs"] == 4 * 32 * 32
    assert full["flops"] == 2 * full["macs"] + 6 * 4 * 100


def test_multi_head_attention_with_a_cache():
    cache = [2, 4, 7, 8]
    m = _model([helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"],
                                 ["y", "prk", "prv"], domain="com.microsoft", num_heads=4)],
               {"q": [2, 3, 32], "k": [2, 3, 32], "v": [2, 3, 32], "pk": cache, "pv": cache},
               {"y": [2, 3, 32]})
    assert _row(cost(m), "MultiHeadAttention")["macs"] == 2 * 4 * 3 * (7 + 3) * (8 + 8)


def test_com_microsoft_attention_with_past_and_onnx_attention_with_past_key():
    m = _model([helper.make_node("Attention", ["x", "w", "b", "", "past"], ["y", "present"],
                                 domain="com.microsoft", num_heads=2)],
               {"x": [2, 3, 8], "past": [2, 2, 2, 5, 4]}, {"y": [2, 3, 8]},
               {"w": [8, 24], "b": [24]})
    assert _row(cost(m), "Attention")["macs"] == 2 * 3 * 8 * 24 + 2 * 2 * 3 * (5 + 3) * (4 + 4)
    g = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "prk", "prv"])],
        "g", [helper.make_tensor_value_info(n, F, s) for n, s in
              (("q", [1, 2, 3, 4]), ("k", [1, 2, 3, 4]), ("v", [1, 2, 3, 4]),
               ("pk", [1, 2, 6, 4]), ("pv", [1, 2, 6, 4]))],
        [helper.make_tensor_value_info("y", F, [1, 2, 3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    assert _row(cost(m), "Attention")["macs"] == 1 * 2 * 3 * (6 + 3) * (4 + 4)


@pytest.mark.parametrize("rot_dim, share", [(0, 1.0), (8, 0.5)])
def test_rotary_embedding(rot_dim, share):
    m = _model([helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"],
                                 domain="com.microsoft", num_heads=2,
                                 rotary_embedding_dim=rot_dim)],
               {"x": [1, 5, 32], "pos": [1, 5]}, {"y": [1, 5, 32]},
               {"cos": [64, 8], "sin": [64, 8]}, int_inputs=("pos",))
    r = _row(cost(m), "RotaryEmbedding")
    assert r["known"] and r["flops"] == 3 * 1 * 5 * 32 * share and r["macs"] == 0


def test_simplified_layer_norms():
    m = _model([helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["n"],
                                 epsilon=1e-5),
                helper.make_node("SkipSimplifiedLayerNormalization", ["n", "x", "g"],
                                 ["y", "", "", "sum"], domain="com.microsoft", epsilon=1e-5)],
               {"x": [2, 3, 8]}, {"y": [2, 3, 8], "sum": [2, 3, 8]}, {"g": [8]})
    c = cost(m)
    assert _row(c, "SimplifiedLayerNormalization")["flops"] == 5 * 48
    assert _row(c, "SkipSimplifiedLayerNormalization")["flops"] == 6 * 48
    assert c.nodes.known.all()


def _quantized(bits: int, k: int = 64, n: int = 128):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    fp = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                {"x": [1, 5, k]}, {"y": [1, 5, n]}, {"w": [k, n]})
    copy = onnx.ModelProto()
    copy.CopyFrom(fp)  # the quantizer rewrites the proto it is given
    q = MatMulNBitsQuantizer(copy, bits=bits, block_size=32, is_symmetric=True)
    q.process()
    return fp, q.model.model


@pytest.mark.parametrize("bits", [4, 8])
def test_matmul_nbits_weight_bytes_and_block_scales(bits):
    k, n = 64, 128
    fp, q = _quantized(bits, k, n)
    assert [x.op_type for x in q.graph.node] == ["MatMulNBits"]
    a, b = cost(fp), cost(q)
    r = _row(b, "MatMulNBits")
    assert r["macs"] == 5 * k * n == _row(a, "MatMul")["macs"]
    assert r["flops"] == 2 * 5 * k * n + k * n  # + one dequantizing multiply per weight
    # Same parameters as the float MatMul; bytes: packed weights + one fp32 scale per block.
    assert b.total["params"] == a.total["params"] == k * n
    packed = n * (k // 32) * (32 * bits // 8)
    scales = n * (k // 32) * 4
    assert b.total["param_bytes"] == packed + scales == k * n * bits // 8 + k * n // 8
    assert r["note"] == f"{bits}-bit, block 32: {bits + 1:.2f} bits/weight with scales"
    # And onnxruntime agrees about what is stored: the initializers' own sizes.
    stored = sum(numpy_helper.to_array(t).nbytes for t in q.graph.initializer)
    assert stored == b.total["param_bytes"]


# --------------------------------------------------------------------------- KV cache, phases
def test_kv_cache_bytes_of_the_sample_and_what_onnxruntime_returns():
    # 2 layers x (K, V) x 2 KV heads x context x head 16 x 4 bytes
    assert kv_cache_bytes("sample:tiny_llm", 128) == 2 * 2 * 2 * 128 * 16 * 4 == 65536
    assert kv_cache_bytes("sample:tiny_llm", 10, batch=3) == 3 * 2 * 2 * 2 * 10 * 16 * 4
    assert kv_cache_bytes("sample:tiny_llm", 0) == 0
    lab = onnx_lab.open("sample:tiny_llm")
    assert lab.kv_cache_bytes(128) == 65536
    sess = ort.InferenceSession(str(lab.path), providers=["CPUExecutionProvider"])
    ids = np.arange(20, dtype=np.int64)[None]
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             **{f"past_key_values.{i}.{k}": np.zeros((1, 2, 0, 16), np.float32)
                for i in range(2) for k in ("key", "value")}}
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    returned = sum(v.nbytes for name, v in outs.items() if name.startswith("present"))
    assert returned == kv_cache_bytes(lab, 20)
    c = onnx_lab.open("sample:tiny_llm", dims={"batch_size": 1, "sequence_length": 20,
                                               "past_sequence_length": 0}).cost()
    assert c.kv_cache == {"context": 20, "bytes": returned, "bytes_per_token": returned / 20,
                          "layers": 2}
    assert c.total["kv_cache_bytes"] == returned
    assert "KV cache" in c._repr_html_()


def test_kv_cache_bad_input():
    with pytest.raises(CacheError, match="no KV-cache inputs"):
        kv_cache_bytes("sample:convnet", 8)
    with pytest.raises(InputError, match="context must be an int >= 0, got -1"):
        kv_cache_bytes("sample:tiny_llm", -1)
    assert cost("sample:convnet").kv_cache is None


def test_generation_cost_phases():
    g = generation_cost("sample:tiny_llm", prompt=32, context=100)
    t = g.table()
    assert list(t.columns) == PHASE_COLUMNS and list(t.phase) == ["prefill", "decode"]
    pre, dec = t.iloc[0], t.iloc[1]
    assert (pre.new_tokens, pre.context, dec.new_tokens, dec.context) == (32, 32, 1, 100)
    assert pre.unknown_nodes == dec.unknown_nodes == 0
    assert pre.kv_cache_bytes == kv_cache_bytes("sample:tiny_llm", 32)
    assert dec.kv_cache_bytes == g.kv_cache_bytes == kv_cache_bytes("sample:tiny_llm", 100)
    assert g.kv_bytes_per_token == 512
    # Prefill is compute-bound work per weight byte, decode is not.
    assert pre.intensity > 5 * dec.intensity
    # The decode step's attention grows with the context, its MatMuls do not.
    def attn(context):
        d = generation_cost("sample:tiny_llm", prompt=4, context=context).decode.nodes
        return d.loc[d.op_type == "GroupQueryAttention", "macs"].sum(), \
            d.loc[d.op_type == "MatMul", "macs"].sum()
    (a1, m1), (a2, m2) = attn(50), attn(100)
    assert a2 == 2 * a1 and m1 == m2
    assert generation_cost("sample:tiny_llm", prompt=8).context == 9
    assert "Generation cost" in g._repr_html_()


def test_generation_cost_bad_input():
    with pytest.raises(CacheError, match="prompt of 200 tokens is longer than the model's "
                                         "maximum of 128 \\(cos_cache"):
        generation_cost("sample:tiny_llm", prompt=200)
    with pytest.raises(CacheError, match="context of 129 tokens"):
        generation_cost("sample:tiny_llm", prompt=8, context=129)
    with pytest.raises(InputError, match="prompt must be an int >= 1"):
        generation_cost("sample:tiny_llm", prompt=0)
    with pytest.raises(CacheError, match="no KV-cache inputs"):
        generation_cost("sample:transformer_block", prompt=8)


def test_int4_sample_costs_like_fp32_in_macs_with_5_32_of_the_weight_bytes():
    a = generation_cost("sample:tiny_llm", prompt=16)
    b = generation_cost("sample:tiny_llm_int4", prompt=16)
    assert a.decode.total["macs"] == b.decode.total["macs"]
    assert a.decode.total["params"] == b.decode.total["params"]
    # MatMul weights in 4 bits + a 32-bit scale per block of 32: 5 bits instead of 32 (the
    # embedding stays fp32 in both).
    mm = a.decode.nodes.loc[a.decode.nodes.op_type == "MatMul", "param_bytes"].sum()
    nb = b.decode.nodes.loc[b.decode.nodes.op_type == "MatMulNBits", "param_bytes"].sum()
    assert nb == mm * 5 // 32


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_genai_built_model_is_fully_costed(genai_model, precision):
    g = generation_cost(genai_model(precision), prompt=16, context=64)
    assert (g.table().unknown_nodes == 0).all()
    assert g.kv_cache_bytes == 4 * 2 * 2 * 64 * 16 * 4  # 4 layers, K and V, 2 heads, head 16
    ops = set(g.decode.nodes.op_type)
    assert {"GroupQueryAttention", "SkipSimplifiedLayerNormalization",
            "SimplifiedLayerNormalization"} <= ops
    assert ("MatMulNBits" in ops) == (precision == "int4")


def _gather_block_quantized(vocab: int = 16, hidden: int = 64, block: int = 32):
    # onnxruntime-genai's int4 embedding: a uint8 table packing two 4-bit weights per byte,
    # one float scale per block of the hidden axis
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (vocab, hidden // 2), dtype=np.uint8)
    scales = rng.random((vocab, hidden // block), dtype=np.float32)
    node = helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["emb"],
                            domain="com.microsoft", bits=4, block_size=block, gather_axis=0,
                            quantize_axis=1, name="embed")
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info("emb", F, [2, 3, hidden])],
                          [numpy_helper.from_array(data, "table"),
                           numpy_helper.from_array(scales, "scales")])
    return helper.make_model(g, opset_imports=MS)


def test_gather_block_quantized_params_and_flops_match_what_it_holds_and_computes():
    m = _gather_block_quantized()
    # onnxruntime runs it: [2, 3] ids -> [2, 3, 64] floats
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (emb,) = sess.run(None, {"ids": np.array([[0, 1, 2], [3, 4, 5]], np.int64)})
    assert emb.shape == (2, 3, 64)
    r = _row(cost(m), "GatherBlockQuantized")
    # one dequantizing subtract and multiply per gathered weight; 16 x 64 weights held
    assert r["known"] and r["flops"] == 2 * emb.size and r["macs"] == 0
    assert r["params"] == 16 * 64 and r["param_bytes"] == 16 * 32 + 16 * 2 * 4
    assert onnx_lab.open(m).summary()["num_params"] == 16 * 64
    # without the output's declared shape, it follows from the table, the ids and the packing
    m.graph.output[0].type.tensor_type.ClearField("shape")
    assert _row(cost(m), "GatherBlockQuantized")["flops"] == 2 * emb.size


def test_a_constant_counts_its_stored_dims_whatever_its_value_info_declares():
    # onnxruntime-genai's builder declares its shape constants scalars ('[1024, 32]': shape {})
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [3, 4])
    nodes = [helper.make_node("Constant", [], ["s"], value=shape, name="c"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="r")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [12])],
                          [helper.make_tensor_value_info("y", F, [3, 4])],
                          value_info=[helper.make_tensor_value_info("s", TensorProto.INT64, [])])
    m = helper.make_model(g, opset_imports=MS)
    c = cost(m)
    assert c.total["params"] == onnx_lab.open(m).summary()["num_params"] == 2


def test_gather_block_quantized_without_bits_is_four_bit_as_onnxruntime_reads_it():
    m = _gather_block_quantized()
    node = m.graph.node[0]
    keep = [a for a in node.attribute if a.name != "bits"]
    del node.attribute[:]
    node.attribute.extend(keep)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (emb,) = sess.run(None, {"ids": np.zeros((2, 3), np.int64)})
    r = _row(cost(m), "GatherBlockQuantized")
    assert r["flops"] == 2 * emb.size and r["params"] == 16 * 64


def _merged_with_empty_past(model: onnx.ModelProto) -> onnx.ModelProto:
    """optimum's merged layout on ``model`` (a with-past decoder): an If on
    ``use_cache_branch`` whose then_branch is the model and whose else_branch is the same
    graph reading an empty cache of its own (only the then_branch reads the cache inputs);
    the attention mask declared ``[batch, seq]`` though the cache branch reads past + new."""
    g = model.graph
    past = [v for v in g.input if v.name.startswith("past_key_values")]
    outs = [o.name for o in g.output]

    def body(tag: str, cached: bool) -> onnx.GraphProto:
        nodes = []
        if not cached:
            for v in past:
                dims = [d.dim_value if d.HasField("dim_value") else 1
                        for d in v.type.tensor_type.shape.dim]
                dims[2] = 0
                nodes.append(helper.make_node("Constant", [], [f"{v.name}_{tag}"], value=(
                    numpy_helper.from_array(np.zeros(dims, np.float32)))))
        rename = {o: f"{o}_{tag}" for o in outs}
        if not cached:
            rename.update({v.name: f"{v.name}_{tag}" for v in past})
        for t in g.initializer:  # small constants (axes, shape vectors) are the body's own,
            if np.prod(t.dims) <= 8:  # as in optimum's merged decoders
                nodes.append(helper.make_node("Constant", [], [f"{t.name}_{tag}"], value=t))
                rename[t.name] = f"{t.name}_{tag}"
        for n in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = f"{tag}/{n.name}"
            c.input[:] = [rename.get(i, i) for i in n.input]
            c.output[:] = [rename.get(o, o) for o in n.output]
            nodes.append(c)
        return helper.make_graph(nodes, tag, [], [
            helper.make_tensor_value_info(f"{o}_{tag}", F, None) for o in outs])

    node = helper.make_node("If", ["use_cache_branch"], outs, name="optimum::if",
                            then_branch=body("then", True), else_branch=body("else", False))
    inputs = [onnx.ValueInfoProto() for _ in g.input]
    for mine, v in zip(inputs, g.input):
        mine.CopyFrom(v)
        if v.name == "attention_mask":  # declared over the new tokens, as optimum does
            mine.type.tensor_type.shape.dim[1].dim_param = "seq"
    outputs = [onnx.ValueInfoProto() for _ in g.output]
    for mine, v in zip(outputs, g.output):
        mine.CopyFrom(v)
        if v.name.startswith("present"):  # a length of its own (the branches' differ)
            mine.type.tensor_type.shape.dim[2].dim_param = "present_length"
    merged = helper.make_graph([node], "merged", inputs + [
        helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
        outputs, list(g.initializer))
    m = helper.make_model(merged, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m


def test_generation_cost_of_a_merged_decoder_counts_the_branch_each_phase_runs():
    # optimum's merged decoder runs its no-cache branch for the prefill and its cache branch
    # for a decode step: both counted, each phase cost twice the with-past export's
    from llm_models import unfused_decoder
    plain = unfused_decoder()
    merged = _merged_with_empty_past(plain)
    sess = ort.InferenceSession(merged.SerializeToString())  # it runs
    assert {i.name for i in sess.get_inputs()} >= {"use_cache_branch"}
    g = generation_cost(onnx_lab.open(merged), prompt=8, context=20)
    for phase, runs, idle in ((g.prefill, "optimum::if/else_branch", "optimum::if/then_branch"),
                              (g.decode, "optimum::if/then_branch", "optimum::if/else_branch")):
        n = phase.nodes
        assert (n.loc[n.graph == idle, "calls"] == 0).all()
        assert (n.loc[n.graph == idle, ["flops", "macs"]].fillna(0) == 0).all().all()
        assert (n.loc[n.graph == runs, "calls"] == 1).all()
        assert phase.total["flops"] == pytest.approx(n.loc[n.graph == runs, "flops"].sum())
        assert phase.total["unknown_nodes"] == int((~n.loc[n.graph == runs, "known"]).sum())
        assert not any("both branches" in note for note in phase.notes)
    # cost() without switch values takes the branch the past length decides, as generated
    # feeds do (both branches had been counted: the with-past export's cost twice)
    for past, value in ((0, False), (5, True)):
        dims = {"batch": 1, "seq": 8 if not past else 1, "past_seq": past}
        c = cost(onnx_lab.open(merged), dims=dims)
        assert any(f"use_cache_branch={value}, as the past length decides" in n
                   for n in c.notes)
        one = cost(onnx_lab.open(merged), dims=dims, branches={"use_cache_branch": value})
        assert c.total["flops"] == one.total["flops"]
        if past:  # the cache branch costs what the with-past model does, its cache sized
            other = cost(onnx_lab.open(merged), dims=dims,
                         branches={"use_cache_branch": not value})
            assert other.total["flops"] != c.total["flops"]
            # (typed as declared, the mask over the new tokens only, its cache branch had
            # unknown nodes and present.* an unknown size)
            alone = cost(onnx_lab.open(plain), dims=dims)
            assert c.total["flops"] == alone.total["flops"]
            assert c.total["kv_cache_bytes"] == alone.total["kv_cache_bytes"] > 0
            assert c.total["unknown_nodes"] == alone.total["unknown_nodes"] == 0
    with pytest.raises(InputError, match="decide no If"):
        cost(onnx_lab.open(merged), dims={"batch": 1, "seq": 8, "past_seq": 0},
             branches={"nope": True})


def test_lab_cost_takes_branches_as_the_docs_show():
    # docs/profiling.md: lab.cost(dims=..., branches={"use_cache_branch": False})
    from llm_models import MERGED_DIMS, merged_kv_decoder

    lab = onnx_lab.open(merged_kv_decoder(), dims=MERGED_DIMS)
    for value in (False, True):
        assert lab.cost(branches={"use_cache_branch": value}).total == \
            cost(lab, branches={"use_cache_branch": value}).total


def test_an_if_no_given_switch_decides_is_still_said_to_count_both_branches():
    def body(tag):
        return helper.make_graph(
            [helper.make_node("MatMul", ["x", f"W{tag}"], [f"y{tag}"])], f"b{tag}", [],
            [helper.make_tensor_value_info(f"y{tag}", TensorProto.FLOAT, [2, 8])],
            [numpy_helper.from_array(np.ones((4, 8), np.float32), f"W{tag}")])
    nodes = [helper.make_node("If", ["flag"], ["y"], then_branch=body("t"),
                              else_branch=body("e"), name="if1"),
             helper.make_node("If", ["flag2"], ["z"], then_branch=body("t2"),
                              else_branch=body("e2"), name="if2")]
    g = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
        helper.make_tensor_value_info("flag2", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    c = cost(onnx_lab.open(m), branches={"flag": True})
    assert any("both branches of 1 other If" in n for n in c.notes)  # if2's, an upper bound
    assert not any("both branches" in n
                   for n in cost(onnx_lab.open(m), branches={"flag": True, "flag2": False}).notes)
