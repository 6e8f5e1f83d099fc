"""Budgets are promises about wall time from the call to the result: session creation, feeds,
cost-model predictions and every run count; a point that cannot fit is not started, a note
says so, and what was measured is returned. Behaviour only (points, notes, order, sessions):
timings belong in benchmarks/bench_profile.py."""

from __future__ import annotations

import html
import time

import numpy as np
import pytest
from test_budget import mlp

import onnx_lab
from onnx_lab.profiling import batch_sweep, levels, thread_sweep
from onnx_lab.profiling._timing import MIN_POINT_RUNS, Budget, PointCost, measure

# A budget no session creation fits in: whatever the machine, it is spent before any run.
SPENT = 1e-6


# ---------------------------------------------------------------------------- building blocks
def test_budget_counts_from_the_given_start_and_says_what_fits():
    t0 = time.perf_counter() - 10.0  # a call that began 10 s ago
    b = Budget(12.0, 4, start=t0)
    assert b.deadline == pytest.approx(t0 + 12.0)
    assert 0 < b.left() <= 2.0 and not b.spent()
    assert b.fits(0.5) and not b.fits(5.0)
    assert b.share() == pytest.approx(b.left() / 4, rel=0.05)
    assert Budget(None, 3).fits(1e9) and Budget(None, 3).left() is None
    assert Budget(1.0, 1, start=t0).spent() and Budget(1.0, 1, start=t0).left() == 0.0


def test_point_cost_scales_runs_and_feeds_with_the_size():
    c = PointCost(fixed_s=0.2, scaled_s=0.01, first_ms=30.0, run_ms=10.0)
    # batch x4: feeds and runs x4, the prediction not
    assert c.estimate(4.0, 3) == pytest.approx(0.2 + 4 * (0.01 + (30 + 30) / 1e3))
    assert c.estimate(1.0, 0) == pytest.approx(0.2 + 0.01 + 0.03)


def test_measure_starts_no_run_past_the_deadline():
    def nap():
        time.sleep(0.02)

    t = time.perf_counter()
    ms, why = measure(nap, budget_s=60.0, deadline=t + 0.05, min_runs=1000)
    assert why == "budget" and 1 <= len(ms) < 5
    # the first timed run always happens, even with the deadline already past (no warm-up)
    calls = []
    ms, why = measure(lambda: calls.append(1), warmup=3, budget_s=60.0,
                      deadline=time.perf_counter() - 1, min_runs=1000)
    assert len(ms) == 1 and len(calls) == 1 and why == "budget"


# ---------------------------------------------------------------------------- batch sweep
@pytest.mark.slow
def test_batch_sweep_goes_smallest_first_in_one_session():
    lab = onnx_lab.open(mlp(3, width=128))
    s = batch_sweep(lab, (1, 2, 4, 8, 16), budget_s=30.0, stop_at_knee=False, progress=False)
    assert s.sessions == 1 and s.budget_s == 30.0
    assert s.table.batch.tolist() == [1, 2, 4, 8, 16]
    assert (s.table.runs >= MIN_POINT_RUNS).all()
    # fixed runs: the same single session, every size
    f = batch_sweep(lab, (1, 2, 4), runs=2, warmup=0, progress=False)
    assert f.sessions == 1 and f.table.batch.tolist() == [1, 2, 4] and f.budget_s is None
    assert (f.table.runs == 2).all()


@pytest.mark.slow  # a batch sweep
def test_batch_sweep_stops_past_the_knee_in_order():
    lab = onnx_lab.open(mlp(3, width=128))
    s = batch_sweep(lab, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), budget_s=30.0,
                    progress=False)
    sizes = s.table.batch.tolist()
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512][:len(sizes)]
    if s.knee is not None and sizes[-1] != 512:
        # the knee's size and the one after it (which showed the gain was gone) were run
        assert sizes[-2] == s.knee
        assert any("stopped past the knee" in n for n in s.notes)


@pytest.mark.slow
def test_batch_sweep_does_not_start_a_size_that_cannot_fit():
    """Runs at batch 65536 of this MLP take seconds: with 1.5 s the sweep stops before a size
    whose warm-up and runs cannot fit, says which and why, and returns the sizes before it."""
    sizes = tuple(2 ** k for k in range(17))
    lab = onnx_lab.open(mlp(4, width=256))
    s = batch_sweep(lab, sizes, budget_s=1.5, stop_at_knee=False, progress=False)
    got = s.table.batch.tolist()
    assert 1 <= len(got) < len(sizes) and got == list(sizes[:len(got)])
    note = next(n for n in s.notes if "not started" in n)
    nxt = sizes[len(got)]
    assert f"batch {nxt} not started" in note and "raise budget_s" in note
    assert f"scaled from batch {got[-1]}" in note and f"not run: {list(sizes[len(got):])}" in note
    assert s.sessions == 1 and not s.cancelled


def test_batch_sweep_budget_counts_session_creation():
    """Creating the session spends the budget: batch 1 still runs once (the call returns a
    measurement), nothing else runs, and the notes say why."""
    s = batch_sweep(onnx_lab.open(mlp(2)), (1, 2, 4), budget_s=SPENT, progress=False)
    assert s.table.batch.tolist() == [1] and s.table.runs.tolist() == [1]
    assert s.knee is None and s.sessions == 1
    assert any("spent before batch 1" in n and "creating the session took" in n
               and "not run: [2, 4]" in n for n in s.notes)
    assert any("no knee found: batch 1 is the largest that fit" in n for n in s.notes)


def test_batch_sweep_predictions_run_inside_the_sweep_for_started_sizes_only():
    calls = []

    def predict(b):
        calls.append(b)
        return 1000.0 * b

    s = batch_sweep(onnx_lab.open(mlp(2)), (1, 2, 4, 8), runs=2, warmup=0, predict=predict,
                    progress=False)
    assert calls == [1, 2, 4, 8]
    assert s.table.predicted_activation_bytes.tolist() == [1000.0, 2000.0, 4000.0, 8000.0]
    calls.clear()
    s = batch_sweep(onnx_lab.open(mlp(2)), (1, 2, 4), budget_s=SPENT, predict=predict,
                    progress=False)
    # no time left for the prediction of the one size run (the session spent it): skipped
    assert calls == [] and s.table.batch.tolist() == [1]
    assert np.isnan(s.table.predicted_activation_bytes.iloc[0])
    assert any("no time left in the budget for the cost model" in n for n in s.notes)
    # Lab.batch_sweep passes the cost model's peak the same way
    lab = onnx_lab.open(mlp(2))
    t = lab.batch_sweep((1, 2), runs=2, warmup=0, progress=False).table
    assert (t.predicted_activation_bytes.diff().dropna() > 0).all()


# ---------------------------------------------------------------------------- races
def test_levels_creates_baseline_and_default_first_and_notes_what_did_not_fit():
    lab = onnx_lab.open(mlp(2), dims={"batch": 4})
    df = levels(lab, budget_s=SPENT, progress=False)
    assert df.opt_level.tolist() == ["disable"]  # one session is always measured
    assert (df.runs >= 1).all() and df.speedup.iloc[0] == 1.0
    assert any(n.startswith("levels all, extended, basic not created") and "raise budget_s" in n
               for n in df.attrs["notes"])
    full = levels(lab, budget_s=30.0, progress=False)
    assert full.opt_level.tolist() == ["disable", "basic", "extended", "all"]
    assert not any("not created" in n for n in full.attrs["notes"])


def test_thread_sweep_budget_counts_session_creation():
    lab = onnx_lab.open(mlp(2), dims={"batch": 4})
    df = thread_sweep(lab, (1, 2), budget_s=SPENT, progress=False)
    assert df.threads.tolist() == [1]
    assert any("2 threads not created" in n for n in df.attrs["notes"])
    assert any("round(s) fit" in n for n in df.attrs["notes"])


@pytest.mark.slow
def test_widget_shows_a_sweep_cut_short_by_the_budget():
    from onnx_lab.widgets import Profiler

    lab = onnx_lab.open(mlp(4, width=256))
    p = Profiler(lab, budget_s=0.5, background=False)
    p.sweep_sizes.value = ",".join(str(2 ** k) for k in range(17))
    p.sweep_button.click()
    assert p.error is None
    s = p.result
    assert s.budget_s == 0.5 and s.sessions == 1
    assert np.all(np.diff(s.table.batch.to_numpy()) > 0) and len(s.table) < 17
    # why it ended (a size that could not fit, or the knee) is in the notes the widget shows
    assert any("not started" in n or "stopped past the knee" in n for n in s.notes)
    assert all(html.escape(n) in p.sweep_html.value for n in s.notes)


# ---------------------------------------------------------------------------- the knee
def test_sizes_are_timed_interleaved_with_the_previous_size():
    from onnx_lab._progress import Progress
    from onnx_lab.profiling.sweep import _time_point
    from onnx_lab.runtime.session import make_session

    sess = make_session(onnx_lab.open(mlp(2)).model, threads=1)
    small, big = (np.ones((b, 192), np.float32) for b in (4, 64))
    budget = Budget(30.0, 2)
    ms, why, first_ms, ms_prev = _time_point(sess, {"x": big}, None, 3, budget,
                                             Progress(False, 1, ""), None, 0.02,
                                             time.perf_counter(), prev_feed={"x": small})
    assert len(ms) == len(ms_prev) >= MIN_POINT_RUNS and first_ms > 0
    assert why in ("stable", "budget")
    # fixed runs are not paired
    ms, why, _f, ms_prev = _time_point(sess, {"x": big}, 4, 0, budget, Progress(False, 4, ""),
                                       None, 0.02, time.perf_counter(), prev_feed={"x": small})
    assert len(ms) == 4 and ms_prev is None and why == "runs"
    # the next size's cost estimate counts the previous size's run in every round
    c = PointCost(run_ms=10.0, paired_ms=10.0)
    assert c.estimate(2.0, 3) == pytest.approx(2 * 0.03 + 0.03)


def test_knee_from_interleaved_runs_not_from_points_measured_apart():
    """The rows say batch 2 doubled the throughput (batch 1 ran while the machine was busy);
    the runs of batch 1 interleaved with batch 2 say it gained nothing: the knee is 1."""
    from onnx_lab.profiling.sweep import _knee, find_knee

    rows = [{"batch": 1, "items_per_s": 50.0}, {"batch": 2, "items_per_s": 100.0},
            {"batch": 4, "items_per_s": 105.0}]
    assert find_knee([1, 2, 4], [50.0, 100.0, 105.0])[0] == 2
    steps = [None, (np.full(9, 10.0), np.full(9, 10.0)), (np.full(9, 10.0), np.full(9, 9.5))]
    knee, gains = _knee(rows, steps)
    assert knee == 1 and gains[1] == pytest.approx(1.0) and gains[2] == pytest.approx(10 / 9.5)
    apart, expected = _knee(rows, [None, None, None]), find_knee([1, 2, 4], [50.0, 100.0, 105.0])
    assert apart[0] == expected[0] == 2 and apart[1][1:] == expected[1][1:]


def test_lab_profile_counts_its_prediction_in_the_budget_it_reports():
    lab = onnx_lab.open(mlp(2), dims={"batch": 4})
    p = lab.profile(providers="cpu", budget_s=2.0, progress=False)
    assert p.budget_s == 2.0  # the budget asked for, though the profile got what was left
    assert p.memory.predicted_activation_bytes.iloc[0] > 0
    with pytest.raises(onnx_lab.errors.InputError, match="budget_s"):
        lab.profile(providers="cpu", budget_s=0)
