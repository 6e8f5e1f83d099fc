"""Shared fixtures: isolated sample cache, small model builders."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _sample_cache(tmp_path_factory):
    """Write sample models into a per-run folder, never into the user's cache."""
    import os

    os.environ["ONNX_LAB_CACHE"] = str(tmp_path_factory.mktemp("onnx_lab_cache"))
    yield
