"""History: versions, undo/redo/checkout, selective application, provenance over steps."""

from __future__ import annotations

import json

import pytest
from _machinery import chain_lab

import onnx_lab
from onnx_lab.core.history import HISTORY_COLUMNS
from onnx_lab.errors import InputError, PassError, UnknownNameError
from onnx_lab.transforms import origins

IDS = ["test_drop_identity:n1_Identity", "test_drop_identity:n3_Identity",
       "test_drop_identity:n5_Identity"]


def test_step_zero_is_the_original():
    lab = chain_lab()
    h = lab.history
    assert list(h.columns) == HISTORY_COLUMNS + ["current"]
    assert h.loc[0, "pass"] == "original" and h.loc[0, "step"] == 0
    assert h.loc[0, "nodes_after"] == 6 and bool(h.loc[0, "current"])


def test_apply_creates_a_verified_version():
    lab = chain_lab()
    r = lab.apply("test_drop_identity")
    assert r.modified and r.nodes_before == 6 and r.nodes_after == 3
    assert sorted(r.removed) == ["n1_Identity", "n3_Identity", "n5_Identity"]
    assert r.verify_passed is True and r.max_abs_err == 0.0 and r.first_failure is None
    h = lab.history
    assert len(h) == 2 and h.loc[1, "pass"] == "test_drop_identity"
    assert h.loc[1, "nodes_before"] == 6 and h.loc[1, "nodes_after"] == 3
    assert bool(h.loc[1, "verify_passed"]) and bool(h.loc[1, "current"])
    assert h.loc[1, "seconds"] > 0
    assert len(lab.index) == 3
    assert lab.original.history.loc[0, "nodes_after"] == 6


def test_selective_application_only_touches_chosen_matches():
    lab = chain_lab()
    r = lab.apply("test_drop_identity", matches=[IDS[1]])
    assert r.removed == ["n3_Identity"] and r.matches == [IDS[1]]
    assert {"n1_Identity", "n5_Identity"} <= set(lab.index.entries)
    assert "n3_Identity" not in lab.index.entries
    r = lab.apply("test_drop_identity", matches=IDS[0])  # one id as a plain str
    assert r.removed == ["n1_Identity"]


def test_unknown_match_id_names_close_matches():
    lab = chain_lab()
    with pytest.raises(UnknownNameError, match="n3_Identity"):
        lab.apply("test_drop_identity", matches=["test_drop_identity:n3_Identityy"])
    assert len(lab.history) == 1  # nothing recorded


def test_unknown_pass_and_bad_params():
    lab = chain_lab()
    with pytest.raises(UnknownNameError, match="test_drop_identity"):
        lab.apply("test_drop_identiti")
    with pytest.raises(PassError, match="must be float"):
        lab.apply("test_perturb_weight", delta="big")
    with pytest.raises(PassError, match="no parameter 'alpha'"):
        lab.apply("test_perturb_weight", alpha=1.0)
    with pytest.raises(InputError, match="match ids"):
        lab.apply("test_drop_identity", matches=[3])
    with pytest.raises(InputError, match="verify"):
        lab.apply("test_drop_identity", verify="yes")
    with pytest.raises(InputError, match="Unknown verification option"):
        lab.apply("test_drop_identity", verify={"tolerance": 1})


def test_noop_is_recorded_with_its_reason():
    lab = chain_lab()
    lab.apply("test_drop_identity")
    r = lab.apply("test_drop_identity")
    assert r.modified is False and r.reason == "no Identity node"
    assert r.verify_passed is None and r.model is lab.model
    h = lab.history
    assert len(h) == 3 and not bool(h.loc[2, "modified"])
    assert h.loc[2, "nodes_before"] == h.loc[2, "nodes_after"] == 3


def test_undo_redo_checkout():
    lab = chain_lab()
    for mid in IDS:
        lab.apply("test_drop_identity", matches=[mid])
    assert len(lab.index) == 3
    lab.undo()
    assert len(lab.index) == 4 and bool(lab.history.loc[2, "current"])
    lab.undo()
    lab.undo()
    assert len(lab.index) == 6
    with pytest.raises(InputError, match="Nothing to undo"):
        lab.undo()
    lab.redo()
    assert len(lab.index) == 5
    lab.checkout(3)
    assert len(lab.index) == 3
    with pytest.raises(InputError, match="Nothing to redo"):
        lab.redo()
    lab.checkout(-2)
    assert lab.history.loc[2, "current"]
    with pytest.raises(InputError, match="steps 0..3"):
        lab.checkout(7)
    with pytest.raises(InputError, match="int"):
        lab.checkout("1")


def test_apply_after_undo_drops_the_redo_tail():
    lab = chain_lab()
    lab.apply("test_drop_identity", matches=[IDS[0]])
    lab.apply("test_drop_identity", matches=[IDS[1]])
    lab.checkout(0)
    lab.apply("test_drop_identity", matches=[IDS[2]])
    h = lab.history
    assert list(h.step) == [0, 1]
    assert lab.results[1].removed == ["n5_Identity"]
    with pytest.raises(InputError):
        lab.redo()


def test_versions_are_independent_models():
    lab = chain_lab()
    v0 = lab.model
    lab.apply("test_drop_identity")
    assert len(v0.index) == 6 and [n.op_type for n in v0.graph].count("Identity") == 3
    assert lab.original.model is v0


def test_provenance_composes_over_three_steps_and_survives_save(tmp_path):
    lab = onnx_lab.open("sample:convnet")
    lab.apply("fuse_conv_add_bias")
    lab.apply("fuse_conv_bn")
    lab.apply("eliminate_identity")
    assert list(lab.history["pass"]) == ["original", "fuse_conv_add_bias", "fuse_conv_bn",
                                          "eliminate_identity"]
    assert all(lab.history.loc[1:, "verify_passed"])
    org = lab.origins
    assert set(org["/block2/conv/Conv"]) == {"/block2/conv/Conv", "/block2/bias/Add",
                                              "/block2/bn/BatchNormalization"}
    assert set(org["/stem/conv/Conv"]) == {"/stem/conv/Conv", "/stem/bn/BatchNormalization"}
    assert org["/head/fc/Gemm"] == ["/head/fc/Gemm"]
    original_ids = set(lab.original.index.entries)
    assert all(set(v) <= original_ids for v in org.values())
    # stored in node metadata, so it survives save/load
    node = lab.index.node("/block2/conv/Conv")
    assert set(json.loads(node.metadata_props["onnx_lab.origin"])) == \
        set(org["/block2/conv/Conv"])
    path = lab.save(tmp_path / "opt.onnx")
    again = onnx_lab.open(path)
    assert origins(again.model) == org
    assert again.origins == org


def test_preset_records_only_the_passes_that_changed_the_model():
    lab = chain_lab()
    results = lab.apply_preset(["test_drop_identity", "test_drop_identity",
                                "test_perturb_weight"])
    assert [r.modified for r in results] == [True, False, True]
    assert results[1].reason == "no Identity node"
    assert list(lab.history["pass"]) == ["original", "test_drop_identity",
                                          "test_perturb_weight"]
    assert results[0].verify_passed and results[2].verify_passed is False
    lab.undo()
    assert lab.history.loc[1, "current"]
    with pytest.raises(UnknownNameError, match="preset"):
        lab.apply_preset("fast")
    with pytest.raises(PassError, match="non-empty"):
        lab.apply_preset([])


def test_apply_restores_the_cycle_collector():
    import gc

    lab = chain_lab()
    assert gc.isenabled()
    lab.apply_preset(["test_drop_identity"])
    assert gc.isenabled()
    with pytest.raises(UnknownNameError):
        lab.apply("no_such_pass")
    assert gc.isenabled()
    gc.disable()
    try:  # a caller's disabled collector stays disabled
        lab.apply_preset(["test_drop_identity"])
        assert not gc.isenabled()
    finally:
        gc.enable()
