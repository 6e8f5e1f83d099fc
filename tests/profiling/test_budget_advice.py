"""A budget too small for a meaningful measurement says so and names the one that would be."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.profiling.advice import MIN_RUNS, profile_advice, sweep_advice


def slow_model(n: int = 4, size: int = 768) -> onnx.ModelProto:
    """``n`` chained [size, size] MatMuls on a dynamic batch: ~0.1-0.5 s a run here."""
    rng = np.random.default_rng(0)
    inits, nodes, cur = [], [], "x"
    for i in range(n):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((size, size)) / size).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        cur = f"h{i}"
    g = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", size, size])], [helper.make_tensor_value_info(
            cur, TensorProto.FLOAT, ["batch", size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_budget_under_a_few_runs_is_too_small_and_names_a_budget():
    # 10 ms: fewer runs than the minimum on any machine, loaded or quiet
    lab = onnx_lab.open(slow_model(), dims={"batch": 2})
    p = lab.profile(budget_s=0.01, warmup=1, progress=False)
    runs = int(p.latency_stats["runs"].min())
    a = profile_advice(p)
    assert runs < MIN_RUNS and a is not None and a.runs == runs
    assert a.suggested_s > 0.01 and a.min_runs == MIN_RUNS
    assert a.text.startswith(f"budget too small: {runs} run")
    assert f"a budget of ~{a.suggested_s:g} s gives ≥ {MIN_RUNS} runs" in a.text


def test_enough_runs_or_fixed_runs_give_no_advice():
    lab = onnx_lab.open("sample:convnet")
    p = lab.profile(budget_s=3.0, progress=False)
    assert int(p.latency_stats["runs"].min()) >= MIN_RUNS and profile_advice(p) is None
    assert profile_advice(lab.profile(runs=2, warmup=1, progress=False)) is None


@pytest.mark.slow  # a batch sweep under a wall-clock budget
def test_a_sweep_cut_short_by_the_budget_names_the_sizes_left_and_a_budget():
    lab = onnx_lab.open(slow_model(n=3, size=512), dims={"batch": 1})
    # A budget spent before the first size (session creation alone takes longer) cuts the
    # sweep whatever the machine's load; a larger one may end at the knee on a loaded
    # machine, which is a complete sweep and gets no advice.
    s = lab.batch_sweep((1, 2, 4, 8), dim="batch", budget_s=0.01, progress=False)
    a = sweep_advice(s, (1, 2, 4, 8))
    assert len(s.table) < 4 and a is not None, (s.table, s.notes)
    assert "not run" in a.what and a.suggested_s > 0.01
    s = lab.batch_sweep((1, 2, 4, 8), dim="batch", budget_s=0.6, progress=False)
    cut = "raise budget_s" in " ".join(s.notes) or int(s.table["runs"].min()) < 3
    assert (sweep_advice(s, (1, 2, 4, 8)) is not None) == cut, (s.table, s.notes)
    full = lab.batch_sweep((1, 2), dim="batch", runs=3, warmup=1, progress=False)
    assert sweep_advice(full, (1, 2)) is None  # fixed runs: nothing to advise


@pytest.mark.slow  # a batch sweep under a wall-clock budget
def test_the_cli_says_the_budget_is_too_small_and_names_the_flag(tmp_path, capsys):
    import json

    from onnx_lab.cli import main

    path = tmp_path / "slow.onnx"
    onnx.save(slow_model(), str(path))
    assert main(["profile", str(path), "--dims", "batch=2", "--budget", "0.01", "--warmup", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (a,) = out["budget_advice"]
    assert a["text"].startswith("budget too small") and a["suggested_s"] > a["budget_s"] == 0.01
    assert main(["profile", str(path), "--dims", "batch=2", "--budget", "0.01", "--warmup",
                 "1"]) == 0
    text = capsys.readouterr().out
    assert "note: budget too small" in text and "(--budget " in text
