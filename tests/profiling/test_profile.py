"""profile(): real onnxruntime traces parsed, mapped back to model nodes, latency stats."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import control_flow_model
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.errors import DimError, InputError, ProviderError
from onnx_lab.profiling import Profile, parse_trace, profile
from onnx_lab.profiling._mapping import INSERTED_OPS
from onnx_lab.runtime.feeds import make_feeds
from onnx_lab.runtime.session import available_providers


@pytest.fixture(scope="module")
def convnet():
    return onnx_lab.open("sample:convnet")


@pytest.fixture(scope="module")
def prof_disable(convnet):
    return profile(convnet, runs=3, warmup=1, opt_level="disable", providers="cpu")


@pytest.fixture(scope="module")
def prof_all(convnet):
    return profile(convnet, runs=3, warmup=1, opt_level="all", providers="cpu")


def test_disable_maps_every_model_node(convnet, prof_disable):
    p = prof_disable
    assert isinstance(p, Profile)
    nodes = p.nodes
    assert set(nodes.node_id) == set(convnet.index.entries)
    assert nodes.mapped.all()
    assert set(nodes.how) == {"name"}
    assert (nodes.calls == 1).all()
    assert (nodes.provider == "CPUExecutionProvider").all()
    by_id = nodes.set_index("node_id")
    for nid, e in convnet.index.entries.items():
        assert by_id.loc[nid, "op_type"] == e.node.op_type
        assert by_id.loc[nid, "components"] == (nid,)
    assert math.isclose(nodes.share.sum(), 1.0, rel_tol=1e-9)
    assert (nodes.median_ms <= nodes.p90_ms + 1e-12).all()
    assert (nodes.total_ms > 0).all()


def test_ops_table_and_shares(prof_disable, convnet):
    ops = prof_disable.ops
    assert math.isclose(ops.share.sum(), 1.0, rel_tol=1e-9)
    assert ops.set_index("op_type").loc["Conv", "count"] == 3
    assert ops["count"].sum() == len(convnet.index.entries)
    assert list(ops.columns) == ["session", "provider", "op_type", "count", "calls", "total_ms",
                                 "share", "mean_ms"]
    assert np.allclose(ops.total_ms, ops.mean_ms * ops.calls)


def test_warmup_runs_dropped_and_latency(prof_disable):
    p = prof_disable
    # Kernels of the warm-up run (index 0) are gone; the 3 timed runs remain.
    assert sorted(p.kernels.run.unique()) == [1, 2, 3]
    assert len(p.kernels) == 3 * len(p.nodes)
    lat = p.latency
    assert len(lat) == 4 and lat.warmup.tolist() == [True, False, False, False]
    assert (lat.wall_ms > 0).all()
    st = p.latency_stats.iloc[0]
    assert st.runs == 3
    assert st.min_ms <= st.p50_ms <= st.p90_ms <= st.p99_ms <= st.max_ms
    assert math.isclose(st.mean_ms, lat.wall_ms[1:].mean())
    # Kernel time fits inside ORT's run time, which fits inside the Python wall time.
    assert st.kernel_ms <= st.ort_run_ms * 1.05 + 0.01
    s = p.session.iloc[0]
    assert s.load_ms > 0 and s.init_ms > 0 and s.create_ms >= s.init_ms
    assert s.nodes_run == len(p.nodes)


def test_all_level_fused_and_inserted_nodes(convnet, prof_all):
    nodes = prof_all.nodes
    assert len(nodes) < len(convnet.index.entries)  # ORT fused nodes away
    fused = nodes.loc[nodes.how == "fused"]
    assert len(fused) >= 3
    covered = {c for comps in nodes.components for c in comps}
    # Every Conv and BatchNormalization of the model ran inside some ORT node.
    for nid, e in convnet.index.entries.items():
        if e.node.op_type in ("Conv", "BatchNormalization"):
            assert nid in covered, nid
    for r in nodes.itertuples():
        if r.mapped:
            assert r.node_id in convnet.index.entries
            assert r.node_id in r.components
        else:
            # Only nodes ORT inserted itself stay unmapped, under their ORT name.
            assert r.op_type in INSERTED_OPS and r.how == "inserted"
            assert r.node_id == r.ort_name and r.components == ()
    # Fused Convs keep a Conv as their node id.
    for r in fused.itertuples():
        if r.op_type in ("Conv", "FusedConv"):
            assert convnet.index.node(r.node_id).op_type == "Conv"
    assert math.isclose(nodes.share.sum(), 1.0, rel_tol=1e-9)


def test_transformer_layernorm_fusion_maps_components():
    p = profile("sample:transformer_block", dims={"batch": 1, "seq": 8}, runs=2, warmup=1,
                opt_level="extended", providers="cpu")
    ln = p.nodes.loc[p.nodes.op_type == "LayerNormalization"]
    assert len(ln) == 1
    comps = ln.components.iloc[0]
    lab = onnx_lab.open("sample:transformer_block")
    ops = {lab.index.node(c).op_type for c in comps}
    assert {"ReduceMean", "Sub", "Pow", "Sqrt", "Div"} <= ops
    assert ln.node_id.iloc[0] in comps


def _unnamed_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Abs", ["b"], ["c"], name="abs"),
             helper.make_node("Relu", ["c"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_unnamed_nodes_map_by_index():
    lab = onnx_lab.open(_unnamed_model())
    p = profile(lab, runs=2, warmup=0, opt_level="disable", providers="cpu")
    assert p.nodes.mapped.all()
    assert set(p.nodes.node_id) == set(lab.index.entries) == {"Relu_0", "Neg_1", "abs",
                                                              "Relu_3"}


def _unnamed_after_constants():
    """Unnamed nodes behind Constant nodes (an ORT transformer-fused BERT's Casts follow a
    Constant): ORT turns the Constants into initializers, so its names count without them."""
    c = [helper.make_node("Constant", [], [f"c{i}"],
                          value=helper.make_tensor(f"v{i}", TensorProto.FLOAT, [1], [2.0]))
         for i in range(2)]
    nodes = [c[0], helper.make_node("Mul", ["x", "c0"], ["a"]),         # ORT "Mul_0"
             helper.make_node("Sigmoid", ["a"], ["b"]),                  # "Sigmoid_1"
             c[1], helper.make_node("Mul", ["b", "c1"], ["e"]),          # "Mul_2"
             helper.make_node("Exp", ["e"], ["y"])]                      # "Exp_3"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("level", ["disable", "all"])
def test_unnamed_nodes_after_constants_map_to_themselves(level):
    # ORT named these Mul_0, Sigmoid_1, Mul_2, Exp_3 (node indexes without the Constants);
    # their ids are Mul_1, Sigmoid_2, Mul_4, Exp_5: every one was 'unmapped' and coverage()
    # called all six nodes 'removed'; with a Constant before the first of three Casts, ORT's
    # "Cast_1" was taken for the model's Cast_1 (the first Cast's time given to the second)
    lab = onnx_lab.open(_unnamed_after_constants())
    p = profile(lab, runs=2, warmup=1, opt_level=level, providers="cpu")
    pairs = dict(zip(p.nodes.ort_name, p.nodes.node_id))
    assert pairs == {"Mul_0": "Mul_1", "Sigmoid_1": "Sigmoid_2", "Mul_2": "Mul_4",
                     "Exp_3": "Exp_5"}
    assert p.nodes.mapped.all() and set(p.nodes.how) == {"index"}
    for r in p.nodes.itertuples():
        assert lab.index.node(r.node_id).op_type == r.op_type
    status = p.coverage().set_index("node_id").status.to_dict()
    assert {k: v for k, v in status.items() if not k.startswith("Constant")} == {
        "Mul_1": "ran", "Sigmoid_2": "ran", "Mul_4": "ran", "Exp_5": "ran"}


def _casts_after_a_constant():
    k = helper.make_node("Constant", [], ["k"], value=helper.make_tensor(
        "kv", TensorProto.INT64, [], [0]))
    casts = [helper.make_node("Cast", [n], [f"{n}32"], to=TensorProto.INT32)
             for n in ("a", "b", "c")]
    adds = [helper.make_node("Add", ["a32", "b32"], ["s"], name="add1"),
            helper.make_node("Add", ["s", "c32"], ["y"], name="add2")]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [8]) for n in "abc"]
    g = helper.make_graph([k, *casts, *adds], "g", ins,
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unnamed_node_is_not_taken_for_the_node_ort_names_alike():
    lab = onnx_lab.open(_casts_after_a_constant())
    p = profile(lab, runs=2, warmup=1, opt_level="disable", providers="cpu")
    pairs = dict(zip(p.nodes.ort_name, p.nodes.node_id))
    assert pairs["Cast_0"] == "Cast_1" and pairs["Cast_1"] == "Cast_2" \
        and pairs["Cast_2"] == "Cast_3"
    assert p.coverage().set_index("node_id").status["Cast_3"] == "ran"


def _fp16_convnet():
    rng = np.random.default_rng(0)
    h = TensorProto.FLOAT16
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float16), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float16), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["b"], name="c2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["y"], name="flat")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", h, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", h, [1, 8 * 16 * 16])], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_float16_nodes_run_in_float32_map_to_themselves():
    # onnxruntime's CPU has no float16 Conv: it runs it in float32 between Casts it inserts
    # ('InsertedPrecisionFreeCast_x', even at 'disable') and renames what it touches
    # ('InsertedPrecisionFreeCast_a_nchwc' for c1 at 'all'). The Convs' time (56% of a
    # float16 ResNet's) was unmapped, c1 was a member of the MaxPool and an inserted Cast was
    # taken for the Relu
    lab = onnx_lab.open(_fp16_convnet())
    for level in ("disable", "all"):
        p = profile(lab, runs=2, warmup=1, opt_level=level, providers="cpu")
        nodes = p.nodes
        assert "unmapped" not in set(nodes.how), nodes[["ort_name", "how"]]
        casts = nodes.loc[nodes.ort_name.str.startswith("InsertedPrecisionFreeCast_")
                          & (nodes.op_type == "Cast")]
        assert len(casts) and (casts.how == "inserted").all() and not casts.mapped.any()
        convs = nodes.loc[nodes.op_type == "Conv"].set_index("node_id")
        assert set(convs.index) == {"c1", "c2"}
        assert convs.loc["c1", "components"] == ("c1",)
        status = p.coverage().set_index("node_id").status
        assert status["c1"] == status["c2"] == status["pool"] == "ran"
        if level == "all":
            assert convs.loc["c2", "components"] == ("c2", "relu")  # the NCHWc Conv + Relu


def test_duplicated_dequantize_maps_to_its_original():
    # a QDQ DequantizeLinear read by two quantized Convs is copied by onnxruntime
    # ('x_DequantizeLinear/duplicated'), at every level: the copy was unmapped
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                                  f"w{i}") for i in (1, 2)]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["x", "w2"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], ws)
    q = onnx_lab.to_int8_static(onnx_lab.open(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)])), n=2)
    for level in ("disable", "all"):
        p = profile(q, runs=2, warmup=1, opt_level=level, providers="cpu")
        rows = p.nodes.loc[p.nodes.ort_name.str.endswith("/duplicated")]
        assert len(rows) == 1
        r = rows.iloc[0]
        assert r.mapped and r.how == "renamed"
        assert r.node_id == r.ort_name.removesuffix("/duplicated") == "x_DequantizeLinear"
        assert p.coverage().set_index("node_id").status["x_DequantizeLinear"] == "ran"


def test_control_flow_bodies_profiled():
    p = profile(control_flow_model(), runs=2, warmup=1, opt_level="disable", providers="cpu")
    assert len(p.nodes) > 0
    assert math.isclose(p.nodes.share.sum(), 1.0, rel_tol=1e-9)


def test_the_branch_not_taken_is_not_run_not_removed():
    # silero-vad at 16 kHz: all 342 nodes of the 8 kHz branch were "removed" (optimized away)
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"], name="then_neg"),
                              helper.make_node("Identity", ["t"], ["t2"], name="then_id")],
                             "then", [], [helper.make_tensor_value_info("t2", TensorProto.FLOAT,
                                                                        [4])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"], name="else_abs")], "else",
                              [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                                            else_branch=other)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.ones(4, np.float32), "c": np.array(True)}
    p = profile(m, runs=2, warmup=1, feeds=feeds, opt_level="disable", providers="cpu")
    status = p.coverage().set_index("node_id").status.to_dict()
    assert status["else_abs"] == "not run"
    assert status["then_neg"] == "ran" and status["if"] == "ran"


@pytest.mark.parametrize("level", ["disable", "all"])
def test_loop_body_nodes_mapped_with_calls_per_run(level):
    lab = onnx_lab.open("sample:control_flow")
    p = profile(lab, runs=2, warmup=1, opt_level=level, providers="cpu")
    nodes = p.nodes.set_index("node_id")
    assert p.nodes.mapped.all()
    # Unnamed body nodes map through ORT's "{op}_{position}" names to their graph path ids.
    assert nodes.loc["Loop_3/body/Identity_0", "how"] == "index"
    assert nodes.loc["Loop_3/body/Identity_0", "calls"] == 3  # once per loop iteration
    assert nodes.loc["Loop_3", "calls"] == 1
    assert set(p.nodes.node_id) <= set(lab.index.entries)


def test_feeds_list_progress_and_keep_trace(convnet):
    feeds = make_feeds(convnet, n=2, seed=3)
    calls = []
    p = profile(convnet, runs=3, warmup=1, feeds=feeds, providers="cpu",
                progress=lambda done, total, label: calls.append((done, total, label)),
                keep_trace=True)
    assert calls[-1][:2] == (4, 4) and calls[0][0] == 1
    path = Path(p.trace_paths["CPUExecutionProvider"])
    assert path.is_file()
    t = parse_trace(path, warmup=1)
    assert len(t.kernels) == len(p.kernels)
    path.unlink()
    path.parent.rmdir()


def test_default_providers_skip_missing_device_providers(convnet):
    if "CUDAExecutionProvider" in available_providers():
        pytest.skip("CUDA is installed here")
    p = profile(convnet, runs=1, warmup=0)
    assert list(p.latency_stats.session) == ["CPUExecutionProvider"]
    assert any("CUDAExecutionProvider is not available" in n and "skipped" in n for n in p.notes)


def test_cuda_requested_but_missing(convnet):
    if "CUDAExecutionProvider" in available_providers():
        pytest.skip("CUDA is installed here")
    with pytest.raises(ProviderError, match="installed: .*CPUExecutionProvider"):
        profile(convnet, providers="cuda", runs=1)


@pytest.mark.parametrize("kw, err, match", [
    ({"providers": "nosuch"}, ProviderError, "Unknown execution provider 'nosuch'"),
    ({"runs": 0}, InputError, "runs must be a positive int"),
    ({"runs": -3}, InputError, "runs must be a positive int"),
    ({"runs": 2.5}, InputError, "runs must be a positive int"),
    ({"warmup": -1}, InputError, "warmup must be an int >= 0"),
    ({"opt_level": "max"}, InputError, "Unknown optimization level 'max'"),
])
def test_bad_input(convnet, kw, err, match):
    with pytest.raises(err, match=match):
        profile(convnet, **kw)


def test_unresolved_dims():
    with pytest.raises(DimError, match="dims=") as e:
        profile("sample:transformer_block", runs=1, warmup=0)
    assert "batch" in str(e.value) and "seq" in str(e.value)


def test_lab_profile_uses_lab_dims_and_views():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 2, "seq": 4})
    p = lab.profile(runs=2, warmup=1, providers="cpu")
    assert p.kernels.op_type.notna().all()
    html = p._repr_html_()
    assert "latency" in html and "top nodes" in html
    fig = p.plot(top=5)
    assert len(fig.axes) >= 3
    d = p.to_dict(top=3)
    assert set(d) >= {"runs", "warmup", "latency", "session", "ops", "nodes", "notes"}
    assert len(d["nodes"]) == 3
    ov = p.overlay()
    assert ov.name == "time_ms" and set(ov.index) <= set(lab.index.entries)


def test_render_overlay(prof_all, convnet):
    r = prof_all.render()
    assert r.dot and ("time_ms" in r.dot or r.svg)
    ov = prof_all.overlay()
    assert (ov > 0).all()


def test_coverage(convnet, prof_all, prof_disable):
    cov = prof_disable.coverage()
    assert len(cov) == len(convnet.index.entries) and set(cov.status) == {"ran"}
    cov = prof_all.coverage().set_index("node_id")
    assert cov.loc["/stem/identity/Identity", "status"] == "removed"
    assert cov.loc["/head/dropout/Dropout", "status"] == "removed"
    assert np.isnan(cov.loc["/head/dropout/Dropout", "time_ms"])
    assert cov.loc["/stem/bn/BatchNormalization", "status"] == "fused"
    assert cov.loc["/stem/conv/Conv", "status"] == "ran"
    # Members of one fusion share the ORT node and its time.
    assert cov.loc["/stem/bn/BatchNormalization", "ort_name"] == \
        cov.loc["/stem/conv/Conv", "ort_name"]


def test_the_profile_drawing_shows_the_sizes_the_runs_had():
    # the Profiler's graph showed "batch×..." where the Lab's dims gave batch=1
    import re

    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 2, "seq": 5})
    p = onnx_lab.profile(lab, runs=2, warmup=0, progress=False)
    assert p.dims == {"batch": 2, "seq": 5}
    shapes = set(re.findall(r"[0-9a-z]+×[0-9a-z]+×[0-9]+", p.render(collapse=None).svg))
    assert "2×5×32" in shapes and not any(s.startswith("batch") for s in shapes), shapes


def _merged_same_names() -> onnx.ModelProto:
    """``merged_kv_decoder(shared=True)`` with both If branches naming their nodes alike, as
    optimum's merged decoders do (``/model/layers.0/...`` in each)."""
    from llm_models import merged_kv_decoder

    m = merged_kv_decoder(shared=True)
    for a in m.graph.node[0].attribute:
        for n in a.g.node:
            n.name = "/dec/" + n.name.split("/", 2)[2]
    return m


@pytest.mark.parametrize("opt_level", ["disable", "all"])
def test_a_merged_decoders_nodes_map_to_the_branch_that_ran(opt_level):
    # ORT's trace names a body node by its name alone: with names both branches hold, every
    # node mapped to no node at 'disable' and to the no-cache branch at 'all', whichever ran
    from llm_models import MERGED_DIMS

    lab = onnx_lab.open(_merged_same_names(), dims=MERGED_DIMS)
    idx = lab.model.index
    feeds = make_feeds(lab)
    for use_cache, branch in ((True, "then_branch"), (False, "else_branch")):
        feeds["use_cache_branch"] = np.array([use_cache])
        p = onnx_lab.profile(lab, feeds=feeds, runs=2, warmup=0, opt_level=opt_level)
        body = p.nodes[p.nodes["op_type"] != "If"]
        assert len(body) and body["mapped"].all(), body[["ort_name", "how"]]
        assert {idx.entries[n].graph.rsplit("/", 1)[-1] for n in body["node_id"]} == {branch}
        if use_cache:  # the cache's Concat is the cache branch's own
            assert "/dec/kv/Concat" in set(body["ort_name"])


@pytest.mark.parametrize("opt_level", ["basic", "all"])
def test_a_fusion_in_the_branch_that_ran_takes_none_of_the_other_branchs_nodes(opt_level):
    # ORT's optimized graph holds both branches, whose nodes share names (optimum's merged
    # decoders); the outputs of one branch's node were read for the other's: a merged
    # Llama's cache Concat (use_cache_branch=True, 'basic') was 'fused' with the no-cache
    # branch's Concat, and the 585 nodes of that branch, which did not run, read 'removed'
    def branch(tag):
        return helper.make_graph(
            [helper.make_node("Concat", ["x", "x"], [f"{tag}_cat"], name="blk/Concat", axis=0),
             helper.make_node("Relu", [f"{tag}_cat"], [f"{tag}_out"], name="blk/Relu")],
            tag, [], [helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT, [4, 3])])

    g = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="sw", then_branch=branch("t"),
                          else_branch=branch("e"))], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    idx = lab.model.index
    x = np.ones((2, 3), np.float32)
    for flag, ran, other in ((True, "then_branch", "else_branch"),
                             (False, "else_branch", "then_branch")):
        p = onnx_lab.profile(lab, feeds={"x": x, "flag": np.array([flag])}, runs=2, warmup=0,
                             opt_level=opt_level, progress=False)
        members = {c for r in p.nodes.itertuples() if r.mapped for c in r.components}
        assert {idx.entries[c].graph.rsplit("/", 1)[-1] for c in members} <= {"", ran}, \
            p.nodes[["ort_name", "how", "components"]]
        cov = p.coverage().set_index("node_id")
        graphs = cov.index.map(lambda n: idx.entries[n].graph.rsplit("/", 1)[-1])
        assert set(cov.status[graphs == other]) == {"not run"}
        assert set(cov.status[graphs == ran]) == {"ran"}


@pytest.mark.parametrize("opt_level", ["basic", "all"])
def test_a_float16_model_maps_what_its_float32_twin_maps(opt_level):
    # ORT runs a float16 node without a CPU kernel in float32 and renames the tensors it
    # makes ('InsertedPrecisionFreeCast_y0'): the node making the model's tensor was read by
    # its renamed output, so the Reshape after a MatMul+Add fused into a Gemm was unmapped
    # and the Add read 'removed' in float16 (ran, in float32)
    def model(dtype, np_dtype):
        rng = np.random.default_rng(0)
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["mm"], name="/fc/MatMul"),
             helper.make_node("Add", ["mm", "b"], ["y0"], name="/fc/Add"),
             helper.make_node("Relu", ["y0"], ["y"], name="/act/Relu")], "g",
            [helper.make_tensor_value_info("x", dtype, [2, 4, 8])],
            [helper.make_tensor_value_info("y", dtype, [2, 4, 8])],
            [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np_dtype), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np_dtype), "b")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    seen = []
    for dtype, np_dtype in ((TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)):
        p = onnx_lab.profile(model(dtype, np_dtype), runs=2, warmup=0, opt_level=opt_level,
                             progress=False)
        n = p.nodes.loc[p.nodes.how != "inserted"]
        seen.append((sorted(zip(n.ort_name, n.node_id, n.how)),
                     p.coverage().set_index("node_id").status.to_dict()))
    assert seen[1] == seen[0]
    # the Add is the Gemm's bias (MatMulAddFusion); the Reshape ORT adds after the Gemm
    # makes its tensor and was taken for it ('ran')
    assert seen[1][1]["/fc/Add"] == "fused"


def test_the_reshapes_ort_adds_around_a_fused_gemm_are_inserted():
    # a MatMul of a rank-3 input + Add: ORT's MatMulAddFusion runs a Gemm between Reshapes
    # it adds ('gemm_input_reshape'), which read 'unmapped' (72 rows on a BERT-base trace)
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])],
        [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = onnx_lab.profile(m, runs=2, warmup=1, opt_level="basic")
    rows = p.nodes.set_index("node_id")
    if "gemm_input_reshape" not in rows.index:
        pytest.skip("this onnxruntime fuses no rank-3 MatMul + Add into a Gemm")
    assert rows.loc["gemm_input_reshape", "how"] == "inserted"
    assert not rows["how"].eq("unmapped").any(), rows[["op_type", "how"]]
    # the Add is a member of the Gemm (the Reshape after it, making its tensor, was taken for it)
    assert rows.loc["mm", "how"] == "fused" and rows.loc["mm", "components"] == ("mm", "add")
    assert p.coverage().set_index("node_id").status.to_dict() == {"mm": "ran", "add": "fused"}


def _qdq_conv(named: bool = True) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv (DQ weights) -> Q -> DQ: at 'all' onnxruntime runs the Conv as a
    channels-last QLinearConv between Transposes it adds ('Transpose', 'Transpose_token_0')."""
    rng = np.random.default_rng(0)
    name = (lambda s: s) if named else (lambda s: "")
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name=name("q_in")),
         helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name=name("dq_in")),
         helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wd"], name=name("dq_w"),
                          axis=0),
         helper.make_node("Conv", ["xd", "wd"], ["c"], name=name("conv"), pads=[1, 1, 1, 1]),
         helper.make_node("QuantizeLinear", ["c", "s2", "zp"], ["cq"], name=name("q_out")),
         helper.make_node("DequantizeLinear", ["cq", "s2", "zp"], ["y"], name=name("dq_out"))],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(np.array(0.02, np.float32), "s"),
         numpy_helper.from_array(np.array(128, np.uint8), "zp"),
         numpy_helper.from_array(rng.integers(-100, 100, (8, 3, 3, 3)).astype(np.int8), "wq"),
         numpy_helper.from_array(np.full(8, 0.01, np.float32), "ws"),
         numpy_helper.from_array(np.zeros(8, np.int8), "wzp"),
         numpy_helper.from_array(np.array(0.05, np.float32), "s2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_the_transposes_ort_adds_around_a_channels_last_qdq_conv_are_inserted():
    # the Transposes read 'unmapped' ('Transpose'), or the model's QuantizeLinear whose
    # tensor the one after the QLinearConv makes ('Transpose_token_0' read 'renamed' q_out,
    # q_out 'ran' there and the QLinearConv lost it)
    p = onnx_lab.profile(_qdq_conv(), runs=2, warmup=1, opt_level="all", providers="cpu")
    nodes = p.nodes.set_index("ort_name")
    tr = nodes.loc[nodes.op_type == "Transpose"]
    if not len(tr):
        pytest.skip("this onnxruntime runs no channels-last QLinearConv")
    assert set(tr.how) == {"inserted"} and not tr.mapped.any(), tr[["how", "node_id"]]
    assert not nodes["how"].eq("unmapped").any(), nodes[["op_type", "how"]]
    qconv = nodes.loc[nodes.op_type == "QLinearConv"].iloc[0]
    assert qconv.how == "fused"
    assert set(qconv.components) == {"dq_in", "dq_w", "conv", "q_out"}
    status = p.coverage().set_index("node_id").status
    assert status["q_out"] == "fused" and "removed" not in set(status)


def test_coverage_sums_the_ort_nodes_of_one_model_node_as_overlay_does():
    # onnxruntime copies a DequantizeLinear that two quantized Convs read
    # ('xd_dq/duplicated'): both copies are kernels that ran, rows of the one model node.
    # overlay() summed them and coverage() kept one
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8), f"w{i}")
         for i in (1, 2)]
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="xq"),
         helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="xd_dq"),
         *[helper.make_node("DequantizeLinear", [f"w{i}", "ws"], [f"wd{i}"], name=f"w{i}_dq")
           for i in (1, 2)],
         helper.make_node("Conv", ["xd", "wd1"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["xd", "wd2"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        [*w, numpy_helper.from_array(np.array(0.02, np.float32), "s"),
         numpy_helper.from_array(np.array(128, np.uint8), "zp"),
         numpy_helper.from_array(np.array(0.01, np.float32), "ws")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    p = profile(m, runs=3, warmup=1, opt_level="disable", providers="cpu")
    rows = p.nodes.loc[p.nodes.node_id == "xd_dq"]
    if len(rows) < 2:
        pytest.skip("this onnxruntime does not copy a DequantizeLinear two nodes read")
    assert set(rows.ort_name) == {"xd_dq", "xd_dq/duplicated"}
    cov = p.coverage().set_index("node_id")
    ov = p.overlay()
    assert cov.loc["xd_dq", "status"] == "ran"
    assert cov.loc["xd_dq", "time_ms"] == pytest.approx(rows.total_ms.sum())
    ran = cov.loc[cov.status == "ran"]
    assert set(ran.index) == set(ov.index)
    assert np.allclose(ran.time_ms, ov[ran.index])


@pytest.mark.parametrize("opt_level", ["disable", "all"])
@pytest.mark.parametrize("named", [True, False])
def test_a_float16_node_run_as_its_function_body_maps_to_that_node(opt_level, named, tmp_path):
    # onnxruntime's CPU has no float16 Softmax or HardSwish kernel: it runs their ONNX
    # function bodies, unnamed nodes ('ReduceMax_3', 'Sub_4', ... 'HardSigmoid_8', 'Mul_9')
    # that read 'unmapped', and coverage() called the nodes 'removed'
    import json

    import onnxruntime as ort

    name = (lambda s: s) if named else (lambda s: "")
    g = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["a"], name=name("sm_last"), axis=-1),
         helper.make_node("HardSwish", ["a"], ["b"], name=name("hs")),
         helper.make_node("Softmax", ["b"], ["y"], name=name("sm_first"), axis=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    ids = ("sm_last", "hs", "sm_first") if named else ("Softmax_0", "HardSwish_1", "Softmax_2")
    # the truth from onnxruntime's own trace: the reductions of the Softmax over the last
    # axis make [2, 1], those over axis 0 [1, 8]
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "t")
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                                   if opt_level == "disable"
                                   else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.ones((2, 8), np.float16)})
    events = json.loads(Path(sess.end_profiling()).read_text())
    shapes = {e["name"].removesuffix("_kernel_time"): e["args"]["output_type_shape"][0]
              for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
    truth = {n: ids[0] if list(s.values())[0] == [2, 1] else ids[2]
             for n, s in shapes.items() if n.startswith(("ReduceMax_", "ReduceSum_"))}
    if not truth:
        pytest.skip("this onnxruntime has a float16 Softmax kernel")
    p = profile(m, runs=2, warmup=1, opt_level=opt_level, providers="cpu")
    nodes = p.nodes.set_index("ort_name")
    assert not nodes.how.eq("unmapped").any(), nodes[["op_type", "how"]]
    for ort_name, nid in truth.items():
        assert nodes.loc[ort_name, "node_id"] == nid and nodes.loc[ort_name, "how"] == "renamed"
    hs = nodes.loc[nodes.node_id == ids[1]]
    assert set(hs.op_type) == {"HardSigmoid", "Mul"}
    assert nodes.loc[nodes.mapped].groupby("node_id").size().to_dict() == {
        ids[0]: 5, ids[1]: 2, ids[2]: 5}
    cov = p.coverage().set_index("node_id")
    assert set(cov.status) == {"ran"}
    assert cov.loc[ids[1], "time_ms"] == pytest.approx(hs.total_ms.sum())


def _matmul_add_relu(named: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    name = (lambda s: s) if named else (lambda s: "")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name=name("mm")),
         helper.make_node("Add", ["m", "b"], ["a"], name=name("add")),
         helper.make_node("Relu", ["a"], ["y"], name=name("relu"))], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("build", "level", "primary"), [
    (_matmul_add_relu, "basic", 0),  # Gemm of MatMul + Add: the MatMul
    (_qdq_conv, "all", 3),  # QLinearConv of DQ, DQ, Conv, Q: the Conv
])
def test_the_primary_of_a_fusion_is_the_same_member_named_or_not(build, level, primary):
    # the member reading 'ran' came from the name ORT kept (the MatMul, whose name the Gemm
    # carries) where the model is named, and from the tensor the fused node makes (the Add)
    # where it is not: the same fusion read 'ran' on the MatMul in one and the Add in the other
    seen = []
    for named in (True, False):
        m = build(named)
        pos = {(n.name or f"{n.op_type}_{i}"): i for i, n in enumerate(m.graph.node)}
        p = profile(m, runs=2, warmup=1, opt_level=level, providers="cpu")
        fused = p.nodes.loc[p.nodes.how == "fused"]
        assert len(fused) == 1, p.nodes[["ort_name", "how", "components"]]
        r = fused.iloc[0]
        status = p.coverage().set_index("node_id").status
        seen.append((pos[r.node_id], tuple(pos[c] for c in r.components),
                     {pos[k]: v for k, v in status.items()}))
    assert seen[0] == seen[1]
    assert seen[0][0] == primary and seen[0][2][primary] == "ran"


@pytest.mark.parametrize("level", ["disable", "basic"])
def test_a_constant_is_no_member_of_the_node_reading_it(level):
    # ORT makes Constant nodes initializers when it loads a graph, and at 'basic' shares
    # alike scalars under a name of its own ('ortshared_1_0_1_0_token_0'): the Mul and Add
    # reading them read 'fused' with their Constants (the Constants 'fused') at 'basic' and
    # 'name' at 'disable' (the Constants 'removed')
    two = numpy_helper.from_array(np.array(2.0, np.float32))
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["k1"], name="k1", value=two),
         helper.make_node("Mul", ["x", "k1"], ["m"], name="mul"),
         helper.make_node("Constant", [], ["k2"], name="k2", value=two),
         helper.make_node("Add", ["m", "k2"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = profile(m, runs=2, warmup=1, opt_level=level, providers="cpu")
    rows = p.nodes.set_index("node_id")
    assert rows.loc[["mul", "add"], "how"].tolist() == ["name", "name"], rows
    assert rows.loc["mul", "components"] == ("mul",)
    assert p.coverage().set_index("node_id").status.to_dict() == {
        "k1": "removed", "mul": "ran", "k2": "removed", "add": "ran"}


def _qdq_residual_cnn(tmp_path: Path) -> onnx.ModelProto:
    """Conv -> Relu -> Conv, an Add of both, GlobalAveragePool, Flatten, Gemm, Softmax,
    quantized by onnxruntime's static quantizer in QDQ format (every node unnamed, as
    onnx-caffe2 exports and the onnx package's light models are)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(0)
    w = {k: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, k)
         for k, s in [("w1", (8, 3, 3, 3)), ("b1", (8,)), ("w2", (8, 8, 3, 3)), ("b2", (8,)),
                      ("fw", (8, 4)), ("fb", (4,))]}
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["r1", "c2"], ["s"]),
         helper.make_node("GlobalAveragePool", ["s"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "fw", "fb"], ["g"]),
         helper.make_node("Softmax", ["g"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], list(w.values()))
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)

    class Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
                         for _ in range(2)]

        def get_next(self):
            return self.left.pop() if self.left else None

    quantize_static(str(src), str(dst), Feeds(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    m = onnx.load(dst)
    for n in m.graph.node:
        n.name = ""
    return m


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_an_unnamed_qdq_model_maps_as_its_named_copy(level, tmp_path):
    # onnxruntime writes a node it makes from an unnamed one without a name (the trace calls
    # it 'QLinearAdd_37', by an index the written graph does not hold) or names it by the
    # empty name ('_token_2': a channels-last QLinearConv; '/duplicated': a DequantizeLinear
    # it copies), and the optimized graph's lookup by name could not find it: at 'extended'
    # 7 calls were unmapped and 30 of the 34 model nodes 'removed', at 'disable' the copied
    # DequantizeLinear was unmapped, where the named copy maps them all
    unnamed = _qdq_residual_cnn(tmp_path)
    named = onnx.ModelProto()
    named.CopyFrom(unnamed)
    for i, n in enumerate(named.graph.node):
        n.name = f"n{i}"
    seen = []
    for m in (named, unnamed):
        pos = {(n.name or f"{n.op_type}_{i}"): i for i, n in enumerate(m.graph.node)}
        p = profile(m, runs=2, warmup=1, opt_level=level, providers="cpu")
        nodes = p.nodes
        assert not nodes.how.eq("unmapped").any(), nodes[["ort_name", "op_type", "how"]]
        rows = {(pos[r.node_id], tuple(pos[c] for c in r.components))
                for r in nodes.loc[nodes.mapped].itertuples()}
        status = {pos[k]: v for k, v in p.coverage().set_index("node_id").status.items()}
        seen.append((rows, status))
    assert seen[1] == seen[0]
    assert "removed" not in set(seen[1][1].values())


def test_a_batchnormalization_fused_into_an_unnamed_conv_is_its_member():
    # ORT keeps an unnamed Conv it fuses a BatchNormalization into ('Conv_0', found by its
    # node index) and the Conv makes the BatchNormalization's tensor: the BatchNormalization
    # read 'removed' where the named copy reads it 'fused'
    rng = np.random.default_rng(0)
    arr = {"w": (4, 3, 3, 3), "sc": (4,), "bi": (4,), "mu": (4,)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k)
             for k, s in arr.items()]
    inits.append(numpy_helper.from_array(np.ones(4, np.float32), "va"))
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "sc", "bi", "mu", "va"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = profile(m, runs=2, warmup=1, opt_level="basic", providers="cpu")
    assert p.coverage().set_index("node_id").status.to_dict() == {
        "Conv_0": "ran", "BatchNormalization_1": "fused"}
    assert p.nodes.set_index("node_id").loc["Conv_0", "components"] == (
        "Conv_0", "BatchNormalization_1")
