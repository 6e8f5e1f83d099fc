"""Presets: built from what each registered pass declares (``presets = {"safe": (order,)}``),
in the order of the keys; the lists below are the presets' contents, pinned."""

from __future__ import annotations

import pytest

from onnx_lab.errors import UnknownNameError
from onnx_lab.transforms import available
from onnx_lab.transforms.apply import preset_passes
from onnx_lab.transforms.presets import PRESETS, preset_table

SAFE = [
    "eliminate_identity",
    "eliminate_dropout",
    "eliminate_dead_nodes",
    "fold_shapes",
    "fold_constants",
    "sink_transposes",
    "fuse_conv_mul",
    "fuse_matmul_mul",
    "fuse_conv_add_bias",
    "fuse_conv_bn",
    "fuse_transposes",
    "sink_transposes",
    "fuse_reshapes",
    "eliminate_dead_nodes",
    "remove_unused_initializers",
]


def test_the_presets_and_their_order():
    assert dict(PRESETS) == {"safe": SAFE}
    assert list(PRESETS) == ["safe"] and "safe" in PRESETS and len(PRESETS) == 1
    assert set(PRESETS["safe"]) <= set(available().name)


def test_presets_come_from_the_registry():
    table = preset_table()
    assert list(table.columns) == ["preset", "order", "name"]
    safe = table.loc[table.preset == "safe"]
    assert safe["name"].tolist() == SAFE
    assert safe["order"].is_monotonic_increasing and safe["order"].is_unique
    # Each member's place is the pass's own declaration, as available() shows it.
    declared = available().set_index("name")["presets"]
    for name, order in zip(safe["name"], safe["order"]):
        assert order in declared[name]["safe"], name


def test_a_registered_pass_joins_its_preset_in_order():
    from onnx_lab.transforms.base import _REGISTRY, LabPass, register_pass

    @register_pass("_test_preset_member")
    class _Member(LabPass):
        """A pass of this test only."""

        presets = {"safe": (45,)}

    # A subclass registered under another name does not inherit its parent's presets.
    @register_pass("_test_preset_variant")
    class _Variant(_Member):
        """A variant of this test only."""

    try:
        assert "_test_preset_variant" not in PRESETS["safe"]
        safe = PRESETS["safe"]
        assert safe.index("_test_preset_member") == safe.index("sink_transposes") + 1
        assert len(safe) == len(SAFE) + 1
    finally:
        del _REGISTRY["_test_preset_member"], _REGISTRY["_test_preset_variant"]
    assert PRESETS["safe"] == SAFE


def test_unknown_preset_names_the_presets():
    with pytest.raises(UnknownNameError, match="safe"):
        preset_passes("sfae")
    with pytest.raises(KeyError):
        PRESETS["sfae"]
