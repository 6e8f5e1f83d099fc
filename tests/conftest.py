"""Shared fixtures: isolated sample cache, small model builders."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _sample_cache(tmp_path_factory):
    """Write sample models into a per-run folder, never into the user's cache."""
    import os

    os.environ["ONNX_LAB_CACHE"] = str(tmp_path_factory.mktemp("onnx_lab_cache"))
    yield


@pytest.fixture(scope="session")
def genai_model(tmp_path_factory):
    """``genai_model("fp32" | "int4")``: the path of a tiny Llama built by onnxruntime-genai's
    model builder (built once per run; skips without onnxruntime_genai, transformers, torch)."""
    pytest.importorskip("onnxruntime_genai")
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from models import genai_build

    folder = tmp_path_factory.mktemp("genai")
    return lambda precision="fp32": genai_build(folder, precision)
