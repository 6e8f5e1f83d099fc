"""Fixtures for the headless widget tests: samples opened once per module."""

from __future__ import annotations

import pytest

import onnx_lab

SAMPLES = ["convnet", "transformer_block", "control_flow"]
# Values for the symbolic dims of each sample (transformer_block has batch and seq).
DIMS = {"convnet": None, "transformer_block": {"batch": 1, "seq": 8}, "control_flow": None}


@pytest.fixture(params=SAMPLES)
def sample_lab(request):
    """A fresh Lab of every sample, with its dims resolved."""
    return onnx_lab.open(f"sample:{request.param}", dims=DIMS[request.param])


def _no_error(widget) -> None:
    assert widget.error is None, repr(widget.error)
    assert "onnx-lab-error" not in widget.status.value


@pytest.fixture
def no_error():
    """Assert that a widget shows no error box and holds no caught exception."""
    return _no_error


def _holder(root, widget):
    """The box among ``root``'s descendants (``root`` itself included) whose children hold
    ``widget``, else None."""
    for child in getattr(root, "children", ()):
        if child is widget:
            return root
        found = _holder(child, widget)
        if found is not None:
            return found
    return None


@pytest.fixture
def holder():
    """``holder(root, widget)``: the box that holds ``widget`` as a child (the row or group a
    page lays it out in), searched from ``root`` down."""
    return _holder
