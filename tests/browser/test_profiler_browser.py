"""The Profiler's long actions in a real JupyterLab (headless Chromium) on a YOLO-like detector
at 320x320: Profile, ORT levels and a Batch sweep finish with their default time budgets; a Profile of
200,000 fixed runs is cancelled from the browser and keeps its partial results. On a decoder
LLM (``sample:tiny_llm``), Profile generation fills the Generation tab with prefill and decode
(screenshot ``test-artifacts/profiler_generation_browser.png``). In a narrow pane every tab
title is whole (``profiler_narrow_browser.png``). The seconds each action took, from
the click to the result in the page, are written to ``test-artifacts/profiler_browser.json``
(timings are figures, not assertions; ``benchmarks/bench_profile.py`` measures them)."""

from __future__ import annotations

import json
import time

import pytest
from _jupyter import (
    ARTIFACTS,
    lab_in_browser,
    run_all_cells,
)

pytestmark = pytest.mark.browser

CELLS = [
    "import onnx, onnx_lab, _models\nfrom onnx_lab.widgets import Profiler\n"
    "onnx.save(_models.detector(), 'det.onnx')\n"
    "lab = onnx_lab.open('det.onnx', dims={'height': 320, 'width': 320})",
    "prof = Profiler(lab)\nprof",
]


def _wait_text(page, text: str, timeout_ms: int) -> None:
    page.wait_for_function(
        "t => [...document.querySelectorAll('.onnx-lab-profiler')]"
        ".some(e => e.innerText.includes(t))", arg=text, timeout=timeout_ms)


def test_profiler_actions_finish_or_cancel_in_jupyterlab(tmp_path):
    seconds: dict[str, float] = {}
    with lab_in_browser(tmp_path, {"profiler.ipynb": CELLS}, models=True) as (url, page):
        try:
            run_all_cells(page, url, "profiler.ipynb")
            prof = page.locator(".onnx-lab-profiler")
            prof.wait_for(timeout=120_000)

            t0 = time.perf_counter()
            prof.locator("button", has_text="Profile").first.click()
            _wait_text(page, "p50", 120_000)
            seconds["profile"] = time.perf_counter() - t0
            page.wait_for_function(  # the buttons come back when the action is over
                "() => !document.querySelector('.onnx-lab-profiler button.mod-warning:enabled')"
                " || document.querySelector('.onnx-lab-profiler button.mod-warning').disabled",
                timeout=60_000)

            t0 = time.perf_counter()
            prof.locator("button", has_text="Compare ORT levels").first.click()
            page.get_by_role("tab", name="ORT levels").wait_for(timeout=10_000)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.onnx-lab-profiler table')]"
                ".some(t => t.innerText.includes('extended'))", timeout=120_000)
            seconds["ort_levels"] = time.perf_counter() - t0
            cancel = prof.locator("button", has_text="Cancel").first
            page.wait_for_function("b => b.disabled", arg=cancel.element_handle(),
                                   timeout=60_000)

            # A Batch sweep over the height (the detector has no batch dim) stops by itself
            # past its knee.
            prof.locator("select").filter(
                has=page.locator("option", has_text="height")).first.select_option("height")
            sizes = prof.locator(".widget-text", has_text="sizes").locator("input")
            sizes.fill("64,128,192,256,320,384,448,512")
            sizes.press("Enter")
            t0 = time.perf_counter()
            prof.locator("button", has_text="Batch sweep").first.click()
            _wait_text(page, "knee", 120_000)
            seconds["batch_sweep"] = time.perf_counter() - t0
            page.wait_for_function("b => b.disabled", arg=cancel.element_handle(),
                                   timeout=60_000)

            # A Profile of 200,000 fixed runs only ends when Cancel is clicked in the page.
            runs = prof.locator(".widget-inline-hbox", has_text="runs").locator("input").first
            runs.fill("200000")
            runs.press("Enter")
            t0 = time.perf_counter()
            prof.locator("button", has_text="Profile").first.click()
            page.wait_for_function("b => !b.disabled", arg=cancel.element_handle(),
                                   timeout=30_000)
            page.wait_for_timeout(1500)
            cancel.click()
            page.wait_for_function("b => b.disabled", arg=cancel.element_handle(),
                                   timeout=60_000)
            seconds["profile_cancelled"] = time.perf_counter() - t0
            text = prof.inner_text().lower()
            assert "cancel" in text
            assert prof.locator(".onnx-lab-error").count() == 0

            # In a narrow pane (a 1000 px window beside the file browser: a 564 px output)
            # every tab title is whole, the tabs on two rows ("Overvie", "Op typ": ipywidgets'
            # tab rule outweighed the frame's)
            page.set_viewport_size({"width": 1000, "height": 1000})
            page.wait_for_timeout(500)
            cut = page.evaluate(
                "() => [...document.querySelectorAll('.onnx-lab-profiler .lm-TabBar-tab')]"
                ".map(t => [t, t.querySelector('.lm-TabBar-tabLabel')])"
                ".filter(([t, l]) => l.scrollWidth > l.clientWidth + 1"
                " || t.getBoundingClientRect().right > t.closest('.lm-TabBar')"
                ".getBoundingClientRect().right + 1).map(([t]) => t.textContent)")
            assert cut == []
            page.screenshot(path=str(ARTIFACTS / "profiler_narrow_browser.png"))
        finally:
            page.screenshot(path=str(ARTIFACTS / "profiler_browser.png"), full_page=True)
            (ARTIFACTS / "profiler_browser.json").write_text(json.dumps(seconds, indent=1))


GEN_CELLS = [
    "import onnx_lab\nfrom onnx_lab.widgets import Profiler\n"
    "llm = onnx_lab.open('sample:tiny_llm')",
    "gen = Profiler(llm)\ngen",
]


def test_profiler_generation_shows_prefill_and_decode(tmp_path):
    seconds: dict[str, float] = {}
    with lab_in_browser(tmp_path, {"generation.ipynb": GEN_CELLS}) as (url, page):
        try:
            run_all_cells(page, url, "generation.ipynb")
            gen = page.locator(".onnx-lab-profiler")
            gen.wait_for(timeout=120_000)
            t0 = time.perf_counter()
            gen.locator("button", has_text="Profile generation").first.click()
            page.wait_for_function(
                "() => { const g = document.querySelector('.onnx-lab-profiler');"
                " return g && g.innerText.includes('tokens/s') && g.querySelector('img')"
                " && g.innerText.includes('lab.profile_generation('); }",
                timeout=120_000)
            seconds["generation"] = time.perf_counter() - t0
            page.get_by_role("tab", name="Generation", exact=True).wait_for(timeout=10_000)
            text = gen.inner_text()
            assert "prefill" in text and "decode" in text and "tokens/s" in text
            assert "lab.profile_generation(prompt=16, new_tokens=32" in text
            assert gen.locator(".onnx-lab-error").count() == 0
            gen.locator("img").first.scroll_into_view_if_needed()
        finally:
            page.screenshot(path=str(ARTIFACTS / "profiler_generation_browser.png"),
                            full_page=True)
            (ARTIFACTS / "profiler_generation_browser.json").write_text(
                json.dumps(seconds, indent=1))
