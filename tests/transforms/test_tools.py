"""Tool wrappers (onnxsim, onnxoptimizer:*, ort:*) as passes with provenance and verification."""

from __future__ import annotations

import onnx
import onnxoptimizer
import pytest
from _machinery import ir3_conv_bn_proto, save_external

import onnx_lab
from onnx_lab.errors import PassError
from onnx_lab.samples import build
from onnx_lab.transforms import available

STEM = {"/stem/conv/Conv", "/stem/bn/BatchNormalization"}


def test_every_onnxoptimizer_pass_is_registered():
    names = set(available().name)
    for p in onnxoptimizer.get_available_passes():
        assert f"onnxoptimizer:{p}" in names
    assert {"onnxsim", "ort:basic", "ort:extended", "ort:all"} <= names
    df = available().set_index("name")
    assert df.loc["onnxsim", "kind"] == "tool"
    assert "skip_fuse_bn" in df.loc["onnxsim", "parameters"]


def test_onnxsim_with_provenance_and_verification():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxsim")
    assert r.modified and r.nodes_after < r.nodes_before
    assert r.verify_passed, r.verification.loc[~r.verification.passed]
    assert set(lab.origins["/stem/conv/Conv"]) == STEM
    assert set(r.provenance["/stem/conv/Conv"]) == STEM
    assert "/stem/bn/BatchNormalization" in r.removed
    # the fused conv output is compared with the BN output it stands for
    rep = r.verification.set_index("node_id")
    assert rep.loc["/stem/conv/Conv", "ref_node_id"] == "/stem/bn/BatchNormalization"


def test_onnxsim_params_are_passed_and_checked():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxsim", skip_fuse_bn=True)
    assert r.params["skip_fuse_bn"] is True
    assert "BatchNormalization" in set(lab.nodes.op_type)
    with pytest.raises(PassError, match="skip_fuse_bn"):
        lab.apply("onnxsim", skip_fuse_bn="no")


def test_onnxsim_fixes_input_shapes_from_the_lab_dims():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("onnxsim")
    assert r.verify_passed
    assert any("input shapes" in n for n in r.notes)
    assert lab.inputs.loc[0, "shape"] == (1, 8, 32)
    assert lab.dims == {}  # the dims are fixed now


def test_onnxoptimizer_pass_fuse_bn_into_conv():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxoptimizer:fuse_bn_into_conv")
    assert r.modified and r.verify_passed
    assert "BatchNormalization" in set(lab.original.nodes.op_type)
    assert set(lab.origins["/block1/conv/Conv"]) == {"/block1/conv/Conv",
                                                     "/block1/bn/BatchNormalization"}


def test_onnxoptimizer_noop_has_a_reason():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("onnxoptimizer:fuse_consecutive_concats")
    assert r.modified is False and "unchanged" in r.reason


@pytest.mark.parametrize("level", ["basic", "extended"])
def test_ort_offline_levels(level):
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply(f"ort:{level}")
    assert r.modified and r.verify_passed
    assert STEM <= set(lab.origins["/stem/conv/Conv"])
    if level == "extended":
        assert "FusedConv" in set(lab.nodes.op_type)
        assert any("com.microsoft" in n for n in r.notes)
        assert "/stem/relu/Relu" in lab.origins["/stem/conv/Conv"]


def test_ort_all_marks_unknown_provenance():
    lab = onnx_lab.open("sample:convnet")
    r = lab.apply("ort:all")
    assert r.modified and r.verify_passed
    assert any("machine" in n for n in r.notes)
    unknown = [k for k, v in r.provenance.items() if v == []]
    assert all(lab.origins[k] == [] for k in unknown)


def test_tools_on_a_model_with_external_data(tmp_path):
    path = tmp_path / "convnet.onnx"
    save_external(build("convnet"), path)
    before = path.read_bytes(), (tmp_path / "convnet.onnx.data").read_bytes()
    lab = onnx_lab.open(path)
    assert lab.model.has_external_data
    for name in ("onnxsim", "ort:basic"):
        lab.checkout(0)
        r = lab.apply(name)
        assert r.modified and r.verify_passed, name
    assert lab.original.model.has_external_data  # step 0 still reads the file
    assert (path.read_bytes(), (tmp_path / "convnet.onnx.data").read_bytes()) == before


def test_ort_fusions_of_a_transformer_block_are_traced():
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    r = lab.apply("ort:extended")
    assert r.verify_passed
    ln = [k for k in r.provenance if "LayerNormFusion" in k]
    assert ln and {"/layer.0/ln/ReduceMean", "/layer.0/ln/Sqrt", "/layer.0/ln/Add_1"} <= \
        set(lab.origins[ln[0]])
    scale = [k for k in r.provenance if "MatMulScaleFusion" in k]
    assert scale and set(lab.origins[scale[0]]) == {"/layer.0/attention/core/MatMul",
                                                     "/layer.0/attention/core/Div"}
    # the fused LayerNorm output is compared with the last node it replaced
    rep = r.verification.set_index("node_id")
    assert rep.loc[ln[0], "match"] in ("name", "provenance")


def test_ort_result_of_an_ir3_model_stays_valid_for_the_next_tool():
    # onnxruntime keeps IR 3 but does not list the weights it creates as graph inputs; the
    # next tool (onnxsim) and the checker refused the result.
    m = ir3_conv_bn_proto()
    lab = onnx_lab.open(m)
    r = lab.apply("ort:basic")
    assert r.modified and r.verify_passed
    assert "BatchNormalization" not in set(lab.nodes.op_type)
    proto = lab.model.to_proto()
    assert proto.ir_version == 3
    onnx.checker.check_model(proto)
    # The entries of the folded weights are not left behind as inputs to feed.
    assert list(lab.inputs.name) == ["x"]
    assert {i.name for i in proto.graph.input} == {"x"} | {t.name for t in proto.graph.initializer}
    assert lab.apply("onnxsim").verify_passed is not False
    assert list(lab.inputs.name) == ["x"]
