"""Issue 32: verification and profiling runs are bounded. A model whose Expand needs 16 GiB is
refused before anything is allocated (safe, onnxsim, compare, profile), a Loop of 10**12
iterations is stopped at the time limit; both end in a RunLimitError naming the node and the
figure. Ordinary models run as before (no false alarm)."""

from __future__ import annotations

import resource
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.core.limits import (
    estimate_run_memory,
    memory_limit,
    parse_bytes,
    run_limits,
    run_timeout,
    set_run_limits,
)
from onnx_lab.errors import InputError, RunLimitError

F = TensorProto.FLOAT
GIB = 1 << 30


def _finish(g: onnx.GraphProto) -> onnx.ModelProto:
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def expand_model(shape=(4, 1024, 1024, 1024), identity: bool = True) -> onnx.ModelProto:
    """x -> [Identity] -> Relu -> Expand(shape) -> ReduceSum: 16 GiB in the Expand's output.
    The Identity gives ``safe`` something to remove, hence a verification to run."""
    nodes = ([helper.make_node("Identity", ["x"], ["x1"], name="id")] if identity else []) + [
        helper.make_node("Relu", ["x1" if identity else "x"], ["r"], name="relu"),
        helper.make_node("Expand", ["r", "shape"], ["e"], name="expand"),
        helper.make_node("ReduceSum", ["e"], ["y"], name="sum", keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1])],
                          [helper.make_tensor_value_info("y", F, [])],
                          [numpy_helper.from_array(np.array(shape, np.int64), "shape")])
    return _finish(g)


def loop_model(trips: int = 10 ** 12) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "one"], ["v2"], name="add"),
         helper.make_node("Identity", ["c"], ["c2"], name="keep")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", F, [2])],
        [helper.make_tensor_value_info("c2", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v2", F, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "one")])
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["x1"], name="id"),
         helper.make_node("Loop", ["n", "cond", "x1"], ["y"], body=body, name="loop")], "g",
        [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])],
        [numpy_helper.from_array(np.array(trips, np.int64), "n"),
         numpy_helper.from_array(np.array(True), "cond")])
    return _finish(g)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture
def expand16(tmp_path):
    p = tmp_path / "expand.onnx"
    onnx.save(expand_model(), str(p))
    return p


@pytest.fixture
def small_limit():
    """A 4 GiB limit whatever the machine: the 16 GiB model is over it everywhere."""
    with run_limits(memory="4G"):
        yield


OPS = {
    "compare": lambda lab: onnx_lab.compare(lab, lab),
    "compare_layerwise": lambda lab: onnx_lab.compare(lab, lab, layerwise=True),
    "profile": lambda lab: lab.profile(runs=1),
    "safe": lambda lab: lab.apply_preset("safe"),
    "onnxsim": lambda lab: lab.apply("onnxsim"),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_16_gib_expand_is_refused_up_front(expand16, small_limit, op):
    lab = onnx_lab.open(expand16)
    rss = _rss_mb()
    with pytest.raises(RunLimitError) as e:
        OPS[op](lab)
    msg = str(e.value)
    assert "'expand'" in msg and "16.0 GiB" in msg and "4.0 GiB" in msg, msg
    assert _rss_mb() - rss < 1024, "the run allocated before it was refused"
    assert len(lab.version_history.versions) == 1  # nothing was pushed


def test_the_default_limit_is_half_the_available_memory(tmp_path):
    """A 1 TiB Expand is over the default limit of any machine."""
    p = tmp_path / "e.onnx"
    onnx.save(expand_model((256, 1024, 1024, 1024)), str(p))
    limit, how = memory_limit()
    assert limit is not None and "50% of the" in how
    with pytest.raises(RunLimitError, match=r"1\.0 TiB.*50% of the"):
        onnx_lab.compare(p, p)


def test_the_estimate_is_the_cost_models_peak(expand16):
    lab = onnx_lab.open(expand16)
    est = estimate_run_memory(lab.model, {"x": [1]})
    assert est["peak_bytes"] == lab.cost().total["peak_activation_bytes"]
    assert est["largest"] == "e" and est["producer"] == "expand"
    assert est["largest_bytes"] == 16 * GIB


@pytest.mark.slow  # waits out a time limit / a CLI subprocess
def test_an_endless_loop_is_stopped_at_the_time_limit(tmp_path):
    p = tmp_path / "loop.onnx"
    onnx.save(loop_model(), str(p))
    lab = onnx_lab.open(p)
    with run_limits(timeout_s=1.5):
        for op in ("compare", "profile", "safe"):
            t0 = time.monotonic()
            with pytest.raises(RunLimitError, match=r"Loop node 'loop'.*time limit of 1.5 s"):
                OPS[op](lab)
            assert time.monotonic() - t0 < 30


@pytest.mark.slow  # waits out a time limit / a CLI subprocess
def test_the_cli_refuses_in_one_line(capsys, expand16, tmp_path):
    loop = tmp_path / "loop.onnx"
    onnx.save(loop_model(), str(loop))
    for argv in (["--max-memory", "4G", "compare", str(expand16), str(expand16)],
                 ["--max-memory", "4G", "profile", str(expand16), "--runs", "1"],
                 ["--run-timeout", "1", "compare", str(loop), str(loop)],
                 ["--run-timeout", "1", "profile", str(loop), "--runs", "1"],
                 ["--max-memory", "lots", "summary", str(loop)],
                 ["--run-timeout", "-3", "summary", str(loop)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("onnx-lab: error: "), err


def test_ordinary_runs_are_unaffected(tmp_path):
    """No false alarm: a small Expand and a short Loop run, verify and profile as before."""
    p = tmp_path / "small.onnx"
    onnx.save(expand_model((2, 3, 4)), str(p))
    lab = onnx_lab.open(p)
    assert onnx_lab.compare(lab, lab).passed
    assert lab.apply_preset("safe")  # the Identity is removed and verified
    assert len(lab.version_history.versions) == 2
    q = tmp_path / "loop.onnx"
    onnx.save(loop_model(5), str(q))
    with run_limits(timeout_s=30):
        lq = onnx_lab.open(q)
        c = onnx_lab.compare(lq, lq, feeds={"x": np.zeros(2, np.float32)})
        assert c.passed
        prof = lq.profile(runs=2)
        assert len(prof.latency) >= 2 and (prof.latency["wall_ms"] > 0).all()


def test_limit_settings():
    assert parse_bytes("32G") == 32 * GIB and parse_bytes("1.5GiB") == 3 * GIB // 2
    assert parse_bytes("500M") == 500 << 20 and parse_bytes(4096) == 4096
    for bad in ("abc", "-1G", "1e400", True, "9" * 100):
        with pytest.raises(InputError):
            parse_bytes(bad)
    with run_limits(memory=None, timeout_s=None):
        assert memory_limit()[0] is None and run_timeout() is None
    with run_limits(timeout_s=5):
        assert run_timeout() == 5
    assert run_timeout() == 600.0
    with pytest.raises(InputError):
        set_run_limits(timeout_s=float("nan"))


def test_environment_variables(monkeypatch):
    monkeypatch.setenv("ONNX_LAB_MAX_MEMORY", "2G")
    monkeypatch.setenv("ONNX_LAB_RUN_TIMEOUT", "7")
    assert memory_limit() == (2 * GIB, "ONNX_LAB_MAX_MEMORY") and run_timeout() == 7
    monkeypatch.setenv("ONNX_LAB_MAX_MEMORY", "off")
    assert memory_limit()[0] is None
    monkeypatch.setenv("ONNX_LAB_RUN_TIMEOUT", "soon")
    with pytest.raises(InputError, match="ONNX_LAB_RUN_TIMEOUT"):
        run_timeout()


def test_a_bad_run_timeout_variable_is_named_not_blamed_on_onnxruntime(monkeypatch, capsys):
    # The profile's run loop wrapped it: "onnxruntime failed to run the model on
    # CPUExecutionProvider: ONNX_LAB_RUN_TIMEOUT: ... Check the feeds (dtype/shape) and
    # lab.check()".
    monkeypatch.setenv("ONNX_LAB_RUN_TIMEOUT", "soon")
    with pytest.raises(InputError, match="^ONNX_LAB_RUN_TIMEOUT") as e:
        onnx_lab.profile("sample:convnet", runs=2, warmup=0, progress=False)
    assert "failed to run" not in str(e.value) and "feeds" not in str(e.value)
    assert main(["profile", "sample:convnet", "--runs", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-lab: error: ONNX_LAB_RUN_TIMEOUT") and "failed to run" not in err


def test_a_growing_series_of_runs_is_estimated_along_its_line(monkeypatch):
    # compare_llm on a merged llama spent 90 of 93 s estimating each decode step's memory (a
    # shape inference per new past length); a series is estimated exactly twice, then along
    # the line, exactly again near the limit, and still refused past it
    from onnx_lab.core import limits
    from onnx_lab.runtime import session as sess_mod
    from onnx_lab.runtime.session import check_memory_of, make_session

    lab = onnx_lab.open("sample:tiny_llm")
    sess = make_session(lab.model)
    calls = []
    real = limits.estimate_run_memory

    def counted(model, shapes, dims=None):
        calls.append(1)
        return real(model, shapes, dims)

    monkeypatch.setattr(sess_mod, "estimate_run_memory", counted)

    def feeds(past):
        f = {"input_ids": np.zeros((1, 1), np.int64),
             "attention_mask": np.ones((1, past + 1), np.int64)}
        f.update({f"past_key_values.{i}.{k}": np.zeros((1, 2, past, 16), np.float32)
                  for i in range(2) for k in ("key", "value")})
        return f

    with run_limits(memory=1 << 30):
        for past in range(1, 40):
            check_memory_of(sess, feeds(past), along=("step", past))
    assert len(calls) == 2  # far from 1 GB: the line says so
    calls.clear()
    sess2 = make_session(lab.model)
    with run_limits(memory=8 * 1024 * 1024):  # 8 MB: the line nears it, checked exactly
        with pytest.raises(RunLimitError, match="over the memory limit"):
            for past in range(1, 100_000, 997):
                check_memory_of(sess2, feeds(past), along=("step", past))
    assert 2 < len(calls) < 100
