"""Which CPUs saturate onnxruntime's U8S8 int8 kernels (runtime/cpu.py), and what the int8
conversions do about it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from numpy.testing import assert_array_equal

import onnx_lab
from onnx_lab.runtime import cpu


def test_flags_decide_the_saturation(monkeypatch):
    monkeypatch.delenv("ONNX_LAB_INT8_REDUCE_RANGE", raising=False)
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    for flags, saturates in [({"avx2"}, True), ({"avx2", "avx512f"}, True),
                             ({"avx2", "avx512_vnni"}, False), ({"avx2", "avx_vnni"}, False),
                             ({"sse4_2"}, False)]:
        monkeypatch.setattr(cpu, "cpu_flags", lambda f=flags: frozenset(f))
        assert cpu.int8_saturates() is saturates, flags
    monkeypatch.setattr(cpu.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2"}))
    assert cpu.int8_saturates() is False


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("ONNX_LAB_INT8_REDUCE_RANGE", "1")
    assert cpu.int8_saturates() is True
    monkeypatch.setenv("ONNX_LAB_INT8_REDUCE_RANGE", "0")
    assert cpu.int8_saturates() is False


def _weights(lab) -> list[np.ndarray]:
    proto = lab.model.to_proto()
    return [onnx.numpy_helper.to_array(t) for t in proto.graph.initializer
            if t.data_type == onnx.TensorProto.INT8 and t.dims]


@pytest.mark.parametrize("forced, bound", [("1", 64), ("0", 127)])
def test_dynamic_int8_uses_seven_bit_weights_where_the_cpu_saturates(monkeypatch, forced, bound):
    monkeypatch.setenv("ONNX_LAB_INT8_REDUCE_RANGE", forced)
    lab = onnx_lab.open("sample:transformer_block", dims={"batch": 1, "seq": 8})
    weights = _weights(onnx_lab.to_int8_dynamic(lab))
    assert weights
    top = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    assert top <= bound and (top > 64) == (bound == 127)
    # an explicit argument wins over the CPU's answer
    explicit = _weights(onnx_lab.to_int8_dynamic(lab, reduce_range=forced == "0"))
    assert (max(int(np.abs(w.astype(np.int32)).max()) for w in explicit) > 64) == (forced == "1")


def test_static_int8_follows_the_same_rule(monkeypatch):
    lab = onnx_lab.open("sample:convnet")
    tops = {}
    for forced in ("1", "0"):
        monkeypatch.setenv("ONNX_LAB_INT8_REDUCE_RANGE", forced)
        tops[forced] = max(int(np.abs(w.astype(np.int32)).max())
                           for w in _weights(onnx_lab.to_int8_static(lab, n=2)))
    assert tops["1"] <= 64 < tops["0"]
    assert_array_equal(sorted(tops), ["0", "1"])
