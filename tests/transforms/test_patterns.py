"""find_patterns, presets, explain, the registry of graph passes, and every pass on every
sample."""

from __future__ import annotations

import pytest
from _passkit import apply, assert_same_outputs, ops, sample

from onnx_lab.errors import UnknownNameError
from onnx_lab.transforms import explain
from onnx_lab.transforms.base import _REGISTRY, available, get_pass, origins, pass_names
from onnx_lab.transforms.explain import builtin_passes
from onnx_lab.transforms.patterns import COLUMNS, find_patterns
from onnx_lab.transforms.presets import PRESETS

# The built-in graph passes, from the registry (a new pass is tested here with no edit).
GRAPH_PASSES = builtin_passes("graph")
DIMS = {"convnet": None, "transformer_block": {"batch": 2, "seq": 5}, "control_flow": None}


def _ours(df):
    """Rows of the built-in passes (other tests register passes of their own)."""
    return df.loc[df["pass"].isin(GRAPH_PASSES)].reset_index(drop=True)


def test_convnet_patterns_table():
    df = _ours(find_patterns(sample("convnet")))
    assert list(df.columns) == COLUMNS
    assert df["match_id"].tolist() == [
        "fuse_conv_bn:/stem/conv/Conv",
        "eliminate_identity:/stem/identity/Identity",
        "eliminate_dead_nodes:/dead/Mul",
        "fuse_conv_bn:/block1/conv/Conv",
        "fuse_conv_add_bias:/block2/conv/Conv",
        "fuse_transposes:/block2/to_nhwc/Transpose",
        "eliminate_dropout:/head/dropout/Dropout",
        "fold_constants:/head/fc/Reshape",
    ]
    assert df["pattern"].tolist() == ["conv_bn_relu", "identity", "dead_nodes", "conv_bn_relu",
                                      "conv_add_bias", "transpose_cancel", "dropout",
                                      "constant_subgraph"]
    assert df["pass"].tolist() == [m.split(":")[0] for m in df["match_id"]]
    assert str(df["saving_nodes"].dtype) == "int64" and df["saving_nodes"].sum() == 10
    row = df.set_index("match_id").loc["eliminate_dead_nodes:/dead/Mul"]
    assert row["node_ids"] == ["/dead/Mul", "/dead/Relu"] and row["anchor"] == "/dead/Mul"
    assert row["saving_bytes"] == 4
    # Every match id applies through its own pass.
    for mid, name in zip(df["match_id"], df["pass"]):
        assert get_pass(name, matches=[mid]).run(sample("convnet")).modified, mid


def test_empty_patterns_keep_columns():
    df = find_patterns(sample("control_flow"))
    assert list(df.columns) == COLUMNS and len(_ours(df)) == 0


def test_registry_lists_every_graph_pass():
    names = pass_names()
    assert set(GRAPH_PASSES) <= set(names)
    table = available().set_index("name")
    for name in GRAPH_PASSES:
        assert _REGISTRY[name].kind == "graph"
        assert table.loc[name, "summary"]
        assert explain(name).startswith("### ")
    assert "max_growth_bytes" in table.loc["fold_constants", "parameters"]


def test_explain_patterns_and_unknown():
    for pattern in ("conv_bn", "conv_bn_relu", "transpose_cancel", "constant_subgraph"):
        assert f"Pattern `{pattern}`" in explain(pattern)
    assert "\\gamma_c" in explain("fuse_conv_bn") and "b' = b + c" in explain("conv_add_bias")
    assert "p_1[p_2[i]]" in explain("fuse_transposes")
    assert "Gemm" in explain("fuse_conv_bn:/stem/conv/Conv") or "BatchNormalization" in \
        explain("fuse_conv_bn:/stem/conv/Conv")
    with pytest.raises(UnknownNameError, match="conv_bm"):
        explain("conv_bm")


def test_safe_preset_on_convnet():
    before = sample("convnet")
    assert PRESETS["safe"][-1] == "remove_unused_initializers"
    assert set(PRESETS["safe"]) <= set(pass_names())
    model = before
    results = []
    for name in PRESETS["safe"]:
        r = get_pass(name).run(model)
        results.append(r)
        model = r.model
    assert [r.name for r in results if r.modified] == [
        "eliminate_identity", "eliminate_dropout", "eliminate_dead_nodes", "fold_constants",
        "fuse_conv_add_bias", "fuse_conv_bn", "fuse_transposes"]
    assert len(before.index) == 21 and len(model.index) == 10
    assert ops(model) == ["Conv", "Relu", "Conv", "Relu", "MaxPool", "Conv", "Relu",
                          "GlobalAveragePool", "Flatten", "Gemm"]
    assert model.weights_nbytes() < before.weights_nbytes()
    assert _ours(find_patterns(model)).empty
    assert_same_outputs(before, model)
    # Provenance composes over all steps.
    org = origins(model)
    assert org["/block2/conv/Conv"] == ["/block2/conv/Conv", "/block2/bias/Add",
                                        "/block2/bn/BatchNormalization"]
    assert org["/head/fc/Gemm"] == ["/head/fc/Gemm"]


@pytest.mark.parametrize("name", GRAPH_PASSES)
@pytest.mark.parametrize("sample_name", list(DIMS))
def test_every_pass_on_every_sample(name, sample_name):
    before = sample(sample_name)
    r = apply(name, before)
    if r.modified:
        assert r.nodes_after <= r.nodes_before
        assert_same_outputs(before, r.model, dims=DIMS[sample_name])
    else:
        assert r.reason and r.model is before
