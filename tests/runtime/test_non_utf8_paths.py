"""A model in a folder whose name is not UTF-8 (valid on Linux: any bytes but '/' and NUL).

onnxruntime's Python binding takes a path only as a str that encodes to UTF-8; Python gives
such a name back with surrogate escapes, and the binding raised TypeError ("incompatible
function arguments"): lab.profile() ended in that traceback, and lab.save() there refused a
good model as one that "would not load". runtime/_paths.ort_path leads the binding there
through a link whose name is UTF-8.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.runtime._paths import ort_path

pytestmark = pytest.mark.skipif(sys.platform != "linux" or sys.getfilesystemencoding() != "utf-8",
                                reason="a folder name that is not UTF-8 is a Linux case")


def _model(folder: bytes, name: bytes) -> str:
    """MatMul + Relu with a 64 KiB weight in an external data file beside the model."""
    w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
         helper.make_node("Identity", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 128])],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    # onnx's own writer cannot take such a path either: written under UTF-8 names, renamed
    staging = os.path.dirname(folder) + b"/staging"
    os.makedirs(staging)
    onnx.save(m, os.fsdecode(staging + b"/m.onnx"), save_as_external_data=True,
              location="m.onnx.data", size_threshold=1024)
    os.rename(staging + b"/m.onnx", staging + b"/" + name)
    os.rename(staging, folder)
    return os.fsdecode(os.path.join(folder, name))


@pytest.mark.parametrize("name", [b"m.onnx", b"m\xfa.onnx"])
def test_a_model_in_a_folder_whose_name_is_not_utf8(tmp_path, name):
    folder = os.fsencode(str(tmp_path)) + b"/d\xff\xfe"
    path = _model(folder, name)
    with pytest.raises(UnicodeEncodeError):
        path.encode("utf-8")  # the case itself
    before = open(path, "rb").read()
    lab = onnx_lab.open(path)
    assert lab.check().query("severity == 'error'").empty
    p = lab.profile(runs=2, warmup=1)  # was: TypeError from add_session_config_entry
    assert len(p.nodes) >= 2
    r = lab.apply_preset("safe")
    assert any(x.modified and x.verify_passed for x in r)  # the Identity goes, verified
    out = os.fsdecode(folder + b"/out\xfa.onnx")
    lab.save(out)  # was: refused, "would not load in onnxruntime from its folder"
    assert open(path, "rb").read() == before
    # the independent check: a fresh session of the written file (through the link)
    x = np.ones((2, 128), np.float32)
    got = ort.InferenceSession(ort_path(out), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    ref = ort.InferenceSession(ort_path(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_array_equal(got, ref)


def test_a_utf8_path_is_given_as_it_is(tmp_path):
    assert ort_path(tmp_path / "m.onnx") == str(tmp_path / "m.onnx")
