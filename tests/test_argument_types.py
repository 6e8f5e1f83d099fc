"""Arguments of the wrong type get a LabError naming the argument and the form it takes, as
wrong values do (found by calling the API as the docs write it, with a plausible slip)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import onnx_lab
from onnx_lab.errors import (
    DimError,
    ExtractError,
    InputError,
    PassError,
    ProviderError,
    SaveError,
)


def test_subpackages_are_attributes_after_a_plain_import():
    # the docs write onnx_lab.transforms.available(): a fresh interpreter, nothing else
    # imported first
    code = ("import onnx_lab; print(len(onnx_lab.transforms.available()) > 10, "
            "onnx_lab.numerics.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "onnx_lab.numerics"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        onnx_lab.nope  # noqa: B018


@pytest.mark.parametrize("call", [
    lambda: onnx_lab.open("sample:transformer_block", dims="batch=1"),
    lambda: onnx_lab.open("sample:transformer_block", dims=[("batch", 1)]),
    lambda: onnx_lab.open("sample:convnet").cost(dims=[1]),
    lambda: onnx_lab.open("sample:convnet", shapes="x:1x3x32x32"),
    lambda: onnx_lab.open("sample:convnet", shapes={"input": "1x3x32x32"}),
])
def test_dims_and_shapes_of_the_wrong_type(call):
    with pytest.raises(DimError) as e:
        call()
    assert "must be" in str(e.value) and e.value.fix


def test_render_around_and_report_paths_of_the_wrong_type(tmp_path):
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(InputError, match="around must be a node id"):
        lab.render(around=123)
    with pytest.raises(SaveError, match="must be a file path, got int"):
        lab.report(123)


def test_repro_needs_a_comparison(tmp_path):
    lab = onnx_lab.open("sample:convnet")
    lab.apply("fuse_conv_bn")
    for first in (lab, str(tmp_path / "model.onnx")):
        with pytest.raises(InputError, match="needs a comparison") as e:
            onnx_lab.repro(first, tmp_path / "out")
        assert "onnx_lab.compare" in e.value.fix
    c = onnx_lab.compare(lab.original, lab)
    with pytest.raises(InputError, match="divergence must be a dict"):
        onnx_lab.repro(c, tmp_path / "out", divergence="/stem/conv/Conv")


@pytest.fixture(scope="module")
def convnet():
    return onnx_lab.open("sample:convnet")


# Each slip was Python's TypeError/ValueError/IndexError/AttributeError from inside onnx_lab
# (a list is no key of the pass registry, list(5), dict('x'), numpy's histogram, feeds[0]).
@pytest.mark.parametrize("call,kind,words", [
    (lambda lab: lab.apply(["fuse_conv_bn"]), InputError, "apply_preset"),
    (lambda lab: lab.apply("fuse_conv_bn", matches=5), InputError, "matches must be"),
    (lambda lab: lab.apply_preset(5), PassError, "non-empty list"),
    (lambda lab: lab.apply_preset(None), PassError, "non-empty list"),
    (lambda lab: lab.apply_preset("safe", params="fold_constants"), PassError,
     "params is str"),
    (lambda lab: lab.check(providers=5), ProviderError, "providers must be"),
    (lambda lab: lab.profile(runs=1, providers=["cpu", 5]), ProviderError,
     "providers must be"),
    (lambda lab: onnx_lab.compare(lab, lab, providers={"cpu": 1}), ProviderError,
     "providers must be"),
    (lambda lab: lab.extract(outputs=5), ExtractError, "outputs must be"),
    (lambda lab: lab.weight_stats(5), InputError, "names must be"),
    (lambda lab: lab.weight_histogram("stem.conv.weight", bins=-1), InputError,
     "bins must be"),
    (lambda lab: lab.weight_histogram("stem.conv.weight", bins="many"), InputError,
     "bins must be"),
    (lambda lab: onnx_lab.compare(lab, lab, feeds=[]), InputError, "empty list"),
])
def test_wrong_types_are_lab_errors(convnet, call, kind, words):
    with pytest.raises(kind) as e:
        call(convnet)
    assert words in str(e.value) and e.value.fix
    assert convnet.version_history.version.step == 0  # nothing was applied


def test_one_name_where_a_list_is_taken_is_that_name(convnet):
    # block_list="Relu" was read letter by letter: "Unknown node id or op type 'R'"
    half = convnet.to_fp16(block_list="Relu")
    one = convnet.to_fp16(block_list=["Relu"])
    assert list(half.nodes["op_type"]) == list(one.nodes["op_type"])
    q = convnet.to_int8_dynamic(nodes_to_exclude="/block1/conv/Conv")
    q_list = convnet.to_int8_dynamic(nodes_to_exclude=["/block1/conv/Conv"])
    assert set(q.nodes["node_id"]) == set(q_list.nodes["node_id"])
    assert "/block1/conv/Conv" in set(q.nodes["node_id"])  # kept in float, not quantized


@pytest.mark.parametrize("threads", [-1, 1.5, True, "2"])
def test_threads_that_are_no_count_are_refused(threads):
    # -1 was handed to onnxruntime as it came
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(InputError, match="threads must be an int >= 0"):
        lab.profile(threads=threads, runs=1)


def test_a_scale_that_overflows_the_weight_is_refused():
    # factor=1e300 wrote inf weights (a version whose every output is NaN)
    lab = onnx_lab.open("sample:convnet")
    with pytest.raises(PassError, match="overflows float32") as e:
        lab.scale_initializer("stem.conv.weight", 1e300)
    assert "factor below" in e.value.fix
    assert list(lab.history["pass"]) == ["original"]  # nothing applied
    lab.scale_initializer("stem.conv.weight", 2.0)  # a factor in range still works
