"""Presets: built from what each registered pass declares (``presets = {"safe": (order,)}``),
in the order of the keys; the lists below are the presets' contents, pinned."""

from __future__ import annotations

import pytest

from onnx_lab.errors import UnknownNameError
from onnx_lab.transforms import available
from onnx_lab.transforms.apply import preset_passes
from onnx_lab.transforms.presets import PRESETS

SAFE = [
    "eliminate_identity",
    "eliminate_dropout",
    "eliminate_dead_nodes",
    "fold_constants",
    "fuse_conv_add_bias",
    "fuse_conv_bn",
    "fuse_transposes",
    "fuse_reshapes",
    "eliminate_dead_nodes",
    "remove_unused_initializers",
]


def test_the_presets_and_their_order():
    assert dict(PRESETS) == {"safe": SAFE}
    assert list(PRESETS) == ["safe"] and "safe" in PRESETS and len(PRESETS) == 1
    assert set(PRESETS["safe"]) <= set(available().name)


def test_unknown_preset_names_the_presets():
    with pytest.raises(UnknownNameError, match="safe"):
        preset_passes("sfae")
    with pytest.raises(KeyError):
        PRESETS["sfae"]
