"""Issue 17: time budgets, honest statistics, noise-aware comparisons, memory, cancel, OpenVINO."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from models import tensor_scatter_model
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.profiling import (
    batch_sweep,
    compare_models,
    compare_samples,
    levels,
    profile,
    summarize,
    thread_sweep,
)
from onnx_lab.profiling.stats import busy_note, mann_whitney_p, median_ci
from onnx_lab.runtime.openvino import openvino_available


def mlp(layers: int, width: int = 192, seed: int = 0) -> onnx.ModelProto:
    """x[batch, width] through ``layers`` MatMul+Relu: twice the layers, twice the work."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = f"w{i}"
        inits.append(onnx.numpy_helper.from_array(
            (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), w))
        nodes.append(helper.make_node("MatMul", [x, w], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


# ---------------------------------------------------------------------------- statistics
def test_summarize_and_median_interval():
    x = np.random.default_rng(0).normal(10.0, 0.5, 200)
    s = summarize(x)
    assert s["runs"] == 200
    assert s["p10_ms"] < s["ci_low_ms"] <= s["p50_ms"] <= s["ci_high_ms"] < s["p90_ms"]
    assert 0 < s["rel_ci"] < 0.02 and s["spread"] > 0
    assert median_ci([1.0, 2.0, 3.0]) == (1.0, 3.0)  # too few runs: the whole range
    assert summarize([])["runs"] == 0


def test_compare_samples_in_words():
    rng = np.random.default_rng(1)
    a = rng.normal(10, 0.4, 60)
    same = compare_samples(a, rng.normal(10, 0.4, 60))
    assert not same.different and "no difference beyond noise" in same.text
    slow = compare_samples(a, rng.normal(20, 0.8, 60), labels=("fast", "slow"))
    assert slow.different and slow.ratio == pytest.approx(2, rel=0.05)
    assert slow.text.startswith("slow takes 1.9") and "beyond noise" in slow.text
    # significant but tiny (2%): still called noise
    tiny = compare_samples(a, a * 1.02)
    assert not tiny.different and "under 5%" in tiny.text
    assert mann_whitney_p(a, a) == pytest.approx(1.0)


def test_busy_note():
    assert busy_note([10.0] * 20, load=0.1) is None
    note = busy_note(list(np.linspace(5, 20, 20)), "cpu", load=3.0)
    assert "busy" in note and "load average 3.0" in note
    # The same relative spread: a sign of load at 10 ms, jitter at 0.05 ms (no false alarm).
    spread = np.linspace(0.7, 1.3, 20)
    assert "spread by" in busy_note(list(10 * spread), load=0.1)
    assert busy_note(list(0.05 * spread), load=0.1) is None


@pytest.mark.slow
def test_identical_models_no_difference_and_2x_slower_differs():
    a, b = mlp(6), mlp(6)
    same = compare_models(a, b, dims={"batch": 32}, budget_s=3.0, threads=1)
    assert not same.different, same.text
    assert "no difference beyond noise" in same.text
    slow = compare_models(mlp(6), mlp(12), dims={"batch": 32}, budget_s=3.0, threads=1,
                          labels=("6 layers", "12 layers"))
    assert slow.different, slow.text
    assert 1.5 < slow.ratio < 2.7 and "beyond noise" in slow.text


# ---------------------------------------------------------------------------- budgets
@pytest.mark.slow
def test_profile_budget_profiles_few_runs_and_times_the_rest():
    from onnx_lab._pandas import prefetch

    # The budget counts from the call: pandas' first import (up to ~2 s on a loaded 2-core
    # machine) would leave this 2 s budget no unprofiled runs in a fresh process.
    prefetch()
    lab = onnx_lab.open(mlp(4), dims={"batch": 8})
    p = lab.profile(providers="cpu", budget_s=2.0, progress=False)
    st = p.latency_stats.iloc[0]
    assert st.profiled_runs == 10 and st.latency_from == "unprofiled"
    assert st.stopped in ("stable", "budget") and st.runs >= 10
    assert st.p10_ms <= st.ci_low_ms <= st.p50_ms <= st.ci_high_ms <= st.p90_ms
    lat = p.latency.loc[p.latency.session == "CPUExecutionProvider"]
    assert int(lat.profiled.sum()) == 10 and int((~lat.profiled & ~lat.warmup).sum()) == st.runs
    # the kernels come from the profiled runs only
    assert sorted(p.kernels.run.unique()) == list(range(5, 15))
    m = p.memory.iloc[0]
    assert m.peak_rss_bytes >= m.rss_before_bytes > 0 or np.isnan(m.peak_rss_bytes)
    assert m.predicted_activation_bytes == lab.cost(dims={"batch": 8}).total[
        "peak_activation_bytes"]
    assert "profiled runs" in p._repr_html_()


def test_fixed_runs_still_exact():
    p = profile(onnx_lab.open(mlp(2), dims={"batch": 2}), runs=25, warmup=2, providers="cpu")
    st = p.latency_stats.iloc[0]
    assert p.runs == 25 and st.profiled_runs == 10 and st.runs == 15 and st.stopped == "runs"
    p = profile(onnx_lab.open(mlp(2), dims={"batch": 2}), runs=4, warmup=0, providers="cpu",
                profile_runs=4)
    assert p.latency_stats.iloc[0].latency_from == "profiled"


def test_profile_cancel_returns_partial():
    ev = threading.Event()

    def progress(done, total, label):
        if done >= 8:
            ev.set()

    p = profile(onnx_lab.open(mlp(2), dims={"batch": 2}), runs=200, warmup=2, providers="cpu",
                progress=progress, cancel=ev)
    assert p.cancelled and any("cancelled" in n for n in p.notes)
    assert len(p.latency) < 202 and len(p.nodes) > 0


@pytest.mark.slow
def test_batch_sweep_budget_stops_past_the_knee_and_measures_memory():
    lab = onnx_lab.open(mlp(4, width=256))
    s = lab.batch_sweep((1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), budget_s=4.0,
                        progress=False)
    t = s.table
    assert {"ci_low_ms", "ci_high_ms", "items_per_s_low", "gain_beyond_noise",
            "peak_rss_bytes", "predicted_activation_bytes"} <= set(t.columns)
    if s.knee is not None and s.knee < 512:
        assert t.batch.max() < 1024 and any("stopped past the knee" in n for n in s.notes)
    assert (t.predicted_activation_bytes.diff().dropna() > 0).all()  # grows with the batch
    assert s.elapsed_s < 10
    fig = s.plot()
    assert all(a.get_ylim()[0] == 0 for a in fig.axes)  # axes start at zero


def test_batch_sweep_cancel():
    ev = threading.Event()
    ev.set()
    s = batch_sweep(onnx_lab.open(mlp(2)), (1, 2, 4), runs=3, warmup=0, cancel=ev)
    assert s.cancelled and len(s.table) <= 1


@pytest.mark.slow
def test_levels_and_threads_budget():
    lab = onnx_lab.open(mlp(3), dims={"batch": 4})
    df = levels(lab, budget_s=2.0, progress=False)
    assert df.opt_level.tolist() == ["disable", "basic", "extended", "all"]
    assert (df.runs >= 3).all() and df.verdict.iloc[0] == ""
    assert all(("beyond noise" in v) for v in df.verdict.iloc[1:])
    th = thread_sweep(lab, (1, 2), budget_s=1.5, progress=False)
    assert th.threads.tolist() == [1, 2] and (th.runs >= 3).all()
    with pytest.raises(onnx_lab.errors.InputError, match="budget_s"):
        levels(lab, budget_s=0)


def test_race_retires_a_clearly_slower_point_and_stops():
    """The adaptive sweeps race for the fastest: a point 4x slower leaves after a few rounds
    with a note, and with one point left the race ends long before the budget."""
    import time

    from onnx_lab._progress import Progress
    from onnx_lab.profiling.stats import clearly_slower
    from onnx_lab.profiling.sweep import RACE_MIN_RUNS, _interleaved
    from onnx_lab.runtime.session import make_session

    fast = make_session(onnx_lab.open(mlp(2)).model, threads=1)
    slow = make_session(onnx_lab.open(mlp(8)).model, threads=1)
    feed = {"x": np.ones((64, 192), np.float32)}
    t0 = time.perf_counter()
    (a, b), notes = _interleaved([fast, slow], feed, None, 1, 30.0, t0, Progress(False, 1, ""),
                                 None, 0.02, ["fast", "slow"])
    assert time.perf_counter() - t0 < 10  # far from the 30 s budget
    assert RACE_MIN_RUNS <= len(b) < 40 and len(a) == len(b)
    assert clearly_slower(a, b) and not clearly_slower(b, a)
    assert len(notes) == 1 and notes[0].startswith("slow left the race after")
    # fixed runs never race
    (a, b), notes = _interleaved([fast, slow], feed, 7, 0, None, t0, Progress(False, 14, ""),
                                 None, 0.02, ["fast", "slow"])
    assert len(a) == len(b) == 7 and notes == []


def test_clearly_slower_needs_runs_and_separation():
    from onnx_lab.profiling.stats import clearly_slower

    rng = np.random.default_rng(5)
    a = rng.normal(10, 0.2, 30)
    assert clearly_slower(a, rng.normal(12, 0.2, 30)) and not clearly_slower(a, a + 0.01)
    assert not clearly_slower(a, a * 1.03)      # separated, but under 5%: noise
    assert not clearly_slower(a[:4], a[:4] * 2)  # too few runs to retire anything
    assert clearly_slower(a[:5], np.full(5, 11.0)) == (a[:5].max() * 1.05 < 11.0)


# ---------------------------------------------------------------------------- OpenVINO
@pytest.mark.slow  # a latency sweep on two backends
@pytest.mark.skipif(not openvino_available(), reason="openvino (optional extra) not installed")
def test_openvino_beside_ort():
    lab = onnx_lab.open(mlp(4), dims={"batch": 4})
    # a budget that leaves OpenVINO runs after its compile on a loaded machine (3 s gave one)
    p = profile(lab, providers=["cpu", "openvino"], budget_s=10.0, progress=False)
    assert p.latency_stats.session.tolist() == ["CPUExecutionProvider", "OpenVINO:CPU"]
    ov = p.latency_stats.iloc[1]
    assert ov.profiled_runs == 0 and ov.runs >= 3
    assert set(p.nodes.session) == {"CPUExecutionProvider"}
    assert len(p.differences()) == 1
    r = lab.compare_backends(["cpu", "openvino"], batch_sizes=(1, 2, 4), budget_s=3.0,
                             dims={}, progress=False)
    t = r.table.set_index("backend")
    assert list(t.index) == ["CPUExecutionProvider", "OpenVINO:CPU"]
    assert bool(t.loc["OpenVINO:CPU", "outputs_agree"]) and t.loc["OpenVINO:CPU", "preset"] == "fp32"
    assert (t.items_per_s_at_knee > 0).all() and (t.p10_ms <= t.p90_ms).all()
    assert "beyond noise" in t.loc["OpenVINO:CPU", "vs_reference"]
    assert set(r.sweep.table.backend) == set(t.index)


@pytest.mark.skipif(not openvino_available(), reason="openvino (optional extra) not installed")
def test_openvino_feeds_an_input_its_port_names_after_a_cast():
    # x is read only by a Cast to float16, which OpenVINO folds into the input: the port's
    # names are {'x', 'h'} and get_any_name() gives 'h'. The session used to drop the feed
    # and run on unset input memory (1e30s), or on the previous run's input.
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    from onnx_lab.backends import compare_backends
    from onnx_lab.runtime.openvino import OpenVINOSession

    w = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float16).reshape(4, 4), "w")
    g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["h"], to=TP.FLOAT16),
         helper.make_node("MatMul", ["h", "w"], ["p"]),
         helper.make_node("Cast", ["p"], ["y"], to=TP.FLOAT),
         helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4]),
         helper.make_tensor_value_info("m", TP.FLOAT, [])], [w])
    lab = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    sess = OpenVINOSession(lab.model)
    assert sess._inputs == ["x"]
    for x in (np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), -3, np.float32)):
        y, m = sess.run(None, {"x": x})
        np.testing.assert_allclose(m, x.mean(), rtol=1e-6)
        np.testing.assert_allclose(y, x @ numpy_helper.to_array(w).astype(np.float32),
                                   rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="no value fed for the input"):
        sess.run(None, {})
    r = compare_backends(lab, ["cpu", "openvino"], budget_s=2.0, progress=False)
    assert r.outputs.passed.all(), r.outputs
    out = r.outputs.loc[r.outputs.backend != "CPUExecutionProvider"].set_index("output")
    # y is float32 but computed in float16: judged by float16's rule; m by float32's
    assert out.loc["y", "preset"] == "fp16" and out.loc["m", "preset"] == "fp32"


def test_openvino_missing_says_how_to_add(monkeypatch):
    import onnx_lab.runtime.openvino as ovm
    from onnx_lab.backends import compare_backends
    from onnx_lab.errors import ProviderError

    monkeypatch.setattr(ovm, "openvino_available", lambda: False)
    with pytest.raises(ProviderError, match="pip install openvino"):
        compare_backends(mlp(2), ["cpu", "openvino"], dims={"batch": 1})
    r = compare_backends(mlp(2), None, dims={"batch": 1}, budget_s=1.0, progress=False)
    assert any("pip install openvino" in n for n in r.notes)
    assert r.table.backend.tolist()[0] == "CPUExecutionProvider"
    assert any("TensorRT" in n for n in r.notes)  # skipped cleanly without a GPU


def test_decided_is_an_equivalence_test():
    from onnx_lab.profiling.stats import decided

    rng = np.random.default_rng(3)
    a = rng.normal(10, 0.1, 40)
    assert decided(a, rng.normal(10, 0.1, 40))        # clearly within 5%
    assert decided(a, rng.normal(20, 0.2, 40))        # clearly slower
    assert not decided(a, rng.normal(10.5, 2.0, 40))  # could still go either way
    assert not decided(a[:5], a[:5])                  # too few runs


def test_the_cpu_row_of_compare_backends_is_measured():
    # its timed session runs with every graph optimization; it was reported as agreeing with
    # max_abs 0 without a run (a static-int8 model's fused kernels differ by whole steps)
    import onnx_lab
    from onnx_lab.backends import REFERENCE, compare_backends

    lab = onnx_lab.open("sample:convnet")
    from onnx_lab.numerics import make_feeds

    q = onnx_lab.to_int8_static(lab, feeds=make_feeds(lab, n=4))
    r = compare_backends(q, ["cpu"], budget_s=0.5, progress=False)
    cpu = r.outputs.loc[r.outputs.backend == REFERENCE]
    assert len(cpu) == len(q.outputs) and cpu.max_abs.notna().all()
    row = r.table.set_index("backend").loc[REFERENCE]
    assert row["max_abs"] == pytest.approx(float(cpu.max_abs.max()))
    assert row["outputs_agree"] == bool(cpu.passed.all())


@pytest.mark.skipif(not openvino_available(), reason="openvino (optional extra) not installed")
def test_a_model_openvino_cannot_convert_is_compared_without_it_and_says_why():
    # an opset-24 TensorScatter: "Exception from src/inference/src/cpp/core.cpp:84:" and advice
    # about com.microsoft ops, and the default comparison aborted
    m = tensor_scatter_model()
    lab = onnx_lab.open(m)
    r = lab.compare_backends(budget_s=1.0, progress=False)
    assert list(r.table.backend) == ["CPUExecutionProvider"]
    note = next(n for n in r.notes if n.startswith("OpenVINO skipped"))
    assert "TensorScatter-24" in note and "com.microsoft" not in note
    # named by the user, it is an error that says the same
    with pytest.raises(onnx_lab.errors.RuntimeLoadError, match="TensorScatter-24") as e:
        lab.compare_backends(["cpu", "openvino"], budget_s=1.0, progress=False)
    assert "does not convert TensorScatter-24" in e.value.fix
