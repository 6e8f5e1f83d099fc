"""Source map: the PyTorch module and line of every node, kept through every step."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.core.source_map import (
    SCOPES_KEY,
    SOURCES_KEY,
    STACK_KEY,
    group_by_module,
    module_at,
    source_share,
    user_frame,
)
from onnx_lab.render.details import node_details, node_details_html

_TRACE = ('File "/home/me/net.py", line 21, in forward\n    y = self.block(x)\n'
          '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1775, '
          'in _call_impl\n    return forward_call(*args, **kwargs)\n'
          '  File "/home/me/net.py", line {line}, in forward\n    {code}\n'
          '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 565, '
          'in forward\n    return self._conv_forward(input, self.weight, self.bias)')


def _meta(node: onnx.NodeProto, scopes: list[str], classes: list[str], line: int,
          code: str) -> None:
    for k, v in ((SCOPES_KEY, repr(scopes)), ("pkg.torch.onnx.class_hierarchy", repr(classes)),
                 (STACK_KEY, _TRACE.format(line=line, code=code)),
                 ("namespace", "/".join(f"{s}: {c}" for s, c in zip(scopes, classes)))):
        node.metadata_props.add(key=k, value=v)


def sourced_convnet(with_metadata: bool = True) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> Add, named and annotated as torch.onnx's dynamo
    exporter does (module block: conv, bn, act)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    for n in ("scale", "bias", "mean"):
        inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), n))
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="node_conv2d", pads=[1] * 4),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"],
                              name="node_batch_norm"),
             helper.make_node("Relu", ["n"], ["r"], name="node_relu"),
             helper.make_node("Add", ["r", "r"], ["y"], name="node_add")]
    if with_metadata:
        root = "__main__.Net"
        blk = "__main__.Block"
        _meta(nodes[0], ["", "block", "block.conv", "conv2d"],
              [root, blk, "torch.nn.modules.conv.Conv2d", "aten.conv2d.default"], 12,
              "return self.act(self.bn(self.conv(x)))")
        _meta(nodes[1], ["", "block", "block.bn", "batch_norm"],
              [root, blk, "torch.nn.modules.batchnorm.BatchNorm2d", "aten.batch_norm.default"],
              12, "return self.act(self.bn(self.conv(x)))")
        _meta(nodes[2], ["", "block", "block.act", "relu"],
              [root, blk, "torch.nn.modules.activation.ReLU", "aten.relu.default"], 12,
              "return self.act(self.bn(self.conv(x)))")
        _meta(nodes[3], ["", "add"], [root, "aten.add.Tensor"], 22, "return y + y")
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_user_frame_is_the_innermost_frame_outside_torch():
    f = user_frame(_TRACE.format(line=12, code="return self.conv(x)"))
    assert f == {"file": "/home/me/net.py", "line": 12, "function": "forward",
                 "code": "return self.conv(x)"}
    assert user_frame(None) is None and user_frame("no frames here") is None


def test_user_frame_passes_over_generated_code_and_wrappers():
    # a torch.cond branch runs in torch.fx's '<eval_with_key>.3'; a kernels library's
    # 'return func(*args, **kwargs)' wraps the model's call: neither is the model's line
    base = ('File "/home/me/llama.py", line 249, in forward\n    q = apply_rotary(q, cos)\n'
            '  File "/venv/lib/python3.11/site-packages/kernels/layer.py", line 856, in fn\n'
            '    return func(*args, **kwargs)\n'
            '  File "<eval_with_key>.3", line 6, in forward\n    linear = self.a(x)')
    f = user_frame(base)
    assert (f["file"], f["line"]) == ("/home/me/llama.py", 249)
    # with nothing else outside torch, the generated frame is still better than none
    f = user_frame('File "<eval_with_key>.3", line 6, in forward\n    linear = self.a(x)')
    assert f["file"] == "<eval_with_key>.3"


def test_source_columns_from_exporter_metadata():
    lab = onnx_lab.open(sourced_convnet())
    n = lab.nodes.set_index("node_id")
    r = n.loc["node_conv2d"]
    assert r["module"] == "block.conv" and r["module_class"] == "torch.nn.modules.conv.Conv2d"
    assert (r["source_file"], r["source_line"], r["source_function"]) == \
        ("/home/me/net.py", 12, "forward")
    assert r["source_code"] == "return self.act(self.bn(self.conv(x)))"
    assert r["source_kind"] == "metadata" and r["source_modules"] == ["block.conv"]
    add = n.loc["node_add"]  # an op of the root module itself
    assert add["module"] == "" and add["module_class"] == "__main__.Net"
    assert add["source_line"] == 22
    assert source_share(lab.model) == 1.0
    assert lab.history.source_share.tolist() == [1.0]


def test_without_metadata_modules_are_inferred_from_name_scopes_or_unknown():
    lab = onnx_lab.open("sample:convnet")  # TorchScript-style '/stem/conv/Conv' names
    r = lab.nodes.set_index("node_id").loc["/stem/conv/Conv"]
    assert r["module"] == "stem.conv" and r["source_kind"] == "inferred"
    assert r["module_class"] is None and r["source_file"] is None
    assert pd_isna(r["source_line"])
    bare = onnx_lab.open(sourced_convnet(with_metadata=False))  # 'node_conv2d': no scope
    t = bare.nodes
    assert t["module"].isna().all() and t["source_kind"].isna().all()
    assert source_share(bare.model) == 0.0


def test_torchscript_scopes_of_nested_containers_and_of_the_root():
    # TorchScript names a nested child by its full path ('/features/features.0/features.0.0')
    # and a root op by one level ('/Mul'): 'features.0.features.0.0' and '?' were inferred
    from onnx import TensorProto, helper

    names = ["/features/features.0/features.0.0/Relu", "/stages.0/stages.0.0/Neg", "/Mul",
             "/blocks/blocks.0/Abs", "Tanh_7"]
    ops = ["Relu", "Neg", "Mul", "Abs", "Tanh"]
    nodes, prev = [], "x"
    for i, (name, op) in enumerate(zip(names, ops)):
        ins = [prev, prev] if op == "Mul" else [prev]
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=name))
        prev = f"t{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2])])
    t = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).nodes
    modules = dict(zip(t["node_id"], t["module"]))
    assert modules[names[0]] == "features.0.0" and modules[names[1]] == "stages.0.0"
    assert modules["/Mul"] == "" and modules[names[3]] == "blocks.0"
    assert pd_isna(modules["Tanh_7"])  # no scope at all: unknown


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def test_own_pass_merges_sources_and_save_keeps_standard_keys(tmp_path):
    lab = onnx_lab.open(sourced_convnet())
    r = lab.apply("fuse_conv_bn")
    assert r.modified and r.verify_passed
    row = lab.nodes.set_index("node_id").loc["node_conv2d"]
    # The fused Conv stands for block.conv and block.bn: their shared module is block.
    assert row["module"] == "block" and row["module_class"] == "__main__.Block"
    assert row["source_modules"] == ["block.conv", "block.bn"]
    assert lab.history.source_share.tolist() == [1.0, 1.0]
    lab.save(tmp_path / "fused.onnx")
    saved = onnx.load(tmp_path / "fused.onnx")
    conv = next(n for n in saved.graph.node if n.op_type == "Conv")
    md = {p.key: p.value for p in conv.metadata_props}
    assert eval(md[SCOPES_KEY]) == ["", "block", "node_conv2d"]  # noqa: S307 - a list literal
    assert md["namespace"].startswith(": __main__.Net/block: __main__.Block/node_conv2d")
    assert "line 12" in md[STACK_KEY]
    assert [p["module"] for p in json.loads(md[SOURCES_KEY])] == ["block.conv", "block.bn"]
    again = onnx_lab.open(tmp_path / "fused.onnx").nodes.set_index("node_id")
    assert again.loc["node_conv2d", "source_modules"] == ["block.conv", "block.bn"]
    # Untouched nodes keep their own metadata as exported.
    relu = next(n for n in saved.graph.node if n.op_type == "Relu")
    assert SOURCES_KEY not in {p.key for p in relu.metadata_props}


@pytest.mark.parametrize("step", ["ort:extended", "onnxsim", "onnxoptimizer"])
def test_tool_steps_carry_sources(step):
    lab = onnx_lab.open(sourced_convnet())
    r = lab.apply(step)
    assert r.modified and r.verify_passed
    t = lab.nodes
    assert t["source_kind"].eq("metadata").all()
    fused = t.loc[t.source_modules.map(len) > 1]
    assert len(fused) >= 1
    assert set(fused.iloc[0]["source_modules"]) >= {"block.conv", "block.bn"}
    assert lab.history.source_share.iloc[-1] == 1.0


def test_module_grouping_and_depth():
    lab = onnx_lab.open(sourced_convnet())
    assert module_at(lab.model, 1)["node_conv2d"] == "block"
    assert module_at(lab.model)["node_conv2d"] == "block.conv"
    assert module_at(lab.model, 0)["node_conv2d"] == ""
    frame = lab.nodes[["node_id"]].assign(x=[1.0, 2.0, 4.0, 8.0])
    g = group_by_module(frame, lab.model, {"x": "sum"}, depth=1)
    assert g[["module", "n_nodes", "x"]].values.tolist() == [["block", 3, 7.0], ["", 1, 8.0]]
    assert g.loc[0, "module_class"] == "__main__.Block"
    with pytest.raises(onnx_lab.errors.InputError):
        module_at(lab.model, -1)


def test_details_panel_shows_module_breadcrumbs_and_lines():
    lab = onnx_lab.open(sourced_convnet())
    lab.apply("fuse_conv_bn")
    d = node_details(lab.model, "node_conv2d")
    src = d["source"]
    assert src["module"] == "block" and [c["key"] for c in src["crumbs"]] == ["/block"]
    assert [p["module"] for p in src["parts"]] == ["block.conv", "block.bn"]
    html = node_details_html(d)
    assert "data-expand='/block'" in html and "net.py:12" in html and "came from" in html
    plain = node_details(onnx_lab.open(sourced_convnet(False)).model, "node_conv2d")
    assert plain["source"] is None and "olc-source" not in node_details_html(plain)


def test_collapse_groups_by_module_and_search_finds_source_lines():
    lab = onnx_lab.open(sourced_convnet())
    r = lab.render(collapse=1)
    assert list(r.groups) == ["/block"]
    from onnx_lab.render.details import canvas_items

    items = canvas_items(r, lab.model)
    assert "net.py:12" in items["scope:/block"] and "block.bn" in items["scope:/block"]


# ------------------------------------------------------------------ a real torch export
@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    pytest.importorskip("torch")
    from models import decoder_export

    return decoder_export(tmp_path_factory.mktemp("decoder"))


TOOL_STEPS = ["onnxsim", "onnxslim", "onnxoptimizer", "ort:basic", "ort:extended",
              "ort_transformers", "onnxscript_rewrite"]


@pytest.mark.slow
@pytest.mark.parametrize("step", TOOL_STEPS)
def test_every_tool_step_keeps_source_on_a_dynamo_export(decoder, step):
    from onnx_lab.transforms import available

    if step not in set(available().name):
        pytest.skip(f"{step} is not installed")
    lab = onnx_lab.open(decoder)
    before = source_share(lab.model)
    assert before >= 0.95
    kw = {"model_type": "gpt2"} if step == "ort_transformers" else {}
    lab.apply(step, verify=False, **kw)
    after = lab.history.source_share.iloc[-1]
    assert after >= 0.99 * before, (step, before, after)


@pytest.mark.slow
def test_fused_attention_of_a_dynamo_decoder_names_its_module_and_lines(decoder):
    pytest.importorskip("onnxscript")
    lab = onnx_lab.open(decoder)
    r = lab.apply("onnxscript_rewrite")
    assert r.verify_passed
    t = lab.nodes
    mha = t.loc[t.op_type == "MultiHeadAttention"].set_index("node_id")
    assert sorted(mha.module) == ["layers.0.attn", "layers.1.attn"]
    nid = mha.index[0]
    d = node_details(lab.model, nid)
    lines = {p["line"] for p in d["source"]["parts"]}
    assert len(lines) >= 2 and all(p["file"].endswith("models.py") for p in d["source"]["parts"])
    # A ModuleList is never called: its items are the levels ('layers.0').
    assert [c["name"] for c in d["source"]["crumbs"]] == ["layers.0", "attn"]
    rend = lab.render(collapse=1)
    assert nid in rend.groups["/layers.0"]


# ------------------------------------------------------------------ by module
def _planted(model: onnx.ModelProto, weight: str) -> onnx.ModelProto:
    """``model`` with ``weight`` scaled by 3 (a planted difference)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name == weight:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 3, weight))
    return m


def test_compare_by_module_names_the_first_divergent_module():
    ref = onnx_lab.open(sourced_convnet())
    cmp = onnx_lab.compare(ref, onnx_lab.open(_planted(sourced_convnet(), "scale")))
    assert not cmp.passed
    assert cmp.first_divergent_module() == "block.bn"
    assert cmp.first_divergent_module(depth=1) == "block"
    g = cmp.by_module().set_index("module")
    assert g.loc["block.bn", "first_divergence"] and g.first_divergence.sum() == 1
    assert g.loc["block.conv", "n_failed"] == 0 and g.loc["block.bn", "n_failed"] == 1
    same = onnx_lab.compare(ref, onnx_lab.open(sourced_convnet()))
    assert same.passed and same.first_divergent_module() is None
    assert not same.by_module().first_divergence.any()


def test_cost_and_profile_by_module():
    lab = onnx_lab.open(sourced_convnet())
    c = lab.cost().by_module(depth=1).set_index("module")
    assert c.loc["block", "n_nodes"] == 3 and c.loc["block", "flops"] > 0
    assert c.loc["block", "params"] == 4 * 3 * 9 + 4 + 16
    p = lab.profile(runs=3, warmup=1)
    t = p.by_module(depth=1)
    assert set(t.module) <= {"block", ""} and "block" in set(t.module)
    assert t.time_ms.ge(0).all() and abs(t.share.sum() - 1) < 1e-9


def test_sensitivity_by_module():
    lab = onnx_lab.open(sourced_convnet())
    s = lab.sensitivity("fp16", by="module", depth=1, recheck=0)
    assert set(s.module) == {"block", ""} and s.n_nodes.sum() == 4
    # nodes of unknown source are '?', as in every by-module view (they were keyed NaN)
    bare = onnx_lab.open(sourced_convnet(with_metadata=False))
    s = bare.sensitivity("fp16", by="module", recheck=0)
    assert set(s.module) == {"?"}


def test_modules_figure_draws_time_error_and_flops():
    pytest.importorskip("matplotlib")
    from onnx_lab.render.module_plots import modules_figure, modules_table

    lab = onnx_lab.open(sourced_convnet())
    cmp = onnx_lab.compare(lab, onnx_lab.open(_planted(sourced_convnet(), "scale")))
    t = modules_table(comparison=cmp, cost=lab.cost())
    assert {"max_abs", "flops", "first_divergence"} <= set(t.columns)
    fig = modules_figure(comparison=cmp, cost=lab.cost(), depth=1)
    assert [a.get_title() for a in fig.axes] == ["error per module", "FLOPs per module"]
    with pytest.raises(onnx_lab.errors.InputError):
        modules_table()


def test_precision_plan_kept_nodes_by_module():
    lab = onnx_lab.open(sourced_convnet())
    plan = lab.find_precision("fp16", atol=1e-6, rtol=1e-6)
    g = plan.kept_by_module(depth=1)
    assert len(plan.kept) >= 1 and set(g.module) == {"block"}
    assert g.n_nodes.sum() == len(plan.kept)
    assert sorted(x for ids in g.node_ids for x in ids) == sorted(plan.kept)


def test_without_metadata_fused_nodes_infer_their_module_from_what_they_replaced():
    # ort_transformers names its nodes 'LayerNorm_0', 'SkipLayerNorm_AddBias_0': the module
    # comes from the name scopes of the original nodes (provenance), not from those names.
    lab = onnx_lab.open("sample:bert_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("ort_transformers", model_type="bert")
    assert r.modified and r.verify_passed
    t = lab.nodes.set_index("node_id")
    assert t.loc["LayerNorm_0", "module"] == "embeddings.ln"
    skip = t.loc[t.op_type == "SkipLayerNormalization"]
    assert set(skip.module) == {"layer.0.attention", "layer.0.output"}
    att = t.loc[t.op_type == "Attention"].iloc[0]
    assert {"layer.0.attention.query", "layer.0.attention.key"} <= set(att.source_modules)
    assert t.source_kind.eq("inferred").all()
    assert lab.history.source_share.tolist() == [1.0, 1.0]
    # Nothing is written into the model for inferred sources.
    assert not any(k.startswith("pkg.torch") for e in lab.index.entries.values()
                   for k in e.node.metadata_props)


def test_namespace_alone_and_unreadable_metadata():
    m = sourced_convnet(with_metadata=False)
    conv, bn = m.graph.node[0], m.graph.node[1]
    conv.metadata_props.add(key="namespace", value=": __main__.Net/block: __main__.Block/"
                            "block.conv: torch.nn.modules.conv.Conv2d/conv2d: aten.conv2d.default")
    bn.metadata_props.add(key=SCOPES_KEY, value="not a list")
    bn.metadata_props.add(key=STACK_KEY, value="no frames in here")
    t = onnx_lab.open(m).nodes.set_index("node_id")
    assert t.loc["node_conv2d", "module"] == "block.conv"
    assert t.loc["node_conv2d", "module_class"] == "torch.nn.modules.conv.Conv2d"
    assert pd_isna(t.loc["node_batch_norm", "source_kind"])  # unknown, not the root module


def test_a_collapsed_box_names_its_module_and_class():
    from onnx_lab.render.details import box_module, group_details_html

    lab = onnx_lab.open(sourced_convnet())
    r = lab.render(collapse=1)
    members = r.groups["/block"]
    assert box_module(lab.model, "/block", members) == ("block", "__main__.Block")
    html = group_details_html("/block", members, ["Conv"] * 3, ("block", "__main__.Block"))
    assert "module block (__main__.Block)" in html
    bare = onnx_lab.open("sample:convnet")  # inferred: a module without a class
    rb = bare.render(collapse=1)
    key = next(iter(rb.groups))
    path, cls = box_module(bare.model, key, rb.groups[key])
    assert path == key.strip("/") and cls is None


def test_converted_labs_carry_sources():
    lab = onnx_lab.open(sourced_convnet())
    q = onnx_lab.to_int8_dynamic(lab)
    assert source_share(q.model) == 1.0  # QuantizeLinear & co. take their sources
    f = onnx_lab.to_fp16(lab)
    assert source_share(f.model) == 1.0  # its input and output Casts too
    assert f.nodes.set_index("node_id").loc["node_relu", "module"] == "block.act"


def test_cost_by_module_counts_a_weight_once_per_module():
    # a Linear called twice reads its weight twice: by_module said 144 params for 72, and the
    # modules summed past the model's total
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["a"], name="/shared/MatMul"),
         helper.make_node("Relu", ["a"], ["r"], name="/Relu"),
         helper.make_node("MatMul", ["r", "w"], ["b"], name="/shared/MatMul_1"),
         helper.make_node("MatMul", ["b", "h"], ["y"], name="/head/MatMul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(np.ones((8, 8), np.float32), "w"),
         numpy_helper.from_array(np.ones((8, 2), np.float32), "h")])
    c = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).cost()
    params = c.by_module().set_index("module")["params"].to_dict()
    assert params == {"shared": 64, "": 0, "head": 16}
    assert sum(params.values()) == c.total["params"] == 80


def test_a_torch_cond_branch_node_comes_from_its_if():
    # the dynamo exporter gives a branch's nodes only their op's scope ('linear',
    # aten.linear.default): they were the root module with the op's class
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"], name="node_neg")], "then",
                             [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"], name="node_abs")], "else",
                              [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    _meta(then.node[0], ["neg"], ["aten.neg.default"], 7, "return -x")
    cond = helper.make_node("If", ["c"], ["y"], name="node_cond", then_branch=then,
                            else_branch=other)
    _meta(cond, ["", "cond"], ["__main__.Net", "torch.ops.higher_order.cond"], 13,
          "return torch.cond(c, f, g, (x,))")
    g = helper.make_graph([cond], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [2]),
                                        helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    t = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).nodes
    rows = t.set_index("node_id")
    for nid in ("node_cond", "node_neg", "node_abs"):
        assert rows.loc[nid, "module"] == "" and rows.loc[nid, "source_line"] == 13, nid
        assert rows.loc[nid, "module_class"] == "__main__.Net"


def test_a_shared_constant_a_fusion_took_in_does_not_widen_its_module():
    # the dynamo exporter stamps a Constant both layers read with the first layer: fused by
    # onnxruntime's MatMulScaleFusion, layer 1's FusedMatMul was widened to 'layers'
    rng = np.random.default_rng(0)
    c = helper.make_node("Constant", [], ["c"], name="node_Constant_2",
                         value=numpy_helper.from_array(np.array(4.0, np.float32)))
    nodes = [c, helper.make_node("MatMul", ["x", "w1"], ["a"], name="node_matmul"),
             helper.make_node("Div", ["a", "c"], ["b"], name="node_div"),
             helper.make_node("MatMul", ["b", "w2"], ["d"], name="node_matmul_2"),
             helper.make_node("Div", ["d", "c"], ["y"], name="node_div_1")]
    for n, layer in zip(nodes, ["layers.0"] * 3 + ["layers.1"] * 2):
        _meta(n, ["", "layers", layer, n.op_type.lower()],
              ["__main__.Net", "torch.nn.ModuleList", "__main__.Layer", "aten.op"], 3, "f(x)")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(
                              np.float32), n) for n in ("w1", "w2")])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    lab.apply("ort:extended")
    fused = lab.nodes.set_index("node_id")
    assert fused.loc["node_matmul_2/MatMulScaleFusion/", "module"] == "layers.1"
    assert fused.loc["node_matmul/MatMulScaleFusion/", "module"] == "layers.0"
    assert "node_Constant_2" in lab.origins["node_matmul_2/MatMulScaleFusion/"]  # still traced


def test_a_conversions_cast_takes_the_scope_of_the_tensor_it_is_named_after():
    # to_fp16 names its Casts '<tensor>/Cast': the name's first level made up modules
    # 'Q__fp16' and 'Y' on a model without scopes; a scoped tensor keeps its scope
    g = helper.make_graph(
        [helper.make_node("MatMul", ["Q", "W"], ["/model/l0/MatMul_output_0"],
                          name="/model/l0/MatMul"),
         helper.make_node("Relu", ["/model/l0/MatMul_output_0"], ["Y"], name="/model/l1/Relu")],
        "g", [helper.make_tensor_value_info("Q", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.ones((4, 4), np.float32), "W")])
    half = onnx_lab.to_fp16(onnx_lab.open(helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17)])))
    mods = half.nodes.set_index("node_id")["module"]
    casts = [n for n in mods.index if n.endswith("/Cast")]
    assert casts and not any(str(mods[n]).endswith("__fp16") or mods[n] == "Y" for n in casts)
    assert {m for m in mods.dropna()} <= {"model.l0", "model.l1"}, mods.to_dict()


def test_a_shared_shape_computation_a_fusion_took_in_does_not_widen_its_module():
    # the dynamo exporter computes a Reshape's target shape once (a Concat stamped with
    # layer 0) for both layers; onnxscript's fused Attention of layer 1 took it in and was
    # widened to the parent module, with layer 0 among its modules
    from onnx_lab.core.provenance import ORIGIN_KEY
    from onnx_lab.core.source_map import carry_sources, source_map

    shape = numpy_helper.from_array(np.array([-1], np.int64), "k")
    nodes = [helper.make_node("Shape", ["x"], ["sh"], name="node_Shape_0"),
             helper.make_node("Concat", ["sh", "k"], ["target"], name="node_Concat_1", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["a"], name="node_view"),
             helper.make_node("Relu", ["a"], ["b"], name="node_relu"),
             helper.make_node("Reshape", ["b", "target"], ["c"], name="node_view_1"),
             helper.make_node("Relu", ["c"], ["y"], name="node_relu_1")]
    for n, layer in zip(nodes, ["layers.0"] * 4 + ["layers.1"] * 2):
        _meta(n, ["", "layers", layer, n.op_type.lower()],
              ["__main__.Net", "torch.nn.ModuleList", "__main__.Layer", "aten.op"], 3, "f(x)")
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
          helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]
    before = onnx_lab.open(helper.make_model(helper.make_graph(nodes, "g", vi[:1], vi[1:],
                                                               [shape]),
                                             opset_imports=[helper.make_opsetid("", 17)])).model
    fused = [helper.make_node("Relu", ["x"], ["b"], name="fused_0"),
             helper.make_node("Relu", ["b"], ["y"], name="fused_1")]
    for n, origin in zip(fused, (["node_Shape_0", "node_Concat_1", "node_view", "node_relu"],
                                 ["node_Concat_1", "node_view_1", "node_relu_1"])):
        n.metadata_props.add(key=ORIGIN_KEY, value=json.dumps(origin))
    after = onnx_lab.open(helper.make_model(helper.make_graph(fused, "g", vi[:1], vi[1:]),
                                            opset_imports=[helper.make_opsetid("", 17)])).model
    carry_sources(before, after)
    sources = source_map(after)
    assert sources["fused_1"].module == "layers.1"
    assert sources["fused_0"].module == "layers.0"


def _exporter_fused(weight: str = "block.conv.weight", bias: str = "block.conv.bias"
                    ) -> onnx.ModelProto:
    """A Conv with a BatchNormalization folded in by torch.onnx's own export optimization
    (onnxscript's FuseBatchNormIntoConv): the BatchNormalization's metadata, the rule's name,
    and the Conv's parameter names on the folded weights."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                                     weight),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), bias)]
    nodes = [helper.make_node("Conv", ["x", weight, bias], ["c"], name="node_Conv_11",
                              pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"], name="node_relu")]
    root, blk = "__main__.Net", "__main__.Block"
    _meta(nodes[0], ["", "block", "block.bn", "_native_batch_norm_legit_no_training"],
          [root, blk, "torch.nn.modules.batchnorm.BatchNorm2d",
           "aten._native_batch_norm_legit_no_training.default"], 12,
          "return self.act(self.bn(self.conv(x)))")
    nodes[0].metadata_props.add(key="pkg.onnxscript.rewriter.rule_name",
                                value="FuseBatchNormIntoConv")
    _meta(nodes[1], ["", "block", "block.act", "relu"],
          [root, blk, "torch.nn.modules.activation.ReLU", "aten.relu.default"], 12,
          "return self.act(self.bn(self.conv(x)))")
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fusion_the_exporter_made_names_the_module_of_the_folded_weights(tmp_path):
    # torch.onnx (dynamo=True) folds a BatchNormalization into its Conv and keeps only the
    # BatchNormalization's metadata: the Conv said block.bn and nothing of block.conv
    n = onnx_lab.open(_exporter_fused()).nodes.set_index("node_id")
    r = n.loc["node_Conv_11"]
    assert r["source_modules"] == ["block.conv", "block.bn"]
    assert r["module"] == "block" and r["module_class"] == "__main__.Block"
    assert r["source_line"] == 12 and r["source_kind"] == "metadata"
    assert n.loc["node_relu", "source_modules"] == ["block.act"]
    # kept in the saved file
    lab = onnx_lab.open(_exporter_fused())
    lab.save(tmp_path / "m.onnx")
    again = onnx_lab.open(tmp_path / "m.onnx").nodes.set_index("node_id")
    assert again.loc["node_Conv_11", "source_modules"] == ["block.conv", "block.bn"]
    # a weight of another parent (a tied embedding) is not taken for a part of the node
    n = onnx_lab.open(_exporter_fused("model.embed.weight", "block.bn.bias")).nodes
    assert n.set_index("node_id").loc["node_Conv_11", "source_modules"] == ["block.bn"]


def test_a_dynamo_export_that_folds_batch_norm_names_both_modules(tmp_path):
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    net = torch.nn.Sequential(Block()).eval()
    path = tmp_path / "m.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 8, 8),), str(path), dynamo=True)
    nodes = onnx_lab.open(path).nodes
    conv = nodes.loc[nodes.op_type == "Conv"].iloc[0]
    if not (nodes.op_type == "BatchNormalization").any():  # the exporter folded it
        assert conv["source_modules"] == ["0.conv", "0.bn"], conv["source_modules"]
    else:  # an exporter that leaves the BatchNormalization: the Conv is the conv's own
        assert conv["source_modules"] == ["0.conv"]
