"""onnx-lab profile / cost / check."""

from __future__ import annotations

import json

import numpy as np

from onnx_lab.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_profile_json(capsys):
    d = _json(capsys, ["profile", "sample:convnet", "--runs", "2", "--warmup", "1", "--json",
                       "--providers", "cpu", "--top", "4"])
    # Issue 17 adds profiled_runs, budget_s, cancelled and the memory table.
    assert set(d) == {"runs", "warmup", "opt_level", "latency", "session", "ops", "nodes", "notes",
                      "profiled_runs", "budget_s", "cancelled", "memory", "budget_advice"}
    assert d["budget_advice"] == []  # fixed runs: nothing to advise
    assert d["runs"] == 2 and d["warmup"] == 1 and len(d["nodes"]) == 4
    assert set(d["latency"][0]) >= {"session", "mean_ms", "p50_ms", "p90_ms", "p99_ms"}
    assert set(d["nodes"][0]) >= {"node_id", "provider", "op_type", "calls", "mean_ms",
                                  "median_ms", "p90_ms", "share", "mapped", "components"}


def test_profile_batch_sweep_and_feeds(capsys, tmp_path):
    feeds = tmp_path / "x.npz"
    np.savez(feeds, x=np.ones((1, 8, 32), np.float32))
    d = _json(capsys, ["profile", "sample:transformer_block", "--dims", "batch=1,seq=8",
                       "--runs", "1", "--warmup", "0", "--feeds", str(feeds),
                       "--batch-sweep", "1,2", "--json"])
    assert d["batch_sweep"]["dim"] == "batch"
    assert [r["batch"] for r in d["batch_sweep"]["table"]] == [1, 2]


def test_profile_text(capsys):
    assert main(["profile", "sample:convnet", "--runs", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert "mean_ms" in out and "node_id" in out
    # each table says what it is
    titles = [x for x in out.splitlines() if x.startswith("== ")]
    assert [t.split(" (")[0] for t in titles] == [
        "== latency per run", "== memory", "== sessions", "== time by operator type",
        "== time by node"], titles
    assert "top 15" in titles[-1]


def test_cost_json(capsys):
    d = _json(capsys, ["cost", "sample:transformer_block", "--dims", "batch=1", "--dims",
                       "seq=8", "--json"])
    assert list(d["total"])[:5] == ["flops", "macs", "params", "param_bytes",
                                    "peak_activation_bytes"]
    assert d["total"]["macs"] > 0 and len(d["nodes"]) == 36
    assert set(d["nodes"][0]) >= {"node_id", "flops", "macs", "params", "known"}


def test_cost_text(capsys):
    assert main(["cost", "sample:convnet"]) == 0
    assert "GMACs" in capsys.readouterr().out


def test_check_json_and_text(capsys):
    d = _json(capsys, ["check", "sample:transformer_block", "--json"])
    assert {f["code"] for f in d["findings"]} == {"dynamic_dim"}
    assert d["counts"] == {"info": 2}
    assert main(["check", "sample:convnet", "--no-load"]) == 0
    assert "no findings" in capsys.readouterr().out
    # --dims as every subcommand takes it (it was refused); a dim given is not asked for again
    d = _json(capsys, ["check", "sample:transformer_block", "--dims", "batch=1",
                       "--dims", "seq=8", "--json", "--no-load"])
    assert [f["message"] for f in d["findings"]] == [
        "Dynamic dim 'batch' in input(s) x: 1 here (the dims given).",
        "Dynamic dim 'seq' in input(s) x: 8 here (the dims given)."]
    assert "Pass dims=" not in str(d)


def test_batch_sweep_needs_no_value_for_the_swept_dim(capsys):
    d = _json(capsys, ["profile", "sample:transformer_block", "--dims", "seq=8", "--runs", "1",
                       "--warmup", "0", "--batch-sweep", "2,4", "--json"])
    assert [r["batch"] for r in d["batch_sweep"]["table"]] == [2, 4]


def test_cli_errors(capsys):
    assert main(["profile", "sample:convnet", "--runs", "0"]) == 2
    assert "runs must be a positive int" in capsys.readouterr().err
    assert main(["profile", "sample:convnet", "--providers", "bogus"]) == 2
    assert "Unknown execution provider" in capsys.readouterr().err
    assert main(["profile", "sample:transformer_block", "--runs", "1"]) == 2
    assert "Unresolved dims" in capsys.readouterr().err
    assert main(["cost", "sample:transformer_block"]) == 2
    assert main(["profile", "sample:transformer_block", "--dims", "seq=4", "--batch-sweep",
                 "1,x"]) == 2
    assert "--batch-sweep" in capsys.readouterr().err


def test_profile_generate_json(capsys):
    d = _json(capsys, ["profile", "sample:tiny_llm", "--generate",
                       "4", "--prompt", "6", "--runs", "2", "--json", "--providers", "cpu"])
    assert d["prompt_tokens"] == 6 and d["new_tokens"] == 4 and d["runs"] == 2
    assert [r["phase"] for r in d["latency"]] == ["prefill", "decode"]
    # runs=2: both generations under the profiler (the default takes up to 2), 4 steps each
    assert d["latency"][1]["tokens_per_s"] > 0 and d["latency"][1]["runs"] == 8
    assert d["latency"][1]["latency_from"] == "profiled"
    assert {r["phase"] for r in d["ops"]} == {"prefill", "decode"}
    assert d["memory"][0]["kv_cache_bytes"] == d["memory"][0]["predicted_kv_cache_bytes"] > 0
    assert len(d["tokens"][0]) == 5
    assert d["cache"]["pairs"][0] == ["past_key_values.0.key", "present.0.key"]


def test_profile_generate_text_and_token_ids(capsys):
    assert main(["profile", "sample:tiny_llm", "--generate", "3",
                 "--prompt", "5,6,7", "--runs", "1", "--profile-runs", "0"]) == 0
    out = capsys.readouterr().out
    assert "prefill" in out and "decode" in out and "tokens_per_s" in out
    assert "tokens: [" in out and "kv_cache_bytes" in out


def test_profile_generate_bad_input(capsys):
    assert main(["profile", "sample:tiny_llm", "--generate", "8",
                 "--prompt", "125", "--runs", "1"]) == 2
    err = capsys.readouterr().err
    assert "cos_cache" in err and "at most 3 new tokens" in err
    assert main(["profile", "sample:convnet", "--generate", "4"]) == 2
    assert "no KV-cache inputs" in capsys.readouterr().err
    assert main(["profile", "sample:tiny_llm", "--generate", "4", "--prompt", "x"]) == 2
    assert "--prompt" in capsys.readouterr().err


def test_profile_runs_flag_reaches_profile(capsys):
    d = _json(capsys, ["profile", "sample:convnet", "--runs", "5", "--profile-runs", "3",
                       "--warmup", "0", "--json", "--providers", "cpu"])
    assert d["profiled_runs"] == 3 and d["runs"] == 5


def test_check_names_an_unnamed_node_by_its_id_and_prints_no_nan(capsys, tmp_path):
    # a bfloat16 MatMul without a name: "at node ''" and node_id None, and the text printed
    # "[nan]" for the findings without a node beside one with a node
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import onnx_lab

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
         helper.make_node("Cast", ["w"], ["wb"], to=TensorProto.BFLOAT16),
         helper.make_node("MatMul", ["xb", "wb"], ["yb"]),
         helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [w])
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    df = onnx_lab.open(str(path)).check()
    load = df[df.code == "provider_load"].iloc[0]
    assert load.node_id == "MatMul_2" and "at node 'MatMul_2'" in load.message
    main(["check", str(path)])
    out = capsys.readouterr().out
    assert "[nan]" not in out and "provider_load [MatMul_2]" in out


def test_profile_text_on_openvino_says_it_has_no_operator_times(capsys):
    # the op and node tables were printed as pandas' "Empty DataFrame / Columns: [...]"
    import pytest

    from onnx_lab.runtime.openvino import openvino_available
    if not openvino_available():
        pytest.skip("openvino (optional extra) not installed")
    assert main(["profile", "sample:convnet", "--runs", "3", "--warmup", "1",
                 "--providers", "openvino"]) == 0
    out = capsys.readouterr().out
    assert "Empty DataFrame" not in out and "(none: no profiled runs" in out
    assert "OpenVINO gives no per-operator times" in out
