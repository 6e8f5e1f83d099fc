from __future__ import annotations

import pytest

import onnx_lab
from onnx_lab.widgets import Profiler


@pytest.mark.slow
def test_profiler_every_button_on_every_sample(sample_lab, no_error):
    p = Profiler(sample_lab, runs=2, warmup=0)
    no_error(p)
    assert [cb.description for cb in p.providers][0] == "CPUExecutionProvider"
    assert "lab.profile(" in p.code.value  # the façade: it adds the predicted activation peak
    p.profile_button.click()
    no_error(p)
    prof = p.result
    assert type(prof).__name__ == "Profile" and prof.runs == 2
    assert p.plot_html.value.startswith("<img")
    assert "<table" in p.ops_table.html.value and "<table" in p.nodes_table.html.value
    assert "mean" in p.summary_html.value
    # the Graph tab says how to draw it until it is drawn (it showed an empty table)
    assert "Latency on graph" in p.graph_hint.value
    p.render_button.click()
    no_error(p)
    assert type(p.result).__name__ == "Rendering" and p.tabs.selected_index == 7
    assert p.graph_hint.value == ""
    p.levels_button.click()
    no_error(p)
    assert list(p.result["opt_level"]) == ["disable", "basic", "extended", "all"]
    p.cost_button.click()
    no_error(p)
    assert type(p.result).__name__ == "Cost" and p.roofline.total_ms >= 0
    assert "Roofline" in p.cost_html.value
    p.sweep_sizes.value = "1,2"
    p.sweep_button.click()
    # A sample without a symbolic batch dim shows a DimError; one with it sweeps.
    if p.error is None:
        assert type(p.result).__name__ == "BatchSweep"
    else:
        assert type(p.error).__name__ == "DimError" and "onnx-lab-error" in p.status.value


@pytest.mark.slow
def test_profiler_controls_reach_the_call(no_error):
    p = Profiler(onnx_lab.open("sample:convnet"))
    p.runs.value = 3
    p.warmup.value = 1
    p.opt_level.value = "disable"
    p.profile_button.click()
    no_error(p)
    assert p.result.runs == 3 and p.result.warmup == 1 and p.result.opt_level == "disable"
    assert p.progress.value == p.progress.max == 4  # 1 warm-up + 3 runs, reported live
    assert "runs=3, warmup=1, opt_level=&#x27;disable&#x27;" in p.code.value
    p.peak_tflops.value = 2.0
    p.bandwidth.value = 100.0
    p.cost_button.click()
    no_error(p)
    assert p.roofline.peak_flops == 2e12 and p.roofline.bandwidth == 100e9


def test_profiler_batch_sweep_on_dynamic_batch(no_error):
    lab = onnx_lab.open("sample:transformer_block", dims={"seq": 4})
    p = Profiler(lab, runs=2, warmup=0)
    assert p.sweep_dim.value == "batch"
    p.sweep_sizes.value = "1,2"
    p.sweep_button.click()
    no_error(p)
    assert list(p.result.table["batch"]) == [1, 2]
    assert "knee" in p.sweep_html.value and "lab.batch_sweep((1, 2)" in p.code.value


def test_profiler_errors_show_in_widget():
    lab = onnx_lab.open("sample:transformer_block")  # batch and seq unresolved
    p = Profiler(lab, runs=2, warmup=0)
    p.profile_button.click()
    assert type(p.error).__name__ == "DimError" and "onnx-lab-error" in p.status.value
    assert "batch" in p.status.value
    p.render_button.click()  # nothing profiled yet: a hint, no exception
    assert "Profile first" in p.status.value
    conv = Profiler(onnx_lab.open("sample:convnet"), runs=2, warmup=0)
    conv.sweep_button.click()  # fixed batch: DimError pointing to set_input_shape
    assert type(conv.error).__name__ == "DimError"
    conv.sweep_sizes.value = "1,x"
    conv.sweep_button.click()
    assert "comma-separated" in conv.status.value
    conv.providers[0].value = False
    conv.profile_button.click()
    assert "at least one provider" in conv.status.value
    conv.providers[0].value = True
    conv.bandwidth.value = -1
    conv.cost_button.click()
    assert type(conv.error).__name__ == "InputError"


def _mlp_lab(layers: int = 6, width: int = 256, **dims):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profiling"))
    from test_budget import mlp

    return onnx_lab.open(mlp(layers, width), dims=dims or None)


@pytest.mark.slow
def test_profiler_cancel_keeps_partial_results(no_error):
    import time

    lab = _mlp_lab(batch=64)
    p = Profiler(lab, runs=100000, warmup=1, background=True)
    p.profile_button.click()
    assert p.running and not p.cancel_button.disabled and p.profile_button.disabled
    deadline = time.time() + 20
    while p.progress.value < 30 and time.time() < deadline:
        time.sleep(0.02)
    p.cancel_button.click()
    assert p.wait(30)
    no_error(p)
    prof = p.result
    assert prof.cancelled and 0 < len(prof.latency) < 100001
    assert "cancelled" in p.summary_html.value and "<table" in p.ops_table.html.value
    assert p.cancel_button.disabled and not p.profile_button.disabled
    # the sweep too: partial table shown, marked as such
    p.runs.value = 2000
    p.sweep_sizes.value = "1,2,4,8,16,32"
    p.sweep_button.click()
    while p.progress.value < 5 and time.time() < deadline + 20:
        time.sleep(0.02)
    p.cancel()
    assert p.wait(30)
    no_error(p)
    assert p.result.cancelled and len(p.result.table) < 6
    assert "cancelled" in p.sweep_html.value


@pytest.mark.slow
def test_profiler_budget_mode_and_cost_tab(no_error):
    from onnx_lab.runtime.openvino import openvino_available

    lab = _mlp_lab(3, 64, batch=4)
    p = Profiler(lab, budget_s=2.0)
    assert p.runs.value == 0 and "budget_s=2.0" in p.code.value
    names = [cb.description for cb in p.providers]
    assert ("OpenVINO:CPU" in names) == openvino_available()
    assert openvino_available() or "pip install openvino" in p.backend_note.value
    p.profile_button.click()
    no_error(p)
    st = p.result.latency_stats.iloc[0]
    assert st.profiled_runs == 10 and st.latency_from == "unprofiled"
    assert "95% CI" in p.summary_html.value and "profiled runs" in p.summary_html.value
    assert "predicted" in p.summary_html.value
    p.levels_button.click()
    no_error(p)
    assert "beyond noise" in p.levels_html.value and "<img" in p.levels_html.value
    p.cost_button.click()
    no_error(p)
    v = p.cost_html.value
    assert "FLOPs" in v and " ms<" in v and "B/s" in v and "<img" in v  # units + roofline


def test_batch_sweep_offers_the_model_dims_only():
    import onnx_lab
    from onnx_lab.widgets import Profiler

    fixed = Profiler(onnx_lab.open("sample:convnet"), background=False)
    assert list(fixed.sweep_dim.options) == [] and fixed.sweep_button.disabled
    block = Profiler(onnx_lab.open("sample:transformer_block", dims={"seq": 8}),
                     background=False)
    assert list(block.sweep_dim.options) == ["batch", "seq"]  # the open dim first
    assert block.sweep_dim.value == "batch" and not block.sweep_button.disabled


@pytest.mark.slow
def test_profiler_generation_shows_both_phases(no_error):
    lab = onnx_lab.open("sample:tiny_llm")  # the head size is derived
    p = Profiler(lab, runs=2, warmup=0)
    assert not p.generate_button.disabled
    p.gen_prompt.value = 6
    p.gen_tokens.value = 4
    p.generate_button.click()
    no_error(p)
    g = p.result
    assert type(g).__name__ == "GenerationProfile" and g.prompt_tokens == 6
    assert g.new_tokens == 4 and g.runs == 2
    assert p.tabs.selected_index == 8 and p.tabs.get_title(8) == "Generation"
    assert "prefill" in p.gen_html.value and "decode" in p.gen_html.value
    assert "tokens/s" in p.gen_html.value and p.gen_plot.value.startswith("<img")
    assert "<table" in p.gen_ops.html.value
    assert "lab.profile_generation(prompt=6, new_tokens=4" in p.code.value


def test_profiler_generation_disabled_without_a_cache():
    p = Profiler(onnx_lab.open("sample:convnet"))
    assert p.generate_button.disabled
    assert "no KV-cache inputs" in p.generate_button.tooltip


@pytest.mark.slow
def test_profiler_says_the_budget_is_too_small_and_offers_one(no_error):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "_budget_advice_models", Path(__file__).resolve().parents[1] / "profiling" /
        "test_budget_advice.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = Profiler(onnx_lab.open(mod.slow_model(), dims={"batch": 2}), budget_s=0.01, warmup=1,
                 background=False)
    assert p.budget_hint.value == "" and p.budget_apply.layout.display == "none"
    p.profile_button.click()
    no_error(p)
    a = p.advice
    assert a is not None and "budget too small" in p.budget_hint.value
    assert f"~{a.suggested_s:g} s gives ≥ 10 runs" in p.budget_hint.value
    assert p.budget_apply.layout.display is None and f"{a.suggested_s:g} s" in \
        p.budget_apply.description
    first = p.profile_result
    p.budget_apply.click()  # the budget box takes it and the profile runs again
    no_error(p)
    assert p.budget.value == a.suggested_s and p.profile_result is not first
    assert p.profile_result.budget_s == a.suggested_s
    assert int(p.profile_result.latency_stats["runs"].min()) > a.runs


def test_cancel_sits_beside_the_actions_not_after_the_hidden_progress(holder):
    # The progress bar is hidden by visibility (it keeps its 260 px): placed between the actions
    # and Cancel, it pushed Cancel to the far right or onto a line of its own.
    p = Profiler(onnx_lab.open("sample:convnet"))
    row = list(holder(p, p.cancel_button).children)
    assert row.index(p.cancel_button) == row.index(p.levels_button) + 1
    assert p.progress in row[-2:]


def test_progress_names_what_it_times_in_full():
    # The label was the bar's description cut to 12 characters: "profiling cp".
    p = Profiler(onnx_lab.open("sample:convnet"), background=False)
    p._progress(3, 10, "profiling cpu")
    assert "profiling cpu" in p.progress_label.value
    assert p.progress.description in ("", "profiling cpu")


def test_every_tab_says_which_button_fills_it(no_error):
    # Light ResNet-50 at 1,280 px: before Profile the Overview was an empty box, and after it
    # the ORT levels and Batch sweep tabs were empty, Cost held two bare captions ("roofline
    # per node", "cost per node") and Generation one ("op types per phase").
    from onnx_lab.widgets._common import snapshot_of_html

    p = Profiler(onnx_lab.open("sample:convnet"), runs=2, warmup=0, background=False)
    hints = {0: "Profile", 1: "Profile", 2: "Profile", 3: "Profile", 4: "Compare ORT levels",
             5: "Batch sweep", 6: "Cost / roofline", 8: "Profile generation"}
    for i, word in hints.items():
        p.tabs.selected_index = i
        text = snapshot_of_html(p.tabs.children[i])
        assert word in text, (i, text)
    p.run_cost()
    no_error(p)
    text = snapshot_of_html(p.tabs.children[6])
    assert "roofline per node" in text and "cost per node" in text
    assert "Cost / roofline to" not in text
    p.run_profile()
    no_error(p)
    assert "Click Profile" not in snapshot_of_html(p.tabs.children[1])
    assert "op types" in p.ops_table.html.value
