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


# `make check` leaves out tests that need PyTorch (`-m "not torch"`): a test is marked when it,
# its module or one of its fixtures skips without torch, found from the source rather than kept
# in a list.
_NEEDS_TORCH = ('importorskip("torch")', "importorskip('torch')")


def _needs_torch(obj) -> bool:
    import inspect

    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):
        return False
    return any(s in src for s in _NEEDS_TORCH)


def pytest_collection_modifyitems(config, items):
    seen: dict[object, bool] = {}

    def cached(obj) -> bool:
        if obj not in seen:
            seen[obj] = _needs_torch(obj)
        return seen[obj]

    for item in items:
        fn = getattr(item, "function", None)
        if fn is None:
            continue
        module = getattr(item, "module", None)
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = [] if fixtures is None else [d.func for name in item.fixturenames
                                             for d in fixtures.name2fixturedefs.get(name, ())]
        if (getattr(module, "torch", None) is not None and module.__name__ != "conftest"
                and cached(module)) or cached(fn) or any(cached(f) for f in defs):
            item.add_marker(pytest.mark.torch)
